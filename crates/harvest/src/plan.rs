//! `rsagg run --dry-run`: what the next run would do, from the upstreams' lists and the
//! state alone (opened read-only); nothing is fetched but the lists, nothing is written.
//!
//! For each set of resources it takes the decision the harvest takes (`upstream.rs`): a
//! baseline when the set was never synchronised, a re-sync from the Resource List when it
//! has no Change List or the Change List no longer reaches back to the checkpoint (or with
//! `--baseline`), else the changes after the checkpoint. A resource is to be created when
//! the state has no present copy, updated when the list does not show it unchanged (the
//! rule of `compare::unchanged`: same hash, else same length and `lastmod`), deleted when a
//! re-sync's list no longer names it or a change says so. Every create and update is a
//! fetch; the fetch may then still find the same bytes (counted unchanged by the run).
//! Under `--baseline` every listed resource of a Source is fetched again, and one the list
//! shows unchanged is counted as a fetch and `unchanged`, as the run counts it (identical
//! bytes log no change), not as an update. Only the set's own upstream's records are judged
//! against its list: several upstreams feed one collection, and one upstream's re-sync never
//! deletes another's resources.
//!
//! Not simulated: following a closed Change List to its successor (the run does; the plan
//! stops at the list the Capability List or the checkpoint names), Change Dumps (planned
//! from the Resource List instead, with a note), and what the upstream answers (404s,
//! mismatches, quarantine).

use std::collections::HashSet;
use std::sync::Arc;

use futures::StreamExt;
use rsagg_config::UpstreamConfig;
use rsagg_fetch::CapabilitySet;
use rsagg_layout::report::UpstreamReport;
use rsagg_model::{Capability, Change, Root, UrlEntry};
use rsagg_store::{ResourceRecord, ResourceStatus};
use serde::Serialize;
use url::Url;

use crate::Error;
use crate::audit::Listed;
use crate::compare::{change_of, seen_key, unchanged};
use crate::context::{Ctx, Harvest};
use crate::incremental::{gap_before, index_parts, lists_after, read_changes};
use crate::later::Later;
use crate::upstream::discover_sets;

/// What the next run would do to one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Fetch and store a resource the store has no present copy of.
    Create,
    /// Fetch again (the list shows it changed, or cannot show it unchanged).
    Update,
    /// Mark the copy deleted.
    Delete,
}

/// One planned action.
#[derive(Debug, Clone, Serialize)]
pub struct PlanItem {
    /// The upstream.
    pub upstream: String,
    /// What would happen.
    pub action: Action,
    /// The resource's upstream URI.
    pub uri: String,
}

/// How one set would be synchronised.
#[derive(Debug, Clone, Serialize)]
pub struct SetPlan {
    /// The Capability List.
    pub set: String,
    /// `"baseline"`, `"resync"` or `"incremental"`.
    pub mode: &'static str,
    /// Why a re-sync, or what was not simulated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One upstream's plan.
#[derive(Debug, Clone, Default, Serialize)]
pub struct UpstreamPlan {
    /// The upstream.
    pub name: String,
    /// Each set.
    pub sets: Vec<SetPlan>,
    /// Resources that would be fetched (creates and updates).
    pub fetch: u64,
    /// Counts per action.
    pub create: u64,
    /// See [`Action::Update`].
    pub update: u64,
    /// See [`Action::Delete`].
    pub delete: u64,
    /// Listed resources the run would skip as unchanged (or changes it would skip as done).
    pub unchanged: u64,
    /// What prevented a complete plan.
    pub errors: Vec<String>,
}

/// The plan of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PlanReport {
    /// The collection (set by the caller).
    pub collection: String,
    /// Always true: nothing was written.
    pub dry_run: bool,
    /// True when the store holds no collection yet (never run, or a mistyped `[store]
    /// url`): the plan is then that of a first run, a baseline of every set (set by the
    /// caller).
    pub never_run: bool,
    /// Per upstream.
    pub upstreams: Vec<UpstreamPlan>,
    /// The actions, at most `max_items`.
    pub items: Vec<PlanItem>,
    /// True when there were more than `items` holds.
    pub items_truncated: bool,
}

/// What the run would do with one resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Planned {
    /// Change it (an item of the plan).
    Act(Action),
    /// Nothing: the list shows the copy unchanged (or the change is done already).
    Unchanged,
    /// Fetch it again although the list shows it unchanged (`run --baseline`); the run then
    /// finds the same bytes and counts it `unchanged`, logging no change.
    Refetch,
    /// Nothing, and nothing counted: a deletion of a resource the store has no present copy
    /// of (the run counts it nowhere either).
    Nothing,
}

