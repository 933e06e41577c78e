//! Which PersistentVolume a claim gets (Kubernetes' `findBestMatchForClaim` and
//! `FindMatchingVolume`): a volume pre-bound to the claim wins; otherwise the smallest
//! Available volume of the claim's class, big enough, of the same volume mode and matching the
//! claim's selector, looked for first among volumes with the fewest access modes that still
//! include every mode the claim asks for.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use capstan_api::validation::quantity;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::{
    claim_key, ANN_BETA_DEFAULT_CLASS, ANN_BETA_STORAGE_CLASS, ANN_DEFAULT_CLASS, FILESYSTEM,
    VOLUME_AVAILABLE,
};
use crate::util;

/// The claim's storage class: the beta annotation, else `spec.storageClassName` ("" for none).
pub fn claim_class(claim: &PersistentVolumeClaim) -> &str {
    if let Some(c) = annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS) {
        return c;
    }
    claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

/// Whether the claim names a class at all (an empty name counts: it asks for no class).
pub fn claim_has_class(claim: &PersistentVolumeClaim) -> bool {
    annotation(&claim.metadata, ANN_BETA_STORAGE_CLASS).is_some()
        || claim
            .spec
            .as_ref()
            .is_some_and(|s| s.storage_class_name.is_some())
}

/// The volume's storage class: the beta annotation, else `spec.storageClassName`.
pub fn volume_class(volume: &PersistentVolume) -> &str {
    if let Some(c) = annotation(&volume.metadata, ANN_BETA_STORAGE_CLASS) {
        return c;
    }
    volume
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.as_deref())
        .unwrap_or("")
}

pub fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The volume's `claimRef` names this claim (and, once it has a uid, this very claim).
pub fn is_volume_bound_to_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name.as_deref().unwrap_or("") != claim.metadata.name.as_deref().unwrap_or("")
        || r.namespace.as_deref().unwrap_or("") != claim.metadata.namespace.as_deref().unwrap_or("")
    {
        return false;
    }
    match r.uid.as_deref() {
        None | Some("") => true,
        Some(uid) => Some(uid) == claim.metadata.uid.as_deref(),
    }
}

/// A quantity in nano-units (0 when missing or malformed, as Go's zero Quantity).
pub fn nanos(q: Option<&Quantity>) -> i128 {
    q.and_then(|q| quantity::parse(&q.0))
        .map(|q| q.nanos)
        .unwrap_or(0)
}

fn storage(list: Option<&BTreeMap<String, Quantity>>) -> Option<&Quantity> {
    list?.get("storage")
}

pub fn claim_request(claim: &PersistentVolumeClaim) -> Option<&Quantity> {
    storage(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    )
}

pub fn volume_capacity(volume: &PersistentVolume) -> Option<&Quantity> {
    storage(volume.spec.as_ref().and_then(|s| s.capacity.as_ref()))
}

/// Claim and volume disagree on the volume mode (unset means Filesystem).
pub fn volume_mode_mismatch(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let c = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or(FILESYSTEM);
    let v = volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_mode.as_deref())
        .unwrap_or(FILESYSTEM);
    c != v
}

fn claim_modes(claim: &PersistentVolumeClaim) -> &[String] {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
}

fn volume_modes(volume: &PersistentVolume) -> &[String] {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or(&[])
}

/// The volume offers every access mode the claim asks for.
pub fn check_access_modes(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let offered = volume_modes(volume);
    claim_modes(claim).iter().all(|m| offered.contains(m))
}

fn claim_vac(claim: &PersistentVolumeClaim) -> &str {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or("")
}

fn volume_vac(volume: &PersistentVolume) -> &str {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or("")
}

