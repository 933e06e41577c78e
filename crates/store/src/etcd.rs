//! The etcd v3 backend: [`EtcdStore`] implements [`Store`] over etcd's gRPC API, the way
//! kube-apiserver's storage layer uses etcd.
//!
//! Mapping of the store's operations onto etcd:
//! - `create`: `Txn(If CreateRevision(key) == 0, Then Put)`; a failed compare is `AlreadyExists`.
//! - `update`: `Txn(If ModRevision(key) == expected && Version(key) > 0, Then Put, Else Get)`;
//!   the `Get` tells `NotFound` from `Conflict { current }` without another round trip.
//! - `delete`: `DeleteRange` with `prev_kv`, or the same `Txn` shape when conditional.
//! - reads: `Range` (linearizable), errors mapped to `Compacted` / `FutureRevision`.
//! - `watch`: one gRPC watch stream per [`Watcher`], with `prev_kv`, re-established on another
//!   member from the last delivered revision + 1 if the stream breaks.
//! - leases: `LeaseGrant`, one round of `LeaseKeepAlive`, `LeaseRevoke`.
//!
//! Failover: the store keeps one client per endpoint, created lazily, and sends every request
//! to the current endpoint. A transport failure or `Unavailable` moves the current endpoint to
//! the next one and retries with a short bounded backoff, for at most the request timeout.
//!
//! A retried write is ambiguous, as with Kubernetes on etcd: when the first attempt reached
//! etcd and was applied but its response was lost, the retry fails its compare and surfaces as
//! `AlreadyExists` (create), `Conflict` (update or conditional delete), `NotFound` (delete) or
//! `LeaseNotFound` (revoke), although the write happened, and a retried lease grant may leave
//! an unused lease behind that expires with its TTL. Callers treat these as they would a
//! concurrent writer: read and decide again.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, PutOptions,
    Txn, TxnOp, TxnOpResponse, TxnResponse, WatchOptions, WatchRequestSender, WatchResponseStream,
};
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::{sleep, sleep_until, timeout, Instant};
use tonic::Code;

use crate::{
    check_size, DeleteResponse, Event, EventKind, KeyValue, LeaseId, RangeRequest, RangeResponse,
    Result, Revision, Store, StoreError, WatchRequest, WatchResponse, Watcher, MAX_VALUE_BYTES,
};

/// First pause between retries; doubled after each failed attempt up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// At most this many attempts per request, and never past the request timeout.
const MAX_ATTEMPTS: usize = 10;

/// The largest response we accept: etcd itself sends up to `math.MaxInt32` bytes, and a
/// Kubernetes list can be far larger than tonic's 4 MiB default.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// HTTP/2 keepalive, as kube-apiserver dials etcd: notices a member that vanished without
/// closing its connections (a partition, a frozen machine) on streams that wait for events.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// A key nobody writes, read to learn the current revision and watched to learn the compacted
/// one; since it never exists, no read or watch of a real range ever returns it.
const PROBE_KEY: &[u8] = b"\0capstan/probe";

/// How long to wait for etcd to cancel a watch from a compacted revision (it checks unsynced
/// watchers every 100 ms).
const COMPACTION_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// How long a progress notification answering `RequestProgress` is held back when it claims
/// a revision past the last delivered event. etcd before 3.4.25 / 3.5.8 sends that answer
/// ahead of events already queued for the watcher (etcd-io/etcd#15220), so we wait for those
/// events, or for this long without any, before passing the notification on.
const PROGRESS_SETTLE: Duration = Duration::from_millis(150);

/// How to reach etcd.
#[derive(Clone, Debug)]
pub struct EtcdConfig {
    /// Client URLs of the members, e.g. `http://127.0.0.1:2379`.
    pub endpoints: Vec<String>,
    /// How long to wait for a TCP/HTTP2 connection to a member.
    pub dial_timeout: Duration,
    /// How long one store operation may take, retries and failover included.
    pub request_timeout: Duration,
    /// Compact history this often (to the revision seen one interval earlier), like
    /// kube-apiserver's `--etcd-compaction-interval`. None: never compact automatically.
    pub compaction_interval: Option<Duration>,
}

impl EtcdConfig {
    /// Defaults: 5 s dial timeout, 10 s request timeout, compaction every 5 minutes.
    pub fn new<S: Into<String>>(endpoints: impl IntoIterator<Item = S>) -> Self {
        EtcdConfig {
            endpoints: endpoints.into_iter().map(Into::into).collect(),
            dial_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            compaction_interval: Some(Duration::from_secs(300)),
        }
    }
}

/// A [`Store`] backed by an etcd v3 cluster.
pub struct EtcdStore {
    inner: Arc<Inner>,
    /// The background compactor, stopped when the store is dropped.
    compactor: Option<AbortOnDrop>,
}

