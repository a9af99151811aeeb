//! Read queries. Each runs on a pooled read-only connection inside one read transaction, which in WAL
//! mode is a consistent snapshot: the revision read from `meta` and the rows belong to the same state.

use bytes::Bytes;
use rusqlite::{params, Connection, OptionalExtension, Row};

use super::schema::{read_meta, META_COMPACTED, META_REVISION};
use crate::{
    prefix_range_end, Error, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision,
};

fn key_of(row: &Row, idx: usize) -> rusqlite::Result<String> {
    let bytes: Vec<u8> = row.get(idx)?;
    String::from_utf8(bytes).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(idx, rusqlite::types::Type::Blob, Box::new(e))
    })
}

pub fn get(conn: &Connection, key: &str) -> Result<Option<KeyValue>> {
    Ok(conn
        .prepare_cached(
            "SELECT c.revision, l.create_revision, l.value
             FROM current c JOIN log l ON l.revision = c.revision WHERE c.key = ?1",
        )?
        .query_row([key.as_bytes()], |r| {
            Ok(KeyValue {
                key: key.to_string(),
                mod_revision: r.get(0)?,
                create_revision: r.get(1)?,
                value: Bytes::from(r.get::<_, Vec<u8>>(2)?),
            })
        })
        .optional()?)
}

/// The key range `[lower, upper)` of a list: keys under the prefix, after `start_after`.
struct KeyRange {
    lower: Vec<u8>,
    lower_inclusive: bool,
    upper: Option<Vec<u8>>,
}

impl KeyRange {
    fn new(prefix: &str, start_after: Option<&str>) -> KeyRange {
        let end = prefix_range_end(prefix.as_bytes());
        let (lower, lower_inclusive) = match start_after {
            Some(after) if after.as_bytes() >= prefix.as_bytes() => {
                (after.as_bytes().to_vec(), false)
            }
            _ => (prefix.as_bytes().to_vec(), true),
        };
        KeyRange {
            lower,
            lower_inclusive,
            upper: (!end.is_empty()).then_some(end),
        }
    }

    /// SQL condition on `column`, using parameters ?1 (lower) and ?2 (upper).
    fn condition(&self, column: &str) -> String {
        let op = if self.lower_inclusive { ">=" } else { ">" };
        match self.upper {
            Some(_) => format!("{column} {op} ?1 AND {column} < ?2"),
            None => format!("{column} {op} ?1 AND ?2 IS NULL"),
        }
    }
}

pub fn list(conn: &mut Connection, opts: &ListOptions<'_>) -> Result<ListResult> {
    let tx = conn.transaction()?;
    let current: Revision = read_meta(&tx, META_REVISION)?;
    let compacted: Revision = read_meta(&tx, META_COMPACTED)?;
    let at = opts.at_revision.filter(|r| *r > 0).unwrap_or(current);
    if at > current {
        return Err(Error::FutureRevision {
            requested: at,
            current,
        });
    }
    if at < compacted {
        return Err(Error::Compacted {
            requested: at,
            compacted,
        });
    }
    let range = KeyRange::new(opts.prefix, opts.start_after);
    let limit = opts.limit.filter(|l| *l > 0);
    // One more than asked tells whether more remain.
    let sql_limit = limit.map(|l| l as i64 + 1).unwrap_or(-1);
    let sql = if at == current {
        format!(
            "SELECT c.key, l.value, l.create_revision, l.revision
             FROM current c JOIN log l ON l.revision = c.revision
             WHERE {} ORDER BY c.key LIMIT ?3",
            range.condition("c.key")
        )
    } else {
        // The state at `at`: per key, its latest row at or below `at`, unless that row is a tombstone.
        format!(
            "SELECT l.key, l.value, l.create_revision, l.revision
             FROM (SELECT max(revision) AS rev FROM log WHERE {} AND revision <= ?4 GROUP BY key) m
             JOIN log l ON l.revision = m.rev
             WHERE l.deleted = 0 ORDER BY l.key LIMIT ?3",
            range.condition("key")
        )
    };
    let mut items = Vec::new();
    {
        let mut stmt = tx.prepare_cached(&sql)?;
        let map = |r: &Row| {
            Ok(KeyValue {
                key: key_of(r, 0)?,
                value: Bytes::from(r.get::<_, Vec<u8>>(1)?),
                create_revision: r.get(2)?,
                mod_revision: r.get(3)?,
            })
        };
        let rows = if at == current {
            stmt.query_map(params![range.lower, range.upper, sql_limit], map)?
                .collect::<rusqlite::Result<Vec<_>>>()?
        } else {
            stmt.query_map(params![range.lower, range.upper, sql_limit, at], map)?
                .collect::<rusqlite::Result<Vec<_>>>()?
        };
        items.extend(rows);
    }
    let more = matches!(limit, Some(l) if items.len() > l);
    // The range's size whatever the limit (etcd's `count`), counted only when the page did not hold it all.
    let count = if more {
        let sql = if at == current {
            format!(
                "SELECT count(*) FROM current WHERE {}",
                range.condition("key")
            )
        } else {
            format!(
                "SELECT count(*)
                 FROM (SELECT max(revision) AS rev FROM log WHERE {} AND revision <= ?3 GROUP BY key) m
                 JOIN log l ON l.revision = m.rev WHERE l.deleted = 0",
                range.condition("key")
            )
        };
        let mut stmt = tx.prepare_cached(&sql)?;
        if at == current {
            stmt.query_row(params![range.lower, range.upper], |r| r.get(0))?
        } else {
            stmt.query_row(params![range.lower, range.upper, at], |r| r.get(0))?
        }
    } else {
        items.len() as i64
    };
    tx.commit()?;
    if let Some(l) = limit {
        items.truncate(l);
    }
    Ok(ListResult {
        items,
        revision: at,
        more,
        count,
    })
}

