//! The conformance suite against the etcd backend: each case on its own freshly started etcd.

mod conformance;
#[path = "support/etcd_server.rs"]
mod etcd_server;

use std::sync::Arc;

use async_trait::async_trait;
use conformance::Backend;
use etcd_server::EtcdServer;
use storage::etcd::{EtcdStore, DEFAULT_PREFIX};
use storage::Store;

struct Etcd {
    server: EtcdServer,
}

impl Etcd {
    fn new() -> Etcd {
        Etcd {
            server: etcd_server::start(),
        }
    }
}

#[async_trait]
impl Backend for Etcd {
    async fn open(&mut self) -> Arc<dyn Store> {
        let mut store =
            EtcdStore::connect(std::slice::from_ref(&self.server.endpoint), DEFAULT_PREFIX)
                .await
                .expect("connect to etcd");
        // The machine's etcd may predate the progress fixes (3.4.31/3.5.13), which the store then does
        // not ask for; the suite's progress case has no events in flight when it asks, where older
        // releases answer correctly too.
        store.set_reports_progress(true);
        Arc::new(store)
    }

    async fn reopen(&mut self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        drop(store);
        self.open().await
    }
}

conformance_suite!(Etcd::new());
