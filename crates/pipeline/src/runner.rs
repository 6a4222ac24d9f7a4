//! `rsagg run --once`: the upstreams concurrently (at most `--max-upstreams` at once, and
//! bounded by the shared HTTP limits; one upstream's failure does not stop the others), then
//! publish, then the change notifications (prepared from what was published, delivered with
//! a bounded wait), then the run report.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;

use rsagg_fetch::{FetchConfig, Fetcher};
use rsagg_store::{Blobs, State, open_store};

use rsagg_config::Pipeline;
use rsagg_fetch::{DURATION_BOUNDS, FetchCounts};
use rsagg_harvest::{Ctx, harvest};
use rsagg_layout::history::{FetchStats, Histogram, RunHistory, RunTimes};
use rsagg_layout::paths::{STATS_HISTORY, STATS_OBJECT};
use rsagg_layout::report::{NotifyReport, RunReport, RunStats};
use rsagg_model::W3cDateTime;
use rsagg_notify::Notifier;
use rsagg_publish::{PublishOptions, publish};

use crate::Error;

/// Options of a run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Count quarantined resources as a failure (exit 1).
    pub fail_on_quarantine: bool,
    /// How far the run is: resources done and listed, bytes received (for a progress
    /// display; `run --follow` counts over its whole life).
    pub progress: Arc<rsagg_harvest::Progress>,
    /// Options of the publish stage.
    pub publish: PublishOptions,
    /// `run --baseline`: re-sync every set from its Resource List, fetching every resource
    /// again (see [`Ctx::baseline`]).
    pub baseline: bool,
    /// A fleet run's per-host politeness, shared by all its pipelines' HTTP clients (see
    /// [`rsagg_fetch::HostLimits`]); `None`: this pipeline's `[fetch]` limits alone.
    pub hosts: Option<Arc<rsagg_fetch::HostLimits>>,
    /// A bound on upstreams harvested at once (`--max-upstreams`), by all the pipelines of a
    /// fleet together or by one pipeline: each upstream's pass takes a slot first. `None`:
    /// every upstream of the pipeline at once (bounded by its HTTP limits).
    pub upstreams: Option<UpstreamSlots>,
}

/// Slots for upstreams harvested at once, shared by whoever holds a clone.
#[derive(Debug, Clone)]
pub struct UpstreamSlots {
    slots: Arc<tokio::sync::Semaphore>,
    size: usize,
}

impl UpstreamSlots {
    /// `size` slots (at least 1).
    pub fn new(size: usize) -> UpstreamSlots {
        let size = size.max(1);
        UpstreamSlots {
            slots: Arc::new(tokio::sync::Semaphore::new(size)),
            size,
        }
    }
}

/// The store's options from a pipeline's `[store]`: every memory bound of the store and its
/// state, as the store opens them. Built here, not in `rsagg-config`, so that the config
/// does not link the state engine (the defaults live in [`rsagg_config::StoreConfig`]).
pub fn store_options(cfg: &rsagg_config::StoreConfig) -> rsagg_store::StoreOptions {
    let b = cfg.budgets();
    rsagg_store::StoreOptions {
        recent_blob_bytes: b.recent_blob_bytes,
        state_block_cache_bytes: b.state_block_cache_bytes,
        state_meta_cache_bytes: b.state_meta_cache_bytes,
        state_max_unflushed_bytes: b.state_max_unflushed_bytes,
        state_compaction_sst_bytes: b.state_compaction_sst_bytes,
        state_compactions: b.state_compactions,
        retries: cfg.retries,
        retry_timeout: cfg.retry_timeout,
        max_failures: cfg.max_failures,
    }
}

/// What a run works with: the collection's store, its state opened as the writer, and the
/// context every upstream's harvest shares (the HTTP client with the pipeline's `[fetch]`
/// bounds). `run --once` opens them per run, `run --follow` once for its whole life.
pub(crate) async fn open(
    p: &Pipeline,
    opts: &RunOptions,
    run_deadline: Option<tokio::time::Instant>,
) -> Result<(rsagg_store::StoreLocation, Arc<State>, Arc<Ctx>), Error> {
    open_as(p, opts, false, run_deadline).await
}

