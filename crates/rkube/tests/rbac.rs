//! Authorization through kubectl, as against an upstream cluster with `--authorization-mode=Node,RBAC`:
//! a token user starts with discovery only and gets upstream's 403 texts; Roles and bindings grant
//! access in their namespace or cluster-wide; `kubectl auth can-i` (SelfSubjectAccessReview, with and
//! without `--as`), `auth can-i --list` (SelfSubjectRulesReview) and SubjectAccessReviews answer from
//! the same rules; impersonation needs the `impersonate` verb; anonymous requests reach only the
//! public health and version paths; the default ClusterRoles and bindings exist.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

struct Rbac {
    c: Cluster,
    _tokens: tempfile::NamedTempFile,
}

impl Rbac {
    fn start() -> Rbac {
        let tokens = support::token_file("alice-token,alice,1000,\"dev\"\nbob-token,bob,1001\n");
        // Anonymous requests on (off by default, see tests/request_limits.rs), so that RBAC decides
        // what system:anonymous may do, as in a cluster that turns them on.
        let c = Cluster::start_with(
            Backend::Sqlite,
            &[
                "--token-auth-file",
                tokens.path().to_str().unwrap(),
                "--anonymous-auth",
                "true",
            ],
        );
        Rbac { c, _tokens: tokens }
    }

    /// kubectl as the user of `token` (no client certificate).
    fn as_token(&self, token: &str, args: &[&str]) -> std::process::Output {
        self.c.kubectl_as(token, args, None)
    }

