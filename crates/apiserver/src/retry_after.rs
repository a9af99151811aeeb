//! `--shutdown-send-retry-after` (upstream `WithRetryAfter` and the non-long-running wait group of
//! `genericapiserver`): once the shutdown delay has passed, the listener stays open and every new
//! request is answered `429` with `Retry-After: 5` and `Connection: close` (HTTP/1.1 closes after
//! it, HTTP/2 gets a GOAWAY), so clients move to another server at once instead of finding a
//! closed port; the listener closes only when the requests already in flight have finished.
//!
//! Health probes (`/readyz`, `/livez`, `/healthz`) and `/metrics` are never refused, nor requests
//! of the server's own loopback clients (user agent `kube-apiserver/`), as upstream: the check
//! runs before authentication, so only the path and the user agent can tell.
//!
//! In flight means handled and not yet answered: a watch or an exec counts until it is set up, a
//! response body still being written does not (the connections' own drain waits for those).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use tokio::sync::Notify;

use crate::response::{self, Body};

/// Upstream's paths that are served whatever the shutdown's state.
const EXEMPT_PATH_PREFIXES: &[&str] = &["/readyz", "/livez", "/healthz", "/metrics"];
/// The user agent of upstream's loopback client.
const LOOPBACK_USER_AGENT: &str = "kube-apiserver/";
/// Upstream's message, as `http.Error` writes it (with its newline).
pub const MESSAGE: &str = "The apiserver is shutting down, please try again later.\n";
/// Seconds a refused client is told to wait (upstream's fixed 5).
pub const RETRY_AFTER_SECONDS: u32 = 5;

/// Whether new requests are refused, and how many are in flight.
#[derive(Debug, Default)]
pub struct Gate {
    refusing: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
}

/// What [`Gate::admit`] decided for one request.
pub enum Admission<'a> {
    /// Served, and counted until the guard goes.
    Counted(InFlight<'a>),
    /// Served, not counted (exempt).
    Exempt,
    /// Refused: answer this.
    Refused(Response<Body>),
}

impl Gate {
    /// From now on, new requests that are not exempt are refused.
    pub fn refuse_new_requests(&self) {
        self.refusing.store(true, Ordering::SeqCst);
    }

    pub fn refusing(&self) -> bool {
        self.refusing.load(Ordering::SeqCst)
    }

    /// Requests being handled now (exempt ones not counted).
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Called as a request arrives, before anything else is done with it.
    pub fn admit(&self, path: &str, headers: &HeaderMap) -> Admission<'_> {
        if exempt(path, headers) {
            return Admission::Exempt;
        }
        // Counted before the flag is read (both SeqCst): a request counted after the shutdown
        // found none in flight sees the flag and is refused, so none slips past the drain.
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(self);
        if self.refusing() {
            drop(guard);
            return Admission::Refused(refusal());
        }
        Admission::Counted(guard)
    }

    /// Resolves when no counted request is in flight.
    pub async fn drained(&self) {
        loop {
            let notified = self.drained.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A request in flight; uncounted when dropped.
pub struct InFlight<'a>(&'a Gate);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

/// Upstream's `isRequestExemptFromRetryAfter`.
fn exempt(path: &str, headers: &HeaderMap) -> bool {
    EXEMPT_PATH_PREFIXES.iter().any(|p| path.starts_with(p))
        || headers
            .get(header::USER_AGENT)
            .is_some_and(|ua| ua.as_bytes().starts_with(LOOPBACK_USER_AGENT.as_bytes()))
}

/// The answer to a request refused during shutdown: 429, `Retry-After: 5`, `Connection: close`,
/// upstream's text as Go's `http.Error` sends it.
pub fn refusal() -> Response<Body> {
    let mut resp = response::bytes_response(
        StatusCode::TOO_MANY_REQUESTS,
        "text/plain; charset=utf-8",
        Bytes::from_static(MESSAGE.as_bytes()),
    );
    let headers = resp.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECONDS));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::time::Duration;

    fn agent(ua: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::USER_AGENT, HeaderValue::from_str(ua).unwrap());
        h
    }

    #[tokio::test]
    async fn refuses_new_requests_after_the_switch_but_not_probes_or_loopback() {
        let gate = Gate::default();
        let none = HeaderMap::new();
        let early = match gate.admit("/api/v1/pods", &none) {
            Admission::Counted(g) => g,
            _ => panic!("served before the switch"),
        };
        assert!(matches!(gate.admit("/readyz", &none), Admission::Exempt));
        assert_eq!(gate.in_flight(), 1);

        gate.refuse_new_requests();
        let Admission::Refused(resp) = gate.admit("/api/v1/pods", &agent("kubectl/v1.32")) else {
            panic!("refused after the switch");
        };
        assert_eq!(resp.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "5");
        assert_eq!(resp.headers()[header::CONNECTION], "close");
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], MESSAGE.as_bytes());
        // Refused requests are not counted.
        assert_eq!(gate.in_flight(), 1);
        for path in ["/readyz?verbose", "/livez", "/healthz/etcd", "/metrics"] {
            assert!(
                matches!(gate.admit(path, &none), Admission::Exempt),
                "{path}"
            );
        }
        assert!(matches!(
            gate.admit(
                "/api/v1/pods",
                &agent("kube-apiserver/v1.36.0 (linux/amd64)")
            ),
            Admission::Exempt
        ));

        // The drain waits for the request admitted before the switch.
        let waiting = tokio::time::timeout(Duration::from_millis(50), gate.drained()).await;
        assert!(waiting.is_err(), "drained with a request in flight");
        let drained = async {
            gate.drained().await;
        };
        let (_, ()) = tokio::join!(async move { drop(early) }, drained);
        assert_eq!(gate.in_flight(), 0);
    }
}
