//! CustomResourceDefinition validation (upstream `apiextensions-apiserver/pkg/apis/apiextensions/
//! validation`), on the `apiextensions.k8s.io/v1` JSON form. As upstream converts v1 to its internal
//! form before validating, a schema, subresources or printer columns identical in every version are
//! checked once at the top level and reported as `spec.validation...`, `spec.subresources...`,
//! `spec.additionalPrinterColumns...`; the internal names (`webhookClientConfig`, `JSONPath`) appear
//! in paths as upstream's do.
//!
//! Differences: CEL rules (`x-kubernetes-validations`) are checked for presence and messages but not
//! compiled; on update, only the "no tightening" of structural-schema and schema-required rules is
//! carried over from the old object (the others are always enforced).

use serde_json::Value;

use super::admission_webhook::{webhook_service, webhook_url};
use super::field::{ErrorList, FieldError, FieldPath};
use super::meta::{self, NameRule};
use super::names;
use crate::schema::{go_sharp_v, structural, Additional, Schema};

const PRINTER_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
const COLUMN_FORMATS: &[&str] = &[
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];
const OPENAPI_TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];
const APPROVAL: &str = "api-approved.kubernetes.io";

fn root(name: &str) -> FieldPath {
    FieldPath::root(name)
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_str().unwrap_or("")
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn is_established(crd: &Value) -> bool {
    arr(&crd["status"], "conditions")
        .iter()
        .any(|c| c["type"] == "Established" && c["status"] == "True")
}

/// Options that depend on the old object (upstream's `validationOptions`).
struct Opts {
    require_immutable_names: bool,
    require_schema: bool,
    require_structural: bool,
}

/// Validates a new CRD (after defaulting and `status.storedVersions`).
pub fn validate_create(crd: &Value) -> ErrorList {
    let opts = Opts {
        require_immutable_names: false,
        require_schema: true,
        require_structural: true,
    };
    let mut errs = validate_name(crd);
    errs.extend(spec(&crd["spec"], &opts));
    errs.extend(names(
        &crd["status"]["acceptedNames"],
        &root("status").child("acceptedNames"),
    ));
    errs.extend(stored_versions(crd));
    errs.extend(api_approval(crd, None));
    errs.extend(preserve_unknown_fields(crd, None));
    errs
}

/// Validates an update of a CRD's spec (and metadata).
pub fn validate_update(crd: &Value, old: &Value) -> ErrorList {
    let old_spec = &old["spec"];
    let opts = Opts {
        require_immutable_names: is_established(old),
        require_schema: all_versions_have_schema(old_spec),
        require_structural: !has_non_structural(old_spec),
    };
    let mut errs = meta::validate_object_meta_update(crd, old, true);
    let sp = root("spec");
    errs.extend(spec(&crd["spec"], &opts));
    let new_spec = &crd["spec"];
    if opts.require_immutable_names {
        errs.extend(meta::immutable(
            new_spec.get("scope"),
            old_spec.get("scope"),
            &sp.child("scope"),
        ));
        errs.extend(meta::immutable(
            new_spec.pointer("/names/kind"),
            old_spec.pointer("/names/kind"),
            &sp.child("names").child("kind"),
        ));
    }
    errs.extend(meta::immutable(
        new_spec.get("group"),
        old_spec.get("group"),
        &sp.child("group"),
    ));
    errs.extend(meta::immutable(
        new_spec.pointer("/names/plural"),
        old_spec.pointer("/names/plural"),
        &sp.child("names").child("plural"),
    ));
    errs.extend(names(
        &crd["status"]["acceptedNames"],
        &root("status").child("acceptedNames"),
    ));
    errs.extend(stored_versions(crd));
    errs.extend(api_approval(crd, Some(old)));
    errs.extend(preserve_unknown_fields(crd, Some(old)));
    errs
}

/// Validates an update of a CRD's status.
pub fn validate_status_update(crd: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(crd, old, true);
    errs.extend(names(
        &crd["status"]["acceptedNames"],
        &root("status").child("acceptedNames"),
    ));
    errs
}

fn validate_name(crd: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(crd, NameRule::Subdomain, true);
    let name = s(crd, &["metadata", "name"]);
    let required = format!(
        "{}.{}",
        s(crd, &["spec", "names", "plural"]),
        s(crd, &["spec", "group"])
    );
    if !name.is_empty() && name != required {
        errs.push(FieldError::invalid(
            &root("metadata").child("name"),
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    errs
}

fn all_versions_have_schema(spec: &Value) -> bool {
    arr(spec, "versions").iter().all(|v| {
        v.pointer("/schema/openAPIV3Schema")
            .is_some_and(Value::is_object)
    })
}

fn has_non_structural(spec: &Value) -> bool {
    arr(spec, "versions").iter().any(|v| {
        v.pointer("/schema/openAPIV3Schema")
            .filter(|s| s.is_object())
            .is_some_and(|s| {
                !structural::validate_structural(&root(""), &Schema::parse(s)).is_empty()
            })
    })
}

/// The value shared by every version under `key`, when all have it and it is the same.
fn identical<'a>(versions: &'a [Value], key: &str) -> Option<&'a Value> {
    let first = versions.first()?.get(key).filter(|v| !v.is_null())?;
    if key == "additionalPrinterColumns" && first.as_array().is_none_or(Vec::is_empty) {
        return None;
    }
    versions
        .iter()
        .all(|v| v.get(key) == Some(first))
        .then_some(first)
}

fn spec(spec: &Value, opts: &Opts) -> ErrorList {
    let sp = root("spec");
    let mut errs = ErrorList::new();
    let group = s(spec, &["group"]);
    if group.is_empty() {
        errs.push(FieldError::required(&sp.child("group"), ""));
    } else {
        let msgs = names::is_dns1123_subdomain(group);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                &sp.child("group"),
                group,
                msgs.join(","),
            ));
        } else if group.split('.').count() < 2 {
            errs.push(FieldError::invalid(
                &sp.child("group"),
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    match s(spec, &["scope"]) {
        "" => errs.push(FieldError::required(&sp.child("scope"), "")),
        "Cluster" | "Namespaced" => {}
        other => errs.push(FieldError::not_supported(
            &sp.child("scope"),
            other,
            &["Cluster", "Namespaced"],
        )),
    }
    let versions = arr(spec, "versions");
    let preserve = spec["preserveUnknownFields"].as_bool() == Some(true);
    let top_schema = identical(versions, "schema");
    let top_subresources = identical(versions, "subresources");
    let top_columns = identical(versions, "additionalPrinterColumns");
    let has_schema = |v: &Value| {
        v.pointer("/schema/openAPIV3Schema")
            .is_some_and(Value::is_object)
    };
    if opts.require_schema || !preserve {
        for (i, v) in versions.iter().enumerate() {
            if top_schema.is_none() && !has_schema(v) {
                let p = sp
                    .child("versions")
                    .index(i)
                    .child("schema")
                    .child("openAPIV3Schema");
                if opts.require_schema {
                    errs.push(FieldError::required(&p, "schemas are required"));
                } else if v["served"].as_bool() == Some(true) {
                    errs.push(FieldError::required(
                        &p,
                        "because otherwise all fields are pruned",
                    ));
                }
            }
        }
    }
    let any_status = versions.iter().any(|v| {
        v.pointer("/subresources/status")
            .is_some_and(|s| !s.is_null())
    });
    let mut storage = 0;
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, v) in versions.iter().enumerate() {
        let vp = sp.child("versions").index(i);
        let name = s(v, &["name"]);
        if v["storage"].as_bool() == Some(true) {
            storage += 1;
        }
        if seen.contains(&name) {
            unique = false;
        } else {
            seen.push(name);
        }
        let msgs = names::is_dns1035_label(name);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(&vp.child("name"), name, msgs.join(",")));
        }
        let deprecated = v["deprecated"].as_bool() == Some(true);
        if let Some(w) = v.get("deprecationWarning").and_then(Value::as_str) {
            let wp = vp.child("deprecationWarning");
            if !deprecated {
                errs.push(FieldError::invalid(
                    &wp,
                    w,
                    "can only be set for deprecated versions",
                ));
            } else if w.is_empty() {
                errs.push(FieldError::invalid(&wp, w, "must not be an empty string"));
            } else if w.len() > 256 {
                errs.push(FieldError::invalid(
                    &wp,
                    w,
                    "must be <= 256 characters long",
                ));
            }
        }
        let status_enabled = v
            .pointer("/subresources/status")
            .is_some_and(|s| !s.is_null());
        if top_schema.is_none() {
            if let Some(schema) = v
                .pointer("/schema/openAPIV3Schema")
                .filter(|s| s.is_object())
            {
                errs.extend(validation(
                    schema,
                    status_enabled,
                    opts,
                    &vp.child("schema").child("openAPIV3Schema"),
                ));
            }
        }
        if top_subresources.is_none() {
            errs.extend(subresources(
                v.get("subresources"),
                &vp.child("subresources"),
            ));
        }
        if top_columns.is_none() {
            for (j, c) in arr(v, "additionalPrinterColumns").iter().enumerate() {
                errs.extend(column(c, &vp.child("additionalPrinterColumns").index(j)));
            }
        }
    }
    if let Some(schema) = top_schema
        .and_then(|s| s.get("openAPIV3Schema"))
        .filter(|s| s.is_object())
    {
        errs.extend(validation(
            schema,
            any_status,
            opts,
            &sp.child("validation").child("openAPIV3Schema"),
        ));
    }
    if let Some(sub) = top_subresources {
        errs.extend(subresources(Some(sub), &sp.child("subresources")));
    }
    if let Some(cols) = top_columns {
        for (j, c) in cols.as_array().into_iter().flatten().enumerate() {
            errs.extend(column(c, &sp.child("additionalPrinterColumns").index(j)));
        }
    }
    if !unique {
        errs.push(FieldError::with_value_text(
            super::ErrorType::Invalid,
            &sp.child("versions"),
            versions_text(versions),
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errs.push(FieldError::with_value_text(
            super::ErrorType::Invalid,
            &sp.child("versions"),
            versions_text(versions),
            "must have exactly one version marked as storage version",
        ));
    }
    let np = sp.child("names");
    for key in ["plural", "singular", "kind", "listKind"] {
        if s(spec, &["names", key]).is_empty() {
            errs.push(FieldError::required(&np.child(key), ""));
        }
    }
    errs.extend(names(&spec["names"], &np));
    let strategy = s(spec, &["conversion", "strategy"]);
    if !strategy.is_empty() && strategy != "None" && preserve {
        errs.push(FieldError::invalid(
            &sp.child("conversion").child("strategy"),
            strategy,
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    errs.extend(conversion(spec.get("conversion"), &sp.child("conversion")));
    errs
}

/// How upstream prints the versions list in a message (a Go slice of structs); ours lists names.
fn versions_text(versions: &[Value]) -> String {
    let names: Vec<String> = versions
        .iter()
        .map(|v| format!("{:?}", s(v, &["name"])))
        .collect();
    format!(
        "[]apiextensions.CustomResourceDefinitionVersion{{{}}}",
        names.join(", ")
    )
}

/// Upstream `ValidateCustomResourceDefinitionNames`.
pub fn names(n: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    for key in ["plural", "singular"] {
        let v = s(n, &[key]);
        let msgs = names::is_dns1035_label(v);
        if !v.is_empty() && !msgs.is_empty() {
            errs.push(FieldError::invalid(&path.child(key), v, msgs.join(",")));
        }
    }
    for key in ["kind", "listKind"] {
        let v = s(n, &[key]);
        if let Some(msg) = names::kind_name_error(v).filter(|_| !v.is_empty()) {
            errs.push(FieldError::invalid(&path.child(key), v, msg));
        }
    }
    for (i, short) in arr(n, "shortNames").iter().enumerate() {
        let v = short.as_str().unwrap_or("");
        let msgs = names::is_dns1035_label(v);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("shortNames").index(i),
                v,
                msgs.join(","),
            ));
        }
    }
    let kind = s(n, &["kind"]);
    if !kind.is_empty() && kind == s(n, &["listKind"]) {
        errs.push(FieldError::invalid(
            &path.child("listKind"),
            kind,
            "kind and listKind may not be the same",
        ));
    }
    for (i, cat) in arr(n, "categories").iter().enumerate() {
        let v = cat.as_str().unwrap_or("");
        let msgs = names::is_dns1035_label(v);
        if !msgs.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("categories").index(i),
                v,
                msgs.join(","),
            ));
        }
    }
    errs
}

