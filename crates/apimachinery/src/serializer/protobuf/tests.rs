//! Round trips over every kind of the schema, and bytes checked against an independent implementation of
//! upstream's messages (prost code generated from upstream's `generated.proto`, the k8s-pb crate).

use prost::Message as _;
use serde_json::{json, Map, Value};

use super::schema::{FieldType, Label, MessageId, Scalar, Special, SCHEMA};
use super::*;

/// A JSON value for message `id` that sets every field to a non-zero value (recursive messages stop at
/// `depth` 4, as a fixture needs no more).
fn fixture(id: MessageId, depth: usize) -> Option<Value> {
    let message = SCHEMA.message(id);
    if let Some(special) = message.special {
        return Some(match special {
            Special::Time => json!("2024-05-06T07:08:09Z"),
            Special::MicroTime => json!("2024-05-06T07:08:09.123456Z"),
            Special::Duration => json!("1h2m3.5s"),
            Special::Quantity => json!("250m"),
            Special::IntOrString => {
                if depth.is_multiple_of(2) {
                    json!("http")
                } else {
                    json!(8080)
                }
            }
            Special::RawJson => json!({"a": [1, "x", {"b": null}]}),
            Special::Items => json!(["get", "list"]),
            Special::SchemaOrBool if depth >= 4 => json!(true),
            Special::SchemaOrArray | Special::SchemaOrBool => {
                let schema_tag = if special == Special::SchemaOrBool {
                    2
                } else {
                    1
                };
                let FieldType::Message(schema) =
                    message.fields[message.field_by_tag(schema_tag)?].ty
                else {
                    return None;
                };
                fixture(schema, depth + 1)?
            }
            Special::SchemaOrStringArray => json!(["a", "b"]),
        });
    }
    if depth > 4 {
        return None;
    }
    let mut obj = Map::new();
    for field in &message.fields {
        let one = |depth: usize| -> Option<Value> {
            match field.ty {
                FieldType::Scalar(s) => Some(scalar_fixture(s, &field.json)),
                FieldType::Message(child) => fixture(child, depth + 1),
            }
        };
        match field.label {
            Label::Inline => {
                if let Some(Value::Object(inner)) = one(depth) {
                    obj.extend(inner);
                }
            }
            Label::Optional => {
                if let Some(v) = one(depth) {
                    obj.insert(field.json.clone(), v);
                }
            }
            Label::Repeated => {
                if let Some(v) = one(depth) {
                    obj.insert(field.json.clone(), json!([v.clone(), v]));
                }
            }
            Label::Map(_) => {
                if let Some(v) = one(depth) {
                    obj.insert(field.json.clone(), json!({"k2": v.clone(), "k1": v}));
                }
            }
        }
    }
    Some(Value::Object(obj))
}

fn scalar_fixture(s: Scalar, name: &str) -> Value {
    match s {
        Scalar::String => json!(format!("{name}-value")),
        Scalar::Bytes => json!("aGVsbG8="),
        Scalar::Bool => json!(true),
        Scalar::Int32 => json!(-7),
        Scalar::Int64 => json!(1_234_567_890_123i64),
        Scalar::Uint32 | Scalar::Uint64 => json!(9),
        Scalar::Double => json!(1.25),
        Scalar::Float => json!(0.5),
    }
}

#[test]
fn every_kind_round_trips_through_protobuf() {
    let mut kinds: Vec<(&str, &str, MessageId)> = SCHEMA.kinds().collect();
    kinds.sort();
    assert!(kinds.len() > 150, "only {} kinds", kinds.len());
    for (api_version, kind, id) in kinds {
        let mut object = Map::new();
        object.insert("apiVersion".into(), json!(api_version));
        object.insert("kind".into(), json!(kind));
        if let Some(Value::Object(fields)) = fixture(id, 0) {
            object.extend(fields);
        }
        let object = Value::Object(object);
        let bytes = encode(&object).unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
        assert_eq!(&bytes[..4], b"k8s\0");
        let back = decode(&bytes).unwrap_or_else(|e| panic!("{api_version} {kind}: {e}"));
        assert_eq!(back, object, "{api_version} {kind}");
        // Encoding is deterministic: the same object always gives the same bytes.
        assert_eq!(encode(&back).unwrap(), bytes, "{api_version} {kind}");
    }
}

