//! Downward API volume files (upstream `pkg/volume/downwardapi` `CollectData`,
//! `pkg/fieldpath` `ExtractFieldPathAsString` and `FormatMap`, `pkg/api/v1/resource`
//! `ExtractResourceValueByContainerNameAndNodeAllocatable`): `fieldRef` takes only the pod's
//! metadata (name, namespace, uid, labels, annotations, one label or annotation); `resourceFieldRef`
//! a container's requests or limits divided by the divisor and rounded up, where a container
//! without a cpu, memory or ephemeral-storage limit has the node's allocatable. The volume is
//! rewritten on every pod sync, so label and annotation changes reach running pods.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, DownwardAPIVolumeFile, Pod, ResourceFieldSelector};
use scheduler::framework::resources::{parse_milli_quantity, parse_quantity};

use super::atomic_writer::{FileProjection, Payload};
use super::configmap::mode_of;

/// Upstream `utilerrors.NewAggregate(...).Error()`: one error as itself, several as `[a, b]`.
pub fn aggregate(errors: Vec<String>) -> Result<(), String> {
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.into_iter().next().unwrap_or_default()),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

/// Go's `%q` (`strconv.Quote`) of a string: printable characters as they are, the rest escaped.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c == '\x7f' => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if c.is_control() || (c.is_whitespace() && c != ' ') => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Upstream `FormatMap`: `key="value"` lines in key order.
pub fn format_map(m: Option<&BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", go_quote(v)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Upstream `ExtractFieldPathAsString` on a pod (what downward API volumes may name).
pub fn extract_field_path(pod: &Pod, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    if let Some((base, key)) = path.strip_suffix("']").and_then(|p| p.split_once("['")) {
        let map = match base {
            "metadata.annotations" => meta.annotations.as_ref(),
            "metadata.labels" => meta.labels.as_ref(),
            _ => return Err(format!("fieldPath {path:?} does not support subscript")),
        };
        return Ok(map.and_then(|m| m.get(key)).cloned().unwrap_or_default());
    }
    Ok(match path {
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        other => return Err(format!("unsupported fieldPath: {other}")),
    })
}

fn find_container<'a>(pod: &'a Pod, name: &str) -> Result<&'a Container, String> {
    let spec = pod.spec.as_ref();
    spec.into_iter()
        .flat_map(|s| s.containers.iter())
        .chain(
            spec.into_iter()
                .flat_map(|s| s.init_containers.iter().flatten()),
        )
        .find(|c| c.name == name)
        .ok_or_else(|| format!("container {name} not found"))
}

/// Upstream `MergeContainerResourceLimits`: a missing or zero cpu, memory or ephemeral-storage
/// limit is the node's allocatable.
fn merged_limit(
    c: &Container,
    name: &str,
    allocatable: &BTreeMap<String, String>,
) -> Option<String> {
    let own = c
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get(name))
        .map(|q| q.0.clone());
    let mergeable = matches!(name, "cpu" | "memory" | "ephemeral-storage");
    let zero = own
        .as_deref()
        .is_none_or(|q| parse_milli_quantity(q).is_ok_and(|v| v == 0));
    if mergeable && zero {
        if let Some(a) = allocatable.get(name) {
            return Some(a.clone());
        }
    }
    own
}

fn request(c: &Container, name: &str) -> Option<String> {
    c.resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|l| l.get(name))
        .map(|q| q.0.clone())
}

/// `ceil(value / divisor)` in float64, as upstream's `convertResource*ToString` compute it.
fn ceil_div(value: i64, divisor: i64) -> String {
    ((value as f64 / divisor as f64).ceil() as i64).to_string()
}

