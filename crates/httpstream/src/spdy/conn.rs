//! A SPDY connection over any byte stream (upstream `moby/spdystream.Connection` and the
//! `httpstream/spdy` wrapper Kubernetes puts around it): one task reads frames and routes them to
//! streams, one task writes the frames that streams queue. Client connections open odd stream ids,
//! server connections even ones; streams the peer opens arrive on [`Incoming`] and must be answered
//! with [`StreamWriter::reply`] (as Kubernetes' stream handlers do) before the peer may use them.
//!
//! Differences from spdystream: a stream's received data is buffered in a small channel per stream,
//! so a slow reader of one stream holds up the connection's reader (spdystream blocks its frame
//! workers the same way); the connection is torn down when the peer closes its side or when the
//! [`Connection`] handle is dropped.

use std::collections::HashMap;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::{Decoder, FramedRead};
use tokio_util::sync::PollSender;

use super::frame::{
    Frame, FrameDecoder, FrameEncoder, FrameError, Headers, FLAG_FIN, RST_PROTOCOL_ERROR,
    RST_REFUSED_STREAM,
};

/// How long [`Connection::open`] waits for the peer's SYN_REPLY (client-go's
/// `createStreamResponseTimeout`).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);
/// Data frames are cut to this size so one stream cannot hog the connection for long.
const MAX_DATA_FRAME: usize = 32 * 1024;
/// Frames buffered per received stream before the connection's reader waits for its consumer.
const STREAM_BUFFER: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the SPDY connection is closed")]
    Closed,
    #[error("the SPDY stream was reset by the peer (status {0})")]
    Reset(u32),
    #[error("timed out waiting for the SPDY stream's reply")]
    Timeout,
    #[error("the peer sent GOAWAY; no new streams")]
    GoneAway,
}

impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        let kind = match e {
            Error::Timeout => io::ErrorKind::TimedOut,
            Error::Reset(_) => io::ErrorKind::ConnectionReset,
            _ => io::ErrorKind::BrokenPipe,
        };
        io::Error::new(kind, e)
    }
}

enum Out {
    Frame(Frame),
    /// Flush, close the write side and stop.
    Shutdown,
}

struct State {
    next_id: u32,
    last_received: u32,
    /// Streams whose peer side is still open: their data sender and "ended without FIN" flag.
    streams: HashMap<u32, Inbound>,
    /// Streams we opened that wait for SYN_REPLY.
    pending: HashMap<u32, oneshot::Sender<Result<(), Error>>>,
    closed: bool,
    gone_away: bool,
}

struct Inbound {
    data: mpsc::Sender<Bytes>,
    aborted: Arc<AtomicBool>,
}

struct Shared {
    out: mpsc::Sender<Out>,
    server: bool,
    state: Mutex<State>,
}

impl Shared {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; keep going with it.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn send(&self, frame: Frame) -> Result<(), Error> {
        self.out
            .send(Out::Frame(frame))
            .await
            .map_err(|_| Error::Closed)
    }

    /// The peer's side of the connection ended: every stream reads EOF, every open fails.
    fn close_all(&self) {
        let mut st = self.state();
        st.closed = true;
        for (_, inbound) in st.streams.drain() {
            inbound.aborted.store(true, Ordering::SeqCst);
        }
        for (_, waiter) in st.pending.drain() {
            let _ = waiter.send(Err(Error::Closed));
        }
    }
}

/// One end of a SPDY connection. Dropping it sends GOAWAY and closes the connection.
pub struct Connection {
    shared: Arc<Shared>,
    reader: tokio::task::JoinHandle<()>,
    closed: tokio::sync::watch::Receiver<bool>,
}

/// Streams the peer opens.
pub struct Incoming {
    rx: mpsc::Receiver<Stream>,
}

impl Incoming {
    /// The next stream the peer opened, or `None` once the connection is closed.
    pub async fn accept(&mut self) -> Option<Stream> {
        self.rx.recv().await
    }
}

/// A stream: its headers, what the peer sends on it, and a writer.
pub struct Stream {
    pub id: u32,
    pub headers: Headers,
    pub reader: StreamReader,
    pub writer: StreamWriter,
}

impl Stream {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        super::frame::header(&self.headers, name)
    }
}

/// What the peer sends on a stream; EOF once the peer half-closes it (or the connection ends, which
/// [`StreamReader::aborted`] tells apart).
pub struct StreamReader {
    rx: mpsc::Receiver<Bytes>,
    buf: Bytes,
    aborted: Arc<AtomicBool>,
}

