//! Static pods from a manifest directory, published as mirror pods.
//!
//! The kubelet reads every manifest in `--pod-manifest-path` (a directory, or one file), gives
//! each pod the identity Kubernetes gives a file-sourced pod (name `<name>-<node>`, a UID that
//! hashes the manifest, the node and the file, the `kubernetes.io/config.*` annotations, a
//! toleration of every NoExecute taint) and runs it through the same pod workers as API pods
//! ([`crate::pods`]). The API server only sees a *mirror pod* per static pod: the same pod
//! with `kubernetes.io/config.mirror=<hash>`, owned by the Node. The worker of a static pod
//! keeps its mirror pod in step ([`sync_mirror`]): one being deleted or of an older manifest is
//! force-deleted and created anew; the status goes to the mirror pod. The directory is
//! re-read every [`POLL`]; a changed manifest is a new pod (new hash: the old one is stopped
//! before the new one starts), a removed manifest stops its pod, after which its mirror pod is
//! deleted.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodStatus, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::Api;
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use crate::pods::util::{format_pod, pod_name, pod_namespace, pod_uid};
use crate::pods::Manager;
use crate::Kubelet;

/// Where a pod came from (`file` for static pods).
pub const CONFIG_SOURCE: &str = "kubernetes.io/config.source";
/// The static pod's hash (its UID).
pub const CONFIG_HASH: &str = "kubernetes.io/config.hash";
/// When the kubelet first saw the pod (RFC 3339 with nanoseconds).
pub const CONFIG_SEEN: &str = "kubernetes.io/config.seen";
/// On a mirror pod: the hash of the static pod it mirrors.
pub const CONFIG_MIRROR: &str = "kubernetes.io/config.mirror";
/// The source of pods read from manifest files.
pub const FILE_SOURCE: &str = "file";

/// How often the manifest directory is read again and mirror pods are checked.
pub const POLL: Duration = Duration::from_secs(2);

/// Whether a pod carries the mirror pod annotation.
pub fn is_mirror(pod: &Pod) -> bool {
    annotation(pod, CONFIG_MIRROR).is_some()
}

/// Whether a pod came from a source other than the API server (Kubernetes' IsStaticPod).
pub fn is_static(pod: &Pod) -> bool {
    annotation(pod, CONFIG_SOURCE).is_some_and(|s| s != "api")
}

fn annotation<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The hash of a static pod (its config.hash annotation, else its UID).
pub fn config_hash(pod: &Pod) -> &str {
    annotation(pod, CONFIG_HASH).unwrap_or_else(|| pod_uid(pod))
}

/// Whether `mirror` is the mirror pod of the static pod `pod`: same full name, and its
/// mirror annotation names the static pod's hash.
pub fn is_mirror_of(mirror: &Pod, pod: &Pod) -> bool {
    pod_name(mirror) == pod_name(pod)
        && pod_namespace(mirror) == pod_namespace(pod)
        && annotation(mirror, CONFIG_MIRROR) == Some(config_hash(pod))
}

/// The mirror pod of a static pod as the pod informer has it.
pub fn mirror_of(k: &Kubelet, pod: &Pod) -> Option<Arc<Pod>> {
    k.pods
        .get(pod_namespace(pod), pod_name(pod))
        .filter(|m| is_mirror_of(m, pod))
}

// ---------------------------------------------------------------------------------------
// Manifests.

/// Read one manifest: a single v1 Pod in YAML or JSON. `source` is the file's path (it is
/// part of the UID). Defaults are applied as the API server's scheme would, then the static
/// pod identity; the pod is validated.
pub fn parse_manifest(data: &[u8], source: &str, node: &str) -> Result<Pod, String> {
    let couldnt =
        |e: String| format!("{source}: couldn't parse as pod({e}), please check config file");
    let mut v: Value = serde_yaml::from_slice(data)
        .map_err(|e| couldnt(format!("error converting YAML to JSON: {e}")))?;
    let Some(obj) = v.as_object_mut() else {
        return Err(couldnt(format!(
            "Object 'Kind' is missing in '{}'",
            compact(data)
        )));
    };
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind.is_empty() {
        return Err(couldnt(format!(
            "Object 'Kind' is missing in '{}'",
            compact(data)
        )));
    }
    if version.is_empty() {
        return Err(couldnt(format!(
            "Object 'apiVersion' is missing in '{}'",
            compact(data)
        )));
    }
    if version != "v1" || kind != "Pod" {
        return Err(couldnt(format!(
            "invalid pod: {version}, Kind={kind} is not a v1 Pod"
        )));
    }
    default_pod(obj);
    let pod: Pod = serde_json::from_value(v).map_err(|e| couldnt(e.to_string()))?;
    let pod = apply_defaults(pod, source, node);
    let errs = validate(&pod);
    if !errs.is_empty() {
        return Err(format!("invalid pod: [{}]", errs.join(", ")));
    }
    Ok(pod)
}

