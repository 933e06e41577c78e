//! Request decoding: JSON and YAML bodies, then schema pruning and type checks, as a create
//! of a Pod would run them. Must never panic.
#![no_main]

use capstan_apiserver::codec::{decode_body, BodyType};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let kind = if data.first().is_some_and(|b| b & 1 == 1) { BodyType::Yaml } else { BodyType::Json };
    if let Ok(mut v) = decode_body(data, kind) {
        if let Some(schema) = capstan_api::schema::Schemas::builtin().for_kind("", "v1", "Pod") {
            let _ = schema.check_types(&v);
            let _ = schema.prune(&mut v);
        }
        let _ = capstan_api::validation::validate("", "Pod", &v);
    }
});
