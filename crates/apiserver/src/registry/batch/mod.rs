//! The `batch` group's kinds with behaviour of their own.

pub mod job;
