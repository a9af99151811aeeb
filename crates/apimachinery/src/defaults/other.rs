//! Smaller API groups, each following its upstream `pkg/apis/<group>/<version>/defaults.go`:
//! `networking.k8s.io` NetworkPolicy, `discovery.k8s.io` EndpointSlice, `scheduling.k8s.io`
//! PriorityClass, `storage.k8s.io` StorageClass and CSIDriver, `rbac.authorization.k8s.io` binding
//! subjects, `autoscaling` HorizontalPodAutoscaler (v1 and v2 behavior), `admissionregistration.k8s.io`
//! webhook configurations, and `apiextensions.k8s.io` CustomResourceDefinition names and conversion.

use serde_json::{json, Value};

use crate::validation::json::{child_obj, each_obj, set_default, set_default_str};

type Obj = serde_json::Map<String, Value>;

pub(crate) fn network_policy(np: &mut Obj) {
    let spec = child_obj(np, "spec");
    for dir in ["ingress", "egress"] {
        for rule in each_obj(spec, dir) {
            for port in each_obj(rule, "ports") {
                set_default(port, "protocol", Value::from("TCP"));
            }
        }
    }
    if spec
        .get("policyTypes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        let mut types = vec![Value::from("Ingress")];
        if spec
            .get("egress")
            .and_then(Value::as_array)
            .is_some_and(|e| !e.is_empty())
        {
            types.push(Value::from("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
}

pub(crate) fn endpoint_slice(es: &mut Obj) {
    for port in each_obj(es, "ports") {
        set_default(port, "name", Value::from(""));
        set_default(port, "protocol", Value::from("TCP"));
    }
}

pub(crate) fn priority_class(pc: &mut Obj) {
    set_default(pc, "preemptionPolicy", Value::from("PreemptLowerPriority"));
}

pub(crate) fn storage_class(sc: &mut Obj) {
    set_default(sc, "reclaimPolicy", Value::from("Delete"));
    set_default(sc, "volumeBindingMode", Value::from("Immediate"));
}

pub(crate) fn csi_driver(d: &mut Obj) {
    let spec = child_obj(d, "spec");
    set_default(spec, "attachRequired", Value::from(true));
    set_default(spec, "podInfoOnMount", Value::from(false));
    set_default(spec, "storageCapacity", Value::from(false));
    set_default(
        spec,
        "fsGroupPolicy",
        Value::from("ReadWriteOnceWithFSType"),
    );
    set_default(spec, "requiresRepublish", Value::from(false));
    set_default(spec, "seLinuxMount", Value::from(false));
    if spec
        .get("volumeLifecycleModes")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
}

/// `SetDefaults_Subject`: `apiGroup` by subject kind.
pub(crate) fn rbac_binding(b: &mut Obj) {
    for s in each_obj(b, "subjects") {
        // A ServiceAccount's group is "", which Go omits.
        if matches!(
            s.get("kind").and_then(Value::as_str),
            Some("User" | "Group")
        ) {
            set_default_str(s, "apiGroup", "rbac.authorization.k8s.io");
        }
    }
}

fn scaling_rules(defaults: Value, given: Option<&Value>) -> Value {
    let mut out = defaults;
    if let (Some(out), Some(given)) = (out.as_object_mut(), given.and_then(Value::as_object)) {
        for key in [
            "selectPolicy",
            "stabilizationWindowSeconds",
            "policies",
            "tolerance",
        ] {
            if let Some(v) = given.get(key).filter(|v| !v.is_null()) {
                out.insert(key.into(), v.clone());
            }
        }
    }
    out
}

/// `autoscaling/v2` `SetDefaults_HorizontalPodAutoscaler` (v1: only `minReplicas`).
pub(crate) fn hpa(h: &mut Obj) {
    let v1 = h.get("apiVersion").and_then(Value::as_str) == Some("autoscaling/v1");
    let spec = child_obj(h, "spec");
    set_default(spec, "minReplicas", Value::from(1));
    if v1 {
        return;
    }
    if spec
        .get("metrics")
        .and_then(Value::as_array)
        .is_none_or(Vec::is_empty)
    {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]),
        );
    }
    if let Some(b) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        let up = json!({"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
            {"type": "Pods", "value": 4, "periodSeconds": 15}, {"type": "Percent", "value": 100, "periodSeconds": 15}]});
        // No scale-down window: upstream leaves it to the controller's
        // --horizontal-pod-autoscaler-downscale-stabilization.
        let down = json!({"selectPolicy": "Max", "policies": [
            {"type": "Percent", "value": 100, "periodSeconds": 15}]});
        let scale_up = scaling_rules(up, b.get("scaleUp"));
        let scale_down = scaling_rules(down, b.get("scaleDown"));
        b.insert("scaleUp".into(), scale_up);
        b.insert("scaleDown".into(), scale_down);
    }
}

