//! Kubeconfig writing and merging, checked by parsing back and by kubectl.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use capstan_pki::kubeconfig::{self, Entry};
use capstan_pki::{Pki, PkiOptions};
use serde_yaml::Value;

fn pki(dir: &Path) -> Pki {
    Pki::load_or_create(
        dir,
        PkiOptions {
            hostname: Some("node-a".into()),
            ..PkiOptions::default()
        },
    )
    .unwrap()
}

fn read_yaml(path: &Path) -> Value {
    serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn named<'a>(doc: &'a Value, list: &str, name: &str) -> &'a Value {
    doc[list]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("{list}/{name} missing"))
}

fn unb64(v: &Value) -> String {
    String::from_utf8(STANDARD.decode(v.as_str().unwrap()).unwrap()).unwrap()
}

#[test]
fn written_kubeconfig_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki(&tmp.path().join("pki"));
    let (cert, key) = pki
        .issue_client_cert(
            "system:admin",
            &["system:masters"],
            Duration::from_secs(3600),
        )
        .unwrap();
    let path = tmp.path().join("nested/dir/admin.kubeconfig");
    kubeconfig::write(
        &path,
        "capstan",
        "https://127.0.0.1:6443",
        pki.ca_cert_pem(),
        "admin",
        &cert,
        &key,
    )
    .unwrap();
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let doc = read_yaml(&path);
    assert_eq!(doc["apiVersion"].as_str(), Some("v1"));
    assert_eq!(doc["kind"].as_str(), Some("Config"));
    assert_eq!(doc["current-context"].as_str(), Some("capstan"));
    let cluster = &named(&doc, "clusters", "capstan")["cluster"];
    assert_eq!(cluster["server"].as_str(), Some("https://127.0.0.1:6443"));
    assert_eq!(
        unb64(&cluster["certificate-authority-data"]),
        pki.ca_cert_pem()
    );
    let user = &named(&doc, "users", "admin")["user"];
    assert_eq!(unb64(&user["client-certificate-data"]), cert);
    assert_eq!(unb64(&user["client-key-data"]), key);
    let ctx = &named(&doc, "contexts", "capstan")["context"];
    assert_eq!(ctx["cluster"].as_str(), Some("capstan"));
    assert_eq!(ctx["user"].as_str(), Some("admin"));
    // No temporary files left behind.
    let leftovers: Vec<_> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers.len(), 1, "{leftovers:?}");
}

const EXISTING: &str = r#"apiVersion: v1
kind: Config
preferences:
  colors: true
clusters:
- name: prod
  cluster:
    server: https://prod.example:6443
    insecure-skip-tls-verify: true
users:
- name: prod-user
  user:
    token: abc123
- name: admin
  user:
    token: stale
contexts:
- name: prod
  context:
    cluster: prod
    user: prod-user
    namespace: web
current-context: prod
extensions:
- name: custom
  extension:
    anything: here
"#;

#[test]
fn merge_preserves_other_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki(&tmp.path().join("pki"));
    let (cert, key) = pki
        .issue_client_cert("admin", &["system:masters"], Duration::from_secs(3600))
        .unwrap();
    let entry = Entry {
        cluster_name: "capstan",
        server_url: "https://127.0.0.1:6443",
        ca_pem: pki.ca_cert_pem(),
        user_name: "admin",
        cert_pem: &cert,
        key_pem: &key,
    };
    let path = tmp.path().join("config");
    std::fs::write(&path, EXISTING).unwrap();

    kubeconfig::merge_into(&path, "capstan", &entry, false).unwrap();
    let doc = read_yaml(&path);
    assert_eq!(doc["current-context"].as_str(), Some("prod"));
    assert_eq!(doc["preferences"]["colors"].as_bool(), Some(true));
    assert_eq!(doc["extensions"][0]["name"].as_str(), Some("custom"));
    let prod = &named(&doc, "contexts", "prod")["context"];
    assert_eq!(prod["namespace"].as_str(), Some("web"));
    assert_eq!(prod["user"].as_str(), Some("prod-user"));
    assert_eq!(
        named(&doc, "users", "prod-user")["user"]["token"].as_str(),
        Some("abc123")
    );
    assert_eq!(
        named(&doc, "clusters", "prod")["cluster"]["insecure-skip-tls-verify"].as_bool(),
        Some(true)
    );
    // The same-named user was replaced, not duplicated.
    assert_eq!(doc["users"].as_sequence().unwrap().len(), 2);
    let admin = &named(&doc, "users", "admin")["user"];
    assert!(admin.get("token").is_none());
    assert_eq!(unb64(&admin["client-certificate-data"]), cert);
    assert_eq!(
        named(&doc, "contexts", "capstan")["context"]["cluster"].as_str(),
        Some("capstan")
    );

    // Merging again with set_current: idempotent, and switches context.
    kubeconfig::merge_into(&path, "capstan", &entry, true).unwrap();
    let doc = read_yaml(&path);
    assert_eq!(doc["current-context"].as_str(), Some("capstan"));
    assert_eq!(doc["clusters"].as_sequence().unwrap().len(), 2);
    assert_eq!(doc["contexts"].as_sequence().unwrap().len(), 2);
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // A missing file is created; an unparsable one is an error and untouched.
    let fresh = tmp.path().join("home/.kube/config");
    kubeconfig::merge_into(&fresh, "capstan", &entry, true).unwrap();
    let doc = read_yaml(&fresh);
    assert_eq!(doc["current-context"].as_str(), Some("capstan"));
    assert_eq!(doc["users"].as_sequence().unwrap().len(), 1);

    let broken = tmp.path().join("broken");
    std::fs::write(&broken, "clusters: [unclosed").unwrap();
    let err = kubeconfig::merge_into(&broken, "capstan", &entry, true).unwrap_err();
    assert!(err.to_string().contains("broken"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&broken).unwrap(),
        "clusters: [unclosed"
    );

    // A symlinked config is updated at its target.
    let target = tmp.path().join("real-config");
    std::fs::write(&target, EXISTING).unwrap();
    let link = tmp.path().join("link-config");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    kubeconfig::merge_into(&link, "capstan", &entry, true).unwrap();
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(
        read_yaml(&target)["current-context"].as_str(),
        Some("capstan")
    );
}

