//! SPDY/3 frames and their wire form (upstream: the `spdy` framer vendored in `moby/spdystream`, which
//! Kubernetes' `httpstream/spdy` uses): control frames with a 15-bit version and 16-bit type, data
//! frames with a 31-bit stream id, 8 bits of flags and a 24-bit length. Header blocks are compressed
//! with one zlib stream per direction and connection, primed with the SPDY/3 dictionary and sync-flushed
//! after every block.
//!
//! Differences: CREDENTIAL frames and unknown control frame types are an error, as in Go's framer;
//! the version of received control frames is not checked (Go's framer does not either).

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::dictionary::HEADER_DICTIONARY;

pub const VERSION: u16 = 3;

pub const TYPE_SYN_STREAM: u16 = 1;
pub const TYPE_SYN_REPLY: u16 = 2;
pub const TYPE_RST_STREAM: u16 = 3;
pub const TYPE_SETTINGS: u16 = 4;
pub const TYPE_PING: u16 = 6;
pub const TYPE_GOAWAY: u16 = 7;
pub const TYPE_HEADERS: u16 = 8;
pub const TYPE_WINDOW_UPDATE: u16 = 9;

/// FIN on data frames and on SYN_STREAM / SYN_REPLY / HEADERS.
pub const FLAG_FIN: u8 = 0x01;
/// UNIDIRECTIONAL on SYN_STREAM.
pub const FLAG_UNIDIRECTIONAL: u8 = 0x02;

/// RST_STREAM status codes.
pub const RST_PROTOCOL_ERROR: u32 = 1;
pub const RST_INVALID_STREAM: u32 = 2;
pub const RST_REFUSED_STREAM: u32 = 3;
pub const RST_CANCEL: u32 = 5;

/// The largest payload a frame can carry (24-bit length).
pub const MAX_LENGTH: usize = (1 << 24) - 1;
/// Decompressed header blocks larger than this are refused (a compressed block can expand a lot).
const MAX_HEADER_BLOCK: usize = 1 << 20;
/// Go's framer refuses more header pairs than this.
const MAX_HEADER_COUNT: u32 = 1000;

/// Header names (lowercase) with their values; several values of one name travel NUL-separated.
pub type Headers = Vec<(String, Vec<String>)>;

