//! `apiregistration.k8s.io/v1` APIService (upstream kube-aggregator
//! `pkg/apis/apiregistration/validation`): the name is `<version>.<group>`, priorities in range, a
//! local APIService (no `service`) has no CA bundle or TLS skip, a remote one names its Service.
//! Updates are validated as creates plus the metadata update rules, as upstream does.

use serde_json::Value;

use super::b64;
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_bool, get_int, get_str, str_or_empty};
use super::meta::{self, NameRule};
use super::names;

fn spec_path(key: &str) -> FieldPath {
    FieldPath::root("spec").child(key)
}

/// The name rule: a path segment, then exactly `spec.version + "." + spec.group` (applied to a
/// `generateName` too, as upstream's name function ignores the prefix flag).
fn name_errors(obj: &Value) -> ErrorList {
    let required = format!(
        "{}.{}",
        str_or_empty(obj, &["spec", "version"]),
        str_or_empty(obj, &["spec", "group"])
    );
    let mut errs = ErrorList::new();
    for key in ["generateName", "name"] {
        let v = str_or_empty(obj, &["metadata", key]);
        if v.is_empty() || !names::is_valid_path_segment_name(v).is_empty() {
            // Empty or not a path segment: the metadata rules report it.
            continue;
        }
        if v != required {
            errs.push(FieldError::invalid(
                &FieldPath::root("metadata").child(key),
                v,
                format!("must be `spec.version+\".\"+spec.group`: {required:?}"),
            ));
        }
    }
    errs
}

