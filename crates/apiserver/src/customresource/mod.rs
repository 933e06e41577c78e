//! CustomResourceDefinitions: the definition's own strategy, the strategy of custom objects,
//! and the controller that turns each definition into served resources.
//!
//! The controller follows the definition cache in process. For each definition it settles the
//! names (`NamesAccepted`), marks it `Established`, and installs one registry per served
//! version over one watch cache of the definition's storage (`/registry/<group>/<plural>/`).
//! A change to the definition's spec replaces the registries (open watches end and clients
//! re-watch, as Kubernetes restarts a definition's handlers). A deleted definition carries the
//! `customresourcecleanup.apiextensions.k8s.io` finalizer: creates are refused, every object
//! is deleted (their own finalizers honoured), then the finalizer goes and the resource is no
//! longer served.

mod openapi;
mod strategy;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use bytes::Bytes;
use capstan_api::catalogue::{self, ResourceInfo};
use capstan_api::meta;
use parking_lot::RwLock;
use serde_json::{json, Value};

use crate::filter::Filter;
use crate::registry::{DeleteOptions, Registry, WriteOptions, CRD_CLEANUP_FINALIZER, CRD_GROUP};
use crate::watch_cache::{WatchCache, WatchItem};
use crate::ApiServer;
use capstan_api::meta::At as _;

pub use strategy::{CrdStrategy, CustomStrategy};

/// The custom resources being served, in discovery order (groups by name, versions by
/// Kubernetes' version priority).
#[derive(Default)]
pub struct Served {
    infos: RwLock<Vec<&'static ResourceInfo>>,
    /// OpenAPI v3 documents by path (`apis/<group>/<version>`).
    openapi: RwLock<HashMap<String, openapi::Doc>>,
}

impl Served {
    /// Every served custom resource version.
    pub fn infos(&self) -> Vec<&'static ResourceInfo> {
        self.infos.read().clone()
    }

    /// The OpenAPI v3 document of a custom group version (`apis/<group>/<version>`).
    pub fn openapi(&self, path: &str) -> Option<Bytes> {
        self.openapi.read().get(path).map(|d| d.bytes.clone())
    }

    /// Every custom group version's document path and content hash, for the v3 index.
    pub fn openapi_paths(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = self
            .openapi
            .read()
            .iter()
            .map(|(p, d)| (p.clone(), d.hash.clone()))
            .collect();
        out.sort();
        out
    }

    fn set(&self, mut infos: Vec<&'static ResourceInfo>) {
        infos.sort_by(|a, b| {
            a.group
                .cmp(b.group)
                .then_with(|| version_priority(a.version).cmp(&version_priority(b.version)))
                .then_with(|| a.plural.cmp(b.plural))
        });
        *self.infos.write() = infos;
    }
}

/// Kubernetes' version ordering: GA before beta before alpha, higher numbers first, then
/// anything else alphabetically. Smaller sorts first.
pub fn version_priority(v: &str) -> (u8, i64, i64, String) {
    let parse = || -> Option<(u8, i64, i64)> {
        let rest = v.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        let major: i64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((0, -major, 0));
        }
        for (stage, rank) in [("beta", 1u8), ("alpha", 2u8)] {
            if let Some(n) = tail.strip_prefix(stage) {
                let minor: i64 = n.parse().ok()?;
                return Some((rank, -major, -minor));
            }
        }
        None
    };
    match parse() {
        Some((rank, a, b)) => (rank, a, b, String::new()),
        None => (3, 0, 0, v.to_string()),
    }
}

/// The selectable fields of a custom resource's storage version: their names and how to
/// read them from a stored object.
pub struct Selectable {
    pub fields: Vec<&'static str>,
    version: capstan_api::crd::CompiledVersion,
}

impl Selectable {
    /// `(field, value)` of each selectable field of `obj`.
    pub fn values(&self, obj: &Value) -> Vec<(&'static str, String)> {
        self.fields
            .iter()
            .map(|f| (*f, self.version.field_value(obj, f).unwrap_or_default()))
            .collect()
    }
}

