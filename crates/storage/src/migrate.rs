//! Copying every key of one store into another (`rkube migrate`): SQLite to etcd when a cluster
//! outgrows one machine, and back. Values are copied byte for byte, so objects keep their UIDs,
//! creation timestamps and encryption at rest (the same encryption config must be used after).
//!
//! Revisions (resourceVersions) cannot be carried over: the destination numbers its writes itself.
//! So that no client mistakes an old resourceVersion for a new one, the destination's revision is
//! raised above the source's and then compacted at its head once the copy is done: a watch or list
//! from before the move gets 410 Gone and informers relist, as after upstream's etcd restore with
//! `--bump-revision --mark-compacted`.
//!
//! The source is read at one snapshot revision; the API servers using it must be stopped first,
//! or writes made during the copy are lost.

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use crate::{Error, ListOptions, Revision, Store};

/// Keys read from the source per page.
pub const PAGE: usize = 500;
/// Creates in flight on the destination (etcd round trips overlap; SQLite groups them).
const IN_FLIGHT: usize = 32;

/// What a copy did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Copied {
    pub keys: u64,
    pub bytes: u64,
    /// The snapshot of the source that was copied.
    pub source_revision: Revision,
    /// The destination's revision after the copy (compacted up to it).
    pub destination_revision: Revision,
}

