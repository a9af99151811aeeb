//! Rule expressions: the `nft` statements `rules.rs` writes for Service and endpoint chains,
//! translated as `nft` 1.0.6 translates them (same expressions, registers and data lengths, so
//! `nft list` prints the same rules), and their netlink attributes. Anything else is
//! [`Unsupported`]: the caller then falls back to `nft -f`.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use super::message::{Attrs, NFPROTO_IPV4};

/// A statement this translator does not know.
#[derive(Debug, thiserror::Error)]
#[error("no netlink translation for {0:?}")]
pub struct Unsupported(pub String);

// `enum nft_registers`.
const REG_VERDICT: u32 = 0;
const REG_1: u32 = 1;
const REG_2: u32 = 2;

// `enum nft_payload_bases`.
const PAYLOAD_NETWORK: u32 = 1;
const PAYLOAD_TRANSPORT: u32 = 2;
const META_MARK: u32 = 3;
const META_L4PROTO: u32 = 16;
const CMP_EQ: u32 = 0;
const CMP_NEQ: u32 = 1;
const FIB_RESULT_ADDRTYPE: u32 = 3;
const FIB_F_SADDR: u32 = 1;
/// `RTN_LOCAL`, compared in host byte order (fib's result is a host-order integer).
const RTN_LOCAL: u32 = 2;
const NG_RANDOM: u32 = 1;
const DYNSET_OP_UPDATE: u32 = 1;
const NAT_DNAT: u32 = 1;
/// `NF_NAT_RANGE_PROTO_SPECIFIED`.
const NAT_RANGE_PROTO_SPECIFIED: u32 = 2;

// Verdict codes (`NF_DROP`, `NF_ACCEPT`, `enum nft_verdicts`).
const NF_DROP: i32 = 0;
const NF_ACCEPT: i32 = 1;
const NFT_JUMP: i32 = -3;
const NFT_GOTO: i32 = -4;
const NFT_RETURN: i32 = -5;

// Attribute numbers.
const NFTA_LIST_ELEM: u16 = 1;
const NFTA_EXPR_NAME: u16 = 1;
const NFTA_EXPR_DATA: u16 = 2;
const NFTA_DATA_VALUE: u16 = 1;
const NFTA_DATA_VERDICT: u16 = 2;
const NFTA_VERDICT_CODE: u16 = 1;
const NFTA_VERDICT_CHAIN: u16 = 2;

/// A verdict: of an immediate statement, or the data of a verdict map element.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Accept,
    Drop,
    Return,
    Jump(String),
    Goto(String),
}

impl Verdict {
    /// `drop`, `goto CHAIN`, ... from `words` (all of them).
    pub fn parse(words: &[&str]) -> Result<Verdict, Unsupported> {
        let bad = || Unsupported(words.join(" "));
        Ok(match words {
            ["accept"] => Verdict::Accept,
            ["drop"] => Verdict::Drop,
            ["return"] => Verdict::Return,
            ["jump", c] => Verdict::Jump(c.to_string()),
            ["goto", c] => Verdict::Goto(c.to_string()),
            _ => return Err(bad()),
        })
    }

    /// `NFTA_DATA_VERDICT` inside a data attribute.
    pub fn encode(&self, a: &mut Attrs<'_>) {
        let (code, chain) = match self {
            Verdict::Accept => (NF_ACCEPT, None),
            Verdict::Drop => (NF_DROP, None),
            Verdict::Return => (NFT_RETURN, None),
            Verdict::Jump(c) => (NFT_JUMP, Some(c)),
            Verdict::Goto(c) => (NFT_GOTO, Some(c)),
        };
        a.nest(NFTA_DATA_VERDICT, |a| {
            a.u32(NFTA_VERDICT_CODE, code as u32);
            if let Some(c) = chain {
                a.str(NFTA_VERDICT_CHAIN, c);
            }
        });
    }
}

