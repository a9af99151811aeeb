//! Node ports (upstream `registry/core/service/portallocator` over its etcd-backed bitmap): the
//! allocation map is stored under `/ranges/servicenodeports` as a `RangeAllocation` (`range`
//! "30000-32767", `data` the bitmap as a big-endian big integer whose bit `i` is port `lo + i`, as
//! upstream's `AllocationBitmap`), and every change is a compare-and-swap on the key's revision, so
//! API servers sharing a store never hand out one port twice. A missing map (a store written before
//! this existed) is rebuilt from the Services in the watch cache.
//!
//! Difference: upstream's port repair loop also frees ports leaked by crashes between allocation and
//! the Service write; here the repair loop ([`super::repair`]) only marks ports Services use.

use std::sync::Arc;

use apimachinery::status::{ApiError, Qualified};
use apimachinery::validation::field::{FieldError, FieldPath};
use base64::Engine;
use rand::Rng;
use serde_json::{json, Value};

use crate::ApiServer;

/// Upstream's key (under the store's prefix).
pub const KEY: &str = "/ranges/servicenodeports";
const ATTEMPTS: usize = 100;

pub struct NodePorts {
    lo: u16,
    hi: u16,
    /// Serializes this server's read-modify-writes (the CAS arbitrates between servers).
    local: tokio::sync::Mutex<()>,
}

/// The node ports a Service holds.
pub fn service_node_ports(svc: &Value) -> Vec<u16> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|p| p.get("nodePort").and_then(Value::as_u64))
        .filter(|p| *p > 0 && *p <= u64::from(u16::MAX))
        .map(|p| p as u16)
        .collect()
}

/// Upstream's `apiservice.NeedsHealthCheck`: a LoadBalancer with externalTrafficPolicy Local
/// holds a health check node port.
pub fn needs_health_check(svc: &Value) -> bool {
    svc.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer")
        && svc
            .pointer("/spec/externalTrafficPolicy")
            .and_then(Value::as_str)
            == Some("Local")
}

/// The health check node port a Service holds (0 when none).
pub fn health_check_node_port(svc: &Value) -> u16 {
    svc.pointer("/spec/healthCheckNodePort")
        .and_then(Value::as_u64)
        .filter(|p| *p <= u64::from(u16::MAX) && needs_health_check(svc))
        .map_or(0, |p| p as u16)
}

/// Every node port a Service keeps taken in the map: its ports' and its health check port.
pub fn held_node_ports(svc: &Value) -> Vec<u16> {
    let mut ports = service_node_ports(svc);
    let hc = health_check_node_port(svc);
    if hc != 0 && !ports.contains(&hc) {
        ports.push(hc);
    }
    ports
}

/// Why a node port cannot be had (upstream `portallocator` errors; the text is upstream's).
#[derive(Debug, PartialEq, Eq)]
pub enum PortError {
    NotInRange(String),
    Allocated,
    Full,
}

impl std::fmt::Display for PortError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PortError::NotInRange(range) => write!(
                f,
                "provided port is not in the valid range. The range of valid ports is {range}"
            ),
            PortError::Allocated => f.write_str("provided port is already allocated"),
            PortError::Full => f.write_str("range is full"),
        }
    }
}

/// A failed [`NodePorts::reserve`]: which want failed and why, or the store failed.
#[derive(Debug)]
pub enum ReserveError {
    Port(usize, PortError),
    Store(String),
}

/// Upstream `shouldAllocateNodePorts`: NodePort Services get node ports for every port, and
/// LoadBalancers unless `allocateLoadBalancerNodePorts` is false.
pub fn should_allocate_node_ports(svc: &Value) -> bool {
    match svc.pointer("/spec/type").and_then(Value::as_str) {
        Some("NodePort") => true,
        Some("LoadBalancer") => svc
            .pointer("/spec/allocateLoadBalancerNodePorts")
            .and_then(Value::as_bool)
            .unwrap_or(true),
        _ => false,
    }
}

