//! The horizontal pod autoscaler of `rkube server` on simulated nodes, driven by kubectl. One server
//! (sync period 1 s) for every case:
//! - a Deployment of 2 pods requesting 100m CPU whose template says they use 200m
//!   (`sim.rkube.io/cpu-usage`, read by the built-in `metrics.k8s.io` PodMetrics) is scaled to the
//!   HPA's max of 6 (target 50%); with the template at 10m it comes back to 2 once the 10 s
//!   scale-down window has passed. Status, conditions, the SuccessfulRescale event, `kubectl get
//!   hpa` and the autoscaling/v1 view (CPU target, the rest in annotations) are checked on the way;
//! - a custom resource with a scale subresource below the HPA's minimum is scaled up to it
//!   (discovery maps its kind; no metrics are needed for that);
//! - an External metric (no external metrics API is served) leaves ScalingActive False with
//!   upstream's reason; HPAs written as autoscaling/v1 (a manifest, `kubectl autoscale`) read back
//!   as v2; a second HPA over the same pods gets AmbiguousSelector.
//!
//! The CPU initialization period is shortened to 1 s: simulated pods are ready at once, and with
//! upstream's 5 min a pod's first samples would wait a metrics window after readiness.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Cluster};

fn json(c: &Cluster, args: &[&str]) -> Value {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl(&a)).expect("kubectl -o json")
}

fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        match f() {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what} not within {limit:?}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

fn condition(hpa: &Value, type_: &str) -> (String, String) {
    let c = hpa["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .cloned()
        .unwrap_or(Value::Null);
    (
        c["status"].as_str().unwrap_or("").to_string(),
        c["reason"].as_str().unwrap_or("").to_string(),
    )
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata:
      labels: {app: web}
      annotations: {sim.rkube.io/cpu-usage: 200m}
    spec:
      containers:
      - name: main
        image: nginx
        resources: {requests: {cpu: 100m}}
"#;

const HPA: &str = r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: web}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 2
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 50}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 10}
"#;

fn replicas(c: &Cluster, what: &str) -> i64 {
    json(c, &["get", what])["spec"]["replicas"]
        .as_i64()
        .unwrap_or(-1)
}

fn deployment_scales_up_and_back(c: &Cluster) {
    c.kubectl_in(&["apply", "-f", "-"], Some(DEPLOYMENT));
    c.kubectl_in(&["apply", "-f", "-"], Some(HPA));
    let started = Instant::now();
    wait_for(
        "scale up to 6",
        Duration::from_secs(60),
        || match replicas(c, "deployment/web") {
            6 => Ok(()),
            n => Err(format!(
                "{n} replicas; hpa status {}",
                json(c, &["get", "hpa", "web"])["status"]
            )),
        },
    );
    eprintln!("scaled up to 6 after {:?}", started.elapsed());
    let hpa = wait_for("status after the scale-up", Duration::from_secs(20), || {
        let h = json(c, &["get", "hpa", "web"]);
        if h["status"]["desiredReplicas"] == 6 && h["status"]["lastScaleTime"].is_string() {
            Ok(h)
        } else {
            Err(h["status"].to_string())
        }
    });
    assert_eq!(condition(&hpa, "AbleToScale").0, "True");
    assert_eq!(
        condition(&hpa, "ScalingActive"),
        ("True".into(), "ValidMetricFound".into())
    );
    let cur = &hpa["status"]["currentMetrics"][0]["resource"];
    assert_eq!(cur["name"], "cpu");
    assert!(
        cur["current"]["averageUtilization"].as_i64().unwrap_or(0) >= 100,
        "{cur}"
    );
    let events = c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.kind=HorizontalPodAutoscaler,involvedObject.name=web,reason=SuccessfulRescale",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains(
            "New size: 6; reason: cpu resource utilization (percentage of request) above target"
        ),
        "{events}"
    );
    let table = c.kubectl(&["get", "hpa", "web"]);
    assert!(
        table.contains("/50%") && table.contains("Deployment/web"),
        "{table}"
    );

    // The v1 view: the CPU target, the behaviour and conditions in annotations.
    let v1 = json(
        c,
        &["get", "horizontalpodautoscalers.v1.autoscaling", "web"],
    );
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    let ann = &v1["metadata"]["annotations"];
    assert!(
        ann["autoscaling.alpha.kubernetes.io/behavior"]
            .as_str()
            .is_some_and(|b| b.contains("\"StabilizationWindowSeconds\":10")),
        "{ann}"
    );
    assert!(ann["autoscaling.alpha.kubernetes.io/conditions"].is_string());

    // Quiet pods: back to 2 once every pod reports 10m and the window has passed. The window
    // counts from the last high recommendation, which can come from the sync just before the
    // change: up to one sync period (1 s here) earlier than `quiet`.
    let quiet = Instant::now();
    c.kubectl(&[
        "patch",
        "deployment",
        "web",
        "-p",
        r#"{"spec":{"template":{"metadata":{"annotations":{"sim.rkube.io/cpu-usage":"10m"}}}}}"#,
    ]);
    wait_for(
        "scale down to 2",
        Duration::from_secs(90),
        || match replicas(c, "deployment/web") {
            2 => Ok(()),
            n => Err(format!(
                "{n} replicas; hpa status {}",
                json(c, &["get", "hpa", "web"])["status"]
            )),
        },
    );
    let took = quiet.elapsed();
    eprintln!("scaled down to 2 {took:?} after the template change");
    assert!(
        took >= Duration::from_secs(9),
        "the 10 s window was not kept: {took:?}"
    );
    let hpa = json(c, &["get", "hpa", "web"]);
    let events = c.kubectl(&[
        "get",
        "events",
        "--field-selector",
        "involvedObject.name=web,reason=SuccessfulRescale",
        "-o",
        "jsonpath={.items[*].message}",
    ]);
    assert!(
        events.contains("New size: 2; reason: All metrics below target"),
        "{events}"
    );
    assert!(hpa["status"]["currentReplicas"].as_i64().is_some());
}

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: workers.hpa.example.com}
spec:
  group: hpa.example.com
  scope: Namespaced
  names: {plural: workers, singular: worker, kind: Worker}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {replicas: {type: integer}}}
          status:
            type: object
            properties: {replicas: {type: integer}, selector: {type: string}}
    subresources:
      status: {}
      scale:
        specReplicasPath: .spec.replicas
        statusReplicasPath: .status.replicas
        labelSelectorPath: .status.selector
