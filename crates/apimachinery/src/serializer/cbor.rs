//! The Kubernetes CBOR serializer (upstream `runtime/serializer/cbor`, KEP-4222): objects as
//! `application/cbor` (RFC 8949), translated from and to the JSON form used everywhere in rkube.
//!
//! The rules are those of upstream's `internal/modes` encode and decode modes. Encoding is
//! deterministic: definite lengths, shortest heads, map entries sorted by their encoded keys,
//! floats in the narrowest width that keeps their value, strings as byte strings, and the
//! self-described CBOR tag 55799 in front as a magic number. Decoding takes what upstream's
//! unstructured decoding takes and rejects what it rejects (duplicate or non-string map keys,
//! invalid UTF-8 text, NaN and infinities, simple values besides false/true/null, bignums, and
//! nesting beyond 64 levels).

use std::borrow::Cow;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine as _;
use jiff::civil::DateTime;
use serde_json::{Map, Number, Value};

pub const MEDIA_TYPE: &str = "application/cbor";
/// The content type of a CBOR watch stream: a CBOR sequence (RFC 8742) of events.
pub const STREAM_MEDIA_TYPE: &str = "application/cbor-seq";

/// The head of tag 55799 ("self-described CBOR").
const SELF_DESCRIBED_PREFIX: [u8; 3] = [0xd9, 0xd9, 0xf7];
/// Upstream's `MaxNestedLevels`: each array and map is a level, and so is each tag that directly
/// encloses another tag.
const MAX_NESTED_LEVELS: usize = 64;

const MAJOR_UNSIGNED: u8 = 0;
const MAJOR_NEGATIVE: u8 = 1;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
const MAJOR_MAP: u8 = 5;
const MAJOR_TAG: u8 = 6;
const MAJOR_SIMPLE: u8 = 7;
/// Upstream writes every string and map key as a byte string (`String: StringToByteString`,
/// `FieldName: FieldNameToByteString`). Ours are valid UTF-8, so text strings would be valid CBOR
/// too, but upstream's typed decoders refuse text strings for `[]byte` fields (Secret data...).
const STRING_MAJOR: u8 = MAJOR_BYTES;
/// The additional information that marks an indefinite length (or, in major type 7, a "break").
const INDEFINITE: u8 = 31;
const BREAK: u8 = 0xff;

const TAG_RFC3339_TIME: u64 = 0;
const TAG_EPOCH_TIME: u64 = 1;
const TAG_POSITIVE_BIGNUM: u64 = 2;
const TAG_NEGATIVE_BIGNUM: u64 = 3;
/// "Expected later encoding" tags (RFC 8949 3.4.5.2): base64url, base64 and base16.
const TAG_EXPECTED_BASE64URL: u64 = 21;
const TAG_EXPECTED_BASE64: u64 = 22;
const TAG_EXPECTED_BASE16: u64 = 23;

