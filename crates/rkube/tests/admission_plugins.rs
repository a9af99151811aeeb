//! Upstream's in-tree admission plugins through kubectl, on one API server started with
//! `--enable-admission-plugins NodeRestriction,AlwaysPullImages,StorageObjectInUseProtection` and
//! static tokens for two nodes (`system:node:<name>` in `system:nodes`, as kubelet credentials are)
//! and a user:
//! - NodeRestriction: a node labels itself but not another node, may not touch its taints or the
//!   `node-restriction.kubernetes.io/` labels, deletes and evicts only pods bound to it;
//! - TaintNodesByCondition: a new node carries `node.kubernetes.io/not-ready:NoSchedule`;
//! - DefaultTolerationSeconds and AlwaysPullImages: a new pod gets the 300 s not-ready/unreachable
//!   tolerations and `imagePullPolicy: Always`;
//! - DefaultStorageClass and StorageObjectInUseProtection: a claim gets the default class and the
//!   protection finalizer, a volume its finalizer;
//! - PersistentVolumeClaimResize: a bound claim grows only if its class allows expansion;
//! - DefaultIngressClass: an Ingress gets the default class;
//! - CertificateApproval and CertificateSubjectRestriction: approving needs `approve` on the
//!   signer; no `system:masters` through the kube-apiserver-client signer.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

struct Fixture {
    c: Cluster,
    _tokens: tempfile::NamedTempFile,
}

impl Fixture {
    fn start() -> Fixture {
        let tokens = support::token_file(
            "node-a-token,system:node:a,uid-a,\"system:nodes\"\n\
             node-b-token,system:node:b,uid-b,\"system:nodes\"\n\
             alice-token,alice,1000\n",
        );
        let c = Cluster::start_with(
            Backend::Sqlite,
            &[
                "--token-auth-file",
                tokens.path().to_str().unwrap(),
                "--enable-admission-plugins",
                "NodeRestriction,AlwaysPullImages,StorageObjectInUseProtection",
            ],
        );
        Fixture { c, _tokens: tokens }
    }

    /// kubectl as the user of `token` (no client certificate).
    fn as_token(&self, token: &str, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        self.c.kubectl_as(token, args, stdin)
    }

    /// kubectl as `token`, expected to fail; returns stderr.
    fn refused(&self, token: &str, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.as_token(token, args, stdin);
        assert!(!out.status.success(), "kubectl {args:?} should have failed");
        String::from_utf8_lossy(&out.stderr).trim().to_string()
    }

    /// kubectl as `token`, expected to succeed; returns stdout.
    fn allowed(&self, token: &str, args: &[&str]) -> String {
        let out = self.as_token(token, args, None);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn get(&self, args: &[&str], jsonpath: &str) -> String {
        let template = format!("jsonpath={jsonpath}");
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["-o", &template]);
        self.c.kubectl(&all)
    }
}

/// Polls `done` until it holds (30 s at most): for what reaches the server's caches through
/// its watch (RBAC bindings, classes read by admission).
fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn node_yaml(name: &str) -> String {
    format!("apiVersion: v1\nkind: Node\nmetadata: {{name: {name}}}\n")
}

fn pod_yaml(name: &str, node: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  nodeName: {node}\n  containers:\n  - {{name: c, image: busybox, imagePullPolicy: IfNotPresent}}\n"
    )
}

#[test]
fn in_tree_admission_plugins() {
    let f = Fixture::start();
    nodes_are_tainted_and_restricted(&f);
    pods_get_defaults_and_nodes_touch_only_theirs(&f);
    claims_get_a_class_and_grow_only_if_allowed(&f);
    ingresses_get_the_default_class(&f);
    pods_get_the_global_default_priority(&f);
    certificates_need_the_signer_permission(&f);
}