/// The first line of a manifest, for messages.
fn compact(data: &[u8]) -> String {
    let s = String::from_utf8_lossy(data);
    let s = s.trim();
    let s: String = s.chars().take(120).collect();
    s.replace('\n', " ")
}

/// The static pod identity (Kubernetes' applyDefaults for file sources): a UID hashing the
/// pod with the node and the file (unless the manifest sets one), `<name>-<node>`, the
/// default namespace, the node, the hash and source annotations, a toleration of every
/// NoExecute taint, and a Pending status.
pub fn apply_defaults(mut pod: Pod, source: &str, node: &str) -> Pod {
    if pod.metadata.uid.as_deref().unwrap_or_default().is_empty() {
        let mut data = serde_json::to_vec(&pod).unwrap_or_default();
        data.extend_from_slice(format!("host:{node}").as_bytes());
        data.extend_from_slice(format!("file:{source}").as_bytes());
        pod.metadata.uid = Some(hex(&md5(&data)));
    }
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    pod.metadata.name = Some(format!(
        "{}-{}",
        pod.metadata.name.as_deref().unwrap_or_default(),
        node.to_lowercase()
    ));
    if pod
        .metadata
        .namespace
        .as_deref()
        .unwrap_or_default()
        .is_empty()
    {
        pod.metadata.namespace = Some("default".into());
    }
    let spec = pod.spec.get_or_insert_with(Default::default);
    spec.node_name = Some(node.to_string());
    add_or_update_toleration(
        spec.tolerations.get_or_insert_with(Vec::new),
        Toleration {
            operator: Some("Exists".into()),
            effect: Some("NoExecute".into()),
            ..Default::default()
        },
    );
    let ann = pod.metadata.annotations.get_or_insert_with(BTreeMap::new);
    ann.insert(CONFIG_HASH.into(), uid);
    ann.insert(CONFIG_SOURCE.into(), FILE_SOURCE.into());
    pod.status = Some(PodStatus {
        phase: Some("Pending".into()),
        ..Default::default()
    });
    pod
}

/// Replace a toleration matching `t` (same key, operator, value and effect), else add it.
fn add_or_update_toleration(list: &mut Vec<Toleration>, t: Toleration) {
    let key = |x: &Toleration| {
        (
            x.key.clone().unwrap_or_default(),
            x.operator.clone().unwrap_or_default(),
            x.value.clone().unwrap_or_default(),
            x.effect.clone().unwrap_or_default(),
        )
    };
    match list.iter_mut().find(|x| key(x) == key(&t)) {
        Some(x) => *x = t,
        None => list.push(t),
    }
}

fn set_default(m: &mut Map<String, Value>, key: &str, v: Value) {
    if m.get(key).is_none_or(Value::is_null) {
        m.insert(key.into(), v);
    }
}

/// The v1 scheme defaults of a Pod that the kubelet relies on (the mirror pod gets the
/// API server's full defaulting anyway).
fn default_pod(pod: &mut Map<String, Value>) {
    let spec = pod.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else {
        return;
    };
    set_default(spec, "dnsPolicy", json!("ClusterFirst"));
    set_default(spec, "restartPolicy", json!("Always"));
    set_default(spec, "terminationGracePeriodSeconds", json!(30));
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "schedulerName", json!("default-scheduler"));
    set_default(spec, "enableServiceLinks", json!(true));
    for list in ["initContainers", "containers"] {
        if let Some(cs) = spec.get_mut(list).and_then(Value::as_array_mut) {
            for c in cs.iter_mut().filter_map(Value::as_object_mut) {
                default_container(c);
            }
        }
    }
    if let Some(vols) = spec.get_mut("volumes").and_then(Value::as_array_mut) {
        for v in vols.iter_mut().filter_map(Value::as_object_mut) {
            if let Some(hp) = v.get_mut("hostPath").and_then(Value::as_object_mut) {
                set_default(hp, "type", json!(""));
            }
            for (src, field) in [("configMap", "defaultMode"), ("secret", "defaultMode")] {
                if let Some(s) = v.get_mut(src).and_then(Value::as_object_mut) {
                    set_default(s, field, json!(420));
                }
            }
        }
    }
}

