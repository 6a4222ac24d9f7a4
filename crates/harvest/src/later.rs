//! The upstream's current state: its Resource List plus the changes its Change Lists announce
//! after the list's `at`.
//!
//! A Resource List is a snapshot: its `at` says when it was made (spec 10.1, 4.1), and a
//! Source that does not rewrite it on every change (most of them) announces what changed
//! since in its Change Lists (spec 12.1; spec 5, "Baseline Synchronization" then
//! "Incremental Synchronization"). What the upstream holds now is the list with those changes
//! applied: a resource created after `at` is not in the list, one deleted after `at` still is,
//! and one updated after `at` is listed with its old hash and length. So whatever judges the
//! store against the upstream takes that state, never the list alone:
//!
//! - a baseline or re-sync (`baseline.rs`) leaves every resource a later change concerns to
//!   the incremental pass that follows it (from the checkpoint at the list's `at`): it is
//!   neither fetched against its stale entry (a mismatch that would quarantine it, a 404, or
//!   bytes stored and then replaced) nor deleted for being unlisted (a deletion logged and a
//!   creation logged again right after);
//! - `rsagg audit`, `rsagg run --dry-run` and `rsagg quarantine retry` take the last change of
//!   such a resource instead of its list entry (a deletion: not in the upstream's state).
//!
//! Which changes count is exactly what the incremental pass after a baseline at `at` applies:
//! the set's Change List (or index, or a legacy archive of Change Lists), parts that end
//! before `at` skipped, a closed list followed to its successor, every change the checkpoint
//! `{instant: at}` does not cover (`Checkpoint::covers`: those after `at`, and those at `at`).
//! Change Dumps are not read here (a set whose changes come only as a Change Dump is judged
//! by its Resource List, as before).
//!
//! Bounded: the Change Lists are streamed, entry by entry. The harvest only needs which URIs
//! they concern: those go straight into the baseline's set of URIs seen (`seen.rs`, memory
//! bounded by `[store] listed_memory_bytes`, the rest on local disk), however many. The
//! operator commands compare with the last change of each URI, so they hold it (its 128-bit
//! digest and the entry), at most [`MAX_LATER_URIS`] of them; beyond that they report the
//! set as not judged.

use std::collections::{HashMap, HashSet};

use rsagg_fetch::CapabilitySet;
use rsagg_model::{Capability, Change, Root, UrlEntry, W3cDateTime};
use rsagg_store::Checkpoint;
use url::Url;

use crate::Error;
use crate::compare::{change_instant, change_of, seen_key, uri_digest};
use crate::context::Harvest;
use crate::incremental::{archive_parts, index_parts, lists_after};
use crate::lists::{archive_of, newest};
#[cfg(test)]
use crate::seen::SeenLimits;
use crate::seen::{Seen, key};

/// Resources a Change List may announce as changed after a Resource List's `at`, at most:
/// as many as one Change List may hold entries for ordering
/// (`incremental::MAX_CHANGES_PER_LIST`), so judging the upstream's state costs at most
/// what an incremental pass already may (a digest each, plus the entry for the operator
/// commands).
pub(crate) const MAX_LATER_URIS: usize = crate::incremental::MAX_CHANGES_PER_LIST;

/// The last change of each resource after a Resource List's `at` (see the module
/// documentation), or after a checkpoint (`rsagg run --dry-run`'s incremental plan).
pub(crate) struct Later {
    /// URI digest → (instant of its last change, position in reading order, the change
    /// entry when kept); only for the operator commands (`keep`).
    last: HashMap<u128, (Option<W3cDateTime>, u64, Option<UrlEntry>)>,
    /// For the harvest (not `keep`): the URIs concerned, keyed by `upstream` (`seen::key`).
    seen: Option<(String, Seen)>,
    /// Position of the next change read (across lists, in reading order).
    position: u64,
    /// Whether the entries are kept (the operator commands) or only the digests (the
    /// harvest).
    keep: bool,
    /// The instant of the last change read (an entry without a time takes it, as
    /// `compare::in_order` orders them).
    previous: Option<W3cDateTime>,
    /// Resources whose entries are held at most ([`MAX_LATER_URIS`]; smaller in tests).
    cap: usize,
    /// After what the changes are (for the error past `cap`).
    after: &'static str,
}

