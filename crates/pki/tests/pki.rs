//! The PKI on disk: creation, reload, SANs, renewal rules, errors, issuing.

use std::net::IpAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use capstan_pki::{
    certificate_sans, identity_from_cert, Error, Pki, PkiOptions, APISERVER_CERT_FILE,
    APISERVER_KEY_FILE, CA_CERT_FILE, CA_KEY_FILE, SA_KEY_FILE, SA_PUB_FILE,
};
use rcgen::{CertificateParams, DnType, KeyPair, SanType};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use x509_parser::prelude::*;

const DAY: Duration = Duration::from_secs(24 * 3600);

fn opts() -> PkiOptions {
    PkiOptions {
        hostname: Some("node-a".into()),
        ..PkiOptions::default()
    }
}

fn der_of(pem: &str) -> Vec<u8> {
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .as_ref()
        .to_vec()
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

#[test]
fn create_then_reload_keeps_everything() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    let a = Pki::load_or_create(&dir, opts()).unwrap();
    for f in [
        CA_CERT_FILE,
        CA_KEY_FILE,
        APISERVER_CERT_FILE,
        APISERVER_KEY_FILE,
        SA_KEY_FILE,
        SA_PUB_FILE,
    ] {
        assert!(dir.join(f).is_file(), "{f} missing");
    }
    assert_eq!(a.written_files().len(), 6);
    for f in [CA_KEY_FILE, APISERVER_KEY_FILE, SA_KEY_FILE] {
        assert_eq!(mode(&dir.join(f)), 0o600, "{f}");
    }
    assert_eq!(mode(&dir.join(CA_CERT_FILE)), 0o644);

    let ca_key_before = std::fs::read(dir.join(CA_KEY_FILE)).unwrap();
    let b = Pki::load_or_create(&dir, opts()).unwrap();
    assert!(b.written_files().is_empty(), "{:?}", b.written_files());
    assert_eq!(a.ca_cert_pem(), b.ca_cert_pem());
    assert_eq!(a.ca_cert_der(), b.ca_cert_der());
    assert_eq!(a.apiserver_cert_pem(), b.apiserver_cert_pem());
    assert_eq!(
        a.service_account_key().key_id(),
        b.service_account_key().key_id()
    );
    assert_eq!(ca_key_before, std::fs::read(dir.join(CA_KEY_FILE)).unwrap());

    // The CA certificate itself.
    let der = der_of(a.ca_cert_pem());
    let (_, ca) = X509Certificate::from_der(&der).unwrap();
    assert!(ca.is_ca());
    let cn: Vec<_> = ca.subject().iter_common_name().collect();
    assert_eq!(cn[0].as_str().unwrap(), "capstan-ca");
    let life = ca.validity().not_after.timestamp() - ca.validity().not_before.timestamp();
    assert!(life > 9 * 365 * 86400 && life < 11 * 365 * 86400, "{life}");
    assert_eq!(
        ca.public_key().algorithm.algorithm.to_id_string(),
        "1.2.840.10045.2.1"
    );
}

#[test]
fn serving_cert_has_the_kubernetes_sans() {
    let tmp = tempfile::tempdir().unwrap();
    let mut o = opts();
    o.extra_sans = vec!["api.example.com".into(), "192.0.2.10".into()];
    let pki = Pki::load_or_create(tmp.path(), o).unwrap();
    let der = der_of(pki.apiserver_cert_pem());
    let (_, cert) = X509Certificate::from_der(&der).unwrap();
    let san = cert.subject_alternative_name().unwrap().unwrap();
    let mut names = Vec::new();
    let mut ips = Vec::new();
    for n in &san.value.general_names {
        match n {
            GeneralName::DNSName(d) => names.push(d.to_string()),
            GeneralName::IPAddress(b) => ips.push(match b.len() {
                4 => IpAddr::from(<[u8; 4]>::try_from(*b).unwrap()),
                _ => IpAddr::from(<[u8; 16]>::try_from(*b).unwrap()),
            }),
            _ => {}
        }
    }
    for want in [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
        "localhost",
        "node-a",
        "api.example.com",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    for want in ["127.0.0.1", "::1", "10.43.0.1", "192.0.2.10"] {
        let want: IpAddr = want.parse().unwrap();
        assert!(ips.contains(&want), "{want} not in {ips:?}");
    }
    let eku = cert.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.client_auth);
    assert!(!cert.is_ca());
    // Signed by the CA, and the issuer is the CA subject byte for byte.
    let ca_der = der_of(pki.ca_cert_pem());
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    assert_eq!(cert.issuer().as_raw(), ca.subject().as_raw());
    cert.verify_signature(Some(ca.public_key())).unwrap();
    // The key file matches the certificate.
    let key = KeyPair::from_pem(pki.apiserver_key_pem()).unwrap();
    assert_eq!(
        cert.public_key().raw,
        rcgen::PublicKeyData::subject_public_key_info(&key)
    );
    assert_eq!(
        certificate_sans(pki.apiserver_cert_pem().as_bytes())
            .unwrap()
            .0,
        names
    );
}

