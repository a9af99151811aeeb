//! `status.typeChecking` of ValidatingAdmissionPolicies (upstream `policy/validating/
//! typechecking.go` and kube-controller-manager's `validatingadmissionpolicy-status-controller`):
//! each validation's `expression` and `messageExpression` is checked against the OpenAPI schema
//! of every kind the policy's resource rules name (at most 10, without wildcards), and of the
//! `paramKind`; a field the schema does not have becomes a warning in cel-go's words:
//!
//! ```text
//! apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'
//!  | object.replicas > 1
//!  | ......^
//! ```
//!
//! The controller writes `observedGeneration` and the warnings whenever a policy's generation is
//! ahead of its `status.observedGeneration`.
//!
//! Difference: the `cel` engine has no type checker, so this checks field selections written
//! from `object`, `oldObject` and `params` (`object.spec.x`, `has(object.spec.x)`), not the types
//! of operands, and not selections on values a macro or variable introduces.

use std::sync::Arc;

use apimachinery::resources::Snapshot;
use serde_json::{json, Map, Value};

use crate::openapi::CustomSchemas;
use crate::watch_cache::WatchStart;
use crate::ApiServer;

/// Upstream's `maxTypesToCheck`.
const MAX_TYPES: usize = 10;

/// One field selection chain from a root variable: `(char offset of each '.', field)`.
type Chain = Vec<(usize, String)>;

/// The selection chains of `expr` rooted at `root` (a chain stops before a method call).
fn chains(expr: &str, root: &str) -> Vec<Chain> {
    let chars: Vec<char> = expr.chars().collect();
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let root: Vec<char> = root.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if let Some(end) = super::lower::string_end(&chars, i) {
            i = end;
            continue;
        }
        let starts_root = chars[i..].starts_with(&root)
            && (i == 0 || (!is_ident(chars[i - 1]) && chars[i - 1] != '.'))
            && !chars.get(i + root.len()).copied().is_some_and(is_ident);
        if !starts_root {
            i += 1;
            continue;
        }
        let mut j = i + root.len();
        let mut chain = Vec::new();
        loop {
            let mut k = j;
            while k < chars.len() && chars[k].is_whitespace() {
                k += 1;
            }
            if chars.get(k) != Some(&'.') {
                break;
            }
            let dot = k;
            k += 1;
            if chars.get(k) == Some(&'?') {
                k += 1;
            }
            let start = k;
            while k < chars.len() && is_ident(chars[k]) {
                k += 1;
            }
            if start == k {
                break;
            }
            let mut after = k;
            while after < chars.len() && chars[after].is_whitespace() {
                after += 1;
            }
            if chars.get(after) == Some(&'(') {
                break;
            }
            chain.push((dot, chars[start..k].iter().collect()));
            j = k;
        }
        if !chain.is_empty() {
            out.push(chain);
        }
        i = j.max(i + 1);
    }
    out
}

/// The schema `s` stands for, following `$ref` (directly or as the only `allOf` entry).
fn resolve<'a>(schemas: &'a Map<String, Value>, mut s: &'a Value) -> &'a Value {
    for _ in 0..32 {
        let reference = s.get("$ref").and_then(Value::as_str).or_else(|| {
            s.get("allOf")
                .and_then(Value::as_array)
                .filter(|a| a.len() == 1)
                .and_then(|a| a[0].get("$ref"))
                .and_then(Value::as_str)
        });
        match reference
            .and_then(|r| r.rsplit('/').next())
            .and_then(|n| schemas.get(n))
        {
            Some(next) => s = next,
            None => return s,
        }
    }
    s
}

/// The first field of `chain` that `schema` does not have.
fn undefined<'c>(
    schemas: &Map<String, Value>,
    schema: &Value,
    chain: &'c Chain,
) -> Option<&'c (usize, String)> {
    let mut s = resolve(schemas, schema);
    for step in chain {
        if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            return None;
        }
        let props = s.get("properties").and_then(Value::as_object)?;
        match props.get(&step.1) {
            Some(next) => s = resolve(schemas, next),
            None => return Some(step),
        }
    }
    None
}

/// cel-go's issue text for an undefined field at char offset `dot` of `expr`.
fn issue(expr: &str, dot: usize, field: &str) -> String {
    let before: String = expr.chars().take(dot).collect();
    let line_no = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count());
    let line = expr.lines().nth(line_no - 1).unwrap_or("");
    format!(
        "ERROR: <input>:{line_no}:{}: undefined field '{field}'\n | {line}\n | {}^",
        col + 1,
        ".".repeat(col)
    )
}

