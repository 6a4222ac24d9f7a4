//! `rsagg oai windows|reharvest|refetch` (`docs/contract.md`, Operator commands): the date
//! windows of the OAI-PMH upstreams' passes, a range marked to be harvested again, records
//! asked again by `GetRecord`.
//!
//! Exit status: `windows` 0 listed, 2 usage, config or store error; `reharvest` 0 marked,
//! 1 the store failed, 2 usage or config error (also a set whose first pass is not
//! complete), 3 fenced out; `refetch` 0 every record stored or found unchanged, 1 some
//! failed or is unknown to the provider, 2, 3.

use std::path::PathBuf;
use std::process::ExitCode;

use rsagg_model::W3cDateTime;
use rsagg_pipeline::{RunOptions, SetWindows, StoreFailure as _};

use crate::ops::{json_line, print};

/// `rsagg oai`.
#[derive(Debug, clap::Args)]
pub struct OaiArgs {
    #[command(subcommand)]
    command: OaiCommand,
}

#[derive(Debug, clap::Subcommand)]
enum OaiCommand {
    /// List each OAI-PMH set's pass: its date windows (pending, done, failed), pages and
    /// records so far, the token a window resumes at (state read-only).
    ///
    /// Exit status: 0 listed, 2 usage, config or store error.
    Windows {
        /// The pipeline file.
        pipeline: PathBuf,
        /// Only this upstream's sets.
        #[arg(long, value_name = "NAME")]
        upstream: Option<String>,
        /// The passes as JSON on stdout (one array).
        #[arg(long)]
        json: bool,
    },
    /// Mark a date range to be harvested again by the next run (a window added to each
    /// set's pass; its records are compared with their copies again). Opens the state as
    /// the writer.
    ///
    /// Exit status: 0 marked, 1 the store failed, 2 usage or config error, 3 fenced out.
    Reharvest {
        /// The pipeline file.
        pipeline: PathBuf,
        /// The OAI-PMH upstream.
        #[arg(long, value_name = "NAME")]
        upstream: String,
        /// Only this set (its setSpec); default every set of the upstream.
        #[arg(long, value_name = "SPEC")]
        set: Option<String>,
        /// The range's first datestamp (YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ), inclusive.
        #[arg(long, value_name = "DATESTAMP", value_parser = datestamp)]
        from: W3cDateTime,
        /// The range's last datestamp, inclusive; default (and at most) the checkpoint.
        #[arg(long, value_name = "DATESTAMP", value_parser = datestamp)]
        until: Option<W3cDateTime>,
        /// The marked passes as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
    /// Ask records again by GetRecord now and store them (found unchanged when the copy
    /// holds their bytes), then publish. Opens the state as the writer.
    ///
    /// Exit status: 0 every record stored or unchanged, 1 some failed or the provider has
    /// no such record, 2 usage or config error, 3 fenced out.
    Refetch {
        /// The pipeline file.
        pipeline: PathBuf,
        /// The OAI-PMH upstream.
        #[arg(long, value_name = "NAME")]
        upstream: String,
        /// The records' OAI identifiers.
        identifiers: Vec<String>,
        /// Also every identifier in this file, one per line (`-`: standard input).
        #[arg(long, value_name = "FILE")]
        from_file: Option<PathBuf>,
        /// Print the report (a run report) as JSON on stdout.
        #[arg(long)]
        json: bool,
    },
}

/// A datestamp argument: a day or a UTC time (OAI-PMH 2.0 section 3.3.1).
fn datestamp(text: &str) -> Result<W3cDateTime, String> {
    match W3cDateTime::parse(text) {
        Ok(t) if text.len() == 10 || text.ends_with('Z') => Ok(t.value),
        _ => Err(format!(
            "`{text}` is not a datestamp: YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ (OAI-PMH 2.0 section 3.3.1)"
        )),
    }
}

/// The exit status of a failed command: 3 fenced, 2 config or usage, else 1.
fn failed(cmd: &str, e: &rsagg_pipeline::Error) -> ExitCode {
    eprintln!("rsagg oai {cmd}: {e}");
    ExitCode::from(if e.is_fenced() {
        3
    } else if e.is_config() {
        2
    } else {
        1
    })
}

/// The passes as text: one line per set, one per window.
fn summary(sets: &[SetWindows]) -> String {
    let mut out = String::new();
    for s in sets {
        out.push_str(&format!(
            "{} {}: checkpoint {}\n",
            s.upstream,
            s.set,
            s.checkpoint
                .map_or_else(|| "none".to_owned(), |c| c.to_utc().to_string())
        ));
        let Some(pass) = &s.pass else {
            out.push_str("  no pass yet\n");
            continue;
        };
        let done = pass
            .windows
            .iter()
            .filter(|w| w.status == rsagg_pipeline::WindowStatus::Done)
            .count();
        out.push_str(&format!(
            "  pass until {}{}{}: {done} of {} windows done{}\n",
            pass.until
                .map_or_else(String::new, |u| u.to_utc().to_string()),
            if pass.full { ", whole list" } else { "" },
            if pass.resumed { ", resumed" } else { "" },
            pass.windows.len(),
            if pass.complete { " (complete)" } else { "" },
        ));
        for w in &pass.windows {
            out.push_str(&format!(
                "  {:<7} {} … {}  pages {} records {}{}{}{}{}\n",
                w.status.as_str(),
                w.from
                    .map_or_else(|| "(start)".to_owned(), |f| f.to_utc().to_string()),
                w.until.map_or_else(String::new, |u| u.to_utc().to_string()),
                w.pages,
                w.records,
                w.complete_list_size
                    .map_or_else(String::new, |n| format!(" of {n}")),
                if w.token.is_some() {
                    " (resumes at its token)"
                } else {
                    ""
                },
                if w.reharvest { " (reharvest)" } else { "" },
                w.error
                    .as_deref()
                    .map_or_else(String::new, |e| format!(": {e}")),
            ));
        }
    }
    if sets.is_empty() {
        out.push_str("no OAI-PMH upstream\n");
    }
    out
}

/// Identifiers of the arguments and of `--from-file`, blank lines skipped.
fn identifiers(args: Vec<String>, file: Option<PathBuf>) -> Result<Vec<String>, String> {
    let mut ids = args;
    if let Some(f) = file {
        let text = if f.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).map_err(|e| format!("stdin: {e}"))?
        } else {
            std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?
        };
        ids.extend(
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(str::to_owned),
        );
    }
    if ids.is_empty() {
        return Err("no identifier given (arguments or --from-file)".into());
    }
    Ok(ids)
}

