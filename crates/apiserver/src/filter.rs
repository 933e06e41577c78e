//! Which objects a list or watch wants: namespace, label selector, field selector.

use capstan_api::catalogue::ResourceInfo;
use capstan_api::selector::field::{FieldRequirement, FieldSelector};
use capstan_api::selector::label::LabelSelector;

use crate::error::{ApiError, ApiResult};
use crate::watch_cache::{CacheEvent, CachedObject, EventType};

/// A list/watch filter. Cheap to evaluate against a cached object. Field selector terms are
/// kept under the selectable field names of the storage version, which cached objects carry.
#[derive(Debug, Clone)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: Option<LabelSelector>,
    pub fields: Option<FieldSelector>,
    /// The exact `spec.nodeName` the field selector asks for, if any (indexed).
    node_name: Option<String>,
}

impl Filter {
    pub fn everything() -> Filter {
        Filter {
            namespace: None,
            labels: None,
            fields: None,
            node_name: None,
        }
    }

    /// Build from query parameters, checking the selectors against the kind.
    pub fn new(
        info: &ResourceInfo,
        namespace: &str,
        label_selector: &str,
        field_selector: &str,
    ) -> ApiResult<Filter> {
        let labels = if label_selector.trim().is_empty() {
            None
        } else {
            Some(
                LabelSelector::parse(label_selector)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?,
            )
        };
        let fields = if field_selector.trim().is_empty() {
            None
        } else {
            let fs = FieldSelector::parse(field_selector)
                .map_err(|e| ApiError::bad_request(e.to_string()))?;
            // Each label names a selectable field, under the name cached objects know it by:
            // events.k8s.io's `regarding.name` is the stored event's `involvedObject.name`, a
            // pod's legacy `spec.host` its `spec.nodeName`.
            let mut renamed = false;
            let mut terms = Vec::with_capacity(fs.requirements().len());
            for req in fs.requirements() {
                let field = if info.custom {
                    crate::customresource::check_field(info, &req.field)
                        .map_err(ApiError::bad_request)?;
                    req.field.as_str()
                } else {
                    capstan_api::fields::check(info.group, info.kind, &req.field)
                        .map_err(ApiError::bad_request)?
                };
                renamed |= field != req.field;
                terms.push(
                    FieldRequirement {
                        field: field.to_string(),
                        ..req.clone()
                    }
                    .to_string(),
                );
            }
            if renamed {
                FieldSelector::parse(&terms.join(","))
                    .map(Some)
                    .map_err(|e| ApiError::bad_request(e.to_string()))?
            } else {
                Some(fs)
            }
        };
        let node_name = fields
            .as_ref()
            .and_then(|f| f.exact_match("spec.nodeName"))
            .map(str::to_string);
        Ok(Filter {
            namespace: (!namespace.is_empty()).then(|| namespace.to_string()),
            labels,
            fields,
            node_name,
        })
    }

    pub fn node_name(&self) -> Option<&str> {
        self.node_name.as_deref()
    }

    pub fn matches(&self, obj: &CachedObject) -> bool {
        if let Some(ns) = &self.namespace {
            if &obj.namespace != ns {
                return false;
            }
        }
        if let Some(l) = &self.labels {
            if !l.matches_fn(|k| obj.label(k)) {
                return false;
            }
        }
        if let Some(f) = &self.fields {
            if !f.matches(|field| match field {
                "metadata.name" => Some(obj.name.clone()),
                "metadata.namespace" => Some(obj.namespace.clone()),
                other => obj.field(other).map(str::to_string),
            }) {
                return false;
            }
        }
        true
    }

    /// How a watcher with this filter sees `ev`: an update into or out of the filter becomes
    /// an ADDED or DELETED, as in Kubernetes.
    pub fn event_type(&self, ev: &CacheEvent) -> Option<EventType> {
        let now = ev.kind != EventType::Deleted && self.matches(&ev.obj);
        let before = ev.prev.as_ref().is_some_and(|p| self.matches(p));
        match (ev.kind, before, now) {
            (EventType::Deleted, true, _) => Some(EventType::Deleted),
            (EventType::Deleted, false, _) => None,
            (_, true, true) => Some(EventType::Modified),
            (_, false, true) => Some(EventType::Added),
            (_, true, false) => Some(EventType::Deleted),
            (_, false, false) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_api::catalogue::find;

    #[test]
    fn field_labels_are_kept_under_the_stored_field_names() {
        let events = find("events.k8s.io", "v1", "events").unwrap();
        let f = Filter::new(
            events,
            "",
            "",
            "regarding.name=web-0,reportingController=kubelet",
        )
        .unwrap();
        let fields: Vec<String> = f
            .fields
            .unwrap()
            .requirements()
            .iter()
            .map(|r| r.to_string())
            .collect();
        assert_eq!(
            fields,
            ["involvedObject.name=web-0", "reportingComponent=kubelet"]
        );
        // A pod's legacy label is its node name, indexed as such.
        let pods = find("", "v1", "pods").unwrap();
        let f = Filter::new(pods, "", "", "spec.host=n1").unwrap();
        assert_eq!(f.node_name(), Some("n1"));
        assert!(Filter::new(events, "", "", "involvedObject.name=x").is_err());
    }
}