/// [`open`], with the state opened read-only when `read_only` (`audit`, `run --dry-run`:
/// they must not fence a running writer; see `State::open_read_only`).
pub(crate) async fn open_as(
    p: &Pipeline,
    opts: &RunOptions,
    read_only: bool,
    run_deadline: Option<tokio::time::Instant>,
) -> Result<(rsagg_store::StoreLocation, Arc<State>, Arc<Ctx>), Error> {
    let cfg = &p.config;
    let options = store_options(&cfg.store);
    let loc = if read_only {
        // They write nothing, not even a `file://` store's directory.
        rsagg_store::open_store_read_only(cfg.store.url.as_str(), &options)?
    } else {
        let loc = open_store(cfg.store.url.as_str(), &options)?;
        // A writer spools the bodies it stores for the Resource Dump (`rsagg_store::Spool`);
        // without a spool the dump reads them back, so a spool that cannot be made is said
        // and done without.
        let parent = cfg.store.spool_parent();
        match rsagg_store::Spool::open(&parent, cfg.store.spool_bytes) {
            Ok(spool) => loc.with_spool(spool),
            Err(e) => {
                tracing::warn!(dir = %parent.display(), error = %e,
                    "no spool ([store] spool_dir): the Resource Dump reads the bodies back from the store");
                loc
            }
        }
    };
    let state = Arc::new(if read_only {
        // Bounded as the writer's opening is: the state database retries a failing store
        // without end (a store answering 500 to HEAD hung `audit` with no request in flight,
        // the breaker having tripped), so the breaker or `[store] open_timeout` ends it.
        let opening = State::open_read_only(loc.objects.clone(), cfg.store.url.as_str());
        tokio::select! {
            r = tokio::time::timeout(cfg.store.open_timeout, opening) => match r {
                Ok(r) => r.map_err(|e| store_error(&loc, e))?,
                Err(_) => {
                    return Err(Error::Store(rsagg_store::Error::Unavailable(
                        rsagg_store::StoreFault {
                            store: cfg.store.url.to_string(),
                            kind: rsagg_store::FaultKind::Unreachable,
                            cause: format!(
                                "the state was not opened within {} ([store] open_timeout)",
                                humantime::format_duration(cfg.store.open_timeout)
                            ),
                        },
                    )));
                }
            },
            fault = loc.health.tripped() => {
                return Err(Error::Store(rsagg_store::Error::Unavailable(fault)));
            }
        }
    } else {
        open_state(&loc, p).await?
    });
    let fetcher = Fetcher::sharing(
        FetchConfig {
            max_connections: cfg.fetch.concurrency,
            per_host: cfg.fetch.per_host,
            connect_timeout: cfg.fetch.connect_timeout,
            read_timeout: cfg.fetch.read_timeout,
            idle_timeout: cfg.fetch.idle_timeout,
            body_timeout: cfg.deadlines.body,
            document_timeout: cfg.deadlines.document,
            min_rate: cfg.deadlines.min_rate,
            retries: cfg.fetch.retries,
            backoff_max: Duration::from_secs(30),
            retry_after_max: cfg.fetch.retry_after_max,
            per_host_rate: cfg.fetch.per_host_rate,
            user_agent: cfg.fetch.user_agent(),
            ..FetchConfig::default()
        },
        opts.hosts.clone(),
    )?;
    let ctx = Arc::new(Ctx {
        fetcher,
        blobs: Blobs::for_location(&loc),
        state: state.clone(),
        fetch: cfg.fetch.clone(),
        progress: opts.progress.clone(),
        baseline: opts.baseline,
        deadlines: cfg.deadlines.clone(),
        run_deadline,
        listed: rsagg_harvest::SeenLimits::of(&cfg.store),
        identified: rsagg_harvest::IdentifyCache::default(),
    });
    Ok((loc, state, ctx))
}

