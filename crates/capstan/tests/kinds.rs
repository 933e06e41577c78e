//! Every kind the API server serves, end to end through the real kubectl v1.32: one realistic
//! manifest per kind, created, applied twice, read back in every output format (table, wide,
//! YAML, JSON, jsonpath, name), described, labelled, annotated, patched three ways, replaced and
//! deleted; then `get all`, watches, conflicts, label and field selectors, and an orphaning
//! delete. One server for everything, so the whole file stays quick.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::Server;

/// The namespace every namespaced object lives in.
const NS: &str = "kinds";

/// How an object goes away on `kubectl delete`.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Delete {
    /// At once.
    Gone,
    /// A pod bound to a node: it gets a deletionTimestamp and its grace period, and stays
    /// until its kubelet (there is none) confirms; `--force --grace-period=0` removes it.
    Graceful,
    /// A namespace: Terminating until the namespace controller (there is none) empties and
    /// finalizes it; after `finalize`, another delete removes it.
    Terminating,
}

/// One kind under test.
struct Case {
    /// How kubectl names the resource (`api-resources -o name`; HPA v1 spelled out).
    resource: &'static str,
    name: &'static str,
    namespaced: bool,
    /// What `-o name` prints before the slash.
    kind_name: &'static str,
    /// The manifest; its labels include `stage: created`, which the second apply changes.
    manifest: &'static str,
    /// The table's header, as Kubernetes' printers have it.
    columns: &'static [&'static str],
    /// The header under `-o wide`, when it differs.
    wide: Option<&'static [&'static str]>,
    /// Cells of the wide table's one row.
    cells: &'static [(&'static str, &'static str)],
    /// JSON pointers and their values once created (round trip and defaults).
    created: &'static [(&'static str, &'static str)],
    /// The second apply replaces this in the manifest ...
    edit: (&'static str, &'static str),
    /// ... after which these hold.
    applied: &'static [(&'static str, &'static str)],
    /// A strategic merge patch of the spec and what holds after it (default: an annotation).
    strategic: Option<(&'static str, &'static [(&'static str, &'static str)])>,
    /// Checks of the object as JSON beyond pointers.
    extra: Option<fn(&Value)>,
    delete: Delete,
}

const BASE: Case = Case {
    resource: "",
    name: "",
    namespaced: true,
    kind_name: "",
    manifest: "",
    columns: &[],
    wide: None,
    cells: &[],
    created: &[],
    edit: ("stage: created", "stage: created"),
    applied: &[],
    strategic: None,
    extra: None,
    delete: Delete::Gone,
};

