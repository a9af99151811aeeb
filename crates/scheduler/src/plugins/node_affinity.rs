//! NodeAffinity (upstream `nodeaffinity`, matching as `component-helpers/scheduling/corev1/
//! nodeaffinity`): `spec.nodeSelector` and the required node affinity must match; matching
//! preferred terms add their weights to the score.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::api::core::v1::{NodeSelectorRequirement, NodeSelectorTerm, Pod};

use super::default_normalize_score;
use crate::framework::{action, ClusterEvent, EventResource};
use crate::framework::{
    CycleState, FilterPlugin, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, ScorePlugin,
    Status, MAX_NODE_SCORE,
};

pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";

pub struct NodeAffinity;

/// A requirement that upstream fails to parse (its whole term then matches nothing).
struct Invalid;

/// A label requirement (upstream `labels.Requirement` built from a NodeSelectorRequirement).
fn label_requirement_matches(
    r: &NodeSelectorRequirement,
    labels: &BTreeMap<String, String>,
) -> Result<bool, Invalid> {
    let values = r.values.as_deref().unwrap_or_default();
    let label = labels.get(&r.key);
    match r.operator.as_str() {
        "In" | "NotIn" if values.is_empty() => Err(Invalid),
        "In" => Ok(label.is_some_and(|l| values.contains(l))),
        "NotIn" => Ok(!label.is_some_and(|l| values.contains(l))),
        "Exists" | "DoesNotExist" if !values.is_empty() => Err(Invalid),
        "Exists" => Ok(label.is_some()),
        "DoesNotExist" => Ok(label.is_none()),
        op @ ("Gt" | "Lt") => {
            let [value] = values else { return Err(Invalid) };
            let want: i64 = value.parse().map_err(|_| Invalid)?;
            // A missing or non-integer label doesn't match.
            Ok(label
                .and_then(|l| l.parse::<i64>().ok())
                .is_some_and(|have| if op == "Gt" { have > want } else { have < want }))
        }
        _ => Err(Invalid),
    }
}

/// A field requirement: only In/NotIn with exactly one value; the only field a node has is
/// `metadata.name` (any other key reads as "").
fn field_requirement_matches(
    r: &NodeSelectorRequirement,
    node_name: &str,
) -> Result<bool, Invalid> {
    let field = if r.key == "metadata.name" {
        node_name
    } else {
        ""
    };
    match (r.operator.as_str(), r.values.as_deref().unwrap_or_default()) {
        ("In", [v]) => Ok(field == v),
        ("NotIn", [v]) => Ok(field != v),
        _ => Err(Invalid),
    }
}

/// ANDs the expressions and fields of a term; an empty term matches nothing.
fn term_matches(
    term: &NodeSelectorTerm,
    labels: &BTreeMap<String, String>,
    node_name: &str,
) -> bool {
    let exprs = term.match_expressions.as_deref().unwrap_or_default();
    let fields = term.match_fields.as_deref().unwrap_or_default();
    if exprs.is_empty() && fields.is_empty() {
        return false;
    }
    // Evaluate all requirements so that a parse error anywhere voids the term, as upstream.
    let results = exprs
        .iter()
        .map(|r| label_requirement_matches(r, labels))
        .chain(
            fields
                .iter()
                .map(|r| field_requirement_matches(r, node_name)),
        );
    let mut all = true;
    for r in results {
        match r {
            Ok(m) => all &= m,
            Err(Invalid) => return false,
        }
    }
    all
}

static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

fn node_labels(node: &NodeInfo) -> &BTreeMap<String, String> {
    node.labels().unwrap_or(&NO_LABELS)
}

/// Upstream `corev1.MatchNodeSelectorTerms`: any term of the selector matches the node.
pub fn node_selector_matches(
    sel: &k8s_openapi::api::core::v1::NodeSelector,
    node: &NodeInfo,
) -> bool {
    let labels = node_labels(node);
    sel.node_selector_terms
        .iter()
        .any(|t| term_matches(t, labels, node.name()))
}

