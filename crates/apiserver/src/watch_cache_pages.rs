//! Lists served from the watch cache at one revision, whole or a page at a time (upstream 1.33+'s
//! `ListFromCacheSnapshot`: the first page of a paged LIST, its continuations, and exact-revision
//! lists come from the cacher's snapshots instead of etcd).
//!
//! Upstream keeps a copy-on-write B-tree snapshot per revision of its history window. Here the state
//! at an older revision R is rebuilt on demand from the current objects and the event ring: for each
//! key written after R, the `prev` of its first event after R is what the key held at R (nothing, for
//! a creation). That overlay is as large as the writes since R, not as the resource, so a quiet
//! resource pages from memory at almost no cost, and a revision whose events have left the ring
//! (the window upstream's snapshots also cover) is [`PageError::TooOld`]: the caller reads the store.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use super::{CacheInner, CacheSet, CachedObject, WatchCache};
use crate::filter::Filter;

/// One page of a list read from the cache.
#[derive(Debug)]
pub struct CachePage {
    /// The selected objects, in key order.
    pub items: Vec<Arc<CachedObject>>,
    /// The revision the page shows the resource at.
    pub revision: i64,
    /// The key of the last item returned, when keys follow it (the page is full).
    pub last_key: Option<String>,
    /// How many keys the range held at `revision`, from the start key on (upstream's item count for
    /// `remainingItemCount`); counted only for pages that are full.
    pub count: usize,
}

/// Why a list cannot be served from the cache.
#[derive(Debug, PartialEq, Eq)]
pub enum PageError {
    /// The revision is older than the events kept in memory.
    TooOld,
    /// The cache has not reached the revision yet.
    NotYet,
    /// The resource's objects are not kept in memory.
    NotKept,
}

/// What a page asks for: the keys under `prefix` from `start` (inclusive), at revision `at` (the
/// latest state the cache holds when `None`), at most `limit` selected by `filter`.
pub struct PageRequest<'a> {
    pub prefix: &'a str,
    pub start: &'a str,
    pub at: Option<i64>,
    pub filter: &'a Filter,
    pub limit: Option<usize>,
}

impl WatchCache {
    /// A page of the resource at one revision. `caches` gives the global revision the caches have
    /// reached, read under this cache's lock so that the page and its revision agree.
    pub fn page(&self, caches: &CacheSet, req: &PageRequest<'_>) -> Result<CachePage, PageError> {
        if !self.keeps_objects() {
            return Err(PageError::NotKept);
        }
        let inner = self.read();
        let latest = latest_revision(&inner, caches.revision());
        let (revision, overlay) = match req.at {
            None => (latest, BTreeMap::new()),
            Some(at) if at > latest => return Err(PageError::NotYet),
            Some(at) if at < inner.window_start => return Err(PageError::TooOld),
            Some(at) => (at, state_before(&inner, at, req.prefix)),
        };
        Ok(select(&inner.objects, &overlay, revision, req))
    }
}

/// The revision the objects of a cache show: every event up to the global revision was applied
/// (the caches advance after applying), and an event applied since may be ahead of it.
fn latest_revision(inner: &CacheInner, global: i64) -> i64 {
    inner.ring.back().map_or(global, |e| e.rv.max(global))
}

/// For each key under `prefix` written after `at`: what it held at `at` (`None`: absent).
fn state_before<'a>(
    inner: &'a CacheInner,
    at: i64,
    prefix: &str,
) -> BTreeMap<&'a str, Option<&'a Arc<CachedObject>>> {
    let mut overlay = BTreeMap::new();
    // The ring is in revision order: the first event after `at` of a key holds its state at `at`.
    let first_after = inner.ring.partition_point(|e| e.rv <= at);
    for event in inner.ring.range(first_after..) {
        if event.key.starts_with(prefix) {
            overlay
                .entry(event.key.as_str())
                .or_insert(event.prev.as_ref());
        }
    }
    overlay
}

