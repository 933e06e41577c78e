//! NodeAffinity: the pod's `nodeSelector` and required node affinity must match the node
//! (Filter), preferred node affinity terms add their weights (Score), and the plugin's
//! `addedAffinity` args apply to every pod. Mirrors
//! `pkg/scheduler/framework/plugins/nodeaffinity` (and component-helpers' `nodeaffinity`)
//! of Kubernetes v1.32.
//!
//! Selector semantics: terms are ORed, the requirements of a term ANDed; a term with neither
//! `matchExpressions` nor `matchFields` matches nothing; `matchFields` only knows
//! `metadata.name` and is ignored for a node without a name. A pod's term that does not parse
//! matches nothing (Kubernetes ignores such errors for backwards compatibility), while the
//! args' terms must parse.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use capstan_api::selector::validation::{
    aggregate, go_quote, label_value_errors, qualified_name_errors, BadValue, FieldError,
};
use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm,
};
use serde::Deserialize;
use serde_json::Value;

use crate::framework::{
    ClusterEvent, CycleState, FilterPlugin, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE,
};
use crate::plugins::parse_args;
use crate::plugins::taint_toleration::default_normalize_score;
use crate::snapshot::Snapshot;
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "NodeAffinity";

/// CycleState keys (PreFilter and PreScore keep separate data).
const PRE_FILTER_KEY: &str = "PreFilterNodeAffinity";
const PRE_SCORE_KEY: &str = "PreScoreNodeAffinity";

pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

const OBJECT_NAME_FIELD: &str = "metadata.name";

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();

#[derive(Debug, Clone)]
enum LabelOp {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

#[derive(Debug, Clone)]
struct LabelReq {
    key: String,
    op: LabelOp,
}

impl LabelReq {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let have = labels.get(&self.key);
        match &self.op {
            LabelOp::In(vals) => have.is_some_and(|v| vals.contains(v)),
            LabelOp::NotIn(vals) => have.is_none_or(|v| !vals.contains(v)),
            LabelOp::Exists => have.is_some(),
            LabelOp::DoesNotExist => have.is_none(),
            LabelOp::Gt(n) => have
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v > *n),
            LabelOp::Lt(n) => have
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < *n),
        }
    }
}

/// A `matchFields` requirement: the field equals (`In`) or differs from (`NotIn`) the value.
#[derive(Debug, Clone)]
struct FieldReq {
    key: String,
    value: String,
    equal: bool,
}

impl FieldReq {
    fn matches(&self, node_name: &str) -> bool {
        let have = if self.key == OBJECT_NAME_FIELD {
            node_name
        } else {
            ""
        };
        (have == self.value) == self.equal
    }
}

/// A parsed, non-empty node selector term.
#[derive(Debug, Clone, Default)]
struct Term {
    /// `matchExpressions`, when given.
    labels: Option<Vec<LabelReq>>,
    /// `matchFields`, when given.
    fields: Option<Vec<FieldReq>>,
    /// Parse errors (field errors as text); a term with errors matches nothing.
    errors: Vec<String>,
}

impl Term {
    fn matches(&self, labels: &BTreeMap<String, String>, node_name: &str) -> bool {
        if !self.errors.is_empty() {
            return false;
        }
        if let Some(reqs) = &self.labels {
            if !reqs.iter().all(|r| r.matches(labels)) {
                return false;
            }
        }
        if let Some(reqs) = &self.fields {
            if !node_name.is_empty() && !reqs.iter().all(|r| r.matches(node_name)) {
                return false;
            }
        }
        true
    }
}

