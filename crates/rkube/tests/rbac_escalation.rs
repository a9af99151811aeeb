//! RBAC privilege-escalation prevention through kubectl, as against upstream: a user allowed to
//! write Roles and bindings may grant only what she holds (403 with upstream's message naming the
//! missing rules), unless she has `escalate` on roles or `bind` on the bound role; metadata-only
//! updates are checked too, except for the garbage collector's fields; an aggregated ClusterRole
//! needs full rights; the clusterrole-aggregation controller's service account may escalate.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

const GRANT_REFUSED: &str =
    "user \"alice\" (groups=[\"system:authenticated\"]) is attempting to grant RBAC permissions not currently held:";

/// Polls `kubectl auth can-i` until the user may (bindings reach the authorizer through a watch).
fn wait_until_allowed(c: &Cluster, who: &str, can_i: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut args = vec!["auth", "can-i"];
    args.extend_from_slice(can_i);
    let as_user = format!("--as={who}");
    args.push(&as_user);
    while c.kubectl_output(&args, None).stdout != b"yes\n" {
        assert!(Instant::now() < deadline, "never allowed: {args:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn users_grant_only_what_they_hold() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl(&["create", "namespace", "team"]);
    // alice may manage Roles and RoleBindings in team and read configmaps there, not secrets.
    c.kubectl(&[
        "create",
        "role",
        "rbac-manager",
        "-n",
        "team",
        "--verb=get,list,create,update,patch,delete",
        "--resource=roles.rbac.authorization.k8s.io,rolebindings.rbac.authorization.k8s.io",
    ]);
    c.kubectl(&[
        "create",
        "role",
        "cm-reader",
        "-n",
        "team",
        "--verb=get,list",
        "--resource=configmaps",
    ]);
    for role in ["rbac-manager", "cm-reader"] {
        c.kubectl(&[
            "create",
            "rolebinding",
            &format!("alice-{role}"),
            "-n",
            "team",
            &format!("--role={role}"),
            "--user=alice",
        ]);
    }
    wait_until_allowed(&c, "alice", &["create", "roles", "-n", "team"]);
    wait_until_allowed(&c, "alice", &["list", "configmaps", "-n", "team"]);

    // A Role granting what she lacks is refused, with the missing rules.
    let err = c.kubectl_fails(
        &[
            "create",
            "role",
            "secret-reader",
            "-n",
            "team",
            "--verb=get",
            "--resource=secrets",
            "--as=alice",
        ],
        None,
    );
    assert_eq!(
        err,
        format!(
            "Error from server (Forbidden): roles.rbac.authorization.k8s.io \"secret-reader\" is forbidden: \
             {GRANT_REFUSED}\n{{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"get\"]}}\n"
        )
    );
    // What she holds she may grant, and bind to others.
    c.kubectl(&[
        "create",
        "role",
        "cm-getter",
        "-n",
        "team",
        "--verb=get",
        "--resource=configmaps",
        "--as=alice",
    ]);
    c.kubectl(&[
        "create",
        "rolebinding",
        "bob-cm-getter",
        "-n",
        "team",
        "--role=cm-getter",
        "--user=bob",
        "--as=alice",
    ]);
    // Widening it by an update is refused as a create would be.
    let widen = r#"[{"op": "add", "path": "/rules/-", "value": {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}}]"#;
    let err = c.kubectl_fails(
        &[
            "patch",
            "role",
            "cm-getter",
            "-n",
            "team",
            "--type=json",
            "-p",
            widen,
            "--as=alice",
        ],
        None,
    );
    assert!(
        err.contains("{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\"]}"),
        "{err}"
    );

    // A role she could not have written: relabelling it is checked too (upstream skips only the
    // garbage collector's fields), a finalizer is not.
    c.kubectl(&[
        "create",
        "role",
        "secrets-admin",
        "-n",
        "team",
        "--verb=*",
        "--resource=secrets",
    ]);
    let err = c.kubectl_fails(
        &[
            "label",
            "role",
            "secrets-admin",
            "-n",
            "team",
            "tier=gold",
            "--as=alice",
        ],
        None,
    );
    assert!(err.contains(GRANT_REFUSED), "{err}");
    c.kubectl(&[
        "patch",
        "role",
        "secrets-admin",
        "-n",
        "team",
        "--type=merge",
        "-p",
        r#"{"metadata": {"finalizers": ["example.com/keep"]}}"#,
        "--as=alice",
    ]);

    // cluster-admin cannot be bound without its rules...
    let err = c.kubectl_fails(
        &[
            "create",
            "rolebinding",
            "alice-admin",
            "-n",
            "team",
            "--clusterrole=cluster-admin",
            "--user=alice",
            "--as=alice",
        ],
        None,
    );
    assert!(
        err.contains(&format!(
            "rolebindings.rbac.authorization.k8s.io \"alice-admin\" is forbidden: {GRANT_REFUSED}\n\
             {{APIGroups:[\"*\"], Resources:[\"*\"], Verbs:[\"*\"]}}\n{{NonResourceURLs:[\"*\"], Verbs:[\"*\"]}}"
        )),
        "{err}"
    );
    // ...and a binding to a role that does not exist is a 404, as upstream.
    let err = c.kubectl_fails(
        &[
            "create",
            "rolebinding",
            "ghost",
            "-n",
            "team",
            "--role=ghost",
            "--user=bob",
            "--as=alice",
        ],
        None,
    );
    assert!(
        err.contains("roles.rbac.authorization.k8s.io \"ghost\" not found"),
        "{err}"
    );

    // With `escalate` on roles she may grant what she lacks.
    c.kubectl(&[
        "create",
        "role",
        "escalator",
        "-n",
        "team",
        "--verb=escalate",
        "--resource=roles.rbac.authorization.k8s.io",
    ]);
    c.kubectl(&[
        "create",
        "rolebinding",
        "alice-escalator",
        "-n",
        "team",
        "--role=escalator",
        "--user=alice",
    ]);
    wait_until_allowed(&c, "alice", &["escalate", "roles", "-n", "team"]);
    c.kubectl(&[
        "create",
        "role",
        "secret-reader",
        "-n",
        "team",
        "--verb=get",
        "--resource=secrets",
        "--as=alice",
    ]);
    // Escalating roles is not binding them: she still lacks secrets.
    let err = c.kubectl_fails(
        &[
            "create",
            "rolebinding",
            "bob-secrets",
            "-n",
            "team",
            "--role=secret-reader",
            "--user=bob",
            "--as=alice",
        ],
        None,
    );
    assert!(err.contains(GRANT_REFUSED), "{err}");

    // With `bind` on cluster-admin, in this namespace, she may bind it here.
    c.kubectl(&[
        "create",
        "clusterrole",
        "bind-cluster-admin",
        "--verb=bind",
        "--resource=clusterroles.rbac.authorization.k8s.io",
        "--resource-name=cluster-admin",
    ]);
    c.kubectl(&[
        "create",
        "rolebinding",
        "alice-binds-admin",
        "-n",
        "team",
        "--clusterrole=bind-cluster-admin",
        "--user=alice",
    ]);
    wait_until_allowed(
        &c,
        "alice",
        &["bind", "clusterroles/cluster-admin", "-n", "team"],
    );
    c.kubectl(&[
        "create",
        "rolebinding",
        "bob-admin",
        "-n",
        "team",
        "--clusterrole=cluster-admin",
        "--user=bob",
        "--as=alice",
    ]);
}

#[test]
fn cluster_roles_aggregation_and_the_aggregation_controller() {
    let c = Cluster::start(Backend::Sqlite);
    // alice holds the usual verbs on every resource cluster-wide, but no URLs and not `*` (which
    // would include `escalate`).
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "almost-admin"},
                "rules": [{"apiGroups": ["*"], "resources": ["*"],
                           "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]}"#,
        ),
    );
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "alice-almost-admin",
        "--clusterrole=almost-admin",
        "--user=alice",
    ]);
    wait_until_allowed(&c, "alice", &["create", "clusterroles"]);
    c.kubectl(&[
        "create",
        "clusterrole",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
        "--as=alice",
    ]);
    let err = c.kubectl_fails(
        &[
            "create",
            "clusterrole",
            "metrics-reader",
            "--verb=get",
            "--non-resource-url=/metrics",
            "--as=alice",
        ],
        None,
    );
    assert!(
        err.contains("{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"),
        "{err}"
    );
    // An aggregation rule can gather anything: it needs everything.
    let err = c.kubectl_fails(
        &[
            "create",
            "clusterrole",
            "gatherer",
            "--aggregation-rule=example.com/aggregate=true",
            "--as=alice",
        ],
        None,
    );
    assert!(
        err.contains(
            "clusterroles.rbac.authorization.k8s.io \"gatherer\" is forbidden: must have cluster-admin privileges to use the aggregationRule"
        ),
        "{err}"
    );

    // Upstream's controller role: the aggregation controller's service account may escalate
    // ClusterRoles, so it may write rules it does not hold.
    let aggregator = "system:serviceaccount:kube-system:clusterrole-aggregation-controller";
    wait_until_allowed(&c, aggregator, &["escalate", "clusterroles"]);
    let as_aggregator = format!("--as={aggregator}");
    c.kubectl(&[
        "patch",
        "clusterrole",
        "pod-reader",
        "--type=merge",
        "-p",
        r#"{"rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]}"#,
        &as_aggregator,
    ]);
    assert_eq!(
        c.kubectl(&[
            "get",
            "clusterrole",
            "pod-reader",
            "-o",
            "jsonpath={.rules[0].resources}"
        ]),
        "[\"secrets\"]"
    );
}
