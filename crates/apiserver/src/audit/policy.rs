//! The audit policy (upstream `audit.k8s.io/v1` `Policy`, read by `--audit-policy-file`, and
//! `k8s.io/apiserver/pkg/audit/policy/checker.go`): an ordered list of rules, the first rule that
//! matches a request decides its level and the stages left out; no match means level `None`.

use serde::Deserialize;

use crate::authn::UserInfo;

/// How much of a request is recorded, in increasing order.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Deserialize, serde::Serialize,
)]
pub enum Level {
    /// Not audited.
    #[default]
    None,
    /// User, verb, resource, timestamps and response code; no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, request and response bodies.
    RequestResponse,
}

/// The points of a request's life an event is written at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum Stage {
    /// As soon as the request is authenticated, before anything else is done with it.
    #[default]
    RequestReceived,
    /// Once the response headers are sent, for long-running requests (watch, exec, logs) only.
    ResponseStarted,
    /// Once the response is done.
    ResponseComplete,
    /// When the handler panicked.
    Panic,
}

impl Stage {
    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of stages (a bitset: the decision for a request is copied, never allocated).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stages(u8);

impl Stages {
    pub fn of(stages: &[Stage]) -> Stages {
        Stages(stages.iter().fold(0, |bits, s| bits | s.bit()))
    }

    pub fn contains(self, stage: Stage) -> bool {
        self.0 & stage.bit() != 0
    }

    fn union(self, other: Stages) -> Stages {
        Stages(self.0 | other.0)
    }
}

/// What the policy decided for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Decision {
    pub level: Level,
    pub omit_stages: Stages,
    pub omit_managed_fields: bool,
}

/// What the policy looks at (upstream's authorizer attributes as the checker reads them).
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    /// None when authentication failed: rules naming users or groups never match then.
    pub user: Option<&'a UserInfo>,
    pub verb: &'a str,
    /// The resource a resource request names; None for non-resource requests.
    pub resource: Option<ResourceAttributes<'a>>,
    /// The URL path (non-resource requests are matched on it).
    pub path: &'a str,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ResourceAttributes<'a> {
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// Empty for cluster-scoped resources (a rule's `namespaces: [""]` matches them).
    pub namespace: &'a str,
    pub name: &'a str,
}

/// A parsed, validated policy.
#[derive(Clone, Debug)]
pub struct Policy {
    rules: Vec<Rule>,
    omit_stages: Stages,
    omit_managed_fields: bool,
}

#[derive(Clone, Debug)]
struct Rule {
    level: Level,
    users: Vec<String>,
    user_groups: Vec<String>,
    verbs: Vec<String>,
    resources: Vec<GroupResources>,
    namespaces: Vec<String>,
    non_resource_urls: Vec<String>,
    /// The rule's own stages united with the policy's, as upstream's NewChecker does.
    omit_stages: Stages,
    /// The rule's setting, else the policy's.
    omit_managed_fields: bool,
}

/// The file's shape (unknown fields are ignored, as upstream's lenient decoding does).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PolicyFile {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    rules: Vec<RuleFile>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    #[serde(default)]
    omit_managed_fields: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RuleFile {
    level: Level,
    #[serde(default)]
    users: Vec<String>,
    #[serde(default)]
    user_groups: Vec<String>,
    #[serde(default)]
    verbs: Vec<String>,
    #[serde(default)]
    resources: Vec<GroupResources>,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default, rename = "nonResourceURLs")]
    non_resource_urls: Vec<String>,
    #[serde(default)]
    omit_stages: Vec<Stage>,
    omit_managed_fields: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct GroupResources {
    #[serde(default)]
    group: String,
    #[serde(default)]
    resources: Vec<String>,
    #[serde(default)]
    resource_names: Vec<String>,
}

impl Policy {
    /// Reads `--audit-policy-file`.
    pub fn load(path: &std::path::Path) -> Result<Policy, String> {
        let bytes = std::fs::read(path)
            .map_err(|e| format!("--audit-policy-file {}: {e}", path.display()))?;
        Policy::parse(&bytes).map_err(|e| format!("--audit-policy-file {}: {e}", path.display()))
    }

    /// Parses a policy in YAML or JSON (JSON is YAML) and validates it as upstream's
    /// `ValidatePolicy` does.
    pub fn parse(bytes: &[u8]) -> Result<Policy, String> {
        let file: PolicyFile =
            serde_yaml_ng::from_slice(bytes).map_err(|e| format!("failed decoding: {e}"))?;
        if file.api_version != "audit.k8s.io/v1" || file.kind != "Policy" {
            return Err(format!(
                "unknown group version field {:?} kind {:?} in policy (want audit.k8s.io/v1 Policy)",
                file.api_version, file.kind
            ));
        }
        if file.rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        let mut errors = Vec::new();
        for (i, rule) in file.rules.iter().enumerate() {
            validate_rule(rule, i, &mut errors);
        }
        if !errors.is_empty() {
            return Err(errors.join(", "));
        }
        let omit_stages = Stages::of(&file.omit_stages);
        let rules = file
            .rules
            .into_iter()
            .map(|r| Rule {
                level: r.level,
                users: r.users,
                user_groups: r.user_groups,
                verbs: r.verbs,
                resources: r.resources,
                namespaces: r.namespaces,
                non_resource_urls: r.non_resource_urls,
                omit_stages: Stages::of(&r.omit_stages).union(omit_stages),
                omit_managed_fields: r.omit_managed_fields.unwrap_or(file.omit_managed_fields),
            })
            .collect();
        Ok(Policy {
            rules,
            omit_stages,
            omit_managed_fields: file.omit_managed_fields,
        })
    }

