//! Security contexts as upstream's kubelet gives them to the runtime (`pkg/securitycontext/util.go`
//! `DetermineEffectiveSecurityContext`, `kuberuntime/security_context.go`
//! `determineEffectiveSecurityContext`, `security_context_others.go` `verifyRunAsNonRoot`,
//! `kuberuntime_sandbox.go` `generatePodSandboxLinuxConfig`, `helpers.go` seccomp and AppArmor
//! profiles), and the pod admission checks that depend on the node (`pkg/kubelet/sysctl`,
//! `pkg/kubelet/apparmor`, `lifecycle/predicate.go` for `supplementalGroupsPolicy: Strict`).

use std::path::Path;

use k8s_openapi::api::core::v1::{
    AppArmorProfile, Container, Pod, PodSecurityContext, SeccompProfile, SecurityContext,
};

use crate::cri::api;

/// Paths the runtime masks / mounts read-only in a container's `/proc` and `/sys` unless
/// `procMount: Unmasked` (upstream `defaultMaskedPaths` / `defaultReadonlyPaths`).
const DEFAULT_MASKED_PATHS: &[&str] = &[
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];
const DEFAULT_READONLY_PATHS: &[&str] = &[
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// The deprecated per-container AppArmor annotation (still read by upstream's `apparmor.GetProfile`).
const APPARMOR_ANNOTATION_PREFIX: &str = "container.apparmor.security.beta.kubernetes.io/";

/// The container's security context with the pod's settings filled in where the container has none
/// (upstream `DetermineEffectiveSecurityContext`): SELinux and Windows options, runAsUser,
/// runAsGroup, runAsNonRoot, seccomp and AppArmor profiles come from the pod; capabilities,
/// privileged, readOnlyRootFilesystem, allowPrivilegeEscalation and procMount only from the container.
pub fn effective(pod: &Pod, c: &Container) -> SecurityContext {
    let psc = pod
        .spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default();
    let mut sc = c.security_context.clone().unwrap_or_default();
    sc.se_linux_options = sc.se_linux_options.or(psc.se_linux_options);
    sc.windows_options = sc.windows_options.or(psc.windows_options);
    sc.run_as_user = sc.run_as_user.or(psc.run_as_user);
    sc.run_as_group = sc.run_as_group.or(psc.run_as_group);
    sc.run_as_non_root = sc.run_as_non_root.or(psc.run_as_non_root);
    sc.seccomp_profile = sc.seccomp_profile.or(psc.seccomp_profile);
    sc.app_armor_profile = sc.app_armor_profile.or(psc.app_armor_profile);
    sc
}

fn pod_security(pod: &Pod) -> PodSecurityContext {
    pod.spec
        .as_ref()
        .and_then(|s| s.security_context.clone())
        .unwrap_or_default()
}

/// The image's user as the runtime reports it (upstream `getImageUser`): a numeric uid, or a user
/// name; neither means root.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ImageUser {
    pub uid: Option<i64>,
    pub username: String,
}

impl ImageUser {
    pub fn from_image(image: Option<&api::Image>) -> ImageUser {
        match image {
            Some(i) if i.uid.is_some() => ImageUser {
                uid: i.uid.as_ref().map(|u| u.value),
                username: String::new(),
            },
            Some(i) if !i.username.is_empty() => ImageUser {
                uid: None,
                username: i.username.clone(),
            },
            _ => ImageUser {
                uid: Some(0),
                username: String::new(),
            },
        }
    }
}

/// upstream `format.Pod`: `name_namespace(uid)`.
fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

