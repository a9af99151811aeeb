//! Which providers a storage key gets (upstream `encryptionconfig.transformerFromOverrides`): the
//! providers configured for its exact resource, else for `*.<its group>`, else for `*.*`; none means
//! plaintext.
//!
//! Upstream picks the transformer when it builds each resource's storage; rkube's store sees keys,
//! so the key is mapped back to its resource: `/<group>/<plural>/...` for custom resources (their
//! groups have a dot, built-in storage prefixes never do), the built-in resource whose storage prefix
//! it is otherwise. A custom resource is thus covered by `*.*`, `*.<group>` or `<plural>.<group>`
//! from its first write, with nothing to register when its CRD appears.

use std::collections::HashMap;
use std::sync::Arc;

use super::config::{EncryptionConfiguration, GroupResource};
use super::transformer::{Chain, Provider};

/// Providers by resource, and what is needed to find a key's resource.
pub struct Transformers {
    /// group -> resource -> chain.
    exact: HashMap<String, HashMap<String, Chain>>,
    /// `*.<group>` (`*.` is the core group's).
    any_in_group: HashMap<String, Chain>,
    /// `*.*`.
    any: Option<Chain>,
    /// Built-in storage prefix -> (group, resource).
    builtin: HashMap<String, (String, String)>,
}

impl Transformers {
    pub fn new(config: &EncryptionConfiguration) -> Result<Transformers, String> {
        // As upstream: a resource named in several entries gets their providers one after another.
        let mut lists: Vec<(GroupResource, Vec<Arc<Provider>>)> = Vec::new();
        for entry in &config.resources {
            let providers = entry
                .providers
                .iter()
                .map(|p| Provider::new(p).map(Arc::new))
                .collect::<Result<Vec<_>, _>>()?;
            for resource in &entry.resources {
                let gr = GroupResource::parse(resource);
                match lists.iter_mut().find(|(g, _)| *g == gr) {
                    Some((_, list)) => list.extend(providers.iter().cloned()),
                    None => lists.push((gr, providers.clone())),
                }
            }
        }
        let mut out = Transformers {
            exact: HashMap::new(),
            any_in_group: HashMap::new(),
            any: None,
            builtin: builtin_storage(),
        };
        for (gr, providers) in lists {
            let chain = Chain::new(providers)?;
            if gr.is_any() {
                out.any = Some(chain);
            } else if gr.resource == "*" {
                out.any_in_group.insert(gr.group, chain);
            } else {
                out.exact
                    .entry(gr.group)
                    .or_default()
                    .insert(gr.resource, chain);
            }
        }
        Ok(out)
    }

    /// The providers of a resource, if any are configured.
    pub fn for_resource(&self, group: &str, resource: &str) -> Option<&Chain> {
        self.exact
            .get(group)
            .and_then(|m| m.get(resource))
            .or_else(|| self.any_in_group.get(group))
            .or(self.any.as_ref())
    }

    /// The providers of the resource a storage key belongs to.
    pub fn for_key(&self, key: &str) -> Option<&Chain> {
        let (group, resource) = self.resource_of(key);
        self.for_resource(group, resource)
    }

    /// The (group, resource) a storage key belongs to.
    pub fn resource_of<'a>(&'a self, key: &'a str) -> (&'a str, &'a str) {
        let mut parts = key.trim_start_matches('/').split('/');
        let first = parts.next().unwrap_or("");
        let second = parts.next().unwrap_or("");
        if first.contains('.') {
            return (first, second);
        }
        match (first, second) {
            // Upstream's allocator bitmaps; never nameable in the file, covered by `*.` and `*.*`.
            ("ranges", "servicenodeports") => ("", "servicenodeportallocations"),
            ("ranges", "serviceips") => ("", "serviceipallocations"),
            _ => match self.builtin.get(first) {
                Some((group, resource)) => (group, resource),
                None => ("", first),
            },
        }
    }
}

/// Built-in storage prefixes and their resources. Where versions or groups share storage (core and
/// `events.k8s.io` Events), the core group's name is the one the file uses, as upstream requires.
fn builtin_storage() -> HashMap<String, (String, String)> {
    let mut out: HashMap<String, (String, String)> = HashMap::new();
    for r in apimachinery::resources::builtin() {
        let entry = out
            .entry(r.storage.clone())
            .or_insert_with(|| (r.group.clone(), r.plural.clone()));
        if r.group.is_empty() {
            *entry = (r.group, r.plural);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encryption::config;

    fn transformers(body: &str) -> Transformers {
        let file = format!(
            "apiVersion: {}\nkind: {}\n{body}",
            config::API_VERSION,
            config::KIND
        );
        Transformers::new(&config::parse(file.as_bytes()).unwrap()).unwrap()
    }

    const CBC: &str = "{aescbc: {keys: [{name: k, secret: MTIzNDU2Nzg5MDEyMzQ1Ng==}]}}";

    #[test]
    fn keys_map_to_their_resources() {
        let t = transformers(&format!(
            "resources: [{{resources: [secrets], providers: [{CBC}]}}]"
        ));
        assert_eq!(t.resource_of("/secrets/default/s"), ("", "secrets"));
        assert_eq!(t.resource_of("/deployments/ns/d"), ("apps", "deployments"));
        assert_eq!(t.resource_of("/events/ns/e"), ("", "events"));
        assert_eq!(
            t.resource_of("/horizontalpodautoscalers/ns/h"),
            ("autoscaling", "horizontalpodautoscalers")
        );
        assert_eq!(
            t.resource_of("/example.com/widgets/ns/w"),
            ("example.com", "widgets")
        );
        assert_eq!(
            t.resource_of("/example.com/clusterwidgets/w"),
            ("example.com", "clusterwidgets")
        );
        assert_eq!(
            t.resource_of("/ranges/servicenodeports"),
            ("", "servicenodeportallocations")
        );
        // Every built-in resource maps back to itself (events.k8s.io Events share core storage).
        for r in apimachinery::resources::builtin() {
            let key = format!("/{}/ns/name", r.storage);
            let want = if r.group == "events.k8s.io" {
                ("", "events")
            } else {
                (r.group.as_str(), r.plural.as_str())
            };
            assert_eq!(t.resource_of(&key), want, "{}", r.group_resource());
        }
    }

    #[test]
    fn exact_then_group_then_everything() {
        let t = transformers(&format!(
            "resources:
- resources: [secrets, widgets.example.com]
  providers: [{CBC}]
- resources: ['*.apps', '*.']
  providers: [{{identity: {{}}}}]
- resources: ['*.*']
  providers: [{CBC}]
"
        ));
        let writes_plain = |key: &str| {
            let chain = t.for_key(key).expect(key);
            chain
                .encrypt(&bytes::Bytes::from_static(b"{}"), b"")
                .unwrap()
                .as_ref()
                == b"{}"
        };
        assert!(!writes_plain("/secrets/ns/s"));
        assert!(writes_plain("/configmaps/ns/c"));
        assert!(writes_plain("/deployments/ns/d"));
        assert!(!writes_plain("/example.com/widgets/ns/w"));
        assert!(!writes_plain("/other.io/gadgets/g"));
        assert!(!writes_plain("/leases/ns/l"));
    }

    #[test]
    fn unconfigured_resources_have_no_chain() {
        let t = transformers(&format!(
            "resources: [{{resources: [secrets], providers: [{CBC}]}}]"
        ));
        assert!(t.for_key("/configmaps/ns/c").is_none());
        assert!(t.for_key("/secrets/ns/s").is_some());
    }
}
