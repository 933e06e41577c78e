//! certificates.k8s.io: CertificateSigningRequest validation, as Kubernetes'
//! `pkg/apis/certificates/validation`. What an update may change depends on where it is
//! written: the main resource changes neither conditions nor the certificate, `approval` may
//! add Approved/Denied conditions, `status` may set the certificate (once). Laxer rules apply
//! where the stored object already breaks the strict ones (compatibility with old data).

use std::collections::BTreeSet;

use serde_json::Value;

use super::{arr, idx, int, jstr, meta, names, s, Errs};
use crate::field::FieldError;

/// The signer the v1 API refuses for new requests.
const LEGACY_UNKNOWN_SIGNER: &str = "kubernetes.io/legacy-unknown";

const USAGES: &[&str] = &[
    "any",
    "cert sign",
    "client auth",
    "code signing",
    "content commitment",
    "crl sign",
    "data encipherment",
    "decipher only",
    "digital signature",
    "email protection",
    "encipher only",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "key agreement",
    "key encipherment",
    "microsoft sgc",
    "netscape sgc",
    "ocsp signing",
    "s/mime",
    "server auth",
    "signing",
    "timestamping",
];

/// Condition types whose status may only be `True`.
const TRUE_ONLY_TYPES: &[&str] = &["Approved", "Denied", "Failed"];

/// What one write may do, and what it is forgiven because the stored object already does it
/// (Kubernetes' `certificateValidationOptions`).
#[derive(Debug, Default, Clone, Copy)]
struct Options {
    /// Approved/Denied conditions may be added (the `approval` subresource).
    setting_approval_conditions: bool,
    /// `status.certificate` may be set (the `status` subresource).
    setting_certificate: bool,
    both_approved_and_denied: bool,
    legacy_signer_name: bool,
    duplicate_condition_types: bool,
    empty_condition_type: bool,
    arbitrary_certificate: bool,
    unknown_usages: bool,
    duplicate_usages: bool,
}

impl Options {
    /// Kubernetes' `getValidationOptions`: `old` is None on create.
    fn new(new: &Value, old: Option<&Value>) -> Options {
        let Some(old) = old else {
            return Options::default();
        };
        let old_types: Vec<&str> = conditions(old).iter().map(|c| s(c, "type")).collect();
        let mut seen = BTreeSet::new();
        let old_usages: Vec<&str> = usages(old);
        let mut seen_usages = BTreeSet::new();
        Options {
            setting_approval_conditions: false,
            setting_certificate: false,
            both_approved_and_denied: old_types.contains(&"Approved")
                && old_types.contains(&"Denied"),
            legacy_signer_name: signer_name(old) == LEGACY_UNKNOWN_SIGNER,
            duplicate_condition_types: !old_types.iter().all(|t| seen.insert(*t)),
            empty_condition_type: old_types.iter().any(|t| t.is_empty()),
            arbitrary_certificate: certificate(new) == certificate(old)
                || check_certificate(&certificate(old)).is_err(),
            unknown_usages: old_usages.iter().any(|u| !USAGES.contains(u)),
            duplicate_usages: !old_usages.iter().all(|u| seen_usages.insert(*u)),
        }
    }
}

fn spec(csr: &Value) -> &Value {
    csr.get("spec").unwrap_or(&Value::Null)
}

fn signer_name(csr: &Value) -> &str {
    s(spec(csr), "signerName")
}

fn usages(csr: &Value) -> Vec<&str> {
    arr(spec(csr), "usages")
        .iter()
        .map(|u| u.as_str().unwrap_or(""))
        .collect()
}

/// `status.conditions`.
fn conditions(csr: &Value) -> &[Value] {
    csr.get("status").map_or(&[], |st| arr(st, "conditions"))
}

/// The conditions of type `t`.
fn of_type<'a>(csr: &'a Value, t: &str) -> Vec<&'a Value> {
    conditions(csr)
        .iter()
        .filter(|c| s(c, "type") == t)
        .collect()
}

/// `status.certificate` as bytes (the JSON holds them in base64). Bytes that are not base64
/// are compared and checked as they are.
fn certificate(csr: &Value) -> Vec<u8> {
    let text = csr
        .get("status")
        .map(|st| s(st, "certificate"))
        .unwrap_or("");
    base64_decode(text).unwrap_or_else(|| text.as_bytes().to_vec())
}

/// A `[]byte` field as Go's `encoding/json` reads it (standard base64; line breaks ignored).
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let s: String = s.chars().filter(|c| !matches!(c, '\n' | '\r')).collect();
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// Validate a new CertificateSigningRequest (its metadata is checked by the caller).
pub(crate) fn validate_new(errs: &mut Errs, csr: &Value) {
    validate_object(errs, csr, Options::new(csr, None));
}

