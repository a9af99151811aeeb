//! `autoscaling/v1` <-> `autoscaling/v2` HorizontalPodAutoscaler (upstream
//! `pkg/apis/autoscaling/v1/conversion.go`, through the internal version, which is v2's shape).
//!
//! v1 has one metric, `targetCPUUtilizationPercentage`; everything v2 has beyond it travels in
//! annotations so a read-modify-write through v1 keeps it:
//! - [`METRICS`]: the spec's other metrics, as v1 `MetricSpec`s (v2beta1's flat shape);
//! - [`CURRENT_METRICS`]: all of `status.currentMetrics`, as v1 `MetricStatus`es;
//! - [`CONDITIONS`]: the status's conditions;
//! - [`BEHAVIOR`]: `spec.behavior`, marshalled as upstream marshals its internal type (Go field names,
//!   `ScaleUp`/`StabilizationWindowSeconds`/...; read back case-insensitively as Go does).
//!
//! On the way into v2 the annotations are lifted out and removed; a v1 object without any metric gets
//! upstream's implicit 80% CPU target.

use serde_json::{json, Map, Value};

pub const METRICS: &str = "autoscaling.alpha.kubernetes.io/metrics";
pub const CURRENT_METRICS: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
pub const CONDITIONS: &str = "autoscaling.alpha.kubernetes.io/conditions";
pub const BEHAVIOR: &str = "autoscaling.alpha.kubernetes.io/behavior";
/// Upstream `autoscaling.DefaultCPUUtilization`.
pub const DEFAULT_CPU_UTILIZATION: i64 = 80;

fn is_cpu_resource(m: &Value) -> bool {
    m["type"] == "Resource" && m["resource"]["name"] == "cpu"
}

fn set(map: &mut Map<String, Value>, key: &str, v: Option<&Value>) {
    if let Some(v) = v.filter(|v| !v.is_null()) {
        map.insert(key.into(), v.clone());
    }
}

