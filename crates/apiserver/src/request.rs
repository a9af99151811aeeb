//! What a request asks for (upstream `k8s.io/apiserver/pkg/endpoints/request.RequestInfoFactory`): the
//! API group and version, namespace, resource, name, subresource and verb, read from the URL path and
//! method, plus the query parameters the REST handlers use.

use std::collections::HashMap;

use http::Method;

/// A resource request, e.g. `GET /apis/apps/v1/namespaces/default/deployments/web/scale`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResourceRequest {
    pub group: String,
    pub version: String,
    pub namespace: Option<String>,
    pub resource: String,
    pub name: Option<String>,
    pub subresource: Option<String>,
    pub verb: Verb,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
        }
    }
}

/// What a path names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `/api`: the legacy group's versions.
    ApiVersions,
    /// `/apis`: all groups.
    ApiGroups,
    /// `/apis/<group>`.
    ApiGroup(String),
    /// `/api/v1`, `/apis/<group>/<version>`: the resources of a group version.
    ApiResources {
        group: String,
        version: String,
    },
    Resource(ResourceRequest),
    /// Anything else (`/healthz`, `/version`, ...): handled by the non-resource routes.
    NonResource,
}

/// Parses a path and method into a [`Target`]. `watch=true` in the query turns list/get into watch.
pub fn parse(method: &Method, path: &str, query: &Query) -> Result<Target, String> {
    let segments: Vec<&str> = path
        .trim_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api"] => return Ok(Target::ApiVersions),
        ["apis"] => return Ok(Target::ApiGroups),
        ["apis", group] => return Ok(Target::ApiGroup(group.to_string())),
        ["api", version] => {
            return Ok(Target::ApiResources {
                group: String::new(),
                version: version.to_string(),
            })
        }
        ["apis", group, version] => {
            return Ok(Target::ApiResources {
                group: group.to_string(),
                version: version.to_string(),
            })
        }
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Ok(Target::NonResource),
    };
    // The deprecated `/watch/` prefix means watch=true.
    let (mut watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        rest => (false, rest),
    };
    watch |= query.flag("watch");
    // `namespaces/<ns>/<resource>...` is namespaced; `namespaces/<name>[/<sub>]` is the namespace itself.
    let (namespace, parts): (Option<&str>, &[&str]) = match rest {
        ["namespaces", ns, resource, tail @ ..] => {
            let mut parts = vec![*resource];
            parts.extend_from_slice(tail);
            return finish(method, group, version, Some(ns), &parts, watch);
        }
        parts => (None, parts),
    };
    finish(method, group, version, namespace, parts, watch)
}

fn finish(
    method: &Method,
    group: &str,
    version: &str,
    namespace: Option<&str>,
    parts: &[&str],
    watch: bool,
) -> Result<Target, String> {
    let (resource, name, subresource) = match parts {
        [resource] => (*resource, None, None),
        [resource, name] => (*resource, Some(*name), None),
        [resource, name, sub] => (*resource, Some(*name), Some(*sub)),
        [] => return Ok(Target::NonResource),
        _ => {
            return Err(format!(
                "the path has too many segments: /{}",
                parts.join("/")
            ))
        }
    };
    let verb = match (method.as_str(), name.is_some()) {
        ("GET" | "HEAD", _) if watch => Verb::Watch,
        ("GET" | "HEAD", true) => Verb::Get,
        ("GET" | "HEAD", false) => Verb::List,
        ("POST", _) => Verb::Create,
        ("PUT", _) => Verb::Update,
        ("PATCH", _) => Verb::Patch,
        ("DELETE", true) => Verb::Delete,
        ("DELETE", false) => Verb::DeleteCollection,
        (m, _) => return Err(format!("method {m} is not supported")),
    };
    Ok(Target::Resource(ResourceRequest {
        group: group.to_string(),
        version: version.to_string(),
        namespace: namespace.map(str::to_string),
        resource: resource.to_string(),
        name: name.map(str::to_string),
        subresource: subresource.map(str::to_string),
        verb,
    }))
}

impl ResourceRequest {
    /// `namespaces/<x>/status` and `namespaces/<x>/finalize` parse like a namespaced resource named
    /// `status` in `<x>`; when no such resource exists, the handler reinterprets the request with this as
    /// the namespace `<x>` and its subresource.
    pub fn as_namespace_subresource(&self) -> Option<ResourceRequest> {
        let ns = self.namespace.as_ref()?;
        if self.group.is_empty() && self.name.is_none() {
            Some(ResourceRequest {
                group: String::new(),
                version: self.version.clone(),
                namespace: None,
                resource: "namespaces".into(),
                name: Some(ns.clone()),
                subresource: Some(self.resource.clone()),
                verb: match self.verb {
                    Verb::List => Verb::Get,
                    v => v,
                },
            })
        } else {
            None
        }
    }
}