/// Upstream `GetRequiredNodeAffinity(pod).Match(node)`: nodeSelector AND (any required term).
pub fn required_node_affinity_matches(pod: &Pod, node: &NodeInfo) -> bool {
    let Some(spec) = pod.spec.as_ref() else {
        return true;
    };
    let labels = node_labels(node);
    if let Some(selector) = &spec.node_selector {
        if !selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            return false;
        }
    }
    let required = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.required_during_scheduling_ignored_during_execution
                .as_ref()
        });
    match required {
        None => true,
        Some(sel) => sel
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, labels, node.name())),
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if required_node_affinity_matches(pod, node) {
            Status::Success
        } else {
            Status::UnschedulableAndUnresolvable(ERR_REASON_POD.into())
        }
    }
}

impl ScorePlugin for NodeAffinity {
    /// The sum of the weights of the preferred terms the node matches.
    fn score(&self, _state: &CycleState, pod: &Pod, node: &NodeInfo) -> i64 {
        let preferred = pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.preferred_during_scheduling_ignored_during_execution
                    .as_deref()
            })
            .unwrap_or_default();
        if preferred.is_empty() {
            return 0;
        }
        let labels = node_labels(node);
        preferred
            .iter()
            .filter(|p| p.weight != 0 && term_matches(&p.preference, labels, node.name()))
            .map(|p| i64::from(p.weight))
            .sum()
    }

    fn normalize(&self, _state: &CycleState, _pod: &Pod, scores: &mut [i64]) {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
    }
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        "NodeAffinity"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![ClusterEvent::new(
            EventResource::Node,
            action::ADD | action::UPDATE_NODE_LABEL,
        )]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";

