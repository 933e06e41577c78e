//! The generic registry: create, get, list, update, delete and watch of one resource over the
//! store, with a small per-kind [`Strategy`] (Kubernetes' `registry/generic/registry/store.go`).
//!
//! # Versions
//!
//! A registry serves one group/version ([`Registry::info`]) and stores objects in their storage
//! version ([`Registry::storage`], the version of its [`WatchCache`]). The two differ for
//! events.k8s.io/v1 events (stored as core/v1) and autoscaling/v1 autoscalers (stored as
//! autoscaling/v2); see `capstan_api::convert`. For every other resource they are the same and
//! nothing here converts or re-serializes anything.
//!
//! Everything a registry hands out is in its own version: [`Written`] objects, list pages and
//! (through [`Registry::wire`]) cached objects. Everything it takes is in its own version too:
//! the body of a create, the object an update function returns from the current object in the
//! registry's version (a patch applies to what the client would read), as Kubernetes' handlers
//! work on the request version. A write then goes:
//!
//! 1. the request version's defaults (Kubernetes defaults a body as it decodes it);
//! 2. into the storage version (`capstan_api::convert::to_storage`, Kubernetes' conversion to
//!    the internal version, which the storage version stands for here);
//! 3. the storage version's defaults, the strategy's preparation and the system fields, on the
//!    storage form (what Kubernetes' strategies do to the internal object: e.g. a status update
//!    keeps the stored spec, the new status coming from the converted body);
//! 4. validation of the object about to be stored, with the request version's rules. Kubernetes
//!    validates the internal object, passing the request version where rules differ (events).
//!    capstan's validators are registered per group and read that group's field names: within
//!    one group (autoscaling/v1 over v2) the validator reads the storage form, which is exactly
//!    what Kubernetes validates; across groups (events.k8s.io/v1 over core/v1) it is given the
//!    storage form converted back into the request version, a pure renaming of it, so its
//!    strict events.k8s.io rules apply (and report Kubernetes' internal field names);
//! 5. the write, of the storage form.

pub mod certificates;
pub mod service;
pub mod strategy;

use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use capstan_api::catalogue::ResourceInfo;
use capstan_api::meta;
use capstan_store::{RangeRequest, Store, StoreError};
use serde_json::{json, Value};

use crate::admission::{Attributes, Chain, Operation};
use crate::auth::User;
use crate::codec;
use crate::error::{ApiError, ApiResult, FieldError};
use crate::filter::Filter;
use crate::objects::Objects;
use crate::watch_cache::{CachedObject, View, WatchCache};
use capstan_api::meta::At as _;
pub use strategy::{DefaultStrategy, Strategy};

/// Options of a write request.
#[derive(Debug, Clone, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    /// The field manager of a client's write (its `fieldManager`, or its User-Agent's
    /// product): the fields it sets are recorded as its own in `metadata.managedFields`.
    pub field_manager: String,
    /// The object already carries the managedFields of this write (a server-side apply).
    pub fields_tracked: bool,
    /// The client that asked; writes with a user pass admission, the server's own do not.
    pub user: Option<Arc<User>>,
}

/// DeleteOptions of a delete request.
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
    pub propagation: Option<String>,
    pub dry_run: bool,
    /// The client that asked (admission runs for it).
    pub user: Option<Arc<User>>,
}

/// An object as written: wire JSON (with resourceVersion) and its parsed form, in the version
/// of the registry that wrote it.
#[derive(Debug, Clone)]
pub struct Written {
    pub json: Bytes,
    pub value: Value,
    pub rev: i64,
    /// The stored form, when the registry's version is not the storage version (tables and
    /// metadata are made from it, as Kubernetes makes them from the internal object).
    pub stored: Option<Value>,
}

impl Written {
    fn new(value: Value, stored: &[u8], rev: i64) -> Self {
        let mut value = value;
        if rev > 0 {
            meta::set_meta_str(&mut value, "resourceVersion", &rev.to_string());
        }
        Written {
            json: if rev > 0 {
                codec::with_resource_version(stored, rev)
            } else {
                Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
            },
            value,
            rev,
            stored: None,
        }
    }

    /// The object in its storage version.
    pub fn storage_value(&self) -> &Value {
        self.stored.as_ref().unwrap_or(&self.value)
    }
}

/// An object's key: `prefix` then `ns/name`, or `name` without a namespace (joined by hand:
/// every request makes one, and `format!` costs several times as much).
pub(crate) fn object_key(prefix: &str, ns: Option<&str>, name: &str) -> String {
    let ns_len = ns.map_or(0, |n| n.len() + 1);
    let mut key = String::with_capacity(prefix.len() + ns_len + name.len());
    key.push_str(prefix);
    if let Some(ns) = ns {
        key.push_str(ns);
        key.push('/');
    }
    key.push_str(name);
    key
}

/// What a delete did.
#[derive(Debug)]
pub enum Deleted {
    /// The object is gone; here is its last state.
    Now(Written),
    /// The object is being deleted (finalizers or a grace period); here is its new state.
    Pending(Written),
}

/// One page of a list.
#[derive(Debug, Default)]
pub struct ListPage {
    /// The objects' wire JSON in the registry's version.
    pub items: Vec<Bytes>,
    /// The same objects in their storage version (the same bytes when that is the registry's).
    pub stored: Vec<Bytes>,
    pub rev: i64,
    pub continue_token: Option<String>,
    pub remaining: Option<i64>,
}

