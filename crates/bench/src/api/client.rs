//! The benchmark's connection to the API server: kube-rs clients built from the kubeconfig,
//! raw requests that skip typed (de)serialization, namespaces, and the server's /metrics.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use bytes::Bytes;
use http::{header, Method, Request, Response};
use http_body_util::BodyExt as _;
use kube::client::Body;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;

use super::{ApiMeasurement, ApiOptions};
use crate::report::round;

/// How long namespace cleanup may take, per request.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(120);

/// The shortest measurement whose CPU use is reported, in seconds.
const MIN_CPU_WINDOW: f64 = 0.5;

/// The API server under test.
pub(crate) struct Cluster {
    /// `--client-pool` independent clients; worker `i` uses client `i % len`.
    clients: Vec<kube::Client>,
    /// What the clients are built from.
    config: kube::Config,
    http1_only: bool,
    /// The server's URL, for messages.
    pub url: String,
    /// The HTTP version the server answered with: `h2` or `http/1.1`.
    protocol: std::sync::OnceLock<&'static str>,
    /// Namespaces created and not yet deleted.
    namespaces: Mutex<Vec<String>>,
}

impl Cluster {
    /// Load the kubeconfig and build the clients; nothing is sent yet.
    pub async fn connect(options: &ApiOptions) -> Result<Cluster> {
        let path = options
            .kubeconfig
            .as_ref()
            .ok_or_else(|| anyhow!("no kubeconfig: pass --kubeconfig PATH or set KUBECONFIG"))?;
        let kubeconfig = Kubeconfig::read_from(path).map_err(|e| {
            anyhow!(
                "cannot read the kubeconfig {}: {}",
                path.display(),
                one_line(&e)
            )
        })?;
        let load = KubeConfigOptions {
            context: options.context.clone(),
            ..Default::default()
        };
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &load)
            .await
            .map_err(|e| {
                anyhow!(
                    "cannot use the kubeconfig {}: {}",
                    path.display(),
                    one_line(&e)
                )
            })?;
        // A benchmark reports failures rather than hiding them behind retries.
        config.default_retry = false;
        config.connect_timeout = Some(Duration::from_secs(10));
        let url = config.cluster_url.to_string();
        let mut cluster = Cluster {
            clients: Vec::new(),
            config,
            http1_only: !options.http2,
            url: url.trim_end_matches('/').to_owned(),
            protocol: Default::default(),
            namespaces: Mutex::new(Vec::new()),
        };
        cluster.clients = cluster
            .new_clients(options.client_pool)
            .with_context(|| format!("the kubeconfig {}", path.display()))?;
        Ok(cluster)
    }

    /// `n` more independent clients (each with connections of its own).
    pub fn new_clients(&self, n: usize) -> Result<Vec<kube::Client>> {
        (0..n.max(1))
            .map(|_| build_client(&self.config, self.http1_only))
            .collect()
    }

    /// `h2` or `http/1.1`: what the server answered [`Cluster::git_version`] with.
    pub fn protocol(&self) -> &'static str {
        self.protocol.get().copied().unwrap_or("")
    }

    /// The client worker `i` uses.
    pub fn client(&self, i: usize) -> &kube::Client {
        &self.clients[i % self.clients.len()]
    }

    /// Open the connections `workers` concurrent workers (worker `i` on [`Cluster::client`]
    /// `i`) need, so that no measured request pays for a TLS handshake.
    pub async fn warm_up(&self, workers: usize) {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..workers {
            let client = self.client(i).clone();
            tasks.spawn(async move { call(&client, Method::GET, "/version", None).await });
        }
        while tasks.join_next().await.is_some() {}
    }

    /// The server's gitVersion (GET /version): the first request, so its failure says whether
    /// the server is reachable and accepts the credentials.
    pub async fn git_version(&self) -> Result<String> {
        #[derive(Deserialize)]
        struct Version {
            #[serde(rename = "gitVersion")]
            git_version: String,
        }
        let response = send(self.client(0), Method::GET, "/version", None)
            .await
            .map_err(|e| match e {
                CallError::Transport(msg) => {
                    anyhow!("cannot reach the API server at {}: {msg}", self.url)
                }
                CallError::Status { code: 401, .. } => anyhow!(
                    "the API server at {} rejected the kubeconfig's credentials: {e}",
                    self.url
                ),
                e => anyhow!("GET {}/version failed: {e}", self.url),
            })?;
        let protocol = if response.version() == http::Version::HTTP_2 {
            "h2"
        } else {
            "http/1.1"
        };
        let _ = self.protocol.set(protocol);
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| anyhow!("GET {}/version failed: {}", self.url, one_line(&e)))?
            .to_bytes();
        let version: Version = serde_json::from_slice(&body)
            .with_context(|| format!("{}/version is not a Kubernetes version", self.url))?;
        Ok(version.git_version)
    }

    /// Create the namespace `bench-<run-id>-<suffix>` (and its `default` ServiceAccount, which
    /// Pods need on a real cluster before its controller has made it).
    pub async fn create_namespace(&self, run_id: &str, suffix: &str) -> Result<String> {
        let name = format!("bench-{run_id}-{suffix}");
        let body = format!(
            r#"{{"apiVersion":"v1","kind":"Namespace","metadata":{{"name":"{name}","labels":{{"app.kubernetes.io/created-by":"capstan-bench"}}}}}}"#
        );
        post(self.client(0), "/api/v1/namespaces", body.into())
            .await
            .map_err(|e| anyhow!("cannot create the namespace {name}: {e}"))?;
        self.namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(name.clone());
        let sa = r#"{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"default"}}"#;
        // Best effort: 409 means the controller was first; anything else shows up in the
        // Pod creates' errors if it matters.
        let _ = post(
            self.client(0),
            &format!("/api/v1/namespaces/{name}/serviceaccounts"),
            Bytes::from_static(sa.as_bytes()),
        )
        .await;
        Ok(name)
    }

    /// Install create-custom's CustomResourceDefinition (an existing one is kept) and wait
    /// until its resource is served.
    pub async fn install_bench_crd(&self) -> Result<()> {
        let client = self.client(0);
        match post(
            client,
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
            Bytes::from_static(super::objects::BENCH_CRD.as_bytes()),
        )
        .await
        {
            Ok(_) | Err(CallError::Status { code: 409, .. }) => {}
            Err(e) => return Err(anyhow!("cannot create the benchmark's CRD: {e}")),
        }
        let probe = format!(
            "/apis/{}/v1/benchwidgets?limit=1",
            super::objects::CUSTOM_GROUP
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            match call(client, Method::GET, &probe, None).await {
                Ok(_) => return Ok(()),
                Err(e) if std::time::Instant::now() > deadline => {
                    return Err(anyhow!(
                        "the benchmark's custom resource is not served: {e}"
                    ))
                }
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
    }

    /// Best effort: delete create-custom's CustomResourceDefinition (and so its objects).
    pub async fn remove_bench_crd(&self) {
        let path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/benchwidgets.bench.capstan.dev";
        if let Err(e) = call(self.client(0), Method::DELETE, path, None).await {
            eprintln!("warning: cannot delete the benchmark's CRD: {e}");
        }
    }

    /// At the end of a workload: delete its namespace unless asked to keep it.
    pub async fn finish_namespace(&self, name: &str, keep: bool) {
        if keep {
            self.namespaces
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .retain(|n| n != name);
        } else {
            self.delete_namespace(name).await;
        }
    }

    /// Delete every namespace created and not yet deleted.
    pub async fn delete_namespaces(&self) {
        let names = std::mem::take(&mut *self.namespaces.lock().unwrap_or_else(|p| p.into_inner()));
        for name in names {
            self.delete_namespace(&name).await;
        }
    }

    /// Best effort: delete the ConfigMaps and Pods of a namespace (servers without a namespace
    /// controller would keep them), then the namespace. Failures are warnings on stderr.
    async fn delete_namespace(&self, name: &str) {
        self.namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n| n != name);
        let client = self.client(0);
        for resource in ["configmaps", "pods"] {
            let path = format!("/api/v1/namespaces/{name}/{resource}?gracePeriodSeconds=0");
            cleanup_step(call(client, Method::DELETE, &path, None), &path).await;
        }
        let path = format!("/api/v1/namespaces/{name}");
        cleanup_step(call(client, Method::DELETE, &path, None), &path).await;
    }

    /// The server's own resident memory and CPU time, from its Prometheus /metrics as
    /// kube-apiserver and capstan expose them; `Err` says why they cannot be read.
    pub async fn process_metrics(&self) -> Result<ProcessMetrics, String> {
        let body = call(self.client(0), Method::GET, "/metrics", None)
            .await
            .map_err(|e| format!("GET /metrics: {e}"))?;
        Ok(ProcessMetrics::parse(&String::from_utf8_lossy(&body)))
    }
}

