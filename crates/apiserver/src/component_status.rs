//! `componentstatuses` (core/v1 ComponentStatus, deprecated since v1.19 and still served):
//! nothing stores them; every get and list probes the components and answers what it found.
//!
//! Kubernetes probes the scheduler's and the controller manager's `/healthz` ports on
//! loopback. capstan's scheduler and controller manager serve no such ports (they run in the
//! server's process or anywhere else), so their health is read from what every instance of
//! them keeps up to date: its leader-election Lease in `kube-system`. A component is healthy
//! while its lease has a holder whose `renewTime + leaseDurationSeconds` is still ahead.
//!
//! The store is `etcd-0`: with the embedded store, healthy when it answers a read; with etcd,
//! one entry per configured endpoint (`etcd-0`, `etcd-1`, ... in flag order), each member
//! asked on its own with a linearizable read (what `etcdctl endpoint health` and
//! kube-apiserver's etcd prober do), so one dead member shows as one unhealthy entry.
//!
//! Every answer carries the warning `v1 ComponentStatus is deprecated in v1.19+`, which
//! kubectl prints; the resource serves get and list only (watch and writes are 405).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use capstan_api::catalogue::ResourceInfo;
use capstan_api::table::duration::{parse_rfc3339, system_nanos};
use http::{HeaderValue, Response};
use serde_json::{json, Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::filter::Filter;
use crate::handlers::{error_response, value_response, Body, Call, Output};
use crate::objects::Objects;
use crate::{tables, ApiServer};

/// The warning Kubernetes attaches to every componentstatuses response (kubectl prints it as
/// `Warning: v1 ComponentStatus is deprecated in v1.19+`).
pub const DEPRECATION_WARNING: &str = "v1 ComponentStatus is deprecated in v1.19+";

/// How long one probe of the store or of an etcd member may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The namespace of the leader-election leases.
const LEASE_NAMESPACE: &str = "kube-system";

/// What the server knows about where its components' health comes from.
#[derive(Debug, Clone, Default)]
pub struct Probes {
    /// etcd client URLs, in flag order; empty with the embedded store.
    etcd_servers: Vec<String>,
}

impl Probes {
    /// `etcd_servers`: the etcd client URLs the store uses (empty: the embedded store).
    pub fn new(etcd_servers: &[String]) -> Probes {
        Probes {
            etcd_servers: etcd_servers.to_vec(),
        }
    }

    /// Every component, in the order lists show them.
    fn components(&self) -> Vec<(String, Check)> {
        let mut out = vec![
            (
                "scheduler".to_string(),
                Check::Lease("kube-scheduler".into()),
            ),
            (
                "controller-manager".to_string(),
                Check::Lease("kube-controller-manager".into()),
            ),
        ];
        if self.etcd_servers.is_empty() {
            out.push(("etcd-0".into(), Check::Store));
        } else {
            for (i, url) in self.etcd_servers.iter().enumerate() {
                out.push((format!("etcd-{i}"), Check::Etcd(url.clone())));
            }
        }
        out
    }
}

/// How one component's health is found.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Check {
    /// The leader-election lease of this name in kube-system.
    Lease(String),
    /// The server's own store answers a read.
    Store,
    /// The etcd member at this client URL answers a linearizable read.
    Etcd(String),
}

/// A ComponentCondition's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// The `Healthy` condition of one component.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Health {
    pub status: Status,
    /// "ok" when healthy; why not, when the component itself says so.
    pub message: String,
    /// The error of a probe that could not get an answer.
    pub error: String,
}

impl Health {
    fn ok() -> Health {
        Health {
            status: Status::True,
            message: "ok".into(),
            error: String::new(),
        }
    }

    fn unhealthy(message: impl Into<String>) -> Health {
        Health {
            status: Status::False,
            message: message.into(),
            error: String::new(),
        }
    }

    fn failed(error: impl Into<String>) -> Health {
        Health {
            status: Status::False,
            message: String::new(),
            error: error.into(),
        }
    }

    /// The condition as the API shows it (empty message and error left out).
    fn condition(&self) -> Value {
        let mut c = Map::new();
        c.insert("type".into(), json!("Healthy"));
        c.insert("status".into(), json!(self.status.as_str()));
        if !self.message.is_empty() {
            c.insert("message".into(), json!(self.message));
        }
        if !self.error.is_empty() {
            c.insert("error".into(), json!(self.error));
        }
        Value::Object(c)
    }
}

