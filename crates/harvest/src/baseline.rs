//! Baseline and re-sync of a set from its Resource List (spec 10.1): creates, updates, and
//! (on re-sync) deletes of what the list no longer names.

use std::sync::Arc;

use futures::StreamExt;
use rsagg_fetch::CapabilitySet;
use rsagg_model::{Capability, W3cDateTime};
use rsagg_store::{Checkpoint, ResourceStatus};
use url::Url;

use crate::Error;
use crate::commit::{Committer, Outcome};
use crate::context::Harvest;
use crate::resource::spawned;
use crate::seen::{Seen, key};
use rsagg_config::BaselineSource;
use rsagg_layout::report::UpstreamReport;
use rsagg_store::StoreFailure as _;

impl Harvest {
    /// The first synchronisation of a set: from the Resource Dump when the pipeline prefers
    /// it (falling back to the list when the dump is missing or broken), else the list.
    pub(crate) async fn baseline(
        &self,
        set: &CapabilitySet,
        report: &mut UpstreamReport,
    ) -> Result<Option<Checkpoint>, Error> {
        if self.up.baseline == BaselineSource::Dump {
            match self.baseline_dump(set, report).await {
                Ok(cp) => return Ok(cp),
                Err(e) if e.is_fenced() || e.is_deadline() => return Err(e),
                Err(e) => report.warn(format!(
                    "{}: Resource Dump unusable ({e}); falling back to the Resource List",
                    set.url
                )),
            }
        }
        self.resync(set, false, report).await
    }

    /// Brings the copies in line with the Resource List (baseline when the state is empty).
    /// Returns the new checkpoint, committed, or `None` when some resource failed (nothing
    /// is lost: the next run does it again, skipping what is already stored).
    pub(crate) async fn resync(
        &self,
        set: &CapabilitySet,
        counted: bool,
        report: &mut UpstreamReport,
    ) -> Result<Option<Checkpoint>, Error> {
        let Some(list_url) = set.get(Capability::ResourceList).cloned() else {
            report.fail(format!(
                "{}: no Resource List to baseline from (spec 10)",
                set.url
            ));
            return Ok(None);
        };
        let started = W3cDateTime::now();
        // The upstream's state is the list plus the changes after its `at` (`later.rs`):
        // the resources those concern are left to the incremental pass that follows (from
        // the checkpoint at `at`), neither fetched against their stale entries nor deleted
        // for being unlisted. They count as listed from the start, so the loop below skips
        // them as it skips a URI listed twice.
        let later_at = match self
            .bounded(self.later_changes(set, &list_url, false))
            .await
        {
            Ok(Some((at, later))) => {
                if !later.is_empty() {
                    tracing::info!(
                        upstream = %self.up.name,
                        set = %set.url,
                        resources = later.len(),
                        "changed after the Resource List's `at`: left to the Change List"
                    );
                }
                Some((at, later))
            }
            Ok(None) => None,
            Err(e) if e.is_fenced() || e.is_deadline() => return Err(e),
            Err(e) => {
                report.warn(format!(
                    "{}: the changes after the Resource List could not be read ({e}); judged by the Resource List alone",
                    set.url
                ));
                None
            }
        };
        let shared_set = Arc::new(set.clone());
        let docs = self.docs();
        // The list is read until the pass deadline at most: then the channel closes, the
        // transfers in flight are cut (`Harvest::cut_at_deadline`) and what was stored is
        // committed.
        let (producer, entries) = docs.read_entries(&list_url);
        let producer = self.bounded(producer);
        // The URIs seen so far: in memory up to `[store] listed_memory_bytes`, beyond it on
        // local disk (`seen.rs`), so the baseline of a large collection holds no set that
        // grows with it.
        let (overlay_at, mut listed) = match later_at {
            Some((at, later)) => (
                Some(at),
                later
                    .into_seen()
                    .unwrap_or_else(|| Seen::new(self.ctx.listed)),
            ),
            None => (None, Seen::new(self.ctx.listed)),
        };
        // A URI that could not be noted as listed (local disk): the pass ends without
        // deletions, as a list not read to its end.
        let mut noting_failed: Option<Error> = None;
        let mut committer = Committer::new(&self.ctx, &self.up.name, set.url.as_str());
        let mut all_ok = true;
        // A first baseline (no record of this upstream yet, the common case for a large
        // harvest) needs no per-resource state lookup, nor a scan for deletions at the end.
        // Sets and passes of one upstream run one after the other, so nothing adds records
        // of it meanwhile but this baseline (a URI listed twice is stored once, below).
        let fresh = self
            .ctx
            .state
            .resources(&self.up.name)
            .await?
            .next()
            .await?
            .is_none();
        let consumer = async {
            // At the pass deadline no more entries are taken (those already read and
            // waiting in the channel included); the transfers in flight are cut.
            let entries = entries.take_until(self.deadline_passed());
            let mut results = std::pin::pin!(
                entries
                    .map(|(_, e)| {
                        // A URI listed twice is stored once (two concurrent stores of
                        // the same resource would both see it as new); one a later
                        // change concerns is left to the Change List.
                        let (h, set) = (self.clone(), shared_set.clone());
                        let (first, failed) = match listed.insert(key(&self.up.name, &e.loc)) {
                            Ok(first) => (first, None),
                            Err(err) => {
                                let o =
                                    Outcome::failed(e.loc.trim(), "noting the URI as listed", &err);
                                noting_failed.get_or_insert(err);
                                (false, Some(o))
                            }
                        };
                        async move {
                            if let Some(o) = failed {
                                o
                            } else if first {
                                spawned(Box::pin(async move {
                                    if fresh {
                                        h.store_with_prior(&set, e, true, None).await
                                    } else {
                                        h.store_entry(&set, e, true).await
                                    }
                                }))
                                .await
                            } else {
                                Outcome::Skipped
                            }
                        }
                    })
                    .buffer_unordered(self.ctx.fetch.concurrency.max(1))
            );
            let mut cut = false;
            while let Some(outcome) = results.next().await {
                cut |= outcome.cut_at_deadline();
                all_ok &= committer.add(outcome, report).await?;
            }
            Ok::<_, Error>(cut)
        };
        let (header, consumed) = futures::join!(producer, consumer);
        // Transfers cut at the deadline: the pass ends as cut short, even when the list
        // itself was read in time (what was stored is committed, nothing is deleted).
        let header = if consumed? {
            header.and(Err(self.deadline_error()))
        } else {
            header
        };
        let header = match header {
            Ok(h) => h,
            Err(e) => {
                // The list was not read to its end (its deadline, the pass's, an error): what
                // was stored is committed, but nothing is deleted (the rest of the list was
                // not seen) and no checkpoint is recorded, so the next run takes the list up
                // again, skipping what is stored.
                committer.flush().await?;
                return Err(e);
            }
        };
        if let Some(e) = noting_failed {
            // Which URIs were listed is not known for sure: nothing is deleted.
            committer.flush().await?;
            return Err(e);
        }
        let mut at = header.md.as_ref().and_then(|m| m.at);
        // The list rewritten between reading its `at` for the changes and reading it whole:
        // the checkpoint is the earlier of the two, so no change after either is missed
        // (one applied to a list that already has it changes nothing).
        if let (Some(o), Some(a)) = (overlay_at, at)
            && o.cmp_instant(&a).is_lt()
        {
            at = Some(o);
        }
        self.finish_sync(
            set, &list_url, listed, committer, all_ok, at, started, counted, fresh, report,
        )
        .await
    }

