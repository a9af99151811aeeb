//! Unit tests of the DaemonSet decisions.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use serde_json::{json, Value};

use super::sync::*;

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn ds(extra: Value) -> DaemonSet {
    let mut v = json!({
        "metadata": {"name": "agent", "namespace": "default", "uid": "d-1", "generation": 4,
                     "annotations": {GENERATION_ANNOTATION: "2"}},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}},
                 "template": {"metadata": {"labels": {"app": "agent"}},
                              "spec": {"containers": [{"name": "c", "image": "agent:1"}]}}}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn node(name: &str, extra: Value) -> Arc<Node> {
    let mut v =
        json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {}});
    merge(&mut v, extra);
    Arc::new(serde_json::from_value(v).unwrap())
}

/// A pod on `node` at `hash`, "ready" (since long), "pending", "terminating" or "failed".
fn pod(name: &str, node: &str, hash: &str, state: &str) -> Arc<Pod> {
    let mut v = json!({"metadata": {"name": name, "namespace": "default", "creationTimestamp": "2026-01-01T00:00:00Z",
                                    "labels": {"app": "agent", HASH_LABEL: hash}},
                       "spec": {"nodeName": node, "containers": [{"name": "c"}]}, "status": {"phase": "Pending"}});
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    match state {
        "ready" => merge(&mut v, ready),
        "terminating" => {
            merge(&mut v, ready);
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
        }
        "failed" => v["status"]["phase"] = json!("Failed"),
        _ => {}
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

fn now() -> Timestamp {
    "2026-01-01T00:01:00Z".parse().unwrap()
}

#[test]
fn pods_are_pinned_and_tolerate_what_daemons_tolerate() {
    let d = ds(json!({"spec": {"template": {"spec": {"hostNetwork": true,
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}}}}}));
    let template = serde_json::to_value(&d.spec.as_ref().unwrap().template).unwrap();
    let p = new_pod(&d, &template, "n1", "h1");
    assert_eq!(p["metadata"]["generateName"], "agent-");
    assert_eq!(p["metadata"]["labels"][HASH_LABEL], "h1");
    assert_eq!(p["metadata"]["labels"][GENERATION_LABEL], "2");
    assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "DaemonSet");
    assert_eq!(
        p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"],
        json!({"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]})
    );
    let tolerations: Vec<String> = p["spec"]["tolerations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            format!(
                "{}:{}:{}",
                t["key"].as_str().unwrap(),
                t["effect"].as_str().unwrap(),
                t["tolerationSeconds"]
            )
        })
        .collect();
    assert_eq!(
        tolerations,
        [
            "node.kubernetes.io/not-ready:NoExecute:null",
            "node.kubernetes.io/unreachable:NoExecute:null",
            "node.kubernetes.io/disk-pressure:NoSchedule:null",
            "node.kubernetes.io/memory-pressure:NoSchedule:null",
            "node.kubernetes.io/pid-pressure:NoSchedule:null",
            "node.kubernetes.io/unschedulable:NoSchedule:null",
            "node.kubernetes.io/network-unavailable:NoSchedule:null",
        ]
    );
    let pod: Pod = serde_json::from_value(p).unwrap();
    assert_eq!(target_node(&pod).as_deref(), Some("n1"));
}

#[test]
fn which_nodes_should_run_daemon_pods() {
    let d = ds(json!({}));
    assert_eq!(node_should_run(&d, &node("plain", json!({}))), (true, true));
    // Unschedulable nodes and the not-ready taint are tolerated.
    let cordoned = node(
        "c",
        json!({"spec": {"unschedulable": true, "taints": [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}]}}),
    );
    assert_eq!(node_should_run(&d, &cordoned), (true, true));
    let no_schedule = node(
        "t",
        json!({"spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]}}),
    );
    assert_eq!(node_should_run(&d, &no_schedule), (false, true));
    let no_execute = node(
        "t",
        json!({"spec": {"taints": [{"key": "gpu", "effect": "NoExecute"}]}}),
    );
    assert_eq!(node_should_run(&d, &no_execute), (false, false));
    let tolerant = ds(
        json!({"spec": {"template": {"spec": {"tolerations": [{"key": "gpu", "operator": "Exists"}]}}}}),
    );
    assert_eq!(node_should_run(&tolerant, &no_execute), (true, true));
    let selective = ds(json!({"spec": {"template": {"spec": {"nodeSelector": {"disk": "ssd"}}}}}));
    assert_eq!(
        node_should_run(&selective, &node("hdd", json!({}))),
        (false, false)
    );
    assert_eq!(
        node_should_run(
            &selective,
            &node("ssd", json!({"metadata": {"labels": {"disk": "ssd"}}}))
        ),
        (true, true)
    );
    let named = ds(json!({"spec": {"template": {"spec": {"nodeName": "only"}}}}));
    assert_eq!(
        node_should_run(&named, &node("other", json!({}))),
        (false, false)
    );
}

#[test]
fn manage_creates_missing_and_removes_extra_pods() {
    let d = ds(json!({}));
    let nodes = [
        node("a", json!({})),
        node("b", json!({})),
        node(
            "c",
            json!({"spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}}),
        ),
    ];
    let unscheduled_gone: Arc<Pod> = {
        let mut v = serde_json::to_value(&*pod("agent-gone", "", "h1", "pending")).unwrap();
        v["spec"]["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gone"]}]}]}}});
        Arc::new(serde_json::from_value(v).unwrap())
    };
    let pods = vec![
        pod("agent-b1", "b", "h1", "ready"),
        pod("agent-b2", "b", "h1", "ready"),
        pod("agent-c", "c", "h1", "ready"),
        pod("agent-bound-gone", "gone2", "h1", "ready"),
        unscheduled_gone,
    ];
    let c = manage(&d, &nodes, &pods_by_node(&pods), "h1", now());
    assert_eq!(c.create, ["a"]);
    assert_eq!(c.delete, ["agent-b2", "agent-c", "agent-gone"]);
    let failed = [pod("agent-a", "a", "h1", "failed")];
    assert_eq!(
        manage(&d, &nodes[..1], &pods_by_node(&failed), "h1", now()).delete,
        ["agent-a"]
    );
}