/// upstream `verifyRunAsNonRoot`: with `runAsNonRoot`, a container must not run as uid 0, whether
/// by its `runAsUser` or by its image's user; a non-numeric image user cannot be checked.
pub fn verify_run_as_non_root(pod: &Pod, c: &Container, image: &ImageUser) -> Result<(), String> {
    let sc = effective(pod, c);
    if sc.run_as_non_root != Some(true) {
        return Ok(());
    }
    let (p, name) = (pod_desc(pod), &c.name);
    if let Some(uid) = sc.run_as_user {
        if uid == 0 {
            return Err(format!(
                "container's runAsUser breaks non-root policy (pod: {p:?}, container: {name})"
            ));
        }
        return Ok(());
    }
    match image.uid {
        Some(0) => Err(format!(
            "container has runAsNonRoot and image will run as root (pod: {p:?}, container: {name})"
        )),
        None if !image.username.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({}), cannot verify user is non-root (pod: {p:?}, container: {name})",
            image.username
        )),
        _ => Ok(()),
    }
}

/// A seccomp profile field as the runtime takes it (upstream `fieldSeccompProfile`): Localhost
/// profiles are files under `<root-dir>/seccomp`; no profile is Unconfined unless the node defaults
/// to RuntimeDefault (`--seccomp-default`).
fn seccomp(
    profile: Option<&SeccompProfile>,
    seccomp_root: &Path,
    default_runtime: bool,
) -> Result<api::SecurityProfile, String> {
    let of = |t: api::security_profile::ProfileType| api::SecurityProfile {
        profile_type: t as i32,
        localhost_ref: String::new(),
    };
    use api::security_profile::ProfileType;
    let Some(p) = profile else {
        return Ok(if default_runtime {
            of(ProfileType::RuntimeDefault)
        } else {
            of(ProfileType::Unconfined)
        });
    };
    Ok(match p.type_.as_str() {
        "RuntimeDefault" => of(ProfileType::RuntimeDefault),
        "Localhost" => match p.localhost_profile.as_deref().filter(|l| !l.is_empty()) {
            Some(l) => api::SecurityProfile {
                profile_type: ProfileType::Localhost as i32,
                localhost_ref: seccomp_root.join(l).display().to_string(),
            },
            None => {
                return Err(
                    "localhostProfile must be set if seccompProfile type is Localhost.".into(),
                )
            }
        },
        _ => of(ProfileType::Unconfined),
    })
}

/// The AppArmor profile of a container (upstream `apparmor.GetProfile`): the container's field, then
/// its deprecated annotation, then the pod's field.
fn apparmor_of(pod: &Pod, c: &Container) -> Option<AppArmorProfile> {
    if let Some(p) = c
        .security_context
        .as_ref()
        .and_then(|s| s.app_armor_profile.clone())
    {
        return Some(p);
    }
    let key = format!("{APPARMOR_ANNOTATION_PREFIX}{}", c.name);
    if let Some(v) = pod.metadata.annotations.as_ref().and_then(|a| a.get(&key)) {
        return Some(match v.as_str() {
            "runtime/default" => AppArmorProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            },
            "unconfined" => AppArmorProfile {
                type_: "Unconfined".into(),
                localhost_profile: None,
            },
            other => AppArmorProfile {
                type_: "Localhost".into(),
                localhost_profile: other.strip_prefix("localhost/").map(String::from),
            },
        });
    }
    pod_security(pod).app_armor_profile
}

/// upstream `getAppArmorProfile`: the CRI profile and the deprecated string form.
fn apparmor(pod: &Pod, c: &Container) -> Result<(Option<api::SecurityProfile>, String), String> {
    use api::security_profile::ProfileType;
    let Some(p) = apparmor_of(pod, c) else {
        return Ok((None, String::new()));
    };
    let (t, localhost, old) = match p.type_.as_str() {
        "RuntimeDefault" => (
            ProfileType::RuntimeDefault,
            String::new(),
            "runtime/default".to_string(),
        ),
        "Unconfined" => (
            ProfileType::Unconfined,
            String::new(),
            "unconfined".to_string(),
        ),
        "Localhost" => {
            let name = p
                .localhost_profile
                .filter(|l| !l.is_empty())
                .ok_or("missing localhost apparmor profile name")?;
            (
                ProfileType::Localhost,
                name.clone(),
                format!("localhost/{name}"),
            )
        }
        other => return Err(format!("unknown apparmor profile type: {other:?}")),
    };
    Ok((
        Some(api::SecurityProfile {
            profile_type: t as i32,
            localhost_ref: localhost,
        }),
        old,
    ))
}

