//! How parts of the server that are not handlers (authenticators, authorizers, admission
//! plugins) read and write other objects: from the watch caches, and through the registries.

use async_trait::async_trait;
use serde_json::Value;

use crate::error::ApiResult;
use capstan_api::meta::At as _;

/// A change to one object, computed from its current form. `None` leaves it as it is.
pub type Change<'a> = &'a (dyn Fn(&Value) -> ApiResult<Option<Value>> + Send + Sync);

/// Objects of every built-in resource, by API group and plural resource name (`""`,
/// `"pods"`). Reads come from the watch caches (storage version, with resourceVersion);
/// they are as fresh as the cache.
#[async_trait]
pub trait Objects: Send + Sync {
    /// One object, `ns` empty for cluster-scoped resources.
    fn get(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<Value>;

    /// One object as the store has it now (not the cache): for the rare decisions that
    /// must not act on a cache that lags a write the client has already seen.
    async fn get_current(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<Value>> {
        Ok(self.get(group, resource, ns, name))
    }

    /// Every object of a resource in `ns` (empty: all namespaces), sorted by namespace/name.
    fn list(&self, group: &str, resource: &str, ns: &str) -> Vec<Value>;

    /// The pods bound to `node` (indexed: cheap).
    fn pods_on_node(&self, node: &str) -> Vec<Value>;

    /// The resourceVersion of one object as cached, without reading it (cheap); None when
    /// absent or unknown. Lets callers remember what a decision depended on.
    fn revision(&self, _group: &str, _resource: &str, _ns: &str, _name: &str) -> Option<i64> {
        None
    }

    /// Read-modify-write of one object through its registry, retried on conflict: `change`
    /// maps the current object (read from the store, not the cache) to the next one. Writes
    /// to `subresource` (e.g. `"status"`) when not empty. Returns the object as written, or
    /// as it is when `change` returned `None`.
    async fn update(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
        subresource: &str,
        change: Change<'_>,
    ) -> ApiResult<Value>;

    /// Create an object through its registry (no admission).
    async fn create(&self, group: &str, resource: &str, ns: &str, obj: Value) -> ApiResult<Value>;
}

/// Objects that no server has filled in (for unit tests of code that takes [`Objects`]).
#[derive(Default)]
pub struct MemoryObjects {
    /// (group, resource, namespace, name) → object.
    pub items:
        parking_lot::RwLock<std::collections::BTreeMap<(String, String, String, String), Value>>,
}

impl MemoryObjects {
    pub fn insert(&self, group: &str, resource: &str, obj: Value) {
        let ns = capstan_api::meta::namespace(&obj).to_string();
        let name = capstan_api::meta::name(&obj).to_string();
        self.items
            .write()
            .insert((group.into(), resource.into(), ns, name), obj);
    }
}

#[async_trait]
impl Objects for MemoryObjects {
    /// A stand-in revision that changes whenever the object does: a hash of its content.
    fn revision(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<i64> {
        use std::hash::{Hash, Hasher};
        let o = self.get(group, resource, ns, name)?;
        let mut h = std::collections::hash_map::DefaultHasher::new();
        o.to_string().hash(&mut h);
        Some(h.finish() as i64)
    }

    fn get(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<Value> {
        self.items
            .read()
            .get(&(group.into(), resource.into(), ns.into(), name.into()))
            .cloned()
    }

    fn list(&self, group: &str, resource: &str, ns: &str) -> Vec<Value> {
        self.items
            .read()
            .iter()
            .filter(|((g, r, n, _), _)| g == group && r == resource && (ns.is_empty() || n == ns))
            .map(|(_, v)| v.clone())
            .collect()
    }

    fn pods_on_node(&self, node: &str) -> Vec<Value> {
        self.list("", "pods", "")
            .into_iter()
            .filter(|p| p.at("/spec/nodeName").and_then(Value::as_str) == Some(node))
            .collect()
    }

    async fn update(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
        _subresource: &str,
        change: Change<'_>,
    ) -> ApiResult<Value> {
        let key = (
            group.to_string(),
            resource.to_string(),
            ns.to_string(),
            name.to_string(),
        );
        let current = self.items.read().get(&key).cloned().ok_or_else(|| {
            crate::error::ApiError::new(404, "NotFound", format!("{resource} \"{name}\" not found"))
        })?;
        match change(&current)? {
            Some(next) => {
                self.items.write().insert(key, next.clone());
                Ok(next)
            }
            None => Ok(current),
        }
    }

    async fn create(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        mut obj: Value,
    ) -> ApiResult<Value> {
        if !ns.is_empty() {
            capstan_api::meta::set_meta_str(&mut obj, "namespace", ns);
        }
        let name = capstan_api::meta::name(&obj).to_string();
        let key = (
            group.to_string(),
            resource.to_string(),
            ns.to_string(),
            name.clone(),
        );
        let mut items = self.items.write();
        if items.contains_key(&key) {
            return Err(crate::error::ApiError::new(
                409,
                "AlreadyExists",
                format!("{resource} \"{name}\" already exists"),
            ));
        }
        items.insert(key, obj.clone());
        Ok(obj)
    }
}

/// An [`Objects`] to hand out before the server that provides it exists (authenticators are
/// built before the server): empty until [`LateObjects::set`].
#[derive(Default)]
pub struct LateObjects {
    inner: std::sync::OnceLock<std::sync::Weak<dyn Objects>>,
}

impl LateObjects {
    pub fn set(&self, objects: &std::sync::Arc<dyn Objects>) {
        let _ = self.inner.set(std::sync::Arc::downgrade(objects));
    }

    fn target(&self) -> Option<std::sync::Arc<dyn Objects>> {
        self.inner.get()?.upgrade()
    }
}

#[async_trait]
impl Objects for LateObjects {
    fn revision(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<i64> {
        self.target()?.revision(group, resource, ns, name)
    }

    fn get(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<Value> {
        self.target()?.get(group, resource, ns, name)
    }

    fn list(&self, group: &str, resource: &str, ns: &str) -> Vec<Value> {
        self.target()
            .map(|t| t.list(group, resource, ns))
            .unwrap_or_default()
    }

    fn pods_on_node(&self, node: &str) -> Vec<Value> {
        self.target()
            .map(|t| t.pods_on_node(node))
            .unwrap_or_default()
    }

    async fn update(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
        subresource: &str,
        change: Change<'_>,
    ) -> ApiResult<Value> {
        match self.target() {
            Some(t) => {
                t.update(group, resource, ns, name, subresource, change)
                    .await
            }
            None => Err(crate::error::ApiError::internal("the server is not ready")),
        }
    }

    async fn create(&self, group: &str, resource: &str, ns: &str, obj: Value) -> ApiResult<Value> {
        match self.target() {
            Some(t) => t.create(group, resource, ns, obj).await,
            None => Err(crate::error::ApiError::internal("the server is not ready")),
        }
    }
}
