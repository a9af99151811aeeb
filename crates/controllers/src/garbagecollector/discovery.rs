//! Resource discovery for the garbage collector and namespace deletion (upstream client-go
//! `discovery.ServerPreferredResources` / `ServerPreferredNamespacedResources` and the GC's
//! `GetDeletableResources`): every resource the server serves, custom resources included, each once
//! in its group's preferred version, with its verbs and scope. Also the (apiVersion, kind) ->
//! resource map the collector resolves owner references with (upstream's REST mapper).

use std::collections::{BTreeMap, HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::api::ApiResource;
use kube::Client;

/// One served resource.
#[derive(Clone, Debug, PartialEq)]
pub struct Discovered {
    pub resource: ApiResource,
    pub namespaced: bool,
    pub verbs: Vec<String>,
}

impl Discovered {
    pub fn supports(&self, verbs: &[&str]) -> bool {
        verbs.iter().all(|v| self.verbs.iter().any(|x| x == v))
    }

    /// `<resource>.<group>` (group may be empty, as upstream prints it in namespace conditions).
    pub fn group_resource(&self) -> String {
        format!("{}.{}", self.resource.plural, self.resource.group)
    }
}

/// The discovery of one group: its versions (preferred first as the server lists them) with their
/// resource lists, and the versions whose list failed.
#[derive(Clone, Debug, Default)]
pub struct GroupDiscovery {
    pub group: String,
    pub preferred: String,
    pub versions: Vec<(String, APIResourceList)>,
}

/// What the server serves.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    /// Every resource in every served version (for the mapper).
    pub all: Vec<Discovered>,
    /// Each group/resource once, in its preferred version.
    pub preferred: Vec<Discovered>,
    /// `group/version: error` of versions whose resource list failed.
    pub failed: Vec<String>,
}

impl Discovery {
    /// Upstream `ErrGroupDiscoveryFailed`'s text, if any version failed.
    pub fn error(&self) -> Option<String> {
        (!self.failed.is_empty()).then(|| {
            format!(
                "unable to retrieve the complete list of server APIs: {}",
                self.failed.join(", ")
            )
        })
    }

    /// The resource of an owner reference's `apiVersion` and `kind`: the exact version when served,
    /// else the group's preferred version (owners keep their identity across versions).
    pub fn resolve(&self, api_version: &str, kind: &str) -> Option<&Discovered> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.all
            .iter()
            .find(|d| d.resource.api_version == api_version && d.resource.kind == kind)
            .or_else(|| {
                self.preferred
                    .iter()
                    .find(|d| d.resource.group == group && d.resource.kind == kind)
            })
    }
}

fn discovered(group: &str, version: &str, list: &APIResourceList) -> Vec<Discovered> {
    list.resources
        .iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| {
            let api_version = if group.is_empty() {
                version.to_string()
            } else {
                format!("{group}/{version}")
            };
            Discovered {
                resource: ApiResource {
                    group: group.to_string(),
                    version: version.to_string(),
                    api_version,
                    kind: r.kind.clone(),
                    plural: r.name.clone(),
                },
                namespaced: r.namespaced,
                verbs: r.verbs.clone(),
            }
        })
        .collect()
}

/// Flattens group discoveries: all resources, and the preferred view where a resource served in
/// several versions appears once, in the preferred version if it has it, else in the first listed.
pub fn flatten(groups: &[GroupDiscovery]) -> (Vec<Discovered>, Vec<Discovered>) {
    let mut all = Vec::new();
    let mut preferred: Vec<Discovered> = Vec::new();
    for g in groups {
        let mut chosen: BTreeMap<String, Discovered> = BTreeMap::new();
        let mut order = Vec::new();
        for (version, list) in &g.versions {
            for d in discovered(&g.group, version, list) {
                all.push(d.clone());
                let name = d.resource.plural.clone();
                match chosen.get(&name) {
                    Some(_) if *version != g.preferred => {}
                    Some(_) => {
                        chosen.insert(name, d);
                    }
                    None => {
                        order.push(name.clone());
                        chosen.insert(name, d);
                    }
                }
            }
        }
        preferred.extend(order.iter().filter_map(|n| chosen.remove(n)));
    }
    (all, preferred)
}