    /// Polls until `token`'s kubectl `args` succeed (bindings reach the authorizer through a watch).
    fn eventually_allowed(&self, token: &str, args: &[&str]) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let out = self.as_token(token, args);
            if out.status.success() {
                return String::from_utf8_lossy(&out.stdout).into_owned();
            }
            assert!(
                Instant::now() < deadline,
                "still refused: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

#[test]
fn roles_and_bindings_decide_what_users_may_do() {
    let r = Rbac::start();
    let c = &r.c;

    // Defaults: discovery and self-reviews for every authenticated user, nothing else.
    let out = r.as_token("alice-token", &["get", "pods"]);
    assert!(!out.status.success());
    assert_eq!(
        stderr(&out),
        "Error from server (Forbidden): pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let out = r.as_token("alice-token", &["get", "namespace", "kube-system"]);
    assert_eq!(
        stderr(&out),
        "Error from server (Forbidden): namespaces \"kube-system\" is forbidden: User \"alice\" cannot get resource \"namespaces\" in API group \"\" at the cluster scope"
    );
    assert!(r
        .as_token("alice-token", &["api-versions"])
        .status
        .success());
    let out = r.as_token(
        "alice-token",
        &["auth", "whoami", "-o", "jsonpath={.status.userInfo.groups}"],
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "[\"dev\",\"system:authenticated\"]"
    );
    let out = r.as_token("alice-token", &["auth", "can-i", "list", "pods"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "no");
    assert_eq!(out.status.code(), Some(1));

    // A Role and a RoleBinding: configmaps in namespace team only.
    c.kubectl(&["create", "namespace", "team"]);
    c.kubectl(&[
        "create",
        "role",
        "cm-editor",
        "-n",
        "team",
        "--verb=get,list,create,delete",
        "--resource=configmaps",
    ]);
    c.kubectl(&[
        "create",
        "rolebinding",
        "alice-cm",
        "-n",
        "team",
        "--role=cm-editor",
        "--user=alice",
    ]);
    r.eventually_allowed("alice-token", &["get", "configmaps", "-n", "team"]);
    let out = r.as_token(
        "alice-token",
        &[
            "create",
            "configmap",
            "mine",
            "-n",
            "team",
            "--from-literal=k=v",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let out = r.as_token("alice-token", &["get", "configmaps", "-n", "default"]);
    assert!(stderr(&out).contains(
        "cannot list resource \"configmaps\" in API group \"\" in the namespace \"default\""
    ));
    let out = r.as_token("alice-token", &["get", "secrets", "-n", "team"]);
    assert!(!out.status.success());
    // can-i answers from the same rules, for oneself and (as an admin) for others.
    let out = r.as_token(
        "alice-token",
        &["auth", "can-i", "delete", "configmaps", "-n", "team"],
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "yes");
    assert_eq!(
        c.kubectl_output(
            &[
                "auth",
                "can-i",
                "create",
                "configmaps",
                "-n",
                "team",
                "--as=alice"
            ],
            None
        )
        .stdout,
        b"yes\n"
    );
    assert_eq!(
        c.kubectl_output(
            &[
                "auth",
                "can-i",
                "create",
                "configmaps",
                "-n",
                "default",
                "--as=alice"
            ],
            None
        )
        .stdout,
        b"no\n"
    );
    let list = String::from_utf8_lossy(
        &r.as_token("alice-token", &["auth", "can-i", "--list", "-n", "team"])
            .stdout,
    )
    .into_owned();
    let row = list
        .lines()
        .find(|l| l.starts_with("configmaps "))
        .unwrap_or_else(|| panic!("{list}"));
    assert!(row.ends_with("[get list create delete]"), "{row}");
    assert!(
        list.contains("selfsubjectaccessreviews.authorization.k8s.io"),
        "{list}"
    );

    // A group binding to a default ClusterRole, cluster-wide: members of dev may view everything.
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "dev-view",
        "--clusterrole=view",
        "--group=dev",
    ]);
    r.eventually_allowed("alice-token", &["get", "pods", "-A"]);
    assert!(!r
        .as_token("bob-token", &["get", "pods", "-A"])
        .status
        .success());
    // view does not include secrets.
    assert!(!r
        .as_token("alice-token", &["get", "secrets", "-n", "default"])
        .status
        .success());

    // A binding removed takes its access with it.
    c.kubectl(&["delete", "rolebinding", "alice-cm", "-n", "team"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while r
        .as_token(
            "alice-token",
            &["create", "configmap", "again", "-n", "team"],
        )
        .status
        .success()
    {
        assert!(Instant::now() < deadline, "access outlived its binding");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Exec needs `create` on pods/exec: `get` alone (which a WebSocket upgrade is, by method) is
    // refused, whichever transport kubectl tries.
    c.kubectl(&["run", "shell", "-n", "team", "--image=busybox"]);
    c.kubectl(&[
        "create",
        "role",
        "exec-getter",
        "-n",
        "team",
        "--verb=get",
        "--resource=pods,pods/exec",
    ]);
    c.kubectl(&[
        "create",
        "rolebinding",
        "alice-exec",
        "-n",
        "team",
        "--role=exec-getter",
        "--user=alice",
    ]);
    r.eventually_allowed("alice-token", &["get", "pod", "shell", "-n", "team"]);
    let out = r.as_token(
        "alice-token",
        &["exec", "shell", "-n", "team", "--", "true"],
    );
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains(
            "User \"alice\" cannot create resource \"pods/exec\" in API group \"\" in the namespace \"team\""
        ),
        "{}",
        stderr(&out)
    );

    // SubjectAccessReview, as a webhook authorizer's client sends it.
    let rt = support::runtime();
    let admin = rt.block_on(c.client());
    let review = |user: &str, verb: &str| -> String {
        let body = format!(
            r#"{{"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
               "spec": {{"user": "{user}", "groups": ["dev"], "resourceAttributes": {{"verb": "{verb}", "resource": "pods", "namespace": "x"}}}}}}"#
        );
        let req = http::Request::post("/apis/authorization.k8s.io/v1/subjectaccessreviews")
            .header("content-type", "application/json")
            .body(body.into_bytes())
            .unwrap();
        let answer: serde_json::Value = rt.block_on(admin.request(req)).expect("review");
        answer["status"]["allowed"].to_string()
    };
    assert_eq!(review("carol", "list"), "true");
    assert_eq!(review("carol", "delete"), "false");
}

#[test]
fn impersonation_anonymous_requests_and_default_policy() {
    let r = Rbac::start();
    let c = &r.c;

    // The admin (system:masters) may impersonate; alice may not until granted.
    let out = c.kubectl_output(&["get", "pods", "--as=bob"], None);
    assert_eq!(
        stderr(&out),
        "Error from server (Forbidden): pods is forbidden: User \"bob\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
    );
    let out = r.as_token("alice-token", &["get", "pods", "--as=bob"]);
    assert_eq!(
        stderr(&out),
        "Error from server (Forbidden): users \"bob\" is forbidden: User \"alice\" cannot impersonate resource \"users\" in API group \"\" at the cluster scope"
    );
    c.kubectl(&[
        "create",
        "clusterrole",
        "impersonate-bob",
        "--verb=impersonate",
        "--resource=users",
        "--resource-name=bob",
    ]);
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "alice-as-bob",
        "--clusterrole=impersonate-bob",
        "--user=alice",
    ]);
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "bob-admin",
        "--clusterrole=cluster-admin",
        "--user=bob",
    ]);
    r.eventually_allowed("alice-token", &["get", "pods", "--as=bob"]);
    let out = r.as_token("alice-token", &["get", "pods", "--as=carol"]);
    assert!(
        stderr(&out).contains("cannot impersonate resource \"users\""),
        "{}",
        stderr(&out)
    );
    let whoami = c.kubectl(&[
        "auth",
        "whoami",
        "--as=system:serviceaccount:kube-system:default",
        "-o",
        "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
    ]);
    assert_eq!(
        whoami,
        "system:serviceaccount:kube-system:default [\"system:serviceaccounts\",\"system:serviceaccounts:kube-system\",\"system:authenticated\"]"
    );

