//! The node agent against a fake CRI runtime (no API server is reached).

use std::sync::Arc;

use capstan_cri::{v1, Runtime, Status};
use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use parking_lot::Mutex;
use serde_json::json;

use super::*;
use crate::{Kubelet, Options};

#[derive(Default)]
struct FakeRuntime {
    runtime_ready: Mutex<bool>,
    network_ready: Mutex<bool>,
    images: Mutex<Vec<v1::Image>>,
    pod_cidrs: Mutex<Vec<String>>,
    list_images_calls: Mutex<usize>,
}

/// The fake's impl: the methods given, and every other CRI call unimplemented.
macro_rules! fake_runtime_impl {
    ({ $($given:item)* } $($method:ident($req:ident) -> $resp:ident;)*) => {
        #[async_trait::async_trait]
        impl Runtime for FakeRuntime {
            $($given)*
            $(
                async fn $method(&self, _req: v1::$req) -> capstan_cri::Result<v1::$resp> {
                    Err(Status::unimplemented(stringify!($method)))
                }
            )*
        }
    };
}

fake_runtime_impl! {
    {
        async fn version(&self, _req: v1::VersionRequest) -> capstan_cri::Result<v1::VersionResponse> {
            Ok(v1::VersionResponse {
                version: "0.1.0".into(),
                runtime_name: "containerd".into(),
                runtime_version: "1.6.20~ds1".into(),
                runtime_api_version: "v1".into(),
            })
        }

        async fn status(&self, _req: v1::StatusRequest) -> capstan_cri::Result<v1::StatusResponse> {
            let cond = |t: &str, ok: bool, reason: &str, message: &str| v1::RuntimeCondition {
                r#type: t.into(),
                status: ok,
                reason: if ok { String::new() } else { reason.into() },
                message: if ok { String::new() } else { message.into() },
            };
            Ok(v1::StatusResponse {
                status: Some(v1::RuntimeStatus {
                    conditions: vec![
                        cond(
                            "RuntimeReady",
                            *self.runtime_ready.lock(),
                            "Down",
                            "it is down",
                        ),
                        cond(
                            "NetworkReady",
                            *self.network_ready.lock(),
                            "NetworkPluginNotReady",
                            "Network plugin returns error: cni plugin not initialized",
                        ),
                    ],
                }),
                ..Default::default()
            })
        }

        async fn list_images(
            &self,
            _req: v1::ListImagesRequest,
        ) -> capstan_cri::Result<v1::ListImagesResponse> {
            *self.list_images_calls.lock() += 1;
            Ok(v1::ListImagesResponse {
                images: self.images.lock().clone(),
            })
        }

        async fn update_runtime_config(
            &self,
            req: v1::UpdateRuntimeConfigRequest,
        ) -> capstan_cri::Result<v1::UpdateRuntimeConfigResponse> {
            let cidr = req
                .runtime_config
                .and_then(|c| c.network_config)
                .map(|n| n.pod_cidr)
                .unwrap_or_default();
            self.pod_cidrs.lock().push(cidr);
            Ok(v1::UpdateRuntimeConfigResponse {})
        }

    }
    run_pod_sandbox(RunPodSandboxRequest) -> RunPodSandboxResponse;
    stop_pod_sandbox(StopPodSandboxRequest) -> StopPodSandboxResponse;
    remove_pod_sandbox(RemovePodSandboxRequest) -> RemovePodSandboxResponse;
    pod_sandbox_status(PodSandboxStatusRequest) -> PodSandboxStatusResponse;
    list_pod_sandbox(ListPodSandboxRequest) -> ListPodSandboxResponse;
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
    image_status(ImageStatusRequest) -> ImageStatusResponse;
    pull_image(PullImageRequest) -> PullImageResponse;
    remove_image(RemoveImageRequest) -> RemoveImageResponse;
    image_fs_info(ImageFsInfoRequest) -> ImageFsInfoResponse;
}

