use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};

use super::*;
use crate::authn::b64;
use crate::authn::testutil::{
    fixed_clock, node, objects, other_pki, pod, secret, service_account, settable_clock, t0,
    test_pki,
};
use crate::error::ApiError;
use crate::objects::MemoryObjects;
use capstan_api::meta::At as _;

const NS: &str = "default";

struct Fixture {
    objects: Arc<MemoryObjects>,
    tokens: ServiceAccountTokens,
    now: Arc<parking_lot::Mutex<SystemTime>>,
}

impl Fixture {
    fn new() -> Fixture {
        let objects = objects();
        objects.insert(
            "",
            "serviceaccounts",
            service_account(NS, "builder", "sa-uid"),
        );
        objects.insert("", "pods", pod(NS, "web", "pod-uid", "builder", "node-1"));
        objects.insert("", "nodes", node("node-1", "node-uid"));
        let (clock, now) = settable_clock(t0());
        let tokens = ServiceAccountTokens::new(test_pki(), String::new(), vec![], objects.clone())
            .with_clock(clock);
        Fixture {
            objects,
            tokens,
            now,
        }
    }

    fn sa(&self) -> Value {
        self.objects
            .get("", "serviceaccounts", NS, "builder")
            .expect("service account")
    }

    /// Answer a TokenRequest at t0.
    fn request(&self, body: Value) -> Result<Value, ApiError> {
        self.tokens.token_request(NS, &self.sa(), &body, t0())
    }

    fn token(&self, spec: Value) -> String {
        let out = self.request(json!({"spec": spec})).expect("token request");
        out["status"]["token"].as_str().unwrap().to_string()
    }

