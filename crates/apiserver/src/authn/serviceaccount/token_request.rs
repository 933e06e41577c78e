//! `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token`, as Kubernetes'
//! `pkg/registry/core/serviceaccount/storage/token.go`: validate and default a `TokenRequest`,
//! resolve the object the token is bound to, and answer with a signed bound token.

use std::time::{Duration, SystemTime};

use serde_json::{json, Map, Value};

use super::claims::{BoundObject, BoundSpec, ObjectRef};
use super::ServiceAccountTokens;
use crate::error::{ApiError, FieldError};
use capstan_api::meta::At as _;

/// Default `spec.expirationSeconds`.
pub const DEFAULT_EXPIRATION_SECONDS: i64 = 3600;
/// The shortest lifetime a token may be requested for.
pub const MIN_EXPIRATION_SECONDS: i64 = 600;
/// The longest lifetime a token may be requested for.
pub const MAX_EXPIRATION_SECONDS: i64 = 1 << 32;
/// kubelet's projected-token lifetime, which is extended (see
/// [`ServiceAccountTokens::with_extend_expiration`]).
pub const WARN_ONLY_EXPIRATION_SECONDS: i64 = 60 * 60 + 7;
/// What such tokens are extended to: a year.
pub const EXTENDED_EXPIRATION_SECONDS: i64 = 24 * 365 * 60 * 60;

const GROUP: &str = "authentication.k8s.io";

