//! Printers of `batch` kinds, mirroring upstream `pkg/printers/internalversion` (`printJob`,
//! `printCronJob`): jobs with STATUS (`Complete`, `Failed`, `Terminating`, `Suspended`, `FailureTarget`,
//! `Running`), COMPLETIONS and DURATION; cronjobs with schedule, time zone and last schedule.

use serde_json::{json, Value};

use super::duration::human_duration_nanos;
use super::time::{self, Instant};
use super::util::{
    arr_at, bool_ptr, condition_status, deleting, format_label_selector, get, int_at,
    layout_containers, len_at, name, opt_bool, opt_int, opt_str, str_at, template_containers,
};
use super::{
    age_cell, col, printer, wide, ColumnDefinition, Printers, AGE, CONTAINERS, IMAGES, NAME,
};

pub(super) const PRINTERS: Printers = &[
    ("batch", "jobs", printer(JOB_COLUMNS, job_cells)),
    ("batch", "cronjobs", printer(CRONJOB_COLUMNS, cronjob_cells)),
];

const SELECTOR_DESCRIPTION: &str = "A label query over pods that should match the pod count.";

const JOB_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Status", "string", "Status of the job."),
    col(
        "Completions",
        "string",
        "The number of pods which reached phase Succeeded.",
    ),
    col("Duration", "string", "Time required to complete the job."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "string", SELECTOR_DESCRIPTION),
];

/// `hasJobCondition`: the first condition of the type decides.
fn has_condition(job: &Value, type_: &str) -> bool {
    condition_status(job, &["status", "conditions"], type_) == Some("True")
}

fn job_cells(job: &Value, now: Instant) -> Vec<Value> {
    let succeeded = int_at(job, &["status", "succeeded"]);
    let completions = match opt_int(job, &["spec", "completions"]) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match int_at(job, &["spec", "parallelism"]) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = time::time_of(get(job, &["status", "startTime"]));
    let completion = time::time_of(get(job, &["status", "completionTime"]));
    let duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(s), None) => time::since(Some(s), now),
        (Some(s), Some(c)) => human_duration_nanos(time::sub(c, s)),
    };
    let status = if has_condition(job, "Complete") {
        "Complete"
    } else if has_condition(job, "Failed") {
        "Failed"
    } else if deleting(job) {
        "Terminating"
    } else if has_condition(job, "Suspended") {
        "Suspended"
    } else if has_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = template_containers(job);
    vec![
        json!(name(job)),
        json!(status),
        json!(completions),
        json!(duration),
        age_cell(job, now),
        json!(names),
        json!(images),
        json!(format_label_selector(get(job, &["spec", "selector"]))),
    ]
}

const CRONJOB_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Schedule", "string", "The schedule in Cron format, see https://en.wikipedia.org/wiki/Cron."),
    col("Timezone", "string", "The time zone name for the given schedule, see https://en.wikipedia.org/wiki/List_of_tz_database_time_zones."),
    col("Suspend", "boolean", "This flag tells the controller to suspend subsequent executions, it does not apply to already started executions."),
    col("Active", "integer", "A list of pointers to currently running jobs."),
    col("Last Schedule", "string", "Information when was the last time the job was successfully scheduled."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "string", SELECTOR_DESCRIPTION),
];

