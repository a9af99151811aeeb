//! The nftables backend (upstream `pkg/proxy/nftables`).
pub mod proxier;
pub mod rules;
