//! The replica calculator: from the pods a target selects and their usage, the replica count
//! a resource metric asks for (Kubernetes' `ReplicaCalculator`). Pods that are being deleted
//! or failed are ignored; pending pods, and for CPU pods not yet ready or still starting, are
//! "unready"; ready pods without a figure are "missing". A scale up counts unready and missing
//! pods as using nothing, a scale down counts missing pods as using their whole request (or
//! exactly the target), and no change is made when that would flip the direction or when the
//! usage is within the tolerance of the target.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

use capstan_api::validation::quantity;

/// The controller's tuning flags.
#[derive(Debug, Clone, Copy)]
pub struct Tuning {
    /// `--horizontal-pod-autoscaler-tolerance`: no change while |1 − ratio| ≤ this.
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period`.
    pub cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay`.
    pub initial_readiness_delay: Duration,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

/// One pod's usage as the metrics API reported it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PodMetric {
    pub timestamp: Timestamp,
    pub window: Duration,
    /// Milli-units (millicores, or bytes × 1000).
    pub value: i64,
}

/// A PodMetrics item's usage of `resource`: the sum over its containers (or only the one
/// named); None when a container lacks the figure, or there is no container (or not the one
/// named).
pub fn pod_usage(item: &Value, resource: &str, container: Option<&str>) -> Option<PodMetric> {
    let containers = item.get("containers")?.as_array()?;
    let mut sum = 0i64;
    let mut found = false;
    for c in containers {
        if let Some(name) = container {
            if c.get("name").and_then(Value::as_str) != Some(name) {
                continue;
            }
        }
        let q = c.get("usage")?.get(resource)?;
        let q = quantity::parse_value(q)?;
        sum = sum.saturating_add(i64::try_from(q.milli()).unwrap_or(i64::MAX));
        found = true;
    }
    if !found {
        return None;
    }
    let timestamp = item
        .get("timestamp")
        .and_then(Value::as_str)
        .and_then(|t| t.parse().ok())
        .unwrap_or(Timestamp::UNIX_EPOCH);
    let window = item
        .get("window")
        .and_then(Value::as_str)
        .and_then(crate::util::parse_go_duration)
        .unwrap_or_default();
    Some(PodMetric {
        timestamp,
        window,
        value: sum,
    })
}

/// How the selected pods count: (ready with a figure, unready, missing a figure, ignored).
pub fn group_pods(
    tuning: &Tuning,
    pods: &[&Pod],
    metrics: &HashMap<String, PodMetric>,
    resource: &str,
    now: Timestamp,
) -> (usize, HashSet<String>, HashSet<String>, HashSet<String>) {
    let (mut ready, mut unready, mut missing, mut ignored) =
        (0, HashSet::new(), HashSet::new(), HashSet::new());
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.as_ref();
        let phase = status.and_then(|s| s.phase.as_deref()).unwrap_or("");
        if pod.metadata.deletion_timestamp.is_some() || phase == "Failed" {
            ignored.insert(name);
            continue;
        }
        if phase == "Pending" {
            unready.insert(name);
            continue;
        }
        let Some(metric) = metrics.get(&name) else {
            missing.insert(name);
            continue;
        };
        if resource == "cpu" {
            let condition = status
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
            let start = status.and_then(|s| s.start_time.as_ref()).map(|t| t.0);
            let is_unready = match (condition, start) {
                (Some(c), Some(start)) => {
                    let transition = c
                        .last_transition_time
                        .as_ref()
                        .map(|t| t.0)
                        .unwrap_or(Timestamp::UNIX_EPOCH);
                    if add(start, tuning.cpu_initialization_period) > now {
                        // Still starting: unready, or no whole metric window since it
                        // became ready.
                        c.status == "False" || metric.timestamp < add(transition, metric.window)
                    } else {
                        // Unready and never ready since it started.
                        c.status == "False"
                            && add(start, tuning.initial_readiness_delay) > transition
                    }
                }
                _ => true,
            };
            if is_unready {
                unready.insert(name);
                continue;
            }
        }
        ready += 1;
    }
    (ready, unready, missing, ignored)
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    SignedDuration::try_from(d)
        .ok()
        .and_then(|d| t.checked_add(d).ok())
        .unwrap_or(Timestamp::MAX)
}

