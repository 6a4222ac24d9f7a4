//! `rsagg run` and `rsagg check` (`docs/contract.md`).
//!
//! Exit status of `run`: 0 all went well; 1 some upstream failed (the rest was done and
//! committed); 2 usage or config error; 3 fenced out by another writer of the same state.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use rsagg_pipeline::{FollowOptions, Pipeline, RunOptions, StoreFailure as _, run_once};

/// `rsagg run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline file (one republished collection). Several files, or directories (their
    /// `*.toml` files), make a fleet run: every pipeline in this one process, each with its
    /// own store, state and report, at most --max-pipelines at once, one summary at the end.
    #[arg(required = true, value_name = "PIPELINE")]
    pub(crate) pipelines: Vec<PathBuf>,
    // The fleet run's bounds and shard.
    #[command(flatten)]
    pub(crate) fleet: FleetArgs,
    /// One pass, then exit (the default).
    #[arg(long, conflicts_with = "follow")]
    pub(crate) once: bool,
    /// Keep going until SIGINT/SIGTERM: poll each upstream at its poll_interval, apply push
    /// notifications (with --listen), publish after every pass that changed something and
    /// (with `[notify]`) announce it to the hub.
    #[arg(long)]
    pub(crate) follow: bool,
    /// With --follow: also serve what the pipeline publishes (everything `rsagg serve`
    /// serves) on this address (`HOST:PORT`; port 0 picks one, reported on stdout), plus
    /// the WebSub callbacks `{base_url}websub/{upstream}`: upstreams whose Capability List
    /// advertises a change-notification channel are subscribed to (unless `push = false`).
    #[arg(long, requires = "follow")]
    pub(crate) listen: Option<String>,
    // `--header-timeout`, `--max-connections`, `--max-inflight-body-bytes`, `--probe-listen`:
    // the limits and probe listener of the --listen server (without --listen there is no
    // server and they are not used).
    #[command(flatten)]
    pub(crate) limits: crate::lifecycle::LimitArgs,
    /// How long a pass may still run after SIGINT/SIGTERM before it is abandoned (what was
    /// committed stays; the rest is fetched again by the next run).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub(crate) shutdown_grace: Duration,
    /// Exit 1 when resources were quarantined.
    #[arg(long)]
    pub(crate) fail_on_quarantine: bool,
    /// Re-sync every set of every upstream from its Resource List although it has a
    /// checkpoint, fetching every resource again (nothing skipped as unchanged): repairs
    /// copies that went missing or bad, brings back what the Change Lists missed.
    #[arg(long, conflicts_with = "follow")]
    pub(crate) baseline: bool,
    /// Only say what the run would fetch, create, update and delete, from the upstreams'
    /// lists and the state (opened read-only); nothing is fetched but the lists, nothing
    /// written. Exit 0, 1 when some upstream could not be planned, 2 config error.
    #[arg(long, conflicts_with = "follow")]
    pub(crate) dry_run: bool,
    /// With --dry-run: actions listed at most (all are counted).
    #[arg(long, default_value_t = 1000, value_name = "N", requires = "dry_run")]
    pub(crate) max_items: usize,
    /// Print the run report as JSON on stdout. With --follow, a report is printed (as JSON
    /// or as the text summary) only after a pass that did something: an idle poll prints
    /// nothing (its report still goes to the stats object).
    #[arg(long)]
    pub(crate) json: bool,
    /// Off a terminal, log a progress heartbeat this often (target `rsagg::progress`, fields
    /// `done`, `total`, `total_final`, `bytes`, `per_second`, `bytes_per_second`,
    /// `eta_seconds`); `0s` turns it off. With --follow only while a pass is moving. On a
    /// terminal a progress line is shown instead.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration, env = "RSAGG_PROGRESS_INTERVAL")]
    pub(crate) progress_interval: Duration,
}

/// The options of a fleet run (`rsagg run P.toml… | DIR`).
#[derive(Debug, clap::Args)]
#[command(next_help_heading = "Fleet run (several pipelines, or a directory)")]
pub(crate) struct FleetArgs {
    /// Pipelines run at once, each with its state open: a worker's memory is bounded by this
    /// times a pipeline's own bounds ([store]), whatever the number of pipelines.
    #[arg(long, default_value_t = 4, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub(crate) max_pipelines: u32,
    /// Upstreams harvested at once: by all the pipelines of a fleet together, or by one
    /// pipeline's `--once` run (each upstream's harvest holds its parsers and buffers, so
    /// this bounds the memory of one pipeline of many upstreams).
    #[arg(long, default_value_t = 16, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub(crate) max_upstreams: u32,
    /// Requests in flight to one host:port from all the pipelines together (each
    /// pipeline's [fetch] per_host holds as well).
    #[arg(long, default_value_t = 8, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) per_host: u32,
    /// Requests per second to one host from all the pipelines together (default: no fleet
    /// limit). A pipeline's own [fetch] per_host_rate spaces its requests on the same
    /// per-host schedule, so pipelines sharing a host share its rate.
    #[arg(long, value_name = "RATE")]
    pub(crate) per_host_rate: Option<f64>,
    /// Run only the pipelines of shard I of N (0 <= I < N), by rendezvous hashing of each
    /// pipeline's file name without `.toml`: adding a pipeline moves no other.
    #[arg(long, value_name = "I/N", conflicts_with = "shards")]
    pub(crate) shard: Option<String>,
    /// Run only the pipelines of shard $JOB_COMPLETION_INDEX of N (what a Kubernetes
    /// Indexed Job sets in each of its pods).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) shards: Option<u32>,
}

