//! `/exec`, `/attach` and `/portforward`: the runtime hands out a URL on its streaming
//! server for the session (CRI Exec, Attach, PortForward), and the kubelet relays the
//! client's upgrade request there and then the upgraded connection, byte for byte, both
//! ways (SPDY/3.1 or WebSocket, whichever the client and the runtime agree on).

use std::sync::Arc;
use std::time::Duration;

use capstan_cri::v1;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

use super::{full, percent_decode, query_pairs, restful_error, Body, Server};

/// The session options of an exec or attach request (`stdin=1` etc., as the API server
/// sends them; `true` is read too).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
    pub command: Vec<String>,
}

impl StreamOptions {
    pub fn from_query(pairs: &[(String, String)]) -> Result<StreamOptions, String> {
        let flag = |key: &str| {
            pairs
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .is_some_and(|(_, v)| v == "1" || super::logs::parse_bool(v) == Some(true))
        };
        let mut o = StreamOptions {
            stdin: flag("input") || flag("stdin"),
            stdout: flag("output") || flag("stdout"),
            stderr: flag("error") || flag("stderr"),
            tty: flag("tty"),
            command: pairs
                .iter()
                .filter(|(k, _)| k == "command")
                .map(|(_, v)| v.clone())
                .collect(),
        };
        if o.tty && o.stderr {
            // A terminal has no separate stderr.
            o.stderr = false;
        }
        if !o.stdin && !o.stdout && !o.stderr {
            return Err("you must specify at least 1 of stdin, stdout, stderr".into());
        }
        Ok(o)
    }
}

/// What the path names: (kind, namespace, pod, uid, container).
fn parse_path(path: &str) -> Option<(&str, String, String, String, String)> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let d = |s: &&str| percent_decode(s);
    match parts.as_slice() {
        [kind @ ("exec" | "attach"), ns, pod, container] => {
            Some((kind, d(ns), d(pod), String::new(), d(container)))
        }
        [kind @ ("exec" | "attach"), ns, pod, uid, container] => {
            Some((kind, d(ns), d(pod), d(uid), d(container)))
        }
        [kind @ "portforward", ns, pod] => {
            Some((kind, d(ns), d(pod), String::new(), String::new()))
        }
        [kind @ "portforward", ns, pod, uid] => Some((kind, d(ns), d(pod), d(uid), String::new())),
        _ => None,
    }
}

/// The error answer of a failed CRI call, as the kubelet's streaming code writes it.
fn cri_error(status: &capstan_cri::Status) -> Response<Body> {
    let code = match status.code() {
        capstan_cri::Code::NotFound => 404,
        capstan_cri::Code::ResourceExhausted => 429,
        _ => 500,
    };
    let mut r = Response::new(full(format!(
        "rpc error: code = {:?} desc = {}",
        status.code(),
        status.message()
    )));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r
}

