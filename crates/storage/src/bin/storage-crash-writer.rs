//! Test helper for `tests/crash.rs`, not a user tool: opens the SQLite store at the path given, then
//! writes as fast as it can from several tasks and prints one `ack` line per acknowledged write, until it
//! is killed. The test kills it with SIGKILL and checks that every acknowledged write survived.
//!
//! Usage: storage-crash-writer <db-path> <round>
//! Output lines: `ack <key> <value> <mod_revision>`.

use std::io::Write;

use storage::sqlite::{SqliteOptions, SqliteStore};
use storage::Store;

const WRITERS: usize = 8;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(path), Some(round)) = (args.next(), args.next()) else {
        eprintln!("usage: storage-crash-writer <db-path> <round>");
        std::process::exit(2);
    };
    let store = match SqliteStore::open(&path, SqliteOptions::default()) {
        Ok(store) => store,
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    };
    let (acks, mut ack_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    for w in 0..WRITERS {
        let store = store.clone();
        let acks = acks.clone();
        let round = round.clone();
        tokio::spawn(async move {
            let shared = format!("/crash/shared/w{w}");
            for i in 0u64.. {
                // Mostly new keys; every fourth write updates (or first creates) a key shared across rounds.
                let (key, value, result) = if i % 4 == 3 {
                    let value = format!("{round}-{i}");
                    let result = match store.update(&shared, value.clone().into(), None).await {
                        Err(e) if e.is_not_found() => {
                            store.create(&shared, value.clone().into()).await
                        }
                        other => other,
                    };
                    (shared.clone(), value, result)
                } else {
                    let key = format!("/crash/r{round}/w{w}/{i}");
                    let value = format!("v{i}");
                    let result = store.create(&key, value.clone().into()).await;
                    (key, value, result)
                };
                match result {
                    Ok(kv) => {
                        let _ = acks.send(format!("ack {key} {value} {}\n", kv.mod_revision));
                    }
                    Err(e) => {
                        eprintln!("write failed: {e}");
                        std::process::exit(1);
                    }
                }
            }
        });
    }
    drop(acks);
    let stdout = std::io::stdout();
    while let Some(line) = ack_rx.recv().await {
        let mut out = stdout.lock();
        // The ack is only printed after the store acknowledged the write; flushing makes it visible to the
        // parent at once, so anything the parent reads was acknowledged before the kill.
        if out
            .write_all(line.as_bytes())
            .and_then(|_| out.flush())
            .is_err()
        {
            std::process::exit(1);
        }
    }
}
