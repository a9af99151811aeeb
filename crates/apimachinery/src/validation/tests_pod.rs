//! Table tests of Pod validation and object metadata: each case breaks one rule of a valid, defaulted
//! Pod and expects upstream's error text and field path.

use serde_json::{json, Value};

use super::{validate_create, validate_update};
use crate::defaults::apply_defaults;

pub(super) fn errors(list: &super::ErrorList) -> Vec<String> {
    list.iter().map(|e| e.to_string()).collect()
}

pub(super) fn defaulted(group: &str, kind: &str, mut obj: Value) -> Value {
    apply_defaults(group, kind, &mut obj);
    obj
}

fn pod() -> Value {
    defaulted(
        "",
        "Pod",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "labels": {"app": "web"}},
            "spec": {
                "containers": [{"name": "nginx", "image": "nginx:1.25", "ports": [{"containerPort": 80, "name": "http"}],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "initContainers": [{"name": "init", "image": "busybox"}],
                "volumes": [{"name": "data", "emptyDir": {}}]
            }
        }),
    )
}

/// Applies `edit` to a valid Pod and returns the errors of creating it.
fn create_errors(edit: impl Fn(&mut Value)) -> Vec<String> {
    let mut p = pod();
    edit(&mut p);
    errors(&validate_create("", "Pod", &p))
}

#[test]
fn valid_pod_has_no_errors() {
    assert_eq!(create_errors(|_| {}), Vec::<String>::new());
}