/// Walks the current objects and the overlay together in key order, selecting up to the limit; a key
/// past a full page means more follow (upstream's cacher learns it the same way), and then the rest
/// of the range is counted for `remainingItemCount`.
fn select(
    objects: &BTreeMap<String, Arc<CachedObject>>,
    overlay: &BTreeMap<&str, Option<&Arc<CachedObject>>>,
    revision: i64,
    req: &PageRequest<'_>,
) -> CachePage {
    let from = format!("{}{}", req.prefix, req.start);
    let mut current = objects
        .range::<str, _>((Bound::Included(from.as_str()), Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(req.prefix))
        .map(|(k, o)| (k.as_str(), Some(o)))
        .peekable();
    let mut changed = overlay
        .range::<str, _>((Bound::Included(from.as_str()), Bound::Unbounded))
        .take_while(|(k, _)| k.starts_with(req.prefix))
        .map(|(k, o)| (*k, *o))
        .peekable();
    let merged = std::iter::from_fn(|| {
        let next = match (current.peek(), changed.peek()) {
            (None, None) => return None,
            (Some(_), None) => current.next(),
            (None, Some(_)) => changed.next(),
            (Some((a, _)), Some((b, _))) => match a.cmp(b) {
                std::cmp::Ordering::Less => current.next(),
                std::cmp::Ordering::Greater => changed.next(),
                // The key changed after the revision: its state then wins.
                std::cmp::Ordering::Equal => {
                    current.next();
                    changed.next()
                }
            },
        };
        Some(next)
    })
    .flatten()
    .filter_map(|(k, o)| o.map(|o| (k, o)));
    let mut page = CachePage {
        items: Vec::new(),
        revision,
        last_key: None,
        count: 0,
    };
    let mut last_selected = None;
    let mut full = false;
    for (key, obj) in merged {
        page.count += 1;
        if full {
            continue;
        }
        if req.limit.is_some_and(|l| page.items.len() >= l) {
            full = true;
            continue;
        }
        if req.filter.matches(&obj.attrs) {
            page.items.push(obj.clone());
            last_selected = Some(key);
        }
    }
    if full {
        page.last_key = last_selected.map(str::to_string);
    }
    page
}

#[cfg(test)]
mod tests {
    use super::super::*;
    use super::*;
    use bytes::Bytes;
    use storage::{Event, KeyValue};

    fn kv(key: &str, rv: i64, app: &str) -> KeyValue {
        let name = key.rsplit('/').next().unwrap();
        KeyValue {
            key: key.into(),
            value: Bytes::from(format!(
                r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns","labels":{{"app":"{app}"}}}}}}"#
            )),
            create_revision: rv,
            mod_revision: rv,
        }
    }

    /// A cache whose history is: o1..o5 created at revisions 1..5 (app=a for odd, b for even), then
    /// o2 changed to app=a (6), o3 deleted (7), o6 created (8), o1 changed (9).
    fn cache() -> WatchCache {
        let cache = WatchCache::new("configmaps", "", "configmaps");
        cache.reset(BTreeMap::new(), 0, 0);
        let app = |i: i64| if i % 2 == 1 { "a" } else { "b" };
        for i in 1..=5 {
            cache.apply(&Event {
                kind: EventKind::Put,
                kv: kv(&format!("/configmaps/ns/o{i}"), i, app(i)),
                prev: None,
            });
        }
        cache.apply(&Event {
            kind: EventKind::Put,
            kv: kv("/configmaps/ns/o2", 6, "a"),
            prev: Some(kv("/configmaps/ns/o2", 2, "b")),
        });
        cache.apply(&Event {
            kind: EventKind::Delete,
            kv: KeyValue {
                key: "/configmaps/ns/o3".into(),
                value: Bytes::new(),
                create_revision: 3,
                mod_revision: 7,
            },
            prev: Some(kv("/configmaps/ns/o3", 3, "a")),
        });
        cache.apply(&Event {
            kind: EventKind::Put,
            kv: kv("/configmaps/ns/o6", 8, "b"),
            prev: None,
        });
        cache.apply(&Event {
            kind: EventKind::Put,
            kv: kv("/configmaps/ns/o1", 9, "b"),
            prev: Some(kv("/configmaps/ns/o1", 1, "a")),
        });
        cache
    }

    fn caches_at(rev: i64) -> Arc<CacheSet> {
        let caches = CacheSet::new();
        caches.advance(rev);
        caches
    }

    fn page(
        cache: &WatchCache,
        caches: &CacheSet,
        start: &str,
        at: Option<i64>,
        filter: &Filter,
        limit: Option<usize>,
    ) -> Result<CachePage, PageError> {
        cache.page(
            caches,
            &PageRequest {
                prefix: "/configmaps/ns/",
                start,
                at,
                filter,
                limit,
            },
        )
    }

    fn names(page: &CachePage) -> Vec<String> {
        page.items
            .iter()
            .map(|o| format!("{}@{}", o.attrs.name, o.rv))
            .collect()
    }

    #[test]
    fn the_latest_state_in_pages() {
        let (cache, caches) = (cache(), caches_at(9));
        let all = Filter::default();
        let p = page(&cache, &caches, "", None, &all, Some(2)).unwrap();
        assert_eq!(names(&p), ["o1@9", "o2@6"]);
        assert_eq!(p.revision, 9);
        assert_eq!(p.last_key.as_deref(), Some("/configmaps/ns/o2"));
        assert_eq!(p.count, 5);
        let p = page(&cache, &caches, "o2\0", Some(9), &all, Some(2)).unwrap();
        assert_eq!(names(&p), ["o4@4", "o5@5"]);
        assert_eq!(p.count, 3);
        let p = page(&cache, &caches, "o5\0", Some(9), &all, Some(2)).unwrap();
        assert_eq!(names(&p), ["o6@8"]);
        assert_eq!(p.last_key, None);
        // A page exactly as long as what is left has no continuation.
        let p = page(&cache, &caches, "o4\0", Some(9), &all, Some(2)).unwrap();
        assert_eq!(p.last_key, None);
    }

    #[test]
    fn an_older_revision_undoes_the_writes_after_it() {
        let (cache, caches) = (cache(), caches_at(9));
        let all = Filter::default();
        let at5 = page(&cache, &caches, "", Some(5), &all, None).unwrap();
        assert_eq!(names(&at5), ["o1@1", "o2@2", "o3@3", "o4@4", "o5@5"]);
        assert_eq!(at5.revision, 5);
        let at7 = page(&cache, &caches, "o1\0", Some(7), &all, Some(3)).unwrap();
        assert_eq!(names(&at7), ["o2@6", "o4@4", "o5@5"]);
        assert_eq!(at7.last_key, None);
        let at8 = page(&cache, &caches, "", Some(8), &all, Some(4)).unwrap();
        assert_eq!(names(&at8), ["o1@1", "o2@6", "o4@4", "o5@5"]);
        assert_eq!(at8.last_key.as_deref(), Some("/configmaps/ns/o5"));
        assert_eq!(at8.count, 5);
    }

    #[test]
    fn selectors_fill_pages_with_matches_only() {
        let (cache, caches) = (cache(), caches_at(9));
        let a = Filter::new("", "configmaps", None, Some("app=a"), None).unwrap();
        let p = page(&cache, &caches, "", Some(5), &a, Some(2)).unwrap();
        assert_eq!(names(&p), ["o1@1", "o3@3"]);
        // o4 follows the full page, so there is more (it need not match, as upstream).
        assert_eq!(p.last_key.as_deref(), Some("/configmaps/ns/o3"));
        let p = page(&cache, &caches, "o3\0", Some(5), &a, Some(2)).unwrap();
        assert_eq!(names(&p), ["o5@5"]);
        assert_eq!(p.last_key, None);
    }

    #[test]
    fn revisions_outside_the_window_are_refused() {
        let cache = cache();
        let all = Filter::default();
        // The caches have not reached revision 12.
        assert_eq!(
            page(&cache, &caches_at(9), "", Some(12), &all, None).unwrap_err(),
            PageError::NotYet
        );
        // Nothing before the last load (revision 4 here) is in memory.
        let reloaded = WatchCache::new("configmaps", "", "configmaps");
        reloaded.reset(BTreeMap::new(), 0, 4);
        assert_eq!(
            page(&reloaded, &caches_at(9), "", Some(3), &all, None).unwrap_err(),
            PageError::TooOld
        );
        assert!(page(&reloaded, &caches_at(9), "", Some(4), &all, None).is_ok());
    }

    #[test]
    fn the_page_revision_covers_events_applied_before_the_global_revision_moved() {
        let cache = cache();
        let p = page(&cache, &caches_at(7), "", None, &Filter::default(), None).unwrap();
        assert_eq!(p.revision, 9);
    }
}
