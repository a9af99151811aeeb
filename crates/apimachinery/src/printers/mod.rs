//! Server-side printing: the columns and cells of the `meta.k8s.io/v1` `Table` that `kubectl get` shows,
//! mirroring upstream `pkg/printers/internalversion` (`AddHandlers`: one column list and one print
//! function per resource), kube-aggregator's APIService table, and the apiserver's
//! `rest.DefaultTableConvertor` (`Name`, `Created At`) for resources without a printer (roles,
//! clusterroles, limitranges, customresourcedefinitions, ...).
//!
//! Differences from upstream, on purpose:
//! - Pure functions over served JSON (`serde_json::Value`), not typed internal objects; a missing field
//!   reads as Go's zero value, so any object prints without panicking.
//! - Upstream's table storage always generates with `Wide: true`, so [`cells`] returns one cell per
//!   column of [`columns`], priority-1 (`-o wide`) ones included; kubectl hides those it does not want.
//! - Quantities print as served (the server serializes them canonically); they are not re-canonicalized.
//! - Column descriptions that upstream takes from a field's Swagger doc are that doc's first sentence.
//!
//! The API server wraps these into the Table envelope: `columnDefinitions` from
//! [`ColumnDefinition::to_json`], and per object a row `{"cells": cells(..), "object": ..}` plus
//! [`row_conditions`].
//!
//! Custom resources are printed by apiextensions' table convertor instead: the CRD's
//! `additionalPrinterColumns` (their `date` cells through [`date_cell`]), or, without any, the
//! [`custom_resource_columns`] `Name`, `Age`.

use std::time::SystemTime;

use serde_json::{json, Value};

mod apiserver;
mod apps;
mod batch;
mod core;
pub mod custom;
mod duration;
mod events;
mod flowcontrol;
mod networking;
mod other;
mod pod;
mod resource;
mod service;
mod storage;
mod time;
mod util;

pub use duration::{human_duration, human_duration_nanos};
pub use time::date_cell;

use time::Instant;

/// One column of a Table (`metav1.TableColumnDefinition`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnDefinition {
    /// Human-readable name, as kubectl shows it upper-cased (`Nominated Node`).
    pub name: &'static str,
    /// OpenAPI type of the cells: `string`, `integer`, `number`, `boolean`, `date`.
    pub type_: &'static str,
    /// OpenAPI format: `name` for the column holding the object's name, otherwise empty.
    pub format: &'static str,
    /// What the column shows.
    pub description: &'static str,
    /// 0: always shown; 1 (or more): shown with `-o wide` only.
    pub priority: i32,
}

