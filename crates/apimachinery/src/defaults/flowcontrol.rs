//! `flowcontrol.apiserver.k8s.io/v1` defaults (upstream `pkg/apis/flowcontrol/v1/defaults.go` and
//! its generated defaulters): FlowSchema `matchingPrecedence` 1000; a limited priority level's
//! `nominalConcurrencyShares` 30 and `lendablePercent` 0, its queuing 64 queues, hand size 8 and
//! queue length limit 50; an exempt level's `nominalConcurrencyShares` and `lendablePercent` 0.

use serde_json::Value;

use crate::validation::json::{child_obj, set_default};

type Obj = serde_json::Map<String, Value>;

/// Sets `key` when absent, `null` or 0 (Go's zero value of a non-pointer integer).
fn default_nonzero(map: &mut Obj, key: &str, value: i64) {
    let zero = match map.get(key) {
        None | Some(Value::Null) => true,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
        _ => false,
    };
    if zero {
        map.insert(key.to_string(), Value::from(value));
    }
}

/// `SetDefaults_FlowSchemaSpec`.
pub(crate) fn flow_schema(fs: &mut Obj) {
    default_nonzero(child_obj(fs, "spec"), "matchingPrecedence", 1000);
}

/// The defaulters of a PriorityLevelConfiguration, run on the parts that are present.
pub(crate) fn priority_level(pl: &mut Obj) {
    let spec = child_obj(pl, "spec");
    if let Some(ex) = spec.get_mut("exempt").and_then(Value::as_object_mut) {
        set_default(ex, "nominalConcurrencyShares", Value::from(0));
        set_default(ex, "lendablePercent", Value::from(0));
    }
    if let Some(lim) = spec.get_mut("limited").and_then(Value::as_object_mut) {
        // A pointer in v1: an explicit 0 stays.
        set_default(lim, "nominalConcurrencyShares", Value::from(30));
        set_default(lim, "lendablePercent", Value::from(0));
        if let Some(q) = lim
            .get_mut("limitResponse")
            .and_then(|lr| lr.get_mut("queuing"))
            .and_then(Value::as_object_mut)
        {
            default_nonzero(q, "handSize", 8);
            default_nonzero(q, "queues", 64);
            default_nonzero(q, "queueLengthLimit", 50);
        }
    }
}

