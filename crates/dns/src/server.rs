//! The DNS server: hickory-server's UDP and TCP loops around a handler that answers cluster names
//! from the current [`Snapshot`] ([`crate::records::answer`]) and forwards the rest. Takes the place
//! of CoreDNS's server and plugin chain as kubeadm's Corefile builds it (`kubernetes`, `forward`,
//! `cache`). Differs: no `health`/`ready`/`prometheus`/`loop`/`reload` plugins; requests in flight
//! are bounded here (beyond the bound they are REFUSED, as CoreDNS forward's `max_concurrent`).

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use hickory_proto::op::ResponseCode;
use hickory_proto::op::{Edns, Header, HeaderCounts, Message, MessageType, Metadata, OpCode};
use hickory_proto::rr::{DNSClass, Name, Record, RecordType};
use hickory_server::net::runtime::Time;
use hickory_server::server::{Request, RequestHandler, ResponseHandler, ResponseInfo};
use hickory_server::zone_handler::MessageResponseBuilder;
use hickory_server::Server;
use tokio::net::{TcpListener, UdpSocket};
use tokio::sync::Semaphore;

use crate::forward::Forwarder;
use crate::records::{answer, Answer, Query};
use crate::snapshot::Snapshot;

/// How long a TCP connection may stay idle between questions.
const TCP_TIMEOUT: Duration = Duration::from_secs(5);
/// Answers queued per TCP connection.
const TCP_RESPONSE_BUFFER: usize = 32;
/// Largest UDP answer offered to EDNS clients.
const MAX_UDP_PAYLOAD: u16 = 1232;

/// What the handler answers from; the watch swaps `snapshot` as the cluster changes.
pub struct State {
    snapshot: RwLock<Arc<Snapshot>>,
    forwarder: Forwarder,
    inflight: Arc<Semaphore>,
}

impl State {
    pub fn new(snapshot: Snapshot, forwarder: Forwarder, max_inflight: usize) -> State {
        State {
            snapshot: RwLock::new(Arc::new(snapshot)),
            forwarder,
            inflight: Arc::new(Semaphore::new(max_inflight.max(1))),
        }
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.snapshot
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn replace(&self, snapshot: Snapshot) {
        *self.snapshot.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snapshot);
    }

    /// The response to one question: the cluster's, else the upstreams'. `Err` is SERVFAIL.
    pub async fn resolve(&self, name: &Name, qtype: RecordType) -> Result<Reply, ResponseCode> {
        let snap = self.snapshot();
        match answer(&snap, &Query::new(name.clone(), qtype)) {
            Answer::Local(mut r) => {
                if let Some(target) = r.chase.take() {
                    r.answers.extend(self.chase(&snap, &target, qtype).await);
                }
                Ok(Reply {
                    authoritative: true,
                    rcode: r.rcode,
                    answers: r.answers,
                    authorities: r.authorities,
                    additionals: r.additionals,
                })
            }
            Answer::Forward => match self.forwarder.resolve(name, qtype, DNSClass::IN).await {
                Ok(m) => Ok(Reply::from_upstream(m)),
                Err(crate::forward::ForwardError::Overloaded) => Err(ResponseCode::Refused),
                Err(e) => {
                    tracing::debug!(name = %name, error = %e, "dns: upstream failed");
                    Err(ResponseCode::ServFail)
                }
            },
        }
    }

    /// The records of an ExternalName's CNAME target (CoreDNS resolves it through its `Upstream`):
    /// from the cluster when the target is a cluster name, else from the upstreams. One level only.
    async fn chase(&self, snap: &Snapshot, target: &Name, qtype: RecordType) -> Vec<Record> {
        match answer(snap, &Query::new(target.clone(), qtype)) {
            Answer::Local(r) => r.answers,
            Answer::Forward => match self.forwarder.resolve(target, qtype, DNSClass::IN).await {
                Ok(m) => m.answers,
                Err(e) => {
                    tracing::debug!(target = %target, error = %e, "dns: CNAME target not resolved");
                    Vec::new()
                }
            },
        }
    }
}

