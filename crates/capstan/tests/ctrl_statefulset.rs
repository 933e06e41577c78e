//! End-to-end: the StatefulSet and DaemonSet controllers inside `capstan server` (with the
//! scheduler and hollow nodes running the pods), driven with the real kubectl: ordered
//! creation and scale-down, claims from volumeClaimTemplates, partitioned rolling updates,
//! revisions, `kubectl rollout status`; daemon pods on every eligible node, nodeSelector,
//! nodes added later, rolling updates of daemon sets.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use support::Server;

const WAIT: Duration = Duration::from_secs(60);

/// Poll `f` until it holds; on timeout, show the cluster's state and the server log's tail.
fn wait_until(s: &Server, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !f() {
        if std::time::Instant::now() > deadline {
            let state = [
                &["get", "nodes", "-o", "wide"][..],
                &["get", "pods", "-o", "wide"],
                &["get", "sts,ds,controllerrevisions,pvc"],
                &["get", "events", "--sort-by=.lastTimestamp"],
            ]
            .iter()
            .map(|a| String::from_utf8_lossy(&s.kubectl(a).stdout).into_owned())
            .collect::<Vec<_>>()
            .join("\n");
            let log = s.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            panic!(
                "timed out after {WAIT:?} waiting for {what}\n{state}\n--- server log ---\n{}",
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(&a)).expect("kubectl prints json")
}

fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn name(o: &Value) -> &str {
    str_of(&o["metadata"]["name"])
}

fn label<'a>(o: &'a Value, key: &str) -> &'a str {
    str_of(&o["metadata"]["labels"][key])
}

