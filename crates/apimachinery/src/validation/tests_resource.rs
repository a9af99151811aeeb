//! Tests of `resource.k8s.io/v1` defaulting and validation: valid objects pass, and each bad case
//! yields upstream's path, type and message.

use serde_json::{json, Value};

use super::{validate_create, validate_update};
use crate::defaults::apply_defaults;

const G: &str = "resource.k8s.io";

fn defaulted(kind: &str, mut obj: Value) -> Value {
    apply_defaults(G, kind, &mut obj);
    obj
}

fn errs(kind: &str, obj: &Value) -> Vec<String> {
    validate_create(G, kind, obj)
        .iter()
        .map(|e| e.to_string())
        .collect()
}

fn update_errs(kind: &str, new: &Value, old: &Value) -> Vec<String> {
    validate_update(G, kind, new, old)
        .iter()
        .map(|e| e.to_string())
        .collect()
}

fn claim() -> Value {
    defaulted(
        "ResourceClaim",
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": "gpu", "namespace": "default"},
            "spec": {"devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com",
                        "selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}],
                        "tolerations": [{"key": "example.com/dirty", "value": "yes", "effect": "NoSchedule"}]}},
                    {"name": "nic", "firstAvailable": [
                        {"name": "fast", "deviceClassName": "nic.example.com", "allocationMode": "All"},
                        {"name": "slow", "deviceClassName": "nic.example.com"}]}
                ],
                "constraints": [{"requests": ["gpu", "nic/fast"], "matchAttribute": "example.com/numa"}],
                "config": [{"requests": ["gpu"], "opaque": {"driver": "gpu.example.com", "parameters": {"mode": "fast"}}}]
            }}
        }),
    )
}

fn slice() -> Value {
    defaulted(
        "ResourceSlice",
        json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "node-1-gpu.example.com"},
            "spec": {
                "driver": "gpu.example.com", "nodeName": "node-1",
                "pool": {"name": "node-1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "gpu-0",
                     "attributes": {"model": {"string": "A100"}, "example.com/numa": {"int": 0},
                                    "driverVersion": {"version": "1.2.3-rc.1+build.5"}},
                     "capacity": {"memory": {"value": "40Gi"}},
                     "taints": [{"key": "example.com/unhealthy", "effect": "NoSchedule"}]},
                    {"name": "gpu-1"}
                ]
            }
        }),
    )
}

#[test]
fn defaults_follow_upstream() {
    let c = claim();
    let r = &c["spec"]["devices"]["requests"];
    assert_eq!(r[0]["exactly"]["allocationMode"], "ExactCount");
    assert_eq!(r[0]["exactly"]["count"], 1);
    assert_eq!(r[0]["exactly"]["tolerations"][0]["operator"], "Equal");
    assert_eq!(r[1]["firstAvailable"][0]["allocationMode"], "All");
    assert!(r[1]["firstAvailable"][0].get("count").is_none());
    assert_eq!(r[1]["firstAvailable"][1]["allocationMode"], "ExactCount");
    assert_eq!(r[1]["firstAvailable"][1]["count"], 1);

    let t = defaulted(
        "ResourceClaimTemplate",
        json!({"metadata": {"name": "t"}, "spec": {"spec": {"devices": {"requests": [
            {"name": "a", "exactly": {"deviceClassName": "c", "count": 3}}]}}}}),
    );
    let ex = &t["spec"]["spec"]["devices"]["requests"][0]["exactly"];
    assert_eq!(ex["allocationMode"], "ExactCount");
    assert_eq!(ex["count"], 3);

    let s = slice();
    let added = s["spec"]["devices"][0]["taints"][0]["timeAdded"]
        .as_str()
        .unwrap();
    assert!(added.ends_with('Z') && added.len() == 20, "{added}");
}

#[test]
fn valid_objects_pass() {
    assert_eq!(errs("ResourceClaim", &claim()), Vec::<String>::new());
    assert_eq!(errs("ResourceSlice", &slice()), Vec::<String>::new());
    let class = json!({"metadata": {"name": "gpu.example.com"}, "spec": {
        "selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}],
        "config": [{"opaque": {"driver": "gpu.example.com", "parameters": {"a": 1}}}],
        "extendedResourceName": "example.com/gpu"}});
    assert_eq!(errs("DeviceClass", &class), Vec::<String>::new());
    let template = json!({"metadata": {"name": "t", "namespace": "default"}, "spec": {
        "metadata": {"labels": {"app": "x"}, "creationTimestamp": null},
        "spec": claim()["spec"].clone()}});
    assert_eq!(
        errs("ResourceClaimTemplate", &template),
        Vec::<String>::new()
    );
}