impl ServiceAccountTokens {
    /// Answer a `TokenRequest` (`body`) for service account `sa` in `namespace`: the request
    /// with its spec defaulted and `status.token` / `status.expirationTimestamp` filled in.
    /// The caller answers 201 with it.
    pub fn token_request(
        &self,
        namespace: &str,
        sa: &Value,
        body: &Value,
        now: SystemTime,
    ) -> Result<Value, ApiError> {
        let name = capstan_api::meta::name(sa);
        let mut req = match body {
            Value::Object(_) => body.clone(),
            _ => return Err(decode_error("the body is not a JSON object")),
        };
        let meta = |field: &str| {
            req.at(&format!("/metadata/{field}"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        for (field, want, what) in [
            ("name", name, "name"),
            ("namespace", namespace, "namespace"),
        ] {
            let given = meta(field);
            if !given.is_empty() && given != want {
                return Err(invalid(
                    name,
                    vec![FieldError::invalid(
                        format!("metadata.{field}"),
                        &json!(given),
                        &format!("must match the service account {what} if specified"),
                    )],
                ));
            }
        }

        let spec = Spec::parse(req.get("spec"))?;
        let audiences = if spec.audiences.is_empty() {
            self.api_audiences.clone()
        } else {
            spec.audiences.clone()
        };
        let mut expiration = spec.expiration_seconds;
        validate_expiration(expiration)?;

        let bound = match &spec.bound_object_ref {
            Some(r) => Some(self.resolve_bound(namespace, name, r)?),
            None => None,
        };
        if self.max_expiration_seconds > 0 && expiration > self.max_expiration_seconds {
            expiration = self.max_expiration_seconds;
        }
        // kubelet's projected tokens: valid for a year, but flagged as stale after the hour.
        let mut token_expiration = expiration;
        let mut warn_after = 0;
        if self.extend_expiration
            && matches!(bound, Some(BoundObject::Pod { .. }))
            && expiration == WARN_ONLY_EXPIRATION_SECONDS
            && audiences.iter().all(|a| self.api_audiences.contains(a))
        {
            warn_after = expiration;
            token_expiration = EXTENDED_EXPIRATION_SECONDS;
        }

        let sa_ref = ObjectRef::of(sa);
        let (token, _) = self.sign_bound(
            &BoundSpec {
                namespace,
                service_account: &sa_ref,
                audiences: &audiences,
                expiration_seconds: token_expiration,
                bound: bound.as_ref(),
                warn_after_seconds: warn_after,
            },
            now,
        );
        let expires = now + Duration::from_secs(expiration as u64);

        req["apiVersion"] = json!(format!("{GROUP}/v1"));
        req["kind"] = json!("TokenRequest");
        let m = capstan_api::meta::metadata_mut(&mut req);
        m.insert("name".into(), json!(name));
        m.insert("namespace".into(), json!(namespace));
        m.insert(
            "creationTimestamp".into(),
            json!(capstan_api::meta::format_time(now)),
        );
        let mut spec_out = match req.get("spec") {
            Some(Value::Object(m)) => m.clone(),
            _ => Map::new(),
        };
        spec_out.insert("audiences".into(), json!(audiences));
        spec_out.insert("expirationSeconds".into(), json!(expiration));
        req["spec"] = Value::Object(spec_out);
        req["status"] = json!({
            "token": token,
            "expirationTimestamp": capstan_api::meta::format_time(expires),
        });
        Ok(req)
    }

    /// The object a token is to be bound to, which must exist (and have the given uid).
    fn resolve_bound(
        &self,
        namespace: &str,
        sa_name: &str,
        r: &BoundRef,
    ) -> Result<BoundObject, ApiError> {
        let (group, version) = match r.api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", r.api_version.as_str()),
        };
        let get = |resource: &str, ns: &str| {
            self.objects
                .get("", resource, ns, &r.name)
                .ok_or_else(|| not_found(resource, &r.name))
        };
        let (bound, uid) = match (group, r.kind.as_str()) {
            ("", "Pod") => {
                let pod = get("pods", namespace)?;
                let runs_as = pod
                    .at("/spec/serviceAccountName")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                if runs_as != sa_name {
                    return Err(ApiError::bad_request(format!(
                        "cannot bind token for serviceaccount {sa_name:?} to pod running with \
                         different serviceaccount name."
                    )));
                }
                let node_name = pod
                    .at("/spec/nodeName")
                    .and_then(Value::as_str)
                    .unwrap_or("");
                // A missing Node still leaves its name in the token, for information.
                let node = (!node_name.is_empty()).then(|| {
                    self.objects
                        .get("", "nodes", "", node_name)
                        .map(|n| ObjectRef::of(&n))
                        .unwrap_or_else(|| ObjectRef::new(node_name, ""))
                });
                let pod_ref = ObjectRef::of(&pod);
                let uid = pod_ref.uid.clone();
                (BoundObject::Pod { pod: pod_ref, node }, uid)
            }
            ("", "Node") => {
                let node = ObjectRef::of(&get("nodes", "")?);
                let uid = node.uid.clone();
                (BoundObject::Node(node), uid)
            }
            ("", "Secret") => {
                let secret = ObjectRef::of(&get("secrets", namespace)?);
                let uid = secret.uid.clone();
                (BoundObject::Secret(secret), uid)
            }
            _ => {
                return Err(ApiError::bad_request(format!(
                    "cannot bind token to object of type {group}/{version}, Kind={}",
                    r.kind
                )))
            }
        };
        if !r.uid.is_empty() && r.uid != uid {
            let mut e = ApiError::new(
                409,
                "Conflict",
                format!(
                    "Operation cannot be fulfilled on {} {:?}: the UID in the bound object \
                     reference ({}) does not match the UID in record. The object might have \
                     been deleted and then recreated",
                    r.kind, r.name, r.uid
                ),
            );
            e.details = Some(json!({"name": r.name, "kind": r.kind}));
            return Err(e);
        }
        Ok(bound)
    }
}

/// `spec.boundObjectRef`.
#[derive(Debug, Default)]
struct BoundRef {
    kind: String,
    api_version: String,
    name: String,
    uid: String,
}

/// The fields of `spec` the handler reads, type-checked as decoding would.
struct Spec {
    audiences: Vec<String>,
    expiration_seconds: i64,
    bound_object_ref: Option<BoundRef>,
}

impl Spec {
    fn parse(spec: Option<&Value>) -> Result<Spec, ApiError> {
        let spec = match spec {
            None | Some(Value::Null) => return Ok(Spec::default_spec()),
            Some(Value::Object(m)) => m,
            Some(_) => return Err(decode_error("spec must be an object")),
        };
        let audiences = match spec.get("audiences") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .map(|a| a.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| decode_error("spec.audiences must be a list of strings"))?,
            Some(_) => return Err(decode_error("spec.audiences must be a list of strings")),
        };
        let expiration_seconds = match spec.get("expirationSeconds") {
            None | Some(Value::Null) => DEFAULT_EXPIRATION_SECONDS,
            Some(v) => v
                .as_i64()
                .ok_or_else(|| decode_error("spec.expirationSeconds must be an integer"))?,
        };
        let bound_object_ref = match spec.get("boundObjectRef") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => {
                let field = |f: &str| match m.get(f) {
                    None | Some(Value::Null) => Ok(String::new()),
                    Some(Value::String(s)) => Ok(s.clone()),
                    Some(_) => Err(decode_error(&format!(
                        "spec.boundObjectRef.{f} must be a string"
                    ))),
                };
                Some(BoundRef {
                    kind: field("kind")?,
                    api_version: field("apiVersion")?,
                    name: field("name")?,
                    uid: field("uid")?,
                })
            }
            Some(_) => return Err(decode_error("spec.boundObjectRef must be an object")),
        };
        Ok(Spec {
            audiences,
            expiration_seconds,
            bound_object_ref,
        })
    }

