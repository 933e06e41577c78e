//! NodeUnschedulable (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "NodeUnschedulable";

pub struct NodeUnschedulable;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeUnschedulable))
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
}
