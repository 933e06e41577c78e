//! The pod manager: the state the pod workers share (probe hub, image and crash back-off,
//! why containers failed to start, the status cache) and the status manager, which writes
//! a pod's status through the pods/status subresource when it changed and deletes a pod
//! once it has fully terminated.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod, PodStatus};
use kube::api::{DeleteParams, PostParams, Preconditions};
use kube::Api;
use parking_lot::Mutex;

use super::actions::ProbeResults;
use super::admission::{admit, Rejection};
use super::backoff::Backoff;
use super::images::Images;
use super::resources::memory_capacity;
use super::runtime::RuntimePod;
use super::status::{self, check_transitions, finalize, merge_for_api, same, Inputs};
use super::util::{pod_name, pod_namespace, pod_uid};
use super::worker::Worker;
use crate::probes::Probes;
use crate::Kubelet;

/// What the workers tell the probers, and what they read back.
pub trait ProbeHub: ProbeResults + Send + Sync {
    fn container_started(&self, pod: &Arc<Pod>, container: &str, id: &str, pod_ip: Option<&str>);
    fn container_stopped(&self, id: &str);
    fn pod_removed(&self, uid: &str);
}

impl ProbeHub for Probes {
    fn container_started(&self, pod: &Arc<Pod>, container: &str, id: &str, pod_ip: Option<&str>) {
        Probes::container_started(self, pod, container, id, pod_ip)
    }
    fn container_stopped(&self, id: &str) {
        Probes::container_stopped(self, id)
    }
    fn pod_removed(&self, uid: &str) {
        Probes::pod_removed(self, uid)
    }
}

/// Why each container of a pod last failed to start: name → (reason, message).
pub type Reasons = HashMap<String, (String, String)>;

pub struct Manager {
    pub k: Arc<Kubelet>,
    pub probes: Arc<dyn ProbeHub>,
    pub images: Images,
    /// CrashLoopBackOff per container (`name_namespace_uid_container_hash`).
    pub crash: Mutex<Backoff>,
    /// pod UID → start failures.
    pub reasons: Mutex<HashMap<String, Reasons>>,
    /// pod UID → the status last computed (what generate compares against).
    pub statuses: Mutex<HashMap<String, PodStatus>>,
    /// pod UID → the pod as the last status write returned it, until the informer has it.
    pub written: Mutex<HashMap<String, Pod>>,
    pub workers: Mutex<HashMap<String, Arc<Worker>>>,
    /// Containers the probers were told about: container ID → pod UID.
    pub probed: Mutex<HashMap<String, String>>,
    /// Pod UIDs whose leftover runtime objects are being removed.
    pub cleaning: Mutex<HashSet<String>>,
    /// Admitted pods that may still run containers (what admission counts).
    pub active: Mutex<HashSet<String>>,
    pub memory_capacity: i64,
    /// The static pods (from --pod-manifest-path); their status goes to their mirror pods.
    pub statics: crate::static_pods::StaticPods,
}

impl Manager {
    /// A manager with the real probers.
    pub fn new(k: Arc<Kubelet>) -> Arc<Manager> {
        Arc::new_cyclic(|weak: &Weak<Manager>| {
            let weak = weak.clone();
            let resync: crate::probes::Resync = Arc::new(move |uid: &str| {
                if let Some(m) = weak.upgrade() {
                    m.wake(uid);
                }
            });
            let probes = Probes::new(k.clone(), resync);
            Manager::with_probes(k, probes)
        })
    }

    pub fn with_probes(k: Arc<Kubelet>, probes: Arc<dyn ProbeHub>) -> Manager {
        // A hollow node has the memory it was given, not the host's.
        let memory_capacity = match &k.opts.hollow {
            Some(h) => i64::try_from(h.machine.memory_capacity).unwrap_or(i64::MAX),
            None => memory_capacity(),
        };
        Manager {
            k,
            probes,
            images: Images::default(),
            crash: Mutex::new(Backoff::standard()),
            reasons: Mutex::new(HashMap::new()),
            statuses: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
            workers: Mutex::new(HashMap::new()),
            probed: Mutex::new(HashMap::new()),
            cleaning: Mutex::new(HashSet::new()),
            active: Mutex::new(HashSet::new()),
            memory_capacity,
            statics: Default::default(),
        }
    }

