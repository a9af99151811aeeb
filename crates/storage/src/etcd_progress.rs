//! Which etcd members answer progress requests in order with their events (see
//! [`members_report_progress`]).

use std::time::Duration;

use etcd_client::{Client, ConnectOptions};

/// How long the version check of each endpoint may take at connect.
const VERSION_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Whether every member runs an etcd whose answers to progress requests are ordered with the watch's
/// events: 3.4.31+, 3.5.13+ or 3.6+, the releases upstream's apiserver requires before it serves
/// consistent reads from its cache (etcd issues 15220 and 17507: older releases may answer with a
/// revision whose events are still in flight, or not at all). A member that cannot be asked counts
/// as too old.
pub(super) async fn members_report_progress(endpoints: &[String]) -> bool {
    if endpoints.is_empty() {
        return false;
    }
    for endpoint in endpoints {
        let probe = async {
            let options = ConnectOptions::new().with_connect_timeout(VERSION_PROBE_TIMEOUT);
            let client = Client::connect([endpoint.as_str()], Some(options))
                .await
                .ok()?;
            let status = client.maintenance_client().status().await.ok()?;
            Some(status.version().to_string())
        };
        let version = tokio::time::timeout(VERSION_PROBE_TIMEOUT, probe)
            .await
            .ok()
            .flatten();
        match version {
            Some(version) if progress_fixed_in(&version) => {}
            Some(version) => {
                tracing::info!(
                    endpoint,
                    version,
                    "etcd before 3.4.31/3.5.13: consistent reads wait for the watch cache without \
                     progress notifications"
                );
                return false;
            }
            None => return false,
        }
    }
    true
}

/// Whether an etcd version string (`3.5.13`, `3.6.0-rc.1`) has the progress-notification fixes.
fn progress_fixed_in(version: &str) -> bool {
    let mut parts = version
        .split(|c: char| !c.is_ascii_digit())
        .map(|part| part.parse::<u64>().ok());
    let (Some(Some(major)), Some(Some(minor)), Some(Some(patch))) =
        (parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    match (major, minor) {
        (3, 4) => patch >= 31,
        (3, 5) => patch >= 13,
        (3, minor) => minor >= 6,
        (major, _) => major > 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_fixes_by_version() {
        for (version, fixed) in [
            ("3.4.23", false),
            ("3.4.31", true),
            ("3.5.12", false),
            ("3.5.13", true),
            ("3.6.0", true),
            ("3.6.0-rc.1", true),
            ("3.3.27", false),
            ("4.0.0", true),
            ("garbage", false),
            ("3.5", false),
        ] {
            assert_eq!(progress_fixed_in(version), fixed, "{version}");
        }
    }
}
