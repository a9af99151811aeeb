//! The PodSecurity admission plugin through kubectl, with upstream's texts: a pod that breaks
//! `restricted` is refused in a namespace labelled `enforce=restricted` and accepted with a
//! `Warning:` in one labelled `warn=restricted`; a compliant pod passes silently; a Deployment
//! with a violating template is created with a warning in an enforcing namespace; labelling a
//! namespace that has violating pods warns about them; invalid labels are refused; metadata-only
//! updates of existing violating pods still work.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A namespace with these labels, once pods can be created in it (its `default` ServiceAccount
/// exists).
fn namespace(c: &Cluster, name: &str, labels: &[(&str, &str)]) {
    let labels: String = labels
        .iter()
        .map(|(k, v)| format!("    {k}: {v}\n"))
        .collect();
    let manifest =
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n{labels}");
    c.kubectl_in(&["create", "-f", "-"], Some(&manifest));
    wait_for("the default ServiceAccount", || {
        c.kubectl_output(&["get", "serviceaccount", "default", "-n", name], None)
            .status
            .success()
    });
}

fn pod(name: &str, container_security: &str, pod_security: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{pod_security}  containers:\n  - name: c\n    image: busybox\n{container_security}"
    )
}

/// A pod that only `restricted` objects to.
fn unhardened(name: &str) -> String {
    pod(name, "", "")
}

/// A pod every level accepts.
fn hardened(name: &str) -> String {
    pod(
        name,
        "    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities: {drop: [ALL]}\n",
        "  securityContext:\n    runAsNonRoot: true\n    seccompProfile: {type: RuntimeDefault}\n",
    )
}

/// A pod `baseline` objects to.
fn privileged(name: &str) -> String {
    pod(name, "    securityContext: {privileged: true}\n", "")
}

const RESTRICTED_DETAIL: &str = r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#;

const ENFORCE: &str = "pod-security.kubernetes.io/enforce";
const WARN: &str = "pod-security.kubernetes.io/warn";

/// kubectl's `Warning:` lines.
fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter_map(|l| l.strip_prefix("Warning: "))
        .collect()
}

