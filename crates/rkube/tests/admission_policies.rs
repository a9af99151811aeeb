//! CEL admission policies through kubectl against `rkube server`: a ValidatingAdmissionPolicy
//! limiting Deployment replicas with the limit taken from a ConfigMap param (upstream's denial
//! text, then a Warn binding that only warns), failurePolicy Fail vs Ignore on a runtime error,
//! a binding whose param is missing with `parameterNotFoundAction: Deny`, and a
//! MutatingAdmissionPolicy that labels and annotates ConfigMaps.
//!
//! A policy applies once the server's watch cache has it, a moment after the write that created
//! it; the checks probe with server-side dry runs until the policy's effect shows, with a deadline.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Cluster};

const LIMITS: &str = "apiVersion: v1
kind: ConfigMap
metadata: {name: replica-limits, namespace: default}
data: {maxReplicas: \"3\"}
";

const POLICY: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: replica-limit}
spec:
  failurePolicy: Fail
  paramKind: {apiVersion: v1, kind: ConfigMap}
  matchConstraints:
    resourceRules:
    - apiGroups: [apps]
      apiVersions: [v1]
      operations: [CREATE, UPDATE]
      resources: [deployments]
  validations:
  - expression: object.spec.replicas <= int(params.data.maxReplicas)
    messageExpression: \"'replicas must be no greater than ' + params.data.maxReplicas\"
";

fn binding(actions: &str) -> String {
    format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: replica-limit-binding}}
spec:
  policyName: replica-limit
  validationActions: [{actions}]
  paramRef: {{name: replica-limits, parameterNotFoundAction: Deny}}
"
    )
}

fn deployment(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: c, image: busybox}}]
"
    )
}

fn config_map(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: default}}\ndata: {{a: b}}\n")
}

