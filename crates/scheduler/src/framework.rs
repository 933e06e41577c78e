//! The scheduling framework: one small trait per extension point, the typed state passed between
//! them, the result codes, and a profile (`Framework`) that runs its enabled plugins in order.
//! Mirrors `pkg/scheduler/framework/interface.go` and `runtime/framework.go`.

use std::any::Any;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::snapshot::Snapshot;
use crate::types::{NodeInfo, PodInfo};

/// The highest score a Score plugin may give after normalization.
pub const MAX_NODE_SCORE: i64 = 100;
pub const MIN_NODE_SCORE: i64 = 0;

/// The result of a plugin call. Rejection is a code, not an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Success,
    /// An internal error: the pod is retried with backoff.
    Error,
    /// The pod does not fit here, but preemption might help.
    Unschedulable,
    /// The pod does not fit here and preemption cannot help.
    UnschedulableAndUnresolvable,
    /// Permit: wait.
    Wait,
    /// PreFilter/PreScore: the plugin has nothing to do for this pod; skip its Filter/Score.
    Skip,
    /// The pod waits for something outside the scheduler (not a rejection).
    Pending,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Vec<Cow<'static, str>>,
    /// The plugin that produced a rejection (filled in by the framework).
    pub plugin: &'static str,
}

impl Status {
    pub const fn success() -> Status {
        Status {
            code: Code::Success,
            reasons: Vec::new(),
            plugin: "",
        }
    }

    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Status {
        Status {
            code,
            reasons: vec![reason.into()],
            plugin: "",
        }
    }

    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::Unschedulable, reason)
    }

    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    pub fn error(reason: impl Into<Cow<'static, str>>) -> Status {
        Status::new(Code::Error, reason)
    }

    pub fn skip() -> Status {
        Status {
            code: Code::Skip,
            reasons: Vec::new(),
            plugin: "",
        }
    }

    pub fn with_reasons(code: Code, reasons: Vec<Cow<'static, str>>) -> Status {
        Status {
            code,
            reasons,
            plugin: "",
        }
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// Unschedulable or UnschedulableAndUnresolvable.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    fn with_plugin(mut self, plugin: &'static str) -> Status {
        self.plugin = plugin;
        self
    }
}

/// Data a plugin keeps for one pod's cycle; cloned when preemption simulates removals.
pub trait StateData: Any + Send + Sync {
    fn clone_box(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// State shared by the extension points of one scheduling cycle, keyed by plugin.
#[derive(Default)]
pub struct CycleState {
    data: Vec<(&'static str, Box<dyn StateData>)>,
    /// Bit i set: the i-th Filter plugin of the profile is skipped (its PreFilter said Skip).
    pub skip_filter: u64,
    /// Bit i set: the i-th Score plugin of the profile is skipped (its PreScore said Skip).
    pub skip_score: u64,
    /// PreFilter plugins that narrowed the candidate nodes to a set.
    pub narrowed_by: Vec<&'static str>,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, (**v).clone_box()))
                .collect(),
            skip_filter: self.skip_filter,
            skip_score: self.skip_score,
            narrowed_by: self.narrowed_by.clone(),
        }
    }
}

impl CycleState {
    pub fn new() -> CycleState {
        CycleState::default()
    }

    pub fn write<T: StateData>(&mut self, key: &'static str, value: T) {
        match self.data.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = Box::new(value),
            None => self.data.push((key, Box::new(value))),
        }
    }

    pub fn read<T: 'static>(&self, key: &'static str) -> Option<&T> {
        self.data
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.as_ref().as_any().downcast_ref())
    }

    pub fn read_mut<T: 'static>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data
            .iter_mut()
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.as_mut().as_any_mut().downcast_mut())
    }
}

/// A node's score from one plugin or in total.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeScore {
    /// Index into `Snapshot::nodes()`.
    pub node: usize,
    pub score: i64,
}

