//! The scheduler's configuration file (upstream `KubeSchedulerConfiguration`,
//! kubescheduler.config.k8s.io/v1): parsing (unknown fields are errors, as upstream's strict
//! decoding), defaulting (`SetDefaults_KubeSchedulerConfiguration`, including merging each profile's
//! plugin sets into upstream's default multiPoint set) and validation. Client connection settings
//! other than `kubeconfig`, extenders and `delayCacheUntilActive` are not supported.

use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;

pub const API_VERSION: &str = "kubescheduler.config.k8s.io/v1";
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginRef {
    pub name: String,
    #[serde(default)]
    pub weight: Option<i64>,
}

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginSet {
    #[serde(default)]
    pub enabled: Vec<PluginRef>,
    #[serde(default)]
    pub disabled: Vec<PluginRef>,
}

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Plugins {
    #[serde(default)]
    pub pre_enqueue: PluginSet,
    #[serde(default)]
    pub queue_sort: PluginSet,
    #[serde(default)]
    pub pre_filter: PluginSet,
    #[serde(default)]
    pub filter: PluginSet,
    #[serde(default)]
    pub post_filter: PluginSet,
    #[serde(default)]
    pub pre_score: PluginSet,
    #[serde(default)]
    pub score: PluginSet,
    #[serde(default)]
    pub reserve: PluginSet,
    #[serde(default)]
    pub permit: PluginSet,
    #[serde(default)]
    pub pre_bind: PluginSet,
    #[serde(default)]
    pub bind: PluginSet,
    #[serde(default)]
    pub post_bind: PluginSet,
    #[serde(default)]
    pub multi_point: PluginSet,
}

/// The extension points, in upstream's order.
pub const EXTENSION_POINTS: &[&str] = &[
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
];

impl Plugins {
    pub fn point(&self, name: &str) -> &PluginSet {
        match name {
            "preEnqueue" => &self.pre_enqueue,
            "queueSort" => &self.queue_sort,
            "preFilter" => &self.pre_filter,
            "filter" => &self.filter,
            "postFilter" => &self.post_filter,
            "preScore" => &self.pre_score,
            "score" => &self.score,
            "reserve" => &self.reserve,
            "permit" => &self.permit,
            "preBind" => &self.pre_bind,
            "bind" => &self.bind,
            "postBind" => &self.post_bind,
            _ => &self.multi_point,
        }
    }

    fn point_mut(&mut self, name: &str) -> &mut PluginSet {
        match name {
            "preEnqueue" => &mut self.pre_enqueue,
            "queueSort" => &mut self.queue_sort,
            "preFilter" => &mut self.pre_filter,
            "filter" => &mut self.filter,
            "postFilter" => &mut self.post_filter,
            "preScore" => &mut self.pre_score,
            "score" => &mut self.score,
            "reserve" => &mut self.reserve,
            "permit" => &mut self.permit,
            "preBind" => &mut self.pre_bind,
            "bind" => &mut self.bind,
            "postBind" => &mut self.post_bind,
            _ => &mut self.multi_point,
        }
    }
}

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PluginConfig {
    pub name: String,
    #[serde(default)]
    pub args: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Profile {
    #[serde(default)]
    pub scheduler_name: Option<String>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<i64>,
    #[serde(default)]
    pub plugins: Option<Plugins>,
    #[serde(default)]
    pub plugin_config: Vec<PluginConfig>,
}

impl Profile {
    pub fn name(&self) -> &str {
        self.scheduler_name
            .as_deref()
            .unwrap_or(DEFAULT_SCHEDULER_NAME)
    }

    pub fn args(&self, plugin: &str) -> Option<&serde_json::Value> {
        self.plugin_config
            .iter()
            .find(|c| c.name == plugin)
            .and_then(|c| c.args.as_ref())
    }
}

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LeaderElection {
    #[serde(default)]
    pub leader_elect: Option<bool>,
    #[serde(default)]
    pub lease_duration: Option<String>,
    #[serde(default)]
    pub renew_deadline: Option<String>,
    #[serde(default)]
    pub retry_period: Option<String>,
    #[serde(default)]
    pub resource_lock: Option<String>,
    #[serde(default)]
    pub resource_name: Option<String>,
    #[serde(default)]
    pub resource_namespace: Option<String>,
}

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientConnection {
    #[serde(default)]
    pub kubeconfig: Option<String>,
    #[serde(default)]
    pub accept_content_types: Option<String>,
    #[serde(default)]
    pub content_type: Option<String>,
    #[serde(default)]
    pub qps: Option<f64>,
    #[serde(default)]
    pub burst: Option<i64>,
}

#[derive(Clone, Debug, Deserialize, Default, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KubeSchedulerConfiguration {
    #[serde(default)]
    pub api_version: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub parallelism: Option<i64>,
    #[serde(default)]
    pub leader_election: Option<LeaderElection>,
    #[serde(default)]
    pub client_connection: Option<ClientConnection>,
    #[serde(default)]
    pub percentage_of_nodes_to_score: Option<i64>,
    #[serde(default)]
    pub pod_initial_backoff_seconds: Option<i64>,
    #[serde(default)]
    pub pod_max_backoff_seconds: Option<i64>,
    #[serde(default)]
    pub profiles: Vec<Profile>,
    #[serde(default)]
    pub extenders: Vec<serde_json::Value>,
    #[serde(default)]
    pub delay_cache_until_active: Option<bool>,
}

