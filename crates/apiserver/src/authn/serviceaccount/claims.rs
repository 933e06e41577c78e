//! Bound service-account tokens, as Kubernetes' `pkg/serviceaccount/claims.go`: the claims a
//! `TokenRequest` token carries and their validation, which requires the service account and
//! the object the token is bound to to still exist with the same uid.

use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::{deletion_time, unix_seconds, unix_time, ServiceAccountInfo, StandardClaims, LEEWAY};
use crate::objects::Objects;

/// The private claim that holds what a bound token is about.
pub const PRIVATE_CLAIM: &str = "kubernetes.io";

/// A name and uid, as the token's object references hold them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ObjectRef {
    pub name: String,
    pub uid: String,
}

impl ObjectRef {
    pub fn new(name: impl Into<String>, uid: impl Into<String>) -> Self {
        ObjectRef {
            name: name.into(),
            uid: uid.into(),
        }
    }

    /// The reference to `obj`, by its metadata.
    pub fn of(obj: &Value) -> Self {
        ObjectRef::new(capstan_api::meta::name(obj), capstan_api::meta::uid(obj))
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        if !self.name.is_empty() {
            m.insert("name".into(), Value::String(self.name.clone()));
        }
        if !self.uid.is_empty() {
            m.insert("uid".into(), Value::String(self.uid.clone()));
        }
        Value::Object(m)
    }

    fn from_json(v: Option<&Value>, what: &str) -> Result<Option<ObjectRef>, String> {
        let m = match v {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(format!("invalid {what} claim")),
        };
        let field = |f: &str| match m.get(f) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err(format!("invalid {what} claim")),
        };
        Ok(Some(ObjectRef {
            name: field("name")?,
            uid: field("uid")?,
        }))
    }
}

/// What a bound token is tied to; it stops working when that object is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundObject {
    /// A pod, and the node it runs on when known (the node's uid is empty when the Node
    /// object could not be found; the node is then informational only).
    Pod {
        pod: ObjectRef,
        node: Option<ObjectRef>,
    },
    Secret(ObjectRef),
    Node(ObjectRef),
}

/// Everything that goes into a bound token but the time and its id.
pub(crate) struct BoundSpec<'a> {
    pub namespace: &'a str,
    pub service_account: &'a ObjectRef,
    pub audiences: &'a [String],
    pub expiration_seconds: i64,
    pub bound: Option<&'a BoundObject>,
    /// When not 0, the token is marked to warn (not fail) this long after `now`.
    pub warn_after_seconds: i64,
}

impl BoundSpec<'_> {
    /// The claims, keys in the order Kubernetes' signer writes them (sorted).
    pub fn claims(&self, issuer: &str, now: SystemTime, jti: &str) -> Value {
        let now = unix_seconds(now);
        let mut k8s = Map::new();
        k8s.insert("namespace".into(), json!(self.namespace));
        let (pod, secret, node) = match self.bound {
            Some(BoundObject::Pod { pod, node }) => (Some(pod), None, node.as_ref()),
            Some(BoundObject::Secret(s)) => (None, Some(s), None),
            Some(BoundObject::Node(n)) => (None, None, Some(n)),
            None => (None, None, None),
        };
        if let Some(n) = node {
            k8s.insert("node".into(), n.to_json());
        }
        if let Some(p) = pod {
            k8s.insert("pod".into(), p.to_json());
        }
        if let Some(s) = secret {
            k8s.insert("secret".into(), s.to_json());
        }
        k8s.insert("serviceaccount".into(), self.service_account.to_json());
        if self.warn_after_seconds != 0 {
            k8s.insert("warnafter".into(), json!(now + self.warn_after_seconds));
        }
        let mut claims = Map::new();
        claims.insert("aud".into(), json!(self.audiences));
        claims.insert("exp".into(), json!(now + self.expiration_seconds));
        claims.insert("iat".into(), json!(now));
        claims.insert("iss".into(), json!(issuer));
        claims.insert("jti".into(), json!(jti));
        claims.insert(PRIVATE_CLAIM.into(), Value::Object(k8s));
        claims.insert("nbf".into(), json!(now));
        claims.insert(
            "sub".into(),
            json!(super::username(self.namespace, &self.service_account.name)),
        );
        Value::Object(claims)
    }
}

/// The `kubernetes.io` claim, type-checked.
#[derive(Debug, Default)]
struct PrivateClaims {
    namespace: String,
    service_account: ObjectRef,
    pod: Option<ObjectRef>,
    secret: Option<ObjectRef>,
    node: Option<ObjectRef>,
}