/// Opens the collection's state as the writer, bounded: the state database retries its
/// store without end, so a store that refuses access (401/403) or that does not answer ends
/// the run here (the store's breaker, or `[store] open_timeout`) instead of hanging.
async fn open_state(loc: &rsagg_store::StoreLocation, p: &Pipeline) -> Result<State, Error> {
    let cfg = &p.config.store;
    let url = cfg.url.as_str();
    // A local store answers at once: saying that rsagg waits for it is noise there.
    if !matches!(cfg.url.scheme(), "file" | "memory") {
        tracing::info!(
            store = %rsagg_model::Redacted(url),
            timeout = %humantime::format_duration(cfg.open_timeout),
            "opening the state: waiting for the store to answer (the state database under state/)"
        );
    }
    let started = Instant::now();
    let options = store_options(cfg);
    // Fenced out later, the store refuses every write and the run ends (exit 3).
    let opening = State::open_fenced(loc.objects.clone(), url, &options, loc.health.clone());
    let state = tokio::select! {
        r = tokio::time::timeout(cfg.open_timeout, opening) => match r {
            Ok(r) => r.map_err(|e| store_error(loc, e))?,
            Err(_) => {
                return Err(Error::Store(rsagg_store::Error::Unavailable(
                    rsagg_store::StoreFault {
                        store: rsagg_model::redact(url).into_owned(),
                        kind: rsagg_store::FaultKind::Unreachable,
                        cause: format!(
                            "the state was not opened within {} ([store] open_timeout)",
                            humantime::format_duration(cfg.open_timeout)
                        ),
                    },
                )));
            }
        },
        fault = loc.health.tripped() => {
            return Err(Error::Store(rsagg_store::Error::Unavailable(fault)));
        }
    };
    tracing::info!(
        store = %rsagg_model::Redacted(url),
        ms = started.elapsed().as_millis() as u64,
        "state opened"
    );
    Ok(state)
}

/// Whether a pass whose upstreams ended as `upstreams` may publish the collection: once it
/// has been published (its Capability List exists), always, so a failing upstream does not
/// freeze what the others bring; before that, only when some upstream completed its pass.
/// Otherwise a first run whose upstreams all failed would publish an empty (or partial)
/// collection, which Destinations would take as the Source's state: an empty Resource List
/// says every resource is gone (spec 10).
pub(crate) async fn may_publish(
    loc: &rsagg_store::StoreLocation,
    upstreams: &[rsagg_layout::report::UpstreamReport],
) -> bool {
    use object_store::ObjectStoreExt;
    if upstreams.iter().any(|u| u.ok()) {
        return true;
    }
    let list = object_store::path::Path::from(rsagg_layout::paths::CAPABILITY_LIST);
    match loc.objects.head(&list).await {
        Err(object_store::Error::NotFound { .. }) => {
            tracing::warn!(
                "not publishing: no upstream has completed a pass yet, and the collection was never published (the next run that completes one publishes it)"
            );
            false
        }
        // Published before, or the store cannot tell: publishing reports its own errors.
        _ => true,
    }
}

/// A store error, or the breaker's fault when it tripped (which says why, in one line).
pub(crate) fn store_error(loc: &rsagg_store::StoreLocation, e: rsagg_store::Error) -> Error {
    match loc.health.fault() {
        Some(f) if !e.is_fenced() => Error::Store(rsagg_store::Error::Unavailable(f.clone())),
        _ => Error::Store(e),
    }
}

/// Runs `work` unless the store's breaker trips first, or another writer fences this one
/// out: then the run ends at once, whatever step it is in, with the fault (exit 1) or as
/// fenced (exit 3). What was committed stays; the next run resumes from it.
pub(crate) async fn unless_tripped<T>(
    loc: &rsagg_store::StoreLocation,
    work: impl Future<Output = T>,
) -> Result<T, Error> {
    tokio::select! {
        biased;
        fault = loc.health.tripped() => Err(Error::Store(rsagg_store::Error::Unavailable(fault))),
        path = loc.health.fenced_out() => Err(Error::Store(rsagg_store::Error::Fenced { path })),
        r = work => Ok(r),
    }
}

