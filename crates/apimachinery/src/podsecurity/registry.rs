//! Which checks a level+version runs, and their aggregated verdict (upstream `policy/registry.go`,
//! `policy/checks.go`).
//!
//! Every check has revisions, each starting at a policy version; a level+version runs, per check,
//! the newest revision not newer than its version. `latest` and versions newer than the newest
//! revision anywhere (`max_version`, v1.35 today) mean that newest version. `baseline` runs the
//! baseline checks; `restricted` runs the restricted checks plus the baseline checks none of them
//! overrides. Results come in upstream's order: baseline checks by ID, then restricted by ID.

use serde_json::Value;

use super::api::{Level, LevelVersion, Version};
use super::{baseline as b, restricted as r};

/// A check's finding: a short reason (`host ports`) and the specifics (`8080, 9090`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub reason: String,
    pub detail: String,
}

impl Violation {
    pub fn new(reason: impl Into<String>, detail: impl Into<String>) -> Violation {
        Violation {
            reason: reason.into(),
            detail: detail.into(),
        }
    }
}

/// A check's verdict on one pod spec: `None` when allowed.
pub type CheckFn = fn(&Value, &Value) -> Option<Violation>;

/// One revision of a check.
struct Revision {
    /// The first `v1.<minor>` it applies to.
    since: u64,
    check: CheckFn,
    /// Baseline check IDs a restricted revision replaces at `restricted`.
    overrides: &'static [&'static str],
}

const fn rev(since: u64, check: CheckFn) -> Revision {
    Revision {
        since,
        check,
        overrides: &[],
    }
}

const fn rev_over(since: u64, check: CheckFn, overrides: &'static [&'static str]) -> Revision {
    Revision {
        since,
        check,
        overrides,
    }
}

struct Check {
    id: &'static str,
    level: Level,
    /// Oldest first.
    revisions: &'static [Revision],
}

/// Every check: baseline sorted by ID, then restricted sorted by ID (the order of the results,
/// kept sorted by a test).
static CHECKS: &[Check] = &[
    Check {
        id: "appArmorProfile",
        level: Level::Baseline,
        revisions: &[rev(0, b::app_armor_profile_1_0)],
    },
    Check {
        id: "capabilities_baseline",
        level: Level::Baseline,
        revisions: &[rev(0, b::capabilities_baseline_1_0)],
    },
    Check {
        id: "hostNamespaces",
        level: Level::Baseline,
        revisions: &[rev(0, b::host_namespaces_1_0)],
    },
    Check {
        id: "hostPathVolumes",
        level: Level::Baseline,
        revisions: &[rev(0, b::host_path_volumes_1_0)],
    },
    Check {
        id: "hostPorts",
        level: Level::Baseline,
        revisions: &[rev(0, b::host_ports_1_0)],
    },
    Check {
        id: "hostProbesAndHostLifecycle",
        level: Level::Baseline,
        revisions: &[rev(34, b::host_probes_and_host_lifecycle_1_34)],
    },
    Check {
        id: "privileged",
        level: Level::Baseline,
        revisions: &[rev(0, b::privileged_1_0)],
    },
    Check {
        id: "procMount",
        level: Level::Baseline,
        revisions: &[
            rev(0, b::proc_mount_1_0),
            rev(35, b::proc_mount_1_35_baseline),
        ],
    },
    Check {
        id: "seLinuxOptions",
        level: Level::Baseline,
        revisions: &[
            rev(0, b::se_linux_options_1_0),
            rev(31, b::se_linux_options_1_31),
        ],
    },
    Check {
        id: "seccompProfile_baseline",
        level: Level::Baseline,
        revisions: &[
            rev(0, b::seccomp_profile_baseline_1_0),
            rev(19, b::seccomp_profile_baseline_1_19),
        ],
    },
    Check {
        id: "sysctls",
        level: Level::Baseline,
        revisions: &[
            rev(0, b::sysctls_1_0),
            rev(27, b::sysctls_1_27),
            rev(29, b::sysctls_1_29),
            rev(32, b::sysctls_1_32),
        ],
    },
    Check {
        id: "windowsHostProcess",
        level: Level::Baseline,
        revisions: &[rev(0, b::windows_host_process_1_0)],
    },
    Check {
        id: "allowPrivilegeEscalation",
        level: Level::Restricted,
        revisions: &[
            rev(8, r::allow_privilege_escalation_1_8),
            rev(25, r::allow_privilege_escalation_1_25),
        ],
    },
    Check {
        id: "capabilities_restricted",
        level: Level::Restricted,
        revisions: &[
            rev_over(
                22,
                r::capabilities_restricted_1_22,
                &["capabilities_baseline"],
            ),
            rev_over(
                25,
                r::capabilities_restricted_1_25,
                &["capabilities_baseline"],
            ),
        ],
    },
    Check {
        id: "procMount_restricted",
        level: Level::Restricted,
        // The strict 1.0 revision, kept at restricted where baseline relaxes it for user namespaces.
        revisions: &[rev_over(35, b::proc_mount_1_0, &["procMount"])],
    },
    Check {
        id: "restrictedVolumes",
        level: Level::Restricted,
        revisions: &[rev_over(0, r::restricted_volumes_1_0, &["hostPathVolumes"])],
    },
    Check {
        id: "runAsNonRoot",
        level: Level::Restricted,
        revisions: &[
            rev(0, r::run_as_non_root_1_0),
            rev(35, r::run_as_non_root_1_35),
        ],
    },
    Check {
        id: "runAsUser",
        level: Level::Restricted,
        revisions: &[rev(23, r::run_as_user_1_23), rev(35, r::run_as_user_1_35)],
    },
    Check {
        id: "seccompProfile_restricted",
        level: Level::Restricted,
        revisions: &[
            rev_over(
                19,
                r::seccomp_profile_restricted_1_19,
                &["seccompProfile_baseline"],
            ),
            rev_over(
                25,
                r::seccomp_profile_restricted_1_25,
                &["seccompProfile_baseline"],
            ),
        ],
    },
];

