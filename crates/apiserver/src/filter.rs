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
    pub fn of(group: &str, resource: &str, obj: &Value) -> Attrs {
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
        ("events.k8s.io", "events") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
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

/// A field's value as a string; missing fields read as "" and booleans/numbers as their text, so
/// `spec.unschedulable=false` selects nodes without the field, as upstream.
fn field_value(obj: &Value, path: &str) -> String {
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
                Some(sel)
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
