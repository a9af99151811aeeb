//! Server-side printing (upstream `registry/rest.TableConvertor`): the `meta.k8s.io/v1` `Table` envelope
//! around the columns and cells of `apimachinery::printers` (a CRD version's `additionalPrinterColumns`
//! for custom resources), and `PartialObjectMetadata`.

use std::time::SystemTime;

use apimachinery::printers::custom::{self, CustomColumn};
use apimachinery::resources::Resource;
use serde_json::{json, Map, Value};

use crate::response::IncludeObject;

/// `PartialObjectMetadata` of an object.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| Value::Object(Map::new())),
    })
}

/// A Table of `objects`. `continue_token` goes into the list metadata for paged lists.
pub fn table(
    resource: &Resource,
    custom_columns: Option<&[CustomColumn]>,
    objects: &[Value],
    include: IncludeObject,
    resource_version: &str,
    continue_token: Option<&str>,
) -> Value {
    let now = SystemTime::now();
    let columns: Vec<Value> = match custom_columns {
        Some(cols) => custom::column_definitions(cols),
        None if resource.custom => apimachinery::printers::custom_resource_columns()
            .iter()
            .map(|c| c.to_json())
            .collect(),
        None => apimachinery::printers::columns(&resource.group, &resource.plural)
            .iter()
            .map(|c| c.to_json())
            .collect(),
    };
    let rows: Vec<Value> = objects
        .iter()
        .map(|obj| {
            let cells = if let Some(cols) = custom_columns {
                custom::cells(cols, obj, now)
            } else if resource.custom {
                apimachinery::printers::custom_resource_cells(obj, now)
            } else {
                apimachinery::printers::cells(&resource.group, &resource.plural, obj, now)
            };
            let mut row = json!({"cells": cells});
            if let Some(conditions) =
                apimachinery::printers::row_conditions(&resource.group, &resource.plural, obj)
            {
                row["conditions"] = conditions;
            }
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => row["object"] = partial_metadata(obj),
                IncludeObject::Object => row["object"] = obj.clone(),
            }
            row
        })
        .collect();
    let mut metadata = json!({"resourceVersion": resource_version});
    if let Some(token) = continue_token {
        metadata["continue"] = token.into();
    }
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": metadata,
        "columnDefinitions": columns,
        "rows": rows,
    })
}