impl ColumnDefinition {
    /// The JSON form inside a Table: `{"name","type","format","description","priority"}`.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.type_,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

/// `metav1.ObjectMeta{}.SwaggerDoc()["name"]`.
pub(crate) const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";

/// `metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"]`.
pub(crate) const CREATION_TIMESTAMP_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// A priority-0 column.
pub(crate) const fn col(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> ColumnDefinition {
    ColumnDefinition {
        name,
        type_,
        format: "",
        description,
        priority: 0,
    }
}

/// A priority-1 (`-o wide`) column.
pub(crate) const fn wide(
    name: &'static str,
    type_: &'static str,
    description: &'static str,
) -> ColumnDefinition {
    ColumnDefinition {
        priority: 1,
        ..col(name, type_, description)
    }
}

/// The `Name` column every printer starts with.
pub(crate) const NAME: ColumnDefinition = ColumnDefinition {
    name: "Name",
    type_: "string",
    format: "name",
    description: NAME_DESCRIPTION,
    priority: 0,
};

/// The `Age` column.
pub(crate) const AGE: ColumnDefinition = col("Age", "string", CREATION_TIMESTAMP_DESCRIPTION);

/// The wide `Containers` column of workload printers.
pub(crate) const CONTAINERS: ColumnDefinition = wide(
    "Containers",
    "string",
    "Names of each container in the template.",
);

/// The wide `Images` column of workload printers.
pub(crate) const IMAGES: ColumnDefinition = wide(
    "Images",
    "string",
    "Images referenced by each container in the template.",
);

/// The columns of `rest.DefaultTableConvertor`.
const DEFAULT_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Created At", "date", CREATION_TIMESTAMP_DESCRIPTION),
];

/// A resource's printer: its columns and the function computing one row's cells.
#[derive(Clone, Copy)]
pub(crate) struct Printer {
    pub(crate) columns: &'static [ColumnDefinition],
    pub(crate) cells: fn(&Value, Instant) -> Vec<Value>,
}

/// A [`Printer`] (a function so module tables stay one line per resource).
pub(crate) const fn printer(
    columns: &'static [ColumnDefinition],
    cells: fn(&Value, Instant) -> Vec<Value>,
) -> Printer {
    Printer { columns, cells }
}

/// A module's printers: `(group, resource, printer)`.
pub(crate) type Printers = &'static [(&'static str, &'static str, Printer)];

/// Every printer, by module.
const ALL: &[Printers] = &[
    pod::PRINTERS,
    core::PRINTERS,
    service::PRINTERS,
    events::PRINTERS,
    storage::PRINTERS,
    apps::PRINTERS,
    batch::PRINTERS,
    networking::PRINTERS,
    other::PRINTERS,
    apiserver::PRINTERS,
    flowcontrol::PRINTERS,
    resource::PRINTERS,
];

/// The dedicated printer of a resource, if upstream has one.
fn lookup(group: &str, resource: &str) -> Option<Printer> {
    ALL.iter()
        .flat_map(|printers| printers.iter())
        .find(|(g, r, _)| *g == group && *r == resource)
        .map(|(_, _, p)| *p)
}

/// Whether the resource (`group` empty for core, `resource` the lowercase plural) has a dedicated
/// printer; others get the default `Name`, `Created At` table.
pub fn has_printer(group: &str, resource: &str) -> bool {
    lookup(group, resource).is_some()
}

/// The Table columns for a resource, wide (priority 1) ones included.
pub fn columns(group: &str, resource: &str) -> Vec<ColumnDefinition> {
    lookup(group, resource)
        .map_or(DEFAULT_COLUMNS, |p| p.columns)
        .to_vec()
}

/// The cells of one object's row, one per column of [`columns`], as of `now` (for ages).
pub fn cells(group: &str, resource: &str, obj: &Value, now: SystemTime) -> Vec<Value> {
    let now = time::instant_of(now);
    match lookup(group, resource) {
        Some(p) => (p.cells)(obj, now),
        None => default_cells(obj),
    }
}

/// Orders the objects of one list response as upstream's list printer of the resource prints them:
/// FlowSchemas by `spec.matchingPrecedence`, then name (`printFlowSchemaList`); every other resource
/// keeps the order it was listed in.
pub fn sort_rows(group: &str, resource: &str, objects: &mut [&Value]) {
    if flowcontrol::is_flowschemas(group, resource) {
        objects.sort_by(|a, b| flowcontrol::flowschema_order(a, b));
    }
}

/// The row's `conditions`: upstream marks succeeded and failed pods `Completed`; `None` otherwise.
pub fn row_conditions(group: &str, resource: &str, obj: &Value) -> Option<Value> {
    if group.is_empty() && resource == "pods" {
        pod::row_conditions(obj)
    } else {
        None
    }
}

/// The age of a timestamp field's value (`<unknown>` when missing or zero), as the Age column prints it.
pub fn age(timestamp: Option<&Value>, now: SystemTime) -> String {
    time::since(time::time_of(timestamp), time::instant_of(now))
}

/// `Age` as apiextensions declares it for custom resources: type `date`.
const CUSTOM_RESOURCE_COLUMNS: &[ColumnDefinition] =
    &[NAME, col("Age", "date", CREATION_TIMESTAMP_DESCRIPTION)];

/// The columns apiextensions serves for a custom resource whose CRD version declares no
/// `additionalPrinterColumns`: `Name` and `Age` (type `date`).
pub fn custom_resource_columns() -> Vec<ColumnDefinition> {
    CUSTOM_RESOURCE_COLUMNS.to_vec()
}

/// The cells for [`custom_resource_columns`]: the name and the age of `metadata.creationTimestamp`.
pub fn custom_resource_cells(obj: &Value, now: SystemTime) -> Vec<Value> {
    vec![json!(util::name(obj)), age_cell(obj, time::instant_of(now))]
}

fn default_cells(obj: &Value) -> Vec<Value> {
    let created = time::time_of(util::get(obj, &["metadata", "creationTimestamp"]));
    vec![json!(util::name(obj)), json!(time::format_rfc3339(created))]
}

/// The Age cell of an object.
pub(crate) fn age_cell(obj: &Value, now: Instant) -> Value {
    json!(time::since(
        time::time_of(util::get(obj, &["metadata", "creationTimestamp"])),
        now
    ))
}

#[cfg(test)]
pub(crate) mod testing {
    //! Shared fixtures: a fixed clock and helpers to print through the public API.
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    use serde_json::{json, Value};

