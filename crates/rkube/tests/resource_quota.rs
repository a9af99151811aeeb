//! ResourceQuota and LimitRange through kubectl, against `rkube server` with simulated nodes: the
//! resource quota controller's `used`/`hard` as `kubectl describe quota` shows them while pods and
//! ConfigMaps come and go, quota admission refusing creates over quota with upstream's messages
//! (object counts, compute resources, pods lacking requests), LimitRange defaults and bounds, and a
//! Deployment stopping at a pod-count quota with its ReplicaSet's FailedCreate event.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `resource=used/hard` for every row of `kubectl describe quota`, sorted.
fn describe(c: &Cluster, ns: &str, quota: &str) -> Vec<String> {
    let out = c.kubectl(&["describe", "quota", quota, "-n", ns]);
    let mut rows: Vec<String> = out
        .lines()
        .skip_while(|l| !l.starts_with("--------"))
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (cols.len() == 3).then(|| format!("{}={}/{}", cols[0], cols[1], cols[2]))
        })
        .collect();
    rows.sort();
    rows
}

/// Waits until the controller has computed the quota: every hard limit has a used value (`kubectl
/// describe` prints 0 for a missing one, so it cannot tell).
fn wait_computed(c: &Cluster, ns: &str, quota: &str) {
    wait_for(&format!("quota {quota} to be computed"), || {
        let out = c.kubectl(&[
            "get",
            "quota",
            quota,
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.hard}|{.status.used}",
        ]);
        let (hard, used) = out.split_once('|').unwrap_or_default();
        let keys = |s: &str| -> Vec<String> {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(s)
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default()
        };
        !keys(hard).is_empty() && keys(hard) == keys(used)
    });
}

fn wait_describe(c: &Cluster, ns: &str, quota: &str, want: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let last = describe(c, ns, quota);
        if last == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "kubectl describe quota {quota}: want {want:?}, last saw {last:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod(name: &str, extra: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: c\n    image: nginx\n{extra}"
    )
}

/// A namespace with its root CA ConfigMap already published (so ConfigMap counts are stable).
fn namespace(c: &Cluster, ns: &str) {
    c.kubectl(&["create", "namespace", ns]);
    wait_for("kube-root-ca.crt", || {
        c.kubectl_output(&["get", "configmap", "kube-root-ca.crt", "-n", ns], None)
            .status
            .success()
    });
}

#[test]
fn quota_usage_follows_objects_and_refuses_excess() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2"]);
    namespace(&c, "q1");
    c.kubectl(&[
        "create",
        "quota",
        "demo",
        "-n",
        "q1",
        "--hard=pods=2,configmaps=3,count/secrets=4",
    ]);
    wait_computed(&c, "q1", "demo");
    wait_describe(
        &c,
        "q1",
        "demo",
        &["configmaps=1/3", "count/secrets=0/4", "pods=0/2"],
    );

    // Creates are charged by admission at once.
    c.kubectl(&[
        "create",
        "configmap",
        "cm1",
        "-n",
        "q1",
        "--from-literal=a=b",
    ]);
    c.kubectl(&["create", "secret", "generic", "s1", "-n", "q1"]);
    c.kubectl_in(&["apply", "-n", "q1", "-f", "-"], Some(&pod("p1", "")));
    c.kubectl_in(&["apply", "-n", "q1", "-f", "-"], Some(&pod("p2", "")));
    wait_describe(
        &c,
        "q1",
        "demo",
        &["configmaps=2/3", "count/secrets=1/4", "pods=2/2"],
    );

    // Over quota: refused with upstream's message, nothing charged.
    let err = c.kubectl_fails(&["apply", "-n", "q1", "-f", "-"], Some(&pod("p3", "")));
    assert!(
        err.contains(
            "pods \"p3\" is forbidden: exceeded quota: demo, requested: pods=1, used: pods=2, limited: pods=2"
        ),
        "{err}"
    );
    c.kubectl(&["create", "configmap", "cm2", "-n", "q1"]);
    let err = c.kubectl_fails(&["create", "configmap", "cm3", "-n", "q1"], None);
    assert!(
        err.contains(
            "configmaps \"cm3\" is forbidden: exceeded quota: demo, requested: configmaps=1, used: configmaps=3, limited: configmaps=3"
        ),
        "{err}"
    );
    // A dry run is checked but not charged.
    let err = c.kubectl_fails(
        &["create", "configmap", "cm4", "-n", "q1", "--dry-run=server"],
        None,
    );
    assert!(err.contains("exceeded quota: demo"), "{err}");

    // Deletions give quota back (the controller's replenishment).
    c.kubectl(&["delete", "configmap", "cm1", "cm2", "-n", "q1"]);
    c.kubectl(&["delete", "pod", "p1", "-n", "q1", "--wait=false"]);
    wait_describe(
        &c,
        "q1",
        "demo",
        &["configmaps=1/3", "count/secrets=1/4", "pods=1/2"],
    );
    c.kubectl_in(&["apply", "-n", "q1", "-f", "-"], Some(&pod("p3", "")));
    wait_describe(
        &c,
        "q1",
        "demo",
        &["configmaps=1/3", "count/secrets=1/4", "pods=2/2"],
    );

    // Raising the limit is reflected in status.hard.
    c.kubectl(&[
        "patch",
        "quota",
        "demo",
        "-n",
        "q1",
        "--type=merge",
        "-p",
        r#"{"spec":{"hard":{"pods":"5"}}}"#,
    ]);
    wait_describe(
        &c,
        "q1",
        "demo",
        &["configmaps=1/3", "count/secrets=1/4", "pods=2/5"],
    );
}