fn default_container(c: &mut Map<String, Value>) {
    set_default(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_default(c, "terminationMessagePolicy", json!("File"));
    let image = c.get("image").and_then(Value::as_str).unwrap_or_default();
    let policy = if image_tag(image).is_none_or(|t| t == "latest") && !image.contains('@') {
        "Always"
    } else {
        "IfNotPresent"
    };
    set_default(c, "imagePullPolicy", json!(policy));
    if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            set_default(p, "protocol", json!("TCP"));
        }
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = c.get_mut(probe).and_then(Value::as_object_mut) {
            set_default(p, "timeoutSeconds", json!(1));
            set_default(p, "periodSeconds", json!(10));
            set_default(p, "successThreshold", json!(1));
            set_default(p, "failureThreshold", json!(3));
            if let Some(h) = p.get_mut("httpGet").and_then(Value::as_object_mut) {
                set_default(h, "path", json!("/"));
                set_default(h, "scheme", json!("HTTP"));
            }
        }
    }
}

/// The tag of an image reference (None without one).
fn image_tag(image: &str) -> Option<&str> {
    let name = image.split('@').next().unwrap_or_default();
    let last = name.rsplit('/').next().unwrap_or_default();
    last.split_once(':').map(|(_, t)| t)
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The checks of pod validation a manifest most often fails, as `field: problem`.
fn validate(pod: &Pod) -> Vec<String> {
    let mut errs = Vec::new();
    let name = pod_name(pod);
    // The manifest had no name when only `-<node>` is left.
    if name.starts_with('-') || name.is_empty() {
        errs.push("metadata.name: Required value: name or generateName is required".to_string());
    } else if !is_dns_subdomain(name) {
        errs.push(format!(
            "metadata.name: Invalid value: {name:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
        ));
    }
    let ns = pod_namespace(pod);
    if !is_dns_label(ns) {
        errs.push(format!(
            "metadata.namespace: Invalid value: {ns:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
        ));
    }
    let Some(spec) = pod.spec.as_ref() else {
        errs.push("spec.containers: Required value".into());
        return errs;
    };
    if spec.containers.is_empty() {
        errs.push("spec.containers: Required value".into());
    }
    let mut names = HashSet::new();
    let lists = [
        (
            "spec.initContainers",
            spec.init_containers.as_deref().unwrap_or(&[]),
        ),
        ("spec.containers", spec.containers.as_slice()),
    ];
    for (path, list) in lists {
        for (i, c) in list.iter().enumerate() {
            if c.name.is_empty() {
                errs.push(format!("{path}[{i}].name: Required value"));
            } else if !is_dns_label(&c.name) {
                errs.push(format!(
                    "{path}[{i}].name: Invalid value: {:?}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                    c.name
                ));
            } else if !names.insert(c.name.clone()) {
                errs.push(format!("{path}[{i}].name: Duplicate value: {:?}", c.name));
            }
            if c.image.as_deref().unwrap_or_default().trim().is_empty() {
                errs.push(format!("{path}[{i}].image: Required value"));
            }
        }
    }
    errs
}

/// The manifest files of `path`: every regular file in the directory whose name does not
/// start with a dot, in name order (or `path` itself when it is a file). A missing path has
/// none.
pub fn manifest_files(path: &Path) -> Vec<PathBuf> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Vec::new();
    };
    if meta.is_file() {
        return vec![path.to_path_buf()];
    }
    let Ok(entries) = std::fs::read_dir(path) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .map(|e| e.path())
        .filter(|p| {
            let regular = std::fs::metadata(p).is_ok_and(|m| m.is_file());
            if !regular && p.is_dir() {
                tracing::debug!(path = %p.display(), "not recursing into manifest path");
            }
            regular
        })
        .collect();
    files.sort();
    files
}

// ---------------------------------------------------------------------------------------
// The set of static pods.

/// What changed between two sets of static pods.
#[derive(Debug, Default)]
pub struct Diff {
    pub added: Vec<Arc<Pod>>,
    /// Same UID, different pod (a manifest with its own UID was edited).
    pub updated: Vec<Arc<Pod>>,
    pub removed: Vec<Arc<Pod>>,
}

/// The difference between two sets of pods keyed by UID.
pub fn diff(old: &BTreeMap<String, Arc<Pod>>, new: &BTreeMap<String, Arc<Pod>>) -> Diff {
    let mut d = Diff::default();
    for (uid, p) in new {
        match old.get(uid) {
            None => d.added.push(p.clone()),
            Some(o) if o != p => d.updated.push(p.clone()),
            Some(_) => {}
        }
    }
    for (uid, p) in old {
        if !new.contains_key(uid) {
            d.removed.push(p.clone());
        }
    }
    d
}

/// A parsed manifest, kept while the file's content stays the same.
struct Parsed {
    digest: [u8; 16],
    result: Result<Pod, String>,
}

