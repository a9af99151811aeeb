//! The resources new in rkube's Kubernetes 1.36 API: where they are served, a valid object of each
//! (as a driver, the scheduler or an administrator would write it), a valid status for those with a
//! status subresource, and the check of their protobuf form against upstream's messages (k8s-pb,
//! prost code generated from upstream's `generated.proto`, independent of the server's codec).

use k8s_pb::api::admissionregistration::v1beta1 as admission_v1beta1;
use k8s_pb::api::flowcontrol::v1 as flowcontrol;
use k8s_pb::api::networking::v1 as networking;
use k8s_pb::api::resource::v1 as resource;
use k8s_pb::api::storage::v1 as storage;
use k8s_pb::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
use prost::Message;
use serde::Serialize;
use serde_json::{json, Value};

/// A [`TypedCheck`] through upstream's message `$ty`: metadata plus the checks of `$body`.
macro_rules! typed {
    ($ty:ty, |$m:ident, $j:ident| $body:block) => {
        |raw: &[u8], $j: &Value| -> Result<(), String> {
            let $m: $ty = decode::<$ty>(raw)?;
            let meta = $m.metadata.clone().unwrap_or_default();
            same("metadata.name", &meta.name, &$j["metadata"]["name"])?;
            same("metadata.labels", &meta.labels, &$j["metadata"]["labels"])?;
            same(
                "metadata.uid",
                meta.uid.filter(|s| !s.is_empty()),
                &$j["metadata"]["uid"],
            )?;
            same(
                "metadata.resourceVersion",
                meta.resource_version.filter(|s| !s.is_empty()),
                &$j["metadata"]["resourceVersion"],
            )?;
            $body
        }
    };
}

/// The conditions of a status read through upstream's message, in the shape of [`conditions_of`].
macro_rules! conditions {
    ($conditions:expr) => {
        $conditions
            .iter()
            .map(|c| {
                json!({"type": c.r#type, "status": c.status, "reason": c.reason, "message": c.message,
                    "t": c.last_transition_time.unwrap_or_default().seconds})
            })
            .collect::<Vec<Value>>()
    };
}

/// A time every status below carries (conditions need one).
pub const TRANSITION: &str = "2026-01-02T03:04:05Z";
/// The message of every condition this test writes, so that a condition a controller of the server
/// writes is never mistaken for ours.
pub const MARK: &str = "written by the api_1_36 test";
/// The PriorityLevelConfiguration the FlowSchemas reference, the DeviceClass the claims request, the
/// MutatingAdmissionPolicy the bindings name: created before the CRUD checks, deleted after.
pub const PLC_FIXTURE: &str = "api-1-36-workload";
pub const DEVICE_CLASS_FIXTURE: &str = "gpu.example.com";
pub const MAP_FIXTURE: &str = "api-1-36-label-widgets";

/// Checks an enveloped object's message with upstream's message type: it decodes, re-encodes to the
/// same bytes (every field the server wrote is a field of upstream's message, with upstream's wire
/// type, written in upstream's order), and the fields read through upstream's message equal the JSON
/// form (`json`) of the same object.
pub type TypedCheck = fn(raw: &[u8], json: &Value) -> Result<(), String>;

pub struct StatusCase {
    /// A valid status, as the component owning it writes it.
    pub status: fn() -> Value,
    /// A change of the spec (a JSON merge patch of the whole object) that a write of the status
    /// subresource must ignore.
    pub spec_change: fn() -> Value,
}

pub struct Kind {
    pub group: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// The start of object names (see `name`).
    pub base: &'static str,
    pub object: fn(name: &str, index: u8) -> Value,
    pub status: Option<StatusCase>,
    pub typed: TypedCheck,
    pub typed_list: fn(raw: &[u8]) -> Result<(), String>,
}

impl Kind {
    pub fn api_version(&self) -> String {
        format!("{}/v1", self.group)
    }