/// Upstream's Go duration strings: "15s", "1m30s", "500ms", "2h".
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let bad = || format!("invalid duration {s:?}");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(bad)?;
        let value: f64 = rest[..n].parse().map_err(|_| bad())?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(bad()),
        };
        total += value * unit;
        rest = &rest[u..];
    }
    Ok(Duration::from_secs_f64(total))
}

impl KubeSchedulerConfiguration {
    /// Parses YAML (or JSON), applies upstream's defaults and validates.
    pub fn parse(text: &str) -> Result<KubeSchedulerConfiguration, String> {
        let mut c: KubeSchedulerConfiguration = serde_yaml_ng::from_str(text)
            .map_err(|e| format!("decoding scheduler configuration: {e}"))?;
        match (c.api_version.as_deref(), c.kind.as_deref()) {
            (Some(API_VERSION), Some("KubeSchedulerConfiguration")) => {}
            (v, k) => {
                return Err(format!(
                    "no kind {:?} is registered for version {:?} (want {API_VERSION}, KubeSchedulerConfiguration)",
                    k.unwrap_or(""),
                    v.unwrap_or("")
                ))
            }
        }
        c.set_defaults();
        c.validate()?;
        Ok(c)
    }

    /// The defaults of a configuration without a file.
    pub fn default_config() -> KubeSchedulerConfiguration {
        let mut c = KubeSchedulerConfiguration {
            api_version: Some(API_VERSION.into()),
            kind: Some("KubeSchedulerConfiguration".into()),
            ..Default::default()
        };
        c.set_defaults();
        c
    }

    fn set_defaults(&mut self) {
        self.parallelism.get_or_insert(16);
        self.pod_initial_backoff_seconds.get_or_insert(1);
        self.pod_max_backoff_seconds.get_or_insert(10);
        if self.profiles.is_empty() {
            self.profiles.push(Profile::default());
        }
        for p in &mut self.profiles {
            p.scheduler_name
                .get_or_insert_with(|| DEFAULT_SCHEDULER_NAME.to_string());
            let custom = p.plugins.take().unwrap_or_default();
            p.plugins = Some(merge_plugins(custom));
        }
    }