/// A cluster change that may make rejected pods schedulable (`framework.ClusterEvent`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ClusterEvent {
    PodAdd,
    /// A scheduled pod's labels changed.
    PodUpdateLabel,
    /// A scheduled pod's requests were scaled down.
    PodUpdateScaleDown,
    /// A pod's scheduling gates were removed.
    PodUpdateGates,
    /// A scheduled pod was deleted (or finished).
    PodDelete,
    NodeAdd,
    NodeDelete,
    NodeUpdateAllocatable,
    NodeUpdateLabel,
    NodeUpdateTaint,
    NodeUpdateCondition,
    NodeUpdateAnnotation,
    NamespaceChange,
    StorageChange,
    /// Anything else (periodic flush, unknown).
    Other,
}

/// The object a cluster event is about, for queueing hints.
#[derive(Clone, Copy)]
pub enum Changed<'a> {
    None,
    Pod(&'a PodInfo),
    Node {
        old: Option<&'a k8s_openapi::api::core::v1::Node>,
        new: Option<&'a k8s_openapi::api::core::v1::Node>,
    },
}

/// Extension-point traits a plugin may implement; the framework asks through these accessors.
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
    /// Cluster events after which a pod this plugin rejected is worth retrying.
    fn events(&self) -> Vec<ClusterEvent> {
        Vec::new()
    }
    /// QueueingHint: whether `event` (about `changed`, if a pod) could make `pod` schedulable.
    fn hint(&self, _pod: &PodInfo, _event: ClusterEvent, _changed: Option<&PodInfo>) -> bool {
        true
    }
    /// QueueingHint for node events: whether the change from `old` to `new` (None: added or
    /// deleted) could make `pod` schedulable.
    fn hint_node(
        &self,
        _pod: &PodInfo,
        _event: ClusterEvent,
        _old: Option<&k8s_openapi::api::core::v1::Node>,
        _new: Option<&k8s_openapi::api::core::v1::Node>,
    ) -> bool {
        true
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
}

/// Decides whether a pod may enter the active queue at all (SchedulingGates).
pub trait PreEnqueuePlugin {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// Orders the active queue. Only one is enabled per profile.
pub trait QueueSortPlugin {
    /// `a` goes before `b`. `*_ts` are the times the pods entered the queue.
    fn less(&self, a: &PodInfo, a_ts: u64, b: &PodInfo, b_ts: u64) -> bool;
}

/// Result of PreFilter: optionally the only nodes worth filtering.
#[derive(Debug, Default, Clone)]
pub struct PreFilterResult {
    pub node_names: Option<BTreeSet<String>>,
}

pub trait PreFilterPlugin {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status);
    /// Whether `add_pod`/`remove_pod` are implemented (state depends on other pods).
    fn has_extensions(&self) -> bool {
        false
    }
    /// Update the state as if `added` ran on `node` (preemption, nominated pods).
    fn add_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _added: &PodInfo,
        _node: &NodeInfo,
        _snapshot: &Snapshot,
    ) -> Status {
        Status::success()
    }
    /// Update the state as if `removed` no longer ran on `node`.
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _removed: &PodInfo,
        _node: &NodeInfo,
        _snapshot: &Snapshot,
    ) -> Status {
        Status::success()
    }
}

pub trait FilterPlugin {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// What PostFilter (preemption) found: the node the pod is nominated to.
#[derive(Debug, Clone, Default)]
pub struct PostFilterResult {
    pub nominated_node: Option<String>,
    /// Pods to delete (victims) so the nominated node has room.
    pub victims: Vec<Arc<PodInfo>>,
}

pub trait PostFilterPlugin {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        framework: &Framework,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (Option<PostFilterResult>, Status);
}

pub trait PreScorePlugin {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status;
}

pub trait ScorePlugin {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;
    /// Score each of `nodes` into `scores` (same order, `node` already set). The default asks
    /// `score` node by node; plugins override it to read their cycle state once per pod.
    fn score_nodes(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        scores: &mut [NodeScore],
    ) -> Result<(), Status> {
        for (s, n) in scores.iter_mut().zip(nodes) {
            s.score = self.score(state, pod, n)?;
        }
        Ok(())
    }
    /// Whether `normalize` is implemented.
    fn has_normalize(&self) -> bool {
        false
    }
    /// Rescale this plugin's scores to [0, MAX_NODE_SCORE].
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [NodeScore]) -> Status {
        Status::success()
    }
}

