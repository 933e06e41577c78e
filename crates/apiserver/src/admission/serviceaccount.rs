//! ServiceAccount, as Kubernetes' `plugin/pkg/admission/serviceaccount`: on pod create, pods
//! get the `default` service account when they name none, the account must exist, its token
//! is projected into every container and init container (unless automounting is off), and
//! its image pull secrets are copied when the pod has none. Mirror pods may reference neither
//! accounts nor secrets. Ephemeral containers never get the token mount (they can only be
//! added later, through the `ephemeralcontainers` subresource).

use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use serde_json::{json, Map, Value};

use super::builtin::{forbidden, is_core, is_mirror_pod, items, pod_secret_names, str_at};
use super::{Attributes, Operation, Plugin};
use crate::error::{ApiError, ApiResult};
use crate::objects::Objects;
use capstan_api::meta::At as _;

/// The account pods without one run as.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "default";
/// Where the token volume is mounted.
pub const TOKEN_MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// The prefix of the token volume's name.
pub const TOKEN_VOLUME_PREFIX: &str = "kube-api-access-";
/// Token lifetime requested by the projection (Kubernetes' `WarnOnlyBoundTokenExpirationSeconds`).
pub const TOKEN_EXPIRATION_SECONDS: i64 = 3607;
const ENFORCE_MOUNTABLE_SECRETS: &str = "kubernetes.io/enforce-mountable-secrets";
/// The alphabet of Kubernetes' `SimpleNameGenerator` (no vowels, no confusable digits).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// The ServiceAccount admission plugin.
pub struct ServiceAccount {
    /// Cache lookups of the `default` account before giving up: the service account
    /// controller creates it shortly after its namespace, as in Kubernetes (10 tries).
    pub default_account_attempts: u32,
}

impl Default for ServiceAccount {
    fn default() -> Self {
        ServiceAccount {
            default_account_attempts: 10,
        }
    }
}

/// Pod creates and ephemeral container updates (`shouldIgnore`).
fn applies(a: &Attributes<'_>) -> bool {
    is_core(a, "pods") && (a.subresource.is_empty() || a.subresource == "ephemeralcontainers")
}

#[async_trait]
impl Plugin for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(pod) = obj else { return Ok(()) };
        if !applies(a) || a.operation != Operation::Create {
            return Ok(());
        }
        if is_mirror_pod(pod) {
            return self.check(a, pod).await;
        }
        if str_at(pod, "/spec/serviceAccountName").is_empty() {
            spec_mut(pod).insert(
                "serviceAccountName".into(),
                Value::String(DEFAULT_SERVICE_ACCOUNT.into()),
            );
        }
        let name = str_at(pod, "/spec/serviceAccountName").to_string();
        let account = self.lookup(a, &name, pod).await?;
        if should_automount(&account, pod) {
            mount_token(pod);
        }
        if items(pod, "/spec/imagePullSecrets").is_empty() {
            let pulls: Vec<Value> = items(&account, "/imagePullSecrets")
                .iter()
                .map(|r| json!({"name": str_at(r, "/name")}))
                .collect();
            if !pulls.is_empty() {
                spec_mut(pod).insert("imagePullSecrets".into(), Value::Array(pulls));
            }
        }
        // Kubernetes' Admit ends with its Validate; the account is the one just looked up.
        check_secrets(a, pod, &account)
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(pod) = obj else { return Ok(()) };
        if !applies(a) {
            return Ok(());
        }
        if a.operation == Operation::Update && a.subresource == "ephemeralcontainers" {
            return self.check_ephemeral(a, pod).await;
        }
        if a.operation != Operation::Create {
            return Ok(());
        }
        self.check(a, pod).await
    }
}

impl ServiceAccount {
    /// Kubernetes' `Validate` for creates.
    async fn check(&self, a: &Attributes<'_>, pod: &Value) -> ApiResult<()> {
        if is_mirror_pod(pod) {
            return check_mirror_pod(a, pod);
        }
        let name = str_at(pod, "/spec/serviceAccountName");
        if name.is_empty() {
            return Err(forbidden(
                a,
                Some(pod),
                format!(
                    "no service account specified for pod {}/{}",
                    a.namespace,
                    capstan_api::meta::name(pod)
                ),
            ));
        }
        let account = self.lookup(a, name, pod).await?;
        check_secrets(a, pod, &account)
    }

