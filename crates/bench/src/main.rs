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
//! - `notify.rs`: the notification latency benchmark (`notify`: upstream Source and
//!   downstream subscriber in-process, `rsagg hub` and `rsagg run --follow --listen` as
//!   processes).
//! - `harvest.rs`: the harvest benchmark (`harvest` drives; `static-server` is the upstream when
//!   nginx is not installed, `harvest-get` and `harvest-put` measure the upstream's and the S3
//!   server's ceilings).
//! - `fleet.rs`: the fleet benchmark (`fleet`: K upstreams on K loopback addresses, as one
//!   pipeline of K upstreams and as K pipelines over N worker processes, `--shards`; then
//!   `rsagg serve` of the K pipelines).
//! - `procs.rs`: what a measured process took (peak RSS, CPU), read from `/proc`.
//! - `oai.rs`: the OAI-PMH harvest benchmark (`oai`: a repository served on loopback by the
//!   generated provider of `oai_gen.rs`, `oai-provider`, or by pyoai's, harvested by rsagg and
//!   by Sickle in alternating rounds, then a kill-and-resume and an incremental round); the
//!   Sickle side is `py/sickle_harvest.py`, run from the peers' venv.
//! - `scale.rs`: the scale benchmark (`scale`: baseline, incremental rounds and a no-change
//!   run at growing N, each a fresh `rsagg run --once`, with the store requests rsagg counted).
//!
//! `rsagg-bench harvest` harvests 10,000 resources of 1 KB from a static upstream on loopback:
//! (a) rsagg into a `file://` store beside `resync-sync --baseline` into a directory, and (b)
//! rsagg into SeaweedFS beside plain concurrent S3 PUTs of the same bodies (the ceiling).
//!
//! `rsagg-bench oai` harvests an OAI-PMH repository of N Dublin Core records (default 10,000)
//! from pyoai's data provider on loopback with rsagg (`run --once`, `kind = "oai-pmh"`) and
//! with Sickle, the common Python harvester, on the same provider, and prints records/s, peak
//! RSS and CPU of each, their ratio, and the provider's own CPU meanwhile: a Python provider
//! may bound both, and the output says when it does.
//!
//! `rsagg-bench notify` measures the latency from an upstream's change notification to
//! rsagg's notification of the same change at a downstream subscriber (p50/p90/p99/max at
//! 200 changes/s), beside the same path through the hub alone.

mod docs;
mod fleet;
mod harvest;
mod notify;
mod oai;
mod oai_gen;
mod oai_records;
mod procs;
mod scale;

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
    /// Baseline harvest: rsagg vs resync-sync (file store) and vs plain S3 PUT (SeaweedFS).
    Harvest(harvest::HarvestArgs),
    /// Notification latency: upstream notification → rsagg's notification at a subscriber.
    Notify(notify::NotifyArgs),
    /// Scale: baseline, incremental and no-change runs at growing N (file:// and SeaweedFS).
    Scale(scale::ScaleArgs),
    /// Fleet: K upstreams as one pipeline and as K pipelines over N shards; serve of them.
    Fleet(fleet::FleetArgs),
    /// OAI-PMH harvest: rsagg vs Sickle on the same provider (generated, or pyoai).
    Oai(oai::OaiArgs),
    /// The generated OAI-PMH provider (used by `oai`; serves until killed).
    #[command(hide = true)]
    OaiProvider(oai_gen::GenArgs),
    /// Static file server for the harvest upstream (used by `harvest`).
    #[command(hide = true)]
    StaticServer(harvest::StaticServerArgs),
    /// GET every upstream resource (used by `harvest`).
    #[command(hide = true)]
    HarvestGet(harvest::GetArgs),
    /// PUT every body to S3 (used by `harvest`).
    #[command(hide = true)]
    HarvestPut(harvest::PutArgs),
}

/// `py/{name}` of this crate: under the directory `cargo run` gives at run time, else the
/// one compiled in (a binary run by hand). Several clones may share one target directory, and
/// then the compiled-in directory can be another clone's.
pub(crate) fn py_script(name: &str) -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into())
        .join("py")
        .join(name)
}

/// The pipeline file of the `harvest` and `scale` runs: collection `name` into the store at
/// `store_url`, one upstream `up` discovered at `upstream_base`, `store_extra` lines added to
/// `[store]` and `extra` TOML after the upstream.
pub(crate) fn single_upstream_pipeline(
    name: &str,
    store_url: &str,
    upstream_base: &str,
    store_extra: Option<&str>,
    extra: Option<&str>,
) -> String {
    format!(
        "[collection]\nname = \"{name}\"\nbase_url = \"http://127.0.0.1:9/{name}/\"\n\n\
         [store]\nurl = \"{store_url}\"\n{}\n\n\
         [[upstream]]\nname = \"up\"\nurl = \"{upstream_base}/.well-known/resourcesync\"\nallow_private = true\n\n{}\n",
        store_extra.unwrap_or(""),
        extra.unwrap_or("")
    )
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
        Command::Harvest(a) => harvest::run(a),
        Command::Notify(a) => notify::run(a),
        Command::Scale(a) => scale::run(a),
        Command::Fleet(a) => fleet::run(a),
        Command::Oai(a) => oai::run(a),
        Command::OaiProvider(a) => oai_gen::serve(a),
        Command::StaticServer(a) => harvest::static_server(a),
        Command::HarvestGet(a) => harvest::get_all(a),
        Command::HarvestPut(a) => harvest::put_all(a),
    }
}
