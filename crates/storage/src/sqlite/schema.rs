//! The SQLite file: connections, pragmas and tables.
//!
//! `log` is the MVCC history: one row per write, keyed by revision (a rowid alias, so replaying a watch
//! is a range scan). `current` maps each live key to the revision of its latest row, so reads of the
//! present never scan history. `meta` holds the store revision and the compaction state, written in the
//! same transaction as the rows they describe.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use crate::{Error, Result, Revision};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS meta (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS log (
    revision        INTEGER PRIMARY KEY,
    key             BLOB    NOT NULL,
    deleted         INTEGER NOT NULL,
    create_revision INTEGER NOT NULL,
    prev_revision   INTEGER,
    value           BLOB    NOT NULL
);
CREATE INDEX IF NOT EXISTS log_key_revision ON log (key, revision);
CREATE TABLE IF NOT EXISTS current (
    key      BLOB PRIMARY KEY,
    revision INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Names of the rows in `meta`.
pub const META_REVISION: &str = "revision";
pub const META_COMPACTED: &str = "compacted";
/// Revisions at or below this one have been swept of superseded history (compaction runs in chunks).
pub const META_COMPACT_CURSOR: &str = "compact_cursor";

/// Application id stamped into the file header, so that a foreign SQLite file is refused clearly.
const APPLICATION_ID: i64 = 0x726b_7562; // "rkub"

/// How hard a commit tries to reach the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync the WAL on every commit (group commit amortizes it): survives power loss.
    #[default]
    Full,
    /// No fsync on commit: survives a process crash (kill -9) but not power loss.
    Normal,
}

fn open_error(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Open {
        path: path.to_path_buf(),
        message: e.to_string(),
    }
}

/// Opens the writer connection, creating the file and tables if needed, and checks that an existing file
/// is an rkube store.
pub fn open_writer(path: &Path, durability: Durability) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| open_error(path, e))?;
    let sync = match durability {
        Durability::Full => "FULL",
        Durability::Normal => "NORMAL",
    };
    let setup = || -> rusqlite::Result<i64> {
        conn.busy_timeout(Duration::from_secs(5))?;
        // Reading the application id is the first access to the file: a corrupt or foreign file fails here.
        let app_id: i64 = conn.query_row("PRAGMA application_id", [], |r| r.get(0))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", sync)?;
        // The OS page cache holds the file too; a modest private cache keeps RSS low at little cost.
        conn.pragma_update(None, "cache_size", -16384)?; // 16 MiB
        conn.pragma_update(None, "temp_store", "MEMORY")?;
        Ok(app_id)
    };
    let app_id = setup().map_err(|e| open_error(path, e))?;
    let has_tables: bool = conn
        .query_row(
            "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table'",
            [],
            |r| r.get(0),
        )
        .map_err(|e| open_error(path, e))?;
    if has_tables && app_id != APPLICATION_ID {
        return Err(open_error(
            path,
            "the file is an SQLite database but not an rkube store",
        ));
    }
    // The tables and the application id are written in one transaction: a process killed while creating
    // a new store leaves an empty file, never tables without the id (which would read as foreign).
    conn.execute_batch(&format!(
        "BEGIN IMMEDIATE; {SCHEMA}; PRAGMA application_id = {APPLICATION_ID}; COMMIT;"
    ))
    .map_err(|e| open_error(path, e))?;
    // A quick structural check catches truncated or overwritten pages at startup, not mid-request.
    let check: String = conn
        .query_row("PRAGMA quick_check(1)", [], |r| r.get(0))
        .map_err(|e| open_error(path, e))?;
    if check != "ok" {
        return Err(open_error(path, format!("integrity check failed: {check}")));
    }
    Ok(conn)
}

/// Opens a read-only connection for the reader pool.
pub fn open_reader(path: &Path) -> Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|e| open_error(path, e))?;
    conn.busy_timeout(Duration::from_secs(5))
        .map_err(|e| open_error(path, e))?;
    // Readers are pooled (one per concurrent read): a small cache each, the OS caches the file.
    conn.pragma_update(None, "cache_size", -4096)
        .map_err(|e| open_error(path, e))?;
    Ok(conn)
}

/// Reads one `meta` value, with its default for a new store.
pub fn read_meta(conn: &Connection, name: &str) -> rusqlite::Result<Revision> {
    let value: Option<i64> = conn
        .query_row("SELECT value FROM meta WHERE name = ?1", [name], |r| {
            r.get(0)
        })
        .optional()?;
    Ok(value.unwrap_or(match name {
        META_REVISION => 1,
        _ => 0,
    }))
}

pub fn write_meta(conn: &Connection, name: &str, value: Revision) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO meta (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    )?
    .execute(rusqlite::params![name, value])?;
    Ok(())
}
