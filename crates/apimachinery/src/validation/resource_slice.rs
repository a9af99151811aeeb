//! `resource.k8s.io/v1` ResourceSlice, following upstream's
//! `pkg/apis/resource/validation/validation.go` (`ValidateResourceSlice`,
//! `ValidateResourceSliceUpdate`, `validateResourceSliceSpec`, `validateDevice`).

use serde_json::Value;

use crate::quantity::Quantity;

use super::field::{ErrorList, ErrorType, FieldError, FieldPath};
use super::json::{get, get_arr, get_bool, get_int, get_str, semantic_eq, str_or_empty};
use super::meta::{self, immutable, validate_label_name, NameRule};
use super::names;
use super::resource::{
    duplicates, entries, too_many, truncate_key, validate_binding_parameters, validate_dns_label,
    validate_driver_name, validate_label_value, validate_node_selector, validate_pool_name,
    validate_qualified_name, DEVICE_TAINT_EFFECTS,
};

/// `ResourceSliceMaxDevices` and, when any device has taints, consumes counters or has list
/// attributes, `ResourceSliceMaxDevicesWithTaintsOrConsumesCounters`.
const MAX_DEVICES: usize = 128;
const MAX_DEVICES_ADVANCED: usize = 64;
/// `ResourceSliceMaxAttributesAndCapacitiesPerDevice`.
const MAX_ATTRIBUTES_AND_CAPACITIES: usize = 32;
/// `ResourceSliceMaxCounterSets`, `ResourceSliceMaxCountersPerCounterSet`,
/// `ResourceSliceMaxDeviceCounterConsumptionsPerDevice`,
/// `ResourceSliceMaxCountersPerDeviceCounterConsumption`.
const MAX_COUNTER_SETS: usize = 8;
const MAX_COUNTERS: usize = 32;
const MAX_COUNTER_CONSUMPTIONS: usize = 2;
/// `DeviceTaintsMaxLength`.
const MAX_TAINTS: usize = 16;
/// `DeviceAttributeMaxValueLength`.
const ATTRIBUTE_VALUE_MAX_LEN: usize = 64;
/// `attributeAndCapacityMaxKeyLength`: `DeviceMaxDomainLength + 1 + DeviceMaxIDLength`.
const ATTRIBUTE_KEY_MAX_LEN: usize = 63 + 1 + 32;

fn root(name: &str) -> FieldPath {
    FieldPath::root(name)
}

/// Upstream's `validateNodeName` (`ValidateNodeName`: a DNS subdomain).
fn validate_node_name(name: &str, path: &FieldPath) -> ErrorList {
    names::is_dns1123_subdomain(name)
        .into_iter()
        .map(|m| FieldError::invalid(path, name, m))
        .collect()
}

/// `validateResourcePool`.
fn validate_pool(pool: Option<&Value>, path: &FieldPath) -> ErrorList {
    let empty = Value::Null;
    let pool = pool.unwrap_or(&empty);
    let mut errs = validate_pool_name(str_or_empty(pool, &["name"]), &path.child("name"));
    let count = get_int(pool, &["resourceSliceCount"]).unwrap_or(0);
    if count <= 0 {
        errs.push(FieldError::invalid(
            &path.child("resourceSliceCount"),
            count,
            "must be greater than zero",
        ));
    }
    let generation = get_int(pool, &["generation"]).unwrap_or(0);
    if generation < 0 {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            generation,
            "must be greater than or equal to zero",
        ));
    }
    errs
}

