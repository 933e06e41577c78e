//! A node for kubelet tests: a local image registry and private containerd instances.
//!
//! [`Registry`] runs `docker-registry` on a free loopback port and pushes two images built
//! from the machine's static busybox:
//!
//! | reference | content |
//! | --- | --- |
//! | `localhost:PORT/busybox:1.35` (also `library/busybox:1.35` and `:latest`) | busybox with every applet linked in `/bin`, `/etc/passwd` (root, nobody), cmd `["sh"]` |
//! | `localhost:PORT/pause:3.10` | the same layer, entrypoint `["/bin/sleep", "infinity"]` |
//!
//! The OCI layout of these images is built once (with umoci) and cached under
//! `$TMPDIR/capstan-test-images`, keyed by the busybox binary's size and mtime.
//!
//! [`Containerd::start`] runs a containerd whose every file (root, state, socket, runc root,
//! CNI configuration directory, log) lives in one short directory `/tmp/ctd-XXXXXX`, with the
//! CRI plugin's sandbox image set to the registry's pause image. The registry is reachable over
//! plain HTTP as `localhost:PORT`, and also stands in for `docker.io` and `registry.k8s.io`, so
//! `busybox:1.35` and `registry.k8s.io/pause:3.10` resolve to the local images too. Dropping a
//! `Containerd` removes its pods through CRI (so CNI plugins release their addresses and rules),
//! then kills whatever is left (containers, shims, containerd), unmounts everything under its
//! directory and removes it.
//!
//! Everything here is blocking and may be called from inside an async runtime (CRI calls run on
//! a private runtime in a separate thread). The tools come from the machine: `docker-registry`,
//! `skopeo`, `umoci`, `containerd`, `runc`, `ip`, `umount`, `kill`, and `/bin/busybox`.

use std::future::Future;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, UNIX_EPOCH};

use tempfile::TempDir;

/// The tag of the busybox image.
pub const BUSYBOX_TAG: &str = "1.35";

/// The tag of the pause image.
pub const PAUSE_TAG: &str = "3.10";

/// The static busybox the images are built from.
const BUSYBOX: &str = "/bin/busybox";

/// Bumped whenever the image content changes, so stale caches are not used.
const IMAGE_FORMAT: u32 = 1;

/// The PATH set in the images.
const IMAGE_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// How long containerd may take to answer CRI calls after starting (2 shared cores).
const CONTAINERD_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the registry may take to answer `/v2/`.
const REGISTRY_START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long dropping a containerd may spend removing pods through CRI.
const TEARDOWN_TIMEOUT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Registry

/// A `docker-registry` on a free loopback port, holding the busybox and pause images.
/// Dropping it kills the registry and removes its storage.
pub struct Registry {
    port: u16,
    child: Child,
    dir: TempDir,
}

impl Registry {
    /// Start a registry and push the images into it. Panics (with the registry's log) when the
    /// registry does not come up or a push fails.
    pub fn start() -> Registry {
        Registry::start_on(Ipv4Addr::LOCALHOST)
    }

    /// As [`Registry::start`], listening on `bind` (e.g. 0.0.0.0, for nodes in other network
    /// namespaces, which pull through [`Registry::image_at`]).
    pub fn start_on(bind: Ipv4Addr) -> Registry {
        // Build (or find) the images first: a failure there is not the registry's.
        image_layout();
        let mut last_error = String::new();
        for _ in 0..3 {
            match Registry::try_start(bind) {
                Ok(registry) => {
                    let busybox = format!("busybox:{BUSYBOX_TAG}");
                    registry.push("busybox", &busybox);
                    registry.push("busybox", &format!("library/busybox:{BUSYBOX_TAG}"));
                    registry.push("busybox", "library/busybox:latest");
                    registry.push("pause", &format!("pause:{PAUSE_TAG}"));
                    return registry;
                }
                Err(e) => last_error = e,
            }
        }
        panic!("the test registry did not start: {last_error}");
    }

    /// `localhost:PORT`: the registry's host as it appears in image references.
    pub fn addr(&self) -> String {
        format!("localhost:{}", self.port)
    }

    /// The registry's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The full reference of an image in this registry: `busybox` → `localhost:PORT/busybox:1.35`,
    /// `pause` → `localhost:PORT/pause:3.10`, a name with a tag or digest is kept
    /// (`nope:1` → `localhost:PORT/nope:1`), any other name gets `:latest`.
    pub fn image(&self, name: &str) -> String {
        image_ref(&self.addr(), name)
    }

