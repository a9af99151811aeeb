//! The decoded messages turned back into the JSON they stand for (zero scalars absent, as proto3
//! cannot tell them from unset).

use super::gnostic::*;
use serde_json::{json, Map, Value};

pub fn s(m: &mut Map<String, Value>, k: &str, v: &str) {
    if !v.is_empty() {
        m.insert(k.into(), json!(v));
    }
}

fn b(m: &mut Map<String, Value>, k: &str, v: bool) {
    if v {
        m.insert(k.into(), json!(true));
    }
}

fn f(m: &mut Map<String, Value>, k: &str, v: f64) {
    if v != 0.0 {
        // JSON integers stay integers.
        let n = if v.fract() == 0.0 && v.abs() < 9e15 {
            json!(v as i64)
        } else {
            json!(v)
        };
        m.insert(k.into(), n);
    }
}

fn i(m: &mut Map<String, Value>, k: &str, v: i64) {
    if v != 0 {
        m.insert(k.into(), json!(v));
    }
}

fn strings(m: &mut Map<String, Value>, k: &str, v: &[String]) {
    if !v.is_empty() {
        m.insert(k.into(), json!(v));
    }
}

pub fn any(a: &Any) -> Value {
    assert!(a.value.is_empty(), "Any.value is never written");
    serde_yaml_ng::from_str(&a.yaml).unwrap_or_else(|e| panic!("{:?}: {e}", a.yaml))
}

fn opt_any(m: &mut Map<String, Value>, k: &str, v: &Option<Any>) {
    if let Some(a) = v {
        m.insert(k.into(), any(a));
    }
}

fn anys(m: &mut Map<String, Value>, k: &str, v: &[Any]) {
    if !v.is_empty() {
        m.insert(k.into(), v.iter().map(any).collect());
    }
}

fn ext(m: &mut Map<String, Value>, v: &[NamedAny]) {
    for e in v {
        assert!(e.name.starts_with("x-"), "{}", e.name);
        m.insert(e.name.clone(), any(e.value.as_ref().expect("value")));
    }
}

fn docs(m: &mut Map<String, Value>, v: &Option<ExternalDocs>) {
    if let Some(d) = v {
        let mut o = Map::new();
        s(&mut o, "description", &d.description);
        s(&mut o, "url", &d.url);
        ext(&mut o, &d.vendor_extension);
        m.insert("externalDocs".into(), Value::Object(o));
    }
}

pub fn document(d: &Document) -> Value {
    let mut m = Map::new();
    s(&mut m, "swagger", &d.swagger);
    if let Some(info) = &d.info {
        let mut o = Map::new();
        s(&mut o, "title", &info.title);
        s(&mut o, "version", &info.version);
        s(&mut o, "description", &info.description);
        ext(&mut o, &info.vendor_extension);
        m.insert("info".into(), Value::Object(o));
    }
    s(&mut m, "host", &d.host);
    s(&mut m, "basePath", &d.base_path);
    strings(&mut m, "schemes", &d.schemes);
    strings(&mut m, "consumes", &d.consumes);
    strings(&mut m, "produces", &d.produces);
    if let Some(paths) = &d.paths {
        let mut o = Map::new();
        for p in &paths.path {
            o.insert(
                p.name.clone(),
                path_item(p.value.as_ref().expect("path item")),
            );
        }
        ext(&mut o, &paths.vendor_extension);
        m.insert("paths".into(), Value::Object(o));
    }
    if let Some(defs) = &d.definitions {
        m.insert("definitions".into(), properties(defs));
    }
    if let Some(params) = &d.parameters {
        let o = params
            .additional_properties
            .iter()
            .map(|p| (p.name.clone(), parameter(p.value.as_ref().expect("value"))))
            .collect();
        m.insert("parameters".into(), Value::Object(o));
    }
    if let Some(resps) = &d.responses {
        let o = resps
            .additional_properties
            .iter()
            .map(|r| (r.name.clone(), response(r.value.as_ref().expect("value"))))
            .collect();
        m.insert("responses".into(), Value::Object(o));
    }
    if !d.security.is_empty() {
        m.insert("security".into(), d.security.iter().map(security).collect());
    }
    if let Some(defs) = &d.security_definitions {
        let o = defs
            .additional_properties
            .iter()
            .map(|d| {
                (
                    d.name.clone(),
                    security_definition(d.value.as_ref().expect("v")),
                )
            })
            .collect();
        m.insert("securityDefinitions".into(), Value::Object(o));
    }
    if !d.tags.is_empty() {
        let tags = d.tags.iter().map(|t| {
            let mut o = Map::new();
            s(&mut o, "name", &t.name);
            s(&mut o, "description", &t.description);
            docs(&mut o, &t.external_docs);
            ext(&mut o, &t.vendor_extension);
            Value::Object(o)
        });
        m.insert("tags".into(), tags.collect());
    }
    docs(&mut m, &d.external_docs);
    ext(&mut m, &d.vendor_extension);
    Value::Object(m)
}

