//! `/stats/summary` (Kubernetes' stats/v1alpha1 Summary) and `/metrics/resource` (the
//! resource metrics metrics-server scrapes): the node's usage from the kernel (the root
//! cgroup, /proc), the pods' and containers' from the runtime (CRI stats).

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::SystemTime;

use capstan_cri::v1;
use http::{HeaderValue, Response};
use parking_lot::Mutex;
use serde_json::{json, Map, Value};

use super::{json as json_response, query_pairs, Body, Server};

/// Earlier CPU samples, to turn cumulative usage into a rate.
#[derive(Default)]
pub struct Stats {
    /// key → (time in ns, cumulative core-nanoseconds).
    samples: Mutex<HashMap<String, (i128, u64)>>,
}

impl Stats {
    /// The usage rate in nanocores since the last sample of `key` (None on the first).
    pub fn nano_cores(&self, key: &str, now_ns: i128, usage: u64) -> Option<u64> {
        let mut s = self.samples.lock();
        let prev = s.insert(key.to_string(), (now_ns, usage));
        let (t0, u0) = prev?;
        let dt = now_ns - t0;
        if dt <= 0 || usage < u0 {
            return None;
        }
        Some(((usage - u0) as u128 * 1_000_000_000 / dt as u128) as u64)
    }
}

/// A point in time as metav1.Time writes it (RFC 3339, seconds).
pub fn rfc3339(ns: i128) -> String {
    let t = super::logs::Rfc3339 {
        nanos: ns - ns.rem_euclid(1_000_000_000),
        offset: None,
    };
    let s = super::logs::format_rfc3339_fixed(t);
    // Drop the zero fraction: "...:05.000000000Z" → "...:05Z".
    match s.find('.') {
        Some(i) => format!("{}Z", &s[..i]),
        None => s,
    }
}

fn now_ns() -> i128 {
    super::logs::unix_nanos(SystemTime::now())
}

/// Kernel numbers for the whole node.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct NodeUsage {
    pub cpu_core_ns: Option<u64>,
    pub mem_total: Option<u64>,
    pub mem_usage: Option<u64>,
    pub mem_working_set: Option<u64>,
    pub mem_rss: Option<u64>,
    pub page_faults: Option<u64>,
    pub major_page_faults: Option<u64>,
}

fn read_u64(path: &str) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// `key value` lines (memory.stat, /proc/meminfo with its `kB`).
pub fn key_values(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let k = it.next()?.trim_end_matches(':').to_string();
            let v: u64 = it.next()?.parse().ok()?;
            let v = if it.next() == Some("kB") { v * 1024 } else { v };
            Some((k, v))
        })
        .collect()
}

/// The total CPU time of /proc/stat's `cpu` line, in nanoseconds (USER_HZ = 100), without
/// idle and iowait.
pub fn proc_stat_busy_ns(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let busy: u64 = v
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, x)| x)
        .sum();
    Some(busy * 10_000_000)
}

pub fn node_usage() -> NodeUsage {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .map(|t| key_values(&t))
        .unwrap_or_default();
    let mut u = NodeUsage {
        mem_total: meminfo.get("MemTotal").copied(),
        ..Default::default()
    };
    u.cpu_core_ns = read_u64("/sys/fs/cgroup/cpuacct/cpuacct.usage")
        .or_else(|| read_u64("/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage"))
        .or_else(|| {
            let stat = std::fs::read_to_string("/sys/fs/cgroup/cpu.stat").ok()?;
            key_values(&stat).get("usage_usec").map(|us| us * 1000)
        })
        .or_else(|| proc_stat_busy_ns(&std::fs::read_to_string("/proc/stat").ok()?));
    let v1_usage = read_u64("/sys/fs/cgroup/memory/memory.usage_in_bytes");
    let v1_stat = std::fs::read_to_string("/sys/fs/cgroup/memory/memory.stat")
        .map(|t| key_values(&t))
        .ok();
    match (v1_usage, v1_stat) {
        (Some(usage), Some(stat)) => {
            let inactive = stat.get("total_inactive_file").copied().unwrap_or(0);
            u.mem_usage = Some(usage);
            u.mem_working_set = Some(usage.saturating_sub(inactive));
            u.mem_rss = stat.get("total_rss").copied();
            u.page_faults = stat.get("total_pgfault").copied();
            u.major_page_faults = stat.get("total_pgmajfault").copied();
        }
        _ => {
            if let (Some(total), Some(free)) = (meminfo.get("MemTotal"), meminfo.get("MemFree")) {
                let usage = total.saturating_sub(*free);
                let inactive = meminfo.get("Inactive(file)").copied().unwrap_or(0);
                u.mem_usage = Some(usage);
                u.mem_working_set = Some(usage.saturating_sub(inactive));
                u.mem_rss = meminfo.get("AnonPages").copied();
            }
        }
    }
    u
}