/// Aborts a background task when dropped.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl EtcdStore {
    /// Connect to the cluster and check that it answers (a linearizable read, with failover,
    /// within the request timeout), so that a wrong address fails here rather than later.
    pub async fn connect(config: EtcdConfig) -> Result<EtcdStore> {
        if config.endpoints.is_empty() {
            return Err(StoreError::Unavailable(
                "no etcd endpoints configured".into(),
            ));
        }
        let inner = Arc::new(Inner::new(config));
        inner.current_revision().await?;
        let compactor = inner
            .config
            .compaction_interval
            .map(|every| AbortOnDrop(tokio::spawn(compact_periodically(inner.clone(), every))));
        Ok(EtcdStore { inner, compactor })
    }

    /// The endpoint requests currently go to (it changes on failover).
    pub fn current_endpoint(&self) -> String {
        self.inner.endpoints.current_url().to_string()
    }

    /// Is the background compactor running?
    pub fn compacts_periodically(&self) -> bool {
        self.compactor.is_some()
    }
}

/// Kube-apiserver's compactor without its cross-apiserver election: every `interval`, compact
/// to the revision observed one interval earlier, so watchers always have at least one
/// interval of history to resume from. (kube-apiserver elects one compactor among apiservers
/// by a compare-and-swap on the key `compact_rev_key`; we keep the keyspace clean instead, and
/// when several capstan servers share a cluster the ones that lose the race get `Compacted`,
/// which is harmless.)
async fn compact_periodically(inner: Arc<Inner>, interval: Duration) {
    let mut previous: Option<Revision> = None;
    loop {
        sleep(interval).await;
        if let Some(rev) = previous.filter(|&r| r > inner.known_compacted()) {
            match inner.compact(rev).await {
                Ok(()) | Err(StoreError::Compacted { .. }) => {}
                Err(e) => tracing::warn!(revision = rev, error = %e, "etcd compaction failed"),
            }
        }
        previous = inner.current_revision().await.ok();
    }
}

/// Why one etcd call failed, classified for retrying and for mapping to [`StoreError`] (which
/// needs context the call site has: the key, the lease, the requested revision).
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("required revision has been compacted")]
    Compacted,
    #[error("required revision is a future revision")]
    FutureRevision,
    #[error("requested lease not found")]
    LeaseNotFound,
    #[error("request is too large")]
    TooLarge,
    /// The member is unreachable or cannot serve now (no leader, shutting down): worth
    /// retrying on another member.
    #[error("etcd unavailable: {0}")]
    Transient(String),
    /// Retrying will not help (bad request, permission denied, ...).
    #[error("etcd error: {0}")]
    Fatal(String),
}

impl CallError {
    fn is_transient(&self) -> bool {
        matches!(self, CallError::Transient(_))
    }
}

impl From<etcd_client::Error> for CallError {
    fn from(e: etcd_client::Error) -> Self {
        use etcd_client::Error as E;
        match e {
            E::GRpcStatus(status) => classify_status(&status),
            E::TransportError(e) => CallError::Transient(e.to_string()),
            E::IoError(e) => CallError::Transient(e.to_string()),
            // The client's own channels to a stream that broke underneath it.
            E::WatchError(m) => CallError::Transient(m),
            E::LeaseKeepAliveError(m) if m.contains("not found") => CallError::LeaseNotFound,
            E::LeaseKeepAliveError(m) => CallError::Transient(m),
            other => CallError::Fatal(other.to_string()),
        }
    }
}

/// etcd's errors are gRPC statuses whose messages are its API (`rpctypes`); transport failures
/// reach us as statuses too (Unavailable, or Unknown/Internal/Cancelled from HTTP/2 errors).
fn classify_status(status: &tonic::Status) -> CallError {
    let message = status.message();
    if message.contains("required revision has been compacted") {
        return CallError::Compacted;
    }
    if message.contains("required revision is a future revision") {
        return CallError::FutureRevision;
    }
    if message.contains("requested lease not found") {
        return CallError::LeaseNotFound;
    }
    if message.contains("request is too large") {
        return CallError::TooLarge;
    }
    let text = format!("{:?}: {message}", status.code());
    match status.code() {
        Code::Unavailable | Code::Unknown | Code::Cancelled | Code::DeadlineExceeded => {
            CallError::Transient(text)
        }
        Code::Internal if message.contains("h2 protocol error") => CallError::Transient(text),
        // "etcdserver: too many requests": the member is overloaded, another may not be.
        Code::ResourceExhausted if message.contains("too many requests") => {
            CallError::Transient(text)
        }
        _ => CallError::Fatal(text),
    }
}

/// The default mapping; call sites first handle the variants that need their context.
impl From<CallError> for StoreError {
    fn from(e: CallError) -> Self {
        match e {
            CallError::TooLarge => StoreError::TooLarge {
                size: 0,
                limit: MAX_VALUE_BYTES,
            },
            other => StoreError::Unavailable(other.to_string()),
        }
    }
}

/// The members and one lazily created client per member.
struct Endpoints {
    urls: Vec<String>,
    clients: Vec<Mutex<Option<Arc<Conn>>>>,
    /// Index of the endpoint requests go to.
    current: AtomicUsize,
    options: ConnectOptions,
}