/// Upstream's semver 2.0.0 expression for version attributes.
fn is_semver(v: &str) -> bool {
    let numeric = |s: &str| {
        !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit()) && (s == "0" || !s.starts_with('0'))
    };
    let ident_char = |c: u8| c.is_ascii_alphanumeric() || c == b'-';
    let (rest, build) = match v.split_once('+') {
        Some((r, b)) => (r, Some(b)),
        None => (v, None),
    };
    if let Some(b) = build {
        if b.split('.')
            .any(|p| p.is_empty() || !p.bytes().all(ident_char))
        {
            return false;
        }
    }
    let (core, pre) = match rest.split_once('-') {
        Some((c, p)) => (c, Some(p)),
        None => (rest, None),
    };
    let parts: Vec<&str> = core.split('.').collect();
    if parts.len() != 3 || !parts.iter().all(|p| numeric(p)) {
        return false;
    }
    match pre {
        None => true,
        Some(p) => p.split('.').all(|id| {
            !id.is_empty()
                && id.bytes().all(ident_char)
                && (numeric(id) || id.bytes().any(|c| !c.is_ascii_digit()))
        }),
    }
}

fn validate_version_value(v: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if !is_semver(v) {
        errs.push(FieldError::invalid(
            path,
            v,
            "must be a string compatible with semver.org spec 2.0.0",
        ));
    }
    if v.len() > ATTRIBUTE_VALUE_MAX_LEN {
        errs.push(FieldError::too_long(path, ATTRIBUTE_VALUE_MAX_LEN));
    }
    errs
}

fn validate_string_value(v: &str, path: &FieldPath) -> ErrorList {
    if v.len() > ATTRIBUTE_VALUE_MAX_LEN {
        vec![FieldError::too_long(path, ATTRIBUTE_VALUE_MAX_LEN)]
    } else {
        ErrorList::new()
    }
}

/// `validateDeviceAttribute`: exactly one value.
fn validate_attribute(attr: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut n = 0;
    for key in ["bool", "int"] {
        if get(attr, &[key]).is_some() {
            n += 1;
        }
    }
    if let Some(s) = get(attr, &["string"]) {
        n += 1;
        errs.extend(validate_string_value(
            s.as_str().unwrap_or(""),
            &path.child("string"),
        ));
    }
    if let Some(s) = get(attr, &["version"]) {
        n += 1;
        errs.extend(validate_version_value(
            s.as_str().unwrap_or(""),
            &path.child("version"),
        ));
    }
    for (key, go_empty) in [
        ("bools", "[]bool{}"),
        ("ints", "[]int64{}"),
        ("strings", "[]string{}"),
        ("versions", "[]string{}"),
    ] {
        let Some(list) = get(attr, &[key]) else {
            continue;
        };
        n += 1;
        let items = list.as_array().map(Vec::as_slice).unwrap_or(&[]);
        let lp = path.child(key);
        if items.is_empty() {
            errs.push(FieldError::with_value_text(
                ErrorType::Invalid,
                &lp,
                go_empty,
                "must not be empty if specified",
            ));
        }
        for (i, item) in items.iter().enumerate() {
            let s = item.as_str().unwrap_or("");
            match key {
                "strings" => errs.extend(validate_string_value(s, &lp.index(i))),
                "versions" => errs.extend(validate_version_value(s, &lp.index(i))),
                _ => {}
            }
        }
    }
    match n {
        0 => errs.push(FieldError::invalid(
            path,
            "",
            "exactly one value must be specified",
        )),
        1 => {}
        _ => errs.push(FieldError::invalid(
            path,
            attr.clone(),
            "exactly one value must be specified",
        )),
    }
    errs
}

/// `CapacityRequestPolicyDiscreteMaxOptions`.
const MAX_VALID_VALUES: usize = 10;

/// A quantity field (a string, or a number as JSON allows); `None` if absent or not parsable
/// (the typed decoding refuses those before validation).
fn quantity(v: Option<&Value>) -> Option<Quantity> {
    match v? {
        Value::String(s) => Quantity::parse(s).ok(),
        n @ Value::Number(_) => Quantity::parse(&n.to_string()).ok(),
        _ => None,
    }
}

