//! Protobuf message bytes → the JSON a Go client would have written for the same object.
//!
//! Presence follows Go: gogo-protobuf writes every non-pointer field (so zeros arrive on the
//! wire) and pointer fields only when set; `encoding/json` then drops zero non-pointer fields
//! tagged `omitempty`, keeps set pointers and always writes non-pointer structs. Fields absent
//! from the wire decode to the Go zero value and are written the same way.

use base64::Engine as _;
use serde_json::{Map, Number, Value};

use super::desc::{
    FieldDesc, Kind, MessageDesc, Special, INLINE, MAP, OMITEMPTY, POINTER, REPEATED,
};
use super::descriptors::MESSAGES;
use super::wire::{Reader, FIXED32, FIXED64, LEN, VARINT};
use super::{ProtoError, MAX_DEPTH};

type Obj = Map<String, Value>;

fn msg(index: u16) -> &'static MessageDesc {
    &MESSAGES[usize::from(index)]
}

fn check_depth(depth: usize) -> Result<(), ProtoError> {
    if depth > MAX_DEPTH {
        Err(ProtoError::TooDeep)
    } else {
        Ok(())
    }
}

/// Decodes `buf` as message `index` into a fresh JSON value (an object for plain messages).
pub(super) fn decode_root(index: u16, buf: &[u8], depth: usize) -> Result<Value, ProtoError> {
    let desc = msg(index);
    if desc.special != Special::Plain {
        return Ok(special(desc, buf, depth)?.unwrap_or(Value::Null));
    }
    let mut out = Obj::new();
    decode_into(desc, buf, &mut out, depth)?;
    Ok(Value::Object(out))
}

/// Decodes a plain message's fields into `out` (shared with inline children), then writes the
/// Go zero values of fields the wire did not carry.
fn decode_into(
    desc: &'static MessageDesc,
    buf: &[u8],
    out: &mut Obj,
    depth: usize,
) -> Result<(), ProtoError> {
    check_depth(depth)?;
    // Field indexes seen on the wire; the generator guarantees at most 64 fields per message.
    let mut seen: u64 = 0;
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (number, wire) = r.tag()?;
        let Some((i, field)) = desc.field(number) else {
            r.skip(number, wire)?;
            continue;
        };
        seen |= 1u64 << (i & 63);
        let ctx = FieldCtx { desc, field, wire };
        if field.has(MAP) {
            ctx.expect(LEN)?;
            let entry = r.bytes()?;
            let (key, value) = map_entry(field, entry, depth + 1).map_err(|e| ctx.wrap(e))?;
            object_slot(out, field.json).insert(key, value);
        } else if field.has(REPEATED) {
            // Read first, so an empty packed run leaves the field absent (a nil slice in Go).
            let mut values = Vec::new();
            if wire == LEN && packable(field.kind) {
                let mut packed = Reader::new(r.bytes()?);
                let elem_wire = scalar_wire(field.kind);
                while !packed.is_empty() {
                    values
                        .push(scalar(field.kind, elem_wire, &mut packed).map_err(|e| ctx.wrap(e))?);
                }
            } else {
                let v = element(field, wire, &mut r, depth).map_err(|e| ctx.wrap(e))?;
                match out.get_mut(field.json) {
                    Some(Value::Array(items)) => items.push(v),
                    _ => {
                        out.insert(field.json.to_string(), Value::Array(vec![v]));
                    }
                }
                continue;
            }
            if values.is_empty() {
                continue;
            }
            match out.get_mut(field.json) {
                Some(Value::Array(items)) => items.append(&mut values),
                _ => {
                    out.insert(field.json.to_string(), Value::Array(values));
                }
            }
        } else if field.kind == Kind::Message {
            ctx.expect(LEN)?;
            let sub = r.bytes()?;
            let target = msg(field.message);
            match target.special {
                Special::Plain if field.has(INLINE) => decode_into(target, sub, out, depth + 1)?,
                Special::Plain => {
                    // A repeated occurrence merges into the same object, as in Go.
                    let child = object_slot(out, field.json);
                    decode_into(target, sub, child, depth + 1)?;
                }
                _ => match special(target, sub, depth + 1).map_err(|e| ctx.wrap(e))? {
                    Some(Value::Array(a)) if a.is_empty() && field.has(OMITEMPTY) => {
                        out.remove(field.json);
                    }
                    Some(v) => {
                        out.insert(field.json.to_string(), v);
                    }
                    None => {
                        out.remove(field.json);
                    }
                },
            }
        } else {
            let v = scalar(field.kind, wire, &mut r).map_err(|e| ctx.wrap(e))?;
            if field.has(POINTER) || !field.has(OMITEMPTY) || !is_zero(&v) {
                out.insert(field.json.to_string(), v);
            } else {
                out.remove(field.json);
            }
        }
    }
    for (i, field) in desc.fields.iter().enumerate() {
        if seen & (1u64 << (i & 63)) == 0 {
            zero_field(field, out, depth)?;
        }
    }
    Ok(())
}