/// The first value of a header, names compared case-insensitively.
pub fn header<'a>(headers: &'a Headers, name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .and_then(|(_, v)| v.first())
        .map(String::as_str)
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    SynStream {
        stream_id: u32,
        associated_to: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        flags: u8,
        /// (flags, id, value)
        entries: Vec<(u8, u32, u32)>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good_stream_id: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Bytes,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("invalid SPDY control frame: {0}")]
    InvalidControlFrame(&'static str),
    #[error("unknown SPDY control frame type {0}")]
    UnknownType(u16),
    #[error("SPDY stream id 0 is not allowed in a {0} frame")]
    ZeroStreamId(&'static str),
    #[error("SPDY frame too large ({0} bytes)")]
    TooLarge(usize),
    #[error("SPDY header block: {0}")]
    HeaderBlock(String),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Writes frames, compressing header blocks with this direction's zlib stream.
pub struct FrameEncoder {
    compress: Compress,
}

impl Default for FrameEncoder {
    fn default() -> Self {
        FrameEncoder::new()
    }
}

impl FrameEncoder {
    pub fn new() -> FrameEncoder {
        let mut compress = Compress::new(Compression::best(), true);
        // A fresh zlib stream always accepts a dictionary; the call cannot fail here.
        let _ = compress.set_dictionary(HEADER_DICTIONARY);
        FrameEncoder { compress }
    }

    pub fn encode(&mut self, frame: &Frame, out: &mut BytesMut) -> Result<(), FrameError> {
        match frame {
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                if data.len() > MAX_LENGTH {
                    return Err(FrameError::TooLarge(data.len()));
                }
                out.put_u32(stream_id & 0x7fff_ffff);
                out.put_u32((u32::from(*flags) << 24) | data.len() as u32);
                out.put_slice(data);
            }
            Frame::SynStream {
                stream_id,
                associated_to,
                priority,
                flags,
                headers,
            } => {
                let block = self.compress_headers(headers)?;
                let mut payload = BytesMut::with_capacity(10 + block.len());
                payload.put_u32(stream_id & 0x7fff_ffff);
                payload.put_u32(associated_to & 0x7fff_ffff);
                payload.put_u8((priority & 0x07) << 5);
                payload.put_u8(0); // slot
                payload.put_slice(&block);
                control(out, TYPE_SYN_STREAM, *flags, &payload)?;
            }
            Frame::SynReply {
                stream_id,
                flags,
                headers,
            } => {
                let block = self.compress_headers(headers)?;
                let mut payload = BytesMut::with_capacity(4 + block.len());
                payload.put_u32(stream_id & 0x7fff_ffff);
                payload.put_slice(&block);
                control(out, TYPE_SYN_REPLY, *flags, &payload)?;
            }
            Frame::Headers {
                stream_id,
                flags,
                headers,
            } => {
                let block = self.compress_headers(headers)?;
                let mut payload = BytesMut::with_capacity(4 + block.len());
                payload.put_u32(stream_id & 0x7fff_ffff);
                payload.put_slice(&block);
                control(out, TYPE_HEADERS, *flags, &payload)?;
            }
            Frame::RstStream { stream_id, status } => {
                let mut payload = BytesMut::with_capacity(8);
                payload.put_u32(stream_id & 0x7fff_ffff);
                payload.put_u32(*status);
                control(out, TYPE_RST_STREAM, 0, &payload)?;
            }
            Frame::Settings { flags, entries } => {
                let mut payload = BytesMut::with_capacity(4 + 8 * entries.len());
                payload.put_u32(entries.len() as u32);
                for (f, id, value) in entries {
                    payload.put_u32((u32::from(*f) << 24) | (id & 0x00ff_ffff));
                    payload.put_u32(*value);
                }
                control(out, TYPE_SETTINGS, *flags, &payload)?;
            }
            Frame::Ping { id } => control(out, TYPE_PING, 0, &id.to_be_bytes())?,
            Frame::GoAway {
                last_good_stream_id,
                status,
            } => {
                let mut payload = BytesMut::with_capacity(8);
                payload.put_u32(last_good_stream_id & 0x7fff_ffff);
                payload.put_u32(*status);
                control(out, TYPE_GOAWAY, 0, &payload)?;
            }
            Frame::WindowUpdate { stream_id, delta } => {
                let mut payload = BytesMut::with_capacity(8);
                payload.put_u32(stream_id & 0x7fff_ffff);
                payload.put_u32(delta & 0x7fff_ffff);
                control(out, TYPE_WINDOW_UPDATE, 0, &payload)?;
            }
        }
        Ok(())
    }

    fn compress_headers(&mut self, headers: &Headers) -> Result<Vec<u8>, FrameError> {
        let mut block = BytesMut::new();
        block.put_u32(headers.len() as u32);
        for (name, values) in headers {
            let name = name.to_ascii_lowercase();
            let value = values.join("\0");
            block.put_u32(name.len() as u32);
            block.put_slice(name.as_bytes());
            block.put_u32(value.len() as u32);
            block.put_slice(value.as_bytes());
        }
        let mut out = Vec::with_capacity(block.len() + 64);
        let mut input: &[u8] = &block;
        // Sync flush ends the block on a byte boundary so the peer can inflate it on its own.
        loop {
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            let before_in = self.compress.total_in();
            let status = self
                .compress
                .compress_vec(input, &mut out, FlushCompress::Sync)
                .map_err(|e| FrameError::HeaderBlock(e.to_string()))?;
            let consumed = (self.compress.total_in() - before_in) as usize;
            input = &input[consumed..];
            // Done once all input is in and the flush left spare room (zlib's signal that the flush
            // is complete).
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
            if status == Status::BufError && consumed == 0 {
                out.reserve(out.capacity().max(256));
            }
        }
        Ok(out)
    }
}

fn control(out: &mut BytesMut, kind: u16, flags: u8, payload: &[u8]) -> Result<(), FrameError> {
    if payload.len() > MAX_LENGTH {
        return Err(FrameError::TooLarge(payload.len()));
    }
    out.put_u16(0x8000 | VERSION);
    out.put_u16(kind);
    out.put_u32((u32::from(flags) << 24) | payload.len() as u32);
    out.put_slice(payload);
    Ok(())
}

/// Reads frames, inflating header blocks with this direction's zlib stream.
pub struct FrameDecoder {
    decompress: Decompress,
    /// Frames longer than this are refused.
    max_length: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        FrameDecoder::new()
    }
}

impl FrameDecoder {
    pub fn new() -> FrameDecoder {
        FrameDecoder {
            decompress: Decompress::new(true),
            max_length: MAX_LENGTH,
        }
    }

