//! Table-driven checks of quota admission's arithmetic (`check_request`).

use super::*;
use serde_json::json;

fn quota(name: &str, spec: Value, status: Value) -> ResourceQuota {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec, "status": status}))
        .expect("quota")
}

/// A quota whose status the controller computed: hard as given, used as given.
fn computed(name: &str, hard: Value, used: Value) -> ResourceQuota {
    quota(
        name,
        json!({"hard": hard}),
        json!({"hard": hard, "used": used}),
    )
}

fn pod(v: Value) -> Pod {
    serde_json::from_value(v).expect("pod")
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::UNIX_EPOCH
}

fn plain_pod() -> Pod {
    pod(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}))
}

fn cpu_pod(cpu: &str) -> Pod {
    pod(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a",
        "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}, "limits": {"cpu": cpu, "memory": "100Mi"}}}]}}),
    )
}

/// The outcome as text: the changed quotas' new usage, or the denial.
fn outcome(quotas: &[ResourceQuota], e: &Evaluator, req: &Request<'_>) -> String {
    match check_request(quotas, e, req, now()) {
        Ok(changes) => changes
            .iter()
            .zip(quotas)
            .filter_map(|(c, q)| {
                c.as_ref().map(|used| {
                    format!(
                        "{}: {}",
                        q.metadata.name.as_deref().unwrap_or(""),
                        quota::pretty_print(used)
                    )
                })
            })
            .collect::<Vec<_>>()
            .join("; "),
        Err(Denial::Forbidden(why)) => format!("forbidden: {why}"),
        Err(Denial::Error(e)) => format!("error: {e}"),
    }
}

