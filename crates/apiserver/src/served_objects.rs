//! The server's own [`Objects`]: reads from the watch caches, writes through the registries.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::filter::Filter;
use crate::objects::{Change, Objects};
use crate::registry::{Registry, WriteOptions};
use crate::ApiServer;

impl ApiServer {
    /// The registry of `group`'s `resource` in its storage version.
    fn storage_registry(&self, group: &str, resource: &str) -> Option<Arc<Registry>> {
        self.by_resource
            .read()
            .get(&(group.to_string(), resource.to_string()))
            .cloned()
    }

    fn values(objs: Vec<Arc<crate::watch_cache::CachedObject>>, resource: &str) -> Vec<Value> {
        objs.iter()
            .filter_map(|o| Self::value(o, resource))
            .collect()
    }

    /// A cached object parsed. Objects other than pods are few and read again and again by
    /// admission, so they keep their parsed form; pods are many and are parsed each time.
    fn value(obj: &crate::watch_cache::CachedObject, resource: &str) -> Option<Value> {
        match resource {
            "pods" | "events" => obj.value(),
            _ => obj.value_kept(),
        }
    }
}

#[async_trait]
impl Objects for ApiServer {
    fn revision(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<i64> {
        Some(
            self.storage_registry(group, resource)?
                .cache
                .get(ns, name)?
                .rev,
        )
    }

    fn get(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let reg = self.storage_registry(group, resource)?;
        let obj = reg.cache.get(ns, name)?;
        Self::value(&obj, resource)
    }

    async fn get_current(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<Value>> {
        let Some(reg) = self.storage_registry(group, resource) else {
            return Ok(None);
        };
        match reg.get(ns, name).await {
            Ok(w) => Ok(Some(w.value)),
            Err(e) if e.code == 404 => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn list(&self, group: &str, resource: &str, ns: &str) -> Vec<Value> {
        let Some(reg) = self.storage_registry(group, resource) else {
            return Vec::new();
        };
        let mut filter = Filter::everything();
        if !ns.is_empty() {
            filter.namespace = Some(ns.to_string());
        }
        Self::values(reg.cache.list(&filter).0, resource)
    }

    fn pods_on_node(&self, node: &str) -> Vec<Value> {
        let Some(reg) = self.storage_registry("", "pods") else {
            return Vec::new();
        };
        match Filter::new(reg.info, "", "", &format!("spec.nodeName={node}")) {
            Ok(f) => Self::values(reg.cache.list(&f).0, "pods"),
            Err(_) => Vec::new(),
        }
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
        let reg = self
            .storage_registry(group, resource)
            .ok_or_else(|| ApiError::internal(format!("no registry for {resource}.{group}")))?;
        let mut unchanged = None;
        let written = reg
            .update_with(
                ns,
                name,
                subresource,
                &WriteOptions::default(),
                |old| match change(old)? {
                    Some(next) => Ok(next),
                    None => {
                        unchanged = Some(old.clone());
                        Ok(old.clone())
                    }
                },
            )
            .await?;
        Ok(unchanged.unwrap_or(written.value))
    }

    async fn create(&self, group: &str, resource: &str, ns: &str, obj: Value) -> ApiResult<Value> {
        let reg = self
            .storage_registry(group, resource)
            .ok_or_else(|| ApiError::internal(format!("no registry for {resource}.{group}")))?;
        Ok(reg.create(ns, obj, &WriteOptions::default()).await?.value)
    }
}
