//! Workers: take a key from the queue, sync it, requeue it with rate limiting on error, forget it on
//! success (upstream `sample-controller`'s `runWorker` / `processNextWorkItem` and the `handleErr` of
//! kube-controller-manager's controllers, e.g. `deployment_controller.go`).
//!
//! Differences from upstream: workers are tokio tasks and `sync` is an async closure; a panicking sync
//! counts as a failed one (requeued) instead of crashing the process; the optional retry limit (upstream
//! controllers hard-code `maxRetries = 15`) is a setting.

use std::fmt::Display;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use futures::FutureExt;

use crate::workqueue::RateLimitingQueue;

/// A named controller: its work queue and how many times a failing key is retried.
#[derive(Clone, Debug)]
pub struct Controller {
    name: String,
    queue: RateLimitingQueue<String>,
    max_retries: Option<u32>,
}

impl Controller {
    /// A controller fed by `queue` (usually through an [`super::EnqueueHandler`]). Failing keys are
    /// retried forever, with the queue's rate limiting, unless [`with_max_retries`](Self::with_max_retries).
    pub fn new(name: impl Into<String>, queue: RateLimitingQueue<String>) -> Controller {
        Controller {
            name: name.into(),
            queue,
            max_retries: None,
        }
    }

    /// Drops a key (and logs it) after it failed this many requeues in a row.
    pub fn with_max_retries(mut self, retries: u32) -> Controller {
        self.max_retries = Some(retries);
        self
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn queue(&self) -> &RateLimitingQueue<String> {
        &self.queue
    }

    /// Adds a key by hand (e.g. a periodic full resync of some other state).
    pub fn enqueue(&self, key: impl Into<String>) {
        self.queue.add(key.into());
    }

    /// Stops the workers: they finish the key they hold and [`run`](Self::run) returns. Keys still
    /// queued are not processed.
    pub fn shut_down(&self) {
        self.queue.shut_down();
    }

    /// Runs `workers` workers calling `sync(key)` until [`shut_down`](Self::shut_down). Start the
    /// informers and wait for their caches to sync first.
    pub async fn run<F, Fut, E>(&self, workers: usize, sync: F)
    where
        F: Fn(String) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        let sync = Arc::new(sync);
        let mut tasks = tokio::task::JoinSet::new();
        tracing::info!(controller = %self.name, workers, "starting workers");
        for _ in 0..workers.max(1) {
            let (queue, sync, name, max_retries) = (
                self.queue.clone(),
                sync.clone(),
                self.name.clone(),
                self.max_retries,
            );
            tasks.spawn(async move {
                while process_next_work_item(&queue, &*sync, &name, max_retries).await {}
            });
        }
        while tasks.join_next().await.is_some() {}
        tracing::info!(controller = %self.name, "workers stopped");
    }
}

