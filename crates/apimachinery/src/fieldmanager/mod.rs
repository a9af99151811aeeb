//! Field management and server-side apply (upstream `k8s.io/apiserver/pkg/endpoints/handlers/
//! fieldmanager` over `sigs.k8s.io/structured-merge-diff`): `metadata.managedFields` records, per field
//! manager and operation, the fields it set; creates, updates and patches (operation `Update`) take
//! ownership of what they change; an apply (operation `Apply`) merges a configuration into the object,
//! fails with a 409 naming the managers whose fields it would change (unless forced), and removes the
//! fields its manager applied before and no longer applies.

pub mod fieldset;
mod walk;

use serde_json::{json, Map, Value};

use crate::patch::schema::{object_schema, schema_for, PatchSchema};
use crate::status::{ApiError, Cause, Details};
use fieldset::FieldSet;

/// Fields the server sets, which no manager owns (upstream's strip-meta manager).
const SERVER_FIELDS: &[&[&str]] = &[
    &["f:apiVersion"],
    &["f:kind"],
    &["f:metadata", "f:name"],
    &["f:metadata", "f:namespace"],
    &["f:metadata", "f:creationTimestamp"],
    &["f:metadata", "f:selfLink"],
    &["f:metadata", "f:uid"],
    &["f:metadata", "f:generation"],
    &["f:metadata", "f:managedFields"],
    &["f:metadata", "f:resourceVersion"],
    &["f:metadata", "f:deletionTimestamp"],
    &["f:metadata", "f:deletionGracePeriodSeconds"],
];

/// What a write is: which kind, through which subresource, on behalf of whom.
pub struct Operation<'a> {
    pub group: &'a str,
    pub kind: &'a str,
    /// The request's group/version (`apps/v1`).
    pub api_version: String,
    pub manager: &'a str,
    /// `Some("status")` for writes through the status subresource.
    pub subresource: Option<&'a str>,
    /// Whether the resource has a status subresource (its main resource then does not manage status).
    pub has_status: bool,
    /// The time to record, RFC 3339.
    pub now: &'a str,
}

impl Operation<'_> {
    fn schema(&self) -> PatchSchema {
        let s = schema_for(self.group, self.kind);
        if s.type_name().is_some() {
            s
        } else {
            object_schema()
        }
    }

    /// The fields of a value this operation can own.
    fn owned(&self, mut set: FieldSet) -> FieldSet {
        for path in SERVER_FIELDS {
            set.remove(path);
        }
        match self.subresource {
            Some("status") => {
                set.children.retain(|k, _| k == "f:status");
            }
            None if self.has_status => set.remove(&["f:status"]),
            _ => {}
        }
        set
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: String,
    fields: FieldSet,
}

impl Entry {
    fn same_owner(
        &self,
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: &str,
    ) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            // Update entries are per API version; an applier's entry follows its latest apply.
            && (operation == "Apply" || self.api_version == api_version)
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        m.insert("time".into(), json!(self.time));
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), self.fields.to_json());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(m)
    }
}

fn read_entries(obj: &Value) -> Result<Vec<Entry>, String> {
    let Some(list) = obj.pointer("/metadata/managedFields") else {
        return Ok(Vec::new());
    };
    let Value::Array(items) = list else {
        return Err("metadata.managedFields must be a list".into());
    };
    items
        .iter()
        .filter(|e| e.as_object().is_some_and(|m| !m.is_empty()))
        .map(|e| {
            let s = |k: &str| e.get(k).and_then(Value::as_str).unwrap_or("").to_string();
            if s("fieldsType") != "FieldsV1" {
                return Err(format!("unsupported fieldsType {:?}", s("fieldsType")));
            }
            Ok(Entry {
                manager: s("manager"),
                operation: s("operation"),
                api_version: s("apiVersion"),
                time: s("time"),
                subresource: s("subresource"),
                fields: FieldSet::from_json(e.get("fieldsV1").unwrap_or(&json!({})))?,
            })
        })
        .collect()
}

