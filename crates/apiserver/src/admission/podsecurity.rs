//! PodSecurity, as Kubernetes' `plugin/pkg/admission/security/podsecurity` over
//! `k8s.io/pod-security-admission`: pods are checked against the Pod Security Standards level
//! their namespace's `pod-security.kubernetes.io/enforce` label names (at the version of
//! `enforce-version`, "latest" by default) and rejected with Kubernetes' message.
//!
//! Not done here: the `warn` and `audit` labels (Kubernetes adds response warnings and audit
//! annotations; the admission interface has no channel for them yet), and the warnings
//! Kubernetes gives for workload resources (deployments, jobs, ...) and for namespace label
//! changes. Nothing is exempt (Kubernetes' default configuration exempts nothing either).

use std::collections::BTreeSet;
use std::fmt;

use async_trait::async_trait;
use serde_json::{Map, Value};

use super::builtin::{annotation, forbidden, is_core, items, str_at};
use super::{Attributes, Operation, Plugin};
use crate::error::ApiResult;
use capstan_api::meta::At as _;

pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
/// The newest policy version this implementation knows (Kubernetes v1.32).
pub const LATEST_MINOR: u32 = 32;

/// A Pod Security Standards level.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

/// A level at a policy version (`None`: latest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LevelVersion {
    pub level: Level,
    pub minor: Option<u32>,
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.minor {
            None => write!(f, "{}:latest", self.level.as_str()),
            Some(m) => write!(f, "{}:v1.{m}", self.level.as_str()),
        }
    }
}

/// The enforced policy named by a namespace's labels. Unparsable labels mean
/// `restricted` and `latest`, as in Kubernetes; no label means `privileged`.
pub fn enforce_policy(labels: Option<&Map<String, Value>>) -> LevelVersion {
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let level = match label(ENFORCE_LABEL) {
        None | Some("privileged") => Level::Privileged,
        Some("baseline") => Level::Baseline,
        Some(_) => Level::Restricted,
    };
    let minor = label(ENFORCE_VERSION_LABEL).and_then(parse_version);
    LevelVersion { level, minor }
}

/// `v1.<minor>`; "latest" and anything unparsable are latest.
fn parse_version(v: &str) -> Option<u32> {
    let m = v.strip_prefix("v1.")?;
    if m.is_empty() || (m.len() > 1 && m.starts_with('0')) || !m.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    m.parse().ok()
}

/// One failed check: a short reason and the detail Kubernetes puts in parentheses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

fn violation(reason: impl Into<String>, detail: impl Into<String>) -> Option<Violation> {
    Some(Violation {
        reason: reason.into(),
        detail: detail.into(),
    })
}

/// The PodSecurity admission plugin.
pub struct PodSecurity;

/// Pod subresources PodSecurity never looks at.
const IGNORED_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

#[async_trait]
impl Plugin for PodSecurity {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let Some(pod) = obj else { return Ok(()) };
        if !is_core(a, "pods")
            || IGNORED_SUBRESOURCES.contains(&a.subresource)
            || !matches!(a.operation, Operation::Create | Operation::Update)
        {
            return Ok(());
        }
        let Some(ns) = a.objects.get("", "namespaces", "", a.namespace) else {
            return Ok(());
        };
        let policy = enforce_policy(capstan_api::meta::labels(&ns));
        if policy.level == Level::Privileged {
            return Ok(());
        }
        if a.operation == Operation::Update && !old.is_some_and(|o| significant_update(pod, o)) {
            return Ok(());
        }
        let violations = evaluate(policy, pod);
        if violations.is_empty() {
            return Ok(());
        }
        Err(forbidden(
            a,
            Some(pod),
            format!(
                "violates PodSecurity \"{policy}\": {}",
                describe(&violations)
            ),
        ))
    }
}

