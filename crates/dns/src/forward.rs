//! Forwarding of names outside the cluster to the node's resolvers: CoreDNS `plugin/forward` as
//! kubeadm's Corefile configures it (`forward . /etc/resolv.conf { max_concurrent 1000 }`) in front
//! of the answer cache. Differs: upstreams are tried in order (CoreDNS picks randomly and health-
//! checks them), each with its own timeout; a truncated UDP answer is retried over TCP as CoreDNS's
//! `prefer_udp` does; no connection reuse.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
use hickory_proto::rr::{DNSClass, Name, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::Semaphore;

use crate::cache::Cache;

/// glibc reads at most three nameservers; more are ignored there too.
const MAX_UPSTREAMS: usize = 3;
/// The EDNS buffer size advertised upstream (the DNS flag day 2020 value).
const EDNS_PAYLOAD: u16 = 1232;

#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("no upstream resolvers configured")]
    NoUpstreams,
    #[error("too many forwarded queries in flight")]
    Overloaded,
    #[error("upstream {0} timed out")]
    Timeout(SocketAddr),
    #[error("upstream {0}: {1}")]
    Io(SocketAddr, std::io::Error),
    #[error("upstream {0} sent a bad answer: {1}")]
    BadAnswer(SocketAddr, String),
}

#[derive(Clone, Debug)]
pub struct ForwardConfig {
    pub servers: Vec<SocketAddr>,
    /// Per upstream and try.
    pub timeout: Duration,
    /// CoreDNS forward's `max_concurrent`: beyond it questions are refused.
    pub max_concurrent: usize,
    pub cache_size: usize,
    pub cache_max_ttl: Duration,
}

impl ForwardConfig {
    pub fn new(servers: Vec<SocketAddr>) -> ForwardConfig {
        ForwardConfig {
            servers,
            timeout: Duration::from_secs(2),
            max_concurrent: 1000,
            cache_size: 9984,
            cache_max_ttl: Duration::from_secs(30),
        }
    }
}

/// The `nameserver` lines of a resolv.conf, port 53, the first three; `exclude` (this server's own
/// addresses) left out so a node whose resolv.conf names the cluster DNS does not loop.
pub fn servers_from_resolv_conf(text: &str, exclude: &[SocketAddr]) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            (f.next() == Some("nameserver")).then(|| f.next()).flatten()
        })
        // A zone index (`fe80::1%eth0`) cannot be expressed in a SocketAddr: skip those.
        .filter_map(|s| s.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .filter(|a| !exclude.contains(a))
        .take(MAX_UPSTREAMS)
        .collect()
}

pub struct Forwarder {
    config: ForwardConfig,
    permits: Arc<Semaphore>,
    cache: Cache,
}

impl Forwarder {
    pub fn new(config: ForwardConfig) -> Forwarder {
        Forwarder {
            permits: Arc::new(Semaphore::new(config.max_concurrent.max(1))),
            cache: Cache::new(config.cache_size, config.cache_max_ttl),
            config,
        }
    }

    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// The upstream answer to `name`/`qtype`, from the cache when it is there.
    pub async fn resolve(
        &self,
        name: &Name,
        qtype: RecordType,
        qclass: DNSClass,
    ) -> Result<Message, ForwardError> {
        let key = (
            name.to_lowercase().to_ascii(),
            u16::from(qtype),
            u16::from(qclass),
        );
        if let Some(m) = self.cache.get(&key, Instant::now()) {
            return Ok(m);
        }
        let _permit = self
            .permits
            .try_acquire()
            .map_err(|_| ForwardError::Overloaded)?;
        let mut query = Message::new(rand::random(), MessageType::Query, OpCode::Query);
        query.metadata.recursion_desired = true;
        let mut q = Query::query(name.clone(), qtype);
        q.set_query_class(qclass);
        query.add_query(q);
        let mut edns = Edns::new();
        edns.set_max_payload(EDNS_PAYLOAD);
        query.set_edns(edns);
        let mut last = ForwardError::NoUpstreams;
        for server in &self.config.servers {
            match exchange(*server, &query, self.config.timeout).await {
                Ok(answer) => {
                    self.cache.insert(key, &answer, Instant::now());
                    return Ok(answer);
                }
                Err(e) => {
                    tracing::debug!(error = %e, "dns: forwarding failed");
                    last = e;
                }
            }
        }
        Err(last)
    }
}

