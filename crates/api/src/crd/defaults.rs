//! apiextensions/v1 defaulting of CustomResourceDefinitions (`SetObjectDefaults_CustomResourceDefinition`).

use serde_json::{json, Map, Value};

/// Apply Kubernetes' v1 defaults to a CRD: `spec.names.singular` (the lower-cased kind),
/// `spec.names.listKind` (`<Kind>List`), `spec.conversion` (`strategy: None`), a conversion
/// webhook service's `port` (443), and `status.storedVersions` (the storage version) when
/// empty. Nothing else: `served`, `storage` and `scope` have no defaults.
pub fn default_crd(crd: &mut Value) {
    let Some(obj) = crd.as_object_mut() else {
        return;
    };
    let spec = obj
        .entry("spec")
        .or_insert_with(|| Value::Object(Map::new()));
    let storage = default_spec(spec);
    let no_stored = obj
        .get("status")
        .and_then(|s| s.get("storedVersions"))
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty);
    if let (true, Some(v)) = (no_stored, storage) {
        let status = obj
            .entry("status")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(s) = status.as_object_mut() {
            s.insert("storedVersions".into(), json!([v]));
        }
    }
}

/// The spec defaults; returns the first storage version's name.
fn default_spec(spec: &mut Value) -> Option<String> {
    let spec = spec.as_object_mut()?;
    let names = spec
        .entry("names")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(n) = names.as_object_mut() {
        let kind = n
            .get("kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if n.get("singular")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            n.insert("singular".into(), Value::String(kind.to_lowercase()));
        }
        if n.get("listKind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
            && !kind.is_empty()
        {
            n.insert("listKind".into(), Value::String(format!("{kind}List")));
        }
    }
    match spec.get_mut("conversion") {
        None | Some(Value::Null) => {
            spec.insert("conversion".into(), json!({"strategy": "None"}));
        }
        Some(conversion) => {
            if let Some(service) = conversion
                .pointer_mut("/webhook/clientConfig/service")
                .and_then(Value::as_object_mut)
            {
                if service.get("port").is_none_or(Value::is_null) {
                    service.insert("port".into(), json!(443));
                }
            }
        }
    }
    spec.get("versions")
        .and_then(Value::as_array)?
        .iter()
        .find(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .and_then(|v| v.get("name").and_then(Value::as_str))
        .map(str::to_string)
}
