//! Bound tokens recently found good. Verifying an RS256 signature costs tens of microseconds,
//! and in-cluster clients present the same token on every request: a token seen before is
//! accepted again without verifying it, for at most [`TTL`] and while every object its
//! validation read (service account, pod, secret, node) is still at the resourceVersion it had
//! then. So deleting a pod or a service account ends its tokens at once; only time-based
//! rules (expiry, the grace after deletion) may take up to [`TTL`] to apply.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;

use crate::authn::TokenResponse;
use crate::error::ApiResult;
use crate::objects::{Change, Objects};

/// How long a verified token is trusted without verifying it again.
pub const TTL: Duration = Duration::from_secs(10);

/// Tokens kept at most; past this the cache starts over.
const CAPACITY: usize = 8192;

/// An object a decision read: (group, resource, namespace, name) and its resourceVersion.
type Dependency = ((String, String, String, String), i64);

struct Entry {
    response: TokenResponse,
    until: SystemTime,
    depends_on: Vec<Dependency>,
}

/// Token (and requested audiences) → what it authenticated as.
#[derive(Default)]
pub struct Verified {
    entries: Mutex<HashMap<(String, String), Entry>>,
}

impl Verified {
    /// The earlier answer for `token` asked for `audiences`, if it still stands.
    pub fn lookup(
        &self,
        token: &str,
        audiences: &str,
        objects: &dyn Objects,
        now: SystemTime,
    ) -> Option<TokenResponse> {
        let entries = self.entries.lock();
        let e = entries.get(&(token.to_string(), audiences.to_string()))?;
        if now >= e.until {
            return None;
        }
        let unchanged = e
            .depends_on
            .iter()
            .all(|((g, r, ns, name), rev)| objects.revision(g, r, ns, name) == Some(*rev));
        unchanged.then(|| e.response.clone())
    }

    /// Remember a good answer, when every object it depended on has a known revision.
    pub fn remember(
        &self,
        token: &str,
        audiences: String,
        response: &TokenResponse,
        exp: Option<i64>,
        depends_on: Option<Vec<Dependency>>,
        now: SystemTime,
    ) {
        let Some(depends_on) = depends_on else {
            return;
        };
        let mut until = now + TTL;
        if let Some(exp) = exp {
            until = until.min(super::unix_time(exp));
        }
        let mut entries = self.entries.lock();
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(
            (token.to_string(), audiences),
            Entry {
                response: response.clone(),
                until,
                depends_on,
            },
        );
    }
}

/// Objects that notes what is read through it.
pub struct Recording<'a> {
    inner: &'a dyn Objects,
    read: Mutex<Vec<(String, String, String, String)>>,
    /// Something was read that a revision cannot vouch for (a list, or a missing object).
    unpinned: Mutex<bool>,
}

impl<'a> Recording<'a> {
    pub fn new(inner: &'a dyn Objects) -> Self {
        Recording {
            inner,
            read: Mutex::new(Vec::new()),
            unpinned: Mutex::new(false),
        }
    }

    /// The objects read, with their current revisions; None when a decision made from them
    /// cannot be kept.
    pub fn depends_on(&self) -> Option<Vec<Dependency>> {
        if *self.unpinned.lock() {
            return None;
        }
        self.read
            .lock()
            .iter()
            .map(|key| {
                let rev = self.inner.revision(&key.0, &key.1, &key.2, &key.3)?;
                Some((key.clone(), rev))
            })
            .collect()
    }
}

#[async_trait]
impl Objects for Recording<'_> {
    fn get(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<Value> {
        let got = self.inner.get(group, resource, ns, name);
        if got.is_some() {
            self.read
                .lock()
                .push((group.into(), resource.into(), ns.into(), name.into()));
        } else {
            *self.unpinned.lock() = true;
        }
        got
    }

    fn list(&self, group: &str, resource: &str, ns: &str) -> Vec<Value> {
        *self.unpinned.lock() = true;
        self.inner.list(group, resource, ns)
    }

    fn pods_on_node(&self, node: &str) -> Vec<Value> {
        *self.unpinned.lock() = true;
        self.inner.pods_on_node(node)
    }

    fn revision(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<i64> {
        self.inner.revision(group, resource, ns, name)
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
        *self.unpinned.lock() = true;
        self.inner
            .update(group, resource, ns, name, subresource, change)
            .await
    }

    async fn create(&self, group: &str, resource: &str, ns: &str, obj: Value) -> ApiResult<Value> {
        *self.unpinned.lock() = true;
        self.inner.create(group, resource, ns, obj).await
    }
}
