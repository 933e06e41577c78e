//! capstan's API server: the Kubernetes v1.32 REST API over the store.
//!
//! A request passes authentication → impersonation (`Impersonate-*` headers) → authorization
//! → the handler of its verb, which decodes, admits, validates and finally writes through the
//! generic [`registry::Registry`] of its resource. Lists and watches are served from each
//! resource's [`watch_cache::WatchCache`].

pub mod access;
pub mod admission;
pub mod audit;
pub mod auth;
pub mod authn;
pub mod codec;
pub mod component_status;
pub mod customresource;
pub mod discovery;
pub mod error;
pub mod filter;
pub mod handlers;
pub mod impersonation;
pub mod inprocess;
pub mod kubelet_proxy;
pub mod metrics;
pub mod metrics_api;
pub mod namespace_defaults;
pub mod node_authz;
pub mod objects;
pub mod patch;
pub mod pods;
pub mod rawjson;
pub mod rbac;
pub mod registry;
pub mod request;
pub mod scale;
mod served_objects;
pub mod server;
pub mod sparse;
pub mod tables;
pub mod validation;
pub mod watch_cache;
pub mod watch_queue;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use bytes::Bytes;
use capstan_api::catalogue::{self, ResourceInfo};
use capstan_store::Store;
use http::{Method, Request, Response};
use serde_json::json;

use auth::{AuthChain, ConnInfo};
use capstan_api::meta::At as _;
use error::ApiError;
use handlers::{error_response, json_response, value_response, Body, Call};
use registry::{DefaultStrategy, Registry, WriteOptions};
use request::{Query, RequestInfo};
use watch_cache::WatchCache;

pub use inprocess::InProcess;

/// The Kubernetes version capstan reports (kubectl picks its own version from this).
pub const KUBERNETES_VERSION: &str = "v1.32.0";

/// The namespaces that exist from the start.
pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// How the API server is set up.
#[derive(Debug, Clone)]
pub struct Config {
    /// host:port clients use (discovery, the `kubernetes` service's endpoints).
    pub advertise_address: String,
    /// `--service-cluster-ip-range`.
    pub service_cidr: String,
    /// `--service-node-port-range`.
    pub node_port_range: (u16, u16),
    /// `--audit-log-path`: where to write the audit log, if anywhere.
    pub audit_log: Option<std::path::PathBuf>,
    /// `--etcd-servers` (empty: the embedded store), probed for componentstatuses.
    pub etcd_servers: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            advertise_address: "127.0.0.1:6443".into(),
            service_cidr: "10.43.0.0/16".into(),
            node_port_range: (30000, 32767),
            audit_log: None,
            etcd_servers: Vec::new(),
        }
    }
}

/// The API server: registries of every resource, their caches, and the auth chain.
pub struct ApiServer {
    /// Every served resource's registry by (group, version, plural): the built-in ones and
    /// those of CustomResourceDefinitions, which come and go.
    registries: RwLock<HashMap<(String, String, String), Arc<Registry>>>,
    /// Each resource's registry in its storage version, by (group, plural).
    by_resource: RwLock<HashMap<(String, String), Arc<Registry>>>,
    /// The admission every registry's client writes pass, once installed.
    admission: OnceLock<(admission::Chain, std::sync::Weak<dyn objects::Objects>)>,
    /// The custom resources served, for discovery.
    pub custom: customresource::Served,
    pub auth: AuthChain,
    pub store: Arc<dyn Store>,
    pub metrics: Arc<metrics::Metrics>,
    /// host:port clients use, for discovery's serverAddressByClientCIDRs.
    pub advertise_address: String,
    audit: Option<Arc<audit::AuditLog>>,
    /// How kubelets are reached (pods/log, pods/exec, nodes/proxy).
    pub kubelet: kubelet_proxy::KubeletClient,
    /// The kubelet scrapes metrics.k8s.io answers from.
    pub metrics_api: metrics_api::MetricsApi,
    /// What componentstatuses probe.
    pub component_status: component_status::Probes,
}

