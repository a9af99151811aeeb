//! Table tests of the apps and batch groups: workloads, their selectors and templates, Job selector
//! generation, CronJob schedules, and what updates may change.

use serde_json::{json, Value};

use super::tests_pod::{defaulted, errors};
use super::{validate_create, validate_update};
use crate::defaults::default_job_selector;

const MISMATCH: &str = "spec.template.metadata.labels: Invalid value: {\"app\":\"web\"}: `selector` does not match template `labels`";

fn workload(kind: &str) -> Value {
    let mut obj = json!({"metadata": {"name": "web", "namespace": "d", "uid": "u1"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": "nginx"}]}}}});
    if kind == "StatefulSet" {
        obj["spec"]["serviceName"] = json!("web");
    }
    defaulted("apps", kind, obj)
}

fn create(group: &str, kind: &str, base: &Value, edit: impl Fn(&mut Value)) -> Vec<String> {
    let mut obj = base.clone();
    edit(&mut obj);
    errors(&validate_create(group, kind, &obj))
}

fn update(group: &str, kind: &str, old: &Value, edit: impl Fn(&mut Value)) -> Vec<String> {
    let mut new = old.clone();
    edit(&mut new);
    errors(&validate_update(group, kind, &new, old))
}

#[test]
fn workloads_share_selector_rules() {
    for kind in ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"] {
        let w = workload(kind);
        assert_eq!(
            create("apps", kind, &w, |_| {}),
            Vec::<String>::new(),
            "{kind}"
        );
        assert_eq!(
            create("apps", kind, &w, |o| o["spec"]["selector"] =
                json!({"matchLabels": {"app": "api"}})),
            vec![MISMATCH],
            "{kind}"
        );
        assert_eq!(
            create("apps", kind, &w, |o| o["spec"]["template"]["spec"]["restartPolicy"] = json!("OnFailure")),
            vec!["spec.template.spec.restartPolicy: Unsupported value: \"OnFailure\": supported values: \"Always\""],
            "{kind}"
        );
        let moved = update("apps", kind, &w, |o| {
            o["spec"]["selector"] = json!({"matchLabels": {"app": "web", "tier": "x"}});
            o["spec"]["template"]["metadata"]["labels"]["tier"] = json!("x");
        });
        assert_eq!(moved.len(), 1, "{kind}: {moved:?}");
        assert!(
            moved[0].ends_with("field is immutable")
                || moved[0].starts_with("spec: Forbidden: updates to statefulset spec"),
            "{kind}: {moved:?}"
        );
    }
}

#[test]
fn deployment_rules() {
    let d = workload("Deployment");
    assert_eq!(
        create("apps", "Deployment", &d, |o| {
            if let Some(spec) = o["spec"].as_object_mut() {
                spec.remove("selector");
            }
        }),
        vec!["spec.selector: Required value", MISMATCH]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]["replicas"] =
            json!(-1)),
        vec!["spec.replicas: Invalid value: -1: must be greater than or equal to 0"]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]["selector"] =
            json!({})),
        vec!["spec.selector: Invalid value: {}: empty selector is invalid for deployment"]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]["strategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": "0%"})),
        vec!["spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` is 0"]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] = json!("150%")),
        vec!["spec.strategy.rollingUpdate.maxUnavailable: Invalid value: \"150%\": must not be greater than 100%"]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = json!("lots")),
        vec!["spec.strategy.rollingUpdate.maxSurge: Invalid value: \"lots\": a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]
            ["progressDeadlineSeconds"] =
            json!(0)),
        vec![
            "spec.progressDeadlineSeconds: Invalid value: 0: must be greater than minReadySeconds"
        ]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]["selector"]["matchExpressions"] = json!([{"key": "app", "operator": "Near", "values": ["x"]}])),
        vec![
            "spec.selector.matchExpressions[0].operator: Invalid value: \"Near\": not a valid selector operator",
            "spec.selector: Invalid value: {\"matchLabels\":{\"app\":\"web\"},\"matchExpressions\":[{\"key\":\"app\",\"operator\":\"Near\",\"values\":[\"x\"]}]}: invalid label selector",
        ]
    );
    assert_eq!(
        create("apps", "Deployment", &d, |o| o["spec"]["template"]
            ["spec"]["containers"][0]["name"] =
            json!("")),
        vec!["spec.template.spec.containers[0].name: Required value"]
    );
    assert_eq!(
        update("apps", "Deployment", &d, |o| o["spec"]["replicas"] =
            json!(5)),
        Vec::<String>::new()
    );
}