/// A v2 object (stored form) as v1.
pub fn v2_to_v1(obj: &mut Value) {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let status = obj.get("status").cloned();
    let metrics = spec["metrics"].as_array().cloned().unwrap_or_default();

    let mut v1spec = Map::new();
    set(&mut v1spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    set(&mut v1spec, "minReplicas", spec.get("minReplicas"));
    set(&mut v1spec, "maxReplicas", spec.get("maxReplicas"));
    // The first CPU Resource metric decides, as upstream's loop `break`s on it.
    if let Some(cpu) = metrics.iter().find(|m| is_cpu_resource(m)) {
        set(
            &mut v1spec,
            "targetCPUUtilizationPercentage",
            cpu["resource"]["target"].get("averageUtilization"),
        );
    }
    let other: Vec<Value> = metrics
        .iter()
        .filter(|m| !is_cpu_resource(m) || m["resource"]["target"]["averageUtilization"].is_null())
        .map(metric_spec_to_v1)
        .collect();

    let mut annotations: Vec<(&str, String)> = Vec::new();
    if !other.is_empty() {
        annotations.push((METRICS, Value::Array(other).to_string()));
    }
    let mut v1status = None;
    if let Some(st) = &status {
        let mut s = Map::new();
        set(&mut s, "observedGeneration", st.get("observedGeneration"));
        set(&mut s, "lastScaleTime", st.get("lastScaleTime"));
        s.insert(
            "currentReplicas".into(),
            st.get("currentReplicas").cloned().unwrap_or(json!(0)),
        );
        s.insert(
            "desiredReplicas".into(),
            st.get("desiredReplicas").cloned().unwrap_or(json!(0)),
        );
        let current = st["currentMetrics"].as_array().cloned().unwrap_or_default();
        for m in &current {
            if is_cpu_resource(m) {
                set(
                    &mut s,
                    "currentCPUUtilizationPercentage",
                    m["resource"]["current"].get("averageUtilization"),
                );
            }
        }
        if !current.is_empty() {
            let v1: Vec<Value> = current.iter().map(metric_status_to_v1).collect();
            annotations.push((CURRENT_METRICS, Value::Array(v1).to_string()));
        }
        if let Some(c) = st["conditions"].as_array().filter(|c| !c.is_empty()) {
            annotations.push((CONDITIONS, Value::Array(c.clone()).to_string()));
        }
        v1status = Some(Value::Object(s));
    }
    if let Some(b) = spec.get("behavior").filter(|b| !b.is_null()) {
        annotations.push((BEHAVIOR, behavior_to_go(b).to_string()));
    }
    if !annotations.is_empty() {
        let meta = child(obj, "metadata");
        let ann = child_map(meta, "annotations");
        for (k, v) in annotations {
            ann.insert(k.into(), Value::String(v));
        }
    }
    obj["apiVersion"] = json!("autoscaling/v1");
    obj["spec"] = Value::Object(v1spec);
    match v1status {
        Some(s) => obj["status"] = s,
        None => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
    }
}

/// A v1 object as v2 (stored form).
pub fn v1_to_v2(obj: &mut Value) {
    let spec = obj.get("spec").cloned().unwrap_or(Value::Null);
    let status = obj.get("status").cloned();
    let ann = obj["metadata"]["annotations"].clone();
    let ann_str = |k: &str| ann.get(k).and_then(Value::as_str).map(str::to_string);

    let mut v2spec = Map::new();
    set(&mut v2spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    set(&mut v2spec, "minReplicas", spec.get("minReplicas"));
    set(&mut v2spec, "maxReplicas", spec.get("maxReplicas"));
    let mut metrics: Vec<Value> = Vec::new();
    // Upstream: the annotation's metrics first, then the CPU target (when both are there).
    if let Some(Ok(Value::Array(other))) = ann_str(METRICS).map(|s| serde_json::from_str(&s)) {
        metrics.extend(other.iter().map(metric_spec_from_v1));
    }
    if let Some(t) = spec
        .get("targetCPUUtilizationPercentage")
        .filter(|t| !t.is_null())
    {
        metrics.push(cpu_utilization_metric(t.clone()));
    }
    if metrics.is_empty() {
        metrics.push(cpu_utilization_metric(json!(DEFAULT_CPU_UTILIZATION)));
    }
    v2spec.insert("metrics".into(), Value::Array(metrics));
    if let Some(Ok(b)) = ann_str(BEHAVIOR).map(|s| serde_json::from_str::<Value>(&s)) {
        v2spec.insert("behavior".into(), behavior_from_go(&b));
    }

    let mut v2status = None;
    if let Some(st) = &status {
        let mut s = Map::new();
        set(&mut s, "observedGeneration", st.get("observedGeneration"));
        set(&mut s, "lastScaleTime", st.get("lastScaleTime"));
        s.insert(
            "currentReplicas".into(),
            st.get("currentReplicas").cloned().unwrap_or(json!(0)),
        );
        s.insert(
            "desiredReplicas".into(),
            st.get("desiredReplicas").cloned().unwrap_or(json!(0)),
        );
        let from_ann =
            ann_str(CURRENT_METRICS).and_then(|s| serde_json::from_str::<Value>(&s).ok());
        if let Some(Value::Array(cur)) = from_ann {
            // The annotation has more than the CPU percentage: it wins.
            let cur: Vec<Value> = cur.iter().map(metric_status_from_v1).collect();
            s.insert("currentMetrics".into(), Value::Array(cur));
        } else if let Some(c) = st
            .get("currentCPUUtilizationPercentage")
            .filter(|c| !c.is_null())
        {
            s.insert(
                "currentMetrics".into(),
                json!([{"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": c}}}]),
            );
        }
        if let Some(Ok(Value::Array(c))) = ann_str(CONDITIONS).map(|s| serde_json::from_str(&s)) {
            s.insert("conditions".into(), Value::Array(c));
        }
        v2status = Some(Value::Object(s));
    }
    if let Some(a) = obj
        .get_mut("metadata")
        .and_then(|m| m.get_mut("annotations"))
        .and_then(Value::as_object_mut)
    {
        for k in [METRICS, CURRENT_METRICS, CONDITIONS, BEHAVIOR] {
            a.remove(k);
        }
        if a.is_empty() {
            if let Some(m) = obj["metadata"].as_object_mut() {
                m.remove("annotations");
            }
        }
    }
    obj["apiVersion"] = json!("autoscaling/v2");
    obj["spec"] = Value::Object(v2spec);
    match v2status {
        Some(s) => obj["status"] = s,
        None => {
            if let Some(m) = obj.as_object_mut() {
                m.remove("status");
            }
        }
    }
}

