//! NodeName (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "NodeName";

pub struct NodeName;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeName))
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
}
