//! PodSecurity admission's decisions (upstream `admission_test.go` cases, with their texts).

use serde_json::{json, Map, Value};

use super::*;
use crate::podsecurity::api::Version;

fn labels(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn pod(name: &str, spec: Value) -> Value {
    json!({"metadata": {"name": name}, "spec": spec})
}

/// A pod no level objects to.
fn restricted_pod(name: &str) -> Value {
    pod(
        name,
        json!({"securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "image": "busybox", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]}),
    )
}

/// A pod only restricted objects to.
fn baseline_pod(name: &str) -> Value {
    pod(
        name,
        json!({"containers": [{"name": "c", "image": "busybox"}]}),
    )
}

/// A pod baseline objects to.
fn privileged_pod(name: &str) -> Value {
    pod(
        name,
        json!({"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]}),
    )
}

const RESTRICTED_DETAIL: &str = r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#;

fn annotation<'a>(d: &'a Decision, key: &str) -> Option<&'a str> {
    d.audit_annotations
        .iter()
        .find(|(k, _)| k == &format!("pod-security.kubernetes.io/{key}"))
        .map(|(_, v)| v.as_str())
}

#[test]
fn enforce_refuses_with_upstreams_message() {
    let c = Config::default();
    let l = labels(json!({"pod-security.kubernetes.io/enforce": "restricted"}));
    let d = c.validate_pod(Some(&l), &baseline_pod("x"), None);
    assert_eq!(
        d.forbidden.as_deref(),
        Some(format!(r#"violates PodSecurity "restricted:latest": {RESTRICTED_DETAIL}"#).as_str())
    );
    assert!(d.warnings.is_empty());
    assert_eq!(annotation(&d, "enforce-policy"), Some("restricted:latest"));
    assert!(
        c.validate_pod(Some(&l), &restricted_pod("ok"), None) == {
            let mut ok = Decision::default();
            ok.audit_annotations.push((
                "pod-security.kubernetes.io/enforce-policy".into(),
                "restricted:latest".into(),
            ));
            ok
        }
    );
}

#[test]
fn warn_and_audit_do_not_refuse() {
    let c = Config::default();
    let l = labels(json!({
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/audit": "baseline",
        "pod-security.kubernetes.io/audit-version": "v1.30",
    }));
    let d = c.validate_pod(Some(&l), &privileged_pod("p"), None);
    assert_eq!(d.forbidden, None);
    assert_eq!(d.warnings.len(), 1);
    assert!(
        d.warnings[0].starts_with(
            r#"would violate PodSecurity "restricted:latest": privileged (container "c" must not set securityContext.privileged=true), allowPrivilegeEscalation != false"#
        ),
        "{}",
        d.warnings[0]
    );
    assert_eq!(
        annotation(&d, "audit-violations"),
        Some(
            r#"would violate PodSecurity "baseline:v1.30": privileged (container "c" must not set securityContext.privileged=true)"#
        )
    );
    assert_eq!(annotation(&d, "enforce-policy"), Some("privileged:latest"));
}

#[test]
fn unlabeled_namespaces_are_privileged() {
    let d = Config::default().validate_pod(None, &privileged_pod("p"), None);
    assert_eq!(d.forbidden, None);
    assert!(d.warnings.is_empty());
    assert_eq!(annotation(&d, "enforce-policy"), Some("privileged:latest"));
}

#[test]
fn configured_defaults_apply_to_unlabeled_namespaces() {
    let mut c = Config::default();
    c.defaults.enforce = LevelVersion::new(Level::Baseline, Version::Latest);
    let d = c.validate_pod(None, &privileged_pod("p"), None);
    assert!(d.forbidden.is_some());
    // A label overrides the default.
    let l = labels(json!({"pod-security.kubernetes.io/enforce": "privileged"}));
    assert_eq!(
        c.validate_pod(Some(&l), &privileged_pod("p"), None)
            .forbidden,
        None
    );
}

#[test]
fn invalid_levels_enforce_restricted_with_an_error_annotation() {
    let c = Config::default();
    let l = labels(json!({"pod-security.kubernetes.io/enforce": "bogus"}));
    let d = c.validate_pod(Some(&l), &baseline_pod("x"), None);
    assert!(d
        .forbidden
        .as_deref()
        .is_some_and(|m| m.starts_with(r#"violates PodSecurity "restricted:latest": "#)));
    assert_eq!(
        annotation(&d, "error"),
        Some(
            r#"Failed to parse policy: metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#
        )
    );
}

#[test]
fn exempt_runtime_classes_are_not_checked() {
    let mut c = Config::default();
    c.exemptions.runtime_classes = vec!["kata".into()];
    let l = labels(json!({"pod-security.kubernetes.io/enforce": "restricted"}));
    let mut p = baseline_pod("x");
    p["spec"]["runtimeClassName"] = json!("kata");
    let d = c.validate_pod(Some(&l), &p, None);
    assert_eq!(d, Decision::exempt("runtimeClass"));
    assert!(!c.exempt_user("") && !c.exempt_namespace(""));
}

#[test]
fn only_significant_pod_updates_are_checked() {
    let c = Config::default();
    let l = labels(json!({"pod-security.kubernetes.io/enforce": "restricted"}));
    let old = baseline_pod("x");
    let mut relabeled = old.clone();
    relabeled["metadata"]["labels"] = json!({"a": "b"});
    assert!(!is_significant_pod_update(&relabeled, &old));
    assert_eq!(
        c.validate_pod(Some(&l), &relabeled, Some(&old)),
        Decision::default()
    );

    let mut reimaged = old.clone();
    reimaged["spec"]["containers"][0]["image"] = json!("busybox:2");
    assert!(is_significant_pod_update(&reimaged, &old));
    assert!(c
        .validate_pod(Some(&l), &reimaged, Some(&old))
        .forbidden
        .is_some());

    let mut debug = old.clone();
    debug["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox"}]);
    assert!(is_significant_pod_update(&debug, &old));
    assert!(!is_significant_pod_update(&debug, &debug));

    let mut seccomp = old.clone();
    seccomp["metadata"]["annotations"] =
        json!({"container.seccomp.security.alpha.kubernetes.io/c": "unconfined"});
    assert!(is_significant_pod_update(&seccomp, &old));
}

#[test]
fn controllers_get_warnings_never_refusals() {
    let c = Config::default();
    let l = labels(json!({
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "restricted",
    }));
    let deployment = json!({"metadata": {"name": "d"}, "spec": {"template": {
        "metadata": {"labels": {"app": "d"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}});
    let d = c.validate_pod_controller(Some(&l), "apps", "deployments", &deployment);
    assert_eq!(d.forbidden, None);
    assert_eq!(
        d.warnings,
        [format!(
            r#"would violate PodSecurity "restricted:latest": {RESTRICTED_DETAIL}"#
        )]
    );
    assert_eq!(annotation(&d, "enforce-policy"), None);
    // Enforce alone says nothing about templates.
    let enforce_only = labels(json!({"pod-security.kubernetes.io/enforce": "restricted"}));
    assert_eq!(
        c.validate_pod_controller(Some(&enforce_only), "apps", "deployments", &deployment),
        Decision::default()
    );
    let cronjob = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "c", "image": "busybox"}]}}}}}});
    let d = c.validate_pod_controller(Some(&l), "batch", "cronjobs", &cronjob);
    assert_eq!(d.warnings.len(), 1);
}

