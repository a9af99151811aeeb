//! The replica calculator for resource metrics (upstream `replica_calculator.go`,
//! `GetResourceReplicas` / `GetRawResourceReplicas` and the metrics client's utilization ratio):
//! pure functions of the pods, their metrics and the clock.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

/// One pod's usage of a resource, in milli-units, and the sample's time and window.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PodMetric {
    pub timestamp: Timestamp,
    pub window: Duration,
    pub value: i64,
}

/// Usage by pod name.
pub type PodMetricsInfo = BTreeMap<String, PodMetric>;

/// Upstream's tolerances: no scaling while the usage ratio is within `[1 - down, 1 + up]`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Tolerances {
    pub scale_down: f64,
    pub scale_up: f64,
}

impl Tolerances {
    pub fn uniform(t: f64) -> Tolerances {
        Tolerances {
            scale_down: t,
            scale_up: t,
        }
    }

    fn is_within(&self, ratio: f64) -> bool {
        (1.0 - self.scale_down) <= ratio && ratio <= (1.0 + self.scale_up)
    }
}

/// The calculator's settings (upstream flags `--horizontal-pod-autoscaler-tolerance`,
/// `-cpu-initialization-period`, `-initial-readiness-delay`).
#[derive(Clone, Copy, Debug)]
pub struct Calculator {
    pub cpu_initialization_period: Duration,
    pub delay_of_initial_readiness_status: Duration,
}

/// What a resource metric proposes.
#[derive(Clone, Debug, PartialEq)]
pub struct Proposal {
    pub replicas: i32,
    /// Percent of the requests (utilization targets only).
    pub utilization: Option<i32>,
    /// Average usage per pod, milli-units.
    pub raw_average: i64,
}

fn pod_ready_condition(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

fn add(t: Timestamp, d: Duration) -> Timestamp {
    t.checked_add(jiff::SignedDuration::try_from(d).unwrap_or(jiff::SignedDuration::MAX))
        .unwrap_or(Timestamp::MAX)
}

/// Upstream `groupPods`: ready pods counted; unready, missing-metric and ignored pods named.
pub(crate) struct Groups {
    pub ready: usize,
    pub unready: BTreeSet<String>,
    pub missing: BTreeSet<String>,
    pub ignored: BTreeSet<String>,
}

pub(crate) fn group_pods(
    pods: &[&Pod],
    metrics: &PodMetricsInfo,
    resource: &str,
    calc: &Calculator,
    now: Timestamp,
) -> Groups {
    let mut g = Groups {
        ready: 0,
        unready: BTreeSet::new(),
        missing: BTreeSet::new(),
        ignored: BTreeSet::new(),
    };
    for pod in pods {
        let n = name(pod);
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        if pod.metadata.deletion_timestamp.is_some() || phase == Some("Failed") {
            g.ignored.insert(n);
            continue;
        }
        if phase == Some("Pending") {
            g.unready.insert(n);
            continue;
        }
        let Some(metric) = metrics.get(&n) else {
            g.missing.insert(n);
            continue;
        };
        if resource == "cpu" {
            let cond = pod_ready_condition(pod);
            let start = pod
                .status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0);
            let unready = match (cond, start) {
                (Some(c), Some(start)) => {
                    let transition = c
                        .last_transition_time
                        .as_ref()
                        .map(|t| t.0)
                        .unwrap_or(Timestamp::UNIX_EPOCH);
                    let not_ready = c.status == "False";
                    if add(start, calc.cpu_initialization_period) > now {
                        // Within the initialization period a sample must be a full window after
                        // the last readiness change (CPU spikes while starting).
                        not_ready || metric.timestamp < add(transition, metric.window)
                    } else {
                        // Later only a pod that never became ready is left out.
                        not_ready && add(start, calc.delay_of_initial_readiness_status) > transition
                    }
                }
                _ => true,
            };
            if unready {
                g.unready.insert(n);
                continue;
            }
        }
        g.ready += 1;
    }
    g
}

