//! Pod admission checks that depend on the node, run before a pod's first sandbox (upstream
//! `pkg/kubelet/sysctl/allowlist.go`, `component-helpers/node/util/sysctl`, `pkg/kubelet/apparmor`
//! `validate.go`, `lifecycle/predicate.go` for `supplementalGroupsPolicy`). A rejected pod goes to
//! phase Failed with the reason and `Pod was rejected: <message>`, as upstream's `rejectPod`.

use k8s_openapi::api::core::v1::Pod;

/// A pod the node refuses: the status reason and message (without upstream's
/// `Pod was rejected: ` prefix, which [`Rejection::status_message`] adds).
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Rejection {
    pub reason: String,
    pub message: String,
}

impl Rejection {
    pub fn status_message(&self) -> String {
        format!("Pod was rejected: {}", self.message)
    }
}

/// Sysctls the kubelet allows without `--allowed-unsafe-sysctls` (upstream `SafeSysctlAllowlist`;
/// its kernel version gates, all below 4.15, are not checked).
pub const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
];

#[derive(Clone, Copy, Debug, PartialEq)]
enum Namespace {
    Ipc,
    Net,
}

impl Namespace {
    fn name(self) -> &'static str {
        match self {
            Namespace::Ipc => "IPC",
            Namespace::Net => "Net",
        }
    }
}

/// upstream `NormalizeName`: `net/ipv4/conf/eno2.100/rp_filter` is `net.ipv4.conf.eno2/100.rp_filter`.
pub fn normalize_sysctl(name: &str) -> String {
    match name.find(['.', '/']) {
        Some(i) if name.as_bytes()[i] == b'/' => name
            .chars()
            .map(|c| match c {
                '.' => '/',
                '/' => '.',
                c => c,
            })
            .collect(),
        _ => name.to_string(),
    }
}

/// The kernel namespace a sysctl lives in, if it is namespaced (upstream `NamespacedBy`):
/// `kernel.sem`, and the prefixes `kernel.shm`, `kernel.msg`, `fs.mqueue.` (IPC) and `net.`.
fn namespace_of(sysctl: &str) -> Option<Namespace> {
    if sysctl == "kernel.sem" {
        return Some(Namespace::Ipc);
    }
    const PREFIXES: &[(&str, Namespace)] = &[
        ("kernel.shm", Namespace::Ipc),
        ("kernel.msg", Namespace::Ipc),
        ("fs.mqueue.", Namespace::Ipc),
        ("net.", Namespace::Net),
    ];
    PREFIXES
        .iter()
        .find(|(p, _)| sysctl.starts_with(p))
        .map(|(_, ns)| *ns)
}

/// The sysctls a node allows: the safe set plus `--allowed-unsafe-sysctls` (names, or prefixes
/// ending in `*`), each of which must be namespaced (upstream `NewAllowlist`).
#[derive(Clone, Debug, Default)]
pub struct SysctlAllowlist {
    names: Vec<(String, Namespace)>,
    prefixes: Vec<(String, Namespace)>,
}

impl SysctlAllowlist {
    pub fn new(unsafe_allowed: &[String]) -> Result<SysctlAllowlist, String> {
        let mut l = SysctlAllowlist::default();
        for s in SAFE_SYSCTLS
            .iter()
            .map(|s| s.to_string())
            .chain(unsafe_allowed.iter().cloned())
        {
            let s = normalize_sysctl(&s);
            if let Some(prefix) = s.strip_suffix('*') {
                let ns = namespace_of(prefix)
                    .ok_or_else(|| format!("the sysctls {s:?} are not known to be namespaced"))?;
                l.prefixes.push((prefix.to_string(), ns));
            } else {
                let ns = namespace_of(&s)
                    .ok_or_else(|| format!("the sysctl {s:?} are not known to be namespaced"))?;
                l.names.push((s, ns));
            }
        }
        Ok(l)
    }

    /// upstream `validateSysctl`.
    fn validate(&self, sysctl: &str, host_net: bool, host_ipc: bool) -> Result<(), String> {
        let sysctl = normalize_sysctl(sysctl);
        let found = self.names.iter().find(|(n, _)| *n == sysctl).or_else(|| {
            self.prefixes
                .iter()
                .find(|(p, _)| sysctl.starts_with(p.as_str()))
        });
        match found {
            Some((_, ns)) => {
                if (*ns == Namespace::Ipc && host_ipc) || (*ns == Namespace::Net && host_net) {
                    return Err(format!(
                        "{sysctl:?} not allowed with host {} enabled",
                        ns.name()
                    ));
                }
                Ok(())
            }
            None => Err(format!("{sysctl:?} not allowlisted")),
        }
    }

    /// upstream `Admit`: the first forbidden sysctl rejects the pod with `SysctlForbidden`.
    pub fn admit(&self, pod: &Pod) -> Result<(), Rejection> {
        let Some(spec) = pod.spec.as_ref() else {
            return Ok(());
        };
        let sysctls = spec
            .security_context
            .as_ref()
            .and_then(|s| s.sysctls.as_ref());
        for s in sysctls.into_iter().flatten() {
            self.validate(
                &s.name,
                spec.host_network.unwrap_or(false),
                spec.host_ipc.unwrap_or(false),
            )
            .map_err(|e| Rejection {
                reason: "SysctlForbidden".into(),
                message: format!("forbidden sysctl: {e}"),
            })?;
        }
        Ok(())
    }
}

/// Whether the host's kernel enforces AppArmor (upstream `apparmor.IsEnabled`).
pub fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .map(|s| s.trim_start().starts_with('Y'))
        .unwrap_or(false)
}