fn create(object: Object<'_>) -> Request<'_> {
    Request {
        operation: Operation::Create,
        object,
        old: None,
    }
}

#[test]
fn pod_creates() {
    let plain = plain_pod();
    let small = cpu_pod("500m");
    let big = cpu_pod("2");
    let best_effort_scope = quota(
        "be",
        json!({"hard": {"pods": "1"}, "scopes": ["BestEffort"]}),
        json!({"hard": {"pods": "1"}, "used": {"pods": "0"}}),
    );
    let cases: Vec<(&str, Vec<ResourceQuota>, &Pod, &str)> = vec![
        (
            "fits and is charged",
            vec![computed("q", json!({"pods": "2"}), json!({"pods": "1"}))],
            &plain,
            "q: pods=2",
        ),
        (
            "over the pod count",
            vec![computed("q", json!({"pods": "2"}), json!({"pods": "2"}))],
            &plain,
            "forbidden: exceeded quota: q, requested: pods=1, used: pods=2, limited: pods=2",
        ),
        (
            "several resources exceeded, in name order",
            vec![computed(
                "compute",
                json!({"requests.cpu": "1", "limits.cpu": "1", "pods": "10", "requests.memory": "1Gi", "limits.memory": "1Gi"}),
                json!({"requests.cpu": "500m", "limits.cpu": "500m", "pods": "1", "requests.memory": "0", "limits.memory": "0"}),
            )],
            &big,
            "forbidden: exceeded quota: compute, requested: limits.cpu=2,requests.cpu=2, used: limits.cpu=500m,requests.cpu=500m, limited: limits.cpu=1,requests.cpu=1",
        ),
        (
            "compute quota charges requests and limits",
            vec![computed(
                "compute",
                json!({"requests.cpu": "1", "limits.memory": "1Gi"}),
                json!({"requests.cpu": "250m", "limits.memory": "0"}),
            )],
            &small,
            "compute: limits.memory=100Mi,requests.cpu=750m",
        ),
        (
            "a pod without requests under a compute quota",
            vec![computed("compute", json!({"requests.cpu": "1"}), json!({"requests.cpu": "0"}))],
            &plain,
            "forbidden: failed quota: compute: must specify requests.cpu for: a",
        ),
        (
            "status not computed yet",
            vec![quota("new", json!({"hard": {"pods": "1"}}), json!({"hard": {"pods": "1"}}))],
            &plain,
            "forbidden: status unknown for quota: new, resources: pods",
        ),
        (
            "a quota the controller has not seen does not apply",
            vec![quota("unseen", json!({"hard": {"pods": "0"}}), json!({}))],
            &plain,
            "",
        ),
        (
            "a quota tracking other things does not apply",
            vec![computed("cm", json!({"configmaps": "1"}), json!({"configmaps": "1"}))],
            &plain,
            "",
        ),
        (
            "out of scope",
            vec![best_effort_scope.clone()],
            &small,
            "",
        ),
        (
            "in scope",
            vec![best_effort_scope],
            &plain,
            "be: pods=1",
        ),
        (
            "every matching quota is charged",
            vec![
                computed("a", json!({"pods": "5"}), json!({"pods": "1"})),
                computed("b", json!({"count/pods": "5"}), json!({"count/pods": "3"})),
            ],
            &plain,
            "a: pods=2; b: count/pods=4",
        ),
        (
            "one full quota refuses even if another has room",
            vec![
                computed("a", json!({"pods": "5"}), json!({"pods": "1"})),
                computed("b", json!({"count/pods": "3"}), json!({"count/pods": "3"})),
            ],
            &plain,
            "forbidden: exceeded quota: b, requested: count/pods=1, used: count/pods=3, limited: count/pods=3",
        ),
    ];
    for (name, quotas, p, want) in cases {
        assert_eq!(
            outcome(&quotas, &Evaluator::Pods, &create(Object::Pod(p))),
            want,
            "{name}"
        );
    }
}

#[test]
fn object_counts_use_both_names() {
    let e = Evaluator::for_resource("", "configmaps");
    let cases = [
        (
            computed("q", json!({"configmaps": "2", "count/configmaps": "5"}), json!({"configmaps": "1", "count/configmaps": "1"})),
            "q: configmaps=2,count/configmaps=2",
        ),
        (
            computed("q", json!({"configmaps": "1"}), json!({"configmaps": "1"})),
            "forbidden: exceeded quota: q, requested: configmaps=1, used: configmaps=1, limited: configmaps=1",
        ),
    ];
    for (q, want) in cases {
        assert_eq!(outcome(&[q], &e, &create(Object::Other)), want);
    }
    // Updates of counted objects change nothing.
    let update = Request {
        operation: Operation::Update,
        object: Object::Other,
        old: Some(Object::Other),
    };
    let full = computed("q", json!({"configmaps": "1"}), json!({"configmaps": "1"}));
    assert_eq!(outcome(&[full], &e, &update), "");
}

#[test]
fn updates_charge_only_the_growth() {
    let svc = |t: &str| -> Service {
        serde_json::from_value(
            json!({"metadata": {"name": "s"}, "spec": {"type": t, "ports": [{"port": 80}]}}),
        )
        .expect("service")
    };
    let (cluster_ip, node_port) = (svc("ClusterIP"), svc("NodePort"));
    let quotas = vec![computed(
        "svc",
        json!({"services": "2", "services.nodeports": "1"}),
        json!({"services": "1", "services.nodeports": "0"}),
    )];
    let to_node_port = Request {
        operation: Operation::Update,
        object: Object::Service(&node_port),
        old: Some(Object::Service(&cluster_ip)),
    };
    assert_eq!(
        outcome(&quotas, &Evaluator::Services, &to_node_port),
        "svc: services=1,services.nodeports=1"
    );
    let full = vec![computed(
        "svc",
        json!({"services.nodeports": "0"}),
        json!({"services.nodeports": "0"}),
    )];
    assert_eq!(
        outcome(&full, &Evaluator::Services, &to_node_port),
        "forbidden: exceeded quota: svc, requested: services.nodeports=1, used: services.nodeports=0, limited: services.nodeports=0"
    );
    let back = Request {
        operation: Operation::Update,
        object: Object::Service(&cluster_ip),
        old: Some(Object::Service(&node_port)),
    };
    assert_eq!(outcome(&full, &Evaluator::Services, &back), "");

    let claim = |size: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {"resources": {"requests": {"storage": size}}}}))
            .expect("claim")
    };
    let (small, large) = (claim("1Gi"), claim("2Gi"));
    let expand = Request {
        operation: Operation::Update,
        object: Object::PersistentVolumeClaim(&large),
        old: Some(Object::PersistentVolumeClaim(&small)),
    };
    let storage = vec![computed(
        "storage",
        json!({"requests.storage": "1500Mi", "persistentvolumeclaims": "5"}),
        json!({"requests.storage": "1Gi", "persistentvolumeclaims": "1"}),
    )];
    assert_eq!(
        outcome(&storage, &Evaluator::PersistentVolumeClaims, &expand),
        "forbidden: exceeded quota: storage, requested: requests.storage=1Gi, used: requests.storage=1Gi, limited: requests.storage=1500Mi"
    );
    let missing_old = Request {
        operation: Operation::Update,
        object: Object::PersistentVolumeClaim(&large),
        old: None,
    };
    assert_eq!(
        outcome(&storage, &Evaluator::PersistentVolumeClaims, &missing_old),
        "forbidden: unable to get previous usage since prior version of object was not found"
    );
}

fn resize<'a>(new: &'a Pod, old: &'a Pod) -> Request<'a> {
    Request {
        operation: Operation::Update,
        object: Object::Pod(new),
        old: Some(Object::Pod(old)),
    }
}

/// `pods/resize` (upstream's pod evaluator handles it): only the growth of the pod's requests and
/// limits is charged; a resize down charges nothing.
#[test]
fn pod_resizes_charge_the_growth() {
    let (small, medium, big) = (cpu_pod("500m"), cpu_pod("800m"), cpu_pod("2"));
    let compute = [computed(
        "compute",
        json!({"requests.cpu": "1", "limits.cpu": "1"}),
        json!({"requests.cpu": "500m", "limits.cpu": "500m"}),
    )];
    assert_eq!(
        outcome(&compute, &Evaluator::Pods, &resize(&big, &small)),
        "forbidden: exceeded quota: compute, requested: limits.cpu=1500m,requests.cpu=1500m, used: limits.cpu=500m,requests.cpu=500m, limited: limits.cpu=1,requests.cpu=1"
    );
    assert_eq!(
        outcome(&compute, &Evaluator::Pods, &resize(&medium, &small)),
        "compute: limits.cpu=800m,requests.cpu=800m"
    );
    assert_eq!(
        outcome(&compute, &Evaluator::Pods, &resize(&small, &medium)),
        ""
    );
}
