//! Pod spec, pod template and pod defaults (upstream `pkg/apis/core/v1/defaults.go`:
//! `SetDefaults_PodSpec`, `SetDefaults_Container`, `SetDefaults_Volume`, probes, volume sources, and
//! `SetDefaults_Pod`; plus what the default admission chain and the pod strategy add to a Pod on
//! create: `DefaultTolerationSeconds`, `Priority`, the `ServiceAccount` name, and `status.phase` /
//! `status.qosClass`).
//!
//! Deliberately different: the service account token volume (`kube-api-access-*`) is the server's, as
//! it needs a random name and the ServiceAccount; a `priorityClassName` other than the two built-in
//! system classes is resolved by the server too (only `priority: 0` without a class is set here).

use serde_json::{json, Map, Value};

use crate::validation::json::{child_obj, each_obj, get, set_default, set_default_str};

type Obj = Map<String, Value>;

/// `imagePullPolicy` as upstream derives it: `Always` for `:latest` or no tag, `IfNotPresent` for any
/// other tag, a digest, or a reference that does not parse.
pub fn default_pull_policy(image: &str) -> &'static str {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, !d.is_empty()),
        None => (image, false),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    let tag = last.split_once(':').map(|(_, t)| t);
    let repo = match tag {
        Some(t) => &name[..name.len() - t.len() - 1],
        None => name,
    };
    // The path of a reference must be lower case; an invalid one gets IfNotPresent, as upstream.
    let path = repo.split_once('/').map_or(repo, |(host, rest)| {
        if host.contains(['.', ':']) || host == "localhost" {
            rest
        } else {
            repo
        }
    });
    let valid = !repo.is_empty()
        && !path
            .bytes()
            .any(|c| c.is_ascii_uppercase() || c.is_ascii_whitespace());
    match tag {
        _ if !valid => "IfNotPresent",
        Some("latest") => "Always",
        None if !digest => "Always",
        _ => "IfNotPresent",
    }
}

fn obj_at<'a>(map: &'a mut Obj, key: &str) -> Option<&'a mut Obj> {
    map.get_mut(key).and_then(Value::as_object_mut)
}

fn default_http_get(handler: &mut Obj) {
    if let Some(h) = obj_at(handler, "httpGet") {
        set_default_str(h, "path", "/");
        set_default_str(h, "scheme", "HTTP");
    }
}

fn default_probe(c: &mut Obj, key: &str) {
    let Some(p) = obj_at(c, key) else { return };
    for (k, v) in [
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ] {
        if p.get(k).and_then(Value::as_i64).unwrap_or(0) == 0 {
            p.insert(k.into(), Value::from(v));
        }
    }
    default_http_get(p);
    if let Some(g) = obj_at(p, "grpc") {
        set_default(g, "service", Value::from(""));
    }
}

fn default_field_ref(holder: &mut Obj) {
    if let Some(fr) = obj_at(holder, "fieldRef") {
        set_default_str(fr, "apiVersion", "v1");
    }
}

/// `SetDefaults_Container` and the generated defaults of a container's nested fields.
fn default_container(c: &mut Obj) {
    let image = c
        .get("image")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    set_default_str(c, "imagePullPolicy", default_pull_policy(&image));
    set_default_str(c, "terminationMessagePath", "/dev/termination-log");
    set_default_str(c, "terminationMessagePolicy", "File");
    set_default(c, "resources", json!({}));
    for port in each_obj(c, "ports") {
        set_default_str(port, "protocol", "TCP");
    }
    for env in each_obj(c, "env") {
        if let Some(from) = obj_at(env, "valueFrom") {
            default_field_ref(from);
        }
    }
    for key in ["livenessProbe", "readinessProbe", "startupProbe"] {
        default_probe(c, key);
    }
    if let Some(lc) = obj_at(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = obj_at(lc, hook) {
                default_http_get(h);
            }
        }
    }
}

const VOLUME_SOURCE_KEYS: [&str; 30] = [
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
];

