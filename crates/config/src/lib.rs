//! `pipelines/*.toml`: one file per republished collection, fed by one or more upstreams.
//!
//! Parsing is typed (`deny_unknown_fields` everywhere, so a misspelt key is an error rather
//! than silently ignored), then the rules (`PipelineConfig::problems`) check everything that
//! needs no I/O and name the file, line, column and key of each problem. Building the runtime
//! objects (store, HTTP client) happens later, with I/O.
//!
//! `${NAME}` in a string value is replaced by the environment variable `NAME` (for secrets
//! and per-deployment values), `${NAME:-default}` by `default` when it is unset; an unset
//! variable without a default is an error naming it. Substitution is into parsed values
//! only (`source.rs`), never into the text.
//!
//! Every problem of a file is reported at once, each with its line, column and dotted key
//! (`upstream[0].url`), taken from the TOML parser's spans.
//!
//! The full reference of every key is `pipelines/reference.toml`; the contract's keys are in
//! `docs/contract.md` (Pipeline config).
//!
//! # Layout
//!
//! - `lib.rs`: the typed sections, loading, pure validation, and [`Error`].
//! - `source.rs`: spans of keys and values, `${NAME}` substitution into string values, line
//!   and column of a problem.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use url::Url;

mod source;

/// One problem of a pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line (0 when unknown).
    pub line: usize,
    /// 1-based column, in characters (0 when unknown).
    pub column: usize,
    /// Dotted key (`upstream[0].url`), when known.
    pub key: String,
    /// What is wrong, and what is expected.
    pub message: String,
}

/// Errors of pipeline files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A pipeline file cannot be read.
    #[error("{}: cannot read: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A pipeline file is invalid: every problem found, one per line of the message as
    /// `FILE:LINE:COLUMN: KEY: MESSAGE`.
    #[error("{}", render(path, problems))]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, in file order.
        problems: Vec<Problem>,
    },
}

fn render(path: &Path, problems: &[Problem]) -> String {
    problems
        .iter()
        .map(|p| {
            let key = if p.key.is_empty() {
                String::new()
            } else {
                format!("{}: ", p.key)
            };
            format!(
                "{}:{}:{}: {key}{}",
                path.display(),
                p.line,
                p.column,
                p.message
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A whole pipeline file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PipelineConfig {
    /// The republished collection.
    pub collection: CollectionConfig,
    /// Where copies, state and published documents are kept.
    pub store: StoreConfig,
    /// The upstream Sources feeding the collection (at least one).
    #[serde(rename = "upstream", default)]
    pub upstreams: Vec<UpstreamConfig>,
    /// HTTP client limits shared by all upstreams of this pipeline.
    #[serde(default)]
    pub fetch: FetchSection,
    /// How long a response, a document, an upstream's pass and a run may take.
    #[serde(default)]
    pub deadlines: DeadlinesConfig,
    /// Republishing options.
    #[serde(default)]
    pub publish: PublishConfig,
    /// Change notifications rsagg publishes.
    #[serde(default)]
    pub notify: Option<NotifyConfig>,
}

/// `[collection]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CollectionConfig {
    /// `[a-z0-9-]+`, unique among the pipelines served together.
    pub name: String,
    /// Public prefix of the republished collection; ends with `/`.
    pub base_url: Url,
    /// Runs (and poll passes) kept as points in the run history `stats/history.json`, the
    /// data of `/status`'s charts (the totals `/metrics` exports cover every run whatever
    /// this says). 1..=10000; the object is rewritten whole after each run, so it is kept
    /// small (about 200 bytes per run and upstream).
    #[serde(default = "default_history_runs")]
    pub history_runs: usize,
    /// A document describing the collection (an http(s) URL): linked with `rs:ln
    /// rel="describedby"` from the Capability List and the Source Description, as spec 8
    /// and 9.1 recommend (without it `rsagg validate --strict` warns about both).
    #[serde(default)]
    pub describedby: Option<Url>,
}

/// `collection.history_runs` unless set.
pub const DEFAULT_HISTORY_RUNS: usize = 200;

fn default_history_runs() -> usize {
    DEFAULT_HISTORY_RUNS
}

/// `[store]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// `file:///abs/dir` (the embedded default) or `s3://bucket/prefix` (endpoint and
    /// credentials from the `AWS_*` environment variables).
    pub url: Url,
    /// Memory, in bytes, that the store's caches and buffers below share: each of them left
    /// unset takes its share of it ([`StoreConfig::MEMORY_SHARES`], in twentieths: the
    /// unflushed writes 8, the recent blobs and the block cache 3 each, the meta cache and
    /// the compactions 2 each, the listed URIs and their filter 1 each), so that one number
    /// bounds a run's memory beyond its fixed buffers. Default 160 MiB; at least 20 MiB. (Compaction
    /// tables are at least 1 MiB each: below 20 MiB per compaction their share is
    /// exceeded.)
    #[serde(default = "StoreConfig::default_memory_bytes")]
    pub memory_bytes: u64,
    /// Memory, in bytes, for the bodies of small blobs (up to 256 KiB each) a run stored, so
    /// that the dumps it builds next read them from memory instead of back from the store (on
    /// S3, one GET each). Default: 3/20 of `memory_bytes` (24 MiB); 0 keeps none.
    #[serde(default)]
    pub recent_blob_bytes: Option<u64>,
    /// Local disk, in bytes, for the bodies a run stores (each up to 8 MiB, plus 36 bytes of
    /// header), so that the Resource Dump built after a baseline reads them from there rather
    /// than back from the store (on S3 one GET each; on `file://` one small file each, which
    /// at 10^7 resources no longer fit the page cache); bodies past it are read back.
    /// Default 1 GiB; 0 keeps none.
    #[serde(default = "StoreConfig::default_spool_bytes")]
    pub spool_bytes: u64,
    /// The directory in which a run makes its spool's own directory (removed at its end, and
    /// by the next run when a crash left it behind). Default: the system's temporary
    /// directory (`TMPDIR`, else `/tmp`).
    #[serde(default)]
    pub spool_dir: Option<PathBuf>,
    /// Memory, in bytes, for the state database's cache of SST data blocks. Default: 3/20 of
    /// `memory_bytes` (24 MiB); 0 keeps none (every lookup past the memtable reads the store).
    #[serde(default)]
    pub state_block_cache_bytes: Option<u64>,
    /// Memory, in bytes, for the state database's cache of SST indexes and filters. Default:
    /// 2/20 of `memory_bytes` (16 MiB); 0 keeps none.
    #[serde(default)]
    pub state_meta_cache_bytes: Option<u64>,
    /// Writes the state database holds in memory before flushing them, at most, in bytes.
    /// Default: 8/20 of `memory_bytes` (64 MiB); at least 1 MiB (the state's tables are cut at
    /// half of it, 64 MiB at most). The largest share: with 32 MiB a 10^5-record OAI-PMH
    /// harvest took 26 s instead of 16 s, its writes waiting for the state's flushes.
    #[serde(default)]
    pub state_max_unflushed_bytes: Option<u64>,
    /// Size, in bytes, of the tables the state database's compaction writes, at most; each
    /// compaction holds up to two of them in memory. Default: the compactions' 2/20 of
    /// `memory_bytes` over twice `state_compactions` (4 MiB; at least 1 MiB is used).
    /// Smaller tables make a fresh run's lookups read smaller indexes and filters, but from
    /// more tables: at 10^7 resources, 8 MiB tables cut an incremental run's state reads from
    /// 19.5 to 11.6 MB and raised its GETs by a third (on S3 the requests are what costs).
    #[serde(default)]
    pub state_compaction_sst_bytes: Option<u64>,
    /// Compactions of the state database run at once. Default 2 (at least 1 is used).
    #[serde(default = "StoreConfig::default_state_compactions")]
    pub state_compactions: u32,
    /// Memory, in bytes, for the URIs a baseline or re-sync has seen listed (to store a URI
    /// listed twice once, and to delete after the list what it no longer names): beyond it
    /// they go to sorted runs of 16 bytes a URI on local disk (`TMPDIR`), so the memory
    /// does not grow with the collection. About 40 bytes a URI; default: 1/20 of
    /// `memory_bytes` (8 MiB, ~200,000 URIs); at least ~40 KiB is used.
    #[serde(default)]
    pub listed_memory_bytes: Option<u64>,
    /// Memory, in bytes, for the Bloom filter over the listed URIs on local disk: a URI not
    /// seen before is told apart in memory, except for the filter's false positives (each a
    /// binary search of the runs on disk). Default: 1/20 of `memory_bytes` (8 MiB: under 1%
    /// false positives up to ~5·10^6 URIs; raise it for larger upstreams).
    #[serde(default)]
    pub listed_filter_bytes: Option<u64>,
    /// Retries of one S3 request (timeouts, connection errors, 5xx) before it counts as
    /// failed. Default 3.
    #[serde(default = "StoreConfig::default_retries")]
    pub retries: u32,
    /// How long one S3 request is retried at most (default `30s`).
    #[serde(
        default = "StoreConfig::default_retry_timeout",
        with = "humantime_serde"
    )]
    pub retry_timeout: Duration,
    /// Consecutive failed store requests (each after its retries) that end the run with
    /// exit 1 (default 3); a refusal (401/403: credentials, permissions) ends it at once.
    #[serde(default = "StoreConfig::default_max_failures")]
    pub max_failures: u32,
    /// How long a run waits for the state database to open (default `2m`); past it, or
    /// when the store refuses access, the run ends with exit 1.
    #[serde(
        default = "StoreConfig::default_open_timeout",
        with = "humantime_serde"
    )]
    pub open_timeout: Duration,
}

impl StoreConfig {
    // The defaults live here, not in `rsagg-store`, so that the config (and `rsagg check`,
    // and the config fuzz target) does not link the state engine; the runner builds the
    // store's options from these fields (`rsagg_pipeline::store_options`), and a test there
    // checks that these defaults are the store's own (`StoreOptions::default()`).

    /// `[store] memory_bytes` unless set: 160 MiB. A run holds more than this: the program,
    /// HTTP, 64 resources in flight, the publish steps' buffers and the state's flushes and
    /// compactions (a 10^6-record OAI-PMH run peaked at 349–361 MiB with it, 494 MiB
    /// before), but none of it grows with the collection.
    pub const DEFAULT_MEMORY: u64 = 160 << 20;
    /// The least `[store] memory_bytes`: the unflushed writes' share then still meets their
    /// minimum, 1 MiB (compaction tables stay at least 1 MiB whatever their share).
    pub const MIN_MEMORY: u64 = 20 << 20;
    /// The shares of `[store] memory_bytes`, in twentieths, that the budgets left unset take:
    /// recent blobs, block cache, meta cache, unflushed writes, compactions (all of them:
    /// `state_compactions` × 2 tables), listed URIs, their filter. They add up to 20.
    pub const MEMORY_SHARES: MemoryShares = MemoryShares {
        recent_blob: 3,
        block_cache: 3,
        meta_cache: 2,
        unflushed: 8,
        compactions: 2,
        listed: 1,
        listed_filter: 1,
    };
    /// `[store] spool_bytes` unless set: 1 GiB.
    pub const DEFAULT_SPOOL_BYTES: u64 = 1 << 30;
    /// `[store] state_compactions` unless set: 2.
    pub const DEFAULT_STATE_COMPACTIONS: u32 = 2;
    /// `[store] retries` unless set: a run ends promptly on a dead store rather than fail
    /// each request on its own after minutes of retries.
    pub const DEFAULT_RETRIES: u32 = 3;
    /// `[store] retry_timeout` unless set: 30 s.
    pub const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(30);
    /// `[store] max_failures` unless set: 3.
    pub const DEFAULT_MAX_FAILURES: u32 = 3;

    fn default_memory_bytes() -> u64 {
        Self::DEFAULT_MEMORY
    }

    /// The budgets of a `[store]` that sets none of them: the shares of
    /// [`StoreConfig::DEFAULT_MEMORY`].
    pub fn default_budgets() -> MemoryBudgets {
        MemoryBudgets::shares_of(Self::DEFAULT_MEMORY, Self::DEFAULT_STATE_COMPACTIONS)
    }

    /// The memory budgets of a run: each set one as it is, the others their share of
    /// `memory_bytes` ([`StoreConfig::MEMORY_SHARES`]).
    pub fn budgets(&self) -> MemoryBudgets {
        let d = MemoryBudgets::shares_of(self.memory_bytes, self.state_compactions);
        MemoryBudgets {
            recent_blob_bytes: self.recent_blob_bytes.unwrap_or(d.recent_blob_bytes),
            state_block_cache_bytes: self
                .state_block_cache_bytes
                .unwrap_or(d.state_block_cache_bytes),
            state_meta_cache_bytes: self
                .state_meta_cache_bytes
                .unwrap_or(d.state_meta_cache_bytes),
            state_max_unflushed_bytes: self
                .state_max_unflushed_bytes
                .unwrap_or(d.state_max_unflushed_bytes),
            state_compaction_sst_bytes: self
                .state_compaction_sst_bytes
                .unwrap_or(d.state_compaction_sst_bytes),
            state_compactions: d.state_compactions,
            listed_memory_bytes: self.listed_memory_bytes.unwrap_or(d.listed_memory_bytes),
            listed_filter_bytes: self.listed_filter_bytes.unwrap_or(d.listed_filter_bytes),
        }
    }