/// Runs `kubectl create --dry-run=server -f -` with `manifest` until `done` accepts its
/// (success, stdout, stderr), at most 30 s.
fn probe(
    c: &Cluster,
    manifest: &str,
    what: &str,
    done: impl Fn(bool, &str, &str) -> bool,
) -> (String, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = c.kubectl_output(
            &["create", "--dry-run=server", "-o", "json", "-f", "-"],
            Some(manifest),
        );
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        if done(out.status.success(), &stdout, &stderr) {
            return (stdout, stderr);
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last stderr: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn validating_admission_policy_with_params_actions_and_failure_policy() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl_in(&["apply", "-f", "-"], Some(LIMITS));
    c.kubectl_in(&["apply", "-f", "-"], Some(POLICY));
    c.kubectl_in(&["apply", "-f", "-"], Some(&binding("Deny")));

    // Too many replicas: refused with upstream's message (kubectl prints a 422 with its cause).
    let (_, err) = probe(
        &c,
        &deployment("big", 5),
        "the policy to deny",
        |ok, _, _| !ok,
    );
    assert!(
        err.contains(
            "The deployments \"big\" is invalid: : ValidatingAdmissionPolicy 'replica-limit' with binding \
             'replica-limit-binding' denied request: replicas must be no greater than 3"
        ),
        "{err}"
    );
    let err = c.kubectl_fails(&["create", "-f", "-"], Some(&deployment("big", 5)));
    assert!(
        err.contains("denied request: replicas must be no greater than 3"),
        "{err}"
    );
    // The Status itself is upstream's: the Forbidden-style text with reason Invalid, code 422.
    let status = support::runtime().block_on(async {
        let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
            kube::Api::namespaced(c.client().await, "default");
        let body = serde_json::from_value(yaml_to_json(&deployment("big", 5))).unwrap();
        match deployments.create(&Default::default(), &body).await {
            Err(kube::Error::Api(status)) => status,
            other => panic!("expected a refusal, got {other:?}"),
        }
    });
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        status.message,
        "deployments.apps \"big\" is forbidden: ValidatingAdmissionPolicy 'replica-limit' with binding \
         'replica-limit-binding' denied request: replicas must be no greater than 3"
    );
    // Within the limit: accepted.
    c.kubectl_in(&["create", "-f", "-"], Some(&deployment("small", 2)));

    // The same binding with Warn (a client-side apply of the changed object: a strategic merge
    // patch): the write goes through, kubectl prints the warning.
    c.kubectl_in(&["apply", "-f", "-"], Some(&binding("Warn")));
    let (_, warning) = probe(&c, &deployment("big", 5), "the Warn action", |ok, _, _| ok);
    assert!(
        warning.contains(
            "Warning: Validation failed for ValidatingAdmissionPolicy 'replica-limit' with binding \
             'replica-limit-binding': replicas must be no greater than 3"
        ),
        "{warning}"
    );

    // A missing param with parameterNotFoundAction Deny fails the binding.
    c.kubectl(&["delete", "configmap", "replica-limits"]);
    c.kubectl_in(&["apply", "-f", "-"], Some(&binding("Deny")));
    let (_, err) = probe(
        &c,
        &deployment("any", 1),
        "the missing param to deny",
        |ok, _, _| !ok,
    );
    assert!(
        err.contains(
            "ValidatingAdmissionPolicy 'replica-limit' with binding 'replica-limit-binding' denied request: \
             failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction"
        ),
        "{err}"
    );

    // The status controller type-checks the expressions against the matched kinds' schemas.
    let typo = POLICY
        .replace("name: replica-limit}", "name: typo}")
        .replace("object.spec.replicas <=", "object.spec.replica <=");
    c.kubectl_in(&["apply", "-f", "-"], Some(&typo));
    let jsonpath = |name: &str| {
        c.kubectl(&[
            "get",
            "validatingadmissionpolicy",
            name,
            "-o",
            "jsonpath={.status}",
        ])
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let status: Value = loop {
        let s = jsonpath("typo");
        if s.contains("observedGeneration") {
            break serde_json::from_str(&s).unwrap();
        }
        assert!(Instant::now() < deadline, "no status.typeChecking: {s}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        status["typeChecking"]["expressionWarnings"][0],
        serde_json::json!({"fieldRef": "spec.validations[0].expression", "warning":
            "apps/v1, Kind=Deployment: ERROR: <input>:1:12: undefined field 'replica'\n \
             | object.spec.replica <= int(params.data.maxReplicas)\n | ...........^\n"}),
        "{status}"
    );
    let clean: Value = serde_json::from_str(&jsonpath("replica-limit")).unwrap();
    assert_eq!(clean["observedGeneration"], 1, "{clean}");
    assert_eq!(clean["typeChecking"], serde_json::json!({}), "{clean}");

    // A runtime error: Fail refuses, Ignore lets the write through.
    let broken = |fp: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: broken}}
spec:
  failurePolicy: {fp}
  matchConstraints:
    resourceRules:
    - {{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}
  validations:
  - expression: object.spec.nope > 0
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: broken}}
spec: {{policyName: broken, validationActions: [Deny]}}
"
        )
    };
    c.kubectl_in(&["apply", "-f", "-"], Some(&broken("Fail")));
    let (_, err) = probe(&c, &config_map("cm"), "failurePolicy Fail", |ok, _, _| !ok);
    assert!(
        err.contains("ValidatingAdmissionPolicy 'broken' with binding 'broken' denied request: expression 'object.spec.nope > 0' resulted in error: "),
        "{err}"
    );
    c.kubectl_in(&["apply", "-f", "-"], Some(&broken("Ignore")));
    probe(&c, &config_map("cm"), "failurePolicy Ignore", |ok, _, _| ok);
    c.kubectl_in(&["create", "-f", "-"], Some(&config_map("cm")));
}

