//! Container environment: env (value, fieldRef, resourceFieldRef, configMapKeyRef,
//! secretKeyRef), envFrom, and the service link variables.
//!
//! As Kubernetes' `makeEnvironmentVariables`: envFrom first (later sources and then env
//! override earlier names), env values expanded with `$(VAR)` against what is defined so
//! far and the service variables, then the service variables the container did not set.
//! Every service of the pod's namespace gives docker-link style variables when
//! `enableServiceLinks` is on; the master service `default/kubernetes` always does.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, Pod, Service};

use crate::volumes::downward::{self, NodeInfo};
use crate::volumes::objects::{Live, Objects};
use crate::Kubelet;

/// The environment of `container`, in Kubernetes' order. An error is the message of a
/// CreateContainerConfigError (for example `configmap "x" not found`). The pod IPs are
/// taken from the pod's status; see [`container_env_with_ips`].
pub async fn container_env(
    k: &Kubelet,
    pod: &Pod,
    container: &Container,
) -> Result<Vec<(String, String)>, String> {
    let ips: Vec<String> = pod
        .status
        .as_ref()
        .map(|s| {
            let mut ips: Vec<String> = s
                .pod_ips
                .iter()
                .flatten()
                .map(|p| p.ip.clone())
                .filter(|ip| !ip.is_empty())
                .collect();
            if ips.is_empty() {
                ips.extend(s.pod_ip.clone().filter(|ip| !ip.is_empty()));
            }
            ips
        })
        .unwrap_or_default();
    container_env_with_ips(k, pod, container, &ips).await
}

/// [`container_env`] with the pod's IPs as the sandbox reported them (status.podIP(s) of
/// the env, primary first), for the first start before the status carries them.
pub async fn container_env_with_ips(
    k: &Kubelet,
    pod: &Pod,
    container: &Container,
    pod_ips: &[String],
) -> Result<Vec<(String, String)>, String> {
    let live = Live::new(k);
    let mut events = Vec::new();
    let result = build_env(&live, pod, container, pod_ips, &mut events).await;
    for (reason, message) in events {
        k.recorder.warning(pod, &reason, message);
    }
    result
}

/// Names and values in order; setting an existing name replaces its value in place.
#[derive(Default)]
struct OrderedEnv {
    vars: Vec<(String, String)>,
    index: HashMap<String, usize>,
}

impl OrderedEnv {
    fn set(&mut self, name: String, value: String) {
        match self.index.get(&name) {
            Some(&i) => self.vars[i].1 = value,
            None => {
                self.index.insert(name.clone(), self.vars.len());
                self.vars.push((name, value));
            }
        }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.index.get(name).map(|&i| self.vars[i].1.as_str())
    }
}

