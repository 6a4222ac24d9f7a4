//! One upstream: its access settings, discovery, and each of its sets of resources in turn
//! (baseline, re-sync or incremental, from lists or dumps).

use std::collections::HashSet;
use std::sync::Arc;

use rsagg_fetch::{Access, Auth, CapabilitySet};
use rsagg_model::{Capability, ErrorChain, W3cDateTime};
use rsagg_store::State;
use url::Url;

use crate::Error;
use crate::context::{Ctx, Harvest};
use crate::incremental::Incremental;
use crate::lists::Docs;
use rsagg_config::UpstreamConfig;
use rsagg_layout::report::UpstreamReport;
use rsagg_store::StoreFailure as _;

/// Access settings of an upstream, credentials read from the environment.
pub(crate) fn access_of(up: &UpstreamConfig) -> Result<Access, String> {
    let auth = match (&up.bearer_token_env, &up.basic_auth_env) {
        (Some(var), _) => Some(Auth::Bearer(std::env::var(var).map_err(|_| {
            format!("environment variable `{var}` (bearer_token_env) is not set")
        })?)),
        (None, Some(var)) => {
            let v = std::env::var(var)
                .map_err(|_| format!("environment variable `{var}` (basic_auth_env) is not set"))?;
            let (user, password) = v
                .split_once(':')
                .ok_or_else(|| format!("`{var}` must hold user:password"))?;
            Some(Auth::Basic {
                user: user.to_owned(),
                password: password.to_owned(),
            })
        }
        (None, None) => None,
    };
    let auth_hosts = match &up.auth_hosts {
        Some(h) => h.clone(),
        None => Some(&up.url)
            .and_then(|u| {
                u.host_str().map(|h| match u.port() {
                    Some(p) => format!("{h}:{p}"),
                    None => h.to_owned(),
                })
            })
            .into_iter()
            .collect(),
    };
    Ok(Access {
        allow_private: up.allow_private,
        auth,
        auth_hosts,
        upstream: Some(up.name.clone()),
    })
}

/// Harvests one upstream; never panics or returns early without a report.
pub async fn harvest(ctx: Arc<Ctx>, up_arc: Arc<UpstreamConfig>) -> UpstreamReport {
    harvest_upstream(ctx, up_arc).await.0
}

/// What a poll of one upstream leaves for the follower: the sets of resources discovered
/// (with their change-notification channels) and the prepared harvest, for push passes.
pub struct Polled {
    /// The sets of resources found (with their change-notification channels).
    pub sets: Vec<CapabilitySet>,
    /// The harvest, prepared for push passes (`None` when discovery failed).
    pub harvest: Option<Harvest>,
}

/// [`harvest`], also returning the sets and the prepared harvest (`run --follow`).
pub async fn harvest_upstream(
    ctx: Arc<Ctx>,
    up_arc: Arc<UpstreamConfig>,
) -> (UpstreamReport, Polled) {
    let mut polled = Polled {
        sets: Vec::new(),
        harvest: None,
    };
    let report = harvest_into(ctx, up_arc, &mut polled).await;
    (report, polled)
}

/// Discovery of `up`'s sets of resources (those `capability_lists` selects), with its
/// access settings, bounded by `deadline` (a pass's); `None` after recording the failure in
/// `report`. Shared by the harvest and the operator commands (`audit`, `run --dry-run`,
/// `quarantine retry`).
pub(crate) async fn discover_sets(
    ctx: &Ctx,
    up: &UpstreamConfig,
    report: &mut UpstreamReport,
    deadline: Option<&(tokio::time::Instant, Arc<str>)>,
) -> Option<(Access, Vec<CapabilitySet>)> {
    let access = match access_of(up) {
        Ok(a) => a,
        Err(e) => {
            report.fail(e);
            return None;
        }
    };
    if up.is_oai() {
        let client = crate::oai::OaiClient {
            fetcher: &ctx.fetcher,
            access: &access,
            up,
            max_bytes: ctx.fetch.max_document_bytes,
        };
        let found = within(
            deadline,
            crate::oai::discover(&client, &ctx.identified),
            up,
            report,
        )
        .await?;
        return match found {
            Err(e) => {
                // Kept by the run (not by the operator commands, which write nothing).
                report.parked_until = crate::oai::retry_after_of(&e).map(crate::oai::parked_for);
                report.fail_at(
                    Some(up.url.as_str()),
                    "OAI-PMH discovery failed",
                    &ErrorChain(&e).to_string(),
                );
                None
            }
            Ok(sets) => {
                report.route = Some("OaiPmh".into());
                report.sets = sets.len();
                Some((access, sets))
            }
        };
    }
    let entry = up.url.clone();
    let discovering = rsagg_fetch::discover(&ctx.fetcher, &entry, &access);
    let discovery = match within(deadline, discovering, up, report).await? {
        Ok(d) => d,
        Err(e) => {
            report.fail_at(
                Some(entry.as_str()),
                "discovery failed",
                &ErrorChain(&e).to_string(),
            );
            return None;
        }
    };
    report.route = Some(format!("{:?}", discovery.route));
    tracing::info!(
        upstream = %up.name,
        route = ?discovery.route,
        sets = discovery.capability_lists.len(),
        "discovered"
    );
    for w in discovery.warnings {
        report.warn(w);
    }
    let sets: Vec<CapabilitySet> = discovery
        .capability_lists
        .into_iter()
        .filter(|s| match &up.capability_lists {
            None => true,
            Some(wanted) => wanted.contains(&s.url),
        })
        .collect();
    if sets.is_empty() {
        report.fail(format!(
            "no Capability List found from {entry}{} (spec 8, 9)",
            if up.capability_lists.is_some() {
                " matching capability_lists"
            } else {
                ""
            }
        ));
        return None;
    }
    report.sets = sets.len();
    Some((access, sets))
}

