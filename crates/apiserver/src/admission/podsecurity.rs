//! Upstream's PodSecurity admission plugin (`plugin/pkg/admission/security/podsecurity` over
//! `k8s.io/pod-security-admission/admission`), validating only, on creates and updates of:
//!
//! - pods (and their `ephemeralcontainers`/`resize` subresources; `status`, `binding` and the
//!   other subresources that cannot change the spec are ignored): the namespace's enforce level
//!   refuses with 403 `pods "x" is forbidden: violates PodSecurity "restricted:latest": ...`, its
//!   warn level adds a `Warning`, its audit level an audit annotation. Updates are checked only
//!   when they change what the checks look at (images, containers added).
//! - pod controllers (Deployments, Jobs, ... and PodTemplates): warn and audit about their
//!   templates, never refuse.
//! - namespaces: policy labels must parse (422 otherwise); a stricter enforce level warns about
//!   the existing pods that would violate it.
//!
//! The policy logic is `apimachinery::podsecurity`; this file reads the namespace (watch cache,
//! then storage) and its pods (watch cache) and applies the decisions. Exemptions and default
//! levels come from [`Config`] (upstream's default configuration when built by name).

use std::time::Instant;

use apimachinery::podsecurity::admission::{
    has_pod_spec, IGNORED_POD_SUBRESOURCES, NAMESPACE_POD_CHECK_TIMEOUT,
};
use apimachinery::podsecurity::api::{AUDIT_ANNOTATION_PREFIX, ERROR_ANNOTATION};
use apimachinery::podsecurity::{Config, Decision, NamespaceDecision};
use apimachinery::status::{ApiError, Qualified};
use serde_json::{Map, Value};

use super::{Attributes, Operation};
use crate::ApiServer;

/// The plugin (upstream `PodSecurity`).
#[derive(Debug, Default)]
pub struct PodSecurity {
    config: Config,
}

impl PodSecurity {
    pub fn new(config: Config) -> PodSecurity {
        PodSecurity { config }
    }
}

#[async_trait::async_trait]
impl super::Plugin for PodSecurity {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        matches!(attrs.operation, Operation::Create | Operation::Update)
            && ((attrs.group.is_empty() && attrs.resource == "namespaces")
                || has_pod_spec(attrs.group, attrs.resource))
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let old = old.filter(|_| attrs.operation == Operation::Update);
        match (attrs.group, attrs.resource) {
            ("", "namespaces") => self.validate_namespace(api, attrs, object, old),
            ("", "pods") => self.validate_pod(api, attrs, object, old).await,
            _ => self.validate_pod_controller(api, attrs, object).await,
        }
    }
}

impl PodSecurity {
    async fn validate_pod(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        pod: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if attrs
            .subresource
            .is_some_and(|s| IGNORED_POD_SUBRESOURCES.contains(&s))
        {
            return Ok(());
        }
        if let Some(why) = self.exemption(attrs) {
            return apply(attrs, Decision::exempt(why));
        }
        let labels = match namespace_labels(api, attrs.namespace).await {
            Ok(Some(labels)) => labels,
            outcome => {
                let why = match outcome {
                    Err(e) => e.message,
                    _ => "not found".to_string(),
                };
                let err =
                    ApiError::internal(format!("failed to lookup namespace {:?}", attrs.namespace));
                annotate_error(attrs, &format!("{}: {why}", err.message));
                return Err(err);
            }
        };
        let decision = self.config.validate_pod(labels.as_ref(), pod, old);
        apply(attrs, decision)
    }

    async fn validate_pod_controller(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
    ) -> Result<(), ApiError> {
        if attrs.subresource.is_some() {
            return Ok(());
        }
        if let Some(why) = self.exemption(attrs) {
            return apply(attrs, Decision::exempt(why));
        }
        // A lookup failure does not block a controller, whose pods are checked anyway.
        let labels = match namespace_labels(api, attrs.namespace).await {
            Ok(Some(labels)) => labels,
            outcome => {
                let why = match outcome {
                    Err(e) => e.message,
                    _ => "not found".to_string(),
                };
                annotate_error(
                    attrs,
                    &format!("failed to lookup namespace {:?}: {why}", attrs.namespace),
                );
                return Ok(());
            }
        };
        let decision = self.config.validate_pod_controller(
            labels.as_ref(),
            attrs.group,
            attrs.resource,
            object,
        );
        apply(attrs, decision)
    }

    fn validate_namespace(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        namespace: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if attrs.subresource.is_some() {
            return Ok(());
        }
        match self.config.validate_namespace(namespace, old) {
            NamespaceDecision::Allow => Ok(()),
            NamespaceDecision::Invalid(errors) => Err(ApiError::invalid(
                &Qualified::new("", "Namespace"),
                attrs.name,
                &errors,
            )),
            NamespaceDecision::Warn(warning) => {
                attrs.outcome.warn(warning);
                Ok(())
            }
            NamespaceDecision::CheckPods(enforce) => {
                let name = crate::objects::name(namespace);
                let pods = super::cached_in_namespace::<Value>(api, "pods", name);
                let deadline = Instant::now() + NAMESPACE_POD_CHECK_TIMEOUT;
                let warnings =
                    self.config
                        .evaluate_pods_in_namespace(name, enforce, &pods, &mut || {
                            Instant::now() >= deadline
                        });
                for w in warnings {
                    attrs.outcome.warn(w);
                }
                Ok(())
            }
        }
    }

