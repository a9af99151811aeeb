//! What the checks share (upstream `policy/helpers.go`, `policy/visitor.go`): reading a pod spec
//! in its JSON form with Go's nil semantics (an absent or `null` field is nil), visiting every
//! container, and upstream's ways of listing names in messages.

use serde_json::Value;

/// A field of an object, `None` when absent or `null` (Go's nil pointer).
pub(super) fn field<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|f| !f.is_null())
}

/// A nested field, `None` if any step is nil.
pub(super) fn path<'a>(v: &'a Value, keys: &[&str]) -> Option<&'a Value> {
    keys.iter().try_fold(v, |v, k| field(v, k))
}

pub(super) fn bool_at(v: &Value, keys: &[&str]) -> Option<bool> {
    path(v, keys).and_then(Value::as_bool)
}

/// A string field; nil reads as `""`, as Go's zero value.
pub(super) fn str_at<'a>(v: &'a Value, keys: &[&str]) -> &'a str {
    path(v, keys).and_then(Value::as_str).unwrap_or_default()
}

/// The elements of a list field (none when nil).
pub(super) fn list<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    field(v, key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

/// Every container of a pod spec: init containers, containers, then ephemeral containers (whose
/// common fields are a container's), as upstream's `visitContainers`.
pub(super) fn containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |key| list(spec, key))
}

pub(super) fn name(container: &Value) -> &str {
    str_at(container, &["name"])
}

/// A container's or the pod's `securityContext`, when set.
pub(super) fn security_context(v: &Value) -> Option<&Value> {
    field(v, "securityContext")
}

/// A pod annotation, when set.
pub(super) fn annotation<'a>(meta: &'a Value, key: &str) -> Option<&'a str> {
    path(meta, &["annotations", key]).and_then(Value::as_str)
}

/// Every `(key, value)` pod annotation.
pub(super) fn annotations(meta: &Value) -> impl Iterator<Item = (&str, &str)> {
    field(meta, "annotations")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
}

/// A Windows pod (`spec.os.name: windows`), which the 1.25 revisions of Linux-only checks admit.
pub(super) fn is_windows(spec: &Value) -> bool {
    str_at(spec, &["os", "name"]) == "windows"
}

/// A pod in a user namespace (`spec.hostUsers: false`), which the 1.35 revisions of the root and
/// /proc checks relax for (upstream `relaxPolicyForUserNamespacePod`).
pub(super) fn in_user_namespace(spec: &Value) -> bool {
    bool_at(spec, &["hostUsers"]) == Some(false)
}

/// `"a", "b"` (upstream `joinQuote`: quotes added, nothing escaped).
pub(super) fn join_quote<S: AsRef<str>>(items: &[S]) -> String {
    if items.is_empty() {
        return String::new();
    }
    let inner: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("\"{}\"", inner.join("\", \""))
}

pub(super) fn pluralize<'a>(singular: &'a str, plural: &'a str, count: usize) -> &'a str {
    if count == 1 {
        singular
    } else {
        plural
    }
}

/// `container "a"` or `containers "a", "b"`.
pub(super) fn containers_phrase<S: AsRef<str>>(names: &[S]) -> String {
    format!(
        "{} {}",
        pluralize("container", "containers", names.len()),
        join_quote(names)
    )
}

pub use crate::go_format::quote as go_quote;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nil_semantics_and_container_order() {
        let spec = json!({
            "containers": [{"name": "c"}],
            "initContainers": [{"name": "i", "securityContext": null}],
            "ephemeralContainers": [{"name": "e"}],
        });
        let names: Vec<&str> = containers(&spec).map(name).collect();
        assert_eq!(names, ["i", "c", "e"]);
        assert!(security_context(&spec["initContainers"][0]).is_none());
        assert_eq!(containers(&Value::Null).count(), 0);
        assert_eq!(str_at(&spec, &["os", "name"]), "");
    }

    #[test]
    fn quoting_as_go() {
        assert_eq!(join_quote(&["a", "b"]), r#""a", "b""#);
        assert_eq!(join_quote::<&str>(&[]), "");
        assert_eq!(go_quote("un\"conf\tined\u{1}é"), r#""un\"conf\tined\x01é""#);
        assert_eq!(containers_phrase(&["a"]), r#"container "a""#);
        assert_eq!(containers_phrase(&["a", "b"]), r#"containers "a", "b""#);
    }
}