/// Each served custom resource's selectable fields, by (group, plural): every version reads
/// the objects of the one storage cache.
type SelectableMap = HashMap<(String, String), Arc<Selectable>>;

fn selectable_map() -> &'static RwLock<SelectableMap> {
    static MAP: std::sync::OnceLock<RwLock<SelectableMap>> = std::sync::OnceLock::new();
    MAP.get_or_init(Default::default)
}

/// The selectable fields of the custom resource `info` (`None` for built-in kinds and for
/// definitions without any).
pub fn selectable(info: &ResourceInfo) -> Option<Arc<Selectable>> {
    if !info.custom {
        return None;
    }
    selectable_map()
        .read()
        .get(&(info.group.to_string(), info.plural.to_string()))
        .cloned()
}

/// Check a field selector label of a custom resource: `metadata.name`, `metadata.namespace`
/// (namespaced resources) and the definition's selectable fields.
pub fn check_field(info: &ResourceInfo, field: &str) -> Result<(), String> {
    let known = field == "metadata.name"
        || (field == "metadata.namespace" && info.namespaced)
        || selectable(info).is_some_and(|s| s.fields.contains(&field));
    if known {
        Ok(())
    } else {
        Err(format!("field label not supported: {field}"))
    }
}

/// Register (or, with `None`, forget) a resource's selectable fields.
fn set_selectable(group: &str, plural: &str, s: Option<Selectable>) {
    let key = (group.to_string(), plural.to_string());
    let mut map = selectable_map().write();
    match s {
        Some(s) => {
            map.insert(key, Arc::new(s));
        }
        None => {
            map.remove(&key);
        }
    }
}

/// A `ResourceInfo` made for a custom resource, kept for the life of the process; the same
/// description always yields the same reference, so re-creating a definition leaks nothing.
#[allow(clippy::too_many_arguments)]
fn intern(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    singular: &str,
    namespaced: bool,
    short_names: &[String],
    categories: &[String],
    subresources: &[&'static str],
) -> &'static ResourceInfo {
    static INTERNED: Mutex<Option<HashMap<String, &'static ResourceInfo>>> = Mutex::new(None);
    let key = format!(
        "{group}\0{version}\0{kind}\0{plural}\0{singular}\0{namespaced}\0{short_names:?}\0{categories:?}\0{subresources:?}"
    );
    let mut guard = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    let map = guard.get_or_insert_with(HashMap::new);
    if let Some(info) = map.get(&key) {
        return info;
    }
    let leak = |s: &str| -> &'static str { Box::leak(s.to_string().into_boxed_str()) };
    let leak_all = |v: &[String]| -> &'static [&'static str] {
        Box::leak(
            v.iter()
                .map(|s| leak(s))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        )
    };
    let info: &'static ResourceInfo = Box::leak(Box::new(ResourceInfo {
        group: leak(group),
        version: leak(version),
        kind: leak(kind),
        plural: leak(plural),
        singular: leak(singular),
        namespaced,
        verbs: catalogue::verbs::ALL,
        short_names: leak_all(short_names),
        categories: leak_all(categories),
        subresources: Box::leak(subresources.to_vec().into_boxed_slice()),
        storage: leak(&format!("{group}/{plural}")),
        custom: true,
    }));
    map.insert(key, info);
    info
}

/// What is installed for one definition.
struct Installed {
    /// The parts of the definition serving depends on; a change means reinstalling.
    fingerprint: String,
    cache: Arc<WatchCache>,
    /// The storage version's registry (served or not).
    storage: Arc<Registry>,
    /// The definition as installed (for its OpenAPI documents).
    crd: Value,
    group: String,
    plural: String,
    versions: Vec<&'static str>,
    infos: Vec<&'static ResourceInfo>,
    terminating: Arc<AtomicBool>,
}

