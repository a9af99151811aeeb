//! Object metadata helpers on the JSON form (upstream `meta.Accessor`), and the stored encoding.
//!
//! Objects are stored as JSON without `metadata.resourceVersion`: the store assigns the revision at
//! commit, so the version is spliced into the bytes when an object is read (as upstream's etcd3 store
//! sets it while decoding). Stored JSON always starts `{"apiVersion":..,"kind":..,"metadata":{`, which
//! keeps the splice a byte operation.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Map, Value};

pub fn meta(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let root = match obj {
        Value::Object(m) => m,
        other => {
            *other = Value::Object(Map::new());
            match other {
                Value::Object(m) => m,
                _ => unreachable!(),
            }
        }
    };
    let entry = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !entry.is_object() {
        *entry = Value::Object(Map::new());
    }
    match entry {
        Value::Object(m) => m,
        _ => unreachable!("just made an object"),
    }
}

pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    meta(obj)?.get(field)?.as_str()
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name").unwrap_or("")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace").unwrap_or("")
}

pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    meta(obj)?.get("labels")?.as_object()
}

pub fn finalizers(obj: &Value) -> Vec<String> {
    meta(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_meta(obj: &mut Value, field: &str, value: impl Into<Value>) {
    meta_mut(obj).insert(field.to_string(), value.into());
}

pub fn remove_meta(obj: &mut Value, field: &str) {
    meta_mut(obj).remove(field);
}

/// Now as RFC 3339 with seconds, as `metav1.Time` serializes.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// RFC 3339 time `seconds` from now, saturating at the last second RFC 3339 can write (year
/// 9999) and at now: a client's grace period of any int64 must not overflow (upstream's Go
/// duration wraps around instead; we keep the intent, "a very long time").
pub fn rfc3339_in(seconds: i64) -> String {
    let now = chrono::Utc::now();
    let latest = chrono::NaiveDate::from_ymd_opt(9999, 12, 31)
        .and_then(|d| d.and_hms_opt(23, 59, 59))
        .map(|t| t.and_utc());
    let at = chrono::TimeDelta::try_seconds(seconds.max(0))
        .and_then(|d| now.checked_add_signed(d))
        .filter(|t| latest.is_none_or(|l| *t <= l))
        .or(latest)
        .unwrap_or(now);
    at.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Serializes an object for storage: `apiVersion`, `kind`, `metadata` first, without
/// `metadata.resourceVersion`.
///
/// Written straight from the borrowed object (no reordered copy is built first): the bytes are the
/// same as serializing a copy with `apiVersion`, `kind` and `metadata` moved to the front and
/// `resourceVersion` taken out of `metadata` with `Map::remove` (which swaps the last key into its
/// place), which is what stored objects have always looked like.
pub fn encode_for_storage(obj: &Value) -> Bytes {
    let mut out = Vec::with_capacity(1024);
    let written = match obj {
        Value::Object(map) => serde_json::to_writer(&mut out, &StorageLayout(map)),
        _ => serde_json::to_writer(&mut out, &Map::new()),
    };
    if written.is_err() {
        out.clear();
    }
    Bytes::from(out)
}

/// An object in the stored layout (see [`encode_for_storage`]).
struct StorageLayout<'a>(&'a Map<String, Value>);

impl serde::Serialize for StorageLayout<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let map = self.0;
        let mut out = s.serialize_map(None)?;
        for key in ["apiVersion", "kind"] {
            if let Some(v) = map.get(key) {
                out.serialize_entry(key, v)?;
            }
        }
        match map.get("metadata") {
            Some(Value::Object(meta)) => out.serialize_entry("metadata", &WithoutVersion(meta))?,
            // A metadata that is not an object is stored as an empty one.
            _ => out.serialize_entry("metadata", &Map::new())?,
        }
        for (k, v) in map {
            if !matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                out.serialize_entry(k, v)?;
            }
        }
        out.end()
    }
}

/// Metadata without `resourceVersion`, in the order `Map::remove` (a swap remove) leaves.
struct WithoutVersion<'a>(&'a Map<String, Value>);

impl serde::Serialize for WithoutVersion<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let meta = self.0;
        let mut out = s.serialize_map(None)?;
        let at = meta.keys().position(|k| k == "resourceVersion");
        let last = meta.len().saturating_sub(1);
        for (i, (k, v)) in meta.iter().enumerate() {
            match at {
                Some(at) if i == at => {
                    // The last entry takes the removed one's place (unless it was the last).
                    if at != last {
                        if let Some((lk, lv)) = meta.iter().next_back() {
                            out.serialize_entry(lk, lv)?;
                        }
                    }
                }
                Some(at) if i == last && at != last => {}
                _ => out.serialize_entry(k, v)?,
            }
        }
        out.end()
    }
}

const META_OPEN: &[u8] = b"\"metadata\":{";

