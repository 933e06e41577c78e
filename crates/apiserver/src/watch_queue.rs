//! The queue between the watch cache and one watcher: bounded, one sender (the cache's
//! dispatch) and one receiver (the watch's response stream).
//!
//! A watch of a busy resource gets an item for nearly every event, and a thousand watches get
//! a thousand items per event, so the queue is built for that: the sender appends under a
//! mutex nobody else holds at that moment and wakes the receiver only when it is waiting (once
//! per batch, not per item); the receiver takes everything queued in one swap and hands the
//! items out from its own buffer. A full queue refuses the item (the cache then closes the
//! watcher as too slow); a dropped sender lets the receiver drain what is queued, then end.

use std::collections::VecDeque;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

struct State<T> {
    items: VecDeque<T>,
    /// The receiver is waiting for an item or for the end.
    waker: Option<Waker>,
    sender_alive: bool,
    receiver_alive: bool,
}

struct Shared<T> {
    state: Mutex<State<T>>,
    capacity: usize,
}

/// The cache's end.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// The watcher's end.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// Items taken from the queue in one swap, handed out in order.
    taken: VecDeque<T>,
}

/// Why [`Sender::try_send`] did not queue the item.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// `capacity` items are waiting already.
    Full,
    /// The receiver is gone.
    Closed,
}

/// Why [`Receiver::try_recv`] has no item.
#[derive(Debug, PartialEq, Eq)]
pub enum TryRecvError {
    Empty,
    /// The sender is gone and everything it queued was received.
    Disconnected,
}

/// A queue holding at most `capacity` items not yet taken by the receiver.
pub fn channel<T>(capacity: usize) -> (Sender<T>, Receiver<T>) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            items: VecDeque::new(),
            waker: None,
            sender_alive: true,
            receiver_alive: true,
        }),
        capacity,
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver {
            shared,
            taken: VecDeque::new(),
        },
    )
}

impl<T> Sender<T> {
    pub fn try_send(&self, item: T) -> Result<(), SendError> {
        let waker = {
            let mut state = self.shared.state.lock();
            if !state.receiver_alive {
                return Err(SendError::Closed);
            }
            if state.items.len() >= self.shared.capacity {
                return Err(SendError::Full);
            }
            state.items.push_back(item);
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let waker = {
            let mut state = self.shared.state.lock();
            state.sender_alive = false;
            state.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl<T> Receiver<T> {
    /// The next item; `Ready(None)` once the sender is gone and nothing is left.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        if let Some(item) = self.taken.pop_front() {
            return Poll::Ready(Some(item));
        }
        let mut state = self.shared.state.lock();
        if !state.items.is_empty() {
            std::mem::swap(&mut state.items, &mut self.taken);
            drop(state);
            return Poll::Ready(self.taken.pop_front());
        }
        if !state.sender_alive {
            return Poll::Ready(None);
        }
        match &state.waker {
            Some(w) if w.will_wake(cx.waker()) => {}
            _ => state.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }

    pub async fn recv(&mut self) -> Option<T> {
        std::future::poll_fn(|cx| self.poll_recv(cx)).await
    }

    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let waker = futures::task::noop_waker();
        match self.poll_recv(&mut Context::from_waker(&waker)) {
            Poll::Ready(Some(item)) => Ok(item),
            Poll::Ready(None) => Err(TryRecvError::Disconnected),
            Poll::Pending => {
                // Do not keep the no-op waker: a real one may be registered later.
                self.shared.state.lock().waker = None;
                Err(TryRecvError::Empty)
            }
        }
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut state = self.shared.state.lock();
        state.receiver_alive = false;
        state.items.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_arrive_in_order_up_to_the_capacity() {
        let (tx, mut rx) = channel(3);
        for i in 0..3 {
            tx.try_send(i).unwrap();
        }
        assert_eq!(tx.try_send(3), Err(SendError::Full));
        assert_eq!(rx.try_recv(), Ok(0));
        // Taken items no longer count against the capacity.
        tx.try_send(3).unwrap();
        let got: Vec<i32> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    }

    #[test]
    fn a_dropped_sender_ends_the_queue_after_what_it_sent() {
        let (tx, mut rx) = channel(3);
        tx.try_send(1).unwrap();
        drop(tx);
        assert_eq!(rx.try_recv(), Ok(1));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    }

    #[test]
    fn a_dropped_receiver_refuses_items() {
        let (tx, rx) = channel::<i32>(3);
        drop(rx);
        assert_eq!(tx.try_send(1), Err(SendError::Closed));
    }

    #[tokio::test]
    async fn a_waiting_receiver_is_woken_by_an_item_and_by_the_end() {
        let (tx, mut rx) = channel(8);
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(i) = rx.recv().await {
                got.push(i);
            }
            got
        });
        for i in 0..5 {
            tokio::task::yield_now().await;
            tx.try_send(i).unwrap();
        }
        drop(tx);
        assert_eq!(reader.await.unwrap(), [0, 1, 2, 3, 4]);
    }
}