/// The controller's state.
struct Controller {
    server: Weak<ApiServer>,
    installed: HashMap<String, Installed>,
}

/// Start the definition controller of `server`.
pub fn start(server: &Arc<ApiServer>) {
    let Some(crds) = server.registry(CRD_GROUP, "v1", "customresourcedefinitions") else {
        return;
    };
    let weak = Arc::downgrade(server);
    tokio::spawn(async move {
        let mut c = Controller {
            server: weak,
            installed: HashMap::new(),
        };
        c.run(crds).await;
    });
}

impl Controller {
    async fn run(&mut self, crds: Arc<Registry>) {
        loop {
            let mut sub = match crds.cache.subscribe(Filter::everything(), None) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e.message, "cannot follow CustomResourceDefinitions");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let mut pending: Vec<String> = sub.initial.iter().map(name_of).collect();
            let mut tick = tokio::time::interval(Duration::from_secs(2));
            loop {
                for name in std::mem::take(&mut pending) {
                    if self.server.upgrade().is_none() {
                        return;
                    }
                    self.reconcile(&crds, &name).await;
                }
                tokio::select! {
                    item = sub.rx.recv() => match item {
                        Some(item) => {
                            pending.push(name_of(&item));
                            while let Ok(more) = sub.rx.try_recv() {
                                let n = name_of(&more);
                                if !pending.contains(&n) {
                                    pending.push(n);
                                }
                            }
                        }
                        // The cache restarted: follow it anew.
                        None => break,
                    },
                    _ = tick.tick() => {
                        // Definitions being deleted wait on their objects' finalizers.
                        pending.extend(
                            self.installed
                                .iter()
                                .filter(|(_, i)| i.terminating.load(Ordering::Relaxed))
                                .map(|(n, _)| n.clone()),
                        );
                        if self.server.upgrade().is_none() {
                            return;
                        }
                    }
                }
            }
        }
    }

    /// Bring what is served for definition `name` in line with the definition.
    async fn reconcile(&mut self, crds: &Arc<Registry>, name: &str) {
        let Some(server) = self.server.upgrade() else {
            return;
        };
        let current = crds.cache.get("", name).and_then(|o| o.value());
        let Some(crd) = current else {
            self.uninstall(&server, name);
            return;
        };
        if meta::deletion_timestamp(&crd).is_some() {
            self.terminate(&server, crds, &crd).await;
            return;
        }
        // Every stored definition, this one included (as Kubernetes' lister gives them).
        let others: Vec<Value> = crds
            .cache
            .list(&Filter::everything())
            .0
            .iter()
            .filter_map(|o| o.value())
            .collect();
        let status = settle_status(&crd, &others);
        let established = condition_true(&status, "Established");
        if crd.get("status") != Some(&status) {
            let wanted = status.clone();
            let result = crds
                .update_with("", name, "status", &WriteOptions::default(), |old| {
                    let mut next = old.clone();
                    next["status"] = wanted.clone();
                    Ok(next)
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(crd = name, error = %e.message, "cannot update the definition's status");
            }
        }
        if established {
            self.install(&server, &crd);
        } else {
            self.uninstall(&server, name);
        }
    }

    /// Serve the definition's versions (replacing what was served if the spec changed).
    fn install(&mut self, server: &Arc<ApiServer>, crd: &Value) {
        let name = meta::name(crd).to_string();
        let fingerprint =
            serde_json::to_string(&(crd.get("spec"), crd.at("/status/acceptedNames")))
                .unwrap_or_default();
        if self
            .installed
            .get(&name)
            .is_some_and(|i| i.fingerprint == fingerprint)
        {
            return;
        }
        self.uninstall(server, &name);
        match build(server, crd) {
            Ok(mut installed) => {
                installed.fingerprint = fingerprint;
                let served: Vec<Arc<Registry>> = installed
                    .infos
                    .iter()
                    .filter_map(|i| {
                        let strategy = installed_strategy(crd, i, &installed.terminating)?;
                        Some(Arc::new(Registry::new(
                            i,
                            strategy,
                            server.store.clone(),
                            installed.cache.clone(),
                        )))
                    })
                    .collect();
                server.add_registries(&served, installed.storage.clone());
                self.installed.insert(name, installed);
                self.publish(server);
            }
            Err(e) => tracing::warn!(crd = name, error = %e, "cannot serve the definition"),
        }
    }

    fn uninstall(&mut self, server: &Arc<ApiServer>, name: &str) {
        let Some(old) = self.installed.remove(name) else {
            return;
        };
        server.remove_registries(&old.group, &old.plural, &old.versions);
        old.cache.stop();
        set_selectable(&old.group, &old.plural, None);
        self.publish(server);
    }

    /// Tell discovery and OpenAPI what is served now.
    fn publish(&self, server: &Arc<ApiServer>) {
        let crds: Vec<&Value> = self.installed.values().map(|i| &i.crd).collect();
        *server.custom.openapi.write() = openapi::documents(&crds);
        server.custom.set(
            self.installed
                .values()
                .flat_map(|i| i.infos.iter().copied())
                .collect(),
        );
    }

    /// A deleted definition: refuse creates, delete every object, then drop the finalizer.
    async fn terminate(&mut self, server: &Arc<ApiServer>, crds: &Arc<Registry>, crd: &Value) {
        let name = meta::name(crd).to_string();
        if !meta::finalizers(crd)
            .iter()
            .any(|f| f == CRD_CLEANUP_FINALIZER)
        {
            // Other finalizers hold it; nothing of ours to do.
            return;
        }
        if !self.installed.contains_key(&name)
            && condition_true(crd.get("status").unwrap_or(&Value::Null), "Established")
        {
            self.install(server, crd);
        }
        let remaining = match self.installed.get(&name) {
            Some(i) => {
                i.terminating.store(true, Ordering::Relaxed);
                delete_all(&i.storage).await
            }
            None => 0,
        };
        let (status, reason, message) = if remaining == 0 {
            (
                "False",
                "InstanceDeletionCompleted",
                "removed all instances".to_string(),
            )
        } else {
            (
                "True",
                "InstanceDeletionInProgress",
                "CustomResource deletion is in progress".to_string(),
            )
        };
        let _ = crds
            .update_with("", &name, "status", &WriteOptions::default(), |old| {
                let mut next = old.clone();
                let mut st = next.get("status").cloned().unwrap_or_else(|| json!({}));
                set_condition(&mut st, "Terminating", status, reason, &message);
                next["status"] = st;
                Ok(next)
            })
            .await;
        if remaining > 0 {
            return;
        }
        let result = crds
            .update_with("", &name, "", &WriteOptions::default(), |old| {
                let mut next = old.clone();
                let kept: Vec<String> = meta::finalizers(old)
                    .into_iter()
                    .filter(|f| f != CRD_CLEANUP_FINALIZER)
                    .collect();
                meta::set_finalizers(&mut next, &kept);
                Ok(next)
            })
            .await;
        match result {
            Ok(_) => self.uninstall(server, &name),
            Err(e) => {
                tracing::warn!(crd = name, error = %e.message, "cannot remove the cleanup finalizer")
            }
        }
    }
}

