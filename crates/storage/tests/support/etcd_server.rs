//! A throwaway etcd for tests: [`storage::etcd_process::EtcdProcess`], which panics (never skips) when
//! etcd cannot start, e.g. because scripts/test.sh has not installed it.
//!
//! Include it with `#[path = "support/etcd_server.rs"] mod etcd_server;`.

#![allow(dead_code)]

pub use storage::etcd_process::EtcdProcess as EtcdServer;

pub fn start() -> EtcdServer {
    EtcdServer::start().unwrap_or_else(|e| panic!("{e}"))
}