    async fn check_ephemeral(&self, a: &Attributes<'_>, pod: &Value) -> ApiResult<()> {
        let name = str_at(pod, "/spec/serviceAccountName");
        if name.is_empty() {
            return Err(forbidden(
                a,
                Some(pod),
                format!(
                    "no service account specified for pod {}/{}",
                    a.namespace,
                    capstan_api::meta::name(pod)
                ),
            ));
        }
        let account = self.lookup(a, name, pod).await?;
        if !enforces_mountable_secrets(&account) {
            return Ok(());
        }
        let allowed = mountable_secrets(&account);
        for c in items(pod, "/spec/ephemeralContainers") {
            if let Some(e) =
                container_secret_violation(c, "ephemeral container", &allowed, &account)
            {
                return Err(forbidden(a, Some(pod), e));
            }
        }
        Ok(())
    }

    /// The account from the cache; the `default` one is retried for a while.
    async fn lookup(&self, a: &Attributes<'_>, name: &str, pod: &Value) -> ApiResult<Value> {
        let attempts = if name == DEFAULT_SERVICE_ACCOUNT {
            self.default_account_attempts.max(1)
        } else {
            1
        };
        for i in 0..attempts {
            if i > 0 {
                let wait = rand::rng().random_range(100..200);
                tokio::time::sleep(Duration::from_millis(wait)).await;
            }
            if let Some(sa) = get_account(a.objects, a.namespace, name) {
                return Ok(sa);
            }
        }
        Err(not_found(a, name, pod))
    }
}

/// The pod's secrets against those its account allows, when the account limits them.
fn check_secrets(a: &Attributes<'_>, pod: &Value, account: &Value) -> ApiResult<()> {
    if enforces_mountable_secrets(account) {
        limit_secret_references(account, pod).map_err(|e| forbidden(a, Some(pod), e))?;
    }
    Ok(())
}

fn get_account(objects: &dyn Objects, ns: &str, name: &str) -> Option<Value> {
    objects.get("", "serviceaccounts", ns, name)
}

fn not_found(a: &Attributes<'_>, name: &str, pod: &Value) -> ApiError {
    forbidden(
        a,
        Some(pod),
        format!(
            "error looking up service account {}/{name}: serviceaccount \"{name}\" not found",
            a.namespace
        ),
    )
}

fn spec_mut(pod: &mut Value) -> &mut Map<String, Value> {
    let root = pod.as_object_mut().expect("objects are JSON objects");
    let spec = root
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    if !spec.is_object() {
        *spec = Value::Object(Map::new());
    }
    spec.as_object_mut().expect("object")
}

fn check_mirror_pod(a: &Attributes<'_>, pod: &Value) -> ApiResult<()> {
    if !str_at(pod, "/spec/serviceAccountName").is_empty() {
        return Err(forbidden(
            a,
            Some(pod),
            "a mirror pod may not reference service accounts",
        ));
    }
    if !pod_secret_names(pod).is_empty() {
        return Err(forbidden(
            a,
            Some(pod),
            "a mirror pod may not reference secrets",
        ));
    }
    for v in items(pod, "/spec/volumes") {
        if items(v, "/projected/sources")
            .iter()
            .any(|s| s.get("serviceAccountToken").is_some())
        {
            return Err(forbidden(
                a,
                Some(pod),
                "a mirror pod may not use ServiceAccountToken volume projections",
            ));
        }
    }
    Ok(())
}

/// The pod's choice wins, then the account's; the default is to mount.
fn should_automount(account: &Value, pod: &Value) -> bool {
    pod.at("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| {
            account
                .get("automountServiceAccountToken")
                .and_then(Value::as_bool)
        })
        .unwrap_or(true)
}