/// Checks that the run still holds the state before it writes what others read (documents,
/// stats, history, notifications): a writer fenced out meanwhile stops here (exit 3) rather
/// than overwrite what the current writer published.
async fn hold(loc: &rsagg_store::StoreLocation, state: &State) -> Result<(), Error> {
    unless_tripped(loc, state.hold())
        .await?
        .map_err(|e| store_error(loc, e))
}

/// `r`, or fenced when the store says this writer was fenced out: then whatever failed (a
/// write the store refused, a read of a state closed for it) failed because of the fence,
/// and the exit status is 3, not 1.
pub(crate) fn fenced_or<T>(
    loc: &rsagg_store::StoreLocation,
    r: Result<T, Error>,
) -> Result<T, Error> {
    match (loc.health.fenced(), r) {
        (Some(path), Ok(_) | Err(_)) => Err(Error::Store(rsagg_store::Error::Fenced {
            path: path.to_owned(),
        })),
        (None, r) => r,
    }
}

/// Runs the pipeline once. Errors are reserved for what stops the whole run (store cannot be
/// opened, fenced); upstream failures are in the report.
pub async fn run_once(p: &Pipeline, opts: &RunOptions) -> Result<RunReport, Error> {
    let started = Instant::now();
    let started_at = W3cDateTime::now();
    let cfg = &p.config;
    let run_deadline = cfg
        .deadlines
        .run
        .map(|d| tokio::time::Instant::from_std(started) + d);
    let (loc, state, ctx) = open(p, opts, run_deadline).await?;
    let r = pass(p, opts, &loc, state, ctx, started, started_at).await;
    fenced_or(&loc, r)
}

