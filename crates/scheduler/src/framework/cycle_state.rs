//! The per-cycle state (upstream `framework.CycleState`): what PreFilter/PreScore plugins compute
//! once per pod and their Filter/Score read per node, keyed by the plugin's name, plus the cycle's
//! snapshot and which plugins skip Filter or Score. Cloned for preemption's what-if evaluations
//! (upstream `CycleState.Clone`), so every stored value is `Clone`.

use std::any::Any;
use std::collections::{HashMap, HashSet};
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

pub struct CycleState {
    data: HashMap<&'static str, Box<dyn StateData>>,
    pub snapshot: Arc<Snapshot>,
    /// Plugins whose PreFilter returned Skip: their Filter is not run this cycle.
    pub skip_filter: HashSet<&'static str>,
    /// Plugins whose PreScore returned Skip: their Score is not run this cycle.
    pub skip_score: HashSet<&'static str>,
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
            data: HashMap::new(),
            snapshot,
            skip_filter: HashSet::new(),
            skip_score: HashSet::new(),
        }
    }

    pub fn write<T: StateData>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Box::new(value));
    }

    pub fn read<T: 'static>(&self, key: &'static str) -> Option<&T> {
        self.data
            .get(key)
            .and_then(|v| (**v).as_any().downcast_ref())
    }

    pub fn read_mut<T: 'static>(&mut self, key: &'static str) -> Option<&mut T> {
        self.data
            .get_mut(key)
            .and_then(|v| (**v).as_any_mut().downcast_mut())
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
    }
}
