//! `capstan bench nodes`: hollow nodes (Kubernetes' kubemark idea). Each registers a Node,
//! renews its Lease in `kube-node-lease` and posts node status like a kubelet, and "runs" the
//! pods bound to it without containers: a bound pod becomes Running and Ready with an address
//! from the node's podCIDR, and a pod being deleted is removed. Controllers, the scheduler and
//! whole clusters can so be exercised with many nodes on one machine.
//!
//! Pod annotations steer a hollow pod: `hollow.capstan.dev/exit-code: "N"` ends it
//! `hollow.capstan.dev/run-seconds` (default 0) seconds after it starts, Succeeded when N is 0,
//! Failed otherwise; `hollow.capstan.dev/ready: "false"` keeps it running but never Ready.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::watcher::{self, Event};
use kube::runtime::WatchStreamExt;
use kube::{Api, Client};
use serde_json::json;
use std::sync::Mutex;

pub const EXIT_CODE: &str = "hollow.capstan.dev/exit-code";
pub const RUN_SECONDS: &str = "hollow.capstan.dev/run-seconds";
pub const READY: &str = "hollow.capstan.dev/ready";
/// How long a node found without a pod CIDR is taken to have none.
const CIDR_RECHECK: Duration = Duration::from_secs(60);

#[derive(clap::Args, Debug, Clone)]
pub struct NodesArgs {
    /// The kubeconfig of the cluster (an identity allowed to write nodes, leases and pods).
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,

    /// Node names (comma-separated); otherwise --count nodes named PREFIX0, PREFIX1, ...
    #[arg(long, value_delimiter = ',')]
    pub names: Vec<String>,

    /// How many nodes, when --names is not given.
    #[arg(long, default_value_t = 1)]
    pub count: usize,

    /// The name prefix of counted nodes.
    #[arg(long, default_value = "hollow-")]
    pub prefix: String,

    /// How often each node renews its Lease (the kubelet's default is 10s).
    #[arg(long, default_value = "10s", value_parser = crate::duration::parse_duration)]
    pub lease_interval: Duration,

    /// How often each node posts status that did not change (Kubernetes'
    /// nodeStatusReportFrequency, 5m by default); the first report after registration comes
    /// after a random 50–150 % of it, as a kubelet's after a change.
    #[arg(long, default_value = "5m", value_parser = crate::duration::parse_duration)]
    pub node_status_report_frequency: Duration,

    /// How long a bound pod takes to start.
    #[arg(long, default_value = "300ms", value_parser = crate::duration::parse_duration)]
    pub start_delay: Duration,

    /// Allocatable CPU, memory and pods of each node.
    #[arg(long, default_value = "32")]
    pub cpu: String,
    #[arg(long, default_value = "256Gi")]
    pub memory: String,
    #[arg(long, default_value_t = 110)]
    pub pods: u32,

    /// Extra node labels, key=value (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub labels: Vec<String>,

    /// Remove the not-ready taint admission puts on new nodes (for clusters without a node
    /// lifecycle controller, which would otherwise lift it once the node is Ready).
    #[arg(long)]
    pub remove_not_ready_taint: bool,
}

impl NodesArgs {
    fn node_names(&self) -> Vec<String> {
        if self.names.is_empty() {
            (0..self.count)
                .map(|i| format!("{}{i}", self.prefix))
                .collect()
        } else {
            self.names.clone()
        }
    }
}

/// Run the hollow nodes until the process is stopped.
pub async fn run(args: NodesArgs) -> Result<()> {
    let client = crate::scheduler::client(&args.kubeconfig).await?;
    let names = args.node_names();
    let nodes: Api<Node> = Api::all(client.clone());
    for (i, name) in names.iter().enumerate() {
        register(&nodes, name, i, &args)
            .await
            .with_context(|| format!("registering node {name}"))?;
    }
    eprintln!("capstan: {} hollow node(s) running", names.len());
    for name in &names {
        tokio::spawn(heartbeat(
            client.clone(),
            name.clone(),
            args.lease_interval,
            args.node_status_report_frequency,
        ));
    }
    let kubelet = Arc::new(Kubelet {
        client: client.clone(),
        nodes: names.iter().cloned().collect(),
        index: names
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect(),
        started: Mutex::new(HashSet::new()),
        next_ip: Mutex::new(HashMap::new()),
        pod_cidrs: Mutex::new(HashMap::new()),
        start_delay: args.start_delay,
    });
    kubelet.run().await
}

