//! The objects the workloads write, as JSON built directly into bytes (no typed serialization
//! on the benchmark's side).

use bytes::Bytes;

/// What a create workload creates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    ConfigMap,
    Pod,
    /// A custom resource as small as the ConfigMap, served through [`BENCH_CRD`].
    Custom,
}

impl Kind {
    /// The resource's plural, as in its URL.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::ConfigMap => "configmaps",
            Kind::Pod => "pods",
            Kind::Custom => "benchwidgets",
        }
    }

    /// The collection URL of this kind in namespace `ns`.
    pub fn collection(self, ns: &str) -> String {
        match self {
            Kind::Custom => format!("/apis/{CUSTOM_GROUP}/v1/namespaces/{ns}/benchwidgets"),
            other => collection(ns, other.plural()),
        }
    }

    /// The name of the workload creating this kind.
    pub fn workload_name(self) -> &'static str {
        match self {
            Kind::ConfigMap => "create-configmaps",
            Kind::Pod => "create-pods",
            Kind::Custom => "create-custom",
        }
    }

    /// A new object of this kind named `name`; `n` varies its content.
    pub fn object(self, name: &str, n: u64) -> Bytes {
        match self {
            Kind::ConfigMap => configmap(name, n),
            Kind::Pod => pod(name, n),
            Kind::Custom => custom(name, n),
        }
    }
}

/// The group of the benchmark's custom resource.
pub(crate) const CUSTOM_GROUP: &str = "bench.capstan.dev";

/// The CustomResourceDefinition of create-custom: a namespaced `BenchWidget` whose schema
/// describes the same two string fields the ConfigMap carries.
pub(crate) const BENCH_CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
"metadata":{"name":"benchwidgets.bench.capstan.dev"},
"spec":{"group":"bench.capstan.dev","scope":"Namespaced",
"names":{"plural":"benchwidgets","singular":"benchwidget","kind":"BenchWidget"},
"versions":[{"name":"v1","served":true,"storage":true,
"schema":{"openAPIV3Schema":{"type":"object","properties":{"data":{"type":"object",
"properties":{"index":{"type":"string"},"settings":{"type":"string"}}}}}}}]}}"#;

/// A custom object the size of [`configmap`]'s.
pub(crate) fn custom(name: &str, n: u64) -> Bytes {
    format!(
        concat!(
            r#"{{"apiVersion":"bench.capstan.dev/v1","kind":"BenchWidget","metadata":{{"name":"{name}","#,
            r#""labels":{{"app":"capstan-bench"}}}},"#,
            r#""data":{{"index":"{n}","settings":"log-level=info\nworkers=4\n"}}}}"#
        ),
        name = name,
        n = n
    )
    .into()
}

/// The collection URL of `plural` in namespace `ns`.
pub(crate) fn collection(ns: &str, plural: &str) -> String {
    format!("/api/v1/namespaces/{ns}/{plural}")
}

/// A small ConfigMap (about 200 bytes).
pub(crate) fn configmap(name: &str, n: u64) -> Bytes {
    format!(
        concat!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","#,
            r#""labels":{{"app":"capstan-bench"}}}},"#,
            r#""data":{{"index":"{n}","settings":"log-level=info\nworkers=4\n"}}}}"#
        ),
        name = name,
        n = n
    )
    .into()
}

/// The same ConfigMap at `resource_version` with new data: a replace, with the whole
/// metadata a client that read the object sends back.
pub(crate) fn configmap_update(ns: &str, name: &str, resource_version: &str, n: u64) -> Bytes {
    format!(
        concat!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"{ns}","#,
            r#""resourceVersion":"{rv}","labels":{{"app":"capstan-bench"}}}},"#,
            r#""data":{{"index":"{n}","settings":"log-level=debug\nworkers=8\n"}}}}"#
        ),
        name = name,
        ns = ns,
        rv = resource_version,
        n = n
    )
    .into()
}

