//! `rsagg validate PATH|URL [--strict] [--json]`: parse and check one document;
//! `rsagg validate --source URL …`: walk a whole Source (`rsagg-validate`).

use std::io::Write;
use std::process::ExitCode;

use rsagg_model::{Mode, Problem, Rule, Severity};
use rsagg_sitemap::{DocumentReader, Error, ReadOptions};
use serde::Serialize;

use crate::input;

/// Arguments of `rsagg validate`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["target", "source"])))]
pub struct Args {
    /// File path, `-` for standard input, or http(s) URL. Gzip input is inflated.
    pub target: Option<String>,
    /// Walk the whole Source from this URL (its Source Description,
    /// `/.well-known/resourcesync`, or a Capability List): every list, index, part, dump
    /// package and manifest, and the rules between them.
    #[arg(long, value_name = "URL", conflicts_with = "target")]
    pub source: Option<String>,
    // No `default_value_t` on the options that need --source: clap does not hold an
    // argument with a default to its `requires`. The defaults are `rsagg_validate::Options`'.
    /// With --source: documents fetched at most (lists, parts, packages, manifest copies;
    /// default 10000).
    #[arg(long, value_name = "N", requires = "source")]
    pub max_documents: Option<u64>,
    /// With --source: fetch this many resources of the Resource List(s), a seeded choice,
    /// and check their hash, length and type (default 0).
    #[arg(long, value_name = "N", requires = "source")]
    pub sample: Option<u64>,
    /// With --source: the seed of the sample's choice (default 0).
    #[arg(long, value_name = "N", requires = "source")]
    pub seed: Option<u64>,
    /// With --source: allow private, loopback and link-local addresses (a Source on
    /// 127.0.0.1).
    #[arg(long, requires = "source")]
    pub allow_private: bool,
    /// With --source: also check this Change Notification payload file (repeatable): each
    /// as a document, and their from/until consecutive.
    #[arg(long, value_name = "FILE", requires = "source")]
    pub notification: Vec<std::path::PathBuf>,
    /// Judge as rsagg's own output: every deviation from the spec is an error. Without it,
    /// known quirks of upstream Sources are warnings.
    #[arg(long)]
    pub strict: bool,
    /// Print one JSON object instead of human-readable lines.
    #[arg(long)]
    pub json: bool,
    /// Refuse documents larger than this many bytes (after gzip inflation). With --source:
    /// the bytes read by the whole walk (each document bounded by it too).
    #[arg(long, default_value_t = 1 << 30, value_name = "BYTES")]
    pub max_bytes: u64,
    /// Refuse documents with more entries than this.
    #[arg(long, default_value_t = 10_000_000, value_name = "N")]
    pub max_entries: u64,
    /// Report at most this many problems (all are counted).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub max_problems: usize,
}

#[derive(Debug, Serialize)]
struct Report {
    valid: bool,
    document: DocumentInfo,
    problems: Vec<Problem>,
    mode: &'static str,
    errors: u64,
    warnings: u64,
}

#[derive(Debug, Serialize)]
struct DocumentInfo {
    root: Option<&'static str>,
    capability: Option<String>,
    kind: Option<&'static str>,
    entries: u64,
}

