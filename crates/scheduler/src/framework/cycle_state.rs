//! The per-cycle state (upstream `framework.CycleState`): what PreFilter/PreScore plugins compute
//! once per pod and their Filter/Score read per node, keyed by the plugin's name, plus the cycle's
//! snapshot and which plugins skip Filter or Score. Cloned for preemption's what-if evaluations
//! (upstream `CycleState.Clone`), so every stored value is `Clone`.
//!
//! Filter and Score read the state once per node, so lookups are on the hot path: the few entries
//! are kept in small vectors and keys compared by address first (they are `&'static str` constants),
//! never hashed.

use std::any::Any;
use std::sync::Arc;

use crate::cache::Snapshot;

/// A value stored in the cycle state.
pub trait StateData: Any + Send + Sync {
    fn clone_data(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_data(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// A set of plugin names (a handful at most).
#[derive(Clone, Debug, Default)]
pub struct NameSet(Vec<&'static str>);

fn same(a: &str, b: &str) -> bool {
    std::ptr::eq(a, b) || a == b
}

impl NameSet {
    pub fn insert(&mut self, name: &'static str) -> bool {
        if self.contains(name) {
            return false;
        }
        self.0.push(name);
        true
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|n| same(n, name))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

pub struct CycleState {
    data: Vec<(&'static str, Box<dyn StateData>)>,
    pub snapshot: Arc<Snapshot>,
    /// Plugins whose PreFilter returned Skip: their Filter is not run this cycle.
    pub skip_filter: NameSet,
    /// Plugins whose PreScore returned Skip: their Score is not run this cycle.
    pub skip_score: NameSet,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        CycleState {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, (**v).clone_data()))
                .collect(),
            snapshot: self.snapshot.clone(),
            skip_filter: self.skip_filter.clone(),
            skip_score: self.skip_score.clone(),
        }
    }
}

impl CycleState {
    pub fn new(snapshot: Arc<Snapshot>) -> CycleState {
        CycleState {
            data: Vec::new(),
            snapshot,
            skip_filter: NameSet::default(),
            skip_score: NameSet::default(),
        }
    }

    pub fn write<T: StateData>(&mut self, key: &'static str, value: T) {
        let value: Box<dyn StateData> = Box::new(value);
        match self.data.iter_mut().find(|(k, _)| same(k, key)) {
            Some(entry) => entry.1 = value,
            None => self.data.push((key, value)),
        }
    }

    pub fn read<T: 'static>(&self, key: &'static str) -> Option<&T> {
        self.data
            .iter()
            .find(|(k, _)| same(k, key))
            .and_then(|(_, v)| (**v).as_any().downcast_ref())
    }

    pub fn read_mut<T: 'static>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data
            .iter_mut()
            .find(|(k, _)| same(k, key))
            .and_then(|(_, v)| (**v).as_any_mut().downcast_mut())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_values_and_independent_clones() {
        let mut s = CycleState::new(Arc::new(Snapshot::default()));
        s.write("a", vec![1, 2]);
        assert_eq!(s.read::<Vec<i32>>("a"), Some(&vec![1, 2]));
        assert!(s.read::<String>("a").is_none());
        let mut c = s.clone();
        c.read_mut::<Vec<i32>>("a").unwrap().push(3);
        assert_eq!(s.read::<Vec<i32>>("a").unwrap().len(), 2);
        assert_eq!(c.read::<Vec<i32>>("a").unwrap().len(), 3);
        s.write("a", vec![9]);
        assert_eq!(s.read::<Vec<i32>>("a"), Some(&vec![9]), "a write replaces");
        // Keys compare by value too (not only by address).
        let key = String::from("a");
        let key: &'static str = Box::leak(key.into_boxed_str());
        assert_eq!(s.read::<Vec<i32>>(key), Some(&vec![9]));
        let mut names = NameSet::default();
        assert!(names.insert("x") && !names.insert("x"));
        assert!(names.contains("x") && !names.contains("y"));
    }
}
