//! Applying the iptables rules (upstream `pkg/proxy/iptables/proxier.go`, the I/O half of
//! `syncProxyRules`): jumps from the built-in chains ensured with `iptables -C`/`-I` on full
//! syncs, then one `iptables-restore --noflush` transaction per sync.

use std::collections::HashSet;

use super::rules::{self, TableState, JUMPS, SERVICE_CHAIN_PREFIXES};
use crate::endpointschangetracker::EndpointsMap;
use crate::exec::Exec;
use crate::nftables::rules::Config;
use crate::proxier::{Backend, BackendSync, ProxyError};
use crate::servicechangetracker::{NamespacedName, ServicePortMap};

/// The fixed chains this proxier owns (others named KUBE-, like the kubelet's, are left alone).
const OWN_CHAINS: [&str; 7] = [
    "KUBE-SERVICES",
    "KUBE-EXTERNAL-SERVICES",
    "KUBE-NODEPORTS",
    "KUBE-POSTROUTING",
    "KUBE-MARK-MASQ",
    "KUBE-FORWARD",
    "KUBE-PROXY-FIREWALL",
];

#[derive(Default)]
pub struct IptBackend {
    state: TableState,
}

impl IptBackend {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Per-service chains declared in `iptables-save` output.
pub fn parse_service_chains(save: &str) -> HashSet<String> {
    save.lines()
        .filter_map(|l| l.strip_prefix(':'))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| SERVICE_CHAIN_PREFIXES.iter().any(|p| c.starts_with(p)))
        .map(str::to_string)
        .collect()
}

fn ensure_jumps(exec: &Exec) -> Result<(), ProxyError> {
    for (table, from, to, comment, extra) in JUMPS {
        // The target must exist before a rule can jump to it; "exists" is fine.
        let _ = exec.run("iptables", &["-w", "5", "-t", table, "-N", to], None);
        let mut rule: Vec<&str> = vec!["-m", "comment", "--comment", comment];
        rule.extend(extra.split_whitespace());
        rule.extend(["-j", to]);
        let mut check = vec!["-w", "5", "-t", table, "-C", from];
        check.extend(rule.iter().copied());
        if exec.run("iptables", &check, None).is_err() {
            let mut insert = vec!["-w", "5", "-t", table, "-I", from];
            insert.extend(rule.iter().copied());
            exec.run("iptables", &insert, None)?;
        }
    }
    Ok(())
}

impl Backend for IptBackend {
    fn sync(
        &mut self,
        exec: &Exec,
        cfg: &Config,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
        full: bool,
        updated: &HashSet<NamespacedName>,
    ) -> Result<BackendSync, ProxyError> {
        let existing = if full {
            ensure_jumps(exec)?;
            exec.run("iptables-save", &["-t", "nat"], None)
                .map(|s| parse_service_chains(&s))
                .unwrap_or_default()
        } else {
            HashSet::new()
        };
        let prev = if full {
            TableState::default()
        } else {
            self.state.clone()
        };
        let plan = rules::generate(cfg, services, endpoints, full, updated, &prev, &existing);
        for chunk in &plan.chunks {
            exec.run("iptables-restore", &["-w", "5", "--noflush"], Some(chunk))?;
        }
        exec.run(
            "iptables-restore",
            &["-w", "5", "--noflush"],
            Some(&plan.script),
        )?;
        self.state = plan.state;
        Ok(BackendSync {
            rules_written: plan.rules_written,
            rules_total: plan.rules_total,
        })
    }

    fn cleanup(&mut self, exec: &Exec) -> Result<(), ProxyError> {
        self.state = TableState::default();
        for (table, from, to, comment, extra) in JUMPS {
            let mut del = vec![
                "-w",
                "5",
                "-t",
                table,
                "-D",
                from,
                "-m",
                "comment",
                "--comment",
                comment,
            ];
            del.extend(extra.split_whitespace());
            del.extend(["-j", to]);
            let _ = exec.run("iptables", &del, None);
        }
        for table in ["nat", "filter"] {
            let save = exec.run("iptables-save", &["-t", table], None)?;
            let ours: Vec<&str> = save
                .lines()
                .filter_map(|l| l.strip_prefix(':'))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| {
                    OWN_CHAINS.contains(c)
                        || SERVICE_CHAIN_PREFIXES.iter().any(|p| c.starts_with(p))
                })
                .collect();
            let mut s = format!("*{table}\n");
            for c in &ours {
                s.push_str(&format!(":{c} - [0:0]\n"));
            }
            for c in &ours {
                s.push_str(&format!("-X {c}\n"));
            }
            s.push_str("COMMIT\n");
            exec.run("iptables-restore", &["-w", "5", "--noflush"], Some(&s))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn save_listing_finds_service_chains() {
        let s = "*nat\n:PREROUTING ACCEPT [0:0]\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-NPX46M4PTMTKRN6Y - [0:0]\n:KUBE-SEP-AAAA - [0:0]\nCOMMIT\n";
        let c = parse_service_chains(s);
        assert_eq!(c.len(), 2);
    }
}