#[test]
fn pod_specs_are_found_in_every_controller() {
    let spec = json!({"containers": [{"name": "c"}]});
    let template = json!({"metadata": {"labels": {"a": "b"}}, "spec": spec});
    let cases = [
        ("", "pods", json!({"metadata": {"name": "p"}, "spec": spec})),
        ("", "podtemplates", json!({"template": template})),
        (
            "",
            "replicationcontrollers",
            json!({"spec": {"template": template}}),
        ),
        (
            "apps",
            "replicasets",
            json!({"spec": {"template": template}}),
        ),
        (
            "apps",
            "deployments",
            json!({"spec": {"template": template}}),
        ),
        (
            "apps",
            "statefulsets",
            json!({"spec": {"template": template}}),
        ),
        (
            "apps",
            "daemonsets",
            json!({"spec": {"template": template}}),
        ),
        ("batch", "jobs", json!({"spec": {"template": template}})),
        (
            "batch",
            "cronjobs",
            json!({"spec": {"jobTemplate": {"spec": {"template": template}}}}),
        ),
    ];
    for (group, resource, object) in cases {
        assert!(has_pod_spec(group, resource), "{resource}");
        let (_, got) = extract_pod_spec(group, resource, &object).expect(resource);
        assert_eq!(got, &spec, "{resource}");
    }
    assert!(extract_pod_spec("", "replicationcontrollers", &json!({"spec": {}})).is_none());
    assert!(!has_pod_spec("", "configmaps"));
    assert!(!has_pod_spec("apps", "pods"));
}

fn namespace(labels: Value) -> Value {
    json!({"metadata": {"name": "ns", "labels": labels}})
}

#[test]
fn namespaces_with_invalid_labels_are_refused() {
    let c = Config::default();
    let bad = namespace(json!({"pod-security.kubernetes.io/enforce": "bogus"}));
    let NamespaceDecision::Invalid(errs) = c.validate_namespace(&bad, None) else {
        panic!("expected invalid");
    };
    assert_eq!(
        errs[0].to_string(),
        r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#
    );
    // An update that keeps the same invalid labels is allowed (so other changes still work).
    let mut relabeled = bad.clone();
    relabeled["metadata"]["labels"]["team"] = json!("a");
    assert_eq!(
        c.validate_namespace(&relabeled, Some(&bad)),
        NamespaceDecision::Allow
    );
    // A change to another invalid value is not.
    let worse = namespace(json!({"pod-security.kubernetes.io/enforce": "worse"}));
    assert!(matches!(
        c.validate_namespace(&worse, Some(&bad)),
        NamespaceDecision::Invalid(_)
    ));
    let bad_version = namespace(json!({"pod-security.kubernetes.io/warn-version": "v2"}));
    assert!(matches!(
        c.validate_namespace(&bad_version, Some(&namespace(json!({})))),
        NamespaceDecision::Invalid(_)
    ));
}

