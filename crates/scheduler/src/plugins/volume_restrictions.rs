//! VolumeRestrictions (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "VolumeRestrictions";

pub struct VolumeRestrictions;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(VolumeRestrictions))
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
}
