//! Cluster DNS in `rkube server` and `rkube dns`: flags, the `kube-system/kube-dns` Service as
//! kubeadm's CoreDNS addon creates it (`cmd/kubeadm/app/phases/addons/dns`: ClusterIP = the tenth
//! address of the service range, ports dns/dns-tcp/metrics, labels `k8s-app: kube-dns`,
//! `kubernetes.io/name: CoreDNS`), and the [`dns`] crate's server. Differs from kubeadm: no CoreDNS
//! Deployment; the Service is selectorless and an EndpointSlice this module keeps (managed by
//! [`MANAGED_BY`]) points at the address and port the in-process server listens on, so a proxy can
//! send the ClusterIP's traffic there.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, PostParams};

/// The managed-by label of the kube-dns EndpointSlice (not the endpointslice controller's).
pub const MANAGED_BY: &str = "cluster-dns.rkube.io";
const SLICE_NAME: &str = "kube-dns-rkube";
/// How long the API may take to accept the Service (kube-system is created at start).
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

/// `rkube server`'s DNS flags (the domain is the kubelet's `--cluster-domain`).
#[derive(Args, Debug, Clone)]
pub struct DnsFlags {
    /// Do not run the cluster DNS server (nor create the kube-dns Service).
    #[arg(long)]
    pub disable_dns: bool,
    #[command(flatten)]
    pub listen: ListenFlags,
}

#[derive(Args, Debug, Clone)]
pub struct ListenFlags {
    /// Address the cluster DNS server listens on (default: the node's IP).
    #[arg(long)]
    pub dns_bind_address: Option<IpAddr>,
    /// Port of the cluster DNS server, UDP and TCP (default 53, or a free port when 53 cannot be
    /// bound; 0 picks a free one). The kube-dns EndpointSlice names it.
    #[arg(long)]
    pub dns_port: Option<u16>,
}

/// `rkube dns`: the cluster DNS server alone, against a cluster.
#[derive(Args, Debug)]
pub struct DnsArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    /// The cluster domain.
    #[arg(long, default_value = "cluster.local")]
    cluster_domain: String,
    #[command(flatten)]
    listen: ListenFlags,
}

/// The running server of `rkube server`.
pub struct ClusterDns {
    /// Kept to keep serving: the server stops when this is dropped.
    _server: dns::Dns,
    /// The kube-dns ClusterIP (what pods name where a proxy routes it).
    pub cluster_ip: IpAddr,
    /// Where the server answers (the node's IP for an unspecified bind address).
    pub addr: SocketAddr,
}

impl ClusterDns {
    /// The nameserver for the local kubelet's pods: the ClusterIP when a proxy routes it; without
    /// one (`--disable-proxy`), the node's own address, which pods reach through the CNI bridge
    /// and resolv.conf can name only if the server got port 53. `None` leaves pods with the
    /// host's resolvers.
    pub fn pod_nameserver(&self, proxied: bool) -> Option<IpAddr> {
        if proxied {
            return Some(self.cluster_ip);
        }
        pod_nameserver(self.addr)
    }
}

fn pod_nameserver(addr: SocketAddr) -> Option<IpAddr> {
    (addr.port() == 53 && !addr.ip().is_loopback() && !addr.ip().is_unspecified())
        .then(|| addr.ip())
}

/// The `index`th address of the first CIDR of `range` (kubeadm `GetDNSIP` takes the tenth).
pub fn indexed_ip(range: &str, index: u128) -> Result<IpAddr, String> {
    let first = range.split(',').next().unwrap_or("").trim();
    let (ip, bits) = first
        .split_once('/')
        .ok_or_else(|| format!("invalid service CIDR {first:?}"))?;
    let ip: IpAddr = ip
        .parse()
        .map_err(|_| format!("invalid service CIDR {first:?}"))?;
    let bits: u32 = bits
        .parse()
        .map_err(|_| format!("invalid service CIDR {first:?}"))?;
    let too_small = || format!("service CIDR {first:?} has no address number {index}");
    match ip {
        IpAddr::V4(v4) => {
            if bits > 32 || (32 - bits < 128 && index >= 1u128 << (32 - bits)) {
                return Err(too_small());
            }
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            };
            let base = u32::from(v4) & mask;
            let offset = u32::try_from(index).map_err(|_| too_small())?;
            Ok(IpAddr::V4(Ipv4Addr::from(base | offset)))
        }
        IpAddr::V6(v6) => {
            if bits > 128 || (128 - bits < 128 && index >= 1u128 << (128 - bits)) {
                return Err(too_small());
            }
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            };
            Ok(IpAddr::V6(Ipv6Addr::from((u128::from(v6) & mask) | index)))
        }
    }
}