#[test]
fn stricter_enforce_levels_check_existing_pods() {
    let c = Config::default();
    let plain = namespace(json!({}));
    let restricted = namespace(json!({"pod-security.kubernetes.io/enforce": "restricted"}));
    let baseline = namespace(json!({"pod-security.kubernetes.io/enforce": "baseline"}));
    assert_eq!(
        c.validate_namespace(&restricted, Some(&plain)),
        NamespaceDecision::CheckPods(LevelVersion::new(Level::Restricted, Version::Latest))
    );
    // Relaxed at the same version, unchanged, or privileged: nothing to check.
    assert_eq!(
        c.validate_namespace(&baseline, Some(&restricted)),
        NamespaceDecision::Allow
    );
    assert_eq!(
        c.validate_namespace(&restricted, Some(&restricted)),
        NamespaceDecision::Allow
    );
    assert_eq!(
        c.validate_namespace(&plain, Some(&restricted)),
        NamespaceDecision::Allow
    );
    // A version change of the same level is checked.
    let pinned = namespace(json!({"pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "v1.20"}));
    assert!(matches!(
        c.validate_namespace(&baseline, Some(&pinned)),
        NamespaceDecision::CheckPods(_)
    ));
    assert_eq!(
        c.validate_namespace(&restricted, None),
        NamespaceDecision::Allow
    );
}

#[test]
fn exempt_namespaces_warn_that_their_labels_are_ignored() {
    let mut c = Config::default();
    c.exemptions.namespaces = vec!["ns".into()];
    let labeled = namespace(json!({"pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/warn": "baseline"}));
    let want = NamespaceDecision::Warn(
        r#"namespace "ns" is exempt from Pod Security, and the policy (enforce=restricted:latest, warn=baseline:latest) will be ignored"#.into(),
    );
    assert_eq!(c.validate_namespace(&labeled, None), want);
    assert_eq!(
        c.validate_namespace(&labeled, Some(&namespace(json!({})))),
        want
    );
    assert_eq!(
        c.validate_namespace(&namespace(json!({})), None),
        NamespaceDecision::Allow
    );
}

fn owned(mut p: Value, uid: &str) -> Value {
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": uid, "controller": true}]);
    p
}

#[test]
fn existing_pods_are_summarized_per_violation() {
    let c = Config::default();
    let enforce = LevelVersion::new(Level::Baseline, Version::Latest);
    let pods = vec![
        privileged_pod("b"),
        privileged_pod("a"),
        privileged_pod("c"),
        baseline_pod("fine"),
        pod(
            "net",
            json!({"hostNetwork": true, "containers": [{"name": "c"}]}),
        ),
    ];
    let warnings = c.evaluate_pods_in_namespace("ns", enforce, &pods, &mut || false);
    assert_eq!(
        warnings,
        [
            r#"existing pods in namespace "ns" violate the new PodSecurity enforce level "baseline:latest""#,
            "a (and 2 other pods): privileged",
            "net: host namespaces",
        ]
    );
    let warnings = c.evaluate_pods_in_namespace("ns", enforce, &pods[..2], &mut || false);
    assert_eq!(warnings[1], "a (and 1 other pod): privileged");
    assert!(c
        .evaluate_pods_in_namespace("ns", enforce, &[baseline_pod("x")], &mut || false)
        .is_empty());
}

#[test]
fn existing_pod_checks_are_bounded() {
    let c = Config::default();
    let enforce = LevelVersion::new(Level::Baseline, Version::Latest);
    let pods: Vec<Value> = (0..5).map(|i| privileged_pod(&format!("p{i}"))).collect();
    let mut calls = 0;
    let warnings = c.evaluate_pods_in_namespace("ns", enforce, &pods, &mut || {
        calls += 1;
        calls >= 2
    });
    assert_eq!(
        warnings[0],
        "new PodSecurity enforce level only checked against the first 2 of 5 existing pods"
    );
    assert_eq!(warnings[2], "p0 (and 1 other pod): privileged");

    let many: Vec<Value> = (0..NAMESPACE_MAX_PODS_TO_CHECK + 1)
        .map(|i| baseline_pod(&format!("p{i}")))
        .collect();
    let warnings = c.evaluate_pods_in_namespace("ns", enforce, &many, &mut || false);
    assert_eq!(
        warnings,
        ["new PodSecurity enforce level only checked against the first 3000 of 3001 existing pods"]
    );
}

#[test]
fn one_pod_per_controller_is_checked_first() {
    let mut c = Config::default();
    c.exemptions.runtime_classes = vec!["kata".into()];
    let mut exempt = privileged_pod("exempt");
    exempt["spec"]["runtimeClassName"] = json!("kata");
    let pods = vec![
        owned(privileged_pod("r1"), "u1"),
        owned(privileged_pod("r2"), "u1"),
        exempt,
        pod("net", json!({"hostNetwork": true})),
    ];
    let order: Vec<&str> = c
        .prioritize_pods(&pods)
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(order, ["r1", "net", "r2"]);
}
