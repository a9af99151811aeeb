use super::*;
use crate::admission::webhook::matching::{request_invocation, Gvk};
use crate::admission::Outcome;
use crate::authn::UserInfo;
use serde_json::json;

fn user() -> UserInfo {
    UserInfo {
        name: "alice".into(),
        uid: String::new(),
        groups: vec!["dev".into(), "system:authenticated".into()],
    }
}

#[test]
fn a_v1_request_carries_upstreams_fields() {
    let outcome = Outcome::default();
    let user = user();
    let attrs = Attributes {
        group: "",
        version: "v1",
        kind: "ConfigMap",
        resource: "configmaps",
        subresource: None,
        namespace: "default",
        name: "cm",
        operation: Operation::Create,
        dry_run: true,
        user: &user,
        outcome: &outcome,
    };
    let inv = request_invocation(&attrs);
    let object = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
    let body = encode(
        ReviewVersion::V1,
        &ReviewRequest {
            uid: "u-1",
            invocation: &inv,
            request: &inv,
            attrs: &attrs,
            object: Some(&object),
            old_object: None,
        },
    )
    .unwrap();
    let got: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        got,
        json!({
            "kind": "AdmissionReview",
            "apiVersion": "admission.k8s.io/v1",
            "request": {
                "uid": "u-1",
                "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "requestKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "requestResource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "cm",
                "namespace": "default",
                "operation": "CREATE",
                "userInfo": {"username": "alice", "groups": ["dev", "system:authenticated"]},
                "object": object,
                "oldObject": null,
                "dryRun": true,
                "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1",
                            "dryRun": ["All"]}
            }
        })
    );
}

#[test]
fn an_equivalent_invocation_names_both_resources() {
    let outcome = Outcome::default();
    let user = user();
    let attrs = Attributes {
        group: "",
        version: "v1",
        kind: "Namespace",
        resource: "namespaces",
        subresource: Some("finalize"),
        namespace: "",
        name: "team-a",
        operation: Operation::Update,
        dry_run: false,
        user: &user,
        outcome: &outcome,
    };
    let request = request_invocation(&attrs);
    let invocation = Invocation {
        group: "example.com".into(),
        version: "v2".into(),
        resource: "namespaces".into(),
        subresource: "finalize".into(),
        kind: Gvk {
            group: "example.com".into(),
            version: "v2".into(),
            kind: "Namespace".into(),
        },
    };
    let old = json!({"metadata": {"name": "team-a"}});
    let body = encode(
        ReviewVersion::V1beta1,
        &ReviewRequest {
            uid: "u",
            invocation: &invocation,
            request: &request,
            attrs: &attrs,
            object: None,
            old_object: Some(&old),
        },
    )
    .unwrap();
    let got: Value = serde_json::from_slice(&body).unwrap();
    let r = &got["request"];
    assert_eq!(got["apiVersion"], "admission.k8s.io/v1beta1");
    assert_eq!(r["resource"]["group"], "example.com");
    assert_eq!(r["subResource"], "finalize");
    assert_eq!(r["requestResource"]["group"], "");
    assert_eq!(r["requestSubResource"], "finalize");
    // A namespace's own request names the namespace as its namespace.
    assert_eq!(r["namespace"], "team-a");
    assert_eq!(r["object"], Value::Null);
    assert_eq!(r["oldObject"], old);
    assert_eq!(r["options"]["kind"], "UpdateOptions");
    assert!(r["options"].get("dryRun").is_none());
}

fn verdict(version: ReviewVersion, mutating: bool, body: Value) -> Result<Verdict, String> {
    let decoded = decode(&serde_json::to_vec(&body).unwrap())?;
    verify(version, "u-1", mutating, decoded)
}

