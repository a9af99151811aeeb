//! `POST pods/<name>/eviction` (upstream `EvictionREST`): a pod is deleted unless the one
//! PodDisruptionBudget selecting it allows no disruption (429 naming the budget). An allowed eviction
//! first takes one from the budget's `disruptionsAllowed` and records the pod in `disruptedPods` (so
//! the disruption controller does not count it healthy meanwhile), then marks the pod with the
//! `DisruptionTarget` condition and deletes it. Pods that are not running (or already terminating)
//! and, by `unhealthyPodEvictionPolicy`, unready pods go without taking from the budget.

use apimachinery::status::{ApiError, Cause, Details};
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::add_condition;
use crate::objects;
use crate::response::{self, Body};
use crate::rest::common::{DeleteOptions, MAX_RETRIES};
use crate::rest::{decode, delete_one, storage_error, Ctx};

/// Upstream `MaxDisruptedPodSize`.
const MAX_DISRUPTED_PODS: usize = 2000;

fn too_many_requests(message: String) -> ApiError {
    ApiError {
        code: 429,
        reason: "TooManyRequests",
        message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
        details: Some(Box::new(Details {
            causes: vec![Cause {
                reason: "DisruptionBudget".into(),
                message,
                field: String::new(),
            }],
            ..Default::default()
        })),
    }
}

fn forbidden(pdb: &str, why: &str) -> ApiError {
    ApiError::forbidden(format!(
        "poddisruptionbudgets.policy \"{pdb}\" is forbidden: {why}"
    ))
}

fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Upstream `canIgnorePDB`: a pod that is not running, or already terminating, disrupts nothing.
fn can_ignore_budget(pod: &Value) -> bool {
    matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed" | "Pending")
    ) || objects::meta_str(pod, "deletionTimestamp").is_some()
}

/// The budgets of the pod's namespace whose selector matches it, as stored (with resourceVersion).
async fn budgets(ctx: &Ctx<'_>, pod: &Value) -> Result<Vec<(Value, i64)>, ApiError> {
    let labels = objects::labels(pod).cloned().unwrap_or_default();
    let prefix = format!("/poddisruptionbudgets/{}/", ctx.namespace());
    let kvs = ctx
        .api
        .store
        .list(storage::ListOptions::prefix(&prefix))
        .await
        .map_err(storage_error)?;
    let mut matching = Vec::new();
    for kv in kvs.items {
        let Ok(pdb) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        let selects = pdb
            .pointer("/spec/selector")
            .and_then(|s| apimachinery::labels::selector_from_label_selector(s).ok())
            .is_some_and(|s| !s.is_empty() && s.matches(&labels));
        if selects {
            matching.push((pdb, kv.mod_revision));
        }
    }
    Ok(matching)
}

