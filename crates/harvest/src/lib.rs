//! One upstream: discovery, baseline (or re-sync) from the Resource List, incremental from
//! Change Lists, verification, and commits.
//!
//! Guarantees (spec 12.1, Destination side):
//! - Changes are processed in upstream order (`datetime`, else `lastmod`, else document
//!   order) and the checkpoint (last instant + the changes seen at that instant) only moves
//!   past a change once its copy is stored and committed; a failed change stops the list
//!   there, so a rerun resumes exactly at it, and replays are recognised and dropped.
//! - When the Change List no longer reaches back to the checkpoint (its `from`, or its oldest
//!   change, is later), or there is no Change List, the upstream is re-synced from its
//!   Resource List (creates, updates, deletes) and the report says so.
//! - A baseline or re-sync only records its checkpoint when every listed resource was
//!   stored, so a resource that failed is retried rather than silently missing.
//! - A pass ends at its deadline (`[deadlines] pass`, or `run`): no new work is taken, what
//!   is in flight finishes and is committed, the upstream is reported failed. A baseline or
//!   re-sync cut short records no checkpoint and deletes nothing (the rest of the list was
//!   not seen); an incremental pass keeps its checkpoint after the last committed change.
//!
//! # Layout
//!
//! - `context.rs`: what every step works with: the run-wide [`Ctx`], one upstream's
//!   [`Harvest`].
//! - `upstream.rs`: one upstream's run: access settings, discovery, its sets in turn
//!   ([`harvest`], [`harvest_upstream`]).
//! - `baseline.rs`: baseline and re-sync from the Resource List.
//! - `incremental.rs`: Change Lists from the checkpoint on.
//! - `from_dump.rs`: baseline and incremental from Resource and Change Dumps.
//! - `resource.rs`: storing (or deleting) one resource and what it came to.
//! - `commit.rs`: batched commits of outcomes, state and checkpoint.
//! - `progress.rs`: [`Progress`], the run's counters for a progress display (done, listed,
//!   bytes, lists still being read).
//! - `compare.rs`: pure rules: change instants and order, unchanged copies, verification.
//! - `lists.rs`: reading the upstream's lists and indexes as streams of entries.
//! - `later.rs`: the upstream's current state, its Resource List plus the changes after the
//!   list's `at`, which baselines, re-syncs and the operator commands judge against.
//! - `oai.rs`: OAI-PMH 2.0 upstreams: `Identify`, `ListRecords` pages followed by their
//!   `resumptionToken`s, each record stored as a resource (its `GetRecord` URL).
//! - `windows.rs`: the date windows an OAI-PMH pass is cut into.
//! - `oai_ops.rs`: `rsagg oai windows|reharvest|refetch`.
//! - `packages.rs`: the upstream's dump packages: download, check, stream the items.
//! - `audit.rs`: `rsagg audit`: the store compared with the upstreams' lists (read-only),
//!   blobs re-hashed, resources re-fetched on request; `extra` found in bounded memory.
//! - `plan.rs`: `rsagg run --dry-run`: the next run's decisions and actions from the lists
//!   and the state alone.
//! - `retry.rs`: `rsagg quarantine retry`: quarantined resources fetched again against the
//!   upstream's current list entry.
//! - `push.rs`: the push intake ([`push::Inbox`] behind the WebSub callbacks) and applying a
//!   change notification (CN 1.0.1 3).
//! - `subscriptions.rs`: [`Subscriptions`], the push subscriptions (subscribe, renew,
//!   unsubscribe) and their records in `push/{upstream}.json`, with each channel's `until`.

pub mod audit;
mod baseline;
mod commit;
mod compare;
mod context;
mod from_dump;
mod incremental;
mod later;
mod lists;
mod oai;
mod oai_links;
pub mod oai_ops;
mod packages;
pub mod plan;
mod progress;
pub mod push;
mod resource;
mod retry;
mod seen;
pub mod subscriptions;
mod upstream;
mod windows;

pub use context::{Ctx, Harvest, IdentifyCache};
pub use progress::{Progress, Snapshot};
pub use push::{Inbox, PushApplied};
pub use retry::retry_quarantined;
pub use seen::SeenLimits;
pub use subscriptions::Subscriptions;
pub use upstream::{Polled, harvest, harvest_upstream};

/// Errors of the harvest.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The pipeline's settings for an upstream cannot be used.
    #[error(transparent)]
    Config(#[from] rsagg_config::Error),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] rsagg_store::Error),
    /// An HTTP request failed.
    #[error(transparent)]
    Fetch(#[from] rsagg_fetch::Error),
    /// An upstream document could not be read.
    #[error("{url}: {source}")]
    Document {
        /// The document.
        url: String,
        /// Why.
        #[source]
        source: rsagg_sitemap::Error,
    },
    /// An upstream document is not what the step needs.
    #[error("{url}: {message} (spec section {section})")]
    Upstream {
        /// The document.
        url: String,
        /// Spec section.
        section: &'static str,
        /// What is wrong.
        message: String,
    },
    /// An OAI-PMH response page could not be read at all.
    #[error(transparent)]
    OaiPage(#[from] rsagg_oai::Error),
    /// An OAI-PMH upstream answered, but not what the harvest needs (its protocol errors, a
    /// metadata prefix it does not offer).
    #[error("{url}: {message} (OAI-PMH 2.0 section {section})")]
    Oai {
        /// The request.
        url: String,
        /// Section of the OAI-PMH 2.0 specification.
        section: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A dump package could not be used.
    #[error(transparent)]
    Dump(#[from] rsagg_dump::Error),
    /// The push intake could not be set up (CN 1.0.1 4.2).
    #[error("push intake{}: {message}", if upstream.is_empty() { String::new() } else { format!(" of upstream `{upstream}`") })]
    Push {
        /// The upstream, when one is concerned.
        upstream: String,
        /// What is wrong.
        message: String,
    },
    /// The upstream's pass reached its deadline (`[deadlines] pass`, or `run`): what it
    /// committed is kept and published; the next run goes on from there.
    #[error(
        "upstream `{upstream}`: pass stopped at its deadline ({deadline}); what it committed is kept and published, the next run goes on from there"
    )]
    PassDeadline {
        /// The upstream.
        upstream: String,
        /// Which deadline, and its value.
        deadline: String,
    },
    /// A store request did not finish within its deadline (`rsagg audit`): the store does
    /// not answer, so nothing can be judged against it.
    #[error("store: {what} did not finish within {deadline}; the store is not answering")]
    StoreDeadline {
        /// What was being asked.
        what: String,
        /// The deadline.
        deadline: String,
    },
    /// Local I/O (temporary files) failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl rsagg_store::StoreFailure for Error {
    fn store_error(&self) -> Option<&rsagg_store::Error> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

impl Error {
    /// True when the store failed (a request, or the deadline of one): what was being judged
    /// against it cannot be told (`rsagg audit` exit 2).
    pub fn is_store(&self) -> bool {
        matches!(self, Error::Store(_) | Error::StoreDeadline { .. })
    }

    /// True when the pass was cut at its deadline.
    pub fn is_deadline(&self) -> bool {
        matches!(self, Error::PassDeadline { .. })
    }
}
