//! Server-side printing (upstream `registry/rest.TableConvertor`): the `meta.k8s.io/v1` `Table` envelope
//! around the columns and cells of `apimachinery::printers` (a CRD version's `additionalPrinterColumns`
//! for custom resources), and `PartialObjectMetadata`.

use std::time::SystemTime;

use apimachinery::printers::custom::{self, CustomColumn};
use apimachinery::resources::Resource;
use apimachinery::status::ApiError;
use http::{header, HeaderMap};
use serde_json::{json, Map, Value};

use crate::response::{IncludeObject, Negotiated, Representation};

/// Whether an endpoint can answer with a Table. Upstream asks the endpoint's storage for a
/// `TableConvertor` (`RequestScope.AllowsMediaTypeTransform`); the reviews and these subresources
/// have none, so a Table asked of them is 406 before anything is done.
pub fn supports_table(group: &str, plural: &str, subresource: Option<&str>) -> bool {
    if super::reviews::is_review(group, plural) {
        return false;
    }
    !matches!(
        (group, plural, subresource),
        ("", "pods", Some("binding" | "eviction"))
            | ("", "bindings", _)
            | ("", "serviceaccounts", Some("token"))
            | ("", "namespaces", Some("finalize"))
    )
}

/// Checks what negotiation chose against the endpoint (upstream: a Table of an endpoint without a
/// `TableConvertor` is 406, as no media type fits; `includeObject` is validated as upstream's
/// `ValidateTableOptions`, 400).
pub fn check_negotiated(
    n: &Negotiated,
    group: &str,
    plural: &str,
    subresource: Option<&str>,
    include_object: Option<&str>,
) -> Result<(), ApiError> {
    if !matches!(n.repr, Representation::Table { .. }) {
        return Ok(());
    }
    if !supports_table(group, plural, subresource) {
        let mut accepted = vec![crate::response::JSON, "application/yaml"];
        accepted.push(apimachinery::serializer::protobuf::MEDIA_TYPE);
        accepted.push(apimachinery::serializer::cbor::MEDIA_TYPE);
        return Err(ApiError::not_acceptable(format!(
            "only the following media types are accepted: {}",
            accepted.join(", ")
        )));
    }
    match include_object {
        None | Some("" | "None" | "Metadata" | "Object") => Ok(()),
        Some(other) => Err(ApiError::bad_request(format!(
            "Unable to convert to Table as requested: includeObject: Invalid value: {other:?}: must be 'Metadata', 'Object', 'None', or empty"
        ))),
    }
}

/// The `meta.k8s.io` version (`v1` or `v1beta1`) of the Table or PartialObjectMetadata the client
/// asked for: upstream answers in the version asked for.
pub fn meta_version(headers: &HeaderMap) -> &'static str {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    // Best first, as negotiation orders them.
    let mut ranges: Vec<(f32, usize, &str)> = accept
        .split(',')
        .enumerate()
        .map(|(i, entry)| {
            let q = entry
                .split(';')
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            (q, i, entry)
        })
        .filter(|(q, _, _)| *q > 0.0)
        .collect();
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    for (_, _, entry) in ranges {
        let params: Vec<(&str, &str)> = entry
            .split(';')
            .skip(1)
            .filter_map(|p| p.split_once('='))
            .map(|(k, v)| (k.trim(), v.trim()))
            .collect();
        let param = |key: &str| params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        if param("g") == Some("meta.k8s.io") && param("as").is_some() {
            match param("v") {
                Some("v1beta1") => return "v1beta1",
                Some("v1") => return "v1",
                _ => {}
            }
        }
    }
    "v1"
}

/// Puts a Table or PartialObjectMetadata(List) in `meta.k8s.io/<version>`, with the
/// PartialObjectMetadata inside it (rows' objects, list items).
pub fn set_meta_version(value: &mut Value, version: &str) {
    let api_version = format!("meta.k8s.io/{version}");
    let retag = |v: &mut Value| {
        if v.get("kind").and_then(Value::as_str) == Some("PartialObjectMetadata") {
            v["apiVersion"] = api_version.clone().into();
        }
    };
    if let Some(rows) = value.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows {
            if let Some(obj) = row.get_mut("object") {
                retag(obj);
            }
        }
    }
    if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(retag);
    }
    if value
        .get("apiVersion")
        .and_then(Value::as_str)
        .is_some_and(|v| v.starts_with("meta.k8s.io/"))
    {
        value["apiVersion"] = api_version.into();
    }
}

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
    // Some printers order their rows (FlowSchemas by matching precedence, as upstream's).
    let mut ordered: Vec<&Value> = objects.iter().collect();
    if !resource.custom {
        apimachinery::printers::sort_rows(&resource.group, &resource.plural, &mut ordered);
    }
    let rows: Vec<Value> = ordered
        .into_iter()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::response::{negotiate, Format};

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, v.parse().unwrap());
        h
    }

    #[test]
    fn reviews_and_action_subresources_have_no_table() {
        let h = accept("application/json;as=Table;v=v1;g=meta.k8s.io");
        let n = negotiate(&h, None, true).unwrap();
        let e = check_negotiated(
            &n,
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            None,
            None,
        )
        .unwrap_err();
        assert_eq!((e.code, e.reason), (406, "NotAcceptable"));
        assert!(check_negotiated(&n, "", "pods", Some("eviction"), None).is_err());
        assert!(check_negotiated(&n, "", "pods", Some("status"), None).is_ok());
        assert!(check_negotiated(&n, "apps", "deployments", Some("scale"), None).is_ok());
        // Plain JSON of a review is fine.
        let plain = Negotiated {
            repr: Representation::Object,
            format: Format::Json,
        };
        assert!(check_negotiated(
            &plain,
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            None,
            None
        )
        .is_ok());
        let e = check_negotiated(&n, "", "pods", None, Some("Everything")).unwrap_err();
        assert_eq!(e.code, 400);
        assert_eq!(e.message, "Unable to convert to Table as requested: includeObject: Invalid value: \"Everything\": must be 'Metadata', 'Object', 'None', or empty");
    }

    #[test]
    fn tables_come_in_the_version_asked_for() {
        assert_eq!(
            meta_version(&accept("application/json;as=Table;v=v1beta1;g=meta.k8s.io")),
            "v1beta1"
        );
        assert_eq!(
            meta_version(&accept("application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json")),
            "v1"
        );
        assert_eq!(meta_version(&HeaderMap::new()), "v1");
        let mut t = json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "rows": [{"cells": [], "object": partial_metadata(&json!({"metadata": {"name": "a"}}))}]});
        set_meta_version(&mut t, "v1beta1");
        assert_eq!(t["apiVersion"], "meta.k8s.io/v1beta1");
        assert_eq!(t["rows"][0]["object"]["apiVersion"], "meta.k8s.io/v1beta1");
    }
}