/// The supplemental groups of a pod's processes: fsGroup first, then supplementalGroups (upstream
/// appends in that order), and the policy (Merge = 0, Strict = 1).
fn groups(psc: &PodSecurityContext) -> (Vec<i64>, i32) {
    let mut g: Vec<i64> = psc.fs_group.into_iter().collect();
    g.extend(psc.supplemental_groups.iter().flatten().copied());
    let policy = match psc.supplemental_groups_policy.as_deref() {
        Some("Strict") => api::SupplementalGroupsPolicy::Strict as i32,
        _ => api::SupplementalGroupsPolicy::Merge as i32,
    };
    (g, policy)
}

/// Node settings the security contexts depend on.
#[derive(Clone, Debug)]
pub struct SecurityOptions<'a> {
    /// `<root-dir>/seccomp`: where Localhost seccomp profiles are.
    pub seccomp_root: &'a Path,
    /// `--seccomp-default`: containers without a profile get RuntimeDefault.
    pub seccomp_default: bool,
}

/// The CRI security context of a container (upstream `determineEffectiveSecurityContext`).
/// `apparmor_profile` is deprecated in CRI but still read by runtimes older than the `apparmor`
/// field; upstream sets both.
#[allow(deprecated)]
pub fn container_security(
    pod: &Pod,
    c: &Container,
    image: &ImageUser,
    namespace_options: api::NamespaceOption,
    opts: &SecurityOptions<'_>,
) -> Result<api::LinuxContainerSecurityContext, String> {
    let sc = effective(pod, c);
    let psc = pod_security(pod);
    let (supplemental_groups, supplemental_groups_policy) = groups(&psc);
    let (apparmor, apparmor_profile) = apparmor(pod, c)?;
    // The image's numeric user is passed on when the pod names none; a name is resolved by the runtime.
    let (run_as_user, run_as_username) = match sc.run_as_user {
        Some(u) => (Some(u), String::new()),
        None => (image.uid, image.username.clone()),
    };
    let unmasked = sc.proc_mount.as_deref() == Some("Unmasked");
    let paths = |p: &[&str]| {
        if unmasked {
            Vec::new()
        } else {
            p.iter().map(|s| s.to_string()).collect()
        }
    };
    Ok(api::LinuxContainerSecurityContext {
        capabilities: sc.capabilities.as_ref().map(|caps| api::Capability {
            add_capabilities: caps.add.clone().unwrap_or_default(),
            drop_capabilities: caps.drop.clone().unwrap_or_default(),
            ..Default::default()
        }),
        privileged: sc.privileged.unwrap_or(false),
        namespace_options: Some(namespace_options),
        selinux_options: sc.se_linux_options.as_ref().map(|o| api::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        }),
        run_as_user: run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: sc.run_as_group.map(|value| api::Int64Value { value }),
        run_as_username,
        readonly_rootfs: sc.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups,
        supplemental_groups_policy,
        // upstream `AddNoNewPrivileges`: only an explicit `allowPrivilegeEscalation: false`.
        no_new_privs: sc.allow_privilege_escalation == Some(false),
        masked_paths: paths(DEFAULT_MASKED_PATHS),
        readonly_paths: paths(DEFAULT_READONLY_PATHS),
        seccomp: Some(seccomp(
            c.security_context
                .as_ref()
                .and_then(|s| s.seccomp_profile.as_ref())
                .or(psc.seccomp_profile.as_ref()),
            opts.seccomp_root,
            opts.seccomp_default,
        )?),
        apparmor,
        apparmor_profile,
        ..Default::default()
    })
}

