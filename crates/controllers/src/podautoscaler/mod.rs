//! The horizontal pod autoscaler (upstream `pkg/controller/podautoscaler`, autoscaling/v2): every
//! sync period each HPA reads its target's scale subresource (any kind: the group/kind is mapped to
//! a resource by discovery), computes a replica count per metric from the `metrics.k8s.io` resource
//! metrics, normalizes the highest ([`normalize`]: stabilization windows, `behavior` policies,
//! min/max) and writes the scale, then the status and conditions.
//!
//! Files: this one (informers, queue, API calls, conditions), [`replicas`] (the replica calculator,
//! pure), [`normalize`] (behaviour and stabilization, pure), [`metrics`] (the PodMetrics client).
//! Object, Pods and External metrics need the custom/external metrics APIs, which rkube does not
//! serve: such a metric is invalid (`ScalingActive` False, reason `FailedGet<Type>Metric`).

pub mod metrics;
pub mod normalize;
pub mod replicas;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{EventHandlerFuncs, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use jiff::Timestamp;
use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::api::autoscaling::v2::{
    ContainerResourceMetricStatus, HorizontalPodAutoscaler, HorizontalPodAutoscalerCondition,
    HorizontalPodAutoscalerStatus, MetricSpec, MetricStatus, MetricTarget, MetricValueStatus,
    ResourceMetricStatus,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::{Api, Resource};

use normalize::History;
use replicas::{Calculator, Tolerances};

/// The controller's flags (upstream `--horizontal-pod-autoscaler-*`).
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// `--horizontal-pod-autoscaler-sync-period` (15 s).
    pub sync_period: Duration,
    /// `--horizontal-pod-autoscaler-downscale-stabilization` (5 min).
    pub downscale_stabilization: Duration,
    /// `--horizontal-pod-autoscaler-tolerance` (0.1).
    pub tolerance: f64,
    /// `--horizontal-pod-autoscaler-cpu-initialization-period` (5 min).
    pub cpu_initialization_period: Duration,
    /// `--horizontal-pod-autoscaler-initial-readiness-delay` (30 s).
    pub initial_readiness_delay: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            sync_period: Duration::from_secs(15),
            downscale_stabilization: Duration::from_secs(300),
            tolerance: 0.1,
            cpu_initialization_period: Duration::from_secs(300),
            initial_readiness_delay: Duration::from_secs(30),
        }
    }
}

struct Ctx {
    client: kube::Client,
    hpas: Arc<Store<HorizontalPodAutoscaler>>,
    pods: Arc<Store<Pod>>,
    queue: RateLimitingQueue<String>,
    recorder: Recorder,
    options: Options,
    calc: Calculator,
    history: Mutex<HashMap<String, History>>,
    /// Each HPA's target selector as of its last sync (upstream `hpaSelectors`), to refuse pods
    /// that several HPAs select.
    selectors: Mutex<HashMap<String, apimachinery::labels::Selector>>,
    /// (group, kind) -> the resource and when it was looked up; refreshed each sync period as
    /// upstream resets its discovery REST mapper.
    mappings: Mutex<HashMap<(String, String), (ApiResource, Instant)>>,
}