/// The object under `key`, created (or replacing a non-object) when needed; looks up before
/// allocating the key.
fn object_slot<'m>(out: &'m mut Obj, key: &'static str) -> &'m mut Obj {
    if !matches!(out.get(key), Some(Value::Object(_))) {
        out.insert(key.to_string(), Value::Object(Obj::new()));
    }
    match out.get_mut(key) {
        Some(Value::Object(m)) => m,
        // Inserted just above.
        _ => unreachable!("object slot {key} was just inserted"),
    }
}

/// Writes what Go's JSON shows for a field holding its zero value (nothing for nil pointers,
/// nil slices and maps, empty `omitempty` scalars and null-marshalling types).
fn zero_field(field: &FieldDesc, out: &mut Obj, depth: usize) -> Result<(), ProtoError> {
    if field.has(POINTER) || field.has(REPEATED) || field.has(MAP) || out.contains_key(field.json) {
        return Ok(());
    }
    if field.kind != Kind::Message {
        if !field.has(OMITEMPTY) && field.kind != Kind::Bytes {
            out.insert(field.json.to_string(), zero_scalar(field.kind));
        }
        return Ok(());
    }
    let target = msg(field.message);
    if target.special == Special::Plain {
        if field.has(INLINE) {
            return decode_into(target, &[], out, depth + 1);
        }
        let mut child = Obj::new();
        decode_into(target, &[], &mut child, depth + 1)?;
        out.insert(field.json.to_string(), Value::Object(child));
    } else if let Some(v) = zero_special(target.special) {
        out.insert(field.json.to_string(), v);
    }
    Ok(())
}

fn zero_scalar(kind: Kind) -> Value {
    match kind {
        Kind::Bool => Value::Bool(false),
        Kind::String => Value::String(String::new()),
        Kind::Float | Kind::Double => Value::Number(Number::from(0)),
        _ => Value::Number(Number::from(0)),
    }
}

/// Go's JSON for the zero value of a type with its own marshaller (None = null).
fn zero_special(special: Special) -> Option<Value> {
    match special {
        Special::Duration => Some(Value::String("0s".into())),
        Special::Quantity => Some(Value::String("0".into())),
        Special::IntOrString => Some(Value::Number(Number::from(0))),
        Special::SchemaOrBool => Some(Value::Bool(false)),
        _ => None,
    }
}

/// One element of a repeated field (not packed).
fn element(
    field: &FieldDesc,
    wire: u8,
    r: &mut Reader<'_>,
    depth: usize,
) -> Result<Value, ProtoError> {
    if field.kind != Kind::Message {
        return scalar(field.kind, wire, r);
    }
    if wire != LEN {
        return Err(ProtoError::WrongWireType {
            message: "",
            field: field.number,
            json: "",
            wire,
        });
    }
    let sub = r.bytes()?;
    let target = msg(field.message);
    if target.special == Special::Plain {
        let mut child = Obj::new();
        decode_into(target, sub, &mut child, depth + 1)?;
        Ok(Value::Object(child))
    } else {
        check_depth(depth + 1)?;
        Ok(special(target, sub, depth + 1)?.unwrap_or(Value::Null))
    }
}

