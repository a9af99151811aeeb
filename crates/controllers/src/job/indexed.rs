//! Indexed completion mode (upstream `pkg/controller/job/indexed_job_utils.go` and `success_policy.go`):
//! completion indexes on pods, the `completedIndexes` interval strings, which indexes still need a pod,
//! which pods repeat an index, and `spec.successPolicy`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::batch::v1::{Job, SuccessPolicy};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use serde_json::json;

/// The annotation (and, since PodIndexLabel, label) holding a pod's completion index.
pub const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
/// The variable the pods of an Indexed Job read their index from.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";
/// Upstream `names.MaxGeneratedNameLength`: 63 minus the 5 random characters.
const MAX_GENERATED_NAME_LENGTH: usize = 58;

/// A set of indexes, printed as upstream's `orderedIntervals` ("0-2,4,6,7").
pub type Indexes = BTreeSet<i32>;

pub fn is_indexed(job: &Job) -> bool {
    job.spec.as_ref().and_then(|s| s.completion_mode.as_deref()) == Some("Indexed")
}

pub fn completions(job: &Job) -> i32 {
    job.spec.as_ref().and_then(|s| s.completions).unwrap_or(0)
}

/// The pod's completion index, if it has a valid one.
pub fn completion_index(pod: &Pod) -> Option<i32> {
    let v = pod.metadata.annotations.as_ref()?.get(COMPLETION_INDEX)?;
    // Upstream rejects signs and leading garbage: only plain decimal digits.
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse::<i32>().ok()
}

/// The index if it is valid for this Job (below `completions`).
pub fn valid_index(job: &Job, pod: &Pod) -> Option<i32> {
    completion_index(pod).filter(|ix| *ix < completions(job))
}

/// Parses an interval string such as "1,3-5", dropping indexes at or above `completions`
/// (upstream `parseIndexesFromString`; malformed parts are skipped).
pub fn parse(s: &str, completions: i32) -> Indexes {
    let mut out = Indexes::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.parse::<i32>(), b.parse::<i32>()),
            None => (part.parse::<i32>(), part.parse::<i32>()),
        };
        let (Ok(first), Ok(last)) = (first, last) else {
            continue;
        };
        for ix in first.max(0)..=last.min(completions - 1) {
            out.insert(ix);
        }
    }
    out
}

