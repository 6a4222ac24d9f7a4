//! rsagg's Change Lists (spec 12), published from its change log into the store.
//!
//! The change log (`State::log`) is the source of truth: one entry per change of one of
//! rsagg's copies, with rsagg's own, strictly increasing datetime. It is republished as:
//!
//! - one **open** Change List (spec 12.1: no `until`, "will be updated with further
//!   changes") holding the log from `open.first_seq` on, under one name while it is open
//!   (`changelist/open-000000000001-g7.xml`: its first sequence number, and the generation
//!   of the publish that started it), rewritten in place by every publish that has something
//!   new: its entries as published, frozen when first listed, with the new ones appended
//!   (append-only: each version is the previous one plus entries);
//! - **closed** Change Lists (spec 12.1: they have `until`, "will not be updated anymore"),
//!   written once under a name never reused (`changelist/closed-000000000001-g7.xml`);
//! - `changelist.xml`: the open list itself while there is no closed one, else a Change List
//!   Index (spec 12.2) naming the retained closed lists and the open one, in forward
//!   chronological order, each with its `from` (and `until` when closed);
//! - `changelist-open.xml`: always the same bytes as the current open list, for clients that
//!   cannot read an index (the design brief's URL map).
//!
//! # Closing, and the `from`/`until` rule
//!
//! The open list is closed when the next change would make it exceed
//! `changelist_max_entries`, or once its `from` is older than `changelist_max_age` and it
//! holds changes (an empty list is never closed: a closed empty list says nothing). Age is
//! measured at the publish, and at each change taken in: a change more than
//! `changelist_max_age` after the list's `from` starts a new list. A publish that brings more
//! changes than fit is thus cut into several closed lists.
//!
//! Spec 12.1 says a Change List "includes all changes that occurred to the set of resources
//! at the Source since" `from` and "until" `until`, without saying whether either bound is
//! inclusive (Appendix A adds only that `from` is mandatory on a Change List and its index and
//! that `until` may be added where `from` is); rsagg's strict validator accepts a change's
//! `datetime` equal to either bound. So that no reading of the bounds is ever wrong, a change
//! lies at or after its list's `from` and strictly *before* its `until`, and a closed list's
//! `until` is the next list's `from` (the design brief, "Time"; spec 12.1: after a closed
//! list, a Destination looks for "the changes that occurred after" its `until`):
//!
//! - cut by size (or by age while streaming): `until` = the datetime of the first change of
//!   the next list, which is that list's `from`;
//! - closed by age with nothing after it: `until` = the last change's datetime + 1 µs.
//!   `State::commit` gives every later change a datetime at least 1 µs after the previous
//!   one (microsecond clock; a clock at or behind the previous datetime gives previous +
//!   1 µs), so every later change still lies at or after the next list's `from`.
//!
//! The first list's `from` is the datetime of the first change in the log (now, while the log
//! is empty: an empty open list is valid, spec 12.1 and Appendix A only require `from`).
//!
//! # Atomic for readers, bounded in cost
//!
//! A publish writes new closed lists first, then the open list, then `changelist.xml` (which
//! names them; an index is rewritten only when the lists it names or their intervals
//! changed), then the alias, and last [`CHANGE_LISTS_META`]. Each PUT replaces an object
//! whole, so a reader sees one version or the next, and since the open list is append-only
//! every version it may see is a valid Change List that says no less than the one it read
//! before. Objects no longer named (an open list once closed, closed lists dropped by
//! retention) are retired and deleted only after `grace`, so a Destination that read the
//! previous index can still fetch them: one retired object per list closed, not one per
//! publish (a stream job publishes several times a second; keeping a copy of the open list
//! per publish for an hour filled the store).
//!
//! The generation is persisted before any object named with it is written, and the last
//! completed one at the end (`completed`), so a publish retried after a crash finds what an
//! interrupted one wrote (objects named with a later generation than the completed one) and
//! retires it; closed lists are never rewritten. An interrupted publish may also have
//! appended to the open list in place past what the metadata says it holds: the retried one
//! then renders the open list from the change log rather than appending to the published
//! bytes, so no change is listed twice.
//!
//! A publish reads the published open list and the log after its last change (or, for an
//! open list of an older rsagg or after an interruption, the log from its first change on),
//! never the whole log, and holds the encoded entries of one list at a time. A publish with
//! nothing new, nothing aged and nothing to drop writes nothing.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use rsagg_model::{Capability, Header, Link, Md, Root, UrlEntry, W3cDateTime};
use rsagg_store::documents::{get_json, put, put_json, sweep_retired};
use rsagg_store::{LogEntry, ResourceRecord, State};

use crate::Error;
use crate::entry::{MAX_DOCUMENT_ENTRIES, change_entry};
use crate::links::LinkPolicy;
use rsagg_config::{ChangeListRetain, PublishConfig};
use rsagg_layout::capability::up_link;
use rsagg_layout::meta::*;
use rsagg_layout::paths::*;
use rsagg_layout::report::*;
use rsagg_sitemap::writer::{document, end_tag, entries_span};

/// The oldest change-log sequence number a retained Change List still lists (the first of
/// the oldest retained closed list, else of the open list); `None` before the first publish,
/// when nothing is listed yet but the whole log will be. A change older than this is no longer
/// announced anywhere (garbage collection lets go of a deleted copy's blob then).
pub fn first_listed_seq(meta: &ChangeListsMeta) -> Option<u64> {
    meta.closed
        .first()
        .map(|c| c.first_seq)
        .or(meta.open.as_ref().map(|o| o.first_seq))
}

