//! Kubernetes' protobuf wire format (`application/vnd.kubernetes.protobuf`) → JSON.
//!
//! client-go typed clients, and so kubectl's generator commands (`kubectl create configmap`,
//! `create deployment`, `auth can-i`, `certificate approve`, `drain` …), send request bodies as
//! protobuf. The API server works on the JSON form, so [`decode`] turns such a body into exactly
//! the JSON object the same client would have sent with `Content-Type: application/json`:
//!
//! * The body is the 4 magic bytes `k8s\0` and a `runtime.Unknown` {typeMeta=1 {apiVersion=1,
//!   kind=2}, raw=2, contentEncoding=3, contentType=4}; `raw` is decoded as the message of that
//!   (apiVersion, kind), and the result carries `kind` and `apiVersion`.
//! * Field names, numbers, wire types and Go pointer-ness come from a descriptor table generated
//!   from Kubernetes v1.32's `generated.proto` files and Go struct tags (`descriptors.rs`): every
//!   kind of the default-served built-in group versions (apiregistration's APIService included)
//!   and of meta/v1, and everything they reach. Regenerate it when the catalogue gains a group.
//! * Presence follows Go: a scalar on the wire is kept if its Go field is a pointer
//!   (`spec.replicas: 0` from `--replicas=0`) or not `omitempty`, and dropped when zero
//!   otherwise; nested structs are kept (`resources: {}`, `status: {}`); empty lists and maps are
//!   dropped. A zero `metav1.Time` (Go writes `"creationTimestamp": null`) and every other JSON
//!   null is left out: the API server treats a null field as absent, so the two are equivalent.
//! * Types with their own JSON form: Time / MicroTime (RFC 3339), Duration (Go duration string),
//!   Quantity (its string), IntOrString (number or string), RawExtension / FieldsV1 / apiextensions
//!   JSON (the embedded JSON, or a nested protobuf envelope), `bytes` (base64), ExtraValue and
//!   Verbs (arrays), JSONSchemaPropsOr{Array,Bool,StringArray}.
//!
//! Decoding never panics on any input, skips unknown fields (forward compatible, as Go does),
//! accepts packed and unpacked repeated scalars, and bounds nesting at [`MAX_DEPTH`].
//! Not every kubectl command sends protobuf: `create -f`, `apply`, `run`, `expose` (unstructured
//! objects), `scale`, `label`, `patch` (patches) and drain's Eviction are JSON.
//! Custom resources have no protobuf form (the real API server answers 415 for them):
//! [`supports`] tells whether a kind can be decoded.

mod decode;
mod desc;
#[rustfmt::skip]
mod descriptors;
mod gofmt;
mod wire;

#[cfg(test)]
mod tests;

use serde_json::Value;

/// The protobuf media type, as clients send it in `Content-Type`.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// Deepest message nesting [`decode`] accepts.
pub const MAX_DEPTH: usize = 100;

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtoError {
    #[error("protobuf body does not start with the Kubernetes prefix \"k8s\\x00\"")]
    BadMagic,
    #[error("protobuf data is truncated")]
    Truncated,
    #[error("protobuf varint is longer than 64 bits")]
    VarintOverflow,
    #[error("protobuf field number {0} is invalid")]
    InvalidFieldNumber(u64),
    #[error("protobuf wire type {0} is invalid")]
    InvalidWireType(u8),
    #[error("protobuf group is not closed by a matching end-group")]
    UnbalancedGroup,
    #[error("protobuf field {field} ({json}) of {message} has wire type {wire}, which does not fit its type")]
    WrongWireType {
        message: &'static str,
        field: u32,
        json: &'static str,
        wire: u8,
    },
    #[error("protobuf envelope has no apiVersion/kind")]
    MissingTypeMeta,
    #[error("no protobuf schema for kind {kind:?} in {api_version:?}")]
    UnknownKind { api_version: String, kind: String },
    #[error("protobuf envelope content encoding {0:?} is not supported")]
    UnsupportedEncoding(String),
    #[error("protobuf messages nest deeper than {MAX_DEPTH} levels")]
    TooDeep,
    #[error("invalid protobuf value: {0}")]
    Invalid(&'static str),
}

impl ProtoError {
    /// True when the body is well-formed but has no protobuf form here (a custom resource, an
    /// unserved kind, a compressed envelope): the real API server answers 415 Unsupported Media
    /// Type for those and 400 Bad Request for malformed bodies.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            ProtoError::UnknownKind { .. } | ProtoError::UnsupportedEncoding(_)
        )
    }
}

/// The `runtime.Unknown` envelope of a Kubernetes protobuf body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub api_version: String,
    pub kind: String,
    /// The encoded object.
    pub raw: &'a [u8],
    pub content_encoding: String,
    pub content_type: String,
}