/// The ComponentStatus of `name`, as a get answers it.
pub fn object(name: &str, health: &Health) -> Value {
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name, "creationTimestamp": null},
        "conditions": [health.condition()],
    })
}

/// The health of a component whose instances elect a leader with the Lease `lease`
/// (kube-system/`name`), at `now`: healthy while the lease has a holder and has been renewed
/// within its duration.
pub fn lease_health(lease: Option<&Value>, name: &str, now: SystemTime) -> Health {
    let what = format!("lease {LEASE_NAMESPACE}/{name}");
    let Some(lease) = lease else {
        return Health::unhealthy(format!("no leader: {what} not found"));
    };
    let spec = lease.get("spec");
    let field = |f: &str| spec.and_then(|s| s.get(f));
    let holder = field("holderIdentity")
        .and_then(Value::as_str)
        .unwrap_or("");
    if holder.is_empty() {
        return Health::unhealthy(format!("no leader: {what} has no holder"));
    }
    let Some(renewed) = field("renewTime").and_then(Value::as_str) else {
        return Health::unhealthy(format!("leader {holder} has never renewed {what}"));
    };
    let Some(renewed_at) = parse_rfc3339(renewed) else {
        return Health::unhealthy(format!(
            "{what} held by {holder} has an unreadable renewTime {renewed:?}"
        ));
    };
    let duration = match field("leaseDurationSeconds").and_then(Value::as_i64) {
        Some(d) if d > 0 => d,
        _ => {
            return Health::unhealthy(format!(
                "{what} held by {holder} has no leaseDurationSeconds"
            ))
        }
    };
    let expires = renewed_at.saturating_add(i128::from(duration) * 1_000_000_000);
    if expires > system_nanos(now) {
        Health::ok()
    } else {
        Health::unhealthy(format!(
            "leader {holder} stopped renewing {what} at {renewed} (lease duration {duration}s)"
        ))
    }
}

/// Probe one component.
async fn probe(server: &ApiServer, check: &Check) -> Health {
    match check {
        Check::Lease(name) => {
            let lease = Objects::get(
                server,
                "coordination.k8s.io",
                "leases",
                LEASE_NAMESPACE,
                name,
            );
            lease_health(lease.as_ref(), name, SystemTime::now())
        }
        Check::Store => {
            match tokio::time::timeout(PROBE_TIMEOUT, server.store.get(b"health", 0)).await {
                Ok(Ok(_)) => Health::ok(),
                Ok(Err(e)) => Health::failed(format!("error reading from the store: {e}")),
                Err(_) => Health::failed(format!(
                    "the store did not answer a read within {PROBE_TIMEOUT:?}"
                )),
            }
        }
        Check::Etcd(url) => etcd_health(url, PROBE_TIMEOUT).await,
    }
}

/// Ask the etcd member at `url` (only it) for a linearizable read of the key `health`, which
/// it answers only while it is part of a quorum with a leader.
pub async fn etcd_health(url: &str, timeout: Duration) -> Health {
    let read = async {
        let options = etcd_client::ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_timeout(timeout);
        let mut client = etcd_client::Client::connect([url], Some(options)).await?;
        client
            .get(
                "health",
                Some(etcd_client::GetOptions::new().with_count_only()),
            )
            .await
    };
    match tokio::time::timeout(timeout, read).await {
        Ok(Ok(_)) => Health::ok(),
        Ok(Err(e)) => Health::failed(format!(
            "error getting data from etcd {url}: {}",
            etcd_error(&e)
        )),
        Err(_) => Health::failed(format!("etcd {url} did not answer within {timeout:?}")),
    }
}

