//! Publishing rsagg's Resource List into the store (spec 10.1, 10.2), incrementally.
//!
//! The collection is cut into `parts` ranges of hash slots (see `rsagg_store::slot_of`), so a
//! resource always lands in the same part and a run that changed ten resources rewrites only
//! the parts holding them. Parts are immutable objects named by generation
//! (`resourcelist/part-00003-g7.xml`), written before the document that points at them:
//! `resourcelist.xml`, the list itself when there is one part, else its index. A reader thus
//! never sees a document pointing at a part not yet written, nor a mix of old and new parts.
//! Parts a new index no longer names are deleted only after a grace period, so a Destination
//! that read the previous index can still fetch them.
//!
//! Why parts are small (at most `resourcelist_part_entries`, 200 by default, and about half
//! that after a re-cut): an incremental run's cost must follow its changes, not the
//! collection. Scattered changes touch about as many parts as there are changes, so the work
//! of a run is (changes × part size) whatever the collection's size; with 40,000-entry parts
//! 100 changes in a million resources rewrote the whole list. A Destination pays one more
//! request per part in a baseline, about 1% of the requests it makes for the copies.
//!
//! Why a changed part is patched rather than rebuilt: the published part already holds the
//! rendered entries of everything unchanged, in one object; rebuilding it meant a state
//! lookup per entry (a GET per block on a cold cache). A patch reads the old part, replaces
//! or drops the entries of the resources the change log names since the last publish, and
//! appends the created ones: one GET and one PUT per touched part, plus one record lookup per
//! change. Every part is rebuilt from the state instead when there is no published list yet,
//! when the entries were rendered under another base URL or link policy, when more resources
//! changed than a patch holds in memory ([`PATCH_MAX_CHANGED`]), or when a part outgrew its
//! bound (the collection is then re-cut into more parts).
//!
//! # Times (spec 10.2, Appendix A)
//!
//! Every time is read from the state's clock (the one its commit times come from). A
//! publish takes `at` before it reads the change log, so every change committed before `at`
//! is in what it reads. Each part it writes carries that `at` and, as `completed`, the time
//! its last entry had been written; the index it writes carries that `at` and, as
//! `completed`, the time after its last part was stored. Each `<sitemap>` entry of the index
//! repeats the `at` and `completed` of the part it names, as that part's document has them
//! (kept in [`ResourceListMeta::part_times`]): a part a publish left alone keeps its older
//! times, and stays true as of the index's `at`, since the publish read the change log from
//! the previous publish on and none of the part's resources changed. So the index's `at` is
//! the latest `at` of its parts (that of every part the publish wrote), its `completed` is
//! at or after the `completed` of every part, and `completed` is never before `at`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_model::{Capability, Clock, Header, Link, Md, Root, UrlEntry, W3cDateTime};
use rsagg_store::documents::{get_json, put, put_json, sweep_retired};
use rsagg_store::{State, slot_of};

use crate::Error;
use crate::entry::resource_entry;
use crate::links::LinkPolicy;
use rsagg_config::{AUTO_INTERVAL_ABOVE, PublishConfig, ResourceListPolicy};
use rsagg_layout::capability::up_link;
use rsagg_layout::meta::*;
use rsagg_layout::paths::*;
use rsagg_layout::uris::own_uri;
use rsagg_sitemap::writer::{document, end_tag};

/// Most entries in one part before the collection is re-cut into more parts (the default of
/// `publish.resourcelist_part_entries`); a re-cut aims at half of it per part.
pub const PART_TARGET: u64 = 200;
/// Most parts: a Resource List Index holds at most 50,000 (spec 10.2 via the Sitemap
/// protocol), and the slots are cut in powers of two. With 32,768 parts of at most 50,000
/// entries a list holds 1.6 billion resources.
pub const MAX_PARTS: usize = 32_768;
/// Most changed resources a publish patches parts for; beyond, every part is rebuilt from
/// the state (the changed keys are held in memory while patching: about 100 bytes each).
pub const PATCH_MAX_CHANGED: usize = 100_000;
/// Records of a part looked up at once while it is rebuilt (bounded: each holds one record).
pub(crate) const LOOKUPS_AHEAD: usize = 32;
/// Parts written at once (each holds its document, at most a part's entries, in memory).
const PARTS_AT_ONCE: usize = 8;

/// Publishes the Resource List of the collection at `base_url` from `state` into `objects`,
/// with parts of at most [`PART_TARGET`] entries and the default `publish.grace` for the
/// parts a new index no longer names. Returns which parts were rewritten.
pub async fn publish(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    policy: &LinkPolicy,
) -> Result<Vec<usize>, Error> {
    let grace = PublishConfig::default().grace;
    publish_with(state, objects, base_url, policy, PART_TARGET, grace).await
}

/// How many parts a list of `count` entries is cut into: a power of two (slot ranges of
/// equal size) giving parts of at most half of `part_max` on average, so they can grow
/// before the next re-cut.
fn parts_for(count: u64, part_max: u64) -> usize {
    let want = count.saturating_mul(2).div_ceil(part_max.max(1)).max(1);
    usize::try_from(want)
        .unwrap_or(MAX_PARTS)
        .next_power_of_two()
        .min(MAX_PARTS)
}