impl PlanReport {
    /// Records what the run would do to `uri` of `upstream`.
    fn plan(&mut self, max: usize, upstream: &str, uri: String, planned: Planned) {
        match planned {
            Planned::Act(action) => self.add(
                max,
                PlanItem {
                    upstream: upstream.to_owned(),
                    action,
                    uri,
                },
            ),
            Planned::Nothing => {}
            Planned::Unchanged | Planned::Refetch => {
                if let Some(u) = self.upstreams.last_mut() {
                    u.unchanged += 1;
                    if planned == Planned::Refetch {
                        u.fetch += 1;
                    }
                }
            }
        }
    }

    fn add(&mut self, max: usize, item: PlanItem) {
        if let Some(u) = self.upstreams.last_mut() {
            match item.action {
                Action::Create => u.create += 1,
                Action::Update => u.update += 1,
                Action::Delete => u.delete += 1,
            }
            if item.action != Action::Delete {
                u.fetch += 1;
            }
        }
        if self.items.len() < max {
            self.items.push(item);
        } else {
            self.items_truncated = true;
        }
    }

    /// True when some upstream could not be planned completely.
    pub fn failed(&self) -> bool {
        self.upstreams.iter().any(|u| !u.errors.is_empty())
    }

    /// The human summary: one line per action listed, then one per set and upstream.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        if self.never_run {
            s.push_str(
                "store holds no rsagg collection (never run?): this is the plan of a first run, a baseline of every set\n",
            );
        }
        for i in &self.items {
            let a = match i.action {
                Action::Create => "create",
                Action::Update => "update",
                Action::Delete => "delete",
            };
            s.push_str(&format!("{a:<7}{} {}\n", i.upstream, i.uri));
        }
        if self.items_truncated {
            s.push_str("… more actions than listed (see the counts)\n");
        }
        for u in &self.upstreams {
            for set in &u.sets {
                s.push_str(&format!(
                    "{}: {} {}{}\n",
                    u.name,
                    set.mode,
                    set.set,
                    set.reason
                        .as_deref()
                        .map(|r| format!(" ({r})"))
                        .unwrap_or_default()
                ));
            }
            s.push_str(&format!(
                "{}: would fetch {}, create {}, update {}, delete {}; {} unchanged{}\n",
                u.name,
                u.fetch,
                u.create,
                u.update,
                u.delete,
                u.unchanged,
                if u.errors.is_empty() {
                    String::new()
                } else {
                    format!("; not planned completely: {}", u.errors.join("; "))
                }
            ));
        }
        s.push_str("dry run: nothing was fetched but the lists, nothing was written\n");
        s
    }
}

/// What the run would do to a listed entry of a Source, given its record: `--baseline`
/// fetches every listed resource again (spec 10.1: the Resource List is the baseline), and
/// one the list shows unchanged then stays unchanged.
fn listed_action(ctx: &Ctx, e: &UrlEntry, prior: Option<&ResourceRecord>) -> Planned {
    match prior {
        Some(p) if p.status == ResourceStatus::Present => {
            if !unchanged(e, p) {
                Planned::Act(Action::Update)
            } else if ctx.baseline {
                Planned::Refetch
            } else {
                Planned::Unchanged
            }
        }
        _ => Planned::Act(Action::Create),
    }
}

/// What the run would do for a change entry (a Change List's, or one after the Resource
/// List's `at`), given its record: a deletion deletes a present copy, anything else is
/// judged as a listed entry.
fn change_action(ctx: &Ctx, e: &UrlEntry, prior: Option<&ResourceRecord>) -> Planned {
    match change_of(e) {
        Change::Deleted => match prior {
            Some(p) if p.status == ResourceStatus::Present => Planned::Act(Action::Delete),
            _ => Planned::Nothing,
        },
        _ => listed_action(ctx, e, prior),
    }
}

/// Plans a run of `upstreams` against `ctx`'s state (opened read-only by the caller).
/// `ctx.baseline` plans a `run --baseline`.
pub async fn plan(
    ctx: Arc<Ctx>,
    upstreams: &[UpstreamConfig],
    max_items: usize,
) -> Result<PlanReport, Error> {
    let mut report = PlanReport {
        dry_run: true,
        ..PlanReport::default()
    };
    for up in upstreams {
        report.upstreams.push(UpstreamPlan {
            name: up.name.clone(),
            ..UpstreamPlan::default()
        });
        let mut discovered = UpstreamReport::new(&up.name);
        let found = discover_sets(&ctx, up, &mut discovered, None).await;
        let Some((access, sets)) = found else {
            if let Some(u) = report.upstreams.last_mut() {
                u.errors = discovered.error.into_iter().collect();
            }
            continue;
        };
        let h = Harvest::unbounded(ctx.clone(), Arc::new(up.clone()), access);
        for set in &sets {
            if let Err(e) = plan_set(&h, set, max_items, &mut report).await
                && let Some(u) = report.upstreams.last_mut()
            {
                u.errors.push(format!("set {}: {e}", set.url));
            }
        }
    }
    Ok(report)
}