/// An etcd client error in one line (a gRPC status by its code and message alone,
/// followed by the errors that caused it).
fn etcd_error(e: &etcd_client::Error) -> String {
    use std::error::Error as _;
    let (mut text, mut cause) = match e {
        etcd_client::Error::GRpcStatus(s) => {
            (format!("{:?}: {}", s.code(), s.message()), s.source())
        }
        etcd_client::Error::TransportError(t) => (e.to_string(), t.source()),
        other => (other.to_string(), None),
    };
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

/// Is `info` the resource this module serves?
pub fn serves(info: &ResourceInfo) -> bool {
    info.group.is_empty() && info.plural == "componentstatuses"
}

/// Answer a request for componentstatuses (scope and subresource already checked): get and
/// list probe, watch and everything else are 405. Every answer carries the deprecation
/// warning.
pub async fn serve(
    server: &Arc<ApiServer>,
    info: &'static ResourceInfo,
    call: &Call<'_>,
) -> Response<Body> {
    let answer = match call.info.verb.as_str() {
        "get" => get(server, info, call).await,
        "list" => list(server, info, call).await,
        "watch" => Err(method_not_supported(info, "watch")),
        _ => Err(ApiError::method_not_allowed(
            "the server does not allow this method on the requested resource",
        )),
    };
    let mut r = answer.unwrap_or_else(|e| error_response(&e));
    if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{DEPRECATION_WARNING}\"")) {
        r.headers_mut().append(http::header::WARNING, v);
    }
    r
}

/// Kubernetes' answer to an action a resource's storage does not implement.
fn method_not_supported(info: &ResourceInfo, action: &str) -> ApiError {
    let mut e = ApiError::method_not_allowed(format!(
        "{action} is not supported on resources of kind {:?}",
        info.group_resource()
    ));
    e.details = Some(json!({"kind": info.plural}));
    e
}

async fn get(
    server: &Arc<ApiServer>,
    info: &'static ResourceInfo,
    call: &Call<'_>,
) -> ApiResult<Response<Body>> {
    let name = call.info.name.as_str();
    let check = server
        .component_status
        .components()
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, c)| c)
        .ok_or_else(|| ApiError::not_found(info, name))?;
    let obj = object(name, &probe(server, &check).await);
    Ok(match call.output {
        Output::Json => value_response(200, &obj),
        Output::Table(include) => {
            value_response(200, &tables::table(info, &[&obj], include, json!({})))
        }
        Output::Metadata => value_response(200, &tables::partial_metadata(&obj)),
    })
}

async fn list(
    server: &Arc<ApiServer>,
    info: &'static ResourceInfo,
    call: &Call<'_>,
) -> ApiResult<Response<Body>> {
    let filter = Filter::new(
        info,
        "",
        call.query.str("labelSelector"),
        call.query.str("fieldSelector"),
    )?;
    let components: Vec<(String, Check)> = server
        .component_status
        .components()
        .into_iter()
        .filter(|(name, _)| selected(&filter, name))
        .collect();
    let healths =
        futures::future::join_all(components.iter().map(|(_, check)| probe(server, check))).await;
    let objects: Vec<Value> = components
        .iter()
        .zip(&healths)
        .map(|((name, _), health)| object(name, health))
        .collect();
    Ok(value_response(
        200,
        &list_answer(info, &objects, call.output),
    ))
}

/// Do a list's selectors select the component `name`? ComponentStatuses have no labels, and
/// their selectable fields are `metadata.name` and `metadata.namespace` (always empty).
fn selected(filter: &Filter, name: &str) -> bool {
    if let Some(labels) = &filter.labels {
        if !labels.matches(&Map::new()) {
            return false;
        }
    }
    if let Some(fields) = &filter.fields {
        return fields.matches(|field| match field {
            "metadata.name" => Some(name.to_string()),
            "metadata.namespace" => Some(String::new()),
            _ => None,
        });
    }
    true
}