impl Endpoints {
    fn new(config: &EtcdConfig) -> Self {
        let options = ConnectOptions::new()
            .with_connect_timeout(config.dial_timeout)
            .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
            // etcd refuses pings on idle connections (its keepalive enforcement policy).
            .with_keep_alive_while_idle(false)
            // Fail fast on a member without a leader (instead of timing out), and make etcd
            // close watches on a member that loses its leader, as kube-apiserver does.
            .with_require_leader(true);
        Endpoints {
            urls: config.endpoints.clone(),
            clients: config.endpoints.iter().map(|_| Mutex::new(None)).collect(),
            current: AtomicUsize::new(0),
            options,
        }
    }

    fn current_url(&self) -> &str {
        &self.urls[self.current.load(Ordering::Relaxed) % self.urls.len()]
    }

    /// The current endpoint's index and client, connecting (lazily: no I/O yet) if needed.
    async fn client(&self) -> Result<(usize, Arc<Conn>), CallError> {
        let index = self.current.load(Ordering::Relaxed) % self.urls.len();
        if let Some(conn) = self.clients[index].lock().clone() {
            return Ok((index, conn));
        }
        let client = Client::connect([&self.urls[index]], Some(self.options.clone())).await?;
        let conn = Arc::new(Conn {
            client,
            has_leader: AtomicBool::new(false),
        });
        let mut slot = self.clients[index].lock();
        Ok((index, slot.get_or_insert(conn).clone()))
    }

    /// Endpoint `index` failed: forget its client (a fresh one reconnects cleanly) and move on
    /// to the next endpoint, unless a concurrent request already did.
    fn failed(&self, index: usize) {
        *self.clients[index].lock() = None;
        let next = (index + 1) % self.urls.len();
        let _ = self
            .current
            .compare_exchange(index, next, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// A client of one member.
struct Conn {
    client: Client,
    /// Has the member shown that it has a live leader since we connected? Until it has, every
    /// request first checks (see [`Conn::ensure_leader`]).
    has_leader: AtomicBool,
}

impl Conn {
    /// Check, once per connection, that the member can reach a live leader, with a
    /// linearizable read. Why: when the leader dies, its followers keep forwarding proposals
    /// to it until they notice (an election timeout), and etcd then leaves those writes
    /// hanging for its whole request timeout (7 s by default). A read in the same situation
    /// fails with "leader changed" as soon as a new leader is elected, so after a failover we
    /// read first and write once the new member is known to be healthy.
    async fn ensure_leader(&self) -> Result<(), etcd_client::Error> {
        if self.has_leader.load(Ordering::Relaxed) {
            return Ok(());
        }
        let options = GetOptions::new().with_count_only();
        kv(&self.client).get(PROBE_KEY, Some(options)).await?;
        self.has_leader.store(true, Ordering::Relaxed);
        Ok(())
    }
}

/// What the store, its watch tasks and its compactor share.
struct Inner {
    config: EtcdConfig,
    endpoints: Endpoints,
    /// The highest compacted revision we know of: our own compactions and what etcd told us
    /// in errors. See [`Inner::compacted_revision`].
    compacted: AtomicI64,
}

/// A watch stream that etcd has confirmed.
struct LiveStream {
    sender: WatchRequestSender,
    responses: WatchResponseStream,
    /// The store revision the watch was created at.
    revision: Revision,
    /// The endpoint it streams from.
    endpoint: usize,
}

/// The outcome of opening a watch stream.
enum Opened {
    Stream(Box<LiveStream>),
    /// etcd refused the start revision: history up to `compacted` is gone.
    Compacted(Revision),
}

impl Inner {
    fn new(config: EtcdConfig) -> Self {
        Inner {
            endpoints: Endpoints::new(&config),
            config,
            compacted: AtomicI64::new(0),
        }
    }

    /// Run `op` against the current endpoint; on a transient failure move to the next endpoint
    /// and try again after a backoff, for at most [`MAX_ATTEMPTS`] attempts within the request
    /// timeout. Each attempt may use at most half the timeout, so that a member that hangs
    /// (rather than failing fast) still leaves time to try another.
    async fn call<T, F, Fut>(&self, op: F) -> Result<T, CallError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        Ok(self.call_on_endpoint(op).await?.1)
    }

    /// [`Inner::call`], also saying which endpoint answered.
    async fn call_on_endpoint<T, F, Fut>(&self, mut op: F) -> Result<(usize, T), CallError>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let deadline = Instant::now() + self.config.request_timeout;
        let per_attempt = (self.config.request_timeout / 2).max(Duration::from_secs(1));
        let mut backoff = INITIAL_BACKOFF;
        let mut attempt = 1;
        loop {
            let (index, result) = self.attempt(&mut op, deadline, per_attempt).await;
            let error = match result {
                Ok(value) => return Ok((index.unwrap_or_default(), value)),
                Err(e) if !e.is_transient() => return Err(e),
                Err(e) => e,
            };
            if let Some(index) = index {
                let endpoint = &self.endpoints.urls[index];
                tracing::debug!(%endpoint, %error, "etcd request failed, failing over");
                self.endpoints.failed(index);
            }
            if attempt >= MAX_ATTEMPTS || Instant::now() + backoff >= deadline {
                return Err(error);
            }
            sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            attempt += 1;
        }
    }

    /// One attempt of [`Inner::call`]: which endpoint it used (if it got that far) and how it
    /// went.
    async fn attempt<T, F, Fut>(
        &self,
        op: &mut F,
        deadline: Instant,
        per_attempt: Duration,
    ) -> (Option<usize>, Result<T, CallError>)
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let (index, conn) = match self.endpoints.client().await {
            Ok(found) => found,
            Err(e) => return (None, Err(e)),
        };
        let limit = deadline
            .saturating_duration_since(Instant::now())
            .min(per_attempt);
        let checked_op = async {
            conn.ensure_leader().await?;
            op(conn.client.clone()).await
        };
        let result = match timeout(limit, checked_op).await {
            Ok(result) => result.map_err(CallError::from),
            Err(_) => Err(CallError::Transient(format!("no answer within {limit:?}"))),
        };
        (Some(index), result)
    }