    /// Why the request is exempt, as the `exempt` audit annotation says it.
    fn exemption(&self, attrs: &Attributes<'_>) -> Option<&'static str> {
        if self.config.exempt_namespace(attrs.namespace) {
            Some("namespace")
        } else if self.config.exempt_user(&attrs.user.name) {
            Some("user")
        } else {
            None
        }
    }
}

/// Only the labels of a namespace are read (a namespace is decoded on every pod and controller
/// write, so the rest of it is skipped).
#[derive(serde::Deserialize)]
struct NamespaceLabels {
    #[serde(default)]
    metadata: LabelsOnly,
}

#[derive(Default, serde::Deserialize)]
struct LabelsOnly {
    #[serde(default)]
    labels: Option<Map<String, Value>>,
}

/// The labels of a namespace (`Some(None)` when it has none; `None` when it does not exist), from
/// the watch cache, else storage (the cache may lag a namespace created just before; upstream's
/// lister falls back to a live GET too).
async fn namespace_labels(
    api: &ApiServer,
    name: &str,
) -> Result<Option<Option<Map<String, Value>>>, ApiError> {
    let key = format!("/namespaces/{name}");
    let decode = |json: &[u8]| {
        serde_json::from_slice::<NamespaceLabels>(json)
            .map(|ns| Some(ns.metadata.labels))
            .map_err(ApiError::internal)
    };
    if let Some(cached) = api.caches.get("namespaces").and_then(|c| c.get(&key)) {
        return decode(&cached.json);
    }
    match api.store.get(&key).await {
        Ok(Some(kv)) => decode(&kv.value),
        Ok(None) => Ok(None),
        Err(e) => Err(ApiError::internal(e)),
    }
}

fn annotate_error(attrs: &Attributes<'_>, why: &str) {
    attrs
        .outcome
        .annotate(format!("{AUDIT_ANNOTATION_PREFIX}{ERROR_ANNOTATION}"), why);
}

/// Records a decision's audit annotations and warnings; its refusal becomes the 403 (upstream
/// `admission.NewForbidden` about the request's resource and name).
fn apply(attrs: &Attributes<'_>, decision: Decision) -> Result<(), ApiError> {
    for (key, value) in decision.audit_annotations {
        attrs.outcome.annotate(key, value);
    }
    for warning in decision.warnings {
        attrs.outcome.warn(warning);
    }
    match decision.forbidden {
        Some(why) => Err(ApiError::forbidden_about(
            &Qualified::new(attrs.group, attrs.resource),
            attrs.name,
            &why,
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::{Outcome, Plugin};
    use crate::authn::UserInfo;
    use apimachinery::podsecurity::Exemptions;
    use serde_json::json;

    fn attrs<'a>(
        group: &'a str,
        resource: &'a str,
        subresource: Option<&'a str>,
        operation: Operation,
        user: &'a UserInfo,
        outcome: &'a Outcome,
    ) -> Attributes<'a> {
        Attributes {
            group,
            version: "v1",
            kind: "Pod",
            resource,
            subresource,
            namespace: "ns",
            name: "x",
            operation,
            dry_run: false,
            user,
            outcome,
        }
    }

    #[test]
    fn handles_pods_controllers_and_namespaces_on_writes() {
        let (user, outcome) = (UserInfo::server().clone(), Outcome::default());
        let p = PodSecurity::default();
        let on =
            |group, resource, op| p.handles(&attrs(group, resource, None, op, &user, &outcome));
        assert!(on("", "pods", Operation::Create));
        assert!(on("", "pods", Operation::Update));
        assert!(!on("", "pods", Operation::Delete));
        assert!(!on("", "pods", Operation::Connect));
        assert!(on("apps", "deployments", Operation::Create));
        assert!(on("batch", "cronjobs", Operation::Update));
        assert!(on("", "podtemplates", Operation::Create));
        assert!(on("", "namespaces", Operation::Update));
        assert!(!on("", "configmaps", Operation::Create));
        assert!(!on("apps", "controllerrevisions", Operation::Create));
    }

    #[test]
    fn exemptions_by_namespace_and_user() {
        let p = PodSecurity::new(Config {
            exemptions: Exemptions {
                usernames: vec!["ci".into()],
                namespaces: vec!["kube-system".into()],
                runtime_classes: vec![],
            },
            ..Config::default()
        });
        let outcome = Outcome::default();
        let ci = UserInfo {
            name: "ci".into(),
            ..UserInfo::server().clone()
        };
        let a = attrs("", "pods", None, Operation::Create, &ci, &outcome);
        assert_eq!(p.exemption(&a), Some("user"));
        let mut a = attrs(
            "",
            "pods",
            None,
            Operation::Create,
            UserInfo::server(),
            &outcome,
        );
        assert_eq!(p.exemption(&a), None);
        a.namespace = "kube-system";
        assert_eq!(p.exemption(&a), Some("namespace"));
    }

    #[test]
    fn refusals_name_the_resource_and_keep_the_audit_trail() {
        let outcome = Outcome::default();
        let a = attrs(
            "",
            "pods",
            Some("ephemeralcontainers"),
            Operation::Update,
            UserInfo::server(),
            &outcome,
        );
        let labels = json!({"pod-security.kubernetes.io/enforce": "baseline"});
        let pod = json!({"metadata": {"name": "x"}, "spec": {"hostPID": true, "containers": [{"name": "c"}]}});
        let decision = Config::default().validate_pod(labels.as_object(), &pod, None);
        let err = apply(&a, decision).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            r#"pods "x" is forbidden: violates PodSecurity "baseline:latest": host namespaces (hostPID=true)"#
        );
        assert_eq!(
            outcome.audit_annotations(),
            [(
                "pod-security.kubernetes.io/enforce-policy".to_string(),
                "baseline:latest".to_string()
            )]
        );
        assert!(outcome.warnings().is_empty());
    }
}
