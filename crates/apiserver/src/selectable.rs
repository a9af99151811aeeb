//! Decoding only the parts of an object that selectors read (upstream's `GetAttrs` reads them off the
//! decoded Go object; the watch cache here keeps objects as JSON bytes, so it would otherwise decode
//! every event's whole object into a `Value` just to find its name, namespace, labels and a few
//! selectable fields).
//!
//! A [`Shape`] names the wanted paths; [`decode`] walks the JSON once, keeps the values at those paths
//! whole and skips everything else without allocating. The result is a `Value` with only the wanted
//! paths, on which [`crate::filter::Attrs::of`] gives exactly what it gives on the whole object.

use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

/// The paths to keep: a leaf keeps its whole value, an inner node only the named children.
#[derive(Debug, Default)]
pub struct Shape {
    keep: bool,
    children: Vec<(String, Shape)>,
}

impl Shape {
    /// The shape of a resource's selector attributes: name, namespace and labels, plus the resource's
    /// selectable fields (dotted paths).
    pub fn for_selectors(fields: &[&str]) -> Shape {
        let mut shape = Shape::default();
        for path in ["metadata.name", "metadata.namespace", "metadata.labels"]
            .into_iter()
            .chain(fields.iter().copied())
        {
            shape.add(path);
        }
        shape
    }

    fn add(&mut self, path: &str) {
        let mut node = self;
        for part in path.split('.') {
            let at = match node.children.iter().position(|(k, _)| k == part) {
                Some(at) => at,
                None => {
                    node.children.push((part.to_string(), Shape::default()));
                    node.children.len() - 1
                }
            };
            node = &mut node.children[at].1;
        }
        node.keep = true;
    }
}

/// The object in `json` reduced to `shape`'s paths. A wanted path under something that is not an
/// object reads as missing, as it would in the whole object.
pub fn decode(json: &[u8], shape: &Shape) -> serde_json::Result<Value> {
    let mut de = serde_json::Deserializer::from_slice(json);
    let value = Pruned(shape).deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

struct Pruned<'a>(&'a Shape);

impl<'de> DeserializeSeed<'de> for Pruned<'_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        if self.0.keep {
            Value::deserialize(d)
        } else {
            d.deserialize_any(self)
        }
    }
}

impl<'de> Visitor<'de> for Pruned<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(found) = map.next_key_seed(Key(self.0))? {
            match found {
                Some(i) => {
                    let (name, shape) = &self.0.children[i];
                    // A repeated key replaces the earlier value, as in a whole decode.
                    out.insert(name.clone(), map.next_value_seed(Pruned(shape))?);
                }
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Value::Object(out))
    }

    // Not an object: nothing under it can be selected, so its content is skipped.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_str<E>(self, _: &str) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
}

/// A map key, as the index of the wanted child it names (without allocating it).
struct Key<'a>(&'a Shape);

impl<'de> DeserializeSeed<'de> for Key<'_> {
    type Value = Option<usize>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for Key<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }

    fn visit_str<E>(self, key: &str) -> Result<Option<usize>, E> {
        Ok(self.0.children.iter().position(|(k, _)| k == key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{selectable_fields, Attrs};
    use serde_json::json;

    fn same_attrs(group: &str, resource: &str, obj: &Value) {
        let shape = Shape::for_selectors(selectable_fields(group, resource));
        let bytes = serde_json::to_vec(obj).unwrap();
        let pruned = decode(&bytes, &shape).unwrap();
        let (a, b) = (
            Attrs::of(group, resource, obj),
            Attrs::of(group, resource, &pruned),
        );
        assert_eq!(
            (a.namespace, a.name, a.labels, a.fields),
            (b.namespace, b.name, b.labels, b.fields),
            "{obj}"
        );
    }

    #[test]
    fn pruned_objects_select_like_whole_ones() {
        same_attrs(
            "",
            "pods",
            &json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "p", "namespace": "ns", "labels": {"a": "b", "c": ""}, "managedFields": [{"x": 1}]},
                "spec": {"nodeName": "n1", "hostNetwork": true, "containers": [{"name": "c", "image": "i"}], "restartPolicy": 3},
                "status": {"phase": "Running", "conditions": [{"type": "Ready"}], "podIP": null}}),
        );
        same_attrs(
            "",
            "pods",
            &json!({"metadata": {"name": "p", "labels": "oops"}, "spec": "not an object", "status": [1, {"phase": "x"}]}),
        );
        same_attrs(
            "",
            "events",
            &json!({"metadata": {"name": "e", "namespace": "ns"}, "involvedObject": {"kind": "Pod", "name": "p", "uid": "u"},
                "source": {"component": "scheduler"}, "reason": "Scheduled", "type": "Normal", "message": "m"}),
        );
        same_attrs(
            "",
            "nodes",
            &json!({"metadata": {"name": "n"}, "spec": {"unschedulable": false, "taints": []}}),
        );
        same_attrs(
            "",
            "configmaps",
            &json!({"metadata": {"name": "c"}, "data": {"metadata": "x"}}),
        );
        same_attrs(
            "",
            "configmaps",
            &json!({"metadata": {"name": "c", "name": "d"}}),
        );
        same_attrs("", "configmaps", &json!({}));
    }

    #[test]
    fn repeated_keys_keep_the_last_and_bad_json_fails() {
        let shape = Shape::for_selectors(&[]);
        let v = decode(
            br#"{"metadata":{"name":"a"},"metadata":{"name":"b"}}"#,
            &shape,
        )
        .unwrap();
        assert_eq!(v["metadata"]["name"], "b");
        assert!(decode(br#"{"metadata":{"name":"a"}"#, &shape).is_err());
        assert!(decode(br#"{"metadata":{}} x"#, &shape).is_err());
        assert!(decode(br#"{"spec":[1,}"#, &shape).is_err());
    }
}
