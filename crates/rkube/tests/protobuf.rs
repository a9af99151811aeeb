//! Protobuf end to end: pods, nodes, deployments and leases created, read, listed, watched, updated,
//! patched and deleted entirely in `application/vnd.kubernetes.protobuf` against `rkube server`, with
//! messages built and read by prost code generated from upstream's `generated.proto` (the k8s-pb crate),
//! an implementation independent of the server's codec. Results are checked against the JSON API.

mod support;

use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::BodyExt;
use k8s_pb::api::apps::v1 as apps;
use k8s_pb::api::coordination::v1 as coordination;
use k8s_pb::api::core::v1 as core;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{json, Value};
use support::{Backend, Cluster};

const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

fn envelope(api_version: &str, kind: &str, message: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
        }),
        raw: Some(message.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(unknown.encode_to_vec());
    out
}

/// The kind and message bytes of an enveloped object.
fn open_envelope(bytes: &[u8]) -> (String, Vec<u8>) {
    assert_eq!(
        &bytes[..4],
        b"k8s\0",
        "not a protobuf object: {:?}",
        String::from_utf8_lossy(bytes)
    );
    let unknown = Unknown::decode(&bytes[4..]).expect("runtime.Unknown");
    (
        unknown.type_meta.and_then(|t| t.kind).unwrap_or_default(),
        unknown.raw.unwrap_or_default(),
    )
}

struct Api {
    client: kube::Client,
}

