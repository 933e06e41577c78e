//! NodeAffinity (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "NodeAffinity";

pub struct NodeAffinity;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeAffinity))
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
}
