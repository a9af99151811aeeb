//! Admission webhooks (upstream `k8s.io/apiserver/pkg/admission/plugin/webhook`): the
//! `MutatingAdmissionWebhook` and `ValidatingAdmissionWebhook` plugins call the webhooks of the
//! `admissionregistration.k8s.io/v1` Mutating/ValidatingWebhookConfigurations with an
//! `AdmissionReview` over HTTPS.
//!
//! - [`source`]: configurations read from the watch cache and compiled once per resourceVersion;
//! - [`matching`]: rules (operations, groups, versions, resources, scope, matchPolicy Equivalent),
//!   namespace and object selectors, then [`conditions`] (`matchConditions` in CEL);
//! - [`review`]: the AdmissionReview sent (v1 or v1beta1) and the response's checks, denials as
//!   upstream words them;
//! - [`client`]: HTTPS with the configuration's caBundle, pooled connections, timeouts, bounded
//!   responses; [`service`] resolves a `service` reference to a ready endpoint;
//! - [`mutating`] (sequential, JSONPatch responses, reinvocation) and [`validating`] (parallel).
//!
//! Differences from upstream, on purpose or for now:
//! - `matchConditions` cannot use the `authorizer` variable (see [`conditions`]).
//! - Reinvocation (`reinvocationPolicy: IfNeeded`) re-runs the webhooks only: the in-tree mutating
//!   plugins are not run a second time (the chain has no reinvocation).
//! - A webhook's status `reason` outside upstream's `StatusReason` constants is sent back empty.
//! - Validating webhooks run in parallel, and when several refuse, the first in configuration order
//!   answers (upstream: the first to finish).

pub mod call;
pub mod client;
pub mod conditions;
pub mod matching;
pub mod mutating;
pub mod review;
pub mod source;
pub mod validating;

use apimachinery::status::{ApiError, Cause, Details};

use super::Attributes;

pub use mutating::MutatingWebhook;
pub use validating::ValidatingWebhook;

/// The most bytes read from a webhook's response; a larger one is a failed call. Upstream reads
/// without a limit; objects are at most 3 MiB, and a patch of one in base64 is 4/3 of that.
pub const MAX_RESPONSE_BYTES: usize = 8 << 20;
/// The most bytes of a decoded JSONPatch, and the most operations in it.
pub const MAX_PATCH_BYTES: usize = 4 << 20;
pub const MAX_PATCH_OPERATIONS: usize = 10_000;
/// The most warnings and audit annotations taken from one response (the request's
/// [`super::Outcome`] bounds the totals too).
pub const MAX_RESPONSE_WARNINGS: usize = super::MAX_WARNINGS;
pub const MAX_RESPONSE_ANNOTATIONS: usize = super::MAX_AUDIT_ANNOTATIONS;

/// Webhooks never see writes of their own configurations or of admission policies, so a broken
/// webhook cannot lock out its own repair (upstream `IsExemptAdmissionConfigurationResource`).
pub fn is_exempt(attrs: &Attributes<'_>) -> bool {
    attrs.group == "admissionregistration.k8s.io"
        && matches!(
            attrs.kind,
            "ValidatingWebhookConfiguration"
                | "MutatingWebhookConfiguration"
                | "ValidatingAdmissionPolicy"
                | "ValidatingAdmissionPolicyBinding"
                | "MutatingAdmissionPolicy"
                | "MutatingAdmissionPolicyBinding"
        )
}

/// Why calling one webhook did not give an answer to act on.
#[derive(Debug)]
pub enum HookError {
    /// The webhook could not be called or gave an unusable answer (upstream `ErrCallingWebhook`):
    /// `failurePolicy` decides. The text is the whole `failed calling webhook "x": ...` message.
    Calling(String),
    /// An answer for the request as it stands: the webhook's denial, a dry run it does not support,
    /// or an error applying its patch. Not subject to `failurePolicy`.
    Refused(ApiError),
}

impl HookError {
    /// Upstream `ErrCallingWebhook.Error()`.
    pub fn calling(webhook: &str, reason: impl std::fmt::Display) -> HookError {
        HookError::Calling(format!("failed calling webhook {webhook:?}: {reason}"))
    }
}

/// The 500 a failed call becomes under `failurePolicy: Fail` (upstream `apierrors.NewInternalError`,
/// which also carries the text as the one cause).
pub fn fail_closed(message: &str) -> ApiError {
    let mut err = ApiError::internal(message);
    err.details = Some(Box::new(Details {
        causes: vec![Cause {
            reason: String::new(),
            message: message.to_string(),
            field: String::new(),
        }],
        ..Details::default()
    }));
    err
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Operation, Outcome};
    use crate::authn::UserInfo;

    #[test]
    fn webhook_and_policy_kinds_are_exempt() {
        let outcome = Outcome::default();
        let user = UserInfo::server();
        let attrs = |group: &'static str, kind: &'static str| Attributes {
            group,
            version: "v1",
            kind,
            resource: "x",
            subresource: None,
            namespace: "",
            name: "n",
            operation: Operation::Create,
            dry_run: false,
            user,
            outcome: &outcome,
        };
        for kind in [
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
        ] {
            assert!(
                is_exempt(&attrs("admissionregistration.k8s.io", kind)),
                "{kind}"
            );
        }
        assert!(!is_exempt(&attrs("", "ConfigMap")));
        assert!(!is_exempt(&attrs(
            "example.com",
            "MutatingWebhookConfiguration"
        )));
    }

    #[test]
    fn failing_closed_is_upstreams_internal_error() {
        let e = fail_closed(r#"failed calling webhook "a.example.com": boom"#);
        assert_eq!(e.code, 500);
        assert_eq!(
            e.message,
            r#"Internal error occurred: failed calling webhook "a.example.com": boom"#
        );
        assert_eq!(
            e.details.unwrap().causes[0].message,
            r#"failed calling webhook "a.example.com": boom"#
        );
    }
}
