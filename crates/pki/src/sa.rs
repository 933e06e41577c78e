//! The service-account token signing key pair (`sa.key` / `sa.pub`).
//!
//! RSA 2048, so tokens are RS256, which every JWT library and every
//! Kubernetes client accepts. The `rsa` crate is used only to generate the
//! key (ring cannot); signing and verification use ring.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::signature::{self, KeyPair as _, RsaKeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};

use crate::{der, pem_encode, Error};

/// The key pair that signs and verifies service-account JWTs (RS256).
pub struct ServiceAccountKey {
    key_pair: RsaKeyPair,
    private_key_pem: String,
    public_key_pem: String,
    public_key_der: Vec<u8>,
    verification_keys: Vec<Vec<u8>>,
    key_id: String,
}

impl std::fmt::Debug for ServiceAccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServiceAccountKey")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

impl ServiceAccountKey {
    /// A new RSA 2048 key pair.
    pub(crate) fn generate() -> Result<Self, Error> {
        use rsa::pkcs8::EncodePrivateKey;
        let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048)
            .map_err(|e| Error::Crypto(format!("generating the service-account key: {e}")))?;
        let pkcs8 = key
            .to_pkcs8_der()
            .map_err(|e| Error::Crypto(format!("encoding the service-account key: {e}")))?;
        Self::from_pkcs8(pkcs8.as_bytes())
            .map_err(|reason| Error::Crypto(format!("service-account key: {reason}")))
    }

    /// Loads `sa.key` (PKCS#8 or PKCS#1 PEM) and, if given, `sa.pub`, which
    /// must hold this key's public key (and may hold older ones).
    pub(crate) fn load(
        key_path: &Path,
        key_pem: &[u8],
        pub_file: Option<(&Path, &[u8])>,
    ) -> Result<Self, Error> {
        let bad_key = |reason: String| Error::File {
            path: key_path.to_path_buf(),
            reason,
        };
        let pkcs8 = match PrivateKeyDer::from_pem_slice(key_pem) {
            Ok(PrivateKeyDer::Pkcs8(k)) => k.secret_pkcs8_der().to_vec(),
            Ok(PrivateKeyDer::Pkcs1(k)) => der::pkcs8_from_pkcs1(k.secret_pkcs1_der()),
            Ok(_) => {
                return Err(bad_key(
                    "service-account key is not an RSA key (only RSA/RS256 is supported)".into(),
                ))
            }
            Err(e) => return Err(bad_key(format!("not a PEM private key ({e})"))),
        };
        let verification = match pub_file {
            None => None,
            Some((path, pem)) => {
                let bad_pub = |reason: String| Error::File {
                    path: path.to_path_buf(),
                    reason,
                };
                let keys = SubjectPublicKeyInfoDer::pem_slice_iter(pem)
                    .map(|k| k.map(|k| k.as_ref().to_vec()))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| bad_pub(format!("not a PEM public key file ({e})")))?;
                if keys.is_empty() {
                    return Err(bad_pub("no PUBLIC KEY block found".into()));
                }
                let text = String::from_utf8(pem.to_vec())
                    .map_err(|_| bad_pub("not valid UTF-8".into()))?;
                Some((path, keys, text))
            }
        };
        let mut sa = Self::from_pkcs8(&pkcs8).map_err(bad_key)?;
        if let Some((path, keys, text)) = verification {
            if !keys.contains(&sa.public_key_der) {
                return Err(Error::File {
                    path: path.to_path_buf(),
                    reason: format!("does not contain the public key of {}", key_path.display()),
                });
            }
            sa.public_key_pem = text;
            sa.verification_keys = keys;
        }
        Ok(sa)
    }

    fn from_pkcs8(pkcs8: &[u8]) -> Result<Self, String> {
        let key_pair =
            RsaKeyPair::from_pkcs8(pkcs8).map_err(|e| format!("unusable RSA key: {e}"))?;
        let public_key_der = der::rsa_spki(key_pair.public_key().as_ref());
        let key_id =
            URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &public_key_der));
        Ok(Self {
            private_key_pem: pem_encode("PRIVATE KEY", pkcs8),
            public_key_pem: pem_encode("PUBLIC KEY", &public_key_der),
            verification_keys: vec![public_key_der.clone()],
            public_key_der,
            key_pair,
            key_id,
        })
    }

    /// The JWS algorithm of tokens signed with this key: `RS256`.
    pub fn algorithm(&self) -> &'static str {
        "RS256"
    }

    /// `sa.key` as written: PKCS#8 PEM (or what was loaded, re-encoded as PKCS#8).
    pub fn private_key_pem(&self) -> &str {
        &self.private_key_pem
    }

    /// `sa.pub` as on disk: one or more `PUBLIC KEY` PEM blocks.
    pub fn public_key_pem(&self) -> &str {
        &self.public_key_pem
    }

    /// This key's SubjectPublicKeyInfo DER.
    pub fn public_key_der(&self) -> &[u8] {
        &self.public_key_der
    }

    /// Every public key in `sa.pub` (SubjectPublicKeyInfo DER): tokens signed
    /// by any of them should be accepted, which allows key rotation.
    pub fn verification_keys_der(&self) -> &[Vec<u8>] {
        &self.verification_keys
    }

    /// The JWS `kid`: unpadded base64url of SHA-256 over the public key's
    /// SubjectPublicKeyInfo DER, the way Kubernetes derives it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The JWK `n` and `e` members (unpadded base64url, big-endian) for a
    /// JWKS document.
    pub fn jwk_components(&self) -> (String, String) {
        let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(self.key_pair.public());
        (
            URL_SAFE_NO_PAD.encode(public.n),
            URL_SAFE_NO_PAD.encode(public.e),
        )
    }

    /// RS256 signature (RSASSA-PKCS1-v1_5 with SHA-256) over `message`, e.g.
    /// a JWS signing input `base64url(header) "." base64url(claims)`.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        let mut sig = vec![0; self.key_pair.public().modulus_len()];
        self.key_pair
            .sign(
                &signature::RSA_PKCS1_SHA256,
                &ring::rand::SystemRandom::new(),
                message,
                &mut sig,
            )
            .expect("RSA signing with a validated key and a correctly sized buffer");
        sig
    }

    /// Checks an RS256 signature against every key of `sa.pub`.
    pub fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        self.verification_keys
            .iter()
            .any(|spki| verify_rs256(spki, message, sig))
    }
}

/// Verifies RS256 with a SubjectPublicKeyInfo DER.
fn verify_rs256(spki: &[u8], message: &[u8], sig: &[u8]) -> bool {
    // ring wants the bare RSAPublicKey, which is the SPKI's BIT STRING content.
    let Some(rsa_public_key) = der::read(spki)
        .and_then(|(seq, _)| der::children(seq.content))
        .and_then(|f| f.get(1).copied())
        .filter(|bits| bits.tag == der::TAG_BIT_STRING && bits.content.first() == Some(&0))
        .map(|bits| &bits.content[1..])
    else {
        return false;
    };
    signature::UnparsedPublicKey::new(&signature::RSA_PKCS1_2048_8192_SHA256, rsa_public_key)
        .verify(message, sig)
        .is_ok()
}
