use serde_json::{json, Value};

use super::*;

fn defaulted(group: &str, kind: &str, mut obj: Value) -> Value {
    apply(group, kind, &mut obj);
    obj
}

const CONTAINER: &str = "/dev/termination-log";

#[test]
fn minimal_pod_matches_kubectl_get() {
    let pod = defaulted(
        "",
        "Pod",
        json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "nginx", "namespace": "default"},
            "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}
        }),
    );
    assert_eq!(
        pod["spec"],
        json!({
            "containers": [{
                "image": "nginx", "imagePullPolicy": "Always", "name": "nginx", "resources": {},
                "terminationMessagePath": CONTAINER, "terminationMessagePolicy": "File"
            }],
            "dnsPolicy": "ClusterFirst", "enableServiceLinks": true, "restartPolicy": "Always",
            "schedulerName": "default-scheduler", "securityContext": {}, "terminationGracePeriodSeconds": 30
        })
    );
}

#[test]
fn minimal_deployment_matches_kubectl_get() {
    let d = defaulted(
        "apps",
        "Deployment",
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}}
            }
        }),
    );
    assert_eq!(
        d["spec"],
        json!({
            "progressDeadlineSeconds": 600, "replicas": 1, "revisionHistoryLimit": 10,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}, "type": "RollingUpdate"},
            "template": {
                "metadata": {"creationTimestamp": null, "labels": {"app": "web"}},
                "spec": {
                    "containers": [{
                        "image": "nginx:1.27", "imagePullPolicy": "IfNotPresent", "name": "nginx",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}], "resources": {},
                        "terminationMessagePath": CONTAINER, "terminationMessagePolicy": "File"
                    }],
                    "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
                    "securityContext": {}, "terminationGracePeriodSeconds": 30
                }
            }
        })
    );
    assert_eq!(d["status"], json!({}));
}

#[test]
fn minimal_service_matches_kubectl_get() {
    let s = defaulted(
        "",
        "Service",
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]}
        }),
    );
    assert_eq!(
        s["spec"],
        json!({
            "internalTrafficPolicy": "Cluster", "ipFamilyPolicy": "SingleStack",
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "selector": {"app": "web"}, "sessionAffinity": "None", "type": "ClusterIP"
        })
    );
    assert_eq!(s["status"], json!({"loadBalancer": {}}));
    let lb = defaulted(
        "",
        "Service",
        json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 443, "targetPort": "https"}]}}),
    );
    assert_eq!(lb["spec"]["externalTrafficPolicy"], "Cluster");
    assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], true);
    assert_eq!(lb["spec"]["ports"][0]["targetPort"], "https");
}