const LIMIT_RANGE: &str = r#"
apiVersion: v1
kind: LimitRange
metadata:
  name: defaults
spec:
  limits:
  - type: Container
    default:
      memory: 512Mi
    defaultRequest:
      cpu: 500m
    max:
      cpu: "1"
"#;

#[test]
fn compute_quota_with_limit_range_defaults() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2"]);
    namespace(&c, "q2");
    c.kubectl(&[
        "create",
        "quota",
        "compute",
        "-n",
        "q2",
        "--hard=requests.cpu=1,limits.memory=1Gi",
    ]);
    wait_computed(&c, "q2", "compute");
    wait_describe(
        &c,
        "q2",
        "compute",
        &["limits.memory=0/1Gi", "requests.cpu=0/1"],
    );
    // Without requests and limits, a compute quota refuses the pod.
    let err = c.kubectl_fails(&["apply", "-n", "q2", "-f", "-"], Some(&pod("bare", "")));
    assert!(
        err.contains("pods \"bare\" is forbidden: failed quota: compute: must specify limits.memory for: c; requests.cpu for: c"),
        "{err}"
    );

    // A LimitRange supplies them (max cpu 1 makes the default cpu limit 1 too).
    c.kubectl_in(&["apply", "-n", "q2", "-f", "-"], Some(LIMIT_RANGE));
    c.kubectl_in(&["apply", "-n", "q2", "-f", "-"], Some(&pod("a", "")));
    let resources = c.kubectl(&[
        "get",
        "pod",
        "a",
        "-n",
        "q2",
        "-o",
        "jsonpath={.spec.containers[0].resources.requests.cpu} {.spec.containers[0].resources.limits.cpu} {.spec.containers[0].resources.limits.memory} {.metadata.annotations.kubernetes\\.io/limit-ranger}",
    ]);
    assert_eq!(
        resources,
        "500m 1 512Mi LimitRanger plugin set: cpu, memory request for container c; cpu, memory limit for container c"
    );
    wait_describe(
        &c,
        "q2",
        "compute",
        &["limits.memory=512Mi/1Gi", "requests.cpu=500m/1"],
    );
    c.kubectl_in(&["apply", "-n", "q2", "-f", "-"], Some(&pod("b", "")));
    let err = c.kubectl_fails(&["apply", "-n", "q2", "-f", "-"], Some(&pod("c", "")));
    assert!(
        err.contains("pods \"c\" is forbidden: exceeded quota: compute, requested: limits.memory=512Mi,requests.cpu=500m, used: limits.memory=1Gi,requests.cpu=1, limited: limits.memory=1Gi,requests.cpu=1"),
        "{err}"
    );
    // The LimitRange's maximum.
    let big = "    resources:\n      limits:\n        cpu: \"2\"\n";
    let err = c.kubectl_fails(&["apply", "-n", "q2", "-f", "-"], Some(&pod("big", big)));
    assert!(
        err.contains(
            "pods \"big\" is forbidden: maximum cpu usage per Container is 1, but limit is 2"
        ),
        "{err}"
    );
}

