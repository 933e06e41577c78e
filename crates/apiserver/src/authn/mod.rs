//! Token authentication, as Kubernetes' `apiserver/pkg/authentication` token authenticators.
//!
//! A bearer token arrives in `Authorization: Bearer` or, for websockets, in a
//! `Sec-WebSocket-Protocol` entry ([`bearer`]). It is offered to [`TokenAuthenticators`], the
//! union of the configured kinds, in Kubernetes' order: the static token file ([`TokenFile`]),
//! service-account JWTs ([`ServiceAccountTokens`], legacy and bound), bootstrap tokens
//! ([`BootstrapTokens`]). The first that accepts the token decides; a token nobody accepts is
//! a 401, never anonymous.
//!
//! Besides authentication, the service-account issuer serves `TokenRequest`
//! ([`ServiceAccountTokens::token_request`]) and the OIDC discovery documents, and
//! [`review::token_review`] answers `TokenReview`.

mod b64;
pub mod bearer;
pub mod bootstrap;
pub mod jwt;
pub mod review;
pub mod serviceaccount;
pub mod token_file;
mod union;

#[cfg(test)]
mod testutil;

use std::sync::Arc;
use std::time::SystemTime;

use crate::auth::User;

pub use bootstrap::BootstrapTokens;
pub use review::token_review;
pub use serviceaccount::{BoundObject, KeySource, ObjectRef, ServiceAccountTokens};
pub use token_file::TokenFile;
pub use union::TokenAuthenticators;

/// What a token authenticator learned from a valid token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenResponse {
    pub user: User,
    /// The audiences the token was found good for: the intersection of the requested
    /// audiences and the token's own (empty when no audiences were checked).
    pub audiences: Vec<String>,
}

/// One kind of bearer token (Kubernetes' `authenticator.Token`).
pub trait TokenAuthenticator: Send + Sync {
    /// Who `token` belongs to, when it must be good for one of `audiences` (empty: the API
    /// server's own audiences). None: not a token of this kind (try the next kind).
    /// Some(Err): a token of this kind that is not valid, with a short reason.
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Option<Result<TokenResponse, String>>;

    /// Whether this kind checks audiences itself. Tokens of other kinds are only good for the
    /// API server's audiences, which [`TokenAuthenticators`] enforces for them.
    fn audience_aware(&self) -> bool {
        false
    }
}

/// The time source for expiry checks (tests inject a fixed one).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The wall clock.
pub fn system_clock() -> Clock {
    Arc::new(SystemTime::now)
}

/// The members of `a` that are also in `b`, in `a`'s order (Kubernetes' `Audiences.Intersect`).
pub(crate) fn intersect(a: &[String], b: &[String]) -> Vec<String> {
    a.iter().filter(|x| b.contains(x)).cloned().collect()
}

/// Byte comparison whose time does not depend on where the inputs differ (Go's
/// `subtle.ConstantTimeCompare`; a length difference is not hidden).
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Several errors as Go's `utilerrors.NewAggregate(...).Error()` prints them: one alone, more
/// as `[a, b]`, duplicates dropped.
pub(crate) fn aggregate(errors: Vec<String>) -> String {
    let mut seen: Vec<String> = Vec::new();
    for e in errors {
        if !seen.contains(&e) {
            seen.push(e);
        }
    }
    if seen.len() == 1 {
        seen.remove(0)
    } else {
        format!("[{}]", seen.join(", "))
    }
}

/// A list of strings the way Go's `%q` prints a `[]string`: `["a" "b"]`.
pub(crate) fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|s| serde_json::Value::String(s.clone()).to_string())
        .collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_compares_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }

    #[test]
    fn aggregate_prints_like_go() {
        assert_eq!(aggregate(vec!["a".into()]), "a");
        assert_eq!(
            aggregate(vec!["a".into(), "b".into(), "a".into()]),
            "[a, b]"
        );
    }

    #[test]
    fn intersect_keeps_the_first_lists_order() {
        let a = vec!["x".to_string(), "y".into(), "z".into()];
        let b = vec!["z".to_string(), "x".into()];
        assert_eq!(intersect(&a, &b), vec!["x".to_string(), "z".into()]);
    }
}
