//! The request path's flow control (upstream `filters/priority-and-fairness.go` and
//! `apf_filter.go`), called after authorization and before the body is read: with API Priority and
//! Fairness on, the request is classified, waits in its level's queue for seats (at most
//! [`QUEUE_WAIT_LIMIT`]) or is refused with 429 and `Retry-After`; exempt levels never wait. Every
//! answer, refusals included, carries `X-Kubernetes-PF-FlowSchema-UID` and
//! `X-Kubernetes-PF-PriorityLevel-UID`. A watch holds its seats only until it is set up (the
//! handler returned its response), as upstream's watch initialization signal. With APF off, the
//! plain `--max-requests-inflight` limits of [`crate::maxinflight`] apply instead.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Response, StatusCode};
use tokio::sync::oneshot;
use tokio::sync::OwnedSemaphorePermit;

use super::classify::{self, RequestDigest, ResourceAttributes};
use super::controller::{deliver, Apf, Waker};
use super::queueset::Ticket;
use super::width;
use crate::authn::UserInfo;
use crate::request::{Query, Target, Verb};
use crate::response::{self, Body};
use crate::ApiServer;

/// How long a request may wait in a queue: upstream's quarter of the request timeout (60 s).
pub const QUEUE_WAIT_LIMIT: Duration = Duration::from_secs(15);

const FLOW_SCHEMA_HEADER: &str = "X-Kubernetes-PF-FlowSchema-UID";
const PRIORITY_LEVEL_HEADER: &str = "X-Kubernetes-PF-PriorityLevel-UID";

/// Which FlowSchema and level a request was classified into.
#[derive(Clone, Debug, Default)]
pub struct Classification {
    pub flow_schema: String,
    pub flow_schema_uid: String,
    pub priority_level: String,
    pub priority_level_uid: String,
}

impl Classification {
    fn set_headers(&self, headers: &mut http::HeaderMap) {
        for (name, value) in [
            (FLOW_SCHEMA_HEADER, &self.flow_schema_uid),
            (PRIORITY_LEVEL_HEADER, &self.priority_level_uid),
        ] {
            if let Ok(v) = HeaderValue::from_str(value) {
                headers.insert(name, v);
            }
        }
    }
}

enum Held {
    None,
    Inflight(#[allow(dead_code)] OwnedSemaphorePermit),
    Exempt {
        apf: Arc<Apf>,
        level: String,
    },
    Seats {
        apf: Arc<Apf>,
        level: String,
        ticket: Option<Ticket>,
    },
}

/// What a request holds while it runs: its seats (given back when dropped) and its
/// classification, for the response headers.
pub struct Seat {
    held: Held,
    class: Option<Classification>,
    /// A watch: its seats go back once it is set up, not when it ends.
    long_running: bool,
}

impl Seat {
    /// The response with the `X-Kubernetes-PF-*` headers (when APF classified the request). The
    /// seats stay held until its body is sent (or dropped), as upstream's handler holds them while
    /// it writes: a large LIST occupies its seats while it goes out, not only while it is built.
    /// A watch's seats go back now.
    pub fn annotate(self, mut resp: Response<Body>) -> Response<Body> {
        if let Some(class) = &self.class {
            class.set_headers(resp.headers_mut());
        }
        if self.long_running || matches!(self.held, Held::None) {
            return resp;
        }
        response::hold(resp, self)
    }
}

impl Drop for Seat {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.held, Held::None) {
            Held::None | Held::Inflight(_) => {}
            Held::Exempt { apf, level } => {
                if let Some(l) = apf.lock().levels.get_mut(&level) {
                    l.exempt_executing = l.exempt_executing.saturating_sub(1);
                }
            }
            Held::Seats { apf, level, ticket } => {
                let Some(ticket) = ticket else { return };
                let now = apf.now();
                let mut state = apf.lock();
                if let Some(qs) = state.levels.get_mut(&level).and_then(|l| l.queues.as_mut()) {
                    let mut run = Vec::new();
                    qs.finish(ticket, now, &mut run);
                    deliver(qs, run, now);
                }
            }
        }
    }
}

/// A request still waiting in a queue: withdrawn when dropped (its client left), and its ticket
/// given back if it was dispatched meanwhile.
struct Waiting {
    apf: Arc<Apf>,
    level: String,
    id: u64,
    rx: Option<oneshot::Receiver<Ticket>>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        let now = self.apf.now();
        let mut state = self.apf.lock();
        let Some(level) = state.levels.get_mut(&self.level) else {
            return;
        };
        let Some(qs) = level.queues.as_mut() else {
            return;
        };
        if qs.cancel(self.id, now).is_some() {
            level.cancelled += 1;
            return;
        }
        if let Ok(ticket) = rx.try_recv() {
            let mut run = Vec::new();
            qs.finish(ticket, now, &mut run);
            deliver(qs, run, now);
        }
    }
}

