//! The CRI client against a real containerd (the testkit's private containerd pulling from a
//! local registry): images, a host-network pod, containers, logs, exec, teardown, errors.

use std::path::Path;
use std::time::{Duration, Instant};

use capstan_cri::v1;
use capstan_cri::{Cri, Runtime};
use capstan_testkit::node::{BridgeNetwork, Containerd, Registry};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn image(reference: &str) -> Option<v1::ImageSpec> {
    Some(v1::ImageSpec {
        image: reference.to_string(),
        ..Default::default()
    })
}

/// A host-network pod (no CNI needed) logging under `log_dir`.
fn sandbox_config(name: &str, log_dir: &Path) -> v1::PodSandboxConfig {
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: format!("uid-{name}"),
            namespace: "default".into(),
            attempt: 0,
        }),
        // A host-network pod shares the node's UTS namespace: no hostname of its own.
        log_directory: log_dir.display().to_string(),
        linux: Some(v1::LinuxPodSandboxConfig {
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(v1::NamespaceOption {
                    network: v1::NamespaceMode::Node as i32,
                    pid: v1::NamespaceMode::Container as i32,
                    ipc: v1::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn container_config(name: &str, reference: &str, command: &[&str]) -> v1::ContainerConfig {
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: image(reference),
        command: command.iter().map(|s| s.to_string()).collect(),
        log_path: format!("{name}/0.log"),
        linux: Some(v1::LinuxContainerConfig::default()),
        ..Default::default()
    }
}

async fn status(cri: &Cri, id: &str) -> v1::ContainerStatus {
    cri.container_status(v1::ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    })
    .await
    .unwrap()
    .status
    .expect("a container status")
}

async fn wait_exited(cri: &Cri, id: &str) -> v1::ContainerStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = status(cri, id).await;
        if s.state == v1::ContainerState::ContainerExited as i32 {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "container {id} did not exit: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn run_container(
    cri: &Cri,
    sandbox: &str,
    config: &v1::PodSandboxConfig,
    container: v1::ContainerConfig,
) -> String {
    // The kubelet creates each container's log directory; do the same.
    std::fs::create_dir_all(
        Path::new(&config.log_directory).join(&container.metadata.as_ref().unwrap().name),
    )
    .unwrap();
    let id = cri
        .create_container(v1::CreateContainerRequest {
            pod_sandbox_id: sandbox.into(),
            config: Some(container),
            sandbox_config: Some(config.clone()),
        })
        .await
        .unwrap()
        .container_id;
    cri.start_container(v1::StartContainerRequest {
        container_id: id.clone(),
    })
    .await
    .unwrap();
    id
}

#[test]
fn cri_calls_against_containerd() {
    let registry = Registry::start();
    let containerd = Containerd::start(&registry);
    let logs = tempfile::tempdir().unwrap();
    let busybox = registry.image("busybox");
    let missing = registry.image("nope:1");
    let ctd_dir = containerd.dir().to_path_buf();

    runtime().block_on(async {
        let cri = Cri::connect(&containerd.endpoint()).unwrap();

        let version = cri
            .version(v1::VersionRequest {
                version: "v1".into(),
            })
            .await
            .unwrap();
        assert_eq!(version.runtime_name, "containerd");
        assert_eq!(version.runtime_api_version, "v1");

        // Images.
        let pulled = cri
            .pull_image(v1::PullImageRequest {
                image: image(&busybox),
                ..Default::default()
            })
            .await
            .unwrap();
        assert!(pulled.image_ref.starts_with("sha256:"), "{pulled:?}");
        let img = cri
            .image_status(v1::ImageStatusRequest {
                image: image(&busybox),
                verbose: false,
            })
            .await
            .unwrap()
            .image
            .expect("the pulled image is known");
        assert_eq!(img.id, pulled.image_ref);
        assert!(img.repo_tags.contains(&busybox), "{img:?}");
        assert!(img.size > 0);
        let unknown = cri
            .image_status(v1::ImageStatusRequest {
                image: image(&missing),
                verbose: false,
            })
            .await
            .unwrap();
        assert!(unknown.image.is_none(), "{unknown:?}");

        // A host-network pod with a container that prints and exits.
        let log_dir = logs.path().join("default_one_uid-one");
        std::fs::create_dir_all(&log_dir).unwrap();
        let config = sandbox_config("one", &log_dir);
        let sandbox = cri
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", containerd.log_tail(40)))
            .pod_sandbox_id;
        let sandbox_status = cri
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .expect("a sandbox status");
        assert_eq!(
            sandbox_status.state,
            v1::PodSandboxState::SandboxReady as i32
        );

        let echo = run_container(
            &cri,
            &sandbox,
            &config,
            container_config("echo", &busybox, &["sh", "-c", "echo hello; exit 7"]),
        )
        .await;
        let exited = wait_exited(&cri, &echo).await;
        assert_eq!(exited.exit_code, 7);
        assert_eq!(exited.reason, "Error");
        // (containerd may record the exit a little before it records the start.)
        assert!(
            exited.started_at > 0 && exited.finished_at > 0,
            "{exited:?}"
        );
        let log_path = log_dir.join("echo/0.log");
        assert_eq!(exited.log_path, log_path.display().to_string());
        let log = std::fs::read_to_string(&log_path).unwrap();
        let line = log.lines().next().unwrap_or_default();
        let (timestamp, rest) = line.split_once(' ').unwrap_or_default();
        assert_eq!(rest, "stdout F hello", "{log:?}");
        assert!(
            timestamp.len() > 20 && timestamp.contains('T') && timestamp.contains('.'),
            "an RFC 3339 timestamp with nanoseconds: {timestamp:?}"
        );

        // Exec in a running container.
        let sleeper = run_container(
            &cri,
            &sandbox,
            &config,
            v1::ContainerConfig {
                envs: vec![v1::KeyValue {
                    key: "FOO".into(),
                    value: "bar".into(),
                }],
                ..container_config("sleeper", &busybox, &["sleep", "3600"])
            },
        )
        .await;
        assert_eq!(
            status(&cri, &sleeper).await.state,
            v1::ContainerState::ContainerRunning as i32
        );
        let exec = cri
            .exec_sync(v1::ExecSyncRequest {
                container_id: sleeper.clone(),
                cmd: vec![
                    "sh".into(),
                    "-c".into(),
                    "echo out $FOO; echo err >&2; exit 3".into(),
                ],
                timeout: 10,
            })
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&exec.stdout), "out bar\n");
        assert_eq!(String::from_utf8_lossy(&exec.stderr), "err\n");
        assert_eq!(exec.exit_code, 3);

        let listed = cri
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    pod_sandbox_id: sandbox.clone(),
                    ..Default::default()
                }),
            })
            .await
            .unwrap();
        assert_eq!(listed.containers.len(), 2);

        // Stop: SIGTERM, then SIGKILL after the grace period.
        cri.stop_container(v1::StopContainerRequest {
            container_id: sleeper.clone(),
            timeout: 1,
        })
        .await
        .unwrap();
        let stopped = status(&cri, &sleeper).await;
        assert_eq!(stopped.state, v1::ContainerState::ContainerExited as i32);
        assert!([137, 143].contains(&stopped.exit_code), "{stopped:?}");

        for id in [&echo, &sleeper] {
            cri.remove_container(v1::RemoveContainerRequest {
                container_id: id.to_string(),
            })
            .await
            .unwrap();
        }
        let gone = cri
            .container_status(v1::ContainerStatusRequest {
                container_id: echo.clone(),
                verbose: false,
            })
            .await
            .unwrap_err();
        assert_eq!(gone.code(), capstan_cri::Code::NotFound, "{gone:?}");
        cri.stop_pod_sandbox(v1::StopPodSandboxRequest {
            pod_sandbox_id: sandbox.clone(),
        })
        .await
        .unwrap();
        cri.remove_pod_sandbox(v1::RemovePodSandboxRequest {
            pod_sandbox_id: sandbox.clone(),
        })
        .await
        .unwrap();
        let sandboxes = cri
            .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
            .await
            .unwrap();
        assert!(sandboxes.items.is_empty(), "{sandboxes:?}");

        // A missing image is an error saying so.
        let err = cri
            .pull_image(v1::PullImageRequest {
                image: image(&missing),
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert!(err.message().contains("not found"), "{err:?}");

        // Leave a pod running: dropping the fixture must clean it up.
        let log_dir = logs.path().join("default_two_uid-two");
        std::fs::create_dir_all(&log_dir).unwrap();
        let config = sandbox_config("two", &log_dir);
        let sandbox = cri
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", containerd.log_tail(40)))
            .pod_sandbox_id;
        run_container(
            &cri,
            &sandbox,
            &config,
            container_config("sleeper", &busybox, &["sleep", "3600"]),
        )
        .await;
    });

    let socket = containerd.socket().display().to_string();
    drop(containerd);
    drop(registry);

    // Nothing is left: no directory, no mounts under it, no process naming it.
    assert!(!ctd_dir.exists(), "{} is left", ctd_dir.display());
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = ctd_dir.display().to_string();
    assert!(
        !mounts.lines().any(|l| l.contains(&dir)),
        "mounts left under {dir}"
    );
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            !cmdline.contains(&socket) && !cmdline.contains(&format!("{dir}/")),
            "a process is left: {cmdline}"
        );
    }
}

