//! JSON form -> protobuf: walks a message's fields in tag order (the order upstream writes them) and
//! writes what the JSON object holds. Absent and `null` fields are not written.

use base64::Engine;
use serde_json::{Map, Value};

use super::schema::{Field, FieldType, Label, MessageId, Scalar, Schema, Special};
use super::special;
use super::wire::{self, put_bytes, put_key, put_nested, put_varint};
use super::ProtobufError;

pub struct Encoder<'s> {
    pub schema: &'s Schema,
}

fn expected(what: &str, field: &str, got: &Value) -> ProtobufError {
    let got = match got {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    };
    ProtobufError::Invalid(format!("{field}: expected {what}, got {got}"))
}

impl Encoder<'_> {
    /// Writes the body of message `id` from its JSON form.
    pub fn message(
        &self,
        id: MessageId,
        value: &Value,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtobufError> {
        let message = self.schema.message(id);
        if let Some(special) = message.special {
            return self.special(id, special, value, out);
        }
        let Value::Object(obj) = value else {
            return Err(expected("an object", &message.name, value));
        };
        self.object_fields(id, obj, out)
    }

    fn object_fields(
        &self,
        id: MessageId,
        obj: &Map<String, Value>,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtobufError> {
        let message = self.schema.message(id);
        for &i in &message.tag_order {
            let field = &message.fields[i];
            if let (Label::Inline, FieldType::Message(child)) = (field.label, field.ty) {
                // Upstream always writes an embedded struct; its fields come from this same object.
                put_nested(out, field.tag, |o| self.object_fields(child, obj, o))?;
                continue;
            }
            let Some(value) = obj.get(&field.json).filter(|v| !v.is_null()) else {
                continue;
            };
            match field.label {
                Label::Optional | Label::Inline => self.single(field, value, out)?,
                Label::Repeated => {
                    let Value::Array(items) = value else {
                        return Err(expected("an array", &field.json, value));
                    };
                    for item in items.iter().filter(|v| !v.is_null()) {
                        self.single(field, item, out)?;
                    }
                }
                Label::Map(key_type) => {
                    let Value::Object(map) = value else {
                        return Err(expected("an object", &field.json, value));
                    };
                    // Upstream marshals maps with sorted keys, so equal objects give equal bytes.
                    let mut keys: Vec<&String> = map.keys().collect();
                    keys.sort();
                    for key in keys {
                        let entry_value = &map[key];
                        put_nested(out, field.tag, |o| {
                            self.map_key(key_type, key, &field.json, o)?;
                            if !entry_value.is_null() {
                                self.value(2, field.ty, entry_value, &field.json, o)?;
                            }
                            Ok(())
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    fn map_key(
        &self,
        key_type: Scalar,
        key: &str,
        field: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtobufError> {
        match key_type {
            Scalar::String => {
                put_bytes(out, 1, key.as_bytes());
                Ok(())
            }
            other => Err(ProtobufError::Invalid(format!(
                "{field}: map keys of type {other:?} are not supported"
            ))),
        }
    }

    fn single(&self, field: &Field, value: &Value, out: &mut Vec<u8>) -> Result<(), ProtobufError> {
        self.value(field.tag, field.ty, value, &field.json, out)
    }

    fn value(
        &self,
        tag: u32,
        ty: FieldType,
        value: &Value,
        name: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtobufError> {
        match ty {
            FieldType::Message(id) => put_nested(out, tag, |o| self.message(id, value, o)),
            FieldType::Scalar(s) => scalar(tag, s, value, name, out),
        }
    }

    fn special(
        &self,
        id: MessageId,
        special: Special,
        value: &Value,
        out: &mut Vec<u8>,
    ) -> Result<(), ProtobufError> {
        let message = self.schema.message(id);
        let name = message.name.as_str();
        let field = |tag: u32| -> Result<&Field, ProtobufError> {
            message
                .field_by_tag(tag)
                .map(|i| &message.fields[i])
                .ok_or_else(|| ProtobufError::Invalid(format!("{name} has no field {tag}")))
        };
        match special {
            Special::Time | Special::MicroTime => {
                let text = value
                    .as_str()
                    .ok_or_else(|| expected("a time string", name, value))?;
                let (seconds, nanos) = special::parse_time(text)?;
                // Time keeps whole seconds (as upstream's JSON does); MicroTime keeps microseconds.
                let nanos = if special == Special::Time {
                    0
                } else {
                    nanos / 1000 * 1000
                };
                put_key(out, 1, wire::VARINT);
                put_varint(out, seconds as u64);
                put_key(out, 2, wire::VARINT);
                put_varint(out, i64::from(nanos) as u64);
            }
            Special::Duration => {
                let text = value
                    .as_str()
                    .ok_or_else(|| expected("a duration string", name, value))?;
                put_key(out, 1, wire::VARINT);
                put_varint(out, special::parse_duration(text)? as u64);
            }
            Special::Quantity => {
                let text = match value {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => return Err(expected("a quantity", name, other)),
                };
                put_bytes(out, 1, text.as_bytes());
            }
            Special::IntOrString => match value {
                Value::Number(n) => {
                    let v = n
                        .as_i64()
                        .and_then(|v| i32::try_from(v).ok())
                        .ok_or_else(|| expected("an int32", name, value))?;
                    put_key(out, 1, wire::VARINT);
                    put_varint(out, 0);
                    put_key(out, 2, wire::VARINT);
                    put_varint(out, i64::from(v) as u64);
                    put_bytes(out, 3, b"");
                }
                Value::String(s) => {
                    put_key(out, 1, wire::VARINT);
                    put_varint(out, 1);
                    put_key(out, 2, wire::VARINT);
                    put_varint(out, 0);
                    put_bytes(out, 3, s.as_bytes());
                }
                other => return Err(expected("an integer or a string", name, other)),
            },
            Special::RawJson => {
                let raw =
                    serde_json::to_vec(value).map_err(|e| ProtobufError::Invalid(e.to_string()))?;
                put_bytes(out, 1, &raw);
            }
            Special::Items => {
                let Value::Array(items) = value else {
                    return Err(expected("an array", name, value));
                };
                let items_field = field(1)?;
                for item in items {
                    self.single(items_field, item, out)?;
                }
            }
            Special::SchemaOrArray => match value {
                Value::Array(items) => {
                    let schemas = field(2)?;
                    for item in items {
                        self.single(schemas, item, out)?;
                    }
                }
                other => self.single(field(1)?, other, out)?,
            },
            Special::SchemaOrBool => match value {
                Value::Bool(b) => {
                    put_key(out, 1, wire::VARINT);
                    put_varint(out, u64::from(*b));
                }
                other => {
                    put_key(out, 1, wire::VARINT);
                    put_varint(out, 1);
                    self.single(field(2)?, other, out)?;
                }
            },
            Special::SchemaOrStringArray => match value {
                Value::Array(items) => {
                    let property = field(2)?;
                    for item in items {
                        self.single(property, item, out)?;
                    }
                }
                other => self.single(field(1)?, other, out)?,
            },
        }
        Ok(())
    }
}

fn scalar(
    tag: u32,
    s: Scalar,
    value: &Value,
    name: &str,
    out: &mut Vec<u8>,
) -> Result<(), ProtobufError> {
    match s {
        Scalar::String => {
            let text = value
                .as_str()
                .ok_or_else(|| expected("a string", name, value))?;
            put_bytes(out, tag, text.as_bytes());
        }
        Scalar::Bytes => {
            let text = value
                .as_str()
                .ok_or_else(|| expected("base64 data", name, value))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|e| ProtobufError::Invalid(format!("{name}: illegal base64 data: {e}")))?;
            put_bytes(out, tag, &bytes);
        }
        Scalar::Bool => {
            let b = value
                .as_bool()
                .ok_or_else(|| expected("a boolean", name, value))?;
            put_key(out, tag, wire::VARINT);
            put_varint(out, u64::from(b));
        }
        Scalar::Int32 => {
            let v = value
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| expected("an int32", name, value))?;
            put_key(out, tag, wire::VARINT);
            put_varint(out, i64::from(v) as u64);
        }
        Scalar::Int64 => {
            let v = value
                .as_i64()
                .ok_or_else(|| expected("an int64", name, value))?;
            put_key(out, tag, wire::VARINT);
            put_varint(out, v as u64);
        }
        Scalar::Uint32 | Scalar::Uint64 => {
            let v = value
                .as_u64()
                .ok_or_else(|| expected("an unsigned integer", name, value))?;
            if s == Scalar::Uint32 && v > u64::from(u32::MAX) {
                return Err(expected("a uint32", name, value));
            }
            put_key(out, tag, wire::VARINT);
            put_varint(out, v);
        }
        Scalar::Double => {
            let v = value
                .as_f64()
                .ok_or_else(|| expected("a number", name, value))?;
            put_key(out, tag, wire::FIXED64);
            out.extend_from_slice(&v.to_le_bytes());
        }
        Scalar::Float => {
            let v = value
                .as_f64()
                .ok_or_else(|| expected("a number", name, value))?;
            put_key(out, tag, wire::FIXED32);
            out.extend_from_slice(&(v as f32).to_le_bytes());
        }
    }
    Ok(())
}