/// Bit `i` of the big-endian big integer `data`.
pub fn decode_bitmap(data: &[u8], len: usize) -> Vec<bool> {
    let mut bits = vec![false; len];
    for (j, byte) in data.iter().rev().enumerate() {
        for b in 0..8 {
            let i = j * 8 + b;
            if i < len && byte >> b & 1 == 1 {
                bits[i] = true;
            }
        }
    }
    bits
}

/// The inverse of [`decode_bitmap`], without leading zero bytes (Go's `big.Int.Bytes`).
pub fn encode_bitmap(bits: &[bool]) -> Vec<u8> {
    let n = bits.len().div_ceil(8);
    let mut out = vec![0u8; n];
    for (i, _) in bits.iter().enumerate().filter(|(_, b)| **b) {
        out[n - 1 - i / 8] |= 1 << (i % 8);
    }
    let first = out.iter().position(|b| *b != 0).unwrap_or(out.len());
    out.split_off(first)
}

impl NodePorts {
    pub fn new(lo: u16, hi: u16) -> NodePorts {
        NodePorts {
            lo,
            hi,
            local: Default::default(),
        }
    }

    fn range(&self) -> String {
        format!("{}-{}", self.lo, self.hi)
    }

    fn len(&self) -> usize {
        usize::from(self.hi - self.lo) + 1
    }

    fn index(&self, port: u16) -> Option<usize> {
        (self.lo..=self.hi)
            .contains(&port)
            .then(|| usize::from(port - self.lo))
    }

    /// The stored map and its revision; rebuilt from the Services when there is none (or it is
    /// of another range).
    async fn load(&self, api: &ApiServer) -> Result<(Vec<bool>, Option<i64>), String> {
        let kv = api.store.get(KEY).await.map_err(|e| e.to_string())?;
        if let Some(kv) = &kv {
            let obj: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
            if obj.get("range").and_then(Value::as_str) == Some(self.range().as_str()) {
                let data = obj.get("data").and_then(Value::as_str).unwrap_or("");
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map_err(|e| format!("{KEY}: {e}"))?;
                return Ok((decode_bitmap(&bytes, self.len()), Some(kv.mod_revision)));
            }
        }
        let mut bits = vec![false; self.len()];
        if let Some(cache) = api.caches.get("services") {
            for svc in cache.list("/services/", &Default::default()) {
                if let Ok(v) = serde_json::from_slice::<Value>(&svc.json) {
                    for p in held_node_ports(&v) {
                        if let Some(i) = self.index(p) {
                            bits[i] = true;
                        }
                    }
                }
            }
        }
        Ok((bits, kv.map(|kv| kv.mod_revision)))
    }

