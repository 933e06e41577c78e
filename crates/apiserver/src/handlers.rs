//! HTTP handlers for resource requests: the verbs get, list, watch, create, update, patch,
//! delete and deletecollection over a [`Registry`], with Kubernetes' query parameters, content
//! negotiation (JSON, Table) and `Status` errors.
//!
//! Bodies, JSON responses and watch events are in the request's version (the registry's; see
//! the registry's module documentation for resources stored in another version). Tables and
//! PartialObjectMetadata are made from the stored form, as Kubernetes makes them from the
//! internal object; objects embedded whole in a Table row are in the request's version.

use std::convert::Infallible;
use std::future::Future as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use capstan_api::meta;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};

use crate::codec::{self, BodyType};
use crate::error::{ApiError, ApiResult};
use crate::filter::Filter;
use crate::registry::{DeleteOptions, Deleted, Registry, WriteOptions, Written};
use crate::request::{Query, RequestInfo};
use crate::tables;
use crate::watch_cache::WatchItem;

pub type Body = BoxBody<Bytes, Infallible>;

/// What the client accepts back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    Json,
    /// meta.k8s.io/v1 Table (kubectl get).
    Table(tables::IncludeObject),
    /// PartialObjectMetadata(List): metadata only.
    Metadata,
}

/// Decide the output form from the Accept header. Err is a 406.
pub fn negotiate(accept: &str, query: &Query) -> ApiResult<Output> {
    if accept.trim().is_empty() {
        return Ok(Output::Json);
    }
    let mut json_ok = false;
    for part in accept.split(',') {
        let p = part.replace(' ', "");
        let base = p.split(';').next().unwrap_or("");
        if !(base == "application/json"
            || base == "*/*"
            || base == "application/*"
            || base == "application/yaml")
        {
            continue;
        }
        if p.contains("as=Table") {
            let include = match query.str("includeObject") {
                "Object" => tables::IncludeObject::Object,
                "None" => tables::IncludeObject::None,
                _ => tables::IncludeObject::Metadata,
            };
            return Ok(Output::Table(include));
        }
        if p.contains("as=PartialObjectMetadata") {
            return Ok(Output::Metadata);
        }
        if !p.contains("as=") {
            json_ok = true;
        }
    }
    if json_ok {
        Ok(Output::Json)
    } else {
        Err(ApiError::new(
            406,
            "NotAcceptable",
            "only the following media types are accepted: application/json, application/yaml, application/json;as=Table;v=v1;g=meta.k8s.io",
        ))
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

pub fn json_response(code: u16, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::OK);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

pub fn value_response(code: u16, v: &Value) -> Response<Body> {
    json_response(code, serde_json::to_vec(v).unwrap_or_default())
}

pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut r = value_response(e.code, &e.status());
    if let Some(s) = e.retry_after {
        r.headers_mut()
            .insert(http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    r
}

/// Everything a resource handler needs from the request.
pub struct Call<'a> {
    pub info: &'a RequestInfo,
    pub query: &'a Query,
    pub headers: &'a HeaderMap,
    /// Who is asking (authenticated).
    pub user: &'a Arc<crate::auth::User>,
    pub body: Bytes,
    pub output: Output,
    /// Watch events leave out `metadata.managedFields` (an in-process client that never
    /// reads them asked; see [`crate::inprocess::InProcess::trimming_managed_fields`]).
    pub trim_managed_fields: bool,
}

impl Call<'_> {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn write_options(&self) -> ApiResult<WriteOptions> {
        let dry_run = match self.query.get("dryRun") {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "Invalid dry run value: {other:?}; supported values: \"All\""
                )))
            }
        };
        Ok(WriteOptions {
            dry_run,
            field_manager: self.field_manager(),
            fields_tracked: false,
            user: Some(self.user.clone()),
        })
    }

    /// The request's field manager: `fieldManager`, else the product of its User-Agent
    /// (what precedes the first `/`, printable characters only, at most 128 bytes).
    fn field_manager(&self) -> String {
        let given = self.query.str("fieldManager");
        if !given.is_empty() {
            return given.to_string();
        }
        let ua = self.header("user-agent");
        let mut out = String::new();
        for c in ua.split('/').next().unwrap_or("").chars() {
            if c.is_control() {
                continue;
            }
            if out.len() >= FIELD_MANAGER_MAX {
                break;
            }
            out.push(c);
        }
        out
    }

    /// Kubernetes' checks of a write's fieldManager (and, for patches, of `force`).
    fn check_field_manager(&self, patch: Option<crate::patch::PatchType>) -> ApiResult<()> {
        let given = self.query.str("fieldManager");
        let mut errs = Vec::new();
        let apply = patch == Some(crate::patch::PatchType::Apply);
        if patch.is_some() && !apply && self.query.get("force").is_some() {
            errs.push(capstan_api::field::FieldError::forbidden(
                "force",
                "may not be specified for non-apply patch",
            ));
        }
        if apply && given.is_empty() {
            errs.push(capstan_api::field::FieldError::required(
                "fieldManager",
                "is required for apply patch",
            ));
        }
        if given.len() > FIELD_MANAGER_MAX {
            errs.push(capstan_api::field::FieldError::too_long(
                "fieldManager",
                FIELD_MANAGER_MAX,
            ));
        }
        for (i, c) in given.char_indices() {
            if c.is_control() {
                errs.push(capstan_api::field::FieldError::invalid(
                    "fieldManager",
                    &Value::String(given.to_string()),
                    &format!("invalid character U+{:04X} (at position {i})", c as u32),
                ));
            }
        }
        if errs.is_empty() {
            return Ok(());
        }
        let kind = match (patch, self.info.verb.as_str()) {
            (Some(_), _) => "PatchOptions",
            (None, "create") => "CreateOptions",
            _ => "UpdateOptions",
        };
        Err(ApiError::invalid_kind("meta.k8s.io", kind, "", errs))
    }

    /// The body as a JSON object.
    pub(crate) fn object_body(&self) -> ApiResult<Value> {
        let kind = codec::body_type(self.header("content-type"))?;
        let v = codec::decode_body(&self.body, kind)?;
        if !v.is_object() {
            return Err(ApiError::bad_request(
                "the body of the request is not a JSON object",
            ));
        }
        Ok(v)
    }
}