/// One expression of a rule (registers as `nft` allocates them for these statements).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expr {
    /// Load into register 1.
    Payload {
        base: u32,
        offset: u32,
        len: u32,
    },
    /// Load into register 1.
    Meta {
        key: u32,
    },
    /// Set from register 1.
    MetaSet {
        key: u32,
    },
    /// Compare register 1.
    Cmp {
        op: u32,
        data: Vec<u8>,
    },
    /// Register 1 = (register 1 & mask) ^ xor.
    Bitwise {
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    /// The source address's type into register 1.
    FibSaddrType,
    /// Register 1 in a named set.
    Lookup {
        set: String,
    },
    /// A random number below `modulus` into register 1.
    Numgen {
        modulus: u32,
    },
    /// Adds register 1 to a named set, or refreshes its timeout.
    DynsetUpdate {
        set: String,
    },
    Immediate {
        dreg: u32,
        data: Vec<u8>,
    },
    Verdict(Verdict),
    /// DNAT to the address in register 1 and, if `port`, the port in register 2.
    Dnat {
        port: bool,
    },
}

fn protocol(name: &str) -> Option<u8> {
    match name {
        "tcp" => Some(6),
        "udp" => Some(17),
        "sctp" => Some(132),
        _ => None,
    }
}

/// `saddr`/`daddr` offset in the IPv4 header.
fn ip_field(name: &str) -> Option<u32> {
    match name {
        "saddr" => Some(12),
        "daddr" => Some(16),
        _ => None,
    }
}

/// `ADDR` or `ADDR/PREFIX` compared with a payload at `offset`, as `nft` does: a whole address
/// as 4 bytes, a prefix on a byte boundary as a shorter load, any other prefix through a mask.
fn address_match(offset: u32, op: u32, value: &str, out: &mut Vec<Expr>) -> Option<()> {
    let (addr, prefix) = match value.split_once('/') {
        Some((a, p)) => (a.parse::<Ipv4Addr>().ok()?, p.parse::<u32>().ok()?),
        None => (value.parse::<Ipv4Addr>().ok()?, 32),
    };
    if prefix == 0 || prefix > 32 {
        return None;
    }
    let mask = u32::MAX << (32 - prefix);
    let net = (u32::from(addr) & mask).to_be_bytes();
    if prefix % 8 == 0 {
        let len = prefix / 8;
        out.push(Expr::Payload {
            base: PAYLOAD_NETWORK,
            offset,
            len,
        });
        out.push(Expr::Cmp {
            op,
            data: net[..len as usize].to_vec(),
        });
    } else {
        out.push(Expr::Payload {
            base: PAYLOAD_NETWORK,
            offset,
            len: 4,
        });
        out.push(Expr::Bitwise {
            mask: mask.to_be_bytes().to_vec(),
            xor: vec![0; 4],
        });
        out.push(Expr::Cmp {
            op,
            data: net.to_vec(),
        });
    }
    Some(())
}

fn l4proto(proto: u8, out: &mut Vec<Expr>) {
    out.push(Expr::Meta { key: META_L4PROTO });
    out.push(Expr::Cmp {
        op: CMP_EQ,
        data: vec![proto],
    });
}