    fn known_compacted(&self) -> Revision {
        self.compacted.load(Ordering::Relaxed)
    }

    fn note_compacted(&self, revision: Revision) {
        self.compacted.fetch_max(revision, Ordering::Relaxed);
    }

    /// Map a read error that depends on the requested revision.
    async fn revision_error(&self, e: CallError, requested: Revision) -> StoreError {
        match e {
            CallError::Compacted => StoreError::Compacted {
                requested,
                compacted: self.learn_compacted(requested).await,
            },
            CallError::FutureRevision => StoreError::FutureRevision {
                requested,
                current: self.current_revision().await.unwrap_or(requested - 1),
            },
            other => other.into(),
        }
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        let mut options = GetOptions::new()
            .with_revision(req.revision)
            .with_limit(i64::try_from(req.limit).unwrap_or(i64::MAX));
        if !req.end.is_empty() {
            options = options.with_range(req.end.to_vec());
        }
        if req.count_only {
            options = options.with_count_only();
        }
        let key = range_start(&req);
        let result = self
            .call(|client| {
                let (key, options) = (key.clone(), options.clone());
                async move { kv(&client).get(key, Some(options)).await }
            })
            .await;
        let mut resp = match result {
            Ok(resp) => resp,
            Err(e) => return Err(self.revision_error(e, req.revision).await),
        };
        let header = header_revision(resp.header());
        Ok(RangeResponse {
            count: resp.count(),
            more: resp.more(),
            kvs: resp.take_kvs().into_iter().map(into_kv).collect(),
            // etcd's header carries the current revision; a past read was served at its own.
            revision: if req.revision != 0 {
                req.revision
            } else {
                header
            },
        })
    }

    /// The current revision, from a linearizable read of a key nobody writes.
    async fn current_revision(&self) -> Result<Revision> {
        let options = GetOptions::new().with_count_only();
        let resp = self
            .call(|client| {
                let options = options.clone();
                async move { kv(&client).get(PROBE_KEY, Some(options)).await }
            })
            .await?;
        Ok(header_revision(resp.header()))
    }

    async fn txn(&self, txn: Txn) -> Result<TxnResponse, CallError> {
        self.call(|client| {
            let txn = txn.clone();
            async move { kv(&client).txn(txn).await }
        })
        .await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        let result = self
            .call(|client| async move { kv(&client).compact(revision, None).await })
            .await;
        match result {
            Ok(_) => {
                self.note_compacted(revision);
                Ok(())
            }
            // etcd refuses to compact at or below its compacted revision; the revision just
            // below the requested one is certainly gone, so a watch from it tells us how far.
            Err(CallError::Compacted) => Err(StoreError::Compacted {
                requested: revision,
                compacted: self.learn_compacted(revision - 1).await.max(revision),
            }),
            Err(e) => Err(self.revision_error(e, revision).await),
        }
    }

    /// etcd has no call that returns its compacted revision, so we track the highest revision
    /// we compacted or were told about, and check it: a read at that revision succeeds unless
    /// someone (another apiserver, etcd's own `--auto-compaction-*`) compacted further, and
    /// in that case a watch from there reveals the exact revision ([`Inner::learn_compacted`]).
    /// Before any compaction this is 0.
    async fn compacted_revision(&self) -> Result<Revision> {
        let known = self.known_compacted();
        let at = known.max(1);
        let options = GetOptions::new().with_count_only().with_revision(at);
        let result = self
            .call(|client| {
                let options = options.clone();
                async move { kv(&client).get(PROBE_KEY, Some(options)).await }
            })
            .await;
        match result {
            Ok(_) => Ok(known),
            Err(CallError::Compacted) => Ok(self.learn_compacted(at).await),
            Err(e) => Err(e.into()),
        }
    }

    /// Learn the compacted revision, knowing that revision `below` (>= 1) has been compacted:
    /// etcd cancels a watch that starts there and says up to where it compacted. Falls back to
    /// what we already know if etcd does not say within [`COMPACTION_PROBE_TIMEOUT`] (a
    /// member that has not applied the compaction yet would just keep the watch open).
    async fn learn_compacted(&self, below: Revision) -> Revision {
        if below >= 1 {
            let req = WatchRequest::key(PROBE_KEY).from_revision(below);
            let probe = self.open_watch(&req, below, true);
            if let Ok(Ok(Opened::Compacted(revision))) =
                timeout(COMPACTION_PROBE_TIMEOUT, probe).await
            {
                self.note_compacted(revision);
            }
        }
        self.known_compacted()
    }

