//! Forwarding the UI's API calls to the API server as the user who makes them.
//!
//! Only `/api`, `/apis` and `/version` go through, and of the browser's headers only what an API
//! call needs: the bearer token, `Accept` and `Content-Type`. Cookies, the browser's other
//! headers and any credentials of the dashboard's own never reach the API server, so a request
//! without a token is anonymous there. Responses stream back as they arrive: watches and
//! `?follow=true` log streams flow to the browser event by event.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, Context};
use http::{header, HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::{full, Body};

/// A request body larger than this is refused (the API server itself takes at most 3 MiB).
const MAX_REQUEST_BODY: usize = 8 << 20;

/// How long to wait for a connection to the API server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long to wait for the API server's response headers (watches and log streams send
/// theirs at once; the body may then take as long as it likes).
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(120);

/// Request headers passed on to the API server. `Authorization` is passed only when it holds a
/// bearer token.
const FORWARDED_REQUEST_HEADERS: &[HeaderName] = &[header::ACCEPT, header::CONTENT_TYPE];

/// Response headers not passed back: hop-by-hop ones, and `WWW-Authenticate`, which would make
/// the browser ask for a password of its own on a 401.
const DROPPED_RESPONSE_HEADERS: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "www-authenticate",
    "set-cookie",
    "alt-svc",
];

/// Whether `path` is one the dashboard forwards: `/api`, `/apis` and `/version`, and what is
/// under the first two.
pub fn is_api_path(path: &str) -> bool {
    path == "/api"
        || path.starts_with("/api/")
        || path == "/apis"
        || path.starts_with("/apis/")
        || path == "/version"
        || path == "/version/"
}

/// Why a path under `/api` or `/apis` is still refused: it could step outside them once the
/// API server (or anything in between) normalizes it. Object names never hold `%`, `\` or
/// dot segments (Kubernetes' path segment rule), so nothing legitimate is lost.
fn path_problem(path: &str) -> Option<&'static str> {
    if path.contains('%') {
        return Some("percent-encoded characters are not forwarded");
    }
    if path.contains('\\') {
        return Some("backslashes are not forwarded");
    }
    if path.split('/').any(|seg| seg == "." || seg == "..") {
        return Some("dot segments are not forwarded");
    }
    if path.contains("//") {
        return Some("empty path segments are not forwarded");
    }
    None
}

type HttpsClient = Client<hyper_rustls::HttpsConnector<HttpConnector>, Body>;

pub(crate) struct Proxy {
    /// The API server's scheme and authority, and its path prefix without a trailing `/`.
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    prefix: String,
    /// Requests that answer and end: HTTP/2 when the API server offers it, so every browser
    /// tab's calls share a connection.
    client: HttpsClient,
    /// Watches and log streams, which stay open: HTTP/1.1, a connection each, so they never
    /// use up an HTTP/2 connection's concurrent streams and hold up everyone's other calls.
    streams: HttpsClient,
}