struct Setup {
    _dir: tempfile::TempDir,
    fake: Arc<FakeRuntime>,
    agent: Agent,
    cni_dir: std::path::PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(FakeRuntime {
        runtime_ready: Mutex::new(true),
        ..Default::default()
    });
    let cni_dir = dir.path().join("net.d");
    let opts = Options {
        node_name: "node-a".into(),
        root_dir: dir.path().join("root"),
        node_ip: Some("127.0.0.1".parse().unwrap()),
        port: 10250,
        cni_conf_dir: Some(cni_dir.clone()),
        cni_bridge: "cni-test0".into(),
        node_labels: [("example.com/role".to_string(), "db".to_string())].into(),
        register_with_taints: vec![Taint {
            key: "example.com/dedicated".into(),
            value: Some("db".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }],
        ..Options::default()
    };
    std::fs::create_dir_all(&opts.root_dir).unwrap();
    // Nothing listens here: the fake runtime is all these tests talk to.
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    let k = Kubelet::new(client, fake.clone(), opts);
    Setup {
        _dir: dir,
        fake,
        agent: Agent::new(k),
        cni_dir,
    }
}

fn cond<'a>(n: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    n.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

#[tokio::test]
async fn the_initial_node_carries_labels_taints_annotation_and_status() {
    let s = setup();
    s.agent.update_runtime_up().await;
    let (node, events) = s.agent.initial_node().await;
    let labels = node.metadata.labels.as_ref().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "node-a");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], status::go_arch());
    assert_eq!(labels["example.com/role"], "db");
    // The beta os/arch labels are the node lifecycle controller's to add.
    assert!(!labels.contains_key("beta.kubernetes.io/os"));
    assert_eq!(
        node.metadata.annotations.as_ref().unwrap()[CONTROLLER_MANAGED_ATTACH_DETACH],
        "true"
    );
    let taints = node.spec.as_ref().unwrap().taints.as_ref().unwrap();
    assert_eq!(taints.len(), 1);
    assert_eq!(taints[0].key, "example.com/dedicated");
    let status = node.status.as_ref().unwrap();
    let info = status.node_info.as_ref().unwrap();
    assert_eq!(info.container_runtime_version, "containerd://1.6.20");
    assert_eq!(info.kubelet_version, crate::KUBELET_VERSION);
    assert!(!info.boot_id.is_empty());
    let addrs = status.addresses.as_ref().unwrap();
    assert_eq!(addrs[0].address, "127.0.0.1");
    assert_eq!(addrs[1].address, "node-a");
    // No network yet: NotReady, with the runtime's reason.
    let ready = cond(&node, "Ready").unwrap();
    assert_eq!(ready.status, "False");
    assert_eq!(ready.message.as_deref(), Some("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"));
    assert_eq!(events.len(), 3);
    assert!(status
        .capacity
        .as_ref()
        .unwrap()
        .contains_key("ephemeral-storage"));
}

#[tokio::test]
async fn runtime_health_before_and_after_the_first_check() {
    let s = setup();
    let h = s.agent.runtime.lock().health(Instant::now());
    assert_eq!(
        status::aggregate_message(
            &h.runtime_errors
                .iter()
                .chain(&h.network_errors)
                .cloned()
                .collect::<Vec<_>>()
        )
        .as_deref(),
        Some("[container runtime status check may not have completed yet, network state unknown]")
    );
    *s.fake.network_ready.lock() = true;
    s.agent.update_runtime_up().await;
    assert!(s.agent.runtime.lock().health(Instant::now()).ready());
    // A runtime that stops answering healthy is down after the threshold.
    let later = Instant::now() + RUNTIME_DOWN_THRESHOLD + Duration::from_secs(1);
    let h = s.agent.runtime.lock().health(later);
    assert_eq!(h.runtime_errors, ["container runtime is down"]);
    *s.fake.runtime_ready.lock() = false;
    s.agent.update_runtime_up().await;
    let h = s.agent.runtime.lock().health(Instant::now());
    assert_eq!(
        h.runtime_errors,
        ["container runtime not ready: RuntimeReady=false reason:Down message:it is down"]
    );
}