/// Publishes the Change Lists of the collection at `base_url` (ends with `/`) from `state`'s
/// change log into `objects` (paths relative to the store root are paths under
/// `base_url`), closing, cutting and retaining lists as `cfg` says.
pub async fn publish(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    policy: &LinkPolicy,
    cfg: &PublishConfig,
) -> Result<ChangeListReport, Error> {
    let store = objects.as_ref();
    let mut meta: ChangeListsMeta = get_json(store, CHANGE_LISTS_META)
        .await?
        .unwrap_or_default();
    // The state's clock: the one its commit times (the changes' datetimes) come from.
    let now = state.clock().now();
    let now_secs = now.instant().0;
    // One document's bound is both the entries of one Change List and the Change Lists one
    // index names: without retention, the oldest closed lists leave the index once it would
    // name more (the open list takes one place).
    let max_entries = cfg.changelist_max_entries.clamp(1, MAX_DOCUMENT_ENTRIES);
    // The Resource List a Destination may still baseline from: no Change List ending after
    // its `at` is dropped (read as the Resource List step left it; one it is writing now
    // has a later `at`, so reading the older one keeps more). Read only when a retention is
    // set: without one nothing is dropped but beyond the index's bound, and the metadata
    // names every part (3.4 MB at 10^7).
    let floor = match cfg.changelist_retain {
        Some(_) => get_json::<ResourceListMeta>(store, RESOURCE_LIST_META)
            .await?
            .unwrap_or_default()
            .oldest_listed_at(now_secs, cfg.grace.as_secs() as i64),
        None => None,
    };
    let retain = Retention::new(cfg, floor, now);
    let (first_seq, from) = match (&meta.open, meta.closed.last()) {
        (Some(o), _) => (o.first_seq, o.from),
        (None, Some(c)) => (c.last_seq + 1, c.until),
        (None, None) => (1, now),
    };
    let open_entries = meta.open.as_ref().map_or(0, |o| o.entries);
    let due = meta.open.is_none()
        || state.last_seq().await > meta.seq
        || (open_entries > 0 && older_than(&from, &now, cfg.changelist_max_age))
        || retain.dropped(&meta.closed) > 0;
    if !due {
        if sweep_retired(store, &mut meta.retired, now_secs, cfg.grace).await? > 0 {
            put_json(store, CHANGE_LISTS_META, &meta).await?;
        }
        return Ok(ChangeListReport {
            open_entries,
            closed_total: meta.closed.len() as u64,
            ..ChangeListReport::default()
        });
    }
    // The generation of the last completed publish (metadata of an older rsagg named its
    // open list after it); a later reserved one means a publish was interrupted.
    let completed = meta
        .completed
        .or_else(|| meta.open.as_ref().and_then(|o| generation_of(&o.name)))
        .unwrap_or(0);
    let interrupted = meta.generation > completed;
    if interrupted {
        retire_interrupted(store, &mut meta, completed, now_secs).await?;
    }
    // Reserved before any object is named with it (see the module documentation).
    meta.generation += 1;
    put_json(store, CHANGE_LISTS_META, &meta).await?;
    let generation = meta.generation;

    let mut report = ChangeListReport::default();
    let mut closed_now = Vec::new();
    // The open list as published, its entries frozen: only the changes after its last one
    // are rendered and appended (its entries are neither looked up nor re-rendered). After
    // an interruption the published bytes may hold more than the metadata says: rendered
    // from the log instead.
    let mut list = match &meta.open {
        Some(o) if !interrupted => frozen(store, o).await?,
        _ => None,
    }
    .unwrap_or_else(|| ListBody::new(first_seq, from));
    let log = state
        .log(list.last.map_or(list.first_seq, |(seq, _)| seq + 1))
        .await?;
    // Each change's current record, looked up LOOKUPS_AHEAD at a time in log order (see
    // `resourcelist::write_part`).
    let entries = futures::stream::try_unfold(log, |mut l| async move {
        Ok::<_, rsagg_store::Error>(l.next().await?.map(|e| (e, l)))
    });
    let mut with_records = std::pin::pin!(
        entries
            .map_ok(|e| async move {
                // Entries logged by an older rsagg need the record (see `change_entry`).
                let current = match e.upstream_meta {
                    Some(_) => None,
                    None => state.resource(&e.upstream, &e.uri).await?,
                };
                let links = crate::entry::change_links(&e, current.as_ref());
                let held =
                    crate::entry::held_targets(state, base_url, &e.upstream, links, policy).await?;
                Ok::<_, rsagg_store::Error>((e, current, held))
            })
            .try_buffered(crate::resourcelist::LOOKUPS_AHEAD)
    );
    while let Some((e, current, held)) = with_records.try_next().await? {
        if list.last.is_none() && list.first_seq == 1 {
            // The very first list starts with the first change (its `from` was "now" while
            // the log was empty).
            list.from = e.at;
        }
        let full = list.entries >= max_entries;
        let aged = list.entries > 0 && older_than(&list.from, &e.at, cfg.changelist_max_age);
        if full || aged {
            let done = std::mem::replace(&mut list, ListBody::new(e.seq, e.at));
            closed_now.push(done.close(store, base_url, e.at, generation).await?);
        }
        if e.at.cmp_instant(&list.from).is_lt() {
            // Cannot happen with `State::commit`'s datetimes; said loudly if it ever does,
            // since strict validation of the list will then fail.
            tracing::error!(seq = e.seq, at = %e.at, from = %list.from, "change before its Change List's from");
        }
        list.push(base_url, &e, current.as_ref(), policy, &held);
    }
    if let Some((last_seq, last_at)) = list.last
        && list.entries > 0
        && older_than(&list.from, &now, cfg.changelist_max_age)
    {
        let until = last_at.plus_nanos(1_000);
        let done = std::mem::replace(&mut list, ListBody::new(last_seq + 1, until));
        closed_now.push(done.close(store, base_url, until, generation).await?);
    }
    report.closed_now = closed_now.len() as u64;
    if let Some(c) = closed_now.last() {
        meta.seq = meta.seq.max(c.last_seq);
    }
    meta.closed.extend(closed_now);
    let excess = retain.dropped(&meta.closed);
    for c in meta.closed.drain(..excess) {
        meta.retired
            .push((format!("{CHANGE_LIST_DIR}/{}", c.name), now_secs));
        report.dropped += 1;
    }

    let indexed = !meta.closed.is_empty();
    // The open list keeps its name while it stays open (the same first change); a new one
    // is named after the generation that starts it.
    let name = match &meta.open {
        Some(o) if o.first_seq == list.first_seq => o.name.clone(),
        _ => format!("open-{:012}-g{generation}.xml", list.first_seq),
    };
    let open = OpenList {
        name: name.clone(),
        first_seq: list.first_seq,
        from: list.from,
        entries: list.entries,
        last: list.last,
    };
    if let Some((seq, _)) = list.last {
        meta.seq = meta.seq.max(seq);
    }
    // The index names the lists with their intervals: unchanged while only the open list's
    // entries grew (after an interruption it may name what was retired: written again).
    let index_changed = interrupted
        || report.closed_now > 0
        || report.dropped > 0
        || meta
            .open
            .as_ref()
            .is_none_or(|o| o.name != open.name || o.from != open.from);
    let open_doc = list.into_document(base_url, None, indexed);
    put(
        store,
        &format!("{CHANGE_LIST_DIR}/{}", open.name),
        open_doc.clone(),
    )
    .await?;
    if !indexed {
        put(store, CHANGE_LIST, open_doc.clone()).await?;
    } else if index_changed {
        let index = index_document(base_url, &meta.closed, &open);
        put(store, CHANGE_LIST, PutPayload::from(index)).await?;
    }
    put(store, CHANGE_LIST_OPEN, open_doc).await?;

    report.open_entries = open.entries;
    report.closed_total = meta.closed.len() as u64;
    // Retired only once it is closed (it then has another name than the open list).
    if let Some(old) = meta.open.replace(open)
        && old.name != name
    {
        meta.retired
            .push((format!("{CHANGE_LIST_DIR}/{}", old.name), now_secs));
    }
    sweep_retired(store, &mut meta.retired, now_secs, cfg.grace).await?;
    meta.completed = Some(generation);
    put_json(store, CHANGE_LISTS_META, &meta).await?;
    Ok(report)
}

