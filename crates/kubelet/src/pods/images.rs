//! Images: pulling as imagePullPolicy says, with credentials from imagePullSecrets, events
//! as the kubelet's image manager records them, and a back-off between failed pulls.

use std::time::Instant;

use base64::Engine;
use capstan_cri::v1 as cri;
use capstan_runtime::events::{NORMAL, WARNING};
use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod, Secret};
use parking_lot::Mutex;

use super::backoff::Backoff;
use super::util::{go_duration, grpc_error, now_nanos, pod_uid};
use crate::Kubelet;

/// Why an image is not there (the container's waiting reason) and the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageError {
    pub reason: &'static str,
    pub message: String,
}

pub const ERR_IMAGE_PULL: &str = "ErrImagePull";
pub const IMAGE_PULL_BACKOFF: &str = "ImagePullBackOff";
pub const ERR_IMAGE_NEVER_PULL: &str = "ErrImageNeverPull";
pub const INVALID_IMAGE_NAME: &str = "InvalidImageName";
pub const IMAGE_INSPECT_ERROR: &str = "ImageInspectError";

/// A registry credential from a pull secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credential {
    /// The registry key as written in the secret (`host[:port][/path]`, no scheme).
    pub key: String,
    pub username: String,
    pub password: String,
    pub auth: String,
    pub identity_token: String,
    pub registry_token: String,
}

/// Image pulls of the node: the pull back-off per (pod, image).
pub struct Images {
    backoff: Mutex<Backoff>,
}

impl Default for Images {
    fn default() -> Self {
        Images {
            backoff: Mutex::new(Backoff::standard()),
        }
    }
}

/// The image with `:latest` added when it has neither tag nor digest; Err when the reference
/// is malformed.
pub fn with_default_tag(image: &str) -> Result<String, String> {
    let bad = |why: &str| Err(format!("couldn't parse image name {image:?}: {why}"));
    if image.is_empty() {
        return bad("invalid reference format");
    }
    if image.chars().any(|c| c.is_whitespace()) {
        return bad("invalid reference format");
    }
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let (domain, path) = split_domain(name);
    let (repo, tag) = match path.rsplit_once(':') {
        Some((r, t)) if !t.contains('/') => (r, Some(t)),
        _ => (path.as_str(), None),
    };
    if repo.is_empty() || domain.is_empty() {
        return bad("invalid reference format");
    }
    if repo.chars().any(|c| c.is_ascii_uppercase()) {
        return bad(&format!(
            "invalid reference format: repository name ({repo}) must be lowercase"
        ));
    }
    if !repo
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "._-/".contains(c))
    {
        return bad("invalid reference format");
    }
    if let Some(t) = tag {
        if t.is_empty()
            || !t
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return bad("invalid reference format");
        }
    }
    if digest.is_some() || tag.is_some() {
        return Ok(image.to_string());
    }
    Ok(format!("{image}:latest"))
}

/// The registry host of an image reference and the rest of it (`docker.io` and
/// `library/NAME` for short names).
pub fn split_domain(name: &str) -> (String, String) {
    match name.split_once('/') {
        Some((first, rest))
            if first.contains('.') || first.contains(':') || first == "localhost" =>
        {
            let first = if first == "index.docker.io" {
                "docker.io"
            } else {
                first
            };
            (first.to_string(), rest.to_string())
        }
        Some(_) => ("docker.io".to_string(), name.to_string()),
        None => ("docker.io".to_string(), format!("library/{name}")),
    }
}

fn normalize_key(key: &str) -> (String, String) {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let (host, path) = k.split_once('/').unwrap_or((k, ""));
    let host = match host {
        "index.docker.io" | "registry-1.docker.io" => "docker.io",
        h => h,
    };
    let path = if host == "docker.io" && path.starts_with("v1") {
        ""
    } else {
        path
    };
    (host.to_lowercase(), path.trim_end_matches('/').to_string())
}

fn glob_host(pattern: &str, host: &str) -> bool {
    let p: Vec<&str> = pattern.split('.').collect();
    let h: Vec<&str> = host.split('.').collect();
    p.len() == h.len()
        && p.iter().zip(&h).all(|(p, h)| {
            if p.contains('*') {
                let (pre, post) = p.split_once('*').unwrap_or((p, ""));
                h.starts_with(pre) && h.ends_with(post) && h.len() >= pre.len() + post.len()
            } else {
                p == h
            }
        })
}

