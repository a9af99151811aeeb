//! Duplicate fields in request bodies, as upstream's strict decoders find them: sigs.k8s.io/json's
//! `UnmarshalStrict` for JSON (`duplicate field "spec.replicas"`, the path of the repeated key; the
//! last value wins, and for typed objects a repeated object is decoded into the first, so the two
//! merge) and go-yaml's strict mode for YAML (`line 11: key "foo" already set in map`, the line of
//! the repeated key's value).
//!
//! What a body can make these allocate is bounded by the body (at most [`super::decode::MAX_BODY`]):
//! serde_json's recursion limit bounds the nesting, at most [`MAX_ERRORS`] duplicates are kept, and
//! the YAML walk keeps the keys of the open mappings only.

use std::collections::{HashMap, HashSet};
use std::fmt::{self, Write as _};

use serde::de::{DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Number, Value};

/// sigs.k8s.io/json keeps at most this many strict errors per decode.
pub const MAX_ERRORS: usize = 100;

/// A duplicate field: its path (`spec.template.spec.containers[0].imagePullPolicy`) and the ordinal
/// of the repeated key among all the keys of the document, in document order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dup {
    pub path: String,
    pub ordinal: usize,
}

struct State<'w> {
    path: String,
    ordinal: usize,
    /// Typed objects: a repeated object merges into the first (Go decodes it into the same struct
    /// or map); unstructured ones: the last replaces it.
    merge: bool,
    dups: Vec<Dup>,
    seen: HashSet<String>,
    /// Second pass: the ordinal of the first occurrence of these paths.
    want: Option<&'w HashSet<String>>,
    found: HashMap<String, usize>,
}

impl State<'_> {
    fn push_key(&mut self, key: &str) -> usize {
        let len = self.path.len();
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(key);
        len
    }
}

struct Seed<'a, 'w>(&'a mut State<'w>);

impl<'de> DeserializeSeed<'de> for Seed<'_, '_> {
    type Value = Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(ValueVisitor(self.0))
    }
}

struct ValueVisitor<'a, 'w>(&'a mut State<'w>);

impl<'de> Visitor<'de> for ValueVisitor<'_, '_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Number::from_f64(v).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let st = self.0;
        let mut items = Vec::new();
        loop {
            let len = st.path.len();
            // Written in place: no allocation per element.
            let _ = write!(st.path, "[{}]", items.len());
            let item = seq.next_element_seed(Seed(&mut *st));
            st.path.truncate(len);
            match item? {
                Some(v) => items.push(v),
                None => break,
            }
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Value, A::Error> {
        let st = self.0;
        let mut map = Map::new();
        while let Some(key) = access.next_key::<String>()? {
            let ordinal = st.ordinal;
            st.ordinal += 1;
            let len = st.push_key(&key);
            let value = access.next_value_seed(Seed(&mut *st));
            let value = match value {
                Ok(v) => v,
                Err(e) => {
                    st.path.truncate(len);
                    return Err(e);
                }
            };
            match map.get_mut(&key) {
                Some(existing) => {
                    if st.dups.len() < MAX_ERRORS && st.seen.insert(st.path.clone()) {
                        st.dups.push(Dup {
                            path: st.path.clone(),
                            ordinal,
                        });
                    }
                    if st.merge {
                        merge_into(existing, value);
                    } else {
                        *existing = value;
                    }
                }
                None => {
                    if let Some(want) = st.want {
                        if want.contains(&st.path) && !st.found.contains_key(&st.path) {
                            st.found.insert(st.path.clone(), ordinal);
                        }
                    }
                    map.insert(key, value);
                }
            }
            st.path.truncate(len);
        }
        Ok(Value::Object(map))
    }
}

/// Go's decoding of a repeated key into the same struct or map: objects merge key by key, anything
/// else is replaced.
fn merge_into(existing: &mut Value, value: Value) {
    match (existing, value) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(old) => merge_into(old, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (existing, value) => *existing = value,
    }
}