/// The list of `objects` (each as [`object`] made it) in the form the client asked for. As in
/// Kubernetes, the list has no resourceVersion and its items no kind or apiVersion.
fn list_answer(info: &ResourceInfo, objects: &[Value], output: Output) -> Value {
    match output {
        Output::Json => {
            let items: Vec<Value> = objects
                .iter()
                .map(|o| {
                    let mut item = o.clone();
                    if let Some(m) = item.as_object_mut() {
                        m.remove("kind");
                        m.remove("apiVersion");
                    }
                    item
                })
                .collect();
            json!({"kind": info.list_kind(), "apiVersion": info.api_version(), "metadata": {}, "items": items})
        }
        Output::Table(include) => {
            let refs: Vec<&Value> = objects.iter().collect();
            tables::table(info, &refs, include, json!({}))
        }
        Output::Metadata => {
            let items: Vec<Value> = objects.iter().map(tables::partial_metadata).collect();
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": {}, "items": items})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    /// The catalogue's componentstatuses.
    fn serve_info() -> &'static ResourceInfo {
        capstan_api::catalogue::RESOURCES
            .iter()
            .find(|r| serves(r))
            .expect("the catalogue has componentstatuses")
    }

    /// 2024-05-01T10:00:00Z.
    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_714_557_600)
    }

    fn lease(holder: Option<&str>, renew: Option<&str>, duration: Option<i64>) -> Value {
        let mut spec = Map::new();
        if let Some(h) = holder {
            spec.insert("holderIdentity".into(), json!(h));
        }
        if let Some(r) = renew {
            spec.insert("renewTime".into(), json!(r));
        }
        if let Some(d) = duration {
            spec.insert("leaseDurationSeconds".into(), json!(d));
        }
        json!({"metadata": {"name": "kube-scheduler", "namespace": "kube-system"}, "spec": spec})
    }

    #[test]
    fn a_lease_renewed_within_its_duration_is_healthy() {
        let l = lease(
            Some("cp-1_abc"),
            Some("2024-05-01T09:59:50.123456Z"),
            Some(15),
        );
        assert_eq!(
            lease_health(Some(&l), "kube-scheduler", now()),
            Health::ok()
        );
        // A renewal stamped slightly ahead of our clock is still a live leader.
        let l = lease(
            Some("cp-1_abc"),
            Some("2024-05-01T10:00:02.000000Z"),
            Some(15),
        );
        assert_eq!(
            lease_health(Some(&l), "kube-scheduler", now()).status,
            Status::True
        );
    }

    #[test]
    fn a_lease_past_its_duration_is_unhealthy_and_says_since_when() {
        let l = lease(
            Some("cp-1_abc"),
            Some("2024-05-01T09:59:45.000000Z"),
            Some(15),
        );
        let h = lease_health(Some(&l), "kube-scheduler", now());
        assert_eq!(h.status, Status::False);
        assert_eq!(
            h.message,
            "leader cp-1_abc stopped renewing lease kube-system/kube-scheduler at 2024-05-01T09:59:45.000000Z (lease duration 15s)"
        );
        assert_eq!(h.error, "");
        // Expiry is exclusive: renewTime + duration == now is no longer held.
        let l = lease(Some("x"), Some("2024-05-01T09:59:45Z"), Some(14));
        assert_eq!(
            lease_health(Some(&l), "kube-scheduler", now()).status,
            Status::False
        );
    }

    #[test]
    fn missing_leases_and_holders_mean_no_leader() {
        let h = lease_health(None, "kube-controller-manager", now());
        assert_eq!(
            h,
            Health::unhealthy("no leader: lease kube-system/kube-controller-manager not found")
        );
        // A released lease (holder cleared, as leader election does on a clean stop).
        for holder in [None, Some("")] {
            let l = lease(holder, Some("2024-05-01T09:59:59Z"), Some(15));
            assert_eq!(
                lease_health(Some(&l), "kube-scheduler", now()).message,
                "no leader: lease kube-system/kube-scheduler has no holder"
            );
        }
    }

    #[test]
    fn malformed_leases_are_unhealthy_not_a_panic() {
        let cases = [
            (
                lease(Some("a"), None, Some(15)),
                "leader a has never renewed lease kube-system/kube-scheduler",
            ),
            (
                lease(Some("a"), Some("yesterday"), Some(15)),
                "lease kube-system/kube-scheduler held by a has an unreadable renewTime \"yesterday\"",
            ),
            (
                lease(Some("a"), Some("2024-05-01T09:59:59Z"), None),
                "lease kube-system/kube-scheduler held by a has no leaseDurationSeconds",
            ),
            (
                lease(Some("a"), Some("2024-05-01T09:59:59Z"), Some(0)),
                "lease kube-system/kube-scheduler held by a has no leaseDurationSeconds",
            ),
        ];
        for (l, want) in cases {
            let h = lease_health(Some(&l), "kube-scheduler", now());
            assert_eq!((h.status, h.message.as_str()), (Status::False, want));
        }
        for junk in [
            json!(null),
            json!("lease"),
            json!({"spec": 7}),
            json!({"spec": {"holderIdentity": 3}}),
        ] {
            assert_eq!(
                lease_health(Some(&junk), "kube-scheduler", now()).status,
                Status::False
            );
        }
    }

    #[test]
    fn objects_have_kubernetes_shape() {
        assert_eq!(
            object("scheduler", &Health::ok()),
            json!({"kind": "ComponentStatus", "apiVersion": "v1",
                "metadata": {"name": "scheduler", "creationTimestamp": null},
                "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]})
        );
        assert_eq!(
            object("etcd-1", &Health::failed("boom"))["conditions"],
            json!([{"type": "Healthy", "status": "False", "error": "boom"}])
        );
    }

    #[test]
    fn components_follow_the_store() {
        let names = |p: &Probes| {
            p.components()
                .into_iter()
                .map(|(n, _)| n)
                .collect::<Vec<_>>()
        };
        let embedded = Probes::new(&[]);
        assert_eq!(
            names(&embedded),
            ["scheduler", "controller-manager", "etcd-0"]
        );
        assert_eq!(embedded.components()[2].1, Check::Store);
        let etcd = Probes::new(&["http://a:2379".into(), "http://b:2379".into()]);
        assert_eq!(
            names(&etcd),
            ["scheduler", "controller-manager", "etcd-0", "etcd-1"]
        );
        assert_eq!(etcd.components()[3].1, Check::Etcd("http://b:2379".into()));
    }

    #[test]
    fn selectors_pick_components_by_name() {
        let info = serve_info();
        let f = |labels: &str, fields: &str| Filter::new(info, "", labels, fields).unwrap();
        assert!(selected(&f("", ""), "etcd-0"));
        assert!(selected(&f("", "metadata.name=etcd-0"), "etcd-0"));
        assert!(!selected(&f("", "metadata.name=etcd-0"), "scheduler"));
        assert!(selected(&f("", "metadata.name!=etcd-0"), "scheduler"));
        assert!(selected(&f("", "metadata.namespace="), "scheduler"));
        // No labels: an equality selects nothing, a negation everything.
        assert!(!selected(&f("tier=control-plane", ""), "scheduler"));
        assert!(selected(&f("!tier", ""), "scheduler"));
        // Fields ComponentStatus does not have are refused.
        assert!(Filter::new(info, "", "", "spec.nodeName=a").is_err());
    }

    #[test]
    fn lists_drop_item_type_meta_and_tables_print_the_condition() {
        let objs = vec![
            object("scheduler", &Health::ok()),
            object("etcd-0", &Health::failed("down")),
        ];
        let info = serve_info();
        let list = list_answer(info, &objs, Output::Json);
        assert_eq!(list["kind"], "ComponentStatusList");
        assert_eq!(list["apiVersion"], "v1");
        assert_eq!(list["metadata"], json!({}));
        assert_eq!(
            list["items"][0],
            json!({"metadata": {"name": "scheduler", "creationTimestamp": null},
                "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]})
        );
        let table = list_answer(info, &objs, Output::Table(tables::IncludeObject::Metadata));
        assert_eq!(table["kind"], "Table");
        assert_eq!(
            table["rows"][0]["cells"],
            json!(["scheduler", "Healthy", "ok", ""])
        );
        assert_eq!(
            table["rows"][1]["cells"],
            json!(["etcd-0", "Unhealthy", "", "down"])
        );
        let meta = list_answer(info, &objs, Output::Metadata);
        assert_eq!(meta["kind"], "PartialObjectMetadataList");
        assert_eq!(meta["items"][1]["metadata"]["name"], "etcd-0");
    }

    #[tokio::test]
    async fn an_unreachable_etcd_member_is_unhealthy_with_the_error() {
        // A port nothing listens on: bind one, then free it.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let url = format!("http://127.0.0.1:{port}");
        let h = etcd_health(&url, Duration::from_secs(3)).await;
        assert_eq!(h.status, Status::False);
        assert_eq!(h.message, "");
        // Refused at once, and the error says so (the cause under gRPC's "Unavailable").
        assert!(
            h.error.starts_with(&format!(
                "error getting data from etcd {url}: Unavailable: "
            )) && h.error.contains("Connection refused"),
            "{}",
            h.error
        );
    }
}