#[test]
fn registry_serves_both_images_under_their_names() {
    let registry = Registry::start();
    assert!(registry.addr().starts_with("localhost:"));
    assert_eq!(
        registry.image("busybox"),
        format!("{}/busybox:1.35", registry.addr())
    );
    assert_eq!(
        registry.image("pause"),
        format!("{}/pause:3.10", registry.addr())
    );
    let catalog = get(registry.port(), "/v2/_catalog");
    for repo in ["busybox", "pause", "library/busybox"] {
        assert!(catalog.contains(&format!("\"{repo}\"")), "{catalog}");
    }
    let extra = registry.push("busybox", "other/busybox:2");
    assert_eq!(extra, format!("{}/other/busybox:2", registry.addr()));
    let tags = get(registry.port(), "/v2/other/busybox/tags/list");
    assert!(tags.contains("\"2\""), "{tags}");
    let manifest = get(registry.port(), "/v2/pause/manifests/3.10");
    assert!(manifest.starts_with("HTTP/1.0 200") || manifest.starts_with("HTTP/1.1 200"));
}

/// A plain HTTP GET on loopback; the whole answer.
fn get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.0\r\nHost: localhost:{port}\r\n\
         Accept: application/vnd.oci.image.manifest.v1+json\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// A pod on a CNI bridge network: it gets an address from the subnet and is reachable from the