    pub fn collection(&self) -> String {
        if self.namespaced {
            format!("/apis/{}/v1/namespaces/default/{}", self.group, self.plural)
        } else {
            format!("/apis/{}/v1/{}", self.group, self.plural)
        }
    }

    /// The name of object `n` (1 or 2) of the checks in format number `format` (1 to 3): names are
    /// IP addresses for IPAddresses and `<version>.<group>` for APIServices, as validation requires.
    pub fn name(&self, format: &str, format_index: u8, n: u8) -> String {
        match self.plural {
            "ipaddresses" => format!("10.100.0.{}", format_index * 10 + n),
            "apiservices" => format!("v1alpha1.{format}-{n}.example.com"),
            _ => format!("{}-{format}-{n}", self.base),
        }
    }
}

fn labels() -> Value {
    json!({})
}

fn meta(name: &str, namespaced: bool) -> Value {
    let mut m = json!({"name": name, "labels": labels()});
    if namespaced {
        m["namespace"] = json!("default");
    }
    m
}

fn condition(kind: &str, status: &str, reason: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": MARK, "lastTransitionTime": TRANSITION})
}

fn claim_spec() -> Value {
    json!({"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS_FIXTURE}}]}})
}

pub fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            group: "resource.k8s.io",
            kind: "DeviceClass",
            plural: "deviceclasses",
            namespaced: false,
            base: "gpu-class",
            object: |name, _| {
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta(name, false),
                    "spec": {"selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]}})
            },
            status: None,
            typed: typed!(resource::DeviceClass, |m, j| {
                let spec = m.spec.unwrap_or_default();
                let cel = spec
                    .selectors
                    .first()
                    .and_then(|s| s.cel.clone())
                    .unwrap_or_default();
                same(
                    "spec.selectors[0].cel.expression",
                    cel.expression,
                    &j["spec"]["selectors"][0]["cel"]["expression"],
                )
            }),
            typed_list: roundtrip::<resource::DeviceClassList>,
        },
        Kind {
            group: "resource.k8s.io",
            kind: "ResourceClaim",
            plural: "resourceclaims",
            namespaced: true,
            base: "gpu-claim",
            object: |name, _| json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": meta(name, true), "spec": claim_spec()}),
            status: Some(StatusCase {
                // What the scheduler writes when it allocates the claim to a pod on node-1.
                status: || {
                    json!({
                        "allocation": {
                            "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "node-1", "device": "gpu-0"}]},
                            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]},
                        },
                        "reservedFor": [{"resource": "pods", "name": "trainer", "uid": "6f1c8a9e-5a3b-4c1d-9e2f-0123456789ab"}],
                    })
                },
                spec_change: || json!({"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS_FIXTURE, "count": 2}}]}}}),
            }),
            typed: typed!(resource::ResourceClaim, |m, j| {
                let request = m
                    .spec
                    .unwrap_or_default()
                    .devices
                    .unwrap_or_default()
                    .requests
                    .first()
                    .cloned()
                    .unwrap_or_default();
                let want = &j["spec"]["devices"]["requests"][0];
                same("spec.devices.requests[0].name", request.name, &want["name"])?;
                let exactly = request.exactly.unwrap_or_default();
                same(
                    "...exactly.deviceClassName",
                    exactly.device_class_name,
                    &want["exactly"]["deviceClassName"],
                )?;
                same(
                    "...exactly.allocationMode",
                    exactly.allocation_mode,
                    &want["exactly"]["allocationMode"],
                )?;
                same("...exactly.count", exactly.count, &want["exactly"]["count"])?;
                let status = m.status.unwrap_or_default();
                let results = status
                    .allocation
                    .clone()
                    .unwrap_or_default()
                    .devices
                    .unwrap_or_default()
                    .results;
                let want_results = j["status"]["allocation"]["devices"]["results"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                same(
                    "status.allocation.devices.results (count)",
                    results.len(),
                    &json!(want_results.len()),
                )?;
                for (got, want) in results.iter().zip(&want_results) {
                    same("status...results[].device", &got.device, &want["device"])?;
                    same("status...results[].pool", &got.pool, &want["pool"])?;
                    same("status...results[].driver", &got.driver, &want["driver"])?;
                }
                let reserved: Vec<_> = status.reserved_for.iter().map(|r| r.name.clone()).collect();
                let want: Vec<Value> = j["status"]["reservedFor"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|r| r["name"].clone())
                    .collect();
                same("status.reservedFor[].name", reserved, &json!(want))
            }),
            typed_list: roundtrip::<resource::ResourceClaimList>,
        },
        Kind {
            group: "resource.k8s.io",
            kind: "ResourceClaimTemplate",
            plural: "resourceclaimtemplates",
            namespaced: true,
            base: "gpu-template",
            object: |name, _| {
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": meta(name, true),
                    "spec": {"metadata": {"labels": {"team": "ml"}}, "spec": claim_spec()}})
            },
            status: None,
            typed: typed!(resource::ResourceClaimTemplate, |m, j| {
                let spec = m.spec.unwrap_or_default();
                let labels = spec.metadata.unwrap_or_default().labels;
                same(
                    "spec.metadata.labels",
                    labels,
                    &j["spec"]["metadata"]["labels"],
                )?;
                let request = spec
                    .spec
                    .unwrap_or_default()
                    .devices
                    .unwrap_or_default()
                    .requests
                    .first()
                    .cloned()
                    .unwrap_or_default();
                same(
                    "spec.spec.devices.requests[0].exactly.deviceClassName",
                    request.exactly.unwrap_or_default().device_class_name,
                    &j["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
                )
            }),
            typed_list: roundtrip::<resource::ResourceClaimTemplateList>,
        },
        Kind {
            group: "resource.k8s.io",
            kind: "ResourceSlice",
            plural: "resourceslices",
            namespaced: false,
            base: "node-1-gpu",
            // As a DRA driver publishes the devices of one node: one pool of one slice, two GPUs.
            object: |name, _| {
                let device = |n: u8| {
                    json!({"name": format!("gpu-{n}"),
                    "attributes": {"model": {"string": "A100"}, "index": {"int": n}, "driverVersion": {"version": "1.2.3"}},
                    "capacity": {"memory": {"value": "40Gi"}}})
                };
                json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": meta(name, false),
                    "spec": {"driver": "gpu.example.com", "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                        "nodeName": "node-1", "devices": [device(0), device(1)]}})
            },
            status: None,
            typed: typed!(resource::ResourceSlice, |m, j| {
                let spec = m.spec.unwrap_or_default();
                let want = &j["spec"];
                same("spec.driver", spec.driver, &want["driver"])?;
                same("spec.nodeName", spec.node_name, &want["nodeName"])?;
                let pool = spec.pool.unwrap_or_default();
                same("spec.pool.name", pool.name, &want["pool"]["name"])?;
                same(
                    "spec.pool.generation",
                    pool.generation,
                    &want["pool"]["generation"],
                )?;
                same(
                    "spec.pool.resourceSliceCount",
                    pool.resource_slice_count,
                    &want["pool"]["resourceSliceCount"],
                )?;
                same(
                    "spec.devices (count)",
                    spec.devices.len(),
                    &json!(want["devices"].as_array().map_or(0, Vec::len)),
                )?;
                for (got, want) in spec
                    .devices
                    .iter()
                    .zip(want["devices"].as_array().cloned().unwrap_or_default())
                {
                    same("spec.devices[].name", &got.name, &want["name"])?;
                    let attribute =
                        |key: &str| got.attributes.get(key).cloned().unwrap_or_default();
                    same(
                        "spec.devices[].attributes.model.string",
                        attribute("model").string,
                        &want["attributes"]["model"]["string"],
                    )?;
                    same(
                        "spec.devices[].attributes.index.int",
                        attribute("index").int,
                        &want["attributes"]["index"]["int"],
                    )?;
                    same(
                        "spec.devices[].attributes.driverVersion.version",
                        attribute("driverVersion").version,
                        &want["attributes"]["driverVersion"]["version"],
                    )?;
                    let memory = got
                        .capacity
                        .get("memory")
                        .cloned()
                        .unwrap_or_default()
                        .value
                        .unwrap_or_default()
                        .string;
                    same(
                        "spec.devices[].capacity.memory.value",
                        memory,
                        &want["capacity"]["memory"]["value"],
                    )?;
                }
                Ok(())
            }),
            typed_list: roundtrip::<resource::ResourceSliceList>,
        },
        Kind {
            group: "networking.k8s.io",
            kind: "ServiceCIDR",
            plural: "servicecidrs",
            namespaced: false,
            base: "extra-cidr",
            object: |name, index| {
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "ServiceCIDR", "metadata": meta(name, false),
                    "spec": {"cidrs": [format!("10.100.{index}.0/24")]}})
            },
            status: Some(StatusCase {
                status: || json!({"conditions": [condition("Ready", "True", "TestReady")]}),
                spec_change: || json!({"spec": {"cidrs": ["10.200.0.0/24"]}}),
            }),
            typed: typed!(networking::ServiceCIDR, |m, j| {
                same(
                    "spec.cidrs",
                    m.spec.unwrap_or_default().cidrs,
                    &j["spec"]["cidrs"],
                )?;
                same(
                    "status.conditions",
                    conditions!(m.status.unwrap_or_default().conditions),
                    &conditions_of(j),
                )
            }),
            typed_list: roundtrip::<networking::ServiceCIDRList>,
        },
        Kind {
            group: "networking.k8s.io",
            kind: "IPAddress",
            plural: "ipaddresses",
            namespaced: false,
            base: "",
            object: |name, _| {
                json!({"apiVersion": "networking.k8s.io/v1", "kind": "IPAddress", "metadata": meta(name, false),
                    "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "default", "name": "x"}}})
            },
            status: None,
            typed: typed!(networking::IPAddress, |m, j| {
                let parent = m.spec.unwrap_or_default().parent_ref.unwrap_or_default();
                let want = &j["spec"]["parentRef"];
                same(
                    "spec.parentRef.group",
                    parent.group.filter(|g| !g.is_empty()),
                    &want
                        .get("group")
                        .cloned()
                        .filter(|g| g != "")
                        .unwrap_or(Value::Null),
                )?;
                same(
                    "spec.parentRef.resource",
                    parent.resource,
                    &want["resource"],
                )?;
                same(
                    "spec.parentRef.namespace",
                    parent.namespace,
                    &want["namespace"],
                )?;
                same("spec.parentRef.name", parent.name, &want["name"])
            }),
            typed_list: roundtrip::<networking::IPAddressList>,
        },
        Kind {
            group: "admissionregistration.k8s.io",
            kind: "MutatingAdmissionPolicy",
            plural: "mutatingadmissionpolicies",
            namespaced: false,
            base: "label-widgets",
            object: |name, _| mutating_admission_policy(name),
            status: None,
            // Not in k8s-pb 0.9 at v1: v1beta1's message, whose fields and tags are v1's.
            typed: typed!(admission_v1beta1::MutatingAdmissionPolicy, |m, j| {
                let spec = m.spec.unwrap_or_default();
                let want = &j["spec"];
                same(
                    "spec.failurePolicy",
                    spec.failure_policy,
                    &want["failurePolicy"],
                )?;
                same(
                    "spec.reinvocationPolicy",
                    spec.reinvocation_policy,
                    &want["reinvocationPolicy"],
                )?;
                let mutation = spec.mutations.first().cloned().unwrap_or_default();
                same(
                    "spec.mutations[0].patchType",
                    mutation.patch_type,
                    &want["mutations"][0]["patchType"],
                )?;
                same(
                    "spec.mutations[0].applyConfiguration.expression",
                    mutation.apply_configuration.unwrap_or_default().expression,
                    &want["mutations"][0]["applyConfiguration"]["expression"],
                )?;
                let rule = spec
                    .match_constraints
                    .unwrap_or_default()
                    .resource_rules
                    .first()
                    .cloned()
                    .unwrap_or_default();
                let rule = rule.rule_with_operations.unwrap_or_default();
                same(
                    "spec.matchConstraints.resourceRules[0].operations",
                    rule.operations,
                    &want["matchConstraints"]["resourceRules"][0]["operations"],
                )?;
                let rule = rule.rule.unwrap_or_default();
                same(
                    "spec.matchConstraints.resourceRules[0].resources",
                    rule.resources,
                    &want["matchConstraints"]["resourceRules"][0]["resources"],
                )
            }),
            typed_list: roundtrip::<admission_v1beta1::MutatingAdmissionPolicyList>,
        },
        Kind {
            group: "admissionregistration.k8s.io",
            kind: "MutatingAdmissionPolicyBinding",
            plural: "mutatingadmissionpolicybindings",
            namespaced: false,
            base: "label-widgets-binding",
            object: |name, _| {
                json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicyBinding", "metadata": meta(name, false),
                    "spec": {"policyName": MAP_FIXTURE, "matchResources": {"namespaceSelector": {"matchLabels": {"widgets": "enabled"}}}}})
            },
            status: None,
            typed: typed!(admission_v1beta1::MutatingAdmissionPolicyBinding, |m, j| {
                let spec = m.spec.unwrap_or_default();
                same(
                    "spec.policyName",
                    spec.policy_name,
                    &j["spec"]["policyName"],
                )?;
                let selector = spec
                    .match_resources
                    .unwrap_or_default()
                    .namespace_selector
                    .unwrap_or_default();
                same(
                    "spec.matchResources.namespaceSelector.matchLabels",
                    selector.match_labels,
                    &j["spec"]["matchResources"]["namespaceSelector"]["matchLabels"],
                )
            }),
            typed_list: roundtrip::<admission_v1beta1::MutatingAdmissionPolicyBindingList>,
        },
        Kind {
            group: "storage.k8s.io",
            kind: "VolumeAttributesClass",
            plural: "volumeattributesclasses",
            namespaced: false,
            base: "gold",
            object: |name, _| {
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass", "metadata": meta(name, false),
                    "driverName": "csi.example.com", "parameters": {"iops": "3000", "throughput": "125"}})
            },
            status: None,
            typed: typed!(storage::VolumeAttributesClass, |m, j| {
                same("driverName", m.driver_name, &j["driverName"])?;
                same("parameters", m.parameters, &j["parameters"])
            }),
            typed_list: roundtrip::<storage::VolumeAttributesClassList>,
        },
        Kind {
            group: "flowcontrol.apiserver.k8s.io",
            kind: "FlowSchema",
            plural: "flowschemas",
            namespaced: false,
            base: "batch-jobs",
            object: |name, _| {
                json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": meta(name, false),
                    "spec": {"priorityLevelConfiguration": {"name": PLC_FIXTURE}, "matchingPrecedence": 1000,
                        "distinguisherMethod": {"type": "ByUser"},
                        "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {"namespace": "default", "name": "batch"}}],
                            "resourceRules": [{"verbs": ["list", "watch"], "apiGroups": [""], "resources": ["configmaps"], "namespaces": ["default"]}]}]}})
            },
            status: Some(StatusCase {
                status: || json!({"conditions": [condition("Dangling", "False", "Found")]}),
                spec_change: || json!({"spec": {"matchingPrecedence": 2000}}),
            }),
            typed: typed!(flowcontrol::FlowSchema, |m, j| {
                let spec = m.spec.unwrap_or_default();
                let want = &j["spec"];
                same(
                    "spec.priorityLevelConfiguration.name",
                    spec.priority_level_configuration.unwrap_or_default().name,
                    &want["priorityLevelConfiguration"]["name"],
                )?;
                same(
                    "spec.matchingPrecedence",
                    spec.matching_precedence,
                    &want["matchingPrecedence"],
                )?;
                same(
                    "spec.distinguisherMethod.type",
                    spec.distinguisher_method.unwrap_or_default().r#type,
                    &want["distinguisherMethod"]["type"],
                )?;
                let rule = spec.rules.first().cloned().unwrap_or_default();
                let subject = rule.subjects.first().cloned().unwrap_or_default();
                same(
                    "spec.rules[0].subjects[0].serviceAccount.name",
                    subject.service_account.unwrap_or_default().name,
                    &want["rules"][0]["subjects"][0]["serviceAccount"]["name"],
                )?;
                same(
                    "spec.rules[0].resourceRules[0].verbs",
                    rule.resource_rules
                        .first()
                        .cloned()
                        .unwrap_or_default()
                        .verbs,
                    &want["rules"][0]["resourceRules"][0]["verbs"],
                )?;
                same(
                    "status.conditions",
                    conditions!(m.status.unwrap_or_default().conditions),
                    &conditions_of(j),
                )
            }),
            typed_list: roundtrip::<flowcontrol::FlowSchemaList>,
        },
        Kind {
            group: "flowcontrol.apiserver.k8s.io",
            kind: "PriorityLevelConfiguration",
            plural: "prioritylevelconfigurations",
            namespaced: false,
            base: "batch",
            object: |name, _| priority_level(name),
            status: Some(StatusCase {
                status: || json!({"conditions": [condition("TestCondition", "True", "TestSet")]}),
                spec_change: || json!({"spec": {"limited": {"nominalConcurrencyShares": 6}}}),
            }),
            typed: typed!(flowcontrol::PriorityLevelConfiguration, |m, j| {
                let spec = m.spec.unwrap_or_default();
                let want = &j["spec"];
                same("spec.type", spec.r#type, &want["type"])?;
                let limited = spec.limited.unwrap_or_default();
                same(
                    "spec.limited.nominalConcurrencyShares",
                    limited.nominal_concurrency_shares,
                    &want["limited"]["nominalConcurrencyShares"],
                )?;
                same(
                    "spec.limited.lendablePercent",
                    limited.lendable_percent,
                    &want["limited"]["lendablePercent"],
                )?;
                let queuing = limited
                    .limit_response
                    .unwrap_or_default()
                    .queuing
                    .unwrap_or_default();
                let want_q = &want["limited"]["limitResponse"]["queuing"];
                same("...queuing.queues", queuing.queues, &want_q["queues"])?;
                same(
                    "...queuing.handSize",
                    queuing.hand_size,
                    &want_q["handSize"],
                )?;
                same(
                    "...queuing.queueLengthLimit",
                    queuing.queue_length_limit,
                    &want_q["queueLengthLimit"],
                )?;
                same(
                    "status.conditions",
                    conditions!(m.status.unwrap_or_default().conditions),
                    &conditions_of(j),
                )
            }),
            typed_list: roundtrip::<flowcontrol::PriorityLevelConfigurationList>,
        },
        Kind {
            group: "apiregistration.k8s.io",
            kind: "APIService",
            plural: "apiservices",
            namespaced: false,
            base: "",
            object: |name, _| {
                let group = name.strip_prefix("v1alpha1.").unwrap_or(name);
                json!({"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": meta(name, false),
                    "spec": {"group": group, "version": "v1alpha1", "groupPriorityMinimum": 1000, "versionPriority": 15,
                        "service": {"namespace": "default", "name": "example-api", "port": 443}}})
            },
            status: Some(StatusCase {
                status: || json!({"conditions": [condition("Available", "False", "TestUnavailable")]}),
                spec_change: || json!({"spec": {"versionPriority": 16}}),
            }),
            typed: typed!(apiregistration::APIService, |m, j| {
                let spec = m.spec.unwrap_or_default();
                let want = &j["spec"];
                same("spec.group", spec.group, &want["group"])?;
                same("spec.version", spec.version, &want["version"])?;
                same(
                    "spec.groupPriorityMinimum",
                    spec.group_priority_minimum,
                    &want["groupPriorityMinimum"],
                )?;
                same(
                    "spec.versionPriority",
                    spec.version_priority,
                    &want["versionPriority"],
                )?;
                let service = spec.service.unwrap_or_default();
                same("spec.service.name", service.name, &want["service"]["name"])?;
                same(
                    "spec.service.namespace",
                    service.namespace,
                    &want["service"]["namespace"],
                )?;
                same("spec.service.port", service.port, &want["service"]["port"])?;
                same(
                    "status.conditions",
                    conditions!(m.status.unwrap_or_default().conditions),
                    &conditions_of(j),
                )
            }),
            typed_list: roundtrip::<apiregistration::APIServiceList>,
        },
    ]
}