/// Why a volume the claim asked for by name cannot be bound to it (`checkVolumeSatisfyClaim`).
pub fn check_volume_satisfy_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    if volume.metadata.deletion_timestamp.is_some() {
        return Err(format!(
            "the volume is marked for deletion {:?}",
            volume.metadata.name.as_deref().unwrap_or("")
        ));
    }
    // Compared as whole units rounded up, as Quantity.Value() does.
    let whole = |n: i128| n.div_euclid(1_000_000_000) + i128::from(n.rem_euclid(1_000_000_000) > 0);
    if whole(nanos(volume_capacity(volume))) < whole(nanos(claim_request(claim))) {
        return Err("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, volume) {
        return Err("incompatible volumeMode".into());
    }
    if !check_access_modes(claim, volume) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

/// A set of access modes in Kubernetes' index order (RWO, ROX, RWX, RWOP, then others).
fn mode_set(modes: &[String]) -> Vec<String> {
    const ORDER: [&str; 4] = [
        "ReadWriteOnce",
        "ReadOnlyMany",
        "ReadWriteMany",
        "ReadWriteOncePod",
    ];
    let set: BTreeSet<&str> = modes.iter().map(String::as_str).collect();
    let mut out: Vec<String> = ORDER
        .iter()
        .filter(|m| set.contains(*m))
        .map(|m| m.to_string())
        .collect();
    out.extend(
        set.iter()
            .filter(|m| !ORDER.contains(m))
            .map(|m| m.to_string()),
    );
    out
}

/// The best volume for an unbound claim among `volumes` (`Err`: the claim's selector is
/// invalid). With `delay_binding` (WaitForFirstConsumer) only a volume pre-bound to the claim
/// is returned: the scheduler picks the others.
pub fn find_best_match(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    delay_binding: bool,
) -> Result<Option<Arc<PersistentVolume>>, String> {
    let mut groups: BTreeMap<Vec<String>, Vec<&Arc<PersistentVolume>>> = BTreeMap::new();
    for v in volumes {
        groups.entry(mode_set(volume_modes(v))).or_default().push(v);
    }
    let wanted = claim_modes(claim);
    let mut candidates: Vec<(&Vec<String>, &Vec<&Arc<PersistentVolume>>)> = groups
        .iter()
        .filter(|(modes, _)| wanted.iter().all(|m| modes.contains(m)))
        .collect();
    candidates.sort_by_key(|(modes, _)| modes.len());
    for (_, vols) in candidates {
        if let Some(v) = find_matching_volume(claim, vols, delay_binding)? {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    volumes: &[&Arc<PersistentVolume>],
    delay_binding: bool,
) -> Result<Option<Arc<PersistentVolume>>, String> {
    // VolumeAttributesClass is off by default in v1.32: a claim asking for one gets no volume.
    if !claim_vac(claim).is_empty() {
        return Ok(None);
    }
    let requested = nanos(claim_request(claim));
    let class = claim_class(claim);
    let selector = match claim.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        None => None,
        Some(s) => Some(util::matcher(s).ok_or_else(|| {
            format!(
                "error creating internal label selector for claim: {}: invalid label selector",
                claim_key(claim)
            )
        })?),
    };
    let mut smallest: Option<(&Arc<PersistentVolume>, i128)> = None;
    for v in volumes {
        let spec = v.spec.as_ref();
        if spec.and_then(|s| s.claim_ref.as_ref()).is_some() && !is_volume_bound_to_claim(v, claim)
        {
            continue;
        }
        let size = nanos(volume_capacity(v));
        if size < requested {
            continue;
        }
        if volume_mode_mismatch(claim, v) {
            continue;
        }
        if claim_vac(claim) != volume_vac(v) {
            continue;
        }
        if v.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if is_volume_bound_to_claim(v, claim) {
            return Ok(Some((*v).clone()));
        }
        if delay_binding {
            continue;
        }
        let phase = v.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some(VOLUME_AVAILABLE) {
            continue;
        }
        if let Some(m) = &selector {
            if !util::matches(m, v.metadata.labels.as_ref()) {
                continue;
            }
        }
        if volume_class(v) != class {
            continue;
        }
        if smallest.is_none_or(|(_, s)| s > size) {
            smallest = Some((v, size));
        }
    }
    Ok(smallest.map(|(v, _)| (*v).clone()))
}

/// The default StorageClass: of those annotated as default, the newest (then by name).
pub fn default_class(classes: &[Arc<StorageClass>]) -> Option<Arc<StorageClass>> {
    let mut defaults: Vec<&Arc<StorageClass>> = classes
        .iter()
        .filter(|c| {
            annotation(&c.metadata, ANN_DEFAULT_CLASS) == Some("true")
                || annotation(&c.metadata, ANN_BETA_DEFAULT_CLASS) == Some("true")
        })
        .collect();
    defaults.sort_by(|a, b| {
        let t = |c: &StorageClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
        t(b).cmp(&t(a))
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    defaults.first().map(|c| (*c).clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ObjectReference, PersistentVolumeClaimSpec, PersistentVolumeSpec, PersistentVolumeStatus,
        VolumeResourceRequirements,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};
    use k8s_openapi::jiff::Timestamp;

    fn pv(name: &str, size: &str, modes: &[&str], class: &str) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                capacity: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
                access_modes: Some(modes.iter().map(|m| m.to_string()).collect()),
                storage_class_name: (!class.is_empty()).then(|| class.to_string()),
                ..Default::default()
            }),
            status: Some(PersistentVolumeStatus {
                phase: Some("Available".into()),
                ..Default::default()
            }),
        }
    }

    fn pvc(size: &str, modes: &[&str], class: Option<&str>) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("ns".into()),
                uid: Some("uid-1".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(modes.iter().map(|m| m.to_string()).collect()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
                    ..Default::default()
                }),
                storage_class_name: class.map(str::to_string),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn best(claim: &PersistentVolumeClaim, vols: Vec<PersistentVolume>) -> Option<String> {
        let vols: Vec<Arc<PersistentVolume>> = vols.into_iter().map(Arc::new).collect();
        find_best_match(claim, &vols, false)
            .unwrap()
            .and_then(|v| v.metadata.name.clone())
    }

    const RWO: &str = "ReadWriteOnce";
    const RWX: &str = "ReadWriteMany";
    const ROX: &str = "ReadOnlyMany";

    #[test]
    fn the_smallest_volume_that_fits_wins() {
        let claim = pvc("1Gi", &[RWO], None);
        let vols = vec![
            pv("big", "10Gi", &[RWO], ""),
            pv("small", "500Mi", &[RWO], ""),
            pv("fit", "1500Mi", &[RWO], ""),
            pv("exact", "1073741824", &[RWO], ""),
        ];
        assert_eq!(best(&claim, vols), Some("exact".into()));
        let too_big = pvc("20Gi", &[RWO], None);
        assert_eq!(best(&too_big, vec![pv("big", "10Gi", &[RWO], "")]), None);
    }

    #[test]
    fn fewer_access_modes_are_preferred_over_size() {
        let claim = pvc("1Gi", &[RWO], None);
        let vols = vec![
            pv("rwo-rwx-small", "1Gi", &[RWO, RWX], ""),
            pv("rwo-big", "5Gi", &[RWO], ""),
        ];
        assert_eq!(best(&claim, vols), Some("rwo-big".into()));
        // A volume lacking a requested mode never matches.
        let rwx = pvc("1Gi", &[RWX], None);
        assert_eq!(best(&rwx, vec![pv("rwo", "1Gi", &[RWO, ROX], "")]), None);
    }

    #[test]
    fn class_mode_phase_and_selector_filter() {
        let claim = pvc("1Gi", &[RWO], Some("fast"));
        assert_eq!(best(&claim, vec![pv("plain", "1Gi", &[RWO], "")]), None);
        assert_eq!(
            best(&claim, vec![pv("fast", "1Gi", &[RWO], "fast")]),
            Some("fast".into())
        );
        let mut released = pv("released", "1Gi", &[RWO], "fast");
        released.status.as_mut().unwrap().phase = Some("Released".into());
        assert_eq!(best(&claim, vec![released]), None);
        let mut block = pv("block", "1Gi", &[RWO], "fast");
        block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        assert_eq!(best(&claim, vec![block]), None);

        let mut sel = pvc("1Gi", &[RWO], None);
        sel.spec.as_mut().unwrap().selector = Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("tier".into(), "gold".into())])),
            ..Default::default()
        });
        let mut gold = pv("gold", "2Gi", &[RWO], "");
        gold.metadata.labels = Some(BTreeMap::from([("tier".into(), "gold".into())]));
        assert_eq!(
            best(&sel, vec![pv("unlabeled", "1Gi", &[RWO], ""), gold]),
            Some("gold".into())
        );
    }

    #[test]
    fn a_volume_pre_bound_to_the_claim_wins_even_when_waiting_for_a_consumer() {
        let claim = pvc("1Gi", &[RWO], Some("local"));
        let mut pre = pv("pre", "5Gi", &[RWO], "other-class");
        pre.status = None;
        pre.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
            namespace: Some("ns".into()),
            name: Some("data".into()),
            ..Default::default()
        });
        let vols: Vec<Arc<PersistentVolume>> =
            vec![Arc::new(pv("free", "1Gi", &[RWO], "local")), Arc::new(pre)];
        let got = find_best_match(&claim, &vols, true).unwrap();
        assert_eq!(
            got.and_then(|v| v.metadata.name.clone()),
            Some("pre".into())
        );
        // Without the pre-bound volume, delayed binding leaves the choice to the scheduler.
        assert!(find_best_match(&claim, &vols[..1], true).unwrap().is_none());
        assert!(find_best_match(&claim, &vols[..1], false)
            .unwrap()
            .is_some());
        // A volume bound to another claim (other uid) is never offered.
        let mut other = pv("other", "1Gi", &[RWO], "local");
        other.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
            namespace: Some("ns".into()),
            name: Some("data".into()),
            uid: Some("uid-old".into()),
            ..Default::default()
        });
        assert_eq!(best(&claim, vec![other]), None);
    }

    #[test]
    fn an_invalid_selector_is_an_error() {
        let mut claim = pvc("1Gi", &[RWO], None);
        claim.spec.as_mut().unwrap().selector = Some(LabelSelector {
            match_expressions: Some(vec![
                k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                    key: "a".into(),
                    operator: "Bogus".into(),
                    values: None,
                },
            ]),
            ..Default::default()
        });
        let vols = vec![Arc::new(pv("v", "1Gi", &[RWO], ""))];
        assert!(find_best_match(&claim, &vols, false).is_err());
    }

    #[test]
    fn requested_volumes_are_checked() {
        let claim = pvc("2Gi", &[RWO], Some(""));
        assert_eq!(
            check_volume_satisfy_claim(&pv("v", "1Gi", &[RWO], ""), &claim),
            Err("requested PV is too small".into())
        );
        assert_eq!(
            check_volume_satisfy_claim(&pv("v", "2Gi", &[RWO], "x"), &claim),
            Err("storageClassName does not match".into())
        );
        assert_eq!(
            check_volume_satisfy_claim(&pv("v", "2Gi", &[ROX], ""), &claim),
            Err("incompatible accessMode".into())
        );
        assert_eq!(
            check_volume_satisfy_claim(&pv("v", "3Gi", &[RWO, ROX], ""), &claim),
            Ok(())
        );
    }

    #[test]
    fn the_newest_default_class_is_the_default() {
        let class = |name: &str, default: bool, secs: i64| {
            let mut c = StorageClass {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    creation_timestamp: Some(Time(Timestamp::from_second(secs).unwrap())),
                    ..Default::default()
                },
                provisioner: "p".into(),
                ..Default::default()
            };
            if default {
                c.metadata.annotations = Some(BTreeMap::from([(
                    ANN_DEFAULT_CLASS.to_string(),
                    "true".to_string(),
                )]));
            }
            Arc::new(c)
        };
        assert!(default_class(&[class("a", false, 1)]).is_none());
        let got = default_class(&[
            class("old", true, 1),
            class("new", true, 5),
            class("x", false, 9),
        ]);
        assert_eq!(
            got.and_then(|c| c.metadata.name.clone()),
            Some("new".into())
        );
        let got = default_class(&[class("b", true, 5), class("a", true, 5)]);
        assert_eq!(got.and_then(|c| c.metadata.name.clone()), Some("a".into()));
    }

    #[test]
    fn class_comes_from_the_beta_annotation_first() {
        let mut claim = pvc("1Gi", &[RWO], Some("spec"));
        assert_eq!(claim_class(&claim), "spec");
        claim.metadata.annotations = Some(BTreeMap::from([(
            ANN_BETA_STORAGE_CLASS.to_string(),
            "beta".to_string(),
        )]));
        assert_eq!(claim_class(&claim), "beta");
        let none = pvc("1Gi", &[RWO], None);
        assert!(!claim_has_class(&none));
        assert!(claim_has_class(&pvc("1Gi", &[RWO], Some(""))));
    }
}
