//! Compact JWS (RFC 7515) signed with RS256, the form of Kubernetes' service-account tokens.
//!
//! Tokens are signed the way Kubernetes' `JWTTokenGenerator` signs them: header
//! `{"alg":"RS256","kid":<key id>}` (no `typ`), claims as one JSON object, every part unpadded
//! base64url. Parsing is strict: three parts, a JSON-object header and payload, `alg` RS256
//! and nothing else (`none` included), no `crit`; `kid` may be absent.

use capstan_pki::ServiceAccountKey;
use serde_json::{Map, Value};

use super::b64;

/// Why a token is not a valid JWS of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwtError {
    #[error("token is not a compact JWS: want 3 parts, found {0}")]
    Parts(usize),
    #[error("token {0} is not valid base64url")]
    Encoding(&'static str),
    #[error("token {0} is not a JSON object")]
    Json(&'static str),
    #[error("unsupported signing algorithm {0:?}, want RS256")]
    Algorithm(String),
    #[error("token has critical header parameters")]
    Critical,
    #[error("invalid signature, no keys found")]
    NoKey,
    #[error("invalid signature")]
    Signature,
}

/// A parsed, not yet verified, token.
#[derive(Debug, Clone)]
pub struct Jws {
    pub header: Map<String, Value>,
    pub claims: Map<String, Value>,
    /// `base64url(header) "." base64url(payload)`, what the signature covers.
    signing_input: String,
    signature: Vec<u8>,
}

impl Jws {
    /// The header's `kid`, if any.
    pub fn key_id(&self) -> Option<&str> {
        self.header
            .get("kid")
            .and_then(Value::as_str)
            .filter(|k| !k.is_empty())
    }

    /// Check the signature against the verification keys of `key`. A `kid` must name one of
    /// them (as Kubernetes picks keys by id); without one every key is tried.
    pub fn verify(&self, key: &ServiceAccountKey) -> Result<(), JwtError> {
        if let Some(kid) = self.key_id() {
            let known = kid == key.key_id()
                || key
                    .verification_keys_der()
                    .iter()
                    .any(|spki| key_id(spki).as_deref() == Some(kid));
            if !known {
                return Err(JwtError::NoKey);
            }
        }
        if key.verify(self.signing_input.as_bytes(), &self.signature) {
            Ok(())
        } else {
            Err(JwtError::Signature)
        }
    }
}

/// Sign `claims` (a JSON object) with `key`.
pub fn sign(key: &ServiceAccountKey, claims: &Value) -> String {
    let mut header = Map::new();
    header.insert("alg".into(), Value::String(key.algorithm().into()));
    header.insert("kid".into(), Value::String(key.key_id().into()));
    let mut out = b64::encode(Value::Object(header).to_string().as_bytes());
    out.push('.');
    out.push_str(&b64::encode(claims.to_string().as_bytes()));
    let signature = key.sign(out.as_bytes());
    out.push('.');
    out.push_str(&b64::encode(&signature));
    out
}

/// Split and decode `token` without verifying it.
pub fn parse(token: &str) -> Result<Jws, JwtError> {
    let parts: Vec<&str> = token.split('.').collect();
    let [header, payload, signature] = parts[..] else {
        return Err(JwtError::Parts(parts.len()));
    };
    let header = object(header, "header")?;
    match header.get("alg") {
        Some(Value::String(alg)) if alg == "RS256" => {}
        Some(Value::String(alg)) => return Err(JwtError::Algorithm(alg.clone())),
        other => {
            return Err(JwtError::Algorithm(
                other.map(Value::to_string).unwrap_or_default(),
            ))
        }
    }
    if header.contains_key("crit") {
        return Err(JwtError::Critical);
    }
    let claims = object(payload, "payload")?;
    let signature = b64::decode(signature).ok_or(JwtError::Encoding("signature"))?;
    Ok(Jws {
        header,
        claims,
        signing_input: token[..token.len() - parts[2].len() - 1].to_string(),
        signature,
    })
}

/// Parse `token` and check its signature with `key`: the claims of a token `key` signed.
pub fn decode(token: &str, key: &ServiceAccountKey) -> Result<Map<String, Value>, JwtError> {
    let jws = parse(token)?;
    jws.verify(key)?;
    Ok(jws.claims)
}

/// The `iss` claim of what looks like a compact JWS, read without any verification, to route
/// a token to the authenticator of its issuer (Kubernetes' `hasCorrectIssuer`).
pub fn unverified_issuer(token: &str) -> Option<String> {
    if token.trim_start().starts_with('{') {
        return None;
    }
    let parts: Vec<&str> = token.split('.').collect();
    if parts.len() != 3 {
        return None;
    }
    let claims = object(parts[1], "payload").ok()?;
    match claims.get("iss") {
        Some(Value::String(iss)) => Some(iss.clone()),
        _ => None,
    }
}

/// The key id Kubernetes gives a public key: unpadded base64url of SHA-256 over its
/// SubjectPublicKeyInfo DER.
pub fn key_id(spki_der: &[u8]) -> Option<String> {
    sha256(spki_der).map(|d| b64::encode(&d))
}

/// SHA-256 from the crypto provider rustls already carries (ring).
fn sha256(data: &[u8]) -> Option<Vec<u8>> {
    let suite = capstan_pki::rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256;
    let hash = suite.tls13()?.common.hash_provider;
    Some(hash.hash(data).as_ref().to_vec())
}

fn object(part: &str, what: &'static str) -> Result<Map<String, Value>, JwtError> {
    let bytes = b64::decode(part).ok_or(JwtError::Encoding(what))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Ok(m),
        _ => Err(JwtError::Json(what)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::testutil::{other_key, test_key};
    use serde_json::json;

    #[test]
    fn signed_tokens_verify_and_carry_alg_and_kid() {
        let key = test_key();
        let token = sign(key, &json!({"iss": "me", "n": 1}));
        let jws = parse(&token).unwrap();
        assert_eq!(
            Value::Object(jws.header.clone()),
            json!({"alg": "RS256", "kid": key.key_id()})
        );
        assert_eq!(decode(&token, key).unwrap()["n"], 1);
        assert_eq!(unverified_issuer(&token).as_deref(), Some("me"));
        assert!(!token.contains('='));
    }

    #[test]
    fn key_id_matches_the_pki_key_id() {
        let key = test_key();
        assert_eq!(key_id(key.public_key_der()).as_deref(), Some(key.key_id()));
    }

    #[test]
    fn token_signed_by_another_key_is_rejected() {
        let token = sign(other_key(), &json!({"iss": "me"}));
        // The other key's kid is unknown to ours.
        assert_eq!(decode(&token, test_key()).unwrap_err(), JwtError::NoKey);
        // Without a kid every key is tried, and none verifies.
        let jws = parse(&token).unwrap();
        let mut header = jws.header.clone();
        header.remove("kid");
        let forged = resign_header(&token, &Value::Object(header));
        assert_eq!(
            decode(&forged, test_key()).unwrap_err(),
            JwtError::Signature
        );
    }

    /// `token` with its header replaced, keeping payload and signature.
    fn resign_header(token: &str, header: &Value) -> String {
        let parts: Vec<&str> = token.split('.').collect();
        format!(
            "{}.{}.{}",
            b64::encode(header.to_string().as_bytes()),
            parts[1],
            parts[2]
        )
    }

    #[test]
    fn tampered_payload_fails_verification() {
        let key = test_key();
        let token = sign(key, &json!({"sub": "alice"}));
        let parts: Vec<&str> = token.split('.').collect();
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            b64::encode(json!({"sub": "admin"}).to_string().as_bytes()),
            parts[2]
        );
        assert_eq!(decode(&forged, key).unwrap_err(), JwtError::Signature);
    }

    #[test]
    fn malformed_tokens_are_rejected_without_panicking() {
        let key = test_key();
        let good = sign(key, &json!({"iss": "me"}));
        let parts: Vec<&str> = good.split('.').collect();
        let header = |h: Value| b64::encode(h.to_string().as_bytes());
        let cases: Vec<String> = vec![
            String::new(),
            "garbage".into(),
            ".".into(),
            "..".into(),
            "...".into(),
            format!("{}.{}", parts[0], parts[1]),
            format!("{good}.extra"),
            format!("{}=.{}.{}", parts[0], parts[1], parts[2]),
            format!("{}.{}.{}", parts[0], "!!!", parts[2]),
            format!("{}.{}.{}", parts[0], parts[1], "a"),
            format!("{}.{}.{}", header(json!({"alg": "none"})), parts[1], ""),
            format!(
                "{}.{}.{}",
                header(json!({"alg": "none"})),
                parts[1],
                parts[2]
            ),
            format!(
                "{}.{}.{}",
                header(json!({"alg": "HS256"})),
                parts[1],
                parts[2]
            ),
            format!("{}.{}.{}", header(json!({"kid": "x"})), parts[1], parts[2]),
            format!("{}.{}.{}", header(json!(["RS256"])), parts[1], parts[2]),
            format!(
                "{}.{}.{}",
                header(json!({"alg": "RS256", "crit": ["exp"]})),
                parts[1],
                parts[2]
            ),
            format!("{}.{}.{}", parts[0], b64::encode(b"[1,2]"), parts[2]),
            format!("{}.{}.{}", parts[0], b64::encode(b"not json"), parts[2]),
            format!("{}.{}.{}", parts[0], parts[1], b64::encode(&[0u8; 256])),
            "\u{1F600}.\u{1F600}.\u{1F600}".into(),
        ];
        for token in cases {
            assert!(decode(&token, key).is_err(), "{token:?}");
        }
    }

    #[test]
    fn unverified_issuer_ignores_what_is_not_a_jws() {
        assert_eq!(unverified_issuer("abc"), None);
        assert_eq!(unverified_issuer(r#"{"iss":"x"}.a.b"#), None);
        let payload = b64::encode(br#"{"iss": 5}"#);
        assert_eq!(unverified_issuer(&format!("a.{payload}.c")), None);
        let payload = b64::encode(br#"{"iss": "x"}"#);
        assert_eq!(
            unverified_issuer(&format!("a.{payload}.c")).as_deref(),
            Some("x")
        );
    }
}
