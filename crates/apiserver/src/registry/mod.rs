//! The API server's registry (upstream `pkg/registry/<group>/<kind>/strategy.go` over
//! `registry/generic`): one [`Strategy`] per kind that behaves differently from the generic store,
//! looked up by group and resource. The REST handlers in [`crate::rest`] are the same for every
//! kind; whatever a kind does differently on create, update, status update or delete is here.
//!
//! Pure per-kind functions (defaulting, validation) stay in `apimachinery`; a strategy only says
//! which of them apply and what the server resets or keeps.

pub mod apiextensions;
pub mod apps;
pub mod batch;
pub mod certificates;
pub mod core;
pub mod generic;
pub mod rbac;

use apimachinery::resources::Resource;
use apimachinery::status::ApiError;
use serde_json::Value;

pub use generic::{CustomResourceStrategy, GenericStrategy};

/// What the API does with dependents when a delete request says nothing (upstream
/// `rest.GarbageCollectionPolicy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcPolicy {
    /// Background cascading deletion: the default of the generic store.
    DeleteDependents,
    /// Dependents are orphaned (kept for backward compatibility by some kinds' old versions).
    OrphanDependents,
    /// No garbage collection finalizers at all.
    Unsupported,
}

/// Per-kind hooks of the generic store (upstream `RESTCreateStrategy`, `RESTUpdateStrategy`,
/// `RESTDeleteStrategy`, `GarbageCollectionDeleteStrategy`, plus what rkube's handlers branch on).
/// Every hook has the generic store's behaviour as its default. Object-safe: looked up as
/// `&'static dyn Strategy`.
#[async_trait::async_trait]
pub trait Strategy: Send + Sync {
    /// Resets what a client may not set on create (metadata the server owns, the status).
    fn prepare_for_create(&self, resource: &Resource, obj: &mut Value) {
        generic::prepare_for_create(resource, obj);
    }

    /// On create, after [`Strategy::prepare_for_create`]: what the kind records of the requesting
    /// user (a CertificateSigningRequest's requester).
    fn prepare_for_create_by(&self, _user: &crate::authn::UserInfo, _obj: &mut Value) {}

    /// After defaulting, before admission, on create: defaults that need the new object's UID
    /// (the Job selector).
    fn after_create_defaulting(&self, _obj: &mut Value, _uid: &str) {}

    /// An update of the main resource (also the `scale` subresource, after it set the replicas).
    fn prepare_for_update(&self, resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_update(resource, new, old);
    }

    /// A `status` update (upstream's `*StatusStrategy.PrepareForUpdate`): the status from the
    /// request, the spec from the stored object.
    fn prepare_for_status_update(&self, _resource: &Resource, new: &mut Value, old: &Value) {
        generic::prepare_for_status_update(new, old);
    }

    /// The `approval` subresource; `false` when the kind has none.
    fn prepare_for_approval_update(&self, _new: &mut Value, _old: &Value) -> bool {
        false
    }