async fn register(nodes: &Api<Node>, name: &str, i: usize, args: &NodesArgs) -> Result<()> {
    let mut labels = serde_json::Map::new();
    labels.insert("kubernetes.io/hostname".into(), json!(name));
    labels.insert("kubernetes.io/os".into(), json!("linux"));
    labels.insert("kubernetes.io/arch".into(), json!("amd64"));
    labels.insert("capstan.dev/hollow".into(), json!("true"));
    for l in &args.labels {
        if let Some((k, v)) = l.split_once('=') {
            labels.insert(k.into(), json!(v));
        }
    }
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels},
    }))?;
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    let resources = json!({"cpu": args.cpu, "memory": args.memory, "pods": args.pods.to_string(), "ephemeral-storage": "100Gi"});
    let status = json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": conditions(),
        "addresses": [
            {"type": "InternalIP", "address": format!("172.30.{}.{}", (i / 250) % 250, i % 250 + 2)},
            {"type": "Hostname", "address": name},
        ],
        "nodeInfo": {
            "machineID": format!("hollow{i:026}"),
            "systemUUID": format!("hollow-{i}"),
            "bootID": format!("hollow-boot-{i}"),
            "kernelVersion": "6.1.0-hollow",
            "osImage": "capstan hollow node",
            "containerRuntimeVersion": "hollow://1.0.0",
            "kubeletVersion": "v1.32.0",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
    }});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    if args.remove_not_ready_taint {
        let patch = json!({"spec": {"taints": null}});
        nodes
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

fn conditions() -> serde_json::Value {
    let now = Timestamp::now().to_string();
    let c = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!([
        c(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        c(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        c(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        c(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status"
        ),
    ])
}

/// Renew the node's Lease every `interval` (stretched by up to 4 % at random, as Kubernetes'
/// lease controller's wait.JitterUntil) as a kubelet does (an update of the Lease it last
/// wrote, read again only after a failure); post node status every `report` (as a kubelet
/// whose status did not change), the first time after a random 50–150 % of it.
async fn heartbeat(client: Client, name: String, interval: Duration, report: Duration) {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let nodes: Api<Node> = Api::all(client);
    let mut next_status = tokio::time::Instant::now() + report.mul_f64(0.5 + rand::random::<f64>());
    let mut current: Option<Lease> = None;
    loop {
        match renew(&leases, &name, current.take()).await {
            Ok(lease) => current = Some(lease),
            Err(e) => tracing::debug!(node = %name, error = %e, "lease renewal failed"),
        }
        if tokio::time::Instant::now() >= next_status {
            next_status = tokio::time::Instant::now() + report;
            let patch = json!({"status": {"conditions": conditions()}});
            let _ = nodes
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await;
        }
        tokio::time::sleep(interval.mul_f64(1.0 + rand::random::<f64>() * 0.04)).await;
    }
}

/// One renewal: update `last` (or the Lease as stored, or a new one) with the time now.
async fn renew(leases: &Api<Lease>, name: &str, last: Option<Lease>) -> kube::Result<Lease> {
    let now = MicroTime(Timestamp::now());
    let stored = match last {
        Some(l) => Some(l),
        None => leases.get_opt(name).await?,
    };
    match stored {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.holder_identity = Some(name.to_string());
            spec.lease_duration_seconds = Some(40);
            spec.renew_time = Some(now);
            leases.replace(name, &PostParams::default(), &lease).await
        }
        None => {
            let mut lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "kube-node-lease"},
                "spec": {"holderIdentity": name, "leaseDurationSeconds": 40},
            }))
            .map_err(kube::Error::SerdeError)?;
            if let Some(spec) = lease.spec.as_mut() {
                spec.renew_time = Some(now);
            }
            leases.create(&PostParams::default(), &lease).await
        }
    }
}

