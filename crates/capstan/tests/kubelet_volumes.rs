//! Pod volumes and container environment on a real node (containerd, busybox): configMap,
//! secret, downwardAPI, emptyDir and the injected service account volume have the right
//! contents (and a ConfigMap update reaches the running container); env comes from
//! configMaps, secrets, the downward API and the service links; a missing configMap holds the
//! pod back (CreateContainerConfigError for env, FailedMount for a volume) until it exists;
//! the projected token is a valid token of the pod's service account.

mod support;

use std::path::Path;
use std::time::Duration;

use support::*;

const WAIT: Duration = Duration::from_secs(120);

fn jsonpath(server: &Server, kind_name: &[&str], path: &str) -> String {
    let mut args = vec!["get"];
    args.extend_from_slice(kind_name);
    let expr = format!("jsonpath={path}");
    args.extend_from_slice(&["-o", &expr]);
    let out = server.kubectl(&args);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `reason: message` of every event about `pod`, one a line.
fn events(server: &Server, pod: &str) -> String {
    let selector = format!("involvedObject.name={pod}");
    server.ok(&[
        "get",
        "events",
        "--field-selector",
        &selector,
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ])
}

/// What a container of a pod in `default` wrote, from the CRI log files under the kubelet's
/// --pod-logs-dir (`<ns>_<pod>_<uid>/<container>/<restart>.log`, lines
/// `<time> <stream> <tag> <text>`).
fn container_log(kubelet: &Kubelet, pod: &str, container: &str) -> String {
    let mut out = String::new();
    let prefix = format!("default_{pod}_");
    let Ok(dirs) = std::fs::read_dir(kubelet.pod_logs_dir()) else {
        return out;
    };
    for dir in dirs.flatten() {
        if !dir.file_name().to_string_lossy().starts_with(&prefix) {
            continue;
        }
        let cdir = dir.path().join(container);
        let mut files: Vec<_> = std::fs::read_dir(&cdir)
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        files.sort();
        for f in files {
            for line in std::fs::read_to_string(&f).unwrap_or_default().lines() {
                let text = line.splitn(4, ' ').nth(3).unwrap_or("");
                out.push_str(text);
                out.push('\n');
            }
        }
    }
    out
}

/// The value after `key=` on the first log line starting with `key=`.
fn log_value(log: &str, key: &str) -> Option<String> {
    let p = format!("{key}=");
    log.lines()
        .find_map(|l| l.strip_prefix(&p))
        .map(str::to_string)
}

fn wait_running(server: &Server, kubelet: &Kubelet, pod: &str) {
    let mut phase = String::new();
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(&format!("pod {pod} running"), WAIT, || {
            phase = jsonpath(server, &["pod", pod], "{.status.phase}");
            phase == "Running"
        })
    }));
    if ok.is_err() {
        panic!(
            "pod {pod} is {phase:?}:\n{}\nevents:\n{}\nkubelet log:\n{}",
            server.ok(&["get", "pod", pod, "-o", "yaml"]),
            events(server, pod),
            kubelet.log_tail(40)
        );
    }
}

fn wait_log(kubelet: &Kubelet, pod: &str, container: &str, what: &str, f: impl Fn(&str) -> bool) {
    let mut log = String::new();
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(what, WAIT, || {
            log = container_log(kubelet, pod, container);
            f(&log)
        })
    }));
    if ok.is_err() {
        panic!(
            "{what}: log of {pod}/{container}:\n{log}\nkubelet log:\n{}",
            kubelet.log_tail(40)
        );
    }
}

