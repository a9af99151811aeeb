//! The core group's kinds with behaviour of their own.

pub mod event;
pub mod namespace;
pub mod node;
pub mod persistentvolume;
pub mod pod;
pub mod replicationcontroller;
pub mod service;