pub async fn run(ctx: &crate::ControllerContext) {
    let options = ctx.options.hpa;
    let hpa_informer = ctx.factory.informer::<HorizontalPodAutoscaler>();
    let pod_informer = ctx.factory.informer::<Pod>();
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(ctx.client.clone()));
    let c = Arc::new(Ctx {
        client: ctx.client.clone(),
        hpas: hpa_informer.store(),
        pods: pod_informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("horizontalpodautoscaler"),
        ),
        recorder: broadcaster.new_recorder("horizontal-pod-autoscaler", ""),
        options,
        calc: Calculator {
            cpu_initialization_period: options.cpu_initialization_period,
            delay_of_initial_readiness_status: options.initial_readiness_delay,
        },
        history: Mutex::new(HashMap::new()),
        selectors: Mutex::new(HashMap::new()),
        mappings: Mutex::new(HashMap::new()),
    });
    let (c1, c2, c3) = (c.clone(), c.clone(), c.clone());
    hpa_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |h: &Arc<HorizontalPodAutoscaler>, _| {
                c1.queue.add(client::informer::object_key(h.as_ref()))
            })
            .on_update(move |_, h: &Arc<HorizontalPodAutoscaler>| {
                // Upstream waits for the next period (a rate-limited add); the loop below keeps
                // every HPA on its period, so a spec change is seen within one.
                c2.queue.add_after(
                    client::informer::object_key(h.as_ref()),
                    c2.options.sync_period,
                )
            })
            .on_delete(move |d| {
                let key = d.key();
                c3.history.lock().expect("history lock").remove(&key);
                c3.selectors.lock().expect("selectors lock").remove(&key);
                c3.queue.forget(&key);
            }),
    );
    ctx.factory.start();
    ctx.factory.wait_for_cache_sync().await;
    let controller = Controller::new("horizontal-pod-autoscaler", c.queue.clone());
    controller
        .run(ctx.workers, move |key: String| {
            let c = c.clone();
            async move {
                let exists = c.hpas.get(&key).is_some();
                let result = reconcile(&c, &key).await;
                if exists {
                    // Every HPA is looked at again after the sync period, whatever happened.
                    c.queue.add_after(key.clone(), c.options.sync_period);
                }
                if let Err(e) = result {
                    tracing::info!(hpa = %key, "horizontal pod autoscaler: {e}");
                }
                Ok::<(), String>(())
            }
        })
        .await;
}

/// Upstream `setConditionInList`: the transition time moves only when the status does.
pub(crate) fn set_condition(
    status: &mut HorizontalPodAutoscalerStatus,
    type_: &str,
    value: bool,
    reason: &str,
    message: String,
) {
    let value = if value { "True" } else { "False" };
    let conditions = status.conditions.get_or_insert_with(Vec::new);
    let i = match conditions.iter().position(|c| c.type_ == type_) {
        Some(i) => i,
        None => {
            conditions.push(HorizontalPodAutoscalerCondition {
                type_: type_.into(),
                ..Default::default()
            });
            conditions.len() - 1
        }
    };
    let c = &mut conditions[i];
    if c.status != value {
        c.last_transition_time = Some(Time(Timestamp::now()));
    }
    c.status = value.into();
    c.reason = Some(reason.into());
    c.message = Some(message);
}

struct Sync<'a> {
    c: &'a Ctx,
    hpa: HorizontalPodAutoscaler,
    key: String,
}

impl Sync<'_> {
    fn status(&mut self) -> &mut HorizontalPodAutoscalerStatus {
        self.hpa.status.get_or_insert_with(Default::default)
    }

    fn condition(&mut self, type_: &str, value: bool, reason: &str, message: String) {
        set_condition(self.status(), type_, value, reason, message);
    }

    fn event(&self, warning: bool, reason: &str, message: &str) {
        let t = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.c
            .recorder
            .event(&self.hpa.object_ref(&()), t, reason, message);
    }

    /// Upstream `getUnableComputeReplicaCountCondition`: an event, and the condition to set if
    /// this metric decides.
    fn unable(&self, reason: &'static str, err: &str) -> (&'static str, String) {
        self.event(true, reason, err);
        (
            reason,
            format!("the HPA was unable to compute the replica count: {err}"),
        )
    }

    fn failed_get_scale(&mut self, err: &str) {
        self.event(true, "FailedGetScale", err);
        self.condition(
            "AbleToScale",
            false,
            "FailedGetScale",
            format!("the HPA controller was unable to get the target's current scale: {err}"),
        );
    }
}

/// The selector's pods in the namespace, from the informer.
fn selected_pods(c: &Ctx, ns: &str, selector: &apimachinery::labels::Selector) -> Vec<Arc<Pod>> {
    c.pods
        .list_namespace(ns)
        .into_iter()
        .filter(|p| {
            let labels: serde_json::Map<String, serde_json::Value> = p
                .metadata
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            selector.matches(&labels)
        })
        .collect()
}

