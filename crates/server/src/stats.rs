//! What the runs of a collection left for the server: the stats object
//! (`stats/last-run.json`, written by `rsagg run` after each run), the run history
//! (`stats/history.json`: the last runs and the totals since the first), the last blob
//! garbage collection (`published/gc.json`) and the published Resource List's metadata
//! (`published/resourcelist.json`: how many resources the collection has), read from the
//! store for `/metrics` and `/status`.
//!
//! The types are `rsagg-layout`'s `report` module, the same the pipeline writes with: every
//! field has a default, so an object written by an older or newer rsagg still shows what it
//! has. A test in `tests/observe.rs` reads the object a real run wrote.
//!
//! # What a scrape costs
//!
//! In the cloud every store request is billed, and `serve` may watch thousands of
//! collections scraped every 15 s: asking each store about each object at every scrape (as
//! before: 3 HEADs per collection per scrape, ~69 M requests a day at 4,000 collections)
//! costs more than the rest of the fleet. So what was read is reused for a **refresh
//! bound** ([`StatsRefresh`], `serve --stats-refresh`): a request within the bound of the
//! collection's last check asks the store nothing. When the bound has passed, the check is
//! one HEAD of `stats/last-run.json`, the object every run and poll pass writes at its end
//! (the *sentinel*): unchanged, nothing else is asked; changed, all four objects are
//! checked (a HEAD each, a GET of those that changed). The other objects are written in the
//! same run, before or just after the sentinel (`run --once` writes the history after it,
//! `run --follow` before), so the check after a change checks all four again (a history
//! written a moment after the sentinel is seen one bound later), and every
//! [`FULL_CHECK_EVERY`]th check does too (a writer that updated another object but failed
//! to write the sentinel is seen within that many bounds). A check that failed is followed
//! by a full one. The steady cost is `(FULL_CHECK_EVERY − 1 + 4) / FULL_CHECK_EVERY` = 1.3
//! requests per collection per bound, whatever the scrape rate.
//!
//! The bound is `collections × 60 ms` by default ([`StatsRefresh::Auto`]): one collection
//! is rechecked after 60 ms (as good as every scrape), 4,000 after 4 min; in all the store
//! is asked ~22 times a second at most in the steady state, whatever the fleet size and the
//! scrape rate (~1.9 M requests a day, ~$0.75 at S3's $0.0004 per 1,000 HEAD or GET). The
//! first check of each collection is spread over the bound (collection `i` of `n` is next
//! due `bound × (1 − i/n)` after the first read), so each scrape pays for a slice of the
//! fleet, not the whole fleet every `bound`. Lag is computed at every request from the last
//! success read, so it grows between checks as it should.

use std::sync::Arc;
use std::time::Duration;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_layout::history::RunHistory;
use rsagg_layout::meta::{GcMeta, ResourceListMeta};
use rsagg_layout::paths::{GC_META, RESOURCE_LIST_META, STATS_HISTORY, STATS_OBJECT};
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::Error;
use crate::copies::MetaVersion;

/// Objects larger than this are not read (the writer caps the stats object far below it:
/// 1,000 quarantine records, 100 warnings per upstream; the history: `collection.history_runs`
/// points, at most 10,000).
const MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Every this many checks of a collection, all its objects are checked, not only the
/// sentinel (see the module docs).
pub(crate) const FULL_CHECK_EVERY: u32 = 10;

/// The stats object of the last run (`rsagg-layout`'s reading and writing type).
pub(crate) use rsagg_layout::report::RunStats as Stats;
/// One upstream's part of it.
pub(crate) use rsagg_layout::report::UpstreamReport as Upstream;

/// How long what the runs of a collection left is reused before its store is asked again
/// (`serve --stats-refresh`; see the module docs for what a check costs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StatsRefresh {
    /// [`StatsRefresh::AUTO_PER_COLLECTION`] times the collections served: the store
    /// requests of `/metrics` and `/status` stay at ~22 a second at most in all, whatever
    /// the fleet and the scrape rate.
    #[default]
    Auto,
    /// A fixed bound; zero checks at every request.
    Every(Duration),
}

