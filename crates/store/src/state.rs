//! The collection's state database (slatedb, an LSM tree on the same object store).
//!
//! Keys (values are JSON, see `records.rs`):
//!
//! ```text
//! r/{upstream}/{uri}   ResourceRecord
//! l/{seq:020}          LogEntry (the change log, in order)
//! c/{upstream}/{set}   Checkpoint (per Capability List of the upstream)
//! q/{upstream}/{uri}   QuarantineRecord
//! p/{slot}/{upstream}/{uri}   ResourceRecord of each present resource again, by hash slot
//!                      (0000..ffff): the publisher builds a Resource List part or the
//!                      Resource Dump from one range scan in slot order, without a lookup
//!                      per resource (empty in states written before rsagg 0.1.1: then the
//!                      record is looked up under r/)
//! m/log                the last sequence number and datetime given out
//! m/state-gc           when the last complete pass of the state's garbage collection
//!                      started (Unix seconds; see `state_gc.rs`)
//! ```
//!
//! Why slatedb: an incremental run must cost O(changes), not O(collection), so the state
//! cannot be one object rewritten per run; slatedb gives atomic multi-key batches, ordered
//! scans and writer fencing (a second writer on the same state fences the first, whose
//! next write fails) on object storage alone.

use std::sync::Arc;

use object_store::ObjectStore;
use rsagg_model::{Change, Clock, W3cDateTime};
use serde::{Deserialize, Serialize};
use slatedb::{Db, DbIterator, DbReader, WriteBatch};
use tokio::sync::Mutex;

use crate::Error;
use crate::compaction::Compaction;
use crate::health::StoreHealth;
use crate::records::{Checkpoint, LogEntry, QuarantineRecord, ResourceRecord, ResourceStatus};
use crate::state_gc::StateGc;

const STATE_PATH: &str = "state";

/// One resource change to commit; its `seq` and datetime are assigned by [`State::commit`].
#[derive(Debug, Clone)]
pub struct Applied {
    /// created, updated or deleted.
    pub change: Change,
    /// The record after the change (`lastmod` and `seq` are overwritten by the commit).
    pub record: ResourceRecord,
}

/// An atomic, durable unit of state change for one upstream.
#[derive(Debug, Clone, Default)]
pub struct Commit {
    /// Upstream the commit concerns.
    pub upstream: String,
    /// The set of resources (Capability List URL) whose checkpoint this commit moves.
    pub set: String,
    /// Resource changes, in the order they happened upstream.
    pub changes: Vec<Applied>,
    /// Records updated without a change of the copy (e.g. new ETag, new upstream metadata).
    pub touched: Vec<ResourceRecord>,
    /// The new checkpoint, if it moved.
    pub checkpoint: Option<Checkpoint>,
    /// Resources to quarantine.
    pub quarantine: Vec<QuarantineRecord>,
    /// URIs whose quarantine is lifted (a later fetch verified).
    pub release: Vec<String>,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct LogHead {
    seq: u64,
    #[serde(default)]
    at: Option<W3cDateTime>,
}

/// The state database, opened as the (single) writer, or read-only
/// ([`State::open_read_only`]).
pub struct State {
    db: Handle,
    path: String,
    head: Mutex<LogHead>,
    /// Told when the database says another writer fenced this one out (see
    /// [`State::open_fenced`]), so that nothing more is written to the store.
    fence: Arc<StoreHealth>,
    /// Watches the writer's status for the fence (aborted with the state).
    watcher: Option<tokio::task::JoinHandle<()>>,
    /// The writer's compactor (none for a read-only state).
    compaction: Option<Compaction>,
    /// The writer's garbage collector, run when due (none for a read-only state).
    gc: Option<StateGc>,
    /// Where commit times come from (the system clock unless [`State::set_clock`]).
    clock: Clock,
}

impl Drop for State {
    fn drop(&mut self) {
        if let Some(w) = &self.watcher {
            w.abort();
        }
    }
}

/// How the database is held: as its writer, as a reader that never writes to the store
/// (so it fences nobody), or not at all when no run has created it yet (read-only only:
/// then every scan is empty and every lookup finds nothing).
enum Handle {
    Writer(Db),
    /// Boxed: a reader is much larger than a writer's handle.
    Reader(Box<DbReader>),
    Absent,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("path", &self.path).finish()
    }
}

fn resource_key(upstream: &str, uri: &str) -> String {
    format!("r/{upstream}/{uri}")
}

/// The hash slot (16 bits of SHA-256 of `upstream` and `uri`) a resource belongs to: a stable
/// partition of the collection, independent of its size, that parts of published lists can
/// be cut along.
///
/// The URI is taken in its normalised form (as `url::Url` writes it, without fragment): the
/// form rsagg's own URI for the copy preserves, so a server that recovers the URI from a
/// request path finds the same slot as the publisher did from the URI as the upstream
/// wrote it (`http://H.example:80` and `http://h.example/` are one resource).
pub fn slot_of(upstream: &str, uri: &str) -> u16 {
    use sha2::Digest;
    // Most URIs are normalised already: hashed as they are, without a parse.
    let normalised = match crate::uri::normal_http(uri) {
        Some(_) => None,
        None => url::Url::parse(uri).ok().map(|mut u| {
            u.set_fragment(None);
            String::from(u)
        }),
    };
    let uri = normalised.as_deref().unwrap_or(uri);
    let mut h = sha2::Sha256::new();
    h.update(upstream.as_bytes());
    h.update(b"\n");
    h.update(uri.as_bytes());
    let d = h.finalize();
    u16::from_be_bytes([d[0], d[1]])
}

fn slot_key(upstream: &str, uri: &str) -> String {
    format!("p/{:04x}/{upstream}/{uri}", slot_of(upstream, uri))
}

/// Puts `record` (serialised as `value`) under its resource key and, while present, under its
/// slot key too.
///
/// Why twice: point lookups go by upstream and URI (`r/`), whole-collection passes (a Resource
/// List rebuilt, the Resource Dump) by slot. With the record only under `r/`, such a pass made
/// one random lookup per resource, and once the state outgrew the block cache each lookup
/// re-read a block from the store: at 10^6 resources a baseline's publish read ~50 GB in two
/// million GETs. A scan of `p/` reads each block once. The price is the record's bytes twice
/// in the state.
fn put_record(batch: &mut WriteBatch, record: &ResourceRecord, value: Vec<u8>) {
    let value = bytes::Bytes::from(value);
    let key = slot_key(&record.upstream, &record.uri);
    match record.status {
        ResourceStatus::Present => batch.put_bytes(key.into(), value.clone()),
        ResourceStatus::Deleted => batch.delete(key),
    }
    batch.put_bytes(resource_key(&record.upstream, &record.uri).into(), value);
}

