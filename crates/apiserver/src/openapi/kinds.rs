//! The definitions of the built-in kinds, generated once from the `k8s-openapi` types (whose `schemars`
//! implementations name definitions as upstream does, `io.k8s.api.core.v1.Pod`), plus what upstream's
//! documents carry and those lack: the List kinds, `x-kubernetes-group-version-kind` on each kind and
//! the strategic merge patch tags (`x-kubernetes-patch-strategy` / `x-kubernetes-patch-merge-key`),
//! read from the patch metadata table of `apimachinery::patch::schema`.
//!
//! References here point at `#/definitions/<name>` (Swagger 2.0); the v3 documents rewrite them.

use std::collections::{BTreeMap, HashSet};
use std::sync::OnceLock;

use apimachinery::patch::schema::{lookup, schema_for, PatchSchema, Strategy};
use k8s_openapi::api::{
    admissionregistration::v1 as admissionregistration_v1, apps::v1 as apps_v1,
    authentication::v1 as authentication_v1, authorization::v1 as authorization_v1,
    autoscaling::v1 as autoscaling_v1, autoscaling::v2 as autoscaling_v2, batch::v1 as batch_v1,
    certificates::v1 as certificates_v1, coordination::v1 as coordination_v1, core::v1 as core_v1,
    discovery::v1 as discovery_v1, events::v1 as events_v1, flowcontrol::v1 as flowcontrol_v1,
    networking::v1 as networking_v1, node::v1 as node_v1, policy::v1 as policy_v1,
    rbac::v1 as rbac_v1, resource::v1 as resource_v1, scheduling::v1 as scheduling_v1,
    storage::v1 as storage_v1,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions_v1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta_v1;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration_v1;
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde_json::{json, Map, Value};

/// Where definitions live in the generated (Swagger 2.0) form.
pub const DEFS: &str = "#/definitions/";

pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";

type Generate = fn(&mut SchemaGenerator) -> Schema;

fn generate<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// `kinds!(group, version, module: Kind, ...)`: table rows for the kinds of one group version.
macro_rules! kinds {
    ($group:literal, $version:literal, $module:ident: $($kind:ident),+ $(,)?) => {
        &[$(($group, $version, stringify!($kind), generate::<$module::$kind> as Generate)),+]
    };
}

/// Every built-in kind with a schema: (group, version, kind, its type). Besides the served resources,
/// the kinds of subresources (`Scale`, `Eviction`). A served kind missing here is published as an
/// object preserving unknown fields.
const TABLE: &[&[(&str, &str, &str, Generate)]] = &[
    kinds!("", "v1", core_v1: Binding, ConfigMap, Endpoints, Event, LimitRange, Namespace, Node,
        PersistentVolumeClaim, PersistentVolume, Pod, PodTemplate, ReplicationController, ComponentStatus,
        ResourceQuota, Secret, ServiceAccount, Service),
    kinds!("apps", "v1", apps_v1: ControllerRevision, DaemonSet, Deployment, ReplicaSet, StatefulSet),
    kinds!("batch", "v1", batch_v1: CronJob, Job),
    kinds!("autoscaling", "v2", autoscaling_v2: HorizontalPodAutoscaler),
    kinds!("autoscaling", "v1", autoscaling_v1: HorizontalPodAutoscaler, Scale),
    kinds!("coordination.k8s.io", "v1", coordination_v1: Lease),
    kinds!("discovery.k8s.io", "v1", discovery_v1: EndpointSlice),
    kinds!("events.k8s.io", "v1", events_v1: Event),
    kinds!("policy", "v1", policy_v1: PodDisruptionBudget, Eviction),
    kinds!("networking.k8s.io", "v1", networking_v1: IngressClass, Ingress, NetworkPolicy, IPAddress,
        ServiceCIDR),
    kinds!("resource.k8s.io", "v1", resource_v1: DeviceClass, ResourceClaim, ResourceClaimTemplate,
        ResourceSlice),
    kinds!("flowcontrol.apiserver.k8s.io", "v1", flowcontrol_v1: FlowSchema,
        PriorityLevelConfiguration),
    kinds!("apiregistration.k8s.io", "v1", apiregistration_v1: APIService),
    kinds!("rbac.authorization.k8s.io", "v1", rbac_v1: ClusterRoleBinding, ClusterRole, RoleBinding,
        Role),
    kinds!("scheduling.k8s.io", "v1", scheduling_v1: PriorityClass),
    kinds!("storage.k8s.io", "v1", storage_v1: CSIDriver, CSINode, CSIStorageCapacity, StorageClass,
        VolumeAttachment, VolumeAttributesClass),
    kinds!("node.k8s.io", "v1", node_v1: RuntimeClass),
    kinds!("authentication.k8s.io", "v1", authentication_v1: SelfSubjectReview, TokenReview),
    kinds!("authorization.k8s.io", "v1", authorization_v1: LocalSubjectAccessReview,
        SelfSubjectAccessReview, SelfSubjectRulesReview, SubjectAccessReview),
    kinds!("certificates.k8s.io", "v1", certificates_v1: CertificateSigningRequest),
    kinds!("admissionregistration.k8s.io", "v1", admissionregistration_v1:
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration, ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding, MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding),
    kinds!("apiextensions.k8s.io", "v1", apiextensions_v1: CustomResourceDefinition),
];

/// The generated definitions of every built-in kind, with the names of the kinds' definitions.
pub struct Base {
    pub defs: Map<String, Value>,
    /// (group, version, kind) -> definition name; List kinds included.
    pub names: BTreeMap<(String, String, String), String>,
}

impl Base {
    pub fn name(&self, group: &str, version: &str, kind: &str) -> Option<&str> {
        self.names
            .get(&(group.to_string(), version.to_string(), kind.to_string()))
            .map(String::as_str)
    }
}

/// The built-in definitions, generated on first use.
pub fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(build)
}

