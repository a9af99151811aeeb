//! `rkube migrate`: a cluster's state moves from SQLite to etcd and back with every object's UID
//! kept, and the API server serves it from the new backend; a watch from before the move gets 410
//! Gone, relists and watches on.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde_json::Value;
use storage::etcd_process::EtcdProcess;
use support::{Backend, Cluster, API_ONLY};

const CONFIGMAPS: usize = 300;

/// name -> uid of every ConfigMap in namespace `moved`.
fn uids(c: &Cluster) -> BTreeMap<String, String> {
    let out = c.kubectl(&["get", "configmaps", "-n", "moved", "-o", "json"]);
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            (
                m["name"].as_str().unwrap().to_string(),
                m["uid"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn migrate(from: &str, to: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["migrate", "--from", from, "--to", to])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run rkube migrate")
}

fn migrated(from: &str, to: &str) -> String {
    let out = migrate(from, to);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "rkube migrate --from {from} --to {to}: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The resourceVersion of a ConfigMap list in `moved` (kubectl's own `-o json` lists carry none).
fn list_rv(c: &Cluster) -> String {
    let out = c.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/moved/configmaps?limit=1",
    ]);
    let list: Value = serde_json::from_str(&out).unwrap();
    list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string()
}

/// The events of a ConfigMap watch in `moved` from `rv` that ends after 2 s (or its refusal).
fn watch_from(c: &Cluster, rv: &str) -> String {
    let path = format!(
        "/api/v1/namespaces/moved/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=2"
    );
    let out = c.kubectl_output(&["get", "--raw", &path], None);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Starts an API-only server on `dir` with `storage_args`.
fn serve(dir: tempfile::TempDir, storage_args: &[&str]) -> Cluster {
    let mut args = API_ONLY.to_vec();
    args.extend_from_slice(&["--disable-kubelet", "--disable-dns", "--disable-proxy"]);
    args.extend_from_slice(storage_args);
    Cluster::start_in(dir, Backend::Sqlite, &args)
}

fn take_dir(c: &mut Cluster) -> tempfile::TempDir {
    c.stop();
    std::mem::replace(&mut c.dir, tempfile::tempdir().unwrap())
}

fn set_aside(dir: &Path, to: &str) {
    std::fs::rename(dir.join("state.db"), dir.join(to)).unwrap();
    for suffix in ["-wal", "-shm"] {
        let _ = std::fs::rename(
            dir.join(format!("state.db{suffix}")),
            dir.join(format!("{to}{suffix}")),
        );
    }
}

#[test]
fn a_cluster_moves_from_sqlite_to_etcd_and_back_with_its_uids() {
    let mut sqlite = Cluster::start(Backend::Sqlite);
    sqlite.kubectl(&["create", "namespace", "moved"]);
    let items: Vec<Value> = (0..CONFIGMAPS)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("cm-{i:04}"), "namespace": "moved",
                             "labels": {"batch": (i % 7).to_string()}},
                "data": {"i": i.to_string()},
            })
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    sqlite.kubectl_in(&["create", "-f", "-"], Some(&list.to_string()));
    let before = uids(&sqlite);
    assert_eq!(before.len(), CONFIGMAPS);
    // A client's last resourceVersion before the move (an informer's, say).
    let old_rv = list_rv(&sqlite);

    // SQLite -> etcd. The old file is set aside, so what the server serves comes from etcd.
    let dir = take_dir(&mut sqlite);
    let etcd = EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let to_etcd = format!("etcd:{}", etcd.endpoint);
    let from_sqlite = format!("sqlite:{}", dir.path().display());
    let report = migrated(&from_sqlite, &to_etcd);
    assert!(report.starts_with("migrated "), "{report}");
    set_aside(dir.path(), "state.db.before");
    let mut on_etcd = serve(
        dir,
        &["--storage", "etcd", "--etcd-servers", &etcd.endpoint],
    );
    assert_eq!(uids(&on_etcd), before);
    let cm = on_etcd.kubectl(&["get", "configmap", "cm-0042", "-n", "moved", "-o", "json"]);
    let cm: Value = serde_json::from_str(&cm).unwrap();
    assert_eq!(cm["data"]["i"], "42");
    assert_eq!(cm["metadata"]["labels"]["batch"], "0");
    // The watch started before resumes as upstream's clients do: its old resourceVersion is gone
    // (410, never "too large" and never silently accepted), so it relists and watches on.
    let resumed = watch_from(&on_etcd, &old_rv);
    // (An ERROR event in a 200 stream, as upstream's watch cache answers; kubectl would print an
    // HTTP 410 as "(Expired)" or "(Gone)".)
    assert!(
        resumed.contains("\"code\":410")
            || resumed.contains("(Expired)")
            || resumed.contains("(Gone)"),
        "watch from {old_rv}: {resumed}"
    );
    let new_rv = list_rv(&on_etcd);
    assert_eq!(uids(&on_etcd), before);
    // The cluster works on: a write after the move, which the resumed watch sees.
    on_etcd.kubectl(&["create", "configmap", "after", "-n", "moved"]);
    let events = watch_from(&on_etcd, &new_rv);
    assert!(
        events.contains("\"ADDED\"") && events.contains("\"name\":\"after\""),
        "watch from {new_rv}: {events}"
    );
    let with_after = uids(&on_etcd);
    assert_eq!(with_after.len(), CONFIGMAPS + 1);

    // A destination that holds keys is refused, and left as it was.
    let dir = take_dir(&mut on_etcd);
    let refused = migrate(
        &format!("sqlite:{}/state.db.before", dir.path().display()),
        &to_etcd,
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("already holds"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // etcd -> SQLite (a new state.db in the data dir), served again.
    migrated(&to_etcd, &format!("sqlite:{}", dir.path().display()));
    drop(etcd);
    let back = serve(dir, &[]);
    assert_eq!(uids(&back), with_after);
}

/// Issue 22's "Done when": 10,000 objects of several kinds (ConfigMaps, Secrets, Services with
/// their ClusterIPs, Deployments, a CRD and its objects) go SQLite -> etcd -> SQLite with their
/// UIDs, and a watch opened before the move resumes after it as upstream's clients (reflectors) do:
/// its last resourceVersion gets 410 Expired (rkube migrate marks the old history compacted, as
/// `etcdutl snapshot restore --bump-revision --mark-compacted`, upstream's restore procedure), so it
/// relists and watches from the new list, seeing every later event.
#[test]
fn ten_thousand_objects_round_trip_with_a_watch_that_relists() {
    use futures::{StreamExt, TryStreamExt};
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
    use kube::api::{WatchEvent, WatchParams};

    const KINDS: [(&str, usize); 5] = [
        ("configmaps", 4000),
        ("secrets", 2000),
        ("services", 1500),
        ("deployments", 1500),
        ("widgets", 1000),
    ];
    let started = std::time::Instant::now();
    let mut sqlite = Cluster::start(Backend::Sqlite);
    sqlite.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
 "metadata": {"name": "widgets.example.com"},
 "spec": {"group": "example.com", "scope": "Namespaced",
  "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
  "versions": [{"name": "v1", "served": true, "storage": true,
   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}"#,
        ),
    );
    sqlite.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
    ]);
    sqlite.kubectl(&["create", "namespace", "moved"]);
    let widget = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let api = |client: &kube::Client, plural: &str| -> Api<DynamicObject> {
        let ar = match plural {
            "configmaps" => ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap")),
            "secrets" => ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret")),
            "services" => ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Service")),
            "deployments" => {
                ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
            }
            _ => widget.clone(),
        };
        Api::namespaced_with(client.clone(), "moved", &ar)
    };
    let object = |plural: &str, i: usize| -> DynamicObject {
        let name = format!("o-{i:05}");
        let body = match plural {
            "configmaps" => serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name}, "data": {"i": i.to_string()}}),
            "secrets" => serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name}, "stringData": {"i": i.to_string()}}),
            "services" => serde_json::json!({"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": name}, "spec": {"ports": [{"port": 80}]}}),
            "deployments" => serde_json::json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                    "template": {"metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}}),
            _ => serde_json::json!({"apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": name}, "spec": {"i": i}}),
        };
        serde_json::from_value(body).expect("object")
    };
    // kind -> name -> uid.
    let uids = |client: kube::Client| async move {
        let mut all = BTreeMap::new();
        for (plural, _) in KINDS {
            let list = api(&client, plural)
                .list(&ListParams::default())
                .await
                .expect("list");
            let by_name: BTreeMap<String, String> = list
                .items
                .into_iter()
                .filter_map(|o| Some((o.metadata.name?, o.metadata.uid?)))
                .collect();
            all.insert(plural.to_string(), by_name);
        }
        all
    };
    let rt = support::runtime();

    // 10,000 creates, 32 in flight; a ConfigMap watch runs from the start.
    let (before, watched_rv) = rt.block_on(async {
        let client = sqlite.client().await;
        let cms = api(&client, "configmaps");
        let from = cms
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("rv");
        let watch = cms
            .watch(&WatchParams::default(), &from)
            .await
            .expect("watch");
        // Read as the creates go (a watcher that stops reading is cut off by the server).
        let watcher = tokio::spawn(async move {
            let mut last = from;
            let mut seen = 0;
            futures::pin_mut!(watch);
            while seen < 4000 {
                match watch.next().await {
                    Some(Ok(WatchEvent::Added(o))) => {
                        last = o.metadata.resource_version.expect("rv");
                        seen += 1;
                    }
                    other => panic!("watch before the move: {other:?}"),
                }
            }
            last
        });
        let t = std::time::Instant::now();
        let jobs = KINDS
            .iter()
            .flat_map(|(plural, n)| (0..*n).map(move |i| (*plural, i)));
        futures::stream::iter(jobs)
            .map(|(plural, i)| {
                let api = api(&client, plural);
                let obj = object(plural, i);
                async move { api.create(&PostParams::default(), &obj).await }
            })
            .buffer_unordered(32)
            .try_for_each(|_| async { Ok(()) })
            .await
            .expect("every create");
        eprintln!("10,000 objects created in {:?}", t.elapsed());
        // The watch saw the ConfigMaps; its last resourceVersion is where it would resume.
        let last = watcher.await.expect("watcher");
        let before = uids(client).await;
        (before, last)
    });
    for (plural, n) in KINDS {
        assert_eq!(before[plural].len(), n, "{plural} before the move");
    }

    // SQLite -> etcd.
    let dir = take_dir(&mut sqlite);
    let etcd = EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let to_etcd = format!("etcd:{}", etcd.endpoint);
    let t = std::time::Instant::now();
    let report = migrated(&format!("sqlite:{}", dir.path().display()), &to_etcd);
    eprintln!("SQLite -> etcd in {:?}: {}", t.elapsed(), report.trim());
    set_aside(dir.path(), "state.db.before");
    let mut on_etcd = serve(
        dir,
        &["--storage", "etcd", "--etcd-servers", &etcd.endpoint],
    );
    let (on_etcd_rv, after_uids) = rt.block_on(async {
        let client = on_etcd.client().await;
        let cms = api(&client, "configmaps");
        // The watch resumes from its last resourceVersion: 410, so it relists.
        let gone = support::watch_expired(&cms, &watched_rv)
            .await
            .unwrap_or_else(|| panic!("a watch from {watched_rv} was accepted"));
        assert_eq!(gone.reason, "Expired", "{gone:?}");
        let relisted = cms.list(&ListParams::default()).await.expect("relist");
        assert_eq!(relisted.items.len(), 4000);
        let rv = relisted.metadata.resource_version.expect("rv");
        // Watching on from the relist sees the next write, and only it.
        let watch = cms
            .watch(&WatchParams::default(), &rv)
            .await
            .expect("watch");
        api(&client, "configmaps")
            .create(&PostParams::default(), &object("configmaps", 99_999))
            .await
            .expect("create after the move");
        futures::pin_mut!(watch);
        match watch.next().await {
            Some(Ok(WatchEvent::Added(o))) => {
                assert_eq!(o.metadata.name.as_deref(), Some("o-99999"))
            }
            other => panic!("watch after the relist: {other:?}"),
        }
        (rv, uids(client).await)
    });
    let mut expected = before.clone();
    let extra = after_uids["configmaps"]["o-99999"].clone();
    expected
        .get_mut("configmaps")
        .unwrap()
        .insert("o-99999".into(), extra);
    assert_eq!(after_uids, expected, "objects and UIDs on etcd");

    // etcd -> SQLite, served again; a watch from etcd's resourceVersion relists there too.
    let dir = take_dir(&mut on_etcd);
    let t = std::time::Instant::now();
    migrated(&to_etcd, &format!("sqlite:{}", dir.path().display()));
    eprintln!("etcd -> SQLite in {:?}", t.elapsed());
    drop(etcd);
    let back = serve(dir, &[]);
    rt.block_on(async {
        let client = back.client().await;
        let cms = api(&client, "configmaps");
        let gone = support::watch_expired(&cms, &on_etcd_rv).await;
        assert!(
            gone.is_some(),
            "a watch from {on_etcd_rv} was accepted on SQLite"
        );
        assert_eq!(
            uids(client).await,
            expected,
            "objects and UIDs back on SQLite"
        );
    });
    eprintln!("round trip of 10,000 objects took {:?}", started.elapsed());
}
