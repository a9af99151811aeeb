//! Parsing, defaulting and validation of KubeSchedulerConfiguration, and the plugin expansion of
//! profiles (after upstream's `default_plugins_test.go` and `framework_test.go`, our own cases).

use super::*;
use crate::profile::enabled_at;

fn parse(yaml: &str) -> Result<KubeSchedulerConfiguration, String> {
    KubeSchedulerConfiguration::parse(&format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{yaml}"
    ))
}

fn at(c: &KubeSchedulerConfiguration, profile: usize, point: &str) -> Vec<String> {
    enabled_at(&c.profiles[profile], point).unwrap()
}

#[test]
fn defaults_are_upstreams() {
    let c = parse("").unwrap();
    assert_eq!(c.parallelism, Some(16));
    assert_eq!(c.profiles.len(), 1);
    assert_eq!(c.profiles[0].name(), "default-scheduler");
    assert_eq!(at(&c, 0, "queueSort"), ["PrioritySort"]);
    assert_eq!(
        at(&c, 0, "preEnqueue"),
        ["SchedulingGates", "DynamicResources"]
    );
    assert_eq!(
        at(&c, 0, "filter"),
        [
            "NodeUnschedulable",
            "NodeName",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources"
        ]
    );
    assert_eq!(
        at(&c, 0, "score"),
        [
            "TaintToleration",
            "NodeAffinity",
            "NodeResourcesFit",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeResourcesBalancedAllocation",
            "ImageLocality"
        ]
    );
    assert_eq!(
        at(&c, 0, "preFilter"),
        [
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources"
        ]
    );
    assert_eq!(
        at(&c, 0, "postFilter"),
        ["DynamicResources", "DefaultPreemption"]
    );
    assert_eq!(at(&c, 0, "bind"), ["DefaultBinder"]);
    assert_eq!(at(&c, 0, "preBind"), ["VolumeBinding", "DynamicResources"]);
    assert_eq!(at(&c, 0, "reserve"), ["VolumeBinding", "DynamicResources"]);
}