/// Capacity, available and used bytes and inodes of the filesystem holding `path`.
fn fs_stats(path: &std::path::Path, time: &str) -> Option<Value> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs only writes into the zeroed struct it is given.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `s` a valid statvfs.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    let frsize = s.f_frsize as u64;
    let capacity = s.f_blocks as u64 * frsize;
    let available = s.f_bavail as u64 * frsize;
    let free = s.f_bfree as u64 * frsize;
    Some(json!({
        "time": time,
        "availableBytes": available,
        "capacityBytes": capacity,
        "usedBytes": capacity.saturating_sub(free),
        "inodesFree": s.f_ffree as u64,
        "inodes": s.f_files as u64,
        "inodesUsed": (s.f_files as u64).saturating_sub(s.f_ffree as u64),
    }))
}

fn uv(v: &Option<v1::UInt64Value>) -> Option<u64> {
    v.as_ref().map(|x| x.value)
}

fn put(m: &mut Map<String, Value>, key: &str, v: Option<u64>) {
    if let Some(v) = v {
        m.insert(key.into(), json!(v));
    }
}

fn cpu_json(time: &str, core_ns: Option<u64>, nano_cores: Option<u64>) -> Value {
    let mut m = Map::new();
    m.insert("time".into(), json!(time));
    put(&mut m, "usageNanoCores", nano_cores);
    put(&mut m, "usageCoreNanoSeconds", core_ns);
    Value::Object(m)
}

fn memory_json(time: &str, mem: &v1::MemoryUsage) -> Value {
    let mut m = Map::new();
    m.insert("time".into(), json!(time));
    put(&mut m, "availableBytes", uv(&mem.available_bytes));
    put(&mut m, "usageBytes", uv(&mem.usage_bytes));
    put(&mut m, "workingSetBytes", uv(&mem.working_set_bytes));
    put(&mut m, "rssBytes", uv(&mem.rss_bytes));
    put(&mut m, "pageFaults", uv(&mem.page_faults));
    put(&mut m, "majorPageFaults", uv(&mem.major_page_faults));
    Value::Object(m)
}

fn stamp(ns: i64) -> String {
    if ns > 0 {
        rfc3339(i128::from(ns))
    } else {
        rfc3339(now_ns())
    }
}

/// One running container's numbers.
#[derive(Debug, Clone, Default)]
pub struct ContainerUsage {
    pub name: String,
    pub created_ns: i64,
    pub stats: v1::ContainerStats,
}

/// One pod's numbers.
#[derive(Debug, Clone, Default)]
pub struct PodUsage {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub created_ns: i64,
    pub containers: Vec<ContainerUsage>,
    /// The sandbox-level numbers, when the runtime gives them.
    pub sandbox: Option<v1::LinuxPodSandboxStats>,
}