/// A JSON merge patch of a ConfigMap's data.
pub(crate) fn configmap_patch(n: u64) -> Bytes {
    format!(r#"{{"data":{{"index":"{n}"}}}}"#).into()
}

/// A realistic Pod of about 2 KB: one container with an image, ports, environment,
/// resources, probes, a volume and a restricted security context. It never gets a node.
pub(crate) fn pod(name: &str, n: u64) -> Bytes {
    format!(
        concat!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}","#,
            r#""labels":{{"app.kubernetes.io/name":"web","app.kubernetes.io/part-of":"capstan-bench","#,
            r#""app.kubernetes.io/version":"1.27.3","tier":"frontend","pod-template-hash":"7d4b9c8f6d"}},"#,
            r#""annotations":{{"prometheus.io/scrape":"true","prometheus.io/port":"9090","#,
            r#""checksum/config":"5f2b8e6c1d4a7f9e0b3c6d8a2e5f1b4c7d9a0e3f6b8c1d4e7a9f2b5c8e0d3a6f"}}}},"#,
            r#""spec":{{"containers":[{{"name":"web","image":"registry.k8s.io/nginx-slim:0.27","#,
            r#""imagePullPolicy":"IfNotPresent","args":["--listen=:8080","--metrics=:9090"],"#,
            r#""ports":[{{"name":"http","containerPort":8080,"protocol":"TCP"}},"#,
            r#"{{"name":"metrics","containerPort":9090,"protocol":"TCP"}}],"#,
            r#""env":[{{"name":"POD_INDEX","value":"{n}"}},{{"name":"LOG_LEVEL","value":"info"}},"#,
            r#"{{"name":"CACHE_SIZE_MB","value":"64"}},{{"name":"UPSTREAM","value":"http://api.default.svc:8080"}},"#,
            r#"{{"name":"POD_NAME","valueFrom":{{"fieldRef":{{"fieldPath":"metadata.name"}}}}}}],"#,
            r#""resources":{{"requests":{{"cpu":"100m","memory":"128Mi"}},"#,
            r#""limits":{{"cpu":"500m","memory":"256Mi"}}}},"#,
            r#""readinessProbe":{{"httpGet":{{"path":"/healthz","port":8080}},"#,
            r#""initialDelaySeconds":5,"periodSeconds":10}},"#,
            r#""livenessProbe":{{"httpGet":{{"path":"/livez","port":8080}},"#,
            r#""periodSeconds":20,"failureThreshold":3}},"#,
            r#""volumeMounts":[{{"name":"config","mountPath":"/etc/web","readOnly":true}},"#,
            r#"{{"name":"tmp","mountPath":"/tmp"}}],"#,
            r#""securityContext":{{"allowPrivilegeEscalation":false,"runAsNonRoot":true,"#,
            r#""runAsUser":65532,"capabilities":{{"drop":["ALL"]}},"#,
            r#""seccompProfile":{{"type":"RuntimeDefault"}}}}}}],"#,
            r#""volumes":[{{"name":"config","configMap":{{"name":"web-config"}}}},"#,
            r#"{{"name":"tmp","emptyDir":{{"sizeLimit":"64Mi"}}}}],"#,
            r#""topologySpreadConstraints":[{{"maxSkew":1,"topologyKey":"topology.kubernetes.io/zone","#,
            r#""whenUnsatisfiable":"ScheduleAnyway","#,
            r#""labelSelector":{{"matchLabels":{{"app.kubernetes.io/name":"web"}}}}}}],"#,
            r#""nodeSelector":{{"kubernetes.io/os":"linux"}},"#,
            r#""tolerations":[{{"key":"node.kubernetes.io/not-ready","operator":"Exists","#,
            r#""effect":"NoExecute","tolerationSeconds":300}}],"#,
            r#""restartPolicy":"Always","terminationGracePeriodSeconds":30,"#,
            r#""dnsPolicy":"ClusterFirst","automountServiceAccountToken":false}}}}"#
        ),
        name = name,
        n = n
    )
    .into()
}

/// The `metadata.resourceVersion` of an object in a response.
pub(crate) fn resource_version(body: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Metadata,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        #[serde(rename = "resourceVersion")]
        resource_version: Option<String>,
    }
    serde_json::from_slice::<Object>(body)
        .ok()?
        .metadata
        .resource_version
}

/// How many items a list response holds.
pub(crate) fn list_items(body: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct List {
        items: Option<Vec<serde::de::IgnoredAny>>,
    }
    let list: List = serde_json::from_slice(body).ok()?;
    Some(list.items.map_or(0, |i| i.len() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn objects_are_valid_json_of_the_intended_size() {
        let pod = pod("pod-12-345", 345);
        let v: Value = serde_json::from_slice(&pod).unwrap();
        assert_eq!(v["metadata"]["name"], "pod-12-345");
        assert_eq!(v["spec"]["containers"][0]["env"][0]["value"], "345");
        assert!((1900..2300).contains(&pod.len()), "{} bytes", pod.len());

        let cm: Value = serde_json::from_slice(&configmap("cm-1", 7)).unwrap();
        assert_eq!(cm["data"]["index"], "7");
        let update: Value =
            serde_json::from_slice(&configmap_update("ns", "cm-1", "42", 8)).unwrap();
        assert_eq!(update["metadata"]["resourceVersion"], "42");
        let patch: Value = serde_json::from_slice(&configmap_patch(9)).unwrap();
        assert_eq!(patch["data"]["index"], "9");
    }

    #[test]
    fn reads_resource_versions_and_list_sizes() {
        assert_eq!(
            resource_version(br#"{"metadata":{"name":"a","resourceVersion":"17"},"data":{}}"#),
            Some("17".to_owned())
        );
        assert_eq!(resource_version(b"{}"), None);
        assert_eq!(
            list_items(br#"{"metadata":{},"items":[{"a":1},{"b":[2]}]}"#),
            Some(2)
        );
        assert_eq!(list_items(br#"{"metadata":{},"items":null}"#), Some(0));
    }
}
