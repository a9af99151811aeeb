//! Resource quota accounting shared by the ResourceQuota admission check and the resource quota
//! controller (upstream `k8s.io/apiserver/pkg/quota/v1` with its `generic` package, and
//! `pkg/quota/v1/evaluator/core`): resource-list arithmetic ([`add`], [`mask`], [`less_than_or_equal`],
//! ...), and the evaluators ([`evaluator`]) that say which quota resources an object consumes.
//!
//! Upstream's evaluators are interface values looked up in a registry; here [`Evaluator`] is a closed
//! enum (pods, services, persistent volume claims, and plain object counting for every other resource)
//! and objects come as typed k8s-openapi values through [`evaluator::Object`]. Resource lists are
//! `BTreeMap<String, Quantity>`, so iteration is in name order where upstream's maps are unordered.

pub mod evaluator;
pub mod pods;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

use crate::quantity::Quantity;

pub use evaluator::{Evaluator, Object, Operation};

/// Resource name -> amount (upstream `corev1.ResourceList`).
pub type ResourceList = BTreeMap<String, Quantity>;

/// Resources quota never tracks (upstream `install.ignoredResources`): virtual resources that are not
/// stored, and events.
pub const IGNORED_RESOURCES: &[(&str, &str)] = &[
    ("", "bindings"),
    ("", "componentstatuses"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authentication.k8s.io", "selfsubjectreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectaccessreviews"),
    ("authorization.k8s.io", "localsubjectaccessreviews"),
    ("authorization.k8s.io", "selfsubjectrulesreviews"),
    ("", "events"),
    ("events.k8s.io", "events"),
];

/// Whether quota ignores `group`/`resource`.
pub fn is_ignored(group: &str, resource: &str) -> bool {
    IGNORED_RESOURCES.contains(&(group, resource))
}

/// `count/<resource>[.<group>]` (upstream `ObjectCountQuotaResourceNameFor`).
pub fn object_count_name(group: &str, resource: &str) -> String {
    if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    }
}

/// Parses a k8s-openapi resource list; a malformed quantity is an error naming the resource.
pub fn parse_list(list: Option<&BTreeMap<String, K8sQuantity>>) -> Result<ResourceList, String> {
    let mut out = ResourceList::new();
    for (name, q) in list.into_iter().flatten() {
        let v = Quantity::parse(&q.0).map_err(|e| format!("{name}: {e}"))?;
        out.insert(name.clone(), v);
    }
    Ok(out)
}

/// The k8s-openapi form of a resource list (canonical quantity strings).
pub fn to_k8s_list(list: &ResourceList) -> BTreeMap<String, K8sQuantity> {
    list.iter().map(|(k, v)| (k.clone(), v.to_k8s())).collect()
}

/// Whether two lists hold the same names with equal values (upstream `Equals`).
pub fn equals(a: &ResourceList, b: &ResourceList) -> bool {
    a.len() == b.len() && a.iter().all(|(k, v)| b.get(k) == Some(v))
}

/// `a + b` per name (upstream `Add`).
pub fn add(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, v) in b {
        let sum = match out.get(k) {
            Some(x) => x.add(v),
            None => *v,
        };
        out.insert(k.clone(), sum);
    }
    out
}

/// `a - b` per name; names only in `b` come out negated (upstream `Subtract`).
pub fn subtract(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = a.clone();
    for (k, v) in b {
        let diff = match out.get(k) {
            Some(x) => x.sub(v),
            None => v.neg(),
        };
        out.insert(k.clone(), diff);
    }
    out
}

/// `a - b` per name, never below zero (upstream `SubtractWithNonNegativeResult`).
pub fn subtract_non_negative(a: &ResourceList, b: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (k, v) in a {
        let diff = b.get(k).map_or(*v, |x| v.sub(x));
        out.insert(
            k.clone(),
            if diff.sign() > 0 {
                diff
            } else {
                Quantity::zero()
            },
        );
    }
    for k in b.keys() {
        out.entry(k.clone()).or_insert_with(Quantity::zero);
    }
    out
}

