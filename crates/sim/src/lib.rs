//! Simulated nodes (the role kwok plays upstream): many Nodes registered and kept alive the way a
//! kubelet does (a Lease renewed every 10 s, conditions refreshed), whose pods go through the kubelet's
//! lifecycle (Running with IPs from the node's pod CIDR, conditions and container statuses; graceful
//! deletion confirmed) without any process. For scale tests of the control plane and for controller and
//! scheduler tests that need pods to run.
//!
//! One process serves every node with one watch on nodes and one on bound pods; writes go through a
//! work queue with a fixed number of workers, so thousands of nodes cost a few connections.
//!
//! Control through the API: `kubectl annotate node <n> sim.rkube.io/heartbeat=stopped` stops that node's
//! lease renewals and status updates (and its pods' handling), as a dead kubelet; removing the
//! annotation resumes them. A deleted node is forgotten (and not re-registered).
//!
//! With [`SimConfig::devices`], every node also publishes DRA ResourceSlices ([`devices`]).

pub mod cached;
pub mod devices;
pub mod ipam;
pub mod lifecycle;
mod nodes;
mod pods;

pub use nodes::{node_name, SimConfig};

use std::sync::Arc;

/// Runs the simulator until the returned handle is dropped or [`Simulator::stop`] is called.
pub struct Simulator {
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Simulator {
    /// Registers the nodes (creating or adopting them) and starts their heartbeats and pod handling.
    pub async fn start(client: kube::Client, config: SimConfig) -> Result<Simulator, String> {
        let config = Arc::new(config);
        let fleet = Arc::new(nodes::Fleet::new(&config)?);
        nodes::register_all(&client, &config, &fleet).await?;
        let tasks = vec![
            tokio::spawn(nodes::heartbeats(
                client.clone(),
                config.clone(),
                fleet.clone(),
            )),
            tokio::spawn(nodes::watch_nodes(client.clone(), fleet.clone())),
            tokio::spawn(pods::run(client, config, fleet)),
        ];
        Ok(Simulator { tasks })
    }

    pub fn stop(&mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for Simulator {
    fn drop(&mut self) {
        self.stop();
    }
}
