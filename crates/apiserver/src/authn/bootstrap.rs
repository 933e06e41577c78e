//! Bootstrap tokens, as Kubernetes' `plugin/pkg/auth/authenticator/token/bootstrap`: tokens
//! `<id>.<secret>` backed by a `bootstrap.kubernetes.io/token` Secret named
//! `bootstrap-token-<id>` in `kube-system`, used by nodes to join the cluster.

use std::collections::BTreeSet;
use std::sync::Arc;

use http::HeaderMap;
use serde_json::Value;

use super::{bearer, constant_time_eq, system_clock, Clock, TokenAuthenticator, TokenResponse};
use crate::auth::{Authenticator, ConnInfo, User};
use crate::objects::Objects;

/// Where bootstrap token Secrets live.
pub const NAMESPACE: &str = "kube-system";
/// The Secret name prefix; the token id follows.
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// The Secret type.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// The user name prefix; the token id follows.
pub const USER_PREFIX: &str = "system:bootstrap:";
/// The group every bootstrap token user is in.
pub const DEFAULT_GROUP: &str = "system:bootstrappers";

const TOKEN_ID_KEY: &str = "token-id";
const TOKEN_SECRET_KEY: &str = "token-secret";
const EXPIRATION_KEY: &str = "expiration";
const USAGE_AUTHENTICATION_KEY: &str = "usage-bootstrap-authentication";
const EXTRA_GROUPS_KEY: &str = "auth-extra-groups";

/// Authenticates bootstrap tokens against their Secrets.
pub struct BootstrapTokens {
    objects: Arc<dyn Objects>,
    clock: Clock,
}

impl BootstrapTokens {
    pub fn new(objects: Arc<dyn Objects>) -> Self {
        BootstrapTokens {
            objects,
            clock: system_clock(),
        }
    }

    /// Read the time from `clock` (tests).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    fn check(&self, id: &str, secret_part: &str) -> Result<User, String> {
        let name = format!("{SECRET_PREFIX}{id}");
        let invalid = |why: &str| format!("bootstrap token secret {NAMESPACE}/{name} {why}");
        let secret = self
            .objects
            .get("", "secrets", NAMESPACE, &name)
            .ok_or_else(|| format!("no bootstrap token secret {NAMESPACE}/{name}"))?;
        if capstan_api::meta::deletion_timestamp(&secret).is_some() {
            return Err(invalid("is deleted and awaiting removal"));
        }
        if secret.get("type").and_then(Value::as_str) != Some(SECRET_TYPE)
            || !secret.get("data").is_some_and(Value::is_object)
        {
            return Err(invalid(&format!(
                "has invalid type, expected {SECRET_TYPE}"
            )));
        }
        let data = |key: &str| data(&secret, key);
        if !constant_time_eq(data(TOKEN_SECRET_KEY).as_bytes(), secret_part.as_bytes()) {
            return Err(invalid(&format!(
                "has invalid value for key {TOKEN_SECRET_KEY}"
            )));
        }
        if data(TOKEN_ID_KEY) != id {
            return Err(invalid(&format!(
                "has invalid value for key {TOKEN_ID_KEY}"
            )));
        }
        if self.expired(&data(EXPIRATION_KEY)) {
            return Err(invalid("has expired"));
        }
        if data(USAGE_AUTHENTICATION_KEY) != "true" {
            return Err(invalid(&format!(
                "not marked {USAGE_AUTHENTICATION_KEY}=true"
            )));
        }
        let groups = groups(&data(EXTRA_GROUPS_KEY)).map_err(|e| {
            invalid(&format!(
                "has invalid value for key {EXTRA_GROUPS_KEY}: {e}"
            ))
        })?;
        Ok(User {
            name: format!("{USER_PREFIX}{id}"),
            groups,
            ..Default::default()
        })
    }

    /// An expiration that is set but unreadable counts as expired.
    fn expired(&self, expiration: &str) -> bool {
        if expiration.is_empty() {
            return false;
        }
        let Some(at) = capstan_api::table::duration::parse_rfc3339(expiration) else {
            return true;
        };
        let now = (self.clock)()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as i128)
            .unwrap_or(0);
        at <= now
    }
}

/// Split a token `[a-z0-9]{6}.[a-z0-9]{16}` into id and secret.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    let ok = |s: &str, len: usize| {
        s.len() == len
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    (ok(id, 6) && ok(secret, 16)).then_some((id, secret))
}