impl Proxy {
    pub(crate) fn new(api: &crate::ApiTarget) -> anyhow::Result<Proxy> {
        let url: http::Uri = api
            .url
            .parse()
            .with_context(|| format!("the API server URL {:?} is not a URL", api.url))?;
        let scheme = url
            .scheme()
            .cloned()
            .ok_or_else(|| anyhow!("the API server URL {:?} has no scheme", api.url))?;
        if scheme != http::uri::Scheme::HTTPS && scheme != http::uri::Scheme::HTTP {
            anyhow::bail!("the API server URL {:?} is neither https nor http", api.url);
        }
        let authority = url
            .authority()
            .cloned()
            .ok_or_else(|| anyhow!("the API server URL {:?} has no host", api.url))?;
        let prefix = url.path().trim_end_matches('/').to_string();

        let mut roots = rustls::RootCertStore::empty();
        if let Some(pem) = &api.ca_pem {
            for cert in CertificateDer::pem_slice_iter(pem.as_bytes()) {
                let cert = cert.context("reading the API server's CA certificate")?;
                roots
                    .add(cert)
                    .context("using the API server's CA certificate")?;
            }
        }
        if scheme == http::uri::Scheme::HTTPS && roots.is_empty() {
            anyhow::bail!(
                "no CA certificate to check the API server {} with (the kubeconfig's cluster needs certificate-authority or certificate-authority-data)",
                api.url
            );
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // No client certificate: the dashboard has no identity of its own at the API server.
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let h2 = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls.clone())
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http.clone());
        let h1 = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(h2);
        let streams = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(h1);
        Ok(Proxy {
            scheme,
            authority,
            prefix,
            client,
            streams,
        })
    }

    /// Forward one request and return the API server's answer (streaming), or a Status of our
    /// own when the request is refused or the API server cannot be reached.
    pub(crate) async fn forward(&self, req: Request<Incoming>) -> Response<Body> {
        let (parts, body) = req.into_parts();
        if !matches!(
            parts.method,
            Method::GET
                | Method::HEAD
                | Method::POST
                | Method::PUT
                | Method::PATCH
                | Method::DELETE
        ) {
            return status(
                StatusCode::METHOD_NOT_ALLOWED,
                "MethodNotAllowed",
                &format!("the dashboard does not forward {} requests", parts.method),
            );
        }
        let path = parts.uri.path();
        if let Some(problem) = path_problem(path) {
            return status(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                &format!("{path:?}: {problem}"),
            );
        }
        let path_and_query = match parts.uri.query() {
            Some(q) => format!("{}{path}?{q}", self.prefix),
            None => format!("{}{path}", self.prefix),
        };
        let uri = match http::Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path_and_query)
            .build()
        {
            Ok(uri) => uri,
            Err(e) => {
                return status(
                    StatusCode::BAD_REQUEST,
                    "BadRequest",
                    &format!("cannot forward {path:?}: {e}"),
                )
            }
        };
        let mut out = Request::new(
            Limited::new(body, MAX_REQUEST_BODY)
                .map_err(|e| -> crate::BoxError { e })
                .boxed(),
        );
        *out.method_mut() = parts.method;
        *out.uri_mut() = uri;
        copy_request_headers(&parts.headers, out.headers_mut());

        let client = if is_long_lived(parts.uri.query()) {
            &self.streams
        } else {
            &self.client
        };
        let resp = match tokio::time::timeout(RESPONSE_TIMEOUT, client.request(out)).await {
            Ok(Ok(resp)) => resp,
            Ok(Err(e)) => {
                tracing::debug!("dashboard: API request failed: {e:?}");
                return status(
                    StatusCode::BAD_GATEWAY,
                    "ServiceUnavailable",
                    &format!(
                        "the dashboard cannot reach the API server {}: {}",
                        self.authority,
                        describe(&e)
                    ),
                );
            }
            Err(_) => {
                return status(
                    StatusCode::GATEWAY_TIMEOUT,
                    "Timeout",
                    &format!(
                        "the API server {} did not answer within {}s",
                        self.authority,
                        RESPONSE_TIMEOUT.as_secs()
                    ),
                )
            }
        };
        let (mut parts, body) = resp.into_parts();
        for name in DROPPED_RESPONSE_HEADERS {
            parts.headers.remove(*name);
        }
        protect_response(&mut parts.headers);
        Response::from_parts(
            parts,
            body.map_err(|e| -> crate::BoxError { e.into() }).boxed(),
        )
    }
}

/// Whether a request stays open: a watch (`watch=true`) or a followed log (`follow=true`).
fn is_long_lived(query: Option<&str>) -> bool {
    query.unwrap_or("").split('&').any(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == "watch" || k == "follow") && matches!(v, "" | "1" | "true" | "True")
    })
}

/// The headers the API server gets: the user's bearer token, Accept and Content-Type, and a
/// User-Agent naming the dashboard.
fn copy_request_headers(from: &HeaderMap, to: &mut HeaderMap) {
    if let Some(auth) = from.get(header::AUTHORIZATION) {
        let is_bearer = auth
            .to_str()
            .ok()
            .and_then(|v| v.get(..7))
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case("bearer "));
        if is_bearer {
            to.insert(header::AUTHORIZATION, auth.clone());
        }
    }
    for name in FORWARDED_REQUEST_HEADERS {
        for value in from.get_all(name) {
            to.append(name.clone(), value.clone());
        }
    }
    to.insert(
        header::USER_AGENT,
        HeaderValue::from_static(concat!("capstan-dashboard/", env!("CARGO_PKG_VERSION"))),
    );
}