    /// Wake the worker of pod `uid` (a probe result or the runtime changed).
    pub fn wake(&self, uid: &str) {
        if let Some(w) = self.workers.lock().get(uid) {
            w.wake();
        }
    }

    /// The node's IPs, primary first: its InternalIPs, else --node-ip.
    pub fn host_ips(&self) -> Vec<String> {
        node_ips(&self.k, self.k.node.borrow().as_deref())
    }

    /// The status the kubelet last computed for the pod, else the API's.
    pub fn old_status(&self, pod: &Pod) -> PodStatus {
        self.statuses
            .lock()
            .get(pod_uid(pod))
            .cloned()
            .unwrap_or_else(|| pod.status.clone().unwrap_or_default())
    }

    pub fn reasons_of(&self, uid: &str) -> Reasons {
        self.reasons.lock().get(uid).cloned().unwrap_or_default()
    }

    /// Remember (Some) or clear (None) why a container failed to start.
    pub fn set_reason(&self, uid: &str, container: &str, reason: Option<(String, String)>) {
        let mut r = self.reasons.lock();
        match reason {
            Some(v) => {
                r.entry(uid.to_string())
                    .or_default()
                    .insert(container.to_string(), v);
            }
            None => {
                if let Some(m) = r.get_mut(uid) {
                    m.remove(container);
                }
            }
        }
    }

    /// The pod's API status now.
    pub fn generate(
        &self,
        pod: &Pod,
        rp: &RuntimePod,
        terminal: bool,
        evict: Option<(String, String)>,
    ) -> PodStatus {
        let old = self.old_status(pod);
        let reasons = self.reasons_of(pod_uid(pod));
        let host_ips = self.host_ips();
        status::generate(&Inputs {
            pod,
            rp,
            old: &old,
            terminal,
            reasons: &reasons,
            probes: &*self.probes,
            host_ips: &host_ips,
            evict,
        })
    }

    /// Take a newly computed status: keep it and write it when it changed. `finished`: no
    /// container of the pod can run any more (a terminal phase may be written).
    pub async fn set_status(
        &self,
        pod: &Pod,
        mut new: PodStatus,
        finished: bool,
    ) -> Result<(), String> {
        let old = self.old_status(pod);
        if let Err(e) = check_transitions(pod, &old, &new) {
            tracing::warn!(pod = %pod_name(pod), error = %e, "status update refused");
            return Ok(());
        }
        finalize(&mut new, &old);
        self.statuses
            .lock()
            .insert(pod_uid(pod).to_string(), new.clone());
        self.write_status(pod, &new, finished).await
    }

    /// The freshest copy of the pod the kubelet has: the informer's, or what the last write
    /// returned when that is newer. For a static pod: its mirror pod.
    fn base_pod(&self, pod: &Pod) -> Option<Pod> {
        let uid = pod_uid(pod);
        let cached = if self.statics.contains(uid) {
            crate::static_pods::mirror_of(&self.k, pod)?
        } else {
            self.k
                .pods
                .get(pod_namespace(pod), pod_name(pod))
                .filter(|p| pod_uid(p) == uid)?
        };
        let target = pod_uid(&cached).to_string();
        let mut written = self.written.lock();
        let newer = match written.get(uid) {
            Some(w) if pod_uid(w) == target && rv(w) > rv(&cached) => Some(w.clone()),
            // The informer caught up (or the object was replaced): the copy, a whole pod per
            // pod, is of no more use.
            Some(_) => {
                written.remove(uid);
                None
            }
            None => None,
        };
        Some(newer.unwrap_or_else(|| (*cached).clone()))
    }

    /// The informer has `pod` now: the copy a status write returned, if no newer, is of no
    /// more use (it would otherwise stay, a whole pod per pod, until the next status write).
    pub fn informer_has(&self, pod: &Pod) {
        let uid = pod_uid(pod);
        let mut written = self.written.lock();
        if written.get(uid).is_some_and(|w| rv(w) <= rv(pod)) {
            written.remove(uid);
        }
    }

