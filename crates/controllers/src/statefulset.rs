//! The StatefulSet controller (Kubernetes' pkg/controller/statefulset): pods with stable
//! identities `<set>-<ordinal>` (hostname, subdomain, `statefulset.kubernetes.io/pod-name` and
//! `apps.kubernetes.io/pod-index` labels), each with its own PersistentVolumeClaims made from the
//! set's volumeClaimTemplates before the pod. OrderedReady sets create pods in ordinal order,
//! each waiting for its predecessors to be Running and Ready, and remove them from the highest
//! ordinal down, one at a time; Parallel sets do both at once. Every template is recorded as a
//! ControllerRevision (`<set>-<hash>`, data = the template as a strategic-merge patch), pods carry
//! their revision in `controller-revision-hash`, and a RollingUpdate replaces pods whose revision
//! differs from the highest ordinal down to the partition, one at a time.
//!
//! The ControllerRevision helpers here (Go-compatible JSON, hashes, claiming) are shared with
//! the DaemonSet controller.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::anyhow;
use capstan_api::selector::LabelSelector as Matcher;
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::apps::v1::{
    ControllerRevision, StatefulSet, StatefulSetSpec, StatefulSetStatus,
};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use crate::util::{
    adopt, controller_ref, is_conflict, is_not_found, is_pod_available, is_pod_ready, matcher,
    matches, owner_ref, pod_from_template, pod_name_prefix, release,
};
use crate::Ctx;

/// The pod label naming the revision a pod was made from (Kubernetes' StatefulSetRevisionLabel,
/// the same key as the DaemonSet's).
pub(crate) const REVISION_LABEL: &str = "controller-revision-hash";
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";
/// The label ControllerRevisions of a StatefulSet carry their hash in.
const HASH_LABEL: &str = "controller.kubernetes.io/hash";
const KIND: &str = "StatefulSet";
const RETAIN: &str = "Retain";
const DELETE: &str = "Delete";
/// The most requests one slow-start batch of a Parallel set makes at once.
const MAX_BATCH: usize = 500;

// ---------------------------------------------------------------------------------------------
// Shared ControllerRevision machinery (also used by the DaemonSet controller).
// ---------------------------------------------------------------------------------------------

/// `value` as Go's encoding/json writes it (which is what Kubernetes stores and hashes):
/// compact, object keys sorted, `<`, `>`, `&`, U+2028 and U+2029 escaped.
pub(crate) fn go_json(value: &Value) -> String {
    let mut out = String::new();
    write_go_json(&mut out, value);
    out
}

fn write_go_json(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_go_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_string(out, k);
                out.push(':');
                write_go_json(out, &map[k]);
            }
            out.push('}');
        }
    }
}

fn write_go_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Keys whose value Go writes even when empty (non-omitempty slices).
const KEEP_EMPTY_ARRAYS: &[&str] = &["containers", "nodeSelectorTerms"];
/// Map-typed (omitempty) fields of a pod template Go leaves out when empty; other empty objects
/// are structs (`emptyDir: {}`, `securityContext: {}`) that Go writes.
const OMIT_EMPTY_MAPS: &[&str] = &[
    "labels",
    "annotations",
    "nodeSelector",
    "limits",
    "requests",
    "overhead",
];

fn drop_go_omitted(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, v| match v {
                Value::Array(a) => !a.is_empty() || KEEP_EMPTY_ARRAYS.contains(&k.as_str()),
                Value::Object(o) => !o.is_empty() || !OMIT_EMPTY_MAPS.contains(&k.as_str()),
                _ => true,
            });
            map.values_mut().for_each(drop_go_omitted);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_go_omitted),
        _ => {}
    }
}

/// A pod template as Go serializes the struct: `metadata.creationTimestamp: null` and each
/// container's `resources: {}` are always written, empty omitempty lists and maps never.
pub(crate) fn go_template(template: &PodTemplateSpec) -> Value {
    let mut v = serde_json::to_value(template).unwrap_or_else(|_| json!({}));
    drop_go_omitted(&mut v);
    let Some(obj) = v.as_object_mut() else {
        return v;
    };
    if let Some(meta) = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
    {
        meta.entry("creationTimestamp").or_insert(Value::Null);
    }
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        for list in ["containers", "initContainers", "ephemeralContainers"] {
            if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
                for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                    c.entry("resources").or_insert_with(|| json!({}));
                }
            }
        }
    }
    v
}

