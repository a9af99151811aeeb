//! Table tests of core kinds other than Pods, and of the smaller groups: a valid defaulted object has
//! no errors, each broken rule gives upstream's text at upstream's path.

use serde_json::{json, Value};

use super::tests_pod::{defaulted, errors};
use super::{validate_create, validate_update};

fn assert_create(group: &str, kind: &str, base: &Value, edit: fn(&mut Value), expected: &[&str]) {
    let mut obj = base.clone();
    edit(&mut obj);
    assert_eq!(
        errors(&validate_create(group, kind, &obj)),
        expected,
        "{kind}: {obj}"
    );
}

fn update_errors(group: &str, kind: &str, old: &Value, edit: fn(&mut Value)) -> Vec<String> {
    let mut new = old.clone();
    edit(&mut new);
    errors(&validate_update(group, kind, &new, old))
}

fn service() -> Value {
    defaulted(
        "",
        "Service",
        json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
            "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}}),
    )
}

#[test]
fn service_rules() {
    let s = service();
    assert_create("", "Service", &s, |_| {}, &[]);
    assert_create(
        "",
        "Service",
        &s,
        |s| s["spec"]["ports"] = json!([]),
        &["spec.ports: Required value"],
    );
    assert_create(
        "",
        "Service",
        &s,
        |s| {
            s["spec"]["ports"] = json!([]);
            s["spec"]["clusterIP"] = json!("None");
            s["spec"]["clusterIPs"] = json!(["None"]);
        },
        &[],
    );
    assert_create("", "Service", &s, |s| s["metadata"]["name"] = json!("1web"), &[
        "metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')",
    ]);
    assert_create(
        "",
        "Service",
        &s,
        |s| {
            s["spec"]["ports"] = json!([
        {"port": 80, "protocol": "TCP", "targetPort": 80}, {"name": "b", "port": 81, "protocol": "TCP", "targetPort": 81}])
        },
        &["spec.ports[0].name: Required value"],
    );
    assert_create(
        "",
        "Service",
        &s,
        |s| {
            s["spec"]["ports"] = json!([
        {"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80}, {"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80}])
        },
        &[
            "spec.ports[1].name: Duplicate value: \"a\"",
            "spec.ports[1]: Duplicate value: {\"port\":80,\"protocol\":\"TCP\"}",
        ],
    );
    assert_create(
        "",
        "Service",
        &s,
        |s| s["spec"]["ports"][0]["port"] = json!(0),
        &["spec.ports[0].port: Invalid value: 0: must be between 1 and 65535, inclusive"],
    );
    assert_create("", "Service", &s, |s| s["spec"]["type"] = json!("Magic"),
        &["spec.type: Unsupported value: \"Magic\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""]);
    assert_create(
        "",
        "Service",
        &s,
        |s| s["spec"]["ports"][0]["nodePort"] = json!(30080),
        &["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"],
    );
    assert_create("", "Service", &s, |s| s["spec"]["sessionAffinity"] = json!("Sticky"),
        &["spec.sessionAffinity: Unsupported value: \"Sticky\": supported values: \"ClientIP\", \"None\""]);
    assert_create("", "Service", &s, |s| s["spec"]["externalTrafficPolicy"] = json!("Local"),
        &["spec.externalTrafficPolicy: Invalid value: \"Local\": may only be set for externally-accessible services"]);
    assert_create(
        "",
        "Service",
        &s,
        |s| s["spec"]["clusterIPs"] = json!(["10.96.0.11"]),
        &["spec.clusterIPs: Invalid value: [\"10.96.0.11\"]: first value must match `clusterIP`"],
    );

    let np = defaulted(
        "",
        "Service",
        json!({"metadata": {"name": "np"}, "spec": {"type": "NodePort", "clusterIP": "None", "ports": [{"port": 80}]}}),
    );
    assert_eq!(errors(&validate_create("", "Service", &np)), vec!["spec.clusterIPs[0]: Invalid value: \"None\": may not be set to 'None' for NodePort services"]);
    let ext = defaulted(
        "",
        "Service",
        json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName", "externalName": "example.com."}}),
    );
    assert_eq!(
        errors(&validate_create("", "Service", &ext)),
        Vec::<String>::new()
    );
    let no_name = defaulted(
        "",
        "Service",
        json!({"metadata": {"name": "ext"}, "spec": {"type": "ExternalName"}}),
    );
    assert_eq!(
        errors(&validate_create("", "Service", &no_name)),
        vec!["spec.externalName: Required value"]
    );
}

#[test]
fn service_update_rules() {
    let old = service();
    assert_eq!(
        update_errors("", "Service", &old, |s| s["spec"]["ports"][0]["port"] =
            json!(8080)),
        Vec::<String>::new()
    );
    assert_eq!(
        update_errors("", "Service", &old, |s| {
            s["spec"]["clusterIP"] = json!("10.96.0.99");
            s["spec"]["clusterIPs"] = json!(["10.96.0.99"]);
        }),
        vec!["spec.clusterIPs[0]: Invalid value: [\"10.96.0.99\"]: may not change once set"]
    );
    // A replace without the allocated IPs keeps them (the server copies them, as upstream's strategy).
    assert_eq!(
        update_errors("", "Service", &old, |s| {
            if let Some(spec) = s["spec"].as_object_mut() {
                spec.remove("clusterIP");
                spec.remove("clusterIPs");
            }
        }),
        Vec::<String>::new()
    );
    let mut ext = old.clone();
    ext["spec"] = json!({"type": "ExternalName", "externalName": "db.example.com", "sessionAffinity": "None"});
    assert_eq!(
        errors(&validate_update("", "Service", &ext, &old)),
        Vec::<String>::new()
    );
}

#[test]
fn config_map_and_secret_rules() {
    let cm = json!({"metadata": {"name": "cfg", "namespace": "d"}, "data": {"key.name": "v"}});
    assert_create("", "ConfigMap", &cm, |_| {}, &[]);
    assert_create("", "ConfigMap", &cm, |c| c["data"] = json!({"a b": "v"}), &[
        "data[a b]: Invalid value: \"a b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
    ]);
    assert_create(
        "",
        "ConfigMap",
        &cm,
        |c| c["binaryData"] = json!({"key.name": "AA=="}),
        &["data[key.name]: Invalid value: \"key.name\": duplicate of key present in binaryData"],
    );
    assert_create(
        "",
        "ConfigMap",
        &cm,
        |c| c["data"] = json!({"big": "x".repeat(1024 * 1024 + 1)}),
        &[": Too long: may not be more than 1048576 bytes"],
    );
    let mut frozen = cm.clone();
    frozen["immutable"] = json!(true);
    assert_eq!(
        update_errors("", "ConfigMap", &frozen, |c| c["data"]["key.name"] =
            json!("w")),
        vec!["data: Forbidden: field is immutable when `immutable` is set"]
    );
    assert_eq!(
        update_errors("", "ConfigMap", &frozen, |c| c["immutable"] = json!(false)),
        vec!["immutable: Forbidden: field is immutable when `immutable` is set"]
    );
    assert_eq!(
        update_errors("", "ConfigMap", &cm, |c| c["data"]["key.name"] = json!("w")),
        Vec::<String>::new()
    );

    let secret = defaulted(
        "",
        "Secret",
        json!({"metadata": {"name": "s", "namespace": "d"}, "data": {"password": "cGFzcw=="}}),
    );
    assert_create("", "Secret", &secret, |_| {}, &[]);
    assert_create(
        "",
        "Secret",
        &secret,
        |s| s["type"] = json!("kubernetes.io/tls"),
        &[
            "data[tls.crt]: Required value",
            "data[tls.key]: Required value",
        ],
    );
    assert_create(
        "",
        "Secret",
        &secret,
        |s| s["type"] = json!("kubernetes.io/service-account-token"),
        &["metadata.annotations[kubernetes.io/service-account.name]: Required value"],
    );
    assert_create(
        "",
        "Secret",
        &secret,
        |s| s["type"] = json!("kubernetes.io/basic-auth"),
        &[],
    );
    assert_eq!(
        update_errors("", "Secret", &secret, |s| s["type"] =
            json!("kubernetes.io/tls")),
        vec![
            "type: Invalid value: \"kubernetes.io/tls\": field is immutable",
            "data[tls.crt]: Required value",
            "data[tls.key]: Required value",
        ]
    );
}

#[test]
fn namespace_node_and_service_account_rules() {
    let ns = defaulted("", "Namespace", json!({"metadata": {"name": "team-a"}}));
    assert_create("", "Namespace", &ns, |_| {}, &[]);
    assert_create(
        "",
        "Namespace",
        &ns,
        |n| n["metadata"]["name"] = json!("team.a"),
        &["metadata.name: Invalid value: \"team.a\": must not contain dots"],
    );
    assert_create("", "Namespace", &ns, |n| n["spec"]["finalizers"] = json!(["kubernetes", "custom"]), &[
        "spec.finalizers: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified",
    ]);

    let node = json!({"metadata": {"name": "worker-1", "labels": {"kubernetes.io/hostname": "worker-1"}},
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}});
    assert_create("", "Node", &node, |_| {}, &[]);
    assert_create(
        "",
        "Node",
        &node,
        |n| n["spec"]["taints"][0]["effect"] = json!(""),
        &["spec.taints[0].effect: Required value"],
    );
    assert_create("", "Node", &node, |n| n["spec"]["podCIDRs"] = json!(["10.244.1.0"]), &[
        "spec.podCIDRs[0]: Invalid value: \"10.244.1.0\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
    ]);
    assert_eq!(update_errors("", "Node", &node, |n| n["spec"]["podCIDRs"] = json!(["10.244.2.0/24"])),
        vec!["spec.podCIDRs: Forbidden: node updates may not change podCIDR except from \"\" to valid"]);
    assert_eq!(
        update_errors("", "Node", &node, |n| n["spec"]["unschedulable"] =
            json!(true)),
        Vec::<String>::new()
    );

    let sa = json!({"metadata": {"name": "builder", "namespace": "d"}});
    assert_create("", "ServiceAccount", &sa, |_| {}, &[]);
    assert_create("", "ServiceAccount", &sa, |s| s["metadata"]["name"] = json!("Builder"), &[
        "metadata.name: Invalid value: \"Builder\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    ]);
}

#[test]
fn endpoints_events_and_replication_controllers() {
    let ep = defaulted(
        "",
        "Endpoints",
        json!({"metadata": {"name": "web", "namespace": "d"},
        "subsets": [{"addresses": [{"ip": "10.244.1.5"}], "ports": [{"port": 80}]}]}),
    );
    assert_create("", "Endpoints", &ep, |_| {}, &[]);
    assert_create("", "Endpoints", &ep, |e| e["subsets"][0]["addresses"][0]["ip"] = json!("127.0.0.1"), &[
        "subsets[0].addresses[0].ip: Invalid value: \"127.0.0.1\": may not be in the loopback range (127.0.0.0/8, ::1/128)",
    ]);
    assert_create(
        "",
        "Endpoints",
        &ep,
        |e| e["subsets"][0]["addresses"] = json!([]),
        &["subsets[0]: Required value: must specify `addresses` or `notReadyAddresses`"],
    );

    let ev = json!({"metadata": {"name": "web.17c2bbd0d6ee4f38", "namespace": "d"},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": "d"}, "reason": "Started", "message": "ok"});
    assert_create("", "Event", &ev, |_| {}, &[]);
    assert_create(
        "",
        "Event",
        &ev,
        |e| e["involvedObject"]["namespace"] = json!("other"),
        &["involvedObject.namespace: Invalid value: \"other\": does not match event.namespace"],
    );

    let rc = defaulted(
        "",
        "ReplicationController",
        json!({"metadata": {"name": "rc", "namespace": "d"},
        "spec": {"template": {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "a", "image": "a"}]}}}}),
    );
    assert_create("", "ReplicationController", &rc, |_| {}, &[]);
    assert_create("", "ReplicationController", &rc, |r| r["spec"]["selector"] = json!({"app": "b"}), &[
        "spec.template.metadata.labels: Invalid value: {\"app\":\"a\"}: `selector` does not match template `labels`",
    ]);
    assert_create("", "ReplicationController", &rc, |r| r["spec"]["template"]["spec"]["restartPolicy"] = json!("Never"), &[
        "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\"",
    ]);
}

#[test]
fn other_groups_and_unknown_kinds() {
    let role = json!({"metadata": {"name": "system:controller:job-controller"},
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]}]});
    assert_create(
        "rbac.authorization.k8s.io",
        "ClusterRole",
        &role,
        |_| {},
        &[],
    );
    assert_create(
        "rbac.authorization.k8s.io",
        "ClusterRole",
        &role,
        |r| r["rules"][0]["verbs"] = json!([]),
        &["rules[0].verbs: Required value: verbs must contain at least one value"],
    );
    let binding = defaulted(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        json!({"metadata": {"name": "b", "namespace": "d"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r"},
        "subjects": [{"kind": "User", "name": "jane"}, {"kind": "ServiceAccount", "name": "sa"}]}),
    );
    assert_create(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        &binding,
        |_| {},
        &[],
    );
    assert_eq!(update_errors("rbac.authorization.k8s.io", "RoleBinding", &binding, |b| b["roleRef"]["name"] = json!("other")),
        vec!["roleRef: Invalid value: {\"apiGroup\":\"rbac.authorization.k8s.io\",\"kind\":\"Role\",\"name\":\"other\"}: cannot change roleRef"]);

    let lease = json!({"metadata": {"name": "node-1", "namespace": "kube-node-lease"}, "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40}});
    assert_create("coordination.k8s.io", "Lease", &lease, |_| {}, &[]);
    assert_create(
        "coordination.k8s.io",
        "Lease",
        &lease,
        |l| l["spec"]["leaseDurationSeconds"] = json!(0),
        &["spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"],
    );

    let pc = defaulted(
        "scheduling.k8s.io",
        "PriorityClass",
        json!({"metadata": {"name": "high"}, "value": 1000}),
    );
    assert_create("scheduling.k8s.io", "PriorityClass", &pc, |_| {}, &[]);
    assert_create("scheduling.k8s.io", "PriorityClass", &pc, |p| p["metadata"]["name"] = json!("system-high"), &[
        "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved for system use only. error: system-high is not a known system priority class",
    ]);
    assert_eq!(
        update_errors("scheduling.k8s.io", "PriorityClass", &pc, |p| p["value"] =
            json!(5)),
        vec!["value: Forbidden: may not be changed in an update."]
    );

    let sc = defaulted(
        "storage.k8s.io",
        "StorageClass",
        json!({"metadata": {"name": "fast"}, "provisioner": "rancher.io/local-path"}),
    );
    assert_create("storage.k8s.io", "StorageClass", &sc, |_| {}, &[]);
    assert_eq!(
        update_errors("storage.k8s.io", "StorageClass", &sc, |s| s
            ["provisioner"] =
            json!("x.io/y")),
        vec!["provisioner: Forbidden: updates to provisioner are forbidden."]
    );

    let np = defaulted(
        "networking.k8s.io",
        "NetworkPolicy",
        json!({"metadata": {"name": "deny", "namespace": "d"}, "spec": {"podSelector": {}}}),
    );
    assert_create("networking.k8s.io", "NetworkPolicy", &np, |_| {}, &[]);
    assert_create("networking.k8s.io", "NetworkPolicy", &np, |n| n["spec"]["policyTypes"] = json!(["Sideways"]), &[
        "spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Egress\", \"Ingress\"",
    ]);

    let cr = json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w1", "namespace": "d", "finalizers": ["custom"]}});
    assert_create("example.com", "Widget", &cr, |_| {}, &[]);
    assert_create("example.com", "Widget", &cr, |w| w["metadata"]["name"] = json!("W1"), &[
        "metadata.name: Invalid value: \"W1\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
    ]);
    assert_eq!(
        update_errors("example.com", "Widget", &cr, |w| w["spec"] =
            json!({"size": 3})),
        Vec::<String>::new()
    );
    let crd = json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object"}}}]},
        "status": {"storedVersions": ["v1"]}});
    assert_create(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        &crd,
        |_| {},
        &[],
    );
    assert_create("apiextensions.k8s.io", "CustomResourceDefinition", &crd, |c| c["metadata"]["name"] = json!("widget.example.com"), &[
        "metadata.name: Invalid value: \"widget.example.com\": must be spec.names.plural+\".\"+spec.group",
    ]);
    assert_eq!(
        errors(&validate_create(
            "authorization.k8s.io",
            "SelfSubjectAccessReview",
            &json!({})
        )),
        Vec::<String>::new()
    );

    let ev = json!({"metadata": {"name": "e1", "namespace": "d"}, "eventTime": "2024-01-01T00:00:00.000000Z",
        "reportingController": "example.com/ctl", "reportingInstance": "ctl-1", "action": "Sync", "reason": "Synced", "type": "Normal",
        "regarding": {"kind": "Pod", "name": "p", "namespace": "d"}});
    assert_create("events.k8s.io", "Event", &ev, |_| {}, &[]);
    assert_create(
        "events.k8s.io",
        "Event",
        &ev,
        |e| e["type"] = json!("Info"),
        &["type: Invalid value: \"\": has invalid value: Info"],
    );
    let pdb = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}});
    assert_create("policy", "PodDisruptionBudget", &pdb, |_| {}, &[]);
    assert_create("policy", "PodDisruptionBudget", &pdb, |p| p["spec"]["maxUnavailable"] = json!(1), &[
        "spec: Invalid value: {\"minAvailable\":\"50%\",\"selector\":{\"matchLabels\":{\"app\":\"web\"}},\"maxUnavailable\":1}: minAvailable and maxUnavailable cannot be both set",
    ]);
    let hpa = defaulted(
        "autoscaling",
        "HorizontalPodAutoscaler",
        json!({"metadata": {"name": "web", "namespace": "d"},
        "spec": {"maxReplicas": 5, "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}}}),
    );
    assert_create("autoscaling", "HorizontalPodAutoscaler", &hpa, |_| {}, &[]);
    assert_create(
        "autoscaling",
        "HorizontalPodAutoscaler",
        &hpa,
        |h| h["spec"]["maxReplicas"] = json!(0),
        &[
            "spec.maxReplicas: Invalid value: 0: must be greater than 0",
            "spec.maxReplicas: Invalid value: 0: must be greater than or equal to `minReplicas`",
        ],
    );
    let es = defaulted(
        "discovery.k8s.io",
        "EndpointSlice",
        json!({"metadata": {"name": "web-abc", "namespace": "d"}, "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.1.5"]}], "ports": [{"port": 80}]}),
    );
    assert_create("discovery.k8s.io", "EndpointSlice", &es, |_| {}, &[]);
    assert_create("discovery.k8s.io", "EndpointSlice", &es, |e| e["addressType"] = json!("IPv5"), &[
        "addressType: Unsupported value: \"IPv5\": supported values: \"FQDN\", \"IPv4\", \"IPv6\"",
    ]);
}