/// The credentials of a pull secret (`kubernetes.io/dockerconfigjson` or
/// `kubernetes.io/dockercfg`).
pub fn secret_credentials(secret: &Secret) -> Vec<Credential> {
    let data = secret.data.as_ref();
    let json = data
        .and_then(|d| d.get(".dockerconfigjson"))
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b.0).ok())
        .and_then(|v| v.get("auths").cloned())
        .or_else(|| {
            data.and_then(|d| d.get(".dockercfg"))
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b.0).ok())
        });
    let Some(serde_json::Value::Object(auths)) = json else {
        return Vec::new();
    };
    let s = |v: &serde_json::Value, k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .unwrap_or_default()
            .to_string()
    };
    auths
        .iter()
        .map(|(key, v)| {
            let mut c = Credential {
                key: key.clone(),
                username: s(v, "username"),
                password: s(v, "password"),
                auth: s(v, "auth"),
                identity_token: s(v, "identitytoken"),
                registry_token: s(v, "registrytoken"),
            };
            if c.username.is_empty() && !c.auth.is_empty() {
                if let Ok(raw) = base64::engine::general_purpose::STANDARD.decode(&c.auth) {
                    let text = String::from_utf8_lossy(&raw).into_owned();
                    if let Some((u, p)) = text.split_once(':') {
                        c.username = u.to_string();
                        c.password = p.to_string();
                    }
                }
            }
            c
        })
        .collect()
}

/// The credentials that apply to `image`, most specific first.
pub fn matching_credentials(image: &str, creds: &[Credential]) -> Vec<Credential> {
    let name = image.split('@').next().unwrap_or(image);
    let (domain, path) = split_domain(name);
    let path = match path.rsplit_once(':') {
        Some((p, t)) if !t.contains('/') => p.to_string(),
        _ => path,
    };
    let mut out: Vec<(usize, Credential)> = creds
        .iter()
        .filter_map(|c| {
            let (host, kpath) = normalize_key(&c.key);
            if !glob_host(&host, &domain.to_lowercase()) {
                return None;
            }
            if !(kpath.is_empty() || path == kpath || path.starts_with(&format!("{kpath}/"))) {
                return None;
            }
            Some((host.len() + kpath.len(), c.clone()))
        })
        .collect();
    out.sort_by_key(|(specificity, _)| std::cmp::Reverse(*specificity));
    out.into_iter().map(|(_, c)| c).collect()
}

/// The pull policy, defaulted as the API does when unset.
pub fn pull_policy(c: &Container) -> String {
    if let Some(p) = c.image_pull_policy.as_deref().filter(|p| !p.is_empty()) {
        return p.to_string();
    }
    let image = c.image.as_deref().unwrap_or_default();
    let name = image.split('@').next().unwrap_or(image);
    let tagged = name.rsplit_once(':').is_some_and(|(_, t)| !t.contains('/'));
    if image.contains('@') || (tagged && !name.ends_with(":latest")) {
        "IfNotPresent".into()
    } else {
        "Always".into()
    }
}

impl Images {
    /// Forget the back-off entries of a pod that is gone.
    pub fn forget_pod(&self, uid: &str) {
        self.backoff.lock().forget_prefix(&format!("{uid}_"));
    }

    /// How long until pulling `image` for pod `uid` may be tried again.
    pub fn retry_in(&self, uid: &str, image: &str) -> Option<std::time::Duration> {
        self.backoff
            .lock()
            .remaining_since_update(&format!("{uid}_{image}"), now_nanos())
    }

