//! Who may use the kubelet's server: users of client certificates from the cluster CA or of
//! bearer tokens the API server confirms (TokenReview), allowed by the API server
//! (SubjectAccessReview) to reach this node's `nodes` subresource for the path.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use parking_lot::Mutex;

/// How long answers are remembered (the kubelet's webhook cache defaults).
const AUTHN_TTL: Duration = Duration::from_secs(120);
const ALLOWED_TTL: Duration = Duration::from_secs(300);
const DENIED_TTL: Duration = Duration::from_secs(30);

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: Vec<(String, Vec<String>)>,
}

/// The verb and `nodes` subresource a request to `path` with `method` needs.
pub fn attributes(method: &Method, path: &str) -> (&'static str, &'static str) {
    let verb = match *method {
        Method::POST => "create",
        Method::GET | Method::HEAD => "get",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE => "delete",
        _ => "",
    };
    let under = |prefix: &str| {
        let prefix = prefix.trim_end_matches('/');
        path == prefix
            || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
    };
    let subresource = if under("/stats") {
        "stats"
    } else if under("/metrics") {
        "metrics"
    } else if under("/logs") {
        "log"
    } else {
        "proxy"
    };
    (verb, subresource)
}

/// The bearer token of an `Authorization` header.
pub fn bearer_token(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then(|| token.to_string())
}

/// A DER element: (tag, contents, the rest after it).
fn der_next(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *input.first()?;
    let first = *input.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | usize::from(*input.get(2 + i)?);
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    let body = input.get(header..end)?;
    Some((tag, body, &input[end..]))
}

/// The user of a (verified) client certificate: CN is the name, each O a group.
pub fn identity_from_cert(der: &[u8]) -> Option<User> {
    const SEQ: u8 = 0x30;
    let (tag, cert, _) = der_next(der)?;
    if tag != SEQ {
        return None;
    }
    let (tag, tbs, _) = der_next(cert)?;
    if tag != SEQ {
        return None;
    }
    let mut rest = tbs;
    // [0] version (optional), serial, signature algorithm, issuer, validity, subject.
    let (tag, _, r) = der_next(rest)?;
    rest = if tag == 0xa0 { der_next(r)?.2 } else { r };
    for _ in 0..3 {
        rest = der_next(rest)?.2;
    }
    let (tag, mut subject, _) = der_next(rest)?;
    if tag != SEQ {
        return None;
    }
    const CN: &[u8] = &[0x55, 0x04, 0x03];
    const O: &[u8] = &[0x55, 0x04, 0x0a];
    let mut name = None;
    let mut groups = Vec::new();
    while !subject.is_empty() {
        let (_, mut set, r) = der_next(subject)?;
        subject = r;
        while !set.is_empty() {
            let (_, atv, r) = der_next(set)?;
            set = r;
            let (_, oid, r) = der_next(atv)?;
            let (_, value, _) = der_next(r)?;
            let value = String::from_utf8_lossy(value).into_owned();
            if oid == CN {
                name = Some(value);
            } else if oid == O {
                groups.push(value);
            }
        }
    }
    let name = name.filter(|n| !n.is_empty())?;
    groups.push("system:authenticated".into());
    Some(User {
        name,
        uid: String::new(),
        groups,
        extra: Vec::new(),
    })
}

type AuthzKey = (User, &'static str, &'static str);

/// Delegated authentication and authorization through the API server, with caches.
pub struct Auth {
    client: Client,
    node: String,
    tokens: Mutex<HashMap<String, (Option<User>, Instant)>>,
    decisions: Mutex<HashMap<AuthzKey, (bool, Instant)>>,
}

impl Auth {
    pub fn new(client: Client, node: String) -> Auth {
        Auth {
            client,
            node,
            tokens: Mutex::new(HashMap::new()),
            decisions: Mutex::new(HashMap::new()),
        }
    }

