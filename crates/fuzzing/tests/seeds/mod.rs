//! The generated seed corpus: a few valid inputs per target, most taken from the unit tests of the
//! code each target reaches.

use bytes::{Bytes, BytesMut};
use httpstream::spdy::frame::{Frame, FrameEncoder, FLAG_FIN};
use serde_json::{json, Value};

/// Selector bytes: the resource (`apiserver::rest::fuzz::RESOURCES`) and `fieldValidation`.
const POD: u8 = 0;
const CONFIGMAP: u8 = 1;
const SERVICE: u8 = 2;
const DEPLOYMENT: u8 = 4;
const STRICT: u8 = 8;
const WARN: u8 = 16;

fn with(sel: u8, body: &[u8]) -> Vec<u8> {
    let mut v = vec![sel];
    v.extend_from_slice(body);
    v
}

fn parts(sel: Option<u8>, items: &[&[u8]]) -> Vec<u8> {
    let mut v: Vec<u8> = sel.into_iter().collect();
    v.extend_from_slice(&items.join(&0u8));
    v
}

fn pod() -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1",
            "ports": [{"containerPort": 80}],
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
            "terminationGracePeriodSeconds": 30}})
}

fn configmap() -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "default"}, "data": {"a": "1"}})
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "default"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1"}]}}}})
}

fn service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]}})
}

fn spdy(frames: &[Frame]) -> Vec<u8> {
    let mut enc = FrameEncoder::new();
    let mut out = BytesMut::new();
    for f in frames {
        enc.encode(f, &mut out).unwrap();
    }
    out.to_vec()
}

fn h(pairs: &[(&str, &str)]) -> httpstream::spdy::Headers {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), vec![v.to_string()]))
        .collect()
}