/// [`publish`] with another part bound (`publish.resourcelist_part_entries`; tests use small
/// ones) and grace period (the publish stage passes `publish.grace`), patched every run.
pub async fn publish_with(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    policy: &LinkPolicy,
    part_max: u64,
    grace: Duration,
) -> Result<Vec<usize>, Error> {
    let opts = ListOptions {
        part_max,
        grace,
        ..ListOptions::default()
    };
    publish_list(state, objects, base_url, policy, opts).await
}

/// How [`publish_list`] keeps the Resource List: `[publish]`'s `resourcelist`,
/// `resourcelist_every`, `resourcelist_part_entries` and `grace`.
#[derive(Debug, Clone, Copy)]
pub struct ListOptions {
    /// Most entries in one part (`resourcelist_part_entries`).
    pub part_max: u64,
    /// How long a replaced part stays (`grace`).
    pub grace: Duration,
    /// Patched every run, or a snapshot on an interval (`resourcelist`).
    pub policy: ResourceListPolicy,
    /// How often the interval's snapshot is rebuilt (`resourcelist_every`).
    pub every: Duration,
    /// Rebuild the interval's snapshot now whatever its age (`run --force`).
    pub force: bool,
}

impl Default for ListOptions {
    fn default() -> Self {
        let cfg = PublishConfig::default();
        ListOptions {
            part_max: PART_TARGET,
            grace: cfg.grace,
            policy: ResourceListPolicy::Patch,
            every: cfg.resourcelist_every,
            force: false,
        }
    }
}

impl ListOptions {
    /// The options `cfg` says (`force`: `run --force`).
    pub fn of(cfg: &PublishConfig, force: bool) -> ListOptions {
        ListOptions {
            part_max: cfg.resourcelist_part_entries,
            grace: cfg.grace,
            policy: cfg.resourcelist,
            every: cfg.resourcelist_every,
            force,
        }
    }
}

/// One pending part per this many parts of the snapshot (at least one): what the runs
/// between two snapshots rewrite. At 10^8 resources, 512 parts, so an hourly run of
/// ~42,000 changes rewrites at most 512 small objects instead of ~72% of 32,768 parts of
/// ~1.5 MB.
pub const PARTS_PER_PENDING: usize = 64;
/// Most entries in one pending part: beyond, the snapshot is rebuilt at once (the changes
/// since it are then a large share of the collection: 5% of 10^8 with 512 pending parts).
/// A pending part is held in memory while it is rewritten, [`PARTS_AT_ONCE`] at a time, its
/// old bytes and its new ones: at ~480 bytes an entry, at most ~80 MB.
pub const PENDING_PART_MAX: u64 = 10_000;

