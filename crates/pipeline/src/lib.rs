//! rsagg-pipeline: pipeline configs and the stages that run them.
//!
//! A pipeline (one `pipelines/*.toml` file) is one republished collection fed by one or more
//! upstream Sources. `run --once` discovers each upstream's sets of resources, brings rsagg's
//! copies up to date (baseline from a Resource List or Dump, then incremental from Change
//! Lists, re-syncing from the Resource List whenever the Change List no longer reaches back to
//! the checkpoint) and commits state after the bytes it points at.
//!
//! # Layout
//!
//! - `config.rs`: the typed config, `${ENV}` substitution and pure validation.
//! - `harvest.rs`: one upstream: discovery, baseline/resync, incremental, verification.
//! - `lists.rs`: reading upstream lists and indexes as streams of entries.
//! - `dumps.rs`: upstream Resource/Change Dump packages: download, check, stream the items.
//! - `links.rs`: provenance (`via`) and the inherited-link policy of republished entries.
//! - `uris.rs`: rsagg's own, reversible URIs for its copies.
//! - `publish.rs`: how a copy or a change is described in rsagg's own documents (spec 14.8),
//!   and how a document is encoded.
//! - `publisher.rs`: the publish stage: every document, in a reader-safe order (the lists
//!   and dumps side by side, then the Capability List, then garbage collection).
//! - `resourcelist.rs`: the Resource List (or index), part by part (hash-slot ranges), only
//!   the parts that changed.
//! - `changelist.rs`: Change Lists from the change log: one open list, immutable closed ones,
//!   the index, the `changelist-open.xml` alias, retention.
//! - `package.rs`, `resourcedump.rs`, `changedump.rs`: dump packages built from stored blobs
//!   (a `file://` store's read as files on one thread, others through object_store);
//!   the Resource Dump on its interval, a Change Dump per closed Change List.
//! - `capability.rs`: the Capability List, the `up` link to it, and the Source Description
//!   (of the collection, and of every collection `rsagg serve` serves).
//! - `published.rs`: what the publisher keeps beside its documents.
//! - `gc.rs`: blob garbage collection with a grace period.
//! - `notify.rs`: rsagg's change-notification channel (CN 1.0.1): payloads from the change
//!   log into a persisted outbox, delivered to the hub in order, at least once.
//! - `runner.rs`: `run --once`: all upstreams concurrently, publish, notify, the run report
//!   and exit status.
//! - `follow.rs`: `run --follow`: one long-lived follower (state, HTTP client kept open)
//!   polling each upstream at its interval, applying push notifications, publishing after
//!   every pass that changed something, renewing subscriptions.
//! - `push.rs`: the push intake: the [`push::Inbox`] behind the WebSub callbacks (signature
//!   check, bounded queue), reading a change notification, its set of resources and its
//!   continuity with the previous one (CN 1.0.1 3).

pub mod capability;
pub mod changedump;
pub mod changelist;
pub mod config;
mod dumps;
pub mod follow;
pub mod gc;
mod harvest;
pub mod links;
mod lists;
pub mod notify;
mod package;
pub mod publish;
pub mod published;
mod publisher;
pub mod push;
pub mod resourcedump;
pub mod resourcelist;
mod runner;
pub mod uris;

use std::path::PathBuf;

pub use config::{Pipeline, PipelineConfig};
pub use follow::{FollowOptions, follow};
pub use harvest::{UpstreamReport, Verdict};
pub use notify::{DeliveryReport, Notifier, NotifyReport, Prepared};
pub use publisher::{PublishOptions, PublishReport, publish};
pub use push::{Inbox, Intake, PushStats};
pub use runner::{RunOptions, RunReport, STATS_OBJECT, run_once};

/// Errors of a pipeline.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pipeline file is invalid.
    #[error("{}:{line}: {}{message}", path.display(), if key.is_empty() { String::new() } else { format!("{key}: ") })]
    Config {
        /// The file.
        path: PathBuf,
        /// 1-based line (0 when unknown).
        line: usize,
        /// Dotted key (`upstream[0].url`), when known.
        key: String,
        /// What is wrong.
        message: String,
    },
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
    /// A dump package could not be used.
    #[error(transparent)]
    Dump(#[from] rsagg_dump::Error),
    /// Change notifications cannot be sent (the publishing client could not be built).
    #[error("change notifications to hub {hub}: {message} (Change Notification 1.0.1 section 4.1)")]
    Notify {
        /// The hub URL.
        hub: String,
        /// What is wrong.
        message: String,
    },
    /// The push intake could not be set up (CN 1.0.1 4.2).
    #[error("push intake{}: {message}", if upstream.is_empty() { String::new() } else { format!(" of upstream `{upstream}`") })]
    Push {
        /// The upstream, when one is concerned.
        upstream: String,
        /// What is wrong.
        message: String,
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

impl Error {
    /// True when another writer fenced this one out (exit code 3).
    pub fn is_fenced(&self) -> bool {
        matches!(self, Error::Store(e) if e.is_fenced())
    }
}
