//! The records of a collection's state, serialised as JSON values in the state database.
//! JSON keeps them inspectable with ordinary tools and tolerant of added fields.

use rsagg_model::{Change, Hashes, Link, W3cDateTime};
use serde::{Deserialize, Serialize};

use crate::BlobInfo;

/// Whether rsagg's copy of a resource is current or was deleted upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceStatus {
    /// The copy is current.
    Present,
    /// The upstream deleted the resource; the record (and the last copy) is kept as history.
    Deleted,
}

/// What the upstream said about a resource, republished in the `via` link (spec 14.8) and
/// used to skip unchanged resources on the next run.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamMeta {
    /// The upstream entry's `lastmod`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lastmod: Option<W3cDateTime>,
    /// The upstream entry's `rs:md hash`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hash: Option<Hashes>,
    /// The upstream entry's `rs:md length`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// The upstream entry's `rs:md type`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The upstream entry's `rs:md encoding` (spec 7: the content coding applied to the
    /// bytes its `hash` and `length` describe, the `Content-Encoding` its URI serves them
    /// with). A copy of such an entry holds the bytes as served, still encoded (the harvest
    /// verified them so), so this is also the coding of rsagg's copy: its own entry's
    /// `encoding`, and the `Content-Encoding` `serve` sends it with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub encoding: Option<String>,
    /// The upstream entry's `rs:ln` links, as given (an existing `via` included).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<Link>,
    /// `ETag` of the last successful fetch (for conditional GET).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    /// `Last-Modified` of the last successful fetch (for conditional GET).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_last_modified: Option<String>,
}

/// One upstream resource as rsagg holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceRecord {
    /// Upstream name (from the pipeline).
    pub upstream: String,
    /// The resource's URI at the upstream.
    pub uri: String,
    /// Current or deleted.
    pub status: ResourceStatus,
    /// The last stored copy (kept after a deletion, as history).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<BlobInfo>,
    /// Media type of the copy (the response's `Content-Type`, else the upstream's `type`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// The upstream's set of resources (Capability List URL) the resource was listed in.
    #[serde(default)]
    pub set: String,
    /// When rsagg's copy last changed (created, updated or deleted): rsagg's own `lastmod`.
    pub lastmod: W3cDateTime,
    /// Change-log sequence number of that change.
    pub seq: u64,
    /// What the upstream said.
    #[serde(default)]
    pub upstream_meta: UpstreamMeta,
}

/// One entry of the collection's change log: what rsagg's Change Lists republish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Position in the log (1, 2, …; gap-free).
    pub seq: u64,
    /// rsagg's own datetime of the change, strictly increasing along the log.
    pub at: W3cDateTime,
    /// Upstream name.
    pub upstream: String,
    /// Upstream URI of the resource.
    pub uri: String,
    /// created, updated or deleted.
    pub change: Change,
    /// The copy after the change (the last copy for a deletion).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<BlobInfo>,
    /// Media type of that copy, so a Change List entry can say `type` even after the
    /// record moved on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mime_type: Option<String>,
    /// What the upstream said of the version this change made (the record's upstream
    /// metadata at the change), so the change's entry (Change Lists, Change Dumps,
    /// notifications) is rendered from the log alone, without a lookup of the record per
    /// change, and describes its own version's provenance after the record moved on.
    /// `None` in entries logged by an older rsagg (their record is looked up instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream_meta: Option<UpstreamMeta>,
}

/// Identifies one upstream change among those at the same instant, so replays and overlaps
/// (poll and push, rolling windows) are recognised.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SeenKey {
    /// Resource URI.
    pub uri: String,
    /// The change (`created`, `updated`, `deleted`).
    pub change: Change,
    /// The change's hash, else its lastmod, else empty.
    pub tag: String,
}