/// The longest field manager name Kubernetes accepts.
const FIELD_MANAGER_MAX: usize = 128;

/// Check and complete apiVersion/kind/namespace of a body against the URL.
fn check_body(reg: &Registry, call: &Call, obj: &mut Value) -> ApiResult<Vec<String>> {
    let info = reg.info;
    let (api_version, kind) = meta::type_meta(obj);
    let (api_version, kind) = (api_version.to_string(), kind.to_string());
    let expected_av = info.api_version();
    if !api_version.is_empty() && api_version != expected_av {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected_av})"
        )));
    }
    if !kind.is_empty() && kind != info.kind {
        return Err(ApiError::bad_request(format!(
            "the kind in the data ({kind}) does not match the expected kind ({})",
            info.kind
        )));
    }
    let map = obj.as_object_mut().expect("checked object");
    map.insert("apiVersion".into(), Value::String(expected_av));
    map.insert("kind".into(), Value::String(info.kind.to_string()));
    if let Some(md) = map.get("metadata") {
        if !md.is_object() && !md.is_null() {
            return Err(ApiError::bad_request("metadata must be an object"));
        }
    }
    let body_ns = meta::namespace(obj).to_string();
    if info.namespaced {
        if !body_ns.is_empty() && body_ns != call.info.namespace {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        // As Kubernetes does, a body without a namespace takes the URL's.
        if body_ns.is_empty() && !call.info.namespace.is_empty() {
            meta::set_meta_str(obj, "namespace", &call.info.namespace);
        }
    } else if !body_ns.is_empty() {
        meta::remove_meta(obj, "namespace");
    }
    crate::validation::check_field_validation(reg.info, reg.strategy.as_ref(), call.query, obj)
}

/// Add `Warning: 299 - "..."` headers, as Kubernetes does for fieldValidation=Warn.
fn with_warnings(mut r: Response<Body>, warnings: &[String]) -> Response<Body> {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            r.headers_mut().append(http::header::WARNING, v);
        }
    }
    r
}

fn written_response(call: &Call, reg: &Registry, code: u16, w: &Written) -> Response<Body> {
    match call.output {
        Output::Json => json_response(code, w.json.clone()),
        Output::Table(include) => value_response(
            code,
            &table_of(
                reg,
                &[w.storage_value()],
                include,
                list_meta(w.rev, None, None),
            ),
        ),
        Output::Metadata => value_response(code, &tables::partial_metadata(w.storage_value())),
    }
}

