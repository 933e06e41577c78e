//! End-to-end: the Endpoints, EndpointSlice and disruption controllers inside `capstan
//! server`, with hollow nodes running the pods (and giving them addresses), driven with the
//! real kubectl.

mod support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::Value;
use support::{wait_until, Server};

const WAIT: Duration = Duration::from_secs(60);

fn json(s: &Server, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&s.ok(&a)).expect("kubectl prints json")
}

/// `json` that tolerates failure (the object may not exist yet).
fn try_json(s: &Server, args: &[&str]) -> Option<Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let out = s.kubectl(&a);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web, labels: {team: a}}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: metrics, port: 9090, targetPort: 9090}
---
apiVersion: v1
kind: Service
metadata: {name: web-headless}
spec:
  clusterIP: None
  selector: {app: web}
---
apiVersion: v1
kind: Service
metadata: {name: lonely}
spec:
  selector: {app: nobody}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: manual}
spec:
  ports: [{port: 80}]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web, tier: fe}}
  template:
    metadata: {labels: {app: web, tier: fe}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: c
        image: nginx
        ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata:
  name: straggler
  labels: {app: web}
  annotations: {hollow.capstan.dev/ready: "false"}
spec:
  hostname: h0
  subdomain: web-headless
  terminationGracePeriodSeconds: 0
  containers:
  - name: c
    image: nginx
    ports: [{name: http, containerPort: 8081}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: min2}
spec:
  minAvailable: 2
  selector: {matchLabels: {tier: fe}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: pct}
spec:
  maxUnavailable: 34%
  selector: {matchLabels: {tier: fe}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: all}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
"#;

/// name → podIP of the running pods matching a label selector.
fn pod_ips(s: &Server, selector: &str) -> Vec<(String, String)> {
    let pods = json(s, &["get", "pods", "-l", selector]);
    items(&pods)
        .iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                p["status"]["podIP"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        })
        .collect()
}

/// (ip, port, ready) of every address of an Endpoints.
fn endpoint_triples(ep: &Value) -> BTreeSet<(String, i64, bool)> {
    let mut out = BTreeSet::new();
    for subset in ep["subsets"].as_array().into_iter().flatten() {
        let ports: Vec<i64> = subset["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["port"].as_i64())
            .collect();
        for (field, ready) in [("addresses", true), ("notReadyAddresses", false)] {
            for a in subset[field].as_array().into_iter().flatten() {
                let ip = a["ip"].as_str().unwrap_or_default().to_string();
                if ports.is_empty() {
                    out.insert((ip.clone(), 0, ready));
                }
                for p in &ports {
                    out.insert((ip.clone(), *p, ready));
                }
            }
        }
    }
    out
}

fn pdb_status(s: &Server, name: &str) -> Value {
    json(s, &["get", "pdb", name])["status"].clone()
}

fn wait_pdb(s: &Server, name: &str, want: &[(&str, i64)]) -> Value {
    let mut last = Value::Null;
    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wait_until(&format!("PDB {name} status {want:?}"), WAIT, || {
            last = pdb_status(s, name);
            want.iter().all(|(k, v)| last[*k] == *v)
        })
    }));
    if ok.is_err() {
        panic!(
            "PDB {name}: wanted {want:?}, status is {last:#}\n{}",
            s.log()
        );
    }
    last
}

fn slices_of(s: &Server, service: &str) -> Vec<Value> {
    items(&json(
        s,
        &[
            "get",
            "endpointslices",
            "-l",
            &format!("kubernetes.io/service-name={service}"),
        ],
    ))
}

