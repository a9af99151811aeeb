//! The `ValidatingAdmissionWebhook` plugin (upstream `webhook/validating`): every matching webhook
//! is called at once with the final object; any denial, or a failed call of a `failurePolicy:
//! Fail` webhook, refuses the request.

use std::borrow::Cow;

use apimachinery::status::ApiError;
use serde_json::Value;

use super::call::{self, Subject};
use super::client::Client;
use super::matching::{request_invocation, RequestMatcher};
use super::source::Source;
use super::{fail_closed, is_exempt, HookError};
use crate::admission::{Attributes, Plugin};
use crate::ApiServer;

/// Upstream's audit annotation for a validating webhook that failed open.
const FAILED_OPEN_ANNOTATION: &str = "failed-open.validating.webhook.admission.k8s.io/";

/// The plugin: its compiled configurations and its connections.
pub struct ValidatingWebhook {
    source: Source,
    client: Client,
}

impl Default for ValidatingWebhook {
    fn default() -> Self {
        ValidatingWebhook {
            source: Source::new("validatingwebhookconfigurations"),
            client: Client::default(),
        }
    }
}

#[async_trait::async_trait]
impl Plugin for ValidatingWebhook {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        !is_exempt(attrs)
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let hooks = self.source.hooks(api);
        if hooks.is_empty() {
            return Ok(());
        }
        let request = request_invocation(attrs);
        let mut matcher = RequestMatcher::new(api, attrs);
        let mut relevant = Vec::new();
        for (index, hook) in hooks.iter().enumerate() {
            if let Some(invocation) = matcher.should_call(hook, object, old).await? {
                relevant.push((index, hook, invocation));
            }
        }
        if relevant.is_empty() {
            return Ok(());
        }
        // The objects in each invocation's version (nearly always the request's own).
        let versioned: Vec<(Option<Cow<'_, Value>>, Option<Cow<'_, Value>>)> = relevant
            .iter()
            .map(|(_, _, inv)| {
                (
                    (!object.is_null()).then(|| call::in_version(object, inv, &request)),
                    old.map(|o| call::in_version(o, inv, &request)),
                )
            })
            .collect();
        let calls = relevant
            .iter()
            .zip(&versioned)
            .map(|((_, hook, invocation), (obj, old))| {
                call::call(
                    api,
                    &self.client,
                    hook,
                    attrs,
                    Subject {
                        invocation,
                        request: &request,
                        object: obj.as_deref(),
                        old: old.as_deref(),
                    },
                    false,
                )
            });
        let results = futures::future::join_all(calls).await;
        let mut refusal = None;
        for ((index, hook, _), result) in relevant.iter().zip(results) {
            match result {
                Ok(_) => {}
                Err(HookError::Calling(message)) if hook.fail_open => {
                    tracing::warn!(webhook = %hook.name, error = %message, "failed calling webhook, failing open");
                    attrs.outcome.annotate(
                        format!("{FAILED_OPEN_ANNOTATION}round_0_index_{index}"),
                        hook.name.clone(),
                    );
                }
                Err(HookError::Calling(message)) => {
                    tracing::warn!(webhook = %hook.name, error = %message, "failed calling webhook, failing closed");
                    refusal.get_or_insert_with(|| fail_closed(&message));
                }
                Err(HookError::Refused(e)) => {
                    refusal.get_or_insert(e);
                }
            }
        }
        refusal.map_or(Ok(()), Err)
    }
}