/// `work` bounded by `deadline` (a pass's); `None`, with the failure in `report`, when the
/// deadline came first.
async fn within<T>(
    deadline: Option<&(tokio::time::Instant, Arc<str>)>,
    work: impl std::future::Future<Output = T>,
    up: &UpstreamConfig,
    report: &mut UpstreamReport,
) -> Option<T> {
    let done = match deadline {
        Some((at, _)) => tokio::time::timeout_at(*at, work).await.ok(),
        None => Some(work.await),
    };
    if done.is_none() {
        report.fail(
            Error::PassDeadline {
                upstream: up.name.clone(),
                deadline: deadline.map(|d| d.1.to_string()).unwrap_or_default(),
            }
            .to_string(),
        );
    }
    done
}

async fn harvest_into(
    ctx: Arc<Ctx>,
    up_arc: Arc<UpstreamConfig>,
    polled: &mut Polled,
) -> UpstreamReport {
    let up = &*up_arc;
    let mut report = UpstreamReport::new(&up.name);
    let deadline = pass_deadline(&ctx);
    if up.is_oai()
        && let Some(until) = crate::oai::parked(&ctx.state, up).await
    {
        report.parked_until = Some(until);
        report.fail(format!(
            "parked until {}: the provider asked for no requests before then (Retry-After beyond [fetch] retry_after_max); nothing was asked",
            until.to_utc()
        ));
        return report;
    }
    let Some((access, sets)) = discover_sets(&ctx, up, &mut report, deadline.as_ref()).await else {
        if up.is_oai()
            && let Some(until) = report.parked_until
        {
            crate::oai::park_until(&ctx.state, up, until).await;
        }
        return report;
    };
    let mut quarantined = HashSet::new();
    match ctx.state.quarantine().await {
        Ok(mut q) => loop {
            match q.next().await {
                Ok(Some(r)) if r.upstream == up.name => {
                    quarantined.insert(r.uri);
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    report.fail_at(None, "reading the quarantine", &ErrorChain(&e).to_string());
                    return report;
                }
            }
        },
        Err(e) => {
            report.fail_at(None, "reading the quarantine", &ErrorChain(&e).to_string());
            return report;
        }
    }
    let h = Harvest {
        ctx: ctx.clone(),
        up: up_arc,
        access,
        quarantined: Arc::new(std::sync::Mutex::new(quarantined)),
        deadline,
        skipped: Arc::default(),
    };
    if h.up.is_oai() {
        h.harvest_oai_sets(&sets, &mut report).await;
    }
    for set in sets.iter().filter(|_| !h.up.is_oai()) {
        if let Err(e) = h.harvest_set(set, &mut report).await {
            if e.is_fenced() {
                report.fenced = true;
                report.fail(e.to_string());
                return report;
            }
            report.fail_at(
                Some(set.url.as_str()),
                "harvesting the set failed",
                &ErrorChain(&e).to_string(),
            );
            if e.is_deadline() {
                // The other sets wait for the next run too.
                break;
            }
        }
    }
    let skipped = h.skipped.swap(0, std::sync::atomic::Ordering::Relaxed);
    if skipped > 0 {
        report.skipped = skipped;
        report.warn(format!(
            "{skipped} entries skipped: a URI (<loc> or <rs:ln href>) longer than [fetch] max_uri_bytes = {} bytes (the first are logged with an excerpt)",
            ctx.fetch.max_uri_bytes
        ));
    }
    // Written in UTC (the instant may come from an upstream's zone-less `at`).
    report.checkpoint = oldest_checkpoint(&ctx.state, &h.up.name, &sets)
        .await
        .map(|t| t.to_utc());
    polled.sets = sets;
    // Push passes come later, each bounded per resource, not by this poll's deadline.
    polled.harvest = Some(Harvest {
        deadline: None,
        ..h
    });
    report
}