#[tokio::test]
async fn a_pod_cidr_brings_the_network_config_and_a_runtime_update() {
    let s = setup();
    s.agent.update_runtime_up().await;
    let (mut node, _) = s.agent.initial_node().await;
    node.metadata.resource_version = Some("1".into());

    // No pod CIDR: nothing is written, nothing is told.
    let c = s.agent.compute(&node).await;
    assert!(!c.changed, "the initial status is already current");
    assert!(!s.cni_dir.join(cni::CONFLIST_NAME).exists());
    assert!(s.fake.pod_cidrs.lock().is_empty());

    node.spec = Some(NodeSpec {
        pod_cidr: Some("10.244.3.0/24".into()),
        pod_cidrs: Some(vec!["10.244.3.0/24".into()]),
        ..Default::default()
    });
    let c = s.agent.compute(&node).await;
    assert!(c.changed, "a new pod CIDR is a change");
    assert_eq!(*s.fake.pod_cidrs.lock(), ["10.244.3.0/24"]);
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.cni_dir.join(cni::CONFLIST_NAME)).unwrap())
            .unwrap();
    assert_eq!(written["plugins"][0]["bridge"], "cni-test0");
    assert_eq!(
        written["plugins"][0]["ipam"]["ranges"],
        json!([[{"subnet": "10.244.3.0/24"}]])
    );
    assert!(written["plugins"][0]["ipam"]["dataDir"]
        .as_str()
        .unwrap()
        .ends_with("root/cni/networks"));

    // The runtime then reports its network ready: the node turns Ready.
    *s.fake.network_ready.lock() = true;
    s.agent.update_runtime_up().await;
    let c = s.agent.compute(&node).await;
    assert!(c.changed);
    let ready = cond(&c.node, "Ready").unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.reason.as_deref(), Some("KubeletReady"));
    assert_eq!(c.events.len(), 1);
    assert_eq!(c.events[0].reason, "NodeReady");
    assert_eq!(*s.fake.pod_cidrs.lock(), ["10.244.3.0/24"], "told once");

    // Computing again over the written node changes nothing but heartbeats.
    let mut written_node = c.node.clone();
    written_node.metadata.resource_version = Some("2".into());
    let again = s.agent.compute(&written_node).await;
    assert!(!again.changed);
    assert!(again.events.is_empty());
    assert!(again.labels.is_empty());

    // A Node that lost its os label gets it back, and that is a change.
    written_node
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove("kubernetes.io/os");
    let fixed = s.agent.compute(&written_node).await;
    assert!(fixed.changed);
    assert_eq!(fixed.labels["kubernetes.io/os"], "linux");
}

#[tokio::test]
async fn images_are_listed_at_most_every_period() {
    let s = setup();
    *s.fake.images.lock() = vec![v1::Image {
        id: "sha256:p".into(),
        repo_tags: vec!["127.0.0.1:5000/pause:3.10".into()],
        repo_digests: vec!["127.0.0.1:5000/pause@sha256:abc".into()],
        size: 320_000,
        ..Default::default()
    }];
    let obs = s.agent.observe().await;
    let imgs = status::images(obs.images.as_deref().unwrap());
    assert_eq!(
        imgs[0].names.as_deref().unwrap(),
        [
            "127.0.0.1:5000/pause@sha256:abc",
            "127.0.0.1:5000/pause:3.10"
        ]
    );
    s.agent.observe().await;
    assert_eq!(*s.fake.list_images_calls.lock(), 1);
    s.agent.refresh_images();
    s.agent.observe().await;
    assert_eq!(*s.fake.list_images_calls.lock(), 2);
}

#[tokio::test]
async fn publishing_keeps_the_newest_node() {
    let s = setup();
    let node = |rv: &str, cidr: &str| Node {
        metadata: ObjectMeta {
            name: Some("node-a".into()),
            resource_version: Some(rv.into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            pod_cidr: Some(cidr.into()),
            ..Default::default()
        }),
        status: None,
    };
    s.agent.publish(node("10", "a"));
    s.agent.publish(node("9", "b"));
    let cur = s.agent.k.node.borrow().clone().unwrap();
    assert_eq!(cur.spec.as_ref().unwrap().pod_cidr.as_deref(), Some("a"));
    s.agent.publish(node("11", "c"));
    let cur = s.agent.k.node.borrow().clone().unwrap();
    assert_eq!(cur.spec.as_ref().unwrap().pod_cidr.as_deref(), Some("c"));
}

