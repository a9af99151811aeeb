//! Printers of volumes and storage kinds, mirroring upstream `pkg/printers/internalversion`:
//! persistentvolumes, persistentvolumeclaims and `storage.k8s.io` storageclasses, volumeattributesclasses,
//! csidrivers, csinodes, volumeattachments, csistoragecapacities.

use serde_json::{json, Value};

use super::time::Instant;
use super::util::{
    annotation, arr_at, bool_at, deleting, get, len_at, name, opt_bool, opt_str, or, quantity,
    str_at,
};
use super::{age_cell, col, printer, wide, ColumnDefinition, Printers, AGE, NAME};

pub(super) const PRINTERS: Printers = &[
    ("", "persistentvolumes", printer(PV_COLUMNS, pv_cells)),
    (
        "",
        "persistentvolumeclaims",
        printer(PVC_COLUMNS, pvc_cells),
    ),
    (
        "storage.k8s.io",
        "storageclasses",
        printer(SC_COLUMNS, sc_cells),
    ),
    (
        "storage.k8s.io",
        "volumeattributesclasses",
        printer(VAC_COLUMNS, vac_cells),
    ),
    (
        "storage.k8s.io",
        "csidrivers",
        printer(CSIDRIVER_COLUMNS, csidriver_cells),
    ),
    (
        "storage.k8s.io",
        "csinodes",
        printer(CSINODE_COLUMNS, csinode_cells),
    ),
    (
        "storage.k8s.io",
        "volumeattachments",
        printer(VA_COLUMNS, va_cells),
    ),
    (
        "storage.k8s.io",
        "csistoragecapacities",
        printer(CSC_COLUMNS, csc_cells),
    ),
];

/// The annotation that predates `storageClassName`; it still wins when present.
const BETA_STORAGE_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// `helper.GetAccessModesAsString`: RWO, ROX, RWX, RWOP in that order, each once.
fn access_modes(modes: &[Value]) -> String {
    let has = |m: &str| modes.iter().any(|v| v.as_str() == Some(m));
    [
        ("ReadWriteOnce", "RWO"),
        ("ReadOnlyMany", "ROX"),
        ("ReadWriteMany", "RWX"),
        ("ReadWriteOncePod", "RWOP"),
    ]
    .iter()
    .filter(|(mode, _)| has(mode))
    .map(|(_, short)| *short)
    .collect::<Vec<_>>()
    .join(",")
}

const PV_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Capacity", "string", "capacity is the description of the persistent volume's resources and capacity."),
    col("Access Modes", "string", "accessModes contains all ways the volume can be mounted."),
    col("Reclaim Policy", "string", "persistentVolumeReclaimPolicy defines what happens to a persistent volume when released from its claim."),
    col("Status", "string", "phase indicates if a volume is available, bound to a claim, or released by a claim."),
    col("Claim", "string", "claimRef is part of a bi-directional binding between PersistentVolume and PersistentVolumeClaim."),
    col("StorageClass", "string", "StorageClass of the pv"),
    col("VolumeAttributesClass", "string", "VolumeAttributesClass of the pv"),
    col("Reason", "string", "reason is a brief CamelCase string that describes any failure and is meant for machine parsing and tidy display in the CLI."),
    AGE,
    wide("VolumeMode", "string", "volumeMode defines if a volume is intended to be used with a formatted filesystem or to remain in raw block state."),
];