/// upstream `apparmor.isRequired`: a profile other than Unconfined anywhere in the pod.
fn apparmor_required(pod: &Pod) -> bool {
    let spec = match &pod.spec {
        Some(s) => s,
        None => return false,
    };
    let confined = |p: Option<&k8s_openapi::api::core::v1::AppArmorProfile>| {
        p.is_some_and(|p| p.type_ != "Unconfined")
    };
    if confined(
        spec.security_context
            .as_ref()
            .and_then(|s| s.app_armor_profile.as_ref()),
    ) {
        return true;
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for c in containers {
        if confined(
            c.security_context
                .as_ref()
                .and_then(|s| s.app_armor_profile.as_ref()),
        ) {
            return true;
        }
    }
    pod.metadata.annotations.iter().flatten().any(|(k, v)| {
        k.starts_with("container.apparmor.security.beta.kubernetes.io/") && v != "unconfined"
    })
}

/// What the node supports, for [`admit`].
#[derive(Clone, Debug)]
pub struct NodeSupport<'a> {
    pub sysctls: &'a SysctlAllowlist,
    pub apparmor: bool,
    /// The runtime enforces `supplementalGroupsPolicy: Strict` (containerd 1.6 does not).
    pub strict_supplemental_groups: bool,
}

/// The node's admission of a pod about to start for the first time.
pub fn admit(pod: &Pod, node: &NodeSupport<'_>) -> Result<(), Rejection> {
    node.sysctls.admit(pod)?;
    if !node.apparmor && apparmor_required(pod) {
        return Err(Rejection {
            reason: "AppArmor".into(),
            message: "Cannot enforce AppArmor: AppArmor is not enabled on the host".into(),
        });
    }
    let strict = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.as_ref())
        .and_then(|s| s.supplemental_groups_policy.as_deref())
        == Some("Strict");
    if strict && !node.strict_supplemental_groups {
        return Err(Rejection {
            reason: "SupplementalGroupsPolicyNotSupported".into(),
            message: "SupplementalGroupsPolicy=Strict is not supported in this node".into(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        let mut spec = spec;
        spec["containers"] = serde_json::json!([{"name": "c", "image": "i"}]);
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
    }

    fn sysctl_pod(names: &[&str], host_net: bool) -> Pod {
        let s: Vec<_> = names
            .iter()
            .map(|n| serde_json::json!({"name": n, "value": "1"}))
            .collect();
        pod(serde_json::json!({"hostNetwork": host_net, "securityContext": {"sysctls": s}}))
    }

    #[test]
    fn sysctls_safe_unsafe_and_host_namespaces() {
        let safe = SysctlAllowlist::new(&[]).unwrap();
        assert!(safe
            .admit(&sysctl_pod(
                &["kernel.shm_rmid_forced", "net.ipv4.tcp_syncookies"],
                false
            ))
            .is_ok());
        let r = safe
            .admit(&sysctl_pod(&["net.core.somaxconn"], false))
            .unwrap_err();
        assert_eq!(r.reason, "SysctlForbidden");
        assert_eq!(
            r.message,
            "forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
        );
        assert_eq!(
            r.status_message(),
            "Pod was rejected: forbidden sysctl: \"net.core.somaxconn\" not allowlisted"
        );
        let r = safe
            .admit(&sysctl_pod(&["net.ipv4.tcp_syncookies"], true))
            .unwrap_err();
        assert_eq!(
            r.message,
            "forbidden sysctl: \"net.ipv4.tcp_syncookies\" not allowed with host Net enabled"
        );
        let unsafe_ok =
            SysctlAllowlist::new(&["net.core.*".into(), "kernel.msgmax".into()]).unwrap();
        assert!(unsafe_ok
            .admit(&sysctl_pod(
                &[
                    "net.core.somaxconn",
                    "kernel.msgmax",
                    "net/ipv4/tcp_syncookies"
                ],
                false
            ))
            .is_ok());
        assert!(SysctlAllowlist::new(&["vm.swappiness".into()]).is_err());
        assert!(SysctlAllowlist::new(&["kernel.*".into()]).is_err());
        assert!(SysctlAllowlist::new(&["kernel.shm*".into(), "fs.mqueue.*".into()]).is_ok());
    }

    #[test]
    fn sysctl_names_normalize() {
        assert_eq!(
            normalize_sysctl("net/ipv4/conf/eno2.100/rp_filter"),
            "net.ipv4.conf.eno2/100.rp_filter"
        );
        assert_eq!(
            normalize_sysctl("net.ipv4.ip_forward"),
            "net.ipv4.ip_forward"
        );
    }

    #[test]
    fn apparmor_and_strict_groups() {
        let sysctls = SysctlAllowlist::new(&[]).unwrap();
        let node = NodeSupport {
            sysctls: &sysctls,
            apparmor: false,
            strict_supplemental_groups: false,
        };
        let confined = pod(
            serde_json::json!({"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}}}),
        );
        let r = admit(&confined, &node).unwrap_err();
        assert_eq!(r.reason, "AppArmor");
        assert_eq!(
            r.message,
            "Cannot enforce AppArmor: AppArmor is not enabled on the host"
        );
        let unconfined = pod(
            serde_json::json!({"securityContext": {"appArmorProfile": {"type": "Unconfined"}}}),
        );
        assert!(admit(&unconfined, &node).is_ok());
        let enabled = NodeSupport {
            apparmor: true,
            ..node.clone()
        };
        assert!(admit(&confined, &enabled).is_ok());
        let strict =
            pod(serde_json::json!({"securityContext": {"supplementalGroupsPolicy": "Strict"}}));
        let r = admit(&strict, &node).unwrap_err();
        assert_eq!(r.reason, "SupplementalGroupsPolicyNotSupported");
        let merge =
            pod(serde_json::json!({"securityContext": {"supplementalGroupsPolicy": "Merge"}}));
        assert!(admit(&merge, &node).is_ok());
    }
}
