//! The root CA certificate publisher (upstream `pkg/controller/certificates/rootcacertpublisher`): a
//! `kube-root-ca.crt` ConfigMap in every namespace holding the CA bundle that verifies the API
//! server (`ca.crt`), restored when it is deleted or changed.

use std::collections::BTreeMap;
use std::sync::Arc;

use client::controller::Controller;
use client::informer::{EventHandlerFuncs, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::PostParams;
use kube::Api;

pub const CONFIG_MAP_NAME: &str = "kube-root-ca.crt";
pub const DESCRIPTION_ANNOTATION: &str = "kubernetes.io/description";
pub const DESCRIPTION: &str = "Contains a CA bundle that can be used to verify the kube-apiserver \
when using internal endpoints such as the internal service IP or kubernetes.default.svc. No other \
usage is guaranteed across distributions of Kubernetes clusters.";

/// What a namespace's ConfigMap needs.
#[derive(Debug, PartialEq)]
pub enum Action {
    Create(ConfigMap),
    Update(ConfigMap),
    None,
}

/// Create the ConfigMap when missing; rewrite it when its data is not exactly the CA or the
/// description annotation is empty.
pub fn decide(ns: &str, current: Option<&ConfigMap>, root_ca: &str) -> Action {
    let data = BTreeMap::from([("ca.crt".to_string(), root_ca.to_string())]);
    let Some(current) = current else {
        return Action::Create(ConfigMap {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(CONFIG_MAP_NAME.into()),
                namespace: Some(ns.into()),
                annotations: Some(BTreeMap::from([(
                    DESCRIPTION_ANNOTATION.to_string(),
                    DESCRIPTION.to_string(),
                )])),
                ..Default::default()
            },
            data: Some(data),
            ..Default::default()
        });
    };
    let described = current
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DESCRIPTION_ANNOTATION))
        .is_some_and(|d| !d.is_empty());
    if current.data.clone().unwrap_or_default() == data && described {
        return Action::None;
    }
    let mut cm = current.clone();
    cm.data = Some(data);
    cm.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(DESCRIPTION_ANNOTATION.into(), DESCRIPTION.into());
    Action::Update(cm)
}

struct Ctx {
    client: kube::Client,
    config_maps: Arc<Store<ConfigMap>>,
    root_ca: String,
}

pub async fn run(c: &crate::ControllerContext) {
    let Some(root_ca) = c.options.root_ca_pem.clone() else {
        tracing::warn!("no root CA (--root-ca-file): the root CA publisher does not run");
        return;
    };
    // Only the one ConfigMap per namespace this controller owns: a cache of every ConfigMap (as
    // upstream keeps) would cost memory in proportion to all of them and react to none of the rest.
    let cm_informer = c.factory.informer_for_api(
        Api::<ConfigMap>::all(c.client.clone()),
        Some(
            c.factory
                .defaults()
                .clone()
                .fields(format!("metadata.name={CONFIG_MAP_NAME}")),
        ),
    );
    let ns_informer = c.factory.informer::<Namespace>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("root_ca_cert_publisher"),
    );
    let (q1, q2, q3, q4) = (queue.clone(), queue.clone(), queue.clone(), queue.clone());
    let ns_of = |cm: &ConfigMap| {
        (cm.metadata.name.as_deref() == Some(CONFIG_MAP_NAME))
            .then(|| cm.metadata.namespace.clone())
            .flatten()
    };
    cm_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_update(move |_, cm: &Arc<ConfigMap>| ns_of(cm).into_iter().for_each(|n| q1.add(n)))
            .on_delete(move |d| ns_of(d.object()).into_iter().for_each(|n| q2.add(n))),
    );
    ns_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |ns: &Arc<Namespace>, _| {
                q3.add(ns.metadata.name.clone().unwrap_or_default())
            })
            .on_update(move |_, ns: &Arc<Namespace>| {
                if ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Active") {
                    q4.add(ns.metadata.name.clone().unwrap_or_default());
                }
            }),
    );
    let ctx = Arc::new(Ctx {
        client: c.client.clone(),
        config_maps: cm_informer.store(),
        root_ca,
    });
    c.factory.start();
    c.factory.wait_for_cache_sync().await;
    Controller::new("root_ca_cert_publisher", queue)
        .with_max_retries(15)
        .run(1, move |ns: String| {
            let ctx = ctx.clone();
            async move { sync_namespace(&ctx, &ns).await }
        })
        .await;
}

async fn sync_namespace(ctx: &Ctx, ns: &str) -> Result<(), String> {
    let current = ctx.config_maps.get(&format!("{ns}/{CONFIG_MAP_NAME}"));
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    match decide(ns, current.as_deref(), &ctx.root_ca) {
        Action::None => Ok(()),
        Action::Create(cm) => match api.create(&PostParams::default(), &cm).await {
            Ok(_) => Ok(()),
            // A namespace that is gone or terminating takes no new objects: nothing to retry.
            Err(kube::Error::Api(e)) if e.code == 404 || crate::endpoint::is_ns_terminating(&e) => {
                Ok(())
            }
            Err(e) => Err(format!("create {ns}/{CONFIG_MAP_NAME}: {e}")),
        },
        Action::Update(cm) => api
            .replace(CONFIG_MAP_NAME, &PostParams::default(), &cm)
            .await
            .map(|_| ())
            .map_err(|e| format!("update {ns}/{CONFIG_MAP_NAME}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_then_restored_when_changed() {
        let Action::Create(cm) = decide("ns1", None, "PEM") else {
            panic!("expected a create")
        };
        assert_eq!(cm.data.as_ref().unwrap()["ca.crt"], "PEM");
        assert_eq!(
            cm.metadata.annotations.as_ref().unwrap()[DESCRIPTION_ANNOTATION],
            DESCRIPTION
        );
        assert_eq!(decide("ns1", Some(&cm), "PEM"), Action::None);
        let mut changed = cm.clone();
        changed
            .data
            .as_mut()
            .unwrap()
            .insert("extra".into(), "x".into());
        let Action::Update(fixed) = decide("ns1", Some(&changed), "PEM") else {
            panic!("expected an update")
        };
        assert_eq!(fixed.data, cm.data);
        let mut undescribed = cm.clone();
        undescribed.metadata.annotations = None;
        assert!(matches!(
            decide("ns1", Some(&undescribed), "PEM"),
            Action::Update(_)
        ));
    }
}