fn pv_cells(pv: &Value, now: Instant) -> Vec<Value> {
    let claim = match get(pv, &["spec", "claimRef"]).filter(|c| c.is_object()) {
        Some(c) => format!("{}/{}", str_at(c, &["namespace"]), str_at(c, &["name"])),
        None => String::new(),
    };
    let phase = if deleting(pv) {
        "Terminating"
    } else {
        str_at(pv, &["status", "phase"])
    };
    let class = annotation(pv, BETA_STORAGE_CLASS_ANNOTATION)
        .unwrap_or_else(|| str_at(pv, &["spec", "storageClassName"]));
    vec![
        json!(name(pv)),
        json!(quantity(get(pv, &["spec", "capacity", "storage"]))),
        json!(access_modes(arr_at(pv, &["spec", "accessModes"]))),
        json!(str_at(pv, &["spec", "persistentVolumeReclaimPolicy"])),
        json!(phase),
        json!(claim),
        json!(class),
        json!(opt_str(pv, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        json!(str_at(pv, &["status", "reason"])),
        age_cell(pv, now),
        json!(opt_str(pv, &["spec", "volumeMode"]).unwrap_or("<unset>")),
    ]
}

const PVC_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Status",
        "string",
        "phase represents the current phase of PersistentVolumeClaim.",
    ),
    col(
        "Volume",
        "string",
        "volumeName is the binding reference to the PersistentVolume backing this claim.",
    ),
    col(
        "Capacity",
        "string",
        "capacity represents the actual resources of the underlying volume.",
    ),
    col(
        "Access Modes",
        "string",
        "accessModes contains the actual access modes the volume backing the PVC has.",
    ),
    col("StorageClass", "string", "StorageClass of the pvc"),
    col(
        "VolumeAttributesClass",
        "string",
        "VolumeAttributesClass of the pvc",
    ),
    AGE,
    wide(
        "VolumeMode",
        "string",
        "volumeMode defines what type of volume is required by the claim.",
    ),
];

fn pvc_cells(pvc: &Value, now: Instant) -> Vec<Value> {
    let phase = if deleting(pvc) {
        "Terminating"
    } else {
        str_at(pvc, &["status", "phase"])
    };
    let volume = str_at(pvc, &["spec", "volumeName"]);
    // Capacity and access modes show once the claim is bound to a volume.
    let (capacity, modes) = if volume.is_empty() {
        (String::new(), String::new())
    } else {
        (
            quantity(get(pvc, &["status", "capacity", "storage"])),
            access_modes(arr_at(pvc, &["status", "accessModes"])),
        )
    };
    let class = annotation(pvc, BETA_STORAGE_CLASS_ANNOTATION)
        .unwrap_or_else(|| str_at(pvc, &["spec", "storageClassName"]));
    vec![
        json!(name(pvc)),
        json!(phase),
        json!(volume),
        json!(capacity),
        json!(modes),
        json!(class),
        json!(opt_str(pvc, &["spec", "volumeAttributesClassName"]).unwrap_or("<unset>")),
        age_cell(pvc, now),
        json!(opt_str(pvc, &["spec", "volumeMode"]).unwrap_or("<unset>")),
    ]
}

const SC_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Provisioner", "string", "provisioner indicates the type of the provisioner."),
    col("ReclaimPolicy", "string", "reclaimPolicy controls the reclaimPolicy for dynamically provisioned PersistentVolumes of this storage class. Defaults to Delete."),
    col("VolumeBindingMode", "string", "volumeBindingMode indicates how PersistentVolumeClaims should be provisioned and bound. When unset, VolumeBindingImmediate is used."),
    col("AllowVolumeExpansion", "string", "allowVolumeExpansion shows whether the storage class allow volume expand."),
    AGE,
];

/// `storageutil.IsDefaultAnnotation`: either default-class annotation set to `"true"`.
fn is_default_class(sc: &Value) -> bool {
    [
        "storageclass.kubernetes.io/is-default-class",
        "storageclass.beta.kubernetes.io/is-default-class",
    ]
    .iter()
    .any(|a| annotation(sc, a) == Some("true"))
}

fn sc_cells(sc: &Value, now: Instant) -> Vec<Value> {
    let mut n = name(sc).to_string();
    if is_default_class(sc) {
        n.push_str(" (default)");
    }
    vec![
        json!(n),
        json!(str_at(sc, &["provisioner"])),
        json!(opt_str(sc, &["reclaimPolicy"]).unwrap_or("Delete")),
        json!(opt_str(sc, &["volumeBindingMode"]).unwrap_or("Immediate")),
        json!(bool_at(sc, &["allowVolumeExpansion"])),
        age_cell(sc, now),
    ]
}

