//! Field ownership across creates, updates and applies by two managers: conflicts, forced takeover,
//! shared fields and the exact managedFields entries.

use serde_json::{json, Value};

use super::*;

fn op<'a>(manager: &'a str, now: &'a str) -> Operation<'a> {
    Operation {
        group: "apps",
        kind: "Deployment",
        api_version: "apps/v1".into(),
        manager,
        subresource: None,
        has_status: true,
        now,
    }
}

fn deployment(replicas: i64, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}
        }
    })
}

fn managed(obj: &Value) -> &Value {
    &obj["metadata"]["managedFields"]
}

#[test]
fn an_apply_records_exactly_the_applied_fields() {
    let first = apply(
        &op("alice", "2026-01-01T00:00:00Z"),
        None,
        &deployment(2, "nginx:1"),
        false,
    )
    .unwrap();
    assert_eq!(
        managed(&first),
        &json!([{
            "manager": "alice", "operation": "Apply", "apiVersion": "apps/v1",
            "time": "2026-01-01T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": {"f:app": {}}},
                "f:spec": {
                    "f:replicas": {},
                    "f:template": {"f:spec": {"f:containers": {
                        "k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}, "f:name": {}}
                    }}}
                }
            }
        }])
    );
    assert_eq!(first["spec"]["replicas"], 2);
}

#[test]
fn two_appliers_conflict_share_and_take_over() {
    let live = apply(
        &op("alice", "2026-01-01T00:00:00Z"),
        None,
        &deployment(2, "nginx:1"),
        false,
    )
    .unwrap();
    // Bob applies the same image (shared) and another replica count (conflict).
    let mut bob = deployment(3, "nginx:1");
    bob["metadata"].as_object_mut().unwrap().remove("labels");
    let err = apply(&op("bob", "2026-01-01T00:01:00Z"), Some(&live), &bob, false).unwrap_err();
    assert_eq!(err.code, 409);
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas"
    );
    let causes = &err.details.as_ref().unwrap().causes;
    assert_eq!(causes.len(), 1);
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".spec.replicas");

    // Forced: bob takes replicas; the image stays shared by both.
    let forced = apply(&op("bob", "2026-01-01T00:01:00Z"), Some(&live), &bob, true).unwrap();
    assert_eq!(forced["spec"]["replicas"], 3);
    let entries = managed(&forced).as_array().unwrap();
    assert_eq!(entries.len(), 2);
    let alice = &entries[0]["fieldsV1"];
    let bob_fields = &entries[1]["fieldsV1"];
    assert_eq!(entries[0]["manager"], "alice");
    assert!(alice["f:spec"].get("f:replicas").is_none(), "{alice}");
    assert!(bob_fields["f:spec"].get("f:replicas").is_some());
    let image = |f: &Value| {
        f["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"nginx\"}"]
            .get("f:image")
            .is_some()
    };
    assert!(image(alice) && image(bob_fields));

    // Alice stops applying the labels: gone, as nobody else owns them. Her image stays (shared).
    let mut alice_again = deployment(3, "nginx:1");
    alice_again["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("labels");
    alice_again["spec"]
        .as_object_mut()
        .unwrap()
        .remove("replicas");
    let after = apply(
        &op("alice", "2026-01-01T00:02:00Z"),
        Some(&forced),
        &alice_again,
        false,
    )
    .unwrap();
    assert!(after["metadata"].get("labels").is_none(), "{after}");
    assert_eq!(after["spec"]["replicas"], 3);
    assert_eq!(
        after["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1"
    );

    // Bob drops the container: it stays, since alice still applies it.
    let mut bob_again = bob.clone();
    bob_again["spec"]["template"] = json!({});
    let kept = apply(
        &op("bob", "2026-01-01T00:03:00Z"),
        Some(&after),
        &bob_again,
        false,
    )
    .unwrap();
    assert_eq!(
        kept["spec"]["template"]["spec"]["containers"][0]["name"],
        "nginx"
    );
}

#[test]
fn updates_take_the_fields_they_change() {
    let mut obj = deployment(2, "nginx:1");
    on_create(&op("kubectl-create", "2026-01-01T00:00:00Z"), &mut obj);
    assert_eq!(managed(&obj)[0]["operation"], "Update");
    let mut new = obj.clone();
    new["spec"]["replicas"] = json!(5);
    on_update(&op("kubectl-scale", "2026-01-01T00:05:00Z"), &obj, &mut new).unwrap();
    let entries = managed(&new).as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["manager"], "kubectl-scale");
    assert_eq!(
        entries[1]["fieldsV1"],
        json!({"f:spec": {"f:replicas": {}}})
    );
    assert!(entries[0]["fieldsV1"]["f:spec"].get("f:replicas").is_none());
    // An apply of another replica count now conflicts with the scaler.
    let err = apply(
        &op("alice", "2026-01-01T00:06:00Z"),
        Some(&new),
        &deployment(2, "nginx:1"),
        false,
    )
    .unwrap_err();
    assert!(
        err.message
            .contains("conflict with \"kubectl-scale\" using apps/v1: .spec.replicas"),
        "{}",
        err.message
    );
    // A no-op update leaves managedFields as they were.
    let mut same = new.clone();
    on_update(&op("other", "2026-01-01T00:07:00Z"), &new, &mut same).unwrap();
    assert_eq!(managed(&same), managed(&new));
    // Sending an empty list clears them.
    let mut cleared = new.clone();
    cleared["metadata"]["managedFields"] = json!([]);
    on_update(&op("other", "2026-01-01T00:07:00Z"), &new, &mut cleared).unwrap();
    assert!(cleared["metadata"].get("managedFields").is_none());
}

#[test]
fn status_and_server_fields_are_not_owned_through_the_main_resource() {
    let mut obj = deployment(1, "nginx:1");
    obj["metadata"]["uid"] = json!("u");
    obj["metadata"]["resourceVersion"] = json!("7");
    obj["status"] = json!({"replicas": 1});
    on_create(&op("m", "2026-01-01T00:00:00Z"), &mut obj);
    let fields = &managed(&obj)[0]["fieldsV1"];
    assert!(fields.get("f:status").is_none() && fields.get("f:apiVersion").is_none());
    assert!(
        fields["f:metadata"].get("f:uid").is_none()
            && fields["f:metadata"].get("f:resourceVersion").is_none()
    );
    let status_op = Operation {
        subresource: Some("status"),
        ..op("ctrl", "2026-01-01T00:00:01Z")
    };
    let mut updated = obj.clone();
    updated["status"]["replicas"] = json!(2);
    on_update(&status_op, &obj, &mut updated).unwrap();
    let entries = managed(&updated).as_array().unwrap();
    assert_eq!(entries[1]["subresource"], "status");
    assert_eq!(
        entries[1]["fieldsV1"],
        json!({"f:status": {"f:replicas": {}}})
    );
}

#[test]
fn manager_names_come_from_the_parameter_or_the_user_agent() {
    assert_eq!(
        manager_name(Some("mine"), Some("kubectl/v1.32")).unwrap(),
        "mine"
    );
    assert_eq!(
        manager_name(None, Some("kubectl/v1.32.0 (linux/amd64)")).unwrap(),
        "kubectl"
    );
    assert_eq!(manager_name(None, None).unwrap(), "");
    assert_eq!(
        manager_name(Some(&"x".repeat(129)), None).unwrap_err().code,
        400
    );
}
