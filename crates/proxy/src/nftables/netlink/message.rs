//! nfnetlink messages and their attributes (netlink's `nlmsghdr` + `nfgenmsg` + `nlattr`s), and
//! the batch that makes one nf_tables transaction: `NFNL_MSG_BATCH_BEGIN`, the messages,
//! `NFNL_MSG_BATCH_END`. Integers in nf_tables attributes are big endian unless noted.

/// `NLMSG_MIN_TYPE`: batch delimiters.
const NFNL_MSG_BATCH_BEGIN: u16 = 0x10;
const NFNL_MSG_BATCH_END: u16 = 0x11;
const NFNL_SUBSYS_NFTABLES: u16 = 10;

pub const NLM_F_REQUEST: u16 = 0x1;
pub const NLM_F_CREATE: u16 = 0x400;
pub const NLM_F_APPEND: u16 = 0x800;

/// `NLA_F_NESTED`, as libnftnl marks nests.
const NLA_F_NESTED: u16 = 0x8000;
/// `NFPROTO_IPV4`: the family of `ip` tables.
pub const NFPROTO_IPV4: u8 = 2;

/// nf_tables message types (`enum nf_tables_msg_types`).
pub mod msg {
    pub const GETTABLE: u8 = 1;
    pub const NEWCHAIN: u8 = 3;
    pub const GETCHAIN: u8 = 4;
    pub const DELCHAIN: u8 = 5;
    pub const NEWRULE: u8 = 6;
    pub const DELRULE: u8 = 8;
    pub const NEWSET: u8 = 9;
    pub const DELSET: u8 = 11;
    pub const NEWSETELEM: u8 = 12;
    pub const DELSETELEM: u8 = 14;
}

/// An attribute's payload is longer than a netlink attribute can hold (64 KiB).
#[derive(Debug, thiserror::Error)]
#[error("netlink attribute too long ({0} bytes)")]
pub struct TooLong(pub usize);

/// Attributes being written into a message.
pub struct Attrs<'a> {
    buf: &'a mut Vec<u8>,
    /// The first nest that overflowed, reported by [`Batch::finish`].
    err: &'a mut Option<TooLong>,
}

impl Attrs<'_> {
    fn header(&mut self, ty: u16, len: usize) {
        let len = match u16::try_from(len) {
            Ok(l) => l,
            Err(_) => {
                self.err.get_or_insert(TooLong(len));
                0
            }
        };
        self.buf.extend_from_slice(&len.to_ne_bytes());
        self.buf.extend_from_slice(&ty.to_ne_bytes());
    }

    fn pad(&mut self) {
        while !self.buf.len().is_multiple_of(4) {
            self.buf.push(0);
        }
    }

    pub fn bytes(&mut self, ty: u16, data: &[u8]) {
        self.header(ty, 4 + data.len());
        self.buf.extend_from_slice(data);
        self.pad();
    }

    /// A NUL-terminated string, as the kernel's `NLA_STRING` policies expect from libnftnl.
    pub fn str(&mut self, ty: u16, s: &str) {
        self.header(ty, 4 + s.len() + 1);
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.push(0);
        self.pad();
    }

    pub fn u32(&mut self, ty: u16, v: u32) {
        self.bytes(ty, &v.to_be_bytes());
    }

    pub fn u64(&mut self, ty: u16, v: u64) {
        self.bytes(ty, &v.to_be_bytes());
    }

    /// A nested attribute whose contents `f` writes.
    pub fn nest(&mut self, ty: u16, f: impl FnOnce(&mut Attrs<'_>)) {
        let at = self.buf.len();
        self.buf.extend_from_slice(&[0; 4]);
        f(&mut Attrs {
            buf: self.buf,
            err: self.err,
        });
        let len = self.buf.len() - at;
        match u16::try_from(len) {
            Ok(l) => {
                self.buf[at..at + 2].copy_from_slice(&l.to_ne_bytes());
                self.buf[at + 2..at + 4].copy_from_slice(&(ty | NLA_F_NESTED).to_ne_bytes());
            }
            Err(_) => {
                self.err.get_or_insert(TooLong(len));
            }
        }
    }
}

