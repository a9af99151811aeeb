//! The `paths` of a group version: per resource its collection, item and subresource paths with their
//! operations (`x-kubernetes-action`, `x-kubernetes-group-version-kind`, query parameters, request
//! bodies and responses referring to the kinds' definitions), in the OpenAPI v3 or Swagger 2.0 form.

use apimachinery::resources::Resource;
use serde_json::{json, Map, Value};

use super::kinds::{DEFS, DELETE_OPTIONS, PATCH, STATUS};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    V2,
    V3,
}

/// Resolves a (group, version, kind) to its definition name.
pub trait Names {
    fn name(&self, group: &str, version: &str, kind: &str) -> String;
}

const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "pretty"];
const PATCH_PARAMS: &[&str] = &[
    "dryRun",
    "fieldManager",
    "fieldValidation",
    "force",
    "pretty",
];
const DELETE_PARAMS: &[&str] = &["dryRun", "gracePeriodSeconds", "propagationPolicy"];
const LIST_PARAMS: &[&str] = &[
    "labelSelector",
    "fieldSelector",
    "limit",
    "continue",
    "resourceVersion",
    "watch",
];

/// What an operation takes as its body.
#[derive(Clone, Copy)]
enum Body<'a> {
    None,
    /// A whole object (`*/*`, as upstream).
    Object(&'a str),
    /// A patch of one of the patch media types.
    Patch,
}

struct Op<'a> {
    r: &'a Resource,
    /// The kind of the operation's object (the subresource's kind for `scale`, `eviction`, ...).
    gvk: (&'a str, &'a str, &'a str),
    action: &'static str,
    id: String,
    params: &'static [&'static str],
    body: Body<'a>,
    response: &'a str,
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("{DEFS}{name}")})
}

/// The media types an operation answers in, as upstream lists them: protobuf only for built-in kinds,
/// and the watch stream types for lists (which watch with `watch=true`).
fn response_types(r: &Resource, action: &str) -> Vec<&'static str> {
    let mut types = vec!["application/json", "application/yaml"];
    if !r.custom {
        types.push("application/vnd.kubernetes.protobuf");
    }
    if action == "list" {
        types.push("application/json;stream=watch");
        if !r.custom {
            types.push("application/vnd.kubernetes.protobuf;stream=watch");
        }
    }
    types
}

fn patch_types(r: &Resource) -> Vec<&'static str> {
    let mut types = vec![
        "application/apply-patch+yaml",
        "application/json-patch+json",
        "application/merge-patch+json",
    ];
    if !r.custom {
        types.push("application/strategic-merge-patch+json");
    }
    types
}

fn body_types<'a>(op: &Op<'a>) -> (Vec<&'static str>, &'a str) {
    match op.body {
        Body::None => (Vec::new(), ""),
        Body::Object(name) => (vec!["*/*"], name),
        Body::Patch => (patch_types(op.r), PATCH),
    }
}

fn render(op: &Op, format: Format) -> Value {
    let (group, version, kind) = op.gvk;
    let mut out = Map::new();
    out.insert("operationId".into(), json!(op.id));
    let mut params: Vec<Value> = op
        .params
        .iter()
        .map(|p| match format {
            Format::V3 => {
                json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
            }
            Format::V2 => json!({"name": p, "in": "query", "type": "string", "uniqueItems": true}),
        })
        .collect();
    let (consumes, body) = body_types(op);
    let produces = response_types(op.r, op.action);
    match format {
        Format::V3 => {
            if !body.is_empty() {
                let content: Map<String, Value> = consumes
                    .iter()
                    .map(|t| (t.to_string(), json!({"schema": reference(body)})))
                    .collect();
                out.insert(
                    "requestBody".into(),
                    json!({"content": content, "required": true}),
                );
            }
            let content: Map<String, Value> = produces
                .iter()
                .map(|t| (t.to_string(), json!({"schema": reference(op.response)})))
                .collect();
            out.insert(
                "responses".into(),
                json!({"200": {"description": "OK", "content": content}}),
            );
        }
        Format::V2 => {
            if !body.is_empty() {
                params.insert(
                    0,
                    json!({"name": "body", "in": "body", "required": true, "schema": reference(body)}),
                );
                out.insert("consumes".into(), json!(consumes));
            }
            out.insert("produces".into(), json!(produces));
            out.insert("schemes".into(), json!(["https"]));
            out.insert(
                "responses".into(),
                json!({"200": {"description": "OK", "schema": reference(op.response)}}),
            );
        }
    }
    out.insert("parameters".into(), Value::Array(params));
    out.insert("x-kubernetes-action".into(), json!(op.action));
    out.insert(
        "x-kubernetes-group-version-kind".into(),
        json!({"group": group, "version": version, "kind": kind}),
    );
    Value::Object(out)
}

fn path_params(names: &[&str], format: Format) -> Value {
    Value::Array(
        names
            .iter()
            .map(|n| match format {
                Format::V3 => json!({"name": n, "in": "path", "required": true, "schema": {"type": "string", "uniqueItems": true}}),
                Format::V2 => json!({"name": n, "in": "path", "required": true, "type": "string", "uniqueItems": true}),
            })
            .collect(),
    )
}

