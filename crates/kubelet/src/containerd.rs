//! containerd as a child process of capstan, with capstan's own configuration.
//!
//! `capstan up` runs a private containerd when no runtime endpoint is given: its configuration
//! file, content store and log live in `DATA/containerd` ([`Layout`]), its sockets and runtime
//! state (runc's state, network namespaces) in a short directory under `/run/capstan` (Unix
//! socket paths are limited to 108 bytes). The CRI plugin is told:
//!
//! - the sandbox image is [`crate::pause::IMAGE`], and `registry.k8s.io` is mirrored by capstan's
//!   own pause registry on loopback (containerd falls back to the real host for anything the
//!   mirror does not have);
//! - CNI plugins are in /usr/lib/cni (or /opt/cni/bin), the network configuration in
//!   `DATA/containerd/cni` (the kubelet writes it once the node has a pod CIDR);
//! - streaming (exec, attach, port-forward) listens on a random loopback port, not 10010;
//! - `restrict_oom_score_adj` when this process cannot lower OOM scores (no CAP_SYS_RESOURCE).
//!
//! [`Gate`] wraps the runtime handed to the kubelet so that, when the cluster stops, the
//! kubelet can no longer start anything while [`remove_all_sandboxes`] removes every pod.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use capstan_cri::{v1, Runtime, Status};

/// How long containerd may take to answer CRI calls after it starts.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long containerd may take to exit after SIGTERM before it is killed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// The message when no runtime can be found.
pub const NO_RUNTIME: &str = "capstan up needs a container runtime: install containerd \
     (apt install containerd runc containernetworking-plugins) or pass \
     --container-runtime-endpoint";

/// Where a managed containerd keeps everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// `DATA/containerd`: config.toml, containerd.log, the CNI configuration directory.
    pub dir: PathBuf,
    /// containerd's root (content store, snapshots): `DATA/containerd/root`.
    pub root: PathBuf,
    /// containerd's state: sockets, runc state, network namespaces (`/run/capstan/containerd`).
    pub state: PathBuf,
}

impl Layout {
    /// The layout for data directory `data_dir`, with runtime state in `state`.
    pub fn new(data_dir: &Path, state: PathBuf) -> Layout {
        let dir = data_dir.join("containerd");
        Layout {
            root: dir.join("root"),
            dir,
            state,
        }
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.join("config.toml")
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.join("containerd.log")
    }

    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir.join("cni")
    }

    pub fn socket(&self) -> PathBuf {
        self.state.join("containerd.sock")
    }

    pub fn runc_root(&self) -> PathBuf {
        self.state.join("runc")
    }

    /// The CRI endpoint: `unix://STATE/containerd.sock`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }
}

/// The state directory of the managed containerd of `data_dir`: `/run/capstan/containerd` for
/// the default data directory, `/run/capstan/containerd-<hash of the path>` for any other, so
/// that two clusters on one machine do not share a containerd.
pub fn state_dir(data_dir: &Path, default_data_dir: &Path) -> PathBuf {
    let base = Path::new("/run/capstan");
    if data_dir == default_data_dir {
        return base.join("containerd");
    }
    let d = ring::digest::digest(
        &ring::digest::SHA256,
        data_dir.as_os_str().as_encoded_bytes(),
    );
    let short: String = d.as_ref()[..4].iter().map(|b| format!("{b:02x}")).collect();
    base.join(format!("containerd-{short}"))
}

/// The settings of the managed containerd that are not paths.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The pause registry's endpoint (`http://127.0.0.1:PORT`), mirroring registry.k8s.io.
    pub pause_mirror: Option<String>,
    /// Registries (`HOST:PORT`) to pull from over plain HTTP.
    pub insecure_registries: Vec<String>,
    /// Set `restrict_oom_score_adj` (see [`needs_restricted_oom_score_adj`]).
    pub restrict_oom_score_adj: bool,
    /// The CNI plugin directory.
    pub cni_bin_dir: PathBuf,
}

/// The path of the `containerd` binary on PATH, if installed.
pub fn find_binary() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join("containerd"))
        .find(|p| p.is_file())
}

/// Where the CNI plugins are: /usr/lib/cni (Debian's package) or /opt/cni/bin (upstream).
pub fn cni_bin_dir() -> PathBuf {
    ["/usr/lib/cni", "/opt/cni/bin"]
        .iter()
        .map(PathBuf::from)
        .find(|d| d.join("bridge").is_file())
        .unwrap_or_else(|| PathBuf::from("/opt/cni/bin"))
}

