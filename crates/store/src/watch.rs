//! The watch stream handed to callers, the same for every backend.

use std::sync::Arc;

use tokio::sync::{mpsc, Notify};

use crate::{KeyValue, Result, Revision};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change to one key, as etcd's `mvccpb.Event`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// For a put, the new key-value; for a delete, the key with `mod_revision` set to the
    /// delete's revision and every other field empty.
    pub kv: KeyValue,
    /// The key's value before this event (None for a create).
    pub prev: Option<KeyValue>,
}

impl Event {
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// A batch of events in revision order, or (with no events) a progress notification: every
/// event up to `revision` has been delivered.
#[derive(Clone, Debug, Default)]
pub struct WatchResponse {
    pub events: Vec<Event>,
    pub revision: Revision,
}

impl WatchResponse {
    pub fn is_progress(&self) -> bool {
        self.events.is_empty()
    }
}

/// A live watch. Dropping it cancels the watch.
///
/// A stream ends with `Err(StoreError::Compacted)` when the store compacted past the watcher's
/// position before it could be delivered; the caller relists and watches again.
pub struct Watcher {
    rx: mpsc::Receiver<Result<WatchResponse>>,
    progress: Arc<Notify>,
}

impl Watcher {
    /// Channel capacity, in responses, between a backend's watch task and its consumer.
    pub(crate) const BUFFER: usize = 64;

    pub(crate) fn new() -> (Self, mpsc::Sender<Result<WatchResponse>>, Arc<Notify>) {
        let (tx, rx) = mpsc::channel(Self::BUFFER);
        let progress = Arc::new(Notify::new());
        (
            Watcher {
                rx,
                progress: progress.clone(),
            },
            tx,
            progress,
        )
    }

    /// The next batch of events or progress notification; None when the watch has ended.
    pub async fn next(&mut self) -> Option<Result<WatchResponse>> {
        self.rx.recv().await
    }

    /// Ask for a progress notification: a response with no events whose revision says that
    /// every event up to it has been sent (etcd's `RequestProgress`).
    pub fn request_progress(&self) {
        self.progress.notify_one();
    }
}
