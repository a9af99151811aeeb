//! Kubernetes' URL library (upstream `library/urls.go`): `url(s)`, `isURL(s)`, and on a URL
//! `getScheme()`, `getHost()`, `getHostname()`, `getPort()`, `getEscapedPath()`, `getQuery()`.
//!
//! Parsing follows Go's `url.ParseRequestURI`, which upstream uses: an absolute URI or an
//! absolute path, no fragment splitting (`#` stays in the path), a host with an optional numeric
//! port (IPv6 literals in brackets), `%` escapes checked.

use std::collections::HashMap;
use std::sync::Arc;

use cel::common::types::{Type, STRING_TYPE};
use cel::objects::{Key, Map};
use cel::{ExecutionError, Value};

use super::{error, op, opaque_arg, str_arg, Registrar};

const TYPE_NAME: &str = "kubernetes.URL";

/// A parsed URL (`kubernetes.URL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Url {
    pub(crate) raw: String,
    scheme: String,
    /// Host with port, as written (`example.com:80`, `[::1]:80`).
    host: String,
    /// The path as written (still escaped).
    raw_path: String,
    raw_query: String,
}

impl cel::objects::Opaque for Url {
    fn runtime_type_name(&self) -> &str {
        TYPE_NAME
    }
}

pub(crate) fn register(r: &mut Registrar<'_>) {
    let url = || Type::new_opaque_type(TYPE_NAME);
    r.global("url", "string_to_url", vec![STRING_TYPE], op!(to_url));
    r.global("isURL", "is_url_string", vec![STRING_TYPE], op!(is_url));
    r.member(
        "getScheme",
        "url_get_scheme",
        url(),
        vec![],
        op!(get_scheme),
    );
    r.member("getHost", "url_get_host", url(), vec![], op!(get_host));
    r.member(
        "getHostname",
        "url_get_hostname",
        url(),
        vec![],
        op!(get_hostname),
    );
    r.member("getPort", "url_get_port", url(), vec![], op!(get_port));
    r.member(
        "getEscapedPath",
        "url_get_escaped_path",
        url(),
        vec![],
        op!(get_escaped_path),
    );
    r.member("getQuery", "url_get_query", url(), vec![], op!(get_query));
}

/// Go's `url.ParseRequestURI`, reduced to what the library exposes.
pub(crate) fn parse(raw: &str) -> Result<Url, String> {
    let fail =
        |why: &str| format!("URL parse error during conversion from string: parse {raw:?}: {why}");
    if raw.bytes().any(|b| b < 0x20 || b == 0x7f) {
        return Err(fail("net/url: invalid control character in URL"));
    }
    let (scheme, rest) = split_scheme(raw).map_err(&fail)?;
    let (rest, raw_query) = match rest.split_once('?') {
        Some((r, q)) => (r, q.to_owned()),
        None => (rest, String::new()),
    };
    if !rest.starts_with('/') {
        return Err(fail("invalid URI for request"));
    }
    let (host, path) = if !scheme.is_empty() && rest.starts_with("//") {
        let authority = &rest[2..];
        let end = authority.find('/').unwrap_or(authority.len());
        let (authority, path) = authority.split_at(end);
        let host = match authority.rfind('@') {
            Some(at) => &authority[at + 1..],
            None => authority,
        };
        check_host(host).map_err(|e| fail(&e))?;
        (host.to_owned(), path)
    } else {
        (String::new(), rest)
    };
    unescape(path).map_err(|e| fail(&e))?;
    Ok(Url {
        raw: raw.to_owned(),
        scheme: scheme.to_ascii_lowercase(),
        host,
        raw_path: path.to_owned(),
        raw_query,
    })
}

/// Go's `getScheme`: letters, then letters/digits/`+-.`, up to `:`; anything else first means no
/// scheme.
fn split_scheme(raw: &str) -> Result<(&str, &str), &'static str> {
    for (i, c) in raw.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Err("missing protocol scheme"),
            ':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn check_host(host: &str) -> Result<(), String> {
    let port = if let Some(rest) = host.strip_prefix('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| "missing ']' in host".to_owned())?;
        &rest[close + 1..]
    } else {
        match host.rfind(':') {
            Some(i) => &host[i..],
            None => "",
        }
    };
    let numeric = port.starts_with(':') && port[1..].bytes().all(|b| b.is_ascii_digit());
    if !port.is_empty() && !numeric {
        return Err(format!("invalid port {port:?} after host"));
    }
    let allowed = |c: char| {
        c.is_ascii_alphanumeric() || "-_.~!$&'()*+,;=:[]<>\"%".contains(c) || !c.is_ascii()
    };
    if let Some(c) = host.chars().find(|c| !allowed(*c)) {
        return Err(format!(
            "invalid character {:?} in host name",
            c.to_string()
        ));
    }
    unescape(host).map(|_| ())
}

