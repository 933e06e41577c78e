//! Behaviour of the built-in admission plugins, run as the server runs them: the whole chain
//! (every mutating phase, then every validating phase) over objects in `MemoryObjects`.

use capstan_api::catalogue;
use serde_json::{json, Value};

use super::builtin::builtin_plugins;
use super::podsecurity::{enforce_policy, evaluate, Level, LevelVersion};
use super::priority::system_priority_classes;
use super::resourcequota::usage_of;
use super::serviceaccount::TOKEN_MOUNT_PATH;
use super::{Attributes, Chain, Operation};
use crate::auth::User;
use crate::error::{ApiError, ApiResult};
use crate::objects::{MemoryObjects, Objects};

fn admin() -> User {
    User {
        name: "admin".into(),
        groups: vec!["system:masters".into()],
        ..Default::default()
    }
}

fn node_user(n: &str) -> User {
    User {
        name: format!("system:node:{n}"),
        groups: vec!["system:nodes".into()],
        ..Default::default()
    }
}

/// A namespace with its default service account, as the server would have it.
fn cluster() -> MemoryObjects {
    let o = MemoryObjects::default();
    for ns in ["default", "team"] {
        o.insert("", "namespaces", json!({"metadata": {"name": ns}}));
        o.insert(
            "",
            "serviceaccounts",
            json!({"metadata": {"name": "default", "namespace": ns}}),
        );
    }
    o
}

struct Req<'a> {
    objects: &'a MemoryObjects,
    user: User,
    op: Operation,
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    sub: &'static str,
    ns: &'static str,
    name: &'static str,
    dry_run: bool,
}

impl<'a> Req<'a> {
    fn new(objects: &'a MemoryObjects, op: Operation, plural: &'static str) -> Req<'a> {
        Req {
            objects,
            user: admin(),
            op,
            group: "",
            version: "v1",
            plural,
            sub: "",
            ns: "default",
            name: "",
            dry_run: false,
        }
    }

    /// Run the built-in chain; the admitted object, or the rejection.
    async fn run(&self, obj: Option<Value>, old: Option<&Value>) -> ApiResult<Option<Value>> {
        let info = catalogue::find(self.group, self.version, self.plural).expect("known resource");
        let a = Attributes {
            user: &self.user,
            operation: self.op,
            info,
            subresource: self.sub,
            namespace: if info.namespaced { self.ns } else { "" },
            name: self.name,
            dry_run: self.dry_run,
            objects: self.objects,
        };
        let chain = Chain {
            plugins: builtin_plugins(),
        };
        let mut obj = obj;
        chain.admit(&a, obj.as_mut(), old).await?;
        chain.validate(&a, obj.as_ref(), old).await?;
        Ok(obj)
    }

    async fn create(&self, obj: Value) -> ApiResult<Value> {
        Ok(self.run(Some(obj), None).await?.expect("object"))
    }
}

fn forbidden_message(r: ApiResult<Value>) -> String {
    let e: ApiError = r.expect_err("rejected");
    assert_eq!(e.code, 403, "{}", e.message);
    e.message
}

fn pod(name: &str, containers: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": containers}})
}

fn container(name: &str, resources: Value) -> Value {
    json!({"name": name, "image": "nginx", "resources": resources})
}

// ---- LimitRanger ----

fn limit_range(limits: Value) -> Value {
    json!({"metadata": {"name": "limits", "namespace": "default"}, "spec": {"limits": limits}})
}

#[tokio::test]
async fn limit_ranger_applies_container_defaults_and_annotates() {
    let o = cluster();
    o.insert(
        "",
        "limitranges",
        limit_range(json!([{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}])),
    );
    let mut p = pod(
        "web",
        json!([container("app", json!({"requests": {"cpu": "200m"}}))]),
    );
    p["spec"]["initContainers"] = json!([container("init", json!({}))]);
    let p = Req::new(&o, Operation::Create, "pods")
        .create(p)
        .await
        .unwrap();
    let app = &p["spec"]["containers"][0]["resources"];
    assert_eq!(app["requests"], json!({"cpu": "200m", "memory": "128Mi"}));
    assert_eq!(app["limits"], json!({"cpu": "500m", "memory": "256Mi"}));
    let init = &p["spec"]["initContainers"][0]["resources"];
    assert_eq!(init["requests"], json!({"cpu": "100m", "memory": "128Mi"}));
    assert_eq!(
        p["metadata"]["annotations"]["kubernetes.io/limit-ranger"],
        json!("LimitRanger plugin set: memory request for container app; cpu, memory limit for container app; cpu, memory request for init container init; cpu, memory limit for init container init")
    );
}