const MUTATING: &str = "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {name: label-config-maps}
spec:
  failurePolicy: Fail
  reinvocationPolicy: IfNeeded
  matchConstraints:
    resourceRules:
    - {apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}
  matchConditions:
  - {name: not-exempt, expression: \"!has(object.metadata.labels) || !('exempt' in object.metadata.labels)\"}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: \"Object{metadata: Object.metadata{labels: {'mutated-by': 'policy'}}}\"
  - patchType: JSONPatch
    jsonPatch:
      expression: >-
        [JSONPatch{op: 'add', path: '/metadata/annotations', value: {}},
         JSONPatch{op: 'add', path: '/metadata/annotations/' + jsonpatch.escapeKey('example.com/owner'),
                   value: request.userInfo.username}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {name: label-config-maps}
spec: {policyName: label-config-maps}
";

#[test]
fn mutating_admission_policy_labels_config_maps() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl_in(&["apply", "-f", "-"], Some(MUTATING));
    let (out, _) = probe(&c, &config_map("probe"), "the mutation", |ok, out, _| {
        ok && out.contains("mutated-by")
    });
    let cm: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(cm["metadata"]["labels"]["mutated-by"], "policy", "{cm}");

    c.kubectl_in(&["create", "-f", "-"], Some(&config_map("real")));
    let got: Value =
        serde_json::from_str(&c.kubectl(&["get", "configmap", "real", "-o", "json"])).unwrap();
    assert_eq!(got["metadata"]["labels"]["mutated-by"], "policy", "{got}");
    assert_eq!(
        got["metadata"]["annotations"]["example.com/owner"], "kubernetes-admin",
        "{got}"
    );
    assert_eq!(got["data"]["a"], "b");

    // The match condition exempts labelled ConfigMaps.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: exempt, namespace: default, labels: {exempt: \"yes\"}}\n"),
    );
    let got: Value =
        serde_json::from_str(&c.kubectl(&["get", "configmap", "exempt", "-o", "json"])).unwrap();
    assert!(
        got["metadata"]["labels"].get("mutated-by").is_none(),
        "{got}"
    );
}

/// A YAML manifest as JSON.
fn yaml_to_json(yaml: &str) -> Value {
    serde_yaml_ng::from_str(yaml).expect("valid YAML")
}

/// Webhook configurations, policies and bindings are validated on write with upstream's texts;
/// an update is held only to the rules its old object met.
#[test]
fn admission_configurations_are_validated_on_write() {
    let c = Cluster::start(Backend::Sqlite);
    let hook = |name: &str, extra: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: hooks}}
webhooks:
- name: {name}
  clientConfig: {{url: \"http://hook.example.com/check?x=1\"}}
  admissionReviewVersions: [v3]
  timeoutSeconds: 45
{extra}"
        )
    };
    let err = c.kubectl_fails(&["create", "-f", "-"], Some(&hook("check", "")));
    for want in [
        "The ValidatingWebhookConfiguration \"hooks\" is invalid",
        "webhooks[0].name: Invalid value: \"check\": should be a domain with at least three segments separated by dots",
        "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun",
        "webhooks[0].timeoutSeconds: Invalid value: 45: the timeout value must be between 1 and 30 seconds",
        "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]",
        "webhooks[0].clientConfig.url: Invalid value: \"x=1\": query parameters are not permitted in the URL",
        "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v3\"}: must include at least one of v1, v1beta1",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }

    let valid = "apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: hooks}
webhooks:
- name: label.example.com
  clientConfig: {service: {namespace: default, name: labeler, path: /label}}
  admissionReviewVersions: [v1]
  sideEffects: None
";
    c.kubectl_in(&["create", "-f", "-"], Some(valid));
    // Defaults were applied (the service port) and an update that breaks a rule is refused.
    let got = c.kubectl(&[
        "get",
        "mutatingwebhookconfiguration",
        "hooks",
        "-o",
        "jsonpath={.webhooks[0].clientConfig.service.port} {.webhooks[0].reinvocationPolicy}",
    ]);
    assert_eq!(got.trim(), "443 Never");
    let err = c.kubectl_fails(
        &["apply", "-f", "-"],
        Some(&valid.replace("sideEffects: None", "sideEffects: Some")),
    );
    assert!(
        err.contains("webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""),
        "{err}"
    );

    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: empty}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  validations: [{expression: \"true\", message: \"two\\nlines\", reason: Teapot}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: empty}
spec: {policyName: empty, validationActions: [Deny, Warn]}
",
        ),
    );
    for want in [
        "spec.validations[0].message: Invalid value: \"two\\nlines\": message must not contain line breaks",
        "spec.validations[0].reason: Unsupported value: \"Teapot\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\"",
        "spec.validationActions: Invalid value: []string{\"Deny\", \"Warn\"}: must not contain both Deny and Warn",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    // The policy's defaults are stored.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: fine}
spec:
  matchConstraints:
    resourceRules: [{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}]
  validations: [{expression: \"true\"}]
",
        ),
    );
    let got = c.kubectl(&[
        "get",
        "validatingadmissionpolicy",
        "fine",
        "-o",
        "jsonpath={.spec.failurePolicy} {.spec.matchConstraints.matchPolicy} {.spec.matchConstraints.resourceRules[0].scope}",
    ]);
    assert_eq!(got.trim(), "Fail Equivalent *");
}
