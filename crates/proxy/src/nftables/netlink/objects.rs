//! The nf_tables objects a sync touches, as batch messages: chains (add, flush, delete), rules,
//! the affinity sets and the verdict maps' elements. Attributes as `nft` 1.0.6 sends them, so
//! that `nft list` shows the same table whichever wrote it.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use super::expr::{self, Expr, Unsupported, Verdict};
use super::message::{msg, Attrs, Batch, What, NLM_F_APPEND, NLM_F_CREATE};
use crate::nftables::rules::TABLE;

// NFTA_CHAIN_*, NFTA_RULE_*, NFTA_SET_*, NFTA_SET_ELEM_LIST_*, NFTA_SET_ELEM_*.
const CHAIN_TABLE: u16 = 1;
const CHAIN_NAME: u16 = 3;
const RULE_TABLE: u16 = 1;
const RULE_CHAIN: u16 = 2;
const RULE_EXPRESSIONS: u16 = 4;
const SET_TABLE: u16 = 1;
const SET_NAME: u16 = 2;
const SET_FLAGS: u16 = 3;
const SET_KEY_TYPE: u16 = 4;
const SET_KEY_LEN: u16 = 5;
const SET_ID: u16 = 10;
const SET_TIMEOUT: u16 = 11;
const SET_USERDATA: u16 = 13;
const ELEM_LIST_TABLE: u16 = 1;
const ELEM_LIST_SET: u16 = 2;
const ELEM_LIST_ELEMENTS: u16 = 3;
const LIST_ELEM: u16 = 1;
const ELEM_KEY: u16 = 1;
const ELEM_DATA: u16 = 2;
const DATA_VALUE: u16 = 1;

const NFT_SET_TIMEOUT: u32 = 0x10;
/// `flags dynamic`.
const NFT_SET_EVAL: u32 = 0x20;
/// nft's `ipv4_addr` data type (`TYPE_IPADDR`).
const TYPE_IPADDR: u32 = 7;

/// Elements per message: an element of a verdict map takes ~100 bytes and the list is one
/// attribute, at most 64 KiB.
const ELEMENTS_PER_MESSAGE: usize = 256;

fn table(a: &mut Attrs<'_>, ty: u16) {
    a.str(ty, TABLE);
}

/// `add chain`: creates the chain, or leaves an existing one as it is.
pub fn add_chain<'a>(b: &mut Batch<'a>, chain: &'a str) {
    b.msg(
        msg::NEWCHAIN,
        NLM_F_CREATE,
        What::new("add chain", chain),
        |a| {
            table(a, CHAIN_TABLE);
            a.str(CHAIN_NAME, chain);
        },
    );
}

/// `flush chain`: a rule deletion naming only the chain.
pub fn flush_chain<'a>(b: &mut Batch<'a>, chain: &'a str) {
    b.msg(msg::DELRULE, 0, What::new("flush chain", chain), |a| {
        table(a, RULE_TABLE);
        a.str(RULE_CHAIN, chain);
    });
}

pub fn delete_chain<'a>(b: &mut Batch<'a>, chain: &'a str) {
    b.msg(msg::DELCHAIN, 0, What::new("delete chain", chain), |a| {
        table(a, CHAIN_TABLE);
        a.str(CHAIN_NAME, chain);
    });
}

/// `add rule` (appended to the chain).
pub fn add_rule<'a>(
    b: &mut Batch<'a>,
    chain: &'a str,
    rule: &'a str,
    exprs: &[Expr],
    set_ids: &HashMap<String, u32>,
) {
    b.msg(
        msg::NEWRULE,
        NLM_F_CREATE | NLM_F_APPEND,
        What {
            verb: "add rule",
            object: chain,
            detail: rule,
        },
        |a| {
            table(a, RULE_TABLE);
            a.str(RULE_CHAIN, chain);
            a.nest(RULE_EXPRESSIONS, |a| expr::encode_list(a, exprs, set_ids));
        },
    );
}

/// `add set NAME { type ipv4_addr ; flags dynamic,timeout ; timeout Ns ; }`; `id` lets rules of
/// the same batch refer to it.
pub fn add_affinity_set<'a>(b: &mut Batch<'a>, name: &'a str, timeout_secs: u32, id: u32) {
    b.msg(msg::NEWSET, NLM_F_CREATE, What::new("add set", name), |a| {
        table(a, SET_TABLE);
        a.str(SET_NAME, name);
        a.u32(SET_FLAGS, NFT_SET_TIMEOUT | NFT_SET_EVAL);
        a.u32(SET_KEY_TYPE, TYPE_IPADDR);
        a.u32(SET_KEY_LEN, 4);
        a.u32(SET_ID, id);
        a.u64(SET_TIMEOUT, u64::from(timeout_secs) * 1000);
        // nft's user data: the key's byte order (NFTNL_UDATA_SET_KEYBYTEORDER = big endian),
        // a host-order integer.
        let mut ud = vec![0u8, 4];
        ud.extend_from_slice(&2u32.to_ne_bytes());
        a.bytes(SET_USERDATA, &ud);
    });
}

pub fn delete_set<'a>(b: &mut Batch<'a>, name: &'a str) {
    b.msg(msg::DELSET, 0, What::new("delete set", name), |a| {
        table(a, SET_TABLE);
        a.str(SET_NAME, name);
    });
}