/// Bytes written by hand from the documented layout: magic, `runtime.Unknown{typeMeta, raw,
/// contentEncoding, contentType}`, the ConfigMap message (metadata=1, data=2 map entries, immutable=4).
#[test]
fn a_hand_assembled_config_map_decodes() {
    let metadata = [0x0a, 0x02, b'c', b'm', 0x1a, 0x02, b'n', b's']; // name "cm", namespace "ns"
    let entry = [0x0a, 0x01, b'a', 0x12, 0x01, b'b']; // key "a", value "b"
    let mut config_map = vec![0x0a, metadata.len() as u8];
    config_map.extend_from_slice(&metadata);
    config_map.extend_from_slice(&[0x12, entry.len() as u8]);
    config_map.extend_from_slice(&entry);
    config_map.extend_from_slice(&[0x20, 0x01]); // immutable: true
    let type_meta = [0x0a, 0x02, b'v', b'1', 0x12, 0x09];
    let mut bytes = b"k8s\0".to_vec();
    bytes.extend_from_slice(&[0x0a, (type_meta.len() + 9) as u8]);
    bytes.extend_from_slice(&type_meta);
    bytes.extend_from_slice(b"ConfigMap");
    bytes.extend_from_slice(&[0x12, config_map.len() as u8]);
    bytes.extend_from_slice(&config_map);
    bytes.extend_from_slice(&[0x1a, 0x00, 0x22, 0x00]);
    let obj = decode(&bytes).unwrap();
    assert_eq!(
        obj,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"},
               "immutable": true, "data": {"a": "b"}})
    );
    // And we write exactly those bytes for that object.
    assert_eq!(encode(&obj).unwrap(), bytes);
}

type PbPod = k8s_pb::api::core::v1::Pod;

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Vec<u8> {
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown {
        type_meta: Some(k8s_pb::apimachinery::pkg::runtime::TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(raw),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// A pod as a Go client writes it: every non-pointer field present even when empty.
fn go_client_pod() -> PbPod {
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    PbPod {
        metadata: Some(meta::ObjectMeta {
            name: Some("web".into()),
            namespace: Some(String::new()),
            generate_name: Some(String::new()),
            generation: Some(0),
            creation_timestamp: Some(meta::Time::default()).map(|_| meta::Time {
                seconds: Some(1714979289),
                nanos: Some(0),
            }),
            labels: [("app".to_string(), "web".to_string())].into(),
            ..Default::default()
        }),
        spec: Some(core::PodSpec {
            containers: vec![core::Container {
                name: Some("c".into()),
                image: Some("busybox".into()),
                image_pull_policy: Some(String::new()),
                tty: Some(false),
                ports: vec![core::ContainerPort {
                    container_port: Some(80),
                    host_port: Some(0),
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }],
                resources: Some(core::ResourceRequirements {
                    limits: [(
                        "cpu".to_string(),
                        k8s_pb::apimachinery::pkg::api::resource::Quantity {
                            string: Some("500m".into()),
                        },
                    )]
                    .into(),
                    ..Default::default()
                }),
                ..Default::default()
            }],
            termination_grace_period_seconds: Some(0),
            automount_service_account_token: Some(false),
            restart_policy: Some(String::new()),
            host_network: Some(false),
            ..Default::default()
        }),
        status: Some(core::PodStatus::default()),
    }
}

#[test]
fn a_pod_written_by_prost_decodes_as_a_json_client_would_send_it() {
    let bytes = envelope("v1", "Pod", go_client_pod().encode_to_vec());
    let obj = decode(&bytes).unwrap();
    let spec = &obj["spec"];
    assert_eq!(obj["metadata"]["name"], "web");
    assert_eq!(obj["metadata"]["creationTimestamp"], "2024-05-06T07:08:09Z");
    assert_eq!(obj["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(spec["containers"][0]["image"], "busybox");
    assert_eq!(
        spec["containers"][0]["ports"][0],
        json!({"containerPort": 80, "protocol": "TCP"})
    );
    assert_eq!(
        spec["containers"][0]["resources"],
        json!({"limits": {"cpu": "500m"}})
    );
    assert_eq!(obj["status"], json!({}));
    if SCHEMA
        .message(SCHEMA.by_name("api.core.v1.PodSpec").unwrap())
        .field_by_json("terminationGracePeriodSeconds")
        .unwrap()
        .pointer
    {
        // Pointers keep their zero values; plain fields with zero values are left out, as upstream's JSON.
        assert_eq!(spec["terminationGracePeriodSeconds"], 0);
        assert_eq!(spec["automountServiceAccountToken"], false);
        assert!(spec.get("restartPolicy").is_none());
        assert!(spec.get("hostNetwork").is_none());
        assert!(obj["metadata"].get("namespace").is_none());
        assert!(spec["containers"][0].get("tty").is_none());
    }
}

#[test]
fn our_bytes_decode_with_prost() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "resourceVersion": "42",
                     "creationTimestamp": "2024-05-06T07:08:09Z",
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs",
                                          "uid": "u-1", "controller": true}]},
        "spec": {"containers": [{"name": "c", "image": "busybox",
                                 "ports": [{"containerPort": 8080, "name": "http"}],
                                 "livenessProbe": {"httpGet": {"port": "http", "path": "/"}},
                                 "readinessProbe": {"tcpSocket": {"port": 8080}}}],
                 "volumes": [{"name": "cfg", "configMap": {"name": "settings", "optional": true}}],
                 "terminationGracePeriodSeconds": 0},
        "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]}
    });
    let bytes = encode(&pod).unwrap();
    let unknown = k8s_pb::apimachinery::pkg::runtime::Unknown::decode(&bytes[4..]).unwrap();
    assert_eq!(
        unknown.type_meta.as_ref().unwrap().kind.as_deref(),
        Some("Pod")
    );
    let decoded = PbPod::decode(unknown.raw.as_deref().unwrap()).unwrap();
    let meta = decoded.metadata.unwrap();
    assert_eq!(meta.resource_version.as_deref(), Some("42"));
    assert_eq!(meta.creation_timestamp.unwrap().seconds, Some(1714979289));
    assert_eq!(meta.owner_references[0].controller, Some(true));
    let spec = decoded.spec.unwrap();
    assert_eq!(spec.termination_grace_period_seconds, Some(0));
    let container = &spec.containers[0];
    let liveness = container
        .liveness_probe
        .as_ref()
        .unwrap()
        .handler
        .as_ref()
        .unwrap();
    let port = liveness.http_get.as_ref().unwrap().port.as_ref().unwrap();
    assert_eq!(
        (port.r#type, port.str_val.as_deref()),
        (Some(1), Some("http"))
    );
    let readiness = container
        .readiness_probe
        .as_ref()
        .unwrap()
        .handler
        .as_ref()
        .unwrap();
    let port = readiness
        .tcp_socket
        .as_ref()
        .unwrap()
        .port
        .as_ref()
        .unwrap();
    assert_eq!((port.r#type, port.int_val), (Some(0), Some(8080)));
    let config_map = spec.volumes[0]
        .volume_source
        .as_ref()
        .unwrap()
        .config_map
        .as_ref()
        .unwrap();
    assert_eq!(
        config_map
            .local_object_reference
            .as_ref()
            .unwrap()
            .name
            .as_deref(),
        Some("settings")
    );
    assert_eq!(
        decoded.status.unwrap().pod_ips[0].ip.as_deref(),
        Some("10.0.0.1")
    );
    // And back: the same JSON.
    assert_eq!(decode(&bytes).unwrap(), pod);
}

#[test]
fn watch_event_frames_are_length_prefixed_watch_events() {
    let object =
        encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}))
            .unwrap();
    let frame = watch_event_frame("ADDED", &object);
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let event = k8s_pb::apimachinery::pkg::apis::meta::v1::WatchEvent::decode(&frame[4..]).unwrap();
    assert_eq!(event.r#type.as_deref(), Some("ADDED"));
    assert_eq!(event.object.unwrap().raw.unwrap(), object);
    let (kind, obj) = decode_watch_event(&frame[4..]).unwrap();
    assert_eq!(kind, "ADDED");
    assert_eq!(obj["metadata"]["name"], "a");
}

