//! The admission chain (upstream `k8s.io/apiserver/pkg/admission` `chainAdmissionHandler` and the
//! plugin registry of `kube-apiserver`'s options): plugins run in upstream's order, every mutating
//! plugin in the mutating phase, then every validating plugin in the validating phase; the first
//! error ends the request.

use std::sync::Arc;

use apimachinery::status::ApiError;
use serde_json::Value;

use super::Attributes;
use crate::ApiServer;

/// One admission plugin (upstream `admission.Interface` with `MutationInterface` and
/// `ValidationInterface`). Both phases default to admitting, so a plugin implements the ones it has.
///
/// The objects a phase sees: for CREATE the new object (`old` is `None`); for UPDATE the new and
/// the stored one; for DELETE `object` is `Value::Null` and `old` the object being deleted; for
/// CONNECT `object` is the connect options (`PodExecOptions`, ...).
#[async_trait::async_trait]
pub trait Plugin: Send + Sync {
    /// Upstream's name (`--enable-admission-plugins` spells plugins this way).
    fn name(&self) -> &'static str;

    /// Whether the plugin looks at this request at all (upstream `Handles`).
    fn handles(&self, _attrs: &Attributes<'_>) -> bool {
        true
    }

    /// The mutating phase: may change `object`.
    async fn admit(
        &self,
        _api: &ApiServer,
        _attrs: &Attributes<'_>,
        _object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// The validating phase: the object is final; only refuse (or warn through `attrs.outcome`).
    async fn validate(
        &self,
        _api: &ApiServer,
        _attrs: &Attributes<'_>,
        _object: &Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }
}

/// The enabled plugins, in upstream's order.
#[derive(Clone, Default)]
pub struct Chain {
    plugins: Vec<Arc<dyn Plugin>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Chain {
    /// A chain of exactly these plugins, in the order given.
    pub fn new(plugins: Vec<Arc<dyn Plugin>>) -> Chain {
        Chain { plugins }
    }

    /// The chain `--enable-admission-plugins` and `--disable-admission-plugins` select: upstream's
    /// default-on plugins plus `enable` minus `disable`, ordered as upstream orders them whatever the
    /// flags' order. Unknown names are an error, as upstream's.
    pub fn from_flags(enable: &[String], disable: &[String]) -> Result<Chain, String> {
        for name in enable.iter().chain(disable) {
            if !super::plugins::ORDERED.contains(&name.as_str()) {
                return Err(format!(
                    "admission plugin {name:?} is unknown; known plugins: {}",
                    super::plugins::ORDERED.join(", ")
                ));
            }
        }
        if let Some(both) = enable.iter().find(|n| disable.contains(n)) {
            return Err(format!(
                "admission plugin {both:?} is both enabled and disabled"
            ));
        }
        let plugins = super::plugins::ORDERED
            .iter()
            .filter(|name| {
                let on =
                    super::plugins::DEFAULT_ON.contains(name) || enable.iter().any(|e| e == *name);
                on && !disable.iter().any(|d| d == *name)
            })
            .filter_map(|name| super::plugins::build(name))
            .collect();
        Ok(Chain { plugins })
    }

    /// The names of the plugins that run, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.plugins.iter().map(|p| p.name()).collect()
    }

    pub fn is_enabled(&self, name: &str) -> bool {
        self.plugins.iter().any(|p| p.name() == name)
    }

    /// The mutating phase.
    pub async fn admit(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            if plugin.handles(attrs) {
                plugin.admit(api, attrs, object, old).await?;
            }
        }
        Ok(())
    }

    /// The validating phase.
    pub async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        for plugin in &self.plugins {
            if plugin.handles(attrs) {
                plugin.validate(api, attrs, object, old).await?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_pick_plugins_in_upstream_order() {
        let chain = Chain::from_flags(&["AlwaysPullImages".into()], &["LimitRanger".into()])
            .expect("valid flags");
        let names = chain.names();
        assert!(!names.contains(&"LimitRanger"), "{names:?}");
        let pos = |n: &str| names.iter().position(|x| *x == n);
        if let (Some(a), Some(q)) = (pos("AlwaysPullImages"), pos("ResourceQuota")) {
            assert!(a < q, "{names:?}");
        }
        assert_eq!(names.last(), Some(&"ResourceQuota"), "{names:?}");
    }

    #[test]
    fn unknown_and_contradictory_flags_are_refused() {
        let err = Chain::from_flags(&["NoSuchPlugin".into()], &[]).unwrap_err();
        assert!(err.contains("NoSuchPlugin"), "{err}");
        let err = Chain::from_flags(&["LimitRanger".into()], &["LimitRanger".into()]).unwrap_err();
        assert!(err.contains("both"), "{err}");
    }
}
