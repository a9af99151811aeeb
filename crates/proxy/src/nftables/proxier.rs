//! Applying the nftables rules (upstream `pkg/proxy/nftables/proxier.go`, the I/O half of
//! `syncProxyRules`): one transaction per sync, stale service chains flushed at once and deleted
//! in a later sync, listing of existing chains on full syncs.
//!
//! Transactions: netlink batches (`netlink/`), which cost what they change where `nft` first
//! reads the whole table; full syncs write the fixed part of the table with `nft -f` first.
//! The writer is chosen at the first sync and logged: netlink unless its socket cannot be opened
//! or `RKUBE_NFT_NETLINK=off`; a partial sync netlink cannot express or the kernel refuses is
//! written with `nft -f` instead.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::netlink::{self, NetlinkError, Socket};
use super::rules::{self, Changes, Config, TableState, TABLE};
use crate::endpointschangetracker::EndpointsMap;
use crate::exec::Exec;
use crate::proxier::{Backend, BackendSync, ProxyError};
use crate::servicechangetracker::{NamespacedName, ServicePortMap};

/// How long a flushed chain waits before it is deleted (upstream: one second).
const STALE_CHAIN_DELAY: Duration = Duration::from_secs(1);

/// How transactions other than full syncs are written.
#[derive(Default)]
enum Writer {
    /// Not chosen yet (the first sync does, in the proxier's namespace).
    #[default]
    Unchosen,
    Netlink(Socket),
    Nft,
}

#[derive(Default)]
pub struct NftBackend {
    state: TableState,
    stale: HashMap<String, Instant>,
    writer: Writer,
}

impl NftBackend {
    pub fn new() -> Self {
        Self::default()
    }

    fn choose_writer(&mut self, exec: &Exec) {
        if !matches!(self.writer, Writer::Unchosen) {
            return;
        }
        let off = std::env::var("RKUBE_NFT_NETLINK").is_ok_and(|v| v == "off" || v == "0");
        self.writer = if off {
            tracing::info!("nftables: all transactions with nft -f (RKUBE_NFT_NETLINK=off)");
            Writer::Nft
        } else {
            match Socket::open(exec.netns()) {
                Ok(s) => {
                    tracing::info!(
                        "nftables: rules written over netlink (the fixed part of the table with nft -f)"
                    );
                    Writer::Netlink(s)
                }
                Err(e) => {
                    tracing::warn!(error = %e, "nftables: no netlink socket, all transactions with nft -f");
                    Writer::Nft
                }
            }
        };
    }

    /// Writes a sync's changes: over netlink when possible, else with `nft -f`. A full sync over
    /// netlink is two transactions: the fixed part of the table with `nft -f` (it only rewrites
    /// what is there: the rules in place keep working), then the Services' chains and maps.
    fn write(&mut self, exec: &Exec, cfg: &Config, changes: &Changes) -> Result<(), ProxyError> {
        if let Writer::Netlink(sock) = &mut self.writer {
            let r = netlink::prepare(sock, changes).and_then(|batch| {
                if changes.full {
                    let setup = Changes {
                        full: true,
                        ..Default::default()
                    };
                    exec.run("nft", &["-f", "-"], Some(&setup.script(cfg)))
                        .map_err(|e| NetlinkError::Io(std::io::Error::other(e.to_string())))?;
                }
                match batch {
                    Some(b) => sock.transact(&b),
                    None => Ok(()),
                }
            });
            match r {
                Ok(()) => return Ok(()),
                Err(NetlinkError::Unsupported(u)) => {
                    tracing::debug!(error = %u, "nftables: sync written with nft -f");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "nftables: netlink transaction failed, retrying with nft -f");
                }
            }
        }
        exec.run("nft", &["-f", "-"], Some(&changes.script(cfg)))?;
        Ok(())
    }

    /// Service and endpoint chains found in the kernel (none if the table does not exist).
    fn service_chains(&mut self, exec: &Exec, cfg: &Config) -> HashSet<String> {
        if let Writer::Netlink(sock) = &mut self.writer {
            // The kernel answers a chain listing in ~300-chain rounds, each walking the table's
            // chains from the first: ~0.5 s at 60,000 chains. When the table holds exactly as
            // many objects as the last sync left (and the chains waiting for deletion), nobody
            // added any, and the listing would give ours.
            let known = !self.state.chains.is_empty();
            if known {
                let expected = rules::fixed_objects(cfg)
                    + self.state.chains.len()
                    + self.stale.len()
                    + self.state.affinity_sets.len();
                match netlink::table_use(sock) {
                    Ok(Some(n)) if n as usize == expected => {
                        let mut out = self.state.chains.clone();
                        out.extend(self.stale.keys().cloned());
                        return out;
                    }
                    Ok(n) => tracing::debug!(
                        found = ?n,
                        expected,
                        "nftables: the table holds objects of someone else's; listing its chains"
                    ),
                    Err(e) => {
                        tracing::debug!(error = %e, "nftables: reading the table's use count")
                    }
                }
            }
            match netlink::list_chains(sock) {
                Ok(l) => return l.into_iter().filter(|c| c.contains('/')).collect(),
                Err(e) => {
                    tracing::warn!(error = %e, "nftables: listing chains over netlink failed")
                }
            }
        }
        match exec.run("nft", &["list", "chains", "ip"], None) {
            Ok(out) => parse_service_chains(&out),
            Err(_) => HashSet::new(),
        }
    }

    /// Deletes chains in one transaction.
    fn delete_chains(&mut self, exec: &Exec, chains: &[String]) -> Result<(), String> {
        if let Writer::Netlink(sock) = &mut self.writer {
            return netlink::delete_chains(sock, chains).map_err(|e| e.to_string());
        }
        let mut s = String::new();
        for c in chains {
            let _ = writeln!(s, "delete chain ip {TABLE} {c}");
        }
        exec.run("nft", &["-f", "-"], Some(&s))
            .map(|_| ())
            .map_err(|e| e.to_string())
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
        self.choose_writer(exec);
        if !due.is_empty() {
            // A separate transaction: a chain still referenced must not fail the sync. It stays
            // in `stale` and is tried again.
            match self.delete_chains(exec, &due) {
                Ok(()) => due.iter().for_each(|c| {
                    self.stale.remove(c);
                }),
                Err(e) => tracing::warn!(error = %e, "deleting stale nftables chains failed"),
            }
        }
        let existing = if full {
            self.service_chains(exec, cfg)
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
        if let Err(e) = self.write(exec, cfg, &delta.changes) {
            // The state already describes the new table: start over (the proxier's next sync
            // is a full one after an error).
            self.state = TableState::default();
            return Err(e);
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
