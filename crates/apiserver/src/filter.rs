//! Which objects a list or watch selects (upstream `storage.SelectionPredicate` plus each resource's
//! `GetAttrs`/field label conversion): namespace, label selector, and field selector over the fields a
//! resource supports (`metadata.name` and `metadata.namespace` everywhere, plus per-resource fields such
//! as pods' `spec.nodeName`).

use apimachinery::fields::FieldSelector;
use apimachinery::labels::Selector;
use serde_json::{Map, Value};

/// The attributes of an object that selectors look at, extracted once per object version.
#[derive(Clone, Debug, Default)]
pub struct Attrs {
    pub namespace: String,
    pub name: String,
    pub labels: Map<String, Value>,
    /// Field name -> value, for the resource's selectable fields beyond name and namespace (empty for
    /// most resources: nothing is allocated for them).
    pub fields: Vec<(&'static str, String)>,
}

impl Attrs {
    /// The attributes of a stored object of `group`/`resource`.
    pub fn of(group: &str, resource: &str, obj: &Value) -> Attrs {
        let (group, resource) = stored_resource(group, resource);
        let namespace = crate::objects::namespace(obj).to_string();
        let name = crate::objects::name(obj).to_string();
        let labels = crate::objects::labels(obj).cloned().unwrap_or_default();
        let fields = selectable_fields(group, resource)
            .iter()
            .map(|field| (*field, field_value(obj, field)))
            .collect();
        Attrs {
            namespace,
            name,
            labels,
            fields,
        }
    }

    fn field(&self, name: &str) -> Option<String> {
        match name {
            "metadata.name" => Some(self.name.clone()),
            "metadata.namespace" => Some(self.namespace.clone()),
            _ => self
                .fields
                .iter()
                .find(|(f, _)| *f == name)
                .map(|(_, v)| v.clone()),
        }
    }
}

/// The fields beyond metadata.name/namespace that a resource's field selectors accept (upstream's
/// per-resource `AddFieldLabelConversionFunc`s).
pub fn selectable_fields(group: &str, resource: &str) -> &'static [&'static str] {
    match (group, resource) {
        ("", "pods") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
        ("", "events") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        // Stored as core Events: selected through `stored_field`'s names.
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "source",
            "type",
        ],
        ("", "nodes") => &["spec.unschedulable"],
        ("", "secrets") => &["type"],
        ("", "namespaces") => &["status.phase"],
        ("", "replicationcontrollers") => &["status.replicas"],
        ("apps", "replicasets") => &["status.replicas"],
        ("batch", "jobs") => &["status.successful"],
        ("", "services") => &["spec.clusterIP", "spec.type"],
        ("certificates.k8s.io", "certificatesigningrequests") => &["spec.signerName"],
        _ => &[],
    }
}

/// The resource whose stored form objects of `group`/`resource` have (events.k8s.io Events are
/// stored as core Events, as upstream), whose selectable fields the watch cache extracts.
pub fn stored_resource<'a>(group: &'a str, resource: &'a str) -> (&'a str, &'a str) {
    match (group, resource) {
        ("events.k8s.io", "events") => ("", "events"),
        _ => (group, resource),
    }
}

/// Upstream's field label conversion of a served resource stored in another form: the stored
/// object's field a selector field names (events.k8s.io/v1 `AddFieldLabelConversionsForEvent`).
fn stored_field(group: &str, resource: &str, field: &str) -> Option<&'static str> {
    if (group, resource) != ("events.k8s.io", "events") {
        return None;
    }
    Some(match field {
        "regarding.kind" => "involvedObject.kind",
        "regarding.namespace" => "involvedObject.namespace",
        "regarding.name" => "involvedObject.name",
        "regarding.uid" => "involvedObject.uid",
        "regarding.apiVersion" => "involvedObject.apiVersion",
        "regarding.resourceVersion" => "involvedObject.resourceVersion",
        "regarding.fieldPath" => "involvedObject.fieldPath",
        "reportingController" => "reportingComponent",
        _ => return None,
    })
}

