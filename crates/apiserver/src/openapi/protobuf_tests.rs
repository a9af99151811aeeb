//! The protobuf form of `/openapi/v2` read back by an independent decoder: prost messages written
//! from gnostic's `OpenAPIv2.proto` (the subset of fields any document of ours can hold, plus the
//! rest of the oneofs), turned back into JSON and compared with the document they were encoded from.

use prost::Message;
use serde_json::{json, Value};

use super::protobuf::encode_document;
use super::{sha512_etag, v2, CustomSchemas};
use apimachinery::resources::Registry;

mod back;
mod gnostic;

use gnostic::*;

fn decode(bytes: &[u8]) -> Document {
    Document::decode(bytes).expect("our bytes decode as openapi.v2.Document")
}

fn round_trip(doc: &Value) -> Value {
    let bytes = encode_document(doc, 0).unwrap_or_else(|e| panic!("{e}"));
    back::document(&decode(&bytes))
}

/// What kube-openapi's `proto.NewOpenAPIData` (kubectl's v2 reader) refuses: a reference with a type
/// or properties or to a missing definition, an array without exactly one item schema, several
/// types, an unknown primitive type.
fn assert_kubectl_readable(doc: &Document) {
    let defs = &doc
        .definitions
        .as_ref()
        .expect("definitions")
        .additional_properties;
    let names: std::collections::HashSet<&str> = defs.iter().map(|d| d.name.as_str()).collect();
    fn check(s: &Schema, path: &str, names: &std::collections::HashSet<&str>) {
        let types = s.r#type.as_ref().map(|t| t.value.as_slice()).unwrap_or(&[]);
        let props = s
            .properties
            .as_ref()
            .map(|p| p.additional_properties.as_slice());
        if !s.r#ref.is_empty() {
            assert!(types.is_empty(), "{path}: reference with a type");
            assert!(
                props.unwrap_or(&[]).is_empty(),
                "{path}: reference with properties"
            );
            let target = s.r#ref.strip_prefix("#/definitions/").expect(path);
            assert!(names.contains(target), "{path}: unknown model {target}");
            return;
        }
        assert!(types.len() <= 1, "{path}: several types {types:?}");
        match types.first().map(String::as_str) {
            Some("array") => {
                let items = s.items.as_ref().map(|i| i.schema.as_slice()).unwrap_or(&[]);
                assert_eq!(
                    items.len(),
                    1,
                    "{path}: array without exactly one item schema"
                );
                check(&items[0], &format!("{path}[]"), names);
            }
            Some("object") | None => {
                for p in props.unwrap_or(&[]) {
                    check(
                        p.value.as_ref().expect(path),
                        &format!("{path}.{}", p.name),
                        names,
                    );
                }
                if let Some(AdditionalPropertiesOneof::Schema(a)) = s
                    .additional_properties
                    .as_ref()
                    .and_then(|a| a.oneof.as_ref())
                {
                    check(a, &format!("{path}{{}}"), names);
                }
            }
            Some(t) => assert!(
                ["string", "number", "integer", "boolean", ""].contains(&t),
                "{path}: unknown primitive type {t:?}"
            ),
        }
    }
    for d in defs {
        check(d.value.as_ref().expect("definition"), &d.name, &names);
    }
}

