//! One audit record (upstream `audit.k8s.io/v1` `Event`). The request path fills an [`Event`] with
//! owned data and hands it over; turning it into JSON, request and response bodies included, is the
//! writer's work ([`Event::to_json_line`]), off the request path.

use std::collections::BTreeMap;

use bytes::Bytes;
use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use serde_json::Value;

use super::policy::{Level, Stage};
use crate::authn::UserInfo;

/// An event as the request path builds it.
#[derive(Clone, Debug, Default)]
pub struct Event {
    pub level: Level,
    pub audit_id: String,
    pub stage: Stage,
    pub request_uri: String,
    pub verb: String,
    /// None when authentication failed (`"user":{}`, as upstream).
    pub user: Option<User>,
    pub impersonated_user: Option<User>,
    pub source_ips: Vec<String>,
    pub user_agent: String,
    pub object_ref: Option<ObjectRef>,
    pub response_status: Option<ResponseStatus>,
    pub request_received: DateTime<Utc>,
    pub stage_time: DateTime<Utc>,
    pub annotations: BTreeMap<String, String>,
    /// The request body as received; see [`Bodies`].
    pub bodies: Bodies,
}

/// Request and response bodies, kept as the bytes that were received or sent (shared, not copied)
/// and decoded only by the writer.
#[derive(Clone, Debug, Default)]
pub struct Bodies {
    pub request: Option<Bytes>,
    /// Log the request body as `requestObject` (level Request and up).
    pub request_object: bool,
    /// Fill the object reference's empty namespace, name, uid and resourceVersion from the request
    /// body's metadata, as upstream's `LogRequestObject` does for creates and updates.
    pub fill_object_ref: bool,
    /// A JSON response body: a `Status` fills `responseStatus`; at RequestResponse it is logged.
    pub response: Option<Bytes>,
    pub response_object: bool,
    pub omit_managed_fields: bool,
}