/// Whether a `Content-Type` header names the Kubernetes protobuf media type (parameters such
/// as `;stream=watch` ignored).
pub fn is_protobuf(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case(MEDIA_TYPE)
}

/// Splits a body into its envelope: checks the magic prefix and reads `runtime.Unknown`.
pub fn parse_envelope(bytes: &[u8]) -> Result<Envelope<'_>, ProtoError> {
    let body = bytes
        .strip_prefix(MAGIC.as_slice())
        .ok_or(ProtoError::BadMagic)?;
    let mut env = Envelope {
        api_version: String::new(),
        kind: String::new(),
        raw: &[],
        content_encoding: String::new(),
        content_type: String::new(),
    };
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let mut r = wire::Reader::new(body);
    while !r.is_empty() {
        match r.tag()? {
            (1, wire::LEN) => {
                let mut tm = wire::Reader::new(r.bytes()?);
                while !tm.is_empty() {
                    match tm.tag()? {
                        (1, wire::LEN) => env.api_version = text(tm.bytes()?),
                        (2, wire::LEN) => env.kind = text(tm.bytes()?),
                        (n, w) => tm.skip(n, w)?,
                    }
                }
            }
            (2, wire::LEN) => env.raw = r.bytes()?,
            (3, wire::LEN) => env.content_encoding = text(r.bytes()?),
            (4, wire::LEN) => env.content_type = text(r.bytes()?),
            (n @ 1..=4, w) => {
                return Err(ProtoError::WrongWireType {
                    message: "runtime.Unknown",
                    field: n,
                    json: ["typeMeta", "raw", "contentEncoding", "contentType"][n as usize - 1],
                    wire: w,
                })
            }
            (n, w) => r.skip(n, w)?,
        }
    }
    Ok(env)
}

/// Decodes a Kubernetes protobuf body into the JSON object (with `kind` and `apiVersion`) the
/// same client would have sent as JSON.
pub fn decode(bytes: &[u8]) -> Result<Value, ProtoError> {
    decode_at_depth(bytes, 0)
}

pub(crate) fn decode_at_depth(bytes: &[u8], depth: usize) -> Result<Value, ProtoError> {
    let env = parse_envelope(bytes)?;
    if !env.content_encoding.is_empty() {
        return Err(ProtoError::UnsupportedEncoding(env.content_encoding));
    }
    if !env.content_type.is_empty() && !is_protobuf(&env.content_type) {
        return Err(ProtoError::UnsupportedEncoding(env.content_type));
    }
    if env.api_version.is_empty() || env.kind.is_empty() {
        return Err(ProtoError::MissingTypeMeta);
    }
    let index =
        message_for(&env.api_version, &env.kind).ok_or_else(|| ProtoError::UnknownKind {
            api_version: env.api_version.clone(),
            kind: env.kind.clone(),
        })?;
    let mut value = decode::decode_root(index, env.raw, depth + 1)?;
    if let Value::Object(obj) = &mut value {
        if !obj.contains_key("kind") {
            obj.insert("kind".into(), Value::String(env.kind));
        }
        if !obj.contains_key("apiVersion") {
            obj.insert("apiVersion".into(), Value::String(env.api_version));
        }
    }
    Ok(value)
}

/// Decodes the `raw` bytes of an envelope as the message for (apiVersion, kind); the result has
/// no `kind`/`apiVersion` of its own unless the message carries them.
pub fn decode_object(api_version: &str, kind: &str, raw: &[u8]) -> Result<Value, ProtoError> {
    let index = message_for(api_version, kind).ok_or_else(|| ProtoError::UnknownKind {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
    })?;
    decode::decode_root(index, raw, 1)
}

/// Whether (apiVersion, kind) has a protobuf schema here (false for custom resources).
pub fn supports(api_version: &str, kind: &str) -> bool {
    message_for(api_version, kind).is_some()
}

/// The kinds that have a protobuf schema, as (apiVersion, kind).
pub fn kinds() -> impl Iterator<Item = (&'static str, &'static str)> {
    descriptors::KINDS.iter().map(|(v, k, _)| (*v, *k))
}

const META_V1: &str = "meta.k8s.io/v1";

fn message_for(api_version: &str, kind: &str) -> Option<u16> {
    let find = |v: &str| {
        descriptors::KINDS
            .binary_search_by(|(av, k, _)| (*av, *k).cmp(&(v, kind)))
            .ok()
            .map(|i| descriptors::KINDS[i].2)
    };
    // meta/v1 option and status kinds (DeleteOptions, Status, WatchEvent …) are registered in
    // every group version, so `v1 DeleteOptions` or `apps/v1 DeleteOptions` decode as meta/v1.
    find(api_version).or_else(|| find(META_V1))
}
