//! The iptables backend (upstream `pkg/proxy/iptables`).
pub mod proxier;
pub mod rules;
