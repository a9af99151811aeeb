//! API Priority and Fairness (upstream `apiserver/pkg/util/flowcontrol`), on with
//! `--enable-priority-and-fairness`, in place of the plain in-flight limits:
//!
//! - [`config`]: the FlowSchemas and PriorityLevelConfigurations typed, mandatory ones imagined
//!   when missing, nominal concurrency limits as shares of `--max-requests-inflight` +
//!   `--max-mutating-requests-inflight`; [`suggested`]: upstream's suggested objects, created at
//!   start; [`dangling`]: the FlowSchemas' `Dangling` condition.
//! - [`classify`]: the FlowSchema and flow of a request; [`width`]: its seats;
//!   [`shufflesharding`] and [`queueset`]: fair queuing within a level; [`retryafter`]: the
//!   `Retry-After` of refusals.
//! - [`controller`]: the levels' live state; [`borrowing`]: the limits recomputed from seat
//!   demand every 10 s; [`filter`]: the request path; [`debug`] and [`metrics`]: what it shows.
//!
//! Left out: the exempt level's part in borrowing (its nominal share and seat demand; upstream
//! counts them), the mutating work estimator's extra seats for watchers, and the
//! FlowSchema/level status beyond `Dangling`.

pub mod borrowing;
pub mod classify;
pub mod config;
pub mod controller;
pub mod dangling;
pub mod debug;
pub mod filter;
pub mod metrics;
pub mod queueset;
pub mod retryafter;
pub mod shufflesharding;
pub mod suggested;
pub mod width;

use std::sync::Arc;

pub use controller::Apf;
pub use dangling::dangling_condition;

use crate::watch_cache::WatchStart;
use crate::ApiServer;

const FLOW_SCHEMAS: &str = "flowschemas";
const PRIORITY_LEVELS: &str = "prioritylevelconfigurations";
const GROUP: &str = "flowcontrol.apiserver.k8s.io";

/// Reads the objects again: the Dangling conditions, and the configuration APF runs by.
async fn reconcile(api: &ApiServer) {
    let schemas = crate::internal::cached_objects(api, FLOW_SCHEMAS);
    let levels = crate::internal::cached_objects(api, PRIORITY_LEVELS);
    if let Some(apf) = &api.flowcontrol {
        apf.apply(&schemas, &levels);
    }
    dangling::reconcile(api, &schemas, &levels).await;
}

/// Creates the suggested objects, then follows FlowSchemas and PriorityLevelConfigurations until
/// the server stops; a watch the cache drops (a slow reader) is taken up again after a full pass.
pub async fn run(api: Arc<ApiServer>) {
    if let Err(e) = suggested::ensure(&api).await {
        tracing::warn!(error = %e, "cannot create the suggested flow control configuration");
    }
    if let Some(apf) = &api.flowcontrol {
        tokio::spawn(rebalance_every_period(Arc::downgrade(&api), apf.clone()));
    }
    loop {
        let start = api.caches.revision();
        let subscribe = |storage: &str| {
            api.caches
                .ensure(storage, GROUP, storage)
                .subscribe(Default::default(), WatchStart::After(start), start)
                .ok()
        };
        let (Some(schemas), Some(levels)) = (subscribe(FLOW_SCHEMAS), subscribe(PRIORITY_LEVELS))
        else {
            return;
        };
        let (mut schemas, mut levels) = (schemas.live, levels.live);
        reconcile(&api).await;
        loop {
            let open = tokio::select! {
                e = schemas.recv() => e.is_some(),
                e = levels.recv() => e.is_some(),
            };
            if !open {
                break;
            }
            // Take whatever else arrived meanwhile, then look at the whole (small) set once.
            while schemas.try_recv().is_ok() || levels.try_recv().is_ok() {}
            reconcile(&api).await;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

/// Upstream's periodic rebalancing: seat limits follow demand every adjustment period, for as
/// long as the server lives.
async fn rebalance_every_period(api: std::sync::Weak<ApiServer>, apf: Arc<Apf>) {
    let mut tick = tokio::time::interval(borrowing::ADJUSTMENT_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if api.strong_count() == 0 {
            return;
        }
        apf.update_borrowing();
    }
}