/// Volume source defaults shared by pod volumes and persistent volumes.
pub(crate) fn default_volume_source(v: &mut Obj) {
    if let Some(hp) = obj_at(v, "hostPath") {
        set_default(hp, "type", Value::from(""));
    }
    for key in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(src) = obj_at(v, key) {
            set_default(src, "defaultMode", Value::from(420));
        }
    }
    if let Some(d) = obj_at(v, "downwardAPI") {
        for item in each_obj(d, "items") {
            default_field_ref(item);
        }
    }
    if let Some(p) = obj_at(v, "projected") {
        for s in each_obj(p, "sources") {
            if let Some(d) = obj_at(s, "downwardAPI") {
                for item in each_obj(d, "items") {
                    default_field_ref(item);
                }
            }
            if let Some(t) = obj_at(s, "serviceAccountToken") {
                set_default(t, "expirationSeconds", Value::from(3600));
            }
        }
    }
    if let Some(i) = obj_at(v, "iscsi") {
        set_default_str(i, "iscsiInterface", "default");
    }
    if let Some(r) = obj_at(v, "rbd") {
        set_default_str(r, "pool", "rbd");
        set_default_str(r, "user", "admin");
        set_default_str(r, "keyring", "/etc/ceph/keyring");
    }
    if let Some(a) = obj_at(v, "azureDisk") {
        set_default(a, "cachingMode", Value::from("ReadWrite"));
        set_default(a, "kind", Value::from("Shared"));
        set_default(a, "fsType", Value::from("ext4"));
        set_default(a, "readOnly", Value::from(false));
    }
    if let Some(s) = obj_at(v, "scaleIO") {
        set_default_str(s, "storageMode", "ThinProvisioned");
        set_default_str(s, "fsType", "xfs");
    }
    if let Some(e) = obj_at(v, "ephemeral") {
        if let Some(t) = obj_at(e, "volumeClaimTemplate") {
            empty_object_meta(t);
            set_default(
                child_obj(t, "spec"),
                "volumeMode",
                Value::from("Filesystem"),
            );
        }
    }
}

/// `SetDefaults_PodSpec` and the generated defaults of everything a pod spec holds.
pub fn default_pod_spec(spec: &mut Obj) {
    set_default_str(spec, "dnsPolicy", "ClusterFirst");
    set_default_str(spec, "restartPolicy", "Always");
    set_default(spec, "securityContext", json!({}));
    set_default(spec, "terminationGracePeriodSeconds", Value::from(30));
    set_default_str(spec, "schedulerName", "default-scheduler");
    // v1 conversion keeps the deprecated `serviceAccount` and `serviceAccountName` in step.
    let sa = [spec.get("serviceAccountName"), spec.get("serviceAccount")]
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find(|s| !s.is_empty())
        .map(str::to_string);
    if let Some(sa) = sa {
        spec.insert("serviceAccountName".into(), Value::from(sa.clone()));
        spec.insert("serviceAccount".into(), Value::from(sa));
    }
    for v in each_obj(spec, "volumes") {
        if !VOLUME_SOURCE_KEYS
            .iter()
            .any(|k| v.get(*k).is_some_and(|s| !s.is_null()))
        {
            v.insert("emptyDir".into(), json!({}));
        }
        default_volume_source(v);
    }
    for key in ["initContainers", "containers", "ephemeralContainers"] {
        for c in each_obj(spec, key) {
            default_container(c);
        }
    }
}

/// An embedded `metadata` as Go serializes it: the non-pointer `creationTimestamp` shows as `null`.
pub(crate) fn empty_object_meta(holder: &mut Obj) {
    child_obj(holder, "metadata")
        .entry("creationTimestamp")
        .or_insert(Value::Null);
}

/// A pod template (`spec.template` of workloads): `metadata` as Go serializes an empty one, and the
/// pod spec defaults. Not the pod-only defaults.
pub fn default_pod_template(template: &mut Obj) {
    empty_object_meta(template);
    default_pod_spec(child_obj(template, "spec"));
}

/// The template at `path` (e.g. `["spec", "template"]`) of `obj`, created when absent.
pub(crate) fn default_template_at(obj: &mut Obj, path: &[&str]) {
    let mut cur = obj;
    for key in path {
        cur = child_obj(cur, key);
    }
    default_pod_template(cur);
}

fn quantity_sum(list: Option<&Value>, into: &mut Map<String, Value>, found: &mut Vec<String>) {
    for (name, q) in list.and_then(Value::as_object).into_iter().flatten() {
        if name != "cpu" && name != "memory" {
            continue;
        }
        let n = crate::validation::parse_quantity(q).unwrap_or(0.0);
        if n > 0.0 {
            found.push(name.clone());
            let sum = into.get(name).and_then(Value::as_f64).unwrap_or(0.0) + n;
            into.insert(name.clone(), Value::from(sum));
        }
    }
}

