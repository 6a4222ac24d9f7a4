//! What rsagg keeps beside its documents (JSON objects under `published/` and `notify/`), so
//! the next publish knows what is out there without reading the documents back, stages that
//! build on one another (Change Dumps on closed Change Lists) share one description, and
//! `rsagg serve` finds a resource's part without reading the others. Where each lives:
//! [`crate::paths`].

use rsagg_model::W3cDateTime;
use serde::{Deserialize, Serialize};

use crate::report::GcReport;

/// A closed Change List: immutable once written (spec 12.1: it has `until`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClosedList {
    /// Object name under `changelist/` (also its path under `collection.base_url`).
    pub name: String,
    /// First change-log sequence number it lists.
    pub first_seq: u64,
    /// Last change-log sequence number it lists.
    pub last_seq: u64,
    /// Its `rs:md from`.
    pub from: W3cDateTime,
    /// Its `rs:md until` (the next list's `from`).
    pub until: W3cDateTime,
    /// Number of entries.
    pub entries: u64,
}

/// The open Change List (spec 12.1: no `until`), rewritten in place by every publish that
/// appends to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenList {
    /// Object name under `changelist/`, kept while the list is open
    /// (`open-{first_seq:012}-g{generation that started it}.xml`; metadata of an older rsagg
    /// names one version per publish, `open-g{generation}.xml`).
    pub name: String,
    /// First change-log sequence number it lists (the last closed list's `last_seq` + 1).
    pub first_seq: u64,
    /// Its `rs:md from` (the last closed list's `until`).
    pub from: W3cDateTime,
    /// Number of entries.
    pub entries: u64,
    /// Sequence number and datetime of the last change it took in: the next publish appends
    /// what follows to its entries as published (they are frozen when first listed). `None`
    /// while it took in none, and in metadata written before the open list was appended to
    /// (the next publish then renders it from the change log once).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<(u64, W3cDateTime)>,
}

/// Content of [`crate::paths::CHANGE_LISTS_META`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangeListsMeta {
    /// Change-log sequence number the documents reflect.
    pub seq: u64,
    /// Generation counter for object names.
    pub generation: u64,
    /// The generation of the last publish that completed (wrote this metadata at its end);
    /// `generation` is ahead of it while a publish runs, and after one was interrupted.
    /// `None` in metadata of an older rsagg, where the open list's name carries it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
    /// Retained closed lists, oldest first (forward chronological order).
    pub closed: Vec<ClosedList>,
    /// The open list, once there is one.
    pub open: Option<OpenList>,
    /// Objects no longer named by any document, with when they were retired (unix seconds);
    /// deleted once the grace period has passed.
    pub retired: Vec<(String, i64)>,
}

/// Content of [`crate::paths::CHANNEL`]: where the channel is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChannelRecord {
    /// Number of the next payload (payloads are numbered from 1).
    pub next: u64,
    /// The last change-log sequence number the channel has announced (or passed over: a
    /// change without a URI of rsagg's own is not listed, as in the Change Lists).
    pub seq: u64,
    /// `from` of the next payload: the last payload's `until` (`None` before the first).
    pub until: Option<W3cDateTime>,
}

impl Default for ChannelRecord {
    fn default() -> Self {
        ChannelRecord {
            next: 1,
            seq: 0,
            until: None,
        }
    }
}

/// Content of [`crate::paths::FETCHED`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fetched {
    /// `until` of the payload the topic route served.
    pub until: W3cDateTime,
}

/// What [`crate::paths::GC_META`] holds: the report of the last collection (its fields at the top level,
/// as the object held before `first_due` existed), or, before the first collection, when
/// that is due.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcMeta {
    /// The last collection's report; `None` until the first collection.
    #[serde(flatten)]
    pub last: Option<GcReport>,
    /// When the first collection is due (set by the first publish); `None` once one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_due: Option<W3cDateTime>,
}