#[test]
fn stateful_set_rules() {
    let s = workload("StatefulSet");
    assert_eq!(
        create("apps", "StatefulSet", &s, |o| o["metadata"]["name"] =
            json!("web.v1")),
        vec!["metadata.name: Invalid value: \"web.v1\": must not contain dots"]
    );
    assert_eq!(create("apps", "StatefulSet", &s, |o| o["spec"]["podManagementPolicy"] = json!("Random")),
        vec!["spec.podManagementPolicy: Invalid value: \"Random\": must be 'OrderedReady' or 'Parallel'"]);
    assert_eq!(create("apps", "StatefulSet", &s, |o| o["spec"]["persistentVolumeClaimRetentionPolicy"]["whenScaled"] = json!("Keep")),
        vec!["spec.persistentVolumeClaimRetentionPolicy.whenScaled: Unsupported value: \"Keep\": supported values: \"Retain\", \"Delete\""]);
    // As upstream, the template's containers are not validated for StatefulSets.
    assert_eq!(
        create("apps", "StatefulSet", &s, |o| o["spec"]["template"]
            ["spec"]["containers"] =
            json!([])),
        Vec::<String>::new()
    );
    assert_eq!(
        update("apps", "StatefulSet", &s, |o| {
            o["spec"]["replicas"] = json!(3);
            o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27");
            o["spec"]["updateStrategy"] = json!({"type": "OnDelete"});
        }),
        Vec::<String>::new()
    );
    assert_eq!(update("apps", "StatefulSet", &s, |o| o["spec"]["serviceName"] = json!("other")), vec![
        "spec: Forbidden: updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
    ]);
}

#[test]
fn daemon_set_rules() {
    let ds = workload("DaemonSet");
    assert_eq!(create("apps", "DaemonSet", &ds, |o| o["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": 1, "maxSurge": 1})),
        vec!["spec.updateStrategy.rollingUpdate.maxSurge: Invalid value: 1: may not be set when maxUnavailable is non-zero"]);
    assert_eq!(create("apps", "DaemonSet", &ds, |o| o["spec"]["updateStrategy"]["rollingUpdate"] = json!({"maxUnavailable": 0, "maxSurge": 0})),
        vec!["spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when maxSurge is 0"]);
    assert_eq!(create("apps", "DaemonSet", &ds, |o| o["spec"]["template"]["spec"]["activeDeadlineSeconds"] = json!(10)),
        vec!["spec.template.spec.activeDeadlineSeconds: Forbidden: activeDeadlineSeconds in DaemonSet is not Supported"]);
}

fn job() -> Value {
    let mut j = defaulted(
        "batch",
        "Job",
        json!({"metadata": {"name": "pi", "namespace": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "pi", "image": "perl"}], "restartPolicy": "Never"}}}}),
    );
    default_job_selector(&mut j, "uid-1");
    j
}

