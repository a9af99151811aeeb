//! Printers of `networking.k8s.io` and `discovery.k8s.io` kinds, mirroring upstream
//! `pkg/printers/internalversion`: ingresses, ingressclasses, networkpolicies, servicecidrs,
//! ipaddresses, endpointslices.
//!
//! Upstream's ipaddress printer emits an AGE cell without an AGE column; kubectl never shows it, so it
//! is left out here to keep one cell per column.

use serde_json::{json, Value};

use super::service::load_balancer_ingress;
use super::time::Instant;
use super::util::{
    arr_at, format_label_selector, get, int_at, list_with_more, name, opt_str, str_at,
};
use super::{age_cell, col, printer, ColumnDefinition, Printers, AGE, NAME};

pub(super) const PRINTERS: Printers = &[
    (
        "networking.k8s.io",
        "ingresses",
        printer(INGRESS_COLUMNS, ingress_cells),
    ),
    (
        "networking.k8s.io",
        "ingressclasses",
        printer(INGRESSCLASS_COLUMNS, ingressclass_cells),
    ),
    (
        "networking.k8s.io",
        "networkpolicies",
        printer(NETPOL_COLUMNS, netpol_cells),
    ),
    (
        "networking.k8s.io",
        "servicecidrs",
        printer(SERVICECIDR_COLUMNS, servicecidr_cells),
    ),
    (
        "networking.k8s.io",
        "ipaddresses",
        printer(IPADDRESS_COLUMNS, ipaddress_cells),
    ),
    (
        "discovery.k8s.io",
        "endpointslices",
        printer(SLICE_COLUMNS, slice_cells),
    ),
];

const INGRESS_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Class",
        "string",
        "The name of the IngressClass resource that should be used for additional configuration",
    ),
    col(
        "Hosts",
        "string",
        "Hosts that incoming requests are matched against before the ingress rule",
    ),
    col(
        "Address",
        "string",
        "Address is a list containing ingress points for the load-balancer",
    ),
    col("Ports", "string", "Ports of TLS configurations that open"),
    AGE,
];

/// `formatHosts`: the first three rule hosts, `*` when none has a host.
fn format_hosts(rules: &[Value]) -> String {
    const MAX: usize = 3;
    let mut list: Vec<&str> = Vec::new();
    let mut more = false;
    for rule in rules {
        if list.len() == MAX {
            more = true;
        }
        let host = str_at(rule, &["host"]);
        if !more && !host.is_empty() {
            list.push(host);
        }
    }
    if list.is_empty() {
        return "*".to_string();
    }
    let joined = list.join(",");
    if more {
        // Upstream counts all rules here, hostless ones included.
        format!("{joined} + {} more...", rules.len() - MAX)
    } else {
        joined
    }
}

fn ingress_cells(ing: &Value, now: Instant) -> Vec<Value> {
    let ports = if arr_at(ing, &["spec", "tls"]).is_empty() {
        "80"
    } else {
        "80, 443"
    };
    vec![
        json!(name(ing)),
        json!(opt_str(ing, &["spec", "ingressClassName"]).unwrap_or("<none>")),
        json!(format_hosts(arr_at(ing, &["spec", "rules"]))),
        json!(load_balancer_ingress(ing)),
        json!(ports),
        age_cell(ing, now),
    ]
}

const INGRESSCLASS_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Controller",
        "string",
        "Controller that is responsible for handling this class",
    ),
    col(
        "Parameters",
        "string",
        "A reference to a resource with additional parameters",
    ),
    AGE,
];

fn ingressclass_cells(ic: &Value, now: Instant) -> Vec<Value> {
    let parameters = match get(ic, &["spec", "parameters"]).filter(|p| p.is_object()) {
        Some(p) => {
            let mut s = str_at(p, &["kind"]).to_string();
            if let Some(group) = opt_str(p, &["apiGroup"]) {
                s = format!("{s}.{group}");
            }
            format!("{s}/{}", str_at(p, &["name"]))
        }
        None => "<none>".to_string(),
    };
    vec![
        json!(name(ic)),
        json!(str_at(ic, &["spec", "controller"])),
        json!(parameters),
        age_cell(ic, now),
    ]
}

const NETPOL_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Pod-Selector",
        "string",
        "Selects the pods to which this NetworkPolicy object applies.",
    ),
    AGE,
];