/// The ready pods and their running containers with their stats, from the runtime.
pub async fn pod_usage(s: &Server) -> Result<Vec<PodUsage>, capstan_cri::Status> {
    let rt = &s.k.runtime;
    let sandboxes = rt
        .list_pod_sandbox(v1::ListPodSandboxRequest {
            filter: Some(v1::PodSandboxFilter {
                state: Some(v1::PodSandboxStateValue {
                    state: v1::PodSandboxState::SandboxReady as i32,
                }),
                ..Default::default()
            }),
        })
        .await?
        .items;
    let containers = rt
        .list_containers(v1::ListContainersRequest {
            filter: Some(v1::ContainerFilter {
                state: Some(v1::ContainerStateValue {
                    state: v1::ContainerState::ContainerRunning as i32,
                }),
                ..Default::default()
            }),
        })
        .await?
        .containers;
    let stats: HashMap<String, v1::ContainerStats> = rt
        .list_container_stats(v1::ListContainerStatsRequest { filter: None })
        .await?
        .stats
        .into_iter()
        .filter_map(|st| Some((st.attributes.as_ref()?.id.clone(), st)))
        .collect();
    let sandbox_stats: HashMap<String, v1::LinuxPodSandboxStats> = rt
        .list_pod_sandbox_stats(v1::ListPodSandboxStatsRequest { filter: None })
        .await
        .map(|r| r.stats)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|st| Some((st.attributes.as_ref()?.id.clone(), st.linux?)))
        .collect();
    // The newest ready sandbox of each pod.
    let mut newest: HashMap<String, &v1::PodSandbox> = HashMap::new();
    for sb in sandboxes
        .iter()
        .filter(|sb| sb.state == v1::PodSandboxState::SandboxReady as i32)
    {
        let Some(m) = &sb.metadata else { continue };
        match newest.get(&m.uid) {
            Some(o) if o.created_at >= sb.created_at => {}
            _ => {
                newest.insert(m.uid.clone(), sb);
            }
        }
    }
    let mut pods: Vec<PodUsage> = newest
        .values()
        .map(|sb| {
            let m = sb.metadata.clone().unwrap_or_default();
            let mut cs: Vec<ContainerUsage> = containers
                .iter()
                .filter(|c| c.pod_sandbox_id == sb.id)
                .filter(|c| c.state == v1::ContainerState::ContainerRunning as i32)
                .map(|c| ContainerUsage {
                    name: c
                        .metadata
                        .as_ref()
                        .map(|m| m.name.clone())
                        .unwrap_or_default(),
                    created_ns: c.created_at,
                    stats: stats.get(&c.id).cloned().unwrap_or_default(),
                })
                .collect();
            cs.sort_by(|a, b| a.name.cmp(&b.name));
            PodUsage {
                name: m.name,
                namespace: m.namespace,
                uid: m.uid,
                created_ns: sb.created_at,
                containers: cs,
                sandbox: sandbox_stats.get(&sb.id).cloned(),
            }
        })
        .collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    Ok(pods)
}

/// The pod's cumulative CPU and working set: the sandbox's when given, else the sum of its
/// containers'.
fn pod_totals(p: &PodUsage) -> (Option<u64>, Option<u64>, Option<u64>) {
    let sb_cpu = p
        .sandbox
        .as_ref()
        .and_then(|s| s.cpu.as_ref())
        .and_then(|c| uv(&c.usage_core_nano_seconds));
    let sb_mem = p
        .sandbox
        .as_ref()
        .and_then(|s| s.memory.as_ref())
        .and_then(|m| uv(&m.working_set_bytes));
    let sum = |f: &dyn Fn(&v1::ContainerStats) -> Option<u64>| {
        let vals: Vec<u64> = p.containers.iter().filter_map(|c| f(&c.stats)).collect();
        (!vals.is_empty()).then(|| vals.iter().sum())
    };
    let cpu =
        sb_cpu.or_else(|| sum(&|s| s.cpu.as_ref().and_then(|c| uv(&c.usage_core_nano_seconds))));
    let mem = sb_mem.or_else(|| sum(&|s| s.memory.as_ref().and_then(|m| uv(&m.working_set_bytes))));
    let usage = p
        .sandbox
        .as_ref()
        .and_then(|s| s.memory.as_ref())
        .and_then(|m| uv(&m.usage_bytes))
        .or_else(|| sum(&|s| s.memory.as_ref().and_then(|m| uv(&m.usage_bytes))));
    (cpu, mem, usage)
}

