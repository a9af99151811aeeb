//! Request deadlines (upstream `filters/request_deadline.go` and the finisher of
//! `endpoints/handlers/finisher`): a request that is not long-running gets `--request-timeout`
//! (60 s by default), or less when its `?timeout=` asks for less; past it the client gets 504
//! `Timeout` while the handler finishes on its own, as upstream's does (a write may still land,
//! which is what the 504 tells a client to expect). Watches end by `timeoutSeconds` instead
//! (`rest/watch.rs`); exec, attach, port-forward, logs and proxying never come here.

use std::time::Duration;

use apimachinery::status::ApiError;

use crate::request::Query;

/// Upstream's `--request-timeout` default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// The deadline of a request: `?timeout=` when it is positive and shorter than `max`, else `max`.
/// A `timeout` that is not a Go duration is a 400, with upstream's message.
pub fn deadline(query: &Query, max: Duration) -> Result<Duration, ApiError> {
    let Some(value) = query.value("timeout") else {
        return Ok(max);
    };
    let nanos = apimachinery::go_duration::parse(value).map_err(|e| {
        ApiError::bad_request(format!(
            "invalid timeout specified in the request URL - {e}"
        ))
    })?;
    let asked = u64::try_from(nanos).ok().map(Duration::from_nanos);
    Ok(match asked {
        Some(d) if !d.is_zero() && d < max => d,
        _ => max,
    })
}

/// What a client gets when its request outlives its deadline.
pub fn timed_out() -> ApiError {
    ApiError::timeout(
        "request did not complete within requested timeout - context deadline exceeded",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shorter_of_the_asked_and_the_maximum() {
        let max = Duration::from_secs(60);
        let q = |s: &str| Query::parse(Some(s));
        assert_eq!(deadline(&q(""), max).unwrap(), max);
        assert_eq!(
            deadline(&q("timeout=5s"), max).unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(
            deadline(&q("timeout=1m30s"), max).unwrap(),
            max,
            "longer: the maximum"
        );
        assert_eq!(
            deadline(&q("timeout=0s"), max).unwrap(),
            max,
            "zero: no wish"
        );
        assert_eq!(deadline(&q("timeout=-1s"), max).unwrap(), max);
        let e = deadline(&q("timeout=soon"), max).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(
            e.message,
            "invalid timeout specified in the request URL - time: invalid duration \"soon\""
        );
    }

    #[test]
    fn timeout_status_is_upstreams() {
        let s = timed_out().to_status();
        assert_eq!(s["code"], 504);
        assert_eq!(s["reason"], "Timeout");
        assert_eq!(
            s["message"],
            "Timeout: request did not complete within requested timeout - context deadline exceeded"
        );
        assert_eq!(s["details"], serde_json::json!({}));
    }
}
