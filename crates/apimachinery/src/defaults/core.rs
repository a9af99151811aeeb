//! Core kinds other than pods (upstream `pkg/apis/core/v1/defaults.go`: `SetDefaults_Service`,
//! `SetDefaults_Namespace`, `SetDefaults_Secret`, persistent volumes and claims, `SetDefaults_Endpoints`,
//! `SetDefaults_NodeStatus`, `SetDefaults_ReplicationController`, `SetDefaults_LimitRangeItem`; the
//! Namespace strategy's create-time finalizer and phase; the v1 conversion of Secret `stringData`).
//!
//! Deliberately different: Go serializes empty non-pointer structs (`status: {loadBalancer: {}}` of a
//! Service), so those are added too, to give the same JSON as upstream.

use serde_json::{json, Value};

use super::pod::{default_template_at, default_volume_source};
use crate::validation::b64;
use crate::validation::json::{child_obj, each_obj, set_default, set_default_str};

type Obj = serde_json::Map<String, Value>;

fn str_of<'a>(m: &'a Obj, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn service(svc: &mut Obj) {
    let spec = child_obj(svc, "spec");
    set_default_str(spec, "sessionAffinity", "None");
    match str_of(spec, "sessionAffinity") {
        "None" => {
            spec.remove("sessionAffinityConfig");
        }
        "ClientIP" => {
            let timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.get("clientIP"))
                .and_then(|c| c.get("timeoutSeconds"))
                .is_some_and(|t| !t.is_null());
            if !timeout {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    set_default_str(spec, "type", "ClusterIP");
    for p in each_obj(spec, "ports") {
        set_default_str(p, "protocol", "TCP");
        let unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            _ => false,
        };
        if unset {
            if let Some(port_num) = p.get("port").cloned() {
                p.insert("targetPort".into(), port_num);
            }
        }
    }
    let ty = str_of(spec, "type").to_string();
    let external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty());
    let externally_accessible =
        ty == "LoadBalancer" || ty == "NodePort" || (ty == "ClusterIP" && external_ips);
    if externally_accessible {
        set_default_str(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(ty.as_str(), "NodePort" | "LoadBalancer" | "ClusterIP") {
        set_default(spec, "internalTrafficPolicy", Value::from("Cluster"));
    }
    if ty == "LoadBalancer" {
        set_default(spec, "allocateLoadBalancerNodePorts", Value::from(true));
    }
    let status = child_obj(svc, "status");
    let lb = child_obj(status, "loadBalancer");
    if ty == "LoadBalancer" {
        for i in each_obj(lb, "ingress") {
            if !str_of(i, "ip").is_empty() {
                set_default(i, "ipMode", Value::from("VIP"));
            }
        }
    }
}

/// `SetDefaults_Namespace` (the `kubernetes.io/metadata.name` label), `SetDefaults_NamespaceStatus`
/// and the strategy's create-time `kubernetes` finalizer (not while the namespace is terminating).
pub(crate) fn namespace(ns: &mut Obj) {
    let meta = child_obj(ns, "metadata");
    let name = str_of(meta, "name").to_string();
    let deleting = meta.get("deletionTimestamp").is_some_and(|v| !v.is_null());
    if !name.is_empty() {
        child_obj(meta, "labels").insert("kubernetes.io/metadata.name".into(), Value::from(name));
    }
    if !deleting {
        let spec = child_obj(ns, "spec");
        let finalizers = spec.entry("finalizers").or_insert_with(|| json!([]));
        if let Some(list) = finalizers.as_array_mut() {
            if !list.iter().any(|f| f.as_str() == Some("kubernetes")) {
                list.push(Value::from("kubernetes"));
            }
        }
    }
    set_default_str(child_obj(ns, "status"), "phase", "Active");
}

/// `SetDefaults_Secret`, and the v1 conversion that merges `stringData` into `data`.
pub(crate) fn secret(s: &mut Obj) {
    set_default_str(s, "type", "Opaque");
    if let Some(Value::Object(string_data)) = s.remove("stringData") {
        let data = child_obj(s, "data");
        for (k, v) in string_data {
            let text = v.as_str().unwrap_or("");
            data.insert(k, Value::from(b64::encode(text.as_bytes())));
        }
    }
}

pub(crate) fn persistent_volume(pv: &mut Obj) {
    let spec = child_obj(pv, "spec");
    set_default_str(spec, "persistentVolumeReclaimPolicy", "Retain");
    set_default(spec, "volumeMode", Value::from("Filesystem"));
    default_volume_source(spec);
    set_default_str(child_obj(pv, "status"), "phase", "Pending");
}

/// `SetDefaults_PersistentVolumeClaim` and its spec (also used for StatefulSet claim templates).
pub(crate) fn persistent_volume_claim(pvc: &mut Obj) {
    set_default(
        child_obj(pvc, "spec"),
        "volumeMode",
        Value::from("Filesystem"),
    );
    set_default_str(child_obj(pvc, "status"), "phase", "Pending");
}

pub(crate) fn endpoints(ep: &mut Obj) {
    for ss in each_obj(ep, "subsets") {
        for p in each_obj(ss, "ports") {
            set_default_str(p, "protocol", "TCP");
        }
    }
}

pub(crate) fn node(n: &mut Obj) {
    let Some(status) = n.get_mut("status").and_then(Value::as_object_mut) else {
        return;
    };
    if status.get("allocatable").is_none_or(Value::is_null) {
        if let Some(cap) = status.get("capacity").filter(|c| !c.is_null()).cloned() {
            status.insert("allocatable".into(), cap);
        }
    }
}

pub(crate) fn replication_controller(rc: &mut Obj) {
    let labels = rc
        .get("spec")
        .and_then(|s| s.get("template"))
        .and_then(|t| t.get("metadata"))
        .and_then(|m| m.get("labels"))
        .filter(|l| !l.is_null())
        .cloned();
    if let Some(labels) = labels {
        let spec = child_obj(rc, "spec");
        if spec
            .get("selector")
            .and_then(Value::as_object)
            .is_none_or(|s| s.is_empty())
        {
            spec.insert("selector".into(), labels.clone());
        }
        let meta = child_obj(rc, "metadata");
        if meta
            .get("labels")
            .and_then(Value::as_object)
            .is_none_or(|l| l.is_empty())
        {
            meta.insert("labels".into(), labels);
        }
    }
    set_default(child_obj(rc, "spec"), "replicas", Value::from(1));
    if rc
        .get("spec")
        .and_then(|s| s.get("template"))
        .is_some_and(|t| !t.is_null())
    {
        default_template_at(rc, &["spec", "template"]);
    }
    set_default(rc, "status", json!({"replicas": 0}));
}

/// `SetDefaults_LimitRangeItem`: container defaults from max, default requests from defaults and min.
pub(crate) fn limit_range(lr: &mut Obj) {
    let spec = child_obj(lr, "spec");
    for item in each_obj(spec, "limits") {
        if str_of(item, "type") != "Container" {
            continue;
        }
        let max = item
            .get("max")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let min = item
            .get("min")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        let default = child_obj(item, "default");
        for (k, v) in max {
            default.entry(k).or_insert(v);
        }
        let default = default.clone();
        let default_request = child_obj(item, "defaultRequest");
        for (k, v) in default.into_iter().chain(min) {
            default_request.entry(k).or_insert(v);
        }
        for key in ["default", "defaultRequest"] {
            if item
                .get(key)
                .and_then(Value::as_object)
                .is_some_and(|m| m.is_empty())
            {
                item.remove(key);
            }
        }
    }
}