/// A Table of objects given in their storage version: rows are printed from that form (as
/// Kubernetes prints the internal object); objects embedded whole (`includeObject=Object`)
/// are in the registry's version.
fn table_of(
    reg: &Registry,
    stored: &[&Value],
    include: tables::IncludeObject,
    meta: Value,
) -> Value {
    let mut t = match reg.strategy.table(stored, include, &meta) {
        Some(t) => t,
        None => tables::table(reg.info, stored, include, meta),
    };
    if reg.converts() && include == tables::IncludeObject::Object {
        if let Some(rows) = t.get_mut("rows").and_then(Value::as_array_mut) {
            for (row, obj) in rows.iter_mut().zip(stored) {
                if let Some(r) = row.as_object_mut() {
                    r.insert("object".into(), reg.from_storage((*obj).clone()));
                }
            }
        }
    }
    t
}

fn list_meta(rev: i64, cont: Option<&str>, remaining: Option<i64>) -> Value {
    let mut m = json!({"resourceVersion": rev.to_string()});
    if let Some(c) = cont {
        m["continue"] = json!(c);
    }
    if let Some(r) = remaining {
        m["remainingItemCount"] = json!(r);
    }
    m
}

pub async fn get(reg: &Registry, call: &Call<'_>) -> ApiResult<Response<Body>> {
    let w = reg.get(&call.info.namespace, &call.info.name).await?;
    match call.info.subresource.as_str() {
        "" | "status" | "approval" => Ok(written_response(call, reg, 200, &w)),
        "scale" => Ok(value_response(200, &crate::scale::to_scale(reg, &w.value)?)),
        other => Err(ApiError::not_found_path().with_message(format!(
            "the server could not find the requested resource ({other})"
        ))),
    }
}