fn netpol_cells(np: &Value, now: Instant) -> Vec<Value> {
    // The pod selector is a value, not a pointer: unset means empty, selecting every pod.
    let selector = get(np, &["spec", "podSelector"])
        .cloned()
        .unwrap_or_else(|| json!({}));
    vec![
        json!(name(np)),
        json!(format_label_selector(Some(&selector))),
        age_cell(np, now),
    ]
}

const SERVICECIDR_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("CIDRs", "string", "CIDRs defines the IP blocks in CIDR notation (e.g. \"192.168.0.0/24\" or \"2001:db8::/64\") from which to assign service cluster IPs."),
    AGE,
];

fn servicecidr_cells(sc: &Value, now: Instant) -> Vec<Value> {
    let cidrs: Vec<&str> = arr_at(sc, &["spec", "cidrs"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    vec![json!(name(sc)), json!(cidrs.join(",")), age_cell(sc, now)]
}

const IPADDRESS_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "ParentRef",
        "string",
        "ParentRef references the resource that an IPAddress is attached to.",
    ),
];

fn ipaddress_cells(ip: &Value, _now: Instant) -> Vec<Value> {
    let parent = match get(ip, &["spec", "parentRef"]).filter(|p| p.is_object()) {
        Some(p) => {
            let (group, resource) = (str_at(p, &["group"]), str_at(p, &["resource"]));
            let mut s = if group.is_empty() {
                resource.to_string()
            } else {
                format!("{resource}.{group}")
            };
            s = s.to_lowercase();
            let ns = str_at(p, &["namespace"]);
            if !ns.is_empty() {
                s = format!("{s}/{ns}");
            }
            format!("{s}/{}", str_at(p, &["name"]))
        }
        None => "<none>".to_string(),
    };
    vec![json!(name(ip)), json!(parent)]
}

const SLICE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "AddressType",
        "string",
        "addressType specifies the type of address carried by this EndpointSlice.",
    ),
    col(
        "Ports",
        "string",
        "ports specifies the list of network ports exposed by each endpoint in this slice.",
    ),
    col(
        "Endpoints",
        "string",
        "endpoints is a list of unique endpoints in this slice.",
    ),
    AGE,
];

