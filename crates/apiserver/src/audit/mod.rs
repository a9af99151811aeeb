//! Audit logging (upstream kube-apiserver's `--audit-policy-file` with the log backend's
//! `--audit-log-*` flags): every request the [`policy`] selects is recorded as `audit.k8s.io/v1`
//! [`event`]s (who, what, on which object, with which answer) handed to the backends: JSON lines
//! by the [`log`] backend, `EventList` POSTs by the [`webhook`] backend (batched by [`buffered`]),
//! both at once when both are configured (upstream's union backend). [`request`] follows one
//! request through the handler chain.
//!
//! With auditing off (`Config::audit` unset) the server holds no [`Auditor`] and no request does
//! any audit work. [`truncate`] trims or drops events over `--audit-<plugin>-truncate-max-event-size`.
//! Not built: the log backend's `batch`/`blocking` modes and their `--audit-log-batch-*` flags,
//! `--audit-log-maxage`, `--audit-log-compress`, `--audit-log-format legacy`, dynamic
//! (API-configured) policy.

pub mod buffered;
pub mod event;
pub mod log;
pub mod policy;
mod request;
pub mod truncate;
pub mod webhook;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use event::Event;
pub use request::{AdmissionAnnotations, RequestAudit, AUDIT_ID_HEADER};

/// `--audit-webhook-mode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WebhookMode {
    /// Events are buffered and sent in batches off the request path (upstream's default).
    Batch,
    /// Each event is sent while its request waits.
    Blocking,
    /// As blocking, and a request whose `RequestReceived` event cannot be sent fails (500).
    BlockingStrict,
}

impl std::str::FromStr for WebhookMode {
    type Err = String;
    fn from_str(s: &str) -> Result<WebhookMode, String> {
        match s {
            "batch" => Ok(WebhookMode::Batch),
            "blocking" => Ok(WebhookMode::Blocking),
            "blocking-strict" => Ok(WebhookMode::BlockingStrict),
            _ => Err(format!("invalid audit webhook mode {s:?}, allowed modes are \"batch\", \"blocking\", \"blocking-strict\"")),
        }
    }
}

/// `--audit-webhook-*`.
#[derive(Clone, Debug)]
pub struct WebhookConfig {
    /// `--audit-webhook-config-file`: a kubeconfig naming the receiver.
    pub config_file: PathBuf,
    pub mode: WebhookMode,
    pub batch: buffered::BatchConfig,
    /// `--audit-webhook-initial-backoff` (upstream: 10 s).
    pub initial_backoff: Duration,
    /// `--audit-webhook-truncate-*`, when `--audit-webhook-truncate-enabled`.
    pub truncate: Option<truncate::TruncateConfig>,
}

/// `--audit-policy-file` and the backends' flags.
#[derive(Clone, Debug)]
pub struct Config {
    pub policy_file: PathBuf,
    /// `--audit-log-path`; `-` is stdout. None: no log backend.
    pub log_path: Option<PathBuf>,
    /// `--audit-log-maxsize` in megabytes (0: 100, lumberjack's default, as upstream).
    pub log_max_size_mb: u64,
    /// `--audit-log-maxbackup` (0: keep every rotated file).
    pub log_max_backups: usize,
    /// `--audit-log-truncate-*`, when `--audit-log-truncate-enabled`.
    pub log_truncate: Option<truncate::TruncateConfig>,
    /// None: no webhook backend.
    pub webhook: Option<WebhookConfig>,
}

/// Where events go.
pub(crate) enum Backend {
    Log(log::LogBackend),
    Webhook(buffered::Buffered),
    /// `strict`: a failed POST is reported (upstream's blocking-strict); otherwise ignored, as
    /// upstream's blocking mode wraps the webhook in an errors-ignoring backend.
    BlockingWebhook {
        sender: webhook::BlockingWebhook,
        webhook: Arc<webhook::Webhook>,
        strict: bool,
    },
}

impl Backend {
    /// False when the event was not recorded and the backend says so (only blocking-strict).
    fn process(&self, event: Event) -> bool {
        match self {
            Backend::Log(b) => {
                b.process(event);
                true
            }
            Backend::Webhook(b) => {
                b.process(event);
                true
            }
            Backend::BlockingWebhook { sender, strict, .. } => sender.process(event) || !strict,
        }
    }

    fn plugin_errors(&self) -> (&'static str, u64) {
        match self {
            Backend::Log(b) => ("log", b.errors()),
            Backend::Webhook(b) => ("webhook", b.errors()),
            Backend::BlockingWebhook { webhook, .. } => {
                ("webhook", webhook.errors.load(Ordering::Relaxed))
            }
        }
    }
}