#[test]
fn builtin_document_decodes_to_its_json() {
    let snap = Registry::with_builtin().snapshot();
    let doc = v2(&snap, &CustomSchemas::default());
    let json: Value = serde_json::from_slice(&doc.body).unwrap();
    let started = std::time::Instant::now();
    let bytes = doc.protobuf().unwrap();
    eprintln!(
        "v2: {} bytes of JSON, {} of protobuf, encoded in {:?}",
        doc.body.len(),
        bytes.len(),
        started.elapsed()
    );
    // Kept with the document.
    assert_eq!(doc.protobuf().unwrap(), bytes);
    let decoded = decode(&bytes);
    assert_eq!(back::document(&decoded), json);
    assert_kubectl_readable(&decoded);

    // What kubectl's query-parameter verifier reads: the PATCH of a kind, its GVK extension (YAML)
    // and its `fieldValidation` query parameter.
    let paths = &decoded.paths.as_ref().unwrap().path;
    let ns = paths
        .iter()
        .find(|p| p.name == "/api/v1/namespaces/{name}")
        .expect("namespace path");
    let patch = ns.value.as_ref().unwrap().patch.as_ref().expect("patch");
    let gvk = patch
        .vendor_extension
        .iter()
        .find(|e| e.name == "x-kubernetes-group-version-kind")
        .expect("gvk");
    let gvk: std::collections::BTreeMap<String, String> =
        serde_yaml_ng::from_str(&gvk.value.as_ref().unwrap().yaml).unwrap();
    assert_eq!(gvk["kind"], "Namespace");
    assert_eq!(gvk["version"], "v1");
    let query_names: Vec<&str> = patch
        .parameters
        .iter()
        .filter_map(|p| match &p.oneof {
            Some(ParametersItemOneof::Parameter(Parameter {
                oneof:
                    Some(ParameterOneof::NonBodyParameter(NonBodyParameter {
                        oneof: Some(NonBodyOneof::Query(q)),
                    })),
            })) => Some(q.name.as_str()),
            _ => None,
        })
        .collect();
    assert!(query_names.contains(&"fieldValidation"), "{query_names:?}");
    let body = patch.parameters.iter().find_map(|p| match &p.oneof {
        Some(ParametersItemOneof::Parameter(Parameter {
            oneof: Some(ParameterOneof::BodyParameter(b)),
        })) => Some(b),
        _ => None,
    });
    let body = body.expect("body parameter");
    assert!(body.required);
    assert_eq!(
        body.schema.as_ref().unwrap().r#ref,
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
    );
    // The definitions' GVK extensions are lists.
    let defs = &decoded.definitions.as_ref().unwrap().additional_properties;
    let deployment = defs
        .iter()
        .find(|d| d.name == "io.k8s.api.apps.v1.Deployment")
        .and_then(|d| d.value.as_ref())
        .unwrap();
    let gvk = deployment
        .vendor_extension
        .iter()
        .find(|e| e.name == "x-kubernetes-group-version-kind")
        .unwrap();
    assert_eq!(
        back::any(gvk.value.as_ref().unwrap()),
        json!([{"group": "apps", "version": "v1", "kind": "Deployment"}])
    );
    // No v3-only keywords reach v2: the JSONSchemaProps-or-X kinds are descriptions only, as upstream.
    let or_array = &json["definitions"]
        ["io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray"];
    assert!(or_array.get("oneOf").is_none() && or_array["description"].is_string());
    assert_eq!(json["securityDefinitions"]["BearerToken"]["type"], "apiKey");
}

const CRD: &str = r#"{
  "spec": {
    "group": "stable.example.com",
    "names": {"kind": "CronTab", "plural": "crontabs"},
    "scope": "Namespaced",
    "versions": [
      {"name": "v1", "served": true, "schema": {"openAPIV3Schema": {
        "type": "object",
        "properties": {
          "metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}},
          "spec": {
            "type": "object",
            "required": ["cronSpec", "note"],
            "properties": {
              "cronSpec": {"type": "string", "pattern": "^(\\d+|\\*)(/\\d+)?(\\s+(\\d+|\\*)(/\\d+)?){4}$"},
              "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
              "note": {"type": "string", "nullable": true},
              "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
              "mode": {"type": "string", "enum": ["a", "b"], "example": "a"},
              "labels": {"type": "object", "additionalProperties": {"type": "string"}},
              "anything": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                           "properties": {"x": {"type": "string"}}},
              "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                           "properties": {"spec": {"type": "object"}}},
              "raw": {"type": "object", "x-kubernetes-embedded-resource": true,
                      "x-kubernetes-preserve-unknown-fields": true},
              "ports": {"type": "array", "x-kubernetes-list-type": "map",
                        "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"],
                                  "properties": {"name": {"type": "string"}}}},
              "untyped": {"type": "array", "x-kubernetes-preserve-unknown-fields": true,
                          "items": {"type": "string"}}
            },
            "x-kubernetes-validations": [{"rule": "self.replicas <= 10", "message": "too many"}],
            "oneOf": [{"required": ["cronSpec"]}]
          }
        }
      }}},
      {"name": "v2", "served": true, "schema": {"openAPIV3Schema": {
        "type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
    ]
  }
}"#;