/// A field's value as a string; missing fields read as "" and booleans/numbers as their text, so
/// `spec.unschedulable=false` selects nodes without the field, as upstream.
fn field_value(obj: &Value, path: &str) -> String {
    if path == "source" {
        // Core Events (upstream `ToSelectableFields`): the source component, else the reporting
        // controller (events written through events.k8s.io have no source).
        return match obj.pointer("/source/component").and_then(Value::as_str) {
            Some(c) if !c.is_empty() => c.to_string(),
            _ => field_value(obj, "reportingComponent"),
        };
    }
    let mut cur = obj;
    for part in path.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => {
                return match path {
                    "spec.unschedulable" | "spec.hostNetwork" => "false".into(),
                    "status.replicas" | "status.successful" => "0".into(),
                    _ => String::new(),
                }
            }
        }
    }
    match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A list or watch's selection.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: Option<Selector>,
    pub fields: Option<FieldSelector>,
}

impl Filter {
    /// Builds a filter from the query's selectors, rejecting fields the resource cannot select on with
    /// upstream's message.
    pub fn new(
        group: &str,
        resource: &str,
        namespace: Option<String>,
        label_selector: Option<&str>,
        field_selector: Option<&str>,
    ) -> Result<Filter, String> {
        let labels = match label_selector {
            Some(s) if !s.trim().is_empty() => Some(apimachinery::labels::parse(s)?),
            _ => None,
        };
        let fields = match field_selector {
            Some(s) if !s.trim().is_empty() => {
                let sel = apimachinery::fields::parse(s)?;
                let allowed = selectable_fields(group, resource);
                for req in sel.requirements() {
                    let f = req.field.as_str();
                    if f != "metadata.name" && f != "metadata.namespace" && !allowed.contains(&f) {
                        return Err(format!("field label not supported: {f}"));
                    }
                }
                Some(sel.map_fields(|f| stored_field(group, resource, f)))
            }
            _ => None,
        };
        Ok(Filter {
            namespace,
            labels,
            fields,
        })
    }

    pub fn is_everything(&self) -> bool {
        self.namespace.is_none() && self.labels.is_none() && self.fields.is_none()
    }

    pub fn matches(&self, attrs: &Attrs) -> bool {
        if let Some(ns) = &self.namespace {
            if attrs.namespace != *ns {
                return false;
            }
        }
        if let Some(sel) = &self.labels {
            if !sel.matches(&attrs.labels) {
                return false;
            }
        }
        if let Some(sel) = &self.fields {
            if !sel.matches(|f| attrs.field(f)) {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// events.k8s.io Events are core Events in storage: their field selectors use upstream's field
    /// label conversion, and core's `source` falls back to the reporting controller.
    #[test]
    fn event_field_selectors_follow_upstream() {
        let stored = json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "e", "namespace": "ns"}, "involvedObject": {"namespace": "ns", "kind": "Pod"},
            "reportingComponent": "test-controller", "reason": "Test", "type": "Normal"});
        let attrs = Attrs::of("events.k8s.io", "events", &stored);
        let select = |group: &str, sel: &str| {
            Filter::new(group, "events", None, None, Some(sel))
                .unwrap()
                .matches(&attrs)
        };
        assert!(select(
            "events.k8s.io",
            "reportingController=test-controller"
        ));
        assert!(select("events.k8s.io", "regarding.kind=Pod"));
        assert!(!select("events.k8s.io", "regarding.kind=Node"));
        assert!(
            select("", "source=test-controller"),
            "core source falls back to reportingComponent"
        );
        assert!(select("", "reportingComponent=test-controller"));
        let with_source = json!({"metadata": {"name": "e"}, "source": {"component": "kubelet"},
            "reportingComponent": "other"});
        let attrs = Attrs::of("", "events", &with_source);
        assert!(
            Filter::new("", "events", None, None, Some("source=kubelet"))
                .unwrap()
                .matches(&attrs)
        );
        assert!(Filter::new(
            "events.k8s.io",
            "events",
            None,
            None,
            Some("involvedObject.kind=Pod")
        )
        .is_err());
    }
}