impl Default for Later {
    fn default() -> Later {
        Later {
            last: HashMap::new(),
            seen: None,
            position: 0,
            keep: false,
            previous: None,
            cap: MAX_LATER_URIS,
            after: "the Resource List's `at`",
        }
    }
}

impl Later {
    /// No change after the list (a set without a Change List).
    pub(crate) fn none() -> Later {
        Later::default()
    }

    /// The last change of each resource after a checkpoint, entries kept, as
    /// `rsagg run --dry-run` plans an incremental pass: over every list after the checkpoint
    /// at most [`MAX_LATER_URIS`] resources, as for a Resource List's `at` (the run itself
    /// holds one list at a time).
    pub(crate) fn after_checkpoint() -> Later {
        Later {
            keep: true,
            after: "the checkpoint",
            ..Later::default()
        }
    }

    /// How many resources a later change concerns.
    pub(crate) fn len(&self) -> u64 {
        match &self.seen {
            Some((_, seen)) => seen.len(),
            None => self.last.len() as u64,
        }
    }

    /// True when no change after the list concerns any resource.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether a change after the list concerns `uri`.
    pub(crate) fn contains(&self, uri: &str) -> bool {
        self.last.contains_key(&uri_digest(uri.trim()))
    }

    /// The URIs concerned, as a set of URIs seen to go on with (the harvest's; `None`
    /// when the entries were kept).
    pub(crate) fn into_seen(self) -> Option<Seen> {
        self.seen.map(|(_, s)| s)
    }

    /// The last change of `uri` (only when the entries are kept).
    pub(crate) fn get(&self, uri: &str) -> Option<&UrlEntry> {
        self.last
            .get(&uri_digest(uri.trim()))
            .and_then(|(_, _, e)| e.as_ref())
    }

    /// The last changes, in the order they were read (only when the entries are kept).
    pub(crate) fn into_entries(self) -> Vec<UrlEntry> {
        let mut v: Vec<(u64, UrlEntry)> = self
            .last
            .into_values()
            .filter_map(|(_, pos, e)| e.map(|e| (pos, e)))
            .collect();
        v.sort_by_key(|(pos, _)| *pos);
        v.into_iter().map(|(_, e)| e).collect()
    }

    /// The ordering instant of the next change of a list: its own, else the previous
    /// change's (as `compare::in_order` orders a list).
    fn instant_of(&mut self, e: &UrlEntry) -> Option<W3cDateTime> {
        let t = change_instant(e).or(self.previous);
        self.previous = t;
        t
    }

    /// Notes a change at `t` read from `list`; a later one of the same URI (by instant, then
    /// reading order, as `compare::in_order` orders a list) replaces it.
    pub(crate) fn note(
        &mut self,
        list: &Url,
        t: Option<W3cDateTime>,
        e: UrlEntry,
    ) -> Result<(), Error> {
        let pos = self.position;
        self.position += 1;
        if let Some((upstream, seen)) = &mut self.seen {
            seen.insert(key(upstream, &e.loc))?;
            return Ok(());
        }
        let digest = uri_digest(e.loc.trim());
        let newer = match self.last.get(&digest) {
            None => {
                if self.last.len() >= self.cap {
                    return Err(Error::Upstream {
                        url: list.to_string(),
                        section: "12.1",
                        message: format!(
                            "more than {} resources changed after {}: not judged (at most that many are held)",
                            self.cap, self.after
                        ),
                    });
                }
                true
            }
            Some((old, _, _)) => match (old, t) {
                (Some(old), Some(t)) => !t.cmp_instant(old).is_lt(),
                _ => true,
            },
        };
        if newer {
            let kept = self.keep.then_some(e);
            self.last.insert(digest, (t, pos, kept));
        }
        Ok(())
    }
}

/// Whether a change leaves its resource out of the upstream's state.
pub(crate) fn is_deletion(e: &UrlEntry) -> bool {
    change_of(e) == Change::Deleted
}

