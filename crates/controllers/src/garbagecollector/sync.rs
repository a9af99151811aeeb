//! What the collector does with one object once its owners are looked up (upstream
//! `attemptToDeleteItem` after `classifyReferences`): pure, so the rules are unit-tested.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use super::graph::{FINALIZER_FOREGROUND, FINALIZER_ORPHAN};

/// An owner reference after checking the owner.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnerState {
    /// The owner does not exist (or has another uid).
    Dangling,
    /// The owner exists and is not waiting for its dependents.
    Solid,
    /// The owner is being deleted in the foreground.
    WaitingForDependentsDeletion,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Nothing,
    /// Some owner is solid: drop the references to absent owners and to owners waiting in the
    /// foreground (the object stays).
    RemoveReferences(Vec<String>),
    /// An owner waits in the foreground and the object has dependents of its own: delete it in the
    /// foreground too; `unblock` first when a dependent is itself deleting dependents (a cycle).
    DeleteForeground {
        unblock: bool,
    },
    /// No solid owner: delete with this propagation policy.
    Delete(&'static str),
}

pub fn decide(
    refs: &[(OwnerReference, OwnerState)],
    has_dependents: bool,
    dependent_deleting_dependents: bool,
    finalizers: &[String],
) -> Decision {
    if refs.is_empty() {
        return Decision::Nothing;
    }
    let solid = refs.iter().any(|(_, s)| *s == OwnerState::Solid);
    let waiting = refs
        .iter()
        .any(|(_, s)| *s == OwnerState::WaitingForDependentsDeletion);
    if solid {
        let gone: Vec<String> = refs
            .iter()
            .filter(|(_, s)| *s != OwnerState::Solid)
            .map(|(r, _)| r.uid.clone())
            .collect();
        return if gone.is_empty() {
            Decision::Nothing
        } else {
            Decision::RemoveReferences(gone)
        };
    }
    if waiting && has_dependents {
        return Decision::DeleteForeground {
            unblock: dependent_deleting_dependents,
        };
    }
    let has = |f: &str| finalizers.iter().any(|x| x == f);
    Decision::Delete(if has(FINALIZER_ORPHAN) {
        "Orphan"
    } else if has(FINALIZER_FOREGROUND) {
        "Foreground"
    } else {
        "Background"
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use OwnerState::*;

    fn r(uid: &str) -> OwnerReference {
        OwnerReference {
            uid: uid.into(),
            ..Default::default()
        }
    }

    #[test]
    fn decisions_as_upstream() {
        assert_eq!(decide(&[], false, false, &[]), Decision::Nothing);
        assert_eq!(
            decide(&[(r("a"), Solid)], false, false, &[]),
            Decision::Nothing
        );
        // Two owners, one gone: only the dead reference goes.
        assert_eq!(
            decide(&[(r("a"), Solid), (r("b"), Dangling)], false, false, &[]),
            Decision::RemoveReferences(vec!["b".into()])
        );
        assert_eq!(
            decide(
                &[(r("a"), Solid), (r("b"), WaitingForDependentsDeletion)],
                true,
                false,
                &[]
            ),
            Decision::RemoveReferences(vec!["b".into()])
        );
        // All owners gone: background by default, the object's own GC finalizer otherwise.
        assert_eq!(
            decide(&[(r("a"), Dangling)], true, false, &[]),
            Decision::Delete("Background")
        );
        assert_eq!(
            decide(&[(r("a"), Dangling)], true, false, &["orphan".into()]),
            Decision::Delete("Orphan")
        );
        // Owner waiting in the foreground: dependents with dependents go in the foreground.
        assert_eq!(
            decide(&[(r("a"), WaitingForDependentsDeletion)], true, true, &[]),
            Decision::DeleteForeground { unblock: true }
        );
        assert_eq!(
            decide(&[(r("a"), WaitingForDependentsDeletion)], false, false, &[]),
            Decision::Delete("Background")
        );
    }
}