/// Validate an update of `old` to `new` written to `subresource` (`""`, `"status"` or
/// `"approval"`): Kubernetes' `ValidateCertificateSigningRequest{,Status,Approval}Update`.
pub(crate) fn validate_update(errs: &mut Errs, new: &Value, old: &Value, subresource: &str) {
    let mut opts = Options::new(new, Some(old));
    match subresource {
        "status" => opts.setting_certificate = true,
        "approval" => opts.setting_approval_conditions = true,
        _ => {}
    }
    meta::object_meta(
        errs,
        new.get("metadata"),
        false,
        names::name_is_anything,
        "metadata",
    );
    validate_object(errs, new, opts);
    // Approved, Denied and Failed conditions stay once set.
    for t in ["Approved", "Denied", "Failed"] {
        if of_type(new, t).len() < of_type(old, t).len() {
            errs.push(FieldError::forbidden(
                "status.conditions",
                &format!("updates may not remove a condition of type {}", jq(t)),
            ));
        }
    }
    if !opts.setting_approval_conditions {
        for t in ["Approved", "Denied"] {
            let (was, now) = (of_type(old, t), of_type(new, t));
            if now.len() > was.len() {
                errs.push(FieldError::forbidden(
                    "status.conditions",
                    &format!("updates may not add a condition of type {}", jq(t)),
                ));
            } else if now.len() == was.len() && now != was {
                errs.push(FieldError::forbidden(
                    "status.conditions",
                    &format!("updates may not modify a condition of type {}", jq(t)),
                ));
            }
        }
    }
    let (new_cert, old_cert) = (certificate(new), certificate(old));
    if new_cert != old_cert {
        if !opts.setting_certificate {
            errs.push(FieldError::forbidden(
                "status.certificate",
                "updates may not set certificate content",
            ));
        } else if !old_cert.is_empty() {
            errs.push(FieldError::forbidden(
                "status.certificate",
                "updates may not modify existing certificate content",
            ));
        }
    }
    meta::object_meta_update(errs, new.get("metadata"), old.get("metadata"), "metadata");
}

fn jq(s: &str) -> String {
    crate::field::go_quote(s)
}

/// Kubernetes' `validateCertificateSigningRequest` without the metadata.
fn validate_object(errs: &mut Errs, csr: &Value, opts: Options) {
    let spec = spec(csr);
    let req = s(spec, "request");
    let pem = base64_decode(req)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
        errs.push(FieldError::invalid_shown(
            "spec.request",
            "[]byte{...}",
            "PEM block type must be CERTIFICATE REQUEST",
        ));
    }
    let usages = arr(spec, "usages");
    if usages.is_empty() {
        errs.push(FieldError::required("spec.usages", ""));
    }
    if !opts.unknown_usages {
        for (i, u) in usages.iter().enumerate() {
            let u = u.as_str().unwrap_or("");
            if !USAGES.contains(&u) {
                errs.push(FieldError::not_supported(
                    idx("spec.usages", i),
                    &jstr(u),
                    USAGES,
                ));
            }
        }
    }
    if !opts.duplicate_usages {
        let mut seen = BTreeSet::new();
        for (i, u) in usages.iter().enumerate() {
            let u = u.as_str().unwrap_or("");
            if !seen.insert(u) {
                errs.push(FieldError::duplicate(idx("spec.usages", i), &jstr(u)));
            }
        }
    }
    let signer = s(spec, "signerName");
    if !opts.legacy_signer_name && signer == LEGACY_UNKNOWN_SIGNER {
        errs.push(FieldError::invalid(
            "spec.signerName",
            &jstr(signer),
            "the legacy signerName is not allowed via this API version",
        ));
    } else {
        signer_name_rules(errs, signer);
    }
    if let Some(e) = int(spec, "expirationSeconds").filter(|e| *e < 600) {
        errs.push(FieldError::invalid(
            "spec.expirationSeconds",
            &Value::from(e),
            "may not specify a duration less than 600 seconds (10 minutes)",
        ));
    }
    validate_conditions(errs, csr, opts);
    if !opts.arbitrary_certificate {
        if let Err(e) = check_certificate(&certificate(csr)) {
            errs.push(FieldError::invalid_shown(
                "status.certificate",
                "\"<certificate data>\"",
                &e,
            ));
        }
    }
}