fn cpu_utilization_metric(target: Value) -> Value {
    json!({"type": "Resource", "resource": {"name": "cpu",
        "target": {"type": "Utilization", "averageUtilization": target}}})
}

fn child<'a>(obj: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !obj[key].is_object() {
        obj[key] = json!({});
    }
    obj[key].as_object_mut().expect("just made an object")
}

fn child_map<'a>(m: &'a mut Map<String, Value>, key: &str) -> &'a mut Map<String, Value> {
    let v = m.entry(key).or_insert_with(|| json!({}));
    if !v.is_object() {
        *v = json!({});
    }
    v.as_object_mut().expect("just made an object")
}

/// `"0"` for a missing non-pointer quantity, as Go marshals a zero `resource.Quantity`.
fn quantity_or_zero(v: &Value) -> Value {
    if v.is_null() {
        json!("0")
    } else {
        v.clone()
    }
}

fn obj_of(pairs: &[(&str, &Value)]) -> Value {
    let mut m = Map::new();
    for (k, v) in pairs {
        set(&mut m, k, Some(v));
    }
    Value::Object(m)
}

/// v2 `MetricSpec` -> v1 `MetricSpec`.
fn metric_spec_to_v1(m: &Value) -> Value {
    let t = m["type"].clone();
    let mut out = Map::new();
    out.insert("type".into(), t.clone());
    match t.as_str().unwrap_or("") {
        "Object" => {
            let o = &m["object"];
            out.insert(
                "object".into(),
                obj_of(&[
                    ("target", &o["describedObject"]),
                    ("metricName", &o["metric"]["name"]),
                    ("targetValue", &quantity_or_zero(&o["target"]["value"])),
                    ("selector", &o["metric"]["selector"]),
                    ("averageValue", &o["target"]["averageValue"]),
                ]),
            );
        }
        "Pods" => {
            let p = &m["pods"];
            out.insert(
                "pods".into(),
                obj_of(&[
                    ("metricName", &p["metric"]["name"]),
                    (
                        "targetAverageValue",
                        &quantity_or_zero(&p["target"]["averageValue"]),
                    ),
                    ("selector", &p["metric"]["selector"]),
                ]),
            );
        }
        "Resource" | "ContainerResource" => {
            let (key, r) = if t == "Resource" {
                ("resource", &m["resource"])
            } else {
                ("containerResource", &m["containerResource"])
            };
            out.insert(
                key.into(),
                obj_of(&[
                    ("name", &r["name"]),
                    (
                        "targetAverageUtilization",
                        &r["target"]["averageUtilization"],
                    ),
                    ("targetAverageValue", &r["target"]["averageValue"]),
                    ("container", &r["container"]),
                ]),
            );
        }
        "External" => {
            let e = &m["external"];
            out.insert(
                "external".into(),
                obj_of(&[
                    ("metricName", &e["metric"]["name"]),
                    ("metricSelector", &e["metric"]["selector"]),
                    ("targetValue", &e["target"]["value"]),
                    ("targetAverageValue", &e["target"]["averageValue"]),
                ]),
            );
        }
        _ => {}
    }
    Value::Object(out)
}

