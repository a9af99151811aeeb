//! The fuzz targets' entry functions, one per target: each takes the fuzzer's bytes and runs the code a
//! request's bytes reach in the server (decoders, patches, server-side apply, selectors, quantities,
//! tokens, the SPDY and WebSocket framing). A target must never panic, hang or allocate without
//! bound, whatever the bytes; what it returns does not matter.
//!
//! `fuzz/` (cargo-fuzz, libFuzzer) runs them with coverage guidance; `tests/replay.rs` feeds each its
//! committed corpus (`fuzz/corpus/<target>/`) and deterministic mutations of it on the stable
//! toolchain, so a known crash input fails the normal test run.
//!
//! Several targets take more than one input: the parts are separated by NUL bytes (never valid in
//! JSON or YAML text), and a first byte selects the resource and options where a target has them.

use std::sync::OnceLock;

use apimachinery::quantity::Quantity;
use apiserver::rest::fuzz as api;
use bytes::{Bytes, BytesMut};
use serde_json::{json, Value};

/// A target's entry function.
pub type Target = fn(&[u8]);

/// Every target: its name (the cargo-fuzz binary and corpus directory) and its function.
pub const TARGETS: &[(&str, Target)] = &[
    ("decode_json", decode_json),
    ("decode_yaml", decode_yaml),
    ("decode_protobuf", decode_protobuf),
    ("decode_cbor", decode_cbor),
    ("patch_json", patch_json),
    ("patch_merge", patch_merge),
    ("patch_strategic", patch_strategic),
    ("apply", apply),
    ("managed_fields", managed_fields),
    ("label_selector", label_selector),
    ("field_selector", field_selector),
    ("quantity", quantity),
    ("jwt", jwt),
    ("bootstrap_token", bootstrap_token),
    ("route", route),
    ("spdy_frames", spdy_frames),
    ("spdy_conn", spdy_conn),
    ("websocket", websocket),
];

/// The function of target `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// The first byte (0 for an empty input) and the rest.
fn selector(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((b, rest)) => (*b, rest),
        None => (0, data),
    }
}

/// The input up to the first NUL, and what follows it (if there is a NUL).
fn split(data: &[u8]) -> (&[u8], Option<&[u8]>) {
    match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], Some(&data[i + 1..])),
        None => (data, None),
    }
}

fn text(data: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(data)
}

/// `fieldValidation` as bits 3-4 of the selector byte pick it.
fn field_validation(sel: u8) -> Option<&'static str> {
    [None, Some("Strict"), Some("Warn"), Some("Ignore")][usize::from((sel >> 3) & 3)]
}

