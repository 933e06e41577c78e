//! Workloads, autoscalers, cluster and networking kinds.

use serde_json::json;

use super::*;

#[test]
fn jobs_and_cron_jobs() {
    let done = json!({
        "metadata": {"name": "pi", "creationTimestamp": ago(3 * 3600)},
        "spec": {"completions": 1, "parallelism": 1, "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "u1"}},
                 "template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}}},
        "status": {"succeeded": 1, "startTime": ago(3 * 3600 - 5), "completionTime": ago(3 * 3600 - 50),
                   "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}
    });
    assert_eq!(
        names("batch", "Job"),
        [
            "Name",
            "Status",
            "Completions",
            "Duration",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(
        cells("batch", "Job", &done),
        json!([
            "pi",
            "Complete",
            "1/1",
            "45s",
            "3h",
            "pi",
            "perl:5.34",
            "batch.kubernetes.io/controller-uid=u1"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let running = json!({"metadata": {"name": "work", "creationTimestamp": ago(400)},
        "spec": {"parallelism": 3}, "status": {"succeeded": 1, "startTime": ago(390)}});
    assert_eq!(
        cells("batch", "Job", &running)[1..4],
        json!(["Running", "1/1 of 3", "6m30s"]).as_array().unwrap()[..]
    );
    let failed = json!({"metadata": {"name": "f"}, "spec": {"completions": 5},
        "status": {"conditions": [{"type": "Failed", "status": "True"}]}});
    assert_eq!(
        cells("batch", "Job", &failed)[1..4],
        json!(["Failed", "0/5", ""]).as_array().unwrap()[..]
    );

    let cj = json!({
        "metadata": {"name": "nightly", "creationTimestamp": ago(10 * DAY)},
        "spec": {"schedule": "0 3 * * *", "suspend": false,
                 "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox"}]}}}}},
        "status": {"active": [{"name": "nightly-1"}], "lastScheduleTime": ago(9 * 3600)}
    });
    assert_eq!(
        cells("batch", "CronJob", &cj),
        json!([
            "nightly",
            "0 3 * * *",
            "<none>",
            "False",
            1,
            "9h",
            "10d",
            "b",
            "busybox",
            "<none>"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
}

#[test]
fn workloads() {
    let deploy = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(5 * DAY)},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"},
                                                      {"name": "log", "image": "fluent-bit:3"}]}}},
        "status": {"replicas": 3, "updatedReplicas": 3, "readyReplicas": 2, "availableReplicas": 2}
    });
    assert_eq!(
        names("apps", "Deployment"),
        [
            "Name",
            "Ready",
            "Up-to-date",
            "Available",
            "Age",
            "Containers",
            "Images",
            "Selector"
        ]
    );
    assert_eq!(
        cells("apps", "Deployment", &deploy),
        json!([
            "web",
            "2/3",
            3,
            2,
            "5d",
            "web,log",
            "nginx:1.27,fluent-bit:3",
            "app=web"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let rs = json!({"metadata": {"name": "web-7d9f", "creationTimestamp": ago(90)},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "7d9f"}}},
        "status": {"replicas": 3, "readyReplicas": 1}});
    assert_eq!(
        cells("apps", "ReplicaSet", &rs)[..5],
        json!(["web-7d9f", 3, 3, 1, "90s"]).as_array().unwrap()[..]
    );
    assert_eq!(
        cells("apps", "ReplicaSet", &rs)[7],
        json!("app=web,pod-template-hash=7d9f")
    );
    let sts = json!({"metadata": {"name": "db"}, "spec": {"replicas": 3}, "status": {"readyReplicas": 3}});
    assert_eq!(cells("apps", "StatefulSet", &sts)[1], json!("3/3"));
    let ds = json!({"metadata": {"name": "kube-proxy", "creationTimestamp": ago(DAY)},
        "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}},
                 "template": {"spec": {"nodeSelector": {"kubernetes.io/os": "linux"},
                                       "containers": [{"name": "kube-proxy", "image": "registry.k8s.io/kube-proxy:v1.32.0"}]}}},
        "status": {"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 3,
                   "updatedNumberScheduled": 3, "numberAvailable": 3}});
    assert_eq!(
        cells("apps", "DaemonSet", &ds),
        json!([
            "kube-proxy",
            3,
            3,
            3,
            3,
            3,
            "kubernetes.io/os=linux",
            "24h",
            "kube-proxy",
            "registry.k8s.io/kube-proxy:v1.32.0",
            "k8s-app=kube-proxy"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let rev = json!({"metadata": {"name": "db-5c4d", "ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "controller": true}]}, "revision": 2});
    assert_eq!(
        cells("apps", "ControllerRevision", &rev)[..3],
        json!(["db-5c4d", "statefulset.apps/db", 2])
            .as_array()
            .unwrap()[..]
    );
}

#[test]
fn autoscalers() {
    let v2 = json!({
        "metadata": {"name": "web", "creationTimestamp": ago(600)},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web", "apiVersion": "apps/v1"},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}},
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}}]},
        "status": {"currentReplicas": 3, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 45, "averageValue": "90m"}}}]}
    });
    assert_eq!(
        cells("autoscaling", "HorizontalPodAutoscaler", &v2),
        json!([
            "web",
            "Deployment/web",
            "cpu: 45%/80%, memory: <unknown>/500Mi + 1 more...",
            "2",
            10,
            3,
            "10m"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let v1 = json!({"metadata": {"name": "php"}, "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "php"},
        "maxReplicas": 5, "targetCPUUtilizationPercentage": 50}, "status": {"currentReplicas": 1}});
    assert_eq!(
        cells("autoscaling", "HorizontalPodAutoscaler", &v1)[2..5],
        json!(["cpu: <unknown>/50%", "<unset>", 5])
            .as_array()
            .unwrap()[..]
    );
}

#[test]
fn cluster_kinds() {
    let csr = json!({"metadata": {"name": "csr-abc", "creationTimestamp": ago(30)},
        "spec": {"signerName": "kubernetes.io/kube-apiserver-client-kubelet", "username": "system:node:w1",
                 "expirationSeconds": 86400},
        "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"}});
    assert_eq!(
        cells("certificates.k8s.io", "CertificateSigningRequest", &csr),
        json!([
            "csr-abc",
            "30s",
            "kubernetes.io/kube-apiserver-client-kubelet",
            "system:node:w1",
            "24h",
            "Approved,Issued"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let rb = json!({"metadata": {"name": "devs"}, "roleRef": {"kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "devs"},
                     {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"}, {"kind": "User", "name": "bob"}]});
    assert_eq!(
        cells("rbac.authorization.k8s.io", "RoleBinding", &rb),
        json!([
            "devs",
            "ClusterRole/edit",
            "<unknown>",
            "alice, bob",
            "devs",
            "tools/ci"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let pdb = json!({"metadata": {"name": "web"}, "spec": {"minAvailable": "50%"}, "status": {"disruptionsAllowed": 1}});
    assert_eq!(
        cells("policy", "PodDisruptionBudget", &pdb)[..4],
        json!(["web", "50%", "N/A", 1]).as_array().unwrap()[..]
    );
    let pc = json!({"metadata": {"name": "system-cluster-critical"}, "value": 2000000000, "preemptionPolicy": "PreemptLowerPriority"});
    assert_eq!(
        cells("scheduling.k8s.io", "PriorityClass", &pc),
        json!([
            "system-cluster-critical",
            2000000000,
            false,
            "<unknown>",
            "PreemptLowerPriority"
        ])
        .as_array()
        .unwrap()
        .clone()
    );
    let lease =
        json!({"metadata": {"name": "kube-scheduler"}, "spec": {"holderIdentity": "cp-1_1234"}});
    assert_eq!(
        cells("coordination.k8s.io", "Lease", &lease)[1],
        json!("cp-1_1234")
    );
    let cs = json!({"metadata": {"name": "etcd-0"}, "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]});
    assert_eq!(
        cells("", "ComponentStatus", &cs),
        json!(["etcd-0", "Healthy", "ok", ""])
            .as_array()
            .unwrap()
            .clone()
    );
}

#[test]
fn networking_kinds() {
    let ing = json!({"metadata": {"name": "shop"}, "spec": {"ingressClassName": "nginx",
        "rules": [{"host": "a.example.com"}, {}, {"host": "b.example.com"}, {"host": "c.example.com"}, {"host": "d.example.com"}],
        "tls": [{"hosts": ["a.example.com"]}]},
        "status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}, {"ip": "10.0.0.10"}]}}});
    assert_eq!(
        cells("networking.k8s.io", "Ingress", &ing)[..5],
        json!([
            "shop",
            "nginx",
            "a.example.com,b.example.com,c.example.com + 2 more...",
            "10.0.0.10,10.0.0.9",
            "80, 443"
        ])
        .as_array()
        .unwrap()[..]
    );
    let bare = json!({"metadata": {"name": "x"}, "spec": {"defaultBackend": {}}});
    assert_eq!(
        cells("networking.k8s.io", "Ingress", &bare)[1..5],
        json!(["<none>", "*", "", "80"]).as_array().unwrap()[..]
    );
    let ep = json!({"metadata": {"name": "web"}, "subsets": [{"addresses": [{"ip": "10.1.0.1"}, {"ip": "10.1.0.2"}],
        "ports": [{"port": 8080}, {"port": 8443}]}]});
    assert_eq!(
        cells("", "Endpoints", &ep)[1],
        json!("10.1.0.1:8080,10.1.0.2:8080,10.1.0.1:8443 + 1 more...")
    );
    assert_eq!(
        cells("", "Endpoints", &json!({"metadata": {"name": "e"}}))[1],
        json!("<none>")
    );
    let slice = json!({"metadata": {"name": "web-abcde"}, "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080}, {"name": "x"}],
        "endpoints": [{"addresses": ["10.1.0.1"]}, {"addresses": ["10.1.0.2"]}]});
    assert_eq!(
        cells("discovery.k8s.io", "EndpointSlice", &slice)[..4],
        json!(["web-abcde", "IPv4", "8080,x", "10.1.0.1,10.1.0.2"])
            .as_array()
            .unwrap()[..]
    );
    let np = json!({"metadata": {"name": "deny"}, "spec": {"podSelector": {}}});
    assert_eq!(
        cells("networking.k8s.io", "NetworkPolicy", &np)[1],
        json!("<none>")
    );
}

#[test]
fn admission_configuration_kinds() {
    let g = "admissionregistration.k8s.io";
    for kind in [
        "MutatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ] {
        assert_eq!(names(g, kind), ["Name", "Webhooks", "Age"]);
        let obj = json!({"metadata": {"name": "hooks", "creationTimestamp": ago(2 * DAY)},
            "webhooks": [{"name": "a.example.com"}, {"name": "b.example.com"}]});
        assert_eq!(
            cells(g, kind, &obj),
            vec![json!("hooks"), json!(2), json!("2d")]
        );
    }
    assert_eq!(
        names(g, "ValidatingAdmissionPolicy"),
        ["Name", "Validations", "ParamKind", "Age"]
    );
    let policy = json!({"metadata": {"name": "replicas", "creationTimestamp": ago(90)},
        "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, "validations": [{"expression": "true"}]}});
    assert_eq!(
        cells(g, "ValidatingAdmissionPolicy", &policy),
        vec![
            json!("replicas"),
            json!(1),
            json!("v1/ConfigMap"),
            json!("90s")
        ]
    );
    let unset = json!({"metadata": {"name": "p"}, "spec": {}});
    assert_eq!(
        cells(g, "ValidatingAdmissionPolicy", &unset)[1..3],
        [json!(0), json!("<unset>")]
    );
    assert_eq!(
        names(g, "ValidatingAdmissionPolicyBinding"),
        ["Name", "PolicyName", "ParamRef", "Age"]
    );
    let binding = |param: serde_json::Value| json!({"metadata": {"name": "b"}, "spec": {"policyName": "replicas", "paramRef": param}});
    assert_eq!(
        cells(
            g,
            "ValidatingAdmissionPolicyBinding",
            &binding(json!({"name": "limits", "namespace": "default"}))
        )[1..3],
        [json!("replicas"), json!("default/limits")]
    );
    assert_eq!(
        cells(
            g,
            "ValidatingAdmissionPolicyBinding",
            &binding(json!({"name": "limits"}))
        )[2],
        json!("*/limits")
    );
    assert_eq!(
        cells(g, "ValidatingAdmissionPolicyBinding", &binding(json!({"selector": {"matchLabels": {"env": "prod"}}})))[2],
        json!("&LabelSelector{MatchLabels:map[string]string{env: prod,},MatchExpressions:[]LabelSelectorRequirement{},}")
    );
    assert_eq!(
        cells(
            g,
            "ValidatingAdmissionPolicyBinding",
            &json!({"metadata": {"name": "b"}, "spec": {"policyName": "p"}})
        )[2],
        json!("<unset>")
    );
}
