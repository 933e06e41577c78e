//! PodTopologySpread (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "PodTopologySpread";

pub struct PodTopologySpread;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(PodTopologySpread))
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
}