    fn default_spool_bytes() -> u64 {
        Self::DEFAULT_SPOOL_BYTES
    }

    /// Where the spool goes: `spool_dir`, else the system's temporary directory.
    pub fn spool_parent(&self) -> PathBuf {
        self.spool_dir.clone().unwrap_or_else(std::env::temp_dir)
    }

    fn default_state_compactions() -> u32 {
        Self::DEFAULT_STATE_COMPACTIONS
    }

    fn default_retries() -> u32 {
        Self::DEFAULT_RETRIES
    }

    fn default_retry_timeout() -> Duration {
        Self::DEFAULT_RETRY_TIMEOUT
    }

    fn default_max_failures() -> u32 {
        Self::DEFAULT_MAX_FAILURES
    }

    fn default_open_timeout() -> Duration {
        Duration::from_secs(120)
    }
}

/// The shares of `[store] memory_bytes`, in twentieths ([`StoreConfig::MEMORY_SHARES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryShares {
    /// `recent_blob_bytes`.
    pub recent_blob: u64,
    /// `state_block_cache_bytes`.
    pub block_cache: u64,
    /// `state_meta_cache_bytes`.
    pub meta_cache: u64,
    /// `state_max_unflushed_bytes`.
    pub unflushed: u64,
    /// `state_compactions` × 2 × `state_compaction_sst_bytes`.
    pub compactions: u64,
    /// `listed_memory_bytes`.
    pub listed: u64,
    /// `listed_filter_bytes`.
    pub listed_filter: u64,
}

impl MemoryShares {
    /// The twentieths handed out: 20.
    pub const fn sum(&self) -> u64 {
        self.recent_blob
            + self.block_cache
            + self.meta_cache
            + self.unflushed
            + self.compactions
            + self.listed
            + self.listed_filter
    }
}

/// A run's memory budgets as `[store]` resolves them ([`StoreConfig::budgets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBudgets {
    /// Bodies of small blobs the run stored, for its dumps.
    pub recent_blob_bytes: u64,
    /// The state's SST data blocks.
    pub state_block_cache_bytes: u64,
    /// The state's SST indexes and filters.
    pub state_meta_cache_bytes: u64,
    /// The state's unflushed writes.
    pub state_max_unflushed_bytes: u64,
    /// One compaction output table (each compaction holds up to two).
    pub state_compaction_sst_bytes: u64,
    /// Compactions at once (at least 1).
    pub state_compactions: u32,
    /// The URIs seen listed, in memory.
    pub listed_memory_bytes: u64,
    /// The Bloom filter over the listed URIs on disk.
    pub listed_filter_bytes: u64,
}

impl MemoryBudgets {
    /// Every budget its share of `memory` ([`StoreConfig::MEMORY_SHARES`]), the
    /// compactions' share split over `compactions` × 2 tables (the state opens tables of at
    /// least 1 MiB whatever this says, `rsagg_store::State::open_fenced`).
    pub fn shares_of(memory: u64, compactions: u32) -> MemoryBudgets {
        let sh = StoreConfig::MEMORY_SHARES;
        let share = |n: u64| memory / sh.sum() * n;
        let compactions = compactions.max(1);
        MemoryBudgets {
            recent_blob_bytes: share(sh.recent_blob),
            state_block_cache_bytes: share(sh.block_cache),
            state_meta_cache_bytes: share(sh.meta_cache),
            state_max_unflushed_bytes: share(sh.unflushed),
            state_compaction_sst_bytes: share(sh.compactions) / (2 * u64::from(compactions)),
            state_compactions: compactions,
            listed_memory_bytes: share(sh.listed),
            listed_filter_bytes: share(sh.listed_filter),
        }
    }

    /// What the budgets add up to: with none set on its own, `[store] memory_bytes` (but
    /// for rounding down to whole bytes per share).
    pub fn total(&self) -> u64 {
        self.recent_blob_bytes
            + self.state_block_cache_bytes
            + self.state_meta_cache_bytes
            + self.state_max_unflushed_bytes
            + u64::from(self.state_compactions) * 2 * self.state_compaction_sst_bytes
            + self.listed_memory_bytes
            + self.listed_filter_bytes
    }
}

/// Where the baseline comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BaselineSource {
    /// The Resource List (or its index): one GET per resource.
    #[default]
    List,
    /// The Resource Dump's ZIP packages; falls back to the list when the dump is missing or
    /// broken.
    Dump,
}

/// `[[upstream]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `[a-z0-9-]+`, unique in the file; part of rsagg's URIs for the copies.
    pub name: String,
    /// Any discovery entry point: `/.well-known/resourcesync`, a Source Description, a
    /// Capability List, a site root (robots.txt, HTML `<link>`, HTTP `Link` header), or a
    /// Resource List with an `up` link.
    pub url: Url,
    /// Allow private, loopback and link-local targets (off by default: an upstream document
    /// must not make rsagg fetch from the internal network).
    #[serde(default)]
    pub allow_private: bool,
    /// Which Capability Lists (sets of resources) to harvest; all when absent.
    #[serde(default)]
    pub capability_lists: Option<Vec<Url>>,
    /// Baseline from the Resource List (`list`, default) or the Resource Dump (`dump`).
    #[serde(default)]
    pub baseline: BaselineSource,
    /// How often `run --follow` polls the Change List (e.g. `30s`, `5m`; default `5m`).
    #[serde(default, with = "humantime_serde_opt")]
    pub poll_interval: Option<Duration>,
    /// With `run --follow --listen`: subscribe to the upstream's change-notification
    /// channels (CN 1.0.1) for low-latency updates; polling goes on regardless, as the
    /// fallback. Default true; false never subscribes.
    #[serde(default = "yes")]
    pub push: bool,
    /// The lease requested when subscribing (`hub.lease_seconds`; the hub may grant another;
    /// renewed at 80% of what it granted). Default `1d`.
    #[serde(default, with = "humantime_serde_opt")]
    pub push_lease: Option<Duration>,
    /// Environment variable holding a bearer token for this upstream.
    #[serde(default)]
    pub bearer_token_env: Option<String>,
    /// Environment variable holding `user:password` for HTTP basic authentication.
    #[serde(default)]
    pub basic_auth_env: Option<String>,
    /// Hosts (`host` or `host:port`) the credentials may be sent to; default: the host of
    /// `url`. Never sent anywhere else, redirects included.
    #[serde(default)]
    pub auth_hosts: Option<Vec<String>>,
    /// What the upstream speaks: `resourcesync` (the default: `url` is a discovery entry
    /// point) or `oai-pmh` (`url` is an OAI-PMH 2.0 repository's base URL; its records are
    /// harvested by `ListRecords` and republished as resources, see `docs/contract.md`).
    #[serde(default)]
    pub kind: UpstreamKind,
    /// `kind = "oai-pmh"`: the metadata format harvested (`metadataPrefix`, OAI-PMH 2.0
    /// section 3.4); default `oai_dc`, which every repository offers.
    #[serde(default)]
    pub metadata_prefix: Option<String>,
    /// `kind = "oai-pmh"`: harvest only these sets (`setSpec`s, OAI-PMH 2.0 section 3.4),
    /// each by a selective harvest of its own; default: the whole repository. A record in
    /// two of them is one resource.
    #[serde(default)]
    pub sets: Option<Vec<String>>,
    /// `kind = "oai-pmh"`, for a repository that does not keep deletions (`deletedRecord`
    /// `no` or `transient`): how often a full re-list finds the records deleted since
    /// (default `7d`); a repository with `persistent` deletions reports them in every
    /// incremental harvest and is never re-listed.
    #[serde(default, with = "humantime_serde_opt")]
    pub relist_every: Option<Duration>,
    /// `kind = "oai-pmh"`: the date windows a long or first harvest is cut into (each a
    /// selective harvest by `from`/`until`, OAI-PMH 2.0 section 3.4, done, committed and
    /// resumed on its own, so a lost token re-lists one window, not the whole list): a
    /// duration of at least `1d` (default `365d`), or `"none"` for a provider that refuses
    /// date ranges (one list, as metha's `-no-intervals`).
    #[serde(default)]
    pub window: Option<OaiWindowSize>,
    /// `kind = "oai-pmh"`: how records are harvested: `records` (default, `ListRecords`) or
    /// `identifiers` (`ListIdentifiers`, then `GetRecord` per identifier, concurrently
    /// within the per-host limits: for providers whose `ListRecords` breaks on some record).
    #[serde(default)]
    pub strategy: OaiStrategy,
}

/// `[[upstream]] window` of an OAI-PMH upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OaiWindowSize {
    /// One list, no `from`/`until` cut (`"none"`).
    None,
    /// Windows of this length (`"30d"`, `"365d"`).
    Every(Duration),
}

impl<'de> Deserialize<'de> for OaiWindowSize {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim() == "none" {
            return Ok(OaiWindowSize::None);
        }
        humantime::parse_duration(text.trim())
            .map(OaiWindowSize::Every)
            .map_err(|e| {
                serde::de::Error::custom(format!(
                    "`{text}` is neither \"none\" nor a duration such as \"30d\": {e}"
                ))
            })
    }
}

/// `[[upstream]] strategy` of an OAI-PMH upstream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OaiStrategy {
    /// `ListRecords` (section 4.5).
    #[default]
    Records,
    /// `ListIdentifiers` (section 4.3), then `GetRecord` (section 4.1) per identifier.
    Identifiers,
}

/// What an upstream speaks (`[[upstream]] kind`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum UpstreamKind {
    /// A ResourceSync Source (ANSI/NISO Z39.99-2017).
    #[default]
    Resourcesync,
    /// An OAI-PMH 2.0 data provider.
    OaiPmh,
}

fn yes() -> bool {
    true
}

/// The lease requested by default (`push_lease`).
pub const DEFAULT_PUSH_LEASE: Duration = Duration::from_secs(86_400);

impl UpstreamConfig {
    /// `poll_interval`, else its default (5 minutes).
    pub fn poll_every(&self) -> Duration {
        self.poll_interval.unwrap_or(Duration::from_secs(300))
    }

    /// `push_lease`, else [`DEFAULT_PUSH_LEASE`].
    pub fn push_lease(&self) -> Duration {
        self.push_lease.unwrap_or(DEFAULT_PUSH_LEASE)
    }

    /// True for an OAI-PMH upstream (`kind = "oai-pmh"`).
    pub fn is_oai(&self) -> bool {
        self.kind == UpstreamKind::OaiPmh
    }

    /// `metadata_prefix`, else `oai_dc`.
    pub fn metadata_prefix(&self) -> &str {
        self.metadata_prefix.as_deref().unwrap_or("oai_dc")
    }

    /// `relist_every`, else 7 days.
    pub fn relist_every(&self) -> Duration {
        self.relist_every.unwrap_or(Duration::from_secs(7 * 86_400))
    }

    /// The length of an OAI-PMH harvest's date windows: `window`, else 365 days; `None`
    /// for `window = "none"`.
    pub fn oai_window(&self) -> Option<Duration> {
        match self.window {
            Some(OaiWindowSize::None) => None,
            Some(OaiWindowSize::Every(d)) => Some(d),
            None => Some(Duration::from_secs(365 * 86_400)),
        }
    }
}

/// `[fetch]`: HTTP limits, and how rsagg presents itself to Sources (politeness: Sources ask
/// harvesters for a contact and a bounded request rate).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FetchSection {
    /// Concurrent requests overall (default 32).
    pub concurrency: usize,
    /// Concurrent requests per host (default 8).
    pub per_host: usize,
    /// Retries after a failed attempt (timeouts, 5xx, 429) (default 4).
    pub retries: u32,
    /// Largest resource body accepted, in bytes (default 1 GiB).
    pub max_body_bytes: u64,
    /// Largest ResourceSync document accepted, in bytes, after inflation (default 64 MiB;
    /// the spec's limit is 50 MB).
    pub max_document_bytes: u64,
    /// Longest URI (`<loc>`, `<rs:ln href>`) of an entry in an upstream's lists, in bytes
    /// (default 8192; 256..=65536). A longer entry is skipped: counted (`skipped` in the
    /// report), logged with an excerpt, never fetched, stored or echoed whole.
    pub max_uri_bytes: usize,
    /// Connection timeout (default `10s`).
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// Longest silence while reading a response (default `30s`).
    #[serde(with = "humantime_serde")]
    pub read_timeout: Duration,
    /// How long a kept-alive connection to an upstream may stay idle before it is closed
    /// (default `5s`). Open connections cost memory (~24 KiB each): this bounds a fleet
    /// worker's to the hosts it asked within this time, whatever the number of pipelines.
    /// Raise it above `1 / per_host_rate` to keep a slow-paced Source's connection.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// Longest `Retry-After` (with 429 or 503) waited for before the retry (default `10m`):
    /// a shorter one is waited in full, a longer one parks the upstream until then (an
    /// OAI-PMH set asks nothing before that time, in this run or the next; the report's
    /// `parked_until` says when) while the run goes on with the others.
    #[serde(with = "humantime_serde")]
    pub retry_after_max: Duration,
    /// Requests per second to one upstream host, retries and redirect hops included, on top of
    /// `per_host` (which bounds requests in flight, not their rate). Default: no limit.
    pub per_host_rate: Option<f64>,
    /// The whole `User-Agent` header; default [`DEFAULT_USER_AGENT`]. See
    /// [`FetchSection::user_agent`] for how `contact` is added.
    pub user_agent: Option<String>,
    /// How a Source's operator reaches whoever runs this harvester (an email address or a
    /// URL), sent in the `User-Agent` as `(+CONTACT)`, the common crawler form, so that a
    /// Source with a problem writes rather than blocks. Default: none.
    pub contact: Option<String>,
}

