//! The Kubernetes protobuf serializer (upstream `runtime/serializer/protobuf`): objects of built-in kinds
//! as `application/vnd.kubernetes.protobuf`.
//!
//! On the wire an object is the 4-byte magic `k8s\0` followed by a `runtime.Unknown` message holding the
//! `apiVersion`/`kind` and the object's own message in `raw`. Watch streams send `metav1.WatchEvent`
//! messages without the magic, each prefixed by its length as a 4-byte big-endian integer, the event's
//! object being an enveloped object in `object.raw`.
//!
//! The message layouts come from upstream's `generated.proto` files ([`schema`]); the codec translates
//! between them and the JSON form every other part of rkube works with, so no per-kind code exists.

mod decode;
mod encode;
pub mod schema;
mod special;
pub mod wire;

use serde_json::{Map, Value};

use schema::{Schema, SCHEMA};
use wire::{put_bytes, put_nested, Reader};

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The content type of a protobuf watch stream.
pub const STREAM_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";
/// Every enveloped protobuf object starts with these bytes.
pub const MAGIC: [u8; 4] = *b"k8s\0";

#[derive(Debug, thiserror::Error)]
pub enum ProtobufError {
    #[error("the protobuf data ends in the middle of a field")]
    Truncated,
    #[error("malformed protobuf data: {0}")]
    Malformed(String),
    #[error("{0}")]
    Invalid(String),
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NoMagic,
    #[error("no kind {kind:?} is registered for version {api_version:?} in protobuf")]
    UnknownKind { api_version: String, kind: String },
}

/// Whether `kind` of `api_version` has a protobuf form (built-in kinds and the meta kinds do; custom
/// resources do not, as upstream).
pub fn supports(api_version: &str, kind: &str) -> bool {
    SCHEMA.kind(api_version, kind).is_some()
}

/// Encodes an object in its JSON form (with `apiVersion` and `kind`) as an enveloped protobuf object.
pub fn encode(object: &Value) -> Result<Vec<u8>, ProtobufError> {
    let schema = &*SCHEMA;
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
    let id = schema
        .kind(api_version, kind)
        .ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.into(),
            kind: kind.into(),
        })?;
    let encoder = encode::Encoder { schema };
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(&MAGIC);
    put_nested::<ProtobufError>(&mut out, 1, |o| {
        put_bytes(o, 1, api_version.as_bytes());
        put_bytes(o, 2, kind.as_bytes());
        Ok(())
    })?;
    put_nested(&mut out, 2, |o| encoder.message(id, object, o))?;
    // Upstream writes the (empty) content encoding and type too.
    put_bytes(&mut out, 3, b"");
    put_bytes(&mut out, 4, b"");
    Ok(out)
}

/// Decodes an enveloped protobuf object into its JSON form, `apiVersion` and `kind` first.
pub fn decode(bytes: &[u8]) -> Result<Value, ProtobufError> {
    decode_with(&SCHEMA, bytes)
}

fn decode_with(schema: &Schema, bytes: &[u8]) -> Result<Value, ProtobufError> {
    let Some(body) = bytes.strip_prefix(&MAGIC) else {
        return Err(ProtobufError::NoMagic);
    };
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    let mut r = Reader::new(body);
    while !r.at_end() {
        match r.key()? {
            (1, wire::LEN) => {
                let mut type_meta = Reader::new(r.len_delimited()?);
                while !type_meta.at_end() {
                    match type_meta.key()? {
                        (1, wire::LEN) => api_version = text(type_meta.len_delimited()?)?,
                        (2, wire::LEN) => kind = text(type_meta.len_delimited()?)?,
                        (_, w) => type_meta.skip(w)?,
                    }
                }
            }
            (2, wire::LEN) => raw = r.len_delimited()?,
            (3, wire::LEN) => {
                let encoding = r.len_delimited()?;
                if !encoding.is_empty() {
                    return Err(ProtobufError::Invalid(format!(
                        "unsupported content encoding {:?}",
                        String::from_utf8_lossy(encoding)
                    )));
                }
            }
            (_, w) => r.skip(w)?,
        }
    }
    let id = schema
        .kind(&api_version, &kind)
        .ok_or_else(|| ProtobufError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind.clone(),
        })?;
    let decoder = decode::Decoder { schema };
    let mut obj = Map::new();
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    if let Some(Value::Object(fields)) = decoder.message(id, raw, 0)? {
        obj.extend(fields);
    }
    Ok(Value::Object(obj))
}

fn text(bytes: &[u8]) -> Result<String, ProtobufError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ProtobufError::Invalid("type meta is not UTF-8".into()))
}

/// One frame of a protobuf watch stream: the length prefix and a `WatchEvent` of `event_type` whose
/// object is `object`, an enveloped protobuf object (as [`encode`] makes).
pub fn watch_event_frame(event_type: &str, object: &[u8]) -> Vec<u8> {
    let mut event = Vec::with_capacity(object.len() + 32);
    put_bytes(&mut event, 1, event_type.as_bytes());
    put_nested::<()>(&mut event, 2, |o| {
        put_bytes(o, 1, object);
        Ok(())
    })
    .expect("infallible");
    let mut frame = Vec::with_capacity(event.len() + 4);
    frame.extend_from_slice(&(event.len() as u32).to_be_bytes());
    frame.extend_from_slice(&event);
    frame
}

/// Reads one `WatchEvent` (a frame without its length prefix): its type and its object's JSON form.
pub fn decode_watch_event(event: &[u8]) -> Result<(String, Value), ProtobufError> {
    let mut event_type = String::new();
    let mut object = Value::Null;
    let mut r = Reader::new(event);
    while !r.at_end() {
        match r.key()? {
            (1, wire::LEN) => event_type = text(r.len_delimited()?)?,
            (2, wire::LEN) => {
                let mut raw_extension = Reader::new(r.len_delimited()?);
                while !raw_extension.at_end() {
                    match raw_extension.key()? {
                        (1, wire::LEN) => object = decode(raw_extension.len_delimited()?)?,
                        (_, w) => raw_extension.skip(w)?,
                    }
                }
            }
            (_, w) => r.skip(w)?,
        }
    }
    Ok((event_type, object))
}

#[cfg(test)]
mod tests;