fn name_of(item: &WatchItem) -> String {
    item.event.obj.name.clone()
}

/// The strategy of one served version, or `None` when it cannot be compiled.
fn installed_strategy(
    crd: &Value,
    info: &'static ResourceInfo,
    terminating: &Arc<AtomicBool>,
) -> Option<Arc<dyn crate::registry::Strategy>> {
    match CustomStrategy::new(crd, info, terminating.clone()) {
        Ok(s) => Some(Arc::new(s)),
        Err(e) => {
            tracing::warn!(resource = info.plural, version = info.version, error = %e, "cannot serve version");
            None
        }
    }
}

/// Delete every object of a custom resource; how many are left (held by finalizers).
async fn delete_all(reg: &Arc<Registry>) -> usize {
    let (objects, _) = reg.cache.list(&Filter::everything());
    let mut left = 0;
    for o in objects {
        let opts = DeleteOptions::default();
        match reg.delete(&o.namespace, &o.name, &opts).await {
            Ok(crate::registry::Deleted::Now(_)) => {}
            Ok(crate::registry::Deleted::Pending(_)) => left += 1,
            Err(e) if e.code == 404 => {}
            Err(e) => {
                tracing::warn!(name = o.name, error = %e.message, "cannot delete a custom object");
                left += 1;
            }
        }
    }
    left
}

