//! One probe run: exec (CRI ExecSync), httpGet, tcpSocket or grpc, with Kubernetes'
//! outcomes and messages.

use std::time::Duration;

use capstan_cri::v1;
use k8s_openapi::api::core::v1::{Container, HTTPGetAction, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use tokio::time::Instant;

use super::{gofmt, net};
use crate::Kubelet;

/// How much exec output a probe keeps (Kubernetes: 10 KiB).
const MAX_EXEC_OUTPUT: usize = 10 * 1024;
/// How long past its own timeout an ExecSync may take before the kubelet gives up on the
/// runtime (Kubernetes: the runtime request timeout, 2 minutes).
const RUNTIME_SLACK: Duration = Duration::from_secs(120);

/// What a probe found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success(String),
    /// Success, with something worth a ProbeWarning event (a redirect to another host).
    Warning(String),
    Failure(String),
}

/// The probe could not run (bad port, runtime error). `state` is the result Kubernetes
/// names in its event (`unknown`, or `failure` for a broken response body).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeError {
    pub state: &'static str,
    pub message: String,
}

impl ProbeError {
    fn unknown(message: impl Into<String>) -> ProbeError {
        ProbeError {
            state: "unknown",
            message: message.into(),
        }
    }
}

/// The probe's timeout (timeoutSeconds, 1 by default).
pub fn timeout_of(spec: &Probe) -> Duration {
    Duration::from_secs(spec.timeout_seconds.filter(|t| *t > 0).unwrap_or(1) as u64)
}

/// Run `spec` once against the container.
pub async fn run(
    k: &Kubelet,
    spec: &Probe,
    container: &Container,
    container_id: &str,
    pod_ip: &str,
    pod_label: &str,
) -> Result<Outcome, ProbeError> {
    let timeout = timeout_of(spec);
    if let Some(exec) = &spec.exec {
        let env: Vec<(String, String)> = container
            .env
            .iter()
            .flatten()
            .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
            .collect();
        let cmd: Vec<String> = exec
            .command
            .iter()
            .flatten()
            .map(|c| crate::env::expand(c, &env))
            .collect();
        return exec_probe(k, container_id, cmd, timeout).await;
    }
    // A hollow node's pods have no network to probe: they answer every network probe.
    if k.opts.hollow.is_some() {
        return Ok(Outcome::Success(String::new()));
    }
    if let Some(get) = &spec.http_get {
        let (url, headers, host) =
            http_request(get, container, pod_ip, "probe").map_err(ProbeError::unknown)?;
        let deadline = Instant::now() + timeout;
        return http_outcome(net::get(url, &headers, host.as_deref(), Some(deadline)).await);
    }
    if let Some(tcp) = &spec.tcp_socket {
        let port = resolve_port(&tcp.port, container).map_err(ProbeError::unknown)?;
        let host = tcp
            .host
            .as_deref()
            .filter(|h| !h.is_empty())
            .unwrap_or(pod_ip);
        return Ok(match net::tcp_check(host, port, timeout).await {
            Ok(()) => Outcome::Success(String::new()),
            Err(e) => Outcome::Failure(e),
        });
    }
    if let Some(grpc) = &spec.grpc {
        let service = grpc.service.as_deref().unwrap_or("");
        let port = match u16::try_from(grpc.port) {
            Ok(p) if p > 0 => p,
            _ => {
                return Err(ProbeError::unknown(format!(
                    "invalid port number: {}",
                    grpc.port
                )))
            }
        };
        return Ok(grpc_outcome(
            net::grpc_check(pod_ip, port, service, timeout).await,
            pod_ip,
            port,
            timeout,
        ));
    }
    Err(ProbeError::unknown(format!(
        "missing probe handler for {pod_label}:{}",
        container.name
    )))
}

/// The exec probe: exit code 0 is success, another is failure (the output is the
/// message), a runtime timeout is a failure, other runtime errors are errors.
pub async fn exec_probe(
    k: &Kubelet,
    container_id: &str,
    cmd: Vec<String>,
    timeout: Duration,
) -> Result<Outcome, ProbeError> {
    let joined = cmd.join(" ");
    let req = v1::ExecSyncRequest {
        container_id: container_id.to_string(),
        cmd,
        timeout: timeout.as_secs() as i64,
    };
    let timed_out = || {
        Outcome::Failure(format!(
            "command timed out: {} timed out after {}",
            gofmt::quote_str(&joined),
            gofmt::duration(timeout)
        ))
    };
    match tokio::time::timeout(timeout + RUNTIME_SLACK, k.runtime.exec_sync(req)).await {
        Err(_) => Ok(timed_out()),
        Ok(Err(status)) if status.code() == capstan_cri::Code::DeadlineExceeded => Ok(timed_out()),
        Ok(Err(status)) => Err(ProbeError::unknown(gofmt::status_error(&status))),
        Ok(Ok(resp)) => {
            let mut out = resp.stdout;
            out.extend_from_slice(&resp.stderr);
            out.truncate(MAX_EXEC_OUTPUT);
            let text = String::from_utf8_lossy(&out).into_owned();
            Ok(if resp.exit_code == 0 {
                Outcome::Success(text)
            } else {
                Outcome::Failure(text)
            })
        }
    }
}

