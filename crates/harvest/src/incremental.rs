//! Incremental harvest from Change Lists (spec 12.1): from the checkpoint on, in upstream
//! order, each change once. A Change List Archive of a 0.9/1.0-era Source (ResourceSync
//! Archives, `changelist-archive`) is read as the Change List Index it stands for (spec
//! 12.2), so such a Source is followed by its changes rather than re-synced every run.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use rsagg_fetch::CapabilitySet;
use rsagg_model::{Capability, Change, Root, UrlEntry, W3cDateTime};
use rsagg_store::Checkpoint;
use url::Url;

use crate::Error;
use crate::commit::{Committer, Outcome};
use crate::compare::*;
use crate::context::Harvest;
use crate::lists::{OpenDoc, archive_of, entry_url};
use crate::resource::spawned;
use rsagg_layout::report::UpstreamReport;

/// Entries of one Change List held for ordering (the spec allows 50,000 per list).
pub(crate) const MAX_CHANGES_PER_LIST: usize = 1_000_000;

/// A list named by an index or archive of Change Lists: its `from`, its `until` (closed
/// when given) and its URL.
pub(crate) type ListedPart = (Option<W3cDateTime>, Option<W3cDateTime>, Url);

/// The documents an archive of Change Lists lists ([`crate::lists::Docs::archive_entries`]),
/// as parts with their `from` and `until`.
pub(crate) fn archive_parts(listed: Vec<(Url, UrlEntry)>) -> Vec<ListedPart> {
    listed
        .into_iter()
        .map(|(url, p)| {
            let md = p.md.as_ref();
            (md.and_then(|m| m.from), md.and_then(|m| m.until), url)
        })
        .collect()
}

/// The parts an index of Change Lists (spec 12.2) lists, as it lists them; a part whose
/// `loc` is not a URL is an error of the index.
pub(crate) async fn index_parts(doc: &mut OpenDoc) -> Result<Vec<ListedPart>, Error> {
    let index_url = doc.url.clone();
    let mut parts = Vec::new();
    while let Some(p) = doc.next().await? {
        let url = entry_url(&index_url, &p, "12.2", "part ")?;
        let md = p.md.as_ref();
        parts.push((md.and_then(|m| m.from), md.and_then(|m| m.until), url));
    }
    Ok(parts)
}

/// What a checkpoint covers of an index's (or archive's) lists: the lists still to read,
/// oldest `from` first, that is every one but the closed lists whose `until` is before the
/// checkpoint's time (all their changes are older). The run and its dry run (`plan.rs`)
/// both decide it here, so they cannot drift apart.
pub(crate) fn lists_after(mut parts: Vec<ListedPart>, cp: &Checkpoint) -> Vec<Url> {
    parts.sort_by(|a, b| match (a.0, b.0) {
        (Some(x), Some(y)) => x.cmp_instant(&y),
        _ => std::cmp::Ordering::Equal,
    });
    parts
        .into_iter()
        .filter(|(_, until, _)| {
            !matches!((until, cp.instant), (Some(u), Some(c)) if u.cmp_instant(&c).is_lt())
        })
        .map(|(_, _, url)| url)
        .collect()
}

/// The changes of the Change List open in `doc`, in forward chronological order (spec
/// 12.1); more than [`MAX_CHANGES_PER_LIST`] is an error of the list.
pub(crate) async fn read_changes(
    doc: &mut OpenDoc,
    list: &Url,
) -> Result<Vec<(Option<W3cDateTime>, UrlEntry)>, Error> {
    let mut entries = Vec::new();
    while let Some(e) = doc.next().await? {
        if entries.len() >= MAX_CHANGES_PER_LIST {
            return Err(Error::Upstream {
                url: list.to_string(),
                section: "12.1",
                message: format!("more than {MAX_CHANGES_PER_LIST} changes in one list"),
            });
        }
        entries.push(e);
    }
    Ok(in_order(entries))
}

/// The gap a checkpoint may have fallen into: when the first list read after it starts
/// (its `from`, else its oldest change) after the checkpoint's time, the changes in between
/// are no longer offered; `(start, checkpoint)` then, and the set must be re-synced.
pub(crate) fn gap_before(
    from: Option<W3cDateTime>,
    ordered: &[(Option<W3cDateTime>, UrlEntry)],
    cp: &Checkpoint,
) -> Option<(W3cDateTime, W3cDateTime)> {
    let oldest = from.or_else(|| ordered.first().and_then(|k| k.0))?;
    let done = cp.instant?;
    oldest.cmp_instant(&done).is_gt().then_some((oldest, done))
}

