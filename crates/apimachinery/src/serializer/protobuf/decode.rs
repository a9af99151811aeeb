//! Protobuf -> JSON form. Fields come out in the Go struct's order (as upstream's JSON has them);
//! unknown tags are skipped, as upstream's decoder does.
//!
//! Upstream writes every non-pointer scalar field even when it holds its zero value, and its JSON leaves
//! those out (`omitempty`); pointer fields are written only when set and keep their zero values
//! (`replicas: 0`, `automountServiceAccountToken: false`). So a zero-valued scalar is dropped unless its
//! Go field is a pointer (`pointers.txt`), and the JSON form is the one a JSON client would have sent.

use base64::Engine;
use serde_json::{Map, Number, Value};

use super::schema::{Field, FieldType, Label, MessageId, Scalar, Schema, Special};
use super::special;
use super::wire::{self, Reader};
use super::ProtobufError;

/// Nesting beyond this is refused (upstream's JSON decoder has a similar bound), so hostile input cannot
/// exhaust the stack.
const MAX_DEPTH: usize = 100;

pub struct Decoder<'s> {
    pub schema: &'s Schema,
}

enum Slot {
    Empty,
    Value(Value),
    List(Vec<Value>),
    Map(Map<String, Value>),
    /// An embedded struct: its fields are merged into the parent.
    Inline(Map<String, Value>),
}