/// The stored bytes with `"resourceVersion":"<rv>"` added to the metadata.
pub fn with_resource_version(stored: &[u8], rv: i64) -> Bytes {
    if let Some(pos) = find(stored, META_OPEN) {
        let at = pos + META_OPEN.len();
        let empty = stored.get(at) == Some(&b'}');
        let mut out = BytesMut::with_capacity(stored.len() + 40);
        out.put_slice(&stored[..at]);
        out.put_slice(b"\"resourceVersion\":\"");
        out.put_slice(rv.to_string().as_bytes());
        out.put_slice(if empty { b"\"" } else { b"\"," });
        out.put_slice(&stored[at..]);
        return out.freeze();
    }
    // Not in our layout (e.g. written by another tool): decode and re-encode.
    match serde_json::from_slice::<Value>(stored) {
        Ok(mut v) => {
            set_meta(&mut v, "resourceVersion", rv.to_string());
            Bytes::from(serde_json::to_vec(&v).unwrap_or_default())
        }
        Err(_) => Bytes::copy_from_slice(stored),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Decodes a stored object and sets its resourceVersion.
pub fn decode_stored(stored: &[u8], rv: i64) -> Result<Value, serde_json::Error> {
    let mut v: Value = serde_json::from_slice(stored)?;
    set_meta(&mut v, "resourceVersion", rv.to_string());
    Ok(v)
}

/// A resourceVersion string as a revision: "" and "0" are None-like (0); garbage is an error.
pub fn parse_resource_version(rv: &str) -> Result<i64, String> {
    if rv.is_empty() {
        return Ok(0);
    }
    rv.parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| format!("invalid resource version {rv:?}"))
}

/// A name made from `generateName`: the prefix plus five random characters, as upstream's
/// `names.SimpleNameGenerator` (prefix cut to keep the name within 63 characters).
pub fn generate_name(prefix: &str) -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    let prefix: String = prefix.chars().take(63 - 5).collect();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn grace_periods_of_any_size() {
        assert_eq!(rfc3339_in(i64::MAX), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339_in(99_999_999_999_999), "9999-12-31T23:59:59Z");
        let soon = rfc3339_in(30);
        assert!(soon > now_rfc3339() || soon == now_rfc3339(), "{soon}");
        assert!(rfc3339_in(i64::MIN) <= now_rfc3339());
    }

    #[test]
    fn resource_version_is_spliced_into_stored_bytes() {
        let obj = json!({"kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a", "resourceVersion": "9"}, "data": {"metadata": "x"}});
        let stored = encode_for_storage(&obj);
        assert!(
            stored.starts_with(br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"}"#)
        );
        let served: Value = serde_json::from_slice(&with_resource_version(&stored, 42)).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "42");
        assert_eq!(served["metadata"]["name"], "a");
        assert_eq!(served["data"]["metadata"], "x");
        let empty = encode_for_storage(&json!({"apiVersion": "v1", "kind": "X"}));
        let served: Value = serde_json::from_slice(&with_resource_version(&empty, 7)).unwrap();
        assert_eq!(served["metadata"]["resourceVersion"], "7");
    }

    /// The former implementation (a reordered copy), which [`encode_for_storage`] must match byte for byte.
    fn encode_by_copy(obj: &Value) -> Bytes {
        let mut ordered = Map::new();
        if let Value::Object(map) = obj {
            for key in ["apiVersion", "kind", "metadata"] {
                if let Some(v) = map.get(key) {
                    ordered.insert(key.to_string(), v.clone());
                }
            }
            if let Some(Value::Object(m)) = ordered.get_mut("metadata") {
                m.remove("resourceVersion");
            } else {
                ordered.insert("metadata".into(), Value::Object(Map::new()));
            }
            for (k, v) in map {
                if !ordered.contains_key(k) {
                    ordered.insert(k.clone(), v.clone());
                }
            }
        }
        Bytes::from(serde_json::to_vec(&Value::Object(ordered)).unwrap_or_default())
    }

    #[test]
    fn stored_bytes_match_the_reordered_copy() {
        let cases = [
            json!({"spec": {"a": 1}, "metadata": {"resourceVersion": "3", "name": "a", "uid": "u", "labels": {"x": "y"}}, "kind": "Pod", "apiVersion": "v1"}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "resourceVersion": "3", "uid": "u"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "uid": "u", "resourceVersion": "3"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"resourceVersion": "3"}}),
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}, "data": {"metadata": "x"}}),
            json!({"data": {"k": "v"}, "kind": "ConfigMap"}),
            json!({"apiVersion": "v1", "metadata": "not an object", "z": null}),
            json!({}),
            json!([1, 2]),
            json!("text"),
        ];
        for obj in cases {
            assert_eq!(encode_for_storage(&obj), encode_by_copy(&obj), "{obj}");
        }
    }

    #[test]
    fn generated_names_keep_the_prefix() {
        let n = generate_name("web-");
        assert!(n.starts_with("web-") && n.len() == 9);
        assert_eq!(generate_name(&"x".repeat(100)).len(), 63);
    }
}