#[derive(Debug, thiserror::Error)]
pub enum CborError {
    #[error("cbor: unexpected end of input")]
    Truncated,
    #[error("cbor: {count} bytes of extraneous data starting at index {offset}")]
    TrailingBytes { offset: usize, count: usize },
    #[error("cbor: malformed data item at index {offset}: {reason}")]
    Malformed { offset: usize, reason: &'static str },
    #[error("cbor: exceeded max nested level {MAX_NESTED_LEVELS}")]
    TooDeep,
    #[error("cbor: invalid UTF-8 string at index {offset}")]
    InvalidUtf8 { offset: usize },
    #[error("cbor: negative integer {0} overflows int64")]
    IntegerOverflow(String),
    #[error("cbor: floating-point {0} is not accepted: JSON cannot represent it")]
    NonFiniteFloat(&'static str),
    #[error("cbor: simple value {0} is not recognized")]
    UnrecognizedSimpleValue(u64),
    #[error("cbor: bignum tags (2 and 3) are not accepted")]
    Bignum,
    #[error("cbor: map key at index {offset} is not a text or byte string")]
    NonStringMapKey { offset: usize },
    #[error("cbor: found duplicate map key {0:?}")]
    DuplicateMapKey(String),
    #[error("cbor: invalid content for time tag {tag}: {reason}")]
    InvalidTime { tag: u64, reason: String },
}

/// Encodes a JSON value as upstream does: prefixed with the self-described CBOR tag 55799 (bytes d9 d9 f7).
pub fn encode(value: &Value) -> Vec<u8> {
    let mut out = SELF_DESCRIBED_PREFIX.to_vec();
    encode_untagged(value, &mut out);
    out
}

/// Same without the self-describe tag (for embedding).
pub fn encode_untagged(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.push(0xf6),
        Value::Bool(false) => out.push(0xf4),
        Value::Bool(true) => out.push(0xf5),
        Value::Number(number) => write_number(number, out),
        Value::String(text) => write_string(text, out),
        Value::Array(items) => {
            write_head(MAJOR_ARRAY, items.len() as u64, out);
            items.iter().for_each(|item| encode_untagged(item, out));
        }
        Value::Object(map) => {
            // Upstream's `SortBytewiseLexical` (RFC 8949 4.2.1): by the bytes of the encoded keys,
            // which puts shorter keys first.
            let mut entries: Vec<(Vec<u8>, &Value)> = Vec::with_capacity(map.len());
            for (key, value) in map {
                let mut encoded_key = Vec::with_capacity(key.len() + 9);
                write_string(key, &mut encoded_key);
                entries.push((encoded_key, value));
            }
            entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            write_head(MAJOR_MAP, entries.len() as u64, out);
            for (encoded_key, value) in entries {
                out.extend_from_slice(&encoded_key);
                encode_untagged(value, out);
            }
        }
    }
}

/// Decodes one CBOR data item (with or without the leading 55799 tag) into a JSON value; trailing bytes are an error.
pub fn decode(bytes: &[u8]) -> Result<Value, CborError> {
    let mut decoder = Decoder {
        input: bytes,
        pos: 0,
    };
    let value = decoder.decode_item(Context::default())?;
    match bytes.len() - decoder.pos {
        0 => Ok(value),
        count => Err(CborError::TrailingBytes {
            offset: decoder.pos,
            count,
        }),
    }
}

/// True if the bytes start with the self-describe tag (how upstream recognizes CBOR).
pub fn is_cbor(bytes: &[u8]) -> bool {
    bytes.starts_with(&SELF_DESCRIBED_PREFIX)
}

/// Writes a head with its argument in the shortest form.
fn write_head(major: u8, argument: u64, out: &mut Vec<u8>) {
    let (additional, width) = match argument {
        0..=23 => (argument as u8, 0),
        24..=0xff => (24, 1),
        0x100..=0xffff => (25, 2),
        0x1_0000..=0xffff_ffff => (26, 4),
        _ => (27, 8),
    };
    out.push(major << 5 | additional);
    out.extend_from_slice(&argument.to_be_bytes()[8 - width..]);
}

fn write_string(text: &str, out: &mut Vec<u8>) {
    write_head(STRING_MAJOR, text.len() as u64, out);
    out.extend_from_slice(text.as_bytes());
}

fn write_number(number: &Number, out: &mut Vec<u8>) {
    if let Some(unsigned) = number.as_u64() {
        write_head(MAJOR_UNSIGNED, unsigned, out);
    } else if let Some(negative) = number.as_i64() {
        // Major type 1 carries -1 - n, the bitwise complement of n.
        write_head(MAJOR_NEGATIVE, !negative as u64, out);
    } else if let Some(float) = number.as_f64() {
        write_float(float, out);
    } else {
        // Unreachable without serde_json's arbitrary_precision; null keeps the output well-formed.
        out.push(0xf6);
    }
}

/// Upstream's `ShortestFloat16`: the narrowest of half, single and double precision that holds the
/// value exactly, so equal values encode alike whatever width they were computed in.
fn write_float(float: f64, out: &mut Vec<u8>) {
    if let Some(half) = exact_half_bits(float) {
        out.push(0xf9);
        out.extend_from_slice(&half.to_be_bytes());
    } else if f64::from(float as f32) == float {
        out.push(0xfa);
        out.extend_from_slice(&(float as f32).to_bits().to_be_bytes());
    } else {
        out.push(0xfb);
        out.extend_from_slice(&float.to_bits().to_be_bytes());
    }
}

/// The IEEE 754 half-precision bits of a finite `float`, if it converts without rounding.
fn exact_half_bits(float: f64) -> Option<u16> {
    let bits = float.to_bits();
    let sign = ((bits >> 48) & 0x8000) as u16;
    let biased_exponent = ((bits >> 52) & 0x7ff) as i32;
    let mantissa = bits & ((1 << 52) - 1);
    if biased_exponent == 0 {
        // Zeros keep their sign; double subnormals are far below the half range.
        return (mantissa == 0).then_some(sign);
    }
    match biased_exponent - 1023 {
        exponent @ -14..=15 if mantissa.trailing_zeros() >= 42 => {
            Some(sign | (((exponent + 15) as u16) << 10) | (mantissa >> 42) as u16)
        }
        exponent @ -24..=-15 => {
            // A half subnormal is n * 2^-24: the whole significand must shift down to n exactly.
            let significand = mantissa | (1 << 52);
            let shift = (28 - exponent) as u32;
            let exact = significand.trailing_zeros() >= shift;
            exact.then(|| sign | (significand >> shift) as u16)
        }
        _ => None,
    }
}

fn half_to_f64(bits: u16) -> f64 {
    let fraction = f64::from(bits & 0x3ff);
    let magnitude = match (bits >> 10) & 0x1f {
        0 => fraction * 2f64.powi(-24),
        0x1f if fraction == 0.0 => f64::INFINITY,
        0x1f => f64::NAN,
        exponent => (1024.0 + fraction) * 2f64.powi(i32::from(exponent) - 25),
    };
    if bits & 0x8000 != 0 {
        -magnitude
    } else {
        magnitude
    }
}

#[derive(Clone, Copy, Default)]
struct Context {
    depth: usize,
    /// The innermost enclosing "expected later encoding" tag: it applies to every byte string
    /// inside it, as RFC 8949 3.4.5.2 says and upstream's decoder does.
    later_encoding: Option<u64>,
}

impl Context {
    fn nested(self) -> Result<Self, CborError> {
        let depth = self.depth + 1;
        if depth > MAX_NESTED_LEVELS {
            return Err(CborError::TooDeep);
        }
        Ok(Self { depth, ..self })
    }
}

struct Head {
    offset: usize,
    major: u8,
    additional: u8,
    argument: u64,
}

struct Decoder<'a> {
    input: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    fn remaining(&self) -> u64 {
        (self.input.len() - self.pos) as u64
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], CborError> {
        if len > self.remaining() {
            return Err(CborError::Truncated);
        }
        let start = self.pos;
        self.pos += len as usize;
        Ok(&self.input[start..self.pos])
    }