/// `/stats/summary[?only_cpu_and_memory=true]`.
pub async fn summary(s: &Arc<Server>, query: Option<&str>) -> Response<Body> {
    let only = query_pairs(query)
        .iter()
        .rev()
        .find(|(k, _)| k == "only_cpu_and_memory")
        .and_then(|(_, v)| super::logs::parse_bool(v))
        .unwrap_or(false);
    let pods = match pod_usage(s).await {
        Ok(p) => p,
        Err(e) => {
            return super::text(
                500,
                &format!(
                    "Internal Error: failed to get summary stats: {}",
                    e.message()
                ),
            )
        }
    };
    json_response(200, &summary_json(s, &pods, &node_usage(), only, now_ns()))
}

/// The Summary document.
pub fn summary_json(
    s: &Server,
    pods: &[PodUsage],
    node: &NodeUsage,
    only_cpu_and_memory: bool,
    now: i128,
) -> Value {
    let time = rfc3339(now);
    let mut n = Map::new();
    n.insert("nodeName".into(), json!(s.k.opts.node_name));
    n.insert(
        "startTime".into(),
        json!(boot_time().unwrap_or_else(|| time.clone())),
    );
    n.insert(
        "cpu".into(),
        cpu_json(
            &time,
            node.cpu_core_ns,
            node.cpu_core_ns
                .and_then(|u| s.stats.nano_cores("node", now, u)),
        ),
    );
    let mut mem = Map::new();
    mem.insert("time".into(), json!(time));
    put(
        &mut mem,
        "availableBytes",
        node.mem_total
            .zip(node.mem_working_set)
            .map(|(t, w)| t.saturating_sub(w)),
    );
    put(&mut mem, "usageBytes", node.mem_usage);
    put(&mut mem, "workingSetBytes", node.mem_working_set);
    put(&mut mem, "rssBytes", node.mem_rss);
    put(&mut mem, "pageFaults", node.page_faults);
    put(&mut mem, "majorPageFaults", node.major_page_faults);
    n.insert("memory".into(), Value::Object(mem));
    if !only_cpu_and_memory {
        if let Some(fs) = fs_stats(&s.k.opts.root_dir, &time) {
            n.insert("fs".into(), fs.clone());
            n.insert("runtime".into(), json!({"imageFs": fs, "containerFs": fs}));
        }
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|t| t.trim().parse::<i64>().ok());
        let procs = std::fs::read_dir("/proc").ok().map(|d| {
            d.filter_map(Result::ok)
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .bytes()
                        .all(|b| b.is_ascii_digit())
                })
                .count() as i64
        });
        let mut rl = Map::new();
        rl.insert("time".into(), json!(time));
        if let Some(m) = pid_max {
            rl.insert("maxpid".into(), json!(m));
        }
        if let Some(c) = procs {
            rl.insert("curproc".into(), json!(c));
        }
        n.insert("rlimit".into(), Value::Object(rl));
    }
    let pods_json: Vec<Value> = pods
        .iter()
        .map(|p| pod_json(s, p, only_cpu_and_memory, now))
        .collect();
    json!({"node": Value::Object(n), "pods": pods_json})
}

