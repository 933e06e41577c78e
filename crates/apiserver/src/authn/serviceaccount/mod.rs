//! Service-account tokens, as Kubernetes' `pkg/serviceaccount`: JWTs signed with the cluster's
//! service-account key, either bound (issued by `TokenRequest`, expiring, tied to a pod, secret
//! or node; [`claims`]) or legacy (stored in a `kubernetes.io/service-account-token` Secret;
//! [`legacy`]). Also the `TokenRequest` subresource and the OIDC discovery documents.

mod cache;
pub mod claims;
pub mod legacy;
pub mod openid;
pub mod token_request;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use capstan_pki::{Pki, ServiceAccountKey};
use http::HeaderMap;
use serde_json::{Map, Value};

use super::{
    bearer, go_quoted_list, intersect, jwt, system_clock, Clock, TokenAuthenticator, TokenResponse,
};
use crate::auth::{Authenticator, ConnInfo, User};
use crate::objects::Objects;

pub use claims::{BoundObject, ObjectRef};

/// `--service-account-issuer`'s default.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The issuer of Secret-based tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
/// Clock skew tolerated on `exp`, `nbf` and `iat`, and on deletion of bound objects.
pub const LEEWAY: Duration = Duration::from_secs(60);

/// User `extra` keys of service-account users.
pub const POD_NAME_KEY: &str = "authentication.kubernetes.io/pod-name";
pub const POD_UID_KEY: &str = "authentication.kubernetes.io/pod-uid";
pub const NODE_NAME_KEY: &str = "authentication.kubernetes.io/node-name";
pub const NODE_UID_KEY: &str = "authentication.kubernetes.io/node-uid";
pub const CREDENTIAL_ID_KEY: &str = "authentication.kubernetes.io/credential-id";

/// Where the signing key lives: the key itself, or the PKI that holds it.
pub trait KeySource: Send + Sync {
    fn service_account_key(&self) -> &ServiceAccountKey;
}

impl KeySource for ServiceAccountKey {
    fn service_account_key(&self) -> &ServiceAccountKey {
        self
    }
}

impl KeySource for Pki {
    fn service_account_key(&self) -> &ServiceAccountKey {
        Pki::service_account_key(self)
    }
}

/// The service-account token issuer and authenticator.
pub struct ServiceAccountTokens {
    key: Arc<dyn KeySource>,
    issuer: String,
    /// Issuers whose tokens are accepted: `issuer` first, then older ones being rotated out.
    accepted_issuers: Vec<String>,
    api_audiences: Vec<String>,
    objects: Arc<dyn Objects>,
    clock: Clock,
    /// `--service-account-extend-token-expiration`.
    extend_expiration: bool,
    /// `--service-account-max-token-expiration` in seconds; 0 for no limit.
    max_expiration_seconds: i64,
    /// `--service-account-jwks-uri`.
    jwks_uri: Option<String>,
    /// Bound tokens recently found good, so that their signatures are not verified again.
    verified: cache::Verified,
}

impl ServiceAccountTokens {
    /// Tokens signed by `key` for `issuer` (empty: [`DEFAULT_ISSUER`]), accepted when meant
    /// for one of `api_audiences` (empty: the issuer), checked against `objects`.
    pub fn new(
        key: Arc<dyn KeySource>,
        issuer: String,
        api_audiences: Vec<String>,
        objects: Arc<dyn Objects>,
    ) -> Self {
        let issuer = if issuer.is_empty() {
            DEFAULT_ISSUER.to_string()
        } else {
            issuer
        };
        let api_audiences = if api_audiences.is_empty() {
            vec![issuer.clone()]
        } else {
            api_audiences
        };
        ServiceAccountTokens {
            key,
            accepted_issuers: vec![issuer.clone()],
            issuer,
            api_audiences,
            objects,
            clock: system_clock(),
            extend_expiration: true,
            max_expiration_seconds: 0,
            jwks_uri: None,
            verified: cache::Verified::default(),
        }
    }

    /// Read the time from `clock` (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Also accept tokens of these issuers (further `--service-account-issuer` values).
    pub fn with_extra_issuers(mut self, issuers: Vec<String>) -> Self {
        for i in issuers {
            if !self.accepted_issuers.contains(&i) {
                self.accepted_issuers.push(i);
            }
        }
        self
    }

    /// Shorten requested token lifetimes to at most `seconds` (0: no limit).
    pub fn with_max_expiration_seconds(mut self, seconds: i64) -> Self {
        self.max_expiration_seconds = seconds.max(0);
        self
    }

