//! CRI configs of a pod's sandbox and containers (upstream `kuberuntime_sandbox.go`
//! `generatePodSandboxConfig`, `kuberuntime_container.go` `generateContainerConfig`,
//! `kuberuntime_container_linux.go` resources and security context, `helpers_linux.go` cpu math, and
//! `pkg/kubelet/cm` pod cgroup names for the cgroupfs driver).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::api;
use crate::cri::labels;

use super::security_context::SecurityOptions;

/// Upstream's `MinShares` and cpu period.
const MIN_SHARES: i64 = 2;
const QUOTA_PERIOD: i64 = 100_000;
const MIN_QUOTA: i64 = 1000;

pub fn qos_class(pod: &Pod) -> String {
    if let Some(q) = pod.status.as_ref().and_then(|s| s.qos_class.clone()) {
        return q;
    }
    serde_json::to_value(pod)
        .map(|v| apimachinery::defaults::pod_qos_class(&v).to_string())
        .unwrap_or_else(|_| "BestEffort".into())
}

/// The pod's cgroup for the cgroupfs driver: `<root>/kubepods[/burstable|/besteffort]/pod<uid>`.
pub fn pod_cgroup_parent(cgroup_root: &str, pod: &Pod) -> String {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let qos = match qos_class(pod).as_str() {
        "Guaranteed" => String::new(),
        "Burstable" => "/burstable".into(),
        _ => "/besteffort".into(),
    };
    let root = cgroup_root.trim_end_matches('/');
    format!("{root}/kubepods{qos}/pod{uid}")
}

