//! The `MutatingAdmissionWebhook` plugin (upstream `webhook/mutating`): the matching webhooks are
//! called one after the other in configuration-name order, each seeing the object as the ones
//! before left it; a `JSONPatch` answer is applied to the object (then defaulted again, as
//! upstream). When a webhook changed the object and an earlier one asked for
//! `reinvocationPolicy: IfNeeded`, those earlier ones are called once more.

use std::borrow::Cow;
use std::collections::HashSet;

use apimachinery::status::ApiError;
use serde::Serialize;
use serde_json::Value;

use super::call::{self, Subject};
use super::client::Client;
use super::matching::{request_invocation, Invocation, RequestMatcher};
use super::source::{Hook, Source};
use super::{fail_closed, is_exempt, HookError, MAX_PATCH_OPERATIONS};
use crate::admission::{Attributes, Plugin};
use crate::ApiServer;

/// Audit annotation prefixes (upstream's constants).
const MUTATION_ANNOTATION: &str = "mutation.webhook.admission.k8s.io/";
const PATCH_ANNOTATION: &str = "patch.webhook.admission.k8s.io/";
const FAILED_OPEN_ANNOTATION: &str = "failed-open.mutation.webhook.admission.k8s.io/";

/// The plugin: its compiled configurations and its connections.
pub struct MutatingWebhook {
    source: Source,
    client: Client,
}

impl Default for MutatingWebhook {
    fn default() -> Self {
        MutatingWebhook {
            source: Source::new("mutatingwebhookconfigurations"),
            client: Client::default(),
        }
    }
}

#[async_trait::async_trait]
impl Plugin for MutatingWebhook {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        !is_exempt(attrs)
    }

    async fn admit(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let hooks = self.source.hooks(api);
        if hooks.is_empty() {
            return Ok(());
        }
        let mut dispatch = Dispatch {
            api,
            client: &self.client,
            attrs,
            request: request_invocation(attrs),
            reinvoke: Reinvocation::default(),
        };
        dispatch.run(&hooks, object, old).await
    }
}

/// Upstream's `webhookReinvokeContext`: which webhooks asked to be called again if needed, and
/// which must be.
#[derive(Default)]
struct Reinvocation {
    previously_invoked: HashSet<String>,
    reinvoke: HashSet<String>,
    should_reinvoke: bool,
}

impl Reinvocation {
    /// A webhook changed the object: every reinvocable webhook called before it runs again.
    fn changed(&mut self) {
        self.reinvoke.extend(self.previously_invoked.drain());
        self.should_reinvoke = true;
    }
}

struct Dispatch<'a> {
    api: &'a ApiServer,
    client: &'a Client,
    attrs: &'a Attributes<'a>,
    request: Invocation,
    reinvoke: Reinvocation,
}

#[derive(Serialize)]
struct MutationAnnotation<'a> {
    configuration: &'a str,
    webhook: &'a str,
    mutated: bool,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PatchAnnotation<'a> {
    configuration: &'a str,
    webhook: &'a str,
    patch: &'a Value,
    patch_type: &'a str,
}

