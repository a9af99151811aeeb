//! SPDY/3.1 as Kubernetes uses it for exec, attach and port-forward (upstream
//! `k8s.io/apimachinery/pkg/util/httpstream/spdy` over `moby/spdystream`): a connection upgraded from
//! HTTP/1.1 (`Upgrade: SPDY/3.1`) carrying many streams, each opened with headers (`streamType`,
//! `port`, `requestID`) and half-closed with FIN.
//!
//! Like spdystream, no flow control is enforced: WINDOW_UPDATE and SETTINGS are accepted and ignored,
//! and data is sent without waiting for window space (spdystream never sends WINDOW_UPDATE either).

pub mod conn;
mod dictionary;
pub mod frame;

pub use conn::{Connection, Incoming, Stream, StreamReader, StreamWriter};
pub use frame::{Frame, Headers};

/// The `Upgrade` header value of a SPDY request.
pub const UPGRADE: &str = "SPDY/3.1";
/// The header carrying the stream protocols a client offers and the one the server picks.
pub const PROTOCOL_HEADER: &str = "X-Stream-Protocol-Version";