    /// Whether kubelet's default projected tokens (3607 s) are issued for a year and only
    /// warned about after the hour (default true).
    pub fn with_extend_expiration(mut self, extend: bool) -> Self {
        self.extend_expiration = extend;
        self
    }

    /// The `jwks_uri` discovery announces, e.g. `https://<advertise address>/openid/v1/jwks`
    /// (default: the issuer's URL with path `/openid/v1/jwks`).
    pub fn with_jwks_uri(mut self, uri: String) -> Self {
        self.jwks_uri = Some(uri);
        self
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    pub fn key(&self) -> &ServiceAccountKey {
        self.key.service_account_key()
    }

    fn now(&self) -> SystemTime {
        (self.clock)()
    }

    /// A bound token (Kubernetes' `token.Claims`): for `audiences`, valid for
    /// `expiration_seconds` from `now`, tied to `bound` when given. Returns the token and its
    /// expiry.
    pub fn issue_bound(
        &self,
        namespace: &str,
        service_account: &ObjectRef,
        audiences: &[String],
        expiration_seconds: i64,
        bound: Option<&BoundObject>,
        now: SystemTime,
    ) -> (String, SystemTime) {
        let spec = claims::BoundSpec {
            namespace,
            service_account,
            audiences,
            expiration_seconds,
            bound,
            warn_after_seconds: 0,
        };
        self.sign_bound(&spec, now)
    }

    fn sign_bound(&self, spec: &claims::BoundSpec<'_>, now: SystemTime) -> (String, SystemTime) {
        let claims = spec.claims(&self.issuer, now, &uuid::Uuid::new_v4().to_string());
        let expiry = now + Duration::from_secs(spec.expiration_seconds.max(0) as u64);
        (jwt::sign(self.key(), &claims), expiry)
    }

    /// A legacy token, as the tokens controller stores in `secret_name` (Kubernetes'
    /// `LegacyClaims`): no expiry, valid while that Secret holds it.
    pub fn issue_legacy(
        &self,
        namespace: &str,
        service_account: &ObjectRef,
        secret_name: &str,
    ) -> String {
        let claims = legacy::claims(namespace, service_account, secret_name);
        jwt::sign(self.key(), &claims)
    }

    /// Authenticate a JWT already known to come from `issuer` (one of ours, or legacy).
    fn authenticate_jwt(
        &self,
        token: &str,
        issuer: &str,
        audiences: &[String],
    ) -> Result<TokenResponse, String> {
        let now = self.now();
        let asked = audiences.join("\n");
        if issuer != LEGACY_ISSUER {
            if let Some(hit) = self.verified.lookup(token, &asked, &*self.objects, now) {
                return Ok(hit);
            }
        }
        let claims = jwt::decode(token, self.key()).map_err(|e| e.to_string())?;
        let public = StandardClaims::parse(&claims)?;
        if public.iss != issuer {
            return Err(format!("token issuer {:?} is invalid", public.iss));
        }
        // Legacy tokens have no audience: they are good for the API server only.
        let token_audiences = if public.aud.is_empty() {
            self.api_audiences.clone()
        } else {
            public.aud.clone()
        };
        let requested = if audiences.is_empty() {
            &self.api_audiences[..]
        } else {
            audiences
        };
        let audiences = intersect(&token_audiences, requested);
        if audiences.is_empty() && !self.api_audiences.is_empty() {
            return Err(format!(
                "token audiences {} is invalid for the target audiences {}",
                go_quoted_list(&token_audiences),
                go_quoted_list(requested)
            ));
        }
        if issuer == LEGACY_ISSUER {
            let info = legacy::validate(&self.objects, token, &public, &claims, now)?;
            return Ok(TokenResponse {
                user: info.user(),
                audiences,
            });
        }
        let recording = cache::Recording::new(&*self.objects);
        let info = claims::validate(&recording, &public, &claims, now)?;
        let response = TokenResponse {
            user: info.user(),
            audiences,
        };
        self.verified.remember(
            token,
            asked,
            &response,
            public.exp,
            recording.depends_on(),
            now,
        );
        Ok(response)
    }
}

impl TokenAuthenticator for ServiceAccountTokens {
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Option<Result<TokenResponse, String>> {
        let issuer = jwt::unverified_issuer(token)?;
        if issuer != LEGACY_ISSUER && !self.accepted_issuers.contains(&issuer) {
            return None;
        }
        Some(self.authenticate_jwt(token, &issuer, audiences))
    }