/// The expressions of one rule, from its `nft` text.
pub fn parse_rule(rule: &str) -> Result<Vec<Expr>, Unsupported> {
    let bad = || Unsupported(rule.to_string());
    let w: Vec<&str> = rule.split_whitespace().collect();
    let mut out = Vec::new();
    let mut i = 0;
    // The protocol matched so far (dnat to a port needs one).
    let mut proto: Option<u8> = None;
    while i < w.len() {
        let rest = &w[i..];
        match rest {
            ["ip", field, "!=", value, ..] => {
                let off = ip_field(field).ok_or_else(bad)?;
                address_match(off, CMP_NEQ, value, &mut out).ok_or_else(bad)?;
                i += 4;
            }
            ["ip", field, value, ..] => {
                let off = ip_field(field).ok_or_else(bad)?;
                if let Some(set) = value.strip_prefix('@') {
                    out.push(Expr::Payload {
                        base: PAYLOAD_NETWORK,
                        offset: off,
                        len: 4,
                    });
                    out.push(Expr::Lookup {
                        set: set.to_string(),
                    });
                } else {
                    address_match(off, CMP_EQ, value, &mut out).ok_or_else(bad)?;
                }
                i += 3;
            }
            [p, "dport", port, ..] if protocol(p).is_some() => {
                let p = protocol(p).ok_or_else(bad)?;
                let port: u16 = port.parse().map_err(|_| bad())?;
                l4proto(p, &mut out);
                out.push(Expr::Payload {
                    base: PAYLOAD_TRANSPORT,
                    offset: 2,
                    len: 2,
                });
                out.push(Expr::Cmp {
                    op: CMP_EQ,
                    data: port.to_be_bytes().to_vec(),
                });
                proto = Some(p);
                i += 3;
            }
            ["meta", "l4proto", p, ..] => {
                let p = protocol(p).ok_or_else(bad)?;
                l4proto(p, &mut out);
                proto = Some(p);
                i += 3;
            }
            ["mark", "set", "mark", "or", bits, ..] => {
                // The packet mark is a host-order integer.
                let bits = bits.strip_prefix("0x").ok_or_else(bad)?;
                let bits = u32::from_str_radix(bits, 16).map_err(|_| bad())?;
                out.push(Expr::Meta { key: META_MARK });
                out.push(Expr::Bitwise {
                    mask: (!bits).to_ne_bytes().to_vec(),
                    xor: bits.to_ne_bytes().to_vec(),
                });
                out.push(Expr::MetaSet { key: META_MARK });
                i += 5;
            }
            ["fib", "saddr", "type", "local", ..] => {
                out.push(Expr::FibSaddrType);
                out.push(Expr::Cmp {
                    op: CMP_EQ,
                    data: RTN_LOCAL.to_ne_bytes().to_vec(),
                });
                i += 4;
            }
            ["numgen", "random", "mod", m, "==", v, ..] => {
                let modulus: u32 = m.parse().map_err(|_| bad())?;
                let v: u32 = v.parse().map_err(|_| bad())?;
                if modulus == 0 {
                    return Err(bad());
                }
                out.push(Expr::Numgen { modulus });
                // numgen's result is a host-order integer.
                out.push(Expr::Cmp {
                    op: CMP_EQ,
                    data: v.to_ne_bytes().to_vec(),
                });
                i += 6;
            }
            ["update", set, "{", "ip", field, "}"] => {
                let set = set.strip_prefix('@').ok_or_else(bad)?;
                out.push(Expr::Payload {
                    base: PAYLOAD_NETWORK,
                    offset: ip_field(field).ok_or_else(bad)?,
                    len: 4,
                });
                out.push(Expr::DynsetUpdate {
                    set: set.to_string(),
                });
                i += 6;
            }
            ["dnat", "to", target] => {
                let (addr, port) = match target.split_once(':') {
                    Some((a, p)) => (a, Some(p.parse::<u16>().map_err(|_| bad())?)),
                    None => (*target, None),
                };
                let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
                if port.is_some() && proto.is_none() {
                    return Err(bad());
                }
                out.push(Expr::Immediate {
                    dreg: REG_1,
                    data: addr.octets().to_vec(),
                });
                if let Some(p) = port {
                    out.push(Expr::Immediate {
                        dreg: REG_2,
                        data: p.to_be_bytes().to_vec(),
                    });
                }
                out.push(Expr::Dnat {
                    port: port.is_some(),
                });
                i += 3;
            }
            ["accept" | "drop" | "return"] | ["jump" | "goto", _] => {
                out.push(Expr::Verdict(Verdict::parse(rest)?));
                i = w.len();
            }
            _ => return Err(bad()),
        }
    }
    if out.is_empty() {
        // `nft` rejects a rule without statements.
        return Err(bad());
    }
    Ok(out)
}

