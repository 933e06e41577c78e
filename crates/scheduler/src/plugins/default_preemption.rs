//! DefaultPreemption (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "DefaultPreemption";

pub struct DefaultPreemption;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(DefaultPreemption))
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
}