fn milli(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Option<i64> {
    q.and_then(|q| scheduler::framework::resources::parse_milli_quantity(&q.0).ok())
}

fn units(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Option<i64> {
    q.and_then(|q| scheduler::framework::resources::parse_quantity(&q.0).ok())
}

/// Linux resources of a container (upstream `calculateLinuxResources`): cpu shares from the request
/// (or the limit), quota from the limit, memory limit.
pub fn linux_resources(c: &Container, qos: &str) -> api::LinuxContainerResources {
    let res = c.resources.as_ref();
    let req = |n: &str| res.and_then(|r| r.requests.as_ref()).and_then(|m| m.get(n));
    let lim = |n: &str| res.and_then(|r| r.limits.as_ref()).and_then(|m| m.get(n));
    let cpu_request = milli(req("cpu")).or(milli(lim("cpu")));
    let cpu_limit = milli(lim("cpu"));
    let memory_limit = units(lim("memory")).unwrap_or(0);
    let shares = match cpu_request {
        Some(m) if m > 0 => (m * 1024 / 1000).max(MIN_SHARES),
        _ => MIN_SHARES,
    };
    let quota = cpu_limit
        .filter(|&m| m > 0)
        .map(|m| (m * QUOTA_PERIOD / 1000).max(MIN_QUOTA))
        .unwrap_or(0);
    // Upstream's oom_score_adj per QoS class (containerd raises it to its own when restricted).
    let oom = match qos {
        "Guaranteed" => -997,
        "BestEffort" => 1000,
        _ => {
            let request = units(req("memory")).unwrap_or(0);
            let capacity = 24 * 1024 * 1024 * 1024i64;
            (1000 - (1000 * request) / capacity).clamp(3, 999)
        }
    };
    api::LinuxContainerResources {
        cpu_period: if quota > 0 { QUOTA_PERIOD } else { 0 },
        cpu_quota: quota,
        cpu_shares: shares,
        memory_limit_in_bytes: memory_limit,
        oom_score_adj: oom,
        ..Default::default()
    }
}

pub fn namespace_options(pod: &Pod) -> api::NamespaceOption {
    let spec = pod.spec.as_ref();
    let host = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    let node = api::NamespaceMode::Node as i32;
    let pod_ns = api::NamespaceMode::Pod as i32;
    api::NamespaceOption {
        network: if host(|s| s.host_network) {
            node
        } else {
            pod_ns
        },
        pid: if host(|s| s.host_pid) {
            node
        } else if host(|s| s.share_process_namespace) {
            pod_ns
        } else {
            api::NamespaceMode::Container as i32
        },
        ipc: if host(|s| s.host_ipc) { node } else { pod_ns },
        ..Default::default()
    }
}

fn identity_labels(pod: &Pod) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    l.insert(
        labels::POD_NAME.into(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    l.insert(
        labels::POD_NAMESPACE.into(),
        pod.metadata.namespace.clone().unwrap_or_default(),
    );
    l.insert(
        labels::POD_UID.into(),
        pod.metadata.uid.clone().unwrap_or_default(),
    );
    l
}

/// The pod's DNS settings for its sandbox (upstream `pkg/kubelet/network/dns/dns.go`
/// `GetPodDNS`), from the host's resolv.conf. Differs: on systemd-resolved hosts whose resolv.conf
/// names only the 127.0.0.53 stub (unreachable from a pod), the real upstreams of
/// /run/systemd/resolve/resolv.conf are used, as kubeadm configures the kubelet's `resolvConf`.
pub fn dns_config(pod: &Pod, cluster_dns: &[String], cluster_domain: &str) -> api::DnsConfig {
    let mut host = HostDns::parse(&std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default());
    if !host.servers.is_empty() && host.servers.iter().all(|s| s.starts_with("127.0.0.53")) {
        if let Ok(text) = std::fs::read_to_string("/run/systemd/resolve/resolv.conf") {
            host = HostDns::parse(&text);
        }
    }
    pod_dns_config(pod, &host, cluster_dns, cluster_domain)
}

/// upstream `validation.MaxDNSNameservers`, `MaxDNSSearchPaths`, `MaxDNSSearchListChars`.
const MAX_DNS_NAMESERVERS: usize = 3;
const MAX_DNS_SEARCH_PATHS: usize = 32;
const MAX_DNS_SEARCH_LIST_CHARS: usize = 2048;
/// A search domain longer than a DNS-1123 subdomain makes some resolvers (glibc 2.28) abort.
const MAX_SEARCH_DOMAIN_LEN: usize = 253;

/// A resolv.conf as upstream `parseResolvConf` reads it: `nameserver`, the last `search` line
/// (trailing dots dropped, `.` omitted), `options`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostDns {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

impl HostDns {
    pub fn parse(text: &str) -> HostDns {
        let mut h = HostDns::default();
        for line in text.lines() {
            if line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["nameserver", server, ..] => h.servers.push(server.to_string()),
                ["search", rest @ ..] => {
                    h.searches = rest
                        .iter()
                        .filter(|s| **s != ".")
                        .map(|s| s.trim_end_matches('.').to_string())
                        .collect();
                }
                ["options", rest @ ..] => {
                    h.options = merge_options(&h.options, rest.iter().map(|o| option_pair(o)))
                }
                _ => {}
            }
        }
        h
    }
}

fn option_pair(op: &str) -> (String, String) {
    match op.split_once(':') {
        Some((k, v)) => (k.to_string(), v.to_string()),
        None => (op.to_string(), String::new()),
    }
}

/// upstream `mergeDNSOptions`: later options of the same name win; kept in first-seen order
/// (upstream's order is Go map order, i.e. unspecified).
fn merge_options(
    existing: &[String],
    more: impl IntoIterator<Item = (String, String)>,
) -> Vec<String> {
    let mut merged: Vec<(String, String)> = existing.iter().map(|o| option_pair(o)).collect();
    for (k, v) in more {
        match merged.iter_mut().find(|(name, _)| *name == k) {
            Some(slot) => slot.1 = v,
            None => merged.push((k, v)),
        }
    }
    merged
        .into_iter()
        .map(|(k, v)| if v.is_empty() { k } else { format!("{k}:{v}") })
        .collect()
}

fn omit_duplicates(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for i in items {
        if !out.contains(&i) {
            out.push(i);
        }
    }
    out
}

/// upstream `GetPodDNS` over a parsed host resolv.conf: `None` starts empty; `ClusterFirst` (not on
/// the host network) and `ClusterFirstWithHostNet` use the cluster DNS with the cluster search list
/// before the host's and `ndots:5`, falling back to the host's settings when no cluster DNS is
/// configured; `Default` (and `ClusterFirst` on the host network) use the host's. The pod's
/// `dnsConfig` is merged in, then the nameserver and search limits are applied.
pub fn pod_dns_config(
    pod: &Pod,
    host: &HostDns,
    cluster_dns: &[String],
    cluster_domain: &str,
) -> api::DnsConfig {
    let spec = pod.spec.as_ref();
    let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let mut c = api::DnsConfig {
        servers: host.servers.clone(),
        searches: host.searches.clone(),
        options: host.options.clone(),
    };
    let cluster = match policy {
        "None" => {
            c = api::DnsConfig::default();
            false
        }
        "ClusterFirstWithHostNet" => true,
        "Default" => false,
        "ClusterFirst" => !host_network,
        // The API server rejects other policies; upstream treats them as ClusterFirst.
        _ => true,
    };
    if cluster && !cluster_dns.is_empty() {
        c.servers = cluster_dns.to_vec();
        if !cluster_domain.is_empty() {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            let mut s = vec![
                format!("{ns}.svc.{cluster_domain}"),
                format!("svc.{cluster_domain}"),
                cluster_domain.to_string(),
            ];
            s.append(&mut c.searches);
            c.searches = omit_duplicates(s);
        }
        c.options = vec!["ndots:5".into()];
    }
    if let Some(pc) = spec.and_then(|s| s.dns_config.as_ref()) {
        c.servers = omit_duplicates(
            c.servers
                .drain(..)
                .chain(pc.nameservers.iter().flatten().cloned()),
        );
        c.searches = omit_duplicates(
            c.searches
                .drain(..)
                .chain(pc.searches.iter().flatten().cloned()),
        );
        c.options = merge_options(
            &c.options,
            pc.options.iter().flatten().map(|o| {
                (
                    o.name.clone().unwrap_or_default(),
                    o.value.clone().unwrap_or_default(),
                )
            }),
        );
    }
    c.servers.truncate(MAX_DNS_NAMESERVERS);
    c.searches = search_fits_limits(c.searches);
    c
}

/// upstream `formDNSSearchFitsLimits`: at most 32 domains, none longer than 253 characters, the
/// search line at most 2048 characters (cut from the end).
fn search_fits_limits(mut searches: Vec<String>) -> Vec<String> {
    searches.truncate(MAX_DNS_SEARCH_PATHS);
    searches.retain(|s| s.len() <= MAX_SEARCH_DOMAIN_LEN);
    let mut line =
        searches.iter().map(String::len).sum::<usize>() + searches.len().saturating_sub(1);
    while line > MAX_DNS_SEARCH_LIST_CHARS {
        match searches.pop() {
            Some(s) => line -= s.len() + 1,
            None => break,
        }
    }
    searches
}

fn port_mappings(pod: &Pod) -> Vec<api::PortMapping> {
    let spec = match &pod.spec {
        Some(s) => s,
        None => return Vec::new(),
    };
    spec.containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| api::PortMapping {
            protocol: match p.protocol.as_deref() {
                Some("UDP") => api::Protocol::Udp as i32,
                Some("SCTP") => api::Protocol::Sctp as i32,
                _ => api::Protocol::Tcp as i32,
            },
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or(0),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect()
}

/// The sandbox's CRI config (upstream `generatePodSandboxConfig`); an error is a pod whose
/// sandbox cannot be made (an FQDN host name too long, a Localhost seccomp profile without a name).
#[allow(clippy::too_many_arguments)]
pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    log_directory: &str,
    cgroup_root: &str,
    cluster_dns: &[String],
    cluster_domain: &str,
    security: &SecurityOptions<'_>,
) -> Result<api::PodSandboxConfig, String> {
    let spec = pod.spec.clone().unwrap_or_default();
    let sc = spec.security_context.clone().unwrap_or_default();
    let sysctls: HashMap<String, String> = sc
        .sysctls
        .iter()
        .flatten()
        .map(|s| (super::admit::normalize_sysctl(&s.name), s.value.clone()))
        .collect();
    let hostname = if spec.host_network == Some(true) {
        String::new()
    } else {
        super::etc_hosts::kernel_hostname(pod, cluster_domain)?
    };
    Ok(api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname,
        log_directory: log_directory.to_string(),
        dns_config: Some(dns_config(pod, cluster_dns, cluster_domain)),
        port_mappings: port_mappings(pod),
        labels: identity_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(api::LinuxPodSandboxConfig {
            cgroup_parent: pod_cgroup_parent(cgroup_root, pod),
            security_context: Some(super::security_context::sandbox_security(
                pod,
                namespace_options(pod),
                security,
            )?),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    })
}

/// A hash of the container's name and image (upstream `HashContainer` since 1.31 hashes only
/// these): a changed image means a new container, a resize does not (a pod's other container
/// fields are immutable).
pub fn container_hash(c: &Container) -> String {
    let mut h = crate::hash::Fnv128::new();
    let fields = serde_json::json!({"name": c.name, "image": c.image.as_deref().unwrap_or("")});
    h.write(fields.to_string().as_bytes());
    h.short()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(resources: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "ns", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": resources,
                                      "ports": [{"containerPort": 80, "hostPort": 8080}]}]}
        }))
        .unwrap()
    }

    #[test]
    fn cgroup_parents_follow_qos() {
        let best = pod(serde_json::json!({}));
        assert_eq!(pod_cgroup_parent("/", &best), "/kubepods/besteffort/podu1");
        let burst = pod(serde_json::json!({"requests": {"cpu": "100m"}}));
        assert_eq!(
            pod_cgroup_parent("/r", &burst),
            "/r/kubepods/burstable/podu1"
        );
        let guaranteed = pod(
            serde_json::json!({"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}),
        );
        assert_eq!(pod_cgroup_parent("/", &guaranteed), "/kubepods/podu1");
    }

    #[test]
    fn resources_follow_upstream_math() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "resources": {"requests": {"cpu": "250m"}, "limits": {"cpu": "500m", "memory": "64Mi"}}
        }))
        .unwrap();
        let r = linux_resources(&c, "Burstable");
        assert_eq!(r.cpu_shares, 256);
        assert_eq!(r.cpu_quota, 50_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 64 * 1024 * 1024);
        let none: Container = serde_json::from_value(serde_json::json!({"name": "c"})).unwrap();
        let r = linux_resources(&none, "BestEffort");
        assert_eq!(
            (
                r.cpu_shares,
                r.cpu_quota,
                r.memory_limit_in_bytes,
                r.oom_score_adj
            ),
            (2, 0, 0, 1000)
        );
    }

    #[test]
    fn sandbox_config_carries_identity_and_ports() {
        let p = pod(serde_json::json!({}));
        let root = std::path::PathBuf::from("/var/lib/kubelet/seccomp");
        let opts = SecurityOptions {
            seccomp_root: &root,
            seccomp_default: false,
        };
        let c =
            sandbox_config(&p, 0, "/logs/ns_web-0_u1", "/", &[], "cluster.local", &opts).unwrap();
        assert_eq!(c.hostname, "web-0");
        assert_eq!(
            c.labels.get(labels::POD_UID).map(String::as_str),
            Some("u1")
        );
        assert_eq!(c.port_mappings.len(), 1);
        assert_eq!(c.port_mappings[0].host_port, 8080);
        assert_eq!(c.linux.unwrap().cgroup_parent, "/kubepods/besteffort/podu1");
    }
}