#[test]
fn pod_cidrs_prefer_the_list() {
    let mut n = Node::default();
    assert!(pod_cidrs(&n).is_empty());
    n.spec = Some(NodeSpec {
        pod_cidr: Some("10.0.0.0/24".into()),
        ..Default::default()
    });
    assert_eq!(pod_cidrs(&n), ["10.0.0.0/24"]);
    n.spec.as_mut().unwrap().pod_cidrs = Some(vec!["10.0.0.0/24".into(), "fd00::/64".into()]);
    assert_eq!(pod_cidrs(&n), ["10.0.0.0/24", "fd00::/64"]);
    n.spec.as_mut().unwrap().pod_cidr = Some(String::new());
    n.spec.as_mut().unwrap().pod_cidrs = None;
    assert!(pod_cidrs(&n).is_empty());
}

#[test]
fn re_registration_sets_back_what_the_kubelet_owns() {
    let initial = Node {
        metadata: ObjectMeta {
            name: Some("node-a".into()),
            labels: Some(
                [
                    ("kubernetes.io/hostname", "node-a"),
                    ("kubernetes.io/os", "linux"),
                    ("kubernetes.io/arch", "amd64"),
                    ("example.com/role", "db"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            annotations: Some(
                [(CONTROLLER_MANAGED_ATTACH_DETACH.to_string(), "true".into())].into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    assert_eq!(reconcile_patch(&initial, &initial), None);
    let mut existing = initial.clone();
    existing.metadata.annotations = None;
    let labels = existing.metadata.labels.as_mut().unwrap();
    labels.insert("kubernetes.io/hostname".into(), "old".into());
    labels.remove("kubernetes.io/arch");
    // Labels the kubelet does not own are not set back.
    labels.remove("example.com/role");
    labels.insert("team".into(), "x".into());
    assert_eq!(
        reconcile_patch(&initial, &existing),
        Some(json!({"metadata": {
            "labels": {"kubernetes.io/hostname": "node-a", "kubernetes.io/arch": "amd64"},
            "annotations": {CONTROLLER_MANAGED_ATTACH_DETACH: "true"},
        }}))
    );
}

#[test]
fn the_status_patch_merges_conditions_and_drops_vanished_resources() {
    let q = |s: &str| Quantity(s.into());
    let orig = Node {
        status: Some(NodeStatus {
            capacity: Some([("cpu".into(), q("2")), ("hugepages-1Gi".into(), q("0"))].into()),
            allocatable: Some([("cpu".into(), q("2"))].into()),
            ..Default::default()
        }),
        ..Default::default()
    };
    let new = Node {
        status: Some(NodeStatus {
            capacity: Some([("cpu".into(), q("4"))].into()),
            allocatable: Some([("cpu".into(), q("4"))].into()),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                ..Default::default()
            }]),
            images: Some(vec![]),
            ..Default::default()
        }),
        ..Default::default()
    };
    let p = status_patch(&orig, &new);
    assert_eq!(
        p["status"]["capacity"],
        json!({"cpu": "4", "hugepages-1Gi": null})
    );
    assert_eq!(p["status"]["allocatable"], json!({"cpu": "4"}));
    assert_eq!(p["status"]["conditions"][0]["type"], "Ready");
    assert_eq!(p["status"]["images"], serde_json::Value::Null);
    assert!(p["status"].get("phase").is_none());
    assert!(p.get("spec").is_none() && p.get("metadata").is_none());
}

#[test]
fn events_name_the_node_by_name() {
    let r = node_ref("node-a");
    assert_eq!(r.kind.as_deref(), Some("Node"));
    assert_eq!(r.name.as_deref(), Some("node-a"));
    assert_eq!(r.uid.as_deref(), Some("node-a"));
    assert_eq!(r.namespace, None);
}
