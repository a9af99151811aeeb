//! Sets of field paths (upstream `sigs.k8s.io/structured-merge-diff/fieldpath.Set`) in the `FieldsV1`
//! form managedFields carry: a tree whose keys are path elements — `f:<field>`, `k:<key fields as
//! JSON>` (an item of a list keyed by merge keys), `v:<value as JSON>` (an item of a set) — and where
//! `{}` (a leaf) or a `"."` entry marks the node itself as a member.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    /// The node itself is in the set (a leaf field, or a list item that was set as a whole).
    pub member: bool,
    pub children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.is_empty()
    }

    pub fn child(&mut self, key: String) -> &mut FieldSet {
        self.children.entry(key).or_default()
    }

    /// The members of both.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.member |= other.member;
        for (k, v) in &other.children {
            let merged = match out.children.get(k) {
                Some(mine) => mine.union(v),
                None => v.clone(),
            };
            out.children.insert(k.clone(), merged);
        }
        out
    }

    /// The members of `self` that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && !other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            let rest = match other.children.get(k) {
                Some(theirs) => v.difference(theirs),
                None => v.clone(),
            };
            if !rest.is_empty() {
                out.children.insert(k.clone(), rest);
            }
        }
        out
    }

    /// The members in both.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (k, v) in &self.children {
            if let Some(theirs) = other.children.get(k) {
                let both = v.intersection(theirs);
                if !both.is_empty() {
                    out.children.insert(k.clone(), both);
                }
            }
        }
        out
    }

    /// Every member, as the list of path elements leading to it.
    pub fn members(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect(&mut Vec::new(), &mut out);
        out
    }

    fn collect(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member {
            out.push(prefix.clone());
        }
        for (k, v) in &self.children {
            prefix.push(k.clone());
            v.collect(prefix, out);
            prefix.pop();
        }
    }

    /// Removes the subtree at `key` path (used to strip server-managed fields).
    pub fn remove(&mut self, path: &[&str]) {
        match path {
            [] => {}
            [last] => {
                self.children.remove(*last);
            }
            [first, rest @ ..] => {
                if let Some(child) = self.children.get_mut(*first) {
                    child.remove(rest);
                    if child.is_empty() {
                        self.children.remove(*first);
                    }
                }
            }
        }
    }

    /// The `FieldsV1` JSON form.
    pub fn to_json(&self) -> Value {
        let mut map = Map::new();
        if self.member && !self.children.is_empty() {
            map.insert(".".into(), Value::Object(Map::new()));
        }
        for (k, v) in &self.children {
            map.insert(k.clone(), v.to_json());
        }
        Value::Object(map)
    }

    /// Reads the `FieldsV1` JSON form.
    pub fn from_json(value: &Value) -> Result<FieldSet, String> {
        let Value::Object(map) = value else {
            return Err("fieldsV1 must be an object".into());
        };
        let mut set = FieldSet {
            member: map.is_empty(),
            children: BTreeMap::new(),
        };
        for (k, v) in map {
            if k == "." {
                set.member = true;
                continue;
            }
            if !(k.starts_with("f:")
                || k.starts_with("k:")
                || k.starts_with("v:")
                || k.starts_with("i:"))
            {
                return Err(format!("unknown path element {k:?} in fieldsV1"));
            }
            set.children.insert(k.clone(), FieldSet::from_json(v)?);
        }
        Ok(set)
    }
}

/// The path element of an object field.
pub fn field(name: &str) -> String {
    format!("f:{name}")
}

/// The path element of a list item identified by its key fields (sorted, compact JSON).
pub fn key(fields: &[(&str, &Value)]) -> String {
    let mut sorted: Vec<&(&str, &Value)> = fields.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    let map: Map<String, Value> = sorted
        .into_iter()
        .map(|(k, v)| (k.to_string(), (*v).clone()))
        .collect();
    format!("k:{}", Value::Object(map))
}

/// The path element of a set item.
pub fn value(v: &Value) -> String {
    format!("v:{v}")
}

/// A path as upstream prints it in conflicts: `.spec.containers[name="nginx"].image`.
pub fn path_string(path: &[String]) -> String {
    let mut out = String::new();
    for element in path {
        if let Some(name) = element.strip_prefix("f:") {
            out.push('.');
            out.push_str(name);
        } else if let Some(fields) = element.strip_prefix("k:") {
            let parsed: Map<String, Value> = serde_json::from_str(fields).unwrap_or_default();
            let parts: Vec<String> = parsed.iter().map(|(k, v)| format!("{k}={v}")).collect();
            out.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = element.strip_prefix("v:") {
            out.push_str(&format!("[={v}]"));
        } else if let Some(i) = element.strip_prefix("i:") {
            out.push_str(&format!("[{i}]"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_v1_round_trips_and_set_algebra_works() {
        let raw = json!({
            "f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}
        });
        let set = FieldSet::from_json(&raw).unwrap();
        assert_eq!(set.to_json(), raw);
        assert_eq!(set.members().len(), 4);
        let other =
            FieldSet::from_json(&json!({"f:metadata": {"f:labels": {"f:app": {}}}})).unwrap();
        let rest = set.difference(&other);
        assert!(!rest.children.contains_key("f:metadata"));
        assert_eq!(set.intersection(&other), other);
        assert_eq!(rest.union(&other), set);
        assert!(FieldSet::from_json(&json!({"x:nope": {}})).is_err());
        let path = vec![
            "f:spec".to_string(),
            "f:containers".to_string(),
            key(&[("name", &json!("c"))]),
            "f:image".to_string(),
        ];
        assert_eq!(path_string(&path), ".spec.containers[name=\"c\"].image");
    }
}