/// v1 `MetricSpec` -> v2 `MetricSpec`.
fn metric_spec_from_v1(m: &Value) -> Value {
    let t = m["type"].clone();
    let mut out = Map::new();
    out.insert("type".into(), t.clone());
    match t.as_str().unwrap_or("") {
        "Object" => {
            let o = &m["object"];
            let ty = if o["averageValue"].is_null() {
                "Value"
            } else {
                "AverageValue"
            };
            out.insert(
                "object".into(),
                json!({
                    "describedObject": o["target"],
                    "metric": obj_of(&[("name", &o["metricName"]), ("selector", &o["selector"])]),
                    "target": obj_of(&[("type", &json!(ty)), ("value", &quantity_or_zero(&o["targetValue"])),
                        ("averageValue", &o["averageValue"])]),
                }),
            );
        }
        "Pods" => {
            let p = &m["pods"];
            out.insert(
                "pods".into(),
                json!({
                    "metric": obj_of(&[("name", &p["metricName"]), ("selector", &p["selector"])]),
                    "target": {"type": "AverageValue", "averageValue": quantity_or_zero(&p["targetAverageValue"])},
                }),
            );
        }
        "Resource" | "ContainerResource" => {
            let (key, r) = if t == "Resource" {
                ("resource", &m["resource"])
            } else {
                ("containerResource", &m["containerResource"])
            };
            let util = &r["targetAverageUtilization"];
            let ty = if util.is_null() {
                "AverageValue"
            } else {
                "Utilization"
            };
            out.insert(
                key.into(),
                obj_of(&[
                    ("name", &r["name"]),
                    ("container", &r["container"]),
                    (
                        "target",
                        &obj_of(&[
                            ("type", &json!(ty)),
                            ("averageUtilization", util),
                            ("averageValue", &r["targetAverageValue"]),
                        ]),
                    ),
                ]),
            );
        }
        "External" => {
            let e = &m["external"];
            let ty = if e["targetValue"].is_null() {
                "AverageValue"
            } else {
                "Value"
            };
            out.insert(
                "external".into(),
                json!({
                    "metric": obj_of(&[("name", &e["metricName"]), ("selector", &e["metricSelector"])]),
                    "target": obj_of(&[("type", &json!(ty)), ("value", &e["targetValue"]),
                        ("averageValue", &e["targetAverageValue"])]),
                }),
            );
        }
        _ => {}
    }
    Value::Object(out)
}

/// v2 `MetricStatus` -> v1 `MetricStatus`.
fn metric_status_to_v1(m: &Value) -> Value {
    let t = m["type"].clone();
    let mut out = Map::new();
    out.insert("type".into(), t.clone());
    match t.as_str().unwrap_or("") {
        "Object" => {
            let o = &m["object"];
            out.insert(
                "object".into(),
                obj_of(&[
                    ("target", &o["describedObject"]),
                    ("metricName", &o["metric"]["name"]),
                    ("currentValue", &quantity_or_zero(&o["current"]["value"])),
                    ("selector", &o["metric"]["selector"]),
                    ("averageValue", &o["current"]["averageValue"]),
                ]),
            );
        }
        "Pods" => {
            let p = &m["pods"];
            out.insert(
                "pods".into(),
                obj_of(&[
                    ("metricName", &p["metric"]["name"]),
                    (
                        "currentAverageValue",
                        &quantity_or_zero(&p["current"]["averageValue"]),
                    ),
                    ("selector", &p["metric"]["selector"]),
                ]),
            );
        }
        "Resource" | "ContainerResource" => {
            let (key, r) = if t == "Resource" {
                ("resource", &m["resource"])
            } else {
                ("containerResource", &m["containerResource"])
            };
            out.insert(
                key.into(),
                obj_of(&[
                    ("name", &r["name"]),
                    (
                        "currentAverageUtilization",
                        &r["current"]["averageUtilization"],
                    ),
                    (
                        "currentAverageValue",
                        &quantity_or_zero(&r["current"]["averageValue"]),
                    ),
                    ("container", &r["container"]),
                ]),
            );
        }
        "External" => {
            let e = &m["external"];
            out.insert(
                "external".into(),
                obj_of(&[
                    ("metricName", &e["metric"]["name"]),
                    ("metricSelector", &e["metric"]["selector"]),
                    ("currentValue", &quantity_or_zero(&e["current"]["value"])),
                    ("currentAverageValue", &e["current"]["averageValue"]),
                ]),
            );
        }
        _ => {}
    }
    Value::Object(out)
}

