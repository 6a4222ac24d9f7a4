//! Fleet runs: many pipelines in one process (`rsagg run P.toml… | DIR`), spread over
//! workers by shard (`--shard I/N`).
//!
//! Each pipeline is run as `run --once` runs it: its own store, state (opened as the writer,
//! so fencing holds per pipeline) and report; the fleet opens, runs and closes at most
//! `max_pipelines` of them at once, so a worker's memory is bounded by that number times a
//! pipeline's own bounds (`[store]`), never by how many pipelines it is given. One
//! pipeline failing, being fenced out or having an invalid file never stops the others.
//! What is shared: the per-host politeness ([`rsagg_fetch::HostLimits`]: requests in flight
//! per host and the spacing of requests per host, for all pipelines together) and a bound on
//! upstreams harvested at once.
//!
//! Shards: a pipeline's identity is its file's name without `.toml` ([`identity`]); shard `I`
//! of `N` runs the pipelines whose identity hashes to `I` by rendezvous (highest random
//! weight) hashing ([`shard_of`]): the assignment depends on the identity and `N` alone, so
//! adding or removing a pipeline never moves another, and going from `N` to `N + 1` shards
//! moves only the pipelines the new shard takes (about `1 / (N + 1)` of them).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use rsagg_store::StoreFailure as _;
use tracing::Instrument;

use crate::runner::{RunOptions, run_once};
use crate::{Error, Pipeline};

/// A worker's share of the fleet: shard `index` of `count` (`--shard I/N`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    /// From 0.
    pub index: u32,
    /// At least 1.
    pub count: u32,
}

/// The environment variable Kubernetes sets in each pod of an Indexed Job (`completionMode:
/// Indexed`) to the pod's completion index, from 0: the shard when only `--shards N` is given.
pub const COMPLETION_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

impl Shard {
    /// Parses `I/N` (`0 <= I < N`).
    pub fn parse(text: &str) -> Result<Shard, String> {
        let (i, n) = text
            .split_once('/')
            .ok_or_else(|| format!("`{text}`: expected I/N, e.g. 0/4"))?;
        let count: u32 = n
            .trim()
            .parse()
            .map_err(|_| format!("`{text}`: N is not a number"))?;
        let index: u32 = i
            .trim()
            .parse()
            .map_err(|_| format!("`{text}`: I is not a number"))?;
        Shard::new(index, count).map_err(|e| format!("`{text}`: {e}"))
    }

    /// Shard `index` of `count`, checked.
    pub fn new(index: u32, count: u32) -> Result<Shard, String> {
        if count == 0 {
            return Err("the number of shards must be at least 1".into());
        }
        if index >= count {
            return Err(format!(
                "shard {index} does not exist among {count} (they are 0 to {})",
                count - 1
            ));
        }
        Ok(Shard { index, count })
    }

    /// Shard `index` of `count`, the index read from `index` (the value of
    /// [`COMPLETION_INDEX_ENV`], `None` when unset).
    pub fn from_completion_index(index: Option<&str>, count: u32) -> Result<Shard, String> {
        let text = index.ok_or_else(|| {
            format!("--shards {count} without --shard needs {COMPLETION_INDEX_ENV} (set by a Kubernetes Indexed Job)")
        })?;
        let index: u32 = text
            .trim()
            .parse()
            .map_err(|_| format!("{COMPLETION_INDEX_ENV}=`{text}` is not a number"))?;
        Shard::new(index, count)
    }

