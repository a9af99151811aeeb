//! The cases of upstream's `check_*_test.go` for the restricted checks, with their exact texts.

use serde_json::{json, Value};

use super::*;

type Check = fn(&Value, &Value) -> Option<Violation>;

#[track_caller]
fn forbids(check: Check, spec: Value, reason: &str, detail: &str) {
    let got = check(&Value::Null, &spec).expect("expected a violation");
    assert_eq!(got.reason, reason);
    assert_eq!(got.detail, detail);
}

#[track_caller]
fn allows(check: Check, spec: Value) {
    assert_eq!(check(&Value::Null, &spec), None);
}

fn sc(name: &str, sc: Value) -> Value {
    json!({"name": name, "securityContext": sc})
}

#[test]
fn restricted_volumes() {
    let allowed = [
        ("emptyDir", json!({})),
        ("secret", json!({})),
        ("persistentVolumeClaim", json!({"claimName": "c"})),
        ("downwardAPI", json!({})),
        ("configMap", json!({})),
        ("projected", json!({})),
        ("csi", json!({"driver": "d"})),
        ("ephemeral", json!({})),
        ("image", json!({"reference": "r"})),
    ];
    let restricted = [
        "hostPath",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "gitRepo",
        "nfs",
        "iscsi",
        "glusterfs",
        "rbd",
        "flexVolume",
        "cinder",
        "cephfs",
        "flocker",
        "fc",
        "azureFile",
        "vsphereVolume",
        "quobyte",
        "azureDisk",
        "photonPersistentDisk",
        "portworxVolume",
        "scaleIO",
        "storageos",
    ];
    let mut volumes = Vec::new();
    for (i, (k, v)) in allowed.iter().enumerate() {
        volumes.push(json!({"name": format!("a{}", i + 1), *k: v}));
    }
    for (i, k) in restricted.iter().enumerate() {
        volumes.push(json!({"name": format!("b{}", i + 1), *k: {}}));
    }
    volumes.push(json!({"name": "c1"}));
    forbids(
        restricted_volumes_1_0,
        json!({"volumes": volumes}),
        "restricted volume types",
        concat!(
            r#"volumes "b1", "b2", "b3", "b4", "b5", "b6", "b7", "b8", "b9", "b10", "b11", "b12", "b13", "b14", "b15", "b16", "b17", "b18", "b19", "b20", "b21", "c1""#,
            r#" use restricted volume types "awsElasticBlockStore", "azureDisk", "azureFile", "cephfs", "cinder", "fc", "flexVolume", "flocker", "gcePersistentDisk", "gitRepo", "glusterfs", "hostPath", "iscsi", "nfs", "photonPersistentDisk", "portworxVolume", "quobyte", "rbd", "scaleIO", "storageos", "unknown", "vsphereVolume""#,
        ),
    );
    forbids(
        restricted_volumes_1_0,
        json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}),
        "restricted volume types",
        r#"volume "h" uses restricted volume type "hostPath""#,
    );
    let only_allowed: Vec<Value> = allowed
        .iter()
        .map(|(k, v)| json!({"name": k, *k: v}))
        .collect();
    allows(restricted_volumes_1_0, json!({"volumes": only_allowed}));
}

#[test]
fn allow_privilege_escalation() {
    let reason = "allowPrivilegeEscalation != false";
    let multi = json!({"containers": [{"name": "a"}, sc("b", json!({})),
        sc("c", json!({"allowPrivilegeEscalation": true})),
        sc("d", json!({"allowPrivilegeEscalation": false}))]});
    let detail =
        r#"containers "a", "b", "c" must set securityContext.allowPrivilegeEscalation=false"#;
    forbids(
        allow_privilege_escalation_1_8,
        multi.clone(),
        reason,
        detail,
    );
    forbids(allow_privilege_escalation_1_25, multi, reason, detail);
    let windows = json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]});
    allows(allow_privilege_escalation_1_25, windows.clone());
    forbids(
        allow_privilege_escalation_1_8,
        windows,
        reason,
        r#"container "a" must set securityContext.allowPrivilegeEscalation=false"#,
    );
    forbids(
        allow_privilege_escalation_1_25,
        json!({"os": {"name": "linux"}, "containers": [{"name": "a"}]}),
        reason,
        r#"container "a" must set securityContext.allowPrivilegeEscalation=false"#,
    );
}