/// `kubectl get pods -w --output-watch-events` in the background: "ADDED web-0",
/// "DELETED web-2", ... in the order the watch delivered them.
struct PodWatch {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl PodWatch {
    /// Watch the namespace's pods; returns once the watch delivers events (it is shown a
    /// marker pod `watch-marker`, left out of the events reported).
    fn start(s: &Server) -> PodWatch {
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(s.kubeconfig())
            .args(["get", "pods", "-w", "--output-watch-events"])
            .args(["-o", "jsonpath={.type} {.object.metadata.name}{\"\\n\"}"])
            .env("HOME", s.kubeconfig().parent().unwrap())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl runs");
        let out = child.stdout.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        let w = PodWatch { child, lines };
        s.ok_stdin(
            &["apply", "-f", "-"],
            "apiVersion: v1\nkind: Pod\nmetadata:\n  name: watch-marker\nspec:\n  terminationGracePeriodSeconds: 0\n  containers: [{name: c, image: pause}]\n",
        );
        wait_until(s, "the pod watch to see the marker pod", || {
            w.lines().iter().any(|l| l == "ADDED watch-marker")
        });
        w
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Names of pods with events of `kind` ("ADDED", "DELETED"), in order, from line `from`.
    fn events(&self, kind: &str, from: usize) -> Vec<String> {
        self.lines()[from..]
            .iter()
            .filter_map(|l| l.strip_prefix(kind)?.strip_prefix(' '))
            .filter(|n| *n != "watch-marker")
            .map(str::to_string)
            .collect()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const STATEFULSET: &str = "apiVersion: v1
kind: Service
metadata:
  name: nginx
spec:
  clusterIP: None
  selector: {app: web}
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: nginx
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: nginx
        image: nginx:1.27
  volumeClaimTemplates:
  - metadata: {name: data}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {requests: {storage: 1Gi}}
";

fn web_pods(s: &Server) -> Vec<Value> {
    let mut pods = items(&json(s, &["get", "pods", "-l", "app=web"]));
    pods.sort_by(|a, b| name(a).cmp(name(b)));
    pods
}

fn ready_since(pod: &Value) -> String {
    pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .map(|c| str_of(&c["lastTransitionTime"]).to_string())
        .unwrap_or_default()
}

/// Wait until the set's status reports `ready` ready replicas at its latest generation.
fn wait_set(s: &Server, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    wait_until(s, what, || {
        last = json(s, &["get", "sts", "web"]);
        last["status"]["observedGeneration"] == last["metadata"]["generation"] && check(&last)
    });
    last
}

#[test]
fn statefulset_orders_pods_makes_claims_and_rolls_out_by_partition() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["n1", "n2"]);
    let watch = PodWatch::start(&s);
    s.ok_stdin(&["apply", "-f", "-"], STATEFULSET);

    let out = s.ok(&["rollout", "status", "sts/web", "--timeout=60s"]);
    assert!(
        out.contains("partitioned roll out complete: 3 new pods have been updated..."),
        "{out}"
    );
    // OrderedReady: created one by one in ordinal order, each after its predecessor was Ready.
    assert_eq!(watch.events("ADDED", 0), ["web-0", "web-1", "web-2"]);
    let pods = web_pods(&s);
    assert_eq!(pods.len(), 3);
    for w in pods.windows(2) {
        assert!(
            str_of(&w[1]["metadata"]["creationTimestamp"]) >= ready_since(&w[0]).as_str(),
            "{} created before {} was ready",
            name(&w[1]),
            name(&w[0])
        );
    }
    let set = wait_set(&s, "3 ready replicas", |v| {
        v["status"]["readyReplicas"] == 3
    });
    let st = &set["status"];
    let revision = str_of(&st["updateRevision"]).to_string();
    assert!(revision.starts_with("web-"), "{st}");
    assert_eq!(st["currentRevision"], st["updateRevision"]);
    assert_eq!(
        (
            &st["replicas"],
            &st["currentReplicas"],
            &st["updatedReplicas"],
            &st["availableReplicas"],
            &st["collisionCount"]
        ),
        (&3.into(), &3.into(), &3.into(), &3.into(), &0.into())
    );
    // Stable identity: name, hostname, subdomain, labels, claims, controller reference.
    for (i, p) in pods.iter().enumerate() {
        let n = format!("web-{i}");
        assert_eq!(name(p), n);
        assert_eq!(label(p, "statefulset.kubernetes.io/pod-name"), n);
        assert_eq!(label(p, "apps.kubernetes.io/pod-index"), i.to_string());
        assert_eq!(label(p, "controller-revision-hash"), revision);
        assert_eq!(p["spec"]["hostname"], n.as_str());
        assert_eq!(p["spec"]["subdomain"], "nginx");
        assert_eq!(p["metadata"]["generateName"], "web-");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
        assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
        let claim = p["spec"]["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == "data")
            .map(|v| str_of(&v["persistentVolumeClaim"]["claimName"]).to_string());
        assert_eq!(claim.as_deref(), Some(format!("data-web-{i}").as_str()));
    }
    let claims = items(&json(&s, &["get", "pvc"]));
    let mut claim_names: Vec<&str> = claims.iter().map(name).collect();
    claim_names.sort();
    assert_eq!(claim_names, ["data-web-0", "data-web-1", "data-web-2"]);
    assert!(claims.iter().all(|c| label(c, "app") == "web"));
    // The template is recorded as a revision owned by the set.
    let cr = json(&s, &["get", "controllerrevision", &revision]);
    assert_eq!(cr["revision"], 1);
    assert_eq!(cr["data"]["spec"]["template"]["$patch"], "replace");
    assert_eq!(cr["metadata"]["ownerReferences"][0]["name"], "web");
    let events = s.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=StatefulSet",
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ]);
    for want in [
        "SuccessfulCreate: create Claim data-web-0 Pod web-0 in StatefulSet web success",
        "SuccessfulCreate: create Pod web-0 in StatefulSet web successful",
        "SuccessfulCreate: create Pod web-2 in StatefulSet web successful",
    ] {
        assert!(events.contains(want), "missing {want:?} in\n{events}");
    }

    // A partitioned rolling update replaces only ordinals >= the partition.
    let mark = watch.lines().len();
    s.ok(&[
        "patch",
        "sts",
        "web",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":2}},"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.28"}]}}}}"#,
    ]);
    let set = wait_set(&s, "web-2 updated", |v| {
        v["status"]["updatedReplicas"] == 1 && v["status"]["readyReplicas"] == 3
    });
    let new_revision = str_of(&set["status"]["updateRevision"]).to_string();
    assert_ne!(new_revision, revision);
    assert_eq!(set["status"]["currentRevision"], revision.as_str());
    assert_eq!(set["status"]["currentReplicas"], 2);
    let out = s.ok(&["rollout", "status", "sts/web", "--timeout=60s"]);
    assert!(
        out.contains("partitioned roll out complete: 1 new pods have been updated..."),
        "{out}"
    );
    let revs: Vec<String> = web_pods(&s)
        .iter()
        .map(|p| label(p, "controller-revision-hash").to_string())
        .collect();
    assert_eq!(
        revs,
        [revision.clone(), revision.clone(), new_revision.clone()]
    );
    assert_eq!(watch.events("DELETED", mark), ["web-2"]);
    assert_eq!(
        web_pods(&s)[2]["spec"]["containers"][0]["image"],
        "nginx:1.28"
    );

