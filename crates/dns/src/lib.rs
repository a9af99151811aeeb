//! Cluster DNS for rkube: the Kubernetes DNS-Based Service Discovery specification
//! (github.com/kubernetes/dns docs/specification.md) with CoreDNS `plugin/kubernetes` semantics as
//! kubeadm's default Corefile configures CoreDNS (`kubernetes cluster.local in-addr.arpa ip6.arpa {
//! pods insecure; fallthrough in-addr.arpa ip6.arpa }`, `forward . /etc/resolv.conf`, `cache 30`),
//! served by hickory-server over UDP and TCP.
//!
//! [`records`] computes answers from an in-memory [`snapshot::Snapshot`] that [`watch`] rebuilds
//! from Service and EndpointSlice informers; [`forward`] sends other names to the node's resolvers
//! through a bounded [`cache`]; [`server`] ties them to sockets. Differs from kubeadm's CoreDNS: it
//! runs in the rkube process on the node's network rather than as pods, and answers with TTL 5
//! (CoreDNS's default `ttl`; kubeadm's Corefile sets 30).

pub mod cache;
pub mod forward;
pub mod records;
pub mod server;
pub mod snapshot;
pub mod watch;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hickory_proto::rr::Name;

pub use server::State;
pub use snapshot::{Snapshot, SnapshotConfig};

/// CoreDNS's default answer TTL.
pub const DEFAULT_TTL: u32 = 5;

#[derive(Debug, thiserror::Error)]
pub enum DnsError {
    #[error("invalid cluster domain {0:?}: {1}")]
    InvalidDomain(String, String),
    #[error("cannot listen for DNS on {0}: {1}")]
    Bind(SocketAddr, std::io::Error),
}

#[derive(Clone, Debug)]
pub struct Config {
    /// The cluster domain (`cluster.local`).
    pub cluster_domain: String,
    pub bind_address: IpAddr,
    /// 0 picks a free port.
    pub port: u16,
    pub ttl: u32,
    /// This server's addresses as clients know them (the kube-dns ClusterIP), for `ns.dns.<zone>`.
    pub ns_addrs: Vec<IpAddr>,
    /// Upstream resolvers; `None`: the nameservers of `resolv_conf`.
    pub upstreams: Option<Vec<SocketAddr>>,
    pub resolv_conf: PathBuf,
    pub forward_timeout: Duration,
    /// Questions answered at once; beyond it they are REFUSED.
    pub max_inflight: usize,
    /// Listen inside this network namespace (`/run/netns/NAME`) instead of the process's: the
    /// namespace that joins the nodes of `rkube server --nodes N`. Upstream resolvers are still
    /// asked from the process's namespace.
    pub netns: Option<PathBuf>,
}

impl Config {
    pub fn new(cluster_domain: &str, bind_address: IpAddr, port: u16) -> Config {
        Config {
            cluster_domain: cluster_domain.to_string(),
            bind_address,
            port,
            ttl: DEFAULT_TTL,
            ns_addrs: Vec::new(),
            upstreams: None,
            resolv_conf: PathBuf::from("/etc/resolv.conf"),
            forward_timeout: Duration::from_secs(2),
            max_inflight: 1000,
            netns: None,
        }
    }

    /// The cluster domain as an absolute name.
    pub fn zone(&self) -> Result<Name, DnsError> {
        let bad = |e: String| DnsError::InvalidDomain(self.cluster_domain.clone(), e);
        let text = self.cluster_domain.trim_end_matches('.');
        if text.is_empty() {
            return Err(bad("empty".into()));
        }
        let name = Name::from_ascii(format!("{text}.")).map_err(|e| bad(e.to_string()))?;
        Ok(name.to_lowercase())
    }

    fn snapshot_config(&self) -> Result<SnapshotConfig, DnsError> {
        Ok(SnapshotConfig {
            zone: self.zone()?,
            ttl: self.ttl,
            ns_addrs: self.ns_addrs.clone(),
        })
    }
}

/// The running DNS server and its watch; both stop when dropped.
pub struct Dns {
    /// Where it listens (UDP and TCP).
    pub addr: SocketAddr,
    pub state: Arc<State>,
    server: server::Running,
    _watch: watch::Watch,
}

impl Dns {
    /// Healthy while both the server and the watch run.
    pub fn is_running(&self) -> bool {
        !self.server.is_finished() && !self._watch.is_finished()
    }
}

/// Binds, waits (at most 5 s, as CoreDNS) for the informers, then serves.
pub async fn start(client: kube::Client, config: Config) -> Result<Dns, DnsError> {
    let snap_config = config.snapshot_config()?;
    let requested = SocketAddr::new(config.bind_address, config.port);
    let (udp, tcp) = server::bind(config.bind_address, config.port, config.netns.as_deref())
        .await
        .map_err(|e| DnsError::Bind(requested, e))?;
    let addr = udp.local_addr().map_err(|e| DnsError::Bind(requested, e))?;
    let upstreams = match &config.upstreams {
        Some(u) => u.clone(),
        None => {
            let text = std::fs::read_to_string(&config.resolv_conf).unwrap_or_default();
            let mut own = vec![addr];
            own.extend(config.ns_addrs.iter().map(|ip| SocketAddr::new(*ip, 53)));
            forward::servers_from_resolv_conf(&text, &own)
        }
    };
    if upstreams.is_empty() {
        tracing::warn!("dns: no upstream resolvers; names outside the cluster get SERVFAIL");
    }
    let mut fc = forward::ForwardConfig::new(upstreams);
    fc.timeout = config.forward_timeout;
    fc.max_concurrent = config.max_inflight;
    let state = Arc::new(State::new(
        Snapshot::empty(snap_config.clone()),
        forward::Forwarder::new(fc),
        config.max_inflight,
    ));
    let watch = watch::Watch::start(client, state.clone(), snap_config).await;
    let server = server::serve(state.clone(), udp, tcp).map_err(|e| DnsError::Bind(addr, e))?;
    tracing::info!(%addr, domain = %config.cluster_domain, "dns: serving");
    Ok(Dns {
        addr,
        state,
        server,
        _watch: watch,
    })
}