fn stored_versions(crd: &Value) -> ErrorList {
    let path = root("status").child("storedVersions");
    let stored: Vec<&str> = arr(&crd["status"], "storedVersions")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    if stored.is_empty() {
        return vec![FieldError::with_value_text(
            super::ErrorType::Invalid,
            &path,
            "[]string(nil)",
            "must have at least one stored version",
        )];
    }
    let mut errs = ErrorList::new();
    let versions = arr(&crd["spec"], "versions");
    for v in versions {
        let name = s(v, &["name"]);
        if v["storage"].as_bool() == Some(true) && !stored.contains(&name) {
            errs.push(FieldError::with_value_text(
                super::ErrorType::Invalid,
                &path,
                format!("apiextensions.CustomResourceDefinitionVersion{{Name:{name:?}}}"),
                format!("must have the storage version {name}"),
            ));
        }
    }
    for (i, name) in stored.iter().enumerate() {
        if !versions.iter().any(|v| s(v, &["name"]) == *name) {
            errs.push(FieldError::invalid(
                &path.index(i),
                *name,
                "must appear in spec.versions",
            ));
        }
    }
    errs
}

fn subresources(sub: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(scale) = sub.and_then(|s| s.get("scale")).filter(|s| s.is_object()) else {
        return errs;
    };
    for (key, prefix, under) in [
        ("specReplicasPath", ".spec.", ".spec"),
        ("statusReplicasPath", ".status.", ".status"),
    ] {
        let p = path.child(&format!("scale.{key}"));
        let v = s(scale, &[key]);
        if v.is_empty() {
            errs.push(FieldError::required(&p, ""));
        } else if let Some(e) = simple_json_path(v, &p) {
            errs.push(e);
        } else if !v.starts_with(prefix) {
            errs.push(FieldError::invalid(
                &p,
                v,
                format!("should be a json path under {under}"),
            ));
        }
    }
    let selector = s(scale, &["labelSelectorPath"]);
    if !selector.is_empty() {
        let p = path.child("scale.labelSelectorPath");
        if let Some(e) = simple_json_path(selector, &p) {
            errs.push(e);
        } else if !selector.starts_with(".spec.") && !selector.starts_with(".status.") {
            errs.push(FieldError::invalid(
                &p,
                selector,
                "should be a json path under either .spec or .status",
            ));
        }
    }
    errs
}

