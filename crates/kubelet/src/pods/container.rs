//! A container's CRI configuration: command and arguments with `$(VAR)` expanded, the
//! environment, mounts (volumes, /etc/hosts, the termination-message file), log path,
//! labels and annotations the kubelet reads back, resources and security context.

use std::collections::HashMap;
use std::path::PathBuf;

use capstan_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod};

use super::resources::linux_resources;
use super::runtime::{
    ANN_HASH, ANN_POD_DELETION_GRACE, ANN_POD_TERMINATION_GRACE, ANN_PORTS, ANN_PRESTOP,
    ANN_RESTART_COUNT, ANN_TERMINATION_MESSAGE_PATH, ANN_TERMINATION_MESSAGE_POLICY,
    LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID,
};
use super::sandbox::{
    ensure_hosts_file, log_directory, namespace_options, seccomp, supplemental_groups, write_mode,
};
use super::util::{container_hash, format_pod, pod_name, pod_namespace, pod_uid};
use crate::volumes::PodVolumes;
use crate::Kubelet;

pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// Paths a container without privileges cannot read (Kubernetes' defaults).
const MASKED_PATHS: [&str; 11] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The labels of a container.
pub fn container_labels(pod: &Pod, c: &Container) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_POD_NAME.to_string(), pod_name(pod).to_string()),
        (
            LABEL_POD_NAMESPACE.to_string(),
            pod_namespace(pod).to_string(),
        ),
        (LABEL_POD_UID.to_string(), pod_uid(pod).to_string()),
        (LABEL_CONTAINER_NAME.to_string(), c.name.clone()),
    ])
}

/// The annotations of a container: what the kubelet needs to manage it later, even without
/// the pod object.
pub fn container_annotations(
    pod: &Pod,
    c: &Container,
    restart_count: i32,
) -> HashMap<String, String> {
    let mut a = HashMap::new();
    a.insert(ANN_HASH.to_string(), container_hash(c));
    a.insert(ANN_RESTART_COUNT.to_string(), restart_count.to_string());
    a.insert(
        ANN_TERMINATION_MESSAGE_PATH.to_string(),
        termination_message_path(c),
    );
    a.insert(
        ANN_TERMINATION_MESSAGE_POLICY.to_string(),
        c.termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    if let Some(g) = pod.metadata.deletion_grace_period_seconds {
        a.insert(ANN_POD_DELETION_GRACE.to_string(), g.to_string());
    }
    if let Some(g) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        a.insert(ANN_POD_TERMINATION_GRACE.to_string(), g.to_string());
    }
    if let Some(pre) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        if let Ok(j) = serde_json::to_string(pre) {
            a.insert(ANN_PRESTOP.to_string(), j);
        }
    }
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        if let Ok(j) = serde_json::to_string(ports) {
            a.insert(ANN_PORTS.to_string(), j);
        }
    }
    a
}

pub fn termination_message_path(c: &Container) -> String {
    c.termination_message_path
        .clone()
        .unwrap_or_else(|| DEFAULT_TERMINATION_MESSAGE_PATH.into())
}

/// The user an image runs as: Some(uid), or a user name, or root when it says nothing.
pub async fn image_user(k: &Kubelet, image: &str) -> Result<(Option<i64>, String), String> {
    let r = k
        .runtime
        .image_status(cri::ImageStatusRequest {
            image: Some(cri::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .map_err(|e| e.message().to_string())?;
    let Some(img) = r.image else {
        return Err(format!("image {image:?} not found"));
    };
    if let Some(uid) = img.uid {
        return Ok((Some(uid.value), String::new()));
    }
    if !img.username.is_empty() {
        return Ok((None, img.username));
    }
    Ok((Some(0), String::new()))
}

/// The runAsNonRoot check: Err is the CreateContainerConfigError message.
pub fn verify_run_as_non_root(
    pod: &Pod,
    c: &Container,
    uid: Option<i64>,
    username: &str,
) -> Result<(), String> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let non_root = csc
        .and_then(|s| s.run_as_non_root)
        .or_else(|| psc.and_then(|s| s.run_as_non_root))
        .unwrap_or(false);
    if !non_root {
        return Ok(());
    }
    let run_as = csc
        .and_then(|s| s.run_as_user)
        .or_else(|| psc.and_then(|s| s.run_as_user));
    if let Some(u) = run_as {
        if u == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy (pod: {:?}, container: {})",
                format_pod(pod),
                c.name
            ));
        }
        return Ok(());
    }
    match uid {
        Some(0) => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {:?}, container: {})",
            format_pod(pod),
            c.name
        )),
        None if !username.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({username}), cannot verify user is non-root (pod: {:?}, container: {})",
            format_pod(pod),
            c.name
        )),
        _ => Ok(()),
    }
}

