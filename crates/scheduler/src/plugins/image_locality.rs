//! ImageLocality (being written).

use std::sync::Arc;

use serde_json::Value;

use crate::framework::Plugin;

pub const NAME: &str = "ImageLocality";

pub struct ImageLocality;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(ImageLocality))
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
}
