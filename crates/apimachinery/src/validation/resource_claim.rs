//! `resource.k8s.io/v1` ResourceClaim (spec and status) and ResourceClaimTemplate, following
//! upstream's `pkg/apis/resource/validation/validation.go` (`ValidateResourceClaim`,
//! `ValidateResourceClaimUpdate`, `ValidateResourceClaimStatusUpdate`,
//! `ValidateResourceClaimTemplate`, `ValidateResourceClaimTemplateUpdate`).

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::field::{ErrorList, ErrorType, FieldError, FieldPath};
use super::json::{get, get_arr, get_int, is_zero, semantic_eq, str_or_empty};
use super::meta::{self, immutable, validate_annotations, validate_labels, NameRule};
use super::names;
use super::resource::{
    duplicates, stringer_error, too_many, validate_binding_parameters, validate_device_class_ref,
    validate_device_configuration, validate_device_tolerations, validate_dns_label,
    validate_driver_name, validate_fully_qualified_name, validate_node_selector,
    validate_pool_name, validate_raw_extension, validate_selectors, DEVICE_CONFIG_MAX,
    DEVICE_REQUESTS_MAX,
};

/// `DeviceConstraintsMaxSize`.
const DEVICE_CONSTRAINTS_MAX: usize = 32;
/// `FirstAvailableDeviceRequestMaxSize`.
const FIRST_AVAILABLE_MAX: usize = 8;
/// `AllocationResultsMaxSize`.
const ALLOCATION_RESULTS_MAX: usize = 32;
/// `ResourceClaimReservedForMaxSize`.
const RESERVED_FOR_MAX: usize = 256;
/// `AllocatedDeviceStatusMaxConditions`.
const DEVICE_STATUS_MAX_CONDITIONS: usize = 8;
/// `AllocatedDeviceStatusDataMaxLength`.
const DEVICE_STATUS_DATA_MAX_LEN: usize = 10 * 1024;
/// `NetworkDeviceDataInterfaceNameMaxLength`, `NetworkDeviceDataHardwareAddressMaxLength`,
/// `NetworkDeviceDataMaxIPs`.
const INTERFACE_NAME_MAX_LEN: usize = 256;
const HARDWARE_ADDRESS_MAX_LEN: usize = 128;
const NETWORK_MAX_IPS: usize = 16;

const REQUEST_REF_MSG: &str =
    "must be the name of a request in the claim or the name of a request and a subrequest separated by '/'";

fn root(name: &str) -> FieldPath {
    FieldPath::root(name)
}

/// `requestNames`: each request and, for `firstAvailable` ones, its subrequests.
struct RequestNames(HashMap<String, Option<HashSet<String>>>);

impl RequestNames {
    /// `gatherRequestNames` from a claim spec's `devices`.
    fn gather(devices: Option<&Value>) -> Self {
        let mut m = HashMap::new();
        for r in devices.map(|d| get_arr(d, &["requests"])).unwrap_or(&[]) {
            let subs = get_arr(r, &["firstAvailable"]);
            let set = (!subs.is_empty()).then(|| {
                subs.iter()
                    .map(|s| str_or_empty(s, &["name"]).to_string())
                    .collect()
            });
            m.insert(str_or_empty(r, &["name"]).to_string(), set);
        }
        RequestNames(m)
    }

    fn has(&self, s: &str) -> bool {
        let segs: Vec<&str> = s.split('/').collect();
        match segs.as_slice() {
            [req] => self.0.contains_key(*req),
            [req, sub] => matches!(self.0.get(*req), Some(Some(set)) if set.contains(*sub)),
            _ => false,
        }
    }
}

/// `validateRequestNameRef`.
fn validate_request_ref(name: &str, path: &FieldPath, names: &RequestNames) -> ErrorList {
    let segs: Vec<&str> = name.split('/').collect();
    if segs.len() > 2 {
        return vec![FieldError::invalid(path, name, REQUEST_REF_MSG)];
    }
    let mut errs: ErrorList = segs
        .iter()
        .flat_map(|s| validate_dns_label(s, path))
        .collect();
    if !names.has(name) {
        errs.push(FieldError::invalid(path, name, REQUEST_REF_MSG));
    }
    errs
}

