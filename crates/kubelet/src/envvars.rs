//! Container environment (upstream `kubelet_pods.go` `makeEnvironmentVariables`, `fieldpath`,
//! `pkg/kubelet/envvars` and `third_party/forked/golang/expansion`): `envFrom` sources in order, then
//! `env` (later names win), with `$(VAR)` references expanded against what is defined so far and then
//! the Service variables; values from the downward API (`fieldRef`, `resourceFieldRef`) and from
//! ConfigMaps and Secrets (fetched by the caller); then the Service variables not already defined.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Service};

/// upstream `makeEnvVariableName`: `my-svc` -> `MY_SVC`.
fn env_name(s: &str) -> String {
    s.replace('-', "_").to_uppercase()
}

fn service_ip_set(s: &Service) -> bool {
    s.spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .is_some_and(|ip| !ip.is_empty() && ip != "None")
}

/// The Services whose variables a pod in `namespace` gets (upstream `getServiceEnvVarMap`): the
/// `kubernetes` Service of `default` always; with `enableServiceLinks`, every Service of the pod's
/// namespace (which wins over `default/kubernetes` for the name `kubernetes`). Headless Services and
/// Services without a cluster IP give none. Sorted by name.
pub fn services_for_pod<'a>(
    services: impl IntoIterator<Item = &'a Service>,
    namespace: &str,
    enable_service_links: bool,
) -> Vec<&'a Service> {
    let mut by_name: BTreeMap<String, &Service> = BTreeMap::new();
    let mut own: Vec<&Service> = Vec::new();
    for s in services {
        if !service_ip_set(s) {
            continue;
        }
        let name = s.metadata.name.clone().unwrap_or_default();
        let ns = s.metadata.namespace.as_deref().unwrap_or("");
        if ns == "default" && name == "kubernetes" {
            by_name.entry(name).or_insert(s);
        } else if ns == namespace && enable_service_links {
            own.push(s);
        }
    }
    for s in own {
        by_name.insert(s.metadata.name.clone().unwrap_or_default(), s);
    }
    by_name.into_values().collect()
}

/// A Service's variables (upstream `envvars.FromServices`): `<NAME>_SERVICE_HOST`,
/// `<NAME>_SERVICE_PORT` (the first port) and `<NAME>_SERVICE_PORT_<PORT NAME>` for named ports, then
/// the Docker link variables: `<NAME>_PORT` (the first port's URL) and for each port
/// `<NAME>_PORT_<port>_<PROTO>` with `_PROTO`, `_PORT`, `_ADDR`.
pub fn service_env(services: &[&Service]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for s in services {
        let Some(spec) = s.spec.as_ref() else {
            continue;
        };
        let Some(ip) = spec.cluster_ip.as_deref().filter(|_| service_ip_set(s)) else {
            continue;
        };
        let ports = spec.ports.as_deref().unwrap_or(&[]);
        // Validation gives a Service with a cluster IP at least one port; one without has no variables.
        let Some(first) = ports.first() else {
            continue;
        };
        let prefix = env_name(s.metadata.name.as_deref().unwrap_or(""));
        out.push((format!("{prefix}_SERVICE_HOST"), ip.to_string()));
        let port_var = format!("{prefix}_SERVICE_PORT");
        out.push((port_var.clone(), first.port.to_string()));
        for p in ports {
            if let Some(n) = p.name.as_deref().filter(|n| !n.is_empty()) {
                out.push((format!("{port_var}_{}", env_name(n)), p.port.to_string()));
            }
        }
        let host_port = |port: i32| match ip.parse::<std::net::IpAddr>() {
            Ok(std::net::IpAddr::V6(_)) => format!("[{ip}]:{port}"),
            _ => format!("{ip}:{port}"),
        };
        for (i, p) in ports.iter().enumerate() {
            let proto = p
                .protocol
                .as_deref()
                .filter(|p| !p.is_empty())
                .unwrap_or("TCP");
            let url = format!("{}://{}", proto.to_lowercase(), host_port(p.port));
            if i == 0 {
                out.push((format!("{prefix}_PORT"), url.clone()));
            }
            let pp = format!("{prefix}_PORT_{}_{}", p.port, proto.to_uppercase());
            out.push((pp.clone(), url));
            out.push((format!("{pp}_PROTO"), proto.to_lowercase()));
            out.push((format!("{pp}_PORT"), p.port.to_string()));
            out.push((format!("{pp}_ADDR"), ip.to_string()));
        }
    }
    out
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Container;

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
    fn service_variables_as_upstream() {
        let svc = |ns: &str, name: &str, ip: &str, ports: serde_json::Value| -> Service {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": ns},
                "spec": {"clusterIP": ip, "ports": ports}
            }))
            .unwrap()
        };
        let all = [
            svc(
                "default",
                "kubernetes",
                "10.43.0.1",
                serde_json::json!([{"name": "https", "port": 443}]),
            ),
            svc(
                "ns",
                "my-svc",
                "10.43.0.20",
                serde_json::json!([
                {"port": 80}, {"name": "dns-udp", "port": 53, "protocol": "UDP"}]),
            ),
            svc("ns", "headless", "None", serde_json::json!([{"port": 80}])),
            svc(
                "other",
                "x",
                "10.43.0.30",
                serde_json::json!([{"port": 80}]),
            ),
        ];
        let chosen = services_for_pod(&all, "ns", true);
        let names: Vec<_> = chosen
            .iter()
            .map(|s| s.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["kubernetes", "my-svc"]);
        let env: BTreeMap<String, String> = service_env(&chosen).into_iter().collect();
        for (k, v) in [
            ("KUBERNETES_SERVICE_HOST", "10.43.0.1"),
            ("KUBERNETES_SERVICE_PORT", "443"),
            ("KUBERNETES_SERVICE_PORT_HTTPS", "443"),
            ("KUBERNETES_PORT", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP", "tcp://10.43.0.1:443"),
            ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"),
            ("KUBERNETES_PORT_443_TCP_PORT", "443"),
            ("KUBERNETES_PORT_443_TCP_ADDR", "10.43.0.1"),
            ("MY_SVC_SERVICE_HOST", "10.43.0.20"),
            ("MY_SVC_SERVICE_PORT", "80"),
            ("MY_SVC_SERVICE_PORT_DNS_UDP", "53"),
            ("MY_SVC_PORT", "tcp://10.43.0.20:80"),
            ("MY_SVC_PORT_53_UDP", "udp://10.43.0.20:53"),
            ("MY_SVC_PORT_53_UDP_PROTO", "udp"),
        ] {
            assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
        }
        assert_eq!(env.len(), 8 + 12);
        // Without service links only the API server's Service; a namespace's own `kubernetes` wins.
        let off = services_for_pod(&all, "ns", false);
        assert_eq!(off.len(), 1);
        let shadow = [
            all[0].clone(),
            svc(
                "ns",
                "kubernetes",
                "10.43.0.99",
                serde_json::json!([{"port": 1}]),
            ),
        ];
        let chosen = services_for_pod(&shadow, "ns", true);
        assert_eq!(
            chosen[0].spec.as_ref().unwrap().cluster_ip.as_deref(),
            Some("10.43.0.99")
        );
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

    /// The env var path shares the downward API volume's function (one place for divisors).
    #[test]
    fn resource_refs() {
        use crate::volumes::downwardapi::container_resource_value as resource_field_ref;
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
        // The API server stores an unset divisor as "0", which means 1.
        assert_eq!(
            resource_field_ref(&c, "limits.cpu", Some("0"), &node).unwrap(),
            "2"
        );
    }
}