fn quarantine_key(upstream: &str, uri: &str) -> String {
    format!("q/{upstream}/{uri}")
}

fn log_key(seq: u64) -> String {
    format!("l/{seq:020}")
}

/// How often slatedb writes the state's WAL to the object store (its `flush_interval`).
///
/// 10 ms rather than slatedb's default 100 ms: commits that wait for durability (those moving
/// a checkpoint) then wait little. Public so that benchmarks can state the value they ran
/// with (`rsagg-bench notify` prints it beside the latency figures).
pub const WAL_FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// Compressed bytes a compaction reads ahead of its cursor in each input table, in
/// [`COMPACTION_FETCHES`] requests at once.
///
/// slatedb's default is 8 MiB (4 × 2 MiB), and a compaction of the state's first level merges
/// a dozen tables or more: a 10^6-resource baseline's RSS jumped by ~200 MiB within half a
/// second at each such compaction, to 480–540 MiB. 2 MiB per table bounds that to a quarter; on S3 it costs a compaction four
/// times as many GETs, a few thousand for a 10^6 baseline (well under a cent).
pub const COMPACTION_READ_AHEAD: usize = 2 << 20;
/// Concurrent read-ahead requests per input table of a compaction.
pub const COMPACTION_FETCHES: usize = 2;

impl State {
    /// Opens the state under `objects` as its writer, with the default bounds
    /// ([`crate::StoreOptions::default`]). Any other writer of the same state is fenced out
    /// from now on.
    pub async fn open(objects: Arc<dyn ObjectStore>, display: &str) -> Result<State, Error> {
        Self::open_with(objects, display, &crate::StoreOptions::default()).await
    }

    /// [`State::open`] with the state's memory bounds from `options`: the block and meta
    /// caches (bounded, so a large state does not re-read an SST index per lookup, nor grow
    /// without limit) and the unflushed writes.
    pub async fn open_with(
        objects: Arc<dyn ObjectStore>,
        display: &str,
        options: &crate::StoreOptions,
    ) -> Result<State, Error> {
        Self::open_fenced(objects, display, options, StoreHealth::new(display, 0)).await
    }

    /// [`State::open_with`], telling `fence` (the health of the store `objects` writes
    /// through, [`crate::StoreLocation::health`]) once another writer fenced this one out:
    /// on the first error that says so, or when the database closes itself for it (it
    /// polls its manifest), so that the store refuses every later write, whatever step
    /// asks, and the run ends with exit 3 (a fenced writer that went on publishing
    /// overwrote what the current one published).
    pub async fn open_fenced(
        objects: Arc<dyn ObjectStore>,
        display: &str,
        options: &crate::StoreOptions,
        fence: Arc<StoreHealth>,
    ) -> Result<State, Error> {
        let path = format!("{}/{STATE_PATH}", display.trim_end_matches('/'));
        let compactions = options.state_compactions.max(1) as usize;
        // Compaction's memory: `compactions` at once, each holding up to two output
        // tables of `state_compaction_sst_bytes` (one filling, one uploading) and
        // [`COMPACTION_READ_AHEAD`] per input table, and no further split into
        // subcompactions (each would hold tables of its own).
        let compactor_options = slatedb::config::CompactorOptions {
            max_concurrent_compactions: compactions,
            worker: Some(slatedb::config::CompactionWorkerOptions {
                max_concurrent_compactions: compactions,
                max_sst_size: options.state_compaction_sst_bytes.max(1 << 20) as usize,
                bytes_to_fetch: COMPACTION_READ_AHEAD / COMPACTION_FETCHES,
                max_fetch_tasks: COMPACTION_FETCHES,
                max_subcompactions: 1,
                compression_codec: Some(STATE_COMPRESSION),
                ..slatedb::config::CompactionWorkerOptions::default()
            }),
            ..slatedb::config::CompactorOptions::default()
        };
        let settings = slatedb::Settings {
            flush_interval: Some(WAL_FLUSH_INTERVAL),
            max_unflushed_bytes: options.state_max_unflushed_bytes as usize,
            // slatedb requires its unflushed bound to exceed one L0 table: tables of half
            // the bound (64 MiB, slatedb's own size, at most), so any bound is accepted.
            l0_sst_size_bytes: (options.state_max_unflushed_bytes / 2).clamp(64 << 10, 64 << 20)
                as usize,
            // No compactor inside the writer: one runs beside it ([`Compaction`]), so that
            // another process's compactor fencing it never closes this writer.
            compactor_options: None,
            compression_codec: Some(STATE_COMPRESSION),
            // No garbage collector inside the writer either: one runs beside it when due
            // ([`StateGc`]), not in every process as soon as it opens.
            garbage_collector_options: None,
            ..slatedb::Settings::default()
        };
        let cache = |bytes: u64| -> Option<Arc<dyn slatedb::db_cache::DbCache>> {
            (bytes > 0).then(|| {
                Arc::new(slatedb::db_cache::moka::MokaCache::new_with_opts(
                    slatedb::db_cache::moka::MokaCacheOptions {
                        max_capacity: bytes,
                        ..Default::default()
                    },
                )) as Arc<dyn slatedb::db_cache::DbCache>
            })
        };
        let db_cache = slatedb::db_cache::SplitCache::new()
            .with_block_cache(cache(options.state_block_cache_bytes))
            .with_meta_cache(cache(options.state_meta_cache_bytes))
            .build();
        // Concurrent misses of one entry read it once (see `coalesce`).
        let db_cache = crate::coalesce::Coalescing::new(Arc::new(db_cache));
        let db = Db::builder(STATE_PATH, objects.clone())
            .with_settings(settings)
            .with_sst_block_size(STATE_BLOCK_SIZE)
            .with_filter_policies(crate::filter::LookedUpKeys::policies())
            .with_db_cache(Arc::new(db_cache), 0)
            .build()
            .await
            .map_err(|e| map_err(&path, &fence, e))?;
        let watcher = {
            let mut status = db.subscribe();
            let fence = fence.clone();
            let path = path.clone();
            tokio::spawn(async move {
                loop {
                    if status.borrow_and_update().close_reason == Some(slatedb::CloseReason::Fenced)
                    {
                        fence.fence(&path);
                        return;
                    }
                    if status.changed().await.is_err() {
                        return;
                    }
                }
            })
        };
        let gc = StateGc::start(path.clone(), STATE_PATH, objects.clone(), db.clone());
        let compaction = Compaction::start(path.clone(), db.clone(), move || {
            slatedb::CompactorBuilder::new(STATE_PATH, objects.clone())
                .with_options(compactor_options.clone())
                .with_filter_policies(crate::filter::LookedUpKeys::policies())
                .with_sst_block_size(STATE_BLOCK_SIZE)
                .build()
        });
        let state = State {
            db: Handle::Writer(db),
            path,
            head: Mutex::new(LogHead::default()),
            fence,
            watcher: Some(watcher),
            compaction: Some(compaction),
            gc: Some(gc),
            clock: Clock::system(),
        };
        state.read_head().await?;
        Ok(state)
    }

