//! One request's audit record as it goes through the handler chain (upstream `WithAudit`,
//! `WithFailedAuthenticationAudit` and `pkg/audit/request.go`): the policy's decision, the
//! `RequestReceived` event, what impersonation, authorization and admission add, and the final
//! event(s) once the response is produced.
//!
//! Stages: `RequestReceived` once authenticated; for long-running requests (watch, and the `log`,
//! `exec`, `attach`, `portforward` and `proxy` subresources) `ResponseStarted` when the response
//! head is ready and `ResponseComplete` when its body is done (dropped by the connection); for the
//! others `ResponseComplete` when the response is produced; `Panic` when the handler panicked. A
//! request that failed authentication gets one `ResponseStarted` event, as upstream.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use chrono::Utc;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;

use super::event::{Event, ObjectRef, ResponseStatus, User};
use super::policy::{Attributes, Level, Policy, ResourceAttributes, Stage, Stages};
use super::Backends;
use crate::authn::UserInfo;
use crate::request::{self, Query, Target};
use crate::response::{self, Body};

/// The request and response header carrying the audit ID.
pub const AUDIT_ID_HEADER: &str = "audit-id";
const MAX_USER_AGENT: usize = 1024;
/// Response bodies larger than this are not kept for the log (the request body limit is 3 MiB).
const MAX_RESPONSE_BODY: u64 = 3 << 20;
/// Forwarding headers trusted for at most this many addresses.
const MAX_SOURCE_IPS: usize = 16;

/// Audit annotations admission produced, handed from the REST handlers to the audit layer on the
/// response (upstream keeps them in the request context).
#[derive(Clone, Debug)]
pub struct AdmissionAnnotations(pub Vec<(String, String)>);

/// Made once per request when auditing is on; `pending` only when the policy's level is above
/// None. Everything here is skipped when auditing is off.
pub struct RequestAudit {
    id: HeaderValue,
    pending: Option<Box<Pending>>,
    /// The `RequestReceived` event could not be recorded and the backend asks for the request to
    /// fail (`--audit-webhook-mode=blocking-strict`).
    rejected: bool,
}

struct Pending {
    backend: Arc<Backends>,
    event: Event,
    omit: Stages,
    long_running: bool,
    failed_authentication: bool,
    phase: Phase,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The handler is running: dropped here means it panicked or the client went away.
    Handling,
    /// A long-running response's body is being sent.
    Streaming,
    Done,
}

/// What the policy sees of a request, and the object reference of a resource request.
struct Described {
    verb: String,
    resource: Option<request::ResourceRequest>,
}

fn describe<B>(req: &Request<B>) -> Described {
    let path = req.uri().path();
    let query = Query::parse(req.uri().query());
    let resource = match request::parse(req.method(), path, &query) {
        Ok(Target::Resource(r)) => Some(r),
        Ok(_) => None,
        // Proxy paths go on after the subresource; upstream's RequestInfo ignores the rest.
        Err(_) => match request::parse(req.method(), &truncated(path), &query) {
            Ok(Target::Resource(r)) => Some(r),
            _ => None,
        },
    };
    let verb = match &resource {
        Some(r) => r.verb.as_str().to_string(),
        None => req.method().as_str().to_ascii_lowercase(),
    };
    Described { verb, resource }
}

/// A resource path cut after its subresource segment.
fn truncated(path: &str) -> String {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).take(12).collect();
    let mut keep = if segments.first() == Some(&"api") {
        2
    } else {
        3
    };
    if segments.get(keep) == Some(&"watch") {
        keep += 1;
    }
    if segments.get(keep) == Some(&"namespaces") && segments.len() > keep + 3 {
        keep += 2;
    }
    keep += 3;
    let kept = &segments[..keep.min(segments.len())];
    format!("/{}", kept.join("/"))
}