/// The hash of a flow (upstream `hashFlowID`): SHA-256 of the FlowSchema's name, a zero byte and
/// the distinguisher, its first 8 bytes little-endian.
pub fn hash_flow(schema: &str, distinguisher: &str) -> u64 {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(schema.as_bytes());
    ctx.update(&[0]);
    ctx.update(distinguisher.as_bytes());
    let sum = ctx.finish();
    let mut first = [0u8; 8];
    first.copy_from_slice(&sum.as_ref()[..8]);
    u64::from_le_bytes(first)
}

/// Upstream's `tooManyRequests`: 429, `Retry-After`, and its text.
fn too_many_requests(retry_after: i64, class: Option<&Classification>) -> Response<Body> {
    let mut resp = response::bytes_response(
        StatusCode::TOO_MANY_REQUESTS,
        "text/plain; charset=utf-8",
        Bytes::from_static(b"Too many requests, please try again later.\n"),
    );
    if let Ok(v) = HeaderValue::from_str(&retry_after.to_string()) {
        resp.headers_mut().insert(http::header::RETRY_AFTER, v);
    }
    if let Some(class) = class {
        class.set_headers(resp.headers_mut());
    }
    resp
}

/// The width estimate of a request.
fn estimate(api: &ApiServer, target: &Target, query: &Query) -> width::Estimate {
    let Target::Resource(r) = target else {
        return width::Estimate::default();
    };
    let list_like = match r.verb {
        Verb::List => true,
        // Upstream prices a watch's initialization only when it asks for initial events.
        Verb::Watch => query.get("sendInitialEvents") == Some("true"),
        _ => false,
    };
    if !list_like {
        return width::Estimate::default();
    }
    let stored = api
        .registry
        .get(&r.group, &r.version, &r.resource)
        .and_then(|res| api.caches.get(&res.storage))
        .map_or(0, |cache| cache.len());
    let single = r.name.is_some()
        || query
            .value("fieldSelector")
            .is_some_and(|f| f.starts_with("metadata.name=") && !f.contains(','));
    width::Estimate {
        list_like,
        single,
        stored,
    }
}

/// Admits a request, or answers it (429): with APF on, by its priority level; otherwise by the
/// in-flight limits.
pub async fn admit(
    api: &Arc<ApiServer>,
    user: &UserInfo,
    method: &http::Method,
    target: &Target,
    path: &str,
    query: &Query,
) -> Result<Seat, Response<Body>> {
    let Some(apf) = api.flowcontrol.clone() else {
        let long_running = matches!(target, Target::Resource(r) if r.verb == Verb::Watch);
        return match api.inflight.admit(method, long_running, &user.groups) {
            Ok(permit) => Ok(Seat {
                held: permit.map_or(Held::None, Held::Inflight),
                class: None,
                long_running,
            }),
            Err(crate::maxinflight::TooManyRequests) => Err(too_many_requests(1, None)),
        };
    };
    let method_verb = method.as_str().to_ascii_lowercase();
    let digest = match target {
        Target::Resource(r) => RequestDigest {
            user,
            verb: r.verb.as_str(),
            resource: Some(ResourceAttributes {
                group: &r.group,
                resource: &r.resource,
                subresource: r.subresource.as_deref(),
                namespace: r.namespace.as_deref().unwrap_or(""),
            }),
            path,
        },
        _ => RequestDigest {
            user,
            verb: &method_verb,
            resource: None,
            path,
        },
    };
    let estimate = estimate(api, target, query);
    let mut seat = admit_digest(&apf, &digest, estimate).await?;
    seat.long_running = matches!(target, Target::Resource(r) if r.verb == Verb::Watch);
    Ok(seat)
}

