//! `resource.k8s.io/v1` defaults (upstream `pkg/apis/resource/v1/defaults.go` and its generated
//! `zz_generated.defaults.go`): requests and subrequests get `allocationMode: ExactCount` and, in
//! that mode, `count: 1`; tolerations `operator: Equal`; device taints `timeAdded` (now, whole
//! seconds); node allocatable resource mappings `allocationMultiplier: "1"`.

use serde_json::Value;

use crate::validation::json::{each_obj, set_default, set_default_str};

type Obj = serde_json::Map<String, Value>;

fn tolerations(owner: &mut Obj) {
    for t in each_obj(owner, "tolerations") {
        set_default_str(t, "operator", "Equal");
    }
}

/// `SetDefaults_ExactDeviceRequest` / `SetDefaults_DeviceSubRequest`, and their tolerations.
fn request_mode(r: &mut Obj) {
    set_default_str(r, "allocationMode", "ExactCount");
    let count_unset = r
        .get("count")
        .is_none_or(|c| c.is_null() || c.as_i64() == Some(0));
    if r.get("allocationMode").and_then(Value::as_str) == Some("ExactCount") && count_unset {
        r.insert("count".into(), Value::from(1));
    }
    tolerations(r);
}

/// The defaults of a claim spec (`spec` of a claim, `spec.spec` of a template).
fn claim_spec(spec: &mut Obj) {
    let Some(devices) = spec.get_mut("devices").and_then(Value::as_object_mut) else {
        return;
    };
    for req in each_obj(devices, "requests") {
        if let Some(exactly) = req.get_mut("exactly").and_then(Value::as_object_mut) {
            request_mode(exactly);
        }
        for sub in each_obj(req, "firstAvailable") {
            request_mode(sub);
        }
    }
}

pub(crate) fn resource_claim(claim: &mut Obj) {
    if let Some(spec) = claim.get_mut("spec").and_then(Value::as_object_mut) {
        claim_spec(spec);
    }
    let results = claim
        .get_mut("status")
        .and_then(|s| s.get_mut("allocation"))
        .and_then(|a| a.get_mut("devices"))
        .and_then(Value::as_object_mut);
    if let Some(devices) = results {
        for r in each_obj(devices, "results") {
            tolerations(r);
        }
    }
}

pub(crate) fn resource_claim_template(t: &mut Obj) {
    let spec = t
        .get_mut("spec")
        .and_then(|s| s.get_mut("spec"))
        .and_then(Value::as_object_mut);
    if let Some(spec) = spec {
        claim_spec(spec);
    }
}

/// `SetDefaults_DeviceTaint`: the time the taint was added, `now` in RFC 3339 (whole seconds).
fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

pub(crate) fn resource_slice(s: &mut Obj) {
    let Some(spec) = s.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let mut now = None;
    for device in each_obj(spec, "devices") {
        for taint in each_obj(device, "taints") {
            let t = now.get_or_insert_with(now_rfc3339).clone();
            set_default(taint, "timeAdded", Value::from(t));
        }
        if let Some(m) = device
            .get_mut("nodeAllocatableResourceMappings")
            .and_then(Value::as_object_mut)
        {
            for mapping in m.values_mut().filter_map(Value::as_object_mut) {
                set_default(mapping, "allocationMultiplier", Value::from("1"));
            }
        }
    }
}