#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("the destination already holds {0} keys: migrate into an empty store")]
    DestinationNotEmpty(i64),
    #[error("reading the source: {0}")]
    Source(#[source] Error),
    #[error("writing the destination: {0}")]
    Destination(#[source] Error),
    #[error("the destination holds {found} keys after copying {copied}")]
    Mismatch { copied: u64, found: i64 },
}

/// Copies every key under `/` of `source` (at one snapshot) into the empty `destination`, then
/// compacts the destination at its head. `progress` is called after each page with the keys
/// copied so far.
pub async fn copy(
    source: &dyn Store,
    destination: &dyn Store,
    mut progress: impl FnMut(u64),
) -> Result<Copied, MigrateError> {
    let existing = destination
        .count("/")
        .await
        .map_err(MigrateError::Destination)?;
    if existing > 0 {
        return Err(MigrateError::DestinationNotEmpty(existing));
    }
    let (mut keys, mut bytes) = (0u64, 0u64);
    let mut snapshot: Option<Revision> = None;
    let mut after: Option<String> = None;
    loop {
        let page = source
            .list(ListOptions {
                prefix: "/",
                start_after: after.as_deref(),
                limit: Some(PAGE),
                at_revision: snapshot,
            })
            .await
            .map_err(MigrateError::Source)?;
        snapshot.get_or_insert(page.revision);
        let Some(last) = page.items.last() else {
            break;
        };
        after = Some(last.key.clone());
        bytes += page
            .items
            .iter()
            .map(|kv| kv.value.len() as u64)
            .sum::<u64>();
        keys += page.items.len() as u64;
        let writes = page.items.into_iter().map(|kv| async move {
            destination
                .create(&kv.key, Bytes::clone(&kv.value))
                .await
                .map(|_| ())
        });
        futures::stream::iter(writes)
            .buffer_unordered(IN_FLIGHT)
            .try_collect::<Vec<()>>()
            .await
            .map_err(MigrateError::Destination)?;
        progress(keys);
        if !page.more {
            break;
        }
    }
    let found = destination
        .count("/")
        .await
        .map_err(MigrateError::Destination)?;
    if found != keys as i64 {
        return Err(MigrateError::Mismatch {
            copied: keys,
            found,
        });
    }
    let source_revision = snapshot.unwrap_or_default();
    raise_revision(destination, source_revision)
        .await
        .map_err(MigrateError::Destination)?;
    let head = destination
        .current_revision()
        .await
        .map_err(MigrateError::Destination)?;
    destination
        .compact(head)
        .await
        .map_err(MigrateError::Destination)?;
    Ok(Copied {
        keys,
        bytes,
        source_revision,
        destination_revision: head,
    })
}

/// The key the revision is raised with; deleted again before the copy ends.
const RAISE_KEY: &str = "/rkube-migrate/raise-revision";

/// Writes until the destination's revision is above `floor` (the source's snapshot), as upstream's
/// `etcdutl snapshot restore --bump-revision`: every resourceVersion a client kept from the source
/// is then at or below the compacted revision, so it gets 410 Gone and relists. Without it, an old
/// resourceVersion above the destination's head would first be "too large", and once new writes
/// passed it, a watch from it would start there and silently miss the writes in between. Costs one
/// write per revision missing (the source's history beyond its live keys).
async fn raise_revision(destination: &dyn Store, floor: Revision) -> Result<(), Error> {
    if destination.current_revision().await? > floor {
        return Ok(());
    }
    let created = destination.create(RAISE_KEY, Bytes::new()).await?;
    // Up to `floor + 1`, and the delete below makes it `floor + 2`: the compaction at that head
    // then refuses a watch from `floor` itself (etcd keeps the compaction revision, so a watch
    // from `floor` would start at `floor + 1` and be served if that were the head).
    let updates = (floor + 1).saturating_sub(created.mod_revision).max(0);
    futures::stream::iter(0..updates)
        .map(|_| destination.update(RAISE_KEY, Bytes::new(), None))
        .buffer_unordered(IN_FLIGHT)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    destination.delete(RAISE_KEY, None).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::SqliteStore;

    fn open(dir: &tempfile::TempDir, name: &str) -> SqliteStore {
        SqliteStore::open(dir.path().join(name), Default::default()).unwrap()
    }

    #[tokio::test]
    async fn every_live_key_is_copied_byte_for_byte_and_old_revisions_are_gone() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (open(&dir, "src.db"), open(&dir, "dst.db"));
        for i in 0..(2 * PAGE + 7) {
            let key = format!("/configmaps/ns{}/cm-{i:05}", i % 3);
            src.create(&key, Bytes::from(format!("{{\"v\":{i}}}")))
                .await
                .unwrap();
        }
        // Deleted and updated keys: only the latest state travels.
        src.delete("/configmaps/ns0/cm-00000", None).await.unwrap();
        let kv = src.get("/configmaps/ns1/cm-00001").await.unwrap().unwrap();
        src.update(
            "/configmaps/ns1/cm-00001",
            Bytes::from_static(b"new"),
            Some(kv.mod_revision),
        )
        .await
        .unwrap();
        let old_head = src.current_revision().await.unwrap();
        let mut pages = Vec::new();
        let copied = copy(&src, &dst, |n| pages.push(n)).await.unwrap();
        assert_eq!(copied.keys, (2 * PAGE + 6) as u64);
        assert_eq!(copied.source_revision, old_head);
        assert_eq!(pages.len(), 3);
        let (a, b) = (
            src.list(ListOptions::prefix("/")).await.unwrap(),
            dst.list(ListOptions::prefix("/")).await.unwrap(),
        );
        let pairs = |l: &crate::ListResult| -> Vec<(String, Bytes)> {
            l.items
                .iter()
                .map(|kv| (kv.key.clone(), kv.value.clone()))
                .collect()
        };
        assert_eq!(pairs(&a), pairs(&b));
        assert_eq!(
            dst.get("/configmaps/ns1/cm-00001")
                .await
                .unwrap()
                .unwrap()
                .value,
            Bytes::from_static(b"new")
        );
        // A watch from a revision of the destination's own past is refused: clients relist.
        let err = match dst.watch("/", 1).await {
            Err(e) => e,
            Ok(_) => panic!("a watch from before the copy must not start"),
        };
        assert!(err.is_compacted(), "{err}");
    }

    /// A source with history beyond its live keys: every resourceVersion a client may hold from it,
    /// up to the snapshot, is compacted in the destination (410, relist), never "in the future".
    #[tokio::test]
    async fn old_resource_versions_are_all_compacted_in_the_destination() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (open(&dir, "src.db"), open(&dir, "dst.db"));
        for i in 0..10 {
            let key = format!("/leases/ns/l-{i}");
            src.create(&key, Bytes::from_static(b"0")).await.unwrap();
            for _ in 0..20 {
                src.update(&key, Bytes::from_static(b"1"), None)
                    .await
                    .unwrap();
            }
        }
        let old_head = src.current_revision().await.unwrap();
        let copied = copy(&src, &dst, |_| {}).await.unwrap();
        assert_eq!(copied.keys, 10);
        assert!(
            copied.destination_revision > old_head,
            "{} > {old_head}",
            copied.destination_revision
        );
        for old in [1, old_head / 2, old_head] {
            match dst.watch("/", old).await {
                Err(e) => assert!(e.is_compacted(), "{old}: {e}"),
                Ok(_) => panic!("a watch from the source's revision {old} must not start"),
            }
        }
        assert!(dst.get(RAISE_KEY).await.unwrap().is_none());
        assert_eq!(dst.count("/").await.unwrap(), 10);
        let after = dst
            .create("/after", Bytes::from_static(b"x"))
            .await
            .unwrap();
        assert!(after.mod_revision > old_head);
    }

    #[tokio::test]
    async fn a_destination_with_keys_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (open(&dir, "src.db"), open(&dir, "dst.db"));
        src.create("/a", Bytes::from_static(b"1")).await.unwrap();
        dst.create("/b", Bytes::from_static(b"2")).await.unwrap();
        let err = copy(&src, &dst, |_| {}).await.unwrap_err();
        assert!(matches!(err, MigrateError::DestinationNotEmpty(1)), "{err}");
        assert!(dst.get("/a").await.unwrap().is_none());
    }
}