/// A request outside a batch, with `NLM_F_DUMP` (`NLM_F_ROOT | NLM_F_MATCH`), no attributes.
pub fn dump_request(ty: u8, seq: u32) -> Vec<u8> {
    let mut b = Vec::with_capacity(20);
    b.extend_from_slice(&20u32.to_ne_bytes());
    b.extend_from_slice(&((NFNL_SUBSYS_NFTABLES << 8) | u16::from(ty)).to_ne_bytes());
    b.extend_from_slice(&(NLM_F_REQUEST | 0x300).to_ne_bytes());
    b.extend_from_slice(&seq.to_ne_bytes());
    b.extend_from_slice(&0u32.to_ne_bytes());
    b.push(NFPROTO_IPV4);
    b.push(0);
    b.extend_from_slice(&0u16.to_be_bytes());
    b
}

/// The attributes of a reply message (after its nlmsghdr and nfgenmsg): (type, payload).
pub fn attributes(msg: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut off = 20;
    while off + 4 <= msg.len() {
        let len = u16::from_ne_bytes([msg[off], msg[off + 1]]) as usize;
        let ty = u16::from_ne_bytes([msg[off + 2], msg[off + 3]]) & 0x3fff;
        if len < 4 || off + len > msg.len() {
            break;
        }
        out.push((ty, &msg[off + 4..off + len]));
        off += (len + 3) & !3;
    }
    out
}

/// A string attribute's value (without its NUL).
pub fn attr_str(v: &[u8]) -> Option<&str> {
    let v = v.split(|b| *b == 0).next()?;
    std::str::from_utf8(v).ok()
}

/// What a message does, for the error when the kernel refuses it. Borrowed and formatted only
/// then: formatting one description per message cost ~10 % of a full sync at 10,000 Services.
#[derive(Clone, Copy, Debug)]
pub struct What<'a> {
    pub verb: &'static str,
    pub object: &'a str,
    pub detail: &'a str,
}

impl<'a> What<'a> {
    pub fn new(verb: &'static str, object: &'a str) -> Self {
        What {
            verb,
            object,
            detail: "",
        }
    }
}

impl std::fmt::Display for What<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.verb)?;
        for part in [self.object, self.detail] {
            if !part.is_empty() {
                write!(f, " {part}")?;
            }
        }
        Ok(())
    }
}

/// One transaction: messages between batch begin and end, each with a sequence number, and
/// what each one does (for errors).
pub struct Batch<'a> {
    buf: Vec<u8>,
    seq: u32,
    first_seq: u32,
    what: Vec<What<'a>>,
    err: Option<TooLong>,
}

impl<'a> Batch<'a> {
    /// Sequence numbers start at `seq` (distinct per batch, so late replies are recognised).
    pub fn new(seq: u32) -> Self {
        Self::with_capacity(seq, 4096, 0)
    }

    /// As [`Batch::new`], with room for `bytes` and `messages` (a full sync's batch is ~40 MB:
    /// growing it by doubling copies it over and over).
    pub fn with_capacity(seq: u32, bytes: usize, messages: usize) -> Self {
        let mut b = Batch {
            buf: Vec::with_capacity(bytes),
            seq,
            first_seq: seq,
            what: Vec::with_capacity(messages + 2),
            err: None,
        };
        b.header(NFNL_MSG_BATCH_BEGIN, NLM_F_REQUEST, 0, NFNL_SUBSYS_NFTABLES);
        b.what.push(What::new("batch begin", ""));
        b
    }

    fn header(&mut self, ty: u16, flags: u16, family: u8, res_id: u16) -> usize {
        let at = self.buf.len();
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // length, set by `close`
        self.buf.extend_from_slice(&ty.to_ne_bytes());
        self.buf.extend_from_slice(&flags.to_ne_bytes());
        self.buf.extend_from_slice(&self.seq.to_ne_bytes());
        self.buf.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
        self.buf.push(family);
        self.buf.push(0); // NFNETLINK_V0
        self.buf.extend_from_slice(&res_id.to_be_bytes());
        self.seq = self.seq.wrapping_add(1);
        self.close(at);
        at
    }