#[test]
fn meta_kinds_are_served_in_every_group_version() {
    let status = json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
        "message": "pods \"x\" not found", "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"}, "code": 404});
    assert_eq!(decode(&encode(&status).unwrap()).unwrap(), status);
    let options = json!({"apiVersion": "apps/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
        "propagationPolicy": "Foreground"});
    let back = decode(&encode(&options).unwrap()).unwrap();
    assert_eq!(back["propagationPolicy"], "Foreground");
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    assert!(matches!(
        decode(b"{\"kind\":1}"),
        Err(ProtobufError::NoMagic)
    ));
    let good = encode(
        &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}}),
    )
    .unwrap();
    for cut in 4..good.len() {
        let _ = decode(&good[..cut]);
    }
    let mut flipped = good.clone();
    for i in 4..flipped.len() {
        flipped[i] ^= 0xff;
        let _ = decode(&flipped);
        flipped[i] ^= 0xff;
    }
    let unknown = encode(&json!({"apiVersion": "example.com/v1", "kind": "Widget"}));
    assert!(matches!(unknown, Err(ProtobufError::UnknownKind { .. })));
    let wrong_type = encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": 1}}));
    assert!(matches!(wrong_type, Err(ProtobufError::Invalid(_))));
    // Deep nesting of a recursive message is refused, not followed down the stack.
    let mut deep = Vec::new();
    for _ in 0..200 {
        let mut outer = vec![0x0a];
        wire::put_varint(&mut outer, deep.len() as u64);
        outer.extend(deep);
        deep = outer;
    }
    let crd = SCHEMA
        .by_name("apiextensions_apiserver.pkg.apis.apiextensions.v1.JsonSchemaPropsOrArray")
        .unwrap();
    let _ = decode::Decoder { schema: &SCHEMA }.message(crd, &deep, 0);
}