/// A kube-rs client with TCP_NODELAY, over HTTP/1.1 as kube-rs's own (or, unless
/// `http1_only`, negotiating HTTP/2 as client-go does: all its requests then share one
/// connection), and without kube-rs's default tracing and retry layers: leaner per request,
/// and a failure is reported once, by the benchmark.
/// Through a proxy: kube-rs's default stack (HTTP/1.1).
fn build_client(config: &kube::Config, http1_only: bool) -> Result<kube::Client> {
    use hyper_util::client::legacy::connect::HttpConnector;
    use kube::client::ConfigExt as _;
    let built = |e: &(dyn std::error::Error + 'static)| {
        anyhow!(
            "cannot build a client for {}: {}",
            config.cluster_url,
            one_line(e)
        )
    };
    if config.proxy_url.is_some() {
        return kube::Client::try_from(config.clone()).map_err(|e| built(&e));
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let tls = config.rustls_client_config().map_err(|e| built(&e))?;
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| built(&e))?;
        builder =
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = if http1_only {
        builder.enable_http1().wrap_connector(http)
    } else {
        builder.enable_all_versions().wrap_connector(http)
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .build(https);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer().map_err(|e| built(&e))?)
        .layer(config.extra_headers_layer().map_err(|e| built(&e))?)
        .map_err(tower::BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

async fn cleanup_step(
    request: impl std::future::Future<Output = Result<Bytes, CallError>>,
    path: &str,
) {
    match tokio::time::timeout(CLEANUP_TIMEOUT, request).await {
        Ok(Ok(_)) | Ok(Err(CallError::Status { code: 404, .. })) => {}
        Ok(Err(e)) => eprintln!("capstan bench: warning: cleanup DELETE {path}: {e}"),
        Err(_) => eprintln!("capstan bench: warning: cleanup DELETE {path} timed out"),
    }
}

/// What the server says about its own process in /metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct ProcessMetrics {
    pub rss_bytes: Option<u64>,
    pub cpu_seconds: Option<f64>,
}

impl ProcessMetrics {
    /// Read `process_resident_memory_bytes` and `process_cpu_seconds_total` from Prometheus
    /// text (values may be written as `1.5e+08`).
    pub fn parse(text: &str) -> ProcessMetrics {
        let mut m = ProcessMetrics::default();
        for line in text.lines() {
            let Some((name, value)) = line.split_once(' ') else {
                continue;
            };
            let value = value.split_whitespace().next().unwrap_or("");
            match name {
                "process_resident_memory_bytes" => {
                    m.rss_bytes = value.parse::<f64>().ok().map(|v| v as u64)
                }
                "process_cpu_seconds_total" => m.cpu_seconds = value.parse().ok(),
                _ => {}
            }
        }
        m
    }
}

/// Why a request failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// The server answered with an error status.
    Status { code: u16, message: String },
    /// No answer: connection, TLS or protocol failure.
    Transport(String),
}