/// A kind's schema and the name of its schema set.
struct KindSchema {
    gvk: String,
    schemas: Arc<Map<String, Value>>,
    root: Value,
}

/// The OpenAPI v3 schema of `group`/`version`/`kind`, from the served document.
fn kind_schema(
    snap: &Snapshot,
    custom: &CustomSchemas,
    group: &str,
    version: &str,
    kind: &str,
) -> Option<KindSchema> {
    let path = if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    };
    let doc = crate::openapi::group_version(snap, custom, &path)?;
    let mut body: Value = serde_json::from_slice(&doc.body).ok()?;
    let Value::Object(schemas) = body.pointer_mut("/components/schemas")?.take() else {
        return None;
    };
    let name = schemas.iter().find_map(|(name, s)| {
        s.get("x-kubernetes-group-version-kind")?
            .as_array()?
            .iter()
            .any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
            .then(|| name.clone())
    })?;
    Some(KindSchema {
        gvk: format!("{group}/{version}, Kind={kind}"),
        root: json!({"$ref": format!("#/components/schemas/{name}")}),
        schemas: Arc::new(schemas),
    })
}

/// Upstream `typesToCheck`: the kinds the resource rules name, sorted, at most 10.
fn kinds_to_check(snap: &Snapshot, spec: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let rules = spec
        .pointer("/matchConstraints/resourceRules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let list = |r: &Value, k: &str| -> Vec<String> {
        let mut v: Vec<String> = r
            .get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    for rule in &rules {
        let (groups, versions) = (list(rule, "apiGroups"), list(rule, "apiVersions"));
        if groups.iter().chain(&versions).any(|s| s.contains('*')) {
            continue;
        }
        let resources: Vec<String> = list(rule, "resources")
            .into_iter()
            .filter(|r| !r.contains('*') && !r.contains('/'))
            .collect();
        for g in &groups {
            for v in &versions {
                for r in &resources {
                    if let Some(res) = snap.get(g, v, r) {
                        let gvk = (g.clone(), v.clone(), res.kind.clone());
                        if !out.contains(&gvk) {
                            out.push(gvk);
                        }
                        if out.len() == MAX_TYPES {
                            out.sort();
                            return out;
                        }
                    }
                }
            }
        }
    }
    out.sort();
    out
}

/// The warnings of one expression over the kinds (upstream `TypeCheckingResults.String()`).
fn check_expression(
    expr: &str,
    kinds: &[KindSchema],
    params: Option<&KindSchema>,
) -> Option<String> {
    let mut results = Vec::new();
    for kind in kinds {
        let mut issues = Vec::new();
        for root in ["object", "oldObject"] {
            for chain in chains(expr, root) {
                if let Some((dot, field)) = undefined(&kind.schemas, &kind.root, &chain) {
                    issues.push((*dot, issue(expr, *dot, field)));
                }
            }
        }
        if let Some(p) = params {
            for chain in chains(expr, "params") {
                if let Some((dot, field)) = undefined(&p.schemas, &p.root, &chain) {
                    issues.push((*dot, issue(expr, *dot, field)));
                }
            }
        }
        issues.sort_by_key(|(dot, _)| *dot);
        if !issues.is_empty() {
            let text: Vec<String> = issues.into_iter().map(|(_, t)| t).collect();
            results.push(format!("{}: {}\n", kind.gvk, text.join("\n")));
        }
    }
    (!results.is_empty()).then(|| results.join("\n"))
}

/// Upstream `TypeChecker.Check`: the `expressionWarnings` of a policy.
pub fn check(snap: &Snapshot, custom: &CustomSchemas, policy: &Value) -> Vec<Value> {
    let spec = &policy["spec"];
    let kinds: Vec<KindSchema> = kinds_to_check(snap, spec)
        .iter()
        .filter_map(|(g, v, k)| kind_schema(snap, custom, g, v, k))
        .collect();
    if kinds.is_empty() {
        return Vec::new();
    }
    let params = spec.get("paramKind").and_then(|pk| {
        let api_version = pk.get("apiVersion")?.as_str()?;
        let (g, v) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        kind_schema(snap, custom, g, v, pk.get("kind")?.as_str()?)
    });
    let mut warnings = Vec::new();
    for (i, v) in spec
        .get("validations")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        for field in ["expression", "messageExpression"] {
            let Some(text) = v
                .get(field)
                .and_then(Value::as_str)
                .filter(|t| !t.is_empty())
            else {
                continue;
            };
            if let Some(w) = check_expression(text, &kinds, params.as_ref()) {
                warnings.push(
                    json!({"fieldRef": format!("spec.validations[{i}].{field}"), "warning": w}),
                );
            }
        }
    }
    warnings
}