impl Api {
    async fn call(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> (StatusCode, String, Bytes) {
        let req = Request::builder()
            .method(method)
            .uri(path)
            .header(
                http::header::ACCEPT,
                format!("{PROTOBUF}, application/json"),
            )
            .header(http::header::CONTENT_TYPE, content_type)
            .body(kube::client::Body::from(body))
            .unwrap();
        let resp = self.client.send(req).await.expect("request");
        let status = resp.status();
        let content_type = resp
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        (status, content_type, body)
    }

    /// A protobuf call that must succeed with `want`; returns the message of kind `kind`.
    async fn pb<M: Message + Default>(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
        want: StatusCode,
        kind: &str,
    ) -> M {
        let (status, content_type, bytes) = self.call(method.clone(), path, PROTOBUF, body).await;
        assert_eq!(status, want, "{method} {path}: {}", status_text(&bytes));
        assert_eq!(content_type, PROTOBUF, "{method} {path}");
        let (got_kind, raw) = open_envelope(&bytes);
        assert_eq!(got_kind, kind, "{method} {path}");
        M::decode(raw.as_slice()).expect("message")
    }

    async fn json(&self, path: &str) -> Value {
        let req = Request::get(path).body(Vec::new()).unwrap();
        serde_json::from_str(&self.client.request_text(req).await.expect("JSON GET")).unwrap()
    }
}

fn status_text(bytes: &[u8]) -> String {
    if bytes.starts_with(b"k8s\0") {
        let (_, raw) = open_envelope(bytes);
        format!(
            "{:?}",
            meta::Status::decode(raw.as_slice()).map(|s| s.message)
        )
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    }
}

fn object_meta(name: &str) -> Option<meta::ObjectMeta> {
    Some(meta::ObjectMeta {
        name: Some(name.into()),
        // A Go client writes its zero values: empty strings and a zero generation.
        namespace: Some(String::new()),
        generate_name: Some(String::new()),
        resource_version: Some(String::new()),
        generation: Some(0),
        labels: [("app".to_string(), "pb".to_string())].into(),
        ..Default::default()
    })
}

fn pod_spec() -> core::PodSpec {
    core::PodSpec {
        containers: vec![core::Container {
            name: Some("main".into()),
            image: Some("busybox".into()),
            image_pull_policy: Some(String::new()),
            ports: vec![core::ContainerPort {
                container_port: Some(8080),
                host_port: Some(0),
                name: Some("http".into()),
                ..Default::default()
            }],
            ..Default::default()
        }],
        termination_grace_period_seconds: Some(0),
        automount_service_account_token: Some(false),
        restart_policy: Some(String::new()),
        host_network: Some(false),
        ..Default::default()
    }
}

/// Reads protobuf watch frames (4-byte big-endian length, then a `WatchEvent`) until `n` events came.
async fn read_events(body: &mut kube::client::Body, n: usize) -> Vec<(String, String, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut events = Vec::new();
    while events.len() < n {
        while buf.len() >= 4 {
            let len = u32::from_be_bytes(buf[..4].try_into().unwrap()) as usize;
            if buf.len() < 4 + len {
                break;
            }
            let event = meta::WatchEvent::decode(&buf[4..4 + len]).expect("WatchEvent");
            buf.drain(..4 + len);
            let raw = event.object.and_then(|o| o.raw).unwrap_or_default();
            let (kind, message) = open_envelope(&raw);
            events.push((event.r#type.unwrap_or_default(), kind, message));
        }
        if events.len() >= n {
            break;
        }
        let frame = tokio::time::timeout(Duration::from_secs(20), body.frame())
            .await
            .expect("watch event within 20 s")
            .expect("watch stream open")
            .expect("frame");
        if let Ok(data) = frame.into_data() {
            buf.extend_from_slice(&data);
        }
    }
    events
}

fn a_resource_lifecycle_in_protobuf(backend: Backend) {
    // The API server alone (no scheduler or controllers writing to the objects under test).
    let c = Cluster::start(backend);
    support::runtime().block_on(async {
        let api = Api {
            client: c.client().await,
        };

        // Pods: create, get, list, watch, update, patch, delete.
        let pods = "/api/v1/namespaces/default/pods";
        let pod = core::Pod {
            metadata: object_meta("pb-pod"),
            spec: Some(pod_spec()),
            status: Some(core::PodStatus::default()),
        };
        let created: core::Pod = api
            .pb(
                Method::POST,
                pods,
                envelope("v1", "Pod", &pod),
                StatusCode::CREATED,
                "Pod",
            )
            .await;
        let meta = created.metadata.clone().unwrap();
        assert_eq!(meta.namespace.as_deref(), Some("default"));
        assert!(!meta.uid.unwrap_or_default().is_empty());
        assert!(meta.creation_timestamp.and_then(|t| t.seconds).unwrap_or(0) > 1_600_000_000);
        let spec = created.spec.clone().unwrap();
        assert_eq!(spec.termination_grace_period_seconds, Some(0));
        assert_eq!(spec.automount_service_account_token, Some(false));
        // Defaults filled as for a JSON client: the Go client's empty strings counted as unset.
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("Always")
        );

        // The JSON API sees the same object, with no trace of the zero values.
        let json_pod = api.json(&format!("{pods}/pb-pod")).await;
        assert_eq!(json_pod["spec"]["terminationGracePeriodSeconds"], 0);
        assert_eq!(json_pod["spec"]["automountServiceAccountToken"], false);
        assert!(json_pod["spec"].get("hostNetwork").is_none(), "{json_pod}");
        assert!(json_pod["spec"]["containers"][0]["ports"][0]
            .get("hostPort")
            .is_none());
        assert_eq!(
            json_pod["metadata"]["uid"],
            json!(created.metadata.as_ref().unwrap().uid)
        );

        let got: core::Pod = api
            .pb(
                Method::GET,
                &format!("{pods}/pb-pod"),
                Vec::new(),
                StatusCode::OK,
                "Pod",
            )
            .await;
        assert_eq!(got, created);
        let (_, _, got_bytes) = api
            .call(Method::GET, &format!("{pods}/pb-pod"), PROTOBUF, Vec::new())
            .await;
        assert_eq!(
            apimachinery::serializer::protobuf::decode(&got_bytes).unwrap(),
            json_pod
        );

        let list: core::PodList = api
            .pb(Method::GET, pods, Vec::new(), StatusCode::OK, "PodList")
            .await;
        assert_eq!(list.items.len(), 1);
        assert_eq!(list.items[0], created);
        let list_rv = list.metadata.unwrap().resource_version.unwrap();

        let watch_req = Request::builder()
            .uri(format!("{pods}?watch=true&resourceVersion={list_rv}"))
            .header(
                http::header::ACCEPT,
                format!("{PROTOBUF}, application/json"),
            )
            .body(kube::client::Body::empty())
            .unwrap();
        let watch_resp = api.client.send(watch_req).await.expect("watch");
        assert_eq!(watch_resp.status(), StatusCode::OK);
        assert_eq!(
            watch_resp.headers()[http::header::CONTENT_TYPE],
            "application/vnd.kubernetes.protobuf;stream=watch"
        );
        let mut watch_body = watch_resp.into_body();

        let mut update = created.clone();
        update
            .metadata
            .as_mut()
            .unwrap()
            .labels
            .insert("step".into(), "updated".into());
        let updated: core::Pod = api
            .pb(
                Method::PUT,
                &format!("{pods}/pb-pod"),
                envelope("v1", "Pod", &update),
                StatusCode::OK,
                "Pod",
            )
            .await;
        assert_eq!(updated.metadata.as_ref().unwrap().labels["step"], "updated");

        let (status, content_type, bytes) = api
            .call(
                Method::PATCH,
                &format!("{pods}/pb-pod"),
                "application/merge-patch+json",
                br#"{"metadata":{"labels":{"step":"patched"}}}"#.to_vec(),
            )
            .await;
        assert_eq!((status, content_type.as_str()), (StatusCode::OK, PROTOBUF));
        let patched = core::Pod::decode(open_envelope(&bytes).1.as_slice()).unwrap();
        assert_eq!(patched.metadata.as_ref().unwrap().labels["step"], "patched");

        let options = meta::DeleteOptions {
            grace_period_seconds: Some(0),
            propagation_policy: Some("Background".into()),
            ..Default::default()
        };
        let deleted: core::Pod = api
            .pb(
                Method::DELETE,
                &format!("{pods}/pb-pod"),
                envelope("v1", "DeleteOptions", &options),
                StatusCode::OK,
                "Pod",
            )
            .await;
        assert_eq!(deleted.metadata.unwrap().name.as_deref(), Some("pb-pod"));

        let events = read_events(&mut watch_body, 3).await;
        let types: Vec<&str> = events.iter().map(|(t, _, _)| t.as_str()).collect();
        assert_eq!(types, ["MODIFIED", "MODIFIED", "DELETED"]);
        for (_, kind, message) in &events {
            assert_eq!(kind, "Pod");
            core::Pod::decode(message.as_slice()).expect("pod in the event");
        }

        // Errors come back as a protobuf Status.
        let (status, content_type, bytes) = api
            .call(Method::GET, &format!("{pods}/pb-pod"), PROTOBUF, Vec::new())
            .await;
        assert_eq!(
            (status, content_type.as_str()),
            (StatusCode::NOT_FOUND, PROTOBUF)
        );
        let (kind, raw) = open_envelope(&bytes);
        assert_eq!(kind, "Status");
        let not_found = meta::Status::decode(raw.as_slice()).unwrap();
        assert_eq!(
            (not_found.code, not_found.reason.as_deref()),
            (Some(404), Some("NotFound"))
        );

        // Nodes (cluster-scoped).
        let node = core::Node {
            metadata: object_meta("pb-node"),
            spec: Some(core::NodeSpec {
                unschedulable: Some(false),
                pod_cidr: Some("10.244.1.0/24".into()),
                ..Default::default()
            }),
            status: Some(core::NodeStatus {
                capacity: [(
                    "cpu".to_string(),
                    k8s_pb::apimachinery::pkg::api::resource::Quantity {
                        string: Some("4".into()),
                    },
                )]
                .into(),
                ..Default::default()
            }),
        };
        let node: core::Node = api
            .pb(
                Method::POST,
                "/api/v1/nodes",
                envelope("v1", "Node", &node),
                StatusCode::CREATED,
                "Node",
            )
            .await;
        assert_eq!(
            node.spec.as_ref().unwrap().pod_cidr.as_deref(),
            Some("10.244.1.0/24")
        );
        let nodes: core::NodeList = api
            .pb(
                Method::GET,
                "/api/v1/nodes",
                Vec::new(),
                StatusCode::OK,
                "NodeList",
            )
            .await;
        assert!(nodes
            .items
            .iter()
            .any(|n| n.metadata.as_ref().unwrap().name.as_deref() == Some("pb-node")));
        let json_node = api.json("/api/v1/nodes/pb-node").await;
        assert_eq!(json_node["status"]["capacity"]["cpu"], "4");
        api.pb::<core::Node>(
            Method::DELETE,
            "/api/v1/nodes/pb-node",
            Vec::new(),
            StatusCode::OK,
            "Node",
        )
        .await;

        // Deployments: replicas 0 is kept (a pointer), and defaults are filled.
        let deployments = "/apis/apps/v1/namespaces/default/deployments";
        let labels = meta::LabelSelector {
            match_labels: [("app".to_string(), "pb".to_string())].into(),
            ..Default::default()
        };
        let deployment = apps::Deployment {
            metadata: object_meta("pb-deploy"),
            spec: Some(apps::DeploymentSpec {
                replicas: Some(0),
                selector: Some(labels),
                template: Some(core::PodTemplateSpec {
                    metadata: object_meta(""),
                    spec: Some(pod_spec()),
                }),
                min_ready_seconds: Some(0),
                ..Default::default()
            }),
            status: Some(apps::DeploymentStatus::default()),
        };
        let deployment: apps::Deployment = api
            .pb(
                Method::POST,
                deployments,
                envelope("apps/v1", "Deployment", &deployment),
                StatusCode::CREATED,
                "Deployment",
            )
            .await;
        let spec = deployment.spec.clone().unwrap();
        assert_eq!(spec.replicas, Some(0));
        assert_eq!(spec.revision_history_limit, Some(10));
        assert_eq!(
            spec.strategy.unwrap().r#type.as_deref(),
            Some("RollingUpdate")
        );
        let json_deployment = api.json(&format!("{deployments}/pb-deploy")).await;
        assert_eq!(json_deployment["spec"]["replicas"], 0);
        assert_eq!(json_deployment["metadata"]["generation"], 1);
        let mut scaled = deployment.clone();
        scaled.spec.as_mut().unwrap().replicas = Some(3);
        let scaled: apps::Deployment = api
            .pb(
                Method::PUT,
                &format!("{deployments}/pb-deploy"),
                envelope("apps/v1", "Deployment", &scaled),
                StatusCode::OK,
                "Deployment",
            )
            .await;
        assert_eq!(scaled.spec.unwrap().replicas, Some(3));
        assert_eq!(scaled.metadata.unwrap().generation, Some(2));
        let list: apps::DeploymentList = api
            .pb(
                Method::GET,
                deployments,
                Vec::new(),
                StatusCode::OK,
                "DeploymentList",
            )
            .await;
        assert_eq!(list.items.len(), 1);
        api.pb::<apps::Deployment>(
            Method::DELETE,
            &format!("{deployments}/pb-deploy"),
            Vec::new(),
            StatusCode::OK,
            "Deployment",
        )
        .await;

        // Leases, as a Go leader elector writes them.
        let leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases";
        let lease = coordination::Lease {
            metadata: object_meta("pb-lease"),
            spec: Some(coordination::LeaseSpec {
                holder_identity: Some("candidate-a".into()),
                lease_duration_seconds: Some(15),
                acquire_time: Some(meta::MicroTime {
                    seconds: Some(1_714_979_289),
                    nanos: Some(123_456_000),
                }),
                renew_time: Some(meta::MicroTime {
                    seconds: Some(1_714_979_289),
                    nanos: Some(123_456_000),
                }),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        let lease: coordination::Lease = api
            .pb(
                Method::POST,
                leases,
                envelope("coordination.k8s.io/v1", "Lease", &lease),
                StatusCode::CREATED,
                "Lease",
            )
            .await;
        assert_eq!(lease.spec.as_ref().unwrap().lease_transitions, Some(0));
        let json_lease = api.json(&format!("{leases}/pb-lease")).await;
        assert_eq!(
            json_lease["spec"]["renewTime"],
            "2024-05-06T07:08:09.123456Z"
        );
        assert_eq!(json_lease["spec"]["leaseTransitions"], 0);
        let mut renewed = lease.clone();
        renewed.spec.as_mut().unwrap().renew_time = Some(meta::MicroTime {
            seconds: Some(1_714_979_299),
            nanos: Some(0),
        });
        let renewed: coordination::Lease = api
            .pb(
                Method::PUT,
                &format!("{leases}/pb-lease"),
                envelope("coordination.k8s.io/v1", "Lease", &renewed),
                StatusCode::OK,
                "Lease",
            )
            .await;
        assert_eq!(
            renewed.spec.unwrap().renew_time.unwrap().seconds,
            Some(1_714_979_299)
        );
        api.pb::<coordination::Lease>(
            Method::DELETE,
            &format!("{leases}/pb-lease"),
            Vec::new(),
            StatusCode::OK,
            "Lease",
        )
        .await;

        // Every watch event was encoded once per format, counted.
        let metrics = api
            .client
            .request_text(Request::get("/metrics").body(Vec::new()).unwrap())
            .await
            .unwrap();
        assert!(
            metrics.lines().any(|l| l
                .starts_with("rkube_watch_event_encodings_total{format=\"protobuf\"}")
                && !l.ends_with(" 0")),
            "{metrics}"
        );
    });
}

on_both_backends!(a_resource_lifecycle_in_protobuf);

const GADGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Gadget, plural: gadgets, singular: gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// Custom resources have no protobuf form: JSON when the client also accepts it, else 406; a protobuf
/// body is 415. CBOR works for them and for built-in kinds.
#[test]
fn custom_resources_and_cbor() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl_in(&["apply", "-f", "-"], Some(GADGET_CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=established",
        "crd/gadgets.example.com",
        "--timeout=20s",
    ]);
    c.kubectl_in(
        &["create", "-f", "-"],
        Some("apiVersion: example.com/v1\nkind: Gadget\nmetadata: {name: g1, namespace: default}\nspec: {size: 1}\n"),
    );
    support::runtime().block_on(async {
        let client = c.client().await;
        let call = |method: Method, path: &str, accept: &str, content_type: &str, body: Vec<u8>| {
            let req = Request::builder()
                .method(method)
                .uri(path)
                .header(http::header::ACCEPT, accept)
                .header(http::header::CONTENT_TYPE, content_type)
                .body(kube::client::Body::from(body))
                .unwrap();
            let client = client.clone();
            async move {
                let resp = client.send(req).await.expect("request");
                let status = resp.status();
                let content_type = resp.headers().get(http::header::CONTENT_TYPE).map(|v| v.to_str().unwrap().to_string());
                (status, content_type.unwrap_or_default(), resp.into_body().collect().await.unwrap().to_bytes())
            }
        };
        let gadgets = "/apis/example.com/v1/namespaces/default/gadgets";
        let (status, content_type, body) = call(Method::GET, gadgets, &format!("{PROTOBUF}, application/json"), "application/json", Vec::new()).await;
        assert_eq!((status, content_type.as_str()), (StatusCode::OK, "application/json"));
        let list: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(list["items"][0]["metadata"]["name"], "g1");
        let (status, _, body) = call(Method::GET, gadgets, PROTOBUF, "application/json", Vec::new()).await;
        assert_eq!(status, StatusCode::NOT_ACCEPTABLE, "{}", String::from_utf8_lossy(&body));
        let gadget = apimachinery::serializer::protobuf::encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}})).unwrap();
        let (status, _, body) = call(Method::POST, gadgets, "application/json", PROTOBUF, gadget).await;
        assert_eq!(status, StatusCode::UNSUPPORTED_MEDIA_TYPE, "{}", String::from_utf8_lossy(&body));

        // CBOR both ways, for a custom resource and a built-in kind.
        let cbor = apimachinery::serializer::cbor::MEDIA_TYPE;
        let gadget = json!({"apiVersion": "example.com/v1", "kind": "Gadget", "metadata": {"name": "g2"}, "spec": {"size": 2, "tags": ["a"]}});
        let (status, content_type, body) = call(Method::POST, gadgets, cbor, cbor, apimachinery::serializer::cbor::encode(&gadget)).await;
        assert_eq!((status, content_type.as_str()), (StatusCode::CREATED, cbor));
        assert!(apimachinery::serializer::cbor::is_cbor(&body));
        let created = apimachinery::serializer::cbor::decode(&body).unwrap();
        assert_eq!(created["spec"], gadget["spec"]);
        let config_map = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cbor-cm"}, "data": {"k": "v"}});
        let (status, _, _) = call(Method::POST, "/api/v1/namespaces/default/configmaps", cbor, cbor, apimachinery::serializer::cbor::encode(&config_map)).await;
        assert_eq!(status, StatusCode::CREATED);
        let (status, content_type, body) = call(Method::GET, "/api/v1/namespaces/default/configmaps/cbor-cm", cbor, "application/json", Vec::new()).await;
        assert_eq!((status, content_type.as_str()), (StatusCode::OK, cbor));
        assert_eq!(apimachinery::serializer::cbor::decode(&body).unwrap()["data"], json!({"k": "v"}));
    });
}
