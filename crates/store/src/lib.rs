//! rsagg-store: everything rsagg keeps, in one object store (`file://` or `s3://`).
//!
//! State lives in object storage so a worker is disposable (a cloud job) and a crash loses
//! nothing. Under the collection's store URL:
//!
//! ```text
//! blobs/sha256/ab/abcdef…   resource bodies, content-addressed (identical bitstreams once)
//! blobs/tmp/…               large bodies while they stream in (copied to their address)
//! published/…               what the publishers keep beside their documents (JSON)
//! state/                    the collection's state: a slatedb database (records, change log,
//!                           checkpoints, quarantine); one writer at a time, others fenced
//! the rest                  published documents, at their paths under the collection's URL
//! ```
//!
//! Order of writes: blobs first (idempotent: the key is the content), then the state records
//! that point at them in one atomic, durable batch. A crash at any point leaves at worst an
//! unreferenced blob, never a record pointing at a missing one.
//!
//! # Layout
//!
//! - `location.rs`: store URLs → `ObjectStore` (`file://`, `s3://` with `AWS_*` variables,
//!   `memory://` for tests).
//! - `counted.rs`: every object-store request counted by kind, with its bytes (the run
//!   report's `store`; in the cloud requests are money), and its outcome reported to the
//!   store's health.
//! - `health.rs`: object-store errors classified, and the circuit breaker that gives up on a
//!   store refusing access or staying unreachable (the run ends promptly, exit 1).
//! - `verified.rs`: reading a blob back checked against its address and length.
//! - `blobs.rs`: content-addressed bodies, hashed (md5, sha-256, optionally sha-1) while they
//!   stream in.
//! - `local.rs`: a `file://` store's small blobs, written by two dedicated threads rather
//!   than one blocking-pool hand-off each.
//! - `recent.rs`: the bodies of small blobs stored lately, in memory by address (bounded), so
//!   a dump built after a harvest does not read them back.
//! - `spool.rs`: the bodies of resources a run stored, on local disk (bounded) by slot, so a
//!   Resource Dump built after a baseline on S3 reads none of them back.
//! - `documents.rs`: published documents and JSON objects: read, write, retire after a grace
//!   period.
//! - `records.rs`: the serialised records (resource, change-log entry, checkpoint,
//!   quarantine).
//! - `compaction.rs`: the state's compactor, run beside the writer and restarted when a
//!   stale process's compactor fences it (never closing a writer that holds the state).
//! - `state_gc.rs`: the state's garbage collection, run beside the writer when due (the
//!   time of the last pass kept in the state), never holding up a run's end.
//! - `coalesce.rs`: the state's caches, with concurrent loads of one entry (a table's
//!   filter or index at the start of a run) coalesced into one read.
//! - `filter.rs`: the state's bloom filters, holding only the keys looked up by key.
//! - `uri.rs`: recognising a URI already in its normalised form without parsing it (the
//!   slot of a resource and rsagg's own URI are computed several times per resource).
//! - `state.rs`: the state database (slatedb): reads, scans and atomic commits; fencing; a
//!   read-only view (slatedb's `DbReader`) for commands that must not fence the writer.

mod blobs;
mod coalesce;
mod compaction;
pub mod conformance;
mod counted;
pub mod documents;
mod filter;
mod health;
mod local;
mod location;
mod recent;
mod records;
mod spool;
mod state;
mod state_gc;
pub mod uri;
mod verified;

pub use blobs::{BlobInfo, Blobs};
pub use counted::{CountedStore, LIST_PAGE, StoreCounters, StoreRequests};
pub use health::{FaultKind, FencedOut, StoreFault, StoreHealth, one_line};
pub use location::{
    StoreLocation, StoreOptions, open_object_store, open_store, open_store_read_only,
};
pub use recent::RecentBlobs;
pub use records::{
    Checkpoint, CopyRef, LogEntry, OaiPass, OaiWindow, QuarantineRecord, ResourceRecord,
    ResourceStatus, SeenKey, UpstreamMeta, WindowStatus,
};
pub use spool::{Spool, SpoolReader};
pub use state::{Applied, Commit, Records, SlotMembers, State, WAL_FLUSH_INTERVAL, slot_of};
pub use verified::{IN_MEMORY as VERIFIED_IN_MEMORY, Verified, read_verified};

/// Errors of the store.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store URL is not one rsagg can open.
    #[error("store URL `{url}`: {message}")]
    Url {
        /// The URL as configured.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// The object store failed (said on one line: an S3 error document as its code and
    /// message, see [`one_line`]).
    #[error("object store at `{path}`: {}", one_line(source))]
    ObjectStore {
        /// Object path.
        path: String,
        /// Underlying error.
        #[source]
        source: object_store::Error,
    },
    /// A local (`file://`) store's file could not be written.
    #[error("file `{}`: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// Underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The body stream failed while it was being stored.
    #[error("body of `{uri}`: {message}")]
    Body {
        /// Where the body came from.
        uri: String,
        /// The reader's error.
        message: String,
    },
    /// Another writer opened the same state: this one must stop (its writes would be lost).
    #[error("state at `{path}`: fenced out by another writer of the same collection")]
    Fenced {
        /// State path.
        path: String,
    },
    /// A state opened read-only was asked to write.
    #[error("state at `{path}`: opened read-only, cannot be written")]
    ReadOnly {
        /// State path.
        path: String,
    },
    /// The state database failed (on one line, as [`Error::ObjectStore`]).
    #[error("state at `{path}`: {}", one_line(source))]
    State {
        /// State path.
        path: String,
        /// Underlying error.
        #[source]
        source: slatedb::Error,
    },
    /// The store was given up on: it refused access, or stayed unreachable (the circuit
    /// breaker tripped), or the state could not be opened in time.
    #[error("{0}")]
    Unavailable(StoreFault),
    /// A stored record could not be read back.
    #[error("state record `{key}`: {source}")]
    Record {
        /// Key of the record.
        key: String,
        /// Decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// The object store failed on `path`: the one way every crate maps an
    /// [`object_store::Error`] to an error naming the object.
    pub fn object_store(path: impl std::fmt::Display, source: object_store::Error) -> Error {
        Error::ObjectStore {
            path: path.to_string(),
            source,
        }
    }

    /// True when this writer was fenced out by another (exit code 3 of `rsagg run`): the
    /// state said so, or the store refused a write because it had ([`FencedOut`]).
    pub fn is_fenced(&self) -> bool {
        match self {
            Error::Fenced { .. } => true,
            Error::ObjectStore {
                source: object_store::Error::Generic { source, .. },
                ..
            } => source.is::<FencedOut>(),
            _ => false,
        }
    }
}

/// An error of a stage above the store that may carry the store's own [`Error`]: whether
/// another writer fenced this one out (exit code 3 of `rsagg run`) is decided once, by
/// [`Error::is_fenced`], for every stage's error.
pub trait StoreFailure {
    /// The store's error this one carries, if any.
    fn store_error(&self) -> Option<&Error>;

    /// True when another writer fenced this one out.
    fn is_fenced(&self) -> bool {
        self.store_error().is_some_and(Error::is_fenced)
    }
}