/// `reason (detail), reason (detail), ...`
pub fn describe(violations: &[Violation]) -> String {
    violations
        .iter()
        .map(|v| {
            if v.detail.is_empty() {
                v.reason.clone()
            } else {
                format!("{} ({})", v.reason, v.detail)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Updates only matter when an image, the container set, a seccomp annotation or an
/// ephemeral container changes (Kubernetes' `isSignificantPodUpdate`).
fn significant_update(pod: &Value, old: &Value) -> bool {
    const SECCOMP_POD: &str = "seccomp.security.alpha.kubernetes.io/pod";
    const SECCOMP_CONTAINER: &str = "container.seccomp.security.alpha.kubernetes.io/";
    if annotation(pod, SECCOMP_POD) != annotation(old, SECCOMP_POD) {
        return true;
    }
    let changed = |new: &Value, prev: &Value| {
        let key = format!("{SECCOMP_CONTAINER}{}", str_at(new, "/name"));
        str_at(new, "/image") != str_at(prev, "/image")
            || annotation(pod, &key) != annotation(old, &key)
    };
    for key in ["/spec/containers", "/spec/initContainers"] {
        let (new, prev) = (items(pod, key), items(old, key));
        if new.len() != prev.len() || new.iter().zip(prev).any(|(n, p)| changed(n, p)) {
            return true;
        }
    }
    let prev = items(old, "/spec/ephemeralContainers");
    items(pod, "/spec/ephemeralContainers").iter().any(|c| {
        match prev
            .iter()
            .find(|p| str_at(p, "/name") == str_at(c, "/name"))
        {
            None => true,
            Some(p) => changed(c, p),
        }
    })
}

/// A check: its ID (which orders the checks), level, first policy version, and, for
/// restricted checks, the baseline check it supersedes.
struct Check {
    id: &'static str,
    level: Level,
    since: u32,
    overrides: Option<&'static str>,
    run: fn(&Value, u32) -> Option<Violation>,
}

const fn check(
    id: &'static str,
    level: Level,
    since: u32,
    overrides: Option<&'static str>,
    run: fn(&Value, u32) -> Option<Violation>,
) -> Check {
    Check {
        id,
        level,
        since,
        overrides,
        run,
    }
}

use Level::{Baseline as B, Restricted as R};

/// Every check, baseline first, each level in ID order (Kubernetes' evaluation order).
#[rustfmt::skip]
const CHECKS: &[Check] = &[
    check("appArmorProfile", B, 0, None, app_armor),
    check("capabilities_baseline", B, 0, None, capabilities_baseline),
    check("hostNamespaces", B, 0, None, host_namespaces),
    check("hostPathVolumes", B, 0, None, host_path_volumes),
    check("hostPorts", B, 0, None, host_ports),
    check("privileged", B, 0, None, privileged),
    check("procMount", B, 0, None, proc_mount),
    check("seLinuxOptions", B, 0, None, se_linux),
    check("seccompProfile_baseline", B, 0, None, seccomp_baseline),
    check("sysctls", B, 0, None, sysctls),
    check("windowsHostProcess", B, 0, None, windows_host_process),
    check("allowPrivilegeEscalation", R, 8, None, allow_privilege_escalation),
    check("capabilities_restricted", R, 22, Some("capabilities_baseline"), capabilities_restricted),
    check("restrictedVolumes", R, 0, Some("hostPathVolumes"), restricted_volumes),
    check("runAsNonRoot", R, 0, None, run_as_non_root),
    check("runAsUser", R, 23, None, run_as_user),
    check("seccompProfile_restricted", R, 19, Some("seccompProfile_baseline"), seccomp_restricted),
];

/// Every violation of `policy` by `pod`, in Kubernetes' order.
pub fn evaluate(policy: LevelVersion, pod: &Value) -> Vec<Violation> {
    if policy.level == Level::Privileged {
        return Vec::new();
    }
    let minor = policy.minor.unwrap_or(LATEST_MINOR).min(LATEST_MINOR);
    let active: Vec<&Check> = CHECKS
        .iter()
        .filter(|c| c.level <= policy.level && c.since <= minor)
        .collect();
    let overridden: Vec<&str> = active.iter().filter_map(|c| c.overrides).collect();
    active
        .into_iter()
        .filter(|c| !overridden.contains(&c.id))
        .filter_map(|c| (c.run)(pod, minor))
        .collect()
}

fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    items
        .iter()
        .map(|s| format!("\"{}\"", s.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}

fn pluralize<'a>(one: &'a str, many: &'a str, n: usize) -> &'a str {
    if n == 1 {
        one
    } else {
        many
    }
}

/// `container "a"` / `containers "a", "b"`.
fn containers_phrase(names: &[String]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

/// Init, regular and ephemeral containers (the checks' `visitContainers` order).
fn containers(pod: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |k| items(pod, &format!("/spec/{k}")))
}

fn name(c: &Value) -> String {
    str_at(c, "/name").to_string()
}

fn flag(v: &Value, pointer: &str) -> Option<bool> {
    v.at(pointer).and_then(Value::as_bool)
}

fn is_windows(pod: &Value) -> bool {
    str_at(pod, "/spec/os/name") == "windows"
}

/// Who sets `securityContext.<profile>.type` to a value `allowed` refuses ("pod", then the
/// containers phrase), and those values.
fn profile_types(
    pod: &Value,
    profile: &str,
    allowed: impl Fn(&str) -> bool,
) -> (Vec<String>, BTreeSet<String>) {
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let type_at = |v: &Value, base: &str| {
        v.at(&format!("{base}/securityContext/{profile}/type"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if let Some(t) = type_at(pod, "/spec").filter(|t| !allowed(t)) {
        setters.push("pod".to_string());
        values.insert(t);
    }
    let mut bad = Vec::new();
    for c in containers(pod) {
        if let Some(t) = type_at(c, "").filter(|t| !allowed(t)) {
            bad.push(name(c));
            values.insert(t);
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    (setters, values)
}

fn app_armor(pod: &Value, _: u32) -> Option<Violation> {
    const PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";
    let (mut setters, values) = profile_types(pod, "appArmorProfile", |t| {
        matches!(t, "RuntimeDefault" | "Localhost")
    });
    let mut annotations: Vec<String> = pod
        .at("/metadata/annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with(PREFIX))
        .filter_map(|(k, v)| {
            let v = v.as_str().unwrap_or("");
            let ok = v.is_empty() || v == "runtime/default" || v.starts_with("localhost/");
            (!ok).then(|| format!("{k}={v:?}"))
        })
        .collect();
    annotations.sort();
    let mut all: Vec<String> = values.into_iter().collect();
    if !annotations.is_empty() {
        setters.push(pluralize("annotation", "annotations", annotations.len()).to_string());
        all.extend(annotations);
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        pluralize(
            "forbidden AppArmor profile",
            "forbidden AppArmor profiles",
            all.len(),
        ),
        format!(
            "{} must not set AppArmor profile type to {}",
            setters.join(" and "),
            join_quote(&all)
        ),
    )
}

const BASELINE_CAPABILITIES: &[&str] = &[
    "AUDIT_WRITE",
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "MKNOD",
    "NET_BIND_SERVICE",
    "SETFCAP",
    "SETGID",
    "SETPCAP",
    "SETUID",
    "SYS_CHROOT",
];

fn capabilities_baseline(pod: &Value, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(pod) {
        let mut valid = true;
        for cap in items(c, "/securityContext/capabilities/add") {
            let cap = cap.as_str().unwrap_or("");
            if !BASELINE_CAPABILITIES.contains(&cap) {
                valid = false;
                caps.insert(cap.to_string());
            }
        }
        if !valid {
            bad.push(name(c));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let caps: Vec<String> = caps.into_iter().collect();
    violation(
        "non-default capabilities",
        format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&bad),
            join_quote(&caps)
        ),
    )
}

fn host_namespaces(pod: &Value, _: u32) -> Option<Violation> {
    let found: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .into_iter()
        .filter(|k| flag(pod, &format!("/spec/{k}")) == Some(true))
        .map(|k| format!("{k}=true"))
        .collect();
    if found.is_empty() {
        return None;
    }
    violation("host namespaces", found.join(", "))
}

fn host_path_volumes(pod: &Value, _: u32) -> Option<Violation> {
    let names: Vec<String> = items(pod, "/spec/volumes")
        .iter()
        .filter(|v| v.get("hostPath").is_some_and(|h| !h.is_null()))
        .map(name)
        .collect();
    if names.is_empty() {
        return None;
    }
    violation(
        "hostPath volumes",
        format!(
            "{} {}",
            pluralize("volume", "volumes", names.len()),
            join_quote(&names)
        ),
    )
}

fn host_ports(pod: &Value, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut ports = BTreeSet::new();
    for c in containers(pod) {
        let mut valid = true;
        for p in items(c, "/ports") {
            let hp = p.get("hostPort").and_then(Value::as_i64).unwrap_or(0);
            if hp != 0 {
                valid = false;
                ports.insert(hp.to_string());
            }
        }
        if !valid {
            bad.push(name(c));
        }
    }
    if bad.is_empty() {
        return None;
    }
    let ports: Vec<String> = ports.into_iter().collect();
    violation(
        "hostPort",
        format!(
            "{} {} {} {}",
            containers_phrase(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize("hostPort", "hostPorts", ports.len()),
            ports.join(", ")
        ),
    )
}

fn privileged(pod: &Value, _: u32) -> Option<Violation> {
    let bad: Vec<String> = containers(pod)
        .filter(|c| flag(c, "/securityContext/privileged") == Some(true))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "privileged",
        format!(
            "{} must not set securityContext.privileged=true",
            containers_phrase(&bad)
        ),
    )
}

fn proc_mount(pod: &Value, _: u32) -> Option<Violation> {
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for c in containers(pod) {
        if let Some(t) = c.at("/securityContext/procMount").and_then(Value::as_str) {
            if t != "Default" {
                bad.push(name(c));
                types.insert(t.to_string());
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "procMount",
        format!(
            "{} must not set securityContext.procMount to {}",
            containers_phrase(&bad),
            join_quote(&types)
        ),
    )
}

fn se_linux(pod: &Value, minor: u32) -> Option<Violation> {
    let allowed = |t: &str| {
        matches!(
            t,
            "" | "container_t" | "container_init_t" | "container_kvm_t"
        ) || (minor >= 31 && t == "container_engine_t")
    };
    let mut bad_types = BTreeSet::new();
    let (mut set_user, mut set_role) = (false, false);
    let mut valid = |opts: &Value| {
        let mut ok = true;
        let t = str_at(opts, "/type");
        if !allowed(t) {
            ok = false;
            bad_types.insert(t.to_string());
        }
        if !str_at(opts, "/user").is_empty() {
            ok = false;
            set_user = true;
        }
        if !str_at(opts, "/role").is_empty() {
            ok = false;
            set_role = true;
        }
        ok
    };
    let mut setters = Vec::new();
    if let Some(o) = pod.at("/spec/securityContext/seLinuxOptions") {
        if o.is_object() && !valid(o) {
            setters.push("pod".to_string());
        }
    }
    let mut bad = Vec::new();
    for c in containers(pod) {
        if let Some(o) = c.at("/securityContext/seLinuxOptions") {
            if o.is_object() && !valid(o) {
                bad.push(name(c));
            }
        }
    }
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    let mut data = Vec::new();
    if !bad_types.is_empty() {
        let types: Vec<String> = bad_types.into_iter().collect();
        data.push(format!(
            "{} {}",
            pluralize("type", "types", types.len()),
            join_quote(&types)
        ));
        if set_user {
            data.push("user may not be set".to_string());
        }
        if set_role {
            data.push("role may not be set".to_string());
        }
    }
    violation(
        "seLinuxOptions",
        format!(
            "{} set forbidden securityContext.seLinuxOptions: {}",
            setters.join(" and "),
            data.join("; ")
        ),
    )
}

fn valid_seccomp(t: &str) -> bool {
    matches!(t, "RuntimeDefault" | "Localhost")
}

fn seccomp_baseline(pod: &Value, minor: u32) -> Option<Violation> {
    if minor < 19 {
        return seccomp_annotations(pod);
    }
    let (setters, values) = profile_types(pod, "seccompProfile", valid_seccomp);
    if setters.is_empty() {
        return None;
    }
    let values: Vec<String> = values.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "{} must not set securityContext.seccompProfile.type to {}",
            setters.join(" and "),
            join_quote(&values)
        ),
    )
}

/// The pre-1.19 form of the baseline seccomp check, on the alpha annotations.
fn seccomp_annotations(pod: &Value) -> Option<Violation> {
    const POD_KEY: &str = "seccomp.security.alpha.kubernetes.io/pod";
    const CONTAINER_PREFIX: &str = "container.seccomp.security.alpha.kubernetes.io/";
    let ok =
        |v: &str| v == "runtime/default" || v == "docker/default" || v.starts_with("localhost/");
    let mut bad = BTreeSet::new();
    if let Some(v) = annotation(pod, POD_KEY) {
        if !ok(v) {
            bad.insert(format!("{POD_KEY}={v:?}"));
        }
    }
    for c in containers(pod) {
        let key = format!("{CONTAINER_PREFIX}{}", str_at(c, "/name"));
        if let Some(v) = annotation(pod, &key) {
            if !ok(v) {
                bad.insert(format!("{key}={v:?}"));
            }
        }
    }
    if bad.is_empty() {
        return None;
    }
    let bad: Vec<String> = bad.into_iter().collect();
    violation(
        "seccompProfile",
        format!(
            "forbidden {} {}",
            pluralize("annotation", "annotations", bad.len()),
            bad.join(", ")
        ),
    )
}

fn safe_sysctl(name: &str, minor: u32) -> bool {
    match name {
        "kernel.shm_rmid_forced"
        | "net.ipv4.ip_local_port_range"
        | "net.ipv4.tcp_syncookies"
        | "net.ipv4.ping_group_range"
        | "net.ipv4.ip_unprivileged_port_start" => true,
        "net.ipv4.ip_local_reserved_ports" => minor >= 27,
        "net.ipv4.tcp_keepalive_time"
        | "net.ipv4.tcp_fin_timeout"
        | "net.ipv4.tcp_keepalive_intvl"
        | "net.ipv4.tcp_keepalive_probes" => minor >= 29,
        "net.ipv4.tcp_rmem" | "net.ipv4.tcp_wmem" => minor >= 32,
        _ => false,
    }
}

fn sysctls(pod: &Value, minor: u32) -> Option<Violation> {
    let bad: Vec<&str> = items(pod, "/spec/securityContext/sysctls")
        .iter()
        .map(|s| str_at(s, "/name"))
        .filter(|n| !safe_sysctl(n, minor))
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation("forbidden sysctls", bad.join(", "))
}

fn windows_host_process(pod: &Value, _: u32) -> Option<Violation> {
    let mut setters = Vec::new();
    if flag(pod, "/spec/securityContext/windowsOptions/hostProcess") == Some(true) {
        setters.push("pod".to_string());
    }
    let bad: Vec<String> = containers(pod)
        .filter(|c| flag(c, "/securityContext/windowsOptions/hostProcess") == Some(true))
        .map(name)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "hostProcess",
        format!(
            "{} must not set securityContext.windowsOptions.hostProcess=true",
            setters.join(" and ")
        ),
    )
}

fn allow_privilege_escalation(pod: &Value, minor: u32) -> Option<Violation> {
    if minor >= 25 && is_windows(pod) {
        return None;
    }
    let bad: Vec<String> = containers(pod)
        .filter(|c| flag(c, "/securityContext/allowPrivilegeEscalation") != Some(false))
        .map(name)
        .collect();
    if bad.is_empty() {
        return None;
    }
    violation(
        "allowPrivilegeEscalation != false",
        format!(
            "{} must set securityContext.allowPrivilegeEscalation=false",
            containers_phrase(&bad)
        ),
    )
}

fn capabilities_restricted(pod: &Value, minor: u32) -> Option<Violation> {
    if minor >= 25 && is_windows(pod) {
        return None;
    }
    let mut missing_drop = Vec::new();
    let mut adding = Vec::new();
    let mut caps = BTreeSet::new();
    for c in containers(pod) {
        let Some(capabilities) = c
            .at("/securityContext/capabilities")
            .filter(|v| v.is_object())
        else {
            missing_drop.push(name(c));
            continue;
        };
        if !items(capabilities, "/drop")
            .iter()
            .any(|d| d.as_str() == Some("ALL"))
        {
            missing_drop.push(name(c));
        }
        let mut added = false;
        for cap in items(capabilities, "/add") {
            let cap = cap.as_str().unwrap_or("");
            if cap != "NET_BIND_SERVICE" {
                added = true;
                caps.insert(cap.to_string());
            }
        }
        if added {
            adding.push(name(c));
        }
    }
    let mut details = Vec::new();
    if !missing_drop.is_empty() {
        details.push(format!(
            "{} must set securityContext.capabilities.drop=[\"ALL\"]",
            containers_phrase(&missing_drop)
        ));
    }
    if !adding.is_empty() {
        let caps: Vec<String> = caps.into_iter().collect();
        details.push(format!(
            "{} must not include {} in securityContext.capabilities.add",
            containers_phrase(&adding),
            join_quote(&caps)
        ));
    }
    if details.is_empty() {
        return None;
    }
    violation("unrestricted capabilities", details.join("; "))
}

/// Inline volume sources the restricted level allows.
const ALLOWED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// The restricted sources, in the order Kubernetes tests for them.
const RESTRICTED_VOLUMES: &[&str] = &[
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
];

fn restricted_volumes(pod: &Value, _: u32) -> Option<Violation> {
    let has = |v: &Value, k: &str| v.get(k).is_some_and(|s| !s.is_null());
    let mut bad = Vec::new();
    let mut types = BTreeSet::new();
    for v in items(pod, "/spec/volumes") {
        if ALLOWED_VOLUMES.iter().any(|k| has(v, k)) {
            continue;
        }
        bad.push(name(v));
        let t = RESTRICTED_VOLUMES
            .iter()
            .find(|k| has(v, k))
            .copied()
            .unwrap_or("unknown");
        types.insert(t.to_string());
    }
    if bad.is_empty() {
        return None;
    }
    let types: Vec<String> = types.into_iter().collect();
    violation(
        "restricted volume types",
        format!(
            "{} {} {} {} {}",
            pluralize("volume", "volumes", bad.len()),
            join_quote(&bad),
            pluralize("uses", "use", bad.len()),
            pluralize(
                "restricted volume type",
                "restricted volume types",
                types.len()
            ),
            join_quote(&types)
        ),
    )
}

fn run_as_non_root(pod: &Value, _: u32) -> Option<Violation> {
    let mut setters = Vec::new();
    let pod_level = flag(pod, "/spec/securityContext/runAsNonRoot");
    if pod_level == Some(false) {
        setters.push("pod".to_string());
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(pod) {
        match flag(c, "/securityContext/runAsNonRoot") {
            Some(false) => explicit.push(name(c)),
            Some(true) => {}
            None if pod_level != Some(true) => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "{} must not set securityContext.runAsNonRoot=false",
                setters.join(" and ")
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "runAsNonRoot != true",
            format!(
                "pod or {} must set securityContext.runAsNonRoot=true",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}

fn run_as_user(pod: &Value, _: u32) -> Option<Violation> {
    let is_root = |v: &Value, p: &str| v.at(p).and_then(Value::as_i64) == Some(0);
    let mut setters = Vec::new();
    if is_root(pod, "/spec/securityContext/runAsUser") {
        setters.push("pod".to_string());
    }
    let bad: Vec<String> = containers(pod)
        .filter(|c| is_root(c, "/securityContext/runAsUser"))
        .map(name)
        .collect();
    if !bad.is_empty() {
        setters.push(containers_phrase(&bad));
    }
    if setters.is_empty() {
        return None;
    }
    violation(
        "runAsUser=0",
        format!("{} must not set runAsUser=0", setters.join(" and ")),
    )
}

fn seccomp_restricted(pod: &Value, minor: u32) -> Option<Violation> {
    if minor >= 25 && is_windows(pod) {
        return None;
    }
    let mut setters = Vec::new();
    let mut values = BTreeSet::new();
    let mut pod_set = false;
    if let Some(t) = pod
        .at("/spec/securityContext/seccompProfile/type")
        .and_then(Value::as_str)
    {
        if valid_seccomp(t) {
            pod_set = true;
        } else {
            setters.push("pod".to_string());
            values.insert(t.to_string());
        }
    }
    let mut explicit = Vec::new();
    let mut implicit = Vec::new();
    for c in containers(pod) {
        match c
            .at("/securityContext/seccompProfile/type")
            .and_then(Value::as_str)
        {
            Some(t) if !valid_seccomp(t) => {
                explicit.push(name(c));
                values.insert(t.to_string());
            }
            Some(_) => {}
            None if !pod_set => implicit.push(name(c)),
            None => {}
        }
    }
    if !explicit.is_empty() {
        setters.push(containers_phrase(&explicit));
    }
    if !setters.is_empty() {
        let values: Vec<String> = values.into_iter().collect();
        return violation(
            "seccompProfile",
            format!(
                "{} must not set securityContext.seccompProfile.type to {}",
                setters.join(" and "),
                join_quote(&values)
            ),
        );
    }
    if !implicit.is_empty() {
        return violation(
            "seccompProfile",
            format!(
                "pod or {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\"",
                containers_phrase(&implicit)
            ),
        );
    }
    None
}