/// The new 1.36 kinds' defaults through `apply_defaults`, then validated through the dispatch:
/// flowcontrol here, and the APIService and mutating admission policy defaults of `other`.
#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use crate::defaults::apply_defaults;
    use crate::validation::{validate_create, validate_update};

    fn defaulted(group: &str, kind: &str, mut obj: Value) -> Value {
        apply_defaults(group, kind, &mut obj);
        obj
    }

    fn errors(group: &str, kind: &str, obj: &Value) -> Vec<String> {
        validate_create(group, kind, obj)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const FC: &str = "flowcontrol.apiserver.k8s.io";

    #[test]
    fn flowcontrol_defaults() {
        let fs = defaulted(
            FC,
            "FlowSchema",
            json!({"metadata": {"name": "web"}, "spec": {"priorityLevelConfiguration": {"name": "web"}}}),
        );
        assert_eq!(fs["spec"]["matchingPrecedence"], 1000);
        assert_eq!(errors(FC, "FlowSchema", &fs), Vec::<String>::new());

        let pl = defaulted(
            FC,
            "PriorityLevelConfiguration",
            json!({"metadata": {"name": "web"}, "spec": {"type": "Limited", "limited": {
                "limitResponse": {"type": "Queue", "queuing": {}}}}}),
        );
        assert_eq!(
            pl["spec"]["limited"],
            json!({"nominalConcurrencyShares": 30, "lendablePercent": 0, "limitResponse": {"type": "Queue",
                "queuing": {"handSize": 8, "queues": 64, "queueLengthLimit": 50}}})
        );
        assert_eq!(
            errors(FC, "PriorityLevelConfiguration", &pl),
            Vec::<String>::new()
        );

        // v1's nominalConcurrencyShares is a pointer: an explicit 0 stays.
        let zero = defaulted(
            FC,
            "PriorityLevelConfiguration",
            json!({"metadata": {"name": "web"}, "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 0, "limitResponse": {"type": "Reject"}}}}),
        );
        assert_eq!(zero["spec"]["limited"]["nominalConcurrencyShares"], 0);
        assert_eq!(
            errors(FC, "PriorityLevelConfiguration", &zero),
            Vec::<String>::new()
        );

        let ex = defaulted(
            FC,
            "PriorityLevelConfiguration",
            json!({"metadata": {"name": "exempt"}, "spec": {"type": "Exempt", "exempt": {}}}),
        );
        assert_eq!(
            ex["spec"]["exempt"],
            json!({"nominalConcurrencyShares": 0, "lendablePercent": 0})
        );
        assert_eq!(
            errors(FC, "PriorityLevelConfiguration", &ex),
            Vec::<String>::new()
        );
        let mut tuned = ex.clone();
        tuned["spec"]["exempt"]["lendablePercent"] = json!(20);
        assert!(validate_update(FC, "PriorityLevelConfiguration", &tuned, &ex).is_empty());
    }

    #[test]
    fn api_service_and_admission_policy_defaults() {
        const AR: &str = "apiregistration.k8s.io";
        let svc = defaulted(
            AR,
            "APIService",
            json!({"metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": {"group": "metrics.k8s.io",
                "version": "v1beta1", "groupPriorityMinimum": 100, "versionPriority": 100,
                "service": {"namespace": "kube-system", "name": "metrics-server"}, "insecureSkipTLSVerify": true}}),
        );
        assert_eq!(svc["spec"]["service"]["port"], 443);
        assert_eq!(errors(AR, "APIService", &svc), Vec::<String>::new());

        const ADM: &str = "admissionregistration.k8s.io";
        let policy = defaulted(
            ADM,
            "MutatingAdmissionPolicy",
            json!({"apiVersion": "admissionregistration.k8s.io/v1", "metadata": {"name": "p"}, "spec": {
                "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                    "operations": ["CREATE"], "resources": ["pods"]}]},
                "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}],
                "reinvocationPolicy": "IfNeeded"}}),
        );
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        assert_eq!(
            policy["spec"]["matchConstraints"],
            json!({"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
                "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["pods"], "scope": "*"}]})
        );
        assert_eq!(
            errors(ADM, "MutatingAdmissionPolicy", &policy),
            Vec::<String>::new()
        );
        // No reinvocationPolicy default upstream: it stays required.
        let mut bare = policy.clone();
        bare["spec"]
            .as_object_mut()
            .map(|s| s.remove("reinvocationPolicy"));
        assert_eq!(
            errors(ADM, "MutatingAdmissionPolicy", &bare),
            vec!["spec.reinvocationPolicy: Required value"]
        );

        let binding = defaulted(
            ADM,
            "MutatingAdmissionPolicyBinding",
            json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "matchResources": {}}}),
        );
        assert_eq!(
            binding["spec"]["matchResources"],
            json!({"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {}})
        );
        assert_eq!(
            errors(ADM, "MutatingAdmissionPolicyBinding", &binding),
            Vec::<String>::new()
        );
    }

    #[test]
    fn dispatch_reaches_the_new_kinds() {
        let net = "networking.k8s.io";
        let cidr = json!({"metadata": {"name": "extra"}, "spec": {"cidrs": []}});
        assert_eq!(
            errors(net, "ServiceCIDR", &cidr),
            vec!["spec.cidrs: Required value: at least one CIDR required"]
        );
        let ip = json!({"metadata": {"name": "10.0.0.1"}, "spec": {}});
        assert_eq!(
            errors(net, "IPAddress", &ip),
            vec!["spec.parentRef: Required value"]
        );
        let vac = json!({"metadata": {"name": "gold"}, "driverName": "csi.example.com"});
        assert_eq!(
            errors("storage.k8s.io", "VolumeAttributesClass", &vac),
            vec!["parameters: Required value: must contain at least one key/value pair"]
        );
        let pvc = json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}, "volumeAttributesClassName": "Gold"}});
        let errs = errors("", "PersistentVolumeClaim", &pvc);
        assert!(
            errs.len() == 1
                && errs[0].starts_with("spec.volumeAttributesClassName: Invalid value: \"Gold\""),
            "{errs:?}"
        );
        let pv = json!({"metadata": {"name": "v"}, "spec": {"volumeAttributesClassName": "gold"}});
        assert_eq!(
            errors("", "PersistentVolume", &pv),
            vec!["spec.csi: Required value: has to be specified when using volumeAttributesClassName"]
        );
    }
}
