//! Conversion between versions of a resource that share one storage (upstream: the generated
//! conversions through the internal version). Objects are stored in one version; a resource served in
//! another converts on the way in and out.
//!
//! - `events.k8s.io/v1` Event <-> core `v1` Event (stored): `regarding` is `involvedObject`, `note` is
//!   `message`, `reportingController` is `source`-less core's `reportingComponent`, and the
//!   `deprecated*` fields are the core event's `source`, `firstTimestamp`, `lastTimestamp` and `count`.
//! - `autoscaling/v1` HorizontalPodAutoscaler <-> `autoscaling/v2` (stored): [`hpa`].

pub mod hpa;

use serde_json::{Map, Value};

/// (events.k8s.io/v1 field, core/v1 field), the renamed ones; the rest (`metadata`, `eventTime`,
/// `series`, `action`, `reason`, `related`, `reportingInstance`, `type`) keep their names.
const EVENT_FIELDS: &[(&str, &str)] = &[
    ("regarding", "involvedObject"),
    ("note", "message"),
    ("reportingController", "reportingComponent"),
    ("deprecatedSource", "source"),
    ("deprecatedFirstTimestamp", "firstTimestamp"),
    ("deprecatedLastTimestamp", "lastTimestamp"),
    ("deprecatedCount", "count"),
];

/// The stored (apiVersion) of a served resource that converts, if it does.
pub fn stored_version(group: &str, version: &str, kind: &str) -> Option<&'static str> {
    match (group, version, kind) {
        ("events.k8s.io", "v1", "Event") => Some("v1"),
        ("autoscaling", "v1", "HorizontalPodAutoscaler") => Some("autoscaling/v2"),
        _ => None,
    }
}

/// Converts a stored object into the served `api_version` (no change when it already is).
pub fn to_served(obj: &mut Value, api_version: &str) {
    if convert_hpa(obj, api_version) {
        return;
    }
    let from = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if from == api_version {
        return;
    }
    if let (Some("Event"), "v1", "events.k8s.io/v1") =
        (obj.get("kind").and_then(Value::as_str), from, api_version)
    {
        rename(
            obj,
            EVENT_FIELDS
                .iter()
                .map(|(served, stored)| (*stored, *served)),
        );
        obj["apiVersion"] = Value::String(api_version.into());
    }
}

/// Converts a served object into its stored version.
pub fn to_stored(obj: &mut Value, stored_api_version: &str) {
    if convert_hpa(obj, stored_api_version) {
        return;
    }
    let from = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if from == stored_api_version {
        return;
    }
    if let (Some("Event"), "events.k8s.io/v1", "v1") = (
        obj.get("kind").and_then(Value::as_str),
        from,
        stored_api_version,
    ) {
        rename(obj, EVENT_FIELDS.iter().copied());
        obj["apiVersion"] = Value::String(stored_api_version.into());
    }
}

/// HorizontalPodAutoscalers convert both ways between v1 and v2; true when `obj` was one.
fn convert_hpa(obj: &mut Value, to: &str) -> bool {
    if obj.get("kind").and_then(Value::as_str) != Some("HorizontalPodAutoscaler") {
        return false;
    }
    match (obj.get("apiVersion").and_then(Value::as_str), to) {
        (Some("autoscaling/v2"), "autoscaling/v1") => hpa::v2_to_v1(obj),
        (Some("autoscaling/v1"), "autoscaling/v2") => hpa::v1_to_v2(obj),
        _ => return false,
    }
    true
}

/// Renames top-level fields, keeping `apiVersion`, `kind`, `metadata` first.
fn rename<'a>(obj: &mut Value, pairs: impl Iterator<Item = (&'a str, &'a str)> + Clone) {
    let Value::Object(map) = obj else { return };
    let old = std::mem::take(map);
    let mut out = Map::new();
    for (k, v) in old {
        let name = pairs
            .clone()
            .find(|(from, _)| *from == k)
            .map_or(k.clone(), |(_, to)| to.to_string());
        out.insert(name, v);
    }
    *map = out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_convert_both_ways() {
        let core = json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "p"},
            "reason": "Scheduled", "message": "assigned", "type": "Normal",
            "source": {"component": "default-scheduler"},
            "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:01Z",
            "count": 2, "reportingComponent": "default-scheduler", "reportingInstance": "s-1"
        });
        let mut served = core.clone();
        to_served(&mut served, "events.k8s.io/v1");
        assert_eq!(served["apiVersion"], "events.k8s.io/v1");
        assert_eq!(served["regarding"]["name"], "p");
        assert_eq!(served["note"], "assigned");
        assert_eq!(served["deprecatedCount"], 2);
        assert_eq!(served["deprecatedSource"]["component"], "default-scheduler");
        assert_eq!(served["reportingController"], "default-scheduler");
        assert!(served.get("message").is_none() && served.get("involvedObject").is_none());
        let mut back = served.clone();
        to_stored(&mut back, "v1");
        assert_eq!(back, core);
        assert_eq!(stored_version("events.k8s.io", "v1", "Event"), Some("v1"));
        assert_eq!(stored_version("", "v1", "Event"), None);
    }
}