/// `[deadlines]`: every wait of a run is bounded, so that one slow upstream (a body dripping
/// a byte a second, an endless list) neither keeps a run going forever nor keeps the other
/// upstreams' harvest from being published.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadlinesConfig {
    /// One resource's response, headers and body, per attempt (default `30m`). Counted as
    /// the time spent waiting for the upstream (`read_timeout` only bounds silence).
    #[serde(with = "humantime_serde")]
    pub body: Duration,
    /// Average bytes per second below which a response is abandoned, once it has been
    /// waited for longer than `read_timeout` (default 1024; 0: no minimum).
    pub min_rate: u64,
    /// One ResourceSync document (a list, an index, a Capability List, robots.txt, an HTML
    /// page) in place of `body` (default `10m`).
    #[serde(with = "humantime_serde")]
    pub document: Duration,
    /// One upstream's pass, discovery to the last commit (default `6h`). When it passes,
    /// rsagg stops taking new work from the upstream, cuts the transfers still in flight
    /// (those resources count as failed), commits what is done, reports the
    /// upstream as failed with the reason (exit 1) and publishes what every upstream
    /// brought; the next run goes on from what was committed.
    #[serde(with = "humantime_serde")]
    pub pass: Duration,
    /// The harvest of a whole `run --once` (every upstream's pass ends by then), before it
    /// publishes; default: none (each pass is bounded by `pass`).
    #[serde(default, with = "humantime_serde_opt")]
    pub run: Option<Duration>,
}

impl Default for DeadlinesConfig {
    fn default() -> Self {
        DeadlinesConfig {
            body: Duration::from_secs(30 * 60),
            min_rate: 1024,
            document: Duration::from_secs(10 * 60),
            pass: Duration::from_secs(6 * 3600),
            run: None,
        }
    }
}

/// The `User-Agent` without `user_agent` or `contact`: product, version and where to find out
/// about it (the fetcher's default too).
pub const DEFAULT_USER_AGENT: &str = concat!(
    "rsagg/",
    env!("CARGO_PKG_VERSION"),
    " (+https://github.com/rsagg/rsagg)"
);

impl FetchSection {
    /// The `User-Agent` to send: `user_agent`, else [`DEFAULT_USER_AGENT`]; with a `contact`,
    /// `USER_AGENT (+CONTACT)`, where `USER_AGENT` is `user_agent` or else `rsagg/VERSION`
    /// (the contact replaces the project's URL rather than following it).
    pub fn user_agent(&self) -> String {
        match (&self.user_agent, &self.contact) {
            (Some(ua), Some(c)) => format!("{ua} (+{c})"),
            (None, Some(c)) => format!("rsagg/{} (+{c})", env!("CARGO_PKG_VERSION")),
            (Some(ua), None) => ua.clone(),
            (None, None) => DEFAULT_USER_AGENT.to_owned(),
        }
    }
}

/// Why `v` cannot be (part of) a `User-Agent` header, if it cannot: empty, surrounding spaces,
/// or anything but printable ASCII (control characters would end or split the header;
/// non-ASCII bytes are opaque to HTTP, RFC 9110 section 5.5). A `contact` goes inside a
/// comment `(+CONTACT)`, so it also may not hold spaces, parentheses or backslashes.
fn header_text_problem(v: &str, in_comment: bool) -> Option<String> {
    if let Some(m) = too_long(v, MAX_HEADER_TEXT_BYTES) {
        return Some(m);
    }
    if v.is_empty() {
        return Some("must not be empty".into());
    }
    if let Some(c) = v.chars().find(|c| !(' '..='~').contains(c)) {
        return Some(format!(
            "`{}`: only printable ASCII fits in a User-Agent header (found {c:?})",
            v.escape_debug()
        ));
    }
    if v.trim() != v {
        return Some(format!("`{v}` must not start or end with spaces"));
    }
    if in_comment && let Some(c) = v.chars().find(|c| matches!(c, ' ' | '(' | ')' | '\\')) {
        return Some(format!(
            "`{v}` must not contain {c:?}: it is sent as `(+CONTACT)`; give an email address or a URL"
        ));
    }
    None
}

impl Default for FetchSection {
    fn default() -> Self {
        FetchSection {
            concurrency: 32,
            per_host: 8,
            retries: 4,
            max_body_bytes: 1 << 30,
            max_document_bytes: 64 << 20,
            max_uri_bytes: DEFAULT_MAX_URI_BYTES,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(5),
            retry_after_max: Duration::from_secs(600),
            per_host_rate: None,
            user_agent: None,
            contact: None,
        }
    }
}

/// `[publish]`: what rsagg publishes of the collection and how its documents age.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PublishConfig {
    /// Per-relation overrides of the inherited-link policy.
    pub links: LinkPolicyConfig,
    /// The open Change List is closed (gets `until`, spec 12.1) once it holds this many
    /// changes (default 10,000; at most 50,000, the spec's limit per list).
    pub changelist_max_entries: u64,
    /// ... or once its `from` is this old (default `1d`).
    #[serde(with = "humantime_serde")]
    pub changelist_max_age: Duration,
    /// Closed Change Lists kept (with their Change Dumps): a count (`1000`: the newest 1,000)
    /// or a duration (`"7d"`: those that end less than 7 days ago). Older ones are dropped
    /// from the Change List Index and deleted after the grace period, but never one that
    /// ends after the `at` of a Resource List a Destination may still baseline from (the
    /// published one, or the one a rebuild replaced less than `grace` ago): spec 10.1, 12,
    /// a snapshot plus every Change List since its `at`. Default: all are kept (at most
    /// 49,999, the Change List Index's bound, spec 4).
    pub changelist_retain: Option<ChangeListRetain>,
    /// How the Resource List follows the collection (default `auto`): `patch` rewrites the
    /// parts a run's changes fall in, every run; `interval` publishes a snapshot every
    /// `resourcelist_every` (spec 10.1: the resources as of its `at`) and, in between, the
    /// Change Lists only; `auto` patches while the list holds at most
    /// [`AUTO_INTERVAL_ABOVE`] resources (its parts then stay within
    /// `resourcelist_part_entries`) and takes the interval above.
    pub resourcelist: ResourceListPolicy,
    /// How often the interval's snapshot is rebuilt (default `1d`): a run once it is this
    /// old rebuilds it from the state (every part, then the index), in bounded memory.
    #[serde(with = "humantime_serde")]
    pub resourcelist_every: Duration,
    /// Most entries in one part of the Resource List (default 200; 2 to 50,000). Beyond it
    /// the collection is re-cut into twice as many parts per doubling, aiming at half of
    /// this per part. Small parts keep an incremental run's cost proportional to its changes
    /// (each touched part is rewritten whole); a Destination makes one request per part.
    pub resourcelist_part_entries: u64,
    /// Publish a Change Dump package for every closed Change List (default true).
    pub change_dumps: bool,
    /// Also package, when Change Dumps begin, the changes a Resource Dump built in the same
    /// publish already holds: a collection's baseline, every creation of its first harvest
    /// (default false). Left out, they stay in the Change Lists, and a Destination starting
    /// from scratch takes the Resource Dump and then the Change Dumps from there; a baseline
    /// then reads each body back once instead of twice, and stores it twice instead of three
    /// times. Changes after that are packaged whatever this says.
    pub change_dump_baseline: bool,
    /// Publish a Resource Dump (default true), rebuilt at most this often.
    pub resource_dump: bool,
    /// How often the Resource Dump is rebuilt (default `1d`); runs in between leave it.
    #[serde(with = "humantime_serde")]
    pub resource_dump_interval: Duration,
    /// Largest sum of bitstream bytes in one dump package (default 256 MiB); a larger single
    /// resource gets a package of its own.
    pub dump_package_bytes: u64,
    /// Most resources in one dump package (default 10,000; at most 50,000, the limit of its
    /// manifest).
    pub dump_package_entries: u64,
    /// How often blobs nothing refers to any more are looked for (default `1d`).
    #[serde(with = "humantime_serde")]
    pub gc_interval: Duration,
    /// How long an unreferenced blob (and a replaced document part) stays before it is
    /// deleted (default `1h`), so a Destination that read the previous documents can still
    /// fetch what they name.
    #[serde(with = "humantime_serde")]
    pub grace: Duration,
}

impl Default for PublishConfig {
    fn default() -> Self {
        PublishConfig {
            links: LinkPolicyConfig::default(),
            changelist_max_entries: 10_000,
            changelist_max_age: Duration::from_secs(86_400),
            changelist_retain: None,
            resourcelist: ResourceListPolicy::Auto,
            resourcelist_every: Duration::from_secs(86_400),
            resourcelist_part_entries: 200,
            change_dumps: true,
            change_dump_baseline: false,
            resource_dump: true,
            resource_dump_interval: Duration::from_secs(86_400),
            dump_package_bytes: 256 << 20,
            dump_package_entries: 10_000,
            gc_interval: Duration::from_secs(86_400),
            grace: Duration::from_secs(3_600),
        }
    }
}

/// `publish.resourcelist`: patched every run, or a snapshot on an interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceListPolicy {
    /// Patch while the list holds at most [`AUTO_INTERVAL_ABOVE`] resources, else interval.
    #[default]
    Auto,
    /// Rewrite the parts a run's changes fall in, every run.
    Patch,
    /// A snapshot every `resourcelist_every`, the Change Lists in between.
    Interval,
}

/// Above this many listed resources `resourcelist = "auto"` takes the interval: 32,768
/// parts (an index's most, in powers of two) of half the default 200 entries. Beyond it a
/// part grows with the collection, so a patched run costs O(collection / 32,768) bytes per
/// change (at 10^8, ~72% of the parts an hour at 1% churn a day), not O(changes).
pub const AUTO_INTERVAL_ABOVE: u64 = 3_276_800;

/// `publish.changelist_retain`: a count of closed lists, or how long they are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeListRetain {
    /// The newest this many closed lists.
    Lists(u64),
    /// Closed lists that end less than this long ago.
    Age(Duration),
}

impl<'de> Deserialize<'de> for ChangeListRetain {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = ChangeListRetain;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number of Change Lists (1000) or a duration such as \"7d\"")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Self::Value, E> {
                u64::try_from(v)
                    .map(ChangeListRetain::Lists)
                    .map_err(|_| E::custom(format!("{v}: a count of Change Lists is not negative")))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(ChangeListRetain::Lists(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                serde::de::Visitor::visit_str(humantime_serde::DurationVisitor, v)
                    .map(ChangeListRetain::Age)
            }
        }
        d.deserialize_any(V)
    }
}

/// `[publish.links]`: relations moved to another action than the default policy's. Each
/// entry is one relation type, compared by [`relation_key`]: case-insensitively, and a
/// ResourceSync relation by its short name or its URI alike (`patch` is
/// `http://www.openarchives.org/rs/terms/patch`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LinkPolicyConfig {
    /// Relations kept unchanged.
    pub keep: Vec<String>,
    /// Relations rewritten to rsagg's copy when it holds the target (else kept).
    pub rewrite: Vec<String>,
    /// Relations dropped.
    pub drop: Vec<String>,
    /// Republish the sets an OAI-PMH record is in (its header's `setSpec`s, OAI-PMH 2.0
    /// section 2.5.1) as `rs:ln rel="collection"` links to each set's `ListRecords` URL
    /// (spec 14.7: collection membership). Default true: without them a set (a DSpace
    /// collection) disappears downstream. Links an upstream wrote itself are the policy's
    /// (`collection` is kept by default), whatever this says.
    pub oai_sets: bool,
}

impl Default for LinkPolicyConfig {
    fn default() -> Self {
        LinkPolicyConfig {
            keep: Vec::new(),
            rewrite: Vec::new(),
            drop: Vec::new(),
            oai_sets: true,
        }
    }
}

/// The namespace of the mark rsagg puts on the links it derives itself from what an
/// upstream that is not a ResourceSync Source says (an OAI-PMH record's header: its
/// `GetRecord` URL as `via`, its `setSpec`s as `collection`), kept with the record's
/// upstream links in the state and never published ([`is_derived`]). Spec 7 lets
/// attributes in other namespaces be added; the mark is how the publisher tells such links
/// from those an upstream wrote (which the link policy decides on).
pub const DERIVED_NS: &str = "https://github.com/rsagg/rsagg/ns/derived";

/// `link` marked as derived by rsagg ([`DERIVED_NS`]) from `what` (`oai-pmh`).
pub fn derived(mut link: rsagg_model::Link, what: &str) -> rsagg_model::Link {
    link.ext.push(rsagg_model::ExtAttr {
        namespace: DERIVED_NS.to_owned(),
        prefix: "rsagg".to_owned(),
        local: "derived".to_owned(),
        value: what.to_owned(),
    });
    link
}

/// True when rsagg derived `link` itself ([`derived`]).
pub fn is_derived(link: &rsagg_model::Link) -> bool {
    link.ext.iter().any(|a| a.namespace == DERIVED_NS)
}