fn spec(obj: &Value) -> ErrorList {
    let mut errs = ErrorList::new();
    let group = str_or_empty(obj, &["spec", "group"]);
    let version = str_or_empty(obj, &["spec", "version"]);
    if group.is_empty() && version != "v1" {
        errs.push(FieldError::required(
            &spec_path("group"),
            "only v1 may have an empty group and it better be legacy kube",
        ));
    }
    if !group.is_empty() {
        for m in names::is_dns1123_subdomain(group) {
            errs.push(FieldError::invalid(&spec_path("group"), group, m));
        }
    }
    for m in names::is_dns1035_label(version) {
        errs.push(FieldError::invalid(&spec_path("version"), version, m));
    }
    let gpm = get_int(obj, &["spec", "groupPriorityMinimum"]).unwrap_or(0);
    if gpm <= 0 || gpm > 20000 {
        errs.push(FieldError::invalid(
            &spec_path("groupPriorityMinimum"),
            gpm,
            "must be positive and less than 20000",
        ));
    }
    let vp = get_int(obj, &["spec", "versionPriority"]).unwrap_or(0);
    if vp <= 0 || vp > 1000 {
        errs.push(FieldError::invalid(
            &spec_path("versionPriority"),
            vp,
            "must be positive and less than 1000",
        ));
    }
    let ca_len = get_str(obj, &["spec", "caBundle"])
        .map(|s| b64::decode(s).map_or(s.len(), |b| b.len()))
        .unwrap_or(0);
    let skip = get_bool(obj, &["spec", "insecureSkipTLSVerify"]).unwrap_or(false);
    let Some(svc) = get(obj, &["spec", "service"]) else {
        if ca_len != 0 {
            errs.push(FieldError::invalid(
                &spec_path("caBundle"),
                format!("{ca_len} bytes"),
                "local APIServices may not have a caBundle",
            ));
        }
        if skip {
            errs.push(FieldError::invalid(
                &spec_path("insecureSkipTLSVerify"),
                true,
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
        return errs;
    };
    let sp = spec_path("service");
    for key in ["namespace", "name"] {
        if str_or_empty(svc, &[key]).is_empty() {
            errs.push(FieldError::required(&sp.child(key), ""));
        }
    }
    let port = get_int(svc, &["port"]).unwrap_or(0);
    let msgs = names::is_valid_port_num(port);
    if !msgs.is_empty() {
        errs.push(FieldError::invalid(
            &sp.child("port"),
            port,
            format!("port is not valid: {}", msgs.join(", ")),
        ));
    }
    if skip && ca_len > 0 {
        errs.push(FieldError::invalid(
            &spec_path("insecureSkipTLSVerify"),
            true,
            "may not be true if caBundle is present",
        ));
    }
    errs
}

/// Status condition statuses are True, False or Unknown (`ValidateAPIServiceStatus`).
fn status(obj: &Value) -> ErrorList {
    let path = FieldPath::root("status").child("conditions");
    let mut errs = ErrorList::new();
    for (i, c) in super::json::get_arr(obj, &["status", "conditions"])
        .iter()
        .enumerate()
    {
        let s = str_or_empty(c, &["status"]);
        if !matches!(s, "True" | "False" | "Unknown") {
            errs.push(FieldError::not_supported(
                &path.index(i).child("status"),
                s,
                &["True", "False", "Unknown"],
            ));
        }
    }
    errs
}

/// `ValidateAPIService`.
pub(crate) fn validate_api_service(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::PathSegment, false);
    errs.extend(name_errors(obj));
    errs.extend(spec(obj));
    errs
}

/// `ValidateAPIServiceUpdate` (and the status rules of `ValidateAPIServiceStatusUpdate`).
pub(crate) fn validate_api_service_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, false);
    errs.extend(name_errors(new));
    errs.extend(spec(new));
    errs.extend(status(new));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn api_service() -> Value {
        json!({"metadata": {"name": "v1beta1.metrics.k8s.io"}, "spec": {
            "group": "metrics.k8s.io", "version": "v1beta1",
            "groupPriorityMinimum": 100, "versionPriority": 100,
            "service": {"namespace": "kube-system", "name": "metrics-server", "port": 443},
            "insecureSkipTLSVerify": true,
        }})
    }

    #[test]
    fn api_service_cases() {
        assert!(validate_api_service(&api_service()).is_empty());
        let local = json!({"metadata": {"name": "v1."}, "spec": {"version": "v1",
            "groupPriorityMinimum": 18000, "versionPriority": 1}});
        assert!(validate_api_service(&local).is_empty());
        type Change = fn(&mut Value);
        let cases: Vec<(Change, &str)> = vec![
            (|o| o["metadata"]["name"] = json!("metrics"),
                "metadata.name: Invalid value: \"metrics\": must be `spec.version+\".\"+spec.group`: \"v1beta1.metrics.k8s.io\""),
            (|o| o["metadata"]["name"] = json!("a/b"),
                "metadata.name: Invalid value: \"a/b\": may not contain '/'"),
            (|o| { o["spec"]["group"] = json!(""); o["metadata"]["name"] = json!("v1beta1."); },
                "spec.group: Required value: only v1 may have an empty group and it better be legacy kube"),
            (|o| o["spec"]["groupPriorityMinimum"] = json!(20001),
                "spec.groupPriorityMinimum: Invalid value: 20001: must be positive and less than 20000"),
            (|o| o["spec"]["versionPriority"] = json!(0),
                "spec.versionPriority: Invalid value: 0: must be positive and less than 1000"),
            (|o| o["spec"]["service"]["namespace"] = json!(""),
                "spec.service.namespace: Required value"),
            (|o| o["spec"]["service"]["port"] = json!(70000),
                "spec.service.port: Invalid value: 70000: port is not valid: must be between 1 and 65535, inclusive"),
            (|o| o["spec"]["caBundle"] = json!("AAAA"),
                "spec.insecureSkipTLSVerify: Invalid value: true: may not be true if caBundle is present"),
            (|o| { o["spec"].as_object_mut().unwrap().remove("service"); o["spec"]["insecureSkipTLSVerify"] = json!(false); o["spec"]["caBundle"] = json!("AAAA"); },
                "spec.caBundle: Invalid value: \"3 bytes\": local APIServices may not have a caBundle"),
            (|o| { o["spec"].as_object_mut().unwrap().remove("service"); },
                "spec.insecureSkipTLSVerify: Invalid value: true: local APIServices may not have insecureSkipTLSVerify"),
        ];
        for (change, want) in cases {
            let mut o = api_service();
            change(&mut o);
            assert_eq!(strings(validate_api_service(&o)), vec![want.to_string()]);
        }
        let mut bad = api_service();
        bad["spec"]["version"] = json!("V1");
        bad["metadata"]["name"] = json!("V1.metrics.k8s.io");
        assert_eq!(
            strings(validate_api_service(&bad)),
            vec!["spec.version: Invalid value: \"V1\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"]
        );
        let mut st = api_service();
        st["status"] = json!({"conditions": [{"type": "Available", "status": "Maybe"}]});
        assert_eq!(
            strings(validate_api_service_update(&st, &api_service())),
            vec!["status.conditions[0].status: Unsupported value: \"Maybe\": supported values: \"True\", \"False\", \"Unknown\""]
        );
    }
}
