//! What policies read of the server and of the request: namespaces and params from the watch
//! cache, the resources equivalent to a request's, and the values bound to `request` and
//! `namespaceObject` in expressions (upstream `plugin/cel` `CreateAdmissionRequest` and
//! `CreateNamespaceObject`).

use std::sync::Arc;

use apimachinery::labels::Selector;
use apimachinery::status::{ApiError, Qualified};
use serde_json::{json, Map, Value};

use super::matching::{Gvk, Gvr, MatchContext, MatchRequest, Matched};
use super::params::{Decoded, ParamResource, ParamStore};
use crate::admission::{Attributes, Operation};
use crate::ApiServer;

/// The server as matching and params see it.
pub struct ServerContext<'a> {
    pub api: &'a ApiServer,
    pub decoded: &'a Decoded,
}

impl ServerContext<'_> {
    /// A namespace from the watch cache (else storage: the cache may lag a namespace created just
    /// before, as upstream's matcher falls back to a live GET); `None` when it does not exist.
    pub async fn namespace(&self, name: &str) -> Result<Option<Arc<Value>>, ApiError> {
        let key = format!("/namespaces/{name}");
        if let Some(cached) = self.api.caches.get("namespaces").and_then(|c| c.get(&key)) {
            return Ok(self.decoded.get(&key, cached.rv, &cached.json));
        }
        match self.api.store.get(&key).await {
            Ok(Some(kv)) => Ok(crate::objects::decode_stored(&kv.value, kv.mod_revision)
                .ok()
                .map(Arc::new)),
            Ok(None) => Ok(None),
            Err(e) => Err(ApiError::internal(e)),
        }
    }

    /// Whether the watch cache has the namespace (no decoding).
    pub fn namespace_cached(&self, name: &str) -> bool {
        self.api
            .caches
            .get("namespaces")
            .is_some_and(|c| c.get(&format!("/namespaces/{name}")).is_some())
    }

    fn cached(&self, storage: &str, key: &str) -> Option<Arc<Value>> {
        let cached = self.api.caches.get(storage)?.get(key)?;
        self.decoded.get(key, cached.rv, &cached.json)
    }
}

/// Namespace labels for selectors, from the cache's decoded labels (no parsing).
pub struct NamespaceLabels<'a> {
    pub api: &'a ApiServer,
    /// A namespace the cache did not have yet, read from storage before matching.
    pub fetched: Option<(&'a str, Option<&'a Value>)>,
}

impl MatchContext for NamespaceLabels<'_> {
    fn namespace_labels(&self, name: &str) -> Result<Map<String, Value>, ApiError> {
        let key = format!("/namespaces/{name}");
        if let Some(cached) = self.api.caches.get("namespaces").and_then(|c| c.get(&key)) {
            return Ok(cached.attrs.labels.clone());
        }
        match self.fetched {
            Some((n, Some(ns))) if n == name => {
                Ok(crate::objects::labels(ns).cloned().unwrap_or_default())
            }
            _ => Err(ApiError::not_found(&Qualified::new("", "namespaces"), name)),
        }
    }

    fn equivalents(&self, gvr: &Gvr, subresource: Option<&str>) -> Vec<(Gvr, Gvk)> {
        let snapshot = self.api.registry.snapshot();
        let Some(own) = snapshot.get(&gvr.group, &gvr.version, &gvr.resource) else {
            return Vec::new();
        };
        snapshot
            .resources
            .values()
            .filter(|r| r.storage == own.storage)
            .filter(|r| subresource.is_none_or(|s| r.has_subresource(s)))
            .map(|r| {
                let kind = match subresource {
                    // A subresource keeps its own kind (`Scale`) in every version.
                    Some(_) => String::new(),
                    None => r.kind.clone(),
                };
                (
                    Gvr {
                        group: r.group.clone(),
                        version: r.version.clone(),
                        resource: r.plural.clone(),
                    },
                    Gvk {
                        group: r.group.clone(),
                        version: r.version.clone(),
                        kind,
                    },
                )
            })
            .collect()
    }
}

