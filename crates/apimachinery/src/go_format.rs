//! Go's `fmt` verbs where upstream's messages use them and clients compare the text: `%q` of a
//! string (`strconv.Quote`) and of a `[]string`.

/// A string quoted as Go's `%q` prints it (`strconv.Quote`): Go's escapes for quotes, backslashes
/// and control characters; printable text as is.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `%q` of a `[]string`: `["a" "b"]`.
pub fn quote_list(values: &[String]) -> String {
    let quoted: Vec<String> = values.iter().map(|v| quote(v)).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_as_go() {
        assert_eq!(
            quote("a\"b\\c\n\u{1}é\u{7f}"),
            "\"a\\\"b\\\\c\\n\\x01é\\x7f\""
        );
        assert_eq!(quote_list(&[]), "[]");
        assert_eq!(quote_list(&["".into(), "x".into()]), "[\"\" \"x\"]");
    }
}
