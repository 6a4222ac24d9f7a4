//! What the publisher keeps beside its documents (JSON objects under `published/`), so the
//! next publish knows what is out there without reading the documents back, and so stages
//! that build on one another (Change Dumps on closed Change Lists) share one description.

use rsagg_model::W3cDateTime;
use serde::{Deserialize, Serialize};

/// `published/changelist.json`: the Change Lists out there.
pub const CHANGELISTS_META: &str = "published/changelist.json";

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

/// The open Change List (spec 12.1: no `until`), rewritten by every publish.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenList {
    /// Object name under `changelist/` of its latest version.
    pub name: String,
    /// First change-log sequence number it lists (the last closed list's `last_seq` + 1).
    pub first_seq: u64,
    /// Its `rs:md from` (the last closed list's `until`).
    pub from: W3cDateTime,
    /// Number of entries.
    pub entries: u64,
}

/// Content of [`CHANGELISTS_META`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ChangeListsMeta {
    /// Change-log sequence number the documents reflect.
    pub seq: u64,
    /// Generation counter for object names.
    pub generation: u64,
    /// Retained closed lists, oldest first (forward chronological order).
    pub closed: Vec<ClosedList>,
    /// The open list, once there is one.
    pub open: Option<OpenList>,
    /// Objects no longer named by any document, with when they were retired (unix seconds);
    /// deleted once the grace period has passed.
    pub retired: Vec<(String, i64)>,
}
