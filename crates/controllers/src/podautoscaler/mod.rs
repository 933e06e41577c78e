//! The HorizontalPodAutoscaler controller (Kubernetes v1.32's pkg/controller/podautoscaler):
//! every `--horizontal-pod-autoscaler-sync-period` (15 s) each autoscaler reads its target's
//! scale subresource, the usage of the target's pods from the resource metrics API
//! (`metrics.k8s.io`, which the API server serves from the kubelets), works out the replica
//! count each metric asks for ([`calc`]), stabilizes and rate-limits it (the `behavior`
//! rules, or the older fixed rules when there is none: [`normalize`]), writes the scale and
//! reports in `status` (current metrics, conditions AbleToScale / ScalingActive /
//! ScalingLimited) and events (SuccessfulRescale, FailedGetResourceMetric, ...).
//!
//! Resource and ContainerResource metrics are computed. Pods, Object and External metrics
//! come from the custom and external metrics APIs, which capstan does not serve: such a metric
//! is reported as failing to be read (as Kubernetes reports it without an adapter).

pub mod calc;
pub mod normalize;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use capstan_api::selector::LabelSelector as Matcher;
use capstan_api::validation::quantity;
use capstan_runtime::{Change, Informer, Queue, Recorder};
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    CrossVersionObjectReference, HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition,
    HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus, MetricTarget, MetricValueStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::{Api, Client};
use parking_lot::Mutex;

use crate::util;
use crate::Ctx;
use calc::{PodMetric, Tuning};
use normalize::History;

/// The condition types of an autoscaler.
const ABLE_TO_SCALE: &str = "AbleToScale";
const SCALING_ACTIVE: &str = "ScalingActive";
const SCALING_LIMITED: &str = "ScalingLimited";

pub fn start(ctx: &Ctx) {
    let queue = Queue::new("horizontalpodautoscaler");
    let o = &ctx.opts;
    let c = Arc::new(Controller {
        client: ctx.client.clone(),
        hpas: ctx.informers.get::<HorizontalPodAutoscaler>(),
        pods: ctx.informers.get::<Pod>(),
        recorder: ctx.recorder("horizontal-pod-autoscaler"),
        queue: queue.clone(),
        history: Mutex::new(HashMap::new()),
        scheduled: Mutex::new(HashSet::new()),
        sync_period: o.hpa_sync_period,
        downscale_stabilization: o.hpa_downscale_stabilization,
        tuning: Tuning {
            tolerance: o.hpa_tolerance,
            cpu_initialization_period: o.hpa_cpu_initialization_period,
            initial_readiness_delay: o.hpa_initial_readiness_delay,
        },
    });
    let q = queue.clone();
    c.hpas.on_change(move |ch| match ch {
        Change::Add(h) => q.add(key_of(h)),
        // Status writes (ours) come back as updates: only a changed spec is worth a sync
        // before the next period.
        Change::Update { old, new } => {
            if old.spec != new.spec {
                q.add(key_of(new));
            }
        }
        Change::Delete(_) => {}
    });
    let workers = ctx.opts.workers;
    tokio::spawn(async move {
        c.hpas.wait_synced().await;
        c.pods.wait_synced().await;
        let w = c.clone();
        c.queue.run_workers(workers, move |key| {
            let c = w.clone();
            async move { c.sync(&key).await }
        });
    });
}

fn key_of(h: &HorizontalPodAutoscaler) -> String {
    capstan_runtime::key(
        h.metadata.namespace.as_deref(),
        h.metadata.name.as_deref().unwrap_or_default(),
    )
}

struct Controller {
    client: Client,
    hpas: Arc<Informer<HorizontalPodAutoscaler>>,
    pods: Arc<Informer<Pod>>,
    recorder: Recorder,
    queue: Arc<Queue>,
    /// Per autoscaler: its recent recommendations and scale events.
    history: Mutex<HashMap<String, History>>,
    /// Autoscalers with a resync timer running.
    scheduled: Mutex<HashSet<String>>,
    sync_period: Duration,
    downscale_stabilization: Duration,
    tuning: Tuning,
}

