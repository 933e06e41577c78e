//! The `admission.k8s.io` AdmissionReview a webhook receives, and what its answer may say
//! (Kubernetes' `webhook/request/admissionreview.go`).

use capstan_api::catalogue::ResourceInfo;
use capstan_api::field::go_quote;
use serde_json::{json, Map, Value};

use crate::admission::Operation;
use crate::auth::User;

/// The AdmissionReview versions capstan speaks, in order of preference.
const VERSIONS: &[&str] = &["v1", "v1beta1"];

/// What the review is about.
pub struct Subject<'a> {
    pub user: &'a User,
    pub operation: Operation,
    /// The resource the request addressed (capstan admits objects in their storage version,
    /// so this is the storage version's).
    pub request_resource: &'static ResourceInfo,
    /// The resource the webhook matched, in whose version the objects are sent.
    pub resource: &'static ResourceInfo,
    pub subresource: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
    pub dry_run: bool,
}

/// A review ready to send.
pub struct Review {
    pub uid: String,
    /// `v1` or `v1beta1`.
    pub version: &'static str,
    pub body: Vec<u8>,
}

/// Build the review for a webhook accepting `versions`; `Err` when it accepts none capstan
/// speaks.
pub fn build(versions: &[String], s: &Subject<'_>) -> Result<Review, String> {
    let version = versions
        .iter()
        .find_map(|v| VERSIONS.iter().find(|k| *k == v))
        .copied()
        .ok_or("webhook does not accept known AdmissionReview versions (v1, v1beta1)")?;
    let uid = uuid::Uuid::new_v4().to_string();
    let mut request = Map::new();
    request.insert("uid".into(), json!(uid));
    request.insert("kind".into(), gvk(s.resource));
    request.insert("resource".into(), gvr(s.resource));
    if !s.subresource.is_empty() {
        request.insert("subResource".into(), json!(s.subresource));
    }
    request.insert("requestKind".into(), gvk(s.request_resource));
    request.insert("requestResource".into(), gvr(s.request_resource));
    if !s.subresource.is_empty() {
        request.insert("requestSubResource".into(), json!(s.subresource));
    }
    if !s.name.is_empty() {
        request.insert("name".into(), json!(s.name));
    }
    if !s.namespace.is_empty() {
        request.insert("namespace".into(), json!(s.namespace));
    }
    request.insert("operation".into(), json!(s.operation.as_str()));
    request.insert("userInfo".into(), user_info(s.user));
    request.insert("object".into(), typed(s.object, s.resource));
    request.insert("oldObject".into(), typed(s.old, s.resource));
    request.insert("dryRun".into(), json!(s.dry_run));
    request.insert("options".into(), options(s.operation, s.dry_run));
    let review = json!({
        "kind": "AdmissionReview",
        "apiVersion": format!("admission.k8s.io/{version}"),
        "request": request,
    });
    Ok(Review {
        uid,
        version,
        body: serde_json::to_vec(&review).map_err(|e| e.to_string())?,
    })
}

fn gvk(info: &ResourceInfo) -> Value {
    json!({"group": info.group, "version": info.version, "kind": info.kind})
}

fn gvr(info: &ResourceInfo) -> Value {
    json!({"group": info.group, "version": info.version, "resource": info.plural})
}

fn user_info(user: &User) -> Value {
    let mut u = Map::new();
    if !user.name.is_empty() {
        u.insert("username".into(), json!(user.name));
    }
    if !user.uid.is_empty() {
        u.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        u.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        u.insert("extra".into(), json!(user.extra));
    }
    Value::Object(u)
}

/// The object with its apiVersion and kind (`null` when there is none).
fn typed(obj: Option<&Value>, info: &ResourceInfo) -> Value {
    let Some(obj) = obj else {
        return Value::Null;
    };
    let mut obj = obj.clone();
    if let Some(m) = obj.as_object_mut() {
        m.insert("apiVersion".into(), json!(info.api_version()));
        m.insert("kind".into(), json!(info.kind));
    }
    obj
}

