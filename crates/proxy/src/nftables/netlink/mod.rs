//! Writing nftables changes over netlink instead of `nft -f`: `nft` 1.0.6 reads the whole table
//! into its cache before each transaction (~0.3 s at 10,000 Services, six times issue 19's budget
//! for a one-endpoint change); a batch naming only the changed objects costs what it changes.
//!
//! Only what syncs write is translated ([`Changes`]: Service and endpoint chains, their rules,
//! affinity sets, verdict map elements, stale chains); the fixed part of the table (base chains,
//! hooks, masquerading, the maps' definitions) is still written by `nft -f`, by full syncs only
//! (partial ones do not change it). A rule this module cannot translate gives
//! [`NetlinkError::Unsupported`] before anything is sent, and the caller uses `nft -f` for that
//! sync.
//!
//! `message` frames messages and batches, `expr` translates rule statements, `objects` builds
//! the messages of chains, rules, sets and elements, `socket` talks to the kernel.

pub mod expr;
pub mod message;
pub mod objects;
pub mod socket;

use std::collections::HashMap;
use std::io;

use super::fixed::is_set;
use super::rules::Changes;
use expr::{Unsupported, Verdict};
use message::{Batch, Sent, TooLong};
pub use socket::Socket;

#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    #[error("cannot open a netfilter netlink socket in network namespace {netns}: {source}")]
    Socket {
        netns: String,
        #[source]
        source: io::Error,
    },
    #[error("netlink: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Unsupported(#[from] Unsupported),
    #[error(transparent)]
    TooLong(#[from] TooLong),
    /// The kernel refused a message; the whole batch was discarded.
    #[error("nf_tables refused {what}: {source}")]
    Rejected {
        what: String,
        #[source]
        source: io::Error,
    },
}

/// The batch writing `changes`: everything but the fixed part of the table (see the module
/// documentation), in the order of the `nft` script.
pub fn batch(changes: &Changes, first_seq: u32) -> Result<Batch<'_>, NetlinkError> {
    // ~150 bytes per rule message, ~100 per map element.
    let elements: usize = changes.maps.iter().map(|m| m.adds.len()).sum();
    let messages = changes.sets.len() + 2 * changes.chains.len() + changes.rules.len();
    let mut b = Batch::with_capacity(
        first_seq,
        4096 + 160 * messages + 100 * elements,
        messages + elements / 256 + 16,
    );
    let mut set_ids: HashMap<String, u32> = HashMap::new();
    for (set, timeout) in &changes.sets {
        let id = set_ids.len() as u32 + 1;
        set_ids.insert(set.clone(), id);
        objects::add_affinity_set(&mut b, set, *timeout, id);
    }
    for c in &changes.chains {
        objects::add_chain(&mut b, c);
        objects::flush_chain(&mut b, c);
    }
    for (chain, rule) in &changes.rules {
        let exprs = expr::parse_rule(rule)?;
        objects::add_rule(&mut b, chain, rule, &exprs, &set_ids);
    }
    for m in &changes.maps {
        if m.flush {
            objects::flush_map(&mut b, m.map);
        }
        // Set keys are address pairs (the hairpin set), map keys Service addresses and ports.
        let key = |k: &str| match is_set(m.map) {
            true => objects::address_pair(k),
            false => objects::map_key(k),
        };
        let dels = m
            .deletes
            .iter()
            .map(|k| key(k))
            .collect::<Result<Vec<_>, _>>()?;
        objects::delete_map_elements(&mut b, m.map, &dels);
        if is_set(m.map) {
            let adds = m
                .adds
                .iter()
                .map(|(k, _)| key(k))
                .collect::<Result<Vec<_>, _>>()?;
            objects::add_set_elements(&mut b, m.map, &adds);
            continue;
        }
        let adds = m
            .adds
            .iter()
            .map(|(k, v)| {
                let words: Vec<&str> = v.split_whitespace().collect();
                Ok((key(k)?, Verdict::parse(&words)?))
            })
            .collect::<Result<Vec<_>, Unsupported>>()?;
        objects::add_map_elements(&mut b, m.map, &adds);
    }
    for c in &changes.flush_chains {
        objects::flush_chain(&mut b, c);
    }
    for s in &changes.delete_sets {
        objects::delete_set(&mut b, s);
    }
    Ok(b)
}

/// The finished batch for `changes` (see [`batch`]), `None` when there is nothing to write.
pub fn prepare<'a>(sock: &Socket, changes: &'a Changes) -> Result<Option<Sent<'a>>, NetlinkError> {
    let b = batch(changes, sock.next_seq())?;
    if b.is_empty() {
        return Ok(None);
    }
    Ok(Some(b.finish()?))
}

/// Applies `changes` (see [`batch`]) as one transaction.
pub fn apply(sock: &mut Socket, changes: &Changes) -> Result<(), NetlinkError> {
    match prepare(sock, changes)? {
        Some(b) => sock.transact(&b),
        None => Ok(()),
    }
}

/// The names of the chains of our table (`ip kube-proxy`), as `nft list chains ip` would give
/// them, from one dump.
pub fn list_chains(sock: &mut Socket) -> Result<Vec<String>, NetlinkError> {
    let mut out = Vec::new();
    sock.dump(
        |seq| message::dump_request(message::msg::GETCHAIN, seq),
        |m| {
            let attrs = message::attributes(m);
            let get = |ty: u16| {
                attrs
                    .iter()
                    .find(|(t, _)| *t == ty)
                    .and_then(|(_, v)| message::attr_str(v))
            };
            // NFTA_CHAIN_TABLE, NFTA_CHAIN_NAME
            if get(1) == Some(super::rules::TABLE) {
                if let Some(name) = get(3) {
                    out.push(name.to_string());
                }
            }
        },
    )?;
    Ok(out)
}

/// How many objects (chains, sets, stateful objects, flowtables) our table holds: the kernel's
/// `use` count of the table (NFTA_TABLE_USE), from one dump of the tables; `None` when the
/// table does not exist.
pub fn table_use(sock: &mut Socket) -> Result<Option<u32>, NetlinkError> {
    let mut out = None;
    sock.dump(
        |seq| message::dump_request(message::msg::GETTABLE, seq),
        |m| {
            let attrs = message::attributes(m);
            // NFTA_TABLE_NAME, NFTA_TABLE_USE (big endian)
            let named = attrs
                .iter()
                .any(|(t, v)| *t == 1 && message::attr_str(v) == Some(super::rules::TABLE));
            if named {
                out = attrs
                    .iter()
                    .find(|(t, v)| *t == 3 && v.len() == 4)
                    .map(|(_, v)| u32::from_be_bytes([v[0], v[1], v[2], v[3]]));
            }
        },
    )?;
    Ok(out)
}

/// Deletes chains, as one transaction.
pub fn delete_chains(sock: &mut Socket, chains: &[String]) -> Result<(), NetlinkError> {
    let mut b = Batch::new(sock.next_seq());
    for c in chains {
        objects::delete_chain(&mut b, c);
    }
    sock.transact(&b.finish()?)
}

#[cfg(test)]
#[path = "netlink_tests.rs"]
mod tests;