/// An answer ready to be sent.
pub struct Reply {
    pub authoritative: bool,
    pub rcode: ResponseCode,
    pub answers: Vec<Record>,
    pub authorities: Vec<Record>,
    pub additionals: Vec<Record>,
}

impl Reply {
    fn from_upstream(m: Message) -> Reply {
        Reply {
            authoritative: false,
            rcode: m.metadata.response_code,
            answers: m.answers,
            authorities: m.authorities,
            // The OPT pseudo-record is per hop: never copied.
            additionals: m
                .additionals
                .into_iter()
                .filter(|r| r.record_type() != RecordType::OPT)
                .collect(),
        }
    }
}

pub struct Handler {
    state: Arc<State>,
}

impl Handler {
    pub fn new(state: Arc<State>) -> Handler {
        Handler { state }
    }
}

fn failed(request: &Request, code: ResponseCode) -> ResponseInfo {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = code;
    ResponseInfo::from(Header {
        metadata,
        counts: HeaderCounts::default(),
    })
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(
        &self,
        request: &Request,
        mut response_handle: R,
    ) -> ResponseInfo {
        let edns = request.edns.as_ref().map(|e| {
            let mut out = Edns::new();
            out.set_max_payload(e.max_payload().clamp(512, MAX_UDP_PAYLOAD));
            out
        });
        let result = if request.metadata.message_type != MessageType::Query
            || request.metadata.op_code != OpCode::Query
        {
            Err(ResponseCode::NotImp)
        } else if request.queries.len() != 1 {
            Err(ResponseCode::FormErr)
        } else {
            let original = request.queries.queries()[0].original();
            if original.query_class() != DNSClass::IN {
                Err(ResponseCode::Refused)
            } else {
                match self.state.inflight.clone().try_acquire_owned() {
                    Err(_) => Err(ResponseCode::Refused),
                    Ok(permit) => {
                        let r = self
                            .state
                            .resolve(original.name(), original.query_type())
                            .await;
                        drop(permit);
                        r
                    }
                }
            }
        };
        let builder = MessageResponseBuilder::new(&request.queries, edns.as_ref());
        match result {
            Ok(reply) => {
                let mut metadata = Metadata::response_from_request(&request.metadata);
                metadata.authoritative = reply.authoritative;
                metadata.recursion_available = true;
                metadata.response_code = reply.rcode;
                let msg = builder.build(
                    metadata,
                    reply.answers.iter(),
                    reply.authorities.iter(),
                    std::iter::empty(),
                    reply.additionals.iter(),
                );
                send(&mut response_handle, msg, request).await
            }
            Err(code) => {
                let msg = builder.error_msg(&request.metadata, code);
                send(&mut response_handle, msg, request).await
            }
        }
    }
}

async fn send<'a, R: ResponseHandler>(
    handle: &mut R,
    msg: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    request: &Request,
) -> ResponseInfo {
    match handle.send_response(msg).await {
        Ok(info) => info,
        Err(e) => {
            tracing::debug!(error = %e, "dns: sending an answer failed");
            failed(request, ResponseCode::ServFail)
        }
    }
}

/// A bound UDP socket and TCP listener on the same port (port 0: a free one), inside the network
/// namespace `netns` when given.
pub async fn bind(
    ip: IpAddr,
    port: u16,
    netns: Option<&std::path::Path>,
) -> std::io::Result<(UdpSocket, TcpListener)> {
    let mut last = None;
    // With port 0 the UDP port may be taken for TCP: try a few.
    for _ in 0..10 {
        let udp = httpstream::netns::bind_udp(netns, SocketAddr::new(ip, port))?;
        let chosen = udp.local_addr()?.port();
        match httpstream::netns::bind_tcp(netns, SocketAddr::new(ip, chosen)) {
            Ok(tcp) => return Ok((udp, tcp)),
            Err(e) if port == 0 => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other("no free port")))
}