/// The operation's options object, as far as admission knows them.
fn options(op: Operation, dry_run: bool) -> Value {
    let kind = match op {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => return Value::Null,
    };
    let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if dry_run {
        o["dryRun"] = json!(["All"]);
    }
    o
}

/// What a webhook answered.
#[derive(Debug, Default)]
pub struct Verdict {
    pub allowed: bool,
    /// A JSON patch (mutating webhooks only).
    pub patch: Option<Value>,
    /// `response.status`.
    pub status: Option<Value>,
    pub warnings: Vec<String>,
}

/// Check the webhook's answer to `review` (Kubernetes' `VerifyAdmissionResponse`). The error
/// is the reason calling the webhook failed, worded as Kubernetes words it.
pub fn verify(review: &Review, mutating: bool, body: &[u8]) -> Result<Verdict, String> {
    use base64::Engine as _;
    let answer: Value =
        serde_json::from_slice(body).map_err(|e| format!("failed to call webhook: {e}"))?;
    let (mut verdict, patch) = check_response(review, mutating, &answer)
        .map_err(|e| format!("received invalid webhook response: {e}"))?;
    if let Some(patch) = patch {
        let raw = base64::engine::general_purpose::STANDARD
            .decode(patch.as_bytes())
            .map_err(|e| {
                format!("failed to call webhook: illegal base64 data in response.patch: {e}")
            })?;
        let parsed: Value = serde_json::from_slice(&raw)
            .map_err(|e| format!("received undecodable patch in webhook response: {e}"))?;
        verdict.patch = Some(parsed);
    }
    Ok(verdict)
}