/// Publishes the Resource List as `opts` says. Patched, every run rewrites the parts its
/// changes fall in (see the module documentation). On the interval (spec 10.1: a
/// snapshot "at a particular point in time", the Change Lists since its `at` carrying the
/// rest), `resourcelist.xml` and its parts are rebuilt from the state only when the
/// snapshot is `every` old (or was rendered with another base URL or link policy, or
/// `force`), streamed in slot order and put index last, so a reader sees the old snapshot
/// or the new one whole; the runs in between write only the pending parts (the entries
/// changed since the snapshot, which `rsagg serve` reads first). Returns which parts of
/// the list were rewritten (none on a run between two snapshots).
pub async fn publish_list(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    policy: &LinkPolicy,
    opts: ListOptions,
) -> Result<Vec<usize>, Error> {
    let (part_max, grace) = (opts.part_max, opts.grace);
    let store = objects.as_ref();
    let mut meta: ResourceListMeta = get_json(store, RESOURCE_LIST_META)
        .await?
        .unwrap_or_default();
    // When taking the snapshot starts (spec 10.2 `at`): before the change log is read, so
    // that every change committed before it is in what this publish reads.
    let clock = state.clock();
    let at = clock.now();
    let last = state.last_seq().await;
    let rendered_with = format!("{base_url} {}", policy.fingerprint());
    let r = Render {
        state,
        objects,
        base_url,
        policy,
        at,
        clock,
        generation: meta.generation + 1,
    };
    meta.generation = r.generation;
    let listed: u64 = meta.parts.iter().map(|p| p.1).sum();
    // Every part is rebuilt when there is no list yet, when its entries were rendered with
    // something else, or when the parts' times were not recorded (the index could not say
    // them).
    let stale = meta.parts.is_empty()
        || meta.rendered_with != rendered_with
        || meta.part_times.len() != meta.parts.len();
    // Counted only for a first list (it is then rebuilt, and sized by it, anyway).
    let mut present = None;
    let interval = match opts.policy {
        ResourceListPolicy::Patch => false,
        ResourceListPolicy::Interval => true,
        ResourceListPolicy::Auto if meta.parts.is_empty() => {
            let n = state.count_present().await?;
            present = Some(n);
            n > AUTO_INTERVAL_ABOVE
        }
        ResourceListPolicy::Auto => listed > AUTO_INTERVAL_ABOVE,
    };
    let mut single = None;
    let mut rewritten = Vec::new();
    let mut recut = stale;
    let mut pending_moved = false;
    if interval && !stale {
        let due = opts.force
            || meta
                .listed_at
                .is_none_or(|t| older_or_equal(&t, &at, opts.every));
        // A patched list becomes the snapshot as it stands: it lists the state at `seq`.
        meta.snapshot_seq.get_or_insert(meta.seq);
        if !due {
            match r.update_pending(&mut meta, last, grace).await? {
                Some(moved) => pending_moved = moved,
                None => recut = true,
            }
        } else {
            recut = true;
        }
    } else if !stale {
        // Patched: the parts holding a resource changed since the list's position (the
        // snapshot's, when the list was on the interval until now).
        let from = meta.snapshot_seq.unwrap_or(meta.seq) + 1;
        if let Some(dirty) = changed_by_part(state, from, meta.parts.len()).await? {
            let n = meta.parts.len();
            let olds: Vec<String> = meta.parts.iter().map(|p| p.0.clone()).collect();
            let mut done = futures::stream::iter(dirty)
                .map(|(k, keys)| {
                    let (r, old) = (&r, &olds[k]);
                    async move { r.patch_part(k, n, old, keys).await.map(|w| (k, w)) }
                })
                .buffer_unordered(PARTS_AT_ONCE);
            while let Some((k, (name, count, xml, times))) = done.try_next().await? {
                if n == 1 {
                    single = Some(xml);
                }
                recut |= count > part_max && n < MAX_PARTS;
                retire(&mut meta, k, name, count, at, grace);
                meta.part_times[k] = times;
                rewritten.push(k);
            }
            drop_pending(&mut meta, clock.now(), grace);
            meta.snapshot_seq = None;
        } else {
            recut = true;
        }
    }
    if recut {
        // Every part (re)built from the state, under the cut its size calls for.
        let count = match present {
            Some(n) => n,
            None => state.count_present().await?,
        };
        let n = parts_for(count, part_max);
        for k in 0..meta.parts.len() {
            retire(&mut meta, k, String::new(), 0, at, grace);
        }
        let pending = std::mem::take(&mut meta.pending);
        meta.parts = vec![(String::new(), 0); n];
        meta.part_times = vec![PartTimes { at, completed: at }; n];
        for (k, (name, count, xml, times)) in r.write_all_parts(n).await? {
            if n == 1 {
                single = Some(xml);
            }
            meta.parts[k] = (name, count);
            meta.part_times[k] = times;
        }
        // Retired now, not at `at`: the metadata naming them is replaced only at the end of
        // this publish, and a rebuild at 10^7 takes longer than their minute of grace.
        meta.pending = pending;
        drop_pending(&mut meta, clock.now(), grace);
        rewritten = (0..n).collect();
        meta.rendered_with = rendered_with;
        // On the interval this is the snapshot: it lists the state at `last`, as of `at`.
        meta.snapshot_seq = interval.then_some(last);
    }
    rewritten.sort_unstable();
    if !rewritten.is_empty() {
        // Every part is stored: the index's making ends here.
        let completed = latest(at, clock.now());
        let times = PartTimes { at, completed };
        write_top(store, base_url, &meta, times, single).await?;
        // The list replaced stays readable for `grace` (its parts are retired, not gone),
        // and so does its `at` as the floor of Change List retention.
        if let Some(old) = meta.listed_at {
            meta.replaced = Some((old, at.instant().0));
        }
        meta.listed_at = Some(at);
    }
    let moved = meta.seq != last;
    meta.seq = last;
    // Retired parts past their grace period go; the others wait for a later publish.
    // `ResourceListMeta` keeps them by name: swept by object path, kept by name again.
    let mut retired: Vec<_> = meta
        .retired
        .drain(..)
        .map(|(name, t)| (retired_path(&name), t))
        .collect();
    let swept = sweep_retired(store, &mut retired, clock.now().instant().0, grace).await?;
    meta.retired = retired
        .into_iter()
        .map(|(path, t)| (retired_name(path), t))
        .collect();
    // Written only when it changed: it names every part (at 10^7 resources, 32,768 parts,
    // 860 KB), and a publish with nothing new put it again each time. A generation no part
    // was written under need not be kept: the next publish takes the same number.
    if !rewritten.is_empty() || moved || swept > 0 || pending_moved {
        put_json(store, RESOURCE_LIST_META, &meta).await?;
    }
    Ok(rewritten)
}

/// The object path of a retired part or pending part named `name`.
fn retired_path(name: &str) -> String {
    match name.starts_with("pending-") {
        true => pending_path(name),
        false => part_path(name),
    }
}

/// The name of the retired object at `path` (the inverse of [`retired_path`]).
fn retired_name(path: String) -> String {
    match path.strip_prefix(RESOURCE_LIST_PENDING_DIR) {
        Some(rest) => rest.trim_start_matches('/').to_owned(),
        None => part_name(path),
    }
}

/// Whether `then` is at least `age` before `now` (a snapshot that old is due).
fn older_or_equal(then: &W3cDateTime, now: &W3cDateTime, age: Duration) -> bool {
    now.unix_nanos() - then.unix_nanos() >= i128::try_from(age.as_nanos()).unwrap_or(i128::MAX)
}