fn signer_name_rules(errs: &mut Errs, signer: &str) {
    if signer.is_empty() {
        errs.push(FieldError::required("spec.signerName", ""));
        return;
    }
    match signer.split_once('/') {
        Some((domain, path)) if !domain.is_empty() && !path.is_empty() => {
            for m in names::dns1123_subdomain(domain) {
                errs.push(FieldError::invalid("spec.signerName", &jstr(domain), &m));
            }
        }
        _ => errs.push(FieldError::invalid(
            "spec.signerName",
            &jstr(signer),
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        )),
    }
}

/// Kubernetes' `validateConditions`.
fn validate_conditions(errs: &mut Errs, csr: &Value, opts: Options) {
    let path = "status.conditions";
    let mut seen = BTreeSet::new();
    let (mut approved, mut denied) = (false, false);
    for (i, c) in conditions(csr).iter().enumerate() {
        let at = idx(path, i);
        let t = s(c, "type");
        if !opts.empty_condition_type && t.is_empty() {
            errs.push(FieldError::required(format!("{at}.type"), ""));
        }
        let allowed: &[&str] = if TRUE_ONLY_TYPES.contains(&t) {
            &["True"]
        } else {
            &["False", "True", "Unknown"]
        };
        let status = s(c, "status");
        if status.is_empty() {
            errs.push(FieldError::required(format!("{at}.status"), ""));
        } else if !allowed.contains(&status) {
            errs.push(FieldError::not_supported(
                format!("{at}.status"),
                &jstr(status),
                allowed,
            ));
        }
        if !opts.both_approved_and_denied {
            let clash = match t {
                "Approved" => {
                    approved = true;
                    denied
                }
                "Denied" => {
                    denied = true;
                    approved
                }
                _ => false,
            };
            if clash {
                errs.push(FieldError::invalid(
                    format!("{at}.type"),
                    &jstr(t),
                    "Approved and Denied conditions are mutually exclusive",
                ));
            }
        }
        if !opts.duplicate_condition_types && !seen.insert(t) {
            errs.push(FieldError::duplicate(format!("{at}.type"), &jstr(t)));
        }
    }
}

/// Kubernetes' `validateCertificate`: nothing, or one or more CERTIFICATE PEM blocks without
/// headers, each holding DER certificates.
fn check_certificate(pem: &[u8]) -> Result<(), String> {
    if pem.is_empty() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(pem);
    let mut rest: &str = &text;
    let mut blocks = 0;
    while let Some(block) = next_pem_block(&mut rest) {
        if block.kind != "CERTIFICATE" {
            return Err(format!(
                "only CERTIFICATE PEM blocks are allowed, found {}",
                jq(&block.kind)
            ));
        }
        if block.has_headers {
            return Err("no PEM block headers are permitted".into());
        }
        blocks += 1;
        let count = der_sequences(&block.der).ok_or("x509: malformed certificate")?;
        if count == 0 {
            return Err("found CERTIFICATE PEM block containing 0 certificates".into());
        }
    }
    if blocks == 0 {
        return Err("must contain at least one CERTIFICATE PEM block".into());
    }
    Ok(())
}

struct PemBlock {
    kind: String,
    has_headers: bool,
    der: Vec<u8>,
}

/// The next well-formed PEM block of `rest` (advanced past it), as Go's `pem.Decode` finds
/// them: text before a block is skipped, and so is a block that does not decode.
fn next_pem_block(rest: &mut &str) -> Option<PemBlock> {
    const BEGIN: &str = "-----BEGIN ";
    loop {
        let start = rest.find(BEGIN)?;
        let after = &rest[start + BEGIN.len()..];
        let Some(line_end) = after.find('\n') else {
            *rest = "";
            return None;
        };
        let header = after[..line_end].trim_end_matches('\r');
        let body_start = &after[line_end + 1..];
        let Some(kind) = header.strip_suffix("-----") else {
            *rest = body_start;
            continue;
        };
        let end_marker = format!("-----END {kind}-----");
        let Some(end) = body_start.find(&end_marker) else {
            *rest = body_start;
            continue;
        };
        let body = &body_start[..end];
        *rest = &body_start[end + end_marker.len()..];
        let mut has_headers = false;
        let mut data = String::new();
        let mut in_headers = true;
        for line in body.lines() {
            if in_headers && line.contains(':') {
                has_headers = true;
                continue;
            }
            in_headers = false;
            data.extend(line.chars().filter(|c| !c.is_whitespace()));
        }
        let Some(der) = base64_decode(&data) else {
            continue;
        };
        return Some(PemBlock {
            kind: kind.to_string(),
            has_headers,
            der,
        });
    }
}