#[test]
fn job_rules() {
    let j = job();
    assert_eq!(create("batch", "Job", &j, |_| {}), Vec::<String>::new());
    assert_eq!(create("batch", "Job", &j, |o| o["spec"]["template"]["spec"]["restartPolicy"] = json!("Always")),
        vec!["spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""]);
    assert_eq!(
        create("batch", "Job", &j, |o| o["spec"]["parallelism"] = json!(-1)),
        vec!["spec.parallelism: Invalid value: -1: must be greater than or equal to 0"]
    );
    assert_eq!(create("batch", "Job", &j, |o| o["spec"]["completionMode"] = json!("Random")),
        vec!["spec.completionMode: Unsupported value: \"Random\": supported values: \"NonIndexed\", \"Indexed\""]);
    assert_eq!(
        create("batch", "Job", &j, |o| o["spec"]["template"]["metadata"]["labels"]["job-name"] = json!("other")),
        vec![
            "spec.template.metadata.labels[job-name]: Invalid value: {\"batch.kubernetes.io/controller-uid\":\"uid-1\",\"batch.kubernetes.io/job-name\":\"pi\",\"controller-uid\":\"uid-1\",\"job-name\":\"other\"}: must be 'pi'",
        ]
    );
    let mut unlabelled = defaulted(
        "batch",
        "Job",
        json!({"metadata": {"name": "m", "namespace": "d"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {"metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "a", "image": "a"}], "restartPolicy": "Never"}}}}),
    );
    unlabelled["spec"]["manualSelector"] = json!(true);
    assert_eq!(
        create("batch", "Job", &unlabelled, |_| {}),
        Vec::<String>::new()
    );
    let long_name = "j".repeat(64);
    let mut long = defaulted(
        "batch",
        "Job",
        json!({"metadata": {"name": long_name, "namespace": "d"},
        "spec": {"template": {"spec": {"containers": [{"name": "a", "image": "a"}], "restartPolicy": "Never"}}}}),
    );
    default_job_selector(&mut long, "uid-2");
    let errs = create("batch", "Job", &long, |_| {});
    assert_eq!(errs, vec![
        format!("spec.template.labels: Invalid value: \"{long_name}\": must be no more than 63 characters"),
        format!("spec.template.labels: Invalid value: \"{long_name}\": must be no more than 63 characters"),
    ]);
}

#[test]
fn job_update_rules() {
    let j = job();
    assert_eq!(
        update("batch", "Job", &j, |o| o["spec"]["parallelism"] = json!(3)),
        Vec::<String>::new()
    );
    let changed = update("batch", "Job", &j, |o| {
        o["spec"]["template"]["spec"]["containers"][0]["image"] = json!("perl:5")
    });
    assert_eq!(changed.len(), 1);
    assert!(
        changed[0].starts_with("spec.template: Invalid value: ")
            && changed[0].ends_with(": field is immutable"),
        "{changed:?}"
    );
    assert_eq!(
        update("batch", "Job", &j, |o| o["spec"]["completions"] = json!(4)),
        vec!["spec.completions: Invalid value: 4: field is immutable"]
    );
    assert_eq!(
        update("batch", "Job", &j, |o| o["spec"]["selector"]
            ["matchLabels"]["x"] =
            json!("y"))
        .len(),
        2
    );
    let mut suspended = j.clone();
    suspended["spec"]["suspend"] = json!(true);
    assert_eq!(
        update("batch", "Job", &suspended, |o| o["spec"]["template"]
            ["spec"]["nodeSelector"] =
            json!({"zone": "a"})),
        Vec::<String>::new()
    );
}

fn cron_job() -> Value {
    defaulted(
        "batch",
        "CronJob",
        json!({"metadata": {"name": "hello", "namespace": "d"}, "spec": {"schedule": "*/5 * * * *",
        "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "a", "image": "busybox"}], "restartPolicy": "OnFailure"}}}}}}),
    )
}

#[test]
fn cron_job_rules() {
    let c = cron_job();
    assert_eq!(create("batch", "CronJob", &c, |_| {}), Vec::<String>::new());
    assert_eq!(
        create("batch", "CronJob", &c, |o| o["spec"]["schedule"] =
            json!("")),
        vec!["spec.schedule: Required value"]
    );
    assert_eq!(create("batch", "CronJob", &c, |o| o["spec"]["schedule"] = json!("* * * *")),
        vec!["spec.schedule: Invalid value: \"* * * *\": expected exactly 5 fields, found 4: [* * * *]"]);
    assert_eq!(create("batch", "CronJob", &c, |o| o["spec"]["schedule"] = json!("0 25 * * *")),
        vec!["spec.schedule: Invalid value: \"0 25 * * *\": end of range (25) above maximum (23): 25"]);
    assert_eq!(create("batch", "CronJob", &c, |o| o["spec"]["schedule"] = json!("TZ=UTC 0 0 * * *")),
        vec!["spec.schedule: Invalid value: \"TZ=UTC 0 0 * * *\": cannot use TZ or CRON_TZ in schedule, use timeZone field instead"]);
    assert_eq!(create("batch", "CronJob", &c, |o| o["spec"]["concurrencyPolicy"] = json!("Sometimes")),
        vec!["spec.concurrencyPolicy: Unsupported value: \"Sometimes\": supported values: \"Allow\", \"Forbid\", \"Replace\""]);
    assert_eq!(
        create("batch", "CronJob", &c, |o| o["metadata"]["name"] =
            json!("c".repeat(53))),
        vec![format!(
            "metadata.name: Invalid value: \"{}\": must be no more than 52 characters",
            "c".repeat(53)
        )]
    );
    assert_eq!(create("batch", "CronJob", &c, |o| o["spec"]["jobTemplate"]["spec"]["selector"] = json!({"matchLabels": {"a": "b"}})),
        vec!["spec.jobTemplate.spec.selector: Invalid value: {\"matchLabels\":{\"a\":\"b\"}}: `selector` will be auto-generated"]);
    assert_eq!(create("batch", "CronJob", &c, |o| o["spec"]["jobTemplate"]["spec"]["template"]["spec"]["restartPolicy"] = json!("Always")),
        vec!["spec.jobTemplate.spec.template.spec.restartPolicy: Required value: valid values: \"OnFailure\", \"Never\""]);
    assert_eq!(
        update("batch", "CronJob", &c, |o| o["spec"]["schedule"] =
            json!("@hourly")),
        Vec::<String>::new()
    );
}
