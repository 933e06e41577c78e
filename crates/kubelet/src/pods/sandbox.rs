//! The pod sandbox: its CRI configuration (metadata, labels, hostname, log directory, DNS,
//! host ports, namespaces, sysctls, security context) and the kubelet-managed /etc/hosts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use capstan_cri::v1 as cri;
use k8s_openapi::api::core::v1::{Container, Pod, SeccompProfile};

use super::actions::{containers, host_network, init_containers};
use super::runtime::{LABEL_POD_NAME, LABEL_POD_NAMESPACE, LABEL_POD_UID};
use super::util::{pod_name, pod_namespace, pod_uid};
use crate::Kubelet;

const HOST_RESOLV_CONF: &str = "/etc/resolv.conf";
const MAX_HOSTNAME: usize = 63;

/// `LOGS/<namespace>_<name>_<uid>`: where the pod's container logs go.
pub fn log_directory(k: &Kubelet, pod: &Pod) -> PathBuf {
    k.opts.pod_logs_dir.join(format!(
        "{}_{}_{}",
        pod_namespace(pod),
        pod_name(pod),
        pod_uid(pod)
    ))
}

/// The labels of the pod's sandbox: the pod's own plus the kubelet's.
pub fn sandbox_labels(pod: &Pod) -> HashMap<String, String> {
    let mut l: HashMap<String, String> = pod
        .metadata
        .labels
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    l.insert(LABEL_POD_NAME.into(), pod_name(pod).into());
    l.insert(LABEL_POD_NAMESPACE.into(), pod_namespace(pod).into());
    l.insert(LABEL_POD_UID.into(), pod_uid(pod).into());
    l
}

/// The pod's host name and, with a subdomain, its domain
/// (`<subdomain>.<namespace>.svc.<cluster domain>`).
pub fn hostname_and_domain(k: &Kubelet, pod: &Pod) -> (String, String) {
    let spec = pod.spec.as_ref();
    let mut hostname = spec
        .and_then(|s| s.hostname.clone())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod_name(pod).to_string());
    if hostname.len() > MAX_HOSTNAME {
        hostname.truncate(MAX_HOSTNAME);
        while hostname.ends_with(['-', '.']) {
            hostname.pop();
        }
    }
    let domain = spec
        .and_then(|s| s.subdomain.clone())
        .filter(|s| !s.is_empty())
        .map(|sub| format!("{sub}.{}.svc.{}", pod_namespace(pod), k.opts.cluster_domain))
        .unwrap_or_default();
    (hostname, domain)
}

/// The nameservers, search domains and options of a resolv.conf.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolv {
    pub servers: Vec<String>,
    pub searches: Vec<String>,
    pub options: Vec<String>,
}

pub fn parse_resolv_conf(text: &str) -> Resolv {
    let mut r = Resolv::default();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or_default();
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => r.servers.extend(f.next().map(str::to_string)),
            Some("search") | Some("domain") => {
                r.searches = f.map(|s| s.trim_end_matches('.').to_string()).collect()
            }
            Some("options") => r.options.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    r
}

fn merge_options(base: &mut Vec<String>, extra: &[(String, Option<String>)]) {
    for (name, value) in extra {
        let text = match value {
            Some(v) => format!("{name}:{v}"),
            None => name.clone(),
        };
        if let Some(existing) = base
            .iter_mut()
            .find(|o| o.split(':').next() == Some(name.as_str()))
        {
            *existing = text;
        } else {
            base.push(text);
        }
    }
}

/// What `dnsPolicy` and `dnsConfig` give the pod. `warn` is called with an event message
/// when ClusterFirst cannot be honoured.
pub fn dns_config(
    k: &Kubelet,
    pod: &Pod,
    host: &Resolv,
    mut warn: impl FnMut(&str),
) -> cri::DnsConfig {
    let spec = pod.spec.as_ref();
    let policy = spec
        .and_then(|s| s.dns_policy.as_deref())
        .unwrap_or("ClusterFirst");
    let hostnet = host_network(pod);
    let cluster = match policy {
        "ClusterFirstWithHostNet" => true,
        "ClusterFirst" => !hostnet,
        _ => false,
    };
    let mut cfg = cri::DnsConfig::default();
    if policy == "None" {
        // Only dnsConfig.
    } else if cluster && !k.opts.cluster_dns.is_empty() {
        let domain = &k.opts.cluster_domain;
        cfg.servers = k.opts.cluster_dns.iter().map(|ip| ip.to_string()).collect();
        let ns = pod_namespace(pod);
        cfg.searches = vec![
            format!("{ns}.svc.{domain}"),
            format!("svc.{domain}"),
            domain.clone(),
        ];
        for s in &host.searches {
            if !cfg.searches.contains(s) {
                cfg.searches.push(s.clone());
            }
        }
        cfg.options = vec!["ndots:5".into()];
    } else {
        if cluster {
            warn("kubelet does not have ClusterDNS IP configured and cannot create Pod using \"ClusterFirst\" policy. Falling back to \"Default\" policy.");
        }
        cfg.servers = host.servers.clone();
        cfg.searches = host.searches.clone();
        cfg.options = host.options.clone();
    }
    if let Some(d) = spec.and_then(|s| s.dns_config.as_ref()) {
        for s in d.nameservers.iter().flatten() {
            if !cfg.servers.contains(s) {
                cfg.servers.push(s.clone());
            }
        }
        for s in d.searches.iter().flatten() {
            if !cfg.searches.contains(s) {
                cfg.searches.push(s.clone());
            }
        }
        let opts: Vec<(String, Option<String>)> = d
            .options
            .iter()
            .flatten()
            .filter_map(|o| o.name.clone().map(|n| (n, o.value.clone())))
            .collect();
        merge_options(&mut cfg.options, &opts);
    }
    cfg.servers.truncate(3);
    cfg.searches.truncate(32);
    cfg
}