/// The Linux security context of a container: the pod's settings with the container's
/// overriding them.
pub fn security_context(
    k: &Kubelet,
    pod: &Pod,
    c: &Container,
) -> cri::LinuxContainerSecurityContext {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let csc = c.security_context.as_ref();
    let privileged = csc.and_then(|s| s.privileged).unwrap_or(false);
    let unmasked = csc.and_then(|s| s.proc_mount.as_deref()) == Some("Unmasked");
    let (masked, readonly) = if privileged || unmasked {
        (Vec::new(), Vec::new())
    } else {
        (
            MASKED_PATHS.iter().map(|s| s.to_string()).collect(),
            READONLY_PATHS.iter().map(|s| s.to_string()).collect(),
        )
    };
    let selinux = csc
        .and_then(|s| s.se_linux_options.as_ref())
        .or_else(|| psc.and_then(|s| s.se_linux_options.as_ref()));
    cri::LinuxContainerSecurityContext {
        capabilities: csc
            .and_then(|s| s.capabilities.as_ref())
            .map(|caps| cri::Capability {
                add_capabilities: caps.add.clone().unwrap_or_default(),
                drop_capabilities: caps.drop.clone().unwrap_or_default(),
                ..Default::default()
            }),
        privileged,
        namespace_options: Some(namespace_options(pod)),
        selinux_options: selinux.map(|o| cri::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        }),
        run_as_user: csc
            .and_then(|s| s.run_as_user)
            .or_else(|| psc.and_then(|s| s.run_as_user))
            .map(|value| cri::Int64Value { value }),
        run_as_group: csc
            .and_then(|s| s.run_as_group)
            .or_else(|| psc.and_then(|s| s.run_as_group))
            .map(|value| cri::Int64Value { value }),
        readonly_rootfs: csc
            .and_then(|s| s.read_only_root_filesystem)
            .unwrap_or(false),
        supplemental_groups: supplemental_groups(pod),
        no_new_privs: csc.and_then(|s| s.allow_privilege_escalation) == Some(false),
        masked_paths: masked,
        readonly_paths: readonly,
        seccomp: Some(seccomp(
            k,
            csc.and_then(|s| s.seccomp_profile.as_ref())
                .or_else(|| psc.and_then(|s| s.seccomp_profile.as_ref())),
        )),
        ..Default::default()
    }
}

/// Create the file a container writes its termination message to:
/// `POD_DIR/containers/<name>/<random>`.
fn termination_log_file(k: &Kubelet, pod: &Pod, c: &Container) -> std::io::Result<PathBuf> {
    let dir = k.pod_dir(pod_uid(pod)).join("containers").join(&c.name);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(format!("{:08x}", rand::random::<u32>()));
    write_mode(&path, b"", 0o666)?;
    Ok(path)
}

/// Everything a container config is made from besides the pod and container.
pub struct ConfigInputs<'a> {
    pub restart_count: i32,
    pub image_ref: &'a str,
    pub pod_ips: &'a [String],
    pub env: &'a [(String, String)],
    pub volumes: &'a PodVolumes,
    pub memory_capacity: i64,
}

/// The container's CRI configuration. Err is a CreateContainerConfigError message.
pub fn container_config(
    k: &Kubelet,
    pod: &Pod,
    c: &Container,
    i: &ConfigInputs,
) -> Result<cri::ContainerConfig, String> {
    let command: Vec<String> = c
        .command
        .iter()
        .flatten()
        .map(|s| crate::env::expand(s, i.env))
        .collect();
    let args: Vec<String> = c
        .args
        .iter()
        .flatten()
        .map(|s| crate::env::expand(s, i.env))
        .collect();

    let log_dir = log_directory(k, pod).join(&c.name);
    std::fs::create_dir_all(&log_dir).map_err(|e| {
        format!(
            "create container log directory for container {} failed: {e}",
            c.name
        )
    })?;

    let mut mounts = i.volumes.mounts(pod, c)?;
    let mounts_hosts = c
        .volume_mounts
        .iter()
        .flatten()
        .any(|m| m.mount_path == "/etc/hosts");
    if !i.pod_ips.is_empty() && !mounts_hosts {
        let path = ensure_hosts_file(k, pod, i.pod_ips)
            .map_err(|e| format!("failed to write /etc/hosts for the pod: {e}"))?;
        mounts.push(cri::Mount {
            container_path: "/etc/hosts".into(),
            host_path: path.to_string_lossy().into_owned(),
            readonly: false,
            selinux_relabel: true,
            ..Default::default()
        });
    }
    let tmp = termination_message_path(c);
    if !tmp.is_empty() {
        match termination_log_file(k, pod, c) {
            Ok(path) => mounts.push(cri::Mount {
                container_path: tmp,
                host_path: path.to_string_lossy().into_owned(),
                ..Default::default()
            }),
            Err(e) => {
                tracing::warn!(error = %e, container = %c.name, "cannot create the termination-log file")
            }
        }
    }

    let linux = cri::LinuxContainerConfig {
        resources: Some(linux_resources(pod, c, i.memory_capacity)),
        security_context: Some(security_context(k, pod, c)),
    };

    Ok(cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: c.name.clone(),
            attempt: i.restart_count.max(0) as u32,
        }),
        image: Some(cri::ImageSpec {
            image: i.image_ref.to_string(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command,
        args,
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: i
            .env
            .iter()
            .map(|(key, value)| cri::KeyValue {
                key: key.clone(),
                value: value.clone(),
            })
            .collect(),
        mounts,
        labels: container_labels(pod, c),
        annotations: container_annotations(pod, c, i.restart_count),
        log_path: format!("{}/{}.log", c.name, i.restart_count),
        stdin: c.stdin.unwrap_or(false),
        stdin_once: c.stdin_once.unwrap_or(false),
        tty: c.tty.unwrap_or(false),
        linux: Some(linux),
        ..Default::default()
    })
}

/// The restart count of a new container that has no predecessor in the runtime: one past
/// the highest `<n>.log` in its log directory (the runtime may have lost its containers).
pub fn restart_count_from_logs(k: &Kubelet, pod: &Pod, name: &str) -> i32 {
    let dir = log_directory(k, pod).join(name);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let (num, rest) = name.split_once('.')?;
            if num.is_empty()
                || !num.bytes().all(|b| b.is_ascii_digit())
                || !rest.starts_with("log")
            {
                return None;
            }
            num.parse::<i32>().ok().map(|n| n.saturating_add(1))
        })
        .max()
        .unwrap_or(0)
}