/// host; dropping the fixture with the pod still running tears its network down.
#[test]
fn pod_network_through_cni_is_torn_down_on_drop() {
    // Declared first: the bridge goes after the pods.
    let net = BridgeNetwork::new("ctb", 251);
    let registry = Registry::start();
    let containerd = Containerd::start(&registry);
    let logs = tempfile::tempdir().unwrap();
    let busybox = registry.image("busybox");
    net.install(&containerd, true, true);
    let (bridge, subnet) = (net.bridge.clone(), net.subnet.clone());
    let log_dir = logs.path().join("default_net_uid-net");
    std::fs::create_dir_all(&log_dir).unwrap();

    let pod_ip = runtime().block_on(async {
        let cri = Cri::connect(&containerd.endpoint()).unwrap();
        cri.pull_image(v1::PullImageRequest {
            image: image(&busybox),
            ..Default::default()
        })
        .await
        .unwrap();
        let mut config = sandbox_config("net", &log_dir);
        config.hostname = "net".into();
        let ns = config
            .linux
            .as_mut()
            .and_then(|l| l.security_context.as_mut())
            .and_then(|s| s.namespace_options.as_mut())
            .unwrap();
        ns.network = v1::NamespaceMode::Pod as i32;
        let sandbox = cri
            .run_pod_sandbox(v1::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await
            .unwrap_or_else(|e| panic!("{e:?}\n{}", containerd.log_tail(40)))
            .pod_sandbox_id;
        let status = cri
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox.clone(),
                verbose: false,
            })
            .await
            .unwrap()
            .status
            .unwrap();
        let ip = status.network.map(|n| n.ip).unwrap_or_default();
        assert!(
            ip.starts_with(subnet.trim_end_matches("0/24")),
            "{ip:?} not in {subnet}"
        );

        let web = run_container(
            &cri,
            &sandbox,
            &config,
            container_config(
                "web",
                &busybox,
                &["httpd", "-f", "-p", "8080", "-h", "/etc"],
            ),
        )
        .await;
        let exec = cri
            .exec_sync(v1::ExecSyncRequest {
                container_id: web,
                cmd: vec!["hostname".into()],
                timeout: 10,
            })
            .await
            .unwrap();
        assert_eq!(String::from_utf8_lossy(&exec.stdout), "net\n");
        ip
    });

    // The host reaches the pod over the bridge.
    let deadline = Instant::now() + Duration::from_secs(30);
    let answer = loop {
        let answer = std::net::TcpStream::connect((pod_ip.as_str(), 8080)).and_then(|mut s| {
            use std::io::{Read, Write};
            s.set_read_timeout(Some(Duration::from_secs(5)))?;
            s.write_all(b"GET /group HTTP/1.0\r\n\r\n")?;
            let mut answer = String::new();
            s.read_to_string(&mut answer)?;
            Ok(answer)
        });
        match answer {
            Ok(answer) => break answer,
            Err(e) => assert!(Instant::now() < deadline, "{pod_ip}:8080: {e}"),
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(answer.contains("nobody:x:65534:"), "{answer}");

    let nat_rules = || {
        let out = std::process::Command::new("iptables")
            .args(["-t", "nat", "-S"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let masquerade = format!("{pod_ip}/32");
    assert!(nat_rules().contains(&masquerade), "{}", nat_rules());

    drop(containerd);
    drop(net);
    let links = std::process::Command::new("ip")
        .args(["-o", "link"])
        .output()
        .unwrap();
    let links = String::from_utf8_lossy(&links.stdout);
    assert!(!links.contains(&bridge), "{links}");
    let nat = nat_rules();
    assert!(!nat.contains(&masquerade), "{nat}");
}
