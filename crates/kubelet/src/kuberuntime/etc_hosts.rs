//! A pod's host name, domain and kubelet-managed `/etc/hosts` (upstream `kubelet_pods.go`
//! `GeneratePodHostNameAndDomain`, `truncatePodHostnameIfNeeded`, `ensureHostsFile`,
//! `managedHostsFileContent`, `nodeHostsFileContent`, `hostsEntriesFromHostAliases`, and
//! `pkg/kubelet/util` `GetNodenameForKernel`).

use k8s_openapi::api::core::v1::{HostAlias, Pod};

const MANAGED_HEADER: &str = "# Kubernetes-managed hosts file.\n";
const MANAGED_HEADER_HOST_NETWORK: &str = "# Kubernetes-managed hosts file (host network).\n";
/// A host name is a DNS label.
const HOSTNAME_MAX_LEN: usize = 63;
/// The kernel's nodename field holds 64 characters.
const FQDN_MAX_LEN: usize = 64;

/// The pod's host name and domain (`<subdomain>.<namespace>.svc.<cluster-domain>`, empty without a
/// subdomain). A host name over 63 characters (a long pod name) is cut, trailing `-` and `.`
/// removed.
pub fn hostname_and_domain(pod: &Pod, cluster_domain: &str) -> (String, String) {
    let spec = pod.spec.as_ref();
    let name = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .or_else(|| pod.metadata.name.clone())
        .unwrap_or_default();
    let mut host = name;
    if host.len() > HOSTNAME_MAX_LEN {
        // Names are DNS labels (ASCII), so a byte cut is a character cut.
        host = host.chars().take(HOSTNAME_MAX_LEN).collect();
        while host.ends_with(['-', '.']) {
            host.pop();
        }
    }
    let domain = spec
        .and_then(|s| s.subdomain.as_deref())
        .filter(|s| !s.is_empty())
        .map(|sub| {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
            format!("{sub}.{ns}.svc.{cluster_domain}")
        })
        .unwrap_or_default();
    (host, domain)
}

/// The host name the sandbox's kernel gets: the FQDN with `setHostnameAsFQDN` and a subdomain,
/// which must fit in 64 characters (upstream `GetNodenameForKernel`).
pub fn kernel_hostname(pod: &Pod, cluster_domain: &str) -> Result<String, String> {
    let (host, domain) = hostname_and_domain(pod, cluster_domain);
    let as_fqdn = pod
        .spec
        .as_ref()
        .and_then(|s| s.set_hostname_as_fqdn)
        .unwrap_or(false);
    if domain.is_empty() || !as_fqdn {
        return Ok(host);
    }
    let fqdn = format!("{host}.{domain}");
    if fqdn.len() > FQDN_MAX_LEN {
        return Err(format!(
            "failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} is too long ({FQDN_MAX_LEN} characters is the max, {} characters requested)",
            fqdn.len()
        ));
    }
    Ok(fqdn)
}

fn alias_entries(aliases: &[HostAlias]) -> String {
    if aliases.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n# Entries added by HostAliases.\n");
    for a in aliases {
        s.push_str(&format!(
            "{}\t{}\n",
            a.ip,
            a.hostnames.clone().unwrap_or_default().join("\t")
        ));
    }
    s
}

/// The kubelet-managed /etc/hosts of a pod on the pod network: localhost entries, each pod IP with
/// the host name (`<ip>\t<host>.<domain>\t<host>` with a subdomain), then the hostAliases.
pub fn managed_hosts(pod: &Pod, pod_ips: &[String], cluster_domain: &str) -> String {
    let (host, domain) = hostname_and_domain(pod, cluster_domain);
    let mut s = String::from(MANAGED_HEADER);
    s.push_str("127.0.0.1\tlocalhost\n");
    s.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
    s.push_str("fe00::0\tip6-localnet\n");
    s.push_str("fe00::0\tip6-mcastprefix\n");
    s.push_str("fe00::1\tip6-allnodes\n");
    s.push_str("fe00::2\tip6-allrouters\n");
    for ip in pod_ips {
        if domain.is_empty() {
            s.push_str(&format!("{ip}\t{host}\n"));
        } else {
            s.push_str(&format!("{ip}\t{host}.{domain}\t{host}\n"));
        }
    }
    s.push_str(&alias_entries(host_aliases(pod)));
    s
}

