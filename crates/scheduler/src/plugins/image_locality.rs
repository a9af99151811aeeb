//! ImageLocality (upstream `imagelocality`): favours nodes that already have the pod's images,
//! scaled by how widely each image is spread (so one node holding a popular image does not attract
//! every pod) and clamped between 23 MiB and 1000 MiB per container.

use k8s_openapi::api::core::v1::Pod;

use crate::framework::{CycleState, NodeInfo, Plugin, ScorePlugin, MAX_NODE_SCORE};

const MB: i64 = 1024 * 1024;
const MIN_THRESHOLD: i64 = 23 * MB;
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub struct ImageLocality;

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        "ImageLocality"
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// Upstream `normalizedImageName`: a name without a tag or digest means `:latest`.
pub fn normalized_image_name(name: &str) -> String {
    if name
        .rfind(':')
        .is_none_or(|c| name.rfind('/').is_some_and(|s| c < s))
    {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

fn calculate_priority(sum: i64, containers: usize) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD * containers as i64;
    let sum = sum.clamp(MIN_THRESHOLD, max.max(MIN_THRESHOLD));
    if max <= MIN_THRESHOLD {
        return 0;
    }
    MAX_NODE_SCORE * (sum - MIN_THRESHOLD) / (max - MIN_THRESHOLD)
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> i64 {
        let Some(spec) = pod.spec.as_ref() else {
            return 0;
        };
        if !node.has_images {
            return calculate_priority(0, spec.containers.len());
        }
        let total = state.snapshot.len().max(1) as f64;
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        let mut sum = 0i64;
        let mut count = 0;
        for c in containers {
            count += 1;
            let name = normalized_image_name(c.image.as_deref().unwrap_or(""));
            if let Some(&size) = node.image_sizes.get(&name) {
                let nodes = state
                    .snapshot
                    .image_num_nodes
                    .get(&name)
                    .copied()
                    .unwrap_or(1);
                sum += (size as f64 * (nodes as f64 / total)) as i64;
            }
        }
        calculate_priority(sum, count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{node, node_info, pod, st_of};
    use serde_json::json;

    fn with_images(name: &str, images: serde_json::Value) -> NodeInfo {
        let mut n = node(name, json!({}), json!({}), json!({}));
        n.status.as_mut().unwrap().images = Some(serde_json::from_value(images).unwrap());
        node_info(n, vec![])
    }

    #[test]
    fn names() {
        assert_eq!(normalized_image_name("nginx"), "nginx:latest");
        assert_eq!(normalized_image_name("nginx:1.2"), "nginx:1.2");
        assert_eq!(
            normalized_image_name("host:5000/nginx"),
            "host:5000/nginx:latest"
        );
        assert_eq!(
            normalized_image_name("host:5000/nginx:1"),
            "host:5000/nginx:1"
        );
    }

    #[test]
    fn score() {
        // Upstream's cases: 40 MB, 250 MB and 2000 MB images; node1 has 40 + 300, node2 has 250 + 2000.
        let n1 = with_images(
            "n1",
            json!([{"names": ["gcr.io/40:latest", "gcr.io/40:v1"], "sizeBytes": 40 * MB},
                   {"names": ["gcr.io/300:latest"], "sizeBytes": 300 * MB}]),
        );
        let n2 = with_images(
            "n2",
            json!([{"names": ["gcr.io/250:latest"], "sizeBytes": 250 * MB},
                   {"names": ["gcr.io/10:latest"], "sizeBytes": 10 * MB},
                   {"names": ["gcr.io/2000:latest"], "sizeBytes": 2000 * MB}]),
        );
        let n3 = with_images("n3", json!([]));
        let nodes = vec![n1.clone(), n2.clone(), n3.clone()];
        let st = st_of(&nodes);
        let p = |images: &[&str]| {
            let cs: Vec<_> = images
                .iter()
                .enumerate()
                .map(|(i, im)| json!({"name": format!("c{i}"), "image": im}))
                .collect();
            pod("p", json!({ "containers": cs }))
        };
        let score = |pod: &Pod, n: &NodeInfo| ImageLocality.score(&st, pod, n);
        // 40 MB on one node of three: 40/3 = 13.3 MB < 23 MB threshold -> 0.
        let p1 = p(&["gcr.io/40", "gcr.io/250"]);
        // node2: 250/3 = 83.3 MB -> 100 * (83.3 - 23) / (2000 - 23) = 3
        assert_eq!(
            (score(&p1, &n1), score(&p1, &n2), score(&p1, &n3)),
            (0, 3, 0)
        );
        // 2000 MB image capped at 1000 MB per container (one container): 2000/3 = 666 -> 65
        let p2 = p(&["gcr.io/2000"]);
        assert_eq!((score(&p2, &n1), score(&p2, &n2)), (0, 65));
        // a tagged name that only node1 lists
        let p3 = p(&["gcr.io/40:v1"]);
        assert_eq!(score(&p3, &n1), 0);
        let p4 = p(&["gcr.io/300:latest"]);
        // 300/3 = 100 MB -> 100 * (100 - 23) / (1000 - 23) = 7
        assert_eq!(score(&p4, &n1), 7);
    }
}
