//! The event printer of upstream `pkg/printers/internalversion` (`printEvent`), for both `v1` events and
//! `events.k8s.io/v1` events. Upstream serves both from one internal type, so the same columns apply;
//! here the `events.k8s.io` field names (`regarding`, `note`, `deprecatedCount`, ...) are read in place
//! of their core counterparts.

use serde_json::{json, Value};

use super::time::{self, Instant};
use super::util::{get, int_at, name, str_at};
use super::{col, printer, wide, ColumnDefinition, Printers, NAME_DESCRIPTION};

pub(super) const PRINTERS: Printers = &[
    ("", "events", printer(COLUMNS, core_cells)),
    ("events.k8s.io", "events", printer(COLUMNS, events_cells)),
];

const COLUMNS: &[ColumnDefinition] = &[
    col("Last Seen", "string", "The time at which the most recent occurrence of this event was recorded."),
    col("Type", "string", "Type of this event (Normal, Warning), new types could be added in the future"),
    col("Reason", "string", "This should be a short, machine understandable string that gives the reason for the transition into the object's current status."),
    col("Object", "string", "The object that this event is about."),
    wide("Subobject", "string", "If referring to a piece of an object instead of an entire object, this string should contain a valid JSON/Go field access statement, such as desiredState.manifest.containers[2]."),
    wide("Source", "string", "The component reporting this event. Should be a short machine understandable string."),
    col("Message", "string", "A human-readable description of the status of this operation."),
    wide("First Seen", "string", "The time at which the event was first recorded. (Time of server receipt is in TypeMeta.)"),
    wide("Count", "string", "The number of times this event has occurred."),
    ColumnDefinition { name: "Name", type_: "string", format: "name", description: NAME_DESCRIPTION, priority: 1 },
];

/// Where the fields of `printEvent` live in each API version.
struct Fields {
    first_timestamp: &'static str,
    last_timestamp: &'static str,
    count: &'static str,
    involved_object: &'static str,
    message: &'static str,
    source: &'static str,
    reporting_controller: &'static str,
}

const CORE: Fields = Fields {
    first_timestamp: "firstTimestamp",
    last_timestamp: "lastTimestamp",
    count: "count",
    involved_object: "involvedObject",
    message: "message",
    source: "source",
    reporting_controller: "reportingComponent",
};

const EVENTS_V1: Fields = Fields {
    first_timestamp: "deprecatedFirstTimestamp",
    last_timestamp: "deprecatedLastTimestamp",
    count: "deprecatedCount",
    involved_object: "regarding",
    message: "note",
    source: "deprecatedSource",
    reporting_controller: "reportingController",
};

fn core_cells(ev: &Value, now: Instant) -> Vec<Value> {
    cells(ev, now, &CORE)
}

fn events_cells(ev: &Value, now: Instant) -> Vec<Value> {
    cells(ev, now, &EVENTS_V1)
}

/// `formatEventSource`: component (or reporting controller), then `, host` (or reporting instance).
fn source(ev: &Value, f: &Fields) -> String {
    let component = match str_at(ev, &[f.source, "component"]) {
        "" => str_at(ev, &[f.reporting_controller]),
        c => c,
    };
    let instance = match str_at(ev, &[f.source, "host"]) {
        "" => str_at(ev, &["reportingInstance"]),
        h => h,
    };
    if instance.is_empty() {
        component.to_string()
    } else {
        format!("{component}, {instance}")
    }
}

