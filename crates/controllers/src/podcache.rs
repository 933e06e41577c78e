//! The controller manager's pod cache in a compact form. Pods are by far the most numerous
//! objects it caches (100,000 in a large cluster), and a k8s-openapi Pod is large: ~2 KB inline
//! before its containers, statuses and strings. Pods made from one template differ in little
//! but their name, uid, resourceVersion, timestamps, node and addresses, so a cached pod keeps
//! those alone and shares the rest (its metadata, spec and status with those cleared) with every
//! pod that has the same rest: a few hundred bytes per pod instead of several kilobytes. Each
//! read rebuilds the Pod (a clone of the shared parts).

use std::sync::{Arc, LazyLock};

use capstan_runtime::informer::Packed;
use k8s_openapi::api::core::v1::{ContainerStatus, Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::intern::{Interner, StrInterner, Token};

/// Keep only what a controller reads: the template-derived bulk of a container (env, command,
/// volume mounts, probes) and every volume but claims (the service-account token volume has
/// a random name per pod) are dropped.
pub(crate) fn trim_pod(pod: &mut Pod) {
    if let Some(spec) = pod.spec.as_mut() {
        for c in spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten())
        {
            c.env = None;
            c.env_from = None;
            c.command = None;
            c.args = None;
            c.volume_mounts = None;
            c.liveness_probe = None;
            c.startup_probe = None;
            c.lifecycle = None;
        }
        // Controllers read volumes only for the claims they name (statefulset, the binder).
        if let Some(v) = spec.volumes.as_mut() {
            v.retain(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        }
    }
}

/// The compact form of a pod (see [`Packed`]), for `Informers::set_packing`.
pub(crate) fn pack(pod: &Pod) -> Box<dyn Packed<Pod>> {
    let mut meta = pod.metadata.clone();
    let mut spec = pod.spec.clone();
    let mut status = pod.status.clone();
    // The cache keys give the name and namespace back; keep only whether they were set.
    meta.name = meta.name.map(|_| String::new());
    meta.namespace = meta.namespace.map(|_| String::new());
    let uid = meta.uid.take().map(|u| Token::new(&u));
    let resource_version = meta.resource_version.take().map(|r| Token::new(&r));
    let node_name = spec
        .as_mut()
        .and_then(|s| s.node_name.take())
        .map(|n| NAMES.intern(&n));
    let mut times = Vec::new();
    let mut strings = Vec::new();
    holes(
        &mut meta,
        status.as_mut(),
        &mut |t| times.push(t.take()),
        &mut |s| strings.push(s.take().map(String::into_boxed_str)),
    );
    Box::new(PackedPod {
        meta: METAS.intern(meta),
        spec: spec.map(|s| SPECS.intern(s)),
        status: status.map(|s| STATUSES.intern(s)),
        node_name,
        uid,
        resource_version,
        times: Times::new(times),
        strings: strings.into(),
    })
}

/// A pod as cached: what is its own, and the shared rest.
struct PackedPod {
    /// Without name, namespace, uid, resourceVersion and timestamps.
    meta: Arc<ObjectMeta>,
    /// Without nodeName.
    spec: Option<Arc<PodSpec>>,
    /// Without timestamps, pod addresses and container ids.
    status: Option<Arc<PodStatus>>,
    node_name: Option<Arc<str>>,
    uid: Option<Token>,
    resource_version: Option<Token>,
    /// The timestamps and strings taken out of `meta` and `status`, in [`holes`] order.
    times: Times,
    strings: Box<[Option<Box<str>>]>,
}

/// Timestamps, as whole seconds when they all are (as the API serves them: 8 bytes each
/// instead of 24), else as they are.
enum Times {
    Seconds(Box<[i64]>),
    Exact(Box<[Option<Time>]>),
}

/// An absent timestamp among `Times::Seconds`.
const NO_TIME: i64 = i64::MIN;

impl Times {
    fn new(times: Vec<Option<Time>>) -> Times {
        let whole = |t: &Time| t.0.subsec_nanosecond() == 0 && t.0.as_second() != NO_TIME;
        if times.iter().flatten().all(whole) {
            Times::Seconds(
                times
                    .iter()
                    .map(|t| t.as_ref().map_or(NO_TIME, |t| t.0.as_second()))
                    .collect(),
            )
        } else {
            Times::Exact(times.into())
        }
    }

    fn get(&self, i: usize) -> Option<Time> {
        match self {
            Times::Seconds(s) => s
                .get(i)
                .filter(|s| **s != NO_TIME)
                .and_then(|s| k8s_openapi::jiff::Timestamp::from_second(*s).ok())
                .map(Time),
            Times::Exact(t) => t.get(i).cloned().flatten(),
        }
    }
}

/// What a filter can read of a cached pod without rebuilding it (see
/// `Informer::for_each_passing`); None for a pod the cache keeps whole.
pub(crate) fn peek(p: &dyn Packed<Pod>) -> Option<Peek<'_>> {
    (p as &dyn std::any::Any)
        .downcast_ref::<PackedPod>()
        .map(Peek)
}