pub trait ReservePlugin {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status;
    fn unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str);
}

pub trait PermitPlugin {
    /// Success, a rejection, or Wait with a timeout.
    fn permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> (Status, Duration);
}

/// Marks plugins that bind (DefaultBinder); binding itself is done by the scheduler's binder.
pub trait BindPlugin {}

/// Filter statuses of the nodes a pod was tried on; nodes absent got `absent` (from PreFilter).
#[derive(Debug, Clone, Default)]
pub struct NodeStatuses {
    pub by_node: Vec<(usize, Status)>,
    /// Status of every node not listed (set when PreFilter narrowed or rejected all nodes).
    pub absent: Option<Status>,
}

impl NodeStatuses {
    pub fn get(&self, node: usize) -> Option<&Status> {
        self.by_node
            .iter()
            .find(|(i, _)| *i == node)
            .map(|(_, s)| s)
            .or(self.absent.as_ref())
    }
}

/// The Filter plugins one pod's cycle runs (those its PreFilter did not skip) with their names,
/// found once per cycle rather than once per node.
pub struct ActiveFilters<'a>(Vec<(&'static str, &'a dyn FilterPlugin)>);

impl ActiveFilters<'_> {
    /// `Framework::run_filter` with these plugins: stops at the first rejection.
    pub fn run(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for &(name, p) in &self.0 {
            let s = p.filter(state, pod, node);
            if !s.is_success() {
                return s.with_plugin(name);
            }
        }
        Status::success()
    }
}

/// The bit of the plugin named `name` in `list` (0 when absent or beyond 64 plugins).
fn position_bit(list: &[Enabled], name: &str) -> u64 {
    match list.iter().position(|e| e.plugin.name() == name) {
        Some(i) if i < 64 => 1 << i,
        _ => 0,
    }
}

/// One enabled plugin at one extension point.
#[derive(Clone)]
pub struct Enabled {
    pub plugin: Arc<dyn Plugin>,
    pub weight: i64,
}

/// A scheduling profile: the plugins enabled at each extension point, in order.
#[derive(Clone, Default)]
pub struct Framework {
    pub scheduler_name: String,
    pub pre_enqueue: Vec<Enabled>,
    pub queue_sort: Option<Enabled>,
    pub pre_filter: Vec<Enabled>,
    pub filter: Vec<Enabled>,
    pub post_filter: Vec<Enabled>,
    pub pre_score: Vec<Enabled>,
    pub score: Vec<Enabled>,
    pub reserve: Vec<Enabled>,
    pub permit: Vec<Enabled>,
    pub bind: Vec<Enabled>,
    /// `percentageOfNodesToScore` of this profile (None: the global one or adaptive).
    pub percentage_of_nodes_to_score: Option<i32>,
}

impl Framework {
    /// Every plugin of the profile, once.
    pub fn plugins(&self) -> Vec<Arc<dyn Plugin>> {
        let mut out: Vec<Arc<dyn Plugin>> = Vec::new();
        let all = self
            .pre_enqueue
            .iter()
            .chain(self.queue_sort.iter())
            .chain(&self.pre_filter)
            .chain(&self.filter)
            .chain(&self.post_filter)
            .chain(&self.pre_score)
            .chain(&self.score)
            .chain(&self.reserve)
            .chain(&self.permit)
            .chain(&self.bind);
        for e in all {
            if !out.iter().any(|p| p.name() == e.plugin.name()) {
                out.push(e.plugin.clone());
            }
        }
        out
    }

    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Status {
        for e in &self.pre_enqueue {
            if let Some(p) = e.plugin.as_pre_enqueue() {
                let s = p.pre_enqueue(pod);
                if !s.is_success() {
                    return s.with_plugin(e.plugin.name());
                }
            }
        }
        Status::success()
    }

