//! `rsagg run P.toml… | DIR [--once | --follow] [--shard I/N | --shards N]`: a fleet run
//! (`docs/contract.md`, `rsagg run` of a fleet). The work is `rsagg_pipeline::fleet`'s; this
//! is the command line around it: which files (the shard's), the shared limits, the lines
//! printed as pipelines end and the summary, the exit status.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use rsagg_pipeline::RunOptions;
use rsagg_pipeline::fleet::{
    COMPLETION_INDEX_ENV, FleetOptions, FleetSummary, Outcome, PipelineResult, RESOURCE_WORDS,
    Shard, fleet_options, follow_fleet, identity, pipeline_files, run_fleet,
};

use crate::run::RunArgs;

/// Runs the fleet the arguments name.
pub async fn run(args: &RunArgs, terminal: bool) -> ExitCode {
    if args.dry_run || args.listen.is_some() || args.limits.probe_listen.is_some() {
        eprintln!(
            "rsagg run: --dry-run, --listen and --probe-listen take one pipeline file (run them per pipeline)"
        );
        return ExitCode::from(2);
    }
    let shard = match shard(args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rsagg run: {e}");
            return ExitCode::from(2);
        }
    };
    let files = match pipeline_files(&args.pipelines) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("rsagg run: {e}");
            return ExitCode::from(2);
        }
    };
    if files.is_empty() {
        eprintln!("rsagg run: no pipeline file (*.toml) in the directories given");
        return ExitCode::from(2);
    }
    let total = files.len();
    let files: Vec<_> = match shard {
        Some(s) => files.into_iter().filter(|f| s.owns(&identity(f))).collect(),
        None => files,
    };
    tracing::info!(
        pipelines = files.len(),
        of = total,
        shard = shard.map(|s| s.to_string()),
        max_pipelines = args.fleet.max_pipelines,
        "fleet run"
    );
    let run = fleet_options(
        RunOptions {
            fail_on_quarantine: args.fail_on_quarantine,
            baseline: args.baseline,
            ..RunOptions::default()
        },
        args.fleet.per_host as usize,
        args.fleet.per_host_rate,
        args.fleet.max_upstreams as usize,
    );
    let opts = FleetOptions {
        max_pipelines: args.fleet.max_pipelines as usize,
        run,
        shutdown_grace: args.shutdown_grace,
    };
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::lifecycle::shutdown().await;
        let _ = stop_tx.send(true);
    });
    let display = crate::progress::Display::start(
        opts.run.progress.clone(),
        terminal,
        args.progress_interval,
        args.follow,
    );
    let follow = args.follow;
    let json = args.json;
    let each = |r: &PipelineResult| {
        // `--follow` reports a pass only when it did something, as for one pipeline.
        if !follow || r.eventful {
            emit(&if json {
                result_json(r) + "\n"
            } else {
                result_line(r)
            });
        }
    };
    let mut summary = if follow {
        follow_fleet(files, &opts, stop, each).await
    } else {
        run_fleet(files, &opts, stop, each).await
    };
    if let Some(d) = display {
        d.finish().await;
    }
    summary.other_shards = total - summary.pipelines;
    emit(&if json {
        summary_json(&summary, shard) + "\n"
    } else {
        summary_text(&summary, shard)
    });
    ExitCode::from(summary.exit_code())
}

/// The shard of `--shard I/N`, or of `--shards N` and `$JOB_COMPLETION_INDEX`.
fn shard(args: &RunArgs) -> Result<Option<Shard>, String> {
    match (&args.fleet.shard, args.fleet.shards) {
        (Some(s), _) => Shard::parse(s).map(Some),
        (None, Some(n)) => {
            let index = std::env::var(COMPLETION_INDEX_ENV).ok();
            Shard::from_completion_index(index.as_deref(), n).map(Some)
        }
        (None, None) => Ok(None),
    }
}

/// Writes `text` on stdout, credentials redacted. A closed stdout is not fatal (the reports
/// are in each store's stats objects).
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    if out
        .write_all(rsagg_model::redact(text).as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        tracing::debug!("stdout is closed; fleet report not printed");
    }
}

fn name_of(r: &PipelineResult) -> String {
    r.collection
        .clone()
        .unwrap_or_else(|| identity(Path::new(&r.file)))
}

/// One pipeline's line of the human summary.
fn result_line(r: &PipelineResult) -> String {
    let word = match r.outcome {
        Outcome::Ok => "ok".to_owned(),
        o => o.word().to_uppercase(),
    };
    let mut line = format!(
        "{word:<9} {} ({}) {:.2}s",
        name_of(r),
        r.file.display(),
        r.seconds
    );
    if r.collection.is_some() {
        line.push_str(&format!(
            ": {} upstream(s){}",
            r.upstreams,
            if r.upstreams_failed > 0 {
                format!(" ({} failed)", r.upstreams_failed)
            } else {
                String::new()
            }
        ));
        for (w, n) in RESOURCE_WORDS.iter().zip(r.resources) {
            if n > 0 || matches!(*w, "created" | "updated" | "deleted") {
                line.push_str(&format!(", {w} {n}"));
            }
        }
    }
    if let Some(e) = &r.error {
        line.push_str(&format!(": {}", rsagg_model::excerpt(e, 1024)));
    }
    line + "\n"
}

/// One pipeline's `--json` line.
fn result_json(r: &PipelineResult) -> String {
    let resources: serde_json::Map<String, serde_json::Value> = RESOURCE_WORDS
        .iter()
        .zip(r.resources)
        .map(|(w, n)| ((*w).to_owned(), n.into()))
        .collect();
    serde_json::json!({
        "file": r.file.display().to_string(),
        "collection": r.collection,
        "verdict": r.outcome.word(),
        "exit": r.outcome.exit_code(),
        "error": r.error,
        "seconds": r.seconds,
        "upstreams": r.upstreams,
        "upstreams_failed": r.upstreams_failed,
        "resources": resources,
    })
    .to_string()
}

/// The fleet's closing `--json` line.
fn summary_json(s: &FleetSummary, shard: Option<Shard>) -> String {
    serde_json::json!({
        "fleet": {
            "pipelines": s.pipelines,
            "shard": shard.map(|s| s.to_string()),
            "other_shards": s.other_shards,
            "ok": s.ok,
            "failed": s.failed,
            "fenced": s.fenced,
            "invalid": s.invalid,
            "abandoned": s.abandoned,
            "passes": s.passes,
            "seconds": s.seconds,
            "exit": s.exit_code(),
        }
    })
    .to_string()
}

/// The fleet's closing lines for people.
fn summary_text(s: &FleetSummary, shard: Option<Shard>) -> String {
    let mut t = format!("fleet: {} pipeline(s)", s.pipelines);
    if let Some(shard) = shard {
        t.push_str(&format!(
            " (shard {shard}; {} in other shards)",
            s.other_shards
        ));
    }
    t.push_str(&format!(
        " in {:.1}s: {} ok, {} failed, {} fenced, {} invalid, {} abandoned; exit {}\n",
        s.seconds,
        s.ok,
        s.failed,
        s.fenced,
        s.invalid,
        s.abandoned,
        s.exit_code()
    ));
    for (file, outcome) in &s.not_ok {
        t.push_str(&format!("  {}: {}\n", outcome.word(), file.display()));
    }
    let named = s.not_ok.len();
    let not_ok = s.pipelines - s.ok;
    if not_ok > named {
        t.push_str(&format!("  … and {} more\n", not_ok - named));
    }
    t
}