fn slice_ports(slice: &Value) -> BTreeSet<i64> {
    slice["ports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["port"].as_i64())
        .collect()
}

#[test]
fn endpoints_slices_and_budgets_follow_pods() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["n1", "n2"]);
    s.ok_stdin(&["apply", "-f", "-"], OBJECTS);

    // --- Endpoints: ready pods under addresses, the unready one under notReadyAddresses,
    // ports resolved per pod (the named target port differs between the two kinds of pod).
    let mut fe = Vec::new();
    let mut straggler = String::new();
    let mut ep = Value::Null;
    wait_until("web endpoints list every pod", WAIT, || {
        fe = pod_ips(&s, "tier=fe");
        straggler = pod_ips(&s, "!tier")
            .first()
            .map(|p| p.1.clone())
            .unwrap_or_default();
        if fe.len() != 3 || fe.iter().any(|p| p.1.is_empty()) || straggler.is_empty() {
            return false;
        }
        let Some(e) = try_json(&s, &["get", "endpoints", "web"]) else {
            return false;
        };
        ep = e;
        let mut want = BTreeSet::new();
        for (_, ip) in &fe {
            want.insert((ip.clone(), 8080, true));
            want.insert((ip.clone(), 9090, true));
        }
        want.insert((straggler.clone(), 8081, false));
        want.insert((straggler.clone(), 9090, false));
        endpoint_triples(&ep) == want
    });
    assert_eq!(
        ep["metadata"]["labels"]["team"], "a",
        "service labels copied"
    );
    assert!(ep["metadata"]["labels"]["service.kubernetes.io/headless"].is_null());
    let all_addrs: Vec<Value> = ep["subsets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| {
            s["addresses"]
                .as_array()
                .into_iter()
                .chain(s["notReadyAddresses"].as_array())
                .flatten()
                .cloned()
                .collect::<Vec<_>>()
        })
        .collect();
    for a in &all_addrs {
        assert_eq!(a["targetRef"]["kind"], "Pod", "{a}");
        assert!(
            matches!(a["nodeName"].as_str(), Some("n1" | "n2")),
            "address on a hollow node: {a}"
        );
        assert!(a["hostname"].is_null(), "subdomain is another service: {a}");
    }
    let named: Vec<&Value> = ep["subsets"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["ports"].as_array().unwrap().iter())
        .filter(|p| p["name"] == "http")
        .collect();
    assert!(named.iter().all(|p| p["protocol"] == "TCP"));
    let table = s.ok(&["get", "endpoints", "web"]);
    assert!(
        table.contains(&format!("{}:", fe[0].1)) || table.contains("more..."),
        "{table}"
    );

    // --- EndpointSlices: one per set of resolved ports, conditions per pod.
    let mut slices = Vec::new();
    wait_until("two web slices with four endpoints", WAIT, || {
        slices = slices_of(&s, "web");
        let n: usize = slices
            .iter()
            .map(|x| x["endpoints"].as_array().map_or(0, Vec::len))
            .sum();
        slices.len() == 2 && n == 4
    });
    for slice in &slices {
        let name = slice["metadata"]["name"].as_str().unwrap();
        assert!(name.starts_with("web-") && name.len() > 4, "{name}");
        assert_eq!(slice["addressType"], "IPv4");
        assert_eq!(
            slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "endpointslice-controller.k8s.io"
        );
        assert_eq!(slice["metadata"]["labels"]["team"], "a");
        let owner = &slice["metadata"]["ownerReferences"][0];
        assert_eq!(
            (owner["kind"].as_str(), owner["name"].as_str()),
            (Some("Service"), Some("web"))
        );
        assert_eq!(owner["controller"], true);
        for e in slice["endpoints"].as_array().unwrap() {
            let ip = e["addresses"][0].as_str().unwrap();
            let ready = ip != straggler;
            assert_eq!(e["conditions"]["ready"], ready, "{e}");
            assert_eq!(e["conditions"]["serving"], ready, "{e}");
            assert_eq!(e["conditions"]["terminating"], false, "{e}");
            assert_eq!(e["targetRef"]["kind"], "Pod");
            assert!(matches!(e["nodeName"].as_str(), Some("n1" | "n2")));
        }
    }
    let fe_slice = slices
        .iter()
        .find(|x| x["endpoints"].as_array().unwrap().len() == 3)
        .expect("the ReplicaSet's pods share a slice");
    assert_eq!(slice_ports(fe_slice), BTreeSet::from([8080, 9090]));
    let fe_slice_name = fe_slice["metadata"]["name"].as_str().unwrap().to_string();
    let other = slices
        .iter()
        .find(|x| x["metadata"]["name"] != fe_slice_name.as_str())
        .unwrap();
    assert_eq!(slice_ports(other), BTreeSet::from([8081, 9090]));
    let table = s.ok(&[
        "get",
        "endpointslices",
        "-l",
        "kubernetes.io/service-name=web",
    ]);
    assert!(
        table.contains("IPv4") && table.contains(&fe_slice_name),
        "{table}"
    );

    // --- Headless: no ports, the headless label, the pod's hostname under its subdomain.
    let mut hl = Value::Null;
    wait_until("headless endpoints", WAIT, || {
        let Some(e) = try_json(&s, &["get", "endpoints", "web-headless"]) else {
            return false;
        };
        hl = e;
        endpoint_triples(&hl).len() == 4
    });
    assert_eq!(
        hl["metadata"]["labels"]["service.kubernetes.io/headless"], "",
        "{hl}"
    );
    let subset = &hl["subsets"][0];
    assert!(subset["ports"].is_null(), "{hl}");
    assert_eq!(subset["addresses"].as_array().unwrap().len(), 3);
    assert_eq!(subset["notReadyAddresses"][0]["hostname"], "h0", "{hl}");
    let hl_slices = slices_of(&s, "web-headless");
    assert_eq!(hl_slices.len(), 1);
    assert_eq!(
        hl_slices[0]["metadata"]["labels"]["service.kubernetes.io/headless"],
        ""
    );
    let with_host: Vec<&Value> = hl_slices[0]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["hostname"] == "h0")
        .collect();
    assert_eq!(with_host.len(), 1);

    // --- Budgets.
    let st = wait_pdb(
        &s,
        "min2",
        &[
            ("currentHealthy", 3),
            ("desiredHealthy", 2),
            ("expectedPods", 3),
            ("disruptionsAllowed", 1),
            ("observedGeneration", 1),
        ],
    );
    let cond = &st["conditions"][0];
    assert_eq!(cond["type"], "DisruptionAllowed");
    assert_eq!(cond["status"], "True");
    assert_eq!(cond["reason"], "SufficientPods");
    // 34% of the ReplicaSet's 3 is rounded up to 2 unavailable.
    wait_pdb(
        &s,
        "pct",
        &[
            ("expectedPods", 3),
            ("desiredHealthy", 1),
            ("disruptionsAllowed", 2),
        ],
    );
    // The unmanaged straggler is reported; the expected count is the ReplicaSet's.
    wait_pdb(
        &s,
        "all",
        &[
            ("currentHealthy", 3),
            ("expectedPods", 3),
            ("desiredHealthy", 2),
            ("disruptionsAllowed", 1),
        ],
    );
    wait_until("UnmanagedPods event", WAIT, || {
        s.ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=all,reason=UnmanagedPods",
        ])
        .contains("were found to be unmanaged")
    });

    // --- A service selecting nothing: an empty Endpoints stamped with the service's
    // creation, and one empty placeholder slice.
    let created = json(&s, &["get", "service", "lonely"])["metadata"]["creationTimestamp"].clone();
    let lonely = json(&s, &["get", "endpoints", "lonely"]);
    assert!(lonely["subsets"].is_null(), "{lonely}");
    assert_eq!(
        lonely["metadata"]["annotations"]["endpoints.kubernetes.io/last-change-trigger-time"],
        created
    );
    let placeholder = slices_of(&s, "lonely");
    assert_eq!(placeholder.len(), 1);
    assert!(placeholder[0]["endpoints"]
        .as_array()
        .is_none_or(Vec::is_empty));

    // --- A service without a selector gets no endpoints from the controllers.
    assert!(try_json(&s, &["get", "endpoints", "manual"]).is_none());
    assert!(slices_of(&s, "manual").is_empty());

    // --- Scaling down: the endpoints follow, the slice is updated in place, the budget
    // no longer allows disruptions.
    s.ok(&["scale", "rs", "web", "--replicas=1"]);
    wait_until("web endpoints down to one ready pod", WAIT, || {
        let Some(e) = try_json(&s, &["get", "endpoints", "web"]) else {
            return false;
        };
        let t = endpoint_triples(&e);
        t.iter().filter(|x| x.2).count() == 2 && t.iter().filter(|x| !x.2).count() == 2
    });
    wait_until("the ReplicaSet's slice shrinks in place", WAIT, || {
        slices_of(&s, "web").iter().any(|x| {
            x["metadata"]["name"] == fe_slice_name.as_str()
                && x["endpoints"].as_array().map_or(0, Vec::len) == 1
        })
    });
    let st = wait_pdb(
        &s,
        "min2",
        &[
            ("currentHealthy", 1),
            ("expectedPods", 1),
            ("disruptionsAllowed", 0),
        ],
    );
    assert_eq!(st["conditions"][0]["status"], "False");
    assert_eq!(st["conditions"][0]["reason"], "InsufficientPods");

    // --- Deleting the service deletes its Endpoints.
    s.ok(&["delete", "service", "web"]);
    wait_until("web endpoints deleted", WAIT, || {
        try_json(&s, &["get", "endpoints", "web"]).is_none()
    });
}

