//! The operator commands: `rsagg audit`, `rsagg run --dry-run`, `rsagg quarantine
//! list|retry`, `rsagg gc`. Those that only look (audit, dry run, quarantine list) open the
//! state read-only, so they never fence a running writer; those that change the store
//! (quarantine retry, gc) open it as the writer, like `run` (a running `run` is then fenced
//! out, exit 3: run them between runs).

use std::sync::Arc;

use rsagg_config::Pipeline;
use rsagg_harvest::audit::{AuditOptions, AuditReport};
use rsagg_harvest::plan::PlanReport;
use rsagg_harvest::retry_quarantined;
use rsagg_layout::report::{GcReport, RunReport};
use rsagg_publish::publish;
use rsagg_store::{QuarantineRecord, State};

use crate::Error;
use crate::runner::{RunOptions, open_as, refresh_stats_quarantine, store_options, unless_tripped};

/// [`Error::NeverRun`] for `p`.
fn never_run(p: &Pipeline) -> Error {
    Error::NeverRun {
        store: rsagg_model::redact(p.config.store.url.as_str()).into_owned(),
        pipeline: p.path.clone(),
    }
}

/// Fails with [`Error::NeverRun`] unless a state was ever written to `p`'s store, before a
/// command that writes opens it (opening as the writer would create an empty state there).
/// Bounded by `[store] open_timeout`, as opening the state is.
async fn never_run_check(p: &Pipeline) -> Result<(), Error> {
    let cfg = &p.config.store;
    let loc = rsagg_store::open_store_read_only(cfg.url.as_str(), &store_options(cfg))?;
    match tokio::time::timeout(cfg.open_timeout, State::exists(loc.objects.as_ref())).await {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => Err(never_run(p)),
        Ok(Err(e)) => Err(Error::Store(e)),
        Err(_) => Err(Error::Store(rsagg_store::Error::Unavailable(
            rsagg_store::StoreFault {
                store: rsagg_model::redact(cfg.url.as_str()).into_owned(),
                kind: rsagg_store::FaultKind::Unreachable,
                cause: format!(
                    "the state was not found within {} ([store] open_timeout)",
                    humantime::format_duration(cfg.open_timeout)
                ),
            },
        ))),
    }
}

/// Closes a state the command opened, if nothing else holds it.
async fn close(state: Arc<State>) -> Result<(), Error> {
    if let Ok(state) = Arc::try_unwrap(state) {
        state.close().await?;
    }
    Ok(())
}

/// Beyond `[store] retry_timeout` (how long the S3 client retries one request), how long an
/// audit waits for one store request before it gives up on the store.
pub const AUDIT_STORE_MARGIN: std::time::Duration = std::time::Duration::from_secs(10);

/// `rsagg audit`: the store against every upstream's current state, its lists and the
/// changes after them (state read-only). A store error, a request that failed or one that
/// did not finish within `[store] retry_timeout` + [`AUDIT_STORE_MARGIN`], ends it with
/// `Err` (exit 2), never with a discrepancy; so does the store's breaker
/// (`[store] max_failures`) tripping.
pub async fn audit(p: &Pipeline, opts: AuditOptions) -> Result<AuditReport, Error> {
    let (loc, state, ctx) = open_as(p, &RunOptions::default(), true, None).await?;
    if state.is_absent() {
        return Err(never_run(p));
    }
    let deadline = p.config.store.retry_timeout + AUDIT_STORE_MARGIN;
    let audited = rsagg_harvest::audit::audit(ctx, &p.config.upstreams, opts, deadline);
    let mut report = unless_tripped(&loc, audited).await??;
    report.collection = p.config.collection.name.clone();
    close(state).await?;
    Ok(report)
}

/// `rsagg run --dry-run [--baseline]`: what the next run would do (state read-only).
pub async fn dry_run(
    p: &Pipeline,
    opts: &RunOptions,
    max_items: usize,
) -> Result<PlanReport, Error> {
    let (loc, state, ctx) = open_as(p, opts, true, None).await?;
    // The state retries a failing store without end: the breaker ends the dry run instead.
    let planned = rsagg_harvest::plan::plan(ctx, &p.config.upstreams, max_items);
    let mut report = unless_tripped(&loc, planned).await??;
    report.collection = p.config.collection.name.clone();
    report.never_run = state.is_absent();
    close(state).await?;
    Ok(report)
}