/// A set of request references (`requests` of constraints and configs): at most 32, each valid,
/// no duplicates.
fn validate_request_refs(list: &[Value], path: &FieldPath, names: &RequestNames) -> ErrorList {
    if let Some(e) = too_many(list, DEVICE_REQUESTS_MAX, path) {
        return e;
    }
    let strs: Vec<&str> = list.iter().map(|v| v.as_str().unwrap_or("")).collect();
    let mut errs: ErrorList = strs
        .iter()
        .enumerate()
        .flat_map(|(i, s)| validate_request_ref(s, &path.index(i), names))
        .collect();
    errs.extend(duplicates(strs.into_iter(), path));
    errs
}

/// `validateDeviceAllocationMode`.
fn validate_allocation_mode(req: &Value, path: &FieldPath) -> ErrorList {
    let count = get_int(req, &["count"]).unwrap_or(0);
    let count_path = path.child("count");
    match str_or_empty(req, &["allocationMode"]) {
        "All" if count != 0 => vec![FieldError::invalid(
            &count_path,
            count,
            "must not be specified when allocationMode is 'All'",
        )],
        "ExactCount" if count <= 0 => vec![FieldError::invalid(
            &count_path,
            count,
            "must be greater than zero",
        )],
        "All" | "ExactCount" => ErrorList::new(),
        other => vec![FieldError::not_supported(
            &path.child("allocationMode"),
            other,
            &["All", "ExactCount"],
        )],
    }
}

/// `validateExactDeviceRequest` and the same checks of `validateDeviceSubRequest` (besides the
/// subrequest's name).
fn validate_exact_request(req: &Value, path: &FieldPath, stored: bool) -> ErrorList {
    let mut errs = validate_device_class_ref(
        str_or_empty(req, &["deviceClassName"]),
        &path.child("deviceClassName"),
    );
    errs.extend(validate_selectors(
        get_arr(req, &["selectors"]),
        &path.child("selectors"),
        stored,
    ));
    errs.extend(validate_allocation_mode(req, path));
    errs.extend(validate_device_tolerations(
        get_arr(req, &["tolerations"]),
        &path.child("tolerations"),
    ));
    errs
}

/// `validateDeviceRequest`.
fn validate_request(req: &Value, path: &FieldPath, stored: bool) -> ErrorList {
    let mut errs = validate_dns_label(str_or_empty(req, &["name"]), &path.child("name"));
    let first = get_arr(req, &["firstAvailable"]);
    let exactly = get(req, &["exactly"]);
    match (!first.is_empty(), exactly) {
        (false, None) => errs.push(FieldError::required(
            path,
            "exactly one of `exactly` or `firstAvailable` is required",
        )),
        (true, Some(_)) => errs.push(FieldError::invalid(
            path,
            Value::Null,
            "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
        )),
        (true, None) => {
            let fp = path.child("firstAvailable");
            match too_many(first, FIRST_AVAILABLE_MAX, &fp) {
                Some(e) => errs.extend(e),
                None => {
                    for (i, sub) in first.iter().enumerate() {
                        let sp = fp.index(i);
                        errs.extend(validate_dns_label(
                            str_or_empty(sub, &["name"]),
                            &sp.child("name"),
                        ));
                        errs.extend(validate_exact_request(sub, &sp, stored));
                    }
                    errs.extend(duplicates(
                        first.iter().map(|s| str_or_empty(s, &["name"])),
                        &fp,
                    ));
                }
            }
        }
        (false, Some(ex)) => {
            errs.extend(validate_exact_request(ex, &path.child("exactly"), stored))
        }
    }
    errs
}

/// `validateDeviceConstraint` (with the DRAConsumableCapacity gate off: a constraint without
/// `distinctAttribute` needs `matchAttribute`).
fn validate_constraint(c: &Value, path: &FieldPath, names: &RequestNames) -> ErrorList {
    let mut errs = validate_request_refs(get_arr(c, &["requests"]), &path.child("requests"), names);
    if let Some(a) = get(c, &["matchAttribute"]) {
        errs.extend(validate_fully_qualified_name(
            a.as_str().unwrap_or(""),
            &path.child("matchAttribute"),
        ));
    } else if let Some(a) = get(c, &["distinctAttribute"]) {
        errs.extend(validate_fully_qualified_name(
            a.as_str().unwrap_or(""),
            &path.child("distinctAttribute"),
        ));
    } else {
        errs.push(FieldError::required(&path.child("matchAttribute"), ""));
    }
    errs
}