/// `link` without rsagg's mark ([`derived`]): as it is published.
pub fn underived(mut link: rsagg_model::Link) -> rsagg_model::Link {
    link.ext.retain(|a| a.namespace != DERIVED_NS);
    link
}

/// The namespace under which ResourceSync writes its own relation types (spec 7).
pub const RS_TERMS: &str = "http://www.openarchives.org/rs/terms/";

/// ResourceSync's own relation types, by short name: written as URIs under [`RS_TERMS`]
/// (spec 7 and 14.4: `rel="http://www.openarchives.org/rs/terms/patch"`); every other
/// relation the spec uses is registered with IANA and written by its name (`duplicate`,
/// `describedby`, …).
pub const RS_RELATIONS: &[&str] = &["patch"];

/// The key by which a relation type is compared: lowercase (RFC 8288 sections 2.1.1 and
/// 2.1.2: relation types compare case-insensitively), and a ResourceSync relation by its
/// short name whichever form it is given in, so `patch` and
/// `http://www.openarchives.org/rs/terms/patch` are one relation. `[publish.links]`
/// entries and the relation types of an inherited link's `rel` (each of its
/// space-separated tokens) are both compared by this key. Other URIs under [`RS_TERMS`]
/// stay URIs: the spec defines no other relation there.
pub fn relation_key(rel: &str) -> String {
    let lower = rel.trim().to_ascii_lowercase();
    match lower.strip_prefix(RS_TERMS) {
        Some(short) if RS_RELATIONS.contains(&short) => short.to_owned(),
        _ => lower,
    }
}

/// The URI a ResourceSync relation type is written as (spec 7), given by its short name
/// or its URI in any case; `None` for any other relation type.
pub fn relation_uri(rel: &str) -> Option<String> {
    let key = relation_key(rel);
    RS_RELATIONS
        .contains(&key.as_str())
        .then(|| format!("{RS_TERMS}{key}"))
}

/// Which publish request the hub understands.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NotifyForm {
    /// ResourceSync Change Notification 1.0.1 section 4.1: POST the payload.
    #[default]
    Resourcesync,
    /// Plain WebSub `hub.mode=publish` (stock hubs).
    Websub,
}

/// `[notify]`: the collection's change-notification channel (Change Notification 1.0.1):
/// its topic is `{collection.base_url}change/`, advertised in the Capability List.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifyConfig {
    /// The hub rsagg publishes to.
    pub hub: Url,
    /// Publish form (default `resourcesync`).
    #[serde(default)]
    pub form: NotifyForm,
    /// Most changes in one notification payload (default 1,000; 1..=50,000, the Sitemap
    /// limit a `<urlset>` obeys); a larger batch is split into several payloads (CN 3).
    #[serde(default = "NotifyConfig::default_max_entries")]
    pub max_entries: u64,
    /// Most bytes of the entries of one payload (default 1 MiB; at most 50,000,000, the
    /// Sitemap limit); a payload always holds at least one change.
    #[serde(default = "NotifyConfig::default_max_bytes")]
    pub max_bytes: u64,
    /// How long a run waits for the hub to take the outbox after publishing (default
    /// `30s`); what is left is sent by the next run.
    #[serde(
        default = "NotifyConfig::default_deliver_timeout",
        with = "humantime_serde"
    )]
    pub deliver_timeout: Duration,
    /// `form = "websub"` only: how long to wait for the hub to GET the topic before the
    /// topic moves on to the next payload (default `10s`); a receiver that missed one
    /// recovers it from the Change List.
    #[serde(default = "NotifyConfig::default_fetch_wait", with = "humantime_serde")]
    pub fetch_wait: Duration,
}

impl NotifyConfig {
    fn default_max_entries() -> u64 {
        1_000
    }
    fn default_max_bytes() -> u64 {
        1 << 20
    }
    fn default_deliver_timeout() -> Duration {
        Duration::from_secs(30)
    }
    fn default_fetch_wait() -> Duration {
        Duration::from_secs(10)
    }

    /// A `[notify]` section with every optional key at its default.
    pub fn new(hub: Url, form: NotifyForm) -> NotifyConfig {
        NotifyConfig {
            hub,
            form,
            max_entries: Self::default_max_entries(),
            max_bytes: Self::default_max_bytes(),
            deliver_timeout: Self::default_deliver_timeout(),
            fetch_wait: Self::default_fetch_wait(),
        }
    }
}

/// Durations written like `30s`, `5m`, `1h 30m`; anything else is refused with what was
/// found and what is expected.
mod humantime_serde {
    use std::fmt;
    use std::time::Duration;

    use serde::Deserializer;
    use serde::de::{self, Visitor};

    pub(crate) struct DurationVisitor;

    impl Visitor<'_> for DurationVisitor {
        type Value = Duration;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a duration such as \"90s\", \"5m\" or \"1h 30m\"")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
            humantime::parse_duration(v).map_err(|e| {
                E::custom(format!(
                    "`{v}` is not a duration ({e}); expected a duration such as \"90s\", \"5m\" or \"1h 30m\""
                ))
            })
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_str(DurationVisitor)
    }
}

mod humantime_serde_opt {
    use std::time::Duration;

    use serde::Deserializer;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        d.deserialize_str(super::humantime_serde::DurationVisitor)
            .map(Some)
    }
}

/// A pipeline that passed validation, with where it came from.
#[derive(Debug, Clone)]
pub struct Pipeline {
    /// The file it was read from.
    pub path: PathBuf,
    /// Its content.
    pub config: PipelineConfig,
    /// `collection.base_url`, parsed.
    pub base_url: Url,
}

/// Problems reported for one file at most (then the rest is left for the next check).
const MAX_PROBLEMS: usize = 64;

/// Default of `[fetch] max_uri_bytes` (8 KiB), as `rsagg_sitemap::ReadOptions`'s.
pub const DEFAULT_MAX_URI_BYTES: usize = 8 * 1024;

/// Longest `collection.name` and `upstream.name`, in bytes: names are path segments of
/// every copy's URI, keys of the state and metric labels.
pub const MAX_NAME_BYTES: usize = 64;

/// Longest `collection.base_url`, in bytes: every URI rsagg publishes starts with it (a
/// 10 MB one made a publish write 2 GiB), and a published `<loc>` should stay within the
/// 2,048 characters the Sitemap protocol allows.
pub const MAX_BASE_URL_BYTES: usize = 1024;

/// Longest other URL of a pipeline (`upstream.url`, `capability_lists`, `store.url`,
/// `notify.hub`), in bytes: the Sitemap protocol's 2,048 characters.
pub const MAX_URL_BYTES: usize = 2048;

/// Longest `[fetch] user_agent` and `contact`, in bytes: they are sent with every request,
/// and servers refuse request heads beyond a few KiB (a 10 MB `user_agent` made every
/// request fail).
pub const MAX_HEADER_TEXT_BYTES: usize = 512;

/// Longest other string of a pipeline (variable names, `auth_hosts`, relation types).
pub const MAX_STRING_BYTES: usize = 256;