/// One worker step: waits for a key, syncs it and settles it with the queue. Returns false once the
/// queue is shut down (upstream `processNextWorkItem`).
pub async fn process_next_work_item<F, Fut, E>(
    queue: &RateLimitingQueue<String>,
    sync: &F,
    controller: &str,
    max_retries: Option<u32>,
) -> bool
where
    F: Fn(String) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: Display,
{
    let Some(key) = queue.get().await else {
        return false;
    };
    let outcome = AssertUnwindSafe(async { sync(key.clone()).await })
        .catch_unwind()
        .await;
    let error = match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e.to_string()),
        Err(_) => Some("sync panicked".to_string()),
    };
    match error {
        None => queue.forget(&key),
        Some(error) => {
            let requeues = queue.num_requeues(&key);
            if max_retries.is_none_or(|max| requeues < max) {
                tracing::debug!(controller, %key, %error, requeues, "sync failed; requeued with rate limiting");
                queue.add_rate_limited(key.clone());
            } else {
                tracing::warn!(controller, %key, %error, requeues, "sync failed too often; dropping the key");
                queue.forget(&key);
            }
        }
    }
    queue.done(&key);
    true
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::sync::Mutex;
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;
    use crate::controller::EnqueueHandler;
    use crate::informer::{DeletedObject, ResourceEventHandler};
    use crate::workqueue::ItemExponentialFailureRateLimiter;

    fn cm(ns: &str, name: &str) -> Arc<ConfigMap> {
        Arc::new(ConfigMap {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[derive(Default)]
    struct Fake {
        calls: Mutex<HashMap<String, u32>>,
        in_flight: Mutex<HashSet<String>>,
        overlaps: Mutex<u32>,
    }

    impl Fake {
        /// Fails "ns/flaky" twice, "ns/broken" always, panics once for "ns/panics".
        async fn sync(&self, key: String) -> Result<(), String> {
            if !self.in_flight.lock().unwrap().insert(key.clone()) {
                *self.overlaps.lock().unwrap() += 1;
            }
            let n = {
                let mut calls = self.calls.lock().unwrap();
                let n = calls.entry(key.clone()).or_default();
                *n += 1;
                *n
            };
            tokio::time::sleep(Duration::from_millis(2)).await;
            self.in_flight.lock().unwrap().remove(&key);
            match key.as_str() {
                "ns/flaky" if n <= 2 => Err(format!("attempt {n} failed")),
                "ns/broken" => Err("always".into()),
                "ns/panics" if n == 1 => panic!("bug"),
                _ => Ok(()),
            }
        }

        fn calls(&self, key: &str) -> u32 {
            self.calls.lock().unwrap().get(key).copied().unwrap_or(0)
        }
    }

    #[tokio::test]
    async fn controller_requeues_failures_with_rate_limit_and_forgets_successes() {
        let queue = RateLimitingQueue::new(ItemExponentialFailureRateLimiter::new(
            Duration::from_millis(1),
            Duration::from_millis(20),
        ));
        let controller = Controller::new("test", queue.clone()).with_max_retries(3);
        // Informer events become keys; repeated events for a queued key are deduplicated.
        let handler = EnqueueHandler::new(queue.clone());
        for name in ["ok", "flaky", "broken", "panics"] {
            ResourceEventHandler::<ConfigMap>::on_add(&handler, &cm("ns", name), true);
        }
        ResourceEventHandler::<ConfigMap>::on_update(&handler, &cm("ns", "ok"), &cm("ns", "ok"));
        ResourceEventHandler::<ConfigMap>::on_delete(
            &handler,
            &DeletedObject::DeletedFinalStateUnknown {
                key: "ns/gone".into(),
                last_known: cm("ns", "gone"),
            },
        );
        assert_eq!(queue.len(), 5);

        let fake = Arc::new(Fake::default());
        let run = {
            let (controller, fake) = (controller.clone(), fake.clone());
            tokio::spawn(async move {
                controller
                    .run(3, move |key| {
                        let fake = fake.clone();
                        async move { fake.sync(key).await }
                    })
                    .await
            })
        };
        let settled = tokio::time::timeout(Duration::from_secs(10), async {
            while fake.calls("ns/flaky") < 3
                || fake.calls("ns/broken") < 4
                || fake.calls("ns/panics") < 2
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // Let any (wrong) extra retry show up.
            tokio::time::sleep(Duration::from_millis(100)).await;
        })
        .await;
        assert!(
            settled.is_ok(),
            "retries never settled: {:?}",
            fake.calls.lock().unwrap()
        );
        controller.shut_down();
        tokio::time::timeout(Duration::from_secs(10), run)
            .await
            .expect("workers stop after shut_down")
            .expect("run task");

        assert_eq!(fake.calls("ns/ok"), 1);
        assert_eq!(fake.calls("ns/gone"), 1);
        assert_eq!(fake.calls("ns/flaky"), 3, "two failures, then success");
        assert_eq!(fake.calls("ns/panics"), 2, "a panic is a failure");
        assert_eq!(
            fake.calls("ns/broken"),
            4,
            "first try + 3 retries, then dropped"
        );
        for key in ["ns/ok", "ns/flaky", "ns/broken", "ns/panics"] {
            assert_eq!(queue.num_requeues(&key.to_string()), 0, "{key} forgotten");
        }
        assert_eq!(
            *fake.overlaps.lock().unwrap(),
            0,
            "a key was synced twice at once"
        );
    }
}