/// The data Kubernetes stores in a StatefulSet's or DaemonSet's ControllerRevision: a
/// strategic-merge patch replacing `spec.template` with this template.
pub(crate) fn template_patch(template: &PodTemplateSpec) -> Value {
    let mut t = go_template(template);
    if let Some(obj) = t.as_object_mut() {
        obj.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// The template a revision's data restores (`None` when the data is not such a patch).
pub(crate) fn template_from_patch(data: &Value) -> Option<PodTemplateSpec> {
    let mut t = data.get("spec")?.get("template")?.clone();
    t.as_object_mut()?.remove("$patch");
    serde_json::from_value(t).ok()
}

/// Whether two revisions' data are the same (compared as JSON, as the stored bytes may have
/// been re-encoded).
pub(crate) fn same_data(a: Option<&RawExtension>, b: Option<&RawExtension>) -> bool {
    let v = |r: Option<&RawExtension>| r.map(|r| r.0.clone()).unwrap_or(Value::Null);
    v(a) == v(b)
}

const FNV_OFFSET: u32 = 2_166_136_261;
const FNV_PRIME: u32 = 16_777_619;

/// 32-bit FNV-1 (Go's `fnv.New32`).
pub(crate) fn fnv32(parts: &[&[u8]]) -> u32 {
    let mut h = FNV_OFFSET;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h = h.wrapping_mul(FNV_PRIME);
        h ^= u32::from(*b);
    }
    h
}

/// 32-bit FNV-1a (Go's `fnv.New32a`).
pub(crate) fn fnv32a(parts: &[&[u8]]) -> u32 {
    let mut h = FNV_OFFSET;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u32::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// Kubernetes' `rand.SafeEncodeString` of a hash's decimal digits (no vowels, no confusable
/// characters), as in `pod-template-hash` and revision names.
pub(crate) fn safe_encode(hash: u32) -> String {
    const ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    hash.to_string()
        .bytes()
        .map(|b| ALPHANUMS[usize::from(b) % ALPHANUMS.len()] as char)
        .collect()
}

/// `<prefix>-<hash>`, the prefix cut to 223 characters (Kubernetes' ControllerRevisionName).
pub(crate) fn revision_name(prefix: &str, hash: &str) -> String {
    let mut p = prefix.to_string();
    if p.len() > 223 {
        let mut cut = 223;
        while !p.is_char_boundary(cut) {
            cut -= 1;
        }
        p.truncate(cut);
    }
    format!("{p}-{hash}")
}

/// Revisions in history order: by revision number, then creation time, then name.
pub(crate) fn sort_revisions(revisions: &mut [Arc<ControllerRevision>]) {
    revisions.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                let t =
                    |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
                t(a).cmp(&t(b))
            })
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

/// The message of an API error as Kubernetes' Go clients print it.
pub(crate) fn err_msg(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// Go's `utilerrors.NewAggregate(...).Error()`: one message as is, several in brackets.
pub(crate) fn aggregate(mut msgs: Vec<String>) -> Option<anyhow::Error> {
    msgs.dedup();
    match msgs.len() {
        0 => None,
        1 => Some(anyhow!(msgs.remove(0))),
        _ => Some(anyhow!("[{}]", msgs.join(", "))),
    }
}

fn name_of(meta: &ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn ns_of(meta: &ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

fn uid_of(meta: &ObjectMeta) -> &str {
    meta.uid.as_deref().unwrap_or_default()
}

/// Claim `objects` for the controller `owner` as Kubernetes' ControllerRefManager does: keep
/// what it controls and `selects`, release what it controls but no longer selects, adopt
/// selected orphans (after `can_adopt`, asked once). Errors are collected; any fails the claim.
pub(crate) async fn claim<K, F, Fut>(
    api: &Api<K>,
    owner: &ObjectMeta,
    controller: &OwnerReference,
    objects: Vec<Arc<K>>,
    selects: impl Fn(&K) -> bool,
    can_adopt: F,
) -> anyhow::Result<Vec<Arc<K>>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
    F: FnOnce() -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let owner_uid = uid_of(owner);
    let owner_deleting = owner.deletion_timestamp.is_some();
    let mut can_adopt = Some(can_adopt);
    let mut adoptable: Option<Result<(), String>> = None;
    let mut claimed = Vec::new();
    let mut errs = Vec::new();
    for obj in objects {
        let meta = obj.meta();
        if let Some(r) = controller_ref(meta) {
            if r.uid != owner_uid {
                continue;
            }
            if selects(&obj) {
                claimed.push(obj);
                continue;
            }
            if owner_deleting {
                continue;
            }
            match release(api, &obj, owner_uid).await {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                // The object no longer has our reference (or was recreated).
                Err(kube::Error::Api(s)) if s.code == 422 => {}
                Err(e) => errs.push(err_msg(&e)),
            }
            continue;
        }
        if owner_deleting || !selects(&obj) || meta.deletion_timestamp.is_some() {
            continue;
        }
        if ns_of(owner) != ns_of(meta) {
            continue;
        }
        if adoptable.is_none() {
            if let Some(f) = can_adopt.take() {
                adoptable = Some(f().await.map_err(|e| format!("{e:#}")));
            }
        }
        if let Some(Err(e)) = &adoptable {
            errs.push(format!(
                "can't adopt {} {}/{} ({}): {e}",
                K::kind(&()),
                ns_of(meta),
                name_of(meta),
                uid_of(meta)
            ));
            continue;
        }
        match adopt(api, &obj, controller).await {
            Ok(_) => claimed.push(obj),
            Err(e) if is_not_found(&e) => {}
            Err(e) => errs.push(err_msg(&e)),
        }
    }
    match aggregate(errs) {
        Some(e) => Err(e),
        None => Ok(claimed),
    }
}

/// Kubernetes' RecheckDeletionTimestamp: an uncached read of the owner must show the same uid
/// and no deletion before anything is adopted.
pub(crate) async fn recheck_owner<K>(api: &Api<K>, owner: &ObjectMeta) -> anyhow::Result<()>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug,
{
    let (ns, name, uid) = (ns_of(owner), name_of(owner), uid_of(owner));
    let fresh = api.get(name).await.map_err(|e| anyhow!(err_msg(&e)))?;
    let fresh_uid = uid_of(fresh.meta());
    if fresh_uid != uid {
        anyhow::bail!(
            "original {} {ns}/{name} is gone: got uid {fresh_uid}, wanted {uid}",
            K::kind(&())
        );
    }
    if let Some(t) = &fresh.meta().deletion_timestamp {
        anyhow::bail!("{ns}/{name} has just been deleted at {}", t.0);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// StatefulSet identity, storage and revision helpers.
// ---------------------------------------------------------------------------------------------

/// The parent name and ordinal in a pod name `<parent>-<ordinal>` (ordinal -1: none).
fn parent_and_ordinal(name: &str) -> (&str, i64) {
    let Some((parent, digits)) = name.rsplit_once('-') else {
        return ("", -1);
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return ("", -1);
    }
    // Go parses the ordinal as an int32: larger numbers have no ordinal (but keep the parent).
    match digits.parse::<i32>() {
        Ok(o) => (parent, i64::from(o)),
        Err(_) => (parent, -1),
    }
}

fn ordinal(pod: &Pod) -> i64 {
    parent_and_ordinal(name_of(&pod.metadata)).1
}

fn is_member_of(set_name: &str, pod: &Pod) -> bool {
    parent_and_ordinal(name_of(&pod.metadata)).0 == set_name
}

fn replicas_of(spec: &StatefulSetSpec) -> i64 {
    i64::from(spec.replicas.unwrap_or(1).max(0))
}

fn start_ordinal(spec: &StatefulSetSpec) -> i64 {
    i64::from(
        spec.ordinals
            .as_ref()
            .and_then(|o| o.start)
            .unwrap_or(0)
            .max(0),
    )
}

fn end_ordinal(spec: &StatefulSetSpec) -> i64 {
    start_ordinal(spec) + replicas_of(spec) - 1
}

fn in_ordinal_range(ord: i64, spec: &StatefulSetSpec) -> bool {
    ord >= start_ordinal(spec) && ord <= end_ordinal(spec)
}

fn pod_name(set: &str, ord: i64) -> String {
    format!("{set}-{ord}")
}

fn claim_name(template: &str, set: &str, ord: i64) -> String {
    format!("{template}-{set}-{ord}")
}

fn service_name(spec: &StatefulSetSpec) -> Option<String> {
    spec.service_name.clone().filter(|s| !s.is_empty())
}

fn identity_matches(set: &StatefulSet, pod: &Pod) -> bool {
    let name = name_of(&pod.metadata);
    let (parent, ord) = parent_and_ordinal(name);
    ord >= 0
        && parent == name_of(&set.metadata)
        && name == pod_name(name_of(&set.metadata), ord)
        && ns_of(&pod.metadata) == ns_of(&set.metadata)
        && pod
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(POD_NAME_LABEL))
            .map(String::as_str)
            == Some(name)
}

fn claim_templates(spec: &StatefulSetSpec) -> &[PersistentVolumeClaim] {
    spec.volume_claim_templates.as_deref().unwrap_or_default()
}

fn storage_matches(set: &StatefulSet, spec: &StatefulSetSpec, pod: &Pod) -> bool {
    let ord = ordinal(pod);
    if ord < 0 {
        return false;
    }
    let volumes: BTreeMap<&str, &Volume> = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .map(|v| (v.name.as_str(), v))
        .collect();
    claim_templates(spec).iter().all(|t| {
        let tn = name_of(&t.metadata);
        volumes.get(tn).is_some_and(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str())
                == Some(claim_name(tn, name_of(&set.metadata), ord).as_str())
        })
    })
}

/// The claims a pod of `set` uses, by template name, named `<template>-<set>-<ordinal>` and
/// labelled with the template's labels and the set's selector labels.
fn pod_claims(
    set: &StatefulSet,
    spec: &StatefulSetSpec,
    pod: &Pod,
) -> Vec<(String, PersistentVolumeClaim)> {
    let ord = ordinal(pod);
    claim_templates(spec)
        .iter()
        .map(|t| {
            let tn = name_of(&t.metadata).to_string();
            let mut claim = t.clone();
            claim.metadata.name = Some(claim_name(&tn, name_of(&set.metadata), ord));
            claim.metadata.namespace = set.metadata.namespace.clone();
            let mut labels = claim.metadata.labels.take().unwrap_or_default();
            for (k, v) in spec.selector.match_labels.iter().flatten() {
                labels.insert(k.clone(), v.clone());
            }
            claim.metadata.labels = Some(labels).filter(|l| !l.is_empty());
            claim.metadata.resource_version = None;
            claim.metadata.uid = None;
            claim.metadata.creation_timestamp = None;
            claim.status = None;
            (tn, claim)
        })
        .collect()
}

/// Point the pod's volumes named after claim templates at its claims (other volumes kept).
fn update_storage(set: &StatefulSet, spec: &StatefulSetSpec, pod: &mut Pod) {
    let claims = pod_claims(set, spec, pod);
    let Some(pspec) = pod.spec.as_mut() else {
        return;
    };
    let current = pspec.volumes.take().unwrap_or_default();
    let mut volumes: Vec<Volume> = claims
        .iter()
        .map(|(tn, claim)| Volume {
            name: tn.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: name_of(&claim.metadata).to_string(),
                read_only: None,
            }),
            ..Default::default()
        })
        .collect();
    volumes.extend(
        current
            .into_iter()
            .filter(|v| !claims.iter().any(|(tn, _)| *tn == v.name)),
    );
    pspec.volumes = Some(volumes).filter(|v| !v.is_empty());
}

/// The pod's name, namespace and identity labels.
fn update_identity(set: &StatefulSet, pod: &mut Pod) {
    let ord = ordinal(pod);
    let name = pod_name(name_of(&set.metadata), ord);
    pod.metadata.name = Some(name.clone());
    pod.metadata.namespace = set.metadata.namespace.clone();
    let labels = pod.metadata.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(POD_NAME_LABEL.into(), name);
    labels.insert(POD_INDEX_LABEL.into(), ord.to_string());
}

/// A new pod of `set` (whose template is the one to use) for `ord`.
fn new_set_pod(set: &StatefulSet, spec: &StatefulSetSpec, ord: i64) -> Pod {
    let set_name = name_of(&set.metadata);
    let mut pod = pod_from_template(
        &spec.template,
        ns_of(&set.metadata),
        &pod_name_prefix(set_name),
        owner_ref(set),
    );
    pod.metadata.name = Some(pod_name(set_name, ord));
    update_identity(set, &mut pod);
    // Hostname and subdomain are immutable: only set when the pod is made.
    let name = pod.metadata.name.clone();
    let pspec = pod.spec.get_or_insert_with(Default::default);
    pspec.hostname = name;
    pspec.subdomain = service_name(spec);
    update_storage(set, spec, &mut pod);
    pod
}

fn pod_revision(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map(String::as_str)
        .unwrap_or_default()
}

fn rolling_partition(spec: &StatefulSetSpec) -> Option<i64> {
    spec.update_strategy
        .as_ref()
        .and_then(|s| s.rolling_update.as_ref())
        .map(|r| i64::from(r.partition.unwrap_or(0)))
}

fn strategy_type(spec: &StatefulSetSpec) -> &str {
    spec.update_strategy
        .as_ref()
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
}

/// Which revision a new pod at `ord` is made from: the current one below the partition (or,
/// with no rolling-update parameters, below the current replica count), else the update one.
fn new_versioned_pod(
    current_set: &StatefulSet,
    update_set: &StatefulSet,
    current_revision: &str,
    update_revision: &str,
    ord: i64,
) -> Option<Pod> {
    let cspec = current_set.spec.as_ref()?;
    let start = start_ordinal(cspec);
    let current_replicas = i64::from(
        current_set
            .status
            .as_ref()
            .and_then(|s| s.current_replicas)
            .unwrap_or(0),
    );
    // Kubernetes' condition, with Go's operator precedence: (RollingUpdate && no parameters &&
    // below the current replicas) || (parameters && below the partition).
    let use_current = (strategy_type(cspec) == "RollingUpdate"
        && rolling_partition(cspec).is_none()
        && ord < start + current_replicas)
        || rolling_partition(cspec).is_some_and(|p| ord < start + p);
    let (set, revision) = if use_current {
        (current_set, current_revision)
    } else {
        (update_set, update_revision)
    };
    let mut pod = new_set_pod(set, set.spec.as_ref()?, ord);
    pod.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(REVISION_LABEL.into(), revision.to_string());
    Some(pod)
}