impl StreamReader {
    fn new(rx: mpsc::Receiver<Bytes>, aborted: Arc<AtomicBool>) -> StreamReader {
        StreamReader {
            rx,
            buf: Bytes::new(),
            aborted,
        }
    }

    /// Whether the stream ended because the connection did, not with the peer's FIN (or reset).
    pub fn aborted(&self) -> bool {
        self.aborted.load(Ordering::SeqCst)
    }

    /// The next chunk of data, or `None` at EOF.
    pub async fn next(&mut self) -> Option<Bytes> {
        if !self.buf.is_empty() {
            return Some(std::mem::take(&mut self.buf));
        }
        loop {
            let chunk = self.rx.recv().await?;
            if !chunk.is_empty() {
                return Some(chunk);
            }
        }
    }

    /// Everything until EOF.
    pub async fn read_all(&mut self) -> Vec<u8> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next().await {
            all.extend_from_slice(&chunk);
        }
        all
    }
}

impl AsyncRead for StreamReader {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        while self.buf.is_empty() {
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(chunk)) => self.buf = chunk,
                Poll::Ready(None) => return Poll::Ready(Ok(())),
                Poll::Pending => return Poll::Pending,
            }
        }
        let n = buf.remaining().min(self.buf.len());
        buf.put_slice(&self.buf.split_to(n));
        Poll::Ready(Ok(()))
    }
}

/// Sends on a stream. `shutdown` (or [`StreamWriter::close`]) half-closes it with FIN.
pub struct StreamWriter {
    id: u32,
    shared: Arc<Shared>,
    poll: PollSender<Out>,
    finished: bool,
}

impl StreamWriter {
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Answers a stream the peer opened (SYN_REPLY without headers, as Kubernetes' handlers do).
    pub async fn reply(&self) -> Result<(), Error> {
        self.shared
            .send(Frame::SynReply {
                stream_id: self.id,
                flags: 0,
                headers: Vec::new(),
            })
            .await
    }

    /// Sends `data` (in frames of at most 32 KiB).
    pub async fn write(&self, mut data: Bytes) -> Result<(), Error> {
        if self.finished {
            return Err(Error::Closed);
        }
        while !data.is_empty() {
            let chunk = data.split_to(data.len().min(MAX_DATA_FRAME));
            self.shared
                .send(Frame::Data {
                    stream_id: self.id,
                    flags: 0,
                    data: chunk,
                })
                .await?;
        }
        Ok(())
    }

    /// Half-closes the stream: the peer reads EOF.
    pub async fn close(&mut self) -> Result<(), Error> {
        if std::mem::replace(&mut self.finished, true) {
            return Ok(());
        }
        self.shared.send(fin(self.id)).await
    }

    /// Abandons the stream (RST_STREAM CANCEL).
    pub async fn reset(&mut self, status: u32) -> Result<(), Error> {
        self.finished = true;
        self.shared.state().streams.remove(&self.id);
        self.shared
            .send(Frame::RstStream {
                stream_id: self.id,
                status,
            })
            .await
    }
}

fn fin(stream_id: u32) -> Frame {
    Frame::Data {
        stream_id,
        flags: FLAG_FIN,
        data: Bytes::new(),
    }
}

impl AsyncWrite for StreamWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.finished {
            return Poll::Ready(Err(Error::Closed.into()));
        }
        match self.poll.poll_reserve(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return Poll::Ready(Err(Error::Closed.into())),
            Poll::Pending => return Poll::Pending,
        }
        let n = buf.len().min(MAX_DATA_FRAME);
        let frame = Frame::Data {
            stream_id: self.id,
            flags: 0,
            data: Bytes::copy_from_slice(&buf[..n]),
        };
        match self.poll.send_item(Out::Frame(frame)) {
            Ok(()) => Poll::Ready(Ok(n)),
            Err(_) => Poll::Ready(Err(Error::Closed.into())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The connection's writer flushes whenever it runs out of queued frames.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.finished {
            return Poll::Ready(Ok(()));
        }
        match self.poll.poll_reserve(cx) {
            Poll::Ready(Ok(())) => {}
            Poll::Ready(Err(_)) => return Poll::Ready(Err(Error::Closed.into())),
            Poll::Pending => return Poll::Pending,
        }
        let id = self.id;
        self.finished = true;
        match self.poll.send_item(Out::Frame(fin(id))) {
            Ok(()) => Poll::Ready(Ok(())),
            Err(_) => Poll::Ready(Err(Error::Closed.into())),
        }
    }
}