impl ApiServer {
    /// Build registries and caches for every built-in resource and start the caches.
    pub async fn new(
        store: Arc<dyn Store>,
        auth: AuthChain,
        config: Config,
    ) -> Result<Arc<Self>, String> {
        let cidr = registry::service::Cidr::parse(&config.service_cidr)?;
        let metrics = metrics::Metrics::new();
        let store: Arc<dyn Store> = Arc::new(metrics::MeteredStore {
            inner: store,
            metrics: metrics.clone(),
        });
        let mut registries = HashMap::new();
        let mut by_resource = HashMap::new();
        // Resources stored under the same prefix (events in two groups, autoscalers in two
        // versions) share one cache, which holds the objects in their storage version.
        let mut caches: HashMap<&'static str, Arc<WatchCache>> = HashMap::new();
        for info in catalogue::RESOURCES {
            if !info.has_verb("list") && !info.has_verb("get") {
                continue;
            }
            let cache = caches
                .entry(info.storage)
                .or_insert_with(|| {
                    let stored = storage_info(info);
                    let c = WatchCache::new(stored, Registry::prefix_of(stored));
                    c.start(store.clone());
                    c
                })
                .clone();
            let strategy: Arc<dyn registry::Strategy> = match info.kind {
                "CustomResourceDefinition" => Arc::new(customresource::CrdStrategy(info)),
                "Service" => {
                    let s =
                        registry::service::ServiceStrategy::new(info, cidr, config.node_port_range);
                    mark_services(&store, info, &s).await?;
                    Arc::new(s)
                }
                _ => Arc::new(DefaultStrategy(info)),
            };
            let reg = Arc::new(Registry::new(info, strategy, store.clone(), cache));
            if std::ptr::eq(storage_info(info), info) {
                by_resource.insert(
                    (info.group.to_string(), info.plural.to_string()),
                    reg.clone(),
                );
            }
            registries.insert(
                (
                    info.group.to_string(),
                    info.version.to_string(),
                    info.plural.to_string(),
                ),
                reg,
            );
        }
        let audit = match &config.audit_log {
            Some(path) => Some(
                audit::AuditLog::open(path)
                    .map_err(|e| format!("opening the audit log {}: {e}", path.display()))?,
            ),
            None => None,
        };
        let server = Arc::new(ApiServer {
            audit,
            registries: RwLock::new(registries),
            by_resource: RwLock::new(by_resource),
            admission: OnceLock::new(),
            custom: customresource::Served::default(),
            auth,
            store,
            metrics,
            advertise_address: config.advertise_address.clone(),
            kubelet: Default::default(),
            metrics_api: Default::default(),
            component_status: component_status::Probes::new(&config.etcd_servers),
        });
        server.ensure_system_namespaces().await;
        server.ensure_system_priority_classes().await;
        server.ensure_kubernetes_service(cidr).await;
        customresource::start(&server);
        Ok(server)
    }

