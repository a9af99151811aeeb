//! One etcd watch as a stream of [`WatchItem`]s, resumed on another member when its own fails.
//!
//! A watch is one gRPC stream to one member. When that member dies (or loses its leader, which
//! `require_leader` turns into a cancelled watch), the stream ends; etcd's Go client (clientv3) then
//! opens the watch again on another connection from the revision after the last one delivered, so
//! its callers (upstream's cacher) see no break. This does the same: a transport failure or a
//! "no leader" cancellation re-opens the watch from `last_revision + 1` through the balanced channel
//! (which routes around endpoints it cannot reach), retrying for up to [`RESUME_TIMEOUT`]. Only
//! what cannot be resumed ends the stream: compaction past the resume point, a refusal, or no member
//! answering in time. Without this, every member failure made each API server's watch cache reload
//! everything and close its clients' watches, which then got 410 Gone.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{WatchClient, WatchOptions, WatchRequestSender, WatchResponse};

use super::{classify, convert_event, header_revision, EtcdErrorKind};
use crate::{Error, ProgressRequester, Result, Revision, WatchItem};

/// How long a failed watch keeps trying other members before it reports the failure (upstream's
/// dial timeout).
const RESUME_TIMEOUT: Duration = Duration::from_secs(20);
/// Bound on one attempt to open the watch (a hung member must not take the whole budget).
const OPEN_TIMEOUT: Duration = Duration::from_secs(5);
/// Pause between attempts: doubles from the first to the last.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The state of one watch: etcd's stream and the items of its last response not yet delivered (one
/// response can carry many events, and we deliver them one by one, in order).
pub(super) struct WatchState {
    stream: etcd_client::WatchResponseStream,
    /// The request half of the gRPC stream: progress requests go there. Each watch has its own stream,
    /// so a progress answer concerns this watcher only.
    sender: WatchRequestSender,
    requester: Option<ProgressRequester>,
    prefix: Arc<str>,
    /// What the watch is re-opened with: the channel and the key range.
    client: WatchClient,
    range: (Vec<u8>, Vec<u8>),
    /// Items to deliver; an `Err` is the last item.
    pending: VecDeque<Result<WatchItem>>,
    finished: bool,
    /// The revision of the last event delivered (or the start): where a resumed watch continues, and
    /// the requested revision reported if etcd cancels the watcher for compaction.
    last_revision: Revision,
}

/// Why the stream broke: resumable or not.
enum Broken {
    Resumable(Error),
    Final(Error),
}

impl WatchState {
    /// Opens a watch of `range` after `from_revision` (0: from now) and waits for etcd to confirm
    /// it, so "from now" includes every write that starts after this returns.
    pub(super) async fn open(
        client: WatchClient,
        range: (Vec<u8>, Vec<u8>),
        prefix: Arc<str>,
        from_revision: Revision,
        requester: Option<ProgressRequester>,
    ) -> Result<WatchState> {
        let (sender, stream, created) = open_stream(client.clone(), &range, from_revision).await?;
        let mut state = WatchState {
            stream,
            sender,
            requester,
            prefix,
            client,
            range,
            pending: VecDeque::new(),
            finished: false,
            last_revision: if from_revision > 0 {
                from_revision
            } else {
                header_revision(created.header())?
            },
        };
        // A start revision already known to be compacted (or a refused watch) fails the call itself.
        // The creation response carries no events, so nothing is lost.
        if let Err(Broken::Final(e) | Broken::Resumable(e)) = state.absorb(created) {
            return Err(e);
        }
        Ok(state)
    }

