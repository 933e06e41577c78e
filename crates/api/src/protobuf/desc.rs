//! The shape of the descriptor table in `descriptors.rs`: one [`MessageDesc`] per protobuf message
//! reachable from a served kind, with each field's number, JSON name, wire kind and the Go
//! pointer-ness / `omitempty` facts that decide which zero values JSON would show.

/// The field is `repeated` (a JSON array).
pub(super) const REPEATED: u8 = 1;
/// The field is a `map<key, value>` (repeated entry messages, a JSON object).
pub(super) const MAP: u8 = 2;
/// The Go struct field is a pointer: present on the wire means present in JSON, even when zero.
pub(super) const POINTER: u8 = 4;
/// The Go struct field's JSON tag has `omitempty`.
pub(super) const OMITEMPTY: u8 = 8;
/// The Go struct field is embedded with `json:",inline"`: its fields merge into the parent.
pub(super) const INLINE: u8 = 16;

/// A protobuf scalar type, or a nested message. Kubernetes' messages use only some of the
/// scalar types; the decoder handles all of them so a regenerated table always decodes.
#[allow(dead_code)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Bool,
    Int32,
    Int64,
    UInt32,
    UInt64,
    SInt32,
    SInt64,
    Fixed32,
    Fixed64,
    SFixed32,
    SFixed64,
    Float,
    Double,
    String,
    Bytes,
    Message,
}

/// Messages whose Go type has its own JSON form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Special {
    /// An ordinary struct: a JSON object of its fields.
    Plain,
    /// meta/v1 Time {seconds=1, nanos=2}: RFC 3339 seconds, or null when empty.
    Time,
    /// meta/v1 MicroTime: RFC 3339 with six fractional digits, or null when empty.
    MicroTime,
    /// meta/v1 Duration {duration=1 ns}: a Go duration string.
    Duration,
    /// resource.Quantity {string=1}: the string.
    Quantity,
    /// intstr.IntOrString {type=1, intVal=2, strVal=3}: a number or a string.
    IntOrString,
    /// runtime.RawExtension, meta/v1 FieldsV1, apiextensions JSON {raw=1}: embedded JSON.
    RawJson,
    /// A Go slice type wrapped in a message {items=1} (ExtraValue, Verbs): a JSON array.
    ItemsArray,
    /// apiextensions JSONSchemaPropsOrArray {schema=1, jSONSchemas=2}.
    SchemaOrArray,
    /// apiextensions JSONSchemaPropsOrBool {allows=1, schema=2}.
    SchemaOrBool,
    /// apiextensions JSONSchemaPropsOrStringArray {schema=1, property=2}.
    SchemaOrStringArray,
}

#[derive(Debug)]
pub(super) struct FieldDesc {
    pub number: u32,
    /// The JSON name; empty for an inline field.
    pub json: &'static str,
    /// The scalar kind, or [`Kind::Message`]; for a map, the value's kind.
    pub kind: Kind,
    /// Index into `MESSAGES` when `kind` is [`Kind::Message`].
    pub message: u16,
    /// For a map, the key's kind.
    pub key: Kind,
    pub flags: u8,
}

impl FieldDesc {
    pub(super) fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

#[derive(Debug)]
pub(super) struct MessageDesc {
    /// Short proto name, e.g. `apps.v1.DeploymentSpec` (for errors).
    pub name: &'static str,
    pub special: Special,
    /// Sorted by field number.
    pub fields: &'static [FieldDesc],
}

impl MessageDesc {
    pub(super) fn field(&self, number: u32) -> Option<(usize, &'static FieldDesc)> {
        let fields: &'static [FieldDesc] = self.fields;
        fields
            .binary_search_by_key(&number, |f| f.number)
            .ok()
            .map(|i| (i, &fields[i]))
    }
}

pub(super) const fn f(
    number: u32,
    json: &'static str,
    kind: Kind,
    message: u16,
    flags: u8,
) -> FieldDesc {
    FieldDesc {
        number,
        json,
        kind,
        message,
        key: Kind::String,
        flags,
    }
}

pub(super) const fn k(
    number: u32,
    json: &'static str,
    kind: Kind,
    message: u16,
    key: Kind,
    flags: u8,
) -> FieldDesc {
    FieldDesc {
        number,
        json,
        kind,
        message,
        key,
        flags,
    }
}

pub(super) const fn m(
    name: &'static str,
    special: Special,
    fields: &'static [FieldDesc],
) -> MessageDesc {
    MessageDesc {
        name,
        special,
        fields,
    }
}