/// `rsagg check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Pipeline files.
    #[arg(required = true)]
    pipelines: Vec<PathBuf>,
}

/// Validates pipeline files: exit 0 when all are valid, 2 otherwise (each error names file,
/// line and key).
pub fn check(args: CheckArgs) -> ExitCode {
    let mut ok = true;
    let mut names = std::collections::HashMap::new();
    for path in &args.pipelines {
        match Pipeline::load(path) {
            Ok(p) => {
                if let Some(other) = names.insert(p.config.collection.name.clone(), path.clone()) {
                    eprintln!(
                        "{}: collection.name: `{}` is also used by {} (names must be unique among served pipelines)",
                        path.display(),
                        p.config.collection.name,
                        other.display()
                    );
                    ok = false;
                } else {
                    println!(
                        "{}: ok (collection {}, {} upstream(s))",
                        path.display(),
                        p.config.collection.name,
                        p.config.upstreams.len()
                    );
                }
            }
            Err(e) => {
                eprintln!("{e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    }
}

impl RunArgs {
    /// Whether this is a fleet run (`fleet.rs`): several pipeline files, a directory, or a
    /// shard option.
    pub(crate) fn is_fleet(&self) -> bool {
        self.pipelines.len() > 1
            || self.pipelines.iter().any(|p| p.is_dir())
            || self.fleet.shard.is_some()
            || self.fleet.shards.is_some()
    }
}

/// Runs one pipeline once or continuously (a fleet goes to `fleet.rs`); `terminal`: stderr
/// is a terminal (progress line rather than heartbeat events).
pub async fn run(args: RunArgs, terminal: bool) -> ExitCode {
    if args.limits.probe_listen.is_some() && args.listen.is_none() {
        eprintln!("rsagg run: --probe-listen needs --listen (the probes are those of its server)");
        return ExitCode::from(2);
    }
    let p = match Pipeline::load(&args.pipelines[0]) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rsagg run: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = RunOptions {
        fail_on_quarantine: args.fail_on_quarantine,
        baseline: args.baseline,
        ..RunOptions::default()
    };
    if args.dry_run {
        return match rsagg_pipeline::dry_run(&p, &opts, args.max_items).await {
            Ok(plan) => {
                crate::ops::print(&if args.json {
                    crate::ops::json_line(&plan)
                } else {
                    plan.summary()
                });
                ExitCode::from(if plan.failed() { 1 } else { 0 })
            }
            Err(e) => {
                eprintln!("rsagg run --dry-run: {e}");
                ExitCode::from(2)
            }
        };
    }
    // One signal listener for the whole process: the passes and the server watch it.
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::lifecycle::shutdown().await;
        let _ = stop_tx.send(true);
    });
    let display = crate::progress::Display::start(
        opts.progress.clone(),
        terminal,
        args.progress_interval,
        args.follow,
    );
    if args.follow {
        let code = follow(&args, &p, opts, stop).await;
        if let Some(d) = display {
            d.finish().await;
        }
        return code;
    }
    // Upstreams harvested at once, as in a fleet: one pipeline of thousands of upstreams
    // would otherwise harvest them all at once (memory and connections growing with them).
    let opts = RunOptions {
        upstreams: Some(rsagg_pipeline::UpstreamSlots::new(
            args.fleet.max_upstreams as usize,
        )),
        ..opts
    };
    let pass = run_once(&p, &opts);
    tokio::pin!(pass);
    let mut stopping = stop.clone();
    let result = tokio::select! {
        r = &mut pass => Some(r),
        () = stopped(&mut stopping) => {
            eprintln!(
                "rsagg run: stopping: the current pass may finish within {}",
                humantime::format_duration(args.shutdown_grace)
            );
            tokio::time::timeout(args.shutdown_grace, pass).await.ok()
        }
    };
    if let Some(d) = display {
        d.finish().await;
    }
    let code = match result {
        None => {
            eprintln!(
                "rsagg run: pass abandoned at shutdown; what it committed is kept, the rest \
                 is fetched again by the next run"
            );
            1
        }
        Some(Ok(report)) => {
            print_report(&args, &report);
            report.exit_code(opts.fail_on_quarantine)
        }
        Some(Err(e)) if e.is_fenced() => {
            eprintln!("rsagg run: {e}");
            3
        }
        Some(Err(e)) if e.is_config() => {
            eprintln!("rsagg run: {e}");
            2
        }
        Some(Err(e)) => {
            eprintln!("rsagg run: {e}");
            1
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Prints a pass's report on stdout. A closed stdout is not fatal (a follower outlives
/// whoever read its first lines): the report is then only in the stats object.
pub(crate) fn print_report(args: &RunArgs, report: &rsagg_pipeline::RunReport) {
    use std::io::Write;
    let text = if args.json {
        match serde_json::to_string(report) {
            Ok(j) => j + "\n",
            Err(e) => {
                eprintln!("rsagg run: cannot encode the report: {e}");
                return;
            }
        }
    } else {
        report.summary()
    };
    let mut out = std::io::stdout().lock();
    if out
        .write_all(rsagg_model::redact(&text).as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        tracing::debug!("stdout is closed; report not printed");
    }
}

/// `run --follow [--listen]`: the pipeline's follower (`rsagg_pipeline::follow`), with the
/// server and its WebSub callbacks in the same process when `--listen` is given.
async fn follow(
    args: &RunArgs,
    p: &Pipeline,
    opts: RunOptions,
    stop: tokio::sync::watch::Receiver<bool>,
) -> ExitCode {
    let inbox = match &args.listen {
        Some(_) => match rsagg_pipeline::Inbox::new(p) {
            Ok(i) => Some(i),
            Err(e) => {
                eprintln!("rsagg run: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let server = match &args.listen {
        Some(listen) => {
            // The WebSub callbacks read the largest bodies this server accepts.
            let limits = match args.limits.limits(rsagg_server::MAX_PAYLOAD_BYTES) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("rsagg run: {e}");
                    return ExitCode::from(2);
                }
            };
            let probes = args.limits.probe_listen.as_deref();
            match start_server(p, listen, probes, limits, inbox.clone(), stop.clone()).await {
                Ok(handle) => Some(handle),
                Err(e) => {
                    eprintln!("rsagg run: {e}");
                    return ExitCode::from(2);
                }
            }
        }
        None => None,
    };
    let fopts = FollowOptions {
        run: opts,
        shutdown_grace: args.shutdown_grace,
        inbox,
    };
    let code = match rsagg_pipeline::follow(p, &fopts, stop.clone(), |r| {
        if r.eventful() {
            print_report(args, r);
        }
    })
    .await
    {
        Ok(code) => code,
        Err(e) if e.is_fenced() => {
            eprintln!("rsagg run: {e}");
            3
        }
        Err(e) if e.is_config() => {
            eprintln!("rsagg run: {e}");
            2
        }
        Err(e) => {
            eprintln!("rsagg run: {e}");
            1
        }
    };
    if let Some(server) = server {
        if *stop.borrow() {
            // Shutting down on the same signal: in-flight responses get a moment to finish.
            let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
        } else {
            // Fenced out: this process must stop, its server with it.
            server.abort();
        }
    }
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Resolves once the stop flag is set.
pub(crate) async fn stopped(stop: &mut tokio::sync::watch::Receiver<bool>) {
    // An error means the sender is gone, which never happens while the process runs.
    let _ = stop.wait_for(|s| *s).await;
}

/// Serves what `p` publishes on `listen` (`run --follow --listen`), with the WebSub
/// callbacks of its upstreams when `inbox` is given, within `limits`, until `stop` is set;
/// with `probes`, `/healthz` and `/readyz` also on that address (`--probe-listen`). Prints
/// `probes http://HOST:PORT` (with `probes`) and `listening http://HOST:PORT` once
/// connections are accepted.
async fn start_server(
    p: &Pipeline,
    listen: &str,
    probes: Option<&str>,
    limits: rsagg_server::Limits,
    inbox: Option<std::sync::Arc<rsagg_pipeline::Inbox>>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<tokio::task::JoinHandle<()>, String> {
    let collection = rsagg_server::Collection::from_pipeline(p).map_err(|e| e.to_string())?;
    let push = inbox.map(|intake| rsagg_server::Push {
        collection: p.config.collection.name.clone(),
        stats: Some({
            let inbox = intake.clone();
            std::sync::Arc::new(move || inbox.stats()) as rsagg_server::LivePushStats
        }),
        intake,
    });
    let server = rsagg_server::Server::bind_with(listen, vec![collection], push)
        .await
        .map_err(|e| e.to_string())?
        .with_limits(limits);
    let server = match probes {
        Some(probes) => server
            .bind_probes(probes)
            .await
            .map_err(|e| format!("--probe-listen: {e}"))?,
        None => server,
    };
    let addr = server.local_addr().map_err(|e| e.to_string())?;
    let probes = server.probe_addr().map_err(|e| e.to_string())?;
    crate::lifecycle::announce_probes(probes).map_err(|e| format!("stdout: {e}"))?;
    crate::lifecycle::announce(addr).map_err(|e| format!("stdout: {e}"))?;
    Ok(tokio::spawn(async move {
        let mut stop = stop;
        if let Err(e) = server.run(async move { stopped(&mut stop).await }).await {
            tracing::error!(error = %e, "the server stopped");
        }
    }))
}
