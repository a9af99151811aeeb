//! The Swagger 2.0 form of schemas, as upstream publishes them in `/openapi/v2`:
//!
//! - every schema keeps only what Swagger 2.0 (and so gnostic's `openapi_v2.Schema`) has: no `oneOf`,
//!   `anyOf`, `not`, `nullable` (upstream's generated v2 definitions of `JSONSchemaPropsOrArray` and
//!   friends are descriptions only, for the same reason);
//! - custom resources' schemas go through apiextensions-apiserver's `ToStructuralOpenAPIV2`
//!   (`pkg/controller/openapi/v2`) and the v2 parts of its `builder.buildKubeNative`: junctors
//!   dropped, a nullable field untyped (and no longer required), `x-kubernetes-preserve-unknown-fields`
//!   fields without `properties`/`items` or the `object` type, arrays without items untyped, defaults
//!   pruned (`handler.PruneDefaults`), embedded resources given `apiVersion`/`kind`/`metadata`, and a
//!   schema preserving unknown fields at its root published as a bare `object`. kubectl's v2 readers
//!   (`kube-openapi/pkg/util/proto`) reject what these rules remove.

use apimachinery::resources::Resource;
use serde_json::{json, Map, Value};

use super::kinds::{self, DEFS, OBJECT_META};

/// The keys of a Swagger 2.0 schema object (besides `x-` extensions).
const SWAGGER_SCHEMA_KEYS: &[&str] = &[
    "$ref",
    "format",
    "title",
    "description",
    "default",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "enum",
    "additionalProperties",
    "type",
    "items",
    "allOf",
    "properties",
    "discriminator",
    "readOnly",
    "xml",
    "externalDocs",
    "example",
];

/// The extensions a CRD schema can carry (the fields of `JSONSchemaProps` named `x-kubernetes-*`);
/// the boolean ones are published only when true, as upstream's `Structural.ToKubeOpenAPI`.
const CRD_EXTENSIONS: &[&str] = &[
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// The schemas below a schema, by the keys that hold them.
fn for_each_subschema(m: &mut Map<String, Value>, f: &mut impl FnMut(&mut Value)) {
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(&mut *f);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(v @ Value::Object(_)) = m.get_mut(key) {
            f(v);
        }
    }
    if let Some(Value::Array(all)) = m.get_mut("allOf") {
        all.iter_mut().for_each(&mut *f);
    }
}

/// Drops, recursively, what a Swagger 2.0 schema cannot hold.
pub fn swagger_schema(s: &mut Value) {
    let Value::Object(m) = s else {
        return;
    };
    m.retain(|k, _| k.starts_with("x-") || SWAGGER_SCHEMA_KEYS.contains(&k.as_str()));
    for_each_subschema(m, &mut swagger_schema);
}

fn is_true(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).and_then(Value::as_bool) == Some(true)
}

/// The schema of a custom resource for v2, without the common fields (see [`crd_definition`]); None
/// when upstream publishes the kind as a bare object (no schema, or unknown fields kept at the root).
fn crd_schema(schema: Option<&Value>) -> Option<Value> {
    let mut s = schema.filter(|s| s.is_object())?.clone();
    if is_true(s.as_object()?, "x-kubernetes-preserve-unknown-fields") {
        return None;
    }
    to_structural_v2(&mut s);
    add_embedded_properties(&mut s);
    Some(s)
}

/// `ToStructuralOpenAPIV2` with the structural schema's own filtering (only its fields survive,
/// false booleans are not published) and `PruneDefaults`, on one schema and, after it, its children.
fn to_structural_v2(s: &mut Value) {
    let Value::Object(m) = s else {
        return;
    };
    let nullable = |v: &Value| v.get("nullable") == Some(&Value::Bool(true));
    if is_true(m, "nullable") {
        for key in ["type", "items", "properties"] {
            m.remove(key);
        }
    }
    let preserve = is_true(m, "x-kubernetes-preserve-unknown-fields");
    if preserve {
        m.remove("items");
        m.remove("properties");
    }
    let ty = m.get("type").and_then(Value::as_str);
    if (ty == Some("array") && !m.contains_key("items")) || (preserve && ty == Some("object")) {
        // kubectl's v2 reader rejects arrays without items and objects keeping unknown fields.
        m.remove("type");
    }
    // A nullable field may be null, so it cannot be required in v2, which has no null.
    let nullable_fields: Vec<String> = match m.get("properties") {
        Some(Value::Object(props)) => props
            .iter()
            .filter(|(_, p)| nullable(p))
            .map(|(k, _)| k.clone())
            .collect(),
        _ => Vec::new(),
    };
    if let Some(Value::Array(required)) = m.get_mut("required") {
        required.retain(|r| !nullable_fields.iter().any(|n| r == n.as_str()));
    }
    if m.get("additionalProperties").is_some_and(nullable) {
        m.remove("required");
    }
    if m.get("required")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty)
    {
        m.remove("required");
    }
    m.retain(|k, v| {
        if CRD_EXTENSIONS.contains(&k.as_str()) {
            return v != &Value::Bool(false);
        }
        SWAGGER_SCHEMA_KEYS.contains(&k.as_str())
            && !matches!(
                k.as_str(),
                // Not in a structural schema, junctors, pruned defaults.
                "$ref"
                    | "discriminator"
                    | "readOnly"
                    | "xml"
                    | "externalDocs"
                    | "example"
                    | "allOf"
                    | "default"
            )
    });
    for_each_subschema(m, &mut to_structural_v2);
}

