//! Where events go and how they are written (upstream client-go `tools/record/event.go`: the
//! `EventSink` interface, `recordToSink` and `recordEvent`).
//!
//! As upstream: a repeat of a known event is a PATCH (strategic merge patch of `count`,
//! `lastTimestamp`, `message`) of the existing Event, falling back to a create when that Event is gone;
//! a rejection by the server (any API status error) is logged and not retried; a transport error is
//! retried up to 12 times, 10 s apart, the first wait randomized; after
//! [`EventBroadcaster::shutdown`](super::EventBroadcaster::shutdown) each event gets one try. Writes use
//! JSON. Differences: the sink has no `Update` (upstream's recorder never uses it).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error};

use super::correlator::EventCorrelator;

/// Why a sink write failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SinkError {
    /// The Event to patch does not exist (any more): create it instead.
    #[error("event not found")]
    NotFound,
    /// The server rejected the request; retrying would not help.
    #[error("server rejected event: {0}")]
    Rejected(String),
    /// The server could not be reached or answered unexpectedly; retry later.
    #[error("unable to write event: {0}")]
    Transport(String),
}

/// Stores events (upstream `EventSink`). Must write into `event.metadata.namespace`.
pub trait EventSink: Send + Sync + 'static {
    fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<Event, SinkError>>;
    fn patch<'a>(
        &'a self,
        event: &'a Event,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Event, SinkError>>;
}

/// Writes `core/v1` Events through the API server.
#[derive(Clone)]
pub struct ApiEventSink {
    client: kube::Client,
}

impl ApiEventSink {
    pub fn new(client: kube::Client) -> ApiEventSink {
        ApiEventSink { client }
    }

    fn api(&self, event: &Event) -> Api<Event> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        Api::namespaced(self.client.clone(), ns)
    }
}

fn classify(e: kube::Error) -> SinkError {
    match e {
        kube::Error::Api(status) if status.code == 404 => SinkError::NotFound,
        kube::Error::Api(status) => SinkError::Rejected(format!(
            "{} ({} {})",
            status.message, status.code, status.reason
        )),
        other => SinkError::Transport(other.to_string()),
    }
}

impl EventSink for ApiEventSink {
    fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<Event, SinkError>> {
        Box::pin(async move {
            self.api(event)
                .create(&PostParams::default(), event)
                .await
                .map_err(classify)
        })
    }

    fn patch<'a>(
        &'a self,
        event: &'a Event,
        patch: &'a serde_json::Value,
    ) -> BoxFuture<'a, Result<Event, SinkError>> {
        Box::pin(async move {
            let name = event.metadata.name.as_deref().unwrap_or_default();
            self.api(event)
                .patch(name, &PatchParams::default(), &Patch::Strategic(patch))
                .await
                .map_err(classify)
        })
    }
}

/// Retry policy of the sink loop (upstream `maxTriesPerEvent`, `defaultSleepDuration`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct RetryPolicy {
    pub max_tries: u32,
    pub sleep: Duration,
}

/// Correlates one event and writes it, retrying transport errors (upstream `recordToSink`).
pub(crate) async fn record_to_sink(
    sink: &Arc<dyn EventSink>,
    correlator: &mut EventCorrelator,
    event: Event,
    retry: RetryPolicy,
    shutdown: &CancellationToken,
) {
    let Some(mut result) = correlator.correlate(event, Timestamp::now()) else {
        debug!("event dropped by the spam filter");
        return;
    };
    let mut tries = 0;
    loop {
        if record_event(
            sink.as_ref(),
            &mut result.event,
            result.patch.as_ref(),
            correlator,
        )
        .await
        {
            return;
        }
        tries += 1;
        if tries >= retry.max_tries {
            error!(event = ?result.event.metadata.name, "unable to write event (retry limit exceeded)");
            return;
        }
        if shutdown.is_cancelled() {
            error!(event = ?result.event.metadata.name, "unable to write event (broadcaster is shut down)");
            return;
        }
        // Randomize the first sleep so clients do not retry in lockstep after an outage.
        let delay = if tries == 1 {
            retry.sleep.mul_f64(rand::random::<f64>())
        } else {
            retry.sleep
        };
        tokio::select! {
            _ = shutdown.cancelled() => {
                error!(event = ?result.event.metadata.name, "unable to write event (broadcaster is shut down)");
                return;
            }
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One write attempt (upstream `recordEvent`): true when done (written or abandoned), false to retry.
async fn record_event(
    sink: &dyn EventSink,
    event: &mut Event,
    patch: Option<&serde_json::Value>,
    correlator: &mut EventCorrelator,
) -> bool {
    let update_existing = event.count.unwrap_or(1) > 1;
    let mut outcome = None;
    if let (true, Some(patch)) = (update_existing, patch) {
        outcome = Some(sink.patch(event, patch).await);
    }
    // The existing Event may have been deleted (or expired): create it instead.
    let result = match outcome {
        Some(Err(SinkError::NotFound)) | None => {
            event.metadata.resource_version = None;
            sink.create(event).await
        }
        Some(other) => other,
    };
    match result {
        Ok(stored) => {
            correlator.update_state(&stored);
            true
        }
        Err(SinkError::Transport(msg)) => {
            error!(error = %msg, event = ?event.metadata.name, "unable to write event (may retry after sleeping)");
            false
        }
        Err(e) => {
            error!(error = %e, event = ?event.metadata.name, "server rejected event (will not retry)");
            true
        }
    }
}