    // No credentials at all: system:anonymous, allowed the public paths only. (kubectl would prompt
    // for a password, so a bare kube client asks.)
    let rt = support::runtime();
    let anonymous = rt.block_on(async {
        let mut config = kube::Config::new(c.url.parse().expect("url"));
        config.accept_invalid_certs = true;
        config.default_retry = false;
        kube::Client::try_from(config).expect("client")
    });
    let anon = |path: &str| -> (u16, String) {
        rt.block_on(async {
            let req = http::Request::get(path).body(Vec::new()).unwrap();
            match anonymous.request_text(req).await {
                Ok(body) => (200, body),
                Err(kube::Error::Api(status)) => (status.code, status.message),
                Err(e) => panic!("{path}: {e}"),
            }
        })
    };
    assert_eq!(anon("/healthz"), (200, "ok".to_string()));
    let (code, body) = anon("/api");
    assert_eq!(code, 403, "{body}");
    assert_eq!(
        body,
        "forbidden: User \"system:anonymous\" cannot get path \"/api\""
    );
    let (code, body) = anon("/api/v1/namespaces/default/pods");
    assert_eq!(code, 403, "{body}");
    // A token that does not verify is 401, not anonymous.
    let out = r.as_token("wrong", &["get", "pods"]);
    assert_eq!(
        stderr(&out),
        "error: You must be logged in to the server (Unauthorized)"
    );

    // The default policy.
    let roles = c.kubectl(&[
        "get",
        "clusterroles",
        "cluster-admin",
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:node",
        "-o",
        "name",
    ]);
    assert_eq!(roles.lines().count(), 6, "{roles}");
    assert_eq!(
        c.kubectl(&[
            "get", "clusterrolebinding", "cluster-admin", "-o",
            "jsonpath={.roleRef.name} {.subjects[0].kind}/{.subjects[0].name} {.metadata.labels.kubernetes\\.io/bootstrapping}",
        ]),
        "cluster-admin Group/system:masters rbac-defaults"
    );
    let edit = c.kubectl(&[
        "get",
        "clusterrole",
        "edit",
        "-o",
        "jsonpath={.rules[*].resources}",
    ]);
    assert!(
        edit.contains("deployments") && edit.contains("pods/exec"),
        "{edit}"
    );
}