    /// Takes one whole frame off the front of `buf`, or returns `None` when more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        if buf.len() < 8 {
            return Ok(None);
        }
        let length = (u32::from_be_bytes([0, buf[5], buf[6], buf[7]])) as usize;
        if length > self.max_length {
            return Err(FrameError::TooLarge(length));
        }
        if buf.len() < 8 + length {
            buf.reserve(8 + length - buf.len());
            return Ok(None);
        }
        let first = buf.get_u32();
        let flags = buf.get_u8();
        buf.advance(3);
        let mut payload = buf.split_to(length).freeze();
        if first & 0x8000_0000 == 0 {
            let stream_id = first & 0x7fff_ffff;
            if stream_id == 0 {
                return Err(FrameError::ZeroStreamId("DATA"));
            }
            return Ok(Some(Frame::Data {
                stream_id,
                flags,
                data: payload,
            }));
        }
        let kind = (first & 0xffff) as u16;
        let need = |n: usize, what: &'static str| {
            if length < n {
                Err(FrameError::InvalidControlFrame(what))
            } else {
                Ok(())
            }
        };
        let frame = match kind {
            TYPE_SYN_STREAM => {
                need(10, "SYN_STREAM shorter than 10 bytes")?;
                let stream_id = payload.get_u32() & 0x7fff_ffff;
                let associated_to = payload.get_u32() & 0x7fff_ffff;
                let priority = payload.get_u8() >> 5;
                let _slot = payload.get_u8();
                let headers = self.inflate_headers(&payload)?;
                nonzero(stream_id, "SYN_STREAM")?;
                Frame::SynStream {
                    stream_id,
                    associated_to,
                    priority,
                    flags,
                    headers,
                }
            }
            TYPE_SYN_REPLY | TYPE_HEADERS => {
                need(4, "SYN_REPLY/HEADERS shorter than 4 bytes")?;
                let stream_id = payload.get_u32() & 0x7fff_ffff;
                let headers = self.inflate_headers(&payload)?;
                if kind == TYPE_SYN_REPLY {
                    nonzero(stream_id, "SYN_REPLY")?;
                    Frame::SynReply {
                        stream_id,
                        flags,
                        headers,
                    }
                } else {
                    nonzero(stream_id, "HEADERS")?;
                    Frame::Headers {
                        stream_id,
                        flags,
                        headers,
                    }
                }
            }
            TYPE_RST_STREAM => {
                need(8, "RST_STREAM shorter than 8 bytes")?;
                let stream_id = payload.get_u32() & 0x7fff_ffff;
                let status = payload.get_u32();
                if status == 0 {
                    return Err(FrameError::InvalidControlFrame("RST_STREAM with status 0"));
                }
                nonzero(stream_id, "RST_STREAM")?;
                Frame::RstStream { stream_id, status }
            }
            TYPE_SETTINGS => {
                need(4, "SETTINGS shorter than 4 bytes")?;
                let count = payload.get_u32() as usize;
                if count > (length - 4) / 8 {
                    return Err(FrameError::InvalidControlFrame(
                        "SETTINGS count exceeds its length",
                    ));
                }
                let entries = (0..count)
                    .map(|_| {
                        let id = payload.get_u32();
                        let value = payload.get_u32();
                        ((id >> 24) as u8, id & 0x00ff_ffff, value)
                    })
                    .collect();
                Frame::Settings { flags, entries }
            }
            TYPE_PING => {
                need(4, "PING shorter than 4 bytes")?;
                let id = payload.get_u32();
                if id == 0 {
                    return Err(FrameError::ZeroStreamId("PING"));
                }
                Frame::Ping { id }
            }
            TYPE_GOAWAY => {
                if length != 8 {
                    return Err(FrameError::InvalidControlFrame("GOAWAY length is not 8"));
                }
                Frame::GoAway {
                    last_good_stream_id: payload.get_u32() & 0x7fff_ffff,
                    status: payload.get_u32(),
                }
            }
            TYPE_WINDOW_UPDATE => {
                if length != 8 {
                    return Err(FrameError::InvalidControlFrame(
                        "WINDOW_UPDATE length is not 8",
                    ));
                }
                Frame::WindowUpdate {
                    stream_id: payload.get_u32() & 0x7fff_ffff,
                    delta: payload.get_u32() & 0x7fff_ffff,
                }
            }
            other => return Err(FrameError::UnknownType(other)),
        };
        Ok(Some(frame))
    }

    fn inflate_headers(&mut self, compressed: &[u8]) -> Result<Headers, FrameError> {
        let mut out: Vec<u8> = Vec::with_capacity(compressed.len() * 4 + 64);
        let mut input = compressed;
        loop {
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(1024));
            }
            let before = self.decompress.total_in();
            let out_before = out.len();
            let mut dictionary = false;
            match self
                .decompress
                .decompress_vec(input, &mut out, FlushDecompress::Sync)
            {
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() => {
                    self.decompress
                        .set_dictionary(HEADER_DICTIONARY)
                        .map_err(|e| FrameError::HeaderBlock(format!("dictionary: {e}")))?;
                    dictionary = true;
                }
                Err(e) => return Err(FrameError::HeaderBlock(e.to_string())),
            }
            let consumed = (self.decompress.total_in() - before) as usize;
            // Found by fuzzing: input left over that the inflater no longer takes (bytes after the
            // end of the zlib stream) made no progress and looped forever.
            if consumed == 0 && out.len() == out_before && !dictionary {
                return Err(FrameError::HeaderBlock(
                    "data the zlib stream does not take".into(),
                ));
            }
            input = &input[consumed..];
            if out.len() > MAX_HEADER_BLOCK {
                return Err(FrameError::HeaderBlock("larger than 1 MiB".into()));
            }
            if input.is_empty() && out.len() < out.capacity() {
                break;
            }
        }
        parse_header_block(&out)
    }
}