"#;

fn custom_resource_is_scaled_to_min(c: &Cluster) {
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    wait_for("the Worker kind served", Duration::from_secs(20), || {
        let out = c.kubectl_output(&["get", "workers"], None);
        out.status
            .success()
            .then_some(())
            .ok_or_else(|| String::from_utf8_lossy(&out.stderr).to_string())
    });
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some("apiVersion: hpa.example.com/v1\nkind: Worker\nmetadata: {name: w}\nspec: {replicas: 1}\n"),
    );
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: w}
spec:
  scaleTargetRef: {apiVersion: hpa.example.com/v1, kind: Worker, name: w}
  minReplicas: 3
  maxReplicas: 5
"#,
        ),
    );
    wait_for(
        "the Worker scaled to 3",
        Duration::from_secs(30),
        || match replicas(c, "worker/w") {
            3 => Ok(()),
            n => Err(format!("{n}; {}", json(c, &["get", "hpa", "w"])["status"])),
        },
    );
}

fn unserved_metrics_and_v1_writes(c: &Cluster) {
    let other = DEPLOYMENT
        .replace("name: web", "name: other")
        .replace("app: web", "app: other");
    c.kubectl_in(&["apply", "-f", "-"], Some(&other));
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: ext}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: other}
  minReplicas: 2
  maxReplicas: 6
  metrics:
  - type: External
    external:
      metric: {name: queue_depth}
      target: {type: Value, value: "30"}
"#,
        ),
    );
    wait_for("ScalingActive False", Duration::from_secs(30), || {
        let h = json(c, &["get", "hpa", "ext"]);
        match condition(&h, "ScalingActive") {
            (s, r) if s == "False" && r == "FailedGetExternalMetric" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    c.kubectl(&["delete", "hpa", "ext"]);

    // Written as v1, read as v2: the CPU target becomes a Resource metric.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"
apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: old}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: nothing-here}
  maxReplicas: 4
  targetCPUUtilizationPercentage: 70
"#,
        ),
    );
    let v2 = json(
        c,
        &["get", "horizontalpodautoscalers.v2.autoscaling", "old"],
    );
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["spec"]["minReplicas"], 1);
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        70
    );
    let ann = v2["metadata"]["annotations"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    assert!(
        !ann.keys().any(|k| k.starts_with("autoscaling.alpha")),
        "{ann:?}"
    );
    // Its target does not exist: AbleToScale False, FailedGetScale.
    wait_for("FailedGetScale", Duration::from_secs(30), || {
        let h = json(c, &["get", "hpa", "old"]);
        match condition(&h, "AbleToScale") {
            (s, r) if s == "False" && r == "FailedGetScale" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    c.kubectl(&["delete", "hpa", "old"]);

    // kubectl autoscale (v1.32 writes autoscaling/v1).
    c.kubectl(&[
        "autoscale",
        "deployment",
        "web",
        "--min=2",
        "--max=5",
        "--cpu-percent=60",
        "--name=auto",
    ]);
    let v2 = json(
        c,
        &["get", "horizontalpodautoscalers.v2.autoscaling", "auto"],
    );
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        60
    );
    // Its pods are those of the HPA `web` too: upstream's AmbiguousSelector.
    wait_for("AmbiguousSelector", Duration::from_secs(30), || {
        let h = json(c, &["get", "hpa", "auto"]);
        match condition(&h, "ScalingActive") {
            (s, r) if s == "False" && r == "AmbiguousSelector" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    c.kubectl(&["delete", "hpa", "auto"]);
}

#[test]
fn horizontal_pod_autoscaler() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &[
            "--sim-nodes",
            "2",
            "--horizontal-pod-autoscaler-sync-period",
            "1s",
            "--horizontal-pod-autoscaler-cpu-initialization-period",
            "1s",
        ],
    );
    let start = Instant::now();
    deployment_scales_up_and_back(&c);
    custom_resource_is_scaled_to_min(&c);
    unserved_metrics_and_v1_writes(&c);
    eprintln!("hpa cases took {:?}", start.elapsed());
}
