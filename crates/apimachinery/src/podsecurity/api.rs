//! Levels, policy versions and the namespace labels that choose them (upstream
//! `k8s.io/pod-security-admission/api`: `constants.go`, `helpers.go`).

use std::fmt;

use serde_json::{Map, Value};

use crate::validation::field::{FieldError, FieldPath};

const LABEL_PREFIX: &str = "pod-security.kubernetes.io/";
pub const ENFORCE_LEVEL_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LEVEL_LABEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LEVEL_LABEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

/// Audit annotation keys are the label prefix plus one of the `*_ANNOTATION` suffixes.
pub const AUDIT_ANNOTATION_PREFIX: &str = LABEL_PREFIX;
/// Why a request was exempt: `namespace`, `user` or `runtimeClass`.
pub const EXEMPTION_REASON_ANNOTATION: &str = "exempt";
/// The `would violate PodSecurity ...` text of the audit level.
pub const AUDIT_VIOLATIONS_ANNOTATION: &str = "audit-violations";
/// The enforce level+version a pod was checked against.
pub const ENFORCED_POLICY_ANNOTATION: &str = "enforce-policy";
/// Labels that did not parse, or a lookup that failed.
pub const ERROR_ANNOTATION: &str = "error";

/// A Pod Security Standards level, least to most strict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

impl fmt::Display for Level {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A policy version: `latest`, or `v1.<minor>` (upstream has only major version 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Version {
    Latest,
    V1(u64),
}

impl Version {
    /// Whether `self` is older than `other`; `latest` is newer than every pinned version, future
    /// ones included (upstream `Version.Older`).
    pub fn older(self, other: Version) -> bool {
        match (self, other) {
            (Version::Latest, _) => false,
            (_, Version::Latest) => true,
            (Version::V1(a), Version::V1(b)) => a < b,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::V1(minor) => write!(f, "v1.{minor}"),
        }
    }
}

/// A level at a version, printed `restricted:latest`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    pub const fn new(level: Level, version: Version) -> LevelVersion {
        LevelVersion { level, version }
    }

    pub const PRIVILEGED_LATEST: LevelVersion =
        LevelVersion::new(Level::Privileged, Version::Latest);
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level, self.version)
    }
}

/// What a namespace enforces, audits and warns about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    /// Upstream's default configuration: privileged:latest in every mode.
    fn default() -> Self {
        Policy {
            enforce: LevelVersion::PRIVILEGED_LATEST,
            audit: LevelVersion::PRIVILEGED_LATEST,
            warn: LevelVersion::PRIVILEGED_LATEST,
        }
    }
}

impl Policy {
    /// Every mode is privileged, so no pod can be refused, audited or warned about.
    pub fn fully_privileged(&self) -> bool {
        [self.enforce, self.audit, self.warn]
            .iter()
            .all(|lv| lv.level == Level::Privileged)
    }

    /// Same levels, and same versions where the level is not privileged (the version of a
    /// privileged mode changes nothing).
    pub fn equivalent(&self, other: &Policy) -> bool {
        let same = |a: LevelVersion, b: LevelVersion| {
            a.level == b.level && (a.level == Level::Privileged || a.version == b.version)
        };
        same(self.enforce, other.enforce)
            && same(self.audit, other.audit)
            && same(self.warn, other.warn)
    }
}

const LEVEL_ERROR: &str = "must be one of privileged, baseline, restricted";
const VERSION_ERROR: &str = "must be \"latest\" or \"v1.x\"";

/// A level label's value; anything else is an error and evaluates as `restricted`, so a typo
/// fails closed.
pub fn parse_level(value: &str) -> Result<Level, Level> {
    match value {
        "privileged" => Ok(Level::Privileged),
        "baseline" => Ok(Level::Baseline),
        "restricted" => Ok(Level::Restricted),
        _ => Err(Level::Restricted),
    }
}

/// A version label's value (`latest` or `v1.<minor>`, no leading zeros); anything else is an
/// error and evaluates as `latest`.
pub fn parse_version(value: &str) -> Result<Version, Version> {
    if value == "latest" {
        return Ok(Version::Latest);
    }
    let Some(minor) = value.strip_prefix("v1.") else {
        return Err(Version::Latest);
    };
    let digits = !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit());
    if !digits || (minor.len() > 1 && minor.starts_with('0')) {
        return Err(Version::Latest);
    }
    // Go parses into an int64; larger numbers are an error there too.
    match minor.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(Version::V1(n as u64)),
        _ => Err(Version::Latest),
    }
}

/// The policy a namespace's labels ask for, over `defaults` for the labels not set. A policy is
/// always returned; labels that do not parse are reported as errors (upstream
/// `PolicyToEvaluate`): an invalid enforce level enforces `restricted`, an invalid audit or warn
/// level falls back to `privileged` (fail open for modes that cannot refuse), an invalid version
/// is `latest`.
pub fn policy_to_evaluate(
    labels: Option<&Map<String, Value>>,
    defaults: &Policy,
) -> (Policy, Vec<FieldError>) {
    let mut policy = *defaults;
    let mut errors = Vec::new();
    let Some(labels) = labels.filter(|l| !l.is_empty()) else {
        return (policy, errors);
    };
    let mut read = Labels {
        labels,
        errors: &mut errors,
    };
    read.level(
        ENFORCE_LEVEL_LABEL,
        Level::Restricted,
        &mut policy.enforce.level,
    );
    read.version(ENFORCE_VERSION_LABEL, &mut policy.enforce.version);
    read.level(
        AUDIT_LEVEL_LABEL,
        Level::Privileged,
        &mut policy.audit.level,
    );
    read.version(AUDIT_VERSION_LABEL, &mut policy.audit.version);
    read.level(WARN_LEVEL_LABEL, Level::Privileged, &mut policy.warn.level);
    read.version(WARN_VERSION_LABEL, &mut policy.warn.version);
    (policy, errors)
}

