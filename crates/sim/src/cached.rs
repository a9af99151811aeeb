//! The pod as the simulator caches it: a purpose-made struct of only what [`crate::lifecycle`] and
//! the pod workers read, decoded straight from the API server's JSON.
//!
//! Every bound pod of the cluster sits in the simulator's informer, so the form matters at density
//! (issue 25): a typed `Pod` is 2.4 KB inline before any field and ~25 KB with managedFields; cut
//! down to the read fields by a transform it still held ~9.4 KB, and each event first built the
//! whole typed pod. Decoding into this struct skips every other field as the JSON is read (serde
//! ignores unknown keys without allocating them). kwok keeps whole pods; the simulated kubelet
//! reads a handful of fields.
//!
//! Kept: name, namespace, uid, resourceVersion, deletionTimestamp and the `sim.rkube.io/`
//! annotations; the spec's node name, restart policy, host network, readiness gates and containers'
//! names and images; the status's phase, IPs, start time, conditions and, of each container status,
//! what [`SimStatus::signature`] compares.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::NamespaceResourceScope;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

/// The annotations the simulator reads (its behaviour knobs) start with this.
pub const ANNOTATION_PREFIX: &str = "sim.rkube.io/";

#[derive(Clone, Debug, Default, Deserialize)]
pub struct SimPod {
    #[serde(default, deserialize_with = "slim_meta")]
    pub metadata: ObjectMeta,
    #[serde(default, deserialize_with = "or_default")]
    pub spec: SimSpec,
    #[serde(default, deserialize_with = "or_default")]
    pub status: SimStatus,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimSpec {
    pub node_name: Option<String>,
    pub restart_policy: Option<String>,
    pub host_network: Option<bool>,
    #[serde(default, deserialize_with = "or_default")]
    pub readiness_gates: Vec<ReadinessGate>,
    #[serde(default, deserialize_with = "or_default")]
    pub containers: Vec<SimContainer>,
    #[serde(default, deserialize_with = "or_default")]
    pub init_containers: Vec<SimContainer>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadinessGate {
    #[serde(default)]
    pub condition_type: String,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub struct SimContainer {
    #[serde(default)]
    pub name: String,
    pub image: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimStatus {
    pub phase: Option<String>,
    #[serde(rename = "podIP")]
    pub pod_ip: Option<String>,
    #[serde(rename = "hostIP")]
    pub host_ip: Option<String>,
    pub start_time: Option<Time>,
    #[serde(default, deserialize_with = "or_default")]
    pub conditions: Vec<SimCondition>,
    #[serde(default, deserialize_with = "or_default")]
    pub container_statuses: Vec<SimContainerStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimCondition {
    #[serde(rename = "type", default)]
    pub type_: String,
    #[serde(default)]
    pub status: String,
    pub last_transition_time: Option<Time>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SimContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(default, deserialize_with = "or_default")]
    pub ready: bool,
    #[serde(default, deserialize_with = "or_default")]
    pub restart_count: i32,
    #[serde(default, deserialize_with = "state_kind")]
    pub state: Option<StateKind>,
}

/// Which state a container status reports (its content is not read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateKind {
    Running,
    Terminated,
    Waiting,
}

impl StateKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StateKind::Running => "running",
            StateKind::Terminated => "terminated",
            StateKind::Waiting => "waiting",
        }
    }
}

/// The pod conditions a simulated kubelet owns (the ones [`SimStatus::signature`] compares).
pub const KUBELET_CONDITIONS: [&str; 5] = [
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
];

impl SimStatus {
    /// What distinguishes this reported status from another, timestamps aside: the same value
    /// `lifecycle::signature` gives for the status JSON the simulator writes.
    pub fn signature(&self) -> Value {
        let conditions: Vec<Value> = self
            .conditions
            .iter()
            .filter(|c| KUBELET_CONDITIONS.contains(&c.type_.as_str()))
            .map(|c| json!([c.type_, c.status]))
            .collect();
        let containers: Vec<Value> = self
            .container_statuses
            .iter()
            .map(|c| {
                json!([
                    c.name,
                    c.ready,
                    c.restart_count,
                    c.state.map(StateKind::as_str)
                ])
            })
            .collect();
        json!([
            self.phase,
            self.pod_ip,
            self.host_ip,
            conditions,
            containers
        ])
    }
}

/// A missing or `null` value reads as the default, as k8s-openapi's optional fields do.
fn or_default<'de, D: Deserializer<'de>, T: Deserialize<'de> + Default>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A container state's kind: its first key in sorted order among those present and not null, as
/// the typed status serialized to JSON shows it (`running` < `terminated` < `waiting`).
fn state_kind<'de, D: Deserializer<'de>>(d: D) -> Result<Option<StateKind>, D::Error> {
    #[derive(Deserialize)]
    struct Wire {
        running: Option<IgnoredAny>,
        terminated: Option<IgnoredAny>,
        waiting: Option<IgnoredAny>,
    }
    Ok(Option::<Wire>::deserialize(d)?.and_then(|w| {
        if w.running.is_some() {
            Some(StateKind::Running)
        } else if w.terminated.is_some() {
            Some(StateKind::Terminated)
        } else if w.waiting.is_some() {
            Some(StateKind::Waiting)
        } else {
            None
        }
    }))
}

/// The metadata the simulator reads; labels, owner references, managedFields and other annotations
/// are skipped while decoding.
fn slim_meta<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(Default, Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Wire {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        deletion_timestamp: Option<Time>,
        #[serde(default, deserialize_with = "sim_annotations")]
        annotations: Option<BTreeMap<String, String>>,
    }
    let w = Option::<Wire>::deserialize(d)?.unwrap_or_default();
    Ok(ObjectMeta {
        name: w.name,
        namespace: w.namespace,
        uid: w.uid,
        resource_version: w.resource_version,
        deletion_timestamp: w.deletion_timestamp,
        annotations: w.annotations,
        ..ObjectMeta::default()
    })
}

/// Only the `sim.rkube.io/` annotations, or none.
fn sim_annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let all = Option::<BTreeMap<String, Option<String>>>::deserialize(d)?.unwrap_or_default();
    let ours: BTreeMap<String, String> = all
        .into_iter()
        .filter(|(k, _)| k.starts_with(ANNOTATION_PREFIX))
        .map(|(k, v)| (k, v.unwrap_or_default()))
        .collect();
    Ok((!ours.is_empty()).then_some(ours))
}

/// Lists and watches of `SimPod` are the core `pods` resource's (`Api::<SimPod>::all`).
impl kube::Resource for SimPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Pod")
    }

    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("")
    }

    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1")
    }

    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("pods")
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