    fn audience_aware(&self) -> bool {
        true
    }
}

impl Authenticator for ServiceAccountTokens {
    fn authenticate(&self, headers: &HeaderMap, _conn: &ConnInfo) -> Option<Result<User, String>> {
        bearer::authenticate_request(self, headers, &self.api_audiences).map(|r| r.map(|r| r.user))
    }
}

/// The registered claims a service-account token may carry, type-checked.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StandardClaims {
    pub iss: String,
    pub sub: String,
    pub aud: Vec<String>,
    pub exp: Option<i64>,
    pub nbf: Option<i64>,
    pub iat: Option<i64>,
    pub jti: String,
}

impl StandardClaims {
    /// Read the registered claims; a claim of the wrong type makes the token invalid.
    pub fn parse(claims: &Map<String, Value>) -> Result<Self, String> {
        let bad = |name: &str| format!("invalid {name} claim");
        let string = |name: &str| match claims.get(name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(bad(name)),
        };
        let date = |name: &str| match claims.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f as i64))
                .map(Some)
                .ok_or_else(|| bad(name)),
            Some(_) => Err(bad(name)),
        };
        let aud = match claims.get("aud") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| a.as_str().map(str::to_string).ok_or_else(|| bad("aud")))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(bad("aud")),
        };
        Ok(StandardClaims {
            iss: string("iss")?,
            sub: string("sub")?,
            aud,
            exp: date("exp")?,
            nbf: date("nbf")?,
            iat: date("iat")?,
            jti: string("jti")?,
        })
    }
}

/// Who a valid token speaks for (Kubernetes' `ServiceAccountInfo`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServiceAccountInfo {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod_name: String,
    pub pod_uid: String,
    pub node_name: String,
    pub node_uid: String,
    /// `JTI=<jti>` for tokens with an id.
    pub credential_id: String,
}

impl ServiceAccountInfo {
    /// `system:serviceaccount:<ns>:<name>` in `system:serviceaccounts` and
    /// `system:serviceaccounts:<ns>`, with the pod, node and credential in `extra`.
    pub fn user(&self) -> User {
        let mut extra = BTreeMap::new();
        if !self.pod_name.is_empty() && !self.pod_uid.is_empty() {
            extra.insert(POD_NAME_KEY.to_string(), vec![self.pod_name.clone()]);
            extra.insert(POD_UID_KEY.to_string(), vec![self.pod_uid.clone()]);
        }
        if !self.credential_id.is_empty() {
            extra.insert(
                CREDENTIAL_ID_KEY.to_string(),
                vec![self.credential_id.clone()],
            );
        }
        if !self.node_name.is_empty() {
            extra.insert(NODE_NAME_KEY.to_string(), vec![self.node_name.clone()]);
            if !self.node_uid.is_empty() {
                extra.insert(NODE_UID_KEY.to_string(), vec![self.node_uid.clone()]);
            }
        }
        User {
            name: username(&self.namespace, &self.name),
            uid: self.uid.clone(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", self.namespace),
            ],
            extra,
        }
    }
}

/// `system:serviceaccount:<namespace>:<name>`.
pub fn username(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// The namespace and name of a service-account user name.
pub fn split_username(username: &str) -> Option<(&str, &str)> {
    let rest = username.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    if ns.is_empty() || name.is_empty() || name.contains(':') {
        return None;
    }
    Some((ns, name))
}

/// The time `secs` seconds after the epoch (before it when negative), clamped to about
/// ±35,000 years so that no claim can overflow the clock.
pub(crate) fn unix_time(secs: i64) -> SystemTime {
    let secs = secs.clamp(-(1 << 40), 1 << 40);
    if secs >= 0 {
        UNIX_EPOCH + Duration::from_secs(secs as u64)
    } else {
        UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
    }
}

/// Seconds since the epoch, truncated (Go's `time.Unix()`).
pub(crate) fn unix_seconds(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
    }
}

/// An object's `metadata.deletionTimestamp` as a time, if set and readable.
pub(crate) fn deletion_time(obj: &Value) -> Option<SystemTime> {
    let ts = capstan_api::meta::deletion_timestamp(obj)?;
    let nanos = capstan_api::table::duration::parse_rfc3339(ts)?;
    let secs = nanos.div_euclid(1_000_000_000) as i64;
    let sub = nanos.rem_euclid(1_000_000_000) as u32;
    Some(unix_time(secs) + Duration::from_nanos(sub as u64))
}
