//! Crash safety of the SQLite store: a child process writes and reports every acknowledged write; the
//! test kills it with SIGKILL at random moments, reopens the store, and checks that every acknowledged
//! write is there and that the revision never went backwards.

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use rand::Rng;
use storage::sqlite::{SqliteOptions, SqliteStore};
use storage::Store;

const ROUNDS: usize = 24;

struct Ack {
    value: String,
    revision: i64,
}

/// Orders the values written to a shared key: "<round>-<i>".
fn version(value: &str) -> (u64, u64) {
    let (round, i) = value.split_once('-').expect("shared value format");
    (round.parse().unwrap(), i.parse().unwrap())
}

#[tokio::test]
async fn acknowledged_writes_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("state.db");
    let mut rng = rand::rng();
    let mut last_revision = 0;
    let mut total_acks = 0;
    for round in 0..ROUNDS {
        let mut child = Command::new(env!("CARGO_BIN_EXE_storage-crash-writer"))
            .arg(&db)
            .arg(round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start crash writer");
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let mut acks: HashMap<String, Ack> = HashMap::new();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let parts: Vec<&str> = line.split(' ').collect();
                // A line cut by the kill is incomplete: ignore it (its write may or may not be there).
                if parts.len() != 4 || parts[0] != "ack" {
                    continue;
                }
                let Ok(revision) = parts[3].parse() else {
                    continue;
                };
                acks.insert(
                    parts[1].to_string(),
                    Ack {
                        value: parts[2].to_string(),
                        revision,
                    },
                );
            }
            acks
        });
        let delay = rng.random_range(30..400);
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().expect("SIGKILL the writer");
        child.wait().unwrap();
        let acks = reader.join().unwrap();
        total_acks += acks.len();

        let store = SqliteStore::open(&db, SqliteOptions::default())
            .unwrap_or_else(|e| panic!("reopen after kill in round {round}: {e}"));
        let revision = store.current_revision().await.unwrap();
        assert!(
            revision >= last_revision,
            "revision went backwards: {last_revision} -> {revision}"
        );
        for (key, ack) in &acks {
            assert!(
                ack.revision <= revision,
                "acked revision {} above store revision {revision}",
                ack.revision
            );
            let kv = store
                .get(key)
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("round {round}: acknowledged key {key} lost"));
            let stored = String::from_utf8(kv.value.to_vec()).unwrap();
            if key.starts_with("/crash/shared/") {
                // Later writes may have landed after the last ack, never earlier ones.
                assert!(
                    version(&stored) >= version(&ack.value),
                    "round {round}: {key} went back to {stored}"
                );
                assert!(kv.mod_revision >= ack.revision);
            } else {
                assert_eq!(stored, ack.value, "round {round}: {key}");
                assert_eq!(kv.mod_revision, ack.revision, "round {round}: {key}");
            }
        }
        last_revision = revision;
        store.close().await;
    }
    assert!(
        total_acks > ROUNDS,
        "the writer acknowledged too few writes ({total_acks}) to test anything"
    );
}