/// Retires what publishes interrupted since the last complete one (generation `completed`)
/// wrote: every object named with a later generation, up to the last reserved one (a
/// complete publish's objects carry its generation or an earlier one). Costs a listing of
/// `changelist/`, only after such an interruption.
async fn retire_interrupted(
    store: &dyn ObjectStore,
    meta: &mut ChangeListsMeta,
    completed: u64,
    now_secs: i64,
) -> Result<(), Error> {
    let mut listing = store.list(Some(&object_store::path::Path::from(CHANGE_LIST_DIR)));
    while let Some(m) = listing.next().await {
        let m = m.map_err(|e| rsagg_store::Error::object_store(CHANGE_LIST_DIR, e))?;
        let path = m.location.to_string();
        let orphan = m
            .location
            .filename()
            .and_then(generation_of)
            .is_some_and(|g| g > completed && g <= meta.generation);
        if orphan && !meta.retired.iter().any(|(p, _)| *p == path) {
            tracing::info!(%path, "retiring what an interrupted Change List publish wrote");
            meta.retired.push((path, now_secs));
        }
    }
    Ok(())
}

/// The open list `o` as published, to append to: its entries' bytes as they are, with what
/// the metadata says of them. `None` when it cannot be appended to (metadata of an older
/// rsagg without `last`, the object gone or not in the form rsagg writes): the caller then
/// renders it from the change log.
async fn frozen(store: &dyn ObjectStore, o: &OpenList) -> Result<Option<ListBody>, Error> {
    if o.last.is_none() && o.entries > 0 {
        return Ok(None);
    }
    let path = object_store::path::Path::from(format!("{CHANGE_LIST_DIR}/{}", o.name));
    let doc = match store.get(&path).await {
        Ok(r) => r
            .bytes()
            .await
            .map_err(|e| rsagg_store::Error::object_store(path.as_ref(), e))?,
        Err(object_store::Error::NotFound { .. }) => return Ok(None),
        Err(e) => return Err(rsagg_store::Error::object_store(path.as_ref(), e).into()),
    };
    // Entries as rsagg's writer made them; a list that should have some and has none is
    // not appended to.
    let Some(span) = entries_span(&doc, Root::Urlset).filter(|s| o.entries == 0 || !s.is_empty())
    else {
        return Ok(None);
    };
    Ok(Some(ListBody {
        first_seq: o.first_seq,
        from: o.from,
        last: o.last,
        entries: o.entries,
        xml: doc[span].to_vec(),
    }))
}

/// The generation in an object name `…-g{n}.xml`.
fn generation_of(name: &str) -> Option<u64> {
    name.strip_suffix(".xml")?.rsplit_once("-g")?.1.parse().ok()
}

/// True when more than `age` passed from `from` to `to`.
/// Which closed Change Lists `publish.changelist_retain` lets go: the oldest beyond its
/// count, or those that ended longer than its duration ago, but never one ending after
/// `floor` (the `at` of a Resource List a Destination may still baseline from, spec 10.1,
/// 12), unless the Change List Index would name more than 50,000 documents (spec 4).
struct Retention {
    count: u64,
    age: Option<Duration>,
    floor: Option<W3cDateTime>,
    now: W3cDateTime,
}

impl Retention {
    fn new(cfg: &PublishConfig, floor: Option<W3cDateTime>, now: W3cDateTime) -> Retention {
        let (count, age) = match cfg.changelist_retain {
            Some(ChangeListRetain::Lists(n)) => (n, None),
            Some(ChangeListRetain::Age(d)) => (u64::MAX, Some(d)),
            None => (u64::MAX, None),
        };
        Retention {
            count,
            age,
            floor,
            now,
        }
    }

    /// How many of `closed` (oldest first) go now.
    fn dropped(&self, closed: &[ClosedList]) -> usize {
        // The index names the open list too.
        let hard = closed
            .len()
            .saturating_sub((MAX_DOCUMENT_ENTRIES - 1) as usize);
        let excess = (closed.len() as u64).saturating_sub(self.count) as usize;
        let n = closed
            .iter()
            .enumerate()
            .take_while(|(i, c)| {
                let over =
                    *i < excess || self.age.is_some_and(|a| older_than(&c.until, &self.now, a));
                let listed = self.floor.is_none_or(|f| c.until.cmp_instant(&f).is_le());
                over && listed
            })
            .count();
        if hard > n {
            tracing::warn!(
                kept = closed.len() - hard,
                "Change Lists a Resource List's `at` still needs dropped: the Change List Index names at most 50,000 documents (spec 4)"
            );
        }
        n.max(hard)
    }
}

fn older_than(from: &W3cDateTime, to: &W3cDateTime, age: Duration) -> bool {
    to.unix_nanos() - from.unix_nanos() > i128::try_from(age.as_nanos()).unwrap_or(i128::MAX)
}

/// One Change List being built: entries are encoded as they stream in; the header (which
/// needs `until` and whether an index exists) is put in front when the list is finished.
struct ListBody {
    first_seq: u64,
    from: W3cDateTime,
    /// Sequence number and datetime of the last change taken in.
    last: Option<(u64, W3cDateTime)>,
    entries: u64,
    xml: Vec<u8>,
}

impl ListBody {
    fn new(first_seq: u64, from: W3cDateTime) -> Self {
        ListBody {
            first_seq,
            from,
            last: None,
            entries: 0,
            xml: Vec::new(),
        }
    }