    /// As [`Registry::image`], with the registry reached at `host` (`HOST:PORT/busybox:1.35`).
    pub fn image_at(&self, host: &str, name: &str) -> String {
        image_ref(&format!("{host}:{}", self.port), name)
    }

    /// Push one of the built images (`"busybox"` or `"pause"`) under another name in this
    /// registry, e.g. `push("busybox", "other/busybox:2")`; returns its full reference.
    pub fn push(&self, image: &str, dest: &str) -> String {
        assert!(
            image == "busybox" || image == "pause",
            "only busybox and pause can be pushed, not {image:?}"
        );
        let source = format!("oci:{}:{image}", image_layout().display());
        let dest_ref = format!("{}/{dest}", self.addr());
        let result = run(Command::new("skopeo").args([
            "--insecure-policy",
            "copy",
            "--quiet",
            "--dest-tls-verify=false",
            &source,
            &format!("docker://{dest_ref}"),
        ]));
        if let Err(e) = result {
            panic!("pushing {dest_ref}: {e}\nregistry log:\n{}", self.log());
        }
        dest_ref
    }

    /// The registry's log (errors only).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    fn try_start(bind: Ipv4Addr) -> Result<Registry, String> {
        let dir = tempfile::Builder::new()
            .prefix("capstan-registry-")
            .tempdir()
            .map_err(|e| format!("creating the registry's directory: {e}"))?;
        let port = free_port()?;
        let config = format!(
            "version: 0.1\n\
             log:\n  level: error\n  accesslog:\n    disabled: true\n\
             storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
             http:\n  addr: {bind}:{port}\n",
            dir.path().join("storage").display()
        );
        let config_path = dir.path().join("config.yml");
        std::fs::write(&config_path, config).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.path().join("registry.log"))
            .map_err(|e| format!("creating the registry's log: {e}"))?;
        let child = Command::new("docker-registry")
            .arg("serve")
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting docker-registry: {e}"))?;
        let mut registry = Registry { port, child, dir };
        let deadline = Instant::now() + REGISTRY_START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = registry.child.try_wait() {
                return Err(format!(
                    "docker-registry exited ({status}):\n{}",
                    registry.log()
                ));
            }
            let answer = http_get(port, "/v2/").unwrap_or_default();
            if answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200") {
                return Ok(registry);
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "docker-registry does not answer on port {port} after \
                     {REGISTRY_START_TIMEOUT:?}:\n{}",
                    registry.log()
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// See [`Registry::image`].
fn image_ref(addr: &str, name: &str) -> String {
    let last = name.rsplit('/').next().unwrap_or(name);
    match name {
        "busybox" => format!("{addr}/busybox:{BUSYBOX_TAG}"),
        "pause" => format!("{addr}/pause:{PAUSE_TAG}"),
        _ if last.contains(':') || last.contains('@') => format!("{addr}/{name}"),
        _ => format!("{addr}/{name}:latest"),
    }
}

// ---------------------------------------------------------------------------------------------
// Images

/// The OCI layout holding the tags `busybox` and `pause`, built on first use (per process, and
/// cached on disk across processes).
fn image_layout() -> &'static Path {
    static LAYOUT: OnceLock<PathBuf> = OnceLock::new();
    LAYOUT.get_or_init(|| match build_layout() {
        Ok(path) => path,
        Err(e) => panic!("building the test images: {e}"),
    })
}