    /// Opens the state under `objects` read-only: a slatedb [`DbReader`] that follows the
    /// latest manifest (and replays the WAL) without writing anything to the store, so a
    /// running writer is neither fenced nor slowed (operator commands such as `rsagg audit`
    /// and `rsagg run --dry-run`). What it reads is the state as of opening, plus what the
    /// writer flushes meanwhile; without a checkpoint of its own, a compaction by a
    /// running writer may delete tables it still reads, which then fails the reading command
    /// (rerun it) — the price of never writing. A store no run has written a state to yet
    /// opens as an empty state.
    pub async fn open_read_only(
        objects: Arc<dyn ObjectStore>,
        display: &str,
    ) -> Result<State, Error> {
        let path = format!("{}/{STATE_PATH}", display.trim_end_matches('/'));
        // A reader is never fenced; its own, unshared health.
        let fence = StoreHealth::new(display, 0);
        let db = if State::exists(objects.as_ref()).await? {
            let reader = DbReader::builder(STATE_PATH, objects)
                .with_filter_policies(crate::filter::LookedUpKeys::policies())
                .with_reader_mode(slatedb::DbReaderMode::FollowLatest)
                .build()
                .await
                .map_err(|e| map_err(&path, &fence, e))?;
            Handle::Reader(Box::new(reader))
        } else {
            Handle::Absent
        };
        let state = State {
            db,
            path,
            head: Mutex::new(LogHead::default()),
            fence,
            watcher: None,
            compaction: None,
            gc: None,
            clock: Clock::system(),
        };
        state.read_head().await?;
        Ok(state)
    }

    /// True when a state was ever written under `objects` (a manifest exists): one LIST
    /// request. Operator commands ask it so that a mistyped or never-run store is said to be
    /// one, not reported as a collection with nothing in it.
    pub async fn exists(objects: &dyn ObjectStore) -> Result<bool, Error> {
        let prefix = object_store::path::Path::from(format!("{STATE_PATH}/manifest"));
        let mut listing = objects.list(Some(&prefix));
        Ok(futures::StreamExt::next(&mut listing)
            .await
            .transpose()
            .map_err(|e| Error::object_store(&prefix, e))?
            .is_some())
    }

    /// True when opened read-only over a store that holds no state (no run wrote one): it
    /// reads as empty.
    pub fn is_absent(&self) -> bool {
        matches!(self.db, Handle::Absent)
    }

    /// True when opened with [`State::open_read_only`].
    pub fn is_read_only(&self) -> bool {
        !matches!(self.db, Handle::Writer(_))
    }

    async fn read_head(&self) -> Result<(), Error> {
        let head = self.get_json::<LogHead>("m/log").await?.unwrap_or_default();
        *self.head.lock().await = head;
        Ok(())
    }

    async fn db_get(&self, key: &str) -> Result<Option<bytes::Bytes>, Error> {
        let got = match &self.db {
            Handle::Writer(db) => db.get(key.as_bytes()).await,
            Handle::Reader(db) => db.get(key.as_bytes()).await,
            Handle::Absent => return Ok(None),
        };
        got.map_err(|e| map_err(&self.path, &self.fence, e))
    }

    /// Keys from `start` (inclusive) to `end` (exclusive); `bulk` when the range is expected
    /// to be large (see [`scan_options`]).
    async fn db_scan(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        bulk: bool,
    ) -> Result<Option<DbIterator>, Error> {
        let o = scan_options(bulk);
        let iter = match &self.db {
            Handle::Writer(db) => db.scan_with_options(start..end, &o).await,
            Handle::Reader(db) => db.scan_with_options(start..end, &o).await,
            Handle::Absent => return Ok(None),
        };
        iter.map(Some)
            .map_err(|e| map_err(&self.path, &self.fence, e))
    }

    /// Every key under `prefix`, a whole-collection pass (see [`scan_options`]).
    async fn db_scan_prefix(&self, prefix: Vec<u8>) -> Result<Option<DbIterator>, Error> {
        let o = scan_options(true);
        let iter = match &self.db {
            Handle::Writer(db) => db.scan_prefix_with_options(prefix, .., &o).await,
            Handle::Reader(db) => db.scan_prefix_with_options(prefix, .., &o).await,
            Handle::Absent => return Ok(None),
        };
        iter.map(Some)
            .map_err(|e| map_err(&self.path, &self.fence, e))
    }

    /// The writer, or [`Error::ReadOnly`].
    fn writer(&self) -> Result<&Db, Error> {
        match &self.db {
            Handle::Writer(db) => Ok(db),
            _ => Err(Error::ReadOnly {
                path: self.path.clone(),
            }),
        }
    }