/// Classifies, then runs, queues or refuses.
pub(super) async fn admit_digest(
    apf: &Arc<Apf>,
    digest: &RequestDigest<'_>,
    estimate: width::Estimate,
) -> Result<Seat, Response<Body>> {
    let now = apf.now();
    let (class, level_name, id, rx) = {
        let mut guard = apf.lock();
        let state = &mut *guard;
        let Some((schema, distinguisher)) = classify::classify(&state.digest.schemas, digest)
        else {
            // Unreachable with the mandatory catch-all in place; let the request through.
            return Ok(Seat {
                held: Held::None,
                class: None,
                long_running: false,
            });
        };
        let Some(level) = state.levels.get_mut(&schema.level) else {
            return Ok(Seat {
                held: Held::None,
                class: None,
                long_running: false,
            });
        };
        let class = Classification {
            flow_schema: schema.name.clone(),
            flow_schema_uid: schema.uid.clone(),
            priority_level: schema.level.clone(),
            priority_level_uid: level.uid.clone(),
        };
        let Some(qs) = level.queues.as_mut() else {
            level.exempt_executing += 1;
            level.dispatched += 1;
            apf.metrics
                .dispatched(&class.priority_level, &class.flow_schema);
            let level_name = class.priority_level.clone();
            return Ok(Seat {
                held: Held::Exempt {
                    apf: apf.clone(),
                    level: level_name,
                },
                class: Some(class),
                long_running: false,
            });
        };
        let seats = width::seats(estimate, level.max_seats);
        let hash = hash_flow(&schema.name, &distinguisher);
        let (tx, rx): (Waker, _) = oneshot::channel();
        let mut run = Vec::new();
        let queued = qs.config().queues > 0;
        match qs.start(now, hash, seats, tx, &mut run) {
            Ok(id) => {
                deliver(qs, run, now);
                (class, schema.level.clone(), id, rx)
            }
            Err(_) => {
                level.rejected += 1;
                level.dropped.record(unix_now());
                let retry_after = level.dropped.retry_after();
                let reason = if queued {
                    "queue-full"
                } else {
                    "concurrency-limit"
                };
                apf.metrics
                    .rejected(&class.priority_level, &class.flow_schema, reason);
                return Err(too_many_requests(retry_after, Some(&class)));
            }
        }
    };
    let mut waiting = Waiting {
        apf: apf.clone(),
        level: level_name.clone(),
        id,
        rx: Some(rx),
    };
    let outcome = match waiting.rx.as_mut() {
        Some(rx) => tokio::time::timeout(QUEUE_WAIT_LIMIT, rx).await,
        None => return Err(too_many_requests(1, Some(&class))),
    };
    let waited = apf.now() - now;
    let ticket = match outcome {
        Ok(Ok(ticket)) => {
            waiting.rx = None;
            Some(ticket)
        }
        // The waker was dropped: the level was reconfigured and the request no longer fits.
        Ok(Err(_)) => {
            waiting.rx = None;
            None
        }
        Err(_) => {
            // Timed out; it may have been dispatched just now.
            let mut rx = waiting.rx.take();
            let now = apf.now();
            let mut state = apf.lock();
            let level = state.levels.get_mut(&level_name);
            match level {
                Some(level) => {
                    let qs_cancelled = level
                        .queues
                        .as_mut()
                        .is_some_and(|qs| qs.cancel(id, now).is_some());
                    if qs_cancelled {
                        level.timed_out += 1;
                        None
                    } else {
                        rx.as_mut().and_then(|rx| rx.try_recv().ok())
                    }
                }
                None => None,
            }
        }
    };
    match ticket {
        Some(ticket) => {
            apf.metrics
                .waited(&class.priority_level, &class.flow_schema, true, waited);
            apf.metrics
                .dispatched(&class.priority_level, &class.flow_schema);
            if let Some(level) = apf.lock().levels.get_mut(&level_name) {
                level.dispatched += 1;
            }
            Ok(Seat {
                held: Held::Seats {
                    apf: apf.clone(),
                    level: level_name,
                    ticket: Some(ticket),
                },
                class: Some(class),
                long_running: false,
            })
        }
        None => {
            apf.metrics
                .waited(&class.priority_level, &class.flow_schema, false, waited);
            apf.metrics
                .rejected(&class.priority_level, &class.flow_schema, "time-out");
            let retry_after = {
                let mut state = apf.lock();
                match state.levels.get_mut(&level_name) {
                    Some(level) => {
                        level.rejected += 1;
                        level.dropped.record(unix_now());
                        level.dropped.retry_after()
                    }
                    None => 1,
                }
            };
            Err(too_many_requests(retry_after, Some(&class)))
        }
    }
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::authn::test_user as user;

    fn digest<'a>(u: &'a UserInfo) -> RequestDigest<'a> {
        RequestDigest {
            user: u,
            verb: "get",
            resource: Some(ResourceAttributes {
                group: "",
                resource: "configmaps",
                subresource: None,
                namespace: "default",
            }),
            path: "/api/v1/namespaces/default/configmaps/x",
        }
    }

    /// A level of one seat for `tiny`, queuing `queues` (0: Reject).
    fn apf(queues: u64, queue_length: u64) -> Arc<Apf> {
        let apf = Arc::new(Apf::new(2));
        let limit_response = if queues == 0 {
            json!({"type": "Reject"})
        } else {
            json!({"type": "Queue", "queuing": {"queues": queues, "handSize": 1, "queueLengthLimit": queue_length}})
        };
        apf.apply(
            &[json!({"metadata": {"name": "tiny", "uid": "fs-uid"}, "spec": {
                "priorityLevelConfiguration": {"name": "tiny"}, "matchingPrecedence": 10,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{"subjects": [{"kind": "User", "user": {"name": "tiny"}}],
                    "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "namespaces": ["*"]}]}]}})],
            &[json!({"metadata": {"name": "tiny", "uid": "pl-uid"}, "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 1, "limitResponse": limit_response}}})],
        );
        apf
    }

    #[tokio::test]
    async fn reject_level_refuses_with_retry_after_and_headers() {
        let apf = apf(0, 0);
        let tiny = user("tiny", &["system:authenticated"]);
        let seat = admit_digest(&apf, &digest(&tiny), Default::default())
            .await
            .expect("the first gets the seat");
        let refused = admit_digest(&apf, &digest(&tiny), Default::default())
            .await
            .err()
            .expect("the second is refused");
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(refused.headers()["Retry-After"], "1");
        assert_eq!(refused.headers()[FLOW_SCHEMA_HEADER], "fs-uid");
        assert_eq!(refused.headers()[PRIORITY_LEVEL_HEADER], "pl-uid");
        // Admins are exempt whatever the load.
        let admin = user("admin", &["system:masters"]);
        let exempt = admit_digest(&apf, &digest(&admin), Default::default())
            .await
            .expect("exempt");
        assert_eq!(
            exempt.class.as_ref().map(|c| c.priority_level.as_str()),
            Some("exempt")
        );
        drop(seat);
        assert!(admit_digest(&apf, &digest(&tiny), Default::default())
            .await
            .is_ok());
    }

    #[tokio::test]
    async fn queued_requests_run_when_seats_free_and_full_queues_refuse() {
        let apf = apf(1, 1);
        let tiny = user("tiny", &["system:authenticated"]);
        let first = admit_digest(&apf, &digest(&tiny), Default::default())
            .await
            .expect("runs");
        let (apf2, tiny2) = (apf.clone(), tiny.clone());
        let second = tokio::spawn(async move {
            admit_digest(&apf2, &digest(&tiny2), Default::default())
                .await
                .is_ok()
        });
        // Let the second reach its queue, then the third finds the queue full.
        for _ in 0..100 {
            if apf.lock().levels["tiny"].queues.as_ref().unwrap().waiting() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let third = admit_digest(&apf, &digest(&tiny), Default::default()).await;
        assert_eq!(
            third.err().map(|r| r.status()),
            Some(StatusCode::TOO_MANY_REQUESTS)
        );
        drop(first);
        assert!(second.await.unwrap(), "the queued request ran");
        let state = apf.lock();
        let qs = state.levels["tiny"].queues.as_ref().unwrap();
        assert!(qs.idle(), "its seat came back when it ended");
    }

    #[tokio::test]
    async fn an_abandoned_waiter_leaves_its_queue() {
        let apf = apf(1, 5);
        let tiny = user("tiny", &["system:authenticated"]);
        let first = admit_digest(&apf, &digest(&tiny), Default::default())
            .await
            .expect("runs");
        let d = digest(&tiny);
        let waiting = admit_digest(&apf, &d, Default::default());
        let gave_up = tokio::time::timeout(Duration::from_millis(20), waiting).await;
        assert!(gave_up.is_err());
        drop(first);
        let state = apf.lock();
        let level = &state.levels["tiny"];
        assert!(level.queues.as_ref().unwrap().idle());
        assert_eq!(level.cancelled, 1);
    }

    #[tokio::test]
    async fn seats_are_held_until_the_body_is_sent_but_not_for_watches() {
        use http_body_util::BodyExt;
        let apf = apf(0, 0);
        let tiny = user("tiny", &["system:authenticated"]);
        let busy = |apf: &Arc<Apf>| {
            apf.lock().levels["tiny"]
                .queues
                .as_ref()
                .unwrap()
                .seats_in_use()
        };
        let seat = admit_digest(&apf, &digest(&tiny), Default::default())
            .await
            .unwrap();
        let resp = seat.annotate(response::bytes_response(
            StatusCode::OK,
            "text/plain",
            Bytes::from_static(b"large"),
        ));
        assert_eq!(resp.headers()[FLOW_SCHEMA_HEADER], "fs-uid");
        assert_eq!(busy(&apf), 1, "held while the body is unsent");
        use hyper::body::Body as _;
        assert_eq!(
            resp.body().size_hint().exact(),
            Some(5),
            "the length is kept"
        );
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"large");
        assert_eq!(busy(&apf), 0, "given back once sent");
        let mut watch = admit_digest(&apf, &digest(&tiny), Default::default())
            .await
            .unwrap();
        watch.long_running = true;
        let _streaming = watch.annotate(response::bytes_response(
            StatusCode::OK,
            "application/json",
            Bytes::new(),
        ));
        assert_eq!(busy(&apf), 0, "a watch holds no seat once set up");
    }

    #[test]
    fn flow_hashes_are_stable() {
        assert_eq!(hash_flow("a", "b"), hash_flow("a", "b"));
        assert_ne!(hash_flow("a", "b"), hash_flow("ab", ""));
    }
}
