//! OwnerReferencesPermissionEnforcement admission (upstream `plugin/pkg/admission/gc`, off by
//! default): a create or update that changes `metadata.ownerReferences` needs permission to
//! `delete` the object itself (an owner reference lets the garbage collector delete it), and one
//! that makes a reference block its owner's deletion (`blockOwnerDeletion: true`, newly or on a new
//! reference) needs `update` on the owner's `finalizers` subresource (blocking the owner's deletion
//! is a finalizer in effect). Writes of `pods/status` are exempt, as upstream: the pod status
//! strategy keeps owner references unchanged there anyway.
//!
//! Difference: for an owner of a cluster-scoped kind the finalizers check is made at the cluster
//! scope (upstream asks in the object's namespace, which RBAC then reads as cluster roles bound
//! in that namespace or cluster-wide).

use apimachinery::status::ApiError;
use serde_json::Value;

use super::{Attributes, Operation};
use crate::authz;
use crate::ApiServer;

/// The plugin (upstream `OwnerReferencesPermissionEnforcement`): validating, on creates and
/// updates.
pub struct OwnerReferencesPermissionEnforcement;

#[async_trait::async_trait]
impl super::Plugin for OwnerReferencesPermissionEnforcement {
    fn name(&self) -> &'static str {
        "OwnerReferencesPermissionEnforcement"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        matches!(attrs.operation, Operation::Create | Operation::Update)
            && !(attrs.group.is_empty()
                && attrs.resource == "pods"
                && attrs.subresource == Some("status"))
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let snapshot = api.registry.snapshot();
        let mappings = |group: &str, version: &str, kind: &str| -> Vec<Mapping> {
            snapshot
                .resources
                .values()
                .filter(|r| r.group == group && r.version == version && r.kind == kind)
                .map(|r| Mapping {
                    resource: r.plural.clone(),
                    namespaced: r.namespaced,
                })
                .collect()
        };
        check(
            attrs,
            object,
            old,
            &|a| api.authorizer.authorize(a),
            &mappings,
        )
    }
}

/// A resource an owner reference's kind maps to (upstream `RESTMapping`).
pub struct Mapping {
    pub resource: String,
    pub namespaced: bool,
}

fn owner_references(obj: &Value) -> &[Value] {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn blocks(reference: &Value) -> bool {
    reference["blockOwnerDeletion"].as_bool() == Some(true)
}

/// Whether the write changes the owner references (upstream `isChangingOwnerReference`): a create
/// with any, or an update whose list differs.
pub fn changes_owner_references(new: &Value, old: Option<&Value>) -> bool {
    match old {
        None => !owner_references(new).is_empty(),
        Some(old) => owner_references(new) != owner_references(old),
    }
}

/// The references that newly block their owner's deletion (upstream
/// `newBlockingOwnerDeletionRefs`): blocking ones whose uid was not referenced before, or was but
/// did not block.
pub fn new_blocking_references<'a>(new: &'a Value, old: Option<&Value>) -> Vec<&'a Value> {
    let old_refs = old.map(owner_references).unwrap_or(&[]);
    owner_references(new)
        .iter()
        .filter(|r| blocks(r))
        .filter(|r| !old_refs.iter().any(|o| o["uid"] == r["uid"] && blocks(o)))
        .collect()
}

/// Splits an apiVersion into group and version (upstream `schema.ParseGroupVersion`).
fn parse_group_version(api_version: &str) -> Result<(&str, &str), String> {
    match api_version.split('/').collect::<Vec<_>>().as_slice() {
        [""] => Ok(("", "")),
        [version] => Ok(("", version)),
        [group, version] => Ok((group, version)),
        _ => Err(format!("unexpected GroupVersion string: {api_version}")),
    }
}

