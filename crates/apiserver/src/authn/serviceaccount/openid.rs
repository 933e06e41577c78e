//! The service-account issuer's OIDC discovery documents, as Kubernetes'
//! `pkg/serviceaccount/openidmetadata.go`: `/.well-known/openid-configuration` and the key set
//! at `/openid/v1/jwks`, which let other parties verify service-account tokens.

use serde_json::{json, Value};

use super::ServiceAccountTokens;
use crate::authn::{b64, jwt};

/// Where the OIDC configuration document is served.
pub const OPENID_CONFIG_PATH: &str = "/.well-known/openid-configuration";
/// Where the key set is served.
pub const JWKS_PATH: &str = "/openid/v1/jwks";
/// The media type of the key set response.
pub const JWKS_CONTENT_TYPE: &str = "application/jwk-set+json";

impl ServiceAccountTokens {
    /// Whether the discovery endpoints should be served: as in Kubernetes, only for an
    /// `https` issuer URL without query or fragment.
    pub fn serves_discovery(&self) -> bool {
        self.issuer
            .strip_prefix("https://")
            .is_some_and(|rest| !rest.is_empty() && !rest.contains(['?', '#']))
    }

    /// The `jwks_uri` announced in the configuration document.
    pub fn jwks_uri(&self) -> String {
        match &self.jwks_uri {
            Some(uri) => uri.clone(),
            None => format!("{}{JWKS_PATH}", self.issuer.trim_end_matches('/')),
        }
    }

    /// The body of `/.well-known/openid-configuration`.
    pub fn openid_configuration(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": self.jwks_uri(),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": [self.key().algorithm()],
        })
    }

    /// The body of `/openid/v1/jwks`: every key tokens are verified with.
    pub fn jwks(&self) -> Value {
        let key = self.key();
        let keys: Vec<Value> = key
            .verification_keys_der()
            .iter()
            .filter_map(|spki| {
                let (n, e) = rsa_components(spki)?;
                Some(json!({
                    "use": "sig",
                    "kty": "RSA",
                    "kid": jwt::key_id(spki)?,
                    "alg": key.algorithm(),
                    "n": b64::encode(n),
                    "e": b64::encode(e),
                }))
            })
            .collect();
        json!({ "keys": keys })
    }
}

/// The DER encoding of the rsaEncryption algorithm OID, 1.2.840.113549.1.1.1.
const RSA_ENCRYPTION_OID: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// The modulus and public exponent (big-endian, no leading zeros) of an RSA
/// SubjectPublicKeyInfo.
fn rsa_components(spki: &[u8]) -> Option<(&[u8], &[u8])> {
    let (spki, _) = expect(0x30, spki)?;
    let (algorithm, rest) = expect(0x30, spki)?;
    let (oid, _) = expect(0x06, algorithm)?;
    if oid != RSA_ENCRYPTION_OID {
        return None;
    }
    let (bits, _) = expect(0x03, rest)?;
    let (&unused, key) = bits.split_first()?;
    if unused != 0 {
        return None;
    }
    let (key, _) = expect(0x30, key)?;
    let (n, rest) = expect(0x02, key)?;
    let (e, _) = expect(0x02, rest)?;
    Some((trim_zeros(n), trim_zeros(e)))
}

fn trim_zeros(int: &[u8]) -> &[u8] {
    let start = int.iter().position(|&b| b != 0).unwrap_or(int.len());
    &int[start..]
}

/// One DER element of tag `tag`: its content and what follows it.
fn expect(tag: u8, input: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&t, rest) = input.split_first()?;
    if t != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (first as usize, rest)
    } else {
        let n = (first & 0x7f) as usize;
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n].iter().fold(0usize, |a, &b| a << 8 | b as usize);
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some(rest.split_at(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::testutil::{objects, test_pki};

    fn tokens(issuer: &str) -> ServiceAccountTokens {
        ServiceAccountTokens::new(test_pki(), issuer.into(), vec![], objects())
    }

    #[test]
    fn configuration_document_has_kubernetes_fields() {
        let t = tokens("");
        assert_eq!(
            t.openid_configuration(),
            json!({
                "issuer": "https://kubernetes.default.svc.cluster.local",
                "jwks_uri": "https://kubernetes.default.svc.cluster.local/openid/v1/jwks",
                "response_types_supported": ["id_token"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
            })
        );
        let t = tokens("").with_jwks_uri("https://10.0.0.1:6443/openid/v1/jwks".into());
        assert_eq!(
            t.openid_configuration()["jwks_uri"],
            "https://10.0.0.1:6443/openid/v1/jwks"
        );
    }

    #[test]
    fn key_set_matches_the_signing_key() {
        let t = tokens("");
        let key = t.key();
        let (n, e) = key.jwk_components();
        assert_eq!(
            t.jwks(),
            json!({"keys": [{"use": "sig", "kty": "RSA", "kid": key.key_id(), "alg": "RS256", "n": n, "e": e}]})
        );
    }

    #[test]
    fn discovery_needs_an_https_issuer() {
        assert!(tokens("").serves_discovery());
        assert!(tokens("https://issuer.example/path").serves_discovery());
        assert!(!tokens("http://issuer.example").serves_discovery());
        assert!(!tokens("https://issuer.example?x=1").serves_discovery());
        assert!(!tokens("my-issuer").serves_discovery());
    }

    #[test]
    fn malformed_public_keys_are_skipped() {
        for bad in [
            &[][..],
            &[0x30],
            &[0x30, 0x82, 0xff, 0xff],
            &[0x02, 0x01, 0x00],
        ] {
            assert_eq!(rsa_components(bad), None);
        }
    }
}
