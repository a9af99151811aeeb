//! Service IP and node port allocation (upstream `registry/core/service/ipallocator` and
//! `portallocator`): ClusterIPs from the service CIDR (default 10.96.0.0/12, the first address reserved
//! for the `kubernetes` Service) and NodePorts from 30000-32767, never handed out twice.
//!
//! Difference: upstream persists its bitmaps in storage so several API servers share them; here the
//! allocated sets are rebuilt from the Services in the watch cache, which is exact for one API server.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use apimachinery::status::ApiError;
use apimachinery::validation::field::{FieldError, FieldPath};
use rand::Rng;
use serde_json::{json, Value};

use crate::watch_cache::CacheSet;

pub struct ServiceAllocator {
    base: u32,
    size: u32,
    node_ports: (u16, u16),
    state: Mutex<Option<Allocated>>,
}

#[derive(Default)]
struct Allocated {
    ips: HashSet<u32>,
    ports: HashSet<u16>,
}

fn ipv4(s: &str) -> Option<u32> {
    s.parse::<Ipv4Addr>().ok().map(u32::from)
}

impl ServiceAllocator {
    /// `cidr` like "10.96.0.0/12".
    pub fn new(cidr: &str) -> Result<ServiceAllocator, String> {
        let (addr, bits) = cidr
            .split_once('/')
            .ok_or_else(|| format!("invalid service CIDR {cidr:?}"))?;
        let bits: u32 = bits
            .parse()
            .map_err(|_| format!("invalid service CIDR {cidr:?}"))?;
        if !(8..=30).contains(&bits) {
            return Err(format!(
                "service CIDR {cidr:?}: prefix must be between /8 and /30"
            ));
        }
        let base = ipv4(addr).ok_or_else(|| format!("invalid service CIDR {cidr:?}"))?
            & (u32::MAX << (32 - bits));
        Ok(ServiceAllocator {
            base,
            size: 1 << (32 - bits),
            node_ports: (30000, 32767),
            state: Mutex::new(None),
        })
    }

    /// The first usable address: the `kubernetes` Service's ClusterIP.
    pub fn first_ip(&self) -> String {
        Ipv4Addr::from(self.base + 1).to_string()
    }

    fn in_range(&self, ip: u32) -> bool {
        ip > self.base && ip < self.base + self.size - 1
    }

    fn with_state<T>(&self, caches: &CacheSet, f: impl FnOnce(&mut Allocated) -> T) -> T {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let state = guard.get_or_insert_with(|| {
            let mut a = Allocated::default();
            if let Some(cache) = caches.get("services") {
                for svc in cache.list("/services/", &Default::default()) {
                    if let Ok(v) = serde_json::from_slice::<Value>(&svc.json) {
                        record(&mut a, &v);
                    }
                }
            }
            a
        });
        f(state)
    }