fn build_layout() -> Result<PathBuf, String> {
    let meta = std::fs::metadata(BUSYBOX).map_err(|e| format!("{BUSYBOX}: {e}"))?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let root = std::env::temp_dir().join("capstan-test-images");
    let done = root.join(format!("v{IMAGE_FORMAT}-{}-{mtime}", meta.len()));
    let layout = done.join("oci");
    if layout.join("index.json").exists() {
        return Ok(layout);
    }
    std::fs::create_dir_all(&root).map_err(|e| format!("{}: {e}", root.display()))?;
    // Build aside, then rename into place: concurrent test processes each build their own, and
    // the first rename wins (renaming onto a non-empty directory fails).
    let work = tempfile::Builder::new()
        .prefix(".build-")
        .tempdir_in(&root)
        .map_err(|e| format!("{}: {e}", root.display()))?;
    let staged = work.path().join("result");
    let oci = staged.join("oci");
    std::fs::create_dir_all(&staged).map_err(|e| e.to_string())?;
    let bundle = work.path().join("bundle");
    let image = |tag: &str| format!("{}:{tag}", oci.display());
    run(Command::new("umoci").args(["init", "--layout"]).arg(&oci))?;
    run(Command::new("umoci").args(["new", "--image", &image("busybox")]))?;
    run(Command::new("umoci")
        .args(["unpack", "--image", &image("busybox")])
        .arg(&bundle))?;
    populate_rootfs(&bundle.join("rootfs"))?;
    run(Command::new("umoci")
        .args(["repack", "--image", &image("busybox")])
        .arg(&bundle))?;
    run(Command::new("umoci").args([
        "config",
        "--image",
        &image("busybox"),
        "--config.cmd",
        "sh",
        "--config.env",
        IMAGE_PATH,
        "--config.workingdir",
        "/",
    ]))?;
    run(Command::new("umoci").args([
        "config",
        "--image",
        &image("busybox"),
        "--tag",
        "pause",
        "--clear=config.cmd",
        "--config.entrypoint",
        "/bin/sleep",
        "--config.entrypoint",
        "infinity",
    ]))?;
    run(Command::new("umoci").args(["gc", "--layout"]).arg(&oci))?;
    match std::fs::rename(&staged, &done) {
        Ok(()) => Ok(layout),
        Err(_) if layout.join("index.json").exists() => Ok(layout),
        Err(e) => Err(format!("moving the images to {}: {e}", done.display())),
    }
}

