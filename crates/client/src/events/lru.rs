//! A bounded least-recently-used map (the role of `github.com/golang/groupcache/lru` in upstream
//! client-go `tools/record/events_cache.go`): the correlator's caches hold at most 4096 keys each.

use std::collections::{BTreeMap, HashMap};

/// String-keyed LRU map; `get` and `put` make a key the most recent, `put` evicts the least recent
/// key once `capacity` is exceeded.
#[derive(Debug)]
pub(crate) struct Lru<V> {
    capacity: usize,
    tick: u64,
    entries: HashMap<String, (V, u64)>,
    order: BTreeMap<u64, String>,
}

impl<V> Lru<V> {
    pub(crate) fn new(capacity: usize) -> Lru<V> {
        Lru {
            capacity: capacity.max(1),
            tick: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    pub(crate) fn get(&mut self, key: &str) -> Option<&V> {
        let tick = self.next_tick();
        let (_, used) = self.entries.get_mut(key)?;
        self.order.remove(used);
        *used = tick;
        self.order.insert(tick, key.to_string());
        self.entries.get(key).map(|(v, _)| v)
    }

    pub(crate) fn put(&mut self, key: String, value: V) {
        let tick = self.next_tick();
        if let Some((_, used)) = self.entries.get(&key) {
            self.order.remove(used);
        }
        self.order.insert(tick, key.clone());
        self.entries.insert(key, (value, tick));
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::Lru;

    #[test]
    fn evicts_least_recently_used() {
        let mut lru = Lru::new(2);
        lru.put("a".into(), 1);
        lru.put("b".into(), 2);
        assert_eq!(lru.get("a"), Some(&1)); // a is now more recent than b
        lru.put("c".into(), 3);
        assert_eq!(lru.len(), 2);
        assert_eq!(lru.get("b"), None);
        assert_eq!(lru.get("a"), Some(&1));
        assert_eq!(lru.get("c"), Some(&3));
        lru.put("a".into(), 10);
        assert_eq!(lru.get("a"), Some(&10));
        assert_eq!(lru.len(), 2);
    }
}
