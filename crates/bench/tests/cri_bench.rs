//! `capstan bench cri` against a real containerd (testkit's private one, with runc and the
//! bridge CNI plugin): it starts every pod, measures each, and leaves no sandbox behind.

use std::time::Duration;

use capstan_bench::cri::{measure, CriArgs};
use capstan_cri::v1;
use capstan_cri::Runtime as _;
use capstan_testkit::node::{Containerd, Registry};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn starts_every_pod_through_cri_and_removes_them_after() {
    /// Deletes the bridge however the test ends (declared first: dropped last).
    struct Link(String);
    impl Drop for Link {
        fn drop(&mut self) {
            Containerd::remove_link(&self.0);
        }
    }
    let salt = std::process::id()
        ^ std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
    let bridge = format!("cbb{:08x}", salt.wrapping_mul(2654435761));
    let _link = Link(bridge.clone());
    let registry = Registry::start();
    let containerd = Containerd::start(&registry);
    // Outside the ranges the e2e clusters and the CRI tests take.
    let subnet = format!("10.252.{}.0/24", 1 + salt % 250);
    let conf = format!(
        r#"{{"cniVersion": "0.4.0", "name": "bench", "plugins": [
            {{"type": "bridge", "bridge": "{bridge}", "isGateway": true,
              "ipam": {{"type": "host-local", "dataDir": "{}/ipam",
                        "ranges": [[{{"subnet": "{subnet}"}}]]}}}}]}}"#,
        containerd.dir().display()
    );
    std::fs::write(containerd.cni_conf_dir().join("10-bench.conflist"), conf).unwrap();
    let logs = tempfile::tempdir().unwrap();
    let args = CriArgs {
        endpoint: containerd.endpoint(),
        pods: 3,
        image: registry.image("pause"),
        log_dir: Some(logs.path().to_path_buf()),
        timeout_seconds: 120,
    };
    runtime().block_on(async {
        let cri = capstan_cri::Cri::connect(&containerd.endpoint()).unwrap();
        // containerd picks the network configuration up from the directory.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let status = cri
                .status(v1::StatusRequest { verbose: false })
                .await
                .unwrap()
                .status
                .unwrap_or_default();
            let network_ready = status
                .conditions
                .iter()
                .any(|c| c.r#type == "NetworkReady" && c.status);
            if network_ready {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "containerd's network never became ready: {status:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let m = measure(&args).await.expect("the pods start");
        assert_eq!(m.pods, 3);
        assert!(m.p50_ms > 0.0, "{m:?}");
        assert!(m.p50_ms <= m.p99_ms && m.p99_ms <= m.max_ms, "{m:?}");
        // Every latency lies within the run.
        assert!(m.max_ms <= m.all_started_seconds * 1000.0 + 1.0, "{m:?}");
        // Each pod wrote its container's log where the sandbox said.
        for i in 0..3 {
            assert!(
                logs.path().join(format!("{i:05}/c")).is_dir(),
                "log directory of pod {i}"
            );
        }
        // Nothing of the run is left in the runtime.
        let left = cri
            .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
            .await
            .unwrap()
            .items;
        assert!(left.is_empty(), "sandboxes left: {left:?}");

        // A runtime that is not there is an error that names it.
        let missing = CriArgs {
            endpoint: format!("unix://{}/nothing.sock", logs.path().display()),
            ..args.clone()
        };
        let err = measure(&missing).await.unwrap_err();
        assert!(
            format!("{err:#}").contains("nothing.sock"),
            "unexpected error: {err:#}"
        );
    });
}