pub async fn list(reg: &Registry, call: &Call<'_>) -> ApiResult<Response<Body>> {
    let q = call.query;
    let filter = Filter::new(
        reg.info,
        &call.info.namespace,
        q.str("labelSelector"),
        q.str("fieldSelector"),
    )?;
    let limit: usize = match q.get("limit") {
        None | Some("") => 0,
        Some(l) => l
            .parse::<i64>()
            .map_err(|_| ApiError::bad_request(format!("invalid limit: {l}")))?
            .max(0) as usize,
    };
    let rv = q.str("resourceVersion");
    let rv_match = q.str("resourceVersionMatch");
    let cont = q.str("continue");
    if !cont.is_empty() && !rv.is_empty() {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    let rv_num = parse_rv(rv)?;
    if !rv_match.is_empty() && rv.is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    let from_store = !cont.is_empty() || rv_match == "Exact" || (limit > 0 && rv != "0");
    // The items in their storage version, and in the request's version when that differs.
    let (stored, items, rev, cont_out, remaining) = if from_store {
        let at = if rv_match == "Exact" { rv_num } else { 0 };
        if rv_match == "NotOlderThan" && rv_num > 0 {
            reg.cache.wait_for(rv_num, Duration::from_secs(3)).await;
        }
        let page = reg.list_from_store(&filter, limit, cont, at).await?;
        (
            page.stored,
            reg.converts().then_some(page.items),
            page.rev,
            page.continue_token,
            page.remaining,
        )
    } else {
        let fresh = if rv.is_empty() {
            reg.cache_is_fresh().await
        } else if rv_num > 0 {
            if !reg.cache.wait_for(rv_num, Duration::from_secs(3)).await {
                return Err(ApiError::from_store(
                    capstan_store::StoreError::FutureRevision {
                        requested: rv_num,
                        current: reg.cache.revision(),
                    },
                    reg.info,
                    "",
                ));
            }
            true
        } else {
            true
        };
        if fresh {
            let (objs, rev) = reg.cache.list(&filter);
            if call.output == Output::Json {
                // Written straight from the cached objects' bytes.
                let size = objs.iter().map(|o| o.json_len() + 1).sum();
                let body = list_body_with(reg, &list_meta(rev, None, None), size, |out| {
                    for (i, o) in objs.iter().enumerate() {
                        if i > 0 {
                            out.put_u8(b',');
                        }
                        o.write_wire(reg.view(), out);
                    }
                });
                return Ok(json_response(200, body));
            }
            let stored = objs.iter().map(|o| o.json()).collect();
            (stored, None, rev, None, None)
        } else {
            let page = reg.list_from_store(&filter, 0, "", 0).await?;
            let items = reg.converts().then_some(page.items);
            (page.stored, items, page.rev, None, None)
        }
    };
    let meta = list_meta(rev, cont_out.as_deref(), remaining);
    match call.output {
        Output::Json => {
            let items = items.as_ref().unwrap_or(&stored);
            Ok(json_response(200, list_body(reg, &meta, items)))
        }
        Output::Table(include) => {
            let values: Vec<Value> = stored
                .iter()
                .filter_map(|b| serde_json::from_slice(b).ok())
                .collect();
            let refs: Vec<&Value> = values.iter().collect();
            Ok(value_response(200, &table_of(reg, &refs, include, meta)))
        }
        Output::Metadata => {
            let mut body: Vec<u8> = Vec::with_capacity(stored.len() * 512 + 256);
            body.extend_from_slice(br#"{"apiVersion":"meta.k8s.io/v1","items":["#);
            let mut first = true;
            for b in &stored {
                let mark = body.len();
                if !first {
                    body.push(b',');
                }
                if tables::write_partial_metadata(b, &mut body) {
                    first = false;
                } else {
                    body.truncate(mark);
                }
            }
            body.extend_from_slice(br#"],"kind":"PartialObjectMetadataList","metadata":"#);
            body.extend_from_slice(&serde_json::to_vec(&meta).unwrap_or_default());
            body.push(b'}');
            Ok(json_response(200, Bytes::from(body)))
        }
    }
}

/// `{"kind":"PodList",...,"items":[...]}` from already-serialized items.
fn list_body(reg: &Registry, meta: &Value, items: &[Bytes]) -> Bytes {
    let size: usize = items.iter().map(|i| i.len() + 1).sum();
    list_body_with(reg, meta, size, |out| {
        for (i, item) in items.iter().enumerate() {
            if i > 0 {
                out.put_u8(b',');
            }
            out.put_slice(item);
        }
    })
}

/// `{"kind":"PodList",...,"items":[...]}` whose items (about `size` bytes, comma-separated)
/// `items` writes.
fn list_body_with(
    reg: &Registry,
    meta: &Value,
    size: usize,
    items: impl FnOnce(&mut BytesMut),
) -> Bytes {
    let mut out = BytesMut::with_capacity(size + 200);
    out.put_slice(b"{\"kind\":\"");
    out.put_slice(reg.info.list_kind().as_bytes());
    out.put_slice(b"\",\"apiVersion\":\"");
    out.put_slice(reg.info.api_version().as_bytes());
    out.put_slice(b"\",\"metadata\":");
    out.put_slice(&serde_json::to_vec(meta).unwrap_or_default());
    out.put_slice(b",\"items\":[");
    items(&mut out);
    out.put_slice(b"]}");
    out.freeze()
}

fn parse_rv(rv: &str) -> ApiResult<i64> {
    if rv.is_empty() {
        return Ok(0);
    }
    rv.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| ApiError::bad_request(format!("invalid resource version: {rv}")))
}

pub async fn watch(reg: Arc<Registry>, call: &Call<'_>) -> ApiResult<Response<Body>> {
    let q = call.query;
    let filter = Filter::new(
        reg.info,
        &call.info.namespace,
        q.str("labelSelector"),
        q.str("fieldSelector"),
    )?;
    let filter = if call.info.name.is_empty() {
        filter
    } else {
        // A watch of one object (kubectl get NAME -w) is a list watch filtered by name.
        let fs = if q.str("fieldSelector").is_empty() {
            format!("metadata.name={}", call.info.name)
        } else {
            format!(
                "{},metadata.name={}",
                q.str("fieldSelector"),
                call.info.name
            )
        };
        Filter::new(reg.info, &call.info.namespace, q.str("labelSelector"), &fs)?
    };
    let rv = q.str("resourceVersion");
    let rv_num = parse_rv(rv)?;
    let send_initial = q.flag("sendInitialEvents");
    let bookmarks = q.flag("allowWatchBookmarks");
    if send_initial && q.str("resourceVersionMatch") != "NotOlderThan" {
        return Err(ApiError::invalid(
            reg.info,
            "",
            vec![crate::error::FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )],
        ));
    }
    let from = if rv.is_empty() || rv == "0" || send_initial {
        if rv.is_empty() {
            reg.cache_is_fresh().await;
        } else if rv_num > 0 {
            reg.cache.wait_for(rv_num, Duration::from_secs(3)).await;
        }
        None
    } else {
        if rv_num > reg.cache.revision() {
            reg.cache.wait_for(rv_num, Duration::from_secs(3)).await;
        }
        Some(rv_num)
    };
    let timeout = match q.get("timeoutSeconds") {
        Some(t) if !t.is_empty() => Duration::from_secs(
            t.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds: {t}")))?,
        ),
        _ => Duration::from_secs(1800 + rand::random::<u64>() % 1800),
    };
    let mut sub = match reg.cache.subscribe(filter, from) {
        Ok(sub) => sub,
        // As Kubernetes' watch cache: once the request is authorized and its resourceVersion
        // parsed, a window that no longer reaches back far enough is an ERROR event in the
        // stream (clients relist on it), not a failed request.
        Err(e) if e.code == 410 => {
            let line = event_bytes("ERROR", &e.status());
            let body = http_body_util::Full::new(line).map_err(|never| match never {});
            let mut r = Response::new(BodyExt::boxed(body));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            return Ok(r);
        }
        Err(e) => return Err(e),
    };
    let output = call.output;
    let trim = call.trim_managed_fields;
    let info = reg.info;
    let revisions = reg.cache.revisions();
    let frame = {
        let reg = reg.clone();
        move |item: &WatchItem, out: &mut BytesMut| frame(&reg, item, output, trim, out)
    };
    let initial = std::mem::take(&mut sub.initial).into();
    let mut state = WatchStream::new(sub, initial, revisions, from.unwrap_or(0), timeout);
    state.initial_end = send_initial;
    state.bookmarks = bookmarks;
    let stream = futures::stream::poll_fn(move |cx| {
        state
            .poll_next(cx, info, &frame)
            .map(|b| b.map(|b| Ok::<_, Infallible>(Frame::data(b))))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(r)
}

/// How often an idle watch that asked for bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(30);

/// A watch response body is cut into frames of at most about this many bytes.
const WATCH_FRAME_BYTES: usize = 64 * 1024;

/// The state of one watch response, polled directly by the connection: each poll takes every
/// event already queued for the watcher (up to [`WATCH_FRAME_BYTES`]) and sends them as one
/// body frame, so a busy watch costs one write per batch rather than one per event.
struct WatchStream {
    initial: std::collections::VecDeque<WatchItem>,
    sub: crate::watch_cache::Subscription,
    /// The `initial-events-end` bookmark is still to be sent.
    initial_end: bool,
    bookmarks: bool,
    revisions: tokio::sync::watch::Receiver<i64>,
    last_rev: i64,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    tick: tokio::time::Interval,
}

impl WatchStream {
    fn new(
        sub: crate::watch_cache::Subscription,
        initial: std::collections::VecDeque<WatchItem>,
        revisions: tokio::sync::watch::Receiver<i64>,
        last_rev: i64,
        timeout: Duration,
    ) -> Self {
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        WatchStream {
            initial,
            sub,
            initial_end: false,
            bookmarks: false,
            revisions,
            last_rev,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            tick,
        }
    }

    fn poll_next(
        &mut self,
        cx: &mut std::task::Context<'_>,
        info: &'static capstan_api::catalogue::ResourceInfo,
        frame: &dyn Fn(&WatchItem, &mut BytesMut),
    ) -> std::task::Poll<Option<Bytes>> {
        use std::task::Poll;
        let mut out = BytesMut::new();
        while out.len() < WATCH_FRAME_BYTES {
            let Some(item) = self.initial.pop_front() else {
                break;
            };
            self.last_rev = self.last_rev.max(item.event.rev);
            frame(&item, &mut out);
        }
        if !out.is_empty() {
            return Poll::Ready(Some(out.freeze()));
        }
        if self.initial_end {
            self.initial_end = false;
            let rev = *self.revisions.borrow_and_update();
            self.last_rev = self.last_rev.max(rev);
            return Poll::Ready(Some(bookmark(info, self.last_rev, true)));
        }
        if self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(None);
        }
        let mut closed = false;
        while out.len() < WATCH_FRAME_BYTES {
            match self.sub.rx.poll_recv(cx) {
                Poll::Ready(Some(item)) => {
                    self.last_rev = self.last_rev.max(item.event.rev);
                    frame(&item, &mut out);
                }
                // Closed: the watcher fell behind; the client re-watches.
                Poll::Ready(None) => {
                    closed = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        if !out.is_empty() {
            return Poll::Ready(Some(out.freeze()));
        }
        if closed {
            return Poll::Ready(None);
        }
        if self.bookmarks {
            while self.tick.poll_tick(cx).is_ready() {
                let rev = *self.revisions.borrow_and_update();
                if rev > self.last_rev {
                    self.last_rev = rev;
                    return Poll::Ready(Some(bookmark(info, rev, false)));
                }
            }
        }
        Poll::Pending
    }
}

/// One watch event as the client asked for it: JSON in the request's version (converted once
/// per object and version, shared by every watcher), or a Table or metadata made from the
/// stored form. Appended to `out`, so that the shared frame is copied without taking a
/// reference on it (its count is touched by every watcher on every core).
fn frame(reg: &Registry, item: &WatchItem, output: Output, trim: bool, out: &mut BytesMut) {
    let bytes = match output {
        Output::Json => return item.event.write_frame(reg.view(), item.kind, trim, out),
        Output::Table(include) => {
            let v: Value = item.event.obj.value().unwrap_or(Value::Null);
            let t = table_of(
                reg,
                &[&v],
                include,
                json!({"resourceVersion": item.event.rev.to_string()}),
            );
            event_bytes(item.kind.as_str(), &t)
        }
        Output::Metadata => {
            let json = item.event.obj.json();
            let mut object = Vec::with_capacity(json.len().min(4096) + 96);
            if !tables::write_partial_metadata(&json, &mut object) {
                let v: Value = item.event.obj.value().unwrap_or(Value::Null);
                return out.extend_from_slice(&event_bytes(
                    item.kind.as_str(),
                    &tables::partial_metadata(&v),
                ));
            }
            return event_line(out, item.kind.as_str(), &object);
        }
    };
    out.extend_from_slice(&bytes);
}

/// A watch event's line: `type` before `object`, as Kubernetes writes it (a client that reads
/// the type first can decode the object straight into its kind; one that meets the object first
/// has to buffer it whole).
fn event_line(out: &mut impl bytes::BufMut, kind: &str, object: &[u8]) {
    // Kinds are fixed upper-case words (ADDED, MODIFIED, DELETED, BOOKMARK, ERROR): nothing
    // in them to escape.
    out.put_slice(b"{\"type\":\"");
    out.put_slice(kind.as_bytes());
    out.put_slice(b"\",\"object\":");
    out.put_slice(object);
    out.put_slice(b"}\n");
}

fn event_bytes(kind: &str, obj: &Value) -> Bytes {
    let object = serde_json::to_vec(obj).unwrap_or_default();
    let mut out = Vec::with_capacity(object.len() + kind.len() + 24);
    event_line(&mut out, kind, &object);
    out.into()
}

fn bookmark(info: &capstan_api::catalogue::ResourceInfo, rev: i64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rev.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    event_bytes(
        "BOOKMARK",
        &json!({"kind": info.kind, "apiVersion": info.api_version(), "metadata": md}),
    )
}

/// What Kubernetes' strategies take from the requesting user on create: a
/// CertificateSigningRequest's requestor (`spec.username`, `uid`, `groups`, `extra`), whatever
/// the body said.
fn set_creator(reg: &Registry, call: &Call, obj: &mut Value) {
    if reg.info.group != "certificates.k8s.io" || reg.info.kind != "CertificateSigningRequest" {
        return;
    }
    let Some(spec) = obj
        .as_object_mut()
        .map(|m| m.entry("spec").or_insert_with(|| json!({})))
        .and_then(Value::as_object_mut)
    else {
        return;
    };
    for f in ["username", "uid", "groups", "extra"] {
        spec.remove(f);
    }
    let user = call.user;
    if !user.name.is_empty() {
        spec.insert("username".into(), json!(user.name));
    }
    if !user.uid.is_empty() {
        spec.insert("uid".into(), json!(user.uid));
    }
    if !user.groups.is_empty() {
        spec.insert("groups".into(), json!(user.groups));
    }
    if !user.extra.is_empty() {
        spec.insert("extra".into(), json!(user.extra));
    }
}

pub async fn create(reg: &Registry, call: &Call<'_>) -> ApiResult<Response<Body>> {
    call.check_field_manager(None)?;
    let mut obj = call.object_body()?;
    let warnings = check_body(reg, call, &mut obj)?;
    set_creator(reg, call, &mut obj);
    let opts = call.write_options()?;
    let w = reg.create(&call.info.namespace, obj, &opts).await?;
    Ok(with_warnings(
        written_response(call, reg, 201, &w),
        &warnings,
    ))
}

pub async fn update(reg: &Registry, call: &Call<'_>) -> ApiResult<Response<Body>> {
    if call.info.subresource == "scale" {
        return crate::scale::update_scale(reg, call).await;
    }
    call.check_field_manager(None)?;
    let mut obj = call.object_body()?;
    let warnings = check_body(reg, call, &mut obj)?;
    let body_name = meta::name(&obj);
    if body_name.is_empty() {
        meta::set_meta_str(&mut obj, "name", &call.info.name);
    } else if body_name != call.info.name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            call.info.name
        )));
    }
    let opts = call.write_options()?;
    let (w, created) = reg
        .update(
            &call.info.namespace,
            &call.info.name,
            &call.info.subresource,
            obj,
            &opts,
        )
        .await?;
    Ok(with_warnings(
        written_response(call, reg, if created { 201 } else { 200 }, &w),
        &warnings,
    ))
}

/// A server-side apply error as Kubernetes answers it.
fn apply_error(e: capstan_api::apply::ApplyError) -> ApiError {
    use capstan_api::apply::{ApplyError, Conflict};
    match &e {
        ApplyError::Conflicts(conflicts) => {
            let causes: Vec<Value> = conflicts
                .iter()
                .map(|c| json!({"reason": Conflict::CAUSE_TYPE, "message": c.message, "field": c.field}))
                .collect();
            let mut err = ApiError::new(409, "Conflict", e.message());
            err.details = Some(json!({"causes": causes}));
            err
        }
        ApplyError::BadRequest(m) => ApiError::bad_request(m.clone()),
        ApplyError::Internal(m) => ApiError::new(500, "", m.clone()),
    }
}

/// PATCH with `application/apply-patch+yaml`: merge the applied configuration into the
/// object by its schema, with field ownership; create the object when it does not exist.
async fn apply_patch(
    reg: &Registry,
    call: &Call<'_>,
    config: Value,
    mut opts: WriteOptions,
) -> ApiResult<Response<Body>> {
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "error decoding patch: the apply configuration must be an object",
        ));
    }
    opts.fields_tracked = true;
    let now = meta::format_time(std::time::SystemTime::now());
    let api_version = reg.info.api_version();
    let sub = call.info.subresource.clone();
    let manager = opts.field_manager.clone();
    let req = capstan_api::apply::Request {
        manager: &manager,
        api_version: &api_version,
        kind: reg.info.kind,
        subresource: &sub,
        now: &now,
        force: call.query.str("force") == "true",
    };
    let ignored = reg.ignored_fields(&sub);
    let schema = reg.schema();
    let name = call.info.name.clone();
    let config_name = meta::name(&config).to_string();
    if !config_name.is_empty() && config_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({config_name}) does not match the name on the URL ({name})"
        )));
    }
    let mut warnings = Vec::new();
    let result = reg
        .update_with(&call.info.namespace, &name, &sub, &opts, |old| {
            let mut merged = capstan_api::apply::apply(schema, Some(old), &config, &req, &ignored)
                .map_err(apply_error)?;
            warnings = crate::validation::check_field_validation(
                reg.info,
                reg.strategy.as_ref(),
                call.query,
                &mut merged,
            )?;
            Ok(merged)
        })
        .await;
    match result {
        Ok(w) => Ok(with_warnings(
            written_response(call, reg, 200, &w),
            &warnings,
        )),
        Err(e) if e.code == 404 && sub.is_empty() => {
            if let Some(e) = reg.strategy.refuse_create() {
                return Err(e);
            }
            let mut obj = capstan_api::apply::apply(schema, None, &config, &req, &ignored)
                .map_err(apply_error)?;
            if meta::name(&obj).is_empty() {
                meta::set_meta_str(&mut obj, "name", &name);
            }
            let warnings = check_body(reg, call, &mut obj)?;
            set_creator(reg, call, &mut obj);
            let w = reg.create(&call.info.namespace, obj, &opts).await?;
            Ok(with_warnings(
                written_response(call, reg, 201, &w),
                &warnings,
            ))
        }
        Err(e) => Err(e),
    }
}