fn nonzero(stream_id: u32, what: &'static str) -> Result<(), FrameError> {
    if stream_id == 0 {
        Err(FrameError::ZeroStreamId(what))
    } else {
        Ok(())
    }
}

fn parse_header_block(mut block: &[u8]) -> Result<Headers, FrameError> {
    let bad = |m: &str| FrameError::HeaderBlock(m.to_string());
    if block.len() < 4 {
        return Err(bad("shorter than its count"));
    }
    let count = block.get_u32();
    if count > MAX_HEADER_COUNT {
        return Err(bad("too many headers"));
    }
    let mut headers: Headers = Vec::with_capacity(count as usize);
    let string = |block: &mut &[u8]| -> Result<String, FrameError> {
        if block.len() < 4 {
            return Err(bad("truncated length"));
        }
        let n = block.get_u32() as usize;
        if block.len() < n {
            return Err(bad("truncated string"));
        }
        let s = String::from_utf8_lossy(&block[..n]).into_owned();
        block.advance(n);
        Ok(s)
    };
    for _ in 0..count {
        let name = string(&mut block)?.to_ascii_lowercase();
        let value = string(&mut block)?;
        let values = value.split('\0').map(str::to_string).collect();
        if headers.iter().any(|(n, _)| *n == name) {
            return Err(bad("a header name appears twice"));
        }
        headers.push((name, values));
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &[&str])]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    /// Found by fuzzing (`fuzz/corpus/spdy_conn/timeout-trailing-zlib-data`): a SYN_STREAM whose
    /// header block goes on after the end of its zlib stream looped forever in `inflate_headers`.
    #[test]
    fn a_header_block_with_data_after_the_zlib_stream_is_an_error() {
        let input: &[u8] = b"\x80\x03\x00\x01\x00\x00\x00\x85\x16\x25\xac\xa9\xa0\x80\x06\xc6\x00\x00\x78\xf9\xe3\xc6\
              \xa7\xc2\x02\xe5\x0e\x70\x3a\x2b\x29\x4a\x4d\xcc\x85\x16\x3d\xac\xa9\xa0\x80\x06\xc6\xa7\
              \x0e\x02\x42\x70\xff\xff\xff\xff\xff\xff\xff\xff\xe5\x3a\x2b\x29\x4a\x4d\xcc\x77\x38\x8b\
              \x20\xd1\x96\x09\x4a\xce\x8c\x06\x00\x00\x00\x00\xff\xff\x03\x00\x24\x87\x29\xa4\x00\x00\
              \x4b\x52\x32\x00\x02\x4b\xce\x8c\x00\x36\x06\x00\xff\x00\x00\xff\x80\x03\x00\x01\x00\x00\
              \x00\x19\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x02\x11\x98\x8a\x8b\x4b\x52\xf3\x00\x32\
              \x00\x00\x00\x00\x08\x00\x00\x00\x03\x00\x00\x00\x00";
        let mut decoder = FrameDecoder::new();
        let mut buf = BytesMut::from(input);
        let mut frames = 0;
        while let Ok(Some(_)) = decoder.decode(&mut buf) {
            frames += 1;
        }
        assert!(frames < 4);
    }

    #[test]
    fn frames_round_trip_through_one_compression_context() {
        let frames = vec![
            Frame::SynStream {
                stream_id: 1,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: h(&[("streamtype", &["error"])]),
            },
            Frame::SynStream {
                stream_id: 3,
                associated_to: 0,
                priority: 7,
                flags: FLAG_FIN,
                headers: h(&[("streamtype", &["stdin"]), ("port", &["80", "81"])]),
            },
            Frame::SynReply {
                stream_id: 3,
                flags: 0,
                headers: vec![],
            },
            Frame::Data {
                stream_id: 3,
                flags: FLAG_FIN,
                data: Bytes::from_static(b"hello"),
            },
            Frame::Data {
                stream_id: 5,
                flags: 0,
                data: Bytes::new(),
            },
            Frame::Headers {
                stream_id: 2,
                flags: 0,
                headers: h(&[("x", &["y"])]),
            },
            Frame::RstStream {
                stream_id: 3,
                status: RST_CANCEL,
            },
            Frame::Settings {
                flags: 0,
                entries: vec![(0, 7, 65536)],
            },
            Frame::Ping { id: 1 },
            Frame::GoAway {
                last_good_stream_id: 2,
                status: 0,
            },
            Frame::WindowUpdate {
                stream_id: 1,
                delta: 4096,
            },
        ];
        let (mut enc, mut dec) = (FrameEncoder::new(), FrameDecoder::new());
        let mut wire = BytesMut::new();
        for f in &frames {
            enc.encode(f, &mut wire).unwrap();
        }
        // Feed the bytes in small pieces: frames may arrive split anywhere.
        let mut buf = BytesMut::new();
        let mut got = Vec::new();
        for chunk in wire.chunks(7) {
            buf.extend_from_slice(chunk);
            while let Some(f) = dec.decode(&mut buf).unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, frames);
    }

    #[test]
    fn first_header_block_names_the_dictionary() {
        let mut out = BytesMut::new();
        FrameEncoder::new()
            .encode(
                &Frame::SynReply {
                    stream_id: 1,
                    flags: 0,
                    headers: vec![],
                },
                &mut out,
            )
            .unwrap();
        // 8-byte control header, 4-byte stream id, then the zlib header with FDICT and the
        // dictionary's Adler-32 (0xe3c6a7c2), as Go's zlib.NewWriterLevelDict writes it.
        let zlib = &out[12..];
        assert_eq!(zlib[1] & 0x20, 0x20, "FDICT set");
        assert_eq!(&zlib[2..6], &[0xe3, 0xc6, 0xa7, 0xc2]);
        assert_eq!(
            &zlib[zlib.len() - 4..],
            &[0x00, 0x00, 0xff, 0xff],
            "sync flush"
        );
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("data on stream 0", vec![0, 0, 0, 0, 0, 0, 0, 1, b'x']),
            ("unknown control type", vec![0x80, 3, 0, 99, 0, 0, 0, 0]),
            (
                "short RST_STREAM",
                vec![0x80, 3, 0, 3, 0, 0, 0, 4, 0, 0, 0, 1],
            ),
            (
                "RST_STREAM status 0",
                vec![0x80, 3, 0, 3, 0, 0, 0, 8, 0, 0, 0, 1, 0, 0, 0, 0],
            ),
            (
                "GOAWAY length 4",
                vec![0x80, 3, 0, 7, 0, 0, 0, 4, 0, 0, 0, 1],
            ),
            (
                "SETTINGS count too large",
                vec![0x80, 3, 0, 4, 0, 0, 0, 4, 0, 0, 0, 9],
            ),
            (
                "SYN_REPLY with garbage header block",
                vec![0x80, 3, 0, 2, 0, 0, 0, 8, 0, 0, 0, 1, 1, 2, 3, 4],
            ),
            ("PING id 0", vec![0x80, 3, 0, 6, 0, 0, 0, 4, 0, 0, 0, 0]),
        ];
        for (name, bytes) in cases {
            let mut buf = BytesMut::from(&bytes[..]);
            assert!(
                FrameDecoder::new().decode(&mut buf).is_err(),
                "{name} should be refused"
            );
        }
    }

    #[test]
    fn incomplete_frames_wait_for_more_bytes() {
        let mut out = BytesMut::new();
        FrameEncoder::new()
            .encode(
                &Frame::Data {
                    stream_id: 1,
                    flags: 0,
                    data: Bytes::from_static(b"abcdef"),
                },
                &mut out,
            )
            .unwrap();
        let mut buf = BytesMut::from(&out[..10]);
        let mut dec = FrameDecoder::new();
        assert!(dec.decode(&mut buf).unwrap().is_none());
        buf.extend_from_slice(&out[10..]);
        assert!(matches!(
            dec.decode(&mut buf).unwrap(),
            Some(Frame::Data { .. })
        ));
    }
}
