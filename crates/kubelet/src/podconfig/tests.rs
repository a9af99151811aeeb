use super::*;
use serde_json::json;

fn pod(uid: &str, image: &str, extra: serde_json::Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": format!("p-{uid}"), "namespace": "default", "uid": uid},
        "spec": {"containers": [{"name": "c", "image": image}]},
    });
    if let (Some(o), Some(e)) = (v.as_object_mut(), extra.as_object()) {
        for (k, val) in e {
            if k == "metadata" {
                for (mk, mv) in val.as_object().unwrap() {
                    o["metadata"][mk] = mv.clone();
                }
            } else {
                o.insert(k.clone(), val.clone());
            }
        }
    }
    serde_json::from_value(v).unwrap()
}

fn ops(updates: &[PodUpdate]) -> Vec<(Op, Vec<String>)> {
    updates
        .iter()
        .map(|u| {
            let mut uids: Vec<String> = u.pods.iter().map(|p| uid(p).to_string()).collect();
            uids.sort();
            (u.op, uids)
        })
        .collect()
}

type Case = (Vec<Pod>, Vec<Pod>, Vec<(Op, Vec<&'static str>)>);

#[test]
fn merge_emits_upstream_ops_in_order() {
    let deleted = json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30}});
    let status = json!({"status": {"phase": "Running"}});
    // (first set, second set, expected updates of the second merge)
    let cases: Vec<Case> = vec![
        (
            vec![],
            vec![pod("a", "x", json!({}))],
            vec![(Op::Add, vec!["a"])],
        ),
        (
            vec![pod("a", "x", json!({}))],
            vec![],
            vec![(Op::Remove, vec!["a"])],
        ),
        (
            vec![pod("a", "x", json!({}))],
            vec![pod("a", "x", json!({}))],
            vec![],
        ),
        (
            vec![pod("a", "x", json!({}))],
            vec![pod("a", "y", json!({}))],
            vec![(Op::Update, vec!["a"])],
        ),
        (
            vec![pod("a", "x", json!({}))],
            vec![pod("a", "x", deleted.clone())],
            vec![(Op::Delete, vec!["a"])],
        ),
        (
            vec![pod("a", "x", json!({}))],
            vec![pod("a", "x", status)],
            vec![(Op::Reconcile, vec!["a"])],
        ),
        (
            vec![pod("a", "x", json!({})), pod("b", "x", json!({}))],
            vec![pod("b", "y", json!({})), pod("c", "x", json!({}))],
            vec![
                (Op::Remove, vec!["a"]),
                (Op::Add, vec!["c"]),
                (Op::Update, vec!["b"]),
            ],
        ),
    ];
    for (i, (first, second, want)) in cases.into_iter().enumerate() {
        let mut s = Storage::default();
        s.merge("api", first);
        let got = ops(&s.merge("api", second));
        let want: Vec<(Op, Vec<String>)> = want
            .into_iter()
            .map(|(op, u)| (op, u.into_iter().map(String::from).collect()))
            .collect();
        assert_eq!(got, want, "case {i}");
    }
}

#[test]
fn sources_are_kept_apart_and_annotated() {
    let mut s = Storage::default();
    s.merge("api", vec![pod("a", "x", json!({}))]);
    let out = s.merge("file", vec![pod("b", "x", json!({}))]);
    assert_eq!(ops(&out), vec![(Op::Add, vec!["b".to_string()])]);
    let a = out[0].pods[0].metadata.annotations.clone().unwrap();
    assert_eq!(
        a.get(CONFIG_SOURCE_ANNOTATION).map(String::as_str),
        Some("file")
    );
    assert!(a.contains_key(CONFIG_SEEN_ANNOTATION));
    // The file source emptying itself removes only its pod.
    assert_eq!(
        ops(&s.merge("file", vec![])),
        vec![(Op::Remove, vec!["b".to_string()])]
    );
    assert!(s.seen.contains("api") && s.seen.contains("file"));
}

#[tokio::test]
async fn channels_feed_one_ordered_stream() {
    let (config, mut updates) = PodConfig::new();
    let api = config.channel("api");
    let file = config.channel("file");
    assert!(!config.seen_all_sources());
    api.send(SourceSet(vec![pod("a", "x", json!({}))]))
        .await
        .unwrap();
    let u = updates.recv().await.unwrap();
    assert_eq!((u.op, u.source.as_str()), (Op::Add, "api"));
    file.send(SourceSet(vec![])).await.unwrap();
    api.send(SourceSet(vec![])).await.unwrap();
    let u = updates.recv().await.unwrap();
    assert_eq!((u.op, u.source.as_str()), (Op::Remove, "api"));
    assert!(config.seen_all_sources());
}