fn create(c: &Cluster, ns: &str, manifest: &str) -> (bool, String) {
    let out = c.kubectl_output(&["create", "-n", ns, "-f", "-"], Some(manifest));
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn pod_security_levels_enforce_warn_and_check_existing_pods() {
    let c = Cluster::start(Backend::Sqlite);

    // Enforce: refused with upstream's message, whatever the pod's name.
    namespace(
        &c,
        "enforced",
        &[(ENFORCE, "restricted"), (WARN, "restricted")],
    );
    let (ok, stderr) = create(&c, "enforced", &unhardened("bad"));
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains(&format!(
            r#"pods "bad" is forbidden: violates PodSecurity "restricted:latest": {RESTRICTED_DETAIL}"#
        )),
        "{stderr}"
    );
    assert!(
        warnings(&stderr).is_empty(),
        "a refusal carries no warning: {stderr}"
    );
    let (ok, stderr) = create(&c, "enforced", &privileged("worse"));
    assert!(!ok);
    assert!(
        stderr.contains(r#"violates PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true), allowPrivilegeEscalation != false"#),
        "{stderr}"
    );

    // A compliant pod passes silently.
    let (ok, stderr) = create(&c, "enforced", &hardened("good"));
    assert!(ok, "{stderr}");
    assert!(warnings(&stderr).is_empty(), "{stderr}");

    // A Deployment is never refused for its template, but warned about.
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: c\n        image: busybox\n";
    let (ok, stderr) = create(&c, "enforced", deployment);
    assert!(ok, "{stderr}");
    assert_eq!(
        warnings(&stderr),
        [format!(
            r#"would violate PodSecurity "restricted:latest": {RESTRICTED_DETAIL}"#
        )],
        "{stderr}"
    );
    c.kubectl(&["get", "deployment", "web", "-n", "enforced"]);

    // Warn: accepted, with the warning on kubectl's stderr.
    namespace(&c, "warned", &[(WARN, "restricted")]);
    let (ok, stderr) = create(&c, "warned", &unhardened("loose"));
    assert!(ok, "{stderr}");
    assert_eq!(
        warnings(&stderr),
        [format!(
            r#"would violate PodSecurity "restricted:latest": {RESTRICTED_DETAIL}"#
        )],
        "{stderr}"
    );
    let (ok, stderr) = create(&c, "warned", &hardened("tight"));
    assert!(ok && warnings(&stderr).is_empty(), "{stderr}");

    // Labelling a namespace whose pods would violate the new enforce level warns about them.
    namespace(&c, "existing", &[]);
    for p in [privileged("p2"), privileged("p1"), unhardened("fine")] {
        let (ok, stderr) = create(&c, "existing", &p);
        assert!(ok && warnings(&stderr).is_empty(), "{stderr}");
    }
    // The check reads the pods from the watch cache, which `get` is served from too.
    wait_for("the pods in the watch cache", || {
        c.kubectl(&["get", "pods", "-n", "existing", "-o", "name"])
            .lines()
            .count()
            == 3
    });
    let out = c.kubectl_output(
        &[
            "label",
            "namespace",
            "existing",
            &format!("{ENFORCE}=baseline"),
        ],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        warnings(&stderr),
        [
            r#"existing pods in namespace "existing" violate the new PodSecurity enforce level "baseline:latest""#,
            "p1 (and 1 other pod): privileged",
        ],
        "{stderr}"
    );

    // The existing pods stay; metadata-only updates of them are not checked, a new image is.
    wait_for("the enforce label in the namespace cache", || {
        let args = ["create", "-n", "existing", "--dry-run=server", "-f", "-"];
        !c.kubectl_output(&args, Some(&privileged("p3")))
            .status
            .success()
    });
    let out = c.kubectl_output(
        &["label", "pod", "p1", "-n", "existing", "touched=yes"],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = c.kubectl_output(
        &["set", "image", "pod/p1", "-n", "existing", "c=busybox:1.36"],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(r#"pods "p1" is forbidden: violates PodSecurity "baseline:latest": privileged (container "c" must not set securityContext.privileged=true)"#),
        "{stderr}"
    );

    // Invalid labels are refused on create and on update, with upstream's message.
    let out = c.kubectl_output(
        &["label", "namespace", "existing", &format!("{WARN}=bogus")],
        None,
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(r#"Namespace "existing" is invalid: metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#),
        "{stderr}"
    );
    let bad = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: typo\n  labels:\n    pod-security.kubernetes.io/enforce-version: v1.x\n";
    let stderr = c.kubectl_fails(&["create", "-f", "-"], Some(bad));
    assert!(
        stderr.contains(r#"Namespace "typo" is invalid: metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "v1.x": must be "latest" or "v1.x""#),
        "{stderr}"
    );

    // Pinned versions: runAsUser=0 is restricted from v1.23 on only.
    namespace(
        &c,
        "pinned",
        &[
            (ENFORCE, "restricted"),
            ("pod-security.kubernetes.io/enforce-version", "v1.22"),
        ],
    );
    let root = pod(
        "root",
        "    securityContext:\n      allowPrivilegeEscalation: false\n      capabilities: {drop: [ALL]}\n",
        "  securityContext:\n    runAsUser: 0\n    runAsNonRoot: true\n    seccompProfile: {type: RuntimeDefault}\n",
    );
    let (ok, stderr) = create(&c, "pinned", &root);
    assert!(ok, "{stderr}");
    let (ok, stderr) = create(&c, "enforced", &root);
    assert!(!ok);
    assert!(
        stderr.contains(r#"violates PodSecurity "restricted:latest": runAsUser=0 (pod must not set runAsUser=0)"#),
        "{stderr}"
    );
}