/// `validateSingleAllocatableDeviceCapacity` / `validateMultiAllocatableDeviceCapacity`.
fn validate_capacity(cap: &Value, multi: bool, path: &FieldPath) -> ErrorList {
    let Some(policy) = get(cap, &["requestPolicy"]) else {
        return ErrorList::new();
    };
    let pp = path.child("requestPolicy");
    if !multi {
        return vec![FieldError::forbidden(
            &pp,
            "allowMultipleAllocations must be true",
        )];
    }
    let values = get_arr(policy, &["validValues"]);
    let range = get(policy, &["validRange"]);
    let default = get(policy, &["default"]);
    if !values.is_empty() && range.is_some() {
        return vec![FieldError::forbidden(
            &pp,
            "exactly one policy can be specified, cannot specify \"validValues\" and \"validRange\" at the same time",
        )];
    }
    let mut errs = ErrorList::new();
    let total = quantity(get(cap, &["value"]));
    if !values.is_empty() {
        match default {
            None => errs.push(FieldError::required(
                &pp.child("default"),
                "required when validValues is defined",
            )),
            Some(d) => {
                if let (Some(d), Some(total)) = (quantity(Some(d)), total) {
                    errs.extend(validate_valid_values(
                        d,
                        total,
                        values,
                        &pp.child("validValues"),
                    ));
                }
            }
        }
    } else if let Some(r) = range {
        if default.is_none() {
            errs.push(FieldError::required(
                &pp.child("default"),
                "required when validRange is defined",
            ));
        } else if get(r, &["min"]).is_none() {
            errs.push(FieldError::required(
                &pp.child("validRange").child("min"),
                "required when validRange is defined",
            ));
        } else if let (Some(d), Some(total)) = (quantity(default), total) {
            errs.extend(validate_range(d, total, r, &pp.child("validRange")));
        }
    }
    errs
}

/// `validateRequestPolicyValidValues`: ascending, at most ten, none over the capacity, no
/// duplicates, the default among them.
fn validate_valid_values(
    default: Quantity,
    total: Quantity,
    values: &[Value],
    path: &FieldPath,
) -> ErrorList {
    if values.len() > MAX_VALID_VALUES {
        return vec![FieldError::too_many(path, values.len(), MAX_VALID_VALUES)];
    }
    let qs: Vec<Option<Quantity>> = values.iter().map(|v| quantity(Some(v))).collect();
    let mut errs = ErrorList::new();
    for (i, w) in qs.windows(2).enumerate() {
        if let [Some(a), Some(b)] = w {
            if a > b {
                errs.push(FieldError::invalid(
                    &path.index(i + 1),
                    b.to_string(),
                    "values must be sorted in ascending order",
                ));
            }
        }
    }
    let mut found = false;
    let mut seen = Vec::new();
    for (i, q) in qs.iter().enumerate() {
        let Some(q) = q else { continue };
        if *q > total {
            errs.push(FieldError::invalid(
                &path.index(i),
                q.to_string(),
                format!("option is larger than capacity value: {total}"),
            ));
        }
        found |= *q == default;
        // Upstream keys the set by the whole-unit value.
        if seen.contains(&q.value()) {
            errs.push(FieldError::duplicate(&path.index(i), q.to_string()));
        }
        seen.push(q.value());
    }
    if !found {
        errs.push(FieldError::invalid(
            path,
            default.to_string(),
            "default value is not valid according to the requestPolicy",
        ));
    }
    errs
}

/// `validateRequestPolicyRange`.
fn validate_range(default: Quantity, total: Quantity, r: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(min) = quantity(get(r, &["min"])) else {
        return errs;
    };
    let (mp, xp, sp) = (path.child("min"), path.child("max"), path.child("step"));
    if min > total {
        errs.push(FieldError::invalid(
            &mp,
            min.to_string(),
            format!("min is larger than capacity value: {total}"),
        ));
    }
    if default < min {
        errs.push(FieldError::invalid(
            &mp,
            default.to_string(),
            format!("default is less than min: {min}"),
        ));
    }
    let max = quantity(get(r, &["max"]));
    if let Some(max) = max {
        if min > max {
            errs.push(FieldError::invalid(
                &xp,
                min.to_string(),
                format!("min is larger than max: {max}"),
            ));
        }
        if max > total {
            errs.push(FieldError::invalid(
                &xp,
                max.to_string(),
                format!("max is larger than capacity value: {total}"),
            ));
        }
        if default > max {
            errs.push(FieldError::invalid(
                &xp,
                default.to_string(),
                format!("default is more than max: {max}"),
            ));
        }
    }
    if let Some(step) = quantity(get(r, &["step"])) {
        let added = min.add(&step);
        if added > total {
            errs.push(FieldError::invalid(
                &sp,
                step.to_string(),
                format!("one step {added} is larger than capacity value: {total}"),
            ));
        }
        // A zero step would divide by zero (upstream panics); nothing is a multiple of it.
        for v in std::iter::once(default).chain(max) {
            let s = i128::from(step.value());
            if s == 0 || (i128::from(v.value()) - i128::from(min.value())) % s != 0 {
                errs.push(FieldError::invalid(
                    &sp,
                    v.to_string(),
                    format!("value is not a multiple of a given step ({step}) from ({min})"),
                ));
            }
        }
    }
    errs
}