    async fn get_json<T: for<'de> Deserialize<'de>>(&self, key: &str) -> Result<Option<T>, Error> {
        match self.db_get(key).await? {
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|source| Error::Record {
                    key: key.to_owned(),
                    source,
                }),
            None => Ok(None),
        }
    }

    /// The record of `uri` from `upstream`.
    pub async fn resource(
        &self,
        upstream: &str,
        uri: &str,
    ) -> Result<Option<ResourceRecord>, Error> {
        self.get_json(&resource_key(upstream, uri)).await
    }

    /// The checkpoint of one set of resources (Capability List `set`) of `upstream`.
    pub async fn checkpoint(&self, upstream: &str, set: &str) -> Result<Option<Checkpoint>, Error> {
        self.get_json(&format!("c/{upstream}/{set}")).await
    }

    /// The quarantine record of `uri`, if any.
    pub async fn quarantined(
        &self,
        upstream: &str,
        uri: &str,
    ) -> Result<Option<QuarantineRecord>, Error> {
        self.get_json(&quarantine_key(upstream, uri)).await
    }

    /// All resource records of `upstream`, in URI order, streamed.
    pub async fn resources(&self, upstream: &str) -> Result<Records<ResourceRecord>, Error> {
        self.scan(format!("r/{upstream}/")).await
    }

    /// Every resource record of every upstream (present and deleted), in key order
    /// (upstream, then URI), streamed: one pass over the collection for work that has to see
    /// all of it, such as finding the blobs still referenced (garbage collection).
    pub async fn all_resources(&self) -> Result<Records<ResourceRecord>, Error> {
        self.scan("r/".to_owned()).await
    }

    /// The (upstream, URI) of every present resource whose slot is in `slots`, in slot order,
    /// streamed.
    pub async fn present_in_slots(
        &self,
        slots: std::ops::RangeInclusive<u16>,
    ) -> Result<SlotMembers, Error> {
        let start = format!("p/{:04x}/", slots.start());
        // '0' follows '/' in ASCII: everything of the last slot sorts before this.
        let end = format!("p/{:04x}0", slots.end());
        // A wide range (a whole-collection pass, an audit's bucket) reads ahead.
        let bulk = usize::from(slots.end() - slots.start()) >= BULK_SLOTS;
        let iter = self
            .db_scan(start.into_bytes(), end.into_bytes(), bulk)
            .await?;
        Ok(SlotMembers {
            iter,
            path: self.path.clone(),
            fence: self.fence.clone(),
        })
    }

    /// How many resources are present (a pass over the slot index's keys, not the records):
    /// what a Resource List rebuilt from scratch is sized by.
    pub async fn count_present(&self) -> Result<u64, Error> {
        let mut members = self.present_in_slots(0..=u16::MAX).await?;
        let mut n = 0;
        while members.next().await?.is_some() {
            n += 1;
        }
        Ok(n)
    }

    /// The record of every present resource whose slot is in `slots`, in slot order, with
    /// its upstream: read from the slot index itself (one range scan). Keys written before
    /// the index held records are looked up by upstream and URI, `ahead` at a time (a lookup
    /// that misses the caches is a GET to the store; one after another they made a
    /// whole-collection pass latency-bound on S3). Members whose record is gone meanwhile
    /// are skipped.
    pub async fn present_records(
        &self,
        slots: std::ops::RangeInclusive<u16>,
        ahead: usize,
    ) -> Result<
        impl futures::Stream<Item = Result<(String, ResourceRecord), Error>> + Send + '_,
        Error,
    > {
        use futures::TryStreamExt;
        Ok(self
            .present_records_with_slots(slots, ahead)
            .await?
            .map_ok(|(_, upstream, record)| (upstream, record)))
    }

    /// [`State::present_records`] with each record's slot, for work that goes by slot (the
    /// Resource Dump finds the bodies a run spooled by slot: `spool.rs`).
    pub async fn present_records_with_slots(
        &self,
        slots: std::ops::RangeInclusive<u16>,
        ahead: usize,
    ) -> Result<
        impl futures::Stream<Item = Result<(u16, String, ResourceRecord), Error>> + Send + '_,
        Error,
    > {
        use futures::{StreamExt, TryStreamExt};
        let members = self.present_in_slots(slots).await?;
        let keys = futures::stream::try_unfold(members, |mut m| async move {
            Ok::<_, Error>(m.next_with_record().await?.map(|member| (member, m)))
        });
        Ok(keys
            .map_ok(move |(slot, upstream, uri, held)| async move {
                let record = match held {
                    Some(r) => Some(r),
                    None => self.resource(&upstream, &uri).await?,
                };
                Ok::<_, Error>(record.map(|r| (slot, upstream, r)))
            })
            .try_buffered(ahead.max(1))
            .filter_map(|r| async move { r.transpose() }))
    }

    /// All quarantine records (of every upstream), streamed.
    pub async fn quarantine(&self) -> Result<Records<QuarantineRecord>, Error> {
        self.scan("q/".to_owned()).await
    }

    /// The change log from sequence number `from` on, streamed in order.
    pub async fn log(&self, from: u64) -> Result<Records<LogEntry>, Error> {
        let start = log_key(from);
        // A long tail (a baseline's changes) reads ahead; an incremental run's few changes
        // read block by block.
        let bulk = self.head.lock().await.seq.saturating_sub(from) >= BULK_LOG_ENTRIES;
        let iter = self
            .db_scan(start.into_bytes(), b"l0".to_vec(), bulk)
            .await?;
        Ok(Records::new(iter, self.path.clone(), self.fence.clone()))
    }

    /// The last sequence number given out (0 when the log is empty).
    pub async fn last_seq(&self) -> u64 {
        self.head.lock().await.seq
    }

    async fn scan<T: for<'de> Deserialize<'de>>(
        &self,
        prefix: String,
    ) -> Result<Records<T>, Error> {
        let iter = self.db_scan_prefix(prefix.into_bytes()).await?;
        Ok(Records::new(iter, self.path.clone(), self.fence.clone()))
    }

    /// Makes commit times (and what reads [`State::clock`]: a Change List's age) come from
    /// `clock`: tests move a manual clock instead of sleeping.
    pub fn set_clock(&mut self, clock: Clock) {
        self.clock = clock;
    }

    /// Where this state's commit times come from; the publishers judge ages by it too, so
    /// that both agree.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Commits `c` atomically and durably: every change gets the next sequence number and a
    /// datetime strictly later than the previous one (rsagg's own `lastmod`/`datetime`).
    /// Returns the log entries written.
    pub async fn commit(&self, c: Commit) -> Result<Vec<LogEntry>, Error> {
        self.commit_with(c, true).await
    }

    /// Like [`State::commit`]; with `durable` false it returns once the batch is applied (and
    /// visible to reads) without waiting for it to reach object storage. Batches become
    /// durable in order, so a later durable commit (the one that moves a checkpoint) makes
    /// every earlier one durable too; a crash before that loses only records whose blobs are
    /// refetched or found again on the next run.
    pub async fn commit_with(&self, c: Commit, durable: bool) -> Result<Vec<LogEntry>, Error> {
        let mut batch = WriteBatch::new();
        let mut written = Vec::with_capacity(c.changes.len());
        let handle = {
            let mut head = self.head.lock().await;
            let mut next = *head;
            for applied in c.changes {
                next.seq += 1;
                let now = self.clock.now();
                let at = match next.at {
                    Some(prev) if now.cmp_instant(&prev).is_le() => prev.plus_nanos(1_000),
                    _ => now,
                };
                next.at = Some(at);
                let mut record = applied.record;
                record.seq = next.seq;
                record.lastmod = at;
                let entry = LogEntry {
                    seq: next.seq,
                    at,
                    upstream: record.upstream.clone(),
                    uri: record.uri.clone(),
                    change: applied.change,
                    copy: record.copy.clone(),
                    mime_type: record.mime_type.clone(),
                    upstream_meta: Some(record.upstream_meta.clone()),
                };
                put_record(&mut batch, &record, json(&record));
                batch.put(log_key(next.seq), json(&entry));
                written.push(entry);
            }
            for record in c.touched {
                put_record(&mut batch, &record, json(&record));
            }
            for q in &c.quarantine {
                batch.put(quarantine_key(&q.upstream, &q.uri), json(q));
            }
            for uri in &c.release {
                batch.delete(quarantine_key(&c.upstream, uri));
            }
            if let Some(cp) = &c.checkpoint {
                batch.put(format!("c/{}/{}", c.upstream, c.set), json(cp));
            }
            batch.put("m/log", json(&next));
            let handle = self
                .writer()?
                .write(batch)
                .await
                .map_err(|e| map_err(&self.path, &self.fence, e))?;
            *head = next;
            handle
        };
        if durable {
            handle
                .await_durable()
                .await
                .map_err(|e| map_err(&self.path, &self.fence, e))?;
        }
        Ok(written)
    }

    /// Checks that this writer still holds the state: reads the latest manifest, which fails
    /// with [`Error::Fenced`] when another writer opened the state since (and marks the
    /// fence, so the store refuses every later write). One manifest read. Called before
    /// documents and stats are written, so that a writer fenced out while it harvested does
    /// not overwrite what the current writer published. Nothing for a read-only state.
    pub async fn hold(&self) -> Result<(), Error> {
        if let Some(p) = self.fence.fenced() {
            return Err(Error::Fenced { path: p.to_owned() });
        }
        match &self.db {
            Handle::Writer(db) => db
                .refresh_manifest()
                .await
                .map_err(|e| map_err(&self.path, &self.fence, e)),
            Handle::Reader(_) | Handle::Absent => Ok(()),
        }
    }

    /// Makes every commit applied so far durable (writes the WAL out and waits for it).
    /// Commits made with `durable` false are visible to reads before they are durable; what
    /// is announced to the outside from the log (change notifications) must not be lost by a
    /// crash, so announcing calls this first.
    pub async fn flush(&self) -> Result<(), Error> {
        self.writer()?
            .flush()
            .await
            .map_err(|e| map_err(&self.path, &self.fence, e))
    }

    /// Writes what the database holds in memory (its memtable) to the store, as
    /// [`State::close`] does first: a caller about to close can start it early, when the
    /// state is no longer read but other work still runs. Nothing for a read-only state.
    pub async fn flush_memtable(&self) -> Result<(), Error> {
        match &self.db {
            Handle::Writer(db) => db
                .flush_with_options(slatedb::config::FlushOptions {
                    flush_type: slatedb::config::FlushType::MemTable,
                })
                .await
                .map_err(|e| map_err(&self.path, &self.fence, e)),
            Handle::Reader(_) | Handle::Absent => Ok(()),
        }
    }

    /// Compactors this writer started after its first (each replacing one that a stale
    /// process's compactor fenced, or that failed).
    pub fn compactor_restarts(&self) -> u32 {
        self.compaction.as_ref().map_or(0, Compaction::restarts)
    }

    /// Flushes and closes the database (a read-only state: closes its reader).
    pub async fn close(mut self) -> Result<(), Error> {
        if let Some(gc) = self.gc.take() {
            gc.stop().await;
        }
        if let Some(c) = self.compaction.take() {
            c.stop().await;
        }
        let closed = match &self.db {
            Handle::Writer(db) => db.close().await,
            Handle::Reader(db) => db.close().await,
            Handle::Absent => Ok(()),
        };
        closed.map_err(|e| map_err(&self.path, &self.fence, e))
    }
}

