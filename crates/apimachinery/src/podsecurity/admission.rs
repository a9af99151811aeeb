//! The decisions of PodSecurity admission without its I/O (upstream
//! `pod-security-admission/admission/admission.go`): which pod spec an object carries, which pod
//! updates need checking, what a namespace's policy makes of a pod (refusal, warnings, audit
//! annotations), what a namespace label change does, and the warnings about a namespace's
//! existing pods. The API server's plugin reads the namespace and its pods and applies these.

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::api::{
    aggregate_errors, policy_to_evaluate, Level, LevelVersion, Policy, AUDIT_ANNOTATION_PREFIX,
    AUDIT_LEVEL_LABEL, AUDIT_VERSION_LABEL, AUDIT_VIOLATIONS_ANNOTATION,
    ENFORCED_POLICY_ANNOTATION, ENFORCE_LEVEL_LABEL, ENFORCE_VERSION_LABEL, ERROR_ANNOTATION,
    EXEMPTION_REASON_ANNOTATION, WARN_LEVEL_LABEL, WARN_VERSION_LABEL,
};
use super::helpers::{field, go_quote, list, path, str_at};
use super::registry::{evaluate_pod, Aggregate};
use crate::validation::field::FieldError;

/// Most existing pods checked when a namespace's enforce level changes.
pub const NAMESPACE_MAX_PODS_TO_CHECK: usize = 3000;
/// Longest time spent checking them.
pub const NAMESPACE_POD_CHECK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Requests and pods the policy never applies to (upstream `PodSecurityConfiguration.exemptions`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Exemptions {
    pub usernames: Vec<String>,
    pub namespaces: Vec<String>,
    pub runtime_classes: Vec<String>,
}

/// Upstream's `PodSecurityConfiguration`: the policy of unlabeled namespaces and the exemptions.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    pub defaults: Policy,
    pub exemptions: Exemptions,
}

/// Pod subresources whose requests cannot change what the checks look at.
pub const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// Whether objects of this resource carry a pod template (upstream `DefaultPodSpecExtractor`).
pub fn has_pod_spec(group: &str, resource: &str) -> bool {
    matches!(
        (group, resource),
        ("", "pods" | "replicationcontrollers" | "podtemplates")
            | (
                "apps",
                "replicasets" | "deployments" | "statefulsets" | "daemonsets"
            )
            | ("batch", "jobs" | "cronjobs")
    )
}

static NULL: Value = Value::Null;

/// The pod metadata and spec an object of `resource` carries: the pod's own, or its template's.
/// `None` when the object has none (a ReplicationController without a template).
pub fn extract_pod_spec<'a>(
    group: &str,
    resource: &str,
    object: &'a Value,
) -> Option<(&'a Value, &'a Value)> {
    let template = match (group, resource) {
        ("", "pods") => Some(object),
        ("", "podtemplates") => Some(field(object, "template").unwrap_or(&NULL)),
        // The only controller whose template is optional.
        ("", "replicationcontrollers") => path(object, &["spec", "template"]),
        ("batch", "cronjobs") => {
            Some(path(object, &["spec", "jobTemplate", "spec", "template"]).unwrap_or(&NULL))
        }
        _ if has_pod_spec(group, resource) => {
            Some(path(object, &["spec", "template"]).unwrap_or(&NULL))
        }
        _ => None,
    }?;
    Some((
        field(template, "metadata").unwrap_or(&NULL),
        field(template, "spec").unwrap_or(&NULL),
    ))
}

/// Whether a pod update changes anything the checks could object to: containers added or
/// removed, a container's image, a container's seccomp annotation, or an ephemeral container
/// added (upstream `isSignificantPodUpdate`; everything else in a running pod's spec is
/// immutable or harmless).
pub fn is_significant_pod_update(new: &Value, old: &Value) -> bool {
    let (spec, old_spec) = (
        field(new, "spec").unwrap_or(&NULL),
        field(old, "spec").unwrap_or(&NULL),
    );
    let significant = |c: &Value, o: &Value| {
        if str_at(c, &["image"]) != str_at(o, &["image"]) {
            return true;
        }
        let key = format!(
            "container.seccomp.security.alpha.kubernetes.io/{}",
            str_at(c, &["name"])
        );
        let annotation = |pod: &Value| {
            path(pod, &["metadata", "annotations", &key])
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        annotation(new) != annotation(old)
    };
    for key in ["containers", "initContainers"] {
        let (now, before) = (list(spec, key), list(old_spec, key));
        if now.len() != before.len() || now.iter().zip(before).any(|(c, o)| significant(c, o)) {
            return true;
        }
    }
    let before = list(old_spec, "ephemeralContainers");
    list(spec, "ephemeralContainers").iter().any(|c| {
        let name = str_at(c, &["name"]);
        match before.iter().find(|o| str_at(o, &["name"]) == name) {
            None => true,
            Some(o) => significant(c, o),
        }
    })
}

/// What admission does with a request: refuse it, warn, and record audit annotations.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The reason of a 403, e.g. `violates PodSecurity "restricted:latest": ...`.
    pub forbidden: Option<String>,
    pub warnings: Vec<String>,
    /// Full keys (`pod-security.kubernetes.io/enforce-policy`) and values.
    pub audit_annotations: Vec<(String, String)>,
}