fn nodes_are_tainted_and_restricted(f: &Fixture) {
    let c = &f.c;
    for n in ["a", "b"] {
        c.kubectl_in(&["create", "-f", "-"], Some(&node_yaml(n)));
    }
    // TaintNodesByCondition.
    assert_eq!(
        f.get(
            &["node", "a"],
            "{range .spec.taints[*]}{.key}:{.effect} {end}"
        ),
        "node.kubernetes.io/not-ready:NoSchedule "
    );

    // NodeRestriction: a node labels itself, not another node.
    f.allowed("node-a-token", &["label", "node", "a", "rack=1"]);
    assert_eq!(f.get(&["node", "a"], "{.metadata.labels.rack}"), "1");
    // `kubectl label` reads the node first, which the Node authorizer refuses; a raw PUT goes
    // straight to NodeRestriction.
    let err = f.refused("node-a-token", &["label", "node", "b", "rack=1"], None);
    assert!(
        err.ends_with("node 'a' cannot read 'b', only its own Node object"),
        "{err}"
    );
    let node_b = c.kubectl(&[
        "label",
        "node",
        "b",
        "rack=1",
        "--dry-run=client",
        "-o",
        "json",
    ]);
    assert_eq!(
        f.refused(
            "node-a-token",
            &["replace", "--raw", "/api/v1/nodes/b", "-f", "-"],
            Some(&node_b)
        ),
        "Error from server (Forbidden): nodes \"b\" is forbidden: node \"a\" is not allowed to modify node \"b\""
    );
    let err = f.refused(
        "node-a-token",
        &[
            "label",
            "node",
            "a",
            "node-restriction.kubernetes.io/pool=gold",
        ],
        None,
    );
    assert!(
        err.ends_with("nodes \"a\" is forbidden: is not allowed to modify labels: node-restriction.kubernetes.io/pool"),
        "{err}"
    );
    let err = f.refused(
        "node-a-token",
        &[
            "taint",
            "node",
            "a",
            "node.kubernetes.io/not-ready:NoSchedule-",
        ],
        None,
    );
    assert!(
        err.ends_with("nodes \"a\" is forbidden: node \"a\" is not allowed to modify taints"),
        "{err}"
    );
    // The admin is no node.
    c.kubectl(&["label", "node", "b", "rack=2"]);
}

fn pods_get_defaults_and_nodes_touch_only_theirs(f: &Fixture) {
    let c = &f.c;
    eventually("the default service account", || {
        c.kubectl_output(&["get", "serviceaccount", "default"], None)
            .status
            .success()
    });
    for (pod, node) in [("on-a", "a"), ("on-b", "b")] {
        c.kubectl_in(&["create", "-f", "-"], Some(&pod_yaml(pod, node)));
    }
    // DefaultTolerationSeconds and AlwaysPullImages.
    assert_eq!(
        f.get(
            &["pod", "on-a"],
            "{range .spec.tolerations[*]}{.key}:{.operator}:{.effect}:{.tolerationSeconds} {end}"
        ),
        "node.kubernetes.io/not-ready:Exists:NoExecute:300 node.kubernetes.io/unreachable:Exists:NoExecute:300 "
    );
    assert_eq!(
        f.get(&["pod", "on-a"], "{.spec.containers[0].imagePullPolicy}"),
        "Always"
    );

    // NodeRestriction: neither evicting nor deleting another node's pod; its own, yes.
    let eviction =
        r#"{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "on-b"}}"#;
    let err = f.refused(
        "node-a-token",
        &[
            "create",
            "--raw",
            "/api/v1/namespaces/default/pods/on-b/eviction",
            "-f",
            "-",
        ],
        Some(eviction),
    );
    assert!(
        err.contains("node a can only evict pods with spec.nodeName set to itself"),
        "{err}"
    );
    assert_eq!(
        f.refused("node-a-token", &["delete", "pod", "on-b", "--wait=false"], None),
        "Error from server (Forbidden): pods \"on-b\" is forbidden: node \"a\" can only delete pods with spec.nodeName set to itself"
    );
    assert_eq!(f.get(&["pod", "on-b"], "{.metadata.deletionTimestamp}"), "");
    f.allowed("node-a-token", &["delete", "pod", "on-a", "--wait=false"]);
    f.allowed("node-b-token", &["delete", "pod", "on-b", "--wait=false"]);
    // A node creates only mirror pods.
    let err = f.refused(
        "node-a-token",
        &["create", "-f", "-"],
        Some(&pod_yaml("sneaky", "a")),
    );
    assert!(
        err.contains("pod does not have \"kubernetes.io/config.mirror\" annotation, node \"a\" can only create mirror pods"),
        "{err}"
    );
}