/// A running server; stops when dropped.
pub struct Running {
    pub addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }

    pub fn abort_handle(&self) -> tokio::task::AbortHandle {
        self.task.abort_handle()
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves `state` on `udp` and `tcp`.
pub fn serve(state: Arc<State>, udp: UdpSocket, tcp: TcpListener) -> std::io::Result<Running> {
    let addr = udp.local_addr()?;
    let mut server = Server::new(Handler::new(state));
    server.register_socket(udp);
    server.register_listener(tcp, TCP_TIMEOUT, TCP_RESPONSE_BUFFER);
    let task = tokio::spawn(async move {
        // Dropping the server (when this task is aborted) aborts its socket loops.
        if let Err(e) = server.block_until_done().await {
            tracing::error!(error = %e, "dns: server stopped");
        }
    });
    Ok(Running { addr, task })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forward::{ForwardConfig, Forwarder};
    use crate::snapshot::tests::{config, service};
    use hickory_proto::op::Query as WireQuery;

    async fn ask(addr: SocketAddr, m: &Message) -> Message {
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        sock.send_to(&m.to_vec().expect("encode"), addr)
            .await
            .expect("send");
        let mut buf = vec![0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(5), sock.recv(&mut buf))
            .await
            .expect("answer in time")
            .expect("recv");
        Message::from_vec(&buf[..n]).expect("decode")
    }

    fn question(name: &str, class: DNSClass) -> WireQuery {
        let mut q = WireQuery::query(Name::from_ascii(name).expect("name"), RecordType::A);
        q.set_query_class(class);
        q
    }

    #[tokio::test]
    async fn serves_answers_and_protocol_errors() {
        let svc = service(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.50", "ports": [{"port": 80}]}
        }));
        let snap = Snapshot::build(config(), &[svc], &[]);
        let state = Arc::new(State::new(
            snap,
            Forwarder::new(ForwardConfig::new(Vec::new())),
            10,
        ));
        let (udp, tcp) = bind("127.0.0.1".parse().expect("ip"), 0, None)
            .await
            .expect("bind");
        let running = serve(state, udp, tcp).expect("serve");

        let mut m = Message::new(7, MessageType::Query, OpCode::Query);
        m.add_query(question("web.default.svc.cluster.local.", DNSClass::IN));
        let a = ask(running.addr, &m).await;
        assert_eq!(a.metadata.id, 7);
        assert!(a.metadata.authoritative && a.metadata.recursion_available);
        assert_eq!(a.answers.len(), 1);

        // Two questions: FORMERR.
        m.add_query(question("other.default.svc.cluster.local.", DNSClass::IN));
        assert_eq!(
            ask(running.addr, &m).await.metadata.response_code,
            ResponseCode::FormErr
        );
        // Not class IN: REFUSED.
        let mut m = Message::new(8, MessageType::Query, OpCode::Query);
        m.add_query(question("web.default.svc.cluster.local.", DNSClass::CH));
        assert_eq!(
            ask(running.addr, &m).await.metadata.response_code,
            ResponseCode::Refused
        );
        // Outside the cluster without upstreams: SERVFAIL, not a hang.
        let mut m = Message::new(9, MessageType::Query, OpCode::Query);
        m.add_query(question("example.com.", DNSClass::IN));
        assert_eq!(
            ask(running.addr, &m).await.metadata.response_code,
            ResponseCode::ServFail
        );
        // Garbage gets no answer and does not stop the server.
        let sock = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        sock.send_to(b"\x01\x02garbage", running.addr)
            .await
            .expect("send");
        let mut m = Message::new(10, MessageType::Query, OpCode::Query);
        m.add_query(question("web.default.svc.cluster.local.", DNSClass::IN));
        assert_eq!(ask(running.addr, &m).await.answers.len(), 1);
    }
}