/// A pod as a hollow node reads it: the few members it acts on. The watch and the answers to
/// its status patches carry whole pods (~5 KB, managedFields and all); the harness shares the
/// machine with the cluster it measures, so it skips the rest instead of building it.
#[derive(Clone, Debug, serde::Deserialize)]
struct HollowPod {
    #[serde(deserialize_with = "hollow_meta")]
    metadata: ObjectMeta,
    spec: Option<HollowSpec>,
    status: Option<HollowStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HollowSpec {
    node_name: Option<String>,
    #[serde(default)]
    containers: Vec<HollowContainer>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct HollowContainer {
    name: String,
    image: Option<String>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct HollowStatus {
    phase: Option<String>,
    qos_class: Option<String>,
}

/// The metadata a hollow node uses (and the watch its resourceVersion), without managedFields
/// and the rest.
fn hollow_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        deletion_timestamp: Option<Time>,
        annotations: Option<std::collections::BTreeMap<String, String>>,
    }
    let m = <Meta as serde::Deserialize>::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        deletion_timestamp: m.deletion_timestamp,
        annotations: m.annotations,
        ..Default::default()
    })
}

/// Addressed as the Pod it reads.
impl kube::Resource for HollowPod {
    type DynamicType = ();
    type Scope = <Pod as kube::Resource>::Scope;

    fn kind(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::kind(dt)
    }
    fn group(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::group(dt)
    }
    fn version(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::version(dt)
    }
    fn plural(dt: &()) -> std::borrow::Cow<'_, str> {
        Pod::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

struct Kubelet {
    client: Client,
    nodes: HashSet<String>,
    index: HashMap<String, usize>,
    /// Pods (by uid) this kubelet has started.
    started: Mutex<HashSet<String>>,
    next_ip: Mutex<HashMap<String, u32>>,
    /// Pod CIDRs of the nodes (read once, not per pod): once assigned, or none as read at
    /// that time (read again after [`CIDR_RECHECK`]; nodeipam may have run out of CIDRs).
    pod_cidrs: Mutex<HashMap<String, (Option<String>, tokio::time::Instant)>>,
    start_delay: Duration,
}

impl Kubelet {
    async fn run(self: Arc<Self>) -> Result<()> {
        let pods: Api<HollowPod> = Api::all(self.client.clone());
        let cfg = watcher::Config::default().fields("spec.nodeName!=");
        let mut stream = std::pin::pin!(watcher::watcher(pods, cfg).default_backoff());
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Apply(p)) | Ok(Event::InitApply(p)) => self.clone().observe(p),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "pod watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
        Ok(())
    }

    fn observe(self: Arc<Self>, pod: HollowPod) {
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
        let Some(node) = node.filter(|n| self.nodes.contains(n)) else {
            return;
        };
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if pod.metadata.deletion_timestamp.is_some() {
            // The kubelet has stopped the containers: finish the deletion.
            tokio::spawn(async move {
                let api: Api<HollowPod> = Api::namespaced(self.client.clone(), &namespace(&pod));
                let dp = DeleteParams {
                    grace_period_seconds: Some(0),
                    preconditions: Some(Preconditions {
                        uid: Some(uid.clone()),
                        resource_version: None,
                    }),
                    ..Default::default()
                };
                let _ = api.delete(&name(&pod), &dp).await;
                self.started.lock().unwrap().remove(&uid);
            });
            return;
        }
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if matches!(phase, Some("Succeeded") | Some("Failed")) {
            return;
        }
        if !self.started.lock().unwrap().insert(uid) {
            return;
        }
        tokio::spawn(async move {
            if let Err(e) = self.start(&pod, &node).await {
                tracing::debug!(pod = %name(&pod), error = %e, "starting a hollow pod failed");
                let uid = pod.metadata.uid.clone().unwrap_or_default();
                self.started.lock().unwrap().remove(&uid);
            }
        });
    }

