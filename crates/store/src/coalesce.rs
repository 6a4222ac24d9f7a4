//! The state's caches, with concurrent loads of one entry coalesced into one read.
//!
//! slatedb asks its cache for a table's index, filter, stats or a data block through
//! `DbCache::fetch_*`, handing it the loader to run on a miss. Its trait asks
//! implementations to deduplicate concurrent fetches of one key, but the moka cache it ships
//! does not: it runs every caller's loader. A fresh `rsagg run --once` looks up its changes
//! many at a time, so at first they all miss the same filters and indexes, and each read
//! them whole: in a 300,000-resource state's incremental run, one table's 61 KB filter was
//! read 21 times and its 138 KB index 4 times within 10 ms, about 3.5 of the run's 5.7 MB
//! read from the state. Here the first caller's loader runs and the others wait for its
//! entry; if it fails (or its caller goes away), each runs its own.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use slatedb::db_cache::{CacheFetch, CacheLoader, CachedEntry, CachedKey, DbCache};

/// Loads in flight by key: the first caller of a key loads, later ones wait for its value.
pub(crate) struct Coalescer<K, V> {
    loading: InFlight<K, V>,
}

/// One load in flight: resolves to its value, or `None` when it failed or was dropped.
type Loading<V> = Shared<BoxFuture<'static, Option<V>>>;

type InFlight<K, V> = Arc<Mutex<HashMap<K, Loading<V>>>>;

/// What a caller does: load (and hand the value on), or wait.
enum Role<V> {
    Lead(tokio::sync::oneshot::Sender<V>),
    Wait(Loading<V>),
}

impl<K, V> Coalescer<K, V>
where
    K: Hash + Eq + Clone + Send + 'static,
    V: Clone + Send + Sync + 'static,
{
    pub(crate) fn new() -> Self {
        Coalescer {
            loading: Arc::default(),
        }
    }

    /// The value of `key`: `load`'s, unless a load of `key` is in flight, whose value is
    /// then taken (`true`: it came from another caller's load). When that load fails or is
    /// dropped, `load` runs after all.
    pub(crate) async fn run<E, F, Fut>(&self, key: K, load: F) -> Result<(V, bool), E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<V, E>>,
    {
        let role = {
            let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
            match loading.get(&key) {
                Some(l) => Role::Wait(l.clone()),
                None => {
                    let (tx, rx) = tokio::sync::oneshot::channel::<V>();
                    loading.insert(key.clone(), rx.map(Result::ok).boxed().shared());
                    Role::Lead(tx)
                }
            }
        };
        match role {
            Role::Lead(tx) => {
                // Takes the load off the map however this ends; a sender dropped unsent
                // tells the waiters to load for themselves.
                let _done = Done {
                    loading: self.loading.clone(),
                    key,
                };
                let v = load().await?;
                let _ = tx.send(v.clone());
                Ok((v, false))
            }
            Role::Wait(l) => match l.await {
                Some(v) => Ok((v, true)),
                None => load().await.map(|v| (v, false)),
            },
        }
    }
}

/// Takes a finished (or abandoned) load off the map.
struct Done<K: Hash + Eq, V> {
    loading: InFlight<K, V>,
    key: K,
}

impl<K: Hash + Eq, V> Drop for Done<K, V> {
    fn drop(&mut self) {
        let mut loading = self.loading.lock().unwrap_or_else(|p| p.into_inner());
        loading.remove(&self.key);
    }
}

/// What kind of entry a key names (block ids and index or filter offsets share one space),
/// and so which of the inner cache's methods serve it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Block,
    Index,
    Filter,
    Stats,
}

impl Kind {
    async fn get(
        self,
        cache: &dyn DbCache,
        key: &CachedKey,
    ) -> Result<Option<CachedEntry>, slatedb::Error> {
        match self {
            Kind::Block => cache.get_block(key).await,
            Kind::Index => cache.get_index(key).await,
            Kind::Filter => cache.get_filter(key).await,
            Kind::Stats => cache.get_stats(key).await,
        }
    }

    async fn fetch(
        self,
        cache: Arc<dyn DbCache>,
        key: CachedKey,
        loader: CacheLoader,
    ) -> Result<CacheFetch, slatedb::Error> {
        match self {
            Kind::Block => cache.fetch_block(key, loader).await,
            Kind::Index => cache.fetch_index(key, loader).await,
            Kind::Filter => cache.fetch_filter(key, loader).await,
            Kind::Stats => cache.fetch_stats(key, loader).await,
        }
    }
}

/// A [`DbCache`] whose `fetch_*` load each missing entry once however many callers ask for
/// it at the same time; everything else is `inner`'s.
pub(crate) struct Coalescing {
    inner: Arc<dyn DbCache>,
    loads: Coalescer<(Kind, CachedKey), CacheFetch>,
}

impl Coalescing {
    pub(crate) fn new(inner: Arc<dyn DbCache>) -> Self {
        Coalescing {
            inner,
            loads: Coalescer::new(),
        }
    }