impl PreFilterPlugin for NodeAffinity {
    /// Skips pods without a node selector or required affinity; narrows the nodes when every
    /// required term names nodes (`matchFields` on `metadata.name` with `In`).
    fn pre_filter(&self, _state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        let spec = pod.spec.as_ref();
        let required = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        let has_selector = spec
            .and_then(|s| s.node_selector.as_ref())
            .is_some_and(|s| !s.is_empty());
        let Some(required) = required else {
            return (
                None,
                if has_selector {
                    Status::Success
                } else {
                    Status::Skip
                },
            );
        };
        let mut names: Option<HashSet<String>> = None;
        for t in &required.node_selector_terms {
            let mut term_names: Option<HashSet<String>> = None;
            for r in t.match_fields.iter().flatten() {
                if r.key == "metadata.name" && r.operator == "In" {
                    let s: HashSet<String> = r.values.iter().flatten().cloned().collect();
                    term_names = Some(match term_names {
                        None => s,
                        Some(prev) => prev.intersection(&s).cloned().collect(),
                    });
                }
            }
            let Some(term_names) = term_names else {
                return (None, Status::Success);
            };
            names.get_or_insert_with(HashSet::new).extend(term_names);
        }
        match names {
            Some(n) if n.is_empty() => (
                None,
                Status::UnschedulableAndUnresolvable(ERR_REASON_CONFLICT.into()),
            ),
            Some(n) => (
                Some(PreFilterResult {
                    node_names: Some(n),
                }),
                Status::Success,
            ),
            None => (None, Status::Success),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{labeled_node, pod, st};
    use serde_json::{json, Value};

    fn expr(key: &str, op: &str, values: &[&str]) -> Value {
        json!({"key": key, "operator": op, "values": values})
    }

    /// Required node affinity with the given terms (each a list of match expressions).
    fn required(terms: Value) -> Value {
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
    }

    #[test]
    fn filter() {
        let fail = Status::UnschedulableAndUnresolvable(ERR_REASON_POD.into());
        let ok = Status::Success;
        let foo_bar = json!({"foo": "bar"});
        let cases: Vec<(&str, Value, Value, &str, Status)> = vec![
            ("no selector", json!({}), foo_bar.clone(), "n", ok.clone()),
            (
                "missing labels",
                json!({"nodeSelector": {"foo": "bar"}}),
                json!({}),
                "n",
                fail.clone(),
            ),
            (
                "same labels",
                json!({"nodeSelector": {"foo": "bar"}}),
                foo_bar.clone(),
                "n",
                ok.clone(),
            ),
            (
                "node labels are a superset",
                json!({"nodeSelector": {"foo": "bar"}}),
                json!({"foo": "bar", "baz": "blah"}),
                "n",
                ok.clone(),
            ),
            (
                "node labels are a subset",
                json!({"nodeSelector": {"foo": "bar", "baz": "blah"}}),
                foo_bar.clone(),
                "n",
                fail.clone(),
            ),
            (
                "In matches",
                required(json!([{"matchExpressions": [expr("foo", "In", &["bar", "value2"])]}])),
                foo_bar.clone(),
                "n",
                ok.clone(),
            ),
            (
                "In doesn't match",
                required(json!([{"matchExpressions": [expr("foo", "In", &["value1", "value2"])]}])),
                foo_bar.clone(),
                "n",
                fail.clone(),
            ),
            (
                "Gt",
                required(json!([{"matchExpressions": [expr("kernel-version", "Gt", &["0204"])]}])),
                json!({"kernel-version": "0206"}),
                "n",
                ok.clone(),
            ),
            (
                "Lt fails",
                required(json!([{"matchExpressions": [expr("kernel-version", "Lt", &["0204"])]}])),
                json!({"kernel-version": "0206"}),
                "n",
                fail.clone(),
            ),
            (
                "Gt on a non-integer label",
                required(json!([{"matchExpressions": [expr("v", "Gt", &["1"])]}])),
                json!({"v": "abc"}),
                "n",
                fail.clone(),
            ),
            (
                "Gt with an invalid value",
                required(json!([{"matchExpressions": [expr("v", "Gt", &["abc"])]}])),
                json!({"v": "2"}),
                "n",
                fail.clone(),
            ),
            (
                "NotIn",
                required(
                    json!([{"matchExpressions": [expr("mem-type", "NotIn", &["DDR", "DDR2"])]}]),
                ),
                json!({"mem-type": "DDR3"}),
                "n",
                ok.clone(),
            ),
            (
                "NotIn on a missing label",
                required(json!([{"matchExpressions": [expr("mem-type", "NotIn", &["DDR"])]}])),
                json!({}),
                "n",
                ok.clone(),
            ),
            (
                "Exists",
                required(json!([{"matchExpressions": [expr("GPU", "Exists", &[])]}])),
                json!({"GPU": "NVIDIA-GRID-K1"}),
                "n",
                ok.clone(),
            ),
            (
                "DoesNotExist",
                required(json!([{"matchExpressions": [expr("GPU", "DoesNotExist", &[])]}])),
                json!({"GPU": "x"}),
                "n",
                fail.clone(),
            ),
            (
                "Exists with values is invalid",
                required(json!([{"matchExpressions": [expr("GPU", "Exists", &["x"])]}])),
                json!({"GPU": "x"}),
                "n",
                fail.clone(),
            ),
            (
                "expressions are ANDed",
                required(
                    json!([{"matchExpressions": [expr("GPU", "Exists", &[]), expr("GPU", "NotIn", &["AMD", "INTER"])]}]),
                ),
                json!({"GPU": "AMD"}),
                "n",
                fail.clone(),
            ),
            (
                "terms are ORed",
                required(
                    json!([{"matchExpressions": [expr("foo", "In", &["x"])]}, {"matchExpressions": [expr("diffkey", "In", &["wrong", "value2"])]}]),
                ),
                json!({"diffkey": "value2"}),
                "n",
                ok.clone(),
            ),
            (
                "an invalid term doesn't spoil a valid one",
                required(
                    json!([{"matchExpressions": [expr("foo", "In", &[])]}, {"matchExpressions": [expr("foo", "Exists", &[])]}]),
                ),
                foo_bar.clone(),
                "n",
                ok.clone(),
            ),
            (
                "empty list of terms",
                required(json!([])),
                foo_bar.clone(),
                "n",
                fail.clone(),
            ),
            (
                "term with no expressions",
                required(json!([{"matchExpressions": []}])),
                foo_bar.clone(),
                "n",
                fail.clone(),
            ),
            (
                "empty term",
                required(json!([{}])),
                foo_bar.clone(),
                "n",
                fail.clone(),
            ),
            (
                "no affinity at all",
                json!({"affinity": {}}),
                foo_bar.clone(),
                "n",
                ok.clone(),
            ),
            (
                "nodeSelector and affinity both match",
                {
                    let mut s =
                        required(json!([{"matchExpressions": [expr("foo", "Exists", &[])]}]));
                    s["nodeSelector"] = foo_bar.clone();
                    s
                },
                foo_bar.clone(),
                "n",
                ok.clone(),
            ),
            (
                "affinity matches but nodeSelector doesn't",
                {
                    let mut s =
                        required(json!([{"matchExpressions": [expr("foo", "Exists", &[])]}]));
                    s["nodeSelector"] = json!({"foo": "other"});
                    s
                },
                foo_bar.clone(),
                "n",
                fail.clone(),
            ),
            (
                "matchFields name In",
                required(json!([{"matchFields": [expr("metadata.name", "In", &["node1"])]}])),
                json!({}),
                "node1",
                ok.clone(),
            ),
            (
                "matchFields name In, other node",
                required(json!([{"matchFields": [expr("metadata.name", "In", &["node1"])]}])),
                json!({}),
                "node2",
                fail.clone(),
            ),
            (
                "matchFields name NotIn",
                required(json!([{"matchFields": [expr("metadata.name", "NotIn", &["node1"])]}])),
                json!({}),
                "node2",
                ok.clone(),
            ),
            (
                "matchFields needs one value",
                required(
                    json!([{"matchFields": [expr("metadata.name", "In", &["node1", "node2"])]}]),
                ),
                json!({}),
                "node1",
                fail.clone(),
            ),
            (
                "matchFields and matchExpressions ANDed in a term",
                required(
                    json!([{"matchFields": [expr("metadata.name", "In", &["node1"])], "matchExpressions": [expr("foo", "In", &["bar"])]}]),
                ),
                json!({"foo": "other"}),
                "node1",
                fail.clone(),
            ),
            (
                "matchFields in one term, expressions in another",
                required(
                    json!([{"matchFields": [expr("metadata.name", "In", &["node1"])]}, {"matchExpressions": [expr("foo", "In", &["bar"])]}]),
                ),
                foo_bar.clone(),
                "node2",
                ok.clone(),
            ),
        ];
        for (name, spec, labels, node_name, want) in cases {
            assert_eq!(
                NodeAffinity.filter(&st(), &pod("p", spec), &labeled_node(node_name, labels)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn score() {
        let pref = |terms: Value| json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": terms}}});
        let affinity1 = pref(
            json!([{"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}}]),
        );
        let affinity2 = pref(json!([
            {"weight": 2, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
            {"weight": 4, "preference": {"matchExpressions": [expr("key", "In", &["value"])]}},
            {"weight": 5, "preference": {"matchExpressions": [expr("foo", "In", &["bar"]), expr("key", "In", &["value"]), expr("az", "In", &["az1"])]}},
            {"weight": 0, "preference": {"matchExpressions": [expr("foo", "In", &["bar"])]}},
        ]));
        let nodes = [
            json!({"foo": "bar"}),
            json!({"foo": "bar", "key": "value", "az": "az1"}),
            json!({"key": "value"}),
            json!({"other": "x"}),
        ];
        let cases = vec![
            ("no affinity: all the same", json!({}), vec![0, 0, 0, 0]),
            (
                "no node matches",
                pref(
                    json!([{"weight": 2, "preference": {"matchExpressions": [expr("x", "In", &["y"])]}}]),
                ),
                vec![0, 0, 0, 0],
            ),
            ("only foo=bar nodes match", affinity1, vec![100, 100, 0, 0]),
            (
                "weights add up, normalized to the best",
                affinity2,
                vec![18, 100, 36, 0],
            ),
        ];
        for (name, spec, want) in cases {
            let p = pod("p", spec);
            let mut scores: Vec<i64> = nodes
                .iter()
                .enumerate()
                .map(|(i, l)| {
                    ScorePlugin::score(
                        &NodeAffinity,
                        &st(),
                        &p,
                        &labeled_node(&format!("n{i}"), l.clone()),
                    )
                })
                .collect();
            NodeAffinity.normalize(&st(), &p, &mut scores);
            assert_eq!(scores, want, "{name}");
        }
    }
}