fn host_aliases(pod: &Pod) -> &[HostAlias] {
    pod.spec
        .as_ref()
        .and_then(|s| s.host_aliases.as_deref())
        .unwrap_or(&[])
}

/// The /etc/hosts of a host-network pod: the node's own file under a header, then the hostAliases.
pub fn host_network_hosts(pod: &Pod, node_hosts: &str) -> String {
    let mut s = String::from(MANAGED_HEADER_HOST_NETWORK);
    s.push_str(node_hosts);
    s.push_str(&alias_entries(host_aliases(pod)));
    s
}

/// The pod's /etc/hosts content (upstream `ensureHostsFile`); `None` when no pod IP is known yet
/// (upstream mounts no hosts file then).
pub fn hosts_file(pod: &Pod, pod_ips: &[String], cluster_domain: &str) -> Option<String> {
    if pod_ips.is_empty() {
        return None;
    }
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    if host_network {
        let node = std::fs::read_to_string("/etc/hosts").unwrap_or_default();
        return Some(host_network_hosts(pod, &node));
    }
    Some(managed_hosts(pod, pod_ips, cluster_domain))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(meta_name: &str, spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([]);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": meta_name, "namespace": "ns"}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn managed_file_as_upstream_writes_it() {
        let p = pod(
            "web-0",
            serde_json::json!({"hostname": "web-0", "subdomain": "web", "hostAliases": [
                {"ip": "10.1.1.1", "hostnames": ["foo.local", "bar.local"]},
                {"ip": "10.1.1.2", "hostnames": ["baz"]}]}),
        );
        let h = managed_hosts(&p, &["10.42.0.7".to_string()], "cluster.local");
        assert_eq!(
            h,
            "# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n\
             fe00::0\tip6-localnet\nfe00::0\tip6-mcastprefix\nfe00::1\tip6-allnodes\nfe00::2\tip6-allrouters\n\
             10.42.0.7\tweb-0.web.ns.svc.cluster.local\tweb-0\n\n# Entries added by HostAliases.\n\
             10.1.1.1\tfoo.local\tbar.local\n10.1.1.2\tbaz\n"
        );
        let plain = pod("p", serde_json::json!({}));
        let h = managed_hosts(&plain, &["10.42.0.8".to_string()], "cluster.local");
        assert!(
            h.ends_with("fe00::2\tip6-allrouters\n10.42.0.8\tp\n"),
            "{h}"
        );
        assert_eq!(hosts_file(&plain, &[], "cluster.local"), None);
    }

    #[test]
    fn host_network_file_copies_the_node() {
        let p = pod(
            "p",
            serde_json::json!({"hostNetwork": true, "hostAliases": [{"ip": "1.2.3.4", "hostnames": ["x"]}]}),
        );
        assert_eq!(
            host_network_hosts(&p, "127.0.0.1 localhost\n"),
            "# Kubernetes-managed hosts file (host network).\n127.0.0.1 localhost\n\n# Entries added by HostAliases.\n1.2.3.4\tx\n"
        );
    }

    #[test]
    fn hostnames_truncation_and_fqdn() {
        let long = format!("{}-.x", "a".repeat(62));
        let p = pod(&long, serde_json::json!({}));
        assert_eq!(hostname_and_domain(&p, "cluster.local").0, "a".repeat(62));
        let p = pod(
            "p",
            serde_json::json!({"hostname": "h", "subdomain": "s", "setHostnameAsFQDN": true}),
        );
        assert_eq!(
            kernel_hostname(&p, "cluster.local").unwrap(),
            "h.s.ns.svc.cluster.local"
        );
        let p = pod(
            "p",
            serde_json::json!({"hostname": "h".repeat(50), "subdomain": "s", "setHostnameAsFQDN": true}),
        );
        let e = kernel_hostname(&p, "cluster.local").unwrap_err();
        assert!(
            e.contains("is too long (64 characters is the max, 73 characters requested)"),
            "{e}"
        );
        let p = pod("p", serde_json::json!({"hostname": "h", "subdomain": "s"}));
        assert_eq!(kernel_hostname(&p, "cluster.local").unwrap(), "h");
    }
}
