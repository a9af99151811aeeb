//! Service account credentials through kubectl: `kubectl create token` (TokenRequest) issues tokens that
//! authenticate as the service account and are authorized by RBAC; bound tokens die with their pod; a
//! recreated service account invalidates old tokens; TokenReview answers for tokens and audiences; the
//! issuer discovery documents describe the signing key; new pods get the `kube-api-access-*` volume
//! (unless automounting is off) and need their service account to exist.

mod support;

use std::time::{Duration, Instant};

use base64::Engine;
use serde_json::Value;
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

/// kubectl with only a bearer token.
fn with_token(c: &Cluster, token: &str, args: &[&str]) -> std::process::Output {
    c.kubectl_as(token, args, None)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

fn claims(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("claims")
}

#[test]
fn tokens_authenticate_as_their_service_account() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl(&["create", "namespace", "apps"]);
    eventually("the default ServiceAccount", || {
        c.kubectl_output(&["get", "sa", "default", "-n", "apps"], None)
            .status
            .success()
            .then_some(())
    });
    c.kubectl(&["create", "serviceaccount", "robot", "-n", "apps"]);
    let token = c.kubectl(&["create", "token", "robot", "-n", "apps"]);
    let token = token.trim();
    let robot_claims = claims(token);
    assert_eq!(robot_claims["sub"], "system:serviceaccount:apps:robot");
    assert_eq!(
        robot_claims["iss"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(
        robot_claims["aud"][0],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(
        robot_claims["exp"].as_i64().unwrap() - robot_claims["iat"].as_i64().unwrap(),
        3600
    );
    let sa_uid = c.kubectl(&[
        "get",
        "sa",
        "robot",
        "-n",
        "apps",
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    assert_eq!(
        robot_claims["kubernetes.io"]["serviceaccount"]["uid"],
        sa_uid.as_str()
    );

    // Who it is, and RBAC decides what it may do.
    let out = with_token(
        &c,
        token,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
        ],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "system:serviceaccount:apps:robot [\"system:serviceaccounts\",\"system:serviceaccounts:apps\",\"system:authenticated\"]"
    );
    let out = with_token(&c, token, &["get", "pods", "-n", "apps"]);
    assert_eq!(
        stderr(&out),
        "Error from server (Forbidden): pods is forbidden: User \"system:serviceaccount:apps:robot\" cannot list resource \"pods\" in API group \"\" in the namespace \"apps\""
    );
    c.kubectl(&[
        "create",
        "rolebinding",
        "robot-view",
        "-n",
        "apps",
        "--clusterrole=view",
        "--serviceaccount=apps:robot",
    ]);
    eventually("the binding to apply", || {
        with_token(&c, token, &["get", "pods", "-n", "apps"])
            .status
            .success()
            .then_some(())
    });
    // The issuer's discovery documents, readable by service accounts.
    let out = with_token(
        &c,
        token,
        &["get", "--raw", "/.well-known/openid-configuration"],
    );
    let config: Value = serde_json::from_slice(&out.stdout).expect("openid configuration");
    assert_eq!(
        config["issuer"],
        "https://kubernetes.default.svc.cluster.local"
    );
    assert_eq!(config["id_token_signing_alg_values_supported"][0], "ES256");
    let out = with_token(&c, token, &["get", "--raw", "/openid/v1/jwks"]);
    let jwks: Value = serde_json::from_slice(&out.stdout).expect("jwks");
    let header: Value = serde_json::from_slice(
        &base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(token.split('.').next().unwrap())
            .unwrap(),
    )
    .unwrap();
    assert_eq!(jwks["keys"][0]["kid"], header["kid"]);

    // TokenReview, as another component verifying the token would ask.
    let review = |token: &str, audiences: &str| -> Value {
        let out = c.kubectl_in(
            &["create", "-o", "json", "-f", "-"],
            Some(&format!(
                r#"{{"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {{"token": "{token}"{audiences}}}}}"#
            )),
        );
        serde_json::from_str::<Value>(&out).expect("review")["status"].clone()
    };
    let status = review(token, "");
    assert_eq!(status["authenticated"], true);
    assert_eq!(
        status["user"]["username"],
        "system:serviceaccount:apps:robot"
    );
    assert_eq!(status["user"]["uid"], sa_uid.as_str());
    assert_eq!(
        review(token, r#", "audiences": ["vault"]"#)["authenticated"],
        false
    );
    let vault = c.kubectl(&["create", "token", "robot", "-n", "apps", "--audience=vault"]);
    let status = review(vault.trim(), r#", "audiences": ["vault"]"#);
    assert_eq!(
        (status["authenticated"].clone(), status["audiences"].clone()),
        (Value::Bool(true), serde_json::json!(["vault"]))
    );
    // ...but a token for another audience does not get into the API.
    let out = with_token(&c, vault.trim(), &["get", "pods", "-n", "apps"]);
    assert_eq!(
        stderr(&out),
        "error: You must be logged in to the server (Unauthorized)"
    );

    // Bad requests, with upstream's texts.
    let err = c.kubectl_fails(
        &["create", "token", "robot", "-n", "apps", "--duration=5m"],
        None,
    );
    assert!(err.contains("spec.expirationSeconds: Invalid value: 300: may not specify a duration less than 10 minutes"), "{err}");
    let err = c.kubectl_fails(&["create", "token", "nobody", "-n", "apps"], None);
    assert!(
        err.contains("serviceaccounts \"nobody\" not found"),
        "{err}"
    );

    // A token bound to a pod dies with the pod.
    c.kubectl_in(
        &["apply", "-n", "apps", "-f", "-"],
        Some("apiVersion: v1\nkind: Pod\nmetadata: {name: holder}\nspec:\n  serviceAccountName: robot\n  containers: [{name: c, image: busybox}]\n"),
    );
    let bound = c.kubectl(&[
        "create",
        "token",
        "robot",
        "-n",
        "apps",
        "--bound-object-kind=Pod",
        "--bound-object-name=holder",
    ]);
    let bound = bound.trim().to_string();
    assert_eq!(claims(&bound)["kubernetes.io"]["pod"]["name"], "holder");
    assert!(with_token(&c, &bound, &["get", "pods", "-n", "apps"])
        .status
        .success());
    let err = c.kubectl_fails(
        &[
            "create",
            "token",
            "default",
            "-n",
            "apps",
            "--bound-object-kind=Pod",
            "--bound-object-name=holder",
        ],
        None,
    );
    assert!(err.contains("cannot bind token for serviceaccount \"default\" to pod running with different serviceaccount name."), "{err}");
    c.kubectl(&[
        "delete",
        "pod",
        "holder",
        "-n",
        "apps",
        "--grace-period=0",
        "--force",
    ]);
    eventually("the bound token to stop working", || {
        (!with_token(&c, &bound, &["get", "pods", "-n", "apps"])
            .status
            .success())
        .then_some(())
    });

    // A service account deleted and recreated under the same name does not honour old tokens.
    c.kubectl(&["delete", "sa", "robot", "-n", "apps"]);
    c.kubectl(&["create", "sa", "robot", "-n", "apps"]);
    eventually("the old token to stop working", || {
        let out = with_token(&c, token, &["get", "pods", "-n", "apps"]);
        stderr(&out).contains("Unauthorized").then_some(())
    });
}

#[test]
fn pods_get_the_token_volume_of_an_existing_service_account() {
    let c = Cluster::start(Backend::Sqlite);
    eventually("the default ServiceAccount", || {
        c.kubectl_output(&["get", "sa", "default"], None)
            .status
            .success()
            .then_some(())
    });
    c.kubectl(&["run", "web", "--image=nginx"]);
    let volume = c.kubectl(&["get", "pod", "web", "-o", "jsonpath={.spec.volumes[0].name}|{.spec.volumes[0].projected.defaultMode}|{.spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds}|{.spec.volumes[0].projected.sources[1].configMap.name}|{.spec.volumes[0].projected.sources[2].downwardAPI.items[0].fieldRef.fieldPath}"]);
    let parts: Vec<&str> = volume.split('|').collect();
    assert!(
        parts[0].starts_with("kube-api-access-") && parts[0].len() == 21,
        "{volume}"
    );
    assert_eq!(
        parts[1..],
        ["420", "3607", "kube-root-ca.crt", "metadata.namespace"]
    );
    let mount = c.kubectl(&["get", "pod", "web", "-o", "jsonpath={.spec.containers[0].volumeMounts[0].name} {.spec.containers[0].volumeMounts[0].mountPath} {.spec.containers[0].volumeMounts[0].readOnly}"]);
    assert_eq!(
        mount,
        format!(
            "{} /var/run/secrets/kubernetes.io/serviceaccount true",
            parts[0]
        )
    );

    // Automounting off on the pod, or on its service account: no volume.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some("apiVersion: v1\nkind: Pod\nmetadata: {name: quiet}\nspec:\n  automountServiceAccountToken: false\n  containers: [{name: c, image: busybox}]\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: shy}\nautomountServiceAccountToken: false\n"),
    );
    assert_eq!(
        c.kubectl(&["get", "pod", "quiet", "-o", "jsonpath={.spec.volumes}"]),
        ""
    );
    c.kubectl(&[
        "run",
        "shy-pod",
        "--image=busybox",
        "--overrides={\"spec\": {\"serviceAccountName\": \"shy\"}}",
    ]);
    assert_eq!(
        c.kubectl(&["get", "pod", "shy-pod", "-o", "jsonpath={.spec.volumes}"]),
        ""
    );

    // A missing service account: refused.
    let err = c.kubectl_fails(
        &[
            "run",
            "lost",
            "--image=busybox",
            "--overrides={\"spec\": {\"serviceAccountName\": \"ghost\"}}",
        ],
        None,
    );
    assert!(
        err.contains(
            "error looking up service account default/ghost: serviceaccount \"ghost\" not found"
        ),
        "{err}"
    );
}