    /// True when the pipeline of this identity is this shard's.
    pub fn owns(&self, identity: &str) -> bool {
        shard_of(identity, self.count) == self.index
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// A pipeline's identity for sharding: its file's name without the `.toml` extension (by
/// convention the collection's name). Read without parsing the file, so a worker decides
/// what is its own without reading the others' files, and a file that does not parse still
/// belongs to exactly one shard (which reports it).
pub fn identity(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The rendezvous weight of `identity` on `shard`: FNV-1a over the identity's bytes, a zero
/// byte and the shard number (little-endian), then SplitMix64's finaliser (FNV alone mixes
/// the last bytes poorly). Written out here, not a library's hasher, because the assignment
/// must never change between versions or platforms: a changed hash would move pipelines
/// between workers.
pub fn weight(identity: &str, shard: u32) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut h = OFFSET;
    for b in identity
        .bytes()
        .chain(std::iter::once(0))
        .chain(shard.to_le_bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(PRIME);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The shard (of `count`) that runs the pipeline of `identity`: the one of highest
/// [`weight`] (the lowest number on a tie).
pub fn shard_of(identity: &str, count: u32) -> u32 {
    let mut best = (0u64, 0u32);
    for i in 0..count.max(1) {
        let w = weight(identity, i);
        if i == 0 || w > best.0 {
            best = (w, i);
        }
    }
    best.1
}

/// The pipeline files named by `args`: a file as given, a directory's `*.toml` files (not
/// its subdirectories), in name order. Errors when a directory cannot be read.
pub fn pipeline_files(args: &[PathBuf]) -> Result<Vec<PathBuf>, Error> {
    let mut files = Vec::new();
    for arg in args {
        if arg.is_dir() {
            let read = |e| Error::Files {
                path: arg.clone(),
                source: e,
            };
            let mut found = Vec::new();
            for entry in std::fs::read_dir(arg).map_err(read)? {
                let path = entry.map_err(read)?.path();
                if path.extension().is_some_and(|e| e == "toml") && !path.is_dir() {
                    found.push(path);
                }
            }
            found.sort();
            files.extend(found);
        } else {
            files.push(arg.clone());
        }
    }
    Ok(files)
}

/// How a fleet runs.
#[derive(Debug, Clone)]
pub struct FleetOptions {
    /// Pipelines run at once (each with its state open): the bound of a worker's memory.
    pub max_pipelines: usize,
    /// The options of every pipeline's run; [`fleet_options`] sets the shared parts.
    pub run: RunOptions,
    /// After SIGINT/SIGTERM, how long the pipelines running may still take (none is
    /// started any more); then they are abandoned (what they committed stays).
    pub shutdown_grace: Duration,
}

/// [`RunOptions`] for the pipelines of a fleet: `run`, plus the per-host politeness and the
/// bound on upstreams in flight that all of them share.
pub fn fleet_options(
    mut run: RunOptions,
    per_host: usize,
    per_host_rate: Option<f64>,
    max_upstreams: usize,
) -> RunOptions {
    run.hosts = Some(Arc::new(rsagg_fetch::HostLimits::new(
        per_host,
        per_host_rate,
    )));
    run.upstreams = Some(crate::UpstreamSlots::new(max_upstreams));
    run
}

/// How one pipeline's run ended, as its own `rsagg run` would exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// Exit 0.
    Ok,
    /// Exit 1: some upstream, publish step or delivery failed, or the store failed.
    Failed,
    /// Exit 1: cut at shutdown (what it committed stays).
    Abandoned,
    /// Exit 3: fenced out by another writer of its state.
    Fenced,
    /// Exit 2: its file is invalid (nothing was run).
    Invalid,
}

impl Outcome {
    /// The word of the summaries and `--json` (`verdict`).
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Abandoned => "abandoned",
            Outcome::Fenced => "fenced",
            Outcome::Invalid => "invalid",
        }
    }

    /// The exit status the pipeline's own `rsagg run --once` would have.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Ok => 0,
            Outcome::Failed | Outcome::Abandoned => 1,
            Outcome::Invalid => 2,
            Outcome::Fenced => 3,
        }
    }
}