const CLASSES: &str = "apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  annotations: {storageclass.kubernetes.io/is-default-class: \"true\"}
provisioner: example.com/disks
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: fixed}
provisioner: example.com/disks
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: growable}
provisioner: example.com/disks
allowVolumeExpansion: true
";

fn claim_yaml(name: &str, class: Option<&str>) -> String {
    let class = class
        .map(|c| format!("  storageClassName: {c}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {{name: {name}}}\nspec:\n{class}  accessModes: [ReadWriteOnce]\n  resources: {{requests: {{storage: 1Gi}}}}\n"
    )
}

fn grow(name: &str) -> Vec<String> {
    [
        "patch",
        "pvc",
        name,
        "-p",
        r#"{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}"#,
    ]
    .map(String::from)
    .to_vec()
}

fn claims_get_a_class_and_grow_only_if_allowed(f: &Fixture) {
    let c = &f.c;
    c.kubectl_in(&["apply", "-f", "-"], Some(CLASSES));
    // The plugin reads classes from the watch cache: a server-side dry run tells when it has them.
    eventually("the default class to be seen", || {
        c.kubectl_in(
            &[
                "create",
                "--dry-run=server",
                "-o",
                "jsonpath={.spec.storageClassName}",
                "-f",
                "-",
            ],
            Some(&claim_yaml("probe", None)),
        ) == "standard"
    });
    c.kubectl_in(&["create", "-f", "-"], Some(&claim_yaml("data", None)));
    assert_eq!(
        f.get(
            &["pvc", "data"],
            "{.spec.storageClassName} {.metadata.finalizers}"
        ),
        "standard [\"kubernetes.io/pvc-protection\"]"
    );
    // An explicit empty class stays empty.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&claim_yaml("classless", Some("\"\""))),
    );
    assert_eq!(f.get(&["pvc", "classless"], "{.spec.storageClassName}"), "");
    c.kubectl_in(
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: PersistentVolume\nmetadata: {name: disk-1}\nspec:\n  capacity: {storage: 1Gi}\n  accessModes: [ReadWriteOnce]\n  hostPath: {path: /tmp/disk-1}\n"),
    );
    assert_eq!(
        f.get(&["pv", "disk-1"], "{.metadata.finalizers}"),
        "[\"kubernetes.io/pv-protection\"]"
    );

    // PersistentVolumeClaimResize.
    for (name, class) in [("small", "fixed"), ("big", "growable")] {
        c.kubectl_in(&["create", "-f", "-"], Some(&claim_yaml(name, Some(class))));
    }
    let grow_small: Vec<String> = grow("small");
    let args: Vec<&str> = grow_small.iter().map(String::as_str).collect();
    let err = c.kubectl_fails(&args, None);
    assert!(
        err.contains("persistentvolumeclaims \"small\" is forbidden: Only bound persistent volume claims can be expanded"),
        "{err}"
    );
    for name in ["small", "big"] {
        c.kubectl(&[
            "patch",
            "pvc",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Bound"}}"#,
        ]);
    }
    let err = c.kubectl_fails(&args, None);
    assert!(
        err.contains("persistentvolumeclaims \"small\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"),
        "{err}"
    );
    let grow_big = grow("big");
    let args: Vec<&str> = grow_big.iter().map(String::as_str).collect();
    c.kubectl(&args);
    assert_eq!(
        f.get(&["pvc", "big"], "{.spec.resources.requests.storage}"),
        "2Gi"
    );
}

