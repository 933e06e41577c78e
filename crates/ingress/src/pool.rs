//! Keep-alive HTTP/1.1 connections to backends, per endpoint.
//!
//! A connection goes back to the pool once its response body has been read to the end; one
//! dropped earlier (the client went away mid-body) is closed, since the rest of that body
//! would still be on the wire. Idle connections the backend closed are noticed at checkout.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use tokio::net::TcpStream;

use crate::routes::Target;

/// How long connecting to an endpoint may take (ingress-nginx's proxy-connect-timeout).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Idle connections older than this are closed rather than reused.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// At most this many idle connections per endpoint.
const MAX_IDLE: usize = 512;

pub type Sender = SendRequest<Incoming>;

struct Idle {
    tx: Sender,
    since: Instant,
}

/// Idle connections by endpoint.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<HashMap<Target, Vec<Idle>>>,
}

impl Pool {
    pub fn new() -> Pool {
        Pool::default()
    }

    /// An idle connection to `target` that is still open, if there is one.
    pub async fn checkout(&self, target: &Target) -> Option<Sender> {
        loop {
            let idle = {
                let mut map = self.idle.lock();
                let list = map.get_mut(target)?;
                let idle = list.pop();
                if list.is_empty() {
                    map.remove(target);
                }
                idle?
            };
            if idle.since.elapsed() > IDLE_TIMEOUT || idle.tx.is_closed() {
                continue;
            }
            let mut tx = idle.tx;
            if tx.is_ready() {
                return Some(tx);
            }
            // Its last response has just ended: the connection becomes ready at once, or
            // turns out closed.
            match tokio::time::timeout(Duration::from_secs(1), tx.ready()).await {
                Ok(Ok(())) => return Some(tx),
                _ => continue,
            }
        }
    }

    /// Return a connection whose response has been read to its end.
    pub fn checkin(&self, target: Target, tx: Sender) {
        if tx.is_closed() {
            return;
        }
        let mut map = self.idle.lock();
        let list = map.entry(target).or_default();
        if list.len() < MAX_IDLE {
            list.push(Idle {
                tx,
                since: Instant::now(),
            });
        }
    }

    /// How many idle connections the pool holds (for tests).
    pub fn idle_count(&self) -> usize {
        self.idle.lock().values().map(Vec::len).sum()
    }
}

/// Open a TCP connection to `target` (within [`CONNECT_TIMEOUT`]).
pub async fn dial(target: &Target) -> std::io::Result<TcpStream> {
    let connect = async {
        match target {
            Target::Addr(a) => TcpStream::connect(a).await,
            Target::Name(name, port) => TcpStream::connect((&**name, *port)).await,
        }
    };
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// A new HTTP/1.1 connection to `target`.
pub async fn connect(target: &Target) -> std::io::Result<Sender> {
    let stream = dial(target).await?;
    let (tx, conn) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "backend connection ended");
        }
    });
    Ok(tx)
}

/// A new connection that may switch protocols (for `Upgrade` requests; never pooled).
pub async fn connect_upgradable(target: &Target) -> std::io::Result<Sender> {
    let stream = dial(target).await?;
    let (tx, conn) = http1::Builder::new()
        .handshake(TokioIo::new(stream))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "backend connection ended");
        }
    });
    Ok(tx)
}

/// A backend's response body that puts its connection back into the pool when it ends.
pub struct PooledBody {
    inner: Incoming,
    giveback: Option<(Arc<Pool>, Target, Sender)>,
}

impl PooledBody {
    pub fn new(inner: Incoming, giveback: Option<(Arc<Pool>, Target, Sender)>) -> PooledBody {
        PooledBody { inner, giveback }
    }

    fn give_back(&mut self) {
        if let Some((pool, target, tx)) = self.giveback.take() {
            pool.checkin(target, tx);
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Err(_))) => self.giveback = None,
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.give_back(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        // A body without content (HEAD, 204, 304) is never polled: it ended all the same.
        if self.inner.is_end_stream() {
            self.give_back();
        }
    }
}