pub fn mutating_admission_policy(name: &str) -> Value {
    // Labels new `widgets.example.com` objects (a kind nobody serves here, so the policy changes no
    // request of the tests even where mutating admission policies are enforced).
    json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingAdmissionPolicy", "metadata": meta(name, false),
    "spec": {
        "matchConstraints": {"resourceRules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["widgets"]}]},
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
        "mutations": [{"patchType": "ApplyConfiguration",
            "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {\"mutated\": \"true\"}}}"}}],
    }})
}

pub fn priority_level(name: &str) -> Value {
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration", "metadata": meta(name, false),
        "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5, "lendablePercent": 0,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 50}}}}})
}

pub fn device_class(name: &str) -> Value {
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": meta(name, false),
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{name}\"")}}]}})
}

/// The conditions of a JSON object's status in the shape the typed checks build (time in seconds).
fn conditions_of(j: &Value) -> Value {
    let conditions = j["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Value::Array(
        conditions
            .iter()
            .map(|c| {
                let t = c["lastTransitionTime"]
                    .as_str()
                    .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                    .map(|t| t.as_second());
                json!({"type": c["type"], "status": c["status"], "reason": c.get("reason"), "message": c.get("message"), "t": t})
            })
            .collect(),
    )
}

/// `got` (read through upstream's message) equals `want` (the JSON form).
pub fn same<T: Serialize>(what: &str, got: T, want: &Value) -> Result<(), String> {
    let got = serde_json::to_value(got).map_err(|e| e.to_string())?;
    // An empty map or list is how protobuf carries an absent one.
    let absent = |v: &Value| {
        v.is_null()
            || v.as_object().is_some_and(|m| m.is_empty())
            || v.as_array().is_some_and(|a| a.is_empty())
    };
    if got == *want || (absent(&got) && absent(want)) {
        Ok(())
    } else {
        Err(format!(
            "{what}: upstream's message reads {got}, the JSON form has {want}"
        ))
    }
}

/// Decodes `raw` with upstream's message `M` and checks that re-encoding gives the same bytes.
pub fn roundtrip<M: Message + Default>(raw: &[u8]) -> Result<(), String> {
    decode::<M>(raw).map(|_| ())
}

pub fn decode<M: Message + Default>(raw: &[u8]) -> Result<M, String> {
    let message = M::decode(raw)
        .map_err(|e| format!("not a valid {} message: {e}", std::any::type_name::<M>()))?;
    let again = message.encode_to_vec();
    if again != raw {
        return Err(format!(
            "re-encoding with upstream's message {} changes the bytes ({} -> {}): the server wrote \
             fields upstream's message does not have, or with other wire types, or out of order",
            std::any::type_name::<M>(),
            raw.len(),
            again.len()
        ));
    }
    Ok(message)
}
