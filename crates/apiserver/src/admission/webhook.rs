//! Dynamic admission: the webhooks of MutatingWebhookConfigurations and
//! ValidatingWebhookConfigurations (Kubernetes' `MutatingAdmissionWebhook` and
//! `ValidatingAdmissionWebhook` plugins, `apiserver/pkg/admission/plugin/webhook`).
//!
//! For each write, the configurations are read from the watch cache, each webhook is matched
//! against the request ([`matching`]), and the matching ones are sent an AdmissionReview
//! ([`review`]) over HTTPS ([`client`]):
//!
//! - mutating webhooks one after another, each JSON patch applied to the object before the next
//!   webhook sees it; when a webhook changed the object, the `reinvocationPolicy: IfNeeded`
//!   webhooks called before it are called once more, in a second and last round;
//! - validating webhooks all at once; the first failure in webhook order fails the request.
//!
//! Calls that fail (unreachable, timed out, a malformed answer) fail the request with a 500
//! under `failurePolicy: Fail` and are skipped under `Ignore`. A denial fails the request with
//! the webhook's status. A dry-run request fails with 400 at a webhook that declares side
//! effects. Writes of the admission configuration kinds themselves never go through webhooks.
//!
//! Not (yet) as Kubernetes: `matchConditions` are CEL, which capstan does not evaluate — a
//! webhook with match conditions is treated as one whose conditions fail to evaluate (skipped
//! under `Ignore`, the request rejected under `Fail`, see [`matching::decide`]). Warnings and
//! audit annotations from webhooks are logged, not returned to the client. The request's own
//! group/version is not known to admission, so `requestKind`/`requestResource` name the
//! storage version.

mod client;
mod errors;
mod hooks;
mod matching;
mod review;

#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

pub use client::{HttpsTransport, Target, Transport};
pub use hooks::Phase;

use crate::admission::{Attributes, Plugin};
use crate::error::{ApiError, ApiResult};
use crate::objects::Objects;
use errors::{internal_error, CallError};
use hooks::{FailurePolicy, Hook};
use matching::Decision;

const GROUP: &str = "admissionregistration.k8s.io";

/// The webhook admission plugin of one phase.
pub struct Webhooks {
    objects: Arc<dyn Objects>,
    transport: Arc<dyn Transport>,
    phase: Phase,
}

impl Webhooks {
    /// The mutating phase (`MutatingAdmissionWebhook`): acts in [`Plugin::admit`].
    pub fn mutating(objects: Arc<dyn Objects>) -> Arc<dyn Plugin> {
        Self::with_transport(Phase::Mutating, objects, Arc::new(HttpsTransport))
    }

    /// The validating phase (`ValidatingAdmissionWebhook`): acts in [`Plugin::validate`].
    pub fn validating(objects: Arc<dyn Objects>) -> Arc<dyn Plugin> {
        Self::with_transport(Phase::Validating, objects, Arc::new(HttpsTransport))
    }

    /// A phase that calls webhooks through `transport`.
    pub fn with_transport(
        phase: Phase,
        objects: Arc<dyn Objects>,
        transport: Arc<dyn Transport>,
    ) -> Arc<dyn Plugin> {
        Arc::new(Webhooks {
            objects,
            transport,
            phase,
        })
    }

    fn hooks(&self) -> Vec<Hook> {
        hooks::from_configurations(&self.objects.list(GROUP, self.phase.resource(), ""))
    }