fn kube_dns_service(cluster_ip: IpAddr) -> Result<Service, String> {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "kube-dns",
            "namespace": "kube-system",
            "labels": {
                "k8s-app": "kube-dns",
                "kubernetes.io/cluster-service": "true",
                "kubernetes.io/name": "CoreDNS",
            },
            "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
        },
        "spec": {
            "clusterIP": cluster_ip.to_string(),
            "ports": [
                {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
            ],
        },
    }))
    .map_err(|e| e.to_string())
}

fn kube_dns_slice(addr: SocketAddr, node_name: Option<&str>) -> Result<EndpointSlice, String> {
    let mut endpoint = serde_json::json!({
        "addresses": [addr.ip().to_string()],
        "conditions": {"ready": true, "serving": true, "terminating": false},
    });
    if let Some(node) = node_name {
        endpoint["nodeName"] = node.into();
    }
    serde_json::from_value(serde_json::json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": SLICE_NAME,
            "namespace": "kube-system",
            "labels": {
                "kubernetes.io/service-name": "kube-dns",
                "endpointslice.kubernetes.io/managed-by": MANAGED_BY,
                "k8s-app": "kube-dns",
            },
        },
        "addressType": if addr.is_ipv4() { "IPv4" } else { "IPv6" },
        "endpoints": [endpoint],
        "ports": [
            {"name": "dns", "port": addr.port(), "protocol": "UDP"},
            {"name": "dns-tcp", "port": addr.port(), "protocol": "TCP"},
        ],
    }))
    .map_err(|e| e.to_string())
}

