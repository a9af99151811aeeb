//! Watch fan-out for the SQLite store (the role etcd's watchable store plays).
//!
//! The writer publishes each committed event once into a bounded broadcast ring. A watcher first
//! subscribes to the ring, then replays history from the `log` table up to the present, then follows
//! the ring, dropping what it already sent (revision <= last sent). A watcher that falls behind the ring
//! (its consumer is slow) never blocks the writer and loses nothing: it replays the gap from the table,
//! or gets `Compacted` if that history is gone.
//!
//! Progress: every revision is one event in the ring, published after the revision counter moves, so a
//! watcher that has read the ring (or replayed the table) up to revision R has delivered everything of
//! its prefix up to R. Asked for progress, it reads the counter and reports it once it has seen that far.

use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};

use super::Inner;
use crate::{Error, Event, ProgressRequester, Result, Revision, WatchItem};

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
/// been compacted (sent as the last item). With a requester, progress is reported on request.
pub async fn run_watcher(
    inner: Arc<Inner>,
    prefix: String,
    mut last: Revision,
    mut ring: broadcast::Receiver<Arc<Event>>,
    out: mpsc::Sender<Result<WatchItem>>,
    requester: Option<ProgressRequester>,
) {
    let mut closed = inner.closed.subscribe();
    // The highest revision read from the ring or the table, whatever its key: every event of the
    // prefix up to it has been sent.
    let mut seen = last;
    // A progress request waiting for the ring to reach this revision.
    let mut wanted: Option<Revision> = None;
    loop {
        // Replay from the table everything after `last` that is already committed.
        loop {
            if *closed.borrow() {
                let _ = out.send(Err(Error::Closed)).await;
                return;
            }
            let page = inner.history(prefix.clone(), last, REPLAY_PAGE).await;
            let (events, snapshot) = match page {
                Ok(page) => page,
                Err(e) => {
                    let _ = out.send(Err(e)).await;
                    return;
                }
            };
            let full = events.len() == REPLAY_PAGE;
            for event in events {
                last = event.revision();
                seen = seen.max(last);
                if out.send(Ok(WatchItem::Event(event))).await.is_err() {
                    return;
                }
            }
            if !full {
                // Everything of the prefix up to the snapshot read is sent.
                seen = seen.max(snapshot);
                break;
            }
        }
        // Follow the ring until we fall behind it.
        loop {
            if wanted.is_some_and(|wanted| seen >= wanted) {
                wanted = None;
                if out.send(Ok(WatchItem::Progress(seen))).await.is_err() {
                    return;
                }
            }
            let requested = async {
                match &requester {
                    Some(requester) => requester.requested().await,
                    None => std::future::pending().await,
                }
            };
            let received = tokio::select! {
                r = ring.recv() => r,
                _ = out.closed() => return,
                _ = closed.wait_for(|c| *c) => Err(broadcast::error::RecvError::Closed),
                () = requested => {
                    let current = inner.shared.revision.load(std::sync::atomic::Ordering::Acquire);
                    wanted = Some(wanted.map_or(current, |w| w.max(current)));
                    continue;
                }
            };
            match received {
                Ok(event) => {
                    seen = seen.max(event.revision());
                    if event.revision() <= last || !event.kv.key.starts_with(&prefix) {
                        continue;
                    }
                    last = event.revision();
                    if out
                        .send(Ok(WatchItem::Event(Event::clone(&event))))
                        .await
                        .is_err()
                    {
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