    fn take_array<const N: usize>(&mut self) -> Result<[u8; N], CborError> {
        let mut array = [0; N];
        array.copy_from_slice(self.take(N as u64)?);
        Ok(array)
    }

    /// Consumes the "break" that ends an indefinite-length item, if it comes next.
    fn at_break(&mut self) -> Result<bool, CborError> {
        let next = *self.input.get(self.pos).ok_or(CborError::Truncated)?;
        self.pos += usize::from(next == BREAK);
        Ok(next == BREAK)
    }

    fn read_head(&mut self) -> Result<Head, CborError> {
        let offset = self.pos;
        let [initial] = self.take_array()?;
        let (major, additional) = (initial >> 5, initial & 0x1f);
        let malformed = |reason| CborError::Malformed { offset, reason };
        let argument = match additional {
            0..=23 => u64::from(additional),
            24 => u64::from(u8::from_be_bytes(self.take_array()?)),
            25 => u64::from(u16::from_be_bytes(self.take_array()?)),
            26 => u64::from(u32::from_be_bytes(self.take_array()?)),
            27 => u64::from_be_bytes(self.take_array()?),
            28..=30 => return Err(malformed("reserved additional information")),
            _ if (MAJOR_BYTES..=MAJOR_MAP).contains(&major) => 0,
            _ if major == MAJOR_SIMPLE => return Err(malformed("unexpected \"break\"")),
            _ => return Err(malformed("indefinite length on an integer or tag")),
        };
        if major == MAJOR_SIMPLE && additional == 24 && argument < 32 {
            return Err(malformed("two-byte simple value below 32"));
        }
        Ok(Head {
            offset,
            major,
            additional,
            argument,
        })
    }

    fn decode_item(&mut self, context: Context) -> Result<Value, CborError> {
        let head = self.read_head()?;
        match head.major {
            MAJOR_UNSIGNED => Ok(Value::from(head.argument)),
            MAJOR_NEGATIVE => negative_integer(head.argument).map(Value::from),
            MAJOR_BYTES => {
                let bytes = self.read_string_bytes(&head)?;
                Ok(Value::String(byte_string_to_text(
                    &bytes,
                    context.later_encoding,
                )))
            }
            MAJOR_TEXT => self.read_text(&head).map(Value::String),
            MAJOR_ARRAY => self.decode_array(&head, context.nested()?),
            MAJOR_MAP => self.decode_map(&head, context.nested()?),
            MAJOR_TAG => self.decode_tag(head.argument, context),
            _ => decode_simple_or_float(&head),
        }
    }

