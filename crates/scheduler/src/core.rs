//! The scheduler as a pure state machine: informer events go in (`on_pod`, `on_node`, ...),
//! decisions come out (`schedule_one` → `Action`), bind results come back (`bind_result`).
//! The async shell in `run.rs` does the IO. Mirrors `pkg/scheduler/schedule_one.go` and the
//! event handlers of `pkg/scheduler/eventhandlers.go`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::framework::{Changed, ClusterEvent, CycleState, Framework};
use crate::queue::{Hints, SchedulingQueue};
use crate::schedule::{schedule_pod, Cursor, Failure};
use crate::snapshot::Snapshot;
use crate::types::PodInfo;

/// What the shell must do after a scheduling attempt.
#[derive(Debug)]
pub enum Action {
    /// The pod is assumed on `node`; bind it through the API and report with `bind_result`.
    Bind { pod: Arc<PodInfo>, node: String },
    /// The attempt failed: record FailedScheduling, set the PodScheduled condition (and
    /// `nominatedNodeName` when preemption chose a node), delete the victims.
    Failed {
        pod: Arc<PodInfo>,
        /// "Unschedulable" or "SchedulerError".
        reason: &'static str,
        message: String,
        nominated_node: Option<String>,
        victims: Vec<Arc<PodInfo>>,
        /// Lower-priority pods nominated to the same node lose their nomination.
        unnominated: Vec<Arc<PodInfo>>,
    },
}

struct InFlight {
    pod: Arc<PodInfo>,
    node: String,
    state: CycleState,
    profile: usize,
}

/// Counters for reports and benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub attempts: u64,
    pub scheduled: u64,
    pub unschedulable: u64,
    pub errors: u64,
    pub bind_failures: u64,
}

pub struct Core {
    profiles: Vec<Framework>,
    interest: Vec<Interest>,
    pub snapshot: Snapshot,
    pub queue: SchedulingQueue,
    cursor: Cursor,
    rng: SmallRng,
    in_flight: HashMap<String, InFlight>,
    pub stats: Stats,
}

/// For each profile, every plugin with the cluster events it registered (computed once).
struct Interest {
    scheduler_name: String,
    plugins: Vec<(Arc<dyn crate::framework::Plugin>, Vec<ClusterEvent>)>,
}

struct ProfileHints<'a>(&'a [Interest]);

impl Hints for ProfileHints<'_> {
    fn worth_retrying(
        &self,
        pod: &PodInfo,
        plugins: &BTreeSet<&'static str>,
        event: ClusterEvent,
        changed: Changed<'_>,
    ) -> bool {
        if plugins.is_empty() {
            return true;
        }
        let Some(profile) = self
            .0
            .iter()
            .find(|f| f.scheduler_name == pod.scheduler_name())
        else {
            return false;
        };
        profile.plugins.iter().any(|(p, events)| {
            events.contains(&event)
                && plugins.contains(p.name())
                && match changed {
                    Changed::None => true,
                    Changed::Pod(c) => p.hint(pod, event, Some(c)),
                    Changed::Node { old, new } => p.hint_node(pod, event, old, new),
                }
        })
    }
}

impl Core {
    pub fn new(profiles: Vec<Framework>, queue: SchedulingQueue) -> Core {
        let interest = profiles
            .iter()
            .map(|f| Interest {
                scheduler_name: f.scheduler_name.clone(),
                plugins: f
                    .plugins()
                    .into_iter()
                    .map(|p| {
                        let e = p.events();
                        (p, e)
                    })
                    .collect(),
            })
            .collect();
        Core {
            profiles,
            interest,
            snapshot: Snapshot::new(),
            queue,
            cursor: Cursor::default(),
            rng: SmallRng::from_os_rng(),
            in_flight: HashMap::new(),
            stats: Stats::default(),
        }
    }

    /// Make tie-breaking reproducible (tests, benchmarks).
    pub fn seed(&mut self, seed: u64) {
        self.rng = SmallRng::seed_from_u64(seed);
    }

    pub fn profiles(&self) -> &[Framework] {
        &self.profiles
    }