#[test]
fn custom_resources_are_published_as_upstream_converts_them_for_v2() {
    let registry = Registry::with_builtin();
    let crd: Value = serde_json::from_str(CRD).unwrap();
    for r in crate::crd::resources_of(&crd) {
        registry.add(r);
    }
    let custom = CustomSchemas::from_crds([CRD.as_bytes()]);
    let doc = v2(&registry.snapshot(), &custom);
    let json: Value = serde_json::from_slice(&doc.body).unwrap();
    let decoded = decode(&doc.protobuf().unwrap());
    assert_eq!(back::document(&decoded), json);
    assert_kubectl_readable(&decoded);

    let def = &json["definitions"]["com.example.stable.v1.CronTab"];
    assert_eq!(def["x-kubernetes-group-version-kind"][0]["kind"], "CronTab");
    assert_eq!(
        def["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(def["properties"]["apiVersion"]["type"], "string");
    let spec = &def["properties"]["spec"];
    // Junctors and defaults are gone, a nullable field is untyped and no longer required.
    assert!(spec.get("oneOf").is_none());
    assert_eq!(spec["required"], json!(["cronSpec"]));
    let p = &spec["properties"];
    assert_eq!(p["note"], json!({}));
    assert_eq!(
        p["replicas"],
        json!({"type": "integer", "minimum": 1, "maximum": 10})
    );
    assert_eq!(p["port"], json!({"x-kubernetes-int-or-string": true}));
    assert_eq!(p["mode"], json!({"type": "string", "enum": ["a", "b"]}));
    assert_eq!(
        p["anything"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(
        p["untyped"],
        json!({"x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(
        p["raw"],
        json!({"x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true})
    );
    assert_eq!(p["template"]["required"], json!(["kind", "apiVersion"]));
    assert_eq!(
        p["template"]["properties"]["metadata"]["$ref"],
        "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    );
    assert_eq!(p["ports"]["x-kubernetes-list-map-keys"], json!(["name"]));
    assert_eq!(spec["x-kubernetes-validations"][0]["message"], "too many");
    // A schema keeping unknown fields at its root is a bare object.
    assert_eq!(
        json["definitions"]["com.example.stable.v2.CronTab"],
        json!({"type": "object", "x-kubernetes-group-version-kind": [
            {"group": "stable.example.com", "version": "v2", "kind": "CronTab"}]})
    );
    assert!(
        json["definitions"]["com.example.stable.v1.CronTabList"]["properties"]["items"].is_object()
    );
}

/// A document with every construct of Swagger 2.0 that gnostic's messages have (beyond what ours use),
/// each oneof member among them.
fn everything() -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "t", "version": "1", "description": "d", "x-info": {"a": [1, 2]}},
        "host": "example.com",
        "basePath": "/base",
        "schemes": ["https", "http"],
        "consumes": ["application/json"],
        "produces": ["application/json", "application/yaml"],
        "paths": {
            "x-paths": "ext",
            "/things/{id}": {
                "parameters": [
                    {"name": "id", "in": "path", "required": true, "type": "string", "pattern": "^[a-z]+$", "maxLength": 63},
                    {"$ref": "#/parameters/shared"}
                ],
                "get": {
                    "tags": ["things"],
                    "summary": "s",
                    "description": "get a thing",
                    "operationId": "getThing",
                    "parameters": [
                        {"name": "X-Trace", "in": "header", "type": "string", "description": "h", "maximum": 2.5,
                         "x-param": true},
                        {"name": "ids", "in": "query", "type": "array", "collectionFormat": "csv",
                         "items": {"type": "array", "items": {"type": "integer", "format": "int32", "multipleOf": 3}, "enum": [[1]]},
                         "minItems": 1, "allowEmptyValue": true, "uniqueItems": true},
                        {"name": "f", "in": "formData", "type": "number", "minimum": -1.5, "default": 2, "enum": [1, 2]}
                    ],
                    "responses": {
                        "200": {
                            "description": "OK",
                            "schema": {"$ref": "#/definitions/Thing"},
                            "headers": {"X-Rate": {"type": "integer", "format": "int64", "description": "rate", "x-h": 1}},
                            "examples": {"application/json": {"id": "a"}}
                        },
                        "404": {"$ref": "#/responses/missing"},
                        "default": {"description": "file", "schema": {"type": "file", "description": "raw"}},
                        "x-responses": [true]
                    },
                    "schemes": ["https"],
                    "deprecated": true,
                    "security": [{"oauth": ["read", "write"]}, {"key": []}],
                    "x-kubernetes-action": "get"
                },
                "put": {"responses": {"201": {"description": "Created"}}, "consumes": ["*/*"],
                        "parameters": [{"name": "body", "in": "body", "required": true, "description": "b",
                                        "schema": {"$ref": "#/definitions/Thing"}, "x-b": "y"}]},
                "x-path": {"deep": {"deeper": null}}
            }
        },
        "definitions": {
            "Thing": {
                "title": "Thing",
                "description": "A thing",
                "type": "object",
                "required": ["id"],
                "discriminator": "kind",
                "minProperties": 1,
                "maxProperties": 9,
                "properties": {
                    "id": {"type": "string", "minLength": 1, "maxLength": 5, "pattern": "^a", "readOnly": true,
                           "example": "abc", "default": "aa", "xml": {"name": "ID", "wrapped": true}},
                    "count": {"type": "integer", "minimum": 0.5, "exclusiveMinimum": true, "maximum": 100,
                              "exclusiveMaximum": true, "multipleOf": 0.5},
                    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "multi\nline", "true", "1"]},
                             "minItems": 1, "maxItems": 3, "uniqueItems": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "closed": {"type": "object", "additionalProperties": false, "properties": {}},
                    "open": {"type": "object", "additionalProperties": true},
                    "both": {"allOf": [{"$ref": "#/definitions/Thing"}, {"type": "object"}]},
                    "nullableish": {"type": ["string", "null"]},
                    "docs": {"externalDocs": {"description": "more", "url": "https://example.com", "x-d": 1}},
                    "meta": {"$ref": "#/definitions/Thing", "description": "a ref with a description"}
                },
                "x-kubernetes-group-version-kind": [{"group": "g", "kind": "Thing", "version": "v1"}]
            }
        },
        "parameters": {
            "shared": {"name": "pretty", "in": "query", "type": "string", "uniqueItems": true},
            "body": {"name": "body", "in": "body", "schema": {"type": "object"}}
        },
        "responses": {"missing": {"description": "Not found"}},
        "security": [{"BearerToken": []}],
        "securityDefinitions": {
            "basic": {"type": "basic", "description": "b"},
            "key": {"type": "apiKey", "name": "authorization", "in": "header"},
            "implicit": {"type": "oauth2", "flow": "implicit", "authorizationUrl": "https://a", "scopes": {"read": "r"}},
            "password": {"type": "oauth2", "flow": "password", "tokenUrl": "https://t", "scopes": {}},
            "app": {"type": "oauth2", "flow": "application", "tokenUrl": "https://t", "scopes": {"w": ""}},
            "code": {"type": "oauth2", "flow": "accessCode", "authorizationUrl": "https://a", "tokenUrl": "https://t"}
        },
        "tags": [{"name": "things", "description": "d", "externalDocs": {"url": "https://e"}, "x-t": 1}],
        "externalDocs": {"url": "https://docs"},
        "x-top": {"nested": ["list", {"k": 1.5}]}
    })
}

#[test]
fn every_construct_decodes_to_its_json() {
    let doc = everything();
    let mut want = doc.clone();
    // proto3 cannot carry an empty string value (the `w` scope).
    want["securityDefinitions"]["app"]["scopes"]["w"] = json!("");
    let got = round_trip(&doc);
    // A NamedString with an empty value decodes as "".
    assert_eq!(got, want);
}

#[test]
fn zero_scalars_are_omitted_but_oneof_members_and_present_messages_are_written() {
    let doc = json!({
        "swagger": "",
        "definitions": {"A": {"additionalProperties": false, "minimum": 0, "uniqueItems": false,
                              "properties": {}, "type": ""}},
    });
    let bytes = encode_document(&doc, 0).unwrap();
    let d = decode(&bytes);
    assert_eq!(d.swagger, "");
    let a = d.definitions.unwrap().additional_properties[0]
        .value
        .clone()
        .unwrap();
    assert_eq!(
        a.additional_properties.unwrap().oneof,
        Some(AdditionalPropertiesOneof::Boolean(false))
    );
    assert!(a
        .properties
        .is_some_and(|p| p.additional_properties.is_empty()));
    // A single type is written even when empty.
    assert_eq!(a.r#type.unwrap().value, [""]);
    // Exactly: definitions (9) { NamedSchema (1) { name "A", Schema { 21 { 2: false }, 22 { 1: "" },
    // 25 {} } } }.
    let schema = [
        0xaa, 0x01, 0x02, 0x10, 0x00, // additionalProperties: { boolean: false }
        0xb2, 0x01, 0x02, 0x0a, 0x00, // type: { value: [""] }
        0xca, 0x01, 0x00, // properties: {}
    ];
    let mut named = vec![0x0a, 0x01, b'A', 0x12, schema.len() as u8];
    named.extend(schema);
    let mut want = vec![0x4a, (named.len() + 2) as u8, 0x0a, named.len() as u8];
    want.extend(named);
    assert_eq!(bytes, want);
    // Negative numbers: int64 as ten-byte varints, doubles as their bits.
    let doc = json!({"definitions": {"N": {"minLength": -1, "minimum": -0.0}}});
    let d = decode(&encode_document(&doc, 0).unwrap());
    let n = d.definitions.unwrap().additional_properties[0]
        .value
        .clone()
        .unwrap();
    assert_eq!(n.min_length, -1);
    assert!(n.minimum == 0.0 && n.minimum.is_sign_negative());
}

#[test]
fn invalid_documents_are_refused_with_the_offending_path() {
    let table = [
        (json!([]), "Document must be an object"),
        (json!({"swagger": true}), "swagger: expected a string"),
        (
            json!({"bogus": 1}),
            "Document has invalid property \"bogus\"",
        ),
        (
            json!({"definitions": {"A": {"properties": {"b": {"oneOf": []}}}}}),
            "definitions.A.properties.b: Schema has invalid property \"oneOf\"",
        ),
        (
            json!({"definitions": {"A": {"items": [{"type": "string"}]}}}),
            "definitions.A.items: Schema must be an object",
        ),
        (
            json!({"paths": {"/a": {"get": {"parameters": [{"name": "x", "in": "cookie"}]}}}}),
            "paths./a.get.parameters.0: parameter location \"cookie\"",
        ),
        (
            json!({"paths": {"nope": {}}}),
            "paths: Paths has invalid property \"nope\"",
        ),
        (
            json!({"paths": {"/a": {"get": {"responses": {"2xx": {}}}}}}),
            "Responses has invalid property \"2xx\"",
        ),
        (
            json!({"definitions": {"A": {"maxLength": 1.5}}}),
            "definitions.A.maxLength: expected an integer",
        ),
        (
            json!({"securityDefinitions": {"s": {"type": "oauth2", "flow": "magic"}}}),
            "securityDefinitions.s: security definition of type \"oauth2\" (flow \"magic\")",
        ),
    ];
    for (doc, want) in table {
        let err = encode_document(&doc, 0).unwrap_err().to_string();
        assert!(err.contains(want), "{doc}: {err}");
    }
}

#[test]
fn etag_is_the_sha512_of_the_json() {
    let snap = Registry::with_builtin().snapshot();
    let doc = v2(&snap, &CustomSchemas::default());
    assert_eq!(doc.etag.len(), 128);
    assert!(doc
        .etag
        .chars()
        .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
    assert_eq!(doc.etag, sha512_etag(&doc.body));
    assert_ne!(sha512_etag(b"a"), sha512_etag(b"b"));
    assert_eq!(
        &sha512_etag(b"abc")[..16],
        // SHA-512("abc") from FIPS 180-2's examples.
        "DDAF35A193617ABA"
    );
}