/// The set with its template replaced by the one `revision` recorded.
fn apply_revision(set: &StatefulSet, revision: &ControllerRevision) -> anyhow::Result<StatefulSet> {
    let data = revision.data.as_ref().map(|d| &d.0).unwrap_or(&Value::Null);
    let template = template_from_patch(data).ok_or_else(|| {
        anyhow!(
            "controller revision {} does not hold a pod template patch",
            name_of(&revision.metadata)
        )
    })?;
    let mut out = set.clone();
    if let Some(spec) = out.spec.as_mut() {
        spec.template = template;
    }
    Ok(out)
}

/// A new (not yet created) revision of the set's template.
fn new_revision(
    set: &StatefulSet,
    spec: &StatefulSetSpec,
    number: i64,
    collision: i32,
) -> ControllerRevision {
    let data = template_patch(&spec.template);
    let raw = go_json(&data);
    let hash = revision_hash(&raw, collision);
    let mut labels = spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.clone());
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(revision_name(name_of(&set.metadata), &hash)),
            namespace: set.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: set.metadata.annotations.clone().filter(|a| !a.is_empty()),
            owner_references: Some(vec![owner_ref(set)]),
            ..Default::default()
        },
        data: Some(RawExtension(data)),
        revision: number,
    }
}

/// Kubernetes' HashControllerRevision: FNV-1 of the data and the collision count.
fn revision_hash(raw: &str, collision: i32) -> String {
    safe_encode(fnv32(&[raw.as_bytes(), collision.to_string().as_bytes()]))
}

/// Kubernetes' EqualRevision: hash labels (when both are numbers) and data must agree.
fn equal_revision(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    let h = |r: &ControllerRevision| {
        r.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HASH_LABEL))
            .and_then(|s| s.parse::<i32>().ok())
    };
    if let (Some(x), Some(y)) = (h(a), h(b)) {
        if x != y {
            return false;
        }
    }
    same_data(a.data.as_ref(), b.data.as_ref())
}

fn next_revision(sorted: &[Arc<ControllerRevision>]) -> i64 {
    sorted.last().map_or(1, |r| r.revision + 1)
}

// ---------------------------------------------------------------------------------------------
// Pod state.
// ---------------------------------------------------------------------------------------------

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn is_created(pod: &Pod) -> bool {
    !phase(pod).is_empty()
}

fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && is_pod_ready(pod)
}

fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

fn is_unavailable(pod: &Pod, min_ready: i32, now: Timestamp) -> bool {
    !is_healthy(pod) || !is_pod_available(pod, min_ready, now)
}

// ---------------------------------------------------------------------------------------------
// PersistentVolumeClaim retention (owner references on claims).
// ---------------------------------------------------------------------------------------------

fn retention(spec: &StatefulSetSpec) -> (String, String) {
    let p = spec.persistent_volume_claim_retention_policy.as_ref();
    let get = |v: Option<&String>| v.cloned().unwrap_or_else(|| RETAIN.to_string());
    (
        get(p.and_then(|p| p.when_scaled.as_ref())),
        get(p.and_then(|p| p.when_deleted.as_ref())),
    )
}

/// An owner of a claim: the set or one of its pods.
struct Owner<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    uid: &'a str,
}