/// Each pod's request of `resource` in milli-units: the sum over its containers and
/// restartable init containers, or only the container named.
pub fn requests(
    pods: &[&Pod],
    container: Option<&str>,
    resource: &str,
) -> Result<HashMap<String, i64>, String> {
    let mut out = HashMap::with_capacity(pods.len());
    for pod in pods {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let containers = spec.into_iter().flat_map(|s| {
            s.containers.iter().chain(
                s.init_containers
                    .iter()
                    .flatten()
                    .filter(|c| c.restart_policy.as_deref() == Some("Always")),
            )
        });
        let mut request = 0i64;
        let mut found = false;
        for c in containers {
            if container.is_some_and(|n| n != c.name) {
                continue;
            }
            let q = c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
                .and_then(|q| quantity::parse(&q.0))
                .ok_or_else(|| {
                    format!(
                        "missing request for {resource} in container {} of Pod {name}",
                        c.name
                    )
                })?;
            request = request.saturating_add(i64::try_from(q.milli()).unwrap_or(i64::MAX));
            found = true;
            if container.is_some() {
                break;
            }
        }
        if let (Some(c), false) = (container, found) {
            return Err(format!("container {c} not found in Pod {name}"));
        }
        out.insert(name, request);
    }
    Ok(out)
}

/// (usage ratio, utilization in percent of the requests, average raw usage): Kubernetes'
/// `GetResourceUtilizationRatio`. Metrics of pods without a request are left out.
fn utilization_ratio(
    metrics: &HashMap<String, PodMetric>,
    requests: &HashMap<String, i64>,
    target: i32,
) -> Result<(f64, i32, i64), String> {
    let (mut used, mut requested, mut n) = (0i64, 0i64, 0i64);
    for (pod, m) in metrics {
        let Some(r) = requests.get(pod) else {
            continue;
        };
        used = used.saturating_add(m.value);
        requested = requested.saturating_add(*r);
        n += 1;
    }
    if requested == 0 {
        return Err("no metrics returned matched known pods".into());
    }
    let utilization = i32::try_from(used.saturating_mul(100) / requested).unwrap_or(i32::MAX);
    Ok((
        f64::from(utilization) / f64::from(target),
        utilization,
        used / n,
    ))
}

/// (usage ratio, average usage) for a plain target value.
fn usage_ratio(metrics: &HashMap<String, PodMetric>, target: i64) -> (f64, i64) {
    let total: i64 = metrics.values().map(|m| m.value).sum();
    let usage = total / metrics.len().max(1) as i64;
    (usage as f64 / target as f64, usage)
}

/// What a utilization target asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResourceReplicas {
    pub replicas: i32,
    /// Percent of the requests, over the pods counted.
    pub utilization: i32,
    /// Average usage, milli-units.
    pub raw: i64,
}

fn ceil(x: f64) -> i32 {
    let c = x.ceil();
    if c >= f64::from(i32::MAX) {
        i32::MAX
    } else {
        c as i32
    }
}

/// A `Resource`/`ContainerResource` metric with an `averageUtilization` target.
#[allow(clippy::too_many_arguments)]
pub fn resource_replicas(
    tuning: &Tuning,
    pods: &[&Pod],
    mut metrics: HashMap<String, PodMetric>,
    container: Option<&str>,
    current: i32,
    target: i32,
    resource: &str,
    now: Timestamp,
) -> Result<ResourceReplicas, String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let (ready, unready, missing, ignored) = group_pods(tuning, pods, &metrics, resource, now);
    metrics.retain(|p, _| !ignored.contains(p) && !unready.contains(p));
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let requests = requests(pods, container, resource)?;
    let (ratio, utilization, raw) = utilization_ratio(&metrics, &requests, target)?;
    let result = |replicas| ResourceReplicas {
        replicas,
        utilization,
        raw,
    };
    let up_with_unready = !unready.is_empty() && ratio > 1.0;
    if !up_with_unready && missing.is_empty() {
        if (1.0 - ratio).abs() <= tuning.tolerance {
            return Ok(result(current));
        }
        return Ok(result(ceil(ratio * ready as f64)));
    }
    if !missing.is_empty() {
        // A scale down counts a missing pod as using its whole request (or the target, when
        // that is more); a scale up as using nothing.
        let fallback = i64::from(target.max(100));
        for pod in &missing {
            let value = if ratio < 1.0 {
                requests.get(pod).copied().unwrap_or(0) * fallback / 100
            } else if ratio > 1.0 {
                0
            } else {
                continue;
            };
            metrics.insert(pod.clone(), filler(value));
        }
    }
    if up_with_unready {
        for pod in &unready {
            metrics.insert(pod.clone(), filler(0));
        }
    }
    let (new_ratio, _, _) = utilization_ratio(&metrics, &requests, target)?;
    Ok(result(settle(
        tuning,
        current,
        ratio,
        new_ratio,
        metrics.len(),
    )))
}