/// [`run_once`] once the state is open.
async fn pass(
    p: &Pipeline,
    opts: &RunOptions,
    loc: &rsagg_store::StoreLocation,
    state: Arc<State>,
    ctx: Arc<Ctx>,
    started: Instant,
    started_at: W3cDateTime,
) -> Result<RunReport, Error> {
    let cfg = &p.config;
    // An upstream's harvest is a large future (its parsers, buffers, requests): they are
    // made as slots free up, at most `size` at a time, not all at once (one pipeline of 4,000
    // upstreams held every one of them: 227 MiB for a pass that found nothing new).
    let in_flight = opts
        .upstreams
        .as_ref()
        .map_or(cfg.upstreams.len(), |s| s.size)
        .max(1);
    // Owned items and a `move` closure: a stream over borrowed items makes a future that
    // is not `Send` for every lifetime, which a spawned run needs.
    let items: Vec<(usize, Arc<_>)> = cfg
        .upstreams
        .iter()
        .map(|u| Arc::new(u.clone()))
        .enumerate()
        .collect();
    let (all_ctx, all_slots) = (ctx.clone(), opts.upstreams.clone());
    let harvests = futures::stream::iter(items)
        .map(move |(i, u)| {
            let ctx = all_ctx.clone();
            let slots = all_slots.clone();
            async move {
                // Shared by a fleet's pipelines (never closed, so this cannot fail).
                let _permit = match slots {
                    Some(s) => s.slots.acquire_owned().await.ok(),
                    None => None,
                };
                (i, harvest(ctx, u).await)
            }
        })
        .buffer_unordered(in_flight)
        .collect::<Vec<_>>();
    let mut upstreams = unless_tripped(loc, harvests).await?;
    // In the configuration's order, as the report lists them.
    upstreams.sort_by_key(|(i, _)| *i);
    let upstreams: Vec<_> = upstreams.into_iter().map(|(_, r)| r).collect();
    let harvest_seconds = started.elapsed().as_secs_f64();
    let fetcher = ctx.fetcher.clone();
    drop(ctx);
    let fenced = upstreams
        .iter()
        .find(|u| u.fenced)
        .and_then(|u| u.error.clone());
    let mut report = RunReport {
        collection: cfg.collection.name.clone(),
        upstreams,
        publish: None,
        notify: None,
        seconds: 0.0,
        push: None,
        store: None,
    };
    if fenced.is_none() {
        // Then publish: what was committed, whichever upstreams failed (but nothing before
        // some upstream has completed a pass).
        if unless_tripped(loc, may_publish(loc, &report.upstreams)).await? {
            hold(loc, &state).await?;
            let published_seq = state.last_seq().await;
            // The state is closed right after: its flush may overlap the end of the publish.
            let publishing = PublishOptions {
                flush_state: true,
                ..opts.publish
            };
            let published = unless_tripped(loc, publish(&state, loc, p, publishing)).await?;
            hold(loc, &state).await?;
            // Then notify: only of what that publish made fetchable (see
            // `notify::after_publish`).
            report.notify = match Notifier::new(loc.objects.clone(), p) {
                Ok(Some(n)) => Some(
                    unless_tripped(
                        loc,
                        rsagg_notify::after_publish(&n, &state, published_seq, &published),
                    )
                    .await?,
                ),
                Ok(None) => None,
                Err(e) => Some(NotifyReport {
                    errors: vec![e.to_string()],
                    ..NotifyReport::default()
                }),
            };
            report.publish = Some(published);
        }
        report.seconds = started.elapsed().as_secs_f64();
        report.store = Some(loc.counters.snapshot());
        hold(loc, &state).await?;
        unless_tripped(loc, write_stats(&loc.objects, &state, &report)).await?;
        let times = RunTimes {
            started: started_at,
            finished: W3cDateTime::now(),
            harvest_seconds,
        };
        unless_tripped(
            loc,
            record_history(
                &loc.objects,
                &report,
                &times,
                &fetch_stats(&fetcher.counts()),
                cfg.collection.history_runs,
            ),
        )
        .await?;
    }
    if let Ok(state) = Arc::try_unwrap(state) {
        unless_tripped(loc, state.close())
            .await?
            .map_err(|e| store_error(loc, e))?;
    }
    // The whole run's requests, the stats object and the state's last flush included.
    report.store = Some(loc.counters.snapshot());
    if let Some(path) = fenced {
        tracing::error!("{path}");
        return Err(Error::Store(rsagg_store::Error::Fenced {
            path: cfg.store.url.to_string(),
        }));
    }
    Ok(report)
}

/// Quarantine records copied into the stats object at most.
const STATS_QUARANTINE: usize = 1000;

/// The first [`STATS_QUARANTINE`] quarantine records of the state, and whether there are
/// more. A failure is logged: the stats object is a view, the state has the records.
async fn stats_quarantine(state: &State) -> (Vec<rsagg_store::QuarantineRecord>, bool) {
    let mut quarantine = Vec::new();
    let mut truncated = false;
    match state.quarantine().await {
        Ok(mut q) => loop {
            match q.next().await {
                Ok(Some(r)) if quarantine.len() < STATS_QUARANTINE => quarantine.push(r),
                Ok(Some(_)) => {
                    truncated = true;
                    break;
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(error = %rsagg_model::ErrorChain(&e), "reading quarantine for the stats object");
                    break;
                }
            }
        },
        Err(e) => {
            tracing::warn!(error = %rsagg_model::ErrorChain(&e), "reading quarantine for the stats object")
        }
    }
    (quarantine, truncated)
}

/// Writes [`STATS_OBJECT`]. A failure is logged, not fatal: the harvest itself is committed.
pub(crate) async fn write_stats(
    objects: &Arc<dyn object_store::ObjectStore>,
    state: &State,
    report: &RunReport,
) {
    let (quarantine, quarantine_truncated) = stats_quarantine(state).await;
    let stats = RunStats {
        finished: Some(rsagg_model::W3cDateTime::now()),
        report: report.clone(),
        quarantine,
        quarantine_truncated,
    };
    put_stats(objects, &stats).await;
}

