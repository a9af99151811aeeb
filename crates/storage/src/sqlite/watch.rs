//! Watch fan-out for the SQLite store (the role etcd's watchable store plays).
//!
//! The writer publishes each committed event once into a bounded broadcast ring. A watcher first
//! subscribes to the ring, then replays history from the `log` table up to the present, then follows
//! the ring, dropping what it already sent (revision <= last sent). A watcher that falls behind the ring
//! (its consumer is slow) never blocks the writer and loses nothing: it replays the gap from the table,
//! or gets `Compacted` if that history is gone.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use super::Inner;
use crate::{Error, Event, Result, Revision};

/// Events kept in the broadcast ring for watchers that are momentarily behind.
const RING_CAPACITY: usize = 2048;
/// Events read from the table per replay query.
const REPLAY_PAGE: usize = 1024;

pub struct WatchHub {
    sender: broadcast::Sender<Arc<Event>>,
}

impl WatchHub {
    pub fn new() -> WatchHub {
        let (sender, _) = broadcast::channel(RING_CAPACITY);
        WatchHub { sender }
    }

    pub fn publish(&self, events: Vec<Event>) {
        for event in events {
            // No receiver is not an error: nobody is watching.
            let _ = self.sender.send(Arc::new(event));
        }
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Event>> {
        self.sender.subscribe()
    }
}

/// Feeds one watcher's channel until its consumer goes away, the store closes, or history it needs has
/// been compacted (sent as the last item).
pub async fn run_watcher(
    inner: Arc<Inner>,
    prefix: String,
    mut last: Revision,
    mut ring: broadcast::Receiver<Arc<Event>>,
    out: mpsc::Sender<Result<Event>>,
) {
    let mut closed = inner.closed.subscribe();
    loop {
        // Replay from the table everything after `last` that is already committed.
        loop {
            if *closed.borrow() {
                let _ = out.send(Err(Error::Closed)).await;
                return;
            }
            let page = inner.history(prefix.clone(), last, REPLAY_PAGE).await;
            let (events, _) = match page {
                Ok(page) => page,
                Err(e) => {
                    let _ = out.send(Err(e)).await;
                    return;
                }
            };
            let full = events.len() == REPLAY_PAGE;
            for event in events {
                last = event.revision();
                if out.send(Ok(event)).await.is_err() {
                    return;
                }
            }
            if !full {
                break;
            }
        }
        // Follow the ring until we fall behind it.
        loop {
            let received = tokio::select! {
                r = ring.recv() => r,
                _ = out.closed() => return,
                _ = closed.wait_for(|c| *c) => Err(broadcast::error::RecvError::Closed),
            };
            match received {
                Ok(event) => {
                    if event.revision() <= last || !event.kv.key.starts_with(&prefix) {
                        continue;
                    }
                    last = event.revision();
                    if out.send(Ok(Event::clone(&event))).await.is_err() {
                        return;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => break,
                Err(broadcast::error::RecvError::Closed) => {
                    let _ = out.send(Err(Error::Closed)).await;
                    return;
                }
            }
        }
    }
}
