//! The request pipeline's first two steps: authentication (who is asking) and authorization
//! (may they). The chain and the traits live here; concrete RBAC and token authenticators
//! plug in behind them.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use http::HeaderMap;

use crate::request::RequestInfo;

/// An authenticated user, as Kubernetes' `user.Info`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl User {
    pub fn anonymous() -> User {
        User {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..Default::default()
        }
    }

    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// What the connection knows about its client.
#[derive(Debug, Clone, Default)]
pub struct ConnInfo {
    pub peer: Option<SocketAddr>,
    /// The verified client certificate's subject: (CN, O values).
    pub client_cert: Option<(String, Vec<String>)>,
    /// Why the certificate the client presented is not acceptable (another CA, expired).
    pub client_cert_error: Option<String>,
    /// Set for the in-process transport: the user the component runs as.
    pub in_process_user: Option<User>,
}

/// One way of recognizing a credential.
pub trait Authenticator: Send + Sync {
    /// None: no credential of this kind (try the next authenticator). Some(Err): a credential
    /// of this kind that is invalid (401 at once).
    fn authenticate(&self, headers: &HeaderMap, conn: &ConnInfo) -> Option<Result<User, String>>;
}

/// x509 client certificates verified by TLS against the cluster CA: CN is the user, each O a
/// group.
pub struct X509Authenticator;

impl Authenticator for X509Authenticator {
    fn authenticate(&self, _headers: &HeaderMap, conn: &ConnInfo) -> Option<Result<User, String>> {
        if let Some(e) = &conn.client_cert_error {
            return Some(Err(e.clone()));
        }
        let (cn, orgs) = conn.client_cert.as_ref()?;
        Some(Ok(User {
            name: cn.clone(),
            groups: orgs.clone(),
            ..Default::default()
        }))
    }
}

/// Components running inside the server process.
pub struct InProcessAuthenticator;

impl Authenticator for InProcessAuthenticator {
    fn authenticate(&self, _headers: &HeaderMap, conn: &ConnInfo) -> Option<Result<User, String>> {
        conn.in_process_user.clone().map(Ok)
    }
}

/// The result of authorization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Deny(String),
    NoOpinion,
}

/// One authorizer of the chain (RBAC, Node, ...).
pub trait Authorizer: Send + Sync {
    fn authorize(&self, user: &User, req: &RequestInfo) -> Decision;
}

/// `system:masters` may do anything, as in Kubernetes.
pub struct MastersAuthorizer;

impl Authorizer for MastersAuthorizer {
    fn authorize(&self, user: &User, _req: &RequestInfo) -> Decision {
        if user.in_group("system:masters") {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }
}

/// Allows every authenticated request (until RBAC is enforced).
pub struct AllowAuthenticated;

impl Authorizer for AllowAuthenticated {
    fn authorize(&self, user: &User, _req: &RequestInfo) -> Decision {
        if user.in_group("system:authenticated") {
            Decision::Allow
        } else {
            Decision::NoOpinion
        }
    }
}

/// The authentication chain: the first authenticator that recognizes a credential decides.
/// Then the authorizers, in order: the first with an opinion decides.
#[derive(Default)]
pub struct AuthChain {
    pub authenticators: Vec<Box<dyn Authenticator>>,
    pub authorizers: Vec<Box<dyn Authorizer>>,
    pub allow_anonymous: bool,
    /// The RBAC policy (also one of `authorizers`), for rules reviews and escalation checks.
    pub rbac: Option<std::sync::Arc<crate::rbac::Rbac>>,
    /// Service account tokens: TokenRequest and issuer discovery.
    pub service_accounts: Option<std::sync::Arc<crate::authn::ServiceAccountTokens>>,
    /// Every bearer token authenticator, for TokenReview.
    pub tokens: Option<crate::authn::TokenAuthenticators>,
    /// Verifies client certificates the TLS layer only requested.
    pub client_certs: Option<capstan_pki::ClientCertCheck>,
}

impl AuthChain {
    /// Who sent the request. Err is a 401.
    pub fn authenticate(&self, headers: &HeaderMap, conn: &ConnInfo) -> Result<User, String> {
        for a in &self.authenticators {
            if let Some(result) = a.authenticate(headers, conn) {
                let mut user = result?;
                if !user.in_group("system:authenticated") {
                    user.groups.push("system:authenticated".into());
                }
                return Ok(user);
            }
        }
        if self.allow_anonymous {
            return Ok(User::anonymous());
        }
        Err("Unauthorized".into())
    }

    /// May `user` do `req`? Err is a 403 message.
    pub fn authorize(&self, user: &User, req: &RequestInfo) -> Result<(), String> {
        for a in &self.authorizers {
            match a.authorize(user, req) {
                Decision::Allow => return Ok(()),
                Decision::Deny(reason) => return Err(reason),
                Decision::NoOpinion => {}
            }
        }
        Err(String::new())
    }
}

/// Kubernetes' 403 message for a resource request.
pub fn forbidden_message(user: &User, req: &RequestInfo, reason: &str) -> String {
    let subject = format!("User \"{}\"", user.name);
    let mut msg = if req.is_resource {
        let resource = if req.group.is_empty() {
            req.resource.clone()
        } else {
            format!("{}.{}", req.resource, req.group)
        };
        let sub = if req.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", req.subresource)
        };
        let head = if req.name.is_empty() {
            resource
        } else {
            format!("{resource} \"{}\"", req.name)
        };
        let scope = if req.namespace.is_empty() {
            " at the cluster scope".to_string()
        } else {
            format!(" in the namespace \"{}\"", req.namespace)
        };
        format!(
            "{head} is forbidden: {subject} cannot {} resource \"{}{sub}\" in API group \"{}\"{scope}",
            req.verb, req.resource, req.group
        )
    } else {
        format!(
            "forbidden: {subject} cannot {} path \"{}\"",
            req.verb, req.path
        )
    };
    if !reason.is_empty() {
        msg.push_str(": ");
        msg.push_str(reason);
    }
    msg
}

impl<T: Authorizer + ?Sized> Authorizer for std::sync::Arc<T> {
    fn authorize(&self, user: &User, req: &RequestInfo) -> Decision {
        (**self).authorize(user, req)
    }
}
