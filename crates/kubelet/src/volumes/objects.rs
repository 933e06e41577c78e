//! The API objects volumes and env read: ConfigMaps, Secrets, claims and volumes through
//! the kubelet's own client (so the Node authorizer decides), kept a few seconds to spare
//! the API server a GET per pod sync; service account tokens through the TokenRequest API,
//! kept until they are due for rotation; and the Services for the service link variables,
//! from a watch.
//!
//! [`Objects`] is the seam: the kubelet uses [`Live`], unit tests a fake.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{
    ConfigMap, PersistentVolume, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::Api;
use parking_lot::Mutex;
use serde::de::DeserializeOwned;

use capstan_runtime::informer::Informer;

use super::downward::NodeInfo;
use crate::Kubelet;

/// How long a fetched (or missing) object is reused.
pub const OBJECT_TTL: Duration = Duration::from_secs(3);
/// Tokens are renewed after this long whatever their expiry.
const TOKEN_MAX_TTL: Duration = Duration::from_secs(24 * 3600);
/// At most this much randomness is taken off a token's renewal time.
const TOKEN_MAX_JITTER_SECS: f64 = 10.0;
/// How long env construction waits for the first list of Services.
const SERVICES_SYNC_WAIT: Duration = Duration::from_secs(10);

/// What volumes and env read from the cluster. Lookups give `Ok(None)` when the object
/// does not exist; errors are the API's messages.
#[async_trait]
pub trait Objects: Send + Sync {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<Arc<ConfigMap>>, String>;
    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Arc<Secret>>, String>;
    async fn claim(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Arc<PersistentVolumeClaim>>, String>;
    async fn volume(&self, name: &str) -> Result<Option<Arc<PersistentVolume>>, String>;
    /// A token of `service_account` bound to `pod`.
    async fn token(
        &self,
        pod: &Pod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<String, String>;
    /// The Services of namespace `ns` and of `default` (for the master service).
    async fn services(&self, ns: &str) -> Result<Vec<Arc<Service>>, String>;
    /// The node's allocatable and addresses.
    fn node(&self) -> NodeInfo;
    /// Whether the node is hollow ([`crate::Options::hollow`]): volumes stay plain
    /// directories (no tmpfs, no ownership changes) and host paths are not checked.
    fn hollow(&self) -> bool {
        false
    }
}

/// An error's message as the API gave it (kube's Display adds the reason).
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if !s.message.is_empty() => s.message.clone(),
        other => other.to_string(),
    }
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.is_not_found())
}

/// When an object was fetched, and what was found.
type Fetched<T> = (Instant, Option<Arc<T>>);

/// Objects by (namespace, name), each kept [`OBJECT_TTL`].
struct TtlCache<T> {
    entries: Mutex<HashMap<(String, String), Fetched<T>>>,
}

