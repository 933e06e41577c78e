//! batch/v1: jobs and cron jobs.

use serde_json::{json, Value};

use super::duration::{self, Nanos};
use super::format::{at, containers, count, format_label_selector, int, list, name, opt_int, text};
use super::{doc, Column, Description, Printer, AGE, CONTAINERS_WIDE, IMAGES_WIDE, NAME};

fn age(obj: &Value, now: Nanos) -> Value {
    json!(duration::since(
        at(obj, &["metadata", "creationTimestamp"]),
        now
    ))
}

const JOB_SPEC: &str = "io.k8s.api.batch.v1.JobSpec";

pub(crate) static JOB: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Status", "string", Description::Text("Status of the job.")),
        Column::new(
            "Completions",
            "string",
            doc("io.k8s.api.batch.v1.JobStatus", "succeeded"),
        ),
        Column::new(
            "Duration",
            "string",
            Description::Text("Time required to complete the job."),
        ),
        AGE,
        CONTAINERS_WIDE,
        IMAGES_WIDE,
        Column::new("Selector", "string", doc(JOB_SPEC, "selector")).wide(),
    ],
    row: job_row,
};

/// Whether the job's first condition of this type is true.
fn has_condition(job: &Value, type_: &str) -> bool {
    list(job, &["status", "conditions"])
        .iter()
        .find(|c| text(c, &["type"]) == type_)
        .is_some_and(|c| text(c, &["status"]) == "True")
}

fn job_row(job: &Value, now: Nanos) -> Vec<Value> {
    let succeeded = int(job, &["status", "succeeded"]);
    let completions = match opt_int(job, &["spec", "completions"]) {
        Some(c) => format!("{succeeded}/{c}"),
        None => match opt_int(job, &["spec", "parallelism"]).unwrap_or(0) {
            p if p > 1 => format!("{succeeded}/1 of {p}"),
            _ => format!("{succeeded}/1"),
        },
    };
    let start = duration::timestamp(at(job, &["status", "startTime"]));
    let completion = duration::timestamp(at(job, &["status", "completionTime"]));
    let job_duration = match (start, completion) {
        (None, _) => String::new(),
        (Some(s), None) => duration::human_duration(now - s),
        (Some(s), Some(c)) => duration::human_duration(c - s),
    };
    let status = if has_condition(job, "Complete") {
        "Complete"
    } else if has_condition(job, "Failed") {
        "Failed"
    } else if at(job, &["metadata", "deletionTimestamp"]).is_some() {
        "Terminating"
    } else if has_condition(job, "Suspended") {
        "Suspended"
    } else if has_condition(job, "FailureTarget") {
        "FailureTarget"
    } else {
        "Running"
    };
    let (names, images) = containers(list(job, &["spec", "template", "spec", "containers"]));
    vec![
        json!(name(job)),
        json!(status),
        json!(completions),
        json!(job_duration),
        age(job, now),
        json!(names),
        json!(images),
        json!(format_label_selector(at(job, &["spec", "selector"]))),
    ]
}

const CRON_SPEC: &str = "io.k8s.api.batch.v1.CronJobSpec";
const CRON_STATUS: &str = "io.k8s.api.batch.v1.CronJobStatus";

pub(crate) static CRON_JOB: Printer = Printer {
    columns: &[
        NAME,
        Column::new("Schedule", "string", doc(CRON_SPEC, "schedule")),
        Column::new("Timezone", "string", doc(CRON_SPEC, "timeZone")),
        Column::new("Suspend", "boolean", doc(CRON_SPEC, "suspend")),
        Column::new("Active", "integer", doc(CRON_STATUS, "active")),
        Column::new(
            "Last Schedule",
            "string",
            doc(CRON_STATUS, "lastScheduleTime"),
        ),
        AGE,
        CONTAINERS_WIDE,
        IMAGES_WIDE,
        Column::new("Selector", "string", doc(JOB_SPEC, "selector")).wide(),
    ],
    row: cron_job_row,
};

fn cron_job_row(cj: &Value, now: Nanos) -> Vec<Value> {
    let last_schedule = match at(cj, &["status", "lastScheduleTime"]) {
        Some(t) => duration::since(Some(t), now),
        None => "<none>".into(),
    };
    // A `*bool` printed as "True", "False" or "<unset>".
    let suspend = match at(cj, &["spec", "suspend"]).and_then(Value::as_bool) {
        Some(true) => "True",
        Some(false) => "False",
        None => "<unset>",
    };
    let template = at(cj, &["spec", "jobTemplate", "spec"]);
    let (names, images) = containers(
        template
            .map(|t| list(t, &["template", "spec", "containers"]))
            .unwrap_or(&[]),
    );
    vec![
        json!(name(cj)),
        json!(text(cj, &["spec", "schedule"])),
        json!(at(cj, &["spec", "timeZone"])
            .and_then(Value::as_str)
            .unwrap_or("<none>")),
        json!(suspend),
        json!(count(cj, &["status", "active"])),
        json!(last_schedule),
        age(cj, now),
        json!(names),
        json!(images),
        json!(format_label_selector(
            template.and_then(|t| at(t, &["selector"]))
        )),
    ]
}