#[test]
fn claim_request_errors() {
    let c = defaulted(
        "ResourceClaim",
        json!({"metadata": {"name": "c", "namespace": "default"}, "spec": {"devices": {
            "requests": [
                {"name": "Bad_Name"},
                {"name": "both", "exactly": {"deviceClassName": "c"}, "firstAvailable": [{"name": "x", "deviceClassName": "c"}]},
                {"name": "nocls", "exactly": {"allocationMode": "All", "count": 2}},
                {"name": "mode", "exactly": {"deviceClassName": "c", "allocationMode": "Some"}},
                {"name": "nocls", "exactly": {"deviceClassName": "c", "count": -1,
                    "selectors": [{}, {"cel": {"expression": ""}}],
                    "tolerations": [{"operator": "Exists", "value": "v"}, {"key": "k", "operator": "Maybe", "effect": "PreferNoSchedule"}]}}
            ],
            "constraints": [{"requests": ["missing", "a/b/c"]}],
            "config": [{"requests": ["nocls"], "opaque": {"driver": "", "parameters": [1]}}, {}]
        }}}),
    );
    let r = "spec.devices.requests";
    let ref_msg = "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'";
    assert_eq!(
        errs("ResourceClaim", &c),
        vec![
            format!("{r}[0].name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
            format!("{r}[0]: Required value: exactly one of `exactly` or `firstAvailable` is required"),
            format!("{r}[1]: Invalid value: null: exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set"),
            format!("{r}[2].exactly.deviceClassName: Required value"),
            format!("{r}[2].exactly.count: Invalid value: 2: must not be specified when allocationMode is 'All'"),
            format!("{r}[3].exactly.allocationMode: Unsupported value: \"Some\": supported values: \"All\", \"ExactCount\""),
            format!("{r}[4].exactly.selectors[0].cel: Required value"),
            format!("{r}[4].exactly.selectors[1].cel.expression: Invalid value: \"\": compilation failed: ERROR: <input>:1:1: Syntax error: mismatched input '<EOF>' expecting {{'[', '{{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}}\n | \n | ^"),
            format!("{r}[4].exactly.count: Invalid value: -1: must be greater than zero"),
            format!("{r}[4].exactly.tolerations[0].value: Invalid value: \"v\": must be empty for operator `Exists`"),
            format!("{r}[4].exactly.tolerations[1].operator: Unsupported value: \"Maybe\": supported values: \"Equal\", \"Exists\""),
            format!("{r}[4].exactly.tolerations[1].effect: Unsupported value: \"PreferNoSchedule\": supported values: \"NoExecute\", \"NoSchedule\", \"None\""),
            format!("{r}[4]: Duplicate value: \"nocls\""),
            format!("spec.devices.constraints[0].requests[0]: Invalid value: \"missing\": {ref_msg}"),
            format!("spec.devices.constraints[0].requests[1]: Invalid value: \"a/b/c\": {ref_msg}"),
            "spec.devices.constraints[0].matchAttribute: Required value".to_string(),
            "spec.devices.config[0].opaque.driver: Required value".to_string(),
            "spec.devices.config[0].opaque.driver: Invalid value: \"\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string(),
            "spec.devices.config[0].opaque.parameters: Invalid value: \"<value omitted>\": must be a valid JSON object".to_string(),
            "spec.devices.config[1].opaque: Required value".to_string(),
        ]
    );
}

#[test]
fn claim_limits_and_constraint_names() {
    let requests: Vec<Value> = (0..33)
        .map(|i| json!({"name": format!("r{i}"), "exactly": {"deviceClassName": "c"}}))
        .collect();
    let c = defaulted(
        "ResourceClaim",
        json!({"metadata": {"name": "c", "namespace": "ns"}, "spec": {"devices": {
            "requests": requests,
            "constraints": [{"matchAttribute": "numa"}, {"distinctAttribute": "example.com/a-b"}]}}}),
    );
    assert_eq!(
        errs("ResourceClaim", &c),
        vec![
            "spec.devices.requests: Too many: 33: must have at most 32 items",
            "spec.devices.constraints[0].matchAttribute: Invalid value: \"numa\": a fully qualified name must be a domain and a name separated by a slash",
            "spec.devices.constraints[1].distinctAttribute: Invalid value: \"a-b\": a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is '[A-Za-z_][A-Za-z0-9_]*')",
        ]
    );
}

#[test]
fn claim_spec_is_immutable_and_status_follows_upstream() {
    let old = claim();
    let mut new = old.clone();
    new["spec"]["devices"]["requests"][0]["exactly"]["count"] = json!(2);
    let e = update_errs("ResourceClaim", &new, &old);
    assert_eq!(e.len(), 1);
    assert!(
        e[0].starts_with("spec: Invalid value: ") && e[0].ends_with(": field is immutable"),
        "{e:?}"
    );

    // Status: an allocation with a reservation and device statuses.
    let uid = "5bd7bcc7-53c6-4d34-9f46-a1e5bbd7a8b0";
    let mut allocated = old.clone();
    allocated["status"] = json!({
        "allocation": {"devices": {"results": [
            {"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"},
            {"request": "nic/fast", "driver": "nic.example.com", "pool": "node-1", "device": "eth1"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": uid}],
        "devices": [{"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0",
            "conditions": [{"type": "Ready", "status": "True", "reason": "Up", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "networkData": {"ips": ["10.0.0.1/24"]}}]
    });
    assert_eq!(
        update_errs("ResourceClaim", &allocated, &old),
        Vec::<String>::new()
    );

    let mut bad = old.clone();
    bad["status"] = json!({
        "allocation": {"devices": {"results": [
            {"request": "gpu/x", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0", "shareID": "nope"}],
            "config": [{"source": "FromNowhere", "opaque": {"driver": "gpu.example.com", "parameters": {}}}]}},
        "reservedFor": [{"resource": "pods", "name": "p", "uid": uid}, {"uid": uid}],
        "devices": [{"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-9",
            "conditions": [{"type": "Ready", "status": "Yes", "reason": "bad reason"}]},
            {"driver": "gpu.example.com", "pool": "node-1", "device": "gpu-9"}]
    });
    let s = "status";
    assert_eq!(
        update_errs("ResourceClaim", &bad, &old),
        vec![
            format!("{s}.reservedFor[1].resource: Required value"),
            format!("{s}.reservedFor[1].name: Required value"),
            format!("{s}.reservedFor[1]: Duplicate value: \"{uid}\""),
            format!("{s}.devices[0]: Invalid value: gpu.example.com/node-1/gpu-9: must be an allocated device in the claim"),
            format!("{s}.devices[0].conditions[0].status: Unsupported value: \"Yes\": supported values: \"False\", \"True\", \"Unknown\""),
            format!("{s}.devices[0].conditions[0].lastTransitionTime: Required value: must be set"),
            format!("{s}.devices[0].conditions[0].reason: Invalid value: \"bad reason\": a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')"),
            format!("{s}.devices[1]: Invalid value: gpu.example.com/node-1/gpu-9: must be an allocated device in the claim"),
            format!("{s}.devices[1]: Duplicate value: gpu.example.com/node-1/gpu-9"),
            format!("{s}.allocation.devices.results[0].request: Invalid value: \"gpu/x\": must be the name of a request in the claim or the name of a request and a subrequest separated by '/'"),
            format!("{s}.allocation.devices.results[0].shareID: Invalid value: \"nope\": error validating uid: invalid UUID length: 4"),
            format!("{s}.allocation.devices.config[0].source: Unsupported value: \"FromNowhere\": supported values: \"FromClaim\", \"FromClass\""),
        ]
    );

    // Reservations need an allocation; a set allocation is immutable.
    let mut reserved_only = old.clone();
    reserved_only["status"] =
        json!({"reservedFor": [{"resource": "pods", "name": "p", "uid": uid}]});
    assert_eq!(
        update_errs("ResourceClaim", &reserved_only, &old),
        vec!["status.reservedFor: Forbidden: may not be specified when `allocated` is not set"]
    );
    let mut changed = allocated.clone();
    changed["status"]["allocation"]["devices"]["results"][0]["device"] = json!("gpu-1");
    let e = update_errs("ResourceClaim", &changed, &allocated);
    assert_eq!(e.len(), 2, "{e:?}");
    assert!(e[0].starts_with("status.devices[0]: Invalid value: gpu.example.com/node-1/gpu-0: must be an allocated device"));
    assert!(
        e[1].starts_with("status.allocation: Invalid value: ")
            && e[1].ends_with("field is immutable")
    );

    // While the claim is being deleted, reservations may only shrink.
    let mut deleting = allocated.clone();
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut more = deleting.clone();
    more["status"]["reservedFor"].as_array_mut().unwrap().push(
        json!({"resource": "pods", "name": "q", "uid": "6bd7bcc7-53c6-4d34-9f46-a1e5bbd7a8b0"}),
    );
    assert_eq!(
        update_errs("ResourceClaim", &more, &deleting),
        vec!["status.reservedFor: Forbidden: new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set"]
    );
}

#[test]
fn template_rules() {
    let t = json!({"metadata": {"name": "t", "namespace": "default"}, "spec": {
        "metadata": {"name": "x", "uid": "u", "labels": {"a": "-"}},
        "spec": {"devices": {"requests": [{"name": "a"}]}}}});
    assert_eq!(
        errs("ResourceClaimTemplate", &t),
        vec![
            "spec.metadata.labels: Invalid value: \"-\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
            "spec.metadata.name: Forbidden: cannot be set",
            "spec.metadata.uID: Forbidden: cannot be set",
            "spec.spec.devices.requests[0]: Required value: exactly one of `exactly` or `firstAvailable` is required",
        ]
    );
    let old = json!({"metadata": {"name": "t", "namespace": "default"}, "spec": {"spec": {}}});
    let mut new = old.clone();
    new["spec"]["metadata"] = json!({"labels": {"a": "b"}});
    let e = update_errs("ResourceClaimTemplate", &new, &old);
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("spec: Invalid value: ") && e[0].ends_with("field is immutable"));
}

#[test]
fn device_class_rules() {
    let long = "x".repeat(10 * 1024 + 1);
    let class = json!({"metadata": {"name": "c"}, "spec": {
        "selectors": [{"cel": {"expression": long}}, {}],
        "config": [{"opaque": {"driver": "Bad_Driver"}}],
        "extendedResourceName": "cpu"}});
    assert_eq!(
        errs("DeviceClass", &class),
        vec![
            "spec.selectors[0].cel.expression: Too long: may not be more than 10240 bytes",
            "spec.selectors[1].cel: Required value",
            "spec.config[0].opaque.driver: Invalid value: \"Bad_Driver\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
            "spec.config[0].opaque.parameters: Required value",
            "spec.extendedResourceName: Invalid value: \"cpu\": must be a valid extended resource name",
        ]
    );
    // An unchanged selector counts as stored and is not re-checked.
    let old =
        json!({"metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": long}}]}});
    assert_eq!(update_errs("DeviceClass", &old, &old), Vec::<String>::new());
}

#[test]
fn slice_rules() {
    let s = json!({"metadata": {"name": "s"}, "spec": {
    "driver": "", "nodeName": "node-1", "allNodes": true,
    "pool": {"name": "a/B", "generation": -1, "resourceSliceCount": 0},
    "sharedCounters": [{"name": "set"}],
    "devices": [
        {"name": "dev", "nodeName": "n",
         "attributes": {"a/b/c": {"int": 1}, "empty": {}, "two": {"int": 1, "bool": true},
                        "v": {"version": "1.02.3"}, "s": {"strings": []}},
         "capacity": {"mem": {"value": "1", "requestPolicy": {"default": "1"}}},
         "taints": [{"key": "k", "effect": "PreferNoSchedule"}, {"key": "k"}],
         "consumesCounters": [{"counterSet": "set", "counters": {"Bad": {"value": "1"}}}]},
        {"name": "dev"}
    ]}});
    let d = "spec.devices[0]";
    assert_eq!(
        errs("ResourceSlice", &s),
        vec![
            "spec.driver: Required value".to_string(),
            "spec.driver: Invalid value: \"\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string(),
            "spec.pool.name: Invalid value: \"B\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".to_string(),
            "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero".to_string(),
            "spec.pool.generation: Invalid value: -1: must be greater than or equal to zero".to_string(),
            "spec: Invalid value: \"{`nodeName`, `allNodes`}\": exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required, but multiple fields are set".to_string(),
            "spec: Invalid value: \"\": only one of `sharedCounters` or `devices` is allowed".to_string(),
            format!("{d}.attributes: Invalid value: \"a/b/c\": must not contain more than one slash"),
            format!("{d}.attributes[empty]: Invalid value: \"\": exactly one value must be specified"),
            format!("{d}.attributes[two]: Invalid value: {{\"int\":1,\"bool\":true}}: exactly one value must be specified"),
            format!("{d}.attributes[v].version: Invalid value: \"1.02.3\": must be a string compatible with semver.org spec 2.0.0"),
            format!("{d}.attributes[s].strings: Invalid value: []string{{}}: must not be empty if specified"),
            format!("{d}.capacity[mem].requestPolicy: Forbidden: allowMultipleAllocations must be true"),
            format!("{d}.taints[0].effect: Unsupported value: \"PreferNoSchedule\": supported values: \"NoExecute\", \"NoSchedule\", \"None\""),
            format!("{d}.taints[1].effect: Required value"),
            format!("{d}.consumesCounters[0].counters: Invalid value: \"Bad\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
            format!("{d}: Invalid value: null: `nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec"),
            "spec.devices[1]: Duplicate value: \"dev\"".to_string(),
            "spec.sharedCounters[0].counters: Required value".to_string(),
        ]
    );

    let none = json!({"metadata": {"name": "s"}, "spec": {
        "driver": "d.example.com", "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
        "perDeviceNodeSelection": true, "devices": [{"name": "a"}]}});
    assert_eq!(
        errs("ResourceSlice", &none),
        vec!["spec.devices[0]: Required value: exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec"]
    );
    let unset = json!({"metadata": {"name": "s"}, "spec": {
        "driver": "d.example.com", "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1}}});
    assert_eq!(
        errs("ResourceSlice", &unset),
        vec!["spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required"]
    );

    let old = slice();
    let mut new = old.clone();
    new["spec"]["nodeName"] = json!("node-2");
    new["spec"]["driver"] = json!("other.example.com");
    new["spec"]["pool"]["name"] = json!("other");
    assert_eq!(
        update_errs("ResourceSlice", &new, &old),
        vec![
            "spec.pool.name: Invalid value: \"other\": field is immutable",
            "spec.driver: Invalid value: \"other.example.com\": field is immutable",
            "spec.nodeName: Invalid value: \"node-2\": field is immutable",
        ]
    );
}

#[test]
fn slice_device_limits() {
    let devices: Vec<Value> = (0..65)
        .map(|i| json!({"name": format!("d{i}"), "taints": [{"key": "k", "effect": "NoSchedule"}]}))
        .collect();
    let s = json!({"metadata": {"name": "s"}, "spec": {"driver": "d.example.com", "allNodes": true,
        "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1}, "devices": devices}});
    assert_eq!(
        errs("ResourceSlice", &s),
        vec!["spec.devices: Too many: 65: must have at most 64 items"]
    );
    let attrs: serde_json::Map<String, Value> = (0..33)
        .map(|i| (format!("a{i}"), json!({"bool": true})))
        .collect();
    let s = json!({"metadata": {"name": "s"}, "spec": {"driver": "d.example.com", "allNodes": true,
        "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
        "devices": [{"name": "d", "attributes": attrs}]}});
    assert_eq!(
        errs("ResourceSlice", &s),
        vec!["spec.devices[0]: Invalid value: 33: the total number of attributes and capacities must not exceed 32"]
    );
}

#[test]
fn capacity_request_policies_are_checked_against_the_capacity() {
    let slice = |caps: Value| {
        json!({"metadata": {"name": "s"}, "spec": {
            "driver": "d.example.com", "nodeName": "n",
            "pool": {"name": "p", "generation": 0, "resourceSliceCount": 1},
            "devices": [{"name": "dev", "allowMultipleAllocations": true, "capacity": caps}]}})
    };
    let good = slice(json!({
        "mem": {"value": "8Gi", "requestPolicy": {"default": "1Gi",
            "validRange": {"min": "1Gi", "max": "4Gi", "step": "1Gi"}}},
        "bw": {"value": "100", "requestPolicy": {"default": "10", "validValues": ["10", "20"]}}}));
    assert_eq!(errs("ResourceSlice", &good), Vec::<String>::new());
    let p = "spec.devices[0].capacity";
    let bad = slice(json!({
        "mem": {"value": "8Gi", "requestPolicy": {"default": "1536Mi",
            "validRange": {"min": "1Gi", "max": "16Gi", "step": "1Gi"}}},
        "bw": {"value": "100", "requestPolicy": {"default": "15",
            "validValues": ["20", "10", "200", "20"]}}}));
    assert_eq!(
        errs("ResourceSlice", &bad),
        vec![
            format!("{p}[mem].requestPolicy.validRange.max: Invalid value: \"16Gi\": max is larger than capacity value: 8Gi"),
            format!("{p}[mem].requestPolicy.validRange.step: Invalid value: \"1536Mi\": value is not a multiple of a given step (1Gi) from (1Gi)"),
            format!("{p}[bw].requestPolicy.validValues[1]: Invalid value: \"10\": values must be sorted in ascending order"),
            format!("{p}[bw].requestPolicy.validValues[3]: Invalid value: \"20\": values must be sorted in ascending order"),
            format!("{p}[bw].requestPolicy.validValues[2]: Invalid value: \"200\": option is larger than capacity value: 100"),
            format!("{p}[bw].requestPolicy.validValues[3]: Duplicate value: \"20\""),
            format!("{p}[bw].requestPolicy.validValues: Invalid value: \"15\": default value is not valid according to the requestPolicy"),
        ]
    );
}