#[test]
fn new_extra_san_reissues_serving_cert_but_not_ca() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let mut o = opts();
    o.extra_sans = vec!["10.0.0.7".into()];
    let b = Pki::load_or_create(tmp.path(), o.clone()).unwrap();
    assert_eq!(a.ca_cert_pem(), b.ca_cert_pem());
    assert_ne!(a.apiserver_cert_pem(), b.apiserver_cert_pem());
    assert_eq!(
        b.written_files(),
        &[
            tmp.path().join(APISERVER_KEY_FILE),
            tmp.path().join(APISERVER_CERT_FILE)
        ]
    );
    let (_, ips) = certificate_sans(b.apiserver_cert_pem().as_bytes()).unwrap();
    assert!(ips.contains(&"10.0.0.7".parse().unwrap()));
    // Same options again: nothing changes.
    let c = Pki::load_or_create(tmp.path(), o).unwrap();
    assert!(c.written_files().is_empty());
    assert_eq!(b.apiserver_cert_pem(), c.apiserver_cert_pem());
    // A different service CIDR and domain also force a new one.
    let o = PkiOptions {
        service_cidr: "10.96.0.0/12,fd00:10:96::/112".into(),
        cluster_domain: "corp.example".into(),
        ..opts()
    };
    let d = Pki::load_or_create(tmp.path(), o).unwrap();
    let (names, ips) = certificate_sans(d.apiserver_cert_pem().as_bytes()).unwrap();
    assert!(ips.contains(&"10.96.0.1".parse().unwrap()));
    assert!(ips.contains(&"fd00:10:96::1".parse().unwrap()));
    assert!(names.contains(&"kubernetes.default.svc.corp.example".to_string()));
}

#[test]
fn expiring_serving_cert_is_renewed() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::load_or_create(tmp.path(), opts()).unwrap();
    // Replace the serving pair by one valid for 10 days, with the right SANs.
    let (names, ips) = opts().apiserver_sans().unwrap();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (cert, key) = a.issue_serving_cert(&names, &ips, 10 * DAY).unwrap();
    std::fs::write(tmp.path().join(APISERVER_CERT_FILE), &cert).unwrap();
    std::fs::write(tmp.path().join(APISERVER_KEY_FILE), &key).unwrap();
    let b = Pki::load_or_create(tmp.path(), opts()).unwrap();
    assert_ne!(b.apiserver_cert_pem(), cert);
    let der = der_of(b.apiserver_cert_pem());
    let (_, x) = X509Certificate::from_der(&der).unwrap();
    let left = x.validity().time_to_expiration().unwrap();
    assert!(left.whole_days() > 300, "{left}");

    // A pair valid for 60 days is kept.
    let (cert, key) = a.issue_serving_cert(&names, &ips, 60 * DAY).unwrap();
    std::fs::write(tmp.path().join(APISERVER_CERT_FILE), &cert).unwrap();
    std::fs::write(tmp.path().join(APISERVER_KEY_FILE), &key).unwrap();
    let c = Pki::load_or_create(tmp.path(), opts()).unwrap();
    assert_eq!(c.apiserver_cert_pem(), cert);
}

#[test]
fn missing_serving_key_regenerates_the_pair() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::load_or_create(tmp.path(), opts()).unwrap();
    std::fs::remove_file(tmp.path().join(APISERVER_KEY_FILE)).unwrap();
    let b = Pki::load_or_create(tmp.path(), opts()).unwrap();
    assert_ne!(a.apiserver_cert_pem(), b.apiserver_cert_pem());
    assert_eq!(a.ca_cert_pem(), b.ca_cert_pem());
}