#[test]
fn minimal_job_matches_kubectl_get() {
    let mut job = defaulted(
        "batch",
        "Job",
        json!({
            "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi", "namespace": "default"},
            "spec": {"template": {"spec": {"containers": [{"name": "pi", "image": "perl:5.34.0"}], "restartPolicy": "Never"}}}
        }),
    );
    job["metadata"]["uid"] = json!("u-1");
    prepare_for_create("batch", "Job", &mut job);
    let labels = json!({"batch.kubernetes.io/controller-uid": "u-1", "batch.kubernetes.io/job-name": "pi", "controller-uid": "u-1", "job-name": "pi"});
    assert_eq!(job["metadata"]["labels"], labels);
    let spec = &job["spec"];
    assert_eq!(spec["backoffLimit"], 6);
    assert_eq!(spec["completions"], 1);
    assert_eq!(spec["parallelism"], 1);
    assert_eq!(spec["completionMode"], "NonIndexed");
    assert_eq!(spec["suspend"], false);
    assert_eq!(spec["manualSelector"], false);
    assert_eq!(spec["podReplacementPolicy"], "TerminatingOrFailed");
    assert_eq!(
        spec["selector"],
        json!({"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}})
    );
    assert_eq!(spec["template"]["metadata"]["labels"], labels);
    assert_eq!(
        spec["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(crate::validation::validate("batch", "Job", &job), vec![]);
}

#[test]
fn workload_and_other_defaults() {
    let sts = defaulted(
        "apps",
        "StatefulSet",
        json!({"spec": {"template": {"spec": {"containers": []}},
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
    );
    assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(
        sts["spec"]["updateStrategy"],
        json!({"rollingUpdate": {"partition": 0}, "type": "RollingUpdate"})
    );
    assert_eq!(
        sts["spec"]["persistentVolumeClaimRetentionPolicy"],
        json!({"whenDeleted": "Retain", "whenScaled": "Retain"})
    );
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["spec"]["volumeMode"],
        "Filesystem"
    );
    assert_eq!(
        sts["spec"]["volumeClaimTemplates"][0]["status"],
        json!({"phase": "Pending"})
    );
    let ds = defaulted("apps", "DaemonSet", json!({"spec": {}}));
    assert_eq!(
        ds["spec"]["updateStrategy"],
        json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}, "type": "RollingUpdate"})
    );
    let cj = defaulted(
        "batch",
        "CronJob",
        json!({"spec": {"schedule": "@hourly", "jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}}),
    );
    assert_eq!(cj["spec"]["concurrencyPolicy"], "Allow");
    assert_eq!(cj["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(cj["spec"]["failedJobsHistoryLimit"], 1);
    assert!(cj["spec"]["jobTemplate"]["spec"]
        .get("backoffLimit")
        .is_none());
    let mut ns = defaulted("", "Namespace", json!({"metadata": {"name": "team-a"}}));
    prepare_for_create("", "Namespace", &mut ns);
    assert_eq!(
        ns["metadata"]["labels"],
        json!({"kubernetes.io/metadata.name": "team-a"})
    );
    assert_eq!(ns["spec"], json!({"finalizers": ["kubernetes"]}));
    assert_eq!(ns["status"], json!({"phase": "Active"}));
    assert_eq!(defaulted("", "Secret", json!({}))["type"], "Opaque");
    let pvc = defaulted(
        "",
        "PersistentVolumeClaim",
        json!({"spec": {"resources": {"requests": {"storage": "1.5Gi"}}}}),
    );
    assert_eq!(pvc["spec"]["volumeMode"], "Filesystem");
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "1536Mi");
    let rb = defaulted(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        json!({"roleRef": {"kind": "Role", "name": "r"}, "subjects": [{"kind": "User", "name": "jane"}]}),
    );
    assert_eq!(rb["roleRef"]["apiGroup"], "rbac.authorization.k8s.io");
    assert_eq!(rb["subjects"][0]["apiGroup"], "rbac.authorization.k8s.io");
    let hpa = defaulted(
        "autoscaling",
        "HorizontalPodAutoscaler",
        json!({"apiVersion": "autoscaling/v2", "spec": {"maxReplicas": 3}}),
    );
    assert_eq!(hpa["spec"]["minReplicas"], 1);
    assert_eq!(
        hpa["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        80
    );
    let sc = defaulted(
        "storage.k8s.io",
        "StorageClass",
        json!({"provisioner": "x.io/y"}),
    );
    assert_eq!(
        (sc["reclaimPolicy"].clone(), sc["volumeBindingMode"].clone()),
        (json!("Delete"), json!("Immediate"))
    );
}

#[test]
fn pod_spec_details() {
    let pod = defaulted(
        "",
        "Pod",
        json!({"spec": {
            "containers": [{"name": "a", "image": "reg.io:5000/app@sha256:abc",
                "resources": {"limits": {"cpu": "0.5", "memory": "128Mi"}},
                "env": [{"name": "N", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                "livenessProbe": {"httpGet": {"port": 8080}}}],
            "volumes": [{"name": "s", "secret": {"secretName": "x"}}, {"name": "c", "configMap": {"name": "y"}}, {"name": "e"}, {"name": "h", "hostPath": {"path": "/tmp"}}]
        }}),
    );
    let c = &pod["spec"]["containers"][0];
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(
        c["resources"]["requests"],
        json!({"cpu": "500m", "memory": "128Mi"})
    );
    assert_eq!(c["env"][0]["valueFrom"]["fieldRef"]["apiVersion"], "v1");
    assert_eq!(
        c["livenessProbe"],
        json!({"httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3})
    );
    let v = &pod["spec"]["volumes"];
    assert_eq!(v[0]["secret"]["defaultMode"], 420);
    assert_eq!(v[1]["configMap"]["defaultMode"], 420);
    assert_eq!(v[2]["emptyDir"], json!({}));
    assert_eq!(v[3]["hostPath"]["type"], "");
    for (image, tag) in [
        ("nginx", "latest"),
        ("nginx:latest", "latest"),
        ("nginx:1.2", "1.2"),
        ("localhost:5000/x", "latest"),
        ("x@sha256:1", ""),
    ] {
        assert_eq!(image_tag(image), tag, "{image}");
    }
}

#[test]
fn service_update_keeps_allocated_values() {
    let old = json!({"spec": {"type": "NodePort", "clusterIP": "10.0.0.5", "clusterIPs": ["10.0.0.5"], "ipFamilies": ["IPv4"],
        "ports": [{"port": 80, "protocol": "TCP", "nodePort": 30080}]}});
    let mut new = json!({"spec": {"type": "NodePort", "ports": [{"port": 80, "protocol": "TCP"}]}});
    prepare_for_update("", "Service", &mut new, &old);
    assert_eq!(new["spec"]["clusterIP"], "10.0.0.5");
    assert_eq!(new["spec"]["ports"][0]["nodePort"], 30080);
}

#[test]
fn conversions_of_write_only_and_singular_fields() {
    // stringData goes into data, base64, over the same key; it is never kept.
    let secret = defaulted(
        "",
        "Secret",
        json!({"data": {"a": "eA==", "b": "eQ=="}, "stringData": {"b": "admin", "c": "hi!"}}),
    );
    assert_eq!(
        secret,
        json!({"type": "Opaque", "data": {"a": "eA==", "b": "YWRtaW4=", "c": "aGkh"}})
    );
    assert_eq!(
        defaulted("", "Secret", json!({"stringData": {"k": ""}}))["data"],
        json!({"k": ""})
    );

    let node = defaulted("", "Node", json!({"spec": {"podCIDR": "10.42.1.0/24"}}));
    assert_eq!(node["spec"]["podCIDRs"], json!(["10.42.1.0/24"]));
    let node = defaulted(
        "",
        "Node",
        json!({"spec": {"podCIDRs": ["10.42.2.0/24", "fd00::/64"]}}),
    );
    assert_eq!(node["spec"]["podCIDR"], "10.42.2.0/24");

    let pod = defaulted(
        "",
        "Pod",
        json!({"spec": {"containers": []}, "status": {"podIP": "10.42.0.7", "hostIP": "192.168.1.10"}}),
    );
    assert_eq!(pod["status"]["podIPs"], json!([{"ip": "10.42.0.7"}]));
    assert_eq!(pod["status"]["hostIPs"], json!([{"ip": "192.168.1.10"}]));
    let pod = defaulted(
        "",
        "Pod",
        json!({"spec": {"containers": []}, "status": {"podIPs": [{"ip": "10.42.0.8"}]}}),
    );
    assert_eq!(pod["status"]["podIP"], "10.42.0.8");
    assert!(pod["status"].get("hostIPs").is_none());
}

#[test]
fn webhook_configurations_get_kubernetes_defaults() {
    let hook = json!({"name": "m.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": "default", "name": "hook"}},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]});
    let m = defaulted(
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        json!({"metadata": {"name": "m"}, "webhooks": [hook.clone()]}),
    );
    assert_eq!(
        m["webhooks"][0],
        json!({"name": "m.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
            "clientConfig": {"service": {"namespace": "default", "name": "hook", "port": 443}},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "*"}],
            "failurePolicy": "Fail", "matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
            "timeoutSeconds": 10, "reinvocationPolicy": "Never"})
    );
    let v = defaulted(
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        json!({"metadata": {"name": "v"}, "webhooks": [hook]}),
    );
    assert!(v["webhooks"][0].get("reinvocationPolicy").is_none());
    assert!(v["webhooks"][0].get("timeoutSeconds") == Some(&json!(10)));
}

#[test]
fn admission_policies_get_kubernetes_defaults() {
    let p = defaulted(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        json!({"metadata": {"name": "p"}, "spec": {"matchConstraints": {"resourceRules": [
            {"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
            "validations": [{"expression": "object.spec.replicas <= 5"}]}}),
    );
    assert_eq!(p["spec"]["failurePolicy"], json!("Fail"));
    assert_eq!(
        p["spec"]["matchConstraints"],
        json!({"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}, "resourceRules": [
            {"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"], "scope": "*"}]})
    );
    let b = defaulted(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"]}}),
    );
    assert!(b["spec"].get("matchResources").is_none());
}

#[test]
fn micro_times_are_stored_with_microseconds_in_utc() {
    let lease = defaulted(
        "coordination.k8s.io",
        "Lease",
        json!({"spec": {"renewTime": "2026-11-22T15:28:53.449595957Z",
                        "acquireTime": "2026-11-22T16:28:53.1+01:00"}}),
    );
    assert_eq!(lease["spec"]["renewTime"], "2026-11-22T15:28:53.449595Z");
    assert_eq!(lease["spec"]["acquireTime"], "2026-11-22T15:28:53.100000Z");
    let ev = defaulted("events.k8s.io", "Event", json!({"eventTime": "not a time"}));
    assert_eq!(ev["eventTime"], "not a time", "validation reports it");
}

#[test]
fn daemon_sets_carry_their_template_generation() {
    let ann = |ds: &Value| ds["metadata"]["annotations"][TEMPLATE_GENERATION].clone();
    let mut ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}}});
    // Create: "1", as the registry prepares then defaults.
    let sent = ds.clone();
    prepare_for_create("apps", "DaemonSet", &mut ds);
    apply("apps", "DaemonSet", &mut ds);
    assert_eq!(ann(&ds), json!("1"));
    // A generation a client sends on create is kept when at least 1.
    for (given, want) in [("7", "7"), ("0", "1"), ("-2", "1"), ("x", "1")] {
        let mut d = sent.clone();
        d["metadata"]["annotations"] = json!({TEMPLATE_GENERATION: given, "team": "a"});
        prepare_for_create("apps", "DaemonSet", &mut d);
        assert_eq!(ann(&d), json!(want), "{given}");
        assert_eq!(d["metadata"]["annotations"]["team"], json!("a"));
    }

    // An update that leaves the template alone (the client's body not yet defaulted, and
    // without the annotation) keeps the generation; one the client sends is ignored.
    let update = |new: &Value, old: &Value| {
        let mut new = new.clone();
        prepare_for_update("apps", "DaemonSet", &mut new, old);
        apply("apps", "DaemonSet", &mut new);
        new
    };
    let mut same = sent.clone();
    same["spec"]["minReadySeconds"] = json!(5);
    assert_eq!(ann(&update(&same, &ds)), json!("1"));
    same["metadata"]["annotations"] = json!({TEMPLATE_GENERATION: "9"});
    assert_eq!(ann(&update(&same, &ds)), json!("1"));
    // Labels on the DaemonSet itself are not the template.
    let mut labelled = ds.clone();
    labelled["metadata"]["labels"] = json!({"tier": "node"});
    assert_eq!(ann(&update(&labelled, &ds)), json!("1"));

    // A template change increments it, from the stored value.
    let mut changed = sent.clone();
    changed["spec"]["template"]["spec"]["containers"][0]["image"] = json!("agent:2");
    let v2 = update(&changed, &ds);
    assert_eq!(ann(&v2), json!("2"));
    let mut changed_again = v2.clone();
    changed_again["spec"]["template"]["metadata"]["annotations"] = json!({"restartedAt": "now"});
    changed_again["metadata"]["annotations"][TEMPLATE_GENERATION] = json!("1");
    assert_eq!(ann(&update(&changed_again, &v2)), json!("3"));
    // A stored object without it counts from 0, as Kubernetes' conversion does.
    let mut legacy = ds.clone();
    legacy["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    assert_eq!(ann(&update(&changed, &legacy)), json!("1"));

    // A status write keeps the stored generation whatever the client's metadata says.
    let mut status = v2.clone();
    status["metadata"]["annotations"][TEMPLATE_GENERATION] = json!("40");
    status["status"] = json!({"numberReady": 1});
    prepare_for_status_update("apps", "DaemonSet", &mut status, &v2);
    assert_eq!(ann(&status), json!("2"));

    // Other workloads get no such annotation.
    let mut sts = json!({"metadata": {"name": "db"}, "spec": {"template": {}}});
    prepare_for_create("apps", "StatefulSet", &mut sts);
    assert!(sts["metadata"].get("annotations").is_none());
}
