//! The ServiceAccount controller and the root CA publisher of `rkube server`: a new namespace gets
//! its `default` ServiceAccount and its `kube-root-ca.crt` ConfigMap (whose CA verifies the server),
//! and both come back when deleted or changed.

mod support;

use std::time::{Duration, Instant};

use base64::Engine;
use support::{Backend, Cluster};

fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get(c: &Cluster, args: &[&str]) -> Option<String> {
    let out = c.kubectl_output(args, None);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn root_ca(c: &Cluster, ns: &str) -> Option<String> {
    get(
        c,
        &[
            "get",
            "configmap",
            "kube-root-ca.crt",
            "-n",
            ns,
            "-o",
            "jsonpath={.data.ca\\.crt}",
        ],
    )
    .filter(|s| !s.is_empty())
}

/// The DER certificates of a PEM bundle.
fn pem_certs(pem: &str) -> Vec<Vec<u8>> {
    pem.split("-----BEGIN CERTIFICATE-----")
        .skip(1)
        .filter_map(|block| block.split("-----END CERTIFICATE-----").next())
        .map(|b64| {
            let b64: String = b64.split_whitespace().collect();
            base64::engine::general_purpose::STANDARD
                .decode(b64)
                .expect("base64 certificate")
        })
        .collect()
}

#[test]
fn namespaces_get_a_default_service_account_and_the_root_ca() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    c.kubectl(&["create", "namespace", "team-a"]);
    eventually("the default ServiceAccount", || {
        get(
            &c,
            &[
                "get",
                "serviceaccount",
                "default",
                "-n",
                "team-a",
                "-o",
                "name",
            ],
        )
    });
    let ca = eventually("kube-root-ca.crt", || root_ca(&c, "team-a"));
    let description = c.kubectl(&[
        "get",
        "configmap",
        "kube-root-ca.crt",
        "-n",
        "team-a",
        "-o",
        "jsonpath={.metadata.annotations.kubernetes\\.io/description}",
    ]);
    assert!(
        description
            .starts_with("Contains a CA bundle that can be used to verify the kube-apiserver"),
        "{description}"
    );

    // The published CA is the kubeconfig's, and a client trusting only it reaches the server.
    let kubeconfig_ca = c.kubectl(&[
        "config",
        "view",
        "--raw",
        "--minify",
        "-o",
        "jsonpath={.clusters[0].cluster.certificate-authority-data}",
    ]);
    let kubeconfig_ca = base64::engine::general_purpose::STANDARD
        .decode(kubeconfig_ca.trim())
        .expect("certificate-authority-data");
    assert_eq!(ca.as_bytes(), kubeconfig_ca.as_slice());
    let certs = pem_certs(&ca);
    assert_eq!(certs.len(), 1);
    support::runtime().block_on(async {
        let mut config = client::kubeconfig::config_from_file(&c.kubeconfig)
            .await
            .unwrap();
        config.root_cert = Some(certs);
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::Namespace> = kube::Api::all(client);
        api.get("team-a")
            .await
            .expect("the published CA verifies the server");
    });

    // Existing namespaces have them too.
    for ns in ["default", "kube-system"] {
        eventually(&format!("kube-root-ca.crt in {ns}"), || root_ca(&c, ns));
        eventually(&format!("default ServiceAccount in {ns}"), || {
            get(
                &c,
                &["get", "serviceaccount", "default", "-n", ns, "-o", "name"],
            )
        });
    }

    // Deleted, both come back.
    let old_uid = c.kubectl(&[
        "get",
        "sa",
        "default",
        "-n",
        "team-a",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    c.kubectl(&["delete", "serviceaccount", "default", "-n", "team-a"]);
    eventually("a new default ServiceAccount", || {
        get(
            &c,
            &[
                "get",
                "sa",
                "default",
                "-n",
                "team-a",
                "-o",
                "jsonpath={.metadata.uid}",
            ],
        )
        .filter(|uid| !uid.is_empty() && *uid != old_uid)
    });
    c.kubectl(&["delete", "configmap", "kube-root-ca.crt", "-n", "team-a"]);
    eventually("kube-root-ca.crt back", || {
        root_ca(&c, "team-a").filter(|v| *v == ca)
    });

    // Changed, it is restored.
    c.kubectl(&[
        "patch",
        "configmap",
        "kube-root-ca.crt",
        "-n",
        "team-a",
        "--type=merge",
        "-p",
        r#"{"data": {"ca.crt": "tampered"}}"#,
    ]);
    eventually("kube-root-ca.crt restored", || {
        root_ca(&c, "team-a").filter(|v| *v == ca)
    });
}