/// The registries and cache for a definition (strategies are attached by the caller).
fn build(server: &Arc<ApiServer>, crd: &Value) -> Result<Installed, String> {
    let spec = crd.get("spec").ok_or("no spec")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .ok_or("no group")?;
    let names = crd
        .at("/status/acceptedNames")
        .filter(|n| {
            n.get("plural")
                .and_then(Value::as_str)
                .is_some_and(|p| !p.is_empty())
        })
        .or_else(|| spec.get("names"))
        .ok_or("no names")?;
    let s = |k: &str| {
        names
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let strs = |k: &str| -> Vec<String> {
        names
            .get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    };
    let (plural, kind) = (s("plural"), s("kind"));
    let singular = match s("singular") {
        x if x.is_empty() => kind.to_lowercase(),
        x => x,
    };
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .ok_or("no versions")?;
    let storage_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .ok_or("no storage version")?;
    let mut infos = Vec::new();
    let mut storage_info = None;
    for v in versions {
        let vname = v.get("name").and_then(Value::as_str).unwrap_or("");
        let served = v.get("served").and_then(Value::as_bool) == Some(true);
        let mut subs: Vec<&'static str> = Vec::new();
        let sub = v
            .get("subresources")
            .or_else(|| spec.get("subresources"))
            .cloned()
            .unwrap_or(Value::Null);
        if sub.get("status").is_some() {
            subs.push("status");
        }
        if sub.get("scale").is_some() {
            subs.push("scale");
        }
        let info = intern(
            group,
            vname,
            &kind,
            &plural,
            &singular,
            namespaced,
            &strs("shortNames"),
            &strs("categories"),
            &subs,
        );
        if vname == storage_version {
            storage_info = Some(info);
        }
        // A definition cannot take over a built-in resource's URL.
        if served && catalogue::find(group, vname, &plural).is_none() {
            infos.push(info);
        }
    }
    let storage_info = storage_info.ok_or("no storage version")?;
    // Cached objects carry their selectable fields' values from the first list on.
    let version = capstan_api::crd::CompiledVersion::compile(crd, storage_version)?;
    let fields: Vec<&'static str> = version
        .selectable_fields()
        .iter()
        .map(|f| &*Box::leak(f.clone().into_boxed_str()))
        .collect();
    set_selectable(
        group,
        &plural,
        (!fields.is_empty()).then_some(Selectable { fields, version }),
    );
    let cache = WatchCache::new(storage_info, Registry::prefix_of(storage_info));
    cache.start(server.store.clone());
    let terminating = Arc::new(AtomicBool::new(false));
    let strategy = installed_strategy(crd, storage_info, &terminating)
        .ok_or("the storage version's schema does not compile")?;
    let storage = Arc::new(Registry::new(
        storage_info,
        strategy,
        server.store.clone(),
        cache.clone(),
    ));
    Ok(Installed {
        fingerprint: String::new(),
        cache,
        storage,
        crd: crd.clone(),
        group: group.to_string(),
        plural,
        versions: infos.iter().map(|i| i.version).collect(),
        infos,
        terminating,
    })
}

/// The definition's status as the naming and establishing controllers leave it.
fn settle_status(crd: &Value, others: &[Value]) -> Value {
    let mut status = crd.get("status").cloned().unwrap_or_else(|| json!({}));
    if !status.is_object() {
        status = json!({});
    }
    let outcome = capstan_api::crd::accepted_names(crd, others);
    status["acceptedNames"] = outcome.accepted_names.clone();
    let c = &outcome.names_accepted;
    set_condition(&mut status, c.type_, &c.status, &c.reason, &c.message);
    if c.status == "True" {
        // Kubernetes' establishing controller follows at once.
        set_condition(
            &mut status,
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        );
    } else {
        let e = &outcome.established;
        set_condition(&mut status, e.type_, &e.status, &e.reason, &e.message);
    }
    if status.get("storedVersions").is_none() {
        let storage = crd
            .at("/spec/versions")
            .and_then(Value::as_array)
            .and_then(|vs| {
                vs.iter()
                    .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
            })
            .and_then(|v| v.get("name"))
            .cloned();
        if let Some(s) = storage {
            status["storedVersions"] = json!([s]);
        }
    }
    status
}

fn condition_true(status: &Value, kind: &str) -> bool {
    status
        .get("conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some(kind)
                && c.get("status").and_then(Value::as_str) == Some("True")
        })
}

