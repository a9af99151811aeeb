//! Client machinery for rkube's components (upstream `k8s.io/client-go`): everything a controller, the
//! scheduler or the kubelet needs to turn API watches into work, built on the kube crate's `Client`.
//!
//! - [`workqueue`]: client-go's work queue semantics (`queue`/`dirty`/`processing`), delaying queue and
//!   rate limiters.
//! - [`informer`]: reflector (list + watch + resume), indexed cache, shared informers and event handlers.
//! - [`leaderelection`]: leader election on a `coordination.k8s.io/v1` Lease.
//! - [`events`]: the event recorder and broadcaster.
//! - [`kubeconfig`]: clients from a kubeconfig file.
//! - [`transport`]: the components' HTTP/2 client transport.
//! - [`loadbalancer`]: a client-side TCP balancer over several API servers (k3s's agent balancer).
//! - [`controller`]: the pattern every controller in the project follows.

pub mod controller;
pub mod events;
pub mod informer;
pub mod kubeconfig;
pub mod leaderelection;
pub mod loadbalancer;
pub mod transport;
pub mod workqueue;