/// Stats objects larger than this are not read back to be refreshed: a run's report and
/// [`STATS_QUARANTINE`] records take far less.
const STATS_MAX_BYTES: u64 = 64 * 1024 * 1024;

/// Refreshes the quarantine of [`STATS_OBJECT`] from the state after an operator command
/// changed it (`quarantine retry`), keeping the last run's report, its time and its store
/// counters as they are: the status page and `/metrics` describe the last run, and an
/// operator command is not one. Without a stats object (no run finished yet) nothing is
/// written. A failure is logged, not fatal.
pub(crate) async fn refresh_stats_quarantine(
    objects: &Arc<dyn object_store::ObjectStore>,
    state: &State,
) {
    use object_store::ObjectStoreExt;
    let path = object_store::path::Path::from(STATS_OBJECT);
    let mut stats = match objects.get(&path).await {
        Ok(r) if r.meta.size > STATS_MAX_BYTES => {
            tracing::warn!(
                size = r.meta.size,
                "{STATS_OBJECT} is too large to refresh; left as it is"
            );
            return;
        }
        Ok(r) => match r
            .bytes()
            .await
            .map(|b| serde_json::from_slice::<RunStats>(&b))
        {
            Ok(Ok(stats)) => stats,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "{STATS_OBJECT} cannot be read; left as it is");
                return;
            }
            Err(e) => {
                tracing::warn!(error = %rsagg_model::ErrorChain(&e), "reading {STATS_OBJECT}");
                return;
            }
        },
        Err(object_store::Error::NotFound { .. }) => return,
        Err(e) => {
            tracing::warn!(error = %rsagg_model::ErrorChain(&e), "reading {STATS_OBJECT}");
            return;
        }
    };
    (stats.quarantine, stats.quarantine_truncated) = stats_quarantine(state).await;
    put_stats(objects, &stats).await;
}

async fn put_stats(objects: &Arc<dyn object_store::ObjectStore>, stats: &RunStats) {
    let body = match serde_json::to_vec_pretty(stats) {
        Ok(b) => redacted(b),
        Err(e) => {
            tracing::warn!(error = %rsagg_model::ErrorChain(&e), "encoding the stats object");
            return;
        }
    };
    let path = object_store::path::Path::from(STATS_OBJECT);
    if let Err(e) = object_store::ObjectStoreExt::put(objects.as_ref(), &path, body.into()).await {
        tracing::warn!(error = %rsagg_model::ErrorChain(&e), "writing {STATS_OBJECT}");
    }
}

/// A stats object's JSON with the credentials of every URL in it hidden
/// ([`rsagg_model::redact()`]): `serve` shows these objects on its public `/status` page and
/// in `/metrics`, and reports quote configured URLs (an upstream's `user:password@`, a store's
/// or hub's) and error texts that embed them.
fn redacted(body: Vec<u8>) -> Vec<u8> {
    match String::from_utf8(body) {
        Ok(text) => match rsagg_model::redact(&text) {
            std::borrow::Cow::Borrowed(_) => text.into_bytes(),
            std::borrow::Cow::Owned(o) => o.into_bytes(),
        },
        Err(e) => e.into_bytes(),
    }
}

/// The layout's form of what an HTTP client did (for the history object).
pub(crate) fn fetch_stats(c: &FetchCounts) -> FetchStats {
    FetchStats {
        requests: c
            .outcomes()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
        retries: c.retries,
        bytes: c.bytes,
        duration: Histogram {
            bounds: DURATION_BOUNDS.to_vec(),
            counts: c.duration_buckets.to_vec(),
            sum: c.duration_sum,
        },
    }
}

