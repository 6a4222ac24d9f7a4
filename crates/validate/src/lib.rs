//! Validation of a whole ResourceSync Source (`rsagg validate --source URL`): every document
//! reachable from its Source Description (or `/.well-known/resourcesync`, or a Capability
//! List given directly) is read and checked as `rsagg validate` checks one document, and the
//! rules that only hold between documents are checked as well: an index's parts exist, have
//! its capability and link back to it (spec 10.2, 12.2, 11.1, 13.1 and section 7's `index`
//! relation); `up` links lead to the Capability List and from it to the Source Description
//! (spec 9, 10.1, 11.1, 12.1, 13.1); the closed parts of a Change List Index or Change Dump
//! Index cover consecutive intervals (spec 12.2, 13.1); every dump package is opened and its
//! `manifest.xml` checked as a document and against the files in the ZIP and against the
//! dump entry that names it (spec 11.1, 11.2, 13.1, 13.2); the change-notification channel
//! is advertised with well-formed URLs (CN 1.0.1 section 5; nothing is subscribed to).
//! Optionally a deterministic sample of resources is fetched and checked against the
//! `hash`, `length` and `type` their Resource List states, and Change Notification payload
//! files are checked for consecutive `from`/`until` (CN 1.0.1 section 3).
//!
//! Everything is bounded: documents fetched ([`Options::max_documents`]), bytes read in all
//! ([`Options::max_bytes`]), each document as the single-document reader bounds it, problems
//! kept ([`Options::max_problems`]; all are counted). Documents are streamed, one entry at a
//! time: what is held is the queue of documents still to visit (at most
//! [`Options::max_documents`]), the sample ([`Options::sample`] entries) and one package's
//! manifest entries (as `rsagg-dump` holds them, within its limits). A bound reached ends
//! the walk with a warning ([`Cross::BoundReached`]), not a failure.
//!
//! All HTTP goes through [`rsagg_fetch::Fetcher`] (retries, bounded bodies, gzip, the address
//! guard: private and loopback targets only with [`Options::allow_private`]); packages are
//! read with [`rsagg_dump::Package`], which checks path traversal, zip bombs and the ZIP
//! structure before anything is extracted.
//!
//! # Layout
//!
//! - [`report`]: [`Finding`] (one problem: code, severity, URL, line:column, section),
//!   [`Summary`] and [`Report`], the result of a walk.
//! - [`rules`]: [`Cross`], every cross-document rule with its stable code and severity per
//!   mode, and the pure checks behind them (link targets, interval chains, digests, media
//!   types), unit-tested one by one.
//! - `source`: the walk as a whole ([`validate_source`]): the start, the queue, the sample,
//!   the notification payloads.
//! - `walk`: the walker: a bounded queue of documents, each read as a stream.
//! - `package`: downloading, opening and checking one dump package.
//! - `reservoir`: the deterministic reservoir of the sample of resources.
//! - `sample`: fetching the sample and checking each resource.
//! - `notification`: Change Notification payload files.

pub mod report;
pub mod rules;

mod notification;
mod package;
mod reservoir;
mod sample;
mod source;
mod walk;

use std::path::PathBuf;

pub use report::{Finding, Report, Summary};
pub use rules::Cross;
pub use source::validate_source;

use rsagg_model::Mode;

/// Why a walk could not be made at all. Problems of the Source are [`Finding`]s in the
/// [`Report`], not errors.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option is out of its range (checked before any request).
    #[error("invalid option: {0}")]
    Options(String),
    /// The HTTP client could not be built.
    #[error("building the HTTP client: {0}")]
    Client(#[source] rsagg_fetch::Error),
    /// The start URL is not an http(s) URL.
    #[error(
        "{url}: not an http(s) URL (a Source is walked from its Source Description, `/.well-known/resourcesync` or a Capability List, spec 6.3)"
    )]
    Start {
        /// The URL as given.
        url: String,
    },
    /// The start document could not be fetched: nothing was walked.
    #[error("{url}: cannot fetch the start document: {source}")]
    StartFetch {
        /// The start URL.
        url: String,
        /// What the fetcher said.
        #[source]
        source: Box<rsagg_fetch::Error>,
    },
    /// A local file (a notification payload, a temporary file) could not be read or
    /// written.
    #[error("{what}: {source}")]
    Io {
        /// What was being done, with the path.
        what: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// What to walk and how far.
#[derive(Debug, Clone)]
pub struct Options {
    /// Strict (rsagg's own output: every deviation an error) or lenient (upstreams).
    pub mode: Mode,
    /// Documents fetched at most (lists, indexes, parts, packages, manifest copies); the walk
    /// stops with a warning at the bound. Default 10,000.
    pub max_documents: u64,
    /// Bytes read at most over the whole walk (documents after inflation, packages, sampled
    /// resources); each single document is bounded by it too. Default 1 GiB.
    pub max_bytes: u64,
    /// Entries of one document at most (the single-document reader's bound). Default
    /// 10,000,000.
    pub max_entries: u64,
    /// Problems kept in the report (all are counted). Default 1,000.
    pub max_problems: usize,
    /// Resources of the Resource List(s) fetched and checked against their `hash`, `length`
    /// and `type` (0: none). At most 100,000.
    pub sample: u64,
    /// Seed of the sample's choice: the same Source and seed give the same sample.
    pub seed: u64,
    /// Allow private, loopback and link-local targets (a Source on 127.0.0.1).
    pub allow_private: bool,
    /// Change Notification payload files to check (CN 1.0.1 section 3), in any order.
    pub notifications: Vec<PathBuf>,
    /// The HTTP client's limits (timeouts, retries, concurrency).
    pub fetch: rsagg_fetch::FetchConfig,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            mode: Mode::Lenient,
            max_documents: 10_000,
            max_bytes: 1 << 30,
            max_entries: 10_000_000,
            max_problems: 1000,
            sample: 0,
            seed: 0,
            allow_private: false,
            notifications: Vec::new(),
            fetch: rsagg_fetch::FetchConfig::default(),
        }
    }
}

/// Largest [`Options::sample`]: the sample is held in memory while the lists are read.
pub const MAX_SAMPLE: u64 = 100_000;

impl Options {
    /// Checks the ranges, without I/O.
    pub fn check(&self) -> Result<(), Error> {
        if self.max_documents == 0 {
            return Err(Error::Options("--max-documents must be at least 1".into()));
        }
        if self.max_bytes == 0 {
            return Err(Error::Options("--max-bytes must be at least 1".into()));
        }
        if self.max_entries == 0 {
            return Err(Error::Options("--max-entries must be at least 1".into()));
        }
        if self.sample > MAX_SAMPLE {
            return Err(Error::Options(format!(
                "--sample {} is more than {MAX_SAMPLE}",
                self.sample
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    /// The walk runs as a task of a multi-threaded runtime (`rsagg validate` spawns it).
    #[test]
    fn the_walk_is_send() {
        fn send<T: Send>(_: &T) {}
        let opts = super::Options::default();
        let walk = super::validate_source("http://example.com/", &opts);
        send(&walk);
    }
}