impl Harvest {
    /// The `at` of the Resource List (or index) at `url`, read from its header alone (the
    /// rest of the document is not downloaded); for a legacy archive of snapshots, its
    /// newest snapshot's (as `Docs::stream_entries` reads it).
    pub(crate) async fn resource_list_at(&self, url: &Url) -> Result<Option<W3cDateTime>, Error> {
        let docs = self.docs();
        let doc = docs.open(url).await?;
        if archive_of(doc.header()).is_some_and(|l| l.is_snapshot_archive()) {
            let listed = docs.archive_entries(doc).await?;
            let Some(latest) = newest(&listed).cloned() else {
                return Ok(None);
            };
            let snapshot = docs.open(&latest).await?;
            return Ok(snapshot.header().md.as_ref().and_then(|m| m.at));
        }
        Ok(doc.header().md.as_ref().and_then(|m| m.at))
    }

    /// The set's Resource List's `at` and the changes after it (see the module
    /// documentation); `None` when the set has no Change List or its Resource List no `at`
    /// (then the list alone is the state, as far as rsagg can tell). `keep`: keep the change
    /// entries (the operator commands), not only which URIs they concern (then in a
    /// [`Seen`] bounded by `[store] listed_memory_bytes`).
    pub(crate) async fn later_changes(
        &self,
        set: &CapabilitySet,
        list_url: &Url,
        keep: bool,
    ) -> Result<Option<(W3cDateTime, Later)>, Error> {
        let Some(cl) = set.get(Capability::ChangeList).cloned() else {
            return Ok(None);
        };
        let Some(at) = self.resource_list_at(list_url).await? else {
            return Ok(None);
        };
        let cp = Checkpoint {
            instant: Some(at),
            ..Checkpoint::default()
        };
        let mut later = Later {
            keep,
            seen: (!keep).then(|| (self.up.name.clone(), Seen::new(self.ctx.listed))),
            ..Later::default()
        };
        // After a closed list, its successor (spec 12.1), as the incremental pass follows it.
        let mut url = cl;
        let mut visited = HashSet::new();
        loop {
            visited.insert(url.clone());
            match self.later_in(&url, &cp, &mut later).await? {
                Some(next) if !visited.contains(&next) => url = next,
                _ => break,
            }
        }
        tracing::debug!(
            upstream = %self.up.name,
            set = %set.url,
            at = %at,
            resources = later.len(),
            "changes after the Resource List's `at`"
        );
        Ok(Some((at, later)))
    }

