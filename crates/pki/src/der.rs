//! Just enough DER to splice names into certificates and wrap bare keys.
//!
//! rcgen builds every certificate here, but its distinguished-name type holds
//! one value per attribute type, while Kubernetes puts one `O` attribute per
//! group in client certificates, and a CSR's subject must be kept byte for
//! byte. So a certificate is built by rcgen with a placeholder subject, then
//! its TBSCertificate gets the real issuer and subject names spliced in and
//! is signed again with the CA key.

use rcgen::SigningKey;

pub(crate) const TAG_INTEGER: u8 = 0x02;
pub(crate) const TAG_BIT_STRING: u8 = 0x03;
pub(crate) const TAG_OCTET_STRING: u8 = 0x04;
pub(crate) const TAG_NULL: u8 = 0x05;
pub(crate) const TAG_OID: u8 = 0x06;
pub(crate) const TAG_UTF8_STRING: u8 = 0x0c;
pub(crate) const TAG_SEQUENCE: u8 = 0x30;
pub(crate) const TAG_SET: u8 = 0x31;

/// Encoded OIDs (content octets only).
pub(crate) const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
pub(crate) const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
/// 1.2.840.113549.1.1.1
pub(crate) const OID_RSA_ENCRYPTION: &[u8] =
    &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];
/// 1.2.840.10045.2.1
pub(crate) const OID_EC_PUBLIC_KEY: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01];
/// 1.2.840.10045.3.1.7
pub(crate) const OID_P256: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07];
/// 1.3.132.0.34
pub(crate) const OID_P384: &[u8] = &[0x2b, 0x81, 0x04, 0x00, 0x22];

/// One element: its tag, its whole encoding and its content octets.
#[derive(Clone, Copy)]
pub(crate) struct Tlv<'a> {
    pub tag: u8,
    pub whole: &'a [u8],
    pub content: &'a [u8],
}

/// Reads one definite-length element off the front of `input`.
pub(crate) fn read(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let tag = *input.first()?;
    if tag & 0x1f == 0x1f {
        return None; // multi-byte tags never occur in the structures read here
    }
    let first = *input.get(1)? as usize;
    let (len, header) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | *input.get(2 + i)? as usize;
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    if input.len() < end {
        return None;
    }
    Some((
        Tlv {
            tag,
            whole: &input[..end],
            content: &input[header..end],
        },
        &input[end..],
    ))
}

/// Splits the content of a constructed element into its children.
pub(crate) fn children(mut content: &[u8]) -> Option<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (tlv, rest) = read(content)?;
        out.push(tlv);
        content = rest;
    }
    Some(out)
}

pub(crate) fn encode(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(content.len() + 6);
    out.push(tag);
    let len = content.len();
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | (bytes.len() - skip) as u8);
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

pub(crate) fn sequence(parts: &[&[u8]]) -> Vec<u8> {
    encode(TAG_SEQUENCE, &parts.concat())
}

/// A Name with one RDN per attribute: `CN=user`, then one `O=` per group,
/// all as UTF8String (as Go's encoder does for Kubernetes client certs).
pub(crate) fn name(common_name: &str, organizations: &[&str]) -> Vec<u8> {
    let attr = |oid: &[u8], value: &str| {
        encode(
            TAG_SET,
            &sequence(&[
                &encode(TAG_OID, oid),
                &encode(TAG_UTF8_STRING, value.as_bytes()),
            ]),
        )
    };
    let mut rdns = Vec::new();
    for org in organizations {
        rdns.extend(attr(OID_ORGANIZATION, org));
    }
    rdns.extend(attr(OID_COMMON_NAME, common_name));
    encode(TAG_SEQUENCE, &rdns)
}