#[tokio::test]
async fn limit_ranger_rejects_limits_beyond_the_maximum() {
    let o = cluster();
    o.insert(
        "",
        "limitranges",
        limit_range(json!([
            {"type": "Container", "max": {"memory": "1Gi"}, "default": {"memory": "1Gi"},
             "defaultRequest": {"memory": "1Gi"}},
            {"type": "Pod", "max": {"cpu": "2"}},
        ])),
    );
    let p = pod(
        "big",
        json!([container(
            "c",
            json!({"limits": {"memory": "2Gi", "cpu": "1"}, "requests": {"memory": "2Gi", "cpu": "1"}})
        )]),
    );
    let msg = forbidden_message(Req::new(&o, Operation::Create, "pods").create(p).await);
    assert_eq!(
        msg,
        "pods \"big\" is forbidden: maximum memory usage per Container is 1Gi, but limit is 2Gi"
    );
    let p = pod(
        "wide",
        json!([
            container(
                "a",
                json!({"limits": {"cpu": "2"}, "requests": {"cpu": "2"}})
            ),
            container(
                "b",
                json!({"limits": {"cpu": "1"}, "requests": {"cpu": "1"}})
            ),
        ]),
    );
    let msg = forbidden_message(Req::new(&o, Operation::Create, "pods").create(p).await);
    assert_eq!(
        msg,
        "pods \"wide\" is forbidden: maximum cpu usage per Pod is 2, but limit is 3"
    );
}