impl Decision {
    fn annotate(&mut self, key: &str, value: impl Into<String>) {
        self.audit_annotations
            .push((format!("{AUDIT_ANNOTATION_PREFIX}{key}"), value.into()));
    }

    /// An allowed request whose only trace is why it was exempt (`namespace`, `user`,
    /// `runtimeClass`).
    pub fn exempt(reason: &str) -> Decision {
        let mut d = Decision::default();
        d.annotate(EXEMPTION_REASON_ANNOTATION, reason);
        d
    }
}

/// What a namespace create or update leads to.
#[derive(Clone, Debug, PartialEq)]
pub enum NamespaceDecision {
    Allow,
    /// Invalid policy labels: a 422 with these causes.
    Invalid(Vec<FieldError>),
    /// Allowed, with this warning.
    Warn(String),
    /// A stricter enforce level: allowed, with warnings about existing pods that would violate it
    /// ([`Config::evaluate_pods_in_namespace`]).
    CheckPods(LevelVersion),
}

fn labels_of(object: &Value) -> Option<&Map<String, Value>> {
    path(object, &["metadata", "labels"]).and_then(Value::as_object)
}

impl Config {
    /// The policy of a namespace with these labels, and the errors of those that do not parse.
    pub fn policy(&self, labels: Option<&Map<String, Value>>) -> (Policy, Vec<FieldError>) {
        policy_to_evaluate(labels, &self.defaults)
    }

    pub fn exempt_namespace(&self, namespace: &str) -> bool {
        !namespace.is_empty() && self.exemptions.namespaces.iter().any(|n| n == namespace)
    }

    pub fn exempt_user(&self, username: &str) -> bool {
        !username.is_empty() && self.exemptions.usernames.iter().any(|u| u == username)
    }

    fn exempt_runtime_class(&self, spec: &Value) -> bool {
        let class = str_at(spec, &["runtimeClassName"]);
        !class.is_empty() && self.exemptions.runtime_classes.iter().any(|c| c == class)
    }

    /// A pod create or update (`old` set) in a namespace with `namespace_labels`, after the
    /// namespace and user exemptions (upstream `ValidatePod` from the namespace lookup on).
    pub fn validate_pod(
        &self,
        namespace_labels: Option<&Map<String, Value>>,
        pod: &Value,
        old: Option<&Value>,
    ) -> Decision {
        let (policy, errors) = self.policy(namespace_labels);
        if errors.is_empty() && policy.fully_privileged() {
            let mut d = Decision::default();
            d.annotate(
                ENFORCED_POLICY_ANNOTATION,
                LevelVersion::PRIVILEGED_LATEST.to_string(),
            );
            return d;
        }
        if old.is_some_and(|old| !is_significant_pod_update(pod, old)) {
            return Decision::default();
        }
        let meta = field(pod, "metadata").unwrap_or(&NULL);
        let spec = field(pod, "spec").unwrap_or(&NULL);
        self.evaluate_pod(&policy, &errors, meta, spec, true)
    }

    /// A create or update of a pod controller (Deployment, Job, ...): warnings and audit
    /// annotations about its template, never a refusal (the pods it makes are refused instead).
    pub fn validate_pod_controller(
        &self,
        namespace_labels: Option<&Map<String, Value>>,
        group: &str,
        resource: &str,
        object: &Value,
    ) -> Decision {
        let (policy, errors) = self.policy(namespace_labels);
        if errors.is_empty()
            && policy.warn.level == Level::Privileged
            && policy.audit.level == Level::Privileged
        {
            return Decision::default();
        }
        match extract_pod_spec(group, resource, object) {
            Some((meta, spec)) => self.evaluate_pod(&policy, &errors, meta, spec, false),
            None => Decision::default(),
        }
    }

