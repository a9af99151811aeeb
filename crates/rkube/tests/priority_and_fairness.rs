//! API Priority and Fairness end to end: a user whose FlowSchema sends it to a tiny Reject level
//! (`borrowingLimitPercent: 0`, so it stays tiny when idle levels lend) floods LISTs (three seats each: 300 ConfigMaps stored) and gets 429s with `Retry-After`, while
//! the admin (exempt) is answered at once; answers carry the `X-Kubernetes-PF-*` headers of the
//! request's FlowSchema and level; the debug endpoint and `/metrics` show the levels.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{Backend, Cluster};

const TOKEN: &str = "flood-token";

/// `curl` as the flooding user: each answer's code, Retry-After and the PF headers, one line each.
fn curl(c: &Cluster, paths: &[String], parallel: usize) -> Vec<String> {
    let mut cmd = Command::new("curl");
    cmd.args(["-k", "-s"])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args([
            "-w",
            "%{http_code} [%header{retry-after}] [%header{x-kubernetes-pf-flowschema-uid}] [%header{x-kubernetes-pf-prioritylevel-uid}]\\n",
        ]);
    if parallel > 1 {
        cmd.args([
            "-Z",
            "--parallel-immediate",
            "--parallel-max",
            &parallel.to_string(),
        ]);
    }
    for p in paths {
        // `-o` goes with one URL: each needs its own.
        cmd.args(["-o", "/dev/null"]).arg(format!("{}{p}", c.url));
    }
    let out = cmd.output().expect("curl");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `kubectl get --raw` as the admin, read whole (the support's runner waits for exit before reading,
/// which blocks on outputs larger than a pipe holds, as `/metrics`).
fn raw(c: &Cluster, path: &str) -> String {
    let out = Command::new("kubectl")
        .args(["get", "--raw", path])
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", c.dir.path())
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn uid(c: &Cluster, kind: &str, name: &str) -> String {
    c.kubectl(&["get", kind, name, "-o", "jsonpath={.metadata.uid}"])
}

#[test]
fn a_flooding_user_gets_429s_while_the_admin_is_served() {
    let tokens = support::token_file(&format!("{TOKEN},flooder,flooder-uid\n"));
    let tokens_path = tokens.path().to_str().unwrap().to_string();
    let c = Cluster::start_with(Backend::Sqlite, &["--token-auth-file", &tokens_path]);
    c.kubectl(&["create", "namespace", "flood"]);
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "flooder",
        "--clusterrole=view",
        "--user=flooder",
    ]);
    let items: Vec<serde_json::Value> = (0..300)
        .map(|i| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": "flood"}, "data": {"k": "v"}})
        })
        .collect();
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    c.kubectl_in(&["create", "-f", "-"], Some(&list.to_string()));
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "v1", "kind": "List", "items": [
              {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
               "metadata": {"name": "tiny"},
               "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 1,
                        "borrowingLimitPercent": 0,
                        "limitResponse": {"type": "Reject"}}}},
              {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
               "metadata": {"name": "flooder"},
               "spec": {"priorityLevelConfiguration": {"name": "tiny"}, "matchingPrecedence": 100,
                        "distinguisherMethod": {"type": "ByUser"},
                        "rules": [{"subjects": [{"kind": "User", "user": {"name": "flooder"}}],
                                   "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                      "clusterScope": true, "namespaces": ["*"]}]}]}}]}"#,
        ),
    );
    let (fs_uid, pl_uid) = (
        uid(&c, "flowschema", "flooder"),
        uid(&c, "prioritylevelconfiguration", "tiny"),
    );
    assert!(!fs_uid.is_empty() && !pl_uid.is_empty());

    // The configuration and the binding are followed live: wait until a LIST lands in `tiny`.
    let list_path = "/api/v1/namespaces/flood/configmaps".to_string();
    let expected = format!("200 [] [{fs_uid}] [{pl_uid}]");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = curl(&c, std::slice::from_ref(&list_path), 1).join("");
        if line == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never classified into tiny: {line}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Flood from another thread while the admin asks. A round whose requests happen not to overlap
    // (a client starved of CPU on a busy machine sends them one by one) has no refusal: up to
    // three rounds.
    let flood_paths = vec![list_path.clone(); 600];
    let mut rounds = 0;
    let (answers, admin_took) = loop {
        rounds += 1;
        let (answers, admin_took) = std::thread::scope(|s| {
            let flood = s.spawn(|| curl(&c, &flood_paths, 40));
            std::thread::sleep(Duration::from_millis(300));
            let started = Instant::now();
            c.kubectl(&["get", "configmaps", "-n", "flood", "cm-1"]);
            let took = started.elapsed();
            (flood.join().unwrap(), took)
        });
        if rounds == 3 || answers.iter().any(|l| l.starts_with("429 ")) {
            break (answers, admin_took);
        }
    };
    assert_eq!(
        answers.len(),
        600,
        "{:?}",
        &answers[..answers.len().min(40)]
    );
    let ok = answers.iter().filter(|l| l.starts_with("200 ")).count();
    let refused: Vec<&String> = answers.iter().filter(|l| l.starts_with("429 ")).collect();
    assert!(ok > 0, "some LISTs ran");
    assert!(
        !refused.is_empty(),
        "no 429 in {rounds} rounds; the last: {:?}",
        &answers[..answers.len().min(40)]
    );
    assert_eq!(ok + refused.len(), answers.len(), "{answers:?}");
    for line in &refused {
        // Retry-After in whole seconds, and the PF headers on the refusal too.
        let retry: Vec<&str> = line.split(['[', ']']).collect();
        assert!(retry[1].parse::<u32>().is_ok_and(|s| s >= 1), "{line}");
        assert!(line.ends_with(&format!("[{fs_uid}] [{pl_uid}]")), "{line}");
    }
    assert!(
        admin_took < Duration::from_secs(5),
        "admin waited {admin_took:?}"
    );

    let levels = raw(&c, "/debug/api_priority_and_fairness/dump_priority_levels");
    let header = levels.lines().next().unwrap_or("");
    assert!(
        header.starts_with("PriorityLevelName, ActiveQueues, IsIdle, IsQuiescing,"),
        "{levels}"
    );
    for level in [
        "catch-all",
        "exempt",
        "global-default",
        "tiny",
        "workload-low",
        "system",
    ] {
        assert!(
            levels.lines().any(|l| l.starts_with(&format!("{level},"))),
            "{level}: {levels}"
        );
    }
    let tiny = levels.lines().find(|l| l.starts_with("tiny,")).unwrap();
    let rejected: u64 = tiny.split(',').nth(7).unwrap().trim().parse().unwrap();
    assert!(rejected >= refused.len() as u64, "{tiny}");
    let queues = raw(&c, "/debug/api_priority_and_fairness/dump_queues");
    assert!(
        queues.lines().any(|l| l.starts_with("global-default,")),
        "{queues}"
    );
    let metrics = raw(&c, "/metrics");
    assert!(
        metrics.contains("apiserver_flowcontrol_rejected_requests_total{flow_schema=\"flooder\",priority_level=\"tiny\",reason=\"concurrency-limit\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("apiserver_flowcontrol_current_executing_seats{priority_level=\"tiny\"}")
    );

    // Deleting the FlowSchema sends the user back to global-default (followed live).
    c.kubectl(&["delete", "flowschema", "flooder"]);
    let global = uid(&c, "prioritylevelconfiguration", "global-default");
    let global_fs = uid(&c, "flowschema", "global-default");
    let expected = format!("200 [] [{global_fs}] [{global}]");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = curl(&c, std::slice::from_ref(&list_path), 1).join("");
        if line == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still classified as before: {line}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
