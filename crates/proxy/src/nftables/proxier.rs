//! Applying the nftables rules (upstream `pkg/proxy/nftables/proxier.go`, the I/O half of
//! `syncProxyRules`): one `nft -f -` transaction per sync, stale service chains flushed at once
//! and deleted in a later sync, listing of existing chains on full syncs.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::rules::{self, Config, TableState, TABLE};
use crate::endpointschangetracker::EndpointsMap;
use crate::exec::Exec;
use crate::proxier::{Backend, BackendSync, ProxyError};
use crate::servicechangetracker::{NamespacedName, ServicePortMap};

/// How long a flushed chain waits before it is deleted (upstream: one second).
const STALE_CHAIN_DELAY: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct NftBackend {
    state: TableState,
    stale: HashMap<String, Instant>,
}

impl NftBackend {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Service and endpoint chains of our table (their names contain '/', no fixed chain's does).
pub fn parse_service_chains(listing: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let mut in_table = false;
    for line in listing.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("table ") {
            in_table = rest.trim_end_matches('{').trim() == format!("ip {TABLE}");
        } else if let Some(rest) = t.strip_prefix("chain ") {
            let name = rest.trim_end_matches('{').trim();
            if in_table && name.contains('/') {
                out.insert(name.to_string());
            }
        }
    }
    out
}

impl Backend for NftBackend {
    fn sync(
        &mut self,
        exec: &Exec,
        cfg: &Config,
        services: &ServicePortMap,
        endpoints: &EndpointsMap,
        full: bool,
        updated: &HashSet<NamespacedName>,
    ) -> Result<BackendSync, ProxyError> {
        let now = Instant::now();
        let due: Vec<String> = self
            .stale
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= STALE_CHAIN_DELAY)
            .map(|(c, _)| c.clone())
            .collect();
        if !due.is_empty() {
            let mut s = String::new();
            for c in &due {
                let _ = writeln!(s, "delete chain ip {TABLE} {c}");
            }
            // A separate transaction: a chain still referenced must not fail the sync. It stays
            // in `stale` and is tried again.
            match exec.run("nft", &["-f", "-"], Some(&s)) {
                Ok(_) => due.iter().for_each(|c| {
                    self.stale.remove(c);
                }),
                Err(e) => tracing::warn!(error = %e, "deleting stale nftables chains failed"),
            }
        }
        let existing = if full {
            match exec.run("nft", &["list", "chains", "ip"], None) {
                Ok(out) => parse_service_chains(&out),
                Err(_) => HashSet::new(),
            }
        } else {
            HashSet::new()
        };
        let delta = rules::update(
            cfg,
            services,
            endpoints,
            full,
            updated,
            &mut self.state,
            &existing,
        );
        if let Err(e) = exec.run("nft", &["-f", "-"], Some(&delta.changes.script(cfg))) {
            // The state already describes the new table: start over (the proxier's next sync
            // is a full one after an error).
            self.state = TableState::default();
            return Err(e.into());
        }
        let now = Instant::now();
        for c in delta.stale_chains {
            self.stale.entry(c).or_insert(now);
        }
        let chains = &self.state.chains;
        self.stale.retain(|c, _| !chains.contains(c));
        Ok(BackendSync {
            rules_written: delta.rules_written,
            rules_total: delta.rules_total,
        })
    }

    fn cleanup(&mut self, exec: &Exec) -> Result<(), ProxyError> {
        self.state = TableState::default();
        self.stale.clear();
        match exec.run("nft", &["delete", "table", "ip", TABLE], None) {
            Ok(_) => Ok(()),
            Err(crate::exec::ExecError::Failed { stderr, .. })
                if stderr.contains("No such file") =>
            {
                Ok(())
            }
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_finds_our_service_chains_only() {
        let l = "table ip filter {\n\tchain x/y {\n\t}\n}\ntable ip kube-proxy {\n\tchain services {\n\t}\n\tchain service-AAAA-ns/a/tcp/ {\n\t}\n}\n";
        let c = parse_service_chains(l);
        assert_eq!(c.len(), 1);
        assert!(c.contains("service-AAAA-ns/a/tcp/"));
    }
}