/// Size of the state's table blocks before compression (slatedb's default: 4 KiB).
///
/// A fresh process (every `run --once`) reads the index of each table its lookups fall in,
/// and an incremental run's scattered changes fall in all of them: the index holds a key per
/// block, so with 4 KiB blocks a 300,000-resource state's indexes were ~5 MB of an
/// incremental run's reads, growing with the collection. 16 KiB blocks make them a quarter,
/// and [`STATE_COMPRESSION`] keeps a point lookup's block read near 4 KiB. Tables written
/// before keep their blocks; each table says its own.
pub const STATE_BLOCK_SIZE: slatedb::config::SstBlockSize =
    slatedb::config::SstBlockSize::Block16Kib;

/// Compression of the state's table blocks: LZ4, fast enough not to show in a run's CPU,
/// and JSON records compress ~3× (the state is most of what rsagg stores per resource).
/// Tables written before stay as they are (each table's footer names its codec).
pub const STATE_COMPRESSION: slatedb::config::CompressionCodec =
    slatedb::config::CompressionCodec::Lz4;

/// Bytes a bulk scan reads from a table per request, at least: [`scan_options`]. Compressed
/// bytes ([`STATE_COMPRESSION`]); a scan holds its blocks decompressed, about three times
/// that per table it reads from.
///
/// One request of 256 KiB at a time per table ([`SCAN_FETCHES`]), where there were two of
/// 128 KiB: the same bytes held per table (slatedb keeps a request's blocks until the scan has
/// passed them all, and starts the next request then), half the scans' GETs. A baseline's
/// publish makes most of a baseline's GETs by these scans: with two of 128 KiB a 10^6
/// baseline on SeaweedFS made 10,093 GETs (1.009% of its resources, over issue 24's bound of
/// 1%), with one of 256 KiB 8,089 (0.81%). The price is a
/// round trip per 256 KiB of a table during which that table's scan waits (on S3 ~20 ms:
/// ~10 MB/s per table scanned, well above what the publish consumes).
pub const SCAN_READ_AHEAD: usize = 256 << 10;

/// Requests a bulk scan keeps in flight per table (see [`SCAN_READ_AHEAD`]).
pub const SCAN_FETCHES: usize = 1;

/// Slot ranges at least this wide (of 65,536) are scanned in bulk.
const BULK_SLOTS: usize = 255;

/// Log tails at least this long are scanned in bulk.
const BULK_LOG_ENTRIES: u64 = 10_000;

/// How a scan reads. In bulk (a pass over much of the state: a Resource List rebuilt, the
/// Resource Dump, a baseline's log): [`SCAN_READ_AHEAD`] bytes of consecutive blocks per
/// request, two requests at once per table. slatedb's default, one 4 KiB block per request,
/// made each such pass over a 10^6-resource state ~10^5 GETs; in the cloud requests are
/// money. A bulk scan buffers up to twice that per table it reads from. A narrow scan (an
/// incremental run's log tail) reads block by block: read-ahead would fetch 128 KiB from
/// every table its range starts in for a few entries; its blocks and indexes are cached.
fn scan_options(bulk: bool) -> slatedb::config::ScanOptions {
    if bulk {
        slatedb::config::ScanOptions {
            read_ahead_bytes: SCAN_READ_AHEAD,
            max_fetch_tasks: SCAN_FETCHES,
            ..slatedb::config::ScanOptions::default()
        }
    } else {
        // Blocks, and the table's index, kept in the caches: a run scans the same short
        // tail several times, and uncached every scan read the whole index of each table
        // again.
        slatedb::config::ScanOptions {
            cache_blocks: true,
            ..slatedb::config::ScanOptions::default()
        }
    }
}