pub async fn patch(reg: &Registry, call: &Call<'_>) -> ApiResult<Response<Body>> {
    let content_type = call
        .header("content-type")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    let patch_type = crate::patch::PatchType::from_content_type(&content_type)?;
    let patch_body = codec::decode_body(
        &call.body,
        if patch_type == crate::patch::PatchType::Apply {
            BodyType::Yaml
        } else {
            BodyType::Json
        },
    )?;
    call.check_field_manager(Some(patch_type))?;
    let opts = call.write_options()?;
    if call.info.subresource == "scale" {
        return crate::scale::patch_scale(reg, call, patch_type, &patch_body, &opts).await;
    }
    if patch_type == crate::patch::PatchType::Apply {
        return apply_patch(reg, call, patch_body, opts).await;
    }
    let info = reg.info;
    let query = call.query.clone();
    let name = call.info.name.clone();
    let mut warnings = Vec::new();
    let result = reg
        .update_with(
            &call.info.namespace,
            &call.info.name,
            &call.info.subresource,
            &opts,
            |old| {
                let mut patched = crate::patch::apply(info, patch_type, old, &patch_body)?;
                if meta::name(&patched) != name {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the URL ({name})",
                        meta::name(&patched)
                    )));
                }
                warnings = crate::validation::check_patched(
                    info,
                    reg.strategy.as_ref(),
                    &query,
                    patch_type,
                    &patch_body,
                    &mut patched,
                )?;
                Ok(patched)
            },
        )
        .await;
    match result {
        Ok(w) => Ok(with_warnings(
            written_response(call, reg, 200, &w),
            &warnings,
        )),
        Err(e) => Err(e),
    }
}

