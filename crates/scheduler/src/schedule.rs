//! One scheduling decision: filter the nodes that can take the pod (visiting only as many as
//! `percentageOfNodesToScore` asks), score them and pick the best, breaking ties at random.
//! Mirrors `schedulePod`, `findNodesThatFitPod`, `prioritizeNodes` and `selectHost` in
//! `pkg/scheduler/schedule_one.go`, and `FitError` in `framework/types.go`.

use std::collections::{BTreeMap, BTreeSet};

use rand::Rng;

use crate::framework::{Code, CycleState, Framework, NodeStatuses, Status};
use crate::snapshot::Snapshot;
use crate::types::{NodeInfo, PodInfo};

/// Below this many nodes every node is examined.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: i32 = 5;

/// How many feasible nodes to look for before scoring (`numFeasibleNodesToFind`).
pub fn num_feasible_nodes_to_find(percentage: Option<i32>, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND {
        return num_all_nodes;
    }
    let mut pct = percentage.unwrap_or(0);
    if pct >= 100 {
        return num_all_nodes;
    }
    if pct <= 0 {
        pct = 50 - (num_all_nodes / 125) as i32;
        if pct < MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND {
            pct = MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND;
        }
    }
    let n = num_all_nodes * pct as usize / 100;
    n.max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Why a pod fits nowhere: per-node statuses and the plugins that rejected it.
#[derive(Debug, Clone, Default)]
pub struct Diagnosis {
    pub statuses: NodeStatuses,
    pub unschedulable_plugins: BTreeSet<&'static str>,
    pub pre_filter_msg: String,
    pub post_filter_msg: String,
}

/// The outcome of a failed attempt.
#[derive(Debug, Clone)]
pub enum Failure {
    /// No node fits (`FitError`).
    Fit {
        num_all_nodes: usize,
        diagnosis: Box<Diagnosis>,
    },
    /// The cluster has no nodes.
    NoNodes,
    /// A plugin failed with an error.
    Error(Box<Status>),
}

impl Failure {
    /// The message of the FailedScheduling event and the PodScheduled condition.
    pub fn message(&self) -> String {
        match self {
            Failure::NoNodes => "no nodes available to schedule pods".into(),
            Failure::Error(s) => s.message(),
            Failure::Fit {
                num_all_nodes,
                diagnosis,
            } => fit_error_message(*num_all_nodes, diagnosis),
        }
    }

    /// The plugins whose rejection the pod waits on.
    pub fn plugins(&self) -> BTreeSet<&'static str> {
        match self {
            Failure::Fit { diagnosis, .. } => diagnosis.unschedulable_plugins.clone(),
            _ => BTreeSet::new(),
        }
    }

    pub fn is_error(&self) -> bool {
        matches!(self, Failure::Error(_))
    }
}

/// `FitError.Error()`: "0/N nodes are available: <prefilter>. <histogram>. <postfilter>."
pub fn fit_error_message(num_all_nodes: usize, d: &Diagnosis) -> String {
    let mut msg = format!("0/{num_all_nodes} nodes are available:");
    if !d.pre_filter_msg.is_empty() {
        msg.push_str(&format!(" {}.", d.pre_filter_msg));
    } else {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, s) in &d.statuses.by_node {
            for r in &s.reasons {
                *counts.entry(r).or_insert(0) += 1;
            }
        }
        let absent = num_all_nodes.saturating_sub(d.statuses.by_node.len());
        if absent > 0 {
            if let Some(s) = &d.statuses.absent {
                for r in &s.reasons {
                    *counts.entry(r).or_insert(0) += absent;
                }
            }
        }
        let mut parts: Vec<String> = counts.iter().map(|(r, n)| format!("{n} {r}")).collect();
        parts.sort();
        if !parts.is_empty() {
            msg.push_str(&format!(" {}.", parts.join(", ")));
        }
    }
    if !d.post_filter_msg.is_empty() {
        msg.push_str(&format!(" {}", d.post_filter_msg));
        if !d.post_filter_msg.ends_with('.') {
            msg.push('.');
        }
    }
    msg
}

