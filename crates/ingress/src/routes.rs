//! The routing table: every rule of every Ingress we serve, merged, with the endpoints of the
//! services they name and the certificates of their TLS sections.
//!
//! Matching, as networking.k8s.io/v1 specifies it:
//! - The host first: a rule host matches the request's host exactly, or (`*.example.com`)
//!   when the request's host is one more label in front of `example.com`. An exact host wins
//!   over a wildcard one, and either over the rules without a host. The chosen host's rules
//!   alone are matched against the path: a host that matches but has no matching path does
//!   not fall through to the rules without a host (as in ingress-nginx, where each host is a
//!   server of its own).
//! - Then the path: `Exact` matches the whole path, case-sensitively; `Prefix` matches by
//!   path elements (`/foo` matches `/foo`, `/foo/` and `/foo/bar`, not `/foobar`; a trailing
//!   slash of the rule is ignored). `ImplementationSpecific` is treated as `Prefix`. The
//!   longest matching path wins; an `Exact` path over a `Prefix` one of the same length.
//! - No path matched: the `defaultBackend` of the Ingress whose rules define that host, then
//!   the `defaultBackend` of an Ingress without rules, then 404.
//!
//! Two Ingresses claiming the same host, path and path type: the one created first keeps
//! it; the other gets a Warning event and loses that path only. The same for two default
//! backends and two certificates for one host.

use std::collections::{HashMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Service, ServicePort};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use parking_lot::{Mutex, RwLock};

use crate::metrics::{Metrics, RouteStats};
use crate::tls::{wildcard_suffix, Cert, CertTable};

/// The label EndpointSlices name their Service by.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Annotations that turn off the HTTP→HTTPS redirect for an Ingress's hosts with TLS.
pub const SSL_REDIRECT_ANNOTATIONS: [&str; 2] = [
    "ingress.capstan.dev/ssl-redirect",
    "nginx.ingress.kubernetes.io/ssl-redirect",
];

/// Where connections for a backend go.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// An endpoint's address and port.
    Addr(SocketAddr),
    /// An ExternalName service's DNS name and port, resolved when connecting.
    Name(Arc<str>, u16),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Name(n, p) => write!(f, "{n}:{p}"),
        }
    }
}

/// One service port's ready endpoints.
#[derive(Debug)]
pub struct Backend {
    pub namespace: String,
    pub service: String,
    pub targets: Vec<Target>,
    /// Round-robin position, kept across configurations.
    next: Arc<AtomicUsize>,
}

impl Backend {
    /// The endpoint for the next request, and the one to retry on if connecting to it fails
    /// (None with a single endpoint). None without endpoints.
    pub fn pick(&self) -> Option<(&Target, Option<&Target>)> {
        let n = self.targets.len();
        if n == 0 {
            return None;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let retry = (n > 1).then(|| &self.targets[(i + 1) % n]);
        Some((&self.targets[i], retry))
    }
}

/// What a matched request goes to.
#[derive(Debug)]
pub struct Route {
    pub namespace: Arc<str>,
    pub ingress: Arc<str>,
    pub backend: Arc<Backend>,
    pub stats: Arc<RouteStats>,
    /// Plain HTTP requests get a 308 to HTTPS (the host has a certificate).
    pub ssl_redirect: bool,
}

impl std::fmt::Debug for RouteStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouteStats")
    }
}

/// The rules of one host (or of no host).
#[derive(Default, Debug)]
struct HostRoutes {
    exact: HashMap<String, Route>,
    /// Normalized prefixes (no trailing slash; "" is `/`), longest first.
    prefixes: Vec<(String, Route)>,
    fallback: Option<Route>,
}

impl HostRoutes {
    fn find(&self, path: &str) -> Option<&Route> {
        if let Some(r) = self.exact.get(path) {
            return Some(r);
        }
        self.prefixes
            .iter()
            .find(|(p, _)| prefix_matches(p, path))
            .map(|(_, r)| r)
            .or(self.fallback.as_ref())
    }

    fn is_empty(&self) -> bool {
        self.exact.is_empty() && self.prefixes.is_empty() && self.fallback.is_none()
    }
}

/// Whether a normalized prefix (no trailing slash) matches `path` element by element.
fn prefix_matches(prefix: &str, path: &str) -> bool {
    if prefix.is_empty() {
        return true;
    }
    match path.strip_prefix(prefix) {
        Some(rest) => rest.is_empty() || rest.starts_with('/'),
        None => false,
    }
}

/// One configuration: routes and certificates.
#[derive(Default, Debug)]
pub struct Table {
    hosts: HashMap<String, HostRoutes>,
    /// `*.example.com` rules under `example.com`.
    wildcards: HashMap<String, HostRoutes>,
    any: HostRoutes,
    default: Option<Route>,
    pub certs: CertTable,
    /// How many Ingresses went into it.
    pub ingresses: usize,
}

impl Table {
    /// Where a request for `host` (lowercase, without port) and `path` goes.
    pub fn lookup(&self, host: &str, path: &str) -> Option<&Route> {
        let group = match self.hosts.get(host) {
            Some(g) => g,
            None => match wildcard_suffix(host).and_then(|s| self.wildcards.get(s)) {
                Some(g) => g,
                None => &self.any,
            },
        };
        group.find(path).or(self.default.as_ref())
    }

    /// Whether any rule or default backend is configured.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
            && self.wildcards.is_empty()
            && self.any.is_empty()
            && self.default.is_none()
    }
}

/// The table in effect. A request takes the table once and finishes on it, however many
/// configurations take effect meanwhile.
#[derive(Debug, Default)]
pub struct Current {
    table: RwLock<Arc<Table>>,
}

impl Current {
    pub fn load(&self) -> Arc<Table> {
        self.table.read().clone()
    }