impl StatsRefresh {
    /// The bound per collection served of [`StatsRefresh::Auto`].
    pub const AUTO_PER_COLLECTION: Duration = Duration::from_millis(60);

    /// The bound when `collections` are served.
    pub fn bound(self, collections: usize) -> Duration {
        match self {
            StatsRefresh::Auto => {
                StatsRefresh::AUTO_PER_COLLECTION * u32::try_from(collections).unwrap_or(u32::MAX)
            }
            StatsRefresh::Every(d) => d,
        }
    }
}

/// What `/metrics` and `/status` show of one collection: each part `Ok(None)` when the
/// object does not exist (no run yet, no collection yet), `Err` with the reason when it
/// could not be read.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub stats: Result<Option<Arc<Stats>>, String>,
    /// `published/gc.json`: the last collection's report, or when the first is due.
    pub gc: Result<Option<Arc<GcMeta>>, String>,
    /// `stats/history.json`: the last runs and the totals since the first.
    pub history: Result<Option<Arc<RunHistory>>, String>,
    /// Resources the published Resource List names (`published/resourcelist.json`).
    pub resources: Result<Option<u64>, String>,
    /// On `publish.resourcelist = "interval"`: the published snapshot's `md:at` (the
    /// changes since are in the Change Lists); `None` for a list patched every run.
    pub snapshot_at: Option<rsagg_model::W3cDateTime>,
    /// The store answered every request of the last check (`Err`: the first that failed;
    /// an object that cannot be decoded is an answer). `/readyz` judges by it.
    pub store: Result<(), String>,
}

impl Observed {
    /// Every object was read (an absent object counts as read).
    pub fn store_ok(&self) -> bool {
        self.store.is_ok()
            && self.stats.is_ok()
            && self.gc.is_ok()
            && self.history.is_ok()
            && self.resources.is_ok()
    }
}

/// The observed objects of one collection, each cached by version, and the last check
/// reused for the refresh bound.
#[derive(Debug)]
pub(crate) struct StatsReader {
    stats: Cached<Stats>,
    gc: Cached<GcMeta>,
    history: Cached<RunHistory>,
    resources: Cached<ResourceListMeta>,
    /// Reuse the last check this long.
    refresh: Duration,
    /// Held across a check, so requests arriving during one wait for it and reuse it.
    last: tokio::sync::Mutex<Option<LastCheck>>,
}

#[derive(Debug)]
struct LastCheck {
    observed: Observed,
    /// When it counts as made (the first check is dated back to spread the next ones).
    at: Instant,
    /// Checks of the sentinel alone since the last full check.
    since_full: u32,
    /// The last check saw a change: the next is a full one.
    changed: bool,
}