impl super::Auditor {
    /// Decides the level of an authenticated request and writes its `RequestReceived` event.
    pub fn begin<B>(&self, user: &UserInfo, req: &Request<B>, peer: SocketAddr) -> RequestAudit {
        self.record(Some(user), req, peer, false)
    }

    /// The record of a request whose credentials were refused (answered 401).
    pub fn unauthenticated<B>(&self, req: &Request<B>, peer: SocketAddr) -> RequestAudit {
        self.record(None, req, peer, true)
    }

    fn record<B>(
        &self,
        user: Option<&UserInfo>,
        req: &Request<B>,
        peer: SocketAddr,
        failed_authentication: bool,
    ) -> RequestAudit {
        let received = Utc::now();
        let audit_id = req
            .headers()
            .get(AUDIT_ID_HEADER)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map_or_else(|| uuid::Uuid::new_v4().to_string(), str::to_string);
        let id = HeaderValue::from_str(&audit_id).unwrap_or(HeaderValue::from_static(""));
        let described = describe(req);
        let decision = decide(&self.policy, user, &described, req.uri().path());
        if decision.level == Level::None {
            return RequestAudit {
                id,
                pending: None,
                rejected: false,
            };
        }
        let long_running = described.verb == "watch"
            || described.resource.as_ref().is_some_and(|r| {
                matches!(
                    r.subresource.as_deref(),
                    Some("log" | "exec" | "attach" | "portforward" | "proxy")
                )
            });
        let object_ref = described.resource.map(|r| ObjectRef {
            resource: r.resource,
            namespace: r.namespace.unwrap_or_default(),
            name: r.name.unwrap_or_default(),
            api_group: r.group,
            api_version: r.version,
            subresource: r.subresource.unwrap_or_default(),
            ..Default::default()
        });
        let mut event = Event {
            level: decision.level,
            audit_id,
            stage: Stage::RequestReceived,
            request_uri: req.uri().path_and_query().map_or_else(
                || req.uri().path().to_string(),
                |pq| pq.as_str().to_string(),
            ),
            verb: described.verb,
            user: user.map(User::from),
            source_ips: source_ips(req.headers(), peer.ip()),
            user_agent: user_agent(req.headers()),
            object_ref,
            request_received: received,
            stage_time: received,
            ..Default::default()
        };
        event.bodies.omit_managed_fields = decision.omit_managed_fields;
        if failed_authentication {
            event.response_status = Some(ResponseStatus {
                message: auth_methods(req),
                ..Default::default()
            });
        }
        let pending = Pending {
            backend: self.backend.clone(),
            event,
            omit: decision.omit_stages,
            long_running,
            failed_authentication,
            phase: Phase::Handling,
        };
        let rejected = !failed_authentication && !pending.emit(Stage::RequestReceived);
        if rejected {
            self.backend.note_rejected();
        }
        RequestAudit {
            id,
            pending: Some(Box::new(pending)),
            rejected,
        }
    }
}

fn decide(
    policy: &Policy,
    user: Option<&UserInfo>,
    d: &Described,
    path: &str,
) -> super::policy::Decision {
    let resource = d.resource.as_ref().map(|r| ResourceAttributes {
        group: &r.group,
        resource: &r.resource,
        subresource: r.subresource.as_deref().unwrap_or(""),
        namespace: r.namespace.as_deref().unwrap_or(""),
        name: r.name.as_deref().unwrap_or(""),
    });
    policy.decide(&Attributes {
        user,
        verb: &d.verb,
        resource,
        path,
    })
}

/// Upstream's `utilnet.SourceIPs`: the `X-Forwarded-For` chain, then `X-Real-Ip` if not in it,
/// then the peer unless it repeats the last one.
fn source_ips(headers: &HeaderMap, peer: IpAddr) -> Vec<String> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let mut ips: Vec<IpAddr> = header("x-forwarded-for")
        .into_iter()
        .flat_map(|v| v.split(','))
        .filter_map(|part| part.trim().parse().ok())
        .take(MAX_SOURCE_IPS)
        .collect();
    if let Some(ip) = header("x-real-ip").and_then(|v| v.trim().parse::<IpAddr>().ok()) {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    let peer = peer.to_canonical();
    if ips.last() != Some(&peer) {
        ips.push(peer);
    }
    ips.iter().map(IpAddr::to_string).collect()
}