fn run<'w>(
    body: &[u8],
    merge: bool,
    want: Option<&'w HashSet<String>>,
) -> Result<(Value, State<'w>), serde_json::Error> {
    let mut st = State {
        path: String::new(),
        ordinal: 0,
        merge,
        dups: Vec::new(),
        seen: HashSet::new(),
        want,
        found: HashMap::new(),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = Seed(&mut st).deserialize(&mut de)?;
    de.end()?;
    Ok((value, st))
}

/// Parses JSON, keeping the last value of a repeated key (merged into the first when `merge`, as
/// for typed objects); returns the value and the duplicates in document order.
pub fn parse_json(body: &[u8], merge: bool) -> Result<(Value, Vec<Dup>), serde_json::Error> {
    let (value, st) = run(body, merge, None)?;
    Ok((value, st.dups))
}

/// The ordinals of the first occurrences of `paths` in a JSON body (to put unknown fields, found
/// after decoding, among the duplicates in document order as one Go decoding pass reports them).
pub fn first_ordinals(body: &[u8], merge: bool, paths: &HashSet<String>) -> HashMap<String, usize> {
    run(body, merge, Some(paths))
        .map(|(_, st)| st.found)
        .unwrap_or_default()
}

/// A JSON patch's operations decoded strictly into upstream's `jsonPatchOp` (`op`, `path`, `from`,
/// `value`): unknown and repeated fields of the operations (`[0].foo`) and repeated keys inside
/// values (`[1].value.a`), in document order, as upstream's messages without the `json patch `
/// prefix.
pub fn json_patch_errors(body: &[u8]) -> Vec<String> {
    let Ok((value, dups)) = parse_json(body, false) else {
        return Vec::new();
    };
    let Value::Array(ops) = &value else {
        return Vec::new();
    };
    // Unknown fields of each operation, placed by the ordinal of their key.
    let mut unknown = HashSet::new();
    for (i, op) in ops.iter().enumerate() {
        if let Value::Object(m) = op {
            for k in m.keys() {
                if !matches!(k.as_str(), "op" | "path" | "from" | "value") {
                    unknown.insert(format!("[{i}].{k}"));
                }
            }
        }
    }
    let mut events: Vec<(usize, String)> = dups
        .into_iter()
        .filter(|d| !under_any(&d.path, &unknown))
        .map(|d| (d.ordinal, format!("duplicate field {:?}", d.path)))
        .collect();
    if !unknown.is_empty() {
        let ords = first_ordinals(body, false, &unknown);
        events.extend(
            ords.into_iter()
                .map(|(p, o)| (o, format!("unknown field {p:?}"))),
        );
    }
    events.sort_by_key(|(o, _)| *o);
    events.truncate(MAX_ERRORS);
    events.into_iter().map(|(_, m)| m).collect()
}

/// Whether `path` is one of `roots` or below one of them.
pub fn under_any(path: &str, roots: &HashSet<String>) -> bool {
    if roots.contains(path) {
        return true;
    }
    path.char_indices()
        .filter(|(_, c)| matches!(c, '.' | '['))
        .any(|(i, _)| roots.contains(&path[..i]))
}

/// Repeated keys in the first YAML document, as go-yaml's strict mode reports them: one
/// `line N: key "k" already set in map` per repeated key, N the (1-based) line of its value.
/// Empty when there are none or the YAML does not parse (the caller's parse reports that).
pub fn yaml_duplicates(body: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut parser = yaml::Parser::new(body);
    // Open collections; for a mapping, the keys seen so far, whether the next node is a key, and
    // the repeated key awaiting its value's line.
    enum Frame {
        Seq,
        Map {
            seen: HashSet<Key>,
            want_key: bool,
            dup: Option<Key>,
        },
    }
    let mut stack: Vec<Frame> = Vec::new();
    // A node starts: if it is a mapping's value whose key was repeated, report it at this line.
    fn node_starts(stack: &mut [Frame], line: u64, out: &mut Vec<String>) {
        if let Some(Frame::Map {
            want_key: false,
            dup,
            ..
        }) = stack.last_mut()
        {
            if let Some(k) = dup.take() {
                if out.len() < MAX_ERRORS {
                    out.push(format!("line {}: key {} already set in map", line + 1, k));
                }
            }
        }
    }
    fn node_ends(stack: &mut [Frame]) {
        if let Some(Frame::Map { want_key, .. }) = stack.last_mut() {
            *want_key = !*want_key;
        }
    }
    loop {
        let Some(event) = parser.next() else {
            return out;
        };
        match event {
            yaml::Event::Scalar { value, plain, line } => {
                let is_key = matches!(stack.last(), Some(Frame::Map { want_key: true, .. }));
                if is_key {
                    if let Some(Frame::Map { seen, dup, .. }) = stack.last_mut() {
                        // `<<` merges another mapping in; go-yaml does not count it as a key.
                        if !(plain && value == b"<<") {
                            let key = Key::resolve(&value, plain);
                            if !seen.insert(key.clone()) {
                                *dup = Some(key);
                            }
                        }
                    }
                } else {
                    node_starts(&mut stack, line, &mut out);
                }
                node_ends(&mut stack);
            }
            yaml::Event::Alias { line } => {
                node_starts(&mut stack, line, &mut out);
                node_ends(&mut stack);
            }
            yaml::Event::SequenceStart { line } => {
                node_starts(&mut stack, line, &mut out);
                stack.push(Frame::Seq);
            }
            yaml::Event::MappingStart { line } => {
                node_starts(&mut stack, line, &mut out);
                stack.push(Frame::Map {
                    seen: HashSet::new(),
                    want_key: true,
                    dup: None,
                });
            }
            yaml::Event::CollectionEnd => {
                stack.pop();
                node_ends(&mut stack);
            }
            yaml::Event::DocumentEnd => return out,
        }
    }
}

/// A mapping key as go-yaml resolves it (plain scalars may be numbers, booleans or null), printed
/// as Go's `%#v` prints it.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Key {
    Str(String),
    Other(String),
}