const VAC_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "DriverName",
        "string",
        "Name of the CSI driver This field is immutable.",
    ),
    AGE,
];

fn vac_cells(vac: &Value, now: Instant) -> Vec<Value> {
    let mut n = name(vac).to_string();
    if annotation(
        vac,
        "volumeattributesclass.alpha.kubernetes.io/is-default-class",
    ) == Some("true")
    {
        n.push_str(" (default)");
    }
    vec![
        json!(n),
        json!(str_at(vac, &["driverName"])),
        age_cell(vac, now),
    ]
}

const CSIDRIVER_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("AttachRequired", "boolean", "attachRequired indicates this CSI volume driver requires an attach operation (because it implements the CSI ControllerPublishVolume() method), and that the Kubernetes attach detach controller should call the attach volume interface which checks the volumeattachment status and waits until the volume is attached before proceeding to mounting."),
    col("PodInfoOnMount", "boolean", "podInfoOnMount indicates this CSI volume driver requires additional pod information (like podName, podUID, etc.) during mount operations, if set to true."),
    col("StorageCapacity", "boolean", "storageCapacity indicates that the CSI volume driver wants pod scheduling to consider the storage capacity that the driver deployment will report by creating CSIStorageCapacity objects with capacity information, if set to true."),
    col("TokenRequests", "string", "tokenRequests indicates the CSI driver needs pods' service account tokens it is mounting volume for to do necessary authentication."),
    col("RequiresRepublish", "boolean", "requiresRepublish indicates the CSI driver wants `NodePublishVolume` being periodically called to reflect any possible change in the mounted volume."),
    col("Modes", "string", "volumeLifecycleModes defines what kind of volumes this CSI volume driver supports."),
    AGE,
];

fn csidriver_cells(d: &Value, now: Instant) -> Vec<Value> {
    let modes: Vec<&str> = arr_at(d, &["spec", "volumeLifecycleModes"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let modes = modes.join(",");
    let token_requests = match get(d, &["spec", "tokenRequests"]).and_then(Value::as_array) {
        Some(reqs) => reqs
            .iter()
            .map(|t| str_at(t, &["audience"]))
            .collect::<Vec<_>>()
            .join(","),
        None => "<unset>".to_string(),
    };
    vec![
        json!(name(d)),
        json!(opt_bool(d, &["spec", "attachRequired"]).unwrap_or(true)),
        json!(bool_at(d, &["spec", "podInfoOnMount"])),
        json!(bool_at(d, &["spec", "storageCapacity"])),
        json!(token_requests),
        json!(bool_at(d, &["spec", "requiresRepublish"])),
        json!(or(&modes, "<none>")),
        age_cell(d, now),
    ]
}

const CSINODE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Drivers",
        "integer",
        "Drivers indicates the number of CSI drivers registered on the node",
    ),
    AGE,
];

fn csinode_cells(n: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(n)),
        json!(len_at(n, &["spec", "drivers"])),
        age_cell(n, now),
    ]
}

const VA_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    // Upstream marks this column `name` too.
    ColumnDefinition {
        name: "Attacher",
        type_: "string",
        format: "name",
        description: "attacher indicates the name of the volume driver that MUST handle this request. This is the name returned by GetPluginName().",
        priority: 0,
    },
    col("PV", "string", "persistentVolumeName represents the name of the persistent volume to attach."),
    col("Node", "string", "nodeName represents the node that the volume should be attached to."),
    col("Attached", "boolean", "attached indicates the volume is successfully attached. This field must only be set by the entity completing the attach operation, i.e. the external-attacher."),
    AGE,
];