impl PrivateClaims {
    fn parse(claims: &Map<String, Value>) -> Result<Self, String> {
        let m = match claims.get(PRIVATE_CLAIM) {
            None | Some(Value::Null) => return Ok(PrivateClaims::default()),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(format!("invalid {PRIVATE_CLAIM} claim")),
        };
        let namespace = match m.get("namespace") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(_) => return Err("invalid namespace claim".into()),
        };
        Ok(PrivateClaims {
            namespace,
            service_account: ObjectRef::from_json(m.get("serviceaccount"), "serviceaccount")?
                .unwrap_or_default(),
            pod: ObjectRef::from_json(m.get("pod"), "pod")?,
            secret: ObjectRef::from_json(m.get("secret"), "secret")?,
            node: ObjectRef::from_json(m.get("node"), "node")?,
        })
    }
}

/// Check a bound token whose signature, issuer and audience are good: its validity window,
/// then that its service account and bound objects still exist with the claimed uids and
/// were not deleted (more than [`LEEWAY`] ago).
pub fn validate(
    objects: &dyn Objects,
    public: &StandardClaims,
    claims: &Map<String, Value>,
    now: SystemTime,
) -> Result<ServiceAccountInfo, String> {
    check_times(public, now)?;
    let private = PrivateClaims::parse(claims)?;
    let ns = private.namespace.as_str();
    let sa_ref = &private.service_account;
    let deleted = |obj: &Value| deletion_time(obj).is_some_and(|t| t + LEEWAY < now);

    let sa = objects
        .get("", "serviceaccounts", ns, &sa_ref.name)
        .ok_or_else(|| format!("serviceaccounts {:?} not found", sa_ref.name))?;
    let sa_uid = capstan_api::meta::uid(&sa);
    if sa_uid != sa_ref.uid {
        return Err(format!(
            "service account UID ({sa_uid}) does not match claim ({})",
            sa_ref.uid
        ));
    }
    if deleted(&sa) {
        return Err(format!(
            "service account {ns}/{} has been deleted",
            sa_ref.name
        ));
    }

    if let Some(secret_ref) = &private.secret {
        let secret = objects
            .get("", "secrets", ns, &secret_ref.name)
            .ok_or("service account token has been invalidated")?;
        let uid = capstan_api::meta::uid(&secret);
        if uid != secret_ref.uid {
            return Err(format!(
                "secret UID ({uid}) does not match service account secret ref claim ({})",
                secret_ref.uid
            ));
        }
        if deleted(&secret) {
            return Err("service account token has been invalidated".into());
        }
    }

    let mut info = ServiceAccountInfo {
        namespace: ns.to_string(),
        name: sa_ref.name.clone(),
        uid: sa_ref.uid.clone(),
        credential_id: if public.jti.is_empty() {
            String::new()
        } else {
            format!("JTI={}", public.jti)
        },
        ..Default::default()
    };

    if let Some(pod_ref) = &private.pod {
        let pod = objects
            .get("", "pods", ns, &pod_ref.name)
            .ok_or("service account token has been invalidated")?;
        let uid = capstan_api::meta::uid(&pod);
        if uid != pod_ref.uid {
            return Err(format!(
                "pod UID ({uid}) does not match service account pod ref claim ({})",
                pod_ref.uid
            ));
        }
        if deleted(&pod) {
            return Err("service account token has been invalidated".into());
        }
        info.pod_name = pod_ref.name.clone();
        info.pod_uid = pod_ref.uid.clone();
    }

    if let Some(node_ref) = &private.node {
        // For a pod-bound token the node is informational; a node-bound token needs the node.
        if private.pod.is_none() {
            let node = objects
                .get("", "nodes", "", &node_ref.name)
                .ok_or("service account token has been invalidated")?;
            let uid = capstan_api::meta::uid(&node);
            if uid != node_ref.uid {
                return Err(format!(
                    "node UID ({uid}) does not match service account node ref claim ({})",
                    node_ref.uid
                ));
            }
            if deleted(&node) {
                return Err("service account token has been invalidated".into());
            }
        }
        info.node_name = node_ref.name.clone();
        info.node_uid = node_ref.uid.clone();
    }
    Ok(info)
}

/// `nbf`, `exp` and `iat` against `now`, each with [`LEEWAY`] (go-jose's order and wording).
fn check_times(public: &StandardClaims, now: SystemTime) -> Result<(), String> {
    if public.nbf.is_some_and(|nbf| now + LEEWAY < unix_time(nbf)) {
        return Err("service account token is not valid yet".into());
    }
    if public.exp.is_some_and(|exp| now > unix_time(exp) + LEEWAY) {
        return Err("service account token has expired".into());
    }
    if public.iat.is_some_and(|iat| now + LEEWAY < unix_time(iat)) {
        return Err("service account token is issued in the future".into());
    }
    Ok(())
}
