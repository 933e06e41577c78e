//! DefaultBinder: binds the pod with a `Binding` through the API (done by the scheduler's binder).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{BindPlugin, Plugin};

pub const NAME: &str = "DefaultBinder";

pub struct DefaultBinder;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(DefaultBinder))
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

impl BindPlugin for DefaultBinder {}
