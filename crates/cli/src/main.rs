//! `rsagg`: the ResourceSync aggregator's command line. This is the only crate that uses
//! `anyhow`; libraries return their own error enums.
//!
//! # Layout
//!
//! - `main.rs`: argument parsing (clap), the runtime.
//! - `alloc.rs`: the allocator's settings (mimalloc purges at free), applied by re-executing
//!   once at start.
//! - `logging.rs`: tracing set-up: `RSAGG_LOG` (filter), `--log-format` / `RSAGG_LOG_FORMAT`
//!   (`text` for people, `json` lines for collectors).
//! - `validate.rs`: `rsagg validate`, its human and JSON reports and exit codes (the contract
//!   in `docs/contract.md`).
//! - `input.rs`: opening a path, stdin or http(s) URL as async input, gzip inflated.
//! - `run.rs`: `rsagg run` (harvest, `--baseline`, `--dry-run`; exit codes of the contract)
//!   and `rsagg check`.
//! - `fleet.rs`: `rsagg run` of several pipelines or a directory (a fleet run, `--shard`).
//! - `progress.rs`: `rsagg run`'s progress: one line on a terminal, heartbeat log events off
//!   one (`--progress-interval`), rates and ETA.
//! - `ops.rs`: the operator commands `rsagg audit`, `rsagg quarantine list|retry`,
//!   `rsagg gc`.
//! - `serve.rs`: `rsagg serve` (read-only HTTP serving of published collections).
//! - `hub.rs`: `rsagg hub` (the WebSub hub).
//! - `lifecycle.rs`: what every server command shares: the `listening` line, shutdown on
//!   SIGINT or SIGTERM.
//!
//! Every line this crate prints goes through `rsagg_model::redact` (credentials in URLs
//! hidden): the `println!`/`eprintln!` below shadow the standard ones in every module, the
//! reports are redacted where they are written (`ops::print`, `run::print_report`) and log
//! lines by the log writer (`logging.rs`).

/// `std::println!` of the redacted line (see the crate documentation).
macro_rules! println {
    ($($arg:tt)*) => {
        ::std::println!("{}", ::rsagg_model::redact(&::std::format!($($arg)*)))
    };
}

/// `std::eprintln!` of the redacted line: error lines quote store and upstream URLs (the
/// store breaker's `store URL refused access`, reqwest's errors).
macro_rules! eprintln {
    ($($arg:tt)*) => {
        ::std::eprintln!("{}", ::rsagg_model::redact(&::std::format!($($arg)*)))
    };
}

mod alloc;
mod fleet;
mod hub;
mod input;
mod lifecycle;
mod logging;
mod oai;
mod ops;
mod progress;
mod run;
mod serve;
mod validate;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Entries are allocated on the parsing thread and freed on the consuming one; mimalloc
/// handles that pattern far better than the system allocator. Built without transparent
/// huge pages (see the workspace `Cargo.toml`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// A ResourceSync aggregator: harvests upstream Sources into object storage and republishes
/// them as a Source of its own.
#[derive(Debug, Parser)]
#[command(
    name = "rsagg",
    version,
    about,
    long_about = None,
    after_help = "Logging (on stderr):\n  \
        RSAGG_LOG         what is logged, tracing's EnvFilter syntax \
        (default `warn,rsagg_pipeline=info,rsagg_harvest=info,rsagg_publish=info,rsagg_notify=info,rsagg_layout=info,rsagg::progress=info`; e.g. `info`, `info,rsagg_fetch=debug`)\n  \
        RSAGG_LOG_FORMAT  `text` (default; coloured on a terminal) or `json` \
        (one JSON object per line); --log-format wins over it"
)]
struct Cli {
    /// Log line format on stderr: `text` for people, `json` for one JSON object per line
    /// (log collectors). Filter with RSAGG_LOG.
    #[arg(
        long,
        global = true,
        value_enum,
        env = logging::FORMAT_ENV,
        default_value_t = logging::LogFormat::Text,
        value_name = "FORMAT"
    )]
    log_format: logging::LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Parse and check any ResourceSync document (file, `-` for stdin, or http(s) URL), or
    /// with --source URL a whole Source: every document, package and the rules between them.
    ///
    /// Exit status: 0 valid (warnings allowed), 1 invalid, 2 usage or I/O error (with
    /// --source: the start document could not be fetched).
    Validate(validate::Args),
    /// Harvest every upstream of a pipeline into its store (one pass by default). Several
    /// pipeline files or a directory: a fleet run, every pipeline in this process, bounded.
    ///
    /// Exit status: 0 all went well, 1 some upstream failed (the rest was committed),
    /// 2 usage or config error, 3 fenced out by another writer. A fleet: 0 every pipeline
    /// ended well, else the gravest of its pipelines' statuses, 2 before 3 before 1.
    #[command(after_help = SUMMARY_WORDS)]
    Run(run::RunArgs),
    /// Compare the store with each upstream's lists: resources missing, extra, changed (and
    /// with --read-data corrupt). Opens the state read-only (never fences a running job).
    ///
    /// Exit status: 0 in sync, 1 not in sync (or some upstream could not be audited),
    /// 2 usage, config or store error.
    Audit(ops::AuditArgs),
    /// List or retry the quarantined resources (bytes that did not match what the upstream
    /// announced, twice).
    ///
    /// Exit status: `list` 0 listed, 2 usage, config or store error; `retry` 0 every
    /// retried resource verified and released (or none was quarantined), 1 some is still
    /// quarantined, failed, gone or no longer listed, 2 usage or config error, 3 fenced out
    /// by another writer.
    Quarantine(ops::QuarantineArgs),
    /// OAI-PMH upstreams: list the date windows of each set's pass (`windows`), mark a date
    /// range to be harvested again (`reharvest`), ask records again by GetRecord
    /// (`refetch`).
    ///
    /// Exit status: `windows` 0, 2 usage, config or store error; `reharvest` 0 marked,
    /// 1 store failure, 2 usage or config error, 3 fenced out; `refetch` 0 every record
    /// stored or unchanged, 1 some failed or unknown, 2, 3.
    Oai(oai::OaiArgs),
    /// Collect the blobs nothing refers to any more, if due (--force: now). Opens the state
    /// as the writer, like `run`.
    ///
    /// Exit status: 0 collected or not due, 1 failed, 2 usage or config error, 3 fenced out.
    Gc(ops::GcArgs),
    /// Validate pipeline files; errors name file, line and key. Exit 0 valid, 2 invalid.
    Check(run::CheckArgs),
    /// Serve what pipelines published (documents, copies, /.well-known/resourcesync),
    /// read-only, from their stores. Prints `listening http://HOST:PORT` once ready.
    ///
    /// Exit status: 0 after SIGINT/SIGTERM, 1 cannot listen, 2 usage or config error.
    Serve(serve::ServeArgs),
    /// The WebSub hub: subscriptions, both publish forms (CN 1.0.1 4.1 and WebSub
    /// `hub.mode=publish`), delivery with retries. All requests by POST at `/`. Prints
    /// `listening http://HOST:PORT` once ready. Callbacks and topics on private, loopback or
    /// link-local addresses are refused unless `--allow-private-callbacks`.
    ///
    /// Exit status: 0 after SIGINT/SIGTERM, 1 cannot listen or open the store, 2 usage error.
    Hub(hub::HubArgs),
}