#[test]
fn pod_create_rules() {
    type Case = (&'static str, fn(&mut Value), &'static str);
    let cases: Vec<Case> = vec![
        ("no containers", |p| p["spec"]["containers"] = json!([]), "spec.containers: Required value"),
        ("container name missing", |p| p["spec"]["containers"][0]["name"] = json!(""), "spec.containers[0].name: Required value"),
        (
            "container name not a label",
            |p| p["spec"]["containers"][0]["name"] = json!("Nginx"),
            "spec.containers[0].name: Invalid value: \"Nginx\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
        (
            "init container name clashes",
            |p| p["spec"]["initContainers"][0]["name"] = json!("nginx"),
            "spec.initContainers[0].name: Duplicate value: \"nginx\"",
        ),
        ("image missing", |p| p["spec"]["containers"][0]["image"] = json!(""), "spec.containers[0].image: Required value"),
        (
            "image with whitespace",
            |p| p["spec"]["containers"][0]["image"] = json!(" nginx"),
            "spec.containers[0].image: Invalid value: \" nginx\": must not have leading or trailing whitespace",
        ),
        (
            "restart policy",
            |p| p["spec"]["restartPolicy"] = json!("Sometimes"),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\"",
        ),
        (
            "dns policy",
            |p| p["spec"]["dnsPolicy"] = json!("Google"),
            "spec.dnsPolicy: Unsupported value: \"Google\": supported values: \"ClusterFirstWithHostNet\", \"ClusterFirst\", \"Default\", \"None\"",
        ),
        (
            "pull policy",
            |p| p["spec"]["containers"][0]["imagePullPolicy"] = json!("Sometimes"),
            "spec.containers[0].imagePullPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"IfNotPresent\", \"Never\"",
        ),
        ("port zero", |p| p["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(0), "spec.containers[0].ports[0].containerPort: Required value"),
        (
            "port too big",
            |p| p["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(70000),
            "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive",
        ),
        (
            "protocol",
            |p| p["spec"]["containers"][0]["ports"][0]["protocol"] = json!("ICMP"),
            "spec.containers[0].ports[0].protocol: Unsupported value: \"ICMP\": supported values: \"SCTP\", \"TCP\", \"UDP\"",
        ),
        (
            "port name",
            |p| p["spec"]["containers"][0]["ports"][0]["name"] = json!("8080"),
            "spec.containers[0].ports[0].name: Invalid value: \"8080\": must contain at least one letter (a-z)",
        ),
        (
            "mount of unknown volume",
            |p| p["spec"]["containers"][0]["volumeMounts"][0]["name"] = json!("other"),
            "spec.containers[0].volumeMounts[0].name: Not found: \"other\"",
        ),
        (
            "volume name",
            |p| {
                p["spec"]["volumes"][0]["name"] = json!("Data");
                p["spec"]["containers"][0]["volumeMounts"] = json!([]);
            },
            "spec.volumes[0].name: Invalid value: \"Data\": a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
        ),
        (
            "request above limit",
            |p| p["spec"]["containers"][0]["resources"] = json!({"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}),
            "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1",
        ),
        (
            "non-standard resource",
            |p| p["spec"]["containers"][0]["resources"] = json!({"requests": {"gpu": "1"}}),
            "spec.containers[0].resources.requests[gpu]: Invalid value: \"gpu\": must be a standard resource for containers",
        ),
        (
            "probe without handler",
            |p| p["spec"]["containers"][0]["livenessProbe"] = json!({"successThreshold": 1}),
            "spec.containers[0].livenessProbe: Required value: must specify a handler type",
        ),
        (
            "liveness success threshold",
            |p| p["spec"]["containers"][0]["livenessProbe"] = json!({"exec": {"command": ["true"]}, "successThreshold": 2}),
            "spec.containers[0].livenessProbe.successThreshold: Invalid value: 2: must be 1",
        ),
        (
            "init container probe",
            |p| p["spec"]["initContainers"][0]["readinessProbe"] = json!({"exec": {"command": ["true"]}}),
            "spec.initContainers[0].readinessProbe: Forbidden: may not be set for init containers without restartPolicy=Always",
        ),
        (
            "toleration operator",
            |p| p["spec"]["tolerations"][0]["operator"] = json!("Has"),
            "spec.tolerations[0].operator: Unsupported value: \"Has\": supported values: \"Equal\", \"Exists\"",
        ),
        (
            "toleration seconds without NoExecute",
            |p| p["spec"]["tolerations"] = json!([{"key": "a", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}]),
            "spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set",
        ),
        (
            "active deadline",
            |p| p["spec"]["activeDeadlineSeconds"] = json!(0),
            "spec.activeDeadlineSeconds: Invalid value: 0: must be between 1 and 2147483647, inclusive",
        ),
        (
            "hostname",
            |p| p["spec"]["hostname"] = json!("a.b"),
            "spec.hostname: Invalid value: \"a.b\": must not contain dots",
        ),
        (
            "ephemeral containers on create",
            |p| p["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox"}]),
            "spec.ephemeralContainers: Forbidden: cannot be set on create",
        ),
        (
            "env var name",
            |p| p["spec"]["containers"][0]["env"] = json!([{"name": "A=B", "value": "x"}]),
            "spec.containers[0].env[0].name: Invalid value: \"A=B\": a valid environment variable name must consist only of printable ASCII characters other than '='",
        ),
        (
            "host network port",
            |p| {
                p["spec"]["hostNetwork"] = json!(true);
                p["spec"]["containers"][0]["ports"][0]["hostPort"] = json!(8080);
            },
            "spec.containers[0].ports[0].hostPort: Invalid value: 8080: must match `containerPort` when `hostNetwork` is true",
        ),
        (
            "affinity term without topology key",
            |p| p["spec"]["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {"matchLabels": {"app": "web"}}}]}}),
            "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey: Required value: can not be empty",
        ),
        (
            "node name",
            |p| p["spec"]["nodeName"] = json!("Node_1"),
            "spec.nodeName: Invalid value: \"Node_1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
    ];
    for (what, edit, expected) in cases {
        assert_eq!(create_errors(edit), vec![expected.to_string()], "{what}");
    }
    // A volume with errors is left out of the volumes that mounts may name, as upstream.
    let errs = create_errors(|p| p["spec"]["volumes"][0]["hostPath"] = json!({"path": "/x"}));
    assert_eq!(
        errs[1],
        "spec.containers[0].volumeMounts[0].name: Not found: \"data\""
    );
}

#[test]
fn object_meta_rules() {
    type Case = (&'static str, fn(&mut Value), &'static str);
    let cases: Vec<Case> = vec![
        ("name missing", |p| p["metadata"]["name"] = json!(""), "metadata.name: Required value: name or generateName is required"),
        (
            "label value",
            |p| p["metadata"]["labels"]["app"] = json!("bad value!"),
            "metadata.labels: Invalid value: \"bad value!\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
        ),
        (
            "label key",
            |p| p["metadata"]["labels"] = json!({"-app": "x"}),
            "metadata.labels: Invalid value: \"-app\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
        ),
        (
            "annotation size",
            |p| p["metadata"]["annotations"] = json!({"a": "x".repeat(256 * 1024)}),
            "metadata.annotations: Too long: may not be more than 262144 bytes",
        ),
        (
            "finalizer",
            |p| p["metadata"]["finalizers"] = json!(["custom"]),
            "metadata.finalizers[0]: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified",
        ),
        (
            "generate name",
            |p| p["metadata"]["generateName"] = json!("Web-"),
            "metadata.generateName: Invalid value: \"Web-\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
        ),
        (
            "two controllers",
            |p| p["metadata"]["ownerReferences"] = json!([
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "b", "uid": "2", "controller": true}]),
            "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and StatefulSet/b",
        ),
    ];
    for (what, edit, expected) in cases {
        let errs = create_errors(edit);
        assert_eq!(errs.len(), 1, "{what}: {errs:?}");
        assert!(
            errs[0].ends_with(expected),
            "{what}: {} does not end with {expected}",
            errs[0]
        );
    }
    let mut long = pod();
    long["metadata"]["name"] = json!("a".repeat(254));
    assert_eq!(
        errors(&validate_create("", "Pod", &long))[0],
        format!(
            "metadata.name: Invalid value: \"{}\": must be no more than 253 characters",
            "a".repeat(254)
        )
    );
}

#[test]
fn pod_update_rules() {
    let old = pod();
    let update = |edit: fn(&mut Value)| {
        let mut new = old.clone();
        edit(&mut new);
        errors(&validate_update("", "Pod", &new, &old))
    };
    assert_eq!(update(|_| {}), Vec::<String>::new());
    assert_eq!(
        update(|p| p["spec"]["containers"][0]["image"] = json!("nginx:1.27")),
        Vec::<String>::new()
    );
    assert_eq!(
        update(|p| p["spec"]["activeDeadlineSeconds"] = json!(30)),
        Vec::<String>::new()
    );
    assert_eq!(
        update(|p| p["spec"]["tolerations"]
            .as_array_mut()
            .map_or((), |t| t.push(json!({"key": "x", "operator": "Exists"})))),
        Vec::<String>::new()
    );
    assert_eq!(
        update(|p| p["metadata"]["labels"]["tier"] = json!("front")),
        Vec::<String>::new()
    );
    assert_eq!(update(|p| p["spec"]["tolerations"] = json!([])), vec!["spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"]);
    assert_eq!(
        update(|p| p["spec"]["containers"]
            .as_array_mut()
            .map_or((), |c| c.push(json!({"name": "b", "image": "b",
            "imagePullPolicy": "Always", "terminationMessagePolicy": "File"})))),
        vec!["spec.containers: Forbidden: pod updates may not add or remove containers"]
    );
    let changed = update(|p| p["spec"]["containers"][0]["ports"][0]["containerPort"] = json!(81));
    assert_eq!(changed.len(), 1);
    assert!(changed[0].starts_with(
        "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"
    ));
    assert!(
        changed[0].contains("spec.containers[0].ports[0].containerPort: 80 -> 81"),
        "{}",
        changed[0]
    );
    assert_eq!(
        update(|p| p["metadata"]["name"] = json!("other")),
        vec!["metadata.name: Invalid value: \"other\": field is immutable"]
    );
    assert_eq!(
        update(|p| p["metadata"]["uid"] = json!("u2")),
        vec!["metadata.uid: Invalid value: \"u2\": field is immutable"]
    );
    let mut with_deadline = old.clone();
    with_deadline["spec"]["activeDeadlineSeconds"] = json!(30);
    let mut longer = with_deadline.clone();
    longer["spec"]["activeDeadlineSeconds"] = json!(60);
    assert_eq!(
        errors(&validate_update("", "Pod", &longer, &with_deadline)),
        vec!["spec.activeDeadlineSeconds: Invalid value: 60: must be less than or equal to previous value"]
    );
}

#[test]
fn pod_template_errors_use_template_paths() {
    let mut pt = defaulted(
        "",
        "PodTemplate",
        json!({"metadata": {"name": "t"}, "template": {"metadata": {"labels": {"a": "b c"}},
        "spec": {"containers": [{"name": "a", "image": "a"}]}}}),
    );
    let errs = errors(&validate_create("", "PodTemplate", &pt));
    assert_eq!(errs.len(), 1);
    assert!(
        errs[0].starts_with("template.labels: Invalid value: \"b c\": a valid label"),
        "{errs:?}"
    );
    pt["template"]["metadata"]["labels"]["a"] = json!("b");
    assert_eq!(
        errors(&validate_create("", "PodTemplate", &pt)),
        Vec::<String>::new()
    );
}