/// `validateDeviceTaint` (new or changed taints).
fn validate_taint(t: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = validate_label_name(str_or_empty(t, &["key"]), &path.child("key"));
    let value = str_or_empty(t, &["value"]);
    if !value.is_empty() {
        errs.extend(validate_label_value(value, &path.child("value")));
    }
    match str_or_empty(t, &["effect"]) {
        "" => errs.push(FieldError::required(&path.child("effect"), "")),
        e if !DEVICE_TAINT_EFFECTS.contains(&e) => errs.push(FieldError::not_supported(
            &path.child("effect"),
            e,
            &DEVICE_TAINT_EFFECTS,
        )),
        _ => {}
    }
    errs
}

/// A `counters` map: required, at most `max`, keys DNS labels (errors on the map's path).
fn validate_counters(owner: &Value, max: usize, path: &FieldPath) -> ErrorList {
    let counters = entries(owner, "counters");
    if counters.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    if counters.len() > max {
        return vec![FieldError::too_many(path, counters.len(), max)];
    }
    counters
        .iter()
        .flat_map(|(k, _)| validate_dns_label(k, path))
        .collect()
}

/// `validateCounterSet` and `validateDeviceCounterConsumption`: a named (`name_key`) set of counters.
fn validate_counter_set(set: &Value, name_key: &str, max: usize, path: &FieldPath) -> ErrorList {
    let name = str_or_empty(set, &[name_key]);
    let np = path.child(name_key);
    let mut errs = if name.is_empty() {
        vec![FieldError::required(&np, "")]
    } else {
        validate_dns_label(name, &np)
    };
    errs.extend(validate_counters(set, max, &path.child("counters")));
    errs
}

fn has_list_attributes(device: &Value) -> bool {
    entries(device, "attributes").iter().any(|(_, a)| {
        ["bools", "ints", "strings", "versions"]
            .iter()
            .any(|k| get(a, &[k]).is_some())
    })
}