    // Lowering the partition rolls the rest, highest ordinal first.
    let mark = watch.lines().len();
    s.ok(&[
        "patch",
        "sts",
        "web",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}"#,
    ]);
    let out = s.ok(&["rollout", "status", "sts/web", "--timeout=60s"]);
    assert!(out.contains("3 new pods have been updated"), "{out}");
    let set = wait_set(&s, "the rollout to complete", |v| {
        v["status"]["currentRevision"] == v["status"]["updateRevision"]
            && v["status"]["readyReplicas"] == 3
    });
    assert_eq!(set["status"]["currentRevision"], new_revision.as_str());
    assert_eq!(watch.events("DELETED", mark), ["web-1", "web-0"]);
    assert!(web_pods(&s)
        .iter()
        .all(|p| label(p, "controller-revision-hash") == new_revision));
    let history = s.ok(&["rollout", "history", "sts/web"]);
    let numbers: Vec<&str> = history
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|w| w.parse::<u32>().is_ok())
        .collect();
    assert_eq!(numbers, ["1", "2"], "{history}");

    // Scaling down removes the highest ordinals first and keeps their claims.
    let mark = watch.lines().len();
    s.ok(&["scale", "sts", "web", "--replicas=1"]);
    wait_set(&s, "one replica", |v| v["status"]["replicas"] == 1);
    wait_until(&s, "web-1 and web-2 gone", || web_pods(&s).len() == 1);
    assert_eq!(name(&web_pods(&s)[0]), "web-0");
    assert_eq!(watch.events("DELETED", mark), ["web-2", "web-1"]);
    assert_eq!(
        items(&json(&s, &["get", "pvc"])).len(),
        3,
        "claims are retained"
    );

    // Retention policy Delete/Delete: the set owns its claims; a claim whose pod is scaled
    // away is handed to the pod, and goes with it.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &STATEFULSET
            .split("---")
            .nth(1)
            .unwrap()
            .replace("web", "ret")
            .replace("replicas: 3", "replicas: 2\n  persistentVolumeClaimRetentionPolicy: {whenScaled: Delete, whenDeleted: Delete}"),
    );
    wait_until(&s, "ret's claims owned by the set", || {
        let claims = items(&json(&s, &["get", "pvc", "-l", "app=ret"]));
        claims.len() == 2
            && claims.iter().all(|c| {
                c["metadata"]["ownerReferences"][0]["kind"] == "StatefulSet"
                    && c["metadata"]["ownerReferences"][0]["name"] == "ret"
                    && c["metadata"]["ownerReferences"][0]["controller"] == true
            })
    });
    s.ok(&["scale", "sts", "ret", "--replicas=1"]);
    wait_until(&s, "data-ret-1 deleted with ret-1", || {
        let claims = items(&json(&s, &["get", "pvc", "-l", "app=ret"]));
        claims.iter().map(name).collect::<Vec<_>>() == ["data-ret-0"]
    });

    // Pods that never become ready: Parallel creates them all, OrderedReady stops at the first.
    for (set, policy) in [("par", "Parallel"), ("ord", "OrderedReady")] {
        s.ok_stdin(
            &["apply", "-f", "-"],
            &small_set(set, policy, 3, "hollow.capstan.dev/ready: \"false\""),
        );
    }
    wait_until(&s, "all Parallel pods created", || {
        items(&json(&s, &["get", "pods", "-l", "app=par"])).len() == 3
    });
    wait_until(&s, "ord-0 running", || {
        json(&s, &["get", "pod", "ord-0"])["status"]["phase"] == "Running"
    });
    std::thread::sleep(Duration::from_secs(2));
    let ord: Vec<String> = items(&json(&s, &["get", "pods", "-l", "app=ord"]))
        .iter()
        .map(|p| name(p).to_string())
        .collect();
    assert_eq!(ord, ["ord-0"], "OrderedReady waits for ord-0 to be ready");

    // A pod that fails is deleted and made again.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &small_set(
            "crashy",
            "OrderedReady",
            1,
            "hollow.capstan.dev/exit-code: \"1\"",
        ),
    );
    let mut uids = std::collections::BTreeSet::new();
    wait_until(&s, "crashy-0 recreated after failing", || {
        let out = s.kubectl(&["get", "pod", "crashy-0", "-o", "jsonpath={.metadata.uid}"]);
        let uid = String::from_utf8_lossy(&out.stdout).into_owned();
        if !uid.is_empty() {
            uids.insert(uid);
        }
        uids.len() >= 2
    });
    let events = s.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=crashy",
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ]);
    assert!(
        events.contains("SuccessfulDelete: delete Pod crashy-0 in StatefulSet crashy successful"),
        "{events}"
    );
}