/// What the words of a run's summary (and of `--json`'s counts) mean, shown by
/// `rsagg run --help` next to the command that prints them.
const SUMMARY_WORDS: &str = "The summary, per upstream (the same counts as --json):\n  \
    created      a resource copied for the first time\n  \
    updated      a new version copied\n  \
    deleted      marked deleted (the Source deleted it; its history is kept)\n  \
    unchanged    skipped as unchanged, or fetched again and the bytes were identical\n  \
    replayed     a change a previous run already processed, dropped\n  \
    quarantined  bytes that did not match what the upstream announced, twice (rsagg quarantine)\n  \
    gone         listed, but the upstream answers 404/410\n  \
    superseded   a later change of the same resource in the same list (--json only)\n  \
    failed       could not be fetched (the next run tries again)";

/// Stack of the runtime's threads: the command runs on them (see `main`), and unoptimised
/// builds poll its deeply nested futures with frames far larger than a release build's, more
/// than tokio's default 2 MiB holds. The main thread's size; address space, not memory, until
/// used.
const WORKER_STACK: usize = 8 << 20;

fn main() -> ExitCode {
    alloc::purge_at_free();
    let cli = Cli::parse();
    let terminal = logging::init(cli.log_format);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(WORKER_STACK)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("rsagg: cannot start the async runtime: {e}");
            return ExitCode::from(2);
        }
    };
    // The command runs as a task on the runtime's workers, not on this thread (`block_on`):
    // there, every task it waits for (each harvested resource is one) would wake this
    // thread across threads, a futex wake and a context switch each, and it would be a third
    // thread taking turns with the two workers on a 2-core machine.
    let command = runtime.spawn(async move {
        match cli.command {
            Command::Validate(args) => validate::run(args).await,
            Command::Run(args) if args.is_fleet() => fleet::run(&args, terminal).await,
            Command::Run(args) => run::run(args, terminal).await,
            Command::Check(args) => run::check(args),
            Command::Audit(args) => ops::audit(args).await,
            Command::Quarantine(args) => ops::quarantine(args).await,
            Command::Gc(args) => ops::gc(args).await,
            Command::Oai(args) => oai::oai(args).await,
            Command::Serve(args) => serve::serve(args).await,
            Command::Hub(args) => hub::hub(args).await,
        }
    });
    match runtime.block_on(command) {
        Ok(code) => code,
        // A panic in the command goes on as it would have on this thread.
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            eprintln!("rsagg: the command was cancelled: {e}");
            ExitCode::FAILURE
        }
    }
}
