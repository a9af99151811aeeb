//! Printers of dynamic resource allocation (`resource.k8s.io`), mirroring upstream
//! `pkg/printers/internalversion`: deviceclasses, resourceclaims, resourceclaimtemplates,
//! resourceslices.

use serde_json::{json, Value};

use super::time::Instant;
use super::util::{arr_at, deleting, get, name, str_at};
use super::{age_cell, col, printer, ColumnDefinition, Printers, AGE, NAME};

const RESOURCE: &str = "resource.k8s.io";

pub(super) const PRINTERS: Printers = &[
    (RESOURCE, "deviceclasses", printer(NAME_AGE, name_age_cells)),
    (
        RESOURCE,
        "resourceclaims",
        printer(CLAIM_COLUMNS, claim_cells),
    ),
    (
        RESOURCE,
        "resourceclaimtemplates",
        printer(NAME_AGE, name_age_cells),
    ),
    (
        RESOURCE,
        "resourceslices",
        printer(SLICE_COLUMNS, slice_cells),
    ),
];

/// DeviceClass and ResourceClaimTemplate: the name and the age only.
const NAME_AGE: &[ColumnDefinition] = &[NAME, AGE];

fn name_age_cells(obj: &Value, now: Instant) -> Vec<Value> {
    vec![json!(name(obj)), age_cell(obj, now)]
}

const CLAIM_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "State",
        "string",
        "A summary of the current state (allocated, pending, reserved, etc.).",
    ),
    AGE,
];

/// `resourceClaimState`: `deleted` while being deleted; then `pending` (unallocated, not being
/// deleted) or `allocated`, plus `reserved` when allocated and reserved for a consumer; joined by `,`.
fn claim_state(claim: &Value) -> String {
    let mut states: Vec<&str> = Vec::new();
    let deleted = deleting(claim);
    if deleted {
        states.push("deleted");
    }
    if get(claim, &["status", "allocation"]).is_some_and(Value::is_object) {
        states.push("allocated");
        if !arr_at(claim, &["status", "reservedFor"]).is_empty() {
            states.push("reserved");
        }
    } else if !deleted {
        states.push("pending");
    }
    states.join(",")
}

fn claim_cells(claim: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(claim)),
        json!(claim_state(claim)),
        age_cell(claim, now),
    ]
}

/// Descriptions are the first sentences of the `ResourceSliceSpec` and `ResourcePool` field docs.
const SLICE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Node",
        "string",
        "NodeName identifies the node which provides the resources in this pool.",
    ),
    col(
        "Driver",
        "string",
        "Driver identifies the DRA driver providing the capacity information.",
    ),
    col("Pool", "string", "Name is used to identify the pool."),
    AGE,
];

