//! What the runs of a collection left for the server: the stats object
//! (`stats/last-run.json`, written by `rsagg run` after each run), the run history
//! (`stats/history.json`: the last runs and the totals since the first) and the last blob
//! garbage collection (`published/gc.json`), read from the store for `/metrics` and
//! `/status`.
//!
//! The types are `rsagg-layout`'s `report` module, the same the pipeline writes with: every
//! field has a default, so an object written by an older or newer rsagg still shows what it
//! has. A test in `tests/observe.rs` reads the object a real run wrote.
//!
//! Both objects are small (the quarantine list and the warnings are capped by the writer)
//! and read at most once per version: every request asks the store for the object's version
//! (a HEAD) and reads it again only when it changed, as `copies.rs` does with the
//! publisher's metadata.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_layout::history::RunHistory;
use rsagg_layout::meta::GcMeta;
use rsagg_layout::paths::{GC_META, STATS_HISTORY, STATS_OBJECT};
use serde::de::DeserializeOwned;

use crate::Error;
use crate::copies::MetaVersion;

/// Objects larger than this are not read (the writer caps the stats object far below it:
/// 1,000 quarantine records, 100 warnings per upstream; the history: `collection.history_runs`
/// points, at most 10,000).
const MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The stats object of the last run (`rsagg-layout`'s reading and writing type).
pub(crate) use rsagg_layout::report::RunStats as Stats;
/// One upstream's part of it.
pub(crate) use rsagg_layout::report::UpstreamReport as Upstream;

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
}

impl Observed {
    /// The store answered both reads (an absent object counts as an answer).
    pub fn store_ok(&self) -> bool {
        self.stats.is_ok() && self.gc.is_ok() && self.history.is_ok()
    }
}

/// The observed objects of one collection, each cached by version.
#[derive(Debug)]
pub(crate) struct StatsReader {
    stats: Cached<Stats>,
    gc: Cached<GcMeta>,
    history: Cached<RunHistory>,
}

impl StatsReader {
    pub fn new(objects: &Arc<dyn ObjectStore>) -> StatsReader {
        StatsReader {
            stats: Cached::new(objects.clone(), STATS_OBJECT),
            gc: Cached::new(objects.clone(), GC_META),
            history: Cached::new(objects.clone(), STATS_HISTORY),
        }
    }

    /// The objects as they are now (read concurrently).
    pub async fn observe(&self) -> Observed {
        let (stats, gc, history) =
            futures::join!(self.stats.get(), self.gc.get(), self.history.get());
        let log = |e: Error| {
            tracing::warn!(error = %e, "reading what the last run left");
            e.to_string()
        };
        Observed {
            stats: stats.map_err(log),
            gc: gc.map_err(log),
            history: history.map_err(log),
        }
    }
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

    async fn get(&self) -> Result<Option<Arc<T>>, Error> {
        let store_err = |source| Error::ObjectStore {
            path: self.path.to_string(),
            source,
        };
        let (version, size): (MetaVersion, u64) = match self.objects.head(&self.path).await {
            Ok(m) => (Some((m.e_tag, m.last_modified, m.size)), m.size),
            Err(object_store::Error::NotFound { .. }) => (None, 0),
            Err(source) => return Err(store_err(source)),
        };
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
        let value = match (&version, self.objects.get(&self.path).await) {
            (None, _) | (_, Err(object_store::Error::NotFound { .. })) => None,
            (_, Ok(r)) => {
                let bytes = r.bytes().await.map_err(store_err)?;
                if bytes.len() as u64 > MAX_BYTES {
                    return Err(Error::TooLarge {
                        path: self.path.to_string(),
                        size: bytes.len() as u64,
                        limit: MAX_BYTES,
                    });
                }
                let v = serde_json::from_slice::<T>(&bytes).map_err(|source| Error::Metadata {
                    path: self.path.to_string(),
                    source,
                })?;
                Some(Arc::new(v))
            }
            (_, Err(source)) => return Err(store_err(source)),
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

    #[tokio::test]
    async fn objects_are_read_once_per_version_and_absent_is_none() {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let reader = StatsReader::new(&objects);
        let o = reader.observe().await;
        assert!(matches!(o.stats, Ok(None)), "{o:?}");
        assert!(matches!(o.gc, Ok(None)), "{o:?}");
        let path = Path::from(STATS_OBJECT);
        objects
            .put(
                &path,
                br#"{"report":{"seconds":1.5,"upstreams":[{"name":"a","verdict":"ok","created":3,"future_field":1}]}}"#
                    .to_vec()
                    .into(),
            )
            .await
            .unwrap();
        let s = reader.observe().await.stats.unwrap().unwrap();
        assert_eq!(s.report.seconds, 1.5);
        assert_eq!(s.report.upstreams[0].created, 3);
        assert!(s.finished.is_none() && s.quarantine.is_empty());
        let again = reader.observe().await.stats.unwrap().unwrap();
        assert!(Arc::ptr_eq(&s, &again), "same version: not read again");
        objects
            .put(&path, b"{not json".to_vec().into())
            .await
            .unwrap();
        let e = reader.observe().await.stats.unwrap_err();
        assert!(e.contains("stats/last-run.json"), "{e}");
    }
}
