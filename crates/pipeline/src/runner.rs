//! `rsagg run --once`: every upstream concurrently (bounded by the shared HTTP limits; one
//! upstream's failure does not stop the others), then publish, then the change
//! notifications (prepared from what was published, delivered with a bounded wait), then
//! the run report.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use rsagg_fetch::{FetchConfig, Fetcher};
use rsagg_store::{Blobs, RecentBlobs, State, open_object_store};

use crate::harvest::{Ctx, UpstreamReport, Verdict, harvest};
use crate::notify::{Notifier, NotifyReport};
use crate::publisher::{PublishOptions, PublishReport, publish};
use crate::{Error, Pipeline};

/// Options of a run.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Count quarantined resources as a failure (exit 1).
    pub fail_on_quarantine: bool,
    /// Incremented once per resource processed (for a progress display).
    pub progress: Arc<AtomicU64>,
    /// Options of the publish stage.
    pub publish: PublishOptions,
}

/// What a run did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunReport {
    /// Collection name.
    pub collection: String,
    /// Per upstream.
    pub upstreams: Vec<UpstreamReport>,
    /// What the publish stage did (absent when the run was fenced out before it).
    pub publish: Option<PublishReport>,
    /// What the notification step did (absent without `[notify]`, or when the run was
    /// fenced out before it).
    pub notify: Option<NotifyReport>,
    /// Wall time.
    pub seconds: f64,
    /// Push intake counters (`run --follow --listen` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<crate::push::PushStats>,
}

impl RunReport {
    /// Exit status for a scheduler: 0 all went well, 1 some upstream, publish step or
    /// notification delivery failed (the rest was done and committed), per the contract of
    /// `rsagg run`.
    pub fn exit_code(&self, opts: &RunOptions) -> i32 {
        let failed = self.upstreams.iter().any(|u| {
            u.verdict == Verdict::Failed || (opts.fail_on_quarantine && u.quarantined > 0)
        });
        let publish_failed = self.publish.as_ref().is_some_and(|p| !p.errors.is_empty());
        let notify_failed = self.notify.as_ref().is_some_and(NotifyReport::failed);
        i32::from(failed || publish_failed || notify_failed)
    }

    /// Human summary, one line per upstream.
    pub fn summary(&self) -> String {
        let mut s = format!("collection {} ({:.1} s)\n", self.collection, self.seconds);
        if let Some(p) = &self.publish {
            s.push_str(&p.summary());
        }
        if let Some(n) = &self.notify {
            s.push_str(&n.summary());
        }
        if let Some(p) = &self.push {
            s.push_str(&format!(
                "  push: {} subscription(s), {} received, {} applied, dropped {} (signature) {} (unknown) {} (invalid), {} busy, {} gap(s) recovered, latency max {} ms\n",
                p.subscriptions,
                p.received,
                p.applied,
                p.dropped_signature,
                p.dropped_unknown,
                p.dropped_invalid,
                p.busy,
                p.gaps_recovered,
                p.max_latency_ms
            ));
        }
        for u in &self.upstreams {
            s.push_str(&format!(
                "  {:<16} {:<6} created {} updated {} deleted {} unchanged {} replayed {} quarantined {} gone {} failed {}{}\n",
                u.name,
                match u.verdict {
                    Verdict::Ok => "ok",
                    Verdict::Failed => "FAILED",
                },
                u.created,
                u.updated,
                u.deleted,
                u.unchanged,
                u.replayed,
                u.quarantined,
                u.gone,
                u.failed,
                u.route.as_ref().map(|r| format!(" (via {r})")).unwrap_or_default(),
            ));
            for r in &u.resyncs {
                s.push_str(&format!("    re-synced: {r}\n"));
            }
            if let Some(e) = &u.error {
                s.push_str(&format!("    error: {e}\n"));
            }
        }
        s
    }
}