#[test]
fn deployment_stops_at_the_pod_quota() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2"]);
    namespace(&c, "q3");
    c.kubectl(&["create", "quota", "pods", "-n", "q3", "--hard=pods=2"]);
    wait_computed(&c, "q3", "pods");
    wait_describe(&c, "q3", "pods", &["pods=0/2"]);
    c.kubectl(&[
        "create",
        "deployment",
        "web",
        "-n",
        "q3",
        "--image=nginx",
        "--replicas=4",
    ]);
    let failed_create = || {
        c.kubectl(&[
            "get",
            "events",
            "-n",
            "q3",
            "--field-selector",
            "reason=FailedCreate,involvedObject.kind=ReplicaSet",
            "-o",
            "jsonpath={range .items[*]}{.source.component}: {.message}{\"\\n\"}{end}",
        ])
    };
    wait_for("the ReplicaSet's FailedCreate event", || {
        !failed_create().is_empty()
    });
    let events = failed_create();
    let first = events.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("replicaset-controller: Error creating: pods \"web-")
            && first.ends_with(
                "is forbidden: exceeded quota: pods, requested: pods=1, used: pods=2, limited: pods=2"
            ),
        "{events}"
    );
    let pods = c.kubectl(&["get", "pods", "-n", "q3", "-l", "app=web", "-o", "name"]);
    assert_eq!(pods.lines().count(), 2, "{pods}");
    assert_eq!(describe(&c, "q3", "pods"), ["pods=2/2"]);
    // The ReplicaSet reports the failure in its status.
    wait_for("the ReplicaFailure condition", || {
        c.kubectl(&[
            "get",
            "rs",
            "-n",
            "q3",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].status.conditions[?(@.type==\"ReplicaFailure\")].reason}",
        ]) == "FailedCreate"
    });
    // And the Deployment carries it over, as upstream.
    wait_for("the Deployment's ReplicaFailure condition", || {
        c.kubectl(&[
            "get",
            "deployment",
            "web",
            "-n",
            "q3",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"ReplicaFailure\")].reason}",
        ]) == "FailedCreate"
    });
}

const CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
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
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

#[test]
fn concurrent_creates_never_overshoot_and_custom_resources_count() {
    let c = Cluster::start_all(Backend::Sqlite, &["--disable-scheduler"]);
    namespace(&c, "q4");
    c.kubectl(&["create", "quota", "cm", "-n", "q4", "--hard=configmaps=10"]);
    wait_computed(&c, "q4", "cm");
    wait_describe(&c, "q4", "cm", &["configmaps=1/10"]);

    // 40 concurrent creates for 9 free slots: exactly 9 succeed, the others get 403.
    let rt = support::runtime();
    let (created, refused) = rt.block_on(async {
        use k8s_openapi::api::core::v1::ConfigMap;
        use kube::api::{Api, PostParams};
        let client = c.client().await;
        let api: Api<ConfigMap> = Api::namespaced(client, "q4");
        let creates = (0..40).map(|i| {
            let api = api.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("race-{i}")}, "data": {"k": "v"}}))
                .expect("configmap");
                api.create(&PostParams::default(), &cm).await
            }
        });
        let results = futures::future::join_all(creates).await;
        let created = results.iter().filter(|r| r.is_ok()).count();
        let refused = results
            .iter()
            .filter(|r| matches!(r, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("exceeded quota: cm")))
            .count();
        (created, refused)
    });
    assert_eq!((created, refused), (9, 31));
    wait_describe(&c, "q4", "cm", &["configmaps=10/10"]);
    let listed = c.kubectl(&["get", "configmaps", "-n", "q4", "-o", "name"]);
    assert_eq!(listed.lines().count(), 10, "{listed}");

    // A custom resource counted by `count/<resource>.<group>`.
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.com",
        "--timeout=30s",
    ]);
    c.kubectl(&[
        "create",
        "quota",
        "widgets",
        "-n",
        "q4",
        "--hard=count/widgets.example.com=2",
    ]);
    wait_computed(&c, "q4", "widgets");
    wait_describe(&c, "q4", "widgets", &["count/widgets.example.com=0/2"]);
    let widget = |name: &str| {
        format!("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\n")
    };
    c.kubectl_in(&["create", "-n", "q4", "-f", "-"], Some(&widget("w1")));
    c.kubectl_in(&["create", "-n", "q4", "-f", "-"], Some(&widget("w2")));
    let err = c.kubectl_fails(&["create", "-n", "q4", "-f", "-"], Some(&widget("w3")));
    assert!(
        err.contains("widgets.example.com \"w3\" is forbidden: exceeded quota: widgets, requested: count/widgets.example.com=1, used: count/widgets.example.com=2, limited: count/widgets.example.com=2"),
        "{err}"
    );
    c.kubectl(&["delete", "widget", "w1", "-n", "q4"]);
    wait_describe(&c, "q4", "widgets", &["count/widgets.example.com=1/2"]);
    c.kubectl_in(&["create", "-n", "q4", "-f", "-"], Some(&widget("w3")));
}
