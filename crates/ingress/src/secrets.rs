//! The TLS Secrets our Ingresses name, and only those.
//!
//! A watch on `kubernetes.io/tls` Secrets (a field selector, so no other Secret reaches
//! us) tells when one changes, but only the Secrets a TLS section names are kept, and only
//! as parsed certificates: the store never holds other Secrets' data. A Secret that becomes
//! named after the watch listed it is read with a GET.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, ResourceExt};
use parking_lot::RwLock;
use tokio::sync::Notify;

use crate::routes::CertState;
use crate::tls::{self, Cert, TLS_SECRET_TYPE};

type Key = (String, String);

enum Entry {
    /// The Secret exists: its certificate, or why it is unusable.
    Present(Result<Arc<Cert>, String>),
    Absent,
    /// Reading it failed (retried on the next build).
    Unreadable(String),
}

/// Named Secrets as certificates.
pub struct SecretStore {
    wanted: RwLock<HashSet<Key>>,
    cache: RwLock<HashMap<Key, Entry>>,
    changed: Arc<Notify>,
}

fn key_of(s: &Secret) -> Key {
    (s.namespace().unwrap_or_default(), s.name_any())
}

fn parse(s: &Secret) -> Entry {
    Entry::Present(tls::load(s).map(Arc::new))
}

impl SecretStore {
    /// A store that wakes `changed` when a named Secret changes.
    pub fn new(changed: Arc<Notify>) -> SecretStore {
        SecretStore {
            wanted: RwLock::new(HashSet::new()),
            cache: RwLock::new(HashMap::new()),
            changed,
        }
    }

    /// The certificate of a named Secret.
    pub fn cert(&self, namespace: &str, name: &str) -> CertState {
        match self
            .cache
            .read()
            .get(&(namespace.to_string(), name.to_string()))
        {
            Some(Entry::Present(Ok(c))) => CertState::Ready(c.clone()),
            Some(Entry::Present(Err(e))) => CertState::Invalid(e.clone()),
            Some(Entry::Unreadable(e)) => CertState::Invalid(format!("could not be read: {e}")),
            Some(Entry::Absent) | None => CertState::Missing,
        }
    }

    /// Name the Secrets to keep; the others are forgotten. Returns the named ones not known
    /// yet (to [`SecretStore::fetch`]).
    pub fn set_wanted(&self, wanted: HashSet<Key>) -> Vec<Key> {
        let mut cache = self.cache.write();
        cache.retain(|k, _| wanted.contains(k));
        let missing = wanted
            .iter()
            .filter(|k| matches!(cache.get(*k), None | Some(Entry::Unreadable(_))))
            .cloned()
            .collect();
        *self.wanted.write() = wanted;
        missing
    }

    /// Read Secrets the watch has not delivered since they were named.
    pub async fn fetch(&self, client: &Client, keys: Vec<Key>) {
        let reads = keys.into_iter().map(|(ns, name)| {
            let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
            async move {
                let got = tokio::time::timeout(Duration::from_secs(10), api.get_opt(&name)).await;
                let entry = match got {
                    Ok(Ok(Some(s))) => parse(&s),
                    Ok(Ok(None)) => Entry::Absent,
                    Ok(Err(e)) => Entry::Unreadable(e.to_string()),
                    Err(_) => Entry::Unreadable("timed out".into()),
                };
                ((ns, name), entry)
            }
        });
        for (key, entry) in futures::future::join_all(reads).await {
            if !self.wanted.read().contains(&key) {
                continue;
            }
            let mut cache = self.cache.write();
            // What the watch delivered meanwhile is newer than the read.
            match cache.get(&key) {
                None | Some(Entry::Unreadable(_)) => {
                    cache.insert(key, entry);
                }
                Some(_) => {}
            }
        }
    }

    /// Whether any named Secret could not be read (the controller retries later).
    pub fn has_unreadable(&self) -> bool {
        self.cache
            .read()
            .values()
            .any(|e| matches!(e, Entry::Unreadable(_)))
    }

    fn put(&self, key: Key, entry: Entry) {
        if !self.wanted.read().contains(&key) {
            return;
        }
        self.cache.write().insert(key, entry);
        self.changed.notify_one();
    }

    /// Follow `kubernetes.io/tls` Secrets until the stream ends (never, in practice).
    pub async fn watch(self: Arc<Self>, client: Client) {
        let api: Api<Secret> = Api::all(client);
        let config = watcher::Config::default()
            .fields(&format!("type={TLS_SECRET_TYPE}"))
            .any_semantic();
        let mut stream = std::pin::pin!(watcher::watcher(api, config));
        let mut listing: Option<HashSet<Key>> = None;
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(Event::Init) => listing = Some(HashSet::new()),
                Ok(Event::InitApply(s)) => {
                    let key = key_of(&s);
                    if let Some(l) = listing.as_mut() {
                        l.insert(key.clone());
                    }
                    if self.wanted.read().contains(&key) {
                        self.put(key, parse(&s));
                    }
                }
                Ok(Event::InitDone) => {
                    let Some(seen) = listing.take() else { continue };
                    // Named TLS Secrets the new list lacks were deleted while the watch was
                    // down (a Secret of another type, read with a GET, is not listed).
                    let gone: Vec<Key> = self
                        .cache
                        .read()
                        .iter()
                        .filter(|(k, e)| matches!(e, Entry::Present(Ok(_))) && !seen.contains(*k))
                        .map(|(k, _)| k.clone())
                        .collect();
                    for k in gone {
                        self.put(k, Entry::Absent);
                    }
                }
                Ok(Event::Apply(s)) => self.put(key_of(&s), parse(&s)),
                Ok(Event::Delete(s)) => self.put(key_of(&s), Entry::Absent),
                Err(e) => {
                    tracing::debug!(error = %e, "secret watch failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tls::tests::{secret, self_signed};

    fn named(ns: &str, name: &str, s: Secret) -> Secret {
        let mut s = s;
        s.metadata.namespace = Some(ns.into());
        s.metadata.name = Some(name.into());
        s
    }

    #[test]
    fn keeps_only_named_secrets_as_certificates() {
        let store = SecretStore::new(Arc::new(Notify::new()));
        let (crt, key) = self_signed(&["a.example.com"]);
        let good = named("ns", "good", secret(TLS_SECRET_TYPE, &crt, &key));
        let other = named("ns", "other", secret(TLS_SECRET_TYPE, &crt, &key));
        // Not named yet: ignored.
        store.put(key_of(&good), parse(&good));
        assert!(matches!(store.cert("ns", "good"), CertState::Missing));

        let missing = store.set_wanted(HashSet::from([("ns".into(), "good".into())]));
        assert_eq!(missing, vec![("ns".to_string(), "good".to_string())]);
        store.put(key_of(&good), parse(&good));
        store.put(key_of(&other), parse(&other));
        assert!(matches!(store.cert("ns", "good"), CertState::Ready(_)));
        assert!(matches!(store.cert("ns", "other"), CertState::Missing));
        assert!(store
            .set_wanted(HashSet::from([("ns".into(), "good".into())]))
            .is_empty());

        let bad = named("ns", "good", secret(TLS_SECRET_TYPE, "x", &key));
        store.put(key_of(&bad), parse(&bad));
        assert!(matches!(store.cert("ns", "good"), CertState::Invalid(_)));
        store.put(key_of(&bad), Entry::Absent);
        assert!(matches!(store.cert("ns", "good"), CertState::Missing));

        // Unnamed again: forgotten.
        store.set_wanted(HashSet::new());
        assert!(store.cache.read().is_empty());
    }
}