#[test]
fn run_as_non_root() {
    let f = run_as_non_root_1_35;
    let reason = "runAsNonRoot != true";
    forbids(
        f,
        json!({"containers": [{"name": "a"}]}),
        reason,
        r#"pod or container "a" must set securityContext.runAsNonRoot=true"#,
    );
    forbids(
        f,
        json!({"securityContext": {"runAsNonRoot": false}, "containers": [{"name": "a"}]}),
        reason,
        "pod must not set securityContext.runAsNonRoot=false",
    );
    forbids(
        f,
        json!({"securityContext": {"runAsNonRoot": true}, "containers": [{"name": "a"},
            sc("b", json!({})), sc("c", json!({"runAsNonRoot": false})),
            sc("d", json!({"runAsNonRoot": false})), sc("e", json!({"runAsNonRoot": true}))]}),
        reason,
        r#"containers "c", "d" must not set securityContext.runAsNonRoot=false"#,
    );
    forbids(
        f,
        json!({"containers": [{"name": "a"}, sc("b", json!({})),
            sc("d", json!({"runAsNonRoot": true})), sc("e", json!({"runAsNonRoot": true}))]}),
        reason,
        r#"pod or containers "a", "b" must set securityContext.runAsNonRoot=true"#,
    );
    allows(
        f,
        json!({"securityContext": {"runAsNonRoot": true}, "containers": [{"name": "a"}]}),
    );
    // User namespaces: relaxed from 1.35 only.
    let userns = json!({"hostUsers": false, "containers": [{"name": "a"}]});
    allows(f, userns.clone());
    forbids(
        run_as_non_root_1_0,
        userns,
        reason,
        r#"pod or container "a" must set securityContext.runAsNonRoot=true"#,
    );
}

#[test]
fn run_as_user() {
    let f = run_as_user_1_35;
    forbids(
        f,
        json!({"securityContext": {"runAsUser": 0}, "containers": [{"name": "a"}]}),
        "runAsUser=0",
        "pod must not set runAsUser=0",
    );
    allows(
        f,
        json!({"securityContext": {"runAsUser": 1000}, "containers": [{"name": "a"}]}),
    );
    forbids(
        f,
        json!({"securityContext": {"runAsUser": 0}, "containers": [{"name": "a"},
            sc("b", json!({})), sc("c", json!({"runAsUser": 0})), sc("d", json!({"runAsUser": 0})),
            sc("e", json!({"runAsUser": 1}))]}),
        "runAsUser=0",
        r#"pod and containers "c", "d" must not set runAsUser=0"#,
    );
    allows(
        f,
        json!({"hostUsers": false, "securityContext": {"runAsUser": 0}}),
    );
    forbids(
        run_as_user_1_23,
        json!({"hostUsers": false, "securityContext": {"runAsUser": 0}}),
        "runAsUser=0",
        "pod must not set runAsUser=0",
    );
}

fn seccomp_invalid_containers() -> Value {
    let c = |n: &str, t: &str| sc(n, json!({"seccompProfile": {"type": t}}));
    json!({"securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{"name": "a"}, sc("b", json!({})), c("c", "Unconfined"), c("d", "Unconfined"),
            c("e", "RuntimeDefault"), c("f", "RuntimeDefault")]})
}

#[test]
fn seccomp_restricted() {
    for f in [
        seccomp_profile_restricted_1_19 as Check,
        seccomp_profile_restricted_1_25,
    ] {
        forbids(
            f,
            json!({"containers": [{"name": "a"}]}),
            "seccompProfile",
            r#"pod or container "a" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
        );
        forbids(
            f,
            json!({"securityContext": {"seccompProfile": {"type": "Unconfined"}}, "containers": [{"name": "a"}]}),
            "seccompProfile",
            r#"pod must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        forbids(
            f,
            seccomp_invalid_containers(),
            "seccompProfile",
            r#"containers "c", "d" must not set securityContext.seccompProfile.type to "Unconfined""#,
        );
        forbids(
            f,
            json!({"containers": [{"name": "a"}, sc("b", json!({})),
                sc("d", json!({"seccompProfile": {"type": "RuntimeDefault"}})),
                sc("e", json!({"seccompProfile": {"type": "RuntimeDefault"}}))]}),
            "seccompProfile",
            r#"pod or containers "a", "b" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost""#,
        );
        allows(
            f,
            json!({"securityContext": {"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}},
                "containers": [{"name": "a"}]}),
        );
    }
    allows(
        seccomp_profile_restricted_1_25,
        json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]}),
    );
}

#[test]
fn capabilities_restricted() {
    let caps = json!({"containers": [
        sc("a", json!({"capabilities": {"add": ["FOO", "BAR"]}})),
        sc("b", json!({"capabilities": {"add": ["BAR", "BAZ"]}})),
        sc("c", json!({"capabilities": {"add": ["NET_BIND_SERVICE", "CHOWN"], "drop": ["ALL", "FOO"]}})),
    ]});
    let detail = r#"containers "a", "b" must set securityContext.capabilities.drop=["ALL"]; containers "a", "b", "c" must not include "BAR", "BAZ", "CHOWN", "FOO" in securityContext.capabilities.add"#;
    for f in [
        capabilities_restricted_1_22 as Check,
        capabilities_restricted_1_25,
    ] {
        forbids(f, caps.clone(), "unrestricted capabilities", detail);
        allows(
            f,
            json!({"containers": [sc("a", json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}))]}),
        );
    }
    allows(
        capabilities_restricted_1_25,
        json!({"os": {"name": "windows"}, "containers": [{"name": "a"}]}),
    );
    forbids(
        capabilities_restricted_1_25,
        json!({"os": {"name": "linux"}, "containers": [{"name": "a"}]}),
        "unrestricted capabilities",
        r#"container "a" must set securityContext.capabilities.drop=["ALL"]"#,
    );
}