/// How many DER SEQUENCEs `der` holds back to back (None: not only SEQUENCEs).
fn der_sequences(der: &[u8]) -> Option<usize> {
    let mut at = 0;
    let mut count = 0;
    while at < der.len() {
        if der[at] != 0x30 {
            return None;
        }
        let first = *der.get(at + 1)?;
        let (len, head) = if first < 0x80 {
            (first as usize, 2)
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 {
                return None;
            }
            let mut len = 0usize;
            for i in 0..n {
                len = (len << 8) | *der.get(at + 2 + i)? as usize;
            }
            (len, 2 + n)
        };
        at = at.checked_add(head)?.checked_add(len)?;
        if at > der.len() {
            return None;
        }
        count += 1;
    }
    Some(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn b64(s: &str) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn csr(conditions: Value, certificate: Option<&str>) -> Value {
        let mut status = json!({"conditions": conditions});
        if let Some(c) = certificate {
            status["certificate"] = json!(b64(c));
        }
        json!({"metadata": {"name": "jane", "resourceVersion": "5"}, "spec": {
            "request": b64("-----BEGIN CERTIFICATE REQUEST-----\n-----END CERTIFICATE REQUEST-----\n"),
            "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]},
            "status": status})
    }

    fn update(new: &Value, old: &Value, sub: &str) -> Vec<String> {
        let mut errs = Vec::new();
        validate_update(&mut errs, new, old, sub);
        errs.into_iter().map(|e| e.message).collect()
    }

    const CERT: &str = "-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n";

    #[test]
    fn approval_adds_conditions_that_stay() {
        let pending = csr(json!([]), None);
        let approved = csr(json!([{"type": "Approved", "status": "True"}]), None);
        assert!(update(&approved, &pending, "approval").is_empty());
        assert_eq!(
            update(&approved, &pending, "status"),
            ["status.conditions: Forbidden: updates may not add a condition of type \"Approved\""]
        );
        assert_eq!(
            update(&pending, &approved, "approval"),
            ["status.conditions: Forbidden: updates may not remove a condition of type \"Approved\""]
        );
        let both = csr(
            json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}]),
            None,
        );
        assert_eq!(
            update(&both, &approved, "approval"),
            ["status.conditions[1].type: Invalid value: \"Denied\": Approved and Denied conditions are mutually exclusive"]
        );
        // Data that already breaks the rule stays writable.
        assert!(update(&both, &both, "approval").is_empty());
        let unsupported = csr(json!([{"type": "Approved", "status": "False"}]), None);
        assert_eq!(
            update(&unsupported, &pending, "approval"),
            ["status.conditions[0].status: Unsupported value: \"False\": supported values: \"True\""]
        );
    }

    #[test]
    fn the_certificate_is_set_once_through_status() {
        let approved = csr(json!([{"type": "Approved", "status": "True"}]), None);
        let issued = csr(json!([{"type": "Approved", "status": "True"}]), Some(CERT));
        assert!(update(&issued, &approved, "status").is_empty());
        assert_eq!(
            update(&issued, &approved, "approval"),
            ["status.certificate: Forbidden: updates may not set certificate content"]
        );
        let other = CERT.replace("MAMCAQE=", "MAMCAQI=");
        let reissued = csr(
            json!([{"type": "Approved", "status": "True"}]),
            Some(&other),
        );
        assert_eq!(
            update(&reissued, &issued, "status"),
            ["status.certificate: Forbidden: updates may not modify existing certificate content"]
        );
        let key = csr(
            json!([]),
            Some("-----BEGIN PRIVATE KEY-----\nMAMCAQE=\n-----END PRIVATE KEY-----\n"),
        );
        let pending = csr(json!([]), None);
        assert_eq!(
            update(&key, &pending, "status"),
            ["status.certificate: Invalid value: \"<certificate data>\": only CERTIFICATE PEM blocks are allowed, found \"PRIVATE KEY\""]
        );
        let junk = csr(json!([]), Some("junk"));
        assert_eq!(
            update(&junk, &pending, "status"),
            ["status.certificate: Invalid value: \"<certificate data>\": must contain at least one CERTIFICATE PEM block"]
        );
    }

    #[test]
    fn new_requests_may_not_use_the_legacy_signer() {
        let mut obj = csr(json!([]), None);
        obj["spec"]["signerName"] = json!(LEGACY_UNKNOWN_SIGNER);
        let mut errs = Vec::new();
        validate_new(&mut errs, &obj);
        assert_eq!(
            errs[0].message,
            "spec.signerName: Invalid value: \"kubernetes.io/legacy-unknown\": the legacy signerName is not allowed via this API version"
        );
        // Stored ones stay writable.
        assert!(update(&obj, &obj, "").is_empty());
    }
}