fn user_agent(headers: &HeaderMap) -> String {
    let Some(value) = headers.get(http::header::USER_AGENT) else {
        return String::new();
    };
    let mut ua = String::from_utf8_lossy(value.as_bytes()).into_owned();
    if ua.len() > MAX_USER_AGENT {
        let mut cut = MAX_USER_AGENT;
        while !ua.is_char_boundary(cut) {
            cut -= 1;
        }
        ua.truncate(cut);
        ua.push_str("...TRUNCATED");
    }
    ua
}

/// Upstream's `getAuthMethods`: which credentials were tried.
fn auth_methods<B>(req: &Request<B>) -> String {
    let mut methods = Vec::new();
    let auth = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .trim();
    let mut parts = auth.split(' ');
    let scheme = parts.next().unwrap_or("");
    if scheme.eq_ignore_ascii_case("basic") && parts.next().is_some() {
        methods.push("basic");
    }
    if scheme.eq_ignore_ascii_case("bearer") && auth.contains(' ') {
        methods.push("bearer");
    }
    if Query::parse(req.uri().query())
        .value("access_token")
        .is_some()
    {
        methods.push("access_token");
    }
    if methods.is_empty() {
        "Authentication failed, no credentials provided".into()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}

impl RequestAudit {
    /// Whether the request must fail because its `RequestReceived` event could not be recorded
    /// (upstream's `blocking-strict`; answered 500 "failed to store audit event").
    pub fn rejected(&self) -> bool {
        self.rejected
    }

    /// The user the request acts as after impersonation headers were honoured.
    pub fn impersonated(&mut self, headers: &HeaderMap, user: &UserInfo) {
        let Some(p) = &mut self.pending else {
            return;
        };
        if ["impersonate-user", "impersonate-uid", "impersonate-group"]
            .iter()
            .any(|h| headers.contains_key(*h))
        {
            p.event.impersonated_user = Some(User::from(user));
        }
    }

    /// The authorizer's decision: `Ok(reason)` allowed, `Err(())` refused (upstream's
    /// `authorization.k8s.io/decision` and `/reason` annotations).
    pub fn authorized(&mut self, decision: Result<&str, ()>) {
        let Some(p) = &mut self.pending else {
            return;
        };
        let (decision, reason) = match decision {
            Ok(reason) => ("allow", reason),
            Err(()) => ("forbid", ""),
        };
        let a = &mut p.event.annotations;
        a.insert("authorization.k8s.io/decision".into(), decision.into());
        a.insert("authorization.k8s.io/reason".into(), reason.into());
    }

    /// The request body as read. It is kept (shared, not copied) as `requestObject` at level
    /// Request and up, and for creates and updates to complete the object reference from its
    /// metadata, as upstream does with the decoded object.
    pub fn request_body(&mut self, body: &Bytes) {
        let Some(p) = &mut self.pending else {
            return;
        };
        if body.is_empty() {
            return;
        }
        let bodies = &mut p.event.bodies;
        bodies.request_object = p.event.level >= Level::Request;
        bodies.fill_object_ref = matches!(p.event.verb.as_str(), "create" | "update");
        if bodies.request_object || bodies.fill_object_ref {
            bodies.request = Some(body.clone());
        }
    }

    /// Sets the `Audit-Id` header and writes the final event(s) for `resp`.
    pub async fn respond(self, mut resp: Response<Body>) -> Response<Body> {
        let RequestAudit { id, pending, .. } = self;
        if !id.is_empty() {
            resp.headers_mut().insert(AUDIT_ID_HEADER, id);
        }
        let Some(mut p) = pending else {
            return resp;
        };
        if let Some(AdmissionAnnotations(list)) = resp.extensions_mut().remove() {
            for (key, value) in list {
                p.event.annotations.entry(key).or_insert(value);
            }
        }
        let code = resp.status().as_u16();
        p.event
            .response_status
            .get_or_insert_with(Default::default)
            .code = code;
        if p.wants_response_body(&resp) {
            let (parts, body) = resp.into_parts();
            let Ok(collected) = body.collect().await;
            let bytes = collected.to_bytes();
            p.event.bodies.response_object = p.event.level >= Level::RequestResponse;
            p.event.bodies.response = Some(bytes.clone());
            resp = Response::from_parts(parts, response::full(bytes));
        }
        if p.failed_authentication {
            p.emit_last(Stage::ResponseStarted);
            return resp;
        }
        if !p.long_running {
            p.emit_last(Stage::ResponseComplete);
            return resp;
        }
        p.emit(Stage::ResponseStarted);
        p.phase = Phase::Streaming;
        // `ResponseComplete` is written when the connection drops the body (the stream ended or
        // the client left).
        response::hold(resp, p)
    }
}

impl Pending {
    /// A body is kept when it is a JSON or protobuf answer of known, bounded size that the log
    /// needs: to log it (RequestResponse), or for its `Status` (errors, deletes).
    fn wants_response_body(&self, resp: &Response<Body>) -> bool {
        let needed = self.event.level >= Level::RequestResponse
            || resp.status().as_u16() >= 300
            || self.event.verb == "delete";
        let readable = |v: &HeaderValue| {
            let v = v.as_bytes();
            v.starts_with(response::JSON.as_bytes())
                || v.starts_with(apimachinery::serializer::protobuf::MEDIA_TYPE.as_bytes())
        };
        needed
            && resp
                .headers()
                .get(http::header::CONTENT_TYPE)
                .is_some_and(readable)
            && hyper::body::Body::size_hint(resp.body())
                .exact()
                .is_some_and(|n| n <= MAX_RESPONSE_BODY)
    }

    /// False when a backend reports the event lost.
    fn emit(&self, stage: Stage) -> bool {
        if self.omit.contains(stage) {
            return true;
        }
        let mut event = self.event.clone();
        stamp(&mut event, stage);
        self.backend.process(event)
    }

    /// The last event: the record is moved, not copied.
    fn emit_last(&mut self, stage: Stage) {
        self.phase = Phase::Done;
        if self.omit.contains(stage) {
            return;
        }
        let mut event = std::mem::take(&mut self.event);
        stamp(&mut event, stage);
        self.backend.process(event);
    }
}

fn stamp(event: &mut Event, stage: Stage) {
    event.stage = stage;
    event.stage_time = if stage == Stage::RequestReceived {
        event.request_received
    } else {
        Utc::now()
    };
}

impl Drop for Pending {
    fn drop(&mut self) {
        match self.phase {
            Phase::Done => {}
            Phase::Streaming => self.emit_last(Stage::ResponseComplete),
            Phase::Handling if std::thread::panicking() => {
                self.event.response_status = Some(ResponseStatus {
                    code: 500,
                    status: "Failure".into(),
                    reason: "InternalError".into(),
                    message: "APIServer panic'd".into(),
                    ..Default::default()
                });
                self.emit_last(Stage::Panic);
            }
            Phase::Handling => {
                // The client went away before the answer: upstream's faked status for a handler
                // that wrote nothing.
                self.event.response_status = Some(ResponseStatus {
                    code: 200,
                    status: "Success".into(),
                    message: "Connection closed early".into(),
                    ..Default::default()
                });
                if self.long_running {
                    self.emit(Stage::ResponseStarted);
                }
                self.emit_last(Stage::ResponseComplete);
            }
        }
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