    fn close(&mut self, at: usize) {
        let len = (self.buf.len() - at) as u32;
        self.buf[at..at + 4].copy_from_slice(&len.to_ne_bytes());
    }

    /// Appends an nf_tables message of type `ty` for an `ip` table; `f` writes its attributes.
    pub fn msg(&mut self, ty: u8, flags: u16, what: What<'a>, f: impl FnOnce(&mut Attrs<'_>)) {
        let at = self.header(
            (NFNL_SUBSYS_NFTABLES << 8) | u16::from(ty),
            NLM_F_REQUEST | flags,
            NFPROTO_IPV4,
            0,
        );
        f(&mut Attrs {
            buf: &mut self.buf,
            err: &mut self.err,
        });
        self.close(at);
        self.what.push(what);
    }

    /// Messages so far, delimiters excluded.
    pub fn len(&self) -> usize {
        self.what.len() - 1
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes to send, and what each sequence number was, from the first one.
    pub fn finish(mut self) -> Result<Sent<'a>, TooLong> {
        self.header(NFNL_MSG_BATCH_END, NLM_F_REQUEST, 0, NFNL_SUBSYS_NFTABLES);
        self.what.push(What::new("batch end", ""));
        if let Some(e) = self.err {
            return Err(e);
        }
        Ok(Sent {
            bytes: self.buf,
            first_seq: self.first_seq,
            what: self.what,
        })
    }
}

/// A finished batch.
pub struct Sent<'a> {
    pub bytes: Vec<u8>,
    pub first_seq: u32,
    pub what: Vec<What<'a>>,
}

impl Sent<'_> {
    /// What the message with sequence number `seq` did.
    pub fn describe(&self, seq: u32) -> String {
        let i = seq.wrapping_sub(self.first_seq) as usize;
        self.what
            .get(i)
            .map_or_else(|| "an unknown message".to_string(), |w| w.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_framed_and_padded() {
        let mut b = Batch::new(7);
        b.msg(
            msg::NEWCHAIN,
            NLM_F_CREATE,
            What::new("add chain", ""),
            |a| {
                a.str(1, "kube-proxy");
                a.nest(2, |a| a.u32(1, 5));
            },
        );
        assert_eq!(b.len(), 1);
        let s = b.finish().unwrap();
        let b = &s.bytes;
        // begin: 20 bytes, seq 7
        assert_eq!(u32::from_ne_bytes(b[0..4].try_into().unwrap()), 20);
        assert_eq!(u16::from_ne_bytes(b[4..6].try_into().unwrap()), 0x10);
        assert_eq!(&b[16..20], &[0, 0, 0, 10]);
        // the chain message: 20 + 16 ("kube-proxy\0" padded) + 4 + 8
        let m = &b[20..];
        let len = u32::from_ne_bytes(m[0..4].try_into().unwrap()) as usize;
        assert_eq!(len, 20 + 16 + 12);
        assert_eq!(u16::from_ne_bytes(m[4..6].try_into().unwrap()), 0x0a03);
        assert_eq!(u32::from_ne_bytes(m[8..12].try_into().unwrap()), 8);
        assert_eq!(m[16], NFPROTO_IPV4);
        assert_eq!(u16::from_ne_bytes(m[20..22].try_into().unwrap()), 15);
        assert_eq!(&m[24..35], b"kube-proxy\0");
        assert_eq!(
            u16::from_ne_bytes(m[38..40].try_into().unwrap()),
            2 | NLA_F_NESTED
        );
        assert_eq!(&m[44..48], &5u32.to_be_bytes());
        assert_eq!(b.len(), 20 + len + 20);
        assert_eq!(s.describe(8), "add chain");
        assert_eq!(s.describe(9), "batch end");
    }

    #[test]
    fn oversized_nests_are_an_error() {
        let mut b = Batch::new(1);
        b.msg(msg::NEWSETELEM, 0, What::new("x", ""), |a| {
            a.nest(3, |a| {
                for _ in 0..20_000 {
                    a.u32(1, 0);
                }
            })
        });
        assert!(b.finish().is_err());
    }
}