/// `published/changedump.json`: the packages out there and what is waiting for deletion.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangeDumpMeta {
    /// Closed Change Lists with packages, oldest first.
    pub lists: Vec<DumpedList>,
    /// True while `changedump.xml` may not yet reflect this meta (it is written after it).
    pub doc_pending: bool,
    /// Objects no document names any more, with when they were retired (unix seconds).
    pub retired: Vec<(String, i64)>,
    /// Closed Change Lists whose changes all have a sequence number up to this one get no
    /// package: when Change Dumps began, a Resource Dump built in the same publish already
    /// held them (a collection's baseline; see `publish.change_dump_baseline`). 0: none.
    pub left_to_resource_dump: u64,
    /// The parts of the Change Dump Index, in order, once the packages outgrow one document
    /// (spec 13.1: `changedump.xml` is then a `<sitemapindex>` naming Change Dumps of
    /// consecutive packages); empty while `changedump.xml` is the Change Dump itself.
    pub parts: Vec<ChangeDumpPart>,
    /// Generation counter for the parts' names: a part whose packages change is written
    /// under a new name, so a reader of the previous index can still fetch the one it names.
    pub generation: u64,
}

/// One part of the Change Dump Index: a Change Dump (spec 13.1) of consecutive packages,
/// immutable once written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeDumpPart {
    /// Object path (also its path under `collection.base_url`).
    pub name: String,
    /// [`PackageInfo::zip`] of its first package.
    pub first: String,
    /// [`PackageInfo::zip`] of its last package.
    pub last: String,
    /// How many packages it names.
    pub packages: u64,
    /// Written without `until`: the last part, which the next package would join.
    pub open: bool,
}

/// The packages of one closed Change List.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpedList {
    /// The Change List's object name (see [`ClosedList::name`]).
    pub name: String,
    /// First change-log sequence number it covers.
    pub first_seq: u64,
    /// Last change-log sequence number it covers.
    pub last_seq: u64,
    /// Its packages, consecutive sub-intervals of the list's interval.
    pub packages: Vec<ChangePackage>,
}

/// One package of the Change Dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangePackage {
    /// The objects and what they hold.
    #[serde(flatten)]
    pub info: PackageInfo,
    /// `rs:md from` of the package (and its manifest).
    pub from: W3cDateTime,
    /// `rs:md until`.
    pub until: W3cDateTime,
}

/// `published/resourcedump.json`: the dump out there and what is waiting for deletion.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ResourceDumpMeta {
    /// The last generation number given out (a generation that failed half-way keeps its
    /// number, so no two builds ever write to the same objects).
    pub generation: u64,
    /// Every generation up to this one is either `current` or retired (or deleted).
    pub clean_upto: u64,
    /// The generation `resourcedump.xml` names.
    pub current: Option<u64>,
    /// When that generation's snapshot started (`rs:md at`).
    pub at: Option<W3cDateTime>,
    /// When it completed (`rs:md completed`).
    pub completed: Option<W3cDateTime>,
    /// Its packages, in order. When there are more than one document may name,
    /// `resourcedump.xml` is a Resource Dump Index (spec 11.1) whose parts, under the
    /// generation's folder, name consecutive runs of them.
    pub packages: Vec<DumpPackage>,
    /// True while `resourcedump.xml` may not yet reflect this meta (it is written after it).
    pub doc_pending: bool,
    /// Objects or prefixes (ending in `/`) no document names any more, with when they were
    /// retired (unix seconds).
    pub retired: Vec<(String, i64)>,
}

/// One package of the Resource Dump.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DumpPackage {
    /// The objects and what they hold.
    #[serde(flatten)]
    pub info: PackageInfo,
    /// When collecting its resources started (`rs:md at` of the package and its manifest).
    pub at: W3cDateTime,
    /// When its last bitstream had been read (`rs:md completed`).
    pub completed: W3cDateTime,
    /// The hash slots of its first and last resource (packages are cut in slot order): where
    /// the next rebuild finds the bitstreams it can copy from this package instead of reading
    /// each blob (`rsagg-publish`'s `previous.rs`). Absent in packages written before it was
    /// recorded, which are then not copied from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<[u16; 2]>,
}