fn va_cells(va: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(va)),
        json!(str_at(va, &["spec", "attacher"])),
        json!(str_at(va, &["spec", "source", "persistentVolumeName"])),
        json!(str_at(va, &["spec", "nodeName"])),
        json!(bool_at(va, &["status", "attached"])),
        age_cell(va, now),
    ]
}

const CSC_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("StorageClassName", "string", "storageClassName represents the name of the StorageClass that the reported capacity applies to."),
    col("Capacity", "string", "capacity is the value reported by the CSI driver in its GetCapacityResponse for a GetCapacityRequest with topology and parameters that match the previous fields."),
];

fn csc_cells(c: &Value, _now: Instant) -> Vec<Value> {
    let capacity = match get(c, &["capacity"]).filter(|q| !q.is_null()) {
        Some(q) => quantity(Some(q)),
        None => "<unset>".to_string(),
    };
    vec![
        json!(name(c)),
        json!(str_at(c, &["storageClassName"])),
        json!(capacity),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{header, row, CREATED};

    #[test]
    fn persistentvolumes() {
        assert_eq!(
            header("", "persistentvolumes"),
            vec![
                ("Name", 0),
                ("Capacity", 0),
                ("Access Modes", 0),
                ("Reclaim Policy", 0),
                ("Status", 0),
                ("Claim", 0),
                ("StorageClass", 0),
                ("VolumeAttributesClass", 0),
                ("Reason", 0),
                ("Age", 0),
                ("VolumeMode", 1),
            ]
        );
        let pv = json!({
            "metadata": {"name": "pv-1", "creationTimestamp": CREATED},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "fast", "volumeMode": "Filesystem",
                "claimRef": {"namespace": "default", "name": "data"}},
            "status": {"phase": "Bound"}
        });
        assert_eq!(
            row("", "persistentvolumes", &pv),
            vec![
                json!("pv-1"),
                json!("10Gi"),
                json!("RWO,RWX"),
                json!("Retain"),
                json!("Bound"),
                json!("default/data"),
                json!("fast"),
                json!("<unset>"),
                json!(""),
                json!("10m"),
                json!("Filesystem"),
            ]
        );
        let mut released = pv.clone();
        released["metadata"]["deletionTimestamp"] = json!(CREATED);
        released["metadata"]["annotations"] =
            json!({"volume.beta.kubernetes.io/storage-class": "old"});
        released["spec"]["claimRef"] = json!(null);
        let r = row("", "persistentvolumes", &released);
        assert_eq!(
            (r[4].clone(), r[5].clone(), r[6].clone()),
            (json!("Terminating"), json!(""), json!("old"))
        );
    }

    #[test]
    fn persistentvolumeclaims() {
        assert_eq!(
            header("", "persistentvolumeclaims"),
            vec![
                ("Name", 0),
                ("Status", 0),
                ("Volume", 0),
                ("Capacity", 0),
                ("Access Modes", 0),
                ("StorageClass", 0),
                ("VolumeAttributesClass", 0),
                ("Age", 0),
                ("VolumeMode", 1),
            ]
        );
        let bound = json!({
            "metadata": {"name": "data", "creationTimestamp": CREATED},
            "spec": {"volumeName": "pv-1", "storageClassName": "fast", "volumeMode": "Filesystem",
                "volumeAttributesClassName": "gold", "resources": {"requests": {"storage": "5Gi"}}},
            "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOncePod"]}
        });
        assert_eq!(
            row("", "persistentvolumeclaims", &bound),
            vec![
                json!("data"),
                json!("Bound"),
                json!("pv-1"),
                json!("10Gi"),
                json!("RWOP"),
                json!("fast"),
                json!("gold"),
                json!("10m"),
                json!("Filesystem"),
            ]
        );
        let pending = json!({
            "metadata": {"name": "data", "creationTimestamp": CREATED},
            "spec": {"resources": {"requests": {"storage": "5Gi"}}},
            "status": {"phase": "Pending"}
        });
        assert_eq!(
            row("", "persistentvolumeclaims", &pending),
            vec![
                json!("data"),
                json!("Pending"),
                json!(""),
                json!(""),
                json!(""),
                json!(""),
                json!("<unset>"),
                json!("10m"),
                json!("<unset>"),
            ]
        );
    }

    #[test]
    fn storageclasses() {
        assert_eq!(
            header("storage.k8s.io", "storageclasses"),
            vec![
                ("Name", 0),
                ("Provisioner", 0),
                ("ReclaimPolicy", 0),
                ("VolumeBindingMode", 0),
                ("AllowVolumeExpansion", 0),
                ("Age", 0),
            ]
        );
        let sc = json!({
            "metadata": {"name": "standard", "creationTimestamp": CREATED,
                "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
            "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"
        });
        assert_eq!(
            row("storage.k8s.io", "storageclasses", &sc),
            vec![
                json!("standard (default)"),
                json!("rancher.io/local-path"),
                json!("Delete"),
                json!("WaitForFirstConsumer"),
                json!(false),
                json!("10m"),
            ]
        );
    }

    #[test]
    fn csi_kinds_and_attachments() {
        let driver = json!({"metadata": {"name": "csi.example.com", "creationTimestamp": CREATED},
            "spec": {"volumeLifecycleModes": ["Persistent", "Ephemeral"], "tokenRequests": [{"audience": "vault"}]}});
        assert_eq!(
            row("storage.k8s.io", "csidrivers", &driver),
            vec![
                json!("csi.example.com"),
                json!(true),
                json!(false),
                json!(false),
                json!("vault"),
                json!(false),
                json!("Persistent,Ephemeral"),
                json!("10m"),
            ]
        );
        let node = json!({"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(row("storage.k8s.io", "csinodes", &node)[1], json!(2));
        let va = json!({"metadata": {"name": "csi-123"}, "spec": {"attacher": "csi.example.com",
            "source": {"persistentVolumeName": "pv-1"}, "nodeName": "n1"}, "status": {"attached": true}});
        assert_eq!(
            row("storage.k8s.io", "volumeattachments", &va)[..5],
            [
                json!("csi-123"),
                json!("csi.example.com"),
                json!("pv-1"),
                json!("n1"),
                json!(true)
            ]
        );
        let cap = json!({"metadata": {"name": "c"}, "storageClassName": "fast"});
        assert_eq!(
            row("storage.k8s.io", "csistoragecapacities", &cap),
            vec![json!("c"), json!("fast"), json!("<unset>")]
        );
        let vac = json!({"metadata": {"name": "gold", "annotations":
            {"volumeattributesclass.alpha.kubernetes.io/is-default-class": "true"}}, "driverName": "csi.example.com"});
        assert_eq!(
            row("storage.k8s.io", "volumeattributesclasses", &vac)[..2],
            [json!("gold (default)"), json!("csi.example.com")]
        );
    }

    #[test]
    fn volumeattributesclasses() {
        assert_eq!(
            header("storage.k8s.io", "volumeattributesclasses"),
            vec![("Name", 0), ("DriverName", 0), ("Age", 0)]
        );
        let vac = json!({"metadata": {"name": "silver", "creationTimestamp": CREATED},
            "driverName": "pd.csi.storage.gke.io", "parameters": {"iops": "3000", "throughput": "50"}});
        assert_eq!(
            row("storage.k8s.io", "volumeattributesclasses", &vac),
            vec![
                json!("silver"),
                json!("pd.csi.storage.gke.io"),
                json!("10m")
            ]
        );
        // Only the value "true" marks the default class.
        let vac = json!({"metadata": {"name": "bronze", "annotations":
            {"volumeattributesclass.alpha.kubernetes.io/is-default-class": "false"}}, "driverName": "d"});
        assert_eq!(
            row("storage.k8s.io", "volumeattributesclasses", &vac)[0],
            json!("bronze")
        );
    }
}