#[test]
fn volumes_and_env_on_a_real_node() {
    let cidr = unique_cluster_cidr();
    let server = Server::start_cluster(&["--cluster-cidr", &cidr]);
    let kubelet = server.kubelet_with("node-a", &["--sync-frequency", "5s"]);
    let busybox = kubelet.image("busybox");

    server.ok(&[
        "create",
        "configmap",
        "cfg",
        "--from-literal=greeting=hello",
        "--from-literal=color=blue",
        "--from-literal=bad.key=x",
    ]);
    server.ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=password=s3cret",
    ]);
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = format!(
        r#"echo "ENV FROM_CM=$FROM_CM FROM_SECRET=$FROM_SECRET MY_POD=$MY_POD MY_NS=$MY_NS MY_NODE=$MY_NODE EXPANDED=$EXPANDED CM_color=$CM_color MEM_MI=$MEM_MI"
echo "IP=$MY_IP"
echo "KSH=$KUBERNETES_SERVICE_HOST"
echo "SECRET_FILE=$(cat /creds/password)"
echo "SECRET_MODE=$(stat -L -c %a /creds/password)"
echo "ITEM=$(cat /items/hello.txt)"
echo "LABELS=$(tr '\n' ';' < /info/labels)"
echo "NS=$(cat {sa}/namespace)"
echo "CA=$(head -n 1 {sa}/ca.crt)"
echo "TOKEN=$(cat {sa}/token)"
echo "RO=$(touch /cfg/x 2>/dev/null && echo writable || echo readonly)"
echo from-main > /shared/msg
while true; do echo "CFG=$(cat /cfg/greeting)"; sleep 1; done"#
    );
    let pod = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "vols", "labels": {"app": "vols"}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "volumes": [
                {"name": "cfg", "configMap": {"name": "cfg"}},
                {"name": "items", "configMap": {"name": "cfg", "items": [{"key": "greeting", "path": "hello.txt"}]}},
                {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
                {"name": "info", "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]}},
                {"name": "shared", "emptyDir": {}}
            ],
            "containers": [
                {
                    "name": "main",
                    "image": busybox,
                    "command": ["sh", "-c", script],
                    "resources": {"limits": {"memory": "64Mi"}},
                    "env": [
                        {"name": "FROM_CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
                        {"name": "MY_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                        {"name": "MY_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                        {"name": "MY_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                        {"name": "MY_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1Mi"}}},
                        {"name": "EXPANDED", "value": "$(FROM_CM)-$(MY_POD)-$$(FROM_CM)"}
                    ],
                    "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CM_"}],
                    "volumeMounts": [
                        {"name": "cfg", "mountPath": "/cfg"},
                        {"name": "items", "mountPath": "/items"},
                        {"name": "creds", "mountPath": "/creds"},
                        {"name": "info", "mountPath": "/info"},
                        {"name": "shared", "mountPath": "/shared"}
                    ]
                },
                {
                    "name": "side",
                    "image": busybox,
                    "command": ["sh", "-c", "while [ ! -f /data/msg ]; do sleep 1; done; echo \"SHARED=$(cat /data/msg)\"; exec sleep 3600"],
                    "volumeMounts": [{"name": "shared", "mountPath": "/data"}]
                }
            ]
        }
    });
    server.ok_stdin(&["apply", "-f", "-"], &pod.to_string());
    wait_running(&server, &kubelet, "vols");
    wait_log(&kubelet, "vols", "main", "vols/main prints", |l| {
        l.contains("CFG=hello")
    });
    let log = container_log(&kubelet, "vols", "main");
    let env_line = log
        .lines()
        .find(|l| l.starts_with("ENV "))
        .unwrap_or_default()
        .to_string();
    for want in [
        "FROM_CM=hello",
        "FROM_SECRET=s3cret",
        "MY_POD=vols",
        "MY_NS=default",
        "MY_NODE=node-a",
        "EXPANDED=hello-vols-$(FROM_CM)",
        "CM_color=blue",
        "MEM_MI=64",
    ] {
        assert!(env_line.contains(want), "{want} missing from {env_line:?}");
    }
    let pod_ip = jsonpath(&server, &["pod", "vols"], "{.status.podIP}");
    assert_eq!(
        log_value(&log, "IP").as_deref(),
        Some(pod_ip.as_str()),
        "{log}"
    );
    let kubernetes_ip = jsonpath(&server, &["service", "kubernetes"], "{.spec.clusterIP}");
    assert_eq!(log_value(&log, "KSH"), Some(kubernetes_ip), "{log}");
    assert_eq!(log_value(&log, "SECRET_FILE").as_deref(), Some("s3cret"));
    assert_eq!(log_value(&log, "SECRET_MODE").as_deref(), Some("400"));
    assert_eq!(log_value(&log, "ITEM").as_deref(), Some("hello"));
    assert_eq!(log_value(&log, "LABELS").as_deref(), Some("app=\"vols\""));
    assert_eq!(log_value(&log, "NS").as_deref(), Some("default"));
    assert_eq!(
        log_value(&log, "CA").as_deref(),
        Some("-----BEGIN CERTIFICATE-----")
    );
    assert_eq!(log_value(&log, "RO").as_deref(), Some("readonly"));
    // The envFrom key that is no variable name is skipped with an event... unless it is
    // one under Kubernetes v1.32's relaxed rule (printable ASCII without '='): "bad.key" is.
    assert!(!events(&server, "vols").contains("InvalidEnvironmentVariableNames"));

    // The emptyDir is shared between the containers.
    wait_log(
        &kubelet,
        "vols",
        "side",
        "the side container sees the file",
        |l| l.contains("SHARED=from-main"),
    );

    // The projected token authenticates as the pod's service account, bound to the pod.
    let token = log_value(&log, "TOKEN").unwrap_or_default();
    assert!(token.len() > 100, "token {token:?}");
    let review = serde_json::json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token}
    });
    // (--validate=false: kubectl validates kinds without a PATCH operation against the
    // protobuf OpenAPI v2 document, which the API server does not serve.)
    let out = server.ok_stdin(
        &["create", "--validate=false", "-f", "-", "-o", "json"],
        &review.to_string(),
    );
    let review: serde_json::Value = serde_json::from_str(&out).expect("TokenReview json");
    assert_eq!(review["status"]["authenticated"], true, "{out}");
    assert_eq!(
        review["status"]["user"]["username"], "system:serviceaccount:default:default",
        "{out}"
    );
    assert_eq!(
        review["status"]["user"]["extra"]["authentication.kubernetes.io/pod-name"][0], "vols",
        "{out}"
    );

    // A ConfigMap update reaches the running container through the volume.
    server.ok(&[
        "patch",
        "configmap",
        "cfg",
        "-p",
        r#"{"data":{"greeting":"bonjour"}}"#,
    ]);
    wait_log(&kubelet, "vols", "main", "the updated configMap", |l| {
        l.contains("CFG=bonjour")
    });

    // A missing configMap: env → CreateContainerConfigError, volume → FailedMount; both
    // pods start once it exists.
    let waiting = |pod: &str| {
        jsonpath(
            &server,
            &["pod", pod],
            "{.status.containerStatuses[0].state.waiting.reason}/{.status.containerStatuses[0].state.waiting.message}",
        )
    };
    server.ok_stdin(
        &["apply", "-f", "-"],
        &format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: late-env}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: c
    image: {busybox}
    command: ["sh", "-c", "echo LATE=$LATE; exec sleep 3600"]
    env:
    - name: LATE
      valueFrom: {{configMapKeyRef: {{name: late, key: v}}}}
