//! A bounded cache of forwarded answers, positive and negative: CoreDNS `plugin/cache` as kubeadm's
//! Corefile configures it (`cache 30`, with `disable success/denial cluster.local`, so cluster names
//! are never cached: they are answered from the snapshot, which is always current). Differs: one
//! table for both kinds, evicting the oldest entry when full (CoreDNS evicts a random one from
//! shards of 9984 entries); SERVFAIL is not cached.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{RData, RecordType};

/// (lowercase name, type, class).
pub type Key = (String, u16, u16);

struct Entry {
    message: Message,
    stored: Instant,
    ttl: Duration,
    generation: u64,
}

struct Inner {
    map: HashMap<Key, Entry>,
    /// Insertion order for eviction; may hold stale generations of replaced entries.
    order: VecDeque<(Key, u64)>,
    generation: u64,
}

pub struct Cache {
    inner: Mutex<Inner>,
    capacity: usize,
    max_ttl: Duration,
    /// TTL of a negative answer that carries no SOA to take one from.
    default_negative_ttl: Duration,
}

impl Cache {
    pub fn new(capacity: usize, max_ttl: Duration) -> Cache {
        Cache {
            inner: Mutex::new(Inner {
                map: HashMap::new(),
                order: VecDeque::new(),
                generation: 0,
            }),
            capacity: capacity.max(1),
            max_ttl,
            default_negative_ttl: Duration::from_secs(5).min(max_ttl),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached answer with its TTLs lowered by the time it spent here.
    pub fn get(&self, key: &Key, now: Instant) -> Option<Message> {
        let mut inner = self.lock();
        let entry = inner.map.get(key)?;
        let age = now.saturating_duration_since(entry.stored);
        if age >= entry.ttl {
            inner.map.remove(key);
            return None;
        }
        let mut message = entry.message.clone();
        let spent = age.as_secs() as u32;
        for r in message
            .answers
            .iter_mut()
            .chain(message.authorities.iter_mut())
            .chain(message.additionals.iter_mut())
        {
            r.ttl = r.ttl.saturating_sub(spent);
        }
        Some(message)
    }

    pub fn insert(&self, key: Key, message: &Message, now: Instant) {
        let Some(ttl) = self.ttl_of(message) else {
            return;
        };
        let mut inner = self.lock();
        inner.generation += 1;
        let generation = inner.generation;
        let fresh = !inner.map.contains_key(&key);
        inner.map.insert(
            key.clone(),
            Entry {
                message: message.clone(),
                stored: now,
                ttl,
                generation,
            },
        );
        inner.order.push_back((key, generation));
        if fresh {
            while inner.map.len() > self.capacity {
                let Some((old, g)) = inner.order.pop_front() else {
                    break;
                };
                if inner.map.get(&old).is_some_and(|e| e.generation == g) {
                    inner.map.remove(&old);
                }
            }
        }
        // Replaced and expired entries leave stale keys behind: compact before the queue outgrows
        // the table.
        if inner.order.len() > 2 * self.capacity {
            let Inner { map, order, .. } = &mut *inner;
            order.retain(|(k, g)| map.get(k).is_some_and(|e| e.generation == *g));
        }
    }

    /// How long `message` may be cached (CoreDNS `minMsgTTL`, capped): the smallest TTL of its
    /// records for answers; for NXDOMAIN and NODATA, the SOA's (the smaller of its TTL and minimum).
    fn ttl_of(&self, message: &Message) -> Option<Duration> {
        let rcode = message.metadata.response_code;
        let negative = rcode == ResponseCode::NXDomain
            || (rcode == ResponseCode::NoError && message.answers.is_empty());
        if rcode != ResponseCode::NoError && rcode != ResponseCode::NXDomain {
            return None;
        }
        let secs = if negative {
            let soa = message.authorities.iter().find_map(|r| match &r.data {
                RData::SOA(soa) => Some(r.ttl.min(soa.minimum)),
                _ => None,
            });
            match soa {
                Some(s) => Duration::from_secs(u64::from(s)),
                None => self.default_negative_ttl,
            }
        } else {
            let min = message
                .answers
                .iter()
                .chain(message.authorities.iter())
                .filter(|r| r.record_type() != RecordType::OPT)
                .map(|r| r.ttl)
                .min()
                .unwrap_or(0);
            Duration::from_secs(u64::from(min))
        };
        let ttl = secs.min(self.max_ttl);
        (!ttl.is_zero()).then_some(ttl)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::{MessageType, OpCode};
    use hickory_proto::rr::rdata::{A, SOA};
    use hickory_proto::rr::{Name, Record};

    fn answer(ttl: u32) -> Message {
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        let name = Name::from_ascii("example.com.").expect("name");
        m.add_answer(Record::from_rdata(name, ttl, RData::A(A::new(1, 2, 3, 4))));
        m
    }

    fn key(n: &str) -> Key {
        (n.to_string(), 1, 1)
    }

    #[test]
    fn answers_age_and_expire() {
        let c = Cache::new(10, Duration::from_secs(30));
        let t0 = Instant::now();
        c.insert(key("a"), &answer(10), t0);
        let m = c.get(&key("a"), t0 + Duration::from_secs(4)).expect("hit");
        assert_eq!(m.answers[0].ttl, 6);
        assert!(c.get(&key("a"), t0 + Duration::from_secs(10)).is_none());
        assert!(c.is_empty());
    }

    #[test]
    fn ttl_is_capped() {
        let c = Cache::new(10, Duration::from_secs(30));
        let t0 = Instant::now();
        c.insert(key("a"), &answer(3600), t0);
        assert!(c.get(&key("a"), t0 + Duration::from_secs(29)).is_some());
        assert!(c.get(&key("a"), t0 + Duration::from_secs(30)).is_none());
    }

    #[test]
    fn negative_answers_use_the_soa_minimum() {
        let c = Cache::new(10, Duration::from_secs(30));
        let mut m = Message::new(1, MessageType::Response, OpCode::Query);
        m.metadata.response_code = ResponseCode::NXDomain;
        let zone = Name::from_ascii("com.").expect("name");
        let soa = SOA::new(zone.clone(), zone.clone(), 1, 1, 1, 1, 7);
        m.add_authority(Record::from_rdata(zone, 900, RData::SOA(soa)));
        let t0 = Instant::now();
        c.insert(key("nx"), &m, t0);
        assert!(c.get(&key("nx"), t0 + Duration::from_secs(6)).is_some());
        assert!(c.get(&key("nx"), t0 + Duration::from_secs(7)).is_none());
        let mut fail = Message::new(1, MessageType::Response, OpCode::Query);
        fail.metadata.response_code = ResponseCode::ServFail;
        c.insert(key("sf"), &fail, t0);
        assert!(c.get(&key("sf"), t0).is_none());
    }

    #[test]
    fn bounded_oldest_first() {
        let c = Cache::new(3, Duration::from_secs(30));
        let t0 = Instant::now();
        for n in ["a", "b", "c", "d"] {
            c.insert(key(n), &answer(10), t0);
        }
        assert_eq!(c.len(), 3);
        assert!(c.get(&key("a"), t0).is_none());
        assert!(c.get(&key("d"), t0).is_some());
        // Replacing an entry many times keeps the bookkeeping bounded.
        for _ in 0..100 {
            c.insert(key("d"), &answer(10), t0);
        }
        assert!(c.lock().order.len() <= 6);
        assert_eq!(c.len(), 3);
    }
}