/// Errors of a replica calculation; the texts are upstream's.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum CalcError {
    #[error("no pods returned by selector while calculating replica count")]
    NoPods,
    #[error("did not receive metrics for targeted pods (pods might be unready)")]
    NoMetrics,
    #[error("missing request for {resource} in container {container} of Pod {pod}")]
    MissingRequest {
        resource: String,
        container: String,
        pod: String,
    },
    #[error("no metrics returned matched known pods")]
    NoMatchingMetrics,
}

/// Upstream `calculatePodRequests`: each pod's request of `resource` (milli-units), summed over its
/// containers and restartable init containers (or only `container`); pod-level requests when the
/// pod has them and no container is named.
pub(crate) fn pod_requests(
    pods: &[&Pod],
    container: &str,
    resource: &str,
) -> Result<BTreeMap<String, i64>, CalcError> {
    let mut out = BTreeMap::new();
    for pod in pods {
        let Some(spec) = &pod.spec else { continue };
        let pod_level = spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource));
        if let (Some(q), "") = (pod_level, container) {
            out.insert(name(pod), milli(&q.0));
            continue;
        }
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        let mut sum = 0i64;
        for c in spec.containers.iter().chain(sidecars) {
            if !container.is_empty() && container != c.name {
                continue;
            }
            match c
                .resources
                .as_ref()
                .and_then(|r| r.requests.as_ref())
                .and_then(|r| r.get(resource))
            {
                Some(q) => sum = sum.saturating_add(milli(&q.0)),
                None => {
                    return Err(CalcError::MissingRequest {
                        resource: resource.to_string(),
                        container: c.name.clone(),
                        pod: name(pod),
                    })
                }
            }
        }
        out.insert(name(pod), sum);
    }
    Ok(out)
}

pub(crate) fn milli(q: &str) -> i64 {
    apimachinery::quantity::Quantity::parse(q)
        .map(|q| q.milli_value())
        .unwrap_or(0)
}

/// Upstream `GetResourceUtilizationRatio`: (usage ratio, utilization %, average usage).
pub(crate) fn utilization_ratio(
    metrics: &PodMetricsInfo,
    requests: &BTreeMap<String, i64>,
    target_utilization: i32,
) -> Result<(f64, i32, i64), CalcError> {
    let (mut total, mut requested, mut n) = (0i64, 0i64, 0i64);
    for (pod, m) in metrics {
        // Metrics of pods without requests are extraneous (missing requests are checked elsewhere).
        let Some(r) = requests.get(pod) else { continue };
        total = total.saturating_add(m.value);
        requested = requested.saturating_add(*r);
        n += 1;
    }
    if requested == 0 {
        return Err(CalcError::NoMatchingMetrics);
    }
    let utilization = (total.saturating_mul(100) / requested).clamp(0, i32::MAX.into()) as i32;
    Ok((
        f64::from(utilization) / f64::from(target_utilization.max(1)),
        utilization,
        total / n.max(1),
    ))
}