/// Retires every pending part (the list no longer needs them: rebuilt, or patched with
/// their changes) as of `now`, which must be after the work that replaced them: the sweep
/// later in the same publish, before the new metadata is written, must not find their
/// minute already over.
fn drop_pending(meta: &mut ResourceListMeta, now: W3cDateTime, grace: Duration) {
    for (name, _) in std::mem::take(&mut meta.pending) {
        if !name.is_empty() {
            meta.retired.push((name, unnamed_retired_at(now, grace)));
        }
    }
}

/// When an object no published document names (read only through the metadata, by
/// `rsagg serve`) is entered as retired: early enough that the sweep, which waits
/// `grace`, deletes it after [`UNNAMED_PART_GRACE`].
fn unnamed_retired_at(now: W3cDateTime, grace: Duration) -> i64 {
    now.instant().0 - grace.saturating_sub(UNNAMED_PART_GRACE).as_secs() as i64
}

/// How long a replaced part that no published document named stays: the part of a list cut
/// into one part, whose `resourcelist.xml` is the list itself. Only `rsagg serve` reads such
/// a part, through the metadata it re-reads at most once a second, so a minute is plenty;
/// keeping them for the whole `grace` made a stream job publishing a small collection
/// several times a second keep one copy per publish for an hour (16,569 parts in 300 s of
/// `rsagg-bench notify`).
const UNNAMED_PART_GRACE: Duration = Duration::from_secs(60);

/// Puts part `k` as `(name, count)` and retires the object it replaces, if any, for `grace`
/// from `now` (for [`UNNAMED_PART_GRACE`] when no document named it).
fn retire(
    meta: &mut ResourceListMeta,
    k: usize,
    name: String,
    count: u64,
    now: W3cDateTime,
    grace: Duration,
) {
    let unnamed = meta.parts.len() == 1;
    let old = std::mem::replace(&mut meta.parts[k], (name, count));
    if !old.0.is_empty() {
        // The sweep deletes what was retired `grace` ago: an unnamed part is entered as if
        // retired earlier, so that it goes after `UNNAMED_PART_GRACE`.
        let early = if unnamed {
            grace.saturating_sub(UNNAMED_PART_GRACE).as_secs() as i64
        } else {
            0
        };
        meta.retired.push((old.0, now.instant().0 - early));
    }
}

/// The resources changed in the log from `from` on, by the part (of `parts`) holding them,
/// each once; `None` when more than [`PATCH_MAX_CHANGED`] changed (rebuilding is then no
/// dearer than patching, and the keys are not held in memory).
async fn changed_by_part(
    state: &State,
    from: u64,
    parts: usize,
) -> Result<Option<BTreeMap<usize, BTreeSet<(String, String)>>>, Error> {
    let mut dirty: BTreeMap<usize, BTreeSet<(String, String)>> = BTreeMap::new();
    let mut held = 0usize;
    let mut log = state.log(from).await?;
    while let Some(e) = log.next().await? {
        let k = part_of(slot_of(&e.upstream, &e.uri), parts);
        if dirty.entry(k).or_default().insert((e.upstream, e.uri)) {
            held += 1;
            if held > PATCH_MAX_CHANGED {
                return Ok(None);
            }
        }
    }
    Ok(Some(dirty))
}

/// `b` unless it is before `a` (a clock stepping back must not give `completed` before
/// `at`).
fn latest(a: W3cDateTime, b: W3cDateTime) -> W3cDateTime {
    if b.cmp_instant(&a).is_lt() { a } else { b }
}

/// What rendering a part needs.
struct Render<'a> {
    state: &'a State,
    objects: &'a Arc<dyn ObjectStore>,
    base_url: &'a str,
    policy: &'a LinkPolicy,
    /// When this publish began (every part it writes has this `at`).
    at: W3cDateTime,
    /// The state's clock, which says when a part's making ended.
    clock: &'a Clock,
    generation: u64,
}

/// A written part: its object name, its entries, its document and its times.
type Written = (String, u64, bytes::Bytes, PartTimes);

