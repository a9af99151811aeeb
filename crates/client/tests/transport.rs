//! In-process connections (`client::transport::client_in_process` over
//! `apiserver::serving::InProcess`): requests go through the server's whole handler chain as the
//! dialled user (authorization included), watches stream, and stopping the server closes them.

mod support;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};

fn in_process_client(
    server: &support::Server,
    config: &kube::Config,
    groups: &[&str],
) -> kube::Client {
    let user = apiserver::authn::UserInfo {
        name: "in-process-test".into(),
        uid: String::new(),
        groups: groups.iter().map(|g| g.to_string()).collect(),
    };
    let in_process = server.running.as_ref().expect("running").in_process();
    let dial: client::transport::Dial = Arc::new(move || in_process.dial(&user));
    client::transport::client_in_process(config, dial).expect("in-process client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_requests_are_authorized_watched_and_closed_with_the_server() {
    let mut server = support::Server::start().await;
    let config = client::kubeconfig::config_from_file(&server.kubeconfig())
        .await
        .expect("kube config");

    // A user without RBAC bindings is refused by the authorizer, by name.
    let nobody = in_process_client(&server, &config, &["system:authenticated"]);
    let err = Api::<Namespace>::all(nobody)
        .list(&ListParams::default())
        .await
        .expect_err("forbidden");
    match err {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 403);
            assert!(
                status.message.contains("in-process-test"),
                "{}",
                status.message
            );
        }
        other => panic!("expected 403, got {other}"),
    }

    // system:masters may: a watch streams a namespace created afterwards.
    let admin = in_process_client(
        &server,
        &config,
        &["system:masters", "system:authenticated"],
    );
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    let list = namespaces.list(&ListParams::default()).await.expect("list");
    let rv = list.metadata.resource_version.expect("resourceVersion");
    let mut watch = namespaces
        .watch(&WatchParams::default().timeout(60), &rv)
        .await
        .expect("watch")
        .boxed();
    support::namespace(&admin, "over-the-pipe").await;
    let added = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = watch.next().await {
            if let Ok(WatchEvent::Added(ns)) = event {
                if ns.metadata.name.as_deref() == Some("over-the-pipe") {
                    return true;
                }
            }
        }
        false
    })
    .await
    .expect("the watch event within 30 s");
    assert!(added, "the watch ended before the event");

    // Stopping the server closes the in-process connection: the watch ends, new requests fail.
    server.shutdown().await;
    let ended = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(event) = watch.next().await {
            if event.is_err() {
                break;
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the watch outlived the server");
    assert!(namespaces.list(&ListParams::default()).await.is_err());
}
