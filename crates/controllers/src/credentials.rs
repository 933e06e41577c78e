//! Each controller's own credentials (`--use-service-account-credentials`): the manager makes
//! sure the controller's service account exists in kube-system and asks for a token of it
//! (TokenRequest), so every write a controller makes is authorized by that controller's role
//! (`system:controller:<account>`), not by the manager's.

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PostParams;
use kube::{Api, Client};

/// Tokens are asked for a year; the manager asks again when it restarts.
const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

/// A client authenticating as `system:serviceaccount:kube-system:<account>`.
pub async fn client_for(
    manager: &Client,
    token_client: &crate::TokenClient,
    account: &str,
) -> anyhow::Result<Client> {
    let accounts: Api<ServiceAccount> = Api::namespaced(manager.clone(), "kube-system");
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some(account.to_string()),
            namespace: Some("kube-system".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match accounts.create(&PostParams::default(), &sa).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => anyhow::bail!("creating service account kube-system/{account}: {e}"),
    }
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(TOKEN_SECONDS),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let token: TokenRequest = accounts
        .create_subresource("token", account, &PostParams::default(), &request)
        .await
        .map_err(|e| anyhow::anyhow!("requesting a token for kube-system/{account}: {e}"))?;
    let token = token
        .status
        .map(|s| s.token)
        .ok_or_else(|| anyhow::anyhow!("no token in the TokenRequest for {account}"))?;
    token_client(&token)
}