    /// `key` of `kind`: a hit as it is; a miss fetched (loaded and inserted) by the inner
    /// cache for the first caller, the entry shared with the others (a hit for them).
    async fn fetch(
        &self,
        kind: Kind,
        key: CachedKey,
        loader: CacheLoader,
    ) -> Result<CacheFetch, slatedb::Error> {
        if let Some(e) = kind.get(self.inner.as_ref(), &key).await? {
            return Ok(CacheFetch::hit(e));
        }
        let inner = self.inner.clone();
        let (got, shared) = self
            .loads
            .run((kind, key.clone()), || kind.fetch(inner, key, loader))
            .await?;
        Ok(if shared {
            CacheFetch::hit(got.entry)
        } else {
            got
        })
    }
}

#[async_trait]
impl DbCache for Coalescing {
    async fn get_block(&self, key: &CachedKey) -> Result<Option<CachedEntry>, slatedb::Error> {
        self.inner.get_block(key).await
    }

    async fn get_index(&self, key: &CachedKey) -> Result<Option<CachedEntry>, slatedb::Error> {
        self.inner.get_index(key).await
    }

    async fn get_filter(&self, key: &CachedKey) -> Result<Option<CachedEntry>, slatedb::Error> {
        self.inner.get_filter(key).await
    }

    async fn get_stats(&self, key: &CachedKey) -> Result<Option<CachedEntry>, slatedb::Error> {
        self.inner.get_stats(key).await
    }

    async fn insert(&self, key: CachedKey, value: CachedEntry) {
        self.inner.insert(key, value).await
    }

    async fn remove(&self, key: &CachedKey) {
        self.inner.remove(key).await
    }

    fn entry_count(&self) -> u64 {
        self.inner.entry_count()
    }

    async fn close(&self) -> Result<(), slatedb::Error> {
        self.inner.close().await
    }

    async fn flush_scope(&self, db_cache_id: u64) -> Result<(), slatedb::Error> {
        self.inner.flush_scope(db_cache_id).await
    }

    async fn flush_to_disk(&self) -> Result<(), slatedb::Error> {
        self.inner.flush_to_disk().await
    }

    async fn fetch_block(
        &self,
        key: CachedKey,
        loader: CacheLoader,
    ) -> Result<CacheFetch, slatedb::Error> {
        self.fetch(Kind::Block, key, loader).await
    }

    async fn fetch_index(
        &self,
        key: CachedKey,
        loader: CacheLoader,
    ) -> Result<CacheFetch, slatedb::Error> {
        self.fetch(Kind::Index, key, loader).await
    }

    async fn fetch_filter(
        &self,
        key: CachedKey,
        loader: CacheLoader,
    ) -> Result<CacheFetch, slatedb::Error> {
        self.fetch(Kind::Filter, key, loader).await
    }

    async fn fetch_stats(
        &self,
        key: CachedKey,
        loader: CacheLoader,
    ) -> Result<CacheFetch, slatedb::Error> {
        self.fetch(Kind::Stats, key, loader).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// `n` callers of one key at once, each with a loader that counts its runs and takes
    /// 50 ms (`fail`: the loader fails).
    async fn at_once(c: &Arc<Coalescer<u32, u64>>, n: usize, fail: bool) -> (usize, usize) {
        let runs = Arc::new(AtomicUsize::new(0));
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let (c, runs) = (c.clone(), runs.clone());
                tokio::spawn(async move {
                    c.run(7, || async {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        if fail { Err("refused") } else { Ok(42) }
                    })
                    .await
                })
            })
            .collect();
        let mut shared = 0;
        for t in tasks {
            if let Ok((v, s)) = t.await.unwrap() {
                assert_eq!(v, 42);
                shared += usize::from(s);
            }
        }
        (runs.load(Ordering::SeqCst), shared)
    }

    // Paused time: the loaders' 50 ms pass only once every caller waits (auto-advance), so
    // "at once" holds however loaded the machine is, and the tests take no wall time.
    #[tokio::test(start_paused = true)]
    async fn callers_of_one_key_at_once_share_one_load() {
        let c = Arc::new(Coalescer::new());
        assert_eq!(at_once(&c, 16, false).await, (1, 15));
        // Done loads leave the map: the next caller loads again.
        assert_eq!(at_once(&c, 1, false).await, (1, 0));
        assert!(c.loading.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn when_the_load_fails_each_caller_loads_for_itself() {
        let c = Arc::new(Coalescer::new());
        // The first load fails; the waiters then run their own (failing too, one after
        // another or at once: at least two runs, and nothing shared).
        let (runs, shared) = at_once(&c, 4, true).await;
        assert!(runs >= 2, "{runs}");
        assert_eq!(shared, 0);
        assert!(c.loading.lock().unwrap().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_load_lets_a_waiter_load() {
        let c: Arc<Coalescer<u32, u64>> = Arc::new(Coalescer::new());
        let lead = {
            let c = c.clone();
            tokio::spawn(async move {
                c.run(7, || async {
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    Ok::<_, ()>(1)
                })
                .await
            })
        };
        // The lead's load has begun (its key is in the map).
        while c.loading.lock().unwrap().is_empty() {
            tokio::task::yield_now().await;
        }
        let waiter = {
            let c = c.clone();
            tokio::spawn(async move { c.run(7, || async { Ok::<_, ()>(2) }).await })
        };
        // Paused time advances only once every task waits: the waiter is waiting on the
        // lead's load by then (no fixed wall-clock wait).
        tokio::time::sleep(Duration::from_millis(20)).await;
        lead.abort();
        assert_eq!(waiter.await.unwrap(), Ok((2, false)));
        assert!(c.loading.lock().unwrap().is_empty());
    }
}