---
apiVersion: v1
kind: Pod
metadata: {{name: late-vol}}
spec:
  terminationGracePeriodSeconds: 1
  volumes:
  - name: v
    configMap: {{name: late-vol}}
  containers:
  - name: c
    image: {busybox}
    command: ["sh", "-c", "echo LATE=$(cat /v/k); exec sleep 3600"]
    volumeMounts: [{{name: v, mountPath: /v}}]
"#
        ),
    );
    let mut seen = String::new();
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until("CreateContainerConfigError", WAIT, || {
            seen = waiting("late-env");
            seen == "CreateContainerConfigError/configmap \"late\" not found"
        })
    }));
    assert!(
        ok.is_ok(),
        "late-env waits with {seen:?}; kubelet log:\n{}",
        kubelet.log_tail(30)
    );
    let failed_mount =
        "FailedMount: MountVolume.SetUp failed for volume \"v\" : configmap \"late-vol\" not found";
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until("FailedMount event", WAIT, || {
            events(&server, "late-vol").contains(failed_mount)
        })
    }));
    assert!(
        ok.is_ok(),
        "late-vol events:\n{}\nkubelet log:\n{}",
        events(&server, "late-vol"),
        kubelet.log_tail(30)
    );
    assert_eq!(waiting("late-vol"), "ContainerCreating/");
    assert_eq!(
        jsonpath(&server, &["pod", "late-vol"], "{.status.phase}"),
        "Pending"
    );

    server.ok(&["create", "configmap", "late", "--from-literal=v=now"]);
    server.ok(&["create", "configmap", "late-vol", "--from-literal=k=here"]);
    wait_running(&server, &kubelet, "late-env");
    wait_running(&server, &kubelet, "late-vol");
    wait_log(&kubelet, "late-env", "c", "late-env prints", |l| {
        l.contains("LATE=now")
    });
    wait_log(&kubelet, "late-vol", "c", "late-vol prints", |l| {
        l.contains("LATE=here")
    });

    // Deleting the pods removes their volumes (and unmounts the tmpfs ones).
    let uid = jsonpath(&server, &["pod", "vols"], "{.metadata.uid}");
    let pod_dir = kubelet.root_dir().join("pods").join(&uid);
    assert!(pod_dir.join("volumes/kubernetes.io~secret/creds").exists());
    server.ok(&[
        "delete",
        "pod",
        "vols",
        "late-env",
        "late-vol",
        "--wait=false",
    ]);
    wait_until("the pods are gone", WAIT, || {
        jsonpath(&server, &["pods"], "{.items[*].metadata.name}").is_empty()
    });
    wait_until("the volumes are cleaned up", WAIT, || {
        !pod_dir.join("volumes").exists()
    });
    assert!(!mounted_under(&pod_dir), "mounts left under {pod_dir:?}");
}

fn mounted_under(dir: &Path) -> bool {
    let Ok(real) = std::fs::canonicalize(dir.parent().unwrap_or(dir)) else {
        return false;
    };
    let wanted = real.join(dir.file_name().unwrap_or_default());
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| Path::new(m).starts_with(&wanted))
}