#[tokio::test]
async fn limit_ranger_checks_claim_storage_and_ratios() {
    let o = cluster();
    o.insert(
        "",
        "limitranges",
        limit_range(json!([
            {"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "5Gi"}},
            {"type": "Container", "maxLimitRequestRatio": {"cpu": "2"}},
        ])),
    );
    let claim = json!({"metadata": {"name": "data", "namespace": "default"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}});
    let msg = forbidden_message(
        Req::new(&o, Operation::Create, "persistentvolumeclaims")
            .create(claim)
            .await,
    );
    assert_eq!(
        msg,
        "persistentvolumeclaims \"data\" is forbidden: maximum storage usage per PersistentVolumeClaim is 5Gi, but request is 10Gi"
    );
    let p = pod(
        "bursty",
        json!([container(
            "c",
            json!({"limits": {"cpu": "1"}, "requests": {"cpu": "250m"}})
        )]),
    );
    let msg = forbidden_message(Req::new(&o, Operation::Create, "pods").create(p).await);
    assert_eq!(
        msg,
        "pods \"bursty\" is forbidden: cpu max limit to request ratio per Container is 2, but provided ratio is 4.000000"
    );
}

// ---- ResourceQuota ----

fn quota(hard: Value) -> Value {
    json!({"metadata": {"name": "q", "namespace": "default", "resourceVersion": "1"},
        "spec": {"hard": hard}, "status": {"hard": hard, "used": {}}})
}

#[tokio::test]
async fn quota_of_one_pod_admits_one_and_rejects_the_second() {
    let o = cluster();
    o.insert("", "resourcequotas", quota(json!({"pods": "1"})));
    let r = Req::new(&o, Operation::Create, "pods");
    let first = r
        .create(pod("one", json!([container("c", json!({}))])))
        .await
        .unwrap();
    let q = o.get("", "resourcequotas", "default", "q").unwrap();
    assert_eq!(q["status"]["used"], json!({"pods": "1"}));
    o.insert("", "pods", first);
    let msg = forbidden_message(
        r.create(pod("two", json!([container("c", json!({}))])))
            .await,
    );
    assert_eq!(
        msg,
        "pods \"two\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"
    );
    let q = o.get("", "resourcequotas", "default", "q").unwrap();
    assert_eq!(q["status"]["used"], json!({"pods": "1"}));
}

/// Reads from a snapshot taken earlier (a lagging cache); writes go to the live store.
struct LaggingCache {
    snapshot: MemoryObjects,
    live: MemoryObjects,
}

#[async_trait::async_trait]
impl Objects for LaggingCache {
    fn get(&self, group: &str, resource: &str, ns: &str, name: &str) -> Option<Value> {
        self.snapshot.get(group, resource, ns, name)
    }

    fn list(&self, group: &str, resource: &str, ns: &str) -> Vec<Value> {
        self.snapshot.list(group, resource, ns)
    }

    fn pods_on_node(&self, node: &str) -> Vec<Value> {
        self.snapshot.pods_on_node(node)
    }

    async fn get_current(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<Value>> {
        Ok(self.live.get(group, resource, ns, name))
    }

    async fn update(
        &self,
        group: &str,
        resource: &str,
        ns: &str,
        name: &str,
        subresource: &str,
        change: crate::objects::Change<'_>,
    ) -> ApiResult<Value> {
        self.live
            .update(group, resource, ns, name, subresource, change)
            .await
    }

    async fn create(&self, group: &str, resource: &str, ns: &str, obj: Value) -> ApiResult<Value> {
        self.live.create(group, resource, ns, obj).await
    }
}

/// A Pod create in `default` by `user`, for calling one plugin directly.
fn pod_create<'a>(user: &'a User, objects: &'a dyn Objects) -> Attributes<'a> {
    Attributes {
        user,
        operation: Operation::Create,
        info: catalogue::find("", "v1", "pods").unwrap(),
        subresource: "",
        namespace: "default",
        name: "",
        dry_run: false,
        objects,
    }
}

#[tokio::test]
async fn quota_charges_check_the_stored_status_not_the_cache() {
    let objects = LaggingCache {
        snapshot: cluster(),
        live: cluster(),
    };
    for o in [&objects.snapshot, &objects.live] {
        o.insert("", "resourcequotas", quota(json!({"pods": "1"})));
    }
    let user = admin();
    let a = pod_create(&user, &objects);
    let plugin = super::resourcequota::ResourceQuota;
    let p = |n: &str| pod(n, json!([container("c", json!({}))]));
    use super::Plugin;
    plugin.validate(&a, Some(&p("one")), None).await.unwrap();
    // The cache still shows nothing used; the stored status decides.
    let e = plugin
        .validate(&a, Some(&p("two")), None)
        .await
        .unwrap_err();
    assert_eq!(
        e.message,
        "pods \"two\" is forbidden: exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"
    );
    let q = objects
        .live
        .get("", "resourcequotas", "default", "q")
        .unwrap();
    assert_eq!(q["status"]["used"], json!({"pods": "1"}));
}

#[tokio::test]
async fn quota_dry_run_checks_without_charging() {
    let o = cluster();
    o.insert("", "resourcequotas", quota(json!({"pods": "1"})));
    let mut r = Req::new(&o, Operation::Create, "pods");
    r.dry_run = true;
    r.create(pod("one", json!([container("c", json!({}))])))
        .await
        .unwrap();
    let q = o.get("", "resourcequotas", "default", "q").unwrap();
    assert_eq!(q["status"]["used"], json!({}));
}

#[tokio::test]
async fn quota_on_compute_resources_requires_requests_and_sums_them() {
    let o = cluster();
    o.insert(
        "",
        "resourcequotas",
        quota(json!({"requests.cpu": "1", "limits.memory": "1Gi"})),
    );
    let r = Req::new(&o, Operation::Create, "pods");
    let msg = forbidden_message(
        r.create(pod(
            "bare",
            json!([
                container("a", json!({"requests": {"cpu": "100m"}})),
                container("b", json!({}))
            ]),
        ))
        .await,
    );
    assert_eq!(
        msg,
        "pods \"bare\" is forbidden: failed quota: q: must specify limits.memory for: a,b; requests.cpu for: b"
    );
    let sized = |name: &str, cpu: &str| {
        pod(
            name,
            json!([container(
                "a",
                json!({"requests": {"cpu": cpu}, "limits": {"memory": "512Mi"}})
            )]),
        )
    };
    r.create(sized("p1", "600m")).await.unwrap();
    let msg = forbidden_message(r.create(sized("p2", "600m")).await);
    assert_eq!(
        msg,
        "pods \"p2\" is forbidden: exceeded quota: q, requested: requests.cpu=600m, used: requests.cpu=600m, limited: requests.cpu=1"
    );
    let q = o.get("", "resourcequotas", "default", "q").unwrap();
    assert_eq!(
        q["status"]["used"],
        json!({"limits.memory": "512Mi", "requests.cpu": "600m"})
    );
}

#[tokio::test]
async fn quota_scopes_select_the_pods_they_count() {
    let o = cluster();
    let mut q = quota(json!({"pods": "1"}));
    q["spec"]["scopes"] = json!(["BestEffort"]);
    o.insert("", "resourcequotas", q);
    let r = Req::new(&o, Operation::Create, "pods");
    let sized = json!([container("c", json!({"requests": {"cpu": "1"}}))]);
    r.create(pod("a", sized.clone())).await.unwrap();
    r.create(pod("b", sized)).await.unwrap();
    r.create(pod("c", json!([container("c", json!({}))])))
        .await
        .unwrap();
    let msg = forbidden_message(r.create(pod("d", json!([container("c", json!({}))]))).await);
    assert!(msg.contains("exceeded quota: q"), "{msg}");
}

#[tokio::test]
async fn quota_counts_objects_and_service_node_ports() {
    let o = cluster();
    o.insert(
        "",
        "resourcequotas",
        quota(json!({"count/configmaps": "5", "configmaps": "1", "services.nodeports": "1"})),
    );
    let cm = |n: &str| json!({"metadata": {"name": n, "namespace": "default"}, "data": {}});
    let r = Req::new(&o, Operation::Create, "configmaps");
    r.create(cm("a")).await.unwrap();
    let msg = forbidden_message(r.create(cm("b")).await);
    assert_eq!(
        msg,
        "configmaps \"b\" is forbidden: exceeded quota: q, requested: configmaps=1, used: configmaps=1, limited: configmaps=1"
    );
    let svc = json!({"metadata": {"name": "web", "namespace": "default"},
        "spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443}]}});
    let msg = forbidden_message(
        Req::new(&o, Operation::Create, "services")
            .create(svc)
            .await,
    );
    assert_eq!(
        msg,
        "services \"web\" is forbidden: exceeded quota: q, requested: services.nodeports=2, used: services.nodeports=0, limited: services.nodeports=1"
    );
}

#[test]
fn usage_of_counts_what_the_quota_tracks() {
    let o = cluster();
    let sized = |name: &str, phase: &str| {
        let mut p = pod(
            name,
            json!([container(
                "c",
                json!({"requests": {"cpu": "250m", "memory": "64Mi"}})
            )]),
        );
        p["status"] = json!({"phase": phase});
        p
    };
    o.insert("", "pods", sized("a", "Running"));
    o.insert("", "pods", sized("b", "Running"));
    o.insert("", "pods", sized("done", "Succeeded"));
    o.insert(
        "",
        "secrets",
        json!({"metadata": {"name": "s", "namespace": "default"}}),
    );
    o.insert(
        "apps",
        "deployments",
        json!({"metadata": {"name": "d", "namespace": "default"}}),
    );
    let q = quota(
        json!({"pods": "10", "count/pods": "10", "requests.cpu": "4", "memory": "1Gi",
        "secrets": "5", "count/deployments.apps": "3", "services": "2"}),
    );
    assert_eq!(
        Value::Object(usage_of(&o, &q)),
        json!({"count/deployments.apps": "1", "count/pods": "3", "memory": "128Mi", "pods": "2",
            "requests.cpu": "500m", "secrets": "1", "services": "0"})
    );
}

// ---- ServiceAccount ----

#[tokio::test]
async fn service_account_projects_the_token_into_every_container() {
    let o = cluster();
    o.insert(
        "",
        "serviceaccounts",
        json!({"metadata": {"name": "default", "namespace": "default"},
            "imagePullSecrets": [{"name": "registry"}]}),
    );
    let mut p = pod(
        "web",
        json!([container("a", json!({})), container("b", json!({}))]),
    );
    p["spec"]["initContainers"] = json!([container("init", json!({}))]);
    let p = Req::new(&o, Operation::Create, "pods")
        .create(p)
        .await
        .unwrap();
    assert_eq!(p["spec"]["serviceAccountName"], json!("default"));
    assert_eq!(p["spec"]["imagePullSecrets"], json!([{"name": "registry"}]));
    let volume = &p["spec"]["volumes"][0];
    let name = volume["name"].as_str().unwrap();
    let suffix = name.strip_prefix("kube-api-access-").unwrap();
    assert_eq!(suffix.len(), 5);
    assert!(suffix
        .chars()
        .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
    assert_eq!(
        volume["projected"],
        json!({
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
            ],
            "defaultMode": 420,
        })
    );
    let mount = json!([{"name": name, "readOnly": true, "mountPath": TOKEN_MOUNT_PATH}]);
    for c in ["containers", "initContainers"] {
        for i in 0..p["spec"][c].as_array().unwrap().len() {
            assert_eq!(p["spec"][c][i]["volumeMounts"], mount, "{c}[{i}]");
        }
    }
}

#[tokio::test]
async fn service_account_respects_automount_opt_out_and_missing_accounts() {
    let o = cluster();
    o.insert(
        "",
        "serviceaccounts",
        json!({"metadata": {"name": "quiet", "namespace": "default"}, "automountServiceAccountToken": false}),
    );
    let mut p = pod("web", json!([container("a", json!({}))]));
    p["spec"]["serviceAccountName"] = json!("quiet");
    let p = Req::new(&o, Operation::Create, "pods")
        .create(p)
        .await
        .unwrap();
    assert!(p["spec"].get("volumes").is_none());
    assert!(p["spec"]["containers"][0].get("volumeMounts").is_none());

    let mut p = pod("web", json!([container("a", json!({}))]));
    p["spec"]["serviceAccountName"] = json!("ghost");
    let msg = forbidden_message(Req::new(&o, Operation::Create, "pods").create(p).await);
    assert_eq!(
        msg,
        "pods \"web\" is forbidden: error looking up service account default/ghost: serviceaccount \"ghost\" not found"
    );
}

#[tokio::test]
async fn mirror_pods_may_not_reference_secrets() {
    let o = cluster();
    let mut p = pod("static-web", json!([container("a", json!({}))]));
    p["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
    p["spec"]["nodeName"] = json!("n1");
    p["spec"]["volumes"] = json!([{"name": "s", "secret": {"secretName": "creds"}}]);
    let msg = forbidden_message(Req::new(&o, Operation::Create, "pods").create(p).await);
    assert_eq!(
        msg,
        "pods \"static-web\" is forbidden: a mirror pod may not reference secrets"
    );
}

// ---- DefaultTolerationSeconds and TaintNodesByCondition ----

#[tokio::test]
async fn pods_get_bounded_not_ready_and_unreachable_tolerations() {
    let o = cluster();
    let mut p = pod("web", json!([container("a", json!({}))]));
    p["spec"]["tolerations"] = json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
        "effect": "NoExecute", "tolerationSeconds": 60}]);
    let p = Req::new(&o, Operation::Create, "pods")
        .create(p)
        .await
        .unwrap();
    assert_eq!(
        p["spec"]["tolerations"],
        json!([
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
        ])
    );
}

#[tokio::test]
async fn new_nodes_are_tainted_not_ready() {
    let o = cluster();
    let node = json!({"metadata": {"name": "n1"}, "spec": {}});
    let node = Req::new(&o, Operation::Create, "nodes")
        .create(node)
        .await
        .unwrap();
    assert_eq!(
        node["spec"]["taints"],
        json!([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}])
    );
}

// ---- Priority ----

fn priority_class(name: &str, value: i64, default: bool) -> Value {
    json!({"metadata": {"name": name}, "value": value, "globalDefault": default,
        "preemptionPolicy": "PreemptLowerPriority"})
}

#[tokio::test]
async fn priority_is_resolved_from_the_class_or_the_default() {
    let o = cluster();
    for pc in system_priority_classes() {
        o.insert("scheduling.k8s.io", "priorityclasses", pc);
    }
    o.insert(
        "scheduling.k8s.io",
        "priorityclasses",
        priority_class("high", 1000, false),
    );
    let r = Req::new(&o, Operation::Create, "pods");
    let mut p = pod("web", json!([container("a", json!({}))]));
    p["spec"]["priorityClassName"] = json!("high");
    let got = r.create(p).await.unwrap();
    assert_eq!(got["spec"]["priority"], json!(1000));
    assert_eq!(
        got["spec"]["preemptionPolicy"],
        json!("PreemptLowerPriority")
    );

    let got = r
        .create(pod("plain", json!([container("a", json!({}))])))
        .await
        .unwrap();
    assert_eq!(got["spec"]["priority"], json!(0));
    assert!(got["spec"].get("priorityClassName").is_none());

    o.insert(
        "scheduling.k8s.io",
        "priorityclasses",
        priority_class("normal", 10, true),
    );
    let got = r
        .create(pod("plain", json!([container("a", json!({}))])))
        .await
        .unwrap();
    assert_eq!(got["spec"]["priority"], json!(10));
    assert_eq!(got["spec"]["priorityClassName"], json!("normal"));

    let mut p = pod("crit", json!([container("a", json!({}))]));
    p["spec"]["priorityClassName"] = json!("system-node-critical");
    let got = r.create(p).await.unwrap();
    assert_eq!(got["spec"]["priority"], json!(2000001000));
}

#[tokio::test]
async fn unknown_classes_and_conflicting_priorities_are_rejected() {
    let o = cluster();
    o.insert(
        "scheduling.k8s.io",
        "priorityclasses",
        priority_class("high", 1000, false),
    );
    let r = Req::new(&o, Operation::Create, "pods");
    let mut p = pod("web", json!([container("a", json!({}))]));
    p["spec"]["priorityClassName"] = json!("missing");
    assert_eq!(
        forbidden_message(r.create(p).await),
        "pods \"web\" is forbidden: no PriorityClass with name missing was found"
    );
    let mut p = pod("web", json!([container("a", json!({}))]));
    p["spec"]["priorityClassName"] = json!("high");
    p["spec"]["priority"] = json!(5);
    assert_eq!(
        forbidden_message(r.create(p).await),
        "pods \"web\" is forbidden: the integer value of priority (5) must not be provided in pod spec; priority admission controller computed 1000 from the given PriorityClass name"
    );
    let mut second = Req::new(&o, Operation::Create, "priorityclasses");
    second.group = "scheduling.k8s.io";
    o.insert(
        "scheduling.k8s.io",
        "priorityclasses",
        priority_class("normal", 10, true),
    );
    assert_eq!(
        forbidden_message(second.create(priority_class("other", 5, true)).await),
        "priorityclasses.scheduling.k8s.io \"other\" is forbidden: PriorityClass normal is already marked as default. Only one default can exist"
    );
}

// ---- PodSecurity ----

fn restricted_namespace(o: &MemoryObjects) {
    o.insert(
        "",
        "namespaces",
        json!({"metadata": {"name": "default", "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}}),
    );
}

#[tokio::test]
async fn restricted_namespaces_reject_privileged_pods() {
    let o = cluster();
    restricted_namespace(&o);
    let p = pod(
        "root",
        json!([{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]),
    );
    let msg = forbidden_message(Req::new(&o, Operation::Create, "pods").create(p).await);
    assert_eq!(
        msg,
        "pods \"root\" is forbidden: violates PodSecurity \"restricted:latest\": privileged (container \"c\" must not set securityContext.privileged=true), allowPrivilegeEscalation != false (container \"c\" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container \"c\" must set securityContext.capabilities.drop=[\"ALL\"]), runAsNonRoot != true (pod or container \"c\" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container \"c\" must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")"
    );
}

#[tokio::test]
async fn restricted_namespaces_admit_compliant_pods() {
    let o = cluster();
    restricted_namespace(&o);
    let mut p = pod(
        "good",
        json!([{"name": "c", "image": "nginx", "securityContext": {
            "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}]),
    );
    p["spec"]["securityContext"] =
        json!({"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}});
    Req::new(&o, Operation::Create, "pods")
        .create(p)
        .await
        .unwrap();
}

#[test]
fn baseline_checks_report_host_access() {
    let p = json!({"metadata": {"name": "h"}, "spec": {
        "hostNetwork": true, "hostPID": true,
        "containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 80, "hostPort": 80}],
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "CHOWN"]}}},
            {"name": "b", "image": "x", "ports": [{"containerPort": 443, "hostPort": 443}]}],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
        "securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_rmem", "value": "1 2 3"}]},
    }});
    let policy = LevelVersion {
        level: Level::Baseline,
        minor: None,
    };
    assert_eq!(
        super::podsecurity::describe(&evaluate(policy, &p)),
        "non-default capabilities (container \"a\" must not include \"NET_ADMIN\" in securityContext.capabilities.add), host namespaces (hostNetwork=true, hostPID=true), hostPath volumes (volume \"root\"), hostPort (containers \"a\", \"b\" use hostPorts 443, 80), forbidden sysctls (kernel.msgmax)"
    );
    let old = LevelVersion {
        level: Level::Baseline,
        minor: Some(31),
    };
    assert!(super::podsecurity::describe(&evaluate(old, &p))
        .contains("forbidden sysctls (kernel.msgmax, net.ipv4.tcp_rmem)"));
    assert_eq!(
        enforce_policy(Some(
            json!({"pod-security.kubernetes.io/enforce": "bogus"})
                .as_object()
                .unwrap()
        ))
        .to_string(),
        "restricted:latest"
    );
}

// ---- NodeRestriction ----

fn node_obj(name: &str, labels: Value, taints: Value) -> Value {
    json!({"metadata": {"name": name, "uid": "uid-1", "resourceVersion": "5", "labels": labels},
        "spec": {"taints": taints}})
}

#[tokio::test]
async fn nodes_may_only_modify_themselves_and_not_their_taints_or_role_labels() {
    let o = cluster();
    let old = node_obj("n1", json!({"kubernetes.io/hostname": "n1"}), json!([]));
    o.insert("", "nodes", old.clone());
    let mut r = Req::new(&o, Operation::Update, "nodes");
    r.user = node_user("n1");
    r.name = "n2";
    let msg = forbidden_message(
        r.run(Some(old.clone()), Some(&old))
            .await
            .map(Option::unwrap),
    );
    assert_eq!(
        msg,
        "nodes \"n2\" is forbidden: node \"n1\" is not allowed to modify node \"n2\""
    );
    r.name = "n1";
    let tainted = node_obj(
        "n1",
        json!({"kubernetes.io/hostname": "n1"}),
        json!([{"key": "k", "effect": "NoSchedule"}]),
    );
    let msg = forbidden_message(r.run(Some(tainted), Some(&old)).await.map(Option::unwrap));
    assert_eq!(
        msg,
        "nodes \"n1\" is forbidden: node \"n1\" is not allowed to modify taints"
    );
    let relabelled = node_obj(
        "n1",
        json!({"kubernetes.io/hostname": "n1", "node-role.kubernetes.io/control-plane": "",
            "node.kubernetes.io/instance-type": "big", "example.com/team": "a"}),
        json!([]),
    );
    let msg = forbidden_message(
        r.run(Some(relabelled), Some(&old))
            .await
            .map(Option::unwrap),
    );
    assert_eq!(
        msg,
        "nodes \"n1\" is forbidden: is not allowed to modify labels: node-role.kubernetes.io/control-plane"
    );
    let fine = node_obj(
        "n1",
        json!({"kubernetes.io/hostname": "n1", "node.kubernetes.io/instance-type": "big"}),
        json!([]),
    );
    r.run(Some(fine), Some(&old)).await.unwrap();
}

#[tokio::test]
async fn a_mirror_pod_may_name_a_node_the_cache_has_not_seen_yet() {
    // The kubelet registers its Node and at once creates its mirror pods: the cache may not
    // have the Node yet, or may still hold the one it replaced (another UID).
    let objects = LaggingCache {
        snapshot: cluster(),
        live: cluster(),
    };
    let user = node_user("n1");
    let a = pod_create(&user, &objects);
    let mut mirror = pod("static", json!([container("a", json!({}))]));
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
    mirror["spec"]["nodeName"] = json!("n1");
    mirror["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node",
        "name": "n1", "uid": "uid-2", "controller": true}]);
    use super::Plugin;
    let plugin = super::noderestriction::NodeRestriction;
    let e = plugin
        .admit(&a, Some(&mut mirror.clone()), None)
        .await
        .unwrap_err();
    assert_eq!(
        (e.code, e.message.as_str()),
        (404, "nodes \"n1\" not found")
    );

    let mut old = node_obj("n1", json!({}), json!([]));
    objects.snapshot.insert("", "nodes", old.clone());
    old["metadata"]["uid"] = json!("uid-2");
    objects.live.insert("", "nodes", old);
    plugin
        .admit(&a, Some(&mut mirror.clone()), None)
        .await
        .unwrap();
    // A UID that neither has is still refused.
    mirror["metadata"]["ownerReferences"][0]["uid"] = json!("uid-3");
    let msg = forbidden_message(
        plugin
            .admit(&a, Some(&mut mirror.clone()), None)
            .await
            .map(|_| Value::Null),
    );
    assert_eq!(
        msg,
        "pods \"static\" is forbidden: node n1 UID mismatch: expected uid-2 got uid-3"
    );
}