    /// Refuses a write that authorizing the request alone does not settle (upstream's
    /// `policybased` storages wrapping a kind's store: RBAC's privilege-escalation checks). Called
    /// with the requesting user in `ctx` on create (`old` is `None`) and on updates of the main
    /// resource (`old` is the stored object), after mutating admission and before validation.
    async fn authorize_write(
        &self,
        _ctx: &crate::rest::Ctx<'_>,
        _obj: &Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Normalizes an object after validation, before it is stored (upstream `Canonicalize`).
    fn canonicalize(&self, _obj: &mut Value) {}

    /// Whether a PUT to a missing object creates it (upstream `AllowCreateOnUpdate`). Not consulted
    /// yet: rkube's PUT answers 404 for every kind, which is this default.
    fn allow_create_on_update(&self) -> bool {
        false
    }

    /// What a delete without a propagation policy does with dependents, by served version.
    fn default_gc_policy(&self, _version: &str) -> GcPolicy {
        GcPolicy::DeleteDependents
    }

    /// Seconds a delete leaves the object marked before it goes (upstream `CheckGracefulDelete`);
    /// 0 deletes at once. `requested` is the request's `gracePeriodSeconds`.
    fn grace_period(&self, _obj: &Value, _requested: Option<i64>) -> i64 {
        0
    }

    /// On the first delete request of an object: finalizers or fields the kind adds before the
    /// object is marked deleted (upstream `BeforeDelete` hooks).
    fn on_first_delete(&self, _new: &mut Value, _finalizers: &mut Vec<String>) {}

    /// Whether something other than `metadata.finalizers` keeps a deleted object.
    fn deletion_blocked(&self, _obj: &Value) -> bool {
        false
    }

    /// A deleted object that stays (finalizers or grace period): what else it records.
    fn mark_terminating(&self, _obj: &mut Value) {}

    /// Whether objects hold allocations (cluster IPs, node ports) taken on create and released on
    /// delete.
    fn allocates_addresses(&self) -> bool {
        false
    }
}

static GENERIC: GenericStrategy = GenericStrategy;
static CUSTOM: CustomResourceStrategy = CustomResourceStrategy;

/// The strategy of a built-in resource (by group and plural); the generic one for the rest.
pub fn strategy_for(group: &str, resource: &str) -> &'static dyn Strategy {
    use self::core::{
        event, namespace, node, persistentvolume, pod, replicationcontroller, service,
    };
    match (group, resource) {
        ("", "pods") => &pod::PodStrategy,
        ("", "services") => &service::ServiceStrategy,
        ("", "namespaces") => &namespace::NamespaceStrategy,
        ("", "nodes") => &node::NodeStrategy,
        ("", "persistentvolumes" | "persistentvolumeclaims") => &persistentvolume::VolumeStrategy,
        ("", "replicationcontrollers") => &replicationcontroller::ReplicationControllerStrategy,
        ("" | "events.k8s.io", "events") => &event::EventStrategy,
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets") => {
            &apps::WorkloadStrategy
        }
        ("batch", "jobs") => &batch::job::JobStrategy,
        ("certificates.k8s.io", "certificatesigningrequests") => &certificates::csr::CsrStrategy,
        ("apiextensions.k8s.io", "customresourcedefinitions") => &apiextensions::crd::CrdStrategy,
        (rbac::GROUP, "roles" | "clusterroles") => &rbac::role::RoleStrategy,
        (rbac::GROUP, "rolebindings" | "clusterrolebindings") => &rbac::binding::BindingStrategy,
        _ => &GENERIC,
    }
}

/// The strategy of a served resource: custom resources share one.
pub fn strategy_of(resource: &Resource) -> &'static dyn Strategy {
    if resource.custom {
        &CUSTOM
    } else {
        strategy_for(&resource.group, &resource.plural)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_gc_policies_follow_upstream() {
        use GcPolicy::*;
        assert_eq!(
            strategy_for("apps", "deployments").default_gc_policy("v1"),
            DeleteDependents
        );
        assert_eq!(
            strategy_for("batch", "jobs").default_gc_policy("v1"),
            OrphanDependents
        );
        assert_eq!(
            strategy_for("", "replicationcontrollers").default_gc_policy("v1"),
            OrphanDependents
        );
        assert_eq!(
            strategy_for("", "events").default_gc_policy("v1"),
            Unsupported
        );
        assert_eq!(
            strategy_for("events.k8s.io", "events").default_gc_policy("v1"),
            Unsupported
        );
        assert_eq!(
            strategy_for("example.com", "widgets").default_gc_policy("v1"),
            DeleteDependents
        );
    }

    #[test]
    fn only_pods_have_a_grace_period_and_only_services_allocate() {
        let scheduled = serde_json::json!({"spec": {"nodeName": "n1"}});
        assert_eq!(strategy_for("", "pods").grace_period(&scheduled, None), 30);
        assert_eq!(
            strategy_for("", "configmaps").grace_period(&scheduled, None),
            0
        );
        assert!(strategy_for("", "services").allocates_addresses());
        assert!(!strategy_for("", "pods").allocates_addresses());
        assert!(!strategy_for("", "services").allow_create_on_update());
    }
}