/// Creates the kube-dns Service unless it exists; its ClusterIP (the existing one wins).
async fn ensure_service(client: &kube::Client, cluster_ip: IpAddr) -> Result<IpAddr, String> {
    let api: Api<Service> = Api::namespaced(client.clone(), "kube-system");
    let wanted = kube_dns_service(cluster_ip)?;
    let deadline = tokio::time::Instant::now() + SETUP_TIMEOUT;
    loop {
        let result = match api.create(&PostParams::default(), &wanted).await {
            Ok(svc) => Ok(svc),
            Err(kube::Error::Api(e)) if e.code == 409 => api.get("kube-dns").await,
            Err(e) => Err(e),
        };
        match result {
            Ok(svc) => {
                let ip = svc
                    .spec
                    .and_then(|s| s.cluster_ip)
                    .and_then(|ip| ip.parse().ok())
                    .unwrap_or(cluster_ip);
                return Ok(ip);
            }
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("creating kube-system/kube-dns: {e}"));
            }
            Err(e) => {
                tracing::debug!(error = %e, "kube-dns Service not created yet; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// Points the kube-dns EndpointSlice at `addr` (created, or replaced when it names another).
async fn ensure_slice(
    client: &kube::Client,
    addr: SocketAddr,
    node_name: Option<&str>,
) -> Result<(), String> {
    let api: Api<EndpointSlice> = Api::namespaced(client.clone(), "kube-system");
    let mut wanted = kube_dns_slice(addr, node_name)?;
    match api.create(&PostParams::default(), &wanted).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let current = api
                .get(SLICE_NAME)
                .await
                .map_err(|e| format!("reading the kube-dns EndpointSlice: {e}"))?;
            wanted.metadata.resource_version = current.metadata.resource_version;
            api.replace(SLICE_NAME, &PostParams::default(), &wanted)
                .await
                .map(|_| ())
                .map_err(|e| format!("updating the kube-dns EndpointSlice: {e}"))
        }
        Err(e) => Err(format!("creating the kube-dns EndpointSlice: {e}")),
    }
}

/// Binds per the flags: an explicit port must be bound; without one, 53 is tried, then any.
async fn start_server(
    client: kube::Client,
    listen: &ListenFlags,
    domain: &str,
    default_address: IpAddr,
    ns_addrs: Vec<IpAddr>,
    netns: Option<std::path::PathBuf>,
) -> Result<dns::Dns, String> {
    let address = listen.dns_bind_address.unwrap_or(default_address);
    let mut config = dns::Config::new(domain, address, listen.dns_port.unwrap_or(53));
    config.ns_addrs = ns_addrs;
    config.netns = netns;
    match dns::start(client.clone(), config.clone()).await {
        Ok(d) => Ok(d),
        Err(dns::DnsError::Bind(a, e)) if listen.dns_port.is_none() => {
            eprintln!("rkube: cannot listen for DNS on {a} ({e}); using a free port instead");
            config.port = 0;
            dns::start(client, config).await.map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}

/// The cluster DNS of `rkube server`: the kube-dns Service, the server, its EndpointSlice.
pub async fn start_in_server(
    flags: &DnsFlags,
    domain: &str,
    service_range: &str,
    node_ip: Option<IpAddr>,
    node_name: Option<&str>,
    on_fabric: Option<(std::path::PathBuf, IpAddr)>,
    kubeconfig: &Path,
) -> Result<Option<ClusterDns>, String> {
    if flags.disable_dns {
        return Ok(None);
    }
    let wanted_ip = indexed_ip(service_range, 10)?;
    let client = client::kubeconfig::client_from_file(kubeconfig).await?;
    let cluster_ip = ensure_service(&client, wanted_ip).await?;
    let default_address = on_fabric
        .as_ref()
        .map(|(_, ip)| *ip)
        .or(node_ip)
        .or_else(kubelet::machine::default_node_ip)
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let server = start_server(
        client.clone(),
        &flags.listen,
        domain,
        default_address,
        vec![cluster_ip],
        on_fabric.map(|(ns, _)| ns),
    )
    .await?;
    // An unspecified bind address is reached at the node's IP.
    let mut published = server.addr;
    if published.ip().is_unspecified() {
        published.set_ip(default_address);
    }
    ensure_slice(&client, published, node_name).await?;
    eprintln!(
        "rkube: cluster DNS for {domain} on {} (kube-system/kube-dns {cluster_ip})",
        server.addr
    );
    Ok(Some(ClusterDns {
        _server: server,
        cluster_ip,
        addr: published,
    }))
}

/// `rkube dns`.
pub async fn run(args: DnsArgs) -> Result<(), String> {
    let client = crate::cluster_client(args.kubeconfig.as_deref()).await?;
    // `ns.dns.<zone>` names the kube-dns ClusterIP when the Service exists.
    let ns_addrs = Api::<Service>::namespaced(client.clone(), "kube-system")
        .get_opt("kube-dns")
        .await
        .ok()
        .flatten()
        .and_then(|s| s.spec?.cluster_ip?.parse().ok())
        .into_iter()
        .collect();
    let default_address =
        kubelet::machine::default_node_ip().unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let server = start_server(
        client,
        &args.listen,
        &args.cluster_domain,
        default_address,
        ns_addrs,
        None,
    )
    .await?;
    eprintln!(
        "rkube: cluster DNS for {} on {}",
        args.cluster_domain, server.addr
    );
    // SIGTERM as SIGINT: supervisors stop a process with SIGTERM.
    let signal = apiserver::shutdown::signalled();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            name = &mut signal => {
                eprintln!("rkube dns: {name}: stopping");
                return Ok(());
            }
            _ = tokio::time::sleep(Duration::from_secs(1)) => {
                if !server.is_running() {
                    return Err("the DNS server stopped".into());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tenth_address_of_the_service_range() {
        assert_eq!(
            indexed_ip("10.96.0.0/12", 10).unwrap().to_string(),
            "10.96.0.10"
        );
        assert_eq!(
            indexed_ip("10.96.5.7/12", 10).unwrap().to_string(),
            "10.96.0.10"
        );
        assert_eq!(
            indexed_ip("fd00:10:96::/108,10.96.0.0/12", 10)
                .unwrap()
                .to_string(),
            "fd00:10:96::a"
        );
        assert!(indexed_ip("10.96.0.0/29", 10).is_err());
        assert!(indexed_ip("nonsense", 10).is_err());
    }

    #[test]
    fn pods_name_the_server_only_where_they_can_reach_it() {
        let at = |s: &str| pod_nameserver(s.parse().unwrap());
        assert_eq!(at("10.0.0.5:53"), Some("10.0.0.5".parse().unwrap()));
        assert_eq!(at("10.0.0.5:5353"), None, "resolv.conf has no port");
        assert_eq!(at("127.0.0.1:53"), None, "the pod's own loopback");
        assert_eq!(at("0.0.0.0:53"), None);
    }

    #[test]
    fn kube_dns_objects() {
        let svc = kube_dns_service("10.96.0.10".parse().unwrap()).unwrap();
        let spec = svc.spec.unwrap();
        assert!(spec.selector.is_none());
        assert_eq!(spec.ports.unwrap().len(), 3);
        let slice = kube_dns_slice("127.0.0.1:5353".parse().unwrap(), Some("n1")).unwrap();
        assert_eq!(slice.address_type, "IPv4");
        let labels = slice.metadata.labels.unwrap();
        assert_eq!(labels["kubernetes.io/service-name"], "kube-dns");
        assert_eq!(labels["endpointslice.kubernetes.io/managed-by"], MANAGED_BY);
        assert_eq!(slice.ports.unwrap()[0].port, Some(5353));
    }
}