#[test]
fn corrupt_files_are_errors_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    Pki::load_or_create(tmp.path(), opts()).unwrap();
    for (file, junk) in [
        (
            CA_CERT_FILE,
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        ),
        (CA_CERT_FILE, "garbage"),
        (CA_KEY_FILE, "garbage"),
        (APISERVER_CERT_FILE, "garbage"),
        (APISERVER_KEY_FILE, "garbage"),
        (SA_KEY_FILE, "garbage"),
        (SA_PUB_FILE, "garbage"),
    ] {
        let path = tmp.path().join(file);
        let good = std::fs::read(&path).unwrap();
        std::fs::write(&path, junk).unwrap();
        let err = Pki::load_or_create(tmp.path(), opts()).unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(&err, Error::File { path: p, .. } if p == &path),
            "{file}: {msg}"
        );
        assert!(msg.contains(&path.display().to_string()), "{msg}");
        // Left as it was, not regenerated.
        assert_eq!(std::fs::read(&path).unwrap(), junk.as_bytes());
        std::fs::write(&path, good).unwrap();
    }
    Pki::load_or_create(tmp.path(), opts()).unwrap();
}

#[test]
fn ca_cert_without_key_is_an_error_and_key_without_cert_recovers() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let key = std::fs::read(tmp.path().join(CA_KEY_FILE)).unwrap();
    std::fs::remove_file(tmp.path().join(CA_KEY_FILE)).unwrap();
    let err = Pki::load_or_create(tmp.path(), opts()).unwrap_err();
    assert!(err.to_string().contains(CA_KEY_FILE), "{err}");
    std::fs::write(tmp.path().join(CA_KEY_FILE), &key).unwrap();

    // Only the key (a first start that died midway): the CA cert is made
    // from it, and the old serving cert, signed by the same key, still
    // verifies against the new CA cert.
    std::fs::remove_file(tmp.path().join(CA_CERT_FILE)).unwrap();
    let b = Pki::load_or_create(tmp.path(), opts()).unwrap();
    assert_eq!(b.written_files(), &[tmp.path().join(CA_CERT_FILE)]);
    assert_eq!(a.apiserver_cert_pem(), b.apiserver_cert_pem());
}

#[test]
fn a_foreign_serving_cert_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    Pki::load_or_create(tmp.path(), opts()).unwrap();
    let other = tempfile::tempdir().unwrap();
    let o = Pki::load_or_create(other.path(), opts()).unwrap();
    std::fs::write(tmp.path().join(APISERVER_CERT_FILE), o.apiserver_cert_pem()).unwrap();
    std::fs::write(tmp.path().join(APISERVER_KEY_FILE), o.apiserver_key_pem()).unwrap();
    let err = Pki::load_or_create(tmp.path(), opts()).unwrap_err();
    assert!(err.to_string().contains(APISERVER_CERT_FILE), "{err}");
}

#[test]
fn bad_options_are_rejected_before_touching_disk() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("pki");
    for cidr in ["10.43.0.0", "10.43.0.0/33", "nonsense/16", "10.0.0.0/31"] {
        let o = PkiOptions {
            service_cidr: cidr.into(),
            ..opts()
        };
        assert!(
            matches!(Pki::load_or_create(&dir, o), Err(Error::Invalid { .. })),
            "{cidr}"
        );
    }
    assert!(!dir.exists());
    assert_eq!(
        capstan_pki::first_service_ip("10.43.12.0/16").unwrap(),
        "10.43.0.1".parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        capstan_pki::first_service_ip("fd00::/108").unwrap(),
        "fd00::1".parse::<IpAddr>().unwrap()
    );
}

#[test]
fn client_cert_identity_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let (cert_pem, key_pem) = pki
        .issue_client_cert(
            "system:admin",
            &["system:masters", "dev team", "ops"],
            30 * DAY,
        )
        .unwrap();
    let der = der_of(&cert_pem);
    let (user, groups) = identity_from_cert(&der).unwrap();
    assert_eq!(user, "system:admin");
    assert_eq!(groups, vec!["system:masters", "dev team", "ops"]);

    let (_, x) = X509Certificate::from_der(&der).unwrap();
    let orgs: Vec<_> = x.subject().iter_organization().collect();
    assert_eq!(orgs.len(), 3, "one O attribute per group");
    assert_eq!(x.subject().iter().count(), 4, "one RDN per attribute");
    let eku = x.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);
    let ca_der = der_of(pki.ca_cert_pem());
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    x.verify_signature(Some(ca.public_key())).unwrap();
    assert_eq!(x.issuer().as_raw(), ca.subject().as_raw());
    let left = x.validity().time_to_expiration().unwrap();
    assert!(left.whole_days() >= 29 && left.whole_days() <= 30, "{left}");
    assert!(KeyPair::from_pem(&key_pem).is_ok());

    // No groups, and an empty user.
    let (cert_pem, _) = pki.issue_client_cert("alice", &[], DAY).unwrap();
    assert_eq!(
        identity_from_cert(&der_of(&cert_pem)).unwrap(),
        ("alice".to_string(), vec![])
    );
    assert!(pki.issue_client_cert("", &[], DAY).is_err());
    assert!(identity_from_cert(b"junk").is_none());
}

