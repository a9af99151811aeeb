//! The three wire formats as a client speaks them: JSON, Kubernetes protobuf (the `k8s\0` magic, a
//! `runtime.Unknown` envelope, length-prefixed `WatchEvent`s) and CBOR (self-described items, watch
//! events as a CBOR sequence). Protobuf is read with upstream's messages (k8s-pb) where a check needs
//! it, and into the JSON form with the server's codec to compare answers.

use std::time::{Duration, Instant};

use apimachinery::serializer::{cbor, protobuf};
use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::Value;

use super::kinds::{Kind, TypedCheck};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Protobuf,
    Cbor,
}

pub const FORMATS: [Format; 3] = [Format::Json, Format::Protobuf, Format::Cbor];

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Protobuf => "protobuf",
            Format::Cbor => "cbor",
        }
    }

    /// 1 to 3, to give each format's objects their own names and addresses.
    pub fn index(self) -> u8 {
        match self {
            Format::Json => 1,
            Format::Protobuf => 2,
            Format::Cbor => 3,
        }
    }

    pub fn media(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Protobuf => protobuf::MEDIA_TYPE,
            Format::Cbor => cbor::MEDIA_TYPE,
        }
    }

    /// Upstream's content type of a watch stream: JSON as is, protobuf with `stream=watch`, CBOR as a
    /// CBOR sequence.
    pub fn watch_media(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Protobuf => "application/vnd.kubernetes.protobuf;stream=watch",
            Format::Cbor => "application/cbor-seq",
        }
    }

    /// An object (with `apiVersion` and `kind`) as a request body in this format. A protobuf body
    /// is checked with upstream's message first, so the server is sent what a Go client sends.
    pub fn encode(self, object: &Value, typed: TypedCheck) -> Vec<u8> {
        match self {
            Format::Json => serde_json::to_vec(object).unwrap(),
            Format::Protobuf => {
                let bytes = protobuf::encode(object).expect("protobuf form of the request");
                let (_, raw) = open_envelope(&bytes);
                typed(&raw, object)
                    .unwrap_or_else(|e| panic!("the request body is not upstream's message: {e}"));
                bytes
            }
            Format::Cbor => cbor::encode(object),
        }
    }

    pub fn encode_delete_options(self, options: &Value) -> Vec<u8> {
        match self {
            Format::Protobuf => {
                let message = meta::DeleteOptions {
                    propagation_policy: options["propagationPolicy"].as_str().map(str::to_string),
                    ..Default::default()
                };
                envelope("v1", "DeleteOptions", &message)
            }
            _ => self.encode(options, |_, _| Ok(())),
        }
    }

    /// The JSON form of an answer in this format, whatever its kind.
    pub fn read_any(self, answer: &Answer) -> Value {
        assert_eq!(
            answer.content_type,
            self.media(),
            "content type of the answer ({}): {}",
            answer.status,
            answer.text()
        );
        match self {
            Format::Json => serde_json::from_slice(&answer.body).expect("a JSON answer"),
            Format::Protobuf => {
                let (type_meta, raw) = open_envelope(&answer.body);
                if type_meta.1 == "Status" {
                    // Read with upstream's message.
                    let status = meta::Status::decode(raw.as_slice()).expect("a Status message");
                    return serde_json::json!({"kind": "Status", "apiVersion": type_meta.0, "status": status.status,
                        "reason": status.reason, "message": status.message, "code": status.code,
                        "details": {"name": status.details.and_then(|d| d.name)}});
                }
                protobuf::decode(&answer.body).expect("a protobuf answer")
            }
            Format::Cbor => {
                assert!(
                    cbor::is_cbor(&answer.body),
                    "a CBOR answer starts with the self-described CBOR tag"
                );
                cbor::decode(&answer.body).expect("a CBOR answer")
            }
        }
    }

    /// An object of `kind` answered in this format; in protobuf, `typed` checks upstream's message.
    pub fn read(
        self,
        answer: &Answer,
        api_version: &str,
        kind: &str,
        typed: Option<TypedCheck>,
    ) -> Value {
        let value = self.read_any(answer);
        assert_eq!(
            (value["apiVersion"].as_str(), value["kind"].as_str()),
            (Some(api_version), Some(kind)),
            "an answer of another kind: {value}"
        );
        if self == Format::Protobuf {
            let (type_meta, raw) = open_envelope(&answer.body);
            assert_eq!(
                (type_meta.0.as_str(), type_meta.1.as_str()),
                (api_version, kind),
                "the envelope's type"
            );
            if let Some(typed) = typed {
                typed(&raw, &value).unwrap_or_else(|e| panic!("{kind} in protobuf: {e}"));
            }
        }
        value
    }

    /// A list of `k`'s objects answered in this format; in protobuf, the list and every item are
    /// checked with upstream's messages.
    pub fn read_list(self, answer: &Answer, api_version: &str, list_kind: &str, k: &Kind) -> Value {
        let mut value = self.read(answer, api_version, list_kind, None);
        if self == Format::Protobuf {
            // Protobuf cannot tell an empty list from an absent one; JSON and CBOR say `[]`.
            if value["items"].is_null() {
                value["items"] = serde_json::json!([]);
            }
            let (_, raw) = open_envelope(&answer.body);
            (k.typed_list)(&raw).unwrap_or_else(|e| panic!("{list_kind} in protobuf: {e}"));
            let list = RawList::decode(raw.as_slice()).expect("a list message");
            let items = value["items"].as_array().cloned().unwrap_or_default();
            assert_eq!(
                list.items.len(),
                items.len(),
                "{list_kind} in protobuf: items"
            );
            for (raw, json) in list.items.iter().zip(&items) {
                (k.typed)(raw, json)
                    .unwrap_or_else(|e| panic!("{list_kind} item in protobuf: {e}"));
            }
        }
        value
    }
}