fn child(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn is_empty_term(t: &NodeSelectorTerm) -> bool {
    t.match_expressions.as_ref().is_none_or(Vec::is_empty)
        && t.match_fields.as_ref().is_none_or(Vec::is_empty)
}

fn not_supported(path: &str, value: &str, supported: &[&str]) -> String {
    let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
    format!(
        "{path}: Unsupported value: {}: supported values: {}",
        go_quote(value),
        quoted.join(", ")
    )
}

fn strs(values: Option<&Vec<String>>) -> BadValue {
    BadValue::Strs(values.cloned())
}

/// Parse one `matchExpressions` requirement as `labels.NewRequirement` does, reporting
/// problems as field errors under `path`.
fn parse_label_req(
    r: &NodeSelectorRequirement,
    path: &str,
    errors: &mut Vec<String>,
) -> Option<LabelReq> {
    const OPS: &[&str] = &["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];
    if !OPS.contains(&r.operator.as_str()) {
        errors.push(not_supported(&child(path, "operator"), &r.operator, OPS));
        return None;
    }
    let before = errors.len();
    let key_errs = qualified_name_errors(&r.key);
    if !key_errs.is_empty() {
        errors.push(
            FieldError::invalid(
                child(path, "key"),
                BadValue::Str(r.key.clone()),
                key_errs.join("; "),
            )
            .to_string(),
        );
    }
    let values: &[String] = r.values.as_deref().unwrap_or(&[]);
    let values_path = child(path, "values");
    let mut number = None;
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => errors.push(
            FieldError::invalid(
                &values_path,
                strs(r.values.as_ref()),
                "for 'in', 'notin' operators, values set can't be empty",
            )
            .to_string(),
        ),
        "Exists" | "DoesNotExist" if !values.is_empty() => errors.push(
            FieldError::invalid(
                &values_path,
                strs(r.values.as_ref()),
                "values set must be empty for exists and does not exist",
            )
            .to_string(),
        ),
        "Gt" | "Lt" => {
            if values.len() != 1 {
                errors.push(
                    FieldError::invalid(
                        &values_path,
                        strs(r.values.as_ref()),
                        "for 'Gt', 'Lt' operators, exactly one value is required",
                    )
                    .to_string(),
                );
            }
            for (i, v) in values.iter().enumerate() {
                match v.parse::<i64>() {
                    Ok(n) => number = Some(n),
                    Err(_) => errors.push(
                        FieldError::invalid(
                            format!("{values_path}[{i}]"),
                            BadValue::Str(v.clone()),
                            "for 'Gt', 'Lt' operators, the value must be an integer",
                        )
                        .to_string(),
                    ),
                }
            }
        }
        _ => {}
    }
    for (i, v) in values.iter().enumerate() {
        let errs = label_value_errors(v);
        if !errs.is_empty() {
            errors.push(
                FieldError::invalid(
                    format!("{values_path}[{i}][{}]", r.key),
                    BadValue::Str(v.clone()),
                    errs.join("; "),
                )
                .to_string(),
            );
        }
    }
    if errors.len() > before {
        return None;
    }
    let op = match r.operator.as_str() {
        "In" => LabelOp::In(values.to_vec()),
        "NotIn" => LabelOp::NotIn(values.to_vec()),
        "Exists" => LabelOp::Exists,
        "DoesNotExist" => LabelOp::DoesNotExist,
        "Gt" => LabelOp::Gt(number?),
        _ => LabelOp::Lt(number?),
    };
    Some(LabelReq {
        key: r.key.clone(),
        op,
    })
}

fn parse_field_req(
    r: &NodeSelectorRequirement,
    path: &str,
    errors: &mut Vec<String>,
) -> Option<FieldReq> {
    let equal = match r.operator.as_str() {
        "In" => true,
        "NotIn" => false,
        other => {
            errors.push(not_supported(
                &child(path, "operator"),
                other,
                &["In", "NotIn"],
            ));
            return None;
        }
    };
    match r.values.as_deref() {
        Some([v]) => Some(FieldReq {
            key: r.key.clone(),
            value: v.clone(),
            equal,
        }),
        _ => {
            errors.push(
                FieldError::invalid(
                    child(path, "values"),
                    strs(r.values.as_ref()),
                    "must have one element",
                )
                .to_string(),
            );
            None
        }
    }
}

/// Parse a non-empty term; errors are kept in the term.
fn parse_term(t: &NodeSelectorTerm, path: &str) -> Term {
    let mut term = Term::default();
    if let Some(exprs) = t.match_expressions.as_ref().filter(|e| !e.is_empty()) {
        let p = child(path, "matchExpressions");
        let reqs: Vec<LabelReq> = exprs
            .iter()
            .enumerate()
            .filter_map(|(i, r)| parse_label_req(r, &format!("{p}[{i}]"), &mut term.errors))
            .collect();
        term.labels = Some(reqs);
    }
    if let Some(fields) = t.match_fields.as_ref().filter(|e| !e.is_empty()) {
        let p = child(path, "matchFields");
        let reqs: Vec<FieldReq> = fields
            .iter()
            .enumerate()
            .filter_map(|(i, r)| parse_field_req(r, &format!("{p}[{i}]"), &mut term.errors))
            .collect();
        term.fields = Some(reqs);
    }
    term
}

/// The non-empty terms of a node selector (`NewLazyErrorNodeSelector`), errors kept per term.
fn parse_node_selector(ns: &NodeSelector, path: &str) -> Vec<Term> {
    let p = child(path, "nodeSelectorTerms");
    ns.node_selector_terms
        .iter()
        .enumerate()
        .filter(|(_, t)| !is_empty_term(t))
        .map(|(i, t)| parse_term(t, &format!("{p}[{i}]")))
        .collect()
}

fn term_errors(terms: &[Term]) -> Vec<String> {
    terms
        .iter()
        .flat_map(|t| t.errors.iter().cloned())
        .collect()
}

/// A preferred term with its weight.
#[derive(Debug, Clone)]
struct WeightedTerm {
    term: Term,
    weight: i64,
}

/// Parse preferred terms (`NewPreferredSchedulingTerms`): zero-weight and empty terms are
/// dropped; any parse error fails the whole list (with every field error).
fn parse_preferred(
    terms: &[PreferredSchedulingTerm],
    path: &str,
) -> Result<Vec<WeightedTerm>, Vec<String>> {
    let mut errors = Vec::new();
    let mut out = Vec::new();
    for (i, t) in terms.iter().enumerate() {
        if t.weight == 0 || is_empty_term(&t.preference) {
            continue;
        }
        let term = parse_term(&t.preference, &format!("{path}[{i}]"));
        if term.errors.is_empty() {
            out.push(WeightedTerm {
                term,
                weight: i64::from(t.weight),
            });
        } else {
            errors.extend(term.errors);
        }
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(errors)
    }
}

fn preferred_score(terms: &[WeightedTerm], labels: &BTreeMap<String, String>, name: &str) -> i64 {
    terms
        .iter()
        .filter(|t| t.term.matches(labels, name))
        .map(|t| t.weight)
        .sum()
}

fn node_labels(node: &Node) -> &BTreeMap<String, String> {
    node.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or("")
}

/// A pod's `nodeSelector` and required node affinity, parsed once
/// (`nodeaffinity.GetRequiredNodeAffinity`).
#[derive(Debug, Clone, Default)]
pub struct RequiredNodeAffinity {
    node_selector: Vec<(String, String)>,
    /// None when the pod has no required node affinity.
    terms: Option<Vec<Term>>,
}

impl RequiredNodeAffinity {
    pub fn from_pod(pod: &PodInfo) -> RequiredNodeAffinity {
        let spec = pod.pod().spec.as_ref();
        let node_selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        let terms = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|ns| parse_node_selector(ns, ""));
        RequiredNodeAffinity {
            node_selector,
            terms,
        }
    }

    /// Whether a node with these labels and name matches. Terms that failed to parse match
    /// nothing; `Err` when nothing matched and some term failed to parse (Kubernetes' lazy
    /// parse errors).
    fn match_parts(&self, labels: &BTreeMap<String, String>, name: &str) -> Result<bool, ()> {
        if !self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            return Ok(false);
        }
        let Some(terms) = &self.terms else {
            return Ok(true);
        };
        if terms.iter().any(|t| t.matches(labels, name)) {
            return Ok(true);
        }
        if terms.iter().any(|t| !t.errors.is_empty()) {
            Err(())
        } else {
            Ok(false)
        }
    }

    /// No `nodeSelector` and no required node affinity: every node matches.
    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.terms.is_none()
    }

    pub fn matches(&self, node: &NodeInfo) -> bool {
        self.match_parts(node.labels(), node.name())
            .unwrap_or(false)
    }

    pub fn matches_node(&self, node: &Node) -> bool {
        self.match_parts(node_labels(node), node_name(node))
            .unwrap_or(false)
    }
}