impl ParamStore for ServerContext<'_> {
    fn get(&self, res: &ParamResource, namespace: &str, name: &str) -> Option<Arc<Value>> {
        let key = if res.namespaced {
            format!("/{}/{namespace}/{name}", res.storage)
        } else {
            format!("/{}/{name}", res.storage)
        };
        self.cached(&res.storage, &key)
    }

    fn list(
        &self,
        res: &ParamResource,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Vec<Arc<Value>> {
        let Some(cache) = self.api.caches.get(&res.storage) else {
            return Vec::new();
        };
        let prefix = match namespace {
            Some(ns) => format!("/{}/{ns}/", res.storage),
            None => format!("/{}/", res.storage),
        };
        cache
            .list(&prefix, &Default::default())
            .iter()
            .filter(|o| selector.matches(&o.attrs.labels))
            .take(super::params::MAX_PARAMS + 1)
            .filter_map(|o| {
                let key = if res.namespaced {
                    format!("/{}/{}/{}", res.storage, o.attrs.namespace, o.attrs.name)
                } else {
                    format!("/{}/{}", res.storage, o.attrs.name)
                };
                self.decoded.get(&key, o.rv, &o.json)
            })
            .collect()
    }
}

/// A param read from storage because the cache does not have it yet (upstream's
/// `getParamDirectly`).
pub async fn param_from_storage(
    api: &ApiServer,
    res: &ParamResource,
    namespace: &str,
    name: &str,
) -> Option<Arc<Value>> {
    let key = if res.namespaced {
        format!("/{}/{namespace}/{name}", res.storage)
    } else {
        format!("/{}/{name}", res.storage)
    };
    let kv = api.store.get(&key).await.ok()??;
    crate::objects::decode_stored(&kv.value, kv.mod_revision)
        .ok()
        .map(Arc::new)
}

/// The matching view of a request.
pub fn match_request<'a>(
    attrs: &'a Attributes<'a>,
    object: Option<&'a Value>,
    old: Option<&'a Value>,
) -> MatchRequest<'a> {
    MatchRequest {
        group: attrs.group,
        version: attrs.version,
        resource: attrs.resource,
        subresource: attrs.subresource,
        kind: attrs.kind,
        namespace: attrs.namespace,
        name: attrs.name,
        operation: attrs.operation.as_str(),
        object,
        old,
    }
}

/// The value of `request` (an `admission/v1` AdmissionRequest without the objects): `kind` and
/// `resource` as the policy matched them, `requestKind`/`requestResource` as asked.
pub fn admission_request(attrs: &Attributes<'_>, matched: &Matched) -> Value {
    let gvk = |g: &str, v: &str, k: &str| json!({"group": g, "version": v, "kind": k});
    let gvr = |g: &str, v: &str, r: &str| json!({"group": g, "version": v, "resource": r});
    let kind = if matched.kind.kind.is_empty() {
        attrs.kind
    } else {
        &matched.kind.kind
    };
    let mut req = Map::new();
    req.insert("uid".into(), "".into());
    req.insert(
        "kind".into(),
        gvk(&matched.kind.group, &matched.kind.version, kind),
    );
    req.insert(
        "resource".into(),
        gvr(
            &matched.resource.group,
            &matched.resource.version,
            &matched.resource.resource,
        ),
    );
    req.insert(
        "requestKind".into(),
        gvk(attrs.group, attrs.version, attrs.kind),
    );
    req.insert(
        "requestResource".into(),
        gvr(attrs.group, attrs.version, attrs.resource),
    );
    if let Some(sub) = attrs.subresource {
        req.insert("subResource".into(), sub.into());
        req.insert("requestSubResource".into(), sub.into());
    }
    if !attrs.name.is_empty() {
        req.insert("name".into(), attrs.name.into());
    }
    if !attrs.namespace.is_empty() {
        req.insert("namespace".into(), attrs.namespace.into());
    }
    req.insert("operation".into(), attrs.operation.as_str().into());
    let mut user = Map::new();
    if !attrs.user.name.is_empty() {
        user.insert("username".into(), attrs.user.name.clone().into());
    }
    if !attrs.user.uid.is_empty() {
        user.insert("uid".into(), attrs.user.uid.clone().into());
    }
    if !attrs.user.groups.is_empty() {
        user.insert("groups".into(), attrs.user.groups.clone().into());
    }
    req.insert("userInfo".into(), Value::Object(user));
    req.insert("dryRun".into(), attrs.dry_run.into());
    let options = match attrs.operation {
        Operation::Create => Some("CreateOptions"),
        Operation::Update => Some("UpdateOptions"),
        Operation::Delete => Some("DeleteOptions"),
        Operation::Connect => None,
    };
    if let Some(kind) = options {
        let mut o = json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
        if attrs.dry_run {
            o["dryRun"] = json!(["All"]);
        }
        req.insert("options".into(), o);
    }
    Value::Object(req)
}