fn build() -> Base {
    let mut g = SchemaSettings::draft07()
        .with(|s| {
            s.definitions_path = "/definitions".into();
            s.meta_schema = None;
            s.transforms = Vec::new();
        })
        .into_generator();
    g.subschema_for::<meta_v1::Status>();
    g.subschema_for::<meta_v1::DeleteOptions>();
    g.subschema_for::<meta_v1::Patch>();
    let list_meta = g.subschema_for::<meta_v1::ListMeta>().to_value();
    let mut names = BTreeMap::new();
    let mut gvks: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    let mut lists = Vec::new();
    for (group, version, kind, generate) in TABLE.iter().flat_map(|rows| rows.iter()) {
        let reference = generate(&mut g).to_value();
        let Some(name) = reference["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix(DEFS))
        else {
            continue;
        };
        let list = format!("{name}List");
        let list_kind = format!("{kind}List");
        for (k, n) in [(*kind, name), (list_kind.as_str(), list.as_str())] {
            names.insert(
                (group.to_string(), version.to_string(), k.to_string()),
                n.to_string(),
            );
            gvks.entry(n.to_string())
                .or_default()
                .push(json!({"group": group, "version": version, "kind": k}));
        }
        lists.push((list, name.to_string(), kind.to_string()));
    }
    let mut defs = g.take_definitions(false);
    for (list, item, kind) in lists {
        defs.insert(list, list_schema(&item, &kind, &list_meta));
    }
    for (name, gvk) in gvks {
        if let Some(Value::Object(def)) = defs.get_mut(&name) {
            def.insert("x-kubernetes-group-version-kind".into(), Value::Array(gvk));
            // `k8s-openapi` requires the (non-optional in Rust) metadata; upstream does not.
            if let Some(Value::Array(required)) = def.get_mut("required") {
                required.retain(|f| f != "metadata");
                if required.is_empty() {
                    def.remove("required");
                }
            }
        }
    }
    upstream_scalars(&mut defs);
    let mut seen = HashSet::new();
    for ((group, _, kind), name) in &names {
        let patch = schema_for(group, kind);
        if patch.type_name().is_some() {
            tag_patch_fields(&mut defs, name, patch, &mut seen);
        }
    }
    Base { defs, names }
}

/// The common fields of every object: `apiVersion`, `kind`.
pub fn type_meta_properties() -> Map<String, Value> {
    let mut props = Map::new();
    props.insert("apiVersion".into(), json!({
        "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
        "type": "string",
    }));
    props.insert("kind".into(), json!({
        "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
        "type": "string",
    }));
    props
}

/// `<Kind>List`: `items` of the kind and list metadata, as upstream's list types.
pub fn list_schema(item: &str, kind: &str, list_meta: &Value) -> Value {
    let mut props = type_meta_properties();
    props.insert(
        "items".into(),
        json!({
            "description": format!("List of {}.", kind.to_lowercase()),
            "type": "array",
            "items": {"$ref": format!("{DEFS}{item}")},
        }),
    );
    let mut meta = list_meta.clone();
    meta["description"] = json!("Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds");
    props.insert("metadata".into(), meta);
    json!({
        "description": format!("{kind}List is a list of {kind} objects."),
        "type": "object",
        "required": ["items"],
        "properties": props,
    })
}

/// Upstream publishes `IntOrString` as a string of format `int-or-string` and `Quantity` as a string
/// (`k8s-openapi` leaves their type open, with `x-kubernetes-int-or-string`).
fn upstream_scalars(defs: &mut Map<String, Value>) {
    for (name, format) in [
        (
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString",
            Some("int-or-string"),
        ),
        ("io.k8s.apimachinery.pkg.api.resource.Quantity", None),
    ] {
        if let Some(Value::Object(def)) = defs.get_mut(name) {
            def.remove("x-kubernetes-int-or-string");
            def.insert("type".into(), json!("string"));
            if let Some(f) = format {
                def.insert("format".into(), json!(f));
            }
        }
    }
}

/// The definition a property's schema refers to, directly, through `allOf` or as its items.
fn referenced(prop: &Value) -> Option<&str> {
    let r = prop
        .get("$ref")
        .or_else(|| prop.pointer("/allOf/0/$ref"))
        .or_else(|| prop.pointer("/items/$ref"))
        .or_else(|| prop.pointer("/additionalProperties/$ref"))?;
    r.as_str()?.strip_prefix(DEFS)
}

/// Puts the patch tags of the fields of `name` (of patch type `patch`) on its properties, and descends
/// into the definitions of fields with metadata below them.
fn tag_patch_fields(
    defs: &mut Map<String, Value>,
    name: &str,
    patch: PatchSchema,
    seen: &mut HashSet<(String, &'static str)>,
) {
    let Some(ty) = patch.type_name() else {
        return;
    };
    if !seen.insert((name.to_string(), ty)) {
        return;
    }
    let mut below = Vec::new();
    if let Some(Value::Object(props)) = defs.get_mut(name).and_then(|d| d.get_mut("properties")) {
        for (field, prop) in props.iter_mut() {
            let meta = lookup(patch, field);
            let mut tags = Vec::new();
            match meta.strategy {
                Strategy::Merge => tags.push("merge"),
                Strategy::Replace => tags.push("replace"),
                Strategy::Default => {}
            }
            if meta.retain_keys {
                tags.push("retainKeys");
            }
            if let Value::Object(p) = prop {
                if !tags.is_empty() {
                    p.insert("x-kubernetes-patch-strategy".into(), json!(tags.join(",")));
                }
                if !meta.merge_key.is_empty() {
                    p.insert("x-kubernetes-patch-merge-key".into(), json!(meta.merge_key));
                }
            }
            if meta.schema.type_name().is_some() {
                if let Some(target) = referenced(prop) {
                    below.push((target.to_string(), meta.schema));
                }
            }
        }
    }
    for (target, schema) in below {
        tag_patch_fields(defs, &target, schema, seen);
    }
}