    fn profile_of(&self, pod: &PodInfo) -> Option<usize> {
        self.profiles
            .iter()
            .position(|f| f.scheduler_name == pod.scheduler_name())
    }

    fn event(&mut self, event: ClusterEvent, changed: Changed<'_>, now: Instant) {
        let hints = ProfileHints(&self.interest);
        self.queue.on_event(event, changed, &hints, now);
    }

    /// A pod was added or updated.
    pub fn on_pod(&mut self, pod: Pod, now: Instant) {
        let info = PodInfo::new(pod);
        let key = info.key.clone();
        let phase = info.phase();
        if phase == "Succeeded" || phase == "Failed" {
            self.on_pod_delete(&key, now);
            return;
        }
        if !info.node_name().is_empty() {
            let info = Arc::new(info.placed());
            self.queue.delete(&key);
            self.snapshot.clear_nomination(&key);
            let node = info.node_name().to_string();
            let old = self.snapshot.remove_pod(&key);
            self.snapshot.add_pod(&node, info.clone());
            let event = match &old {
                Some((old_node, _)) if self.in_flight.contains_key(&key) && *old_node == node => {
                    None
                }
                None => Some(ClusterEvent::PodAdd),
                Some((old_node, _)) if *old_node != node => Some(ClusterEvent::PodAdd),
                Some((_, o)) if o.labels() != info.labels() => Some(ClusterEvent::PodUpdateLabel),
                Some((_, o)) if scaled_down(o, &info) => Some(ClusterEvent::PodUpdateScaleDown),
                Some(_) => None,
            };
            if let Some(e) = event {
                self.event(e, Changed::Pod(&info), now);
            }
            return;
        }
        let info = Arc::new(info);
        let Some(profile) = self.profile_of(&info) else {
            return;
        };
        if self.in_flight.contains_key(&key) || self.snapshot.pod_node(&key).is_some() {
            // Assumed and being bound: this is the pod as it was before our binding.
            return;
        }
        if info.terminating() {
            self.queue.delete(&key);
            return;
        }
        match info.nominated_node_name() {
            "" => self.snapshot.clear_nomination(&key),
            n => self.snapshot.nominate(info.clone(), n),
        }
        let gated = !self.profiles[profile].run_pre_enqueue(&info).is_success();
        let was_gated = self.queue.get(&key).is_some();
        self.queue.add(info.clone(), gated, now);
        if was_gated && !gated {
            self.event(ClusterEvent::PodUpdateGates, Changed::Pod(&info), now);
        }
    }

    /// A pod was deleted (or finished).
    pub fn on_pod_delete(&mut self, key: &str, now: Instant) {
        self.queue.delete(key);
        self.snapshot.clear_nomination(key);
        if let Some((_, pod)) = self.snapshot.remove_pod(key) {
            if !self.in_flight.contains_key(key) {
                self.event(ClusterEvent::PodDelete, Changed::Pod(&pod), now);
            }
        }
    }

