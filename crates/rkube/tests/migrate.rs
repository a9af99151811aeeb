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