impl Calculator {
    /// Upstream `GetResourceReplicas`: replicas for a utilization target (percent of requests).
    #[allow(clippy::too_many_arguments)]
    pub fn resource_replicas(
        &self,
        current_replicas: i32,
        target_utilization: i32,
        resource: &str,
        container: &str,
        tolerances: Tolerances,
        mut metrics: PodMetricsInfo,
        pods: &[&Pod],
        now: Timestamp,
    ) -> Result<Proposal, CalcError> {
        if pods.is_empty() {
            return Err(CalcError::NoPods);
        }
        let g = group_pods(pods, &metrics, resource, self, now);
        for p in g.ignored.iter().chain(&g.unready) {
            metrics.remove(p);
        }
        if metrics.is_empty() {
            return Err(CalcError::NoMetrics);
        }
        let requests = pod_requests(pods, container, resource)?;
        let (ratio, utilization, raw) = utilization_ratio(&metrics, &requests, target_utilization)?;
        let proposal = |replicas| Proposal {
            replicas,
            utilization: Some(utilization),
            raw_average: raw,
        };
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if tolerances.is_within(ratio) {
                return Ok(proposal(current_replicas));
            }
            return Ok(proposal((ratio * g.ready as f64).ceil() as i32));
        }
        let filler = |value| PodMetric {
            timestamp: now,
            window: Duration::ZERO,
            value,
        };
        if ratio < 1.0 {
            // Scale down: pods without metrics count as using all they requested.
            for p in &g.missing {
                metrics.insert(p.clone(), filler(*requests.get(p).unwrap_or(&0)));
            }
        } else if ratio > 1.0 {
            // Scale up: as using nothing.
            for p in &g.missing {
                metrics.insert(p.clone(), filler(0));
            }
        }
        if scale_up_with_unready {
            for p in &g.unready {
                metrics.insert(p.clone(), filler(0));
            }
        }
        let (new_ratio, _, _) = utilization_ratio(&metrics, &requests, target_utilization)?;
        Ok(proposal(rebalanced(
            current_replicas,
            ratio,
            new_ratio,
            metrics.len(),
            tolerances,
        )))
    }

    /// Upstream `GetRawResourceReplicas` (through `calcPlainMetricReplicas`): replicas for an
    /// average-value target (milli-units per pod).
    #[allow(clippy::too_many_arguments)]
    pub fn raw_resource_replicas(
        &self,
        current_replicas: i32,
        target_average: i64,
        resource: &str,
        tolerances: Tolerances,
        mut metrics: PodMetricsInfo,
        pods: &[&Pod],
        now: Timestamp,
    ) -> Result<Proposal, CalcError> {
        if pods.is_empty() {
            return Err(CalcError::NoPods);
        }
        let g = group_pods(pods, &metrics, resource, self, now);
        for p in g.ignored.iter().chain(&g.unready) {
            metrics.remove(p);
        }
        if metrics.is_empty() {
            return Err(CalcError::NoMetrics);
        }
        let ratio_of = |m: &PodMetricsInfo| {
            let total: i64 = m.values().map(|v| v.value).sum();
            let avg = total / m.len().max(1) as i64;
            (avg as f64 / target_average.max(1) as f64, avg)
        };
        let (ratio, raw) = ratio_of(&metrics);
        let proposal = |replicas| Proposal {
            replicas,
            utilization: None,
            raw_average: raw,
        };
        let scale_up_with_unready = !g.unready.is_empty() && ratio > 1.0;
        if !scale_up_with_unready && g.missing.is_empty() {
            if tolerances.is_within(ratio) {
                return Ok(proposal(current_replicas));
            }
            return Ok(proposal((ratio * g.ready as f64).ceil() as i32));
        }
        let filler = |value| PodMetric {
            timestamp: now,
            window: Duration::ZERO,
            value,
        };
        for p in &g.missing {
            // Scale down: at the target; scale up: nothing.
            let v = if ratio < 1.0 { target_average } else { 0 };
            metrics.insert(p.clone(), filler(v));
        }
        if scale_up_with_unready {
            for p in &g.unready {
                metrics.insert(p.clone(), filler(0));
            }
        }
        let (new_ratio, _) = ratio_of(&metrics);
        Ok(proposal(rebalanced(
            current_replicas,
            ratio,
            new_ratio,
            metrics.len(),
            tolerances,
        )))
    }
}

/// The second pass of upstream's calculation, with missing and unready pods filled in: no change
/// within the tolerance or when the filling flips the direction of the change.
fn rebalanced(
    current: i32,
    ratio: f64,
    new_ratio: f64,
    counted: usize,
    tolerances: Tolerances,
) -> i32 {
    if tolerances.is_within(new_ratio)
        || (ratio < 1.0 && new_ratio > 1.0)
        || (ratio > 1.0 && new_ratio < 1.0)
    {
        return current;
    }
    let replicas = (new_ratio * counted as f64).ceil() as i32;
    if (new_ratio < 1.0 && replicas > current) || (new_ratio > 1.0 && replicas < current) {
        return current;
    }
    replicas
}

#[cfg(test)]
#[path = "replicas_tests.rs"]
mod tests;