#[test]
fn large_services_split_into_slices() {
    let s = Server::start_cluster(&[]);
    let _nodes = s.hollow_nodes(&["n1", "n2"]);
    let mut list = String::from(
        "apiVersion: v1\nkind: Service\nmetadata: {name: big}\nspec:\n  selector: {app: big}\n  ports: [{port: 80}]\n",
    );
    for i in 0..110 {
        list.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata: {{name: big-{i}, labels: {{app: big}}}}\nspec:\n  nodeName: n{}\n  terminationGracePeriodSeconds: 0\n  containers: [{{name: c, image: nginx}}]\n",
            i % 2 + 1
        ));
    }
    s.ok_stdin(&["apply", "-f", "-"], &list);

    let deadline = std::time::Instant::now() + WAIT;
    let slices = loop {
        let slices = slices_of(&s, "big");
        let ready: usize = slices
            .iter()
            .flat_map(|x| x["endpoints"].as_array().cloned().unwrap_or_default())
            .filter(|e| e["conditions"]["ready"] == true)
            .count();
        if slices.len() == 2 && ready == 110 {
            break slices;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "110 ready endpoints in 2 slices; have {} slices, {ready} ready\n{}",
            slices.len(),
            s.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let mut sizes: Vec<usize> = slices
        .iter()
        .map(|x| x["endpoints"].as_array().map_or(0, Vec::len))
        .collect();
    sizes.sort();
    // How the 110 split depends on how many pods each sync saw (Kubernetes' reconciler opens a
    // new slice rather than rewrite a full one); none may exceed 100.
    assert_eq!(sizes.iter().sum::<usize>(), 110, "{sizes:?}");
    assert!(
        sizes.iter().all(|n| *n <= 100),
        "at most 100 per slice: {sizes:?}"
    );
    let ips: BTreeSet<String> = slices
        .iter()
        .flat_map(|x| x["endpoints"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["addresses"][0].as_str().map(str::to_string))
        .collect();
    assert_eq!(ips.len(), 110, "distinct pod addresses");

    // The Endpoints lists them all, as one subset on port 80.
    wait_until("110 addresses in the Endpoints", WAIT, || {
        try_json(&s, &["get", "endpoints", "big"]).is_some_and(|e| {
            endpoint_triples(&e)
                .iter()
                .filter(|t| t.2 && t.1 == 80)
                .count()
                == 110
        })
    });

    // Ten pods go: the slices shrink in place, no slice is replaced.
    let names: BTreeSet<String> = slices
        .iter()
        .filter_map(|x| x["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    // (From the largest slice, so that neither slice empties.)
    let full = slices
        .iter()
        .max_by_key(|x| x["endpoints"].as_array().map_or(0, Vec::len))
        .unwrap();
    let doomed: Vec<String> = full["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .take(10)
        .filter_map(|e| e["targetRef"]["name"].as_str().map(str::to_string))
        .collect();
    assert_eq!(doomed.len(), 10);
    let mut args = vec!["delete", "pod", "--wait=false"];
    args.extend(doomed.iter().map(String::as_str));
    s.ok(&args);
    wait_until("100 endpoints left in the same slices", WAIT, || {
        let now = slices_of(&s, "big");
        let n: usize = now
            .iter()
            .map(|x| x["endpoints"].as_array().map_or(0, Vec::len))
            .sum();
        let now_names: BTreeSet<String> = now
            .iter()
            .filter_map(|x| x["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        n == 100 && now_names == names
    });
}
