//! Test helper: one leader election candidate as its own process (used by `tests/leaderelection.rs`;
//! upstream has no equivalent binary, its example is `client-go/examples/leader-election`).
//!
//! ```text
//! leader-candidate <kubeconfig> <identity> [<lease-ms> <renew-deadline-ms> <retry-ms>] [<namespace>/<name>]
//! ```
//!
//! Defaults: lease 2000 ms, renew deadline 1500 ms, retry 300 ms, Lease `default/rkube-test-lock`.
//! Prints one line per transition on stdout, each with the wall clock in unix milliseconds:
//! `leading <identity> <ms>`, `stopped <identity> <ms>`, `observed <identity> <leader> <ms>` and, on
//! exit, `exited <identity> <ms>`. After losing the lease it rejoins the election. On SIGTERM or SIGINT
//! it stops leading, releases the lease (empty `holderIdentity`, `leaseDurationSeconds: 1`) and exits
//! with status 0.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use client::leaderelection::{LeaderCallbacks, LeaderElectionConfig, LeaderElector};
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

fn now_millis() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line} {}", now_millis());
    let _ = out.flush();
}

struct Args {
    kubeconfig: String,
    identity: String,
    lease: Duration,
    renew: Duration,
    retry: Duration,
    namespace: String,
    name: String,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let usage = "usage: leader-candidate <kubeconfig> <identity> [<lease-ms> <renew-deadline-ms> <retry-ms>] [<namespace>/<name>]";
    let (kubeconfig, identity) = match args {
        [k, i, ..] => (k.clone(), i.clone()),
        _ => return Err(usage.into()),
    };
    let mut rest = &args[2..];
    let mut ms = [2000u64, 1500, 300];
    if rest.len() >= 3 {
        for (slot, raw) in ms.iter_mut().zip(&rest[..3]) {
            *slot = raw
                .parse()
                .map_err(|_| format!("bad milliseconds {raw:?}; {usage}"))?;
        }
        rest = &rest[3..];
    }
    let (namespace, name) = match rest {
        [] => ("default".to_string(), "rkube-test-lock".to_string()),
        [lock] => match lock.split_once('/') {
            Some((ns, n)) => (ns.to_string(), n.to_string()),
            None => return Err(format!("bad lock {lock:?}; {usage}")),
        },
        _ => return Err(usage.into()),
    };
    Ok(Args {
        kubeconfig,
        identity,
        lease: Duration::from_millis(ms[0]),
        renew: Duration::from_millis(ms[1]),
        retry: Duration::from_millis(ms[2]),
        namespace,
        name,
    })
}

#[tokio::main]
async fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse(&argv) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let client =
        match client::kubeconfig::client_from_file(std::path::Path::new(&args.kubeconfig)).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("cannot build a client from {}: {e}", args.kubeconfig);
                return ExitCode::from(2);
            }
        };
    let id = args.identity.clone();
    let config = LeaderElectionConfig::new(&args.namespace, &args.name, &args.identity)
        .with_timings(args.lease, args.renew, args.retry);
    let (i1, i2, i3) = (id.clone(), id.clone(), id.clone());
    let callbacks = LeaderCallbacks::default()
        .on_started_leading(move |_| say(&format!("leading {i1}")))
        .on_stopped_leading(move || say(&format!("stopped {i2}")))
        .on_new_leader(move |leader| say(&format!("observed {i3} {leader}")));
    let elector = match LeaderElector::for_lease(client, config, callbacks) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("invalid leader election config: {e}");
            return ExitCode::from(2);
        }
    };

    let cancel = CancellationToken::new();
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            eprintln!("cannot install signal handlers");
            return ExitCode::from(2);
        }
    };
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        on_signal.cancel();
    });

    while !cancel.is_cancelled() {
        elector.run(cancel.clone()).await;
    }
    say(&format!("exited {id}"));
    ExitCode::SUCCESS
}