/// Upstream `hpasControllingPodsUnderSelector`: the HPAs (sorted `namespace/name` keys) whose last
/// selector selects one of `pods`, after recording `key`'s own.
fn hpas_selecting(
    c: &Ctx,
    key: &str,
    selector: &apimachinery::labels::Selector,
    pods: &[Arc<Pod>],
) -> Vec<String> {
    let mut selectors = c.selectors.lock().expect("selectors lock");
    selectors.insert(key.to_string(), selector.clone());
    let ns = key.split_once('/').map_or("", |(ns, _)| ns);
    let mut out: Vec<String> = selectors
        .iter()
        .filter(|(k, _)| k.split_once('/').is_some_and(|(n, _)| n == ns))
        .filter(|(_, sel)| {
            pods.iter().any(|p| {
                let labels: serde_json::Map<String, serde_json::Value> = p
                    .metadata
                    .labels
                    .iter()
                    .flatten()
                    .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                    .collect();
                sel.matches(&labels)
            })
        })
        .map(|(k, _)| k.clone())
        .collect();
    out.sort();
    out
}

/// The target's resource: (group, kind) through discovery, cached for a sync period.
async fn mapping(c: &Ctx, api_version: &str, kind: &str) -> Result<ApiResource, String> {
    let group = match api_version.split_once('/') {
        Some((g, _)) => g.to_string(),
        None => String::new(),
    };
    let k = (group.clone(), kind.to_string());
    if let Some((ar, at)) = c.mappings.lock().expect("mappings lock").get(&k) {
        if at.elapsed() < c.options.sync_period {
            return Ok(ar.clone());
        }
    }
    let g = kube::discovery::group(&c.client, &group)
        .await
        .map_err(|e| format!("unable to determine resource for scale target reference: {e}"))?;
    let (ar, _) = g.recommended_kind(kind).ok_or_else(|| {
        format!(
            "unable to determine resource for scale target reference: no matches for kind \"{kind}\" in group \"{group}\""
        )
    })?;
    c.mappings
        .lock()
        .expect("mappings lock")
        .insert(k, (ar.clone(), Instant::now()));
    Ok(ar)
}

fn milli_quantity(v: i64) -> Quantity {
    Quantity(
        apimachinery::quantity::Quantity::from_milli(v, apimachinery::quantity::Format::DecimalSi)
            .to_string(),
    )
}