/// The environment of `container` from `objects`. Warnings to record on the pod are
/// pushed to `events` as (reason, message).
pub async fn build_env(
    objects: &dyn Objects,
    pod: &Pod,
    container: &Container,
    pod_ips: &[String],
    events: &mut Vec<(String, String)>,
) -> Result<Vec<(String, String)>, String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let spec = pod.spec.as_ref();
    let enable_links = spec.and_then(|s| s.enable_service_links).unwrap_or(true);
    let services = objects.services(ns).await?;
    let service_env = service_env(&services, ns, enable_links);
    let service_map: HashMap<&str, &str> = service_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();

    let mut config_maps = HashMap::new();
    let mut secrets = HashMap::new();
    let mut env = OrderedEnv::default();

    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, data): (&str, String, BTreeMap<String, String>) = if let Some(r) =
            &from.config_map_ref
        {
            let Some(cm) =
                get_config_map(objects, &mut config_maps, ns, &r.name, r.optional).await?
            else {
                continue;
            };
            (
                "configMap",
                r.name.clone(),
                cm.data.clone().unwrap_or_default(),
            )
        } else if let Some(r) = &from.secret_ref {
            let Some(s) = get_secret(objects, &mut secrets, ns, &r.name, r.optional).await? else {
                continue;
            };
            let data = s
                .data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            ("secret", r.name.clone(), data)
        } else {
            continue;
        };
        let mut invalid = Vec::new();
        for (key, value) in data {
            let name = format!("{prefix}{key}");
            if !is_env_var_name(&name) {
                invalid.push(name);
                continue;
            }
            env.set(name, value);
        }
        if !invalid.is_empty() {
            invalid.sort();
            events.push((
                "InvalidEnvironmentVariableNames".into(),
                format!(
                    "Keys [{}] from the EnvFrom {kind} {ns}/{name} were skipped since they are considered invalid environment variable names.",
                    invalid.join(", ")
                ),
            ));
        }
    }

    let node = objects.node();
    for var in container.env.iter().flatten() {
        let value = var.value.clone().unwrap_or_default();
        let resolved = if !value.is_empty() {
            expand_with(&value, |name| {
                env.get(name)
                    .or_else(|| service_map.get(name).copied())
                    .map(str::to_string)
            })
        } else if let Some(from) = &var.value_from {
            if let Some(f) = &from.field_ref {
                field_ref_value(
                    pod,
                    f.api_version.as_deref().unwrap_or("v1"),
                    &f.field_path,
                    pod_ips,
                    &node,
                )?
            } else if let Some(r) = &from.resource_field_ref {
                match r.container_name.as_deref().filter(|n| !n.is_empty()) {
                    Some(other) => downward::resource_value_by_container(r, pod, other, &node)?,
                    None => downward::container_resource_value(
                        r,
                        &downward::with_default_limits(container, &node),
                    )?,
                }
            } else if let Some(r) = &from.config_map_key_ref {
                let optional = r.optional.unwrap_or(false);
                let Some(cm) =
                    get_config_map(objects, &mut config_maps, ns, &r.name, r.optional).await?
                else {
                    continue;
                };
                match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
                    Some(v) => v.clone(),
                    None if optional => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {ns}/{}",
                            r.key, r.name
                        ))
                    }
                }
            } else if let Some(r) = &from.secret_key_ref {
                let optional = r.optional.unwrap_or(false);
                let Some(s) = get_secret(objects, &mut secrets, ns, &r.name, r.optional).await?
                else {
                    continue;
                };
                match s.data.as_ref().and_then(|d| d.get(&r.key)) {
                    Some(v) => String::from_utf8_lossy(&v.0).into_owned(),
                    None if optional => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in Secret {ns}/{}",
                            r.key, r.name
                        ))
                    }
                }
            } else {
                String::new()
            }
        } else {
            String::new()
        };
        env.set(var.name.clone(), resolved);
    }

    let mut out = env.vars;
    let defined: std::collections::HashSet<String> = out.iter().map(|(k, _)| k.clone()).collect();
    for (k, v) in service_env {
        if !defined.contains(&k) {
            out.push((k, v));
        }
    }
    Ok(out)
}