/// API answers are data for the UI's scripts, never pages: a browser that opens one directly
/// (a service's or node's `/proxy/` output, say) shows it sandboxed, away from the UI's origin
/// and the token in its session storage.
fn protect_response(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The innermost cause of a client error (hyper's own message is just "client error").
fn describe(e: &hyper_util::client::legacy::Error) -> String {
    let mut cause: &dyn std::error::Error = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// A Kubernetes Status answer of the dashboard's own, which the UI shows like the API
/// server's.
pub(crate) fn status(code: StatusCode, reason: &str, message: &str) -> Response<Body> {
    let body = format!(
        r#"{{"kind":"Status","apiVersion":"v1","metadata":{{}},"status":"Failure","message":{},"reason":{},"code":{}}}"#,
        json_string(message),
        json_string(reason),
        code.as_u16()
    );
    let mut resp = Response::new(full(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    protect_response(resp.headers_mut());
    resp
}

/// `s` as a JSON string literal.
fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '<' || c == '>' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_paths() {
        for p in [
            "/api",
            "/api/v1/pods",
            "/apis",
            "/apis/apps/v1/deployments",
            "/version",
        ] {
            assert!(is_api_path(p), "{p}");
        }
        for p in [
            "/",
            "/apix",
            "/api-docs",
            "/metrics",
            "/healthz",
            "/openapi/v2",
            "/versions",
            "/index.html",
            "/logs/",
        ] {
            assert!(!is_api_path(p), "{p}");
        }
    }

    #[test]
    fn escaping_paths_are_refused() {
        assert!(path_problem("/api/v1/namespaces/default/pods").is_none());
        assert!(path_problem("/api/../metrics").is_some());
        assert!(path_problem("/api/./v1").is_some());
        assert!(path_problem("/api/%2e%2e/metrics").is_some());
        assert!(path_problem("/api/v1/namespaces/a%2Fb").is_some());
        assert!(path_problem("/api\\..\\metrics").is_some());
        assert!(path_problem("/api//v1").is_some());
        // A name with dots is fine; only whole dot segments are.
        assert!(path_problem("/api/v1/nodes/node.example.com").is_none());
    }

    #[test]
    fn only_bearer_tokens_and_api_headers_are_forwarded() {
        let mut from = HeaderMap::new();
        from.insert(header::AUTHORIZATION, "Bearer abc".parse().unwrap());
        from.insert(header::COOKIE, "session=1".parse().unwrap());
        from.insert(header::ACCEPT, "application/json".parse().unwrap());
        from.insert("impersonate-user", "admin".parse().unwrap());
        from.insert(header::USER_AGENT, "Mozilla".parse().unwrap());
        let mut to = HeaderMap::new();
        copy_request_headers(&from, &mut to);
        assert_eq!(to.get(header::AUTHORIZATION).unwrap(), "Bearer abc");
        assert_eq!(to.get(header::ACCEPT).unwrap(), "application/json");
        assert!(to.get(header::COOKIE).is_none());
        assert!(to.get("impersonate-user").is_none());
        assert!(to
            .get(header::USER_AGENT)
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("capstan-dashboard/"));

        let mut from = HeaderMap::new();
        from.insert(
            header::AUTHORIZATION,
            "Basic YWRtaW46YWRtaW4=".parse().unwrap(),
        );
        let mut to = HeaderMap::new();
        copy_request_headers(&from, &mut to);
        assert!(to.get(header::AUTHORIZATION).is_none());
    }

    #[test]
    fn watches_and_followed_logs_are_long_lived() {
        for q in [
            "watch=1",
            "a=b&watch=true",
            "follow=true&container=c",
            "watch",
        ] {
            assert!(is_long_lived(Some(q)), "{q}");
        }
        for q in [
            "watch=0",
            "watch=false",
            "limit=500",
            "follow=false",
            "xwatch=1",
            "",
        ] {
            assert!(!is_long_lived(Some(q)), "{q}");
        }
        assert!(!is_long_lived(None));
    }

    #[test]
    fn status_is_valid_json() {
        let s = json_string("a \"b\" \\ <c>\n\u{1}");
        let v: serde_json::Value = serde_json::from_str(&s).unwrap();
        assert_eq!(v, "a \"b\" \\ <c>\n\u{1}");
    }
}