    /// Open a watch for `req` from revision `from` (0: from now) and wait until etcd confirms
    /// it, with failover like every other call. When `probing` for the compacted revision, etcd
    /// confirms the watch first and cancels it right after: then wait for the cancellation.
    async fn open_watch(
        &self,
        req: &WatchRequest,
        from: Revision,
        probing: bool,
    ) -> Result<Opened, CallError> {
        let options = watch_options(req, from);
        let key = watch_start(&req.start, &req.end);
        let (endpoint, mut opened) = self
            .call_on_endpoint(|client| {
                let (key, options) = (key.clone(), options.clone());
                async move { open_stream(client, key, options, probing).await }
            })
            .await?;
        if let Opened::Stream(stream) = &mut opened {
            stream.endpoint = endpoint;
        }
        Ok(opened)
    }
}

/// Create a watch on a fresh stream and read until etcd confirms it (or, when `probing`, until
/// it cancels it for compaction).
async fn open_stream(
    client: Client,
    key: Vec<u8>,
    options: WatchOptions,
    probing: bool,
) -> Result<Opened, etcd_client::Error> {
    let mut watch = client
        .watch_client()
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let (sender, mut responses) = watch.watch(key, Some(options)).await?.split();
    loop {
        let Some(resp) = responses.message().await? else {
            return Err(etcd_client::Error::WatchError("watch stream ended".into()));
        };
        if resp.canceled() {
            if resp.compact_revision() > 0 {
                return Ok(Opened::Compacted(resp.compact_revision()));
            }
            // Not retryable as such, but surfaces as an error rather than a silent end.
            let reason = format!("watch canceled by etcd: {}", resp.cancel_reason());
            return Err(etcd_client::Error::InvalidArgs(reason));
        }
        if resp.created() && !probing {
            return Ok(Opened::Stream(Box::new(LiveStream {
                sender,
                responses,
                revision: header_revision(resp.header()),
                endpoint: 0,
            })));
        }
        if probing && !resp.events().is_empty() {
            // Events mean the start revision was not compacted after all.
            return Err(etcd_client::Error::InvalidArgs("not compacted".into()));
        }
    }
}

fn watch_options(req: &WatchRequest, from: Revision) -> WatchOptions {
    let mut options = WatchOptions::new()
        .with_prev_key()
        .with_start_revision(from);
    if !req.end.is_empty() {
        options = options.with_range(req.end.to_vec());
    }
    if req.progress_interval.is_some() {
        // etcd's own periodic notifications (every 10 minutes by default); the watch task
        // asks for progress at the requested interval itself.
        options = options.with_progress_notify();
    }
    options
}

/// etcd rejects an empty key; as the start of a range, the smallest non-empty key means the
/// same thing.
fn range_start(req: &RangeRequest) -> Vec<u8> {
    watch_start(&req.start, &req.end)
}

fn watch_start(start: &[u8], end: &[u8]) -> Vec<u8> {
    if start.is_empty() && !end.is_empty() {
        vec![0]
    } else {
        start.to_vec()
    }
}

fn kv(client: &Client) -> etcd_client::KvClient {
    client
        .kv_client()
        .max_decoding_message_size(MAX_RESPONSE_BYTES)
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Revision {
    header.map(|h| h.revision()).unwrap_or_default()
}

fn to_kv(kv: &etcd_client::KeyValue) -> KeyValue {
    KeyValue {
        key: Bytes::copy_from_slice(kv.key()),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
        version: kv.version(),
        lease: kv.lease(),
    }
}

/// Like [`to_kv`], without copying key and value.
fn into_kv(kv: etcd_client::KeyValue) -> KeyValue {
    let (create_revision, mod_revision, version, lease) = (
        kv.create_revision(),
        kv.mod_revision(),
        kv.version(),
        kv.lease(),
    );
    let (key, value) = kv.into_key_value();
    KeyValue {
        key: key.into(),
        value: value.into(),
        create_revision,
        mod_revision,
        version,
        lease,
    }
}

fn to_event(e: &etcd_client::Event) -> Option<Event> {
    let kind = match e.event_type() {
        EventType::Put => EventKind::Put,
        EventType::Delete => EventKind::Delete,
    };
    let mut kv = to_kv(e.kv()?);
    if kind == EventKind::Delete {
        // etcd sends only key and mod_revision for a delete; make "every other field empty"
        // hold whatever it sends.
        kv = KeyValue {
            key: kv.key,
            mod_revision: kv.mod_revision,
            value: Bytes::new(),
            create_revision: 0,
            version: 0,
            lease: 0,
        };
    }
    Some(Event {
        kind,
        kv,
        prev: e.prev_kv().map(to_kv),
    })
}

fn put_options(lease: LeaseId) -> Option<PutOptions> {
    (lease != 0).then(|| PutOptions::new().with_lease(lease))
}

/// The key's state from the `Get` in a failed conditional transaction's `Else` branch.
fn else_get(resp: &TxnResponse) -> Option<KeyValue> {
    resp.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get.kvs().first().map(to_kv),
        _ => None,
    })
}

