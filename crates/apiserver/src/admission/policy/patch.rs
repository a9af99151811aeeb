//! How a MutatingAdmissionPolicy's mutations change the object (upstream
//! `policy/mutating/patch`): `JSONPatch` applies RFC 6902 operations (a failed `test` leaves the
//! object as it was), `ApplyConfiguration` merges the configuration in with structured-merge
//! semantics (maps field by field, lists keyed by their merge key, sets united, other lists
//! replaced) after refusing configurations that set atomic lists.
//!
//! Difference: upstream reads list and map types from the OpenAPI schema; here they come from the
//! strategic-merge table of built-in kinds (the same list semantics for the lists it knows), and
//! custom resources' lists are all atomic. Structs marked atomic upstream (label selectors) are
//! merged here.

use apimachinery::patch::schema::{lookup, object_schema, schema_for, PatchSchema, Strategy};
use serde_json::{Map, Value};

/// The most operations one JSONPatch mutation may produce.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// Applies the operations a JSONPatch expression produced (a list of `{op, path, from?, value?}`).
/// `Ok(None)`: a `test` operation failed, so nothing is applied.
pub fn json_patch(object: &Value, operations: &Value) -> Result<Option<Value>, String> {
    let Value::Array(ops) = operations else {
        return Err("type mismatch: JSONPatchType.expression should evaluate to array".into());
    };
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(format!(
            "JSONPath: {} operations, more than the {MAX_JSON_PATCH_OPERATIONS} allowed",
            ops.len()
        ));
    }
    let mut patch = Vec::with_capacity(ops.len());
    for op in ops {
        let Value::Object(fields) = op else {
            return Err(
                "type mismatch: JSONPatchType.expression should evaluate to array of JSONPatch"
                    .into(),
            );
        };
        let mut out = Map::new();
        for key in ["op", "path", "from"] {
            match fields.get(key) {
                Some(Value::String(s)) => {
                    out.insert(key.into(), Value::String(s.clone()));
                }
                None | Some(Value::Null) if key == "from" => {}
                None | Some(Value::Null) => {
                    out.insert(key.into(), Value::String(String::new()));
                }
                Some(other) => {
                    return Err(format!(
                        "type mismatch: JSONPatch field {key} must be a string, got {other}"
                    ))
                }
            }
        }
        if let Some(v) = fields.get("value") {
            out.insert("value".into(), v.clone());
        }
        patch.push(Value::Object(out));
    }
    match apimachinery::patch::apply_json_patch(object, &Value::Array(patch)) {
        Ok(patched) => Ok(Some(patched)),
        Err(e) if e.message().starts_with("testing value") => Ok(None),
        Err(e) => Err(format!("JSONPath: {}", e.message())),
    }
}

/// Merges an ApplyConfiguration into the object of `group`/`kind`.
pub fn apply_configuration(
    group: &str,
    kind: &str,
    object: &Value,
    configuration: &Value,
) -> Result<Value, String> {
    let Value::Object(config) = configuration else {
        return Err(format!(
            "unsupported return type from ApplyConfiguration expression: {}",
            json_type(configuration)
        ));
    };
    let schema = match schema_for(group, kind) {
        s if s.type_name().is_some() => s,
        _ => object_schema(),
    };
    let mut atomics = Vec::new();
    find_atomics(&mut String::new(), config, schema, &mut atomics);
    if !atomics.is_empty() {
        return Err(format!(
            "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: {}",
            atomics.join(", ")
        ));
    }
    let mut config = config.clone();
    // The configuration is of the object's kind, whatever it says.
    for key in ["apiVersion", "kind"] {
        match object.get(key) {
            Some(v) => config.insert(key.into(), v.clone()),
            None => config.remove(key),
        };
    }
    Ok(apimachinery::fieldmanager::merge_without_ownership(
        group,
        kind,
        object,
        &Value::Object(config),
    ))
}

/// Paths (`.spec.containers[0].args`) of the lists in a configuration that merge atomically.
fn find_atomics(
    path: &mut String,
    config: &Map<String, Value>,
    schema: PatchSchema,
    out: &mut Vec<String>,
) {
    for (key, value) in config {
        let meta = lookup(schema, key);
        let len = path.len();
        path.push('.');
        path.push_str(key);
        match value {
            Value::Object(m) => find_atomics(path, m, meta.schema, out),
            Value::Array(items) => {
                if meta.strategy != Strategy::Merge {
                    out.push(path.clone());
                }
                for (i, item) in items.iter().enumerate() {
                    if let Value::Object(m) = item {
                        let len = path.len();
                        path.push_str(&format!("[{i}]"));
                        find_atomics(path, m, meta.schema, out);
                        path.truncate(len);
                    }
                }
            }
            _ => {}
        }
        path.truncate(len);
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null_type",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "double",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "list",
        Value::Object(_) => "map",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web",
            "labels": {"app": "web"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "nginx", "args": ["-a"]}]}}}})
    }

    #[test]
    fn json_patch_adds_replaces_and_skips_on_failed_test() {
        let d = deployment();
        let got = json_patch(
            &d,
            &json!([{"op": "add", "path": "/metadata/labels/team", "value": "x"},
            {"op": "replace", "path": "/spec/replicas", "value": 3}]),
        )
        .unwrap()
        .unwrap();
        assert_eq!(got["metadata"]["labels"]["team"], "x");
        assert_eq!(got["spec"]["replicas"], 3);
        let skipped = json_patch(
            &d,
            &json!([{"op": "test", "path": "/spec/replicas", "value": 9},
            {"op": "replace", "path": "/spec/replicas", "value": 3}]),
        )
        .unwrap();
        assert!(skipped.is_none());
        let err = json_patch(
            &d,
            &json!([{"op": "replace", "path": "/spec/nope/x", "value": 3}]),
        )
        .unwrap_err();
        assert!(err.starts_with("JSONPath: "), "{err}");
    }

    #[test]
    fn apply_configuration_merges_maps_and_keyed_lists() {
        let d = deployment();
        let got = apply_configuration(
            "apps",
            "Deployment",
            &d,
            &json!({"metadata": {"labels": {"team": "x"}},
            "spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:2"},
            {"name": "sidecar", "image": "envoy"}]}}}}),
        )
        .unwrap();
        assert_eq!(
            got["metadata"]["labels"],
            json!({"app": "web", "team": "x"})
        );
        let containers = got["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(containers.len(), 2);
        assert_eq!(containers[0]["image"], "nginx:2");
        assert_eq!(
            containers[0]["args"],
            json!(["-a"]),
            "unset fields of a merged item stay"
        );
        assert_eq!(containers[1]["name"], "sidecar");
        assert_eq!(got["apiVersion"], "apps/v1");
    }

    #[test]
    fn apply_configuration_refuses_atomic_lists_and_non_objects() {
        let d = deployment();
        let err = apply_configuration(
            "apps",
            "Deployment",
            &d,
            &json!({"spec": {"template": {"spec":
            {"containers": [{"name": "app", "args": ["-b"]}]}}}}),
        )
        .unwrap_err();
        assert_eq!(err, "error applying patch: invalid ApplyConfiguration: may not mutate atomic arrays, maps or structs: .spec.template.spec.containers[0].args");
        let err = apply_configuration("apps", "Deployment", &d, &json!("x")).unwrap_err();
        assert!(err.contains("unsupported return type"), "{err}");
    }
}
