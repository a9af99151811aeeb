//! The `flood` scenario (issue 20's load test): one client floods the server with whole LISTs of the
//! `--list-objects` namespace and ConfigMap creates at full speed, from `--flood-kubeconfig`'s user
//! (not `system:masters`, which upstream's flow control and rkube's in-flight limits exempt), while
//! two probes with the main kubeconfig's user pace themselves as people and controllers do: a
//! `kubectl get`-like LIST of a small namespace and a controller-like ConfigMap update, each every
//! 100 ms. Reported: the probes' latencies (the goal: p99 under 1 s) and what the flood got through,
//! 429s included (refusals are the server protecting itself, not errors).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hyper::{Method, StatusCode};

use super::http::ApiClient;
use super::{configmap, ensure_namespace, fill_list_namespace, ms, new_histogram, ApiBenchArgs};

/// How often each probe sends its request.
const PROBE_PERIOD: Duration = Duration::from_millis(100);

#[derive(Default)]
struct FloodCounts {
    lists: AtomicU64,
    creates: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
}

pub async fn flood_scenario(
    args: &ApiBenchArgs,
    client: &ApiClient,
    run_id: &str,
    payload: &str,
) -> Result<(), String> {
    let list_path: Arc<str> = fill_list_namespace(args, client, payload).await?.into();
    let flooder = match &args.flood_kubeconfig {
        Some(path) => ApiClient::from_kubeconfig(path, args.http1)?,
        None => client.with_own_connections(),
    };
    let flood_ns = format!("{}-flood", args.namespace);
    ensure_namespace(client, &flood_ns).await?;
    let probe_ns = args.namespace.clone();
    let probed = format!("/api/v1/namespaces/{probe_ns}/configmaps/flood-probe");
    let _ = client
        .post(
            &format!("/api/v1/namespaces/{probe_ns}/configmaps"),
            configmap("flood-probe", "n", "0"),
        )
        .await?;

    let duration = Duration::from_secs(args.flood_seconds);
    let started = Instant::now();
    let counts = Arc::new(FloodCounts::default());
    let mut flood = Vec::new();
    for task in 0..args.flood_tasks {
        let (flooder, counts, list_path) = (flooder.clone(), counts.clone(), list_path.clone());
        let (ns, payload) = (flood_ns.clone(), Arc::<str>::from(payload));
        let prefix = format!("f{task}-{run_id}-");
        flood.push(tokio::spawn(async move {
            let mut i = 0u64;
            while started.elapsed() < duration {
                // Half the tasks list, half create: both at full speed.
                let reply = if task % 2 == 0 {
                    flooder.get(&list_path).await
                } else {
                    i += 1;
                    let body = configmap(&format!("{prefix}{i}"), "payload", &payload);
                    flooder
                        .post(&format!("/api/v1/namespaces/{ns}/configmaps"), body)
                        .await
                };
                let counter = match reply.map(|r| r.status) {
                    Ok(StatusCode::OK) => &counts.lists,
                    Ok(StatusCode::CREATED) => &counts.creates,
                    Ok(StatusCode::TOO_MANY_REQUESTS) => &counts.refused,
                    _ => &counts.failed,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }

    let get_path = format!("/api/v1/namespaces/{probe_ns}/configmaps?limit=500");
    let get_probe = probe(client.clone(), duration, move |client, _| {
        let path = get_path.clone();
        async move { client.get(&path).await.map(|r| r.status) }
    });
    let update_probe = probe(client.clone(), duration, move |client, n| {
        let path = probed.clone();
        async move {
            let body = format!(r#"{{"data":{{"n":"{n}"}}}}"#);
            client
                .send(Method::PATCH, &path, Some(body.into()))
                .await
                .map(|r| r.status)
        }
    });
    let user_probe = async {
        let Some(path) = &args.probe_kubeconfig else {
            return None;
        };
        let user = match ApiClient::from_kubeconfig(path, args.http1) {
            Ok(user) => user,
            Err(e) => return Some(Err(e)),
        };
        let list = format!("/api/v1/namespaces/{}/configmaps?limit=500", args.namespace);
        Some(
            probe(user, duration, move |client, _| {
                let path = list.clone();
                async move { client.get(&path).await.map(|r| r.status) }
            })
            .await,
        )
    };
    let (gets, updates, user_gets) = tokio::join!(get_probe, update_probe, user_probe);
    for task in flood {
        let _ = task.await;
    }
    let elapsed = started.elapsed().as_secs_f64();

    println!();
    println!(
        "| during the flood ({} s, {} flooding tasks) | requests | errors | p50 ms | p99 ms | max ms |",
        args.flood_seconds, args.flood_tasks
    );
    println!("|---|---|---|---|---|---|");
    let mut probes = vec![
        ("probe: LIST a small namespace every 100 ms", gets?),
        ("probe: PATCH a ConfigMap every 100 ms", updates?),
    ];
    if let Some(user_gets) = user_gets {
        probes.push((
            "probe as an ordinary user: LIST a small namespace every 100 ms",
            user_gets?,
        ));
    }
    for (label, (h, errors)) in probes {
        println!(
            "| {label} | {} | {errors} | {:.1} | {:.1} | {:.1} |",
            h.len(),
            ms(h.value_at_quantile(0.5)),
            ms(h.value_at_quantile(0.99)),
            ms(h.max())
        );
    }
    let per_s = |c: &AtomicU64| c.load(Ordering::Relaxed) as f64 / elapsed;
    println!();
    println!("| flood | whole LISTs/s | creates/s | 429/s | other failures/s |");
    println!("|---|---|---|---|---|");
    println!(
        "| {} objects listed | {:.1} | {:.0} | {:.0} | {:.1} |",
        args.list_objects,
        per_s(&counts.lists),
        per_s(&counts.creates),
        per_s(&counts.refused),
        per_s(&counts.failed)
    );
    Ok(())
}

/// Sends `op` every [`PROBE_PERIOD`] for `duration` (a late answer delays the next request, as a
/// person waiting on kubectl would): latencies of answered requests, and how many failed.
async fn probe<F, Fut>(
    client: ApiClient,
    duration: Duration,
    op: F,
) -> Result<(Histogram<u64>, u64), String>
where
    F: Fn(ApiClient, u64) -> Fut,
    Fut: std::future::Future<Output = Result<StatusCode, String>>,
{
    let started = Instant::now();
    let mut latencies = new_histogram();
    let mut errors = 0;
    let mut n = 0;
    while started.elapsed() < duration {
        n += 1;
        let t = Instant::now();
        match op(client.clone(), n).await {
            Ok(status) if status.is_success() => {
                let _ = latencies.record(t.elapsed().as_micros().max(1) as u64);
            }
            _ => errors += 1,
        }
        if let Some(rest) = PROBE_PERIOD.checked_sub(t.elapsed()) {
            tokio::time::sleep(rest).await;
        }
    }
    Ok((latencies, errors))
}