fn pod_json(s: &Server, p: &PodUsage, only: bool, now: i128) -> Value {
    let time = rfc3339(now);
    let containers: Vec<Value> = p
        .containers
        .iter()
        .map(|c| {
            let mut m = Map::new();
            m.insert("name".into(), json!(c.name));
            m.insert("startTime".into(), json!(stamp(c.created_ns)));
            if let Some(cpu) = &c.stats.cpu {
                let core = uv(&cpu.usage_core_nano_seconds);
                let rate = uv(&cpu.usage_nano_cores).filter(|v| *v > 0).or_else(|| {
                    let id = c
                        .stats
                        .attributes
                        .as_ref()
                        .map(|a| a.id.as_str())
                        .unwrap_or("");
                    core.and_then(|u| s.stats.nano_cores(&format!("c/{id}"), now, u))
                });
                m.insert("cpu".into(), cpu_json(&stamp(cpu.timestamp), core, rate));
            }
            if let Some(mem) = &c.stats.memory {
                m.insert("memory".into(), memory_json(&stamp(mem.timestamp), mem));
            }
            if !only {
                if let Some(wl) = &c.stats.writable_layer {
                    let mut fs = Map::new();
                    fs.insert("time".into(), json!(stamp(wl.timestamp)));
                    put(&mut fs, "usedBytes", uv(&wl.used_bytes));
                    put(&mut fs, "inodesUsed", uv(&wl.inodes_used));
                    m.insert("rootfs".into(), Value::Object(fs));
                }
            }
            Value::Object(m)
        })
        .collect();
    let mut m = Map::new();
    m.insert(
        "podRef".into(),
        json!({"name": p.name, "namespace": p.namespace, "uid": p.uid}),
    );
    m.insert("startTime".into(), json!(stamp(p.created_ns)));
    m.insert("containers".into(), json!(containers));
    let (cpu, mem, usage) = pod_totals(p);
    let rate = p
        .sandbox
        .as_ref()
        .and_then(|sb| sb.cpu.as_ref())
        .and_then(|c| uv(&c.usage_nano_cores))
        .filter(|v| *v > 0)
        .or_else(|| cpu.and_then(|u| s.stats.nano_cores(&format!("p/{}", p.uid), now, u)));
    m.insert("cpu".into(), cpu_json(&time, cpu, rate));
    let mut mm = Map::new();
    mm.insert("time".into(), json!(time));
    put(&mut mm, "usageBytes", usage);
    put(&mut mm, "workingSetBytes", mem);
    m.insert("memory".into(), Value::Object(mm));
    if !only {
        if let Some(net) = p.sandbox.as_ref().and_then(|sb| sb.network.as_ref()) {
            let iface = |i: &v1::NetworkInterfaceUsage| {
                let mut o = Map::new();
                o.insert("name".into(), json!(i.name));
                put(&mut o, "rxBytes", uv(&i.rx_bytes));
                put(&mut o, "rxErrors", uv(&i.rx_errors));
                put(&mut o, "txBytes", uv(&i.tx_bytes));
                put(&mut o, "txErrors", uv(&i.tx_errors));
                o
            };
            let mut o = net
                .default_interface
                .as_ref()
                .map(iface)
                .unwrap_or_default();
            o.insert("time".into(), json!(stamp(net.timestamp)));
            o.insert(
                "interfaces".into(),
                Value::Array(
                    net.interfaces
                        .iter()
                        .map(|i| Value::Object(iface(i)))
                        .collect(),
                ),
            );
            m.insert("network".into(), Value::Object(o));
        }
        if let Some(pc) = p
            .sandbox
            .as_ref()
            .and_then(|sb| sb.process.as_ref())
            .and_then(|pr| uv(&pr.process_count))
        {
            m.insert("process_stats".into(), json!({"process_count": pc}));
        }
    }
    Value::Object(m)
}

/// When the node booted (/proc/stat's btime).
fn boot_time() -> Option<String> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let secs: i64 = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    Some(rfc3339(i128::from(secs) * 1_000_000_000))
}

/// A float as Go's strconv.FormatFloat(f, 'g', -1, 64) writes it (Prometheus' text form).
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    let e = format!("{f:e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    format!("{f}")
}

/// `/metrics/resource`.
pub async fn resource_metrics(s: &Arc<Server>) -> Response<Body> {
    let (pods, error) = match pod_usage(s).await {
        Ok(p) => (p, false),
        Err(_) => (Vec::new(), true),
    };
    let text = metrics_text(&pods, &node_usage(), error, now_ns());
    let mut r = Response::new(super::full(text));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    r
}