fn write_entries(obj: &mut Value, mut entries: Vec<Entry>) {
    entries.retain(|e| !e.fields.is_empty());
    // Upstream's order: Apply before Update, then oldest first, then by manager.
    entries.sort_by(|a, b| {
        (
            &a.operation,
            &a.time,
            &a.manager,
            &a.api_version,
            &a.subresource,
        )
            .cmp(&(
                &b.operation,
                &b.time,
                &b.manager,
                &b.api_version,
                &b.subresource,
            ))
    });
    let list = Value::Array(entries.iter().map(Entry::to_json).collect());
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        if entries.is_empty() {
            meta.remove("managedFields");
        } else {
            meta.insert("managedFields".into(), list);
        }
    }
}

/// Records a create: the manager owns every field it set.
pub fn on_create(op: &Operation<'_>, obj: &mut Value) {
    let fields = op.owned(walk::set_of(obj, op.schema()));
    let entry = Entry {
        manager: op.manager.into(),
        operation: "Update".into(),
        api_version: op.api_version.clone(),
        time: op.now.into(),
        subresource: op.subresource.unwrap_or("").into(),
        fields,
    };
    write_entries(obj, vec![entry]);
}

/// Records an update of `old` into `new`: the manager takes the fields it changed from whoever owned
/// them, and removed fields leave every set. A client may replace managedFields by sending its own (an
/// empty list clears them); otherwise `old`'s are carried over.
pub fn on_update(op: &Operation<'_>, old: &Value, new: &mut Value) -> Result<(), ApiError> {
    let sent = new.pointer("/metadata/managedFields").cloned();
    let base = match &sent {
        Some(list) if Some(list) != old.pointer("/metadata/managedFields") => {
            let with_sent = json!({"metadata": {"managedFields": list}});
            read_entries(&with_sent)
                .map_err(|e| ApiError::bad_request(format!("invalid managedFields: {e}")))?
        }
        _ => read_entries(old).unwrap_or_default(),
    };
    let schema = op.schema();
    let changed = op.owned(walk::changed(old, new, schema));
    let removed = op.owned(walk::set_of(old, schema).difference(&walk::set_of(new, schema)));
    if changed.is_empty()
        && removed.is_empty()
        && sent.as_ref() == old.pointer("/metadata/managedFields")
    {
        write_entries(new, base);
        return Ok(());
    }
    let subresource = op.subresource.unwrap_or("");
    let mut mine = FieldSet::default();
    let mut entries = Vec::new();
    for mut e in base {
        if e.same_owner(op.manager, "Update", &op.api_version, subresource) {
            mine = e.fields;
            continue;
        }
        e.fields = e.fields.difference(&changed).difference(&removed);
        entries.push(e);
    }
    if !changed.is_empty() || !mine.is_empty() {
        entries.push(Entry {
            manager: op.manager.into(),
            operation: "Update".into(),
            api_version: op.api_version.clone(),
            time: op.now.into(),
            subresource: subresource.into(),
            fields: mine.union(&changed).difference(&removed),
        });
    }
    write_entries(new, entries);
    Ok(())
}

