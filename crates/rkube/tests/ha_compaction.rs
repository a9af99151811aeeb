//! Issue 22: compaction coordinated between API servers, and learnt by a server that starts after
//! it. Two `rkube apiserver`s on one etcd compact every second through upstream's `compact_rev_key`
//! record (`etcd3/compact.go`): etcd runs at most one compaction per recorded round, where each
//! server compacting on its own tick would run two. Then an operator compacts etcd directly (no
//! record) and a third server, started afterwards with its compactor off, answers a watch and an
//! exact list from a compacted resourceVersion with 410 Expired.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, PostParams, VersionMatch};
use storage::etcd_process::EtcdProcess;

mod support;

#[path = "support/ha.rs"]
mod ha;

use ha::{free_port, rkube_cmd, share_pki, spawn, wait_for, Proc};

/// An `rkube apiserver` on `bind`:`port` with `--compaction-interval <interval>`.
fn apiserver(
    name: &str,
    dir: &std::path::Path,
    etcd: &str,
    bind: &str,
    port: u16,
    interval: &str,
) -> Proc {
    let port = port.to_string();
    let args = [
        "apiserver",
        "--data-dir",
        dir.to_str().expect("utf-8"),
        "--etcd-servers",
        etcd,
        "--bind-address",
        bind,
        "--secure-port",
        &port,
        "--compaction-interval",
        interval,
    ];
    let cmd = rkube_cmd(&args, "warn");
    spawn(name, cmd, Some("rkube: serving on https://"), |_, _| {}).0
}

async fn client(kubeconfig: &std::path::Path, url: &str) -> kube::Client {
    let mut config = client::kubeconfig::config_from_file(kubeconfig)
        .await
        .expect("kubeconfig");
    config.cluster_url = url.parse().expect("url");
    kube::Client::try_from(config).expect("client")
}

fn configmap(name: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}, "data": {"k": "v"}}))
        .expect("configmap")
}

/// `compact_rev_key`'s version (the rounds recorded) and etcd's own count of compactions run.
async fn rounds_and_compactions(etcd: &EtcdProcess) -> (i64, f64) {
    let mut raw = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
        .await
        .expect("etcd client");
    let got = raw
        .get(storage::etcd::COMPACT_REV_KEY, None)
        .await
        .expect("get compact_rev_key");
    let rounds = got.kvs().first().map_or(0, |kv| kv.version());
    let ran = etcd
        .metric("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds_count")
        .unwrap_or(0.0);
    (rounds, ran)
}

#[test]
fn compaction_is_coordinated_and_learnt_at_startup() {
    let etcd = EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let port = free_port();
    let a = apiserver(
        "apiserver-a",
        dirs[0].path(),
        &etcd.endpoint,
        "127.0.0.1",
        port,
        "1s",
    );
    share_pki(dirs[0].path(), dirs[1].path());
    share_pki(dirs[0].path(), dirs[2].path());
    let b = apiserver(
        "apiserver-b",
        dirs[1].path(),
        &etcd.endpoint,
        "127.0.0.2",
        port,
        "1s",
    );
    let kubeconfig = dirs[0].path().join("admin.kubeconfig");
    let rt = support::runtime();
    let (old_rv, kept_rv) = rt.block_on(async {
        let ca = client(&kubeconfig, &format!("https://127.0.0.1:{port}")).await;
        let cb = client(&kubeconfig, &format!("https://127.0.0.2:{port}")).await;
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "compact"}})).unwrap();
        Api::<Namespace>::all(ca.clone())
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace");
        let on_a: Api<ConfigMap> = Api::namespaced(ca, "compact");
        let on_b: Api<ConfigMap> = Api::namespaced(cb, "compact");
        let first = on_a
            .create(&PostParams::default(), &configmap("c-0"))
            .await
            .expect("create");
        let old_rv = first.metadata.resource_version.expect("rv");
        // Writes go on through both servers until the history before `old_rv` is compacted.
        let mut i = 0;
        wait_for("a watch from before the compaction refused", || {
            i += 1;
            let (on_a, on_b, old_rv) = (on_a.clone(), on_b.clone(), old_rv.clone());
            async move {
                let api = if i % 2 == 0 { &on_a } else { &on_b };
                api.create(&PostParams::default(), &configmap(&format!("c-{i}")))
                    .await
                    .ok()?;
                support::watch_expired(&on_a, &old_rv).await
            }
        })
        .await;
        // A few more rounds of both compactors.
        let (rounds, _) = rounds_and_compactions(&etcd).await;
        let mut j = 0;
        wait_for("three more compaction rounds", || {
            j += 1;
            let (on_a, etcd) = (on_a.clone(), &etcd);
            async move {
                let _ = on_a
                    .create(&PostParams::default(), &configmap(&format!("d-{j}")))
                    .await;
                let (now, _) = rounds_and_compactions(etcd).await;
                (now >= rounds + 3).then_some(())
            }
        })
        .await;
        let (rounds, ran) = rounds_and_compactions(&etcd).await;
        eprintln!("{rounds} rounds recorded, etcd ran {ran} compactions");
        assert!(ran >= 2.0, "etcd ran {ran} compactions");
        // One compaction per round, the bootstrap round none (one more may be under way): each
        // server compacting on its own ticks would have run about two per round.
        assert!(ran <= rounds as f64, "{ran} compactions in {rounds} rounds");
        let kept = on_b
            .create(&PostParams::default(), &configmap("kept"))
            .await
            .expect("create");
        (old_rv, kept.metadata.resource_version.expect("rv"))
    });
    drop(a);
    drop(b);

    // An operator compacts past `kept_rv` (etcdctl compact: no compact_rev_key record).
    rt.block_on(async {
        let mut raw = etcd_client::Client::connect([etcd.endpoint.as_str()], None)
            .await
            .expect("etcd client");
        let put = raw.put("operator-marker", "x", None).await.expect("put");
        let head = put.header().expect("header").revision();
        raw.compact(head, None).await.expect("compact");
    });

    // A server started now, its own compactor off, knows of the compaction at once.
    let _c = apiserver(
        "apiserver-c",
        dirs[2].path(),
        &etcd.endpoint,
        "127.0.0.3",
        port,
        "0",
    );
    rt.block_on(async {
        let cc = client(&kubeconfig, &format!("https://127.0.0.3:{port}")).await;
        let on_c: Api<ConfigMap> = Api::namespaced(cc, "compact");
        for rv in [&old_rv, &kept_rv] {
            let refused = support::watch_expired(&on_c, rv).await;
            let e = refused.unwrap_or_else(|| panic!("a watch from {rv} was accepted"));
            assert_eq!(e.reason, "Expired", "{e:?}");
        }
        let exact = ListParams::default()
            .at(&kept_rv)
            .matching(VersionMatch::Exact);
        match on_c.list(&exact).await {
            Err(kube::Error::Api(e)) => assert_eq!((e.code, e.reason.as_str()), (410, "Expired")),
            other => panic!("exact list at {kept_rv}: {other:?}"),
        }
        // The current state is served, and a watch from now works.
        let list = on_c.list(&ListParams::default()).await.expect("list");
        assert!(list
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some("kept")));
        let now = list.metadata.resource_version.expect("rv");
        assert!(
            support::watch_expired(&on_c, &now).await.is_none(),
            "watch from {now}"
        );
    });
}