fn simple_json_path(v: &str, path: &FieldPath) -> Option<FieldError> {
    if v.is_empty() {
        Some(FieldError::invalid(path, v, "must not be empty"))
    } else if !v.starts_with('.') {
        Some(FieldError::invalid(
            path,
            v,
            "must be a simple json path starting with .",
        ))
    } else {
        None
    }
}

fn column(c: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if s(c, &["name"]).is_empty() {
        errs.push(FieldError::required(&path.child("name"), ""));
    }
    let t = s(c, &["type"]);
    let types = format!("must be one of {}", PRINTER_TYPES.join(","));
    if t.is_empty() {
        errs.push(FieldError::required(&path.child("type"), types));
    } else if !PRINTER_TYPES.contains(&t) {
        errs.push(FieldError::invalid(&path.child("type"), t, types));
    }
    let f = s(c, &["format"]);
    if !f.is_empty() && !COLUMN_FORMATS.contains(&f) {
        errs.push(FieldError::invalid(
            &path.child("format"),
            f,
            format!("must be one of {}", COLUMN_FORMATS.join(",")),
        ));
    }
    let jp = s(c, &["jsonPath"]);
    let p = path.child("JSONPath");
    if jp.is_empty() {
        errs.push(FieldError::required(&p, ""));
    } else if let Some(e) = simple_json_path(jp, &p) {
        errs.push(e);
    }
    errs
}