/// Upstream `ExtractContainerResourceValue` after the allocatable merge: cpu in millis, memory,
/// ephemeral-storage and hugepages in units; an unset or zero divisor is 1.
pub fn container_resource_value(
    c: &Container,
    resource: &str,
    divisor: Option<&str>,
    allocatable: &BTreeMap<String, String>,
) -> Result<String, String> {
    let divisor = divisor
        .filter(|d| !d.is_empty() && !matches!(parse_milli_quantity(d), Ok(0)))
        .unwrap_or("1");
    let unsupported = || format!("unsupported container resource : {resource}");
    let (kind, name) = resource.split_once('.').ok_or_else(unsupported)?;
    let quantity = match kind {
        "limits" => merged_limit(c, name, allocatable),
        "requests" => request(c, name),
        _ => return Err(unsupported()),
    };
    let quantity = quantity.as_deref().unwrap_or("0");
    let bad = |e: scheduler::framework::resources::QuantityError| e.to_string();
    match name {
        "cpu" => Ok(ceil_div(
            parse_milli_quantity(quantity).map_err(bad)?,
            parse_milli_quantity(divisor).map_err(bad)?,
        )),
        "memory" | "ephemeral-storage" => Ok(ceil_div(
            parse_quantity(quantity).map_err(bad)?,
            parse_quantity(divisor).map_err(bad)?,
        )),
        n if n.starts_with("hugepages-") => Ok(ceil_div(
            parse_quantity(quantity).map_err(bad)?,
            parse_quantity(divisor).map_err(bad)?,
        )),
        _ => Err(unsupported()),
    }
}

/// A `resourceFieldRef` of a downward API volume file.
pub fn resource_field_value(
    pod: &Pod,
    r: &ResourceFieldSelector,
    allocatable: &BTreeMap<String, String>,
) -> Result<String, String> {
    let c = find_container(pod, r.container_name.as_deref().unwrap_or(""))?;
    container_resource_value(
        c,
        &r.resource,
        r.divisor.as_ref().map(|d| d.0.as_str()),
        allocatable,
    )
}

