//! Legacy (Secret-based) service-account tokens, as Kubernetes' `pkg/serviceaccount/legacy.go`:
//! tokens without expiry that stay valid while the Secret they were written to still holds
//! them. Each use stamps the Secret with the day it was last used, which the legacy token
//! cleaner reads; a Secret the cleaner marked invalid no longer authenticates.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};

use super::{split_username, ObjectRef, ServiceAccountInfo, StandardClaims, LEGACY_ISSUER};
use crate::authn::constant_time_eq;
use crate::objects::Objects;
use capstan_api::meta::At as _;

pub const NAMESPACE_CLAIM: &str = "kubernetes.io/serviceaccount/namespace";
pub const SECRET_NAME_CLAIM: &str = "kubernetes.io/serviceaccount/secret.name";
pub const SERVICE_ACCOUNT_NAME_CLAIM: &str = "kubernetes.io/serviceaccount/service-account.name";
pub const SERVICE_ACCOUNT_UID_CLAIM: &str = "kubernetes.io/serviceaccount/service-account.uid";

/// Set by the legacy token cleaner on Secrets whose token it retired (a date).
pub const INVALID_SINCE_LABEL: &str = "kubernetes.io/legacy-token-invalid-since";
/// The day (UTC, `YYYY-MM-DD`) a Secret's token was last used.
pub const LAST_USED_LABEL: &str = "kubernetes.io/legacy-token-last-used";

/// The claims of a legacy token (Kubernetes' `LegacyClaims`), keys sorted.
pub fn claims(namespace: &str, service_account: &ObjectRef, secret_name: &str) -> Value {
    let mut m = Map::new();
    m.insert("iss".into(), json!(LEGACY_ISSUER));
    m.insert(NAMESPACE_CLAIM.into(), json!(namespace));
    m.insert(SECRET_NAME_CLAIM.into(), json!(secret_name));
    m.insert(
        SERVICE_ACCOUNT_NAME_CLAIM.into(),
        json!(service_account.name),
    );
    m.insert(SERVICE_ACCOUNT_UID_CLAIM.into(), json!(service_account.uid));
    m.insert(
        "sub".into(),
        json!(super::username(namespace, &service_account.name)),
    );
    Value::Object(m)
}

/// Check a legacy token whose signature is good: the claims agree with each other, the Secret
/// still holds exactly this token and is not retired, and the service account still exists
/// with the claimed uid.
pub fn validate(
    objects: &Arc<dyn Objects>,
    token: &str,
    public: &StandardClaims,
    claims: &Map<String, Value>,
    now: SystemTime,
) -> Result<ServiceAccountInfo, String> {
    let claim = |name: &str, what: &str| match claims.get(name) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
        _ => Err(format!("{what} claim is missing")),
    };
    if public.sub.is_empty() {
        return Err("sub claim is missing".into());
    }
    let ns = claim(NAMESPACE_CLAIM, "namespace")?;
    let secret_name = claim(SECRET_NAME_CLAIM, "secretName")?;
    let sa_name = claim(SERVICE_ACCOUNT_NAME_CLAIM, "serviceAccountName")?;
    let sa_uid = claim(SERVICE_ACCOUNT_UID_CLAIM, "serviceAccountUID")?;
    if split_username(&public.sub) != Some((ns.as_str(), sa_name.as_str())) {
        return Err("sub claim is invalid".into());
    }

    let secret = objects
        .get("", "secrets", &ns, &secret_name)
        .ok_or("token has been invalidated")?;
    if capstan_api::meta::deletion_timestamp(&secret).is_some() {
        return Err("token has been invalidated".into());
    }
    let stored = secret
        .at("/data/token")
        .and_then(Value::as_str)
        .and_then(crate::registry::base64_decode)
        .unwrap_or_default();
    if !constant_time_eq(&stored, token.as_bytes()) {
        return Err("token does not match server's copy".into());
    }

    let sa = objects
        .get("", "serviceaccounts", &ns, &sa_name)
        .ok_or_else(|| format!("serviceaccounts {sa_name:?} not found"))?;
    if capstan_api::meta::deletion_timestamp(&sa).is_some() {
        return Err(format!("ServiceAccount {ns}/{sa_name} has been deleted"));
    }
    let uid = capstan_api::meta::uid(&sa);
    if uid != sa_uid {
        return Err(format!(
            "ServiceAccount UID ({uid}) does not match claim ({sa_uid})"
        ));
    }

    let label = |key: &str| {
        capstan_api::meta::labels(&secret)
            .and_then(|l| l.get(key))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    if !label(INVALID_SINCE_LABEL).is_empty() {
        record_last_used(objects, &secret, now);
        return Err(format!(
            "the token in secret {ns}/{secret_name} for service account {ns}/{sa_name} has been \
             marked invalid. Use tokens from the TokenRequest API or manually created \
             secret-based tokens, or remove the '{INVALID_SINCE_LABEL}' label from the secret \
             to temporarily allow use of this token"
        ));
    }
    record_last_used(objects, &secret, now);
    Ok(ServiceAccountInfo {
        namespace: ns,
        name: sa_name,
        uid: sa_uid,
        ..Default::default()
    })
}

/// The UTC day of `t`, `YYYY-MM-DD`.
fn day(t: SystemTime) -> String {
    capstan_api::meta::format_time(t)[..10].to_string()
}

/// Stamp `secret` with today's date unless it already says today (or tomorrow, for clocks a
/// little ahead). The write happens in the background: authentication does not wait for it.
fn record_last_used(objects: &Arc<dyn Objects>, secret: &Value, now: SystemTime) {
    let today = day(now);
    let tomorrow = day(now + Duration::from_secs(86_400));
    let current = capstan_api::meta::labels(secret)
        .and_then(|l| l.get(LAST_USED_LABEL))
        .and_then(Value::as_str)
        .unwrap_or("");
    if current == today || current == tomorrow {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let objects = objects.clone();
    let ns = capstan_api::meta::namespace(secret).to_string();
    let name = capstan_api::meta::name(secret).to_string();
    let uid = capstan_api::meta::uid(secret).to_string();
    runtime.spawn(async move {
        let change = move |current: &Value| {
            // Only the Secret that was read: a re-created one is left alone.
            if capstan_api::meta::uid(current) != uid {
                return Ok(None);
            }
            let mut next = current.clone();
            let meta = capstan_api::meta::metadata_mut(&mut next);
            let labels = meta
                .entry("labels")
                .or_insert_with(|| Value::Object(Map::new()));
            if !labels.is_object() {
                *labels = Value::Object(Map::new());
            }
            labels[LAST_USED_LABEL] = Value::String(today.clone());
            Ok(Some(next))
        };
        if let Err(e) = objects.update("", "secrets", &ns, &name, "", &change).await {
            tracing::warn!(namespace = %ns, secret = %name, error = %e.message,
                "cannot record the last use of a legacy service-account token");
        }
    });
}