/// A metric's proposal: (replicas, metric name, status).
type MetricResult = Result<(i32, String, MetricStatus), (&'static str, String)>;

/// Upstream `computeStatusForResourceMetricGeneric` and its callers for Resource and
/// ContainerResource metrics.
#[allow(clippy::too_many_arguments)]
async fn resource_metric(
    s: &Sync<'_>,
    spec_replicas: i32,
    resource: &str,
    container: &str,
    target: &MetricTarget,
    selector: &str,
    pods: &[Arc<Pod>],
    tolerances: Tolerances,
) -> MetricResult {
    let (reason, what) = if container.is_empty() {
        (
            "FailedGetResourceMetric",
            format!("{resource} resource metric"),
        )
    } else {
        (
            "FailedGetContainerResourceMetric",
            format!("{container} container metric"),
        )
    };
    let fail = |e: String| s.unable(reason, &format!("failed to get {what} value: {e}"));
    let ns = s.hpa.metadata.namespace.as_deref().unwrap_or("");
    let refs: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
    let now = Timestamp::now();
    let (replicas, name, current) = if let Some(avg) = &target.average_value {
        let (m, _) = metrics::resource_metric(&s.c.client, resource, ns, selector, container)
            .await
            .map_err(|e| fail(format!("failed to get {resource} usage: unable to get metrics for resource {resource}: {e}")))?;
        let p =
            s.c.calc
                .raw_resource_replicas(
                    spec_replicas,
                    replicas::milli(&avg.0),
                    resource,
                    tolerances,
                    m,
                    &refs,
                    now,
                )
                .map_err(|e| fail(format!("failed to get {resource} usage: {e}")))?;
        let current = MetricValueStatus {
            average_value: Some(milli_quantity(p.raw_average)),
            ..Default::default()
        };
        (p.replicas, format!("{resource} resource"), current)
    } else if let Some(util) = target.average_utilization {
        let (m, _) = metrics::resource_metric(&s.c.client, resource, ns, selector, container)
            .await
            .map_err(|e| fail(format!("failed to get {resource} utilization: unable to get metrics for resource {resource}: {e}")))?;
        let p =
            s.c.calc
                .resource_replicas(
                    spec_replicas,
                    util,
                    resource,
                    container,
                    tolerances,
                    m,
                    &refs,
                    now,
                )
                .map_err(|e| fail(format!("failed to get {resource} utilization: {e}")))?;
        let name = if container.is_empty() {
            format!("{resource} resource utilization (percentage of request)")
        } else {
            format!("{resource} container resource utilization (percentage of request)")
        };
        let current = MetricValueStatus {
            average_utilization: p.utilization,
            average_value: Some(milli_quantity(p.raw_average)),
            ..Default::default()
        };
        (p.replicas, name, current)
    } else {
        return Err(fail(
            "invalid resource metric source: neither an average utilization target nor an average value (usage) target was set".into(),
        ));
    };
    let status = if container.is_empty() {
        MetricStatus {
            type_: "Resource".into(),
            resource: Some(ResourceMetricStatus {
                name: resource.into(),
                current,
            }),
            ..Default::default()
        }
    } else {
        MetricStatus {
            type_: "ContainerResource".into(),
            container_resource: Some(ContainerResourceMetricStatus {
                name: resource.into(),
                container: container.into(),
                current,
            }),
            ..Default::default()
        }
    };
    Ok((replicas, name, status))
}

/// Upstream `computeReplicasForMetric` for one spec.
async fn metric_replicas(
    s: &Sync<'_>,
    spec: &MetricSpec,
    spec_replicas: i32,
    selector: &str,
    pods: &[Arc<Pod>],
    tolerances: Tolerances,
) -> MetricResult {
    // The custom and external metrics APIs are not served by rkube (nor found by discovery here).
    let unserved = |reason, what: String| {
        Err(s.unable(
            reason,
            &format!("{what}: the server could not find the requested resource"),
        ))
    };
    match spec.type_.as_str() {
        "Resource" => match &spec.resource {
            Some(r) => {
                resource_metric(
                    s,
                    spec_replicas,
                    &r.name,
                    "",
                    &r.target,
                    selector,
                    pods,
                    tolerances,
                )
                .await
            }
            None => Err(s.unable(
                "InvalidMetricSourceType",
                "resource metric without a source",
            )),
        },
        "ContainerResource" => match &spec.container_resource {
            Some(r) => {
                resource_metric(
                    s,
                    spec_replicas,
                    &r.name,
                    &r.container,
                    &r.target,
                    selector,
                    pods,
                    tolerances,
                )
                .await
            }
            None => Err(s.unable(
                "InvalidMetricSourceType",
                "container resource metric without a source",
            )),
        },
        "Object" => unserved(
            "FailedGetObjectMetric",
            format!(
                "failed to get object metric value: unable to get metric {}",
                spec.object.as_ref().map_or("", |o| o.metric.name.as_str())
            ),
        ),
        "Pods" => unserved(
            "FailedGetPodsMetric",
            format!(
                "failed to get pods metric value: unable to get metric {}",
                spec.pods.as_ref().map_or("", |p| p.metric.name.as_str())
            ),
        ),
        "External" => {
            let name = spec
                .external
                .as_ref()
                .map_or("", |e| e.metric.name.as_str());
            unserved(
                "FailedGetExternalMetric",
                format!("failed to get {name} external metric value: unable to get external metric {name}"),
            )
        }
        other => Err(s.unable(
            "InvalidMetricSourceType",
            &format!("unknown metric source type {other:?}"),
        )),
    }
}

/// The tolerances of this HPA: `behavior.scale{Up,Down}.tolerance` where set (upstream's
/// configurable tolerance), else the flag.
fn tolerances(hpa: &HorizontalPodAutoscaler, default: f64) -> Tolerances {
    let b = hpa.spec.behavior.as_ref();
    let of = |r: Option<&k8s_openapi::api::autoscaling::v2::HPAScalingRules>| {
        r.and_then(|r| r.tolerance.as_ref())
            .and_then(|q| apimachinery::quantity::Quantity::parse(&q.0).ok())
            .map_or(default, |q| q.as_f64())
    };
    Tolerances {
        scale_down: of(b.and_then(|b| b.scale_down.as_ref())),
        scale_up: of(b.and_then(|b| b.scale_up.as_ref())),
    }
}

mod reconcile;
use reconcile::reconcile;