    /// The changes of the Change List (or index, or archive) at `cl` that `cp` does not
    /// cover, into `later`; the successor to read next when `cl` is a closed list.
    async fn later_in(
        &self,
        cl: &Url,
        cp: &Checkpoint,
        later: &mut Later,
    ) -> Result<Option<Url>, Error> {
        let docs = self.docs();
        let mut doc = docs.open(cl).await?;
        let mut lists = Vec::new();
        let mut first = None;
        if archive_of(doc.header()).is_some() {
            lists = lists_after(archive_parts(docs.archive_entries(doc).await?), cp);
        } else if doc.header().root == Root::Sitemapindex {
            lists = lists_after(index_parts(&mut doc).await?, cp);
        } else {
            lists.push(doc.url.clone());
            first = Some(doc);
        }
        for list in lists {
            let mut d = match first.take() {
                Some(d) => d,
                None => docs.open(&list).await?,
            };
            let header = d.header().clone();
            if header.kind().is_index() {
                return Err(Error::Upstream {
                    url: list.to_string(),
                    section: "12.2",
                    message: format!("listed as a Change List but is a {}", header.kind().name()),
                });
            }
            // Each list ordered on its own, as the incremental pass orders it.
            later.previous = None;
            while let Some(e) = d.next().await? {
                let t = later.instant_of(&e);
                if cp.covers(t.as_ref(), &seen_key(&e)) {
                    continue;
                }
                later.note(&list, t, e)?;
            }
            let closed = header.md.as_ref().and_then(|m| m.until).is_some();
            if closed && header.root == Root::Urlset && cl == &list {
                return self.successor(&list, &header).await;
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsagg_model::Md;

    fn change(uri: &str, change: Change, datetime: Option<&str>) -> UrlEntry {
        UrlEntry {
            loc: uri.into(),
            md: Some(Md {
                change: Some(change),
                datetime: datetime.map(|t| W3cDateTime::parse(t).unwrap().value),
                ..Md::default()
            }),
            ..UrlEntry::default()
        }
    }

    #[test]
    fn the_last_change_of_each_resource_is_kept() {
        let list = Url::parse("http://e.org/changelist.xml").unwrap();
        let mut later = Later {
            keep: true,
            ..Later::default()
        };
        for e in [
            change(
                "http://e.org/a",
                Change::Created,
                Some("2026-01-02T00:00:00Z"),
            ),
            change(
                "http://e.org/b",
                Change::Updated,
                Some("2026-01-03T00:00:00Z"),
            ),
            // Out of order in the document: the earlier change does not win.
            change(
                "http://e.org/b",
                Change::Deleted,
                Some("2026-01-02T12:00:00Z"),
            ),
            change(
                "http://e.org/a",
                Change::Deleted,
                Some("2026-01-04T00:00:00Z"),
            ),
            // No time: it follows the previous one.
            change("http://e.org/c", Change::Updated, None),
        ] {
            let t = later.instant_of(&e);
            later.note(&list, t, e).unwrap();
        }
        assert_eq!(later.len(), 3);
        assert!(later.contains(" http://e.org/a "));
        assert!(!later.contains("http://e.org/d"));
        assert!(is_deletion(later.get("http://e.org/a").unwrap()));
        assert!(!is_deletion(later.get("http://e.org/b").unwrap()));
        let order: Vec<String> = later.into_entries().into_iter().map(|e| e.loc).collect();
        assert_eq!(
            order,
            ["http://e.org/b", "http://e.org/a", "http://e.org/c"]
        );
    }

    #[test]
    fn past_the_cap_the_changes_are_not_judged() {
        let list = Url::parse("http://e.org/changelist.xml").unwrap();
        let mut later = Later {
            cap: 3,
            ..Later::after_checkpoint()
        };
        for i in 0..3 {
            let e = change(&format!("http://e.org/{i}"), Change::Updated, None);
            later.note(&list, None, e).unwrap();
        }
        // A resource already held takes no room of its own.
        later
            .note(&list, None, change("http://e.org/1", Change::Deleted, None))
            .unwrap();
        assert_eq!(later.len(), 3);
        let e = change("http://e.org/3", Change::Created, None);
        let err = later.note(&list, None, e).unwrap_err().to_string();
        assert!(
            err.contains("more than 3 resources changed after the checkpoint"),
            "{err}"
        );
        assert!(err.contains("http://e.org/changelist.xml"), "{err}");
        assert_eq!(later.len(), 3);
    }

    #[test]
    fn the_harvest_notes_the_uris_in_a_bounded_set() {
        let list = Url::parse("http://e.org/changelist.xml").unwrap();
        let limits = SeenLimits {
            memory_bytes: 0,
            filter_bytes: 1024,
        };
        let mut later = Later {
            seen: Some(("up".into(), Seen::new(limits))),
            ..Later::default()
        };
        // More URIs than the old cap would allow in memory is not the point here; that
        // they leave memory for disk once past the buffer is.
        for i in 0..3000 {
            let e = change(&format!("http://e.org/{i}"), Change::Updated, None);
            later.note(&list, None, e).unwrap();
        }
        later
            .note(&list, None, change("http://e.org/1", Change::Deleted, None))
            .unwrap();
        assert_eq!(later.len(), 3000);
        assert!(later.last.is_empty());
        assert!(later.get("http://e.org/1").is_none());
        let seen = later.into_seen().unwrap();
        assert!(seen.runs() >= 1);
        assert!(seen.contains(key("up", "http://e.org/2999")).unwrap());
        assert!(seen.contains(key("up", "http://e.org/0")).unwrap());
        assert!(!seen.contains(key("up", "http://e.org/3000")).unwrap());
    }
}
