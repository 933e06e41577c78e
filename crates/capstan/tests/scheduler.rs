//! End-to-end: the scheduler inside `capstan server` places pods on (fake) nodes as
//! kube-scheduler would, driven with the real kubectl.

mod support;

use std::time::{Duration, Instant};

use support::Server;

/// Create nodes, then lift the not-ready taint admission puts on new nodes (no node lifecycle
/// controller or kubelet runs here to do it).
fn add_nodes(s: &Server, nodes: &[String]) {
    s.ok_stdin(&["apply", "-f", "-"], &nodes.join("---\n"));
    for n in nodes {
        let name = n.lines().find_map(|l| l.strip_prefix("  name: ")).unwrap();
        s.ok(&[
            "taint",
            "node",
            name,
            "node.kubernetes.io/not-ready:NoSchedule-",
        ]);
    }
}

/// A Node object (no kubelet behind it) with `cpu` CPUs, labels and taints.
fn node(name: &str, cpu: u32, labels: &[(&str, &str)], taints: &str) -> String {
    let mut l = format!("    kubernetes.io/hostname: {name}\n");
    for (k, v) in labels {
        l.push_str(&format!("    {k}: \"{v}\"\n"));
    }
    format!(
        "apiVersion: v1\nkind: Node\nmetadata:\n  name: {name}\n  labels:\n{l}spec:\n  taints: [{taints}]\nstatus:\n  capacity: {{cpu: \"{cpu}\", memory: 16Gi, pods: \"110\"}}\n  allocatable: {{cpu: \"{cpu}\", memory: 16Gi, pods: \"110\"}}\n  conditions: [{{type: Ready, status: \"True\", reason: KubeletReady, message: fake}}]\n"
    )
}