pub fn count(conn: &Connection, prefix: &str) -> Result<i64> {
    let range = KeyRange::new(prefix, None);
    let sql = format!(
        "SELECT count(*) FROM current WHERE {}",
        range.condition("key")
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![range.lower, range.upper], |r| r.get(0))?)
}

/// Events under `prefix` with revision in `(after, ...]`, at most `limit` of them, in order; with the
/// store revision of the snapshot they were read from. Fails with Compacted if `after` is too old.
pub fn history(
    conn: &mut Connection,
    prefix: &str,
    after: Revision,
    limit: usize,
) -> Result<(Vec<Event>, Revision)> {
    let tx = conn.transaction()?;
    let current: Revision = read_meta(&tx, META_REVISION)?;
    let compacted: Revision = read_meta(&tx, META_COMPACTED)?;
    if after < compacted {
        return Err(Error::Compacted {
            requested: after,
            compacted,
        });
    }
    let range = KeyRange::new(prefix, None);
    let sql = format!(
        "SELECT l.revision, l.key, l.deleted, l.create_revision, l.value, l.prev_revision, p.value
         FROM log l LEFT JOIN log p ON p.revision = l.prev_revision
         WHERE l.revision > ?3 AND {} ORDER BY l.revision LIMIT ?4",
        // `+` keeps the planner on the revision (rowid) range instead of the key index.
        range.condition("+l.key")
    );
    let events = tx
        .prepare_cached(&sql)?
        .query_map(
            params![range.lower, range.upper, after, limit as i64],
            |r| {
                let revision: Revision = r.get(0)?;
                let key = key_of(r, 1)?;
                let deleted: bool = r.get(2)?;
                let create_revision: Revision = r.get(3)?;
                let value: Vec<u8> = r.get(4)?;
                let prev_revision: Option<Revision> = r.get(5)?;
                let prev_value: Option<Vec<u8>> = r.get(6)?;
                let prev = match (prev_revision, prev_value) {
                    (Some(rev), Some(v)) => Some(KeyValue {
                        key: key.clone(),
                        value: v.into(),
                        create_revision,
                        mod_revision: rev,
                    }),
                    _ => None,
                };
                Ok(Event {
                    kind: if deleted {
                        EventKind::Delete
                    } else {
                        EventKind::Put
                    },
                    kv: KeyValue {
                        key,
                        value: value.into(),
                        create_revision,
                        mod_revision: revision,
                    },
                    prev,
                })
            },
        )?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    tx.commit()?;
    Ok((events, current))
}
