//! Pod sysctls (upstream `validateSysctls` and `ValidateHostSysctl` in `pkg/apis/core/validation`):
//! names as the kernel spells them (dots or slashes between segments), at most 253 characters, no
//! duplicates, and no namespaced network or IPC sysctls in a pod sharing the host's namespace.
//! Whether a sysctl is safe or allowed is the kubelet's decision (`SysctlForbidden`), not the API's.

use std::sync::OnceLock;

use regex::Regex;
use serde_json::Value;

use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, str_or_empty};

const MAX_LENGTH: usize = 253;
/// `SysctlContainSlashFmt` anchored, as upstream prints the compiled expression in its message.
const PATTERN: &str = r"^([a-z0-9]([-_a-z0-9]*[a-z0-9])?[\./])*[a-z0-9]([-_a-z0-9]*[a-z0-9])?$";

fn pattern() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(PATTERN).expect("sysctl pattern"))
}

pub fn is_valid_sysctl_name(name: &str) -> bool {
    name.len() <= MAX_LENGTH && pattern().is_match(name)
}

/// Sysctls in the network namespace (upstream `NamespacedBy`'s net group).
fn in_net_namespace(name: &str) -> bool {
    name.starts_with("net.") || name.starts_with("net/")
}

/// Sysctls in the IPC namespace.
fn in_ipc_namespace(name: &str) -> bool {
    let dotted = name.replace('/', ".");
    matches!(
        dotted.as_str(),
        "kernel.sem"
            | "kernel.shmall"
            | "kernel.shmmax"
            | "kernel.shmmni"
            | "kernel.shm_rmid_forced"
    ) || dotted.starts_with("kernel.msg")
        || dotted.starts_with("fs.mqueue.")
}

/// Validates `spec.securityContext.sysctls` of a pod spec at `path` (the spec's path).
pub fn validate_sysctls(spec: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let list_path = path.child("securityContext").child("sysctls");
    let host_network = get(spec, &["hostNetwork"]).and_then(Value::as_bool) == Some(true);
    let host_ipc = get(spec, &["hostIPC"]).and_then(Value::as_bool) == Some(true);
    let mut seen = std::collections::HashSet::new();
    for (i, sysctl) in get_arr(spec, &["securityContext", "sysctls"])
        .iter()
        .enumerate()
    {
        let name = str_or_empty(sysctl, &["name"]);
        let name_path = list_path.index(i).child("name");
        if name.is_empty() {
            errs.push(FieldError::required(&name_path, ""));
        } else if !is_valid_sysctl_name(name) {
            errs.push(FieldError::invalid(
                &name_path,
                name,
                format!("must have at most {MAX_LENGTH} characters and match regex {PATTERN}"),
            ));
        } else if !seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(&name_path, name));
        }
        if host_network && in_net_namespace(name) {
            errs.push(FieldError::invalid(
                &name_path,
                name,
                "may not be specified when 'hostNetwork' is true",
            ));
        }
        if host_ipc && in_ipc_namespace(name) {
            errs.push(FieldError::invalid(
                &name_path,
                name,
                "may not be specified when 'hostIPC' is true",
            ));
        }
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(spec: Value) -> Vec<String> {
        validate_sysctls(&spec, &FieldPath::root("spec"))
            .iter()
            .map(|e| e.to_string())
            .collect()
    }

    #[test]
    fn names_as_upstream_checks_them() {
        for ok in [
            "kernel.shmmax",
            "net.ipv4.ip_forward",
            "net/ipv4/conf/eth0.100/forwarding",
            "a",
        ] {
            assert!(is_valid_sysctl_name(ok), "{ok}");
        }
        for bad in ["foo-", "bar..", "", "Kernel.x", ".a", "a."] {
            assert!(!is_valid_sysctl_name(bad), "{bad}");
        }
        assert!(!is_valid_sysctl_name(&"a".repeat(254)));
    }

    #[test]
    fn invalid_duplicate_and_host_namespace_sysctls() {
        let errs = rendered(json!({"securityContext": {"sysctls": [
            {"name": "foo-", "value": "bar"},
            {"name": "kernel.shmmax", "value": "1"},
            {"name": "safe-and-unsafe", "value": "1"},
            {"name": "bar..", "value": "42"},
            {"name": "kernel.shmmax", "value": "2"},
            {"name": "", "value": "2"},
        ]}}));
        assert_eq!(errs.len(), 4, "{errs:?}");
        assert!(errs[0].starts_with(r#"spec.securityContext.sysctls[0].name: Invalid value: "foo-": must have at most 253 characters and match regex ^([a-z0-9]"#), "{}", errs[0]);
        assert!(
            errs[1].starts_with(r#"spec.securityContext.sysctls[3].name: Invalid value: "bar..""#)
        );
        assert_eq!(
            errs[2],
            r#"spec.securityContext.sysctls[4].name: Duplicate value: "kernel.shmmax""#
        );
        assert_eq!(
            errs[3],
            "spec.securityContext.sysctls[5].name: Required value"
        );
        let host = rendered(
            json!({"hostNetwork": true, "hostIPC": true, "securityContext": {"sysctls": [
            {"name": "net.ipv4.ip_forward", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}]}}),
        );
        assert_eq!(
            host,
            [
                r#"spec.securityContext.sysctls[0].name: Invalid value: "net.ipv4.ip_forward": may not be specified when 'hostNetwork' is true"#,
                r#"spec.securityContext.sysctls[1].name: Invalid value: "kernel.msgmax": may not be specified when 'hostIPC' is true"#,
            ]
        );
    }
}
