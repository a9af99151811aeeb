//! test/e2e/instrumentation/events.go (events.k8s.io/v1) and core_events.go (core v1).

use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::Client;
use serde_json::{json, Value};

use super::from;

/// newTestEvent(namespace, name, label)
fn new_test_event(ns: &str, name: &str, label: &str) -> Event {
    from(json!({
        "metadata": {"name": name, "labels": {label: "true"}},
        "regarding": {"namespace": ns},
        "eventTime": "2017-09-19T13:49:16.000000Z",
        "note": format!("This is {name}"),
        "action": "Do",
        "reason": "Test",
        "type": "Normal",
        "reportingController": "test-controller",
        "reportingInstance": "test-node",
    }))
}

/// The object as `apiequality.Semantic.DeepEqual` sees it after the e2e test clears the fields the
/// control plane sets (resourceVersion, managedFields).
fn comparable<K: serde::Serialize>(obj: &K) -> Value {
    let mut v = serde_json::to_value(obj).unwrap();
    let m = v["metadata"].as_object_mut().unwrap();
    m.remove("resourceVersion");
    m.remove("managedFields");
    v
}

async fn exists_in_list(api: &Api<Event>, ns: &str, name: &str) -> bool {
    let list = api
        .list(&ListParams::default().labels("testevent-constant=true"))
        .await
        .expect("failed to list events");
    list.items.iter().any(|e| {
        e.metadata.name.as_deref() == Some(name) && e.metadata.namespace.as_deref() == Some(ns)
    })
}

/// "[sig-instrumentation] Events API should ensure that an event can be fetched, patched, deleted,
/// and listed".
pub async fn events_v1_lifecycle(client: Client, ns: &str) {
    let name = "event-test";
    let api: Api<Event> = Api::namespaced(client.clone(), ns);
    let all: Api<Event> = Api::all(client.clone());
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), ns);
    api.create(
        &PostParams::default(),
        &new_test_event(ns, name, "testevent-constant"),
    )
    .await
    .expect("failed to create test event");
    assert!(
        exists_in_list(&all, ns, name).await,
        "failed to find test event in list with cluster scope"
    );
    assert!(
        exists_in_list(&api, ns, name).await,
        "failed to find test event in list with namespace scope"
    );

    let filtered = core
        .list(&ListParams::default().fields("source=test-controller"))
        .await
        .expect("listing events with field selection filtering on source");
    let names: Vec<_> = filtered
        .items
        .iter()
        .map(|e| e.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        [Some(name.to_string())],
        "expected single event (core v1, source=)"
    );
    let filtered = api
        .list(&ListParams::default().fields("reportingController=test-controller"))
        .await
        .expect("listing events with field selection filtering on reportingController");
    let names: Vec<_> = filtered
        .items
        .iter()
        .map(|e| e.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        [Some(name.to_string())],
        "expected single event (reportingController=)"
    );

    let mut test_event = api.get(name).await.expect("failed to get test event");
    let patch_note = "This is a test event - patched";
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"note": patch_note})),
    )
    .await
    .expect("failed to patch the test event");
    let event = api.get(name).await.expect("failed to get test event");
    test_event.note = Some(patch_note.to_string());
    assert_eq!(
        comparable(&event),
        comparable(&test_event),
        "test event wasn't properly patched"
    );

    // The update carries no resourceVersion (cleared above): unconditional.
    test_event.metadata.resource_version = None;
    test_event.metadata.managed_fields = None;
    test_event.series = Some(from(
        json!({"count": 100, "lastObservedTime": "2017-09-19T13:49:16.000000Z"}),
    ));
    api.replace(name, &PostParams::default(), &test_event)
        .await
        .expect("failed to update the test event");
    let event = api.get(name).await.expect("failed to get test event");
    assert_eq!(
        comparable(&event),
        comparable(&test_event),
        "test event wasn't properly updated"
    );

    api.delete(name, &DeleteParams::default())
        .await
        .expect("failed to delete the test event");
    assert!(
        !exists_in_list(&all, ns, name).await,
        "should not have found test event after deletion"
    );
    assert!(
        !exists_in_list(&api, ns, name).await,
        "should not have found test event after deletion"
    );
}