/// What a run works with: the collection's store, its state opened as the writer, and the
/// context every upstream's harvest shares (the HTTP client with the pipeline's `[fetch]`
/// bounds). `run --once` opens them per run, `run --follow` once for its whole life.
pub(crate) async fn open(
    p: &Pipeline,
    opts: &RunOptions,
) -> Result<(rsagg_store::StoreLocation, Arc<State>, Arc<Ctx>), Error> {
    let cfg = &p.config;
    let mut loc = open_object_store(&cfg.store.url)?;
    loc.recent = RecentBlobs::with_capacity(cfg.store.recent_blob_bytes);
    let state = Arc::new(State::open(loc.objects.clone(), &cfg.store.url).await?);
    let fetcher = Fetcher::new(FetchConfig {
        max_connections: cfg.fetch.concurrency,
        per_host: cfg.fetch.per_host,
        connect_timeout: cfg.fetch.connect_timeout,
        read_timeout: cfg.fetch.read_timeout,
        retries: cfg.fetch.retries,
        backoff_max: Duration::from_secs(30),
        ..FetchConfig::default()
    })?;
    let ctx = Arc::new(Ctx {
        fetcher,
        blobs: Blobs::for_location(&loc),
        state: state.clone(),
        fetch: cfg.fetch.clone(),
        progress: opts.progress.clone(),
    });
    Ok((loc, state, ctx))
}

/// Runs the pipeline once. Errors are reserved for what stops the whole run (store cannot be
/// opened, fenced); upstream failures are in the report.
pub async fn run_once(p: &Pipeline, opts: &RunOptions) -> Result<RunReport, Error> {
    let started = Instant::now();
    let cfg = &p.config;
    let (loc, state, ctx) = open(p, opts).await?;
    let upstreams = futures::future::join_all(
        cfg.upstreams
            .iter()
            .map(|u| harvest(ctx.clone(), Arc::new(u.clone()))),
    )
    .await;
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
    };
    if fenced.is_none() {
        // Then publish: what was committed, whichever upstreams failed.
        let published_seq = state.last_seq().await;
        let published = publish(&state, &loc, p, opts.publish).await;
        // Then notify: only of what that publish made fetchable (see `notify::after_publish`).
        report.notify = match Notifier::new(loc.objects.clone(), p) {
            Ok(Some(n)) => {
                Some(crate::notify::after_publish(&n, &state, published_seq, &published).await)
            }
            Ok(None) => None,
            Err(e) => Some(NotifyReport {
                errors: vec![e.to_string()],
                ..NotifyReport::default()
            }),
        };
        report.publish = Some(published);
        report.seconds = started.elapsed().as_secs_f64();
        write_stats(&loc.objects, &state, &report).await;
    }
    if let Ok(state) = Arc::try_unwrap(state) {
        state.close().await?;
    }
    if let Some(path) = fenced {
        tracing::error!("{path}");
        return Err(Error::Store(rsagg_store::Error::Fenced {
            path: cfg.store.url.clone(),
        }));
    }
    Ok(report)
}

/// Where each run leaves its report for `serve` (`/metrics`, `/status`), which reads
/// objects and never opens the state as a writer.
pub const STATS_OBJECT: &str = "stats/last-run.json";
/// Quarantine records copied into the stats object at most.
const STATS_QUARANTINE: usize = 1000;

/// The stats object: the run report, when it ended, and the resources in quarantine (with
/// upstream URI, expected and received), so the status page can show them.
#[derive(Debug, serde::Serialize)]
struct Stats<'a> {
    finished: rsagg_model::W3cDateTime,
    report: &'a RunReport,
    quarantine: Vec<rsagg_store::QuarantineRecord>,
    quarantine_truncated: bool,
}

/// Writes [`STATS_OBJECT`]. A failure is logged, not fatal: the harvest itself is committed.
pub(crate) async fn write_stats(
    objects: &Arc<dyn object_store::ObjectStore>,
    state: &State,
    report: &RunReport,
) {
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
                    tracing::warn!(error = %e, "reading quarantine for the stats object");
                    break;
                }
            }
        },
        Err(e) => tracing::warn!(error = %e, "reading quarantine for the stats object"),
    }
    let stats = Stats {
        finished: rsagg_model::W3cDateTime::now(),
        report,
        quarantine,
        quarantine_truncated: truncated,
    };
    let body = match serde_json::to_vec_pretty(&stats) {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "encoding the stats object");
            return;
        }
    };
    let path = object_store::path::Path::from(STATS_OBJECT);
    if let Err(e) = object_store::ObjectStoreExt::put(objects.as_ref(), &path, body.into()).await {
        tracing::warn!(error = %e, "writing {STATS_OBJECT}");
    }
}