/// How far an upstream was processed (spec 12.1, Destination side).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Checkpoint {
    /// The last upstream instant processed: changes before it are done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instant: Option<W3cDateTime>,
    /// The changes processed at exactly `instant`; others at that instant are still to do.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub seen: Vec<SeenKey>,
    /// The Change List being followed (where the next poll starts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changelist: Option<String>,
    /// When the upstream was last synchronised completely from its Resource List or dump
    /// (its `at`), if ever.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub baseline_at: Option<W3cDateTime>,
    /// How many times the upstream had to be re-synced from its Resource List because its
    /// Change List no longer reached back to the checkpoint.
    pub resyncs: u64,
    /// An OAI-PMH set: the pass in progress (its date windows and where the window being
    /// listed stands), committed with the records of every page; or the last pass made,
    /// kept for `rsagg oai windows`. `instant` moves to its `until` only when every window
    /// is done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oai: Option<OaiPass>,
    /// An OAI-PMH set whose provider answered `Retry-After` beyond `[fetch]
    /// retry_after_max`: nothing is asked of the provider before this time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parked_until: Option<W3cDateTime>,
}

/// One OAI-PMH pass over a set, cut into date windows (`from`/`until` of a selective
/// harvest, OAI-PMH 2.0 section 3.4), each done on its own and resumed at its page.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OaiPass {
    /// The provider's clock when the pass began (or was last extended): the last window's
    /// `until`, and the checkpoint's `instant` once every window is done.
    pub until: Option<W3cDateTime>,
    /// The pass lists the whole set (the first harvest, `run --baseline`, a re-list): what
    /// it does not name is deleted, which only a listing made in one process can tell.
    pub full: bool,
    /// Another process went on with this pass after the one that began it stopped.
    pub resumed: bool,
    /// The windows, oldest first; together they cover the pass.
    pub windows: Vec<OaiWindow>,
    /// True once every window is done and the checkpoint moved to `until`.
    pub complete: bool,
}

/// One date window of an [`OaiPass`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct OaiWindow {
    /// `from` (inclusive; none for the first window of a whole list, which takes in
    /// everything older, whatever `earliestDatestamp` claims).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<W3cDateTime>,
    /// `until` (inclusive).
    pub until: Option<W3cDateTime>,
    /// Where it stands.
    pub status: WindowStatus,
    /// The `resumptionToken` of the next page, while the window is being listed: every
    /// record of the pages before it is committed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Pages read in the window's current listing.
    pub pages: u64,
    /// Records (and deletions) of those pages.
    pub records: u64,
    /// The latest datestamp among those records.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_datestamp: Option<W3cDateTime>,
    /// `completeListSize` of the window's list, when the provider sends it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub complete_list_size: Option<u64>,
    /// How many times the window's list was started (restarts after a lost token included).
    pub attempts: u32,
    /// Why it failed, when it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Asked again by `rsagg oai reharvest` (done anew even though its records are held).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub reharvest: bool,
}

/// Where an [`OaiWindow`] stands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WindowStatus {
    /// Not listed to its end yet (never begun, or begun: see its `token`).
    #[default]
    Pending,
    /// Listed to its end and every record stored.
    Done,
    /// Its list failed (a loop, an unreadable token, a refused request) or a record failed:
    /// the next run lists it again from its `from`.
    Failed,
}

impl WindowStatus {
    /// `pending`, `done` or `failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            WindowStatus::Pending => "pending",
            WindowStatus::Done => "done",
            WindowStatus::Failed => "failed",
        }
    }
}

impl Checkpoint {
    /// True when the change (at `instant`, identified by `key`) was already processed.
    pub fn covers(&self, instant: Option<&W3cDateTime>, key: &SeenKey) -> bool {
        match (&self.instant, instant) {
            (Some(done), Some(t)) => match t.cmp_instant(done) {
                std::cmp::Ordering::Less => true,
                std::cmp::Ordering::Equal => self.seen.contains(key),
                std::cmp::Ordering::Greater => false,
            },
            // Without a datetime a change can only be recognised by its key.
            (_, None) => self.seen.contains(key),
            (None, Some(_)) => false,
        }
    }

