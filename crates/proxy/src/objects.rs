//! Service and EndpointSlice objects as the API server would hold them, for feeding a proxier
//! without a cluster (integration tests, `examples/sync.rs`).

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::endpointschangetracker::LABEL_SERVICE_NAME;

/// A ClusterIP Service `ns/name` at `ip:port` (TCP port named "http").
pub fn service(ns: &str, name: &str, ip: &str, port: i32) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some(ip.into()),
            cluster_ips: Some(vec![ip.into()]),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port,
                protocol: Some("TCP".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The slice `<name>-1` of Service `ns/name`: ready endpoints at `ips` on `port` ("http"), on
/// node `node`.
pub fn slice(ns: &str, name: &str, port: i32, ips: &[String], node: &str) -> EndpointSlice {
    EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(format!("{name}-1")),
            labels: Some([(LABEL_SERVICE_NAME.to_string(), name.to_string())].into()),
            ..Default::default()
        },
        address_type: "IPv4".into(),
        ports: Some(vec![EndpointPort {
            name: Some("http".into()),
            port: Some(port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        endpoints: Some(
            ips.iter()
                .map(|ip| Endpoint {
                    addresses: vec![ip.clone()],
                    node_name: Some(node.into()),
                    conditions: Some(EndpointConditions {
                        ready: Some(true),
                        serving: Some(true),
                        terminating: Some(false),
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
    }
}
