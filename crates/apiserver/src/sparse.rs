//! Decoding only the parts of a stored object the watch cache indexes: its name, namespace
//! and labels, and the subtrees its kind's selectable fields are read from. Everything else
//! (managedFields, containers, volumes, conditions ...) is parsed past without being built,
//! which makes caching an event several times cheaper than decoding the whole object.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, OnceLock};

use capstan_api::catalogue::ResourceInfo;
use parking_lot::RwLock;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::{Map, Value};

/// Which keys of a JSON object to keep: a key with no children is kept whole.
#[derive(Debug, Default)]
pub struct Keep {
    children: BTreeMap<String, Keep>,
    /// Kept whole, whatever it holds.
    whole: bool,
}

impl Keep {
    fn insert(&mut self, path: &[&str]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        let child = self.children.entry(first.to_string()).or_default();
        if rest.is_empty() {
            // Kept whole (drops any narrower paths asked for before).
            child.children.clear();
            child.whole = true;
        } else if !child.whole {
            child.insert(rest);
        }
    }
}

/// Extra paths some selectable fields are computed from (see `capstan_api::fields`).
fn companions(internal: &str) -> &'static [&'static str] {
    match internal {
        "status.podIP" => &["status.podIPs"],
        "spec.clusterIP" => &["spec.clusterIPs"],
        "status.successful" => &["status.succeeded"],
        "source" => &[
            "deprecatedSource",
            "reportingComponent",
            "reportingController",
        ],
        "reportingComponent" => &["reportingController"],
        _ if internal.starts_with("involvedObject.") => &["involvedObject", "regarding"],
        _ => &[],
    }
}

/// The keep-tree of a built-in kind: metadata's name, namespace and labels, and for every
/// selectable field the subtree two levels down its path (one for top-level fields).
fn keep_for(group: &str, kind: &str) -> Keep {
    let mut keep = Keep::default();
    for p in [
        "apiVersion",
        "kind",
        "metadata.name",
        "metadata.namespace",
        "metadata.labels",
    ] {
        keep.insert(&p.split('.').collect::<Vec<_>>());
    }
    for label in capstan_api::fields::supported(group, kind) {
        let Ok(internal) = capstan_api::fields::check(group, kind, label) else {
            continue;
        };
        for path in std::iter::once(internal).chain(companions(internal).iter().copied()) {
            let segs: Vec<&str> = path.split('.').take(2).collect();
            keep.insert(&segs);
        }
    }
    keep
}

/// The keep-tree of a built-in resource, made once.
pub fn keep_of(info: &'static ResourceInfo) -> Arc<Keep> {
    static KEEPS: OnceLock<RwLock<HashMap<usize, Arc<Keep>>>> = OnceLock::new();
    let map = KEEPS.get_or_init(Default::default);
    let key = info as *const ResourceInfo as usize;
    if let Some(k) = map.read().get(&key) {
        return k.clone();
    }
    let k = Arc::new(keep_for(info.group, info.kind));
    map.write().insert(key, k.clone());
    k
}

/// Parse `json`, building only what `keep` names.
pub fn decode(json: &[u8], keep: &Keep) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let v = Seed(keep).deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

struct Seed<'a>(&'a Keep);