impl Render<'_> {
    /// The part's document up to its first entry: `rs:md` with `times`, `up` to the
    /// Capability List, `index` when there are several parts.
    fn header(&self, parts: usize, times: PartTimes) -> Vec<u8> {
        let mut header = Header::new(Root::Urlset, Capability::ResourceList);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(times.at);
            md.completed = Some(times.completed);
        }
        header.links.push(up_link(self.base_url));
        if parts > 1 {
            header.links.push(Link::new(
                "index",
                format!("{}resourcelist.xml", self.base_url),
            ));
        }
        let mut xml = Vec::new();
        rsagg_sitemap::writer::encode_header(&header, &mut xml);
        xml
    }

    /// Encodes the Resource List entry of `record` into `xml`; false when it has none (a
    /// deleted copy, no URI of rsagg's own).
    async fn encode(
        &self,
        upstream: &str,
        record: &rsagg_store::ResourceRecord,
        xml: &mut Vec<u8>,
    ) -> Result<bool, Error> {
        let targets = crate::entry::held_targets(
            self.state,
            self.base_url,
            upstream,
            &record.upstream_meta.links,
            self.policy,
        )
        .await?;
        let held = |u: &str| targets.get(u).cloned();
        Ok(
            match resource_entry(self.base_url, record, self.policy, held) {
                Some(entry) => {
                    rsagg_sitemap::writer::encode_entry(Root::Urlset, &entry, xml);
                    true
                }
                None => false,
            },
        )
    }

    /// Stores part `k` of `parts` of this generation, its encoded `entries` (`count` of
    /// them) under its header: its making ended once the last entry was written, which its
    /// `completed` says.
    async fn put_part(
        &self,
        k: usize,
        parts: usize,
        entries: Vec<u8>,
        count: u64,
    ) -> Result<Written, Error> {
        let times = PartTimes {
            at: self.at,
            completed: latest(self.at, self.clock.now()),
        };
        let mut xml = self.header(parts, times);
        xml.reserve(entries.len() + end_tag(Root::Urlset).len());
        xml.extend_from_slice(&entries);
        drop(entries);
        xml.extend_from_slice(end_tag(Root::Urlset));
        let name = format!("part-{k:05}-g{}.xml", self.generation);
        let xml = bytes::Bytes::from(xml);
        put(self.objects.as_ref(), &part_path(&name), xml.clone()).await?;
        Ok((name, count, xml, times))
    }

    /// Builds part `k` of `parts` from the state: every present resource of its slots.
    async fn write_part(&self, k: usize, parts: usize) -> Result<Written, Error> {
        let mut xml = Vec::new();
        // Looked up LOOKUPS_AHEAD at a time, in slot order.
        let mut records = std::pin::pin!(
            self.state
                .present_records(slot_range(k, parts), LOOKUPS_AHEAD)
                .await?
        );
        let mut count = 0u64;
        while let Some((upstream, record)) = records.try_next().await? {
            count += u64::from(self.encode(&upstream, &record, &mut xml).await?);
        }
        self.put_part(k, parts, xml, count).await
    }

    /// Builds all `parts` parts from one scan of the state in slot order (each part is a
    /// slot range, so they follow one another in the scan), putting up to
    /// [`PARTS_AT_ONCE`] at once while the scan goes on.
    ///
    /// Why one scan rather than one per part: each scan opens an iterator on every table of
    /// the state (an index lookup and a first block read each), which at 10^6 resources and
    /// thousands of parts made the rebuild's requests grow with parts × tables.
    async fn write_all_parts(&self, parts: usize) -> Result<Vec<(usize, Written)>, Error> {
        let mut records = std::pin::pin!(
            self.state
                .present_records(0..=u16::MAX, LOOKUPS_AHEAD)
                .await?
        );
        let mut written = Vec::with_capacity(parts);
        let mut puts = futures::stream::FuturesUnordered::new();
        let (mut k, mut xml, mut count) = (0usize, Vec::new(), 0u64);
        loop {
            let next = records.try_next().await?;
            // The part the next record belongs to (past the last one at the end): every
            // part before it is complete, empty ones included.
            let upto = match &next {
                Some((upstream, record)) => part_of(slot_of(upstream, &record.uri), parts),
                None => parts,
            };
            while k < upto {
                let done = std::mem::take(&mut xml);
                let n = std::mem::take(&mut count);
                let at = k;
                // A part's document is kept only when it is the only one (it is then
                // `resourcelist.xml` too): held for every part, a 10^6 rebuild held them all.
                let keep = parts == 1;
                puts.push(async move {
                    let (name, n, xml, times) = self.put_part(at, parts, done, n).await?;
                    let xml = if keep { xml } else { bytes::Bytes::new() };
                    Ok::<_, Error>((at, (name, n, xml, times)))
                });
                while puts.len() >= PARTS_AT_ONCE {
                    if let Some(w) = puts.try_next().await? {
                        written.push(w);
                    }
                }
                k += 1;
            }
            let Some((upstream, record)) = next else {
                break;
            };
            count += u64::from(self.encode(&upstream, &record, &mut xml).await?);
        }
        while let Some(w) = puts.try_next().await? {
            written.push(w);
        }
        Ok(written)
    }

    /// Brings the pending parts of `meta` (on the interval) from `meta.seq` to `last`:
    /// each pending part a change falls in is rewritten with that resource's entry as it
    /// is now (a deletion as an entry with `rs:md change="deleted"`). False when the
    /// changes are too many for pending parts, or one cannot be read: `None`, and the
    /// snapshot is rebuilt instead. Else whether a pending part was written.
    async fn update_pending(
        &self,
        meta: &mut ResourceListMeta,
        last: u64,
        grace: Duration,
    ) -> Result<Option<bool>, Error> {
        if meta.seq >= last {
            return Ok(Some(false));
        }
        if meta.pending.is_empty() {
            let m = (meta.parts.len() / PARTS_PER_PENDING).max(1);
            meta.pending = vec![(String::new(), 0); m];
        }
        let m = meta.pending.len();
        let Some(dirty) = changed_by_part(self.state, meta.seq + 1, m).await? else {
            return Ok(None);
        };
        if dirty
            .iter()
            .any(|(k, keys)| meta.pending[*k].1 + keys.len() as u64 > PENDING_PART_MAX)
        {
            return Ok(None);
        }
        let olds: Vec<String> = meta.pending.iter().map(|p| p.0.clone()).collect();
        let mut done = futures::stream::iter(dirty)
            .map(|(k, keys)| {
                let old = &olds[k];
                async move { self.patch_pending(k, old, keys).await.map(|w| (k, w)) }
            })
            .buffer_unordered(PARTS_AT_ONCE);
        let mut readable = true;
        while let Some((k, written)) = done.try_next().await? {
            let Some(written) = written else {
                readable = false;
                continue;
            };
            let old = std::mem::replace(&mut meta.pending[k], written);
            if !old.0.is_empty() {
                meta.retired
                    .push((old.0, unnamed_retired_at(self.clock.now(), grace)));
            }
        }
        Ok(readable.then_some(true))
    }

    /// Pending part `k` as published in object `old` (none yet when empty), with the
    /// entries of `changed` resources as they are now; `None` when the old one cannot be
    /// read or is not in rsagg's form.
    async fn patch_pending(
        &self,
        k: usize,
        old: &str,
        changed: BTreeSet<(String, String)>,
    ) -> Result<Option<(String, u64)>, Error> {
        let old_xml = if old.is_empty() {
            None
        } else {
            let path = object_store::path::Path::from(pending_path(old));
            let got = match self.objects.get(&path).await {
                Ok(r) => r.bytes().await,
                Err(e) => Err(e),
            };
            match got {
                Ok(b) => Some(b),
                Err(object_store::Error::NotFound { .. }) => {
                    tracing::warn!(part = %path, "pending part missing: the Resource List snapshot is rebuilt");
                    return Ok(None);
                }
                Err(source) => {
                    return Err(rsagg_store::Error::ObjectStore {
                        path: path.to_string(),
                        source,
                    }
                    .into());
                }
            }
        };
        let mut fresh: HashMap<String, Option<Vec<u8>>> = HashMap::with_capacity(changed.len());
        let mut lookups = futures::stream::iter(changed)
            .map(|(upstream, uri)| async move {
                let record = self.state.resource(&upstream, &uri).await?;
                Ok::<_, Error>((upstream, uri, record))
            })
            .buffered(LOOKUPS_AHEAD);
        while let Some((upstream, uri, record)) = lookups.try_next().await? {
            let Some(loc) = own_uri(self.base_url, &upstream, &uri) else {
                continue;
            };
            let mut entry = Vec::new();
            let encoded = match &record {
                Some(r) => self.encode(&upstream, r, &mut entry).await?,
                None => false,
            };
            if !encoded {
                let gone = UrlEntry {
                    loc: loc.clone(),
                    md: Some(Md {
                        change: Some(rsagg_model::Change::Deleted),
                        ..Md::default()
                    }),
                    ..UrlEntry::default()
                };
                entry.clear();
                rsagg_sitemap::writer::encode_entry(Root::Urlset, &gone, &mut entry);
            }
            fresh.insert(loc, Some(entry));
        }
        let mut xml = Vec::new();
        let mut count = 0;
        if let Some(old_xml) = &old_xml {
            match patch_entries(old_xml, &mut fresh, &mut xml) {
                Some(n) => count = n,
                None => {
                    tracing::warn!(
                        part = old,
                        "pending part not in rsagg's form: the Resource List snapshot is rebuilt"
                    );
                    return Ok(None);
                }
            }
        }
        for entry in fresh.into_values().flatten() {
            xml.extend_from_slice(&entry);
            count += 1;
        }
        let mut header = Header::new(Root::Urlset, Capability::ResourceList);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(self.at);
        }
        let mut doc = Vec::with_capacity(xml.len() + 512);
        rsagg_sitemap::writer::encode_header(&header, &mut doc);
        doc.extend_from_slice(&xml);
        doc.extend_from_slice(end_tag(Root::Urlset));
        let name = format!("pending-{k:05}-g{}.xml", self.generation);
        put(
            self.objects.as_ref(),
            &pending_path(&name),
            bytes::Bytes::from(doc),
        )
        .await?;
        Ok(Some((name, count)))
    }

    /// Part `k` of `parts` as published in object `old`, with the entries of `changed`
    /// resources replaced by their current ones (dropped when deleted, appended when new).
    /// Rebuilt from the state when the old part cannot be read or is not in the form rsagg
    /// writes.
    async fn patch_part(
        &self,
        k: usize,
        parts: usize,
        old: &str,
        changed: BTreeSet<(String, String)>,
    ) -> Result<Written, Error> {
        let path = object_store::path::Path::from(part_path(old));
        let old_xml = match self.objects.get(&path).await {
            Ok(r) => Some(
                r.bytes()
                    .await
                    .map_err(|source| rsagg_store::Error::ObjectStore {
                        path: path.to_string(),
                        source,
                    })?,
            ),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(source) => {
                return Err(rsagg_store::Error::ObjectStore {
                    path: path.to_string(),
                    source,
                }
                .into());
            }
        };
        let Some(old_xml) = old_xml else {
            tracing::warn!(part = %path, "published part unreadable: rebuilt from the state");
            return self.write_part(k, parts).await;
        };
        // The current entry of every changed resource, by its `<loc>` (rsagg's URI).
        let mut fresh: HashMap<String, Option<Vec<u8>>> = HashMap::with_capacity(changed.len());
        let mut lookups = futures::stream::iter(changed)
            .map(|(upstream, uri)| async move {
                let record = self.state.resource(&upstream, &uri).await?;
                Ok::<_, Error>((upstream, uri, record))
            })
            .buffered(LOOKUPS_AHEAD);
        while let Some((upstream, uri, record)) = lookups.try_next().await? {
            let Some(loc) = own_uri(self.base_url, &upstream, &uri) else {
                continue;
            };
            let mut entry = Vec::new();
            let listed = match &record {
                Some(r) => self.encode(&upstream, r, &mut entry).await?,
                None => false,
            };
            fresh.insert(loc, listed.then_some(entry));
        }
        let mut xml = Vec::with_capacity(old_xml.len());
        let Some(count) = patch_entries(&old_xml, &mut fresh, &mut xml) else {
            tracing::warn!(part = %path, "published part not in rsagg's form: rebuilt from the state");
            return self.write_part(k, parts).await;
        };
        // Created (or listed again): not in the old part.
        let mut count = count;
        for entry in fresh.into_values().flatten() {
            xml.extend_from_slice(&entry);
            count += 1;
        }
        self.put_part(k, parts, xml, count).await
    }
}

