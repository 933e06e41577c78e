//! ImageLocality: favours nodes that already have the pod's container images, weighing each
//! image by its size and by how widely it has spread across the cluster (an image on every node
//! says little about any one of them). Mirrors `imagelocality/image_locality.go` of Kubernetes
//! v1.32; the spread is computed once per pod in PreScore from the snapshot.

use std::sync::Arc;

use serde_json::Value;

use crate::framework::{CycleState, Plugin, PreScorePlugin, ScorePlugin, Status, MAX_NODE_SCORE};
use crate::snapshot::Snapshot;
use crate::types::{NodeInfo, PodInfo};

pub const NAME: &str = "ImageLocality";

const MB: i64 = 1024 * 1024;
/// Summed image scores below this count as nothing.
const MIN_THRESHOLD: i64 = 23 * MB;
/// Summed image scores above this, per container, count as the best possible.
const MAX_CONTAINER_THRESHOLD: i64 = 1000 * MB;

pub struct ImageLocality;

pub fn new(_args: &Value) -> Result<Arc<dyn Plugin>, String> {
    Ok(Arc::new(ImageLocality))
}

/// Per pod: the images present somewhere in the cluster with their spread, and the number of
/// containers (init and regular) that sets the upper threshold.
#[derive(Debug, Clone)]
struct PreScoreState {
    /// Normalized image name and the fraction of nodes that have it.
    images: Vec<(String, f64)>,
    containers: i64,
}

/// The image name as the container runtime reports it: `:latest` when no tag is given.
fn normalized_image_name(name: &str) -> String {
    let colon = name.rfind(':');
    let slash = name.rfind('/');
    // No tag when there is no ':' after the last '/'.
    if colon.is_none_or(|c| slash.is_some_and(|s| c <= s)) {
        format!("{name}:latest")
    } else {
        name.to_string()
    }
}