/// `validateDeviceClaim` at `path` (`spec.devices`).
fn validate_device_claim(devices: Option<&Value>, path: &FieldPath, stored: bool) -> ErrorList {
    let mut errs = ErrorList::new();
    let names = RequestNames::gather(devices);
    let empty = Value::Null;
    let d = devices.unwrap_or(&empty);

    let requests = get_arr(d, &["requests"]);
    let rp = path.child("requests");
    match too_many(requests, DEVICE_REQUESTS_MAX, &rp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, r) in requests.iter().enumerate() {
                errs.extend(validate_request(r, &rp.index(i), stored));
            }
            errs.extend(duplicates(
                requests.iter().map(|r| str_or_empty(r, &["name"])),
                &rp,
            ));
        }
    }

    let constraints = get_arr(d, &["constraints"]);
    let cp = path.child("constraints");
    match too_many(constraints, DEVICE_CONSTRAINTS_MAX, &cp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, c) in constraints.iter().enumerate() {
                errs.extend(validate_constraint(c, &cp.index(i), &names));
            }
        }
    }

    let configs = get_arr(d, &["config"]);
    let fp = path.child("config");
    match too_many(configs, DEVICE_CONFIG_MAX, &fp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, c) in configs.iter().enumerate() {
                let p = fp.index(i);
                errs.extend(validate_request_refs(
                    get_arr(c, &["requests"]),
                    &p.child("requests"),
                    &names,
                ));
                errs.extend(validate_device_configuration(c, &p, stored));
            }
        }
    }
    errs
}

/// `validateResourceClaimSpec` of `spec` at `path`.
fn validate_claim_spec(spec: Option<&Value>, path: &FieldPath) -> ErrorList {
    validate_device_claim(
        spec.and_then(|s| get(s, &["devices"])),
        &path.child("devices"),
        false,
    )
}

/// `ValidateResourceClaim`.
pub(super) fn validate_claim(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    errs.extend(validate_claim_spec(get(obj, &["spec"]), &root("spec")));
    errs
}

/// `ValidateResourceClaimUpdate` (the spec is immutable) together with
/// `ValidateResourceClaimStatusUpdate`.
pub(super) fn validate_claim_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(immutable(
        get(new, &["spec"]),
        get(old, &["spec"]),
        &root("spec"),
    ));
    let names = RequestNames::gather(get(new, &["spec", "devices"]));
    let deleted = get(new, &["metadata", "deletionTimestamp"]).is_some();
    errs.extend(validate_status_update(new, old, deleted, &names));
    errs
}

/// `validateResourceClaimUserReference`.
fn validate_consumer(r: &Value, path: &FieldPath) -> ErrorList {
    ["resource", "name", "uid"]
        .into_iter()
        .filter(|k| str_or_empty(r, &[k]).is_empty())
        .map(|k| FieldError::required(&path.child(k), ""))
        .collect()
}

/// `structured.SharedDeviceID` as upstream prints it: `driver/pool/device[/shareID]`.
fn shared_device_id(d: &Value) -> String {
    let mut id = format!(
        "{}/{}/{}",
        str_or_empty(d, &["driver"]),
        str_or_empty(d, &["pool"]),
        str_or_empty(d, &["device"])
    );
    if let Some(share) = get(d, &["shareID"]).and_then(Value::as_str) {
        id.push('/');
        id.push_str(share);
    }
    id
}

/// `validateUID`: an RFC 4122 UUID in lowercase, 36 characters.
fn validate_uid(uid: &str, path: &FieldPath) -> ErrorList {
    let hex = |s: &str| s.bytes().all(|c| c.is_ascii_hexdigit());
    let dashed = |s: &str| {
        let parts: Vec<&str> = s.split('-').collect();
        parts.len() == 5
            && parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
            && parts.iter().all(|p| hex(p))
    };
    // google/uuid's Validate: 36 (dashed), 38 ({dashed}), 41/45 (urn:uuid:) or 32 (plain hex).
    let format_err = || Some("invalid UUID format".to_string());
    let parse_err = match uid.len() {
        36 if !dashed(uid) => format_err(),
        38 if !(uid.starts_with('{')
            && uid.ends_with('}')
            && uid.get(1..37).is_some_and(dashed)) =>
        {
            format_err()
        }
        45 if !uid
            .get(..9)
            .is_some_and(|p| p.eq_ignore_ascii_case("urn:uuid:")) =>
        {
            Some(format!(
                "invalid urn prefix: {:?}",
                String::from_utf8_lossy(&uid.as_bytes()[..9])
            ))
        }
        45 if !uid.get(9..).is_some_and(dashed) => format_err(),
        32 if !hex(uid) => format_err(),
        36 | 38 | 45 | 32 => None,
        n => Some(format!("invalid UUID length: {n}")),
    };
    if let Some(e) = parse_err {
        return vec![FieldError::invalid(
            path,
            uid,
            format!("error validating uid: {e}"),
        )];
    }
    if uid.len() != 36 || uid != uid.to_lowercase() {
        return vec![FieldError::invalid(
            path,
            uid,
            "uid must be in RFC 4122 normalized form, `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` with lowercase hexadecimal characters",
        )];
    }
    ErrorList::new()
}