impl Bodies {
    /// Bytes held, for the writer queue's budget.
    pub fn held_bytes(&self) -> usize {
        self.request.as_ref().map_or(0, Bytes::len) + self.response.as_ref().map_or(0, Bytes::len)
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct User {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl From<&UserInfo> for User {
    fn from(u: &UserInfo) -> User {
        User {
            username: u.name.clone(),
            uid: u.uid.clone(),
            groups: u.groups.clone(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub subresource: String,
}

/// The bounded fields of the `Status` answered (upstream copies status, message, reason, details
/// and code from a `Status` response; other responses give the code alone).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ResponseStatus {
    /// Always `{}` (metav1.Status's ListMeta is not omitempty).
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
    pub code: u16,
}

impl ResponseStatus {
    pub fn code(code: u16) -> ResponseStatus {
        ResponseStatus {
            code,
            ..Default::default()
        }
    }
}

/// The wire form, field order as upstream's.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Wire<'a> {
    kind: &'static str,
    api_version: &'static str,
    level: Level,
    #[serde(rename = "auditID")]
    audit_id: &'a str,
    stage: Stage,
    #[serde(rename = "requestURI")]
    request_uri: &'a str,
    verb: &'a str,
    user: &'a User,
    #[serde(skip_serializing_if = "Option::is_none")]
    impersonated_user: Option<&'a User>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "<[String]>::is_empty")]
    source_ips: &'a [String],
    #[serde(skip_serializing_if = "str::is_empty")]
    user_agent: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<&'a ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<&'a ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<Value>,
    request_received_timestamp: String,
    stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: &'a BTreeMap<String, String>,
}

/// metav1.MicroTime: RFC 3339 in UTC with exactly six fractional digits.
pub fn micro_time(t: &DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

impl Event {
    /// The event as one line of JSON (newline included). Bodies that cannot be read as JSON are
    /// left out.
    pub fn to_json_line(mut self) -> Vec<u8> {
        let bodies = std::mem::take(&mut self.bodies);
        let request = bodies.request.as_deref().and_then(parse_body);
        if let (true, Some(obj)) = (bodies.fill_object_ref, &request) {
            fill_object_ref(self.object_ref.get_or_insert_with(Default::default), obj);
        }
        let response = bodies.response.as_deref().and_then(parse_body);
        if let Some(resp) = &response {
            if resp.get("kind").and_then(Value::as_str) == Some("Status") {
                let status = self
                    .response_status
                    .get_or_insert_with(|| ResponseStatus::code(0));
                let text = |key: &str| resp.get(key).and_then(Value::as_str).unwrap_or("");
                status.status = text("status").to_string();
                status.message = text("message").to_string();
                status.reason = text("reason").to_string();
                status.details = resp.get("details").cloned();
            }
        }
        let prepare = |obj: Option<Value>, wanted: bool| {
            let mut obj = obj.filter(|_| wanted)?;
            if bodies.omit_managed_fields {
                strip_managed_fields(&mut obj);
            }
            Some(obj)
        };
        let empty_user = User::default();
        let wire = Wire {
            kind: "Event",
            api_version: "audit.k8s.io/v1",
            level: self.level,
            audit_id: &self.audit_id,
            stage: self.stage,
            request_uri: &self.request_uri,
            verb: &self.verb,
            user: self.user.as_ref().unwrap_or(&empty_user),
            impersonated_user: self.impersonated_user.as_ref(),
            source_ips: &self.source_ips,
            user_agent: &self.user_agent,
            object_ref: self.object_ref.as_ref(),
            response_status: self.response_status.as_ref(),
            request_object: prepare(request, bodies.request_object),
            response_object: prepare(response, bodies.response_object),
            request_received_timestamp: micro_time(&self.request_received),
            stage_timestamp: micro_time(&self.stage_time),
            annotations: &self.annotations,
        };
        let mut line = serde_json::to_vec(&wire).unwrap_or_default();
        line.push(b'\n');
        line
    }
}

/// A body as JSON: JSON as is, upstream's enveloped protobuf decoded (clients built on client-go
/// send and ask for protobuf). YAML and CBOR bodies are left out.
fn parse_body(bytes: &[u8]) -> Option<Value> {
    use apimachinery::serializer::protobuf;
    if bytes.starts_with(b"k8s\0") {
        return protobuf::decode(bytes).ok();
    }
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace())?;
    if !matches!(first, b'{' | b'[') {
        return None;
    }
    serde_json::from_slice(bytes).ok()
}

fn fill_object_ref(r: &mut ObjectRef, obj: &Value) {
    let Some(meta) = obj.get("metadata") else {
        return;
    };
    for (field, key) in [
        (&mut r.namespace, "namespace"),
        (&mut r.name, "name"),
        (&mut r.uid, "uid"),
        (&mut r.resource_version, "resourceVersion"),
    ] {
        if field.is_empty() {
            if let Some(v) = meta.get(key).and_then(Value::as_str) {
                *field = v.to_string();
            }
        }
    }
}

/// Upstream's `copyWithoutManagedFields`: from an object, each item of a list, each row object of
/// a Table.
fn strip_managed_fields(obj: &mut Value) {
    let strip = |o: &mut Value| {
        if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    };
    strip(obj);
    if let Some(items) = obj.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip);
    }
    if let Some(rows) = obj.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows {
            if let Some(o) = row.get_mut("object") {
                strip(o);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event() -> Event {
        let t = DateTime::parse_from_rfc3339("2026-11-29T05:00:00.5Z")
            .unwrap()
            .with_timezone(&Utc);
        Event {
            level: Level::RequestResponse,
            audit_id: "6f1c0b5e-0000-4000-8000-000000000000".into(),
            stage: Stage::ResponseComplete,
            request_uri: "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create".into(),
            verb: "create".into(),
            user: Some(User {
                username: "alice".into(),
                uid: String::new(),
                groups: vec!["dev".into(), "system:authenticated".into()],
            }),
            impersonated_user: None,
            source_ips: vec!["127.0.0.1".into()],
            user_agent: "kubectl/v1.32.4".into(),
            object_ref: Some(ObjectRef {
                resource: "configmaps".into(),
                namespace: "default".into(),
                api_version: "v1".into(),
                ..Default::default()
            }),
            response_status: Some(ResponseStatus::code(201)),
            request_received: t,
            stage_time: t + chrono::Duration::microseconds(1234),
            annotations: BTreeMap::from([
                ("authorization.k8s.io/decision".into(), "allow".into()),
                ("authorization.k8s.io/reason".into(), String::new()),
            ]),
            bodies: Bodies {
                request: Some(Bytes::from_static(
                    b"{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\n \"metadata\":{\"name\":\"cm\",\"managedFields\":[{}]}}",
                )),
                request_object: true,
                fill_object_ref: true,
                response: Some(Bytes::from_static(
                    b"{\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"cm\",\"uid\":\"u1\",\"managedFields\":[{}]}}",
                )),
                response_object: true,
                omit_managed_fields: true,
            },
        }
    }

    fn decode(e: Event) -> Value {
        let line = e.to_json_line();
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1);
        assert_eq!(line.last(), Some(&b'\n'));
        serde_json::from_slice(&line).unwrap()
    }

    #[test]
    fn serializes_as_upstreams_event() {
        let v = decode(event());
        assert_eq!(
            v,
            json!({
                "kind": "Event",
                "apiVersion": "audit.k8s.io/v1",
                "level": "RequestResponse",
                "auditID": "6f1c0b5e-0000-4000-8000-000000000000",
                "stage": "ResponseComplete",
                "requestURI": "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create",
                "verb": "create",
                "user": {"username": "alice", "groups": ["dev", "system:authenticated"]},
                "sourceIPs": ["127.0.0.1"],
                "userAgent": "kubectl/v1.32.4",
                "objectRef": {"resource": "configmaps", "namespace": "default", "name": "cm", "apiVersion": "v1"},
                "responseStatus": {"metadata": {}, "code": 201},
                "requestObject": {"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "cm"}},
                "responseObject": {"kind": "ConfigMap", "metadata": {"name": "cm", "uid": "u1"}},
                "requestReceivedTimestamp": "2026-11-29T05:00:00.500000Z",
                "stageTimestamp": "2026-11-29T05:00:00.501234Z",
                "annotations": {
                    "authorization.k8s.io/decision": "allow",
                    "authorization.k8s.io/reason": ""
                }
            })
        );
        let keys: Vec<String> = v.as_object().unwrap().keys().cloned().collect();
        assert_eq!(keys[..4], ["kind", "apiVersion", "level", "auditID"]);
    }

    #[test]
    fn metadata_level_keeps_bodies_out_and_status_fields_in() {
        let mut e = event();
        e.level = Level::Metadata;
        e.user = None;
        e.bodies.request_object = false;
        e.bodies.response_object = false;
        e.bodies.response = Some(Bytes::from_static(
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"configmaps is forbidden","reason":"Forbidden","details":{"kind":"configmaps"},"code":403}"#,
        ));
        e.response_status = Some(ResponseStatus::code(403));
        let v = decode(e);
        assert!(v.get("requestObject").is_none());
        assert!(v.get("responseObject").is_none());
        assert_eq!(v["user"], json!({}));
        assert_eq!(
            v["responseStatus"],
            json!({"metadata": {}, "status": "Failure", "message": "configmaps is forbidden",
                   "reason": "Forbidden", "details": {"kind": "configmaps"}, "code": 403})
        );
        // The reference is still completed from the request body.
        assert_eq!(v["objectRef"]["name"], "cm");
    }

    #[test]
    fn bodies_that_are_not_json_are_left_out() {
        let mut e = event();
        e.bodies.request = Some(Bytes::from_static(b"\x0a\x02k8s protobuf"));
        e.bodies.response = Some(Bytes::from_static(b"{not json"));
        let v = decode(e);
        assert!(v.get("requestObject").is_none());
        assert!(v.get("responseObject").is_none());
        assert!(v["objectRef"].get("name").is_none());
    }

    #[test]
    fn protobuf_bodies_are_logged_as_json() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "pb", "namespace": "ns"}, "data": {"a": "b"}});
        let pb = apimachinery::serializer::protobuf::encode(&cm).unwrap();
        let mut e = event();
        e.object_ref.as_mut().unwrap().namespace.clear();
        e.bodies.request = Some(Bytes::from(pb.clone()));
        e.bodies.response = Some(Bytes::from(pb));
        let v = decode(e);
        assert_eq!(v["requestObject"]["data"]["a"], "b");
        assert_eq!(v["responseObject"]["metadata"]["name"], "pb");
        assert_eq!(v["objectRef"]["name"], "pb");
        assert_eq!(v["objectRef"]["namespace"], "ns");
    }

    #[test]
    fn managed_fields_go_from_lists_and_tables() {
        let mut list = json!({"items": [{"metadata": {"name": "a", "managedFields": []}}]});
        strip_managed_fields(&mut list);
        assert_eq!(list, json!({"items": [{"metadata": {"name": "a"}}]}));
        let mut table =
            json!({"kind": "Table", "rows": [{"object": {"metadata": {"managedFields": []}}}]});
        strip_managed_fields(&mut table);
        assert_eq!(table["rows"][0]["object"], json!({"metadata": {}}));
    }
}