/// What one pipeline of the fleet did: small, so a fleet of thousands reports as it goes.
#[derive(Debug, Clone)]
pub struct PipelineResult {
    /// The pipeline file.
    pub file: PathBuf,
    /// Its `collection.name` (`None` when the file is invalid).
    pub collection: Option<String>,
    /// How it ended.
    pub outcome: Outcome,
    /// Why it did not end well: the first failing upstream's error, a publish or delivery
    /// error, the store's, the config error.
    pub error: Option<String>,
    /// Wall time of its run.
    pub seconds: f64,
    /// Upstreams, and those that failed.
    pub upstreams: usize,
    /// Upstreams whose pass failed.
    pub upstreams_failed: usize,
    /// Resources by outcome, summed over its upstreams: created, updated, deleted,
    /// unchanged, quarantined, gone, failed.
    pub resources: [u64; 7],
    /// The smallest `poll_interval` of its upstreams (`run --follow` of a fleet runs it again
    /// that long after a pass ends); `None` when the file is invalid.
    pub poll_every: Option<Duration>,
    /// The pass did something worth a report in `--follow` ([`crate::RunReport::eventful`]),
    /// or it did not end well.
    pub eventful: bool,
}

/// The names of [`PipelineResult::resources`], in order.
pub const RESOURCE_WORDS: [&str; 7] = [
    "created",
    "updated",
    "deleted",
    "unchanged",
    "quarantined",
    "gone",
    "failed",
];

/// A fleet's totals, as the pipelines' results come in.
#[derive(Debug, Clone, Default)]
pub struct FleetSummary {
    /// Pipelines this worker was to run (its shard's).
    pub pipelines: usize,
    /// Pipelines of the other shards, not run here.
    pub other_shards: usize,
    /// Results by outcome.
    pub ok: usize,
    /// [`Outcome::Failed`].
    pub failed: usize,
    /// [`Outcome::Fenced`].
    pub fenced: usize,
    /// [`Outcome::Invalid`].
    pub invalid: usize,
    /// Cut at shutdown, or never started because of it.
    pub abandoned: usize,
    /// Passes run (`--follow`: over the process's life).
    pub passes: u64,
    /// Wall time.
    pub seconds: f64,
    /// The first [`FleetSummary::MAX_NAMED`] pipelines that did not end well, for the
    /// summary's last lines (every one is also reported as it ends).
    pub not_ok: Vec<(PathBuf, Outcome)>,
}

impl FleetSummary {
    /// Pipelines not ending well named in [`FleetSummary::not_ok`] at most.
    pub const MAX_NAMED: usize = 20;

    fn add(&mut self, r: &PipelineResult) {
        self.passes += 1;
        match r.outcome {
            Outcome::Ok => self.ok += 1,
            Outcome::Failed => self.failed += 1,
            Outcome::Abandoned => self.abandoned += 1,
            Outcome::Fenced => self.fenced += 1,
            Outcome::Invalid => self.invalid += 1,
        }
        if r.outcome != Outcome::Ok && self.not_ok.len() < Self::MAX_NAMED {
            self.not_ok.push((r.file.clone(), r.outcome));
        }
    }

    /// The fleet's exit status: 0 every pipeline ended well; else the status of the gravest
    /// outcome, where what a retry cannot mend comes first: 2 some file is invalid, then 3
    /// some pipeline was fenced out, then 1 some failed or was abandoned. The others ran
    /// and committed in every case.
    pub fn exit_code(&self) -> u8 {
        if self.invalid > 0 {
            2
        } else if self.fenced > 0 {
            3
        } else if self.failed + self.abandoned > 0 {
            1
        } else {
            0
        }
    }
}