/// `rsagg quarantine list`: every quarantine record, in key order (upstream, URI), handed
/// to `each` as it is read (state read-only). Returns how many there were.
pub async fn quarantine_list(
    p: &Pipeline,
    mut each: impl FnMut(QuarantineRecord),
) -> Result<u64, Error> {
    let (loc, state, ctx) = open_as(p, &RunOptions::default(), true, None).await?;
    drop(ctx);
    if state.is_absent() {
        return Err(never_run(p));
    }
    let listing = async {
        let mut n = 0;
        let mut q = state.quarantine().await?;
        while let Some(r) = q.next().await? {
            n += 1;
            each(r);
        }
        Ok::<_, rsagg_store::Error>(n)
    };
    // The state retries a failing store without end: the breaker ends the listing instead.
    let n = unless_tripped(&loc, listing).await??;
    close(state).await?;
    Ok(n)
}

/// `rsagg quarantine retry [--upstream NAME] [--uri URI]`: the quarantined resources
/// fetched again against their upstream's current list; when one was stored, the collection
/// is published (so the copies that verified are served). The quarantine shown by the stats
/// object is refreshed, the last run's report in it is kept: an operator command is not a run
/// (`/status` and `/metrics` go on describing the last run). The report has the shape of a
/// run's: per upstream what became of the retried resources; with nothing quarantined it
/// retries, publishes and writes nothing.
pub async fn quarantine_retry(
    p: &Pipeline,
    upstream: Option<&str>,
    uri: Option<&str>,
    opts: &RunOptions,
) -> Result<RunReport, Error> {
    let started = std::time::Instant::now();
    let cfg = &p.config;
    never_run_check(p).await?;
    let (loc, state, ctx) = open_as(p, opts, false, None).await?;
    let mut report = RunReport {
        collection: cfg.collection.name.clone(),
        upstreams: Vec::new(),
        publish: None,
        notify: None,
        seconds: 0.0,
        push: None,
        store: None,
    };
    for up in cfg
        .upstreams
        .iter()
        .filter(|u| upstream.is_none_or(|n| n == u.name))
    {
        let r = retry_quarantined(ctx.clone(), Arc::new(up.clone()), uri).await;
        let fenced = r.fenced;
        report.upstreams.push(r);
        if fenced {
            return Err(Error::Store(rsagg_store::Error::Fenced {
                path: cfg.store.url.to_string(),
            }));
        }
    }
    drop(ctx);
    let touched = |u: &rsagg_layout::report::UpstreamReport| {
        u.created + u.updated + u.unchanged + u.quarantined + u.gone + u.failed
    };
    let stored: u64 = report.upstreams.iter().map(|u| u.created + u.updated).sum();
    let retried: u64 = report.upstreams.iter().map(touched).sum();
    if retried > 0 {
        // Still the writer? One fenced out meanwhile publishes nothing (exit 3).
        state.hold().await?;
        if stored > 0 {
            report.publish = Some(publish(&state, &loc, p, opts.publish).await);
        }
        refresh_stats_quarantine(&loc.objects, &state).await;
    }
    report.seconds = started.elapsed().as_secs_f64();
    close(state).await?;
    report.store = Some(loc.counters.snapshot());
    // Fenced at any point (the store then refused the writes): exit 3, not a report.
    crate::runner::fenced_or(&loc, Ok(report))
}