/// Scale the summed image scores between the thresholds to 0..=MAX_NODE_SCORE.
fn calculate_priority(sum: i64, containers: i64) -> i64 {
    let max = MAX_CONTAINER_THRESHOLD.saturating_mul(containers);
    let sum = if sum < MIN_THRESHOLD {
        MIN_THRESHOLD
    } else if sum > max {
        max
    } else {
        sum
    };
    let range = i128::from(max) - i128::from(MIN_THRESHOLD);
    (i128::from(MAX_NODE_SCORE) * (i128::from(sum) - i128::from(MIN_THRESHOLD)))
        .checked_div(range)
        .map_or(0, |v| v as i64)
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        NAME
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for ImageLocality {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[&NodeInfo],
        snapshot: &Snapshot,
    ) -> Status {
        let total = snapshot.num_nodes();
        let Some(spec) = pod.pod().spec.as_ref() else {
            return Status::skip();
        };
        if total == 0 {
            return Status::skip();
        }
        let containers = spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers);
        let mut images = Vec::new();
        let mut count = 0i64;
        for c in containers {
            count += 1;
            let name = normalized_image_name(c.image.as_deref().unwrap_or(""));
            let on = snapshot.image_num_nodes(&name);
            if on > 0 {
                images.push((name, on as f64 / total as f64));
            }
        }
        // No node has any of the images: every node would score 0.
        if images.is_empty() {
            return Status::skip();
        }
        state.write(
            NAME,
            PreScoreState {
                images,
                containers: count,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for ImageLocality {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<PreScoreState>(NAME) else {
            return Err(Status::error(
                "reading \"PreScoreImageLocality\" from cycleState: not found",
            ));
        };
        let mut sum = 0i64;
        for (name, spread) in &s.images {
            if let Some(&size) = node.image_sizes.get(name) {
                sum = sum.saturating_add((size as f64 * spread) as i64);
            }
        }
        Ok(calculate_priority(sum, s.containers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::testing;
    use k8s_openapi::api::core::v1::{Container, ContainerImage, Node, Pod, PodSpec};

    fn image_node(name: &str, images: &[(&[&str], i64)]) -> Node {
        let mut n = testing::node(name, &[], &[]);
        if let Some(st) = n.status.as_mut() {
            st.images = (!images.is_empty()).then(|| {
                images
                    .iter()
                    .map(|(names, mb)| ContainerImage {
                        names: Some(names.iter().map(|s| s.to_string()).collect()),
                        size_bytes: Some(mb * MB),
                    })
                    .collect()
            });
        }
        n
    }

    fn image_pod(images: &[&str], init: &[&str]) -> Pod {
        let c = |i: &str| Container {
            name: "c".into(),
            image: Some(i.into()),
            ..Default::default()
        };
        let mut p = testing::pod("p", &[]);
        p.spec = Some(PodSpec {
            containers: images.iter().map(|i| c(i)).collect(),
            init_containers: (!init.is_empty()).then(|| init.iter().map(|i| c(i)).collect()),
            ..Default::default()
        });
        p
    }

    fn node_403002000(name: &str) -> Node {
        image_node(
            name,
            &[
                (&["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40),
                (&["gcr.io/300:latest", "gcr.io/300:v1"], 300),
                (&["gcr.io/2000:latest"], 2000),
            ],
        )
    }

    fn node_25010(name: &str) -> Node {
        image_node(
            name,
            &[
                (&["gcr.io/250:latest"], 250),
                (&["gcr.io/10:latest", "gcr.io/10:v1"], 10),
            ],
        )
    }

    fn node_60040900(name: &str) -> Node {
        image_node(
            name,
            &[
                (&["gcr.io/600:latest"], 600),
                (&["gcr.io/40:latest"], 40),
                (&["gcr.io/900:latest"], 900),
            ],
        )
    }

    fn node_300600900(name: &str) -> Node {
        image_node(
            name,
            &[
                (&["gcr.io/300:latest"], 300),
                (&["gcr.io/600:latest"], 600),
                (&["gcr.io/900:latest"], 900),
            ],
        )
    }

    fn node_400030(name: &str) -> Node {
        image_node(
            name,
            &[(&["gcr.io/4000:latest"], 4000), (&["gcr.io/30:latest"], 30)],
        )
    }

    fn node_203040(name: &str) -> Node {
        image_node(
            name,
            &[
                (&["gcr.io/20:latest"], 20),
                (&["gcr.io/30:latest"], 30),
                (&["gcr.io/40:latest"], 40),
            ],
        )
    }

    /// Run PreScore and Score on every node; a skipped PreScore means 0 everywhere.
    fn scores(pod: Pod, nodes: Vec<Node>) -> Vec<i64> {
        let snapshot = testing::snapshot(nodes.into_iter().map(|n| (n, vec![])).collect());
        let pod = PodInfo::new(pod);
        let mut state = CycleState::new();
        let infos: Vec<&NodeInfo> = snapshot.nodes().iter().collect();
        let st = ImageLocality.pre_score(&mut state, &pod, &infos, &snapshot);
        if st.code == crate::framework::Code::Skip {
            return vec![0; infos.len()];
        }
        assert!(st.is_success(), "{st:?}");
        infos
            .iter()
            .map(|n| ImageLocality.score(&state, &pod, n).unwrap())
            .collect()
    }

    #[test]
    fn prefers_nodes_with_large_images_that_few_nodes_have() {
        let cases: Vec<(&str, Pod, Vec<Node>, Vec<i64>)> = vec![
            (
                // node2: 100 · (250M/2 − 23M) / (1000M·2 − 23M) = 5
                "two images spread on two nodes, prefer the larger image one",
                image_pod(&["gcr.io/40", "gcr.io/250"], &[]),
                vec![node_403002000("node1"), node_25010("node2")],
                vec![0, 5],
            ),
            (
                // node1: 100 · ((40M + 300M)/2 − 23M) / (1000M·2 − 23M) = 7
                "two images on one node, prefer this node",
                image_pod(&["gcr.io/40", "gcr.io/300"], &[]),
                vec![node_403002000("node1"), node_25010("node2")],
                vec![7, 0],
            ),
            (
                "if exceed limit, use limit",
                image_pod(&["gcr.io/10", "gcr.io/4000"], &[]),
                vec![node_400030("node1"), node_25010("node2")],
                vec![100, 0],
            ),
            (
                // node1: 100 · (4000M/3 − 23M) / (1000M·2 − 23M) = 66
                "if exceed limit, use limit (with node which has no images present)",
                image_pod(&["gcr.io/10", "gcr.io/4000"], &[]),
                vec![node_400030("node1"), node_25010("node2"), image_node("node3", &[])],
                vec![66, 0, 0],
            ),
            (
                "pod with multiple large images, node2 is preferred",
                image_pod(&["gcr.io/300", "gcr.io/600", "gcr.io/900"], &[]),
                vec![node_60040900("node1"), node_300600900("node2"), image_node("node3", &[])],
                vec![32, 36, 0],
            ),
            (
                "pod with multiple small images",
                image_pod(&["gcr.io/30", "gcr.io/40"], &[]),
                vec![node_203040("node1"), node_400030("node2")],
                vec![1, 0],
            ),
            (
                // node1: 100 · (300M/2 − 23M) / (1000M·2 − 23M) = 6
                "include InitContainers: two images spread on two nodes, prefer the larger image one",
                image_pod(&["gcr.io/30"], &["gcr.io/300"]),
                vec![node_403002000("node1"), node_203040("node2")],
                vec![6, 0],
            ),
        ];
        for (name, pod, nodes, want) in cases {
            assert_eq!(scores(pod, nodes), want, "{name}");
        }
    }

    #[test]
    fn pre_score_skips_when_no_node_has_any_image() {
        let snapshot = testing::snapshot(vec![(node_25010("node1"), vec![])]);
        let pod = PodInfo::new(image_pod(&["gcr.io/unknown"], &[]));
        let mut state = CycleState::new();
        let st = ImageLocality.pre_score(&mut state, &pod, &[], &snapshot);
        assert_eq!(st.code, crate::framework::Code::Skip);
        let empty = PodInfo::new(testing::pod("p", &[]));
        let st = ImageLocality.pre_score(&mut state, &empty, &[], &snapshot);
        assert_eq!(st.code, crate::framework::Code::Skip);
        let st = ImageLocality.pre_score(&mut state, &pod, &[], &Snapshot::new());
        assert_eq!(st.code, crate::framework::Code::Skip);
    }

    #[test]
    fn image_names_get_the_latest_tag_when_untagged() {
        let digest = "root@sha256:4813494d137e1631bba301d5acab6e7bb7aa74ce1185d456565ef51d737677b2";
        for (name, input, output) in [
            ("add :latest postfix 1", "root", "root:latest"),
            (
                "add :latest postfix 2",
                "gcr.io:5000/root",
                "gcr.io:5000/root:latest",
            ),
            ("keep it as is 1", "root:tag", "root:tag"),
            ("keep it as is 2", digest, digest),
        ] {
            assert_eq!(normalized_image_name(input), output, "{name}");
        }
    }

    #[test]
    fn priority_is_clamped_between_thresholds() {
        assert_eq!(calculate_priority(0, 1), 0);
        assert_eq!(calculate_priority(MAX_CONTAINER_THRESHOLD * 5, 1), 100);
        assert_eq!(calculate_priority(i64::MAX, i64::MAX), 100);
        // A pod without containers scores 0 instead of dividing by a negative range.
        assert_eq!(calculate_priority(0, 0), 0);
    }
}