/// `validateDevice`; `old` is the device of the same name before an update.
fn validate_device(
    d: &Value,
    old: Option<&Value>,
    path: &FieldPath,
    per_device_nodes: bool,
) -> ErrorList {
    let mut errs = validate_dns_label(str_or_empty(d, &["name"]), &path.child("name"));
    let attrs = entries(d, "attributes");
    let caps = entries(d, "capacity");
    let total = attrs.len() + caps.len();
    if total > MAX_ATTRIBUTES_AND_CAPACITIES {
        errs.push(FieldError::invalid(
            path,
            total,
            format!(
                "the total number of attributes and capacities must not exceed {MAX_ATTRIBUTES_AND_CAPACITIES}"
            ),
        ));
    }
    let ap = path.child("attributes");
    for (k, a) in &attrs {
        errs.extend(validate_qualified_name(k, &ap));
        errs.extend(validate_attribute(
            a,
            &ap.key(&truncate_key(k, ATTRIBUTE_KEY_MAX_LEN)),
        ));
    }
    let changed = |key: &str| old.is_none_or(|o| !semantic_eq(get(o, &[key]), get(d, &[key])));
    if changed("capacity") {
        let multi = get_bool(d, &["allowMultipleAllocations"]).unwrap_or(false);
        let cp = path.child("capacity");
        for (k, c) in &caps {
            errs.extend(validate_qualified_name(k, &cp));
            errs.extend(validate_capacity(
                c,
                multi,
                &cp.key(&truncate_key(k, ATTRIBUTE_KEY_MAX_LEN)),
            ));
        }
    }
    if changed("taints") {
        let taints = get_arr(d, &["taints"]);
        let tp = path.child("taints");
        match too_many(taints, MAX_TAINTS, &tp) {
            Some(e) => errs.extend(e),
            None => {
                for (i, t) in taints.iter().enumerate() {
                    errs.extend(validate_taint(t, &tp.index(i)));
                }
            }
        }
    }
    let consumes = get_arr(d, &["consumesCounters"]);
    let ccp = path.child("consumesCounters");
    match too_many(consumes, MAX_COUNTER_CONSUMPTIONS, &ccp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, c) in consumes.iter().enumerate() {
                errs.extend(validate_counter_set(
                    c,
                    "counterSet",
                    MAX_COUNTERS,
                    &ccp.index(i),
                ));
            }
            errs.extend(duplicates(
                consumes.iter().map(|c| str_or_empty(c, &["counterSet"])),
                &ccp,
            ));
        }
    }

    let node_name = get_str(d, &["nodeName"]);
    let node_selector = get(d, &["nodeSelector"]);
    let all_nodes = get_bool(d, &["allNodes"]);
    if per_device_nodes {
        let mut set = Vec::new();
        match node_name {
            Some("") => errs.push(FieldError::invalid(
                &path.child("nodeName"),
                "",
                "must not be empty",
            )),
            Some(n) => {
                set.push("`nodeName`");
                errs.extend(validate_node_name(n, &path.child("nodeName")));
            }
            None => {}
        }
        if let Some(sel) = node_selector {
            set.push("`nodeSelector`");
            errs.extend(validate_node_selector(sel, &path.child("nodeSelector")));
        }
        match all_nodes {
            Some(true) => set.push("`allNodes`"),
            Some(false) => errs.push(FieldError::invalid(
                &path.child("allNodes"),
                false,
                "must be either unset or set to true",
            )),
            None => {}
        }
        const MSG: &str = "exactly one of `nodeName`, `nodeSelector`, or `allNodes` is required when `perDeviceNodeSelection` is set to true in the ResourceSlice spec";
        match set.len() {
            0 => errs.push(FieldError::required(path, MSG)),
            1 => {}
            _ => errs.push(FieldError::invalid(
                path,
                format!("{{{}}}", set.join(", ")),
                MSG,
            )),
        }
    } else if node_name.is_some() || node_selector.is_some() || all_nodes.is_some() {
        errs.push(FieldError::invalid(
            path,
            Value::Null,
            "`nodeName`, `nodeSelector` and `allNodes` can only be set if `perDeviceNodeSelection` is set to true in the ResourceSlice spec",
        ));
    }
    errs.extend(validate_binding_parameters(d, path));
    errs
}

