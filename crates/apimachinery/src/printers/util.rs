//! Helpers shared by the printers: tolerant field access on served JSON (a missing field reads as Go's
//! zero value, as a decoded upstream object would hold it), and the formatting helpers upstream's
//! `pkg/printers/internalversion` borrows: `labels.FormatLabels`, `metav1.FormatLabelSelector`,
//! `layoutContainerCells`, `printBoolPtr`.

use serde_json::{Map, Value};

/// The value at `path`, if every step is present.
pub(crate) fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, key| v.get(key))
}

/// The string at `path`, if present and a string.
pub(crate) fn opt_str<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path)?.as_str()
}

/// The string at `path`, or `""`.
pub(crate) fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    opt_str(v, path).unwrap_or("")
}

/// The integer at `path`, if present and an integer.
pub(crate) fn opt_int(v: &Value, path: &[&str]) -> Option<i64> {
    let n = get(v, path)?;
    n.as_i64()
        .or_else(|| n.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
}

/// The integer at `path`, or 0.
pub(crate) fn int_at(v: &Value, path: &[&str]) -> i64 {
    opt_int(v, path).unwrap_or(0)
}

/// The boolean at `path`, if present and a boolean.
pub(crate) fn opt_bool(v: &Value, path: &[&str]) -> Option<bool> {
    get(v, path)?.as_bool()
}

/// The boolean at `path`, or false.
pub(crate) fn bool_at(v: &Value, path: &[&str]) -> bool {
    opt_bool(v, path).unwrap_or(false)
}

/// The array at `path`, or an empty slice.
pub(crate) fn arr_at<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    get(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The object at `path`, if present and an object.
pub(crate) fn obj_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    get(v, path)?.as_object()
}

/// The number of entries of the object (map) or array at `path` (Go's `len` of a map or slice).
pub(crate) fn len_at(v: &Value, path: &[&str]) -> i64 {
    let n = match get(v, path) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    };
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `metadata.name`.
pub(crate) fn name(v: &Value) -> &str {
    str_at(v, &["metadata", "name"])
}

/// Whether `metadata.deletionTimestamp` is set.
pub(crate) fn deleting(v: &Value) -> bool {
    get(v, &["metadata", "deletionTimestamp"]).is_some_and(|t| !t.is_null())
}

/// The annotation `key`, if present.
pub(crate) fn annotation<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    obj_at(v, &["metadata", "annotations"])?.get(key)?.as_str()
}

/// An `IntOrString` as Go's `intstr.String()`, or `None` when unset.
pub(crate) fn int_or_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// A quantity as served (already canonical when the server wrote it); `0` when unset, as the zero
/// `resource.Quantity` prints.
pub(crate) fn quantity(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "0".to_string(),
    }
}

/// Go's `fmt` of a string-keyed map value (`%v` of a string, number or bool).
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// `labels.FormatLabels`: `k=v` pairs sorted by key, joined by `,`; `<none>` when empty.
pub(crate) fn format_labels(m: Option<&Map<String, Value>>) -> String {
    let mut pairs: Vec<(&String, String)> = m
        .map(|m| m.iter().map(|(k, v)| (k, plain(v))).collect())
        .unwrap_or_default();
    pairs.sort_by(|a, b| a.0.cmp(b.0));
    let s = pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    if s.is_empty() {
        "<none>".to_string()
    } else {
        s
    }
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: requirements sorted by key, `k=v`, `k in (a,b)`,
/// `k notin (a,b)`, `k`, `!k`. A missing (nil) or empty selector prints `""`. `Err` for an operator
/// upstream rejects or a value count that does not fit the operator.
pub(crate) fn label_selector_string(sel: Option<&Value>) -> Result<String, ()> {
    let Some(sel) = sel.filter(|s| !s.is_null()) else {
        return Ok(String::new());
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push((k.clone(), format!("{k}={}", plain(v))));
        }
    }
    for expr in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
    {
        let key = str_at(expr, &["key"]);
        let mut values: Vec<String> = arr_at(expr, &["values"]).iter().map(plain).collect();
        values.sort();
        let op = str_at(expr, &["operator"]);
        let text = match op {
            "In" | "NotIn" => {
                if values.is_empty() {
                    return Err(());
                }
                let word = if op == "In" { "in" } else { "notin" };
                format!("{key} {word} ({})", values.join(","))
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    return Err(());
                }
                if op == "Exists" {
                    key.to_string()
                } else {
                    format!("!{key}")
                }
            }
            _ => return Err(()),
        };
        reqs.push((key.to_string(), text));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs
        .into_iter()
        .map(|(_, t)| t)
        .collect::<Vec<_>>()
        .join(","))
}