    /// `a` before `b` in the active queue.
    pub fn less(&self, a: &PodInfo, a_ts: u64, b: &PodInfo, b_ts: u64) -> bool {
        match self
            .queue_sort
            .as_ref()
            .and_then(|e| e.plugin.as_queue_sort())
        {
            Some(q) => q.less(a, a_ts, b, b_ts),
            None => a_ts < b_ts,
        }
    }

    /// Run PreFilter plugins; intersects the node sets they return.
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let mut result = PreFilterResult::default();
        for e in &self.pre_filter {
            let Some(p) = e.plugin.as_pre_filter() else {
                continue;
            };
            let (r, s) = p.pre_filter(state, pod, snapshot);
            match s.code {
                Code::Skip => {
                    state.skip_filter |= position_bit(&self.filter, e.plugin.name());
                    continue;
                }
                Code::Success => {}
                _ => return (PreFilterResult::default(), s.with_plugin(e.plugin.name())),
            }
            if let Some(names) = r.node_names {
                state.narrowed_by.push(e.plugin.name());
                result.node_names = Some(match result.node_names.take() {
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                    None => names,
                });
                if result.node_names.as_ref().is_some_and(BTreeSet::is_empty) {
                    return (
                        result,
                        Status::unresolvable(
                            "node(s) didn't satisfy plugin(s) [".to_string()
                                + e.plugin.name()
                                + "]",
                        )
                        .with_plugin(e.plugin.name()),
                    );
                }
            }
        }
        (result, Status::success())
    }

    /// Update PreFilter state as if `other` were added to `node`.
    pub fn run_pre_filter_add_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
    ) -> Status {
        for e in &self.pre_filter {
            if state.skip_filter & position_bit(&self.filter, e.plugin.name()) != 0 {
                continue;
            }
            if let Some(p) = e.plugin.as_pre_filter().filter(|p| p.has_extensions()) {
                let s = p.add_pod(state, pod, other, node, snapshot);
                if !s.is_success() {
                    return s.with_plugin(e.plugin.name());
                }
            }
        }
        Status::success()
    }

    /// Update PreFilter state as if `other` were removed from `node`.
    pub fn run_pre_filter_remove_pod(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        other: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
    ) -> Status {
        for e in &self.pre_filter {
            if state.skip_filter & position_bit(&self.filter, e.plugin.name()) != 0 {
                continue;
            }
            if let Some(p) = e.plugin.as_pre_filter().filter(|p| p.has_extensions()) {
                let s = p.remove_pod(state, pod, other, node, snapshot);
                if !s.is_success() {
                    return s.with_plugin(e.plugin.name());
                }
            }
        }
        Status::success()
    }

    /// The Filter plugins `state`'s cycle runs, for `ActiveFilters::run` on many nodes.
    pub fn active_filters(&self, state: &CycleState) -> ActiveFilters<'_> {
        ActiveFilters(
            self.filter
                .iter()
                .enumerate()
                .filter(|(i, _)| *i >= 64 || state.skip_filter & (1 << i) == 0)
                .filter_map(|(_, e)| Some((e.plugin.name(), e.plugin.as_filter()?)))
                .collect(),
        )
    }

    /// Run Filter plugins on one node; stops at the first rejection.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for (i, e) in self.filter.iter().enumerate() {
            if i < 64 && state.skip_filter & (1 << i) != 0 {
                continue;
            }
            if let Some(p) = e.plugin.as_filter() {
                let s = p.filter(state, pod, node);
                if !s.is_success() {
                    return s.with_plugin(e.plugin.name());
                }
            }
        }
        Status::success()
    }

    /// `RunFilterPluginsWithNominatedPods`: a node fits only if the pod fits both with the
    /// nominated pods of equal or higher priority added and without them.
    pub fn run_filter_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        snapshot: &Snapshot,
    ) -> Status {
        if !snapshot.has_nominations() {
            return self.run_filter(state, pod, node);
        }
        let nominated: Vec<&Arc<PodInfo>> = snapshot
            .nominated_pods(node.name())
            .iter()
            .filter(|p| p.priority >= pod.priority && p.key != pod.key)
            .collect();
        if nominated.is_empty() {
            return self.run_filter(state, pod, node);
        }
        let mut with = node.clone();
        let mut st = state.clone();
        for p in &nominated {
            with.add_pod((*p).clone());
            let s = self.run_pre_filter_add_pod(&mut st, pod, p, &with, snapshot);
            if !s.is_success() {
                return s;
            }
        }
        let s = self.run_filter(&st, pod, &with);
        if !s.is_success() {
            return s;
        }
        self.run_filter(state, pod, node)
    }

    pub fn run_post_filter(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        statuses: &NodeStatuses,
    ) -> (Option<PostFilterResult>, Status) {
        let mut last = Status::unschedulable("no PostFilter plugin");
        for e in &self.post_filter {
            if let Some(p) = e.plugin.as_post_filter() {
                let (r, s) = p.post_filter(state, pod, self, snapshot, statuses);
                if s.is_success() {
                    return (r, s);
                }
                if !s.is_rejected() {
                    return (r, s.with_plugin(e.plugin.name()));
                }
                last = s.with_plugin(e.plugin.name());
            }
        }
        (None, last)
    }

    pub fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        for e in &self.pre_score {
            if let Some(p) = e.plugin.as_pre_score() {
                let s = p.pre_score(state, pod, nodes, snapshot);
                match s.code {
                    Code::Skip => {
                        state.skip_score |= position_bit(&self.score, e.plugin.name());
                    }
                    Code::Success => {}
                    _ => return s.with_plugin(e.plugin.name()),
                }
            }
        }
        Status::success()
    }

    /// Score every node with every Score plugin, normalize, weight and sum.
    /// Returns the total per node, in the order of `nodes`.
    pub fn run_score(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[&NodeInfo],
        node_index: &[usize],
    ) -> Result<Vec<i64>, Status> {
        let mut totals = vec![0i64; nodes.len()];
        let mut scores: Vec<NodeScore> = Vec::with_capacity(nodes.len());
        for (i, e) in self.score.iter().enumerate() {
            if i < 64 && state.skip_score & (1 << i) != 0 {
                continue;
            }
            let Some(p) = e.plugin.as_score() else {
                continue;
            };
            scores.clear();
            scores.extend(node_index.iter().map(|&node| NodeScore { node, score: 0 }));
            p.score_nodes(state, pod, nodes, &mut scores)
                .map_err(|s| s.with_plugin(e.plugin.name()))?;
            if p.has_normalize() {
                let s = p.normalize(state, pod, &mut scores);
                if !s.is_success() {
                    return Err(s.with_plugin(e.plugin.name()));
                }
            }
            for (t, s) in totals.iter_mut().zip(&scores) {
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&s.score) {
                    return Err(Status::error(format!(
                        "plugin {:?} returns an invalid score {}, it should in the range of [{}, {}] after normalizing",
                        e.plugin.name(),
                        s.score,
                        MIN_NODE_SCORE,
                        MAX_NODE_SCORE
                    )));
                }
                *t += s.score * e.weight;
            }
        }
        Ok(totals)
    }

    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for e in &self.reserve {
            if let Some(p) = e.plugin.as_reserve() {
                let s = p.reserve(state, pod, node);
                if !s.is_success() {
                    return s.with_plugin(e.plugin.name());
                }
            }
        }
        Status::success()
    }

    pub fn run_unreserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) {
        for e in self.reserve.iter().rev() {
            if let Some(p) = e.plugin.as_reserve() {
                p.unreserve(state, pod, node);
            }
        }
    }

    pub fn run_permit(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for e in &self.permit {
            if let Some(p) = e.plugin.as_permit() {
                let (s, _timeout) = p.permit(state, pod, node);
                if s.code == Code::Wait {
                    // No in-tree plugin waits; a waiting pod is treated as permitted.
                    continue;
                }
                if !s.is_success() {
                    return s.with_plugin(e.plugin.name());
                }
            }
        }
        Status::success()
    }

    pub fn has_filter(&self) -> bool {
        !self.filter.is_empty()
    }

    pub fn has_score(&self) -> bool {
        !self.score.is_empty()
    }
}