    /// Records that the change was processed.
    pub fn advance(&mut self, instant: Option<&W3cDateTime>, key: SeenKey) {
        match (&self.instant, instant) {
            (Some(done), Some(t)) if t.cmp_instant(done) == std::cmp::Ordering::Equal => {
                if !self.seen.contains(&key) {
                    self.seen.push(key);
                }
            }
            (Some(done), Some(t)) if t.cmp_instant(done) == std::cmp::Ordering::Less => {}
            (_, Some(t)) => {
                self.instant = Some(*t);
                self.seen = vec![key];
            }
            (_, None) => {
                if !self.seen.contains(&key) {
                    self.seen.push(key);
                }
            }
        }
    }
}

/// A resource whose bytes did not match what the upstream announced, persistently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QuarantineRecord {
    /// Upstream name.
    pub upstream: String,
    /// Upstream URI.
    pub uri: String,
    /// Why (which check failed).
    pub reason: String,
    /// What the upstream announced (e.g. `md5:…`, `length 1024`).
    pub expected: String,
    /// What was received.
    pub got: String,
    /// When it was quarantined.
    pub at: W3cDateTime,
    /// The received body, stored for inspection (SHA-256), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

/// A stored copy, as the pipeline refers to it.
pub type CopyRef = BlobInfo;

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> W3cDateTime {
        W3cDateTime::parse(s).unwrap().value
    }

    fn key(uri: &str) -> SeenKey {
        SeenKey {
            uri: uri.into(),
            change: Change::Updated,
            tag: String::new(),
        }
    }

    #[test]
    fn checkpoint_covers_earlier_instants_and_seen_keys_at_the_same_instant() {
        let mut c = Checkpoint::default();
        assert!(!c.covers(Some(&t("2020-01-01T00:00:00Z")), &key("a")));
        c.advance(Some(&t("2020-01-01T00:00:00Z")), key("a"));
        // Same instant written differently: compared as an instant.
        assert!(c.covers(Some(&t("2020-01-01T01:00:00+01:00")), &key("a")));
        assert!(!c.covers(Some(&t("2020-01-01T00:00:00.000Z")), &key("b")));
        c.advance(Some(&t("2020-01-01T00:00:00Z")), key("b"));
        assert_eq!(c.seen.len(), 2);
        assert!(c.covers(Some(&t("2019-12-31T23:59:59Z")), &key("z")));
        c.advance(Some(&t("2020-01-01T00:00:01Z")), key("c"));
        assert_eq!(c.seen, vec![key("c")]);
        // Going back never moves the checkpoint.
        c.advance(Some(&t("2020-01-01T00:00:00Z")), key("d"));
        assert_eq!(c.instant, Some(t("2020-01-01T00:00:01Z")));
    }

    #[test]
    fn records_round_trip_as_json() {
        let r = ResourceRecord {
            upstream: "u".into(),
            uri: "http://example.org/a".into(),
            status: ResourceStatus::Present,
            copy: Some(BlobInfo {
                sha256: "ab".into(),
                md5: "cd".into(),
                sha1: None,
                length: 3,
            }),
            mime_type: Some("text/plain".into()),
            set: "http://example.org/capabilitylist.xml".into(),
            lastmod: t("2020-01-01T00:00:00.123456Z"),
            seq: 7,
            upstream_meta: UpstreamMeta {
                lastmod: Some(t("2019-05-01")),
                hash: Some(Hashes::parse(
                    "md5:00000000000000000000000000000000",
                    |_| {},
                )),
                links: vec![Link::new("describedby", "http://example.org/a.meta")],
                ..UpstreamMeta::default()
            },
        };
        let j = serde_json::to_string(&r).unwrap();
        let back: ResourceRecord = serde_json::from_str(&j).unwrap();
        assert_eq!(back, r);
        assert!(j.contains("\"2019-05-01\""), "keeps the written form: {j}");
    }
}