/// A volume name like Kubernetes' `SimpleNameGenerator`: the prefix and 5 random characters.
fn generate_name(prefix: &str) -> String {
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| NAME_ALPHABET[rng.random_range(0..NAME_ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// The projected volume holding the account token, the cluster CA and the namespace.
pub fn token_volume(name: &str) -> Value {
    json!({
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION_SECONDS, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
            "defaultMode": 420,
        },
    })
}

/// Kubernetes' `mountServiceAccountToken`: reuse an existing `kube-api-access-` volume or
/// name a new one; mount it in every init and regular container that has nothing at the
/// token path; add the volume if some container mounts it.
fn mount_token(pod: &mut Value) {
    let existing = items(pod, "/spec/volumes")
        .iter()
        .map(|v| str_at(v, "/name"))
        .find(|n| n.starts_with(TOKEN_VOLUME_PREFIX))
        .map(str::to_string);
    let has_volume = existing.is_some();
    let volume = existing.unwrap_or_else(|| generate_name(TOKEN_VOLUME_PREFIX));
    let mount = json!({"name": volume, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH});
    let mut needed = false;
    for key in ["initContainers", "containers"] {
        let Some(list) = spec_mut(pod).get_mut(key).and_then(Value::as_array_mut) else {
            continue;
        };
        for c in list.iter_mut().filter_map(Value::as_object_mut) {
            let mounted = c
                .get("volumeMounts")
                .and_then(Value::as_array)
                .is_some_and(|ms| {
                    ms.iter().any(|m| {
                        m.get("mountPath").and_then(Value::as_str) == Some(TOKEN_MOUNT_PATH)
                    })
                });
            if mounted {
                continue;
            }
            let mounts = c
                .entry("volumeMounts")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !mounts.is_array() {
                *mounts = Value::Array(Vec::new());
            }
            mounts.as_array_mut().expect("array").push(mount.clone());
            needed = true;
        }
    }
    if needed && !has_volume {
        let volumes = spec_mut(pod)
            .entry("volumes")
            .or_insert_with(|| Value::Array(Vec::new()));
        if !volumes.is_array() {
            *volumes = Value::Array(Vec::new());
        }
        volumes
            .as_array_mut()
            .expect("array")
            .push(token_volume(&volume));
    }
}

/// The `kubernetes.io/enforce-mountable-secrets` annotation, read as Go's `ParseBool`.
fn enforces_mountable_secrets(account: &Value) -> bool {
    matches!(
        super::builtin::annotation(account, ENFORCE_MOUNTABLE_SECRETS),
        Some("1" | "t" | "T" | "true" | "TRUE" | "True")
    )
}

fn mountable_secrets(account: &Value) -> Vec<String> {
    items(account, "/secrets")
        .iter()
        .map(|r| str_at(r, "/name").to_string())
        .collect()
}

fn container_secret_violation(
    c: &Value,
    what: &str,
    allowed: &[String],
    account: &Value,
) -> Option<String> {
    let sa = capstan_api::meta::name(account);
    let cname = str_at(c, "/name");
    let ok = |n: &str| allowed.iter().any(|a| a == n);
    for e in items(c, "/env") {
        if let Some(s) = e.at("/valueFrom/secretKeyRef/name").and_then(Value::as_str) {
            if !ok(s) {
                return Some(format!(
                    "{what} {cname} with envVar {} referencing secret.secretName=\"{s}\" is not allowed because service account {sa} does not reference that secret",
                    str_at(e, "/name")
                ));
            }
        }
    }
    for e in items(c, "/envFrom") {
        if let Some(s) = e.at("/secretRef/name").and_then(Value::as_str) {
            if !ok(s) {
                return Some(format!(
                    "{what} {cname} with envFrom referencing secret.secretName=\"{s}\" is not allowed because service account {sa} does not reference that secret"
                ));
            }
        }
    }
    None
}

/// Kubernetes' `limitSecretReferences`: secret volumes, env of init and regular containers
/// and image pull secrets must all be listed on the account.
fn limit_secret_references(account: &Value, pod: &Value) -> Result<(), String> {
    let sa = capstan_api::meta::name(account);
    let allowed = mountable_secrets(account);
    for v in items(pod, "/spec/volumes") {
        if let Some(s) = v.get("secret") {
            let name = str_at(s, "/secretName");
            if !allowed.iter().any(|a| a == name) {
                return Err(format!(
                    "volume with secret.secretName=\"{name}\" is not allowed because service account {sa} does not reference that secret"
                ));
            }
        }
    }
    for (key, what) in [
        ("initContainers", "init container"),
        ("containers", "container"),
    ] {
        for c in items(pod, &format!("/spec/{key}")) {
            if let Some(e) = container_secret_violation(c, what, &allowed, account) {
                return Err(e);
            }
        }
    }
    let pulls: Vec<&str> = items(account, "/imagePullSecrets")
        .iter()
        .map(|r| str_at(r, "/name"))
        .collect();
    for (i, r) in items(pod, "/spec/imagePullSecrets").iter().enumerate() {
        let name = str_at(r, "/name");
        if !pulls.contains(&name) {
            return Err(format!(
                "imagePullSecrets[{i}].name=\"{name}\" is not allowed because service account {sa} does not reference that imagePullSecret"
            ));
        }
    }
    Ok(())
}
