//! The proxier core shared by both backends (upstream: the parts every `Proxier` has, with
//! `proxy.Provider`'s handlers): change trackers, the service and endpoints maps, full versus
//! partial syncs, conntrack cleanup and metrics. The backend turns the maps into rules.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::endpointschangetracker::{
    apply_endpoints_changes, EndpointsChangeTracker, EndpointsMap,
};
use crate::exec::{Exec, ExecError};
use crate::metrics::Metrics;
use crate::nftables::rules::Config;
use crate::servicechangetracker::{
    apply_service_changes, NamespacedName, ServiceChangeTracker, ServicePortMap,
};

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("invalid CIDR {0:?}")]
    InvalidCidr(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Nftables,
    Iptables,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "nftables" | "" => Ok(Mode::Nftables),
            "iptables" => Ok(Mode::Iptables),
            "ipvs" => Err("ipvs mode is deprecated upstream and not supported".into()),
            o => Err(format!("unknown proxy mode {o:?} (nftables or iptables)")),
        }
    }
}

/// What a backend reports of a sync.
pub struct BackendSync {
    pub rules_written: usize,
    pub rules_total: usize,
}

/// Rules generation plus application for one mode.
pub trait Backend: Send {
    fn sync(
        &mut self,
        exec: &Exec,
        cfg: &Config,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
        full: bool,
        updated: &HashSet<NamespacedName>,
    ) -> Result<BackendSync, ProxyError>;

    /// Removes everything this backend created.
    fn cleanup(&mut self, exec: &Exec) -> Result<(), ProxyError>;
}

/// The result of one sync.
#[derive(Clone, Debug)]
pub struct SyncStats {
    pub full: bool,
    pub duration: Duration,
    pub rules_written: usize,
    pub rules_total: usize,
    pub service_ports: usize,
    pub endpoints: usize,
}

/// `a.b.c.d/n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub addr: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, ProxyError> {
        let bad = || ProxyError::InvalidCidr(s.to_string());
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = a.parse().map_err(|_| bad())?;
        let prefix: u8 = p.parse().map_err(|_| bad())?;
        if prefix > 32 {
            return Err(bad());
        }
        Ok(Cidr { addr, prefix })
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - self.prefix)
        };
        u32::from(ip) & mask == u32::from(self.addr) & mask
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// The node's IPv4 addresses within `cidrs` (upstream `NodePortAddresses.GetNodeIPs`), from
/// `ip -o -4 addr show` in the proxier's namespace.
pub fn node_ips_in(exec: &Exec, cidrs: &[Cidr]) -> Result<Vec<Ipv4Addr>, ProxyError> {
    let out = exec.run("ip", &["-o", "-4", "addr", "show"], None)?;
    Ok(parse_addrs(&out)
        .into_iter()
        .filter(|ip| cidrs.iter().any(|c| c.contains(*ip)))
        .collect())
}