fn add_embedded_properties(s: &mut Value) {
    let Value::Object(m) = s else {
        return;
    };
    for_each_subschema(m, &mut add_embedded_properties);
    if is_true(m, "x-kubernetes-preserve-unknown-fields") {
        // Upstream adds no fields to an object keeping unknown ones: kubectl would refuse the rest.
        return;
    }
    if !is_true(m, "x-kubernetes-embedded-resource") {
        return;
    }
    let props = m
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(props) = props {
        props.insert("apiVersion".into(), json!({
            "description": "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
            "type": "string",
        }));
        props.insert("kind".into(), json!({
            "description": "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
            "type": "string",
        }));
        props.insert("metadata".into(), metadata_ref());
    }
    let required = m.entry("required").or_insert_with(|| json!([]));
    if let Value::Array(required) = required {
        for field in ["kind", "apiVersion"] {
            if !required.iter().any(|r| r == field) {
                required.push(json!(field));
            }
        }
    }
}

fn metadata_ref() -> Value {
    json!({
        "$ref": format!("{DEFS}{OBJECT_META}"),
        "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
    })
}

/// The v2 definition of a custom resource's kind: its schema converted as above with the common
/// fields (`metadata`, `apiVersion`, `kind`), or a bare object; with its group-version-kind.
pub fn crd_definition(r: &Resource, schema: Option<&Value>) -> Value {
    let mut def = match crd_schema(schema) {
        Some(Value::Object(mut def)) => {
            // Upstream sets these over whatever the CRD's schema says.
            let props = def
                .entry("properties")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(props) = props {
                props.insert("metadata".into(), metadata_ref());
                props.extend(kinds::type_meta_properties());
            }
            def
        }
        // Upstream adds no fields here: kubectl would then reject every other field.
        _ => Map::from_iter([("type".to_string(), json!("object"))]),
    };
    def.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{"group": r.group, "version": r.version, "kind": r.kind}]),
    );
    Value::Object(def)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swagger_schemas_lose_only_schema_keywords_v2_lacks() {
        let mut s = json!({
            "type": "object",
            "oneOf": [{"type": "string"}],
            "nullable": true,
            "x-kubernetes-int-or-string": true,
            "properties": {
                // Property names are not keywords.
                "oneOf": {"type": "array", "items": {"anyOf": [], "type": "string"}},
                "not": {"not": {}, "additionalProperties": {"nullable": false, "type": "string"}},
            },
            "allOf": [{"anyOf": [], "$ref": "#/definitions/X"}],
        });
        swagger_schema(&mut s);
        assert_eq!(
            s,
            json!({
                "type": "object",
                "x-kubernetes-int-or-string": true,
                "properties": {
                    "oneOf": {"type": "array", "items": {"type": "string"}},
                    "not": {"additionalProperties": {"type": "string"}},
                },
                "allOf": [{"$ref": "#/definitions/X"}],
            })
        );
    }

    #[test]
    fn crd_schemas_convert_as_to_structural_openapi_v2() {
        let table = [
            // (schema, v2 form; None for a bare object)
            (json!({"type": "object"}), Some(json!({"type": "object"}))),
            (
                json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                None,
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "array"}}}),
                Some(json!({"type": "object", "properties": {"a": {}}})),
            ),
            (
                json!({"type": "object", "required": ["a", "b"], "properties": {
                    "a": {"type": "object", "nullable": true, "properties": {"x": {"type": "string"}}},
                    "b": {"type": "string", "default": "x", "x-kubernetes-preserve-unknown-fields": false},
                }}),
                Some(json!({"type": "object", "required": ["b"], "properties": {
                    "a": {},
                    "b": {"type": "string"},
                }})),
            ),
            (
                json!({"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}},
                       "additionalProperties": {"type": "string", "nullable": true}}),
                Some(
                    json!({"type": "object", "properties": {"a": {"type": "string"}},
                            "additionalProperties": {}}),
                ),
            ),
            (
                json!({"type": "object", "properties": {"list": {"type": "array",
                    "x-kubernetes-preserve-unknown-fields": true, "items": {"type": "string"}}}}),
                Some(json!({"type": "object", "properties": {"list": {
                    "x-kubernetes-preserve-unknown-fields": true}}})),
            ),
            (
                json!({"type": "object", "properties": {"e": {"type": "object",
                    "x-kubernetes-embedded-resource": true, "required": ["spec"],
                    "properties": {"spec": {"type": "object", "example": {}, "externalDocs": {}}}}}}),
                Some(
                    json!({"type": "object", "properties": {"e": {"type": "object",
                    "x-kubernetes-embedded-resource": true, "required": ["spec", "kind", "apiVersion"],
                    "properties": {"spec": {"type": "object"}, "apiVersion": {}, "kind": {}, "metadata": {}}}}}),
                ),
            ),
        ];
        for (schema, want) in table {
            let mut got = crd_schema(Some(&schema));
            // The common fields' contents are checked elsewhere; here only that they are there.
            if let Some(props) = got
                .as_mut()
                .and_then(|g| g.pointer_mut("/properties/e/properties"))
                .and_then(Value::as_object_mut)
            {
                for k in ["apiVersion", "kind", "metadata"] {
                    if let Some(p) = props.get_mut(k) {
                        *p = json!({});
                    }
                }
            }
            assert_eq!(got, want, "{schema}");
        }
        assert_eq!(crd_schema(None), None);
    }
}