    fn validate(&self) -> Result<(), String> {
        let mut errs = Vec::new();
        if let Some(p) = self.parallelism {
            if p <= 0 {
                errs.push(format!(
                    "parallelism: Invalid value: {p}: should be an integer value greater than zero"
                ));
            }
        }
        let pct = |v: Option<i64>, field: &str, errs: &mut Vec<String>| {
            if let Some(v) = v {
                if !(0..=100).contains(&v) {
                    errs.push(format!(
                        "{field}: Invalid value: {v}: not in valid range [0-100]"
                    ));
                }
            }
        };
        pct(
            self.percentage_of_nodes_to_score,
            "percentageOfNodesToScore",
            &mut errs,
        );
        let (init, max) = (
            self.pod_initial_backoff_seconds.unwrap_or(1),
            self.pod_max_backoff_seconds.unwrap_or(10),
        );
        if init <= 0 {
            errs.push(format!(
                "podInitialBackoffSeconds: Invalid value: {init}: must be greater than 0"
            ));
        }
        if max < init {
            errs.push(format!("podMaxBackoffSeconds: Invalid value: {max}: must be greater than or equal to PodInitialBackoffSeconds"));
        }
        if !self.extenders.is_empty() {
            errs.push(
                "extenders: Forbidden: scheduler extenders are not supported by rkube".into(),
            );
        }
        if let Some(le) = &self.leader_election {
            for (f, v) in [
                ("leaseDuration", &le.lease_duration),
                ("renewDeadline", &le.renew_deadline),
                ("retryPeriod", &le.retry_period),
            ] {
                if let Some(v) = v {
                    if let Err(e) = parse_duration(v) {
                        errs.push(format!("leaderElection.{f}: {e}"));
                    }
                }
            }
            if let Some(lock) = &le.resource_lock {
                if lock != "leases" {
                    errs.push(format!("leaderElection.resourceLock: Unsupported value: {lock:?}: supported values: \"leases\""));
                }
            }
        }
        let mut names = HashSet::new();
        let mut queue_sorts = HashSet::new();
        for (i, p) in self.profiles.iter().enumerate() {
            let name = p.name();
            if name.is_empty() {
                errs.push(format!("profiles[{i}].schedulerName: Required value"));
            }
            if !names.insert(name.to_string()) {
                errs.push(format!(
                    "profiles[{i}].schedulerName: Duplicate value: {name:?}"
                ));
            }
            pct(
                p.percentage_of_nodes_to_score,
                &format!("profiles[{i}].percentageOfNodesToScore"),
                &mut errs,
            );
            let mut configs = HashSet::new();
            for c in &p.plugin_config {
                if !configs.insert(c.name.clone()) {
                    errs.push(format!(
                        "profiles[{i}].pluginConfig: Duplicate value: {:?}",
                        c.name
                    ));
                }
            }
            let qs = crate::profile::enabled_at(p, "queueSort").unwrap_or_default();
            queue_sorts.insert(qs.join(","));
        }
        if queue_sorts.len() > 1 {
            errs.push("profiles[1].plugins.queueSort: Invalid value: queueSort must be the same for all profiles".into());
        }
        if errs.is_empty() {
            Ok(())
        } else {
            Err(errs.join("; "))
        }
    }
}

fn default_plugins() -> Plugins {
    Plugins {
        multi_point: PluginSet {
            enabled: crate::plugins::DEFAULT_PLUGINS
                .iter()
                .map(|(n, w)| PluginRef {
                    name: n.to_string(),
                    weight: (*w > 0).then_some(*w),
                })
                .collect(),
            disabled: Vec::new(),
        },
        ..Default::default()
    }
}

/// Upstream v1 `mergePlugins`: per extension point (and multiPoint), the default set minus the
/// disabled plugins (all of them for `*`), custom entries replacing defaults in place, other custom
/// entries appended.
pub fn merge_plugins(custom: Plugins) -> Plugins {
    let defaults = default_plugins();
    let mut out = Plugins::default();
    for point in EXTENSION_POINTS.iter().chain(&["multiPoint"]) {
        let (d, c) = (defaults.point(point), custom.point(point));
        let disabled: HashSet<&str> = c.disabled.iter().map(|p| p.name.as_str()).collect();
        let mut replaced = HashSet::new();
        let mut enabled = Vec::new();
        if !disabled.contains("*") {
            for dp in &d.enabled {
                if disabled.contains(dp.name.as_str()) {
                    continue;
                }
                match c.enabled.iter().position(|p| p.name == dp.name) {
                    Some(i) => {
                        replaced.insert(i);
                        enabled.push(c.enabled[i].clone());
                    }
                    None => enabled.push(dp.clone()),
                }
            }
        }
        for (i, p) in c.enabled.iter().enumerate() {
            if !replaced.contains(&i) {
                enabled.push(p.clone());
            }
        }
        *out.point_mut(point) = PluginSet {
            enabled,
            disabled: c.disabled.clone(),
        };
    }
    out
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
