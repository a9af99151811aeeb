//! The nftables backend (upstream `pkg/proxy/nftables`).
pub mod fixed;
pub mod netlink;
pub mod proxier;
pub mod rules;