async fn get_config_map(
    objects: &dyn Objects,
    seen: &mut HashMap<String, Arc<k8s_openapi::api::core::v1::ConfigMap>>,
    ns: &str,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<Arc<k8s_openapi::api::core::v1::ConfigMap>>, String> {
    if let Some(cm) = seen.get(name) {
        return Ok(Some(cm.clone()));
    }
    match objects.config_map(ns, name).await? {
        Some(cm) => {
            seen.insert(name.to_string(), cm.clone());
            Ok(Some(cm))
        }
        None if optional.unwrap_or(false) => Ok(None),
        None => Err(format!("configmap {name:?} not found")),
    }
}

async fn get_secret(
    objects: &dyn Objects,
    seen: &mut HashMap<String, Arc<k8s_openapi::api::core::v1::Secret>>,
    ns: &str,
    name: &str,
    optional: Option<bool>,
) -> Result<Option<Arc<k8s_openapi::api::core::v1::Secret>>, String> {
    if let Some(s) = seen.get(name) {
        return Ok(Some(s.clone()));
    }
    match objects.secret(ns, name).await? {
        Some(s) => {
            seen.insert(name.to_string(), s.clone());
            Ok(Some(s))
        }
        None if optional.unwrap_or(false) => Ok(None),
        None => Err(format!("secret {name:?} not found")),
    }
}

/// An env fieldRef's value (`podFieldSelectorRuntimeValue`).
fn field_ref_value(
    pod: &Pod,
    api_version: &str,
    path: &str,
    pod_ips: &[String],
    node: &NodeInfo,
) -> Result<String, String> {
    let path = downward::convert_field_label(api_version, path)?;
    let spec = pod.spec.as_ref();
    match path.as_str() {
        "spec.nodeName" => Ok(spec.and_then(|s| s.node_name.clone()).unwrap_or_default()),
        "spec.serviceAccountName" => Ok(spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default()),
        "status.hostIP" | "status.hostIPs" => {
            if node.host_ips.is_empty() {
                return Err(format!(
                    "host IP unknown; known addresses: [{}]",
                    node.addresses.join(" ")
                ));
            }
            if path == "status.hostIP" {
                Ok(node.host_ips[0].clone())
            } else {
                Ok(node.host_ips.join(","))
            }
        }
        "status.podIP" => Ok(pod_ips.first().cloned().unwrap_or_default()),
        "status.podIPs" => Ok(pod_ips.join(",")),
        other => downward::extract_field_path(pod, other),
    }
}

/// Whether `name` may name an environment variable: printable ASCII without `=`
/// (Kubernetes v1.32's relaxed rule).
pub fn is_env_var_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('=') && name.bytes().all(|b| (0x20..0x7f).contains(&b))
}

/// `FOO-BAR` → `FOO_BAR`, as service names become variable prefixes.
fn env_name(service: &str) -> String {
    service.replace('-', "_").to_uppercase()
}

/// The service link variables of a pod in `ns`: the master service `default/kubernetes`
/// always, the namespace's services when `enable_links`. Services without a cluster IP
/// (headless, ExternalName) give none. Sorted by service name.
pub fn service_env(
    services: &[Arc<Service>],
    ns: &str,
    enable_links: bool,
) -> Vec<(String, String)> {
    let mut chosen: BTreeMap<String, &Service> = BTreeMap::new();
    for svc in services {
        let Some(ip) = svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) else {
            continue;
        };
        if ip.is_empty() || ip == "None" {
            continue;
        }
        let name = svc.metadata.name.clone().unwrap_or_default();
        let svc_ns = svc.metadata.namespace.as_deref().unwrap_or_default();
        if svc_ns == "default" && name == "kubernetes" {
            chosen.entry(name).or_insert(svc);
        } else if svc_ns == ns && enable_links {
            chosen.insert(name, svc);
        }
    }
    let mut out = Vec::new();
    for (name, svc) in chosen {
        let Some(spec) = svc.spec.as_ref() else {
            continue;
        };
        let ip = spec.cluster_ip.clone().unwrap_or_default();
        let prefix = env_name(&name);
        let ports = spec.ports.as_deref().unwrap_or_default();
        out.push((format!("{prefix}_SERVICE_HOST"), ip.clone()));
        let Some(first) = ports.first() else {
            continue;
        };
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for p in ports {
            if let Some(pn) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((format!("{port_var}_{}", env_name(pn)), p.port.to_string()));
            }
        }
        // Docker link variables.
        for (i, p) in ports.iter().enumerate() {
            let proto = p.protocol.clone().unwrap_or_else(|| "TCP".into());
            let lower = proto.to_lowercase();
            let host_port = match ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]:{}", p.port),
                _ => format!("{ip}:{}", p.port),
            };
            let url = format!("{lower}://{host_port}");
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.push((pp.clone(), url));
            out.push((format!("{pp}_PROTO"), lower));
            out.push((format!("{pp}_PORT"), p.port.to_string()));
            out.push((format!("{pp}_ADDR"), ip.clone()));
        }
    }
    out
}

