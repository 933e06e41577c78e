//! InterPodAffinity (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "InterPodAffinity";

pub struct InterPodAffinity;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(InterPodAffinity))
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
}