fn json<T: Serialize>(v: &T) -> Vec<u8> {
    // Records are plain data (strings, numbers, lists): serialising them cannot fail.
    serde_json::to_vec(v).unwrap_or_default()
}

/// slatedb's text when two writers opening the same state race to write its manifest (no
/// kind of its own: a data error). The loser of that race is fenced out as surely as one
/// opened earlier: exit 3, not 1.
const MANIFEST_RACE: &str = "transactional object (e.g. manifest) version already exists";

fn map_err(path: &str, fence: &StoreHealth, e: slatedb::Error) -> Error {
    if matches!(
        e.kind(),
        slatedb::ErrorKind::Closed(slatedb::CloseReason::Fenced)
    ) || e.to_string().contains(MANIFEST_RACE)
    {
        // Final: from now on nothing more is written through the store.
        fence.fence(path);
        Error::Fenced {
            path: path.to_owned(),
        }
    } else {
        Error::State {
            path: path.to_owned(),
            source: e,
        }
    }
}

/// Records streamed from a scan.
pub struct Records<T> {
    iter: Option<DbIterator>,
    path: String,
    fence: Arc<StoreHealth>,
    _t: std::marker::PhantomData<fn() -> T>,
}

impl<T: for<'de> Deserialize<'de>> Records<T> {
    fn new(iter: Option<DbIterator>, path: String, fence: Arc<StoreHealth>) -> Self {
        Records {
            iter,
            path,
            fence,
            _t: std::marker::PhantomData,
        }
    }

    /// The next record, or `None` at the end.
    pub async fn next(&mut self) -> Result<Option<T>, Error> {
        let Some(iter) = self.iter.as_mut() else {
            return Ok(None);
        };
        match iter.next().await {
            Ok(Some(kv)) => serde_json::from_slice(&kv.value)
                .map(Some)
                .map_err(|source| Error::Record {
                    key: String::from_utf8_lossy(&kv.key).into_owned(),
                    source,
                }),
            Ok(None) => Ok(None),
            Err(e) => Err(map_err(&self.path, &self.fence, e)),
        }
    }
}

/// Present resources of a slot range (see [`State::present_in_slots`]).
pub struct SlotMembers {
    iter: Option<DbIterator>,
    path: String,
    fence: Arc<StoreHealth>,
}

impl SlotMembers {
    /// The next (slot, upstream, URI), or `None` at the end. The record the key holds is not
    /// parsed (counting and bucketing members need the key only).
    pub async fn next(&mut self) -> Result<Option<(u16, String, String)>, Error> {
        Ok(self
            .next_raw()
            .await?
            .map(|(slot, upstream, uri, _)| (slot, upstream, uri)))
    }

    /// The next (slot, upstream, URI) with the record the slot index holds (`None` for a key
    /// written before the index held records), or `None` at the end.
    pub async fn next_with_record(
        &mut self,
    ) -> Result<Option<(u16, String, String, Option<ResourceRecord>)>, Error> {
        let Some((slot, upstream, uri, value)) = self.next_raw().await? else {
            return Ok(None);
        };
        let record = if value.is_empty() {
            None
        } else {
            Some(
                serde_json::from_slice(&value).map_err(|source| Error::Record {
                    key: slot_key(&upstream, &uri),
                    source,
                })?,
            )
        };
        Ok(Some((slot, upstream, uri, record)))
    }