impl Harvest {
    /// Processes the Change List (or index) at `cl` from the checkpoint on.
    pub(crate) async fn incremental(
        &self,
        set: &CapabilitySet,
        cl: &Url,
        cp: &mut Checkpoint,
        check_gap: bool,
        report: &mut UpstreamReport,
    ) -> Result<Incremental, Error> {
        // After a closed list, its successor (spec 12.1): followed until a list is open, or
        // one comes round again.
        let mut url = cl.clone();
        let mut visited = HashSet::new();
        let mut check = check_gap;
        loop {
            visited.insert(url.clone());
            match self.incremental_one(set, &url, cp, check, report).await? {
                Incremental::Next(next) if !visited.contains(&next) => {
                    tracing::info!(upstream = %self.up.name, from = %url, to = %next, "closed Change List: on to its successor");
                    url = next;
                    check = false;
                }
                Incremental::Next(_) => return Ok(Incremental::Done),
                step => return Ok(step),
            }
        }
    }

    /// The successor of the closed Change List `list` (spec 12.1): the next part of the index
    /// its `index` link names, else what the Capability List its `up` link names now points
    /// at. `None` when that is the list itself.
    pub(crate) async fn successor(
        &self,
        list: &Url,
        header: &rsagg_model::Header,
    ) -> Result<Option<Url>, Error> {
        let docs = self.docs();
        if let Some(index) = header.link("index").and_then(|l| list.join(&l.href).ok())
            && &index != list
        {
            return Ok(Some(index));
        }
        let Some(up) = header.link("up").and_then(|l| list.join(&l.href).ok()) else {
            return Ok(None);
        };
        let mut cap = docs.open(&up).await?;
        let base = cap.url.clone();
        // The `changelist` entry, else a legacy one standing for it (as discovery chooses).
        let mut legacy = None;
        while let Some(e) = cap.next().await? {
            let Some(c) = e.md.as_ref().and_then(|m| m.capability.as_ref()) else {
                continue;
            };
            if *c == Capability::ChangeList {
                let next = base.join(e.loc.trim()).ok();
                return Ok(next.filter(|n| n != list));
            }
            if legacy.is_none() && c.means(&Capability::ChangeList) {
                legacy = base.join(e.loc.trim()).ok();
            }
        }
        Ok(legacy.filter(|n| n != list))
    }

