//! Kubelet TLS bootstrapping end to end, on one `rkube server` with `--enable-bootstrap-token-auth`
//! and the controller manager: a bootstrap token authenticates as `system:bootstrap:<id>`; the
//! kubelet's bootstrap asks for a client certificate, which csrapproving approves (the token's
//! group may ask for `nodeclient`) and csrsigning signs; the kubelet's new kubeconfig is
//! `system:node:n1`, which the Node authorizer keeps from another node's Secret; rotation gets a new
//! certificate with the current one (`selfnodeclient`) and the kubelet's client moves to it.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use kubelet::certificate::{bootstrap, rotation, store};
use support::{Backend, Cluster};

const TOKEN: &str = "abcdef.0123456789abcdef";

fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kubeconfig_with_token(c: &Cluster, path: &Path, token: &str) {
    let ca = c.data_dir().join("pki").join("ca.crt");
    std::fs::write(
        path,
        format!(
            "apiVersion: v1
kind: Config
clusters: [{{name: rkube, cluster: {{server: '{}', certificate-authority: '{}'}}}}]
users: [{{name: bootstrap, user: {{token: '{token}'}}}}]
contexts: [{{name: bootstrap, context: {{cluster: rkube, user: bootstrap}}}}]
current-context: bootstrap
",
            c.url,
            ca.display()
        ),
    )
    .expect("write kubeconfig");
}

