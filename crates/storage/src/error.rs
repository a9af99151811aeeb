//! Storage errors. The API server maps them to `Status` codes: NotFound 404, AlreadyExists 409,
//! Conflict 409, Compacted 410 (Gone / "Expired"), FutureRevision 504 (upstream's "Too large resource
//! version"), the rest 500.

use std::path::PathBuf;

use crate::Revision;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("key {key:?} not found")]
    NotFound { key: String },

    #[error("key {key:?} already exists")]
    AlreadyExists { key: String },

    #[error("conflict on key {key:?}: expected mod revision {expected}, current is {actual}")]
    Conflict {
        key: String,
        expected: Revision,
        actual: Revision,
    },

    #[error("revision {requested} has been compacted (oldest available is {compacted})")]
    Compacted {
        requested: Revision,
        compacted: Revision,
    },

    #[error("revision {requested} is in the future (current is {current})")]
    FutureRevision {
        requested: Revision,
        current: Revision,
    },

    #[error("cannot open store {}: {message}", path.display())]
    Open { path: PathBuf, message: String },

    #[error("the store is closed")]
    Closed,

    #[error("storage backend error: {0}")]
    Backend(String),
}

impl Error {
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }
    pub fn is_compacted(&self) -> bool {
        matches!(self, Error::Compacted { .. })
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Backend(format!("sqlite: {e}"))
    }
}

impl From<etcd_client::Error> for Error {
    fn from(e: etcd_client::Error) -> Self {
        Error::Backend(format!("etcd: {e}"))
    }
}