/// Upstream's `metav1validation.ValidateConditions`.
fn validate_conditions(conds: &[Value], path: &FieldPath) -> ErrorList {
    const REASON_FMT: &str = "[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?";
    const REASON_MSG: &str = "a condition reason must start with alphabetic character, optionally followed by a string of alphanumeric characters or '_,:', and must end with an alphanumeric character or '_'";
    let mut errs = ErrorList::new();
    let mut seen = HashSet::new();
    for (i, c) in conds.iter().enumerate() {
        let p = path.index(i);
        let ty = str_or_empty(c, &["type"]);
        if !seen.insert(ty) {
            errs.push(FieldError::duplicate(&p.child("type"), ty));
        }
        errs.extend(meta::validate_label_name(ty, &p.child("type")));
        let status = str_or_empty(c, &["status"]);
        if !matches!(status, "True" | "False" | "Unknown") {
            errs.push(FieldError::not_supported(
                &p.child("status"),
                status,
                &["False", "True", "Unknown"],
            ));
        }
        if let Some(g) = get_int(c, &["observedGeneration"]).filter(|g| *g < 0) {
            errs.push(FieldError::invalid(
                &p.child("observedGeneration"),
                g,
                "must be greater than or equal to zero",
            ));
        }
        if is_zero(get(c, &["lastTransitionTime"])) {
            errs.push(FieldError::required(
                &p.child("lastTransitionTime"),
                "must be set",
            ));
        }
        let reason = str_or_empty(c, &["reason"]);
        if reason.is_empty() {
            errs.push(FieldError::required(&p.child("reason"), "must be set"));
        } else {
            let b = reason.as_bytes();
            let ok = b[0].is_ascii_alphabetic()
                && b.iter()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b',' | b':'))
                && (b[b.len() - 1].is_ascii_alphanumeric() || b[b.len() - 1] == b'_');
            if !ok {
                errs.push(FieldError::invalid(
                    &p.child("reason"),
                    reason,
                    names::regex_error(
                        REASON_MSG,
                        REASON_FMT,
                        &[
                            "my_name",
                            "MY_NAME",
                            "MyName",
                            "ReasonA,ReasonB",
                            "ReasonA:ReasonB",
                        ],
                    ),
                ));
            }
            if reason.len() > 1024 {
                errs.push(FieldError::too_long(&p.child("reason"), 1024));
            }
        }
        if str_or_empty(c, &["message"]).len() > 32 * 1024 {
            errs.push(FieldError::too_long(&p.child("message"), 32 * 1024));
        }
    }
    errs
}

/// `validateNetworkDeviceData`.
fn validate_network_data(nd: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if str_or_empty(nd, &["interfaceName"]).len() > INTERFACE_NAME_MAX_LEN {
        errs.push(FieldError::too_long(
            &path.child("interfaceName"),
            INTERFACE_NAME_MAX_LEN,
        ));
    }
    if str_or_empty(nd, &["hardwareAddress"]).len() > HARDWARE_ADDRESS_MAX_LEN {
        errs.push(FieldError::too_long(
            &path.child("hardwareAddress"),
            HARDWARE_ADDRESS_MAX_LEN,
        ));
    }
    let ips = get_arr(nd, &["ips"]);
    let ip = path.child("ips");
    match too_many(ips, NETWORK_MAX_IPS, &ip) {
        Some(e) => errs.extend(e),
        None => {
            let strs: Vec<&str> = ips.iter().map(|v| v.as_str().unwrap_or("")).collect();
            for (i, s) in strs.iter().enumerate() {
                if !names::is_cidr(s) {
                    errs.push(FieldError::invalid(
                        &ip.index(i),
                        *s,
                        "must be a valid address in CIDR form, (e.g. 10.9.8.7/24 or 2001:db8::1/64)",
                    ));
                }
            }
            errs.extend(duplicates(strs.into_iter(), &ip));
        }
    }
    errs
}

