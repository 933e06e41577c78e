//! Lifecycle hooks (postStart, preStop): exec, httpGet and sleep handlers, with the Go
//! kubelet's failure messages.

use std::time::Duration;

use capstan_cri::v1;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{gofmt, net, prober};
use crate::Kubelet;

/// `name_namespace(uid)`, as the kubelet names pods in messages.
pub fn pod_label(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

/// The spec of container `name` (a regular, init or ephemeral container).
pub fn find_container(pod: &Pod, name: &str) -> Option<Container> {
    let spec = pod.spec.as_ref()?;
    spec.containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
        .or_else(|| {
            spec.ephemeral_containers
                .iter()
                .flatten()
                .find(|c| c.name == name)
                .map(|e| Container {
                    name: e.name.clone(),
                    ports: e.ports.clone(),
                    ..Default::default()
                })
        })
}

pub async fn run(
    k: &Kubelet,
    pod: &Pod,
    container: &str,
    container_id: &str,
    handler: &LifecycleHandler,
) -> Result<(), String> {
    let spec = find_container(pod, container).unwrap_or_else(|| Container {
        name: container.to_string(),
        ..Default::default()
    });
    if let Some(exec) = &handler.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        return exec_hook(k, pod, &spec.name, container_id, cmd).await;
    }
    if let Some(get) = &handler.http_get {
        // A hollow node's pods have no network: their HTTP hooks succeed.
        if k.opts.hollow.is_some() {
            return Ok(());
        }
        return http_hook(k, pod, &spec, container_id, get)
            .await
            .map_err(|e| {
                format!(
                    "HTTP lifecycle hook ({}) for Container {} in Pod {} failed - error: {e}",
                    get.path.as_deref().unwrap_or(""),
                    gofmt::quote_str(&spec.name),
                    gofmt::quote_str(&pod_label(pod))
                )
            });
    }
    if let Some(sleep) = &handler.sleep {
        tokio::time::sleep(Duration::from_secs(sleep.seconds.max(0) as u64)).await;
        return Ok(());
    }
    // tcpSocket is not a usable hook: Kubernetes keeps the field but fails the hook.
    Err(format!(
        "Cannot run handler: invalid handler: {}",
        handler_text(handler)
    ))
}

async fn exec_hook(
    k: &Kubelet,
    pod: &Pod,
    container: &str,
    container_id: &str,
    cmd: Vec<String>,
) -> Result<(), String> {
    let req = v1::ExecSyncRequest {
        container_id: container_id.to_string(),
        cmd: cmd.clone(),
        timeout: 0,
    };
    let (err, output) = match k.runtime.exec_sync(req).await {
        Ok(resp) if resp.exit_code == 0 => return Ok(()),
        Ok(resp) => {
            let err = format!(
                "command '{}' exited with {}: {}",
                cmd.join(" "),
                resp.exit_code,
                String::from_utf8_lossy(&resp.stderr)
            );
            let mut out = resp.stdout;
            out.extend_from_slice(&resp.stderr);
            (err, out)
        }
        Err(status) => (gofmt::status_error(&status), Vec::new()),
    };
    Err(format!(
        "Exec lifecycle hook ({}) for Container {} in Pod {} failed - error: {err}, message: {}",
        gofmt::string_slice(&cmd),
        gofmt::quote_str(container),
        gofmt::quote_str(&pod_label(pod)),
        gofmt::quote(&output)
    ))
}

/// GET the hook's URL. Only a failed request fails the hook (the status code does not
/// matter). An HTTPS hook answered in plain HTTP is retried over HTTP, with a
/// LifecycleHTTPFallback warning when that works.
async fn http_hook(
    k: &Kubelet,
    pod: &Pod,
    container: &Container,
    container_id: &str,
    get: &k8s_openapi::api::core::v1::HTTPGetAction,
) -> Result<(), String> {
    let pod_ip = if get.host.as_deref().is_some_and(|h| !h.is_empty()) {
        String::new()
    } else {
        pod_ip(k, pod, container_id).await?
    };
    let (url, mut headers, host) = prober::http_request(get, container, &pod_ip, "lifecycle")?;
    match net::get(url.clone(), &headers, host.as_deref(), None).await {
        Ok(_) => Ok(()),
        Err(net::GetError::Body(_)) => Ok(()),
        Err(net::GetError::Request(e))
            if url.scheme == "https" && e.contains("server gave HTTP response to HTTPS client") =>
        {
            let plain = net::Url {
                scheme: "http".into(),
                ..url.clone()
            };
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case("authorization"));
            match net::get(plain, &headers, host.as_deref(), None).await {
                Ok(_) | Err(net::GetError::Body(_)) => {
                    k.recorder.warning(
                        pod,
                        "LifecycleHTTPFallback",
                        format!(
                            "request to HTTPS lifecycle hook {} got HTTP response, retry with HTTP succeeded",
                            url.authority
                        ),
                    );
                    Ok(())
                }
                Err(_) => Err(e),
            }
        }
        Err(e) => Err(e.text().to_string()),
    }
}

/// The pod's IP for a hook without a host: the sandbox's address as the runtime reports
/// it, else the pod's status, else (host network) the node's address.
async fn pod_ip(k: &Kubelet, pod: &Pod, container_id: &str) -> Result<String, String> {
    let listed = k
        .runtime
        .list_containers(v1::ListContainersRequest {
            filter: Some(v1::ContainerFilter {
                id: container_id.to_string(),
                ..Default::default()
            }),
        })
        .await;
    let sandbox = listed
        .ok()
        .and_then(|l| l.containers.into_iter().find(|c| c.id == container_id))
        .map(|c| c.pod_sandbox_id);
    if let Some(sandbox) = sandbox {
        let status = k
            .runtime
            .pod_sandbox_status(v1::PodSandboxStatusRequest {
                pod_sandbox_id: sandbox,
                verbose: false,
            })
            .await;
        if let Some(ip) = status
            .ok()
            .and_then(|s| s.status)
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .filter(|ip| !ip.is_empty())
        {
            return Ok(ip);
        }
    }
    if let Some(ip) = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .filter(|ip| !ip.is_empty())
    {
        return Ok(ip);
    }
    let host_network = pod
        .spec
        .as_ref()
        .and_then(|s| s.host_network)
        .unwrap_or(false);
    if host_network {
        if let Some(ip) = k.opts.node_ip {
            return Ok(ip.to_string());
        }
        let node = k.node.borrow().clone();
        let address = node
            .and_then(|n| n.status.clone())
            .and_then(|s| s.addresses)
            .and_then(|a| a.into_iter().find(|a| a.type_ == "InternalIP"))
            .map(|a| a.address);
        if let Some(ip) = address {
            return Ok(ip);
        }
    }
    Err(format!(
        "failed to find networking container: {}",
        pod.metadata.uid.as_deref().unwrap_or("")
    ))
}

/// Go's `%v` of a `*LifecycleHandler` (for the invalid-handler message).
fn handler_text(h: &LifecycleHandler) -> String {
    let port = |p: &IntOrString| match p {
        IntOrString::Int(i) => format!("{{0 {i} }}"),
        IntOrString::String(s) => format!("{{1 0 {s}}}"),
    };
    let tcp = match &h.tcp_socket {
        Some(t) => format!(
            "&TCPSocketAction{{Port:{},Host:{},}}",
            port(&t.port),
            t.host.as_deref().unwrap_or("")
        ),
        None => "nil".into(),
    };
    format!("&LifecycleHandler{{Exec:nil,HTTPGet:nil,TCPSocket:{tcp},Sleep:nil,}}")
}