/// A cached pod, read in place.
pub(crate) struct Peek<'a>(&'a PackedPod);

impl Peek<'_> {
    /// `status.phase` ("" when unset).
    pub fn phase(&self) -> &str {
        self.0
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or("")
    }

    /// Whether `metadata.deletionTimestamp` is set (the second of [`holes`]' times).
    pub fn deleting(&self) -> bool {
        self.0.times.get(1).is_some()
    }

    /// `spec.nodeName` ("" when unset).
    pub fn node_name(&self) -> &str {
        self.0.node_name.as_deref().unwrap_or("")
    }

    /// The uid of the pod's controller, if it has one.
    pub fn controller_uid(&self) -> Option<&str> {
        crate::util::controller_ref(&self.0.meta).map(|r| r.uid.as_str())
    }
}

impl Packed<Pod> for PackedPod {
    fn unpack(&self, namespace: &str, name: &str) -> Pod {
        let mut metadata = (*self.meta).clone();
        metadata.name = metadata.name.map(|_| name.to_string());
        metadata.namespace = metadata.namespace.map(|_| namespace.to_string());
        metadata.uid = self.uid.as_ref().map(Token::to_string);
        metadata.resource_version = self.resource_version.as_ref().map(Token::to_string);
        let spec = self.spec.as_ref().map(|s| PodSpec {
            node_name: self.node_name.as_deref().map(str::to_string),
            ..(**s).clone()
        });
        let mut status = self.status.as_ref().map(|s| (**s).clone());
        let mut time = 0;
        let mut strings = self.strings.iter();
        holes(
            &mut metadata,
            status.as_mut(),
            &mut |t| {
                *t = self.times.get(time);
                time += 1;
            },
            &mut |s| {
                *s = strings
                    .next()
                    .and_then(|s| s.as_deref().map(str::to_string))
            },
        );
        Pod {
            metadata,
            spec,
            status,
        }
    }
}

/// Visit, always in the same order, the fields that differ from pod to pod even when made from
/// one template: packing takes them out, unpacking puts them back.
fn holes(
    meta: &mut ObjectMeta,
    status: Option<&mut PodStatus>,
    time: &mut impl FnMut(&mut Option<Time>),
    string: &mut impl FnMut(&mut Option<String>),
) {
    time(&mut meta.creation_timestamp);
    time(&mut meta.deletion_timestamp);
    let Some(status) = status else { return };
    time(&mut status.start_time);
    for c in status.conditions.iter_mut().flatten() {
        time(&mut c.last_probe_time);
        time(&mut c.last_transition_time);
    }
    string(&mut status.pod_ip);
    for ip in status.pod_ips.iter_mut().flatten() {
        let mut s = Some(std::mem::take(&mut ip.ip));
        string(&mut s);
        ip.ip = s.unwrap_or_default();
    }
    let containers = status
        .container_statuses
        .iter_mut()
        .chain(status.init_container_statuses.iter_mut())
        .chain(status.ephemeral_container_statuses.iter_mut())
        .flatten();
    for c in containers {
        container_holes(c, time, string);
    }
}

fn container_holes(
    c: &mut ContainerStatus,
    time: &mut impl FnMut(&mut Option<Time>),
    string: &mut impl FnMut(&mut Option<String>),
) {
    string(&mut c.container_id);
    for s in [c.state.as_mut(), c.last_state.as_mut()]
        .into_iter()
        .flatten()
    {
        if let Some(r) = s.running.as_mut() {
            time(&mut r.started_at);
        }
        if let Some(t) = s.terminated.as_mut() {
            time(&mut t.started_at);
            time(&mut t.finished_at);
            string(&mut t.container_id);
        }
    }
}

