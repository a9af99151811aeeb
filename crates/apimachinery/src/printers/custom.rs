//! `additionalPrinterColumns` of custom resources (upstream `registry/customresource/tableconvertor`):
//! a `Name` column, then one column per definition whose cells are the first result of its JSONPath,
//! typed as the column says (`integer`, `number`, `boolean`, `string`, `date` shown as an age).
//!
//! The JSONPath subset is what CRDs use: `.field`, `['field']`, `[n]`, `[*]` and filters
//! `[?(@.a.b=="x")]` / `!=` (client-go's `jsonpath` has more: ranges, unions, recursive descent).

use std::time::SystemTime;

use serde_json::{json, Value};

use super::{time, util, NAME_DESCRIPTION};
use crate::schema::go_v;

/// One `additionalPrinterColumns` entry.
#[derive(Clone, Debug, PartialEq)]
pub struct CustomColumn {
    pub name: String,
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    pub json_path: String,
}

impl CustomColumn {
    /// From the CRD's JSON form.
    pub fn parse(v: &Value) -> CustomColumn {
        let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
        let json_path = s("jsonPath");
        let description = match s("description") {
            d if d.is_empty() => {
                format!("Custom resource definition column (in JSONPath format): {json_path}")
            }
            d => d,
        };
        CustomColumn {
            name: s("name"),
            type_: s("type"),
            format: s("format"),
            description,
            priority: v["priority"].as_i64().unwrap_or(0),
            json_path,
        }
    }

    /// The column served when a version declares none: `Age` of `metadata.creationTimestamp`.
    pub fn age() -> CustomColumn {
        CustomColumn {
            name: "Age".into(),
            type_: "date".into(),
            format: String::new(),
            description: super::CREATION_TIMESTAMP_DESCRIPTION.into(),
            priority: 0,
            json_path: ".metadata.creationTimestamp".into(),
        }
    }
}

/// The Table's `columnDefinitions`: `Name`, then the custom columns.
pub fn column_definitions(columns: &[CustomColumn]) -> Vec<Value> {
    let mut out = vec![json!({
        "name": "Name", "type": "string", "format": "name", "description": NAME_DESCRIPTION, "priority": 0,
    })];
    out.extend(columns.iter().map(|c| {
        json!({"name": c.name, "type": c.type_, "format": c.format, "description": c.description, "priority": c.priority})
    }));
    out
}

/// One row's cells for `columns`.
pub fn cells(columns: &[CustomColumn], obj: &Value, now: SystemTime) -> Vec<Value> {
    let mut out = vec![json!(util::name(obj))];
    for c in columns {
        let found = evaluate(&c.json_path, obj);
        let cell = match found.first() {
            None | Some(Value::Null) => Value::Null,
            Some(v) => cell(&c.type_, v, now),
        };
        out.push(cell);
    }
    out
}

fn cell(type_: &str, v: &Value, now: SystemTime) -> Value {
    match type_ {
        "integer" => v
            .as_i64()
            .or_else(|| v.as_f64().map(|f| f as i64))
            .map(Value::from)
            .unwrap_or(Value::Null),
        "number" => v.as_f64().map(Value::from).unwrap_or(Value::Null),
        "boolean" => v.as_bool().map(Value::from).unwrap_or(Value::Null),
        "date" => match v.as_str() {
            Some(s) => Value::from(time::date_cell(s, now)),
            None => Value::Null,
        },
        // `string` columns print whatever the path finds, as client-go's jsonpath prints it.
        _ => Value::from(go_v(v)),
    }
}

#[derive(Debug, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    All,
    Filter(Vec<String>, bool, Value),
}