/// A map entry message {key=1, value=2}; missing halves are Go zero values.
fn map_entry(field: &FieldDesc, buf: &[u8], depth: usize) -> Result<(String, Value), ProtoError> {
    check_depth(depth)?;
    let mut key: Option<String> = None;
    let mut value: Option<Value> = None;
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (number, wire) = r.tag()?;
        match number {
            1 => key = Some(map_key(field.key, wire, &mut r)?),
            2 => {
                value = Some(if field.kind == Kind::Message {
                    if wire != LEN {
                        return Err(ProtoError::WrongWireType {
                            message: "map entry",
                            field: 2,
                            json: "value",
                            wire,
                        });
                    }
                    let sub = r.bytes()?;
                    map_message_value(field.message, sub, depth)?
                } else {
                    scalar(field.kind, wire, &mut r)?
                })
            }
            _ => r.skip(number, wire)?,
        }
    }
    let key = key.unwrap_or_else(|| match field.key {
        Kind::String => String::new(),
        Kind::Bool => "false".to_string(),
        _ => "0".to_string(),
    });
    let value = match value {
        Some(v) => v,
        None if field.kind == Kind::Message => map_message_value(field.message, &[], depth)?,
        None if field.kind == Kind::Bytes => Value::String(String::new()),
        None => zero_scalar(field.kind),
    };
    Ok((key, value))
}

fn map_message_value(index: u16, sub: &[u8], depth: usize) -> Result<Value, ProtoError> {
    let target = msg(index);
    if target.special == Special::Plain {
        let mut child = Obj::new();
        decode_into(target, sub, &mut child, depth + 1)?;
        return Ok(Value::Object(child));
    }
    if sub.is_empty() {
        if let Some(v) = zero_special(target.special) {
            return Ok(v);
        }
    }
    Ok(special(target, sub, depth + 1)?.unwrap_or(Value::Null))
}

fn map_key(kind: Kind, wire: u8, r: &mut Reader<'_>) -> Result<String, ProtoError> {
    Ok(match scalar(kind, wire, r)? {
        Value::String(s) => s,
        other => other.to_string(),
    })
}

fn packable(kind: Kind) -> bool {
    !matches!(kind, Kind::String | Kind::Bytes | Kind::Message)
}

fn scalar_wire(kind: Kind) -> u8 {
    match kind {
        Kind::Fixed64 | Kind::SFixed64 | Kind::Double => FIXED64,
        Kind::Fixed32 | Kind::SFixed32 | Kind::Float => FIXED32,
        Kind::String | Kind::Bytes | Kind::Message => LEN,
        _ => VARINT,
    }
}

/// Reads one scalar of `kind` sent with wire type `wire`.
fn scalar(kind: Kind, wire: u8, r: &mut Reader<'_>) -> Result<Value, ProtoError> {
    if wire != scalar_wire(kind) {
        return Err(ProtoError::WrongWireType {
            message: "",
            field: 0,
            json: "",
            wire,
        });
    }
    Ok(match kind {
        Kind::Bool => Value::Bool(r.varint()? != 0),
        Kind::Int32 => Value::Number(Number::from(r.varint()? as i32)),
        Kind::Int64 => Value::Number(Number::from(r.varint()? as i64)),
        Kind::UInt32 => Value::Number(Number::from(r.varint()? as u32)),
        Kind::UInt64 => Value::Number(Number::from(r.varint()?)),
        Kind::SInt32 => {
            let v = r.varint()? as u32;
            Value::Number(Number::from(((v >> 1) as i32) ^ -((v & 1) as i32)))
        }
        Kind::SInt64 => {
            let v = r.varint()?;
            Value::Number(Number::from(((v >> 1) as i64) ^ -((v & 1) as i64)))
        }
        Kind::Fixed32 => Value::Number(Number::from(r.fixed32()?)),
        Kind::SFixed32 => Value::Number(Number::from(r.fixed32()? as i32)),
        Kind::Fixed64 => Value::Number(Number::from(r.fixed64()?)),
        Kind::SFixed64 => Value::Number(Number::from(r.fixed64()? as i64)),
        Kind::Float => float(f64::from(f32::from_bits(r.fixed32()?)))?,
        Kind::Double => float(f64::from_bits(r.fixed64()?))?,
        // Go keeps invalid UTF-8 in the string and its JSON encoder writes U+FFFD for it.
        Kind::String => Value::String(String::from_utf8_lossy(r.bytes()?).into_owned()),
        Kind::Bytes => Value::String(base64::engine::general_purpose::STANDARD.encode(r.bytes()?)),
        Kind::Message => return Err(ProtoError::Invalid("a message where a scalar belongs")),
    })
}

