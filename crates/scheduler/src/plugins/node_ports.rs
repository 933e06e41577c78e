//! NodePorts (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "NodePorts";

pub struct NodePorts;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodePorts))
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }
}
