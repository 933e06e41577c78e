//! `POST /apis/authentication.k8s.io/v1/tokenreviews`, as Kubernetes'
//! `pkg/registry/authentication/tokenreview`: authenticate the token of the review's spec as
//! if it had come in a request, and report who it belongs to.

use serde_json::{json, Map, Value};

use super::{intersect, TokenAuthenticator};
use crate::error::ApiError;
use capstan_api::meta::At as _;

/// Answer a `TokenReview` (`body`) with `tokens` (normally the server's
/// [`TokenAuthenticators`](super::TokenAuthenticators)). The token must be good for one of
/// `spec.audiences`, by default `api_audiences`. The caller answers 201 with the result.
pub fn token_review(
    body: &Value,
    tokens: &dyn TokenAuthenticator,
    api_audiences: &[String],
) -> Result<Value, ApiError> {
    let Value::Object(_) = body else {
        return Err(decode_error("the body is not a JSON object"));
    };
    let token = match body.at("/spec/token") {
        None | Some(Value::Null) => "",
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err(decode_error("spec.token must be a string")),
    };
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    let requested: Vec<String> = match body.at("/spec/audiences") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|a| a.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| decode_error("spec.audiences must be a list of strings"))?,
        Some(_) => return Err(decode_error("spec.audiences must be a list of strings")),
    };
    let audiences = if requested.is_empty() {
        api_audiences.to_vec()
    } else {
        requested
    };

    let mut status = Map::new();
    let mut user_info = Map::new();
    match tokens.authenticate_token(token, &audiences) {
        Some(Ok(resp)) => {
            if !audiences.is_empty() && intersect(&audiences, &resp.audiences).is_empty() {
                return Err(ApiError::internal(
                    "Internal error occurred: error validating audiences",
                ));
            }
            let mut user = resp.user;
            if !user.in_group("system:authenticated") {
                user.groups.push("system:authenticated".into());
            }
            status.insert("authenticated".into(), json!(true));
            if !user.name.is_empty() {
                user_info.insert("username".into(), json!(user.name));
            }
            if !user.uid.is_empty() {
                user_info.insert("uid".into(), json!(user.uid));
            }
            user_info.insert("groups".into(), json!(user.groups));
            if !user.extra.is_empty() {
                user_info.insert("extra".into(), json!(user.extra));
            }
            if !resp.audiences.is_empty() {
                status.insert("audiences".into(), json!(resp.audiences));
            }
        }
        Some(Err(e)) => {
            status.insert("error".into(), json!(e));
        }
        None => {
            status.insert("error".into(), json!("invalid bearer token"));
        }
    }
    status.insert("user".into(), Value::Object(user_info));

    let mut out = body.clone();
    out["apiVersion"] = json!("authentication.k8s.io/v1");
    out["kind"] = json!("TokenReview");
    let meta = capstan_api::meta::metadata_mut(&mut out);
    meta.entry("creationTimestamp").or_insert(Value::Null);
    out["status"] = Value::Object(status);
    Ok(out)
}

fn decode_error(why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "TokenReview in version \"v1\" cannot be handled as a TokenReview: {why}"
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::authn::serviceaccount::{ObjectRef, DEFAULT_ISSUER};
    use crate::authn::testutil::{fixed_clock, objects, service_account, t0, test_pki};
    use crate::authn::{ServiceAccountTokens, TokenAuthenticators, TokenFile};

    struct Fixture {
        union: TokenAuthenticators,
        sa: Arc<ServiceAccountTokens>,
    }

    fn fixture() -> Fixture {
        let o = objects();
        o.insert(
            "",
            "serviceaccounts",
            service_account("ns", "robot", "sa-uid"),
        );
        let sa = Arc::new(
            ServiceAccountTokens::new(test_pki(), String::new(), vec![], o)
                .with_clock(fixed_clock(t0())),
        );
        let file = TokenFile::parse("static-token,alice,1,devs\n", "tokens.csv").unwrap();
        let union = TokenAuthenticators::new(sa.api_audiences().to_vec())
            .with(Arc::new(file))
            .with(sa.clone());
        Fixture { union, sa }
    }

    fn review(f: &Fixture, spec: Value) -> Result<Value, ApiError> {
        let body =
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec});
        token_review(&body, &f.union, f.union.api_audiences())
    }

    fn sa_token(f: &Fixture, audiences: &[&str]) -> String {
        let auds: Vec<String> = audiences.iter().map(|a| a.to_string()).collect();
        let sa = ObjectRef::new("robot", "sa-uid");
        f.sa.issue_bound("ns", &sa, &auds, 3600, None, t0()).0
    }

    #[test]
    fn token_is_required() {
        let f = fixture();
        for spec in [json!({}), json!({"token": ""})] {
            let e = review(&f, spec).unwrap_err();
            assert_eq!(e.code, 400);
            assert_eq!(
                e.message,
                "token is required for TokenReview in authentication"
            );
        }
    }

    #[test]
    fn valid_service_account_token_is_reviewed() {
        let f = fixture();
        let token = sa_token(&f, &[DEFAULT_ISSUER]);
        let out = review(&f, json!({"token": token})).unwrap();
        let status = &out["status"];
        assert_eq!(status["authenticated"], true);
        assert_eq!(status["audiences"], json!([DEFAULT_ISSUER]));
        assert_eq!(status["user"]["username"], "system:serviceaccount:ns:robot");
        assert_eq!(status["user"]["uid"], "sa-uid");
        assert_eq!(
            status["user"]["groups"],
            json!([
                "system:serviceaccounts",
                "system:serviceaccounts:ns",
                "system:authenticated"
            ])
        );
        assert!(
            status["user"]["extra"]["authentication.kubernetes.io/credential-id"][0]
                .as_str()
                .unwrap()
                .starts_with("JTI=")
        );
        assert!(status.get("error").is_none());
        assert_eq!(out["spec"]["token"], token);
    }

    #[test]
    fn requested_audiences_are_checked_and_echoed() {
        let f = fixture();
        let token = sa_token(&f, &["vault"]);
        let out = review(&f, json!({"token": token, "audiences": ["vault", "x"]})).unwrap();
        assert_eq!(out["status"]["authenticated"], true);
        assert_eq!(out["status"]["audiences"], json!(["vault"]));
        // The same token is not good for the API server.
        let out = review(&f, json!({"token": token})).unwrap();
        assert!(out["status"].get("authenticated").is_none());
        assert!(out["status"]["error"]
            .as_str()
            .unwrap()
            .contains("audiences"));
        assert_eq!(out["status"]["user"], json!({}));
    }

    #[test]
    fn static_tokens_are_only_good_for_the_api_audiences() {
        let f = fixture();
        let out = review(&f, json!({"token": "static-token"})).unwrap();
        assert_eq!(out["status"]["authenticated"], true);
        assert_eq!(out["status"]["user"]["username"], "alice");
        assert_eq!(out["status"]["audiences"], json!([DEFAULT_ISSUER]));
        let out = review(&f, json!({"token": "static-token", "audiences": ["vault"]})).unwrap();
        assert!(out["status"].get("authenticated").is_none());
        assert_eq!(out["status"]["error"], "invalid bearer token");
    }

    #[test]
    fn unknown_token_is_not_authenticated() {
        let f = fixture();
        let out = review(&f, json!({"token": "nope"})).unwrap();
        assert_eq!(
            out["status"],
            json!({"user": {}, "error": "invalid bearer token"})
        );
        assert_eq!(out["kind"], "TokenReview");
    }
}