    /// Writes the map if it is still at `rev`; `Ok(false)` when someone else wrote first.
    async fn store(
        &self,
        api: &ApiServer,
        bits: &[bool],
        rev: Option<i64>,
    ) -> Result<bool, String> {
        let obj = json!({
            "apiVersion": "v1",
            "kind": "RangeAllocation",
            "metadata": {"name": "", "creationTimestamp": null},
            "range": self.range(),
            "data": base64::engine::general_purpose::STANDARD.encode(encode_bitmap(bits)),
        });
        let value = bytes::Bytes::from(serde_json::to_vec(&obj).map_err(|e| e.to_string())?);
        let result = match rev {
            Some(r) => api.store.update(KEY, value, Some(r)).await.map(|_| ()),
            None => api.store.create(KEY, value).await.map(|_| ()),
        };
        match result {
            Ok(()) => Ok(true),
            Err(
                storage::Error::Conflict { .. }
                | storage::Error::AlreadyExists { .. }
                | storage::Error::NotFound { .. },
            ) => Ok(false),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Takes node ports in one compare-and-swap of the map: each want is a port (that port, which
    /// must be free) or 0 (any free port). Returns the
    /// port of each want. Nothing is taken on error, nor on a dry run; a port asked twice is
    /// taken by the first want only (the second is "already allocated").
    pub async fn reserve(
        &self,
        api: &ApiServer,
        wants: &[u16],
        dry_run: bool,
    ) -> Result<Vec<u16>, ReserveError> {
        if wants.is_empty() {
            return Ok(Vec::new());
        }
        let _serial = self.local.lock().await;
        for _ in 0..ATTEMPTS {
            let (mut bits, rev) = self.load(api).await.map_err(ReserveError::Store)?;
            let chosen = self.pick(&mut bits, wants)?;
            if dry_run
                || self
                    .store(api, &bits, rev)
                    .await
                    .map_err(ReserveError::Store)?
            {
                return Ok(chosen);
            }
        }
        Err(ReserveError::Store(format!("{KEY} kept changing")))
    }

    /// [`Self::reserve`]'s choice on the map `bits`, marking what it takes.
    fn pick(&self, bits: &mut [bool], wants: &[u16]) -> Result<Vec<u16>, ReserveError> {
        let mut chosen = Vec::with_capacity(wants.len());
        for (i, &want) in wants.iter().enumerate() {
            if want != 0 {
                let Some(j) = self.index(want) else {
                    return Err(ReserveError::Port(i, PortError::NotInRange(self.range())));
                };
                if bits[j] {
                    return Err(ReserveError::Port(i, PortError::Allocated));
                }
                bits[j] = true;
                chosen.push(want);
                continue;
            }
            let free: Vec<usize> = (0..bits.len()).filter(|j| !bits[*j]).collect();
            if free.is_empty() {
                return Err(ReserveError::Port(i, PortError::Full));
            }
            let j = free[rand::rng().random_range(0..free.len())];
            bits[j] = true;
            chosen.push(self.lo + j as u16);
        }
        Ok(chosen)
    }

    /// Fills the missing node ports of a new NodePort or LoadBalancer Service and reserves every
    /// port it names, or rejects taken and out-of-range ones (422), as upstream's `initNodePorts`:
    /// ports of one number (e.g. 53 over TCP and UDP) share one node port unless they ask for
    /// different ones. A LoadBalancer with externalTrafficPolicy Local also gets its health check
    /// node port (a taken requested one is a 500, as upstream).
    pub async fn allocate(
        &self,
        api: &Arc<ApiServer>,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let ports: Vec<(u16, u16)> = svc
            .pointer("/spec/ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|p| {
                let num = |k: &str| p.get(k).and_then(Value::as_u64).unwrap_or(0) as u16;
                (num("port"), num("nodePort"))
            })
            .collect();
        let allocate_new = should_allocate_node_ports(svc);
        let mut wants: Vec<u16> = Vec::new();
        // For each want, the indices in spec.ports it fills.
        let mut fills: Vec<Vec<usize>> = Vec::new();
        let mut by_number: std::collections::HashMap<u16, usize> = Default::default();
        for (i, &(port, node_port)) in ports.iter().enumerate() {
            if node_port == 0 && !allocate_new {
                continue;
            }
            match by_number.get(&port) {
                // Upstream `findRequestedNodePort`: the first port of this number that asked.
                None => {
                    let requested = ports
                        .iter()
                        .find(|(p, np)| *p == port && *np != 0)
                        .map_or(0, |(_, np)| *np);
                    by_number.insert(port, wants.len());
                    wants.push(requested);
                    fills.push(vec![i]);
                }
                Some(&w) if node_port == 0 || node_port == wants[w] => fills[w].push(i),
                Some(_) => {
                    wants.push(node_port);
                    fills.push(vec![i]);
                }
            }
        }
        let hc = needs_health_check(svc).then(|| {
            svc.pointer("/spec/healthCheckNodePort")
                .and_then(Value::as_u64)
                .unwrap_or(0) as u16
        });
        if let Some(hc) = hc {
            wants.push(hc);
        }
        let chosen = match self.reserve(api, &wants, dry_run).await {
            Ok(chosen) => chosen,
            Err(e) => return Err(self.reserve_error(svc, e, &fills, hc)),
        };
        if let Some(list) = svc.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for (w, filled) in fills.iter().enumerate() {
                for &i in filled {
                    list[i]["nodePort"] = json!(chosen[w]);
                }
            }
        }
        if hc.is_some() {
            svc["spec"]["healthCheckNodePort"] = json!(chosen[fills.len()]);
        }
        Ok(())
    }

    /// The API error of a failed reservation: 422 on the port that asked for a taken or
    /// out-of-range node port, 500 otherwise (upstream's mapping).
    pub fn reserve_error(
        &self,
        svc: &Value,
        err: ReserveError,
        fills: &[Vec<usize>],
        hc: Option<u16>,
    ) -> ApiError {
        let name = crate::objects::name(svc);
        match err {
            ReserveError::Store(e) => ApiError::internal(e),
            ReserveError::Port(w, e) if w >= fills.len() => match hc {
                Some(p) if p != 0 => ApiError::internal(format!(
                    "failed to allocate requested HealthCheck NodePort {p}: {e}"
                )),
                _ => {
                    ApiError::internal(format!("failed to allocate a HealthCheck NodePort 0: {e}"))
                }
            },
            ReserveError::Port(_, PortError::Full) => ApiError::internal(format!(
                "failed to allocate a nodePort: {}",
                PortError::Full
            )),
            ReserveError::Port(w, e) => {
                let i = fills[w][0];
                let path = FieldPath::root("spec")
                    .child("ports")
                    .index(i)
                    .child("nodePort");
                let value = svc
                    .pointer(&format!("/spec/ports/{i}/nodePort"))
                    .cloned()
                    .unwrap_or(Value::Null);
                ApiError::invalid(
                    &Qualified::new("", "Service"),
                    name,
                    &[FieldError::invalid(&path, value, e.to_string())],
                )
            }
        }
    }

    /// Frees ports.
    pub async fn release(&self, api: &ApiServer, ports: &[u16]) -> Result<(), String> {
        self.update(api, ports, false).await
    }

    /// Marks ports in use (the repair loop, for Services whose ports the map lacks).
    pub async fn ensure(&self, api: &ApiServer, ports: &[u16]) -> Result<(), String> {
        self.update(api, ports, true).await
    }

    async fn update(&self, api: &ApiServer, ports: &[u16], set: bool) -> Result<(), String> {
        let _serial = self.local.lock().await;
        for _ in 0..ATTEMPTS {
            let (mut bits, rev) = self.load(api).await?;
            if rev.is_none() && !set {
                // No map yet: the next allocation rebuilds it from the Services.
                return Ok(());
            }
            let mut changed = rev.is_none();
            for i in ports.iter().filter_map(|p| self.index(*p)) {
                changed |= bits[i] != set;
                bits[i] = set;
            }
            if !changed || self.store(api, &bits, rev).await? {
                return Ok(());
            }
        }
        Err(format!("{KEY} kept changing"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmap_is_a_big_endian_integer() {
        let mut bits = vec![false; 2768];
        assert!(encode_bitmap(&bits).is_empty());
        bits[0] = true;
        assert_eq!(encode_bitmap(&bits), vec![1]);
        bits[9] = true;
        assert_eq!(encode_bitmap(&bits), vec![2, 1]);
        bits[2767] = true;
        let enc = encode_bitmap(&bits);
        assert_eq!(enc.len(), 346);
        assert_eq!(decode_bitmap(&enc, 2768), bits);
    }

    #[test]
    fn node_ports_of_a_service() {
        let svc = json!({"spec": {"ports": [{"port": 80, "nodePort": 30080}, {"port": 81}]}});
        assert_eq!(service_node_ports(&svc), vec![30080]);
        let np = NodePorts::new(30000, 32767);
        assert_eq!(np.index(30000), Some(0));
        assert_eq!(np.index(32767), Some(2767));
        assert_eq!(np.index(29999), None);
    }
}