/// `rsagg oai …`.
pub async fn oai(args: OaiArgs) -> ExitCode {
    match args.command {
        OaiCommand::Windows {
            pipeline,
            upstream,
            json,
        } => {
            let p = match crate::ops::load("oai windows", &pipeline) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match rsagg_pipeline::oai_windows(&p, upstream.as_deref()).await {
                Ok(sets) => {
                    print(&if json {
                        json_line(&sets)
                    } else {
                        summary(&sets)
                    });
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("rsagg oai windows: {e}");
                    ExitCode::from(2)
                }
            }
        }
        OaiCommand::Reharvest {
            pipeline,
            upstream,
            set,
            from,
            until,
            json,
        } => {
            let p = match crate::ops::load("oai reharvest", &pipeline) {
                Ok(p) => p,
                Err(code) => return code,
            };
            match rsagg_pipeline::oai_reharvest(&p, &upstream, set.as_deref(), from, until).await {
                Ok(sets) => {
                    print(&if json {
                        json_line(&sets)
                    } else {
                        format!("marked for the next run:\n{}", summary(&sets))
                    });
                    ExitCode::SUCCESS
                }
                Err(rsagg_pipeline::Error::Harvest(e)) if !e.is_store() => {
                    eprintln!("rsagg oai reharvest: {e}");
                    ExitCode::from(2)
                }
                Err(e) => failed("reharvest", &e),
            }
        }
        OaiCommand::Refetch {
            pipeline,
            upstream,
            identifiers: ids,
            from_file,
            json,
        } => {
            let p = match crate::ops::load("oai refetch", &pipeline) {
                Ok(p) => p,
                Err(code) => return code,
            };
            let ids = match identifiers(ids, from_file) {
                Ok(ids) => ids,
                Err(e) => {
                    eprintln!("rsagg oai refetch: {e}");
                    return ExitCode::from(2);
                }
            };
            match rsagg_pipeline::oai_refetch(&p, &upstream, &ids, &RunOptions::default()).await {
                Ok(report) => {
                    print(&if json {
                        json_line(&report)
                    } else {
                        report.summary()
                    });
                    let unsettled = report.upstreams.iter().any(|u| {
                        u.quarantined + u.failed > 0 || !u.warnings.is_empty() || u.error.is_some()
                    });
                    ExitCode::from(if unsettled { 1 } else { 0 })
                }
                Err(e) => failed("refetch", &e),
            }
        }
    }
}
