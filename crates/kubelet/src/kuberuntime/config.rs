//! CRI configs of a pod's sandbox and containers (upstream `kuberuntime_sandbox.go`
//! `generatePodSandboxConfig`, `kuberuntime_container.go` `generateContainerConfig`,
//! `kuberuntime_container_linux.go` resources and security context, `helpers_linux.go` cpu math, and
//! `pkg/kubelet/cm` pod cgroup names for the cgroupfs driver).

use std::collections::HashMap;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::cri::api;
use crate::cri::labels;

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

fn namespace_options(pod: &Pod) -> api::NamespaceOption {
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

fn hostname(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let name = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    // Upstream truncates to 63 characters and trims trailing '-' and '.'.
    let mut h: String = name.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
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

/// The host's resolv.conf as CRI DNS config (upstream's `dnsPolicy: Default`; with no cluster DNS
/// configured, `ClusterFirst` falls back to it as upstream does).
pub fn dns_config(pod: &Pod, cluster_dns: &[String], cluster_domain: &str) -> api::DnsConfig {
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    let mut servers = Vec::new();
    let mut searches = Vec::new();
    let mut options = Vec::new();
    for line in resolv.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => servers.extend(f.next().map(String::from)),
            Some("search") | Some("domain") => searches.extend(f.map(String::from)),
            Some("options") => options.extend(f.map(String::from)),
            _ => {}
        }
    }
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    if policy.starts_with("ClusterFirst") && !cluster_dns.is_empty() {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut s = vec![
            format!("{ns}.svc.{cluster_domain}"),
            format!("svc.{cluster_domain}"),
            cluster_domain.to_string(),
        ];
        s.extend(searches);
        return api::DnsConfig {
            servers: cluster_dns.to_vec(),
            searches: s,
            options: vec!["ndots:5".into()],
        };
    }
    api::DnsConfig {
        servers,
        searches,
        options,
    }
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

pub fn sandbox_config(
    pod: &Pod,
    attempt: u32,
    log_directory: &str,
    cgroup_root: &str,
    cluster_dns: &[String],
    cluster_domain: &str,
) -> api::PodSandboxConfig {
    let spec = pod.spec.clone().unwrap_or_default();
    let sc = spec.security_context.clone().unwrap_or_default();
    let sysctls: HashMap<String, String> = sc
        .sysctls
        .iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    api::PodSandboxConfig {
        metadata: Some(api::PodSandboxMetadata {
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            attempt,
        }),
        hostname: if spec.host_network == Some(true) {
            String::new()
        } else {
            hostname(pod)
        },
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
            security_context: Some(api::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: sc.run_as_user.map(|v| api::Int64Value { value: v }),
                run_as_group: sc.run_as_group.map(|v| api::Int64Value { value: v }),
                supplemental_groups: sc.supplemental_groups.clone().unwrap_or_default(),
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        windows: None,
    }
}

/// A hash of the container spec: a changed spec means a new container (upstream `HashContainer`).
pub fn container_hash(c: &Container) -> String {
    let mut h = crate::hash::Fnv128::new();
    h.write(serde_json::to_string(c).unwrap_or_default().as_bytes());
    h.short()
}

/// The security context of a container (pod-level settings as fallbacks).
pub fn container_security(pod: &Pod, c: &Container) -> api::LinuxContainerSecurityContext {
    let psc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let sc = c.security_context.clone().unwrap_or_default();
    let caps = sc.capabilities.clone().unwrap_or_default();
    api::LinuxContainerSecurityContext {
        capabilities: Some(api::Capability {
            add_capabilities: caps.add.unwrap_or_default(),
            drop_capabilities: caps.drop.unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options(pod)),
        run_as_user: sc
            .run_as_user
            .or(psc.run_as_user)
            .map(|v| api::Int64Value { value: v }),
        run_as_group: sc
            .run_as_group
            .or(psc.run_as_group)
            .map(|v| api::Int64Value { value: v }),
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: psc.supplemental_groups.unwrap_or_default(),
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        ..Default::default()
    }
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
        let c = sandbox_config(&p, 0, "/logs/ns_web-0_u1", "/", &[], "cluster.local");
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