fn conversion(conv: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(conv) = conv.filter(|c| c.is_object()) else {
        return errs;
    };
    let strategy = s(conv, &["strategy"]);
    match strategy {
        "" => errs.push(FieldError::required(&path.child("strategy"), "")),
        "None" | "Webhook" => {}
        other => errs.push(FieldError::not_supported(
            &path.child("strategy"),
            other,
            &["None", "Webhook"],
        )),
    }
    let webhook = conv.get("webhook").filter(|w| w.is_object());
    let client = webhook
        .and_then(|w| w.get("clientConfig"))
        .filter(|c| c.is_object());
    let review_versions: Vec<&str> = webhook
        .map(|w| arr(w, "conversionReviewVersions"))
        .unwrap_or(&[])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let cp = path.child("webhookClientConfig");
    if strategy == "Webhook" {
        match client {
            None => errs.push(FieldError::required(
                &cp,
                "required when strategy is set to Webhook",
            )),
            Some(cc) => {
                let url = cc.get("url").and_then(Value::as_str);
                let svc = cc.get("service").filter(|s| s.is_object());
                match (url, svc) {
                    (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
                        &cp,
                        "exactly one of url or service is required",
                    )),
                    (Some(u), None) => errs.extend(webhook_url(u, &cp.child("url"))),
                    (None, Some(svc)) => errs.extend(webhook_service(svc, &cp.child("service"))),
                }
            }
        }
        let vp = path.child("conversionReviewVersions");
        if review_versions.is_empty() {
            errs.push(FieldError::required(&vp, ""));
        } else {
            let mut seen = Vec::new();
            for (i, v) in review_versions.iter().enumerate() {
                if seen.contains(v) {
                    errs.push(FieldError::invalid(&vp.index(i), *v, "duplicate version"));
                    continue;
                }
                seen.push(*v);
                for m in names::is_dns1035_label(v) {
                    errs.push(FieldError::invalid(&vp.index(i), *v, m));
                }
            }
            if !review_versions
                .iter()
                .any(|v| matches!(*v, "v1" | "v1beta1"))
            {
                let list: Vec<String> = review_versions.iter().map(|v| format!("{v:?}")).collect();
                errs.push(FieldError::with_value_text(
                    super::ErrorType::Invalid,
                    &vp,
                    format!("[]string{{{}}}", list.join(", ")),
                    "must include at least one of v1, v1beta1",
                ));
            }
        }
    } else {
        if client.is_some() {
            errs.push(FieldError::forbidden(
                &cp,
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if !review_versions.is_empty() {
            errs.push(FieldError::forbidden(
                &path.child("conversionReviewVersions"),
                "should not be set when strategy is not set to Webhook",
            ));
        }
    }
    errs
}

/// Fields allowed at the root of a schema when the status subresource is enabled.
const ROOT_ALLOWED: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
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
    "multipleOf",
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];
const ROOT_ALLOWED_GO: &str = "[Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations]";

/// Upstream `validateCustomResourceDefinitionValidation` for one `openAPIV3Schema` at `path`.
fn validation(raw: &Value, status_enabled: bool, opts: &Opts, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let schema = Schema::parse(raw);
    let base = path
        .as_str()
        .trim_end_matches(".openAPIV3Schema")
        .to_string();
    if status_enabled {
        if !schema.type_.is_empty() && schema.type_ != "object" {
            errs.push(FieldError::invalid(
                &FieldPath::root(&format!("{base}.openAPIV3Schema.type")),
                schema.type_.as_str(),
                "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
            ));
        } else if let Some(map) = raw.as_object() {
            let disallowed = map.iter().any(|(k, v)| {
                !ROOT_ALLOWED.contains(&k.as_str()) && !v.is_null() && *v != Value::Bool(false)
            });
            if disallowed {
                errs.push(FieldError::with_value_text(
                    super::ErrorType::Invalid,
                    path,
                    go_sharp_v(raw),
                    format!(
                        "only {ROOT_ALLOWED_GO} fields are allowed at the root of the schema if the status subresource is enabled"
                    ),
                ));
            }
        }
    }
    if schema.nullable {
        errs.push(FieldError::forbidden(
            &FieldPath::root(&format!("{base}.openAPIV3Schema.nullable")),
            "nullable cannot be true at the root",
        ));
    }
    let ctx = SchemaCtx {
        allow_defaults: true,
        defaults_reason: String::new(),
        inside_meta: false,
    };
    openapi_schema(&schema, path, &ctx, true, &mut errs);
    if opts.require_structural {
        let structural_errs = structural::validate_structural(path, &schema);
        if structural_errs.is_empty() {
            errs.extend(structural::validate_defaults(path, &schema));
        } else {
            errs.extend(structural_errs);
        }
    }
    errs
}

#[derive(Clone)]
struct SchemaCtx {
    allow_defaults: bool,
    defaults_reason: String,
    inside_meta: bool,
}

impl SchemaCtx {
    fn forbid_defaults(&self, reason: &str) -> SchemaCtx {
        SchemaCtx {
            allow_defaults: false,
            defaults_reason: reason.to_string(),
            inside_meta: self.inside_meta,
        }
    }
}

/// Upstream `ValidateCustomResourceDefinitionOpenAPISchema` with the v3 standard validator.
fn openapi_schema(
    s: &Schema,
    path: &FieldPath,
    ctx: &SchemaCtx,
    is_root: bool,
    errs: &mut ErrorList,
) {
    if !s.type_.is_empty() && !OPENAPI_TYPES.contains(&s.type_.as_str()) {
        if s.type_ == "null" {
            errs.push(FieldError::forbidden(
                &path.child("type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        } else {
            errs.push(FieldError::not_supported(
                &path.child("type"),
                s.type_.as_str(),
                OPENAPI_TYPES,
            ));
        }
    }
    if s.default.is_some() && !ctx.allow_defaults {
        let mut detail = "must not be set".to_string();
        if !ctx.defaults_reason.is_empty() {
            detail = format!("{detail} {}", ctx.defaults_reason);
        }
        errs.push(FieldError::forbidden(&path.child("default"), detail));
    }
    for field in &s.unsupported {
        let name = if *field == "$schema" {
            continue;
        } else {
            *field
        };
        errs.push(FieldError::forbidden(
            &path.child(name),
            format!("{name} is not supported"),
        ));
    }
    if !s.items_array.is_empty() {
        errs.push(FieldError::forbidden(
            &path.child("items"),
            "items must be a schema object and not an array",
        ));
    }
    if ctx.inside_meta && s.embedded_resource {
        errs.push(FieldError::forbidden(
            &path.child("x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
    if s.unique_items {
        errs.push(FieldError::forbidden(
            &path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(additional) = &s.additional_properties {
        let restrictive = matches!(additional, Additional::Bool(false) | Additional::Schema(_));
        if !s.properties.is_empty() && restrictive {
            errs.push(FieldError::forbidden(
                &path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        if let Additional::Schema(a) = additional {
            let sub = if ctx.inside_meta {
                ctx.forbid_defaults("inside additionalProperties applying to object metadata")
            } else {
                ctx.clone()
            };
            openapi_schema(a, &path.child("additionalProperties"), &sub, false, errs);
        }
    }
    for (k, p) in &s.properties {
        let mut sub = ctx.clone();
        if (is_root || s.embedded_resource)
            && matches!(k.as_str(), "metadata" | "kind" | "apiVersion")
        {
            sub.inside_meta = true;
            if is_root {
                sub = sub.forbid_defaults(&format!("in top-level {k}"));
            }
        }
        openapi_schema(p, &path.child("properties").key(k), &sub, false, errs);
    }
    if let Some(not) = &s.not {
        openapi_schema(not, &path.child("not"), ctx, false, errs);
    }
    for (name, alts) in [
        ("allOf", &s.all_of),
        ("oneOf", &s.one_of),
        ("anyOf", &s.any_of),
    ] {
        for (i, a) in alts.iter().enumerate() {
            openapi_schema(a, &path.child(name).index(i), ctx, false, errs);
        }
    }
    if let Some(items) = &s.items {
        openapi_schema(items, &path.child("items"), ctx, false, errs);
    }
    if s.preserve_unknown_fields == Some(false) {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            false,
            "must be true or undefined",
        ));
    }
    list_and_map_types(s, path, errs);
    for (i, rule) in s.validations.iter().enumerate() {
        let rp = path.child("x-kubernetes-validations").index(i);
        let text = rule["rule"].as_str().unwrap_or("").trim();
        let message = rule["message"].as_str().unwrap_or("");
        if text.is_empty() {
            errs.push(FieldError::required(
                &rp.child("rule"),
                "rule is not specified",
            ));
        } else if !message.is_empty() && message.trim().is_empty() {
            errs.push(FieldError::invalid(
                &rp.child("message"),
                message,
                "message must be non-empty if specified",
            ));
        } else if message.trim().contains(['\n', '\r']) {
            errs.push(FieldError::invalid(
                &rp.child("message"),
                message,
                "message must not contain line breaks",
            ));
        } else if text.contains(['\n', '\r']) && message.trim().is_empty() {
            errs.push(FieldError::required(
                &rp.child("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
    }
    map_list_keys_set(s, path, errs);
}

fn list_and_map_types(s: &Schema, path: &FieldPath, errs: &mut ErrorList) {
    if let Some(map_type) = &s.map_type {
        if s.type_ != "object" {
            let detail = "must be object if x-kubernetes-map-type is specified";
            if s.type_.is_empty() {
                errs.push(FieldError::required(&path.child("type"), detail));
            } else {
                errs.push(FieldError::invalid(
                    &path.child("type"),
                    s.type_.as_str(),
                    detail,
                ));
            }
        }
        if map_type != "atomic" && map_type != "granular" {
            errs.push(FieldError::not_supported(
                &path.child("x-kubernetes-map-type"),
                map_type.as_str(),
                &["atomic", "granular"],
            ));
        }
    }
    if let Some(list_type) = &s.list_type {
        if s.type_ != "array" {
            let detail = "must be array if x-kubernetes-list-type is specified";
            if s.type_.is_empty() {
                errs.push(FieldError::required(&path.child("type"), detail));
            } else {
                errs.push(FieldError::invalid(
                    &path.child("type"),
                    s.type_.as_str(),
                    detail,
                ));
            }
        } else if list_type == "set" {
            if let Some(items) = &s.items {
                let bad_array = items.type_ == "array"
                    && items.list_type.as_deref().is_some_and(|t| t != "atomic");
                let bad_object =
                    items.type_ == "object" && items.map_type.as_deref() != Some("atomic");
                if bad_array {
                    errs.push(FieldError::invalid(
                        &path.child("items").child("x-kubernetes-list-type"),
                        items.list_type.clone().unwrap_or_default(),
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    ));
                }
                if bad_object {
                    errs.push(FieldError::with_value_text(
                        super::ErrorType::Invalid,
                        &path.child("items").child("x-kubernetes-map-type"),
                        "(*string)(nil)",
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    ));
                }
            }
        }
        if !matches!(list_type.as_str(), "atomic" | "set" | "map") {
            errs.push(FieldError::not_supported(
                &path.child("x-kubernetes-list-type"),
                list_type.as_str(),
                &["atomic", "set", "map"],
            ));
        }
    }
    if !s.list_map_keys.is_empty() {
        match s.list_type.as_deref() {
            None => errs.push(FieldError::required(
                &path.child("x-kubernetes-list-type"),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            Some("map") => {}
            Some(other) => errs.push(FieldError::invalid(
                &path.child("x-kubernetes-list-type"),
                other,
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
        }
    }
    if s.list_type.as_deref() == Some("map") {
        if s.list_map_keys.is_empty() {
            errs.push(FieldError::required(
                &path.child("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match &s.items {
            None => errs.push(FieldError::required(
                &path.child("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(items) if items.type_ != "object" => errs.push(FieldError::invalid(
                &path.child("items").child("type"),
                items.type_.as_str(),
                "must be object if parent array's x-kubernetes-list-type is map",
            )),
            Some(items) => {
                let keys_text = format!(
                    "[]string{{{}}}",
                    s.list_map_keys
                        .iter()
                        .map(|k| format!("{k:?}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                let mut seen = Vec::new();
                for k in &s.list_map_keys {
                    match items.properties.get(k) {
                        Some(p) if p.type_ == "array" || p.type_ == "object" => {
                            errs.push(FieldError::invalid(
                                &path.child("items").child("properties").key(k).child("type"),
                                items.type_.as_str(),
                                "must be a scalar type if parent array's x-kubernetes-list-type is map",
                            ))
                        }
                        Some(_) => {}
                        None => errs.push(FieldError::with_value_text(
                            super::ErrorType::Invalid,
                            &path.child("x-kubernetes-list-map-keys"),
                            keys_text.clone(),
                            "entries must all be names of item properties",
                        )),
                    }
                    if seen.contains(&k) {
                        errs.push(FieldError::with_value_text(
                            super::ErrorType::Invalid,
                            &path.child("x-kubernetes-list-map-keys"),
                            keys_text.clone(),
                            "must not contain duplicate entries",
                        ));
                    }
                    seen.push(k);
                }
            }
        }
    }
}

/// Upstream `validateMapListKeysMapSet`: set/map items not nullable; map keys required or defaulted.
fn map_list_keys_set(s: &Schema, path: &FieldPath, errs: &mut ErrorList) {
    let (Some(items), Some(list_type)) = (&s.items, s.list_type.as_deref()) else {
        return;
    };
    if list_type != "set" && list_type != "map" {
        return;
    }
    if items.nullable {
        errs.push(FieldError::forbidden(
            &path.child("items").child("nullable"),
            format!("cannot be nullable when x-kubernetes-list-type is {list_type}"),
        ));
    }
    if list_type == "map" {
        for k in &s.list_map_keys {
            let Some(p) = items.properties.get(k) else {
                continue;
            };
            let kp = path.child("items").child("properties").key(k);
            if !items.required.contains(k) && p.default.is_none() {
                errs.push(FieldError::required(
                    &kp.child("default"),
                    "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                ));
            }
            if p.nullable {
                errs.push(FieldError::forbidden(
                    &kp.child("nullable"),
                    "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                ));
            }
        }
    }
}

fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

/// The API approval state of a CRD in a protected group: `Ok(())` approved or bypassed.
fn approval(crd: &Value) -> Result<(), (bool, String)> {
    let value = crd
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(APPROVAL))
        .and_then(Value::as_str);
    match value {
        None => Err((
            true,
            format!("protected groups must have approval annotation {APPROVAL:?}, see https://github.com/kubernetes/enhancements/pull/1111"),
        )),
        Some(v) if v.starts_with("unapproved") => Ok(()),
        Some(v) if v.contains("://") && !v.starts_with("://") => Ok(()),
        Some(_) => Err((
            false,
            format!("protected groups must have approval annotation {APPROVAL:?} with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"),
        )),
    }
}

fn api_approval(crd: &Value, old: Option<&Value>) -> ErrorList {
    if !is_protected_group(s(crd, &["spec", "group"])) {
        return Vec::new();
    }
    let new_state = approval(crd);
    if let Some(old) = old {
        if approval(old) == new_state {
            return Vec::new();
        }
    }
    let path = root("metadata").child("annotations").key(APPROVAL);
    match new_state {
        Ok(()) => Vec::new(),
        Err((true, reason)) => vec![FieldError::required(&path, reason)],
        Err((false, reason)) => {
            let v = crd
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(APPROVAL))
                .cloned()
                .unwrap_or(Value::Null);
            vec![FieldError::invalid(&path, v, reason)]
        }
    }
}

fn preserve_unknown_fields(crd: &Value, old: Option<&Value>) -> ErrorList {
    if old.is_some_and(|o| o["spec"]["preserveUnknownFields"].as_bool() == Some(true)) {
        return Vec::new();
    }
    if crd["spec"]["preserveUnknownFields"].as_bool() == Some(true) {
        return vec![FieldError::invalid(
            &root("spec").child("preserveUnknownFields"),
            true,
            "cannot set to true, set x-preserve-unknown-fields to true in spec.versions[*].schema instead",
        )];
    }
    Vec::new()
}