#[tokio::test]
async fn nodes_create_only_mirror_pods_bound_and_owned_by_themselves() {
    let o = cluster();
    o.insert("", "nodes", node_obj("n1", json!({}), json!([])));
    let mut r = Req::new(&o, Operation::Create, "pods");
    r.user = node_user("n1");
    let msg = forbidden_message(
        r.create(pod("web", json!([container("a", json!({}))])))
            .await,
    );
    assert_eq!(
        msg,
        "pods \"web\" is forbidden: pod does not have \"kubernetes.io/config.mirror\" annotation, node \"n1\" can only create mirror pods"
    );
    let mut mirror = pod("static", json!([container("a", json!({}))]));
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "hash"});
    mirror["spec"]["nodeName"] = json!("n2");
    let msg = forbidden_message(r.create(mirror.clone()).await);
    assert_eq!(
        msg,
        "pods \"static\" is forbidden: node \"n1\" can only create pods with spec.nodeName set to itself"
    );
    mirror["spec"]["nodeName"] = json!("n1");
    mirror["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Node",
        "name": "n1", "uid": "uid-1", "controller": true}]);
    r.create(mirror).await.unwrap();

    let mut del = Req::new(&o, Operation::Delete, "pods");
    del.user = node_user("n1");
    del.name = "elsewhere";
    let mut other = pod("elsewhere", json!([container("a", json!({}))]));
    other["spec"]["nodeName"] = json!("n2");
    let msg = forbidden_message(del.run(None, Some(&other)).await.map(|_| Value::Null));
    assert_eq!(
        msg,
        "pods \"elsewhere\" is forbidden: node \"n1\" can only delete pods with spec.nodeName set to itself"
    );
}

#[tokio::test]
async fn nodes_only_touch_their_own_lease() {
    let o = cluster();
    let mut r = Req::new(&o, Operation::Create, "leases");
    r.group = "coordination.k8s.io";
    r.user = node_user("n1");
    r.ns = "kube-node-lease";
    let lease =
        |n: &str| json!({"metadata": {"name": n, "namespace": "kube-node-lease"}, "spec": {}});
    r.create(lease("n1")).await.unwrap();
    let msg = forbidden_message(r.create(lease("n2")).await);
    assert_eq!(
        msg,
        "leases.coordination.k8s.io \"n2\" is forbidden: can only access node lease with the same name as the requesting node"
    );
}