/// Resolves once `stop` is set (never, when its sender is gone).
async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs one pipeline file as `run --once` does, within the fleet's shared limits.
pub async fn run_file(path: PathBuf, opts: &RunOptions) -> PipelineResult {
    let started = Instant::now();
    let mut result = PipelineResult {
        file: path,
        collection: None,
        outcome: Outcome::Invalid,
        error: None,
        seconds: 0.0,
        upstreams: 0,
        upstreams_failed: 0,
        resources: [0; 7],
        poll_every: None,
        eventful: true,
    };
    let p = match Pipeline::load(&result.file) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(pipeline = %result.file.display(), error = %rsagg_model::ErrorChain(&e), "pipeline file invalid; not run");
            result.error = Some(e.to_string());
            result.seconds = started.elapsed().as_secs_f64();
            return result;
        }
    };
    let name = p.config.collection.name.clone();
    result.collection = Some(name.clone());
    result.poll_every = p.config.upstreams.iter().map(|u| u.poll_every()).min();
    let span = tracing::info_span!("pipeline", collection = %name);
    let ran = run_once(&p, opts).instrument(span).await;
    result.seconds = started.elapsed().as_secs_f64();
    match ran {
        Ok(report) => {
            result.upstreams = report.upstreams.len();
            for u in &report.upstreams {
                if !u.ok() {
                    result.upstreams_failed += 1;
                    if result.error.is_none() {
                        result.error = Some(format!(
                            "upstream {}: {}",
                            u.name,
                            u.error.as_deref().unwrap_or("failed")
                        ));
                    }
                }
                let counts = [
                    u.created,
                    u.updated,
                    u.deleted,
                    u.unchanged,
                    u.quarantined,
                    u.gone,
                    u.failed,
                ];
                for (sum, n) in result.resources.iter_mut().zip(counts) {
                    *sum += n;
                }
            }
            if result.error.is_none() {
                result.error = report
                    .publish
                    .as_ref()
                    .and_then(|p| p.errors.first())
                    .map(|e| format!("publish: {e}"))
                    .or_else(|| {
                        report
                            .notify
                            .as_ref()
                            .filter(|n| n.failed())
                            .map(|n| format!("notify: {}", n.errors.join("; ")))
                    });
            }
            let code = report.exit_code(false);
            let quarantined = opts.fail_on_quarantine && result.resources[4] > 0;
            result.outcome = if code == 0 && !quarantined {
                Outcome::Ok
            } else {
                if result.error.is_none() && quarantined {
                    result.error = Some("resources were quarantined".into());
                }
                Outcome::Failed
            };
            result.eventful = report.eventful() || result.outcome != Outcome::Ok;
        }
        Err(e) => {
            result.outcome = if e.is_fenced() {
                Outcome::Fenced
            } else {
                Outcome::Failed
            };
            tracing::error!(collection = %name, error = %rsagg_model::ErrorChain(&e), "pipeline run failed");
            result.error = Some(e.to_string());
        }
    }
    result
}

/// `rsagg run P.toml… --once` of a fleet: every file once, at most `max_pipelines` at once,
/// `on_result` called as each ends (in the order they end). After `stop` is set none is
/// started any more; those running get `shutdown_grace`, then are abandoned.
pub async fn run_fleet(
    files: Vec<PathBuf>,
    opts: &FleetOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut on_result: impl FnMut(&PipelineResult),
) -> FleetSummary {
    let started = Instant::now();
    let mut summary = FleetSummary {
        pipelines: files.len(),
        ..FleetSummary::default()
    };
    let mut pending = files.into_iter();
    let mut running = FuturesUnordered::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        while deadline.is_none() && running.len() < opts.max_pipelines.max(1) {
            match pending.next() {
                Some(f) => running.push(run_file(f, &opts.run)),
                None => break,
            }
        }
        if running.is_empty() {
            break;
        }
        tokio::select! {
            Some(r) = running.next() => {
                summary.add(&r);
                on_result(&r);
            }
            () = stopped(&mut stop), if deadline.is_none() => {
                tracing::warn!(
                    running = running.len(),
                    grace = %humantime::format_duration(opts.shutdown_grace),
                    "stopping: no more pipelines are started; those running may finish within the grace"
                );
                deadline = Some(tokio::time::Instant::now() + opts.shutdown_grace);
            }
            () = sleep_until(deadline), if deadline.is_some() => break,
        }
    }
    let abandoned = running.len() + pending.len();
    if abandoned > 0 {
        tracing::warn!(
            abandoned,
            "pipelines abandoned at shutdown; what they committed is kept, the next run goes on"
        );
    }
    summary.abandoned += abandoned;
    summary.seconds = started.elapsed().as_secs_f64();
    summary
}

/// Sleeps until `deadline` (forever without one).
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// How long a pipeline whose file was invalid waits before it is read again in `--follow`.
const INVALID_RETRY: Duration = Duration::from_secs(300);

