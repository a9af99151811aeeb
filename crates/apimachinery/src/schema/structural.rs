//! Structural schemas (upstream `schema/validation.go`, `schema/complete.go` and
//! `schema/defaulting/validation.go`): the rules an `apiextensions.k8s.io/v1` CRD's schema must follow
//! so that pruning and defaulting are well defined, and the check that defaults validate against their
//! schema and carry no pruned fields. Messages and paths are upstream's.

use serde_json::Value;

use super::{go_sharp_v, prune, validate, Additional, Schema};
use crate::validation::field::{FieldError, FieldPath};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// Upstream `ValidateStructural`: invariants and completeness, errors sorted by their text.
pub fn validate_structural(path: &FieldPath, s: &Schema) -> Vec<FieldError> {
    let mut errs = Vec::new();
    invariants(s, Level::Root, path, &mut errs);
    completeness(s, s, path, path, &mut errs);
    errs.sort_by_key(|e| e.to_string());
    errs
}

fn int_or_string_pair(alts: &[Schema]) -> bool {
    let only_type = |t: &str| Schema {
        type_: t.into(),
        ..Default::default()
    };
    alts.len() == 2 && alts[0] == only_type("integer") && alts[1] == only_type("string")
}

fn invariants(s: &Schema, lvl: Level, path: &FieldPath, errs: &mut Vec<FieldError>) {
    if s.type_ == "array" && s.items.is_none() {
        errs.push(FieldError::required(
            &path.child("items"),
            "must be specified",
        ));
    }
    if let Some(items) = &s.items {
        invariants(items, Level::Item, &path.child("items"), errs);
    }
    for (k, v) in &s.properties {
        invariants(v, Level::Field, &path.child("properties").key(k), errs);
    }
    if let Some(additional) = &s.additional_properties {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(
                &path.child("additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Additional::Schema(a) = additional {
            invariants(a, Level::Field, &path.child("additionalProperties"), errs);
        }
    }
    if s.int_or_string && s.preserves_unknown() {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if s.int_or_string && s.embedded_resource {
        errs.push(FieldError::invalid(
            &path.child("x-kubernetes-embedded-resource"),
            true,
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = int_or_string_pair(&s.any_of);
    let skip_first_all_of = s
        .all_of
        .first()
        .is_some_and(|a| int_or_string_pair(&a.any_of));
    value_validation(s, skip_any_of, skip_first_all_of, lvl, path, errs);

    let check_metadata = lvl == Level::Root || s.embedded_resource;
    if s.embedded_resource && s.type_ != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        if s.type_.is_empty() {
            errs.push(FieldError::required(&path.child("type"), detail));
        } else {
            errs.push(FieldError::invalid(
                &path.child("type"),
                s.type_.as_str(),
                detail,
            ));
        }
    } else if s.type_.is_empty() && !s.int_or_string && !s.preserves_unknown() {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(&path.child("type"), detail));
    }
    if s.embedded_resource && s.additional_properties.is_some() {
        errs.push(FieldError::forbidden(
            &path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !s.type_.is_empty() && s.type_ != "object" {
        errs.push(FieldError::invalid(
            &path.child("type"),
            s.type_.as_str(),
            "must be object at the root",
        ));
    }
    for key in ["kind", "apiVersion"] {
        if let Some(p) = s.properties.get(key).filter(|_| check_metadata) {
            if p.type_ != "string" {
                errs.push(FieldError::invalid(
                    &path.child("properties").key(key).child("type"),
                    p.type_.as_str(),
                    "must be string",
                ));
            }
        }
    }
    if let Some(meta) = s.properties.get("metadata") {
        let mpath = path.child("properties").key("metadata");
        if check_metadata && meta.type_ != "object" {
            errs.push(FieldError::invalid(
                &mpath.child("type"),
                meta.type_.as_str(),
                "must be object",
            ));
        }
        if lvl == Level::Root {
            let mut rest = meta.clone();
            let names_only = rest
                .properties
                .keys()
                .all(|k| k == "name" || k == "generateName");
            if names_only {
                rest.properties.clear();
            }
            rest.type_.clear();
            rest.default = None;
            if rest != Schema::default() {
                errs.push(FieldError::forbidden(
                    &mpath,
                    "must not specify anything other than name and generateName, but metadata is implicitly specified",
                ));
            }
        }
    }
    if s.embedded_resource && !s.preserves_unknown() && s.properties.is_empty() {
        errs.push(FieldError::required(
            &path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

fn value_validation(
    s: &Schema,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    lvl: Level,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, a) in s.any_of.iter().enumerate() {
            nested(a, false, false, lvl, &path.child("anyOf").index(i), errs);
        }
    }
    for (i, a) in s.all_of.iter().enumerate() {
        let skip = skip_first_all_of_any_of && i == 0;
        nested(a, skip, false, lvl, &path.child("allOf").index(i), errs);
    }
    for (i, a) in s.one_of.iter().enumerate() {
        nested(a, false, false, lvl, &path.child("oneOf").index(i), errs);
    }
    if let Some(not) = &s.not {
        nested(not, false, false, lvl, &path.child("not"), errs);
    }
    if !s.pattern.is_empty() {
        if let Err(e) = regex::Regex::new(&s.pattern) {
            errs.push(FieldError::invalid(
                &path.child("pattern"),
                s.pattern.as_str(),
                format!("must be a valid regular expression, but isn't: {e}"),
            ));
        }
    }
}

/// A schema under `allOf`/`anyOf`/`oneOf`/`not`: value validations only.
fn nested(
    v: &Schema,
    skip_any_of: bool,
    skip_all_of_any_of: bool,
    lvl: Level,
    path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    value_validation(v, skip_any_of, skip_all_of_any_of, lvl, path, errs);
    if let Some(items) = &v.items {
        nested(items, false, false, lvl, &path.child("items"), errs);
    }
    for (k, p) in &v.properties {
        nested(
            p,
            false,
            false,
            Level::Field,
            &path.child("properties").key(k),
            errs,
        );
    }
    let forbid = |errs: &mut Vec<FieldError>, field: &str, detail: &str| {
        errs.push(FieldError::forbidden(&path.child(field), detail));
    };
    if !v.type_.is_empty() {
        forbid(errs, "type", "must be empty to be structural");
    }
    if v.additional_properties.is_some() {
        forbid(
            errs,
            "additionalProperties",
            "must be undefined to be structural",
        );
    }
    if v.default.is_some() {
        forbid(errs, "default", "must be undefined to be structural");
    }
    if !v.title.is_empty() {
        forbid(errs, "title", "must be empty to be structural");
    }
    if !v.description.is_empty() {
        forbid(errs, "description", "must be empty to be structural");
    }
    if v.nullable {
        forbid(errs, "nullable", "must be false to be structural");
    }
    if v.external_docs {
        forbid(errs, "externalDocs", "must be undefined to be structural");
    }
    if v.preserves_unknown() {
        forbid(
            errs,
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        );
    }
    if v.embedded_resource {
        forbid(
            errs,
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        );
    }
    if v.int_or_string {
        forbid(
            errs,
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        );
    }
    if !v.list_map_keys.is_empty() {
        forbid(
            errs,
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
        );
    }
    if v.list_type.is_some() {
        forbid(
            errs,
            "x-kubernetes-list-type",
            "must be undefined to be structural",
        );
    }
    if v.map_type.is_some() {
        forbid(
            errs,
            "x-kubernetes-map-type",
            "must be undefined to be structural",
        );
    }
    if !v.validations.is_empty() {
        forbid(
            errs,
            "x-kubernetes-validations",
            "must be empty to be structural",
        );
    }
    if v.properties.contains_key("metadata") {
        errs.push(FieldError::forbidden(
            &path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// Every field or array a junctor specifies is also specified outside of value validation.
fn completeness(
    v: &Schema,
    s: &Schema,
    s_path: &FieldPath,
    v_path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    if let Some(not) = &v.not {
        nested_completeness(not, Some(s), s_path, &v_path.child("not"), errs);
    }
    for (name, alts) in [
        ("allOf", &v.all_of),
        ("anyOf", &v.any_of),
        ("oneOf", &v.one_of),
    ] {
        for (i, a) in alts.iter().enumerate() {
            nested_completeness(a, Some(s), s_path, &v_path.child(name).index(i), errs);
        }
    }
}

fn nested_completeness(
    v: &Schema,
    s: Option<&Schema>,
    s_path: &FieldPath,
    v_path: &FieldPath,
    errs: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(
            s_path,
            format!("because it is defined in {v_path}"),
        ));
        return;
    };
    completeness(v, s, s_path, v_path, errs);
    if let Some(items) = &v.items {
        nested_completeness(
            items,
            s.items.as_deref(),
            &s_path.child("items"),
            &v_path.child("items"),
            errs,
        );
    }
    for (k, p) in &v.properties {
        let sp = s_path.child("properties").key(k);
        let vp = v_path.child("properties").key(k);
        match s.properties.get(k) {
            Some(sf) => nested_completeness(p, Some(sf), &sp, &vp, errs),
            None => errs.push(FieldError::required(
                &sp,
                format!("because it is defined in {vp}"),
            )),
        }
    }
}

/// Upstream `ValidateDefaults` (for a resource root): every `default` validates against its schema
/// and is unchanged by pruning. Defaults inside `additionalProperties` are not followed (CRD
/// validation forbids nothing there, but upstream does not check them either).
pub fn validate_defaults(path: &FieldPath, s: &Schema) -> Vec<FieldError> {
    let mut errs = Vec::new();
    defaults(path, &s.as_resource_root(), false, &mut errs);
    errs
}

fn defaults(path: &FieldPath, s: &Schema, inside_meta: bool, errs: &mut Vec<FieldError>) {
    let inside_meta = inside_meta && !s.embedded_resource;
    if let Some(default) = &s.default {
        let dpath = path.child("default");
        if !inside_meta {
            let mut pruned = default.clone();
            let mut node = s.clone();
            if !s.embedded_resource {
                // Pruning a value below the root: no meta fields are special.
                node.embedded_resource = false;
            }
            prune_value(&mut pruned, &node);
            if pruned != *default {
                let mut e =
                    FieldError::invalid(&dpath, default.clone(), "must not have unknown fields");
                if default.is_object() || default.is_array() {
                    e.value_text = Some(go_sharp_v(default));
                }
                errs.push(e);
            }
        }
        errs.extend(validate::validate(default, s, Some(&dpath)));
    }
    if let Some(items) = &s.items {
        defaults(&path.child("items"), items, inside_meta, errs);
    }
    for (k, p) in &s.properties {
        let sub_meta = inside_meta
            || (s.embedded_resource && matches!(k.as_str(), "metadata" | "apiVersion" | "kind"));
        defaults(&path.child("properties").key(k), p, sub_meta, errs);
    }
}

/// Prunes a value that is not a resource root (an embedded resource keeps its meta fields).
fn prune_value(v: &mut Value, s: &Schema) {
    let mut wrapper = Schema {
        embedded_resource: true,
        ..Default::default()
    };
    wrapper.properties.insert("v".into(), s.clone());
    let mut obj = serde_json::json!({ "v": v.clone() });
    prune::prune(&mut obj, Some(&wrapper));
    if let Some(x) = obj.get("v") {
        *v = x.clone();
    }
}