    /// The next well-formed member with its value, unparsed.
    async fn next_raw(&mut self) -> Result<Option<(u16, String, String, bytes::Bytes)>, Error> {
        let Some(iter) = self.iter.as_mut() else {
            return Ok(None);
        };
        loop {
            let Some(kv) = iter
                .next()
                .await
                .map_err(|e| map_err(&self.path, &self.fence, e))?
            else {
                return Ok(None);
            };
            let key = String::from_utf8_lossy(&kv.key);
            let parsed = key.strip_prefix("p/").and_then(|rest| {
                let (slot, rest) = rest.split_once('/')?;
                let (upstream, uri) = rest.split_once('/')?;
                Some((
                    u16::from_str_radix(slot, 16).ok()?,
                    upstream.to_owned(),
                    uri.to_owned(),
                ))
            });
            match parsed {
                Some((slot, upstream, uri)) => return Ok(Some((slot, upstream, uri, kv.value))),
                None => tracing::warn!(key = %key, "malformed slot key skipped"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BlobInfo, UpstreamMeta};

    fn created(upstream: &str, uri: &str) -> Applied {
        Applied {
            change: Change::Created,
            record: ResourceRecord {
                upstream: upstream.into(),
                uri: uri.into(),
                status: ResourceStatus::Present,
                copy: Some(BlobInfo {
                    sha256: "00".repeat(32),
                    md5: "11".repeat(16),
                    sha1: None,
                    length: 1,
                }),
                mime_type: None,
                set: String::new(),
                lastmod: W3cDateTime::from_unix(0, 0),
                seq: 0,
                upstream_meta: UpstreamMeta::default(),
            },
        }
    }

    /// Commits the creation of `uris` of upstream `up`, in one commit.
    async fn create<U: AsRef<str>>(s: &State, uris: &[U]) {
        s.commit(Commit {
            upstream: "up".into(),
            changes: uris.iter().map(|u| created("up", u.as_ref())).collect(),
            ..Commit::default()
        })
        .await
        .unwrap();
    }

    /// `http://x/00000`…: `n` URIs of resources.
    fn uris(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("http://x/{i:05}")).collect()
    }

    /// A run pays for the state's garbage collection only when a pass is due: the first
    /// writer passes at once and records it; the next, opened at once, waits for its turn.
    #[tokio::test]
    async fn garbage_collection_passes_when_due_not_at_every_open() {
        use std::time::Duration;
        let loc = crate::open_object_store("memory://").unwrap();
        let w = State::open(loc.objects.clone(), "test").await.unwrap();
        create(&w, &uris(10)).await;
        let mut first = w.gc.as_ref().unwrap().schedule();
        tokio::time::timeout(Duration::from_secs(60), first.wait_for(|s| s.passes == 1))
            .await
            .expect("a first pass")
            .unwrap();
        let recorded = w.db_get(crate::state_gc::LAST_PASS_KEY).await.unwrap();
        assert!(recorded.is_some(), "the pass is recorded in the state");
        w.close().await.unwrap();

        let w = State::open(loc.objects.clone(), "test").await.unwrap();
        let mut second = w.gc.as_ref().unwrap().schedule();
        let settled = *tokio::time::timeout(
            Duration::from_secs(60),
            second.wait_for(|s| s.next_in.is_some()),
        )
        .await
        .expect("the collector settles on a wait")
        .unwrap();
        assert_eq!(settled.passes, 0, "{settled:?}");
        let next = settled.next_in.unwrap();
        assert!(
            next > crate::state_gc::DUE_AFTER - Duration::from_secs(60),
            "the next pass is due in {next:?}, not now"
        );
        w.close().await.unwrap();
    }

    #[tokio::test]
    async fn tables_are_written_compressed() {
        use futures::StreamExt;
        let loc = crate::open_object_store("memory://").unwrap();
        let w = State::open(loc.objects.clone(), "test").await.unwrap();
        let uris = uris(4000);
        // Each record is held twice (under `r/` and in the slot index `p/`).
        let records: usize = uris
            .iter()
            .map(|u| 2 * json(&created("up", u).record).len())
            .sum();
        create(&w, &uris).await;
        w.flush_memtable().await.unwrap();
        w.close().await.unwrap();
        let prefix = object_store::path::Path::from(format!("{STATE_PATH}/compacted"));
        let tables: u64 = loc
            .objects
            .list(Some(&prefix))
            .map(|m| m.unwrap().size)
            .fold(0, |a, b| async move { a + b })
            .await;
        assert!(
            (tables as usize) < records / 2,
            "tables {tables} bytes for {records} bytes of records"
        );
    }

    #[tokio::test]
    async fn narrow_scans_read_a_table_index_once() {
        // An incremental run scans the log tail several times (Change Lists, Change Dumps,
        // the Resource List's patch, notifications): uncached, each scan read the whole
        // index of every table it started in again (570 KB, 18 times, in a 300,000-resource
        // state's run).
        let loc = crate::open_object_store("memory://").unwrap();
        let w = State::open(loc.objects.clone(), "test").await.unwrap();
        for chunk in uris(4000).chunks(500) {
            create(&w, chunk).await;
        }
        w.flush_memtable().await.unwrap();
        w.close().await.unwrap();
        let s = State::open(loc.objects.clone(), "test").await.unwrap();
        async fn tail(s: &State) {
            let mut log = s.log(3990).await.unwrap();
            let mut n = 0;
            while log.next().await.unwrap().is_some() {
                n += 1;
            }
            assert_eq!(n, 11);
        }
        let before = loc.counters.snapshot();
        tail(&s).await;
        let first = loc.counters.snapshot().since(&before);
        for _ in 0..5 {
            tail(&s).await;
        }
        let again = loc.counters.snapshot().since(&before);
        // Later scans of the same tail read no block again (the state's background tasks
        // may read a few bytes of their own meanwhile).
        assert!(
            again.bytes_read - first.bytes_read < 2048,
            "one scan: {first:?}; six: {again:?}"
        );
        s.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_slot_key_without_its_record_is_looked_up() {
        // States written before the slot index held records have empty `p/` values.
        use futures::TryStreamExt;
        let objects: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let s = State::open(objects, "test").await.unwrap();
        create(&s, &["http://x/old", "http://x/new"]).await;
        let db = s.writer().unwrap();
        db.put(slot_key("up", "http://x/old").as_bytes(), b"")
            .await
            .unwrap();
        let mut held: Vec<_> = s
            .present_records(0..=u16::MAX, 2)
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        held.sort_by(|a, b| a.1.uri.cmp(&b.1.uri));
        let uris: Vec<_> = held.iter().map(|(_, r)| r.uri.as_str()).collect();
        assert_eq!(uris, ["http://x/new", "http://x/old"]);
        assert_eq!(
            Some(&held[1].1),
            s.resource("up", "http://x/old").await.unwrap().as_ref()
        );
        assert_eq!(held[1].1.seq, 1, "the record, looked up under r/");
    }

    #[tokio::test]
    async fn flushing_the_memtable_writes_a_table_and_keeps_the_state_usable() {
        let objects: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let tables = |objects: Arc<dyn ObjectStore>| async move {
            let prefix = object_store::path::Path::from(format!("{STATE_PATH}/compacted"));
            futures::StreamExt::count(objects.list(Some(&prefix))).await
        };
        let w = State::open(objects.clone(), "test").await.unwrap();
        create(&w, &["http://a/1"]).await;
        assert_eq!(tables(objects.clone()).await, 0, "only the WAL so far");
        w.flush_memtable().await.unwrap();
        assert_eq!(
            tables(objects.clone()).await,
            1,
            "the memtable went to a table"
        );
        // Read back from that table; writes go on, and close has nothing left to lose.
        assert_eq!(
            w.resource("up", "http://a/1").await.unwrap().unwrap().seq,
            1
        );
        create(&w, &["http://a/2"]).await;
        w.close().await.unwrap();
        let r = State::open(objects.clone(), "test").await.unwrap();
        assert_eq!(r.last_seq().await, 2);
        assert!(r.resource("up", "http://a/2").await.unwrap().is_some());
        r.close().await.unwrap();
    }

    #[tokio::test]
    async fn a_read_only_state_reads_what_the_writer_committed_and_writes_nothing() {
        let objects: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        // No state yet: an empty view, not an error.
        let empty = State::open_read_only(objects.clone(), "test")
            .await
            .unwrap();
        assert!(empty.is_read_only());
        assert!(empty.resource("up", "http://a/1").await.unwrap().is_none());
        assert!(
            empty
                .all_resources()
                .await
                .unwrap()
                .next()
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            empty
                .present_in_slots(0..=u16::MAX)
                .await
                .unwrap()
                .next()
                .await
                .unwrap()
                .is_none()
        );
        empty.close().await.unwrap();

        let w = State::open(objects.clone(), "test").await.unwrap();
        create(&w, &["http://a/1"]).await;
        // The writer is still open: the reader sees its durable commits and fences nothing.
        let r = State::open_read_only(objects.clone(), "test")
            .await
            .unwrap();
        assert_eq!(
            r.resource("up", "http://a/1").await.unwrap().unwrap().seq,
            1
        );
        assert_eq!(r.last_seq().await, 1);
        let mut members = r.present_in_slots(0..=u16::MAX).await.unwrap();
        assert_eq!(members.next().await.unwrap().unwrap().2, "http://a/1");
        let refused = r.commit(Commit::default()).await.unwrap_err();
        assert!(matches!(refused, Error::ReadOnly { .. }), "{refused}");
        r.close().await.unwrap();
        w.commit(Commit {
            upstream: "up".into(),
            changes: vec![created("up", "http://a/2")],
            ..Commit::default()
        })
        .await
        .expect("the writer was not fenced by the reader");
        w.close().await.unwrap();
    }

    #[tokio::test]
    async fn all_resources_spans_every_upstream_and_nothing_else() {
        let objects: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let s = State::open(objects, "test").await.unwrap();
        for (upstream, uris) in [("up2", ["http://b/1"]), ("up", ["http://a/1"])] {
            s.commit(Commit {
                upstream: upstream.into(),
                changes: uris.iter().map(|u| created(upstream, u)).collect(),
                checkpoint: Some(crate::Checkpoint::default()),
                quarantine: vec![QuarantineRecord {
                    upstream: upstream.into(),
                    uri: "http://q/1".into(),
                    reason: String::new(),
                    expected: String::new(),
                    got: String::new(),
                    at: W3cDateTime::from_unix(0, 0),
                    blob: None,
                }],
                ..Commit::default()
            })
            .await
            .unwrap();
        }
        let mut all = s.all_resources().await.unwrap();
        let mut seen = Vec::new();
        while let Some(r) = all.next().await.unwrap() {
            seen.push((r.upstream, r.uri, r.seq));
        }
        // Key order: upstream `up` before `up2`; log entries, checkpoints, quarantine and
        // the slot index are not records.
        assert_eq!(
            seen,
            [
                ("up".to_owned(), "http://a/1".to_owned(), 2),
                ("up2".to_owned(), "http://b/1".to_owned(), 1),
            ]
        );
        s.close().await.unwrap();
    }

    /// A store location over `inner` whose writes go through a counted store with a health
    /// of its own, as a run's do; `inner` is the same store as another process sees it.
    fn fenced_location() -> (Arc<dyn ObjectStore>, crate::StoreLocation) {
        let inner: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let health = StoreHealth::new("memory://", 0);
        let mut loc = crate::StoreLocation::new(
            "memory://",
            Arc::new(crate::CountedStore::with_health(
                inner.clone(),
                Default::default(),
                health.clone(),
            )),
        );
        loc.health = health;
        (inner, loc)
    }

    /// The state opened as a run opens it: its writer, telling `loc`'s health of a fence.
    async fn open_writer(loc: &crate::StoreLocation) -> State {
        State::open_fenced(
            loc.objects.clone(),
            "memory://",
            &crate::StoreOptions::default(),
            loc.health.clone(),
        )
        .await
        .unwrap()
    }

    /// Fencing is final: once a second writer opened the state, the first one's check before
    /// publishing fails as fenced, and from then on the store it writes through refuses every
    /// write (documents, stats, history), not only the state's.
    #[tokio::test]
    async fn a_fenced_writer_can_write_nothing_more_to_the_store() {
        use object_store::ObjectStoreExt;
        let (inner, loc) = fenced_location();
        let first = open_writer(&loc).await;
        create(&first, &uris(2)).await;
        first.hold().await.expect("still the writer");
        let doc = object_store::path::Path::from("resourcelist.xml");
        loc.objects
            .put(&doc, b"first".to_vec().into())
            .await
            .unwrap();
        assert!(loc.health.fenced().is_none());

        // Another process (its own store handle) opens the same state.
        let second = State::open(inner.clone(), "memory://").await.unwrap();
        let e = first.hold().await.unwrap_err();
        assert!(e.is_fenced(), "expected fencing, got {e}");
        assert_eq!(loc.health.fenced(), Some("memory:/state"));
        // Every later write of the first is refused and says why; reads still answer.
        let refused = loc
            .objects
            .put(&doc, b"stale".to_vec().into())
            .await
            .unwrap_err();
        let refused = crate::Error::object_store(&doc, refused);
        assert!(refused.is_fenced(), "{refused}");
        assert!(refused.to_string().contains("fenced out"), "{refused}");
        let body = loc.objects.get(&doc).await.unwrap().bytes().await.unwrap();
        assert_eq!(&body[..], b"first");
        assert!(
            first
                .commit(Commit::default())
                .await
                .unwrap_err()
                .is_fenced()
        );
        // The run waiting on the fence learns it at once.
        assert_eq!(loc.health.fenced_out().await, "memory:/state");
        assert_eq!(second.last_seq().await, 2);
        second.close().await.unwrap();
    }

    /// A writer fenced out learns it from the database itself too (it polls its manifest and
    /// closes), without a call of its own failing first.
    #[tokio::test]
    async fn the_fence_is_noticed_without_a_failing_call() {
        let (inner, loc) = fenced_location();
        let first = open_writer(&loc).await;
        create(&first, &uris(1)).await;
        let second = State::open(inner.clone(), "memory://").await.unwrap();
        // Bounded: the manifest is polled every second by default.
        tokio::time::timeout(std::time::Duration::from_secs(30), loc.health.fenced_out())
            .await
            .expect("the fence was noticed");
        second.close().await.unwrap();
        drop(first);
    }

    /// Two processes started together: the later one's writer fences the earlier one's,
    /// but the earlier one's compactor may start last and fence the later one's compactor.
    /// That must not close the writer that holds the state (before, both ended fenced and
    /// nobody published): its compactor is replaced and the writer goes on.
    #[tokio::test]
    async fn a_stale_process_compactor_never_fences_the_writer_that_holds_the_state() {
        let (inner, loc) = fenced_location();
        let current = open_writer(&loc).await;
        create(&current, &uris(2)).await;
        // The stale process's compactor, started after the current writer's.
        let stale = slatedb::CompactorBuilder::new(STATE_PATH, inner.clone()).build();
        let stale = tokio::spawn(async move { stale.run().await });
        // Until one of the two compactors is fenced for good: the stale one (it ends) or
        // the current writer's (then the writer is fenced too, as it was before). Bounded:
        // a compactor polls its manifest every 5 s by default.
        let ended = tokio::time::timeout(std::time::Duration::from_secs(60), async {
            tokio::select! {
                ended = stale => Some(ended.unwrap()),
                _ = loc.health.fenced_out() => None,
            }
        })
        .await
        .expect("one of the compactors was fenced");
        assert!(
            loc.health.fenced().is_none(),
            "the writer holding the state was fenced by a stale compactor"
        );
        let e = ended
            .expect("the stale compactor ended")
            .expect_err("the stale compactor was fenced");
        assert!(
            matches!(
                e.kind(),
                slatedb::ErrorKind::Closed(slatedb::CloseReason::Fenced)
            ),
            "{e}"
        );
        assert!(current.compactor_restarts() >= 1);
        // The current writer still holds the state and writes.
        assert!(loc.health.fenced().is_none());
        current.hold().await.expect("still the writer");
        create(&current, &["http://x/late"]).await;
        assert_eq!(current.last_seq().await, 3);
        current.close().await.unwrap();
    }
}