struct Codec(FrameDecoder);

impl Decoder for Codec {
    type Item = Frame;
    type Error = FrameError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
        self.0.decode(src)
    }
}

impl Connection {
    /// The client end (the side that sent the upgrade request).
    pub fn client<T>(io: T) -> (Connection, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        Connection::new(io, false)
    }

    /// The server end (the side that answered 101 Switching Protocols).
    pub fn server<T>(io: T) -> (Connection, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        Connection::new(io, true)
    }

    fn new<T>(io: T, server: bool) -> (Connection, Incoming)
    where
        T: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read, write) = tokio::io::split(io);
        let (out_tx, out_rx) = mpsc::channel::<Out>(64);
        let (incoming_tx, incoming_rx) = mpsc::channel::<Stream>(16);
        let (closed_tx, closed_rx) = tokio::sync::watch::channel(false);
        let shared = Arc::new(Shared {
            out: out_tx,
            server,
            state: Mutex::new(State {
                next_id: if server { 2 } else { 1 },
                last_received: 0,
                streams: HashMap::new(),
                pending: HashMap::new(),
                closed: false,
                gone_away: false,
            }),
        });
        tokio::spawn(write_loop(write, out_rx, closed_tx));
        let reader = tokio::spawn(read_loop(read, shared.clone(), incoming_tx));
        (
            Connection {
                shared,
                reader,
                closed: closed_rx,
            },
            Incoming { rx: incoming_rx },
        )
    }

    /// Opens a stream with `headers` and waits (up to 30 s) for the peer's reply.
    pub async fn open(&self, headers: Headers) -> Result<Stream, Error> {
        let (reply_tx, reply_rx) = oneshot::channel();
        let (data_tx, data_rx) = mpsc::channel(STREAM_BUFFER);
        let aborted = Arc::new(AtomicBool::new(false));
        let id = {
            let mut st = self.shared.state();
            if st.closed {
                return Err(Error::Closed);
            }
            if st.gone_away {
                return Err(Error::GoneAway);
            }
            let id = st.next_id;
            if id > 0x7fff_ffff {
                return Err(Error::Closed);
            }
            st.next_id += 2;
            st.streams.insert(
                id,
                Inbound {
                    data: data_tx,
                    aborted: aborted.clone(),
                },
            );
            st.pending.insert(id, reply_tx);
            id
        };
        self.shared
            .send(Frame::SynStream {
                stream_id: id,
                associated_to: 0,
                priority: 0,
                flags: 0,
                headers: headers.clone(),
            })
            .await?;
        match tokio::time::timeout(REPLY_TIMEOUT, reply_rx).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(e))) => return Err(e),
            Ok(Err(_)) => return Err(Error::Closed),
            Err(_) => {
                self.shared.state().pending.remove(&id);
                return Err(Error::Timeout);
            }
        }
        Ok(Stream {
            id,
            headers,
            reader: StreamReader::new(data_rx, aborted),
            writer: self.writer(id),
        })
    }

    fn writer(&self, id: u32) -> StreamWriter {
        new_writer(&self.shared, id)
    }

    /// Resolves once the connection is closed (either side).
    pub async fn closed(&self) {
        let mut closed = self.closed.clone();
        let _ = closed.wait_for(|c| *c).await;
    }

    /// Sends GOAWAY, flushes what streams queued, and closes the connection's write side.
    pub async fn close(&self) {
        let last = self.shared.state().last_received;
        let _ = self
            .shared
            .send(Frame::GoAway {
                last_good_stream_id: last,
                status: 0,
            })
            .await;
        let _ = self.shared.out.send(Out::Shutdown).await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.reader.abort();
        let _ = self.shared.out.try_send(Out::Shutdown);
    }
}

fn new_writer(shared: &Arc<Shared>, id: u32) -> StreamWriter {
    StreamWriter {
        id,
        shared: shared.clone(),
        poll: PollSender::new(shared.out.clone()),
        finished: false,
    }
}

