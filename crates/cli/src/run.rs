//! `rsagg run` and `rsagg check` (contract of DESIGN.md).
//!
//! Exit status of `run`: 0 all went well; 1 some upstream failed (the rest was done and
//! committed); 2 usage or config error; 3 fenced out by another writer of the same state.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use rsagg_pipeline::{Pipeline, RunOptions, run_once};

/// `rsagg run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The pipeline file (one republished collection).
    pipeline: PathBuf,
    /// One pass, then exit (the default).
    #[arg(long, conflicts_with = "follow")]
    once: bool,
    /// Keep going: harvest again at the upstreams' poll interval until SIGINT/SIGTERM.
    #[arg(long)]
    follow: bool,
    /// Exit 1 when resources were quarantined.
    #[arg(long)]
    fail_on_quarantine: bool,
    /// Print the run report as JSON on stdout.
    #[arg(long)]
    json: bool,
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

/// Runs a pipeline once or continuously.
pub async fn run(args: RunArgs) -> ExitCode {
    let p = match Pipeline::load(&args.pipeline) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rsagg run: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = RunOptions {
        fail_on_quarantine: args.fail_on_quarantine,
        ..RunOptions::default()
    };
    let interval = p
        .config
        .upstreams
        .iter()
        .filter_map(|u| u.poll_interval)
        .min()
        .unwrap_or(Duration::from_secs(300));
    loop {
        let bar = progress_bar(&opts);
        let result = run_once(&p, &opts).await;
        if let Some((bar, ticker)) = bar {
            ticker.abort();
            bar.finish_and_clear();
        }
        let code = match result {
            Ok(report) => {
                if args.json {
                    match serde_json::to_string(&report) {
                        Ok(j) => println!("{j}"),
                        Err(e) => eprintln!("rsagg run: cannot encode the report: {e}"),
                    }
                } else {
                    print!("{}", report.summary());
                }
                report.exit_code(&opts)
            }
            Err(e) if e.is_fenced() => {
                eprintln!("rsagg run: {e}");
                return ExitCode::from(3);
            }
            Err(e) => {
                eprintln!("rsagg run: {e}");
                1
            }
        };
        if !args.follow {
            return ExitCode::from(u8::try_from(code).unwrap_or(1));
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = shutdown() => return ExitCode::from(u8::try_from(code).unwrap_or(1)),
        }
    }
}

/// A spinner with the count and rate of resources processed, on a terminal only (long
/// baselines otherwise look hung).
fn progress_bar(
    opts: &RunOptions,
) -> Option<(indicatif::ProgressBar, tokio::task::JoinHandle<()>)> {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{spinner} {elapsed_precise} {pos} resources ({per_sec})",
    ) {
        bar.set_style(style);
    }
    let counter = opts.progress.clone();
    let b = bar.clone();
    let ticker = tokio::spawn(async move {
        loop {
            b.set_position(counter.load(std::sync::atomic::Ordering::Relaxed));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    Some((bar, ticker))
}

/// Resolves on SIGINT or SIGTERM.
pub(crate) async fn shutdown() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => return std::future::pending().await,
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