/// Whether the pod's `nodeSelector` and required node affinity match the node (without the
/// plugin's `addedAffinity`), for other plugins. Parses the pod on every call: callers
/// filtering many nodes should keep a [`RequiredNodeAffinity`] instead.
pub fn required_node_affinity_matches(pod: &PodInfo, node: &NodeInfo) -> bool {
    RequiredNodeAffinity::from_pod(pod).matches(node)
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct NodeAffinityArgs {
    #[serde(default)]
    added_affinity: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

pub struct NodeAffinity {
    /// The args' required terms (None: no added requirement).
    added_required: Option<Vec<Term>>,
    added_preferred: Vec<WeightedTerm>,
}

pub fn new(args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(NodeAffinity::from_args(args)?))
}

#[derive(Clone)]
struct PreFilterState(Arc<RequiredNodeAffinity>);

#[derive(Clone)]
struct PreScoreState(Arc<Vec<WeightedTerm>>);

fn pod_preferred(pod: &PodInfo) -> Option<&Vec<PreferredSchedulingTerm>> {
    pod.pod()
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        })
}

impl NodeAffinity {
    /// Build from `NodeAffinityArgs`; `addedAffinity` must parse (`ValidateNodeAffinityArgs`).
    pub fn from_args(args: &Value) -> Result<NodeAffinity, String> {
        let args: NodeAffinityArgs = parse_args(args)?;
        let mut plugin = NodeAffinity {
            added_required: None,
            added_preferred: Vec::new(),
        };
        let Some(added) = args.added_affinity else {
            return Ok(plugin);
        };
        let mut errors = Vec::new();
        if let Some(ns) = &added.required_during_scheduling_ignored_during_execution {
            let terms = parse_node_selector(
                ns,
                "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution",
            );
            errors.extend(term_errors(&terms));
            plugin.added_required = Some(terms);
        }
        if let Some(pref) = added
            .preferred_during_scheduling_ignored_during_execution
            .as_ref()
            .filter(|p| !p.is_empty())
        {
            match parse_preferred(
                pref,
                "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution",
            ) {
                Ok(t) => plugin.added_preferred = t,
                Err(e) => errors.extend(e),
            }
        }
        if errors.is_empty() {
            Ok(plugin)
        } else {
            Err(aggregate(&errors))
        }
    }

    fn added_required_matches(&self, labels: &BTreeMap<String, String>, name: &str) -> bool {
        self.added_required
            .as_ref()
            .is_none_or(|terms| terms.iter().any(|t| t.matches(labels, name)))
    }

