//! Serializers (upstream `k8s.io/apimachinery/pkg/runtime/serializer`): the wire formats an API object
//! travels in besides JSON. Objects stay `serde_json::Value` in their JSON form everywhere else; these
//! modules translate that form to and from the bytes on the wire.
//!
//! - [`protobuf`]: `application/vnd.kubernetes.protobuf`, the default of client-go for built-in kinds.
//! - [`cbor`]: `application/cbor`, which client-go 1.32+ can use for dynamic and custom resources.

pub mod cbor;
pub mod protobuf;
