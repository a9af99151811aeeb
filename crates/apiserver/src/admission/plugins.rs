//! The admission plugins rkube knows, by upstream's names and in upstream's order
//! (`kube-apiserver`'s `AllOrderedPlugins`), which of them are on by default
//! (`DefaultOffAdmissionPlugins` is the complement upstream), and how each is built.

use std::sync::Arc;

use super::Plugin;

/// Every plugin name `--enable-admission-plugins` accepts, in the order the chain runs them.
/// Upstream's order; plugins rkube does not have (ImagePolicyWebhook, EventRateLimit, ...) are
/// absent, so naming them is an error rather than a silent no-op.
pub const ORDERED: &[&str] = &[
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "NodeRestriction",
    "TaintNodesByCondition",
    "AlwaysPullImages",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "OwnerReferencesPermissionEnforcement",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
];

/// On unless disabled (upstream 1.36's defaults; NodeRestriction, AlwaysPullImages and
/// OwnerReferencesPermissionEnforcement are off there too).
pub const DEFAULT_ON: &[&str] = &[
    "NamespaceLifecycle",
    "LimitRanger",
    "ServiceAccount",
    "TaintNodesByCondition",
    "PodSecurity",
    "Priority",
    "DefaultTolerationSeconds",
    "DefaultStorageClass",
    "StorageObjectInUseProtection",
    "PersistentVolumeClaimResize",
    "RuntimeClass",
    "CertificateApproval",
    "CertificateSigning",
    "CertificateSubjectRestriction",
    "DefaultIngressClass",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionWebhook",
    "ResourceQuota",
];

/// The plugin of a name in [`ORDERED`]; `None` for the ones the write handlers still run
/// themselves (NamespaceLifecycle, Priority) and for those not built yet.
pub fn build(name: &str) -> Option<Arc<dyn Plugin>> {
    let plugin: Arc<dyn Plugin> = match name {
        "LimitRanger" => Arc::new(super::limitranger::LimitRanger),
        "ServiceAccount" => Arc::new(crate::serviceaccount::admission::ServiceAccount),
        "RuntimeClass" => Arc::new(super::runtimeclass::RuntimeClass),
        "ResourceQuota" => Arc::new(super::resourcequota::QuotaAdmission::default()),
        "NodeRestriction" => Arc::new(super::noderestriction::NodeRestriction),
        "TaintNodesByCondition" => Arc::new(super::nodetaint::TaintNodesByCondition),
        "AlwaysPullImages" => Arc::new(super::alwayspullimages::AlwaysPullImages),
        "PodSecurity" => Arc::new(super::podsecurity::PodSecurity::default()),
        "DefaultTolerationSeconds" => {
            Arc::new(super::defaulttolerationseconds::DefaultTolerationSeconds)
        }
        "DefaultStorageClass" => Arc::new(super::defaultstorageclass::DefaultStorageClass),
        "StorageObjectInUseProtection" => {
            Arc::new(super::storageobjectinuseprotection::StorageObjectInUseProtection)
        }
        "OwnerReferencesPermissionEnforcement" => {
            Arc::new(super::gc::OwnerReferencesPermissionEnforcement)
        }
        "PersistentVolumeClaimResize" => Arc::new(super::pvcresize::PersistentVolumeClaimResize),
        "CertificateApproval" => Arc::new(super::certificates::CertificateApproval),
        "CertificateSigning" => Arc::new(super::certificates::CertificateSigning),
        "CertificateSubjectRestriction" => {
            Arc::new(super::certificates::CertificateSubjectRestriction)
        }
        "DefaultIngressClass" => Arc::new(super::defaultingressclass::DefaultIngressClass),
        "MutatingAdmissionPolicy" => {
            Arc::new(super::policy::mutating::MutatingAdmissionPolicy::default())
        }
        "MutatingAdmissionWebhook" => Arc::new(super::webhook::MutatingWebhook::default()),
        "ValidatingAdmissionPolicy" => {
            Arc::new(super::policy::validating::ValidatingAdmissionPolicy::default())
        }
        "ValidatingAdmissionWebhook" => Arc::new(super::webhook::ValidatingWebhook::default()),
        _ => return None,
    };
    Some(plugin)
}