impl CallError {
    /// Throttling and server errors, which a loaded server may answer now and then; the
    /// workloads count them rather than stop.
    pub fn is_transient(&self) -> bool {
        matches!(self, CallError::Status { code, .. } if *code == 429 || *code >= 500)
    }
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::Status { code, message } => {
                let reason = http::StatusCode::from_u16(*code)
                    .ok()
                    .and_then(|s| s.canonical_reason())
                    .unwrap_or("");
                write!(f, "{code} {reason}: {message}")
            }
            CallError::Transport(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CallError {}

/// Send a request and return the response once its headers are in; error statuses become
/// [`CallError::Status`] with the server's message.
pub(crate) async fn send(
    client: &kube::Client,
    method: Method,
    path: &str,
    body: Option<(&'static str, Bytes)>,
) -> Result<Response<Body>, CallError> {
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header(header::ACCEPT, "application/json");
    let body = match body {
        Some((content_type, bytes)) => {
            request = request.header(header::CONTENT_TYPE, content_type);
            Body::from(bytes)
        }
        None => Body::empty(),
    };
    let request = request
        .body(body)
        .map_err(|e| CallError::Transport(format!("invalid request {path}: {e}")))?;
    let response = client
        .send(request)
        .await
        .map_err(|e| CallError::Transport(one_line(&e)))?;
    let status = response.status();
    if status.is_client_error() || status.is_server_error() {
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        return Err(CallError::Status {
            code: status.as_u16(),
            message: status_message(&body),
        });
    }
    Ok(response)
}

/// Send a request and read the whole response body.
pub(crate) async fn call(
    client: &kube::Client,
    method: Method,
    path: &str,
    body: Option<(&'static str, Bytes)>,
) -> Result<Bytes, CallError> {
    let response = send(client, method, path, body).await?;
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(|e| CallError::Transport(format!("reading the response: {}", one_line(&e))))?;
    Ok(body.to_bytes())
}

/// POST a JSON object.
pub(crate) async fn post(
    client: &kube::Client,
    path: &str,
    body: Bytes,
) -> Result<Bytes, CallError> {
    call(client, Method::POST, path, Some(("application/json", body))).await
}

/// The `message` of a Kubernetes Status body, or the body itself, on one line.
fn status_message(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Status {
        message: Option<String>,
    }
    let text = match serde_json::from_slice::<Status>(body) {
        Ok(Status {
            message: Some(message),
        }) => message,
        _ => String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
    };
    flatten(&text)
}

/// An error and its sources on one line, without repeating a source its parent already
/// quotes.
pub(crate) fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    flatten(&out)
}

fn flatten(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Raise the soft limit on open files to the hard limit (as Go programs do at startup): every
/// watch holds a connection.
pub(crate) fn raise_open_files_limit() {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit and setrlimit only read and write the struct passed.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0
                && limit.rlim_cur < limit.rlim_max
            {
                limit.rlim_cur = limit.rlim_max;
                libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
            }
        }
    }
}

/// The CPU the benchmark and the server use during one measurement.
pub(crate) struct CpuMeter {
    started: Instant,
    client: Option<f64>,
    server: Option<f64>,
}

impl CpuMeter {
    pub async fn start(cluster: &Cluster) -> CpuMeter {
        let server = cluster
            .process_metrics()
            .await
            .ok()
            .and_then(|m| m.cpu_seconds);
        CpuMeter {
            started: Instant::now(),
            client: own_cpu_seconds(),
            server,
        }
    }

    /// Record the cores each side used since [`CpuMeter::start`] into `m`.
    pub async fn finish(self, cluster: &Cluster, m: &mut ApiMeasurement) {
        let wall = self.started.elapsed().as_secs_f64();
        if wall < MIN_CPU_WINDOW {
            // The server counts CPU time in 10 ms ticks: too coarse for a short measurement.
            return;
        }
        let client = own_cpu_seconds();
        let server = cluster
            .process_metrics()
            .await
            .ok()
            .and_then(|m| m.cpu_seconds);
        let cores = |before: Option<f64>, after: Option<f64>| {
            Some(round((after? - before?).max(0.0) / wall, 2))
        };
        m.client_cpu = cores(self.client, client);
        m.server_cpu = cores(self.server, server);
    }
}

/// CPU time this process has used (user + system), in seconds.
pub(crate) fn own_cpu_seconds() -> Option<f64> {
    #[cfg(unix)]
    {
        // SAFETY: getrusage only writes the struct passed; all-zero is a valid rusage.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
            return None;
        }
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Some(secs(usage.ru_utime) + secs(usage.ru_stime))
    }
    #[cfg(not(unix))]
    {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_process_metrics() {
        let text = "# HELP process_resident_memory_bytes Resident memory size in bytes.\n\
                    # TYPE process_resident_memory_bytes gauge\n\
                    process_resident_memory_bytes 1.23456789e+08\n\
                    process_resident_memory_bytes_other 7\n\
                    process_cpu_seconds_total 12.5\n";
        let m = ProcessMetrics::parse(text);
        assert_eq!(m.rss_bytes, Some(123_456_789));
        assert_eq!(m.cpu_seconds, Some(12.5));
        assert_eq!(ProcessMetrics::parse("up 1\n"), ProcessMetrics::default());
    }

    #[test]
    fn status_messages() {
        let body = br#"{"kind":"Status","message":"namespaces is forbidden:\nUser \"x\" cannot","code":403}"#;
        assert_eq!(
            status_message(body),
            r#"namespaces is forbidden: User "x" cannot"#
        );
        assert_eq!(status_message(b"plain text"), "plain text");
        let e = CallError::Status {
            code: 403,
            message: "no".into(),
        };
        assert_eq!(e.to_string(), "403 Forbidden: no");
        assert!(!e.is_transient());
        assert!(CallError::Status {
            code: 429,
            message: String::new()
        }
        .is_transient());
    }

    #[test]
    fn cpu_time_is_readable() {
        assert!(own_cpu_seconds().is_some_and(|s| s >= 0.0));
    }
}
