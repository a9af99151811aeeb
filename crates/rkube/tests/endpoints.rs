//! The Endpoints, EndpointSlice and EndpointSlice mirroring controllers of `rkube server` with the
//! scheduler and simulated nodes, checked through kubectl: a Deployment behind a Service (ready and
//! unready pods, scaling to zero, a named target port), a headless Service with hostnames, 250
//! endpoints over three slices, and a selectorless Service whose custom Endpoints are mirrored.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

/// Polls `f` until it returns `Some`, for at most 45 s.
fn eventually<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(45);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn sorted(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.split_whitespace().map(String::from).collect();
    v.sort();
    v
}

/// The IPs of the running pods with label `selector`, once there are `n`.
fn pod_ips(c: &Cluster, selector: &str, n: usize) -> Vec<String> {
    eventually(&format!("{n} running pods {selector}"), || {
        let out = c.kubectl(&[
            "get",
            "pods",
            "-l",
            selector,
            "--field-selector",
            "status.phase=Running",
            "-o",
            "jsonpath={.items[*].status.podIP}",
        ]);
        let ips = sorted(&out);
        (ips.len() == n).then_some(ips)
    })
}

/// `jsonpath` of Endpoints `name` (empty when they do not exist yet).
fn endpoints(c: &Cluster, name: &str, path: &str) -> String {
    let out = c.kubectl_output(
        &["get", "endpoints", name, "-o", &format!("jsonpath={path}")],
        None,
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn slices(c: &Cluster, service: &str, path: &str) -> String {
    c.kubectl(&[
        "get",
        "endpointslices",
        "-l",
        &format!("kubernetes.io/service-name={service}"),
        "-o",
        &format!("jsonpath={path}"),
    ])
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: nginx
        image: nginx
        ports: [{name: http, containerPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: web, labels: {tier: frontend}}
spec:
  selector: {app: web}
  ports: [{name: web, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata:
  name: flaky
  labels: {app: flaky}
  annotations: {sim.rkube.io/unready-after: 4s}
spec:
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Service
metadata: {name: flaky}
spec:
  selector: {app: flaky}
  ports: [{port: 80}]
"#;

#[test]
fn a_deployment_behind_a_service() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    c.kubectl_in(&["apply", "-f", "-"], Some(WEB));
    let ips = pod_ips(&c, "app=web", 3);

    // Endpoints: the three pods, ready, on the named port's number.
    let ready = eventually("3 ready addresses", || {
        let got = sorted(&endpoints(&c, "web", "{.subsets[*].addresses[*].ip}"));
        (got.len() == 3).then_some(got)
    });
    assert_eq!(ready, ips);
    assert_eq!(
        endpoints(
            &c,
            "web",
            "{.subsets[*].ports[*].port} {.subsets[*].ports[*].name}"
        ),
        "8080 web"
    );
    assert_eq!(endpoints(&c, "web", "{.metadata.labels.tier}"), "frontend");
    let refs = endpoints(
        &c,
        "web",
        "{.subsets[0].addresses[0].targetRef.kind} {.subsets[0].addresses[0].nodeName}",
    );
    assert!(refs.starts_with("Pod sim-"), "{refs}");

    // One EndpointSlice with the same three addresses, ready, with zones and an owner.
    let slice_ips = eventually("3 endpoints in the slice", || {
        let got = sorted(&slices(&c, "web", "{.items[*].endpoints[*].addresses[*]}"));
        (got.len() == 3).then_some(got)
    });
    assert_eq!(slice_ips, ips);
    assert_eq!(
        slices(&c, "web", "{.items[*].metadata.name}")
            .split_whitespace()
            .count(),
        1
    );
    assert_eq!(
        slices(&c, "web", "{.items[0].endpoints[*].conditions.ready}"),
        "true true true"
    );
    assert_eq!(
        slices(&c, "web", "{.items[0].addressType} {.items[0].ports[0].port} {.items[0].metadata.labels.endpointslice\\.kubernetes\\.io/managed-by} {.items[0].metadata.ownerReferences[0].kind}/{.items[0].metadata.ownerReferences[0].name}"),
        "IPv4 8080 endpointslice-controller.k8s.io Service/web"
    );
    assert!(slices(&c, "web", "{.items[0].metadata.generateName}") == "web-");
    assert!(slices(&c, "web", "{.items[0].endpoints[0].zone}").starts_with(char::is_alphanumeric));
    assert_eq!(
        endpoints(
            &c,
            "web",
            "{.metadata.labels.endpoints\\.kubernetes\\.io/managed-by}"
        ),
        "endpoint-controller"
    );
    let described = c.kubectl(&["describe", "endpoints", "web"]);
    assert!(described.contains("8080"), "{described}");
    let described = c.kubectl(&["describe", "service", "web"]);
    assert!(
        described.contains(&format!("{}:8080", ips[0])),
        "{described}"
    );

    // A pod that stops being ready moves to notReadyAddresses and ready=false.
    let flaky_ip = pod_ips(&c, "app=flaky", 1).remove(0);
    eventually("the flaky pod not ready in Endpoints", || {
        (endpoints(&c, "flaky", "{.subsets[*].notReadyAddresses[*].ip}") == flaky_ip
            && endpoints(&c, "flaky", "{.subsets[*].addresses[*].ip}").is_empty())
        .then_some(())
    });
    eventually("the flaky pod not ready in its slice", || {
        (slices(
            &c,
            "flaky",
            "{.items[*].endpoints[*].conditions.ready}/{.items[*].endpoints[*].conditions.serving}",
        ) == "false/false")
            .then_some(())
    });

    // Scaling to zero: terminating pods leave the Endpoints at once but stay in the slice as
    // serving and terminating until they are gone; then the slice is an empty placeholder.
    c.kubectl(&["scale", "deployment", "web", "--replicas=0"]);
    eventually("empty Endpoints", || {
        (endpoints(&c, "web", "{.subsets}").is_empty()).then_some(())
    });
    eventually("terminating endpoints", || {
        let got = slices(&c, "web", "{range .items[*].endpoints[*]}{.conditions.ready}/{.conditions.serving}/{.conditions.terminating} {end}");
        got.contains("false/true/true").then_some(())
    });
    eventually("an empty slice", || {
        let names = slices(&c, "web", "{.items[*].metadata.name}");
        (names.split_whitespace().count() == 1
            && slices(&c, "web", "{.items[*].endpoints[*].addresses[*]}").is_empty())
        .then_some(())
    });

    // Deleting the Service deletes its Endpoints.
    c.kubectl(&["delete", "service", "web"]);
    eventually("Endpoints gone", || {
        let out = c.kubectl_output(&["get", "endpoints", "web"], None);
        (!out.status.success()).then_some(())
    });
}

const HEADLESS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: db}
spec:
  clusterIP: None
  selector: {app: db}
  ports: [{port: 5432}]
---
apiVersion: v1
kind: Pod
metadata: {name: db-0, labels: {app: db}}
spec:
  hostname: db-0
  subdomain: db
  containers: [{name: c, image: postgres}]
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: many}
spec:
  replicas: 250
  selector: {matchLabels: {app: many}}
  template:
    metadata: {labels: {app: many}}
    spec:
      containers: [{name: c, image: pause}]
"#;

const MANY_SERVICE: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: many}
spec:
  selector: {app: many}
  ports: [{port: 80}]
"#;

#[test]
fn headless_hostnames_and_many_endpoints() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    c.kubectl_in(&["apply", "-f", "-"], Some(HEADLESS));
    let ip = pod_ips(&c, "app=db", 1).remove(0);
    eventually("the headless Endpoints", || {
        (endpoints(
            &c,
            "db",
            "{.subsets[0].addresses[0].ip} {.subsets[0].addresses[0].hostname}",
        ) == format!("{ip} db-0"))
        .then_some(())
    });
    assert_eq!(endpoints(&c, "db", "{.subsets[0].ports[0].port}"), "5432");
    let labels = endpoints(&c, "db", "{.metadata.labels}");
    assert!(
        labels.contains("\"service.kubernetes.io/headless\":\"\""),
        "{labels}"
    );
    eventually("the headless slice", || {
        (slices(&c, "db", "{.items[0].endpoints[0].hostname}") == "db-0").then_some(())
    });
    let labels = slices(&c, "db", "{.items[0].metadata.labels}");
    assert!(
        labels.contains("\"service.kubernetes.io/headless\":\"\""),
        "{labels}"
    );

    // 250 endpoints: three slices of at most 100. The Service comes after its pods run, so the
    // first sync sees all of them: pods arriving in batches may fairly take more slices, as
    // upstream's reconciler only fills slices it is already changing.
    pod_ips(&c, "app=many", 250);
    c.kubectl_in(&["apply", "-f", "-"], Some(MANY_SERVICE));
    let sizes = eventually("250 endpoints over slices", || {
        let out = slices(
            &c,
            "many",
            "{range .items[*]}{.metadata.name}={range .endpoints[*]}x{end} {end}",
        );
        let mut sizes: Vec<usize> = out
            .split_whitespace()
            .map(|s| s.split('=').nth(1).unwrap_or("").len())
            .collect();
        sizes.sort();
        (sizes.iter().sum::<usize>() == 250).then_some(sizes)
    });
    assert_eq!(sizes.len(), 3, "{sizes:?}");
    assert!(sizes.iter().all(|n| *n <= 100), "{sizes:?}");
    let all = sorted(&slices(&c, "many", "{.items[*].endpoints[*].addresses[*]}"));
    let mut dedup = all.clone();
    dedup.dedup();
    assert_eq!((all.len(), dedup.len()), (250, 250));
    // Endpoints hold them all too (under the 1000 capacity).
    eventually("250 addresses in the Endpoints", || {
        (sorted(&endpoints(&c, "many", "{.subsets[*].addresses[*].ip}")).len() == 250).then_some(())
    });
}

const EXTERNAL: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: ext}
spec:
  ports: [{name: https, port: 443}]
