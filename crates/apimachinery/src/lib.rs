//! Kubernetes API machinery (upstream `k8s.io/apimachinery` and the pure parts of `k8s.io/apiserver` and
//! `pkg/printers`): everything about API objects that needs no I/O, so it is unit-testable on its own.
//!
//! - [`status`]: API errors as `metav1.Status` with upstream's codes, reasons and wording.
//! - [`labels`], [`fields`]: label and field selectors.
//! - [`fieldmanager`]: managedFields and server-side apply.
//! - [`patch`]: JSON patch, JSON merge patch and strategic merge patch.
//! - [`conversion`]: versions of a resource sharing one storage (events.k8s.io and core Events).
//! - [`defaults`], [`validation`]: defaulting and validation of built-in kinds.
//! - [`resources`]: the registry of served resources (built-in and custom), which discovery publishes.
//! - [`serializer`]: the wire formats besides JSON: Kubernetes protobuf and CBOR.
//! - [`schema`]: custom resources' structural schemas: pruning, defaulting, validation.
//! - [`printers`]: the columns of server-side `Table` output, as `kubectl get` shows them.
//! - [`quantity`]: resource quantities (`500m`, `1Gi`) with exact arithmetic and canonical printing.
//! - [`quota`]: resource quota accounting shared by quota admission and the quota controller.
//! - [`podsecurity`]: the Pod Security Standards and the PodSecurity admission decisions.
//! - [`volumes`]: the PersistentVolumeClaims a pod uses.
//!
//! Objects are handled as `serde_json::Value` in their served JSON form, so the same code serves built-in
//! kinds and custom resources.

pub mod conversion;
pub mod defaults;
pub mod fieldmanager;
pub mod fields;
pub mod go_duration;
pub mod go_format;
pub mod labels;
pub mod patch;
pub mod podrefs;
pub mod podsecurity;
pub mod printers;
pub mod quantity;
pub mod quota;
pub mod resources;
pub mod schema;
pub mod serializer;
pub mod status;
pub mod taints;
pub mod validation;
pub mod volumes;
