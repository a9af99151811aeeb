//! Graceful shutdown, as upstream's `genericapiserver` `RunWithContext`:
//!
//! 1. ShutdownInitiated: `/readyz` fails its `shutdown` check at once, so load balancers stop
//!    sending new clients; requests are still served as before.
//! 2. `--shutdown-delay-duration` later (0 by default): NotAcceptingNewRequest. The listener is
//!    closed (new connections are refused), idle connections are closed, HTTP/2 connections get a
//!    GOAWAY and HTTP/1.1 ones close after their current response. With
//!    `--shutdown-send-retry-after` the listener stays open a while longer: new requests get 429
//!    with `Retry-After` and `Connection: close` ([`crate::retry_after`]) until the requests in
//!    flight have been answered (at most the request timeout), and only then does the rest of this
//!    step happen.
//! 3. In-flight requests finish (each is bounded by its request deadline; upstream's server
//!    shutdown waits at most `--request-timeout` for them, so does this one), and open watches are
//!    ended cleanly (their body ends, so clients re-list and re-watch, elsewhere since this server
//!    no longer accepts). With `--shutdown-watch-termination-grace-period` the watches are ended
//!    at `max(watches / grace, 200)` a second (upstream's rate) so their clients do not all come
//!    back at once; with 0 (the default) all at once. (Upstream with 0 does not end watches; they
//!    are cut when the process exits. Ending them cleanly is what its clients see as well.)
//! 4. What is still open when that bound passes (a `logs -f`, a client not reading) is closed,
//!    the store is closed, and the process exits 0.
//!
//! A second SIGTERM or SIGINT during all this exits at once with 1, as upstream's signal handler.

use std::collections::HashMap;
use std::future::Future as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Response;
use http_body_util::BodyExt;
use hyper::body::Frame;

use crate::response::Body;
use crate::serving::Phase;

/// Upstream's floor on how fast watches are ended during the grace period (watches a second).
pub const MIN_WATCH_END_RATE: f64 = 200.0;

/// `--shutdown-delay-duration` and `--shutdown-watch-termination-grace-period`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShutdownOptions {
    pub delay: Duration,
    pub watch_termination_grace_period: Duration,
    /// `--shutdown-send-retry-after`.
    pub send_retry_after: bool,
}

/// The open watches, each of which can be told to end.
#[derive(Default)]
pub struct WatchTerminator {
    next: AtomicU64,
    live: Mutex<HashMap<u64, tokio::sync::oneshot::Sender<()>>>,
}

