//! Table-driven tests of pruning, defaulting and validation; several cases are upstream's own
//! (`pruning/algorithm_test.go`, `defaulting/algorithm_test.go`, kube-openapi's messages).

use serde_json::{json, Value};

use super::*;

fn schema(v: Value) -> Schema {
    Schema::parse(&v)
}

#[test]
fn pruning_follows_upstream() {
    // (name, schema, object, pruned object, pruned paths)
    let cases: Vec<(&str, Value, Value, Value, Vec<&str>)> = vec![
        (
            "unknown fields at every level",
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}}),
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"a": "1", "b": 2}, "extra": true}),
            json!({"apiVersion": "x/v1", "kind": "K", "metadata": {"name": "n"}, "spec": {"a": "1"}}),
            vec!["spec.b", "extra"],
        ),
        (
            "preserve-unknown-fields keeps unknown, still prunes specified",
            json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}}}}),
            json!({"spec": {"free": {"x": 1}, "known": {"a": "1", "b": 2}}}),
            json!({"spec": {"free": {"x": 1}, "known": {"a": "1"}}}),
            vec!["spec.known.b"],
        ),
        (
            "arrays and additionalProperties",
            json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "integer"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}}}}}),
            json!({"items": [{"a": 1, "b": 2}, {"c": 3}], "labels": {"x": {"v": "1", "w": "2"}}}),
            json!({"items": [{"a": 1}, {}], "labels": {"x": {"v": "1"}}}),
            vec!["items[0].b", "items[1].c", "labels.x.w"],
        ),
        (
            "embedded resources keep apiVersion, kind and metadata",
            json!({"type": "object", "properties": {"template": {"type": "object", "x-kubernetes-embedded-resource": true,
                "properties": {"spec": {"type": "object"}}}}}),
            json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"x": 1}, "status": {}}}),
            json!({"template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}}),
            vec!["template.spec.x", "template.status"],
        ),
        (
            "no schema prunes everything but meta",
            json!(null),
            json!({"kind": "K", "spec": {"a": 1}}),
            json!({"kind": "K"}),
            vec!["spec"],
        ),
    ];
    for (name, s, mut obj, want, paths) in cases {
        let parsed = (!s.is_null()).then(|| schema(s));
        let got = prune::prune(&mut obj, parsed.as_ref());
        assert_eq!(obj, want, "{name}");
        assert_eq!(got, paths, "{name}");
    }
}

#[test]
fn nulls_without_defaults_are_dropped() {
    let s = schema(json!({"type": "object", "properties": {
        "a": {"type": "string"}, "b": {"type": "string", "nullable": true}, "c": {"type": "string", "default": "x"}}}));
    let mut obj = json!({"a": null, "b": null, "c": null});
    prune::prune_nulls(&mut obj, Some(&s));
    assert_eq!(obj, json!({"b": null, "c": null}));
    defaults::apply(&mut obj, Some(&s));
    assert_eq!(obj, json!({"b": null, "c": "x"}));
}