---
apiVersion: v1
kind: Endpoints
metadata: {name: ext, labels: {team: payments}}
subsets:
- addresses: [{ip: 192.0.2.10}, {ip: 192.0.2.11}]
  notReadyAddresses: [{ip: 192.0.2.12}]
  ports: [{name: https, port: 8443}]
"#;

#[test]
fn selectorless_service_endpoints_are_mirrored() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    c.kubectl_in(&["apply", "-f", "-"], Some(EXTERNAL));
    eventually("the mirrored slice", || {
        (sorted(&slices(&c, "ext", "{.items[*].endpoints[*].addresses[*]}")).len() == 3)
            .then_some(())
    });
    assert_eq!(
        slices(&c, "ext", "{.items[0].metadata.labels.endpointslice\\.kubernetes\\.io/managed-by} {.items[0].metadata.labels.team} {.items[0].ports[0].name}:{.items[0].ports[0].port} {.items[0].metadata.ownerReferences[0].kind}"),
        "endpointslicemirroring-controller.k8s.io payments https:8443 Endpoints"
    );
    let ready = slices(
        &c,
        "ext",
        "{range .items[0].endpoints[*]}{.addresses[0]}={.conditions.ready} {end}",
    );
    assert_eq!(
        sorted(&ready),
        ["192.0.2.10=true", "192.0.2.11=true", "192.0.2.12=false"]
    );
    // The Endpoints controller leaves the custom Endpoints alone.
    assert_eq!(endpoints(&c, "ext", "{.subsets[0].ports[0].port}"), "8443");

    // Changes to the Endpoints are mirrored.
    c.kubectl(&[
        "patch",
        "endpoints",
        "ext",
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/subsets/0/addresses", "value": [{"ip": "192.0.2.20"}]}]"#,
    ]);
    eventually("the mirrored change", || {
        (sorted(&slices(&c, "ext", "{.items[*].endpoints[*].addresses[*]}"))
            == ["192.0.2.12", "192.0.2.20"])
        .then_some(())
    });
    // Skipping mirroring removes the slice.
    c.kubectl(&[
        "label",
        "endpoints",
        "ext",
        "endpointslice.kubernetes.io/skip-mirror=true",
    ]);
    eventually("no mirrored slice", || {
        slices(&c, "ext", "{.items[*].metadata.name}")
            .trim()
            .is_empty()
            .then_some(())
    });
}