impl WatchTerminator {
    /// `resp` (a watch's) with a body that ends when [`WatchTerminator::end_all`] reaches it.
    pub fn terminable(self: &Arc<Self>, resp: Response<Body>) -> Response<Body> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.lock().insert(id, tx);
        let registration = Registration {
            terminator: self.clone(),
            id,
        };
        resp.map(|inner| {
            Terminable {
                inner,
                end: rx,
                ended: false,
                _registration: registration,
            }
            .boxed()
        })
    }

    /// Watches open now.
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// Ends every open watch: all at once when `grace` is zero, else paced over at most `grace`
    /// (see [`pace`]). Watches opened meanwhile are ended too.
    pub async fn end_all(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let ids: Vec<u64> = self.lock().keys().copied().collect();
            if ids.is_empty() {
                return;
            }
            let interval = pace(ids.len(), grace);
            for (i, id) in ids.into_iter().enumerate() {
                if let (Some(interval), true) = (interval, i > 0) {
                    // Past the grace period the rest go at once.
                    if tokio::time::Instant::now() + interval < deadline {
                        tokio::time::sleep(interval).await;
                    }
                }
                if let Some(tx) = self.lock().remove(&id) {
                    let _ = tx.send(());
                }
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, tokio::sync::oneshot::Sender<()>>> {
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The time between two watches ended when `count` are ended over `grace`: `count / grace` a
/// second, at least [`MIN_WATCH_END_RATE`]; `None` (all at once) when `grace` is zero.
pub fn pace(count: usize, grace: Duration) -> Option<Duration> {
    if grace.is_zero() || count == 0 {
        return None;
    }
    let rate = (count as f64 / grace.as_secs_f64()).max(MIN_WATCH_END_RATE);
    Some(Duration::from_secs_f64(1.0 / rate))
}

/// Removes its watch from the terminator when the body goes (the watch ended or its client left).
struct Registration {
    terminator: Arc<WatchTerminator>,
    id: u64,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.terminator.lock().remove(&self.id);
    }
}

/// A watch body that ends, between two events, once told to.
struct Terminable {
    inner: Body,
    end: tokio::sync::oneshot::Receiver<()>,
    ended: bool,
    _registration: Registration,
}

impl hyper::body::Body for Terminable {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if self.ended {
            return Poll::Ready(None);
        }
        // Told to end (or the terminator is gone, the server with it).
        if std::pin::Pin::new(&mut self.end).poll(cx).is_ready() {
            self.ended = true;
            return Poll::Ready(None);
        }
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.ended || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

impl crate::Running {
    /// Upstream's graceful termination (see the module's doc): `/readyz` fails at once, the
    /// listener closes after `--shutdown-delay-duration`, requests in flight finish and watches
    /// end (within the request timeout, or the watch grace period when longer), then what is left
    /// is closed and the store with it.
    pub async fn graceful_shutdown(self) {
        self.graceful_shutdown_with(async {}).await
    }

    /// As [`Running::graceful_shutdown`], with `pre_shutdown` (upstream's pre-shutdown hooks, such
    /// as leaving the `kubernetes` endpoints) run from the start; the listener closes once both it
    /// and the delay are done.
    pub async fn graceful_shutdown_with(self, pre_shutdown: impl std::future::Future<Output = ()>) {
        let started = tokio::time::Instant::now();
        let options = self.api.shutdown;
        self.api.health.begin_shutdown();
        tracing::info!(
            delay = ?options.delay,
            "[graceful-termination] shutdown initiated: /readyz fails from now on, requests are served until --shutdown-delay-duration has passed"
        );
        tokio::join!(tokio::time::sleep(options.delay), pre_shutdown);
        let limit = self
            .api
            .request_timeout
            .max(options.watch_termination_grace_period);
        if options.send_retry_after {
            self.api.retry_after.refuse_new_requests();
            tracing::info!(
                in_flight = self.api.retry_after.in_flight(),
                "[graceful-termination] answering new requests 429 with Retry-After; waiting for requests in flight before closing the listener"
            );
            // Each request is bounded by its deadline; the bound here covers one stuck before it.
            let waited = self.api.request_timeout;
            if tokio::time::timeout(waited, self.api.retry_after.drained())
                .await
                .is_err()
            {
                tracing::warn!(
                    after = ?waited,
                    in_flight = self.api.retry_after.in_flight(),
                    "[graceful-termination] requests still in flight; closing the listener anyway"
                );
            }
        }
        tracing::info!(
            watches = self.api.watch_terminator.open(),
            limit = ?limit,
            "[graceful-termination] not accepting new requests; waiting for requests in flight, ending watches"
        );
        self.phase.send_replace(Phase::Draining);
        let watches = self.api.watch_terminator.clone();
        let grace = options.watch_termination_grace_period;
        let ending = tokio::spawn(async move { watches.end_all(grace).await });
        let mut accept = self.accept;
        if tokio::time::timeout(limit, &mut accept).await.is_err() {
            tracing::warn!(
                after = ?limit,
                "[graceful-termination] connections still busy (long-running requests, slow readers); closing them"
            );
            self.phase.send_replace(Phase::Closing);
            let _ = accept.await;
        }
        ending.abort();
        self.compactor.abort();
        self.api.store.close().await;
        tracing::info!(took = ?started.elapsed(), "[graceful-termination] the API server has stopped");
    }

    /// Serves until SIGTERM or SIGINT, then shuts down gracefully; a second signal meanwhile exits
    /// the process at once with 1.
    pub async fn run_until_signalled(self) {
        self.run_until_signalled_with(async {}).await
    }

    /// As [`Running::run_until_signalled`], with `pre_shutdown` as in
    /// [`Running::graceful_shutdown_with`].
    pub async fn run_until_signalled_with(
        mut self,
        pre_shutdown: impl std::future::Future<Output = ()>,
    ) {
        let signal = tokio::select! {
            _ = &mut self.accept => {
                tracing::error!("the API server stopped accepting connections");
                return;
            }
            signal = signalled() => signal,
        };
        tracing::info!(signal, "[graceful-termination] shutting down");
        tokio::spawn(async {
            let again = signalled().await;
            eprintln!("rkube: {again} during the graceful shutdown: exiting now");
            std::process::exit(1);
        });
        self.graceful_shutdown_with(pre_shutdown).await
    }
}

/// Resolves on the first SIGTERM or SIGINT, naming it.
pub async fn signalled() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = match signal(SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops the server");
            let _ = tokio::signal::ctrl_c().await;
            return "SIGINT";
        }
    };
    tokio::select! {
        _ = term.recv() => "SIGTERM",
        _ = tokio::signal::ctrl_c() => "SIGINT",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::StatusCode;
    use hyper::body::Body as _;

    #[test]
    fn watches_end_at_upstreams_rate() {
        assert_eq!(pace(10, Duration::ZERO), None);
        assert_eq!(pace(0, Duration::from_secs(5)), None);
        // Few watches: the floor of 200 a second.
        assert_eq!(
            pace(10, Duration::from_secs(5)),
            Some(Duration::from_millis(5))
        );
        // Many: spread over the grace period.
        assert_eq!(
            pace(10_000, Duration::from_secs(10)),
            Some(Duration::from_millis(1))
        );
    }

    fn streaming_watch(
        terminator: &Arc<WatchTerminator>,
    ) -> (Response<Body>, tokio::sync::mpsc::Sender<Bytes>) {
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let resp = Response::builder()
            .status(StatusCode::OK)
            .body(crate::response::streaming(rx))
            .unwrap();
        (terminator.terminable(resp), tx)
    }

    #[tokio::test]
    async fn an_ended_watch_ends_cleanly_after_its_last_event() {
        let terminator = Arc::new(WatchTerminator::default());
        let (resp, events) = streaming_watch(&terminator);
        let (other, _other_events) = streaming_watch(&terminator);
        assert_eq!(terminator.open(), 2);
        let mut body = resp.into_body();
        events
            .send(Bytes::from_static(b"{\"type\":\"ADDED\"}\n"))
            .await
            .unwrap();
        let frame = body.frame().await.unwrap().unwrap();
        assert_eq!(
            frame.into_data().unwrap(),
            Bytes::from_static(b"{\"type\":\"ADDED\"}\n")
        );

        terminator.end_all(Duration::ZERO).await;
        // The stream ends (no error), though its source is still open.
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
        let mut other = other.into_body();
        assert!(other.frame().await.is_none());
        drop(body);
        drop(other);
        assert_eq!(terminator.open(), 0);
    }

    #[tokio::test]
    async fn a_watch_that_ends_on_its_own_leaves_the_terminator() {
        let terminator = Arc::new(WatchTerminator::default());
        let (resp, events) = streaming_watch(&terminator);
        drop(events);
        let mut body = resp.into_body();
        assert!(body.frame().await.is_none());
        drop(body);
        assert_eq!(terminator.open(), 0);
        // Nothing left to end: returns at once.
        terminator.end_all(Duration::from_secs(30)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn ending_is_paced_within_the_grace_period() {
        let terminator = Arc::new(WatchTerminator::default());
        let watches: Vec<_> = (0..3).map(|_| streaming_watch(&terminator)).collect();
        let started = tokio::time::Instant::now();
        terminator.end_all(Duration::from_secs(1)).await;
        // Three at 200 a second: two gaps of 5 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(10));
        for (resp, _events) in watches {
            assert!(resp.into_body().frame().await.is_none());
        }
    }
}