#[test]
fn defaulting_follows_upstream() {
    let s = schema(json!({"type": "object", "properties": {
        "spec": {"type": "object", "default": {}, "properties": {
            "replicas": {"type": "integer", "default": 1},
            "ports": {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string", "default": "TCP"}}}},
            "env": {"type": "object", "additionalProperties": {"type": "object", "properties": {"on": {"type": "boolean", "default": true}}}},
            "nullable": {"type": "string", "nullable": true, "default": "d"}}}}}));
    let cases = vec![
        (json!({}), json!({"spec": {"replicas": 1, "nullable": "d"}})),
        (
            json!({"spec": {"replicas": 3}}),
            json!({"spec": {"replicas": 3, "nullable": "d"}}),
        ),
        (
            json!({"spec": {"ports": [{}, {"protocol": "UDP"}], "env": {"a": {}}}}),
            json!({"spec": {"ports": [{"protocol": "TCP"}, {"protocol": "UDP"}], "env": {"a": {"on": true}}, "replicas": 1, "nullable": "d"}}),
        ),
        (
            json!({"spec": {"nullable": null}}),
            json!({"spec": {"nullable": null, "replicas": 1}}),
        ),
    ];
    for (mut obj, want) in cases {
        let input = obj.clone();
        defaults::apply(&mut obj, Some(&s));
        assert_eq!(obj, want, "{input}");
    }
}

fn messages(s: &Value, obj: &Value) -> Vec<String> {
    validate::validate(obj, &schema(s.clone()), None)
        .iter()
        .map(|e| e.to_string())
        .collect()
}

#[test]
fn validation_messages_are_upstreams() {
    let cases: Vec<(Value, Value, Vec<&str>)> = vec![
        (
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}}}}),
            json!({"spec": {"replicas": "three"}}),
            vec![
                r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#,
            ],
        ),
        (
            json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object", "required": ["image"], "properties": {"image": {"type": "string"}}}}}),
            json!({}),
            vec!["spec: Required value"],
        ),
        (
            json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["image"], "properties": {"image": {"type": "string"}}}}}),
            json!({"spec": {}}),
            vec!["spec.image: Required value"],
        ),
        (
            json!({"type": "object", "properties": {"mode": {"type": "string", "enum": ["A", "B"]}}}),
            json!({"mode": "C"}),
            vec![r#"mode: Unsupported value: "C": supported values: "A", "B""#],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "maximum": 10}}}),
            json!({"n": 11}),
            vec!["n: Invalid value: 11: n in body should be less than or equal to 10"],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1, "exclusiveMinimum": true}}}),
            json!({"n": 1}),
            vec!["n: Invalid value: 1: n in body should be greater than 1"],
        ),
        (
            json!({"type": "object", "properties": {"n": {"type": "number", "multipleOf": 0.5}}}),
            json!({"n": 0.3}),
            vec!["n: Invalid value: 0.3: n in body should be a multiple of 0.5"],
        ),
        (
            json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": 3}}}),
            json!({"s": "abcd"}),
            vec!["s: Too long: may not be more than 3 bytes"],
        ),
        (
            json!({"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "pattern": "^a"}}}),
            json!({"s": "b"}),
            vec![r#"s: Invalid value: "b": s in body should be at least 2 chars long"#],
        ),
        (
            json!({"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$"}}}),
            json!({"s": "b"}),
            vec![r#"s: Invalid value: "b": s in body should match '^a+$'"#],
        ),
        (
            json!({"type": "object", "properties": {"l": {"type": "array", "maxItems": 1, "minItems": 0, "items": {"type": "integer"}}}}),
            json!({"l": [1, "x"]}),
            vec![
                r#"l[1]: Invalid value: "string": l[1] in body must be of type integer: "string""#,
                "l: Too many: 2: must have at most 1 item",
            ],
        ),
        (
            json!({"type": "object", "properties": {"m": {"type": "object", "maxProperties": 1, "additionalProperties": {"type": "string"}}}}),
            json!({"m": {"a": "1", "b": "2"}}),
            vec!["m: Too many: 2: must have at most 1 item"],
        ),
        (
            json!({"type": "object", "properties": {"p": {"x-kubernetes-int-or-string": true}}}),
            json!({"p": true}),
            vec![
                r#"p: Invalid value: "boolean": p in body must be of type integer,string: "boolean""#,
            ],
        ),
        (
            json!({"type": "object", "properties": {"p": {"type": "string"}, "q": {"type": "string", "nullable": true}}}),
            json!({"p": null, "q": null}),
            vec![r#"p: Invalid value: "null": p in body must be of type string: "null""#],
        ),
        (
            json!({"type": "object", "properties": {"u": {"type": "string", "format": "uri"}}}),
            json!({"u": "nope"}),
            vec![r#"u: Invalid value: "nope": u in body must be of type uri: "nope""#],
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": "integer", "oneOf": [{"minimum": 5}, {"maximum": 1}]}}}),
            json!({"x": 3}),
            vec![
                r#"<nil>: Invalid value: "": "x" must validate one and only one schema (oneOf). Found none valid"#,
                "x: Invalid value: 3: x in body should be greater than or equal to 5",
            ],
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": "integer", "not": {"minimum": 5}}}}),
            json!({"x": 7}),
            vec![r#"<nil>: Invalid value: "": "x" must not validate the schema (not)"#],
        ),
        (
            json!({"type": "object", "properties": {"x": {"type": "integer", "anyOf": [{"minimum": 5}, {"maximum": 1}]}}}),
            json!({"x": 7}),
            vec![],
        ),
    ];
    for (s, obj, want) in cases {
        assert_eq!(messages(&s, &obj), want, "{obj}");
    }
}

#[test]
fn list_types_are_unique() {
    let s = schema(json!({"type": "object", "properties": {
        "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "map": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
            "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}}));
    let obj = json!({"set": ["a", "b", "a"], "map": [{"name": "x"}, {"name": "x", "v": 1}]});
    let got: Vec<String> = listtype::validate(&obj, Some(&s))
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        got,
        [
            r#"set[2]: Duplicate value: "a""#,
            r#"map[1]: Duplicate value: map[string]interface {}{"name":"x"}"#,
        ]
    );
}

#[test]
fn embedded_resources_are_checked() {
    let s = schema(
        json!({"type": "object", "properties": {"tpl": {"type": "object",
        "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true}}}),
    );
    let obj = json!({"tpl": {"metadata": {"name": "a/b"}}});
    let got: Vec<String> = objectmeta::validate_embedded(&obj, Some(&s))
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert!(
        got.contains(&"tpl.apiVersion: Required value".to_string()),
        "{got:?}"
    );
    assert!(
        got.contains(&"tpl.kind: Required value".to_string()),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|e| e.starts_with("tpl.metadata.name: Invalid value: \"a/b\"")),
        "{got:?}"
    );
    let mut obj =
        json!({"tpl": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "bogus": 1}}});
    let unknown = objectmeta::coerce_embedded(&mut obj, Some(&s)).unwrap();
    assert_eq!(unknown, ["tpl.metadata.bogus"]);
    assert_eq!(obj["tpl"]["metadata"], json!({"name": "a"}));
}

#[test]
fn structural_rules_and_defaults() {
    let path = crate::validation::FieldPath::root("spec")
        .child("validation")
        .child("openAPIV3Schema");
    let cases: Vec<(Value, Vec<&str>)> = vec![
        (
            json!({"type": "object", "properties": {"spec": {"properties": {"a": {"type": "string"}}}}}),
            vec!["spec.validation.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields"],
        ),
        (
            json!({"type": "object", "properties": {"list": {"type": "array"}}}),
            vec!["spec.validation.openAPIV3Schema.properties[list].items: Required value: must be specified"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "anyOf": [{"type": "string"}]}}}),
            vec!["spec.validation.openAPIV3Schema.properties[a].anyOf[0].type: Forbidden: must be empty to be structural"],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]}}}),
            vec![],
        ),
        (
            json!({"type": "object", "anyOf": [{"properties": {"b": {}}}]}),
            vec!["spec.validation.openAPIV3Schema.properties[b]: Required value: because it is defined in spec.validation.openAPIV3Schema.anyOf[0].properties[b]"],
        ),
        (
            json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}}),
            vec!["spec.validation.openAPIV3Schema.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"],
        ),
    ];
    for (s, want) in cases {
        let got: Vec<String> = structural::validate_structural(&path, &schema(s.clone()))
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(got, want, "{s}");
    }
    let bad_default = schema(
        json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"n": {"type": "integer", "default": "x"}, "o": {"type": "object", "default": {"u": 1}, "properties": {"k": {"type": "integer"}}}}}}}),
    );
    let got: Vec<String> = structural::validate_defaults(&path, &bad_default)
        .iter()
        .map(|e| e.to_string())
        .collect();
    assert_eq!(
        got,
        [
            r#"spec.validation.openAPIV3Schema.properties[spec].properties[n].default: Invalid value: "string":  in body must be of type integer: "string""#,
            r#"spec.validation.openAPIV3Schema.properties[spec].properties[o].default: Invalid value: map[string]interface {}{"u":1}: must not have unknown fields"#,
        ]
    );
}

#[test]
fn go_formatting() {
    assert_eq!(go_float(0.3), "0.3");
    assert_eq!(go_float(1e6), "1e+06");
    assert_eq!(go_float(123456.0), "123456");
    assert_eq!(go_float(0.00001), "1e-05");
    assert_eq!(
        go_sharp_v(&json!({"b": [1, "x"], "a": null})),
        r#"map[string]interface {}{"a":interface {}(nil), "b":[]interface {}{1, "x"}}"#
    );
    assert_eq!(
        go_v(&json!({"b": [1, "x"], "a": true})),
        "map[a:true b:[1 x]]"
    );
}