/// Adds the paths of `r`, served under `prefix` (`/api/v1`, `/apis/<group>/<version>`).
pub fn resource_paths(
    paths: &mut Map<String, Value>,
    prefix: &str,
    r: &Resource,
    names: &dyn Names,
    format: Format,
) {
    let own = (r.group.as_str(), r.version.as_str(), r.kind.as_str());
    let name = names.name(&r.group, &r.version, &r.kind);
    let list = names.name(&r.group, &r.version, &format!("{}List", r.kind));
    let k = &r.kind;
    let op = |action, id: String, params, body, response| Op {
        r,
        gvk: own,
        action,
        id,
        params,
        body,
        response,
    };
    let (collection, mut scope) = if r.namespaced {
        (
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural),
            vec!["namespace"],
        )
    } else {
        (format!("{prefix}/{}", r.plural), vec![])
    };
    let mut coll = Vec::new();
    if r.has_verb("list") {
        let o = op("list", format!("list{k}"), LIST_PARAMS, Body::None, &list);
        coll.push(("get", o));
    }
    if r.has_verb("create") {
        let o = op(
            "post",
            format!("create{k}"),
            WRITE_PARAMS,
            Body::Object(&name),
            &name,
        );
        coll.push(("post", o));
    }
    if r.has_verb("deletecollection") {
        let o = op(
            "deletecollection",
            format!("deleteCollection{k}"),
            DELETE_PARAMS,
            Body::Object(DELETE_OPTIONS),
            STATUS,
        );
        coll.push(("delete", o));
    }
    insert(paths, &collection, &scope, coll, format);

    scope.push("name");
    let item = format!("{collection}/{{name}}");
    let mut ops = Vec::new();
    if r.has_verb("get") {
        ops.push((
            "get",
            op("get", format!("read{k}"), &["pretty"], Body::None, &name),
        ));
    }
    if r.has_verb("update") {
        let o = op(
            "put",
            format!("replace{k}"),
            WRITE_PARAMS,
            Body::Object(&name),
            &name,
        );
        ops.push(("put", o));
    }
    if r.has_verb("patch") {
        let o = op(
            "patch",
            format!("patch{k}"),
            PATCH_PARAMS,
            Body::Patch,
            &name,
        );
        ops.push(("patch", o));
    }
    if r.has_verb("delete") {
        let o = op(
            "delete",
            format!("delete{k}"),
            DELETE_PARAMS,
            Body::Object(DELETE_OPTIONS),
            &name,
        );
        ops.push(("delete", o));
    }
    insert(paths, &item, &scope, ops, format);

    for sub in &r.subresources {
        // Connect subresources (logs, exec, proxies) take query options and answer streams, not
        // objects; they are not published yet.
        if matches!(
            sub.as_str(),
            "attach" | "exec" | "log" | "portforward" | "proxy"
        ) {
            continue;
        }
        let suffix = capitalize(sub);
        // The kind a subresource reads and writes, as upstream.
        let (gvk, sub_name) = match sub.as_str() {
            "scale" => (
                ("autoscaling", "v1", "Scale"),
                names.name("autoscaling", "v1", "Scale"),
            ),
            "eviction" => (
                ("policy", "v1", "Eviction"),
                names.name("policy", "v1", "Eviction"),
            ),
            "binding" => (("", "v1", "Binding"), names.name("", "v1", "Binding")),
            _ => (own, name.clone()),
        };
        let sub_op = |action, id: String, params, body| Op {
            r,
            gvk,
            action,
            id,
            params,
            body,
            response: &sub_name,
        };
        let mut ops = Vec::new();
        match sub.as_str() {
            "eviction" | "binding" => ops.push((
                "post",
                sub_op(
                    "post",
                    format!("create{k}{suffix}"),
                    WRITE_PARAMS,
                    Body::Object(&sub_name),
                ),
            )),
            "finalize" => ops.push((
                "put",
                sub_op(
                    "put",
                    format!("replace{k}{suffix}"),
                    WRITE_PARAMS,
                    Body::Object(&sub_name),
                ),
            )),
            _ => {
                ops.push((
                    "get",
                    sub_op("get", format!("read{k}{suffix}"), &["pretty"], Body::None),
                ));
                ops.push((
                    "put",
                    sub_op(
                        "put",
                        format!("replace{k}{suffix}"),
                        WRITE_PARAMS,
                        Body::Object(&sub_name),
                    ),
                ));
                ops.push((
                    "patch",
                    sub_op(
                        "patch",
                        format!("patch{k}{suffix}"),
                        PATCH_PARAMS,
                        Body::Patch,
                    ),
                ));
            }
        }
        insert(paths, &format!("{item}/{sub}"), &scope, ops, format);
    }
}

fn insert(
    paths: &mut Map<String, Value>,
    path: &str,
    scope: &[&str],
    ops: Vec<(&str, Op)>,
    format: Format,
) {
    if ops.is_empty() {
        return;
    }
    let mut item = Map::new();
    for (method, op) in &ops {
        item.insert(method.to_string(), render(op, format));
    }
    if !scope.is_empty() {
        item.insert("parameters".into(), path_params(scope, format));
    }
    paths.insert(path.to_string(), Value::Object(item));
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}
