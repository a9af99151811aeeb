//! Lowers the MutatingAdmissionPolicy object syntax to plain CEL before compiling (upstream
//! declares the dynamic types `Object`, `Object.<field>...` and `JSONPatch` in the mutation
//! environment, `k8s.io/apiserver/pkg/cel/mutation`): a struct literal
//! `Object{spec: Object.spec{replicas: 3}}` becomes the map literal `{"spec": {"replicas": 3}}`,
//! `JSONPatch{op: "add", path: p}` becomes `{"op": "add", "path": p}`, and
//! `jsonpatch.escapeKey(k)` becomes the `replace` calls it stands for (`~` -> `~0`, `/` -> `~1`).
//!
//! The interpreter has no types for these literals, so the check upstream makes on the result
//! (a nested `Object.a.b{}` must sit under field `b` of an `Object.a{}`) is made here on the
//! literals as written; a nested literal reached through a variable is not checked.

/// The lowered expression, and the type-name mismatches found (upstream's runtime text).
pub struct Lowered {
    pub text: String,
    pub type_errors: Vec<String>,
}

#[derive(Debug)]
enum Open {
    Paren {
        escape_key: bool,
    },
    Bracket,
    /// A map literal, or a struct literal of a type that is not lowered.
    Map,
    /// A lowered literal: its type name, whether a field name comes next, the current field.
    Struct {
        name: String,
        expect_field: bool,
        field: String,
    },
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

const KEYWORDS: &[&str] = &["in", "true", "false", "null"];

/// Lowers `expr` (see the module docs). Text that is not one of these forms is copied as is.
pub fn lower(expr: &str) -> Lowered {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = String::with_capacity(expr.len() + 16);
    let mut stack: Vec<Open> = Vec::new();
    let mut type_errors = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        // Strings and comments are copied untouched.
        if let Some(end) = string_end(&chars, i) {
            out.extend(&chars[i..end]);
            i = end;
            continue;
        }
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(chars[i]);
                i += 1;
            }
            continue;
        }
        // A field name of a lowered struct literal: `name:` or `?name:`.
        if let Some(Open::Struct {
            expect_field: expect @ true,
            field,
            ..
        }) = stack.last_mut()
        {
            if c.is_whitespace() {
                out.push(c);
                i += 1;
                continue;
            }
            let (optional, start) = if c == '?' { (true, i + 1) } else { (false, i) };
            if chars.get(start).copied().is_some_and(is_ident_start) {
                let mut end = start;
                while end < chars.len() && is_ident_char(chars[end]) {
                    end += 1;
                }
                let name: String = chars[start..end].iter().collect();
                if optional {
                    out.push('?');
                }
                out.push('"');
                out.push_str(&name);
                out.push('"');
                *field = name;
                *expect = false;
                i = end;
                continue;
            }
            *expect = false;
        }
        if is_ident_start(c)
            && (i == 0 || !is_ident_char(chars[i - 1]))
            && !preceded_by_dot(&chars, i)
        {
            // A qualified name: `a.b.c`, maybe followed by `{` (a struct literal) or `(`.
            let (name, end) = qualified_name(&chars, i);
            let mut next = end;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let lowered_type =
                name == "JSONPatch" || name == "Object" || name.starts_with("Object.");
            if chars.get(next) == Some(&'{') && lowered_type && !KEYWORDS.contains(&name.as_str()) {
                if name.starts_with("Object") {
                    if let Some(expected) = expected_name(&stack) {
                        if expected != name {
                            type_errors.push(format!(
                                "unexpected type name {name:?}, expected {expected:?}, which matches field name path from root Object type"
                            ));
                        }
                    }
                }
                out.push('{');
                stack.push(Open::Struct {
                    name,
                    expect_field: true,
                    field: String::new(),
                });
                i = next + 1;
                continue;
            }
            if name == "jsonpatch.escapeKey" && chars.get(next) == Some(&'(') {
                out.push_str("((");
                stack.push(Open::Paren { escape_key: true });
                i = next + 1;
                continue;
            }
            out.extend(&chars[i..end]);
            i = end;
            continue;
        }
        match c {
            '(' => stack.push(Open::Paren { escape_key: false }),
            '[' => stack.push(Open::Bracket),
            '{' => stack.push(Open::Map),
            ')' => {
                if let Some(Open::Paren { escape_key: true }) = stack.last() {
                    stack.pop();
                    out.push_str(")).replace(\"~\", \"~0\").replace(\"/\", \"~1\")");
                    i += 1;
                    continue;
                }
                stack.pop();
            }
            ']' | '}' => {
                stack.pop();
            }
            ',' => {
                if let Some(Open::Struct { expect_field, .. }) = stack.last_mut() {
                    *expect_field = true;
                }
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    Lowered {
        text: out,
        type_errors,
    }
}

/// Whether the identifier at `i` follows a `.` (a field selection, not a name's start).
fn preceded_by_dot(chars: &[char], i: usize) -> bool {
    let mut j = i;
    while j > 0 && chars[j - 1].is_whitespace() {
        j -= 1;
    }
    j > 0 && chars[j - 1] == '.'
}

/// The qualified name starting at `i` and where it ends.
fn qualified_name(chars: &[char], i: usize) -> (String, usize) {
    let mut end = i;
    loop {
        while end < chars.len() && is_ident_char(chars[end]) {
            end += 1;
        }
        if end + 1 < chars.len() && chars[end] == '.' && is_ident_start(chars[end + 1]) {
            end += 1;
            continue;
        }
        break;
    }
    (chars[i..end].iter().collect(), end)
}

/// The type name a literal opened here must have: the enclosing `Object` literal's plus the
/// field it is the value of, looking through list and map literals (as upstream's check does).
fn expected_name(stack: &[Open]) -> Option<String> {
    for open in stack.iter().rev() {
        match open {
            Open::Bracket | Open::Map => continue,
            Open::Paren { .. } => return None,
            Open::Struct { name, field, .. } => {
                return name
                    .starts_with("Object")
                    .then(|| format!("{name}.{field}"));
            }
        }
    }
    None
}

/// Where the string literal starting at `i` ends (after its closing quote), if one starts there.
pub(super) fn string_end(chars: &[char], i: usize) -> Option<usize> {
    let mut j = i;
    let mut raw = false;
    // Prefixes: r, R, b, B and their pairs, only directly before a quote and not inside a name.
    if i > 0 && is_ident_char(chars[i - 1]) {
        return None;
    }
    while j < chars.len() && j - i < 2 && matches!(chars[j], 'r' | 'R' | 'b' | 'B') {
        raw |= matches!(chars[j], 'r' | 'R');
        j += 1;
    }
    let quote = *chars.get(j)?;
    if quote != '"' && quote != '\'' {
        return None;
    }
    let triple = chars.get(j + 1) == Some(&quote) && chars.get(j + 2) == Some(&quote);
    let mut k = if triple { j + 3 } else { j + 1 };
    while k < chars.len() {
        if chars[k] == '\\' && !raw {
            k += 2;
            continue;
        }
        if chars[k] == quote {
            if !triple {
                return Some(k + 1);
            }
            if chars.get(k + 1) == Some(&quote) && chars.get(k + 2) == Some(&quote) {
                return Some(k + 3);
            }
        }
        k += 1;
    }
    Some(chars.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(e: &str) -> String {
        let l = lower(e);
        assert!(l.type_errors.is_empty(), "{:?}", l.type_errors);
        l.text
    }

    #[test]
    fn object_literals_become_maps() {
        assert_eq!(
            text("Object{spec: Object.spec{replicas: 3, paused: false}}"),
            r#"{"spec": {"replicas": 3, "paused": false}}"#
        );
        assert_eq!(
            text("Object{metadata: Object.metadata{labels: {'a': 'b'}}}"),
            r#"{"metadata": {"labels": {'a': 'b'}}}"#
        );
        assert_eq!(
            text("Object{spec: Object.spec{containers: [Object.spec.containers{name: 'x'}]}}"),
            r#"{"spec": {"containers": [{"name": 'x'}]}}"#
        );
        assert_eq!(
            text("Object{?spec: optional.none()}"),
            r#"{?"spec": optional.none()}"#
        );
    }

    #[test]
    fn strings_field_selections_and_other_code_stay() {
        assert_eq!(
            text("object.spec.replicas > 1 ? 'Object{a: 1}' : \"x\""),
            "object.spec.replicas > 1 ? 'Object{a: 1}' : \"x\""
        );
        assert_eq!(
            text("{'a': 1}.a == 1 && 'x' in {'x': 1}"),
            "{'a': 1}.a == 1 && 'x' in {'x': 1}"
        );
        assert_eq!(text("other.Thing{a: 1}"), "other.Thing{a: 1}");
    }

    #[test]
    fn json_patch_literals_and_escape_key() {
        assert_eq!(
            text("[JSONPatch{op: 'add', path: '/metadata/labels/' + jsonpatch.escapeKey('a/b~c'), value: 'v'}]"),
            r#"[{"op": 'add', "path": '/metadata/labels/' + (('a/b~c')).replace("~", "~0").replace("/", "~1"), "value": 'v'}]"#
        );
    }

    #[test]
    fn nested_type_names_must_follow_field_names() {
        let l = lower("Object{spec: Object.spec{selector: Object.spec.wrong{}}}");
        assert_eq!(
            l.type_errors,
            [
                r#"unexpected type name "Object.spec.wrong", expected "Object.spec.selector", which matches field name path from root Object type"#
            ]
        );
    }
}