/// Decoded query parameters (last value wins, as Go's `Query().Get`).
#[derive(Clone, Debug, Default)]
pub struct Query(HashMap<String, String>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        let mut map = HashMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            map.insert(decode(k), decode(v));
        }
        Query(map)
    }

    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A non-empty value, or None.
    pub fn value(&self, key: &str) -> Option<&str> {
        self.get(key).filter(|v| !v.is_empty())
    }

    /// `watch=true`, `watch=1`: Go's `strconv.ParseBool` truths.
    pub fn flag(&self, key: &str) -> bool {
        matches!(
            self.get(key),
            Some("true" | "1" | "t" | "T" | "TRUE" | "True")
        )
    }
}

/// Every `key=value` pair of a query in order, repeated keys included (Go's `url.Values`).
pub fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    raw.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(k), decode(v))
        })
        .collect()
}

/// Form encoding of `pairs`, keys sorted and values in order, as Go's `url.Values.Encode`.
pub fn encode_query(pairs: &[(&str, String)]) -> String {
    let mut sorted: Vec<&(&str, String)> = pairs.iter().collect();
    sorted.sort_by_key(|(k, _)| *k);
    sorted
        .iter()
        .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Go's `url.QueryEscape`: unreserved bytes stay, space is `+`, the rest is `%XX`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// Percent-decoding with `+` as space (form encoding, as Go's url.ParseQuery).
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(method: Method, path: &str, query: &str) -> Target {
        parse(&method, path, &Query::parse(Some(query))).unwrap()
    }

    fn resource(method: Method, path: &str, query: &str) -> ResourceRequest {
        match target(method, path, query) {
            Target::Resource(r) => r,
            other => panic!("{path}: {other:?}"),
        }
    }

    #[test]
    fn parses_resource_paths() {
        let r = resource(Method::GET, "/api/v1/namespaces/default/pods/web", "");
        assert_eq!(
            (
                r.namespace.as_deref(),
                r.resource.as_str(),
                r.name.as_deref()
            ),
            (Some("default"), "pods", Some("web"))
        );
        assert_eq!(r.verb, Verb::Get);
        let r = resource(Method::GET, "/apis/apps/v1/deployments", "watch=true");
        assert_eq!(
            (r.group.as_str(), r.verb, r.namespace),
            ("apps", Verb::Watch, None)
        );
        let r = resource(
            Method::PUT,
            "/apis/apps/v1/namespaces/ns1/deployments/web/scale",
            "",
        );
        assert_eq!(r.subresource.as_deref(), Some("scale"));
        let r = resource(Method::GET, "/api/v1/namespaces/kube-system", "");
        assert_eq!(
            (r.resource.as_str(), r.name.as_deref(), r.verb),
            ("namespaces", Some("kube-system"), Verb::Get)
        );
        let r = resource(Method::GET, "/api/v1/watch/namespaces/default/pods", "");
        assert_eq!(r.verb, Verb::Watch);
        let r = resource(Method::DELETE, "/api/v1/namespaces/default/configmaps", "");
        assert_eq!(r.verb, Verb::DeleteCollection);
        let ns = resource(Method::PUT, "/api/v1/namespaces/doomed/finalize", "")
            .as_namespace_subresource()
            .unwrap();
        assert_eq!(
            (
                ns.resource.as_str(),
                ns.name.as_deref(),
                ns.subresource.as_deref()
            ),
            ("namespaces", Some("doomed"), Some("finalize"))
        );
        assert_eq!(
            target(Method::GET, "/apis/apps", ""),
            Target::ApiGroup("apps".into())
        );
        assert_eq!(target(Method::GET, "/healthz", ""), Target::NonResource);
    }

    #[test]
    fn decodes_queries() {
        let q = Query::parse(Some(
            "labelSelector=app%3Dweb%2Ctier+in+(a)&limit=5&watch=1",
        ));
        assert_eq!(q.get("labelSelector"), Some("app=web,tier in (a)"));
        assert!(q.flag("watch"));
        assert_eq!(q.value("limit"), Some("5"));
        assert_eq!(Query::parse(Some("a=%zz%4")).get("a"), Some("%zz%4"));
        assert_eq!(
            query_pairs(Some("command=sh&command=-c&command=echo+hi%3B&tty")),
            [
                ("command".to_string(), "sh".to_string()),
                ("command".to_string(), "-c".to_string()),
                ("command".to_string(), "echo hi;".to_string()),
                ("tty".to_string(), String::new()),
            ]
        );
        assert_eq!(
            encode_query(&[
                ("stdout", "1".into()),
                ("command", "sh".into()),
                ("command", "echo a&b".into()),
            ]),
            "command=sh&command=echo+a%26b&stdout=1"
        );
    }
}