    pub fn on_node(&mut self, node: Node, now: Instant) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let old = self.snapshot.get(&name).map(|n| n.node.clone());
        let events = match &old {
            None => vec![ClusterEvent::NodeAdd],
            Some(old) => node_changes(old, &node),
        };
        if events.is_empty() {
            self.snapshot.upsert_node(node);
            return;
        }
        let new = Arc::new(node.clone());
        self.snapshot.upsert_node(node);
        for e in events {
            let changed = Changed::Node {
                old: old.as_deref(),
                new: Some(&new),
            };
            self.event(e, changed, now);
        }
    }

    pub fn on_node_delete(&mut self, name: &str) {
        self.snapshot.remove_node(name);
    }

    pub fn on_namespace(&mut self, ns: Namespace, now: Instant) {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let labels = ns.metadata.labels.unwrap_or_default();
        if self.snapshot.namespaces.get(&name) != Some(&labels) {
            self.snapshot.namespaces.insert(name, labels);
            self.event(ClusterEvent::NamespaceChange, Changed::None, now);
        }
    }

    pub fn on_namespace_delete(&mut self, name: &str) {
        self.snapshot.namespaces.remove(name);
    }

    /// The cluster's PodDisruptionBudgets changed.
    pub fn set_pdbs(&mut self, pdbs: Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget>) {
        self.snapshot.pdbs = pdbs;
    }

    /// Retry pods left unschedulable too long (call periodically).
    pub fn flush(&mut self, now: Instant) {
        self.queue.flush_unschedulable(now);
    }

    /// When the next backed-off pod becomes ready.
    pub fn next_wakeup(&mut self) -> Option<Instant> {
        self.queue.next_backoff()
    }

    /// Pods being bound right now.
    pub fn binding(&self) -> usize {
        self.in_flight.len()
    }

    /// Take one pod from the queue and decide for it. `None` when nothing is ready.
    pub fn schedule_one(&mut self, now: Instant) -> Option<Action> {
        loop {
            let queued = self.queue.pop(now)?;
            let pod = queued.info.clone();
            let Some(profile) = self.profile_of(&pod) else {
                self.queue.delete(&pod.key);
                continue;
            };
            if pod.terminating() {
                self.queue.delete(&pod.key);
                continue;
            }
            self.stats.attempts += 1;
            return Some(self.attempt(profile, pod, now));
        }
    }

    fn attempt(&mut self, profile: usize, pod: Arc<PodInfo>, now: Instant) -> Action {
        let fw = &self.profiles[profile];
        let mut state = CycleState::new();
        let result = schedule_pod(
            fw,
            &mut state,
            &pod,
            &self.snapshot,
            &mut self.cursor,
            &mut self.rng,
        );
        match result {
            Ok(r) => {
                let node = self.snapshot.nodes()[r.node].name().to_string();
                self.snapshot.add_pod(&node, pod.clone());
                let fw = &self.profiles[profile];
                let mut s = fw.run_reserve(&mut state, &pod, &node);
                if s.is_success() {
                    s = fw.run_permit(&mut state, &pod, &node);
                }
                if !s.is_success() {
                    fw.run_unreserve(&mut state, &pod, &node);
                    self.snapshot.remove_pod(&pod.key);
                    let error = !s.is_rejected();
                    let plugins = if error {
                        BTreeSet::new()
                    } else {
                        [s.plugin].into()
                    };
                    self.queue.failed(&pod.key, plugins, error, now);
                    self.stats.errors += 1;
                    return Action::Failed {
                        reason: if error {
                            "SchedulerError"
                        } else {
                            "Unschedulable"
                        },
                        message: s.message(),
                        pod,
                        nominated_node: None,
                        victims: Vec::new(),
                        unnominated: Vec::new(),
                    };
                }
                self.queue.done(&pod.key);
                self.snapshot.clear_nomination(&pod.key);
                self.in_flight.insert(
                    pod.key.clone(),
                    InFlight {
                        pod: pod.clone(),
                        node: node.clone(),
                        state,
                        profile,
                    },
                );
                self.stats.scheduled += 1;
                Action::Bind { pod, node }
            }
            Err(failure) => self.failed(profile, &mut state, pod, failure, now),
        }
    }

    fn failed(
        &mut self,
        profile: usize,
        state: &mut CycleState,
        pod: Arc<PodInfo>,
        mut failure: Failure,
        now: Instant,
    ) -> Action {
        let mut nominated_node = None;
        let mut victims = Vec::new();
        if let Failure::Fit { diagnosis, .. } = &mut failure {
            let fw = &self.profiles[profile];
            if !fw.post_filter.is_empty() {
                let (r, s) = fw.run_post_filter(state, &pod, &self.snapshot, &diagnosis.statuses);
                if let Some(r) = r {
                    nominated_node = r.nominated_node.filter(|n| !n.is_empty());
                    victims = r.victims;
                }
                if !s.is_success() && !s.reasons.is_empty() {
                    diagnosis.post_filter_msg = s.message();
                }
            }
        }
        let error = failure.is_error();
        if error {
            self.stats.errors += 1;
        } else {
            self.stats.unschedulable += 1;
        }
        self.queue.failed(&pod.key, failure.plugins(), error, now);
        let mut unnominated = Vec::new();
        if let Some(n) = &nominated_node {
            unnominated = crate::plugins::default_preemption::lower_priority_nominated_pods(
                &self.snapshot,
                &pod,
                n,
            );
            for p in &unnominated {
                self.snapshot.clear_nomination(&p.key);
            }
            self.snapshot.nominate(pod.clone(), n);
        }
        Action::Failed {
            reason: if error {
                "SchedulerError"
            } else {
                "Unschedulable"
            },
            message: failure.message(),
            pod,
            nominated_node,
            victims,
            unnominated,
        }
    }

    /// The binding finished. On failure the assumed pod is forgotten and the pod retried after
    /// backoff, unless `retry` is false (it was deleted or bound elsewhere meanwhile).
    pub fn bind_result(&mut self, key: &str, ok: bool, retry: bool, now: Instant) {
        let Some(mut f) = self.in_flight.remove(key) else {
            return;
        };
        if ok {
            return;
        }
        self.stats.bind_failures += 1;
        let fw = &self.profiles[f.profile];
        fw.run_unreserve(&mut f.state, &f.pod, &f.node);
        if self.snapshot.pod_node(key) == Some(f.node.as_str()) {
            self.snapshot.remove_pod(key);
        }
        if retry {
            self.queue.add(f.pod.clone(), false, now);
            self.queue.failed(key, BTreeSet::new(), true, now);
        }
    }
}