/// `NotFound` or `Conflict`, from a failed compare on `mod_revision == expected`.
fn compare_failed(key: &[u8], expected: Revision, resp: &TxnResponse) -> StoreError {
    let key = Bytes::copy_from_slice(key);
    match else_get(resp) {
        None => StoreError::NotFound { key },
        Some(current) => StoreError::Conflict {
            key,
            expected,
            current: Some(Box::new(current)),
        },
    }
}

/// The compares of an update or conditional delete: the key exists and was last written at
/// `expected`. (`Version > 0` keeps `expected == 0` from matching a missing key.)
fn unchanged_since(key: &[u8], expected: Revision) -> Vec<Compare> {
    vec![
        Compare::mod_revision(key, CompareOp::Equal, expected),
        Compare::version(key, CompareOp::Greater, 0),
    ]
}

impl EtcdStore {
    /// Map a write's error, given what was written.
    fn write_error(e: CallError, size: usize, lease: LeaseId) -> StoreError {
        match e {
            CallError::LeaseNotFound => StoreError::LeaseNotFound(lease),
            CallError::TooLarge => StoreError::TooLarge {
                size,
                limit: MAX_VALUE_BYTES,
            },
            other => other.into(),
        }
    }

    async fn delete_unconditionally(&self, key: &[u8]) -> Result<DeleteResponse> {
        let options = DeleteOptions::new().with_prev_key();
        let mut resp = self
            .inner
            .call(|client| {
                let (key, options) = (key.to_vec(), options.clone());
                async move { kv(&client).delete(key, Some(options)).await }
            })
            .await?;
        let revision = header_revision(resp.header());
        match resp.take_prev_kvs().into_iter().next() {
            Some(prev) => Ok(DeleteResponse {
                revision,
                prev: into_kv(prev),
            }),
            None => Err(StoreError::NotFound {
                key: Bytes::copy_from_slice(key),
            }),
        }
    }

    async fn delete_if_unchanged(&self, key: &[u8], expected: Revision) -> Result<DeleteResponse> {
        let txn = Txn::new()
            .when(unchanged_since(key, expected))
            .and_then([TxnOp::delete(
                key,
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(key, None)]);
        let resp = self.inner.txn(txn).await?;
        if !resp.succeeded() {
            return Err(compare_failed(key, expected, &resp));
        }
        let prev = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Delete(delete) => delete.prev_kvs().first().map(to_kv),
            _ => None,
        });
        let prev = prev.ok_or_else(|| StoreError::Unavailable("etcd omitted prev_kv".into()))?;
        Ok(DeleteResponse {
            revision: header_revision(resp.header()),
            prev,
        })
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &[u8], revision: Revision) -> Result<(Option<KeyValue>, Revision)> {
        let req = RangeRequest {
            start: Bytes::copy_from_slice(key),
            revision,
            ..Default::default()
        };
        let resp = self.inner.range(req).await?;
        Ok((resp.kvs.into_iter().next(), resp.revision))
    }

    async fn range(&self, req: RangeRequest) -> Result<RangeResponse> {
        self.inner.range(req).await
    }

    async fn create(&self, key: &[u8], value: Bytes, lease: LeaseId) -> Result<Revision> {
        check_size(key, &value)?;
        let size = key.len() + value.len();
        let txn = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value.to_vec(), put_options(lease))]);
        let resp = self
            .inner
            .txn(txn)
            .await
            .map_err(|e| Self::write_error(e, size, lease))?;
        if !resp.succeeded() {
            return Err(StoreError::AlreadyExists {
                key: Bytes::copy_from_slice(key),
            });
        }
        Ok(header_revision(resp.header()))
    }

    async fn update(
        &self,
        key: &[u8],
        value: Bytes,
        expected: Revision,
        lease: LeaseId,
    ) -> Result<Revision> {
        check_size(key, &value)?;
        let size = key.len() + value.len();
        let txn = Txn::new()
            .when(unchanged_since(key, expected))
            .and_then([TxnOp::put(key, value.to_vec(), put_options(lease))])
            .or_else([TxnOp::get(key, None)]);
        let resp = self
            .inner
            .txn(txn)
            .await
            .map_err(|e| Self::write_error(e, size, lease))?;
        if !resp.succeeded() {
            return Err(compare_failed(key, expected, &resp));
        }
        Ok(header_revision(resp.header()))
    }

    async fn delete(&self, key: &[u8], expected: Option<Revision>) -> Result<DeleteResponse> {
        match expected {
            None => self.delete_unconditionally(key).await,
            Some(expected) => self.delete_if_unchanged(key, expected).await,
        }
    }

    async fn watch(&self, req: WatchRequest) -> Result<Watcher> {
        let opened = self
            .inner
            .open_watch(&req, req.start_revision, false)
            .await?;
        let (watcher, tx, progress) = Watcher::new();
        match opened {
            Opened::Compacted(compacted) => {
                self.inner.note_compacted(compacted);
                let requested = req.start_revision;
                let _ = tx.try_send(Err(StoreError::Compacted {
                    requested,
                    compacted,
                }));
            }
            Opened::Stream(stream) => {
                // From "now", etcd watches from the creation revision + 1: resume there too.
                let next = if req.start_revision == 0 {
                    stream.revision + 1
                } else {
                    req.start_revision
                };
                let task = WatchTask::new(self.inner.clone(), req, tx, progress, next);
                tokio::spawn(task.run(stream));
            }
        }
        Ok(watcher)
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.compacted_revision().await
    }

    /// etcd leases have whole-second TTLs: round up, at least 1 s (etcd raises TTLs below its
    /// minimum, about 1.5 election timeouts, to that minimum).
    async fn grant_lease(&self, ttl: Duration) -> Result<LeaseId> {
        let seconds = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let seconds = i64::try_from(seconds.max(1)).unwrap_or(i64::MAX);
        let resp = self
            .inner
            .call(|client| async move { client.lease_client().grant(seconds, None).await })
            .await?;
        Ok(resp.id())
    }

    async fn keep_alive(&self, lease: LeaseId) -> Result<()> {
        let result = self
            .inner
            .call(|client| async move {
                // One round: the client sends a keepalive and reads etcd's answer; dropping
                // the keeper and stream ends the RPC.
                client.lease_client().keep_alive(lease).await.map(|_| ())
            })
            .await;
        result.map_err(|e| match e {
            CallError::LeaseNotFound => StoreError::LeaseNotFound(lease),
            other => other.into(),
        })
    }

    async fn revoke_lease(&self, lease: LeaseId) -> Result<()> {
        let result = self
            .inner
            .call(|client| async move { client.lease_client().revoke(lease).await })
            .await;
        result.map(|_| ()).map_err(|e| match e {
            CallError::LeaseNotFound => StoreError::LeaseNotFound(lease),
            other => other.into(),
        })
    }
}

