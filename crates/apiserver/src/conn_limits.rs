//! Limits on open connections to the API server's port, in all and per client address (rkube-only:
//! upstream's `http.Server` accepts as many as the file descriptor limit allows). A connection over
//! a limit is closed as soon as it is accepted, before its TLS handshake costs anything, and logged
//! (at most one line every [`LOG_EVERY`], with the count of those not logged).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `--max-connections` default: well under the usual hard file descriptor limit, far over what
/// the all-in-one's own components and a few hundred clients hold.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Refusals are logged at most this often; the ones in between are counted.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

/// Why a connection was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error("{open} connections open, the limit (--max-connections={limit})")]
    Total { open: usize, limit: usize },
    #[error("{open} connections from {ip} open, the limit (--max-connections-per-ip={limit})")]
    PerIp {
        ip: IpAddr,
        open: usize,
        limit: usize,
    },
}

#[derive(Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Open connections, counted in all and by client address. 0 is no limit.
pub struct ConnLimits {
    max_total: usize,
    max_per_ip: usize,
    counts: Mutex<Counts>,
    log: RefusalLog,
}

impl ConnLimits {
    pub fn new(max_total: usize, max_per_ip: usize) -> Arc<ConnLimits> {
        Arc::new(ConnLimits {
            max_total,
            max_per_ip,
            counts: Mutex::default(),
            log: RefusalLog::default(),
        })
    }

    /// A permit for one more connection from `ip`, held as long as the connection is open.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnPermit, Refused> {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if self.max_total > 0 && counts.total >= self.max_total {
            return Err(Refused::Total {
                open: counts.total,
                limit: self.max_total,
            });
        }
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        if self.max_per_ip > 0 && from_ip >= self.max_per_ip {
            return Err(Refused::PerIp {
                ip,
                open: from_ip,
                limit: self.max_per_ip,
            });
        }
        counts.total += 1;
        *counts.per_ip.entry(ip).or_insert(0) += 1;
        Ok(ConnPermit {
            limits: self.clone(),
            ip,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).total
    }

    /// Logs a refusal (rate limited).
    pub fn log_refusal(&self, peer: std::net::SocketAddr, why: &Refused) {
        if let Some(suppressed) = self.log.should_log(Instant::now()) {
            // `suppressed`: refusals since the last such line, not logged.
            tracing::warn!(%peer, suppressed, "connection refused: {why}");
        }
    }

    fn release(&self, ip: IpAddr) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_ip.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                // The map holds only addresses with open connections, so it cannot grow past them.
                counts.per_ip.remove(&ip);
            }
        }
    }
}

/// One open connection; dropping it frees its place.
pub struct ConnPermit {
    limits: Arc<ConnLimits>,
    ip: IpAddr,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.limits.release(self.ip);
    }
}

/// At most one line every [`LOG_EVERY`].
#[derive(Default)]
struct RefusalLog {
    state: Mutex<(Option<Instant>, u64)>,
}

impl RefusalLog {
    /// `Some(refusals not logged since the last line)` when this one is to be logged.
    fn should_log(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (last, suppressed) = &mut *state;
        match last {
            Some(at) if now.duration_since(*at) < LOG_EVERY => {
                *suppressed += 1;
                None
            }
            _ => {
                *last = Some(now);
                Some(std::mem::take(suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, last])
    }

    #[test]
    fn per_address_and_total_limits() {
        let limits = ConnLimits::new(3, 2);
        let a1 = limits.admit(ip(1)).unwrap();
        let _a2 = limits.admit(ip(1)).unwrap();
        assert_eq!(
            limits.admit(ip(1)).err(),
            Some(Refused::PerIp {
                ip: ip(1),
                open: 2,
                limit: 2
            })
        );
        let _b1 = limits.admit(ip(2)).unwrap();
        assert_eq!(
            limits.admit(ip(3)).err(),
            Some(Refused::Total { open: 3, limit: 3 })
        );
        drop(a1);
        assert_eq!(limits.open(), 2);
        let _a3 = limits.admit(ip(1)).unwrap();
        assert!(limits.admit(ip(2)).is_err(), "total reached again");
    }

    #[test]
    fn zero_is_no_limit_and_released_addresses_are_forgotten() {
        let limits = ConnLimits::new(0, 0);
        let permits: Vec<_> = (0..100).map(|_| limits.admit(ip(9)).unwrap()).collect();
        assert_eq!(limits.open(), 100);
        drop(permits);
        assert_eq!(limits.open(), 0);
        assert!(limits.counts.lock().unwrap().per_ip.is_empty());
    }

    #[test]
    fn refusals_are_logged_at_most_once_a_period() {
        let log = RefusalLog::default();
        let t0 = Instant::now();
        assert_eq!(log.should_log(t0), Some(0));
        assert_eq!(log.should_log(t0 + Duration::from_secs(1)), None);
        assert_eq!(log.should_log(t0 + Duration::from_secs(2)), None);
        assert_eq!(log.should_log(t0 + LOG_EVERY), Some(2));
    }

    #[test]
    fn the_reason_names_the_flag() {
        let why = Refused::PerIp {
            ip: ip(2),
            open: 3,
            limit: 3,
        };
        assert_eq!(
            why.to_string(),
            "3 connections from 127.0.0.2 open, the limit (--max-connections-per-ip=3)"
        );
    }
}