/// Kubernetes' reading of an HTTP probe's response: 2xx success, 3xx (a redirect not
/// followed) success with a warning, anything else failure.
pub fn http_outcome(r: Result<net::Response, net::GetError>) -> Result<Outcome, ProbeError> {
    match r {
        Err(net::GetError::Request(e)) => Ok(Outcome::Failure(e)),
        Err(net::GetError::Body(e)) => Err(ProbeError {
            state: "failure",
            message: e,
        }),
        Ok(resp) => {
            let body = String::from_utf8_lossy(&resp.body).into_owned();
            if (200..400).contains(&resp.status) {
                if resp.status >= 300 {
                    Ok(Outcome::Warning(format!(
                        "Probe terminated redirects, Response body: {body}"
                    )))
                } else {
                    Ok(Outcome::Success(body))
                }
            } else {
                Ok(Outcome::Failure(format!(
                    "HTTP probe failed with statuscode: {}",
                    resp.status
                )))
            }
        }
    }
}

/// Kubernetes' messages for a gRPC health check.
pub fn grpc_outcome(o: net::GrpcOutcome, host: &str, port: u16, timeout: Duration) -> Outcome {
    let addr = gofmt::join_host_port(host, port);
    match o {
        net::GrpcOutcome::Status(1) => Outcome::Success("service healthy".into()),
        net::GrpcOutcome::Status(s) => Outcome::Failure(format!(
            "service unhealthy (responded with {})",
            gofmt::quote_str(&net::serving_status_name(s))
        )),
        net::GrpcOutcome::ConnectTimeout => Outcome::Failure(format!(
            "timeout: failed to connect service {} within {}: context deadline exceeded",
            gofmt::quote_str(&addr),
            gofmt::duration(timeout)
        )),
        net::GrpcOutcome::CallTimeout => Outcome::Failure(format!(
            "timeout: health rpc did not complete within {}",
            gofmt::duration(timeout)
        )),
        net::GrpcOutcome::Failed(capstan_cri::Code::Unimplemented, msg) => Outcome::Failure(format!(
            "error: this server does not implement the grpc health protocol (grpc.health.v1.Health): {msg}"
        )),
        net::GrpcOutcome::Failed(code, msg) => Outcome::Failure(format!(
            "error: health rpc probe failed: {}",
            gofmt::rpc_error(code, &msg)
        )),
    }
}

/// The URL, headers and Host override of an httpGet action (probe or hook): host defaults
/// to the pod IP, scheme to HTTP, `User-Agent: kube-PURPOSE/1.32` and `Accept: */*`
/// unless the action sets them (an empty Accept removes it).
#[allow(clippy::type_complexity)]
pub fn http_request(
    get: &HTTPGetAction,
    container: &Container,
    pod_ip: &str,
    purpose: &str,
) -> Result<(net::Url, Vec<(String, String)>, Option<String>), String> {
    let scheme = get
        .scheme
        .as_deref()
        .filter(|s| !s.is_empty())
        .unwrap_or("http")
        .to_ascii_lowercase();
    let host = get
        .host
        .as_deref()
        .filter(|h| !h.is_empty())
        .unwrap_or(pod_ip);
    let port = resolve_port(&get.port, container)?;
    let raw_path = get.path.as_deref().unwrap_or("");
    let url = net::Url::parse(&format!(
        "{scheme}://{}{}",
        gofmt::join_host_port(host, port),
        if raw_path.is_empty() || raw_path.starts_with('/') {
            raw_path.to_string()
        } else {
            format!("/{raw_path}")
        }
    ))
    .ok_or_else(|| format!("parse {}: invalid URL", gofmt::quote_str(raw_path)))?;
    let mut headers: Vec<(String, String)> = Vec::new();
    let mut host_header = None;
    let listed = get.http_headers.iter().flatten();
    for h in listed.clone() {
        if h.name.eq_ignore_ascii_case("host") {
            if host_header.is_none() {
                host_header = Some(h.value.clone());
            }
        } else {
            headers.push((h.name.clone(), h.value.clone()));
        }
    }
    let has = |name: &str| listed.clone().any(|h| h.name.eq_ignore_ascii_case(name));
    if !has("user-agent") {
        headers.insert(0, ("User-Agent".into(), net::user_agent(purpose)));
    }
    if !has("accept") {
        headers.push(("Accept".into(), "*/*".into()));
    } else {
        let first = listed
            .clone()
            .find(|h| h.name.eq_ignore_ascii_case("accept"))
            .map(|h| h.value.is_empty())
            .unwrap_or(false);
        if first {
            headers.retain(|(n, _)| !n.eq_ignore_ascii_case("accept"));
        }
    }
    Ok((url, headers, host_header))
}

/// A probe's or hook's port: a number, the name of one of the container's ports, or a
/// number written as a string. Errors are Kubernetes' (`strconv.Atoi: parsing "http":
/// invalid syntax`, `invalid port number: 0`).
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    let n: i64 = match port {
        IntOrString::Int(i) => i64::from(*i),
        IntOrString::String(name) => {
            let named = container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name.as_str()));
            match named {
                Some(p) => i64::from(p.container_port),
                None => atoi(name)?,
            }
        }
    };
    if n > 0 && n < 65536 {
        Ok(n as u16)
    } else {
        Err(format!("invalid port number: {n}"))
    }
}

/// Go's `strconv.Atoi`, with its errors.
fn atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            gofmt::quote_str(s)
        ));
    }
    s.parse::<i64>().map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: value out of range",
            gofmt::quote_str(s)
        )
    })
}
