//! Pod admission and validation that upstream's conformance suite checks through the API alone:
//! the RuntimeClass admission plugin (a missing class is refused; the class's overhead and scheduling
//! are copied into the pod) and pod sysctl validation.

mod support;

use serde_json::Value;
use support::{Backend, Cluster};

const CLASS: &str = "apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: sandboxed
handler: runsc
overhead:
  podFixed: {cpu: 250m, memory: 64Mi}
scheduling:
  nodeSelector: {sandbox: \"true\"}
  tolerations:
  - {key: sandbox, operator: Exists, effect: NoSchedule}
";

fn pod(name: &str, spec_extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{spec_extra}  containers:\n  - name: c\n    image: busybox\n"
    )
}

#[test]
fn runtime_class_admission_and_sysctls() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl_in(&["apply", "-f", "-"], Some(CLASS));

    // A class that does not exist: 403 with upstream's text.
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&pod("missing", "  runtimeClassName: nope\n")),
    );
    assert!(
        err.contains(r#"pods "missing" is forbidden: pod rejected: RuntimeClass "nope" not found"#),
        "{err}"
    );

    // The class's overhead and scheduling end up in the pod.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&pod(
            "sandboxed",
            "  runtimeClassName: sandboxed\n  nodeSelector: {disk: ssd}\n",
        )),
    );
    let got: Value =
        serde_json::from_str(&c.kubectl(&["get", "pod", "sandboxed", "-o", "json"])).unwrap();
    let spec = &got["spec"];
    assert_eq!(spec["overhead"]["cpu"], "250m", "{spec}");
    assert_eq!(spec["overhead"]["memory"], "64Mi");
    assert_eq!(spec["nodeSelector"]["sandbox"], "true");
    assert_eq!(spec["nodeSelector"]["disk"], "ssd");
    let tolerations = spec["tolerations"].as_array().unwrap();
    assert!(
        tolerations
            .iter()
            .any(|t| t["key"] == "sandbox" && t["effect"] == "NoSchedule"),
        "{tolerations:?}"
    );

    // A node selector that conflicts with the class's.
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&pod(
            "conflict",
            "  runtimeClassName: sandboxed\n  nodeSelector: {sandbox: \"false\"}\n",
        )),
    );
    assert!(
        err.contains("conflict: runtimeClass.scheduling.nodeSelector[sandbox] = true; pod.spec.nodeSelector[sandbox] = false"),
        "{err}"
    );

    // An overhead without a class that defines one, and one that differs from the class's.
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&pod("overhead", "  overhead: {cpu: 100m}\n")),
    );
    assert!(
        err.contains(
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead"
        ),
        "{err}"
    );
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&pod(
            "other-overhead",
            "  runtimeClassName: sandboxed\n  overhead: {cpu: 100m}\n",
        )),
    );
    assert!(
        err.contains("pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead"),
        "{err}"
    );

    // Sysctls as upstream's "should reject invalid sysctls": the invalid names, nothing else.
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&pod(
            "sysctls",
            "  securityContext:\n    sysctls:\n    - {name: foo-, value: bar}\n    - {name: kernel.shmmax, value: \"100000000\"}\n    - {name: safe-and-unsafe, value: \"100000000\"}\n    - {name: bar.., value: \"42\"}\n",
        )),
    );
    assert!(err.contains(r#"Invalid value: "foo-""#), "{err}");
    assert!(err.contains(r#"Invalid value: "bar..""#), "{err}");
    assert!(!err.contains("safe-and-unsafe"), "{err}");
    assert!(!err.contains("kernel.shmmax"), "{err}");
}