/// Why [`WatchTask::pump`] returned.
enum Flow {
    /// The consumer is gone, or the watch ended with an error already sent.
    Stop,
    /// The stream broke; open a new one where it left off.
    Reopen(String),
}

/// Forwards one etcd watch stream into a [`Watcher`]'s channel, re-establishing the stream on
/// another member when it breaks.
struct WatchTask {
    inner: Arc<Inner>,
    req: WatchRequest,
    tx: mpsc::Sender<Result<WatchResponse>>,
    progress: Arc<Notify>,
    /// The first revision not yet delivered: where a re-established stream starts, so that the
    /// consumer sees neither a gap nor a duplicate.
    next_rev: Revision,
    /// The revision of the last response sent, so that notifications never go backwards.
    last_sent: Revision,
    /// A held-back answer to `RequestProgress` and when to release it (see [`PROGRESS_SETTLE`]).
    pending: Option<(Revision, Instant)>,
    /// When the last response was sent or progress was last asked for, for periodic progress.
    last_activity: Instant,
}

impl WatchTask {
    fn new(
        inner: Arc<Inner>,
        req: WatchRequest,
        tx: mpsc::Sender<Result<WatchResponse>>,
        progress: Arc<Notify>,
        next_rev: Revision,
    ) -> Self {
        WatchTask {
            inner,
            req,
            tx,
            progress,
            next_rev,
            last_sent: 0,
            pending: None,
            last_activity: Instant::now(),
        }
    }

    async fn run(mut self, mut stream: Box<LiveStream>) {
        loop {
            let reason = match self.pump(&mut stream).await {
                Flow::Stop => return,
                Flow::Reopen(reason) => reason,
            };
            let endpoint = &self.inner.endpoints.urls[stream.endpoint];
            tracing::debug!(%endpoint, %reason, next = self.next_rev, "etcd watch broke");
            self.inner.endpoints.failed(stream.endpoint);
            match self.reopen().await {
                Some(reopened) => stream = reopened,
                None => return,
            }
        }
    }

    /// Forward responses and progress requests until the stream breaks or the consumer leaves.
    async fn pump(&mut self, stream: &mut LiveStream) -> Flow {
        let LiveStream {
            sender, responses, ..
        } = stream;
        let (tx, progress) = (self.tx.clone(), self.progress.clone());
        loop {
            let wake = self.next_wake();
            let flow = tokio::select! {
                _ = tx.closed() => Some(Flow::Stop),
                _ = progress.notified() => self.ask_progress(sender).await,
                _ = sleep_until(wake) => self.on_timer(sender).await,
                message = responses.message() => match message {
                    Ok(Some(resp)) => self.on_response(resp).await,
                    Ok(None) => Some(Flow::Reopen("watch stream ended".into())),
                    Err(e) => Some(Flow::Reopen(e.to_string())),
                },
            };
            if let Some(flow) = flow {
                return flow;
            }
        }
    }

