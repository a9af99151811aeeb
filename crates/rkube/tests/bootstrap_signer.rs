//! kubeadm-style discovery on `rkube server --enable-bootstrap-token-auth`: the server publishes
//! `kube-public/cluster-info` (its URL and CA) readable without credentials, and the bootstrap signer
//! (turned on with the token cleaner by that flag) adds a detached JWS of its kubeconfig per signing
//! token, which checks with the token's secret, and removes it when the token may no longer sign.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine;
use controllers::bootstrap::bootstrapsigner::compute_detached_signature;
use serde_json::Value;
use support::{Backend, Cluster};

fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// GET without any credential: (status, body).
fn anonymous_get(c: &Cluster, path: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sk", "-m", "20", "-w", "\n%{http_code}"])
        .arg(format!("{}{path}", c.url))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').expect("curl output");
    (code.trim().parse().expect("status"), body.to_string())
}

fn cluster_info(c: &Cluster) -> Value {
    let (code, body) = anonymous_get(c, "/api/v1/namespaces/kube-public/configmaps/cluster-info");
    assert_eq!(code, 200, "{body}");
    serde_json::from_str(&body).expect("a ConfigMap")
}

fn token(id: &str, signing: bool) -> String {
    format!(
        "apiVersion: v1
kind: Secret
metadata: {{name: bootstrap-token-{id}, namespace: kube-system}}
type: bootstrap.kubernetes.io/token
stringData:
  token-id: {id}
  token-secret: 0123456789abcdef
  usage-bootstrap-authentication: 'true'
  usage-bootstrap-signing: '{signing}'
"
    )
}

#[test]
fn cluster_info_is_public_and_signed_with_bootstrap_tokens() {
    // Anonymous requests on explicitly: kubeadm's discovery reads cluster-info before it has a
    // credential.
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--enable-bootstrap-token-auth", "--anonymous-auth=true"],
    );

    // What the kubeconfig says: this server and its CA (written once the server is up).
    let info = eventually("cluster-info to be public", || {
        let (code, body) =
            anonymous_get(&c, "/api/v1/namespaces/kube-public/configmaps/cluster-info");
        (code == 200).then(|| serde_json::from_str::<Value>(&body).expect("a ConfigMap"))
    });
    let kubeconfig = info["data"]["kubeconfig"].as_str().expect("kubeconfig");
    let parsed: Value = serde_yaml_ng::from_str(kubeconfig).expect("YAML");
    assert_eq!(parsed["clusters"][0]["cluster"]["server"], c.url.as_str());
    let ca = std::fs::read(c.data_dir().join("pki/ca.crt")).expect("ca.crt");
    let ca_data = parsed["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .expect("CA data");
    assert_eq!(
        base64::engine::general_purpose::STANDARD
            .decode(ca_data)
            .unwrap(),
        ca
    );
    // Only that ConfigMap is public.
    let (code, _) = anonymous_get(&c, "/api/v1/namespaces/kube-public/configmaps");
    assert_eq!(code, 403);

    // A signing token gets a signature; a token that may only authenticate does not.
    c.kubectl_in(&["apply", "-f", "-"], Some(&token("abcdef", true)));
    c.kubectl_in(&["apply", "-f", "-"], Some(&token("nosign", false)));
    let sig = eventually("the token's signature", || {
        cluster_info(&c)["data"]["jws-kubeconfig-abcdef"]
            .as_str()
            .map(str::to_string)
    });
    // A detached JWS: header, no payload, signature; the header names the token.
    let (header, rest) = sig.split_once("..").expect("detached JWS");
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(header)
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header, serde_json::json!({"alg": "HS256", "kid": "abcdef"}));
    assert!(!rest.is_empty());
    // It checks with the token's secret over the kubeconfig read anonymously (the signature
    // function's own vectors are checked against an independent HMAC in its unit tests).
    assert_eq!(
        sig,
        compute_detached_signature(kubeconfig, "abcdef", "0123456789abcdef")
    );
    assert_ne!(
        sig,
        compute_detached_signature(kubeconfig, "abcdef", "0123456789abcdee")
    );
    assert!(cluster_info(&c)["data"]["jws-kubeconfig-nosign"].is_null());

    // No longer marked for signing: the signature goes.
    c.kubectl_in(&["apply", "-f", "-"], Some(&token("abcdef", false)));
    eventually("the signature to be removed", || {
        cluster_info(&c)["data"]["jws-kubeconfig-abcdef"]
            .is_null()
            .then_some(())
    });
}
