//! The node IPAM controller of `rkube server`: 1,000 nodes registered at once each get a distinct
//! /24 of --cluster-cidr; the subnets of deleted nodes are handed out again once the free ones are
//! used up.

mod support;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::Api;
use support::{Backend, Cluster};

async fn create_nodes(api: &Api<Node>, names: Vec<String>) {
    futures::stream::iter(names)
        .for_each_concurrent(16, |name| {
            let api = api.clone();
            async move {
                let node: Node =
                    serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                        .unwrap();
                api.create(&PostParams::default(), &node).await.unwrap();
            }
        })
        .await;
}

/// Waits until every node has a pod CIDR; returns name -> CIDR.
async fn cidrs(api: &Api<Node>, expected: usize) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let nodes = api.list(&ListParams::default()).await.unwrap().items;
        let with: Vec<(String, String)> = nodes
            .iter()
            .filter_map(|n| Some((n.metadata.name.clone()?, n.spec.as_ref()?.pod_cidr.clone()?)))
            .collect();
        if nodes.len() == expected && with.len() == expected {
            return with;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} nodes have a pod CIDR",
            with.len(),
            nodes.len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[test]
fn pod_cidrs_are_unique_and_reused() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--disable-scheduler", "--cluster-cidr", "10.64.0.0/14"],
    );
    support::runtime().block_on(async {
        let api: Api<Node> = Api::all(c.client().await);
        create_nodes(&api, (0..1000).map(|i| format!("node-{i}")).collect()).await;
        let first = cidrs(&api, 1000).await;
        let distinct: HashSet<&str> = first.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(distinct.len(), 1000, "a subnet was given twice");
        for cidr in &distinct {
            let third: u32 = cidr.split('.').nth(1).unwrap().parse().unwrap();
            assert!(
                (64..68).contains(&third) && cidr.ends_with(".0/24"),
                "{cidr} outside 10.64.0.0/14"
            );
        }
        let node = api.get("node-0").await.unwrap();
        let spec = node.spec.unwrap();
        assert_eq!(spec.pod_cidrs, Some(vec![spec.pod_cidr.clone().unwrap()]));

        // Ten nodes go; 34 new ones take the 24 never-used subnets and the ten released ones.
        let gone: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
        let released: HashSet<String> = first
            .iter()
            .filter(|(n, _)| gone.contains(n))
            .map(|(_, c)| c.clone())
            .collect();
        for n in &gone {
            api.delete(n, &DeleteParams::default()).await.unwrap();
        }
        create_nodes(&api, (1000..1034).map(|i| format!("node-{i}")).collect()).await;
        let second = cidrs(&api, 1024).await;
        let all: HashSet<&str> = second.iter().map(|(_, c)| c.as_str()).collect();
        assert_eq!(all.len(), 1024, "a subnet was given twice");
        let new: HashSet<String> = second
            .iter()
            .filter(|(n, _)| n.as_str() >= "node-1000" && n.len() == 9)
            .map(|(_, c)| c.clone())
            .collect();
        assert!(released.is_subset(&new), "released subnets not reused");
    });
}