/// What the metrics of an autoscaler asked for.
struct Computed {
    /// The largest replica count a metric proposed (None: no metric could be used).
    replicas: Option<i32>,
    /// The metric that proposed it.
    metric: String,
    statuses: Vec<MetricStatus>,
    /// The first error, if any metric failed.
    error: Option<String>,
}

impl Controller {
    async fn sync(self: &Arc<Self>, key: &str) -> anyhow::Result<()> {
        let Some(hpa) = self.hpas.get_key(key) else {
            self.history.lock().remove(key);
            return Ok(());
        };
        if let Err(e) = self.reconcile(key, &hpa).await {
            tracing::info!(hpa = %key, error = %format!("{e:#}"), "horizontal pod autoscaler");
        }
        // Every autoscaler is looked at again one period later, whatever happened.
        self.resync_later(key);
        Ok(())
    }

    fn resync_later(self: &Arc<Self>, key: &str) {
        if !self.scheduled.lock().insert(key.to_string()) {
            return;
        }
        let me = self.clone();
        let key = key.to_string();
        tokio::spawn(async move {
            tokio::time::sleep(me.sync_period).await;
            me.scheduled.lock().remove(&key);
            me.queue.add(key);
        });
    }

    async fn reconcile(&self, key: &str, shared: &HorizontalPodAutoscaler) -> anyhow::Result<()> {
        let mut hpa = shared.clone();
        let original = hpa.status.clone();
        let spec = hpa.spec.clone().unwrap_or_default();
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let target = &spec.scale_target_ref;
        let reference = format!("{}/{}/{}", target.kind, ns, target.name);

        let (scale_api, mut scale) = match self.get_scale(&ns, target).await {
            Ok(v) => v,
            Err(e) => {
                let e = format!("{e:#}");
                set_condition(
                    &mut hpa,
                    ABLE_TO_SCALE,
                    "False",
                    "FailedGetScale",
                    format!("the HPA controller was unable to get the target's current scale: {e}"),
                );
                self.recorder.warning(&hpa, "FailedGetScale", e.clone());
                self.update_status_if_needed(original.as_ref(), &hpa)
                    .await?;
                anyhow::bail!("failed to query scale subresource for {reference}: {e}");
            }
        };
        set_condition(
            &mut hpa,
            ABLE_TO_SCALE,
            "True",
            "SucceededGetScale",
            "the HPA controller was able to get the target's current scale".into(),
        );
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let min = spec.min_replicas.unwrap_or(1);
        let max = spec.max_replicas;
        let now = Instant::now();
        self.history
            .lock()
            .entry(key.to_string())
            .or_insert_with(|| History::starting_at(current, now));

        let mut statuses = Vec::new();
        let mut reason = String::new();
        let mut retained_error = None;
        let desired;
        let rescale;
        if current == 0 && min != 0 {
            desired = 0;
            rescale = false;
            set_condition(
                &mut hpa,
                SCALING_ACTIVE,
                "False",
                "ScalingDisabled",
                "scaling is disabled since the replica count of the target is zero".into(),
            );
        } else if current > max {
            reason = "Current number of replicas above Spec.MaxReplicas".into();
            desired = max;
            rescale = true;
        } else if current < min {
            reason = "Current number of replicas below Spec.MinReplicas".into();
            desired = min;
            rescale = true;
        } else {
            let metrics = spec.metrics.clone().unwrap_or_default();
            let computed = self.compute(&mut hpa, &scale, &metrics).await;
            statuses = computed.statuses;
            let Some(proposed) = computed.replicas else {
                let e = computed.error.unwrap_or_default();
                set_status(&mut hpa, current, None, statuses, false);
                self.update_status_if_needed(original.as_ref(), &hpa)
                    .await?;
                self.recorder
                    .warning(&hpa, "FailedComputeMetricsReplicas", e.clone());
                anyhow::bail!(
                    "failed to compute desired number of replicas based on listed metrics for {reference}: {e}"
                );
            };
            retained_error = computed.error;
            let n = {
                let mut history = self.history.lock();
                let h = history.entry(key.to_string()).or_default();
                match &spec.behavior {
                    None => normalize::without_behavior(
                        h,
                        self.downscale_stabilization,
                        current,
                        proposed,
                        min,
                        max,
                        now,
                    ),
                    Some(b) => normalize::with_behavior(
                        h,
                        &normalize::Rules::of(b, self.downscale_stabilization),
                        current,
                        proposed,
                        min,
                        max,
                        now,
                    ),
                }
            };
            set_condition(&mut hpa, ABLE_TO_SCALE, "True", n.able.0, n.able.1.into());
            let limited = if n.limited { "True" } else { "False" };
            set_condition(
                &mut hpa,
                SCALING_LIMITED,
                limited,
                n.limit.0,
                n.limit.1.into(),
            );
            desired = n.replicas;
            if desired > current {
                reason = format!("{} above target", computed.metric);
            } else if desired < current {
                reason = "All metrics below target".into();
            }
            rescale = desired != current;
        }

        let desired = if rescale {
            scale.spec.get_or_insert_with(Default::default).replicas = Some(desired);
            let name = &target.name;
            if let Err(e) = scale_api
                .replace_scale(name, &PostParams::default(), &scale)
                .await
            {
                self.recorder.warning(
                    &hpa,
                    "FailedRescale",
                    format!("New size: {desired}; reason: {reason}; error: {e}"),
                );
                set_condition(
                    &mut hpa,
                    ABLE_TO_SCALE,
                    "False",
                    "FailedUpdateScale",
                    format!("the HPA controller was unable to update the target scale: {e}"),
                );
                set_status(&mut hpa, current, None, statuses, false);
                self.update_status_if_needed(original.as_ref(), &hpa)
                    .await?;
                anyhow::bail!("failed to rescale {reference}: {e}");
            }
            set_condition(
                &mut hpa,
                ABLE_TO_SCALE,
                "True",
                "SucceededRescale",
                format!("the HPA controller was able to update the target scale to {desired}"),
            );
            self.recorder.normal(
                &hpa,
                "SuccessfulRescale",
                format!("New size: {desired}; reason: {reason}"),
            );
            if spec.behavior.is_some() {
                if let Some(h) = self.history.lock().get_mut(key) {
                    let rules = normalize::Rules::of(
                        spec.behavior.as_ref().unwrap_or(&Default::default()),
                        self.downscale_stabilization,
                    );
                    h.record_scale(&rules, current, desired, Instant::now());
                }
            }
            tracing::info!(hpa = %key, old = current, new = desired, %reason, "rescaled");
            desired
        } else {
            current
        };
        set_status(&mut hpa, current, Some(desired), statuses, rescale);
        self.update_status_if_needed(original.as_ref(), &hpa)
            .await?;
        match retained_error {
            Some(e) => anyhow::bail!("{e}"),
            None => Ok(()),
        }
    }