impl<T> Default for TtlCache<T> {
    fn default() -> Self {
        TtlCache {
            entries: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> TtlCache<T>
where
    T: Clone + DeserializeOwned + std::fmt::Debug + kube::Resource,
{
    async fn get(&self, api: Api<T>, ns: &str, name: &str) -> Result<Option<Arc<T>>, String> {
        let key = (ns.to_string(), name.to_string());
        {
            let mut entries = self.entries.lock();
            if let Some((at, v)) = entries.get(&key) {
                if at.elapsed() < OBJECT_TTL {
                    return Ok(v.clone());
                }
            }
            entries.retain(|_, (at, _)| at.elapsed() < OBJECT_TTL);
        }
        let got = match api.get(name).await {
            Ok(o) => Some(Arc::new(o)),
            Err(e) if is_not_found(&e) => None,
            Err(e) => return Err(api_message(&e)),
        };
        self.entries
            .lock()
            .insert(key, (Instant::now(), got.clone()));
        Ok(got)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct TokenKey {
    namespace: String,
    service_account: String,
    audience: Option<String>,
    expiration_seconds: i64,
    pod_uid: String,
}

#[derive(Clone, Debug)]
struct TokenEntry {
    token: String,
    expires: Timestamp,
    /// The token's lifetime as the API server granted it.
    lifetime_secs: i64,
    issued: Timestamp,
}

impl TokenEntry {
    fn expired(&self, now: Timestamp) -> bool {
        now >= self.expires
    }

    /// Due for renewal: 80% of its life passed, or older than a day (less a jitter).
    fn needs_refresh(&self, now: Timestamp, jitter_secs: i64) -> bool {
        let max_age = TOKEN_MAX_TTL.as_secs() as i64 - jitter_secs;
        if now.as_second() > self.issued.as_second() + max_age {
            return true;
        }
        let remaining_floor = self.lifetime_secs * 20 / 100 + jitter_secs;
        now.as_second() > self.expires.as_second() - remaining_floor
    }
}

/// The per-kubelet state behind [`Live`].
#[derive(Default)]
struct State {
    config_maps: TtlCache<ConfigMap>,
    secrets: TtlCache<Secret>,
    claims: TtlCache<PersistentVolumeClaim>,
    volumes: TtlCache<PersistentVolume>,
    tokens: Mutex<HashMap<TokenKey, TokenEntry>>,
    services: Mutex<Option<Arc<Informer<Service>>>>,
}

static STATES: LazyLock<Mutex<HashMap<String, Arc<State>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn state(k: &Kubelet) -> Arc<State> {
    let key = format!("{}\0{}", k.opts.node_name, k.opts.root_dir.display());
    STATES.lock().entry(key).or_default().clone()
}

/// Forget the tokens of a pod that is gone.
pub fn forget_pod(k: &Kubelet, uid: &str) {
    state(k).tokens.lock().retain(|key, _| key.pod_uid != uid);
}

/// The cluster as the kubelet sees it.
pub struct Live<'a> {
    k: &'a Kubelet,
    state: Arc<State>,
}

impl<'a> Live<'a> {
    pub fn new(k: &'a Kubelet) -> Live<'a> {
        Live { k, state: state(k) }
    }

    fn services_informer(&self) -> Arc<Informer<Service>> {
        let mut slot = self.state.services.lock();
        if let Some(inf) = slot.as_ref() {
            return inf.clone();
        }
        let inf: Arc<Informer<Service>> = Arc::new(Informer::new());
        let api: Api<Service> = Api::all(self.k.client.clone());
        let stream = kube::runtime::watcher::watcher(
            api,
            kube::runtime::watcher::Config::default().any_semantic(),
        );
        tokio::spawn(inf.clone().run(stream, None));
        *slot = Some(inf.clone());
        inf
    }
}

#[async_trait]
impl Objects for Live<'_> {
    async fn config_map(&self, ns: &str, name: &str) -> Result<Option<Arc<ConfigMap>>, String> {
        let api = Api::namespaced(self.k.client.clone(), ns);
        self.state.config_maps.get(api, ns, name).await
    }

    async fn secret(&self, ns: &str, name: &str) -> Result<Option<Arc<Secret>>, String> {
        let api = Api::namespaced(self.k.client.clone(), ns);
        self.state.secrets.get(api, ns, name).await
    }

    async fn claim(
        &self,
        ns: &str,
        name: &str,
    ) -> Result<Option<Arc<PersistentVolumeClaim>>, String> {
        let api = Api::namespaced(self.k.client.clone(), ns);
        self.state.claims.get(api, ns, name).await
    }

    async fn volume(&self, name: &str) -> Result<Option<Arc<PersistentVolume>>, String> {
        let api = Api::all(self.k.client.clone());
        self.state.volumes.get(api, "", name).await
    }

    async fn token(
        &self,
        pod: &Pod,
        service_account: &str,
        audience: Option<&str>,
        expiration_seconds: i64,
    ) -> Result<String, String> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let key = TokenKey {
            namespace: ns.clone(),
            service_account: service_account.to_string(),
            audience: audience.map(str::to_string),
            expiration_seconds,
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
        };
        let now = Timestamp::now();
        let jitter = (rand::random::<f64>() * TOKEN_MAX_JITTER_SECS) as i64;
        let cached = self.state.tokens.lock().get(&key).cloned();
        if let Some(c) = &cached {
            if !c.needs_refresh(now, jitter) {
                return Ok(c.token.clone());
            }
        }
        let request = TokenRequest {
            spec: TokenRequestSpec {
                audiences: audience.map(|a| vec![a.to_string()]).unwrap_or_default(),
                expiration_seconds: Some(expiration_seconds),
                bound_object_ref: Some(BoundObjectReference {
                    api_version: Some("v1".into()),
                    kind: Some("Pod".into()),
                    name: pod.metadata.name.clone(),
                    uid: pod.metadata.uid.clone(),
                }),
            },
            ..Default::default()
        };
        let api: Api<ServiceAccount> = Api::namespaced(self.k.client.clone(), &ns);
        match api
            .create_token_request(service_account, &PostParams::default(), &request)
            .await
        {
            Ok(tr) => {
                let Some(status) = tr.status else {
                    return Err("the token request returned no token".into());
                };
                let expires = status.expiration_timestamp.0;
                let lifetime = tr.spec.expiration_seconds.unwrap_or(expiration_seconds);
                let issued = expires
                    .checked_sub(k8s_openapi::jiff::SignedDuration::from_secs(lifetime))
                    .unwrap_or(now);
                self.state.tokens.lock().insert(
                    key,
                    TokenEntry {
                        token: status.token.clone(),
                        expires,
                        lifetime_secs: lifetime,
                        issued,
                    },
                );
                Ok(status.token)
            }
            Err(e) => match cached {
                Some(c) if !c.expired(now) => {
                    tracing::warn!(error = %e, "token refresh failed; using the current token");
                    Ok(c.token)
                }
                Some(_) => Err(format!(
                    "token {}/{} expired and refresh failed: {}",
                    ns,
                    service_account,
                    api_message(&e)
                )),
                None => Err(api_message(&e)),
            },
        }
    }

    async fn services(&self, ns: &str) -> Result<Vec<Arc<Service>>, String> {
        let inf = self.services_informer();
        if !inf.has_synced()
            && tokio::time::timeout(SERVICES_SYNC_WAIT, inf.wait_synced())
                .await
                .is_err()
        {
            return Err(
                "services have not yet been read at least once, cannot construct envvars".into(),
            );
        }
        let mut out = inf.list_namespace(ns);
        if ns != "default" {
            out.extend(inf.list_namespace("default"));
        }
        Ok(out)
    }

    fn node(&self) -> NodeInfo {
        node_info(self.k)
    }

    fn hollow(&self) -> bool {
        self.k.opts.hollow.is_some()
    }
}

/// The node's allocatable and IPs, from the Node object the kubelet last wrote (the
/// --node-ip flag when there is none yet).
pub fn node_info(k: &Kubelet) -> NodeInfo {
    let node = k.node.borrow().clone();
    let mut info = NodeInfo::default();
    if let Some(status) = node.as_ref().and_then(|n| n.status.as_ref()) {
        info.allocatable = status.allocatable.clone().unwrap_or_default();
        let addrs = status.addresses.clone().unwrap_or_default();
        info.addresses = addrs
            .iter()
            .map(|a| format!("{{{} {}}}", a.type_, a.address))
            .collect();
        let mut ips: Vec<std::net::IpAddr> = Vec::new();
        for kind in ["InternalIP", "ExternalIP"] {
            for a in addrs.iter().filter(|a| a.type_ == kind) {
                if let Ok(ip) = a.address.parse::<std::net::IpAddr>() {
                    ips.push(ip);
                }
            }
            if !ips.is_empty() {
                break;
            }
        }
        // The primary address, then the first of the other family (dual stack).
        if let Some(first) = ips.first().copied() {
            info.host_ips.push(first.to_string());
            if let Some(other) = ips.iter().find(|ip| ip.is_ipv4() != first.is_ipv4()) {
                info.host_ips.push(other.to_string());
            }
        }
    }
    if info.host_ips.is_empty() {
        if let Some(ip) = k.opts.node_ip {
            info.host_ips.push(ip.to_string());
        }
    }
    info
}

/// A fake cluster for unit tests.
#[cfg(test)]
pub mod fake {
    use super::*;

    /// A token request: namespace, service account, audience, expiration.
    pub type TokenCall = (String, String, Option<String>, i64);

    #[derive(Default)]
    pub struct Fake {
        pub config_maps: Mutex<HashMap<(String, String), Arc<ConfigMap>>>,
        pub secrets: Mutex<HashMap<(String, String), Arc<Secret>>>,
        pub claims: Mutex<HashMap<(String, String), Arc<PersistentVolumeClaim>>>,
        pub volumes: Mutex<HashMap<String, Arc<PersistentVolume>>>,
        pub services: Mutex<Vec<Arc<Service>>>,
        pub node: NodeInfo,
        /// Token requests seen: (namespace, service account, audience, expiration).
        pub token_requests: Mutex<Vec<TokenCall>>,
    }

    impl Fake {
        pub fn put_config_map(&self, ns: &str, cm: ConfigMap) {
            let name = cm.metadata.name.clone().unwrap_or_default();
            self.config_maps
                .lock()
                .insert((ns.into(), name), Arc::new(cm));
        }

        pub fn put_secret(&self, ns: &str, s: Secret) {
            let name = s.metadata.name.clone().unwrap_or_default();
            self.secrets.lock().insert((ns.into(), name), Arc::new(s));
        }
    }

    #[async_trait]
    impl Objects for Fake {
        async fn config_map(&self, ns: &str, name: &str) -> Result<Option<Arc<ConfigMap>>, String> {
            Ok(self
                .config_maps
                .lock()
                .get(&(ns.to_string(), name.to_string()))
                .cloned())
        }

        async fn secret(&self, ns: &str, name: &str) -> Result<Option<Arc<Secret>>, String> {
            Ok(self
                .secrets
                .lock()
                .get(&(ns.to_string(), name.to_string()))
                .cloned())
        }

        async fn claim(
            &self,
            ns: &str,
            name: &str,
        ) -> Result<Option<Arc<PersistentVolumeClaim>>, String> {
            Ok(self
                .claims
                .lock()
                .get(&(ns.to_string(), name.to_string()))
                .cloned())
        }

        async fn volume(&self, name: &str) -> Result<Option<Arc<PersistentVolume>>, String> {
            Ok(self.volumes.lock().get(name).cloned())
        }

        async fn token(
            &self,
            pod: &Pod,
            service_account: &str,
            audience: Option<&str>,
            expiration_seconds: i64,
        ) -> Result<String, String> {
            let ns = pod.metadata.namespace.clone().unwrap_or_default();
            self.token_requests.lock().push((
                ns.clone(),
                service_account.to_string(),
                audience.map(str::to_string),
                expiration_seconds,
            ));
            Ok(format!(
                "token-for-{ns}/{service_account}/{}",
                pod.metadata.name.clone().unwrap_or_default()
            ))
        }

        async fn services(&self, ns: &str) -> Result<Vec<Arc<Service>>, String> {
            Ok(self
                .services
                .lock()
                .iter()
                .filter(|s| {
                    let sns = s.metadata.namespace.as_deref().unwrap_or_default();
                    sns == ns || sns == "default"
                })
                .cloned()
                .collect())
        }

        fn node(&self) -> NodeInfo {
            self.node.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_rotation_times() {
        let issued: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        let entry = TokenEntry {
            token: "t".into(),
            expires: "2024-01-01T01:00:00Z".parse().unwrap(),
            lifetime_secs: 3600,
            issued,
        };
        let at = |s: &str| -> Timestamp { s.parse().unwrap() };
        // 80% of an hour is 48 minutes.
        assert!(!entry.needs_refresh(at("2024-01-01T00:47:00Z"), 0));
        assert!(entry.needs_refresh(at("2024-01-01T00:48:01Z"), 0));
        // The jitter brings it forward by up to 10 s.
        assert!(entry.needs_refresh(at("2024-01-01T00:47:55Z"), 10));
        assert!(!entry.expired(at("2024-01-01T00:59:59Z")));
        assert!(entry.expired(at("2024-01-01T01:00:00Z")));

        // A year-long token is renewed after a day.
        let long = TokenEntry {
            expires: "2025-01-01T00:00:00Z".parse().unwrap(),
            lifetime_secs: 366 * 24 * 3600,
            ..entry
        };
        assert!(!long.needs_refresh(at("2024-01-01T23:59:00Z"), 0));
        assert!(long.needs_refresh(at("2024-01-02T00:00:01Z"), 0));
    }
}