    /// QueueingHint for a node added (`old` None) or updated: retry when the (new) node
    /// matches the added affinity and the pod's required affinity and, on an update, did not
    /// match the pod's affinity before.
    pub fn node_change_hint(&self, pod: &PodInfo, old: Option<&Node>, new: &Node) -> bool {
        if !self.added_required_matches(node_labels(new), node_name(new)) {
            return false;
        }
        let required = RequiredNodeAffinity::from_pod(pod);
        let Ok(matched) = required.match_parts(node_labels(new), node_name(new)) else {
            return true;
        };
        if !matched {
            return false;
        }
        let Some(old) = old else {
            return true;
        };
        match required.match_parts(node_labels(old), node_name(old)) {
            Ok(was) => !was,
            Err(()) => true,
        }
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::NodeAdd, ClusterEvent::NodeUpdateLabel]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let spec = pod.pod().spec.as_ref();
        let required = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        let has_selector = spec.is_some_and(|s| s.node_selector.is_some());
        if required.is_none() && self.added_required.is_none() && !has_selector {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(
            PRE_FILTER_KEY,
            PreFilterState(Arc::new(RequiredNodeAffinity::from_pod(pod))),
        );
        let Some(required) = required else {
            return (PreFilterResult::default(), Status::success());
        };
        // Narrow to the nodes named by `metadata.name In` field requirements, when every term
        // names some.
        let mut names: Option<BTreeSet<String>> = None;
        for t in &required.node_selector_terms {
            let mut term_names: Option<BTreeSet<String>> = None;
            for r in t.match_fields.iter().flatten() {
                if r.key == OBJECT_NAME_FIELD && r.operator == "In" {
                    let s: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                    term_names = Some(match term_names {
                        None => s,
                        Some(prev) => prev.intersection(&s).cloned().collect(),
                    });
                }
            }
            let Some(term_names) = term_names else {
                return (PreFilterResult::default(), Status::success());
            };
            names.get_or_insert_with(BTreeSet::new).extend(term_names);
        }
        match names {
            Some(n) if n.is_empty() => (
                PreFilterResult::default(),
                Status::unresolvable(ERR_REASON_CONFLICT),
            ),
            Some(n) => (
                PreFilterResult {
                    node_names: Some(n),
                },
                Status::success(),
            ),
            None => (PreFilterResult::default(), Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !self.added_required_matches(node.labels(), node.name()) {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        let matched = match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Some(s) => s.0.matches(node),
            // PreFilter did not run: parse here.
            None => required_node_affinity_matches(pod, node),
        };
        if matched {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_POD)
        }
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[&NodeInfo],
        _snapshot: &Snapshot,
    ) -> Status {
        let terms = match pod_preferred(pod).map(|p| parse_preferred(p, "")) {
            None => Vec::new(),
            Some(Ok(t)) => t,
            Some(Err(e)) => return Status::error(aggregate(&e)),
        };
        if terms.is_empty() && self.added_preferred.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState(Arc::new(terms)));
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let (labels, name) = (node.labels(), node.name());
        let mut total = preferred_score(&self.added_preferred, labels, name);
        match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(s) => total += preferred_score(&s.0, labels, name),
            // PreScore did not run: parse here.
            None => {
                if let Some(p) = pod_preferred(pod) {
                    let terms = parse_preferred(p, "").map_err(|e| Status::error(aggregate(&e)))?;
                    total += preferred_score(&terms, labels, name);
                }
            }
        }
        Ok(total)
    }
    fn has_normalize(&self) -> bool {
        true
    }
    fn normalize(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [NodeScore]) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::Code;
    use crate::snapshot::testing::node;
    use k8s_openapi::api::core::v1::Pod;
    use serde_json::json;

    type Labels = &'static [(&'static str, &'static str)];
    type NodeDesc = (&'static str, Labels);
    type ScoreCase = (&'static str, Value, Value, Vec<NodeDesc>, Vec<i64>, bool);

    fn pod(spec: Value) -> PodInfo {
        let mut spec = spec;
        spec["containers"] = json!([]);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "default", "uid": "uid-p"},
            "spec": spec,
        }))
        .expect("pod");
        PodInfo::new(pod)
    }

    /// A pod with required node affinity made of these terms.
    fn required(terms: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }}})
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> Value {
        if values.is_empty() {
            json!({"key": key, "operator": op})
        } else {
            json!({"key": key, "operator": op, "values": values})
        }
    }

    fn name_in(names: &[&str]) -> Value {
        json!({"key": "metadata.name", "operator": "In", "values": names})
    }

    fn node_info(name: &str, labels: &[(&str, &str)]) -> NodeInfo {
        NodeInfo::new(node(name, &[], labels))
    }

    fn added_name_in_node2() -> Value {
        json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [name_in(&["node2"])]}]
        }}})
    }

    struct FilterCase {
        name: &'static str,
        spec: Value,
        labels: &'static [(&'static str, &'static str)],
        node_name: &'static str,
        args: Value,
        run_pre_filter: bool,
        /// PreFilter: None for success, Some(code, message).
        want_pre_filter: Option<(Code, &'static str)>,
        want_names: Option<&'static [&'static str]>,
        /// Filter: None for success, Some(reason) for UnschedulableAndUnresolvable.
        want_filter: Option<&'static str>,
    }

    fn case(
        name: &'static str,
        spec: Value,
        labels: &'static [(&'static str, &'static str)],
    ) -> FilterCase {
        FilterCase {
            name,
            spec,
            labels,
            node_name: "",
            args: Value::Null,
            run_pre_filter: true,
            want_pre_filter: None,
            want_names: None,
            want_filter: None,
        }
    }

    #[test]
    fn filter_matches_node_selector_and_required_affinity() {
        let foo_bar: &[(&str, &str)] = &[("foo", "bar")];
        let cases = vec![
            FilterCase {
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "missing labels",
                    json!({"nodeSelector": {"foo": "bar"}}),
                    &[],
                )
            },
            case(
                "same labels",
                json!({"nodeSelector": {"foo": "bar"}}),
                foo_bar,
            ),
            case(
                "node labels are superset",
                json!({"nodeSelector": {"foo": "bar"}}),
                &[("foo", "bar"), ("baz", "blah")],
            ),
            FilterCase {
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "node labels are subset",
                    json!({"nodeSelector": {"foo": "bar", "baz": "blah"}}),
                    foo_bar,
                )
            },
            case(
                "In operator that matches the existing node",
                required(json!([{"matchExpressions": [expr("foo", "In", &["bar", "value2"])]}])),
                foo_bar,
            ),
            case(
                "Gt operator that matches the existing node",
                required(json!([{"matchExpressions": [expr("kernel-version", "Gt", &["0204"])]}])),
                &[("kernel-version", "0206")],
            ),
            case(
                "NotIn operator that matches the existing node",
                required(
                    json!([{"matchExpressions": [expr("mem-type", "NotIn", &["DDR", "DDR2"])]}]),
                ),
                &[("mem-type", "DDR3")],
            ),
            case(
                "Exists operator that matches the existing node",
                required(json!([{"matchExpressions": [expr("GPU", "Exists", &[])]}])),
                &[("GPU", "NVIDIA-GRID-K1")],
            ),
            FilterCase {
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "affinity that doesn't match the node's labels",
                    required(
                        json!([{"matchExpressions": [expr("foo", "In", &["value1", "value2"])]}]),
                    ),
                    foo_bar,
                )
            },
            FilterCase {
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "empty matchExpressions match nothing",
                    required(json!([{"matchExpressions": []}])),
                    foo_bar,
                )
            },
            FilterCase {
                want_pre_filter: Some((Code::Skip, "")),
                ..case("no affinity", json!({}), foo_bar)
            },
            FilterCase {
                want_pre_filter: Some((Code::Skip, "")),
                ..case(
                    "affinity with nil required node selector",
                    json!({"affinity": {"nodeAffinity": {}}}),
                    foo_bar,
                )
            },
            case(
                "multiple matchExpressions ANDed that match",
                required(json!([{"matchExpressions": [
                    expr("GPU", "Exists", &[]),
                    expr("GPU", "NotIn", &["AMD", "INTER"]),
                ]}])),
                &[("GPU", "NVIDIA-GRID-K1")],
            ),
            FilterCase {
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "multiple matchExpressions ANDed that don't match",
                    required(json!([{"matchExpressions": [
                        expr("GPU", "Exists", &[]),
                        expr("GPU", "In", &["AMD", "INTER"]),
                    ]}])),
                    &[("GPU", "NVIDIA-GRID-K1")],
                )
            },
            case(
                "multiple terms ORed, one matches",
                required(json!([
                    {"matchExpressions": [expr("foo", "In", &["bar", "value2"])]},
                    {"matchExpressions": [expr("diffkey", "In", &["wrong", "value2"])]},
                ])),
                foo_bar,
            ),
            case(
                "affinity and nodeSelector both satisfied",
                {
                    let mut s =
                        required(json!([{"matchExpressions": [expr("foo", "Exists", &[])]}]));
                    s["nodeSelector"] = json!({"foo": "bar"});
                    s
                },
                foo_bar,
            ),
            FilterCase {
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "affinity matches but nodeSelector doesn't",
                    {
                        let mut s =
                            required(json!([{"matchExpressions": [expr("foo", "Exists", &[])]}]));
                        s["nodeSelector"] = json!({"foo": "bar"});
                        s
                    },
                    &[("foo", "barrrrrr")],
                )
            },
            FilterCase {
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "invalid value in an affinity term",
                    required(json!([{"matchExpressions": [
                        expr("foo", "NotIn", &["invalid value: ___@#$%^"])
                    ]}])),
                    foo_bar,
                )
            },
            FilterCase {
                node_name: "node1",
                want_names: Some(&["node1"]),
                ..case(
                    "matchFields In that matches the node",
                    required(json!([{"matchFields": [name_in(&["node1"])]}])),
                    &[],
                )
            },
            FilterCase {
                node_name: "node2",
                want_names: Some(&["node1"]),
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "matchFields In that does not match the node",
                    required(json!([{"matchFields": [name_in(&["node1"])]}])),
                    &[],
                )
            },
            FilterCase {
                node_name: "node2",
                ..case(
                    "two terms: matchFields doesn't match but matchExpressions does",
                    required(json!([
                        {"matchFields": [name_in(&["node1"]), name_in(&["node2"])]},
                        {"matchExpressions": [expr("foo", "In", &["bar"])]},
                    ])),
                    foo_bar,
                )
            },
            FilterCase {
                node_name: "node2",
                want_names: Some(&["node1"]),
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "one term: matchFields doesn't match but matchExpressions does",
                    required(json!([{
                        "matchFields": [name_in(&["node1"])],
                        "matchExpressions": [expr("foo", "In", &["bar"])],
                    }])),
                    foo_bar,
                )
            },
            FilterCase {
                node_name: "node1",
                want_names: Some(&["node1"]),
                ..case(
                    "one term: both matchFields and matchExpressions match",
                    required(json!([{
                        "matchFields": [name_in(&["node1"])],
                        "matchExpressions": [expr("foo", "In", &["bar"])],
                    }])),
                    foo_bar,
                )
            },
            FilterCase {
                node_name: "node2",
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "two terms: neither matchFields nor matchExpressions match",
                    required(json!([
                        {"matchFields": [name_in(&["node1"])]},
                        {"matchExpressions": [expr("foo", "In", &["not-match-to-bar"])]},
                    ])),
                    foo_bar,
                )
            },
            FilterCase {
                node_name: "node2",
                want_names: Some(&["node1", "node2"]),
                ..case(
                    "two terms of node.Name affinity",
                    required(json!([
                        {"matchFields": [name_in(&["node1"])]},
                        {"matchFields": [name_in(&["node2"])]},
                    ])),
                    &[],
                )
            },
            FilterCase {
                node_name: "node2",
                want_pre_filter: Some((Code::UnschedulableAndUnresolvable, ERR_REASON_CONFLICT)),
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "two conflicting matchFields requirements",
                    required(json!([{"matchFields": [name_in(&["node1"]), name_in(&["node2"])]}])),
                    foo_bar,
                )
            },
            FilterCase {
                node_name: "node2",
                args: added_name_in_node2(),
                ..case(
                    "matches added affinity and the pod's node affinity",
                    required(json!([{"matchExpressions": [expr("zone", "In", &["foo"])]}])),
                    &[("zone", "foo")],
                )
            },
            FilterCase {
                node_name: "node2",
                args: added_name_in_node2(),
                want_filter: Some(ERR_REASON_POD),
                ..case(
                    "matches added affinity but not the pod's node affinity",
                    required(json!([{"matchExpressions": [expr("zone", "In", &["bar"])]}])),
                    &[("zone", "foo")],
                )
            },
            FilterCase {
                node_name: "node2",
                args: json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [expr("zone", "In", &["bar"])]}]
                }}}),
                want_filter: Some(ERR_REASON_ENFORCED),
                ..case(
                    "doesn't match added affinity",
                    json!({}),
                    &[("zone", "foo")],
                )
            },
            FilterCase {
                run_pre_filter: false,
                ..case(
                    "node selector matches even if PreFilter is not called",
                    json!({"nodeSelector": {"foo": "bar"}}),
                    &[("foo", "bar"), ("baz", "blah")],
                )
            },
            FilterCase {
                run_pre_filter: false,
                ..case(
                    "node affinity matches even if PreFilter is not called",
                    required(json!([{"matchExpressions": [
                        expr("GPU", "Exists", &[]),
                        expr("GPU", "NotIn", &["AMD", "INTER"]),
                    ]}])),
                    &[("GPU", "NVIDIA-GRID-K1")],
                )
            },
        ];
        for c in cases {
            let plugin = NodeAffinity::from_args(&c.args).expect("plugin");
            let p = pod(c.spec.clone());
            let n = node_info(c.node_name, c.labels);
            let mut state = CycleState::new();
            if c.run_pre_filter {
                let (result, status) = plugin.pre_filter(&mut state, &p, &Snapshot::new());
                match c.want_pre_filter {
                    None => assert!(status.is_success(), "{}: {status:?}", c.name),
                    Some((code, msg)) => {
                        assert_eq!(status.code, code, "{}", c.name);
                        assert_eq!(status.message(), msg, "{}", c.name);
                    }
                }
                let want: Option<BTreeSet<String>> = c
                    .want_names
                    .map(|n| n.iter().map(|s| s.to_string()).collect());
                assert_eq!(result.node_names, want, "{}", c.name);
                if status.code == Code::Skip {
                    continue;
                }
            }
            let got = plugin.filter(&state, &p, &n);
            match c.want_filter {
                None => assert!(got.is_success(), "{}: {got:?}", c.name),
                Some(msg) => {
                    assert_eq!(got.code, Code::UnschedulableAndUnresolvable, "{}", c.name);
                    assert_eq!(got.message(), msg, "{}", c.name);
                }
            }
        }
    }

    #[test]
    fn selector_edge_cases() {
        let cases: Vec<(&str, Value, &str, Labels, bool)> = vec![
            (
                "Lt compares integers",
                json!([{"matchExpressions": [expr("v", "Lt", &["10"])]}]),
                "n",
                &[("v", "9")],
                true,
            ),
            (
                "Gt with a non-integer label does not match",
                json!([{"matchExpressions": [expr("v", "Gt", &["1"])]}]),
                "n",
                &[("v", "x")],
                false,
            ),
            (
                "Gt with a missing label does not match",
                json!([{"matchExpressions": [expr("v", "Gt", &["1"])]}]),
                "n",
                &[],
                false,
            ),
            (
                "DoesNotExist",
                json!([{"matchExpressions": [expr("v", "DoesNotExist", &[])]}]),
                "n",
                &[("w", "1")],
                true,
            ),
            (
                "NotIn matches a missing label",
                json!([{"matchExpressions": [expr("v", "NotIn", &["a"])]}]),
                "n",
                &[],
                true,
            ),
            (
                "matchFields NotIn",
                json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n"]}]}]),
                "n",
                &[],
                false,
            ),
            (
                "matchFields are ignored for a node without a name",
                json!([{"matchFields": [name_in(&["other"])]}]),
                "",
                &[],
                true,
            ),
            (
                "matchFields with two values does not parse",
                json!([{"matchFields": [name_in(&["n", "m"])]}]),
                "n",
                &[],
                false,
            ),
            (
                "unknown operator does not parse",
                json!([{"matchExpressions": [expr("v", "Foo", &["a"])]}]),
                "n",
                &[("v", "a")],
                false,
            ),
            ("no terms matches nothing", json!([]), "n", &[], false),
            (
                "an empty term is skipped, another matches",
                json!([{}, {"matchExpressions": [expr("v", "Exists", &[])]}]),
                "n",
                &[("v", "")],
                true,
            ),
        ];
        for (name, terms, node_name, labels, want) in cases {
            let p = pod(required(terms));
            let n = node_info(node_name, labels);
            assert_eq!(required_node_affinity_matches(&p, &n), want, "{name}");
            assert_eq!(
                RequiredNodeAffinity::from_pod(&p).matches_node(&n.node),
                want,
                "{name}"
            );
        }
    }

    fn preferred(terms: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}})
    }

    fn score_all(args: Value, spec: Value, nodes: &[NodeDesc], run_pre_score: bool) -> Vec<i64> {
        let plugin = NodeAffinity::from_args(&args).expect("plugin");
        let p = pod(spec);
        let infos: Vec<NodeInfo> = nodes.iter().map(|(n, l)| node_info(n, l)).collect();
        let refs: Vec<&NodeInfo> = infos.iter().collect();
        let mut state = CycleState::new();
        if run_pre_score {
            let s = plugin.pre_score(&mut state, &p, &refs, &Snapshot::new());
            assert!(s.is_success() || s.code == Code::Skip, "{s:?}");
        }
        let mut scores: Vec<NodeScore> = infos
            .iter()
            .enumerate()
            .map(|(i, n)| NodeScore {
                node: i,
                score: plugin.score(&state, &p, n).expect("score"),
            })
            .collect();
        assert!(plugin.normalize(&state, &p, &mut scores).is_success());
        scores.iter().map(|s| s.score).collect()
    }

    #[test]
    fn preferred_terms_score_by_summed_weights() {
        let label1: Labels = &[("foo", "bar")];
        let label2: Labels = &[("key", "value")];
        let label3: Labels = &[("az", "az1")];
        let label4: Labels = &[("abc", "az11"), ("def", "az22")];
        let label5: Labels = &[("foo", "bar"), ("key", "value"), ("az", "az1")];
        let affinity1 = json!([{"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}}]);
        let affinity2 = json!([
            {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
            {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}},
            {"weight": 5, "preference": {"matchExpressions": [
                expr("foo", "In", &["bar"]),
                expr("key", "In", &["value"]),
                expr("az", "In", &["az1"]),
            ]}},
        ]);
        let null = Value::Null;
        let cases: Vec<ScoreCase> = vec![
            (
                "no node affinity: all nodes score the same",
                null.clone(),
                json!({}),
                vec![("node1", label1), ("node2", label2), ("node3", label3)],
                vec![0, 0, 0],
                true,
            ),
            (
                "no node matches the preferred terms",
                null.clone(),
                preferred(affinity1.clone()),
                vec![("node1", label4), ("node2", label2), ("node3", label3)],
                vec![0, 0, 0],
                true,
            ),
            (
                "only node1 matches",
                null.clone(),
                preferred(affinity1.clone()),
                vec![("node1", label1), ("node2", label2), ("node3", label3)],
                vec![100, 0, 0],
                true,
            ),
            (
                "all nodes match with different weights",
                null.clone(),
                preferred(affinity2.clone()),
                vec![("node1", label1), ("node5", label5), ("node2", label2)],
                vec![18, 100, 36],
                true,
            ),
            (
                "added affinity",
                json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": affinity1.clone()}}),
                json!({}),
                vec![("node1", label1), ("node2", label2)],
                vec![100, 0],
                true,
            ),
            (
                "added affinity and the pod's affinity",
                json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}}
                ]}}),
                preferred(affinity1.clone()),
                vec![("node1", label1), ("node2", label2), ("node3", label5)],
                vec![40, 60, 100],
                true,
            ),
            (
                "scores correctly even if PreScore is not called",
                null.clone(),
                preferred(affinity2.clone()),
                vec![("node1", label1), ("node5", label5), ("node2", label2)],
                vec![18, 100, 36],
                false,
            ),
        ];
        for (name, args, spec, nodes, want, run) in cases {
            assert_eq!(score_all(args, spec, &nodes, run), want, "{name}");
        }
    }

    #[test]
    fn pre_score_skips_without_preferred_terms_and_fails_on_bad_terms() {
        let plugin = NodeAffinity::from_args(&Value::Null).expect("plugin");
        let mut state = CycleState::new();
        let s = plugin.pre_score(&mut state, &pod(json!({})), &[], &Snapshot::new());
        assert_eq!(s.code, Code::Skip);
        // Zero-weight terms are ignored.
        let zero = pod(preferred(
            json!([{"weight": 0, "preference": {"matchExpressions": [expr("a", "Exists", &[])]}}]),
        ));
        assert_eq!(
            plugin
                .pre_score(&mut state, &zero, &[], &Snapshot::new())
                .code,
            Code::Skip
        );
        let bad = pod(preferred(
            json!([{"weight": 1, "preference": {"matchExpressions": [expr("a b", "Exists", &[])]}}]),
        ));
        let s = plugin.pre_score(&mut state, &bad, &[], &Snapshot::new());
        assert_eq!(s.code, Code::Error);
        assert!(
            s.message()
                .starts_with("[0].matchExpressions[0].key: Invalid value: \"a b\""),
            "{}",
            s.message()
        );
    }

    #[test]
    fn invalid_added_affinity_is_rejected_naming_the_fields() {
        let args = json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [expr("invalid/label/key", "Exists", &[])]}
            ]},
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchFields": [name_in(&["foo", "bar"])]}}
            ],
        }});
        let err = NodeAffinity::from_args(&args).err().expect("error");
        assert!(err.starts_with('['), "{err}");
        assert!(
            err.contains("addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key: Invalid value: \"invalid/label/key\""),
            "{err}"
        );
        assert!(
            err.contains("addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].matchFields[0].values: Invalid value: []string{\"foo\", \"bar\"}: must have one element"),
            "{err}"
        );
        let err = NodeAffinity::from_args(&json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [expr("k", "Gt", &["x"])]}
            ]}
        }}))
        .err()
        .expect("error");
        assert_eq!(
            err,
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]: Invalid value: \"x\": for 'Gt', 'Lt' operators, the value must be an integer"
        );
        let err = NodeAffinity::from_args(&json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [expr("k", "Has", &[])]}
            ]}
        }}))
        .err()
        .expect("error");
        assert_eq!(
            err,
            "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: Unsupported value: \"Has\": supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\", \"Gt\", \"Lt\""
        );
        assert!(NodeAffinity::from_args(&json!({"bogus": 1})).is_err());
        assert!(NodeAffinity::from_args(&json!({"addedAffinity": null})).is_ok());
    }

    #[test]
    fn node_change_hint_queues_only_when_the_node_starts_matching() {
        let plugin = NodeAffinity::from_args(&Value::Null).expect("plugin");
        let p = pod(required(
            json!([{"matchExpressions": [expr("foo", "In", &["bar"])]}]),
        ));
        let bare = node("n", &[], &[]);
        let foo = node("n", &[], &[("foo", "bar")]);
        let other = node("n", &[], &[("k", "v")]);
        let foo_and_other = node("n", &[], &[("foo", "bar"), ("k", "v")]);
        assert!(!plugin.node_change_hint(&p, None, &bare), "skip on add");
        assert!(plugin.node_change_hint(&p, None, &foo), "queue on add");
        assert!(
            !plugin.node_change_hint(&p, Some(&bare), &bare),
            "unrelated change"
        );
        assert!(
            !plugin.node_change_hint(&p, Some(&bare), &other),
            "unrelated labels"
        );
        assert!(
            !plugin.node_change_hint(&p, Some(&foo), &foo_and_other),
            "already suitable"
        );
        assert!(
            !plugin.node_change_hint(&p, Some(&foo), &other),
            "suitable to unsuitable"
        );
        assert!(
            plugin.node_change_hint(&p, Some(&bare), &foo),
            "becomes schedulable"
        );
        let enforced = NodeAffinity::from_args(&json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [expr("foo", "In", &["bar"])]}
            ]}
        }}))
        .expect("plugin");
        assert!(!enforced.node_change_hint(&p, None, &bare));
        assert!(enforced.node_change_hint(&p, None, &foo));
    }
}