fn float(v: f64) -> Result<Value, ProtoError> {
    Number::from_f64(v)
        .map(Value::Number)
        .ok_or(ProtoError::Invalid(
            "NaN or infinite number has no JSON form",
        ))
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Number(n) => n.as_f64() == Some(0.0),
        _ => false,
    }
}

/// Decodes a message with its own JSON form; `None` is JSON null.
fn special(
    desc: &'static MessageDesc,
    buf: &[u8],
    depth: usize,
) -> Result<Option<Value>, ProtoError> {
    check_depth(depth)?;
    let mut r = Reader::new(buf);
    match desc.special {
        Special::Plain => {
            let mut out = Obj::new();
            decode_into(desc, buf, &mut out, depth)?;
            Ok(Some(Value::Object(out)))
        }
        Special::Time | Special::MicroTime => {
            if buf.is_empty() {
                return Ok(None);
            }
            let (mut seconds, mut nanos) = (0i64, 0i64);
            while !r.is_empty() {
                match r.tag()? {
                    (1, VARINT) => seconds = r.varint()? as i64,
                    (2, VARINT) => nanos = i64::from(r.varint()? as i32),
                    (n, w) => r.skip(n, w)?,
                }
            }
            Ok(Some(Value::String(if desc.special == Special::Time {
                // Time keeps whole seconds only.
                super::gofmt::rfc3339(seconds, 0, 0)
            } else {
                super::gofmt::rfc3339(seconds, nanos - nanos % 1000, 6)
            })))
        }
        Special::Duration => {
            let mut nanos = 0i64;
            while !r.is_empty() {
                match r.tag()? {
                    (1, VARINT) => nanos = r.varint()? as i64,
                    (n, w) => r.skip(n, w)?,
                }
            }
            Ok(Some(Value::String(super::gofmt::go_duration(nanos))))
        }
        Special::Quantity => {
            let mut s: &[u8] = b"";
            while !r.is_empty() {
                match r.tag()? {
                    (1, LEN) => s = r.bytes()?,
                    (n, w) => r.skip(n, w)?,
                }
            }
            if s.is_empty() {
                return Ok(Some(Value::String("0".into())));
            }
            let s =
                std::str::from_utf8(s).map_err(|_| ProtoError::Invalid("quantity is not UTF-8"))?;
            Ok(Some(Value::String(s.to_string())))
        }
        Special::IntOrString => {
            let (mut ty, mut int_val, mut str_val) = (0i64, 0i32, String::new());
            while !r.is_empty() {
                match r.tag()? {
                    (1, VARINT) => ty = r.varint()? as i64,
                    (2, VARINT) => int_val = r.varint()? as i32,
                    (3, LEN) => str_val = String::from_utf8_lossy(r.bytes()?).into_owned(),
                    (n, w) => r.skip(n, w)?,
                }
            }
            match ty {
                0 => Ok(Some(Value::Number(Number::from(int_val)))),
                1 => Ok(Some(Value::String(str_val))),
                _ => Err(ProtoError::Invalid(
                    "IntOrString type is neither 0 (int) nor 1 (string)",
                )),
            }
        }
        Special::RawJson => {
            let mut raw: &[u8] = b"";
            while !r.is_empty() {
                match r.tag()? {
                    (1, LEN) => raw = r.bytes()?,
                    (n, w) => r.skip(n, w)?,
                }
            }
            raw_json(raw, depth)
        }
        Special::ItemsArray => {
            let item = desc.field(1).map(|(_, f)| f.kind).unwrap_or(Kind::String);
            let mut items = Vec::new();
            while !r.is_empty() {
                match r.tag()? {
                    (1, w) => items.push(scalar(item, w, &mut r)?),
                    (n, w) => r.skip(n, w)?,
                }
            }
            Ok(Some(Value::Array(items)))
        }
        Special::SchemaOrArray | Special::SchemaOrBool | Special::SchemaOrStringArray => {
            schema_union(desc, buf, depth)
        }
    }
}