impl Key {
    fn resolve(raw: &[u8], plain: bool) -> Key {
        let text = String::from_utf8_lossy(raw).into_owned();
        if !plain {
            return Key::Str(text);
        }
        match text.as_str() {
            "" | "~" | "null" | "Null" | "NULL" => Key::Other("<nil>".into()),
            "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
                Key::Other("true".into())
            }
            "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off"
            | "OFF" => Key::Other("false".into()),
            t => match t.parse::<i64>() {
                Ok(n) => Key::Other(n.to_string()),
                Err(_) => match t.parse::<f64>() {
                    Ok(f) if t.bytes().any(|b| b.is_ascii_digit()) => Key::Other(f.to_string()),
                    _ => Key::Str(text),
                },
            },
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Str(s) => write!(f, "{}", Value::String(s.clone())),
            Key::Other(s) => f.write_str(s),
        }
    }
}

/// A minimal event reader over libyaml (the parser serde_yaml_ng uses), for the marks serde's
/// data model does not carry.
mod yaml {
    use std::mem::MaybeUninit;

    pub enum Event {
        Scalar {
            value: Vec<u8>,
            plain: bool,
            line: u64,
        },
        Alias {
            line: u64,
        },
        SequenceStart {
            line: u64,
        },
        MappingStart {
            line: u64,
        },
        CollectionEnd,
        DocumentEnd,
    }