/// The generic store of one resource.
pub struct Registry {
    /// The group/version served.
    pub info: &'static ResourceInfo,
    /// The version objects are stored in (the cache's).
    pub storage: &'static ResourceInfo,
    pub strategy: Arc<dyn Strategy>,
    pub store: Arc<dyn Store>,
    pub cache: Arc<WatchCache>,
    prefix: String,
    /// How this version reads the stored objects; `None` when it is the storage version.
    view: Option<View>,
    /// Admission, set once the server that owns the registry exists.
    admission: OnceLock<Admission>,
}

/// The admission chain and what its plugins read.
pub struct Admission {
    pub chain: Chain,
    pub objects: Weak<dyn Objects>,
}

/// Set `obj.apiVersion` to `info`'s (a custom resource read or stored in another version).
pub fn set_api_version(obj: &mut Value, info: &ResourceInfo) {
    if let Some(map) = obj.as_object_mut() {
        let av = info.api_version();
        if map.get("apiVersion").and_then(Value::as_str) != Some(av.as_str()) {
            map.insert("apiVersion".into(), Value::String(av));
        }
    }
}

/// The group of CustomResourceDefinitions.
pub const CRD_GROUP: &str = "apiextensions.k8s.io";
/// The finalizer a deleted CustomResourceDefinition carries until its objects are gone.
pub const CRD_CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// How many times an unconditional write retries after losing a race.
const MAX_RETRIES: usize = 32;

impl Registry {
    pub fn new(
        info: &'static ResourceInfo,
        strategy: Arc<dyn Strategy>,
        store: Arc<dyn Store>,
        cache: Arc<WatchCache>,
    ) -> Self {
        let view = cache.view_of(info);
        Registry {
            info,
            storage: cache.info,
            strategy,
            store,
            cache,
            prefix: Self::prefix_of(info),
            view,
            admission: OnceLock::new(),
        }
    }

    /// Install the admission chain (once).
    pub fn set_admission(&self, admission: Admission) {
        let _ = self.admission.set(admission);
    }

    /// Run both admission phases over a write of `obj` (storage version) replacing `old`.
    /// Mutation happens in place; `Ok` means every plugin accepted.
    async fn admit(
        &self,
        (user, dry_run): (Option<&Arc<User>>, bool),
        operation: Operation,
        subresource: &str,
        obj: Option<&mut Value>,
        old: Option<&Value>,
        validate: impl FnOnce(&Value) -> Vec<FieldError>,
    ) -> ApiResult<()> {
        let (Some(user), Some(adm)) = (user, self.admission.get()) else {
            if let Some(o) = obj {
                let errs = validate(o);
                if !errs.is_empty() {
                    return Err(ApiError::invalid(self.info, meta::name(o), errs));
                }
            }
            return Ok(());
        };
        let Some(objects) = adm.objects.upgrade() else {
            return Err(ApiError::internal("the server is shutting down"));
        };
        let name_of = |o: Option<&Value>| o.map(|v| meta::name(v).to_string()).unwrap_or_default();
        let ns_of = |o: Option<&Value>| {
            o.map(|v| meta::namespace(v).to_string())
                .unwrap_or_default()
        };
        let (name, namespace) = match (&obj, old) {
            (Some(o), _) => (name_of(Some(o)), ns_of(Some(o))),
            (None, o) => (name_of(o), ns_of(o)),
        };
        let attrs = Attributes {
            user,
            operation,
            info: self.storage,
            subresource,
            namespace: &namespace,
            name: &name,
            dry_run,
            objects: objects.as_ref(),
        };
        match obj {
            Some(o) => {
                adm.chain.admit(&attrs, Some(&mut *o), old).await?;
                let errs = validate(o);
                if !errs.is_empty() {
                    return Err(ApiError::invalid(self.info, &name, errs));
                }
                adm.chain.validate(&attrs, Some(&*o), old).await
            }
            None => {
                adm.chain.admit(&attrs, None, old).await?;
                adm.chain.validate(&attrs, None, old).await
            }
        }
    }

    /// Whether this registry's version differs from the storage version.
    pub fn converts(&self) -> bool {
        self.view.is_some()
    }

    /// How this registry's version reads cached objects (`None`: as they are stored).
    pub fn view(&self) -> Option<View> {
        self.view
    }

    /// A cached object's wire JSON in this registry's version.
    pub fn wire(&self, obj: &CachedObject) -> Bytes {
        obj.wire(self.view)
    }

    /// A stored object (parsed) in this registry's version.
    pub fn from_storage(&self, mut obj: Value) -> Value {
        if self.info.custom {
            // Custom resources convert with the None strategy: only apiVersion changes.
            set_api_version(&mut obj, self.info);
            return obj;
        }
        match self.view {
            None => obj,
            Some(v) => {
                capstan_api::convert::from_storage(v.info.group, v.info.version, v.info.kind, obj)
            }
        }
    }

    /// An object of this registry's version in the storage version: with its request-version
    /// defaults first when it converts (Kubernetes defaults a body as it decodes it; the
    /// storage version's defaults come with the preparation of the write).
    fn to_storage(&self, mut obj: Value) -> Value {
        let i = self.info;
        if i.custom {
            self.strategy.extra_defaults(&mut obj);
            set_api_version(&mut obj, self.storage);
            return obj;
        }
        if self.view.is_some() {
            capstan_api::defaults::apply(i.group, i.kind, &mut obj);
        }
        capstan_api::convert::to_storage(i.group, i.version, i.kind, obj)
    }

    /// `w` (in the storage version) as this registry's clients read it.
    fn present(&self, w: Written) -> Written {
        if self.view.is_none() {
            if self.info.custom && meta::type_meta(&w.value).0 != self.info.api_version() {
                // Stored before the definition's storage version changed.
                let mut value = w.value;
                set_api_version(&mut value, self.info);
                return Written {
                    json: Bytes::from(serde_json::to_vec(&value).unwrap_or_default()),
                    value,
                    rev: w.rev,
                    stored: None,
                };
            }
            return w;
        }
        let value = self.from_storage(w.value.clone());
        Written {
            json: Bytes::from(serde_json::to_vec(&value).unwrap_or_default()),
            value,
            rev: w.rev,
            stored: Some(w.value),
        }
    }

