//! Chain and set names of both backends, with upstream's hashes so that rules written by rkube and by
//! upstream kube-proxy name the same things alike (upstream `servicePortChainName`/`portProtoHash` in
//! `pkg/proxy/iptables/proxier.go`, `servicePortChainNameBase`/`hashAndTruncate` in
//! `pkg/proxy/nftables/proxier.go`).

use std::net::Ipv4Addr;

use data_encoding::BASE32;
use ring::digest::{digest, SHA256};

use crate::servicechangetracker::ServicePortName;

/// nftables names are at most 256 characters; upstream keeps 16 for the longest prefix.
const NFT_BASE_MAX: usize = 256 - 16;

fn sha256_base32(input: &str) -> String {
    BASE32.encode(digest(&SHA256, input.as_bytes()).as_ref())
}

/// Upstream `hashAndTruncate`: 8 characters of hash, a dash, the name, truncated with "...".
fn hash_and_truncate(name: &str) -> String {
    let hash = sha256_base32(name);
    let mut out = format!("{}-{name}", &hash[..8]);
    if out.len() > NFT_BASE_MAX {
        // Names are ASCII (API validation of namespaces, names and ports), so byte truncation is
        // on a character boundary; guard anyway rather than panic on odd data.
        let mut cut = NFT_BASE_MAX - 3;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str("...");
    }
    out
}

/// Upstream `portProtoHash`: 16 characters of base32(sha256(name + protocol)).
fn port_proto_hash(spn: &str, protocol: &str) -> String {
    sha256_base32(&format!("{spn}{protocol}"))[..16].to_string()
}

/// The chains of one Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceChainNames {
    /// `service-<hash>-ns/name/proto/port`
    pub nft_cluster: String,
    /// `local-<hash>-...`
    pub nft_local: String,
    /// `external-<hash>-...`
    pub nft_external: String,
    /// `KUBE-SVC-<hash>`
    pub ipt_cluster: String,
    /// `KUBE-SVL-<hash>`
    pub ipt_local: String,
    /// `KUBE-EXT-<hash>`
    pub ipt_external: String,
}

impl ServiceChainNames {
    pub fn new(spn: &ServicePortName) -> Self {
        let proto = spn.protocol.lower();
        let base = hash_and_truncate(&format!(
            "{}/{}/{proto}/{}",
            spn.service.namespace, spn.service.name, spn.port
        ));
        let hash = port_proto_hash(&spn.to_string(), proto);
        Self {
            nft_cluster: format!("service-{base}"),
            nft_local: format!("local-{base}"),
            nft_external: format!("external-{base}"),
            ipt_cluster: format!("KUBE-SVC-{hash}"),
            ipt_local: format!("KUBE-SVL-{hash}"),
            ipt_external: format!("KUBE-EXT-{hash}"),
        }
    }
}

/// The chains (and affinity set) of one endpoint of one Service port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointChainNames {
    /// `endpoint-<hash>-ns/name/proto/port__ip/port`
    pub nft_chain: String,
    /// `affinity-<hash>-...`
    pub nft_affinity_set: String,
    /// `KUBE-SEP-<hash>`
    pub ipt_chain: String,
}

impl EndpointChainNames {
    pub fn new(spn: &ServicePortName, ip: Ipv4Addr, port: u16) -> Self {
        let proto = spn.protocol.lower();
        let base = hash_and_truncate(&format!(
            "{}/{}/{proto}/{}__{ip}/{port}",
            spn.service.namespace, spn.service.name, spn.port
        ));
        let sep = sha256_base32(&format!("{spn}{proto}{ip}:{port}"));
        Self {
            nft_chain: format!("endpoint-{base}"),
            nft_affinity_set: format!("affinity-{base}"),
            ipt_chain: format!("KUBE-SEP-{}", &sep[..16]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::servicechangetracker::{NamespacedName, Protocol};

    #[test]
    fn kubernetes_service_chain_matches_upstream() {
        // The chain every kubeadm cluster has for default/kubernetes:https.
        let spn = ServicePortName {
            service: NamespacedName::new("default", "kubernetes"),
            port: "https".into(),
            protocol: Protocol::Tcp,
        };
        assert_eq!(
            ServiceChainNames::new(&spn).ipt_cluster,
            "KUBE-SVC-NPX46M4PTMTKRN6Y"
        );
        // kube-dns's well-known chains.
        let dns = |port: &str, protocol| ServicePortName {
            service: NamespacedName::new("kube-system", "kube-dns"),
            port: port.into(),
            protocol,
        };
        assert_eq!(
            ServiceChainNames::new(&dns("dns", Protocol::Udp)).ipt_cluster,
            "KUBE-SVC-TCOU7JCQXEZGVUNU"
        );
        assert_eq!(
            ServiceChainNames::new(&dns("dns-tcp", Protocol::Tcp)).ipt_cluster,
            "KUBE-SVC-ERIFXISQEP7F7OF4"
        );
    }

    #[test]
    fn nft_names_carry_the_service() {
        let spn = ServicePortName {
            service: NamespacedName::new("ns1", "svc1"),
            port: "p80".into(),
            protocol: Protocol::Tcp,
        };
        let n = ServiceChainNames::new(&spn);
        assert!(n.nft_cluster.starts_with("service-"));
        assert!(n.nft_cluster.ends_with("-ns1/svc1/tcp/p80"));
        assert_eq!(n.nft_cluster.len(), "service-".len() + 8 + 1 + 16);
        let e = EndpointChainNames::new(&spn, "10.180.0.1".parse().unwrap(), 80);
        assert!(e.nft_chain.ends_with("-ns1/svc1/tcp/p80__10.180.0.1/80"));
        assert!(e.ipt_chain.starts_with("KUBE-SEP-") && e.ipt_chain.len() == 25);
    }

    #[test]
    fn long_names_are_truncated() {
        let long = "a".repeat(300);
        let t = hash_and_truncate(&long);
        assert_eq!(t.len(), NFT_BASE_MAX);
        assert!(t.ends_with("..."));
    }
}