    /// The target's scale subresource, found through discovery (any kind that has one).
    async fn get_scale(
        &self,
        ns: &str,
        target: &CrossVersionObjectReference,
    ) -> anyhow::Result<(Api<DynamicObject>, Scale)> {
        let api_version = target.api_version.as_deref().unwrap_or("v1");
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, &target.kind);
        let (ar, _) = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "unable to determine resource for scale target reference: no matches for kind {:?} in version {api_version:?}",
                    target.kind
                )
            })?;
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        let scale = api.get_scale(&target.name).await?;
        Ok((api, scale))
    }

    /// The replica count each metric asks for, and the largest; sets ScalingActive.
    async fn compute(
        &self,
        hpa: &mut HorizontalPodAutoscaler,
        scale: &Scale,
        metrics: &[MetricSpec],
    ) -> Computed {
        let failed = |error: String| Computed {
            replicas: None,
            metric: String::new(),
            statuses: Vec::new(),
            error: Some(error),
        };
        let selector = scale
            .status
            .as_ref()
            .and_then(|s| s.selector.clone())
            .unwrap_or_default();
        if selector.is_empty() {
            let msg = "selector is required";
            self.recorder.warning(&*hpa, "SelectorRequired", msg);
            set_condition(
                hpa,
                SCALING_ACTIVE,
                "False",
                "InvalidSelector",
                "the HPA target's scale is missing a selector".into(),
            );
            return failed(msg.into());
        }
        let matcher = match Matcher::parse(&selector) {
            Ok(m) => m,
            Err(e) => {
                let msg = format!(
                    "couldn't convert selector into a corresponding internal selector object: {}",
                    e.message()
                );
                self.recorder.warning(&*hpa, "InvalidSelector", msg.clone());
                set_condition(hpa, SCALING_ACTIVE, "False", "InvalidSelector", msg.clone());
                return failed(msg);
            }
        };
        let ns = hpa.metadata.namespace.clone().unwrap_or_default();
        let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
        let mut pods = Vec::new();
        self.pods.for_each_in(&ns, |p| {
            if util::matches(&matcher, p.metadata.labels.as_ref()) {
                pods.push(p.clone());
            }
        });

        let mut best: Option<(i32, String)> = None;
        let mut statuses = Vec::with_capacity(metrics.len());
        let mut invalid = 0;
        // The first failure: (its reason, its error, the error as the controller wraps it).
        let mut first_error: Option<(&'static str, String, String)> = None;
        for spec in metrics {
            match self.compute_one(&ns, spec, current, &selector, &pods).await {
                Ok((replicas, name, status)) => {
                    statuses.push(status);
                    if best.as_ref().is_none_or(|(r, _)| *r == 0 || replicas > *r) {
                        best = Some((replicas, name));
                    }
                }
                Err((reason, e)) => {
                    self.recorder.warning(&*hpa, reason, e.clone());
                    invalid += 1;
                    if first_error.is_none() {
                        let wrapped = wrap_error(spec, &e);
                        first_error = Some((reason, e, wrapped));
                    }
                }
            }
        }
        let error = first_error.as_ref().map(|(_, _, wrapped)| {
            format!(
                "invalid metrics ({invalid} invalid out of {}), first error is: {wrapped}",
                metrics.len()
            )
        });
        let replicas = best.as_ref().map(|(r, _)| *r).unwrap_or(0);
        if invalid >= metrics.len() || (invalid > 0 && replicas < current) {
            if let Some((reason, e, _)) = &first_error {
                set_condition(
                    hpa,
                    SCALING_ACTIVE,
                    "False",
                    reason,
                    format!("the HPA was unable to compute the replica count: {e}"),
                );
            }
            return Computed {
                replicas: None,
                metric: String::new(),
                statuses,
                error: error.or_else(|| Some("no metrics to compute a replica count from".into())),
            };
        }
        let metric = best.map(|(_, m)| m).unwrap_or_default();
        set_condition(
            hpa,
            SCALING_ACTIVE,
            "True",
            "ValidMetricFound",
            format!("the HPA was able to successfully calculate a replica count from {metric}"),
        );
        Computed {
            replicas: Some(replicas),
            metric,
            statuses,
            error,
        }
    }

    /// One metric: (its replica count, its description, its status), or (the reason of the
    /// failure, the error).
    async fn compute_one(
        &self,
        ns: &str,
        spec: &MetricSpec,
        current: i32,
        selector: &str,
        pods: &[Arc<Pod>],
    ) -> Result<(i32, String, MetricStatus), (&'static str, String)> {
        let (resource, container, target) = match spec.type_.as_str() {
            "Resource" => match &spec.resource {
                Some(r) => (r.name.clone(), None, r.target.clone()),
                None => return Err(("FailedGetResourceMetric", "invalid resource metric source: the resource field is not set".into())),
            },
            "ContainerResource" => match &spec.container_resource {
                Some(r) => (r.name.clone(), Some(r.container.clone()), r.target.clone()),
                None => return Err(("FailedGetContainerResourceMetric", "invalid container resource metric source: the containerResource field is not set".into())),
            },
            "Pods" => {
                let name = spec.pods.as_ref().map(|p| p.metric.name.clone()).unwrap_or_default();
                return Err(("FailedGetPodsMetric", no_custom_metrics(&name)));
            }
            "Object" => {
                let name = spec.object.as_ref().map(|p| p.metric.name.clone()).unwrap_or_default();
                return Err(("FailedGetObjectMetric", no_custom_metrics(&name)));
            }
            "External" => {
                let name = spec.external.as_ref().map(|p| p.metric.name.clone()).unwrap_or_default();
                return Err((
                    "FailedGetExternalMetric",
                    format!("unable to get external metric {ns}/{name}: no external metrics API (external.metrics.k8s.io) is served"),
                ));
            }
            other => {
                return Err((
                    "InvalidMetricSourceType",
                    format!("unknown metric source type {other:?}"),
                ))
            }
        };
        let failure = if container.is_some() {
            "FailedGetContainerResourceMetric"
        } else {
            "FailedGetResourceMetric"
        };
        let failed = |e: String| {
            (
                failure,
                format!("failed to get {resource} utilization: {e}"),
            )
        };
        let metrics = self
            .resource_metrics(ns, selector, &resource, container.as_deref())
            .await
            .map_err(|e| {
                failed(format!(
                    "unable to get metrics for resource {resource}: {e:#}"
                ))
            })?;
        let now_ts = Timestamp::now();
        let pods: Vec<&Pod> = pods.iter().map(|p| &**p).collect();
        let (replicas, value, name) = match &target {
            MetricTarget {
                average_value: Some(v),
                ..
            } => {
                let target_milli = milli(v);
                let (replicas, usage) = calc::plain_replicas(
                    &self.tuning,
                    &pods,
                    metrics,
                    current,
                    target_milli,
                    &resource,
                    now_ts,
                )
                .map_err(failed)?;
                let value = MetricValueStatus {
                    average_value: Some(milli_quantity(usage)),
                    ..Default::default()
                };
                (replicas, value, format!("{resource} resource"))
            }
            MetricTarget {
                average_utilization: Some(u),
                ..
            } => {
                let r = calc::resource_replicas(
                    &self.tuning,
                    &pods,
                    metrics,
                    container.as_deref(),
                    current,
                    *u,
                    &resource,
                    now_ts,
                )
                .map_err(failed)?;
                let value = MetricValueStatus {
                    average_utilization: Some(r.utilization),
                    average_value: Some(milli_quantity(r.raw)),
                    ..Default::default()
                };
                let name = if container.is_some() {
                    format!("{resource} container resource utilization (percentage of request)")
                } else {
                    format!("{resource} resource utilization (percentage of request)")
                };
                (r.replicas, value, name)
            }
            _ => {
                return Err((
                    failure,
                    "invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into(),
                ))
            }
        };
        let status = match container {
            None => MetricStatus {
                type_: "Resource".into(),
                resource: Some(k8s_openapi::api::autoscaling::v2::ResourceMetricStatus {
                    name: resource,
                    current: value,
                }),
                ..Default::default()
            },
            Some(container) => MetricStatus {
                type_: "ContainerResource".into(),
                container_resource: Some(
                    k8s_openapi::api::autoscaling::v2::ContainerResourceMetricStatus {
                        container,
                        name: resource,
                        current: value,
                    },
                ),
                ..Default::default()
            },
        };
        Ok((replicas, name, status))
    }

    /// Each selected pod's usage of `resource` (milli-units) from the resource metrics API:
    /// the sum over its containers (or the one named), pods with a container missing the
    /// figure left out.
    async fn resource_metrics(
        &self,
        ns: &str,
        selector: &str,
        resource: &str,
        container: Option<&str>,
    ) -> anyhow::Result<HashMap<String, PodMetric>> {
        let ar = ApiResource {
            group: "metrics.k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "metrics.k8s.io/v1beta1".into(),
            kind: "PodMetrics".into(),
            plural: "pods".into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &ar);
        let list = api.list(&ListParams::default().labels(selector)).await?;
        if list.items.is_empty() {
            anyhow::bail!("no metrics returned from resource metrics API");
        }
        Ok(list
            .items
            .iter()
            .filter_map(|item| {
                let name = item.metadata.name.clone()?;
                calc::pod_usage(&item.data, resource, container).map(|m| (name, m))
            })
            .collect())
    }

    /// Write the status when it changed.
    async fn update_status_if_needed(
        &self,
        original: Option<&HorizontalPodAutoscalerStatus>,
        hpa: &HorizontalPodAutoscaler,
    ) -> anyhow::Result<()> {
        if original == hpa.status.as_ref() {
            return Ok(());
        }
        let ns = hpa.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<HorizontalPodAutoscaler> = Api::namespaced(self.client.clone(), ns);
        match api
            .replace_status(
                hpa.metadata.name.as_deref().unwrap_or_default(),
                &PostParams::default(),
                hpa,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if util::is_not_found(&e) => Ok(()),
            Err(e) => Err(anyhow::anyhow!(
                "failed to update status for {}: {e}",
                hpa.metadata.name.as_deref().unwrap_or_default()
            )),
        }
    }
}