/// The verdict and the (base64) patch of a well-formed answer.
fn check_response(
    review: &Review,
    mutating: bool,
    answer: &Value,
) -> Result<(Verdict, Option<String>), String> {
    let response = answer
        .get("response")
        .filter(|r| r.is_object())
        .ok_or("webhook response was absent")?;
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    if review.version == "v1" {
        let uid = text(response, "uid");
        if uid != review.uid {
            return Err(format!(
                "expected response.uid={}, got {}",
                go_quote(&review.uid),
                go_quote(&uid)
            ));
        }
        let api_version = text(answer, "apiVersion");
        let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
        let kind = text(answer, "kind");
        if (group, version, kind.as_str()) != ("admission.k8s.io", "v1", "AdmissionReview") {
            return Err(format!(
                "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {group}/{version}, Kind={kind}"
            ));
        }
    }
    let patch = text(response, "patch");
    let patch_type = response.get("patchType").filter(|t| !t.is_null());
    let verdict = Verdict {
        allowed: response.get("allowed").and_then(Value::as_bool) == Some(true),
        status: response.get("status").filter(|s| !s.is_null()).cloned(),
        warnings: response
            .get("warnings")
            .and_then(Value::as_array)
            .map(|w| {
                w.iter()
                    .filter_map(|s| s.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default(),
        patch: None,
    };
    if !mutating {
        if !patch.is_empty() {
            return Err("validating webhook may not return response.patch".into());
        }
        if patch_type.is_some() {
            return Err("validating webhook may not return response.patchType".into());
        }
        return Ok((verdict, None));
    }
    if review.version == "v1" {
        match (patch.is_empty(), patch_type) {
            (false, None) => {
                return Err("webhook returned response.patch but not response.patchType".into())
            }
            (true, Some(_)) => {
                return Err("webhook returned response.patchType but not response.patch".into())
            }
            _ => {}
        }
    }
    if patch.is_empty() {
        return Ok((verdict, None));
    }
    let patch_type = patch_type.and_then(Value::as_str).unwrap_or("JSONPatch");
    if patch_type != "JSONPatch" {
        return Err(format!("unsupported patch type {}", go_quote(patch_type)));
    }
    Ok((verdict, Some(patch)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    fn info(plural: &str) -> &'static ResourceInfo {
        capstan_api::catalogue::RESOURCES
            .iter()
            .find(|r| r.group.is_empty() && r.plural == plural)
            .expect("in the catalogue")
    }

    fn review() -> (Review, Value) {
        let user = User {
            name: "alice".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        };
        let obj = json!({"metadata": {"name": "cm", "namespace": "ns"}, "data": {"a": "b"}});
        let s = Subject {
            user: &user,
            operation: Operation::Create,
            request_resource: info("configmaps"),
            resource: info("configmaps"),
            subresource: "",
            namespace: "ns",
            name: "cm",
            object: Some(&obj),
            old: None,
            dry_run: true,
        };
        let r = build(&["v2".into(), "v1".into()], &s).unwrap();
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        (r, body)
    }

    #[test]
    fn reviews_carry_the_request() {
        let (r, body) = review();
        assert_eq!(r.version, "v1");
        let req = &body["request"];
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(req["uid"], json!(r.uid));
        assert_eq!(
            req["kind"],
            json!({"group": "", "version": "v1", "kind": "ConfigMap"})
        );
        assert_eq!(
            req["resource"],
            json!({"group": "", "version": "v1", "resource": "configmaps"})
        );
        assert_eq!(
            req["userInfo"],
            json!({"username": "alice", "groups": ["dev"]})
        );
        assert_eq!(req["object"]["kind"], "ConfigMap");
        assert_eq!(req["oldObject"], Value::Null);
        assert_eq!(req["dryRun"], true);
        assert_eq!(req["options"]["dryRun"], json!(["All"]));
        assert!(req.get("subResource").is_none());
        let none = build(&["v2".into()], &Subject { ..subject_like() });
        assert!(none.is_err());
    }

    fn subject_like() -> Subject<'static> {
        static USER: std::sync::OnceLock<User> = std::sync::OnceLock::new();
        Subject {
            user: USER.get_or_init(User::default),
            operation: Operation::Delete,
            request_resource: info("pods"),
            resource: info("pods"),
            subresource: "",
            namespace: "",
            name: "",
            object: None,
            old: None,
            dry_run: false,
        }
    }

    #[test]
    fn answers_are_checked() {
        let (r, _) = review();
        let answer = |response: Value| {
            serde_json::to_vec(&json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}))
                .unwrap()
        };
        let ok = verify(&r, false, &answer(json!({"uid": r.uid, "allowed": true}))).unwrap();
        assert!(ok.allowed);
        let err = verify(&r, false, &answer(json!({"uid": "other", "allowed": true}))).unwrap_err();
        assert_eq!(
            err,
            format!(
                "received invalid webhook response: expected response.uid=\"{}\", got \"other\"",
                r.uid
            )
        );
        let err = verify(&r, false, b"{}").unwrap_err();
        assert_eq!(
            err,
            "received invalid webhook response: webhook response was absent"
        );
        let patch = base64::engine::general_purpose::STANDARD
            .encode(br#"[{"op":"add","path":"/metadata/labels","value":{"a":"b"}}]"#);
        let err = verify(
            &r,
            false,
            &answer(json!({"uid": r.uid, "allowed": true, "patch": patch})),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "received invalid webhook response: validating webhook may not return response.patch"
        );
        let err = verify(
            &r,
            true,
            &answer(json!({"uid": r.uid, "allowed": true, "patch": patch})),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "received invalid webhook response: webhook returned response.patch but not response.patchType"
        );
        let v = verify(
            &r,
            true,
            &answer(json!({"uid": r.uid, "allowed": true, "patch": patch, "patchType": "JSONPatch", "warnings": ["careful"]})),
        )
        .unwrap();
        assert_eq!(v.patch.unwrap()[0]["op"], "add");
        assert_eq!(v.warnings, ["careful"]);
    }
}