    /// The `kubernetes` service in `default`, at the range's first address, pointing at us.
    async fn ensure_kubernetes_service(&self, cidr: registry::service::Cidr) {
        let (host, port) = self
            .advertise_address
            .rsplit_once(':')
            .map(|(h, p)| {
                (
                    h.trim_matches(|c| c == '[' || c == ']').to_string(),
                    p.parse::<u16>().unwrap_or(6443),
                )
            })
            .unwrap_or_else(|| ("127.0.0.1".into(), 6443));
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"component": "apiserver", "provider": "kubernetes"}},
            "spec": {"type": "ClusterIP", "clusterIP": cidr.first().to_string(), "sessionAffinity": "None",
                "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}]}});
        let eps = json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "kubernetes", "namespace": "default",
            "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
            "subsets": [{"addresses": [{"ip": host}], "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}]});
        for (plural, obj) in [("services", svc), ("endpoints", eps)] {
            let Some(reg) = self.registry("", "v1", plural) else {
                continue;
            };
            match reg
                .create("default", obj.clone(), &WriteOptions::default())
                .await
            {
                Ok(_) => {}
                Err(e) if e.code == 409 && plural == "endpoints" => {
                    // The address may have changed since the last start.
                    let _ = reg
                        .update_with(
                            "default",
                            "kubernetes",
                            "",
                            &WriteOptions::default(),
                            |old| {
                                let mut next = old.clone();
                                next["subsets"] = obj["subsets"].clone();
                                Ok(next)
                            },
                        )
                        .await;
                }
                Err(e) if e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(error = %e.message, "cannot create the kubernetes {plural}")
                }
            }
        }
    }

    async fn ensure_system_namespaces(&self) {
        let Some(reg) = self.registry("", "v1", "namespaces") else {
            return;
        };
        for ns in SYSTEM_NAMESPACES {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            match reg.create("", obj, &WriteOptions::default()).await {
                Ok(_) => tracing::info!(namespace = ns, "created system namespace"),
                Err(e) if e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(namespace = ns, error = %e.message, "cannot create system namespace")
                }
            }
        }
    }

    /// Put `chain` in front of every registry's writes from clients.
    pub fn install_admission(self: &Arc<Self>, chain: admission::Chain) {
        let objects: Arc<dyn objects::Objects> = self.clone();
        let _ = self
            .admission
            .set((chain.clone(), Arc::downgrade(&objects)));
        for reg in self.registries.read().values() {
            reg.set_admission(registry::Admission {
                chain: chain.clone(),
                objects: Arc::downgrade(&objects),
            });
        }
    }

    /// Serve `regs` (the served versions of one custom resource) from now on, with the
    /// admission every other registry has; `storage` is its storage version's registry.
    pub fn add_registries(&self, regs: &[Arc<Registry>], storage: Arc<Registry>) {
        if let Some((chain, objects)) = self.admission.get() {
            for reg in regs.iter().chain([&storage]) {
                reg.set_admission(registry::Admission {
                    chain: chain.clone(),
                    objects: objects.clone(),
                });
            }
        }
        let mut all = self.registries.write();
        for reg in regs {
            let i = reg.info;
            all.insert(
                (
                    i.group.to_string(),
                    i.version.to_string(),
                    i.plural.to_string(),
                ),
                reg.clone(),
            );
        }
        drop(all);
        self.by_resource.write().insert(
            (
                storage.info.group.to_string(),
                storage.info.plural.to_string(),
            ),
            storage,
        );
    }

    /// Stop serving the registries of `(group, version, plural)`s.
    pub fn remove_registries(&self, group: &str, plural: &str, versions: &[&str]) {
        let mut all = self.registries.write();
        for v in versions {
            all.remove(&(group.to_string(), v.to_string(), plural.to_string()));
        }
        self.by_resource
            .write()
            .remove(&(group.to_string(), plural.to_string()));
    }

    /// `system-node-critical` and `system-cluster-critical`, as Kubernetes creates them.
    async fn ensure_system_priority_classes(&self) {
        let Some(reg) = self.registry("scheduling.k8s.io", "v1", "priorityclasses") else {
            return;
        };
        for pc in admission::priority::system_priority_classes() {
            match reg.create("", pc, &WriteOptions::default()).await {
                Ok(_) | Err(ApiError { code: 409, .. }) => {}
                Err(e) => {
                    tracing::warn!(error = %e.message, "cannot create a system priority class")
                }
            }
        }
    }

    /// Registered watchers per group/version/kind, for /metrics.
    fn watcher_counts(&self) -> Vec<(String, String, String, usize)> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::new();
        for reg in self.registries.read().values() {
            if seen.insert(Arc::as_ptr(&reg.cache)) {
                let i = reg.cache.info;
                out.push((
                    i.group.to_string(),
                    i.version.to_string(),
                    i.kind.to_string(),
                    reg.cache.watcher_count(),
                ));
            }
        }
        out.sort();
        out
    }

    pub fn registry(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Registry>> {
        self.registries
            .read()
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// Serve one request whose body has been read.
    ///
    /// The handler's state (every step of every kind of request: some 8 KiB) lives on the
    /// heap, so that the futures that carry a request — the connection's, the in-process
    /// transport's task — stay a few words long: the runtime moves a task's future when it
    /// is spawned, finished and joined, and copying the whole state each time cost 5 % of the
    /// server's instructions per scheduled pod.
    pub async fn handle(self: &Arc<Self>, req: Request<Bytes>, conn: &ConnInfo) -> Response<Body> {
        Box::pin(self.handle_here(req, conn)).await
    }

    async fn handle_here(self: &Arc<Self>, req: Request<Bytes>, conn: &ConnInfo) -> Response<Body> {
        let received = std::time::SystemTime::now();
        let (parts, body) = req.into_parts();
        let query = Query::parse(parts.uri.query());
        let info = RequestInfo::parse(&parts.method, parts.uri.path(), &query);
        let user = self.auth.authenticate(&parts.headers, conn).map(Arc::new);
        let mut impersonated = None;
        let resp = match &user {
            // Impersonation comes between authentication and authorization, which then
            // judges the impersonated user.
            Ok(user) => match impersonation::impersonate(&self.auth, user, &parts.headers) {
                Ok(None) => self.serve(&parts, &query, &info, user, body).await,
                Ok(Some(acting)) => {
                    let acting = impersonated.insert(Arc::new(acting)).clone();
                    self.serve(&parts, &query, &info, &acting, body).await
                }
                Err(e) => error_response(&e),
            },
            Err(msg) => {
                let mut e = ApiError::new(401, "Unauthorized", msg.clone());
                e.message = "Unauthorized".into();
                error_response(&e)
            }
        };
        if let Some(log) = &self.audit {
            let uri = parts
                .uri
                .path_and_query()
                .map(|p| p.as_str())
                .unwrap_or("/");
            log.record(&audit::Entry {
                info: &info,
                uri,
                user: user.as_deref().ok(),
                impersonated: impersonated.as_deref(),
                conn,
                headers: &parts.headers,
                code: resp.status().as_u16(),
                received,
            });
        }
        resp
    }

    /// Serve an authenticated request.
    async fn serve(
        self: &Arc<Self>,
        parts: &http::request::Parts,
        query: &Query,
        info: &RequestInfo,
        user: &Arc<auth::User>,
        body: Bytes,
    ) -> Response<Body> {
        if let Err(reason) = self.auth.authorize(user, info) {
            let e = ApiError::new(
                403,
                "Forbidden",
                auth::forbidden_message(user, info, &reason),
            );
            return error_response(&e);
        }
        if kubelet_proxy::handles(info) {
            return kubelet_proxy::serve(self, parts, query, info, user, body).await;
        }
        if metrics_api::handles(info) {
            return metrics_api::serve(self, parts, query, info).await;
        }
        if !info.is_resource {
            return match self.non_resource(&parts.method, info, query, &parts.headers) {
                Ok(r) => r,
                Err(e) => error_response(&e),
            };
        }
        let started = std::time::Instant::now();
        let mutating = !matches!(info.verb.as_str(), "get" | "list" | "watch");
        let _in_flight = self.metrics.in_flight(mutating);
        let resp = match self.resource(parts, info, query, user, body).await {
            Ok(r) => r,
            Err(e) => error_response(&e),
        };
        self.metrics
            .request(info, resp.status().as_u16(), started.elapsed());
        resp
    }

    async fn resource(
        self: &Arc<Self>,
        parts: &http::request::Parts,
        info: &RequestInfo,
        query: &Query,
        user: &Arc<auth::User>,
        body: Bytes,
    ) -> Result<Response<Body>, ApiError> {
        let (method, headers) = (&parts.method, &parts.headers);
        let accept = headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let output = handlers::negotiate(accept, query)?;
        let call = Call {
            info,
            query,
            headers,
            user,
            body,
            output,
            trim_managed_fields: parts
                .extensions
                .get::<inprocess::TrimManagedFields>()
                .is_some(),
        };
        if info.verb == "create"
            && info.version == "v1"
            && matches!(
                info.group.as_str(),
                "authorization.k8s.io" | "authentication.k8s.io"
            )
        {
            let body = call.object_body()?;
            if info.resource == "tokenreviews" {
                let tokens = self.auth.tokens.clone().unwrap_or_default();
                let answer = authn::token_review(&body, &tokens, tokens.api_audiences())?;
                return Ok(value_response(201, &answer));
            }
            return access::review(self, self.auth.rbac.as_deref(), info, user, &body);
        }
        let core_pods = info.group.is_empty() && info.version == "v1";
        if core_pods && info.verb == "create" {
            let pods = self
                .registry("", "v1", "pods")
                .ok_or_else(|| ApiError::internal("no pod registry"))?;
            match (info.resource.as_str(), info.subresource.as_str()) {
                ("bindings", "") if !info.namespace.is_empty() => {
                    return pods::bind(&pods, &call).await
                }
                ("pods", "binding") => return pods::bind(&pods, &call).await,
                ("pods", "eviction") => return pods::evict(self, &pods, &call).await,
                ("serviceaccounts", "token") => return self.token_request(&call).await,
                _ => {}
            }
        }
        let reg = self
            .registry(&info.group, &info.version, &info.resource)
            .ok_or_else(ApiError::not_found_path)?;
        check_scope(reg.info, info)?;
        if !info.subresource.is_empty() && !reg.info.has_subresource(&info.subresource) {
            return Err(ApiError::not_found_path());
        }
        if info.subresource == "finalize" && info.verb != "update" {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        if matches!(info.subresource.as_str(), "status" | "approval")
            && !matches!(info.verb.as_str(), "get" | "update" | "patch")
        {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        if !info.subresource.is_empty()
            && !matches!(
                info.subresource.as_str(),
                "status" | "scale" | "finalize" | "approval"
            )
        {
            return Err(ApiError::new(
                501,
                "NotImplemented",
                format!("the {} subresource is not served yet", info.subresource),
            ));
        }
        if component_status::serves(reg.info) {
            return Ok(component_status::serve(self, reg.info, &call).await);
        }
        let verb_allowed = reg.info.has_verb(&info.verb) || !info.subresource.is_empty();
        if !verb_allowed {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        match info.verb.as_str() {
            "get" => handlers::get(&reg, &call).await,
            "list" => handlers::list(&reg, &call).await,
            "watch" => handlers::watch(reg.clone(), &call).await,
            "create" => {
                if !info.name.is_empty() {
                    return Err(ApiError::method_not_allowed(
                        "the server does not allow this method on the requested resource",
                    ));
                }
                if let Some(e) = reg.strategy.refuse_create() {
                    return Err(e);
                }
                self.namespace_accepts_creates(reg.info, &info.namespace)
                    .await?;
                handlers::create(&reg, &call).await
            }
            "update" => handlers::update(&reg, &call).await,
            "patch" => handlers::patch(&reg, &call).await,
            "delete" => {
                if info.resource == "namespaces"
                    && info.group.is_empty()
                    && ["default", "kube-system", "kube-public"].contains(&info.name.as_str())
                {
                    return Err(ApiError::new(
                        403,
                        "Forbidden",
                        format!(
                            "namespaces \"{}\" is forbidden: this namespace may not be deleted",
                            info.name
                        ),
                    ));
                }
                handlers::delete(&reg, &call).await
            }
            "deletecollection" => handlers::delete_collection(&reg, &call).await,
            _ => {
                let _ = method;
                Err(ApiError::method_not_allowed(
                    "the server does not allow this method on the requested resource",
                ))
            }
        }
    }

    /// `POST .../serviceaccounts/<name>/token`: a bound token for the service account.
    async fn token_request(&self, call: &Call<'_>) -> Result<Response<Body>, ApiError> {
        let Some(tokens) = &self.auth.service_accounts else {
            return Err(ApiError::new(
                501,
                "NotImplemented",
                "service account tokens are not configured on this server",
            ));
        };
        let reg = self
            .registry("", "v1", "serviceaccounts")
            .ok_or_else(|| ApiError::internal("no service account registry"))?;
        let sa = reg.get(&call.info.namespace, &call.info.name).await?;
        let body = call.object_body()?;
        let answer = tokens.token_request(
            &call.info.namespace,
            &sa.value,
            &body,
            std::time::SystemTime::now(),
        )?;
        Ok(value_response(201, &answer))
    }

    /// NamespaceLifecycle: no creates in a missing or terminating namespace.
    async fn namespace_accepts_creates(
        &self,
        info: &ResourceInfo,
        ns: &str,
    ) -> Result<(), ApiError> {
        if !info.namespaced {
            return Ok(());
        }
        let reg = self
            .registry("", "v1", "namespaces")
            .ok_or_else(|| ApiError::internal("no namespace registry"))?;
        let nsobj = reg.get("", ns).await?;
        if capstan_api::meta::deletion_timestamp(&nsobj.value).is_some()
            || nsobj.value.at("/status/phase").and_then(|p| p.as_str()) == Some("Terminating")
        {
            let mut e = ApiError::new(
                403,
                "Forbidden",
                format!(
                    "{} \"\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                    info.group_resource()
                ),
            );
            e.details = Some(
                json!({"kind": info.plural, "group": info.group, "causes": [{"reason": "NamespaceTerminating", "message": format!("namespace {ns} is being terminated"), "field": "metadata.namespace"}]}),
            );
            return Err(e);
        }
        Ok(())
    }

    fn non_resource(
        &self,
        method: &Method,
        info: &RequestInfo,
        query: &Query,
        headers: &http::HeaderMap,
    ) -> Result<Response<Body>, ApiError> {
        if method != Method::GET && method != Method::HEAD {
            return Err(ApiError::method_not_allowed(
                "the server does not allow this method on the requested resource",
            ));
        }
        let accept = headers
            .get(http::header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let path = info.path.trim_end_matches('/');
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        let mut custom = self.custom.infos();
        custom.extend(metrics_api::RESOURCES);
        match parts.as_slice() {
            ["version"] => Ok(value_response(200, &version_info())),
            ["api"] => Ok(match discovery::wants_aggregated(accept) {
                Some(v) => aggregated_response(discovery::aggregated(&custom, true, v), v),
                None => value_response(200, &discovery::api_versions(&self.advertise_address)),
            }),
            ["apis"] => Ok(match discovery::wants_aggregated(accept) {
                Some(v) => aggregated_response(discovery::aggregated(&custom, false, v), v),
                None => value_response(200, &discovery::api_group_list(&custom)),
            }),
            ["api", version] => discovery::api_resource_list(&custom, "", version)
                .map(|v| value_response(200, &v))
                .ok_or_else(ApiError::not_found_path),
            ["apis", group] => discovery::api_group(&custom, group)
                .map(|v| value_response(200, &v))
                .ok_or_else(ApiError::not_found_path),
            ["apis", group, version] => discovery::api_resource_list(&custom, group, version)
                .map(|v| value_response(200, &v))
                .ok_or_else(ApiError::not_found_path),
            ["healthz" | "livez" | "readyz", rest @ ..] => Ok(health(parts[0], rest, query)),
            [".well-known", "openid-configuration"] | ["openid", "v1", "jwks"] => {
                let Some(sa) = self
                    .auth
                    .service_accounts
                    .as_ref()
                    .filter(|sa| sa.serves_discovery())
                else {
                    return Err(ApiError::not_found_path());
                };
                let (doc, ct) = if parts[0] == "openid" {
                    (sa.jwks(), "application/jwk-set+json")
                } else {
                    (sa.openid_configuration(), "application/json")
                };
                let mut r = value_response(200, &doc);
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static(ct),
                );
                r.headers_mut().insert(
                    http::header::CACHE_CONTROL,
                    http::HeaderValue::from_static("public, max-age=3600"),
                );
                Ok(r)
            }
            ["metrics"] => {
                let mut r = text_response(200, &self.metrics.render(&self.watcher_counts()));
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
                );
                Ok(r)
            }
            ["openapi", "v2"] => {
                // JSON, or gnostic's protobuf (what client-go's discovery client asks for);
                // one ETag for both, the response varying on Accept.
                use capstan_api::openapi::v2proto::{self, Format};
                let Some(format) = v2proto::negotiate(accept) else {
                    return Err(ApiError::new(
                        406,
                        "NotAcceptable",
                        "only application/json and application/com.github.proto-openapi.spec.v2.v1.0+protobuf are served for /openapi/v2",
                    ));
                };
                let etag = v2proto::etag();
                let fresh = headers
                    .get(http::header::IF_NONE_MATCH)
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
                let mut r = match format {
                    _ if fresh => {
                        let mut r = json_response(304, Bytes::new());
                        r.headers_mut().remove(http::header::CONTENT_TYPE);
                        r
                    }
                    Format::Json => json_response(200, capstan_api::openapi::v2_bytes()),
                    Format::Protobuf => {
                        let mut r = json_response(200, v2proto::v2_bytes());
                        r.headers_mut().insert(
                            http::header::CONTENT_TYPE,
                            http::HeaderValue::from_static(v2proto::CONTENT_TYPE),
                        );
                        r
                    }
                };
                if let Ok(v) = http::HeaderValue::from_str(etag) {
                    r.headers_mut().insert(http::header::ETAG, v);
                }
                r.headers_mut()
                    .insert(http::header::VARY, http::HeaderValue::from_static("Accept"));
                Ok(r)
            }
            ["openapi", "v3"] => {
                let custom = self.custom.openapi_paths();
                if custom.is_empty() {
                    return Ok(json_response(200, capstan_api::openapi::v3_index_bytes()));
                }
                // The built-in documents and those of custom group versions.
                let mut index = capstan_api::openapi::v3_index().clone();
                if let Some(paths) = index.get_mut("paths").and_then(|p| p.as_object_mut()) {
                    for (path, hash) in custom {
                        paths.entry(path.clone()).or_insert_with(|| {
                            serde_json::json!({
                                "serverRelativeURL": format!("/openapi/v3/{path}?hash={hash}")
                            })
                        });
                    }
                }
                Ok(value_response(200, &index))
            }
            ["openapi", "v3", rest @ ..] => {
                let path = rest.join("/");
                capstan_api::openapi::v3_bytes(&path)
                    .or_else(|| self.custom.openapi(&path))
                    .map(|b| json_response(200, b))
                    .ok_or_else(ApiError::not_found_path)
            }
            _ => Err(ApiError::not_found_path()),
        }
    }
}

/// The resource `info`'s objects are stored as (itself but for the versions that convert).
fn storage_info(info: &'static ResourceInfo) -> &'static ResourceInfo {
    let (group, version) =
        capstan_api::convert::storage_version(info.group, info.version, info.kind);
    catalogue::RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == info.kind)
        .unwrap_or(info)
}

/// Seed the Service allocators with what existing services hold.
async fn mark_services(
    store: &Arc<dyn Store>,
    info: &'static ResourceInfo,
    strategy: &registry::service::ServiceStrategy,
) -> Result<(), String> {
    let list = store
        .range(capstan_store::RangeRequest::prefix(Registry::prefix_of(
            info,
        )))
        .await
        .map_err(|e| format!("reading services: {e}"))?;
    for kv in list.kvs {
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&kv.value) {
            strategy.mark_used(&v);
        }
    }
    Ok(())
}

fn check_scope(info: &ResourceInfo, req: &RequestInfo) -> Result<(), ApiError> {
    if !info.namespaced && !req.namespace.is_empty() {
        return Err(ApiError::not_found_path());
    }
    if info.namespaced && req.namespace.is_empty() && !req.name.is_empty() {
        return Err(ApiError::not_found_path());
    }
    if info.namespaced && req.namespace.is_empty() && !matches!(req.verb.as_str(), "list" | "watch")
    {
        return Err(ApiError::not_found_path());
    }
    Ok(())
}

fn aggregated_response(v: serde_json::Value, version: &str) -> Response<Body> {
    let mut r = value_response(200, &v);
    let ct = if version == "v2beta1" {
        discovery::AGGREGATED_V2BETA1
    } else {
        discovery::AGGREGATED_V2
    };
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ct),
    );
    r
}