/// The error of a failed metric as the controller wraps it.
fn wrap_error(spec: &MetricSpec, e: &str) -> String {
    match spec.type_.as_str() {
        "Resource" => format!(
            "failed to get {} resource metric value: {e}",
            spec.resource
                .as_ref()
                .map(|r| r.name.as_str())
                .unwrap_or("")
        ),
        "ContainerResource" => format!(
            "failed to get {} container metric value: {e}",
            spec.container_resource
                .as_ref()
                .map(|r| r.container.as_str())
                .unwrap_or("")
        ),
        "Pods" => format!("failed to get pods metric value: {e}"),
        "Object" => format!("failed to get object metric value: {e}"),
        "External" => format!("failed to get external metric value: {e}"),
        _ => e.to_string(),
    }
}

fn no_custom_metrics(name: &str) -> String {
    format!("unable to get metric {name}: no custom metrics API (custom.metrics.k8s.io) is served")
}

/// A quantity's value in milli-units.
fn milli(q: &Quantity) -> i64 {
    quantity::parse(&q.0)
        .map(|q| i64::try_from(q.milli()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// `resource.NewMilliQuantity(v, DecimalSI)`.
fn milli_quantity(v: i64) -> Quantity {
    Quantity(
        quantity::Quantity {
            nanos: i128::from(v) * 1_000_000,
            format: quantity::Format::DecimalSI,
        }
        .canonical(),
    )
}

/// Kubernetes' `setCondition`: the transition time moves only when the status changes.
fn set_condition(
    hpa: &mut HorizontalPodAutoscaler,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
) {
    let st = hpa.status.get_or_insert_with(Default::default);
    let conditions = st.conditions.get_or_insert_with(Vec::new);
    let i = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(HorizontalPodAutoscalerCondition {
                type_: type_.into(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[i];
    if c.status != status {
        c.last_transition_time = Some(Time(now_seconds()));
    }
    c.status = status.into();
    c.reason = Some(reason.into());
    c.message = Some(message);
}

/// `setStatus`: `desired` None keeps the desired count the status had.
fn set_status(
    hpa: &mut HorizontalPodAutoscaler,
    current: i32,
    desired: Option<i32>,
    metrics: Vec<MetricStatus>,
    rescaled: bool,
) {
    let old = hpa.status.take().unwrap_or_default();
    hpa.status = Some(HorizontalPodAutoscalerStatus {
        current_replicas: Some(current),
        desired_replicas: desired.unwrap_or(old.desired_replicas),
        last_scale_time: if rescaled {
            Some(Time(now_seconds()))
        } else {
            old.last_scale_time
        },
        current_metrics: Some(metrics).filter(|m| !m.is_empty()),
        conditions: old.conditions,
        observed_generation: None,
    });
}

fn now_seconds() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}
