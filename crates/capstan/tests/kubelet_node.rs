//! The kubelet's Node on a real machine (containerd, CNI plugins): registration with the
//! standard labels and node info, the pod CIDR's CNI network turning the node Ready,
//! capacity and allocatable, the Lease heartbeat, events, `kubectl get/describe node`, and
//! the images the node holds.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::*;

const WAIT: Duration = Duration::from_secs(120);

fn get_json(s: &Server, args: &[&str]) -> Value {
    let mut a = vec!["get"];
    a.extend_from_slice(args);
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(&a)).expect("kubectl prints json")
}

fn condition<'a>(node: &'a Value, type_: &str) -> &'a Value {
    node["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {node:#}"))
}

/// A quantity in bytes (the forms the kubelet writes: plain, or with a binary suffix).
fn bytes(q: &Value) -> u64 {
    let s = q.as_str().unwrap_or_else(|| panic!("quantity {q}"));
    for (suffix, mult) in [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
    ] {
        if let Some(n) = s.strip_suffix(suffix) {
            return n.parse::<u64>().unwrap() * mult;
        }
    }
    s.parse().unwrap_or_else(|_| panic!("quantity {s}"))
}

fn host_file(path: &str) -> String {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[test]
fn a_kubelet_registers_its_node_turns_ready_and_keeps_its_lease() {
    let s = Server::start_cluster(&["--cluster-cidr", &unique_cluster_cidr()]);
    // Waits until the node is registered and Ready.
    let mut k = s.kubelet("node-a");
    let node = get_json(&s, &["node", "node-a"]);
    let uid = node["metadata"]["uid"].as_str().unwrap().to_string();
    let arch = match std::env::consts::ARCH {
        "aarch64" => "arm64",
        _ => "amd64",
    };

    // Registration: the kubelet's labels and annotation; the beta labels come from the node
    // lifecycle controller.
    let labels = &node["metadata"]["labels"];
    assert_eq!(labels["kubernetes.io/hostname"], "node-a");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["kubernetes.io/arch"], arch);
    wait_until("the beta os/arch labels", WAIT, || {
        let n = get_json(&s, &["node", "node-a"]);
        n["metadata"]["labels"]["beta.kubernetes.io/os"] == "linux"
            && n["metadata"]["labels"]["beta.kubernetes.io/arch"] == arch
    });
    assert_eq!(
        node["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"],
        "true"
    );

    // The pod CIDR from node IPAM, and the CNI network written for it.
    let cidr = node["spec"]["podCIDR"]
        .as_str()
        .expect("a podCIDR")
        .to_string();
    let conflist = k.containerd().cni_conf_dir().join("10-capstan.conflist");
    let conf: Value = serde_json::from_str(&std::fs::read_to_string(&conflist).unwrap()).unwrap();
    assert_eq!(conf["name"], "capstan");
    assert_eq!(conf["plugins"][0]["type"], "bridge");
    assert_eq!(conf["plugins"][0]["bridge"], k.bridge());
    assert_eq!(
        conf["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
        cidr.as_str()
    );
    assert_eq!(conf["plugins"][1]["type"], "portmap");

    // Conditions.
    let ready = condition(&node, "Ready");
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["reason"], "KubeletReady");
    assert_eq!(ready["message"], "kubelet is posting ready status");
    for (type_, reason) in [
        ("MemoryPressure", "KubeletHasSufficientMemory"),
        ("DiskPressure", "KubeletHasNoDiskPressure"),
        ("PIDPressure", "KubeletHasSufficientPID"),
    ] {
        let c = condition(&node, type_);
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("False"), Some(reason))
        );
        assert!(c["lastHeartbeatTime"].is_string() && c["lastTransitionTime"].is_string());
    }
    let conditions: Vec<&str> = node["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    assert_eq!(conditions.last(), Some(&"Ready"), "Ready comes last");

    // Node info.
    let info = &node["status"]["nodeInfo"];
    assert!(
        info["kubeletVersion"]
            .as_str()
            .unwrap()
            .starts_with("v1.32."),
        "{info}"
    );
    assert!(
        info["containerRuntimeVersion"]
            .as_str()
            .unwrap()
            .starts_with("containerd://1."),
        "{info}"
    );
    assert_eq!(info["operatingSystem"], "linux");
    assert_eq!(info["architecture"], arch);
    assert_eq!(info["bootID"], host_file("/proc/sys/kernel/random/boot_id"));
    assert_eq!(info["machineID"], host_file("/etc/machine-id"));
    assert!(!info["kernelVersion"].as_str().unwrap().is_empty());
    assert!(!info["osImage"].as_str().unwrap().is_empty());

    // Addresses and the kubelet's endpoint.
    let addresses = node["status"]["addresses"].as_array().unwrap();
    let address = |t: &str| {
        addresses
            .iter()
            .find(|a| a["type"] == t)
            .and_then(|a| a["address"].as_str())
            .unwrap_or_else(|| panic!("no {t} address: {addresses:?}"))
            .to_string()
    };
    let internal_ip: std::net::IpAddr = address("InternalIP").parse().expect("an IP");
    assert!(!internal_ip.is_unspecified());
    assert_eq!(address("Hostname"), "node-a");
    assert_eq!(
        node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
        k.port()
    );

    // Capacity and allocatable: the machine less the default eviction thresholds.
    let cap = &node["status"]["capacity"];
    let alloc = &node["status"]["allocatable"];
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert!(cap["cpu"].as_str().unwrap().parse::<usize>().unwrap() >= cpus);
    assert_eq!(cap["cpu"], alloc["cpu"]);
    assert_eq!(cap["pods"], "110");
    let mem_total = host_file("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap()
        * 1024;
    assert_eq!(bytes(&cap["memory"]), mem_total);
    assert_eq!(bytes(&alloc["memory"]), mem_total - 100 * 1024 * 1024);
    let disk = bytes(&cap["ephemeral-storage"]);
    let disk_alloc = bytes(&alloc["ephemeral-storage"]);
    assert!(disk > 0);
    // The support's kubelets run with --eviction-hard nodefs.available<1%.
    assert_eq!(disk - disk_alloc, (disk as f64 * f64::from(0.01f32)) as u64);
    assert!(cap.get("hugepages-2Mi").is_some(), "{cap}");

    // The Lease: held by the node, owned by its Node, renewed every 10 s.
    wait_until("the node's lease", Duration::from_secs(30), || {
        s.kubectl(&["get", "lease", "-n", "kube-node-lease", "node-a"])
            .status
            .success()
    });
    let lease = get_json(&s, &["lease", "-n", "kube-node-lease", "node-a"]);
    assert_eq!(lease["spec"]["holderIdentity"], "node-a");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 40);
    let owner = &lease["metadata"]["ownerReferences"][0];
    assert_eq!(owner["apiVersion"], "v1");
    assert_eq!(owner["kind"], "Node");
    assert_eq!(owner["name"], "node-a");
    assert_eq!(owner["uid"], uid.as_str());
    let first_renewal = lease["spec"]["renewTime"].as_str().unwrap().to_string();
    let started = Instant::now();
    wait_until("the lease to be renewed", Duration::from_secs(60), || {
        let l = get_json(&s, &["lease", "-n", "kube-node-lease", "node-a"]);
        l["spec"]["renewTime"].as_str() != Some(&first_renewal)
    });
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "renewed every 10 s (+4%), not after {:?}",
        started.elapsed()
    );

    // Status is computed every 2 s but written only when it changed (or once a minute):
    // an idle node's object stands still.
    let before = get_json(&s, &["node", "node-a"]);
    std::thread::sleep(Duration::from_secs(7));
    let after = get_json(&s, &["node", "node-a"]);
    assert_eq!(
        before["metadata"]["resourceVersion"], after["metadata"]["resourceVersion"],
        "an unchanged status is not rewritten:\n{before:#}\n{after:#}"
    );

    // kubectl's views of the node.
    let table = s.ok(&["get", "nodes"]);
    let row = table
        .lines()
        .find(|l| l.starts_with("node-a "))
        .unwrap_or_else(|| panic!("no node-a row:\n{table}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "Ready", "{table}");
    assert!(cols.last().unwrap().starts_with("v1.32."), "{table}");
    let wide = s.ok(&["get", "node", "node-a", "-o", "wide"]);
    assert!(wide.contains(&internal_ip.to_string()), "{wide}");
    assert!(wide.contains("containerd://"), "{wide}");
    let describe = s.ok(&["describe", "node", "node-a"]);
    let field = |key: &str, value: &str| {
        describe
            .lines()
            .any(|l| l.starts_with(key) && l[key.len()..].trim() == value)
    };
    assert!(field("Name:", "node-a"), "{describe}");
    assert!(field("PodCIDR:", &cidr), "{describe}");
    for want in [
        "kubernetes.io/hostname=node-a",
        "HolderIdentity:  node-a",
        "KubeletReady",
        "kubelet is posting ready status",
        "Capacity:",
        "Allocatable:",
        "System Info:",
        "Container Runtime Version:",
    ] {
        assert!(describe.contains(want), "no {want:?} in:\n{describe}");
    }

    // The kubelet's events about the node.
    wait_until("the node's events", WAIT, || {
        let list = get_json(
            &s,
            &[
                "events",
                "--field-selector",
                "involvedObject.kind=Node,involvedObject.name=node-a",
            ],
        );
        let from_kubelet: Vec<(String, String)> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["source"]["component"] == "kubelet")
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or("").to_string(),
                    e["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        let has = |reason: &str, message: &str| {
            from_kubelet
                .iter()
                .any(|(r, m)| r == reason && m == message)
        };
        has("Starting", "Starting kubelet.")
            && has(
                "NodeHasSufficientMemory",
                "Node node-a status is now: NodeHasSufficientMemory",
            )
            && has(
                "NodeHasNoDiskPressure",
                "Node node-a status is now: NodeHasNoDiskPressure",
            )
            && has(
                "NodeHasSufficientPID",
                "Node node-a status is now: NodeHasSufficientPID",
            )
            && has("NodeReady", "Node node-a status is now: NodeReady")
    });

    // After a pod ran, the node lists its images (the sandbox's pause image among them),
    // largest first.
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: sleeper\nspec:\n  nodeName: node-a\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: {}\n    command: [sleep, \"3600\"]\n",
        k.image("busybox")
    );
    s.ok_stdin(&["create", "-f", "-"], &pod);
    let pause = k.image("pause");
    let busybox = k.image("busybox");
    let mut images = Value::Null;
    let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until("the node's images", WAIT, || {
            images = get_json(&s, &["node", "node-a"])["status"]["images"].clone();
            let has = |name: &str| {
                images.as_array().into_iter().flatten().any(|i| {
                    i["names"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|n| n == name)
                })
            };
            has(&pause) && has(&busybox)
        })
    }));
    if found.is_err() {
        panic!(
            "images {images:#}\npod: {}\nkubelet log:\n{}",
            s.ok(&["get", "pod", "sleeper", "-o", "yaml"]),
            k.log_tail(40)
        );
    }
    let sizes: Vec<u64> = images
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["sizeBytes"].as_u64().unwrap())
        .collect();
    assert!(sizes.iter().all(|s| *s > 0), "{images:#}");
    assert!(
        sizes.windows(2).all(|w| w[0] >= w[1]),
        "largest first: {sizes:?}"
    );
    for image in images.as_array().unwrap() {
        let names: Vec<&str> = image["names"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        // Digests come before tags.
        let first_tag = names.iter().position(|n| !n.contains('@'));
        let last_digest = names.iter().rposition(|n| n.contains('@'));
        if let (Some(t), Some(d)) = (first_tag, last_digest) {
            assert!(d < t, "{names:?}");
        }
    }
    s.ok(&["delete", "pod", "sleeper", "--wait=false"]);

    // A restarted kubelet adopts its Node and sets back the labels and annotation it owns.
    k.stop();
    s.ok(&[
        "label",
        "node",
        "node-a",
        "kubernetes.io/hostname=elsewhere",
        "--overwrite",
    ]);
    s.ok(&[
        "annotate",
        "node",
        "node-a",
        "volumes.kubernetes.io/controller-managed-attach-detach-",
    ]);
    s.ok(&["label", "node", "node-a", "team=blue"]);
    k.restart();
    wait_until("the kubelet to reconcile its node", WAIT, || {
        let n = get_json(&s, &["node", "node-a"]);
        n["metadata"]["labels"]["kubernetes.io/hostname"] == "node-a"
            && n["metadata"]["annotations"]
                ["volumes.kubernetes.io/controller-managed-attach-detach"]
                == "true"
    });
    let n = get_json(&s, &["node", "node-a"]);
    assert_eq!(n["metadata"]["uid"], uid.as_str(), "the same Node");
    assert_eq!(
        n["metadata"]["labels"]["team"], "blue",
        "others' labels stay"
    );
    assert_eq!(condition(&n, "Ready")["status"], "True");
    let starts = get_json(
        &s,
        &[
            "events",
            "--field-selector",
            "involvedObject.name=node-a,reason=Starting",
        ],
    );
    let count: i64 = starts["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["count"].as_i64().unwrap_or(1))
        .sum();
    assert_eq!(count, 2, "{starts:#}");
}