    /// Processes the Change List (or index) at `cl` from the checkpoint on.
    pub(crate) async fn incremental_one(
        &self,
        set: &CapabilitySet,
        cl: &Url,
        cp: &mut Checkpoint,
        check_gap: bool,
        report: &mut UpstreamReport,
    ) -> Result<Incremental, Error> {
        let docs = self.docs();
        let mut doc = match self.bounded(docs.open(cl)).await {
            Ok(d) => d,
            Err(Error::Fetch(err)) if err.status().is_some_and(|s| s >= 500) => {
                // resync-simulator answers 500 until its first change. Nothing is lost by
                // waiting: the checkpoint stays, and a gap is detected if one opens.
                report.warn(format!(
                    "{cl}: Change List unavailable ({err}); checkpoint kept, retried next run"
                ));
                return Ok(Incremental::Done);
            }
            Err(e) => return Err(e),
        };
        // The lists to read, oldest first.
        let mut lists: Vec<Url> = Vec::new();
        let mut first_doc = None;
        let archive = archive_of(doc.header());
        match doc.header().root {
            _ if archive.is_some() => {
                let listed = self.bounded(docs.archive_entries(doc)).await?;
                // Discovery already warned of the legacy value in the Capability List.
                if let Some(l) = archive {
                    tracing::info!(upstream = %self.up.name, url = %cl, "{}", l.message());
                }
                lists = lists_after(archive_parts(listed), cp);
            }
            Root::Sitemapindex => {
                lists = lists_after(self.bounded(index_parts(&mut doc)).await?, cp);
            }
            Root::Urlset => {
                lists.push(doc.url.clone());
                first_doc = Some(doc);
            }
        }
        let mut gap_checked = !check_gap;
        for list in lists {
            let mut d = match first_doc.take() {
                Some(d) => d,
                None => self.bounded(docs.open(&list)).await?,
            };
            let header = d.header().clone();
            // What an index or archive lists must be Change Lists: reading an index as one
            // would take the documents it lists for changed resources.
            if header.kind().is_index() {
                return Err(Error::Upstream {
                    url: list.to_string(),
                    section: "12.2",
                    message: format!(
                        "listed as a Change List but is a {} ({})",
                        header.kind().name(),
                        header.capability().map_or("no capability", |c| c.as_str())
                    ),
                });
            }
            let ordered = self.bounded(read_changes(&mut d, &list)).await?;
            let from = header.md.as_ref().and_then(|m| m.from);
            if from.is_none() {
                report.warn(format!("{list}: Change List without `from` (spec 12.1 requires it); using its oldest change"));
            }
            if !gap_checked {
                gap_checked = true;
                if let Some((oldest, done)) = gap_before(from, &ordered, cp) {
                    return Ok(Incremental::Gap(format!(
                        "the Change List starts at {oldest}, after the checkpoint {done}: changes in between are no longer offered"
                    )));
                }
            }
            if !self
                .apply_changes(set, &list, Some(cl), ordered, cp, report)
                .await?
            {
                report.warn(format!(
                    "{list}: stopped at the first failed change; the next run resumes there"
                ));
                return Ok(Incremental::Done);
            }
            let closed = header.md.as_ref().and_then(|m| m.until).is_some();
            if closed && header.root == Root::Urlset && cl == &list {
                match self.successor(&list, &header).await? {
                    Some(next) => return Ok(Incremental::Next(next)),
                    // resync-simulator's rolling list carries `until` yet keeps changing:
                    // its successor is itself.
                    None => report.warn(format!(
                        "{list}: closed Change List (has `until`) whose successor is itself; re-polled next run"
                    )),
                }
            }
        }
        Ok(Incremental::Done)
    }
}

impl Harvest {
    /// Applies `ordered` changes (forward chronological, see [`in_order`]) of `set` from
    /// the checkpoint `cp` on: the one path by which Change List entries (polling) and
    /// change-notification entries (push) reach the state. Changes the checkpoint covers are
    /// replays (a poll and a push carrying the same change, a payload delivered twice) and
    /// are dropped; the others are fetched, verified and stored (a later change of the same
    /// URI in the batch supersedes earlier ones) and committed in order, the checkpoint
    /// moving past each. `followed`: the Change List the next poll starts from (`None` for
    /// push, which must not move it). Returns false when it stopped at a failed change (the
    /// checkpoint stays before it, so the next pass retries it).
    pub(crate) async fn apply_changes(
        &self,
        set: &CapabilitySet,
        source: &Url,
        followed: Option<&Url>,
        ordered: Vec<(Option<W3cDateTime>, UrlEntry)>,
        cp: &mut Checkpoint,
        report: &mut UpstreamReport,
    ) -> Result<bool, Error> {
        // The last change of each URI in this batch: earlier ones are superseded by it.
        let mut last_index: HashMap<String, usize> = HashMap::new();
        for (pos, (_, e)) in ordered.iter().enumerate() {
            last_index.insert(e.loc.trim().to_owned(), pos);
        }
        let todo: Vec<(usize, Option<W3cDateTime>, UrlEntry)> = ordered
            .into_iter()
            .enumerate()
            .filter_map(|(pos, (t, e))| {
                if cp.covers(t.as_ref(), &seen_key(&e)) {
                    report.replayed += 1;
                    None
                } else {
                    Some((pos, t, e))
                }
            })
            .collect();
        let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
        self.ctx.progress.listed(todo.len() as u64);
        tracing::info!(
            upstream = %self.up.name,
            list = %source,
            changes = todo.len(),
            "incremental: changes after the checkpoint"
        );
        let concurrency = self.ctx.fetch.concurrency.max(1);
        let shared_set = Arc::new(set.clone());
        let mut results = futures::stream::iter(todo)
            .map(|(pos, t, e)| {
                let newer_pending = last_index.get(e.loc.trim()).is_some_and(|&l| l > pos);
                let (h, set) = (self.clone(), shared_set.clone());
                async move {
                    let key = seen_key(&e);
                    let outcome = match change_of(&e) {
                        // A later change of the same URI in this batch brings the final
                        // state; processing both concurrently could record one change
                        // twice. The checkpoint still moves past this one in order.
                        _ if newer_pending => Outcome::Superseded,
                        Change::Deleted => h.delete_entry(&e).await,
                        _ => {
                            spawned(Box::pin(async move { h.store_entry(&set, e, false).await }))
                                .await
                        }
                    };
                    (t, key, outcome)
                }
            })
            // In order: the checkpoint only ever moves past committed changes.
            .buffered(concurrency);
        let mut completed = true;
        let mut cut = false;
        loop {
            // At the pass deadline the changes not yet done are dropped (the checkpoint is
            // before them; the next run does them) and what is done is committed.
            let next = tokio::select! {
                biased;
                n = results.next() => n,
                () = self.deadline_passed() => {
                    cut = true;
                    None
                }
            };
            let Some((t, key, outcome)) = next else { break };
            if !committer.add(outcome, report).await? {
                completed = false;
                break;
            }
            cp.advance(t.as_ref(), key);
            if let Some(f) = followed {
                cp.changelist = Some(f.to_string());
            }
            committer.checkpoint(cp.clone());
        }
        drop(results);
        committer.flush().await?;
        if cut {
            return Err(self.deadline_error());
        }
        Ok(completed)
    }
}

