//! The policies and bindings in force (upstream `policy/generic` `policySource`): read from the
//! watch cache, each policy compiled once per resourceVersion, bindings grouped under the policy
//! they name. Policies without a binding and bindings of missing policies do nothing.
//!
//! Upstream recomputes its hook list from informer events (at most once a second). Here a request
//! compares the revisions of the cached policies and bindings with the last snapshot's (no
//! decoding, no storage reads) and rebuilds only when one changed, so a policy applies to the
//! first request after the cache has it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

use crate::ApiServer;

/// A policy compiled from its stored form.
pub trait CompiledPolicy: Send + Sync + 'static {
    fn compile(policy: &Value) -> Self;
}

/// A binding parsed from its stored form.
pub trait ParsedBinding: Send + Sync + 'static {
    fn parse(binding: &Value) -> Self;
    /// `spec.policyName`.
    fn policy_name(&self) -> &str;
    fn name(&self) -> &str;
}

/// One policy and its bindings (upstream `PolicyHook`).
pub struct Hook<P, B> {
    pub policy: Arc<P>,
    pub bindings: Vec<Arc<B>>,
}

struct Snapshot<P, B> {
    policy_rvs: Vec<i64>,
    binding_rvs: Vec<i64>,
    hooks: Arc<Vec<Hook<P, B>>>,
}

/// Compiled objects by name, kept across snapshots so that a change to one object recompiles
/// only it.
struct Compiled<T> {
    by_name: HashMap<String, (i64, Arc<T>)>,
}

impl<T> Default for Compiled<T> {
    fn default() -> Self {
        Compiled {
            by_name: HashMap::new(),
        }
    }
}

impl<T> Compiled<T> {
    fn get_or(
        &mut self,
        name: &str,
        rv: i64,
        json: &[u8],
        make: impl FnOnce(&Value) -> T,
    ) -> Option<Arc<T>> {
        if let Some((r, t)) = self.by_name.get(name) {
            if *r == rv {
                return Some(t.clone());
            }
        }
        let value: Value = serde_json::from_slice(json).ok()?;
        let t = Arc::new(make(&value));
        self.by_name.insert(name.to_string(), (rv, t.clone()));
        Some(t)
    }

    fn retain(&mut self, live: &[String]) {
        self.by_name.retain(|name, _| live.contains(name));
    }
}

/// The policies of one kind (validating or mutating) and their bindings.
pub struct Source<P, B> {
    policies: &'static str,
    bindings: &'static str,
    current: RwLock<Arc<Snapshot<P, B>>>,
    /// Held while rebuilding; also the compiled objects.
    rebuild: Mutex<(Compiled<P>, Compiled<B>)>,
}

impl<P: CompiledPolicy, B: ParsedBinding> Source<P, B> {
    /// `policies` and `bindings` are the storage prefixes of the two resources.
    pub fn new(policies: &'static str, bindings: &'static str) -> Source<P, B> {
        Source {
            policies,
            bindings,
            current: RwLock::new(Arc::new(Snapshot {
                policy_rvs: Vec::new(),
                binding_rvs: Vec::new(),
                hooks: Arc::new(Vec::new()),
            })),
            rebuild: Mutex::new((Compiled::default(), Compiled::default())),
        }
    }

    /// The hooks as the watch cache has the policies and bindings now.
    pub fn hooks(&self, api: &ApiServer) -> Arc<Vec<Hook<P, B>>> {
        let list = |storage: &str| {
            api.caches
                .get(storage)
                .map(|c| c.list(&format!("/{storage}/"), &Default::default()))
                .unwrap_or_default()
        };
        let bindings = list(self.bindings);
        // Without bindings no policy applies: skip reading the policies at all.
        let policies = if bindings.is_empty() {
            Vec::new()
        } else {
            list(self.policies)
        };
        let same = |rvs: &[i64], objs: &[Arc<crate::watch_cache::CachedObject>]| {
            rvs.len() == objs.len() && rvs.iter().zip(objs).all(|(r, o)| *r == o.rv)
        };
        {
            let cur = self.current.read().unwrap_or_else(|e| e.into_inner());
            if same(&cur.policy_rvs, &policies) && same(&cur.binding_rvs, &bindings) {
                return cur.hooks.clone();
            }
        }
        let mut compiled = self.rebuild.lock().unwrap_or_else(|e| e.into_inner());
        let (compiled_policies, compiled_bindings) = &mut *compiled;
        let mut parsed_bindings = Vec::with_capacity(bindings.len());
        for b in &bindings {
            if let Some(parsed) = compiled_bindings.get_or(&b.attrs.name, b.rv, &b.json, B::parse) {
                parsed_bindings.push(parsed);
            }
        }
        let mut hooks = Vec::new();
        for p in &policies {
            let name = &p.attrs.name;
            let mine: Vec<Arc<B>> = parsed_bindings
                .iter()
                .filter(|b| b.policy_name() == name)
                .cloned()
                .collect();
            if mine.is_empty() {
                continue;
            }
            if let Some(policy) = compiled_policies.get_or(name, p.rv, &p.json, P::compile) {
                hooks.push(Hook {
                    policy,
                    bindings: mine,
                });
            }
        }
        let live: Vec<String> = policies.iter().map(|p| p.attrs.name.clone()).collect();
        compiled_policies.retain(&live);
        let live: Vec<String> = bindings.iter().map(|b| b.attrs.name.clone()).collect();
        compiled_bindings.retain(&live);
        let snapshot = Arc::new(Snapshot {
            policy_rvs: policies.iter().map(|p| p.rv).collect(),
            binding_rvs: bindings.iter().map(|b| b.rv).collect(),
            hooks: Arc::new(hooks),
        });
        let hooks = snapshot.hooks.clone();
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = snapshot;
        hooks
    }
}