/// A masked client WebSocket frame.
fn ws_frame(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [0x37, 0xfa, 0x21, 0x3d];
    let mut v = vec![(u8::from(fin) << 7) | opcode];
    match payload.len() {
        n if n < 126 => v.push(0x80 | n as u8),
        n if n < 65536 => {
            v.push(0x80 | 126);
            v.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            v.push(0x80 | 127);
            v.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    v.extend_from_slice(&mask);
    v.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    v
}

fn session() -> Vec<Frame> {
    vec![
        Frame::SynStream {
            stream_id: 1,
            associated_to: 0,
            priority: 0,
            flags: 0,
            headers: h(&[("streamtype", "error"), ("requestid", "0")]),
        },
        Frame::SynStream {
            stream_id: 3,
            associated_to: 0,
            priority: 0,
            flags: 0,
            headers: h(&[("streamtype", "stdin")]),
        },
        Frame::Data {
            stream_id: 3,
            flags: 0,
            data: Bytes::from_static(b"echo hi\n"),
        },
        Frame::Data {
            stream_id: 3,
            flags: FLAG_FIN,
            data: Bytes::new(),
        },
        Frame::Ping { id: 1 },
        Frame::Settings {
            flags: 0,
            entries: vec![(0, 7, 65536)],
        },
        Frame::WindowUpdate {
            stream_id: 3,
            delta: 1024,
        },
        Frame::RstStream {
            stream_id: 1,
            status: 5,
        },
        Frame::GoAway {
            last_good_stream_id: 3,
            status: 0,
        },
    ]
}

pub fn all() -> Vec<(&'static str, Vec<Vec<u8>>)> {
    let j = |v: &Value| serde_json::to_vec(v).unwrap();
    let y = |v: &Value| serde_yaml_ng_free(v);
    let pb = |v: &Value| apimachinery::serializer::protobuf::encode(v).unwrap();
    let cb = |v: &Value| apimachinery::serializer::cbor::encode(v);
    let claims = json!({"iss": "https://kubernetes.default.svc", "aud": ["https://kubernetes.default.svc"],
        "exp": 1790000000, "iat": 1789996400, "nbf": 1789996400,
        "sub": "system:serviceaccount:default:default",
        "kubernetes.io": {"namespace": "default", "serviceaccount": {"name": "default", "uid": "u1"}}});
    let token = fuzzing::signing_key().sign(&claims).unwrap();
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": "bootstrap-token-abcdef", "namespace": "kube-system"},
        "data": {"token-id": "YWJjZGVm", "token-secret": "MDEyMzQ1Njc4OWFiY2RlZg==",
            "usage-bootstrap-authentication": "dHJ1ZQ==", "expiration": "MjAzMC0wMS0wMVQwMDowMDowMFo=",
            "auth-extra-groups": "c3lzdGVtOmJvb3RzdHJhcHBlcnM6a3ViZWFkbTpkZWZhdWx0LW5vZGUtdG9rZW4="}});
    vec![
        (
            "decode_json",
            vec![
                with(POD | STRICT, &j(&pod())),
                with(DEPLOYMENT | WARN, &j(&deployment())),
                with(
                    CONFIGMAP | STRICT,
                    br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","name":"b","bogus":1},"data":{"k":"v"},"data":{"x":"y"}}"#,
                ),
            ],
        ),
        (
            "decode_yaml",
            vec![
                with(CONFIGMAP | STRICT, b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\ndata:\n  k: v\n"),
                with(POD | WARN, &y(&pod())),
                with(DEPLOYMENT, b"apiVersion: apps/v1\nkind: Deployment\nmetadata: &m\n  name: d\nspec:\n  replicas: 2\n  template:\n    metadata: *m\n"),
            ],
        ),
        (
            "decode_protobuf",
            vec![
                with(POD | STRICT, &pb(&pod())),
                with(CONFIGMAP, &pb(&configmap())),
                with(DEPLOYMENT | WARN, &pb(&deployment())),
                with(SERVICE, &pb(&service())),
            ],
        ),
        (
            "decode_cbor",
            vec![
                with(POD | STRICT, &cb(&pod())),
                with(CONFIGMAP, &cb(&configmap())),
                with(DEPLOYMENT | WARN, &cb(&deployment())),
            ],
        ),
        (
            "patch_json",
            vec![
                with(POD | STRICT, br#"[{"op":"replace","path":"/spec/containers/0/image","value":"nginx:2"},{"op":"add","path":"/metadata/labels/x","value":"y"}]"#),
                with(DEPLOYMENT, br#"[{"op":"test","path":"/spec/replicas","value":2},{"op":"copy","from":"/spec/template","path":"/spec/t2"},{"op":"move","from":"/spec/t2","path":"/metadata/annotations/t"},{"op":"remove","path":"/spec/replicas"}]"#),
                parts(Some(CONFIGMAP | WARN), &[br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"},"data":{"a":"1"}}"#, br#"[{"op":"add","path":"/data/b","value":"2"},{"op":"remove","path":"/data/a"}]"#]),
            ],
        ),
        (
            "patch_merge",
            vec![
                with(POD | STRICT, br#"{"metadata":{"labels":{"app":null,"new":"x"}},"spec":{"containers":[{"name":"web","image":"nginx:2"}]}}"#),
                with(CONFIGMAP, br#"{"data":{"a":null,"b":"3"},"bogus":true}"#),
                parts(Some(DEPLOYMENT | WARN), &[&j(&deployment()), br#"{"spec":{"replicas":5,"paused":true}}"#]),
            ],
        ),
        (
            "patch_strategic",
            vec![
                with(POD | STRICT, br#"{"spec":{"containers":[{"name":"web","image":"nginx:2"},{"name":"side","$patch":"delete"}]}}"#),
                with(DEPLOYMENT | WARN, br#"{"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"web"},{"name":"side"}],"containers":[{"name":"side","image":"busybox"}]}}}}"#),
                with(POD, br#"{"metadata":{"$deleteFromPrimitiveList/finalizers":["a"],"finalizers":["b"]},"spec":{"$retainKeys":["containers"],"volumes":[{"name":"v","$patch":"replace"}],"tolerations":{"$patch":"replace"}}}"#),
                with(SERVICE, br#"{"spec":{"ports":[{"port":80,"name":"http","protocol":"UDP"},{"port":443,"$patch":"delete"}]},"$patch":"merge"}"#),
            ],
        ),
        (
            "apply",
            vec![
                with(POD | STRICT, b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: a\n  labels:\n    app: other\nspec:\n  containers:\n  - name: web\n    image: nginx:3\n"),
                with(DEPLOYMENT | WARN | 0x20, b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\nspec:\n  replicas: 4\n"),
                with(CONFIGMAP | 0x40, b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n  k: w\n"),
            ],
        ),
        (
            "managed_fields",
            vec![
                with(CONFIGMAP, br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","managedFields":[{"manager":"m","operation":"Update","apiVersion":"v1","time":"2026-01-01T00:00:00Z","fieldsType":"FieldsV1","fieldsV1":{"f:data":{"f:a":{}},"f:metadata":{"f:labels":{".":{},"f:x":{}}}}}]},"data":{"a":"2"}}"#),
                with(POD, br#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"a","managedFields":[{"manager":"k","operation":"Apply","apiVersion":"v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{}}}}}}]},"spec":{"containers":[{"name":"web","image":"x"}]}}"#),
            ],
        ),
        (
            "label_selector",
            vec![
                parts(None, &[b"app=web,tier!=db,env in (a,b),!gone,has", br#"{"app":"web","has":""}"#, br#"{"matchLabels":{"app":"web"},"matchExpressions":[{"key":"tier","operator":"NotIn","values":["db"]},{"key":"x","operator":"DoesNotExist"}]}"#]),
                parts(None, &[b"example.com/key==v-1.2_3, x notin (a, b)", b"{}"]),
                parts(None, &[b"a,b,c in (),d", br#"{"a":"1"}"#, br#"{"matchExpressions":[{"key":"k","operator":"In","values":[]}]}"#]),
            ],
        ),
        (
            "field_selector",
            vec![
                with(0, b"metadata.name=a,spec.nodeName!=n1,status.phase==Running\0{\"metadata\":{\"name\":\"a\"},\"spec\":{\"nodeName\":\"n2\"},\"status\":{\"phase\":\"Running\"}}"),
                with(1, b"involvedObject.kind=Pod,reason=Test\\,x"),
                with(3, b"type=kubernetes.io/service-account-token"),
            ],
        ),
        (
            "quantity",
            ["100m", "1.5Gi", "1e3", "-0.001", "123456789012345678", ".5", "8Ei", "0.1n", "5Ki", "1E-3"]
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect(),
        ),
        (
            "jwt",
            vec![token.into_bytes(), j(&claims), b"eyJhbGciOiJub25lIn0.e30.".to_vec()],
        ),
        (
            "bootstrap_token",
            vec![parts(None, &[b"abcdef.0123456789abcdef", &j(&secret)]), b"abcdef.0123456789abcdef".to_vec()],
        ),
        (
            "route",
            vec![
                parts(None, &[b"GET", b"/api/v1/namespaces/default/pods", b"labelSelector=app%3Dweb&fieldSelector=spec.nodeName%3Dn1&limit=5&resourceVersion=0"]),
                parts(None, &[b"GET", b"/apis/apps/v1/deployments", b"continue=eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6NSwic3RhcnQiOiJkZWZhdWx0L2EifQ&watch=1"]),
                parts(None, &[b"PATCH", b"/api/v1/namespaces/default/pods/web/status", b"fieldManager=kubectl&force=true"]),
            ],
        ),
        (
            "spdy_frames",
            vec![with(7, &spdy(&session())), with(255, &spdy(&session()[..3]))],
        ),
        ("spdy_conn", vec![spdy(&session()), spdy(&session()[..4])]),
        (
            "websocket",
            vec![
                [
                    ws_frame(true, 2, b"\x00echo hi\n"),
                    ws_frame(true, 2, b"\x04{\"Width\":80,\"Height\":24}"),
                    ws_frame(true, 9, b"ping"),
                    ws_frame(true, 2, b"\xff\x00"),
                    ws_frame(true, 8, b"\x03\xe8bye"),
                ]
                .concat(),
                [ws_frame(false, 2, b"\x01par"), ws_frame(true, 0, b"ts"), ws_frame(true, 1, b"\x01text")].concat(),
            ],
        ),
    ]
}

/// YAML of a JSON value (block style, as kubectl writes it).
fn serde_yaml_ng_free(v: &Value) -> Vec<u8> {
    fn write(v: &Value, indent: usize, out: &mut String) {
        let pad = " ".repeat(indent);
        match v {
            Value::Object(m) => {
                for (k, val) in m {
                    match val {
                        Value::Object(_) | Value::Array(_) => {
                            out.push_str(&format!("{pad}{k}:\n"));
                            write(val, indent + 2, out);
                        }
                        _ => out.push_str(&format!("{pad}{k}: {val}\n")),
                    }
                }
            }
            Value::Array(items) => {
                for item in items {
                    out.push_str(&format!("{pad}-\n"));
                    write(item, indent + 2, out);
                }
            }
            other => out.push_str(&format!("{pad}{other}\n")),
        }
    }
    let mut out = String::new();
    write(v, 0, &mut out);
    out.into_bytes()
}
