//! Printers of core services and endpoints, mirroring upstream `pkg/printers/internalversion`
//! (`printService`, `printEndpoints`): TYPE, CLUSTER-IP, EXTERNAL-IP (`<none>`, `<pending>` load
//! balancers), PORT(S) (`80/TCP`, `80:30080/TCP`), and up to three endpoints with `+ N more...`.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::time::Instant;
use super::util::{arr_at, format_labels, int_at, name, obj_at, or, str_at};
use super::{age_cell, col, printer, wide, ColumnDefinition, Printers, AGE, NAME};

pub(super) const PRINTERS: Printers = &[
    ("", "services", printer(SERVICE_COLUMNS, service_cells)),
    ("", "endpoints", printer(ENDPOINTS_COLUMNS, endpoints_cells)),
];

const SERVICE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Type", "string", "type determines how the Service is exposed. Defaults to ClusterIP."),
    col("Cluster-IP", "string", "clusterIP is the IP address of the service and is usually assigned randomly."),
    col("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
    col("Port(s)", "string", "The list of ports that are exposed by this service."),
    AGE,
    wide("Selector", "string", "Route service traffic to pods with label keys and values matching this selector."),
];

/// `loadBalancerStatusStringer` (wide, so never clipped): ingress IPs, else hostnames, sorted, unique.
pub(super) fn load_balancer_ingress(obj: &Value) -> String {
    let set: BTreeSet<&str> = arr_at(obj, &["status", "loadBalancer", "ingress"])
        .iter()
        .map(|i| or(str_at(i, &["ip"]), str_at(i, &["hostname"])))
        .filter(|s| !s.is_empty())
        .collect();
    set.into_iter().collect::<Vec<_>>().join(",")
}

fn strings(v: &[Value]) -> Vec<&str> {
    v.iter().map(|s| s.as_str().unwrap_or("")).collect()
}

/// `getServiceExternalIP`.
fn service_external_ip(svc: &Value) -> String {
    let external = strings(arr_at(svc, &["spec", "externalIPs"]));
    match str_at(svc, &["spec", "type"]) {
        "ClusterIP" | "NodePort" if !external.is_empty() => external.join(","),
        "ClusterIP" | "NodePort" => "<none>".to_string(),
        "LoadBalancer" => {
            let lb = load_balancer_ingress(svc);
            if !external.is_empty() {
                let mut all: Vec<&str> = if lb.is_empty() {
                    Vec::new()
                } else {
                    lb.split(',').collect()
                };
                all.extend(external);
                all.join(",")
            } else if !lb.is_empty() {
                lb
            } else {
                "<pending>".to_string()
            }
        }
        "ExternalName" => str_at(svc, &["spec", "externalName"]).to_string(),
        _ => "<unknown>".to_string(),
    }
}

