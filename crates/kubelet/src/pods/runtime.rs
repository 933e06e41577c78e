//! What the runtime holds for one pod: its sandboxes and containers as CRI reports them,
//! read back through the labels and annotations the kubelet put on them.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};

use capstan_cri::v1 as cri;
use capstan_cri::{Code, Runtime, Status};

/// Labels on every sandbox and container the kubelet makes.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Annotations on containers.
pub const ANN_HASH: &str = "io.kubernetes.container.hash";
pub const ANN_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const ANN_TERMINATION_MESSAGE_PATH: &str = "io.kubernetes.container.terminationMessagePath";
pub const ANN_TERMINATION_MESSAGE_POLICY: &str = "io.kubernetes.container.terminationMessagePolicy";
pub const ANN_PRESTOP: &str = "io.kubernetes.container.preStopHandler";
pub const ANN_PORTS: &str = "io.kubernetes.container.ports";
pub const ANN_POD_DELETION_GRACE: &str = "io.kubernetes.pod.deletionGracePeriod";
pub const ANN_POD_TERMINATION_GRACE: &str = "io.kubernetes.pod.terminationGracePeriod";

/// The most of a termination message file the kubelet reads.
const MAX_TERMINATION_MESSAGE: u64 = 4096;
/// With FallbackToLogsOnError: at most this many lines and bytes from the log's tail.
const MAX_LOG_LINES: usize = 80;
const MAX_LOG_BYTES: usize = 2048;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CState {
    Created,
    Running,
    Exited,
    Unknown,
}

impl CState {
    pub fn from_cri(s: i32) -> CState {
        match cri::ContainerState::try_from(s) {
            Ok(cri::ContainerState::ContainerCreated) => CState::Created,
            Ok(cri::ContainerState::ContainerRunning) => CState::Running,
            Ok(cri::ContainerState::ContainerExited) => CState::Exited,
            _ => CState::Unknown,
        }
    }
}

/// One runtime container of a pod.
#[derive(Clone, Debug, Default)]
pub struct ContainerInfo {
    pub id: String,
    pub name: String,
    pub state: Option<CState>,
    /// Nanoseconds since the epoch; 0 when unset.
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
    pub hash: String,
    pub restart_count: i32,
    pub sandbox_id: String,
}

impl ContainerInfo {
    pub fn state(&self) -> CState {
        self.state.unwrap_or(CState::Unknown)
    }

    /// `containerd://<id>`: how container IDs appear in the API.
    pub fn api_id(&self) -> String {
        format!("containerd://{}", self.id)
    }
}

/// Everything the runtime has for one pod; sandboxes and containers newest first.
#[derive(Clone, Debug, Default)]
pub struct RuntimePod {
    pub sandboxes: Vec<cri::PodSandboxStatus>,
    pub containers: Vec<ContainerInfo>,
    /// The IPs of the newest sandbox, when it is ready.
    pub ips: Vec<String>,
}

impl RuntimePod {
    /// The newest container of that name.
    pub fn find(&self, name: &str) -> Option<&ContainerInfo> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The containers that are running (or in an unknown state: they may be).
    pub fn running(&self) -> impl Iterator<Item = &ContainerInfo> {
        self.containers
            .iter()
            .filter(|c| matches!(c.state(), CState::Running | CState::Unknown))
    }
}

pub fn is_not_found(s: &Status) -> bool {
    s.code() == Code::NotFound
}

fn label_filter(uid: &str) -> HashMap<String, String> {
    HashMap::from([(LABEL_POD_UID.to_string(), uid.to_string())])
}