    /// Takes in one change (`current` is the resource's record now).
    fn push(
        &mut self,
        base_url: &str,
        e: &LogEntry,
        current: Option<&ResourceRecord>,
        policy: &LinkPolicy,
        held: &crate::entry::Held,
    ) {
        self.last = Some((e.seq, e.at));
        match change_entry(base_url, e, current, policy, held) {
            Some(entry) => {
                rsagg_sitemap::writer::encode_entry(Root::Urlset, &entry, &mut self.xml);
                self.entries += 1;
            }
            None => {
                tracing::warn!(uri = %e.uri, "change of a URI rsagg has no URI of its own for: not listed")
            }
        }
    }

    /// The whole document: header, the entries, the end tag.
    fn into_document(
        self,
        base_url: &str,
        until: Option<W3cDateTime>,
        indexed: bool,
    ) -> PutPayload {
        let mut header = Header::new(Root::Urlset, Capability::ChangeList);
        if let Some(md) = header.md.as_mut() {
            md.from = Some(self.from);
            md.until = until;
        }
        header.links.push(up_link(base_url));
        if indexed {
            // Spec 12.1: recommended when a Change List Index exists.
            header
                .links
                .push(Link::new("index", format!("{base_url}{CHANGE_LIST}")));
        }
        let mut head = Vec::new();
        rsagg_sitemap::writer::encode_header(&header, &mut head);
        PutPayload::from_iter([
            Bytes::from(head),
            Bytes::from(self.xml),
            Bytes::from_static(end_tag(Root::Urlset)),
        ])
    }

    /// Writes the list as a closed Change List ending at `until` (part of an index).
    async fn close(
        self,
        store: &dyn ObjectStore,
        base_url: &str,
        until: W3cDateTime,
        generation: u64,
    ) -> Result<ClosedList, Error> {
        let name = format!("closed-{:012}-g{generation}.xml", self.first_seq);
        let closed = ClosedList {
            name,
            first_seq: self.first_seq,
            last_seq: self.last.map_or(self.first_seq, |(seq, _)| seq),
            from: self.from,
            until,
            entries: self.entries,
        };
        let doc = self.into_document(base_url, Some(until), true);
        put(store, &format!("{CHANGE_LIST_DIR}/{}", closed.name), doc).await?;
        Ok(closed)
    }
}

/// The Change List Index (spec 12.2): the retained closed lists and the open one, in forward
/// chronological order, each with its interval (`until` only when closed); the index's own
/// `from` is the oldest retained list's, and it has no `until` (it names an open list).
fn index_document(base_url: &str, closed: &[ClosedList], open: &OpenList) -> Vec<u8> {
    let mut header = Header::new(Root::Sitemapindex, Capability::ChangeList);
    if let Some(md) = header.md.as_mut() {
        md.from = Some(closed.first().map_or(open.from, |c| c.from));
    }
    header.links.push(up_link(base_url));
    let lists = closed
        .iter()
        .map(|c| (&c.name, c.from, Some(c.until)))
        .chain([(&open.name, open.from, None)]);
    let entries = lists.map(|(name, from, until)| UrlEntry {
        loc: format!("{base_url}{CHANGE_LIST_DIR}/{name}"),
        md: Some(Md {
            from: Some(from),
            until,
            ..Md::default()
        }),
        ..UrlEntry::default()
    });
    document(&header, entries)
}

