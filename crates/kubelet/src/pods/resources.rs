//! Compute resources: quantities, the pod's QoS class, and the CRI Linux resources (CPU
//! shares and CFS quota, memory limit, OOM score adjustment) of a container.

use std::collections::BTreeMap;

use capstan_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

const MIN_SHARES: i64 = 2;
const MAX_SHARES: i64 = 262_144;
const SHARES_PER_CPU: i64 = 1024;
const QUOTA_PERIOD: i64 = 100_000;
const MIN_QUOTA_PERIOD: i64 = 1_000;

const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
const BESTEFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// A parsed quantity: `mantissa * 10^exp10 * 2^exp2`.
/// The exact nano-units of a quantity (capstan-api's parser); None when unparsable.
fn nanos(q: &Quantity) -> Option<i128> {
    capstan_api::validation::quantity::parse(q.0.trim()).map(|q| q.nanos)
}

/// `ceil(nanos / unit)` as an i64, saturating.
fn ceil_to(nanos: i128, unit: i128) -> i64 {
    let v = nanos.div_euclid(unit) + i128::from(nanos.rem_euclid(unit) != 0);
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

/// The value of a quantity rounded up (memory in bytes); None when unparsable.
pub fn value(q: &Quantity) -> Option<i64> {
    nanos(q).map(|n| ceil_to(n, 1_000_000_000))
}

/// The value of a quantity in thousandths rounded up (CPU in millicores).
pub fn milli_value(q: &Quantity) -> Option<i64> {
    nanos(q).map(|n| ceil_to(n, 1_000_000))
}

fn get<'a>(map: &'a Option<BTreeMap<String, Quantity>>, name: &str) -> Option<&'a Quantity> {
    map.as_ref().and_then(|m| m.get(name))
}

/// A container's CPU request and limit (millicores) and memory request and limit (bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_request: Option<i64>,
    pub cpu_limit: Option<i64>,
    pub memory_request: Option<i64>,
    pub memory_limit: Option<i64>,
}

pub fn amounts(c: &Container) -> Amounts {
    let r = c.resources.as_ref();
    let req = r.map(|r| &r.requests).cloned().unwrap_or_default();
    let lim = r.map(|r| &r.limits).cloned().unwrap_or_default();
    Amounts {
        cpu_request: get(&req, "cpu").and_then(milli_value),
        cpu_limit: get(&lim, "cpu").and_then(milli_value),
        memory_request: get(&req, "memory").and_then(value),
        memory_limit: get(&lim, "memory").and_then(value),
    }
}

/// The pod's QoS class: BestEffort (no CPU or memory requests or limits anywhere),
/// Guaranteed (every container limits CPU and memory and requests equal limits), else
/// Burstable.
pub fn qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort";
    };
    let mut requests: BTreeMap<&str, i64> = BTreeMap::new();
    let mut limits: BTreeMap<&str, i64> = BTreeMap::new();
    let mut guaranteed = true;
    let all = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in all {
        let r = c.resources.as_ref();
        for (name, q) in r.and_then(|r| r.requests.as_ref()).into_iter().flatten() {
            if name != "cpu" && name != "memory" {
                continue;
            }
            let v = milli_value(q).unwrap_or(0);
            if v > 0 {
                *requests.entry(name.as_str()).or_default() += v;
            }
        }
        let mut found = (false, false);
        for (name, q) in r.and_then(|r| r.limits.as_ref()).into_iter().flatten() {
            if name != "cpu" && name != "memory" {
                continue;
            }
            let v = milli_value(q).unwrap_or(0);
            if v > 0 {
                *limits.entry(name.as_str()).or_default() += v;
                if name == "cpu" {
                    found.0 = true;
                } else {
                    found.1 = true;
                }
            }
        }
        if !(found.0 && found.1) {
            guaranteed = false;
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed {
        for (name, req) in &requests {
            if limits.get(name) != Some(req) {
                guaranteed = false;
                break;
            }
        }
    }
    if guaranteed && requests.len() == limits.len() {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

/// CPU shares for a CPU amount in millicores.
pub fn milli_cpu_to_shares(milli: i64) -> i64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli * SHARES_PER_CPU) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The CFS quota for a CPU limit in millicores over `period` microseconds (0: no limit).
pub fn milli_cpu_to_quota(milli: i64, period: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    ((milli * period) / 1000).max(MIN_QUOTA_PERIOD)
}

/// The OOM score adjustment of a container, by its pod's QoS class: -997 for Guaranteed,
/// 1000 for BestEffort, and for Burstable 1000 less the share of node memory it requests
/// (kept within 3..=999).
pub fn oom_score_adj(pod: &Pod, c: &Container, memory_capacity: i64) -> i64 {
    match qos_class(pod) {
        "Guaranteed" => GUARANTEED_OOM_SCORE_ADJ,
        "BestEffort" => BESTEFFORT_OOM_SCORE_ADJ,
        _ => {
            let request = amounts(c).memory_request.unwrap_or(0);
            let capacity = memory_capacity.max(1);
            let adj = 1000 - (1000i128 * request as i128 / capacity as i128) as i64;
            if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
                1000 + GUARANTEED_OOM_SCORE_ADJ
            } else if adj == BESTEFFORT_OOM_SCORE_ADJ {
                adj - 1
            } else {
                adj
            }
        }
    }
}

/// The node's memory (MemTotal of /proc/meminfo, bytes).
pub fn memory_capacity() -> i64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1).map(str::to_string))
        })
        .and_then(|kb| kb.parse::<i64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(8 << 30)
}

