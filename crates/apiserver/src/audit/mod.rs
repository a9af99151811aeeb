//! Audit logging (upstream kube-apiserver's `--audit-policy-file` with the log backend's
//! `--audit-log-*` flags): every request the [`policy`] selects is recorded as `audit.k8s.io/v1`
//! [`event`]s (who, what, on which object, with which answer) written as JSON lines by the
//! [`log`] backend. [`request`] follows one request through the handler chain.
//!
//! With auditing off (`Config::audit` unset) the server holds no [`Auditor`] and no request does
//! any audit work. Not built: the webhook backend, the `batch`/`blocking` modes and their
//! `--audit-*-batch-*` flags, `--audit-log-maxage`, `--audit-log-compress`, `--audit-log-format
//! legacy`, dynamic (API-configured) policy.

pub mod event;
pub mod log;
pub mod policy;
mod request;

use std::path::PathBuf;
use std::sync::Arc;

pub use request::{AdmissionAnnotations, RequestAudit, AUDIT_ID_HEADER};

/// `--audit-policy-file` and the log backend's flags.
#[derive(Clone, Debug)]
pub struct Config {
    pub policy_file: PathBuf,
    /// `--audit-log-path`; `-` is stdout.
    pub log_path: PathBuf,
    /// `--audit-log-maxsize` in megabytes (0: 100, lumberjack's default, as upstream).
    pub log_max_size_mb: u64,
    /// `--audit-log-maxbackup` (0: keep every rotated file).
    pub log_max_backups: usize,
}

/// The server's auditing: the policy and where events go.
pub struct Auditor {
    policy: policy::Policy,
    backend: Arc<log::LogBackend>,
}

impl Auditor {
    /// Loads the policy (a bad one is an error naming the file) and opens the log.
    pub fn start(config: &Config) -> Result<Auditor, String> {
        let policy = policy::Policy::load(&config.policy_file)?;
        let max_bytes = match config.log_max_size_mb {
            0 => log::DEFAULT_MAX_BYTES,
            mb => mb.saturating_mul(1 << 20),
        };
        let backend = log::LogBackend::start(&config.log_path, max_bytes, config.log_max_backups)?;
        Ok(Auditor {
            policy,
            backend: Arc::new(backend),
        })
    }

    /// The audit counters for `/metrics`.
    pub fn metrics(&self) -> String {
        self.backend.render_metrics()
    }
}