fn scaled_down(old: &PodInfo, new: &PodInfo) -> bool {
    new.requests.milli_cpu < old.requests.milli_cpu
        || new.requests.memory < old.requests.memory
        || new.requests.ephemeral_storage < old.requests.ephemeral_storage
}

/// Which node changes a scheduler cares about (`nodeSchedulingPropertiesChange`).
fn node_changes(old: &Node, new: &Node) -> Vec<ClusterEvent> {
    let mut out = Vec::new();
    let (os, ns) = (old.status.as_ref(), new.status.as_ref());
    if os.and_then(|s| s.allocatable.as_ref()) != ns.and_then(|s| s.allocatable.as_ref()) {
        out.push(ClusterEvent::NodeUpdateAllocatable);
    }
    if old.metadata.labels != new.metadata.labels {
        out.push(ClusterEvent::NodeUpdateLabel);
    }
    let (osp, nsp) = (old.spec.as_ref(), new.spec.as_ref());
    if osp.and_then(|s| s.taints.as_ref()) != nsp.and_then(|s| s.taints.as_ref())
        || osp.and_then(|s| s.unschedulable) != nsp.and_then(|s| s.unschedulable)
    {
        out.push(ClusterEvent::NodeUpdateTaint);
    }
    let cond = |s: Option<&k8s_openapi::api::core::v1::NodeStatus>| {
        s.and_then(|s| s.conditions.as_ref())
            .map(|c| {
                c.iter()
                    .map(|c| (c.type_.clone(), c.status.clone()))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    if cond(os) != cond(ns) {
        out.push(ClusterEvent::NodeUpdateCondition);
    }
    if old.metadata.annotations != new.metadata.annotations {
        out.push(ClusterEvent::NodeUpdateAnnotation);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{build_profiles, default_config, parse};
    use crate::snapshot::testing::{node, pod};
    use std::time::Duration;

    fn core_with(profiles: Vec<Framework>) -> Core {
        let mut c = Core::new(
            profiles,
            SchedulingQueue::new(Duration::from_secs(1), Duration::from_secs(10)),
        );
        c.seed(7);
        c
    }

    /// Schedule everything queued; returns pod → node.
    fn drain(core: &mut Core, now: Instant) -> Vec<(String, String)> {
        let mut out = Vec::new();
        while let Some(a) = core.schedule_one(now) {
            if let Action::Bind { pod, node } = a {
                core.bind_result(&pod.key, true, false, now);
                out.push((pod.name().to_string(), node));
            }
        }
        out
    }

    fn counts(placed: &[(String, String)]) -> Vec<usize> {
        let mut m = std::collections::BTreeMap::new();
        for (_, n) in placed {
            *m.entry(n.clone()).or_insert(0) += 1;
        }
        let mut v: Vec<usize> = m.into_values().collect();
        v.sort();
        v
    }

    /// The scheduler keeps every placed pod of the cluster: the object is cut to what
    /// placement reads of it, and what was derived from the whole pod stays.
    #[test]
    fn placed_pods_keep_what_scheduling_reads_of_them() {
        use k8s_openapi::api::core::v1::{
            ContainerPort, PersistentVolumeClaimVolumeSource, PodCondition, PodStatus, Volume,
        };
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut p = pod("p", &[&[("cpu", "1"), ("memory", "1Gi")]]);
        p.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
        p.metadata.annotations = Some([("note".to_string(), "x".repeat(1000))].into());
        p.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "web-1".into(),
                uid: "uid-rs".into(),
                controller: Some(true),
                ..Default::default()
            },
        ]);
        let spec = p.spec.as_mut().unwrap();
        spec.node_name = Some("a".into());
        spec.priority = Some(5);
        spec.containers[0].ports = Some(vec![ContainerPort {
            container_port: 80,
            host_port: Some(8080),
            ..Default::default()
        }]);
        spec.volumes = Some(vec![
            Volume {
                name: "data".into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: "claim".into(),
                    ..Default::default()
                }),
                ..Default::default()
            },
            Volume {
                name: "scratch".into(),
                empty_dir: Some(Default::default()),
                ..Default::default()
            },
        ]);
        let cond = |t: &str| PodCondition {
            type_: t.into(),
            status: "True".into(),
            ..Default::default()
        };
        let started = Time(k8s_openapi::jiff::Timestamp::from_second(1_700_000_000).unwrap());
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            start_time: Some(started.clone()),
            conditions: Some(vec![cond("Ready"), cond("DisruptionTarget")]),
            ..Default::default()
        });

        let full = PodInfo::new(p.clone());
        let placed = full.clone().placed();
        assert_eq!(placed.requests, full.requests);
        assert_eq!(placed.host_ports, full.host_ports);
        assert_eq!(
            (placed.priority, placed.label_hash, placed.key.as_str()),
            (5, full.label_hash, "default/p")
        );
        assert_eq!(
            (
                placed.name(),
                placed.namespace(),
                placed.uid(),
                placed.node_name()
            ),
            ("p", "default", "uid-p", "a")
        );
        assert_eq!(placed.labels(), full.labels());
        // What placement reads of placed pods, read without making a Pod of them.
        assert!(placed.is_placed() && !full.is_placed());
        let names = |vs: &[Volume]| vs.iter().map(|v| v.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(placed.volumes()), ["data"]);
        assert_eq!(names(full.volumes()), ["data", "scratch"]);
        assert_eq!(placed.start_time(), Some(&started));
        assert_eq!(placed.phase(), "Running");
        assert_eq!(
            placed.disruption_target().map(|c| c.status.as_str()),
            Some("True")
        );
        assert_eq!(placed.nominated_node_name(), "");
        assert_eq!(placed.scheduler_name(), "default-scheduler");
        let owners = |i: &PodInfo| i.metadata().owner_references.clone().unwrap_or_default();
        assert_eq!(owners(&placed).len(), 1);
        assert_eq!(owners(&placed), owners(&full));
        // Asked for, the object carries the same.
        assert!(placed.pod().metadata.annotations.is_none());
        let spec = placed.pod().spec.as_ref().unwrap();
        assert!(spec.containers.is_empty());
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["data"]);
        let status = placed.pod().status.as_ref().unwrap();
        assert_eq!(status.start_time, Some(started));
        let kept: Vec<&str> = status
            .conditions
            .iter()
            .flatten()
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(kept, ["DisruptionTarget"]);

        // A bound pod from the informer is kept placed, its requests and ports counted.
        let mut core = core_with(build_profiles(&default_config()).unwrap());
        let now = Instant::now();
        core.on_node(
            node(
                "a",
                &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")],
                &[],
            ),
            now,
        );
        core.on_pod(p, now);
        let n = core.snapshot.get("a").unwrap();
        assert_eq!(n.pods.len(), 1);
        assert!(n.pods[0].pod().spec.as_ref().unwrap().containers.is_empty());
        assert_eq!(n.requested, full.requests);
        assert_eq!(n.used_ports, full.host_ports);
    }

    #[test]
    fn default_scores_match_kubernetes_arithmetic() {
        // LeastAllocated: A (4 CPU, 8 Gi) → cpu 75, memory 87 → 81; B (8 CPU, 8 Gi) → 87.
        // BalancedAllocation: A std(.25, .125) = .0625 → 93; B → 100.
        // Everything else scores every node alike. Totals: A 174 + same, B 187 + same.
        let profiles = build_profiles(&default_config()).unwrap();
        let mut core = core_with(profiles);
        let now = Instant::now();
        core.on_node(
            node(
                "a",
                &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")],
                &[],
            ),
            now,
        );
        core.on_node(
            node(
                "b",
                &[("cpu", "8"), ("memory", "8Gi"), ("pods", "110")],
                &[],
            ),
            now,
        );
        let p = PodInfo::new(pod("p", &[&[("cpu", "1"), ("memory", "1Gi")]]));
        let fw = &core.profiles[0];
        let mut state = CycleState::new();
        let (_, s) = fw.run_pre_filter(&mut state, &p, &core.snapshot);
        assert!(s.is_success(), "{s:?}");
        let nodes: Vec<&crate::types::NodeInfo> = core.snapshot.nodes().iter().collect();
        assert!(fw
            .run_pre_score(&mut state, &p, &nodes, &core.snapshot)
            .is_success());
        let totals = fw.run_score(&state, &p, &nodes, &[0, 1]).unwrap();
        assert_eq!(totals[1] - totals[0], 187 - 174, "totals {totals:?}");
        core.on_pod(pod("p", &[&[("cpu", "1"), ("memory", "1Gi")]]), now);
        assert_eq!(drain(&mut core, now), [("p".to_string(), "b".to_string())]);
    }

    #[test]
    fn least_allocated_spreads_and_most_allocated_packs() {
        let now = Instant::now();
        let place = |profiles: Vec<Framework>| {
            let mut core = core_with(profiles);
            for n in ["n1", "n2"] {
                core.on_node(
                    node(n, &[("cpu", "4"), ("memory", "8Gi"), ("pods", "110")], &[]),
                    now,
                );
            }
            for i in 0..4 {
                core.on_pod(
                    pod(&format!("p{i}"), &[&[("cpu", "1"), ("memory", "2Gi")]]),
                    now,
                );
            }
            counts(&drain(&mut core, now))
        };
        assert_eq!(place(build_profiles(&default_config()).unwrap()), [2, 2]);
        let packing = parse(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: default-scheduler\n  plugins:\n    score:\n      disabled: [{name: NodeResourcesBalancedAllocation}]\n  pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: MostAllocated\n",
        )
        .unwrap();
        assert_eq!(place(build_profiles(&packing).unwrap()), [4]);
    }

    #[test]
    fn pod_waits_unschedulable_until_a_node_that_fits_arrives() {
        let mut core = core_with(build_profiles(&default_config()).unwrap());
        let t0 = Instant::now();
        core.on_node(
            node(
                "small",
                &[("cpu", "1"), ("memory", "1Gi"), ("pods", "110")],
                &[],
            ),
            t0,
        );
        core.on_pod(pod("big", &[&[("cpu", "2")]]), t0);
        match core.schedule_one(t0) {
            Some(Action::Failed {
                message, reason, ..
            }) => {
                assert_eq!(reason, "Unschedulable");
                assert!(
                    message.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        // An unrelated event (a namespace) does not retry it; a new node does, after backoff.
        let mut ns = Namespace::default();
        ns.metadata.name = Some("x".into());
        core.on_namespace(ns, t0);
        assert!(core.schedule_one(t0 + Duration::from_secs(2)).is_none());
        core.on_node(
            node(
                "large",
                &[("cpu", "4"), ("memory", "1Gi"), ("pods", "110")],
                &[],
            ),
            t0,
        );
        let placed = drain(&mut core, t0 + Duration::from_secs(2));
        assert_eq!(placed, [("big".to_string(), "large".to_string())]);
    }

    #[test]
    fn failed_binding_forgets_the_assumed_pod_and_retries() {
        let mut core = core_with(build_profiles(&default_config()).unwrap());
        let t0 = Instant::now();
        core.on_node(
            node(
                "n",
                &[("cpu", "1"), ("memory", "1Gi"), ("pods", "110")],
                &[],
            ),
            t0,
        );
        core.on_pod(pod("p", &[&[("cpu", "1")]]), t0);
        let Some(Action::Bind { pod, node }) = core.schedule_one(t0) else {
            panic!("not scheduled")
        };
        assert_eq!(node, "n");
        assert_eq!(core.snapshot.get("n").unwrap().requested.milli_cpu, 1000);
        core.bind_result(&pod.key, false, true, t0);
        assert_eq!(core.snapshot.get("n").unwrap().requested.milli_cpu, 0);
        assert!(
            core.schedule_one(t0).is_none(),
            "retried before its backoff"
        );
        assert!(matches!(
            core.schedule_one(t0 + Duration::from_secs(1)),
            Some(Action::Bind { .. })
        ));
    }
}

#[cfg(test)]
mod bad_input {
    use super::*;
    use crate::config::{build_profiles, default_config};
    use crate::snapshot::testing::{node, pod};
    use std::time::Duration;

    #[test]
    fn impossible_and_broken_pods_neither_stall_the_queue_nor_crash() {
        let mut core = Core::new(
            build_profiles(&default_config()).unwrap(),
            SchedulingQueue::new(Duration::from_secs(1), Duration::from_secs(10)),
        );
        let t0 = Instant::now();
        core.on_node(
            node(
                "n",
                &[("cpu", "4"), ("memory", "4Gi"), ("pods", "110")],
                &[],
            ),
            t0,
        );
        // Impossible: huge request, a selector nothing has, an invalid affinity operator,
        // a quantity that does not parse, and affinity to pods that never exist.
        let mut huge = pod("huge", &[&[("cpu", "100000")]]);
        huge.spec.as_mut().unwrap().priority = Some(100);
        let mut nowhere = pod("nowhere", &[]);
        nowhere.spec.as_mut().unwrap().node_selector =
            Some([("zone".to_string(), "moon".to_string())].into());
        let mut broken: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "broken", "namespace": "default"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "lots"}}}],
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchExpressions": [{"key": "a", "operator": "Sometimes"}]}, "topologyKey": "k"}]}}}
        })).unwrap();
        broken.spec.as_mut().unwrap().priority = Some(50);
        let mut lonely: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "lonely", "namespace": "default"},
            "spec": {"containers": [{"name": "c"}],
                "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "ghost"}}, "topologyKey": "kubernetes.io/hostname"}]}}}
        })).unwrap();
        lonely.spec.as_mut().unwrap().priority = Some(10);
        for p in [huge, nowhere, broken, lonely] {
            core.on_pod(p, t0);
        }
        core.on_pod(pod("fine", &[&[("cpu", "1")]]), t0);
        let mut failed = Vec::new();
        let mut bound = Vec::new();
        while let Some(a) = core.schedule_one(t0) {
            match a {
                Action::Bind { pod, node } => {
                    core.bind_result(&pod.key, true, false, t0);
                    bound.push((pod.name().to_string(), node));
                }
                Action::Failed { pod, .. } => failed.push(pod.name().to_string()),
            }
        }
        assert_eq!(bound, [("fine".to_string(), "n".to_string())]);
        failed.sort();
        assert_eq!(failed, ["broken", "huge", "lonely", "nowhere"]);
        // They are retried later, and fail again without harm.
        let later = t0 + Duration::from_secs(600);
        core.flush(later);
        let mut again = 0;
        while let Some(a) = core.schedule_one(later) {
            assert!(matches!(a, Action::Failed { .. }));
            again += 1;
        }
        assert_eq!(again, 4);
    }
}
