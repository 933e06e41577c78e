//! Ownership across the `scale` subresource, as Kubernetes' scale handler keeps it: a write to
//! `/scale` is tracked on the Scale object (autoscaling/v1, `.spec.replicas`), whose
//! managedFields are the parent's entries that own the parent's replicas field, translated;
//! afterwards the Scale's entries are folded back into the parent's.

use serde_json::Value;

use super::managed::Managed;
use super::path::PathElement;
use super::set::FieldSet;
use super::updater::VersionedSet;
use super::ApplyError;

/// The Scale object's group/version.
const SCALE_GROUP_VERSION: &str = "autoscaling/v1";

fn replicas_in_scale() -> Vec<PathElement> {
    vec![PathElement::field("spec"), PathElement::field("replicas")]
}

/// The parent resource's replicas field by API version: `None` for a version that has no
/// scale subresource (custom resources); versions not listed are unknown, and their entries
/// are dropped when folding back, as Kubernetes does.
pub struct ScaleHandler<'a> {
    /// The parent object's `metadata.managedFields`.
    pub parent_entries: &'a Value,
    /// The parent's group/version the write is served at, e.g. `apps/v1`.
    pub group_version: &'a str,
    pub mappings: &'a [(&'a str, Option<&'a [PathElement]>)],
}

impl ScaleHandler<'_> {
    fn mapping(&self, api_version: &str) -> Option<Option<&[PathElement]>> {
        self.mappings
            .iter()
            .find(|(v, _)| *v == api_version)
            .map(|(_, p)| *p)
    }

    fn decode(entries: &Value) -> Result<Managed, ApplyError> {
        Managed::decode_entries(entries).map_err(ApplyError::Internal)
    }

    /// The Scale object's managedFields: every parent entry owning the replicas field, as an
    /// entry owning the Scale's `.spec.replicas` at autoscaling/v1.
    pub fn to_subresource(&self) -> Result<Value, ApplyError> {
        let parent = Self::decode(self.parent_entries)?;
        let mut out = Managed::new();
        for (id, vs) in &parent.fields {
            let Some(Some(path)) = self.mapping(&vs.api_version) else {
                continue;
            };
            if vs.set.has(path) {
                out.fields.insert(
                    id.clone(),
                    VersionedSet {
                        set: FieldSet::from_paths([replicas_in_scale().as_slice()]),
                        api_version: SCALE_GROUP_VERSION.into(),
                        applied: vs.applied,
                    },
                );
                if let Some(t) = parent.times.get(id) {
                    out.times.insert(id.clone(), t.clone());
                }
            }
        }
        Ok(out.encode())
    }

    /// The parent's managedFields after a write through `/scale` left `scale_entries`: parent
    /// entries lose the replicas field unless their manager still owns it on the Scale, and
    /// Scale entries that own replicas come back as entries owning the parent's field.
    pub fn to_parent(&self, scale_entries: &Value) -> Result<Value, ApplyError> {
        let parent = Self::decode(self.parent_entries)?;
        let mut scale = Self::decode(scale_entries)?;
        let mut out = Managed::new();
        let keep_time = |out: &mut Managed, id: &String| {
            if let Some(t) = parent.times.get(id) {
                out.times.insert(id.clone(), t.clone());
            }
        };
        for (id, vs) in &parent.fields {
            let Some(path) = self.mapping(&vs.api_version) else {
                continue;
            };
            let Some(path) = path.filter(|p| vs.set.has(p)) else {
                out.fields.insert(id.clone(), vs.clone());
                keep_time(&mut out, id);
                continue;
            };
            if scale.fields.remove(id).is_some() {
                out.fields.insert(id.clone(), vs.clone());
                keep_time(&mut out, id);
            } else {
                let rest = vs.set.difference(&FieldSet::from_paths([path]));
                if !rest.is_empty() {
                    out.fields.insert(
                        id.clone(),
                        VersionedSet {
                            set: rest,
                            ..vs.clone()
                        },
                    );
                    keep_time(&mut out, id);
                }
            }
        }
        let parent_path = self.mapping(self.group_version).flatten();
        for (id, vs) in scale.fields {
            if !vs.set.has(&replicas_in_scale()) {
                continue;
            }
            let set = match parent_path {
                Some(p) => FieldSet::from_paths([p]),
                None => FieldSet::new(),
            };
            out.fields.insert(
                id.clone(),
                VersionedSet {
                    set,
                    api_version: self.group_version.into(),
                    applied: vs.applied,
                },
            );
            // Kubernetes takes the time from the parent's entries here (none for a new one).
            match parent.times.get(&id) {
                Some(t) => out.times.insert(id, t.clone()),
                None => out.times.remove(&id),
            };
        }
        Ok(out.encode())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn replicas() -> Vec<PathElement> {
        vec![PathElement::field("spec"), PathElement::field("replicas")]
    }

    fn entry(manager: &str, op: &str, version: &str, fields: Value, time: &str) -> Value {
        json!({"manager": manager, "operation": op, "apiVersion": version, "time": time,
               "fieldsType": "FieldsV1", "fieldsV1": fields})
    }

    #[test]
    fn replicas_owners_move_to_scale_and_back() {
        let path = replicas();
        let mappings = [("apps/v1", Some(path.as_slice()))];
        let parent = json!([
            entry(
                "kubectl",
                "Apply",
                "apps/v1",
                json!({"f:spec": {"f:replicas": {}, "f:paused": {}}}),
                "2024-01-01T00:00:00Z"
            ),
            entry(
                "other",
                "Update",
                "apps/v1",
                json!({"f:metadata": {"f:labels": {"f:a": {}}}}),
                "2024-01-01T00:00:01Z"
            ),
            entry(
                "old",
                "Update",
                "extensions/v1beta1",
                json!({"f:spec": {"f:replicas": {}}}),
                "2024-01-01T00:00:02Z"
            ),
        ]);
        let h = ScaleHandler {
            parent_entries: &parent,
            group_version: "apps/v1",
            mappings: &mappings,
        };
        assert_eq!(
            h.to_subresource().unwrap(),
            json!([entry(
                "kubectl",
                "Apply",
                "autoscaling/v1",
                json!({"f:spec": {"f:replicas": {}}}),
                "2024-01-01T00:00:00Z"
            )])
        );
        // An autoscaler took replicas through /scale: kubectl no longer owns it.
        let scale = json!([entry(
            "hpa",
            "Update",
            "autoscaling/v1",
            json!({"f:spec": {"f:replicas": {}}}),
            "2024-01-01T00:01:00Z"
        )]);
        let back = h.to_parent(&scale).unwrap();
        assert_eq!(
            back,
            json!([
                entry("kubectl", "Apply", "apps/v1", json!({"f:spec": {"f:paused": {}}}),
                      "2024-01-01T00:00:00Z"),
                {"manager": "hpa", "operation": "Update", "apiVersion": "apps/v1",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}},
                entry("other", "Update", "apps/v1", json!({"f:metadata": {"f:labels": {"f:a": {}}}}),
                      "2024-01-01T00:00:01Z"),
            ])
        );
    }
}