fn v1(response: Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

#[test]
fn v1_answers_are_checked_as_upstream() {
    let err = |body: Value, mutating: bool| verdict(ReviewVersion::V1, mutating, body).unwrap_err();
    assert_eq!(
        err(
            json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
            false
        ),
        "webhook response was absent"
    );
    assert_eq!(
        err(v1(json!({"uid": "other", "allowed": true})), false),
        r#"expected response.uid="u-1", got "other""#
    );
    assert_eq!(
        err(json!({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview",
                   "response": {"uid": "u-1", "allowed": true}}), false),
        "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got admission.k8s.io/v1beta1, Kind=AdmissionReview"
    );
    assert_eq!(
        err(json!({"response": {"uid": "u-1"}}), false),
        "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got /, Kind="
    );
    let patch = base64::engine::general_purpose::STANDARD.encode(b"[]");
    assert_eq!(
        err(
            v1(json!({"uid": "u-1", "allowed": true, "patch": patch})),
            true
        ),
        "webhook returned response.patch but not response.patchType"
    );
    assert_eq!(
        err(
            v1(json!({"uid": "u-1", "allowed": true, "patchType": "JSONPatch"})),
            true
        ),
        "webhook returned response.patchType but not response.patch"
    );
    assert_eq!(
        err(
            v1(json!({"uid": "u-1", "allowed": true, "patch": patch, "patchType": ""})),
            true
        ),
        r#"webhook returned invalid response.patchType of """#
    );
    assert_eq!(
        err(
            v1(json!({"uid": "u-1", "allowed": true, "patch": patch, "patchType": "JSONPatch"})),
            false
        ),
        "validating webhook may not return response.patch"
    );
    assert_eq!(
        err(
            v1(json!({"uid": "u-1", "allowed": true, "patchType": "JSONPatch"})),
            false
        ),
        "validating webhook may not return response.patchType"
    );
    assert!(err(
        v1(json!({"uid": "u-1", "allowed": true, "patch": "%%%", "patchType": "JSONPatch"})),
        true
    )
    .contains("base64"));
    assert!(decode(b"not json").is_err());
}

#[test]
fn a_good_answer_gives_patch_warnings_and_annotations() {
    let ops = json!([{"op": "add", "path": "/metadata/labels/x", "value": "y"}]);
    let patch = base64::engine::general_purpose::STANDARD.encode(ops.to_string());
    let many: Vec<String> = (0..500).map(|i| format!("w{i}")).collect();
    let got = verdict(
        ReviewVersion::V1,
        true,
        v1(
            json!({"uid": "u-1", "allowed": true, "patch": patch, "patchType": "JSONPatch",
                  "warnings": many, "auditAnnotations": {"b": "2", "a": "1"}}),
        ),
    )
    .unwrap();
    assert!(got.allowed);
    assert_eq!(got.patch_type, "JSONPatch");
    let decoded: Value = serde_json::from_slice(got.patch.as_ref().unwrap()).unwrap();
    assert_eq!(decoded, ops);
    assert_eq!(got.warnings.len(), MAX_RESPONSE_WARNINGS);
    assert_eq!(
        got.audit_annotations,
        [("a".to_string(), "1".to_string()), ("b".into(), "2".into())]
    );
}

#[test]
fn v1beta1_answers_are_lenient_and_patches_are_json_patches() {
    let patch = base64::engine::general_purpose::STANDARD.encode(b"[]");
    let got = verdict(
        ReviewVersion::V1beta1,
        true,
        json!({"response": {"allowed": true, "patch": patch}}),
    )
    .unwrap();
    assert_eq!(got.patch_type, "JSONPatch");
    assert!(got.patch.is_some());
    // A validating webhook's patch is dropped, not refused, in v1beta1.
    let got = verdict(
        ReviewVersion::V1beta1,
        false,
        json!({"response": {"allowed": false, "patch": patch}}),
    )
    .unwrap();
    assert!(!got.allowed && got.patch.is_none());
}

#[test]
fn denials_read_as_upstreams() {
    let e = denial(
        "deny.example.com",
        Some(&json!({"message": "no bad configmaps"})),
    );
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        r#"admission webhook "deny.example.com" denied the request: no bad configmaps"#
    );
    assert_eq!(e.reason, "");
    let e = denial(
        "deny.example.com",
        Some(&json!({"code": 403, "reason": "Forbidden", "message": "m",
                     "details": {"name": "x", "causes": [{"field": "data", "message": "bad"}]}})),
    );
    assert_eq!((e.code, e.reason), (403, "Forbidden"));
    let details = e.details.unwrap();
    assert_eq!(details.name, "x");
    assert_eq!(details.causes[0].field, "data");
    // Codes below 400 become 400; a reason stands in for a missing message.
    let e = denial("d", Some(&json!({"code": 200, "reason": "Conflict"})));
    assert_eq!(e.code, 400);
    assert_eq!(
        e.message,
        r#"admission webhook "d" denied the request: Conflict"#
    );
    let e = denial("d", Some(&json!({"reason": "MyOwnReason"})));
    assert_eq!(e.reason, "");
    let e = denial("d", None);
    assert_eq!(
        e.message,
        r#"admission webhook "d" denied the request without explanation"#
    );
    let e = dry_run_unsupported("d");
    assert_eq!((e.code, e.reason), (400, "BadRequest"));
    assert_eq!(
        e.message,
        r#"admission webhook "d" does not support dry run"#
    );
}

#[test]
fn http_errors_read_as_client_gos() {
    use http::StatusCode;
    assert_eq!(
        http_error(StatusCode::INTERNAL_SERVER_ERROR, b"boom\n"),
        r#"an error on the server ("boom") has prevented the request from succeeding"#
    );
    assert_eq!(
        http_error(StatusCode::NOT_FOUND, b"404 page not found"),
        "the server could not find the requested resource"
    );
    assert_eq!(
        http_error(StatusCode::IM_A_TEAPOT, b""),
        "the server responded with the status code 418 but did not return more information"
    );
    let status = json!({"kind": "Status", "message": "webhook overloaded", "code": 429});
    assert_eq!(
        http_error(StatusCode::TOO_MANY_REQUESTS, status.to_string().as_bytes()),
        "webhook overloaded"
    );
}