#[cfg(test)]
mod dns_tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([{"name": "c", "image": "i"}]);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn host() -> HostDns {
        HostDns::parse(
            "# comment\nnameserver 192.168.1.1\nnameserver 192.168.1.2\n\
             search old.example\nsearch corp.example. .\noptions timeout:2 rotate\n",
        )
    }

    const DNS: &[&str] = &["10.96.0.10"];

    fn cluster_dns() -> Vec<String> {
        DNS.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn host_resolv_conf_parsing() {
        let h = host();
        assert_eq!(h.servers, ["192.168.1.1", "192.168.1.2"]);
        // The last search line wins, trailing dots dropped, "." omitted.
        assert_eq!(h.searches, ["corp.example"]);
        assert_eq!(h.options, ["timeout:2", "rotate"]);
    }

    #[test]
    fn cluster_first() {
        let c = pod_dns_config(
            &pod(serde_json::json!({})),
            &host(),
            &cluster_dns(),
            "cluster.local",
        );
        assert_eq!(c.servers, ["10.96.0.10"]);
        assert_eq!(
            c.searches,
            [
                "ns.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example"
            ]
        );
        assert_eq!(c.options, ["ndots:5"]);
    }

    #[test]
    fn cluster_first_without_cluster_dns_and_on_host_network_use_the_host() {
        let c = pod_dns_config(&pod(serde_json::json!({})), &host(), &[], "cluster.local");
        assert_eq!(c.servers, ["192.168.1.1", "192.168.1.2"]);
        assert_eq!(c.searches, ["corp.example"]);
        let hostnet = pod(serde_json::json!({"hostNetwork": true, "dnsPolicy": "ClusterFirst"}));
        let c = pod_dns_config(&hostnet, &host(), &cluster_dns(), "cluster.local");
        assert_eq!(c.servers, ["192.168.1.1", "192.168.1.2"]);
        assert_eq!(c.options, ["timeout:2", "rotate"]);
    }

    #[test]
    fn cluster_first_with_host_net() {
        let p =
            pod(serde_json::json!({"hostNetwork": true, "dnsPolicy": "ClusterFirstWithHostNet"}));
        let c = pod_dns_config(&p, &host(), &cluster_dns(), "cluster.local");
        assert_eq!(c.servers, ["10.96.0.10"]);
        assert_eq!(c.searches[0], "ns.svc.cluster.local");
    }

    #[test]
    fn default_policy() {
        let p = pod(serde_json::json!({"dnsPolicy": "Default"}));
        let c = pod_dns_config(&p, &host(), &cluster_dns(), "cluster.local");
        assert_eq!(c.servers, ["192.168.1.1", "192.168.1.2"]);
        assert_eq!(c.searches, ["corp.example"]);
    }

    #[test]
    fn none_with_dns_config_and_merging() {
        let p = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.1.1.1"], "searches": ["a.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}]}}));
        let c = pod_dns_config(&p, &host(), &cluster_dns(), "cluster.local");
        assert_eq!(c.servers, ["1.1.1.1"]);
        assert_eq!(c.searches, ["a.example"]);
        assert_eq!(c.options, ["ndots:2", "edns0"]);
        // Merged into ClusterFirst: duplicates omitted, the pod's option values win.
        let p = pod(serde_json::json!({"dnsConfig": {
            "nameservers": ["10.96.0.10", "1.1.1.1"], "searches": ["svc.cluster.local", "b.example"],
            "options": [{"name": "ndots", "value": "1"}]}}));
        let c = pod_dns_config(&p, &host(), &cluster_dns(), "cluster.local");
        assert_eq!(c.servers, ["10.96.0.10", "1.1.1.1"]);
        assert_eq!(
            c.searches,
            [
                "ns.svc.cluster.local",
                "svc.cluster.local",
                "cluster.local",
                "corp.example",
                "b.example"
            ]
        );
        assert_eq!(c.options, ["ndots:1"]);
    }

    #[test]
    fn limits() {
        let many: Vec<String> = (0..40).map(|i| format!("d{i}.example")).collect();
        let long = "x".repeat(254);
        let mut searches = vec![long];
        searches.extend(many);
        let p = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {
            "nameservers": ["1.1.1.1", "1.1.1.2", "1.1.1.3", "1.1.1.4"], "searches": searches}}));
        let c = pod_dns_config(&p, &HostDns::default(), &[], "cluster.local");
        assert_eq!(c.servers.len(), 3);
        // 32 kept, then the over-long one dropped.
        assert_eq!(c.searches.len(), 31);
        assert_eq!(c.searches[0], "d0.example");
        // The 2048-character line limit cuts from the end.
        let wide: Vec<String> = (0..30)
            .map(|i| format!("{i:02}{}", "y".repeat(98)))
            .collect();
        let p = pod(serde_json::json!({"dnsPolicy": "None", "dnsConfig": {"searches": wide}}));
        let c = pod_dns_config(&p, &HostDns::default(), &[], "cluster.local");
        assert_eq!(c.searches.len(), 20);
        assert!(c.searches.join(" ").len() <= 2048);
    }
}
