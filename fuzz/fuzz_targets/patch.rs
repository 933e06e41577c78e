//! The three patch engines on arbitrary documents and patches. Must never panic.
#![no_main]

use capstan_api::patch::{json, merge, strategic};
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    // The input is "<document>\0<patch>".
    let Some(split) = data.iter().position(|b| *b == 0) else { return };
    let (Ok(doc), Ok(patch)) = (
        serde_json::from_slice::<Value>(&data[..split]),
        serde_json::from_slice::<Value>(&data[split + 1..]),
    ) else {
        return;
    };
    let _ = json::apply(&doc, &patch);
    let _ = merge::apply(&doc, &patch);
    let _ = strategic::apply("io.k8s.api.apps.v1.Deployment", &doc, &patch);
    let _ = strategic::apply("io.k8s.api.core.v1.Pod", &doc, &patch);
});