/// `kubectl auth whoami` with `kubeconfig`: the username, or the error.
fn whoami(c: &Cluster, kubeconfig: &Path) -> Result<String, String> {
    let k = format!("--kubeconfig={}", kubeconfig.display());
    let out = c.kubectl_output(
        &[
            &k,
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        None,
    );
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[test]
fn a_kubelet_bootstraps_and_rotates_its_client_certificate() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &[
            "--enable-bootstrap-token-auth",
            "--controllers",
            "*,tokencleaner",
        ],
    );
    let work = tempfile::tempdir().expect("tempdir");
    let bootstrap_kubeconfig = work.path().join("bootstrap.kubeconfig");
    let kubeconfig = work.path().join("kubelet.kubeconfig");
    let cert_dir = work.path().join("pki");
    kubeconfig_with_token(&c, &bootstrap_kubeconfig, TOKEN);

    // No Secret yet: the token is nobody.
    let err = whoami(&c, &bootstrap_kubeconfig).unwrap_err();
    assert!(err.contains("Unauthorized"), "{err}");
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: v1
kind: Secret
metadata: {name: bootstrap-token-abcdef, namespace: kube-system}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: abcdef
  token-secret: 0123456789abcdef
  usage-bootstrap-authentication: 'true'
  auth-extra-groups: system:bootstrappers:kubeadm:default-node-token
",
        ),
    );
    eventually("the bootstrap token to authenticate", || {
        whoami(&c, &bootstrap_kubeconfig).as_deref() == Ok("system:bootstrap:abcdef")
    });
    // The token cleaner deletes a token once its expiration has passed, and keeps the others.
    let expired = "2020-01-01T00:00:00Z";
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1
kind: Secret
metadata: {{name: bootstrap-token-old000, namespace: kube-system}}
type: bootstrap.kubernetes.io/token
stringData: {{token-id: old000, token-secret: 0123456789abcdef, expiration: '{expired}'}}
"
        )),
    );
    eventually("the token cleaner deleting the expired token", || {
        !c.kubectl_output(
            &[
                "get",
                "secret",
                "-n",
                "kube-system",
                "bootstrap-token-old000",
            ],
            None,
        )
        .status
        .success()
    });
    c.kubectl(&[
        "get",
        "secret",
        "-n",
        "kube-system",
        "bootstrap-token-abcdef",
    ]);
    // A wrong secret for the same id is refused.
    let wrong = work.path().join("wrong.kubeconfig");
    kubeconfig_with_token(&c, &wrong, "abcdef.0123456789abcdee");
    assert!(whoami(&c, &wrong).unwrap_err().contains("Unauthorized"));

    let rt = support::runtime();
    let requested = rt
        .block_on(bootstrap::load_or_request(
            &kubeconfig,
            &bootstrap_kubeconfig,
            &cert_dir,
            "n1",
        ))
        .expect("bootstrap");
    assert!(requested);
    assert_eq!(whoami(&c, &kubeconfig).as_deref(), Ok("system:node:n1"));
    let csrs = c.kubectl(&[
        "get",
        "csr",
        "-o",
        "jsonpath={range .items[*]}{.spec.username} {.spec.signerName} {.status.conditions[0].reason}{\"\\n\"}{end}",
    ]);
    assert!(
        csrs.contains(
            "system:bootstrap:abcdef kubernetes.io/kube-apiserver-client-kubelet AutoApproved"
        ),
        "{csrs}"
    );
    // The kubeconfig is good now: nothing is asked again.
    let again = rt
        .block_on(bootstrap::load_or_request(
            &kubeconfig,
            &bootstrap_kubeconfig,
            &cert_dir,
            "n1",
        ))
        .expect("second start");
    assert!(!again);

    // The same through the binary: `rkube kubelet --bootstrap-kubeconfig` joins as node n3 and
    // writes its kubeconfig before it looks for a runtime (the endpoint given here does not exist,
    // so nothing of the machine's containerd is touched; the process then waits or exits).
    let root = work.path().join("n3");
    let n3_kubeconfig = work.path().join("n3.kubeconfig");
    let mut kubelet = std::process::Command::new(env!("CARGO_BIN_EXE_rkube"))
        .arg("kubelet")
        .arg("--bootstrap-kubeconfig")
        .arg(&bootstrap_kubeconfig)
        .arg("--kubeconfig")
        .arg(&n3_kubeconfig)
        .arg("--root-dir")
        .arg(&root)
        .arg("--pod-logs-dir")
        .arg(root.join("logs"))
        .arg("--container-runtime-endpoint")
        .arg(format!("unix://{}", root.join("none.sock").display()))
        .args([
            "--node-name",
            "n3",
            "--node-ip",
            "127.0.0.1",
            "--address",
            "127.0.0.1",
            "--port",
            "0",
            "--rotate-certificates",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start rkube kubelet");
    eventually("rkube kubelet to join with the bootstrap token", || {
        n3_kubeconfig.exists() && whoami(&c, &n3_kubeconfig).as_deref() == Ok("system:node:n3")
    });
    let _ = kubelet.kill();
    let _ = kubelet.wait();
    assert!(
        store::CertStore::new(root.join("pki")).current().is_some(),
        "the client certificate is kept as <root-dir>/pki/kubelet-client-current.pem"
    );

    // The Node authorizer applies to the new identity.
    c.kubectl(&["create", "secret", "generic", "mine", "--from-literal=k=v"]);
    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "theirs",
        "--from-literal=k=v",
    ]);
    eventually("the default service account", || {
        c.kubectl_output(&["get", "serviceaccount", "default"], None)
            .status
            .success()
    });
    for (pod, node, secret) in [("on-n1", "n1", "mine"), ("on-n2", "n2", "theirs")] {
        c.kubectl_in(
            &["create", "-f", "-"],
            Some(&format!(
                "apiVersion: v1
kind: Pod
metadata: {{name: {pod}}}
spec:
  nodeName: {node}
  containers: [{{name: c, image: busybox}}]
  volumes: [{{name: s, secret: {{secretName: {secret}}}}}]
"
            )),
        );
    }
    let as_node = format!("--kubeconfig={}", kubeconfig.display());
    eventually("n1 reading its pod's secret", || {
        c.kubectl_output(&[&as_node, "get", "secret", "mine"], None)
            .status
            .success()
    });
    let out = c.kubectl_output(&[&as_node, "get", "secret", "theirs"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr)
        .contains("no relationship found between node 'n1' and this object"));

    // Rotation: a new certificate, asked for with the current one.
    let cert_store = store::CertStore::new(&cert_dir);
    let (first_pem, first) = cert_store.current().expect("a current certificate");
    let client = rt
        .block_on(client::kubeconfig::client_from_file(&kubeconfig))
        .expect("kubelet client");
    let rotating = rotation::RotatingClient::new(client);
    let rotation = rotation::Rotation {
        kubeconfig: kubeconfig.clone(),
        store: store::CertStore::new(&cert_dir),
        node_name: "n1".into(),
        client: rotating.clone(),
    };
    let second = rt.block_on(rotation.rotate()).expect("rotate");
    let (second_pem, _) = cert_store.current().expect("a current certificate");
    assert_ne!(first_pem, second_pem);
    assert!(second.not_after >= first.not_after);
    assert_eq!(whoami(&c, &kubeconfig).as_deref(), Ok("system:node:n1"));
    let csrs = c.kubectl(&[
        "get",
        "csr",
        "-o",
        "jsonpath={range .items[*]}{.spec.username} {.status.conditions[0].reason}{\"\\n\"}{end}",
    ]);
    assert!(csrs.contains("system:node:n1 AutoApproved"), "{csrs}");
    // The kubelet's client follows: it lists its own pods with the new certificate.
    let pods = rt
        .block_on(async {
            let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(rotating.client());
            api.list(&kube::api::ListParams::default().fields("spec.nodeName=n1"))
                .await
        })
        .expect("list own pods");
    let names: Vec<_> = pods
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    assert_eq!(names, ["on-n1"]);
}