fn escape_label(v: &str) -> String {
    v.replace('\\', r"\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The resource metrics in Prometheus' text format, families in name order, each sample
/// with the time of its measurement (ms).
pub fn metrics_text(pods: &[PodUsage], node: &NodeUsage, error: bool, now: i128) -> String {
    let now_ms = (now / 1_000_000) as i64;
    let ms = |ts: i64| if ts > 0 { ts / 1_000_000 } else { now_ms };
    let mut out = String::new();
    let mut family = |name: &str, help: &str, kind: &str, samples: Vec<(String, f64, i64)>| {
        if samples.is_empty() && kind != "always" {
            return;
        }
        let kind = if kind == "always" { "gauge" } else { kind };
        let _ = writeln!(out, "# HELP {name} [STABLE] {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (labels, v, t) in samples {
            let _ = writeln!(out, "{name}{labels} {} {t}", go_float(v));
        }
    };
    let clabels = |p: &PodUsage, c: &ContainerUsage| {
        format!(
            "{{container=\"{}\",namespace=\"{}\",pod=\"{}\"}}",
            escape_label(&c.name),
            escape_label(&p.namespace),
            escape_label(&p.name)
        )
    };
    let plabels = |p: &PodUsage| {
        format!(
            "{{namespace=\"{}\",pod=\"{}\"}}",
            escape_label(&p.namespace),
            escape_label(&p.name)
        )
    };
    let mut ccpu = Vec::new();
    let mut cmem = Vec::new();
    let mut cstart = Vec::new();
    let mut pcpu = Vec::new();
    let mut pmem = Vec::new();
    for p in pods {
        for c in &p.containers {
            if let Some(cpu) = &c.stats.cpu {
                if let Some(u) = uv(&cpu.usage_core_nano_seconds) {
                    ccpu.push((clabels(p, c), u as f64 / 1e9, ms(cpu.timestamp)));
                }
            }
            if let Some(mem) = &c.stats.memory {
                if let Some(w) = uv(&mem.working_set_bytes) {
                    cmem.push((clabels(p, c), w as f64, ms(mem.timestamp)));
                }
            }
            if c.created_ns > 0 {
                cstart.push((
                    clabels(p, c),
                    (c.created_ns / 1_000_000_000) as f64,
                    ms(c.created_ns),
                ));
            }
        }
        let (cpu, mem, _) = pod_totals(p);
        if let Some(u) = cpu {
            pcpu.push((plabels(p), u as f64 / 1e9, now_ms));
        }
        if let Some(w) = mem {
            pmem.push((plabels(p), w as f64, now_ms));
        }
    }
    family(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the container in core-seconds",
        "counter",
        ccpu,
    );
    family(
        "container_memory_working_set_bytes",
        "Current working set of the container in bytes",
        "gauge",
        cmem,
    );
    family(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds",
        "gauge",
        cstart,
    );
    family(
        "node_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the node in core-seconds",
        "counter",
        node.cpu_core_ns
            .map(|u| vec![(String::new(), u as f64 / 1e9, now_ms)])
            .unwrap_or_default(),
    );
    family(
        "node_memory_working_set_bytes",
        "Current working set of the node in bytes",
        "gauge",
        node.mem_working_set
            .map(|w| vec![(String::new(), w as f64, now_ms)])
            .unwrap_or_default(),
    );
    family(
        "pod_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the pod in core-seconds",
        "counter",
        pcpu,
    );
    family(
        "pod_memory_working_set_bytes",
        "Current working set of the pod in bytes",
        "gauge",
        pmem,
    );
    let _ = writeln!(
        out,
        "# HELP resource_scrape_error [STABLE] 1 if there was an error while getting container metrics, 0 otherwise"
    );
    let _ = writeln!(out, "# TYPE resource_scrape_error gauge");
    let _ = writeln!(out, "resource_scrape_error {}", u8::from(error));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_like_go() {
        assert_eq!(go_float(0.0), "0");
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(123456.0), "123456");
        assert_eq!(go_float(1.2345678e9), "1.2345678e+09");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(0.0001), "0.0001");
    }

    #[test]
    fn go_float_uses_exponents_from_a_million() {
        // Go's shortest 'g' switches to an exponent at exponent 6.
        assert_eq!(go_float(999999.0), "999999");
        assert_eq!(go_float(1e6), "1e+06");
        assert_eq!(go_float(-2.5e21), "-2.5e+21");
    }

    #[test]
    fn rates_come_from_two_samples() {
        let s = Stats::default();
        assert_eq!(s.nano_cores("x", 1_000_000_000, 100), None);
        // 0.5 s of CPU over 1 s: half a core.
        assert_eq!(
            s.nano_cores("x", 2_000_000_000, 500_000_100),
            Some(500_000_000)
        );
        // A counter that went back (a new container) gives no rate.
        assert_eq!(s.nano_cores("x", 3_000_000_000, 5), None);
    }

    #[test]
    fn kernel_files_parse() {
        let m = key_values("MemTotal:       16000 kB\nMemFree: 4000 kB\nx\n");
        assert_eq!(m["MemTotal"], 16_384_000);
        assert_eq!(m["MemFree"], 4_096_000);
        assert_eq!(
            proc_stat_busy_ns("cpu  10 0 5 1000 50 1 2 0 0 0\ncpu0 1 2 3\n"),
            Some(18 * 10_000_000)
        );
    }

    fn sample_pod() -> PodUsage {
        PodUsage {
            name: "web".into(),
            namespace: "default".into(),
            uid: "u1".into(),
            created_ns: 1_700_000_000_000_000_000,
            containers: vec![ContainerUsage {
                name: "app".into(),
                created_ns: 1_700_000_001_000_000_000,
                stats: v1::ContainerStats {
                    attributes: Some(v1::ContainerAttributes {
                        id: "c1".into(),
                        ..Default::default()
                    }),
                    cpu: Some(v1::CpuUsage {
                        timestamp: 1_700_000_100_000_000_000,
                        usage_core_nano_seconds: Some(v1::UInt64Value {
                            value: 2_500_000_000,
                        }),
                        usage_nano_cores: None,
                    }),
                    memory: Some(v1::MemoryUsage {
                        timestamp: 1_700_000_100_000_000_000,
                        working_set_bytes: Some(v1::UInt64Value { value: 4096 }),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            }],
            sandbox: None,
        }
    }

    #[test]
    fn resource_metrics_have_kubernetes_names() {
        let node = NodeUsage {
            cpu_core_ns: Some(12_000_000_000),
            mem_working_set: Some(2_000_000_000),
            ..Default::default()
        };
        let text = metrics_text(&[sample_pod()], &node, false, 1_700_000_200_000_000_000);
        let want = [
            "# TYPE container_cpu_usage_seconds_total counter",
            "container_cpu_usage_seconds_total{container=\"app\",namespace=\"default\",pod=\"web\"} 2.5 1700000100000",
            "container_memory_working_set_bytes{container=\"app\",namespace=\"default\",pod=\"web\"} 4096 1700000100000",
            "container_start_time_seconds{container=\"app\",namespace=\"default\",pod=\"web\"} 1.700000001e+09 1700000001000",
            "node_cpu_usage_seconds_total 12 1700000200000",
            "node_memory_working_set_bytes 2e+09 1700000200000",
            "pod_cpu_usage_seconds_total{namespace=\"default\",pod=\"web\"} 2.5 1700000200000",
            "pod_memory_working_set_bytes{namespace=\"default\",pod=\"web\"} 4096 1700000200000",
            "resource_scrape_error 0",
        ];
        for w in want {
            assert!(text.lines().any(|l| l == w), "missing {w:?} in\n{text}");
        }
        // Families come in name order.
        let names: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| l.split(' ').next().unwrap())
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
    }

    #[test]
    fn times_are_whole_seconds() {
        assert_eq!(rfc3339(1_700_000_000_900_000_000), "2023-11-14T22:13:20Z");
    }
}