fn set_plan(
    report: &mut PlanReport,
    set: &CapabilitySet,
    mode: &'static str,
    reason: Option<String>,
) {
    if let Some(u) = report.upstreams.last_mut() {
        u.sets.push(SetPlan {
            set: set.url.to_string(),
            mode,
            reason,
        });
    }
}

async fn plan_set(
    h: &Harvest,
    set: &CapabilitySet,
    max: usize,
    report: &mut PlanReport,
) -> Result<(), Error> {
    if h.up.is_oai() {
        return plan_oai_set(h, set, max, report).await;
    }
    let cp = h.ctx.state.checkpoint(&h.up.name, set.url.as_str()).await?;
    let Some(cp) = cp.filter(|c| c.baseline_at.is_some()) else {
        set_plan(report, set, "baseline", None);
        return plan_resync(h, set, max, report).await;
    };
    if h.ctx.baseline {
        set_plan(report, set, "resync", Some("run --baseline".into()));
        return plan_resync(h, set, max, report).await;
    }
    let Some(cl) = set.get(Capability::ChangeList) else {
        let reason = if set.get(Capability::ChangeDump).is_some() {
            "changes come from a Change Dump, not simulated: planned from the Resource List"
        } else {
            "no Change List or Change Dump"
        };
        set_plan(report, set, "resync", Some(reason.into()));
        return plan_resync(h, set, max, report).await;
    };
    let followed = cp
        .changelist
        .as_deref()
        .and_then(|u| Url::parse(u).ok())
        .unwrap_or_else(|| cl.clone());
    let docs = h.docs();
    let mut doc = docs.open(&followed).await?;
    if crate::lists::archive_of(doc.header()).is_some() {
        set_plan(
            report,
            set,
            "resync",
            Some("changes come from a Change List Archive, not simulated: planned from the Resource List".into()),
        );
        return plan_resync(h, set, max, report).await;
    }
    let mut lists = Vec::new();
    let mut first = None;
    match doc.header().root {
        Root::Urlset => {
            lists.push(doc.url.clone());
            first = Some(doc);
        }
        Root::Sitemapindex => lists = lists_after(index_parts(&mut doc).await?, &cp),
    }
    // The changes after the checkpoint, the last of each URI winning (as the run applies
    // them: earlier ones are superseded); at most `MAX_LATER_URIS` resources over all the
    // lists, as for the changes after a Resource List's `at`.
    let mut later = Later::after_checkpoint();
    let mut gap_checked = false;
    for list in lists {
        let mut d = match first.take() {
            Some(d) => d,
            None => docs.open(&list).await?,
        };
        let header = d.header().clone();
        let ordered = read_changes(&mut d, &list).await?;
        if !gap_checked {
            gap_checked = true;
            let from = header.md.as_ref().and_then(|m| m.from);
            if let Some((oldest, done)) = gap_before(from, &ordered, &cp) {
                set_plan(
                    report,
                    set,
                    "resync",
                    Some(format!(
                        "the Change List starts at {oldest}, after the checkpoint {done}"
                    )),
                );
                return plan_resync(h, set, max, report).await;
            }
        }
        for (t, e) in ordered {
            if !cp.covers(t.as_ref(), &seen_key(&e)) {
                later.note(&list, t, e)?;
            }
        }
    }
    set_plan(
        report,
        set,
        "incremental",
        Some(format!("{} change(s) after the checkpoint", later.len())),
    );
    for e in later.into_entries() {
        let uri = e.loc.trim().to_owned();
        let prior = h.ctx.state.resource(&h.up.name, &uri).await?;
        let action = change_action(&h.ctx, &e, prior.as_ref());
        report.plan(max, &h.up.name, uri, action);
    }
    Ok(())
}