/// `metav1.FormatLabelSelector`: the selector string, `<none>` when it selects by nothing, `<error>`
/// when it is invalid.
pub(crate) fn format_label_selector(sel: Option<&Value>) -> String {
    match label_selector_string(sel) {
        Ok(s) if s.is_empty() => "<none>".to_string(),
        Ok(s) => s,
        Err(()) => "<error>".to_string(),
    }
}

/// `layoutContainerCells`: container names and images, each joined by `,`.
pub(crate) fn layout_containers(containers: &[Value]) -> (String, String) {
    let names: Vec<&str> = containers.iter().map(|c| str_at(c, &["name"])).collect();
    let images: Vec<&str> = containers.iter().map(|c| str_at(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// [`layout_containers`] of the pod template's containers (`spec.template.spec.containers`), as the
/// printers of workload controllers (deployments, replicasets, statefulsets, daemonsets, jobs) show them.
pub(crate) fn template_containers(obj: &Value) -> (String, String) {
    layout_containers(arr_at(obj, &["spec", "template", "spec", "containers"]))
}

/// `printBoolPtr`: `True`, `False`, or `<unset>`.
pub(crate) fn bool_ptr(v: Option<bool>) -> &'static str {
    match v {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    }
}

/// `s`, or `default` when `s` is empty.
pub(crate) fn or<'a>(s: &'a str, default: &'a str) -> &'a str {
    if s.is_empty() {
        default
    } else {
        s
    }
}

/// The `status` of the first condition of `type_` in the array at `path` (upstream loops stop at the
/// first match).
pub(crate) fn condition_status<'a>(v: &'a Value, path: &[&str], type_: &str) -> Option<&'a str> {
    arr_at(v, path)
        .iter()
        .find(|c| str_at(c, &["type"]) == type_)
        .map(|c| str_at(c, &["status"]))
}

/// Items joined by `,`, the first `max` only, with `" + N more..."`: upstream's `listWithMoreString`
/// (`<unset>` when empty).
pub(crate) fn list_with_more(items: &[String], max: usize) -> String {
    if items.is_empty() {
        return "<unset>".to_string();
    }
    let shown = items
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    if items.len() > max {
        format!("{shown} + {} more...", items.len() - max)
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn labels_sorted_or_none() {
        let m = json!({"b": "2", "a": "1"});
        assert_eq!(format_labels(m.as_object()), "a=1,b=2");
        assert_eq!(format_labels(None), "<none>");
        assert_eq!(format_labels(json!({}).as_object()), "<none>");
    }

    #[test]
    fn selectors() {
        let sel = json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["front", "back"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"}
            ]
        });
        assert_eq!(
            format_label_selector(Some(&sel)),
            "app=web,!canary,env notin (prod),tier in (back,front),zone"
        );
        assert_eq!(format_label_selector(None), "<none>");
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(label_selector_string(None), Ok(String::new()));
        let bad = json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]});
        assert_eq!(format_label_selector(Some(&bad)), "<error>");
        let bad = json!({"matchExpressions": [{"key": "a", "operator": "In"}]});
        assert_eq!(format_label_selector(Some(&bad)), "<error>");
    }

    #[test]
    fn containers_and_lists() {
        let cs = json!([{"name": "a", "image": "nginx"}, {"name": "b"}]);
        let (n, i) = layout_containers(cs.as_array().map(Vec::as_slice).unwrap_or(&[]));
        assert_eq!((n.as_str(), i.as_str()), ("a,b", "nginx,"));
        let items: Vec<String> = ["1", "2", "3", "4", "5"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(list_with_more(&items, 3), "1,2,3 + 2 more...");
        assert_eq!(list_with_more(&items[..2], 3), "1,2");
        assert_eq!(list_with_more(&[], 3), "<unset>");
    }

    #[test]
    fn scalars_default_to_zero_values() {
        let v = json!({"a": {"n": 3, "s": "x", "b": true, "big": u64::MAX}});
        assert_eq!(int_at(&v, &["a", "n"]), 3);
        assert_eq!(int_at(&v, &["a", "missing"]), 0);
        assert_eq!(int_at(&v, &["a", "big"]), i64::MAX);
        assert_eq!(str_at(&v, &["a", "s", "deeper"]), "");
        assert!(bool_at(&v, &["a", "b"]));
        assert_eq!(int_or_string(Some(&json!("50%"))).as_deref(), Some("50%"));
        assert_eq!(int_or_string(Some(&json!(2))).as_deref(), Some("2"));
        assert_eq!(int_or_string(None), None);
        assert_eq!(quantity(None), "0");
    }
}