/// `admissionregistration/v1` webhook defaults.
pub(crate) fn webhook_configuration(wc: &mut Obj, mutating: bool) {
    for w in each_obj(wc, "webhooks") {
        set_default(w, "failurePolicy", Value::from("Fail"));
        set_default(w, "matchPolicy", Value::from("Equivalent"));
        set_default(w, "namespaceSelector", json!({}));
        set_default(w, "objectSelector", json!({}));
        set_default(w, "timeoutSeconds", Value::from(10));
        if mutating {
            set_default(w, "reinvocationPolicy", Value::from("Never"));
        }
        for r in each_obj(w, "rules") {
            set_default(r, "scope", Value::from("*"));
        }
        if let Some(svc) = w
            .get_mut("clientConfig")
            .and_then(|c| c.get_mut("service"))
            .and_then(Value::as_object_mut)
        {
            set_default(svc, "port", Value::from(443));
        }
    }
}

/// `apiextensions/v1` `SetDefaults_CustomResourceDefinitionSpec`.
pub(crate) fn crd(c: &mut Obj) {
    let spec = child_obj(c, "spec");
    let names = child_obj(spec, "names");
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default_str(names, "singular", &kind.to_lowercase());
    if !kind.is_empty() {
        set_default_str(names, "listKind", &format!("{kind}List"));
    }
    set_default(spec, "conversion", json!({"strategy": "None"}));
    if let Some(svc) = spec
        .get_mut("conversion")
        .and_then(|c| c.get_mut("webhook"))
        .and_then(|w| w.get_mut("clientConfig"))
        .and_then(|c| c.get_mut("service"))
        .and_then(Value::as_object_mut)
    {
        set_default(svc, "port", Value::from(443));
    }
}

/// kube-aggregator `apiregistration/v1` `SetDefaults_ServiceReference`: port 443.
pub(crate) fn api_service(a: &mut Obj) {
    if let Some(svc) = a
        .get_mut("spec")
        .and_then(|s| s.get_mut("service"))
        .and_then(Value::as_object_mut)
    {
        set_default(svc, "port", Value::from(443));
    }
}

/// `SetDefaults_MatchResources` and `SetDefaults_Rule` of the admission policies.
fn match_resources(mr: &mut Obj) {
    set_default(mr, "matchPolicy", Value::from("Equivalent"));
    set_default(mr, "namespaceSelector", json!({}));
    set_default(mr, "objectSelector", json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        for r in each_obj(mr, key) {
            set_default(r, "scope", Value::from("*"));
        }
    }
}

/// `admissionregistration/v1` ValidatingAdmissionPolicy and MutatingAdmissionPolicy:
/// `failurePolicy` Fail and the match constraints' defaults (upstream sets no
/// `reinvocationPolicy` default for the mutating kind; it is required).
pub(crate) fn admission_policy(p: &mut Obj) {
    let spec = child_obj(p, "spec");
    set_default(spec, "failurePolicy", Value::from("Fail"));
    if let Some(mc) = spec
        .get_mut("matchConstraints")
        .and_then(Value::as_object_mut)
    {
        match_resources(mc);
    }
}

/// `admissionregistration/v1` ValidatingAdmissionPolicyBinding and MutatingAdmissionPolicyBinding:
/// the match resources' defaults.
pub(crate) fn admission_policy_binding(b: &mut Obj) {
    if let Some(mr) = b
        .get_mut("spec")
        .and_then(|s| s.get_mut("matchResources"))
        .and_then(Value::as_object_mut)
    {
        match_resources(mr);
    }
}