/// `validateDeviceStatus`.
fn validate_device_status(d: &Value, path: &FieldPath, allocated: &HashSet<String>) -> ErrorList {
    let mut errs = validate_driver_name(str_or_empty(d, &["driver"]), &path.child("driver"));
    errs.extend(validate_pool_name(
        str_or_empty(d, &["pool"]),
        &path.child("pool"),
    ));
    errs.extend(validate_dns_label(
        str_or_empty(d, &["device"]),
        &path.child("device"),
    ));
    if let Some(share) = get(d, &["shareID"]).and_then(Value::as_str) {
        errs.extend(validate_uid(share, &path.child("shareID")));
    }
    let id = shared_device_id(d);
    if !allocated.contains(&id) {
        errs.push(stringer_error(
            ErrorType::Invalid,
            path,
            id,
            "must be an allocated device in the claim",
        ));
    }
    let conds = get_arr(d, &["conditions"]);
    if conds.len() > DEVICE_STATUS_MAX_CONDITIONS {
        errs.push(FieldError::too_many(
            &path.child("conditions"),
            conds.len(),
            DEVICE_STATUS_MAX_CONDITIONS,
        ));
    }
    errs.extend(validate_conditions(conds, &path.child("conditions")));
    if let Some(data) = get(d, &["data"]) {
        errs.extend(validate_raw_extension(
            Some(data),
            &path.child("data"),
            false,
            DEVICE_STATUS_DATA_MAX_LEN,
        ));
    }
    if let Some(nd) = get(d, &["networkData"]) {
        errs.extend(validate_network_data(nd, &path.child("networkData")));
    }
    errs
}

/// `validateDeviceRequestAllocationResult`.
fn validate_allocation_result_entry(
    r: &Value,
    path: &FieldPath,
    names: &RequestNames,
) -> ErrorList {
    let mut errs =
        validate_request_ref(str_or_empty(r, &["request"]), &path.child("request"), names);
    errs.extend(validate_driver_name(
        str_or_empty(r, &["driver"]),
        &path.child("driver"),
    ));
    errs.extend(validate_pool_name(
        str_or_empty(r, &["pool"]),
        &path.child("pool"),
    ));
    errs.extend(validate_dns_label(
        str_or_empty(r, &["device"]),
        &path.child("device"),
    ));
    errs.extend(validate_binding_parameters(r, path));
    errs.extend(validate_device_tolerations(
        get_arr(r, &["tolerations"]),
        &path.child("tolerations"),
    ));
    if let Some(share) = get(r, &["shareID"]).and_then(Value::as_str) {
        errs.extend(validate_uid(share, &path.child("shareID")));
    }
    errs
}

/// `validateAllocationResult` (new allocations only).
fn validate_allocation(a: &Value, path: &FieldPath, names: &RequestNames) -> ErrorList {
    let mut errs = ErrorList::new();
    let dp = path.child("devices");
    let results = a
        .get("devices")
        .map(|d| get_arr(d, &["results"]))
        .unwrap_or(&[]);
    let rp = dp.child("results");
    match too_many(results, ALLOCATION_RESULTS_MAX, &rp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, r) in results.iter().enumerate() {
                errs.extend(validate_allocation_result_entry(r, &rp.index(i), names));
            }
        }
    }
    let configs = a
        .get("devices")
        .map(|d| get_arr(d, &["config"]))
        .unwrap_or(&[]);
    let cp = dp.child("config");
    match too_many(configs, 2 * DEVICE_CONFIG_MAX, &cp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, c) in configs.iter().enumerate() {
                let p = cp.index(i);
                match str_or_empty(c, &["source"]) {
                    "" => errs.push(FieldError::required(&p.child("source"), "")),
                    "FromClaim" | "FromClass" => {}
                    other => errs.push(FieldError::not_supported(
                        &p.child("source"),
                        other,
                        &["FromClaim", "FromClass"],
                    )),
                }
                errs.extend(validate_request_refs(
                    get_arr(c, &["requests"]),
                    &p.child("requests"),
                    names,
                ));
                errs.extend(validate_device_configuration(c, &p, false));
            }
        }
    }
    if let Some(sel) = get(a, &["nodeSelector"]) {
        errs.extend(validate_node_selector(sel, &path.child("nodeSelector")));
    }
    errs
}

