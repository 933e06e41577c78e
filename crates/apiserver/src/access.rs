//! Access control wired into the server: the RBAC policy kept in step with the cluster's
//! roles and bindings, Kubernetes' default policy created at start, cluster role
//! aggregation, the escalation checks on RBAC writes, and the authorization reviews.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use capstan_api::meta;
use http::Response;
use serde_json::Value;

use crate::admission::{Attributes, Operation, Plugin};
use crate::auth::User;
use crate::error::{ApiError, ApiResult};
use crate::filter::Filter;
use crate::handlers::{value_response, Body};
use crate::rbac::{self, bootstrap, Rbac};
use crate::registry::WriteOptions;
use crate::request::RequestInfo;
use crate::watch_cache::EventType;
use crate::ApiServer;
use capstan_api::meta::At as _;

const RBAC_RESOURCES: [&str; 4] = [
    "clusterroles",
    "clusterrolebindings",
    "roles",
    "rolebindings",
];

/// Create Kubernetes' default roles and bindings that are missing (and give those marked
/// for auto-update the rules and subjects they lack), then keep `rbac` in step with the
/// cluster and run cluster role aggregation, while the server lives.
pub async fn start_rbac(server: &Arc<ApiServer>, rbac: Arc<Rbac>) {
    ensure_default_policy(server).await;
    let weak = Arc::downgrade(server);
    // Load what exists before serving, so that the first requests are authorized.
    let mut state = Feed::default();
    let subs = match state.subscribe(&weak, &rbac) {
        Some(s) => s,
        None => return,
    };
    aggregate_now(server).await;
    tokio::spawn(async move {
        let mut subs = Some(subs);
        loop {
            let current = match subs.take() {
                Some(s) => s,
                None => match state.subscribe(&weak, &rbac) {
                    Some(s) => s,
                    None => return,
                },
            };
            if state.follow(&weak, &rbac, current).await.is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

type Subs = Vec<(&'static str, crate::watch_cache::Subscription)>;

/// What the policy was fed, to forget what disappeared while a watch was being restarted.
#[derive(Default)]
struct Feed {
    seen: HashMap<&'static str, HashSet<(String, String)>>,
}

impl Feed {
    /// Subscribe to the four resources from their current state, feeding that state.
    fn subscribe(&mut self, weak: &Weak<ApiServer>, rbac: &Rbac) -> Option<Subs> {
        let server = weak.upgrade()?;
        let mut subs = Vec::new();
        for resource in RBAC_RESOURCES {
            let reg = server.registry(rbac::GROUP, "v1", resource)?;
            let mut sub = reg.cache.subscribe(Filter::everything(), None).ok()?;
            let mut now = HashSet::new();
            for item in std::mem::take(&mut sub.initial) {
                let o = &item.event.obj;
                now.insert((o.namespace.clone(), o.name.clone()));
                if let Some(v) = o.value() {
                    rbac.upsert(resource, &v);
                }
            }
            for (ns, name) in self.seen.get(resource).into_iter().flatten() {
                if !now.contains(&(ns.clone(), name.clone())) {
                    rbac.remove(resource, ns, name);
                }
            }
            self.seen.insert(resource, now);
            subs.push((resource, sub));
        }
        Some(subs)
    }

    /// Apply events until a watch ends (Some) or the server is gone (None).
    async fn follow(&mut self, weak: &Weak<ApiServer>, rbac: &Rbac, mut subs: Subs) -> Option<()> {
        loop {
            // The next event of any of the four watches; None when one closed (start over).
            let next = std::future::poll_fn(|cx| {
                for (resource, sub) in subs.iter_mut() {
                    match sub.rx.poll_recv(cx) {
                        std::task::Poll::Ready(item) => {
                            return std::task::Poll::Ready(item.map(|i| (*resource, i)))
                        }
                        std::task::Poll::Pending => {}
                    }
                }
                std::task::Poll::Pending
            })
            .await;
            let Some((resource, item)) = next else {
                return Some(());
            };
            let o = &item.event.obj;
            let key = (o.namespace.clone(), o.name.clone());
            let seen = self.seen.entry(resource).or_default();
            if item.kind == EventType::Deleted {
                rbac.remove(resource, &o.namespace, &o.name);
                seen.remove(&key);
            } else if let Some(v) = o.value() {
                rbac.upsert(resource, &v);
                seen.insert(key);
            }
            if resource == "clusterroles" {
                let server = weak.upgrade()?;
                aggregate_now(&server).await;
            }
        }
    }
}

/// Write every aggregated ClusterRole whose rules are not what its selectors gather.
async fn aggregate_now(server: &Arc<ApiServer>) {
    let Some(reg) = server.registry(rbac::GROUP, "v1", "clusterroles") else {
        return;
    };
    let roles: Vec<Value> = reg
        .cache
        .list(&Filter::everything())
        .0
        .iter()
        .filter_map(|o| o.value())
        .collect();
    for role in rbac::aggregate(&roles) {
        let rules = role.get("rules").cloned().unwrap_or(Value::Array(vec![]));
        let name = meta::name(&role).to_string();
        let result = reg
            .update_with("", &name, "", &WriteOptions::default(), |old| {
                let mut next = old.clone();
                next["rules"] = rules.clone();
                meta::remove_meta(&mut next, "resourceVersion");
                Ok(next)
            })
            .await;
        if let Err(e) = result {
            tracing::warn!(role = name, error = %e.message, "cannot aggregate a cluster role");
        }
    }
}

/// Kubernetes' default roles and bindings: create what is missing; for objects annotated
/// for auto-update, add the rules (or subjects) they lack.
async fn ensure_default_policy(server: &ApiServer) {
    let sets = [
        ("clusterroles", bootstrap::cluster_roles()),
        ("clusterrolebindings", bootstrap::cluster_role_bindings()),
        ("roles", bootstrap::roles()),
        ("rolebindings", bootstrap::role_bindings()),
    ];
    let opts = WriteOptions::default();
    for (resource, objects) in sets {
        let Some(reg) = server.registry(rbac::GROUP, "v1", resource) else {
            continue;
        };
        for obj in objects {
            let ns = meta::namespace(&obj).to_string();
            let name = meta::name(&obj).to_string();
            match reg.create(&ns, obj.clone(), &opts).await {
                Ok(_) => continue,
                Err(e) if e.code == 409 => {}
                Err(e) => {
                    tracing::warn!(resource, name, error = %e.message, "cannot create a default RBAC object");
                    continue;
                }
            }
            let field = if resource.ends_with("bindings") {
                "subjects"
            } else {
                "rules"
            };
            let result = reg
                .update_with(&ns, &name, "", &opts, |old| {
                    let autoupdate = old
                        .at("/metadata/annotations")
                        .and_then(|a| a.get(bootstrap::AUTOUPDATE_ANNOTATION))
                        .and_then(Value::as_str)
                        != Some("false");
                    let mut next = old.clone();
                    meta::remove_meta(&mut next, "resourceVersion");
                    if !autoupdate || old.get("aggregationRule").is_some() {
                        return Ok(next);
                    }
                    let mut have: Vec<Value> = old
                        .get(field)
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default();
                    for want in obj
                        .get(field)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if !have.contains(want) {
                            have.push(want.clone());
                        }
                    }
                    next[field] = Value::Array(have);
                    Ok(next)
                })
                .await;
            if let Err(e) = result {
                tracing::warn!(resource, name, error = %e.message, "cannot reconcile a default RBAC object");
            }
        }
    }
}

/// The escalation and bind checks of RBAC writes: a user cannot grant, through a role or a
/// binding, permissions they do not hold.
pub struct RbacEscalation {
    pub rbac: Arc<Rbac>,
    pub server: Weak<ApiServer>,
}

#[async_trait]
impl Plugin for RbacEscalation {
    fn name(&self) -> &'static str {
        "RBACEscalation"
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if a.info.group != rbac::GROUP || !a.subresource.is_empty() {
            return Ok(());
        }
        let Some(obj) = obj else { return Ok(()) };
        let Some(server) = self.server.upgrade() else {
            return Err(ApiError::internal("the server is shutting down"));
        };
        let may = |u: &User, r: &RequestInfo| server.auth.authorize(u, r).is_ok();
        let resource = a.info.plural;
        let (user, ns) = (a.user, a.namespace);
        match (a.operation, resource, old) {
            (Operation::Create, "roles" | "clusterroles", _) => {
                rbac::check_role_write(&self.rbac, &may, user, resource, ns, obj)
            }
            (Operation::Update, "roles" | "clusterroles", Some(old)) => {
                rbac::check_role_update(&self.rbac, &may, user, resource, ns, old, obj)
            }
            (Operation::Create, "rolebindings" | "clusterrolebindings", _) => {
                rbac::check_binding_write(&self.rbac, &may, user, resource, ns, obj)
            }
            (Operation::Update, "rolebindings" | "clusterrolebindings", Some(old)) => {
                rbac::check_binding_update(&self.rbac, &may, user, resource, ns, old, obj)
            }
            _ => Ok(()),
        }
    }
}

/// Answer a create of one of the authorization reviews, or SelfSubjectReview.
pub fn review(
    server: &ApiServer,
    rbac: Option<&Rbac>,
    info: &RequestInfo,
    user: &User,
    body: &Value,
) -> ApiResult<Response<Body>> {
    let authorize = |u: &User, r: &RequestInfo| match server.auth.authorize(u, r) {
        Ok(()) => (true, String::new()),
        Err(reason) => (false, reason),
    };
    let answer = match (info.group.as_str(), info.resource.as_str()) {
        ("authorization.k8s.io", "subjectaccessreviews") => {
            rbac::subject_access_review(body, &authorize)?
        }
        ("authorization.k8s.io", "localsubjectaccessreviews") => {
            rbac::local_subject_access_review(body, &info.namespace, &authorize)?
        }
        ("authorization.k8s.io", "selfsubjectaccessreviews") => {
            rbac::self_subject_access_review(body, user, &authorize)?
        }
        ("authorization.k8s.io", "selfsubjectrulesreviews") => {
            let empty = Rbac::new();
            rbac::self_subject_rules_review(body, user, rbac.unwrap_or(&empty), Vec::new())?
        }
        ("authentication.k8s.io", "selfsubjectreviews") => rbac::self_subject_review(user),
        _ => return Err(ApiError::not_found_path()),
    };
    Ok(value_response(201, &answer))
}

/// How a server authenticates and authorizes, as `capstan server` sets it up.
pub struct AccessOptions {
    /// The service account token signing key (the PKI that holds it).
    pub key: Arc<dyn crate::authn::KeySource>,
    /// `--token-auth-file`.
    pub token_file: Option<std::path::PathBuf>,
    /// The `jwks_uri` issuer discovery announces.
    pub jwks_uri: Option<String>,
    /// `--anonymous-auth`.
    pub allow_anonymous: bool,
    /// Verifies client certificates against the cluster CA.
    pub client_certs: Option<capstan_pki::ClientCertCheck>,
}

/// A server's access control before the server exists: the chain to build it with, and what
/// [`enable`] needs afterwards.
pub struct Access {
    pub auth: crate::auth::AuthChain,
    objects: Arc<crate::objects::LateObjects>,
    rbac: Arc<Rbac>,
}

/// Kubernetes' default access control: x509 client certificates, then bearer tokens (token
/// file, service account tokens, bootstrap tokens); authorization by `system:masters`, the
/// Node authorizer, then RBAC.
pub fn access(options: AccessOptions) -> Result<Access, String> {
    use crate::authn::{BootstrapTokens, ServiceAccountTokens, TokenAuthenticators, TokenFile};
    let objects = Arc::new(crate::objects::LateObjects::default());
    let mut sa = ServiceAccountTokens::new(options.key, String::new(), Vec::new(), objects.clone());
    if let Some(uri) = options.jwks_uri {
        sa = sa.with_jwks_uri(uri);
    }
    let sa = Arc::new(sa);
    let mut tokens = TokenAuthenticators::new(sa.api_audiences().to_vec());
    if let Some(path) = &options.token_file {
        tokens.push(Arc::new(TokenFile::load(path)?));
    }
    tokens.push(sa.clone());
    tokens.push(Arc::new(BootstrapTokens::new(objects.clone())));
    let rbac = Arc::new(Rbac::new());
    let auth = crate::auth::AuthChain {
        authenticators: vec![
            Box::new(crate::auth::InProcessAuthenticator),
            Box::new(crate::auth::X509Authenticator),
            Box::new(tokens.clone()),
        ],
        authorizers: vec![
            Box::new(crate::auth::MastersAuthorizer),
            Box::new(crate::node_authz::NodeAuthorizer::new(objects.clone())),
            Box::new(rbac.clone()),
        ],
        allow_anonymous: options.allow_anonymous,
        rbac: Some(rbac.clone()),
        service_accounts: Some(sa),
        tokens: Some(tokens),
        client_certs: options.client_certs,
    };
    Ok(Access {
        auth,
        objects,
        rbac,
    })
}

impl Access {
    /// The chain to build the server with, and what finishes the setup once it exists.
    pub fn into_parts(self) -> (crate::auth::AuthChain, Enable) {
        (
            self.auth,
            Enable {
                objects: self.objects,
                rbac: self.rbac,
            },
        )
    }
}

/// The rest of [`access`]'s setup, for once the server exists.
pub struct Enable {
    objects: Arc<crate::objects::LateObjects>,
    rbac: Arc<Rbac>,
}

impl Enable {
    /// Point the authenticators at `server`'s objects, load the RBAC policy (creating the
    /// default one), and install admission.
    pub async fn enable(self, server: &Arc<ApiServer>) {
        let target: Arc<dyn crate::objects::Objects> = server.clone();
        self.objects.set(&target);
        start_rbac(server, self.rbac.clone()).await;
        server.install_admission(admission_chain(server, self.rbac, self.objects));
    }
}

/// The admission plugins in Kubernetes' order: RBAC's escalation checks (Kubernetes makes
/// them in the RBAC storage, before admission), the built-in plugins, the certificate
/// plugins (which ask the server's authorizer), and the webhooks just before ResourceQuota.
pub fn admission_chain(
    server: &Arc<ApiServer>,
    rbac: Arc<Rbac>,
    objects: Arc<crate::objects::LateObjects>,
) -> crate::admission::Chain {
    use crate::admission::certificates::{Authorize, CertificateApproval, CertificateSigning};
    use crate::admission::webhook::Webhooks;
    let mut plugins: Vec<Arc<dyn Plugin>> = vec![Arc::new(RbacEscalation {
        rbac,
        server: Arc::downgrade(server),
    })];
    let mut builtin = crate::admission::builtin::builtin_plugins();
    let quota = builtin.pop();
    plugins.extend(builtin);
    let weak = Arc::downgrade(server);
    let authorize: Authorize = Arc::new(move |user: &User, req: &RequestInfo| {
        weak.upgrade()
            .is_some_and(|s| s.auth.authorize(user, req).is_ok())
    });
    plugins.push(Arc::new(CertificateApproval {
        authorize: authorize.clone(),
    }));
    plugins.push(Arc::new(CertificateSigning { authorize }));
    plugins.push(Webhooks::mutating(objects.clone()));
    plugins.push(Webhooks::validating(objects));
    plugins.extend(quota);
    crate::admission::Chain { plugins }
}