fn path_item(p: &PathItem) -> Value {
    let mut m = Map::new();
    s(&mut m, "$ref", &p.r#ref);
    for (k, op) in [
        ("get", &p.get),
        ("put", &p.put),
        ("post", &p.post),
        ("delete", &p.delete),
        ("options", &p.options),
        ("head", &p.head),
        ("patch", &p.patch),
    ] {
        if let Some(op) = op {
            m.insert(k.into(), operation(op));
        }
    }
    if !p.parameters.is_empty() {
        m.insert(
            "parameters".into(),
            p.parameters.iter().map(parameters_item).collect(),
        );
    }
    ext(&mut m, &p.vendor_extension);
    Value::Object(m)
}

fn operation(op: &Operation) -> Value {
    let mut m = Map::new();
    strings(&mut m, "tags", &op.tags);
    s(&mut m, "summary", &op.summary);
    s(&mut m, "description", &op.description);
    s(&mut m, "operationId", &op.operation_id);
    strings(&mut m, "produces", &op.produces);
    strings(&mut m, "consumes", &op.consumes);
    if !op.parameters.is_empty() {
        m.insert(
            "parameters".into(),
            op.parameters.iter().map(parameters_item).collect(),
        );
    }
    if let Some(r) = &op.responses {
        let mut o = Map::new();
        for code in &r.response_code {
            let v = match code.value.as_ref().and_then(|v| v.oneof.as_ref()) {
                Some(ResponseValueOneof::Response(r)) => response(r),
                Some(ResponseValueOneof::JsonReference(r)) => reference(r),
                None => panic!("response {} without a value", code.name),
            };
            o.insert(code.name.clone(), v);
        }
        ext(&mut o, &r.vendor_extension);
        m.insert("responses".into(), Value::Object(o));
    }
    strings(&mut m, "schemes", &op.schemes);
    b(&mut m, "deprecated", op.deprecated);
    if !op.security.is_empty() {
        m.insert(
            "security".into(),
            op.security.iter().map(security).collect(),
        );
    }
    ext(&mut m, &op.vendor_extension);
    Value::Object(m)
}

fn reference(r: &JsonReference) -> Value {
    let mut m = Map::new();
    s(&mut m, "$ref", &r.r#ref);
    s(&mut m, "description", &r.description);
    Value::Object(m)
}

fn parameters_item(p: &ParametersItem) -> Value {
    match p.oneof.as_ref().expect("parameters item") {
        ParametersItemOneof::Parameter(p) => parameter(p),
        ParametersItemOneof::JsonReference(r) => reference(r),
    }
}

fn parameter(p: &Parameter) -> Value {
    let mut m = Map::new();
    match p.oneof.as_ref().expect("parameter") {
        ParameterOneof::BodyParameter(p) => {
            s(&mut m, "description", &p.description);
            s(&mut m, "name", &p.name);
            s(&mut m, "in", &p.r#in);
            b(&mut m, "required", p.required);
            if let Some(schema) = &p.schema {
                m.insert("schema".into(), self::schema(schema));
            }
            ext(&mut m, &p.vendor_extension);
        }
        ParameterOneof::NonBodyParameter(p) => match p.oneof.as_ref().expect("non-body") {
            NonBodyOneof::Header(p) | NonBodyOneof::Path(p) => {
                b(&mut m, "required", p.required);
                s(&mut m, "in", &p.r#in);
                s(&mut m, "description", &p.description);
                s(&mut m, "name", &p.name);
                s(&mut m, "type", &p.r#type);
                s(&mut m, "format", &p.format);
                if let Some(items) = &p.items {
                    m.insert("items".into(), primitives(items));
                }
                s(&mut m, "collectionFormat", &p.collection_format);
                opt_any(&mut m, "default", &p.default);
                f(&mut m, "maximum", p.maximum);
                i(&mut m, "maxLength", p.max_length);
                s(&mut m, "pattern", &p.pattern);
                b(&mut m, "uniqueItems", p.unique_items);
                anys(&mut m, "enum", &p.r#enum);
                ext(&mut m, &p.vendor_extension);
            }
            NonBodyOneof::Query(p) | NonBodyOneof::FormData(p) => {
                b(&mut m, "required", p.required);
                s(&mut m, "in", &p.r#in);
                s(&mut m, "description", &p.description);
                s(&mut m, "name", &p.name);
                b(&mut m, "allowEmptyValue", p.allow_empty_value);
                s(&mut m, "type", &p.r#type);
                s(&mut m, "format", &p.format);
                if let Some(items) = &p.items {
                    m.insert("items".into(), primitives(items));
                }
                s(&mut m, "collectionFormat", &p.collection_format);
                opt_any(&mut m, "default", &p.default);
                f(&mut m, "minimum", p.minimum);
                i(&mut m, "minItems", p.min_items);
                b(&mut m, "uniqueItems", p.unique_items);
                anys(&mut m, "enum", &p.r#enum);
                ext(&mut m, &p.vendor_extension);
            }
        },
    }
    Value::Object(m)
}

fn primitives(p: &PrimitivesItems) -> Value {
    let mut m = Map::new();
    s(&mut m, "type", &p.r#type);
    s(&mut m, "format", &p.format);
    if let Some(items) = &p.items {
        m.insert("items".into(), primitives(items));
    }
    s(&mut m, "collectionFormat", &p.collection_format);
    anys(&mut m, "enum", &p.r#enum);
    f(&mut m, "multipleOf", p.multiple_of);
    ext(&mut m, &p.vendor_extension);
    Value::Object(m)
}

fn response(r: &Response) -> Value {
    let mut m = Map::new();
    s(&mut m, "description", &r.description);
    match r
        .schema
        .as_ref()
        .map(|s| s.oneof.as_ref().expect("schema item"))
    {
        Some(SchemaItemOneof::Schema(sc)) => {
            m.insert("schema".into(), schema(sc));
        }
        Some(SchemaItemOneof::FileSchema(fs)) => {
            let mut o = Map::new();
            s(&mut o, "description", &fs.description);
            s(&mut o, "type", &fs.r#type);
            ext(&mut o, &fs.vendor_extension);
            m.insert("schema".into(), Value::Object(o));
        }
        None => {}
    }
    if let Some(h) = &r.headers {
        let mut o = Map::new();
        for nh in &h.additional_properties {
            let h = nh.value.as_ref().expect("header");
            let mut ho = Map::new();
            s(&mut ho, "type", &h.r#type);
            s(&mut ho, "format", &h.format);
            s(&mut ho, "description", &h.description);
            ext(&mut ho, &h.vendor_extension);
            o.insert(nh.name.clone(), Value::Object(ho));
        }
        m.insert("headers".into(), Value::Object(o));
    }
    if let Some(e) = &r.examples {
        let o = e
            .additional_properties
            .iter()
            .map(|a| (a.name.clone(), any(a.value.as_ref().expect("example"))))
            .collect();
        m.insert("examples".into(), Value::Object(o));
    }
    ext(&mut m, &r.vendor_extension);
    Value::Object(m)
}

pub fn properties(p: &Properties) -> Value {
    let o = p
        .additional_properties
        .iter()
        .map(|n| (n.name.clone(), schema(n.value.as_ref().expect("schema"))))
        .collect();
    Value::Object(o)
}

pub fn schema(sc: &Schema) -> Value {
    let mut m = Map::new();
    s(&mut m, "$ref", &sc.r#ref);
    s(&mut m, "format", &sc.format);
    s(&mut m, "title", &sc.title);
    s(&mut m, "description", &sc.description);
    opt_any(&mut m, "default", &sc.default);
    f(&mut m, "multipleOf", sc.multiple_of);
    f(&mut m, "maximum", sc.maximum);
    b(&mut m, "exclusiveMaximum", sc.exclusive_maximum);
    f(&mut m, "minimum", sc.minimum);
    b(&mut m, "exclusiveMinimum", sc.exclusive_minimum);
    i(&mut m, "maxLength", sc.max_length);
    i(&mut m, "minLength", sc.min_length);
    s(&mut m, "pattern", &sc.pattern);
    i(&mut m, "maxItems", sc.max_items);
    i(&mut m, "minItems", sc.min_items);
    b(&mut m, "uniqueItems", sc.unique_items);
    i(&mut m, "maxProperties", sc.max_properties);
    i(&mut m, "minProperties", sc.min_properties);
    strings(&mut m, "required", &sc.required);
    anys(&mut m, "enum", &sc.r#enum);
    if let Some(a) = &sc.additional_properties {
        let v = match a.oneof.as_ref().expect("additionalProperties") {
            AdditionalPropertiesOneof::Schema(sc) => schema(sc),
            AdditionalPropertiesOneof::Boolean(b) => json!(b),
        };
        m.insert("additionalProperties".into(), v);
    }
    if let Some(t) = &sc.r#type {
        let v = match t.value.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        m.insert("type".into(), v);
    }
    if let Some(items) = &sc.items {
        assert_eq!(items.schema.len(), 1, "items");
        m.insert("items".into(), schema(&items.schema[0]));
    }
    if !sc.all_of.is_empty() {
        m.insert("allOf".into(), sc.all_of.iter().map(schema).collect());
    }
    if let Some(p) = &sc.properties {
        m.insert("properties".into(), properties(p));
    }
    s(&mut m, "discriminator", &sc.discriminator);
    b(&mut m, "readOnly", sc.read_only);
    if let Some(x) = &sc.xml {
        let mut o = Map::new();
        s(&mut o, "name", &x.name);
        b(&mut o, "wrapped", x.wrapped);
        m.insert("xml".into(), Value::Object(o));
    }
    docs(&mut m, &sc.external_docs);
    opt_any(&mut m, "example", &sc.example);
    ext(&mut m, &sc.vendor_extension);
    Value::Object(m)
}

fn security(r: &SecurityRequirement) -> Value {
    let o = r
        .additional_properties
        .iter()
        .map(|n| (n.name.clone(), json!(n.value.as_ref().expect("v").value)))
        .collect();
    Value::Object(o)
}

fn scopes(m: &mut Map<String, Value>, sc: &Option<Oauth2Scopes>) {
    if let Some(sc) = sc {
        let o = sc
            .additional_properties
            .iter()
            .map(|n| (n.name.clone(), json!(n.value)))
            .collect();
        m.insert("scopes".into(), Value::Object(o));
    }
}

fn security_definition(d: &SecurityDefinitionsItem) -> Value {
    let mut m = Map::new();
    match d.oneof.as_ref().expect("security definition") {
        SecurityOneof::Basic(d) => {
            s(&mut m, "type", &d.r#type);
            s(&mut m, "description", &d.description);
        }
        SecurityOneof::ApiKey(d) => {
            s(&mut m, "type", &d.r#type);
            s(&mut m, "name", &d.name);
            s(&mut m, "in", &d.r#in);
            s(&mut m, "description", &d.description);
        }
        SecurityOneof::Implicit(d) => {
            s(&mut m, "type", &d.r#type);
            s(&mut m, "flow", &d.flow);
            scopes(&mut m, &d.scopes);
            s(&mut m, "authorizationUrl", &d.authorization_url);
        }
        SecurityOneof::Password(d) | SecurityOneof::Application(d) => {
            s(&mut m, "type", &d.r#type);
            s(&mut m, "flow", &d.flow);
            scopes(&mut m, &d.scopes);
            s(&mut m, "tokenUrl", &d.token_url);
        }
        SecurityOneof::AccessCode(d) => {
            s(&mut m, "type", &d.r#type);
            s(&mut m, "flow", &d.flow);
            scopes(&mut m, &d.scopes);
            s(&mut m, "authorizationUrl", &d.authorization_url);
            s(&mut m, "tokenUrl", &d.token_url);
        }
    }
    Value::Object(m)
}