/// Copies the entries of the published part `old` into `out`, each unchanged unless its
/// `<loc>` is a key of `fresh`: then it is taken out of `fresh` and replaced by its value
/// (or dropped when that is `None`). Returns the entries written, or `None` when `old` is not
/// a document as rsagg's writer makes them (each entry a `<url>` element with a `<loc>`;
/// markup cannot occur inside text, where `<` is always escaped).
fn patch_entries(
    old: &[u8],
    fresh: &mut HashMap<String, Option<Vec<u8>>>,
    out: &mut Vec<u8>,
) -> Option<u64> {
    use memchr::memmem;
    const OPEN: &[u8] = b"  <url>\n";
    const CLOSE: &[u8] = b"</url>\n";
    let mut count = 0;
    let span = rsagg_sitemap::writer::entries_span(old, Root::Urlset)?;
    let (mut at, tail) = (span.start, span.end);
    if at == tail {
        return Some(0);
    }
    loop {
        let end = at + memmem::find(&old[at..], CLOSE)? + CLOSE.len();
        let entry = &old[at..end];
        let loc_start = memmem::find(entry, b"<loc>")? + 5;
        let loc_len = memmem::find(&entry[loc_start..], b"</loc>")?;
        let loc = std::str::from_utf8(&entry[loc_start..loc_start + loc_len]).ok()?;
        let loc = quick_xml::escape::unescape(loc).ok()?;
        match fresh.remove(loc.as_ref()) {
            Some(Some(replacement)) => {
                out.extend_from_slice(&replacement);
                count += 1;
            }
            Some(None) => {}
            None => {
                out.extend_from_slice(entry);
                count += 1;
            }
        }
        match memmem::find(&old[end..tail], OPEN) {
            Some(next) => at = end + next,
            None => break,
        }
    }
    Some(count)
}