/// The newest policy version any check has a revision for; `latest` evaluates as this version.
pub fn max_version() -> u64 {
    CHECKS
        .iter()
        .flat_map(|c| c.revisions.iter().map(|r| r.since))
        .max()
        .unwrap_or(0)
}

/// The revision of `check` in force at `v1.<minor>`, if any.
fn revision(check: &Check, minor: u64) -> Option<&'static Revision> {
    check.revisions.iter().rev().find(|r| r.since <= minor)
}

/// The checks `lv` runs, in result order.
fn checks_for(lv: LevelVersion) -> Vec<CheckFn> {
    let max = max_version();
    let minor = match lv.version {
        Version::Latest => max,
        Version::V1(minor) => minor.min(max),
    };
    let active = CHECKS
        .iter()
        .filter_map(|c| revision(c, minor).map(|r| (c, r)));
    match lv.level {
        Level::Privileged => Vec::new(),
        Level::Baseline => active
            .filter(|(c, _)| c.level == Level::Baseline)
            .map(|(_, r)| r.check)
            .collect(),
        Level::Restricted => {
            let active: Vec<_> = active.collect();
            let overridden: Vec<&str> = active
                .iter()
                .filter(|(c, _)| c.level == Level::Restricted)
                .flat_map(|(_, r)| r.overrides.iter().copied())
                .collect();
            active
                .iter()
                .filter(|(c, _)| !overridden.contains(&c.id))
                .map(|(_, r)| r.check)
                .collect()
        }
    }
}

/// Runs the checks of `lv` on a pod's metadata and spec (upstream `EvaluatePod` aggregated by
/// `AggregateCheckResults`).
pub fn evaluate_pod(lv: LevelVersion, meta: &Value, spec: &Value) -> Aggregate {
    Aggregate(
        checks_for(lv)
            .into_iter()
            .filter_map(|check| check(meta, spec))
            .collect(),
    )
}

/// The violations of one evaluation, in check order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregate(pub Vec<Violation>);

impl Aggregate {
    pub fn allowed(&self) -> bool {
        self.0.is_empty()
    }