    /// The next item of the watch stream; `None` after an error item.
    pub(super) async fn next(&mut self) -> Option<Result<WatchItem>> {
        loop {
            if let Some(item) = self.pending.pop_front() {
                match &item {
                    Ok(WatchItem::Event(event)) => self.last_revision = event.revision(),
                    Ok(WatchItem::Progress(_)) => {}
                    Err(_) => {
                        self.finished = true;
                        self.pending.clear();
                    }
                }
                return Some(item);
            }
            if self.finished {
                return None;
            }
            let requested = async {
                match &self.requester {
                    Some(requester) => requester.requested().await,
                    None => std::future::pending().await,
                }
            };
            // Both branches are cancel-safe: tonic keeps a partly read message in the stream, and a
            // request permit not taken stays stored.
            let received = tokio::select! {
                received = self.stream.message() => received,
                () = requested => {
                    if let Err(e) = self.sender.request_progress().await {
                        self.broken(Broken::Resumable(e.into())).await;
                    }
                    continue;
                }
            };
            let broken = match received {
                Ok(Some(resp)) => match self.absorb(resp) {
                    Ok(()) => continue,
                    Err(broken) => broken,
                },
                Ok(None) => Broken::Resumable(Error::Backend("etcd: watch stream closed".into())),
                Err(e) if resumable(&e) => Broken::Resumable(e.into()),
                Err(e) => Broken::Final(e.into()),
            };
            self.broken(broken).await;
        }
    }

    /// Resumes a broken watch where it can; otherwise queues the error (after the events already
    /// queued, which were received before the break).
    async fn broken(&mut self, broken: Broken) {
        let error = match broken {
            Broken::Final(e) => e,
            Broken::Resumable(e) => match self.resume(&e).await {
                Ok(()) => return,
                Err(e) => e,
            },
        };
        self.pending.push_back(Err(error));
    }

    /// Opens the watch again after the last revision received, on whichever member answers.
    async fn resume(&mut self, cause: &Error) -> Result<()> {
        // Events already queued were received: continue after the last of them.
        let after = self
            .pending
            .iter()
            .rev()
            .find_map(|item| match item {
                Ok(WatchItem::Event(event)) => Some(event.revision()),
                _ => None,
            })
            .unwrap_or(self.last_revision);
        let give_up = tokio::time::Instant::now() + RESUME_TIMEOUT;
        let mut pause = RETRY_FIRST;
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let opened = tokio::time::timeout(
                OPEN_TIMEOUT,
                open_stream(self.client.clone(), &self.range, after),
            )
            .await;
            let error = match opened {
                Ok(Ok((sender, stream, created))) => {
                    self.sender = sender;
                    self.stream = stream;
                    match self.absorb(created) {
                        Ok(()) => {
                            tracing::warn!(error = %cause, after, attempts, "etcd: watch resumed");
                            return Ok(());
                        }
                        Err(Broken::Final(e)) => return Err(e),
                        Err(Broken::Resumable(e)) => e,
                    }
                }
                Ok(Err(e)) if !resumable(&e) => return Err(e.into()),
                Ok(Err(e)) => e.into(),
                Err(_) => Error::Backend(format!(
                    "etcd: no member opened the watch within {OPEN_TIMEOUT:?}"
                )),
            };
            if tokio::time::Instant::now() + pause > give_up {
                return Err(Error::Backend(format!(
                    "etcd: watch broken ({cause}) and not resumed within {RESUME_TIMEOUT:?}: {error}"
                )));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(RETRY_MAX);
        }
    }

    /// Queues the items of one etcd response; an error ends (or resumes) the watch after the events
    /// before it.
    fn absorb(&mut self, resp: WatchResponse) -> std::result::Result<(), Broken> {
        if resp.compact_revision() > 0 {
            // The start revision (or, for a watcher that fell behind, its next one) is compacted.
            return Err(Broken::Final(Error::Compacted {
                requested: self.last_revision,
                compacted: resp.compact_revision(),
            }));
        }
        if resp.canceled() {
            let error = Error::Backend(format!("etcd: watch cancelled: {}", resp.cancel_reason()));
            // `require_leader`: the member lost its leader; another member (or this one after the
            // election) serves the watch again.
            return Err(if resp.cancel_reason().contains("no leader") {
                Broken::Resumable(error)
            } else {
                Broken::Final(error)
            });
        }
        if resp.events().is_empty() {
            // Neither a creation nor events: a progress notification. Its header carries the revision
            // the watcher is synced to (only asked for when the server orders it with the events).
            if !resp.created() && self.requester.is_some() {
                let revision = header_revision(resp.header()).map_err(Broken::Final)?;
                self.pending.push_back(Ok(WatchItem::Progress(revision)));
            }
            return Ok(());
        }
        for event in resp.events() {
            let event = convert_event(&self.prefix, event).map_err(Broken::Final)?;
            self.pending.push_back(Ok(WatchItem::Event(event)));
        }
        Ok(())
    }
}