#[test]
fn validity_is_capped_at_the_ca_expiry() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let (cert_pem, _) = pki.issue_client_cert("bob", &[], 100 * 365 * DAY).unwrap();
    let der = der_of(&cert_pem);
    let (_, x) = X509Certificate::from_der(&der).unwrap();
    let ca_der = der_of(pki.ca_cert_pem());
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    assert!(x.validity().not_after <= ca.validity().not_after);
}

#[test]
fn serving_cert_for_a_kubelet() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let ip: IpAddr = "192.0.2.5".parse().unwrap();
    let (cert_pem, key_pem) = pki
        .issue_serving_cert(&["node-b", "node-b.local"], &[ip], 365 * DAY)
        .unwrap();
    let (names, ips) = certificate_sans(cert_pem.as_bytes()).unwrap();
    assert_eq!(names, vec!["node-b", "node-b.local"]);
    assert_eq!(ips, vec![ip]);
    assert!(KeyPair::from_pem(&key_pem).is_ok());
    assert!(pki.issue_serving_cert(&[], &[], DAY).is_err());
}

#[test]
fn sign_csr_keeps_subject_and_sans_and_applies_usages() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(DnType::CommonName, "system:node:node-c");
    params.subject_alt_names = vec![
        SanType::DnsName("node-c".try_into().unwrap()),
        SanType::IpAddress("192.0.2.9".parse().unwrap()),
    ];
    // Requested EKU is ignored: usages come from the caller.
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
    let csr = params.serialize_request(&key).unwrap();
    let csr_pem = csr.pem().unwrap();
    let (_, req) =
        x509_parser::certification_request::X509CertificationRequest::from_der(csr.der()).unwrap();

    let cert_pem = pki
        .sign_csr(
            csr_pem.as_bytes(),
            &["digital signature", "key encipherment", "server auth"],
            30 * DAY,
        )
        .unwrap();
    let der = der_of(&cert_pem);
    let (_, x) = X509Certificate::from_der(&der).unwrap();
    assert_eq!(
        x.subject().as_raw(),
        req.certification_request_info.subject.as_raw()
    );
    assert_eq!(
        x.public_key().raw,
        req.certification_request_info.subject_pki.raw
    );
    assert_eq!(
        identity_from_cert(&der).unwrap(),
        (
            "system:node:node-c".to_string(),
            vec!["system:nodes".to_string()]
        )
    );
    let (names, ips) = certificate_sans(&der).unwrap();
    assert_eq!(names, vec!["node-c"]);
    assert_eq!(ips, vec!["192.0.2.9".parse::<IpAddr>().unwrap()]);
    let eku = x.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.server_auth && !eku.code_signing && !eku.client_auth);
    let ku = x.key_usage().unwrap().unwrap().value;
    assert!(ku.digital_signature() && ku.key_encipherment() && !ku.key_cert_sign());
    assert!(!x.is_ca());
    let ca_der = der_of(pki.ca_cert_pem());
    let (_, ca) = X509Certificate::from_der(&ca_der).unwrap();
    x.verify_signature(Some(ca.public_key())).unwrap();

    // Unknown usage, tampered CSR, junk.
    assert!(matches!(
        pki.sign_csr(csr_pem.as_bytes(), &["flying"], DAY),
        Err(Error::Invalid { .. })
    ));
    let mut tampered = csr.der().as_ref().to_vec();
    let at = tampered.windows(6).position(|w| w == b"node-c").unwrap();
    tampered[at] = b'N';
    let tampered_pem = format!(
        "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
        base64_encode(&tampered)
    );
    let err = pki
        .sign_csr(tampered_pem.as_bytes(), &["client auth"], DAY)
        .unwrap_err();
    assert!(err.to_string().contains("signature"), "{err}");
    assert!(pki.sign_csr(b"nope", &["client auth"], DAY).is_err());
}

fn base64_encode(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(b)
}