    /// The next time a timer needs attention: a held-back progress notification, or the
    /// periodic progress interval (an hour away when there is neither).
    fn next_wake(&self) -> Instant {
        let far = Instant::now() + Duration::from_secs(3600);
        let periodic = self
            .req
            .progress_interval
            .map_or(far, |every| self.last_activity + every);
        let pending = self.pending.map_or(far, |(_, at)| at);
        periodic.min(pending)
    }

    async fn ask_progress(&mut self, sender: &mut WatchRequestSender) -> Option<Flow> {
        self.last_activity = Instant::now();
        match sender.request_progress().await {
            Ok(()) => None,
            Err(e) => Some(Flow::Reopen(e.to_string())),
        }
    }

    async fn on_timer(&mut self, sender: &mut WatchRequestSender) -> Option<Flow> {
        let now = Instant::now();
        if let Some((revision, at)) = self.pending {
            if now >= at {
                self.pending = None;
                if !self.send_progress(revision).await {
                    return Some(Flow::Stop);
                }
            }
        }
        match self.req.progress_interval {
            Some(every) if now >= self.last_activity + every => self.ask_progress(sender).await,
            _ => None,
        }
    }

    async fn on_response(&mut self, resp: etcd_client::WatchResponse) -> Option<Flow> {
        if resp.canceled() {
            return Some(self.on_canceled(&resp).await);
        }
        // The answer to creating the watch is not a progress notification.
        if resp.created() {
            return None;
        }
        let revision = header_revision(resp.header());
        if resp.events().is_empty() {
            return self.on_progress(revision, resp.watch_id()).await;
        }
        let events: Vec<Event> = resp
            .events()
            .iter()
            .filter_map(to_event)
            .filter(|e| e.revision() >= self.next_rev)
            .collect();
        let last = events.last()?.revision();
        if !self.send(Ok(WatchResponse { events, revision })).await {
            return Some(Flow::Stop);
        }
        self.next_rev = last + 1;
        match self.pending {
            Some((held, _)) if held <= last => {
                self.pending = None;
                (!self.send_progress(held).await).then_some(Flow::Stop)
            }
            // Events are still arriving: keep waiting for the ones the notification covers.
            Some((held, _)) => {
                self.pending = Some((held, Instant::now() + PROGRESS_SETTLE));
                None
            }
            None => None,
        }
    }

    async fn on_canceled(&mut self, resp: &etcd_client::WatchResponse) -> Flow {
        let compacted = resp.compact_revision();
        if compacted == 0 {
            return Flow::Reopen(format!("watch canceled: {}", resp.cancel_reason()));
        }
        self.inner.note_compacted(compacted);
        let requested = self.next_rev;
        self.send(Err(StoreError::Compacted {
            requested,
            compacted,
        }))
        .await;
        Flow::Stop
    }

    /// A response without events. etcd answers `RequestProgress` on the stream as a whole
    /// (watch id -1), possibly ahead of queued events; its periodic notifications for this
    /// watcher are ordered with the events and pass straight through.
    async fn on_progress(&mut self, revision: Revision, watch_id: i64) -> Option<Flow> {
        let delivered = self.next_rev - 1;
        if watch_id == -1 && revision > delivered {
            let held = self.pending.map_or(revision, |(r, _)| r.max(revision));
            self.pending = Some((held, Instant::now() + PROGRESS_SETTLE));
            return None;
        }
        if watch_id != -1 {
            // Ordered with events: everything up to `revision` was delivered.
            self.next_rev = self.next_rev.max(revision + 1);
        }
        (!self.send_progress(revision).await).then_some(Flow::Stop)
    }

    /// Send a progress notification for at least `revision`, never below what was sent.
    async fn send_progress(&mut self, revision: Revision) -> bool {
        let revision = revision.max(self.next_rev - 1).max(self.last_sent);
        self.send(Ok(WatchResponse {
            events: Vec::new(),
            revision,
        }))
        .await
    }

    /// Send to the consumer; false when it is gone.
    async fn send(&mut self, item: Result<WatchResponse>) -> bool {
        if let Ok(resp) = &item {
            self.last_sent = self.last_sent.max(resp.revision);
        }
        self.last_activity = Instant::now();
        self.tx.send(item).await.is_ok()
    }

    /// Open a new stream from `next_rev` (with failover, within the request timeout). On
    /// failure, tell the consumer why and return None.
    async fn reopen(&mut self) -> Option<Box<LiveStream>> {
        if self.tx.is_closed() {
            return None;
        }
        let opened = self.inner.open_watch(&self.req, self.next_rev, false).await;
        let error = match opened {
            Ok(Opened::Stream(mut stream)) => {
                // A held-back notification may have been about the old stream's queue: ask the
                // new stream instead.
                if self.pending.take().is_some() {
                    let _ = stream.sender.request_progress().await;
                }
                return Some(stream);
            }
            Ok(Opened::Compacted(compacted)) => {
                self.inner.note_compacted(compacted);
                StoreError::Compacted {
                    requested: self.next_rev,
                    compacted,
                }
            }
            Err(e) => e.into(),
        };
        self.send(Err(error)).await;
        None
    }
}