fn data_value(a: &mut Attrs<'_>, ty: u16, data: &[u8]) {
    a.nest(ty, |a| a.bytes(NFTA_DATA_VALUE, data));
}

impl Expr {
    fn name(&self) -> &'static str {
        match self {
            Expr::Payload { .. } => "payload",
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::FibSaddrType => "fib",
            Expr::Lookup { .. } => "lookup",
            Expr::Numgen { .. } => "numgen",
            Expr::DynsetUpdate { .. } => "dynset",
            Expr::Immediate { .. } | Expr::Verdict(_) => "immediate",
            Expr::Dnat { .. } => "nat",
        }
    }

    /// `NFTA_EXPR_DATA`'s attributes. `set_ids` names sets added earlier in the same batch.
    fn encode_data(&self, a: &mut Attrs<'_>, set_ids: &HashMap<String, u32>) {
        match self {
            Expr::Payload { base, offset, len } => {
                a.u32(1, REG_1); // NFTA_PAYLOAD_DREG
                a.u32(2, *base);
                a.u32(3, *offset);
                a.u32(4, *len);
            }
            Expr::Meta { key } => {
                a.u32(2, *key); // NFTA_META_KEY
                a.u32(1, REG_1); // NFTA_META_DREG
            }
            Expr::MetaSet { key } => {
                a.u32(2, *key); // NFTA_META_KEY
                a.u32(3, REG_1); // NFTA_META_SREG
            }
            Expr::Cmp { op, data } => {
                a.u32(1, REG_1); // NFTA_CMP_SREG
                a.u32(2, *op);
                data_value(a, 3, data);
            }
            Expr::Bitwise { mask, xor } => {
                a.u32(1, REG_1); // NFTA_BITWISE_SREG
                a.u32(2, REG_1); // NFTA_BITWISE_DREG
                a.u32(3, mask.len() as u32);
                data_value(a, 4, mask);
                data_value(a, 5, xor);
            }
            Expr::FibSaddrType => {
                a.u32(3, FIB_F_SADDR); // NFTA_FIB_FLAGS
                a.u32(2, FIB_RESULT_ADDRTYPE);
                a.u32(1, REG_1);
            }
            Expr::Lookup { set } => {
                a.u32(2, REG_1); // NFTA_LOOKUP_SREG
                a.str(1, set); // NFTA_LOOKUP_SET
                if let Some(id) = set_ids.get(set) {
                    a.u32(4, *id); // NFTA_LOOKUP_SET_ID
                }
            }
            Expr::Numgen { modulus } => {
                a.u32(1, REG_1); // NFTA_NG_DREG
                a.u32(2, *modulus);
                a.u32(3, NG_RANDOM);
                a.u32(4, 0); // NFTA_NG_OFFSET
            }
            Expr::DynsetUpdate { set } => {
                a.u32(4, REG_1); // NFTA_DYNSET_SREG_KEY
                a.u32(3, DYNSET_OP_UPDATE);
                a.str(1, set); // NFTA_DYNSET_SET_NAME
                if let Some(id) = set_ids.get(set) {
                    a.u32(2, *id); // NFTA_DYNSET_SET_ID
                }
            }
            Expr::Immediate { dreg, data } => {
                a.u32(1, *dreg);
                data_value(a, 2, data);
            }
            Expr::Verdict(v) => {
                a.u32(1, REG_VERDICT);
                a.nest(2, |a| v.encode(a)); // NFTA_IMMEDIATE_DATA
            }
            Expr::Dnat { port } => {
                a.u32(1, NAT_DNAT); // NFTA_NAT_TYPE
                a.u32(2, u32::from(NFPROTO_IPV4));
                a.u32(3, REG_1); // NFTA_NAT_REG_ADDR_MIN
                if *port {
                    a.u32(5, REG_2); // NFTA_NAT_REG_PROTO_MIN
                    a.u32(7, NAT_RANGE_PROTO_SPECIFIED); // NFTA_NAT_FLAGS
                }
            }
        }
    }
}