/// The OAI-PMH upstream `name` of `p` (or each one, without a name).
fn oai_upstreams<'p>(
    p: &'p Pipeline,
    name: Option<&str>,
) -> Result<Vec<&'p rsagg_config::UpstreamConfig>, Error> {
    let ups: Vec<_> = p
        .config
        .upstreams
        .iter()
        .filter(|u| name.is_none_or(|n| n == u.name))
        .collect();
    if let Some(n) = name {
        match ups.first() {
            None => {
                return Err(Error::Usage(format!(
                    "{}: no upstream `{n}` (upstreams: {})",
                    p.path.display(),
                    p.config
                        .upstreams
                        .iter()
                        .map(|u| u.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            Some(u) if !u.is_oai() => {
                return Err(Error::Usage(format!(
                    "{}: upstream `{n}` is not an OAI-PMH upstream (kind = \"oai-pmh\")",
                    p.path.display()
                )));
            }
            Some(_) => {}
        }
    }
    Ok(ups.into_iter().filter(|u| u.is_oai()).collect())
}

/// `rsagg oai windows [--upstream NAME]`: each OAI-PMH set's pass, its date windows and
/// where each stands, from the state alone (read-only).
pub async fn oai_windows(
    p: &Pipeline,
    upstream: Option<&str>,
) -> Result<Vec<rsagg_harvest::oai_ops::SetWindows>, Error> {
    let ups: Vec<_> = oai_upstreams(p, upstream)?.into_iter().cloned().collect();
    let (loc, state, ctx) = open_as(p, &RunOptions::default(), true, None).await?;
    drop(ctx);
    if state.is_absent() {
        return Err(never_run(p));
    }
    let listed =
        unless_tripped(&loc, rsagg_harvest::oai_ops::windows(&state, &ups, None)).await??;
    close(state).await?;
    Ok(listed)
}

/// `rsagg oai reharvest --upstream NAME [--set SPEC] --from T [--until T]`: the range marked
/// in each chosen set's pass as a window the next run lists again (state as the writer).
pub async fn oai_reharvest(
    p: &Pipeline,
    upstream: &str,
    set: Option<&str>,
    from: rsagg_model::W3cDateTime,
    until: Option<rsagg_model::W3cDateTime>,
) -> Result<Vec<rsagg_harvest::oai_ops::SetWindows>, Error> {
    let up = oai_upstreams(p, Some(upstream))?[0].clone();
    never_run_check(p).await?;
    let (loc, state, ctx) = open_as(p, &RunOptions::default(), false, None).await?;
    drop(ctx);
    let marked = rsagg_harvest::oai_ops::reharvest(&state, &up, set, from, until).await;
    close(state).await?;
    crate::runner::fenced_or(&loc, Ok(marked?))
}

/// `rsagg oai refetch --upstream NAME ID…`: the records asked again by `GetRecord` and
/// stored now; when one was stored, the collection is published (as `quarantine retry`).
pub async fn oai_refetch(
    p: &Pipeline,
    upstream: &str,
    identifiers: &[String],
    opts: &RunOptions,
) -> Result<RunReport, Error> {
    let started = std::time::Instant::now();
    let up = oai_upstreams(p, Some(upstream))?[0].clone();
    never_run_check(p).await?;
    let (loc, state, ctx) = open_as(p, opts, false, None).await?;
    let r = rsagg_harvest::oai_ops::refetch(ctx.clone(), Arc::new(up), identifiers).await;
    drop(ctx);
    if r.fenced {
        return Err(Error::Store(rsagg_store::Error::Fenced {
            path: p.config.store.url.to_string(),
        }));
    }
    let stored = r.created + r.updated + r.deleted;
    let mut report = RunReport {
        collection: p.config.collection.name.clone(),
        upstreams: vec![r],
        publish: None,
        notify: None,
        seconds: 0.0,
        push: None,
        store: None,
    };
    if stored > 0 {
        state.hold().await?;
        report.publish = Some(publish(&state, &loc, p, opts.publish).await);
    }
    report.seconds = started.elapsed().as_secs_f64();
    close(state).await?;
    report.store = Some(loc.counters.snapshot());
    crate::runner::fenced_or(&loc, Ok(report))
}

/// `rsagg gc [--force]`: blob garbage collection now if it is due (or at once with
/// `force`); `None` when it is not due. Opens the state as the writer (collection reads
/// what is still referenced and must not race a harvest adding references).
pub async fn gc(p: &Pipeline, force: bool) -> Result<Option<GcReport>, Error> {
    never_run_check(p).await?;
    let (loc, state, ctx) = open_as(p, &RunOptions::default(), false, None).await?;
    drop(ctx);
    let collected =
        rsagg_publish::gc::collect(&state, &loc.objects, &p.config.publish, force).await;
    let closed = close(state).await;
    // Fenced meanwhile (the store then refused the deletions): exit 3, whatever failed.
    crate::runner::fenced_or(&loc, closed.and_then(|()| Ok(collected?)))
}
