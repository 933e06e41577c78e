//! TLS handshakes on 127.0.0.1 with the API server config.

use std::sync::Arc;
use std::time::Duration;

use capstan_pki::{identity_from_cert, ClientAuth, Pki, PkiOptions};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

const DAY: Duration = Duration::from_secs(24 * 3600);

fn opts() -> PkiOptions {
    PkiOptions {
        hostname: Some("node-a".into()),
        ..PkiOptions::default()
    }
}

/// What the server saw of one connection.
#[derive(Debug)]
struct Seen {
    alpn: Option<Vec<u8>>,
    chain_len: usize,
    identity: Option<(String, Vec<String>)>,
}

/// Accepts one connection; `Ok` when the handshake succeeded.
async fn serve_one(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
) -> Result<Seen, String> {
    let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
    let mut tls = TlsAcceptor::from(config)
        .accept(tcp)
        .await
        .map_err(|e| e.to_string())?;
    let (_, conn) = tls.get_ref();
    let chain = conn
        .peer_certificates()
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let seen = Seen {
        alpn: conn.alpn_protocol().map(|p| p.to_vec()),
        chain_len: chain.len(),
        identity: chain.first().and_then(|c| identity_from_cert(c)),
    };
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    tls.write_all(b"pong").await.map_err(|e| e.to_string())?;
    tls.shutdown().await.ok();
    Ok(seen)
}

async fn connect(
    port: u16,
    server_name: &str,
    mut config: rustls::ClientConfig,
) -> Result<(), String> {
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = TcpStream::connect(("127.0.0.1", port))
        .await
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let mut tls = TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await
        .map_err(|e| e.to_string())?;
    // With TLS 1.3 a rejected client certificate surfaces on first I/O.
    tls.write_all(b"ping").await.map_err(|e| e.to_string())?;
    let mut buf = [0u8; 4];
    tls.read_exact(&mut buf).await.map_err(|e| e.to_string())?;
    assert_eq!(&buf, b"pong");
    Ok(())
}

async fn handshake(
    server: Arc<rustls::ServerConfig>,
    server_name: &str,
    client: rustls::ClientConfig,
) -> (Result<Seen, String>, Result<(), String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server_task = tokio::spawn(serve_one(listener, server));
    let client_result =
        tokio::time::timeout(Duration::from_secs(20), connect(port, server_name, client))
            .await
            .expect("client timed out");
    let server_result = tokio::time::timeout(Duration::from_secs(20), server_task)
        .await
        .expect("server timed out")
        .unwrap();
    (server_result, client_result)
}

fn unwrap_config(c: Arc<rustls::ClientConfig>) -> rustls::ClientConfig {
    Arc::try_unwrap(c).unwrap_or_else(|c| (*c).clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshakes_with_optional_client_certs() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let server = pki.server_tls_config(ClientAuth::Optional).unwrap();
    assert_eq!(
        server.alpn_protocols,
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    );

    // 1. A client certificate from the cluster CA: the server sees it.
    let (cert, key) = pki
        .issue_client_cert("jane", &["system:masters", "devs"], DAY)
        .unwrap();
    let client = unwrap_config(pki.client_tls_config(Some((&cert, &key))).unwrap());
    let (seen, client_result) = handshake(server.clone(), "kubernetes.default.svc", client).await;
    client_result.unwrap();
    let seen = seen.unwrap();
    assert_eq!(seen.alpn.as_deref(), Some(&b"h2"[..]));
    assert_eq!(seen.chain_len, 1);
    assert_eq!(
        seen.identity,
        Some((
            "jane".to_string(),
            vec!["system:masters".to_string(), "devs".to_string()]
        ))
    );

    // 2. No client certificate: connects, anonymously.
    let client = unwrap_config(pki.client_tls_config(None).unwrap());
    let (seen, client_result) = handshake(server.clone(), "localhost", client).await;
    client_result.unwrap();
    let seen = seen.unwrap();
    assert_eq!(seen.chain_len, 0);
    assert_eq!(seen.identity, None);

    // 3. A client certificate from another CA: rejected by the handshake.
    let other_dir = tempfile::tempdir().unwrap();
    let other = Pki::load_or_create(other_dir.path(), opts()).unwrap();
    let (cert, key) = other
        .issue_client_cert("mallory", &["system:masters"], DAY)
        .unwrap();
    // Trusts our CA (so the server is accepted) but presents the foreign cert.
    let client = unwrap_config(pki.client_tls_config(Some((&cert, &key))).unwrap());
    let (seen, client_result) = handshake(server.clone(), "127.0.0.1", client).await;
    let err = seen.expect_err("server accepted a foreign client certificate");
    // Every capstan CA is named "capstan-ca", so webpki finds the issuer by
    // name and then rejects the signature; a differently named CA would give
    // UnknownIssuer.
    assert!(
        err.contains("BadSignature") || err.contains("UnknownIssuer"),
        "{err}"
    );
    assert!(client_result.is_err());

    // 4. A server certificate from another CA is refused by our clients.
    let client = unwrap_config(pki.client_tls_config(None).unwrap());
    let foreign_server = other.server_tls_config(ClientAuth::Optional).unwrap();
    let (seen, client_result) = handshake(foreign_server, "localhost", client).await;
    assert!(client_result.is_err());
    assert!(seen.is_err());

    // 5. A name the serving cert does not cover is refused.
    let client = unwrap_config(pki.client_tls_config(None).unwrap());
    let (_, client_result) = handshake(server.clone(), "elsewhere.example", client).await;
    let err = client_result.unwrap_err();
    assert!(err.contains("not valid for name"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_client_auth_rejects_anonymous() {
    let tmp = tempfile::tempdir().unwrap();
    let pki = Pki::load_or_create(tmp.path(), opts()).unwrap();
    let server = pki.server_tls_config(ClientAuth::Required).unwrap();
    let client = unwrap_config(pki.client_tls_config(None).unwrap());
    let (seen, client_result) = handshake(server.clone(), "localhost", client).await;
    assert!(seen.is_err());
    assert!(client_result.is_err());

    // A server-auth-only certificate is refused as a client certificate.
    let (cert, key) = pki.issue_serving_cert(&["not-a-client"], &[], DAY).unwrap();
    let client = unwrap_config(pki.client_tls_config(Some((&cert, &key))).unwrap());
    let (seen, _) = handshake(server.clone(), "localhost", client).await;
    assert!(seen.is_err());

    // No client auth at all: a presented certificate is simply not asked for.
    let server = pki.server_tls_config(ClientAuth::None).unwrap();
    let (cert, key) = pki.issue_client_cert("jane", &[], DAY).unwrap();
    let client = unwrap_config(pki.client_tls_config(Some((&cert, &key))).unwrap());
    let (seen, client_result) = handshake(server, "localhost", client).await;
    client_result.unwrap();
    assert_eq!(seen.unwrap().chain_len, 0);
}