/// Decodes `%XX` escapes (not `+`), failing on a malformed one as Go's `unescape`.
fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    let end = (i + 3).min(s.len());
                    format!("invalid URL escape {:?}", s.get(i..end).unwrap_or("%"))
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Whether a path byte is kept as is by Go's `escape(s, encodePath)`.
fn path_safe(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-_.~$&+,/:;=@".contains(&b)
}

/// Go's `URL.EscapedPath`: the path as written when that is a valid encoding, else the decoded
/// path re-escaped.
fn escaped_path(u: &Url) -> String {
    let valid = u
        .raw_path
        .bytes()
        .all(|b| path_safe(b) || b"!'()*[]%".contains(&b));
    if valid {
        return u.raw_path.clone();
    }
    let decoded = unescape(&u.raw_path).unwrap_or_default();
    let mut out = String::with_capacity(decoded.len());
    for b in decoded {
        if path_safe(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Go's `url.ParseQuery`: `&`-separated `key=value` pairs, `+` as space; pairs with `;` or a bad
/// escape are skipped.
fn query(raw: &str) -> Vec<(String, String)> {
    let decode =
        |s: &str| unescape(&s.replace('+', " ")).map(|b| String::from_utf8_lossy(&b).into_owned());
    raw.split('&')
        .filter(|pair| !pair.is_empty() && !pair.contains(';'))
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decode(k).ok()?, decode(v).ok()?))
        })
        .collect()
}

fn string(s: impl Into<String>) -> Value {
    Value::String(Arc::new(s.into()))
}

fn this<'a>(function: &str, args: &'a [Value]) -> Result<&'a Url, ExecutionError> {
    opaque_arg::<Url>(function, args, 0)
}

fn to_url(args: &[Value]) -> Result<Value, ExecutionError> {
    parse(str_arg("url", args, 0)?)
        .map(|u| Value::Opaque(Arc::new(u)))
        .map_err(|e| error("url", e))
}

fn is_url(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(parse(str_arg("isURL", args, 0)?).is_ok()))
}

fn get_scheme(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(this("getScheme", args)?.scheme.clone()))
}

fn get_host(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(this("getHost", args)?.host.clone()))
}

/// Host without port; IPv6 without brackets (Go's `URL.Hostname`).
fn hostname(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

fn get_hostname(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(hostname(&this("getHostname", args)?.host)))
}

fn get_port(args: &[Value]) -> Result<Value, ExecutionError> {
    let host = &this("getPort", args)?.host;
    let after = match host.strip_prefix('[') {
        Some(rest) => rest.split_once(']').map_or("", |(_, p)| p),
        None => host.rfind(':').map_or("", |i| &host[i..]),
    };
    Ok(string(after.strip_prefix(':').unwrap_or("")))
}

fn get_escaped_path(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(string(escaped_path(this("getEscapedPath", args)?)))
}

fn get_query(args: &[Value]) -> Result<Value, ExecutionError> {
    let mut map: HashMap<Key, Vec<Value>> = HashMap::new();
    for (k, v) in query(&this("getQuery", args)?.raw_query) {
        map.entry(Key::String(Arc::new(k)))
            .or_default()
            .push(string(v));
    }
    Ok(Value::Map(Map {
        map: Arc::new(
            map.into_iter()
                .map(|(k, v)| (k, Value::List(Arc::new(v))))
                .collect(),
        ),
    }))
}

#[cfg(test)]
mod tests {
    use crate::library::testing::{assert_true, eval, eval_err};
    use serde_json::json;

    #[test]
    fn parses_like_parse_request_uri() {
        assert_true("isURL('https://example.com:80/path?query=val#fragment')");
        assert_true("isURL('/absolute-path')");
        assert_true("!isURL('relative/path') && !isURL('') && !isURL('https://a:b/x')");
        assert_true("!isURL('https://a b/x')");
        assert!(eval_err("url('x')").contains("URL parse error during conversion from string"));
    }

    #[test]
    fn accessors() {
        assert_true("url('HTTPS://example.com:80/').getScheme() == 'https'");
        assert_true("url('https://example.com:80/').getHost() == 'example.com:80'");
        assert_true("url('https://[::1]:80/').getHost() == '[::1]:80'");
        assert_true("url('https://[::1]:80/').getHostname() == '::1'");
        assert_true("url('https://example.com:80/').getHostname() == 'example.com'");
        assert_true("url('https://example.com:80/').getPort() == '80'");
        assert_true("url('https://example.com/').getPort() == ''");
        assert_true("url('/path').getHost() == ''");
        assert_true(
            "url('https://example.com/with space/%2F').getEscapedPath() == '/with%20space//'",
        );
        assert_true("url('https://example.com/a%2Fb').getEscapedPath() == '/a%2Fb'");
        assert_true("url('https://example.com/a/b').getEscapedPath() == '/a/b'");
        assert_eq!(
            eval("url('https://example.com/?k=v&k=w&x=a+b&bad=%zz').getQuery()"),
            Ok(json!({"k": ["v", "w"], "x": ["a b"]}))
        );
        assert_true("url('https://example.com/').getQuery() == {}");
    }
}
