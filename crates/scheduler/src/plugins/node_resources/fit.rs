//! NodeResourcesFit (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "NodeResourcesFit";

pub struct NodeResourcesFit;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeResourcesFit))
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
}