fn parse(path: &str) -> Option<Vec<Step>> {
    let p = path.trim();
    let p = p
        .strip_prefix('{')
        .and_then(|p| p.strip_suffix('}'))
        .unwrap_or(p);
    let p = p.strip_prefix('$').unwrap_or(p);
    let mut steps = Vec::new();
    let chars: Vec<char> = p.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '.' => {
                let start = i + 1;
                let mut j = start;
                while j < chars.len() && chars[j] != '.' && chars[j] != '[' {
                    j += 1;
                }
                let name: String = chars[start..j].iter().collect();
                if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
                i = j;
            }
            '[' => {
                let close = chars[i..].iter().position(|c| *c == ']')? + i;
                let inner: String = chars[i + 1..close].iter().collect();
                let inner = inner.trim();
                if inner == "*" {
                    steps.push(Step::All);
                } else if let Some(filter) =
                    inner.strip_prefix("?(").and_then(|f| f.strip_suffix(')'))
                {
                    let (lhs, rhs, eq) = match filter.split_once("!=") {
                        Some((l, r)) => (l, r, false),
                        None => {
                            let (l, r) = filter.split_once("==")?;
                            (l, r, true)
                        }
                    };
                    let field: Vec<String> = lhs
                        .trim()
                        .strip_prefix('@')?
                        .split('.')
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .collect();
                    let rhs = rhs.trim();
                    let value =
                        if let Some(s) = rhs.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
                            Value::from(s)
                        } else if let Some(s) =
                            rhs.strip_prefix('\'').and_then(|s| s.strip_suffix('\''))
                        {
                            Value::from(s)
                        } else {
                            serde_json::from_str(rhs).ok()?
                        };
                    steps.push(Step::Filter(field, eq, value));
                } else if let Some(q) = inner
                    .strip_prefix('\'')
                    .and_then(|q| q.strip_suffix('\''))
                    .or_else(|| inner.strip_prefix('"').and_then(|q| q.strip_suffix('"')))
                {
                    steps.push(Step::Field(q.to_string()));
                } else {
                    steps.push(Step::Index(inner.parse().ok()?));
                }
                i = close + 1;
            }
            c if c.is_whitespace() => i += 1,
            _ => return None,
        }
    }
    Some(steps)
}

/// The values `path` finds in `obj` (missing keys find nothing, as with `AllowMissingKeys`).
pub fn evaluate(path: &str, obj: &Value) -> Vec<Value> {
    let Some(steps) = parse(path) else {
        return Vec::new();
    };
    let mut current = vec![obj.clone()];
    for step in &steps {
        let mut next = Vec::new();
        for v in current {
            match (step, &v) {
                (Step::Field(f), Value::Object(m)) => {
                    if let Some(x) = m.get(f) {
                        next.push(x.clone());
                    }
                }
                (Step::Index(i), Value::Array(a)) => {
                    let idx = if *i < 0 { a.len() as i64 + i } else { *i };
                    if let Some(x) = usize::try_from(idx).ok().and_then(|i| a.get(i)) {
                        next.push(x.clone());
                    }
                }
                (Step::All, Value::Array(a)) => next.extend(a.iter().cloned()),
                (Step::All, Value::Object(m)) => next.extend(m.values().cloned()),
                (Step::Filter(field, eq, want), Value::Array(a)) => {
                    for item in a {
                        let mut cur = Some(item);
                        for f in field {
                            cur = cur.and_then(|c| c.get(f));
                        }
                        let matches = cur.is_some_and(|c| c == want);
                        if cur.is_some() && matches == *eq {
                            next.push(item.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        current = next;
    }
    current
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_paths_and_cells() {
        let obj = json!({"metadata": {"name": "w", "creationTimestamp": "2024-01-01T00:00:00Z"},
            "spec": {"replicas": 3, "image": "nginx", "ratio": 1.5, "on": true, "tags": ["a", "b"]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}]}});
        let cases = [
            (".spec.replicas", json!([3])),
            ("{.spec.image}", json!(["nginx"])),
            (".spec.tags[1]", json!(["b"])),
            (".spec.tags[*]", json!(["a", "b"])),
            (
                ".status.conditions[?(@.type==\"Ready\")].status",
                json!(["True"]),
            ),
            (
                ".status.conditions[?(@.type!=\"Ready\")].type",
                json!(["Synced"]),
            ),
            (".spec['image']", json!(["nginx"])),
            (".spec.missing", json!([])),
        ];
        for (path, want) in cases {
            assert_eq!(Value::Array(evaluate(path, &obj)), want, "{path}");
        }
        let col = |name: &str, t: &str, p: &str| {
            CustomColumn::parse(&json!({"name": name, "type": t, "jsonPath": p}))
        };
        let cols = [
            col("Replicas", "integer", ".spec.replicas"),
            col("Ratio", "number", ".spec.ratio"),
            col("On", "boolean", ".spec.on"),
            col("Tags", "string", ".spec.tags"),
            col(
                "Ready",
                "string",
                ".status.conditions[?(@.type==\"Ready\")].status",
            ),
            col("Missing", "string", ".spec.nope"),
            col("Wrong", "integer", ".spec.image"),
        ];
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_704_067_200 + 300);
        assert_eq!(
            cells(&cols, &obj, now),
            vec![
                json!("w"),
                json!(3),
                json!(1.5),
                json!(true),
                json!("[a b]"),
                json!("True"),
                Value::Null,
                Value::Null
            ]
        );
        let age = cells(&[CustomColumn::age()], &obj, now);
        assert_eq!(age, vec![json!("w"), json!("5m")]);
        let defs = column_definitions(&cols[..1]);
        assert_eq!(defs[0]["format"], "name");
        assert_eq!(
            defs[1]["description"],
            "Custom resource definition column (in JSONPath format): .spec.replicas"
        );
    }
}