/// A claimless set `name` whose pods carry `annotation`.
fn small_set(name: &str, policy: &str, replicas: u32, annotation: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: {name}\nspec:\n  serviceName: {name}\n  replicas: {replicas}\n  podManagementPolicy: {policy}\n  selector:\n    matchLabels: {{app: {name}}}\n  template:\n    metadata:\n      labels: {{app: {name}}}\n      annotations: {{{annotation}}}\n    spec:\n      terminationGracePeriodSeconds: 0\n      containers: [{{name: c, image: pause}}]\n"
    )
}

const DAEMONSETS: &str = "apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: agent
        image: agent:1
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: picky
spec:
  selector:
    matchLabels: {app: picky}
  template:
    metadata:
      labels: {app: picky}
    spec:
      terminationGracePeriodSeconds: 0
      nodeSelector: {role: special}
      containers:
      - name: agent
        image: agent:1
";

/// The running, non-deleted pods of a daemon set by node.
fn pods_by_node(s: &Server, app: &str) -> Vec<(String, Value)> {
    let mut v: Vec<(String, Value)> =
        items(&json(s, &["get", "pods", "-l", &format!("app={app}")]))
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| (str_of(&p["spec"]["nodeName"]).to_string(), p))
            .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn nodes_of(s: &Server, app: &str) -> Vec<String> {
    pods_by_node(s, app).into_iter().map(|(n, _)| n).collect()
}

fn wait_ds(s: &Server, name: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    wait_until(s, what, || {
        last = json(s, &["get", "ds", name]);
        last["status"]["observedGeneration"] == last["metadata"]["generation"]
            && check(&last["status"])
    });
    last
}