/// The node is empty for slices of network-attached devices (`nodeSelector` or `allNodes`).
fn slice_cells(slice: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(slice)),
        json!(str_at(slice, &["spec", "nodeName"])),
        json!(str_at(slice, &["spec", "driver"])),
        json!(str_at(slice, &["spec", "pool", "name"])),
        age_cell(slice, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{header, meta, namespaced_meta, row, strs, CREATED};

    const G: &str = "resource.k8s.io";

    #[test]
    fn headers() {
        for resource in ["deviceclasses", "resourceclaimtemplates"] {
            assert_eq!(header(G, resource), vec![("Name", 0), ("Age", 0)]);
        }
        assert_eq!(
            header(G, "resourceclaims"),
            vec![("Name", 0), ("State", 0), ("Age", 0)]
        );
        assert_eq!(
            header(G, "resourceslices"),
            vec![
                ("Name", 0),
                ("Node", 0),
                ("Driver", 0),
                ("Pool", 0),
                ("Age", 0)
            ]
        );
        let types: Vec<_> = super::super::columns(G, "resourceslices")
            .iter()
            .map(|c| (c.type_, c.format))
            .collect();
        assert_eq!(
            types,
            vec![
                ("string", "name"),
                ("string", ""),
                ("string", ""),
                ("string", ""),
                ("string", "")
            ]
        );
    }

    #[test]
    fn deviceclasses_and_templates() {
        let dc = json!({"metadata": meta("gpu.example.com"), "spec": {"selectors": [
            {"cel": {"expression": "device.driver == \"gpu.example.com\""}}]}});
        assert_eq!(
            strs(&row(G, "deviceclasses", &dc)),
            ["gpu.example.com", "10m"]
        );
        let tmpl = json!({"metadata": namespaced_meta("single-gpu"), "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}}});
        assert_eq!(
            strs(&row(G, "resourceclaimtemplates", &tmpl)),
            ["single-gpu", "10m"]
        );
    }

    #[test]
    fn resourceclaim_states() {
        let allocation = json!({"devices": {"results": [
            {"request": "gpu", "driver": "gpu.example.com", "pool": "worker-1", "device": "gpu-0"}]}});
        let reserved = json!([{"resource": "pods", "name": "trainer", "uid": "6a1e"}]);
        let deleting = json!({"name": "c", "namespace": "default", "creationTimestamp": CREATED,
            "deletionTimestamp": "2024-01-01T00:09:00Z", "finalizers": ["resource.kubernetes.io/delete-protection"]});
        let cases = [
            (json!({"metadata": namespaced_meta("c")}), "pending"),
            (
                json!({"metadata": namespaced_meta("c"), "status": {}}),
                "pending",
            ),
            (
                json!({"metadata": namespaced_meta("c"), "status": {"allocation": allocation}}),
                "allocated",
            ),
            (
                json!({"metadata": namespaced_meta("c"), "status": {"allocation": allocation, "reservedFor": []}}),
                "allocated",
            ),
            (
                json!({"metadata": namespaced_meta("c"), "status": {"allocation": allocation, "reservedFor": reserved}}),
                "allocated,reserved",
            ),
            // Reserved without an allocation cannot happen; upstream only looks at reservedFor once allocated.
            (
                json!({"metadata": namespaced_meta("c"), "status": {"reservedFor": reserved}}),
                "pending",
            ),
            (json!({"metadata": deleting}), "deleted"),
            (
                json!({"metadata": deleting, "status": {"allocation": allocation, "reservedFor": reserved}}),
                "deleted,allocated,reserved",
            ),
            (json!({}), "pending"),
        ];
        for (claim, want) in cases {
            assert_eq!(row(G, "resourceclaims", &claim)[1], json!(want), "{claim}");
        }
        let claim =
            json!({"metadata": namespaced_meta("gpu-claim"), "status": {"allocation": allocation}});
        assert_eq!(
            strs(&row(G, "resourceclaims", &claim)),
            ["gpu-claim", "allocated", "10m"]
        );
    }

    #[test]
    fn resourceslices() {
        let node_local = json!({"metadata": meta("worker-1-gpu.example.com-x7k2p"), "spec": {
            "driver": "gpu.example.com", "nodeName": "worker-1",
            "pool": {"name": "worker-1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}]}});
        assert_eq!(
            strs(&row(G, "resourceslices", &node_local)),
            [
                "worker-1-gpu.example.com-x7k2p",
                "worker-1",
                "gpu.example.com",
                "worker-1",
                "10m"
            ]
        );
        let network = json!({"metadata": meta("fabric-abc"), "spec": {"driver": "nic.example.com", "allNodes": true,
            "pool": {"name": "fabric", "generation": 3, "resourceSliceCount": 2}}});
        assert_eq!(
            strs(&row(G, "resourceslices", &network)),
            ["fabric-abc", "", "nic.example.com", "fabric", "10m"]
        );
        assert_eq!(
            strs(&row(G, "resourceslices", &json!({}))),
            ["", "", "", "", "<unknown>"]
        );
    }
}
