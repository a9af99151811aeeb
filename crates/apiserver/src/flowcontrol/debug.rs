//! `/debug/api_priority_and_fairness/dump_priority_levels` and `dump_queues` (upstream
//! `apf_controller_debug.go`): comma-separated tables aligned as Go's tabwriter aligns them.

use super::controller::{Apf, State};

pub const PREFIX: &str = "/debug/api_priority_and_fairness/";

/// Aligns rows as upstream's `tabwriter.NewWriter(w, 8, 0, 1, ' ', 0)` with `,\t` separators: each
/// cell but the last of a row is followed by a comma and padded to its column's width plus one.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0usize; columns];
    for row in rows {
        for (i, cell) in row.iter().enumerate().take(row.len().saturating_sub(1)) {
            widths[i] = widths[i].max(cell.len() + 1);
        }
    }
    let mut out = String::new();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i + 1 < row.len() {
                let with_comma = format!("{cell},");
                out.push_str(&format!("{with_comma:<width$}", width = widths[i] + 1));
            } else {
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}

fn strings(cells: &[&str]) -> Vec<String> {
    cells.iter().map(|c| c.to_string()).collect()
}

pub(super) fn priority_levels(state: &State) -> String {
    let mut rows = vec![strings(&[
        "PriorityLevelName",
        "ActiveQueues",
        "IsIdle",
        "IsQuiescing",
        "WaitingRequests",
        "ExecutingRequests",
        "DispatchedRequests",
        "RejectedRequests",
        "TimedoutRequests",
        "CancelledRequests",
    ])];
    for (name, level) in &state.levels {
        let Some(qs) = &level.queues else {
            let mut row = vec![name.clone()];
            row.extend(std::iter::repeat_n("<none>".to_string(), 9));
            rows.push(row);
            continue;
        };
        let active = qs.queues().iter().filter(|q| q.waiting > 0).count();
        rows.push(vec![
            name.clone(),
            active.to_string(),
            qs.idle().to_string(),
            (!level.configured).to_string(),
            qs.waiting().to_string(),
            qs.executing().to_string(),
            level.dispatched.to_string(),
            level.rejected.to_string(),
            level.timed_out.to_string(),
            level.cancelled.to_string(),
        ]);
    }
    table(&rows)
}

pub(super) fn queues(state: &State) -> String {
    let mut rows = vec![strings(&[
        "PriorityLevelName",
        "Index",
        "PendingRequests",
        "ExecutingRequests",
        "SeatsInUse",
        "NextDispatchR",
        "InitialSeatsSum",
        "MaxSeatsSum",
        "TotalWorkSum",
    ])];
    for (name, level) in &state.levels {
        let Some(qs) = &level.queues else {
            let mut row = vec![name.clone()];
            row.extend(std::iter::repeat_n("<none>".to_string(), 8));
            rows.push(row);
            continue;
        };
        for q in qs.queues() {
            rows.push(vec![
                name.clone(),
                q.index.to_string(),
                q.waiting.to_string(),
                q.executing.to_string(),
                q.seats_in_use.to_string(),
                format!("{:.8}ss", q.next_dispatch_r),
                q.waiting_seats.to_string(),
                q.waiting_seats.to_string(),
                format!(
                    "{:.8}ss",
                    q.waiting_seats as f64 * super::queueset::ESTIMATED_SERVICE_SECONDS
                ),
            ]);
        }
    }
    table(&rows)
}

/// The text of a debug endpoint, or None for an unknown one.
pub fn serve(apf: &Apf, path: &str) -> Option<String> {
    let state = apf.lock();
    match path.strip_prefix(PREFIX)? {
        "dump_priority_levels" => Some(priority_levels(&state)),
        "dump_queues" => Some(queues(&state)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_as_tabwriter() {
        let rows = vec![
            strings(&["Name", "A", "Last"]),
            strings(&["longer-name", "10", "x"]),
        ];
        assert_eq!(table(&rows), "Name,        A,  Last\nlonger-name, 10, x\n");
    }

    #[test]
    fn dumps_list_every_level() {
        let apf = Apf::new(600);
        let levels = serve(
            &apf,
            "/debug/api_priority_and_fairness/dump_priority_levels",
        )
        .unwrap();
        let mut lines = levels.lines();
        assert!(lines
            .next()
            .unwrap()
            .starts_with("PriorityLevelName, ActiveQueues, IsIdle,"));
        let rows: Vec<&str> = lines.collect();
        assert_eq!(rows.len(), 2);
        assert!(
            rows[0].starts_with("catch-all,") && rows[0].contains(" true,"),
            "{levels}"
        );
        assert!(
            rows[1].starts_with("exempt,") && rows[1].contains("<none>"),
            "{levels}"
        );
        let queues = serve(&apf, "/debug/api_priority_and_fairness/dump_queues").unwrap();
        assert!(queues.starts_with("PriorityLevelName, Index,"), "{queues}");
        assert!(serve(&apf, "/debug/api_priority_and_fairness/nope").is_none());
    }
}
#[cfg(test)]
mod suggested_tests {
    #[test]
    fn dump_queues_has_a_row_per_queue_of_the_suggested_levels() {
        let apf = super::Apf::new(600);
        let mut levels = super::super::suggested::priority_levels();
        levels.extend(crate::bootstrap::flowcontrol::priority_levels());
        apf.apply(&super::super::suggested::flow_schemas(), &levels);
        let q = super::serve(&apf, "/debug/api_priority_and_fairness/dump_queues").unwrap();
        // 64 + 64 + 16 + 128 * 3 queues, exempt's row, the header; catch-all rejects (no queues).
        assert_eq!(q.lines().count(), 528 + 2);
        assert!(q
            .lines()
            .any(|l| l.starts_with("workload-low,") && l.contains(" 127,")));
    }
}