fn cronjob_cells(cj: &Value, now: Instant) -> Vec<Value> {
    let last_schedule = match get(cj, &["status", "lastScheduleTime"]).filter(|t| !t.is_null()) {
        Some(t) => time::since(time::time_of(Some(t)), now),
        None => "<none>".to_string(),
    };
    let job_spec = &["spec", "jobTemplate", "spec"];
    let containers_path = [job_spec.as_slice(), &["template", "spec", "containers"]].concat();
    let selector_path = [job_spec.as_slice(), &["selector"]].concat();
    let (names, images) = layout_containers(arr_at(cj, &containers_path));
    vec![
        json!(name(cj)),
        json!(str_at(cj, &["spec", "schedule"])),
        json!(opt_str(cj, &["spec", "timeZone"]).unwrap_or("<none>")),
        json!(bool_ptr(opt_bool(cj, &["spec", "suspend"]))),
        json!(len_at(cj, &["status", "active"])),
        json!(last_schedule),
        age_cell(cj, now),
        json!(names),
        json!(images),
        json!(format_label_selector(get(cj, &selector_path))),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::testing::{header, row, CREATED};

    fn job(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "pi", "creationTimestamp": CREATED}, "spec": spec, "status": status})
    }

    fn template() -> Value {
        json!({"spec": {"containers": [{"name": "pi", "image": "perl:5.34"}]}})
    }

    #[test]
    fn job_columns() {
        assert_eq!(
            header("batch", "jobs"),
            vec![
                ("Name", 0),
                ("Status", 0),
                ("Completions", 0),
                ("Duration", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1)
            ]
        );
    }

    #[test]
    fn complete_job() {
        let j = job(
            json!({"completions": 1, "parallelism": 1, "template": template(),
                "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "123"}}}),
            json!({"succeeded": 1, "startTime": "2024-01-01T00:00:01Z", "completionTime": "2024-01-01T00:00:46Z",
                "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}]}),
        );
        assert_eq!(
            row("batch", "jobs", &j),
            vec![
                json!("pi"),
                json!("Complete"),
                json!("1/1"),
                json!("45s"),
                json!("10m"),
                json!("pi"),
                json!("perl:5.34"),
                json!("batch.kubernetes.io/controller-uid=123"),
            ]
        );
    }

    #[test]
    fn job_statuses_completions_durations() {
        let cases: Vec<(Value, Value, bool, [&str; 3])> = vec![
            (
                json!({"completions": 5, "parallelism": 2}),
                json!({"succeeded": 2, "startTime": "2024-01-01T00:07:55Z"}),
                false,
                ["Running", "2/5", "2m5s"],
            ),
            (
                json!({"parallelism": 3}),
                json!({}),
                false,
                ["Running", "0/1 of 3", ""],
            ),
            (
                json!({}),
                json!({"conditions": [{"type": "Failed", "status": "True"}]}),
                false,
                ["Failed", "0/1", ""],
            ),
            (
                json!({}),
                json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
                false,
                ["Suspended", "0/1", ""],
            ),
            (
                json!({}),
                json!({"conditions": [{"type": "Suspended", "status": "True"}]}),
                true,
                ["Terminating", "0/1", ""],
            ),
            (
                json!({}),
                json!({"conditions": [{"type": "FailureTarget", "status": "True"}, {"type": "Complete", "status": "False"}]}),
                false,
                ["FailureTarget", "0/1", ""],
            ),
            (
                json!({}),
                json!({"conditions": [{"type": "Complete", "status": "False"}, {"type": "Complete", "status": "True"}]}),
                false,
                ["Running", "0/1", ""],
            ),
        ];
        for (spec, status, deleting, want) in cases {
            let mut j = job(spec, status);
            if deleting {
                j["metadata"]["deletionTimestamp"] = json!(CREATED);
            }
            let r = row("batch", "jobs", &j);
            assert_eq!(r[1..4], want.map(|s| json!(s)), "{j}");
            assert_eq!(r[7], json!("<none>"));
        }
    }

    #[test]
    fn cronjobs() {
        assert_eq!(
            header("batch", "cronjobs"),
            vec![
                ("Name", 0),
                ("Schedule", 0),
                ("Timezone", 0),
                ("Suspend", 0),
                ("Active", 0),
                ("Last Schedule", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1)
            ]
        );
        let cj = json!({
            "metadata": {"name": "hello", "creationTimestamp": CREATED},
            "spec": {"schedule": "*/1 * * * *", "timeZone": "Etc/UTC", "suspend": false,
                "jobTemplate": {"spec": {"template": template()}}},
            "status": {"active": [{"name": "hello-1"}], "lastScheduleTime": "2024-01-01T00:09:00Z"}
        });
        assert_eq!(
            row("batch", "cronjobs", &cj),
            vec![
                json!("hello"),
                json!("*/1 * * * *"),
                json!("Etc/UTC"),
                json!("False"),
                json!(1),
                json!("60s"),
                json!("10m"),
                json!("pi"),
                json!("perl:5.34"),
                json!("<none>"),
            ]
        );
        let bare = json!({"metadata": {"name": "x"}, "spec": {"schedule": "@daily"}});
        let r = row("batch", "cronjobs", &bare);
        assert_eq!(
            r[2..6],
            [json!("<none>"), json!("<unset>"), json!(0), json!("<none>")]
        );
    }
}