/// Only the entries named in `names` (upstream `Mask`).
pub fn mask<S: AsRef<str>>(list: &ResourceList, names: &[S]) -> ResourceList {
    let names: BTreeSet<&str> = names.iter().map(AsRef::as_ref).collect();
    list.iter()
        .filter(|(k, _)| names.contains(k.as_str()))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Whether `a <= b` for every name in both; else the names where `a` exceeds `b`, sorted
/// (upstream `LessThanOrEqual`).
pub fn less_than_or_equal(a: &ResourceList, b: &ResourceList) -> (bool, Vec<String>) {
    let exceeded: Vec<String> = b
        .iter()
        .filter(|(k, limit)| a.get(*k).is_some_and(|v| v > *limit))
        .map(|(k, _)| k.clone())
        .collect();
    (exceeded.is_empty(), exceeded)
}

/// The names with a negative value (upstream `IsNegative`).
pub fn is_negative(list: &ResourceList) -> Vec<String> {
    list.iter()
        .filter(|(_, v)| v.sign() < 0)
        .map(|(k, _)| k.clone())
        .collect()
}

/// The non-zero entries (upstream `RemoveZeros`).
pub fn remove_zeros(list: &ResourceList) -> ResourceList {
    list.iter()
        .filter(|(_, v)| !v.is_zero())
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// The names of a list, sorted.
pub fn names(list: &ResourceList) -> Vec<String> {
    list.keys().cloned().collect()
}

/// The names in both, deduplicated and sorted (upstream `Intersection`).
pub fn intersection<A: AsRef<str>, B: AsRef<str>>(a: &[A], b: &[B]) -> Vec<String> {
    let b: BTreeSet<&str> = b.iter().map(AsRef::as_ref).collect();
    a.iter()
        .map(AsRef::as_ref)
        .filter(|x| b.contains(x))
        .map(str::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The names of `a` not in `b`, deduplicated and sorted (upstream `Difference`).
pub fn difference<A: AsRef<str>, B: AsRef<str>>(a: &[A], b: &[B]) -> Vec<String> {
    let b: BTreeSet<&str> = b.iter().map(AsRef::as_ref).collect();
    a.iter()
        .map(AsRef::as_ref)
        .filter(|x| !b.contains(x))
        .map(str::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// `name=value,...` in name order (upstream admission's `prettyPrint`).
pub fn pretty_print(list: &ResourceList) -> String {
    list.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[(&str, &str)]) -> ResourceList {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), Quantity::parse(v).expect("quantity")))
            .collect()
    }

    #[test]
    fn list_arithmetic_as_upstream() {
        struct Case {
            a: &'static [(&'static str, &'static str)],
            b: &'static [(&'static str, &'static str)],
            add: &'static str,
            sub: &'static str,
            sub_non_negative: &'static str,
        }
        let cases = [
            Case {
                a: &[("cpu", "100m"), ("pods", "1")],
                b: &[("cpu", "1"), ("memory", "1Gi")],
                add: "cpu=1100m,memory=1Gi,pods=1",
                sub: "cpu=-900m,memory=-1Gi,pods=1",
                sub_non_negative: "cpu=0,memory=0,pods=1",
            },
            Case {
                a: &[("memory", "2Gi")],
                b: &[("memory", "512Mi")],
                add: "memory=2560Mi",
                sub: "memory=1536Mi",
                sub_non_negative: "memory=1536Mi",
            },
            Case {
                a: &[],
                b: &[("pods", "2")],
                add: "pods=2",
                sub: "pods=-2",
                sub_non_negative: "pods=0",
            },
        ];
        for c in cases {
            let (a, b) = (list(c.a), list(c.b));
            assert_eq!(pretty_print(&add(&a, &b)), c.add);
            assert_eq!(pretty_print(&subtract(&a, &b)), c.sub);
            assert_eq!(
                pretty_print(&subtract_non_negative(&a, &b)),
                c.sub_non_negative
            );
        }
    }

    #[test]
    fn comparisons_and_masks() {
        let used = list(&[("pods", "3"), ("cpu", "2"), ("memory", "1Gi")]);
        let hard = list(&[("pods", "2"), ("cpu", "2")]);
        assert_eq!(
            less_than_or_equal(&used, &hard),
            (false, vec!["pods".to_string()])
        );
        assert_eq!(
            less_than_or_equal(&hard, &used),
            (true, Vec::<String>::new())
        );
        assert_eq!(pretty_print(&mask(&used, &["cpu", "secrets"])), "cpu=2");
        assert_eq!(
            is_negative(&list(&[("a", "-1"), ("b", "0")])),
            vec!["a".to_string()]
        );
        assert_eq!(
            pretty_print(&remove_zeros(&list(&[("a", "0"), ("b", "1m")]))),
            "b=1m"
        );
        assert!(equals(&list(&[("m", "1Gi")]), &list(&[("m", "1024Mi")])));
        assert!(!equals(&list(&[("m", "1Gi")]), &list(&[])));
        assert_eq!(intersection(&["b", "a", "b", "c"], &["a", "b"]), ["a", "b"]);
        assert_eq!(difference(&["b", "a", "c"], &["a"]), ["b", "c"]);
        assert_eq!(
            object_count_name("apps", "deployments"),
            "count/deployments.apps"
        );
        assert_eq!(object_count_name("", "pods"), "count/pods");
        assert!(parse_list(Some(
            &[("cpu".to_string(), K8sQuantity("1x".into()))]
                .into_iter()
                .collect()
        ))
        .unwrap_err()
        .starts_with("cpu: "));
    }
}