/// v1 `MetricStatus` -> v2 `MetricStatus`.
fn metric_status_from_v1(m: &Value) -> Value {
    let t = m["type"].clone();
    let mut out = Map::new();
    out.insert("type".into(), t.clone());
    match t.as_str().unwrap_or("") {
        "Object" => {
            let o = &m["object"];
            out.insert(
                "object".into(),
                json!({
                    "describedObject": o["target"],
                    "metric": obj_of(&[("name", &o["metricName"]), ("selector", &o["selector"])]),
                    "current": obj_of(&[("value", &o["currentValue"]), ("averageValue", &o["averageValue"])]),
                }),
            );
        }
        "Pods" => {
            let p = &m["pods"];
            out.insert(
                "pods".into(),
                json!({
                    "metric": obj_of(&[("name", &p["metricName"]), ("selector", &p["selector"])]),
                    "current": obj_of(&[("averageValue", &p["currentAverageValue"])]),
                }),
            );
        }
        "Resource" | "ContainerResource" => {
            let (key, r) = if t == "Resource" {
                ("resource", &m["resource"])
            } else {
                ("containerResource", &m["containerResource"])
            };
            out.insert(
                key.into(),
                obj_of(&[
                    ("name", &r["name"]),
                    ("container", &r["container"]),
                    (
                        "current",
                        &obj_of(&[
                            ("averageUtilization", &r["currentAverageUtilization"]),
                            ("averageValue", &r["currentAverageValue"]),
                        ]),
                    ),
                ]),
            );
        }
        "External" => {
            let e = &m["external"];
            out.insert(
                "external".into(),
                json!({
                    "metric": obj_of(&[("name", &e["metricName"]), ("selector", &e["metricSelector"])]),
                    "current": obj_of(&[("value", &e["currentValue"]), ("averageValue", &e["currentAverageValue"])]),
                }),
            );
        }
        _ => {}
    }
    Value::Object(out)
}

/// Go field names of upstream's internal behavior type, by their JSON (v2) names.
const GO_NAMES: &[(&str, &str)] = &[
    ("scaleUp", "ScaleUp"),
    ("scaleDown", "ScaleDown"),
    ("stabilizationWindowSeconds", "StabilizationWindowSeconds"),
    ("selectPolicy", "SelectPolicy"),
    ("policies", "Policies"),
    ("tolerance", "Tolerance"),
    ("type", "Type"),
    ("value", "Value"),
    ("periodSeconds", "PeriodSeconds"),
];

fn rename_keys(v: &Value, f: &dyn Fn(&str) -> String) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().map(|(k, v)| (f(k), rename_keys(v, f))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().map(|v| rename_keys(v, f)).collect()),
        other => other.clone(),
    }
}

fn behavior_to_go(b: &Value) -> Value {
    rename_keys(b, &|k| {
        GO_NAMES
            .iter()
            .find(|(j, _)| *j == k)
            .map_or(k.to_string(), |(_, g)| g.to_string())
    })
}