#[derive(Default)]
struct Inner {
    /// UID → the static pod.
    pods: BTreeMap<String, Arc<Pod>>,
    /// UID → when the kubelet first saw the pod.
    seen: HashMap<String, String>,
    files: HashMap<PathBuf, Parsed>,
}

/// The static pods the kubelet runs.
#[derive(Default)]
pub struct StaticPods {
    inner: Mutex<Inner>,
}

impl StaticPods {
    pub fn get(&self, uid: &str) -> Option<Arc<Pod>> {
        self.inner.lock().pods.get(uid).cloned()
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.inner.lock().pods.contains_key(uid)
    }

    pub fn list(&self) -> Vec<Arc<Pod>> {
        self.inner.lock().pods.values().cloned().collect()
    }

    /// The static pod of a full name.
    pub fn by_name(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.inner
            .lock()
            .pods
            .values()
            .find(|p| pod_namespace(p) == namespace && pod_name(p) == name)
            .cloned()
    }

    /// Read the manifests under `path`: the valid pods, each full name once (the first file
    /// in name order wins). Problems are logged when a file's content is new.
    pub fn read(&self, path: &Path, node: &str) -> Vec<Pod> {
        let files = manifest_files(path);
        let mut inner = self.inner.lock();
        inner.files.retain(|p, _| files.contains(p));
        let mut pods = Vec::new();
        let mut names = HashSet::new();
        for file in files {
            let data = match std::fs::read(&file) {
                Ok(d) => d,
                Err(e) => {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(path = %file.display(), error = %e, "could not process manifest file");
                    }
                    continue;
                }
            };
            let digest = md5(&data);
            let fresh = inner.files.get(&file).is_none_or(|p| p.digest != digest);
            if fresh {
                let result = parse_manifest(&data, &file.to_string_lossy(), node);
                if let Err(e) = &result {
                    tracing::warn!(path = %file.display(), error = %e, "could not process manifest file");
                }
                inner.files.insert(file.clone(), Parsed { digest, result });
            }
            let Some(Ok(pod)) = inner.files.get(&file).map(|p| &p.result) else {
                continue;
            };
            let full = (pod_namespace(pod).to_string(), pod_name(pod).to_string());
            if !names.insert(full) {
                if fresh {
                    tracing::warn!(path = %file.display(), pod = %format_pod(pod), "pod failed validation due to duplicate pod name, ignoring");
                }
                continue;
            }
            pods.push(pod.clone());
        }
        pods
    }

    /// Make `pods` the static pods (stamping when each was first seen); what changed.
    pub fn replace(&self, pods: Vec<Pod>) -> Diff {
        let mut inner = self.inner.lock();
        let mut new = BTreeMap::new();
        for mut pod in pods {
            let uid = pod_uid(&pod).to_string();
            let seen = inner
                .seen
                .entry(uid.clone())
                .or_insert_with(rfc3339_nano_now)
                .clone();
            pod.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(CONFIG_SEEN.into(), seen);
            new.insert(uid, Arc::new(pod));
        }
        let d = diff(&inner.pods, &new);
        inner.seen.retain(|uid, _| new.contains_key(uid));
        inner.pods = new;
        d
    }
}

/// Now as Go's RFC3339Nano in UTC.
fn rfc3339_nano_now() -> String {
    let now = k8s_openapi::jiff::Timestamp::now();
    let secs = now.as_second();
    let nanos = now.subsec_nanosecond();
    let base = k8s_openapi::jiff::Timestamp::from_second(secs)
        .map(|t| t.to_string())
        .unwrap_or_default();
    let base = base.trim_end_matches('Z');
    if nanos == 0 {
        format!("{base}Z")
    } else {
        let frac = format!("{nanos:09}");
        format!("{base}.{}Z", frac.trim_end_matches('0'))
    }
}

// ---------------------------------------------------------------------------------------
// Feeding the workers.

/// Load the static pods and start their workers, then keep watching the directory.
pub fn start(m: &Arc<Manager>) {
    let Some(path) = m.k.opts.pod_manifest_path.clone() else {
        return;
    };
    tracing::info!(path = %path.display(), "adding static pod path");
    refresh(m, &path);
    tokio::spawn(run(m.clone(), path));
}

async fn run(m: Arc<Manager>, path: PathBuf) {
    loop {
        tokio::time::sleep(POLL).await;
        refresh(&m, &path);
        if m.k.pods.has_synced() {
            reconcile_mirrors(&m).await;
        }
    }
}

