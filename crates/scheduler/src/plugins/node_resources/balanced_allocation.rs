//! NodeResourcesBalancedAllocation (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "NodeResourcesBalancedAllocation";

pub struct NodeResourcesBalancedAllocation;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeResourcesBalancedAllocation))
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
}