/// Upstream `CollectData`: every item's file (path cleaned, its mode or the default); the errors
/// of all items are reported together.
pub fn collect_data(
    items: &[DownwardAPIVolumeFile],
    pod: &Pod,
    allocatable: &BTreeMap<String, String>,
    default_mode: u32,
) -> Result<Payload, String> {
    let mut errors = Vec::new();
    let mut out = Payload::new();
    for item in items {
        let value = if let Some(f) = &item.field_ref {
            extract_field_path(pod, &f.field_path)
        } else if let Some(r) = &item.resource_field_ref {
            resource_field_value(pod, r, allocatable)
        } else {
            Ok(String::new())
        };
        let data = value.unwrap_or_else(|e| {
            errors.push(e);
            String::new()
        });
        out.insert(
            item.path.clone(),
            FileProjection::new(data.into_bytes(), mode_of(item.mode, default_mode)),
        );
    }
    aggregate(errors)?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                         "labels": {"b": "2", "a": "x\"y"}, "annotations": {"note": "tab\there"}},
            "spec": {"containers": [
                {"name": "c", "resources": {"limits": {"cpu": "1250m", "memory": "64Mi"},
                                            "requests": {"cpu": "250m", "memory": "32Mi"}}},
                {"name": "nolimit"}],
                     "initContainers": [{"name": "init", "resources": {"requests": {"hugepages-2Mi": "4Mi"}}}]}
        }))
        .unwrap()
    }

    fn alloc() -> BTreeMap<String, String> {
        [
            ("cpu".to_string(), "2".to_string()),
            ("memory".to_string(), "8Gi".to_string()),
            ("ephemeral-storage".to_string(), "100G".to_string()),
        ]
        .into()
    }

    fn value(container: &str, resource: &str, divisor: Option<&str>) -> Result<String, String> {
        let p = pod();
        container_resource_value(find_container(&p, container)?, resource, divisor, &alloc())
    }

    #[test]
    fn field_paths() {
        let p = pod();
        assert_eq!(extract_field_path(&p, "metadata.name").unwrap(), "p");
        assert_eq!(extract_field_path(&p, "metadata.uid").unwrap(), "u-1");
        assert_eq!(
            extract_field_path(&p, "metadata.labels").unwrap(),
            "a=\"x\\\"y\"\nb=\"2\""
        );
        assert_eq!(
            extract_field_path(&p, "metadata.annotations").unwrap(),
            "note=\"tab\\there\""
        );
        assert_eq!(extract_field_path(&p, "metadata.labels['b']").unwrap(), "2");
        assert_eq!(
            extract_field_path(&p, "metadata.labels['none']").unwrap(),
            ""
        );
        assert_eq!(
            extract_field_path(&p, "spec.nodeName").unwrap_err(),
            "unsupported fieldPath: spec.nodeName"
        );
        assert_eq!(
            extract_field_path(&p, "metadata.name['x']").unwrap_err(),
            "fieldPath \"metadata.name['x']\" does not support subscript"
        );
        assert_eq!(go_quote("\u{1}é\u{a0}"), "\"\\x01é\\u00a0\"");
    }

    #[test]
    fn resources_with_divisors_round_up() {
        assert_eq!(value("c", "limits.cpu", None).unwrap(), "2");
        assert_eq!(value("c", "limits.cpu", Some("1")).unwrap(), "2");
        assert_eq!(value("c", "limits.cpu", Some("1m")).unwrap(), "1250");
        // The API server writes an unset divisor as "0": it means 1 (the "invalid divisor" bug).
        assert_eq!(value("c", "limits.cpu", Some("0")).unwrap(), "2");
        assert_eq!(value("c", "requests.cpu", Some("1m")).unwrap(), "250");
        assert_eq!(value("c", "requests.cpu", None).unwrap(), "1");
        assert_eq!(value("c", "limits.memory", None).unwrap(), "67108864");
        assert_eq!(value("c", "limits.memory", Some("1Mi")).unwrap(), "64");
        assert_eq!(value("c", "limits.memory", Some("1M")).unwrap(), "68");
        assert_eq!(value("c", "limits.memory", Some("1k")).unwrap(), "67109");
        assert_eq!(value("c", "limits.memory", Some("1Ki")).unwrap(), "65536");
        assert_eq!(value("c", "limits.memory", Some("1G")).unwrap(), "1");
        assert_eq!(value("c", "limits.memory", Some("1Gi")).unwrap(), "1");
        for d in ["1T", "1P", "1E", "1Ti", "1Pi", "1Ei", "1m"] {
            assert!(value("c", "limits.memory", Some(d)).is_ok(), "{d}");
        }
        assert_eq!(value("c", "requests.memory", Some("1Mi")).unwrap(), "32");
        // No limit: the node's allocatable; no request: 0.
        assert_eq!(value("nolimit", "limits.cpu", Some("1m")).unwrap(), "2000");
        assert_eq!(value("nolimit", "limits.memory", Some("1Gi")).unwrap(), "8");
        assert_eq!(
            value("nolimit", "limits.ephemeral-storage", Some("1G")).unwrap(),
            "100"
        );
        assert_eq!(value("nolimit", "requests.memory", None).unwrap(), "0");
        assert_eq!(
            value("init", "requests.hugepages-2Mi", Some("1Mi")).unwrap(),
            "4"
        );
        assert_eq!(
            value("c", "limits.gpu", None).unwrap_err(),
            "unsupported container resource : limits.gpu"
        );
        assert_eq!(
            value("missing", "limits.cpu", None).unwrap_err(),
            "container missing not found"
        );
    }

    #[test]
    fn collect_reports_every_error() {
        let items: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "podname", "fieldRef": {"fieldPath": "metadata.name"}},
            {"path": "./sub//cpu_limit", "mode": 0o400,
             "resourceFieldRef": {"containerName": "c", "resource": "limits.cpu", "divisor": "1m"}},
        ]))
        .unwrap();
        let files = collect_data(&items, &pod(), &alloc(), 0o644).unwrap();
        assert_eq!(files["podname"], FileProjection::new(b"p".to_vec(), 0o644));
        assert_eq!(files["./sub//cpu_limit"].data, b"1250");
        assert_eq!(files["./sub//cpu_limit"].mode, 0o400);
        let bad: Vec<DownwardAPIVolumeFile> = serde_json::from_value(serde_json::json!([
            {"path": "a", "fieldRef": {"fieldPath": "status.podIP"}},
            {"path": "b", "resourceFieldRef": {"containerName": "x", "resource": "limits.cpu"}},
        ]))
        .unwrap();
        assert_eq!(
            collect_data(&bad, &pod(), &alloc(), 0o644).unwrap_err(),
            "[unsupported fieldPath: status.podIP, container x not found]"
        );
    }
}