    /// The end of a baseline or re-sync: deletions of what is no longer listed, then the
    /// checkpoint (only when every listed resource was stored).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn finish_sync(
        &self,
        set: &CapabilitySet,
        list_url: &Url,
        listed: Seen,
        mut committer: Committer<'_>,
        all_ok: bool,
        at: Option<W3cDateTime>,
        started: W3cDateTime,
        counted: bool,
        fresh: bool,
        report: &mut UpstreamReport,
    ) -> Result<Option<Checkpoint>, Error> {
        let previous = self
            .ctx
            .state
            .checkpoint(&self.up.name, set.url.as_str())
            .await?
            .map_or(0, |c| c.resyncs);
        // Deletions: resources of this set the list no longer has, streamed from the state's
        // slot index beside the sorted URIs seen (`Seen::unlisted`; the scan reads a
        // snapshot, so committing meanwhile is safe). After a `fresh` baseline every record
        // is one the list had.
        if !fresh {
            let mut unlisted = listed.unlisted(&self.ctx.state, &self.up.name).await?;
            while let Some(mut r) = unlisted.next().await? {
                if r.status == ResourceStatus::Present && r.set == set.url.as_str() {
                    r.status = ResourceStatus::Deleted;
                    committer.add(Outcome::Deleted(r), report).await?;
                }
            }
        }
        if !all_ok {
            committer.flush().await?;
            report.warn(format!(
                "{}: some resources failed; the baseline is finished on the next run",
                set.url
            ));
            return Ok(None);
        }
        let at = at.unwrap_or_else(|| {
            report.warn(format!(
                "{list_url}: no `at` (spec 10.1, 11.1); using the time the harvest started"
            ));
            started
        });
        let cp = Checkpoint {
            instant: Some(at),
            seen: Vec::new(),
            changelist: set.get(Capability::ChangeList).map(|u| u.to_string()),
            baseline_at: Some(at),
            resyncs: previous + u64::from(counted),
            oai: None,
            parked_until: None,
        };
        committer.checkpoint(cp.clone());
        committer.flush().await?;
        Ok(Some(cp))
    }
}
