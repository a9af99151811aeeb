//! `storage.k8s.io/v1` VolumeAttributesClass (upstream `pkg/apis/storage/validation`,
//! `ValidateVolumeAttributesClass*`) and the `volumeAttributesClassName` fields of
//! PersistentVolumeClaims and PersistentVolumes (`pkg/apis/core/validation`, with the
//! VolumeAttributesClass feature on, as it is by default in 1.36).

use serde_json::Value;

use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_obj, get_str, semantic_eq, str_or_empty};
use super::meta::{self, NameRule};
use super::names;

/// Upstream's `maxProvisionerParameterLen` and `maxProvisionerParameterSize`.
const MAX_PARAMETERS: usize = 512;
const MAX_PARAMETERS_SIZE: usize = 256 * 1024;

/// `validateProvisioner`: required, and a qualified name once lowercased (the value reported is
/// the lowercased one, as `ValidateQualifiedName` receives it).
fn driver_name(obj: &Value, path: &FieldPath) -> ErrorList {
    let name = str_or_empty(obj, &["driverName"]);
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let lower = name.to_lowercase();
    names::is_qualified_name(&lower)
        .into_iter()
        .map(|m| FieldError::invalid(path, lower.as_str(), m))
        .collect()
}

/// `validateParameters` with `allowEmpty` false.
fn parameters(obj: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let params = get_obj(obj, &["parameters"]);
    let len = params.map_or(0, |p| p.len());
    if len > MAX_PARAMETERS {
        errs.push(FieldError::too_long(path, MAX_PARAMETERS));
        return errs;
    }
    let mut size = 0;
    for (k, v) in params.into_iter().flatten() {
        if k.is_empty() {
            errs.push(FieldError::invalid(path, "", "field can not be empty."));
        }
        size += k.len() + v.as_str().map_or(0, str::len);
    }
    if size > MAX_PARAMETERS_SIZE {
        errs.push(FieldError::too_long(path, MAX_PARAMETERS_SIZE));
    }
    if len == 0 {
        errs.push(FieldError::required(
            path,
            "must contain at least one key/value pair",
        ));
    }
    errs
}

fn spec(obj: &Value) -> ErrorList {
    let mut errs = driver_name(obj, &FieldPath::root("driverName"));
    errs.extend(parameters(obj, &FieldPath::root("parameters")));
    errs
}

/// `ValidateVolumeAttributesClass`.
pub(crate) fn validate_volume_attributes_class(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    errs.extend(spec(obj));
    errs
}

/// `ValidateVolumeAttributesClassUpdate`: driverName and parameters may not change.
pub(crate) fn validate_volume_attributes_class_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    if str_or_empty(new, &["driverName"]) != str_or_empty(old, &["driverName"]) {
        errs.push(FieldError::forbidden(
            &FieldPath::root("driverName"),
            "updates to driverName are forbidden.",
        ));
    }
    if !semantic_eq(get(new, &["parameters"]), get(old, &["parameters"])) {
        errs.push(FieldError::forbidden(
            &FieldPath::root("parameters"),
            "updates to parameters are forbidden.",
        ));
    }
    errs.extend(spec(new));
    errs
}

fn class_name_errors(name: &str, path: &FieldPath) -> ErrorList {
    names::is_dns1123_subdomain(name)
        .into_iter()
        .map(|m| FieldError::invalid(path, name, m))
        .collect()
}

/// The `volumeAttributesClassName` rule of `ValidatePersistentVolumeClaimSpec`: when set and not
/// empty, a DNS subdomain (`""` means "no class" on a claim).
pub(crate) fn pvc_spec_class_name(spec: &Value, path: &FieldPath) -> ErrorList {
    match get_str(spec, &["volumeAttributesClassName"]) {
        Some(name) if !name.is_empty() => {
            class_name_errors(name, &path.child("volumeAttributesClassName"))
        }
        _ => ErrorList::new(),
    }
}

/// The `ValidatePersistentVolumeClaimUpdate` rule: a class, once set, may be changed but neither
/// removed nor emptied.
pub(crate) fn pvc_update_class_name(new: &Value, old: &Value) -> ErrorList {
    let path = FieldPath::root("spec").child("volumeAttributesClassName");
    if get_str(old, &["spec", "volumeAttributesClassName"]).is_none() {
        return ErrorList::new();
    }
    match get_str(new, &["spec", "volumeAttributesClassName"]) {
        None => vec![FieldError::forbidden(
            &path,
            "update from non-nil value to nil is forbidden",
        )],
        Some("") => vec![FieldError::forbidden(
            &path,
            "update from non-nil value to an empty string is forbidden",
        )],
        Some(_) => ErrorList::new(),
    }
}