    /// Validation of a new object in its storage form, with this version's rules (see the
    /// module documentation).
    fn validate_new(&self, obj: &Value) -> Vec<FieldError> {
        if self.view.is_none() || self.info.group == self.storage.group {
            return self.strategy.validate(obj);
        }
        self.strategy.validate(&self.from_storage(obj.clone()))
    }

    /// Validation of an update in storage form, with this version's rules.
    fn validate_changed(&self, new: &Value, old: &Value, subresource: &str) -> Vec<FieldError> {
        if subresource == "approval" {
            return self.strategy.validate_approval_update(new, old);
        }
        if subresource == "status" && self.info.custom {
            return self.strategy.validate_status_update(new, old);
        }
        if self.view.is_none() || self.info.group == self.storage.group {
            if subresource == "status" {
                return self.strategy.validate_status_update(new, old);
            }
            return self.strategy.validate_update(new, old);
        }
        self.strategy.validate_update(
            &self.from_storage(new.clone()),
            &self.from_storage(old.clone()),
        )
    }

    /// `/registry/<storage>/`.
    pub fn prefix_of(info: &ResourceInfo) -> String {
        format!("/registry/{}/", info.storage)
    }

    fn key(&self, ns: &str, name: &str) -> String {
        object_key(&self.prefix, self.info.namespaced.then_some(ns), name)
    }