/// What was last published, kept beside the documents.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ResourceListMeta {
    /// Change-log sequence number the documents reflect.
    pub seq: u64,
    /// Generation of the last publish.
    pub generation: u64,
    /// Per part: object name (under `resourcelist/`) and entries; empty before the first
    /// publish.
    pub parts: Vec<(String, u64)>,
    /// Per part (as `parts`): the `at` and `completed` its document carries, which the index
    /// repeats in its entry for it (spec 10.2). Empty in metadata written before they were
    /// recorded: every part is then rebuilt once.
    #[serde(default)]
    pub part_times: Vec<PartTimes>,
    /// Parts no longer named (by name, as in `parts`), with when they were retired (unix
    /// seconds).
    pub retired: Vec<(String, i64)>,
    /// What the published entries were rendered with (base URL and link policy): when it
    /// differs from the pipeline's now, every part is rebuilt from the state rather than
    /// patched. Empty in metadata written before parts were patched.
    #[serde(default)]
    pub rendered_with: String,
    /// Under `publish.resourcelist = "interval"`: the change-log sequence number the
    /// published snapshot lists the state at (its `rs:md at`, [`Self::listed_at`], is the
    /// instant of that position); `seq` then says how far [`Self::pending`] goes. `None`
    /// while the list is patched every run (it then reflects `seq`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_seq: Option<u64>,
    /// Under the interval: the entries of the resources changed since the snapshot, as
    /// they are at `seq` (a deleted one as an entry with `rs:md change="deleted"`), cut
    /// into `pending.len()` slot ranges as [`Self::parts`] are: per range, its object name
    /// under `resourcelist/` (empty when nothing in it changed) and its entries. Not a
    /// published document: `rsagg serve` reads it before the snapshot's part, so a copy
    /// a Change List names is served as the Change List describes it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<(String, u64)>,
    /// `rs:md at` of the published `resourcelist.xml` (the list or its index); `None` in
    /// metadata written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub listed_at: Option<W3cDateTime>,
    /// The `rs:md at` of the list the last rebuild replaced, with when it was replaced
    /// (unix seconds): its parts stay `publish.grace` after that, and so does that `at` as
    /// the floor of Change List retention (a Destination that baselined from it must still
    /// find every change after it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaced: Option<(W3cDateTime, i64)>,
}

impl ResourceListMeta {
    /// The oldest `rs:md at` of a Resource List a Destination may still be baselining
    /// from: the published list's, or the one replaced less than `grace` ago (its parts
    /// are still there). Change Lists ending after it are kept whatever their retention
    /// says (spec 10.1, 12: a snapshot plus the Change Lists since its `at`).
    pub fn oldest_listed_at(&self, now_secs: i64, grace_secs: i64) -> Option<W3cDateTime> {
        let replaced = self
            .replaced
            .filter(|(_, when)| now_secs.saturating_sub(*when) < grace_secs)
            .map(|(at, _)| at);
        match (self.listed_at, replaced) {
            (Some(a), Some(b)) => Some(if b.cmp_instant(&a).is_lt() { b } else { a }),
            (a, b) => a.or(b),
        }
    }
}

/// When a document's making began and ended: its `rs:md at` and `completed` (spec 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartTimes {
    /// `rs:md at`.
    pub at: W3cDateTime,
    /// `rs:md completed`.
    pub completed: W3cDateTime,
}

/// One package as published, kept in the dumps' meta objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageInfo {
    /// Object path of the ZIP, relative to the store root (also its path under
    /// `collection.base_url`).
    pub zip: String,
    /// Object path of the copy of its `manifest.xml` (the `rs:ln rel="contents"` target).
    pub manifest: String,
    /// Bytes of the ZIP (`rs:md length`).
    pub length: u64,
    /// MD5 of the ZIP, lowercase hex.
    pub md5: String,
    /// SHA-256 of the ZIP, lowercase hex.
    pub sha256: String,
    /// Manifest entries (bitstreams, and deletions in a Change Dump).
    pub entries: u64,
    /// Bytes of the bitstreams in it.
    pub bytes: u64,
    /// Items left out: blob missing or not matching its address, or no usable name.
    pub skipped: u64,
}

/// The `until` of a change-notification payload, read from its root `rs:md` only (the
/// entries are not parsed); `None` when `xml` is not such a payload. The topic route records
/// it in [`crate::paths::FETCHED`] when it served the payload, for a publisher in the websub
/// form waiting for its hub to fetch the topic.
pub fn payload_until(xml: &[u8]) -> Option<W3cDateTime> {
    let opts = rsagg_sitemap::ReadOptions::new(rsagg_model::Mode::Lenient, "change notification");
    let reader = rsagg_sitemap::SyncReader::open(xml, opts).ok()?;
    let md = reader.header().md.as_ref()?;
    if md.capability != Some(rsagg_model::Capability::ChangeNotification) {
        return None;
    }
    md.until
}