/// Go's decoder matches field names case-insensitively; so does this.
fn behavior_from_go(b: &Value) -> Value {
    rename_keys(b, &|k| {
        GO_NAMES
            .iter()
            .find(|(j, _)| j.eq_ignore_ascii_case(k))
            .map_or(k.to_string(), |(j, _)| j.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v2() -> Value {
        json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "namespace": "default", "annotations": {"keep": "me"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 2, "maxReplicas": 6,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "memory",
                        "target": {"type": "AverageValue", "averageValue": "64Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 50}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"},
                        "target": {"type": "AverageValue", "averageValue": "10"}}},
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 10, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}},
            },
            "status": {
                "currentReplicas": 2, "desiredReplicas": 4,
                "lastScaleTime": "2026-11-29T10:00:00Z",
                "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                    "current": {"averageUtilization": 200, "averageValue": "200m"}}}],
                "conditions": [{"type": "AbleToScale", "status": "True", "reason": "SucceededRescale",
                    "message": "m", "lastTransitionTime": "2026-11-29T10:00:00Z"}],
            }
        })
    }

    #[test]
    fn v2_to_v1_keeps_the_rest_in_annotations() {
        let mut o = v2();
        v2_to_v1(&mut o);
        assert_eq!(o["apiVersion"], "autoscaling/v1");
        assert_eq!(o["spec"]["targetCPUUtilizationPercentage"], 50);
        assert_eq!(o["spec"]["minReplicas"], 2);
        assert!(o["spec"].get("metrics").is_none());
        assert_eq!(o["status"]["currentCPUUtilizationPercentage"], 200);
        assert_eq!(o["status"]["desiredReplicas"], 4);
        let ann = &o["metadata"]["annotations"];
        assert_eq!(ann["keep"], "me");
        let metrics: Value = serde_json::from_str(ann[METRICS].as_str().unwrap()).unwrap();
        assert_eq!(
            metrics,
            json!([{"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "64Mi"}},
                   {"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}}])
        );
        let cur: Value = serde_json::from_str(ann[CURRENT_METRICS].as_str().unwrap()).unwrap();
        assert_eq!(cur[0]["resource"]["currentAverageValue"], "200m");
        let b: Value = serde_json::from_str(ann[BEHAVIOR].as_str().unwrap()).unwrap();
        assert_eq!(b["ScaleDown"]["StabilizationWindowSeconds"], 10);
        assert_eq!(b["ScaleDown"]["Policies"][0]["PeriodSeconds"], 15);
        assert!(ann[CONDITIONS]
            .as_str()
            .unwrap()
            .contains("SucceededRescale"));
    }

    #[test]
    fn round_trip_through_v1() {
        let mut o = v2();
        v2_to_v1(&mut o);
        v1_to_v2(&mut o);
        let want = v2();
        assert_eq!(o["apiVersion"], "autoscaling/v2");
        assert_eq!(o["metadata"]["annotations"], json!({"keep": "me"}));
        // The annotation's metrics come first, the CPU target last (upstream's order).
        let m = o["spec"]["metrics"].as_array().unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0], want["spec"]["metrics"][0]);
        assert_eq!(m[1], want["spec"]["metrics"][2]);
        assert_eq!(m[2], want["spec"]["metrics"][1]);
        assert_eq!(o["spec"]["behavior"], want["spec"]["behavior"]);
        assert_eq!(o["status"], want["status"]);
    }

    #[test]
    fn plain_v1_gets_the_cpu_metric_or_the_default() {
        let mut o = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h"},
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "d"}, "maxReplicas": 3,
                "targetCPUUtilizationPercentage": 70},
            "status": {"currentReplicas": 1, "desiredReplicas": 1, "currentCPUUtilizationPercentage": 12}});
        v1_to_v2(&mut o);
        assert_eq!(
            o["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            70
        );
        assert_eq!(
            o["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"],
            12
        );
        assert!(o["metadata"].get("annotations").is_none());
        let mut d = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h"}, "spec": {"maxReplicas": 3}});
        v1_to_v2(&mut d);
        assert_eq!(
            d["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
            80
        );
        assert!(d.get("status").is_none());
    }

    #[test]
    fn behavior_annotation_reads_any_case() {
        let mut o = json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "h", "annotations": {BEHAVIOR:
                r#"{"scaleUp":{"stabilizationwindowseconds":30,"SelectPolicy":"Min"}}"#}},
            "spec": {"maxReplicas": 3}});
        v1_to_v2(&mut o);
        assert_eq!(
            o["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"],
            30
        );
        assert_eq!(o["spec"]["behavior"]["scaleUp"]["selectPolicy"], "Min");
    }

    #[test]
    fn external_and_object_metrics_convert_both_ways() {
        let ext = json!({"type": "External", "external": {"metric": {"name": "queue"},
            "target": {"type": "Value", "value": "30"}}});
        let v1 = metric_spec_to_v1(&ext);
        assert_eq!(
            v1["external"],
            json!({"metricName": "queue", "targetValue": "30"})
        );
        assert_eq!(metric_spec_from_v1(&v1), ext);
        let obj = json!({"type": "Object", "object": {"describedObject": {"kind": "Service", "name": "s"},
            "metric": {"name": "rps"}, "target": {"type": "Value", "value": "5"}}});
        let v1 = metric_spec_to_v1(&obj);
        assert_eq!(v1["object"]["target"]["name"], "s");
        assert_eq!(metric_spec_from_v1(&v1), obj);
    }
}