pub fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = protobuf::MAGIC.to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// ((apiVersion, kind), message bytes) of an enveloped protobuf object, read with upstream's
/// `runtime.Unknown`.
pub fn open_envelope(bytes: &[u8]) -> ((String, String), Vec<u8>) {
    assert!(
        bytes.starts_with(&protobuf::MAGIC),
        "not a protobuf object: {:?}",
        String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
    );
    let unknown = Unknown::decode(&bytes[4..]).expect("runtime.Unknown");
    let type_meta = unknown.type_meta.unwrap_or_default();
    (
        (
            type_meta.api_version.unwrap_or_default(),
            type_meta.kind.unwrap_or_default(),
        ),
        unknown.raw.unwrap_or_default(),
    )
}

/// Any list message: its ListMeta and its items' bytes (every list of upstream has these tags).
#[derive(Clone, PartialEq, prost::Message)]
struct RawList {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta::ListMeta>,
    #[prost(bytes = "vec", repeated, tag = "2")]
    items: Vec<Vec<u8>>,
}

/// Any object message: its ObjectMeta (tag 1 in every kind of upstream).
#[derive(Clone, PartialEq, prost::Message)]
struct AnyObject {
    #[prost(message, optional, tag = "1")]
    metadata: Option<meta::ObjectMeta>,
}

/// A protobuf list answer read as client-go reads it, with upstream's framing only: its
/// resourceVersion, how many items (each with a name), and the continue token.
pub fn generic_list(
    answer: &Answer,
    api_version: &str,
    list_kind: &str,
) -> Result<(String, usize, Option<String>), String> {
    if answer.content_type != protobuf::MEDIA_TYPE {
        return Err(format!(
            "answered in {:?}, not protobuf: {}",
            answer.content_type,
            answer.text()
        ));
    }
    let ((got_version, got_kind), raw) = open_envelope(&answer.body);
    if (got_version.as_str(), got_kind.as_str()) != (api_version, list_kind) {
        return Err(format!(
            "envelope of {got_version} {got_kind}, not {api_version} {list_kind}"
        ));
    }
    let list = RawList::decode(raw.as_slice()).map_err(|e| format!("not a list message: {e}"))?;
    for item in &list.items {
        let object = AnyObject::decode(item.as_slice()).map_err(|e| format!("an item: {e}"))?;
        let name = object.metadata.and_then(|m| m.name).unwrap_or_default();
        if name.is_empty() {
            return Err("an item without a name".into());
        }
    }
    let list_meta = list.metadata.unwrap_or_default();
    Ok((
        list_meta.resource_version.unwrap_or_default(),
        list.items.len(),
        list_meta.r#continue.filter(|c| !c.is_empty()),
    ))
}