/// Read one pod's sandboxes and containers from the runtime.
pub async fn pod_status(rt: &dyn Runtime, uid: &str) -> Result<RuntimePod, Status> {
    let sandboxes = rt
        .list_pod_sandbox(cri::ListPodSandboxRequest {
            filter: Some(cri::PodSandboxFilter {
                label_selector: label_filter(uid),
                ..Default::default()
            }),
        })
        .await?
        .items;
    let mut out = RuntimePod::default();
    for sb in sandboxes {
        match rt
            .pod_sandbox_status(cri::PodSandboxStatusRequest {
                pod_sandbox_id: sb.id.clone(),
                verbose: false,
            })
            .await
        {
            Ok(r) => {
                if let Some(s) = r.status {
                    out.sandboxes.push(s);
                }
            }
            Err(e) if is_not_found(&e) => {}
            Err(e) => return Err(e),
        }
    }
    out.sandboxes
        .sort_by_key(|s| std::cmp::Reverse(s.created_at));
    if let Some(s) = out.sandboxes.first() {
        if s.state == cri::PodSandboxState::SandboxReady as i32 {
            out.ips = sandbox_ips(s);
        }
    }

    let containers = rt
        .list_containers(cri::ListContainersRequest {
            filter: Some(cri::ContainerFilter {
                label_selector: label_filter(uid),
                ..Default::default()
            }),
        })
        .await?
        .containers;
    for c in containers {
        let status = match rt
            .container_status(cri::ContainerStatusRequest {
                container_id: c.id.clone(),
                verbose: false,
            })
            .await
        {
            Ok(r) => r.status,
            Err(e) if is_not_found(&e) => continue,
            Err(e) => return Err(e),
        };
        let Some(status) = status else { continue };
        let mut info = container_info(&status);
        info.sandbox_id = c.pod_sandbox_id.clone();
        out.containers.push(info);
    }
    out.containers
        .sort_by_key(|c| std::cmp::Reverse(c.created_at));
    Ok(out)
}

/// The IPs a sandbox reports (primary first).
pub fn sandbox_ips(s: &cri::PodSandboxStatus) -> Vec<String> {
    let Some(n) = s.network.as_ref() else {
        return Vec::new();
    };
    let mut ips = Vec::new();
    if !n.ip.is_empty() {
        ips.push(n.ip.clone());
    }
    for ip in &n.additional_ips {
        if !ip.ip.is_empty() && !ips.contains(&ip.ip) {
            ips.push(ip.ip.clone());
        }
    }
    ips
}