fn plain_500(msg: String) -> Response<Body> {
    let mut r = Response::new(full(msg));
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

/// The pod's ready sandbox (or the newest one), by the pod's UID.
async fn sandbox_of(s: &Server, uid: &str) -> Result<Option<v1::PodSandbox>, capstan_cri::Status> {
    let list =
        s.k.runtime
            .list_pod_sandbox(v1::ListPodSandboxRequest { filter: None })
            .await?;
    let mut mine: Vec<v1::PodSandbox> = list
        .items
        .into_iter()
        .filter(|sb| sb.metadata.as_ref().is_some_and(|m| m.uid == uid))
        .collect();
    mine.sort_by_key(|sb| {
        (
            sb.state == v1::PodSandboxState::SandboxReady as i32,
            sb.created_at,
        )
    });
    Ok(mine.pop())
}

/// The running container of that name in the pod.
async fn running_container(
    s: &Server,
    uid: &str,
    name: &str,
) -> Result<Option<String>, capstan_cri::Status> {
    let Some(sandbox) = sandbox_of(s, uid).await? else {
        return Ok(None);
    };
    let list =
        s.k.runtime
            .list_containers(v1::ListContainersRequest {
                filter: Some(v1::ContainerFilter {
                    pod_sandbox_id: sandbox.id.clone(),
                    state: Some(v1::ContainerStateValue {
                        state: v1::ContainerState::ContainerRunning as i32,
                    }),
                    ..Default::default()
                }),
            })
            .await?;
    Ok(list
        .containers
        .into_iter()
        .filter(|c| c.state == v1::ContainerState::ContainerRunning as i32)
        .filter(|c| c.metadata.as_ref().is_some_and(|m| m.name == name))
        .max_by_key(|c| c.created_at)
        .map(|c| c.id))
}

/// Serve an exec, attach or port-forward request.
pub async fn serve(s: &Arc<Server>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let Some((kind, ns, pod_name, uid, container)) = parse_path(&path) else {
        return super::text(404, "404 page not found");
    };
    let pairs = query_pairs(req.uri().query());
    let opts = if kind == "portforward" {
        None
    } else {
        match StreamOptions::from_query(&pairs) {
            Ok(o) => Some(o),
            Err(e) => return restful_error(400, &e),
        }
    };
    let Some(pod) = s.k.pods.get(&ns, &pod_name) else {
        return restful_error(404, "pod does not exist");
    };
    let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
    if !uid.is_empty() && uid != pod_uid {
        return restful_error(404, "pod not found");
    }
    let url = match (kind, opts) {
        ("portforward", _) => {
            let ports: Vec<i32> = pairs
                .iter()
                .filter(|(k, _)| k == "port")
                .flat_map(|(_, v)| v.split(','))
                .filter_map(|p| p.trim().parse().ok())
                .collect();
            let sandbox = match sandbox_of(s, &pod_uid).await {
                Ok(Some(sb)) => sb,
                Ok(None) => return plain_500(format!("pod not found (\"{pod_name}_{ns}\")")),
                Err(e) => return cri_error(&e),
            };
            s.k.runtime
                .port_forward(v1::PortForwardRequest {
                    pod_sandbox_id: sandbox.id,
                    port: ports,
                })
                .await
                .map(|r| r.url)
        }
        (_, Some(o)) => {
            let id = match running_container(s, &pod_uid, &container).await {
                Ok(Some(id)) => id,
                Ok(None) => return plain_500(format!("container not found (\"{container}\")")),
                Err(e) => return cri_error(&e),
            };
            if kind == "exec" {
                s.k.runtime
                    .exec(v1::ExecRequest {
                        container_id: id,
                        cmd: o.command,
                        tty: o.tty,
                        stdin: o.stdin,
                        stdout: o.stdout,
                        stderr: o.stderr,
                    })
                    .await
                    .map(|r| r.url)
            } else {
                s.k.runtime
                    .attach(v1::AttachRequest {
                        container_id: id,
                        stdin: o.stdin,
                        tty: o.tty,
                        stdout: o.stdout,
                        stderr: o.stderr,
                    })
                    .await
                    .map(|r| r.url)
            }
        }
        _ => return super::text(404, "404 page not found"),
    };
    match url {
        Ok(url) => proxy_upgrade(req, &url).await,
        Err(e) => cri_error(&e),
    }
}

/// Relay `req` to `url` (the runtime's streaming server, plain HTTP) and, when it answers
/// 101 Switching Protocols, the two upgraded connections to each other.
pub async fn proxy_upgrade(mut req: Request<Incoming>, url: &str) -> Response<Body> {
    let Ok(target) = url.parse::<http::Uri>() else {
        return plain_500(format!("the runtime's streaming URL {url:?} is not valid"));
    };
    if target.scheme_str() != Some("http") {
        return plain_500(format!(
            "the runtime's streaming URL {url:?} is not plain http"
        ));
    }
    let Some(authority) = target.authority().cloned() else {
        return plain_500(format!("the runtime's streaming URL {url:?} has no host"));
    };
    let host = authority.host().trim_matches(|c| c == '[' || c == ']');
    let port = authority.port_u16().unwrap_or(80);
    let tcp = match tokio::time::timeout(
        Duration::from_secs(10),
        tokio::net::TcpStream::connect((host, port)),
    )
    .await
    {
        Ok(Ok(t)) => t,
        Ok(Err(e)) => return plain_500(format!("error dialing backend: {e}")),
        Err(_) => return plain_500("error dialing backend: timeout".into()),
    };
    let _ = tcp.set_nodelay(true);
    let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await {
        Ok(x) => x,
        Err(e) => return plain_500(format!("error dialing backend: {e}")),
    };
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    let client_upgrade = hyper::upgrade::on(&mut req);
    let path = target
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let mut out = Request::builder().method(req.method().clone()).uri(path);
    for (name, value) in req.headers() {
        if name != http::header::HOST && name != http::header::AUTHORIZATION {
            out = out.header(name, value);
        }
    }
    out = out.header(http::header::HOST, authority.as_str());
    let Ok(out) = out.body(http_body_util::Empty::<bytes::Bytes>::new()) else {
        return plain_500("cannot build the backend request".into());
    };
    let mut resp = match sender.send_request(out).await {
        Ok(r) => r,
        Err(e) => return plain_500(format!("error proxying to the runtime: {e}")),
    };
    let status = resp.status();
    let headers = resp.headers().clone();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        // The runtime's refusal goes back as it is.
        let body = match resp.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => bytes::Bytes::new(),
        };
        let mut r = Response::new(full(body));
        *r.status_mut() = status;
        *r.headers_mut() = headers;
        r.headers_mut().remove(http::header::TRANSFER_ENCODING);
        r.headers_mut().remove(http::header::CONTENT_LENGTH);
        return r;
    }
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let (client, backend) = match tokio::join!(client_upgrade, backend_upgrade) {
            (Ok(c), Ok(b)) => (c, b),
            (c, b) => {
                tracing::debug!(
                    client = c.is_ok(),
                    backend = b.is_ok(),
                    "a streaming upgrade did not complete"
                );
                return;
            }
        };
        let mut client = TokioIo::new(client);
        let mut backend = TokioIo::new(backend);
        let _ = tokio::io::copy_bidirectional(&mut client, &mut backend).await;
    });
    let mut r = Response::new(full(bytes::Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for (name, value) in &headers {
        r.headers_mut().append(name, value.clone());
    }
    if !r.headers_mut().contains_key(http::header::CONNECTION) {
        r.headers_mut().insert(
            http::header::CONNECTION,
            HeaderValue::from_static("Upgrade"),
        );
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> Vec<(String, String)> {
        query_pairs(Some(s))
    }

    #[test]
    fn stream_options_read_the_api_servers_parameters() {
        let o = StreamOptions::from_query(&q(
            "command=sh&command=-c&command=echo+hi&stdin=1&stdout=1&stderr=1",
        ))
        .unwrap();
        assert_eq!(o.command, ["sh", "-c", "echo hi"]);
        assert!(o.stdin && o.stdout && o.stderr && !o.tty);
        // A terminal has no stderr.
        let t = StreamOptions::from_query(&q("stdout=true&stderr=true&tty=true")).unwrap();
        assert!(t.tty && t.stdout && !t.stderr);
        assert_eq!(
            StreamOptions::from_query(&q("command=ls")).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }

    #[test]
    fn stream_paths_parse() {
        assert_eq!(
            parse_path("/exec/ns/p/c"),
            Some(("exec", "ns".into(), "p".into(), "".into(), "c".into()))
        );
        assert_eq!(
            parse_path("/attach/ns/p/uid-1/c"),
            Some((
                "attach",
                "ns".into(),
                "p".into(),
                "uid-1".into(),
                "c".into()
            ))
        );
        assert_eq!(
            parse_path("/portforward/ns/p"),
            Some(("portforward", "ns".into(), "p".into(), "".into(), "".into()))
        );
        assert_eq!(parse_path("/exec/ns/p"), None);
    }
}
