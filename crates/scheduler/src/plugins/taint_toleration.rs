//! TaintToleration (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "TaintToleration";

pub struct TaintToleration;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(TaintToleration))
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
}