/// `system:bootstrappers` and the extra groups, sorted and without duplicates; each extra
/// group must be `system:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]`.
fn groups(extra: &str) -> Result<Vec<String>, String> {
    let mut groups = BTreeSet::from([DEFAULT_GROUP.to_string()]);
    if extra.is_empty() {
        return Ok(groups.into_iter().collect());
    }
    for group in extra.split(',') {
        if !valid_group(group) {
            return Err(format!(
                "bootstrap group {group:?} is invalid (must match \
                 \\Asystem:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9]\\z)"
            ));
        }
        groups.insert(group.to_string());
    }
    Ok(groups.into_iter().collect())
}

fn valid_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    let lower_or_digit = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match rest.as_bytes().split_last() {
        Some((&last, init)) => {
            lower_or_digit(last)
                && init.len() <= 255
                && init
                    .iter()
                    .all(|&b| lower_or_digit(b) || b == b':' || b == b'-')
        }
        None => false,
    }
}

/// `data[key]` of a Secret, decoded ("" when missing or not base64 of UTF-8).
fn data(secret: &Value, key: &str) -> String {
    secret
        .get("data")
        .and_then(|d| d.get(key))
        .and_then(Value::as_str)
        .and_then(crate::registry::base64_decode)
        .and_then(|b| String::from_utf8(b).ok())
        .unwrap_or_default()
}

impl TokenAuthenticator for BootstrapTokens {
    fn authenticate_token(
        &self,
        token: &str,
        _audiences: &[String],
    ) -> Option<Result<TokenResponse, String>> {
        let (id, secret) = parse_token(token)?;
        Some(self.check(id, secret).map(|user| TokenResponse {
            user,
            audiences: Vec::new(),
        }))
    }
}

impl Authenticator for BootstrapTokens {
    fn authenticate(&self, headers: &HeaderMap, _conn: &ConnInfo) -> Option<Result<User, String>> {
        bearer::authenticate_request(self, headers, &[]).map(|r| r.map(|r| r.user))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::authn::testutil::{fixed_clock, objects, secret, t0};
    use serde_json::json;

    const TOKEN: &str = "abcdef.0123456789abcdef";

    fn fields(
        overrides: &[(&'static str, Option<&'static str>)],
    ) -> Vec<(&'static str, &'static str)> {
        let mut f: Vec<(&str, Option<&str>)> = vec![
            ("token-id", Some("abcdef")),
            ("token-secret", Some("0123456789abcdef")),
            ("usage-bootstrap-authentication", Some("true")),
            ("expiration", Some("2024-05-02T00:00:00Z")),
            (
                "auth-extra-groups",
                Some("system:bootstrappers:kubeadm:default-node-token"),
            ),
        ];
        for (k, v) in overrides {
            match f.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = *v,
                None => f.push((k, *v)),
            }
        }
        f.into_iter().filter_map(|(k, v)| Some((k, v?))).collect()
    }

    fn authenticator_with(type_: &str, data: &[(&str, &str)]) -> BootstrapTokens {
        let o = objects();
        o.insert(
            "",
            "secrets",
            secret(NAMESPACE, "bootstrap-token-abcdef", "u1", type_, data),
        );
        BootstrapTokens::new(o).with_clock(fixed_clock(t0()))
    }

    fn run(a: &BootstrapTokens, token: &str) -> Option<Result<User, String>> {
        a.authenticate_token(token, &[]).map(|r| r.map(|r| r.user))
    }

    #[test]
    fn valid_token_authenticates_with_sorted_groups() {
        let a = authenticator_with(
            SECRET_TYPE,
            &fields(&[(
                "auth-extra-groups",
                Some("system:bootstrappers:zeta,system:bootstrappers:alpha,system:bootstrappers:zeta"),
            )]),
        );
        let user = run(&a, TOKEN).unwrap().unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        assert_eq!(
            user.groups,
            vec![
                "system:bootstrappers",
                "system:bootstrappers:alpha",
                "system:bootstrappers:zeta"
            ]
        );
        assert_eq!(user.uid, "");
    }