impl Decoder<'_> {
    /// Decodes the body of message `id` into its JSON form (`None`: a value upstream's JSON omits).
    pub fn message(
        &self,
        id: MessageId,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Option<Value>, ProtobufError> {
        if depth > MAX_DEPTH {
            return Err(ProtobufError::Malformed(format!(
                "objects nested more than {MAX_DEPTH} levels deep"
            )));
        }
        let message = self.schema.message(id);
        if let Some(special) = message.special {
            return self.special(id, special, bytes, depth);
        }
        let mut slots: Vec<Slot> = message.fields.iter().map(|_| Slot::Empty).collect();
        let mut r = Reader::new(bytes);
        while !r.at_end() {
            let (tag, wire_type) = r.key()?;
            let Some(i) = message.field_by_tag(tag) else {
                r.skip(wire_type)?;
                continue;
            };
            let field = &message.fields[i];
            match field.label {
                Label::Optional => {
                    if let Some(v) = self.single(field, wire_type, &mut r, depth, true)? {
                        slots[i] = Slot::Value(v);
                    }
                }
                Label::Inline => {
                    let FieldType::Message(child) = field.ty else {
                        return Err(ProtobufError::Malformed(format!(
                            "{}: inline scalar",
                            field.json
                        )));
                    };
                    expect_wire(field, wire_type, wire::LEN)?;
                    let body = r.len_delimited()?;
                    if let Some(Value::Object(obj)) = self.message(child, body, depth + 1)? {
                        match &mut slots[i] {
                            Slot::Inline(existing) => existing.extend(obj),
                            slot => *slot = Slot::Inline(obj),
                        }
                    }
                }
                Label::Repeated => {
                    let mut values = Vec::new();
                    if wire_type == wire::LEN && is_packable(field.ty) {
                        let body = r.len_delimited()?;
                        let mut packed = Reader::new(body);
                        while !packed.at_end() {
                            let wire_of = packed_wire(field.ty);
                            if let Some(v) =
                                self.single(field, wire_of, &mut packed, depth, false)?
                            {
                                values.push(v);
                            }
                        }
                    } else if let Some(v) = self.single(field, wire_type, &mut r, depth, false)? {
                        values.push(v);
                    }
                    match &mut slots[i] {
                        Slot::List(existing) => existing.extend(values),
                        slot => *slot = Slot::List(values),
                    }
                }
                Label::Map(key_type) => {
                    expect_wire(field, wire_type, wire::LEN)?;
                    let (key, value) =
                        self.map_entry(field, key_type, r.len_delimited()?, depth)?;
                    match &mut slots[i] {
                        Slot::Map(existing) => {
                            existing.insert(key, value);
                        }
                        slot => *slot = Slot::Map(Map::from_iter([(key, value)])),
                    }
                }
            }
        }
        let mut obj = Map::new();
        for (field, slot) in message.fields.iter().zip(slots) {
            match slot {
                Slot::Empty => {}
                Slot::Value(v) => {
                    obj.insert(field.json.clone(), v);
                }
                Slot::List(items) if !items.is_empty() => {
                    obj.insert(field.json.clone(), Value::Array(items));
                }
                Slot::List(_) => {}
                Slot::Map(m) => {
                    obj.insert(field.json.clone(), Value::Object(m));
                }
                Slot::Inline(fields) => obj.extend(fields),
            }
        }
        Ok(Some(Value::Object(obj)))
    }

    fn map_entry(
        &self,
        field: &Field,
        key_type: Scalar,
        body: &[u8],
        depth: usize,
    ) -> Result<(String, Value), ProtobufError> {
        let mut key = String::new();
        let mut value = None;
        let mut r = Reader::new(body);
        while !r.at_end() {
            match r.key()? {
                (1, wire::LEN) if key_type == Scalar::String => {
                    key = utf8(r.len_delimited()?, &field.json)?;
                }
                (1, _) => {
                    return Err(ProtobufError::Invalid(format!(
                        "{}: map keys of type {key_type:?} are not supported",
                        field.json
                    )))
                }
                (2, wire_type) => {
                    value = self.value(field, field.ty, wire_type, &mut r, depth, false)?;
                }
                (_, wire_type) => r.skip(wire_type)?,
            }
        }
        // A map value always appears in JSON, zero or not (`data: {a: ""}`).
        let value = match (value, field.ty) {
            (Some(v), _) => v,
            (None, FieldType::Scalar(s)) => zero_of(s),
            (None, FieldType::Message(_)) => Value::Object(Map::new()),
        };
        Ok((key, value))
    }

    fn single(
        &self,
        field: &Field,
        wire_type: u8,
        r: &mut Reader<'_>,
        depth: usize,
        drop_zero: bool,
    ) -> Result<Option<Value>, ProtobufError> {
        let drop_zero = drop_zero && !field.pointer;
        self.value(field, field.ty, wire_type, r, depth, drop_zero)
    }

    fn value(
        &self,
        field: &Field,
        ty: FieldType,
        wire_type: u8,
        r: &mut Reader<'_>,
        depth: usize,
        drop_zero: bool,
    ) -> Result<Option<Value>, ProtobufError> {
        match ty {
            FieldType::Message(id) => {
                expect_wire(field, wire_type, wire::LEN)?;
                let body = r.len_delimited()?;
                self.message(id, body, depth + 1)
            }
            FieldType::Scalar(s) => {
                let v = scalar(field, s, wire_type, r)?;
                Ok((!(drop_zero && is_zero(&v))).then_some(v))
            }
        }
    }

    fn special(
        &self,
        id: MessageId,
        special: Special,
        bytes: &[u8],
        depth: usize,
    ) -> Result<Option<Value>, ProtobufError> {
        let message = self.schema.message(id);
        let mut seconds = 0i64;
        let mut nanos = 0i32;
        let mut number = 0i64;
        let mut text: Option<String> = None;
        let mut flag = false;
        let mut first: Option<Value> = None;
        let mut second: Vec<Value> = Vec::new();
        let mut r = Reader::new(bytes);
        while !r.at_end() {
            let (tag, wire_type) = r.key()?;
            let Some(i) = message.field_by_tag(tag) else {
                r.skip(wire_type)?;
                continue;
            };
            let field = &message.fields[i];
            match (special, tag) {
                (Special::Time | Special::MicroTime, 1) => seconds = r.varint()? as i64,
                (Special::Time | Special::MicroTime, 2) => nanos = r.varint()? as i64 as i32,
                (Special::Duration, 1) => number = r.varint()? as i64,
                (Special::IntOrString, 1) => flag = r.varint()? == 1,
                (Special::IntOrString, 2) => number = i64::from(r.varint()? as i64 as i32),
                (Special::Quantity | Special::IntOrString, 1 | 3) => {
                    text = Some(utf8(r.len_delimited()?, &message.name)?);
                }
                (Special::RawJson, 1) => {
                    let raw = r.len_delimited()?;
                    if raw.is_empty() {
                        return Ok(None);
                    }
                    first = Some(raw_json(self.schema, raw)?);
                }
                (Special::SchemaOrBool, 1) => flag = r.varint()? != 0,
                (Special::Items | Special::SchemaOrArray | Special::SchemaOrStringArray, _)
                | (Special::SchemaOrBool, 2) => {
                    let v = self
                        .value(field, field.ty, wire_type, &mut r, depth, false)?
                        .unwrap_or(Value::Null);
                    if tag == 1 && special != Special::Items {
                        first = Some(v);
                    } else {
                        second.push(v);
                    }
                }
                _ => r.skip(wire_type)?,
            }
        }
        Ok(match special {
            // An empty Time is Go's zero time, which upstream's JSON writes as null.
            Special::Time if bytes.is_empty() => None,
            Special::MicroTime if bytes.is_empty() => None,
            Special::Time => Some(Value::String(special::format_time(seconds)?)),
            Special::MicroTime => Some(Value::String(special::format_micro_time(seconds, nanos)?)),
            Special::Duration => Some(Value::String(special::format_duration(number))),
            Special::Quantity => text.map(Value::String),
            Special::IntOrString if flag => Some(Value::String(text.unwrap_or_default())),
            Special::IntOrString => Some(Value::Number(number.into())),
            Special::RawJson => first,
            Special::Items => Some(Value::Array(second)),
            Special::SchemaOrArray | Special::SchemaOrStringArray => {
                if second.is_empty() {
                    first
                } else {
                    Some(Value::Array(second))
                }
            }
            Special::SchemaOrBool => Some(second.pop().unwrap_or(Value::Bool(flag))),
        })
    }
}

