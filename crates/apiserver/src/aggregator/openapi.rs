//! OpenAPI v3 of remote group versions (upstream's `openapiv3` aggregation controller): the
//! availability check also reads `/openapi/v3/apis/<group>/<version>` from the extension server;
//! `/openapi/v3` then lists that group version with the document's hash, and the document is served
//! from here, so `kubectl explain` of remote kinds works. OpenAPI v2 is not merged.

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Value};

use super::Aggregator;
use crate::request::Query;
use crate::response::{self, Body};

/// A remote group version's OpenAPI v3 document and its hash.
#[derive(Clone, Debug)]
pub struct RemoteSpec {
    pub hash: String,
    pub body: Bytes,
}

impl RemoteSpec {
    /// A fetched document, if it is a JSON object (upstream's hash: the SHA-512 of the bytes).
    pub fn new(body: Bytes) -> Option<RemoteSpec> {
        serde_json::from_slice::<Value>(&body)
            .ok()
            .filter(Value::is_object)?;
        use std::fmt::Write;
        let digest = ring::digest::digest(&ring::digest::SHA512, &body);
        let hash = digest.as_ref().iter().fold(String::new(), |mut s, b| {
            let _ = write!(s, "{b:02X}");
            s
        });
        Some(RemoteSpec { hash, body })
    }
}

/// Adds the remote group versions with a known document to the `/openapi/v3` index.
pub fn merge_root(agg: &Aggregator, root: &mut Value) {
    let Some(paths) = root.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    for r in agg.remotes() {
        let Some(spec) = agg.openapi(&r.name) else {
            continue;
        };
        let p = format!("apis/{}/{}", r.group, r.version);
        let url = format!("/openapi/v3/{p}?hash={}", spec.hash);
        paths.insert(p, json!({"serverRelativeURL": url}));
    }
}

/// `/openapi/v3/<gv_path>` of a remote group version, if it is one with a known document.
pub fn serve(agg: &Aggregator, gv_path: &str, query: &Query) -> Option<http::Response<Body>> {
    let mut parts = gv_path.trim_matches('/').split('/');
    let (Some("apis"), Some(group), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let remote = agg.remote(group, version)?;
    let spec = agg.openapi(&remote.name)?;
    if query.get("hash").is_some_and(|h| h != spec.hash) {
        let mut resp = response::bytes_response(
            StatusCode::MOVED_PERMANENTLY,
            "text/plain; charset=utf-8",
            Bytes::new(),
        );
        let location = format!(
            "/openapi/v3/{}?hash={}",
            gv_path.trim_matches('/'),
            spec.hash
        );
        if let Ok(v) = HeaderValue::from_str(&location) {
            resp.headers_mut().insert(header::LOCATION, v);
        }
        return Some(resp);
    }
    let mut resp = response::bytes_response(StatusCode::OK, response::JSON, spec.body.clone());
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&format!("\"{}\"", spec.hash)) {
        h.insert(header::ETAG, v);
    }
    let cache = if query.get("hash").is_some() {
        "public, immutable"
    } else {
        "no-cache, private"
    };
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    Some(resp)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::{FrontProxy, Remote};

    #[test]
    fn remote_documents_are_listed_and_served_by_hash() {
        let agg = Aggregator::new(FrontProxy::for_tests());
        let remote = Remote {
            name: "v1alpha1.wardle.example.com".into(),
            group: "wardle.example.com".into(),
            version: "v1alpha1".into(),
            namespace: "wardle".into(),
            service: "api".into(),
            port: 443,
            ca_bundle: Vec::new(),
            insecure_skip_tls_verify: true,
            group_priority_minimum: 1000,
            version_priority: 15,
            available: true,
        };
        agg.set_remote(&remote.name.clone(), Some(remote));
        assert!(RemoteSpec::new(Bytes::from_static(b"[1]")).is_none());
        let spec = RemoteSpec::new(Bytes::from_static(b"{\"openapi\":\"3.0.0\"}")).unwrap();
        assert_eq!(spec.hash.len(), 128);
        let mut root = json!({"paths": {"api/v1": {}}});
        merge_root(&agg, &mut root);
        assert_eq!(root["paths"].as_object().unwrap().len(), 1);
        agg.set_openapi("v1alpha1.wardle.example.com", Some(spec.clone()));
        merge_root(&agg, &mut root);
        let url = root["paths"]["apis/wardle.example.com/v1alpha1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(url.ends_with(&spec.hash));
        let gv = "apis/wardle.example.com/v1alpha1";
        let ok = serve(
            &agg,
            gv,
            &Query::parse(Some(&format!("hash={}", spec.hash))),
        )
        .unwrap();
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()[header::CACHE_CONTROL], "public, immutable");
        let moved = serve(&agg, gv, &Query::parse(Some("hash=old"))).unwrap();
        assert_eq!(moved.status(), StatusCode::MOVED_PERMANENTLY);
        assert!(serve(&agg, "apis/apps/v1", &Query::parse(None)).is_none());
    }
}