    /// 2024-01-01T00:10:00Z.
    pub(crate) fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_704_067_800)
    }

    /// Ten minutes before [`now`].
    pub(crate) const CREATED: &str = "2024-01-01T00:00:00Z";

    /// Column names and priorities.
    pub(crate) fn header(group: &str, resource: &str) -> Vec<(&'static str, i32)> {
        super::columns(group, resource)
            .iter()
            .map(|c| (c.name, c.priority))
            .collect()
    }

    /// `metadata` of a cluster-scoped object named `name`, created at [`CREATED`].
    pub(crate) fn meta(name: &str) -> Value {
        json!({"name": name, "creationTimestamp": CREATED})
    }

    /// `metadata` of an object named `name` in namespace `default`, created at [`CREATED`].
    pub(crate) fn namespaced_meta(name: &str) -> Value {
        json!({"name": name, "namespace": "default", "creationTimestamp": CREATED})
    }

    /// Cells as text: strings as they are, other values as JSON (`3`, `true`).
    pub(crate) fn strs(cells: &[Value]) -> Vec<String> {
        cells
            .iter()
            .map(|c| {
                c.as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| c.to_string())
            })
            .collect()
    }

    /// The row of `obj`, checked to have one cell per column.
    pub(crate) fn row(group: &str, resource: &str, obj: &Value) -> Vec<Value> {
        let cells = super::cells(group, resource, obj, now());
        assert_eq!(
            cells.len(),
            super::columns(group, resource).len(),
            "{group}/{resource} cell count"
        );
        cells
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn column_json_shape() {
        let c = columns("", "pods");
        assert_eq!(
            c[0].to_json(),
            json!({"name": "Name", "type": "string", "format": "name", "description": NAME_DESCRIPTION, "priority": 0})
        );
        assert_eq!(c[5].to_json()["priority"], json!(1));
        assert_eq!(c[5].to_json()["format"], json!(""));
    }

    #[test]
    fn default_table_for_resources_without_printer() {
        for (group, resource) in [
            ("rbac.authorization.k8s.io", "clusterroles"),
            ("rbac.authorization.k8s.io", "roles"),
            ("", "limitranges"),
            ("apiextensions.k8s.io", "customresourcedefinitions"),
            ("apiregistration.k8s.io", "unknownthings"),
        ] {
            assert!(!has_printer(group, resource));
            assert_eq!(
                header(group, resource),
                vec![("Name", 0), ("Created At", 0)]
            );
            assert_eq!(columns(group, resource)[1].type_, "date");
        }
        let obj = json!({"metadata": {"name": "admin", "creationTimestamp": "2024-01-01T00:00:00.5+01:00"}});
        assert_eq!(
            row("rbac.authorization.k8s.io", "clusterroles", &obj),
            vec![json!("admin"), json!("2023-12-31T23:00:00Z")]
        );
        assert_eq!(
            row("rbac.authorization.k8s.io", "clusterroles", &json!({})),
            vec![json!(""), json!("0001-01-01T00:00:00Z")]
        );
    }

    #[test]
    fn every_printer_survives_empty_and_odd_objects() {
        let odd = [
            json!({}),
            json!(null),
            json!([]),
            json!({"metadata": 5, "spec": "x", "status": []}),
            json!({"metadata": {"name": 1, "creationTimestamp": "soon", "deletionTimestamp": null},
                "spec": {"containers": "x", "ports": [1], "selector": 3, "replicas": "2"},
                "status": {"conditions": [null, 1], "containerStatuses": [{"state": 1}]}}),
        ];
        for printers in ALL {
            for (group, resource, p) in printers.iter() {
                assert!(has_printer(group, resource), "{group}/{resource}");
                assert!(p.columns.iter().any(|c| c.format == "name"), "{resource}");
                for obj in &odd {
                    row(group, resource, obj);
                }
            }
        }
    }

    #[test]
    fn printers_are_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for printers in ALL {
            for (group, resource, _) in printers.iter() {
                assert!(seen.insert((*group, *resource)), "{group}/{resource} twice");
            }
        }
    }

    #[test]
    fn printers_name_served_resources() {
        let served: std::collections::BTreeSet<(String, String)> = crate::resources::builtin()
            .into_iter()
            .map(|r| (r.group, r.plural))
            .collect();
        for printers in ALL {
            for (group, resource, _) in printers.iter() {
                assert!(
                    served.contains(&(group.to_string(), resource.to_string())),
                    "{group}/{resource} has a printer but is not served"
                );
            }
        }
        // Kubernetes 1.36 resources that upstream prints with a dedicated printer.
        for (group, resource) in [
            ("resource.k8s.io", "deviceclasses"),
            ("resource.k8s.io", "resourceclaims"),
            ("resource.k8s.io", "resourceclaimtemplates"),
            ("resource.k8s.io", "resourceslices"),
            ("networking.k8s.io", "servicecidrs"),
            ("networking.k8s.io", "ipaddresses"),
            ("admissionregistration.k8s.io", "mutatingadmissionpolicies"),
            (
                "admissionregistration.k8s.io",
                "mutatingadmissionpolicybindings",
            ),
            ("storage.k8s.io", "volumeattributesclasses"),
            ("flowcontrol.apiserver.k8s.io", "flowschemas"),
            (
                "flowcontrol.apiserver.k8s.io",
                "prioritylevelconfigurations",
            ),
            ("apiregistration.k8s.io", "apiservices"),
            ("", "componentstatuses"),
        ] {
            assert!(served.contains(&(group.to_string(), resource.to_string())));
            assert!(has_printer(group, resource), "{group}/{resource}");
        }
    }

    #[test]
    fn custom_resources_default_to_name_and_age() {
        let names: Vec<_> = custom_resource_columns()
            .iter()
            .map(|c| (c.name, c.type_, c.format))
            .collect();
        assert_eq!(names, vec![("Name", "string", "name"), ("Age", "date", "")]);
        let cr = json!({"metadata": {"name": "w1", "creationTimestamp": CREATED}});
        assert_eq!(
            custom_resource_cells(&cr, now()),
            vec![json!("w1"), json!("10m")]
        );
        assert_eq!(
            custom_resource_cells(&json!({}), now()),
            vec![json!(""), json!("<unknown>")]
        );
    }

    #[test]
    fn age_helper() {
        assert_eq!(age(Some(&json!(CREATED)), now()), "10m");
        assert_eq!(age(None, now()), "<unknown>");
    }
}
