//! `rsagg-bench`: benchmarks that print figures side by side with the peer, never timed
//! assertions. Each measured operation runs in its own process so its peak RSS is its own.
//!
//! `rsagg-bench docs` writes and parses 50,000- and 1,000,000-entry Change Lists and Resource
//! List Indexes with rsagg and with the Python `resync` library (the reference
//! implementation), median of 3 runs, and prints MB/s, entries/s, peak RSS and the ratios.
//!
//! # Layout
//!
//! - `main.rs`: the subcommands.
//! - `docs.rs`: the document benchmark (`docs` drives; `write`/`parse` measure one operation and
//!   print one JSON line); the resync side is `py/resync_docbench.py`, run from the peers'
//!   venv (`scripts/peers.sh install`).

mod docs;

use clap::{Parser, Subcommand};

/// Entries are allocated on the parsing thread and freed on the consuming one; mimalloc
/// handles that pattern far better than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "rsagg-bench",
    about = "rsagg benchmarks, side by side with peers"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Document layer: parse and write, rsagg vs resync.
    Docs(docs::DocsArgs),
    /// One write by rsagg (used by `docs`; prints one JSON line).
    Write(docs::OneArgs),
    /// One parse by rsagg (used by `docs`; prints one JSON line).
    Parse(docs::OneArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Command::Docs(a) => docs::run(a),
        Command::Write(a) => rt.block_on(docs::write_one(a)),
        Command::Parse(a) => rt.block_on(docs::parse_one(a)),
    }
}