/// Test fixtures shared with `rsagg-notify`'s tests (feature `testing`).
#[cfg(any(test, feature = "testing"))]
#[doc(hidden)]
#[allow(missing_docs, dead_code)]
pub mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use object_store::ObjectStoreExt;
    use object_store::path::Path;
    use rsagg_model::Change;
    use rsagg_store::{Applied, BlobInfo, Blobs, Commit, ResourceStatus, UpstreamMeta};

    use super::*;
    use rsagg_layout::testing::strict;

    pub const BASE: &str = "https://agg.example.org/maps/";
    const HOUR: Duration = Duration::from_secs(3600);

    /// A real state and blob area on an in-memory store.
    pub struct Fixture {
        pub state: State,
        pub objects: Arc<dyn ObjectStore>,
        pub blobs: Blobs,
        bodies: AtomicU64,
        /// The directory of a `file://` store, removed with the fixture.
        _dir: Option<tempfile::TempDir>,
    }

    pub fn cfg(
        max_entries: u64,
        max_age: Duration,
        retain: Option<u64>,
        grace: Duration,
    ) -> PublishConfig {
        PublishConfig {
            changelist_max_entries: max_entries,
            changelist_max_age: max_age,
            changelist_retain: retain.map(rsagg_config::ChangeListRetain::Lists),
            grace,
            ..PublishConfig::default()
        }
    }

    pub fn uri(name: &str) -> String {
        format!("http://museum.example.org/{name}")
    }

    /// On an in-memory store.
    pub async fn fixture() -> Fixture {
        fixture_at("memory://", None).await
    }

    /// On a local directory (`LocalFileSystem`, as `file://` store URLs open).
    pub async fn file_fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let url = url::Url::from_directory_path(dir.path()).unwrap();
        fixture_at(url.as_str(), Some(dir)).await
    }

    async fn fixture_at(url: &str, dir: Option<tempfile::TempDir>) -> Fixture {
        let loc = rsagg_store::open_object_store(url).unwrap();
        Fixture {
            state: State::open(loc.objects.clone(), url).await.unwrap(),
            blobs: Blobs::for_location(&loc),
            objects: loc.objects,
            bodies: AtomicU64::new(0),
            _dir: dir,
        }
    }

    impl Fixture {
        /// Makes the state's clock (commit times, and the publishers' now) a manual one,
        /// standing at the present until the test moves it.
        pub fn manual_clock(&mut self) -> rsagg_model::Clock {
            let clock = rsagg_model::Clock::manual(W3cDateTime::now());
            self.state.set_clock(clock.clone());
            clock
        }

        /// Stores a body never stored before.
        pub async fn blob(&self) -> BlobInfo {
            let n = self.bodies.fetch_add(1, Ordering::Relaxed);
            let body = format!("body number {n}");
            let chunks = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(body))]);
            self.blobs.put_stream("test", chunks, false).await.unwrap()
        }

        /// Commits one change per `(name, change)` of upstream `museum` (distinct names): a
        /// creation or update stores a new body, a deletion keeps the last copy as history.
        pub async fn commit(&self, changes: &[(&str, Change)]) -> Vec<LogEntry> {
            let mut applied = Vec::new();
            for (name, change) in changes {
                let uri = uri(name);
                let deleted = *change == Change::Deleted;
                let copy = if deleted {
                    let prior = self.state.resource("museum", &uri).await.unwrap();
                    prior.and_then(|p| p.copy)
                } else {
                    Some(self.blob().await)
                };
                // As real producers write them (a zone-less microsecond lastmod, mixed-case
                // relations): Change Lists, Change Dumps and notifications made from these
                // records are read back strictly by the tests.
                let upstream_meta = UpstreamMeta {
                    lastmod: Some(
                        W3cDateTime::parse("2018-11-06T17:41:16.901455")
                            .unwrap()
                            .value,
                    ),
                    length: copy.as_ref().map(|c| c.length),
                    links: vec![
                        Link::new("describedBy", format!("{uri}.xml")),
                        Link::new("Up", "http://museum.example.org/capabilitylist.xml"),
                    ],
                    ..UpstreamMeta::default()
                };
                let record = ResourceRecord {
                    upstream: "museum".into(),
                    uri,
                    status: if deleted {
                        ResourceStatus::Deleted
                    } else {
                        ResourceStatus::Present
                    },
                    copy,
                    mime_type: Some("text/plain".into()),
                    set: "http://museum.example.org/capabilitylist.xml".into(),
                    lastmod: W3cDateTime::from_unix(0, 0),
                    seq: 0,
                    upstream_meta,
                };
                applied.push(Applied {
                    change: change.clone(),
                    record,
                });
            }
            self.state
                .commit(Commit {
                    upstream: "museum".into(),
                    changes: applied,
                    ..Commit::default()
                })
                .await
                .unwrap()
        }

        /// Creations of `names`, one commit.
        pub async fn create(&self, names: &[&str]) -> Vec<LogEntry> {
            let changes: Vec<_> = names.iter().map(|n| (*n, Change::Created)).collect();
            self.commit(&changes).await
        }

        pub async fn publish(&self, cfg: &PublishConfig) -> ChangeListReport {
            publish(
                &self.state,
                &self.objects,
                BASE,
                &LinkPolicy::default(),
                cfg,
            )
            .await
            .unwrap()
        }

        pub async fn get(&self, path: &str) -> Option<Bytes> {
            match self.objects.get(&Path::from(path)).await {
                Ok(r) => Some(r.bytes().await.unwrap()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(e) => panic!("{path}: {e}"),
            }
        }

        pub async fn meta(&self) -> ChangeListsMeta {
            get_json(self.objects.as_ref(), CHANGE_LISTS_META)
                .await
                .unwrap()
                .unwrap()
        }

        /// Reads every Change List document back with the strict validator and checks what
        /// the lists promise: closed lists chain (`until` = next `from`), every change lies in
        /// `[from, until)` and in forward order, the index names the lists in order with
        /// their intervals, the alias is the open list. Returns every listed change's
        /// datetime and the entries of the open list.
        async fn check(&self) -> (Vec<W3cDateTime>, Vec<UrlEntry>) {
            let meta = self.meta().await;
            let open = meta.open.clone().unwrap();
            let mut all = Vec::new();
            let mut prev_until: Option<W3cDateTime> = None;
            for c in &meta.closed {
                let (h, entries) = strict(
                    &self
                        .get(&format!("{CHANGE_LIST_DIR}/{}", c.name))
                        .await
                        .unwrap(),
                );
                let md = h.md.unwrap();
                assert_eq!((md.from, md.until), (Some(c.from), Some(c.until)));
                assert_eq!(
                    h.links[1].href,
                    format!("{BASE}{CHANGE_LIST}"),
                    "index link"
                );
                if let Some(p) = prev_until {
                    assert!(p.cmp_instant(&c.from).is_eq(), "until {p} == next from");
                }
                prev_until = Some(c.until);
                assert_eq!(entries.len() as u64, c.entries);
                for e in &entries {
                    let dt = e.md.as_ref().unwrap().datetime.unwrap();
                    assert!(!dt.cmp_instant(&c.from).is_lt(), "{dt} >= from {}", c.from);
                    assert!(dt.cmp_instant(&c.until).is_lt(), "{dt} < until {}", c.until);
                    all.push(dt);
                }
            }
            if let Some(p) = prev_until {
                assert!(p.cmp_instant(&open.from).is_eq(), "last until == open from");
            }
            let open_bytes = self
                .get(&format!("{CHANGE_LIST_DIR}/{}", open.name))
                .await
                .unwrap();
            assert_eq!(
                self.get(CHANGE_LIST_OPEN).await.unwrap(),
                open_bytes,
                "alias"
            );
            let (h, open_entries) = strict(&open_bytes);
            let md = h.md.clone().unwrap();
            assert_eq!((md.from, md.until), (Some(open.from), None));
            assert_eq!(
                h.link("index").is_some(),
                !meta.closed.is_empty(),
                "index link only with an index"
            );
            assert_eq!(open_entries.len() as u64, open.entries);
            for e in &open_entries {
                let dt = e.md.as_ref().unwrap().datetime.unwrap();
                assert!(!dt.cmp_instant(&open.from).is_lt());
                all.push(dt);
            }
            let top = self.get(CHANGE_LIST).await.unwrap();
            if meta.closed.is_empty() {
                assert_eq!(top, open_bytes, "no index: changelist.xml is the open list");
            } else {
                let (h, lists) = strict(&top);
                assert_eq!(h.root, Root::Sitemapindex);
                let md = h.md.unwrap();
                assert_eq!((md.from, md.until), (Some(meta.closed[0].from), None));
                let want: Vec<_> = meta
                    .closed
                    .iter()
                    .map(|c| (c.name.clone(), c.from, Some(c.until)))
                    .chain([(open.name.clone(), open.from, None)])
                    .map(|(n, f, u)| (format!("{BASE}{CHANGE_LIST_DIR}/{n}"), Some(f), u))
                    .collect();
                let got: Vec<_> = lists
                    .iter()
                    .map(|e| {
                        let md = e.md.as_ref().unwrap();
                        (e.loc.clone(), md.from, md.until)
                    })
                    .collect();
                assert_eq!(got, want, "forward chronological order");
            }
            assert!(
                all.windows(2).all(|w| w[0].cmp_instant(&w[1]).is_lt()),
                "forward chronological order across lists"
            );
            (all, open_entries)
        }
    }

    fn at(entries: &[LogEntry]) -> Vec<W3cDateTime> {
        entries.iter().map(|e| e.at).collect()
    }

    #[tokio::test]
    async fn first_publish_with_an_empty_log() {
        let f = fixture().await;
        let c = cfg(10, HOUR, None, HOUR);
        let r = f.publish(&c).await;
        assert_eq!(
            (r.open_entries, r.closed_now, r.closed_total, r.dropped),
            (0, 0, 0, 0)
        );
        let (all, _) = f.check().await;
        assert!(all.is_empty());
        let meta = f.meta().await;
        assert_eq!(meta.open.as_ref().unwrap().first_seq, 1);
        // Nothing new: nothing is written, not even a new generation.
        f.publish(&c).await;
        assert_eq!(f.meta().await.generation, meta.generation);
    }

    #[tokio::test]
    async fn the_open_list_grows_across_publishes_and_starts_at_the_first_change() {
        let f = fixture().await;
        let c = cfg(10, HOUR, None, HOUR);
        f.publish(&c).await;
        let first = f.create(&["a", "b"]).await;
        assert_eq!(f.publish(&c).await.open_entries, 2);
        let before = f.meta().await;
        assert_eq!(before.open.as_ref().unwrap().from, first[0].at);
        let second = f.create(&["c"]).await;
        let r = f.publish(&c).await;
        assert_eq!((r.open_entries, r.closed_now), (3, 0));
        let (all, open) = f.check().await;
        assert_eq!(all, [at(&first), at(&second)].concat());
        assert_eq!(
            open[2].loc,
            format!("{BASE}r/museum/http/museum.example.org/c")
        );
        let meta = f.meta().await;
        assert_eq!(meta.seq, 3);
        // Appended to in place: the same object, nothing retired.
        assert_eq!(meta.open.unwrap().name, before.open.unwrap().name);
        assert!(meta.retired.is_empty(), "{:?}", meta.retired);
    }

    #[tokio::test]
    async fn publishing_often_keeps_one_open_object_and_rewrites_the_index_only_when_it_changes() {
        let f = fixture().await;
        let c = cfg(4, HOUR, None, HOUR);
        let mut names = Vec::new();
        for i in 0..10 {
            let n = format!("r{i}");
            f.create(&[n.as_str()]).await;
            f.publish(&c).await;
            names.push(f.meta().await.open.unwrap().name);
        }
        // Lists of 4: the open list was renamed only when it was closed (after r3 and r7)...
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), 3, "{names:?}");
        let meta = f.meta().await;
        assert_eq!(meta.closed.len(), 2);
        // ...and only those two versions are retired (one per list closed).
        assert_eq!(meta.retired.len(), 2, "{:?}", meta.retired);
        let stored = f
            .objects
            .list(Some(&Path::from(CHANGE_LIST_DIR)))
            .try_collect::<Vec<_>>()
            .await
            .unwrap();
        assert_eq!(stored.len(), 2 + 2 + 1, "closed, retired, open: {stored:?}");
        // The index is not rewritten while only the open list grows.
        let index = f.objects.head(&Path::from(CHANGE_LIST)).await.unwrap();
        f.create(&["s"]).await;
        f.publish(&c).await;
        let again = f.objects.head(&Path::from(CHANGE_LIST)).await.unwrap();
        assert_eq!(index.e_tag, again.e_tag);
        let (all, open) = f.check().await;
        assert_eq!((all.len(), open.len()), (11, 3));
    }

    #[tokio::test]
    async fn a_publish_interrupted_after_appending_in_place_lists_nothing_twice() {
        let f = fixture().await;
        let c = cfg(10, HOUR, None, Duration::ZERO);
        f.create(&["a", "b"]).await;
        f.publish(&c).await;
        let before = f.meta().await;
        f.create(&["c"]).await;
        f.publish(&c).await;
        // As if that publish had written the open list (a, b, c in place) and died before
        // its metadata: the metadata says a and b, with a generation reserved after.
        let mut meta = before.clone();
        meta.generation = f.meta().await.generation;
        put_json(f.objects.as_ref(), CHANGE_LISTS_META, &meta)
            .await
            .unwrap();
        f.create(&["d"]).await;
        let r = f.publish(&c).await;
        assert_eq!(r.open_entries, 4);
        let (all, open) = f.check().await;
        assert_eq!((all.len(), open.len()), (4, 4));
        let meta = f.meta().await;
        assert_eq!(meta.completed, Some(meta.generation));
        assert_eq!(meta.open.unwrap().name, before.open.unwrap().name);
    }

    #[tokio::test]
    async fn an_open_list_of_an_older_rsagg_is_appended_to_under_its_name() {
        let f = fixture().await;
        let c = cfg(10, HOUR, None, HOUR);
        f.create(&["a"]).await;
        f.publish(&c).await;
        // Metadata as an older rsagg wrote it: no `completed`, the open list named after
        // the generation of the publish that wrote it.
        let mut meta = f.meta().await;
        let old = meta.open.as_ref().unwrap().name.clone();
        let legacy = format!("open-g{}.xml", meta.generation);
        f.objects
            .copy(
                &Path::from(format!("{CHANGE_LIST_DIR}/{old}")),
                &Path::from(format!("{CHANGE_LIST_DIR}/{legacy}")),
            )
            .await
            .unwrap();
        f.objects
            .delete(&Path::from(format!("{CHANGE_LIST_DIR}/{old}")))
            .await
            .unwrap();
        meta.completed = None;
        meta.open.as_mut().unwrap().name = legacy.clone();
        put_json(f.objects.as_ref(), CHANGE_LISTS_META, &meta)
            .await
            .unwrap();
        f.create(&["b"]).await;
        assert_eq!(f.publish(&c).await.open_entries, 2);
        let meta = f.meta().await;
        assert_eq!(meta.open.as_ref().unwrap().name, legacy);
        assert!(
            meta.retired.is_empty(),
            "no interruption seen: {:?}",
            meta.retired
        );
        let (all, _) = f.check().await;
        assert_eq!(all.len(), 2);
    }

    #[tokio::test]
    async fn the_open_list_is_appended_to_with_its_entries_frozen() {
        let f = fixture().await;
        let c = cfg(10, HOUR, None, HOUR);
        f.commit(&[("a", Change::Created)]).await;
        f.publish(&c).await;
        let first = f.get(CHANGE_LIST_OPEN).await.unwrap();
        let entry_of = |doc: &[u8]| {
            let start = memchr::memmem::find(doc, b"  <url>\n").unwrap();
            let end = memchr::memmem::find(doc, b"</url>\n").unwrap() + 7;
            doc[start..end].to_vec()
        };
        // As first listed, a's creation is the current version: its via link describes
        // the upstream representation.
        let a1 = entry_of(&first);
        assert!(
            String::from_utf8_lossy(&a1).contains("modified="),
            "{}",
            String::from_utf8_lossy(&a1)
        );
        f.commit(&[("a", Change::Updated), ("b", Change::Created)])
            .await;
        assert_eq!(f.publish(&c).await.open_entries, 3);
        let second = f.get(CHANGE_LIST_OPEN).await.unwrap();
        // Appended to: the first entry keeps its bytes although the record moved on.
        assert_eq!(entry_of(&second), a1);
        let meta = f.meta().await;
        assert_eq!(meta.open.as_ref().unwrap().last.map(|l| l.0), Some(3));
        let (all, entries) = f.check().await;
        assert_eq!((all.len(), entries.len()), (3, 3));
        // An open list gone from the store (or metadata of an older rsagg) is rendered from
        // the change log instead.
        let name = format!("{CHANGE_LIST_DIR}/{}", meta.open.unwrap().name);
        f.objects
            .delete(&object_store::path::Path::from(name))
            .await
            .unwrap();
        f.commit(&[("c", Change::Created)]).await;
        assert_eq!(f.publish(&c).await.open_entries, 4);
        let (all, _) = f.check().await;
        assert_eq!(all.len(), 4);
    }

    #[tokio::test]
    async fn a_big_batch_is_cut_into_closed_lists_that_are_never_rewritten() {
        big_batch(fixture().await).await;
    }

    #[tokio::test]
    async fn a_big_batch_on_a_local_directory() {
        big_batch(file_fixture().await).await;
    }

    async fn big_batch(f: Fixture) {
        let c = cfg(3, HOUR, None, HOUR);
        let names: Vec<String> = (0..8).map(|i| format!("r{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let first = f.create(&names).await;
        let r = f.publish(&c).await;
        assert_eq!(
            (r.open_entries, r.closed_now, r.closed_total, r.dropped),
            (2, 2, 2, 0)
        );
        let (all, _) = f.check().await;
        assert_eq!(all, at(&first));
        let meta = f.meta().await;
        // Each closed list ends where the next one's first change is.
        assert_eq!(meta.closed[0].until, first[3].at);
        assert_eq!(meta.closed[1].until, first[6].at);
        assert_eq!(
            meta.closed
                .iter()
                .map(|c| (c.first_seq, c.last_seq))
                .collect::<Vec<_>>(),
            [(1, 3), (4, 6)]
        );
        let mut closed_bytes = Vec::new();
        for c in &meta.closed {
            closed_bytes.push(
                f.get(&format!("{CHANGE_LIST_DIR}/{}", c.name))
                    .await
                    .unwrap(),
            );
        }

        let second = f.create(&["s0", "s1", "s2", "s3", "s4"]).await;
        let r = f.publish(&c).await;
        // 2 open + 5 new: two more closed lists of 3, one change left open.
        assert_eq!((r.open_entries, r.closed_now, r.closed_total), (1, 2, 4));
        let (all, _) = f.check().await;
        assert_eq!(all, [at(&first), at(&second)].concat());
        let meta = f.meta().await;
        for (c, bytes) in meta.closed.iter().zip(&closed_bytes) {
            let now = f
                .get(&format!("{CHANGE_LIST_DIR}/{}", c.name))
                .await
                .unwrap();
            assert_eq!(&now, bytes, "{} was rewritten", c.name);
        }
        assert_eq!(meta.closed[2].first_seq, 7);
        assert_eq!(meta.open.unwrap().first_seq, 13);
    }

    #[tokio::test]
    async fn lists_are_closed_by_age_only_with_changes() {
        let mut f = fixture().await;
        let clock = f.manual_clock();
        let first = f.create(&["a", "b"]).await;
        f.publish(&cfg(10, HOUR, None, HOUR)).await;
        // Not yet older than 10 ms: nothing closes.
        let young = cfg(10, Duration::from_millis(10), None, HOUR);
        let r = f.publish(&young).await;
        assert_eq!((r.open_entries, r.closed_now, r.closed_total), (2, 0, 0));
        clock.advance(Duration::from_millis(30));
        let r = f.publish(&young).await;
        assert_eq!((r.open_entries, r.closed_now, r.closed_total), (0, 1, 1));
        let meta = f.meta().await;
        let until = meta.closed[0].until;
        assert_eq!(until, first[1].at.plus_nanos(1_000), "last change + 1 µs");
        assert_eq!(meta.open.as_ref().unwrap().from, until);
        f.check().await;
        // An empty open list is not closed, however old.
        clock.advance(Duration::from_millis(30));
        let r = f.publish(&young).await;
        assert_eq!((r.closed_now, r.closed_total), (0, 1));
        assert_eq!(f.meta().await.generation, meta.generation);
        // Later changes lie after the closed list's until.
        let later = f.create(&["c"]).await;
        assert!(later[0].at.cmp_instant(&until).is_ge());
        assert_eq!(f.publish(&cfg(10, HOUR, None, HOUR)).await.open_entries, 1);
        let (all, _) = f.check().await;
        assert_eq!(all, [at(&first), at(&later)].concat());
    }

    #[tokio::test]
    async fn changes_far_apart_are_cut_by_age_at_the_later_change() {
        let mut f = fixture().await;
        let clock = f.manual_clock();
        let a = f.create(&["a"]).await;
        clock.advance(Duration::from_millis(300));
        let b = f.create(&["b"]).await;
        let max_age = cfg(10, Duration::from_millis(200), None, HOUR);
        let r = f.publish(&max_age).await;
        let meta = f.meta().await;
        assert_eq!(
            (meta.closed[0].from, meta.closed[0].until),
            (a[0].at, b[0].at)
        );
        // `b` is younger than 200 ms when published: it stays open.
        assert_eq!((r.closed_now, r.open_entries), (1, 1), "{r:?}");
        // Once it is older, the next publish closes it by age.
        clock.advance(Duration::from_millis(250));
        let r = f.publish(&max_age).await;
        assert_eq!((r.closed_now, r.open_entries), (1, 0), "{r:?}");
        let (all, _) = f.check().await;
        assert_eq!(all, [at(&a), at(&b)].concat());
    }

    #[tokio::test]
    async fn retention_drops_the_oldest_and_deletes_them_after_the_grace() {
        let f = fixture().await;
        let keep_two = cfg(1, HOUR, Some(2), HOUR);
        let first = f.create(&["a", "b", "c"]).await;
        let r = f.publish(&keep_two).await;
        assert_eq!((r.closed_total, r.dropped), (2, 0));
        let oldest = f.meta().await.closed[0].clone();
        let (h, _) = strict(&f.get(CHANGE_LIST).await.unwrap());
        assert_eq!(h.md.unwrap().from, Some(first[0].at));

        f.create(&["d"]).await;
        let r = f.publish(&keep_two).await;
        assert_eq!(
            (r.open_entries, r.closed_now, r.closed_total, r.dropped),
            (1, 1, 2, 1)
        );
        let meta = f.meta().await;
        assert_eq!(meta.closed[0].first_seq, 2, "the oldest left the index");
        let (h, _) = strict(&f.get(CHANGE_LIST).await.unwrap());
        assert_eq!(
            h.md.unwrap().from,
            Some(first[1].at),
            "the index's from moved"
        );
        f.check().await;
        let path = format!("{CHANGE_LIST_DIR}/{}", oldest.name);
        assert!(f.get(&path).await.is_some(), "kept during the grace period");

        // With the grace over (zero here), the next publish deletes it, even one with
        // nothing else to do.
        let r = f.publish(&cfg(1, HOUR, Some(2), Duration::ZERO)).await;
        assert_eq!((r.closed_now, r.dropped, r.closed_total), (0, 0, 2));
        assert!(f.get(&path).await.is_none());
        let meta = f.meta().await;
        assert!(meta.retired.is_empty(), "{:?}", meta.retired);
        f.check().await;
    }

    #[tokio::test]
    async fn what_an_interrupted_publish_wrote_is_retired() {
        let f = fixture().await;
        let c = cfg(1, HOUR, None, Duration::ZERO);
        f.create(&["a"]).await;
        f.publish(&c).await;
        // A publish reserved generation g, wrote a closed list and died before its meta.
        let mut meta = f.meta().await;
        meta.generation += 1;
        let stray = format!(
            "{CHANGE_LIST_DIR}/closed-000000000002-g{}.xml",
            meta.generation
        );
        put_json(f.objects.as_ref(), CHANGE_LISTS_META, &meta)
            .await
            .unwrap();
        put(f.objects.as_ref(), &stray, Bytes::from_static(b"<urlset/>"))
            .await
            .unwrap();
        let named = format!("{CHANGE_LIST_DIR}/{}", meta.open.as_ref().unwrap().name);
        f.create(&["b", "c"]).await;
        let r = f.publish(&c).await;
        assert_eq!((r.closed_now, r.closed_total, r.open_entries), (2, 2, 1));
        assert!(
            f.get(&stray).await.is_none(),
            "retired, and gone after a zero grace"
        );
        assert!(f.get(&named).await.is_none(), "the replaced open list too");
        let meta = f.meta().await;
        assert!(meta.retired.is_empty(), "{:?}", meta.retired);
        assert!(meta.closed.iter().all(|c| !stray.ends_with(&c.name)));
        f.check().await;
    }

    #[test]
    fn generations_are_read_from_object_names() {
        assert_eq!(generation_of("open-g7.xml"), Some(7));
        assert_eq!(generation_of("open-000000000001-g3.xml"), Some(3));
        assert_eq!(generation_of("closed-000000000001-g12.xml"), Some(12));
        assert_eq!(generation_of("closed-000000000001.xml"), None);
    }

    #[tokio::test]
    async fn deletions_and_provenance_of_past_versions() {
        let f = fixture().await;
        let v1 = f.commit(&[("a", Change::Created)]).await;
        let v2 = f
            .commit(&[("a", Change::Updated), ("b", Change::Created)])
            .await;
        let gone = f.commit(&[("b", Change::Deleted)]).await;
        f.publish(&cfg(10, HOUR, None, HOUR)).await;
        let (_, entries) = f.check().await;
        assert_eq!(entries.len(), 4);
        let md = |i: usize| entries[i].md.clone().unwrap();
        let changes: Vec<_> = (0..4).map(|i| md(i).change.unwrap()).collect();
        assert_eq!(
            changes,
            [
                Change::Created,
                Change::Updated,
                Change::Created,
                Change::Deleted
            ]
        );
        // Each creation or update describes the copy it made, not the current one.
        for (i, e) in [(0, &v1[0]), (1, &v2[0]), (2, &v2[1])] {
            let copy = e.copy.as_ref().unwrap();
            assert_eq!(
                md(i).hash.unwrap().to_string(),
                format!("md5:{} sha-256:{}", copy.md5, copy.sha256)
            );
            assert_eq!(md(i).length, Some(copy.length));
            assert_eq!(md(i).mime_type.as_deref(), Some("text/plain"));
            assert_eq!(
                (md(i).datetime, entries[i].lastmod),
                (Some(e.at), Some(e.at))
            );
        }
        // a@v1 and b@created are past versions: the via link still describes the upstream
        // representation of each one's own version, as the log kept it (not the latest).
        for (i, e) in [(0, &v1[0]), (2, &v2[1])] {
            assert_eq!(entries[i].links.len(), 2);
            let via = &entries[i].links[0];
            assert_eq!(via.rel, "via");
            assert_eq!(via.length, e.copy.as_ref().map(|c| c.length));
            assert!(via.modified.is_some());
        }
        assert_eq!(entries[0].links[0].href, uri("a"));
        // a@v2 is the current version: via describes the upstream, inherited links follow
        // (describedby kept: rsagg holds no copy of a.xml, so its own URI would answer 404;
        // up dropped).
        let links = &entries[1].links;
        assert_eq!(links.len(), 2, "{links:?}");
        assert_eq!(links[0].rel, "via");
        // The upstream's zone-less lastmod, written in UTC with its microseconds.
        assert_eq!(
            links[0].modified.map(|m| m.to_string()).as_deref(),
            Some("2018-11-06T17:41:16.901455Z")
        );
        assert_eq!(
            (links[1].rel.as_str(), links[1].href.as_str()),
            ("describedby", "http://museum.example.org/a.xml")
        );
        // The deletion: no bytes to describe.
        let d = md(3);
        assert_eq!((d.hash, d.length, d.mime_type), (None, None, None));
        assert_eq!(d.datetime, Some(gone[0].at));
        assert_eq!(entries[3].lastmod, None);
        assert_eq!(entries[3].links[0].href, uri("b"));
    }
}