fn cells(ev: &Value, now: Instant, f: &Fields) -> Vec<Value> {
    let first = match time::time_of(ev.get(f.first_timestamp)) {
        Some(t) => time::since(Some(t), now),
        None => time::since(time::time_of(ev.get("eventTime")), now),
    };
    let mut last = match time::time_of(ev.get(f.last_timestamp)) {
        Some(t) => time::since(Some(t), now),
        None => first.clone(),
    };
    let mut count = int_at(ev, &[f.count]);
    if let Some(series) = get(ev, &["series"]).filter(|s| s.is_object()) {
        last = time::since(time::time_of(series.get("lastObservedTime")), now);
        count = int_at(series, &["count"]);
    } else if count == 0 {
        // Singleton events have no count in the new API.
        count = 1;
    }
    let kind = str_at(ev, &[f.involved_object, "kind"]).to_lowercase();
    let object_name = str_at(ev, &[f.involved_object, "name"]);
    let target = if object_name.is_empty() {
        kind
    } else {
        format!("{kind}/{object_name}")
    };
    vec![
        json!(last),
        json!(str_at(ev, &["type"])),
        json!(str_at(ev, &["reason"])),
        json!(target),
        json!(str_at(ev, &[f.involved_object, "fieldPath"])),
        json!(source(ev, f)),
        json!(str_at(ev, &[f.message]).trim()),
        json!(first),
        json!(count),
        json!(name(ev)),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{header, row};

    #[test]
    fn columns_in_upstream_order() {
        let want = vec![
            ("Last Seen", 0),
            ("Type", 0),
            ("Reason", 0),
            ("Object", 0),
            ("Subobject", 1),
            ("Source", 1),
            ("Message", 0),
            ("First Seen", 1),
            ("Count", 1),
            ("Name", 1),
        ];
        assert_eq!(header("", "events"), want);
        assert_eq!(header("events.k8s.io", "events"), want);
    }

    #[test]
    fn core_event() {
        let ev = json!({
            "metadata": {"name": "web-0.17a", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "involvedObject": {"kind": "Pod", "name": "web-0", "fieldPath": "spec.containers{app}"},
            "reason": "Pulled", "type": "Normal", "message": "  Container image pulled\n",
            "source": {"component": "kubelet", "host": "node-1"},
            "firstTimestamp": "2024-01-01T00:00:00Z", "lastTimestamp": "2024-01-01T00:08:00Z", "count": 4
        });
        assert_eq!(
            row("", "events", &ev),
            vec![
                json!("2m"),
                json!("Normal"),
                json!("Pulled"),
                json!("pod/web-0"),
                json!("spec.containers{app}"),
                json!("kubelet, node-1"),
                json!("Container image pulled"),
                json!("10m"),
                json!(4),
                json!("web-0.17a"),
            ]
        );
    }

    #[test]
    fn new_style_core_event_uses_event_time_and_series() {
        let ev = json!({
            "metadata": {"name": "e"},
            "involvedObject": {"kind": "Node"},
            "eventTime": "2024-01-01T00:00:00.000000Z",
            "reportingComponent": "scheduler", "reportingInstance": "sched-1",
            "series": {"count": 7, "lastObservedTime": "2024-01-01T00:09:30.000000Z"}
        });
        let r = row("", "events", &ev);
        assert_eq!(r[0], json!("30s"));
        assert_eq!(r[3], json!("node"));
        assert_eq!(r[5], json!("scheduler, sched-1"));
        assert_eq!(r[7], json!("10m"));
        assert_eq!(r[8], json!(7));
        let singleton = json!({"metadata": {"name": "e"}});
        let r = row("", "events", &singleton);
        assert_eq!(
            (r[0].clone(), r[7].clone(), r[8].clone()),
            (json!("<unknown>"), json!("<unknown>"), json!(1))
        );
    }

    #[test]
    fn events_k8s_io_event() {
        let ev = json!({
            "metadata": {"name": "web.1"},
            "regarding": {"kind": "Deployment", "name": "web"},
            "note": "Scaled up replica set web-abc to 3",
            "reason": "ScalingReplicaSet", "type": "Normal",
            "reportingController": "deployment-controller",
            "deprecatedFirstTimestamp": "2024-01-01T00:00:00Z",
            "deprecatedLastTimestamp": "2024-01-01T00:05:00Z",
            "deprecatedCount": 2
        });
        assert_eq!(
            row("events.k8s.io", "events", &ev),
            vec![
                json!("5m"),
                json!("Normal"),
                json!("ScalingReplicaSet"),
                json!("deployment/web"),
                json!(""),
                json!("deployment-controller"),
                json!("Scaled up replica set web-abc to 3"),
                json!("10m"),
                json!(2),
                json!("web.1"),
            ]
        );
    }
}
