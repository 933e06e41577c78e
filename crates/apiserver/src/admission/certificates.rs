//! Kubernetes' CertificateSigningRequest admission: CertificateApproval (approving or denying
//! a request through `approval` takes the `approve` verb on the `signers` resource named by
//! its signer) and CertificateSigning (issuing the certificate through `status` takes the
//! `sign` verb on it). A signer `<domain>/<path>` is also granted as `<domain>/*`.

use std::sync::Arc;

use async_trait::async_trait;
use capstan_api::field::go_quote;
use serde_json::Value;

use super::builtin::{forbidden, str_at};
use super::{Attributes, Operation, Plugin};
use crate::auth::User;
use crate::error::ApiResult;
use crate::request::RequestInfo;
use capstan_api::meta::At as _;

/// Whether the authorizer allows a user a request.
pub type Authorize = Arc<dyn Fn(&User, &RequestInfo) -> bool + Send + Sync>;

const GROUP: &str = "certificates.k8s.io";

fn is_csr_write(a: &Attributes<'_>, subresource: &str) -> bool {
    a.operation == Operation::Update
        && a.info.group == GROUP
        && a.info.plural == "certificatesigningrequests"
        && a.subresource == subresource
}

/// The attributes of `verb` on the signer `name` (Kubernetes' `buildAttributes`).
fn signer_request(verb: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource: true,
        verb: verb.into(),
        api_prefix: "apis".into(),
        group: GROUP.into(),
        version: "*".into(),
        resource: "signers".into(),
        name: name.into(),
        ..Default::default()
    }
}

/// Kubernetes' `IsAuthorizedForSignerName`: `verb` on the signer, else on `<domain>/*`.
pub fn authorized_for_signer(may: &Authorize, user: &User, verb: &str, signer: &str) -> bool {
    if may(user, &signer_request(verb, signer)) {
        return true;
    }
    let domain = signer.split('/').next().unwrap_or("");
    may(user, &signer_request(verb, &format!("{domain}/*")))
}

/// CertificateApproval.
pub struct CertificateApproval {
    pub authorize: Authorize,
}

#[async_trait]
impl Plugin for CertificateApproval {
    fn name(&self) -> &'static str {
        "CertificateApproval"
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if !is_csr_write(a, "approval") {
            return Ok(());
        }
        // The stored signer decides, whatever the write says.
        let signer = old.map(|o| str_at(o, "/spec/signerName")).unwrap_or("");
        if authorized_for_signer(&self.authorize, a.user, "approve", signer) {
            return Ok(());
        }
        Err(forbidden(
            a,
            obj,
            format!(
                "user not permitted to approve requests with signerName {}",
                go_quote(signer)
            ),
        ))
    }
}

/// CertificateSigning.
pub struct CertificateSigning {
    pub authorize: Authorize,
}

#[async_trait]
impl Plugin for CertificateSigning {
    fn name(&self) -> &'static str {
        "CertificateSigning"
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if !is_csr_write(a, "status") {
            return Ok(());
        }
        let certificate = |o: Option<&Value>| {
            o.and_then(|o| o.at("/status/certificate"))
                .filter(|c| !c.is_null())
                .cloned()
        };
        // Only writes that change the certificate.
        if certificate(obj) == certificate(old) {
            return Ok(());
        }
        let signer = old.map(|o| str_at(o, "/spec/signerName")).unwrap_or("");
        if authorized_for_signer(&self.authorize, a.user, "sign", signer) {
            return Ok(());
        }
        Err(forbidden(
            a,
            obj,
            format!(
                "user not permitted to sign requests with signerName {}",
                go_quote(signer)
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::objects::MemoryObjects;
    use serde_json::json;

    /// Allows `approve`/`sign` on the signer names listed for "carol".
    fn authorize(granted: &'static [(&'static str, &'static str)]) -> Authorize {
        Arc::new(move |u: &User, r: &RequestInfo| {
            u.name == "carol"
                && r.resource == "signers"
                && r.group == GROUP
                && granted
                    .iter()
                    .any(|(verb, name)| *verb == r.verb && *name == r.name)
        })
    }

    async fn run(
        plugin: &dyn Plugin,
        user: &str,
        sub: &str,
        obj: &Value,
        old: &Value,
    ) -> ApiResult<()> {
        let objects = MemoryObjects::default();
        let user = User {
            name: user.into(),
            ..Default::default()
        };
        let a = Attributes {
            user: &user,
            operation: Operation::Update,
            info: capstan_api::catalogue::find(GROUP, "v1", "certificatesigningrequests").unwrap(),
            subresource: sub,
            namespace: "",
            name: "jane",
            dry_run: false,
            objects: &objects,
        };
        plugin.validate(&a, Some(obj), Some(old)).await
    }

    fn csr(signer: &str, cert: Option<&str>) -> Value {
        let mut v =
            json!({"metadata": {"name": "jane"}, "spec": {"signerName": signer}, "status": {}});
        if let Some(c) = cert {
            v["status"]["certificate"] = json!(c);
        }
        v
    }

    #[tokio::test]
    async fn approving_takes_approve_on_the_signer_or_its_domain() {
        let p = CertificateApproval {
            authorize: authorize(&[("approve", "example.com/*"), ("sign", "k8s.io/a")]),
        };
        let old = csr("example.com/x", None);
        assert!(run(&p, "carol", "approval", &old, &old).await.is_ok());
        let old = csr("k8s.io/a", None);
        let e = run(&p, "carol", "approval", &old, &old).await.unwrap_err();
        assert_eq!(e.code, 403);
        assert_eq!(
            e.message,
            "certificatesigningrequests.certificates.k8s.io \"jane\" is forbidden: user not permitted to approve requests with signerName \"k8s.io/a\""
        );
        // Not the approval subresource: not this plugin's business.
        assert!(run(&p, "dave", "status", &old, &old).await.is_ok());
    }

    #[tokio::test]
    async fn issuing_takes_sign_on_the_signer() {
        let p = CertificateSigning {
            authorize: authorize(&[("sign", "k8s.io/a")]),
        };
        let old = csr("k8s.io/a", None);
        let issued = csr("k8s.io/a", Some("Y2VydA=="));
        assert!(run(&p, "carol", "status", &issued, &old).await.is_ok());
        let e = run(&p, "dave", "status", &issued, &old).await.unwrap_err();
        assert_eq!(
            e.message,
            "certificatesigningrequests.certificates.k8s.io \"jane\" is forbidden: user not permitted to sign requests with signerName \"k8s.io/a\""
        );
        // Status writes that leave the certificate alone need nothing.
        assert!(run(&p, "dave", "status", &old, &old).await.is_ok());
    }
}
