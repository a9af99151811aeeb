//! `--audit-log-truncate-*` and `--audit-webhook-truncate-*` (upstream `plugin/pkg/audit/truncate`):
//! an event whose JSON is larger than the max event size loses its `requestObject` and
//! `responseObject` (only events at level Request and up have them) and is annotated
//! `audit.k8s.io/truncated: "true"`; if it is still too large it is dropped and counted as an
//! error. Batches are split so that none is larger than the max batch size.
//!
//! Where rkube differs: upstream measures and trims on the request path, before events are
//! buffered; rkube does it where events are serialized anyway (the log's writer thread, the
//! webhook's sender), so the request path never serializes bodies. The outcome per event is the
//! same. Upstream's truncating backend sees one event per call, so in practice it never splits a
//! batch; rkube's webhook splits the batches its buffer forms, which is what the flag describes.

use super::event::Event;
use super::policy::Level;

/// Upstream's annotation on a truncated event.
pub const TRUNCATED_ANNOTATION: &str = "audit.k8s.io/truncated";
/// Upstream's defaults: 100 KiB per event, 10 MiB per batch.
pub const DEFAULT_MAX_EVENT_SIZE: u64 = 100 * 1024;
pub const DEFAULT_MAX_BATCH_SIZE: u64 = 10 * 1024 * 1024;

/// One backend's truncation limits (present only when `--audit-<plugin>-truncate-enabled`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TruncateConfig {
    pub max_event_size: u64,
    pub max_batch_size: u64,
}

impl Default for TruncateConfig {
    fn default() -> Self {
        TruncateConfig {
            max_event_size: DEFAULT_MAX_EVENT_SIZE,
            max_batch_size: DEFAULT_MAX_BATCH_SIZE,
        }
    }
}

impl TruncateConfig {
    /// Upstream's `AuditTruncateOptions.Validate` (its texts; `plugin` is `log` or `webhook`).
    pub fn validate(&self, plugin: &str) -> Result<(), String> {
        if self.max_event_size == 0 {
            return Err(format!(
                "invalid audit truncate {plugin} max event size {}, must be a positive number",
                self.max_event_size
            ));
        }
        if self.max_batch_size < self.max_event_size {
            return Err(format!(
                "invalid audit truncate {plugin} max batch size {}, must be greater than max event size ({})",
                self.max_batch_size, self.max_event_size
            ));
        }
        Ok(())
    }
}

/// Why an event was not written.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TruncateError {
    #[error("event is too large even after truncation")]
    TooLarge,
}

/// The event as one JSON line (newline included), within `limit` when given: first whole, then
/// without its request and response objects, else refused.
pub fn to_json_line(
    event: Event,
    limit: Option<&TruncateConfig>,
) -> Result<Vec<u8>, TruncateError> {
    let Some(limit) = limit else {
        return Ok(event.to_json_line());
    };
    // Kept for a second try only where there is something to drop (bodies are shared, not
    // copied, so the clone is of the metadata).
    let retry = (event.level >= Level::Request).then(|| event.clone());
    let line = event.to_json_line();
    if within(&line, limit) {
        return Ok(line);
    }
    let Some(mut event) = retry else {
        return Err(TruncateError::TooLarge);
    };
    event.bodies.request_object = false;
    event.bodies.response_object = false;
    event
        .annotations
        .insert(TRUNCATED_ANNOTATION.into(), "true".into());
    let line = event.to_json_line();
    if within(&line, limit) {
        Ok(line)
    } else {
        Err(TruncateError::TooLarge)
    }
}

/// The size upstream compares is the encoded event's, without the line's newline.
fn within(line: &[u8], limit: &TruncateConfig) -> bool {
    let len = line.strip_suffix(b"\n").unwrap_or(line).len() as u64;
    len <= limit.max_event_size
}

