//! Streaming over upgraded HTTP/1.1 connections, as Kubernetes does it for `exec`, `attach`,
//! `port-forward` and proxying (upstream `k8s.io/apimachinery/pkg/util/httpstream`,
//! `.../util/proxy`, `k8s.io/apiserver/pkg/util/proxy` and client-go's `tools/remotecommand`):
//!
//! - [`spdy`]: SPDY/3.1 framing and multiplexed streams (what kubelets and container runtimes speak);
//! - [`wsstream`]: the WebSocket channel protocols (`v5.channel.k8s.io` and older);
//! - [`remotecommand`]: the exec/attach stream protocol on top of SPDY, and the API server's
//!   WebSocket-to-SPDY translator;
//! - [`proxy`]: dialing a backend over TLS and passing requests, responses and upgraded connections
//!   through unchanged.

pub mod netns;
pub mod proxy;
pub mod remotecommand;
pub mod spdy;
pub mod wsstream;