/// A live object of the resource `sel` picks (`apiserver::rest::fuzz::RESOURCES`), as storage holds
/// it.
fn sample(resource: &apimachinery::resources::Resource) -> Value {
    let meta = json!({
        "name": "a", "namespace": "default", "uid": "7a6f-1", "resourceVersion": "12",
        "labels": {"app": "web", "tier": "front"},
        "annotations": {"note": "x"},
        "managedFields": [{
            "manager": "kubectl", "operation": "Apply", "apiVersion": resource.api_version(),
            "time": "2026-11-28T00:00:00Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}
        }]
    });
    let pod_spec = json!({
        "containers": [
            {"name": "web", "image": "nginx:1", "ports": [{"containerPort": 80, "protocol": "TCP"}],
             "env": [{"name": "A", "value": "1"}], "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}}},
            {"name": "side", "image": "busybox", "args": ["sleep", "1"]}
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
        "tolerations": [{"key": "k", "operator": "Exists"}]
    });
    let mut obj = match resource.kind.as_str() {
        "Pod" => json!({"spec": pod_spec, "status": {"phase": "Pending"}}),
        "ConfigMap" => json!({"data": {"a": "1", "b": "2"}}),
        "Service" => json!({"spec": {"selector": {"app": "web"}, "ports": [
            {"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}]}}),
        "Node" => json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi"}}}),
        "Deployment" | "Job" => json!({"spec": {"replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": pod_spec}}}),
        "Role" => json!({"rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}),
        "NetworkPolicy" => json!({"spec": {"podSelector": {"matchLabels": {"app": "web"}},
            "ingress": [{"ports": [{"port": 80}]}]}}),
        _ => json!({}),
    };
    obj["apiVersion"] = resource.api_version().into();
    obj["kind"] = resource.kind.clone().into();
    obj["metadata"] = meta;
    obj
}

/// A live object: the JSON given, or the resource's sample when none is (or it is not an object).
fn live_object(resource: &apimachinery::resources::Resource, given: Option<&[u8]>) -> Value {
    given
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| sample(resource))
}

fn decode(content_type: &str, data: &[u8]) {
    let (sel, body) = selector(data);
    let resource = api::resource(usize::from(sel & 7));
    let _ = api::create_body(&resource, content_type, field_validation(sel), body);
}

/// A create or update body in JSON (strict decoding finds repeated keys).
pub fn decode_json(data: &[u8]) {
    decode("application/json", data)
}

/// A create or update body in YAML.
pub fn decode_yaml(data: &[u8]) {
    decode("application/yaml", data)
}

/// A create or update body in Kubernetes' protobuf envelope.
pub fn decode_protobuf(data: &[u8]) {
    decode(apimachinery::serializer::protobuf::MEDIA_TYPE, data)
}

/// A create or update body in CBOR.
pub fn decode_cbor(data: &[u8]) {
    decode(apimachinery::serializer::cbor::MEDIA_TYPE, data)
}

/// `[selector] [live object JSON NUL] patch`.
fn patch(patch_type: &str, data: &[u8]) {
    let (sel, rest) = selector(data);
    let resource = api::resource(usize::from(sel & 7));
    let (live, body) = match split(rest) {
        (live, Some(body)) => (live_object(&resource, Some(live)), body),
        (body, None) => (sample(&resource), body),
    };
    let _ = api::patch(&resource, patch_type, field_validation(sel), &live, body);
}

/// A JSON patch (RFC 6902).
pub fn patch_json(data: &[u8]) {
    patch("application/json-patch+json", data)
}

/// A JSON merge patch (RFC 7386).
pub fn patch_merge(data: &[u8]) {
    patch("application/merge-patch+json", data)
}

/// A strategic merge patch of a built-in kind.
pub fn patch_strategic(data: &[u8]) {
    patch("application/strategic-merge-patch+json", data)
}

/// Server-side apply: `[selector] [live object JSON NUL] configuration YAML`; selector bit 5 forces,
/// bit 6 applies to a missing object.
pub fn apply(data: &[u8]) {
    let (sel, rest) = selector(data);
    let resource = api::resource(usize::from(sel & 7));
    let (live, body) = match split(rest) {
        (live, Some(body)) => (live_object(&resource, Some(live)), body),
        (body, None) => (sample(&resource), body),
    };
    let live = (sel & 0x40 == 0).then_some(&live);
    let _ = api::apply(
        &resource,
        field_validation(sel),
        sel & 0x20 != 0,
        live,
        body,
    );
}

/// An update that sends its own managedFields: `[selector] new object JSON [NUL old object JSON]`.
pub fn managed_fields(data: &[u8]) {
    let (sel, rest) = selector(data);
    let resource = api::resource(usize::from(sel & 7));
    let (new, old) = split(rest);
    let Ok(mut new) = serde_json::from_slice::<Value>(new) else {
        return;
    };
    let old = live_object(&resource, old);
    let _ = api::update_managed_fields(&resource, &old, &mut new);
}

/// A `labelSelector` query (parsed and matched as a list does) and a LabelSelector of an object's
/// spec: `selector NUL labels JSON NUL LabelSelector JSON`.
pub fn label_selector(data: &[u8]) {
    let (selector, rest) = split(data);
    let (labels, rest) = split(rest.unwrap_or_default());
    let selector = text(selector);
    if let Ok(filter) = apiserver::filter::Filter::new("", "pods", None, Some(&selector), None) {
        let labels: Value = serde_json::from_slice(labels).unwrap_or_else(|_| json!({}));
        let obj = json!({"metadata": {"name": "a", "namespace": "d", "labels": labels}});
        let _ = filter.matches(&apiserver::filter::Attrs::of("", "pods", &obj));
        if let Some(s) = &filter.labels {
            let _ = s.requires_exact_match("app");
        }
    }
    if let Some(spec) = rest.and_then(|b| serde_json::from_slice::<Value>(b).ok()) {
        if let Ok(s) = apimachinery::labels::selector_from_label_selector(&spec) {
            let _ = s.matches_object(&json!({"metadata": {"labels": {"app": "web"}}}));
        }
    }
}

/// A `fieldSelector` query of the resource the selector byte picks, matched against an object:
/// `[selector] fieldSelector [NUL object JSON]`. Escaping a value and unescaping it gives it back.
pub fn field_selector(data: &[u8]) {
    const RESOURCES: &[(&str, &str)] = &[
        ("", "pods"),
        ("", "events"),
        ("events.k8s.io", "events"),
        ("", "secrets"),
        ("", "nodes"),
        ("", "namespaces"),
        ("", "services"),
        ("certificates.k8s.io", "certificatesigningrequests"),
    ];
    let (sel, rest) = selector(data);
    let (group, resource) = RESOURCES[usize::from(sel & 7)];
    let (field_selector, obj) = split(rest);
    let field_selector = text(field_selector);
    if let Ok(filter) =
        apiserver::filter::Filter::new(group, resource, None, None, Some(&field_selector))
    {
        let obj = obj
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .unwrap_or_else(|| json!({"metadata": {"name": "a", "namespace": "d"}}));
        let _ = filter.matches(&apiserver::filter::Attrs::of(group, resource, &obj));
    }
    let escaped = apimachinery::fields::escape_value(&field_selector);
    assert_eq!(
        apimachinery::fields::unescape_value(&escaped).as_deref(),
        Ok(&*field_selector),
        "escape_value then unescape_value"
    );
    let _ = apimachinery::fields::unescape_value(&field_selector);
}

/// A resource quantity: parsed; a valid one prints in a form that parses back to it, and its
/// arithmetic does not panic.
pub fn quantity(data: &[u8]) {
    let s = text(data);
    let Ok(q) = Quantity::parse(&s) else {
        return;
    };
    let printed = q.to_string();
    let back = Quantity::parse(&printed)
        .unwrap_or_else(|e| panic!("{s:?} prints as {printed:?}, which does not parse: {e}"));
    assert_eq!(
        back, q,
        "{s:?} prints as {printed:?}, which parses to another value"
    );
    let _ = (
        q.value(),
        q.milli_value(),
        q.as_f64(),
        q.sign(),
        q.is_zero(),
    );
    let _ = (q.add(&q), q.sub(&back), q.neg(), q.round_up_to_units());
    let _ = q.to_k8s();
    let _ = serde_json::from_value::<Quantity>(Value::String(s.into_owned()));
}

/// The key the `jwt` target signs and verifies with (a fixed test key).
pub fn signing_key() -> &'static apiserver::serviceaccount::jwt::SigningKey {
    static KEY: OnceLock<apiserver::serviceaccount::jwt::SigningKey> = OnceLock::new();
    KEY.get_or_init(|| {
        apiserver::serviceaccount::jwt::SigningKey::from_pem(
            "-----BEGIN PRIVATE KEY-----\n\
             MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRr6CGSnXm5RTCtUy\n\
             TJ3A2WGbpdXleqzKlfZt+VDJWomhRANCAAQ9xrXbvQZCy8FYZDN36TtU4EJPCJKW\n\
             bjFE3xZNY+UoXw29hNnHrw5kcIU/0apQDvB8FWTkVJaCIYkfvDFVsgAA\n\
             -----END PRIVATE KEY-----\n",
        )
        .expect("the fuzz key parses")
    })
}

/// A bearer token checked as a service account token (its signature) and parsed as a bootstrap
/// token; claims given as JSON are signed and verified back.
pub fn jwt(data: &[u8]) {
    let key = signing_key();
    let token = text(data);
    let _ = key.verify(&token);
    let _ = apiserver::authn::bootstrap_token::parse_token(&token);
    if let Ok(claims) = serde_json::from_slice::<Value>(data) {
        let signed = key.sign(&claims).expect("signing claims");
        // (Equal up to float rounding: serde_json's parser is not exact without float_roundtrip.)
        assert!(
            key.verify(&signed).is_ok(),
            "a token the key signed verifies"
        );
    }
}

/// A bootstrap token and the Secret its id names: `token NUL Secret JSON`.
pub fn bootstrap_token(data: &[u8]) {
    let (token, secret) = split(data);
    let token = text(token);
    let Some((id, secret_part)) = apiserver::authn::bootstrap_token::parse_token(&token) else {
        return;
    };
    let secret = secret
        .and_then(|b| serde_json::from_slice::<Value>(b).ok())
        .unwrap_or(Value::Null);
    let now = chrono::DateTime::from_timestamp(1_790_000_000, 0).unwrap_or_default();
    let _ = apiserver::authn::bootstrap_token::authenticate(id, secret_part, &secret, now);
}

/// A request line as the router and list handler read it: `METHOD NUL path NUL query`.
pub fn route(data: &[u8]) {
    let (method, rest) = split(data);
    let (path, query) = split(rest.unwrap_or_default());
    api::route(&text(method), &text(path), &text(query.unwrap_or_default()));
}

/// SPDY/3.1 frames read from a byte stream arriving in pieces (the first byte sets their size), each
/// frame written back through an encoder.
pub fn spdy_frames(data: &[u8]) {
    use httpstream::spdy::frame::{FrameDecoder, FrameEncoder};
    let (sel, rest) = selector(data);
    let piece = usize::from(sel).max(1);
    let mut decoder = FrameDecoder::new();
    let mut encoder = FrameEncoder::new();
    let mut buf = BytesMut::new();
    let mut out = BytesMut::new();
    for chunk in rest.chunks(piece) {
        buf.extend_from_slice(chunk);
        loop {
            match decoder.decode(&mut buf) {
                Ok(Some(frame)) => {
                    out.clear();
                    let _ = encoder.encode(&frame, &mut out);
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .expect("a tokio runtime")
}

/// A SPDY connection's server end (the kubelet's exec, attach and port-forward) reading the bytes as
/// what the client sent: every stream it opens is accepted, answered and read to its end.
pub fn spdy_conn(data: &[u8]) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let data = data.to_vec();
    runtime().block_on(async move {
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (_conn, mut incoming) = httpstream::spdy::Connection::server(server);
        let session = async {
            let mut streams = Vec::new();
            while let Some(mut stream) = incoming.accept().await {
                let _ = stream.writer.reply().await;
                let _ = stream.writer.write(Bytes::from_static(b"ok")).await;
                streams.push(tokio::spawn(async move {
                    let _ = stream.reader.read_all().await;
                    let _ = stream.writer.close().await;
                }));
            }
            for s in streams {
                let _ = s.await;
            }
        };
        let peer = async {
            let (mut read, mut write) = tokio::io::split(&mut client);
            let send = async {
                let _ = write.write_all(&data).await;
                let _ = write.shutdown().await;
            };
            let drain = async {
                let mut sink = vec![0u8; 16 * 1024];
                while let Ok(n) = read.read(&mut sink).await {
                    if n == 0 {
                        break;
                    }
                }
            };
            tokio::join!(send, drain);
        };
        // Time is paused: the limit passes only once every task waits on a timer.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            tokio::join!(session, peer)
        })
        .await;
    });
}

/// A WebSocket (exec/attach/port-forward from a WebSocket client) read as the API server reads it:
/// messages from the bytes, each decoded as a channel message of the v5 protocol.
pub fn websocket(data: &[u8]) {
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::protocol::Role;
    let data = data.to_vec();
    runtime().block_on(async move {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let mut ws =
            tokio_tungstenite::WebSocketStream::from_raw_socket(server, Role::Server, None).await;
        let read = async {
            while let Some(msg) = ws.next().await {
                match msg {
                    Ok(tokio_tungstenite::tungstenite::Message::Binary(b)) => {
                        let _ = httpstream::wsstream::decode(b, true);
                    }
                    Ok(_) => {}
                    Err(_) => break,
                }
            }
        };
        let (mut from_server, mut to_server) = tokio::io::split(client);
        let send = async {
            let _ = to_server.write_all(&data).await;
            let _ = to_server.shutdown().await;
        };
        let drain = async {
            let mut sink = vec![0u8; 16 * 1024];
            while let Ok(n) = from_server.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            tokio::join!(read, send, drain)
        })
        .await;
    });
}