    /// Who the token belongs to (None: the API server does not know it).
    pub async fn authenticate_token(&self, token: &str) -> Result<Option<User>, String> {
        if let Some((user, at)) = self.tokens.lock().get(token) {
            if at.elapsed() < AUTHN_TTL {
                return Ok(user.clone());
            }
        }
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: None,
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| e.to_string())?;
        let status = answer.status.unwrap_or_default();
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(u)) => Some(User {
                name: u.username.unwrap_or_default(),
                uid: u.uid.unwrap_or_default(),
                groups: u.groups.unwrap_or_default(),
                extra: u.extra.unwrap_or_default().into_iter().collect(),
            }),
            _ => None,
        };
        let mut cache = self.tokens.lock();
        if cache.len() > 4096 {
            cache.clear();
        }
        cache.insert(token.to_string(), (user.clone(), Instant::now()));
        Ok(user)
    }

    /// Whether `user` may `verb` this node's `subresource` (Err: the API server could not
    /// be asked).
    pub async fn authorize(
        &self,
        user: &User,
        verb: &'static str,
        subresource: &'static str,
        _path: &str,
    ) -> Result<bool, String> {
        let key = (user.clone(), verb, subresource);
        if let Some((allowed, at)) = self.decisions.lock().get(&key) {
            let ttl = if *allowed { ALLOWED_TTL } else { DENIED_TTL };
            if at.elapsed() < ttl {
                return Ok(*allowed);
            }
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.name.clone()),
                uid: Some(user.uid.clone()).filter(|u| !u.is_empty()),
                groups: Some(user.groups.clone()),
                extra: Some(user.extra.iter().cloned().collect())
                    .filter(|e: &std::collections::BTreeMap<String, Vec<String>>| !e.is_empty()),
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(verb.to_string()),
                    group: Some(String::new()),
                    version: Some("v1".into()),
                    resource: Some("nodes".into()),
                    subresource: Some(subresource.to_string()),
                    name: Some(self.node.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let answer = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| e.to_string())?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        let mut cache = self.decisions.lock();
        if cache.len() > 4096 {
            cache.clear();
        }
        cache.insert(key, (allowed, Instant::now()));
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_node_subresources() {
        let cases = [
            (Method::GET, "/stats/summary", "get", "stats"),
            (Method::GET, "/stats", "get", "stats"),
            (Method::GET, "/statsx", "get", "proxy"),
            (Method::GET, "/metrics", "get", "metrics"),
            (Method::GET, "/metrics/resource", "get", "metrics"),
            (Method::GET, "/logs/", "get", "log"),
            (Method::GET, "/containerLogs/ns/p/c", "get", "proxy"),
            (Method::POST, "/exec/ns/p/c", "create", "proxy"),
            (Method::GET, "/exec/ns/p/c", "get", "proxy"),
            (Method::GET, "/pods", "get", "proxy"),
            (Method::HEAD, "/healthz", "get", "proxy"),
            (Method::PUT, "/run/ns/p/c", "update", "proxy"),
            (Method::DELETE, "/x", "delete", "proxy"),
            (Method::PATCH, "/x", "patch", "proxy"),
            (Method::OPTIONS, "/x", "", "proxy"),
        ];
        for (m, path, verb, sub) in cases {
            assert_eq!(attributes(&m, path), (verb, sub), "{m} {path}");
        }
    }

    #[test]
    fn bearer_tokens_are_read() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", "Bearer abc.def".parse().unwrap());
        assert_eq!(bearer_token(&h).as_deref(), Some("abc.def"));
        h.insert("authorization", "Basic abc".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
        h.insert("authorization", "bearer  ".parse().unwrap());
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn certificate_subjects_give_users() {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:masters");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kube-apiserver-kubelet-client");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let user = identity_from_cert(cert.der()).unwrap();
        assert_eq!(user.name, "kube-apiserver-kubelet-client");
        assert_eq!(user.groups, ["system:masters", "system:authenticated"]);
        assert_eq!(identity_from_cert(b"\x30\x03\x02\x01"), None);
        assert_eq!(identity_from_cert(b""), None);
    }
}