fn delete_options(call: &Call) -> ApiResult<DeleteOptions> {
    let mut opts = DeleteOptions {
        user: Some(call.user.clone()),
        ..Default::default()
    };
    if !call.body.is_empty() {
        let kind = codec::body_type(call.header("content-type"))?;
        let v = codec::decode_body(&call.body, kind)?;
        opts.grace_period = v.get("gracePeriodSeconds").and_then(Value::as_i64);
        opts.propagation = v
            .get("propagationPolicy")
            .and_then(Value::as_str)
            .map(str::to_string);
        if v.get("orphanDependents").and_then(Value::as_bool) == Some(true) {
            opts.propagation.get_or_insert_with(|| "Orphan".into());
        }
        if let Some(p) = v.get("preconditions") {
            opts.precondition_uid = p.get("uid").and_then(Value::as_str).map(str::to_string);
            opts.precondition_rv = p
                .get("resourceVersion")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        if let Some(d) = v.get("dryRun").and_then(Value::as_array) {
            opts.dry_run = d.iter().any(|x| x == "All");
        }
    }
    if let Some(g) = call.query.get("gracePeriodSeconds") {
        opts.grace_period = Some(
            g.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid gracePeriodSeconds: {g}")))?,
        );
    }
    if let Some(p) = call.query.get("propagationPolicy") {
        opts.propagation = Some(p.to_string());
    }
    if call.query.str("orphanDependents") == "true" && opts.propagation.is_none() {
        opts.propagation = Some("Orphan".into());
    }
    if let Some(p) = &opts.propagation {
        if !matches!(p.as_str(), "Orphan" | "Background" | "Foreground") {
            return Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
    }
    opts.dry_run |= call.query.get("dryRun") == Some("All");
    Ok(opts)
}

pub async fn delete(reg: &Registry, call: &Call<'_>) -> ApiResult<Response<Body>> {
    let opts = delete_options(call)?;
    match reg
        .delete(&call.info.namespace, &call.info.name, &opts)
        .await?
    {
        Deleted::Now(w) => {
            if reg.info.kind == "Pod" {
                Ok(written_response(call, reg, 200, &w))
            } else {
                Ok(value_response(
                    200,
                    &crate::error::success_status(reg.info, &call.info.name, meta::uid(&w.value)),
                ))
            }
        }
        Deleted::Pending(w) => {
            let code = if opts.propagation.as_deref() == Some("Foreground") {
                202
            } else {
                200
            };
            Ok(written_response(call, reg, code, &w))
        }
    }
}

pub async fn delete_collection(reg: &Registry, call: &Call<'_>) -> ApiResult<Response<Body>> {
    let q = call.query;
    let opts = delete_options(call)?;
    let filter = Filter::new(
        reg.info,
        &call.info.namespace,
        q.str("labelSelector"),
        q.str("fieldSelector"),
    )?;
    let (rev, names) = reg.names_from_store(&filter).await?;
    let mut deleted = Vec::new();
    for (namespace, name) in &names {
        match reg.delete(namespace, name, &opts).await {
            Ok(Deleted::Now(w)) | Ok(Deleted::Pending(w)) => deleted.push(w.json),
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(json_response(
        200,
        list_body(reg, &list_meta(rev, None, None), &deleted),
    ))
}

trait WithMessage {
    fn with_message(self, m: String) -> Self;
}

impl WithMessage for ApiError {
    fn with_message(mut self, m: String) -> Self {
        self.message = m;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_lines_name_the_type_before_the_object() {
        let line = event_bytes("ERROR", &json!({"kind": "Status", "code": 410}));
        assert_eq!(
            &line[..],
            &b"{\"type\":\"ERROR\",\"object\":{\"code\":410,\"kind\":\"Status\"}}\n"[..]
        );
        let mut out = BytesMut::new();
        event_line(&mut out, "ADDED", br#"{"metadata":{"name":"a"}}"#);
        assert_eq!(
            &out[..],
            &br#"{"type":"ADDED","object":{"metadata":{"name":"a"}}}
"#[..]
        );
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["object"]["metadata"]["name"], "a");
    }
}