fn protocol(p: Option<&str>) -> i32 {
    match p {
        Some("UDP") => cri::Protocol::Udp as i32,
        Some("SCTP") => cri::Protocol::Sctp as i32,
        _ => cri::Protocol::Tcp as i32,
    }
}

/// The host ports of every container.
pub fn port_mappings(pod: &Pod) -> Vec<cri::PortMapping> {
    let mut out = Vec::new();
    for c in init_containers(pod).iter().chain(containers(pod)) {
        for p in c.ports.iter().flatten() {
            let host_port = p.host_port.unwrap_or(0);
            if host_port <= 0 {
                continue;
            }
            out.push(cri::PortMapping {
                protocol: protocol(p.protocol.as_deref()),
                container_port: p.container_port,
                host_port,
                host_ip: p.host_ip.clone().unwrap_or_default(),
            });
        }
    }
    out
}

/// The namespaces of the pod's sandbox and containers.
pub fn namespace_options(pod: &Pod) -> cri::NamespaceOption {
    let spec = pod.spec.as_ref();
    let flag = |f: fn(&k8s_openapi::api::core::v1::PodSpec) -> Option<bool>| {
        spec.and_then(f).unwrap_or(false)
    };
    cri::NamespaceOption {
        network: if flag(|s| s.host_network) {
            cri::NamespaceMode::Node as i32
        } else {
            cri::NamespaceMode::Pod as i32
        },
        pid: if flag(|s| s.host_pid) {
            cri::NamespaceMode::Node as i32
        } else if flag(|s| s.share_process_namespace) {
            cri::NamespaceMode::Pod as i32
        } else {
            cri::NamespaceMode::Container as i32
        },
        ipc: if flag(|s| s.host_ipc) {
            cri::NamespaceMode::Node as i32
        } else {
            cri::NamespaceMode::Pod as i32
        },
        ..Default::default()
    }
}

/// The CRI form of a seccomp profile (Unconfined when none is asked for, as Kubernetes'
/// default is).
pub fn seccomp(k: &Kubelet, p: Option<&SeccompProfile>) -> cri::SecurityProfile {
    use cri::security_profile::ProfileType;
    match p.map(|p| p.type_.as_str()) {
        Some("RuntimeDefault") => cri::SecurityProfile {
            profile_type: ProfileType::RuntimeDefault as i32,
            localhost_ref: String::new(),
        },
        Some("Localhost") => cri::SecurityProfile {
            profile_type: ProfileType::Localhost as i32,
            localhost_ref: k
                .opts
                .root_dir
                .join("seccomp")
                .join(
                    p.and_then(|p| p.localhost_profile.clone())
                        .unwrap_or_default(),
                )
                .to_string_lossy()
                .into_owned(),
        },
        _ => cri::SecurityProfile {
            profile_type: ProfileType::Unconfined as i32,
            localhost_ref: String::new(),
        },
    }
}

fn privileged(c: &Container) -> bool {
    c.security_context
        .as_ref()
        .and_then(|s| s.privileged)
        .unwrap_or(false)
}

/// The supplemental groups every container gets: the pod's, and fsGroup.
pub fn supplemental_groups(pod: &Pod) -> Vec<i64> {
    let psc = pod.spec.as_ref().and_then(|s| s.security_context.as_ref());
    let mut groups: Vec<i64> = psc
        .and_then(|s| s.supplemental_groups.clone())
        .unwrap_or_default();
    if let Some(g) = psc.and_then(|s| s.fs_group) {
        if !groups.contains(&g) {
            groups.push(g);
        }
    }
    groups
}