/// `validateResourceClaimStatusUpdate`.
fn validate_status_update(
    new: &Value,
    old: &Value,
    deleted: bool,
    names: &RequestNames,
) -> ErrorList {
    let sp = root("status");
    let mut errs = ErrorList::new();
    let reserved = get_arr(new, &["status", "reservedFor"]);
    let rp = sp.child("reservedFor");
    match too_many(reserved, RESERVED_FOR_MAX, &rp) {
        Some(e) => errs.extend(e),
        None => {
            for (i, r) in reserved.iter().enumerate() {
                errs.extend(validate_consumer(r, &rp.index(i)));
            }
            errs.extend(duplicates(
                reserved.iter().map(|r| str_or_empty(r, &["uid"])),
                &rp,
            ));
        }
    }

    let allocation = get(new, &["status", "allocation"]);
    let allocated: HashSet<String> = allocation
        .and_then(|a| get(a, &["devices"]))
        .map(|d| get_arr(d, &["results"]))
        .unwrap_or(&[])
        .iter()
        .map(shared_device_id)
        .collect();
    let devices = get_arr(new, &["status", "devices"]);
    let dp = sp.child("devices");
    let mut seen = HashSet::new();
    for (i, d) in devices.iter().enumerate() {
        errs.extend(validate_device_status(d, &dp.index(i), &allocated));
    }
    for (i, d) in devices.iter().enumerate() {
        let id = shared_device_id(d);
        if !seen.insert(id.clone()) {
            errs.push(stringer_error(ErrorType::Duplicate, &dp.index(i), id, ""));
        }
    }

    if !reserved.is_empty() {
        if allocation.is_none() {
            errs.push(FieldError::forbidden(
                &rp,
                "may not be specified when `allocated` is not set",
            ));
        } else if deleted {
            let old_reserved = get_arr(old, &["status", "reservedFor"]);
            if reserved
                .iter()
                .any(|r| !old_reserved.iter().any(|o| semantic_eq(Some(o), Some(r))))
            {
                errs.push(FieldError::forbidden(
                    &rp,
                    "new entries may not be added while `deallocationRequested` or `deletionTimestamp` are set",
                ));
            }
        }
    }

    let old_allocation = get(old, &["status", "allocation"]);
    match (old_allocation, allocation) {
        (Some(o), Some(n)) => errs.extend(immutable(Some(n), Some(o), &sp.child("allocation"))),
        (None, Some(n)) => errs.extend(validate_allocation(n, &sp.child("allocation"), names)),
        _ => {}
    }
    errs
}

/// Upstream's `ValidateTemplateObjectMeta`: labels and annotations only; any other field set is
/// forbidden (at the Go field name with a lowercase first letter, hence `uID`).
fn validate_template_meta(m: Option<&Value>, path: &FieldPath) -> ErrorList {
    const OTHERS: [(&str, &str); 13] = [
        ("name", "name"),
        ("generateName", "generateName"),
        ("namespace", "namespace"),
        ("selfLink", "selfLink"),
        ("uid", "uID"),
        ("resourceVersion", "resourceVersion"),
        ("generation", "generation"),
        ("creationTimestamp", "creationTimestamp"),
        ("deletionTimestamp", "deletionTimestamp"),
        ("deletionGracePeriodSeconds", "deletionGracePeriodSeconds"),
        ("ownerReferences", "ownerReferences"),
        ("finalizers", "finalizers"),
        ("managedFields", "managedFields"),
    ];
    let Some(m) = m else {
        return ErrorList::new();
    };
    let mut errs = validate_annotations(get(m, &["annotations"]), &path.child("annotations"));
    errs.extend(validate_labels(get(m, &["labels"]), &path.child("labels")));
    for (json_name, go_name) in OTHERS {
        if !is_zero(get(m, &[json_name])) {
            errs.push(FieldError::forbidden(&path.child(go_name), "cannot be set"));
        }
    }
    errs
}

/// `ValidateResourceClaimTemplate`.
pub(super) fn validate_template(obj: &Value) -> ErrorList {
    let sp = root("spec");
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    errs.extend(validate_template_meta(
        get(obj, &["spec", "metadata"]),
        &sp.child("metadata"),
    ));
    errs.extend(validate_claim_spec(
        get(obj, &["spec", "spec"]),
        &sp.child("spec"),
    ));
    errs
}

/// `ValidateResourceClaimTemplateUpdate`: the spec is immutable.
pub(super) fn validate_template_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(immutable(
        get(new, &["spec"]),
        get(old, &["spec"]),
        &root("spec"),
    ));
    errs
}
