//! The union of the configured token authenticators, as Kubernetes' `token/union` behind the
//! bearer-token and websocket request authenticators, with the audience rule of
//! `authenticator.WrapAudienceAgnosticToken` for kinds that do not check audiences.

use std::sync::Arc;

use http::HeaderMap;

use super::{aggregate, bearer, intersect, TokenAuthenticator, TokenResponse};
use crate::auth::{Authenticator, ConnInfo, User};

/// Every configured kind of bearer token, tried in order; the first that accepts a token
/// decides. As a request [`Authenticator`] a token that no kind accepts is an error (401), as
/// in Kubernetes, where a bad bearer token never falls back to anonymous.
#[derive(Clone, Default)]
pub struct TokenAuthenticators {
    api_audiences: Vec<String>,
    authenticators: Vec<Arc<dyn TokenAuthenticator>>,
}

impl TokenAuthenticators {
    /// An empty union for an API server whose own audiences (`--api-audiences`, by default the
    /// service-account issuer) are `api_audiences`.
    pub fn new(api_audiences: Vec<String>) -> Self {
        TokenAuthenticators {
            api_audiences,
            authenticators: Vec::new(),
        }
    }

    /// Add a kind, tried after those already added.
    pub fn push(&mut self, a: Arc<dyn TokenAuthenticator>) {
        self.authenticators.push(a);
    }

    /// [`push`](Self::push), builder style.
    pub fn with(mut self, a: Arc<dyn TokenAuthenticator>) -> Self {
        self.push(a);
        self
    }

    pub fn api_audiences(&self) -> &[String] {
        &self.api_audiences
    }

    pub fn is_empty(&self) -> bool {
        self.authenticators.is_empty()
    }

    /// A kind that does not check audiences is only good for the API server's own: asked for
    /// others it is not consulted, and what it accepts is good for the common ones.
    fn audience_agnostic(
        &self,
        a: &dyn TokenAuthenticator,
        token: &str,
        requested: &[String],
    ) -> Option<Result<TokenResponse, String>> {
        if requested.is_empty() {
            return a.authenticate_token(token, requested);
        }
        let auds = intersect(&self.api_audiences, requested);
        if auds.is_empty() {
            return None;
        }
        match a.authenticate_token(token, requested)? {
            Ok(mut r) => {
                r.audiences = auds;
                Some(Ok(r))
            }
            Err(e) => Some(Err(e)),
        }
    }
}

impl TokenAuthenticator for TokenAuthenticators {
    fn authenticate_token(
        &self,
        token: &str,
        audiences: &[String],
    ) -> Option<Result<TokenResponse, String>> {
        let requested = if audiences.is_empty() {
            &self.api_audiences[..]
        } else {
            audiences
        };
        let mut errors = Vec::new();
        for a in &self.authenticators {
            let result = if a.audience_aware() {
                a.authenticate_token(token, requested)
            } else {
                self.audience_agnostic(a.as_ref(), token, requested)
            };
            match result {
                Some(Ok(r)) => return Some(Ok(r)),
                Some(Err(e)) => errors.push(e),
                None => {}
            }
        }
        if errors.is_empty() {
            None
        } else {
            Some(Err(aggregate(errors)))
        }
    }

    fn audience_aware(&self) -> bool {
        true
    }
}

impl Authenticator for TokenAuthenticators {
    fn authenticate(&self, headers: &HeaderMap, _conn: &ConnInfo) -> Option<Result<User, String>> {
        match bearer::authenticate_request(self, headers, &self.api_audiences) {
            Some(result) => Some(result.map(|r| r.user)),
            None if bearer::has_token(headers) => Some(Err("invalid bearer token".into())),
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Accepts one token; rejects tokens starting with "bad".
    struct Fixed {
        token: &'static str,
        name: &'static str,
        aware: bool,
    }

    impl TokenAuthenticator for Fixed {
        fn authenticate_token(
            &self,
            token: &str,
            audiences: &[String],
        ) -> Option<Result<TokenResponse, String>> {
            if token.starts_with("bad") {
                return Some(Err(format!("{} rejects it", self.name)));
            }
            (token == self.token).then(|| {
                Ok(TokenResponse {
                    user: User {
                        name: self.name.into(),
                        ..Default::default()
                    },
                    audiences: if self.aware {
                        audiences.to_vec()
                    } else {
                        Vec::new()
                    },
                })
            })
        }

        fn audience_aware(&self) -> bool {
            self.aware
        }
    }

    fn union() -> TokenAuthenticators {
        TokenAuthenticators::new(vec!["api".into()])
            .with(Arc::new(Fixed {
                token: "one",
                name: "first",
                aware: false,
            }))
            .with(Arc::new(Fixed {
                token: "two",
                name: "second",
                aware: true,
            }))
    }

    fn bearer(token: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        h
    }

    #[test]
    fn first_kind_that_accepts_decides() {
        let u = union();
        let conn = ConnInfo::default();
        assert_eq!(
            u.authenticate(&bearer("one"), &conn).unwrap().unwrap().name,
            "first"
        );
        assert_eq!(
            u.authenticate(&bearer("two"), &conn).unwrap().unwrap().name,
            "second"
        );
    }

    #[test]
    fn unknown_bearer_token_is_an_error_not_anonymous() {
        let u = union();
        let conn = ConnInfo::default();
        assert_eq!(
            u.authenticate(&bearer("nobody"), &conn),
            Some(Err("invalid bearer token".into()))
        );
        assert_eq!(
            u.authenticate(&bearer("bad"), &conn),
            Some(Err("[first rejects it, second rejects it]".into()))
        );
        assert_eq!(u.authenticate(&HeaderMap::new(), &conn), None);
    }

    #[test]
    fn audience_agnostic_kinds_only_serve_the_api_audiences() {
        let u = union();
        let r = u.authenticate_token("one", &[]).unwrap().unwrap();
        assert_eq!(r.audiences, vec!["api".to_string()]);
        let r = u
            .authenticate_token("one", &["api".into(), "other".into()])
            .unwrap()
            .unwrap();
        assert_eq!(r.audiences, vec!["api".to_string()]);
        assert!(u.authenticate_token("one", &["other".into()]).is_none());
        // An audience-aware kind decides for itself.
        let r = u
            .authenticate_token("two", &["other".into()])
            .unwrap()
            .unwrap();
        assert_eq!(r.audiences, vec!["other".to_string()]);
    }
}
