//! The operator commands (`docs/contract.md`): `rsagg audit`, `rsagg quarantine
//! list|retry`, `rsagg gc`; `rsagg run --dry-run` is in `run.rs`.
//!
//! Exit status: `audit` 0 in sync, 1 not (or some upstream could not be audited), 2 usage,
//! config or store error. `quarantine list` 0, 2. `quarantine retry` 0 every retried
//! resource verified, 1 some is still quarantined or failed, 2, 3 fenced out. `gc` 0
//! collected (or not due), 1 the collection failed, 2, 3 fenced out. Each exits 2 on a
//! store that holds no collection (never run, or a mistyped `[store] url`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use rsagg_pipeline::{AuditOptions, Pipeline, RunOptions, StoreFailure as _};

/// `rsagg audit`.
#[derive(Debug, clap::Args)]
pub struct AuditArgs {
    /// The pipeline file.
    pipeline: PathBuf,
    /// Also read every stored blob back and re-hash it: against its address (corrupt) and
    /// the upstream's announced hashes (changed). Reads the whole collection.
    #[arg(long)]
    read_data: bool,
    /// Also fetch every listed resource from its upstream and compare its bytes with the
    /// copy: finds an upstream that changed bytes without changing its list. One request
    /// per resource.
    #[arg(long)]
    fetch: bool,
    /// Discrepancies listed at most (all are counted).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    max_items: usize,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// `rsagg quarantine`.
#[derive(Debug, clap::Args)]
pub struct QuarantineArgs {
    #[command(subcommand)]
    command: QuarantineCommand,
}

#[derive(Debug, clap::Subcommand)]
enum QuarantineCommand {
    /// List the quarantined resources (state read-only). With --json one JSON object per
    /// line, `[]` when none is quarantined.
    ///
    /// Exit status: 0 listed, 2 usage, config or store error.
    List {
        /// The pipeline file.
        pipeline: PathBuf,
        /// One JSON object per line on stdout (`[]` when there is none).
        #[arg(long)]
        json: bool,
    },
    /// Fetch the quarantined resources again against their upstream's current Resource
    /// List, then publish. Opens the state as the writer (like `run`).
    ///
    /// Exit status: 0 every retried resource verified (released), 1 some is still
    /// quarantined, failed or is no longer listed, 2 usage or config error, 3 fenced out.
    Retry {
        /// The pipeline file.
        pipeline: PathBuf,
        /// Only this upstream's.
        #[arg(long, value_name = "NAME")]
        upstream: Option<String>,
        /// Only this resource (its upstream URI).
        #[arg(long, value_name = "URI")]
        uri: Option<String>,
        /// Print the report (a run report) as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// `rsagg gc`.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// The pipeline file.
    pipeline: PathBuf,
    /// Collect now, whether or not `gc_interval` has passed since the last collection (or
    /// the first is due).
    #[arg(long)]
    force: bool,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn load(cmd: &str, path: &Path) -> Result<Pipeline, ExitCode> {
    Pipeline::load(path).map_err(|e| {
        eprintln!("rsagg {cmd}: {e}");
        ExitCode::from(2)
    })
}

/// Prints `text` on stdout (a closed stdout is not an error worth failing for).
pub fn print(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if out
        .write_all(rsagg_model::redact(text).as_bytes())
        .and_then(|()| out.flush())
        .is_err()
    {
        tracing::debug!("stdout is closed");
    }
}

/// JSON of `v` and a newline.
pub fn json_line<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).map_or_else(|e| format!("{{\"error\": \"{e}\"}}"), |j| j + "\n")
}

/// `rsagg audit`.
pub async fn audit(args: AuditArgs) -> ExitCode {
    let p = match load("audit", &args.pipeline) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let opts = AuditOptions {
        read_data: args.read_data,
        fetch: args.fetch,
        max_items: args.max_items,
    };
    match rsagg_pipeline::audit(&p, opts).await {
        Ok(report) => {
            print(&if args.json {
                json_line(&report)
            } else {
                report.summary()
            });
            ExitCode::from(if report.in_sync { 0 } else { 1 })
        }
        Err(e) => {
            eprintln!("rsagg audit: {e}");
            ExitCode::from(2)
        }
    }
}

/// `rsagg quarantine list|retry`.
pub async fn quarantine(args: QuarantineArgs) -> ExitCode {
    match args.command {
        QuarantineCommand::List { pipeline, json } => {
            let p = match load("quarantine list", &pipeline) {
                Ok(p) => p,
                Err(code) => return code,
            };
            let listed = rsagg_pipeline::quarantine_list(&p, |r| {
                print(&if json {
                    json_line(&r)
                } else {
                    format!(
                        "{} {} ({}; expected {}, got {}; since {}{})\n",
                        r.upstream,
                        r.uri,
                        r.reason,
                        r.expected,
                        r.got,
                        r.at,
                        r.blob
                            .as_deref()
                            .map(|b| format!("; received bytes kept as blob {b}"))
                            .unwrap_or_default()
                    )
                });
            })
            .await;
            match listed {
                Ok(n) => {
                    if !json {
                        print(&format!("{n} quarantined\n"));
                    } else if n == 0 {
                        // Nothing quarantined is still an answer a JSON reader can parse
                        // (an empty list), not an empty output.
                        print("[]\n");
                    }
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rsagg quarantine list: {e}");
                    ExitCode::from(2)
                }
            }
        }
        QuarantineCommand::Retry {
            pipeline,
            upstream,
            uri,
            json,
        } => {
            let p = match load("quarantine retry", &pipeline) {
                Ok(p) => p,
                Err(code) => return code,
            };
            if let Some(name) = &upstream
                && !p.config.upstreams.iter().any(|u| &u.name == name)
            {
                eprintln!("rsagg quarantine retry: no upstream `{name}` in the pipeline");
                return ExitCode::from(2);
            }
            let opts = RunOptions::default();
            match rsagg_pipeline::quarantine_retry(&p, upstream.as_deref(), uri.as_deref(), &opts)
                .await
            {
                Ok(report) => {
                    print(&if json {
                        json_line(&report)
                    } else {
                        report.summary()
                    });
                    let unsettled = report.upstreams.iter().any(|u| {
                        u.quarantined + u.failed + u.gone > 0
                            || u.warnings.iter().any(|w| w.contains("kept in quarantine"))
                            || u.error.is_some()
                    });
                    ExitCode::from(if unsettled { 1 } else { 0 })
                }
                Err(e) if e.is_fenced() => {
                    eprintln!("rsagg quarantine retry: {e}");
                    ExitCode::from(3)
                }
                Err(e) if e.is_config() => {
                    eprintln!("rsagg quarantine retry: {e}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("rsagg quarantine retry: {e}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

/// `rsagg gc`.
pub async fn gc(args: GcArgs) -> ExitCode {
    let p = match load("gc", &args.pipeline) {
        Ok(p) => p,
        Err(code) => return code,
    };
    match rsagg_pipeline::gc(&p, args.force).await {
        Ok(report) => {
            print(&if args.json {
                json_line(&serde_json::json!({ "collected": report.is_some(), "gc": report }))
            } else {
                match &report {
                    Some(r) => format!(
                        "collected: {} scanned, {} deleted ({} bytes freed), {} kept\n",
                        r.scanned, r.deleted, r.bytes_freed, r.kept
                    ),
                    None => "not due (gc_interval has not passed); --force collects now\n".into(),
                }
            });
            ExitCode::SUCCESS
        }
        Err(e) if e.is_fenced() => {
            eprintln!("rsagg gc: {e}");
            ExitCode::from(3)
        }
        Err(e) if e.is_config() => {
            eprintln!("rsagg gc: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("rsagg gc: {e}");
            ExitCode::from(1)
        }
    }
}