    /// The content of a byte or text string, joining the chunks of an indefinite-length one.
    fn read_string_bytes(&mut self, head: &Head) -> Result<Cow<'a, [u8]>, CborError> {
        if head.additional != INDEFINITE {
            return self.take(head.argument).map(Cow::Borrowed);
        }
        let mut joined = Vec::new();
        while !self.at_break()? {
            let chunk = self.read_head()?;
            let offset = chunk.offset;
            if chunk.major != head.major || chunk.additional == INDEFINITE {
                let reason = "string chunk is not a definite string of the same type";
                return Err(CborError::Malformed { offset, reason });
            }
            let content = self.take(chunk.argument)?;
            // Every chunk of a text string is a text string itself, so valid UTF-8 on its own.
            if head.major == MAJOR_TEXT && std::str::from_utf8(content).is_err() {
                return Err(CborError::InvalidUtf8 { offset });
            }
            joined.extend_from_slice(content);
        }
        Ok(Cow::Owned(joined))
    }

    fn read_text(&mut self, head: &Head) -> Result<String, CborError> {
        let bytes = self.read_string_bytes(head)?.into_owned();
        let offset = head.offset;
        String::from_utf8(bytes).map_err(|_| CborError::InvalidUtf8 { offset })
    }

    /// Runs `each` once per element of an array or entry of a map, definite or indefinite.
    fn for_each_item(
        &mut self,
        head: &Head,
        mut each: impl FnMut(&mut Self) -> Result<(), CborError>,
    ) -> Result<(), CborError> {
        if head.additional == INDEFINITE {
            while !self.at_break()? {
                each(self)?;
            }
            return Ok(());
        }
        (0..head.argument).try_for_each(|_| each(self))
    }

    /// Preallocation for a definite array or map. Every element takes at least a byte, so a larger
    /// count is truncated input, and refusing it first bounds the allocation by the input size.
    fn capacity_for(&self, head: &Head) -> Result<usize, CborError> {
        match head.argument {
            count if count > self.remaining() => Err(CborError::Truncated),
            count => Ok(count as usize),
        }
    }

    fn decode_array(&mut self, head: &Head, context: Context) -> Result<Value, CborError> {
        let mut items = Vec::with_capacity(self.capacity_for(head)?);
        let mut decode_element =
            |decoder: &mut Self| decoder.decode_item(context).map(|item| items.push(item));
        self.for_each_item(head, &mut decode_element)?;
        Ok(Value::Array(items))
    }

    fn decode_map(&mut self, head: &Head, context: Context) -> Result<Value, CborError> {
        let mut map = Map::with_capacity(self.capacity_for(head)?);
        self.for_each_item(head, |decoder| decoder.decode_map_entry(&mut map, context))?;
        Ok(Value::Object(map))
    }

    fn decode_map_entry(
        &mut self,
        map: &mut Map<String, Value>,
        context: Context,
    ) -> Result<(), CborError> {
        let offset = self.pos;
        // Keys decode like any item, so text, byte and tagged strings all serve; duplicates are
        // found on the decoded strings, as upstream finds them ("a" as text and as bytes clash).
        let Value::String(key) = self.decode_item(context)? else {
            return Err(CborError::NonStringMapKey { offset });
        };
        if map.contains_key(&key) {
            return Err(CborError::DuplicateMapKey(key));
        }
        let value = self.decode_item(context)?;
        map.insert(key, value);
        Ok(())
    }

    fn decode_tag(&mut self, number: u64, mut context: Context) -> Result<Value, CborError> {
        if number == TAG_POSITIVE_BIGNUM || number == TAG_NEGATIVE_BIGNUM {
            return Err(CborError::Bignum);
        }
        let next_major = self.input.get(self.pos).map(|next| next >> 5);
        if next_major == Some(MAJOR_TAG) {
            context = context.nested()?;
        }
        match number {
            TAG_RFC3339_TIME => self.decode_rfc3339_time(),
            TAG_EPOCH_TIME => self.decode_epoch_time(),
            TAG_EXPECTED_BASE64URL..=TAG_EXPECTED_BASE16 => self.decode_item(Context {
                later_encoding: Some(number),
                ..context
            }),
            // Self-described CBOR (55799) and every unrecognized tag stand for their content.
            _ => self.decode_item(context),
        }
    }

    /// Tag 0 encloses an RFC 3339 text string. Upstream hands it out re-formatted as Go's
    /// RFC3339Nano, the JSON form of `metav1.Time` and friends.
    fn decode_rfc3339_time(&mut self) -> Result<Value, CborError> {
        let head = self.read_head()?;
        if head.major != MAJOR_TEXT {
            return Err(invalid_time(
                TAG_RFC3339_TIME,
                "content must be a text string",
            ));
        }
        let text = self.read_text(&head)?;
        match normalize_rfc3339(&text) {
            Some(normalized) => Ok(Value::String(normalized)),
            None => Err(invalid_time(
                TAG_RFC3339_TIME,
                format!("{text:?} is not RFC 3339"),
            )),
        }
    }

    /// Tag 1 encloses seconds since the epoch, an integer or a float; upstream hands it out as an
    /// RFC 3339 string in UTC.
    fn decode_epoch_time(&mut self) -> Result<Value, CborError> {
        let head = self.read_head()?;
        let (seconds, nanoseconds) = match head.major {
            MAJOR_UNSIGNED => (i64::try_from(head.argument).ok(), 0),
            MAJOR_NEGATIVE => (negative_integer(head.argument).ok(), 0),
            MAJOR_SIMPLE if (25..=27).contains(&head.additional) => {
                let float = float_from_head(&head)?;
                let seconds = (float.abs() < 9.2e18).then_some(float.trunc() as i64);
                (seconds, (float.fract() * 1e9) as i32)
            }
            _ => {
                return Err(invalid_time(
                    TAG_EPOCH_TIME,
                    "content must be an integer or a float",
                ))
            }
        };
        // Go's `Time.MarshalText` refuses years outside [0,9999] (jiff itself stops at 9999).
        let timestamp = seconds.and_then(|seconds| jiff::Timestamp::new(seconds, nanoseconds).ok());
        match timestamp.map(|timestamp| jiff::tz::Offset::UTC.to_datetime(timestamp)) {
            Some(utc) if utc.year() >= 0 => Ok(Value::String(format_rfc3339_nano(utc, 0))),
            _ => Err(invalid_time(
                TAG_EPOCH_TIME,
                "time outside the years 0 to 9999",
            )),
        }
    }
}

