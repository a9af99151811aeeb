//! `rkube migrate --from sqlite:<data dir or file> --to etcd:<url>[,<url>...]` (and the reverse):
//! moves a cluster's whole state from one storage backend to another with
//! [`storage::migrate::copy`]. Objects keep their UIDs, names and contents; resourceVersions start
//! over, and the destination is compacted so that clients relist. Stop every API server using the
//! source first. See docs/operations.md.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use storage::etcd::EtcdStore;
use storage::sqlite::SqliteStore;
use storage::Store;

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// Where the cluster's state is now: `sqlite:<data dir or .db file>` or
    /// `etcd:<url>[,<url>...]`.
    #[arg(long)]
    from: String,
    /// Where it goes; it must hold no keys yet: `sqlite:<data dir or .db file>` or
    /// `etcd:<url>[,<url>...]`.
    #[arg(long)]
    to: String,
    /// The key prefix in etcd, on either side (as `--etcd-prefix` of the API server).
    #[arg(long, default_value = storage::etcd::DEFAULT_PREFIX)]
    etcd_prefix: String,
}

/// One side of a migration.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Endpoint {
    Sqlite(PathBuf),
    Etcd(Vec<String>),
}

impl Endpoint {
    fn parse(spec: &str) -> Result<Endpoint, String> {
        if let Some(path) = spec.strip_prefix("sqlite:") {
            if path.is_empty() {
                return Err("sqlite: needs a data dir or a .db file".into());
            }
            let path = Path::new(path);
            // A data dir (what `--data-dir` names) holds the store as state.db.
            let file = if path.is_dir() {
                path.join("state.db")
            } else {
                path.to_path_buf()
            };
            return Ok(Endpoint::Sqlite(file));
        }
        if let Some(urls) = spec.strip_prefix("etcd:") {
            let urls: Vec<String> = urls
                .split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(String::from)
                .collect();
            if urls.is_empty() {
                return Err("etcd: needs at least one client URL".into());
            }
            return Ok(Endpoint::Etcd(urls));
        }
        Err(format!(
            "{spec:?}: expected sqlite:<data dir or file> or etcd:<url>[,<url>...]"
        ))
    }

    async fn open(&self, prefix: &str, must_exist: bool) -> Result<Arc<dyn Store>, String> {
        match self {
            Endpoint::Sqlite(file) => {
                if must_exist && !file.is_file() {
                    return Err(format!("{}: no such store", file.display()));
                }
                let store = SqliteStore::open(file, Default::default())
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                Ok(Arc::new(store))
            }
            Endpoint::Etcd(urls) => {
                let store = EtcdStore::connect(urls, prefix)
                    .await
                    .map_err(|e| format!("cannot connect to etcd at {}: {e}", urls.join(",")))?;
                Ok(Arc::new(store))
            }
        }
    }
}

pub async fn run(args: MigrateArgs) -> Result<(), String> {
    let from = Endpoint::parse(&args.from)?;
    let to = Endpoint::parse(&args.to)?;
    if from == to {
        return Err("--from and --to name the same store".into());
    }
    let source = from.open(&args.etcd_prefix, true).await?;
    let destination = to.open(&args.etcd_prefix, false).await?;
    let started = std::time::Instant::now();
    let copied = storage::migrate::copy(&*source, &*destination, |n| {
        tracing::debug!(keys = n, "copied");
    })
    .await
    .map_err(|e| e.to_string())?;
    source.close().await;
    destination.close().await;
    println!(
        "migrated {} keys ({} bytes) from {} at revision {} to {} (now at revision {}) in {:.1} s",
        copied.keys,
        copied.bytes,
        args.from,
        copied.source_revision,
        args.to,
        copied.destination_revision,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_as_documented() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            Endpoint::parse(&format!("sqlite:{}", dir.path().display())).unwrap(),
            Endpoint::Sqlite(dir.path().join("state.db"))
        );
        assert_eq!(
            Endpoint::parse("sqlite:/x/other.db").unwrap(),
            Endpoint::Sqlite("/x/other.db".into())
        );
        assert_eq!(
            Endpoint::parse("etcd:http://127.0.0.1:1, http://127.0.0.1:2").unwrap(),
            Endpoint::Etcd(vec![
                "http://127.0.0.1:1".into(),
                "http://127.0.0.1:2".into()
            ])
        );
        for bad in ["sqlite:", "etcd:", "etcd: , ", "postgres://x", ""] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