    /// Make sure the container's image is on the node; Ok(image ID). `secrets` are the pod's
    /// pull secrets, fetched when a pull is needed.
    pub async fn ensure(
        &self,
        k: &Kubelet,
        pod: &Pod,
        c: &Container,
        cref: &ObjectReference,
        secrets: &mut Option<Vec<Secret>>,
        sandbox: Option<&cri::PodSandboxConfig>,
    ) -> Result<String, ImageError> {
        let event = |type_: &'static str, reason: &str, msg: String| {
            k.recorder.record(cref.clone(), type_, reason, msg);
        };
        let requested = c.image.clone().unwrap_or_default();
        let image = match with_default_tag(&requested) {
            Ok(i) => i,
            Err(e) => {
                let msg = format!("Failed to apply default image tag {requested:?}: {e}");
                event(WARNING, "InspectFailed", msg.clone());
                return Err(ImageError {
                    reason: INVALID_IMAGE_NAME,
                    message: msg,
                });
            }
        };
        let spec = cri::ImageSpec {
            image: image.clone(),
            user_specified_image: requested.clone(),
            annotations: pod
                .metadata
                .annotations
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect(),
            ..Default::default()
        };
        let present = match k
            .runtime
            .image_status(cri::ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            })
            .await
        {
            Ok(r) => r.image.map(|i| i.id).filter(|id| !id.is_empty()),
            Err(e) => {
                let msg = format!("Failed to inspect image {requested:?}: {}", grpc_error(&e));
                event(WARNING, "InspectFailed", msg.clone());
                return Err(ImageError {
                    reason: IMAGE_INSPECT_ERROR,
                    message: msg,
                });
            }
        };
        let policy = pull_policy(c);
        let must_pull = match policy.as_str() {
            "Always" => true,
            "Never" => false,
            _ => present.is_none(),
        };
        if !must_pull {
            if let Some(id) = present {
                event(
                    NORMAL,
                    "Pulled",
                    format!("Container image {requested:?} already present on machine"),
                );
                return Ok(id);
            }
            let msg =
                format!("Container image {requested:?} is not present with pull policy of Never");
            event(WARNING, "ErrImageNeverPull", msg.clone());
            return Err(ImageError {
                reason: ERR_IMAGE_NEVER_PULL,
                message: msg,
            });
        }
        let key = format!("{}_{}", pod_uid(pod), requested);
        if self
            .backoff
            .lock()
            .in_backoff_since_update(&key, now_nanos())
        {
            let msg = format!("Back-off pulling image {requested:?}");
            event(NORMAL, "BackOff", msg.clone());
            return Err(ImageError {
                reason: IMAGE_PULL_BACKOFF,
                message: msg,
            });
        }
        event(NORMAL, "Pulling", format!("Pulling image {requested:?}"));
        let start = Instant::now();

        if secrets.is_none() {
            *secrets = Some(pull_secrets(k, pod).await);
        }
        let creds: Vec<Credential> = secrets
            .iter()
            .flatten()
            .flat_map(secret_credentials)
            .collect();
        let candidates = matching_credentials(&image, &creds);
        let mut attempts: Vec<Option<cri::AuthConfig>> = candidates
            .iter()
            .map(|c| {
                Some(cri::AuthConfig {
                    username: c.username.clone(),
                    password: c.password.clone(),
                    auth: c.auth.clone(),
                    server_address: normalize_key(&c.key).0,
                    identity_token: c.identity_token.clone(),
                    registry_token: c.registry_token.clone(),
                })
            })
            .collect();
        if attempts.is_empty() {
            attempts.push(None);
        }
        let mut last_err = None;
        let mut pulled = None;
        for auth in attempts {
            let pulled_at = Instant::now();
            match k
                .runtime
                .pull_image(cri::PullImageRequest {
                    image: Some(spec.clone()),
                    auth,
                    sandbox_config: sandbox.cloned(),
                })
                .await
            {
                Ok(r) => {
                    pulled = Some((r.image_ref, pulled_at.elapsed()));
                    break;
                }
                Err(e) => last_err = Some(e),
            }
        }
        let Some((image_ref, pull_time)) = pulled else {
            let err = last_err
                .map(|e| grpc_error(&e))
                .unwrap_or_else(|| "unknown error".into());
            event(
                WARNING,
                "Failed",
                format!("Failed to pull image {requested:?}: {err}"),
            );
            self.backoff.lock().next(&key, now_nanos(), now_nanos());
            return Err(ImageError {
                reason: ERR_IMAGE_PULL,
                message: err,
            });
        };
        let total = start.elapsed();
        let size = k
            .runtime
            .image_status(cri::ImageStatusRequest {
                image: Some(spec.clone()),
                verbose: false,
            })
            .await
            .ok()
            .and_then(|r| r.image)
            .map(|i| i.size)
            .unwrap_or(0);
        let ms = |d: std::time::Duration| std::time::Duration::from_millis(d.as_millis() as u64);
        event(
            NORMAL,
            "Pulled",
            format!(
                "Successfully pulled image {requested:?} in {} ({} including waiting). Image size: {size} bytes.",
                go_duration(ms(pull_time)),
                go_duration(ms(total)),
            ),
        );
        self.backoff.lock().gc(now_nanos());
        Ok(image_ref)
    }
}