    async fn pod_ip(&self, node: &str) -> String {
        let n = {
            let mut m = self.next_ip.lock().unwrap();
            let c = m.entry(node.to_string()).or_insert(0);
            *c += 1;
            *c
        };
        let known = self
            .pod_cidrs
            .lock()
            .unwrap()
            .get(node)
            .filter(|(c, read)| c.is_some() || read.elapsed() < CIDR_RECHECK)
            .map(|(c, _)| c.clone());
        let cidr = match known {
            Some(c) => c,
            None => {
                let nodes: Api<Node> = Api::all(self.client.clone());
                let cidr = nodes
                    .get(node)
                    .await
                    .ok()
                    .and_then(|n| n.spec.and_then(|s| s.pod_cidr));
                self.pod_cidrs.lock().unwrap().insert(
                    node.to_string(),
                    (cidr.clone(), tokio::time::Instant::now()),
                );
                cidr
            }
        };
        let host = n % 253 + 1;
        if let Some(base) = cidr.as_deref().and_then(|c| c.split('/').next()) {
            let o: Vec<&str> = base.split('.').collect();
            if o.len() == 4 {
                return format!("{}.{}.{}.{}", o[0], o[1], o[2], host + 1);
            }
        }
        let i = self.index.get(node).copied().unwrap_or(0);
        format!("100.{}.{}.{}", 64 + (i / 256) % 64, i % 256, host + 1)
    }