/// Whether containerd must not set OOM scores below its own: true unless this process holds
/// CAP_SYS_RESOURCE (in containers and user namespaces it often does not).
pub fn needs_restricted_oom_score_adj() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    !has_capability(&status, 24)
}

/// Whether the effective capability set in a /proc/PID/status text holds capability `bit`.
fn has_capability(status: &str, bit: u32) -> bool {
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1u64 << bit) != 0)
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// containerd's configuration (version 2) for this layout.
pub fn config(layout: &Layout, settings: &Settings) -> String {
    let p = |path: PathBuf| toml_str(&path.to_string_lossy());
    let cri = "plugins.\"io.containerd.grpc.v1.cri\"";
    let mut mirrors = String::new();
    if let Some(endpoint) = &settings.pause_mirror {
        mirrors.push_str(&format!(
            "    [{cri}.registry.mirrors.\"registry.k8s.io\"]\n      endpoint = [{}]\n",
            toml_str(endpoint)
        ));
    }
    for host in &settings.insecure_registries {
        mirrors.push_str(&format!(
            "    [{cri}.registry.mirrors.{}]\n      endpoint = [{}]\n",
            toml_str(host),
            toml_str(&format!("http://{host}"))
        ));
    }
    format!(
        r#"# Written by capstan up at every start; edits are lost.
version = 2
root = {root}
state = {state}
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = {socket}

[ttrpc]
  address = {ttrpc}

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = {opt}
  [{cri}]
    sandbox_image = {sandbox}
    netns_mounts_under_state_dir = true
    restrict_oom_score_adj = {restrict}
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [{cri}.cni]
      bin_dir = {cni_bin}
      conf_dir = {cni_conf}
    [{cri}.containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [{cri}.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [{cri}.containerd.runtimes.runc.options]
          Root = {runc_root}
{mirrors}"#,
        root = p(layout.root.clone()),
        state = p(layout.state.clone()),
        socket = p(layout.socket()),
        ttrpc = p(layout.state.join("containerd.sock.ttrpc")),
        opt = p(layout.dir.join("opt")),
        sandbox = toml_str(crate::pause::IMAGE),
        restrict = settings.restrict_oom_score_adj,
        cni_bin = p(settings.cni_bin_dir.clone()),
        cni_conf = p(layout.cni_conf_dir()),
        runc_root = p(layout.runc_root()),
    )
}

/// Ask the runtime at `endpoint` for its version (5 s at most).
pub async fn version(endpoint: &str) -> Result<v1::VersionResponse, String> {
    let cri = capstan_cri::Cri::connect(endpoint)?;
    let call = cri.version(v1::VersionRequest {
        version: "v1".into(),
    });
    match tokio::time::timeout(Duration::from_secs(5), call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.message().to_string()),
        Err(_) => Err("no answer within 5s".into()),
    }
}

/// A running managed containerd.
pub struct Containerd {
    layout: Layout,
    child: tokio::process::Child,
}

impl Containerd {
    /// Write the configuration, start `binary` with it and wait until it answers CRI calls.
    pub async fn start(
        binary: &Path,
        layout: Layout,
        settings: &Settings,
    ) -> anyhow::Result<Containerd> {
        for dir in [
            &layout.dir,
            &layout.root,
            &layout.state,
            &layout.cni_conf_dir(),
        ] {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        if layout.socket().exists() && version(&layout.endpoint()).await.is_ok() {
            anyhow::bail!(
                "a containerd already serves {} (is another capstan up running on this data \
                 directory?)",
                layout.socket().display()
            );
        }
        std::fs::write(layout.config_path(), config(&layout, settings))
            .with_context(|| format!("writing {}", layout.config_path().display()))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(layout.log_path())
            .with_context(|| format!("opening {}", layout.log_path().display()))?;
        let child = tokio::process::Command::new(binary)
            .arg("--config")
            .arg(layout.config_path())
            .args(["--log-level", "info"])
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            // Keep it out of our process group: a terminal's Ctrl-C is ours to handle, and
            // containerd must outlive it long enough to remove the pods.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let mut containerd = Containerd { layout, child };
        containerd.wait_ready().await?;
        Ok(containerd)
    }

    async fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + START_TIMEOUT;
        let endpoint = self.layout.endpoint();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                anyhow::bail!(
                    "containerd exited ({status}) while starting; its log ({}) ends with:\n{}",
                    self.layout.log_path().display(),
                    self.log_tail(15)
                );
            }
            match version(&endpoint).await {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => anyhow::bail!(
                    "containerd does not answer on {endpoint} after {START_TIMEOUT:?} ({e}); \
                     see {}",
                    self.layout.log_path().display()
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    pub fn endpoint(&self) -> String {
        self.layout.endpoint()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The last `lines` lines of containerd's log.
    pub fn log_tail(&self, lines: usize) -> String {
        let log = std::fs::read_to_string(self.layout.log_path()).unwrap_or_default();
        let all: Vec<&str> = log.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    /// Whether containerd has exited (and how).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, wait up to [`STOP_TIMEOUT`], then SIGKILL.
    pub async fn stop(mut self) {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) with a pid we started and have not reaped yet.
            unsafe {
                libc::kill(pid as libc::pid_t, libc::SIGTERM);
            }
        }
        match tokio::time::timeout(STOP_TIMEOUT, self.child.wait()).await {
            Ok(_) => {}
            Err(_) => {
                tracing::warn!("containerd did not stop after SIGTERM; killing it");
                let _ = self.child.kill().await;
            }
        }
    }
}

/// Stop and remove every pod sandbox (and so every container) the runtime has, so that
/// the CNI plugins release the pods' addresses and nothing outlives the cluster. Returns how
/// many sandboxes were removed and the errors met.
pub async fn remove_all_sandboxes(runtime: &dyn Runtime) -> (usize, Vec<String>) {
    let mut errors = Vec::new();
    let sandboxes = match runtime
        .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
        .await
    {
        Ok(r) => r.items,
        Err(e) => return (0, vec![format!("listing pod sandboxes: {}", e.message())]),
    };
    let mut removed = 0;
    for sandbox in sandboxes {
        let id = sandbox.id;
        if let Err(e) = runtime
            .stop_pod_sandbox(v1::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
        {
            errors.push(format!("stopping sandbox {id}: {}", e.message()));
        }
        match runtime
            .remove_pod_sandbox(v1::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
        {
            Ok(_) => removed += 1,
            Err(e) => errors.push(format!("removing sandbox {id}: {}", e.message())),
        }
    }
    (removed, errors)
}

/// A runtime that can be closed: after [`Gate::close`], every call fails with UNAVAILABLE
/// without reaching the runtime. Used to stop the kubelet from creating anything while the
/// cluster shuts down.
pub struct Gate {
    inner: Arc<dyn Runtime>,
    closed: AtomicBool,
    in_flight: AtomicUsize,
}

impl Gate {
    pub fn new(inner: Arc<dyn Runtime>) -> Arc<Gate> {
        Arc::new(Gate {
            inner,
            closed: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
        })
    }

    /// Refuse new calls, and wait (up to `timeout`) for the calls under way to finish.
    pub async fn close(&self, timeout: Duration) {
        self.closed.store(true, Ordering::SeqCst);
        let deadline = Instant::now() + timeout;
        while self.in_flight.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    fn enter(&self) -> Result<InFlight<'_>, Status> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(&self.in_flight);
        if self.closed.load(Ordering::SeqCst) {
            return Err(Status::unavailable("the kubelet is stopping"));
        }
        Ok(guard)
    }
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

macro_rules! gated {
    ($( $service:ident { $( $method:ident($req:ident) -> $resp:ident; )* } )*) => {
        #[async_trait::async_trait]
        impl Runtime for Gate {
            $($(
                async fn $method(&self, req: v1::$req) -> capstan_cri::Result<v1::$resp> {
                    let _guard = self.enter()?;
                    self.inner.$method(req).await
                }
            )*)*
        }
    };
}

capstan_cri::cri_rpcs!(gated);

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    #[test]
    fn config_keeps_state_short_and_mirrors_registry_k8s_io() {
        let layout = Layout::new(
            Path::new("/var/lib/capstan"),
            PathBuf::from("/run/capstan/containerd"),
        );
        let settings = Settings {
            pause_mirror: Some("http://127.0.0.1:4321".into()),
            insecure_registries: vec!["localhost:5000".into()],
            restrict_oom_score_adj: true,
            cni_bin_dir: PathBuf::from("/usr/lib/cni"),
        };
        let c = config(&layout, &settings);
        assert!(
            c.contains("root = \"/var/lib/capstan/containerd/root\""),
            "{c}"
        );
        assert!(c.contains("state = \"/run/capstan/containerd\""));
        assert!(c.contains("address = \"/run/capstan/containerd/containerd.sock\""));
        assert!(c.contains("Root = \"/run/capstan/containerd/runc\""));
        assert!(c.contains("conf_dir = \"/var/lib/capstan/containerd/cni\""));
        assert!(c.contains("bin_dir = \"/usr/lib/cni\""));
        assert!(c.contains("sandbox_image = \"registry.k8s.io/pause:3.10\""));
        assert!(c.contains("restrict_oom_score_adj = true"));
        assert!(c.contains("stream_server_port = \"0\""));
        assert!(c.contains(
            "registry.mirrors.\"registry.k8s.io\"]\n      endpoint = [\"http://127.0.0.1:4321\"]"
        ));
        assert!(c.contains(
            "registry.mirrors.\"localhost:5000\"]\n      endpoint = [\"http://localhost:5000\"]"
        ));
        assert_eq!(
            layout.endpoint(),
            "unix:///run/capstan/containerd/containerd.sock"
        );
        let plain = config(&layout, &Settings::default());
        assert!(plain.contains("restrict_oom_score_adj = false"));
        assert!(!plain.contains("mirrors"));
        // Odd characters in paths cannot break the TOML.
        assert_eq!(toml_str("a\"b\\c"), "\"a\\\"b\\\\c\"");
    }

    #[test]
    fn state_dirs_are_short_and_distinct() {
        let default = Path::new("/var/lib/capstan");
        assert_eq!(
            state_dir(default, default),
            PathBuf::from("/run/capstan/containerd")
        );
        let a = state_dir(Path::new("/tmp/a"), default);
        let b = state_dir(Path::new("/tmp/b"), default);
        assert_ne!(a, b);
        assert!(a.to_string_lossy().starts_with("/run/capstan/containerd-"));
        assert!(
            Layout::new(Path::new("/tmp/a"), a)
                .socket()
                .as_os_str()
                .len()
                < 60
        );
    }

    #[test]
    fn capability_bits_are_read_from_status() {
        let with = "Name:\tx\nCapEff:\t000001ffffffffff\n";
        let without = "Name:\tx\nCapEff:\t00000000a80425fb\n";
        assert!(has_capability(with, 24));
        assert!(!has_capability(without, 24));
        assert!(!has_capability("garbage", 24));
    }

    /// A runtime with sandboxes, recording calls.
    #[derive(Default)]
    struct Fake {
        sandboxes: Mutex<Vec<String>>,
        calls: Mutex<Vec<String>>,
    }

    /// The fake's `Runtime` impl: `custom` calls go to the inherent method named after `=>`,
    /// every other call is UNIMPLEMENTED.
    macro_rules! fake_runtime {
        (
            custom { $( $m:ident($mreq:ident) -> $mresp:ident => $handler:ident; )* }
            other { $( $o:ident($oreq:ident) -> $oresp:ident; )* }
        ) => {
            #[async_trait::async_trait]
            impl Runtime for Fake {
                $(
                    async fn $m(&self, r: v1::$mreq) -> capstan_cri::Result<v1::$mresp> {
                        self.$handler(r).await
                    }
                )*
                $(
                    async fn $o(&self, _: v1::$oreq) -> capstan_cri::Result<v1::$oresp> {
                        Err(Status::unimplemented(stringify!($o)))
                    }
                )*
            }
        };
    }

    impl Fake {
        async fn list(
            &self,
            _: v1::ListPodSandboxRequest,
        ) -> capstan_cri::Result<v1::ListPodSandboxResponse> {
            self.calls.lock().push("list".into());
            Ok(v1::ListPodSandboxResponse {
                items: self
                    .sandboxes
                    .lock()
                    .iter()
                    .map(|id| v1::PodSandbox {
                        id: id.clone(),
                        ..Default::default()
                    })
                    .collect(),
            })
        }
        async fn stop(
            &self,
            r: v1::StopPodSandboxRequest,
        ) -> capstan_cri::Result<v1::StopPodSandboxResponse> {
            self.calls.lock().push(format!("stop {}", r.pod_sandbox_id));
            Ok(Default::default())
        }
        async fn remove(
            &self,
            r: v1::RemovePodSandboxRequest,
        ) -> capstan_cri::Result<v1::RemovePodSandboxResponse> {
            self.calls
                .lock()
                .push(format!("remove {}", r.pod_sandbox_id));
            if r.pod_sandbox_id == "bad" {
                return Err(Status::internal("boom"));
            }
            self.sandboxes.lock().retain(|s| *s != r.pod_sandbox_id);
            Ok(Default::default())
        }
        async fn run(
            &self,
            _: v1::RunPodSandboxRequest,
        ) -> capstan_cri::Result<v1::RunPodSandboxResponse> {
            self.calls.lock().push("run".into());
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.sandboxes.lock().push("new".into());
            Ok(v1::RunPodSandboxResponse {
                pod_sandbox_id: "new".into(),
            })
        }
    }

    fake_runtime! {
        custom {
            list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse => list;
            stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse => stop;
            remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse => remove;
            run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse => run;
        }
        other {
            version(VersionRequest) -> VersionResponse;
            pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
            create_container(CreateContainerRequest) -> CreateContainerResponse;
            start_container(StartContainerRequest) -> StartContainerResponse;
            stop_container(StopContainerRequest) -> StopContainerResponse;
            remove_container(RemoveContainerRequest) -> RemoveContainerResponse;
            list_containers(ListContainersRequest) -> ListContainersResponse;
            container_status(ContainerStatusRequest) -> ContainerStatusResponse;
            update_container_resources(UpdateContainerResourcesRequest) -> UpdateContainerResourcesResponse;
            reopen_container_log(ReopenContainerLogRequest) -> ReopenContainerLogResponse;
            exec_sync(ExecSyncRequest) -> ExecSyncResponse;
            exec(ExecRequest) -> ExecResponse;
            attach(AttachRequest) -> AttachResponse;
            port_forward(PortForwardRequest) -> PortForwardResponse;
            container_stats(ContainerStatsRequest) -> ContainerStatsResponse;
            list_container_stats(ListContainerStatsRequest) -> ListContainerStatsResponse;
            pod_sandbox_stats(PodSandboxStatsRequest) -> PodSandboxStatsResponse;
            list_pod_sandbox_stats(ListPodSandboxStatsRequest) -> ListPodSandboxStatsResponse;
            update_runtime_config(UpdateRuntimeConfigRequest) -> UpdateRuntimeConfigResponse;
            status(StatusRequest) -> StatusResponse;
            list_images(ListImagesRequest) -> ListImagesResponse;
            image_status(ImageStatusRequest) -> ImageStatusResponse;
            pull_image(PullImageRequest) -> PullImageResponse;
            remove_image(RemoveImageRequest) -> RemoveImageResponse;
            image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
        }
    }

    #[tokio::test]
    async fn every_sandbox_is_stopped_then_removed() {
        let fake = Fake::default();
        *fake.sandboxes.lock() = vec!["a".into(), "bad".into(), "b".into()];
        let (removed, errors) = remove_all_sandboxes(&fake).await;
        assert_eq!(removed, 2);
        assert_eq!(errors.len(), 1, "{errors:?}");
        assert!(errors[0].contains("bad") && errors[0].contains("boom"));
        assert_eq!(
            *fake.calls.lock(),
            [
                "list",
                "stop a",
                "remove a",
                "stop bad",
                "remove bad",
                "stop b",
                "remove b"
            ]
        );
        assert_eq!(*fake.sandboxes.lock(), ["bad"]);
    }

    #[tokio::test]
    async fn a_closed_gate_waits_for_calls_under_way_and_refuses_new_ones() {
        let fake = Arc::new(Fake::default());
        let gate = Gate::new(fake.clone());
        let g = gate.clone();
        let running =
            tokio::spawn(
                async move { g.run_pod_sandbox(v1::RunPodSandboxRequest::default()).await },
            );
        tokio::time::sleep(Duration::from_millis(20)).await;
        gate.close(Duration::from_secs(5)).await;
        // The call under way finished before close returned.
        assert_eq!(*fake.sandboxes.lock(), ["new"]);
        assert!(running.await.unwrap().is_ok());
        let refused = gate
            .run_pod_sandbox(v1::RunPodSandboxRequest::default())
            .await
            .unwrap_err();
        assert_eq!(refused.code(), capstan_cri::Code::Unavailable);
        assert_eq!(fake.calls.lock().iter().filter(|c| *c == "run").count(), 1);
        // Cleanup goes around the gate, to the runtime itself.
        let (removed, _) = remove_all_sandboxes(fake.as_ref()).await;
        assert_eq!(removed, 1);
    }
}