    pub fn store(&self, table: Table) {
        *self.table.write() = Arc::new(table);
    }
}

/// A request's host as routing compares it: the Host header or authority without its port,
/// lowercase, without a trailing dot.
pub fn normalize_host(raw: &str) -> std::borrow::Cow<'_, str> {
    let raw = raw.trim();
    let host = if let Some(rest) = raw.strip_prefix('[') {
        // [v6]:port
        match rest.split_once(']') {
            Some((inner, _)) => inner,
            None => rest,
        }
    } else {
        match raw.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => raw,
        }
    };
    let host = host.trim_end_matches('.');
    if host.bytes().any(|b| b.is_ascii_uppercase()) {
        std::borrow::Cow::Owned(host.to_ascii_lowercase())
    } else {
        std::borrow::Cow::Borrowed(host)
    }
}

/// A certificate Secret as the build sees it.
pub enum CertState {
    Ready(Arc<Cert>),
    Missing,
    Invalid(String),
}

/// What a build reads besides the Ingresses.
pub trait Sources {
    fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>>;
    /// The EndpointSlices of a service.
    fn slices(&self, namespace: &str, service: &str) -> Vec<Arc<EndpointSlice>>;
    /// The certificate of a Secret named by a TLS section.
    fn cert(&self, namespace: &str, name: &str) -> CertState;
}

/// Something wrong with an Ingress, to report as a Warning event.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Warning {
    pub namespace: String,
    pub ingress: String,
    pub reason: &'static str,
    pub message: String,
}

/// A built table and what was learned building it.
pub struct Built {
    pub table: Table,
    pub warnings: Vec<Warning>,
    /// The services the table uses, `(namespace, name)`: their changes need a rebuild.
    pub services: HashSet<(String, String)>,
}

/// What outlives one configuration: round-robin positions and metrics.
pub struct Keep {
    pub metrics: Arc<Metrics>,
    positions: Mutex<HashMap<(String, String, String), Arc<AtomicUsize>>>,
}

impl Keep {
    pub fn new(metrics: Arc<Metrics>) -> Keep {
        Keep {
            metrics,
            positions: Mutex::new(HashMap::new()),
        }
    }

    fn position(&self, key: &(String, String, String)) -> Arc<AtomicUsize> {
        self.positions
            .lock()
            .entry(key.clone())
            .or_default()
            .clone()
    }
}

/// The Secret names the TLS sections of `ingresses` name: `(namespace, name)`.
pub fn tls_secrets(ingresses: &[Arc<Ingress>]) -> HashSet<(String, String)> {
    let mut out = HashSet::new();
    for ing in ingresses {
        let ns = ing.metadata.namespace.clone().unwrap_or_default();
        for tls in ing.spec.iter().flat_map(|s| s.tls.iter().flatten()) {
            if let Some(name) = tls.secret_name.as_ref().filter(|n| !n.is_empty()) {
                out.insert((ns.clone(), name.clone()));
            }
        }
    }
    out
}

#[derive(Clone, PartialEq, Eq, Hash)]
enum HostKey {
    Exact(String),
    Wildcard(String),
    Any,
}

