//! ClusterRole aggregation through kubectl, against `rkube server`: the default roles (view, edit,
//! admin and the `system:aggregate-to-*` roles) are aggregated at start; a ClusterRole that gets an
//! aggregation label lends its rules to view, and through view to edit and admin; removing the label
//! takes them back; a ClusterRole made with `kubectl create clusterrole --aggregation-rule` collects
//! the rules of the roles it selects, written by the controller with server-side apply.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn rules(c: &Cluster, role: &str) -> String {
    c.kubectl(&["get", "clusterrole", role, "-o", "jsonpath={.rules}"])
}

#[test]
fn aggregated_cluster_roles_follow_the_roles_they_select() {
    let c = Cluster::start_all(Backend::Sqlite, &["--disable-scheduler"]);

    // The bootstrap roles: view gets system:aggregate-to-view's rules, edit also view's, admin all.
    for role in ["view", "edit", "admin"] {
        wait_for(&format!("{role} to aggregate view's rules"), || {
            rules(&c, role).contains("controllerrevisions")
        });
    }
    assert!(rules(&c, "edit").contains("pods/exec"));
    assert!(!rules(&c, "view").contains("pods/exec"));
    wait_for("admin to aggregate edit's rules", || {
        let admin = rules(&c, "admin");
        admin.contains("pods/exec") && admin.contains("localsubjectaccessreviews")
    });
    let cluster_admin = rules(&c, "cluster-admin");
    assert!(
        cluster_admin.contains(r#""verbs":["*"]"#),
        "{cluster_admin}"
    );

    // A newly labelled ClusterRole feeds view, edit and admin.
    c.kubectl(&[
        "create",
        "clusterrole",
        "widget-reader",
        "--verb=get",
        "--non-resource-url=/widgets",
    ]);
    assert!(!rules(&c, "view").contains("/widgets"));
    c.kubectl(&[
        "label",
        "clusterrole",
        "widget-reader",
        "rbac.authorization.k8s.io/aggregate-to-view=true",
    ]);
    for role in ["view", "edit", "admin"] {
        wait_for(&format!("{role} to pick up widget-reader's rule"), || {
            rules(&c, role).contains("/widgets")
        });
    }
    c.kubectl(&[
        "label",
        "clusterrole",
        "widget-reader",
        "rbac.authorization.k8s.io/aggregate-to-view-",
    ]);
    for role in ["view", "edit", "admin"] {
        wait_for(&format!("{role} to drop widget-reader's rule"), || {
            !rules(&c, role).contains("/widgets")
        });
    }

    // kubectl's own aggregated ClusterRole.
    c.kubectl(&[
        "create",
        "clusterrole",
        "monitoring",
        "--aggregation-rule=rbac.example.com/aggregate-to-monitoring=true",
    ]);
    c.kubectl(&[
        "create",
        "clusterrole",
        "monitoring-endpoints",
        "--verb=get,list,watch",
        "--resource=endpoints",
    ]);
    c.kubectl(&[
        "label",
        "clusterrole",
        "monitoring-endpoints",
        "rbac.example.com/aggregate-to-monitoring=true",
    ]);
    wait_for("monitoring to aggregate monitoring-endpoints", || {
        rules(&c, "monitoring")
            == r#"[{"apiGroups":[""],"resources":["endpoints"],"verbs":["get","list","watch"]}]"#
    });
    let managers = c.kubectl(&[
        "get",
        "clusterrole",
        "monitoring",
        "--show-managed-fields",
        "-o",
        "jsonpath={range .metadata.managedFields[*]}{.manager}={.operation} {end}",
    ]);
    assert!(
        managers.contains("clusterrole-aggregation-controller=Apply"),
        "{managers}"
    );
}
