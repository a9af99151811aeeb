//! Container environment (upstream `kubelet_pods.go` `makeEnvironmentVariables`, `fieldpath` and
//! `third_party/forked/golang/expansion`): `envFrom` sources in order, then `env` (later names win), with
//! `$(VAR)` references expanded against what is defined so far; values from the downward API
//! (`fieldRef`, `resourceFieldRef`) and from ConfigMaps and Secrets (fetched by the caller).
//!
//! Difference: Service environment variables (`enableServiceLinks`, `KUBERNETES_SERVICE_HOST`) are not
//! added.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod};

/// Expands `$(NAME)` in `input` from `lookup`; `$$` is a literal `$`; unknown references stay as written
/// (upstream's `expansion.Expand`).
pub fn expand(input: &str, lookup: &dyn Fn(&str) -> Option<String>) -> String {
    let bytes = input.as_bytes();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    let mut literal_start = 0;
    while i < bytes.len() {
        if bytes[i] == b'$' && i + 1 < bytes.len() {
            match bytes[i + 1] {
                b'$' => {
                    out.push_str(&input[literal_start..i]);
                    out.push('$');
                    i += 2;
                    literal_start = i;
                    continue;
                }
                b'(' => {
                    if let Some(close) = input[i + 2..].find(')') {
                        let name = &input[i + 2..i + 2 + close];
                        out.push_str(&input[literal_start..i]);
                        match lookup(name) {
                            Some(v) => out.push_str(&v),
                            None => out.push_str(&input[i..i + 3 + close]),
                        }
                        i += 3 + close;
                        literal_start = i;
                        continue;
                    }
                }
                _ => {}
            }
        }
        i += 1;
    }
    out.push_str(&input[literal_start..]);
    out
}

/// The value of a downward API field path (upstream `podFieldSelectorRuntimeValue` + `ExtractFieldPathAsString`).
pub fn field_ref(
    pod: &Pod,
    path: &str,
    host_ip: &str,
    pod_ips: &[String],
) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let map_value = |m: Option<&BTreeMap<String, String>>, key: &str| {
        m.and_then(|m| m.get(key)).cloned().unwrap_or_default()
    };
    if let Some(rest) = path
        .strip_prefix("metadata.labels['")
        .and_then(|r| r.strip_suffix("']"))
    {
        return Ok(map_value(meta.labels.as_ref(), rest));
    }
    if let Some(rest) = path
        .strip_prefix("metadata.annotations['")
        .and_then(|r| r.strip_suffix("']"))
    {
        return Ok(map_value(meta.annotations.as_ref(), rest));
    }
    let format_map = |m: Option<&BTreeMap<String, String>>| {
        m.into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", serde_json::Value::String(v.clone())))
            .collect::<Vec<_>>()
            .join("\n")
    };
    Ok(match path {
        "metadata.name" => meta.name.clone().unwrap_or_default(),
        "metadata.namespace" => meta.namespace.clone().unwrap_or_default(),
        "metadata.uid" => meta.uid.clone().unwrap_or_default(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.hostIP" => host_ip.to_string(),
        "status.hostIPs" => host_ip.to_string(),
        "status.podIP" => pod_ips.first().cloned().unwrap_or_default(),
        "status.podIPs" => pod_ips.join(","),
        other => return Err(format!("unsupported fieldPath {other:?}")),
    })
}

/// A `resourceFieldRef` value (upstream `ExtractContainerResourceValue`): requests/limits of cpu, memory
/// or ephemeral-storage divided by `divisor` (rounded up); unset limits are the node's allocatable.
pub fn resource_field_ref(
    container: &Container,
    resource: &str,
    divisor: Option<&str>,
    node_allocatable: &BTreeMap<String, String>,
) -> Result<String, String> {
    let (kind, name) = resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resource {resource:?}"))?;
    let res = container.resources.as_ref();
    let from = match kind {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => return Err(format!("unsupported resource {resource:?}")),
    };
    let raw = from
        .and_then(|m| m.get(name))
        .map(|q| q.0.clone())
        .or_else(|| {
            // Upstream: an unset limit is the node's allocatable; an unset request is the limit (or 0).
            if kind == "limits" {
                node_allocatable.get(name).cloned()
            } else {
                res.and_then(|r| r.limits.as_ref())
                    .and_then(|m| m.get(name))
                    .map(|q| q.0.clone())
            }
        })
        .unwrap_or_else(|| "0".into());
    let milli = |q: &str| {
        scheduler::framework::resources::parse_milli_quantity(q).map_err(|e| e.to_string())
    };
    let value = milli(&raw)?;
    let divisor = milli(divisor.filter(|d| !d.is_empty()).unwrap_or("1"))?;
    if divisor <= 0 {
        return Err(format!("invalid divisor for {resource}"));
    }
    Ok(((value + divisor - 1) / divisor).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_follows_upstream() {
        let vars: BTreeMap<&str, &str> = [("A", "a"), ("B", "$(A)x")].into();
        let lookup = |n: &str| vars.get(n).map(|v| v.to_string());
        for (input, want) in [
            ("$(A)", "a"),
            ("x$(A)y$(A)", "xaya"),
            ("$(C)", "$(C)"),
            ("$$(A)", "$(A)"),
            ("$$", "$"),
            ("$", "$"),
            ("$(A", "$(A"),
            ("a$b", "a$b"),
            ("$(B)", "$(A)x"),
            ("", ""),
        ] {
            assert_eq!(expand(input, &lookup), want, "{input}");
        }
    }

    #[test]
    fn field_refs() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"app": "x", "b": "y\"z"}},
            "spec": {"nodeName": "n1", "serviceAccountName": "sa", "containers": []}
        }))
        .unwrap();
        let ips = vec!["10.0.0.2".to_string()];
        for (path, want) in [
            ("metadata.name", "p"),
            ("metadata.namespace", "ns"),
            ("metadata.uid", "u"),
            ("metadata.labels['app']", "x"),
            ("metadata.labels['none']", ""),
            ("metadata.labels", "app=\"x\"\nb=\"y\\\"z\""),
            ("spec.nodeName", "n1"),
            ("spec.serviceAccountName", "sa"),
            ("status.hostIP", "192.0.2.1"),
            ("status.podIP", "10.0.0.2"),
        ] {
            assert_eq!(
                field_ref(&pod, path, "192.0.2.1", &ips).unwrap(),
                want,
                "{path}"
            );
        }
        assert!(field_ref(&pod, "spec.bogus", "", &ips).is_err());
    }

    #[test]
    fn resource_refs() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c",
            "resources": {"limits": {"memory": "64Mi"}, "requests": {"cpu": "250m"}}
        }))
        .unwrap();
        let node: BTreeMap<String, String> = [("cpu".to_string(), "2".to_string())].into();
        assert_eq!(
            resource_field_ref(&c, "limits.memory", None, &node).unwrap(),
            "67108864"
        );
        assert_eq!(
            resource_field_ref(&c, "limits.memory", Some("1Mi"), &node).unwrap(),
            "64"
        );
        assert_eq!(
            resource_field_ref(&c, "requests.cpu", Some("1m"), &node).unwrap(),
            "250"
        );
        assert_eq!(
            resource_field_ref(&c, "requests.cpu", None, &node).unwrap(),
            "1"
        );
        assert_eq!(
            resource_field_ref(&c, "limits.cpu", None, &node).unwrap(),
            "2"
        );
        assert!(resource_field_ref(&c, "bogus", None, &node).is_err());
    }
}
