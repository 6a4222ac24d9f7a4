//! rsagg-server: HTTP serving of what pipelines published (`rsagg serve`).
//!
//! The server reads only published objects from each pipeline's store (it writes one small
//! marker, below; the WebSub callbacks of `run --follow --listen` go to an injected intake):
//! it never opens the state database, so it can run beside (and never fences) the job that
//! writes it. Requests are routed by path only (the server may sit behind a proxy), each
//! collection under the path of its `collection.base_url`:
//!
//! ```text
//! /.well-known/resourcesync      the Source Description of every collection served (spec 8)
//! /robots.txt                    a Sitemap: line per Resource List (spec 6.3.4)
//! /healthz                       liveness: 200 `ok` while the process answers
//! /readyz                        readiness: 200 when every collection's store answers,
//!                                else 503 naming the collections whose store does not
//!                                (each answer reused for the refresh bound)
//! /metrics                       Prometheus text (0.0.4): last run per collection and
//!                                upstream, totals and histograms of the run history, last
//!                                success and lag per upstream, quarantine, publish and GC
//!                                figures, build info, and the server's request counters
//! /status                        HTML overview, a row per collection, failing first,
//!                                filterable (?q=, ?state=, ?page=; no script)
//! /status/{collection}           HTML status page of one collection (no script)
//! {base}capabilitylist.xml, {base}resourcelist.xml, …, {base}resourcelist/…, …
//!                                the published object at the same path (an allowlist)
//! {base}r/{upstream}/…           a resource copy, found through the published Resource List
//! {base}change/                  the change-notification topic (collections with [notify]):
//!                                HEAD/GET with Link rel=self and rel=hub, the latest payload
//! {base}websub/{upstream}        the WebSub callback of that upstream (GET verification,
//!                                POST delivery), only with an injected [`PushIntake`]
//!                                (`run --follow --listen`); 404 under `serve`
//! ```
//!
//! The one object the server writes is `notify/fetched.json` (see `topic.rs`): which payload
//! the topic last served, for a publisher waiting for a stock hub to fetch it. It is not
//! state, so it never fences the job.
//!
//! # Layout
//!
//! - `callbacks.rs`: the WebSub callbacks, handing verification and deliveries to the
//!   injected [`PushIntake`] (bounded body, quick answers, 503 when its queue is full).
//! - `collection.rs`: a served collection (name, base URL and path, object store) and the
//!   checks that several can be served together.
//! - `documents.rs`: the published documents (allowlisted paths, streamed from the store) and
//!   the two documents made on the fly (Source Description, `robots.txt`).
//! - `copies.rs`: finding a copy through the published Resource List, with a bounded cache of
//!   parsed parts.
//! - `stats.rs`: reading what the runs left (`stats/last-run.json`, `stats/history.json`,
//!   `published/gc.json`, `published/resourcelist.json`), cached by object version and
//!   reused for a refresh bound, so a scrape asks a store only when it may have changed.
//! - `metrics.rs`: `/metrics` (text format 0.0.4) and the request counters.
//! - `status.rs`: `/status` (the overview) and `/status/{collection}` (HTML, everything
//!   from upstreams escaped).
//! - `html.rs`: HTML escaping, shared by `status.rs` and `chart.rs`.
//! - `chart.rs`: the inline SVG line charts of `/status` (harvest rate and lag over the
//!   recorded runs).
//! - `topic.rs`: the change-notification topic URI (CN 1.0.1 4.1) and the fetch marker.
//! - `http.rs`: validators (`ETag`, `Last-Modified`), conditional GET, single `Range`
//!   requests (`206`, `416`, `If-Range`), the marker of compressible answers, small responses.
//! - `router.rs`: the axum router dispatching by path, wrapped in tower-http's compression
//!   (gzip, brotli) of marked answers and the request counting, and [`Server`] (bind, serve,
//!   graceful shutdown).
//! - `listen.rs`: the connection loop of every listener (`serve`, `run --follow --listen`,
//!   `hub`) and its [`Limits`]: a header read timeout that is also the idle keep-alive limit,
//!   a cap on concurrent connections, and the probe listener (`--probe-listen`: `/healthz`
//!   and `/readyz` with a connection pool of their own).
//! - `budget.rs`: the total bound on request body bytes a listener holds at once (taken as
//!   bodies are read, 503 with `Retry-After` when they cannot be had in time).

mod budget;
mod callbacks;
mod chart;
mod collection;
mod copies;
mod documents;
mod html;
mod http;
pub mod hub;
mod listen;
mod metrics;
mod router;
mod stats;
mod status;
mod topic;

pub use callbacks::{LivePushStats, MAX_PAYLOAD_BYTES, Push, PushIntake};
pub use collection::{Collection, check_collections};
pub use listen::{Limits, PROBE_MAX_CONNECTIONS, probes_only};
pub use router::{
    DEFAULT_LISTEN, HEALTHZ, METRICS, Options, READYZ, STATUS, Server, router, router_with,
    router_with_options,
};
pub use stats::StatsRefresh;

/// Errors of the server crate: configuration of the collections served, and failures of the
/// stores behind a request (which answer that request with an error status, never stop the
/// server).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A collection's base URL cannot be served.
    #[error("collection `{name}`: base URL `{url}`: {message}")]
    BaseUrl {
        /// The collection.
        name: String,
        /// The base URL as configured.
        url: String,
        /// What is wrong with it.
        message: String,
    },
    /// Two collections would answer the same requests.
    #[error("collections `{first}` and `{second}` {message}")]
    Conflict {
        /// The collection given first.
        first: String,
        /// The collection given later.
        second: String,
        /// What they share.
        message: String,
    },
    /// A store could not be opened.
    #[error(transparent)]
    Store(#[from] rsagg_store::Error),
    /// An object store request failed.
    #[error("object `{path}`: {source}")]
    ObjectStore {
        /// Object path.
        path: String,
        /// Underlying error.
        #[source]
        source: object_store::Error,
    },
    /// A published document could not be read.
    #[error("published document `{path}`: {source}")]
    Document {
        /// Object path.
        path: String,
        /// Why.
        #[source]
        source: rsagg_sitemap::Error,
    },
    /// The publisher's metadata could not be decoded.
    #[error("published metadata `{path}`: {source}")]
    Metadata {
        /// Object path.
        path: String,
        /// Why.
        #[source]
        source: serde_json::Error,
    },
    /// An object is larger than the server reads (the stats object).
    #[error("object `{path}`: {size} bytes, more than the {limit} read")]
    TooLarge {
        /// Object path.
        path: String,
        /// Its size.
        size: u64,
        /// The most read.
        limit: u64,
    },
    /// A background task (parsing a document) did not finish.
    #[error("{what}: {source}")]
    Task {
        /// What the task was doing.
        what: String,
        /// Why it did not finish.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The listen address could not be bound.
    #[error("cannot listen on `{addr}`: {source}")]
    Bind {
        /// The address as given.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped on an I/O error.
    #[error("server: {0}")]
    Serve(#[source] std::io::Error),
}