/// `rsagg run P.toml… --follow` of a fleet: every pipeline is run as by `--once` (its state
/// opened, the pass run, the state closed), then again its smallest `poll_interval` after
/// that pass ended, at most `max_pipelines` at once, until `stop` is set. Memory stays that
/// of `max_pipelines` runs: no state is held open between passes (the price: each pass
/// opens its state again). `on_result` gets every pass's result. The summary's counts are of
/// the last pass of each pipeline; its exit status as [`FleetSummary::exit_code`].
pub async fn follow_fleet(
    files: Vec<PathBuf>,
    opts: &FleetOptions,
    mut stop: tokio::sync::watch::Receiver<bool>,
    mut on_result: impl FnMut(&PipelineResult),
) -> FleetSummary {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let started = Instant::now();
    let now = tokio::time::Instant::now();
    // Every pipeline due now, in file order; then each at its next time.
    let mut due: BinaryHeap<Reverse<(tokio::time::Instant, usize)>> =
        (0..files.len()).map(|i| Reverse((now, i))).collect();
    let mut last: Vec<Option<Outcome>> = vec![None; files.len()];
    let mut in_flight = vec![false; files.len()];
    let mut passes = 0u64;
    let mut running = FuturesUnordered::new();
    let mut deadline: Option<tokio::time::Instant> = None;
    loop {
        let now = tokio::time::Instant::now();
        while deadline.is_none() && running.len() < opts.max_pipelines.max(1) {
            match due.peek() {
                Some(Reverse((t, _))) if *t <= now => {
                    let Some(Reverse((_, i))) = due.pop() else {
                        break;
                    };
                    let file = files[i].clone();
                    let run = &opts.run;
                    in_flight[i] = true;
                    running.push(async move { (i, run_file(file, run).await) });
                }
                _ => break,
            }
        }
        if deadline.is_some() && running.is_empty() {
            break;
        }
        let next_due = due.peek().map(|Reverse((t, _))| *t);
        let wake = if running.len() < opts.max_pipelines.max(1) && deadline.is_none() {
            next_due
        } else {
            None
        };
        if running.is_empty() && wake.is_none() && deadline.is_none() {
            // Nothing running, nothing due (no files): wait for the stop.
            stopped(&mut stop).await;
            break;
        }
        tokio::select! {
            Some((i, r)) = running.next() => {
                passes += 1;
                last[i] = Some(r.outcome);
                in_flight[i] = false;
                let again = if r.outcome == Outcome::Invalid {
                    INVALID_RETRY
                } else {
                    r.poll_every.unwrap_or(INVALID_RETRY)
                };
                due.push(Reverse((tokio::time::Instant::now() + again, i)));
                on_result(&r);
            }
            () = sleep_until(wake), if wake.is_some() => {}
            () = stopped(&mut stop), if deadline.is_none() => {
                tracing::info!(
                    running = running.len(),
                    "stopping: no more passes are started; those running may finish within the grace"
                );
                deadline = Some(tokio::time::Instant::now() + opts.shutdown_grace);
            }
            () = sleep_until(deadline), if deadline.is_some() => break,
        }
    }
    let mut summary = FleetSummary {
        pipelines: files.len(),
        ..FleetSummary::default()
    };
    for (i, outcome) in last.iter().enumerate() {
        // A pass cut at shutdown, or a pipeline never run: abandoned.
        let outcome = match outcome {
            Some(o) if !in_flight[i] => *o,
            _ => Outcome::Abandoned,
        };
        summary.add(&PipelineResult {
            file: files[i].clone(),
            collection: None,
            outcome,
            error: None,
            seconds: 0.0,
            upstreams: 0,
            upstreams_failed: 0,
            resources: [0; 7],
            poll_every: None,
            eventful: false,
        });
    }
    drop(running);
    summary.passes = passes;
    summary.seconds = started.elapsed().as_secs_f64();
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("collection-{i:04}")).collect()
    }

    #[test]
    fn shards_parse_and_check_their_bounds() {
        assert_eq!(Shard::parse("1/4"), Ok(Shard { index: 1, count: 4 }));
        assert_eq!(Shard::parse(" 0 / 1 "), Ok(Shard { index: 0, count: 1 }));
        for bad in ["4/4", "0/0", "1", "a/4", "1/b", "-1/4"] {
            assert!(Shard::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(
            Shard::from_completion_index(Some("3"), 4),
            Ok(Shard { index: 3, count: 4 })
        );
        assert!(Shard::from_completion_index(Some("4"), 4).is_err());
        assert!(Shard::from_completion_index(None, 4).is_err());
        assert!(Shard::from_completion_index(Some("x"), 4).is_err());
        assert_eq!(Shard::parse("2/8").unwrap().to_string(), "2/8");
    }

    /// The hash is part of the contract: a changed weight function would move pipelines
    /// between the workers of a running fleet. These values were computed once, by an
    /// independent implementation of the documented function (FNV-1a 64 over the
    /// identity, a zero byte and the shard as 4 little-endian bytes, then SplitMix64's
    /// finaliser).
    #[test]
    fn the_weights_are_stable() {
        assert_eq!(weight("maps", 0), WEIGHT_MAPS_0);
        assert_eq!(weight("maps", 1), WEIGHT_MAPS_1);
        assert_eq!(weight("", 0), WEIGHT_EMPTY_0);
    }

    const WEIGHT_MAPS_0: u64 = 0xdc68_e7a0_3ad9_75da;
    const WEIGHT_MAPS_1: u64 = 0x2ed8_1483_10ed_934f;
    const WEIGHT_EMPTY_0: u64 = 0xffe8_7603_7f2d_8f9e;

    #[test]
    fn shards_are_balanced() {
        for count in [2u32, 4, 7] {
            let mut per = vec![0usize; count as usize];
            for n in names(4000) {
                per[shard_of(&n, count) as usize] += 1;
            }
            let mean = 4000 / count as usize;
            for (i, &k) in per.iter().enumerate() {
                assert!(
                    k.abs_diff(mean) * 10 < mean,
                    "shard {i} of {count} has {k} of 4000 (mean {mean}): {per:?}"
                );
            }
        }
    }

    #[test]
    fn one_more_shard_moves_only_what_the_new_shard_takes() {
        let all = names(4000);
        let mut moved = 0;
        for n in &all {
            let (before, after) = (shard_of(n, 4), shard_of(n, 5));
            if before != after {
                assert_eq!(
                    after, 4,
                    "{n} moved from {before} to {after}, not to the new shard"
                );
                moved += 1;
            }
        }
        // About a fifth moves (800 of 4000).
        assert!((700..900).contains(&moved), "{moved}");
        // Every pipeline belongs to exactly one shard.
        for n in &all {
            let owners = (0..4)
                .filter(|&i| Shard { index: i, count: 4 }.owns(n))
                .count();
            assert_eq!(owners, 1, "{n}");
        }
    }

    #[test]
    fn identities_are_file_stems_and_directories_give_their_toml_files() {
        assert_eq!(
            identity(Path::new("/etc/rsagg/pipelines/maps.toml")),
            "maps"
        );
        assert_eq!(identity(Path::new("maps")), "maps");
        let dir = tempfile::tempdir().unwrap();
        for f in ["b.toml", "a.toml", "notes.txt"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        std::fs::create_dir(dir.path().join("sub.toml")).unwrap();
        let single = dir.path().join("x.toml");
        let files = pipeline_files(&[dir.path().to_owned(), single.clone()]).unwrap();
        assert_eq!(
            files,
            vec![dir.path().join("a.toml"), dir.path().join("b.toml"), single]
        );
    }

    #[test]
    fn the_exit_status_puts_what_a_retry_cannot_mend_first() {
        let s = |failed, fenced, invalid| FleetSummary {
            failed,
            fenced,
            invalid,
            ..FleetSummary::default()
        };
        assert_eq!(s(0, 0, 0).exit_code(), 0);
        assert_eq!(s(3, 0, 0).exit_code(), 1);
        assert_eq!(s(3, 1, 0).exit_code(), 3);
        assert_eq!(s(3, 1, 1).exit_code(), 2);
        let abandoned = FleetSummary {
            abandoned: 1,
            ..FleetSummary::default()
        };
        assert_eq!(abandoned.exit_code(), 1);
    }
}