/// Upstream's `qos.ComputePodQOS`: `Guaranteed`, `Burstable` or `BestEffort`.
pub fn pod_qos_class(pod: &Value) -> &'static str {
    let (mut requests, mut limits) = (Map::new(), Map::new());
    let mut guaranteed = true;
    for key in ["initContainers", "containers"] {
        for c in get(pod, &["spec", key])
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let mut ignored = Vec::new();
            quantity_sum(
                get(c, &["resources", "requests"]),
                &mut requests,
                &mut ignored,
            );
            let mut found = Vec::new();
            quantity_sum(get(c, &["resources", "limits"]), &mut limits, &mut found);
            if !(found.iter().any(|f| f == "cpu") && found.iter().any(|f| f == "memory")) {
                guaranteed = false;
            }
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    let same = requests.iter().all(|(k, v)| {
        let (r, l) = (
            v.as_f64().unwrap_or(0.0),
            limits.get(k).and_then(Value::as_f64),
        );
        l.is_some_and(|l| (l - r).abs() <= 1e-9 * l.abs().max(1.0))
    });
    if guaranteed && same && requests.len() == limits.len() {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn default_tolerations(spec: &mut Obj) {
    let tolerations: Vec<Value> = spec
        .get("tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let tolerates = |key: &str| {
        tolerations.iter().any(|t| {
            let k = t.get("key").and_then(Value::as_str).unwrap_or("");
            let e = t.get("effect").and_then(Value::as_str).unwrap_or("");
            (k == key || k.is_empty()) && (e == "NoExecute" || e.is_empty())
        })
    };
    let mut added = Vec::new();
    for key in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        if !tolerates(key) {
            added.push(json!({"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}));
        }
    }
    if !added.is_empty() {
        let mut all = tolerations;
        all.extend(added);
        spec.insert("tolerations".into(), Value::Array(all));
    }
}

/// `SetDefaults_Pod`, the pod spec defaults, and the fields upstream's default admission plugins and
/// pod strategy fill in on create.
pub fn default_pod(pod: &mut Obj) {
    let mirror = pod
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(|a| a.get("kubernetes.io/config.mirror"))
        .is_some();
    let spec = child_obj(pod, "spec");
    for key in ["containers", "initContainers"] {
        for c in each_obj(spec, key) {
            let res = child_obj(c, "resources");
            if let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() {
                let requests = child_obj(res, "requests");
                for (k, v) in limits {
                    requests.entry(k).or_insert(v);
                }
            }
        }
    }
    set_default(spec, "enableServiceLinks", Value::from(true));
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for key in ["containers", "initContainers"] {
            for c in each_obj(spec, key) {
                for p in each_obj(c, "ports") {
                    if p.get("hostPort").and_then(Value::as_i64).unwrap_or(0) == 0 {
                        if let Some(cp) = p.get("containerPort").cloned() {
                            p.insert("hostPort".into(), cp);
                        }
                    }
                }
            }
        }
    }
    default_pod_spec(spec);
    if !mirror {
        let sa = spec
            .get("serviceAccountName")
            .and_then(Value::as_str)
            .unwrap_or("");
        if sa.is_empty() {
            spec.insert("serviceAccountName".into(), Value::from("default"));
            spec.insert("serviceAccount".into(), Value::from("default"));
        }
    }
    default_tolerations(spec);
    let class = spec
        .get("priorityClassName")
        .and_then(Value::as_str)
        .unwrap_or("");
    let priority = match class {
        "" => Some(0),
        "system-node-critical" => Some(2_000_001_000),
        "system-cluster-critical" => Some(2_000_000_000),
        _ => None,
    };
    if let Some(p) = priority {
        set_default(spec, "priority", Value::from(p));
    }
    set_default(
        spec,
        "preemptionPolicy",
        Value::from("PreemptLowerPriority"),
    );
    let qos = pod_qos_class(&Value::Object(pod.clone()));
    let status = child_obj(pod, "status");
    if status.get("phase").is_none_or(Value::is_null) {
        status.insert("phase".into(), Value::from("Pending"));
    }
    set_default(status, "qosClass", Value::from(qos));
}