    fn store_err(&self, name: &str) -> impl Fn(StoreError) -> ApiError + '_ {
        let name = name.to_string();
        move |e| ApiError::from_store(e, self.info, &name)
    }

    /// The stored object, parsed, with its revision.
    pub async fn get(&self, ns: &str, name: &str) -> ApiResult<Written> {
        let kv = self.current(&self.key(ns, name), name).await?;
        let value = codec::decode_stored(&kv.value, kv.mod_revision)?;
        Ok(self.present(Written {
            json: codec::with_resource_version(&kv.value, kv.mod_revision),
            value,
            rev: kv.mod_revision,
            stored: None,
        }))
    }

    /// Create `obj` (in this registry's version) in namespace `ns` (already checked against
    /// the URL by the caller).
    pub async fn create(&self, ns: &str, obj: Value, opts: &WriteOptions) -> ApiResult<Written> {
        let obj = self.to_storage(obj);
        self.create_stored(ns, obj, opts)
            .await
            .map(|w| self.present(w))
    }

    /// Create `obj`, in its storage version.
    async fn create_stored(
        &self,
        ns: &str,
        mut obj: Value,
        opts: &WriteOptions,
    ) -> ApiResult<Written> {
        if !meta::resource_version(&obj).is_empty() {
            return Err(ApiError::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        if self.info.namespaced {
            meta::set_meta_str(&mut obj, "namespace", ns);
        } else {
            meta::remove_meta(&mut obj, "namespace");
        }
        let generate =
            meta::name(&obj).is_empty() && !meta::meta_str(&obj, "generateName").is_empty();
        for attempt in 0.. {
            if generate {
                let name = generate_name(meta::meta_str(&obj, "generateName"));
                meta::set_meta_str(&mut obj, "name", &name);
            }
            let name = meta::name(&obj).to_string();
            if name.is_empty() {
                return Err(ApiError::invalid(
                    self.info,
                    "",
                    vec![FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ));
            }
            self.prepare_create(&mut obj);
            self.track_fields(None, &mut obj, opts, "");
            self.admit(
                (opts.user.as_ref(), opts.dry_run),
                Operation::Create,
                "",
                Some(&mut obj),
                None,
                |o| self.validate_new(o),
            )
            .await?;
            self.strategy.allocate(&mut obj, None)?;
            drop_empty_metadata(&mut obj);
            let stored = codec::encode_for_store(&obj);
            if opts.dry_run {
                self.strategy.release(&obj);
                return Ok(Written::new(obj, &stored, 0));
            }
            let key = self.key(ns, &name);
            self.cache.prepare(&key, &obj, &stored);
            match self.store.create(key.as_bytes(), stored.clone(), 0).await {
                Ok(rev) => return Ok(Written::new(obj, &stored, rev)),
                Err(e) => {
                    self.cache.withdraw(&key, &stored);
                    self.strategy.release(&obj);
                    if matches!(e, StoreError::AlreadyExists { .. }) && generate && attempt < 8 {
                        continue;
                    }
                    return Err(ApiError::from_store(e, self.info, &name));
                }
            }
        }
        unreachable!("the loop returns")
    }

    /// System fields of a new object (uid, creationTimestamp, generation) and the strategy's
    /// preparation.
    fn prepare_create(&self, obj: &mut Value) {
        self.strategy.prepare_for_create(obj);
        let md = meta::metadata_mut(obj);
        md.insert(
            "uid".into(),
            Value::String(uuid::Uuid::new_v4().to_string()),
        );
        md.insert(
            "creationTimestamp".into(),
            Value::String(meta::format_time(SystemTime::now())),
        );
        for f in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "generation",
        ] {
            md.remove(f);
        }
        if self.strategy.tracks_generation() {
            md.insert("generation".into(), json!(1));
        }
        let s = self.storage;
        capstan_api::defaults::prepare_for_create(s.group, s.kind, obj);
        capstan_api::defaults::apply(s.group, s.kind, obj);
        self.strategy.extra_defaults(obj);
    }

    /// Replace an object (PUT). `new` carries the client's resourceVersion, if any.
    pub async fn update(
        &self,
        ns: &str,
        name: &str,
        subresource: &str,
        new: Value,
        opts: &WriteOptions,
    ) -> ApiResult<(Written, bool)> {
        let precondition = meta::resource_version(&new).to_string();
        let mut new = Some(new);
        let result = self
            .update_with(ns, name, subresource, opts, |_old| {
                Ok(new.clone().expect("set"))
            })
            .await;
        match result {
            Err(e)
                if e.code == 404
                    && subresource.is_empty()
                    && self.strategy.allow_create_on_update() =>
            {
                let mut obj = new.take().expect("set");
                meta::remove_meta(&mut obj, "resourceVersion");
                let _ = precondition;
                self.create(ns, obj, opts).await.map(|w| (w, true))
            }
            other => other.map(|w| (w, false)),
        }
    }

    /// Read-modify-write with retries on conflict (Kubernetes' GuaranteedUpdate): `f` maps the
    /// current object to the desired one, both in this registry's version. A resourceVersion in
    /// the result is a precondition.
    pub async fn update_with(
        &self,
        ns: &str,
        name: &str,
        subresource: &str,
        opts: &WriteOptions,
        mut f: impl FnMut(&Value) -> ApiResult<Value>,
    ) -> ApiResult<Written> {
        self.guaranteed_update(ns, name, subresource, opts, |old| {
            let next = f(&old)?;
            Ok((next, Some(old)))
        })
        .await
    }

    /// A pod's binding: `f` edits the pod as stored. Nothing after it needs the pod as it was
    /// (a binding skips the update checks, field tracking and admission), so it is edited in
    /// place rather than copied.
    pub async fn bind_with(
        &self,
        ns: &str,
        name: &str,
        opts: &WriteOptions,
        mut f: impl FnMut(&mut Value) -> ApiResult<()>,
    ) -> ApiResult<Written> {
        self.guaranteed_update(ns, name, "binding", opts, |mut obj| {
            f(&mut obj)?;
            Ok((obj, None))
        })
        .await
    }

    /// Read-modify-write of the stored bytes themselves, retried on conflict: `f` gets the
    /// object as stored and returns its new stored form, or None to leave it (then so does
    /// this, and the caller takes the general path). Only for built-in resources served in
    /// their storage version, whose stored form clients see; the new object passes no
    /// admission, validation or field tracking, so `f` must keep it valid (a binding).
    /// `changes` are the selectable fields `f` sets (and all it changes of what the watch
    /// cache indexes), so that the cache copies its entry instead of parsing the new bytes.
    pub async fn update_stored(
        &self,
        ns: &str,
        name: &str,
        changes: &[(&str, &str)],
        mut f: impl FnMut(&[u8]) -> Option<Vec<u8>>,
    ) -> ApiResult<Option<i64>> {
        if self.view.is_some() || self.info.custom {
            return Ok(None);
        }
        let key = self.key(ns, name);
        for _ in 0..MAX_RETRIES {
            let kv = self.current(&key, name).await?;
            let Some(next) = f(&kv.value) else {
                return Ok(None);
            };
            let next = codec::exact(next);
            self.cache
                .prepare_changed(&key, kv.mod_revision, &next, changes);
            match self
                .store
                .update(key.as_bytes(), next.clone(), kv.mod_revision, 0)
                .await
            {
                Ok(rev) => return Ok(Some(rev)),
                Err(e) => {
                    self.cache.withdraw(&key, &next);
                    match e {
                        StoreError::Conflict { .. } => continue,
                        e => return Err(ApiError::from_store(e, self.info, name)),
                    }
                }
            }
        }
        Err(ApiError::modified(self.info, name))
    }

    /// The stored object under `key` (whose name is `name`), or NotFound.
    async fn current(&self, key: &str, name: &str) -> ApiResult<capstan_store::KeyValue> {
        let (kv, _) = self
            .store
            .get(key.as_bytes(), 0)
            .await
            .map_err(self.store_err(name))?;
        kv.ok_or_else(|| ApiError::not_found(self.info, name))
    }

    /// The loop of [`Registry::update_with`]: `f` takes the current object (in this registry's
    /// version) and returns the desired one and, unless this is a binding, the current one back.
    async fn guaranteed_update(
        &self,
        ns: &str,
        name: &str,
        subresource: &str,
        opts: &WriteOptions,
        mut f: impl FnMut(Value) -> ApiResult<(Value, Option<Value>)>,
    ) -> ApiResult<Written> {
        let key = self.key(ns, name);
        for _ in 0..MAX_RETRIES {
            let kv = self.current(&key, name).await?;
            let mut old = codec::decode_stored(&kv.value, kv.mod_revision)?;
            if self.info.custom {
                set_api_version(&mut old, self.storage);
            }
            let (next, old) = match self.view {
                None => f(old)?,
                Some(_) => (f(self.from_storage(old.clone()))?.0, Some(old)),
            };
            let wanted_rv = meta::resource_version(&next).to_string();
            if !wanted_rv.is_empty() && wanted_rv != kv.mod_revision.to_string() {
                return Err(ApiError::modified(self.info, name));
            }
            let mut next = self.to_storage(next);
            // A binding is the scheduler's assignment, not a pod update: it skips the checks
            // that forbid changing a pod's spec (and admission saw the Binding itself); only a
            // binding comes without the old object.
            if let Some(old) = old.as_ref().filter(|_| subresource != "binding") {
                self.prepare_update(&mut next, old, subresource);
                self.track_fields(Some(old), &mut next, opts, subresource);
                self.admit(
                    (opts.user.as_ref(), opts.dry_run),
                    Operation::Update,
                    subresource,
                    Some(&mut next),
                    Some(old),
                    |n| self.validate_changed(n, old, subresource),
                )
                .await?;
                if subresource.is_empty() {
                    self.strategy.allocate(&mut next, Some(old))?;
                }
            }
            drop_empty_metadata(&mut next);
            let stored = codec::encode_for_store(&next);
            if stored == kv.value {
                // Nothing changed: Kubernetes does not write (the resourceVersion stays).
                return Ok(self.present(Written::new(next, &stored, kv.mod_revision)));
            }
            if opts.dry_run {
                return Ok(self.present(Written::new(next, &stored, 0)));
            }
            if meta::deletion_timestamp(&next).is_some()
                && meta::finalizers(&next).is_empty()
                && delete_during_update(self.info, &next)
            {
                // The last finalizer is gone: the object goes away now.
                match self
                    .store
                    .delete(key.as_bytes(), Some(kv.mod_revision))
                    .await
                {
                    Ok(d) => return Ok(self.present(Written::new(next, &stored, d.revision))),
                    // Someone wrote in between: recompute from the new state; a precondition the
                    // caller set is checked against it at the top of the loop.
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(ApiError::from_store(e, self.info, name)),
                }
            }
            self.cache.prepare(&key, &next, &stored);
            match self
                .store
                .update(key.as_bytes(), stored.clone(), kv.mod_revision, 0)
                .await
            {
                Ok(rev) => return Ok(self.present(Written::new(next, &stored, rev))),
                Err(e) => {
                    self.cache.withdraw(&key, &stored);
                    if matches!(e, StoreError::Conflict { .. }) {
                        continue;
                    }
                    return Err(ApiError::from_store(e, self.info, name));
                }
            }
        }
        Err(ApiError::modified(self.info, name))
    }

    /// The schema writes are merged and owned by: the definition's for custom resources,
    /// else the built-in kind's in the storage version.
    pub fn schema(&self) -> Option<capstan_api::schema::SchemaRef<'_>> {
        if let Some(s) = self.strategy.schema() {
            return Some(s);
        }
        let s = self.storage;
        capstan_api::schema::Schemas::builtin().for_kind(s.group, s.version, s.kind)
    }

    /// The fields a write may not own: a main-resource write does not set the status
    /// subresource's fields (Kubernetes' reset fields).
    pub fn ignored_fields(&self, subresource: &str) -> capstan_api::apply::FieldSet {
        use capstan_api::apply::{FieldSet, PathElement};
        let field = |f: &str| vec![PathElement::field(f)];
        let paths = |p: &[&[&str]]| {
            let p: Vec<Vec<PathElement>> = p
                .iter()
                .map(|p| p.iter().map(|f| PathElement::field(*f)).collect())
                .collect();
            FieldSet::from_paths(p.iter().map(Vec::as_slice))
        };
        if certificates::is_csr(self.storage.group, self.storage.kind) {
            // Kubernetes' CSR subresource strategies: the status keeps the approval
            // conditions, the approval keeps the certificate.
            match subresource {
                "status" => return paths(&[&["spec"], &["status", "conditions"]]),
                "approval" => return paths(&[&["spec"], &["status", "certificate"]]),
                _ => {}
            }
        }
        match subresource {
            "" if self.strategy.has_status() => {
                FieldSet::from_paths([field("status")].iter().map(Vec::as_slice))
            }
            "status" => FieldSet::from_paths([field("spec")].iter().map(Vec::as_slice)),
            _ => FieldSet::default(),
        }
    }

    /// Record what a client's create or update changed as its field manager's (not for the
    /// server's own writes, nor for applies, which recorded it already).
    fn track_fields(&self, old: Option<&Value>, obj: &mut Value, opts: &WriteOptions, sub: &str) {
        if opts.user.is_none() || opts.fields_tracked {
            return;
        }
        let now = meta::format_time(SystemTime::now());
        let api_version = self.info.api_version();
        let req = capstan_api::apply::Request {
            manager: &opts.field_manager,
            api_version: &api_version,
            kind: self.info.kind,
            subresource: sub,
            now: &now,
            force: false,
        };
        if let Err(e) =
            capstan_api::apply::update(self.schema(), old, obj, &req, &self.ignored_fields(sub))
        {
            tracing::debug!(error = %e, "managed fields not updated");
        }
    }

    /// Keep what clients may not change, apply the strategy, bump the generation.
    fn prepare_update(&self, next: &mut Value, old: &Value, subresource: &str) {
        let csr = certificates::is_csr(self.storage.group, self.storage.kind);
        if subresource == "status" || (subresource == "approval" && csr) {
            // The object as it was with the written status — and, for built-in kinds, the
            // written metadata (their status strategies reset the spec, not the metadata: a
            // controller sets annotations with its status, the deployment controller's
            // revision); a custom resource's status write changes nothing but the status.
            // Every other member comes from `old`, copied only where it differs.
            let approval = (subresource == "approval")
                .then(|| certificates::approval_status(next.get("status"), old));
            let custom = self.info.custom;
            let written = |k: &str| k == "status" || (k == "metadata" && !custom);
            if let (Some(map), Some(old_map)) = (next.as_object_mut(), old.as_object()) {
                map.retain(|k, _| written(k) || old_map.contains_key(k));
                for (k, v) in old_map {
                    if !written(k) && map.get(k) != Some(v) {
                        map.insert(k.clone(), v.clone());
                    }
                }
                if let Some(status) = approval {
                    map.insert("status".into(), status);
                }
                if !custom && !map.get("metadata").is_some_and(Value::is_object) {
                    match old_map.get("metadata") {
                        Some(m) => map.insert("metadata".into(), m.clone()),
                        None => map.remove("metadata"),
                    };
                }
            } else {
                *next = old.clone();
            }
            if !custom {
                let mut keep = vec![
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                    "selfLink",
                ];
                match self.storage.kind {
                    // Kubernetes' deployment status strategy keeps the labels.
                    "Deployment" => keep.push("labels"),
                    // Kubelets write pods/status; they never change owners.
                    "Pod" => keep.push("ownerReferences"),
                    _ => {}
                }
                keep_from_old(next, old, &keep);
            }
            strategy::prepare_for_status_update(self.storage.kind, next, old);
            if csr {
                certificates::prepare(subresource, next, old);
            }
            capstan_api::defaults::apply(self.storage.group, self.storage.kind, next);
            self.strategy.extra_defaults(next);
            return;
        }
        self.strategy.prepare_for_update(next, old);
        let s = self.storage;
        // A namespace's finalize changes `spec.finalizers`, which other updates keep.
        if subresource != "finalize" {
            capstan_api::defaults::prepare_for_update(s.group, s.kind, next, old);
        }
        capstan_api::defaults::apply(s.group, s.kind, next);
        self.strategy.extra_defaults(next);
        keep_from_old(
            next,
            old,
            &[
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ],
        );
        meta::metadata_mut(next).remove("selfLink");
        if self.strategy.tracks_generation() && self.strategy.generation_changes(old, next) {
            let g = meta::generation(old) + 1;
            meta::metadata_mut(next).insert("generation".into(), json!(g));
        }
    }

    /// Delete one object, honouring preconditions, finalizers, propagation and pod grace.
    pub async fn delete(&self, ns: &str, name: &str, opts: &DeleteOptions) -> ApiResult<Deleted> {
        Ok(match self.delete_stored(ns, name, opts).await? {
            Deleted::Now(w) => Deleted::Now(self.present(w)),
            Deleted::Pending(w) => Deleted::Pending(self.present(w)),
        })
    }

    async fn delete_stored(
        &self,
        ns: &str,
        name: &str,
        opts: &DeleteOptions,
    ) -> ApiResult<Deleted> {
        let key = self.key(ns, name);
        for _ in 0..MAX_RETRIES {
            let kv = self.current(&key, name).await?;
            let old = codec::decode_stored(&kv.value, kv.mod_revision)?;
            self.check_preconditions(&old, name, opts)?;
            self.admit(
                (opts.user.as_ref(), opts.dry_run),
                Operation::Delete,
                "",
                None,
                Some(&old),
                |_| Vec::new(),
            )
            .await?;
            let mut next = old.clone();
            let plan = self.plan_delete(&mut next, opts);
            if opts.dry_run {
                let stored = codec::encode_for_store(&next);
                return Ok(if plan {
                    Deleted::Pending(Written::new(next, &stored, 0))
                } else {
                    Deleted::Now(Written::new(old, &kv.value, 0))
                });
            }
            if plan {
                let stored = codec::encode_for_store(&next);
                if stored == kv.value {
                    return Ok(Deleted::Pending(Written::new(
                        next,
                        &stored,
                        kv.mod_revision,
                    )));
                }
                match self
                    .store
                    .update(key.as_bytes(), stored.clone(), kv.mod_revision, 0)
                    .await
                {
                    Ok(rev) => return Ok(Deleted::Pending(Written::new(next, &stored, rev))),
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(e) => return Err(ApiError::from_store(e, self.info, name)),
                }
            }
            match self
                .store
                .delete(key.as_bytes(), Some(kv.mod_revision))
                .await
            {
                Ok(d) => {
                    self.strategy.release(&old);
                    return Ok(Deleted::Now(Written::new(old, &kv.value, d.revision)));
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(ApiError::from_store(e, self.info, name)),
            }
        }
        Err(ApiError::modified(self.info, name))
    }

    fn check_preconditions(&self, obj: &Value, name: &str, opts: &DeleteOptions) -> ApiResult<()> {
        if let Some(uid) = &opts.precondition_uid {
            if uid != meta::uid(obj) {
                return Err(ApiError::conflict(
                    self.info,
                    name,
                    &format!(
                        "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                        meta::uid(obj)
                    ),
                ));
            }
        }
        if let Some(rv) = &opts.precondition_rv {
            if rv != meta::resource_version(obj) {
                return Err(ApiError::conflict(
                    self.info,
                    name,
                    &format!(
                        "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
                        meta::resource_version(obj)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Mark `obj` as being deleted if it cannot go at once. True when it must stay for now.
    fn plan_delete(&self, obj: &mut Value, opts: &DeleteOptions) -> bool {
        if self.info.group.is_empty() && self.info.kind == "Namespace" {
            if let Some(stays) = plan_namespace_delete(obj, opts) {
                return stays;
            }
        }
        let mut finalizers = meta::finalizers(obj);
        let propagation = opts.propagation.clone().unwrap_or_else(|| {
            if self.info.kind == "ReplicationController" {
                "Orphan".into()
            } else {
                "Background".into()
            }
        });
        let wanted = match propagation.as_str() {
            "Orphan" => Some("orphan"),
            "Foreground" => Some("foregroundDeletion"),
            _ => None,
        };
        let grace = self.grace_period(obj, opts);
        let deleting = meta::deletion_timestamp(obj).is_some();
        if deleting {
            // Already being deleted: a shorter grace period may still speed it up.
            let current = deletion_grace(obj);
            if grace < current {
                set_deletion(obj, grace);
                if grace == 0 && finalizers.is_empty() {
                    return false;
                }
            }
            return !(finalizers.is_empty() && grace == 0);
        }
        if let Some(f) = wanted {
            if !finalizers.iter().any(|x| x == f) {
                finalizers.push(f.to_string());
            }
        }
        if self.info.kind == "CustomResourceDefinition" && self.info.group == CRD_GROUP {
            // Its objects are deleted first (the custom resource cleanup).
            if !finalizers.iter().any(|x| x == CRD_CLEANUP_FINALIZER) {
                finalizers.push(CRD_CLEANUP_FINALIZER.to_string());
            }
        }
        if finalizers.is_empty() && grace == 0 {
            return false;
        }
        meta::set_finalizers(obj, &finalizers);
        set_deletion(obj, grace);
        true
    }

    /// Pods bound to a node get a grace period for their kubelet to stop them.
    fn grace_period(&self, obj: &Value, opts: &DeleteOptions) -> i64 {
        if self.info.kind != "Pod" {
            return 0;
        }
        let unscheduled = obj
            .at("/spec/nodeName")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty);
        let finished = matches!(
            obj.at("/status/phase").and_then(Value::as_str),
            Some("Succeeded") | Some("Failed")
        );
        if unscheduled || finished {
            return 0;
        }
        opts.grace_period
            .or_else(|| {
                obj.at("/spec/terminationGracePeriodSeconds")
                    .and_then(Value::as_i64)
            })
            .unwrap_or(30)
            .max(0)
    }

    /// A page of objects read from the store (consistent across pages through the token), in
    /// this registry's version.
    pub async fn list_from_store(
        &self,
        filter: &Filter,
        limit: usize,
        continue_token: &str,
        revision: i64,
    ) -> ApiResult<ListPage> {
        let (mut items, mut stored) = (Vec::new(), Vec::new());
        let mut page = self
            .scan_store(filter, limit, continue_token, revision, |obj| {
                items.push(self.wire(&obj));
                stored.push(obj.json());
            })
            .await?;
        (page.items, page.stored) = (items, stored);
        Ok(page)
    }

    /// The namespace and name of every object in the store that `filter` selects, and the
    /// revision read: what deletecollection needs, without the objects' JSON.
    pub async fn names_from_store(
        &self,
        filter: &Filter,
    ) -> ApiResult<(i64, Vec<(String, String)>)> {
        let mut names = Vec::new();
        let page = self
            .scan_store(filter, 0, "", 0, |obj| {
                names.push((obj.namespace, obj.name))
            })
            .await?;
        Ok((page.rev, names))
    }

    /// Read the objects `filter` selects from the store, `limit` at most (0: all), from
    /// `continue_token` at `revision` (0: the current one), giving each to `each`. The page
    /// returned has no items: the revision read and, when the limit cut the list, the continue
    /// token and the count left.
    async fn scan_store(
        &self,
        filter: &Filter,
        limit: usize,
        continue_token: &str,
        revision: i64,
        mut each: impl FnMut(CachedObject),
    ) -> ApiResult<ListPage> {
        let base = match &filter.namespace {
            Some(ns) if self.info.namespaced => format!("{}{ns}/", self.prefix),
            _ => self.prefix.clone(),
        };
        let (mut start, mut rev) = (base.clone(), revision);
        if !continue_token.is_empty() {
            let (token_rev, token_start) = decode_continue(continue_token)?;
            start = format!("{}{token_start}", self.prefix);
            rev = token_rev;
        }
        let mut page = ListPage::default();
        let mut taken = 0;
        let chunk = if limit == 0 { 0 } else { limit.max(100) };
        loop {
            let mut req = RangeRequest::prefix(base.clone()).limit(chunk).at(rev);
            req.start = Bytes::from(start.clone());
            let resp = self.store.range(req).await.map_err(|e| match e {
                StoreError::Compacted { .. } if !continue_token.is_empty() => ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ),
                e => ApiError::from_store(e, self.info, ""),
            })?;
            if rev == 0 {
                rev = resp.revision;
            }
            page.rev = rev;
            for (i, kv) in resp.kvs.iter().enumerate() {
                let obj = CachedObject::new(self.storage, &kv.value, kv.mod_revision)?;
                if filter.matches(&obj) {
                    each(obj);
                    taken += 1;
                }
                if limit > 0 && taken >= limit {
                    if i + 1 < resp.kvs.len() || resp.more {
                        let mut next =
                            String::from_utf8_lossy(&kv.key[self.prefix.len()..]).into_owned();
                        next.push('\0');
                        page.continue_token = Some(encode_continue(rev, &next));
                        if filter.labels.is_none() && filter.fields.is_none() {
                            page.remaining = Some(resp.count - (i as i64 + 1));
                        }
                    }
                    return Ok(page);
                }
            }
            match resp.kvs.last() {
                Some(last) if resp.more => {
                    let mut next = String::from_utf8_lossy(&last.key).into_owned();
                    next.push('\0');
                    start = next;
                }
                _ => return Ok(page),
            }
        }
    }

    /// Wait until the watch cache reflects the store's current state (consistent reads).
    pub async fn cache_is_fresh(&self) -> bool {
        match self.store.current_revision().await {
            Ok(rev) => self.cache.wait_for(rev, Duration::from_secs(3)).await,
            Err(_) => false,
        }
    }
}

/// Set each of `fields` of `next`'s metadata to `old`'s, or remove it where `old` has none.
fn keep_from_old(next: &mut Value, old: &Value, fields: &[&str]) {
    let old_md = meta::metadata(old);
    let md = meta::metadata_mut(next);
    for f in fields {
        match old_md.and_then(|m| m.get(*f)) {
            Some(v) if md.get(*f) != Some(v) => {
                md.insert(f.to_string(), v.clone());
            }
            Some(_) => {}
            None => {
                md.remove(*f);
            }
        }
    }
}

/// Kubernetes' `ShouldDeleteDuringUpdate` for an object being deleted whose last finalizer
/// went: only when its deletion had no grace period left (`deletionGracePeriodSeconds: 0`),
/// and for a namespace only once `spec.finalizers` is empty too.
/// Kubernetes' ObjectMeta omits empty lists and maps (`omitempty`): a patch that removes the
/// last finalizer or owner reference leaves none, not `[]`.
fn drop_empty_metadata(obj: &mut Value) {
    let Some(md) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for f in [
        "finalizers",
        "ownerReferences",
        "labels",
        "annotations",
        "managedFields",
    ] {
        let empty = match md.get(f) {
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.is_empty(),
            Some(Value::Null) => true,
            _ => false,
        };
        if empty {
            md.remove(f);
        }
    }
}

fn delete_during_update(info: &ResourceInfo, obj: &Value) -> bool {
    // Absent (a namespace's deletion sets none) or zero, as Kubernetes' generic store.
    let no_grace = meta::metadata(obj)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .is_none_or(|g| g == 0);
    let namespace_finalizers = info.group.is_empty()
        && info.kind == "Namespace"
        && obj
            .at("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
    no_grace && !namespace_finalizers
}

fn deletion_grace(obj: &Value) -> i64 {
    meta::metadata(obj)
        .and_then(|m| m.get("deletionGracePeriodSeconds"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// Kubernetes' namespace `REST.Delete`: the first delete only marks the namespace (deletion
/// timestamp, phase Terminating, the orphan/foreground finalizers the options ask for) so that
/// the namespace controller can empty it; it goes once `spec.finalizers` is empty (through
/// `finalize`). `None`: carry on with the generic delete.
fn plan_namespace_delete(obj: &mut Value, opts: &DeleteOptions) -> Option<bool> {
    if meta::deletion_timestamp(obj).is_none() {
        let mut finalizers = meta::finalizers(obj);
        for (finalizer, policy) in [("orphan", "Orphan"), ("foregroundDeletion", "Foreground")] {
            let Some(p) = opts.propagation.as_deref() else {
                continue;
            };
            let has = finalizers.iter().any(|f| f == finalizer);
            if p == policy && !has {
                finalizers.push(finalizer.to_string());
            } else if p != policy && has {
                finalizers.retain(|f| f != finalizer);
            }
        }
        if finalizers != meta::finalizers(obj) {
            meta::set_finalizers(obj, &finalizers);
        }
        meta::metadata_mut(obj).insert(
            "deletionTimestamp".into(),
            Value::String(meta::format_time(SystemTime::now())),
        );
        if let Some(map) = obj.as_object_mut() {
            let status = map.entry("status").or_insert_with(|| json!({}));
            if let Some(status) = status.as_object_mut() {
                status.insert("phase".into(), json!("Terminating"));
            }
        }
        return Some(true);
    }
    let spec_finalizers = obj
        .at("/spec/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    if spec_finalizers {
        return Some(true);
    }
    None
}

fn set_deletion(obj: &mut Value, grace: i64) {
    let at = SystemTime::now() + Duration::from_secs(grace as u64);
    let md = meta::metadata_mut(obj);
    md.insert(
        "deletionTimestamp".into(),
        Value::String(meta::format_time(at)),
    );
    md.insert("deletionGracePeriodSeconds".into(), json!(grace));
}

/// `generateName` plus five random characters from Kubernetes' alphabet.
fn generate_name(base: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let base = if base.len() > 58 { &base[..58] } else { base };
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{base}{suffix}")
}

/// Kubernetes' continue token: base64 of `{"v":"meta.k8s.io/v1","rv":N,"start":"..."}`.
fn encode_continue(rev: i64, start: &str) -> String {
    let json = json!({"v": "meta.k8s.io/v1", "rv": rev, "start": start}).to_string();
    base64_encode(json.as_bytes())
}

fn decode_continue(token: &str) -> ApiResult<(i64, String)> {
    let bad = || ApiError::bad_request(format!("continue key is not valid: {token}"));
    let bytes = base64_decode(token).ok_or_else(bad)?;
    let v: Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    if v.get("v").and_then(Value::as_str) != Some("meta.k8s.io/v1") {
        return Err(bad());
    }
    let rev = v
        .get("rv")
        .and_then(Value::as_i64)
        .filter(|r| *r > 0)
        .ok_or_else(bad)?;
    let start = v.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    if start.contains("..") || start.starts_with('/') {
        return Err(bad());
    }
    Ok((rev, start.to_string()))
}

/// Standard base64 with padding (Go's `StdEncoding`: secret data, continue tokens).
pub(crate) fn base64_encode(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(data)
}

pub(crate) fn base64_decode(s: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_keys_join_prefix_namespace_and_name() {
        let p = "/registry/pods/";
        assert_eq!(object_key(p, Some("ns"), "a"), "/registry/pods/ns/a");
        assert_eq!(object_key(p, Some(""), "a"), "/registry/pods//a");
        assert_eq!(
            object_key("/registry/nodes/", None, "n-1"),
            "/registry/nodes/n-1"
        );
    }

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let t = encode_continue(42, "default/pod-9\u{0}");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, "default/pod-9\u{0}".to_string())
        );
        assert_eq!(decode_continue("!!!").unwrap_err().code, 400);
        assert_eq!(
            decode_continue(&base64_encode(b"{}")).unwrap_err().code,
            400
        );
    }

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64_encode(b"hello"), "aGVsbG8=");
        assert_eq!(base64_decode("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_encode(b""), "");
    }

    #[test]
    fn generated_names_keep_the_base() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9);
    }
}