/// Upstream's union backend: every event to each backend.
#[derive(Default)]
pub(crate) struct Backends {
    list: Vec<Backend>,
    events: AtomicU64,
    /// Requests failed because their `RequestReceived` event could not be recorded.
    rejected: AtomicU64,
}

impl Backends {
    pub(crate) fn new(list: Vec<Backend>) -> Backends {
        Backends {
            list,
            events: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    /// Every backend gets the event; false when one of them reports it lost (as upstream's
    /// union backend).
    pub(crate) fn process(&self, event: Event) -> bool {
        self.events.fetch_add(1, Ordering::Relaxed);
        let mut ok = true;
        let last = self.list.len().saturating_sub(1);
        let mut event = Some(event);
        for (i, b) in self.list.iter().enumerate() {
            let this = if i == last {
                event.take()
            } else {
                event.clone()
            };
            if let Some(e) = this {
                ok &= b.process(e);
            }
        }
        ok
    }

    pub(crate) fn note_rejected(&self) {
        self.rejected.fetch_add(1, Ordering::Relaxed);
    }

    /// Upstream's audit counters, for `/metrics`.
    fn render_metrics(&self) -> String {
        let mut out = format!(
            "# HELP apiserver_audit_event_total [ALPHA] Counter of audit events generated and sent to the audit backend.\n\
             # TYPE apiserver_audit_event_total counter\n\
             apiserver_audit_event_total {}\n\
             # HELP apiserver_audit_error_total [ALPHA] Counter of audit events that failed to be audited properly. Plugin identifies the plugin affected by the error.\n\
             # TYPE apiserver_audit_error_total counter\n",
            self.events.load(Ordering::Relaxed),
        );
        let rejected = format!(
            "# HELP apiserver_audit_requests_rejected_total [ALPHA] Counter of apiserver requests rejected due to an error in audit logging backend.\n\
             # TYPE apiserver_audit_requests_rejected_total counter\n\
             apiserver_audit_requests_rejected_total {}\n",
            self.rejected.load(Ordering::Relaxed)
        );
        for b in &self.list {
            let (plugin, n) = b.plugin_errors();
            out.push_str(&format!(
                "apiserver_audit_error_total{{plugin=\"{plugin}\"}} {n}\n"
            ));
        }
        out.push_str(&rejected);
        out
    }
}

/// The server's auditing: the policy and where events go.
pub struct Auditor {
    policy: policy::Policy,
    backend: Arc<Backends>,
}

impl Auditor {
    /// Loads the policy (a bad one is an error naming the file), opens the log and reads the
    /// webhook's kubeconfig.
    pub fn start(config: &Config) -> Result<Auditor, String> {
        let policy = policy::Policy::load(&config.policy_file)?;
        if let Some(t) = &config.log_truncate {
            t.validate("log")?;
        }
        if let Some(t) = config.webhook.as_ref().and_then(|w| w.truncate.as_ref()) {
            t.validate("webhook")?;
        }
        let mut list = Vec::new();
        if let Some(path) = &config.log_path {
            let max_bytes = match config.log_max_size_mb {
                0 => log::DEFAULT_MAX_BYTES,
                mb => mb.saturating_mul(1 << 20),
            };
            let log = log::LogBackend::start_with(
                path,
                max_bytes,
                config.log_max_backups,
                config.log_truncate,
            )?;
            list.push(Backend::Log(log));
        }
        if let Some(w) = &config.webhook {
            let target = webhook::Target::load(&w.config_file).map_err(|e| e.to_string())?;
            let hook = Arc::new(
                webhook::Webhook::new(target, w.initial_backoff).with_truncate(w.truncate),
            );
            list.push(match w.mode {
                WebhookMode::Batch => {
                    Backend::Webhook(buffered::Buffered::start(hook, w.batch.clone())?)
                }
                WebhookMode::Blocking | WebhookMode::BlockingStrict => Backend::BlockingWebhook {
                    sender: webhook::BlockingWebhook::start(hook.clone())?,
                    webhook: hook,
                    strict: w.mode == WebhookMode::BlockingStrict,
                },
            });
        }
        if list.is_empty() {
            return Err("auditing needs --audit-log-path or --audit-webhook-config-file".into());
        }
        Ok(Auditor {
            policy,
            backend: Arc::new(Backends::new(list)),
        })
    }

    /// The audit counters for `/metrics`.
    pub fn metrics(&self) -> String {
        self.backend.render_metrics()
    }
}
