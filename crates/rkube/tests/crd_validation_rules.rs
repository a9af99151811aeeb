//! CRD validation rules (`x-kubernetes-validations`) through kubectl: a failing rule refuses a
//! create and an update with upstream's text; a transition rule (`self == oldSelf`) makes a field
//! immutable; `messageExpression` builds the message; ratcheting lets unchanged values through a
//! tightened rule; a CRD whose rule does not compile (or names an undeclared field) is refused with
//! upstream's `compilation failed` error.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            x-kubernetes-validations:
            - rule: self.replicas <= self.maxReplicas
            - rule: self.replicas >= 0
              messageExpression: "'replicas must not be negative, got ' + string(self.replicas)"
            properties:
              replicas: {type: integer}
              maxReplicas: {type: integer}
              name:
                type: string
                x-kubernetes-validations:
                - {rule: self == oldSelf, message: Value is immutable}
"#;

fn widget(replicas: i64, max: i64, name: &str) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: default\nspec:\n  replicas: {replicas}\n  maxReplicas: {max}\n  name: {name}\n"
    )
}

#[test]
fn validation_rules_refuse_bad_writes_with_upstreams_messages() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);

    // A create breaking the rule.
    let err = c.kubectl_fails(&["create", "-f", "-"], Some(&widget(5, 3, "a")));
    assert!(
        err.contains(r#"The Widget "w" is invalid: spec: Invalid value: failed rule: self.replicas <= self.maxReplicas"#),
        "{err}"
    );

    // A good create, then an update breaking the rule.
    c.kubectl_in(&["create", "-f", "-"], Some(&widget(1, 3, "a")));
    let err = c.kubectl_fails(&["replace", "-f", "-"], Some(&widget(5, 3, "a")));
    assert!(
        err.contains(r#"The Widget "w" is invalid: spec: Invalid value: failed rule: self.replicas <= self.maxReplicas"#),
        "{err}"
    );

    // messageExpression builds the message.
    let err = c.kubectl_fails(&["replace", "-f", "-"], Some(&widget(-1, 3, "a")));
    assert!(
        err.contains("spec: Invalid value: replicas must not be negative, got -1"),
        "{err}"
    );

    // The transition rule: the name cannot change; other fields can.
    let err = c.kubectl_fails(&["replace", "-f", "-"], Some(&widget(1, 3, "b")));
    assert!(
        err.contains(r#"spec.name: Invalid value: "b": Value is immutable"#),
        "{err}"
    );
    c.kubectl_in(&["replace", "-f", "-"], Some(&widget(2, 3, "a")));
    let replicas = c.kubectl(&["get", "widget", "w", "-o", "jsonpath={.spec.replicas}"]);
    assert_eq!(replicas.trim(), "2");

    // Ratcheting: once the CRD gains a rule the stored object breaks, writes that leave the
    // offending value unchanged still pass; changing it is refused.
    let tightened = CRD.replace(
        "            - rule: self.replicas >= 0\n",
        "            - {rule: self.maxReplicas <= 2, message: maxReplicas too high}\n            - rule: self.replicas >= 0\n",
    );
    assert_ne!(tightened, CRD);
    c.kubectl_in(&["apply", "-f", "-"], Some(&tightened));
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = c.kubectl_output(&["replace", "-f", "-"], Some(&widget(1, 3, "a")));
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            assert!(
                stderr.contains("spec: Invalid value: maxReplicas too high"),
                "{stderr}"
            );
            break;
        }
        assert!(Instant::now() < deadline, "the new rule never applied");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.kubectl(&["label", "widget", "w", "touched=yes"]);

    // A CRD whose rule does not compile is refused, and so is one naming an undeclared field.
    let broken = CRD
        .replace("widgets.example.com", "gadgets.example.com")
        .replace(
            "{plural: widgets, singular: widget, kind: Widget}",
            "{plural: gadgets, singular: gadget, kind: Gadget}",
        )
        .replace(
            "rule: self.replicas <= self.maxReplicas",
            "rule: self.replicas <=",
        );
    let err = c.kubectl_fails(&["apply", "-f", "-"], Some(&broken));
    assert!(
        err.contains(r#"The CustomResourceDefinition "gadgets.example.com" is invalid: spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule: Invalid value: apiextensions.ValidationRule{Rule:"self.replicas <=", Message:"", MessageExpression:"", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:"", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:"#),
        "{err}"
    );
    let typo = broken.replace("rule: self.replicas <=", "rule: self.replicsa <= 3");
    let err = c.kubectl_fails(&["apply", "-f", "-"], Some(&typo));
    assert!(
        err.contains("compilation failed: ERROR: <input>:1:5: undefined field 'replicsa'"),
        "{err}"
    );
    let err = c.kubectl_fails(&["get", "crd", "gadgets.example.com"], None);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
}
