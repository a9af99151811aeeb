//! test/e2e/network/service.go "should complete a service status lifecycle" and
//! test/e2e/network/endpoints.go "should test the lifecycle of an Endpoint".

use std::fmt::Debug;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Endpoints, Service};
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::Client;
use serde::de::DeserializeOwned;
use serde_json::json;

use super::{annotation, from, get_json, meta, DEADLINE};

/// client-go's `watchtools.Until(ctx, rv, lw, cond)`: a watch from `rv` (label-selected, as the e2e
/// test's ListWatch) read until `cond` holds for an event.
async fn until<K>(
    api: &Api<K>,
    selector: &str,
    rv: &str,
    what: &str,
    cond: impl Fn(&WatchEvent<K>) -> bool,
) where
    K: Clone + DeserializeOwned + Debug + kube::Resource,
{
    let stream = api
        .watch(&WatchParams::default().labels(selector), rv)
        .await
        .unwrap_or_else(|e| panic!("{what}: watch: {e}"));
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: timed out"))
            .unwrap_or_else(|| panic!("{what}: watch closed"))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        if let WatchEvent::Error(e) = &event {
            panic!("{what}: watch error {e:?}");
        }
        if cond(&event) {
            return;
        }
    }
}

fn object<K>(event: &WatchEvent<K>) -> Option<&K> {
    match event {
        WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => Some(o),
        _ => None,
    }
}

/// The e2e test's StatusUpdate condition has no lastTransitionTime (Go's zero time, `null` on the
/// wire), which k8s-openapi's `Condition` cannot hold: Services are handled untyped here.
pub async fn service_status_lifecycle(client: Client, ns: &str) {
    let ar = ApiResource::erase::<Service>(&());
    let services: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &ar);
    let name = "test-service-lc";
    let selector = "test-service-static=true";
    let list = Api::<DynamicObject>::all_with(client.clone(), &ar)
        .list(&ListParams::default().labels(selector))
        .await
        .expect("failed to list Services");
    let rv = list.metadata.resource_version.clone().unwrap();

    let service: DynamicObject = from(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "labels": {"test-service-static": "true"}},
        "spec": {"type": "LoadBalancer", "ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 80}]}
    }));
    services
        .create(&PostParams::default(), &service)
        .await
        .expect("creating a Service");
    let is_ours = |s: &DynamicObject| {
        s.metadata.name.as_deref() == Some(name) && s.metadata.namespace.as_deref() == Some(ns)
    };
    let label =
        |s: &DynamicObject, key: &str| s.metadata.labels.as_ref().and_then(|l| l.get(key)).cloned();
    until(
        &services,
        selector,
        &rv,
        "watching for the Service to be added",
        |e| {
            object(e).is_some_and(|s| {
                is_ours(s) && label(s, "test-service-static").as_deref() == Some("true")
            })
        },
    )
    .await;

    let status = get_json(
        &client,
        &format!("/api/v1/namespaces/{ns}/services/{name}/status"),
    )
    .await;
    assert_eq!(status["metadata"]["name"], name, "Getting /status");

    let lb = json!({"ingress": [{"ip": "203.0.113.1"}]});
    services
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patchedstatus": "true"}}, "status": {"loadBalancer": lb}})),
        )
        .await
        .expect("Could not patch service status");
    until(
        &services,
        selector,
        &rv,
        "watching for the Service to be patched",
        |e| {
            object(e).is_some_and(|s| {
                is_ours(s) && annotation(&meta(s), "patchedstatus").as_deref() == Some("true")
            })
        },
    )
    .await;

    let mut to_update = services
        .get(name)
        .await
        .expect("Unable to retrieve service");
    let conditions = &mut to_update.data["status"]["conditions"];
    if conditions.is_null() {
        *conditions = json!([]);
    }
    conditions.as_array_mut().unwrap().push(json!({
        "type": "StatusUpdate", "status": "True", "reason": "E2E", "message": "Set from e2e test",
        "lastTransitionTime": null
    }));
    services
        .replace_status(name, &PostParams::default(), &to_update)
        .await
        .expect("Failed to UpdateStatus");
    until(
        &services,
        selector,
        &rv,
        "watching for the Service to be updated",
        |e| {
            object(e).is_some_and(|s| {
                is_ours(s)
                    && annotation(&meta(s), "patchedstatus").as_deref() == Some("true")
                    && s.data["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter().any(|c| {
                            c["type"] == "StatusUpdate"
                                && c["reason"] == "E2E"
                                && c["message"] == "Set from e2e test"
                        })
                    })
            })
        },
    )
    .await;

    services
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({"metadata": {"labels": {"test-service": "patched"}}})),
        )
        .await
        .expect("failed to patch service");
    until(
        &services,
        selector,
        &rv,
        "watching for the Service to be patched",
        |e| {
            object(e).is_some_and(|s| {
                is_ours(s) && label(s, "test-service").as_deref() == Some("patched")
            })
        },
    )
    .await;

    services
        .delete(name, &DeleteParams::default())
        .await
        .expect("failed to delete the Service");
    until(
        &services,
        selector,
        &rv,
        "watching for the Service to be deleted",
        |e| match e {
            WatchEvent::Deleted(s) => {
                is_ours(s) && label(s, "test-service-static").as_deref() == Some("true")
            }
            _ => false,
        },
    )
    .await;
}