impl<'a> Owner<'a> {
    fn set(set: &'a StatefulSet) -> Owner<'a> {
        Owner {
            api_version: "apps/v1",
            kind: KIND,
            name: name_of(&set.metadata),
            uid: uid_of(&set.metadata),
        }
    }

    fn pod(pod: &'a Pod) -> Owner<'a> {
        Owner {
            api_version: "v1",
            kind: "Pod",
            name: name_of(&pod.metadata),
            uid: uid_of(&pod.metadata),
        }
    }

    fn matches(&self, r: &OwnerReference) -> bool {
        r.api_version == self.api_version && r.kind == self.kind && r.name == self.name
    }

    fn controller_ref(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.into(),
            kind: self.kind.into(),
            name: self.name.into(),
            uid: self.uid.into(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

fn refs(claim: &PersistentVolumeClaim) -> &[OwnerReference] {
    claim
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default()
}

fn has_owner_ref(claim: &PersistentVolumeClaim, uid: &str) -> bool {
    refs(claim).iter().any(|r| r.uid == uid)
}

/// A reference to the object by name whose uid is not the object's (a previous incarnation).
fn has_stale_owner_ref(claim: &PersistentVolumeClaim, owner: &Owner) -> bool {
    refs(claim)
        .iter()
        .find(|r| owner.matches(r))
        .is_some_and(|r| r.uid != owner.uid)
}

/// Under a Delete policy, a controller of the claim other than the set or pod.
fn has_unexpected_controller(
    claim: &PersistentVolumeClaim,
    spec: &StatefulSetSpec,
    set: &Owner,
    pod: &Owner,
) -> bool {
    let (scaled, deleted) = retention(spec);
    if scaled == RETAIN && deleted == RETAIN {
        return false;
    }
    for r in refs(claim) {
        if set.matches(r) {
            if r.uid != set.uid {
                return true;
            }
            continue;
        }
        if pod.matches(r) {
            if r.uid != pod.uid {
                return true;
            }
            continue;
        }
        if r.controller == Some(true) {
            return true;
        }
    }
    false
}

fn has_non_controller_owner(claim: &PersistentVolumeClaim, set: &Owner, pod: &Owner) -> bool {
    refs(claim)
        .iter()
        .any(|r| (r.uid == set.uid || r.uid == pod.uid) && r.controller != Some(true))
}

/// Whether the claim's owner references agree with the retention policy: Retain/Retain no
/// reference; WhenDeleted=Delete the set; WhenScaled=Delete the pod once it is scaled away.
fn claim_owner_up_to_date(
    claim: &PersistentVolumeClaim,
    set: &StatefulSet,
    spec: &StatefulSetSpec,
    pod: &Pod,
) -> bool {
    let (so, po) = (Owner::set(set), Owner::pod(pod));
    if has_stale_owner_ref(claim, &so) || has_stale_owner_ref(claim, &po) {
        return true;
    }
    if has_unexpected_controller(claim, spec, &so, &po) {
        return !(has_owner_ref(claim, so.uid) || has_owner_ref(claim, po.uid));
    }
    if has_non_controller_owner(claim, &so, &po) {
        return false;
    }
    let (scaled, deleted) = retention(spec);
    let set_ref = has_owner_ref(claim, so.uid);
    let pod_ref = has_owner_ref(claim, po.uid);
    let scaled_down = !in_ordinal_range(ordinal(pod), spec);
    match (scaled.as_str(), deleted.as_str()) {
        (RETAIN, DELETE) => set_ref && !pod_ref,
        (DELETE, RETAIN) => !set_ref && scaled_down == pod_ref,
        (DELETE, DELETE) => scaled_down != set_ref && scaled_down == pod_ref,
        // Retain/Retain, and unknown policies treated as Retain.
        _ => !set_ref && !pod_ref,
    }
}

/// Rewrite the claim's references to the set and pod as the retention policy wants them.
fn update_claim_owner_refs(
    claim: &mut PersistentVolumeClaim,
    set: &StatefulSet,
    spec: &StatefulSetSpec,
    pod: &Pod,
) {
    let (so, po) = (Owner::set(set), Owner::pod(pod));
    let unexpected = has_unexpected_controller(claim, spec, &so, &po);
    let mut refs: Vec<OwnerReference> = refs(claim)
        .iter()
        .filter(|r| !so.matches(r) && !po.matches(r))
        .cloned()
        .collect();
    if !unexpected {
        let scaled_down = !in_ordinal_range(ordinal(pod), spec);
        let (scaled, deleted) = retention(spec);
        let mut add = |o: &Owner| {
            if !refs.iter().any(|r| r.uid == o.uid) {
                refs.push(o.controller_ref());
            }
        };
        match (scaled.as_str(), deleted.as_str()) {
            (RETAIN, DELETE) => add(&so),
            (DELETE, RETAIN) if scaled_down => add(&po),
            (DELETE, DELETE) if scaled_down => add(&po),
            (DELETE, DELETE) => add(&so),
            _ => {}
        }
    }
    claim.metadata.owner_references = Some(refs).filter(|r| !r.is_empty());
}

// ---------------------------------------------------------------------------------------------
// Status.
// ---------------------------------------------------------------------------------------------

/// The status the controller computes (Go's zero values for absent fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct SetStatus {
    observed_generation: i64,
    replicas: i32,
    ready: i32,
    available: i32,
    current: i32,
    updated: i32,
    current_revision: String,
    update_revision: String,
    collision_count: i32,
}

impl SetStatus {
    fn of(set: &StatefulSet) -> SetStatus {
        let s = set.status.clone().unwrap_or_default();
        SetStatus {
            observed_generation: s.observed_generation.unwrap_or(0),
            replicas: s.replicas,
            ready: s.ready_replicas.unwrap_or(0),
            available: s.available_replicas.unwrap_or(0),
            current: s.current_replicas.unwrap_or(0),
            updated: s.updated_replicas.unwrap_or(0),
            current_revision: s.current_revision.unwrap_or_default(),
            update_revision: s.update_revision.unwrap_or_default(),
            collision_count: s.collision_count.unwrap_or(0),
        }
    }

    /// Count the pods' replicas (Kubernetes' computeReplicaStatus over each list).
    fn count(&mut self, min_ready: i32, now: Timestamp, lists: &[&[Arc<Pod>]]) {
        self.replicas = 0;
        self.ready = 0;
        self.available = 0;
        self.current = 0;
        self.updated = 0;
        for pod in lists.iter().flat_map(|l| l.iter()) {
            if is_created(pod) {
                self.replicas += 1;
            }
            if is_running_and_ready(pod) {
                self.ready += 1;
                if is_pod_available(pod, min_ready, now) {
                    self.available += 1;
                }
            }
            if is_created(pod) && !is_terminating(pod) {
                let rev = pod_revision(pod);
                if rev == self.current_revision {
                    self.current += 1;
                }
                if rev == self.update_revision {
                    self.updated += 1;
                }
            }
        }
    }

    /// Once every replica runs the update revision and is ready, it becomes the current one.
    fn complete_rolling_update(&mut self, spec: &StatefulSetSpec) {
        let want = replicas_of(spec);
        if strategy_type(spec) == "RollingUpdate"
            && i64::from(self.updated) == want
            && i64::from(self.ready) == want
            && i64::from(self.replicas) == want
        {
            self.current = self.updated;
            self.current_revision = self.update_revision.clone();
        }
    }

    /// Whether the stored status differs from this one (Kubernetes' inconsistentStatus).
    fn differs_from(&self, stored: &SetStatus) -> bool {
        self.observed_generation > stored.observed_generation
            || self.replicas != stored.replicas
            || self.current != stored.current
            || self.ready != stored.ready
            || self.updated != stored.updated
            || self.current_revision != stored.current_revision
            || self.available != stored.available
            || self.update_revision != stored.update_revision
    }

    /// As the API object (omitempty fields left out when zero, as Go writes them).
    fn to_k8s(&self) -> StatefulSetStatus {
        let nz = |v: i32| Some(v).filter(|v| *v != 0);
        let ne = |s: &String| Some(s.clone()).filter(|s| !s.is_empty());
        StatefulSetStatus {
            observed_generation: Some(self.observed_generation).filter(|g| *g != 0),
            replicas: self.replicas,
            ready_replicas: nz(self.ready),
            current_replicas: nz(self.current),
            updated_replicas: nz(self.updated),
            current_revision: ne(&self.current_revision),
            update_revision: ne(&self.update_revision),
            collision_count: Some(self.collision_count),
            available_replicas: Some(self.available),
            conditions: None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The controller.
// ---------------------------------------------------------------------------------------------

struct Controller {
    client: Client,
    sets: Arc<Informer<StatefulSet>>,
    pods: Arc<Informer<Pod>>,
    claims: Arc<Informer<PersistentVolumeClaim>>,
    revisions: Arc<Informer<ControllerRevision>>,
    recorder: Recorder,
    queue: Arc<Queue>,
}

fn set_key(set: &StatefulSet) -> String {
    capstan_runtime::key(set.metadata.namespace.as_deref(), name_of(&set.metadata))
}

pub fn start(ctx: &Ctx) {
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        sets: ctx.informers.get::<StatefulSet>(),
        pods: ctx.informers.get::<Pod>(),
        claims: ctx.informers.get::<PersistentVolumeClaim>(),
        revisions: ctx.informers.get::<ControllerRevision>(),
        recorder: ctx.recorder("statefulset-controller"),
        queue: Queue::new("statefulset"),
    });
    let q = c.queue.clone();
    c.sets.on_change(move |ch| q.add(set_key(ch.object())));
    let weak = Arc::downgrade(&c);
    c.pods.on_change(move |ch| {
        if let Some(c) = weak.upgrade() {
            c.on_pod(ch);
        }
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.sets.wait_synced().await;
        c.pods.wait_synced().await;
        c.claims.wait_synced().await;
        c.revisions.wait_synced().await;
        let queue = c.queue.clone();
        queue.run_workers(workers, move |key| {
            let c = c.clone();
            async move { c.sync(&key).await }
        });
    });
}

impl Controller {
    fn resolve(&self, namespace: &str, r: &OwnerReference) -> Option<Arc<StatefulSet>> {
        if r.kind != KIND {
            return None;
        }
        let set = self.sets.get(namespace, &r.name)?;
        (uid_of(&set.metadata) == r.uid).then_some(set)
    }

    /// The sets whose selector selects the pod (for orphans that might be adopted).
    fn sets_for_pod(&self, pod: &Pod) -> Vec<Arc<StatefulSet>> {
        let mut out = Vec::new();
        self.sets.for_each_in(ns_of(&pod.metadata), |set| {
            let Some(spec) = set.spec.as_ref() else {
                return;
            };
            if let Some(m) = matcher(&spec.selector) {
                if !m.is_empty() && matches(&m, pod.metadata.labels.as_ref()) {
                    out.push(set.clone());
                }
            }
        });
        out
    }

    fn on_pod(&self, ch: &Change<'_, Pod>) {
        match ch {
            Change::Add(pod) => {
                if let Some(r) = controller_ref(&pod.metadata) {
                    if let Some(set) = self.resolve(ns_of(&pod.metadata), r) {
                        self.queue.add(set_key(&set));
                    }
                    return;
                }
                if pod.metadata.deletion_timestamp.is_some() {
                    return;
                }
                for set in self.sets_for_pod(pod) {
                    self.queue.add(set_key(&set));
                }
            }
            Change::Update { old, new } => {
                if old.metadata.resource_version == new.metadata.resource_version {
                    return;
                }
                let ns = ns_of(&new.metadata);
                let label_changed = old.metadata.labels != new.metadata.labels;
                let (old_ref, cur_ref) =
                    (controller_ref(&old.metadata), controller_ref(&new.metadata));
                let ref_changed = old_ref != cur_ref;
                if ref_changed {
                    if let Some(set) = old_ref.and_then(|r| self.resolve(ns, r)) {
                        self.queue.add(set_key(&set));
                    }
                }
                if let Some(r) = cur_ref {
                    if let Some(set) = self.resolve(ns, r) {
                        let key = set_key(&set);
                        self.queue.add(key.clone());
                        let min_ready = set
                            .spec
                            .as_ref()
                            .and_then(|s| s.min_ready_seconds)
                            .unwrap_or(0);
                        if !is_pod_ready(old) && is_pod_ready(new) && min_ready > 0 {
                            self.queue
                                .add_after(key, Duration::from_secs(min_ready as u64 + 1));
                        }
                    }
                    return;
                }
                if label_changed || ref_changed {
                    for set in self.sets_for_pod(new) {
                        self.queue.add(set_key(&set));
                    }
                }
            }
            Change::Delete(pod) => {
                if let Some(set) = controller_ref(&pod.metadata)
                    .and_then(|r| self.resolve(ns_of(&pod.metadata), r))
                {
                    self.queue.add(set_key(&set));
                }
            }
        }
    }

    fn set_api(&self, ns: &str) -> Api<StatefulSet> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn pod_api(&self, ns: &str) -> Api<Pod> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn claim_api(&self, ns: &str) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.client.clone(), ns)
    }

    fn revision_api(&self, ns: &str) -> Api<ControllerRevision> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn sync(&self, key: &str) -> anyhow::Result<()> {
        let Some(set) = self.sets.get_key(key) else {
            return Ok(());
        };
        let Some(spec) = set.spec.as_ref() else {
            return Ok(());
        };
        let Some(selector) = matcher(&spec.selector) else {
            // A permanent error: retrying cannot help until the set changes.
            tracing::warn!(statefulset = key, "invalid label selector; not syncing");
            return Ok(());
        };
        self.adopt_orphan_revisions(&set, &selector).await?;
        let pods = self.pods_for_set(&set, &selector).await?;
        let status = self.update_set(&set, spec, &pods, &selector).await?;
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        if min_ready > 0 && i64::from(status.available) != replicas_of(spec) {
            self.queue
                .add_after(key, Duration::from_secs(min_ready as u64));
        }
        Ok(())
    }

    /// The set's revisions: those its selector selects that it controls or nobody does.
    fn list_revisions(
        &self,
        set: &StatefulSet,
        selector: &Matcher,
    ) -> Vec<Arc<ControllerRevision>> {
        let uid = uid_of(&set.metadata);
        let mut out = Vec::new();
        self.revisions.for_each_in(ns_of(&set.metadata), |r| {
            if !matches(selector, r.metadata.labels.as_ref()) {
                return;
            }
            if controller_ref(&r.metadata).is_none_or(|c| c.uid == uid) {
                out.push(r.clone());
            }
        });
        out
    }

    async fn adopt_orphan_revisions(
        &self,
        set: &StatefulSet,
        selector: &Matcher,
    ) -> anyhow::Result<()> {
        let orphans: Vec<_> = self
            .list_revisions(set, selector)
            .into_iter()
            .filter(|r| controller_ref(&r.metadata).is_none())
            .collect();
        if orphans.is_empty() {
            return Ok(());
        }
        let ns = ns_of(&set.metadata);
        recheck_owner(&self.set_api(ns), &set.metadata)
            .await
            .map_err(|e| anyhow!("can't adopt ControllerRevisions: {e:#}"))?;
        let api = self.revision_api(ns);
        let controller = owner_ref(set);
        for r in orphans {
            adopt(&api, &*r, &controller)
                .await
                .map_err(|e| anyhow!(err_msg(&e)))?;
        }
        Ok(())
    }

    /// The pods the set owns, after adopting orphans named like its pods that its selector
    /// selects and releasing owned pods it no longer selects.
    async fn pods_for_set(
        &self,
        set: &StatefulSet,
        selector: &Matcher,
    ) -> anyhow::Result<Vec<Arc<Pod>>> {
        let ns = ns_of(&set.metadata);
        let set_name = name_of(&set.metadata);
        let pods = self.pods.list_namespace(ns);
        let set_api = self.set_api(ns);
        claim(
            &self.pod_api(ns),
            &set.metadata,
            &owner_ref(set),
            pods,
            |p: &Pod| matches(selector, p.metadata.labels.as_ref()) && is_member_of(set_name, p),
            || recheck_owner(&set_api, &set.metadata),
        )
        .await
    }

    /// Kubernetes' UpdateStatefulSet: revisions, pods, status, then history truncation.
    async fn update_set(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        pods: &[Arc<Pod>],
        selector: &Matcher,
    ) -> anyhow::Result<SetStatus> {
        let mut revisions = self.list_revisions(set, selector);
        sort_revisions(&mut revisions);
        let (current, update, collision) = match self.set_revisions(set, spec, &revisions).await {
            Ok(r) => r,
            Err(e) => {
                let t = self
                    .truncate_history(set, spec, pods, &revisions, &[])
                    .await;
                return Err(with_other(e, t));
            }
        };
        let live = [current.clone(), update.clone()];
        let (mut status, result) = match self
            .update_pods(set, spec, &current, &update, collision, pods)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                let t = self
                    .truncate_history(set, spec, pods, &revisions, &live)
                    .await;
                return Err(with_other(e, t));
            }
        };
        let status_result = self.store_status(set, spec, &mut status).await;
        let result = match (result, status_result) {
            (Err(e), Err(se)) => {
                tracing::warn!(statefulset = %set_key(set), error = %format!("{se:#}"), "could not update status");
                Err(e)
            }
            (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        };
        let t = self
            .truncate_history(set, spec, pods, &revisions, &live)
            .await;
        match result {
            Err(e) => Err(with_other(e, t)),
            Ok(()) => t.map(|()| status),
        }
    }

    /// The current and update revisions (creating the update revision, or renumbering an
    /// equal older one on a rollback) and the collision count used.
    async fn set_revisions(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        revisions: &[Arc<ControllerRevision>],
    ) -> anyhow::Result<(Arc<ControllerRevision>, Arc<ControllerRevision>, i32)> {
        let mut collision = set
            .status
            .as_ref()
            .and_then(|s| s.collision_count)
            .unwrap_or(0);
        let candidate = new_revision(set, spec, next_revision(revisions), collision);
        let equal: Vec<&Arc<ControllerRevision>> = revisions
            .iter()
            .filter(|r| equal_revision(r, &candidate))
            .collect();
        let update = match (equal.last(), revisions.last()) {
            (Some(eq), Some(last)) if equal_revision(last, eq) => last.clone(),
            (Some(eq), _) => Arc::new(self.renumber_revision(eq, candidate.revision).await?),
            (None, _) => Arc::new(self.create_revision(set, candidate, &mut collision).await?),
        };
        let current_name = set
            .status
            .as_ref()
            .and_then(|s| s.current_revision.as_deref())
            .unwrap_or_default();
        let current = revisions
            .iter()
            .find(|r| name_of(&r.metadata) == current_name)
            .cloned()
            .unwrap_or_else(|| update.clone());
        Ok((current, update, collision))
    }

    /// Create the revision, renaming it with a bumped collision count while an unequal
    /// revision holds the name.
    async fn create_revision(
        &self,
        set: &StatefulSet,
        mut revision: ControllerRevision,
        collision: &mut i32,
    ) -> anyhow::Result<ControllerRevision> {
        let api = self.revision_api(ns_of(&set.metadata));
        let raw = go_json(revision.data.as_ref().map(|d| &d.0).unwrap_or(&Value::Null));
        loop {
            let name = revision_name(name_of(&set.metadata), &revision_hash(&raw, *collision));
            revision.metadata.name = Some(name.clone());
            match api.create(&PostParams::default(), &revision).await {
                Ok(r) => return Ok(r),
                Err(e) if is_conflict(&e) => {
                    let existing = api.get(&name).await.map_err(|e| anyhow!(err_msg(&e)))?;
                    if same_data(existing.data.as_ref(), revision.data.as_ref()) {
                        return Ok(existing);
                    }
                    *collision = collision.saturating_add(1);
                }
                Err(e) => return Err(anyhow!(err_msg(&e))),
            }
        }
    }

    /// Give an existing revision a new number (a rollback to it), retrying conflicts.
    async fn renumber_revision(
        &self,
        revision: &ControllerRevision,
        number: i64,
    ) -> anyhow::Result<ControllerRevision> {
        let api = self.revision_api(ns_of(&revision.metadata));
        let name = name_of(&revision.metadata).to_string();
        let mut clone = revision.clone();
        for _ in 0..5 {
            if clone.revision == number {
                return Ok(clone);
            }
            clone.revision = number;
            match api.replace(&name, &PostParams::default(), &clone).await {
                Ok(r) => return Ok(r),
                Err(e) if is_conflict(&e) => {
                    clone = api.get(&name).await.map_err(|e| anyhow!(err_msg(&e)))?;
                }
                Err(e) => return Err(anyhow!(err_msg(&e))),
            }
        }
        Err(anyhow!(
            "could not update controller revision {name}: too many conflicts"
        ))
    }

    /// Delete the oldest revisions no pod and neither status revision uses, beyond
    /// revisionHistoryLimit.
    async fn truncate_history(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        pods: &[Arc<Pod>],
        revisions: &[Arc<ControllerRevision>],
        live: &[Arc<ControllerRevision>],
    ) -> anyhow::Result<()> {
        let is_live = |name: &str| {
            live.iter().any(|r| name_of(&r.metadata) == name)
                || pods.iter().any(|p| pod_revision(p) == name)
        };
        let history: Vec<&Arc<ControllerRevision>> = revisions
            .iter()
            .filter(|r| !is_live(name_of(&r.metadata)))
            .collect();
        let limit = spec.revision_history_limit.unwrap_or(10);
        if limit < 0 || history.len() <= limit as usize {
            return Ok(());
        }
        let api = self.revision_api(ns_of(&set.metadata));
        for r in &history[..history.len() - limit as usize] {
            match api
                .delete(name_of(&r.metadata), &DeleteParams::default())
                .await
            {
                Ok(_) => {}
                Err(e) if is_not_found(&e) => {}
                Err(e) => return Err(anyhow!(err_msg(&e))),
            }
        }
        Ok(())
    }

    /// Kubernetes' updateStatefulSet: create, repair, scale down and roll pods. Returns the
    /// status to record and the outcome of the pod work.
    async fn update_pods(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        current: &ControllerRevision,
        update: &ControllerRevision,
        collision: i32,
        pods: &[Arc<Pod>],
    ) -> anyhow::Result<(SetStatus, anyhow::Result<()>)> {
        let current_set = apply_revision(set, current)?;
        let update_set = apply_revision(set, update)?;
        let (current_name, update_name) = (name_of(&current.metadata), name_of(&update.metadata));
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        let now = Timestamp::now();
        let mut status = SetStatus {
            observed_generation: set.metadata.generation.unwrap_or(0),
            current_revision: current_name.to_string(),
            update_revision: update_name.to_string(),
            collision_count: collision,
            ..Default::default()
        };
        status.count(min_ready, now, &[pods]);

        let start = start_ordinal(spec);
        let count = replicas_of(spec) as usize;
        let mut slots: Vec<Option<Arc<Pod>>> = vec![None; count];
        let mut condemned: Vec<Arc<Pod>> = Vec::new();
        for pod in pods {
            let ord = ordinal(pod);
            if in_ordinal_range(ord, spec) {
                slots[(ord - start) as usize] = Some(pod.clone());
            } else if ord >= 0 {
                condemned.push(pod.clone());
            }
        }
        let mut replicas: Vec<Arc<Pod>> = Vec::with_capacity(count);
        for (i, slot) in slots.into_iter().enumerate() {
            match slot {
                Some(p) => replicas.push(p),
                None => {
                    let ord = start + i as i64;
                    let pod = new_versioned_pod(
                        &current_set,
                        &update_set,
                        current_name,
                        update_name,
                        ord,
                    )
                    .ok_or_else(|| anyhow!("statefulset has no spec"))?;
                    replicas.push(Arc::new(pod));
                }
            }
        }
        condemned.sort_by_key(|p| std::cmp::Reverse(ordinal(p)));

        let mut first_unavailable: Option<String> = None;
        for p in replicas.iter().chain(condemned.iter().rev()) {
            if is_unavailable(p, min_ready, now) && first_unavailable.is_none() {
                first_unavailable = Some(name_of(&p.metadata).to_string());
            }
        }
        if set.metadata.deletion_timestamp.is_some() {
            return Ok((status, Ok(())));
        }
        let monotonic = spec.pod_management_policy.as_deref() != Some("Parallel");
        let update_spec = update_set.spec.as_ref().unwrap_or(spec);

        let (exit, res) = run_for_all(replicas.len(), monotonic, |i| {
            self.process_replica(set, spec, &update_set, update_spec, monotonic, &replicas[i])
        })
        .await;
        if exit || res.is_err() {
            status.count(min_ready, now, &[&replicas, &condemned]);
            return Ok((status, res));
        }

        let (exit, res) = run_for_all(condemned.len(), monotonic, |i| {
            self.fix_condemned_claims(&update_set, update_spec, &condemned[i])
        })
        .await;
        if exit || res.is_err() {
            status.count(min_ready, now, &[&replicas, &condemned]);
            return Ok((status, res));
        }

        let (exit, res) = run_for_all(condemned.len(), monotonic, |i| {
            self.process_condemned(
                set,
                min_ready,
                first_unavailable.as_deref(),
                monotonic,
                &condemned[i],
                now,
            )
        })
        .await;
        if exit || res.is_err() {
            status.count(min_ready, now, &[&replicas, &condemned]);
            return Ok((status, res));
        }
        status.count(min_ready, now, &[&replicas, &condemned]);

        if strategy_type(spec) == "OnDelete" {
            return Ok((status, Ok(())));
        }
        // Roll: replace the highest-ordinal pod not at the update revision, down to the
        // partition, waiting for each replaced pod to be available again.
        let update_min = rolling_partition(spec).unwrap_or(0).max(0) as usize;
        for target in (update_min..replicas.len()).rev() {
            let pod = &replicas[target];
            if pod_revision(pod) != update_name && !is_terminating(pod) {
                tracing::debug!(statefulset = %set_key(set), pod = name_of(&pod.metadata), "terminating pod for update");
                if let Err(e) = self.delete_pod(set, pod).await {
                    if !is_not_found(&e) {
                        return Ok((status, Err(anyhow!(err_msg(&e)))));
                    }
                }
                status.current -= 1;
                return Ok((status, Ok(())));
            }
            if is_unavailable(pod, min_ready, now) {
                return Ok((status, Ok(())));
            }
        }
        Ok((status, Ok(())))
    }

    /// One replica: replace failed or succeeded pods, create missing ones (in OrderedReady
    /// mode stopping until each is Running, Ready and available), repair identity, storage and
    /// claim ownership. `Ok(true)`: stop processing further replicas.
    async fn process_replica(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        update_set: &StatefulSet,
        update_spec: &StatefulSetSpec,
        monotonic: bool,
        pod: &Arc<Pod>,
    ) -> anyhow::Result<bool> {
        if matches!(phase(pod), "Failed" | "Succeeded") {
            if !is_terminating(pod) {
                self.delete_pod(set, pod)
                    .await
                    .map_err(|e| anyhow!(err_msg(&e)))?;
            }
            // The replacement is made once the old pod is gone.
            return Ok(true);
        }
        if !is_created(pod) {
            if self.claim_is_stale(set, spec, pod) {
                return Ok(true);
            }
            self.create_pod(set, spec, pod).await?;
            if monotonic {
                return Ok(true);
            }
        }
        if phase(pod) == "Pending" {
            self.create_claims(set, spec, pod).await?;
            if let Err(e) = self.update_claims_for_retention(set, spec, pod).await {
                self.pod_event("update", set, pod, Some(&e));
                return Err(e);
            }
        }
        let min_ready = spec.min_ready_seconds.unwrap_or(0);
        if monotonic
            && (is_terminating(pod)
                || !is_running_and_ready(pod)
                || !is_pod_available(pod, min_ready, Timestamp::now()))
        {
            return Ok(true);
        }
        let retention_ok = self.claims_match_retention(update_set, update_spec, pod);
        if identity_matches(set, pod) && storage_matches(set, spec, pod) && retention_ok {
            return Ok(false);
        }
        self.update_pod(update_set, update_spec, pod).await?;
        Ok(false)
    }

    async fn fix_condemned_claims(
        &self,
        update_set: &StatefulSet,
        update_spec: &StatefulSetSpec,
        pod: &Arc<Pod>,
    ) -> anyhow::Result<bool> {
        if !self.claims_match_retention(update_set, update_spec, pod) {
            self.update_claims_for_retention(update_set, update_spec, pod)
                .await?;
        }
        Ok(false)
    }

    async fn process_condemned(
        &self,
        set: &StatefulSet,
        min_ready: i32,
        first_unavailable: Option<&str>,
        monotonic: bool,
        pod: &Arc<Pod>,
        now: Timestamp,
    ) -> anyhow::Result<bool> {
        if is_terminating(pod) {
            return Ok(monotonic);
        }
        let is_first_unavailable = first_unavailable == Some(name_of(&pod.metadata));
        if monotonic
            && !is_first_unavailable
            && (!is_running_and_ready(pod) || !is_pod_available(pod, min_ready, now))
        {
            return Ok(true);
        }
        tracing::debug!(statefulset = %set_key(set), pod = name_of(&pod.metadata), "terminating pod for scale down");
        self.delete_pod(set, pod)
            .await
            .map_err(|e| anyhow!(err_msg(&e)))?;
        Ok(true)
    }

    /// Events about a pod, as Kubernetes' recordPodEvent writes them.
    fn pod_event(&self, verb: &str, set: &StatefulSet, pod: &Pod, err: Option<&anyhow::Error>) {
        let (pn, sn) = (name_of(&pod.metadata), name_of(&set.metadata));
        let title = title_case(verb);
        match err {
            None => self.recorder.normal(
                set,
                &format!("Successful{title}"),
                format!("{verb} Pod {pn} in StatefulSet {sn} successful"),
            ),
            Some(e) => self.recorder.warning(
                set,
                &format!("Failed{title}"),
                format!("{verb} Pod {pn} in StatefulSet {sn} failed error: {e:#}"),
            ),
        }
    }

    fn claim_event(
        &self,
        verb: &str,
        set: &StatefulSet,
        pod: &Pod,
        claim: &str,
        err: Option<&str>,
    ) {
        let (pn, sn) = (name_of(&pod.metadata), name_of(&set.metadata));
        let title = title_case(verb);
        match err {
            None => self.recorder.normal(
                set,
                &format!("Successful{title}"),
                format!("{verb} Claim {claim} Pod {pn} in StatefulSet {sn} success"),
            ),
            Some(e) => self.recorder.warning(
                set,
                &format!("Failed{title}"),
                format!("{verb} Claim {claim} for Pod {pn} in StatefulSet {sn} failed error: {e}"),
            ),
        }
    }

    async fn delete_pod(&self, set: &StatefulSet, pod: &Pod) -> kube::Result<()> {
        let res = self
            .pod_api(ns_of(&pod.metadata))
            .delete(name_of(&pod.metadata), &DeleteParams::default())
            .await
            .map(|_| ());
        let err = res.as_ref().err().map(|e| anyhow!(err_msg(e)));
        self.pod_event("delete", set, pod, err.as_ref());
        res
    }

    /// Create the pod's claims, then the pod, then set the claims' owners.
    async fn create_pod(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        pod: &Pod,
    ) -> anyhow::Result<()> {
        if let Err(e) = self.create_claims(set, spec, pod).await {
            self.pod_event("create", set, pod, Some(&e));
            return Err(e);
        }
        let res = self
            .pod_api(ns_of(&pod.metadata))
            .create(&PostParams::default(), pod)
            .await;
        if let Err(e) = &res {
            if is_conflict(e) {
                // Already exists: the cache is behind; the next sync sees it.
                return Err(anyhow!(err_msg(e)));
            }
        }
        if let Err(e) = self.update_claims_for_retention(set, spec, pod).await {
            self.pod_event("update", set, pod, Some(&e));
            return Err(e);
        }
        let err = res.err().map(|e| anyhow!(err_msg(&e)));
        self.pod_event("create", set, pod, err.as_ref());
        match err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Create the pod's missing claims (Kubernetes' createPersistentVolumeClaims).
    async fn create_claims(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        pod: &Pod,
    ) -> anyhow::Result<()> {
        let ns = ns_of(&set.metadata);
        let api = self.claim_api(ns);
        let mut errs = Vec::new();
        for (_, claim) in pod_claims(set, spec, pod) {
            let name = name_of(&claim.metadata).to_string();
            match self.claims.get(ns, &name) {
                None => match api.create(&PostParams::default(), &claim).await {
                    Ok(_) => self.claim_event("create", set, pod, &name, None),
                    Err(e) => {
                        errs.push(format!("failed to create PVC {name}: {}", err_msg(&e)));
                        if !is_conflict(&e) {
                            self.claim_event("create", set, pod, &name, Some(&err_msg(&e)));
                        }
                    }
                },
                Some(existing) => {
                    if existing.metadata.deletion_timestamp.is_some() {
                        errs.push(format!("pvc {name} is being deleted"));
                    }
                }
            }
        }
        match aggregate(errs) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// With a WhenScaled=Delete policy, a claim still owned by an earlier pod of the same name
    /// must be garbage-collected before the pod is recreated.
    fn claim_is_stale(&self, set: &StatefulSet, spec: &StatefulSetSpec, pod: &Pod) -> bool {
        if retention(spec).0 == RETAIN {
            return false;
        }
        let ns = ns_of(&set.metadata);
        pod_claims(set, spec, pod).iter().any(|(_, c)| {
            self.claims
                .get(ns, name_of(&c.metadata))
                .is_some_and(|existing| has_stale_owner_ref(&existing, &Owner::pod(pod)))
        })
    }

    fn claims_match_retention(&self, set: &StatefulSet, spec: &StatefulSetSpec, pod: &Pod) -> bool {
        let ns = ns_of(&set.metadata);
        let ord = ordinal(pod);
        claim_templates(spec).iter().all(|t| {
            let name = claim_name(name_of(&t.metadata), name_of(&set.metadata), ord);
            self.claims
                .get(ns, &name)
                .is_none_or(|c| claim_owner_up_to_date(&c, set, spec, pod))
        })
    }

    async fn update_claims_for_retention(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        pod: &Pod,
    ) -> anyhow::Result<()> {
        let ns = ns_of(&set.metadata);
        let api = self.claim_api(ns);
        let ord = ordinal(pod);
        for t in claim_templates(spec) {
            let name = claim_name(name_of(&t.metadata), name_of(&set.metadata), ord);
            let Some(existing) = self.claims.get(ns, &name) else {
                continue;
            };
            if claim_owner_up_to_date(&existing, set, spec, pod) {
                continue;
            }
            let mut claim = (*existing).clone();
            update_claim_owner_refs(&mut claim, set, spec, pod);
            api.replace(&name, &PostParams::default(), &claim)
                .await
                .map_err(|e| {
                    anyhow!(
                        "could not update claim {name} for delete policy ownerRefs: {}",
                        err_msg(&e)
                    )
                })?;
        }
        Ok(())
    }

    /// Repair a pod's identity, storage and claim ownership (Kubernetes' UpdateStatefulPod).
    /// The cache holds trimmed pods, so the pod is read fresh before it is written.
    async fn update_pod(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        cached: &Pod,
    ) -> anyhow::Result<()> {
        let api = self.pod_api(ns_of(&cached.metadata));
        let name = name_of(&cached.metadata).to_string();
        let mut attempted = false;
        let mut result = Ok(());
        for _ in 0..5 {
            let mut pod = match api.get(&name).await {
                Ok(p) => p,
                Err(e) => {
                    result = Err(anyhow!(err_msg(&e)));
                    break;
                }
            };
            let mut consistent = true;
            if !identity_matches(set, &pod) {
                update_identity(set, &mut pod);
                consistent = false;
            }
            if !storage_matches(set, spec, &pod) {
                update_storage(set, spec, &mut pod);
                consistent = false;
                if let Err(e) = self.create_claims(set, spec, &pod).await {
                    self.pod_event("update", set, &pod, Some(&e));
                    return Err(e);
                }
            }
            if !self.claims_match_retention(set, spec, &pod) {
                if let Err(e) = self.update_claims_for_retention(set, spec, &pod).await {
                    self.pod_event("update", set, &pod, Some(&e));
                    return Err(e);
                }
                consistent = false;
            }
            if consistent {
                result = Ok(());
                break;
            }
            attempted = true;
            match api.replace(&name, &PostParams::default(), &pod).await {
                Ok(_) => {
                    result = Ok(());
                    break;
                }
                Err(e) if is_conflict(&e) => result = Err(anyhow!(err_msg(&e))),
                Err(e) => {
                    result = Err(anyhow!(err_msg(&e)));
                    break;
                }
            }
        }
        if attempted {
            self.pod_event("update", set, cached, result.as_ref().err());
        }
        result
    }

    /// Record the status if it changed, retrying conflicts with a fresh read.
    async fn store_status(
        &self,
        set: &StatefulSet,
        spec: &StatefulSetSpec,
        status: &mut SetStatus,
    ) -> anyhow::Result<()> {
        status.complete_rolling_update(spec);
        if !status.differs_from(&SetStatus::of(set)) {
            return Ok(());
        }
        let api = self.set_api(ns_of(&set.metadata));
        let name = name_of(&set.metadata);
        let mut obj = set.clone();
        let mut last = None;
        for _ in 0..5 {
            obj.status = Some(status.to_k8s());
            match api.replace_status(name, &PostParams::default(), &obj).await {
                Ok(_) => return Ok(()),
                Err(e) if is_conflict(&e) => {
                    last = Some(e);
                    obj = api.get(name).await.map_err(|e| anyhow!(err_msg(&e)))?;
                    if uid_of(&obj.metadata) != uid_of(&set.metadata) {
                        return Ok(());
                    }
                }
                Err(e) => return Err(anyhow!(err_msg(&e))),
            }
        }
        Err(anyhow!(last.map(|e| err_msg(&e)).unwrap_or_default()))
    }
}

fn title_case(verb: &str) -> String {
    let mut c = verb.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

/// `e`, with `other`'s error appended when there is one (Go's aggregate of both).
fn with_other(e: anyhow::Error, other: anyhow::Result<()>) -> anyhow::Error {
    match other {
        Ok(()) => e,
        Err(o) => anyhow!("[{e:#}, {o:#}]"),
    }
}

/// Kubernetes' runForAll: in order, stopping at the first `true` or error (OrderedReady); or
/// all at once in slow-start batches of 1, 2, 4, ... (Parallel). Returns (stop, outcome).
async fn run_for_all<F, Fut>(n: usize, monotonic: bool, f: F) -> (bool, anyhow::Result<()>)
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = anyhow::Result<bool>>,
{
    if monotonic {
        for i in 0..n {
            match f(i).await {
                Ok(false) => {}
                Ok(true) => return (true, Ok(())),
                Err(e) => return (true, Err(e)),
            }
        }
        return (false, Ok(()));
    }
    let mut next = 0;
    let mut remaining = n;
    let mut batch = remaining.min(1);
    while batch > 0 {
        let results = futures::future::join_all((next..next + batch).map(&f)).await;
        next += batch;
        let errs: Vec<String> = results
            .into_iter()
            .filter_map(|r| r.err().map(|e| format!("{e:#}")))
            .collect();
        if let Some(e) = aggregate(errs) {
            return (true, Err(e));
        }
        remaining -= batch;
        batch = (2 * batch).min(remaining).min(MAX_BATCH);
    }
    (false, Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::{
        RollingUpdateStatefulSetStrategy, StatefulSetOrdinals,
        StatefulSetPersistentVolumeClaimRetentionPolicy, StatefulSetUpdateStrategy,
    };
    use k8s_openapi::api::core::v1::{Container, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};

    fn set(replicas: i32) -> StatefulSet {
        StatefulSet {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("set-uid".into()),
                generation: Some(1),
                ..Default::default()
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(replicas),
                service_name: Some("nginx".into()),
                selector: LabelSelector {
                    match_labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                    ..Default::default()
                },
                template: PodTemplateSpec {
                    metadata: Some(ObjectMeta {
                        labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                        ..Default::default()
                    }),
                    spec: Some(PodSpec {
                        containers: vec![Container {
                            name: "c".into(),
                            image: Some("nginx".into()),
                            ..Default::default()
                        }],
                        ..Default::default()
                    }),
                },
                volume_claim_templates: Some(vec![PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some("data".into()),
                        ..Default::default()
                    },
                    ..Default::default()
                }]),
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some("RollingUpdate".into()),
                    rolling_update: Some(RollingUpdateStatefulSetStrategy {
                        partition: Some(0),
                        max_unavailable: None,
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn spec(s: &StatefulSet) -> &StatefulSetSpec {
        s.spec.as_ref().unwrap()
    }

    fn pod_named(name: &str) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(format!("{name}-uid")),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn running(mut p: Pod, ready: bool) -> Pod {
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                last_transition_time: Some(Time(Timestamp::UNIX_EPOCH)),
                ..Default::default()
            }]),
            ..Default::default()
        });
        p
    }

    #[test]
    fn ordinals_are_parsed_from_pod_names() {
        assert_eq!(parent_and_ordinal("web-0"), ("web", 0));
        assert_eq!(parent_and_ordinal("my-web-12"), ("my-web", 12));
        assert_eq!(parent_and_ordinal("web"), ("", -1));
        assert_eq!(parent_and_ordinal("web-x"), ("", -1));
        assert_eq!(parent_and_ordinal("web-99999999999"), ("web", -1));
        assert!(is_member_of("web", &pod_named("web-3")));
        assert!(!is_member_of("web", &pod_named("web2-3")));
        assert!(!is_member_of("web", &pod_named("web-abc")));
    }

    #[test]
    fn new_pods_have_identity_storage_and_revision() {
        let s = set(3);
        let p = new_versioned_pod(&s, &s, "web-a", "web-b", 1).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("web-1"));
        assert_eq!(p.metadata.generate_name.as_deref(), Some("web-"));
        let labels = p.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[POD_NAME_LABEL], "web-1");
        assert_eq!(labels[POD_INDEX_LABEL], "1");
        assert_eq!(labels["app"], "web");
        // Partition 0: every new pod is made from the update revision.
        assert_eq!(labels[REVISION_LABEL], "web-b");
        let ps = p.spec.as_ref().unwrap();
        assert_eq!(ps.hostname.as_deref(), Some("web-1"));
        assert_eq!(ps.subdomain.as_deref(), Some("nginx"));
        let vols = ps.volumes.as_ref().unwrap();
        assert_eq!(vols[0].name, "data");
        assert_eq!(
            vols[0].persistent_volume_claim.as_ref().unwrap().claim_name,
            "data-web-1"
        );
        assert!(identity_matches(&s, &p));
        assert!(storage_matches(&s, spec(&s), &p));
        let r = controller_ref(&p.metadata).unwrap();
        assert_eq!(
            (r.kind.as_str(), r.uid.as_str()),
            ("StatefulSet", "set-uid")
        );
    }