    /// `host ports, privileged`: the reasons alone (namespace-wide summaries).
    pub fn forbidden_reason(&self) -> String {
        self.0
            .iter()
            .map(|v| v.reason.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// `host ports (8080, 9090), privileged (container "a" must ...)`: reasons with details.
    pub fn forbidden_detail(&self) -> String {
        self.0
            .iter()
            .map(|v| {
                if v.detail.is_empty() {
                    v.reason.clone()
                } else {
                    format!("{} ({})", v.reason, v.detail)
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn lv(level: Level, version: Version) -> LevelVersion {
        LevelVersion::new(level, version)
    }

    #[test]
    fn checks_are_in_upstream_order() {
        let ids = |level| -> Vec<&str> {
            CHECKS
                .iter()
                .filter(|c| c.level == level)
                .map(|c| c.id)
                .collect()
        };
        for level in [Level::Baseline, Level::Restricted] {
            let mut sorted = ids(level);
            sorted.sort_unstable();
            assert_eq!(ids(level), sorted);
        }
        let first_restricted = CHECKS
            .iter()
            .position(|c| c.level == Level::Restricted)
            .unwrap();
        assert!(CHECKS[first_restricted..]
            .iter()
            .all(|c| c.level == Level::Restricted));
        assert_eq!(max_version(), 35);
        for c in CHECKS {
            assert!(
                c.revisions.windows(2).all(|w| w[0].since < w[1].since),
                "{}",
                c.id
            );
        }
    }

    #[test]
    fn levels_run_their_checks() {
        let latest = |level| checks_for(lv(level, Version::Latest)).len();
        assert_eq!(latest(Level::Privileged), 0);
        assert_eq!(latest(Level::Baseline), 12);
        // 12 baseline minus 4 overridden, plus 7 restricted.
        assert_eq!(latest(Level::Restricted), 15);
        // Before 1.8 restricted has only volumes and runAsNonRoot of its own, and overrides only
        // hostPath volumes.
        assert_eq!(
            checks_for(lv(Level::Restricted, Version::V1(0))).len(),
            11 - 1 + 2
        );
        // Future versions are the newest one.
        assert_eq!(
            checks_for(lv(Level::Restricted, Version::V1(99))).len(),
            latest(Level::Restricted)
        );
    }

    fn unconfined_pod() -> Value {
        json!({"containers": [{"name": "c", "image": "busybox"}]})
    }

    #[test]
    fn restricted_latest_reports_as_upstream() {
        let got = evaluate_pod(
            lv(Level::Restricted, Version::Latest),
            &Value::Null,
            &unconfined_pod(),
        );
        assert_eq!(
            got.forbidden_detail(),
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#
        );
        assert_eq!(
            got.forbidden_reason(),
            "allowPrivilegeEscalation != false, unrestricted capabilities, runAsNonRoot != true, seccompProfile"
        );
        assert!(evaluate_pod(
            lv(Level::Baseline, Version::Latest),
            &Value::Null,
            &unconfined_pod()
        )
        .allowed());
    }

    #[test]
    fn baseline_results_come_before_restricted_ones() {
        let spec = json!({"hostNetwork": true, "containers": [{"name": "c", "securityContext": {
            "privileged": true, "allowPrivilegeEscalation": false, "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}}]});
        let got = evaluate_pod(lv(Level::Restricted, Version::Latest), &Value::Null, &spec);
        assert_eq!(got.forbidden_reason(), "host namespaces, privileged");
    }

    #[test]
    fn overridden_baseline_checks_report_once() {
        // A hostPath volume is reported by restrictedVolumes alone at restricted.
        let spec = json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}],
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "Unconfined"}},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]}}}]});
        let got = evaluate_pod(lv(Level::Restricted, Version::Latest), &Value::Null, &spec);
        assert_eq!(
            got.forbidden_detail(),
            r#"unrestricted capabilities (container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add), restricted volume types (volume "h" uses restricted volume type "hostPath"), seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")"#
        );
        let got = evaluate_pod(lv(Level::Baseline, Version::Latest), &Value::Null, &spec);
        assert_eq!(
            got.forbidden_reason(),
            "non-default capabilities, hostPath volumes, seccompProfile"
        );
    }

    #[test]
    fn pinned_versions_run_older_revisions() {
        // Probe hosts are checked from 1.34 only.
        let spec = json!({"containers": [{"name": "c",
            "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}]});
        let at = |v| evaluate_pod(lv(Level::Baseline, v), &Value::Null, &spec);
        assert!(at(Version::V1(33)).allowed());
        assert_eq!(
            at(Version::V1(34)).forbidden_detail(),
            r#"probe or lifecycle host (container "c" uses probe or lifecycle host "10.0.0.1")"#
        );
        // runAsUser=0 is restricted from 1.23; user namespaces relax it from 1.35.
        let root = json!({"hostUsers": false, "securityContext": {"runAsUser": 0, "runAsNonRoot": true,
            "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "c", "securityContext": {"allowPrivilegeEscalation": false,
                "capabilities": {"drop": ["ALL"]}}}]});
        let at = |v| evaluate_pod(lv(Level::Restricted, v), &Value::Null, &root);
        assert!(at(Version::V1(22)).allowed());
        assert_eq!(at(Version::V1(34)).forbidden_reason(), "runAsUser=0");
        assert!(at(Version::Latest).allowed());
    }
}