/// Formats indexes as upstream does: runs of three or more as "a-b", pairs as "a,b".
pub fn format(indexes: &Indexes) -> String {
    let mut runs: Vec<(i32, i32)> = Vec::new();
    for &ix in indexes {
        match runs.last_mut() {
            Some(run) if run.1 + 1 == ix => run.1 = ix,
            _ => runs.push((ix, ix)),
        }
    }
    runs.iter()
        .map(|&(a, b)| match b - a {
            0 => a.to_string(),
            1 => format!("{a},{b}"),
            _ => format!("{a}-{b}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Upstream `calculateSucceededIndexes`: the indexes recorded in `status.completedIndexes`, and those
/// plus the indexes of succeeded pods that still carry the tracking finalizer.
pub fn succeeded_indexes(job: &Job, pods: &[Arc<Pod>]) -> (Indexes, Indexes) {
    let recorded = job
        .status
        .as_ref()
        .and_then(|s| s.completed_indexes.as_deref())
        .unwrap_or("");
    let prev = parse(recorded, completions(job));
    let mut all = prev.clone();
    for pod in pods {
        if super::sync::has_tracking_finalizer(pod) && super::sync::phase(pod) == "Succeeded" {
            if let Some(ix) = valid_index(job, pod) {
                all.insert(ix);
            }
        }
    }
    (prev, all)
}

/// Upstream `firstPendingIndexes`: the lowest `count` indexes that have not succeeded or failed and
/// have no active pod (nor a terminating one, when only failed pods are replaced).
pub fn first_pending(
    job: &Job,
    pods: &[Arc<Pod>],
    succeeded: &Indexes,
    failed: Option<&Indexes>,
    count: usize,
) -> Vec<i32> {
    let only_failed = super::sync::only_replace_failed(job);
    let busy: BTreeSet<i32> = pods
        .iter()
        .filter(|p| super::sync::is_active(p) || (only_failed && super::sync::is_terminating(p)))
        .filter_map(|p| completion_index(p))
        .collect();
    (0..completions(job))
        .filter(|ix| {
            !succeeded.contains(ix) && !busy.contains(ix) && !failed.is_some_and(|f| f.contains(ix))
        })
        .take(count)
        .collect()
}

/// Upstream `appendDuplicatedIndexPodsForRemoval`: active pods without a valid index, and all but one
/// pod per repeated index (the one kept is the last in upstream's `ActivePods` order, i.e. the one
/// furthest along), to remove; the rest are kept.
pub fn duplicated_for_removal(job: &Job, active: &[Arc<Pod>]) -> (Vec<Arc<Pod>>, Vec<Arc<Pod>>) {
    let mut rm = Vec::new();
    let mut by_index: BTreeMap<i32, Vec<Arc<Pod>>> = BTreeMap::new();
    for pod in active {
        match valid_index(job, pod) {
            Some(ix) => by_index.entry(ix).or_default().push(pod.clone()),
            None => rm.push(pod.clone()),
        }
    }
    let mut left = Vec::new();
    for (_, mut pods) in by_index {
        pods.sort_by(|a, b| crate::replicaset::sync::deletion_order(a, b));
        let keep = pods.pop();
        rm.extend(pods);
        left.extend(keep);
    }
    (rm, left)
}

/// Upstream `podGenerateNameWithIndex`: `<job>-<index>-`, the Job name cut so the pod name fits.
pub fn generate_name(job_name: &str, index: i32) -> String {
    let suffix = format!("-{index}-");
    let mut prefix = format!("{job_name}{suffix}");
    if prefix.len() > MAX_GENERATED_NAME_LENGTH {
        let keep = MAX_GENERATED_NAME_LENGTH.saturating_sub(suffix.len());
        let mut cut = keep.min(job_name.len());
        while !job_name.is_char_boundary(cut) {
            cut -= 1;
        }
        prefix = format!("{}{suffix}", &job_name[..cut]);
    }
    prefix
}

/// Upstream `addCompletionIndexEnvVariables`: every container and init container gets
/// `JOB_COMPLETION_INDEX` from the pod's annotation, unless it defines the variable itself.
pub fn add_completion_index_env(template: &mut PodTemplateSpec) {
    let Some(spec) = template.spec.as_mut() else {
        return;
    };
    let env: k8s_openapi::api::core::v1::EnvVar = serde_json::from_value(json!({
        "name": COMPLETION_INDEX_ENV,
        // Upstream reads the label since PodIndexLabel (on by default).
        "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.labels['{COMPLETION_INDEX}']")}},
    }))
    .expect("a valid EnvVar");
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for c in containers {
        let vars = c.env.get_or_insert_with(Vec::new);
        if !vars.iter().any(|v| v.name == COMPLETION_INDEX_ENV) {
            vars.push(env.clone());
        }
    }
}

/// The per-index parts of a pod: the index annotation and label, and the hostname `<job>-<index>`.
pub fn set_index(template: &mut PodTemplateSpec, job_name: &str, index: i32) {
    let meta = template.metadata.get_or_insert_with(Default::default);
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(COMPLETION_INDEX.into(), index.to_string());
    meta.labels
        .get_or_insert_with(Default::default)
        .insert(COMPLETION_INDEX.into(), index.to_string());
    if let Some(spec) = template.spec.as_mut() {
        spec.hostname = Some(format!("{job_name}-{index}"));
    }
}

/// Upstream `matchSuccessPolicy`: the message of the first rule the succeeded indexes satisfy.
pub fn match_success_policy(
    policy: Option<&SuccessPolicy>,
    completions: i32,
    succeeded: &Indexes,
) -> Option<String> {
    let policy = policy?;
    if succeeded.is_empty() {
        return None;
    }
    for (i, rule) in policy.rules.iter().enumerate() {
        let matched = match (&rule.succeeded_indexes, rule.succeeded_count) {
            (Some(required), count) => {
                let required = parse(required, completions);
                if required.is_empty() {
                    continue;
                }
                let done = required.intersection(succeeded).count();
                match count {
                    Some(c) => done >= c.max(0) as usize,
                    None => done == required.len(),
                }
            }
            (None, Some(c)) => succeeded.len() >= c.max(0) as usize,
            (None, None) => false,
        };
        if matched {
            return Some(format!("Matched rules at index {i}"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_round_trip_as_upstream() {
        let set: Indexes = [0, 1, 2, 4, 6, 7, 9].into_iter().collect();
        assert_eq!(format(&set), "0-2,4,6,7,9");
        assert_eq!(parse("0-2,4,6,7,9", 10), set);
        assert_eq!(
            parse("0-2,4,6,7,9", 7),
            [0, 1, 2, 4, 6].into_iter().collect()
        );
        assert_eq!(format(&Indexes::new()), "");
        assert_eq!(parse("", 3), Indexes::new());
        assert_eq!(parse("x,1", 3), [1].into_iter().collect());
    }

    #[test]
    fn generate_name_keeps_index_and_fits() {
        assert_eq!(generate_name("pi", 3), "pi-3-");
        let long = "a".repeat(70);
        let name = generate_name(&long, 12);
        assert_eq!(name.len(), 58);
        assert!(name.ends_with("-12-"));
    }

    #[test]
    fn success_policy_rules() {
        let policy: SuccessPolicy = serde_json::from_value(json!({"rules": [
            {"succeededIndexes": "0,2"},
            {"succeededCount": 3},
            {"succeededIndexes": "4-9", "succeededCount": 2},
        ]}))
        .unwrap();
        let s = |v: &[i32]| v.iter().copied().collect::<Indexes>();
        assert_eq!(match_success_policy(Some(&policy), 10, &s(&[0])), None);
        assert_eq!(
            match_success_policy(Some(&policy), 10, &s(&[0, 2])).as_deref(),
            Some("Matched rules at index 0")
        );
        assert_eq!(
            match_success_policy(Some(&policy), 10, &s(&[1, 3, 5])).as_deref(),
            Some("Matched rules at index 1")
        );
        assert_eq!(
            match_success_policy(Some(&policy), 10, &s(&[5, 9])).as_deref(),
            Some("Matched rules at index 2")
        );
        assert_eq!(match_success_policy(None, 10, &s(&[0, 2])), None);
    }
}