/// History objects larger than this are not read back (a damaged or foreign object): the
/// history starts afresh rather than the job reading without bound. The most points
/// `collection.history_runs` allows (10,000) and the totals take less.
const HISTORY_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// Adds a run (or poll pass) to [`STATS_HISTORY`], keeping the last `kept` points
/// (`collection.history_runs`): read, record, write back. One writer
/// per collection (the job), so no lost update. A failure is logged, not fatal: the harvest
/// is committed; an object that cannot be read or decoded is replaced by a fresh history
/// (counters then restart, which Prometheus takes as a reset).
pub(crate) async fn record_history(
    objects: &Arc<dyn object_store::ObjectStore>,
    report: &RunReport,
    times: &RunTimes,
    fetch: &FetchStats,
    kept: usize,
) {
    use object_store::ObjectStoreExt;
    let path = object_store::path::Path::from(STATS_HISTORY);
    let mut history = match objects.get(&path).await {
        Ok(r) if r.meta.size > HISTORY_MAX_BYTES => {
            tracing::warn!(
                size = r.meta.size,
                "{STATS_HISTORY} is too large; starting a new history"
            );
            RunHistory::default()
        }
        Ok(r) => match r
            .bytes()
            .await
            .map(|b| serde_json::from_slice::<RunHistory>(&b))
        {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "{STATS_HISTORY} cannot be decoded; starting a new history");
                RunHistory::default()
            }
            Err(e) => {
                tracing::warn!(error = %e, "reading {STATS_HISTORY}; not recording this run");
                return;
            }
        },
        Err(object_store::Error::NotFound { .. }) => RunHistory::default(),
        Err(e) => {
            tracing::warn!(error = %e, "reading {STATS_HISTORY}; not recording this run");
            return;
        }
    };
    history.record(report, times, fetch, kept);
    let body = match serde_json::to_vec(&history) {
        Ok(b) => redacted(b),
        Err(e) => {
            tracing::warn!(error = %e, "encoding {STATS_HISTORY}");
            return;
        }
    };
    if let Err(e) = objects.put(&path, body.into()).await {
        tracing::warn!(error = %e, "writing {STATS_HISTORY}");
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const PIPELINE: &str = r#"
[collection]
name = "maps"
base_url = "https://agg.example.org/maps/"

[store]
url = "file:///tmp/rsagg-test-maps"

[[upstream]]
name = "museum"
url = "https://museum.example.org/.well-known/resourcesync"
"#;

    /// The config's defaults (kept there so that it does not link the store) are the
    /// store's own: a pipeline without `[store]` bounds opens the store as the store's
    /// defaults say, and the spool gets the store's default capacity.
    #[test]
    fn store_options_default_to_the_stores_own() {
        let p = Pipeline::parse(Path::new("p.toml"), PIPELINE).unwrap();
        assert_eq!(
            store_options(&p.config.store),
            rsagg_store::StoreOptions::default()
        );
        assert_eq!(
            p.config.store.spool_bytes,
            rsagg_store::Spool::DEFAULT_CAPACITY
        );
        assert_eq!(
            rsagg_config::StoreConfig::default_budgets().recent_blob_bytes,
            rsagg_store::RecentBlobs::DEFAULT_CAPACITY
        );
    }

    #[test]
    fn store_options_carry_every_setting() {
        let text = PIPELINE.replace(
            "url = \"file:///tmp/rsagg-test-maps\"",
            "url = \"file:///tmp/rsagg-test-maps\"\nrecent_blob_bytes = 7\nstate_block_cache_bytes = 0\nstate_meta_cache_bytes = 1024\nstate_max_unflushed_bytes = 1048576\nstate_compaction_sst_bytes = 2097152\nstate_compactions = 5\nretries = 1\nretry_timeout = \"5s\"\nmax_failures = 2",
        );
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        assert_eq!(
            store_options(&p.config.store),
            rsagg_store::StoreOptions {
                recent_blob_bytes: 7,
                state_block_cache_bytes: 0,
                state_meta_cache_bytes: 1024,
                state_max_unflushed_bytes: 1 << 20,
                state_compaction_sst_bytes: 2 << 20,
                state_compactions: 5,
                retries: 1,
                retry_timeout: Duration::from_secs(5),
                max_failures: 2,
            }
        );
    }
}
