//! Admission: after a write is decoded and defaulted and before it is validated and stored,
//! mutating plugins may change the object, then validating plugins may reject it (Kubernetes'
//! admission chain). Plugins run inside the registry's read-modify-write loop, so on update
//! they see the object as it is about to replace the stored one.

pub mod builtin;
pub mod certificates;
pub mod limitranger;
pub mod noderestriction;
pub mod podsecurity;
pub mod priority;
pub mod resourcequota;
pub mod serviceaccount;
pub mod taints;
#[cfg(test)]
mod tests;
pub mod tolerations;

use std::sync::Arc;

use async_trait::async_trait;
use capstan_api::catalogue::ResourceInfo;
use serde_json::Value;

use crate::auth::User;
use crate::error::ApiResult;
use crate::objects::Objects;

pub mod webhook;

/// What a write does, as admission names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }
}

/// The request being admitted.
pub struct Attributes<'a> {
    pub user: &'a User,
    pub operation: Operation,
    /// The resource in its storage version (objects given to plugins are in that version).
    pub info: &'static ResourceInfo,
    /// `""`, `"status"`, `"binding"`, `"eviction"`, `"scale"`, ...
    pub subresource: &'a str,
    pub namespace: &'a str,
    /// May be empty on create with generateName.
    pub name: &'a str,
    pub dry_run: bool,
    /// Every other object, for plugins that consult them.
    pub objects: &'a dyn Objects,
}

/// One admission plugin. Both phases default to allowing the request unchanged.
#[async_trait]
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;

    /// Mutating phase: may change `obj` (the new object; `None` on delete/connect).
    async fn admit(
        &self,
        _a: &Attributes<'_>,
        _obj: Option<&mut Value>,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        Ok(())
    }

    /// Validating phase: may only accept or reject.
    async fn validate(
        &self,
        _a: &Attributes<'_>,
        _obj: Option<&Value>,
        _old: Option<&Value>,
    ) -> ApiResult<()> {
        Ok(())
    }
}

/// The plugins in order. Every mutating phase runs before any validating phase.
#[derive(Default, Clone)]
pub struct Chain {
    pub plugins: Vec<Arc<dyn Plugin>>,
}

impl Chain {
    pub async fn admit(
        &self,
        a: &Attributes<'_>,
        mut obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        for p in &self.plugins {
            p.admit(a, obj.as_deref_mut(), old).await?;
        }
        Ok(())
    }

    pub async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        for p in &self.plugins {
            p.validate(a, obj, old).await?;
        }
        Ok(())
    }
}