impl HostKey {
    fn new(host: Option<&str>) -> HostKey {
        match host.map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase()) {
            None => HostKey::Any,
            Some(h) if h.is_empty() => HostKey::Any,
            Some(h) => match h.strip_prefix("*.") {
                Some(suffix) => HostKey::Wildcard(suffix.to_string()),
                None => HostKey::Exact(h),
            },
        }
    }

    fn describe(&self) -> String {
        match self {
            HostKey::Exact(h) => format!("host {h}"),
            HostKey::Wildcard(s) => format!("host *.{s}"),
            HostKey::Any => "any host".to_string(),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum PathKind {
    Exact,
    Prefix,
}

struct Builder<'a> {
    sources: &'a dyn Sources,
    keep: &'a Keep,
    table: Table,
    warnings: Vec<Warning>,
    seen_warnings: HashSet<Warning>,
    services: HashSet<(String, String)>,
    backends: HashMap<(String, String, String), Arc<Backend>>,
    positions: HashSet<(String, String, String)>,
    /// (host, kind, path) → the Ingress holding it.
    claimed: HashMap<(HostKey, PathKind, String), (String, String)>,
    /// Host default backends: host → the Ingress holding it.
    fallbacks: HashMap<HostKey, (String, String)>,
    default_owner: Option<(String, String)>,
    /// TLS host (`*.x` for wildcards, "" for the default) → (Ingress, secret).
    tls_owner: HashMap<String, ((String, String), String)>,
}

fn ident(ing: &Ingress) -> (String, String) {
    (
        ing.metadata.namespace.clone().unwrap_or_default(),
        ing.metadata.name.clone().unwrap_or_default(),
    )
}

/// Build the table of `ingresses` (all of them ours).
pub fn build(ingresses: &[Arc<Ingress>], sources: &dyn Sources, keep: &Keep) -> Built {
    let mut sorted: Vec<&Arc<Ingress>> = ingresses.iter().collect();
    // Oldest first: an older Ingress keeps what a newer one also claims.
    sorted.sort_by(|a, b| {
        let key = |i: &Ingress| (i.metadata.creation_timestamp.clone(), ident(i));
        key(a).cmp(&key(b))
    });
    let mut b = Builder {
        sources,
        keep,
        table: Table {
            ingresses: ingresses.len(),
            ..Default::default()
        },
        warnings: Vec::new(),
        seen_warnings: HashSet::new(),
        services: HashSet::new(),
        backends: HashMap::new(),
        positions: HashSet::new(),
        claimed: HashMap::new(),
        fallbacks: HashMap::new(),
        default_owner: None,
        tls_owner: HashMap::new(),
    };
    // Certificates first: a host's routes redirect to HTTPS when it has one.
    for ing in &sorted {
        b.add_tls(ing);
    }
    for ing in &sorted {
        b.add_rules(ing);
    }
    for group in b
        .table
        .hosts
        .values_mut()
        .chain(b.table.wildcards.values_mut())
        .chain(std::iter::once(&mut b.table.any))
    {
        group.prefixes.sort_by_key(|p| std::cmp::Reverse(p.0.len()));
    }
    let used = std::mem::take(&mut b.positions);
    keep.positions.lock().retain(|k, _| used.contains(k));
    Built {
        table: b.table,
        warnings: b.warnings,
        services: b.services,
    }
}

impl Builder<'_> {
    fn warn(&mut self, ing: &Ingress, reason: &'static str, message: String) {
        let (namespace, ingress) = ident(ing);
        let w = Warning {
            namespace,
            ingress,
            reason,
            message,
        };
        if self.seen_warnings.insert(w.clone()) {
            self.warnings.push(w);
        }
    }

    fn add_tls(&mut self, ing: &Ingress) {
        let id = ident(ing);
        let Some(entries) = ing.spec.as_ref().and_then(|s| s.tls.as_ref()) else {
            return;
        };
        for tls in entries {
            let Some(secret) = tls.secret_name.as_deref().filter(|s| !s.is_empty()) else {
                continue;
            };
            let hosts: Vec<String> = tls
                .hosts
                .iter()
                .flatten()
                .map(|h| h.trim().trim_end_matches('.').to_ascii_lowercase())
                .filter(|h| !h.is_empty())
                .collect();
            let cert = match self.sources.cert(&id.0, secret) {
                CertState::Ready(c) => Some(c),
                CertState::Missing => {
                    self.warn(
                        ing,
                        "TLSSecretNotFound",
                        format!(
                            "secret {}/{secret} not found: {} served without a certificate",
                            id.0,
                            describe_hosts(&hosts)
                        ),
                    );
                    None
                }
                CertState::Invalid(why) => {
                    self.warn(
                        ing,
                        "TLSSecretInvalid",
                        format!(
                            "secret {}/{secret} {why}: {} served without a certificate",
                            id.0,
                            describe_hosts(&hosts)
                        ),
                    );
                    None
                }
            };
            if let Some(c) = &cert {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_secs() as i64)
                    .unwrap_or(0);
                if c.not_after < now {
                    self.warn(
                        ing,
                        "TLSCertificateExpired",
                        format!("the certificate in secret {}/{secret} has expired", id.0),
                    );
                }
                for h in &hosts {
                    if !c.covers(h) {
                        self.warn(
                            ing,
                            "TLSHostMismatch",
                            format!(
                                "the certificate in secret {}/{secret} is not valid for {h} (it names {})",
                                id.0,
                                c.names().join(", ")
                            ),
                        );
                    }
                }
            }
            if hosts.is_empty() {
                // A TLS section without hosts: the certificate for names nothing else covers.
                if let Some(c) = &cert {
                    self.claim_tls(ing, "", secret, |t| t.set_default(c.key.clone()));
                }
                continue;
            }
            for h in &hosts {
                let key = cert.as_ref().map(|c| c.key.clone());
                self.claim_tls(ing, h, secret, |t| t.insert(h, key));
            }
        }
    }

    fn claim_tls(
        &mut self,
        ing: &Ingress,
        host: &str,
        secret: &str,
        insert: impl FnOnce(&mut CertTable) -> bool,
    ) {
        let id = ident(ing);
        if insert(&mut self.table.certs) {
            self.tls_owner
                .insert(host.to_string(), (id, secret.to_string()));
            return;
        }
        let Some((owner, owner_secret)) = self.tls_owner.get(host).cloned() else {
            return;
        };
        if owner_secret != secret || owner.0 != id.0 {
            let what = if host.is_empty() {
                "the default certificate".to_string()
            } else {
                format!("the certificate of {host}")
            };
            self.warn(
                ing,
                "TLSConflict",
                format!(
                    "{what} comes from secret {}/{owner_secret} of the older ingress {}/{}; secret {}/{secret} is not used for it",
                    owner.0, owner.0, owner.1, id.0
                ),
            );
        }
    }

    fn add_rules(&mut self, ing: &Arc<Ingress>) {
        let id = ident(ing);
        let Some(spec) = ing.spec.as_ref() else {
            return;
        };
        let redirect_allowed = !ing.metadata.annotations.as_ref().is_some_and(|a| {
            SSL_REDIRECT_ANNOTATIONS
                .iter()
                .any(|k| a.get(*k).is_some_and(|v| v.trim() == "false"))
        });
        let rules = spec.rules.as_deref().unwrap_or_default();
        let mut hosts: Vec<HostKey> = Vec::new();
        for rule in rules {
            let host = HostKey::new(rule.host.as_deref());
            if !hosts.contains(&host) {
                hosts.push(host.clone());
            }
            let Some(http) = rule.http.as_ref() else {
                continue;
            };
            for p in &http.paths {
                let kind = match p.path_type.as_str() {
                    "Exact" => PathKind::Exact,
                    "Prefix" | "ImplementationSpecific" => PathKind::Prefix,
                    other => {
                        self.warn(
                            ing,
                            "PathTypeUnsupported",
                            format!("path type {other:?} is not supported; path skipped"),
                        );
                        continue;
                    }
                };
                let raw = p.path.as_deref().filter(|s| !s.is_empty()).unwrap_or("/");
                let path = match kind {
                    PathKind::Exact => raw.to_string(),
                    PathKind::Prefix => raw.trim_end_matches('/').to_string(),
                };
                let claim = (host.clone(), kind, path.clone());
                if let Some(owner) = self.claimed.get(&claim) {
                    if owner != &id {
                        let owner = owner.clone();
                        self.warn(
                            ing,
                            "RuleConflict",
                            format!(
                                "{} path {raw} ({}) is already routed by the older ingress {}/{}; skipped here",
                                host.describe(),
                                p.path_type,
                                owner.0,
                                owner.1
                            ),
                        );
                    }
                    continue;
                }
                let Some(route) = self.route(ing, &p.backend, &host, redirect_allowed) else {
                    continue;
                };
                self.claimed.insert(claim, id.clone());
                let group = self.group(&host);
                match kind {
                    PathKind::Exact => {
                        group.exact.insert(path, route);
                    }
                    PathKind::Prefix => group.prefixes.push((path, route)),
                }
            }
        }
        let Some(default) = spec.default_backend.as_ref() else {
            return;
        };
        if rules.is_empty() {
            if let Some(owner) = self.default_owner.clone() {
                self.warn(
                    ing,
                    "DefaultBackendConflict",
                    format!(
                        "the default backend is already set by the older ingress {}/{}; this one is not used",
                        owner.0, owner.1
                    ),
                );
                return;
            }
            if let Some(route) = self.route(ing, default, &HostKey::Any, false) {
                self.table.default = Some(route);
                self.default_owner = Some(id);
            }
            return;
        }
        // With rules: the fallback of this Ingress's hosts.
        for host in hosts {
            if let Some(owner) = self.fallbacks.get(&host) {
                if owner != &id {
                    let owner = owner.clone();
                    self.warn(
                        ing,
                        "DefaultBackendConflict",
                        format!(
                            "the default backend of {} is already set by the older ingress {}/{}; this one is not used there",
                            host.describe(),
                            owner.0,
                            owner.1
                        ),
                    );
                }
                continue;
            }
            if let Some(route) = self.route(ing, default, &host, redirect_allowed) {
                self.fallbacks.insert(host.clone(), id.clone());
                self.group(&host).fallback = Some(route);
            }
        }
    }

    fn group(&mut self, host: &HostKey) -> &mut HostRoutes {
        match host {
            HostKey::Exact(h) => self.table.hosts.entry(h.clone()).or_default(),
            HostKey::Wildcard(s) => self.table.wildcards.entry(s.clone()).or_default(),
            HostKey::Any => &mut self.table.any,
        }
    }

    fn route(
        &mut self,
        ing: &Ingress,
        backend: &IngressBackend,
        host: &HostKey,
        redirect_allowed: bool,
    ) -> Option<Route> {
        let (namespace, name) = ident(ing);
        if let Some(r) = &backend.resource {
            self.warn(
                ing,
                "BackendUnsupported",
                format!(
                    "resource backends ({} {}) are not supported; path skipped",
                    r.kind, r.name
                ),
            );
            return None;
        }
        let Some(svc) = &backend.service else {
            self.warn(
                ing,
                "BackendUnsupported",
                "a backend names neither a service nor a resource; path skipped".into(),
            );
            return None;
        };
        let backend = self.backend(ing, &namespace, svc);
        let ssl_redirect = redirect_allowed
            && match host {
                HostKey::Exact(h) => self.table.certs.has_cert(h),
                HostKey::Wildcard(s) => self.table.certs.has_cert(&format!("*.{s}")),
                HostKey::Any => false,
            };
        Some(Route {
            stats: self.keep.metrics.route(&namespace, &name, &svc.name),
            namespace: namespace.into(),
            ingress: name.into(),
            backend,
            ssl_redirect,
        })
    }

    fn backend(
        &mut self,
        ing: &Ingress,
        namespace: &str,
        svc: &k8s_openapi::api::networking::v1::IngressServiceBackend,
    ) -> Arc<Backend> {
        let port_key = match &svc.port {
            Some(p) => match (&p.name, p.number) {
                (Some(n), _) if !n.is_empty() => n.clone(),
                (_, Some(num)) => num.to_string(),
                _ => String::new(),
            },
            None => String::new(),
        };
        let key = (namespace.to_string(), svc.name.clone(), port_key.clone());
        self.services
            .insert((namespace.to_string(), svc.name.clone()));
        if let Some(b) = self.backends.get(&key) {
            return b.clone();
        }
        let targets = match self.targets(ing, namespace, svc, &port_key) {
            Ok(t) => t,
            Err((reason, message)) => {
                self.warn(ing, reason, message);
                Vec::new()
            }
        };
        self.positions.insert(key.clone());
        let b = Arc::new(Backend {
            namespace: namespace.to_string(),
            service: svc.name.clone(),
            targets,
            next: self.keep.position(&key),
        });
        self.backends.insert(key, b.clone());
        b
    }

    /// The ready endpoints of a service port.
    fn targets(
        &mut self,
        _ing: &Ingress,
        namespace: &str,
        backend: &k8s_openapi::api::networking::v1::IngressServiceBackend,
        port_key: &str,
    ) -> Result<Vec<Target>, (&'static str, String)> {
        let Some(service) = self.sources.service(namespace, &backend.name) else {
            return Err((
                "ServiceNotFound",
                format!(
                    "service {namespace}/{} not found; its paths answer 503",
                    backend.name
                ),
            ));
        };
        let spec = service.spec.as_ref();
        let ports = spec.and_then(|s| s.ports.as_deref()).unwrap_or_default();
        let wanted = backend.port.as_ref();
        let port: Option<&ServicePort> = match wanted {
            Some(p) if p.name.as_deref().is_some_and(|n| !n.is_empty()) => ports
                .iter()
                .find(|sp| sp.name.as_deref() == p.name.as_deref()),
            Some(p) if p.number.is_some() => ports.iter().find(|sp| Some(sp.port) == p.number),
            _ if ports.len() == 1 => ports.first(),
            _ => None,
        };
        let external = spec
            .filter(|s| s.type_.as_deref() == Some("ExternalName"))
            .and_then(|s| s.external_name.as_deref())
            .filter(|n| !n.is_empty());
        if let Some(name) = external {
            // An ExternalName service has no endpoints: connect to its name.
            let number = match (port, wanted.and_then(|p| p.number)) {
                (Some(sp), _) => Some(sp.port),
                (None, n) => n,
            };
            return match number
                .and_then(|n| u16::try_from(n).ok())
                .filter(|n| *n > 0)
            {
                Some(n) => Ok(vec![Target::Name(name.into(), n)]),
                None => Err((
                    "ServicePortNotFound",
                    format!(
                        "service {namespace}/{} has no port {port_key}; its paths answer 503",
                        backend.name
                    ),
                )),
            };
        }
        let Some(port) = port else {
            return Err((
                "ServicePortNotFound",
                format!(
                    "service {namespace}/{} has no port {port_key}; its paths answer 503",
                    backend.name
                ),
            ));
        };
        let port_name = port.name.as_deref().unwrap_or("");
        let protocol = port.protocol.as_deref().unwrap_or("TCP");
        if protocol != "TCP" {
            return Err((
                "ServicePortNotFound",
                format!(
                    "port {port_key} of service {namespace}/{} is {protocol}, not TCP; its paths answer 503",
                    backend.name
                ),
            ));
        }
        let mut targets = Vec::new();
        for slice in self.sources.slices(namespace, &backend.name) {
            if !matches!(slice.address_type.as_str(), "IPv4" | "IPv6") {
                continue;
            }
            let Some(number) = slice.ports.iter().flatten().find_map(|p| {
                let same_name = p.name.as_deref().unwrap_or("") == port_name;
                let tcp = p.protocol.as_deref().unwrap_or("TCP") == "TCP";
                (same_name && tcp).then_some(p.port).flatten()
            }) else {
                continue;
            };
            let Ok(number) = u16::try_from(number) else {
                continue;
            };
            for ep in &slice.endpoints {
                let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
                if !ready || number == 0 {
                    continue;
                }
                let Some(ip) = ep.addresses.first().and_then(|a| a.parse::<IpAddr>().ok()) else {
                    continue;
                };
                targets.push(Target::Addr(SocketAddr::new(ip, number)));
            }
        }
        targets.sort();
        targets.dedup();
        Ok(targets)
    }
}