async fn write_loop<W: AsyncWrite>(
    write: W,
    mut rx: mpsc::Receiver<Out>,
    closed: tokio::sync::watch::Sender<bool>,
) {
    let mut write = std::pin::pin!(write);
    let mut encoder = FrameEncoder::new();
    let mut buf = BytesMut::with_capacity(16 * 1024);
    'outer: while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        // Batch what is already queued into one write.
        while let Some(item) = next.take() {
            match item {
                Out::Frame(frame) => {
                    if let Err(e) = encoder.encode(&frame, &mut buf) {
                        tracing::debug!(error = %e, "cannot encode a SPDY frame");
                        break 'outer;
                    }
                }
                Out::Shutdown => {
                    let _ = write.write_all(&buf).await;
                    break 'outer;
                }
            }
            if buf.len() < 64 * 1024 {
                next = rx.try_recv().ok();
            }
        }
        if write.write_all(&buf).await.is_err() || write.flush().await.is_err() {
            break;
        }
        buf.clear();
    }
    let _ = write.shutdown().await;
    rx.close();
    closed.send_replace(true);
}

async fn read_loop<R: AsyncRead + Unpin>(
    read: R,
    shared: Arc<Shared>,
    incoming: mpsc::Sender<Stream>,
) {
    let mut frames = FramedRead::new(read, Codec(FrameDecoder::new()));
    while let Some(frame) = frames.next().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                tracing::debug!(error = %e, "SPDY connection read failed");
                break;
            }
        };
        match frame {
            Frame::SynStream {
                stream_id,
                flags,
                headers,
                ..
            } => {
                let peer_parity = if shared.server { 1 } else { 0 };
                let valid = {
                    let mut st = shared.state();
                    let ok = stream_id % 2 == peer_parity
                        && stream_id > st.last_received
                        && !st.gone_away;
                    if ok {
                        st.last_received = stream_id;
                    }
                    ok
                };
                if !valid {
                    let _ = shared
                        .send(Frame::RstStream {
                            stream_id,
                            status: RST_PROTOCOL_ERROR,
                        })
                        .await;
                    continue;
                }
                let (data_tx, data_rx) = mpsc::channel(STREAM_BUFFER);
                let aborted = Arc::new(AtomicBool::new(false));
                if flags & FLAG_FIN == 0 {
                    shared.state().streams.insert(
                        stream_id,
                        Inbound {
                            data: data_tx,
                            aborted: aborted.clone(),
                        },
                    );
                }
                let stream = Stream {
                    id: stream_id,
                    headers,
                    reader: StreamReader::new(data_rx, aborted),
                    writer: new_writer(&shared, stream_id),
                };
                if incoming.send(stream).await.is_err() {
                    shared.state().streams.remove(&stream_id);
                    let _ = shared
                        .send(Frame::RstStream {
                            stream_id,
                            status: RST_REFUSED_STREAM,
                        })
                        .await;
                }
            }
            Frame::SynReply {
                stream_id, flags, ..
            } => {
                let waiter = {
                    let mut st = shared.state();
                    if flags & FLAG_FIN != 0 {
                        st.streams.remove(&stream_id);
                    }
                    st.pending.remove(&stream_id)
                };
                if let Some(w) = waiter {
                    let _ = w.send(Ok(()));
                }
            }
            Frame::Headers {
                stream_id, flags, ..
            } => {
                if flags & FLAG_FIN != 0 {
                    shared.state().streams.remove(&stream_id);
                }
            }
            Frame::Data {
                stream_id,
                flags,
                data,
            } => {
                let sender = {
                    let mut st = shared.state();
                    if flags & FLAG_FIN != 0 {
                        st.streams.remove(&stream_id).map(|i| i.data)
                    } else {
                        st.streams.get(&stream_id).map(|i| i.data.clone())
                    }
                };
                if let Some(tx) = sender {
                    if !data.is_empty() {
                        // A reader that went away no longer wants the data; that is not an error.
                        let _ = tx.send(data).await;
                    }
                }
            }
            Frame::RstStream { stream_id, status } => {
                let waiter = {
                    let mut st = shared.state();
                    st.streams.remove(&stream_id);
                    st.pending.remove(&stream_id)
                };
                if let Some(w) = waiter {
                    let _ = w.send(Err(Error::Reset(status)));
                }
            }
            Frame::Ping { id } => {
                // Pings the peer started carry its parity (client odd, server even): echo them.
                let ours = if shared.server { 0 } else { 1 };
                if id % 2 != ours {
                    let _ = shared.send(Frame::Ping { id }).await;
                }
            }
            Frame::GoAway { .. } => {
                shared.state().gone_away = true;
            }
            Frame::Settings { .. } | Frame::WindowUpdate { .. } => {}
        }
    }
    shared.close_all();
    let _ = shared.out.send(Out::Shutdown).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn headers(kind: &str) -> Headers {
        vec![("streamType".to_string(), vec![kind.to_string()])]
    }

    #[tokio::test]
    async fn streams_carry_data_both_ways_and_half_close() {
        let (a, b) = tokio::io::duplex(1024);
        let (client, _client_incoming) = Connection::client(a);
        let (server, mut incoming) = Connection::server(b);
        let server_task = tokio::spawn(async move {
            let mut stdin = incoming.accept().await.expect("stdin stream");
            assert_eq!(stdin.header("streamtype"), Some("stdin"));
            stdin.writer.reply().await.unwrap();
            let mut stdout = incoming.accept().await.expect("stdout stream");
            stdout.writer.reply().await.unwrap();
            // Echo stdin to stdout until the client half-closes stdin, then close stdout.
            let mut data = Vec::new();
            stdin.reader.read_to_end(&mut data).await.unwrap();
            stdout.writer.write(Bytes::from(data)).await.unwrap();
            stdout.writer.close().await.unwrap();
            server
        });
        let mut stdin = client.open(headers("stdin")).await.unwrap();
        let mut stdout = client.open(headers("stdout")).await.unwrap();
        assert_eq!((stdin.id, stdout.id), (1, 3));
        let big = vec![7u8; 100_000];
        stdin.writer.write_all(&big).await.unwrap();
        stdin.writer.shutdown().await.unwrap();
        let echoed = stdout.reader.read_all().await;
        assert_eq!(echoed, big);
        assert!(!stdout.reader.aborted(), "ended with FIN");
        let server = server_task.await.unwrap();
        client.close().await;
        tokio::time::timeout(Duration::from_secs(10), server.closed())
            .await
            .expect("server sees the close");
    }

    #[tokio::test]
    async fn reset_and_closed_connections_fail_opens() {
        let (a, b) = tokio::io::duplex(1024);
        let (client, _ci) = Connection::client(a);
        let (server, mut incoming) = Connection::server(b);
        tokio::spawn(async move {
            let mut s = incoming.accept().await.unwrap();
            s.writer
                .reset(super::super::frame::RST_CANCEL)
                .await
                .unwrap();
            // Keep the server alive until the client is done.
            let _keep = (server, incoming);
            tokio::time::sleep(Duration::from_secs(30)).await;
        });
        match client.open(headers("error")).await {
            Err(Error::Reset(5)) => {}
            Err(e) => panic!("unexpected error {e}"),
            Ok(_) => panic!("the stream should have been reset"),
        }
    }

    #[tokio::test]
    async fn peer_close_ends_every_stream() {
        let (a, b) = tokio::io::duplex(1024);
        let (client, _ci) = Connection::client(a);
        let (server, mut incoming) = Connection::server(b);
        let t = tokio::spawn(async move {
            let s = incoming.accept().await.unwrap();
            s.writer.reply().await.unwrap();
            s.writer.write(Bytes::from_static(b"bye")).await.unwrap();
            server.close().await;
            drop(server);
        });
        let mut s = client.open(headers("stdout")).await.unwrap();
        assert_eq!(s.reader.read_all().await, b"bye");
        assert!(
            s.reader.aborted(),
            "the stream ended with the connection, not with FIN"
        );
        t.await.unwrap();
        assert!(matches!(
            client.open(headers("x")).await,
            Err(Error::Closed | Error::GoneAway)
        ));
    }

    #[tokio::test]
    async fn pings_from_the_peer_are_answered() {
        let (a, b) = tokio::io::duplex(1024);
        let (_client, _ci) = Connection::client(a);
        // Play the server by hand: send a server ping (even id) and expect it back.
        let (mut read, mut write) = tokio::io::split(b);
        let mut enc = FrameEncoder::new();
        let mut out = BytesMut::new();
        enc.encode(&Frame::Ping { id: 2 }, &mut out).unwrap();
        write.write_all(&out).await.unwrap();
        let mut buf = BytesMut::new();
        let mut dec = FrameDecoder::new();
        let frame = loop {
            if let Some(f) = dec.decode(&mut buf).unwrap() {
                break f;
            }
            let mut chunk = [0u8; 64];
            let n = read.read(&mut chunk).await.unwrap();
            assert!(n > 0, "connection closed before the ping reply");
            buf.extend_from_slice(&chunk[..n]);
        };
        assert_eq!(frame, Frame::Ping { id: 2 });
    }
}
