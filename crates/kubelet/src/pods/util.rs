//! Small helpers the pod workers share: Kubernetes' ways of naming pods and containers in
//! messages, Go's duration format, CRI timestamps, the container hash.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// `name_namespace(uid)`: how the kubelet names a pod in messages.
pub fn format_pod(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.uid.as_deref().unwrap_or_default()
    )
}

pub fn pod_uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

pub fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or_default()
}

pub fn pod_namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or_default()
}

/// Which list of the pod spec a container comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Init,
    Regular,
}

/// The reference container events carry: the pod, with `fieldPath` naming the container
/// (`spec.containers{name}`, `spec.initContainers{name}`).
pub fn container_ref(pod: &Pod, name: &str) -> ObjectReference {
    let mut r = capstan_runtime::events::object_ref(pod);
    let kind = if pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|l| l.iter().any(|c| c.name == name))
    {
        "initContainers"
    } else {
        "containers"
    };
    r.field_path = Some(format!("spec.{kind}{{{name}}}"));
    r
}

/// Go's `time.Duration.String()`: `0s`, `250ms`, `1.5s`, `2m0s`, `1h0m0s`.
pub fn go_duration(d: Duration) -> String {
    let nanos = d.as_nanos();
    if nanos == 0 {
        return "0s".into();
    }
    if nanos < 1_000 {
        return format!("{nanos}ns");
    }
    if nanos < 1_000_000 {
        return format!("{}µs", frac(nanos, 1_000));
    }
    if nanos < 1_000_000_000 {
        return format!("{}ms", frac(nanos, 1_000_000));
    }
    let total_secs = d.as_secs();
    let h = total_secs / 3600;
    let m = (total_secs % 3600) / 60;
    let s_nanos = nanos - u128::from(h * 3600 + m * 60) * 1_000_000_000;
    let s = frac(s_nanos, 1_000_000_000);
    if h > 0 {
        format!("{h}h{m}m{s}s")
    } else if m > 0 {
        format!("{m}m{s}s")
    } else {
        format!("{s}s")
    }
}

/// `n / unit` with the fraction written out and trailing zeros dropped.
fn frac(n: u128, unit: u128) -> String {
    let whole = n / unit;
    let rest = n % unit;
    if rest == 0 {
        return whole.to_string();
    }
    let width = unit.to_string().len() - 1;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Nanoseconds since the epoch now (the unit of CRI timestamps).
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// A CRI timestamp as an API time, truncated to seconds as the API stores it; None for an
/// unset (zero) timestamp.
pub fn time_from_nanos(nanos: i64) -> Option<Time> {
    if nanos <= 0 {
        return None;
    }
    Timestamp::from_second(nanos.div_euclid(1_000_000_000))
        .ok()
        .map(Time)
}

/// Now, truncated to seconds.
pub fn now_time() -> Time {
    time_from_nanos(now_nanos()).unwrap_or(Time(Timestamp::UNIX_EPOCH))
}

/// Seconds since the epoch of an API time.
pub fn time_secs(t: &Time) -> i64 {
    t.0.as_second()
}

/// 32-bit FNV-1a.
pub fn fnv32a(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in data {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The hash of a container's definition the kubelet records on the runtime container
/// (`io.kubernetes.container.hash`); a running container whose spec hashes differently is
/// restarted. Resources are left out (they may change in place).
pub fn container_hash(c: &Container) -> String {
    let mut c = c.clone();
    c.resources = None;
    c.resize_policy = None;
    let json = serde_json::to_vec(&c).unwrap_or_default();
    format!("{:x}", fnv32a(&json))
}

/// The Go-style text of a gRPC error, as Kubernetes shows runtime errors:
/// `rpc error: code = NotFound desc = ...`.
pub fn grpc_error(s: &capstan_cri::Status) -> String {
    format!("rpc error: code = {:?} desc = {}", s.code(), s.message())
}

/// Go's `%s` of a string slice: `[a b c]`.
pub fn go_list(items: &[String]) -> String {
    format!("[{}]", items.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_go_does() {
        assert_eq!(go_duration(Duration::ZERO), "0s");
        assert_eq!(go_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(go_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(go_duration(Duration::from_secs(10)), "10s");
        assert_eq!(go_duration(Duration::from_secs(80)), "1m20s");
        assert_eq!(go_duration(Duration::from_secs(300)), "5m0s");
        assert_eq!(go_duration(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(go_duration(Duration::from_millis(2_345)), "2.345s");
        assert_eq!(go_duration(Duration::from_micros(1_500)), "1.5ms");
    }

    #[test]
    fn fnv_matches_reference_values() {
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
    }

    #[test]
    fn timestamps_truncate_to_seconds() {
        let t = time_from_nanos(1_700_000_000_999_999_999).unwrap();
        assert_eq!(time_secs(&t), 1_700_000_000);
        assert!(time_from_nanos(0).is_none());
    }
}