    pub struct Parser<'a> {
        parser: Box<MaybeUninit<unsafe_libyaml::yaml_parser_t>>,
        done: bool,
        _input: &'a [u8],
    }

    impl<'a> Parser<'a> {
        pub fn new(input: &'a [u8]) -> Parser<'a> {
            let mut parser = Box::new(MaybeUninit::<unsafe_libyaml::yaml_parser_t>::uninit());
            // SAFETY: libyaml initializes the parser in place; the input outlives the parser
            // (`_input` borrows it for 'a) and is only read.
            let ok = unsafe {
                let p = parser.as_mut_ptr();
                if unsafe_libyaml::yaml_parser_initialize(p).fail {
                    false
                } else {
                    unsafe_libyaml::yaml_parser_set_input_string(
                        p,
                        input.as_ptr(),
                        input.len() as _,
                    );
                    true
                }
            };
            Parser {
                parser,
                done: !ok,
                _input: input,
            }
        }

        /// The next event of interest; `None` at the end of the stream or on an error.
        #[allow(clippy::should_implement_trait)]
        pub fn next(&mut self) -> Option<Event> {
            loop {
                if self.done {
                    return None;
                }
                let mut event = MaybeUninit::<unsafe_libyaml::yaml_event_t>::uninit();
                // SAFETY: the parser was initialized (`done` is false); a successful parse
                // initializes the event, which is read, copied out and deleted before returning.
                unsafe {
                    if unsafe_libyaml::yaml_parser_parse(
                        self.parser.as_mut_ptr(),
                        event.as_mut_ptr(),
                    )
                    .fail
                    {
                        self.done = true;
                        return None;
                    }
                    let ev = event.as_mut_ptr();
                    // `size_t` is `c_ulong`: not u64 everywhere.
                    #[allow(clippy::unnecessary_cast)]
                    let line = (*ev).start_mark.line as u64;
                    let out = match (*ev).type_ {
                        unsafe_libyaml::YAML_SCALAR_EVENT => {
                            let s = (*ev).data.scalar;
                            let value = if s.value.is_null() {
                                Vec::new()
                            } else {
                                std::slice::from_raw_parts(s.value, s.length as usize).to_vec()
                            };
                            Some(Event::Scalar {
                                value,
                                plain: s.style == unsafe_libyaml::YAML_PLAIN_SCALAR_STYLE,
                                line,
                            })
                        }
                        unsafe_libyaml::YAML_ALIAS_EVENT => Some(Event::Alias { line }),
                        unsafe_libyaml::YAML_SEQUENCE_START_EVENT => {
                            Some(Event::SequenceStart { line })
                        }
                        unsafe_libyaml::YAML_MAPPING_START_EVENT => {
                            Some(Event::MappingStart { line })
                        }
                        unsafe_libyaml::YAML_SEQUENCE_END_EVENT
                        | unsafe_libyaml::YAML_MAPPING_END_EVENT => Some(Event::CollectionEnd),
                        unsafe_libyaml::YAML_DOCUMENT_END_EVENT
                        | unsafe_libyaml::YAML_STREAM_END_EVENT => {
                            self.done = true;
                            Some(Event::DocumentEnd)
                        }
                        _ => None,
                    };
                    unsafe_libyaml::yaml_event_delete(ev);
                    if let Some(out) = out {
                        return Some(out);
                    }
                }
            }
        }
    }

    impl Drop for Parser<'_> {
        fn drop(&mut self) {
            // SAFETY: `new` initialized the parser unless initialization failed, in which case
            // libyaml left it zeroed and deleting it frees nothing.
            unsafe { unsafe_libyaml::yaml_parser_delete(self.parser.as_mut_ptr()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_duplicates_have_paths_and_the_last_value_wins() {
        let body = br#"{"spec": {"unknownField": "foo", "replicas": 2, "replicas": 3,
            "template": {"metadata": {"labels": {"a": "1", "a": "2"}}},
            "list": [{"x": 1, "x": 2}]}}"#;
        let (v, dups) = parse_json(body, true).unwrap();
        assert_eq!(v["spec"]["replicas"], 3);
        assert_eq!(v["spec"]["template"]["metadata"]["labels"]["a"], "2");
        let paths: Vec<&str> = dups.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "spec.replicas",
                "spec.template.metadata.labels.a",
                "spec.list[0].x"
            ]
        );
        // Ordinals count keys in document order: spec=0, unknownField=1, replicas=2, replicas=3.
        assert_eq!(dups[0].ordinal, 3);
        let want: HashSet<String> = ["spec.unknownField".to_string()].into();
        assert_eq!(first_ordinals(body, true, &want)["spec.unknownField"], 1);
    }

    #[test]
    fn repeated_objects_merge_for_typed_and_replace_for_unstructured() {
        let body = br#"{"spec": {"a": 1}, "spec": {"b": 2}}"#;
        assert_eq!(
            parse_json(body, true).unwrap().0,
            serde_json::json!({"spec": {"a": 1, "b": 2}})
        );
        assert_eq!(
            parse_json(body, false).unwrap().0,
            serde_json::json!({"spec": {"b": 2}})
        );
        // Repeats of the same path are reported once; at most MAX_ERRORS in all.
        let (_, dups) = parse_json(br#"{"a": 1, "a": 2, "a": 3}"#, false).unwrap();
        assert_eq!(dups.len(), 1);
        let many: String = (0..300)
            .map(|i| format!("\"k{i}\":1,\"k{i}\":2,"))
            .collect();
        let body = format!("{{{}\"z\":0}}", many);
        assert_eq!(
            parse_json(body.as_bytes(), false).unwrap().1.len(),
            MAX_ERRORS
        );
    }

    #[test]
    fn bad_and_deep_json_is_an_error_not_a_crash() {
        assert!(parse_json(b"{\"a\": ", false).is_err());
        assert!(parse_json(b"{} x", false).is_err());
        let deep = "[".repeat(100_000);
        assert!(parse_json(deep.as_bytes(), true).is_err());
    }

    #[test]
    fn json_patch_operations_are_decoded_strictly() {
        let body = br#"[{"op": "add", "path": "/spec/a", "value": "v", "foo": "bar"},
            {"op": "add", "path": "/spec/b", "path": "/spec/c", "value": {"x": 1, "x": 2}}]"#;
        assert_eq!(
            json_patch_errors(body),
            [
                r#"unknown field "[0].foo""#,
                r#"duplicate field "[1].path""#,
                r#"duplicate field "[1].value.x""#
            ]
        );
    }

    #[test]
    fn yaml_duplicates_are_reported_by_line() {
        let body = b"\napiVersion: v1\nkind: X\nmetadata:\n  name: a\n  finalizers:\n  - f\nspec:\n  unknown: uk1\n  foo: foo1\n  foo: foo2\n  ports:\n  - {name: x, name: y}\n";
        assert_eq!(
            yaml_duplicates(body),
            [
                r#"line 11: key "foo" already set in map"#,
                r#"line 13: key "name" already set in map"#
            ]
        );
        // The line is that of the value; keys resolve as go-yaml resolves them.
        let body = b"spec:\n  a: 1\nspec:\n  b: 2\n1: a\n\"1\": b\n1: c\n";
        assert_eq!(
            yaml_duplicates(body),
            [
                r#"line 4: key "spec" already set in map"#,
                "line 7: key 1 already set in map"
            ]
        );
        // JSON is YAML too; only the first document counts; bad YAML reports nothing here.
        assert_eq!(
            yaml_duplicates(b"{\"a\": 1,\n \"a\": 2}"),
            [r#"line 2: key "a" already set in map"#]
        );
        assert!(yaml_duplicates(b"a: 1\n---\na: 1\na: 2\n").is_empty());
        assert!(yaml_duplicates(b"a: [\n").is_empty());
        assert!(yaml_duplicates(b"<<: {a: 1}\n<<: {b: 2}\n").is_empty());
    }
}