/// An embedded object: JSON bytes (what upstream stores in `RawExtension.Raw` for JSON-born objects), or
/// a protobuf-encoded object in its envelope.
fn raw_json(schema: &Schema, raw: &[u8]) -> Result<Value, ProtobufError> {
    if raw.starts_with(&super::MAGIC) {
        return super::decode_with(schema, raw);
    }
    serde_json::from_slice(raw)
        .map_err(|e| ProtobufError::Invalid(format!("embedded object is not JSON: {e}")))
}

fn expect_wire(field: &Field, got: u8, want: u8) -> Result<(), ProtobufError> {
    if got == want {
        Ok(())
    } else {
        Err(ProtobufError::Malformed(format!(
            "{}: wire type {got}, expected {want}",
            field.json
        )))
    }
}

fn is_packable(ty: FieldType) -> bool {
    matches!(
        ty,
        FieldType::Scalar(
            Scalar::Bool
                | Scalar::Int32
                | Scalar::Int64
                | Scalar::Uint32
                | Scalar::Uint64
                | Scalar::Double
                | Scalar::Float
        )
    )
}

fn packed_wire(ty: FieldType) -> u8 {
    match ty {
        FieldType::Scalar(Scalar::Double) => wire::FIXED64,
        FieldType::Scalar(Scalar::Float) => wire::FIXED32,
        _ => wire::VARINT,
    }
}

fn utf8(bytes: &[u8], field: &str) -> Result<String, ProtobufError> {
    String::from_utf8(bytes.to_vec())
        .map_err(|_| ProtobufError::Invalid(format!("{field}: a string that is not UTF-8")))
}

fn zero_of(s: Scalar) -> Value {
    match s {
        Scalar::String | Scalar::Bytes => Value::String(String::new()),
        Scalar::Bool => Value::Bool(false),
        _ => Value::Number(0.into()),
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

fn float(v: f64, field: &str) -> Result<Value, ProtobufError> {
    Number::from_f64(v).map(Value::Number).ok_or_else(|| {
        ProtobufError::Invalid(format!("{field}: {v} cannot be represented in JSON"))
    })
}

fn scalar(
    field: &Field,
    s: Scalar,
    wire_type: u8,
    r: &mut Reader<'_>,
) -> Result<Value, ProtobufError> {
    let want = match s {
        Scalar::String | Scalar::Bytes => wire::LEN,
        Scalar::Double => wire::FIXED64,
        Scalar::Float => wire::FIXED32,
        _ => wire::VARINT,
    };
    expect_wire(field, wire_type, want)?;
    Ok(match s {
        Scalar::String => Value::String(utf8(r.len_delimited()?, &field.json)?),
        Scalar::Bytes => {
            Value::String(base64::engine::general_purpose::STANDARD.encode(r.len_delimited()?))
        }
        Scalar::Bool => Value::Bool(r.varint()? != 0),
        Scalar::Int32 => Value::Number((r.varint()? as i64 as i32).into()),
        Scalar::Int64 => Value::Number((r.varint()? as i64).into()),
        Scalar::Uint32 => Value::Number((r.varint()? as u32).into()),
        Scalar::Uint64 => Value::Number(r.varint()?.into()),
        Scalar::Double => float(f64::from_bits(r.fixed64()?), &field.json)?,
        Scalar::Float => float(f64::from(f32::from_bits(r.fixed32()?)), &field.json)?,
    })
}