static METAS: LazyLock<Interner<ObjectMeta>> = LazyLock::new(Interner::new);
static SPECS: LazyLock<Interner<PodSpec>> = LazyLock::new(Interner::new);
static STATUSES: LazyLock<Interner<PodStatus>> = LazyLock::new(Interner::new);
static NAMES: LazyLock<StrInterner> = LazyLock::new(StrInterner::new);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    fn running(name: &str, uid: &str, ip: &str, node: &str) -> Pod {
        pod(json!({
            "metadata": {
                "name": name, "namespace": "ns", "generateName": "web-5d9c7-",
                "uid": uid, "resourceVersion": "1234",
                "creationTimestamp": "2024-01-01T00:00:00Z",
                "labels": {"app": "web", "pod-template-hash": "5d9c7"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": "web-5d9c7", "uid": "0b8a0f4e-6f7c-4c44-9d34-2f8a3a2e7c11",
                    "controller": true, "blockOwnerDeletion": true}],
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "pause",
                    "ports": [{"containerPort": 80}],
                    "resources": {"requests": {"cpu": "100m"}}}],
                "volumes": [
                    {"name": format!("kube-api-access-{}", &uid[..5]),
                     "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
                ],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}],
            },
            "status": {
                "phase": "Running", "hostIP": "10.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
                "startTime": "2024-01-01T00:00:01Z", "qosClass": "Burstable",
                "conditions": [
                    {"type": "Ready", "status": "True",
                     "lastTransitionTime": "2024-01-01T00:00:03Z"},
                    {"type": "PodScheduled", "status": "True", "lastProbeTime": null,
                     "lastTransitionTime": "2024-01-01T00:00:00Z"},
                ],
                "containerStatuses": [{"name": "c", "image": "pause", "imageID": "sha256:1",
                    "containerID": format!("containerd://{uid}"), "ready": true,
                    "restartCount": 1, "started": true,
                    "state": {"running": {"startedAt": "2024-01-01T00:00:02Z"}},
                    "lastState": {"terminated": {"exitCode": 2, "reason": "Error",
                        "containerID": "containerd://old", "startedAt": "2024-01-01T00:00:01Z",
                        "finishedAt": "2024-01-01T00:00:02Z"}}}],
            },
        }))
    }

    fn trimmed(mut p: Pod) -> Pod {
        trim_pod(&mut p);
        p
    }

    #[test]
    fn a_peek_reads_what_the_rebuilt_pod_says() {
        let mut deleting = running(
            "web-d",
            "6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f61",
            "10.1.0.7",
            "n3",
        );
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        deleting.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let mut orphan = running(
            "web-o",
            "6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f62",
            "10.1.0.8",
            "",
        );
        orphan.metadata.owner_references = None;
        orphan.spec.as_mut().unwrap().node_name = None;
        for p in [
            running(
                "web-a",
                "6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f60",
                "10.1.0.5",
                "n1",
            ),
            deleting,
            orphan,
            pod(json!({"metadata": {"name": "bare"}})),
        ] {
            let packed = pack(&p);
            let peek = peek(packed.as_ref()).expect("a packed pod");
            let back = packed.unpack("ns", p.metadata.name.as_deref().unwrap());
            let phase = back.status.as_ref().and_then(|s| s.phase.as_deref());
            assert_eq!(peek.phase(), phase.unwrap_or(""));
            assert_eq!(peek.deleting(), back.metadata.deletion_timestamp.is_some());
            let node = back.spec.as_ref().and_then(|s| s.node_name.as_deref());
            assert_eq!(peek.node_name(), node.unwrap_or(""));
            let owner = crate::util::controller_ref(&back.metadata).map(|r| r.uid.as_str());
            assert_eq!(peek.controller_uid(), owner);
        }
    }

    #[test]
    fn a_packed_pod_unpacks_to_the_trimmed_pod() {
        let pods = [
            running(
                "web-a",
                "6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f60",
                "10.1.0.5",
                "n1",
            ),
            running("web-b", "UID-not-canonical", "10.1.0.6", "n2"),
            pod(json!({"metadata": {"name": "bare"}})),
            // A timestamp with a fraction is kept exactly.
            pod(json!({"metadata": {"name": "fine", "namespace": "ns",
                "creationTimestamp": "2024-01-01T00:00:00.25Z"}})),
            pod(json!({
                "metadata": {"name": "gone", "namespace": "ns", "resourceVersion": "007",
                    "deletionTimestamp": "2024-01-01T00:00:09Z",
                    "deletionGracePeriodSeconds": 30, "finalizers": ["f"]},
                "spec": {"containers": [], "hostname": "h", "subdomain": "s"},
                "status": {"phase": "Pending"},
            })),
        ];
        for p in pods {
            let p = trimmed(p);
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            let name = p.metadata.name.clone().unwrap_or_default();
            assert_eq!(pack(&p).unpack(&ns, &name), p);
        }
    }

    #[test]
    fn trim_keeps_claims_and_drops_other_volumes() {
        let p = trimmed(running("web-a", "uid-of-a", "10.1.0.5", "n1"));
        let vols = p.spec.unwrap().volumes.unwrap();
        assert_eq!(vols.len(), 1);
        assert_eq!(vols[0].name, "data");
    }

    #[test]
    fn pods_of_one_template_share_their_rest() {
        let a = trimmed(running(
            "web-a",
            "6f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f60",
            "10.1.0.5",
            "n1",
        ));
        let b = trimmed(running(
            "web-b",
            "7f1c2e9a-0d6b-4f55-8a8e-1b2c3d4e5f61",
            "10.1.0.6",
            "n2",
        ));
        let share = |p: &Pod| {
            let mut spec = p.spec.clone().unwrap();
            spec.node_name = None;
            SPECS.intern(spec)
        };
        let (sa, sb) = (share(&a), share(&b));
        assert!(Arc::ptr_eq(&sa, &sb));
        // Both packed pods, and the two handles above, hold the one spec.
        let (pa, pb) = (pack(&a), pack(&b));
        assert!(Arc::strong_count(&sa) >= 4);
        drop((pa, pb));
    }
}
