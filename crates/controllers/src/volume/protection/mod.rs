//! The PVC and PV protection controllers (upstream `pkg/controller/volume/pvcprotection`,
//! `pkg/controller/volume/pvprotection` and their shared `protectionutil`): a claim or volume
//! being deleted keeps its protection finalizer while it is in use and loses it after; one that is
//! not being deleted gets the finalizer if it lacks it (objects created before the
//! StorageObjectInUseProtection admission plugin was on).

pub mod pv;
pub mod pvc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::has_finalizer;

/// Upstream `IsDeletionCandidate`: being deleted and still holding `finalizer`.
pub fn is_deletion_candidate(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.deletion_timestamp.is_some() && has_finalizer(meta, finalizer)
}

/// Upstream `NeedToAddFinalizer`: not being deleted and missing `finalizer`.
pub fn needs_finalizer(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.deletion_timestamp.is_none() && !has_finalizer(meta, finalizer)
}

/// The finalizers with `finalizer` added (`add`) or removed.
pub fn finalizers_with(meta: &ObjectMeta, finalizer: &str, add: bool) -> Vec<String> {
    let mut out: Vec<String> = meta
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if add {
        out.push(finalizer.to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    #[test]
    fn candidates_and_finalizers() {
        let mut meta = ObjectMeta {
            finalizers: Some(vec!["a".into(), "p".into()]),
            ..Default::default()
        };
        assert!(!needs_finalizer(&meta, "p"));
        assert!(needs_finalizer(&meta, "q"));
        assert!(!is_deletion_candidate(&meta, "p"));
        meta.deletion_timestamp = Some(Time(jiff::Timestamp::UNIX_EPOCH));
        assert!(is_deletion_candidate(&meta, "p"));
        assert!(!is_deletion_candidate(&meta, "q"));
        assert!(!needs_finalizer(&meta, "q"));
        assert_eq!(finalizers_with(&meta, "p", false), vec!["a".to_string()]);
        assert_eq!(finalizers_with(&meta, "q", true), vec!["a", "p", "q"]);
    }
}
