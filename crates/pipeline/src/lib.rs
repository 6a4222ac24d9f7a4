//! rsagg-pipeline: what runs a pipeline's stages.
//!
//! A pipeline (one `pipelines/*.toml` file, typed by `rsagg-config`) is one republished
//! collection fed by one or more upstream Sources. `run --once` harvests every upstream
//! (`rsagg-harvest`), publishes rsagg's own documents from the state (`rsagg-publish`), then
//! sends its change notifications (`rsagg-notify`); `run --follow` keeps doing so, polling each
//! upstream at its interval and taking push notifications. State (in the store) is the only
//! link between harvesting and publishing; the report types are `rsagg-layout`'s, so
//! `rsagg serve` reads what a run wrote without this crate.
//!
//! # Layout
//!
//! - `runner.rs`: `run --once`: all upstreams concurrently, publish, notify, the run report
//!   and exit status, the stats object.
//! - `follow.rs`: `run --follow`: one long-lived follower (state, HTTP client kept open)
//!   polling each upstream at its interval, applying push notifications, publishing after
//!   every pass that changed something, renewing subscriptions.
//! - `fleet.rs`: many pipelines in one process (`rsagg run P.toml… | DIR`): bounded,
//!   sharing per-host politeness, one summary; shards by rendezvous hashing (`--shard I/N`).
//! - `ops.rs`: the operator commands: `audit`, `run --dry-run`, `quarantine list|retry`,
//!   `gc` (read-only where they only look).

pub mod fleet;
mod follow;
mod ops;
mod runner;

pub use follow::{FollowOptions, follow};
pub use ops::{
    audit, dry_run, gc, oai_refetch, oai_reharvest, oai_windows, quarantine_list, quarantine_retry,
};
pub use rsagg_config::{Pipeline, PipelineConfig};
pub use rsagg_harvest::audit::{AuditOptions, AuditReport, Discrepancy};
pub use rsagg_harvest::oai_ops::SetWindows;
pub use rsagg_harvest::plan::{Action, PlanReport};
pub use rsagg_harvest::{Inbox, Progress, Snapshot};
pub use rsagg_layout::paths::STATS_OBJECT;
pub use rsagg_layout::report::GcReport;
pub use rsagg_layout::report::{
    DeliveryReport, NotifyReport, Prepared, PublishReport, PushStats, RunReport, UpstreamReport,
    Verdict,
};
pub use rsagg_notify::Notifier;
pub use rsagg_publish::PublishOptions;
pub use rsagg_store::{QuarantineRecord, StoreFailure, WindowStatus};
pub use runner::{RunOptions, UpstreamSlots, run_once, store_options};

/// Errors of a run: what stops it as a whole (one upstream's failure does not, it is in the
/// report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pipeline file is invalid.
    #[error(transparent)]
    Config(#[from] rsagg_config::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] rsagg_store::Error),
    /// An HTTP client could not be built.
    #[error(transparent)]
    Fetch(#[from] rsagg_fetch::Error),
    /// Harvesting failed as a whole.
    #[error(transparent)]
    Harvest(#[from] rsagg_harvest::Error),
    /// Publishing failed as a whole.
    #[error(transparent)]
    Publish(#[from] rsagg_publish::Error),
    /// Change notifications cannot be set up.
    #[error(transparent)]
    Notify(#[from] rsagg_notify::Error),
    /// An operator command (`audit`, `quarantine list|retry`, `gc`) found no collection in
    /// the store: no run ever wrote a state there (a mistyped `[store] url`, or never run).
    /// Said instead of reporting every listed resource `missing` or nothing quarantined.
    #[error(
        "{store}: store holds no rsagg collection (never run?): no state under {store}/state/; check [store] url in {}, or run `rsagg run` on it first",
        pipeline.display()
    )]
    NeverRun {
        /// The store's URL (credentials hidden).
        store: String,
        /// The pipeline file.
        pipeline: std::path::PathBuf,
    },
    /// An operator command was asked for what the pipeline does not have (an `--upstream`
    /// it names none of, an OAI-PMH command on a ResourceSync upstream).
    #[error("{0}")]
    Usage(String),
    /// A directory of pipeline files could not be read (a fleet run).
    #[error("reading the pipeline directory {path}: {source}")]
    Files {
        /// The directory.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// True when the configuration is at fault, not the store or an upstream: an invalid
    /// pipeline, a store URL that cannot be opened as given (no credentials for an `s3://`
    /// store, a `file:` URL naming no directory), a store that holds no collection. Commands
    /// exit 2 on it (a scheduler should not retry), not 1.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            Error::Config(_)
                | Error::NeverRun { .. }
                | Error::Usage(_)
                | Error::Store(rsagg_store::Error::Url { .. })
        )
    }
}

impl StoreFailure for Error {
    fn store_error(&self) -> Option<&rsagg_store::Error> {
        match self {
            Error::Store(e) => Some(e),
            Error::Harvest(e) => e.store_error(),
            Error::Publish(e) => e.store_error(),
            Error::Notify(e) => e.store_error(),
            _ => None,
        }
    }
}