pub struct Answer {
    pub status: StatusCode,
    pub content_type: String,
    pub body: Bytes,
}

impl Answer {
    pub fn text(&self) -> String {
        if self.body.starts_with(&protobuf::MAGIC) {
            let (_, raw) = open_envelope(&self.body);
            match meta::Status::decode(raw.as_slice()) {
                Ok(s) => format!("(protobuf Status) {:?} {:?}", s.reason, s.message),
                Err(_) => "(protobuf)".into(),
            }
        } else if cbor::is_cbor(&self.body) {
            cbor::decode(&self.body)
                .map(|v| v.to_string())
                .unwrap_or_else(|_| "(CBOR)".into())
        } else {
            String::from_utf8_lossy(&self.body).into_owned()
        }
    }

    pub fn expect(&self, status: StatusCode, what: &str) {
        assert_eq!(self.status, status, "{what}: {}", self.text());
    }
}

#[derive(Clone)]
pub struct Http {
    client: kube::Client,
}

impl Http {
    pub fn new(client: kube::Client) -> Http {
        Http { client }
    }

    async fn send(&self, req: Request<kube::client::Body>) -> http::Response<kube::client::Body> {
        self.client.send(req).await.expect("request")
    }

    /// A request accepting only `format`, with a body of (content type, bytes).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        format: Format,
        body: Option<(&str, Vec<u8>)>,
    ) -> Answer {
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::ACCEPT, format.media());
        let body = match body {
            Some((content_type, bytes)) => {
                req = req.header(http::header::CONTENT_TYPE, content_type);
                kube::client::Body::from(bytes)
            }
            None => kube::client::Body::empty(),
        };
        let resp = self.send(req.body(body).unwrap()).await;
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        Answer {
            status,
            content_type,
            body,
        }
    }

    pub async fn json(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|b| ("application/json", serde_json::to_vec(b).unwrap()));
        let answer = self.call(method, path, Format::Json, body).await;
        let value =
            serde_json::from_slice(&answer.body).unwrap_or_else(|_| Value::String(answer.text()));
        (answer.status, value)
    }

    /// A create or update of `object` in `format`, answered in `format` with `want`.
    pub async fn write(
        &self,
        method: Method,
        path: &str,
        format: Format,
        object: &Value,
        want: StatusCode,
        k: &Kind,
    ) -> Value {
        let body = format.encode(object, k.typed);
        let answer = self
            .call(method.clone(), path, format, Some((format.media(), body)))
            .await;
        answer.expect(want, &format!("{method} {path} in {}", format.name()));
        format.read(&answer, &k.api_version(), k.kind, Some(k.typed))
    }

    /// A PUT to `path` (the object or its status) of `change` applied to `current`, answered in
    /// `format`. A conflict (a controller of the server wrote the object since `current` was read)
    /// re-reads the object in `format` and tries again, as client-go's `RetryOnConflict`.
    pub async fn update(
        &self,
        path: &str,
        format: Format,
        k: &Kind,
        mut current: Value,
        change: impl Fn(&mut Value),
    ) -> Value {
        let object_path = path.strip_suffix("/status").unwrap_or(path);
        for _ in 0..5 {
            let mut object = current.clone();
            change(&mut object);
            let body = format.encode(&object, k.typed);
            let answer = self
                .call(Method::PUT, path, format, Some((format.media(), body)))
                .await;
            if answer.status != StatusCode::CONFLICT {
                answer.expect(StatusCode::OK, &format!("PUT {path} in {}", format.name()));
                return format.read(&answer, &k.api_version(), k.kind, Some(k.typed));
            }
            let answer = self.call(Method::GET, object_path, format, None).await;
            answer.expect(
                StatusCode::OK,
                &format!("GET {object_path} in {}", format.name()),
            );
            current = format.read(&answer, &k.api_version(), k.kind, Some(k.typed));
        }
        panic!("PUT {path} in {}: a conflict five times", format.name());
    }

    /// Waits until `path` is 404.
    pub async fn gone(&self, path: &str) {
        let deadline = Instant::now() + super::DEADLINE;
        loop {
            let (status, body) = self.json(Method::GET, path, None).await;
            if status == StatusCode::NOT_FOUND {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{path} still there after its delete: {body}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// A watch stream in one format, read event by event.
pub struct Watch {
    format: Format,
    body: kube::client::Body,
    buf: Vec<u8>,
    ended: bool,
}

/// (type, object bytes in the format) of one event.
type RawEvent = (String, Vec<u8>);

impl Watch {
    pub async fn open(http: &Http, format: Format, path: &str) -> Result<Watch, String> {
        let req = Request::builder()
            .uri(path)
            .header(http::header::ACCEPT, format.media())
            .body(kube::client::Body::empty())
            .unwrap();
        let resp = http.send(req).await;
        let content_type = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        if resp.status() != StatusCode::OK || content_type != format.watch_media() {
            let status = resp.status();
            let body = resp
                .into_body()
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let answer = Answer {
                status,
                content_type: content_type.clone(),
                body,
            };
            return Err(format!(
                "WATCH {path} in {}: {status} {content_type:?} (want 200 {:?}): {}",
                format.name(),
                format.watch_media(),
                answer.text()
            ));
        }
        Ok(Watch {
            format,
            body: resp.into_body(),
            buf: Vec::new(),
            ended: false,
        })
    }

    /// The events whole in the buffer.
    fn take_events(&mut self) -> Result<Vec<RawEvent>, String> {
        let mut out = Vec::new();
        loop {
            match self.format {
                Format::Json => {
                    let Some(end) = self.buf.iter().position(|b| *b == b'\n') else {
                        break;
                    };
                    let line: Vec<u8> = self.buf.drain(..=end).collect();
                    let event: Value =
                        serde_json::from_slice(&line).map_err(|e| format!("a JSON event: {e}"))?;
                    out.push((
                        event["type"].as_str().unwrap_or("").to_string(),
                        serde_json::to_vec(&event["object"]).unwrap(),
                    ));
                }
                Format::Protobuf => {
                    if self.buf.len() < 4 {
                        break;
                    }
                    let len = u32::from_be_bytes(self.buf[..4].try_into().unwrap()) as usize;
                    if self.buf.len() < 4 + len {
                        break;
                    }
                    let event = meta::WatchEvent::decode(&self.buf[4..4 + len])
                        .map_err(|e| format!("a WatchEvent: {e}"))?;
                    self.buf.drain(..4 + len);
                    out.push((
                        event.r#type.unwrap_or_default(),
                        event.object.and_then(|o| o.raw).unwrap_or_default(),
                    ));
                }
                Format::Cbor => {
                    if self.buf.is_empty() {
                        break;
                    }
                    let end = match cbor::decode(&self.buf) {
                        Ok(_) => self.buf.len(),
                        Err(cbor::CborError::TrailingBytes { offset, .. }) => offset,
                        Err(cbor::CborError::Truncated) => break,
                        Err(e) => return Err(format!("a CBOR event: {e}")),
                    };
                    let item: Vec<u8> = self.buf.drain(..end).collect();
                    if !cbor::is_cbor(&item) {
                        return Err("a CBOR event without the self-described CBOR tag".into());
                    }
                    let event = cbor::decode(&item).map_err(|e| e.to_string())?;
                    out.push((
                        event["type"].as_str().unwrap_or("").to_string(),
                        cbor::encode(&event["object"]),
                    ));
                }
            }
        }
        Ok(out)
    }

    /// The next events, or none when `deadline` passes first.
    async fn next_events(&mut self, deadline: Instant) -> Result<Vec<RawEvent>, String> {
        loop {
            let events = self.take_events()?;
            if !events.is_empty() {
                return Ok(events);
            }
            if self.ended {
                return Err("the watch ended".into());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.body.frame()).await {
                Err(_) => return Ok(Vec::new()),
                Ok(None) => self.ended = true,
                Ok(Some(Err(e))) => return Err(format!("reading the watch: {e}")),
                Ok(Some(Ok(frame))) => {
                    if let Ok(data) = frame.into_data() {
                        self.buf.extend_from_slice(&data);
                    }
                }
            }
        }
    }

    /// The JSON form of an event's object; in protobuf, checked with `k`'s upstream message.
    fn object(&self, t: &str, raw: &[u8], k: Option<&Kind>) -> Result<Value, String> {
        Ok(match self.format {
            Format::Json => serde_json::from_slice(raw).map_err(|e| e.to_string())?,
            Format::Cbor => cbor::decode(raw).map_err(|e| e.to_string())?,
            Format::Protobuf => {
                let value = protobuf::decode(raw).map_err(|e| format!("{t} event: {e}"))?;
                if let (Some(k), false) = (k, t == "ERROR") {
                    let ((_, kind), message) = open_envelope(raw);
                    if kind == k.kind {
                        (k.typed)(&message, &value)
                            .map_err(|e| format!("{t} event in protobuf: {e}"))?;
                    }
                }
                value
            }
        })
    }

    /// Events until `done` holds for those read (or `deadline`: an error).
    pub async fn events_until(
        &mut self,
        deadline: Instant,
        k: &Kind,
        done: impl Fn(&[(String, Value)]) -> bool,
    ) -> Result<Vec<(String, Value)>, String> {
        let mut events = Vec::new();
        while !done(&events) {
            let batch = self
                .next_events(deadline)
                .await
                .map_err(|e| format!("{e}; events so far: {events:?}"))?;
            if batch.is_empty() {
                return Err(format!(
                    "not all events came within the deadline; events: {events:?}"
                ));
            }
            for (t, raw) in batch {
                let object = self.object(&t, &raw, Some(k))?;
                if t == "ERROR" {
                    return Err(format!("an ERROR event: {object}"));
                }
                events.push((t, object));
            }
        }
        Ok(events)
    }

    /// Fails on an ERROR event or the end of the watch before `deadline`.
    pub async fn errors_until(&mut self, deadline: Instant) -> Result<(), String> {
        while Instant::now() < deadline {
            for (t, raw) in self.next_events(deadline).await? {
                if t == "ERROR" {
                    return Err(format!("an ERROR event: {}", self.object(&t, &raw, None)?));
                }
            }
        }
        Ok(())
    }

    /// Reads the initial events of a `sendInitialEvents` watch up to the bookmark that ends them.
    pub async fn initial_events_end(
        &mut self,
        kind: &str,
        deadline: Instant,
    ) -> Result<(), String> {
        let mut added = 0;
        loop {
            let batch = self.next_events(deadline).await?;
            if batch.is_empty() {
                return Err(format!(
                    "no bookmark with k8s.io/initial-events-end after {added} ADDED events"
                ));
            }
            for (t, raw) in batch {
                match t.as_str() {
                    "ADDED" => added += 1,
                    "BOOKMARK" => {
                        let ((_, got_kind), message) = open_envelope(&raw);
                        let object =
                            AnyObject::decode(message.as_slice()).map_err(|e| e.to_string())?;
                        let meta = object.metadata.unwrap_or_default();
                        if got_kind != kind {
                            return Err(format!("a bookmark of kind {got_kind}"));
                        }
                        if meta
                            .annotations
                            .get("k8s.io/initial-events-end")
                            .map(String::as_str)
                            == Some("true")
                        {
                            return if meta.resource_version.is_some_and(|rv| !rv.is_empty()) {
                                Ok(())
                            } else {
                                Err("the initial-events-end bookmark has no resourceVersion".into())
                            };
                        }
                    }
                    other => {
                        return Err(format!(
                            "a {other} event among the initial events: {}",
                            self.object(other, &raw, None)?
                        ))
                    }
                }
            }
        }
    }
}