/// /version
pub fn version_info() -> serde_json::Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": KUBERNETES_VERSION,
        "gitCommit": concat!("capstan-", env!("CARGO_PKG_VERSION")),
        "gitTreeState": "clean",
        "buildDate": "2026-01-01T00:00:00Z",
        "goVersion": "go1.23.0",
        "compiler": "gc",
        "platform": format!("{}/{}", std::env::consts::OS, capstan_api::go_arch()),
    })
}

/// /healthz, /livez, /readyz and their per-check forms.
fn health(endpoint: &str, rest: &[&str], query: &Query) -> Response<Body> {
    let checks = ["ping", "log", "etcd", "poststarthook/start-informers"];
    if let Some(check) = rest.first() {
        let name = rest.join("/");
        return if checks.contains(check) || checks.contains(&name.as_str()) {
            text_response(200, "ok")
        } else {
            text_response(404, "404 page not found")
        };
    }
    if query.get("verbose").is_some() {
        let mut out = String::new();
        for c in checks {
            out.push_str(&format!("[+]{c} ok\n"));
        }
        out.push_str(&format!("{endpoint} check passed\n"));
        return text_response(200, &out);
    }
    text_response(200, "ok")
}

fn text_response(code: u16, text: &str) -> Response<Body> {
    let mut r = Response::new(handlers::full(Bytes::copy_from_slice(text.as_bytes())));
    *r.status_mut() = http::StatusCode::from_u16(code).unwrap_or(http::StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}
