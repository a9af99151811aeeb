//! The conformance suite against the SQLite backend, each case on a fresh database file.

mod conformance;

use std::sync::Arc;

use async_trait::async_trait;
use conformance::Backend;
use storage::sqlite::{SqliteOptions, SqliteStore};
use storage::Store;

struct Sqlite {
    dir: tempfile::TempDir,
    current: Option<SqliteStore>,
}

impl Sqlite {
    fn new() -> Sqlite {
        Sqlite {
            dir: tempfile::tempdir().expect("tempdir"),
            current: None,
        }
    }

    fn open_store(&mut self) -> Arc<dyn Store> {
        let store = SqliteStore::open(self.dir.path().join("state.db"), SqliteOptions::default())
            .expect("open sqlite store");
        self.current = Some(store.clone());
        Arc::new(store)
    }
}

#[async_trait]
impl Backend for Sqlite {
    async fn open(&mut self) -> Arc<dyn Store> {
        self.open_store()
    }

    async fn reopen(&mut self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        drop(store);
        if let Some(current) = self.current.take() {
            current.close().await;
        }
        self.open_store()
    }
}

conformance_suite!(Sqlite::new());