/// `validateResourceSliceSpec`; `old` is the stored spec on update.
fn validate_spec(spec: &Value, old: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = validate_driver_name(str_or_empty(spec, &["driver"]), &path.child("driver"));
    errs.extend(validate_pool(get(spec, &["pool"]), &path.child("pool")));
    if let Some(old) = old {
        errs.extend(immutable(
            get(spec, &["pool", "name"]),
            get(old, &["pool", "name"]),
            &path.child("pool").child("name"),
        ));
        errs.extend(immutable(
            get(spec, &["driver"]),
            get(old, &["driver"]),
            &path.child("driver"),
        ));
        errs.extend(immutable(
            get(spec, &["nodeName"]),
            get(old, &["nodeName"]),
            &path.child("nodeName"),
        ));
    }

    let mut set = Vec::new();
    match get_str(spec, &["nodeName"]) {
        Some("") => errs.push(FieldError::invalid(
            &path.child("nodeName"),
            "",
            "must be either unset or set to a non-empty string",
        )),
        Some(n) => {
            set.push("`nodeName`");
            errs.extend(validate_node_name(n, &path.child("nodeName")));
        }
        None => {}
    }
    if let Some(sel) = get(spec, &["nodeSelector"]) {
        set.push("`nodeSelector`");
        let sp = path.child("nodeSelector");
        errs.extend(validate_node_selector(sel, &sp));
        let terms = get(sel, &["nodeSelectorTerms"]);
        let n = terms.and_then(Value::as_array).map_or(0, Vec::len);
        if n != 1 {
            errs.push(FieldError::invalid(
                &sp.child("nodeSelectorTerms"),
                terms.cloned().unwrap_or(Value::Null),
                "must have exactly one node selector term",
            ));
        }
    }
    for (key, label) in [
        ("allNodes", "`allNodes`"),
        ("perDeviceNodeSelection", "`perDeviceNodeSelection`"),
    ] {
        match get_bool(spec, &[key]) {
            Some(true) => set.push(label),
            Some(false) => errs.push(FieldError::invalid(
                &path.child(key),
                false,
                "must be either unset or set to true",
            )),
            None => {}
        }
    }
    const MSG: &str =
        "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` is required";
    match set.len() {
        0 => errs.push(FieldError::required(path, MSG)),
        1 => {}
        _ => errs.push(FieldError::invalid(
            path,
            format!("{{{}}}", set.join(", ")),
            format!("{MSG}, but multiple fields are set"),
        )),
    }

    if get(spec, &["sharedCounters"]).is_some() && get(spec, &["devices"]).is_some() {
        errs.push(FieldError::invalid(
            path,
            "",
            "only one of `sharedCounters` or `devices` is allowed",
        ));
    }

    let devices = get_arr(spec, &["devices"]);
    let advanced = devices.iter().any(|d| {
        !get_arr(d, &["taints"]).is_empty()
            || !get_arr(d, &["consumesCounters"]).is_empty()
            || has_list_attributes(d)
    });
    let max = if advanced {
        MAX_DEVICES_ADVANCED
    } else {
        MAX_DEVICES
    };
    let dp = path.child("devices");
    match too_many(devices, max, &dp) {
        Some(e) => errs.extend(e),
        None => {
            let per_device = get_bool(spec, &["perDeviceNodeSelection"]).unwrap_or(false);
            let old_devices = old.map(|o| get_arr(o, &["devices"])).unwrap_or(&[]);
            for (i, d) in devices.iter().enumerate() {
                let name = str_or_empty(d, &["name"]);
                let old_device = old_devices
                    .iter()
                    .find(|o| str_or_empty(o, &["name"]) == name);
                errs.extend(validate_device(d, old_device, &dp.index(i), per_device));
            }
            errs.extend(duplicates(
                devices.iter().map(|d| str_or_empty(d, &["name"])),
                &dp,
            ));
        }
    }

    let sets = get_arr(spec, &["sharedCounters"]);
    let sp = path.child("sharedCounters");
    match too_many(sets, MAX_COUNTER_SETS, &sp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, s) in sets.iter().enumerate() {
                errs.extend(validate_counter_set(s, "name", MAX_COUNTERS, &sp.index(i)));
            }
            errs.extend(duplicates(
                sets.iter().map(|s| str_or_empty(s, &["name"])),
                &sp,
            ));
        }
    }
    errs
}

fn spec_of(obj: &Value) -> &Value {
    static EMPTY: Value = Value::Null;
    get(obj, &["spec"]).unwrap_or(&EMPTY)
}

/// `ValidateResourceSlice`.
pub(super) fn validate_slice(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    errs.extend(validate_spec(spec_of(obj), None, &root("spec")));
    errs
}

/// `ValidateResourceSliceUpdate`: driver, pool name and node name are immutable.
pub(super) fn validate_slice_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(validate_spec(
        spec_of(new),
        Some(spec_of(old)),
        &root("spec"),
    ));
    errs
}