/// Replaces the issuer and subject names of a signed certificate and signs
/// its TBSCertificate again with `signer` (whose algorithm must be the one
/// the certificate already names, i.e. the CA key that rcgen signed it with).
pub(crate) fn resign_with_names(
    cert_der: &[u8],
    issuer: &[u8],
    subject: &[u8],
    signer: &impl SigningKey,
) -> Result<Vec<u8>, String> {
    let bad = || "internal error: unexpected certificate encoding".to_string();
    let (cert, rest) = read(cert_der).ok_or_else(bad)?;
    if cert.tag != TAG_SEQUENCE || !rest.is_empty() {
        return Err(bad());
    }
    let parts = children(cert.content).ok_or_else(bad)?;
    let [tbs, sig_alg, _sig] = parts.as_slice() else {
        return Err(bad());
    };
    let fields = children(tbs.content).ok_or_else(bad)?;
    // [0] version is present for v3 certificates, which rcgen always makes.
    let base = usize::from(fields.first().map(|f| f.tag) == Some(0xa0));
    let (issuer_at, subject_at) = (base + 2, base + 4);
    if fields.len() <= subject_at
        || fields[issuer_at].tag != TAG_SEQUENCE
        || fields[subject_at].tag != TAG_SEQUENCE
    {
        return Err(bad());
    }
    let mut tbs_content = Vec::with_capacity(tbs.content.len() + subject.len());
    for (i, f) in fields.iter().enumerate() {
        let bytes = match i {
            _ if i == issuer_at => issuer,
            _ if i == subject_at => subject,
            _ => f.whole,
        };
        tbs_content.extend_from_slice(bytes);
    }
    let new_tbs = encode(TAG_SEQUENCE, &tbs_content);
    let signature = signer.sign(&new_tbs).map_err(|e| e.to_string())?;
    let mut bits = Vec::with_capacity(signature.len() + 1);
    bits.push(0); // no unused bits
    bits.extend_from_slice(&signature);
    Ok(sequence(&[
        &new_tbs,
        sig_alg.whole,
        &encode(TAG_BIT_STRING, &bits),
    ]))
}

/// Wraps a PKCS#1 RSAPrivateKey in a PKCS#8 PrivateKeyInfo.
pub(crate) fn pkcs8_from_pkcs1(pkcs1: &[u8]) -> Vec<u8> {
    sequence(&[
        &encode(TAG_INTEGER, &[0]),
        &sequence(&[&encode(TAG_OID, OID_RSA_ENCRYPTION), &encode(TAG_NULL, &[])]),
        &encode(TAG_OCTET_STRING, pkcs1),
    ])
}

/// Wraps a SEC1 ECPrivateKey for the given named curve in PKCS#8.
pub(crate) fn pkcs8_from_sec1(sec1: &[u8], curve_oid: &[u8]) -> Vec<u8> {
    sequence(&[
        &encode(TAG_INTEGER, &[0]),
        &sequence(&[
            &encode(TAG_OID, OID_EC_PUBLIC_KEY),
            &encode(TAG_OID, curve_oid),
        ]),
        &encode(TAG_OCTET_STRING, sec1),
    ])
}

/// SubjectPublicKeyInfo for a PKCS#1 RSAPublicKey.
pub(crate) fn rsa_spki(rsa_public_key: &[u8]) -> Vec<u8> {
    let mut bits = Vec::with_capacity(rsa_public_key.len() + 1);
    bits.push(0);
    bits.extend_from_slice(rsa_public_key);
    sequence(&[
        &sequence(&[&encode(TAG_OID, OID_RSA_ENCRYPTION), &encode(TAG_NULL, &[])]),
        &encode(TAG_BIT_STRING, &bits),
    ])
}

/// The named curve of a SEC1 ECPrivateKey, read from its `[0] parameters`.
pub(crate) fn sec1_curve(sec1: &[u8]) -> Option<&[u8]> {
    let (key, _) = read(sec1)?;
    children(key.content)?
        .into_iter()
        .find(|f| f.tag == 0xa0)
        .and_then(|p| read(p.content))
        .filter(|(oid, _)| oid.tag == TAG_OID)
        .map(|(oid, _)| oid.content)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lengths_round_trip() {
        for len in [0usize, 1, 127, 128, 255, 256, 65535, 70000] {
            let content = vec![7u8; len];
            let enc = encode(TAG_OCTET_STRING, &content);
            let (tlv, rest) = read(&enc).unwrap();
            assert!(rest.is_empty());
            assert_eq!(tlv.tag, TAG_OCTET_STRING);
            assert_eq!(tlv.content.len(), len);
            assert_eq!(tlv.whole, &enc[..]);
        }
    }

    #[test]
    fn truncated_input_is_rejected() {
        let enc = encode(TAG_SEQUENCE, &[1, 2, 3]);
        assert!(read(&enc[..enc.len() - 1]).is_none());
        assert!(read(&[]).is_none());
        assert!(read(&[0x30, 0x85, 0, 0, 0, 0, 1]).is_none());
    }
}
