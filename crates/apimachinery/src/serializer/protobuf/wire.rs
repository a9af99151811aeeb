//! Protocol buffers wire primitives: varints, field keys, length-delimited fields, and a bounds-checked
//! reader that fails cleanly on truncated or malformed input.

use super::ProtobufError;

pub const VARINT: u8 = 0;
pub const FIXED64: u8 = 1;
pub const LEN: u8 = 2;
pub const FIXED32: u8 = 5;

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_key(out: &mut Vec<u8>, tag: u32, wire: u8) {
    put_varint(out, (u64::from(tag) << 3) | u64::from(wire));
}

pub fn put_bytes(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    put_key(out, tag, LEN);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// Writes a length-delimited field whose body `write` appends, without a scratch buffer: the body is
/// written in place and its length inserted before it afterwards.
pub fn put_nested<E>(
    out: &mut Vec<u8>,
    tag: u32,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
) -> Result<(), E> {
    put_key(out, tag, LEN);
    let start = out.len();
    write(out)?;
    let len = out.len() - start;
    let mut prefix = Vec::with_capacity(10);
    put_varint(&mut prefix, len as u64);
    out.splice(start..start, prefix);
    Ok(())
}

pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    pub fn at_end(&self) -> bool {
        self.pos >= self.buf.len()
    }

    pub fn varint(&mut self) -> Result<u64, ProtobufError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let Some(&b) = self.buf.get(self.pos) else {
                return Err(ProtobufError::Truncated);
            };
            self.pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(ProtobufError::Malformed(
            "varint longer than 10 bytes".into(),
        ))
    }

    /// The next field's tag and wire type.
    pub fn key(&mut self) -> Result<(u32, u8), ProtobufError> {
        let k = self.varint()?;
        let tag = u32::try_from(k >> 3)
            .map_err(|_| ProtobufError::Malformed(format!("field number {} too large", k >> 3)))?;
        if tag == 0 {
            return Err(ProtobufError::Malformed("field number 0".into()));
        }
        Ok((tag, (k & 7) as u8))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ProtobufError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or(ProtobufError::Truncated)?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    pub fn len_delimited(&mut self) -> Result<&'a [u8], ProtobufError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| ProtobufError::Truncated)?;
        self.take(n)
    }

    pub fn fixed64(&mut self) -> Result<u64, ProtobufError> {
        let b = self.take(8)?;
        Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }

    pub fn fixed32(&mut self) -> Result<u32, ProtobufError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    /// Skips a field of an unknown tag, as upstream's decoder does.
    pub fn skip(&mut self, wire: u8) -> Result<(), ProtobufError> {
        match wire {
            VARINT => self.varint().map(drop),
            FIXED64 => self.take(8).map(drop),
            LEN => self.len_delimited().map(drop),
            FIXED32 => self.take(4).map(drop),
            other => Err(ProtobufError::Malformed(format!(
                "unsupported wire type {other}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_follow_the_spec() {
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        assert_eq!(out, [0xac, 0x02]);
        let mut out = Vec::new();
        put_varint(&mut out, -1i64 as u64);
        assert_eq!(out.len(), 10);
        assert_eq!(Reader::new(&out).varint().unwrap() as i64, -1);
        assert!(matches!(
            Reader::new(&[0x80, 0x80]).varint(),
            Err(ProtobufError::Truncated)
        ));
        assert!(Reader::new(&[0xff; 11]).varint().is_err());
    }

    #[test]
    fn nested_fields_get_their_length_inserted() {
        let mut out = Vec::new();
        put_nested::<()>(&mut out, 1, |o| {
            o.extend_from_slice(&[7u8; 200]);
            Ok(())
        })
        .unwrap();
        assert_eq!(&out[..3], &[0x0a, 0xc8, 0x01]);
        let mut r = Reader::new(&out);
        assert_eq!(r.key().unwrap(), (1, LEN));
        assert_eq!(r.len_delimited().unwrap().len(), 200);
        assert!(r.at_end());
        let mut r = Reader::new(&out[..50]);
        r.key().unwrap();
        assert!(matches!(r.len_delimited(), Err(ProtobufError::Truncated)));
    }
}