impl Dispatch<'_> {
    async fn run(
        &mut self,
        hooks: &[Hook],
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let mut matcher = RequestMatcher::new(self.api, self.attrs);
        for round in 0..2 {
            if round == 1 && !self.reinvoke.should_reinvoke {
                break;
            }
            for (index, hook) in hooks.iter().enumerate() {
                let Some(invocation) = matcher.should_call(hook, object, old).await? else {
                    continue;
                };
                // A webhook is never called for the first time in the second round.
                if round == 1 && !self.reinvoke.reinvoke.contains(&hook.uid) {
                    continue;
                }
                let result = self.call(hook, &invocation, object, old).await;
                let changed = matches!(result, Ok(Some((true, _))));
                if let Ok(Some((_, patch))) = &result {
                    self.annotate(
                        PATCH_ANNOTATION,
                        round,
                        index,
                        &PatchAnnotation {
                            configuration: &hook.configuration,
                            webhook: &hook.name,
                            patch,
                            patch_type: "JSONPatch",
                        },
                    );
                }
                self.annotate(
                    MUTATION_ANNOTATION,
                    round,
                    index,
                    &MutationAnnotation {
                        configuration: &hook.configuration,
                        webhook: &hook.name,
                        mutated: changed,
                    },
                );
                if changed {
                    self.reinvoke.changed();
                }
                if hook.reinvoke {
                    self.reinvoke.previously_invoked.insert(hook.uid.clone());
                }
                match result {
                    Ok(_) => {}
                    Err(HookError::Calling(message)) if hook.fail_open => {
                        tracing::warn!(webhook = %hook.name, error = %message, "failed calling webhook, failing open");
                        self.attrs.outcome.annotate(
                            format!("{FAILED_OPEN_ANNOTATION}round_{round}_index_{index}"),
                            hook.name.clone(),
                        );
                    }
                    Err(HookError::Calling(message)) => {
                        tracing::warn!(webhook = %hook.name, error = %message, "failed calling webhook, failing closed");
                        return Err(fail_closed(&message));
                    }
                    Err(HookError::Refused(e)) => return Err(e),
                }
            }
        }
        Ok(())
    }

    fn annotate(&self, prefix: &str, round: usize, index: usize, value: &impl Serialize) {
        if let Ok(v) = serde_json::to_string(value) {
            self.attrs
                .outcome
                .annotate(format!("{prefix}round_{round}_index_{index}"), v);
        }
    }

    /// Calls one webhook and applies its patch: whether the object changed, and the patch, when
    /// there was one.
    async fn call(
        &self,
        hook: &Hook,
        invocation: &Invocation,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<Option<(bool, Value)>, HookError> {
        let convert = call::needs_conversion(invocation, &self.request);
        let versioned: Cow<'_, Value> = if object.is_null() {
            Cow::Borrowed(&*object)
        } else {
            call::in_version(object, invocation, &self.request)
        };
        let versioned_old = old.map(|o| call::in_version(o, invocation, &self.request));
        let verdict = call::call(
            self.api,
            self.client,
            hook,
            self.attrs,
            Subject {
                invocation,
                request: &self.request,
                object: (!versioned.is_null()).then_some(&*versioned),
                old: versioned_old.as_deref(),
            },
            true,
        )
        .await?;
        let Some(patch) = verdict.patch else {
            return Ok(None);
        };
        let undecodable = |why: String| {
            HookError::calling(
                &hook.name,
                format!("received undecodable patch in webhook response: {why}"),
            )
        };
        let patch: Value =
            serde_json::from_slice(&patch).map_err(|e| undecodable(e.to_string()))?;
        let ops = patch
            .as_array()
            .ok_or_else(|| undecodable("the patch is not a JSON array".into()))?;
        if ops.len() > MAX_PATCH_OPERATIONS {
            return Err(undecodable(format!(
                "more than {MAX_PATCH_OPERATIONS} operations"
            )));
        }
        if ops.is_empty() {
            return Ok(None);
        }
        if versioned.is_null() {
            return Err(HookError::Refused(ApiError::internal(format!(
                "admission webhook {:?} attempted to modify the object, which is not supported for this operation",
                hook.name
            ))));
        }
        if verdict.patch_type != "JSONPatch" {
            return Err(HookError::calling(
                &hook.name,
                format!("unsupported patch type {:?}", verdict.patch_type),
            ));
        }
        let mut patched = apimachinery::patch::apply_json_patch(&versioned, &patch)
            .map_err(|e| HookError::Refused(ApiError::internal(e.message())))?;
        check_identity(&hook.name, &versioned, &patched)?;
        let changed = patched != *versioned;
        apimachinery::defaults::apply_defaults(
            &invocation.kind.group,
            &invocation.kind.kind,
            &mut patched,
        );
        if convert {
            call::convert(
                &mut patched,
                &self.request.kind.kind,
                &self.request.kind.api_version(),
            );
        }
        drop(versioned);
        *object = patched;
        Ok(Some((changed, patch)))
    }
}

/// A webhook may change anything but which object this is: its kind, version, name and
/// namespace decide where the write goes, and were settled before admission.
fn check_identity(webhook: &str, before: &Value, after: &Value) -> Result<(), HookError> {
    for path in [
        "/apiVersion",
        "/kind",
        "/metadata/name",
        "/metadata/namespace",
    ] {
        if before.pointer(path) != after.pointer(path) {
            return Err(HookError::Refused(ApiError::internal(format!(
                "admission webhook {webhook:?} attempted to change {}, which is not supported",
                path.trim_start_matches('/').replace('/', ".")
            ))));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reinvocation_covers_reinvocable_webhooks_called_before_a_change() {
        let mut r = Reinvocation::default();
        r.previously_invoked.insert("a".into());
        r.changed();
        r.previously_invoked.insert("b".into());
        assert!(r.should_reinvoke);
        assert!(r.reinvoke.contains("a") && !r.reinvoke.contains("b"));
    }

    #[test]
    fn a_patch_may_not_move_the_object() {
        let before =
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "n"}});
        let mut after = before.clone();
        after["metadata"]["labels"] = json!({"x": "y"});
        assert!(check_identity("w", &before, &after).is_ok());
        after["metadata"]["name"] = json!("b");
        match check_identity("w", &before, &after) {
            Err(HookError::Refused(e)) => {
                assert_eq!(e.code, 500);
                assert!(
                    e.message.contains("attempted to change metadata.name"),
                    "{}",
                    e.message
                );
            }
            other => panic!("{other:?}"),
        }
    }
}
