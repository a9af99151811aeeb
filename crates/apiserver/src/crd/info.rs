//! What the API server keeps of each CRD to serve its custom resources (upstream's `crdInfo` of the
//! custom resource handler): per version its structural schema, subresources and printer columns,
//! and the storage version. Rebuilt whenever the CRD changes.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use apimachinery::printers::custom::CustomColumn;
use apimachinery::schema::{defaults, Schema};

use super::validation_rules::{self, RuleTree};
use serde_json::Value;

/// The `scale` subresource of a version.
#[derive(Clone, Debug, PartialEq)]
pub struct ScaleSpec {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

#[derive(Clone, Debug)]
pub struct VersionInfo {
    pub schema: Option<Schema>,
    /// The schema's `x-kubernetes-validations`, compiled once here (none when it has no rules).
    pub rules: Option<Arc<RuleTree>>,
    pub status: bool,
    pub scale: Option<ScaleSpec>,
    pub columns: Vec<CustomColumn>,
    pub served: bool,
    /// The `Warning` header sent for a deprecated version.
    pub warning: Option<String>,
}

#[derive(Clone, Debug)]
pub struct CrdInfo {
    pub name: String,
    pub uid: String,
    pub group: String,
    pub kind: String,
    pub plural: String,
    pub storage_version: String,
    pub versions: HashMap<String, VersionInfo>,
    /// Objects read from storage need work (defaults to apply, or several versions to convert
    /// between); when false they are served as stored.
    pub reads_need_fixup: bool,
    /// The CRD is being deleted: no new custom resources.
    pub terminating: bool,
    /// `conversion.strategy: Webhook`'s webhook (set by [`CustomResources::set`]); `None`
    /// converts by rewriting `apiVersion`.
    pub webhook: Option<Arc<super::conversion::Webhook>>,
}

impl CrdInfo {
    pub fn parse(crd: &Value) -> Option<CrdInfo> {
        let spec = &crd["spec"];
        let group = spec["group"].as_str()?.to_string();
        let kind = spec.pointer("/names/kind")?.as_str()?.to_string();
        let plural = spec.pointer("/names/plural")?.as_str()?.to_string();
        let mut versions = HashMap::new();
        let mut storage_version = String::new();
        let mut any_defaults = false;
        for v in spec["versions"].as_array().into_iter().flatten() {
            let Some(name) = v["name"].as_str() else {
                continue;
            };
            if v["storage"].as_bool() == Some(true) {
                storage_version = name.to_string();
            }
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .filter(|s| s.is_object())
                .map(Schema::parse);
            any_defaults |= schema.as_ref().is_some_and(defaults::has_defaults);
            let scale = v
                .pointer("/subresources/scale")
                .filter(|s| s.is_object())
                .map(|s| ScaleSpec {
                    spec_replicas_path: s["specReplicasPath"].as_str().unwrap_or("").to_string(),
                    status_replicas_path: s["statusReplicasPath"]
                        .as_str()
                        .unwrap_or("")
                        .to_string(),
                    label_selector_path: s["labelSelectorPath"]
                        .as_str()
                        .filter(|p| !p.is_empty())
                        .map(str::to_string),
                });
            let mut columns: Vec<CustomColumn> = v["additionalPrinterColumns"]
                .as_array()
                .map(|cs| cs.iter().map(CustomColumn::parse).collect())
                .unwrap_or_default();
            if columns.is_empty() {
                columns.push(CustomColumn::age());
            }
            let deprecated = v["deprecated"].as_bool() == Some(true);
            let warning = deprecated.then(|| {
                v["deprecationWarning"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| format!("{group}/{name} {kind} is deprecated"))
            });
            versions.insert(
                name.to_string(),
                VersionInfo {
                    rules: schema
                        .as_ref()
                        .and_then(validation_rules::compile)
                        .map(Arc::new),
                    schema,
                    status: v
                        .pointer("/subresources/status")
                        .is_some_and(|s| !s.is_null()),
                    scale,
                    columns,
                    served: v["served"].as_bool() == Some(true),
                    warning,
                },
            );
        }
        let terminating = crd
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|t| !t.is_null());
        Some(CrdInfo {
            name: crd.pointer("/metadata/name")?.as_str()?.to_string(),
            uid: crd
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            reads_need_fixup: any_defaults || versions.len() > 1,
            group,
            kind,
            plural,
            storage_version,
            versions,
            terminating,
            webhook: None,
        })
    }

    pub fn version(&self, v: &str) -> Option<&VersionInfo> {
        self.versions.get(v)
    }

    pub fn schema(&self, v: &str) -> Option<&Schema> {
        self.version(v).and_then(|v| v.schema.as_ref())
    }

    pub fn api_version(&self, v: &str) -> String {
        format!("{}/{v}", self.group)
    }
}

/// The CRDs being served, by (group, plural).
#[derive(Default)]
pub struct CustomResources {
    map: RwLock<HashMap<(String, String), Arc<CrdInfo>>>,
    /// What the conversion webhooks of all CRDs share.
    pub conversion: super::conversion::Clients,
}

impl CustomResources {
    pub fn get(&self, group: &str, plural: &str) -> Option<Arc<CrdInfo>> {
        self.map
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(group.to_string(), plural.to_string()))
            .cloned()
    }

    /// Serves `info`, with the conversion webhook `crd` names (if any).
    pub fn set(&self, mut info: CrdInfo, crd: &Value) {
        info.webhook = super::conversion::Webhook::of(crd, &self.conversion.tls).map(Arc::new);
        let key = (info.group.clone(), info.plural.clone());
        let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
        map.insert(key, Arc::new(info));
        // TLS settings stay shared while some CRD's webhook names their bundle.
        let in_use: std::collections::HashSet<Vec<u8>> = map
            .values()
            .filter_map(|i| i.webhook.as_ref().map(|w| w.ca_bundle.clone()))
            .collect();
        self.conversion.tls.retain(&in_use);
    }

    pub fn remove(&self, group: &str, plural: &str) {
        self.map
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(group.to_string(), plural.to_string()));
    }
}