fn slice_cells(es: &Value, now: Instant) -> Vec<Value> {
    let ports: Vec<String> = arr_at(es, &["ports"])
        .iter()
        .map(|p| {
            match (
                get(p, &["port"]).filter(|n| n.is_number()),
                opt_str(p, &["name"]),
            ) {
                (Some(_), _) => int_at(p, &["port"]).to_string(),
                (None, Some(n)) => n.to_string(),
                (None, None) => "*".to_string(),
            }
        })
        .collect();
    let addresses: Vec<String> = arr_at(es, &["endpoints"])
        .iter()
        .flat_map(|e| arr_at(e, &["addresses"]))
        .map(|a| a.as_str().unwrap_or("").to_string())
        .collect();
    vec![
        json!(name(es)),
        json!(str_at(es, &["addressType"])),
        json!(list_with_more(&ports, 3)),
        json!(list_with_more(&addresses, 3)),
        age_cell(es, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{header, row, CREATED};

    #[test]
    fn ingresses() {
        assert_eq!(
            header("networking.k8s.io", "ingresses"),
            vec![
                ("Name", 0),
                ("Class", 0),
                ("Hosts", 0),
                ("Address", 0),
                ("Ports", 0),
                ("Age", 0)
            ]
        );
        let ing = json!({
            "metadata": {"name": "web", "creationTimestamp": CREATED},
            "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"]}],
                "rules": [{"host": "a.example.com"}, {}, {"host": "b.example.com"}, {"host": "c.example.com"}, {"host": "d.example.com"}]},
            "status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}}
        });
        assert_eq!(
            row("networking.k8s.io", "ingresses", &ing),
            vec![
                json!("web"),
                json!("nginx"),
                json!("a.example.com,b.example.com,c.example.com + 2 more..."),
                json!("203.0.113.10"),
                json!("80, 443"),
                json!("10m"),
            ]
        );
        let bare = json!({"metadata": {"name": "x"}, "spec": {"rules": [{}]}});
        assert_eq!(
            row("networking.k8s.io", "ingresses", &bare)[1..5],
            [json!("<none>"), json!("*"), json!(""), json!("80")]
        );
    }

    #[test]
    fn ingressclasses_and_networkpolicies() {
        let ic = json!({"metadata": {"name": "nginx"}, "spec": {"controller": "k8s.io/ingress-nginx",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external-lb"}}});
        assert_eq!(
            row("networking.k8s.io", "ingressclasses", &ic)[..3],
            [
                json!("nginx"),
                json!("k8s.io/ingress-nginx"),
                json!("IngressParameters.k8s.example.com/external-lb")
            ]
        );
        let np = json!({"metadata": {"name": "deny"}, "spec": {"podSelector": {}}});
        assert_eq!(
            row("networking.k8s.io", "networkpolicies", &np)[1],
            json!("<none>")
        );
        let np = json!({"metadata": {"name": "db"}, "spec": {"podSelector": {"matchLabels": {"role": "db"}}}});
        assert_eq!(
            header("networking.k8s.io", "networkpolicies"),
            vec![("Name", 0), ("Pod-Selector", 0), ("Age", 0)]
        );
        assert_eq!(
            row("networking.k8s.io", "networkpolicies", &np)[1],
            json!("role=db")
        );
    }

    #[test]
    fn servicecidrs_and_ipaddresses() {
        let sc = json!({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/12", "fd00::/108"]}});
        assert_eq!(
            row("networking.k8s.io", "servicecidrs", &sc)[1],
            json!("10.96.0.0/12,fd00::/108")
        );
        assert_eq!(
            header("networking.k8s.io", "servicecidrs"),
            vec![("Name", 0), ("CIDRs", 0), ("Age", 0)]
        );
        let sc = json!({"metadata": {"name": "kubernetes", "creationTimestamp": CREATED},
            "spec": {"cidrs": ["10.96.0.0/12"]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert_eq!(
            row("networking.k8s.io", "servicecidrs", &sc),
            vec![json!("kubernetes"), json!("10.96.0.0/12"), json!("10m")]
        );
        assert_eq!(
            row("networking.k8s.io", "servicecidrs", &json!({}))[1],
            json!("")
        );
        assert_eq!(
            header("networking.k8s.io", "ipaddresses"),
            vec![("Name", 0), ("ParentRef", 0)]
        );
        let ip = json!({"metadata": {"name": "10.96.0.1"}, "spec": {"parentRef":
            {"group": "", "resource": "services", "namespace": "default", "name": "kubernetes"}}});
        assert_eq!(
            row("networking.k8s.io", "ipaddresses", &ip),
            vec![json!("10.96.0.1"), json!("services/default/kubernetes")]
        );
        // Group-qualified and lower-cased; no namespace segment for a cluster-scoped parent.
        let ip = json!({"metadata": {"name": "2001:db8::1"}, "spec": {"parentRef":
            {"group": "Gateway.Networking.k8s.io", "resource": "Gateways", "name": "edge"}}});
        assert_eq!(
            row("networking.k8s.io", "ipaddresses", &ip)[1],
            json!("gateways.gateway.networking.k8s.io/edge")
        );
        assert_eq!(
            row("networking.k8s.io", "ipaddresses", &json!({"spec": {}}))[1],
            json!("<none>")
        );
    }

    #[test]
    fn endpointslices() {
        assert_eq!(
            header("discovery.k8s.io", "endpointslices"),
            vec![
                ("Name", 0),
                ("AddressType", 0),
                ("Ports", 0),
                ("Endpoints", 0),
                ("Age", 0)
            ]
        );
        let es = json!({
            "metadata": {"name": "web-abc", "creationTimestamp": CREATED},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 80}, {"name": "metrics"}, {}, {"port": 9090}],
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["10.0.0.2", "10.0.0.3"]}, {"addresses": ["10.0.0.4"]}]
        });
        assert_eq!(
            row("discovery.k8s.io", "endpointslices", &es),
            vec![
                json!("web-abc"),
                json!("IPv4"),
                json!("80,metrics,* + 1 more..."),
                json!("10.0.0.1,10.0.0.2,10.0.0.3 + 1 more..."),
                json!("10m"),
            ]
        );
        let empty = json!({"metadata": {"name": "e"}, "addressType": "IPv6"});
        assert_eq!(
            row("discovery.k8s.io", "endpointslices", &empty)[2..4],
            [json!("<unset>"), json!("<unset>")]
        );
    }
}