    fn decide(
        &self,
        hook: &Hook,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> Decision {
        let namespace = namespace_of(a);
        let req = matching::Request {
            operation: a.operation,
            info: a.info,
            subresource: a.subresource,
            namespace: &namespace,
            name: a.name,
            object: obj,
            old,
        };
        matching::decide(hook, &req, &|ns| self.objects.get("", "namespaces", "", ns))
    }

    /// Send `hook` the review of this request and return its verdict (a denial is an error).
    async fn call(
        &self,
        hook: &Hook,
        resource: &'static capstan_api::catalogue::ResourceInfo,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<review::Verdict, CallError> {
        if a.dry_run && !hook.side_effects.dry_run_safe() {
            return Err(match hook.side_effects {
                hooks::SideEffects::Missing => {
                    CallError::calling(&hook.name, "Webhook SideEffects is nil")
                }
                _ => CallError::Rejected(ApiError::bad_request(format!(
                    "admission webhook {} does not support dry run",
                    capstan_api::field::go_quote(&hook.name)
                ))),
            });
        }
        let namespace = namespace_of(a);
        let subject = review::Subject {
            user: a.user,
            operation: a.operation,
            request_resource: a.info,
            resource,
            subresource: a.subresource,
            namespace: &namespace,
            name: a.name,
            object: obj,
            old,
            dry_run: a.dry_run,
        };
        let rev = review::build(&hook.review_versions, &subject).map_err(|e| {
            CallError::calling(
                &hook.name,
                format!("could not create admission objects: {e}"),
            )
        })?;
        let target = client::resolve(
            &hook.endpoint,
            &hook.ca_bundle,
            hook.timeout,
            self.objects.as_ref(),
        )
        .map_err(|e| CallError::calling(&hook.name, format!("failed to call webhook: {e}")))?;
        let answer =
            tokio::time::timeout(hook.timeout, self.transport.post(&target, rev.body.clone()))
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "Post {}: context deadline exceeded",
                        capstan_api::field::go_quote(&target.url)
                    ))
                })
                .map_err(|e| {
                    CallError::calling(&hook.name, format!("failed to call webhook: {e}"))
                })?;
        let verdict = review::verify(&rev, self.phase == Phase::Mutating, &answer)
            .map_err(|e| CallError::calling(&hook.name, e))?;
        for w in &verdict.warnings {
            tracing::warn!(webhook = %hook.name, warning = %w, "admission webhook warning");
        }
        if !verdict.allowed {
            return Err(CallError::Rejected(errors::rejection(
                &hook.name,
                verdict.status.as_ref(),
            )));
        }
        Ok(verdict)
    }

    /// Call one mutating webhook and apply its patch to `obj`; whether the object changed.
    async fn mutate_once(
        &self,
        hook: &Hook,
        resource: &'static capstan_api::catalogue::ResourceInfo,
        a: &Attributes<'_>,
        obj: &mut Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<bool, CallError> {
        use capstan_api::convert;
        let storage = a.info;
        let sent = obj.as_deref().map(|o| {
            convert::from_storage(resource.group, resource.version, resource.kind, o.clone())
        });
        let old_sent = old.map(|o| {
            convert::from_storage(resource.group, resource.version, resource.kind, o.clone())
        });
        let verdict = self
            .call(hook, resource, a, sent.as_ref(), old_sent.as_ref())
            .await?;
        let Some(patch) = verdict.patch else {
            return Ok(false);
        };
        let ops = capstan_api::patch::json::JsonPatch::decode(&patch).map_err(|e| {
            CallError::calling(
                &hook.name,
                format!(
                    "received undecodable patch in webhook response: {}",
                    e.message()
                ),
            )
        })?;
        if ops.is_empty() {
            return Ok(false);
        }
        let (Some(target), Some(sent)) = (obj.as_deref_mut(), sent) else {
            return Err(CallError::Rejected(internal_error(&format!(
                "admission webhook {} attempted to modify the object, which is not supported for this operation",
                capstan_api::field::go_quote(&hook.name)
            ))));
        };
        let patched = ops
            .apply(sent)
            .map_err(|e| CallError::Rejected(internal_error(e.message())))?;
        if !patched.is_object() {
            return Err(CallError::Rejected(internal_error(
                "the patched object is not a JSON object",
            )));
        }
        let mut patched =
            convert::to_storage(resource.group, resource.version, resource.kind, patched);
        let changed = patched != *target;
        capstan_api::defaults::apply(storage.group, storage.kind, &mut patched);
        *target = patched;
        Ok(changed)
    }

    /// The mutating phase: webhooks in order, then one reinvocation round if needed.
    async fn admit_all(
        &self,
        a: &Attributes<'_>,
        mut obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let hooks = self.hooks();
        // Reinvocable webhooks called since the object last changed, and those to call again.
        let mut invoked: Vec<usize> = Vec::new();
        let mut again: BTreeSet<usize> = BTreeSet::new();
        for round in 0..2 {
            for (i, hook) in hooks.iter().enumerate() {
                if round == 1 && !again.contains(&i) {
                    continue;
                }
                let decision = self.decide(hook, a, obj.as_deref(), old);
                let resource = match decision {
                    Decision::Skip => continue,
                    Decision::Reject(e) => return Err(e),
                    Decision::Call { resource } => resource,
                };
                let changed = match self.mutate_once(hook, resource, a, &mut obj, old).await {
                    Ok(changed) => changed,
                    Err(e) => {
                        fail_or_ignore(hook, e)?;
                        false
                    }
                };
                if changed {
                    again.extend(invoked.drain(..));
                }
                if hook.reinvoke_if_needed {
                    invoked.push(i);
                }
            }
            if round == 0 && again.is_empty() {
                break;
            }
        }
        Ok(())
    }

    /// The validating phase: every matching webhook at once.
    async fn validate_all(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        let hooks = self.hooks();
        let mut calls = Vec::new();
        for hook in &hooks {
            match self.decide(hook, a, obj, old) {
                Decision::Skip => {}
                Decision::Reject(e) => return Err(e),
                Decision::Call { resource } => {
                    let convert = |o: &Value| {
                        capstan_api::convert::from_storage(
                            resource.group,
                            resource.version,
                            resource.kind,
                            o.clone(),
                        )
                    };
                    let (sent, old_sent) = (obj.map(convert), old.map(convert));
                    calls.push(async move {
                        let r = self
                            .call(hook, resource, a, sent.as_ref(), old_sent.as_ref())
                            .await;
                        (hook, r)
                    });
                }
            }
        }
        let mut first = None;
        for (hook, result) in futures::future::join_all(calls).await {
            if let Err(e) = result {
                if let Err(e) = fail_or_ignore(hook, e) {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}

/// Apply the webhook's failurePolicy to a failed call: `Ok` when it is to be ignored.
fn fail_or_ignore(hook: &Hook, e: CallError) -> ApiResult<()> {
    match e {
        CallError::Calling { .. } if hook.failure_policy == FailurePolicy::Ignore => {
            tracing::warn!(configuration = %hook.configuration, webhook = %hook.name, error = %e, "failed calling webhook, failing open");
            Ok(())
        }
        CallError::Calling { .. } => {
            tracing::warn!(configuration = %hook.configuration, webhook = %hook.name, error = %e, "failed calling webhook, failing closed");
            Err(e.into_api_error())
        }
        CallError::Rejected(e) => Err(e),
    }
}

/// The request's namespace as admission names it: a Namespace object's own name for requests
/// about namespaces.
fn namespace_of(a: &Attributes<'_>) -> String {
    if a.info.group.is_empty() && a.info.plural == "namespaces" {
        a.name.to_string()
    } else {
        a.namespace.to_string()
    }
}

#[async_trait]
impl Plugin for Webhooks {
    fn name(&self) -> &'static str {
        match self.phase {
            Phase::Mutating => "MutatingAdmissionWebhook",
            Phase::Validating => "ValidatingAdmissionWebhook",
        }
    }

    async fn admit(
        &self,
        a: &Attributes<'_>,
        obj: Option<&mut Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if self.phase != Phase::Mutating || matching::is_exempt(a.info) {
            return Ok(());
        }
        self.admit_all(a, obj, old).await
    }

    async fn validate(
        &self,
        a: &Attributes<'_>,
        obj: Option<&Value>,
        old: Option<&Value>,
    ) -> ApiResult<()> {
        if self.phase != Phase::Validating || matching::is_exempt(a.info) {
            return Ok(());
        }
        self.validate_all(a, obj, old).await
    }
}