    #[test]
    fn tokens_of_another_shape_are_not_bootstrap_tokens() {
        let a = authenticator_with(SECRET_TYPE, &fields(&[]));
        for token in [
            "abcdef0123456789abcdef",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef.x",
            "abcdef.0123456789abcdeF",
            "",
        ] {
            assert_eq!(run(&a, token), None, "{token}");
        }
    }

    #[test]
    fn invalid_bootstrap_tokens_are_rejected() {
        let none: Option<&'static str> = None;
        let cases: Vec<(&str, BootstrapTokens, &str)> = vec![
            (
                "wrong secret",
                authenticator_with(SECRET_TYPE, &fields(&[])),
                "abcdef.0123456789abcdee",
            ),
            ("no secret object", BootstrapTokens::new(objects()), TOKEN),
            (
                "wrong type",
                authenticator_with("Opaque", &fields(&[])),
                TOKEN,
            ),
            (
                "id mismatch",
                authenticator_with(SECRET_TYPE, &fields(&[("token-id", Some("zzzzzz"))])),
                TOKEN,
            ),
            (
                "expired",
                authenticator_with(
                    SECRET_TYPE,
                    &fields(&[("expiration", Some("2024-04-30T23:59:59Z"))]),
                ),
                TOKEN,
            ),
            (
                "expires now",
                authenticator_with(
                    SECRET_TYPE,
                    &fields(&[("expiration", Some("2024-05-01T00:00:00Z"))]),
                ),
                TOKEN,
            ),
            (
                "unreadable expiration",
                authenticator_with(SECRET_TYPE, &fields(&[("expiration", Some("tomorrow"))])),
                TOKEN,
            ),
            (
                "not for authentication",
                authenticator_with(
                    SECRET_TYPE,
                    &fields(&[("usage-bootstrap-authentication", Some("false"))]),
                ),
                TOKEN,
            ),
            (
                "usage missing",
                authenticator_with(
                    SECRET_TYPE,
                    &fields(&[("usage-bootstrap-authentication", none)]),
                ),
                TOKEN,
            ),
            (
                "bad extra group",
                authenticator_with(
                    SECRET_TYPE,
                    &fields(&[("auth-extra-groups", Some("system:masters"))]),
                ),
                TOKEN,
            ),
            (
                "extra group ends badly",
                authenticator_with(
                    SECRET_TYPE,
                    &fields(&[("auth-extra-groups", Some("system:bootstrappers:x-"))]),
                ),
                TOKEN,
            ),
            (
                "empty extra group",
                authenticator_with(
                    SECRET_TYPE,
                    &fields(&[("auth-extra-groups", Some("system:bootstrappers:a,"))]),
                ),
                TOKEN,
            ),
        ];
        for (name, a, token) in cases {
            assert!(matches!(run(&a, token), Some(Err(_))), "{name}");
        }
    }

    #[test]
    fn no_expiration_never_expires_and_no_extra_groups_is_fine() {
        let a = authenticator_with(
            SECRET_TYPE,
            &fields(&[("expiration", None), ("auth-extra-groups", None)]),
        );
        let user = run(&a, TOKEN).unwrap().unwrap();
        assert_eq!(user.groups, vec!["system:bootstrappers"]);
    }

    #[test]
    fn secret_being_deleted_is_rejected() {
        let o = objects();
        let mut s = secret(
            NAMESPACE,
            "bootstrap-token-abcdef",
            "u1",
            SECRET_TYPE,
            &fields(&[]),
        );
        s["metadata"]["deletionTimestamp"] = json!("2024-05-01T00:00:00Z");
        o.insert("", "secrets", s);
        let a = BootstrapTokens::new(o).with_clock(fixed_clock(t0()));
        assert!(matches!(run(&a, TOKEN), Some(Err(_))));
    }

    #[test]
    fn request_authenticator_reads_the_bearer_header() {
        let a = authenticator_with(SECRET_TYPE, &fields(&[]));
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {TOKEN}").parse().unwrap(),
        );
        let user = Authenticator::authenticate(&a, &h, &ConnInfo::default())
            .unwrap()
            .unwrap();
        assert_eq!(user.name, "system:bootstrap:abcdef");
        h.insert(
            http::header::AUTHORIZATION,
            "Bearer something-else".parse().unwrap(),
        );
        assert_eq!(
            Authenticator::authenticate(&a, &h, &ConnInfo::default()),
            None
        );
    }
}
