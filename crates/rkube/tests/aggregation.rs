//! API aggregation end to end: an extension API server written here (see `aggregation/server.rs`)
//! registered by an APIService whose Service routes to it, driven through rkube with kubectl.
//!
//! Tests here listen on loopback only. Upstream's validation refuses loopback endpoint addresses
//! (and so does rkube's for Endpoints), so the endpoint path (`--enable-aggregator-routing`) is
//! checked up to MissingEndpoints with a selectorless Service whose EndpointSlice holds a not-ready
//! documentation address (never contacted); the server is then reached through an ExternalName
//! Service naming `localhost`, which upstream's resolver turns into the name itself.

mod support;

#[path = "aggregation/server.rs"]
mod server;

use std::io::BufRead;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use server::{ExtensionServer, GROUP, VERSION};
use support::{Backend, Cluster};

const APISERVICE: &str = "v1alpha1.wardle.example.com";

/// The reason of the APIService's `Available` condition.
fn available_reason(cluster: &Cluster) -> String {
    let out = cluster.kubectl_output(
        &[
            "get",
            "apiservice",
            APISERVICE,
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Available\")].reason}",
        ],
        None,
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn wait_for_reason(cluster: &Cluster, reason: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = available_reason(cluster);
        if now == reason {
            return;
        }
        if Instant::now() > deadline {
            let status = cluster.kubectl(&["get", "apiservice", APISERVICE, "-o", "yaml"]);
            panic!("APIService never got reason {reason} (last: {now:?}):\n{status}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn apply(cluster: &Cluster, manifest: &str) {
    cluster.kubectl_in(&["apply", "-f", "-"], Some(manifest));
}

fn endpoint_slice(ip: IpAddr, port: u16, ready: bool) -> String {
    format!(
        r#"
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-1
  namespace: wardle
  labels: {{kubernetes.io/service-name: api}}
addressType: IPv4
ports: [{{name: https, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: ["{ip}"], conditions: {{ready: {ready}}}}}]
"#
    )
}

/// Reads the first line a `kubectl get --raw <path>` streams, within `limit`.
fn first_streamed_line(cluster: &Cluster, path: &str, limit: Duration) -> String {
    let mut child = Command::new("kubectl")
        .args(["get", "--raw", path])
        .env("KUBECONFIG", &cluster.kubeconfig)
        .env("HOME", cluster.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(limit).unwrap_or_default();
    let _ = child.kill();
    let _ = child.wait();
    line
}

#[test]
fn an_extension_api_server_behind_rkube() {
    let tokens = support::token_file("nobody-token,nobody,1001,\"\"\n");
    let token_arg = format!("--token-auth-file={}", tokens.path().display());
    let cluster = Cluster::start_with(Backend::Sqlite, &[&token_arg]);

    // The extension server trusts the proxy as upstream's do: from the published ConfigMap.
    let field = |key: &str| {
        cluster.kubectl(&[
            "get",
            "configmap",
            "-n",
            "kube-system",
            "extension-apiserver-authentication",
            "-o",
            &format!("jsonpath={{.data.{key}}}"),
        ])
    };
    let front_proxy_ca = field("requestheader-client-ca-file");
    assert!(
        front_proxy_ca.contains("BEGIN CERTIFICATE"),
        "{front_proxy_ca}"
    );
    let allowed: Vec<String> =
        serde_json::from_str(&field("requestheader-allowed-names")).expect("allowed names");
    assert_eq!(allowed, ["front-proxy-client"]);
    assert_eq!(
        field("requestheader-username-headers"),
        r#"["X-Remote-User"]"#
    );
    assert_eq!(
        field("requestheader-group-headers"),
        r#"["X-Remote-Group"]"#
    );
    assert!(field("client-ca-file").contains("BEGIN CERTIFICATE"));
    let reader = cluster.kubectl(&[
        "get",
        "role",
        "-n",
        "kube-system",
        "extension-apiserver-authentication-reader",
        "-o",
        "jsonpath={.rules[0].resourceNames[0]}",
    ]);
    assert_eq!(reader, "extension-apiserver-authentication");

    let ext = ExtensionServer::start(IpAddr::from([127, 0, 0, 1]), &front_proxy_ca, allowed);
    let port = ext.addr.port();

    // Without the front-proxy certificate the extension server is not reachable.
    let direct = Command::new("curl")
        .args(["-sk", "--max-time", "10"])
        .arg(format!("https://{}/apis/{GROUP}/{VERSION}", ext.addr))
        .output()
        .expect("curl");
    assert!(
        !direct.status.success()
            || String::from_utf8_lossy(&direct.stdout).contains("Unauthorized"),
        "a client without the proxy's certificate was served: {}",
        String::from_utf8_lossy(&direct.stdout)
    );

    cluster.kubectl(&["create", "namespace", "wardle"]);
    apply(
        &cluster,
        &format!(
            r#"
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {{name: {APISERVICE}}}
spec:
  group: {GROUP}
  version: {VERSION}
  service: {{namespace: wardle, name: api, port: {port}}}
  caBundle: {}
  groupPriorityMinimum: 1000
  versionPriority: 15
"#,
            ext.ca_bundle()
        ),
    );
    wait_for_reason(&cluster, "ServiceNotFound");
    let down = cluster.kubectl_fails(&["get", "--raw", &format!("/apis/{GROUP}/{VERSION}")], None);
    assert!(
        down.contains("ServiceUnavailable") || down.contains("unable to handle"),
        "{down}"
    );

    apply(
        &cluster,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: wardle}}\n\
             spec: {{ports: [{{name: https, port: {port}, targetPort: {port}}}]}}\n"
        ),
    );
    wait_for_reason(&cluster, "EndpointsNotFound");
    // TEST-NET-1: never contacted, the endpoint is not ready.
    let unreachable = IpAddr::from([192, 0, 2, 1]);
    apply(&cluster, &endpoint_slice(unreachable, port, false));
    wait_for_reason(&cluster, "MissingEndpoints");
    cluster.kubectl(&["delete", "service", "api", "-n", "wardle"]);
    cluster.kubectl(&["delete", "endpointslice", "api-1", "-n", "wardle"]);
    wait_for_reason(&cluster, "ServiceNotFound");
    apply(
        &cluster,
        &format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: api, namespace: wardle}}\n\
             spec: {{type: ExternalName, externalName: localhost, ports: [{{port: {port}}}]}}\n"
        ),
    );
    wait_for_reason(&cluster, "Passed");
    assert!(ext
        .seen()
        .iter()
        .any(|s| s.user == "system:kube-aggregator" && s.groups == ["system:masters"]));

    // Discovery: legacy and aggregated (kubectl 1.32 asks for the latter).
    let apis = cluster.kubectl(&["get", "--raw", "/apis"]);
    assert!(apis.contains(&format!("\"{GROUP}/{VERSION}\"")), "{apis}");
    let group = cluster.kubectl(&["get", "--raw", &format!("/apis/{GROUP}")]);
    assert!(
        group.contains("\"kind\":\"APIGroup\"") && group.contains(VERSION),
        "{group}"
    );
    let resources = cluster.kubectl(&["api-resources", "--api-group", GROUP, "-o", "wide"]);
    assert!(
        resources.contains("flunders")
            && resources.contains("Flunder")
            && resources.contains(" fl "),
        "{resources}"
    );

    // The extension server's OpenAPI v3 document is published by rkube: `kubectl explain` works.
    let explained = cluster.kubectl(&["explain", "flunders"]);
    assert!(
        explained.contains("Flunder is an example type.") && explained.contains("spec"),
        "{explained}"
    );
    let field = cluster.kubectl(&["explain", "flunders.spec.reference"]);
    assert!(field.contains("What the flunder refers to."), "{field}");

    // A list through rkube, as the admin; the extension server saw who asked.
    let listed = cluster.kubectl(&["get", "flunders", "-n", "wardle", "-o", "name"]);
    assert_eq!(listed.trim(), format!("flunder.{GROUP}/first"));
    let got = cluster.kubectl(&[
        "get",
        "fl",
        "first",
        "-n",
        "wardle",
        "-o",
        "jsonpath={.kind}",
    ]);
    assert_eq!(got, "Flunder");
    let list_path = format!("/apis/{GROUP}/{VERSION}/namespaces/wardle/flunders");
    let admin = ext
        .seen()
        .into_iter()
        .find(|s| s.path == list_path)
        .expect("the list reached the extension server");
    assert_eq!(admin.user, "kubernetes-admin");
    assert!(
        admin.groups.contains(&"system:masters".to_string()),
        "{admin:?}"
    );
    assert!(
        admin.groups.contains(&"system:authenticated".to_string()),
        "{admin:?}"
    );

    // Proxied requests are counted as rkube's own are.
    let metrics = cluster.kubectl(&["get", "--raw", "/metrics"]);
    assert!(
        metrics.contains(&format!(
            "apiserver_request_total{{code=\"200\",group=\"{GROUP}\",resource=\"flunders\",verb=\"LIST\",version=\"{VERSION}\"}}"
        )),
        "{}",
        metrics.lines().filter(|l| l.contains(GROUP)).collect::<Vec<_>>().join("\n")
    );

    // rkube authorizes first: a user without RBAC rights never reaches the extension server.
    let out = cluster.kubectl_as("nobody-token", &["get", "flunders", "-n", "wardle"], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("Forbidden") || stderr.contains("forbidden"),
        "{stderr}"
    );
    assert!(!ext.seen().iter().any(|s| s.user == "nobody"));

    // A watch streams through.
    let line = first_streamed_line(
        &cluster,
        &format!("{list_path}?watch=true"),
        Duration::from_secs(20),
    );
    assert!(
        line.contains("\"ADDED\"") && line.contains("\"first\""),
        "{line:?}"
    );

    // The Service gone, the APIService is unavailable and its requests are refused with 503.
    cluster.kubectl(&["delete", "service", "api", "-n", "wardle"]);
    wait_for_reason(&cluster, "ServiceNotFound");
    let out = cluster.kubectl_output(&["get", "--raw", &list_path], None);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ServiceUnavailable") || stderr.contains("unable to handle"),
        "{stderr}"
    );
}
