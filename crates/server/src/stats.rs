//! What the last run of a collection left for the server: the stats object
//! (`stats/last-run.json`, written by `rsagg run` after each run) and the last blob garbage
//! collection (`published/gc.json`), read from the store for `/metrics` and `/status`.
//!
//! The types here are the reading side of what the pipeline writes (`runner::Stats`,
//! `RunReport`, `UpstreamReport`, `PublishReport`): every field has a default, so an object
//! written by an older or newer rsagg still shows what it has. A test in
//! `tests/observe.rs` reads the object a real run wrote, so the two sides cannot drift
//! apart unnoticed.
//!
//! Both objects are small (the quarantine list and the warnings are capped by the writer)
//! and read at most once per version: every request asks the store for the object's version
//! (a HEAD) and reads it again only when it changed, as `copies.rs` does with the
//! publisher's metadata.

use std::sync::Arc;

use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_model::W3cDateTime;
use rsagg_pipeline::gc::{GC_META, GcMeta, GcReport};
use rsagg_store::QuarantineRecord;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::Error;
use crate::copies::MetaVersion;

/// Objects larger than this are not read (the writer caps the stats object far below it:
/// 1,000 quarantine records, 100 warnings per upstream).
const MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The stats object of the last run.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Stats {
    /// When the run ended.
    pub finished: Option<W3cDateTime>,
    /// What it did.
    pub report: Report,
    /// Resources in quarantine (the first ones, see `quarantine_truncated`).
    pub quarantine: Vec<QuarantineRecord>,
    /// True when more resources are in quarantine than `quarantine` lists.
    pub quarantine_truncated: bool,
}

/// `RunReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Report {
    /// Per upstream, in pipeline order.
    pub upstreams: Vec<Upstream>,
    /// The publish stage.
    pub publish: Option<Publish>,
    /// The change notifications (collections with `[notify]`).
    pub notify: Option<Notify>,
    /// Wall time of the run.
    pub seconds: f64,
    /// The push intake's counters (`run --follow --listen` only).
    pub push: Option<rsagg_pipeline::PushStats>,
}

/// `UpstreamReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Upstream {
    pub name: String,
    /// `ok` or `failed`.
    pub verdict: String,
    pub route: Option<String>,
    pub sets: u64,
    pub created: u64,
    pub updated: u64,
    pub deleted: u64,
    pub unchanged: u64,
    pub replayed: u64,
    pub superseded: u64,
    pub quarantined: u64,
    pub gone: u64,
    pub failed: u64,
    pub resyncs: Vec<String>,
    pub warnings: Vec<String>,
    pub error: Option<String>,
    /// The last upstream instant processed, after the run.
    pub checkpoint: Option<W3cDateTime>,
}

impl Upstream {
    /// The run's counters by outcome, in a fixed order (metric label values and table
    /// columns).
    pub fn outcomes(&self) -> [(&'static str, u64); 9] {
        [
            ("created", self.created),
            ("updated", self.updated),
            ("deleted", self.deleted),
            ("unchanged", self.unchanged),
            ("replayed", self.replayed),
            ("superseded", self.superseded),
            ("quarantined", self.quarantined),
            ("gone", self.gone),
            ("failed", self.failed),
        ]
    }

    /// The verdict was `ok`.
    pub fn ok(&self) -> bool {
        self.verdict == "ok"
    }
}

/// `PublishReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Publish {
    pub resource_list_parts: Option<u64>,
    pub change_lists: Option<ChangeLists>,
    pub change_dumps: Option<ChangeDumps>,
    pub resource_dump: Option<ResourceDump>,
    pub gc: Option<GcReport>,
    pub errors: Vec<String>,
}

/// `NotifyReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Notify {
    pub topic: String,
    pub hub: String,
    pub form: String,
    pub prepared: Option<NotifyPrepared>,
    pub delivery: Delivery,
    pub errors: Vec<String>,
}

/// `notify::Prepared`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct NotifyPrepared {
    pub payloads: u64,
    pub entries: u64,
}

/// `notify::DeliveryReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct Delivery {
    pub delivered: u64,
    pub pending: u64,
    pub attempts: u64,
    pub failures: u64,
    pub unfetched: u64,
    pub sent_total: u64,
    pub last_error: Option<String>,
}

/// `ChangeListReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChangeLists {
    pub open_entries: u64,
    pub closed_now: u64,
    pub closed_total: u64,
    pub dropped: u64,
}

/// `ChangeDumpReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ChangeDumps {
    pub packages_now: u64,
    pub packages_total: u64,
    pub dropped: u64,
    pub skipped: u64,
}

/// `ResourceDumpReport`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(crate) struct ResourceDump {
    pub packages: u64,
    pub resources: u64,
    pub bytes: u64,
    pub skipped: u64,
}

/// What `/metrics` and `/status` show of one collection: each part `Ok(None)` when the
/// object does not exist (no run yet, no collection yet), `Err` with the reason when it
/// could not be read.
#[derive(Debug, Clone)]
pub(crate) struct Observed {
    pub stats: Result<Option<Arc<Stats>>, String>,
    /// `published/gc.json`: the last collection's report, or when the first is due.
    pub gc: Result<Option<Arc<GcMeta>>, String>,
}

impl Observed {
    /// The store answered both reads (an absent object counts as an answer).
    pub fn store_ok(&self) -> bool {
        self.stats.is_ok() && self.gc.is_ok()
    }
}

/// The observed objects of one collection, each cached by version.
#[derive(Debug)]
pub(crate) struct StatsReader {
    stats: Cached<Stats>,
    gc: Cached<GcMeta>,
}

impl StatsReader {
    pub fn new(objects: &Arc<dyn ObjectStore>) -> StatsReader {
        StatsReader {
            stats: Cached::new(objects.clone(), rsagg_pipeline::STATS_OBJECT),
            gc: Cached::new(objects.clone(), GC_META),
        }
    }

    /// Both objects as they are now (read concurrently).
    pub async fn observe(&self) -> Observed {
        let (stats, gc) = futures::join!(self.stats.get(), self.gc.get());
        let log = |e: Error| {
            tracing::warn!(error = %e, "reading what the last run left");
            e.to_string()
        };
        Observed {
            stats: stats.map_err(log),
            gc: gc.map_err(log),
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
        let path = Path::from(rsagg_pipeline::STATS_OBJECT);
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
