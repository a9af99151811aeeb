//! Upstream's Priority admission plugin (`plugin/pkg/admission/priority`) for pod creates: the pod's
//! `priorityClassName` (or the `globalDefault` class, or none: priority 0) decides `spec.priority`
//! and `spec.preemptionPolicy`; a missing class, or a priority or policy given in the pod that
//! differs from the class's, is Forbidden. The two system classes exist without objects.

use serde_json::{json, Value};

use super::Ctx;
use crate::filter::Filter;
use apimachinery::status::ApiError;

/// Upstream's built-in classes (`scheduling.SystemPriorityClasses`).
const SYSTEM_CLASSES: &[(&str, i64)] = &[
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

/// The class's value and preemption policy (from the watch cache, else the store).
async fn class_of(ctx: &Ctx<'_>, name: &str) -> Option<(i64, String)> {
    if let Some((_, v)) = SYSTEM_CLASSES.iter().find(|(n, _)| *n == name) {
        return Some((*v, "PreemptLowerPriority".into()));
    }
    let key = format!("/priorityclasses/{name}");
    let json = match ctx.api.caches.get("priorityclasses") {
        Some(cache) => cache.get(&key)?.json.clone(),
        None => ctx.api.store.get(&key).await.ok()??.value,
    };
    let pc: Value = serde_json::from_slice(&json).ok()?;
    Some(values(&pc))
}

fn values(pc: &Value) -> (i64, String) {
    (
        pc["value"].as_i64().unwrap_or(0),
        pc["preemptionPolicy"]
            .as_str()
            .unwrap_or("PreemptLowerPriority")
            .to_string(),
    )
}

/// The globalDefault class (the lowest value if several), as upstream's `getDefaultPriorityClass`.
fn default_class(ctx: &Ctx<'_>) -> Option<(String, i64, String)> {
    let cache = ctx.api.caches.get("priorityclasses")?;
    // This runs for every pod created without a class: read only the flag, and build the rest of
    // the (rare) default class alone.
    cache
        .list("/priorityclasses/", &Filter::default())
        .into_iter()
        .filter(|c| {
            serde_json::from_slice::<GlobalDefault>(&c.json).is_ok_and(|pc| pc.global_default)
        })
        .filter_map(|c| serde_json::from_slice::<Value>(&c.json).ok())
        .map(|pc| {
            let (v, p) = values(&pc);
            (
                pc["metadata"]["name"].as_str().unwrap_or("").to_string(),
                v,
                p,
            )
        })
        .min_by_key(|(_, v, _)| *v)
}

/// A PriorityClass's `globalDefault`, every other field skipped unbuilt.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct GlobalDefault {
    #[serde(default)]
    global_default: bool,
}

/// Upstream `admission.NewForbidden`: `pods "<name>" is forbidden: <reason>`.
fn forbidden(pod: &Value, reason: String) -> ApiError {
    ApiError::forbidden(format!(
        "pods \"{}\" is forbidden: {reason}",
        pod["metadata"]["name"].as_str().unwrap_or("")
    ))
}

/// Resolves a new pod's priority.
pub(super) async fn admit_pod(ctx: &Ctx<'_>, pod: &mut Value) -> Result<(), ApiError> {
    let spec = &pod["spec"];
    let class = spec["priorityClassName"].as_str().unwrap_or("").to_string();
    let (name, priority, policy) = if class.is_empty() {
        default_class(ctx).unwrap_or((String::new(), 0, "PreemptLowerPriority".into()))
    } else {
        let Some((v, p)) = class_of(ctx, &class).await else {
            return Err(forbidden(
                pod,
                format!("no PriorityClass with name {class} was found"),
            ));
        };
        (class.clone(), v, p)
    };
    if let Some(given) = spec["priority"].as_i64() {
        if given != priority {
            return Err(forbidden(pod, format!(
                "the integer value of priority ({given}) must not be provided in pod spec; priority admission controller computed {priority} from the given PriorityClass name"
            )));
        }
    }
    if let Some(given) = spec["preemptionPolicy"].as_str() {
        if given != policy {
            return Err(forbidden(pod, format!(
                "the string value of PreemptionPolicy ({given}) must not be provided in pod spec; priority admission controller computed {policy} from the given PriorityClass name"
            )));
        }
    }
    if let Some(s) = pod["spec"].as_object_mut() {
        if !name.is_empty() {
            s.insert("priorityClassName".into(), json!(name));
        }
        s.insert("priority".into(), json!(priority));
        s.insert("preemptionPolicy".into(), json!(policy));
    }
    Ok(())
}