/// Set one condition, keeping its transition time unless its status changes.
fn set_condition(status: &mut Value, kind: &str, value: &str, reason: &str, message: &str) {
    let now = meta::format_time(std::time::SystemTime::now());
    if !status.get("conditions").is_some_and(Value::is_array) {
        status["conditions"] = json!([]);
    }
    let Some(list) = status.get_mut("conditions").and_then(Value::as_array_mut) else {
        return;
    };
    let found = list
        .iter_mut()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind));
    match found {
        Some(c) => {
            let changed = c.get("status").and_then(Value::as_str) != Some(value);
            c["status"] = json!(value);
            c["reason"] = json!(reason);
            c["message"] = json!(message);
            if changed {
                c["lastTransitionTime"] = json!(now);
            }
        }
        None => list.push(json!({
            "type": kind,
            "status": value,
            "lastTransitionTime": now,
            "reason": reason,
            "message": message,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_as_kubernetes_prioritizes_them() {
        let mut v = vec![
            "v1alpha1",
            "v2beta1",
            "foo1",
            "v1",
            "v10",
            "v11alpha2",
            "v2",
            "v1beta2",
            "foo10",
            "v10beta3",
            "v12alpha1",
        ];
        v.sort_by_key(|x| version_priority(x));
        assert_eq!(
            v,
            vec![
                "v10",
                "v2",
                "v1",
                "v10beta3",
                "v2beta1",
                "v1beta2",
                "v12alpha1",
                "v11alpha2",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }

    #[test]
    fn interned_infos_are_shared() {
        let a = intern(
            "example.com",
            "v1",
            "Foo",
            "foos",
            "foo",
            true,
            &[],
            &[],
            &["status"],
        );
        let b = intern(
            "example.com",
            "v1",
            "Foo",
            "foos",
            "foo",
            true,
            &[],
            &[],
            &["status"],
        );
        assert!(std::ptr::eq(a, b));
        assert_eq!(a.storage, "example.com/foos");
        assert!(a.custom);
        let c = intern(
            "example.com",
            "v1",
            "Foo",
            "foos",
            "foo",
            false,
            &[],
            &[],
            &["status"],
        );
        assert!(!std::ptr::eq(a, c));
    }

    #[test]
    fn conditions_keep_their_transition_time_until_the_status_changes() {
        let mut st = json!({});
        set_condition(&mut st, "Established", "True", "A", "a");
        st["conditions"][0]["lastTransitionTime"] = json!("2020-01-01T00:00:00Z");
        set_condition(&mut st, "Established", "True", "B", "b");
        assert_eq!(
            st["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert_eq!(st["conditions"][0]["reason"], "B");
        set_condition(&mut st, "Established", "False", "C", "c");
        assert_ne!(
            st["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert!(!condition_true(&st, "Established"));
    }
}