#[test]
fn score_weights_follow_the_default_profile() {
    let c = parse("").unwrap();
    let fw = crate::profile::new_framework(
        &c.profiles[0],
        crate::framework::Handle::default(),
        std::sync::Arc::new(crate::queue::Nominator::default()),
    )
    .unwrap();
    let w: Vec<(&str, i64)> = fw.score.iter().map(|(p, w)| (p.name(), *w)).collect();
    assert_eq!(
        w,
        [
            ("TaintToleration", 3),
            ("NodeAffinity", 2),
            ("NodeResourcesFit", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("DynamicResources", 1),
            ("NodeResourcesBalancedAllocation", 1),
            ("ImageLocality", 1)
        ]
    );
}

#[test]
fn profiles_enable_and_disable_per_extension_point() {
    let c = parse(
        r#"
parallelism: 4
percentageOfNodesToScore: 50
profiles:
- schedulerName: default-scheduler
- schedulerName: no-scoring
  percentageOfNodesToScore: 100
  plugins:
    score:
      disabled:
      - name: "*"
    preScore:
      disabled:
      - name: "*"
- schedulerName: custom
  plugins:
    filter:
      disabled:
      - name: NodePorts
    score:
      enabled:
      - name: NodeResourcesFit
        weight: 5
      - name: ImageLocality
        weight: 7
      disabled:
      - name: NodeResourcesBalancedAllocation
  pluginConfig:
  - name: NodeResourcesFit
    args:
      apiVersion: kubescheduler.config.k8s.io/v1
      kind: NodeResourcesFitArgs
      scoringStrategy:
        type: MostAllocated
        resources:
        - name: cpu
          weight: 1
"#,
    )
    .unwrap();
    assert_eq!(c.parallelism, Some(4));
    assert_eq!(c.profiles[1].percentage_of_nodes_to_score, Some(100));
    assert!(at(&c, 1, "score").is_empty());
    assert_eq!(at(&c, 1, "filter").len(), 13);
    assert!(!at(&c, 2, "filter").contains(&"NodePorts".to_string()));
    // Explicit score entries override the multiPoint ones and come first, in their order.
    assert_eq!(
        at(&c, 2, "score"),
        [
            "NodeResourcesFit",
            "ImageLocality",
            "TaintToleration",
            "NodeAffinity",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources"
        ]
    );
    let fw = crate::profile::new_framework(
        &c.profiles[2],
        crate::framework::Handle::default(),
        std::sync::Arc::new(crate::queue::Nominator::default()),
    )
    .unwrap();
    let w: Vec<i64> = fw.score.iter().map(|(_, w)| *w).collect();
    assert_eq!(w, [5, 7, 3, 2, 2, 2, 1]);
    assert!(c.profiles[2].args("NodeResourcesFit").is_some());
}

#[test]
fn multi_point_can_be_replaced() {
    let c = parse(
        r#"
profiles:
- plugins:
    multiPoint:
      enabled:
      - name: PrioritySort
      - name: NodeName
      - name: DefaultBinder
      disabled:
      - name: "*"
"#,
    )
    .unwrap();
    assert_eq!(at(&c, 0, "filter"), ["NodeName"]);
    assert!(at(&c, 0, "score").is_empty());
    assert!(at(&c, 0, "postFilter").is_empty());
}

#[test]
fn invalid_configurations() {
    let cases = [
        ("apiVersion: v1\nkind: Pod\n", "no kind"),
        ("parallelism: 0", "parallelism"),
        ("percentageOfNodesToScore: 101", "percentageOfNodesToScore"),
        ("bogus: 1", "unknown field"),
        (
            "profiles:\n- schedulerName: a\n- schedulerName: a\n",
            "Duplicate",
        ),
        (
            "podInitialBackoffSeconds: 5\npodMaxBackoffSeconds: 2\n",
            "podMaxBackoffSeconds",
        ),
        (
            "leaderElection:\n  leaseDuration: forever\n",
            "leaseDuration",
        ),
        ("extenders:\n- urlPrefix: http://x\n", "extenders"),
        (
            "profiles:\n- pluginConfig:\n  - name: X\n  - name: X\n",
            "pluginConfig",
        ),
    ];
    for (yaml, want) in cases {
        let text = if yaml.starts_with("apiVersion") {
            yaml.to_string()
        } else {
            format!("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{yaml}")
        };
        let err = KubeSchedulerConfiguration::parse(&text).unwrap_err();
        assert!(err.contains(want), "{yaml:?}: {err}");
    }
}

#[test]
fn profiles_that_do_not_build() {
    let build = |yaml: &str| {
        let c = parse(yaml).unwrap();
        crate::scheduler::SchedulerConfig { configuration: c }.check()
    };
    let bad_args = "profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      scoringStrategy:\n        type: Nope\n";
    assert!(build(bad_args).unwrap_err().contains("Nope"));
    let unknown =
        "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: NoSuchPlugin\n";
    assert!(build(unknown).unwrap_err().contains("does not exist"));
    let wrong_point =
        "profiles:\n- plugins:\n    filter:\n      enabled:\n      - name: ImageLocality\n";
    assert!(build(wrong_point).unwrap_err().contains("does not extend"));
    let no_binder =
        "profiles:\n- plugins:\n    bind:\n      disabled:\n      - name: DefaultBinder\n";
    assert!(build(no_binder).unwrap_err().contains("bind plugin"));
    let unimplemented_disabled =
        "profiles:\n- plugins:\n    filter:\n      disabled:\n      - name: DynamicResources\n";
    assert!(build(unimplemented_disabled).is_ok());
}

#[test]
fn go_durations() {
    assert_eq!(parse_duration("15s").unwrap(), Duration::from_secs(15));
    assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
    assert!(parse_duration("").is_err());
    assert!(parse_duration("10").is_err());
    assert!(parse_duration("5x").is_err());
}