/// Read the directory again and tell the workers.
fn refresh(m: &Arc<Manager>, path: &Path) {
    let pods = m.statics.read(path, &m.k.opts.node_name);
    let d = m.statics.replace(pods);
    for p in &d.removed {
        tracing::info!(pod = %format_pod(p), "static pod removed");
        m.wake(pod_uid(p));
    }
    for p in &d.updated {
        tracing::info!(pod = %format_pod(p), "static pod updated");
        if m.workers.lock().contains_key(pod_uid(p)) {
            crate::pods::ensure_worker(m, p);
        }
    }
    for p in &d.added {
        tracing::info!(pod = %format_pod(p), "static pod added");
    }
    start_waiting(m);
}

/// Start the workers of static pods that have none, unless a worker of another pod with the
/// same full name still runs (a replaced manifest: the old pod stops first).
fn start_waiting(m: &Arc<Manager>) {
    for p in m.statics.list() {
        let uid = pod_uid(&p);
        let blocked = {
            let workers = m.workers.lock();
            if workers.contains_key(uid) {
                continue;
            }
            workers.iter().any(|(u, w)| {
                let wp = w.pod();
                u != uid && pod_name(&wp) == pod_name(&p) && pod_namespace(&wp) == pod_namespace(&p)
            })
        };
        if blocked {
            tracing::debug!(pod = %format_pod(&p), "static pod waits for the previous pod of its name to terminate");
            continue;
        }
        crate::pods::ensure_worker(m, &p);
    }
}

/// A mirror pod changed in the API: sync the static pod it belongs to.
pub fn mirror_changed(m: &Manager, mirror: &Pod) {
    if let Some(p) = m.statics.by_name(pod_namespace(mirror), pod_name(mirror)) {
        m.wake(pod_uid(&p));
    }
}

/// Wake the workers of static pods without a current mirror pod, and delete mirror pods
/// whose static pod is gone and stopped.
async fn reconcile_mirrors(m: &Arc<Manager>) {
    let node_known = m.k.node.borrow().is_some();
    for p in m.statics.list() {
        let current =
            mirror_of(&m.k, &p).is_some_and(|mp| mp.metadata.deletion_timestamp.is_none());
        if !current && node_known {
            m.wake(pod_uid(&p));
        }
    }
    let running: HashSet<(String, String)> = m
        .workers
        .lock()
        .values()
        .map(|w| {
            let p = w.pod();
            (pod_namespace(&p).to_string(), pod_name(&p).to_string())
        })
        .collect();
    for mp in m.k.pods.list() {
        if !is_mirror(&mp) {
            continue;
        }
        let (ns, name) = (pod_namespace(&mp), pod_name(&mp));
        if m.statics.by_name(ns, name).is_some()
            || running.contains(&(ns.to_string(), name.to_string()))
            || crate::host_pods::is_host_pod(&m.k.opts, ns, name)
        {
            continue;
        }
        tracing::info!(pod = %format!("{ns}/{name}"), "deleting orphaned mirror pod");
        delete_mirror(&m.k, ns, name, None).await;
    }
}

/// Keep the mirror pod of a static pod in step (Kubernetes' tryReconcileMirrorPods): one
/// being deleted or not of this pod's hash is force-deleted; a missing one is created.
pub async fn sync_mirror(m: &Manager, pod: &Pod) {
    let existing =
        m.k.pods
            .get(pod_namespace(pod), pod_name(pod))
            .filter(|p| is_mirror(p));
    let mut deleted = false;
    if let Some(mp) = &existing {
        if mp.metadata.deletion_timestamp.is_some() || !is_mirror_of(mp, pod) {
            tracing::info!(pod = %format_pod(mp), "trying to delete mirror pod");
            deleted = delete_mirror(&m.k, pod_namespace(mp), pod_name(mp), Some(pod_uid(mp))).await;
            if deleted {
                tracing::info!(pod = %format_pod(mp), "deleted mirror pod as it didn't match the static pod");
            }
        }
    }
    if existing.is_some() && !deleted {
        return;
    }
    let node = m.k.node.borrow().clone();
    match node {
        None => {
            tracing::debug!(pod = %format_pod(pod), "no mirror pod yet: the node is not known");
        }
        Some(n) if n.metadata.deletion_timestamp.is_some() => {
            tracing::info!(pod = %format_pod(pod), "no need to create a mirror pod, since the node has been removed from the cluster");
        }
        Some(n) => {
            if let Err(e) = create_mirror(&m.k, pod, &n).await {
                tracing::warn!(pod = %format_pod(pod), error = %e, "failed creating a mirror pod");
            }
        }
    }
}