/// A successful decision.
pub struct ScheduleResult {
    /// Index of the chosen node in `Snapshot::nodes()`.
    pub node: usize,
    pub evaluated: usize,
    pub feasible: usize,
}

/// Rotates where filtering starts so successive pods visit different nodes first.
#[derive(Debug, Default)]
pub struct Cursor {
    pub next_start: usize,
}

/// Decide where `pod` goes. `state` is filled by the plugins and reused for Reserve/PostFilter.
pub fn schedule_pod(
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    cursor: &mut Cursor,
    rng: &mut impl Rng,
) -> Result<ScheduleResult, Failure> {
    let all = snapshot.num_nodes();
    if all == 0 {
        return Err(Failure::NoNodes);
    }
    if let Some(e) = &pod.parse_error {
        return Err(Failure::Error(Box::new(Status::error(e.clone()))));
    }
    let feasible = find_nodes_that_fit(fw, state, pod, snapshot, cursor)?;
    let (feasible, evaluated) = feasible;
    if feasible.len() == 1 {
        return Ok(ScheduleResult {
            node: feasible[0],
            evaluated,
            feasible: 1,
        });
    }
    let nodes: Vec<&NodeInfo> = feasible.iter().map(|&i| &snapshot.nodes()[i]).collect();
    let s = fw.run_pre_score(state, pod, &nodes, snapshot);
    if !s.is_success() {
        return Err(Failure::Error(Box::new(s)));
    }
    let totals = fw
        .run_score(state, pod, &nodes, &feasible)
        .map_err(|s| Failure::Error(Box::new(s)))?;
    let node = select_host(&feasible, &totals, rng);
    Ok(ScheduleResult {
        node,
        evaluated,
        feasible: feasible.len(),
    })
}

/// The highest total wins; ties are broken uniformly at random (reservoir sampling).
pub fn select_host(nodes: &[usize], totals: &[i64], rng: &mut impl Rng) -> usize {
    let mut best = nodes[0];
    let mut best_score = totals[0];
    let mut ties = 1u32;
    for (&n, &s) in nodes.iter().zip(totals).skip(1) {
        if s > best_score {
            best = n;
            best_score = s;
            ties = 1;
        } else if s == best_score {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                best = n;
            }
        }
    }
    best
}

type Feasible = (Vec<usize>, usize);

