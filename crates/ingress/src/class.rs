//! Which Ingresses this controller serves.
//!
//! An Ingress is ours when
//! - it carries the deprecated annotation `kubernetes.io/ingress.class` with our class name
//!   (the annotation decides alone, as it did before IngressClass existed); otherwise
//! - its `spec.ingressClassName` is our class name and the IngressClass of that name has
//!   `spec.controller: capstan.dev/ingress`; or
//! - it names no class at all and our IngressClass is marked the cluster's default
//!   (`ingressclass.kubernetes.io/is-default-class: "true"`).
//!
//! An IngressClass of our name that belongs to another controller makes nothing ours except
//! through the annotation.

use k8s_openapi::api::networking::v1::{Ingress, IngressClass};

/// The `spec.controller` of IngressClasses this controller implements.
pub const CONTROLLER: &str = "capstan.dev/ingress";
/// Marks the IngressClass that Ingresses without a class belong to.
pub const DEFAULT_CLASS_ANNOTATION: &str = "ingressclass.kubernetes.io/is-default-class";
/// The class annotation Ingresses used before `spec.ingressClassName`.
pub const LEGACY_CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// What the cluster says about our class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OurClass {
    /// The class name (`--ingress-class`).
    pub name: String,
    /// The IngressClass of that name exists with our controller.
    pub exists: bool,
    /// ... and is the default class.
    pub default: bool,
}

impl OurClass {
    /// Our class as the IngressClass object `class` (None: not created) describes it.
    pub fn new(name: &str, class: Option<&IngressClass>) -> OurClass {
        let exists = class.is_some_and(|c| {
            c.spec
                .as_ref()
                .and_then(|s| s.controller.as_deref())
                .is_some_and(|ctl| ctl == CONTROLLER)
        });
        let default = exists
            && class
                .and_then(|c| c.metadata.annotations.as_ref())
                .and_then(|a| a.get(DEFAULT_CLASS_ANNOTATION))
                .is_some_and(|v| v == "true");
        OurClass {
            name: name.to_string(),
            exists,
            default,
        }
    }

    /// Whether `ing` is ours.
    pub fn owns(&self, ing: &Ingress) -> bool {
        if let Some(class) = ing
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(LEGACY_CLASS_ANNOTATION))
        {
            return class == &self.name;
        }
        match ing
            .spec
            .as_ref()
            .and_then(|s| s.ingress_class_name.as_deref())
        {
            Some(class) => class == self.name && self.exists,
            None => self.default,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::networking::v1::{IngressClassSpec, IngressSpec};
    use std::collections::BTreeMap;

    fn class(name: &str, controller: &str, default: Option<&str>) -> IngressClass {
        let mut c = IngressClass {
            spec: Some(IngressClassSpec {
                controller: Some(controller.into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        c.metadata.name = Some(name.into());
        if let Some(d) = default {
            c.metadata.annotations = Some(BTreeMap::from([(
                DEFAULT_CLASS_ANNOTATION.into(),
                d.into(),
            )]));
        }
        c
    }

    fn ingress(class: Option<&str>, annotation: Option<&str>) -> Ingress {
        let mut i = Ingress {
            spec: Some(IngressSpec {
                ingress_class_name: class.map(Into::into),
                ..Default::default()
            }),
            ..Default::default()
        };
        if let Some(a) = annotation {
            i.metadata.annotations =
                Some(BTreeMap::from([(LEGACY_CLASS_ANNOTATION.into(), a.into())]));
        }
        i
    }

    #[test]
    fn class_name_needs_our_ingress_class() {
        let ours = OurClass::new("capstan", Some(&class("capstan", CONTROLLER, None)));
        assert!(ours.owns(&ingress(Some("capstan"), None)));
        assert!(!ours.owns(&ingress(Some("nginx"), None)));
        // No class: only when ours is the default.
        assert!(!ours.owns(&ingress(None, None)));

        // A class of our name run by another controller is not ours.
        let foreign = OurClass::new(
            "capstan",
            Some(&class("capstan", "k8s.io/ingress-nginx", None)),
        );
        assert!(!foreign.owns(&ingress(Some("capstan"), None)));
        let missing = OurClass::new("capstan", None);
        assert!(!missing.owns(&ingress(Some("capstan"), None)));
    }

    #[test]
    fn default_class_takes_ingresses_without_a_class() {
        let ours = OurClass::new("capstan", Some(&class("capstan", CONTROLLER, Some("true"))));
        assert!(ours.default);
        assert!(ours.owns(&ingress(None, None)));
        assert!(!ours.owns(&ingress(Some("other"), None)));
        let not_default = OurClass::new(
            "capstan",
            Some(&class("capstan", CONTROLLER, Some("false"))),
        );
        assert!(!not_default.owns(&ingress(None, None)));
        // Another controller's default class does not make class-less Ingresses ours.
        let foreign = OurClass::new("capstan", Some(&class("capstan", "x/y", Some("true"))));
        assert!(!foreign.owns(&ingress(None, None)));
    }

    #[test]
    fn legacy_annotation_decides_alone() {
        let missing = OurClass::new("capstan", None);
        assert!(missing.owns(&ingress(None, Some("capstan"))));
        assert!(!missing.owns(&ingress(None, Some("nginx"))));
        let ours = OurClass::new("capstan", Some(&class("capstan", CONTROLLER, Some("true"))));
        assert!(!ours.owns(&ingress(None, Some("nginx"))));
    }
}