/// When a pass starting now must end: `[deadlines] pass` from now, or the run's deadline if
/// that comes first; with what it is, for the report.
fn pass_deadline(ctx: &Ctx) -> Option<(tokio::time::Instant, Arc<str>)> {
    let pass = ctx.deadlines.pass;
    let own = tokio::time::Instant::now() + pass;
    let text = |what: &str, d: std::time::Duration| -> Arc<str> {
        format!("[deadlines] {what} = {}", humantime::format_duration(d)).into()
    };
    Some(match (ctx.run_deadline, ctx.deadlines.run) {
        (Some(run), Some(d)) if run < own => (run, text("run", d)),
        _ => (own, text("pass", pass)),
    })
}

/// The oldest checkpoint instant among `sets` of `upstream`; `None` when some set has none
/// (never synchronised) or the state cannot tell.
async fn oldest_checkpoint(
    state: &State,
    upstream: &str,
    sets: &[CapabilitySet],
) -> Option<W3cDateTime> {
    let mut oldest: Option<W3cDateTime> = None;
    for set in sets {
        let t = state
            .checkpoint(upstream, set.url.as_str())
            .await
            .ok()
            .flatten()?
            .instant?;
        if oldest.as_ref().is_none_or(|o| t.cmp_instant(o).is_lt()) {
            oldest = Some(t);
        }
    }
    oldest
}

impl Harvest {
    pub(crate) fn docs(&self) -> Docs<'_> {
        Docs {
            fetcher: &self.ctx.fetcher,
            access: &self.access,
            max_bytes: self.ctx.fetch.max_document_bytes,
            max_uri_bytes: self.ctx.fetch.max_uri_bytes,
            skipped: self.skipped.clone(),
            progress: &self.ctx.progress,
        }
    }

    pub(crate) async fn harvest_set(
        &self,
        set: &CapabilitySet,
        report: &mut UpstreamReport,
    ) -> Result<(), Error> {
        if self.up.is_oai() {
            return self
                .harvest_oai_set(set, &tokio::sync::Mutex::new(report))
                .await;
        }
        let state = &self.ctx.state;
        let set_url = set.url.as_str();
        let cp = state.checkpoint(&self.up.name, set_url).await?;
        let mut just_synced = false;
        let mut cp = match cp {
            Some(cp) if cp.baseline_at.is_some() && !self.ctx.baseline => cp,
            Some(_) if self.ctx.baseline => {
                let why = format!(
                    "{set_url}: re-synced from the Resource List, every resource fetched again (run --baseline)"
                );
                tracing::info!(upstream = %self.up.name, set = %set.url, "{why}");
                report.resyncs.push(why);
                just_synced = true;
                match self.resync(set, true, report).await? {
                    Some(cp) => cp,
                    None => return Ok(()),
                }
            }
            _ => {
                tracing::info!(upstream = %self.up.name, set = %set.url, "baseline");
                just_synced = true;
                match self.baseline(set, report).await? {
                    Some(cp) => cp,
                    None => return Ok(()),
                }
            }
        };
        let source = match (
            set.get(Capability::ChangeList),
            set.get(Capability::ChangeDump),
        ) {
            (Some(cl), _) => Some((cl.clone(), false)),
            (None, Some(cd)) => Some((cd.clone(), true)),
            (None, None) => None,
        };
        let Some((changes, is_dump)) = source else {
            if !just_synced {
                // Without a Change List the only way to see changes is to compare the
                // Resource List again.
                report.resyncs.push(format!(
                    "{set_url}: no Change List or Change Dump; re-synced from the Resource List"
                ));
                tracing::info!(upstream = %self.up.name, set = %set.url, "no Change List: re-sync");
                self.resync(set, true, report).await?;
            }
            return Ok(());
        };
        let mut resynced = false;
        loop {
            let step = if is_dump {
                self.incremental_dump(set, &changes, &mut cp, !resynced, report)
                    .await?
            } else {
                // Where the last run left off (spec 12.1: a Destination follows the list it
                // polls, and from a closed one its successor), else the Capability List's.
                let followed = cp
                    .changelist
                    .as_deref()
                    .and_then(|u| Url::parse(u).ok())
                    .filter(|u| u != &changes);
                match followed {
                    Some(from) => match self
                        .incremental(set, &from, &mut cp, !resynced, report)
                        .await
                    {
                        Err(Error::Fetch(e)) if matches!(e.status(), Some(404 | 410)) => {
                            report.warn(format!(
                                "{from}: the Change List followed last time is gone ({e}); starting from {changes}"
                            ));
                            self.incremental(set, &changes, &mut cp, !resynced, report)
                                .await?
                        }
                        other => other?,
                    },
                    None => {
                        self.incremental(set, &changes, &mut cp, !resynced, report)
                            .await?
                    }
                }
            };
            match step {
                Incremental::Done | Incremental::Next(_) => return Ok(()),
                Incremental::Gap(reason) => {
                    let why = format!("{set_url}: {reason}; re-synced from the Resource List");
                    tracing::warn!(upstream = %self.up.name, "{why}");
                    report.resyncs.push(why);
                    resynced = true;
                    match self.resync(set, true, report).await? {
                        Some(new) => cp = new,
                        None => return Ok(()),
                    }
                }
            }
        }
    }
}