fn invalid_time(tag: u64, reason: impl Into<String>) -> CborError {
    CborError::InvalidTime {
        tag,
        reason: reason.into(),
    }
}

/// Major type 1 carries -1 - argument. Below i64::MIN upstream refuses the value
/// (`IntDecConvertSignedOrFail`) rather than lose the integer/float distinction to a float.
/// (Positive integers up to u64::MAX are kept: upstream's unstructured form stops at int64, but
/// serde_json holds them exactly, so they round-trip.)
fn negative_integer(argument: u64) -> Result<i64, CborError> {
    match i64::try_from(argument) {
        Ok(magnitude) => Ok(-1 - magnitude),
        Err(_) => Err(CborError::IntegerOverflow(format!(
            "-{}",
            u128::from(argument) + 1
        ))),
    }
}

/// Byte strings decode to strings (upstream's `DefaultByteStringType` is string), text-encoded as
/// an enclosing tag 21/22/23 asks. Invalid UTF-8 becomes U+FFFD, which is what that Go string
/// shows once upstream writes it as JSON.
fn byte_string_to_text(bytes: &[u8], later_encoding: Option<u64>) -> String {
    match later_encoding {
        Some(TAG_EXPECTED_BASE64URL) => URL_SAFE_NO_PAD.encode(bytes),
        Some(TAG_EXPECTED_BASE64) => STANDARD.encode(bytes),
        Some(TAG_EXPECTED_BASE16) => bytes.iter().map(|byte| format!("{byte:02x}")).collect(),
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

fn float_from_head(head: &Head) -> Result<f64, CborError> {
    let float = match head.additional {
        25 => half_to_f64(head.argument as u16),
        26 => f64::from(f32::from_bits(head.argument as u32)),
        _ => f64::from_bits(head.argument),
    };
    match float {
        _ if float.is_nan() => Err(CborError::NonFiniteFloat("NaN")),
        _ if float.is_infinite() => Err(CborError::NonFiniteFloat("infinity")),
        _ => Ok(float),
    }
}

/// Only false, true and null have JSON counterparts; upstream rejects undefined and the rest too.
fn decode_simple_or_float(head: &Head) -> Result<Value, CborError> {
    match head.additional {
        20 => Ok(Value::Bool(false)),
        21 => Ok(Value::Bool(true)),
        22 => Ok(Value::Null),
        25..=27 => {
            let float = float_from_head(head)?;
            Number::from_f64(float)
                .map(Value::Number)
                .ok_or(CborError::NonFiniteFloat("value"))
        }
        _ => Err(CborError::UnrecognizedSimpleValue(head.argument)),
    }
}

/// Parses `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)` as strictly as Go's `time.Parse` with
/// `time.RFC3339`, and formats it back as Go's `Time.MarshalText` does.
fn normalize_rfc3339(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let digits = |at: usize, len: usize| -> Option<i32> {
        let field = text.get(at..at + len)?;
        field
            .bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| field.parse().ok())?
    };
    let separators = b"--T::".iter().zip([4, 7, 10, 13, 16]);
    if bytes.len() < 20 || separators.into_iter().any(|(&c, at)| bytes[at] != c) {
        return None;
    }
    let mut rest = &text[19..];
    let mut nanoseconds = 0;
    if let Some(fraction) = rest.strip_prefix('.') {
        let count = fraction.bytes().take_while(u8::is_ascii_digit).count();
        // Go keeps nanoseconds and ignores any further digits.
        let kept = &fraction[..count.min(9)];
        nanoseconds = format!("{kept:0<9}").parse().ok().filter(|_| count > 0)?;
        rest = &fraction[count..];
    }
    let offset_minutes = match rest.as_bytes() {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (hours, minutes) = (digits(text.len() - 5, 2)?, digits(text.len() - 2, 2)?);
            (hours < 24 && minutes < 60).then_some(())?;
            (if *sign == b'-' { -1 } else { 1 }) * (hours * 60 + minutes)
        }
        _ => return None,
    };
    let year = digits(0, 4)? as i16;
    let [month, day, hour, minute, second] =
        [5, 8, 11, 14, 17].map(|at| digits(at, 2).map(|n| n as i8));
    // Validates the calendar date, and rejects hour 24 and second 60 as Go does.
    let datetime = DateTime::new(year, month?, day?, hour?, minute?, second?, nanoseconds).ok()?;
    Some(format_rfc3339_nano(datetime, offset_minutes))
}