/// A `Resource` metric with an `averageValue` target (milli-units): (replicas, average usage).
pub fn plain_replicas(
    tuning: &Tuning,
    pods: &[&Pod],
    mut metrics: HashMap<String, PodMetric>,
    current: i32,
    target: i64,
    resource: &str,
    now: Timestamp,
) -> Result<(i32, i64), String> {
    if pods.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    if target <= 0 {
        return Err("the target value must be greater than zero".into());
    }
    let (ready, unready, missing, ignored) = group_pods(tuning, pods, &metrics, resource, now);
    metrics.retain(|p, _| !ignored.contains(p) && !unready.contains(p));
    if metrics.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".into());
    }
    let (ratio, usage) = usage_ratio(&metrics, target);
    let up_with_unready = !unready.is_empty() && ratio > 1.0;
    if !up_with_unready && missing.is_empty() {
        if (1.0 - ratio).abs() <= tuning.tolerance {
            return Ok((current, usage));
        }
        return Ok((ceil(ratio * ready as f64), usage));
    }
    for pod in &missing {
        let value = if ratio < 1.0 {
            target
        } else if ratio > 1.0 {
            0
        } else {
            continue;
        };
        metrics.insert(pod.clone(), filler(value));
    }
    if up_with_unready {
        for pod in &unready {
            metrics.insert(pod.clone(), filler(0));
        }
    }
    let (new_ratio, _) = usage_ratio(&metrics, target);
    Ok((
        settle(tuning, current, ratio, new_ratio, metrics.len()),
        usage,
    ))
}

fn filler(value: i64) -> PodMetric {
    PodMetric {
        timestamp: Timestamp::UNIX_EPOCH,
        window: Duration::ZERO,
        value,
    }
}