/// Splits serialized events (each within the event limit) into runs whose total size stays within
/// `max_batch_size` (a run has at least one event), as upstream's truncating backend forms
/// batches.
pub fn batches(lines: Vec<Vec<u8>>, max_batch_size: u64) -> Vec<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut size = 0u64;
    for line in lines {
        let len = line.len() as u64;
        match out.last_mut() {
            Some(run) if size.saturating_add(len) <= max_batch_size => {
                size += len;
                run.push(line);
            }
            _ => {
                size = len;
                out.push(vec![line]);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde_json::Value;

    fn event(level: Level, body_bytes: usize) -> Event {
        let body = format!(
            r#"{{"kind":"ConfigMap","apiVersion":"v1","metadata":{{"name":"c","namespace":"d"}},"data":{{"k":"{}"}}}}"#,
            "x".repeat(body_bytes)
        );
        let mut e = Event {
            level,
            audit_id: "id".into(),
            verb: "create".into(),
            request_uri: "/api/v1/namespaces/d/configmaps".into(),
            ..Default::default()
        };
        e.bodies.request = Some(Bytes::from(body.clone()));
        e.bodies.request_object = level >= Level::Request;
        e.bodies.response = Some(Bytes::from(body));
        e.bodies.response_object = level >= Level::RequestResponse;
        e
    }

    fn parse(line: &[u8]) -> Value {
        serde_json::from_slice(line).unwrap()
    }

    #[test]
    fn small_events_pass_whole_and_large_ones_lose_their_objects() {
        let limit = TruncateConfig {
            max_event_size: 2048,
            max_batch_size: 4096,
        };
        let small = parse(&to_json_line(event(Level::RequestResponse, 10), Some(&limit)).unwrap());
        assert!(small["requestObject"].is_object() && small["responseObject"].is_object());
        assert!(small.get("annotations").is_none());

        let line = to_json_line(event(Level::RequestResponse, 5000), Some(&limit)).unwrap();
        assert!(line.len() <= 2049);
        let cut = parse(&line);
        assert!(cut.get("requestObject").is_none() && cut.get("responseObject").is_none());
        assert_eq!(cut["annotations"][TRUNCATED_ANNOTATION], "true");
        assert_eq!(cut["verb"], "create");
        // The object reference taken from the request body stays.
        assert_eq!(cut["auditID"], "id");

        // Without a limit nothing is cut.
        let whole = parse(&to_json_line(event(Level::RequestResponse, 5000), None).unwrap());
        assert!(whole["requestObject"].is_object());
    }

    #[test]
    fn metadata_events_are_not_trimmed_and_too_large_ones_are_refused() {
        let tiny = TruncateConfig {
            max_event_size: 50,
            max_batch_size: 50,
        };
        // Metadata level: nothing to drop; over the limit it is refused as it is.
        assert_eq!(
            to_json_line(event(Level::Metadata, 10), Some(&tiny)),
            Err(TruncateError::TooLarge)
        );
        // Request level, still too large without its objects.
        assert_eq!(
            to_json_line(event(Level::Request, 5000), Some(&tiny)),
            Err(TruncateError::TooLarge)
        );
    }

    #[test]
    fn validation_is_upstreams() {
        assert!(TruncateConfig::default().validate("log").is_ok());
        let zero = TruncateConfig {
            max_event_size: 0,
            max_batch_size: 10,
        };
        assert_eq!(
            zero.validate("log").unwrap_err(),
            "invalid audit truncate log max event size 0, must be a positive number"
        );
        let inverted = TruncateConfig {
            max_event_size: 100,
            max_batch_size: 10,
        };
        assert!(inverted
            .validate("webhook")
            .unwrap_err()
            .starts_with("invalid audit truncate webhook max batch size 10, must be greater"));
    }

    #[test]
    fn batches_stay_within_their_size() {
        let lines: Vec<Vec<u8>> = [40usize, 40, 30, 100, 10]
            .iter()
            .map(|n| vec![b'x'; *n])
            .collect();
        let runs = batches(lines, 100);
        let sizes: Vec<Vec<usize>> = runs
            .iter()
            .map(|r| r.iter().map(Vec::len).collect())
            .collect();
        assert_eq!(sizes, vec![vec![40, 40], vec![30], vec![100], vec![10]]);
        assert!(batches(Vec::new(), 100).is_empty());
    }
}