/// The decision: `authorize` answers as the server's authorizer does (`Ok(reason)` when allowed,
/// `Err(reason)` when not); `mappings` gives the resources of a group, version and kind.
pub fn check(
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
    authorize: &dyn Fn(&authz::Attributes<'_>) -> Result<String, String>,
    mappings: &dyn Fn(&str, &str, &str) -> Vec<Mapping>,
) -> Result<(), ApiError> {
    if !changes_owner_references(object, old) {
        return Ok(());
    }
    let delete = authz::Attributes {
        user: attrs.user,
        verb: "delete",
        resource_request: true,
        group: attrs.group,
        version: attrs.version,
        resource: attrs.resource,
        subresource: attrs.subresource.unwrap_or(""),
        namespace: attrs.namespace,
        name: attrs.name,
        path: "",
        field_selector: "",
    };
    if let Err(reason) = authorize(&delete) {
        return Err(attrs.forbidden(
            object,
            &format!("cannot set an ownerRef on a resource you can't delete: {reason}, <nil>"),
        ));
    }
    for reference in new_blocking_references(object, old) {
        let (api_version, kind) = (
            reference["apiVersion"].as_str().unwrap_or(""),
            reference["kind"].as_str().unwrap_or(""),
        );
        let found = parse_group_version(api_version).and_then(|(group, version)| {
            let found = mappings(group, version, kind);
            if found.is_empty() {
                let gv = if group.is_empty() {
                    version.to_string()
                } else {
                    format!("{group}/{version}")
                };
                return Err(format!("no matches for kind {kind:?} in version {gv:?}"));
            }
            Ok((group, version, found))
        });
        let (group, version, found) = found.map_err(|e| {
            attrs.forbidden(
                object,
                &format!("cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion {api_version} Kind {kind}: {e}"),
            )
        })?;
        let name = reference["name"].as_str().unwrap_or("");
        // A kind may map to several resources: the user needs every one.
        for mapping in &found {
            let finalizers = authz::Attributes {
                user: attrs.user,
                verb: "update",
                resource_request: true,
                group,
                version,
                resource: &mapping.resource,
                subresource: "finalizers",
                namespace: if mapping.namespaced {
                    attrs.namespace
                } else {
                    ""
                },
                name,
                path: "",
                field_selector: "",
            };
            if let Err(reason) = authorize(&finalizers) {
                return Err(attrs.forbidden(
                    object,
                    &format!("cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: {reason}, <nil>"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Outcome;
    use super::*;
    use crate::authn::UserInfo;
    use serde_json::json;

    fn owned(refs: Value) -> Value {
        json!({"metadata": {"name": "rs-1", "namespace": "ns", "ownerReferences": refs}})
    }

    fn owner(uid: &str, block: Option<bool>) -> Value {
        let mut r = json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                           "uid": uid, "controller": true});
        if let Some(b) = block {
            r["blockOwnerDeletion"] = json!(b);
        }
        r
    }

    fn mappings(group: &str, version: &str, kind: &str) -> Vec<Mapping> {
        match (group, version, kind) {
            ("apps", "v1", "Deployment") => vec![Mapping {
                resource: "deployments".into(),
                namespaced: true,
            }],
            _ => vec![],
        }
    }

    /// Runs the check for a user allowed exactly the `verb resource[/sub]` pairs in `allowed`;
    /// returns the error message, if any, and every authorization asked.
    fn run(new: &Value, old: Option<&Value>, allowed: &[&str]) -> (Option<String>, Vec<String>) {
        let user = UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: vec![],
        };
        let outcome = Outcome::default();
        let attrs = Attributes {
            group: "apps",
            version: "v1",
            kind: "ReplicaSet",
            resource: "replicasets",
            subresource: None,
            namespace: "ns",
            name: "rs-1",
            operation: if old.is_some() {
                Operation::Update
            } else {
                Operation::Create
            },
            dry_run: false,
            user: &user,
            outcome: &outcome,
        };
        let asked = std::cell::RefCell::new(Vec::new());
        let authorize = |a: &authz::Attributes<'_>| {
            let what = match a.subresource {
                "" => format!("{} {}", a.verb, a.resource),
                sub => format!("{} {}/{sub}", a.verb, a.resource),
            };
            asked
                .borrow_mut()
                .push(format!("{what} {}/{}", a.namespace, a.name));
            if allowed.contains(&what.as_str()) {
                Ok(String::new())
            } else {
                Err(String::new())
            }
        };
        let result = check(&attrs, new, old, &authorize, &mappings);
        (result.err().map(|e| e.message), asked.into_inner())
    }

    #[test]
    fn setting_an_owner_needs_delete_on_the_object() {
        let new = owned(json!([owner("u1", None)]));
        let (err, asked) = run(&new, None, &[]);
        assert_eq!(
            err.as_deref(),
            Some("replicasets.apps \"rs-1\" is forbidden: cannot set an ownerRef on a resource you can't delete: , <nil>")
        );
        assert_eq!(asked, ["delete replicasets ns/rs-1"]);
        assert_eq!(run(&new, None, &["delete replicasets"]).0, None);
    }

    #[test]
    fn unchanged_references_need_nothing() {
        let obj = owned(json!([owner("u1", Some(true))]));
        let (err, asked) = run(&obj, Some(&obj), &[]);
        assert_eq!(err, None);
        assert!(asked.is_empty());
        let bare = json!({"metadata": {"name": "rs-1"}});
        assert_eq!(run(&bare, None, &[]), (None, vec![]));
    }

    #[test]
    fn blocking_the_owner_needs_update_on_its_finalizers() {
        let new = owned(json!([owner("u1", Some(true))]));
        let (err, asked) = run(&new, None, &["delete replicasets"]);
        assert_eq!(
            err.as_deref(),
            Some("replicasets.apps \"rs-1\" is forbidden: cannot set blockOwnerDeletion if an ownerReference refers to a resource you can't set finalizers on: , <nil>")
        );
        assert_eq!(
            asked,
            [
                "delete replicasets ns/rs-1",
                "update deployments/finalizers ns/web"
            ]
        );
        let both = ["delete replicasets", "update deployments/finalizers"];
        assert_eq!(run(&new, None, &both).0, None);

        // Turning blocking on for an existing reference counts; keeping it on does not.
        let before = owned(json!([owner("u1", Some(false))]));
        assert!(run(&new, Some(&before), &["delete replicasets"])
            .0
            .is_some());
        let other = owned(json!([owner("u1", Some(true)), owner("u2", None)]));
        assert_eq!(
            run(&other, Some(&new), &["delete replicasets"]).0,
            None,
            "u1 blocked already; u2 does not block"
        );
    }

    #[test]
    fn unknown_owner_kinds_are_refused_when_blocking() {
        let mut r = owner("u1", Some(true));
        r["kind"] = json!("Gadget");
        let (err, _) = run(&owned(json!([r])), None, &["delete replicasets"]);
        assert_eq!(
            err.as_deref(),
            Some("replicasets.apps \"rs-1\" is forbidden: cannot set blockOwnerDeletion in this case because cannot find RESTMapping for APIVersion apps/v1 Kind Gadget: no matches for kind \"Gadget\" in version \"apps/v1\"")
        );
    }

    #[test]
    fn group_versions_parse_as_upstream() {
        assert_eq!(parse_group_version("v1"), Ok(("", "v1")));
        assert_eq!(parse_group_version("apps/v1"), Ok(("apps", "v1")));
        assert!(parse_group_version("a/b/c").is_err());
    }
}