static CASES: &[Case] = &[
    // core/v1
    Case {
        resource: "configmaps",
        name: "app-config",
        kind_name: "configmap",
        manifest: r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: app-config
  labels: {app: web, stage: created}
data:
  mode: prod
  app.properties: |
    color=blue
    size=3
"#,
        columns: &["NAME", "DATA", "AGE"],
        cells: &[("NAME", "app-config"), ("DATA", "2")],
        created: &[("/data/app.properties", "color=blue\nsize=3\n")],
        edit: ("mode: prod", "mode: staging"),
        applied: &[("/data/mode", "staging")],
        strategic: Some((
            r#"{"data":{"extra":"1"}}"#,
            &[("/data/extra", "1"), ("/data/mode", "staging")],
        )),
        ..BASE
    },
    Case {
        resource: "endpoints",
        name: "ext-db",
        kind_name: "endpoints",
        manifest: r#"
apiVersion: v1
kind: Endpoints
metadata:
  name: ext-db
  labels: {app: db, stage: created}
subsets:
- addresses:
  - ip: 10.1.2.3
  - ip: 10.1.2.4
  ports:
  - name: pg
    port: 5432
"#,
        columns: &["NAME", "ENDPOINTS", "AGE"],
        cells: &[("ENDPOINTS", "10.1.2.3:5432,10.1.2.5:5432")],
        created: &[("/subsets/0/ports/0/protocol", "TCP")],
        edit: ("ip: 10.1.2.4", "ip: 10.1.2.5"),
        applied: &[("/subsets/0/addresses/1/ip", "10.1.2.5")],
        ..BASE
    },
    Case {
        resource: "events",
        name: "web-0.scheduled",
        kind_name: "event",
        manifest: r#"
apiVersion: v1
kind: Event
metadata:
  name: web-0.scheduled
  labels: {stage: created}
involvedObject: {apiVersion: v1, kind: Pod, name: web-0, namespace: kinds}
reason: Scheduled
message: Successfully assigned kinds/web-0 to node-1
type: Normal
source: {component: default-scheduler}
firstTimestamp: "2024-01-01T00:00:00Z"
lastTimestamp: "2024-01-01T00:00:00Z"
count: 1
"#,
        columns: &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        wide: Some(&[
            "LAST SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "SUBOBJECT",
            "SOURCE",
            "MESSAGE",
            "FIRST SEEN",
            "COUNT",
            "NAME",
        ]),
        cells: &[
            ("TYPE", "Normal"),
            ("REASON", "Scheduled"),
            ("OBJECT", "pod/web-0"),
            ("SOURCE", "default-scheduler"),
            ("MESSAGE", "Successfully assigned kinds/web-0 to node-1"),
            ("COUNT", "2"),
            ("NAME", "web-0.scheduled"),
        ],
        created: &[("/involvedObject/name", "web-0")],
        edit: ("count: 1", "count: 2"),
        applied: &[("/count", "2")],
        ..BASE
    },
    Case {
        resource: "limitranges",
        name: "limits",
        kind_name: "limitrange",
        manifest: r#"
apiVersion: v1
kind: LimitRange
metadata:
  name: limits
  labels: {stage: created}
spec:
  limits:
  - type: Container
    default: {cpu: 500m}
    defaultRequest: {cpu: 100m}
    max: {cpu: "2", memory: 1Gi}
"#,
        columns: &["NAME", "CREATED AT"],
        cells: &[("NAME", "limits")],
        created: &[
            // SetDefaults_LimitRangeItem: a default limit from max, a default request from it.
            ("/spec/limits/0/default/memory", "1Gi"),
            ("/spec/limits/0/defaultRequest/memory", "1Gi"),
            ("/spec/limits/0/defaultRequest/cpu", "100m"),
        ],
        edit: ("default: {cpu: 500m}", "default: {cpu: 400m}"),
        applied: &[("/spec/limits/0/default/cpu", "400m")],
        ..BASE
    },
    Case {
        resource: "namespaces",
        name: "scratch",
        namespaced: false,
        kind_name: "namespace",
        manifest: r#"
apiVersion: v1
kind: Namespace
metadata:
  name: scratch
  labels: {team: a, stage: created}
"#,
        columns: &["NAME", "STATUS", "AGE"],
        cells: &[("NAME", "scratch"), ("STATUS", "Active")],
        created: &[
            ("/metadata/labels/kubernetes.io~1metadata.name", "scratch"),
            ("/spec/finalizers", r#"["kubernetes"]"#),
            ("/status/phase", "Active"),
        ],
        edit: ("team: a", "team: b"),
        applied: &[("/metadata/labels/team", "b")],
        delete: Delete::Terminating,
        ..BASE
    },
    Case {
        resource: "nodes",
        name: "node-1",
        namespaced: false,
        kind_name: "node",
        manifest: r#"
apiVersion: v1
kind: Node
metadata:
  name: node-1
  labels:
    kubernetes.io/hostname: node-1
    kubernetes.io/os: linux
    node-role.kubernetes.io/worker: ""
    stage: created
spec:
  podCIDR: 10.42.1.0/24
status:
  capacity: {cpu: "4", memory: 8Gi, pods: "110"}
  conditions:
  - type: Ready
    status: "True"
    reason: KubeletReady
    message: kubelet is posting ready status
    lastHeartbeatTime: "2024-01-01T00:00:00Z"
    lastTransitionTime: "2024-01-01T00:00:00Z"
  addresses:
  - {type: InternalIP, address: 192.168.1.10}
  - {type: Hostname, address: node-1}
  nodeInfo:
    kubeletVersion: v1.32.0
    kubeProxyVersion: v1.32.0
    osImage: Ubuntu 24.04 LTS
    kernelVersion: 6.8.0-45-generic
    containerRuntimeVersion: containerd://1.7.22
    operatingSystem: linux
    architecture: amd64
    machineID: 0f6c1b6e
    systemUUID: 0f6c1b6e
    bootID: 5d1c
"#,
        columns: &["NAME", "STATUS", "ROLES", "AGE", "VERSION"],
        wide: Some(&[
            "NAME",
            "STATUS",
            "ROLES",
            "AGE",
            "VERSION",
            "INTERNAL-IP",
            "EXTERNAL-IP",
            "OS-IMAGE",
            "KERNEL-VERSION",
            "CONTAINER-RUNTIME",
        ]),
        cells: &[
            ("STATUS", "Ready,SchedulingDisabled"),
            ("ROLES", "worker"),
            ("VERSION", "v1.32.0"),
            ("INTERNAL-IP", "192.168.1.10"),
            ("EXTERNAL-IP", "<none>"),
            ("OS-IMAGE", "Ubuntu 24.04 LTS"),
            ("KERNEL-VERSION", "6.8.0-45-generic"),
            ("CONTAINER-RUNTIME", "containerd://1.7.22"),
        ],
        created: &[
            // Nodes may set their status on create; allocatable defaults to capacity.
            ("/status/allocatable/memory", "8Gi"),
            ("/spec/podCIDRs", r#"["10.42.1.0/24"]"#),
        ],
        edit: (
            "podCIDR: 10.42.1.0/24",
            "podCIDR: 10.42.1.0/24\n  unschedulable: true",
        ),
        applied: &[("/spec/unschedulable", "true")],
        ..BASE
    },
    Case {
        resource: "persistentvolumeclaims",
        name: "data",
        kind_name: "persistentvolumeclaim",
        manifest: r#"
apiVersion: v1
kind: PersistentVolumeClaim
metadata:
  name: data
  labels: {app: db, stage: created}
spec:
  accessModes: [ReadWriteOnce]
  resources:
    requests: {storage: 1Gi}
  storageClassName: standard
"#,
        columns: &[
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "AGE",
        ],
        wide: Some(&[
            "NAME",
            "STATUS",
            "VOLUME",
            "CAPACITY",
            "ACCESS MODES",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "AGE",
            "VOLUMEMODE",
        ]),
        cells: &[
            ("STATUS", "Pending"),
            ("STORAGECLASS", "standard"),
            ("VOLUMEATTRIBUTESCLASS", "<unset>"),
            ("VOLUMEMODE", "Filesystem"),
        ],
        created: &[
            ("/spec/volumeMode", "Filesystem"),
            ("/status/phase", "Pending"),
            ("/spec/resources/requests/storage", "1Gi"),
        ],
        edit: ("app: db", "app: database"),
        applied: &[("/metadata/labels/app", "database")],
        ..BASE
    },
    Case {
        resource: "persistentvolumes",
        name: "pv-data",
        namespaced: false,
        kind_name: "persistentvolume",
        manifest: r#"
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-data
  labels: {stage: created}
spec:
  capacity: {storage: 5Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: standard
  hostPath: {path: /data/pv}
"#,
        columns: &[
            "NAME",
            "CAPACITY",
            "ACCESS MODES",
            "RECLAIM POLICY",
            "STATUS",
            "CLAIM",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "REASON",
            "AGE",
        ],
        wide: Some(&[
            "NAME",
            "CAPACITY",
            "ACCESS MODES",
            "RECLAIM POLICY",
            "STATUS",
            "CLAIM",
            "STORAGECLASS",
            "VOLUMEATTRIBUTESCLASS",
            "REASON",
            "AGE",
            "VOLUMEMODE",
        ]),
        cells: &[
            ("CAPACITY", "5Gi"),
            ("ACCESS MODES", "RWO"),
            ("RECLAIM POLICY", "Delete"),
            ("STATUS", "Pending"),
            ("STORAGECLASS", "standard"),
            ("VOLUMEMODE", "Filesystem"),
        ],
        created: &[
            ("/spec/volumeMode", "Filesystem"),
            ("/spec/hostPath/type", ""),
            ("/status/phase", "Pending"),
        ],
        edit: (
            "persistentVolumeReclaimPolicy: Retain",
            "persistentVolumeReclaimPolicy: Delete",
        ),
        applied: &[("/spec/persistentVolumeReclaimPolicy", "Delete")],
        extra: Some(|pv| {
            assert!(
                pv.pointer("/status/lastPhaseTransitionTime")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with('Z')),
                "a new PV records its phase transition: {pv}"
            );
        }),
        ..BASE
    },
    Case {
        resource: "pods",
        name: "web-0",
        kind_name: "pod",
        manifest: r#"
apiVersion: v1
kind: Pod
metadata:
  name: web-0
  labels: {app: web, stage: created}
spec:
  nodeName: node-1
  containers:
  - name: nginx
    image: nginx:1.27
    ports:
    - containerPort: 80
    resources:
      requests: {cpu: 100m, memory: 64Mi}
"#,
        columns: &["NAME", "READY", "STATUS", "RESTARTS", "AGE"],
        wide: Some(&[
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED NODE",
            "READINESS GATES",
        ]),
        cells: &[
            ("READY", "0/1"),
            ("STATUS", "Pending"),
            ("RESTARTS", "0"),
            ("IP", "<none>"),
            ("NODE", "node-1"),
            ("NOMINATED NODE", "<none>"),
        ],
        created: &[
            ("/spec/restartPolicy", "Always"),
            ("/spec/dnsPolicy", "ClusterFirst"),
            ("/spec/schedulerName", "default-scheduler"),
            ("/spec/terminationGracePeriodSeconds", "30"),
            ("/spec/enableServiceLinks", "true"),
            ("/spec/containers/0/imagePullPolicy", "IfNotPresent"),
            ("/spec/containers/0/ports/0/protocol", "TCP"),
            (
                "/spec/containers/0/terminationMessagePath",
                "/dev/termination-log",
            ),
            ("/status/phase", "Pending"),
            ("/status/qosClass", "Burstable"),
        ],
        edit: ("image: nginx:1.27", "image: nginx:1.28"),
        applied: &[("/spec/containers/0/image", "nginx:1.28")],
        strategic: Some((
            r#"{"spec":{"containers":[{"name":"nginx","image":"nginx:1.29"}]}}"#,
            &[
                ("/spec/containers/0/image", "nginx:1.29"),
                ("/spec/containers/0/ports/0/containerPort", "80"),
                ("/spec/containers/1", "<absent>"),
            ],
        )),
        delete: Delete::Graceful,
        ..BASE
    },
    Case {
        resource: "podtemplates",
        name: "web-template",
        kind_name: "podtemplate",
        manifest: r#"
apiVersion: v1
kind: PodTemplate
metadata:
  name: web-template
  labels: {stage: created}
template:
  metadata:
    labels: {app: web}
  spec:
    containers:
    - name: nginx
      image: nginx:1.27
"#,
        columns: &["NAME", "CONTAINERS", "IMAGES", "POD LABELS"],
        cells: &[
            ("CONTAINERS", "nginx"),
            ("IMAGES", "nginx:1.28"),
            ("POD LABELS", "app=web"),
        ],
        created: &[("/template/spec/restartPolicy", "Always")],
        edit: ("image: nginx:1.27", "image: nginx:1.28"),
        applied: &[
            ("/template/spec/containers/0/image", "nginx:1.28"),
            ("/metadata/generation", "2"),
        ],
        ..BASE
    },
    Case {
        resource: "replicationcontrollers",
        name: "web-rc",
        kind_name: "replicationcontroller",
        manifest: r#"
apiVersion: v1
kind: ReplicationController
metadata:
  name: web-rc
  labels: {stage: created}
spec:
  replicas: 2
  template:
    metadata:
      labels: {app: web-rc}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
"#,
        columns: &["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        wide: Some(&[
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ]),
        cells: &[
            ("DESIRED", "3"),
            ("CURRENT", "0"),
            ("READY", "0"),
            ("CONTAINERS", "nginx"),
            ("IMAGES", "nginx:1.27"),
        ],
        // SetDefaults_ReplicationController: the selector from the template's labels.
        created: &[
            ("/spec/selector/app", "web-rc"),
            ("/spec/template/spec/restartPolicy", "Always"),
        ],
        edit: ("replicas: 2", "replicas: 3"),
        applied: &[("/spec/replicas", "3"), ("/metadata/generation", "2")],
        ..BASE
    },
    Case {
        resource: "resourcequotas",
        name: "quota",
        kind_name: "resourcequota",
        manifest: r#"
apiVersion: v1
kind: ResourceQuota
metadata:
  name: quota
  labels: {stage: created}
spec:
  hard:
    pods: "10"
    requests.cpu: "4"
    limits.memory: 8Gi
"#,
        columns: &["NAME", "REQUEST", "LIMIT", "AGE"],
        cells: &[("NAME", "quota")],
        created: &[("/spec/hard/limits.memory", "8Gi")],
        edit: ("pods: \"10\"", "pods: \"20\""),
        applied: &[("/spec/hard/pods", "20")],
        ..BASE
    },
    Case {
        resource: "secrets",
        name: "db-creds",
        kind_name: "secret",
        manifest: r#"
apiVersion: v1
kind: Secret
metadata:
  name: db-creds
  labels: {stage: created}
type: Opaque
stringData:
  username: admin
data:
  password: czNjcjN0
"#,
        columns: &["NAME", "TYPE", "DATA", "AGE"],
        cells: &[("TYPE", "Opaque"), ("DATA", "2")],
        // stringData is write-only: merged into data (base64) and never stored.
        created: &[("/data/username", "YWRtaW4="), ("/stringData", "<absent>")],
        edit: ("password: czNjcjN0", "password: bmV3cGFzcw=="),
        applied: &[("/data/password", "bmV3cGFzcw==")],
        ..BASE
    },
    Case {
        resource: "serviceaccounts",
        name: "builder",
        kind_name: "serviceaccount",
        manifest: r#"
apiVersion: v1
kind: ServiceAccount
metadata:
  name: builder
  labels: {stage: created}
automountServiceAccountToken: false
"#,
        columns: &["NAME", "SECRETS", "AGE"],
        cells: &[("SECRETS", "0")],
        edit: (
            "automountServiceAccountToken: false",
            "automountServiceAccountToken: true",
        ),
        applied: &[("/automountServiceAccountToken", "true")],
        ..BASE
    },
    Case {
        resource: "services",
        name: "web",
        kind_name: "service",
        manifest: r#"
apiVersion: v1
kind: Service
metadata:
  name: web
  labels: {app: web, stage: created}
spec:
  selector: {app: web}
  ports:
  - name: http
    port: 80
    targetPort: 8080
"#,
        columns: &[
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE",
        ],
        wide: Some(&[
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE",
            "SELECTOR",
        ]),
        cells: &[
            ("TYPE", "ClusterIP"),
            ("EXTERNAL-IP", "<none>"),
            ("PORT(S)", "80/TCP,443/TCP"),
            ("SELECTOR", "app=web"),
        ],
        created: &[
            ("/spec/type", "ClusterIP"),
            ("/spec/sessionAffinity", "None"),
            ("/spec/ipFamilies", r#"["IPv4"]"#),
            ("/spec/ipFamilyPolicy", "SingleStack"),
            ("/spec/internalTrafficPolicy", "Cluster"),
            ("/spec/ports/0/protocol", "TCP"),
        ],
        edit: (
            "    targetPort: 8080\n",
            "    targetPort: 8080\n  - name: https\n    port: 443\n",
        ),
        applied: &[
            ("/spec/ports/1/port", "443"),
            ("/spec/ports/1/targetPort", "443"),
        ],
        strategic: Some((
            r#"{"spec":{"ports":[{"port":80,"targetPort":9090}]}}"#,
            &[
                ("/spec/ports/0/name", "http"),
                ("/spec/ports/0/targetPort", "9090"),
                ("/spec/ports/1/name", "https"),
            ],
        )),
        extra: Some(|svc| {
            let ip = svc["spec"]["clusterIP"].as_str().unwrap_or("");
            assert!(ip.starts_with("10.43.") && ip != "10.43.0.1", "{svc}");
            assert_eq!(svc["spec"]["clusterIPs"], serde_json::json!([ip]), "{svc}");
        }),
        ..BASE
    },
    // apps/v1
    Case {
        resource: "controllerrevisions.apps",
        name: "node-agent-1",
        kind_name: "controllerrevision.apps",
        manifest: r#"
apiVersion: apps/v1
kind: ControllerRevision
metadata:
  name: node-agent-1
  labels: {app: node-agent, stage: created}
revision: 1
data:
  spec:
    template:
      spec:
        containers:
        - name: agent
          image: busybox:1.36
"#,
        columns: &["NAME", "CONTROLLER", "REVISION", "AGE"],
        cells: &[("CONTROLLER", "<none>"), ("REVISION", "2")],
        created: &[(
            "/data/spec/template/spec/containers/0/image",
            "busybox:1.36",
        )],
        edit: ("revision: 1", "revision: 2"),
        applied: &[("/revision", "2")],
        ..BASE
    },
    Case {
        resource: "daemonsets.apps",
        name: "node-agent",
        kind_name: "daemonset.apps",
        manifest: r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: node-agent
  labels: {stage: created}
spec:
  selector:
    matchLabels: {app: node-agent}
  template:
    metadata:
      labels: {app: node-agent}
    spec:
      nodeSelector: {kubernetes.io/os: linux}
      containers:
      - name: agent
        image: busybox:1.36
        command: [sleep, infinity]
"#,
        columns: &[
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE SELECTOR",
            "AGE",
        ],
        wide: Some(&[
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE SELECTOR",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ]),
        cells: &[
            ("DESIRED", "0"),
            ("NODE SELECTOR", "kubernetes.io/os=linux"),
            ("CONTAINERS", "agent"),
            ("IMAGES", "busybox:1.37"),
            ("SELECTOR", "app=node-agent"),
        ],
        created: &[
            ("/spec/updateStrategy/type", "RollingUpdate"),
            ("/spec/updateStrategy/rollingUpdate/maxUnavailable", "1"),
            ("/spec/updateStrategy/rollingUpdate/maxSurge", "0"),
            ("/spec/revisionHistoryLimit", "10"),
            (
                "/spec/template/spec/containers/0/imagePullPolicy",
                "IfNotPresent",
            ),
        ],
        edit: ("image: busybox:1.36", "image: busybox:1.37"),
        applied: &[
            ("/spec/template/spec/containers/0/image", "busybox:1.37"),
            ("/metadata/generation", "2"),
        ],
        ..BASE
    },
    Case {
        resource: "deployments.apps",
        name: "web",
        kind_name: "deployment.apps",
        manifest: r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web, stage: created}
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
"#,
        columns: &["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        wide: Some(&[
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ]),
        cells: &[
            ("READY", "0/4"),
            ("UP-TO-DATE", "0"),
            ("AVAILABLE", "0"),
            ("CONTAINERS", "nginx"),
            ("IMAGES", "nginx:1.27"),
            ("SELECTOR", "app=web"),
        ],
        created: &[
            ("/spec/strategy/type", "RollingUpdate"),
            ("/spec/strategy/rollingUpdate/maxSurge", "25%"),
            ("/spec/strategy/rollingUpdate/maxUnavailable", "25%"),
            ("/spec/revisionHistoryLimit", "10"),
            ("/spec/progressDeadlineSeconds", "600"),
            ("/spec/template/spec/restartPolicy", "Always"),
            ("/spec/template/spec/containers/0/ports/0/protocol", "TCP"),
        ],
        edit: ("replicas: 3", "replicas: 4"),
        applied: &[("/spec/replicas", "4"), ("/metadata/generation", "2")],
        strategic: Some((
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","image":"nginx:1.29"}]}}}}"#,
            &[
                ("/spec/template/spec/containers/0/image", "nginx:1.29"),
                (
                    "/spec/template/spec/containers/0/ports/0/containerPort",
                    "80",
                ),
                ("/spec/template/spec/containers/1", "<absent>"),
                ("/metadata/generation", "3"),
            ],
        )),
        ..BASE
    },
    Case {
        resource: "replicasets.apps",
        name: "web-rs",
        kind_name: "replicaset.apps",
        manifest: r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: web-rs
  labels: {stage: created}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web-rs}
  template:
    metadata:
      labels: {app: web-rs}
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
"#,
        columns: &["NAME", "DESIRED", "CURRENT", "READY", "AGE"],
        wide: Some(&[
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ]),
        cells: &[
            ("DESIRED", "1"),
            ("CURRENT", "0"),
            ("SELECTOR", "app=web-rs"),
        ],
        created: &[("/spec/template/spec/dnsPolicy", "ClusterFirst")],
        edit: ("replicas: 2", "replicas: 1"),
        applied: &[("/spec/replicas", "1")],
        ..BASE
    },
    Case {
        resource: "statefulsets.apps",
        name: "db",
        kind_name: "statefulset.apps",
        manifest: r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  labels: {stage: created}
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: postgres
        image: postgres:16
"#,
        columns: &["NAME", "READY", "AGE"],
        wide: Some(&["NAME", "READY", "AGE", "CONTAINERS", "IMAGES"]),
        cells: &[
            ("READY", "0/2"),
            ("CONTAINERS", "postgres"),
            ("IMAGES", "postgres:16"),
        ],
        created: &[
            ("/spec/podManagementPolicy", "OrderedReady"),
            ("/spec/updateStrategy/type", "RollingUpdate"),
            ("/spec/updateStrategy/rollingUpdate/partition", "0"),
            (
                "/spec/persistentVolumeClaimRetentionPolicy/whenDeleted",
                "Retain",
            ),
            ("/spec/revisionHistoryLimit", "10"),
        ],
        edit: ("replicas: 1", "replicas: 2"),
        applied: &[("/spec/replicas", "2")],
        ..BASE
    },
    // autoscaling: v2 (preferred) and v1
    Case {
        resource: "horizontalpodautoscalers.autoscaling",
        name: "web",
        kind_name: "horizontalpodautoscaler.autoscaling",
        manifest: r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
  labels: {stage: created}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 5
  metrics:
  - type: Resource
    resource:
      name: cpu
      target: {type: Utilization, averageUtilization: 70}
"#,
        columns: &[
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE",
        ],
        cells: &[
            ("REFERENCE", "Deployment/web"),
            ("TARGETS", "cpu: <unknown>/70%"),
            ("MINPODS", "2"),
            ("MAXPODS", "6"),
            ("REPLICAS", "0"),
        ],
        created: &[
            ("/apiVersion", "autoscaling/v2"),
            ("/spec/metrics/0/resource/target/averageUtilization", "70"),
        ],
        edit: ("maxReplicas: 5", "maxReplicas: 6"),
        applied: &[("/spec/maxReplicas", "6")],
        ..BASE
    },
    Case {
        resource: "horizontalpodautoscalers.v1.autoscaling",
        name: "web-v1",
        kind_name: "horizontalpodautoscaler.autoscaling",
        manifest: r#"
apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata:
  name: web-v1
  labels: {stage: created}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 4
  targetCPUUtilizationPercentage: 60
"#,
        columns: &[
            "NAME",
            "REFERENCE",
            "TARGETS",
            "MINPODS",
            "MAXPODS",
            "REPLICAS",
            "AGE",
        ],
        cells: &[
            ("REFERENCE", "Deployment/web"),
            ("TARGETS", "cpu: <unknown>/65%"),
            ("MINPODS", "1"),
            ("MAXPODS", "4"),
        ],
        created: &[
            ("/apiVersion", "autoscaling/v1"),
            ("/spec/minReplicas", "1"),
        ],
        edit: (
            "targetCPUUtilizationPercentage: 60",
            "targetCPUUtilizationPercentage: 65",
        ),
        applied: &[("/spec/targetCPUUtilizationPercentage", "65")],
        ..BASE
    },
    // batch/v1
    Case {
        resource: "cronjobs.batch",
        name: "nightly",
        kind_name: "cronjob.batch",
        manifest: r#"
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  labels: {stage: created}
spec:
  schedule: "0 2 * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: OnFailure
          containers:
          - name: backup
            image: busybox:1.36
            command: [sh, -c, echo backup]
"#,
        columns: &[
            "NAME",
            "SCHEDULE",
            "TIMEZONE",
            "SUSPEND",
            "ACTIVE",
            "LAST SCHEDULE",
            "AGE",
        ],
        wide: Some(&[
            "NAME",
            "SCHEDULE",
            "TIMEZONE",
            "SUSPEND",
            "ACTIVE",
            "LAST SCHEDULE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ]),
        cells: &[
            ("SCHEDULE", "30 3 * * *"),
            ("TIMEZONE", "<none>"),
            ("SUSPEND", "False"),
            ("ACTIVE", "0"),
            ("LAST SCHEDULE", "<none>"),
            ("CONTAINERS", "backup"),
            ("IMAGES", "busybox:1.36"),
            ("SELECTOR", "<none>"),
        ],
        created: &[
            ("/spec/concurrencyPolicy", "Allow"),
            ("/spec/suspend", "false"),
            ("/spec/successfulJobsHistoryLimit", "3"),
            ("/spec/failedJobsHistoryLimit", "1"),
            (
                "/spec/jobTemplate/spec/template/spec/terminationGracePeriodSeconds",
                "30",
            ),
        ],
        edit: ("schedule: \"0 2 * * *\"", "schedule: \"30 3 * * *\""),
        applied: &[("/spec/schedule", "30 3 * * *")],
        strategic: Some((
            r#"{"spec":{"suspend":true}}"#,
            &[("/spec/suspend", "true"), ("/metadata/generation", "3")],
        )),
        ..BASE
    },
    Case {
        resource: "jobs.batch",
        name: "migrate",
        kind_name: "job.batch",
        manifest: r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  labels: {stage: created}
spec:
  activeDeadlineSeconds: 600
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: busybox:1.36
        command: [sh, -c, echo migrate]
"#,
        columns: &["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"],
        wide: Some(&[
            "NAME",
            "STATUS",
            "COMPLETIONS",
            "DURATION",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR",
        ]),
        cells: &[
            ("STATUS", "Running"),
            ("COMPLETIONS", "0/1"),
            ("CONTAINERS", "migrate"),
        ],
        created: &[
            ("/spec/backoffLimit", "6"),
            ("/spec/completions", "1"),
            ("/spec/parallelism", "1"),
            ("/spec/completionMode", "NonIndexed"),
            ("/spec/suspend", "false"),
            ("/spec/manualSelector", "false"),
            ("/spec/podReplacementPolicy", "TerminatingOrFailed"),
            ("/spec/template/metadata/labels/job-name", "migrate"),
            (
                "/spec/template/metadata/labels/batch.kubernetes.io~1job-name",
                "migrate",
            ),
        ],
        edit: ("activeDeadlineSeconds: 600", "activeDeadlineSeconds: 900"),
        applied: &[("/spec/activeDeadlineSeconds", "900")],
        extra: Some(|job| {
            let uid = job["metadata"]["uid"].as_str().unwrap();
            assert_eq!(
                job.pointer("/spec/selector/matchLabels/batch.kubernetes.io~1controller-uid"),
                Some(&Value::String(uid.into())),
                "{job}"
            );
        }),
        ..BASE
    },
    Case {
        resource: "certificatesigningrequests.certificates.k8s.io",
        name: "alice",
        namespaced: false,
        kind_name: "certificatesigningrequest.certificates.k8s.io",
        manifest: r#"
apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata:
  name: alice
  labels: {stage: created}
spec:
  request: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KTUlIYU1JR0FBZ0VBTUI0eERqQU1CZ05WQkFNTUJXRnNhV05sTVF3d0NnWURWUVFLREFOa1pYWXdXVEFUQmdjcQpoa2pPUFFJQkJnZ3Foa2pPUFFNQkJ3TkNBQVRRN2dmd3RhQUZYbWk1WnQ1dGNZSUhtMEM0a203bnFQb2hTZG5ZCllKcFBuS2RlSElUaXU0cmt6eGc3SVU3NTUrWTVzL0VONDJIRlJSRjJRWWRuV2JnRG9BQXdDZ1lJS29aSXpqMEUKQXdJRFNRQXdSZ0loQUl2RDZBWGJyOVd0US9MbjBxWmpJSHdNL3dUUFdDSDdwTThjUHY5MSt2WW5BaUVBcmRneAp2ckFIRjNFUEJkVU4zczhZRnd4M1A0WlZ4VDUxRzZ2WUEvRXFJMnM9Ci0tLS0tRU5EIENFUlRJRklDQVRFIFJFUVVFU1QtLS0tLQo=
  signerName: kubernetes.io/kube-apiserver-client
  usages: [client auth]
  expirationSeconds: 86400
"#,
        columns: &[
            "NAME",
            "AGE",
            "SIGNERNAME",
            "REQUESTOR",
            "REQUESTEDDURATION",
            "CONDITION",
        ],
        cells: &[
            ("SIGNERNAME", "kubernetes.io/kube-apiserver-client"),
            ("REQUESTEDDURATION", "24h"),
            ("CONDITION", "Pending"),
        ],
        created: &[("/spec/usages", r#"["client auth"]"#)],
        extra: Some(|csr| {
            // The requestor is whoever created it, taken from the request, not the body.
            let user = csr["spec"]["username"].as_str().unwrap_or("");
            assert!(!user.is_empty(), "{csr}");
            let groups = csr["spec"]["groups"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            assert!(groups.iter().any(|g| g == "system:authenticated"), "{csr}");
        }),
        ..BASE
    },
    Case {
        resource: "leases.coordination.k8s.io",
        name: "controller-leader",
        kind_name: "lease.coordination.k8s.io",
        manifest: r#"
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: controller-leader
  labels: {stage: created}
spec:
  holderIdentity: controller-1
  leaseDurationSeconds: 15
"#,
        columns: &["NAME", "HOLDER", "AGE"],
        cells: &[("HOLDER", "controller-2")],
        created: &[("/spec/leaseDurationSeconds", "15")],
        edit: (
            "holderIdentity: controller-1",
            "holderIdentity: controller-2",
        ),
        applied: &[("/spec/holderIdentity", "controller-2")],
        ..BASE
    },
    Case {
        resource: "endpointslices.discovery.k8s.io",
        name: "web-abc12",
        kind_name: "endpointslice.discovery.k8s.io",
        manifest: r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-abc12
  labels: {kubernetes.io/service-name: web, stage: created}
addressType: IPv4
ports:
- name: http
  port: 8080
  protocol: TCP
endpoints:
- addresses: [10.42.0.5]
  conditions: {ready: true}
  nodeName: node-1
"#,
        columns: &["NAME", "ADDRESSTYPE", "PORTS", "ENDPOINTS", "AGE"],
        cells: &[
            ("ADDRESSTYPE", "IPv4"),
            ("PORTS", "8080"),
            ("ENDPOINTS", "10.42.0.6"),
        ],
        created: &[("/endpoints/0/nodeName", "node-1")],
        edit: ("addresses: [10.42.0.5]", "addresses: [10.42.0.6]"),
        applied: &[
            ("/endpoints/0/addresses/0", "10.42.0.6"),
            ("/metadata/generation", "2"),
        ],
        ..BASE
    },
    Case {
        resource: "events.events.k8s.io",
        name: "web-0.pulling",
        kind_name: "event.events.k8s.io",
        manifest: r#"
apiVersion: events.k8s.io/v1
kind: Event
metadata:
  name: web-0.pulling
  labels: {stage: created}
eventTime: "2024-01-01T00:00:01.000000Z"
reportingController: kubelet
reportingInstance: node-1
action: Pulling
reason: Pulling
regarding: {apiVersion: v1, kind: Pod, name: web-0, namespace: kinds}
note: Pulling image nginx:1.27
type: Normal
"#,
        columns: &["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
        wide: Some(&[
            "LAST SEEN",
            "TYPE",
            "REASON",
            "OBJECT",
            "SUBOBJECT",
            "SOURCE",
            "MESSAGE",
            "FIRST SEEN",
            "COUNT",
            "NAME",
        ]),
        cells: &[
            ("TYPE", "Normal"),
            ("REASON", "Pulling"),
            ("OBJECT", "pod/web-0"),
            ("MESSAGE", "Pulling image nginx:1.27"),
            ("NAME", "web-0.pulling"),
        ],
        created: &[
            ("/regarding/name", "web-0"),
            ("/note", "Pulling image nginx:1.27"),
        ],
        ..BASE
    },
    // networking.k8s.io/v1
    Case {
        resource: "ingressclasses.networking.k8s.io",
        name: "nginx",
        namespaced: false,
        kind_name: "ingressclass.networking.k8s.io",
        manifest: r#"
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata:
  name: nginx
  labels: {stage: created}
spec:
  controller: k8s.io/ingress-nginx
"#,
        columns: &["NAME", "CONTROLLER", "PARAMETERS", "AGE"],
        cells: &[
            ("CONTROLLER", "k8s.io/ingress-nginx"),
            ("PARAMETERS", "<none>"),
        ],
        created: &[("/metadata/generation", "1")],
        ..BASE
    },
    Case {
        resource: "ingresses.networking.k8s.io",
        name: "web",
        kind_name: "ingress.networking.k8s.io",
        manifest: r#"
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: web
  labels: {stage: created}
spec:
  ingressClassName: nginx
  rules:
  - host: web.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: web
            port: {number: 80}
"#,
        columns: &["NAME", "CLASS", "HOSTS", "ADDRESS", "PORTS", "AGE"],
        cells: &[
            ("CLASS", "nginx"),
            ("HOSTS", "www.example.com"),
            ("ADDRESS", ""),
            ("PORTS", "80"),
        ],
        created: &[("/spec/rules/0/http/paths/0/pathType", "Prefix")],
        edit: ("host: web.example.com", "host: www.example.com"),
        applied: &[
            ("/spec/rules/0/host", "www.example.com"),
            ("/metadata/generation", "2"),
        ],
        ..BASE
    },
    Case {
        resource: "networkpolicies.networking.k8s.io",
        name: "allow-frontend",
        kind_name: "networkpolicy.networking.k8s.io",
        manifest: r#"
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: allow-frontend
  labels: {stage: created}
spec:
  podSelector:
    matchLabels: {app: web}
  ingress:
  - from:
    - podSelector:
        matchLabels: {app: frontend}
    ports:
    - port: 80
"#,
        columns: &["NAME", "POD-SELECTOR", "AGE"],
        cells: &[("POD-SELECTOR", "app=web")],
        created: &[
            ("/spec/policyTypes", r#"["Ingress"]"#),
            ("/spec/ingress/0/ports/0/protocol", "TCP"),
        ],
        edit: ("{app: frontend}", "{app: gateway}"),
        applied: &[(
            "/spec/ingress/0/from/0/podSelector/matchLabels/app",
            "gateway",
        )],
        ..BASE
    },
    // policy/v1
    Case {
        resource: "poddisruptionbudgets.policy",
        name: "web",
        kind_name: "poddisruptionbudget.policy",
        manifest: r#"
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
  labels: {stage: created}
spec:
  minAvailable: 1
  selector:
    matchLabels: {app: web}
"#,
        columns: &[
            "NAME",
            "MIN AVAILABLE",
            "MAX UNAVAILABLE",
            "ALLOWED DISRUPTIONS",
            "AGE",
        ],
        cells: &[
            ("MIN AVAILABLE", "2"),
            ("MAX UNAVAILABLE", "N/A"),
            ("ALLOWED DISRUPTIONS", "0"),
        ],
        edit: ("minAvailable: 1", "minAvailable: 2"),
        applied: &[("/spec/minAvailable", "2"), ("/metadata/generation", "2")],
        ..BASE
    },
    // rbac.authorization.k8s.io/v1
    Case {
        resource: "clusterrolebindings.rbac.authorization.k8s.io",
        name: "read-pods-global",
        namespaced: false,
        kind_name: "clusterrolebinding.rbac.authorization.k8s.io",
        manifest: r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: read-pods-global
  labels: {stage: created}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: pod-reader
subjects:
- {kind: User, name: alice, apiGroup: rbac.authorization.k8s.io}
- {kind: Group, name: devs, apiGroup: rbac.authorization.k8s.io}
"#,
        columns: &["NAME", "ROLE", "AGE"],
        wide: Some(&["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]),
        cells: &[
            ("ROLE", "ClusterRole/pod-reader"),
            ("USERS", "bob"),
            ("GROUPS", "devs"),
            ("SERVICEACCOUNTS", ""),
        ],
        edit: ("name: alice", "name: bob"),
        applied: &[("/subjects/0/name", "bob")],
        ..BASE
    },
    Case {
        resource: "clusterroles.rbac.authorization.k8s.io",
        name: "pod-reader",
        namespaced: false,
        kind_name: "clusterrole.rbac.authorization.k8s.io",
        manifest: r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: pod-reader
  labels: {stage: created}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch]
"#,
        columns: &["NAME", "CREATED AT"],
        cells: &[("NAME", "pod-reader")],
        edit: ("verbs: [get, list, watch]", "verbs: [get, list]"),
        applied: &[("/rules/0/verbs", r#"["get","list"]"#)],
        ..BASE
    },
    Case {
        resource: "rolebindings.rbac.authorization.k8s.io",
        name: "edit-config",
        kind_name: "rolebinding.rbac.authorization.k8s.io",
        manifest: r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: edit-config
  labels: {stage: created}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: config-editor
subjects:
- {kind: ServiceAccount, name: builder, namespace: kinds}
"#,
        columns: &["NAME", "ROLE", "AGE"],
        wide: Some(&["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]),
        cells: &[
            ("ROLE", "Role/config-editor"),
            ("USERS", "carol"),
            ("SERVICEACCOUNTS", "kinds/builder"),
        ],
        edit: (
            "namespace: kinds}\n",
            "namespace: kinds}\n- {kind: User, name: carol, apiGroup: rbac.authorization.k8s.io}\n",
        ),
        applied: &[("/subjects/1/name", "carol")],
        ..BASE
    },
    Case {
        resource: "roles.rbac.authorization.k8s.io",
        name: "config-editor",
        kind_name: "role.rbac.authorization.k8s.io",
        manifest: r#"
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: config-editor
  labels: {stage: created}
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [get, update, patch]
"#,
        columns: &["NAME", "CREATED AT"],
        cells: &[("NAME", "config-editor")],
        edit: (
            "resources: [configmaps]",
            "resources: [configmaps, secrets]",
        ),
        applied: &[("/rules/0/resources", r#"["configmaps","secrets"]"#)],
        ..BASE
    },
    // admissionregistration.k8s.io/v1 (rules that match no request of this test)
    Case {
        resource: "mutatingwebhookconfigurations.admissionregistration.k8s.io",
        name: "widget-defaults",
        namespaced: false,
        kind_name: "mutatingwebhookconfiguration.admissionregistration.k8s.io",
        manifest: r#"
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: widget-defaults
  labels: {stage: created}
webhooks:
- name: defaults.widgets.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig:
    url: https://127.0.0.1:1/mutate
  rules:
  - operations: ["CREATE"]
    apiGroups: ["example.com"]
    apiVersions: ["v1"]
    resources: ["widgets"]
"#,
        columns: &["NAME", "WEBHOOKS", "AGE"],
        cells: &[("WEBHOOKS", "1")],
        created: &[
            ("/webhooks/0/timeoutSeconds", "10"),
            ("/webhooks/0/matchPolicy", "Equivalent"),
            ("/webhooks/0/reinvocationPolicy", "Never"),
            ("/webhooks/0/rules/0/scope", "*"),
        ],
        edit: ("failurePolicy: Ignore", "failurePolicy: Fail"),
        applied: &[("/webhooks/0/failurePolicy", "Fail")],
        ..BASE
    },
    Case {
        resource: "validatingadmissionpolicies.admissionregistration.k8s.io",
        name: "replica-limit",
        namespaced: false,
        kind_name: "validatingadmissionpolicy.admissionregistration.k8s.io",
        manifest: r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: replica-limit
  labels: {stage: created}
spec:
  matchConstraints:
    resourceRules:
    - apiGroups: ["example.com"]
      apiVersions: ["v1"]
      operations: ["CREATE"]
      resources: ["widgets"]
  validations:
  - expression: "object.spec.replicas <= 5"
"#,
        columns: &["NAME", "VALIDATIONS", "PARAMKIND", "AGE"],
        cells: &[("VALIDATIONS", "1"), ("PARAMKIND", "<unset>")],
        created: &[("/spec/failurePolicy", "Fail")],
        edit: ("<= 5", "<= 7"),
        applied: &[(
            "/spec/validations/0/expression",
            "object.spec.replicas <= 7",
        )],
        ..BASE
    },
    Case {
        resource: "validatingadmissionpolicybindings.admissionregistration.k8s.io",
        name: "replica-limit-binding",
        namespaced: false,
        kind_name: "validatingadmissionpolicybinding.admissionregistration.k8s.io",
        manifest: r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: replica-limit-binding
  labels: {stage: created}
spec:
  policyName: replica-limit
  validationActions: [Deny]
"#,
        columns: &["NAME", "POLICYNAME", "PARAMREF", "AGE"],
        cells: &[("POLICYNAME", "replica-limit"), ("PARAMREF", "<unset>")],
        created: &[("/spec/validationActions/0", "Deny")],
        edit: (
            "validationActions: [Deny]",
            "validationActions: [Deny, Audit]",
        ),
        applied: &[("/spec/validationActions/1", "Audit")],
        ..BASE
    },
    Case {
        resource: "validatingwebhookconfigurations.admissionregistration.k8s.io",
        name: "widget-checks",
        namespaced: false,
        kind_name: "validatingwebhookconfiguration.admissionregistration.k8s.io",
        manifest: r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: widget-checks
  labels: {stage: created}
webhooks:
- name: checks.widgets.example.com
  admissionReviewVersions: ["v1"]
  sideEffects: None
  failurePolicy: Ignore
  clientConfig:
    service: {namespace: default, name: widget-checks}
  rules:
  - operations: ["CREATE", "UPDATE"]
    apiGroups: ["example.com"]
    apiVersions: ["v1"]
    resources: ["widgets"]
"#,
        columns: &["NAME", "WEBHOOKS", "AGE"],
        cells: &[("WEBHOOKS", "1")],
        created: &[
            ("/webhooks/0/clientConfig/service/port", "443"),
            ("/webhooks/0/timeoutSeconds", "10"),
        ],
        edit: ("sideEffects: None", "sideEffects: NoneOnDryRun"),
        applied: &[("/webhooks/0/sideEffects", "NoneOnDryRun")],
        ..BASE
    },
    // apiextensions.k8s.io/v1
    Case {
        resource: "customresourcedefinitions.apiextensions.k8s.io",
        name: "gadgets.kinds.example.com",
        namespaced: false,
        kind_name: "customresourcedefinition.apiextensions.k8s.io",
        manifest: r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.kinds.example.com
  labels: {stage: created}
spec:
  group: kinds.example.com
  scope: Namespaced
  names: {plural: gadgets, kind: Gadget, shortNames: [gd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
"#,
        columns: &["NAME", "CREATED AT"],
        created: &[
            ("/spec/conversion/strategy", "None"),
            ("/spec/names/singular", "gadget"),
            ("/spec/names/listKind", "GadgetList"),
            ("/status/storedVersions/0", "v1"),
        ],
        edit: ("shortNames: [gd]", "shortNames: [gd, gdg]"),
        applied: &[("/spec/names/shortNames/1", "gdg")],
        ..BASE
    },
    // scheduling.k8s.io/v1
    Case {
        resource: "priorityclasses.scheduling.k8s.io",
        name: "high-priority",
        namespaced: false,
        kind_name: "priorityclass.scheduling.k8s.io",
        manifest: r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high-priority
  labels: {stage: created}
value: 1000000
description: For critical workloads
"#,
        columns: &["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"],
        cells: &[
            ("VALUE", "1000000"),
            ("GLOBAL-DEFAULT", "false"),
            ("PREEMPTIONPOLICY", "PreemptLowerPriority"),
        ],
        created: &[("/preemptionPolicy", "PreemptLowerPriority")],
        edit: (
            "description: For critical workloads",
            "description: For the most critical workloads",
        ),
        applied: &[("/description", "For the most critical workloads")],
        ..BASE
    },
    // storage.k8s.io/v1
    Case {
        resource: "csidrivers.storage.k8s.io",
        name: "csi.example.com",
        namespaced: false,
        kind_name: "csidriver.storage.k8s.io",
        manifest: r#"
apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata:
  name: csi.example.com
  labels: {stage: created}
spec:
  attachRequired: true
  podInfoOnMount: false
  volumeLifecycleModes: [Persistent]
"#,
        columns: &[
            "NAME",
            "ATTACHREQUIRED",
            "PODINFOONMOUNT",
            "STORAGECAPACITY",
            "TOKENREQUESTS",
            "REQUIRESREPUBLISH",
            "MODES",
            "AGE",
        ],
        cells: &[
            ("ATTACHREQUIRED", "true"),
            ("PODINFOONMOUNT", "false"),
            ("STORAGECAPACITY", "false"),
            ("TOKENREQUESTS", "<unset>"),
            ("REQUIRESREPUBLISH", "false"),
            ("MODES", "Persistent"),
        ],
        created: &[
            ("/spec/fsGroupPolicy", "ReadWriteOnceWithFSType"),
            ("/spec/storageCapacity", "false"),
            ("/spec/requiresRepublish", "false"),
        ],
        ..BASE
    },
    Case {
        resource: "csinodes.storage.k8s.io",
        name: "node-1",
        namespaced: false,
        kind_name: "csinode.storage.k8s.io",
        manifest: r#"
apiVersion: storage.k8s.io/v1
kind: CSINode
metadata:
  name: node-1
  labels: {stage: created}
spec:
  drivers:
  - name: csi.example.com
    nodeID: node-1
    topologyKeys: [topology.example.com/zone]
    allocatable: {count: 10}
"#,
        columns: &["NAME", "DRIVERS", "AGE"],
        cells: &[("DRIVERS", "1")],
        created: &[("/spec/drivers/0/allocatable/count", "10")],
        ..BASE
    },
    Case {
        resource: "storageclasses.storage.k8s.io",
        name: "standard",
        namespaced: false,
        kind_name: "storageclass.storage.k8s.io",
        manifest: r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: standard
  labels: {stage: created}
provisioner: csi.example.com
parameters: {type: ssd}
allowVolumeExpansion: true
"#,
        columns: &[
            "NAME",
            "PROVISIONER",
            "RECLAIMPOLICY",
            "VOLUMEBINDINGMODE",
            "ALLOWVOLUMEEXPANSION",
            "AGE",
        ],
        cells: &[
            ("PROVISIONER", "csi.example.com"),
            ("RECLAIMPOLICY", "Delete"),
            ("VOLUMEBINDINGMODE", "Immediate"),
            ("ALLOWVOLUMEEXPANSION", "false"),
        ],
        created: &[
            ("/reclaimPolicy", "Delete"),
            ("/volumeBindingMode", "Immediate"),
            ("/metadata/generation", "<absent>"),
        ],
        edit: ("allowVolumeExpansion: true", "allowVolumeExpansion: false"),
        applied: &[("/allowVolumeExpansion", "false")],
        ..BASE
    },
    Case {
        resource: "volumeattachments.storage.k8s.io",
        name: "va-pv-data",
        namespaced: false,
        kind_name: "volumeattachment.storage.k8s.io",
        manifest: r#"
apiVersion: storage.k8s.io/v1
kind: VolumeAttachment
metadata:
  name: va-pv-data
  labels: {stage: created}
spec:
  attacher: csi.example.com
  nodeName: node-1
  source:
    persistentVolumeName: pv-data
"#,
        columns: &["NAME", "ATTACHER", "PV", "NODE", "ATTACHED", "AGE"],
        cells: &[
            ("ATTACHER", "csi.example.com"),
            ("PV", "pv-data"),
            ("NODE", "node-1"),
            ("ATTACHED", "false"),
        ],
        created: &[("/spec/source/persistentVolumeName", "pv-data")],
        ..BASE
    },
];

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

/// `value` at `pointer` is `want`: a string compares as is, anything else with `want` read
/// as JSON; `<absent>` means no value there.
fn check(obj: &Value, pointer: &str, want: &str, what: &str) {
    let got = obj.pointer(pointer);
    let ok = match (got, want) {
        (None, "<absent>") => true,
        (None, _) => false,
        (Some(Value::String(s)), _) => s == want,
        (Some(v), _) => serde_json::from_str::<Value>(want).is_ok_and(|w| &w == v),
    };
    assert!(ok, "{what}: {pointer} is {got:?}, want {want}\n{obj:#}");
}

/// A kubectl table, cells cut at the header's column starts (kubectl's tabwriter aligns
/// every cell of a column with its header, and cells may be empty).
struct Table {
    header: Vec<String>,
    starts: Vec<usize>,
    rows: Vec<String>,
}

impl Table {
    fn parse(out: &str) -> Table {
        let mut lines = out.lines();
        let head = lines.next().unwrap_or("");
        let b = head.as_bytes();
        let (mut header, mut starts) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < b.len() {
            if b[i] == b' ' {
                i += 1;
                continue;
            }
            let start = i;
            while i < b.len() && !(b[i] == b' ' && (i + 1 == b.len() || b[i + 1] == b' ')) {
                i += 1;
            }
            header.push(head[start..i].to_string());
            starts.push(start);
        }
        Table {
            header,
            starts,
            rows: lines.map(str::to_string).collect(),
        }
    }

    fn cell(&self, row: usize, column: &str) -> String {
        let i = self
            .header
            .iter()
            .position(|h| h == column)
            .unwrap_or_else(|| panic!("no column {column} in {:?}", self.header));
        let line = &self.rows[row];
        let start = self.starts[i].min(line.len());
        let end = self
            .starts
            .get(i + 1)
            .copied()
            .unwrap_or(line.len())
            .min(line.len());
        line[start..end].trim().to_string()
    }
}

impl Case {
    fn ns_args(&self) -> Vec<&'static str> {
        if self.namespaced {
            vec!["-n", NS]
        } else {
            vec![]
        }
    }

    /// `kubectl <verb> <resource> <name> [-n kinds] <extra...>`.
    fn args<'a>(&'a self, verb: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec![verb, self.resource, self.name];
        a.extend(self.ns_args());
        a.extend_from_slice(extra);
        a
    }

    fn edited(&self) -> String {
        let (from, to) = self.edit;
        assert!(
            self.manifest.contains(from) && self.manifest.contains("stage: created"),
            "{}: the edit must apply",
            self.resource
        );
        self.manifest
            .replace(from, to)
            .replace("stage: created", "stage: applied")
    }

    fn get_json(&self, s: &Server) -> Value {
        json(&s.ok(&self.args("get", &["-o", "json"])))
    }
}

/// Everything one kind must do after it was created and applied twice.
fn exercise(s: &Server, c: &Case) {
    let what = c.resource;

    // The table, plain and wide.
    let t = Table::parse(&s.ok(&c.args("get", &[])));
    assert_eq!(t.header, c.columns, "{what}: columns");
    assert_eq!(t.rows.len(), 1, "{what}: one row");
    if t.header.iter().any(|h| h == "NAME") {
        assert_eq!(t.cell(0, "NAME"), c.name, "{what}");
    }
    let w = Table::parse(&s.ok(&c.args("get", &["-o", "wide"])));
    assert_eq!(
        w.header,
        c.wide.unwrap_or(c.columns),
        "{what}: wide columns"
    );
    for (col, want) in c.cells {
        assert_eq!(w.cell(0, col), *want, "{what}: cell {col}\n{:?}", w.rows);
    }

    // YAML, JSON, jsonpath, name.
    let yaml = s.ok(&c.args("get", &["-o", "yaml"]));
    assert!(
        yaml.contains(&format!("\n  name: {}\n", c.name)) && yaml.contains("\nkind: "),
        "{what}: yaml\n{yaml}"
    );
    let obj = c.get_json(s);
    let kind = obj["kind"].as_str().unwrap_or("");
    assert!(yaml.contains(&format!("kind: {kind}\n")), "{what}: {yaml}");
    assert_eq!(obj["metadata"]["name"], c.name, "{what}");
    if c.namespaced {
        assert_eq!(obj["metadata"]["namespace"], NS, "{what}");
    } else {
        assert!(obj["metadata"].get("namespace").is_none(), "{what}: {obj}");
    }
    assert_eq!(obj["metadata"]["uid"].as_str().map(str::len), Some(36));
    assert!(obj["metadata"]["creationTimestamp"].is_string(), "{what}");
    check(&obj, "/metadata/labels/stage", "applied", what);
    assert!(
        obj.pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration")
            .is_some_and(Value::is_string),
        "{what}: apply records its configuration"
    );
    for (p, want) in c.created.iter().chain(c.applied) {
        check(&obj, p, want, what);
    }
    if let Some(f) = c.extra {
        f(&obj);
    }
    assert_eq!(
        s.ok(&c.args("get", &["-o", "jsonpath={.kind}/{.metadata.name}"])),
        format!("{kind}/{}", c.name),
        "{what}"
    );
    assert_eq!(
        s.ok(&c.args("get", &["-o", "name"])).trim(),
        format!("{}/{}", c.kind_name, c.name),
        "{what}"
    );

    // Describe (autoscalers through autoscaling/v2, whatever version they were written in).
    let d = s.ok(&c.args("describe", &[]));
    assert!(d.contains(c.name), "{what}: describe\n{d}");

    // Label, annotate, three patch types.
    let out = s.ok(&c.args("label", &["labelled=yes"]));
    assert_eq!(out.trim(), format!("{}/{} labeled", c.kind_name, c.name));
    let out = s.ok(&c.args("annotate", &["note=hello"]));
    assert_eq!(out.trim(), format!("{}/{} annotated", c.kind_name, c.name));
    let out = s.ok(&c.args(
        "patch",
        &[
            "--type=merge",
            "-p",
            r#"{"metadata":{"labels":{"merged":"yes"}}}"#,
        ],
    ));
    assert_eq!(out.trim(), format!("{}/{} patched", c.kind_name, c.name));
    s.ok(&c.args(
        "patch",
        &[
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/metadata/annotations/json-patched","value":"yes"},{"op":"test","path":"/metadata/labels/merged","value":"yes"}]"#,
        ],
    ));
    let (patch, checks) = c.strategic.unwrap_or((
        r#"{"metadata":{"annotations":{"strategic":"yes"}}}"#,
        &[("/metadata/annotations/strategic", "yes")],
    ));
    s.ok(&c.args("patch", &["--type=strategic", "-p", patch]));
    let obj = c.get_json(s);
    for (p, want) in [
        ("/metadata/labels/labelled", "yes"),
        ("/metadata/labels/merged", "yes"),
        ("/metadata/labels/stage", "applied"),
        ("/metadata/annotations/note", "hello"),
        ("/metadata/annotations/json-patched", "yes"),
    ]
    .iter()
    .chain(checks)
    {
        check(&obj, p, want, what);
    }

    // Replace what was read, changed.
    let mut fetched = obj.clone();
    fetched["metadata"]["labels"]["replaced"] = Value::String("yes".into());
    let out = s.ok_stdin(
        &[&["replace", "-f", "-"][..], &c.ns_args()].concat(),
        &fetched.to_string(),
    );
    assert_eq!(out.trim(), format!("{}/{} replaced", c.kind_name, c.name));
    let replaced = c.get_json(s);
    check(&replaced, "/metadata/labels/replaced", "yes", what);
    assert_ne!(
        replaced["metadata"]["resourceVersion"], obj["metadata"]["resourceVersion"],
        "{what}"
    );
    assert_eq!(
        replaced["metadata"]["uid"], obj["metadata"]["uid"],
        "{what}"
    );

    // Delete.
    let deleted = format!("{} \"{}\" deleted", c.kind_name, c.name);
    match c.delete {
        Delete::Gone => {
            let out = s.ok(&c.args("delete", &[]));
            assert_eq!(out.trim(), deleted, "{what}");
            let err = s.fails(&c.args("get", &[]));
            assert!(err.contains("NotFound"), "{what}: {err}");
        }
        Delete::Graceful => {
            let out = s.ok(&c.args("delete", &["--wait=false"]));
            assert_eq!(out.trim(), deleted, "{what}");
            let obj = c.get_json(s);
            assert!(obj["metadata"]["deletionTimestamp"].is_string(), "{obj}");
            check(&obj, "/metadata/deletionGracePeriodSeconds", "30", what);
            let t = Table::parse(&s.ok(&c.args("get", &[])));
            assert_eq!(t.cell(0, "STATUS"), "Terminating", "{what}");
            s.ok(&c.args("delete", &["--force", "--grace-period=0"]));
            let err = s.fails(&c.args("get", &[]));
            assert!(err.contains("NotFound"), "{what}: {err}");
        }
        Delete::Terminating => {
            let out = s.ok(&c.args("delete", &["--wait=false"]));
            assert_eq!(out.trim(), deleted, "{what}");
            let obj = c.get_json(s);
            assert!(obj["metadata"]["deletionTimestamp"].is_string(), "{obj}");
            check(&obj, "/status/phase", "Terminating", what);
            let t = Table::parse(&s.ok(&c.args("get", &[])));
            assert_eq!(t.cell(0, "STATUS"), "Terminating", "{what}");
            let out = s.kubectl_stdin(
                &["create", "-f", "-", "-n", c.name],
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: late}\n",
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                !out.status.success() && err.contains("because it is being terminated"),
                "{what}: {err}"
            );
            // Deleting again changes nothing while spec.finalizers is not empty.
            s.ok(&c.args("delete", &["--wait=false"]));
            let again = c.get_json(s);
            assert_eq!(
                again["metadata"]["deletionTimestamp"],
                obj["metadata"]["deletionTimestamp"]
            );
            // What the namespace controller does once the namespace is empty (and the usual
            // way to unstick one by hand): finalize; with no finalizer left it is gone.
            let mut finalized = again.clone();
            finalized["spec"]["finalizers"] = serde_json::json!([]);
            let path = format!("/api/v1/namespaces/{}/finalize", c.name);
            let out = json(&s.ok_stdin(
                &["replace", "--raw", &path, "-f", "-"],
                &finalized.to_string(),
            ));
            check(&out, "/spec/finalizers", "<absent>", what);
            check(&out, "/status/phase", "Terminating", what);
            let err = s.fails(&c.args("get", &[]));
            assert!(err.contains("NotFound"), "{what}: {err}");
        }
    }
}

/// All manifests as one multi-document stream.
fn stream(docs: impl Iterator<Item = String>) -> String {
    docs.map(|d| format!("---{d}")).collect()
}

#[test]
fn every_kind_through_kubectl() {
    let started = Instant::now();
    let s = Server::start();

    // The cases cover every resource the server lists (bindings and componentstatuses are
    // special), and autoscaling/v1 besides the preferred v2.
    let listed = s.ok(&["api-resources", "-o", "name"]);
    for r in listed.lines() {
        // Reviews are only ever created; the access tests ask them.
        if matches!(r, "bindings" | "componentstatuses")
            || r.ends_with("reviews.authorization.k8s.io")
            || r.ends_with("reviews.authentication.k8s.io")
            // Read-only metrics (kubectl top), tested with a real node in kubelet_top.
            || r.ends_with(".metrics.k8s.io")
        {
            continue;
        }
        assert!(CASES.iter().any(|c| c.resource == r), "no case for {r}");
    }
    assert!(s
        .ok(&["api-versions"])
        .lines()
        .any(|l| l == "autoscaling/v1"));

    s.ok_stdin(
        &["create", "-f", "-"],
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: kinds\n",
    );

    // Create all, apply the same, apply with a change.
    let created = s.ok_stdin(
        &["create", "-n", NS, "-f", "-"],
        &stream(CASES.iter().map(|c| c.manifest.to_string())),
    );
    for c in CASES {
        let line = format!("{}/{} created", c.kind_name, c.name);
        assert!(created.lines().any(|l| l == line), "{line}\n{created}");
    }
    let unchanged = s.ok_stdin(
        &["apply", "-n", NS, "-f", "-"],
        &stream(CASES.iter().map(|c| c.manifest.to_string())),
    );
    assert_eq!(unchanged.lines().count(), CASES.len(), "{unchanged}");
    let applied = s.ok_stdin(
        &["apply", "-n", NS, "-f", "-"],
        &stream(CASES.iter().map(Case::edited)),
    );
    for c in CASES {
        let line = format!("{}/{} configured", c.kind_name, c.name);
        assert!(applied.lines().any(|l| l == line), "{line}\n{applied}");
    }

    // `get all` lists the "all" category: workloads, services, autoscalers; no config.
    let all = s.ok(&["get", "all", "-n", NS]);
    for want in [
        "pod/web-0",
        "service/web",
        "replicationcontroller/web-rc",
        "daemonset.apps/node-agent",
        "deployment.apps/web",
        "replicaset.apps/web-rs",
        "statefulset.apps/db",
        "horizontalpodautoscaler.autoscaling/web",
        "horizontalpodautoscaler.autoscaling/web-v1",
        "cronjob.batch/nightly",
        "job.batch/migrate",
    ] {
        assert!(
            all.lines()
                .any(|l| l.split_whitespace().next() == Some(want)),
            "get all lacks {want}:\n{all}"
        );
    }
    assert!(
        !all.contains("configmap/") && !all.contains("secret/"),
        "{all}"
    );
    assert!(all.lines().next().unwrap().starts_with("NAME "), "{all}");

    // The kinds are independent of each other: a few at a time.
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..3 {
            scope.spawn(|| {
                while let Some(c) = CASES.get(next.fetch_add(1, Ordering::Relaxed)) {
                    exercise(&s, c);
                }
            });
        }
    });
    eprintln!("kinds: {:?} for {} kinds", started.elapsed(), CASES.len());

    selectors(&s);
    watch_configmaps(&s);
    conflicts(&s);
    orphaning_delete(&s);
    eprintln!("kinds: {:?} in all", started.elapsed());
}

/// The names `kubectl get <what> -o name <args>` prints, sorted.
fn names(s: &Server, what: &str, args: &[&str]) -> Vec<String> {
    let out = s.ok(&[&["get", what, "-n", NS, "-o", "name"][..], args].concat());
    let mut v: Vec<String> = out
        .lines()
        .map(|l| l.rsplit('/').next().unwrap().to_string())
        .collect();
    v.sort();
    v
}

fn selectors(s: &Server) {
    let cm = |name: &str, labels: &str| {
        format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{group: sel{labels}}}\n")
    };
    s.ok_stdin(
        &["create", "-n", NS, "-f", "-"],
        &[
            cm("sel-a", ", env: prod, tier: web"),
            cm("sel-b", ", env: dev, tier: web"),
            cm("sel-c", ", env: staging"),
            cm("sel-d", ", tier: db"),
        ]
        .concat(),
    );
    for (selector, want) in [
        ("env=prod", &["sel-a"][..]),
        ("env==prod", &["sel-a"]),
        ("env!=prod", &["sel-b", "sel-c", "sel-d"]),
        ("env in (prod,dev)", &["sel-a", "sel-b"]),
        ("env notin (prod,dev)", &["sel-c", "sel-d"]),
        ("tier", &["sel-a", "sel-b", "sel-d"]),
        ("!tier", &["sel-c"]),
        ("tier=web,env!=dev", &["sel-a"]),
        ("env in (prod),tier notin (db)", &["sel-a"]),
    ] {
        let got = names(s, "configmaps", &["-l", &format!("group=sel,{selector}")]);
        assert_eq!(got, want, "-l {selector}");
    }
    assert_eq!(
        names(
            s,
            "configmaps",
            &["-l", "group=sel", "--field-selector", "metadata.name=sel-a"]
        ),
        ["sel-a"]
    );
    assert_eq!(
        names(
            s,
            "configmaps",
            &[
                "-l",
                "group=sel",
                "--field-selector",
                "metadata.name!=sel-a"
            ]
        ),
        ["sel-b", "sel-c", "sel-d"]
    );
    let across = s.ok(&[
        "get",
        "configmaps",
        "-A",
        "-l",
        "group=sel",
        "--field-selector",
        "metadata.namespace=kinds",
        "-o",
        "name",
    ]);
    assert_eq!(across.lines().count(), 4, "{across}");
    let err = s.fails(&[
        "get",
        "configmaps",
        "-n",
        NS,
        "--field-selector",
        "data.x=y",
    ]);
    assert!(
        err.contains(
            r#""data.x" is not a known field selector: only "metadata.name", "metadata.namespace""#
        ),
        "{err}"
    );
    let err = s.fails(&["get", "pods", "-n", NS, "--field-selector", "spec.image=x"]);
    assert!(
        err.contains("field label not supported: spec.image"),
        "{err}"
    );

    // Pods by node and phase; the phase set through the status subresource.
    s.ok_stdin(
        &["create", "-n", NS, "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bound, labels: {group: fs}}\nspec:\n  nodeName: node-1\n  containers: [{name: c, image: busybox:1.36}]\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: unscheduled, labels: {group: fs}}\nspec:\n  containers: [{name: c, image: busybox:1.36}]\n",
    );
    s.ok(&[
        "patch",
        "pod",
        "bound",
        "-n",
        NS,
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Running"}}"#,
    ]);
    for (selector, want) in [
        ("spec.nodeName=node-1", &["bound"][..]),
        ("spec.nodeName=", &["unscheduled"]),
        ("spec.nodeName!=node-1", &["unscheduled"]),
        ("status.phase=Running", &["bound"]),
        ("status.phase=Pending", &["unscheduled"]),
        ("status.phase!=Failed,spec.nodeName=node-1", &["bound"]),
        ("status.phase=Succeeded", &[]),
    ] {
        assert_eq!(
            names(s, "pods", &["--field-selector", selector]),
            want,
            "--field-selector {selector}"
        );
    }
    let t = Table::parse(&s.ok(&["get", "pods", "-n", NS, "-o", "wide", "-l", "group=fs"]));
    assert_eq!(t.rows.len(), 2);
    assert_eq!(t.cell(0, "NAME"), "bound");
    assert_eq!(t.cell(0, "STATUS"), "Running");
    assert_eq!(t.cell(1, "NODE"), "<none>");
    let out = s.ok(&[
        "get",
        "pods",
        "-n",
        NS,
        "--field-selector",
        "status.phase=Failed",
    ]);
    assert_eq!(out, "", "no rows, no header");

    // Events by the object they are about.
    let ev = |name: &str, object: &str, reason: &str, kind: &str| {
        format!("---\napiVersion: v1\nkind: Event\nmetadata: {{name: {name}}}\ninvolvedObject: {{kind: Pod, name: {object}, namespace: kinds}}\nreason: {reason}\nmessage: m\ntype: {kind}\nsource: {{component: kubelet}}\nfirstTimestamp: \"2024-01-01T00:00:00Z\"\nlastTimestamp: \"2024-01-01T00:00:00Z\"\ncount: 1\n")
    };
    s.ok_stdin(
        &["create", "-n", NS, "-f", "-"],
        &[
            ev("bound.1", "bound", "Started", "Normal"),
            ev("bound.2", "bound", "BackOff", "Warning"),
            ev("other.1", "unscheduled", "FailedScheduling", "Warning"),
        ]
        .concat(),
    );
    for (selector, want) in [
        ("involvedObject.name=bound", &["bound.1", "bound.2"][..]),
        ("involvedObject.name=unscheduled", &["other.1"]),
        (
            "involvedObject.kind=Pod,type=Warning",
            &["bound.2", "other.1"],
        ),
        ("reason=Started", &["bound.1"]),
    ] {
        assert_eq!(
            names(s, "events", &["--field-selector", selector]),
            want,
            "--field-selector {selector}"
        );
    }
}

/// A kubectl that keeps running (a watch), its stdout lines sent to a channel.
struct Background {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Background {
    fn start(s: &Server, args: &[&str]) -> Background {
        let kubeconfig = s.kubeconfig();
        let mut child = Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .env("HOME", kubeconfig.parent().unwrap())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kubectl runs");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Background {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Wait for a line for which `f` holds.
    fn wait_for(&mut self, what: &str, f: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let hit = f(&line);
                    self.seen.push(line);
                    if hit {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!("no {what} in:\n{}", self.seen.join("\n"));
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn watch_configmaps(s: &Server) {
    let cm = |name: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{group: watch}}\ndata: {{a: \"1\"}}\n")
    };
    s.ok_stdin(&["create", "-n", NS, "-f", "-"], &cm("watch-0"));
    let mut w = Background::start(
        s,
        &[
            "get",
            "configmaps",
            "-n",
            NS,
            "-l",
            "group=watch",
            "-w",
            "--output-watch-events",
        ],
    );
    // The initial list, then the watch from its resourceVersion: nothing is missed.
    w.wait_for("ADDED watch-0", |l| {
        l.starts_with("ADDED") && l.contains("watch-0")
    });
    assert!(
        w.seen[0].starts_with("EVENT") && w.seen[0].contains("DATA"),
        "{:?}",
        w.seen
    );
    s.ok_stdin(&["create", "-n", NS, "-f", "-"], &cm("watched"));
    w.wait_for("ADDED watched", |l| {
        l.starts_with("ADDED") && l.split_whitespace().nth(1) == Some("watched")
    });
    s.ok(&[
        "patch",
        "configmap",
        "watched",
        "-n",
        NS,
        "--type=merge",
        "-p",
        r#"{"data":{"b":"2"}}"#,
    ]);
    w.wait_for("MODIFIED watched with 2 keys", |l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 3 && f[0] == "MODIFIED" && f[1] == "watched" && f[2] == "2"
    });
    s.ok(&["delete", "configmap", "watched", "-n", NS]);
    w.wait_for("DELETED watched", |l| {
        l.starts_with("DELETED") && l.split_whitespace().nth(1) == Some("watched")
    });
    drop(w);

    // Plain `-w` prints rows as they change.
    let mut w = Background::start(s, &["get", "configmap", "watch-0", "-n", NS, "-w"]);
    w.wait_for("the row", |l| l.starts_with("watch-0 "));
    s.ok(&["label", "configmap", "watch-0", "-n", NS, "seen=yes"]);
    w.wait_for("a second row", |_| true);
    assert!(
        w.seen.last().unwrap().starts_with("watch-0 "),
        "{:?}",
        w.seen
    );
}

fn conflicts(s: &Server) {
    for (resource, plural, name, manifest) in [
        (
            "configmap",
            "configmaps",
            "stale-cm",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: stale-cm}\ndata: {k: v}\n",
        ),
        (
            "deployment.apps",
            "deployments.apps",
            "stale-deploy",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: stale-deploy}\nspec:\n  selector: {matchLabels: {app: s}}\n  template:\n    metadata: {labels: {app: s}}\n    spec: {containers: [{name: c, image: nginx:1.27}]}\n",
        ),
    ] {
        s.ok_stdin(&["create", "-n", NS, "-f", "-"], manifest);
        let stale = json(&s.ok(&["get", resource, name, "-n", NS, "-o", "json"]));
        s.ok(&["label", resource, name, "-n", NS, "moved=on"]);
        let mut edited = stale.clone();
        edited["metadata"]["labels"] = serde_json::json!({"stale": "yes"});
        let out = s.kubectl_stdin(&["replace", "-n", NS, "-f", "-"], &edited.to_string());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a stale replace must fail");
        assert!(
            err.contains("Error from server (Conflict)")
                && err.contains(&format!(
                    "Operation cannot be fulfilled on {plural} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
                )),
            "{err}"
        );
        // Without a resourceVersion the replace is unconditional.
        edited["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        s.ok_stdin(&["replace", "-n", NS, "-f", "-"], &edited.to_string());
        let now = json(&s.ok(&["get", resource, name, "-n", NS, "-o", "json"]));
        assert_eq!(now["metadata"]["labels"], serde_json::json!({"stale": "yes"}));
    }
}

fn orphaning_delete(s: &Server) {
    s.ok_stdin(
        &["create", "-n", NS, "-f", "-"],
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: orphaned}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: o}}\n  template:\n    metadata: {labels: {app: o}}\n    spec: {containers: [{name: c, image: nginx:1.27}]}\n",
    );
    let out = s.ok(&[
        "delete",
        "deployment",
        "orphaned",
        "-n",
        NS,
        "--cascade=orphan",
        "--wait=false",
    ]);
    assert_eq!(out.trim(), "deployment.apps \"orphaned\" deleted");
    // No garbage collector yet: the orphan finalizer keeps the object, marked for deletion.
    let d = json(&s.ok(&["get", "deployment", "orphaned", "-n", NS, "-o", "json"]));
    assert_eq!(
        d["metadata"]["finalizers"],
        serde_json::json!(["orphan"]),
        "{d}"
    );
    assert!(d["metadata"]["deletionTimestamp"].is_string(), "{d}");
    assert_eq!(d["metadata"]["deletionGracePeriodSeconds"], 0, "{d}");
    assert_eq!(
        names(
            s,
            "deployments",
            &["--field-selector", "metadata.name=orphaned"]
        ),
        ["orphaned"]
    );
    // Deleting again changes nothing.
    s.ok(&["delete", "deployment", "orphaned", "-n", NS, "--wait=false"]);
    let again = json(&s.ok(&["get", "deployment", "orphaned", "-n", NS, "-o", "json"]));
    assert_eq!(
        again["metadata"]["finalizers"],
        serde_json::json!(["orphan"])
    );
    assert_eq!(
        again["metadata"]["deletionTimestamp"],
        d["metadata"]["deletionTimestamp"]
    );
}
