//! `spec.podFailurePolicy` (upstream `pkg/controller/job/pod_failure_policy.go`): the first rule that
//! matches a failed pod's container exit codes or pod conditions decides whether the failure fails the
//! Job, is ignored, or counts against `backoffLimit`.

use k8s_openapi::api::batch::v1::{PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement};
use k8s_openapi::api::core::v1::{ContainerStatus, Pod};

/// What a failed pod means under the policy.
#[derive(Debug, Clone, PartialEq)]
pub struct Verdict {
    /// Set when a FailJob rule matched: the Job fails with this message.
    pub fail_job: Option<String>,
    /// Whether the failure counts against `backoffLimit` (false for Ignore).
    pub count: bool,
    /// The action of the matching rule, if any.
    pub action: Option<String>,
}

/// Upstream `matchPodFailurePolicy`. Without a policy every failure counts.
pub fn matches(policy: Option<&PodFailurePolicy>, pod: &Pod) -> Verdict {
    let counted = |action: Option<&str>| Verdict {
        fail_job: None,
        count: true,
        action: action.map(String::from),
    };
    let Some(policy) = policy else {
        return counted(None);
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    for (i, rule) in policy.rules.iter().enumerate() {
        let what = if let Some(req) = &rule.on_exit_codes {
            matching_container(pod, req).map(|c| {
                let code = c
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map_or(0, |t| t.exit_code);
                format!(
                    "Container {} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {i}",
                    c.name, rule.action
                )
            })
        } else if let Some(patterns) = &rule.on_pod_conditions {
            pod.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| {
                    patterns.iter().any(|p| {
                        p.type_ == c.type_ && p.status.as_deref().unwrap_or("True") == c.status
                    })
                })
                .map(|c| {
                    format!(
                        "Pod {ns}/{name} has condition {} matching {} rule at index {i}",
                        c.type_, rule.action
                    )
                })
        } else {
            None
        };
        let Some(message) = what else { continue };
        match rule.action.as_str() {
            "Ignore" => {
                return Verdict {
                    fail_job: None,
                    count: false,
                    action: Some("Ignore".into()),
                }
            }
            "FailJob" => {
                return Verdict {
                    fail_job: Some(message),
                    count: true,
                    action: Some("FailJob".into()),
                }
            }
            "Count" | "FailIndex" => return counted(Some(&rule.action)),
            // An action this version does not know: upstream's switch falls through to the next rule.
            _ => {}
        }
    }
    counted(None)
}

/// The first terminated container (then init container) with a non-zero exit code that the
/// requirement matches (upstream `matchOnExitCodes`).
fn matching_container<'a>(
    pod: &'a Pod,
    req: &PodFailurePolicyOnExitCodesRequirement,
) -> Option<&'a ContainerStatus> {
    let status = pod.status.as_ref()?;
    let lists = [&status.container_statuses, &status.init_container_statuses];
    lists.into_iter().flatten().find_map(|list| {
        list.iter().find(|c| {
            let Some(t) = c.state.as_ref().and_then(|s| s.terminated.as_ref()) else {
                return false;
            };
            let name_ok = req.container_name.as_ref().is_none_or(|n| *n == c.name);
            let in_values = req.values.contains(&t.exit_code);
            let op_ok = match req.operator.as_str() {
                "In" => in_values,
                "NotIn" => !in_values,
                _ => false,
            };
            name_ok && t.exit_code != 0 && op_ok
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn failed_pod(code: i32, conditions: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "status": {"phase": "Failed", "conditions": conditions, "containerStatuses": [{
                "name": "main", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": code}},
            }]},
        }))
        .unwrap()
    }

    fn policy(v: serde_json::Value) -> PodFailurePolicy {
        serde_json::from_value(json!({ "rules": v })).unwrap()
    }

    #[test]
    fn exit_code_rules_in_order() {
        let p = policy(json!([
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [3]}},
            {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
            {"action": "Count", "onExitCodes": {"operator": "NotIn", "values": [1]}},
        ]));
        let v = matches(Some(&p), &failed_pod(42, json!([])));
        assert_eq!(
            v.fail_job.as_deref(),
            Some("Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 1")
        );
        assert!(!matches(Some(&p), &failed_pod(3, json!([]))).count);
        let v = matches(Some(&p), &failed_pod(5, json!([])));
        assert_eq!((v.count, v.action.as_deref()), (true, Some("Count")));
        let v = matches(Some(&p), &failed_pod(1, json!([])));
        assert_eq!((v.fail_job, v.count, v.action), (None, true, None));
    }

    #[test]
    fn pod_condition_rules() {
        let p = policy(json!([
            {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
            {"action": "FailJob", "onPodConditions": [{"type": "ConfigIssue", "status": "True"}]},
        ]));
        let disrupted = failed_pod(1, json!([{"type": "DisruptionTarget", "status": "True"}]));
        assert!(!matches(Some(&p), &disrupted).count);
        let config = failed_pod(1, json!([{"type": "ConfigIssue", "status": "True"}]));
        assert_eq!(
            matches(Some(&p), &config).fail_job.as_deref(),
            Some("Pod ns/p has condition ConfigIssue matching FailJob rule at index 1")
        );
        assert!(matches(None, &config).count);
    }

    #[test]
    fn zero_exit_code_never_matches() {
        let p = policy(
            json!([{"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [1]}}]),
        );
        assert_eq!(matches(Some(&p), &failed_pod(0, json!([]))).fail_job, None);
    }
}