pub async fn endpoint_lifecycle(client: Client, ns: &str) {
    let endpoints: Api<Endpoints> = Api::namespaced(client.clone(), ns);
    let name = "testservice";
    let selector = "test-endpoint-static=true";
    let has_label = |e: &Endpoints| {
        e.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("test-endpoint-static"))
            .map(String::as_str)
            == Some("true")
    };
    let list = Api::<Endpoints>::all(client.clone())
        .list(&ListParams::default().labels(selector))
        .await
        .expect("failed to list Endpoints");
    let created = endpoints
        .create(
            &PostParams::default(),
            &from(json!({
                "metadata": {"name": name, "labels": {"test-endpoint-static": "true"}},
                "subsets": [{"addresses": [{"ip": "10.0.0.24"}], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]
            })),
        )
        .await
        .expect("failed to create Endpoint");
    let created_rv: u64 = created
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .expect("numeric resourceVersion");
    let rv = list.metadata.resource_version.clone().unwrap();
    until(
        &endpoints,
        selector,
        &rv,
        "waiting for available Endpoint",
        |e| matches!(e, WatchEvent::Added(o) if has_label(o)),
    )
    .await;

    let list = Api::<Endpoints>::all(client.clone())
        .list(&ListParams::default().labels(selector))
        .await
        .expect("failed to list Endpoints");
    let mut found = list
        .items
        .into_iter()
        .find(|e| {
            e.metadata.name.as_deref() == Some(name) && e.metadata.namespace.as_deref() == Some(ns)
        })
        .expect("unable to find Endpoint Service in list of Endpoints");
    found
        .metadata
        .labels
        .get_or_insert_default()
        .insert("test-service".into(), "updated".into());
    endpoints
        .replace(name, &PostParams::default(), &found)
        .await
        .expect("failed to update Endpoint with new label");
    until(
        &endpoints,
        selector,
        &rv,
        "waiting for the update",
        |e| matches!(e, WatchEvent::Modified(o) if has_label(o)),
    )
    .await;

    let fetched = endpoints.get(name).await.expect("failed to fetch Endpoint");
    let patched = endpoints
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({
                "metadata": {"labels": {"test-service": "patched"}},
                "subsets": [{"addresses": [{"ip": "10.0.0.25"}], "ports": [{"name": "http-test", "port": 8080}]}]
            })),
        )
        .await
        .expect("failed to patch Endpoint");
    let patched_rv: u64 = patched
        .metadata
        .resource_version
        .as_deref()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        created_rv < patched_rv,
        "patched object should have a larger resource version"
    );
    let fetched_rv = fetched.metadata.resource_version.clone().unwrap();
    until(
        &endpoints,
        selector,
        &fetched_rv,
        "waiting for the patch",
        |e| matches!(e, WatchEvent::Modified(o) if has_label(o)),
    )
    .await;

    let e = endpoints.get(name).await.expect("failed to fetch Endpoint");
    assert_eq!(
        e.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("test-service"))
            .map(String::as_str),
        Some("patched"),
        "failed to patch Endpoint with Label"
    );
    let subset = &e.subsets.as_ref().expect("subsets")[0];
    assert_eq!(subset.addresses.as_ref().unwrap()[0].ip, "10.0.0.25");
    let port = &subset.ports.as_ref().unwrap()[0];
    assert_eq!(port.name.as_deref(), Some("http-test"));
    assert_eq!(port.port, 8080);

    endpoints
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(selector),
        )
        .await
        .expect("failed to delete Endpoint by Collection");
    until(
        &endpoints,
        selector,
        &fetched_rv,
        "waiting for Endpoint deletion",
        |e| matches!(e, WatchEvent::Deleted(o) if has_label(o)),
    )
    .await;
    assert!(
        endpoints.get(name).await.is_err(),
        "should not be able to fetch Endpoint"
    );
}