/// Expand `$(VAR)` references in a command or argument (`$$` escapes `$`); unknown
/// references stay as written.
pub fn expand(text: &str, env: &[(String, String)]) -> String {
    let map: HashMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    expand_with(text, |name| map.get(name).map(|v| v.to_string()))
}

/// Kubernetes' `$(VAR)` expansion with a lookup; a name the lookup does not know stays
/// `$(NAME)`. `$$` is a literal `$`, a `$` before anything else is kept, and an unclosed
/// `$(` is kept as written.
pub fn expand_with(text: &str, mut lookup: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        match after.chars().next() {
            // A trailing `$` stays.
            None => {
                out.push('$');
                rest = after;
            }
            Some('$') => {
                out.push('$');
                rest = &after[1..];
            }
            Some('(') => match after[1..].find(')') {
                Some(end) => {
                    let name = &after[1..1 + end];
                    match lookup(name) {
                        Some(v) => out.push_str(&v),
                        None => {
                            out.push_str("$(");
                            out.push_str(name);
                            out.push(')');
                        }
                    }
                    rest = &after[end + 2..];
                }
                None => {
                    out.push_str("$(");
                    rest = &after[1..];
                }
            },
            Some(c) => {
                out.push('$');
                out.push(c);
                rest = &after[c.len_utf8()..];
            }
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volumes::objects::fake::Fake;
    use k8s_openapi::api::core::v1::{
        ConfigMap, ConfigMapEnvSource, ConfigMapKeySelector, EnvFromSource, EnvVar, EnvVarSource,
        ObjectFieldSelector, PodSpec, ResourceFieldSelector, ResourceRequirements, Secret,
        SecretKeySelector, ServicePort, ServiceSpec,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use k8s_openapi::ByteString;

    fn vars(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn expansion_corner_cases() {
        let env = vars(&[("A", "a"), ("B", "b$(A)"), ("EMPTY", "")]);
        let e = |s: &str| expand(s, &env);
        assert_eq!(e("$(A)"), "a");
        assert_eq!(e("x$(A)y$(A)"), "xaya");
        assert_eq!(e("$(B)"), "b$(A)", "values are not expanded again");
        assert_eq!(e("$(NOPE)"), "$(NOPE)");
        assert_eq!(e("$$(A)"), "$(A)");
        assert_eq!(e("$$$(A)"), "$a");
        assert_eq!(e("$$"), "$");
        assert_eq!(e("$"), "$");
        assert_eq!(e("a$"), "a$");
        assert_eq!(e("$A"), "$A");
        assert_eq!(e("$(A"), "$(A");
        assert_eq!(e("$(A $(A)"), "$(A $(A)");
        assert_eq!(e("$()"), "$()");
        assert_eq!(e("$(EMPTY)x"), "x");
        assert_eq!(e("$é$(A)"), "$éa");
        assert_eq!(e("no refs"), "no refs");
        assert_eq!(e(""), "");
    }

    fn service(
        ns: &str,
        name: &str,
        ip: &str,
        ports: &[(Option<&str>, i32, Option<&str>)],
    ) -> Arc<Service> {
        Arc::new(Service {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p, proto)| ServicePort {
                            name: n.map(str::to_string),
                            port: *p,
                            protocol: proto.map(str::to_string),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn service_variables() {
        let services = vec![
            service(
                "default",
                "kubernetes",
                "10.96.0.1",
                &[(Some("https"), 443, Some("TCP"))],
            ),
            service(
                "app",
                "my-db",
                "10.96.0.9",
                &[
                    (None, 5432, None),
                    (Some("metrics-port"), 9187, Some("UDP")),
                ],
            ),
            service("app", "headless", "None", &[(None, 80, None)]),
            service("other", "elsewhere", "10.96.0.7", &[(None, 80, None)]),
        ];
        let env: BTreeMap<String, String> =
            service_env(&services, "app", true).into_iter().collect();
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("KUBERNETES_SERVICE_HOST"), Some("10.96.0.1"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT"), Some("443"));
        assert_eq!(get("KUBERNETES_SERVICE_PORT_HTTPS"), Some("443"));
        assert_eq!(get("KUBERNETES_PORT"), Some("tcp://10.96.0.1:443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP"), Some("tcp://10.96.0.1:443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_PROTO"), Some("tcp"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_PORT"), Some("443"));
        assert_eq!(get("KUBERNETES_PORT_443_TCP_ADDR"), Some("10.96.0.1"));
        assert_eq!(get("MY_DB_SERVICE_HOST"), Some("10.96.0.9"));
        assert_eq!(get("MY_DB_SERVICE_PORT"), Some("5432"));
        assert_eq!(get("MY_DB_SERVICE_PORT_METRICS_PORT"), Some("9187"));
        assert_eq!(get("MY_DB_PORT"), Some("tcp://10.96.0.9:5432"));
        assert_eq!(get("MY_DB_PORT_9187_UDP"), Some("udp://10.96.0.9:9187"));
        assert_eq!(get("MY_DB_PORT_9187_UDP_PROTO"), Some("udp"));
        assert!(get("HEADLESS_SERVICE_HOST").is_none());
        assert!(get("ELSEWHERE_SERVICE_HOST").is_none());
        assert_eq!(env.len(), 8 + 2 + 1 + 1 + 4 + 4);

        // enableServiceLinks false: only the master service.
        let env = service_env(&services, "app", false);
        assert!(env.iter().all(|(k, _)| k.starts_with("KUBERNETES_")));
        assert_eq!(env.len(), 8);

        let v6 = vec![service("x", "v6", "fd00::1", &[(None, 80, None)])];
        let env: BTreeMap<String, String> = service_env(&v6, "x", true).into_iter().collect();
        assert_eq!(env["V6_PORT"], "tcp://[fd00::1]:80");
    }

    fn pod(env: Vec<EnvVar>, env_from: Vec<EnvFromSource>) -> (Pod, Container) {
        let c = Container {
            name: "main".into(),
            env: Some(env),
            env_from: Some(env_from),
            resources: Some(ResourceRequirements {
                limits: Some(BTreeMap::from([(
                    "memory".to_string(),
                    Quantity("128Mi".into()),
                )])),
                requests: Some(BTreeMap::from([(
                    "cpu".to_string(),
                    Quantity("250m".into()),
                )])),
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = Pod {
            metadata: ObjectMeta {
                name: Some("p".into()),
                namespace: Some("app".into()),
                uid: Some("uid-1".into()),
                labels: Some(BTreeMap::from([("tier".to_string(), "web".to_string())])),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![c.clone()],
                node_name: Some("node-a".into()),
                service_account_name: Some("builder".into()),
                enable_service_links: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        };
        (p, c)
    }

    fn value(name: &str, v: &str) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: Some(v.into()),
            value_from: None,
        }
    }

    fn from(name: &str, src: EnvVarSource) -> EnvVar {
        EnvVar {
            name: name.into(),
            value: None,
            value_from: Some(src),
        }
    }

    fn field(path: &str) -> EnvVarSource {
        EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                api_version: Some("v1".into()),
                field_path: path.into(),
            }),
            ..Default::default()
        }
    }

    fn cm_key(name: &str, key: &str, optional: Option<bool>) -> EnvVarSource {
        EnvVarSource {
            config_map_key_ref: Some(ConfigMapKeySelector {
                name: name.into(),
                key: key.into(),
                optional,
            }),
            ..Default::default()
        }
    }

    fn fake() -> Fake {
        let f = Fake {
            node: NodeInfo {
                allocatable: BTreeMap::from([("cpu".to_string(), Quantity("2".into()))]),
                host_ips: vec!["192.168.1.5".into()],
                addresses: vec![],
            },
            ..Default::default()
        };
        f.services.lock().push(service(
            "default",
            "kubernetes",
            "10.96.0.1",
            &[(Some("https"), 443, None)],
        ));
        f.services
            .lock()
            .push(service("app", "web", "10.96.0.2", &[(None, 80, None)]));
        f.put_config_map(
            "app",
            ConfigMap {
                metadata: ObjectMeta {
                    name: Some("cfg".into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([
                    ("color".to_string(), "blue".to_string()),
                    ("MODE".to_string(), "fast".to_string()),
                    ("a=b".to_string(), "bad".to_string()),
                ])),
                ..Default::default()
            },
        );
        f.put_secret(
            "app",
            Secret {
                metadata: ObjectMeta {
                    name: Some("creds".into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "password".to_string(),
                    ByteString(b"s3cret".to_vec()),
                )])),
                ..Default::default()
            },
        );
        f
    }

    async fn run(
        f: &Fake,
        p: &Pod,
        c: &Container,
    ) -> (Result<Vec<(String, String)>, String>, Vec<(String, String)>) {
        let mut events = Vec::new();
        let r = build_env(
            f,
            p,
            c,
            &["10.244.0.5".to_string(), "fd00::5".to_string()],
            &mut events,
        )
        .await;
        (r, events)
    }

    #[tokio::test]
    async fn env_sources_order_and_expansion() {
        let f = fake();
        let (p, c) = pod(
            vec![
                value("GREETING", "hi $(color) on $(WEB_SERVICE_HOST) $(MISSING)"),
                from("NAME", field("metadata.name")),
                from("NS", field("metadata.namespace")),
                from("UID", field("metadata.uid")),
                from("TIER", field("metadata.labels['tier']")),
                from("NODE", field("spec.nodeName")),
                from("SA", field("spec.serviceAccountName")),
                from("HOST_IP", field("status.hostIP")),
                from("POD_IP", field("status.podIP")),
                from("POD_IPS", field("status.podIPs")),
                from("COLOR2", cm_key("cfg", "color", None)),
                from(
                    "PW",
                    EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: "creds".into(),
                            key: "password".into(),
                            optional: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "MEM",
                    EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "limits.memory".into(),
                            divisor: Some(Quantity("1Mi".into())),
                            container_name: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "CPU_LIMIT",
                    EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "limits.cpu".into(),
                            divisor: None,
                            container_name: None,
                        }),
                        ..Default::default()
                    },
                ),
                from(
                    "CPU_REQ",
                    EnvVarSource {
                        resource_field_ref: Some(ResourceFieldSelector {
                            resource: "requests.cpu".into(),
                            divisor: Some(Quantity("1m".into())),
                            container_name: None,
                        }),
                        ..Default::default()
                    },
                ),
                value("MODE", "override"),
                from("OPT", cm_key("absent", "k", Some(true))),
                from("OPT_KEY", cm_key("cfg", "absent", Some(true))),
            ],
            vec![EnvFromSource {
                config_map_ref: Some(ConfigMapEnvSource {
                    name: "cfg".into(),
                    optional: None,
                }),
                prefix: None,
                secret_ref: None,
            }],
        );
        let (r, events) = run(&f, &p, &c).await;
        let env = r.unwrap();
        let map: BTreeMap<&str, &str> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(map["GREETING"], "hi blue on 10.96.0.2 $(MISSING)");
        assert_eq!(map["NAME"], "p");
        assert_eq!(map["NS"], "app");
        assert_eq!(map["UID"], "uid-1");
        assert_eq!(map["TIER"], "web");
        assert_eq!(map["NODE"], "node-a");
        assert_eq!(map["SA"], "builder");
        assert_eq!(map["HOST_IP"], "192.168.1.5");
        assert_eq!(map["POD_IP"], "10.244.0.5");
        assert_eq!(map["POD_IPS"], "10.244.0.5,fd00::5");
        assert_eq!(map["COLOR2"], "blue");
        assert_eq!(map["PW"], "s3cret");
        assert_eq!(map["MEM"], "128");
        assert_eq!(map["CPU_LIMIT"], "2", "no limit: the node's allocatable");
        assert_eq!(map["CPU_REQ"], "250");
        assert_eq!(map["MODE"], "override");
        assert_eq!(map["color"], "blue");
        assert!(!map.contains_key("OPT"));
        assert!(!map.contains_key("OPT_KEY"));
        assert!(!map.contains_key("a=b"));
        assert_eq!(map["KUBERNETES_SERVICE_HOST"], "10.96.0.1");
        assert_eq!(map["WEB_SERVICE_PORT"], "80");
        // envFrom first (sorted keys), then env in order, then services.
        let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(&names[..3], &["MODE", "color", "GREETING"]);
        assert!(
            names
                .iter()
                .position(|n| *n == "KUBERNETES_SERVICE_HOST")
                .unwrap()
                > names.iter().position(|n| *n == "OPT_KEY").unwrap_or(0)
        );
        assert_eq!(
            events,
            vec![(
                "InvalidEnvironmentVariableNames".to_string(),
                "Keys [a=b] from the EnvFrom configMap app/cfg were skipped since they are considered invalid environment variable names.".to_string()
            )]
        );
    }

    #[tokio::test]
    async fn env_errors_as_kubernetes() {
        let f = fake();
        let (p, c) = pod(vec![from("X", cm_key("missing", "k", None))], vec![]);
        assert_eq!(
            run(&f, &p, &c).await.0.unwrap_err(),
            "configmap \"missing\" not found"
        );

        let (p, c) = pod(vec![from("X", cm_key("cfg", "nokey", Some(false)))], vec![]);
        assert_eq!(
            run(&f, &p, &c).await.0.unwrap_err(),
            "couldn't find key nokey in ConfigMap app/cfg"
        );

        let (p, c) = pod(
            vec![from(
                "X",
                EnvVarSource {
                    secret_key_ref: Some(SecretKeySelector {
                        name: "creds".into(),
                        key: "user".into(),
                        optional: None,
                    }),
                    ..Default::default()
                },
            )],
            vec![],
        );
        assert_eq!(
            run(&f, &p, &c).await.0.unwrap_err(),
            "couldn't find key user in Secret app/creds"
        );

        let (p, c) = pod(
            vec![],
            vec![EnvFromSource {
                secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
                    name: "nosecret".into(),
                    optional: None,
                }),
                ..Default::default()
            }],
        );
        assert_eq!(
            run(&f, &p, &c).await.0.unwrap_err(),
            "secret \"nosecret\" not found"
        );

        // An optional missing envFrom source is skipped; a prefix applies to every key.
        let (p, c) = pod(
            vec![],
            vec![
                EnvFromSource {
                    secret_ref: Some(k8s_openapi::api::core::v1::SecretEnvSource {
                        name: "nosecret".into(),
                        optional: Some(true),
                    }),
                    ..Default::default()
                },
                EnvFromSource {
                    config_map_ref: Some(ConfigMapEnvSource {
                        name: "cfg".into(),
                        optional: None,
                    }),
                    prefix: Some("CFG_".into()),
                    ..Default::default()
                },
            ],
        );
        let env = run(&f, &p, &c).await.0.unwrap();
        assert!(env.iter().any(|(k, v)| k == "CFG_color" && v == "blue"));

        let (p, c) = pod(vec![from("X", field("spec.containers"))], vec![]);
        assert_eq!(
            run(&f, &p, &c).await.0.unwrap_err(),
            "field label not supported: spec.containers"
        );
    }
}