/// The `volumeAttributesClassName` rules of `ValidatePersistentVolumeSpec`: not empty when set, a
/// DNS subdomain, and only on CSI volumes.
pub(crate) fn pv_spec_class_name(obj: &Value) -> ErrorList {
    let sp = FieldPath::root("spec");
    let path = sp.child("volumeAttributesClassName");
    let mut errs = ErrorList::new();
    // `get` treats null as absent, as Go's decoder leaves a nil pointer.
    let Some(v) = get(obj, &["spec", "volumeAttributesClassName"]) else {
        return errs;
    };
    let name = v.as_str().unwrap_or("");
    if name.is_empty() {
        errs.push(FieldError::required(&path, "an empty string is disallowed"));
    } else {
        errs.extend(class_name_errors(name, &path));
    }
    if get(obj, &["spec", "csi"]).is_none() {
        errs.push(FieldError::required(
            &sp.child("csi"),
            "has to be specified when using volumeAttributesClassName",
        ));
    }
    errs
}

/// The `ValidatePersistentVolumeUpdate` rule: a class, once set, may not be removed.
pub(crate) fn pv_update_class_name(new: &Value, old: &Value) -> ErrorList {
    if get(old, &["spec", "volumeAttributesClassName"]).is_some()
        && get(new, &["spec", "volumeAttributesClassName"]).is_none()
    {
        return vec![FieldError::forbidden(
            &FieldPath::root("spec").child("volumeAttributesClassName"),
            "update from non-nil value to nil is forbidden",
        )];
    }
    ErrorList::new()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn vac(driver: Value, params: Value) -> Value {
        json!({"metadata": {"name": "gold"}, "driverName": driver, "parameters": params})
    }

    #[test]
    fn volume_attributes_class() {
        assert!(validate_volume_attributes_class(&vac(
            json!("csi.example.com"),
            json!({"iops": "100"})
        ))
        .is_empty());
        let cases = [
            (vac(json!(""), json!({"iops": "100"})), vec!["driverName: Required value"]),
            (vac(json!("csi.example.com"), json!({})),
                vec!["parameters: Required value: must contain at least one key/value pair"]),
            (vac(json!("csi.example.com"), json!({"": "x"})),
                vec!["parameters: Invalid value: \"\": field can not be empty."]),
            (vac(json!("Bad Driver"), json!({"a": "b"})),
                vec!["driverName: Invalid value: \"bad driver\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"]),
        ];
        for (obj, want) in cases {
            assert_eq!(strings(validate_volume_attributes_class(&obj)), want);
        }
        let old = vac(json!("csi.example.com"), json!({"iops": "100"}));
        let new = vac(json!("other.example.com"), json!({"iops": "200"}));
        assert_eq!(
            strings(validate_volume_attributes_class_update(&new, &old)),
            vec![
                "driverName: Forbidden: updates to driverName are forbidden.",
                "parameters: Forbidden: updates to parameters are forbidden."
            ]
        );
        assert!(validate_volume_attributes_class_update(&old, &old).is_empty());
    }

    #[test]
    fn claim_and_volume_class_names() {
        let sp = FieldPath::root("spec");
        assert!(pvc_spec_class_name(&json!({"volumeAttributesClassName": ""}), &sp).is_empty());
        assert_eq!(
            strings(pvc_spec_class_name(&json!({"volumeAttributesClassName": "Gold"}), &sp))[0],
            "spec.volumeAttributesClassName: Invalid value: \"Gold\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        let old = json!({"spec": {"volumeAttributesClassName": "gold"}});
        assert_eq!(
            strings(pvc_update_class_name(&json!({"spec": {}}), &old)),
            vec!["spec.volumeAttributesClassName: Forbidden: update from non-nil value to nil is forbidden"]
        );
        assert_eq!(
            strings(pvc_update_class_name(&json!({"spec": {"volumeAttributesClassName": ""}}), &old)),
            vec!["spec.volumeAttributesClassName: Forbidden: update from non-nil value to an empty string is forbidden"]
        );
        assert!(pvc_update_class_name(
            &json!({"spec": {"volumeAttributesClassName": "silver"}}),
            &old
        )
        .is_empty());
        assert_eq!(
            strings(pv_spec_class_name(
                &json!({"spec": {"volumeAttributesClassName": "", "hostPath": {"path": "/x"}}})
            )),
            vec![
                "spec.volumeAttributesClassName: Required value: an empty string is disallowed",
                "spec.csi: Required value: has to be specified when using volumeAttributesClassName"
            ]
        );
        assert!(pv_spec_class_name(&json!({"spec": {"volumeAttributesClassName": "gold", "csi": {"driver": "d", "volumeHandle": "h"}}})).is_empty());
        assert_eq!(
            strings(pv_update_class_name(&json!({"spec": {}}), &old)),
            vec!["spec.volumeAttributesClassName: Forbidden: update from non-nil value to nil is forbidden"]
        );
    }
}