/// Runs the command; see the exit codes in [`Args`]' command help.
pub async fn run(args: Args) -> ExitCode {
    let mode = if args.strict {
        Mode::Strict
    } else {
        Mode::Lenient
    };
    if let Some(source) = &args.source {
        return run_source(&args, source, mode).await;
    }
    // Checked here as well as by clap's `requires`, which a positional target satisfying
    // the `what` group lets pass.
    if args.max_documents.is_some()
        || args.sample.is_some()
        || args.seed.is_some()
        || args.allow_private
        || !args.notification.is_empty()
    {
        eprintln!(
            "rsagg validate: --max-documents, --sample, --seed, --allow-private and --notification need --source URL"
        );
        return ExitCode::from(2);
    }
    let Some(target) = args.target.clone() else {
        eprintln!("rsagg validate: give a PATH|URL or --source URL");
        return ExitCode::from(2);
    };
    let input = match input::open_source(&target).await {
        Ok(i) => i,
        Err(e) => {
            eprintln!("rsagg validate: {e:#}");
            return ExitCode::from(2);
        }
    };
    let opts = ReadOptions {
        mode,
        max_bytes: args.max_bytes,
        max_entries: args.max_entries,
        max_problems: args.max_problems,
        source: target.clone(),
        ..ReadOptions::default()
    };
    let report = match check(input, opts).await {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rsagg validate: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => {
                let _ = writeln!(std::io::stdout().lock(), "{}", rsagg_model::redact(&s));
            }
            Err(e) => {
                eprintln!("rsagg validate: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        let _ = print_human(&mut std::io::stdout().lock(), &target, &report);
    }
    if report.valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Reads the whole document; a fatal parse error becomes an error problem, an I/O error is
/// returned.
async fn check(input: input::Source, opts: ReadOptions) -> Result<Report, Error> {
    let mode = opts.mode;
    let mode_name = if mode == Mode::Strict {
        "strict"
    } else {
        "lenient"
    };
    let opened = match input {
        input::Source::File(f) => DocumentReader::open_blocking(f, opts).await,
        input::Source::Async(i) => DocumentReader::open(i, opts).await,
    };
    let mut reader = match opened {
        Ok(r) => r,
        Err(e) => return fatal(e, mode_name),
    };
    let header = reader.header().clone();
    let kind = reader.kind();
    let mut fatal_error = None;
    loop {
        match reader.next_entry().await {
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e @ Error::Io { .. }) => return Err(e),
            Err(e) => {
                fatal_error = Some(e);
                break;
            }
        }
    }
    let tally = reader.tally();
    let mut problems = reader.take_problems();
    let mut errors = tally.errors;
    if let Some(e) = fatal_error {
        problems.push(fatal_problem(&e));
        errors += 1;
    }
    problems.sort_by_key(|p| (p.line, p.column));
    Ok(Report {
        valid: errors == 0,
        document: DocumentInfo {
            root: Some(header.root.element()),
            capability: header.capability().map(|c| c.as_str().to_owned()),
            kind: Some(kind.name()),
            entries: tally.entries,
        },
        problems,
        mode: mode_name,
        errors,
        warnings: tally.warnings,
    })
}

fn fatal(e: Error, mode: &'static str) -> Result<Report, Error> {
    if matches!(e, Error::Io { .. }) {
        return Err(e);
    }
    Ok(Report {
        valid: false,
        document: DocumentInfo {
            root: None,
            capability: None,
            kind: None,
            entries: 0,
        },
        problems: vec![fatal_problem(&e)],
        mode,
        errors: 1,
        warnings: 0,
    })
}

fn fatal_problem(e: &Error) -> Problem {
    let pos = e.pos().unwrap_or_default();
    let (rule, message) = match e {
        Error::Syntax { message, .. } => {
            (Rule::XmlSyntax, format!("not well-formed XML: {message}"))
        }
        Error::Root { message, .. } => (Rule::Root, message.clone()),
        Error::Doctype { .. } => (
            Rule::Doctype,
            "DOCTYPE declarations are refused (no entity expansion)".to_owned(),
        ),
        other => (Rule::XmlSyntax, other.to_string()),
    };
    Problem {
        severity: Severity::Error,
        line: pos.line,
        column: pos.column,
        section: "7",
        code: rule.code(),
        message,
        entry: None,
        rule,
    }
}

/// Writes the human report. A reader that stops early (`| head`) closes the pipe: the
/// write error ends the output instead of a panic, and the exit status still tells.
fn print_human(out: &mut impl std::io::Write, target: &str, r: &Report) -> std::io::Result<()> {
    // A URL given with credentials is shown without them (`rsagg_model::redact`).
    let target = rsagg_model::redact(target);
    for p in &r.problems {
        let sev = match p.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let section = if p.section.starts_with("CN") || p.section.starts_with("Appendix") {
            p.section.to_owned()
        } else {
            format!("section {}", p.section)
        };
        writeln!(
            out,
            "{target}:{}:{}: {sev}[{}]: {} ({section})",
            p.line, p.column, p.code, p.message
        )?;
    }
    let shown = r.problems.len() as u64;
    let total = r.errors + r.warnings;
    if total > shown {
        writeln!(out, "… {} more problems not shown", total - shown)?;
    }
    let what = match (&r.document.kind, &r.document.capability) {
        (Some(k), _) => (*k).to_owned(),
        (None, _) => "document".to_owned(),
    };
    writeln!(
        out,
        "{target}: {} {what}, {} entries, {} errors, {} warnings ({} mode)",
        if r.valid { "valid" } else { "INVALID" },
        r.document.entries,
        r.errors,
        r.warnings,
        r.mode
    )
}

/// `rsagg validate --source URL`: the walk, its report, the exit status (0 no error,
/// 1 some error, 2 usage error or the start document could not be fetched).
async fn run_source(args: &Args, source: &str, mode: Mode) -> ExitCode {
    let defaults = rsagg_validate::Options::default();
    let opts = rsagg_validate::Options {
        mode,
        max_documents: args.max_documents.unwrap_or(defaults.max_documents),
        max_bytes: args.max_bytes,
        max_entries: args.max_entries,
        max_problems: args.max_problems,
        sample: args.sample.unwrap_or(defaults.sample),
        seed: args.seed.unwrap_or(defaults.seed),
        allow_private: args.allow_private,
        notifications: args.notification.clone(),
        ..defaults
    };
    let report = match rsagg_validate::validate_source(source, &opts).await {
        Ok(r) => r,
        Err(e) => {
            let hint = match &e {
                rsagg_validate::Error::StartFetch { source, .. }
                    if matches!(**source, rsagg_fetch::Error::Refused { .. }) =>
                {
                    " (--allow-private walks a Source on a private or loopback address)"
                }
                _ => "",
            };
            eprintln!(
                "rsagg validate: {}{hint}",
                rsagg_model::redact(&e.to_string())
            );
            return ExitCode::from(2);
        }
    };
    if args.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => {
                let _ = writeln!(std::io::stdout().lock(), "{}", rsagg_model::redact(&s));
            }
            Err(e) => {
                eprintln!("rsagg validate: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        let _ = print_source(&mut std::io::stdout().lock(), &report);
    }
    if report.valid {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// The human report of a walk: one line per problem, as for one document but led by the
/// document's URL, then the summary.
fn print_source(out: &mut impl std::io::Write, r: &rsagg_validate::Report) -> std::io::Result<()> {
    for p in &r.problems {
        let sev = match p.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let section = if p.section.starts_with("CN") || p.section.starts_with("Appendix") {
            p.section.to_owned()
        } else {
            format!("section {}", p.section)
        };
        let url = rsagg_model::redact(&p.url);
        writeln!(
            out,
            "{url}:{}:{}: {sev}[{}]: {} ({section})",
            p.line,
            p.column,
            p.code,
            rsagg_model::redact(&p.message)
        )?;
    }
    let s = &r.summary;
    let shown = r.problems.len() as u64;
    if s.errors + s.warnings > shown {
        writeln!(
            out,
            "… {} more problems not shown",
            s.errors + s.warnings - shown
        )?;
    }
    let documents: u64 = s.documents.values().sum();
    let kinds: Vec<String> = s
        .documents
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    writeln!(
        out,
        "{}: {} Source, {documents} documents ({}), {} packages, {} entries, {} bytes, {} resources sampled, {} errors, {} warnings ({} mode){}",
        rsagg_model::redact(&r.source),
        if r.valid { "valid" } else { "INVALID" },
        kinds.join(", "),
        s.packages,
        s.entries,
        s.bytes,
        s.resources_sampled,
        s.errors,
        s.warnings,
        r.mode,
        match s.truncated {
            Some(b) => format!("; stopped at --{b}"),
            None => String::new(),
        }
    )
}