fn describe_hosts(hosts: &[String]) -> String {
    if hosts.is_empty() {
        "the default certificate is".to_string()
    } else {
        hosts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Secret, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Fake {
        services: HashMap<(String, String), Arc<Service>>,
        slices: HashMap<(String, String), Vec<Arc<EndpointSlice>>>,
        secrets: HashMap<(String, String), Secret>,
    }

    impl Sources for Fake {
        fn service(&self, ns: &str, name: &str) -> Option<Arc<Service>> {
            self.services.get(&(ns.into(), name.into())).cloned()
        }
        fn slices(&self, ns: &str, svc: &str) -> Vec<Arc<EndpointSlice>> {
            self.slices
                .get(&(ns.into(), svc.into()))
                .cloned()
                .unwrap_or_default()
        }
        fn cert(&self, ns: &str, name: &str) -> CertState {
            match self.secrets.get(&(ns.into(), name.into())) {
                None => CertState::Missing,
                Some(s) => match crate::tls::load(s) {
                    Ok(c) => CertState::Ready(Arc::new(c)),
                    Err(e) => CertState::Invalid(e),
                },
            }
        }
    }

    impl Fake {
        /// A service `name` with one port `http` (80) and a ready endpoint 10.0.0.N:8080
        /// for each N in `endpoints`.
        fn add_service(&mut self, name: &str, endpoints: &[u8]) {
            let svc = Service {
                metadata: meta("default", name, 0),
                spec: Some(ServiceSpec {
                    ports: Some(vec![ServicePort {
                        name: Some("http".into()),
                        port: 80,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            };
            self.services
                .insert(("default".into(), name.into()), Arc::new(svc));
            let slice = EndpointSlice {
                metadata: meta("default", &format!("{name}-1"), 0),
                address_type: "IPv4".into(),
                ports: Some(vec![EndpointPort {
                    name: Some("http".into()),
                    port: Some(8080),
                    ..Default::default()
                }]),
                endpoints: endpoints
                    .iter()
                    .map(|n| Endpoint {
                        addresses: vec![format!("10.0.0.{n}")],
                        conditions: Some(EndpointConditions {
                            ready: Some(true),
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            };
            self.slices
                .insert(("default".into(), name.into()), vec![Arc::new(slice)]);
        }
    }

    fn meta(
        ns: &str,
        name: &str,
        created: i64,
    ) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            creation_timestamp: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(1_700_000_000 + created).unwrap(),
            )),
            ..Default::default()
        }
    }

    /// An Ingress from its spec as JSON, created `created` seconds after a fixed time.
    fn ingress(name: &str, created: i64, spec: serde_json::Value) -> Arc<Ingress> {
        let mut ing: Ingress = serde_json::from_value(json!({ "spec": spec })).unwrap();
        ing.metadata = meta("default", name, created);
        Arc::new(ing)
    }

    fn keep() -> Keep {
        Keep::new(Arc::new(Metrics::new()))
    }

    /// `service` of the route for host+path, or "404".
    fn route(t: &Table, host: &str, path: &str) -> String {
        t.lookup(host, path)
            .map(|r| r.backend.service.clone())
            .unwrap_or_else(|| "404".into())
    }

    fn svc(name: &str) -> serde_json::Value {
        json!({"service": {"name": name, "port": {"number": 80}}})
    }

    #[test]
    fn paths_match_exact_and_prefix_by_elements_longest_first() {
        let mut f = Fake::default();
        for s in ["root", "foo", "foobar", "exact", "deep", "impl"] {
            f.add_service(s, &[1]);
        }
        let ing = ingress(
            "paths",
            0,
            json!({"rules": [{"host": "a.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": svc("root")},
                {"path": "/foo", "pathType": "Prefix", "backend": svc("foo")},
                {"path": "/foo", "pathType": "Exact", "backend": svc("exact")},
                {"path": "/foo/bar/", "pathType": "Prefix", "backend": svc("deep")},
                {"path": "/foobar", "pathType": "Exact", "backend": svc("foobar")},
                {"path": "/impl", "pathType": "ImplementationSpecific", "backend": svc("impl")},
            ]}}]}),
        );
        let built = build(&[ing], &f, &keep());
        assert!(built.warnings.is_empty(), "{:?}", built.warnings);
        let t = &built.table;
        let h = "a.example.com";
        assert_eq!(route(t, h, "/"), "root");
        assert_eq!(route(t, h, "/x"), "root");
        // Exact over Prefix of the same path.
        assert_eq!(route(t, h, "/foo"), "exact");
        // Prefix by elements: a trailing slash and deeper paths match, a longer last element
        // does not.
        assert_eq!(route(t, h, "/foo/"), "foo");
        assert_eq!(route(t, h, "/foo/baz"), "foo");
        assert_eq!(route(t, h, "/foobar"), "foobar");
        assert_eq!(route(t, h, "/foobarbaz"), "root");
        assert_eq!(
            route(t, h, "/foobar/x"),
            "root",
            "Exact does not match deeper paths"
        );
        // The longest prefix wins; the rule's trailing slash is ignored.
        assert_eq!(route(t, h, "/foo/bar"), "deep");
        assert_eq!(route(t, h, "/foo/bar/x"), "deep");
        assert_eq!(route(t, h, "/foo/barx"), "foo");
        // ImplementationSpecific is a prefix.
        assert_eq!(route(t, h, "/impl/x"), "impl");
        // Case-sensitive.
        assert_eq!(route(t, h, "/FOO"), "root");
    }

    #[test]
    fn hosts_exact_over_wildcard_over_none_and_no_fall_through() {
        let mut f = Fake::default();
        for s in ["exact", "wild", "any", "api"] {
            f.add_service(s, &[1]);
        }
        let ing = ingress(
            "hosts",
            0,
            json!({"rules": [
                {"host": "a.example.com", "http": {"paths": [
                    {"path": "/api", "pathType": "Prefix", "backend": svc("exact")}]}},
                {"host": "*.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": svc("wild")}]}},
                {"http": {"paths": [
                    {"path": "/", "pathType": "Prefix", "backend": svc("any")},
                    {"path": "/api", "pathType": "Prefix", "backend": svc("api")}]}},
            ]}),
        );
        let t = build(&[ing], &f, &keep()).table;
        assert_eq!(route(&t, "a.example.com", "/api/v1"), "exact");
        // The exact host matched: its rules alone decide, no fall-through to `*` or no-host.
        assert_eq!(route(&t, "a.example.com", "/"), "404");
        assert_eq!(route(&t, "b.example.com", "/api"), "wild");
        // A wildcard covers exactly one label.
        assert_eq!(route(&t, "x.b.example.com", "/api"), "api");
        assert_eq!(route(&t, "example.com", "/"), "any");
        assert_eq!(route(&t, "other.org", "/x"), "any");
    }

    #[test]
    fn request_hosts_are_normalized() {
        assert_eq!(normalize_host("A.Example.com:8080"), "a.example.com");
        assert_eq!(normalize_host("a.example.com."), "a.example.com");
        assert_eq!(normalize_host("[::1]:443"), "::1");
        assert_eq!(normalize_host("[::1]"), "::1");
        assert_eq!(normalize_host("10.0.0.1"), "10.0.0.1");
        assert_eq!(normalize_host(""), "");
        assert_eq!(normalize_host("host:notaport"), "host:notaport");
    }

    #[test]
    fn default_backends_host_fallback_then_ruleless_then_404() {
        let mut f = Fake::default();
        for s in ["global", "hostdef", "app", "late"] {
            f.add_service(s, &[1]);
        }
        let global = ingress("global", 0, json!({"defaultBackend": svc("global")}));
        let late = ingress("late", 5, json!({"defaultBackend": svc("late")}));
        let app = ingress(
            "app",
            1,
            json!({"defaultBackend": svc("hostdef"), "rules": [{"host": "a.example.com",
                "http": {"paths": [{"path": "/app", "pathType": "Prefix", "backend": svc("app")}]}}]}),
        );
        let built = build(&[late, app, global], &f, &keep());
        let t = &built.table;
        assert_eq!(route(t, "a.example.com", "/app"), "app");
        assert_eq!(route(t, "a.example.com", "/other"), "hostdef");
        assert_eq!(route(t, "b.example.com", "/"), "global");
        // The newer rule-less Ingress lost the default backend, with a warning.
        assert_eq!(built.warnings.len(), 1, "{:?}", built.warnings);
        assert_eq!(built.warnings[0].ingress, "late");
        assert_eq!(built.warnings[0].reason, "DefaultBackendConflict");
        assert!(built.warnings[0].message.contains("default/global"));

        // Without any default backend: 404.
        let t = build(&[], &f, &keep()).table;
        assert!(t.is_empty());
        assert_eq!(route(&t, "x", "/"), "404");
    }

    #[test]
    fn conflicting_paths_go_to_the_oldest_ingress_and_warn_the_other() {
        let mut f = Fake::default();
        for s in ["old", "new", "newonly"] {
            f.add_service(s, &[1]);
        }
        let rule = |backend: &str, extra: bool| {
            let mut paths =
                vec![json!({"path": "/api/", "pathType": "Prefix", "backend": svc(backend)})];
            if extra {
                paths
                    .push(json!({"path": "/new", "pathType": "Prefix", "backend": svc("newonly")}));
                // Same path, other type: no conflict.
                paths.push(json!({"path": "/api", "pathType": "Exact", "backend": svc(backend)}));
            }
            json!({"rules": [{"host": "a.example.com", "http": {"paths": paths}}]})
        };
        // Listed newest first: the order of the list does not matter, creation time does.
        let newer = ingress("newer", 10, rule("new", true));
        let older = ingress("older", 1, rule("old", false));
        let built = build(&[newer, older], &f, &keep());
        let t = &built.table;
        assert_eq!(route(t, "a.example.com", "/api/x"), "old");
        assert_eq!(route(t, "a.example.com", "/api"), "new");
        assert_eq!(route(t, "a.example.com", "/new"), "newonly");
        assert_eq!(built.warnings.len(), 1, "{:?}", built.warnings);
        let w = &built.warnings[0];
        assert_eq!((w.ingress.as_str(), w.reason), ("newer", "RuleConflict"));
        assert!(w.message.contains("default/older"), "{}", w.message);
        assert!(w.message.contains("host a.example.com"), "{}", w.message);
        let route = t.lookup("a.example.com", "/api/x").unwrap();
        assert_eq!(&*route.ingress, "older");
    }

    #[test]
    fn backends_resolve_ports_by_number_and_name_and_count_ready_endpoints() {
        let mut f = Fake::default();
        f.add_service("web", &[3, 1, 2]);
        // A not-ready endpoint and an endpoint of another port name are left out.
        let slice: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "web-2", "namespace": "default"},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": [
                {"addresses": ["10.0.0.9"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.4"]},
            ]
        }))
        .unwrap();
        let other: EndpointSlice = serde_json::from_value(json!({
            "metadata": {"name": "web-3", "namespace": "default"},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9090}],
            "endpoints": [{"addresses": ["10.0.0.5"]}]
        }))
        .unwrap();
        f.slices
            .get_mut(&("default".into(), "web".into()))
            .unwrap()
            .extend([Arc::new(slice), Arc::new(other)]);
        let ing = ingress(
            "i",
            0,
            json!({"rules": [{"http": {"paths": [
                {"path": "/num", "pathType": "Prefix", "backend": svc("web")},
                {"path": "/name", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"name": "http"}}}},
                {"path": "/badport", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"number": 81}}}},
                {"path": "/gone", "pathType": "Prefix", "backend": svc("gone")},
                {"path": "/bucket", "pathType": "Prefix",
                 "backend": {"resource": {"apiGroup": "k8s.example.com", "kind": "Bucket", "name": "b"}}},
            ]}}]}),
        );
        let built = build(&[ing], &f, &keep());
        let t = &built.table;
        let targets = |p: &str| {
            t.lookup("x", p)
                .map(|r| {
                    r.backend
                        .targets
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let want = [
            "10.0.0.1:8080",
            "10.0.0.2:8080",
            "10.0.0.3:8080",
            "10.0.0.4:8080",
        ];
        assert_eq!(targets("/num"), want);
        assert_eq!(targets("/name"), want);
        // Answer 503 (a route, no endpoints).
        assert!(t.lookup("x", "/badport").is_some());
        assert!(targets("/badport").is_empty());
        assert!(targets("/gone").is_empty());
        // The resource backend is skipped.
        assert!(t.lookup("x", "/bucket").is_none());
        let reasons: Vec<&str> = built.warnings.iter().map(|w| w.reason).collect();
        assert_eq!(
            reasons,
            [
                "ServicePortNotFound",
                "ServiceNotFound",
                "BackendUnsupported"
            ]
        );
        assert!(built.services.contains(&("default".into(), "web".into())));
        assert!(built.services.contains(&("default".into(), "gone".into())));
    }

    #[test]
    fn round_robin_retries_on_the_next_endpoint_and_survives_rebuilds() {
        let mut f = Fake::default();
        f.add_service("web", &[1, 2, 3]);
        let ing = ingress("i", 0, json!({"defaultBackend": svc("web")}));
        let k = keep();
        let t = build(std::slice::from_ref(&ing), &f, &k).table;
        let b = &t.lookup("x", "/").unwrap().backend;
        let (first, retry) = b.pick().unwrap();
        assert_eq!(first.to_string(), "10.0.0.1:8080");
        assert_eq!(retry.unwrap().to_string(), "10.0.0.2:8080");
        // A rebuild continues where the last table was.
        let t2 = build(&[ing], &f, &k).table;
        let b2 = &t2.lookup("x", "/").unwrap().backend;
        let (second, _) = b2.pick().unwrap();
        assert_eq!(second.to_string(), "10.0.0.2:8080");
        let (third, _) = b2.pick().unwrap();
        assert_eq!(third.to_string(), "10.0.0.3:8080");

        let mut single = Fake::default();
        single.add_service("web", &[7]);
        let one = build(
            &[ingress("i", 0, json!({"defaultBackend": svc("web")}))],
            &single,
            &keep(),
        )
        .table;
        let (only, retry) = one.lookup("x", "/").unwrap().backend.pick().unwrap();
        assert_eq!(only.to_string(), "10.0.0.7:8080");
        assert!(retry.is_none());
    }

    #[test]
    fn tls_hosts_get_certificates_broken_secrets_warn_and_http_redirects() {
        use crate::tls::tests::{secret, self_signed};
        let mut f = Fake::default();
        f.add_service("web", &[1]);
        let (crt, key) = self_signed(&["a.example.com"]);
        f.secrets.insert(
            ("default".into(), "a-tls".into()),
            secret("kubernetes.io/tls", &crt, &key),
        );
        f.secrets.insert(
            ("default".into(), "bad-tls".into()),
            secret("kubernetes.io/tls", "nope", &key),
        );
        let (crt2, key2) = self_signed(&["other.example.com"]);
        f.secrets.insert(
            ("default".into(), "other-tls".into()),
            secret("kubernetes.io/tls", &crt2, &key2),
        );
        let rules = json!([
            {"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": svc("web")}]}},
            {"host": "b.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": svc("web")}]}},
            {"host": "c.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": svc("web")}]}},
            {"host": "plain.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": svc("web")}]}},
        ]);
        let ing = ingress(
            "tls",
            0,
            json!({"tls": [
                {"hosts": ["a.example.com"], "secretName": "a-tls"},
                {"hosts": ["b.example.com"], "secretName": "bad-tls"},
                {"hosts": ["c.example.com"], "secretName": "missing"},
            ], "rules": rules}),
        );
        // A newer Ingress naming another secret for a.example.com loses it.
        let newer = ingress(
            "newer",
            3,
            json!({"tls": [{"hosts": ["a.example.com"], "secretName": "other-tls"}],
                   "rules": [{"host": "d.example.com", "http": {"paths": [
                       {"path": "/", "pathType": "Prefix", "backend": svc("web")}]}}]}),
        );
        let built = build(&[ing.clone(), newer], &f, &keep());
        let t = &built.table;
        let a = t
            .certs
            .lookup(Some("a.example.com"))
            .expect("a has a certificate");
        let want =
            crate::tls::load(&f.secrets[&("default".to_string(), "a-tls".to_string())]).unwrap();
        assert_eq!(a.cert, want.key.cert, "the older ingress's secret");
        assert!(t.certs.lookup(Some("b.example.com")).is_none());
        assert!(t.certs.lookup(Some("c.example.com")).is_none());
        let mut reasons: Vec<(&str, &str)> = built
            .warnings
            .iter()
            .map(|w| (w.ingress.as_str(), w.reason))
            .collect();
        reasons.sort();
        assert_eq!(
            reasons,
            [
                ("newer", "TLSConflict"),
                ("newer", "TLSHostMismatch"),
                ("tls", "TLSSecretInvalid"),
                ("tls", "TLSSecretNotFound"),
            ],
            "{:?}",
            built.warnings
        );
        // HTTP requests to a host with a working certificate are redirected.
        assert!(t.lookup("a.example.com", "/").unwrap().ssl_redirect);
        assert!(!t.lookup("b.example.com", "/").unwrap().ssl_redirect);
        assert!(!t.lookup("plain.example.com", "/").unwrap().ssl_redirect);
        assert_eq!(
            tls_secrets(&[ing]),
            HashSet::from([
                ("default".to_string(), "a-tls".to_string()),
                ("default".to_string(), "bad-tls".to_string()),
                ("default".to_string(), "missing".to_string()),
            ])
        );

        // The annotation turns the redirect off.
        let mut annotated = (*ingress(
            "tls",
            0,
            json!({"tls": [{"hosts": ["a.example.com"], "secretName": "a-tls"}], "rules": [
                {"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": svc("web")}]}}]}),
        ))
        .clone();
        annotated.metadata.annotations = Some(BTreeMap::from([(
            "nginx.ingress.kubernetes.io/ssl-redirect".to_string(),
            "false".to_string(),
        )]));
        let t = build(&[Arc::new(annotated)], &f, &keep()).table;
        assert!(!t.lookup("a.example.com", "/").unwrap().ssl_redirect);
    }

    #[test]
    fn wildcard_and_default_certificates() {
        use crate::tls::tests::{secret, self_signed};
        let mut f = Fake::default();
        f.add_service("web", &[1]);
        let (crt, key) = self_signed(&["*.example.com"]);
        f.secrets.insert(
            ("default".into(), "wild".into()),
            secret("kubernetes.io/tls", &crt, &key),
        );
        let (dcrt, dkey) = self_signed(&["fallback.local"]);
        f.secrets.insert(
            ("default".into(), "def".into()),
            secret("kubernetes.io/tls", &dcrt, &dkey),
        );
        let ing = ingress(
            "w",
            0,
            json!({"tls": [{"hosts": ["*.example.com"], "secretName": "wild"}, {"secretName": "def"}],
                   "rules": [{"host": "*.example.com", "http": {"paths": [
                       {"path": "/", "pathType": "Prefix", "backend": svc("web")}]}}]}),
        );
        let built = build(&[ing], &f, &keep());
        assert!(built.warnings.is_empty(), "{:?}", built.warnings);
        let t = &built.table;
        let wild = t.certs.lookup(Some("x.example.com")).unwrap();
        let def = t.certs.lookup(Some("unknown.org")).unwrap();
        assert_ne!(wild.cert, def.cert);
        assert_eq!(t.certs.lookup(None).unwrap().cert, def.cert);
        assert!(t.lookup("x.example.com", "/").unwrap().ssl_redirect);
    }

    #[test]
    fn bad_input_never_panics() {
        let f = Fake::default();
        let odd = [
            json!({}),
            json!({"rules": []}),
            json!({"rules": [{}]}),
            json!({"rules": [{"host": "", "http": {"paths": [
                {"pathType": "ImplementationSpecific", "backend": {}},
                {"path": "", "pathType": "Weird", "backend": svc("x")},
                {"path": "/", "pathType": "Exact", "backend": {"service": {"name": "x"}}}]}}]}),
            json!({"tls": [{}, {"hosts": [""], "secretName": ""}]}),
        ];
        for (i, spec) in odd.into_iter().enumerate() {
            let mut ing = (*ingress("odd", 0, spec)).clone();
            if i == 0 {
                ing.metadata = Default::default();
                ing.spec = None;
            }
            let _ = build(&[Arc::new(ing)], &f, &keep());
        }
    }
}