/// Upstream `checkAndDecrement`: the budget with one disruption less and the pod recorded, or why not.
fn check_and_decrement(pdb: &Value, pod_name: &str) -> Result<Value, ApiError> {
    let name = objects::meta_str(pdb, "name").unwrap_or("");
    let status = |f: &str| {
        pdb.pointer(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    let generation = pdb
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if status("observedGeneration") < generation {
        return Err(too_many_requests(format!(
            "The disruption budget {name} is still being processed by the server."
        )));
    }
    let allowed = status("disruptionsAllowed");
    if allowed < 0 {
        return Err(forbidden(name, "pdb disruptions allowed is negative"));
    }
    let disrupted = pdb
        .pointer("/status/disruptedPods")
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    if disrupted > MAX_DISRUPTED_PODS {
        return Err(forbidden(
            name,
            "DisruptedPods map too big - too many evictions not confirmed by PDB controller",
        ));
    }
    if allowed == 0 {
        return Err(too_many_requests(format!(
            "The disruption budget {name} needs {} healthy pods and has {} currently",
            status("desiredHealthy"),
            status("currentHealthy")
        )));
    }
    let mut next = pdb.clone();
    next["status"]["disruptionsAllowed"] = json!(allowed - 1);
    if allowed == 1 {
        // Upstream `UpdateDisruptionAllowedCondition`.
        let now = objects::now_rfc3339();
        let mut conditions: Vec<Value> = next["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let was = conditions
            .iter()
            .find(|c| c["type"] == "DisruptionAllowed")
            .cloned();
        conditions.retain(|c| c["type"] != "DisruptionAllowed");
        let transition = match &was {
            Some(c) if c["status"] == "False" => c["lastTransitionTime"].clone(),
            _ => json!(now),
        };
        conditions.push(json!({"type": "DisruptionAllowed", "status": "False", "reason": "InsufficientPods",
            "message": "", "observedGeneration": status("observedGeneration"), "lastTransitionTime": transition}));
        next["status"]["conditions"] = json!(conditions);
    }
    if !next["status"]["disruptedPods"].is_object() {
        next["status"]["disruptedPods"] = json!({});
    }
    next["status"]["disruptedPods"][pod_name] = json!(objects::now_rfc3339());
    Ok(next)
}

pub async fn evict(ctx: &Ctx<'_>, body: Bytes) -> Result<Response<Body>, ApiError> {
    let eviction = decode::parse_body(ctx.headers, &body)?;
    if let Some(n) = eviction.pointer("/metadata/name").and_then(Value::as_str) {
        if !n.is_empty() && n != ctx.name() {
            return Err(ApiError::bad_request(
                "name in URL does not match name in Eviction object",
            ));
        }
    }
    let dry_run = ctx.dry_run()
        || eviction
            .pointer("/deleteOptions/dryRun")
            .and_then(Value::as_array)
            .is_some_and(|d| d.iter().any(|v| v == "All"));
    let mut options = DeleteOptions {
        grace_period: eviction
            .pointer("/deleteOptions/gracePeriodSeconds")
            .and_then(Value::as_i64),
        propagation: None,
        orphan: None,
        precondition_uid: eviction
            .pointer("/deleteOptions/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        precondition_rv: eviction
            .pointer("/deleteOptions/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
    };
    let (ns, name) = (ctx.namespace(), ctx.name());
    let mut decided = false;
    for _ in 0..MAX_RETRIES {
        let (pod, _) = ctx.current(ns, name).await?;
        if can_ignore_budget(&pod) {
            decided = true;
            break;
        }
        let mut pdbs = budgets(ctx, &pod).await?;
        if pdbs.len() > 1 {
            return Err(ApiError::internal(
                "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
            ));
        }
        let Some((pdb, rv)) = pdbs.pop() else {
            decided = true;
            break;
        };
        if !is_ready(&pod) {
            let policy = pdb
                .pointer("/spec/unhealthyPodEvictionPolicy")
                .and_then(Value::as_str);
            let status = |f: &str| {
                pdb.pointer(&format!("/status/{f}"))
                    .and_then(Value::as_i64)
                    .unwrap_or(0)
            };
            if policy == Some("AlwaysAllow")
                || (status("currentHealthy") >= status("desiredHealthy")
                    && status("desiredHealthy") > 0)
            {
                decided = true;
                break;
            }
        }
        let next = check_and_decrement(&pdb, name)?;
        if dry_run {
            decided = true;
            break;
        }
        let key = format!(
            "/poddisruptionbudgets/{ns}/{}",
            objects::meta_str(&pdb, "name").unwrap_or("")
        );
        match ctx
            .api
            .store
            .update(&key, objects::encode_for_storage(&next), Some(rv))
            .await
        {
            Ok(_) => {
                decided = true;
                break;
            }
            Err(storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(storage_error(e)),
        }
    }
    if !decided {
        let mut e =
            ApiError::service_unavailable("couldn't update PodDisruptionBudget due to conflicts");
        e.code = 504;
        e.reason = "Timeout";
        return Err(e);
    }
    if !dry_run {
        mark_disruption_target(ctx, &mut options).await?;
        delete_one(ctx, ns, name, &options).await?;
    }
    Ok(response::json_response(
        StatusCode::CREATED,
        &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    ))
}

/// Upstream `addConditionAndDeletePod`: the pod gets `DisruptionTarget` (EvictionByEvictionAPI)
/// before it is deleted, under the eviction's preconditions (a resourceVersion precondition moves on
/// to the version this write makes).
async fn mark_disruption_target(
    ctx: &Ctx<'_>,
    options: &mut DeleteOptions,
) -> Result<(), ApiError> {
    let (ns, name) = (ctx.namespace(), ctx.name());
    for _ in 0..MAX_RETRIES {
        let (mut pod, rv) = ctx.current(ns, name).await?;
        if let Some(uid) = &options.precondition_uid {
            let actual = objects::meta_str(&pod, "uid").unwrap_or("");
            if uid != actual {
                return Err(ApiError::conflict(&ctx.qualified(), name, &format!(
                    "the UID in the precondition ({uid}) does not match the UID in record ({actual}). The object might have been deleted and then recreated")));
            }
        }
        if let Some(want) = &options.precondition_rv {
            if *want != rv.to_string() {
                return Err(ApiError::conflict(&ctx.qualified(), name, &format!(
                    "the ResourceVersion in the precondition ({want}) does not match the ResourceVersion in record ({rv}). The object might have been modified")));
            }
        }
        add_condition(
            &mut pod,
            json!({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                   "message": "Eviction API: evicting", "lastProbeTime": null,
                   "lastTransitionTime": objects::now_rfc3339()}),
        );
        let key = ctx.key(ns, name);
        match ctx
            .api
            .store
            .update(&key, objects::encode_for_storage(&pod), Some(rv))
            .await
        {
            Ok(written) => {
                if options.precondition_rv.is_some() {
                    options.precondition_rv = Some(written.mod_revision.to_string());
                }
                return Ok(());
            }
            Err(storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(storage_error(e)),
        }
    }
    Err(ApiError::conflict(
        &ctx.qualified(),
        name,
        "too many concurrent updates; try again",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pdb(allowed: i64, generation: i64, observed: i64) -> Value {
        json!({"metadata": {"name": "budget", "generation": generation},
            "status": {"disruptionsAllowed": allowed, "observedGeneration": observed,
                "desiredHealthy": 2, "currentHealthy": 2}})
    }

    #[test]
    fn an_allowed_eviction_takes_one_from_the_budget_and_records_the_pod() {
        let next = check_and_decrement(&pdb(2, 1, 1), "p1").unwrap();
        assert_eq!(next["status"]["disruptionsAllowed"], 1);
        assert!(next["status"]["disruptedPods"]["p1"].is_string());
        assert!(next["status"].get("conditions").is_none());
        // The last allowed disruption also says none is left.
        let last = check_and_decrement(&pdb(1, 1, 1), "p1").unwrap();
        assert_eq!(last["status"]["conditions"][0]["type"], "DisruptionAllowed");
        assert_eq!(last["status"]["conditions"][0]["status"], "False");
        assert_eq!(
            last["status"]["conditions"][0]["reason"],
            "InsufficientPods"
        );
    }

    #[test]
    fn a_refused_eviction_says_why_as_upstream() {
        let e = check_and_decrement(&pdb(0, 1, 1), "p1").unwrap_err();
        assert_eq!((e.code, e.reason), (429, "TooManyRequests"));
        let cause = &e.details.as_ref().unwrap().causes[0];
        assert_eq!(cause.reason, "DisruptionBudget");
        assert_eq!(
            cause.message,
            "The disruption budget budget needs 2 healthy pods and has 2 currently"
        );
        let e = check_and_decrement(&pdb(1, 2, 1), "p1").unwrap_err();
        assert!(e.details.unwrap().causes[0]
            .message
            .contains("still being processed"));
        let e = check_and_decrement(&pdb(-1, 1, 1), "p1").unwrap_err();
        assert_eq!(e.code, 403);
    }

    #[test]
    fn pods_that_disrupt_nothing_ignore_the_budget() {
        assert!(can_ignore_budget(&json!({"status": {"phase": "Pending"}})));
        assert!(can_ignore_budget(
            &json!({"status": {"phase": "Succeeded"}})
        ));
        assert!(can_ignore_budget(
            &json!({"metadata": {"deletionTimestamp": "x"}, "status": {"phase": "Running"}})
        ));
        assert!(!can_ignore_budget(&json!({"status": {"phase": "Running"}})));
        assert!(is_ready(
            &json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
        ));
    }
}