/// Busybox in /bin with every applet linked to it, and the usual top-level directories.
fn populate_rootfs(rootfs: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let err = |what: &Path, e: std::io::Error| format!("{}: {e}", what.display());
    for d in [
        "bin", "dev", "etc", "home", "proc", "root", "sys", "tmp", "usr", "var",
    ] {
        let path = rootfs.join(d);
        std::fs::create_dir_all(&path).map_err(|e| err(&path, e))?;
    }
    for (d, mode) in [("tmp", 0o1777), ("root", 0o700)] {
        let path = rootfs.join(d);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .map_err(|e| err(&path, e))?;
    }
    let bin = rootfs.join("bin");
    std::fs::copy(BUSYBOX, bin.join("busybox")).map_err(|e| err(&bin, e))?;
    let applets = run(Command::new(BUSYBOX).arg("--list"))?;
    for applet in applets.lines().map(str::trim) {
        if applet.is_empty() || applet == "busybox" || applet.contains('/') {
            continue;
        }
        let link = bin.join(applet);
        std::os::unix::fs::symlink("busybox", &link).map_err(|e| err(&link, e))?;
    }
    let etc = rootfs.join("etc");
    for (file, text) in [
        (
            "passwd",
            "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n",
        ),
        ("group", "root:x:0:\nnobody:x:65534:\n"),
    ] {
        let path = etc.join(file);
        std::fs::write(&path, text).map_err(|e| err(&path, e))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// containerd

/// A private containerd, everything under one directory `/tmp/ctd-XXXXXX`. Dropping it leaves
/// nothing behind: pods are removed through CRI, then remaining containers, shims and containerd
/// are killed, mounts under the directory are detached, and the directory is removed.
pub struct Containerd {
    dir: TempDir,
    child: Option<Child>,
}

impl Containerd {
    /// Start containerd pulling from `registry` over plain HTTP, with the registry's pause image
    /// as sandbox image and an empty CNI configuration directory, and wait until it answers CRI
    /// calls. Panics with containerd's log when it does not.
    pub fn start(registry: &Registry) -> Containerd {
        // Unix socket paths must stay under 108 bytes: keep the directory short.
        let dir = tempfile::Builder::new()
            .prefix("ctd-")
            .rand_bytes(6)
            .tempdir_in("/tmp")
            .expect("creating a containerd directory in /tmp");
        let mut containerd = Containerd { dir, child: None };
        std::fs::create_dir_all(containerd.cni_conf_dir()).expect("creating the CNI conf dir");
        let config = containerd_config(containerd.dir(), &registry.addr());
        let config_path = containerd.dir().join("config.toml");
        std::fs::write(&config_path, config).expect("writing containerd's config");
        let log = std::fs::File::create(containerd.log_path()).expect("creating containerd's log");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(&config_path)
            .args(["--log-level", "info"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("containerd's log"))
            .stderr(log)
            .spawn()
            .expect("starting containerd");
        containerd.child = Some(child);
        containerd.wait_ready();
        containerd
    }

    /// The directory everything of this containerd lives in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The containerd (and CRI) socket.
    pub fn socket(&self) -> PathBuf {
        self.dir().join("containerd.sock")
    }

    /// The CRI endpoint: `unix:///tmp/ctd-XXXXXX/containerd.sock`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    /// The CNI configuration directory the CRI plugin reads (empty at start).
    pub fn cni_conf_dir(&self) -> PathBuf {
        self.dir().join("cni")
    }

    /// runc's state directory for this containerd's containers.
    pub fn runc_root(&self) -> PathBuf {
        self.dir().join("runc")
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last `lines` lines of containerd's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log(), lines)
    }

    /// Delete a network link (a CNI bridge a test's kubelet made), ignoring every error.
    pub fn remove_link(name: &str) {
        let _ = Command::new("ip")
            .args(["link", "del", name])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    fn log_path(&self) -> PathBuf {
        self.dir().join("containerd.log")
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + CONTAINERD_START_TIMEOUT;
        let endpoint = self.endpoint();
        loop {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(|c| c.try_wait()) {
                panic!(
                    "containerd exited ({status}) while starting:\n{}",
                    self.log_tail(60)
                );
            }
            let answer = block_on(async {
                let cri = capstan_cri::Cri::connect(&endpoint)?;
                let call = capstan_cri::Runtime::version(
                    &cri,
                    capstan_cri::v1::VersionRequest {
                        version: "v1".into(),
                    },
                );
                match tokio::time::timeout(Duration::from_secs(5), call).await {
                    Ok(Ok(v)) => Ok(v),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err("Version timed out".to_string()),
                }
            });
            match answer {
                Ok(_) => return,
                Err(e) if Instant::now() > deadline => panic!(
                    "containerd does not answer CRI calls after \
                     {CONTAINERD_START_TIMEOUT:?} ({e}):\n{}",
                    self.log_tail(60)
                ),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Remove every pod sandbox through CRI, so that the CNI plugins tear down the pods'
    /// networks (addresses, veths, iptables rules).
    fn remove_pods(&self) {
        let endpoint = self.endpoint();
        let result = block_on(async {
            let work = async {
                use capstan_cri::v1;
                use capstan_cri::Runtime as _;
                let cri = capstan_cri::Cri::connect(&endpoint)?;
                let sandboxes = cri
                    .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
                    .await
                    .map_err(|e| e.to_string())?
                    .items;
                for sandbox in sandboxes {
                    let id = sandbox.id;
                    let _ = cri
                        .stop_pod_sandbox(v1::StopPodSandboxRequest {
                            pod_sandbox_id: id.clone(),
                        })
                        .await;
                    let _ = cri
                        .remove_pod_sandbox(v1::RemovePodSandboxRequest { pod_sandbox_id: id })
                        .await;
                }
                Ok::<(), String>(())
            };
            tokio::time::timeout(TEARDOWN_TIMEOUT, work)
                .await
                .unwrap_or_else(|_| Err("timed out".into()))
        });
        if let Err(e) = result {
            eprintln!(
                "capstan-testkit: removing the pods of {} failed: {e}",
                self.dir().display()
            );
        }
    }

    /// Force-delete every container runc still knows in our runc root.
    fn delete_containers(&self) {
        let root = self.runc_root();
        if !root.exists() {
            return;
        }
        let ids = run(Command::new("runc")
            .arg("--root")
            .arg(&root)
            .args(["list", "--quiet"]))
        .unwrap_or_default();
        for id in ids.lines().map(str::trim).filter(|id| !id.is_empty()) {
            let _ = run(Command::new("runc")
                .arg("--root")
                .arg(&root)
                .args(["delete", "--force", id]));
        }
    }

    /// The sockets of our shims (outside our directory, under /run/containerd/s): each task's
    /// bundle records its shim's address.
    fn shim_sockets(&self) -> Vec<PathBuf> {
        let tasks = self.dir().join("state/io.containerd.runtime.v2.task");
        let mut sockets = Vec::new();
        for ns in read_dir(&tasks) {
            for task in read_dir(&ns) {
                if let Ok(address) = std::fs::read_to_string(task.join("address")) {
                    let path = address.trim().trim_start_matches("unix://");
                    if path.starts_with('/') && !path.starts_with(&*self.dir().to_string_lossy()) {
                        sockets.push(PathBuf::from(path));
                    }
                }
            }
        }
        sockets
    }

    /// Kill the containerd-shim processes started by this containerd (found by our socket in
    /// their command line: they outlive containerd).
    fn kill_shims(&self) {
        let socket = self.socket().to_string_lossy().into_owned();
        for (pid, args) in processes() {
            let is_shim = args.first().is_some_and(|a| {
                a.rsplit('/')
                    .next()
                    .unwrap_or(a)
                    .starts_with("containerd-shim")
            });
            if is_shim && args.contains(&socket) {
                kill(pid);
            }
        }
    }
}

/// A pod network for a test's own containerd: a bridge and a /24 of its own, set up by the
/// bridge CNI plugin. Dropping it deletes the bridge: declare it before the [`Containerd`],
/// so that the pods are removed first.
pub struct BridgeNetwork {
    pub bridge: String,
    pub subnet: String,
}

impl BridgeNetwork {
    /// A bridge named `prefix` (three letters) and eight hex digits, and a /24 out of
    /// 10.`second_octet`.0.0/16 (outside the 10.100-10.250 ranges the e2e clusters take).
    pub fn new(prefix: &str, second_octet: u8) -> BridgeNetwork {
        let salt = std::process::id()
            ^ std::time::SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
        BridgeNetwork {
            bridge: format!("{prefix}{:08x}", salt.wrapping_mul(2654435761)),
            subnet: format!("10.{second_octet}.{}.0/24", 1 + salt % 250),
        }
    }

    /// Write the network's configuration list into `containerd`'s CNI directory (the bridge
    /// plugin with `ip_masq`, then portmap when asked) and wait until containerd reports its
    /// network ready.
    pub fn install(&self, containerd: &Containerd, ip_masq: bool, portmap: bool) {
        let portmap = match portmap {
            true => r#", {"type": "portmap", "capabilities": {"portMappings": true}}"#,
            false => "",
        };
        let conf = format!(
            r#"{{"cniVersion": "0.4.0", "name": "test", "plugins": [
                {{"type": "bridge", "bridge": "{}", "isGateway": true, "ipMasq": {ip_masq},
                  "ipam": {{"type": "host-local", "dataDir": "{}/ipam",
                            "ranges": [[{{"subnet": "{}"}}]]}}}}{portmap}]}}"#,
            self.bridge,
            containerd.dir().display(),
            self.subnet
        );
        std::fs::write(containerd.cni_conf_dir().join("10-test.conflist"), conf)
            .expect("writing the CNI configuration");
        // containerd picks the configuration up from the directory.
        let endpoint = containerd.endpoint();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = block_on(async {
                let cri = capstan_cri::Cri::connect(&endpoint)?;
                capstan_cri::Runtime::status(
                    &cri,
                    capstan_cri::v1::StatusRequest { verbose: false },
                )
                .await
                .map_err(|e| e.to_string())
            });
            let status = status.ok().and_then(|s| s.status).unwrap_or_default();
            let ready = |t: &str| status.conditions.iter().any(|c| c.r#type == t && c.status);
            if ready("RuntimeReady") && ready("NetworkReady") {
                return;
            }
            assert!(Instant::now() < deadline, "network not ready: {status:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for BridgeNetwork {
    fn drop(&mut self) {
        Containerd::remove_link(&self.bridge);
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let alive = matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)));
        if alive {
            self.remove_pods();
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.delete_containers();
        let sockets = self.shim_sockets();
        self.kill_shims();
        unmount_under(self.dir());
        for socket in sockets {
            let _ = std::fs::remove_file(socket);
        }
        if let Err(e) = std::fs::remove_dir_all(self.dir()) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("capstan-testkit: removing {}: {e}", self.dir().display());
            }
        }
    }
}

/// containerd's configuration: everything under `dir`, the CRI plugin pulling from the local
/// registry over plain HTTP.
fn containerd_config(dir: &Path, registry: &str) -> String {
    let d = dir.display();
    let mirror = |host: &str| {
        format!(
            "    [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"{host}\"]\n      \
             endpoint = [\"http://{registry}\"]\n"
        )
    };
    format!(
        r#"version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""

[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "{d}/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "{registry}/pause:{PAUSE_TAG}"
    netns_mounts_under_state_dir = true
    # This machine may lack CAP_SYS_RESOURCE: never ask for an oom_score_adj below our own.
    restrict_oom_score_adj = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "/usr/lib/cni"
      conf_dir = "{d}/cni"
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          Root = "{d}/runc"
{local}{docker}{k8s}"#,
        local = mirror(registry),
        docker = mirror("docker.io"),
        k8s = mirror("registry.k8s.io"),
    )
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Detach every mount at or under `dir` (deepest first), as seen in /proc/self/mountinfo.
pub fn unmount_under(dir: &Path) {
    let dir = dir.to_string_lossy().trim_end_matches('/').to_string();
    for _ in 0..5 {
        let mut mounts = mounts_under(&dir);
        if mounts.is_empty() {
            return;
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        mounts.dedup();
        for mount in mounts {
            let _ = Command::new("umount")
                .args(["--lazy", &mount])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
    }
    let left = mounts_under(&dir);
    if !left.is_empty() {
        eprintln!("capstan-testkit: could not unmount {left:?}");
    }
}

/// The mount points at or under `dir`.
/// The mount points at or under `dir` (no trailing slash).
pub fn mounts_under(dir: &str) -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    parse_mount_points(&info)
        .into_iter()
        .filter(|m| m == dir || m.starts_with(&format!("{dir}/")))
        .collect()
}

/// The mount points (5th field, octal escapes decoded) of a mountinfo text.
fn parse_mount_points(info: &str) -> Vec<String> {
    info.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_octal)
        .collect()
}

/// Decode the `\NNN` escapes the kernel writes for spaces, tabs, newlines and backslashes.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() {
            let digits = &bytes[i + 1..i + 4];
            if digits.iter().all(|b| (b'0'..=b'7').contains(b)) {
                let value = digits.iter().fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
                if let Ok(v) = u8::try_from(value) {
                    out.push(v);
                    i += 4;
                    continue;
                }
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every process's pid and arguments.
fn processes() -> Vec<(u32, Vec<String>)> {
    let mut found = Vec::new();
    for entry in read_dir(Path::new("/proc")) {
        let Some(pid) = entry
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.join("cmdline")) else {
            continue;
        };
        let args = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        found.push((pid, args));
    }
    found
}

/// SIGKILL a process, ignoring errors (it may be gone already).
fn kill(pid: u32) {
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// The entries of a directory (none when it cannot be read).
fn read_dir(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

/// Run a command to completion; its stdout, or an error with its stderr.
fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running {cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{cmd:?} failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        ))
    }
}

/// Run `future` to completion on a private runtime in another thread, so that callers inside
/// an async runtime can use it too.
fn block_on<T: Send>(future: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a tokio runtime")
                .block_on(future)
        })
        .join()
        .expect("the CRI thread panicked")
    })
}

