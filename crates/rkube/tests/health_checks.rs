//! `/livez` and `/readyz` report the state of storage, as upstream's named checks do: with etcd
//! frozen (SIGSTOP) both fail with `[-]etcd failed: reason withheld` and a 500 while `/version`
//! still answers; `?exclude=etcd` and `?exclude=etcd-readiness` leave them passing; once etcd runs
//! again they pass.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

/// `(succeeded, stdout+stderr)` of `kubectl get --raw path`.
fn raw(c: &Cluster, path: &str) -> (bool, String) {
    let out = c.kubectl_output(&["get", "--raw", path], None);
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn health_follows_storage() {
    let c = Cluster::start(Backend::Etcd);
    assert_eq!(raw(&c, "/livez"), (true, "ok".to_string()));
    let (ok, body) = raw(&c, "/readyz?verbose");
    assert!(ok, "{body}");
    assert_eq!(
        body,
        "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]etcd-readiness ok\n[+]shutdown ok\nreadyz check passed\n"
    );
    assert_eq!(raw(&c, "/livez/etcd"), (true, "ok".to_string()));

    let pid = c.etcd_pid().expect("an etcd process") as i32;
    // SAFETY: signalling a child process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    let (ok, body) = raw(&c, "/livez?verbose");
    assert!(!ok, "{body}");
    assert!(body.contains("[-]etcd failed: reason withheld"), "{body}");
    let (ok, body) = raw(&c, "/readyz");
    assert!(
        !ok && body.contains("[-]etcd-readiness failed: reason withheld"),
        "{body}"
    );
    let (ok, _) = raw(&c, "/livez/etcd");
    assert!(!ok);
    let (ok, body) = raw(&c, "/livez?exclude=etcd");
    assert!(ok, "{body}");
    let (ok, body) = raw(&c, "/readyz?exclude=etcd&exclude=etcd-readiness&verbose");
    assert!(ok && body.contains("[+]etcd excluded: ok"), "{body}");
    assert!(raw(&c, "/version").0);

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    wait_for("/livez to pass again", || raw(&c, "/livez").0);
    assert!(raw(&c, "/readyz").0);
}