    #[test]
    fn pods_below_the_partition_are_made_from_the_current_revision() {
        let mut s = set(3);
        s.spec
            .as_mut()
            .unwrap()
            .update_strategy
            .as_mut()
            .unwrap()
            .rolling_update
            .as_mut()
            .unwrap()
            .partition = Some(2);
        let rev = |o| {
            new_versioned_pod(&s, &s, "cur", "upd", o)
                .unwrap()
                .metadata
                .labels
                .unwrap()[REVISION_LABEL]
                .clone()
        };
        assert_eq!(rev(0), "cur");
        assert_eq!(rev(1), "cur");
        assert_eq!(rev(2), "upd");
        // With a start ordinal the partition counts from the start.
        s.spec.as_mut().unwrap().ordinals = Some(StatefulSetOrdinals { start: Some(5) });
        let rev = |o| {
            new_versioned_pod(&s, &s, "cur", "upd", o)
                .unwrap()
                .metadata
                .labels
                .unwrap()[REVISION_LABEL]
                .clone()
        };
        assert_eq!(rev(6), "cur");
        assert_eq!(rev(7), "upd");
    }

    #[test]
    fn claims_are_named_and_labelled_per_pod() {
        let s = set(2);
        let p = pod_named("web-1");
        let claims = pod_claims(&s, spec(&s), &p);
        assert_eq!(claims.len(), 1);
        let (tn, c) = &claims[0];
        assert_eq!(tn, "data");
        assert_eq!(c.metadata.name.as_deref(), Some("data-web-1"));
        assert_eq!(c.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(c.metadata.labels.as_ref().unwrap()["app"], "web");
    }

    fn with_policy(scaled: &str, deleted: &str) -> StatefulSet {
        let mut s = set(2);
        s.spec
            .as_mut()
            .unwrap()
            .persistent_volume_claim_retention_policy =
            Some(StatefulSetPersistentVolumeClaimRetentionPolicy {
                when_scaled: Some(scaled.into()),
                when_deleted: Some(deleted.into()),
            });
        s
    }

    fn ref_uids(c: &PersistentVolumeClaim) -> Vec<&str> {
        refs(c).iter().map(|r| r.uid.as_str()).collect()
    }

    #[test]
    fn claim_owners_follow_the_retention_policy() {
        let claim = PersistentVolumeClaim::default();
        let live = pod_named("web-1");
        let gone = pod_named("web-5");

        let s = with_policy("Retain", "Retain");
        assert!(claim_owner_up_to_date(&claim, &s, spec(&s), &live));

        let s = with_policy("Retain", "Delete");
        assert!(!claim_owner_up_to_date(&claim, &s, spec(&s), &live));
        let mut c = claim.clone();
        update_claim_owner_refs(&mut c, &s, spec(&s), &live);
        assert_eq!(ref_uids(&c), ["set-uid"]);
        assert_eq!(refs(&c)[0].controller, Some(true));
        assert!(claim_owner_up_to_date(&c, &s, spec(&s), &live));

        let s = with_policy("Delete", "Delete");
        let mut c = claim.clone();
        update_claim_owner_refs(&mut c, &s, spec(&s), &live);
        assert_eq!(ref_uids(&c), ["set-uid"]);
        // Scaled away: the set's reference is replaced by the pod's.
        assert!(!claim_owner_up_to_date(&c, &s, spec(&s), &gone));
        update_claim_owner_refs(&mut c, &s, spec(&s), &gone);
        assert_eq!(ref_uids(&c), ["web-5-uid"]);
        assert!(claim_owner_up_to_date(&c, &s, spec(&s), &gone));

        let s = with_policy("Delete", "Retain");
        let mut c = claim.clone();
        assert!(claim_owner_up_to_date(&c, &s, spec(&s), &live));
        update_claim_owner_refs(&mut c, &s, spec(&s), &gone);
        assert_eq!(ref_uids(&c), ["web-5-uid"]);

        // Another controller owns the claim: leave it alone.
        let s = with_policy("Delete", "Delete");
        let mut other = claim.clone();
        other.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Foo".into(),
            name: "x".into(),
            uid: "foo".into(),
            controller: Some(true),
            block_owner_deletion: None,
        }]);
        assert!(claim_owner_up_to_date(&other, &s, spec(&s), &live));
        // A reference to an earlier pod of the same name is stale.
        let mut stale = claim.clone();
        stale.metadata.owner_references =
            Some(vec![Owner::pod(&pod_named("web-1")).controller_ref()]);
        let mut new_pod = pod_named("web-1");
        new_pod.metadata.uid = None;
        assert!(has_stale_owner_ref(&stale, &Owner::pod(&new_pod)));
    }

    #[test]
    fn status_counts_and_completes_rolling_updates() {
        let s = set(2);
        let mut a = running(pod_named("web-0"), true);
        a.metadata.labels = Some(BTreeMap::from([(REVISION_LABEL.into(), "upd".into())]));
        let mut b = running(pod_named("web-1"), false);
        b.metadata.labels = Some(BTreeMap::from([(REVISION_LABEL.into(), "cur".into())]));
        let pods = [Arc::new(a), Arc::new(b)];
        let mut st = SetStatus {
            current_revision: "cur".into(),
            update_revision: "upd".into(),
            ..Default::default()
        };
        st.count(0, Timestamp::now(), &[&pods]);
        assert_eq!(
            (st.replicas, st.ready, st.available, st.current, st.updated),
            (2, 1, 1, 1, 1)
        );
        st.complete_rolling_update(spec(&s));
        assert_eq!(st.current_revision, "cur");
        st.ready = 2;
        st.updated = 2;
        st.complete_rolling_update(spec(&s));
        assert_eq!((st.current_revision.as_str(), st.current), ("upd", 2));
        let k = st.to_k8s();
        assert_eq!(k.available_replicas, Some(1));
        assert_eq!(k.collision_count, Some(0));
        assert!(st.differs_from(&SetStatus::default()));
        assert!(!st.differs_from(&st.clone()));
    }

    #[test]
    fn revisions_hash_the_go_encoding_of_the_template_patch() {
        let s = set(1);
        let r = new_revision(&s, spec(&s), 1, 0);
        let raw = go_json(&r.data.as_ref().unwrap().0);
        assert!(raw.starts_with(r#"{"spec":{"template":{"$patch":"replace","metadata":{"creationTimestamp":null,"labels":{"app":"web"}},"spec":{"containers":[{"image":"nginx","name":"c","resources":{}}]}}}}"#), "{raw}");
        let hash = r.metadata.labels.as_ref().unwrap()[HASH_LABEL].clone();
        assert_eq!(
            r.metadata.name.as_deref(),
            Some(format!("web-{hash}").as_str())
        );
        assert_eq!(hash, revision_hash(&raw, 0));
        assert_ne!(revision_hash(&raw, 0), revision_hash(&raw, 1));
        // The template comes back out of the patch.
        let t = template_from_patch(&r.data.as_ref().unwrap().0).unwrap();
        assert_eq!(
            t.spec.unwrap().containers[0].image.as_deref(),
            Some("nginx")
        );
        let same = new_revision(&s, spec(&s), 7, 0);
        assert!(equal_revision(&r, &same));
        let mut changed = set(1);
        changed
            .spec
            .as_mut()
            .unwrap()
            .template
            .spec
            .as_mut()
            .unwrap()
            .containers[0]
            .image = Some("nginx:2".into());
        assert!(!equal_revision(
            &r,
            &new_revision(&changed, spec(&changed), 2, 0)
        ));
    }

    #[test]
    fn go_json_escapes_and_sorts_like_go() {
        let v = json!({"b": "<a&b>", "a": [1, true, null], "c": "\u{1}\n"});
        assert_eq!(
            go_json(&v),
            r#"{"a":[1,true,null],"b":"\u003ca\u0026b\u003e","c":"\u0001\n"}"#
        );
    }

    #[test]
    fn hashes_match_go() {
        // Reference values of Go's hash/fnv.
        assert_eq!(fnv32(&[b""]), 0x811c_9dc5);
        assert_eq!(fnv32(&[b"a"]), 0x050c_5d7e);
        assert_eq!(fnv32a(&[b"a"]), 0xe40c_292c);
        assert_eq!(fnv32a(&[b"fo", b"obar"]), 0xbf9c_f968);
        // rand.SafeEncodeString maps each digit through its alphabet.
        assert_eq!(safe_encode(1_234_567_890), "56789bcdf4");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
    }

    #[test]
    fn aggregate_formats_like_go() {
        assert!(aggregate(vec![]).is_none());
        assert_eq!(aggregate(vec!["a".into()]).unwrap().to_string(), "a");
        assert_eq!(
            aggregate(vec!["a".into(), "b".into()]).unwrap().to_string(),
            "[a, b]"
        );
    }

    #[tokio::test]
    async fn run_for_all_orders_or_batches() {
        use std::sync::Mutex;
        let seen = Mutex::new(Vec::new());
        let (stop, res) = run_for_all(5, true, |i| {
            seen.lock().unwrap().push(i);
            async move { Ok(i == 2) }
        })
        .await;
        assert!(stop && res.is_ok());
        assert_eq!(*seen.lock().unwrap(), [0, 1, 2]);

        let seen = Mutex::new(Vec::new());
        let (stop, res) = run_for_all(7, false, |i| {
            seen.lock().unwrap().push(i);
            async move { Ok(true) }
        })
        .await;
        assert!(!stop && res.is_ok());
        assert_eq!(seen.lock().unwrap().len(), 7);

        // A failing batch stops the slow start: 1, then 2 (fails), never the 4 after.
        let seen = Mutex::new(Vec::new());
        let (stop, res) = run_for_all(7, false, |i| {
            seen.lock().unwrap().push(i);
            async move {
                if i == 2 {
                    Err(anyhow!("boom"))
                } else {
                    Ok(false)
                }
            }
        })
        .await;
        assert!(stop);
        assert_eq!(res.unwrap_err().to_string(), "boom");
        assert_eq!(seen.lock().unwrap().len(), 3);
    }
}