/// One question to one upstream: UDP, then TCP when the UDP answer is truncated.
pub async fn exchange(
    server: SocketAddr,
    query: &Message,
    timeout: Duration,
) -> Result<Message, ForwardError> {
    let bytes = query
        .to_vec()
        .map_err(|e| ForwardError::BadAnswer(server, e.to_string()))?;
    let answer = tokio::time::timeout(timeout, udp_exchange(server, query, &bytes))
        .await
        .map_err(|_| ForwardError::Timeout(server))??;
    if !answer.metadata.truncation {
        return Ok(answer);
    }
    tokio::time::timeout(timeout, tcp_exchange(server, query, &bytes))
        .await
        .map_err(|_| ForwardError::Timeout(server))?
}

fn matches(query: &Message, answer: &Message) -> bool {
    answer.metadata.id == query.metadata.id
        && answer.metadata.message_type == MessageType::Response
        && answer.queries.len() == query.queries.len()
        && answer.queries.iter().zip(&query.queries).all(|(a, q)| {
            a.name().eq_ignore_root_case(q.name()) || a.name().eq_ignore_root(q.name())
        })
}

async fn udp_exchange(
    server: SocketAddr,
    query: &Message,
    bytes: &[u8],
) -> Result<Message, ForwardError> {
    let io = |e| ForwardError::Io(server, e);
    let local: SocketAddr = match server {
        SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let socket = UdpSocket::bind(local).await.map_err(io)?;
    socket.connect(server).await.map_err(io)?;
    socket.send(bytes).await.map_err(io)?;
    let mut buf = vec![0u8; 4096];
    loop {
        let n = socket.recv(&mut buf).await.map_err(io)?;
        // Garbage or a stray answer (another id): keep waiting for ours until the timeout.
        if let Ok(answer) = Message::from_vec(&buf[..n]) {
            if matches(query, &answer) {
                return Ok(answer);
            }
        }
    }
}

async fn tcp_exchange(
    server: SocketAddr,
    query: &Message,
    bytes: &[u8],
) -> Result<Message, ForwardError> {
    let io = |e| ForwardError::Io(server, e);
    let len = u16::try_from(bytes.len())
        .map_err(|_| ForwardError::BadAnswer(server, "query too large".into()))?;
    let mut stream = TcpStream::connect(server).await.map_err(io)?;
    let mut framed = Vec::with_capacity(bytes.len() + 2);
    framed.extend_from_slice(&len.to_be_bytes());
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).await.map_err(io)?;
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).await.map_err(io)?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    stream.read_exact(&mut buf).await.map_err(io)?;
    let answer =
        Message::from_vec(&buf).map_err(|e| ForwardError::BadAnswer(server, e.to_string()))?;
    if !matches(query, &answer) {
        return Err(ForwardError::BadAnswer(
            server,
            "answer to another question".into(),
        ));
    }
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::rdata::A;
    use hickory_proto::rr::{RData, Record};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn resolv_conf_parsing() {
        let text = "# comment\nsearch example.com\nnameserver 10.0.0.2\nnameserver fe80::1%eth0\n\
                    nameserver 127.0.0.53\nnameserver ::1\nnameserver 8.8.8.8\noptions ndots:2\n";
        let own: SocketAddr = "127.0.0.53:53".parse().expect("addr");
        let got = servers_from_resolv_conf(text, &[own]);
        let want: Vec<SocketAddr> = ["10.0.0.2:53", "[::1]:53", "8.8.8.8:53"]
            .iter()
            .map(|s| s.parse().expect("addr"))
            .collect();
        assert_eq!(got, want);
    }

    /// A fake upstream on loopback: answers every A question with 192.0.2.1 (TTL 60), counting
    /// questions; with `truncate`, UDP answers are empty and truncated, TCP ones complete.
    async fn fake_upstream(truncate: bool, count: Arc<AtomicUsize>) -> SocketAddr {
        let udp = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let addr = udp.local_addr().expect("addr");
        let tcp = tokio::net::TcpListener::bind(addr).await.expect("bind tcp");
        let reply = |q: &Message, full: bool| {
            let mut m = Message::new(q.metadata.id, MessageType::Response, OpCode::Query);
            m.add_queries(q.queries.clone());
            if full {
                let name = q.queries[0].name().clone();
                m.add_answer(Record::from_rdata(name, 60, RData::A(A::new(192, 0, 2, 1))));
            } else {
                m.metadata.truncation = true;
            }
            m.to_vec().expect("encode")
        };
        let c = count.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            while let Ok((n, from)) = udp.recv_from(&mut buf).await {
                c.fetch_add(1, Ordering::SeqCst);
                let q = Message::from_vec(&buf[..n]).expect("query");
                // A stray answer first: the forwarder must skip it.
                let mut stray = Message::new(
                    q.metadata.id.wrapping_add(1),
                    MessageType::Response,
                    OpCode::Query,
                );
                stray.add_queries(q.queries.clone());
                let _ = udp.send_to(&stray.to_vec().expect("encode"), from).await;
                let _ = udp.send_to(&reply(&q, !truncate), from).await;
            }
        });
        tokio::spawn(async move {
            while let Ok((mut s, _)) = tcp.accept().await {
                let mut len = [0u8; 2];
                if s.read_exact(&mut len).await.is_err() {
                    continue;
                }
                let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
                if s.read_exact(&mut buf).await.is_err() {
                    continue;
                }
                let q = Message::from_vec(&buf).expect("query");
                let r = reply(&q, true);
                let mut out = (r.len() as u16).to_be_bytes().to_vec();
                out.extend_from_slice(&r);
                let _ = s.write_all(&out).await;
            }
        });
        addr
    }

    fn a_of(m: &Message) -> Vec<String> {
        m.answers
            .iter()
            .filter_map(|r| match &r.data {
                RData::A(a) => Some(a.0.to_string()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn forwards_and_caches() {
        let count = Arc::new(AtomicUsize::new(0));
        let up = fake_upstream(false, count.clone()).await;
        let f = Forwarder::new(ForwardConfig::new(vec![up]));
        let name = Name::from_ascii("example.com.").expect("name");
        let m = f
            .resolve(&name, RecordType::A, DNSClass::IN)
            .await
            .expect("answer");
        assert_eq!(a_of(&m), ["192.0.2.1"]);
        let m = f
            .resolve(&name, RecordType::A, DNSClass::IN)
            .await
            .expect("answer");
        assert_eq!(a_of(&m), ["192.0.2.1"]);
        assert_eq!(
            count.load(Ordering::SeqCst),
            1,
            "second answer from the cache"
        );
    }

    #[tokio::test]
    async fn truncated_answers_are_retried_over_tcp() {
        let up = fake_upstream(true, Arc::new(AtomicUsize::new(0))).await;
        let f = Forwarder::new(ForwardConfig::new(vec![up]));
        let name = Name::from_ascii("big.example.").expect("name");
        let m = f
            .resolve(&name, RecordType::A, DNSClass::IN)
            .await
            .expect("answer");
        assert_eq!(a_of(&m), ["192.0.2.1"]);
    }

    #[tokio::test]
    async fn silent_upstreams_time_out_and_the_next_one_answers() {
        // Bound but never answering.
        let silent = UdpSocket::bind("127.0.0.1:0").await.expect("bind");
        let up = fake_upstream(false, Arc::new(AtomicUsize::new(0))).await;
        let mut config = ForwardConfig::new(vec![silent.local_addr().expect("addr"), up]);
        config.timeout = Duration::from_millis(200);
        let f = Forwarder::new(config);
        let name = Name::from_ascii("example.org.").expect("name");
        let started = Instant::now();
        let m = f
            .resolve(&name, RecordType::A, DNSClass::IN)
            .await
            .expect("answer");
        assert_eq!(a_of(&m), ["192.0.2.1"]);
        assert!(started.elapsed() < Duration::from_secs(2));
        let mut config = ForwardConfig::new(vec![silent.local_addr().expect("addr")]);
        config.timeout = Duration::from_millis(100);
        let err = Forwarder::new(config)
            .resolve(&name, RecordType::A, DNSClass::IN)
            .await
            .expect_err("no answer");
        assert!(matches!(err, ForwardError::Timeout(_)), "{err}");
    }

    #[tokio::test]
    async fn no_upstreams_is_an_error() {
        let f = Forwarder::new(ForwardConfig::new(Vec::new()));
        let name = Name::from_ascii("example.org.").expect("name");
        let err = f
            .resolve(&name, RecordType::A, DNSClass::IN)
            .await
            .expect_err("none");
        assert!(matches!(err, ForwardError::NoUpstreams));
    }
}