/// A baseline or re-sync's plan: the upstream's state (the Resource List, and the changes
/// after its `at` that the run applies next) against the state, then the present records of
/// the set neither names.
/// One set of an OAI-PMH upstream: the run's own decision of what the pass asks
/// ([`Harvest::oai_pass`]), then each record of that list judged as the run judges it, and
/// after a whole list that is not the first, the deletions of what it no longer names.
async fn plan_oai_set(
    h: &Harvest,
    set: &CapabilitySet,
    max: usize,
    report: &mut PlanReport,
) -> Result<(), Error> {
    let pass = h.oai_pass(set).await?;
    let whole = pass.scope == crate::oai::Scope::Full;
    let mode = match (&pass.cp, whole) {
        (None, _) => "baseline",
        (Some(_), true) => "resync",
        (Some(_), false) => "incremental",
    };
    set_plan(report, set, mode, pass.relist_reason(h.ctx.baseline));
    let upstream = h.up.name.clone();
    let mut listed = Listed::new(h.ctx.listed);
    let (tx, rx) = tokio::sync::mpsc::channel(crate::lists::ENTRIES_AHEAD);
    let consumer = async {
        let mut rx = rx;
        while let Some((e, deleted)) = rx.recv().await {
            let e: UrlEntry = e;
            let uri = e.loc.trim().to_owned();
            let prior = h.ctx.state.resource(&upstream, &uri).await?;
            let action = if deleted {
                match prior {
                    Some(p) if p.status == ResourceStatus::Present => Planned::Act(Action::Delete),
                    _ => Planned::Nothing,
                }
            } else {
                listed.insert(&upstream, &uri)?;
                // A record's bytes come with the listing (section 3.5): the run compares
                // them with the copy and fetches nothing more, `--baseline` or not.
                match listed_action(&h.ctx, &e, prior.as_ref()) {
                    Planned::Refetch => Planned::Unchanged,
                    other => other,
                }
            };
            report.plan(max, &upstream, uri, action);
        }
        Ok::<_, Error>(())
    };
    let (produced, consumed) = futures::join!(h.oai_entries(set, pass.first.clone(), tx), consumer);
    consumed?;
    produced?;
    if whole && pass.cp.is_some() {
        plan_unlisted(h, set, listed, max, report).await?;
    }
    Ok(())
}

async fn plan_resync(
    h: &Harvest,
    set: &CapabilitySet,
    max: usize,
    report: &mut PlanReport,
) -> Result<(), Error> {
    let Some(list_url) = set.get(Capability::ResourceList).cloned() else {
        return Err(Error::Upstream {
            url: set.url.to_string(),
            section: "10",
            message: "no Resource List to baseline from".into(),
        });
    };
    let upstream = h.up.name.clone();
    let mut listed = Listed::new(h.ctx.listed);
    // The resources changed after the list's `at` are left to the changes, as the run
    // leaves them (`later.rs`): planned by their last change, never from their stale entry,
    // nor deleted for being unlisted.
    let later = h
        .later_changes(set, &list_url, true)
        .await?
        .map(|(_, later)| later)
        .unwrap_or_else(Later::none);
    let later_ref = &later;
    let docs = h.docs();
    let (producer, entries) = docs.read_entries(&list_url);
    let consumer = async {
        let entries = entries.filter(|(_, e)| std::future::ready(!later_ref.contains(&e.loc)));
        let mut looked_up = std::pin::pin!(
            entries
                .map(|(_, e)| {
                    let (state, upstream) = (&h.ctx.state, upstream.as_str());
                    async move {
                        let prior = state.resource(upstream, e.loc.trim()).await;
                        (e, prior)
                    }
                })
                .buffered(h.ctx.fetch.concurrency.max(1))
        );
        while let Some((e, prior)) = looked_up.next().await {
            let uri = e.loc.trim().to_owned();
            // A URI listed twice is planned twice (the run stores it once): telling would
            // mean holding the whole list.
            listed.insert(&upstream, &uri)?;
            report.plan(
                max,
                &upstream,
                uri,
                listed_action(&h.ctx, &e, prior?.as_ref()),
            );
        }
        Ok::<_, Error>(())
    };
    let (header, consumed) = futures::join!(producer, consumer);
    consumed?;
    header?;
    for e in later.into_entries() {
        let uri = e.loc.trim().to_owned();
        listed.insert(&upstream, &uri)?;
        let prior = h.ctx.state.resource(&upstream, &uri).await?;
        let action = change_action(&h.ctx, &e, prior.as_ref());
        report.plan(max, &upstream, uri, action);
    }
    plan_unlisted(h, set, listed, max, report).await
}

/// The deletions a whole list plans: the present records of `set`, of its own upstream, it
/// did not name. The other upstreams' records are theirs to judge (they feed the same
/// collection from lists of their own), and a record of an upstream no longer in the
/// pipeline is not deleted by a run either.
async fn plan_unlisted(
    h: &Harvest,
    set: &CapabilitySet,
    listed: Listed,
    max: usize,
    report: &mut PlanReport,
) -> Result<(), Error> {
    let only: HashSet<String> = std::iter::once(h.up.name.clone()).collect();
    listed
        .unlisted(
            &h.ctx.state,
            &only,
            &only,
            Some(set.url.as_str()),
            None,
            |up, uri, _| {
                if up != h.up.name {
                    return;
                }
                report.add(
                    max,
                    PlanItem {
                        upstream: up,
                        action: Action::Delete,
                        uri,
                    },
                );
            },
        )
        .await?;
    Ok(())
}