/// The CRI Linux resources of a container.
pub fn linux_resources(
    pod: &Pod,
    c: &Container,
    memory_capacity: i64,
) -> cri::LinuxContainerResources {
    let a = amounts(c);
    let shares = match (a.cpu_request, a.cpu_limit) {
        (None, Some(limit)) => milli_cpu_to_shares(limit),
        (req, _) => milli_cpu_to_shares(req.unwrap_or(0)),
    };
    let memory = a.memory_limit.unwrap_or(0).max(0);
    cri::LinuxContainerResources {
        cpu_shares: shares,
        cpu_period: QUOTA_PERIOD,
        cpu_quota: milli_cpu_to_quota(a.cpu_limit.unwrap_or(0), QUOTA_PERIOD),
        memory_limit_in_bytes: memory,
        // cgroup v1: no swap beyond the memory limit.
        memory_swap_limit_in_bytes: memory,
        oom_score_adj: oom_score_adj(pod, c, memory_capacity),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, ResourceRequirements};

    fn q(s: &str) -> Quantity {
        Quantity(s.into())
    }

    #[test]
    fn quantities_parse() {
        assert_eq!(milli_value(&q("100m")), Some(100));
        assert_eq!(milli_value(&q("0.1")), Some(100));
        assert_eq!(milli_value(&q("2")), Some(2000));
        assert_eq!(value(&q("128Mi")), Some(128 << 20));
        assert_eq!(value(&q("1G")), Some(1_000_000_000));
        assert_eq!(value(&q("1.5Gi")), Some(3 << 29));
        assert_eq!(value(&q("1e3")), Some(1000));
        assert_eq!(value(&q("1E")), Some(1_000_000_000_000_000_000));
        assert_eq!(value(&q("0.5")), Some(1));
        assert_eq!(value(&q("abc")), None);
        assert_eq!(value(&q("")), None);
    }

    fn container(name: &str, req: &[(&str, &str)], lim: &[(&str, &str)]) -> Container {
        let map = |l: &[(&str, &str)]| {
            (!l.is_empty()).then(|| l.iter().map(|(k, v)| (k.to_string(), q(v))).collect())
        };
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: map(req),
                limits: map(lim),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(containers: Vec<Container>) -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn qos_classes() {
        assert_eq!(
            qos_class(&pod(vec![container("a", &[], &[])])),
            "BestEffort"
        );
        let g = container(
            "a",
            &[("cpu", "100m"), ("memory", "64Mi")],
            &[("cpu", "100m"), ("memory", "64Mi")],
        );
        assert_eq!(qos_class(&pod(vec![g.clone()])), "Guaranteed");
        let b = container("b", &[("cpu", "100m")], &[]);
        assert_eq!(qos_class(&pod(vec![g, b])), "Burstable");
        let lim_only = container("c", &[], &[("memory", "64Mi")]);
        assert_eq!(qos_class(&pod(vec![lim_only])), "Burstable");
    }

    #[test]
    fn cpu_and_oom_settings() {
        assert_eq!(milli_cpu_to_shares(0), 2);
        assert_eq!(milli_cpu_to_shares(1), 2);
        assert_eq!(milli_cpu_to_shares(250), 256);
        assert_eq!(milli_cpu_to_quota(0, 100_000), 0);
        assert_eq!(milli_cpu_to_quota(500, 100_000), 50_000);
        assert_eq!(milli_cpu_to_quota(1, 100_000), 1_000);

        let b = container("b", &[("memory", "1Gi")], &[("cpu", "1")]);
        let p = pod(vec![b.clone()]);
        assert_eq!(oom_score_adj(&p, &b, 4 << 30), 750);
        let r = linux_resources(&p, &b, 4 << 30);
        assert_eq!(r.cpu_shares, 1024);
        assert_eq!(r.cpu_quota, 100_000);
        assert_eq!(r.cpu_period, 100_000);
        assert_eq!(r.memory_limit_in_bytes, 0);

        let be = container("x", &[], &[]);
        let p = pod(vec![be.clone()]);
        assert_eq!(oom_score_adj(&p, &be, 4 << 30), 1000);
        // A tiny request still leaves a burstable container below BestEffort.
        let tiny = container("t", &[("cpu", "1m")], &[]);
        let p = pod(vec![tiny.clone()]);
        assert_eq!(oom_score_adj(&p, &tiny, 4 << 30), 999);
    }
}