    /// Evaluates a pod (or template) against a namespace's policy: enforce (when `enforce`),
    /// then audit, then warn, evaluating each distinct level+version once (upstream
    /// `EvaluatePod`). A refused request gets no warnings.
    pub fn evaluate_pod(
        &self,
        policy: &Policy,
        policy_errors: &[FieldError],
        meta: &Value,
        spec: &Value,
        enforce: bool,
    ) -> Decision {
        if self.exempt_runtime_class(spec) {
            return Decision::exempt("runtimeClass");
        }
        let mut d = Decision::default();
        if !policy_errors.is_empty() {
            d.annotate(
                ERROR_ANNOTATION,
                format!(
                    "Failed to parse policy: {}",
                    aggregate_errors(policy_errors)
                ),
            );
        }
        let mut results: HashMap<LevelVersion, Aggregate> = HashMap::new();
        let mut result = |lv: LevelVersion| {
            results
                .entry(lv)
                .or_insert_with(|| evaluate_pod(lv, meta, spec))
                .clone()
        };
        if enforce {
            d.annotate(ENFORCED_POLICY_ANNOTATION, policy.enforce.to_string());
            let r = result(policy.enforce);
            if !r.allowed() {
                d.forbidden = Some(format!(
                    "violates PodSecurity {}: {}",
                    go_quote(&policy.enforce.to_string()),
                    r.forbidden_detail()
                ));
            }
        }
        let r = result(policy.audit);
        if !r.allowed() {
            d.annotate(AUDIT_VIOLATIONS_ANNOTATION, would_violate(policy.audit, &r));
        }
        if d.forbidden.is_none() {
            let r = result(policy.warn);
            if !r.allowed() {
                d.warnings.push(would_violate(policy.warn, &r));
            }
        }
        d
    }

    /// A namespace create (`old` unset) or update: policy labels must parse (on update, unless
    /// they were invalid the same way before); a stricter enforce level checks existing pods
    /// (upstream `ValidateNamespace`).
    pub fn validate_namespace(&self, namespace: &Value, old: Option<&Value>) -> NamespaceDecision {
        let name = str_at(namespace, &["metadata", "name"]);
        let labels = labels_of(namespace);
        let (policy, errors) = self.policy(labels);
        let Some(old) = old else {
            if !errors.is_empty() {
                return NamespaceDecision::Invalid(errors);
            }
            return self.exempt_namespace_warning_decision(name, &policy, labels);
        };
        let (old_policy, old_errors) = self.policy(labels_of(old));
        if !errors.is_empty() && (old_errors.is_empty() || errors != old_errors) {
            return NamespaceDecision::Invalid(errors);
        }
        // Nothing to check when the enforce level is unchanged, privileged, or relaxed at the
        // same version.
        if policy.enforce == old_policy.enforce
            || policy.enforce.level == Level::Privileged
            || (policy.enforce.version == old_policy.enforce.version
                && policy.enforce.level <= old_policy.enforce.level)
        {
            return NamespaceDecision::Allow;
        }
        if self.exempt_namespace(name) {
            return self.exempt_namespace_warning_decision(name, &policy, labels);
        }
        NamespaceDecision::CheckPods(policy.enforce)
    }

    fn exempt_namespace_warning_decision(
        &self,
        namespace: &str,
        policy: &Policy,
        labels: Option<&Map<String, Value>>,
    ) -> NamespaceDecision {
        if !self.exempt_namespace(namespace) {
            return NamespaceDecision::Allow;
        }
        match self.exempt_namespace_warning(namespace, policy, labels) {
            Some(w) => NamespaceDecision::Warn(w),
            None => NamespaceDecision::Allow,
        }
    }

    /// The warning for an exempt namespace whose labels ask for a policy that will not apply.
    pub fn exempt_namespace_warning(
        &self,
        namespace: &str,
        policy: &Policy,
        labels: Option<&Map<String, Value>>,
    ) -> Option<String> {
        if policy.fully_privileged() || policy.equivalent(&self.defaults) {
            return None;
        }
        let has = |key: &str| labels.is_some_and(|l| l.contains_key(key));
        // Only the non-privileged modes the labels set explicitly.
        let modes = [
            (
                "enforce",
                policy.enforce,
                ENFORCE_LEVEL_LABEL,
                ENFORCE_VERSION_LABEL,
            ),
            (
                "audit",
                policy.audit,
                AUDIT_LEVEL_LABEL,
                AUDIT_VERSION_LABEL,
            ),
            ("warn", policy.warn, WARN_LEVEL_LABEL, WARN_VERSION_LABEL),
        ];
        let set: Vec<String> = modes
            .iter()
            .filter(|(_, lv, level, version)| {
                lv.level != Level::Privileged && (has(level) || has(version))
            })
            .map(|(mode, lv, _, _)| format!("{mode}={lv}"))
            .collect();
        Some(format!(
            "namespace {} is exempt from Pod Security, and the policy ({}) will be ignored",
            go_quote(namespace),
            set.join(", ")
        ))
    }