const POLICIES: &str = "validatingadmissionpolicies";

/// Writes `status.observedGeneration` and `status.typeChecking` of the policies whose generation
/// is ahead of their status.
async fn reconcile(api: &ApiServer) {
    let crds = api
        .caches
        .get("customresourcedefinitions")
        .map(|c| c.list("/customresourcedefinitions/", &Default::default()))
        .unwrap_or_default();
    let custom = CustomSchemas::from_crds(crds.iter().map(|o| &o.json[..]));
    let snap = api.registry.snapshot();
    for policy in crate::internal::cached_objects(api, POLICIES) {
        let generation = policy
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let observed = policy
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if generation <= observed {
            continue;
        }
        let warnings = check(&snap, &custom, &policy);
        let mut updated = policy.clone();
        let status = updated
            .as_object_mut()
            .map(|o| o.entry("status").or_insert_with(|| json!({})));
        if let Some(Value::Object(status)) = status {
            status.insert("observedGeneration".into(), generation.into());
            let type_checking = if warnings.is_empty() {
                json!({})
            } else {
                json!({"expressionWarnings": warnings})
            };
            status.insert("typeChecking".into(), type_checking);
        }
        let key = format!("/{POLICIES}/{}", crate::objects::name(&policy));
        crate::internal::replace_if_unchanged(api, &key, &updated).await;
    }
}

/// The status controller: reconciles on every change of the policies.
pub async fn run(api: Arc<ApiServer>) {
    loop {
        let start = api.caches.revision();
        let Some(sub) = api
            .caches
            .ensure(POLICIES, "admissionregistration.k8s.io", POLICIES)
            .subscribe(Default::default(), WatchStart::After(start), start)
            .ok()
        else {
            return;
        };
        let mut events = sub.live;
        reconcile(&api).await;
        while events.recv().await.is_some() {
            while events.try_recv().is_ok() {}
            reconcile(&api).await;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain_names(expr: &str, root: &str) -> Vec<Vec<String>> {
        chains(expr, root)
            .into_iter()
            .map(|c| c.into_iter().map(|(_, f)| f).collect())
            .collect()
    }

    #[test]
    fn chains_follow_field_selections_and_stop_at_calls() {
        assert_eq!(
            chain_names("has(object.spec.x) && object.spec.containers.all(c, c.image != '') && 'object.a' != ''", "object"),
            [vec!["spec", "x"], vec!["spec", "containers"]]
        );
        assert_eq!(
            chain_names("oldObject.metadata.?labels", "oldObject"),
            [vec!["metadata", "labels"]]
        );
        assert!(chain_names("oldObject.spec", "object").is_empty());
    }

    #[test]
    fn undefined_fields_are_reported_as_cel_go_does() {
        let snap = apimachinery::resources::Registry::with_builtin().snapshot();
        let policy = json!({"spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["deployments", "deployments/scale"]}]},
        "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
        "validations": [
            {"expression": "object.replicas > 1"},
            {"expression": "object.spec.replicas <= int(params.data.max) && object.metadata.labels.app == 'x'",
             "messageExpression": "'too many: ' + string(params.spec)"}
        ]}});
        let warnings = check(&snap, &CustomSchemas::default(), &policy);
        assert_eq!(
            warnings,
            [
                json!({"fieldRef": "spec.validations[0].expression", "warning":
                    "apps/v1, Kind=Deployment: ERROR: <input>:1:7: undefined field 'replicas'\n | object.replicas > 1\n | ......^\n"}),
                json!({"fieldRef": "spec.validations[1].messageExpression", "warning":
                    "apps/v1, Kind=Deployment: ERROR: <input>:1:29: undefined field 'spec'\n | 'too many: ' + string(params.spec)\n | ............................^\n"}),
            ]
        );
    }

    #[test]
    fn wildcards_are_not_checked() {
        let snap = apimachinery::resources::Registry::with_builtin().snapshot();
        let policy = json!({"spec": {"matchConstraints": {"resourceRules": [{"apiGroups": ["*"],
            "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}]},
            "validations": [{"expression": "object.nope == 1"}]}});
        assert!(check(&snap, &CustomSchemas::default(), &policy).is_empty());
    }
}