    /// The first matching rule's level and stages; level None when none matches.
    pub fn decide(&self, attrs: &Attributes<'_>) -> Decision {
        match self.rules.iter().find(|r| r.matches(attrs)) {
            Some(rule) => Decision {
                level: rule.level,
                omit_stages: rule.omit_stages,
                omit_managed_fields: rule.omit_managed_fields,
            },
            None => Decision {
                level: Level::None,
                omit_stages: self.omit_stages,
                omit_managed_fields: self.omit_managed_fields,
            },
        }
    }
}

fn validate_rule(rule: &RuleFile, i: usize, errors: &mut Vec<String>) {
    let path = format!("rules[{i}]");
    if !rule.non_resource_urls.is_empty()
        && (!rule.resources.is_empty() || !rule.namespaces.is_empty())
    {
        errors.push(format!(
            "{path}.nonResourceURLs: Invalid value: {:?}: rules cannot apply to both regular resources and non-resource URLs",
            rule.non_resource_urls
        ));
    }
    for (j, url) in rule.non_resource_urls.iter().enumerate() {
        if url == "*" {
            continue;
        }
        if !url.starts_with('/') {
            errors.push(format!(
                "{path}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL rules must begin with a '/' character"
            ));
        }
        if url.chars().rev().skip(1).any(|c| c == '*') {
            errors.push(format!(
                "{path}.nonResourceURLs[{j}]: Invalid value: {url:?}: non-resource URL wildcards '*' must be the final character of the rule"
            ));
        }
    }
    for (j, gr) in rule.resources.iter().enumerate() {
        if !gr.group.is_empty() && !is_dns_subdomain(&gr.group) {
            errors.push(format!(
                "{path}.resources[{j}].group: Invalid value: {:?}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.'",
                gr.group
            ));
        }
        if !gr.resource_names.is_empty() && gr.resources.is_empty() {
            errors.push(format!(
                "{path}.resources[{j}].resourceNames: Invalid value: {:?}: using resourceNames requires at least one resource",
                gr.resource_names
            ));
        }
    }
}

fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253
        && s.split('.').all(|label| {
            !label.is_empty()
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

fn has(list: &[String], value: &str) -> bool {
    list.iter().any(|s| s == value)
}

impl Rule {
    fn matches(&self, attrs: &Attributes<'_>) -> bool {
        if !self.users.is_empty() && !attrs.user.is_some_and(|u| has(&self.users, &u.name)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !attrs
                .user
                .is_some_and(|u| u.groups.iter().any(|g| has(&self.user_groups, g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !has(&self.verbs, attrs.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return attrs.resource.is_some_and(|r| self.matches_resource(&r));
        }
        if !self.non_resource_urls.is_empty() {
            return attrs.resource.is_none()
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(attrs.path, spec));
        }
        true
    }

    fn matches_resource(&self, r: &ResourceAttributes<'_>) -> bool {
        if !self.namespaces.is_empty() && !has(&self.namespaces, r.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        self.resources
            .iter()
            .filter(|gr| gr.group == r.group)
            .any(|gr| {
                gr.resources.is_empty()
                    || gr.resources.iter().any(|spec| {
                        (gr.resource_names.is_empty() || has(&gr.resource_names, r.name))
                            && resource_matches(spec, r.resource, r.subresource)
                    })
            })
    }
}

/// `*` (everything, subresources included), `pods` (the resource alone), `pods/log`, `*/log` (that
/// subresource of any resource) and `pods/*` (the resource and all its subresources).
fn resource_matches(spec: &str, resource: &str, subresource: &str) -> bool {
    if spec == "*" {
        return true;
    }
    let exact = match spec.split_once('/') {
        None => subresource.is_empty() && spec == resource,
        Some((res, sub)) => !subresource.is_empty() && res == resource && sub == subresource,
    };
    exact
        || (!subresource.is_empty() && spec.strip_prefix("*/") == Some(subresource))
        || spec.strip_suffix("/*") == Some(resource)
}

/// `*`, an exact path, or a prefix ending in `*` (upstream's `pathMatches`).
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

#[cfg(test)]
#[path = "policy_tests.rs"]
mod tests;
