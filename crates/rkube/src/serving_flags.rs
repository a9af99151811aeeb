//! The API server's connection and shutdown flags (see `apiserver::serving` and
//! `apiserver::shutdown`), shared by `rkube apiserver` and `rkube server`. Upstream's names where
//! upstream has the flag; the others are rkube's (upstream hard-codes those values in
//! `secure_serving.go`).

use std::time::Duration;

use clap::Args;

/// A Go duration that may be zero ("0s", "70s", "1m30s").
fn parse_go_duration_or_zero(s: &str) -> Result<Duration, String> {
    let nanos = apimachinery::go_duration::parse(s)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| format!("{s:?}: must not be negative"))
}

/// A positive Go duration.
fn parse_positive(s: &str) -> Result<Duration, String> {
    match parse_go_duration_or_zero(s)? {
        d if d.is_zero() => Err(format!("{s:?}: must be positive")),
        d => Ok(d),
    }
}

#[derive(Args, Clone, Debug)]
pub struct ServingFlags {
    /// After SIGTERM or SIGINT, how long the server goes on serving (with /readyz failing, so load
    /// balancers move clients away) before it closes its listener and drains.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration_or_zero)]
    pub shutdown_delay_duration: Duration,
    /// During shutdown, open watches are ended over this period (at least 200 a second) so their
    /// clients do not all re-list at once; 0 ends them all at once.
    #[arg(long, default_value = "0s", value_parser = parse_go_duration_or_zero)]
    pub shutdown_watch_termination_grace_period: Duration,
    /// After --shutdown-delay-duration, keep the listener open and answer new requests 429 with
    /// Retry-After: 5 and Connection: close until the requests in flight are done (health probes
    /// and /metrics are still served), so clients move to another server at once; then close it.
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub shutdown_send_retry_after: bool,
    /// The limit the server gives clients for concurrent streams on one HTTP/2 connection (0:
    /// 1000; upstream's 0 means 100, but hyper-based clients queue past the limit instead of
    /// opening another connection).
    #[arg(long, default_value_t = 0)]
    pub http2_max_streams_per_connection: u32,
    /// rkube-only (upstream: fixed 32s): a connection's TLS handshake, and each request's line and
    /// headers, must arrive within this; slower clients are disconnected.
    #[arg(long, default_value = "32s", value_parser = parse_positive)]
    pub read_header_timeout: Duration,
    /// rkube-only (upstream: fixed 90s): a connection with no request in flight for this long is
    /// closed.
    #[arg(long, default_value = "90s", value_parser = parse_positive)]
    pub idle_connection_timeout: Duration,
    /// rkube-only: most connections open at once (0: no limit); more are closed as they come, and
    /// logged.
    #[arg(long, default_value_t = apiserver::conn_limits::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// rkube-only: most connections open at once from one client address (0: no limit, the
    /// default, since the all-in-one's components and clients behind one NAT share an address).
    #[arg(long, default_value_t = 0)]
    pub max_connections_per_ip: usize,
}

impl ServingFlags {
    pub fn apply(&self, config: &mut apiserver::Config) {
        config.serving = apiserver::serving::ServingOptions {
            read_header_timeout: self.read_header_timeout,
            idle_timeout: self.idle_connection_timeout,
            http2_max_streams_per_connection: self.http2_max_streams_per_connection,
            max_connections: self.max_connections,
            max_connections_per_ip: self.max_connections_per_ip,
        };
        config.shutdown = apiserver::shutdown::ShutdownOptions {
            delay: self.shutdown_delay_duration,
            watch_termination_grace_period: self.shutdown_watch_termination_grace_period,
            send_retry_after: self.shutdown_send_retry_after,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serving: ServingFlags,
    }

    fn parse(args: &[&str]) -> Result<apiserver::Config, clap::Error> {
        let cli = Cli::try_parse_from(std::iter::once("rkube").chain(args.iter().copied()))?;
        let mut config = apiserver::Config::new("/tmp/unused");
        cli.serving.apply(&mut config);
        Ok(config)
    }

    #[test]
    fn defaults_are_upstreams() {
        let config = parse(&[]).unwrap();
        assert_eq!(config.shutdown, Default::default());
        assert_eq!(config.serving.read_header_timeout, Duration::from_secs(32));
        assert_eq!(config.serving.idle_timeout, Duration::from_secs(90));
        assert_eq!(config.serving.max_connections_per_ip, 0);
    }

    #[test]
    fn go_durations() {
        let config = parse(&[
            "--shutdown-delay-duration=1m10s",
            "--shutdown-watch-termination-grace-period=500ms",
            "--read-header-timeout=2s",
            "--max-connections-per-ip=3",
        ])
        .unwrap();
        assert_eq!(config.shutdown.delay, Duration::from_secs(70));
        assert_eq!(
            config.shutdown.watch_termination_grace_period,
            Duration::from_millis(500)
        );
        assert_eq!(config.serving.read_header_timeout, Duration::from_secs(2));
        assert_eq!(config.serving.max_connections_per_ip, 3);
        assert!(!config.shutdown.send_retry_after);
        for flag in [
            "--shutdown-send-retry-after",
            "--shutdown-send-retry-after=true",
        ] {
            assert!(parse(&[flag]).unwrap().shutdown.send_retry_after, "{flag}");
        }
        assert!(
            !parse(&["--shutdown-send-retry-after=false"])
                .unwrap()
                .shutdown
                .send_retry_after
        );
        assert!(parse(&["--read-header-timeout=0s"]).is_err());
        assert!(parse(&["--shutdown-delay-duration=-1s"]).is_err());
        assert!(
            parse(&["--shutdown-delay-duration=10"]).is_err(),
            "a unit is needed"
        );
    }
}