/// `NFTA_RULE_EXPRESSIONS`' contents: one `NFTA_LIST_ELEM` per expression.
pub fn encode_list(a: &mut Attrs<'_>, exprs: &[Expr], set_ids: &HashMap<String, u32>) {
    for e in exprs {
        a.nest(NFTA_LIST_ELEM, |a| {
            a.str(NFTA_EXPR_NAME, e.name());
            a.nest(NFTA_EXPR_DATA, |a| e.encode_data(a, set_ids));
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_rules_translate_as_nft_does() {
        let e = parse_rule(
            "ip daddr 10.96.0.50 tcp dport 80 ip saddr != 10.64.0.0/10 jump mark-for-masquerade",
        )
        .unwrap();
        assert_eq!(e.len(), 10);
        assert_eq!(
            e[1],
            Expr::Cmp {
                op: CMP_EQ,
                data: vec![10, 96, 0, 50]
            }
        );
        assert_eq!(
            e[3],
            Expr::Cmp {
                op: CMP_EQ,
                data: vec![6]
            }
        );
        assert_eq!(
            e[5],
            Expr::Cmp {
                op: CMP_EQ,
                data: vec![0, 80]
            }
        );
        assert_eq!(
            e[7],
            Expr::Bitwise {
                mask: vec![255, 192, 0, 0],
                xor: vec![0; 4]
            }
        );
        assert_eq!(
            e[9],
            Expr::Verdict(Verdict::Jump("mark-for-masquerade".into()))
        );
        // A prefix on a byte boundary: a 2-byte load.
        let e = parse_rule("ip saddr 10.244.0.0/16 goto x").unwrap();
        assert_eq!(
            e[0],
            Expr::Payload {
                base: PAYLOAD_NETWORK,
                offset: 12,
                len: 2
            }
        );
        let e = parse_rule("meta l4proto udp dnat to 10.244.3.1:53").unwrap();
        assert_eq!(e.len(), 5);
        assert_eq!(e[4], Expr::Dnat { port: true });
        assert_eq!(
            parse_rule("numgen random mod 3 == 0 goto e").unwrap().len(),
            3
        );
        assert_eq!(
            parse_rule("update @affinity-a { ip saddr }").unwrap().len(),
            2
        );
        assert_eq!(parse_rule("ip saddr @affinity-a goto e").unwrap().len(), 3);
        assert_eq!(parse_rule("fib saddr type local goto e").unwrap().len(), 3);
        let e = parse_rule("ip saddr 10.1.2.3 mark set mark or 0x004000").unwrap();
        assert_eq!(e.len(), 5);
        assert_eq!(
            e[3],
            Expr::Bitwise {
                mask: (!0x4000u32).to_ne_bytes().to_vec(),
                xor: 0x4000u32.to_ne_bytes().to_vec()
            }
        );
        assert_eq!(e[4], Expr::MetaSet { key: META_MARK });
        assert_eq!(
            parse_rule("numgen random mod 3 == 0 meta l4proto tcp dnat to 10.1.2.3:80")
                .unwrap()
                .len(),
            7
        );
    }

    #[test]
    fn unknown_statements_are_unsupported() {
        for r in [
            "counter goto x",
            "ip saddr 0.0.0.0/0 goto x",
            "ip daddr 10.0.0.300 goto x",
            "jump a b",
            "goto x drop",
            "dnat to 10.0.0.1:80",
            "numgen random mod 0 == 0 goto x",
            "mark set mark or 4000",
            "mark set mark or 0xzz",
            "tcp dport 99999 drop",
            "",
        ] {
            assert!(parse_rule(r).is_err(), "{r}");
        }
    }
}