    /// The warnings about a namespace's existing pods under a new enforce level (upstream
    /// `EvaluatePodsInNamespace`): pods of exempt runtime classes are skipped, one pod per
    /// controller is checked first, at most [`NAMESPACE_MAX_PODS_TO_CHECK`] are checked and the
    /// check stops once `expired` says so; pods with the same violations share one warning
    /// naming the first of them by name.
    pub fn evaluate_pods_in_namespace(
        &self,
        namespace: &str,
        enforce: LevelVersion,
        pods: &[Value],
        expired: &mut dyn FnMut() -> bool,
    ) -> Vec<String> {
        let prioritized = self.prioritize_pods(pods);
        let total = prioritized.len();
        let to_check = &prioritized[..total.min(NAMESPACE_MAX_PODS_TO_CHECK)];
        let mut checked = to_check.len();
        // reason -> (lexically first pod name, pod count), in first-seen order.
        let mut seen: Vec<(String, String, usize)> = Vec::new();
        for (i, pod) in to_check.iter().enumerate() {
            let meta = field(pod, "metadata").unwrap_or(&NULL);
            let spec = field(pod, "spec").unwrap_or(&NULL);
            let r = evaluate_pod(enforce, meta, spec);
            if !r.allowed() {
                let reason = r.forbidden_reason();
                let name = str_at(meta, &["name"]);
                match seen.iter_mut().find(|(w, _, _)| *w == reason) {
                    Some((_, first, count)) => {
                        if name < first.as_str() {
                            *first = name.to_string();
                        }
                        *count += 1;
                    }
                    None => seen.push((reason, name.to_string(), 1)),
                }
            }
            if expired() {
                checked = i + 1;
                break;
            }
        }
        let mut warnings = Vec::new();
        if checked < total {
            warnings.push(format!(
                "new PodSecurity enforce level only checked against the first {checked} of {total} existing pods"
            ));
        }
        if !seen.is_empty() {
            warnings.push(format!(
                "existing pods in namespace {} violate the new PodSecurity enforce level {}",
                go_quote(namespace),
                go_quote(&enforce.to_string())
            ));
        }
        let mut pod_warnings: Vec<String> = seen
            .into_iter()
            .map(|(reason, first, count)| match count {
                1 => format!("{first}: {reason}"),
                2 => format!("{first} (and 1 other pod): {reason}"),
                n => format!("{first} (and {} other pods): {reason}", n - 1),
            })
            .collect();
        pod_warnings.sort();
        warnings.extend(pod_warnings);
        warnings
    }

    /// Pods of exempt runtime classes dropped; the first pod of each controller, then pods
    /// without one, ahead of the other pods of a controller already represented.
    fn prioritize_pods<'a>(&self, pods: &'a [Value]) -> Vec<&'a Value> {
        let mut first = Vec::new();
        let mut duplicates = Vec::new();
        let mut controllers: HashSet<&str> = HashSet::new();
        for pod in pods {
            if self.exempt_runtime_class(field(pod, "spec").unwrap_or(&NULL)) {
                continue;
            }
            let controller = path(pod, &["metadata", "ownerReferences"])
                .and_then(Value::as_array)
                .and_then(|refs| {
                    refs.iter()
                        .find(|r| path(r, &["controller"]).and_then(Value::as_bool) == Some(true))
                })
                .map(|r| str_at(r, &["uid"]));
            match controller {
                Some(uid) if !controllers.insert(uid) => duplicates.push(pod),
                _ => first.push(pod),
            }
        }
        first.extend(duplicates);
        first
    }
}

fn would_violate(lv: LevelVersion, r: &Aggregate) -> String {
    format!(
        "would violate PodSecurity {}: {}",
        go_quote(&lv.to_string()),
        r.forbidden_detail()
    )
}

#[cfg(test)]
#[path = "admission_tests.rs"]
mod tests;