/// `flush map` (or `flush set`): an element deletion without elements.
pub fn flush_map<'a>(b: &mut Batch<'a>, map: &'a str) {
    b.msg(msg::DELSETELEM, 0, What::new("flush map", map), |a| {
        table(a, ELEM_LIST_TABLE);
        a.str(ELEM_LIST_SET, map);
    });
}

/// A verdict map key as `rules.rs` writes them: `ADDR . PROTO . PORT` or `PROTO . PORT`. Each
/// field of a concatenation takes a whole 4-byte register.
pub fn map_key(key: &str) -> Result<Vec<u8>, Unsupported> {
    let bad = || Unsupported(key.to_string());
    let parts: Vec<&str> = key.split(" . ").map(str::trim).collect();
    let (addr, proto, port) = match parts.as_slice() {
        [a, pr, po] => (Some(*a), *pr, *po),
        [pr, po] => (None, *pr, *po),
        _ => return Err(bad()),
    };
    let mut out = Vec::with_capacity(12);
    if let Some(a) = addr {
        out.extend_from_slice(&a.parse::<Ipv4Addr>().map_err(|_| bad())?.octets());
    }
    let proto = match proto {
        "tcp" => 6u8,
        "udp" => 17,
        "sctp" => 132,
        _ => return Err(bad()),
    };
    out.extend_from_slice(&[proto, 0, 0, 0]);
    let port: u16 = port.parse().map_err(|_| bad())?;
    out.extend_from_slice(&port.to_be_bytes());
    out.extend_from_slice(&[0, 0]);
    Ok(out)
}

/// A key of the hairpin set: `ADDR . ADDR`, each address in a 4-byte register.
pub fn address_pair(key: &str) -> Result<Vec<u8>, Unsupported> {
    let bad = || Unsupported(key.to_string());
    let mut out = Vec::with_capacity(8);
    let parts: Vec<&str> = key.split(" . ").map(str::trim).collect();
    let [a, b] = parts.as_slice() else {
        return Err(bad());
    };
    for p in [a, b] {
        out.extend_from_slice(&p.parse::<Ipv4Addr>().map_err(|_| bad())?.octets());
    }
    Ok(out)
}

/// `add element` to a set (no data).
pub fn add_set_elements<'a>(b: &mut Batch<'a>, set: &'a str, keys: &[Vec<u8>]) {
    for chunk in keys.chunks(ELEMENTS_PER_MESSAGE) {
        let what = What::new("add elements to", set);
        b.msg(msg::NEWSETELEM, NLM_F_CREATE, what, |a| {
            elements_attrs(a, set, chunk.iter().map(|k| (k, None)));
        });
    }
}

/// `add element` to a verdict map.
pub fn add_map_elements<'a>(b: &mut Batch<'a>, map: &'a str, elements: &[(Vec<u8>, Verdict)]) {
    for chunk in elements.chunks(ELEMENTS_PER_MESSAGE) {
        let what = What::new("add elements to", map);
        b.msg(msg::NEWSETELEM, NLM_F_CREATE, what, |a| {
            elements_attrs(a, map, chunk.iter().map(|(k, v)| (k, Some(v))));
        });
    }
}

/// `delete element` from a verdict map or a set.
pub fn delete_map_elements<'a>(b: &mut Batch<'a>, map: &'a str, keys: &[Vec<u8>]) {
    for chunk in keys.chunks(ELEMENTS_PER_MESSAGE) {
        let what = What::new("delete elements of", map);
        b.msg(msg::DELSETELEM, 0, what, |a| {
            elements_attrs(a, map, chunk.iter().map(|k| (k, None)));
        });
    }
}

fn elements_attrs<'e>(
    a: &mut Attrs<'_>,
    map: &str,
    elements: impl Iterator<Item = (&'e Vec<u8>, Option<&'e Verdict>)>,
) {
    table(a, ELEM_LIST_TABLE);
    a.str(ELEM_LIST_SET, map);
    a.nest(ELEM_LIST_ELEMENTS, |a| {
        for (key, verdict) in elements {
            a.nest(LIST_ELEM, |a| {
                a.nest(ELEM_KEY, |a| a.bytes(DATA_VALUE, key));
                if let Some(v) = verdict {
                    a.nest(ELEM_DATA, |a| v.encode(a));
                }
            });
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_fill_whole_registers() {
        assert_eq!(
            map_key("10.96.0.50 . tcp . 80").unwrap(),
            vec![10, 96, 0, 50, 6, 0, 0, 0, 0, 80, 0, 0]
        );
        assert_eq!(
            map_key("udp . 30080").unwrap(),
            vec![17, 0, 0, 0, 0x75, 0x80, 0, 0]
        );
        assert_eq!(
            address_pair("10.0.0.1 . 10.0.0.2").unwrap(),
            vec![10, 0, 0, 1, 10, 0, 0, 2]
        );
        assert!(address_pair("10.0.0.1").is_err());
        assert!(address_pair("10.0.0.1 . tcp").is_err());
        for bad in [
            "10.96.0.50 . tcp",
            "icmp . 1",
            "tcp . 70000",
            "a . b . c . d",
        ] {
            assert!(map_key(bad).is_err(), "{bad}");
        }
    }
}