impl<'de> DeserializeSeed<'de> for Seed<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.0.whole {
            return serde::Deserialize::deserialize(d);
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seed<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(Key(key)) = access.next_key::<Key<'de>>()? {
            match self.0.children.get(key.as_ref()) {
                Some(child) => {
                    let v = access.next_value_seed(Seed(child))?;
                    out.insert(key.into_owned(), v);
                }
                None => {
                    access.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    // Anything but an object where the tree expects one is kept as it is.
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element::<Value>()? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(v.into())
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// An object key, borrowed from the input unless it had escapes (serde's `Cow<str>` always
/// copies).
struct Key<'de>(Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn info(group: &str, kind: &str) -> &'static ResourceInfo {
        capstan_api::catalogue::RESOURCES
            .iter()
            .find(|r| r.group == group && r.kind == kind)
            .unwrap()
    }

    /// The selectable fields and metadata from the sparse decode equal those of the whole.
    fn same_index(group: &str, kind: &str, obj: Value) {
        let json = serde_json::to_vec(&obj).unwrap();
        let sparse = decode(&json, &keep_of(info(group, kind))).unwrap();
        for label in capstan_api::fields::supported(group, kind) {
            assert_eq!(
                capstan_api::fields::get(group, kind, &sparse, label),
                capstan_api::fields::get(group, kind, &obj, label),
                "{kind} field {label}"
            );
        }
        for key in ["name", "namespace", "labels"] {
            assert_eq!(
                sparse["metadata"].get(key),
                obj["metadata"].get(key),
                "{key}"
            );
        }
        assert_eq!(sparse["apiVersion"], obj["apiVersion"]);
        assert!(json.len() > serde_json::to_vec(&sparse).unwrap().len());
    }

    fn meta() -> Value {
        json!({"name": "a", "namespace": "ns", "labels": {"app": "web", "tier": "x"},
               "annotations": {"k": "v"}, "uid": "u",
               "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]})
    }

    #[test]
    fn kinds_with_selectable_fields_index_the_same() {
        same_index(
            "",
            "Pod",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta(),
            "spec": {"nodeName": "n1", "restartPolicy": "Always", "schedulerName": "s",
                     "serviceAccountName": "sa", "hostNetwork": true,
                     "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "podIP": "10.0.0.1",
                       "podIPs": [{"ip": "10.0.0.2"}], "nominatedNodeName": "n2",
                       "conditions": [{"type": "Ready", "status": "True"}]}}),
        );
        same_index(
            "",
            "Pod",
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta(),
            "spec": {"containers": []}, "status": {"podIP": "10.0.0.3"}}),
        );
        same_index(
            "",
            "Service",
            json!({"apiVersion": "v1", "kind": "Service",
            "metadata": meta(), "spec": {"clusterIPs": ["10.96.0.9"], "type": "ClusterIP",
            "ports": [{"port": 80}]}}),
        );
        same_index(
            "",
            "Secret",
            json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": meta(), "type": "Opaque", "data": {"a": "Yg=="}}),
        );
        same_index(
            "",
            "Node",
            json!({"apiVersion": "v1", "kind": "Node", "metadata": meta(),
            "spec": {"unschedulable": true, "podCIDR": "10.1.0.0/24"},
            "status": {"capacity": {"cpu": "2"}}}),
        );
        same_index(
            "",
            "Namespace",
            json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": meta(), "status": {"phase": "Active"}}),
        );
        same_index(
            "batch",
            "Job",
            json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": meta(), "spec": {"template": {}}, "status": {"succeeded": 3}}),
        );
        same_index(
            "apps",
            "ReplicaSet",
            json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": meta(), "spec": {"replicas": 2}, "status": {"replicas": 2}}),
        );
        same_index(
            "",
            "Event",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": meta(),
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": "ns", "uid": "u"},
            "reason": "Started", "type": "Normal", "source": {"component": "kubelet"},
            "reportingComponent": "kubelet", "message": "m"}),
        );
        same_index(
            "",
            "Event",
            json!({"apiVersion": "v1", "kind": "Event", "metadata": meta(),
            "regarding": {"kind": "Pod", "name": "p"}, "reason": "Started",
            "deprecatedSource": {}, "reportingController": "ctl", "note": "n"}),
        );
    }

    #[test]
    fn rejects_what_is_not_json() {
        let keep = keep_of(info("", "Pod"));
        assert!(decode(b"{\"metadata\":{\"name\":\"a\"}", &keep).is_err());
        assert!(decode(b"{\"spec\":{\"x\":[1,2}}", &keep).is_err());
        assert!(decode(b"{} x", &keep).is_err());
        assert_eq!(
            decode(
                b"{\"metadata\":{\"name\":\"a\\u00e9\"},\"spec\":{\"x\":\"\\\"\"}}",
                &keep
            )
            .unwrap()["metadata"]["name"],
            "a\u{e9}"
        );
        // A key with an escape is still matched.
        let v = decode(
            b"{\"metadata\":{\"na\\u006de\":\"b\",\"uid\":\"u\"}}",
            &keep,
        )
        .unwrap();
        assert_eq!(v["metadata"], json!({"name": "b"}));
    }
}