impl StatsReader {
    pub fn new(objects: &Arc<dyn ObjectStore>, refresh: Duration) -> StatsReader {
        StatsReader {
            stats: Cached::new(objects.clone(), STATS_OBJECT),
            gc: Cached::new(objects.clone(), GC_META),
            history: Cached::new(objects.clone(), STATS_HISTORY),
            resources: Cached::new(objects.clone(), RESOURCE_LIST_META),
            refresh,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// The objects as of the last check, checked again (see the module docs) when it is
    /// older than the refresh bound at `now`. The first check counts as made `phase` before
    /// `now` (at most the bound), so that the collections of a fleet come due at different
    /// times.
    pub async fn observe(&self, now: Instant, phase: Duration) -> Observed {
        let mut last = self.last.lock().await;
        let (full, since_full) = match last.as_ref() {
            Some(l) if now.saturating_duration_since(l.at) < self.refresh => {
                return l.observed.clone();
            }
            Some(l) => {
                let full =
                    l.changed || !l.observed.store_ok() || l.since_full + 1 >= FULL_CHECK_EVERY;
                (full, l.since_full)
            }
            None => (true, 0),
        };
        let before = self.versions().await;
        let observed = match last.as_ref() {
            Some(l) if !full => self.sentinel(&l.observed).await,
            _ => self.read_all(None).await,
        };
        let changed = last.is_some() && self.versions().await != before;
        let at = match last.as_ref() {
            None => now.checked_sub(phase.min(self.refresh)).unwrap_or(now),
            Some(_) => now,
        };
        *last = Some(LastCheck {
            observed: observed.clone(),
            at,
            since_full: if full { 0 } else { since_full + 1 },
            changed,
        });
        observed
    }

    /// The versions of the objects as last read.
    async fn versions(&self) -> [Option<MetaVersion>; 4] {
        [
            self.stats.version().await,
            self.gc.version().await,
            self.history.version().await,
            self.resources.version().await,
        ]
    }

    /// Every object, checked (concurrently); the sentinel's HEAD is `sentinel` when it was
    /// just made.
    async fn read_all(&self, sentinel: Option<(MetaVersion, u64)>) -> Observed {
        let stats = async {
            match sentinel {
                Some(head) => self.stats.get_at(head).await,
                None => self.stats.get().await,
            }
        };
        let (stats, gc, history, resources) = futures::join!(
            stats,
            self.gc.get(),
            self.history.get(),
            self.resources.get()
        );
        let store = [
            stats.as_ref().err(),
            gc.as_ref().err(),
            history.as_ref().err(),
        ]
        .into_iter()
        .chain([resources.as_ref().err()])
        .flatten()
        .find(|e| matches!(e, Error::ObjectStore { .. }))
        .map_or(Ok(()), |e| Err(e.to_string()));
        Observed {
            store,
            stats: stats.map_err(logged),
            gc: gc.map_err(logged),
            history: history.map_err(logged),
            snapshot_at: resources
                .as_ref()
                .ok()
                .and_then(|m| m.as_ref())
                .filter(|m| m.snapshot_seq.is_some())
                .and_then(|m| m.listed_at),
            resources: resources
                .map(|m| m.map(|m| m.parts.iter().map(|(_, n)| n).sum::<u64>()))
                .map_err(logged),
        }
    }

    /// One HEAD of the sentinel: `previous` when it did not change, else every object.
    async fn sentinel(&self, previous: &Observed) -> Observed {
        let known = self.stats.version().await;
        match self.stats.head().await {
            Ok(head) if Some(&head.0) == known.as_ref() => Observed {
                store: Ok(()),
                ..previous.clone()
            },
            Ok(head) => self.read_all(Some(head)).await,
            Err(e) => {
                let e = logged(e);
                Observed {
                    store: Err(e.clone()),
                    stats: Err(e),
                    ..previous.clone()
                }
            }
        }
    }
}

fn logged(e: Error) -> String {
    tracing::warn!(error = %e, "reading what the last run left");
    e.to_string()
}

/// A small JSON object of the store, decoded, re-read only when its version changes.
#[derive(Debug)]
struct Cached<T> {
    objects: Arc<dyn ObjectStore>,
    path: Path,
    cell: tokio::sync::Mutex<Option<(MetaVersion, Option<Arc<T>>)>>,
}

impl<T: DeserializeOwned> Cached<T> {
    fn new(objects: Arc<dyn ObjectStore>, path: &str) -> Cached<T> {
        Cached {
            objects,
            path: Path::from(path),
            cell: tokio::sync::Mutex::new(None),
        }
    }

    fn store_err(&self, source: object_store::Error) -> Error {
        Error::ObjectStore {
            path: self.path.to_string(),
            source,
        }
    }

    /// The version last read, `None` before the first read.
    async fn version(&self) -> Option<MetaVersion> {
        self.cell.lock().await.as_ref().map(|(v, _)| v.clone())
    }

    /// The object's version and size now (one HEAD).
    async fn head(&self) -> Result<(MetaVersion, u64), Error> {
        match self.objects.head(&self.path).await {
            Ok(m) => Ok((Some((m.e_tag, m.last_modified, m.size)), m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok((None, 0)),
            Err(source) => Err(self.store_err(source)),
        }
    }

    /// The object now: one HEAD, and a GET when its version changed.
    async fn get(&self) -> Result<Option<Arc<T>>, Error> {
        let head = self.head().await?;
        self.get_at(head).await
    }

    /// The object at the version and size a HEAD just found: a GET when the version is not
    /// the one read last.
    async fn get_at(&self, (version, size): (MetaVersion, u64)) -> Result<Option<Arc<T>>, Error> {
        let mut cached = self.cell.lock().await;
        if let Some((v, value)) = cached.as_ref()
            && *v == version
        {
            return Ok(value.clone());
        }
        if size > MAX_BYTES {
            return Err(Error::TooLarge {
                path: self.path.to_string(),
                size,
                limit: MAX_BYTES,
            });
        }
        // An object the HEAD did not find is not asked for again.
        let value = match &version {
            None => None,
            Some(_) => match self.objects.get(&self.path).await {
                Err(object_store::Error::NotFound { .. }) => None,
                Err(source) => return Err(self.store_err(source)),
                Ok(r) => {
                    let bytes = r.bytes().await.map_err(|e| self.store_err(e))?;
                    if bytes.len() as u64 > MAX_BYTES {
                        return Err(Error::TooLarge {
                            path: self.path.to_string(),
                            size: bytes.len() as u64,
                            limit: MAX_BYTES,
                        });
                    }
                    let v =
                        serde_json::from_slice::<T>(&bytes).map_err(|source| Error::Metadata {
                            path: self.path.to_string(),
                            source,
                        })?;
                    Some(Arc::new(v))
                }
            },
        };
        // Read after the HEAD, so possibly newer than `version`: the next request then sees
        // another version and reads it again; never older.
        *cached = Some((version, value.clone()));
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use rsagg_store::{CountedStore, StoreCounters};

    async fn put(objects: &Arc<dyn ObjectStore>, path: &str, body: &str) {
        objects
            .put(&Path::from(path), body.as_bytes().to_vec().into())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn objects_are_read_once_per_version_and_absent_is_none() {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let reader = StatsReader::new(&objects, Duration::ZERO);
        let o = reader.observe(Instant::now(), Duration::ZERO).await;
        assert!(matches!(o.stats, Ok(None)), "{o:?}");
        assert!(matches!(o.gc, Ok(None)), "{o:?}");
        assert!(matches!(o.resources, Ok(None)), "{o:?}");
        put(
            &objects,
            STATS_OBJECT,
            r#"{"report":{"seconds":1.5,"upstreams":[{"name":"a","verdict":"ok","created":3,"future_field":1}]}}"#,
        )
        .await;
        let s = reader
            .observe(Instant::now(), Duration::ZERO)
            .await
            .stats
            .unwrap()
            .unwrap();
        assert_eq!(s.report.seconds, 1.5);
        assert_eq!(s.report.upstreams[0].created, 3);
        assert!(s.finished.is_none() && s.quarantine.is_empty());
        let again = reader
            .observe(Instant::now(), Duration::ZERO)
            .await
            .stats
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&s, &again), "same version: not read again");
        put(&objects, STATS_OBJECT, "{not json").await;
        let e = reader
            .observe(Instant::now(), Duration::ZERO)
            .await
            .stats
            .unwrap_err();
        assert!(e.contains("stats/last-run.json"), "{e}");
    }

    /// Within the bound nothing is asked; after it, one HEAD of the sentinel; a change of
    /// the sentinel reads everything, and the check after it checks everything again; a
    /// history written after the sentinel (as `run --once` does) is seen then.
    #[tokio::test(start_paused = true)]
    async fn checks_cost_one_head_within_the_bound_nothing() {
        let memory: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let counters = Arc::new(StoreCounters::default());
        let objects: Arc<dyn ObjectStore> =
            Arc::new(CountedStore::new(memory.clone(), counters.clone()));
        put(&memory, STATS_OBJECT, r#"{"report":{"seconds":1}}"#).await;
        put(&memory, STATS_HISTORY, r#"{"totals":{"runs":1}}"#).await;
        let bound = Duration::from_secs(60);
        let reader = StatsReader::new(&objects, bound);
        let requests = || counters.snapshot().total();
        let runs = |o: &Observed| o.history.as_ref().unwrap().as_ref().unwrap().totals.runs;

        let o = reader.observe(Instant::now(), Duration::ZERO).await;
        assert_eq!(runs(&o), 1);
        // 4 HEADs, 2 GETs (the two objects there are).
        assert_eq!(requests(), 6);
        tokio::time::advance(bound - Duration::from_secs(1)).await;
        reader.observe(Instant::now(), Duration::ZERO).await;
        assert_eq!(requests(), 6, "within the bound: nothing asked");
        tokio::time::advance(Duration::from_secs(1)).await;
        reader.observe(Instant::now(), Duration::ZERO).await;
        assert_eq!(requests(), 7, "after it: one HEAD of the sentinel");

        // A run: the sentinel first, the history just after (the order of `run --once`),
        // with a check in between.
        put(&memory, STATS_OBJECT, r#"{"report":{"seconds":2}}"#).await;
        tokio::time::advance(bound).await;
        let o = reader.observe(Instant::now(), Duration::ZERO).await;
        assert_eq!(
            o.stats.as_ref().unwrap().as_ref().unwrap().report.seconds,
            2.0
        );
        assert_eq!(runs(&o), 1);
        assert_eq!(requests(), 7 + 4 + 1, "4 HEADs, a GET of the sentinel");
        put(&memory, STATS_HISTORY, r#"{"totals":{"runs":2}}"#).await;
        tokio::time::advance(bound).await;
        let o = reader.observe(Instant::now(), Duration::ZERO).await;
        assert_eq!(runs(&o), 2, "the check after a change checks everything");
        assert_eq!(requests(), 12 + 4 + 1);
        // Then a full check only every FULL_CHECK_EVERY checks.
        let before = requests();
        for _ in 0..FULL_CHECK_EVERY {
            tokio::time::advance(bound).await;
            reader.observe(Instant::now(), Duration::ZERO).await;
        }
        assert_eq!(
            requests() - before,
            u64::from(FULL_CHECK_EVERY) + 3,
            "one HEAD per check, three more at the full one"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_check_is_dated_back_by_its_phase() {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let bound = Duration::from_secs(100);
        let reader = StatsReader::new(&objects, bound);
        reader
            .observe(Instant::now(), Duration::from_secs(70))
            .await;
        put(&objects, STATS_OBJECT, r#"{"report":{"seconds":3}}"#).await;
        tokio::time::advance(Duration::from_secs(29)).await;
        let o = reader.observe(Instant::now(), Duration::ZERO).await;
        assert!(matches!(o.stats, Ok(None)), "still within the bound");
        tokio::time::advance(Duration::from_secs(1)).await;
        let o = reader.observe(Instant::now(), Duration::ZERO).await;
        assert_eq!(o.stats.unwrap().unwrap().report.seconds, 3.0);
    }

    #[test]
    fn the_automatic_bound_grows_with_the_fleet() {
        assert_eq!(StatsRefresh::Auto.bound(1), Duration::from_millis(60));
        assert_eq!(StatsRefresh::Auto.bound(4000), Duration::from_secs(240));
        let fixed = StatsRefresh::Every(Duration::from_secs(5));
        assert_eq!(fixed.bound(4000), Duration::from_secs(5));
    }
}
