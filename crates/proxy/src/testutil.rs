//! Fixtures for the rule generators' tests: Services and EndpointSlices through the real trackers.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::endpointschangetracker::{
    apply_endpoints_changes, EndpointsChangeTracker, EndpointsMap,
};
use crate::nftables::rules::Config;
use crate::servicechangetracker::{
    apply_service_changes, NamespacedName, ServiceChangeTracker, ServicePortMap,
};

pub(crate) use crate::endpointschangetracker::tests::slice;
pub(crate) use crate::servicechangetracker::tests::svc;

pub(crate) struct Fixture {
    pub services: ServicePortMap,
    pub endpoints: EndpointsMap,
    st: ServiceChangeTracker,
    et: EndpointsChangeTracker,
    old_svcs: HashMap<String, Service>,
}

impl Fixture {
    pub fn new() -> Self {
        Self {
            services: ServicePortMap::new(),
            endpoints: EndpointsMap::new(),
            st: ServiceChangeTracker::default(),
            et: EndpointsChangeTracker::new("node-a"),
            old_svcs: HashMap::new(),
        }
    }

    pub fn service(&mut self, s: Service) -> &mut Self {
        let key = format!("{:?}/{:?}", s.metadata.namespace, s.metadata.name);
        let old = self.old_svcs.insert(key, s.clone());
        self.st.update(old.as_ref(), Some(&s));
        self
    }

    /// This fixture's node is `node` (which endpoints are local).
    pub fn et_node(&mut self, node: &str) -> &mut Self {
        self.et = EndpointsChangeTracker::new(node);
        self
    }

    pub fn delete_service(&mut self, s: &Service) -> &mut Self {
        self.st.update(Some(s), None);
        self
    }

    pub fn slice(&mut self, s: EndpointSlice) -> &mut Self {
        self.et.endpoint_slice_update(&s, false);
        self
    }

    /// Applies pending changes; returns the Services they touched.
    pub fn apply(&mut self) -> HashSet<NamespacedName> {
        let mut u = apply_service_changes(&mut self.services, &mut self.st).updated_services;
        u.extend(apply_endpoints_changes(&mut self.endpoints, &mut self.et).updated_services);
        u
    }
}

pub(crate) fn config() -> Config {
    Config {
        masquerade_mark: 0x4000,
        masquerade_all: false,
        cluster_cidr: Some("10.244.0.0/16".into()),
        nodeport_ips: None,
        node_name: "node-a".into(),
        node_labels: HashMap::new(),
    }
}

/// A Service of type `ty` with a node port on its one port.
pub(crate) fn with_type(mut s: Service, ty: &str, node_port: i32) -> Service {
    let spec = s.spec.get_or_insert_with(Default::default);
    spec.type_ = Some(ty.into());
    if let Some(p) = spec.ports.as_mut().and_then(|p| p.first_mut()) {
        p.node_port = Some(node_port);
    }
    s
}

/// Three ready endpoints of ns/web on port 8080 (named "http"), node-a holds the first.
pub(crate) fn three(ns: &str, name: &str) -> EndpointSlice {
    slice(
        ns,
        name,
        &format!("{name}-1"),
        ("http", 8080, "TCP"),
        &[
            ("10.244.1.1", "node-a", true, true, false),
            ("10.244.2.1", "node-b", true, true, false),
            ("10.244.3.1", "node-c", true, true, false),
        ],
    )
}