/// The embedded bytes of RawExtension / FieldsV1 / JSON: JSON text, or (for a RawExtension
/// holding a protobuf-encoded object) a nested Kubernetes protobuf envelope.
fn raw_json(raw: &[u8], depth: usize) -> Result<Option<Value>, ProtoError> {
    if raw.is_empty() {
        return Ok(None);
    }
    if raw.starts_with(super::MAGIC) {
        return super::decode_at_depth(raw, depth + 1).map(Some);
    }
    let v: Value = serde_json::from_slice(raw)
        .map_err(|_| ProtoError::Invalid("embedded raw bytes are not JSON"))?;
    Ok(match v {
        Value::Null => None,
        v => Some(v),
    })
}

/// apiextensions' JSONSchemaPropsOr{Array,Bool,StringArray}: a schema, or an array / bool.
fn schema_union(
    desc: &'static MessageDesc,
    buf: &[u8],
    depth: usize,
) -> Result<Option<Value>, ProtoError> {
    let schema_no = if desc.special == Special::SchemaOrBool {
        2
    } else {
        1
    };
    let schema_index = desc
        .field(schema_no)
        .map(|(_, f)| f.message)
        .ok_or(ProtoError::Invalid("schema union without a schema field"))?;
    let mut schema: Option<Value> = None;
    let mut list: Vec<Value> = Vec::new();
    let mut allows = false;
    let mut r = Reader::new(buf);
    while !r.is_empty() {
        let (number, wire) = r.tag()?;
        if number == schema_no && wire == LEN {
            let sub = r.bytes()?;
            let mut out = match schema.take() {
                Some(Value::Object(m)) => m,
                _ => Obj::new(),
            };
            decode_into(msg(schema_index), sub, &mut out, depth + 1)?;
            schema = Some(Value::Object(out));
            continue;
        }
        match (desc.special, number, wire) {
            (Special::SchemaOrBool, 1, VARINT) => allows = r.varint()? != 0,
            (Special::SchemaOrArray, 2, LEN) => {
                let mut out = Obj::new();
                decode_into(msg(schema_index), r.bytes()?, &mut out, depth + 1)?;
                list.push(Value::Object(out));
            }
            (Special::SchemaOrStringArray, 2, LEN) => list.push(Value::String(
                String::from_utf8_lossy(r.bytes()?).into_owned(),
            )),
            _ => r.skip(number, wire)?,
        }
    }
    Ok(match desc.special {
        Special::SchemaOrBool => Some(schema.unwrap_or(Value::Bool(allows))),
        _ if !list.is_empty() => Some(Value::Array(list)),
        _ => schema,
    })
}

/// Error context for one field of one message.
struct FieldCtx {
    desc: &'static MessageDesc,
    field: &'static FieldDesc,
    wire: u8,
}

impl FieldCtx {
    fn expect(&self, wire: u8) -> Result<(), ProtoError> {
        if self.wire == wire {
            Ok(())
        } else {
            Err(self.wrap(ProtoError::WrongWireType {
                message: "",
                field: 0,
                json: "",
                wire: self.wire,
            }))
        }
    }

    /// Names the field in a wire-type error raised below it.
    fn wrap(&self, e: ProtoError) -> ProtoError {
        match e {
            ProtoError::WrongWireType {
                message: "", wire, ..
            } => ProtoError::WrongWireType {
                message: self.desc.name,
                field: self.field.number,
                json: self.field.json,
                wire,
            },
            e => e,
        }
    }
}