    fn pod_token(&self) -> String {
        self.token(json!({"boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}}))
    }

    fn authenticate(&self, token: &str) -> Option<Result<TokenResponse, String>> {
        self.tokens.authenticate_token(token, &[])
    }

    fn user(&self, token: &str) -> Result<User, String> {
        self.authenticate(token).expect("our token").map(|r| r.user)
    }

    fn advance(&self, secs: u64) {
        *self.now.lock() = t0() + Duration::from_secs(secs);
    }

    fn remove(&self, resource: &str, ns: &str, name: &str) {
        self.objects
            .items
            .write()
            .remove(&("".into(), resource.into(), ns.into(), name.into()));
    }
}

fn payload(token: &str) -> Value {
    let part = token.split('.').nth(1).unwrap();
    serde_json::from_slice(&b64::decode(part).unwrap()).unwrap()
}

#[test]
fn pod_bound_token_authenticates_as_the_service_account() {
    let f = Fixture::new();
    let token = f.pod_token();
    let resp = f.authenticate(&token).unwrap().unwrap();
    assert_eq!(resp.audiences, vec![DEFAULT_ISSUER.to_string()]);
    let user = resp.user;
    assert_eq!(user.name, "system:serviceaccount:default:builder");
    assert_eq!(user.uid, "sa-uid");
    assert_eq!(
        user.groups,
        vec!["system:serviceaccounts", "system:serviceaccounts:default"]
    );
    let jti = payload(&token)["jti"].as_str().unwrap().to_string();
    let extra: Vec<(&str, Vec<String>)> = vec![
        (CREDENTIAL_ID_KEY, vec![format!("JTI={jti}")]),
        (NODE_NAME_KEY, vec!["node-1".into()]),
        (NODE_UID_KEY, vec!["node-uid".into()]),
        (POD_NAME_KEY, vec!["web".into()]),
        (POD_UID_KEY, vec!["pod-uid".into()]),
    ];
    let want: std::collections::BTreeMap<String, Vec<String>> =
        extra.into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    assert_eq!(user.extra, want);
}

#[test]
fn bound_token_claims_have_kubernetes_shape() {
    let f = Fixture::new();
    let token = f.pod_token();
    let header: Value =
        serde_json::from_slice(&b64::decode(token.split('.').next().unwrap()).unwrap()).unwrap();
    assert_eq!(
        header,
        json!({"alg": "RS256", "kid": f.tokens.key().key_id()})
    );
    let claims = payload(&token);
    let now = unix_seconds(t0());
    let jti = claims["jti"].as_str().unwrap();
    assert_eq!(uuid::Uuid::parse_str(jti).unwrap().get_version_num(), 4);
    assert_eq!(
        claims,
        json!({
            "aud": [DEFAULT_ISSUER],
            "exp": now + 3600,
            "iat": now,
            "iss": DEFAULT_ISSUER,
            "jti": jti,
            "kubernetes.io": {
                "namespace": "default",
                "node": {"name": "node-1", "uid": "node-uid"},
                "pod": {"name": "web", "uid": "pod-uid"},
                "serviceaccount": {"name": "builder", "uid": "sa-uid"},
            },
            "nbf": now,
            "sub": "system:serviceaccount:default:builder",
        })
    );
}

#[test]
fn token_signed_by_another_key_is_rejected() {
    let f = Fixture::new();
    let forger = ServiceAccountTokens::new(other_pki(), String::new(), vec![], f.objects.clone());
    let sa = ObjectRef::new("builder", "sa-uid");
    let (token, _) = forger.issue_bound(NS, &sa, &[DEFAULT_ISSUER.into()], 3600, None, t0());
    assert!(matches!(f.authenticate(&token), Some(Err(_))));
    let legacy = forger.issue_legacy(NS, &sa, "builder-token");
    assert!(matches!(f.authenticate(&legacy), Some(Err(_))));
}

#[test]
fn expired_token_is_rejected_after_the_leeway() {
    let f = Fixture::new();
    let token = f.token(json!({"expirationSeconds": 600}));
    f.advance(600 + 59);
    assert!(f.user(&token).is_ok());
    f.advance(600 + 61);
    assert_eq!(
        f.user(&token).unwrap_err(),
        "service account token has expired"
    );
}

#[test]
fn token_from_the_future_is_rejected() {
    let f = Fixture::new();
    let sa = ObjectRef::new("builder", "sa-uid");
    let later = t0() + Duration::from_secs(120);
    let (token, _) = f
        .tokens
        .issue_bound(NS, &sa, &[DEFAULT_ISSUER.into()], 3600, None, later);
    assert_eq!(
        f.user(&token).unwrap_err(),
        "service account token is not valid yet"
    );
    f.advance(61);
    assert!(f.user(&token).is_ok());
}

#[test]
fn token_of_a_deleted_or_recreated_service_account_is_rejected() {
    let f = Fixture::new();
    let token = f.pod_token();
    f.objects.insert(
        "",
        "serviceaccounts",
        service_account(NS, "builder", "another-uid"),
    );
    assert!(f.user(&token).unwrap_err().contains("does not match claim"));
    f.remove("serviceaccounts", NS, "builder");
    assert!(f.user(&token).unwrap_err().contains("not found"));
}

#[test]
fn token_of_a_deleted_or_recreated_pod_is_rejected() {
    let f = Fixture::new();
    let token = f.pod_token();
    f.objects.insert(
        "",
        "pods",
        pod(NS, "web", "new-pod-uid", "builder", "node-1"),
    );
    assert!(f.user(&token).unwrap_err().contains("pod UID"));
    f.remove("pods", NS, "web");
    assert_eq!(
        f.user(&token).unwrap_err(),
        "service account token has been invalidated"
    );
}

#[test]
fn token_of_a_terminating_pod_works_until_its_deletion_time_passes() {
    let f = Fixture::new();
    let token = f.pod_token();
    let mut p = pod(NS, "web", "pod-uid", "builder", "node-1");
    // Graceful deletion: the deletion timestamp is the end of the grace period.
    p["metadata"]["deletionTimestamp"] = json!("2024-05-01T00:00:30Z");
    f.objects.insert("", "pods", p);
    assert!(f.user(&token).is_ok());
    f.advance(30 + 61);
    assert_eq!(
        f.user(&token).unwrap_err(),
        "service account token has been invalidated"
    );
}

#[test]
fn pod_bound_token_does_not_need_its_node() {
    let f = Fixture::new();
    let token = f.pod_token();
    f.remove("nodes", "", "node-1");
    assert!(f.user(&token).is_ok());
}

#[test]
fn node_bound_token_needs_its_node() {
    let f = Fixture::new();
    let token =
        f.token(json!({"boundObjectRef": {"kind": "Node", "apiVersion": "v1", "name": "node-1"}}));
    let user = f.user(&token).unwrap();
    assert_eq!(user.extra[NODE_NAME_KEY], vec!["node-1".to_string()]);
    assert!(!user.extra.contains_key(POD_NAME_KEY));
    f.objects.insert("", "nodes", node("node-1", "other"));
    assert!(f.user(&token).unwrap_err().contains("node UID"));
    f.remove("nodes", "", "node-1");
    assert!(f.user(&token).is_err());
}

#[test]
fn secret_bound_token_needs_its_secret() {
    let f = Fixture::new();
    f.objects
        .insert("", "secrets", secret(NS, "s", "secret-uid", "Opaque", &[]));
    let token =
        f.token(json!({"boundObjectRef": {"kind": "Secret", "apiVersion": "v1", "name": "s"}}));
    assert!(f.user(&token).is_ok());
    f.remove("secrets", NS, "s");
    assert!(f.user(&token).is_err());
}

#[test]
fn audience_mismatch_is_rejected() {
    let f = Fixture::new();
    let token = f.token(json!({"audiences": ["vault"]}));
    // Not good for the API server itself...
    let err = f.user(&token).unwrap_err();
    assert!(err.contains("audiences"), "{err}");
    let h = bearer_headers(&token);
    assert!(matches!(
        Authenticator::authenticate(&f.tokens, &h, &ConnInfo::default()),
        Some(Err(_))
    ));
    // ...but for vault.
    let resp = f
        .tokens
        .authenticate_token(&token, &["vault".into(), "other".into()])
        .unwrap()
        .unwrap();
    assert_eq!(resp.audiences, vec!["vault".to_string()]);
}

fn bearer_headers(token: &str) -> http::HeaderMap {
    let mut h = http::HeaderMap::new();
    h.insert(
        http::header::AUTHORIZATION,
        format!("Bearer {token}").parse().unwrap(),
    );
    h
}

/// A legacy token stored the way the tokens controller stores it.
fn legacy_fixture() -> (Fixture, String) {
    let f = Fixture::new();
    let token = f
        .tokens
        .issue_legacy(NS, &ObjectRef::new("builder", "sa-uid"), "builder-token");
    f.objects.insert(
        "",
        "secrets",
        secret(
            NS,
            "builder-token",
            "secret-uid",
            "kubernetes.io/service-account-token",
            &[("token", &token)],
        ),
    );
    (f, token)
}

#[test]
fn legacy_token_authenticates_while_its_secret_holds_it() {
    let (f, token) = legacy_fixture();
    assert_eq!(
        payload(&token),
        json!({
            "iss": "kubernetes/serviceaccount",
            "kubernetes.io/serviceaccount/namespace": "default",
            "kubernetes.io/serviceaccount/secret.name": "builder-token",
            "kubernetes.io/serviceaccount/service-account.name": "builder",
            "kubernetes.io/serviceaccount/service-account.uid": "sa-uid",
            "sub": "system:serviceaccount:default:builder",
        })
    );
    let resp = f.authenticate(&token).unwrap().unwrap();
    assert_eq!(resp.user.name, "system:serviceaccount:default:builder");
    assert_eq!(resp.user.uid, "sa-uid");
    assert!(resp.user.extra.is_empty());
    assert_eq!(resp.audiences, vec![DEFAULT_ISSUER.to_string()]);
    // Legacy tokens are only good for the API server.
    assert!(matches!(
        f.tokens.authenticate_token(&token, &["vault".into()]),
        Some(Err(_))
    ));
}

#[test]
fn legacy_token_stops_working_when_its_secret_is_gone() {
    let (f, token) = legacy_fixture();
    f.remove("secrets", NS, "builder-token");
    assert_eq!(f.user(&token).unwrap_err(), "token has been invalidated");
}

#[test]
fn legacy_token_is_rejected_when_the_secret_changed_or_was_retired() {
    type Change = fn(&Fixture);
    let cases: Vec<(&str, Change)> = vec![
        ("secret holds another token", |f| {
            f.objects.insert(
                "",
                "secrets",
                secret(
                    NS,
                    "builder-token",
                    "u",
                    "kubernetes.io/service-account-token",
                    &[("token", "other")],
                ),
            )
        }),
        ("secret is being deleted", |f| {
            let mut s = f.objects.get("", "secrets", NS, "builder-token").unwrap();
            s["metadata"]["deletionTimestamp"] = json!("2024-05-01T00:00:00Z");
            f.objects.insert("", "secrets", s);
        }),
        ("secret is marked invalid", |f| {
            let mut s = f.objects.get("", "secrets", NS, "builder-token").unwrap();
            s["metadata"]["labels"] = json!({legacy::INVALID_SINCE_LABEL: "2024-04-01"});
            f.objects.insert("", "secrets", s);
        }),
        ("service account is gone", |f| {
            f.remove("serviceaccounts", NS, "builder")
        }),
        ("service account was recreated", |f| {
            f.objects.insert(
                "",
                "serviceaccounts",
                service_account(NS, "builder", "other"),
            )
        }),
    ];
    for (name, change) in cases {
        let (f, token) = legacy_fixture();
        change(&f);
        assert!(f.user(&token).is_err(), "{name}");
    }
}

#[tokio::test]
async fn legacy_token_use_is_recorded_on_its_secret() {
    let (f, token) = legacy_fixture();
    assert!(f.user(&token).is_ok());
    for _ in 0..100 {
        tokio::task::yield_now().await;
        let s = f.objects.get("", "secrets", NS, "builder-token").unwrap();
        if let Some(day) = s.at("/metadata/labels/kubernetes.io~1legacy-token-last-used") {
            assert_eq!(day, "2024-05-01");
            return;
        }
    }
    panic!("the last-used label was not written");
}

#[test]
fn tokens_of_other_issuers_are_not_ours() {
    let f = Fixture::new();
    let other = ServiceAccountTokens::new(
        test_pki(),
        "https://elsewhere.example".into(),
        vec![],
        f.objects.clone(),
    );
    let sa = ObjectRef::new("builder", "sa-uid");
    let (token, _) = other.issue_bound(NS, &sa, &[DEFAULT_ISSUER.into()], 3600, None, t0());
    assert!(f.authenticate(&token).is_none());
    // Unless that issuer is accepted too.
    let f2 = Fixture::new();
    let tokens = ServiceAccountTokens::new(test_pki(), String::new(), vec![], f2.objects.clone())
        .with_extra_issuers(vec!["https://elsewhere.example".into()])
        .with_clock(fixed_clock(t0()));
    assert!(tokens.authenticate_token(&token, &[]).unwrap().is_ok());
}

#[test]
fn malformed_tokens_never_panic() {
    let f = Fixture::new();
    let good = f.pod_token();
    let parts: Vec<&str> = good.split('.').collect();
    let enc = |v: Value| b64::encode(v.to_string().as_bytes());
    let ours = enc(json!({"iss": DEFAULT_ISSUER}));
    let not_ours = [
        String::new(),
        "garbage".into(),
        "a.b".into(),
        format!("{}.{}", parts[0], parts[1]),
        format!("{}.{}.{}.{}", parts[0], parts[1], parts[2], parts[2]),
        format!("{}.!!.{}", parts[0], parts[2]),
        format!("{}.{}=.{}", parts[0], parts[1], parts[2]),
        format!("{{\"iss\":1}}.{ours}.x"),
    ];
    for token in not_ours {
        assert!(f.authenticate(&token).is_none(), "{token:?}");
    }
    let rejected = [
        format!("{}.{ours}.{}", enc(json!({"alg": "none"})), ""),
        format!("{}.{}.", enc(json!({"alg": "none"})), parts[1]),
        format!("{}.{}.{}", enc(json!({"alg": "HS256"})), parts[1], parts[2]),
        format!("{}.{}.{}", parts[0], parts[1], "AAAA"),
        format!("{}.{}.{}", parts[0], parts[1], "%%%"),
        format!("garbage.{ours}.garbage"),
        format!("{}.{ours}.{}", parts[0], parts[2]),
        format!(
            "{}.{}.{}",
            parts[0],
            enc(json!({"iss": DEFAULT_ISSUER, "exp": "soon"})),
            parts[2]
        ),
    ];
    for token in rejected {
        assert!(matches!(f.authenticate(&token), Some(Err(_))), "{token:?}");
    }
}

#[test]
fn wrongly_typed_claims_of_a_signed_token_are_rejected() {
    let f = Fixture::new();
    let now = unix_seconds(t0());
    let cases = [
        json!({"iss": DEFAULT_ISSUER, "aud": [DEFAULT_ISSUER], "exp": "later"}),
        json!({"iss": DEFAULT_ISSUER, "aud": [1], "exp": now + 60}),
        json!({"iss": DEFAULT_ISSUER, "aud": [DEFAULT_ISSUER], "kubernetes.io": "x"}),
        json!({"iss": DEFAULT_ISSUER, "aud": [DEFAULT_ISSUER], "kubernetes.io": {"pod": 5}}),
        json!({"iss": DEFAULT_ISSUER, "aud": [DEFAULT_ISSUER], "exp": 1e300}),
        json!({"iss": DEFAULT_ISSUER, "aud": [DEFAULT_ISSUER], "nbf": i64::MAX}),
    ];
    for claims in cases {
        let token = jwt::sign(f.tokens.key(), &claims);
        assert!(matches!(f.authenticate(&token), Some(Err(_))), "{claims}");
    }
}

// --- TokenRequest ---

#[test]
fn token_request_defaults_and_fills_status() {
    let f = Fixture::new();
    let out = f
        .request(
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .unwrap();
    assert_eq!(out["metadata"]["name"], "builder");
    assert_eq!(out["metadata"]["namespace"], "default");
    assert_eq!(out["metadata"]["creationTimestamp"], "2024-05-01T00:00:00Z");
    assert_eq!(out["spec"]["audiences"], json!([DEFAULT_ISSUER]));
    assert_eq!(out["spec"]["expirationSeconds"], 3600);
    assert_eq!(out["status"]["expirationTimestamp"], "2024-05-01T01:00:00Z");
    let token = out["status"]["token"].as_str().unwrap();
    assert!(f.user(token).is_ok());
    assert!(payload(token)["kubernetes.io"].get("pod").is_none());
}

#[test]
fn token_request_rejects_too_short_or_too_long_lifetimes() {
    let f = Fixture::new();
    let e = f
        .request(json!({"spec": {"expirationSeconds": 599}}))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: 599: may not specify a duration less than 10 minutes"
    );
    assert_eq!(
        e.details.unwrap()["causes"][0],
        json!({"reason": "FieldValueInvalid", "field": "spec.expirationSeconds",
            "message": "Invalid value: 599: may not specify a duration less than 10 minutes"})
    );
    let e = f
        .request(json!({"spec": {"expirationSeconds": (1i64 << 32) + 1}}))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert!(e
        .message
        .contains("may not specify a duration larger than 2^32 seconds"));
    assert!(f
        .request(json!({"spec": {"expirationSeconds": 1i64 << 32}}))
        .is_ok());
    let e = f
        .request(json!({"spec": {"expirationSeconds": "1h"}}))
        .unwrap_err();
    assert_eq!(e.code, 400);
}

#[test]
fn token_request_checks_the_bound_object() {
    let f = Fixture::new();
    let bound = |r: Value| f.request(json!({"spec": {"boundObjectRef": r}}));
    let e = bound(json!({"kind": "Pod", "apiVersion": "v1", "name": "missing"})).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "pods \"missing\" not found")
    );
    let e = bound(json!({"kind": "Secret", "apiVersion": "v1", "name": "missing"})).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "secrets \"missing\" not found")
    );
    let e = bound(json!({"kind": "ConfigMap", "apiVersion": "v1", "name": "x"})).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (
            400,
            "cannot bind token to object of type /v1, Kind=ConfigMap"
        )
    );
    let e = bound(json!({"kind": "Pod", "apiVersion": "apps/v1", "name": "web"})).unwrap_err();
    assert_eq!(e.code, 400);
    let e = bound(json!({"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "stale"}))
        .unwrap_err();
    assert_eq!(e.code, 409);
    assert!(e.message.starts_with("Operation cannot be fulfilled on Pod \"web\": the UID in the bound object reference (stale)"));
    assert!(
        bound(json!({"kind": "Pod", "apiVersion": "v1", "name": "web", "uid": "pod-uid"})).is_ok()
    );
    f.objects
        .insert("", "pods", pod(NS, "other", "u2", "someone-else", ""));
    let e = bound(json!({"kind": "Pod", "apiVersion": "v1", "name": "other"})).unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (400, "cannot bind token for serviceaccount \"builder\" to pod running with different serviceaccount name.")
    );
}

#[test]
fn token_request_keeps_the_node_name_of_a_missing_node() {
    let f = Fixture::new();
    f.remove("nodes", "", "node-1");
    let token = f.pod_token();
    assert_eq!(
        payload(&token)["kubernetes.io"]["node"],
        json!({"name": "node-1"})
    );
    let user = f.user(&token).unwrap();
    assert_eq!(user.extra[NODE_NAME_KEY], vec!["node-1".to_string()]);
    assert!(!user.extra.contains_key(NODE_UID_KEY));
}

#[test]
fn token_request_name_and_namespace_must_match() {
    let f = Fixture::new();
    let e = f
        .request(json!({"metadata": {"name": "other"}}))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert_eq!(
        e.message,
        "TokenRequest.authentication.k8s.io \"builder\" is invalid: metadata.name: Invalid value: \"other\": must match the service account name if specified"
    );
    let e = f
        .request(json!({"metadata": {"namespace": "kube-system"}}))
        .unwrap_err();
    assert_eq!(e.code, 422);
    assert!(f
        .request(json!({"metadata": {"name": "builder", "namespace": "default"}}))
        .is_ok());
}

#[test]
fn kubelet_projected_tokens_are_extended_with_a_warning_time() {
    let f = Fixture::new();
    let out = f
        .request(json!({"spec": {"expirationSeconds": 3607,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}}}))
        .unwrap();
    let now = unix_seconds(t0());
    let claims = payload(out["status"]["token"].as_str().unwrap());
    assert_eq!(claims["exp"], now + 365 * 24 * 3600);
    assert_eq!(claims["kubernetes.io"]["warnafter"], now + 3607);
    assert_eq!(out["spec"]["expirationSeconds"], 3607);
    assert_eq!(out["status"]["expirationTimestamp"], "2024-05-01T01:00:07Z");
    // Not for other audiences, and not when disabled.
    let out = f
        .request(
            json!({"spec": {"expirationSeconds": 3607, "audiences": ["vault"],
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "web"}}}),
        )
        .unwrap();
    assert_eq!(
        payload(out["status"]["token"].as_str().unwrap())["exp"],
        now + 3607
    );
}

#[test]
fn token_request_lifetime_is_capped_by_the_maximum() {
    let f = Fixture::new();
    let tokens = ServiceAccountTokens::new(test_pki(), String::new(), vec![], f.objects.clone())
        .with_max_expiration_seconds(1200);
    let out = tokens
        .token_request(
            NS,
            &f.sa(),
            &json!({"spec": {"expirationSeconds": 7200}}),
            t0(),
        )
        .unwrap();
    assert_eq!(out["spec"]["expirationSeconds"], 1200);
    assert_eq!(out["status"]["expirationTimestamp"], "2024-05-01T00:20:00Z");
}