/// One watch request on a new gRPC stream, and etcd's creation response.
async fn open_stream(
    mut client: WatchClient,
    (start, end): &(Vec<u8>, Vec<u8>),
    after: Revision,
) -> std::result::Result<
    (
        WatchRequestSender,
        etcd_client::WatchResponseStream,
        WatchResponse,
    ),
    etcd_client::Error,
> {
    let mut options = WatchOptions::new().with_range(end.clone()).with_prev_key();
    if after > 0 {
        // etcd's start revision is inclusive; ours is exclusive.
        options = options.with_start_revision(after + 1);
    }
    let stream = client.watch(start.clone(), Some(options)).await?;
    let (sender, mut stream) = stream.split();
    let created = stream.message().await?.ok_or_else(|| {
        etcd_client::Error::WatchError("watch stream closed before the watch was created".into())
    })?;
    Ok((sender, stream, created))
}

/// Whether an error of the watch's stream is the connection's (try another member) rather than an
/// answer about the watch itself.
fn resumable(e: &etcd_client::Error) -> bool {
    match e {
        etcd_client::Error::GRpcStatus(status) => {
            // gRPC's codes (tonic is not a direct dependency): Cancelled 1, Unknown 2 (a reset
            // connection), DeadlineExceeded 4, Aborted 10, Internal 13, Unavailable 14.
            !matches!(
                classify(e),
                EtcdErrorKind::Compacted | EtcdErrorKind::FutureRevision
            ) && matches!(status.code() as i32, 1 | 2 | 4 | 10 | 13 | 14)
        }
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::WatchError(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;
    use futures::StreamExt;

    use crate::etcd::EtcdStore;
    use crate::etcd_process::EtcdCluster;
    use crate::Store;

    /// Writes `key`, retrying while the cluster settles after a kill (a write in flight on the dead
    /// member fails; the balanced channel then routes around it).
    async fn create(store: &EtcdStore, key: &str) -> i64 {
        let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            match store.create(key, Bytes::from_static(b"v")).await {
                Ok(kv) => return kv.mod_revision,
                Err(e) => {
                    assert!(tokio::time::Instant::now() < give_up, "create {key}: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// Each member in turn is killed (the watch's own among them, whichever it is) and started
    /// again: the watch delivers every write, in order, with no error.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_watch_survives_the_death_of_each_member_in_turn() {
        let mut cluster = EtcdCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
        let store = EtcdStore::connect(&cluster.endpoints(), "/resume")
            .await
            .expect("connect");
        let mut watch = store.watch("/k/", 0).await.expect("watch");
        let mut written = vec![create(&store, "/k/0").await];
        for member in 0..3 {
            cluster.kill(member);
            written.push(create(&store, &format!("/k/{}a", member)).await);
            cluster.restart(member).unwrap_or_else(|e| panic!("{e}"));
            written.push(create(&store, &format!("/k/{}b", member)).await);
        }
        let mut seen = Vec::new();
        while seen.len() < written.len() {
            let event = tokio::time::timeout(Duration::from_secs(30), watch.next())
                .await
                .expect("an event within 30 s")
                .expect("the watch goes on")
                .expect("no error");
            seen.push(event.revision());
        }
        assert_eq!(seen, written);
    }
}