/// The count once missing and unready pods are filled in: the current one when the change
/// is within tolerance or the fill-in turned the direction round.
fn settle(tuning: &Tuning, current: i32, ratio: f64, new_ratio: f64, counted: usize) -> i32 {
    if (1.0 - new_ratio).abs() <= tuning.tolerance
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return current;
    }
    let n = ceil(new_ratio * counted as f64);
    if (new_ratio < 1.0 && n > current) || (new_ratio > 1.0 && n < current) {
        return current;
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A running, ready pod (started long ago) requesting `cpu` millicores.
    fn pod(name: &str, cpu: i64) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "d"},
            "spec": {"containers": [{"name": "app", "resources": {"requests": {"cpu": format!("{cpu}m"), "memory": "100Mi"}}}]},
            "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:10Z"}]}
        }))
        .unwrap()
    }

    fn with_phase(mut p: Pod, phase: &str) -> Pod {
        p.status.as_mut().unwrap().phase = Some(phase.into());
        p
    }

    fn unready(mut p: Pod) -> Pod {
        let st = p.status.as_mut().unwrap();
        // Started a minute ago (inside the CPU initialization period) and not ready.
        let start = Timestamp::now() - SignedDuration::from_secs(60);
        st.start_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(start));
        st.conditions.as_mut().unwrap()[0].status = "False".into();
        p
    }

    fn usage(values: &[(&str, i64)]) -> HashMap<String, PodMetric> {
        values
            .iter()
            .map(|(n, v)| {
                (
                    n.to_string(),
                    PodMetric {
                        timestamp: Timestamp::now(),
                        window: Duration::from_secs(10),
                        value: *v,
                    },
                )
            })
            .collect()
    }

    fn run(pods: &[Pod], metrics: &[(&str, i64)], current: i32, target: i32) -> ResourceReplicas {
        let refs: Vec<&Pod> = pods.iter().collect();
        resource_replicas(
            &Tuning::default(),
            &refs,
            usage(metrics),
            None,
            current,
            target,
            "cpu",
            Timestamp::now(),
        )
        .unwrap()
    }

    #[test]
    fn utilization_scales_up_and_down_as_kubernetes_computes() {
        // 1500m of 3000m requested = 50 % against 30 %: ceil(3 × 50/30) = 5.
        let pods = [pod("a", 1000), pod("b", 1000), pod("c", 1000)];
        let r = run(&pods, &[("a", 300), ("b", 500), ("c", 700)], 3, 30);
        assert_eq!(
            r,
            ResourceReplicas {
                replicas: 5,
                utilization: 50,
                raw: 500
            }
        );
        // 1400m of 5000m = 28 % against 50 %: ceil(5 × 0.56) = 3.
        let pods: Vec<Pod> = ["a", "b", "c", "d", "e"]
            .iter()
            .map(|n| pod(n, 1000))
            .collect();
        let r = run(
            &pods,
            &[("a", 100), ("b", 300), ("c", 500), ("d", 250), ("e", 250)],
            5,
            50,
        );
        assert_eq!((r.replicas, r.utilization, r.raw), (3, 28, 280));
    }

    #[test]
    fn a_change_within_the_tolerance_keeps_the_count() {
        let pods = [pod("a", 1000), pod("b", 1000), pod("c", 1000)];
        // 102 % against 100 %: inside 10 %.
        let r = run(&pods, &[("a", 1010), ("b", 1030), ("c", 1020)], 3, 100);
        assert_eq!((r.replicas, r.utilization), (3, 102));
        // 112 %: outside.
        let r = run(&pods, &[("a", 1110), ("b", 1130), ("c", 1120)], 3, 100);
        assert_eq!(r.replicas, 4);
    }

    #[test]
    fn unready_pods_count_as_idle_on_a_scale_up() {
        // Ready pods: 1200m of 2000m = 60 % (ratio 2); with the unready one as 0:
        // 1200 of 3000 = 40 % → ceil(3 × 4/3) = 4.
        let pods = [unready(pod("a", 1000)), pod("b", 1000), pod("c", 1000)];
        let r = run(&pods, &[("a", 300), ("b", 500), ("c", 700)], 3, 30);
        assert_eq!((r.replicas, r.utilization, r.raw), (4, 60, 600));
        // Pending pods are unready too; deleted and failed ones are ignored.
        let mut gone = pod("d", 1000);
        gone.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        let pods = [
            with_phase(pod("a", 1000), "Pending"),
            pod("b", 1000),
            pod("c", 1000),
            gone,
            with_phase(pod("e", 1000), "Failed"),
        ];
        let r = run(
            &pods,
            &[("b", 500), ("c", 700), ("d", 5000), ("e", 5000)],
            3,
            30,
        );
        assert_eq!(r.replicas, 4);
    }

    #[test]
    fn missing_metrics_weigh_against_the_direction() {
        let pods: Vec<Pod> = ["a", "b", "c", "d"].iter().map(|n| pod(n, 1000)).collect();
        // Scale down asked (495/2000 = 24 % vs 50 %), but the two missing pods count as
        // using their whole request: 2495/4000 = 62 % — the direction flips, so no change.
        let r = run(&pods, &[("a", 400), ("b", 95)], 4, 50);
        assert_eq!((r.replicas, r.utilization), (4, 24));
        // Scale up asked (1800/2000 = 90 % vs 30 %); missing pods as idle: 1800/4000 = 45 %
        // → ceil(4 × 1.5) = 6.
        let r = run(&pods, &[("a", 900), ("b", 900)], 4, 30);
        assert_eq!((r.replicas, r.utilization), (6, 90));
    }

    #[test]
    fn no_pods_no_metrics_and_no_requests_are_errors() {
        let t = Tuning::default();
        let now = Timestamp::now();
        let e = resource_replicas(&t, &[], usage(&[]), None, 1, 50, "cpu", now).unwrap_err();
        assert_eq!(
            e,
            "no pods returned by selector while calculating replica count"
        );
        let p = pod("a", 100);
        let e = resource_replicas(&t, &[&p], usage(&[]), None, 1, 50, "cpu", now).unwrap_err();
        assert_eq!(
            e,
            "did not receive metrics for targeted pods (pods might be unready)"
        );
        let e = resource_replicas(
            &t,
            &[&p],
            usage(&[("a", 1)]),
            None,
            1,
            50,
            "ephemeral-storage",
            now,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "missing request for ephemeral-storage in container app of Pod a"
        );
        let e = resource_replicas(
            &t,
            &[&p],
            usage(&[("a", 1)]),
            Some("web"),
            1,
            50,
            "cpu",
            now,
        )
        .unwrap_err();
        assert_eq!(e, "container web not found in Pod a");
    }

    #[test]
    fn an_average_value_target_divides_the_mean_usage() {
        let pods = [pod("a", 1000), pod("b", 1000)];
        let refs: Vec<&Pod> = pods.iter().collect();
        // Mean 600m against 200m: ceil(2 × 3) = 6.
        let (n, avg) = plain_replicas(
            &Tuning::default(),
            &refs,
            usage(&[("a", 500), ("b", 700)]),
            2,
            200,
            "cpu",
            Timestamp::now(),
        )
        .unwrap();
        assert_eq!((n, avg), (6, 600));
    }

    #[test]
    fn pod_metrics_items_sum_their_containers() {
        let item = json!({"timestamp": "2026-01-01T00:00:00Z", "window": "10.5s", "containers": [
            {"name": "app", "usage": {"cpu": "250m", "memory": "1Mi"}},
            {"name": "side", "usage": {"cpu": "50m", "memory": "1Ki"}}]});
        let m = pod_usage(&item, "cpu", None).unwrap();
        assert_eq!((m.value, m.window), (300, Duration::from_millis(10_500)));
        assert_eq!(
            pod_usage(&item, "memory", Some("side")).unwrap().value,
            1_024_000
        );
        assert_eq!(pod_usage(&item, "cpu", Some("other")), None);
        assert_eq!(pod_usage(&item, "gpu", None), None);
    }
}