/// The sandbox's security context (upstream `generatePodSandboxLinuxConfig`): the pod's user and
/// groups, privileged when any container is, the pod's seccomp profile.
pub fn sandbox_security(
    pod: &Pod,
    namespace_options: api::NamespaceOption,
    opts: &SecurityOptions<'_>,
) -> Result<api::LinuxSandboxSecurityContext, String> {
    let psc = pod_security(pod);
    let (supplemental_groups, supplemental_groups_policy) = groups(&psc);
    let spec = pod.spec.as_ref();
    let privileged = spec
        .into_iter()
        .flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        })
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    Ok(api::LinuxSandboxSecurityContext {
        namespace_options: Some(namespace_options),
        selinux_options: psc.se_linux_options.as_ref().map(|o| api::SeLinuxOption {
            user: o.user.clone().unwrap_or_default(),
            role: o.role.clone().unwrap_or_default(),
            r#type: o.type_.clone().unwrap_or_default(),
            level: o.level.clone().unwrap_or_default(),
        }),
        run_as_user: psc.run_as_user.map(|value| api::Int64Value { value }),
        run_as_group: psc.run_as_group.map(|value| api::Int64Value { value }),
        readonly_rootfs: false,
        supplemental_groups,
        supplemental_groups_policy,
        privileged,
        seccomp: Some(seccomp(
            psc.seccomp_profile.as_ref(),
            opts.seccomp_root,
            opts.seccomp_default,
        )?),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": spec
        }))
        .unwrap()
    }

    fn opts(root: &Path) -> SecurityOptions<'_> {
        SecurityOptions {
            seccomp_root: root,
            seccomp_default: false,
        }
    }

    #[test]
    fn container_overrides_pod_and_groups_include_fs_group() {
        let p = pod(serde_json::json!({
        "securityContext": {"runAsUser": 1000, "runAsGroup": 3000, "fsGroup": 2000,
                            "supplementalGroups": [4000, 5000], "runAsNonRoot": true,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "a", "securityContext": {"runAsUser": 1001, "readOnlyRootFilesystem": true,
              "allowPrivilegeEscalation": false, "capabilities": {"add": ["NET_ADMIN"], "drop": ["ALL"]}}},
            {"name": "b", "securityContext": {"procMount": "Unmasked", "privileged": true,
              "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/audit.json"}}}
        ]}));
        let root = PathBuf::from("/var/lib/kubelet/seccomp");
        let spec = p.spec.as_ref().unwrap();
        let image = ImageUser::from_image(None);
        let a = container_security(
            &p,
            &spec.containers[0],
            &image,
            Default::default(),
            &opts(&root),
        )
        .unwrap();
        assert_eq!(a.run_as_user.map(|u| u.value), Some(1001));
        assert_eq!(a.run_as_group.map(|u| u.value), Some(3000));
        assert_eq!(a.supplemental_groups, [2000, 4000, 5000]);
        assert!(a.readonly_rootfs && a.no_new_privs && !a.privileged);
        let caps = a.capabilities.unwrap();
        assert_eq!(
            (caps.add_capabilities, caps.drop_capabilities),
            (vec!["NET_ADMIN".to_string()], vec!["ALL".to_string()])
        );
        assert!(a.masked_paths.contains(&"/proc/kcore".to_string()));
        assert!(a.readonly_paths.contains(&"/proc/sys".to_string()));
        assert_eq!(
            a.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
        let b = container_security(
            &p,
            &spec.containers[1],
            &image,
            Default::default(),
            &opts(&root),
        )
        .unwrap();
        assert_eq!(b.run_as_user.map(|u| u.value), Some(1000));
        assert!(b.privileged && !b.no_new_privs && b.capabilities.is_none());
        assert!(b.masked_paths.is_empty() && b.readonly_paths.is_empty());
        let s = b.seccomp.unwrap();
        assert_eq!(
            s.profile_type,
            api::security_profile::ProfileType::Localhost as i32
        );
        assert_eq!(
            s.localhost_ref,
            "/var/lib/kubelet/seccomp/profiles/audit.json"
        );
        let sandbox = sandbox_security(&p, Default::default(), &opts(&root)).unwrap();
        assert!(sandbox.privileged);
        assert_eq!(sandbox.supplemental_groups, [2000, 4000, 5000]);
        assert_eq!(sandbox.run_as_user.map(|u| u.value), Some(1000));
    }

    #[test]
    fn seccomp_defaults_and_errors() {
        let root = PathBuf::from("/s");
        let p = pod(serde_json::json!({"containers": [{"name": "c"}]}));
        let c = &p.spec.as_ref().unwrap().containers[0];
        let image = ImageUser::from_image(None);
        let unconfined =
            container_security(&p, c, &image, Default::default(), &opts(&root)).unwrap();
        assert_eq!(
            unconfined.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::Unconfined as i32
        );
        // The image's user (root here) is what the runtime is told when the pod names none.
        assert_eq!(unconfined.run_as_user.map(|u| u.value), Some(0));
        let default = SecurityOptions {
            seccomp_root: &root,
            seccomp_default: true,
        };
        let rd = container_security(&p, c, &image, Default::default(), &default).unwrap();
        assert_eq!(
            rd.seccomp.unwrap().profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
        let bad = pod(
            serde_json::json!({"securityContext": {"seccompProfile": {"type": "Localhost"}},
                                        "containers": [{"name": "c"}]}),
        );
        let c = &bad.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            container_security(&bad, c, &image, Default::default(), &opts(&root)).unwrap_err(),
            "localhostProfile must be set if seccompProfile type is Localhost."
        );
    }

    #[test]
    fn run_as_non_root() {
        let p = pod(
            serde_json::json!({"securityContext": {"runAsNonRoot": true},
                                      "containers": [{"name": "c"}, {"name": "d", "securityContext": {"runAsUser": 0}},
                                                     {"name": "e", "securityContext": {"runAsUser": 7}}]}),
        );
        let cs = &p.spec.as_ref().unwrap().containers;
        let root = ImageUser::from_image(None);
        assert_eq!(
            verify_run_as_non_root(&p, &cs[0], &root).unwrap_err(),
            "container has runAsNonRoot and image will run as root (pod: \"p_ns(u)\", container: c)"
        );
        let named = ImageUser {
            uid: None,
            username: "nginx".into(),
        };
        assert!(verify_run_as_non_root(&p, &cs[0], &named)
            .unwrap_err()
            .starts_with("container has runAsNonRoot and image has non-numeric user (nginx), cannot verify user is non-root"));
        let numeric = ImageUser {
            uid: Some(65534),
            username: String::new(),
        };
        assert!(verify_run_as_non_root(&p, &cs[0], &numeric).is_ok());
        assert_eq!(
            verify_run_as_non_root(&p, &cs[1], &numeric).unwrap_err(),
            "container's runAsUser breaks non-root policy (pod: \"p_ns(u)\", container: d)"
        );
        assert!(verify_run_as_non_root(&p, &cs[2], &root).is_ok());
        let lax = pod(serde_json::json!({"containers": [{"name": "c"}]}));
        assert!(
            verify_run_as_non_root(&lax, &lax.spec.as_ref().unwrap().containers[0], &root).is_ok()
        );
    }

    #[test]
    fn apparmor_profiles() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "annotations": {"container.apparmor.security.beta.kubernetes.io/b": "localhost/k8s-x"}},
            "spec": {"securityContext": {"appArmorProfile": {"type": "RuntimeDefault"}},
                     "containers": [{"name": "a"}, {"name": "b"}]}
        }))
        .unwrap();
        let cs = &p.spec.as_ref().unwrap().containers;
        let (a, old) = apparmor(&p, &cs[0]).unwrap();
        assert_eq!(
            a.unwrap().profile_type,
            api::security_profile::ProfileType::RuntimeDefault as i32
        );
        assert_eq!(old, "runtime/default");
        let (b, old) = apparmor(&p, &cs[1]).unwrap();
        assert_eq!(b.unwrap().localhost_ref, "k8s-x");
        assert_eq!(old, "localhost/k8s-x");
    }
}