#[test]
fn rolling_update_respects_max_unavailable_and_surge() {
    let d = ds(json!({"metadata": {"annotations": {GENERATION_ANNOTATION: "3"}}}));
    let nodes = [
        node("a", json!({})),
        node("b", json!({})),
        node("c", json!({})),
    ];
    let old = [
        pod("pa", "a", "h1", "ready"),
        pod("pb", "b", "h1", "ready"),
        pod("pc", "c", "h1", "ready"),
    ];
    let c = rolling_update(&d, &nodes, &pods_by_node(&old), "h2", now());
    assert_eq!(
        c,
        Changes {
            create: vec![],
            delete: vec!["pa".into()]
        }
    );
    // One node is being replaced: nothing more until it is available again.
    let mid = [
        pod("pa", "a", "h1", "terminating"),
        pod("pb", "b", "h1", "ready"),
        pod("pc", "c", "h1", "ready"),
    ];
    assert_eq!(
        rolling_update(&d, &nodes, &pods_by_node(&mid), "h2", now()),
        Changes::default()
    );
    let mid = [
        pod("pa2", "a", "h2", "pending"),
        pod("pb", "b", "h1", "ready"),
        pod("pc", "c", "h1", "ready"),
    ];
    assert_eq!(
        rolling_update(&d, &nodes, &pods_by_node(&mid), "h2", now()),
        Changes::default()
    );
    // Unavailable old pods are replaced regardless.
    let broken = [
        pod("pa2", "a", "h2", "pending"),
        pod("pb", "b", "h1", "pending"),
        pod("pc", "c", "h1", "ready"),
    ];
    assert_eq!(
        rolling_update(&d, &nodes, &pods_by_node(&broken), "h2", now()).delete,
        ["pb"]
    );
    // Surge: a new pod next to the old one first, the old one goes once the new one is available.
    let surge = ds(
        json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}}}),
    );
    assert_eq!(
        rolling_update(&surge, &nodes, &pods_by_node(&old), "h2", now()).create,
        ["a"]
    );
    let surged = [
        pod("pa", "a", "h1", "ready"),
        pod("pa2", "a", "h2", "ready"),
        pod("pb", "b", "h1", "ready"),
    ];
    let c = rolling_update(&surge, &nodes, &pods_by_node(&surged), "h2", now());
    assert_eq!(
        c,
        Changes {
            create: vec!["b".into()],
            delete: vec!["pa".into()]
        }
    );
    let ondelete =
        ds(json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}));
    assert_eq!(
        rolling_update(&ondelete, &nodes, &pods_by_node(&old), "h2", now()),
        Changes::default()
    );
    assert_eq!(
        surge_and_unavailable(
            &ds(json!({"spec": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "10%"}}}})),
            11
        ),
        (0, 2)
    );
}

#[test]
fn status_counts_per_node() {
    let d = ds(json!({"spec": {"template": {"spec": {"nodeSelector": {"role": "x"}}}}}));
    let x = json!({"metadata": {"labels": {"role": "x"}}});
    let nodes = [
        node("a", x.clone()),
        node("b", x.clone()),
        node("c", x),
        node("d", json!({})),
    ];
    let pods = [
        pod("pa", "a", "h2", "ready"),
        pod("pb", "b", "h1", "pending"),
        pod("pd", "d", "h2", "ready"),
    ];
    let s = status(&d, &nodes, &pods_by_node(&pods), "h2", now());
    assert_eq!(
        s,
        json!({"observedGeneration": 4, "desiredNumberScheduled": 3, "currentNumberScheduled": 2,
        "numberMisscheduled": 1, "numberReady": 1, "updatedNumberScheduled": 1, "numberAvailable": 1,
        "numberUnavailable": 2})
    );
    assert_eq!(
        template_hash(&json!({}), Some(0)),
        template_hash(&json!({}), Some(0))
    );
    assert_ne!(
        template_hash(&json!({}), Some(0)),
        template_hash(&json!({}), Some(1))
    );
}