fn parse_addrs(out: &str) -> Vec<Ipv4Addr> {
    out.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            it.find(|w| *w == "inet")?;
            it.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// How often a full sync happens even without failures (upstream `FullSyncPeriod`).
pub const DEFAULT_FULL_SYNC_PERIOD: Duration = Duration::from_secs(3600);

pub struct Proxier {
    pub mode: Mode,
    cfg: Config,
    exec: Exec,
    backend: Box<dyn Backend>,
    services_changes: ServiceChangeTracker,
    endpoints_changes: EndpointsChangeTracker,
    services: ServicePortMap,
    endpoints: EndpointsMap,
    /// Services changed since the last successful sync.
    updated: HashSet<NamespacedName>,
    need_full: bool,
    last_full: Option<Instant>,
    pub full_sync_period: Duration,
    /// `--nodeport-addresses`: node IPs are looked up again on full syncs.
    nodeport_cidrs: Vec<Cidr>,
    metrics: Arc<Metrics>,
}

impl Proxier {
    pub fn new(
        mode: Mode,
        cfg: Config,
        exec: Exec,
        nodeport_cidrs: Vec<Cidr>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let backend: Box<dyn Backend> = match mode {
            Mode::Nftables => Box::new(crate::nftables::proxier::NftBackend::new()),
            Mode::Iptables => Box::new(crate::iptables::proxier::IptBackend::new()),
        };
        Self {
            mode,
            endpoints_changes: EndpointsChangeTracker::new(&cfg.node_name),
            cfg,
            exec,
            backend,
            services_changes: ServiceChangeTracker::default(),
            services: ServicePortMap::new(),
            endpoints: EndpointsMap::new(),
            updated: HashSet::new(),
            need_full: true,
            last_full: None,
            full_sync_period: DEFAULT_FULL_SYNC_PERIOD,
            nodeport_cidrs,
            metrics,
        }
    }

    pub fn exec(&self) -> &Exec {
        &self.exec
    }

    /// The Service and endpoints maps as of the last sync (the health-check node ports follow
    /// them).
    pub fn maps(&self) -> (&ServicePortMap, &EndpointsMap) {
        (&self.services, &self.endpoints)
    }

    /// A Service was added (`old` None), updated, or deleted (`new` None). Returns whether a
    /// sync is needed.
    pub fn on_service(&mut self, old: Option<&Service>, new: Option<&Service>) -> bool {
        self.services_changes.update(old, new)
    }

    pub fn on_endpoint_slice(&mut self, slice: &EndpointSlice, remove: bool) -> bool {
        self.endpoints_changes.endpoint_slice_update(slice, remove)
    }

    /// This node's labels (topology hints); a change rewrites everything.
    pub fn set_node_labels(&mut self, labels: HashMap<String, String>) -> bool {
        if self.cfg.node_labels == labels {
            return false;
        }
        self.cfg.node_labels = labels;
        self.need_full = true;
        true
    }

    /// Makes the next sync a full one.
    pub fn force_full_sync(&mut self) {
        self.need_full = true;
    }

    /// Upstream `syncProxyRules`.
    pub fn sync(&mut self) -> Result<SyncStats, ProxyError> {
        let start = Instant::now();
        let svc_result = apply_service_changes(&mut self.services, &mut self.services_changes);
        let ep_result = apply_endpoints_changes(&mut self.endpoints, &mut self.endpoints_changes);
        self.updated
            .extend(svc_result.updated_services.iter().cloned());
        self.updated
            .extend(ep_result.updated_services.iter().cloned());
        let full = self.need_full
            || self
                .last_full
                .is_none_or(|t| t.elapsed() >= self.full_sync_period);
        if full && !self.nodeport_cidrs.is_empty() {
            match node_ips_in(&self.exec, &self.nodeport_cidrs) {
                Ok(ips) => self.cfg.nodeport_ips = Some(ips),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list node addresses for --nodeport-addresses")
                }
            }
        }
        let result = self.backend.sync(
            &self.exec,
            &self.cfg,
            &self.services,
            &self.endpoints,
            full,
            &self.updated,
        );
        let duration = start.elapsed();
        let synced = match result {
            Ok(s) => s,
            Err(e) => {
                // Whatever the kernel holds now, rewrite all of it next time.
                self.need_full = true;
                self.metrics.sync_failed();
                return Err(e);
            }
        };
        // Not `clear`: a full sync fills it with every Service, and iterating a cleared set still
        // visits all its buckets.
        self.updated = HashSet::new();
        if full {
            self.need_full = false;
            self.last_full = Some(Instant::now());
        }
        let filters = crate::conntrack::stale_flow_filters(&self.services, &svc_result, &ep_result);
        if !filters.is_empty() {
            crate::conntrack::clear(&self.exec, &filters);
        }
        let stats = SyncStats {
            full,
            duration,
            rules_written: synced.rules_written,
            rules_total: synced.rules_total,
            service_ports: self.services.len(),
            endpoints: self.endpoints.values().map(|e| e.len()).sum(),
        };
        self.metrics.synced(&stats);
        Ok(stats)
    }

    /// Removes this mode's rules.
    pub fn cleanup(&mut self) -> Result<(), ProxyError> {
        self.need_full = true;
        self.backend.cleanup(&self.exec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cidrs_and_addresses() {
        let c = Cidr::parse("10.250.0.0/24").unwrap();
        assert!(c.contains("10.250.0.7".parse().unwrap()));
        assert!(!c.contains("10.251.0.7".parse().unwrap()));
        assert!(Cidr::parse("10.0.0.0/33").is_err());
        assert!(Cidr::parse("nonsense").is_err());
        let out = "1: lo    inet 127.0.0.1/8 scope host lo\n2: eth0    inet 10.250.0.1/24 brd 10.250.0.255 scope global eth0\n";
        assert_eq!(parse_addrs(out).len(), 2);
    }
}