/// The value of `namespaceObject`: the namespace's metadata (upstream keeps name, generateName,
/// namespace, uid, resourceVersion, generation, timestamps, labels, annotations, finalizers),
/// spec and status; `null` for cluster-scoped requests.
pub fn namespace_object(ns: Option<&Value>) -> Value {
    let Some(ns) = ns else {
        return Value::Null;
    };
    let mut meta = Map::new();
    if let Some(m) = ns.get("metadata").and_then(Value::as_object) {
        for key in [
            "name",
            "generateName",
            "namespace",
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "labels",
            "annotations",
            "finalizers",
        ] {
            if let Some(v) = m.get(key) {
                meta.insert(key.into(), v.clone());
            }
        }
    }
    let mut out = Map::new();
    out.insert("metadata".into(), Value::Object(meta));
    for key in ["spec", "status"] {
        out.insert(
            key.into(),
            ns.get(key).cloned().unwrap_or_else(|| json!({})),
        );
    }
    Value::Object(out)
}

/// The object as the policy matched it: in the matched resource's version when matching went
/// through an equivalent resource (only the apiVersion and the Event field renames differ
/// between rkube's equivalent resources).
pub fn in_version(obj: &Value, matched: &Matched) -> Option<Value> {
    if !obj.is_object() {
        return None;
    }
    let want = if matched.resource.group.is_empty() {
        matched.resource.version.clone()
    } else {
        format!("{}/{}", matched.resource.group, matched.resource.version)
    };
    let have = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if have == want || have.is_empty() {
        return None;
    }
    let mut out = obj.clone();
    convert(&mut out, &want);
    Some(out)
}

/// Converts an object between two served versions of one storage.
pub fn convert(obj: &mut Value, to: &str) {
    let from = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    if kind == "Event" {
        // Through the stored (core) form, which both Event versions convert to and from.
        apimachinery::conversion::to_stored(obj, "v1");
        apimachinery::conversion::to_served(obj, to);
    }
    if from != to {
        obj["apiVersion"] = Value::String(to.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Outcome;
    use crate::authn::UserInfo;

    #[test]
    fn request_is_admission_request_shaped() {
        let user = UserInfo {
            name: "alice".into(),
            uid: "u1".into(),
            groups: vec!["dev".into()],
        };
        let outcome = Outcome::default();
        let attrs = Attributes {
            group: "apps",
            version: "v1",
            kind: "Deployment",
            resource: "deployments",
            subresource: None,
            namespace: "prod",
            name: "web",
            operation: Operation::Create,
            dry_run: true,
            user: &user,
            outcome: &outcome,
        };
        let matched = Matched {
            resource: Gvr {
                group: "apps".into(),
                version: "v1".into(),
                resource: "deployments".into(),
            },
            kind: Gvk {
                group: "apps".into(),
                version: "v1".into(),
                kind: "Deployment".into(),
            },
        };
        let r = admission_request(&attrs, &matched);
        assert_eq!(
            r["kind"],
            json!({"group": "apps", "version": "v1", "kind": "Deployment"})
        );
        assert_eq!(r["resource"]["resource"], "deployments");
        assert_eq!(r["requestResource"]["resource"], "deployments");
        assert_eq!(r["operation"], "CREATE");
        assert_eq!(r["name"], "web");
        assert_eq!(r["namespace"], "prod");
        assert_eq!(
            r["userInfo"],
            json!({"username": "alice", "uid": "u1", "groups": ["dev"]})
        );
        assert_eq!(r["dryRun"], true);
        assert_eq!(r["options"]["kind"], "CreateOptions");
        assert!(r.get("subResource").is_none());
    }

    #[test]
    fn namespace_object_keeps_upstreams_fields() {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod",
            "labels": {"env": "prod"}, "managedFields": [{}], "ownerReferences": []},
            "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let o = namespace_object(Some(&ns));
        assert_eq!(
            o["metadata"],
            json!({"name": "prod", "labels": {"env": "prod"}})
        );
        assert_eq!(o["status"]["phase"], "Active");
        assert!(o.get("kind").is_none());
        assert_eq!(namespace_object(None), Value::Null);
    }

    #[test]
    fn objects_convert_between_equivalent_versions() {
        let matched = Matched {
            resource: Gvr {
                group: "events.k8s.io".into(),
                version: "v1".into(),
                resource: "events".into(),
            },
            kind: Gvk::default(),
        };
        let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "message": "hi", "involvedObject": {"kind": "Pod"}});
        let got = in_version(&ev, &matched).expect("converted");
        assert_eq!(got["apiVersion"], "events.k8s.io/v1");
        assert_eq!(got["note"], "hi");
        assert_eq!(got["regarding"]["kind"], "Pod");
        let mut back = got.clone();
        convert(&mut back, "v1");
        assert_eq!(back["message"], "hi");
        assert_eq!(back["apiVersion"], "v1");
    }
}
