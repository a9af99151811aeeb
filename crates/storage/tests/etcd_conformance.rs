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
        let store = EtcdStore::connect(std::slice::from_ref(&self.server.endpoint), DEFAULT_PREFIX)
            .await
            .expect("connect to etcd");
        Arc::new(store)
    }

    async fn reopen(&mut self, store: Arc<dyn Store>) -> Arc<dyn Store> {
        drop(store);
        self.open().await
    }
}

conformance_suite!(Etcd::new());