    /// Fills `spec.clusterIP(s)`, `ipFamilies`, `ipFamilyPolicy` and missing node ports of a new
    /// Service, or rejects addresses and ports that are taken or out of range (422).
    pub fn allocate(&self, caches: &CacheSet, svc: &mut Value) -> Result<(), ApiError> {
        let name = crate::objects::name(svc).to_string();
        let invalid = |errs: Vec<FieldError>| {
            ApiError::invalid(
                &apimachinery::status::Qualified::new("", "Service"),
                &name,
                &errs,
            )
        };
        let svc_type = svc
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string();
        let spec_path = FieldPath::root("spec");
        self.with_state(caches, |state| {
            let mut new_ip = None;
            if svc_type != "ExternalName" {
                let requested = svc.pointer("/spec/clusterIP").and_then(Value::as_str).unwrap_or("").to_string();
                let ip = match requested.as_str() {
                    "None" => None,
                    "" => {
                        let free = self.size.saturating_sub(3) as usize;
                        if state.ips.len() >= free {
                            return Err(ApiError::internal("failed to allocate a serviceIP: range is full"));
                        }
                        let mut rng = rand::rng();
                        loop {
                            let candidate = self.base + 2 + rng.random_range(0..self.size - 3);
                            if !state.ips.contains(&candidate) {
                                break Some(candidate);
                            }
                        }
                    }
                    explicit => {
                        let path = spec_path.child("clusterIPs").index(0);
                        let Some(ip) = ipv4(explicit) else {
                            return Err(invalid(vec![FieldError::invalid(&path, explicit, "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)")]));
                        };
                        if !self.in_range(ip) {
                            return Err(invalid(vec![FieldError::invalid(&path, explicit, "failed to allocate IP: the provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12")]));
                        }
                        if state.ips.contains(&ip) {
                            return Err(invalid(vec![FieldError::invalid(&path, explicit, format!("failed to allocate IP {explicit}: provided IP is already allocated"))]));
                        }
                        Some(ip)
                    }
                };
                let text = ip.map(|i| Ipv4Addr::from(i).to_string()).unwrap_or_else(|| "None".into());
                svc["spec"]["clusterIP"] = json!(text);
                svc["spec"]["clusterIPs"] = json!([text]);
                svc["spec"]["ipFamilies"] = json!(["IPv4"]);
                svc["spec"]["ipFamilyPolicy"] = json!("SingleStack");
                new_ip = ip;
            }
            let mut new_ports = Vec::new();
            if matches!(svc_type.as_str(), "NodePort" | "LoadBalancer") {
                let ports = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut);
                for (i, port) in ports.into_iter().flatten().enumerate() {
                    let requested = port.get("nodePort").and_then(Value::as_u64).unwrap_or(0) as u16;
                    let path = spec_path.child("ports").index(i).child("nodePort");
                    let chosen = if requested == 0 {
                        let (lo, hi) = self.node_ports;
                        let mut rng = rand::rng();
                        let free = (hi - lo + 1) as usize;
                        if state.ports.len() + new_ports.len() >= free {
                            return Err(ApiError::internal("failed to allocate a nodePort: range is full"));
                        }
                        loop {
                            let p = rng.random_range(lo..=hi);
                            if !state.ports.contains(&p) && !new_ports.contains(&p) {
                                break p;
                            }
                        }
                    } else {
                        if requested < self.node_ports.0 || requested > self.node_ports.1 {
                            return Err(invalid(vec![FieldError::invalid(&path, requested, "provided port is not in the valid range. The range of valid ports is 30000-32767")]));
                        }
                        if state.ports.contains(&requested) || new_ports.contains(&requested) {
                            return Err(invalid(vec![FieldError::invalid(&path, requested, "provided port is already allocated")]));
                        }
                        requested
                    };
                    port["nodePort"] = json!(chosen);
                    new_ports.push(chosen);
                }
            }
            if let Some(ip) = new_ip {
                state.ips.insert(ip);
            }
            state.ports.extend(new_ports);
            Ok(())
        })
    }

    /// Returns a deleted (or never stored) Service's address and ports.
    pub fn release(&self, svc: &Value) {
        let mut guard = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(state) = guard.as_mut() {
            let mut gone = Allocated::default();
            record(&mut gone, svc);
            state.ips.retain(|ip| !gone.ips.contains(ip));
            state.ports.retain(|p| !gone.ports.contains(p));
        }
    }
}

fn record(a: &mut Allocated, svc: &Value) {
    if let Some(ip) = svc
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .and_then(ipv4)
    {
        a.ips.insert(ip);
    }
    for port in svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(p) = port.get("nodePort").and_then(Value::as_u64) {
            a.ports.insert(p as u16);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_unique_addresses_and_ports() {
        let alloc = ServiceAllocator::new("10.96.0.0/28").unwrap();
        assert_eq!(alloc.first_ip(), "10.96.0.1");
        let caches = CacheSet::new();
        let mut seen = HashSet::new();
        for i in 0..13 {
            let mut svc = json!({"metadata": {"name": format!("s{i}")}, "spec": {"type": "NodePort", "ports": [{"port": 80}]}});
            alloc.allocate(&caches, &mut svc).unwrap();
            let ip = svc["spec"]["clusterIP"].as_str().unwrap().to_string();
            assert!(seen.insert(ip), "duplicate IP");
            let port = svc["spec"]["ports"][0]["nodePort"].as_u64().unwrap();
            assert!((30000..=32767).contains(&port));
        }
        let mut full = json!({"metadata": {"name": "x"}, "spec": {}});
        assert_eq!(
            alloc.allocate(&caches, &mut full).unwrap_err().code,
            500,
            "range exhausted"
        );
        let mut taken =
            json!({"metadata": {"name": "y"}, "spec": {"clusterIP": seen.iter().next().unwrap()}});
        assert_eq!(alloc.allocate(&caches, &mut taken).unwrap_err().code, 422);
        let mut headless = json!({"metadata": {"name": "h"}, "spec": {"clusterIP": "None"}});
        alloc.allocate(&caches, &mut headless).unwrap();
        assert_eq!(headless["spec"]["clusterIPs"], json!(["None"]));
    }
}