/// Why `v` is too long, if it is longer than `max` bytes: its length, the limit and a short
/// excerpt, never the whole value (a 10 MB value would make the error 10 MB).
fn too_long(v: &str, max: usize) -> Option<String> {
    (v.len() > max).then(|| {
        format!(
            "{} bytes (`{}`): at most {max} bytes",
            v.len(),
            rsagg_model::excerpt(v, 40)
        )
    })
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

impl Pipeline {
    /// Reads, parses and validates a pipeline file (no network, no store access), with
    /// `${NAME}` taken from the process environment.
    pub fn load(path: &Path) -> Result<Pipeline, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Parses and validates pipeline text that came from `path`, with `${NAME}` taken from the
    /// process environment.
    pub fn parse(path: &Path, text: &str) -> Result<Pipeline, Error> {
        Self::parse_with_env(path, text, &|name| std::env::var(name).ok())
    }

    /// [`Pipeline::parse`] with the environment given as a function (tests, `--env`).
    pub fn parse_with_env(
        path: &Path,
        text: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Pipeline, Error> {
        let invalid = |problems| Error::Invalid {
            path: path.to_owned(),
            problems,
        };
        let source = source::Source::parse(text, env).map_err(invalid)?;
        // Every problem of the file in one pass. An unset variable's entry is blanked already;
        // each value the types refuse is blanked too (same length, so positions hold) and the
        // rest deserialized again; a required key that is missing (or was blanked) gets a
        // placeholder, so that the keys after it and the rules are still checked. Problems
        // the rules find at a placeholder are consequences and dropped.
        let mut problems = source.unset.clone();
        let mut blanked: Vec<String> = source.blanked.clone();
        let mut held: Vec<String> = Vec::new();
        let mut text = source.expanded.clone();
        // Placeholders inserted into `text`, as (offset, length), in order.
        let mut inserted: Vec<(usize, usize)> = Vec::new();
        let config = loop {
            if problems.len() >= MAX_PROBLEMS {
                break None;
            }
            let e = match toml::from_str::<PipelineConfig>(&text) {
                Ok(c) => break Some(c),
                Err(e) => e,
            };
            let message = e.message().trim_end().to_owned();
            let span = e.span().map(|s| {
                let start = unshift(&inserted, s.start);
                start..unshift(&inserted, s.end).max(start)
            });
            if let Some(field) = missing_field(&message) {
                // The table the field is missing from ("" for the file itself: toml gives
                // its error the empty span at 0, where the first table may begin too).
                let whole = e.span().is_some_and(|s| {
                    s.start == 0 && (s.end == 0 || s.end >= text.trim_end().len())
                });
                let table = if whole {
                    String::new()
                } else {
                    source.problem_at(span.clone(), String::new()).key
                };
                let key = if table.is_empty() {
                    field.to_owned()
                } else {
                    format!("{table}.{field}")
                };
                if !blanked.contains(&key) {
                    problems.push(source.problem_at(span, message.clone()));
                }
                match placeholder(&text, &table, field) {
                    Some((at, insert)) if !held.contains(&key) => {
                        text.insert_str(at, &insert);
                        inserted.push((at, insert.len()));
                        held.push(key);
                        continue;
                    }
                    _ => break None,
                }
            }
            let raw = e.span().and_then(|s| text.get(s));
            let mut problem = source.problem_at(span, message);
            if let Some(hint) = url_hint(&problem.key, &problem.message, raw) {
                problem.message = format!("{}: {hint}", problem.message);
            }
            let next = e.span().and_then(|span| {
                source::blank_entry(&text, span.start)
                    .or_else(|| source::blank_table(&text, span.start))
            });
            blanked.push(problem.key.clone());
            problems.push(problem);
            match next {
                Some(t) => text = t,
                None => break None,
            }
        };
        if let Some(config) = &config {
            let reported: Vec<&String> = held.iter().chain(&blanked).collect();
            problems.extend(
                config
                    .problems(&source)
                    .into_iter()
                    .filter(|p| !reported.iter().any(|k| within(&p.key, k))),
            );
        }
        let config = match config {
            Some(c) if problems.is_empty() => c,
            _ => {
                problems.sort_by_key(|p| (p.line == 0, p.line, p.column));
                return Err(invalid(problems));
            }
        };
        Ok(Pipeline {
            path: path.to_owned(),
            base_url: config.collection.base_url.clone(),
            config,
        })
    }
}

/// What to write instead of a URL value that is not an absolute URL (`raw`, as written):
/// a plain path as the store URL is the common mistake, and the URL parser's own words
/// ("relative URL without a base") do not say what is wanted.
fn url_hint(key: &str, message: &str, raw: Option<&str>) -> Option<String> {
    if !message.contains("relative URL without a base") {
        return None;
    }
    let value = raw
        .map(|r| r.trim().trim_matches(|c| c == '"' || c == '\''))
        .unwrap_or("");
    let value = rsagg_model::excerpt(value, 200);
    Some(if key == "store.url" {
        if value.starts_with('/') {
            format!(
                "a store is a URL: write \"file://{value}\" for this local directory (or s3://bucket/prefix)"
            )
        } else {
            "a store is a URL: file:///absolute/dir for a local directory, or s3://bucket/prefix"
                .to_owned()
        }
    } else {
        "an absolute http(s) URL is needed, such as \"https://example.org/path/\"".to_owned()
    })
}

/// Why a `file:` store URL names no absolute local directory, without touching the disk:
/// `file://relative/store` reads `relative` as a host name (two slashes, not three).
fn file_url_problem(url: &Url) -> Option<String> {
    if url.to_file_path().is_ok() {
        return None;
    }
    Some(match url.host_str().filter(|h| !h.is_empty()) {
        Some(host) => format!(
            "`{url}` is not an absolute local path: `{host}` is read as a host name; write file:///absolute/dir (three slashes), e.g. file:///var/lib/rsagg/{host}{}",
            url.path().trim_end_matches('/')
        ),
        None => format!("`{url}` is not an absolute local path: write file:///absolute/dir"),
    })
}

/// Why `url` needs `allow_private = true`, judged without DNS as the address guard judges
/// before a request (an IP literal that is not public, a `localhost` name): a run refuses
/// such an upstream at its first request, so `check` says so first. A name that resolves
/// to a private address can only be seen at connect time.
fn private_target(url: &Url) -> Option<String> {
    match url.host()? {
        url::Host::Ipv4(ip) if !rsagg_model::net::is_public(ip.into()) => {
            Some(format!("{ip} is not a public address"))
        }
        url::Host::Ipv6(ip) if !rsagg_model::net::is_public(ip.into()) => {
            Some(format!("{ip} is not a public address"))
        }
        url::Host::Domain(d) if rsagg_model::net::is_localhost_name(d) => {
            Some(format!("{d} is a loopback name (RFC 6761 6.3)"))
        }
        _ => None,
    }
}

/// The field a serde "missing field `name`" message names.
fn missing_field(message: &str) -> Option<&str> {
    message
        .strip_prefix("missing field `")?
        .split('`')
        .next()
        .filter(|f| !f.is_empty())
}

/// True when `key` is `of` or below it (`upstream[0].url` is within `upstream[0]`).
fn within(key: &str, of: &str) -> bool {
    key == of
        || key
            .strip_prefix(of)
            .is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// Where to insert a placeholder for the required key `field` of the table at `table` (""
/// for the file itself) into `text`, and what: a value its type accepts and the rules pass,
/// so that one missing or refused key does not hide every other problem of the file.
/// `None` for keys that have a default, or a table that is not a `[header]` table.
fn placeholder(text: &str, table: &str, field: &str) -> Option<(usize, String)> {
    const URL: &str = "\"http://placeholder.invalid/\"";
    let section = table.split('[').next().unwrap_or(table);
    let value = match (section, field) {
        ("", "collection") => {
            return Some((
                text.len(),
                format!("\n[collection]\nname = \"placeholder\"\nbase_url = {URL}\n"),
            ));
        }
        ("", "store") => {
            return Some((text.len(), "\n[store]\nurl = \"memory:///\"\n".to_owned()));
        }
        ("collection", "name") => "\"placeholder\"".to_owned(),
        ("collection", "base_url") | ("notify", "hub") => URL.to_owned(),
        ("store", "url") => "\"memory:///\"".to_owned(),
        ("upstream", "name") => {
            // Unique: the rules check upstream names for duplicates.
            let i = table.trim_start_matches("upstream[").trim_end_matches(']');
            format!("\"placeholder-{i}\"")
        }
        ("upstream", "url") => URL.to_owned(),
        _ => return None,
    };
    let at = source::table_body(text, table)?;
    Some((at, format!("{field} = {value}\n")))
}

/// The offset in the text before `inserted` placeholders of `offset` in the text after them
/// (an offset inside a placeholder maps to where it was inserted).
fn unshift(inserted: &[(usize, usize)], mut offset: usize) -> usize {
    for &(at, len) in inserted.iter().rev() {
        if offset >= at + len {
            offset -= len;
        } else if offset > at {
            offset = at;
        }
    }
    offset
}

impl PipelineConfig {
    /// Everything serde cannot check: names, URL schemes, uniqueness, ranges; every problem,
    /// each at its key. Each section checks its own fields; the caller sorts the problems by
    /// their place in the file.
    fn problems(&self, source: &source::Source<'_>) -> Vec<Problem> {
        let mut out = Vec::new();
        self.collection.problems(source, &mut out);
        self.store.problems(source, &mut out);
        upstream_problems(&self.upstreams, source, &mut out);
        self.fetch.problems(source, &mut out);
        self.deadlines.problems(source, &mut out);
        self.publish.problems(source, &mut out);
        if let Some(n) = &self.notify {
            n.problems(source, &mut out);
        }
        out
    }
}

impl CollectionConfig {
    /// `[collection]`: the name, the history's length, the base URL, `describedby`.
    fn problems(&self, source: &source::Source<'_>, out: &mut Vec<Problem>) {
        let mut err = |key: &str, message: String| out.push(source.problem(key, message));
        let c = self;
        if let Some(m) = too_long(&c.name, MAX_NAME_BYTES) {
            err("collection.name", m);
        } else if !is_name(&c.name) {
            err(
                "collection.name",
                format!("`{}` must match [a-z0-9-]+", c.name),
            );
        }
        if !(1..=10_000).contains(&c.history_runs) {
            err(
                "collection.history_runs",
                format!("{}: must be 1..=10000", c.history_runs),
            );
        }
        let base = &c.base_url;
        if let Some(m) = too_long(base.as_str(), MAX_BASE_URL_BYTES) {
            err("collection.base_url", m);
        } else if !matches!(base.scheme(), "http" | "https") || !base.as_str().ends_with('/') {
            err(
                "collection.base_url",
                format!("`{base}` must be an http(s) URL ending with `/`"),
            );
        } else if base.query().is_some() || base.fragment().is_some() {
            err(
                "collection.base_url",
                format!(
                    "`{base}` must not have a query or fragment (document names are appended to it)"
                ),
            );
        }
        if let Some(d) = &c.describedby
            && !matches!(d.scheme(), "http" | "https")
        {
            err(
                "collection.describedby",
                format!("`{d}` is not an http(s) URL (a document Destinations can fetch)"),
            );
        }
    }
}

impl StoreConfig {
    /// `[store]`: the URL's scheme, the bounds that must not be 0.
    fn problems(&self, source: &source::Source<'_>, out: &mut Vec<Problem>) {
        let mut err = |key: &str, message: String| out.push(source.problem(key, message));
        let store = &self.url;
        if let Some(m) = too_long(store.as_str(), MAX_URL_BYTES) {
            err("store.url", m);
        } else if !matches!(store.scheme(), "file" | "s3" | "memory") {
            err(
                "store.url",
                format!("`{store}`: use file:///abs/dir or s3://bucket/prefix"),
            );
        } else if store.scheme() == "file"
            && let Some(m) = file_url_problem(store)
        {
            err("store.url", m);
        } else if store.scheme() == "s3" && store.host_str().is_none_or(str::is_empty) {
            err(
                "store.url",
                format!("`{store}`: no bucket name (s3://bucket/prefix)"),
            );
        }
        if self.open_timeout.is_zero() {
            err("store.open_timeout", "must be longer than 0s".into());
        }
        if self.memory_bytes < Self::MIN_MEMORY {
            err(
                "store.memory_bytes",
                format!(
                    "must be at least {} (20 MiB): each budget left unset takes a twentieth or more of it",
                    Self::MIN_MEMORY
                ),
            );
        }
        if self.budgets().state_max_unflushed_bytes < 1 << 20 {
            err(
                "store.state_max_unflushed_bytes",
                "must be at least 1048576 (1 MiB): the state's tables are cut at half of it".into(),
            );
        }
        if self.max_failures == 0 {
            err("store.max_failures", "must be at least 1".into());
        }
    }
}

/// `[[upstream]]`: at least one, names unique, http(s) URLs, credentials given one way.
fn upstream_problems(
    upstreams: &[UpstreamConfig],
    source: &source::Source<'_>,
    out: &mut Vec<Problem>,
) {
    let mut err = |key: &str, message: String| out.push(source.problem(key, message));
    if upstreams.is_empty() {
        err("upstream", "at least one [[upstream]] is needed".into());
    }
    let mut names = HashSet::new();
    for (i, u) in upstreams.iter().enumerate() {
        let key = |k: &str| format!("upstream[{i}].{k}");
        if let Some(m) = too_long(&u.name, MAX_NAME_BYTES) {
            err(&key("name"), m);
        } else if !is_name(&u.name) {
            err(&key("name"), format!("`{}` must match [a-z0-9-]+", u.name));
        }
        if !names.insert(u.name.clone()) {
            err(
                &key("name"),
                format!(
                    "upstream name `{}` is used twice",
                    rsagg_model::excerpt(&u.name, MAX_NAME_BYTES)
                ),
            );
        }
        if let Some(m) = too_long(u.url.as_str(), MAX_URL_BYTES) {
            err(&key("url"), m);
        } else if !matches!(u.url.scheme(), "http" | "https") {
            err(&key("url"), format!("`{}` is not an http(s) URL", u.url));
        } else if !u.allow_private
            && let Some(why) = private_target(&u.url)
        {
            err(
                &key("url"),
                format!(
                    "`{}`: {why}; the address guard refuses private, loopback and link-local upstreams: add `allow_private = true` to this upstream if that is meant",
                    u.url
                ),
            );
        }
        for (j, cl) in u.capability_lists.iter().flatten().enumerate() {
            if let Some(m) = too_long(cl.as_str(), MAX_URL_BYTES) {
                err(&format!("upstream[{i}].capability_lists[{j}]"), m);
            } else if !matches!(cl.scheme(), "http" | "https") {
                err(
                    &format!("upstream[{i}].capability_lists[{j}]"),
                    format!("`{cl}` is not an http(s) URL"),
                );
            }
        }
        for (k, v) in [
            ("bearer_token_env", &u.bearer_token_env),
            ("basic_auth_env", &u.basic_auth_env),
        ] {
            if let Some(m) = v.as_deref().and_then(|v| too_long(v, MAX_STRING_BYTES)) {
                err(&key(k), m);
            }
        }
        for (j, h) in u.auth_hosts.iter().flatten().enumerate() {
            if let Some(m) = too_long(h, MAX_STRING_BYTES) {
                err(&format!("upstream[{i}].auth_hosts[{j}]"), m);
            }
        }
        if u.bearer_token_env.is_some() && u.basic_auth_env.is_some() {
            err(
                &key("bearer_token_env"),
                "give bearer_token_env or basic_auth_env, not both".into(),
            );
        }
        if u.push_lease.is_some_and(|l| l.as_secs() == 0) {
            err(
                &key("push_lease"),
                "must be at least 1s (hub.lease_seconds is whole seconds)".into(),
            );
        }
        if u.poll_interval.is_some_and(|d| d.is_zero()) {
            err(&key("poll_interval"), "must be more than 0s".into());
        }
        if u.is_oai() {
            if u.capability_lists.is_some() {
                err(
                    &key("capability_lists"),
                    "a ResourceSync setting: an OAI-PMH upstream has no Capability Lists (choose its records with `sets`)".into(),
                );
            }
            if u.baseline == BaselineSource::Dump {
                err(
                    &key("baseline"),
                    "`dump` is a ResourceSync setting: an OAI-PMH upstream's baseline is a ListRecords".into(),
                );
            }
            if let Some(p) = &u.metadata_prefix
                && let Some(m) = oai_name_problem(p, false)
            {
                err(&key("metadata_prefix"), m);
            }
            for (j, set) in u.sets.iter().flatten().enumerate() {
                if let Some(m) = oai_name_problem(set, true) {
                    err(&format!("upstream[{i}].sets[{j}]"), m);
                }
            }
            if u.sets.as_ref().is_some_and(Vec::is_empty) {
                err(
                    &key("sets"),
                    "empty: leave `sets` out to harvest the whole repository".into(),
                );
            }
            if u.relist_every.is_some_and(|d| d < Duration::from_secs(60)) {
                err(&key("relist_every"), "must be at least 1m".into());
            }
            if let Some(OaiWindowSize::Every(d)) = u.window
                && d < Duration::from_secs(86_400)
            {
                err(
                    &key("window"),
                    "must be at least 1d (or \"none\" for one list without date windows)".into(),
                );
            }
        } else {
            for (k, given) in [
                ("metadata_prefix", u.metadata_prefix.is_some()),
                ("sets", u.sets.is_some()),
                ("relist_every", u.relist_every.is_some()),
                ("window", u.window.is_some()),
                ("strategy", u.strategy != OaiStrategy::Records),
            ] {
                if given {
                    err(
                        &key(k),
                        "an OAI-PMH setting: add `kind = \"oai-pmh\"` for an OAI-PMH upstream"
                            .into(),
                    );
                }
            }
        }
    }
}

/// Why `text` is not a `metadataPrefix` (or, with `set`, a `setSpec`): both are
/// `[A-Za-z0-9-_.!~*'()]+`, a `setSpec` in `:`-separated parts (OAI-PMH 2.0 sections 3.4,
/// 4.4 and the schema's `setSpecType`).
fn oai_name_problem(text: &str, set: bool) -> Option<String> {
    if let Some(m) = too_long(text, MAX_STRING_BYTES) {
        return Some(m);
    }
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.!~*'()".contains(&b))
    };
    let ok = if set {
        text.split(':').all(part_ok)
    } else {
        part_ok(text)
    };
    (!ok).then(|| {
        format!(
            "`{text}` is not a {} (OAI-PMH 2.0 section 3.4: letters, digits and -_.!~*'(){})",
            if set { "setSpec" } else { "metadataPrefix" },
            if set { ", parts separated by `:`" } else { "" }
        )
    })
}

impl FetchSection {
    /// `[fetch]`: concurrency and per-host limits, the URI bound, header texts.
    fn problems(&self, source: &source::Source<'_>, out: &mut Vec<Problem>) {
        let mut err = |key: &str, message: String| out.push(source.problem(key, message));
        let f = self;
        if f.concurrency == 0 {
            err("fetch.concurrency", "must be at least 1".into());
        }
        if !(256..=65_536).contains(&f.max_uri_bytes) {
            err(
                "fetch.max_uri_bytes",
                format!(
                    "{}: must be 256..=65536 (the Sitemap protocol allows a <loc> 2,048 characters)",
                    f.max_uri_bytes
                ),
            );
        }
        if f.per_host == 0 {
            err("fetch.per_host", "must be at least 1".into());
        }
        if let Some(r) = f.per_host_rate
            && !(r.is_finite() && r > 0.0)
        {
            err(
                "fetch.per_host_rate",
                format!(
                    "{r}: must be a positive number of requests per second (0.5 is one request every 2s); leave it out for no limit"
                ),
            );
        }
        for (key, v, in_comment) in [
            ("fetch.user_agent", &f.user_agent, false),
            ("fetch.contact", &f.contact, true),
        ] {
            if let Some(m) = v
                .as_deref()
                .and_then(|v| header_text_problem(v, in_comment))
            {
                err(key, m);
            }
        }
    }
}

impl DeadlinesConfig {
    /// `[deadlines]`: none of them 0.
    fn problems(&self, source: &source::Source<'_>, out: &mut Vec<Problem>) {
        let mut err = |key: &str, message: String| out.push(source.problem(key, message));
        let d = self;
        for (key, value) in [
            ("deadlines.body", Some(d.body)),
            ("deadlines.document", Some(d.document)),
            ("deadlines.pass", Some(d.pass)),
            ("deadlines.run", d.run),
        ] {
            if value.is_some_and(|v| v.is_zero()) {
                err(key, "must be longer than 0s".into());
            }
        }
    }
}

impl PublishConfig {
    /// `[publish]`: list and package sizes within spec 4's bounds, one action per link relation.
    fn problems(&self, source: &source::Source<'_>, out: &mut Vec<Problem>) {
        let mut err = |key: &str, message: String| out.push(source.problem(key, message));
        let pc = self;
        for (key, n) in [
            ("publish.changelist_max_entries", pc.changelist_max_entries),
            ("publish.dump_package_entries", pc.dump_package_entries),
        ] {
            if !(1..=50_000).contains(&n) {
                err(
                    key,
                    format!("{n}: must be 1..=50000 (spec 4: at most 50,000 entries per list)"),
                );
            }
        }
        if !(2..=50_000).contains(&pc.resourcelist_part_entries) {
            err(
                "publish.resourcelist_part_entries",
                format!(
                    "{}: must be 2..=50000 (spec 4: at most 50,000 entries per list)",
                    pc.resourcelist_part_entries
                ),
            );
        }
        if pc.dump_package_bytes == 0 {
            err("publish.dump_package_bytes", "must be at least 1".into());
        }
        if pc.resourcelist_every < Duration::from_secs(1) {
            err(
                "publish.resourcelist_every",
                "must be at least 1s (how often the Resource List snapshot is rebuilt)".into(),
            );
        }
        if let Some(ChangeListRetain::Age(age)) = pc.changelist_retain
            && age < Duration::from_secs(1)
        {
            err(
                "publish.changelist_retain",
                "a duration of at least 1s, or a count of Change Lists".into(),
            );
        }
        let l = &self.links;
        let mut seen: HashSet<String> = HashSet::new();
        for (action, rels) in [
            ("keep", &l.keep),
            ("rewrite", &l.rewrite),
            ("drop", &l.drop),
        ] {
            for (j, rel) in rels.iter().enumerate() {
                let key = format!("publish.links.{action}[{j}]");
                if let Some(m) = too_long(rel, MAX_STRING_BYTES) {
                    err(&key, m);
                } else if rel.split_ascii_whitespace().count() != 1 {
                    err(
                        &key,
                        format!("`{rel}`: an entry names one relation type (list each on its own)"),
                    );
                } else if !seen.insert(relation_key(rel)) {
                    // `patch` and `http://www.openarchives.org/rs/terms/patch` are one.
                    err(
                        &key,
                        format!("relation `{rel}` is given more than one action"),
                    );
                }
            }
        }
    }
}

impl NotifyConfig {
    /// `[notify]`: the hub's URL, payload bounds within spec 4's, a deliver timeout.
    fn problems(&self, source: &source::Source<'_>, out: &mut Vec<Problem>) {
        let mut err = |key: &str, message: String| out.push(source.problem(key, message));
        let n = self;
        if let Some(m) = too_long(n.hub.as_str(), MAX_URL_BYTES) {
            err("notify.hub", m);
        } else if !matches!(n.hub.scheme(), "http" | "https") {
            err(
                "notify.hub",
                format!(
                    "`{}` is not an http(s) URL (CN 1.0.1 section 4.1: the hub URI is POSTed to)",
                    n.hub
                ),
            );
        }
        if !(1..=50_000).contains(&n.max_entries) {
            err(
                "notify.max_entries",
                format!(
                    "{}: must be 1..=50000 (a payload is a <urlset>, spec 4: at most 50,000 entries)",
                    n.max_entries
                ),
            );
        }
        if !(1..=50_000_000).contains(&n.max_bytes) {
            err(
                "notify.max_bytes",
                format!(
                    "{}: must be 1..=50000000 (a payload is a <urlset>, spec 4: at most 50 MB)",
                    n.max_bytes
                ),
            );
        }
        if n.deliver_timeout.is_zero() {
            err("notify.deliver_timeout", "must be more than 0s".into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
[collection]
name = "maps"
base_url = "https://agg.example.org/maps/"

[store]
url = "file:///tmp/rsagg-test-maps"

[[upstream]]
name = "museum"
url = "https://museum.example.org/.well-known/resourcesync"
allow_private = false
poll_interval = "5m"
"#;

    #[test]
    fn parses_the_contract_example() {
        let p = Pipeline::parse(Path::new("p.toml"), GOOD).unwrap();
        assert_eq!(p.config.collection.name, "maps");
        assert_eq!(
            p.config.upstreams[0].poll_interval,
            Some(Duration::from_secs(300))
        );
        assert_eq!(p.config.fetch.per_host, 8);
    }

    #[test]
    fn oai_pmh_upstreams_parse_with_their_defaults() {
        let text = GOOD.replace(
            "url = \"https://museum.example.org/.well-known/resourcesync\"",
            "url = \"https://repo.example.org/oai\"\nkind = \"oai-pmh\"\nsets = [\"hdl:1\", \"a:b\"]",
        );
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        let u = &p.config.upstreams[0];
        assert!(u.is_oai());
        assert_eq!(u.metadata_prefix(), "oai_dc");
        assert_eq!(
            u.sets.as_deref(),
            Some(&["hdl:1".to_owned(), "a:b".to_owned()][..])
        );
        assert_eq!(u.relist_every(), Duration::from_secs(7 * 86_400));
        let p = Pipeline::parse(Path::new("p.toml"), GOOD).unwrap();
        assert!(!p.config.upstreams[0].is_oai());
    }

    #[test]
    fn settings_of_the_other_kind_of_upstream_are_refused_by_name() {
        let oai = GOOD.replace(
            "allow_private = false",
            "kind = \"oai-pmh\"\ncapability_lists = [\"https://museum.example.org/cl.xml\"]\nbaseline = \"dump\"\nmetadata_prefix = \"oai dc\"\nsets = [\"a::b\"]\nrelist_every = \"10s\"",
        );
        let err = Pipeline::parse(Path::new("p.toml"), &oai)
            .unwrap_err()
            .to_string();
        for key in [
            "upstream[0].capability_lists",
            "upstream[0].baseline",
            "upstream[0].metadata_prefix",
            "upstream[0].sets[0]",
            "upstream[0].relist_every",
        ] {
            assert!(err.contains(key), "{key} in {err}");
        }
        assert!(err.contains("OAI-PMH 2.0 section 3.4"), "{err}");
        let rs = GOOD.replace(
            "allow_private = false",
            "metadata_prefix = \"oai_dc\"\nsets = [\"a\"]",
        );
        let err = Pipeline::parse(Path::new("p.toml"), &rs)
            .unwrap_err()
            .to_string();
        assert!(err.contains("upstream[0].metadata_prefix"), "{err}");
        assert!(err.contains("upstream[0].sets"), "{err}");
        assert!(err.contains("kind = \"oai-pmh\""), "{err}");
        let unknown = GOOD.replace("allow_private = false", "kind = \"oai\"");
        assert!(Pipeline::parse(Path::new("p.toml"), &unknown).is_err());
    }

    #[test]
    fn recent_blob_bytes_defaults_and_parses() {
        let p = Pipeline::parse(Path::new("p.toml"), GOOD).unwrap();
        assert_eq!(p.config.store.budgets().recent_blob_bytes, 24 * 1024 * 1024);
        let text = GOOD.replace(
            "url = \"file:///tmp/rsagg-test-maps\"",
            "url = \"file:///tmp/rsagg-test-maps\"\nrecent_blob_bytes = 0",
        );
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        assert_eq!(p.config.store.budgets().recent_blob_bytes, 0);
        assert_eq!(p.config.store.spool_bytes, 1 << 30);
        assert_eq!(p.config.store.spool_parent(), std::env::temp_dir());
        let text = GOOD.replace(
            "url = \"file:///tmp/rsagg-test-maps\"",
            "url = \"file:///tmp/rsagg-test-maps\"\nspool_bytes = 0\nspool_dir = \"/var/spool/rsagg\"",
        );
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        assert_eq!(p.config.store.spool_bytes, 0);
        assert_eq!(p.config.store.spool_parent(), Path::new("/var/spool/rsagg"));
        let bad = GOOD.replace(
            "url = \"file:///tmp/rsagg-test-maps\"",
            "url = \"file:///tmp/rsagg-test-maps\"\nrecent_blob_bytes = -1",
        );
        assert!(Pipeline::parse(Path::new("p.toml"), &bad).is_err());
    }

    #[test]
    fn every_memory_bound_of_the_store_is_a_share_of_one_setting() {
        // That the store's own defaults agree is checked where both are linked
        // (`rsagg_pipeline`'s `store_options` test).
        assert_eq!(StoreConfig::MEMORY_SHARES.sum(), 20);
        let s = Pipeline::parse(Path::new("p.toml"), GOOD)
            .unwrap()
            .config
            .store;
        assert_eq!(s.memory_bytes, StoreConfig::DEFAULT_MEMORY);
        let b = s.budgets();
        assert_eq!(
            b,
            MemoryBudgets {
                recent_blob_bytes: 24 << 20,
                state_block_cache_bytes: 24 << 20,
                state_meta_cache_bytes: 16 << 20,
                state_max_unflushed_bytes: 64 << 20,
                state_compaction_sst_bytes: 4 << 20,
                state_compactions: 2,
                listed_memory_bytes: 8 << 20,
                listed_filter_bytes: 8 << 20,
            }
        );
        // With none set on its own, the budgets add up to the one setting, whatever it is
        // (but for rounding each share down to whole bytes) where the compaction tables'
        // least size (1 MiB) does not bind.
        for memory in [60u64 << 20, 160 << 20, 1 << 30, (1 << 30) + 12_345] {
            for compactions in [1u32, 2, 3] {
                let text = GOOD.replace(
                    "url = \"file:///tmp/rsagg-test-maps\"",
                    &format!(
                        "url = \"file:///tmp/rsagg-test-maps\"\nmemory_bytes = {memory}\nstate_compactions = {compactions}"
                    ),
                );
                let b = Pipeline::parse(Path::new("p.toml"), &text)
                    .unwrap()
                    .config
                    .store
                    .budgets();
                assert!(b.total() <= memory, "{memory} {compactions}: {b:?}");
                assert!(b.total() + 64 >= memory, "{memory} {compactions}: {b:?}");
            }
        }
        assert_eq!((s.spool_bytes, s.state_compactions), (1 << 30, 2));
        assert_eq!(
            (s.retries, s.retry_timeout, s.max_failures),
            (3, Duration::from_secs(30), 3)
        );
        // A budget set on its own is that, the others keep their shares.
        let text = GOOD.replace(
            "url = \"file:///tmp/rsagg-test-maps\"",
            "url = \"file:///tmp/rsagg-test-maps\"\nmemory_bytes = 41943040\nstate_block_cache_bytes = 0\nstate_meta_cache_bytes = 1024\nstate_max_unflushed_bytes = 1048576",
        );
        let o = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap()
            .config
            .store
            .budgets();
        assert_eq!(
            (
                o.state_block_cache_bytes,
                o.state_meta_cache_bytes,
                o.state_max_unflushed_bytes,
                o.recent_blob_bytes,
                o.listed_filter_bytes
            ),
            (0, 1024, 1 << 20, 6 << 20, 2 << 20)
        );
        for (bad, key) in [
            ("memory_bytes = 20971519", "store.memory_bytes"),
            (
                "state_max_unflushed_bytes = 1048575",
                "store.state_max_unflushed_bytes",
            ),
        ] {
            let text = GOOD.replace(
                "url = \"file:///tmp/rsagg-test-maps\"",
                &format!("url = \"file:///tmp/rsagg-test-maps\"\n{bad}"),
            );
            let e = Pipeline::parse(Path::new("p.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
    }

    #[test]
    fn push_keys_default_and_parse() {
        let p = Pipeline::parse(Path::new("p.toml"), GOOD).unwrap();
        let u = &p.config.upstreams[0];
        assert!(u.push);
        assert_eq!(u.push_lease(), DEFAULT_PUSH_LEASE);
        let text = GOOD.replace(
            "poll_interval = \"5m\"",
            "poll_interval = \"1h\"\npush = false\npush_lease = \"10m\"",
        );
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        let u = &p.config.upstreams[0];
        assert!(!u.push);
        assert_eq!(u.push_lease(), Duration::from_secs(600));
        assert_eq!(u.poll_every(), Duration::from_secs(3600));
        let bad = GOOD.replace("poll_interval = \"5m\"", "push_lease = \"0s\"");
        let e = Pipeline::parse(Path::new("p.toml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("upstream[0].push_lease"), "{e}");
        let bad = GOOD.replace("poll_interval = \"5m\"", "push = \"yes\"");
        assert!(Pipeline::parse(Path::new("p.toml"), &bad).is_err());
    }

    #[test]
    fn politeness_keys_default_and_parse() {
        let f = Pipeline::parse(Path::new("p.toml"), GOOD)
            .unwrap()
            .config
            .fetch;
        assert_eq!(
            (f.per_host_rate, &f.user_agent, &f.contact),
            (None, &None, &None)
        );
        assert_eq!(f.user_agent(), DEFAULT_USER_AGENT);
        assert_eq!(
            DEFAULT_USER_AGENT,
            format!(
                "rsagg/{} (+https://github.com/rsagg/rsagg)",
                env!("CARGO_PKG_VERSION")
            )
        );
        let parse = |extra: &str| {
            Pipeline::parse(Path::new("p.toml"), &format!("{GOOD}\n[fetch]\n{extra}\n"))
                .map(|p| p.config.fetch)
        };
        let f = parse("contact = \"mailto:harvest@agg.example.org\"\nper_host_rate = 2.5").unwrap();
        assert_eq!(f.per_host_rate, Some(2.5));
        assert_eq!(
            f.user_agent(),
            format!(
                "rsagg/{} (+mailto:harvest@agg.example.org)",
                env!("CARGO_PKG_VERSION")
            ),
            "the contact replaces the project URL"
        );
        // An integer rate is a rate too.
        assert_eq!(parse("per_host_rate = 2").unwrap().per_host_rate, Some(2.0));
        let f = parse("user_agent = \"museum-mirror/2\"").unwrap();
        assert_eq!(f.user_agent(), "museum-mirror/2");
        let f =
            parse("user_agent = \"museum-mirror/2\"\ncontact = \"https://agg.example.org/about\"")
                .unwrap();
        assert_eq!(
            f.user_agent(),
            "museum-mirror/2 (+https://agg.example.org/about)"
        );
    }

    #[test]
    fn huge_strings_are_refused_at_their_key_without_being_echoed() {
        let big = "a".repeat(10 << 20);
        for (text, key, limit) in [
            (
                GOOD.replace(
                    "https://agg.example.org/maps/",
                    &format!("https://agg.example.org/{big}/"),
                ),
                "collection.base_url",
                MAX_BASE_URL_BYTES,
            ),
            (
                format!("{GOOD}\n[fetch]\nuser_agent = \"{big}\"\n"),
                "fetch.user_agent",
                MAX_HEADER_TEXT_BYTES,
            ),
            (
                GOOD.replace("name = \"maps\"", &format!("name = \"{big}\"")),
                "collection.name",
                MAX_NAME_BYTES,
            ),
            (
                GOOD.replace("name = \"museum\"", &format!("name = \"{big}\"")),
                "upstream[0].name",
                MAX_NAME_BYTES,
            ),
            (
                GOOD.replace(
                    "/.well-known/resourcesync",
                    &format!("/{big}/.well-known/resourcesync"),
                ),
                "upstream[0].url",
                MAX_URL_BYTES,
            ),
        ] {
            let e = Pipeline::parse(Path::new("p.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("{key}: ")), "{key}: {e}");
            assert!(e.contains(&format!("at most {limit} bytes")), "{key}: {e}");
            assert!(
                e.len() < 400,
                "{key}: the error echoes the value: {} bytes",
                e.len()
            );
        }
    }

    #[test]
    fn max_uri_bytes_defaults_and_is_bounded() {
        let p = Pipeline::parse(Path::new("p.toml"), GOOD).unwrap();
        assert_eq!(p.config.fetch.max_uri_bytes, 8192);
        for (v, ok) in [
            ("256", true),
            ("65536", true),
            ("255", false),
            ("65537", false),
        ] {
            let text = format!("{GOOD}\n[fetch]\nmax_uri_bytes = {v}\n");
            let r = Pipeline::parse(Path::new("p.toml"), &text);
            assert_eq!(r.is_ok(), ok, "{v}");
            if let Err(e) = r {
                assert!(e.to_string().contains("fetch.max_uri_bytes"), "{e}");
            }
        }
    }

    #[test]
    fn history_runs_defaults_parses_and_is_bounded() {
        let p = Pipeline::parse(Path::new("p.toml"), GOOD).unwrap();
        assert_eq!(p.config.collection.history_runs, DEFAULT_HISTORY_RUNS);
        let with = |v: &str| {
            GOOD.replacen(
                "[collection]\n",
                &format!("[collection]\nhistory_runs = {v}\n"),
                1,
            )
        };
        let p = Pipeline::parse(Path::new("p.toml"), &with("12")).unwrap();
        assert_eq!(p.config.collection.history_runs, 12);
        for bad in ["0", "10001"] {
            let e = Pipeline::parse(Path::new("p.toml"), &with(bad))
                .unwrap_err()
                .to_string();
            assert!(e.contains("collection.history_runs: "), "{bad}: {e}");
        }
    }

    #[test]
    fn bad_politeness_values_are_reported_at_their_line() {
        let line = GOOD.matches('\n').count() + 3;
        for (bad, key) in [
            ("per_host_rate = 0", "fetch.per_host_rate"),
            ("per_host_rate = -1.5", "fetch.per_host_rate"),
            ("per_host_rate = nan", "fetch.per_host_rate"),
            ("per_host_rate = inf", "fetch.per_host_rate"),
            ("contact = \"\"", "fetch.contact"),
            (
                "contact = \"ops@example.org\\r\\nX-Evil: 1\"",
                "fetch.contact",
            ),
            ("contact = \"ops@example.org\\u0000\"", "fetch.contact"),
            ("contact = \"the ops team\"", "fetch.contact"),
            ("contact = \"https://x.example/(a)\"", "fetch.contact"),
            ("contact = \"ops@exämple.org\"", "fetch.contact"),
            ("user_agent = \" \"", "fetch.user_agent"),
            ("user_agent = \"rsagg\\tx\\n\"", "fetch.user_agent"),
            ("user_agent = \" rsagg/1\"", "fetch.user_agent"),
        ] {
            let text = format!("{GOOD}\n[fetch]\n{bad}\n");
            let e = Pipeline::parse(Path::new("p.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with(&format!("p.toml:{line}:1: {key}: ")) && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
        // A wrong type is reported at the key too.
        let text = format!("{GOOD}\n[fetch]\nper_host_rate = \"fast\"\n");
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("p.toml:{line}:")) && e.contains("fetch.per_host_rate"),
            "{e}"
        );
    }

    #[test]
    fn deadlines_and_store_bounds_parse_and_are_checked() {
        let d = Pipeline::parse(Path::new("p.toml"), GOOD)
            .unwrap()
            .config
            .deadlines;
        assert_eq!(
            (d.body, d.min_rate, d.document, d.pass, d.run),
            (
                Duration::from_secs(1800),
                1024,
                Duration::from_secs(600),
                Duration::from_secs(6 * 3600),
                None
            )
        );
        let text = format!(
            "{GOOD}\n[deadlines]\nbody = \"2s\"\nmin_rate = 0\ndocument = \"3s\"\npass = \"1m\"\nrun = \"2m\"\n"
        );
        let d = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap()
            .config
            .deadlines;
        assert_eq!(
            (d.body, d.min_rate, d.document, d.pass, d.run),
            (
                Duration::from_secs(2),
                0,
                Duration::from_secs(3),
                Duration::from_secs(60),
                Some(Duration::from_secs(120))
            )
        );
        let text = GOOD.replace(
            "url = \"file:///tmp/rsagg-test-maps\"",
            "url = \"file:///tmp/rsagg-test-maps\"\nretries = 1\nretry_timeout = \"5s\"\nmax_failures = 2\nopen_timeout = \"10s\"",
        );
        let s = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap()
            .config
            .store;
        assert_eq!(
            (s.retries, s.retry_timeout, s.max_failures, s.open_timeout),
            (1, Duration::from_secs(5), 2, Duration::from_secs(10))
        );
        for (bad, key) in [
            ("[deadlines]\npass = \"0s\"", "deadlines.pass"),
            ("[deadlines]\nbody = \"0s\"", "deadlines.body"),
            ("[deadlines]\nrun = \"0s\"", "deadlines.run"),
            ("[deadlines]\nsoon = \"1s\"", "deadlines"),
        ] {
            let e = Pipeline::parse(Path::new("p.toml"), &format!("{GOOD}\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{bad}: {e}");
        }
        let e = Pipeline::parse(
            Path::new("p.toml"),
            &GOOD.replace(
                "url = \"file:///tmp/rsagg-test-maps\"",
                "url = \"file:///tmp/rsagg-test-maps\"\nmax_failures = 0",
            ),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("store.max_failures"), "{e}");
    }

    #[test]
    fn unknown_keys_name_file_and_line() {
        let bad = GOOD.replace("allow_private = false", "allow_privat = false");
        let e = Pipeline::parse(Path::new("p.toml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("p.toml:12"), "{e}");
        assert!(e.contains("allow_privat"), "{e}");
    }

    #[test]
    fn bad_values_name_the_key() {
        let bad = GOOD.replace("name = \"museum\"", "name = \"Museum\"");
        let e = Pipeline::parse(Path::new("p.toml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("upstream[0].name"), "{e}");
        assert!(e.contains("p.toml:10"), "{e}");
        let bad = GOOD.replace("maps/\"", "maps\"");
        let e = Pipeline::parse(Path::new("p.toml"), &bad)
            .unwrap_err()
            .to_string();
        assert!(e.contains("collection.base_url"), "{e}");
    }

    /// `[publish]`'s Resource List policy and `changelist_retain` as a count or a duration
    /// (issue 46); a zero interval or retention is refused, naming the key.
    #[test]
    fn the_resource_list_policy_and_change_list_retention_by_count_or_time() {
        let p = Pipeline::parse(Path::new("p.toml"), GOOD).unwrap();
        let c = &p.config.publish;
        assert_eq!(c.resourcelist, ResourceListPolicy::Auto);
        assert_eq!(c.resourcelist_every, Duration::from_secs(86_400));
        assert_eq!(c.changelist_retain, None);
        for (line, policy, retain) in [
            (
                "resourcelist = \"interval\"\nresourcelist_every = \"6h\"\nchangelist_retain = 1000",
                ResourceListPolicy::Interval,
                ChangeListRetain::Lists(1000),
            ),
            (
                "resourcelist = \"patch\"\nchangelist_retain = \"7d\"",
                ResourceListPolicy::Patch,
                ChangeListRetain::Age(Duration::from_secs(7 * 86_400)),
            ),
        ] {
            let text = format!("{GOOD}\n[publish]\n{line}\n");
            let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
            assert_eq!(p.config.publish.resourcelist, policy, "{line}");
            assert_eq!(p.config.publish.changelist_retain, Some(retain), "{line}");
        }
        for (line, key) in [
            ("resourcelist = \"sometimes\"", "resourcelist"),
            ("resourcelist_every = \"0s\"", "publish.resourcelist_every"),
            ("changelist_retain = \"0s\"", "publish.changelist_retain"),
            ("changelist_retain = \"a week\"", "changelist_retain"),
            ("changelist_retain = -1", "changelist_retain"),
        ] {
            let text = format!("{GOOD}\n[publish]\n{line}\n");
            let e = Pipeline::parse(Path::new("p.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(key), "{line}: {e}");
        }
    }

    #[test]
    fn a_relation_has_one_action() {
        let text = format!("{GOOD}\n[publish.links]\nkeep = [\"license\"]\ndrop = [\"License\"]\n");
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("publish.links"), "{e}");
    }

    /// `patch` and its URI (spec 14.4) are one relation: giving them two actions is the
    /// same error as giving `license` two.
    #[test]
    fn a_resourcesync_relation_and_its_uri_are_one_relation() {
        for (keep, drop) in [
            ("patch", "http://www.openarchives.org/rs/terms/patch"),
            ("HTTP://www.openarchives.org/rs/terms/patch", "Patch"),
        ] {
            let text =
                format!("{GOOD}\n[publish.links]\nkeep = [\"{keep}\"]\ndrop = [\"{drop}\"]\n");
            let e = Pipeline::parse(Path::new("p.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains("publish.links.drop[0]"), "{e}");
            assert!(e.contains("more than one action"), "{e}");
        }
        // Another URI under the same namespace is not a ResourceSync relation: no conflict.
        let text = format!(
            "{GOOD}\n[publish.links]\nkeep = [\"patch\"]\ndrop = [\"http://www.openarchives.org/rs/terms/other\"]\n"
        );
        Pipeline::parse(Path::new("p.toml"), &text).unwrap();
    }

    /// A `[publish.links]` entry names one relation type: one holding several (as a `rel`
    /// attribute may) or none would never match a link, and is refused rather than ignored.
    #[test]
    fn a_link_policy_entry_is_one_relation_type() {
        for bad in ["up describedby", "", "  "] {
            let text = format!("{GOOD}\n[publish.links]\nkeep = [\"{bad}\"]\n");
            let e = Pipeline::parse(Path::new("p.toml"), &text)
                .unwrap_err()
                .to_string();
            assert!(e.contains("publish.links.keep[0]"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn relation_keys_name_resourcesync_relations_by_their_short_name() {
        assert_eq!(
            relation_key("http://www.openarchives.org/rs/terms/patch"),
            "patch"
        );
        assert_eq!(
            relation_key("HTTP://WWW.OpenArchives.org/rs/terms/Patch"),
            "patch"
        );
        assert_eq!(relation_key("Patch"), "patch");
        assert_eq!(relation_key("DescribedBy"), "describedby");
        assert_eq!(
            relation_key("http://www.openarchives.org/rs/terms/describedby"),
            "http://www.openarchives.org/rs/terms/describedby",
            "only ResourceSync's own relations are written under its namespace"
        );
        assert_eq!(
            relation_uri("patch").as_deref(),
            Some("http://www.openarchives.org/rs/terms/patch")
        );
        assert_eq!(
            relation_uri("http://www.openarchives.org/rs/terms/PATCH").as_deref(),
            Some("http://www.openarchives.org/rs/terms/patch")
        );
        assert_eq!(relation_uri("describedby"), None);
    }

    #[test]
    fn notify_keys_have_defaults_and_bounds() {
        let text = format!("{GOOD}\n[notify]\nhub = \"https://hub.example.org/\"\n");
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        let n = p.config.notify.unwrap();
        assert_eq!(
            (n.form, n.max_entries, n.max_bytes),
            (NotifyForm::Resourcesync, 1_000, 1 << 20)
        );
        assert_eq!(
            (n.deliver_timeout, n.fetch_wait),
            (Duration::from_secs(30), Duration::from_secs(10))
        );
        let text = format!(
            "{GOOD}\n[notify]\nhub = \"https://hub.example.org/\"\nform = \"websub\"\nmax_entries = 10\nfetch_wait = \"2s\"\n"
        );
        let n = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap()
            .config
            .notify
            .unwrap();
        assert_eq!(
            (n.form, n.max_entries, n.fetch_wait),
            (NotifyForm::Websub, 10, Duration::from_secs(2))
        );
        for (bad, key) in [
            ("max_entries = 0", "notify.max_entries"),
            ("max_entries = 50001", "notify.max_entries"),
            ("max_bytes = 0", "notify.max_bytes"),
            ("deliver_timeout = \"0s\"", "notify.deliver_timeout"),
        ] {
            let text = format!("{GOOD}\n[notify]\nhub = \"https://hub.example.org/\"\n{bad}\n");
            let e = Pipeline::parse(Path::new("p.toml"), &text)
                .unwrap_err()
                .to_string();
            let line = GOOD.matches('\n').count() + 4;
            assert!(
                e.contains(key) && e.contains(&format!("p.toml:{line}:")),
                "{bad}: {e}"
            );
        }
        let text = format!("{GOOD}\n[notify]\nhub = \"ftp://hub.example.org/\"\n");
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("notify.hub"), "{e}");
    }

    #[test]
    fn env_substitution() {
        // SAFETY-free: a variable name no other test uses.
        let text = GOOD.replace("/tmp/rsagg-test-maps", "${RSAGG_TEST_NO_SUCH_VAR}");
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("RSAGG_TEST_NO_SUCH_VAR"), "{e}");
        let text = GOOD.replace("/tmp/rsagg-test-maps", "${HOME}/x");
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        assert!(p.config.store.url.as_str().ends_with("/x"));
        // Not in comments, and a '#' inside a string does not start one.
        let text = format!("# uses ${{RSAGG_TEST_NO_SUCH_VAR}}\n{GOOD}")
            .replace("/tmp/rsagg-test-maps", "/tmp/a#b-${HOME}");
        let p = Pipeline::parse(Path::new("p.toml"), &text).unwrap();
        assert!(
            !p.config.store.url.as_str().contains('$'),
            "{}",
            p.config.store.url
        );
    }

    #[test]
    fn every_problem_of_a_file_is_reported_at_its_line_and_column() {
        let text = GOOD
            .replace("name = \"maps\"", "name = \"Maps\"")
            .replace("name = \"museum\"", "name = \"Museum\"")
            .replace("poll_interval = \"5m\"", "poll_interval = \"0s\"");
        let Err(Error::Invalid { problems, .. }) = Pipeline::parse(Path::new("p.toml"), &text)
        else {
            panic!("invalid");
        };
        let found: Vec<_> = problems
            .iter()
            .map(|p| (p.line, p.column, p.key.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                (3, 1, "collection.name"),
                (10, 1, "upstream[0].name"),
                (13, 1, "upstream[0].poll_interval")
            ],
            "{problems:#?}"
        );
    }

    #[test]
    fn a_store_url_error_is_on_the_store_url_line() {
        let text = GOOD.replace("file:///tmp/rsagg-test-maps", "ftp://x/y");
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.toml:7:1: store.url: "), "{e}");
        let text = GOOD.replace("file:///tmp/rsagg-test-maps", "not a url");
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.toml:7:"), "{e}");
        assert!(e.contains("store.url"), "{e}");
    }

    #[test]
    fn durations_say_what_is_expected() {
        let text = GOOD.replace(
            "poll_interval = \"5m\"",
            "poll_interval = \"5 minutes please\"",
        );
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(e.contains("upstream[0].poll_interval"), "{e}");
        assert!(
            e.contains("5 minutes please") && e.contains("\"5m\""),
            "{e}"
        );
        let text = format!("{GOOD}\n[publish]\ngrace = 3600\n");
        let e = Pipeline::parse(Path::new("p.toml"), &text)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("publish.grace") && e.contains("\"1h 30m\""),
            "{e}"
        );
    }

    #[test]
    fn substituted_values_cannot_change_the_structure() {
        let text = GOOD.replace("/tmp/rsagg-test-maps", "/tmp/${V}");
        let env = |n: &str| (n == "V").then(|| "x\"\n[evil]\nkey = \"1".to_owned());
        let p = Pipeline::parse_with_env(Path::new("p.toml"), &text, &env).unwrap();
        assert!(
            p.config.store.url.as_str().contains("evil"),
            "{}",
            p.config.store.url
        );
        let env = |_: &str| None;
        let text = GOOD.replace("/tmp/rsagg-test-maps", "${V:-/tmp/dflt}");
        let p = Pipeline::parse_with_env(Path::new("p.toml"), &text, &env).unwrap();
        assert_eq!(p.config.store.url.as_str(), "file:///tmp/dflt");
    }

    /// Problems of `text` as (line, column, key), read with no variable set.
    fn found(text: &str) -> Vec<(usize, usize, String)> {
        match Pipeline::parse_with_env(Path::new("p.toml"), text, &|_| None) {
            Err(Error::Invalid { problems, .. }) => problems
                .into_iter()
                .map(|p| (p.line, p.column, p.key))
                .collect(),
            other => panic!("not invalid: {other:?}"),
        }
    }

    #[test]
    fn every_kind_of_problem_is_reported_in_one_pass() {
        // An unset variable (at a required key), a wrong type (at a required key), an
        // unknown key and two bad values: before, three runs of `check` (unset variable;
        // then types and unknown keys; then values), now one.
        let text = GOOD
            .replace("file:///tmp/rsagg-test-maps", "${RSAGG_TEST_UNSET_STORE}")
            .replace(
                "url = \"https://museum.example.org/.well-known/resourcesync\"",
                "url = 5",
            )
            .replace("allow_private = false", "allow_privat = false")
            .replace("name = \"maps\"", "name = \"Maps\"")
            .replace("poll_interval = \"5m\"", "poll_interval = \"0s\"");
        let keys = |v: Vec<(usize, usize, String)>| -> Vec<(usize, String)> {
            v.into_iter().map(|(l, _, k)| (l, k)).collect()
        };
        assert_eq!(
            keys(found(&text)),
            [
                (3, "collection.name".to_owned()),
                (7, "store.url".to_owned()),
                (11, "upstream[0].url".to_owned()),
                (12, "upstream[0].allow_privat".to_owned()),
                (13, "upstream[0].poll_interval".to_owned()),
            ]
        );
    }

    #[test]
    fn a_missing_required_key_does_not_hide_the_rest() {
        // `name` of the upstream left out, `[store]` left out, and a bad value after them.
        let text = GOOD
            .replace("name = \"museum\"\n", "")
            .replace("[store]\nurl = \"file:///tmp/rsagg-test-maps\"\n", "")
            .replace("poll_interval = \"5m\"", "poll_interval = \"0s\"")
            .replace("name = \"maps\"", "name = \"Maps\"");
        let problems = found(&text);
        let keys: Vec<&str> = problems.iter().map(|(_, _, k)| k.as_str()).collect();
        assert!(keys.contains(&"collection.name"), "{problems:?}");
        assert!(keys.contains(&"upstream[0].poll_interval"), "{problems:?}");
        let e = Pipeline::parse_with_env(Path::new("p.toml"), &text, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing field `name`"), "{e}");
        assert!(e.contains("missing field `store`"), "{e}");
        // Only those four: the placeholders put in for the missing keys raise nothing.
        assert_eq!(problems.len(), 4, "{e}");
        // A wrong type in a required key of one upstream, a bad name in the next.
        let text = format!(
            "{}\n[[upstream]]\nname = \"Second\"\nurl = \"https://b.example/\"\n",
            GOOD.replace(
                "url = \"https://museum.example.org/.well-known/resourcesync\"",
                "url = [1]"
            )
        );
        let keys: Vec<String> = found(&text).into_iter().map(|(_, _, k)| k).collect();
        assert_eq!(keys, ["upstream[0].url", "upstream[1].name"]);
    }

    #[test]
    fn type_errors_and_rule_errors_come_together() {
        let text = format!(
            "{GOOD}\n[publish]\ngrace = 3600\nchangelist_max_entries = 0\n",
            GOOD = GOOD
                .replace("name = \"maps\"", "name = \"Maps\"")
                .replace(
                    "poll_interval = \"5m\"",
                    "poll_interval = \"5 minutes please\""
                )
                .replace("allow_private = false", "allow_privat = false")
        );
        let Err(Error::Invalid { problems, .. }) = Pipeline::parse(Path::new("p.toml"), &text)
        else {
            panic!("invalid");
        };
        let keys: Vec<_> = problems.iter().map(|p| (p.line, p.key.as_str())).collect();
        assert_eq!(
            keys,
            [
                (3, "collection.name"),
                (12, "upstream[0].allow_privat"),
                (13, "upstream[0].poll_interval"),
                (16, "publish.grace"),
                (17, "publish.changelist_max_entries"),
            ],
            "{problems:#?}"
        );
    }

    #[test]
    fn what_a_run_refuses_before_io_check_refuses_too() {
        let problem = |text: &str, key: &str| -> String {
            let e = Pipeline::parse_with_env(Path::new("p.toml"), text, &|_| None).unwrap_err();
            let Error::Invalid { problems, .. } = &e else {
                panic!("not invalid: {e}");
            };
            problems
                .iter()
                .find(|p| p.key == key)
                .unwrap_or_else(|| panic!("no problem at {key}: {e}"))
                .message
                .clone()
        };
        // Two slashes: `relative` is a host name, not a directory (the store refused it only
        // when a run opened it, with exit 1).
        let m = problem(
            &GOOD.replace("file:///tmp/rsagg-test-maps", "file://relative/store"),
            "store.url",
        );
        assert!(m.contains("not an absolute local path"), "{m}");
        assert!(m.contains("file:///"), "{m}");
        // A loopback or private IP literal, or localhost, without allow_private.
        for url in [
            "http://127.0.0.1:8000/",
            "http://[::1]:8000/",
            "http://10.1.2.3/",
            "http://localhost:8000/oai",
        ] {
            let text = GOOD.replace("https://museum.example.org/.well-known/resourcesync", url);
            let m = problem(&text, "upstream[0].url");
            assert!(m.contains("allow_private = true"), "{url}: {m}");
            let allowed = text.replace("allow_private = false", "allow_private = true");
            Pipeline::parse_with_env(Path::new("p.toml"), &allowed, &|_| None)
                .unwrap_or_else(|e| panic!("{url} with allow_private: {e}"));
        }
    }

    #[test]
    fn a_plain_path_as_the_store_url_suggests_file_url() {
        let text = GOOD.replace("file:///tmp/rsagg-test-maps", "/var/lib/rsagg/maps");
        let e = Pipeline::parse_with_env(Path::new("p.toml"), &text, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("store.url"), "{e}");
        assert!(e.contains("\"file:///var/lib/rsagg/maps\""), "{e}");
    }

    #[test]
    fn an_unknown_table_does_not_hide_the_other_problems() {
        // `[stor]` for `[store]`, and a bad value further down: both reported, one pass.
        let text = GOOD
            .replace("[store]\n", "[stor]\n")
            .replace("poll_interval = \"5m\"", "poll_interval = \"0s\"")
            .replace("name = \"maps\"", "name = \"Maps\"");
        let e = Pipeline::parse_with_env(Path::new("p.toml"), &text, &|_| None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `stor`"), "{e}");
        assert!(e.contains("missing field `store`"), "{e}");
        let keys: Vec<String> = found(&text).into_iter().map(|(_, _, k)| k).collect();
        assert!(
            keys.contains(&"collection.name".to_owned()),
            "{keys:?}: {e}"
        );
        assert!(
            keys.contains(&"upstream[0].poll_interval".to_owned()),
            "{keys:?}: {e}"
        );
    }
}