/// A loopback port nobody listens on right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// `GET path` over plain HTTP/1.0 on 127.0.0.1:port; the whole answer.
fn http_get(port: u16, path: &str) -> std::io::Result<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: localhost:{port}\r\n\r\n"
    )?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// The last `lines` lines of a text.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references() {
        let a = "localhost:5000";
        assert_eq!(image_ref(a, "busybox"), "localhost:5000/busybox:1.35");
        assert_eq!(image_ref(a, "pause"), "localhost:5000/pause:3.10");
        assert_eq!(image_ref(a, "nope:1"), "localhost:5000/nope:1");
        assert_eq!(image_ref(a, "x/y"), "localhost:5000/x/y:latest");
        assert_eq!(
            image_ref(a, "busybox@sha256:00"),
            "localhost:5000/busybox@sha256:00"
        );
    }

    #[test]
    fn mountinfo_is_parsed_and_unescaped() {
        let info = "36 35 98:0 /mnt1 /mnt/a\\040b rw,noatime master:1 - ext3 /dev/root rw\n\
                    37 35 0:5 / /tmp/ctd-x/state/s\\134t rw - tmpfs tmpfs rw\n";
        assert_eq!(
            parse_mount_points(info),
            vec!["/mnt/a b".to_string(), "/tmp/ctd-x/state/s\\t".to_string()]
        );
        assert_eq!(unescape_octal("a\\0"), "a\\0");
        assert_eq!(unescape_octal("\\012x"), "\nx");
    }

    #[test]
    fn config_keeps_everything_under_the_directory() {
        let config = containerd_config(Path::new("/tmp/ctd-abc"), "localhost:5000");
        assert!(config.contains("address = \"/tmp/ctd-abc/containerd.sock\""));
        assert!(config.contains("Root = \"/tmp/ctd-abc/runc\""));
        assert!(config.contains("conf_dir = \"/tmp/ctd-abc/cni\""));
        assert!(config.contains("sandbox_image = \"localhost:5000/pause:3.10\""));
        assert!(config.contains("mirrors.\"localhost:5000\"]"));
        assert!(config.contains("endpoint = [\"http://localhost:5000\"]"));
    }
}
