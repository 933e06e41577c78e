//! SchedulingGates (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "SchedulingGates";

pub struct SchedulingGates;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(SchedulingGates))
}

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }
}