/// Go's RFC3339Nano layout: a fraction without trailing zeros, "Z" for a zero offset.
fn format_rfc3339_nano(datetime: DateTime, offset_minutes: i32) -> String {
    if offset_minutes == 0 {
        return format!("{datetime}Z");
    }
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let minutes = offset_minutes.unsigned_abs();
    format!("{datetime}{sign}{:02}:{:02}", minutes / 60, minutes % 60)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn hex(text: &str) -> Vec<u8> {
        let byte = |i: usize| u8::from_str_radix(&text[i..i + 2], 16).unwrap();
        (0..text.len()).step_by(2).map(byte).collect()
    }

    fn encoded(value: &Value) -> Vec<u8> {
        let mut out = Vec::new();
        encode_untagged(value, &mut out);
        out
    }

    /// Whitespace-separated `json hex` pairs; floats are parsed by Rust, which rounds correctly.
    fn fixtures(table: &str) -> Vec<(Value, Vec<u8>)> {
        let tokens: Vec<&str> = table.split_whitespace().collect();
        let parse = |text: &str| match serde_json::from_str::<Value>(text).unwrap() {
            value if value.is_f64() => json!(text.parse::<f64>().unwrap()),
            value => value,
        };
        tokens
            .chunks(2)
            .map(|pair| (parse(pair[0]), hex(pair[1])))
            .collect()
    }

    fn assert_decodes(table: &str) {
        for (value, bytes) in fixtures(table) {
            assert_eq!(decode(&bytes).unwrap(), value, "decoding {bytes:02x?}");
        }
    }

    /// Every whitespace-separated hex input fails to decode with an error matching the pattern.
    macro_rules! assert_rejected {
        ($inputs:expr, $error:pat) => {
            for input in $inputs.split_whitespace() {
                let result = decode(&hex(input));
                assert!(matches!(result, Err($error)), "{input}: {result:?}");
            }
        };
    }

    /// RFC 8949 Appendix A examples that upstream's encode mode reproduces byte for byte.
    const APPENDIX_A: &str = r#"
        0 00  1 01  10 0a  23 17  24 1818  25 1819  100 1864  1000 1903e8  1000000 1a000f4240
        1000000000000 1b000000e8d4a51000  18446744073709551615 1bffffffffffffffff
        -1 20  -10 29  -100 3863  -1000 3903e7  -9223372036854775808 3b7fffffffffffffff
        0.0 f90000  -0.0 f98000  1.0 f93c00  1.1 fb3ff199999999999a  1.5 f93e00  65504.0 f97bff
        100000.0 fa47c35000  3.4028234663852886e+38 fa7f7fffff  1.0e+300 fb7e37e43c8800759c
        5.960464477539063e-8 f90001  0.00006103515625 f90400  -4.0 f9c400  -4.1 fbc010666666666666
        false f4  true f5  null f6  [] 80  [1,2,3] 83010203  [1,[2,3],[4,5]] 8301820203820405
        [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25]
        98190102030405060708090a0b0c0d0e0f101112131415161718181819  {} a0
    "#;

    #[test]
    fn appendix_a_examples_encode_and_decode_exactly() {
        for (value, bytes) in fixtures(APPENDIX_A) {
            assert_eq!(encoded(&value), bytes, "encoding {value}");
            let decoded = decode(&bytes).unwrap();
            assert_eq!((&decoded, decoded.is_f64()), (&value, value.is_f64()));
        }
    }

    /// The RFC's text-string examples decode as given; upstream re-encodes them as byte strings.
    #[test]
    fn strings_decode_from_text_and_encode_as_byte_strings() {
        let rfc = r#""" 60  "a" 6161  "IETF" 6449455446  "\"\\" 62225c  "ü" 62c3bc  "水" 63e6b0b4
            "𐅑" 64f0908591  {"a":1,"b":[2,3]} a26161016162820203  ["a",{"b":"c"}] 826161a161626163"#;
        let upstream = r#""" 40  "a" 4161  "IETF" 4449455446  "\"\\" 42225c  "ü" 42c3bc  "水" 43e6b0b4
            "𐅑" 44f0908591  {"a":1,"b":[2,3]} a24161014162820203  ["a",{"b":"c"}] 824161a141624163"#;
        assert_decodes(rfc);
        assert_decodes(upstream);
        for (value, bytes) in fixtures(upstream) {
            assert_eq!(encoded(&value), bytes, "encoding {value}");
        }
        // Map entries sort by encoded key, so shorter keys come first.
        assert_eq!(
            encoded(&json!({"Fun": true, "Amt": -2})),
            hex("a243416d74214346756ef5")
        );
        assert_eq!(
            encoded(&json!({"bb": 1, "c": 2, "a": 3})),
            hex("a341610341630242626201")
        );
    }

    #[test]
    fn self_described_tag_prefixes_output_and_is_optional_on_input() {
        let bytes = encode(&json!({"a": null}));
        assert_eq!(bytes, hex("d9d9f7a14161f6"));
        assert!(is_cbor(&bytes) && !is_cbor(&bytes[3..]) && !is_cbor(b"{}"));
        assert_decodes(
            r#"{"a":null} d9d9f7a14161f6  {"a":null} a14161f6  [1,2] 82d9d9f701d9d9f7d9d9f702"#,
        );
    }

    #[test]
    fn values_round_trip_keeping_integers_and_floats_apart() {
        let value = json!({
            "metadata": {"name": "x", "labels": {"ü": "水", "empty": ""}, "finalizers": []},
            "ints": [0, -1, 24, 255, 256, 65535, 65536, u32::MAX, u64::MAX, i64::MIN, i64::MAX],
            "floats": [1.0, 0.1, -2.5, 1e300, 5e-324, 3.4028234663852886e38, 1e-7, -0.0],
            "nested": [[[{"deep": [null, true, false]}]]],
            "long": "x".repeat(70000),
        });
        let decoded = decode(&encode(&value)).unwrap();
        assert_eq!(decoded, value);
        let kinds =
            |key: &str, kind: fn(&Value) -> bool| decoded[key].as_array().unwrap().iter().all(kind);
        assert!(kinds("floats", Value::is_f64) && kinds("ints", |n| n.is_i64() || n.is_u64()));
    }

    #[test]
    fn integers_beyond_the_object_form_and_bignums_are_rejected() {
        assert_rejected!(
            "3bffffffffffffffff 3b8000000000000000",
            CborError::IntegerOverflow(_)
        );
        let bignums = "c249010000000000000000 c349010000000000000000 c2d9d9f740";
        assert_rejected!(bignums, CborError::Bignum);
    }

    #[test]
    fn duplicate_and_non_string_map_keys_are_rejected() {
        // Text twice, bytes and text, and one key split into chunks two ways.
        let duplicates = "a2614101614102 a2414101614102 a25f426865436c6c6fff015f416844656c6c6fff02";
        assert_rejected!(duplicates, CborError::DuplicateMapKey(_));
        let non_strings = "a201020304 a1fb40091eb851eb851f63706965 a1f601 a1800102";
        assert_rejected!(non_strings, CborError::NonStringMapKey { .. });
    }

    #[test]
    fn every_truncation_is_an_error() {
        let sample = encode(&json!({
            "spec": {"containers": [{"name": "ü", "args": ["a", "bb"], "port": 8080}]},
            "n": [1.1, 1.5, 100000.0, u64::MAX, i64::MIN, null, true],
            "long": "y".repeat(300),
        }));
        for len in 0..sample.len() {
            assert!(
                decode(&sample[..len]).is_err(),
                "a prefix of {len} bytes decoded"
            );
        }
        // Length heads far beyond the input fail before anything is allocated for them.
        let huge = "9bffffffffffffffff bbffffffffffffffff 5bffffffffffffffff 7b7fffffffffffffff01";
        assert_rejected!(huge, CborError::Truncated);
        assert_rejected!("0000 9fff01", CborError::TrailingBytes { .. });
    }

    #[test]
    fn nesting_is_limited_to_64_levels() {
        let arrays = |depth: usize| [vec![0x81; depth - 1], vec![0x80]].concat();
        let maps = [[0xa1, 0x41, b'k'].repeat(65), vec![0xf6]].concat();
        // A tag adds no level of its own; a tag directly inside another tag adds one.
        let tags = |count: usize| [SELF_DESCRIBED_PREFIX.repeat(count), vec![0x00]].concat();
        let tagged = [SELF_DESCRIBED_PREFIX.to_vec(), arrays(64)].concat();
        for ok in [arrays(64), tagged, tags(65)] {
            assert!(decode(&ok).is_ok());
        }
        for too_deep in [arrays(65), arrays(1_000_000), maps, tags(66)] {
            assert!(matches!(decode(&too_deep), Err(CborError::TooDeep)));
        }
    }

    #[test]
    fn invalid_utf8_in_text_strings_is_rejected() {
        // Each chunk must be valid on its own, even when the joined bytes would be.
        assert_rejected!("6180 7f61c361bcff", CborError::InvalidUtf8 { .. });
        // Byte strings carry unchecked Go strings: U+FFFD, as in upstream's JSON of them.
        assert_eq!(decode(&hex("4180")).unwrap(), json!("\u{fffd}"));
    }

    #[test]
    fn non_finite_floats_and_other_simple_values_are_rejected() {
        let floats =
            "f97e00 f97c00 f9fc00 fa7fc00000 fa7f800000 fb7ff8000000000000 fbfff0000000000000";
        assert_rejected!(floats, CborError::NonFiniteFloat(_));
        let simple = "f7 f0 e0 f820 f8ff";
        assert_rejected!(simple, CborError::UnrecognizedSimpleValue(_));
        // Two-byte simple value below 32, reserved additional information, misplaced indefinite
        // lengths and "break".
        assert_rejected!("f818 1c fc 3f df00 ff", CborError::Malformed { .. });
    }

    /// Upstream's decode mode allows indefinite lengths (`IndefLengthAllowed`); its encoder never
    /// writes them.
    #[test]
    fn indefinite_lengths_are_accepted_on_input_only() {
        assert_decodes(
            r#""\u0001\u0002\u0003\u0004\u0005" 5f42010243030405ff  "streaming" 7f657374726561646d696e67ff
            [] 9fff  [1,[2,3],[4,5]] 9f018202039f0405ffff  [1,[2,3],[4,5]] 83019f0203ff820405
            {"a":1,"b":[2,3]} bf61610161629f0203ffff  {"Fun":true,"Amt":-2} bf6346756ef563416d7421ff"#,
        );
        assert_rejected!(
            "5f5f4101ffff 7f4161ff bf6161ff",
            CborError::Malformed { .. }
        );
        assert_rejected!("9f01 5f4101 7f6161 bf", CborError::Truncated);
        let definite = encoded(&decode(&hex("9f018202039f0405ffff")).unwrap());
        assert_eq!(definite, hex("8301820203820405"));
    }

    #[test]
    fn tags_decode_as_upstream() {
        assert_decodes(
            r#""2013-03-21T20:04:00Z" c074323031332d30332d32315432303a30343a30305a
            "2013-03-21T20:04:00Z" c11a514b67b0  "2013-03-21T20:04:00.5Z" c1fb41d452d9ec200000
            "1969-12-31T23:59:59Z" c120  "1970-01-01T00:00:01Z" c1f93c00  [-2,27315] c48221196ab3
            "dIETF" d818456449455446  "AQIDBA==" d64401020304  "AQIDBA" d54401020304
            "01020304" d74401020304  ["AQ==",["02"]] d6824101d7814102  {"AQ==":"Ag=="} d6a141014102"#,
        );
        let tag_0 =
            |text: &str| decode(&[&[0xc0, 0x78, text.len() as u8], text.as_bytes()].concat());
        let normalized = [
            (
                "2013-03-21T20:04:00.500+01:00",
                "2013-03-21T20:04:00.5+01:00",
            ),
            ("2013-03-21T20:04:00.0-00:00", "2013-03-21T20:04:00Z"),
            (
                "2013-03-21T20:04:00.1234567891Z",
                "2013-03-21T20:04:00.123456789Z",
            ),
        ];
        for (text, expected) in normalized {
            assert_eq!(tag_0(text).unwrap(), json!(expected));
        }
        let bad = "text 2013-02-30T20:04:00Z 2013-03-21t20:04:00Z 2013-03-21T24:00:00Z 2013-03-21T20:04:00
            2013-03-21T20:04:00.Z 2013-03-21T20:04:60Z 2013-3-21T20:04:00Z 2013-03-21T20:04:00+01:00:00";
        for text in bad.split_whitespace() {
            assert!(
                matches!(tag_0(text), Err(CborError::InvalidTime { tag: 0, .. })),
                "{text}"
            );
        }
        // Tag 0 on a byte string, a year past 9999, tag 1 on a string, tag 1 on a tag.
        let invalid = "c0426161 c11b0000003afff44181 c16161 c1d9d9f700";
        assert_rejected!(invalid, CborError::InvalidTime { .. });
        assert_rejected!("c1f97e00", CborError::NonFiniteFloat(_));
    }
}