#[test]
fn daemonset_runs_one_pod_on_each_eligible_node() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["n1", "n2"]);
    s.ok(&["label", "node", "n1", "role=special"]);
    s.ok_stdin(&["apply", "-f", "-"], DAEMONSETS);

    let out = s.ok(&["rollout", "status", "ds/agent", "--timeout=60s"]);
    assert!(
        out.contains("daemon set \"agent\" successfully rolled out"),
        "{out}"
    );
    let ds = wait_ds(&s, "agent", "two agents available", |st| {
        st["numberAvailable"] == 2
    });
    let st = &ds["status"];
    assert_eq!(
        (
            &st["desiredNumberScheduled"],
            &st["currentNumberScheduled"],
            &st["numberReady"],
            &st["updatedNumberScheduled"],
            &st["numberMisscheduled"]
        ),
        (&2.into(), &2.into(), &2.into(), &2.into(), &0.into())
    );
    wait_until(&s, "one agent pod per node", || {
        nodes_of(&s, "agent") == ["n1", "n2"]
    });
    let revisions = items(&json(
        &s,
        &["get", "controllerrevisions", "-l", "app=agent"],
    ));
    assert_eq!(revisions.len(), 1);
    let hash = label(&revisions[0], "controller-revision-hash").to_string();
    assert_eq!(name(&revisions[0]), format!("agent-{hash}"));
    for (node, p) in pods_by_node(&s, "agent") {
        // Bound through a required node affinity on the node's name.
        let term = &p["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0];
        assert_eq!(term["matchFields"][0]["key"], "metadata.name");
        assert_eq!(term["matchFields"][0]["operator"], "In");
        assert_eq!(term["matchFields"][0]["values"][0], node.as_str());
        assert_eq!(label(&p, "controller-revision-hash"), hash);
        assert_eq!(p["metadata"]["generateName"], "agent-");
        let tolerations: Vec<String> = p["spec"]["tolerations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| format!("{}:{}", str_of(&t["key"]), str_of(&t["effect"])))
            .collect();
        for want in [
            "node.kubernetes.io/not-ready:NoExecute",
            "node.kubernetes.io/unreachable:NoExecute",
            "node.kubernetes.io/disk-pressure:NoSchedule",
            "node.kubernetes.io/memory-pressure:NoSchedule",
            "node.kubernetes.io/pid-pressure:NoSchedule",
            "node.kubernetes.io/unschedulable:NoSchedule",
        ] {
            assert!(
                tolerations.iter().any(|t| t == want),
                "{want}: {tolerations:?}"
            );
        }
    }

    // nodeSelector: only the labelled node; unlabelling it removes the pod.
    wait_until(&s, "picky only on n1", || nodes_of(&s, "picky") == ["n1"]);
    let picky = wait_ds(&s, "picky", "picky scheduled", |st| {
        st["desiredNumberScheduled"] == 1 && st["numberReady"] == 1
    });
    assert_eq!(picky["status"]["numberMisscheduled"], 0);
    s.ok(&["label", "node", "n1", "role-"]);
    wait_until(&s, "picky's pod removed", || {
        nodes_of(&s, "picky").is_empty()
    });
    wait_ds(&s, "picky", "picky desires no pods", |st| {
        st["desiredNumberScheduled"] == 0 && st["currentNumberScheduled"] == 0
    });

    // A node added later gets its pod.
    let _n3 = s.hollow_nodes(&["n3"]);
    wait_until(&s, "an agent on n3", || {
        nodes_of(&s, "agent") == ["n1", "n2", "n3"]
    });
    wait_ds(&s, "agent", "three agents available", |st| {
        st["desiredNumberScheduled"] == 3 && st["numberAvailable"] == 3
    });
    assert!(nodes_of(&s, "picky").is_empty());

    // A deleted daemon pod is replaced on its node.
    let (_, victim) = pods_by_node(&s, "agent").remove(1);
    s.ok(&["delete", "pod", name(&victim), "--wait=false"]);
    wait_until(&s, "the n2 agent replaced", || {
        pods_by_node(&s, "agent")
            .iter()
            .any(|(n, p)| n == "n2" && name(p) != name(&victim))
    });

    // A rolling update replaces every pod with the new template's revision.
    s.ok(&["set", "image", "ds/agent", "agent=agent:2"]);
    let out = s.ok(&["rollout", "status", "ds/agent", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    let revisions = items(&json(
        &s,
        &["get", "controllerrevisions", "-l", "app=agent"],
    ));
    assert_eq!(revisions.len(), 2);
    let new = revisions
        .iter()
        .find(|r| r["revision"] == 2)
        .expect("revision 2");
    let new_hash = label(new, "controller-revision-hash").to_string();
    assert_ne!(new_hash, hash);
    wait_until(&s, "all agents at the new revision", || {
        let pods = pods_by_node(&s, "agent");
        pods.len() == 3
            && pods.iter().all(|(_, p)| {
                label(p, "controller-revision-hash") == new_hash
                    && p["spec"]["containers"][0]["image"] == "agent:2"
            })
    });
    let events = s.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=DaemonSet,involvedObject.name=agent",
        "-o",
        "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
    ]);
    assert!(events.contains("SuccessfulCreate"), "{events}");
    assert!(events.contains("SuccessfulDelete"), "{events}");

    // Rolling back restores the first template; its revision becomes the newest.
    s.ok(&["rollout", "undo", "ds/agent"]);
    let out = s.ok(&["rollout", "status", "ds/agent", "--timeout=60s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
    wait_until(&s, "all agents back at the first revision", || {
        let pods = pods_by_node(&s, "agent");
        pods.len() == 3
            && pods
                .iter()
                .all(|(_, p)| label(p, "controller-revision-hash") == hash)
    });
    let revisions = items(&json(
        &s,
        &["get", "controllerrevisions", "-l", "app=agent"],
    ));
    let numbers: Vec<(String, i64)> = revisions
        .iter()
        .map(|r| {
            (
                label(r, "controller-revision-hash").to_string(),
                r["revision"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    assert!(numbers.contains(&(hash.clone(), 3)), "{numbers:?}");

    // Failed daemon pods are reported and replaced.
    s.ok_stdin(
        &["apply", "-f", "-"],
        &DAEMONSETS
            .split("---")
            .nth(1)
            .unwrap()
            .replace("picky", "flaky")
            .replace(
                "      nodeSelector: {role: special}\n",
                "      nodeSelector: {kubernetes.io/hostname: n2}\n",
            )
            .replace(
                "      labels: {app: flaky}\n",
                "      labels: {app: flaky}\n      annotations: {hollow.capstan.dev/exit-code: \"2\"}\n",
            ),
    );
    wait_until(&s, "a FailedDaemonPod event", || {
        s.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=flaky,reason=FailedDaemonPod",
            "-o",
            "jsonpath={.items[*].message}",
        ])
        .contains("Found failed daemon pod default/flaky-")
    });
    let msg = s.ok(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=flaky,reason=FailedDaemonPod",
        "-o",
        "jsonpath={.items[0].message}",
    ]);
    assert!(msg.ends_with(" on node n2, will try to kill it"), "{msg}");
}