/// The sandbox's CRI configuration.
pub fn sandbox_config(
    k: &Kubelet,
    pod: &Pod,
    attempt: u32,
    warn: impl FnMut(&str),
) -> cri::PodSandboxConfig {
    let spec = pod.spec.as_ref();
    let psc = spec.and_then(|s| s.security_context.as_ref());
    let hostname = if host_network(pod) {
        String::new()
    } else {
        hostname_and_domain(k, pod).0
    };
    let host_resolv = std::fs::read_to_string(HOST_RESOLV_CONF)
        .map(|t| parse_resolv_conf(&t))
        .unwrap_or_default();
    let sysctls: HashMap<String, String> = psc
        .and_then(|s| s.sysctls.as_ref())
        .into_iter()
        .flatten()
        .map(|s| (s.name.replace('/', "."), s.value.clone()))
        .collect();
    let any_privileged = init_containers(pod)
        .iter()
        .chain(containers(pod))
        .any(privileged);
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: pod_name(pod).into(),
            uid: pod_uid(pod).into(),
            namespace: pod_namespace(pod).into(),
            attempt,
        }),
        hostname,
        log_directory: log_directory(k, pod).to_string_lossy().into_owned(),
        dns_config: Some(dns_config(k, pod, &host_resolv, warn)),
        port_mappings: port_mappings(pod),
        labels: sandbox_labels(pod),
        annotations: pod
            .metadata
            .annotations
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect(),
        linux: Some(cri::LinuxPodSandboxConfig {
            cgroup_parent: String::new(),
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespace_options(pod)),
                run_as_user: psc
                    .and_then(|s| s.run_as_user)
                    .map(|value| cri::Int64Value { value }),
                run_as_group: psc
                    .and_then(|s| s.run_as_group)
                    .map(|value| cri::Int64Value { value }),
                supplemental_groups: supplemental_groups(pod),
                privileged: any_privileged,
                seccomp: Some(seccomp(k, psc.and_then(|s| s.seccomp_profile.as_ref()))),
                selinux_options: psc.and_then(|s| s.se_linux_options.as_ref()).map(|o| {
                    cri::SeLinuxOption {
                        user: o.user.clone().unwrap_or_default(),
                        role: o.role.clone().unwrap_or_default(),
                        r#type: o.type_.clone().unwrap_or_default(),
                        level: o.level.clone().unwrap_or_default(),
                    }
                }),
                ..Default::default()
            }),
            sysctls,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The content of the pod's /etc/hosts.
pub fn hosts_file(k: &Kubelet, pod: &Pod, ips: &[String]) -> String {
    let mut out = String::new();
    if host_network(pod) {
        out.push_str("# Kubernetes-managed hosts file (host network).\n");
        out.push_str(&std::fs::read_to_string("/etc/hosts").unwrap_or_default());
        if !out.ends_with('\n') {
            out.push('\n');
        }
    } else {
        let (hostname, domain) = hostname_and_domain(k, pod);
        out.push_str("# Kubernetes-managed hosts file.\n");
        out.push_str("127.0.0.1\tlocalhost\n");
        out.push_str("::1\tlocalhost ip6-localhost ip6-loopback\n");
        out.push_str("fe00::0\tip6-localnet\n");
        out.push_str("fe00::0\tip6-mcastprefix\n");
        out.push_str("fe00::1\tip6-allnodes\n");
        out.push_str("fe00::2\tip6-allrouters\n");
        for ip in ips {
            if domain.is_empty() {
                out.push_str(&format!("{ip}\t{hostname}\n"));
            } else {
                out.push_str(&format!("{ip}\t{hostname}.{domain}\t{hostname}\n"));
            }
        }
    }
    let aliases = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_aliases.as_deref())
        .unwrap_or(&[]);
    if !aliases.is_empty() {
        out.push('\n');
        out.push_str("# Entries added by HostAliases.\n");
        for a in aliases {
            let names = a.hostnames.clone().unwrap_or_default();
            out.push_str(&format!("{}\t{}\n", a.ip, names.join("\t")));
        }
    }
    out
}

/// Write the pod's hosts file (`POD_DIR/etc-hosts`) if its content changed; returns its path.
pub fn ensure_hosts_file(k: &Kubelet, pod: &Pod, ips: &[String]) -> std::io::Result<PathBuf> {
    let dir = k.pod_dir(pod_uid(pod));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("etc-hosts");
    let content = hosts_file(k, pod, ips);
    if std::fs::read_to_string(&path).ok().as_deref() != Some(content.as_str()) {
        write_mode(&path, content.as_bytes(), 0o644)?;
    }
    Ok(path)
}

/// Write a file and set its mode regardless of the umask.
pub fn write_mode(path: &Path, data: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, data)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolv_conf_parses() {
        let r = parse_resolv_conf(
            "# comment\nnameserver 10.0.0.2\nnameserver 10.0.0.3 # x\nsearch a.example b.example.\noptions ndots:2 edns0\n",
        );
        assert_eq!(r.servers, vec!["10.0.0.2", "10.0.0.3"]);
        assert_eq!(r.searches, vec!["a.example", "b.example"]);
        assert_eq!(r.options, vec!["ndots:2", "edns0"]);
    }

    #[test]
    fn options_merge_by_name() {
        let mut base = vec!["ndots:5".to_string()];
        merge_options(
            &mut base,
            &[("ndots".into(), Some("2".into())), ("edns0".into(), None)],
        );
        assert_eq!(base, vec!["ndots:2", "edns0"]);
    }
}