/// Asks the server (`/api`, `/apis` and each group version's resource list).
pub async fn discover(client: &Client) -> Result<Discovery, kube::Error> {
    let mut groups = Vec::new();
    let mut failed = Vec::new();
    let core = client.list_core_api_versions().await?;
    let mut core_group = GroupDiscovery {
        group: String::new(),
        preferred: core.versions.first().cloned().unwrap_or_default(),
        versions: Vec::new(),
    };
    for v in &core.versions {
        match client.list_core_api_resources(v).await {
            Ok(list) => core_group.versions.push((v.clone(), list)),
            Err(e) => failed.push(format!("{v}: {e}")),
        }
    }
    groups.push(core_group);
    for g in client.list_api_groups().await?.groups {
        let preferred = g
            .preferred_version
            .as_ref()
            .map(|p| p.version.clone())
            .or_else(|| g.versions.first().map(|v| v.version.clone()))
            .unwrap_or_default();
        let mut gd = GroupDiscovery {
            group: g.name.clone(),
            preferred,
            versions: Vec::new(),
        };
        let mut seen = HashSet::new();
        for v in &g.versions {
            if !seen.insert(v.version.clone()) {
                continue;
            }
            match client.list_api_group_resources(&v.group_version).await {
                Ok(list) => gd.versions.push((v.version.clone(), list)),
                Err(e) => failed.push(format!("{}: {e}", v.group_version)),
            }
        }
        groups.push(gd);
    }
    let (all, preferred) = flatten(&groups);
    Ok(Discovery {
        all,
        preferred,
        failed,
    })
}

/// Resources keyed by their collection URL, for diffing two discoveries.
pub fn by_url(resources: &[Discovered]) -> HashMap<String, Discovered> {
    resources
        .iter()
        .map(|d| (url_of(&d.resource), d.clone()))
        .collect()
}

pub fn url_of(r: &ApiResource) -> String {
    if r.group.is_empty() {
        format!("/api/{}/{}", r.version, r.plural)
    } else {
        format!("/apis/{}/{}/{}", r.group, r.version, r.plural)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResource;

    fn list(gv: &str, names: &[(&str, &str)]) -> APIResourceList {
        APIResourceList {
            group_version: gv.into(),
            resources: names
                .iter()
                .map(|(n, k)| APIResource {
                    name: n.to_string(),
                    kind: k.to_string(),
                    namespaced: true,
                    verbs: vec!["list".into(), "watch".into(), "delete".into()],
                    ..Default::default()
                })
                .collect(),
        }
    }

    #[test]
    fn preferred_version_wins_and_subresources_are_skipped() {
        let g = GroupDiscovery {
            group: "autoscaling".into(),
            preferred: "v2".into(),
            versions: vec![
                (
                    "v1".into(),
                    list(
                        "autoscaling/v1",
                        &[
                            ("horizontalpodautoscalers", "HorizontalPodAutoscaler"),
                            ("only1s", "Only1"),
                        ],
                    ),
                ),
                (
                    "v2".into(),
                    list(
                        "autoscaling/v2",
                        &[
                            ("horizontalpodautoscalers", "HorizontalPodAutoscaler"),
                            ("horizontalpodautoscalers/status", "HorizontalPodAutoscaler"),
                        ],
                    ),
                ),
            ],
        };
        let (all, preferred) = flatten(&[g]);
        assert_eq!(all.len(), 3);
        let names: Vec<(String, String)> = preferred
            .iter()
            .map(|d| (d.resource.plural.clone(), d.resource.version.clone()))
            .collect();
        assert_eq!(
            names,
            [
                ("horizontalpodautoscalers".to_string(), "v2".to_string()),
                ("only1s".to_string(), "v1".to_string())
            ]
        );
        let d = Discovery {
            all,
            preferred,
            failed: vec![],
        };
        assert_eq!(
            d.resolve("autoscaling/v1", "HorizontalPodAutoscaler")
                .unwrap()
                .resource
                .version,
            "v1"
        );
        assert_eq!(
            d.resolve("autoscaling/v9", "HorizontalPodAutoscaler")
                .unwrap()
                .resource
                .version,
            "v2"
        );
        assert!(d.resolve("v1", "HorizontalPodAutoscaler").is_none());
        assert_eq!(
            d.preferred[0].group_resource(),
            "horizontalpodautoscalers.autoscaling"
        );
    }
}