/// kubectl itself reads the files (`config view` needs no server).
#[test]
fn kubectl_accepts_the_kubeconfig() {
    let kubectl = Path::new("/usr/bin/kubectl");
    assert!(
        kubectl.exists(),
        "/usr/bin/kubectl is required (.ci/run installs it)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki(&tmp.path().join("pki"));
    let (cert, key) = pki
        .issue_client_cert("admin", &["system:masters"], Duration::from_secs(3600))
        .unwrap();
    let path = tmp.path().join("admin.kubeconfig");
    kubeconfig::write(
        &path,
        "capstan",
        "https://127.0.0.1:6443",
        pki.ca_cert_pem(),
        "admin",
        &cert,
        &key,
    )
    .unwrap();
    let merged = tmp.path().join("merged");
    std::fs::write(&merged, EXISTING).unwrap();
    let entry = Entry {
        cluster_name: "capstan",
        server_url: "https://127.0.0.1:6443",
        ca_pem: pki.ca_cert_pem(),
        user_name: "admin",
        cert_pem: &cert,
        key_pem: &key,
    };
    kubeconfig::merge_into(&merged, "capstan-ctx", &entry, true).unwrap();

    for (file, context, contexts) in [(&path, "capstan", 1), (&merged, "capstan-ctx", 2)] {
        let out = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(file)
            .args(["config", "view", "--raw", "-o", "json"])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["current-context"], context);
        assert_eq!(v["contexts"].as_array().unwrap().len(), contexts);
        let users = v["users"].as_array().unwrap();
        let admin = users.iter().find(|u| u["name"] == "admin").unwrap();
        assert_eq!(
            STANDARD
                .decode(admin["user"]["client-certificate-data"].as_str().unwrap())
                .unwrap(),
            cert.as_bytes()
        );
        let clusters = v["clusters"].as_array().unwrap();
        let c = clusters.iter().find(|c| c["name"] == "capstan").unwrap();
        assert_eq!(c["cluster"]["server"], "https://127.0.0.1:6443");

        // kubectl also resolves the current context to our cluster and user.
        let out = Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(file)
            .args(["config", "view", "--minify", "--raw", "-o", "json"])
            .env_remove("KUBECONFIG")
            .output()
            .unwrap();
        assert!(out.status.success());
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(v["clusters"][0]["name"], "capstan");
        assert_eq!(v["users"][0]["name"], "admin");
    }
}

/// kubectl (Go's TLS stack) against the API server TLS config: it must
/// accept our serving certificate and present the kubeconfig's client
/// certificate, which rustls verifies and maps to the user and groups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_talks_tls_with_the_client_cert() {
    use std::sync::{Arc, Mutex};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let kubectl = Path::new("/usr/bin/kubectl");
    assert!(
        kubectl.exists(),
        "/usr/bin/kubectl is required (.ci/run installs it)"
    );
    let tmp = tempfile::tempdir().unwrap();
    let pki = pki(&tmp.path().join("pki"));
    let (cert, key) = pki
        .issue_client_cert(
            "jane",
            &["system:masters", "devs"],
            Duration::from_secs(3600),
        )
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let path = tmp.path().join("kubeconfig");
    kubeconfig::write(
        &path,
        "capstan",
        &format!("https://127.0.0.1:{port}"),
        pki.ca_cert_pem(),
        "jane",
        &cert,
        &key,
    )
    .unwrap();

    // This stub speaks HTTP/1.1 only, so take h2 out of the ALPN list.
    let mut config = (*pki
        .server_tls_config(capstan_pki::ClientAuth::Optional)
        .unwrap())
    .clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    type Identity = Option<(String, Vec<String>)>;
    let seen: Arc<Mutex<Vec<Identity>>> = Arc::default();
    let seen2 = seen.clone();
    let server = tokio::spawn(async move {
        // A handful of connections at most; the test stops it afterwards.
        for _ in 0..8 {
            let (tcp, _) = listener.accept().await.unwrap();
            let Ok(mut tls) = acceptor.accept(tcp).await else {
                continue;
            };
            let identity = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| capstan_pki::identity_from_cert(c));
            seen2.lock().unwrap().push(identity);
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match tls.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let body = r#"{"major":"1","minor":"32","gitVersion":"v1.32.0"}"#;
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = tls.write_all(resp.as_bytes()).await;
            let _ = tls.shutdown().await;
        }
    });

    let out = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::process::Command::new(kubectl)
            .arg("--kubeconfig")
            .arg(&path)
            .args(["get", "--raw", "/version", "--request-timeout=20s"])
            .env_remove("KUBECONFIG")
            .env("HOME", tmp.path())
            .output(),
    )
    .await
    .expect("kubectl timed out")
    .unwrap();
    server.abort();
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("v1.32.0"));
    let seen = seen.lock().unwrap();
    assert!(!seen.is_empty());
    for identity in seen.iter() {
        assert_eq!(
            identity.as_ref(),
            Some(&(
                "jane".to_string(),
                vec!["system:masters".to_string(), "devs".to_string()]
            ))
        );
    }
}