    fn default_spec() -> Spec {
        Spec {
            audiences: Vec::new(),
            expiration_seconds: DEFAULT_EXPIRATION_SECONDS,
            bound_object_ref: None,
        }
    }
}

fn validate_expiration(seconds: i64) -> Result<(), ApiError> {
    let field = "spec.expirationSeconds";
    let error = if seconds < MIN_EXPIRATION_SECONDS {
        FieldError::invalid(
            field,
            &json!(seconds),
            "may not specify a duration less than 10 minutes",
        )
    } else if seconds > MAX_EXPIRATION_SECONDS {
        FieldError::invalid(
            field,
            &json!(seconds),
            "may not specify a duration larger than 2^32 seconds",
        )
    } else {
        return Ok(());
    };
    Err(invalid("", vec![error]))
}

/// 422 for a TokenRequest named `name`, worded as Kubernetes' `NewInvalid`.
fn invalid(name: &str, errors: Vec<FieldError>) -> ApiError {
    let summary = if errors.len() == 1 {
        errors[0].message.clone()
    } else {
        let all: Vec<&str> = errors.iter().map(|e| e.message.as_str()).collect();
        format!("[{}]", all.join(", "))
    };
    let causes: Vec<Value> = errors
        .iter()
        .map(|e| {
            let body = e
                .message
                .strip_prefix(&format!("{}: ", e.field))
                .unwrap_or(&e.message);
            json!({"reason": e.reason, "message": body, "field": e.field})
        })
        .collect();
    let mut e = ApiError::new(
        422,
        "Invalid",
        format!("TokenRequest.{GROUP} {name:?} is invalid: {summary}"),
    );
    e.details =
        Some(json!({"name": name, "group": GROUP, "kind": "TokenRequest", "causes": causes}));
    e
}

/// 404 for a missing object of `resource`.
fn not_found(resource: &str, name: &str) -> ApiError {
    let mut e = ApiError::new(404, "NotFound", format!("{resource} {name:?} not found"));
    e.details = Some(json!({"name": name, "kind": resource}));
    e
}

/// 400 for a body that does not decode as a TokenRequest.
fn decode_error(why: &str) -> ApiError {
    ApiError::bad_request(format!(
        "TokenRequest in version \"v1\" cannot be handled as a TokenRequest: {why}"
    ))
}