fn slot_range(k: usize, parts: usize) -> std::ops::RangeInclusive<u16> {
    let lo = (k << 16) / parts;
    let hi = ((k + 1) << 16) / parts - 1;
    (lo as u16)..=(hi as u16)
}

/// `resourcelist.xml`: the single part's document (`single`, just written) when there is
/// one part, else the index, with `times` and, in each part's entry, that part's own times.
async fn write_top(
    store: &dyn ObjectStore,
    base_url: &str,
    meta: &ResourceListMeta,
    times: PartTimes,
    single: Option<bytes::Bytes>,
) -> Result<(), Error> {
    let body = if let (1, Some(xml)) = (meta.parts.len(), single) {
        xml
    } else {
        let mut header = Header::new(Root::Sitemapindex, Capability::ResourceList);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(times.at);
            md.completed = Some(times.completed);
        }
        header.links.push(up_link(base_url));
        let entries = meta
            .parts
            .iter()
            .zip(&meta.part_times)
            .map(|((name, _), t)| UrlEntry {
                loc: format!("{base_url}{}", part_path(name)),
                md: Some(Md {
                    at: Some(t.at),
                    completed: Some(t.completed),
                    ..Md::default()
                }),
                ..UrlEntry::default()
            });
        bytes::Bytes::from(document(&header, entries))
    };
    put(store, "resourcelist.xml", body).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::package::testing::{Ticking, change, get, store, strict};
    use rsagg_model::Change;

    /// A document's `at` and `completed`.
    fn times_of(md: Option<&Md>) -> (W3cDateTime, W3cDateTime) {
        let md = md.expect("an rs:md");
        (md.at.expect("at"), md.completed.expect("completed"))
    }

    /// `resourcelist.xml` as an index (strictly valid) and its parts: per part, its name,
    /// the times its index entry gives and the times its own document gives.
    type Parts = Vec<(
        String,
        (W3cDateTime, W3cDateTime),
        (W3cDateTime, W3cDateTime),
    )>;
    async fn index_and_parts(
        objects: &Arc<dyn ObjectStore>,
    ) -> ((W3cDateTime, W3cDateTime), Parts) {
        let (header, entries) = strict(&get(objects, RESOURCE_LIST).await);
        assert_eq!(header.root, Root::Sitemapindex);
        let mut parts = Vec::new();
        for e in &entries {
            let name = e.loc.strip_prefix(BASE).unwrap().to_owned();
            let (part, _) = strict(&get(objects, &name).await);
            assert_eq!(part.root, Root::Urlset);
            assert_eq!(
                part.link("index").unwrap().href,
                format!("{BASE}{RESOURCE_LIST}")
            );
            parts.push((name, times_of(e.md.as_ref()), times_of(part.md.as_ref())));
        }
        (times_of(header.md.as_ref()), parts)
    }

    const BASE: &str = crate::package::testing::BASE;

    /// Spec 10.2: an index's `at` is when the publish that wrote it began (before it read
    /// the change log), its `completed` when its last part was stored; each entry of it
    /// says what the part's own document says; a part a patch left alone keeps its older
    /// times, one it rewrote has the index's `at`. Every write takes a second of the state's
    /// clock, so a publish takes time on it and `completed` is after `at`.
    #[tokio::test]
    async fn a_patched_index_and_its_parts_agree_on_their_times() {
        let (inner, mut state) = store().await;
        let clock = Clock::manual(W3cDateTime::now());
        state.set_clock(clock.clone());
        let objects: Arc<dyn ObjectStore> = Arc::new(Ticking {
            inner: inner.clone(),
            clock: clock.clone(),
            step: Duration::from_secs(1),
        });
        for i in 0..40 {
            change(&inner, &state, &i.to_string(), Change::Created, b"v1").await;
        }
        let policy = LinkPolicy::default();
        let grace = Duration::from_secs(3600);
        let started = clock.now();
        let written = publish_with(&state, &objects, BASE, &policy, 10, grace)
            .await
            .unwrap();
        assert!(written.len() >= 4, "{written:?}");
        let ((at1, done1), parts) = index_and_parts(&objects).await;
        assert_eq!(at1, started, "`at`: when the publish began");
        assert!(
            done1.cmp_instant(&at1).is_gt(),
            "{done1} after {at1}: the parts took time"
        );
        for (name, entry, doc) in &parts {
            assert_eq!(entry, doc, "{name}: the index says what the part says");
            assert_eq!(doc.0, at1, "{name}");
            assert!(doc.1.cmp_instant(&doc.0).is_ge(), "{name}");
            assert!(
                doc.1.cmp_instant(&done1).is_le(),
                "{name} ended before the index"
            );
        }
        // Parts made after others were stored ended later than they began.
        assert!(
            parts
                .iter()
                .any(|(_, _, doc)| doc.1.cmp_instant(&at1).is_gt())
        );

        // An hour later one resource changes: the patch rewrites the one part holding it.
        clock.advance(Duration::from_secs(3600));
        change(&inner, &state, "7", Change::Updated, b"v2").await;
        let started = clock.now();
        let written = publish_with(&state, &objects, BASE, &policy, 10, grace)
            .await
            .unwrap();
        assert_eq!(written.len(), 1, "{written:?}");
        let ((at2, done2), patched) = index_and_parts(&objects).await;
        assert_eq!(at2, started);
        assert!(done2.cmp_instant(&at2).is_gt(), "{done2} after {at2}");
        assert_eq!(patched.len(), parts.len());
        let mut latest = None::<W3cDateTime>;
        for (k, ((name, entry, doc), (old_name, _, old_doc))) in
            patched.iter().zip(&parts).enumerate()
        {
            assert_eq!(entry, doc, "{name}: the index says what the part says");
            assert!(doc.1.cmp_instant(&doc.0).is_ge() && doc.1.cmp_instant(&done2).is_le());
            if k == written[0] {
                assert_ne!(name, old_name);
                assert_eq!(doc.0, at2, "rewritten by this publish: its `at`");
            } else {
                assert_eq!(
                    (name, doc),
                    (old_name, old_doc),
                    "left alone: its older times"
                );
                assert!(doc.0.cmp_instant(&at2).is_lt());
            }
            latest = Some(match latest {
                Some(t) if t.cmp_instant(&doc.0).is_ge() => t,
                _ => doc.0,
            });
        }
        assert_eq!(latest, Some(at2), "the index's `at` is its latest part's");
        state.close().await.unwrap();
    }

    #[test]
    fn slot_ranges_cover_every_slot_once() {
        for parts in [1usize, 2, 4, 8, 64] {
            let mut next = 0u32;
            for k in 0..parts {
                let r = slot_range(k, parts);
                assert_eq!(u32::from(*r.start()), next);
                next = u32::from(*r.end()) + 1;
                assert_eq!(part_of(*r.start(), parts), k);
                assert_eq!(part_of(*r.end(), parts), k);
            }
            assert_eq!(next, 65536);
        }
    }
}

#[cfg(test)]
#[path = "interval_tests.rs"]
mod interval_tests;