/// Where a Change List leaves an incremental pass.
pub(crate) enum Incremental {
    /// Go on with this Change List (the successor of a closed one).
    Next(Url),
    Done,
    Gap(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> W3cDateTime {
        W3cDateTime::parse(s).unwrap().value
    }

    fn at(instant: Option<&str>) -> Checkpoint {
        Checkpoint {
            instant: instant.map(t),
            ..Checkpoint::default()
        }
    }

    fn url(name: &str) -> Url {
        Url::parse(&format!("http://src.test/{name}")).unwrap()
    }

    /// Closed lists ending before the checkpoint are skipped; the open one, and a closed one
    /// ending at or after it, are read, oldest `from` first whatever the index's order.
    #[test]
    fn a_checkpoint_covers_the_closed_lists_that_end_before_it() {
        let parts = vec![
            (Some(t("2026-01-03T00:00:00Z")), None, url("open")),
            (
                Some(t("2026-01-01T00:00:00Z")),
                Some(t("2026-01-02T00:00:00Z")),
                url("old"),
            ),
            (
                Some(t("2026-01-02T00:00:00Z")),
                Some(t("2026-01-03T00:00:00Z")),
                url("recent"),
            ),
        ];
        let cp = at(Some("2026-01-02T12:00:00Z"));
        assert_eq!(
            lists_after(parts.clone(), &cp),
            [url("recent"), url("open")]
        );
        // A list ending exactly at the checkpoint may hold changes at that instant.
        let cp = at(Some("2026-01-02T00:00:00Z"));
        assert_eq!(
            lists_after(parts.clone(), &cp),
            [url("old"), url("recent"), url("open")]
        );
        // No checkpoint time: everything, in order.
        assert_eq!(
            lists_after(parts, &at(None)),
            [url("old"), url("recent"), url("open")]
        );
    }

    /// The first list after a checkpoint must reach back to it: judged by its `from`, else
    /// by its oldest change; no gap without a checkpoint time.
    #[test]
    fn a_gap_is_a_first_list_starting_after_the_checkpoint() {
        let change = |when: &str| (Some(t(when)), UrlEntry::default());
        let cp = at(Some("2026-01-02T00:00:00Z"));
        let later = [change("2026-01-03T00:00:00Z")];
        assert_eq!(
            gap_before(Some(t("2026-01-02T06:00:00Z")), &later, &cp),
            Some((t("2026-01-02T06:00:00Z"), t("2026-01-02T00:00:00Z")))
        );
        assert_eq!(
            gap_before(Some(t("2026-01-01T00:00:00Z")), &later, &cp),
            None
        );
        assert_eq!(
            gap_before(Some(t("2026-01-02T00:00:00Z")), &later, &cp),
            None
        );
        assert_eq!(
            gap_before(None, &later, &cp),
            Some((t("2026-01-03T00:00:00Z"), t("2026-01-02T00:00:00Z")))
        );
        assert_eq!(gap_before(None, &[], &cp), None);
        assert_eq!(
            gap_before(Some(t("2026-01-05T00:00:00Z")), &later, &at(None)),
            None
        );
    }
}