/// `makePortString`: `80/TCP`, `80:30080/TCP` with a node port.
fn service_ports(svc: &Value) -> String {
    arr_at(svc, &["spec", "ports"])
        .iter()
        .map(|p| {
            let port = int_at(p, &["port"]);
            let protocol = or(str_at(p, &["protocol"]), "TCP");
            match int_at(p, &["nodePort"]) {
                n if n > 0 => format!("{port}:{n}/{protocol}"),
                _ => format!("{port}/{protocol}"),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

fn service_cells(svc: &Value, now: Instant) -> Vec<Value> {
    let cluster_ip = arr_at(svc, &["spec", "clusterIPs"])
        .first()
        .and_then(Value::as_str)
        .unwrap_or_else(|| str_at(svc, &["spec", "clusterIP"]));
    let ports = service_ports(svc);
    vec![
        json!(name(svc)),
        json!(str_at(svc, &["spec", "type"])),
        json!(or(cluster_ip, "<none>")),
        json!(service_external_ip(svc)),
        json!(or(&ports, "<none>")),
        age_cell(svc, now),
        json!(format_labels(obj_at(svc, &["spec", "selector"]))),
    ]
}

const ENDPOINTS_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Endpoints",
        "string",
        "The set of all endpoints is the union of all subsets.",
    ),
    AGE,
];

/// Go's `net.JoinHostPort`: IPv6 addresses in brackets.
fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// `formatEndpoints` with all ports: the first three `ip:port`, then `+ N more...`.
fn format_endpoints(ep: &Value) -> String {
    let subsets = arr_at(ep, &["subsets"]);
    if subsets.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 3;
    let mut list: Vec<String> = Vec::new();
    let mut more = false;
    let mut count = 0usize;
    for ss in subsets {
        let addresses = arr_at(ss, &["addresses"]);
        let ports = arr_at(ss, &["ports"]);
        if ports.is_empty() {
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(str_at(a, &["ip"]).to_string());
            }
            continue;
        }
        for p in ports {
            count += addresses.len();
            for a in addresses {
                if list.len() == MAX {
                    more = true;
                    break;
                }
                list.push(join_host_port(str_at(a, &["ip"]), int_at(p, &["port"])));
            }
        }
    }
    let joined = list.join(",");
    if more {
        format!("{joined} + {} more...", count - MAX)
    } else {
        joined
    }
}

fn endpoints_cells(ep: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(ep)),
        json!(format_endpoints(ep)),
        age_cell(ep, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::testing::{header, namespaced_meta, row, strs};

    #[test]
    fn services() {
        assert_eq!(
            header("", "services"),
            vec![
                ("Name", 0),
                ("Type", 0),
                ("Cluster-IP", 0),
                ("External-IP", 0),
                ("Port(s)", 0),
                ("Age", 0),
                ("Selector", 1)
            ]
        );
        let svc = |spec: Value, status: Value| json!({"metadata": namespaced_meta("web"), "spec": spec, "status": status});
        let cases = [
            (
                svc(
                    json!({"type": "ClusterIP", "clusterIP": "10.96.0.10", "clusterIPs": ["10.96.0.10"],
                        "ports": [{"port": 80, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
                        "selector": {"tier": "front", "app": "web"}}),
                    json!({}),
                ),
                [
                    "web",
                    "ClusterIP",
                    "10.96.0.10",
                    "<none>",
                    "80/TCP,53/UDP",
                    "10m",
                    "app=web,tier=front",
                ],
            ),
            (
                svc(
                    json!({"type": "NodePort", "clusterIP": "10.96.1.1", "externalIPs": ["1.2.3.4"],
                        "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}]}),
                    json!({}),
                ),
                [
                    "web",
                    "NodePort",
                    "10.96.1.1",
                    "1.2.3.4",
                    "80:30080/TCP",
                    "10m",
                    "<none>",
                ],
            ),
            (
                svc(
                    json!({"type": "LoadBalancer", "clusterIPs": ["10.96.2.2"], "ports": [{"port": 443, "nodePort": 31443}]}),
                    json!({}),
                ),
                [
                    "web",
                    "LoadBalancer",
                    "10.96.2.2",
                    "<pending>",
                    "443:31443/TCP",
                    "10m",
                    "<none>",
                ],
            ),
            (
                svc(
                    json!({"type": "LoadBalancer", "clusterIP": "10.96.2.2", "externalIPs": ["9.9.9.9"]}),
                    json!({"loadBalancer": {"ingress": [{"hostname": "lb.example.com"}, {"ip": "5.6.7.8"}, {"ip": "5.6.7.8"}]}}),
                ),
                [
                    "web",
                    "LoadBalancer",
                    "10.96.2.2",
                    "5.6.7.8,lb.example.com,9.9.9.9",
                    "<none>",
                    "10m",
                    "<none>",
                ],
            ),
            (
                svc(
                    json!({"type": "ExternalName", "externalName": "db.example.com"}),
                    json!({}),
                ),
                [
                    "web",
                    "ExternalName",
                    "<none>",
                    "db.example.com",
                    "<none>",
                    "10m",
                    "<none>",
                ],
            ),
            (
                svc(
                    json!({"type": "ClusterIP", "clusterIP": "None", "selector": {"app": "db"}}),
                    json!({}),
                ),
                [
                    "web",
                    "ClusterIP",
                    "None",
                    "<none>",
                    "<none>",
                    "10m",
                    "app=db",
                ],
            ),
            (
                svc(json!({}), json!({})),
                ["web", "", "<none>", "<unknown>", "<none>", "10m", "<none>"],
            ),
        ];
        for (svc, want) in cases {
            assert_eq!(strs(&row("", "services", &svc)), want);
        }
    }

    #[test]
    fn endpoints() {
        let ep = |subsets: Value| json!({"metadata": namespaced_meta("web"), "subsets": subsets});
        let cases = [
            (json!([]), "<none>"),
            (
                json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}], "ports": [{"port": 8080}]}]),
                "10.0.0.1:8080,10.0.0.2:8080",
            ),
            (json!([{"addresses": [{"ip": "10.0.0.1"}]}]), "10.0.0.1"),
            (
                json!([{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 80}]}]),
                "[fd00::1]:80",
            ),
            (
                json!([{"addresses": [{"ip": "10.0.0.1"}, {"ip": "10.0.0.2"}],
                        "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}]},
                       {"addresses": [{"ip": "10.0.1.1"}], "ports": [{"port": 9090}]}]),
                "10.0.0.1:80,10.0.0.2:80,10.0.0.1:443 + 2 more...",
            ),
            (
                json!([{"notReadyAddresses": [{"ip": "10.0.0.9"}], "ports": [{"port": 80}]}]),
                "",
            ),
        ];
        assert_eq!(
            header("", "endpoints"),
            vec![("Name", 0), ("Endpoints", 0), ("Age", 0)]
        );
        for (subsets, want) in cases {
            assert_eq!(row("", "endpoints", &ep(subsets))[1], json!(want));
        }
    }
}