/// Reads policy labels, collecting the errors of those that do not parse.
struct Labels<'a> {
    labels: &'a Map<String, Value>,
    errors: &'a mut Vec<FieldError>,
}

impl Labels<'_> {
    fn value(&self, key: &str) -> Option<&str> {
        // Label values are strings once validated; anything else reads as empty (and fails).
        self.labels.get(key).map(|v| v.as_str().unwrap_or_default())
    }

    fn invalid(&mut self, key: &str, value: &str, why: &str) {
        let path = FieldPath::root("metadata").child("labels").key(key);
        self.errors.push(FieldError::invalid(&path, value, why));
    }

    fn level(&mut self, key: &str, on_error: Level, slot: &mut Level) {
        if let Some(value) = self.value(key).map(str::to_string) {
            *slot = parse_level(&value).unwrap_or_else(|_| {
                self.invalid(key, &value, LEVEL_ERROR);
                on_error
            });
        }
    }

    fn version(&mut self, key: &str, slot: &mut Version) {
        if let Some(value) = self.value(key).map(str::to_string) {
            *slot = parse_version(&value).unwrap_or_else(|fallback| {
                self.invalid(key, &value, VERSION_ERROR);
                fallback
            });
        }
    }
}

/// Upstream's aggregate of errors as one text: the error alone, or `[e1, e2]`.
pub fn aggregate_errors(errors: &[FieldError]) -> String {
    match errors {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn versions_parse_as_upstream() {
        assert_eq!(parse_version("latest"), Ok(Version::Latest));
        assert_eq!(parse_version("v1.0"), Ok(Version::V1(0)));
        assert_eq!(parse_version("v1.25"), Ok(Version::V1(25)));
        for bad in [
            "", "v1.", "v1.01", "v2.0", "1.25", "v1.x", "v1.-1", "v1.2a", "Latest",
        ] {
            assert_eq!(parse_version(bad), Err(Version::Latest), "{bad}");
        }
        assert_eq!(Version::V1(25).to_string(), "v1.25");
        assert!(Version::V1(25).older(Version::V1(26)));
        assert!(Version::V1(99).older(Version::Latest));
        assert!(!Version::Latest.older(Version::V1(99)));
    }

    #[test]
    fn unlabeled_namespaces_get_the_defaults() {
        let (p, errs) = policy_to_evaluate(None, &Policy::default());
        assert!(errs.is_empty());
        assert!(p.fully_privileged());
        assert_eq!(p.enforce.to_string(), "privileged:latest");
    }

    #[test]
    fn labels_choose_levels_and_versions() {
        let l = labels(json!({
            ENFORCE_LEVEL_LABEL: "baseline",
            ENFORCE_VERSION_LABEL: "v1.22",
            WARN_LEVEL_LABEL: "restricted",
            "unrelated": "x",
        }));
        let (p, errs) = policy_to_evaluate(Some(&l), &Policy::default());
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(p.enforce.to_string(), "baseline:v1.22");
        assert_eq!(p.warn.to_string(), "restricted:latest");
        assert_eq!(p.audit.to_string(), "privileged:latest");
    }

    #[test]
    fn invalid_labels_fail_closed_for_enforce_and_open_for_audit_and_warn() {
        let l = labels(json!({
            ENFORCE_LEVEL_LABEL: "strict",
            ENFORCE_VERSION_LABEL: "v1.x",
            AUDIT_LEVEL_LABEL: "bogus",
            WARN_LEVEL_LABEL: "nope",
        }));
        let (p, errs) = policy_to_evaluate(Some(&l), &Policy::default());
        assert_eq!(
            p.enforce,
            LevelVersion::new(Level::Restricted, Version::Latest)
        );
        assert_eq!(p.audit.level, Level::Privileged);
        assert_eq!(p.warn.level, Level::Privileged);
        let texts: Vec<String> = errs.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            texts,
            [
                r#"metadata.labels[pod-security.kubernetes.io/enforce]: Invalid value: "strict": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "v1.x": must be "latest" or "v1.x""#,
                r#"metadata.labels[pod-security.kubernetes.io/audit]: Invalid value: "bogus": must be one of privileged, baseline, restricted"#,
                r#"metadata.labels[pod-security.kubernetes.io/warn]: Invalid value: "nope": must be one of privileged, baseline, restricted"#,
            ]
        );
        assert!(aggregate_errors(&errs).starts_with("[metadata.labels["));
        assert_eq!(aggregate_errors(&errs[..1]), texts[0]);
    }

    #[test]
    fn equivalence_ignores_versions_of_privileged_modes() {
        let a = Policy::default();
        let mut b = a;
        b.audit.version = Version::V1(20);
        assert!(a.equivalent(&b));
        b.audit.level = Level::Baseline;
        assert!(!a.equivalent(&b));
    }
}