/// "[sig-instrumentation] Events API should delete a collection of events".
pub async fn events_v1_collection(client: Client, ns: &str) {
    let api: Api<Event> = Api::namespaced(client, ns);
    for name in ["test-event-1", "test-event-2", "test-event-3"] {
        api.create(
            &PostParams::default(),
            &new_test_event(ns, name, "testevent-set"),
        )
        .await
        .expect("failed to create event");
    }
    let lp = ListParams::default().labels("testevent-set=true");
    assert_eq!(api.list(&lp).await.expect("list").items.len(), 3);
    api.delete_collection(&DeleteParams::default(), &lp)
        .await
        .expect("failed to delete the test events");
    assert_eq!(api.list(&lp).await.expect("list").items.len(), 0);
}

fn core_event(ns: &str, name: &str, labels: Value, message: &str) -> CoreEvent {
    from(json!({
        "metadata": {"name": name, "labels": labels},
        "message": message,
        "reason": "Test",
        "type": "Normal",
        "count": 1,
        "involvedObject": {"namespace": ns},
    }))
}

/// "[sig-instrumentation] Events should manage the lifecycle of an event".
pub async fn core_event_lifecycle(client: Client, ns: &str) {
    let name = "event-test";
    let api: Api<CoreEvent> = Api::namespaced(client.clone(), ns);
    let all: Api<CoreEvent> = Api::all(client.clone());
    let lp = ListParams::default().labels("testevent-constant=true");
    api.create(
        &PostParams::default(),
        &core_event(
            ns,
            name,
            json!({"testevent-constant": "true"}),
            "This is a test event",
        ),
    )
    .await
    .expect("failed to create test event");
    let found = |list: &[CoreEvent]| {
        list.iter().any(|e| {
            e.metadata.name.as_deref() == Some(name) && e.metadata.namespace.as_deref() == Some(ns)
        })
    };
    assert!(
        found(&all.list(&lp).await.expect("list").items),
        "unable to find the test event"
    );

    let patch_message = "This is a test event - patched";
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Strategic(json!({"message": patch_message})),
    )
    .await
    .expect("failed to patch the test event");
    let event = api.get(name).await.expect("failed to fetch the test event");
    assert_eq!(event.message.as_deref(), Some(patch_message));

    let mut test_event = api.get(name).await.expect("failed to get test event");
    test_event.series = Some(from(
        json!({"count": 100, "lastObservedTime": "2017-09-19T13:49:16.000000Z"}),
    ));
    test_event.metadata.resource_version = None;
    test_event.metadata.managed_fields = None;
    api.replace(name, &PostParams::default(), &test_event)
        .await
        .expect("failed to update the test event");
    let event = api.get(name).await.expect("failed to get test event");
    assert_eq!(
        comparable(&event),
        comparable(&test_event),
        "test event wasn't properly updated"
    );

    api.delete(name, &DeleteParams::default())
        .await
        .expect("failed to delete the test event");
    assert!(
        !found(&all.list(&lp).await.expect("list").items),
        "should not have found test event after deletion"
    );
}

/// "[sig-instrumentation] Events should delete a collection of events".
pub async fn core_events_collection(client: Client, ns: &str) {
    let api: Api<CoreEvent> = Api::namespaced(client, ns);
    for name in ["test-event-1", "test-event-2", "test-event-3"] {
        let message = format!("This is {name}");
        api.create(
            &PostParams::default(),
            &core_event(ns, name, json!({"testevent-set": "true"}), &message),
        )
        .await
        .expect("failed to create event");
    }
    let lp = ListParams::default().labels("testevent-set=true");
    assert_eq!(api.list(&lp).await.expect("list").items.len(), 3);
    api.delete_collection(&DeleteParams::default(), &lp)
        .await
        .expect("failed to delete the test events");
    assert_eq!(api.list(&lp).await.expect("list").items.len(), 0);
}