/// A CRI container status as the kubelet sees it, with the termination message filled in.
pub fn container_info(s: &cri::ContainerStatus) -> ContainerInfo {
    let ann = &s.annotations;
    let state = CState::from_cri(s.state);
    let mut info = ContainerInfo {
        id: s.id.clone(),
        name: s
            .labels
            .get(LABEL_CONTAINER_NAME)
            .cloned()
            .or_else(|| s.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default(),
        state: Some(state),
        created_at: s.created_at,
        started_at: if state != CState::Created {
            s.started_at
        } else {
            0
        },
        image: s
            .image
            .as_ref()
            .map(|i| i.image.clone())
            .unwrap_or_default(),
        // The digested reference is what the API shows as imageID.
        image_ref: s.image_ref.clone(),
        hash: ann.get(ANN_HASH).cloned().unwrap_or_default(),
        restart_count: ann
            .get(ANN_RESTART_COUNT)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        ..Default::default()
    };
    if state == CState::Exited {
        info.reason = s.reason.clone();
        info.message = s.message.clone();
        info.exit_code = s.exit_code;
        info.finished_at = s.finished_at;
        let path = ann
            .get(ANN_TERMINATION_MESSAGE_PATH)
            .cloned()
            .unwrap_or_default();
        let fallback = ann
            .get(ANN_TERMINATION_MESSAGE_POLICY)
            .is_some_and(|p| p == "FallbackToLogsOnError")
            && s.exit_code != 0
            && s.reason != "ContainerCannotRun";
        let (mut text, check_logs) = termination_message(s, &path, fallback);
        if check_logs {
            text = log_tail(&s.log_path);
        }
        if !text.is_empty() {
            if !info.message.is_empty() {
                info.message.push_str(": ");
            }
            info.message.push_str(&text);
        }
    }
    info
}

/// The message the container wrote to its termination-message file, and whether the log
/// should be read instead.
fn termination_message(s: &cri::ContainerStatus, path: &str, fallback: bool) -> (String, bool) {
    if path.is_empty() {
        return (String::new(), fallback);
    }
    let Some(m) = s.mounts.iter().find(|m| m.container_path == path) else {
        return (String::new(), fallback);
    };
    match std::fs::File::open(&m.host_path) {
        Ok(f) => {
            let mut buf = Vec::new();
            if let Err(e) = f.take(MAX_TERMINATION_MESSAGE).read_to_end(&mut buf) {
                return (
                    format!("Error on reading termination log {}: {e}", m.host_path),
                    false,
                );
            }
            let text = String::from_utf8_lossy(&buf).into_owned();
            let empty = text.is_empty();
            (text, fallback && empty)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (String::new(), fallback),
        Err(e) => (
            format!("Error on reading termination log {}: {e}", m.host_path),
            false,
        ),
    }
}

/// The end of a CRI log file (`<time> <stream> <P|F> <text>` lines): at most 80 lines and
/// 2048 bytes.
pub fn log_tail(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    let mut f = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("Error on reading termination message from logs: {e}"),
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(64 * 1024);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    if f.read_to_end(&mut buf).is_err() {
        return String::new();
    }
    let text = String::from_utf8_lossy(&buf);
    let mut raw: Vec<&str> = text.lines().collect();
    if start > 0 && !raw.is_empty() {
        raw.remove(0);
    }
    // Join partial lines, keep the content.
    let mut lines: Vec<String> = Vec::new();
    let mut partial = String::new();
    for l in raw {
        let mut parts = l.splitn(4, ' ');
        let (_, _, tag, content) = (parts.next(), parts.next(), parts.next(), parts.next());
        let content = content.unwrap_or_default();
        partial.push_str(content);
        if tag != Some("P") {
            lines.push(std::mem::take(&mut partial));
        }
    }
    if !partial.is_empty() {
        lines.push(partial);
    }
    let from = lines.len().saturating_sub(MAX_LOG_LINES);
    let mut out = String::new();
    for l in &lines[from..] {
        out.push_str(l);
        out.push('\n');
    }
    if out.len() > MAX_LOG_BYTES {
        let mut cut = out.len() - MAX_LOG_BYTES;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_string();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_tail_keeps_content_and_joins_partials() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0.log");
        std::fs::write(
            &p,
            "2024-01-01T00:00:00Z stdout F one\n\
             2024-01-01T00:00:01Z stderr P tw\n\
             2024-01-01T00:00:01Z stderr F o\n",
        )
        .unwrap();
        assert_eq!(log_tail(p.to_str().unwrap()), "one\ntwo\n");
        let many: String = (0..200)
            .map(|i| format!("2024-01-01T00:00:00Z stdout F line{i}\n"))
            .collect();
        std::fs::write(&p, many).unwrap();
        let t = log_tail(p.to_str().unwrap());
        assert!(t.starts_with("line120\n"), "{t}");
        assert!(t.ends_with("line199\n"));
    }

    #[test]
    fn termination_message_from_file_or_logs() {
        let dir = tempfile::tempdir().unwrap();
        let msg = dir.path().join("msg");
        std::fs::write(&msg, "bye").unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(&log, "2024-01-01T00:00:00Z stdout F boom\n").unwrap();
        let mut s = cri::ContainerStatus {
            id: "c1".into(),
            state: cri::ContainerState::ContainerExited as i32,
            exit_code: 2,
            reason: "Error".into(),
            log_path: log.to_string_lossy().into(),
            labels: HashMap::from([(LABEL_CONTAINER_NAME.into(), "app".into())]),
            annotations: HashMap::from([
                (
                    ANN_TERMINATION_MESSAGE_PATH.into(),
                    "/dev/termination-log".into(),
                ),
                (ANN_TERMINATION_MESSAGE_POLICY.into(), "File".into()),
                (ANN_RESTART_COUNT.into(), "3".into()),
            ]),
            mounts: vec![cri::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: msg.to_string_lossy().into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let i = container_info(&s);
        assert_eq!(i.name, "app");
        assert_eq!(i.restart_count, 3);
        assert_eq!(i.message, "bye");
        assert_eq!(i.state(), CState::Exited);

        std::fs::write(&msg, "").unwrap();
        s.annotations.insert(
            ANN_TERMINATION_MESSAGE_POLICY.into(),
            "FallbackToLogsOnError".into(),
        );
        assert_eq!(container_info(&s).message, "boom\n");
        s.exit_code = 0;
        assert_eq!(container_info(&s).message, "");
    }
}
