use serde_json::{json, Value};

use super::*;
use crate::defaults;

fn messages(errs: &[FieldError]) -> Vec<String> {
    errs.iter().map(|e| e.message.clone()).collect()
}

/// Default then validate, as the API server does on create.
fn check(group: &str, kind: &str, mut obj: Value) -> Vec<String> {
    defaults::apply(group, kind, &mut obj);
    if let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        md.entry("uid")
            .or_insert(json!("0b7c3e7e-1111-2222-3333-444455556666"));
    }
    defaults::prepare_for_create(group, kind, &mut obj);
    messages(&validate(group, kind, &obj))
}

fn check_update(group: &str, kind: &str, mut old: Value, mut new: Value) -> Vec<String> {
    for o in [&mut old, &mut new] {
        defaults::apply(group, kind, o);
    }
    messages(&validate_update(group, kind, &new, &old))
}

fn md(name: &str) -> Value {
    json!({"name": name, "namespace": "default"})
}

fn pod_template(labels: Value) -> Value {
    json!({"metadata": {"labels": labels}, "spec": {"containers": [{"name": "web", "image": "nginx:1.27", "ports": [{"containerPort": 80, "name": "http"}]}]}})
}

fn deployment() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": md("web"),
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!({"app": "web"}))}})
}

fn valid_objects() -> Vec<(&'static str, &'static str, Value)> {
    let tmpl = pod_template(json!({"app": "web"}));
    let mut job_tmpl = tmpl.clone();
    job_tmpl["spec"]["restartPolicy"] = json!("OnFailure");
    vec![
        (
            "",
            "Pod",
            json!({"metadata": md("web"), "spec": {
                "containers": [{"name": "web", "image": "nginx", "ports": [{"containerPort": 80, "name": "http"}],
                    "env": [{"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}, {"name": "A", "value": "b"}],
                    "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": 1, "memory": "256Mi"}},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}, {"name": "tmp", "mountPath": "/tmp"}],
                    "readinessProbe": {"httpGet": {"path": "/healthz", "port": "http"}},
                    "livenessProbe": {"tcpSocket": {"port": 80}},
                    "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}}],
                "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "web-config"}}, {"name": "tmp", "emptyDir": {}}],
                "nodeSelector": {"kubernetes.io/os": "linux"},
                "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "web", "effect": "NoSchedule"}, {"operator": "Exists"}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100,
                    "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}}]}}
            }}),
        ),
        (
            "",
            "PodTemplate",
            json!({"metadata": md("t"), "template": tmpl}),
        ),
        (
            "",
            "ReplicationController",
            json!({"metadata": md("rc"), "spec": {"selector": {"app": "web"}, "template": tmpl}}),
        ),
        (
            "",
            "Service",
            json!({"metadata": md("web"), "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}, {"name": "https", "port": 443}]}}),
        ),
        (
            "",
            "Service",
            json!({"metadata": md("db"), "spec": {"clusterIP": "None", "selector": {"app": "db"}}}),
        ),
        (
            "",
            "Service",
            json!({"metadata": md("np"), "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}]}}),
        ),
        (
            "",
            "Service",
            json!({"metadata": md("ext"), "spec": {"type": "ExternalName", "externalName": "example.com"}}),
        ),
        (
            "",
            "ConfigMap",
            json!({"metadata": md("web-config"), "data": {"app.properties": "a=b", "KEY_1": "v"}, "binaryData": {"blob": "AAEC"}}),
        ),
        (
            "",
            "Secret",
            json!({"metadata": md("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5"}}),
        ),
        (
            "",
            "Namespace",
            json!({"metadata": {"name": "team-a", "labels": {"team": "a"}}}),
        ),
        (
            "",
            "Node",
            json!({"metadata": {"name": "node-1"}, "spec": {"podCIDRs": ["10.244.1.0/24"], "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}),
        ),
        ("", "ServiceAccount", json!({"metadata": md("builder")})),
        (
            "",
            "Endpoints",
            json!({"metadata": md("web"), "subsets": [{"addresses": [{"ip": "10.244.1.5"}], "ports": [{"port": 80}]}]}),
        ),
        (
            "",
            "Event",
            json!({"metadata": md("web.17a"), "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"}, "reason": "Started", "message": "ok", "type": "Normal"}),
        ),
        (
            "",
            "LimitRange",
            json!({"metadata": md("limits"), "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "2"}}]}}),
        ),
        (
            "",
            "ResourceQuota",
            json!({"metadata": md("quota"), "spec": {"hard": {"pods": "10", "requests.cpu": "4", "count/deployments.apps": "5"}}}),
        ),
        (
            "",
            "PersistentVolumeClaim",
            json!({"metadata": md("data"), "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, "storageClassName": "standard"}}),
        ),
        (
            "",
            "PersistentVolume",
            json!({"metadata": {"name": "pv-1"}, "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"], "hostPath": {"path": "/data"}}}),
        ),
        ("apps", "Deployment", deployment()),
        (
            "apps",
            "ReplicaSet",
            json!({"metadata": md("web-1"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": tmpl}}),
        ),
        (
            "apps",
            "StatefulSet",
            json!({"metadata": md("db"), "spec": {"serviceName": "db", "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}, "template": tmpl,
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}),
        ),
        (
            "apps",
            "DaemonSet",
            json!({"metadata": md("agent"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": tmpl}}),
        ),
        (
            "apps",
            "ControllerRevision",
            json!({"metadata": md("web-1"), "data": {}, "revision": 1}),
        ),
        (
            "batch",
            "Job",
            json!({"metadata": md("pi"), "spec": {"template": job_tmpl.clone()}}),
        ),
        (
            "batch",
            "CronJob",
            json!({"metadata": md("hello"), "spec": {"schedule": "*/5 * * * *", "timeZone": "Europe/Paris", "jobTemplate": {"spec": {"template": job_tmpl}}}}),
        ),
        (
            "autoscaling",
            "HorizontalPodAutoscaler",
            json!({"apiVersion": "autoscaling/v2", "metadata": md("web"), "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 5}}),
        ),
        (
            "autoscaling",
            "HorizontalPodAutoscaler",
            json!({"apiVersion": "autoscaling/v1", "metadata": md("web1"), "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "maxReplicas": 5, "targetCPUUtilizationPercentage": 70}}),
        ),
        (
            "certificates.k8s.io",
            "CertificateSigningRequest",
            json!({"metadata": {"name": "jane"}, "spec": {
            "request": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURSBSRVFVRVNULS0tLS0KLS0tLS1FTkQgQ0VSVElGSUNBVEUgUkVRVUVTVC0tLS0tCg==",
            "signerName": "kubernetes.io/kube-apiserver-client", "usages": ["client auth"]}}),
        ),
        (
            "coordination.k8s.io",
            "Lease",
            json!({"metadata": md("leader"), "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}),
        ),
        (
            "discovery.k8s.io",
            "EndpointSlice",
            json!({"metadata": md("web-abc"), "addressType": "IPv4", "endpoints": [{"addresses": ["10.244.1.5"], "conditions": {"ready": true}}], "ports": [{"name": "http", "port": 80}]}),
        ),
        (
            "events.k8s.io",
            "Event",
            json!({"metadata": md("web.17b"), "eventTime": "2024-05-01T10:00:00.000000Z", "reportingController": "example.com/ctl",
            "reportingInstance": "ctl-1", "action": "Sync", "reason": "Synced", "type": "Normal", "regarding": {"kind": "Pod", "name": "web", "namespace": "default"}}),
        ),
        (
            "networking.k8s.io",
            "Ingress",
            json!({"metadata": md("web"), "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["*.example.com"], "secretName": "tls"}],
            "rules": [{"host": "www.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}),
        ),
        (
            "networking.k8s.io",
            "IngressClass",
            json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx"}}),
        ),
        (
            "networking.k8s.io",
            "NetworkPolicy",
            json!({"metadata": md("deny"), "spec": {"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.1.0.0/16"]}}, {"podSelector": {"matchLabels": {"app": "web"}}}], "ports": [{"port": 80}]}]}}),
        ),
        (
            "policy",
            "PodDisruptionBudget",
            json!({"metadata": md("web"), "spec": {"minAvailable": "50%", "selector": {"matchLabels": {"app": "web"}}}}),
        ),
        (
            "rbac.authorization.k8s.io",
            "ClusterRole",
            json!({"metadata": {"name": "system:reader"}, "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}, {"nonResourceURLs": ["/healthz"], "verbs": ["get"]}]}),
        ),
        (
            "rbac.authorization.k8s.io",
            "Role",
            json!({"metadata": md("reader"), "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"]}]}),
        ),
        (
            "rbac.authorization.k8s.io",
            "RoleBinding",
            json!({"metadata": md("read"), "roleRef": {"kind": "Role", "name": "reader"}, "subjects": [{"kind": "ServiceAccount", "name": "builder"}, {"kind": "User", "name": "jane"}]}),
        ),
        (
            "rbac.authorization.k8s.io",
            "ClusterRoleBinding",
            json!({"metadata": {"name": "read-all"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:reader"}, "subjects": [{"kind": "ServiceAccount", "name": "builder", "namespace": "default"}, {"kind": "Group", "name": "devs"}]}),
        ),
        (
            "scheduling.k8s.io",
            "PriorityClass",
            json!({"metadata": {"name": "high"}, "value": 1000000}),
        ),
        (
            "storage.k8s.io",
            "StorageClass",
            json!({"metadata": {"name": "standard"}, "provisioner": "rancher.io/local-path", "parameters": {"type": "ssd"}}),
        ),
        (
            "storage.k8s.io",
            "CSIDriver",
            json!({"metadata": {"name": "csi.example.com"}, "spec": {}}),
        ),
        (
            "storage.k8s.io",
            "CSINode",
            json!({"metadata": {"name": "node-1"}, "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1"}]}}),
        ),
        (
            "storage.k8s.io",
            "VolumeAttachment",
            json!({"metadata": {"name": "va"}, "spec": {"attacher": "csi.example.com", "nodeName": "node-1", "source": {"persistentVolumeName": "pv-1"}}}),
        ),
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration",
            json!({"metadata": {"name": "sidecar"}, "webhooks": [{"name": "sidecar.example.com", "sideEffects": "None",
                "admissionReviewVersions": ["v1", "v1beta1"], "reinvocationPolicy": "IfNeeded",
                "clientConfig": {"service": {"namespace": "hooks", "name": "sidecar", "path": "/mutate"}, "caBundle": "Y2E="},
                "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods", "pods/status"], "scope": "Namespaced"}],
                "namespaceSelector": {"matchExpressions": [{"key": "sidecar", "operator": "NotIn", "values": ["off"]}]},
                "matchConditions": [{"name": "not-system", "expression": "!request.userInfo.username.startsWith('system:')"}]}]}),
        ),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicy",
            json!({"metadata": {"name": "replicas"}, "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
                "matchConstraints": {"resourceRules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["apps"], "apiVersions": ["v1"], "resources": ["deployments"]}]},
                "variables": [{"name": "limit", "expression": "int(params.data.max)"}],
                "validations": [{"expression": "object.spec.replicas <= variables.limit", "message": "too many replicas", "reason": "Invalid"}],
                "auditAnnotations": [{"key": "high-replicas", "valueExpression": "string(object.spec.replicas)"}]}}),
        ),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding",
            json!({"metadata": {"name": "replicas"}, "spec": {"policyName": "replicas", "validationActions": ["Deny", "Audit"],
                "paramRef": {"name": "limits", "namespace": "default", "parameterNotFoundAction": "Deny"},
                "matchResources": {"namespaceSelector": {"matchLabels": {"env": "prod"}}}}}),
        ),
        (
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
            json!({"metadata": {"name": "policy"}, "webhooks": [
                {"name": "deny.policy.example.com", "sideEffects": "NoneOnDryRun", "admissionReviewVersions": ["v1"],
                    "clientConfig": {"url": "https://policy.example.com:8443/validate"}, "timeoutSeconds": 5, "failurePolicy": "Ignore",
                    "rules": [{"operations": ["*"], "apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*/*"]}]},
                {"name": "cm.policy.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"], "matchPolicy": "Exact",
                    "clientConfig": {"url": "https://10.0.0.1/v"},
                    "rules": [{"operations": ["DELETE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps", "*/scale", "pods/*"], "scope": "Cluster"}]}]}),
        ),
    ]
}

#[test]
fn valid_objects_of_every_kind_pass() {
    for (group, kind, obj) in valid_objects() {
        assert_eq!(
            check(group, kind, obj.clone()),
            Vec::<String>::new(),
            "{group}/{kind}: {obj}"
        );
    }
    let covered: Vec<(&str, &str)> = valid_objects().iter().map(|(g, k, _)| (*g, *k)).collect();
    for r in crate::catalogue::RESOURCES {
        // Reviews are checked where they are answered.
        let review = ["authentication.k8s.io", "authorization.k8s.io"].contains(&r.group);
        // CustomResourceDefinitions have their own module (crate::crd) and tests.
        if !["Binding", "ComponentStatus", "CustomResourceDefinition"].contains(&r.kind) && !review
        {
            assert!(
                covered.contains(&(r.group, r.kind)),
                "no valid example for {}/{}",
                r.group,
                r.kind
            );
        }
    }
}

const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

#[test]
fn common_mistakes_have_kubernetes_messages() {
    let cases: Vec<(&str, &str, Value, &str)> = vec![
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "web"}]}}), "spec.containers[0].image: Required value"),
        ("", "Pod", json!({"metadata": md("p"), "spec": {}}), "spec.containers: Required value"),
        ("", "Pod", json!({"metadata": {"name": "p", "namespace": "default", "labels": {"app": "-bad"}}, "spec": {"containers": [{"name": "a", "image": "x"}]}}),
            "metadata.labels: Invalid value: \"-bad\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x"}, {"name": "a", "image": "y"}]}}), "spec.containers[1].name: Duplicate value: \"a\""),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x", "ports": [{"containerPort": 70000}]}]}}), "spec.containers[0].ports[0].containerPort: Invalid value: 70000: must be between 1 and 65535, inclusive"),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}]}}), "spec.containers[0].volumeMounts[0].name: Not found: \"data\""),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"restartPolicy": "Sometimes", "containers": [{"name": "a", "image": "x"}]}}), "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x", "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}}}]}}), "spec.containers[0].resources.requests: Invalid value: \"2\": must be less than or equal to cpu limit of 1"),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x", "readinessProbe": {"periodSeconds": 5}}]}}), "spec.containers[0].readinessProbe: Required value: must specify a handler type"),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x"}], "volumes": [{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}]}}), "spec.volumes[0].hostPath: Forbidden: may not specify more than 1 volume type"),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x", "env": [{"name": "1X", "value": "y"}]}]}}), "spec.containers[0].env[0].name: Invalid value: \"1X\": a valid environment variable name must consist of alphabetic characters, digits, '_', '-', or '.', and must not start with a digit (e.g. 'my.env-name',  or 'MY_ENV.NAME',  or 'MyEnvName1', regex used for validation is '[-._a-zA-Z][-._a-zA-Z0-9]*')"),
        ("", "Pod", json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "x"}], "tolerations": [{"key": "k", "operator": "Maybe"}]}}), "spec.tolerations[0].operator: Unsupported value: \"Maybe\": supported values: \"Equal\", \"Exists\""),
        ("", "Pod", json!({"metadata": md("My_Pod"), "spec": {"containers": [{"name": "a", "image": "x"}]}}), "metadata.name: Invalid value: \"My_Pod\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
        ("", "Service", json!({"metadata": md("web"), "spec": {"ports": [{"port": 80}, {"port": 80}]}}), "spec.ports[1]: Duplicate value: core.ServicePort{Name:\"\", Protocol:\"TCP\", AppProtocol:(*string)(nil), Port:80, TargetPort:intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}, NodePort:0}"),
        ("", "Service", json!({"metadata": md("web"), "spec": {"ports": [{"port": 80}, {"port": 81}]}}), "spec.ports[0].name: Required value"),
        ("", "Service", json!({"metadata": md("web"), "spec": {"selector": {"app": "web"}}}), "spec.ports: Required value"),
        ("", "Service", json!({"metadata": md("web"), "spec": {"type": "Magic", "ports": [{"port": 80}]}}), "spec.type: Unsupported value: \"Magic\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""),
        ("", "Service", json!({"metadata": md("web"), "spec": {"ports": [{"port": 80, "nodePort": 30001}]}}), "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"),
        ("", "Service", json!({"metadata": md("ext"), "spec": {"type": "ExternalName"}}), "spec.externalName: Required value"),
        ("", "Service", json!({"metadata": md("1web"), "spec": {"ports": [{"port": 80}]}}), "metadata.name: Invalid value: \"1web\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"),
        ("apps", "Deployment", json!({"metadata": md("web"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!({"app": "other"}))}}),
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"other\"}: `selector` does not match template `labels`"),
        ("apps", "Deployment", json!({"metadata": md("web"), "spec": {"template": pod_template(json!({"app": "web"}))}}), "spec.selector: Required value"),
        ("apps", "Deployment", json!({"metadata": md("web"), "spec": {"replicas": -1, "selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!({"app": "web"}))}}), "spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
        ("apps", "Deployment", json!({"metadata": md("web"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": 0}}, "template": pod_template(json!({"app": "web"}))}}),
            "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: may not be 0 when `maxSurge` is 0"),
        ("apps", "StatefulSet", json!({"metadata": md("db"), "spec": {"selector": {}, "template": pod_template(json!({"app": "db"}))}}),
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for statefulset"),
        ("apps", "DaemonSet", json!({"metadata": md("ds"), "spec": {"selector": {"matchLabels": {"app": "ds"}}, "template": {"metadata": {"labels": {"app": "ds"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "x"}]}}}}),
            "spec.template.spec.restartPolicy: Unsupported value: \"Never\": supported values: \"Always\""),
        ("batch", "Job", json!({"metadata": md("pi"), "spec": {"template": pod_template(json!({}))}}), "spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""),
        ("batch", "Job", json!({"metadata": md("pi"), "spec": {"backoffLimit": -1, "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "x"}]}}}}), "spec.backoffLimit: Invalid value: -1: must be greater than or equal to 0"),
        ("batch", "CronJob", json!({"metadata": md("c"), "spec": {"schedule": "* * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "x"}]}}}}}}),
            "spec.schedule: Invalid value: \"* * *\": expected exactly 5 fields, found 3: [* * *]"),
        ("batch", "CronJob", json!({"metadata": md("c"), "spec": {"schedule": "TZ=UTC 0 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "x"}]}}}}}}),
            "spec.schedule: Invalid value: \"TZ=UTC 0 * * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"),
        ("", "ConfigMap", json!({"metadata": md("c"), "data": {"a/b": "x"}}), "data[a/b]: Invalid value: \"a/b\": a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"),
        ("", "ConfigMap", json!({"metadata": md("c"), "data": {"big": "x".repeat(1024 * 1024 + 1)}}), ": Too long: may not be more than 1048576 bytes"),
        ("", "Namespace", json!({"metadata": {"name": "my.ns"}}), "metadata.name: Invalid value: \"my.ns\": must not contain dots"),
        ("", "Secret", json!({"metadata": md("s"), "type": "kubernetes.io/tls", "data": {"tls.crt": "eA=="}}), "data[tls.key]: Required value"),
        ("rbac.authorization.k8s.io", "Role", json!({"metadata": md("r"), "rules": [{"apiGroups": [""], "resources": ["pods"]}]}), "rules[0].verbs: Required value: verbs must contain at least one value"),
        ("rbac.authorization.k8s.io", "RoleBinding", json!({"metadata": md("rb"), "roleRef": {"kind": "Thing", "name": "r"}}), "roleRef.kind: Unsupported value: \"Thing\": supported values: \"Role\", \"ClusterRole\""),
        ("policy", "PodDisruptionBudget", json!({"metadata": md("p"), "spec": {"minAvailable": 1, "maxUnavailable": 1}}), "spec: Invalid value: policy.PodDisruptionBudgetSpec{...}: minAvailable and maxUnavailable cannot be both set"),
        ("scheduling.k8s.io", "PriorityClass", json!({"metadata": {"name": "huge"}, "value": 2000000000}), "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"),
        ("networking.k8s.io", "Ingress", json!({"metadata": md("i"), "spec": {"rules": [{"http": {"paths": [{"path": "/", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}}), "spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"),
        ("discovery.k8s.io", "EndpointSlice", json!({"metadata": md("e"), "addressType": "IPv5", "endpoints": []}), "addressType: Unsupported value: \"IPv5\": supported values: \"FQDN\", \"IPv4\", \"IPv6\""),
        ("coordination.k8s.io", "Lease", json!({"metadata": md("l"), "spec": {"leaseDurationSeconds": 0}}), "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"),
        ("autoscaling", "HorizontalPodAutoscaler", json!({"apiVersion": "autoscaling/v2", "metadata": md("h"), "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 5, "maxReplicas": 2}}), "spec.maxReplicas: Invalid value: 2: must be greater than or equal to `minReplicas`"),
        ("", "PersistentVolumeClaim", json!({"metadata": md("c"), "spec": {"resources": {"requests": {"storage": "1Gi"}}}}), "spec.accessModes: Required value: at least 1 access mode is required"),
    ];
    for (group, kind, obj, want) in cases {
        let got = check(group, kind, obj);
        assert!(
            got.iter().any(|m| m == want),
            "{group}/{kind}: want {want:?}\n got {got:#?}"
        );
    }
    let _ = LABEL_VALUE_MSG;
}

#[test]
fn updates_check_immutable_fields() {
    let mut changed = deployment();
    changed["spec"]["selector"] = json!({"matchLabels": {"app": "web2"}});
    changed["spec"]["template"]["metadata"]["labels"] = json!({"app": "web2"});
    let want = "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string{\"app\":\"web2\"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable";
    assert_eq!(
        check_update("apps", "Deployment", deployment(), changed),
        vec![want.to_string()]
    );

    let mut scaled = deployment();
    scaled["spec"]["replicas"] = json!(5);
    scaled["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    assert_eq!(
        check_update("apps", "Deployment", deployment(), scaled),
        Vec::<String>::new()
    );

    let sts = json!({"metadata": md("db"), "spec": {"serviceName": "db", "selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!({"app": "web"}))}});
    let mut sts2 = sts.clone();
    sts2["spec"]["serviceName"] = json!("other");
    assert_eq!(check_update("apps", "StatefulSet", sts.clone(), sts2), vec![
        "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden".to_string()
    ]);

    let pod =
        json!({"metadata": md("p"), "spec": {"containers": [{"name": "a", "image": "nginx:1"}]}});
    let mut new_image = pod.clone();
    new_image["spec"]["containers"][0]["image"] = json!("nginx:2");
    assert_eq!(
        check_update("", "Pod", pod.clone(), new_image),
        Vec::<String>::new()
    );
    let mut new_port = pod.clone();
    new_port["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80}]);
    let errs = check_update("", "Pod", pod.clone(), new_port);
    assert_eq!(errs.len(), 1);
    assert!(errs[0].starts_with("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)\n"), "{errs:?}");

    let cm = json!({"metadata": md("c"), "immutable": true, "data": {"a": "1"}});
    let mut cm2 = cm.clone();
    cm2["data"]["a"] = json!("2");
    assert_eq!(
        check_update("", "ConfigMap", cm, cm2),
        vec!["data: Forbidden: field is immutable when `immutable` is set".to_string()]
    );

    let svc = json!({"metadata": md("web"), "spec": {"clusterIP": "10.96.0.10", "ports": [{"port": 80}]}});
    let mut svc2 = svc.clone();
    svc2["spec"]["clusterIP"] = json!("10.96.0.11");
    assert_eq!(
        check_update("", "Service", svc, svc2),
        vec![
            "spec.clusterIPs[0]: Invalid value: []string{\"10.96.0.11\"}: may not change once set"
                .to_string()
        ]
    );

    let job = json!({"metadata": {"name": "pi", "namespace": "default", "uid": "u"}, "spec": {"selector": {"matchLabels": {"x": "y"}}, "manualSelector": true,
        "template": {"metadata": {"labels": {"x": "y"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "a", "image": "x"}]}}}});
    let mut job2 = job.clone();
    job2["spec"]["template"]["spec"]["containers"][0]["image"] = json!("y");
    assert_eq!(
        check_update("batch", "Job", job, job2),
        vec![
            "spec.template: Invalid value: core.PodTemplateSpec{...}: field is immutable"
                .to_string()
        ]
    );

    let rb = json!({"metadata": md("rb"), "roleRef": {"kind": "Role", "name": "a"}});
    let mut rb2 = rb.clone();
    rb2["roleRef"]["name"] = json!("b");
    assert_eq!(check_update("rbac.authorization.k8s.io", "RoleBinding", rb, rb2), vec![
        "roleRef: Invalid value: rbac.RoleRef{APIGroup:\"rbac.authorization.k8s.io\", Kind:\"Role\", Name:\"b\"}: cannot change roleRef".to_string()
    ]);

    let mut renamed = deployment();
    renamed["metadata"]["name"] = json!("other");
    assert!(check_update("apps", "Deployment", deployment(), renamed)
        .contains(&"metadata.name: Invalid value: \"other\": field is immutable".to_string()));
}

#[test]
fn metadata_rules() {
    let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT_FOR_TEST);
    let errs = check(
        "",
        "ConfigMap",
        json!({"metadata": {"name": "c", "namespace": "default", "annotations": {"a": big}}}),
    );
    assert_eq!(
        errs,
        vec!["metadata.annotations: Too long: may not be more than 262144 bytes".to_string()]
    );
    let errs = check(
        "",
        "ConfigMap",
        json!({"metadata": {"namespace": "default"}}),
    );
    assert_eq!(
        errs,
        vec!["metadata.name: Required value: name or generateName is required".to_string()]
    );
    let errs = check(
        "",
        "ConfigMap",
        json!({"metadata": {"name": "c", "namespace": "default", "finalizers": ["custom"]}}),
    );
    assert_eq!(errs, vec!["metadata.finalizers[0]: Invalid value: \"custom\": name is neither a standard finalizer name nor is it fully qualified".to_string()]);
    assert_eq!(
        validate_name("rbac.authorization.k8s.io", "ClusterRole", "system:a"),
        Vec::<String>::new()
    );
    assert_eq!(validate_name("", "Service", "a.b").len(), 1);
}

const TOTAL_ANNOTATION_SIZE_LIMIT_FOR_TEST: usize = meta::TOTAL_ANNOTATION_SIZE_LIMIT;

/// A webhook configuration with one webhook whose fields are overridden by `hook`.
fn webhook_config(kind: &str, hook: Value) -> Value {
    let mut h = json!({"name": "a.example.com", "sideEffects": "None", "admissionReviewVersions": ["v1"],
        "clientConfig": {"url": "https://hook.example.com/a"},
        "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["configmaps"]}]});
    for (k, v) in hook.as_object().expect("object") {
        if v.is_null() {
            h.as_object_mut().expect("object").remove(k);
        } else {
            h[k] = v.clone();
        }
    }
    json!({"kind": kind, "metadata": {"name": "hooks"}, "webhooks": [h]})
}

#[test]
fn webhook_configurations_have_kubernetes_messages() {
    let g = "admissionregistration.k8s.io";
    let m = "MutatingWebhookConfiguration";
    let v = "ValidatingWebhookConfiguration";
    let cases: Vec<(&str, Value, &str)> = vec![
        (v, json!({"name": "short.name"}), "webhooks[0].name: Invalid value: \"short.name\": should be a domain with at least three segments separated by dots"),
        (v, json!({"name": null}), "webhooks[0].name: Required value"),
        (v, json!({"admissionReviewVersions": null}), "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"),
        (v, json!({"admissionReviewVersions": ["v2"]}), "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1"),
        (v, json!({"sideEffects": null}), "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"),
        (v, json!({"sideEffects": "Some"}), "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""),
        (v, json!({"clientConfig": {}}), "webhooks[0].clientConfig: Required value: exactly one of url or service is required"),
        (v, json!({"clientConfig": {"url": "http://hook.example.com"}}), "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]"),
        (v, json!({"clientConfig": {"url": "https://u:p@hook.example.com"}}), "webhooks[0].clientConfig.url: Invalid value: \"u:p\": user information is not permitted in the URL"),
        (v, json!({"clientConfig": {"url": "https://hook.example.com/a?x=1"}}), "webhooks[0].clientConfig.url: Invalid value: \"x=1\": query parameters are not permitted in the URL"),
        (v, json!({"clientConfig": {"url": "https://hook.example.com/a#top"}}), "webhooks[0].clientConfig.url: Invalid value: \"top\": fragments are not permitted in the URL"),
        (v, json!({"clientConfig": {"service": {"namespace": "ns", "name": "svc", "path": "/a//b"}}}), "webhooks[0].clientConfig.service.path: Invalid value: \"/a//b\": segment[1] may not be empty"),
        (v, json!({"clientConfig": {"service": {"namespace": "ns", "name": "svc", "port": 70000}}}), "webhooks[0].clientConfig.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive"),
        (v, json!({"timeoutSeconds": 31}), "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"),
        (v, json!({"failurePolicy": "Maybe"}), "webhooks[0].failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\""),
        (v, json!({"matchPolicy": "Loose"}), "webhooks[0].matchPolicy: Unsupported value: \"Loose\": supported values: \"Equivalent\", \"Exact\""),
        (m, json!({"reinvocationPolicy": "Always"}), "webhooks[0].reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\""),
        (v, json!({"rules": [{"operations": [], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}), "webhooks[0].rules[0].operations: Required value"),
        (v, json!({"rules": [{"operations": ["*", "CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}), "webhooks[0].rules[0].operations: Invalid value: []admissionregistration.OperationType{\"*\", \"CREATE\"}: if '*' is present, must not specify other operations"),
        (v, json!({"rules": [{"operations": ["PATCH"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}), "webhooks[0].rules[0].operations[0]: Unsupported value: \"PATCH\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"DELETE\", \"UPDATE\""),
        (v, json!({"rules": [{"operations": ["CREATE"], "apiGroups": ["*", "apps"], "apiVersions": ["v1"], "resources": ["pods"]}]}), "webhooks[0].rules[0].apiGroups: Invalid value: []string{\"*\", \"apps\"}: if '*' is present, must not specify other API groups"),
        (v, json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["*", "pods"]}]}), "webhooks[0].rules[0].resources: Invalid value: []string{\"*\", \"pods\"}: if '*' is present, must not specify other resources without subresources"),
        (v, json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods/*", "pods/status"]}]}), "webhooks[0].rules[0].resources[1]: Invalid value: \"pods/status\": if 'pods/*' is present, must not specify pods/status"),
        (v, json!({"rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "scope": "Global"}]}), "webhooks[0].rules[0].scope: Unsupported value: \"Global\": supported values: \"*\", \"Cluster\", \"Namespaced\""),
        (v, json!({"matchConditions": [{"name": "x", "expression": " "}]}), "webhooks[0].matchConditions[0].expression: Required value"),
    ];
    for (kind, hook, want) in cases {
        let got = check(g, kind, webhook_config(kind, hook.clone()));
        assert!(got.contains(&want.to_string()), "{hook}: {got:?}");
    }
    let mut dup = webhook_config(v, json!({}));
    let first = dup["webhooks"][0].clone();
    dup["webhooks"].as_array_mut().expect("array").push(first);
    assert_eq!(
        check(g, v, dup),
        vec!["webhooks[1].name: Duplicate value: \"a.example.com\"".to_string()]
    );
}

#[test]
fn webhook_updates_keep_to_the_rules_the_stored_object_met() {
    let g = "admissionregistration.k8s.io";
    let v = "ValidatingWebhookConfiguration";
    let mut old = webhook_config(v, json!({"sideEffects": "Unknown"}));
    old["metadata"]["resourceVersion"] = json!("1");
    let mut new = old.clone();
    new["webhooks"][0]["timeoutSeconds"] = json!(5);
    assert_eq!(check_update(g, v, old.clone(), new), Vec::<String>::new());
    let strict = webhook_config(v, json!({}));
    let mut loosened = strict.clone();
    loosened["webhooks"][0]["sideEffects"] = json!("Some");
    assert_eq!(
        check_update(g, v, strict, loosened),
        vec!["webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\"".to_string()]
    );
}

#[test]
fn admission_policies_have_kubernetes_messages() {
    let g = "admissionregistration.k8s.io";
    let cases: Vec<(&str, Value, &str)> = vec![
        ("ValidatingAdmissionPolicy", json!({"metadata": {"name": "p"}, "spec": {"validations": [{"expression": "true"}]}}),
            "spec.matchConstraints: Required value"),
        ("ValidatingAdmissionPolicy", json!({"metadata": {"name": "p"}, "spec": {"matchConstraints": {}, "validations": [{"expression": "true"}]}}),
            "spec.matchConstraints.resourceRules: Required value"),
        ("ValidatingAdmissionPolicy", json!({"metadata": {"name": "p"}, "spec": {"matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}}}),
            "spec.validations: Required value: validations or auditAnnotations must contain at least one item"),
        ("ValidatingAdmissionPolicy", json!({"metadata": {"name": "p"}, "spec": {"paramKind": {"apiVersion": "v1"}, "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}, "validations": [{"expression": "true", "reason": "Teapot"}]}}),
            "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\""),
        ("ValidatingAdmissionPolicy", json!({"metadata": {"name": "p"}, "spec": {"paramKind": {"apiVersion": "v1"}, "matchConstraints": {"resourceRules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"]}]}, "validations": [{"expression": "true"}]}}),
            "spec.paramKind.kind: Required value"),
        ("ValidatingAdmissionPolicyBinding", json!({"metadata": {"name": "b"}, "spec": {"validationActions": ["Deny"]}}),
            "spec.policyName: Required value"),
        ("ValidatingAdmissionPolicyBinding", json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}}),
            "spec.validationActions: Invalid value: []admissionregistration.ValidationAction{\"Deny\", \"Warn\"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)"),
        ("ValidatingAdmissionPolicyBinding", json!({"metadata": {"name": "b"}, "spec": {"policyName": "p"}}),
            "spec.validationActions: Required value: at least one validation action is required"),
        ("ValidatingAdmissionPolicyBinding", json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"], "paramRef": {"parameterNotFoundAction": "Deny"}}}),
            "spec.paramRef: Required value: one of name or selector must be specified"),
        ("ValidatingAdmissionPolicyBinding", json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"], "matchResources": {"matchPolicy": "Loose"}}}),
            "spec.matchResouces.matchPolicy: Unsupported value: \"Loose\": supported values: \"Equivalent\", \"Exact\""),
    ];
    for (kind, obj, want) in cases {
        let got = check(g, kind, obj.clone());
        assert!(got.contains(&want.to_string()), "{obj}: {got:?}");
    }
}

fn stateful_set(template: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": md("db"), "spec": {
        "serviceName": "db", "selector": {"matchLabels": {"app": "db"}}, "template": template,
        "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}})
}

#[test]
fn stateful_set_templates_are_not_validated_as_pods() {
    // A volume mount may name a volumeClaimTemplate, which is no volume of the template.
    let mut tmpl = pod_template(json!({"app": "db"}));
    tmpl["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    assert_eq!(
        check("apps", "StatefulSet", stateful_set(tmpl)),
        Vec::<String>::new()
    );
    // Nor is the rest of the pod spec checked (Kubernetes v1.32 leaves it to pod creation),
    // nor the claim templates.
    let broken = json!({"metadata": {"labels": {"app": "db"}}, "spec": {"containers": [{"name": "a"}, {"name": "a", "image": "x", "ports": [{"containerPort": 70000}]}],
        "volumes": [{"name": "v", "emptyDir": {}, "hostPath": {"path": "/x"}}]}});
    let mut sts = stateful_set(broken);
    sts["spec"]["volumeClaimTemplates"][0]["spec"] =
        json!({"resources": {"requests": {"storage": "1Gi"}}});
    assert_eq!(check("apps", "StatefulSet", sts), Vec::<String>::new());
    // The same template in a Deployment, ReplicaSet or DaemonSet is a pod's and fails.
    let mut tmpl = pod_template(json!({"app": "db"}));
    tmpl["spec"]["containers"][0]["volumeMounts"] = json!([{"name": "data", "mountPath": "/data"}]);
    let not_found =
        "spec.template.spec.containers[0].volumeMounts[0].name: Not found: \"data\"".to_string();
    let sel = json!({"matchLabels": {"app": "db"}});
    for kind in ["Deployment", "ReplicaSet", "DaemonSet"] {
        let obj = json!({"metadata": md("db"), "spec": {"selector": sel, "template": tmpl}});
        assert_eq!(check("apps", kind, obj), vec![not_found.clone()], "{kind}");
    }
}

#[test]
fn stateful_set_template_checks_match_kubernetes() {
    let check_sts = |f: &dyn Fn(&mut Value)| {
        let mut sts = stateful_set(pod_template(json!({"app": "db"})));
        f(&mut sts);
        check("apps", "StatefulSet", sts)
    };
    // Template labels and annotations, at Kubernetes' paths (not under metadata).
    assert_eq!(
        check_sts(&|s| {
            s["spec"]["template"]["metadata"]["labels"]["-bad"] = json!("x");
            s["spec"]["template"]["metadata"]["annotations"] = json!({"a/b/c": "x", "controller.kubernetes.io/pod-deletion-cost": "lots"});
        }),
        vec![
            "spec.template.labels: Invalid value: \"-bad\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".to_string(),
            "spec.template.annotations: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".to_string(),
            "spec.template.annotations[controller.kubernetes.io/pod-deletion-cost]: Invalid value: \"lots\": must be a 32bit integer".to_string(),
        ]
    );
    // The selector must select the template.
    assert_eq!(
        check_sts(&|s| s["spec"]["template"]["metadata"]["labels"] = json!({"app": "web"})),
        vec!["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`".to_string()]
    );
    // No selector matches nothing: both errors.
    assert_eq!(
        check_sts(&|s| {
            s["spec"].as_object_mut().unwrap().remove("selector");
        }),
        vec![
            "spec.selector: Required value".to_string(),
            "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"db\"}: `selector` does not match template `labels`".to_string(),
        ]
    );
    // A selector that does not convert: Invalid with no detail, and no template checks.
    assert_eq!(
        check_sts(&|s| {
            s["spec"]["selector"] = json!({"matchExpressions": [{"key": "app", "operator": "Is", "values": ["db"]}]});
            s["spec"]["template"]["metadata"]["labels"]["-bad"] = json!("x");
        }),
        vec![
            "spec.selector.matchExpressions[0].operator: Invalid value: \"Is\": not a valid selector operator".to_string(),
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Is\", Values:[]string{\"db\"}}}}".to_string(),
        ]
    );
    // Restart policy and active deadline, whatever the selector.
    assert_eq!(
        check_sts(&|s| {
            s["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure");
            s["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(30);
        }),
        vec![
            "spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\"".to_string(),
            "spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in StatefulSet is not Supported".to_string(),
        ]
    );
    // Rolling update maxUnavailable.
    let ru = |mu: Value| {
        check_sts(
            &|s| s["spec"]["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": {"partition": 0, "maxUnavailable": mu}}),
        )
    };
    assert_eq!(ru(json!(2)), Vec::<String>::new());
    assert_eq!(
        ru(json!(0)),
        vec!["spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}: cannot be 0".to_string()]
    );
    assert_eq!(
        ru(json!("150%")),
        vec!["spec.updateStrategy.rollingUpdate.maxUnavailable: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"150%\"}: must not be greater than 100%".to_string()]
    );
}

#[test]
fn workload_selectors_match_kubernetes() {
    let tmpl = pod_template(json!({"app": "web"}));
    // Deployments and ReplicaSets without a selector: required, and matching nothing.
    for kind in ["Deployment", "ReplicaSet"] {
        let obj = json!({"metadata": md("web"), "spec": {"template": tmpl}});
        assert_eq!(
            check("apps", kind, obj),
            vec![
                "spec.selector: Required value".to_string(),
                "spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`".to_string(),
            ],
            "{kind}"
        );
    }
    // One that does not convert: the template is not checked at all.
    let mut bad = tmpl.clone();
    bad["spec"]["containers"][0]["image"] = json!("");
    let obj = json!({"metadata": md("web"), "spec": {"selector": {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]}, "template": bad}});
    assert_eq!(
        check("apps", "ReplicaSet", obj),
        vec![
            "spec.selector.matchExpressions[0].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'".to_string(),
            "spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:\"app\", Operator:\"Exists\", Values:[]string{\"x\"}}}}: invalid label selector".to_string(),
        ]
    );
    // A DaemonSet's selector is not required; without one the template's labels fail.
    assert_eq!(
        check("apps", "DaemonSet", json!({"metadata": md("ds"), "spec": {"template": tmpl}})),
        vec!["spec.template.metadata.labels: Invalid value: map[string]string{\"app\":\"web\"}: `selector` does not match template `labels`".to_string()]
    );
    assert_eq!(
        check("apps", "DaemonSet", json!({"metadata": md("ds"), "spec": {"selector": {}, "template": tmpl}})),
        vec!["spec.selector: Invalid value: v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: empty selector is invalid for daemonset".to_string()]
    );
}

#[test]
fn daemon_set_rules_match_kubernetes() {
    let ds = |f: &dyn Fn(&mut Value)| {
        let mut ds = json!({"metadata": md("ds"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": pod_template(json!({"app": "web"}))}});
        f(&mut ds);
        check("apps", "DaemonSet", ds)
    };
    assert_eq!(
        ds(&|d| d["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(5)),
        vec!["spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported".to_string()]
    );
    let ru =
        |ru: Value| {
            ds(&|d| {
                d["spec"]["updateStrategy"] = json!({"type": "RollingUpdate", "rollingUpdate": ru})
            })
        };
    assert_eq!(
        ru(json!({"maxUnavailable": 0, "maxSurge": 1})),
        Vec::<String>::new()
    );
    // maxUnavailable defaults to 1: a surge alone must set it to 0.
    assert_eq!(
        ru(json!({"maxSurge": "10%"})),
        vec!["spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"10%\"}: may not be set when maxUnavailable is non-zero".to_string()]
    );
    assert_eq!(
        ru(json!({"maxUnavailable": "0%", "maxSurge": 0})),
        vec!["spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0".to_string()]
    );
    assert_eq!(
        ru(json!({"maxUnavailable": 0, "maxSurge": "200%"})),
        vec!["spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: intstr.IntOrString{Type:1, IntVal:0, StrVal:\"200%\"}: must not be greater than 100%".to_string()]
    );
}

#[test]
fn pod_status_writes_check_the_status_not_the_spec() {
    let check_status = |old: &Value, new: &Value| {
        messages(&validate_subresource_update("", "Pod", "status", new, old))
    };
    // A spec today's rules reject (an upper-case container name) does not block a status
    // write, which cannot change it; the metadata the write brings is still checked.
    let mut old = json!({"metadata": {"name": "p", "namespace": "default", "uid": "u", "resourceVersion": "5"},
        "spec": {"restartPolicy": "Never", "nodeName": "n1",
                 "containers": [{"name": "Bad_Name", "image": "busybox"}],
                 "initContainers": [{"name": "side", "image": "busybox", "restartPolicy": "Always"}]},
        "status": {"phase": "Running",
                   "containerStatuses": [{"name": "Bad_Name", "state": {"terminated": {"exitCode": 0}}}],
                   "initContainerStatuses": [{"name": "side", "state": {"terminated": {"exitCode": 0}}}]}});
    defaults::apply("", "Pod", &mut old);
    let mut new = old.clone();
    new["status"]["podIPs"] = json!([{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]);
    assert_eq!(check_status(&old, &new), Vec::<String>::new());
    assert!(!messages(&validate_subresource_update("", "Pod", "", &new, &old)).is_empty());
    new["metadata"]["labels"] = json!({"bad label": "x"});
    assert_eq!(
        check_status(&old, &new).len(),
        1,
        "{:?}",
        check_status(&old, &new)
    );
    // What a status write can get wrong.
    let mut new = old.clone();
    new["status"]["podIPs"] = json!([{"ip": "10.0.0.1"}, {"ip": "10.0.0.1"}, {"ip": "nope"}]);
    new["status"]["hostIPs"] = json!([{"ip": "10.1.0.1"}, {"ip": "fd00::2"}]);
    new["status"]["nominatedNodeName"] = json!("Not_A_Node");
    new["status"]["conditions"] =
        json!([{"type": "Ready", "status": "True"}, {"type": "bad type!", "status": "True"}]);
    new["status"]["containerStatuses"] = json!([{"name": "Bad_Name", "state": {"running": {}}}]);
    new["status"]["initContainerStatuses"] = json!([{"name": "side", "state": {"running": {}}}]);
    let errs = check_status(&old, &new);
    let fields: Vec<&str> = errs.iter().map(|e| e.split(':').next().unwrap()).collect();
    assert_eq!(
        fields,
        [
            "metadata.conditions[1].Type",
            "status.nominatedNodeName",
            "status.containerStatuses[0].state",
            "status.podIPs[2]",
            "status.podIPs",
            "status.podIPs[1]",
        ],
        "{errs:#?}"
    );
    assert!(errs[2].ends_with("Forbidden: may not be transitioned to non-terminated state"));
    assert!(errs[4].ends_with("may specify no more than one IP for each IP family"));
    assert!(errs[5].starts_with("status.podIPs[1]: Duplicate value"));
    // A pod that restarts its containers may bring them back.
    old["spec"]["restartPolicy"] = json!("Always");
    let mut new = old.clone();
    new["status"]["containerStatuses"] = json!([{"name": "Bad_Name", "state": {"running": {}}}]);
    assert_eq!(check_status(&old, &new), Vec::<String>::new());
}

#[test]
fn field_paths_read_as_formatted_ones() {
    for i in [0, 1, 9, 10, 99, 100, 12_345, usize::MAX] {
        assert_eq!(
            super::idx("spec.containers", i),
            format!("spec.containers[{i}]")
        );
        assert_eq!(super::idx("", i), format!("[{i}]"));
    }
    assert_eq!(super::child("", "spec"), "spec");
    assert_eq!(super::child("spec", "nodeName"), "spec.nodeName");
    assert_eq!(super::key("data", "a.b"), "data[a.b]");
}