    async fn start(&self, pod: &HollowPod, node: &str) -> Result<()> {
        tokio::time::sleep(self.start_delay).await;
        let api: Api<HollowPod> = Api::namespaced(self.client.clone(), &namespace(pod));
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let ready = annotations.get(READY).map(String::as_str) != Some("false");
        let ip = self.pod_ip(node).await;
        let host_ip = {
            let i = self.index.get(node).copied().unwrap_or(0);
            format!("172.30.{}.{}", (i / 250) % 250, i % 250 + 2)
        };
        let started = Timestamp::now().to_string();
        let containers: Vec<_> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(),
                    "imageID": format!("hollow://{}", c.image.clone().unwrap_or_default()),
                    "containerID": format!("hollow://{}-{}", pod.metadata.uid.clone().unwrap_or_default(), c.name),
                    "ready": ready, "started": true, "restartCount": 0,
                    "state": {"running": {"startedAt": started}},
                })
            })
            .collect();
        let cond = |t: &str, ok: bool| json!({"type": t, "status": if ok {"True"} else {"False"}, "lastTransitionTime": started, "lastProbeTime": null});
        let status = json!({"status": {
            "phase": "Running",
            "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
            "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": started,
            "conditions": [cond("PodReadyToStartContainers", true), cond("Initialized", true),
                           cond("Ready", ready), cond("ContainersReady", ready), cond("PodScheduled", true)],
            "containerStatuses": containers,
            "qosClass": pod.status.as_ref().and_then(|s| s.qos_class.clone()),
        }});
        let name = name(pod);
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        let Some(code) = annotations
            .get(EXIT_CODE)
            .and_then(|c| c.parse::<i32>().ok())
        else {
            return Ok(());
        };
        let secs: f64 = annotations
            .get(RUN_SECONDS)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0.0);
        tokio::time::sleep(Duration::from_secs_f64(secs.max(0.0))).await;
        let finished = Timestamp::now().to_string();
        let containers: Vec<_> = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .map(|c| {
                json!({
                    "name": c.name, "image": c.image.clone().unwrap_or_default(),
                    "imageID": format!("hollow://{}", c.image.clone().unwrap_or_default()),
                    "containerID": format!("hollow://{}-{}", pod.metadata.uid.clone().unwrap_or_default(), c.name),
                    "ready": false, "started": false, "restartCount": 0,
                    "state": {"terminated": {"exitCode": code, "reason": if code == 0 {"Completed"} else {"Error"},
                                             "startedAt": started, "finishedAt": finished,
                                             "containerID": format!("hollow://{}-{}", pod.metadata.uid.clone().unwrap_or_default(), c.name)}},
                })
            })
            .collect();
        let done = |t: &str| json!({"type": t, "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished, "lastProbeTime": null});
        let status = json!({"status": {
            "phase": if code == 0 {"Succeeded"} else {"Failed"},
            "conditions": [cond("PodReadyToStartContainers", false), cond("Initialized", true),
                           done("Ready"), done("ContainersReady"), cond("PodScheduled", true)],
            "containerStatuses": containers,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await?;
        Ok(())
    }
}

fn name(p: &HollowPod) -> String {
    p.metadata.name.clone().unwrap_or_default()
}

fn namespace(p: &HollowPod) -> String {
    p.metadata.namespace.clone().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hollow_pod_reads_what_a_hollow_node_acts_on_from_a_whole_pod() {
        let whole = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "deletionTimestamp": "2026-12-04T10:00:00Z",
                "annotations": {EXIT_CODE: "3"}, "labels": {"app": "web"},
                "managedFields": [{"manager": "m", "operation": "Update",
                                   "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": {"nodeName": "hollow-7", "restartPolicy": "Always",
                     "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A"}]},
                                    {"name": "d"}],
                     "volumes": [{"name": "v", "emptyDir": {}}]},
            "status": {"phase": "Pending", "qosClass": "BestEffort",
                       "conditions": [{"type": "PodScheduled", "status": "True"}]},
        });
        let p: HollowPod = serde_json::from_value(whole).unwrap();
        assert_eq!(
            (name(&p), namespace(&p), p.metadata.uid.as_deref()),
            ("web-1".to_string(), "ns".to_string(), Some("u-1"))
        );
        assert_eq!(p.metadata.resource_version.as_deref(), Some("42"));
        assert!(p.metadata.deletion_timestamp.is_some());
        assert_eq!(p.metadata.annotations.as_ref().unwrap()[EXIT_CODE], "3");
        assert!(p.metadata.managed_fields.is_none() && p.metadata.labels.is_none());
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("hollow-7"));
        let containers: Vec<_> = spec
            .containers
            .iter()
            .map(|c| (c.name.as_str(), c.image.as_deref()))
            .collect();
        assert_eq!(containers, [("c", Some("nginx")), ("d", None)]);
        let status = p.status.as_ref().unwrap();
        assert_eq!(
            (status.phase.as_deref(), status.qos_class.as_deref()),
            (Some("Pending"), Some("BestEffort"))
        );
        // A bare pod (as a watch may carry) reads too.
        let bare: HollowPod = serde_json::from_value(json!({"metadata": {}})).unwrap();
        assert!(bare.spec.is_none() && bare.metadata.name.is_none());
        // It is addressed as pods are.
        let url =
            kube::core::Request::new(<HollowPod as kube::Resource>::url_path(&(), Some("ns")))
                .get("web-1", &kube::api::GetParams::default())
                .unwrap();
        assert_eq!(url.uri().path(), "/api/v1/namespaces/ns/pods/web-1");
    }

    #[test]
    fn counted_names_use_the_prefix() {
        let a = NodesArgs {
            kubeconfig: "k".into(),
            names: vec![],
            count: 2,
            prefix: "h-".into(),
            node_status_report_frequency: Duration::from_secs(300),
            lease_interval: Duration::from_secs(1),
            start_delay: Duration::ZERO,
            cpu: "1".into(),
            memory: "1Gi".into(),
            pods: 10,
            labels: vec![],
            remove_not_ready_taint: false,
        };
        assert_eq!(a.node_names(), vec!["h-0", "h-1"]);
        let b = NodesArgs {
            names: vec!["x".into()],
            ..a
        };
        assert_eq!(b.node_names(), vec!["x"]);
    }
}
