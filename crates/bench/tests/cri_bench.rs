//! `capstan bench cri` against a real containerd (testkit's private one, with runc and the
//! bridge CNI plugin): it starts every pod, measures each, and leaves no sandbox behind.

use capstan_bench::cri::{measure, CriArgs};
use capstan_cri::v1;
use capstan_cri::Runtime as _;
use capstan_testkit::node::{BridgeNetwork, Containerd, Registry};

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn starts_every_pod_through_cri_and_removes_them_after() {
    // Declared first: the bridge goes after the pods.
    let net = BridgeNetwork::new("cbb", 252);
    let registry = Registry::start();
    let containerd = Containerd::start(&registry);
    net.install(&containerd, false, false);
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
