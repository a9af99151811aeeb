//! The ServiceAccount controller (upstream `pkg/controller/serviceaccount`, `serviceaccounts_controller.go`):
//! every active namespace has a `default` ServiceAccount; it is created when the namespace appears and
//! again whenever it is deleted.

use std::sync::Arc;

use client::controller::Controller;
use client::informer::{EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::PostParams;
use kube::Api;

/// The ServiceAccounts every namespace gets.
pub const SERVICE_ACCOUNTS: &[&str] = &["default"];

/// The ServiceAccounts to create in `ns` (none unless it is active).
pub fn missing(ns: &Namespace, has: impl Fn(&str) -> bool) -> Vec<&'static str> {
    let active = ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active");
    if !active {
        return Vec::new();
    }
    SERVICE_ACCOUNTS
        .iter()
        .copied()
        .filter(|n| !has(n))
        .collect()
}

struct Ctx {
    client: kube::Client,
    namespaces: Arc<Store<Namespace>>,
    service_accounts: Arc<Store<ServiceAccount>>,
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory) {
    let ns_informer = factory.informer::<Namespace>();
    let sa_informer = factory.informer::<ServiceAccount>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("serviceaccount"),
    );
    let (q1, q2, q3) = (queue.clone(), queue.clone(), queue.clone());
    ns_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |ns: &Arc<Namespace>, _| {
                q1.add(ns.metadata.name.clone().unwrap_or_default())
            })
            .on_update(move |_, ns: &Arc<Namespace>| {
                q2.add(ns.metadata.name.clone().unwrap_or_default())
            }),
    );
    sa_informer.add_event_handler(EventHandlerFuncs::new().on_delete(
        move |d: &client::informer::DeletedObject<ServiceAccount>| {
            q3.add(d.object().metadata.namespace.clone().unwrap_or_default())
        },
    ));
    let ctx = Arc::new(Ctx {
        client,
        namespaces: ns_informer.store(),
        service_accounts: sa_informer.store(),
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    // Upstream runs this controller with one worker.
    Controller::new("serviceaccount", queue)
        .with_max_retries(15)
        .run(1, move |ns: String| {
            let ctx = ctx.clone();
            async move { sync_namespace(&ctx, &ns).await }
        })
        .await;
}

async fn sync_namespace(ctx: &Ctx, name: &str) -> Result<(), String> {
    let Some(ns) = ctx.namespaces.get(name) else {
        return Ok(());
    };
    let has = |sa: &str| ctx.service_accounts.get(&format!("{name}/{sa}")).is_some();
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), name);
    let mut errors = Vec::new();
    for sa in missing(&ns, has) {
        let obj = ServiceAccount {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(sa.into()),
                namespace: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || crate::endpoint::is_ns_terminating(&e) => {
            }
            Err(e) => errors.push(format!("create ServiceAccount {name}/{sa}: {e}")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(phase: &str) -> Namespace {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "x"}, "status": {"phase": phase}}),
        )
        .unwrap()
    }

    #[test]
    fn default_account_in_active_namespaces_only() {
        assert_eq!(missing(&ns("Active"), |_| false), ["default"]);
        assert!(missing(&ns("Active"), |_| true).is_empty());
        assert!(missing(&ns("Terminating"), |_| false).is_empty());
    }
}