/// The pod's image pull secrets that exist; a warning event names those that do not.
pub async fn pull_secrets(k: &Kubelet, pod: &Pod) -> Vec<Secret> {
    let names: Vec<String> = pod
        .spec
        .as_ref()
        .and_then(|s| s.image_pull_secrets.as_ref())
        .into_iter()
        .flatten()
        .map(|r| r.name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    if names.is_empty() {
        return Vec::new();
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let api: kube::Api<Secret> = kube::Api::namespaced(k.client.clone(), &ns);
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for n in names {
        match api.get_opt(&n).await {
            Ok(Some(s)) => found.push(s),
            _ => missing.push(format!("{ns}/{n}")),
        }
    }
    if !missing.is_empty() {
        k.recorder.warning(
            pod,
            "FailedToRetrieveImagePullSecret",
            format!(
                "Unable to retrieve some image pull secrets ({}); attempting to pull the image may not succeed.",
                missing.join(", ")
            ),
        );
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;

    #[test]
    fn default_tags_and_bad_names() {
        assert_eq!(with_default_tag("busybox").unwrap(), "busybox:latest");
        assert_eq!(with_default_tag("busybox:1.35").unwrap(), "busybox:1.35");
        assert_eq!(
            with_default_tag("127.0.0.1:5000/busybox").unwrap(),
            "127.0.0.1:5000/busybox:latest"
        );
        assert_eq!(
            with_default_tag("127.0.0.1:5000/busybox:1.35").unwrap(),
            "127.0.0.1:5000/busybox:1.35"
        );
        assert_eq!(
            with_default_tag("busybox@sha256:abc").unwrap(),
            "busybox@sha256:abc"
        );
        assert!(with_default_tag("BusyBox").is_err());
        assert!(with_default_tag("").is_err());
        assert!(with_default_tag("a b").is_err());
    }

    #[test]
    fn pull_policy_defaults() {
        let c = |image: &str| Container {
            image: Some(image.into()),
            ..Default::default()
        };
        assert_eq!(pull_policy(&c("busybox")), "Always");
        assert_eq!(pull_policy(&c("busybox:latest")), "Always");
        assert_eq!(pull_policy(&c("busybox:1.35")), "IfNotPresent");
        assert_eq!(pull_policy(&c("127.0.0.1:5000/busybox")), "Always");
        assert_eq!(pull_policy(&c("127.0.0.1:5000/busybox:1")), "IfNotPresent");
    }

    #[test]
    fn credentials_from_secrets_match_registries() {
        let cfg = serde_json::json!({"auths": {
            "https://index.docker.io/v1/": {"auth": base64::engine::general_purpose::STANDARD.encode("hub:pw")},
            "127.0.0.1:5000": {"username": "u", "password": "p"},
            "127.0.0.1:5000/team": {"username": "team", "password": "tp"},
            "*.example.com": {"username": "w", "password": "x"},
        }});
        let secret = Secret {
            type_: Some("kubernetes.io/dockerconfigjson".into()),
            data: Some(
                [(
                    ".dockerconfigjson".to_string(),
                    ByteString(serde_json::to_vec(&cfg).unwrap()),
                )]
                .into(),
            ),
            ..Default::default()
        };
        let creds = secret_credentials(&secret);
        assert_eq!(creds.len(), 4);
        let hub = matching_credentials("busybox:1.35", &creds);
        assert_eq!(hub.len(), 1);
        assert_eq!(
            (hub[0].username.as_str(), hub[0].password.as_str()),
            ("hub", "pw")
        );
        let team = matching_credentials("127.0.0.1:5000/team/app:1", &creds);
        assert_eq!(team.len(), 2);
        assert_eq!(team[0].username, "team");
        let local = matching_credentials("127.0.0.1:5000/other:1", &creds);
        assert_eq!(local.len(), 1);
        assert_eq!(local[0].username, "u");
        assert_eq!(
            matching_credentials("reg.example.com/x", &creds)[0].username,
            "w"
        );
        assert!(matching_credentials("quay.io/x", &creds).is_empty());
    }
}