/// Server-side apply of `config` to `live` (`None`: the object does not exist yet). Returns the new
/// object with its managedFields, or a 409 listing the conflicts when not `force`d.
pub fn apply(
    op: &Operation<'_>,
    live: Option<&Value>,
    config: &Value,
    force: bool,
) -> Result<Value, ApiError> {
    let schema = op.schema();
    let empty = json!({});
    let live = live.unwrap_or(&empty);
    let applied = op.owned(walk::set_of(config, schema));
    let subresource = op.subresource.unwrap_or("");
    let mut previous = FieldSet::default();
    let mut others = Vec::new();
    for e in read_entries(live).unwrap_or_default() {
        if e.same_owner(op.manager, "Apply", &op.api_version, subresource) {
            previous = e.fields;
        } else {
            others.push(e);
        }
    }
    // A field another manager owns conflicts when the configuration would change its value.
    let mut conflicts: Vec<(String, String, Vec<String>)> = Vec::new();
    let mut taken = FieldSet::default();
    for e in &others {
        for path in applied.intersection(&e.fields).members() {
            // A list or set item as such (`.`) is about its existence, which applying never takes away.
            if path
                .last()
                .is_some_and(|p| p.starts_with("k:") || p.starts_with("v:"))
            {
                continue;
            }
            let live_value = walk::value_at(live, &path, schema);
            if live_value.is_some() && live_value != walk::value_at(config, &path, schema) {
                conflicts.push((e.manager.clone(), e.api_version.clone(), path.clone()));
                let mut node = &mut taken;
                for element in &path {
                    node = node.child(element.clone());
                }
                node.member = true;
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflict_error(&conflicts));
    }
    let mut result = walk::merge(live, config, schema);
    let mut entries: Vec<Entry> = others
        .into_iter()
        .map(|mut e| {
            e.fields = e.fields.difference(&taken);
            e
        })
        .collect();
    let owned_by_others = entries
        .iter()
        .fold(FieldSet::default(), |acc, e| acc.union(&e.fields));
    let dropped = previous.difference(&applied).difference(&owned_by_others);
    walk::remove(&mut result, &dropped, &owned_by_others, schema);
    entries.push(Entry {
        manager: op.manager.into(),
        operation: "Apply".into(),
        api_version: op.api_version.clone(),
        time: op.now.into(),
        subresource: subresource.into(),
        fields: applied,
    });
    write_entries(&mut result, entries);
    Ok(result)
}

/// Upstream's conflict error: `Apply failed with N conflict(s): conflict(s) with "<manager>" using
/// <apiVersion>: <path>`, one cause per field.
fn conflict_error(conflicts: &[(String, String, Vec<String>)]) -> ApiError {
    let n = conflicts.len();
    let mut by_manager: Vec<(&str, &str, Vec<String>)> = Vec::new();
    for (manager, api_version, path) in conflicts {
        let p = fieldset::path_string(path);
        match by_manager
            .iter_mut()
            .find(|(m, v, _)| m == manager && v == api_version)
        {
            Some((_, _, paths)) => paths.push(p),
            None => by_manager.push((manager, api_version, vec![p])),
        }
    }
    let summary: Vec<String> = by_manager
        .iter()
        .map(|(manager, api_version, paths)| {
            if paths.len() == 1 {
                format!(
                    "conflict with {manager:?} using {api_version}: {}",
                    paths[0]
                )
            } else {
                format!(
                    "conflicts with {manager:?} using {api_version}:\n{}",
                    paths
                        .iter()
                        .map(|p| format!("- {p}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                )
            }
        })
        .collect();
    let plural = if n == 1 { "conflict" } else { "conflicts" };
    let causes = conflicts
        .iter()
        .map(|(manager, api_version, path)| Cause {
            reason: "FieldManagerConflict".into(),
            message: format!("conflict with {manager:?} using {api_version}"),
            field: fieldset::path_string(path),
        })
        .collect();
    ApiError {
        code: 409,
        reason: "Conflict",
        message: format!("Apply failed with {n} {plural}: {}", summary.join("\n")),
        details: Some(Box::new(Details {
            causes,
            ..Default::default()
        })),
    }
}

/// An applied configuration merged into an object without recording ownership (what a
/// MutatingAdmissionPolicy's `ApplyConfiguration` does): maps merge, associative lists merge by
/// key, sets are united, other lists are replaced.
pub fn merge_without_ownership(group: &str, kind: &str, live: &Value, config: &Value) -> Value {
    let s = schema_for(group, kind);
    let schema = if s.type_name().is_some() {
        s
    } else {
        object_schema()
    };
    walk::merge(live, config, schema)
}

/// The field manager of a request: the `fieldManager` parameter, else the user agent's product name
/// (upstream `prefixFromUserAgent`).
pub fn manager_name(
    field_manager: Option<&str>,
    user_agent: Option<&str>,
) -> Result<String, ApiError> {
    if let Some(m) = field_manager.filter(|m| !m.is_empty()) {
        if m.len() > 128 || m.chars().any(|c| c.is_control()) {
            return Err(ApiError::bad_request(format!(
                "fieldManager: Invalid value: {m:?}: must be at most 128 printable characters"
            )));
        }
        return Ok(m.to_string());
    }
    let ua = user_agent.unwrap_or("");
    let name: String = ua
        .split('/')
        .next()
        .unwrap_or("")
        .chars()
        .take(128)
        .collect();
    Ok(name)
}

#[cfg(test)]
mod tests;
