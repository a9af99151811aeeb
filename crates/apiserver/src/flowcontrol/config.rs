//! The FlowSchemas and PriorityLevelConfigurations as the filter uses them (upstream's
//! `apf_controller.go` digestion): typed out of their JSON, the mandatory `exempt` and `catch-all`
//! objects imagined when missing (as upstream does, so a deleted one never leaves requests
//! unclassified), FlowSchemas naming no existing level dropped, the rest in matching order, and
//! each limited level's nominal concurrency limit: its share of the server's.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

/// A subject of a policy rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Subject {
    User(String),
    Group(String),
    ServiceAccount { namespace: String, name: String },
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceRule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub cluster_scope: bool,
    pub namespaces: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NonResourceRule {
    pub verbs: Vec<String>,
    pub urls: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PolicyRule {
    pub subjects: Vec<Subject>,
    pub resource_rules: Vec<ResourceRule>,
    pub non_resource_rules: Vec<NonResourceRule>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Distinguisher {
    None,
    ByUser,
    ByNamespace,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlowSchema {
    pub name: String,
    pub uid: String,
    pub precedence: i64,
    pub level: String,
    pub distinguisher: Distinguisher,
    pub rules: Vec<PolicyRule>,
}

/// What a limited level does with a request it cannot run now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitResponse {
    Reject,
    Queue {
        queues: usize,
        hand_size: usize,
        queue_length_limit: usize,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LevelKind {
    Exempt,
    Limited {
        shares: u64,
        lendable_percent: u64,
        borrowing_limit_percent: Option<u64>,
        response: LimitResponse,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PriorityLevel {
    pub name: String,
    pub uid: String,
    pub kind: LevelKind,
}

/// The configuration in force.
#[derive(Clone, Debug, Default)]
pub struct Digest {
    /// In matching order: matchingPrecedence, then name.
    pub schemas: Vec<FlowSchema>,
    pub levels: BTreeMap<String, PriorityLevel>,
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn subject(v: &Value) -> Option<Subject> {
    match v["kind"].as_str()? {
        "User" => Some(Subject::User(v.pointer("/user/name")?.as_str()?.into())),
        "Group" => Some(Subject::Group(v.pointer("/group/name")?.as_str()?.into())),
        "ServiceAccount" => Some(Subject::ServiceAccount {
            namespace: v.pointer("/serviceAccount/namespace")?.as_str()?.into(),
            name: v.pointer("/serviceAccount/name")?.as_str()?.into(),
        }),
        _ => None,
    }
}

fn rule(v: &Value) -> PolicyRule {
    let list = |key: &str| v[key].as_array().cloned().unwrap_or_default();
    PolicyRule {
        subjects: list("subjects").iter().filter_map(subject).collect(),
        resource_rules: list("resourceRules")
            .iter()
            .map(|r| ResourceRule {
                verbs: strings(&r["verbs"]),
                api_groups: strings(&r["apiGroups"]),
                resources: strings(&r["resources"]),
                cluster_scope: r["clusterScope"].as_bool().unwrap_or(false),
                namespaces: strings(&r["namespaces"]),
            })
            .collect(),
        non_resource_rules: list("nonResourceRules")
            .iter()
            .map(|r| NonResourceRule {
                verbs: strings(&r["verbs"]),
                urls: strings(&r["nonResourceURLs"]),
            })
            .collect(),
    }
}

/// A FlowSchema object, typed (None if it is being deleted).
pub fn flow_schema(obj: &Value) -> Option<FlowSchema> {
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    let spec = &obj["spec"];
    Some(FlowSchema {
        name: str_at(obj, "/metadata/name").to_string(),
        uid: str_at(obj, "/metadata/uid").to_string(),
        precedence: spec["matchingPrecedence"].as_i64().unwrap_or(1000),
        level: str_at(spec, "/priorityLevelConfiguration/name").to_string(),
        distinguisher: match str_at(spec, "/distinguisherMethod/type") {
            "ByUser" => Distinguisher::ByUser,
            "ByNamespace" => Distinguisher::ByNamespace,
            _ => Distinguisher::None,
        },
        rules: spec["rules"]
            .as_array()
            .map(|rs| rs.iter().map(rule).collect())
            .unwrap_or_default(),
    })
}

/// A PriorityLevelConfiguration object, typed (None if it is being deleted). Missing fields take
/// upstream's v1 defaults (shares 30, 64 queues, hands of 8, 50 requests a queue).
pub fn priority_level(obj: &Value) -> Option<PriorityLevel> {
    if obj.pointer("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    let spec = &obj["spec"];
    let num = |v: &Value, default: u64| v.as_u64().unwrap_or(default);
    let kind = if spec["type"] == "Exempt" {
        LevelKind::Exempt
    } else {
        let limited = &spec["limited"];
        let response = &limited["limitResponse"];
        let queuing = &response["queuing"];
        LevelKind::Limited {
            shares: num(&limited["nominalConcurrencyShares"], 30),
            lendable_percent: num(&limited["lendablePercent"], 0).min(100),
            borrowing_limit_percent: limited["borrowingLimitPercent"].as_u64(),
            response: if response["type"] == "Queue" {
                LimitResponse::Queue {
                    queues: num(&queuing["queues"], 64).clamp(1, 1 << 16) as usize,
                    hand_size: num(&queuing["handSize"], 8).max(1) as usize,
                    queue_length_limit: num(&queuing["queueLengthLimit"], 50).clamp(1, 1 << 16)
                        as usize,
                }
            } else {
                LimitResponse::Reject
            },
        }
    };
    Some(PriorityLevel {
        name: str_at(obj, "/metadata/name").to_string(),
        uid: str_at(obj, "/metadata/uid").to_string(),
        kind,
    })
}

/// The configuration from the objects in storage, with the mandatory ones added when missing.
pub fn digest(schema_objects: &[Value], level_objects: &[Value]) -> Digest {
    let mut levels: BTreeMap<String, PriorityLevel> = level_objects
        .iter()
        .filter_map(priority_level)
        .map(|l| (l.name.clone(), l))
        .collect();
    for mandatory in crate::bootstrap::flowcontrol::priority_levels() {
        if let Some(level) = priority_level(&mandatory) {
            levels.entry(level.name.clone()).or_insert(level);
        }
    }
    let mut schemas: Vec<FlowSchema> = schema_objects.iter().filter_map(flow_schema).collect();
    let present: HashSet<String> = schemas.iter().map(|s| s.name.clone()).collect();
    for mandatory in crate::bootstrap::flowcontrol::flow_schemas() {
        if let Some(schema) = flow_schema(&mandatory) {
            if !present.contains(&schema.name) {
                schemas.push(schema);
            }
        }
    }
    // Dangling FlowSchemas match nothing.
    schemas.retain(|s| levels.contains_key(&s.level));
    schemas.sort_by(|a, b| (a.precedence, &a.name).cmp(&(b.precedence, &b.name)));
    Digest { schemas, levels }
}

/// Each limited level's nominal concurrency limit (upstream's NominalCL): `ceil(server * NCS(l) /
/// sum of NCS)`, at least 1 so a level of 0 shares still moves (upstream lets it live on borrowed
/// seats only, which rkube does not do).
pub fn nominal_limits(
    levels: &BTreeMap<String, PriorityLevel>,
    server: usize,
) -> BTreeMap<String, usize> {
    let total: u64 = levels
        .values()
        .map(|l| match l.kind {
            LevelKind::Limited { shares, .. } => shares,
            LevelKind::Exempt => 0,
        })
        .sum();
    levels
        .values()
        .filter_map(|l| match l.kind {
            LevelKind::Limited { shares, .. } => {
                let limit = if total == 0 {
                    server
                } else {
                    ((server as f64) * (shares as f64) / (total as f64)).ceil() as usize
                };
                Some((l.name.clone(), limit.max(1)))
            }
            LevelKind::Exempt => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mandatory_objects_are_imagined_and_dangling_schemas_dropped() {
        let fs = json!({"metadata": {"name": "mine", "uid": "u1"}, "spec": {
            "priorityLevelConfiguration": {"name": "missing"}, "matchingPrecedence": 5}});
        let d = digest(&[fs], &[]);
        let names: Vec<&str> = d.schemas.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["exempt", "catch-all"]);
        assert_eq!(d.levels.len(), 2);
        assert_eq!(d.levels["exempt"].kind, LevelKind::Exempt);
    }

    #[test]
    fn limits_are_shares_of_the_server() {
        let level = |name: &str, shares: u64| {
            json!({"metadata": {"name": name}, "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": shares, "limitResponse": {"type": "Queue",
                "queuing": {"queues": 16, "handSize": 4, "queueLengthLimit": 10}}}}})
        };
        let d = digest(&[], &[level("a", 20), level("b", 75)]);
        let limits = nominal_limits(&d.levels, 600);
        // catch-all has 5 shares: 100 in all.
        assert_eq!(limits["a"], 120);
        assert_eq!(limits["b"], 450);
        assert_eq!(limits["catch-all"], 30);
        assert!(!limits.contains_key("exempt"));
        assert_eq!(
            d.levels["a"].kind,
            LevelKind::Limited {
                shares: 20,
                lendable_percent: 0,
                borrowing_limit_percent: None,
                response: LimitResponse::Queue {
                    queues: 16,
                    hand_size: 4,
                    queue_length_limit: 10
                }
            }
        );
    }
}
