//! `/healthz`, `/livez` and `/readyz` with named checks, as upstream's `k8s.io/apiserver/pkg/server/
//! healthz`: each endpoint runs its checks and answers `ok`, or (with `?verbose`) one line per check
//! (`[+]ping ok`, `[-]etcd failed: reason withheld`) and `<name> check passed|failed`; a failing
//! check makes it a 500. `?exclude=<check>` skips one (`[+]<check> excluded: ok`); `/livez/<check>`
//! runs one alone. The reason of a failure goes to the log, never to the (anonymous) client.
//!
//! Checks: `ping` and `log` (the server answers), `etcd` (the store answers a revision read within
//! 2 s; named upstream's way whatever the backend, as ComponentStatus's `etcd-0`, so tools probing
//! `/livez/etcd` find it), and on `/readyz` also `etcd-readiness` (the same read) and `shutdown`
//! (failing once the server began to shut down, so load balancers stop sending requests first).
//! Upstream's post-start hooks and informer-sync are not listed: rkube finishes its bootstrap and
//! loads its caches before it accepts a connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http::{Response, StatusCode};

use crate::request::Query;
use crate::response::{self, Body};
use crate::ApiServer;

/// Upstream's `--etcd-healthcheck-timeout` and `--etcd-readycheck-timeout` defaults.
const STORAGE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the checks read besides the store.
#[derive(Debug, Default)]
pub struct Health {
    shutting_down: AtomicBool,
}

impl Health {
    /// From now on `/readyz` fails its `shutdown` check.
    pub fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }
}

/// The endpoint a path names: `healthz`, `livez` or `readyz`, and a single check after it.
pub fn endpoint(path: &str) -> Option<(&'static str, Option<&str>)> {
    for name in ["healthz", "livez", "readyz"] {
        let Some(rest) = path.strip_prefix('/').and_then(|p| p.strip_prefix(name)) else {
            continue;
        };
        if rest.is_empty() || rest == "/" {
            return Some((name, None));
        }
        if let Some(check) = rest.strip_prefix('/') {
            return Some((name, Some(check)));
        }
    }
    None
}

fn checks(endpoint: &str) -> &'static [&'static str] {
    match endpoint {
        "readyz" => &["ping", "log", "etcd", "etcd-readiness", "shutdown"],
        _ => &["ping", "log", "etcd"],
    }
}

async fn run_check(api: &ApiServer, name: &str) -> Result<(), String> {
    match name {
        "ping" | "log" => Ok(()),
        "etcd" | "etcd-readiness" => {
            match tokio::time::timeout(STORAGE_TIMEOUT, api.store.current_revision()).await {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(format!("storage: {e}")),
                Err(_) => Err(format!(
                    "storage did not answer within {}s",
                    STORAGE_TIMEOUT.as_secs()
                )),
            }
        }
        "shutdown" if api.health.is_shutting_down() => Err("process is shutting down".into()),
        "shutdown" => Ok(()),
        other => Err(format!("no check {other:?}")),
    }
}

fn text(code: StatusCode, body: String) -> Response<Body> {
    response::bytes_response(code, "text/plain; charset=utf-8", Bytes::from(body))
}

/// The result of each check, in order; excluded ones are `None`.
pub type Results = Vec<(&'static str, Option<Result<(), String>>)>;

/// The body and code of an endpoint's answer (pure: the checks already ran).
pub fn render(endpoint: &str, results: &Results, verbose: bool) -> (StatusCode, String) {
    let mut lines = String::new();
    let mut failed = false;
    for (name, result) in results {
        match result {
            None => lines.push_str(&format!("[+]{name} excluded: ok\n")),
            Some(Ok(())) => lines.push_str(&format!("[+]{name} ok\n")),
            Some(Err(_)) => {
                failed = true;
                lines.push_str(&format!("[-]{name} failed: reason withheld\n"));
            }
        }
    }
    if failed {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{lines}{endpoint} check failed\n"),
        );
    }
    if verbose {
        (StatusCode::OK, format!("{lines}{endpoint} check passed\n"))
    } else {
        (StatusCode::OK, "ok".to_string())
    }
}

/// Answers `path` (one of [`endpoint`]'s).
pub async fn serve(api: &ApiServer, path: &str, query: Option<&str>) -> Response<Body> {
    let Some((name, single)) = endpoint(path) else {
        return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
    };
    let all = checks(name);
    if let Some(check) = single {
        let Some(check) = all.iter().find(|c| **c == check) else {
            return text(StatusCode::NOT_FOUND, "404 page not found\n".into());
        };
        return match run_check(api, check).await {
            Ok(()) => text(StatusCode::OK, "ok".into()),
            Err(e) => {
                tracing::warn!(endpoint = name, check, error = %e, "health check failed");
                text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal server error: reason withheld\n".into(),
                )
            }
        };
    }
    // Upstream: the key present, whatever its value (`?verbose`, `?verbose=1`).
    let verbose = Query::parse(query).get("verbose").is_some();
    // `exclude` may repeat, which Query (one value a key) does not keep.
    let excluded: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter_map(|p| p.strip_prefix("exclude="))
        .collect();
    let mut results: Results = Vec::with_capacity(all.len());
    for check in all {
        if excluded.contains(check) {
            results.push((check, None));
            continue;
        }
        let result = run_check(api, check).await;
        if let Err(e) = &result {
            tracing::warn!(endpoint = name, check, error = %e, "health check failed");
        }
        results.push((check, Some(result)));
    }
    let (code, body) = render(name, &results, verbose);
    text(code, body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert_eq!(endpoint("/livez"), Some(("livez", None)));
        assert_eq!(endpoint("/readyz/"), Some(("readyz", None)));
        assert_eq!(endpoint("/livez/etcd"), Some(("livez", Some("etcd"))));
        assert_eq!(endpoint("/healthzfoo"), None);
        assert_eq!(endpoint("/version"), None);
    }

    #[test]
    fn answers_as_upstream() {
        let ok: Results = vec![("ping", Some(Ok(()))), ("etcd", Some(Ok(())))];
        assert_eq!(render("livez", &ok, false), (StatusCode::OK, "ok".into()));
        assert_eq!(
            render("livez", &ok, true),
            (
                StatusCode::OK,
                "[+]ping ok\n[+]etcd ok\nlivez check passed\n".into()
            )
        );
        let failing: Results = vec![
            ("ping", Some(Ok(()))),
            ("etcd", Some(Err("disk on fire".into()))),
            ("shutdown", None),
        ];
        let (code, body) = render("readyz", &failing, false);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body,
            "[+]ping ok\n[-]etcd failed: reason withheld\n[+]shutdown excluded: ok\nreadyz check failed\n"
        );
        assert!(!body.contains("disk on fire"));
    }
}