fn find_nodes_that_fit(
    fw: &Framework,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    cursor: &mut Cursor,
) -> Result<Feasible, Failure> {
    let all = snapshot.num_nodes();
    let mut diagnosis = Diagnosis::default();
    let (pre, s) = fw.run_pre_filter(state, pod, snapshot);
    if !s.is_success() {
        if !s.is_rejected() {
            return Err(Failure::Error(Box::new(s)));
        }
        diagnosis.pre_filter_msg = s.message();
        diagnosis.unschedulable_plugins.insert(s.plugin);
        diagnosis.statuses.absent = Some(s);
        return Err(Failure::Fit {
            num_all_nodes: all,
            diagnosis: Box::new(diagnosis),
        });
    }

    // A pod nominated by an earlier preemption tries its node first.
    let nominated = Some(pod.nominated_node_name()).filter(|n| !n.is_empty());
    if let Some(idx) = nominated.and_then(|n| snapshot.index_of(n)) {
        let node = &snapshot.nodes()[idx];
        if fw
            .run_filter_with_nominated(state, pod, node, snapshot)
            .is_success()
        {
            return Ok((vec![idx], 1));
        }
    }

    let candidates: Option<Vec<usize>> = pre
        .node_names
        .as_ref()
        .map(|names| names.iter().filter_map(|n| snapshot.index_of(n)).collect());
    if pre.node_names.is_some() {
        diagnosis.statuses.absent = Some(Status::new(
            Code::UnschedulableAndUnresolvable,
            format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                state.narrowed_by.join(" ")
            ),
        ));
    }
    let n = candidates.as_ref().map_or(all, Vec::len);
    let want = if fw.has_filter() {
        num_feasible_nodes_to_find(fw.percentage_of_nodes_to_score, n)
    } else {
        n
    };
    let start = if candidates.is_some() {
        0
    } else {
        cursor.next_start % n.max(1)
    };
    let filters = fw.active_filters(state);
    let nominations = snapshot.has_nominations();
    let mut feasible = Vec::with_capacity(want.min(n));
    let mut processed = 0;
    for k in 0..n {
        if feasible.len() >= want {
            break;
        }
        // `(start + k) % n` without a division: `start < n`.
        let pos = if start + k < n {
            start + k
        } else {
            start + k - n
        };
        let idx = match &candidates {
            Some(c) => c[pos],
            None => pos,
        };
        processed += 1;
        let node = &snapshot.nodes()[idx];
        let s = if nominations {
            fw.run_filter_with_nominated(state, pod, node, snapshot)
        } else {
            filters.run(state, pod, node)
        };
        if s.is_success() {
            feasible.push(idx);
        } else if s.is_rejected() {
            diagnosis.unschedulable_plugins.insert(s.plugin);
            diagnosis.statuses.by_node.push((idx, s));
        } else {
            return Err(Failure::Error(Box::new(s)));
        }
    }
    if candidates.is_none() {
        cursor.next_start = (start + processed) % n.max(1);
    }
    if feasible.is_empty() {
        return Err(Failure::Fit {
            num_all_nodes: all,
            diagnosis: Box::new(diagnosis),
        });
    }
    Ok((feasible, processed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feasible_nodes_to_find_follows_kubernetes_adaptive_percentage() {
        assert_eq!(num_feasible_nodes_to_find(None, 10), 10);
        assert_eq!(num_feasible_nodes_to_find(None, 99), 99);
        // 50 - 1000/125 = 42%
        assert_eq!(num_feasible_nodes_to_find(None, 1000), 420);
        // 50 - 5000/125 = 10%
        assert_eq!(num_feasible_nodes_to_find(None, 5000), 500);
        // 50 - 6000/125 = 2% → floor of 5%
        assert_eq!(num_feasible_nodes_to_find(None, 6000), 300);
        assert_eq!(num_feasible_nodes_to_find(Some(1), 1000), 100);
        assert_eq!(num_feasible_nodes_to_find(Some(40), 1000), 400);
        assert_eq!(num_feasible_nodes_to_find(Some(100), 1000), 1000);
    }

    #[test]
    fn fit_error_message_sorts_the_reason_histogram() {
        let mut d = Diagnosis::default();
        d.statuses.by_node = vec![
            (0, Status::unschedulable("Insufficient cpu")),
            (
                1,
                Status::with_reasons(
                    Code::Unschedulable,
                    vec!["Insufficient cpu".into(), "Insufficient memory".into()],
                ),
            ),
            (
                2,
                Status::unresolvable("node(s) didn't match Pod's node affinity/selector"),
            ),
        ];
        assert_eq!(
            fit_error_message(3, &d),
            "0/3 nodes are available: 1 Insufficient memory, 1 node(s) didn't match Pod's node affinity/selector, 2 Insufficient cpu."
        );
        d.post_filter_msg =
            "preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
                .into();
        assert!(fit_error_message(3, &d).ends_with(
            " preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling."
        ));
    }

    #[test]
    fn prefilter_rejection_reports_only_its_message() {
        let d = Diagnosis {
            pre_filter_msg: "waiting".into(),
            statuses: NodeStatuses {
                by_node: vec![],
                absent: Some(Status::unresolvable("waiting")),
            },
            ..Default::default()
        };
        assert_eq!(
            fit_error_message(5, &d),
            "0/5 nodes are available: waiting."
        );
    }

    #[test]
    fn select_host_takes_the_highest_and_spreads_ties() {
        let mut rng = rand::rng();
        assert_eq!(select_host(&[4, 7, 9], &[10, 30, 20], &mut rng), 7);
        let mut seen = BTreeSet::new();
        for _ in 0..200 {
            seen.insert(select_host(&[1, 2, 3], &[5, 5, 1], &mut rng));
        }
        assert_eq!(seen, BTreeSet::from([1, 2]));
    }
}