#[test]
fn service_account_key_signs_rs256() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let sa = pki.service_account_key();
    assert_eq!(sa.algorithm(), "RS256");
    let sig = sa.sign(b"header.claims");
    assert_eq!(sig.len(), 256);
    assert!(sa.verify(b"header.claims", &sig));
    assert!(!sa.verify(b"header.claimz", &sig));
    let (n, e) = sa.jwk_components();
    assert_eq!(e, "AQAB");
    assert_eq!(n.len(), 342); // 256 bytes, unpadded base64url
    assert_eq!(sa.key_id().len(), 43);
    let text = std::fs::read_to_string(tmp.path().join(SA_PUB_FILE)).unwrap();
    assert!(text.starts_with("-----BEGIN PUBLIC KEY-----"));
    assert_eq!(sa.public_key_pem(), text);
    assert!(std::fs::read_to_string(tmp.path().join(SA_KEY_FILE))
        .unwrap()
        .starts_with("-----BEGIN PRIVATE KEY-----"));

    // sa.pub is recreated from sa.key; an sa.pub of another key is an error.
    std::fs::remove_file(tmp.path().join(SA_PUB_FILE)).unwrap();
    let again = Pki::load_or_create(tmp.path(), opts()).unwrap();
    assert_eq!(again.service_account_key().key_id(), sa.key_id());
    assert_eq!(
        std::fs::read_to_string(tmp.path().join(SA_PUB_FILE)).unwrap(),
        text
    );
    let other = tempfile::tempdir().unwrap();
    let o = Pki::load_or_create(other.path(), opts()).unwrap();
    std::fs::write(
        tmp.path().join(SA_PUB_FILE),
        o.service_account_key().public_key_pem(),
    )
    .unwrap();
    let err = Pki::load_or_create(tmp.path(), opts()).unwrap_err();
    assert!(err.to_string().contains(SA_PUB_FILE), "{err}");
    // Both keys in sa.pub (rotation): accepted, both verify.
    std::fs::write(
        tmp.path().join(SA_PUB_FILE),
        format!("{text}{}", o.service_account_key().public_key_pem()),
    )
    .unwrap();
    let rotated = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let sa2 = rotated.service_account_key();
    assert_eq!(sa2.verification_keys_der().len(), 2);
    assert!(sa2.verify(b"m", &o.service_account_key().sign(b"m")));
}

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64_encode(der);
    let lines: Vec<&str> = b64
        .as_bytes()
        .chunks(64)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    format!(
        "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
        lines.join("\n")
    )
}

/// A CA brought from elsewhere (kubeadm writes "RSA PRIVATE KEY" and
/// "EC PRIVATE KEY" files) is used as it is.
#[test]
fn existing_rsa_and_sec1_cas_are_used() {
    use rsa::pkcs1::EncodeRsaPrivateKey;
    use rsa::pkcs8::EncodePrivateKey;

    let rsa_key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
    let pkcs1 = rsa_key.to_pkcs1_der().unwrap();
    let pkcs8 = rsa_key.to_pkcs8_der().unwrap();
    let rsa_kp = KeyPair::try_from(pkcs8.as_bytes()).unwrap();

    let ec_kp = KeyPair::generate().unwrap();
    // The SEC1 ECPrivateKey is the OCTET STRING inside the PKCS#8 wrapping.
    let p8 = ec_kp.serialize_der();
    let sec1 = {
        let (_, seq) = x509_parser::der_parser::parse_der(&p8).unwrap();
        let items = seq.as_sequence().unwrap();
        items[2].as_slice().unwrap().to_vec()
    };

    for (label, key_der, kp) in [
        ("RSA PRIVATE KEY", pkcs1.as_bytes().to_vec(), rsa_kp),
        ("EC PRIVATE KEY", sec1, ec_kp),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::CommonName, "kubernetes");
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        let ca = params.self_signed(&kp).unwrap();
        std::fs::write(tmp.path().join(CA_CERT_FILE), ca.pem()).unwrap();
        std::fs::write(tmp.path().join(CA_KEY_FILE), pem(label, &key_der)).unwrap();

        let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
        assert_eq!(pki.ca_cert_pem(), ca.pem(), "{label}");
        let (cert_pem, _) = pki.issue_client_cert("u", &["g"], DAY).unwrap();
        let der = der_of(&cert_pem);
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        let (_, ca_x) = X509Certificate::from_der(ca.der()).unwrap();
        x.verify_signature(Some(ca_x.public_key())).unwrap();
        let der = der_of(pki.apiserver_cert_pem());
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        x.verify_signature(Some(ca_x.public_key())).unwrap();
        // Reload works too, and leaves the CA files alone.
        let again = Pki::load_or_create(tmp.path(), opts()).unwrap();
        assert!(again.written_files().is_empty(), "{label}");
        assert_eq!(
            std::fs::read_to_string(tmp.path().join(CA_KEY_FILE)).unwrap(),
            pem(label, &key_der)
        );
    }
}