    async fn write_status(&self, pod: &Pod, new: &PodStatus, finished: bool) -> Result<(), String> {
        let uid = pod_uid(pod).to_string();
        let Some(mut base) = self.base_pod(pod) else {
            // Gone from the API (or replaced by a pod of the same name).
            return Ok(());
        };
        // The API object written: the pod itself, or a static pod's mirror pod.
        let target = pod_uid(&base).to_string();
        let api: Api<Pod> = Api::namespaced(self.k.client.clone(), pod_namespace(pod));
        for _ in 0..5 {
            let current = base.status.clone().unwrap_or_default();
            let merged = merge_for_api(&current, new, !finished);
            if same(&merged, &current) {
                return Ok(());
            }
            let mut body = base.clone();
            body.status = Some(merged);
            body.metadata.managed_fields = None;
            match api
                .replace_status(pod_name(pod), &PostParams::default(), &body)
                .await
            {
                Ok(mut p) => {
                    p.metadata.managed_fields = None;
                    self.written.lock().insert(uid, p);
                    return Ok(());
                }
                Err(kube::Error::Api(s)) if s.code == 409 => {
                    match api.get_opt(pod_name(pod)).await {
                        Ok(Some(p)) if pod_uid(&p) == target => base = p,
                        Ok(_) => return Ok(()),
                        Err(e) => return Err(e.to_string()),
                    }
                }
                Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
                Err(e) => return Err(e.to_string()),
            }
        }
        Err("status update kept conflicting".into())
    }

    /// Delete a fully terminated pod from the API (grace 0, only this UID).
    pub async fn delete_pod(&self, pod: &Pod) -> Result<(), String> {
        let api: Api<Pod> = Api::namespaced(self.k.client.clone(), pod_namespace(pod));
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(pod_uid(pod).to_string()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(pod_name(pod), &dp).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Admit a pod next to the active ones (pods already running are kept).
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let uid = pod_uid(pod).to_string();
        let mut active = self.active.lock();
        if active.contains(&uid) {
            return Ok(());
        }
        let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        if !running {
            let others: Vec<Arc<Pod>> = {
                let workers = self.workers.lock();
                active
                    .iter()
                    .filter_map(|u| workers.get(u).map(|w| w.pod()))
                    .collect()
            };
            let node = self.k.node.borrow().clone();
            admit(pod, &others, node.as_deref(), self.k.opts.max_pods)?;
        }
        active.insert(uid);
        Ok(())
    }

    /// Reject a pod: event, and the status Kubernetes gives a rejected pod.
    pub async fn reject(&self, pod: &Pod, r: &Rejection) -> Result<(), String> {
        self.k.recorder.warning(pod, &r.reason, r.message.clone());
        let status = PodStatus {
            phase: Some("Failed".into()),
            reason: Some(r.reason.clone()),
            message: Some(format!("Pod was rejected: {}", r.message)),
            qos_class: Some(super::resources::qos_class(pod).to_string()),
            ..Default::default()
        };
        self.set_status(pod, status, true).await
    }

    /// Forget everything about a pod that is gone.
    pub fn forget(&self, uid: &str) {
        self.reasons.lock().remove(uid);
        self.active.lock().remove(uid);
        self.statuses.lock().remove(uid);
        self.written.lock().remove(uid);
        self.images.forget_pod(uid);
        self.crash.lock().forget_containing(&format!("_{uid}_"));
        self.probed.lock().retain(|_, u| u != uid);
        self.probes.pod_removed(uid);
    }

    /// How long to wait between syncs with nothing else to wake a worker.
    pub fn resync(&self) -> Duration {
        self.k.opts.sync_frequency.max(Duration::from_secs(1))
    }
}

/// The IPs of `node` as the kubelet reports them, primary first: its InternalIPs, else
/// --node-ip.
pub(crate) fn node_ips(k: &Kubelet, node: Option<&Node>) -> Vec<String> {
    let from_node: Vec<String> = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.addresses.as_ref())
        .map(|a| {
            a.iter()
                .filter(|a| a.type_ == "InternalIP")
                .map(|a| a.address.clone())
                .collect()
        })
        .unwrap_or_default();
    if !from_node.is_empty() {
        return from_node;
    }
    k.opts
        .node_ip
        .map(|ip| vec![ip.to_string()])
        .unwrap_or_default()
}

/// A pod's resourceVersion as a number (0 when missing or not a number).
fn rv(p: &Pod) -> u64 {
    p.metadata
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}