fn pod(name: &str, cpu: &str, extra_spec: &str, labels: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  labels: {{{labels}}}\nspec:\n  terminationGracePeriodSeconds: 0\n  containers:\n  - name: c\n    image: pause\n    resources: {{requests: {{cpu: \"{cpu}\"}}}}\n{extra_spec}"
    )
}

fn node_of(s: &Server, pod: &str) -> String {
    s.ok(&["get", "pod", pod, "-o", "jsonpath={.spec.nodeName}"])
}

/// Wait until `pod` is bound; return its node.
fn wait_bound(s: &Server, pod: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let n = node_of(s, pod);
        if !n.is_empty() {
            return n;
        }
        assert!(
            Instant::now() < deadline,
            "{pod} was not scheduled:\n{}",
            s.ok(&["describe", "pod", pod])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wait until `pod` has a FailedScheduling event; return its message.
fn wait_failed(s: &Server, pod: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = s.ok(&[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod},reason=FailedScheduling"),
            "-o",
            "jsonpath={.items[*].message}",
        ]);
        if !out.is_empty() {
            return out;
        }
        assert!(Instant::now() < deadline, "no FailedScheduling for {pod}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn pods_spread_over_equal_nodes_and_honour_selectors_taints_and_anti_affinity() {
    let s = Server::start_scheduling(&[]);
    let nodes = [
        node(
            "n1",
            4,
            &[("disk", "ssd"), ("topology.kubernetes.io/zone", "a")],
            "",
        ),
        node(
            "n2",
            4,
            &[("topology.kubernetes.io/zone", "b")],
            "{key: dedicated, value: gpu, effect: NoSchedule}",
        ),
        node("n3", 4, &[("topology.kubernetes.io/zone", "b")], ""),
    ];
    add_nodes(&s, &nodes);

    // Equal pods on equal nodes spread (LeastAllocated + balanced allocation): never on the
    // tainted node, two on each of the others.
    let mut many = Vec::new();
    for i in 0..4 {
        many.push(pod(&format!("spread-{i}"), "500m", "", "app: spread"));
    }
    s.ok_stdin(&["apply", "-f", "-"], &many.join("---\n"));
    let mut counts = std::collections::BTreeMap::new();
    for i in 0..4 {
        *counts
            .entry(wait_bound(&s, &format!("spread-{i}")))
            .or_insert(0) += 1;
    }
    assert_eq!(
        counts,
        [("n1".to_string(), 2), ("n3".to_string(), 2)].into()
    );

    // nodeSelector and a toleration with required node affinity.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &pod("ssd", "100m", "  nodeSelector: {disk: ssd}\n", ""),
    );
    assert_eq!(wait_bound(&s, "ssd"), "n1");
    let gpu = "  tolerations: [{key: dedicated, operator: Equal, value: gpu, effect: NoSchedule}]\n  affinity:\n    nodeAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n        nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [n2]}]}]\n";
    s.ok_stdin(&["apply", "-f", "-"], &pod("gpu", "100m", gpu, ""));
    assert_eq!(wait_bound(&s, "gpu"), "n2");

    // Required anti-affinity per node: two fit (n1, n3), the third cannot and says why.
    let anti = "  affinity:\n    podAntiAffinity:\n      requiredDuringSchedulingIgnoredDuringExecution:\n      - labelSelector: {matchLabels: {app: web}}\n        topologyKey: kubernetes.io/hostname\n";
    for i in 0..3 {
        s.ok_stdin(
            &["apply", "-f", "-"],
            &pod(&format!("web-{i}"), "100m", anti, "app: web"),
        );
    }
    let placed: std::collections::BTreeSet<String> = (0..2)
        .map(|i| wait_bound(&s, &format!("web-{i}")))
        .collect();
    assert_eq!(placed, ["n1".to_string(), "n3".to_string()].into());
    let msg = wait_failed(&s, "web-2");
    assert!(
        msg.starts_with("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) didn't match pod anti-affinity rules."),
        "{msg}"
    );
    assert_eq!(node_of(&s, "web-2"), "");
    let cond = s.ok(&[
        "get",
        "pod",
        "web-2",
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}",
    ]);
    assert_eq!(cond, "Unschedulable");

    // Zone spread with maxSkew 1 (DoNotSchedule): zones a and b alternate.
    let spread = "  tolerations: [{operator: Exists}]\n  topologySpreadConstraints:\n  - maxSkew: 1\n    topologyKey: topology.kubernetes.io/zone\n    whenUnsatisfiable: DoNotSchedule\n    labelSelector: {matchLabels: {app: zonal}}\n";
    let mut zones = std::collections::BTreeMap::new();
    for i in 0..4 {
        s.ok_stdin(
            &["apply", "-f", "-"],
            &pod(&format!("zonal-{i}"), "100m", spread, "app: zonal"),
        );
        let n = wait_bound(&s, &format!("zonal-{i}"));
        *zones.entry(if n == "n1" { "a" } else { "b" }).or_insert(0) += 1;
    }
    assert_eq!(zones, [("a", 2), ("b", 2)].into());
}

#[test]
fn unschedulable_pod_is_placed_once_a_fitting_node_appears() {
    let s = Server::start_scheduling(&[]);
    add_nodes(
        &s,
        &[node("small-1", 2, &[], ""), node("small-2", 2, &[], "")],
    );
    s.ok_stdin(&["apply", "-f", "-"], &pod("big", "3", "", ""));
    let msg = wait_failed(&s, "big");
    assert!(
        msg.starts_with("0/2 nodes are available: 2 Insufficient cpu."),
        "{msg}"
    );
    add_nodes(&s, &[node("large", 8, &[], "")]);
    assert_eq!(wait_bound(&s, "big"), "large");
    let scheduled = s.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=big,reason=Scheduled",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert_eq!(scheduled, "Successfully assigned default/big to large");
}

#[test]
fn preemption_evicts_a_lower_priority_pod_for_a_higher_one() {
    let s = Server::start_scheduling(&[]);
    add_nodes(&s, &[node("only", 2, &[], "")]);
    s.ok_stdin(
        &["apply", "-f", "-"],
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n",
    );
    s.ok_stdin(&["apply", "-f", "-"], &pod("low", "1500m", "", ""));
    assert_eq!(wait_bound(&s, "low"), "only");
    s.ok_stdin(
        &["apply", "-f", "-"],
        &pod("urgent", "1500m", "  priorityClassName: high\n", ""),
    );
    assert_eq!(wait_bound(&s, "urgent"), "only");
    let gone = s.kubectl(&["get", "pod", "low"]);
    assert!(!gone.status.success(), "the victim still exists");
}

#[test]
fn invalid_scheduler_configuration_is_a_one_line_error_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- schedulerName: x\n  plugins:\n    score:\n      enabled: [{name: NodeResourcesFit, wieght: 2}]\n",
            "profiles[0].plugins.score.enabled[0].wieght",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\npercentageOfNodesToScore: 150\n",
            "percentageOfNodesToScore",
        ),
        (
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args: {scoringStrategy: {type: Cheapest}}\n",
            "profiles[0].pluginConfig[0].args.scoringStrategy.type",
        ),
    ];
    for (i, (yaml, field)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("c{i}.yaml"));
        std::fs::write(&path, yaml).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
            .args(["scheduler", "--kubeconfig", "/nonexistent", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains(field), "case {i}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "case {i}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn bench_scheduler_through_the_api_counts_every_bound_pod_and_cleans_up() {
    let s = Server::start_scheduling(&[]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["bench", "scheduler", "--mode", "api", "--kubeconfig"])
        .arg(s.kubeconfig())
        .args(["--nodes", "20", "--pods", "200", "--clients", "8"])
        .args(["--timeout-seconds", "120"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // "... 20 nodes, 200 pods: created in X s, all bound after Y s = Z pods/s end to end"
    assert!(text.contains("20 nodes, 200 pods"), "{text}");
    let rate: f64 = text
        .split(" = ")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|r| r.parse().ok())
        .unwrap_or_else(|| panic!("no rate in {text}"));
    assert!(rate > 0.0, "{text}");
    // Its nodes and namespace are gone afterwards.
    let nodes = s.ok(&["get", "nodes", "-o", "name"]);
    assert!(!nodes.contains("bench-node-"), "{nodes}");
}