/// The mirror pod of a static pod: the same pod with the mirror annotation, owned by the
/// Node (as NodeRestriction requires), without the static pod's UID.
pub fn mirror_pod(pod: &Pod, node: &Node) -> Result<Pod, String> {
    let node_uid = node
        .metadata
        .uid
        .clone()
        .filter(|u| !u.is_empty())
        .ok_or("failed to get node UID")?;
    let mut mp = pod.clone();
    let hash = config_hash(pod).to_string();
    mp.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CONFIG_MIRROR.into(), hash);
    mp.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone().unwrap_or_default(),
        uid: node_uid,
        controller: Some(true),
        block_owner_deletion: None,
    }]);
    mp.metadata.uid = None;
    mp.metadata.resource_version = None;
    mp.metadata.creation_timestamp = None;
    mp.metadata.managed_fields = None;
    Ok(mp)
}

async fn create_mirror(k: &Kubelet, pod: &Pod, node: &Node) -> Result<(), String> {
    let mp = mirror_pod(pod, node)?;
    let api: Api<Pod> = Api::namespaced(k.client.clone(), pod_namespace(pod));
    match api.create(&PostParams::default(), &mp).await {
        Ok(created) => {
            tracing::info!(pod = %format_pod(&created), "created mirror pod");
            Ok(())
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Delete a mirror pod at once (only the given UID when set); whether it was deleted.
async fn delete_mirror(k: &Kubelet, namespace: &str, name: &str, uid: Option<&str>) -> bool {
    let api: Api<Pod> = Api::namespaced(k.client.clone(), namespace);
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: uid.map(|u| Preconditions {
            uid: Some(u.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &dp).await {
        Ok(_) => true,
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => false,
        Err(e) => {
            tracing::warn!(pod = %format!("{namespace}/{name}"), error = %e, "failed deleting a mirror pod");
            false
        }
    }
}

// ---------------------------------------------------------------------------------------
// MD5 (the UID of a static pod is an MD5 sum, as in Kubernetes).

fn md5(data: &[u8]) -> [u8; 16] {
    const SHIFTS: [u32; 64] = [
        7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 5, 9, 14, 20, 5, 9, 14, 20, 5,
        9, 14, 20, 5, 9, 14, 20, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 6, 10,
        15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
    ];
    let k: Vec<u32> = (0..64)
        .map(|i| ((i as f64 + 1.0).sin().abs() * 4_294_967_296.0) as u32)
        .collect();
    let mut state: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];
    let mut msg = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&bits.to_le_bytes());
    for chunk in msg.chunks_exact(64) {
        let mut w = [0u32; 16];
        for (i, word) in w.iter_mut().enumerate() {
            *word = u32::from_le_bytes([
                chunk[4 * i],
                chunk[4 * i + 1],
                chunk[4 * i + 2],
                chunk[4 * i + 3],
            ]);
        }
        let [mut a, mut b, mut c, mut d] = state;
        for i in 0..64 {
            let (f, g) = match i / 16 {
                0 => ((b & c) | (!b & d), i),
                1 => ((d & b) | (!d & c), (5 * i + 1) % 16),
                2 => (b ^ c ^ d, (3 * i + 5) % 16),
                _ => (c ^ (b | !d), (7 * i) % 16),
            };
            let f = f.wrapping_add(a).wrapping_add(k[i]).wrapping_add(w[g]);
            a = d;
            d = c;
            c = b;
            b = b.wrapping_add(f.rotate_left(SHIFTS[i]));
        }
        state[0] = state[0].wrapping_add(a);
        state[1] = state[1].wrapping_add(b);
        state[2] = state[2].wrapping_add(c);
        state[3] = state[3].wrapping_add(d);
    }
    let mut out = [0u8; 16];
    for (i, s) in state.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&s.to_le_bytes());
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const WEB: &str = "apiVersion: v1
kind: Pod
metadata:
  name: web
  labels:
    app: web
spec:
  containers:
  - name: c
    image: busybox:1.35
    command: [sh, -c, sleep 3600]
";

    #[test]
    fn md5_matches_reference_values() {
        assert_eq!(hex(&md5(b"")), "d41d8cd98f00b204e9800998ecf8427e");
        assert_eq!(hex(&md5(b"abc")), "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(
            hex(&md5(b"The quick brown fox jumps over the lazy dog")),
            "9e107d9d372bb6826bd81d3542a419d6"
        );
        // Two blocks of padding.
        let long = vec![b'a'; 100];
        assert_eq!(hex(&md5(&long)), "36a92cc94a9e0fa21f625f8bfb007adf");
    }

    #[test]
    fn manifests_get_the_static_pod_identity() {
        let p = parse_manifest(WEB.as_bytes(), "/etc/m/web.yaml", "Node-A").unwrap();
        assert_eq!(pod_name(&p), "web-node-a");
        assert_eq!(pod_namespace(&p), "default");
        let uid = pod_uid(&p);
        assert_eq!(uid.len(), 32);
        assert!(uid.bytes().all(|b| b.is_ascii_hexdigit()));
        let ann = p.metadata.annotations.as_ref().unwrap();
        assert_eq!(ann[CONFIG_HASH], uid);
        assert_eq!(ann[CONFIG_SOURCE], "file");
        assert!(is_static(&p));
        assert!(!is_mirror(&p));
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("Node-A"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        assert_eq!(spec.dns_policy.as_deref(), Some("ClusterFirst"));
        assert_eq!(spec.termination_grace_period_seconds, Some(30));
        let c = &spec.containers[0];
        assert_eq!(c.image_pull_policy.as_deref(), Some("IfNotPresent"));
        assert_eq!(
            c.termination_message_path.as_deref(),
            Some("/dev/termination-log")
        );
        let tol = spec.tolerations.as_ref().unwrap();
        assert_eq!(tol.len(), 1);
        assert_eq!(tol[0].operator.as_deref(), Some("Exists"));
        assert_eq!(tol[0].effect.as_deref(), Some("NoExecute"));
        assert!(tol[0].key.is_none());
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );
        assert_eq!(p.metadata.labels.as_ref().unwrap()["app"], "web");
    }

    #[test]
    fn json_manifests_namespaces_and_own_uids() {
        let j = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"db","namespace":"kube-system","uid":"fixed-uid"},
            "spec":{"containers":[{"name":"c","image":"reg/x"}],
            "tolerations":[{"operator":"Exists","effect":"NoExecute","tolerationSeconds":5},{"key":"k","operator":"Exists"}]}}"#;
        let p = parse_manifest(j.as_bytes(), "/m/db.json", "n1").unwrap();
        assert_eq!(pod_name(&p), "db-n1");
        assert_eq!(pod_namespace(&p), "kube-system");
        assert_eq!(pod_uid(&p), "fixed-uid");
        assert_eq!(config_hash(&p), "fixed-uid");
        let spec = p.spec.unwrap();
        // An untagged image is pulled Always.
        assert_eq!(
            spec.containers[0].image_pull_policy.as_deref(),
            Some("Always")
        );
        // The matching toleration is replaced (no tolerationSeconds), the other kept.
        let tol = spec.tolerations.unwrap();
        assert_eq!(tol.len(), 2);
        assert_eq!(tol[0].toleration_seconds, None);
        assert_eq!(tol[1].key.as_deref(), Some("k"));
    }

    #[test]
    fn the_hash_is_stable_and_depends_on_content_node_and_file() {
        let a = parse_manifest(WEB.as_bytes(), "/m/web.yaml", "n1").unwrap();
        let b = parse_manifest(WEB.as_bytes(), "/m/web.yaml", "n1").unwrap();
        assert_eq!(pod_uid(&a), pod_uid(&b));
        // The same pod written as JSON hashes the same: the pod is hashed, not the text.
        let as_json = serde_json::to_string(&serde_yaml::from_str::<Value>(WEB).unwrap()).unwrap();
        let c = parse_manifest(as_json.as_bytes(), "/m/web.yaml", "n1").unwrap();
        assert_eq!(pod_uid(&a), pod_uid(&c));
        let other_node = parse_manifest(WEB.as_bytes(), "/m/web.yaml", "n2").unwrap();
        let other_file = parse_manifest(WEB.as_bytes(), "/m/web2.yaml", "n1").unwrap();
        let edited = WEB.replace("sleep 3600", "sleep 3601");
        let other_content = parse_manifest(edited.as_bytes(), "/m/web.yaml", "n1").unwrap();
        for p in [&other_node, &other_file, &other_content] {
            assert_ne!(pod_uid(&a), pod_uid(p));
        }
        assert_eq!(pod_name(&other_content), pod_name(&a));
    }

    #[test]
    fn bad_manifests_are_errors() {
        let cases: &[(&str, &str)] = &[
            ("kind: Pod\nmetadata: {name: x}\n", "'apiVersion' is missing"),
            ("apiVersion: v1\nmetadata: {name: x}\n", "'Kind' is missing"),
            ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n", "not a v1 Pod"),
            ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: []}\n", "spec.containers: Required value"),
            ("apiVersion: v1\nkind: Pod\nmetadata: {}\nspec: {containers: [{name: c, image: i}]}\n", "metadata.name: Required value"),
            ("apiVersion: v1\nkind: Pod\nmetadata: {name: Bad_Name}\nspec: {containers: [{name: c, image: i}]}\n", "metadata.name: Invalid value"),
            ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c}]}\n", "spec.containers[0].image: Required value"),
            ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{name: c, image: i}, {name: c, image: i}]}\n", "Duplicate value"),
            ("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: 5}\n", "couldn't parse as pod"),
            ("just text", "couldn't parse as pod"),
            ("", "couldn't parse as pod"),
            ("a: [unclosed", "couldn't parse as pod"),
        ];
        for (text, want) in cases {
            let err = parse_manifest(text.as_bytes(), "/m/f", "n1").unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
    }

    #[test]
    fn reading_a_directory_skips_bad_hidden_and_duplicate_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), WEB).unwrap();
        std::fs::write(dir.path().join("b.yaml"), "not: a pod").unwrap();
        std::fs::write(
            dir.path().join(".hidden.yaml"),
            WEB.replace("web", "hidden"),
        )
        .unwrap();
        // Same full name as a.yaml: ignored.
        std::fs::write(dir.path().join("c.yaml"), WEB.replace("3600", "10")).unwrap();
        std::fs::write(
            dir.path().join("d.json"),
            WEB.replace("name: web", "name: other"),
        )
        .unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let s = StaticPods::default();
        let pods = s.read(dir.path(), "n1");
        let names: Vec<&str> = pods.iter().map(pod_name).collect();
        assert_eq!(names, ["web-n1", "other-n1"]);
        // A single file works too; a missing path has no pods.
        assert_eq!(s.read(&dir.path().join("a.yaml"), "n1").len(), 1);
        assert!(s.read(&dir.path().join("missing"), "n1").is_empty());
    }

    #[test]
    fn replacing_the_set_reports_adds_updates_and_removals() {
        let s = StaticPods::default();
        let web = parse_manifest(WEB.as_bytes(), "/m/web.yaml", "n1").unwrap();
        let d = s.replace(vec![web.clone()]);
        assert_eq!(d.added.len(), 1);
        assert!(d.updated.is_empty() && d.removed.is_empty());
        let seen = annotation(&d.added[0], CONFIG_SEEN).unwrap().to_string();
        assert!(seen.ends_with('Z') && seen.contains('T'), "{seen}");
        // The same pods again: nothing changed, the first-seen time is kept.
        let d = s.replace(vec![web.clone()]);
        assert!(d.added.is_empty() && d.updated.is_empty() && d.removed.is_empty());
        let uid = pod_uid(&web).to_string();
        assert_eq!(
            annotation(&s.get(&uid).unwrap(), CONFIG_SEEN),
            Some(seen.as_str())
        );
        assert!(s.by_name("default", "web-n1").is_some());
        // An edited manifest is a new pod: the old one goes.
        let edited =
            parse_manifest(WEB.replace("3600", "7").as_bytes(), "/m/web.yaml", "n1").unwrap();
        let d = s.replace(vec![edited.clone()]);
        assert_eq!(d.added.len(), 1);
        assert_eq!(pod_uid(&d.removed[0]), uid);
        assert!(!s.contains(&uid));
        assert!(s.contains(pod_uid(&edited)));
        // A pod with its own UID whose spec changed is an update.
        let own = |cmd: &str| {
            let t = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: o, uid: u1}}\nspec: {{containers: [{{name: c, image: i, command: [{cmd}]}}]}}\n");
            parse_manifest(t.as_bytes(), "/m/o.yaml", "n1").unwrap()
        };
        s.replace(vec![edited.clone(), own("a")]);
        let d = s.replace(vec![edited.clone(), own("b")]);
        assert_eq!(d.updated.len(), 1);
        assert!(d.added.is_empty() && d.removed.is_empty());
        // Everything removed.
        let d = s.replace(vec![]);
        assert_eq!(d.removed.len(), 2);
        assert!(s.list().is_empty());
    }

    #[test]
    fn mirror_pods_are_owned_by_the_node_and_carry_the_hash() {
        let p = parse_manifest(WEB.as_bytes(), "/m/web.yaml", "n1").unwrap();
        let mut node = Node::default();
        node.metadata.name = Some("n1".into());
        assert!(mirror_pod(&p, &node).is_err());
        node.metadata.uid = Some("node-uid".into());
        let mp = mirror_pod(&p, &node).unwrap();
        assert!(is_mirror(&mp));
        assert!(is_mirror_of(&mp, &p));
        assert!(mp.metadata.uid.is_none());
        assert_eq!(annotation(&mp, CONFIG_MIRROR), Some(pod_uid(&p)));
        let owner = &mp.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (
                owner.api_version.as_str(),
                owner.kind.as_str(),
                owner.name.as_str(),
                owner.uid.as_str()
            ),
            ("v1", "Node", "n1", "node-uid")
        );
        assert_eq!(owner.controller, Some(true));
        assert_eq!(mp.spec, p.spec);
        // A mirror of an older manifest is not this pod's mirror.
        let edited =
            parse_manifest(WEB.replace("3600", "1").as_bytes(), "/m/web.yaml", "n1").unwrap();
        assert!(!is_mirror_of(&mp, &edited));
    }
}