fn ingresses_get_the_default_class(f: &Fixture) {
    let c = &f.c;
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some("apiVersion: networking.k8s.io/v1\nkind: IngressClass\nmetadata:\n  name: nginx\n  annotations: {ingressclass.kubernetes.io/is-default-class: \"true\"}\nspec: {controller: k8s.io/ingress-nginx}\n"),
    );
    let ingress = "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web}\nspec:\n  defaultBackend: {service: {name: web, port: {number: 80}}}\n";
    eventually("the default ingress class to be seen", || {
        c.kubectl_in(
            &[
                "create",
                "--dry-run=server",
                "-o",
                "jsonpath={.spec.ingressClassName}",
                "-f",
                "-",
            ],
            Some(ingress),
        ) == "nginx"
    });
    c.kubectl_in(&["create", "-f", "-"], Some(ingress));
    assert_eq!(
        f.get(&["ingress", "web"], "{.spec.ingressClassName}"),
        "nginx"
    );
}

/// A CertificateSigningRequest for `signer` whose subject has organization `org`, as YAML.
/// Priority: a pod naming no class gets the `globalDefault` class's name and value; a class that is
/// not the default is not taken.
fn pods_get_the_global_default_priority(f: &Fixture) {
    let c = &f.c;
    let classes = "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: lower}\nvalue: 5\n---\n\
                   apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: everyday}\nvalue: 1000\nglobalDefault: true\n";
    c.kubectl_in(&["create", "-f", "-"], Some(classes));
    let mut n = 0;
    eventually("the default PriorityClass in the cache", || {
        n += 1;
        let name = format!("prio-{n}");
        c.kubectl_in(&["create", "-f", "-"], Some(&pod_yaml(&name, "a")));
        f.get(
            &["pod", &name],
            "{.spec.priorityClassName}={.spec.priority}",
        ) == "everyday=1000"
    });
    c.kubectl(&["delete", "priorityclass", "lower", "everyday"]);
}

fn csr_yaml(name: &str, signer: &str, org: &str) -> String {
    use base64::Engine;
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "alice");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, org);
    let pem = params
        .serialize_request(&key)
        .expect("csr")
        .pem()
        .expect("pem");
    let request = base64::engine::general_purpose::STANDARD.encode(pem);
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata: {{name: {name}}}\nspec:\n  signerName: {signer}\n  request: {request}\n  usages: [client auth]\n"
    )
}

fn certificates_need_the_signer_permission(f: &Fixture) {
    let c = &f.c;
    // CertificateSubjectRestriction: not even the admin gets system:masters this way.
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&csr_yaml(
            "masters",
            "kubernetes.io/kube-apiserver-client",
            "system:masters",
        )),
    );
    assert!(
        err.contains("certificatesigningrequests.certificates.k8s.io \"masters\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"),
        "{err}"
    );

    // CertificateApproval: alice may update approvals, but not for this signer.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&csr_yaml("widget", "example.com/widgets", "dev")),
    );
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: csr-approver}\nrules:\n- apiGroups: [certificates.k8s.io]\n  resources: [certificatesigningrequests, certificatesigningrequests/approval]\n  verbs: [get, list, update]\n"),
    );
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "alice-csr",
        "--clusterrole=csr-approver",
        "--user=alice",
    ]);
    eventually("alice to read CSRs", || {
        f.as_token("alice-token", &["get", "csr", "widget"], None)
            .status
            .success()
    });
    let err = f.refused("alice-token", &["certificate", "approve", "widget"], None);
    assert!(
        err.contains("certificatesigningrequests.certificates.k8s.io \"widget\" is forbidden: user not permitted to approve requests with signerName \"example.com/widgets\""),
        "{err}"
    );
    assert_eq!(f.get(&["csr", "widget"], "{.status.conditions}"), "");

    // `approve` on every signer of the domain.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some("apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: widget-signer-approver}\nrules:\n- apiGroups: [certificates.k8s.io]\n  resources: [signers]\n  resourceNames: [example.com/*]\n  verbs: [approve]\n"),
    );
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "alice-signer",
        "--clusterrole=widget-signer-approver",
        "--user=alice",
    ]);
    eventually("alice to approve", || {
        f.as_token("alice-token", &["certificate", "approve", "widget"], None)
            .status
            .success()
    });
    assert_eq!(
        f.get(&["csr", "widget"], "{.status.conditions[0].type}"),
        "Approved"
    );
}
