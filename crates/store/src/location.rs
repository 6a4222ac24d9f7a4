//! Store URLs → object stores.

use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::prefix::PrefixStore;
use object_store::{BackoffConfig, ObjectStore, RetryConfig};

use crate::Error;
use crate::counted::{CountedStore, StoreCounters};
use crate::health::StoreHealth;
use crate::recent::RecentBlobs;
use crate::spool::Spool;

/// An opened store URL: the object store rooted at the URL's prefix.
#[derive(Debug, Clone)]
pub struct StoreLocation {
    /// The URL as configured.
    pub url: String,
    /// Objects under the URL's prefix (keys are relative to it).
    pub objects: Arc<dyn ObjectStore>,
    /// For a `file://` store, the directory `objects` is rooted at: the object `a/b/c` is
    /// the file `{local_root}/a/b/c`. Work on many small objects reads or writes them as
    /// files on a few threads of its own instead of one `objects` call each, which costs a
    /// blocking-thread hand-off per object locally: a Resource Dump reads every blob, a
    /// baseline writes thousands (see `Blobs::for_location`).
    pub local_root: Option<PathBuf>,
    /// The bodies of small blobs stored through it lately ([`crate::Blobs::for_location`]),
    /// so a dump built right after a harvest does not read them back, within
    /// [`StoreOptions::recent_blob_bytes`].
    pub recent: RecentBlobs,
    /// The bodies of resources stored through it ([`crate::Blobs::put_resource`]), on local
    /// disk, so that the Resource Dump built after a baseline reads none of them back from
    /// the store; off unless set ([`StoreLocation::with_spool`]).
    pub spool: Spool,
    /// Requests made through `objects` since the store was opened, by kind (a store opened
    /// by [`open_store`] counts every request; one built by [`StoreLocation::new`] none).
    pub counters: Arc<StoreCounters>,
    /// The store's circuit breaker: trips on a refusal (401/403) or after
    /// [`StoreOptions::max_failures`] consecutive failed requests; a run waits on it to end
    /// promptly rather than fail every request on its own.
    pub health: Arc<StoreHealth>,
}

/// How a store is opened: every memory bound and setting of a [`StoreLocation`] and of the
/// state opened in it, given at opening (`[store]` of a pipeline). A run's memory is bounded
/// by these plus its fixed buffers (see `pipelines/reference.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// Retries of one request by the S3 client (timeouts, connection errors, 5xx) before it
    /// fails; each failure counts towards `max_failures`.
    pub retries: u32,
    /// How long the S3 client retries one request at most.
    pub retry_timeout: Duration,
    /// Consecutive failed requests (each after its retries) after which the store is given
    /// up on for the rest of the process ([`StoreHealth`]); a refusal (401/403) at once.
    /// 0: never (long-lived readers, `serve` and `hub`, which outlive an outage).
    pub max_failures: u32,
    /// Bytes of recently stored small blob bodies kept in memory ([`RecentBlobs`]); 0 keeps
    /// none.
    pub recent_blob_bytes: u64,
    /// The state database's cache of SST data blocks, in bytes (0: none). Without it every
    /// point lookup past the memtable reads its block from the store again.
    pub state_block_cache_bytes: u64,
    /// The state database's cache of SST indexes and filters, in bytes (0: none). Without it
    /// every lookup re-reads and re-verifies an SST index from the store.
    pub state_meta_cache_bytes: u64,
    /// Writes the state database holds in memory before they are flushed to SSTs, at most
    /// (its memtables; writers wait beyond it).
    pub state_max_unflushed_bytes: u64,
    /// Size of the tables the state database's compaction writes, at most: a compaction
    /// holds up to two of them in memory (one filling, one uploading).
    pub state_compaction_sst_bytes: u64,
    /// Compactions of the state database run at once (at least 1); each holds up to twice
    /// [`StoreOptions::state_compaction_sst_bytes`].
    pub state_compactions: u32,
}

impl StoreOptions {
    /// What readers and tools use: nothing kept in memory beyond the state's defaults.
    pub const READER: StoreOptions = StoreOptions {
        // object_store's own defaults: a reader outlives an outage.
        retries: 10,
        retry_timeout: Duration::from_secs(180),
        max_failures: 0,
        recent_blob_bytes: 0,
        state_block_cache_bytes: StoreOptions::DEFAULT_STATE_BLOCK_CACHE,
        state_meta_cache_bytes: StoreOptions::DEFAULT_STATE_META_CACHE,
        state_max_unflushed_bytes: StoreOptions::DEFAULT_STATE_MAX_UNFLUSHED,
        state_compaction_sst_bytes: StoreOptions::DEFAULT_STATE_COMPACTION_SST,
        state_compactions: StoreOptions::DEFAULT_STATE_COMPACTIONS,
    };
    /// Default of [`StoreOptions::state_block_cache_bytes`]: 64 MiB.
    pub const DEFAULT_STATE_BLOCK_CACHE: u64 = 64 << 20;
    /// Default of [`StoreOptions::state_meta_cache_bytes`]: 32 MiB.
    pub const DEFAULT_STATE_META_CACHE: u64 = 32 << 20;
    /// Default of [`StoreOptions::state_max_unflushed_bytes`]: 64 MiB (slatedb's own
    /// default, 512 MiB, alone is the whole memory budget of a run). 128 MiB before: half of
    /// it left a 10^6 baseline no slower, and a margin under 512 MiB of peak RSS (the jumps
    /// that crossed it were compactions' read-ahead: `COMPACTION_READ_AHEAD` in `state.rs`).
    pub const DEFAULT_STATE_MAX_UNFLUSHED: u64 = 64 << 20;
    /// Default of [`StoreOptions::state_compaction_sst_bytes`]: 32 MiB (slatedb's own,
    /// 256 MiB, times its four concurrent compactions, took a 10^6-resource baseline to
    /// 1.8 GiB).
    pub const DEFAULT_STATE_COMPACTION_SST: u64 = 32 << 20;
    /// Default of [`StoreOptions::state_compactions`]: 2 (one per core of a small machine).
    pub const DEFAULT_STATE_COMPACTIONS: u32 = 2;
}

impl Default for StoreOptions {
    /// What a pipeline run uses unless its `[store]` says otherwise.
    fn default() -> Self {
        StoreOptions {
            recent_blob_bytes: RecentBlobs::DEFAULT_CAPACITY,
            // A run ends promptly on a dead store rather than fail each request on its own
            // after minutes of retries.
            retries: 3,
            retry_timeout: Duration::from_secs(30),
            max_failures: StoreHealth::DEFAULT_MAX_FAILURES,
            ..StoreOptions::READER
        }
    }
}

impl StoreLocation {
    /// This location with `spool`, for a remote store and a `file://` one alike (see
    /// `spool.rs`: one file per blob outgrows the page cache at 10^7 resources).
    pub fn with_spool(mut self, spool: Spool) -> Self {
        self.spool = spool;
        self
    }

    /// `objects` as the store at `url`, read and written through `objects` alone (no local
    /// root) and keeping no recent blobs: how tests and tools wrap a store they built.
    pub fn new(url: impl Into<String>, objects: Arc<dyn ObjectStore>) -> Self {
        StoreLocation {
            url: url.into(),
            objects,
            local_root: None,
            recent: RecentBlobs::none(),
            spool: Spool::none(),
            counters: Arc::new(StoreCounters::default()),
            health: StoreHealth::new("(unnamed store)", 0),
        }
    }
}

/// Opens `file:///abs/dir`, `s3://bucket/prefix` (endpoint and credentials from the `AWS_*`
/// environment variables object_store reads: `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`) or `memory://` (tests only: gone
/// with the process).
///
/// Local directories are created if missing; S3 buckets must exist. Opened as a reader
/// ([`StoreOptions::READER`]); a writer opens with [`open_store`].
pub fn open_object_store(url: &str) -> Result<StoreLocation, Error> {
    open_store(url, &StoreOptions::READER)
}

/// [`open_object_store`] with every option of the location set from `options`.
pub fn open_store(url: &str, options: &StoreOptions) -> Result<StoreLocation, Error> {
    open(url, options, true)
}

/// [`open_store`] for those that only read (`audit`, `run --dry-run`, `quarantine list`,
/// `serve`): a `file://` directory that does not exist is not created (they write nothing,
/// not even a directory). Such a store reads as empty, and shows what a run writes there
/// later: it is read through the nearest directory above it that exists.
pub fn open_store_read_only(url: &str, options: &StoreOptions) -> Result<StoreLocation, Error> {
    open(url, options, false)
}

fn open(url: &str, options: &StoreOptions, create: bool) -> Result<StoreLocation, Error> {
    let err = |message: String| Error::Url {
        url: rsagg_model::redact(url).into_owned(),
        message,
    };
    let parsed = url::Url::parse(url).map_err(|e| err(e.to_string()))?;
    let mut local_root = None;
    let objects: Arc<dyn ObjectStore> = match parsed.scheme() {
        "file" => {
            let dir = parsed
                .to_file_path()
                .map_err(|()| err("not an absolute local path".into()))?;
            if !create && !dir.is_dir() {
                let (objects, _) = missing_dir(&dir).map_err(err)?;
                return Ok(located(url, objects, None, options));
            }
            std::fs::create_dir_all(&dir)
                .map_err(|e| err(format!("cannot create {}: {e}", dir.display())))?;
            let store = LocalFileSystem::new_with_prefix(&dir)
                .map_err(|e| err(e.to_string()))?
                // Deleting the last object of a directory removes the directory too, so
                // garbage collection does not leave empty trees behind.
                .with_automatic_cleanup(true);
            // The root as the store resolved it (it canonicalises its prefix too).
            local_root = Some(
                std::fs::canonicalize(&dir)
                    .map_err(|e| err(format!("cannot resolve {}: {e}", dir.display())))?,
            );
            Arc::new(store)
        }
        "s3" => {
            let bucket = parsed
                .host_str()
                .filter(|b| !b.is_empty())
                .ok_or_else(|| err("no bucket name".into()))?;
            let s3 = AmazonS3Builder::from_env()
                .with_bucket_name(bucket)
                .with_retry(RetryConfig {
                    backoff: BackoffConfig::default(),
                    max_retries: options.retries as usize,
                    retry_timeout: options.retry_timeout,
                })
                .build()
                .map_err(|e| err(e.to_string()))?;
            let prefix = parsed.path().trim_matches('/');
            if prefix.is_empty() {
                Arc::new(s3)
            } else {
                Arc::new(PrefixStore::new(s3, prefix))
            }
        }
        "memory" => Arc::new(InMemory::new()),
        other => {
            return Err(err(format!(
                "scheme `{other}` is not supported (use file:// or s3://)"
            )));
        }
    };
    Ok(located(url, objects, local_root, options))
}

/// The location of `objects`, counted and watched by a breaker of its own.
fn located(
    url: &str,
    objects: Arc<dyn ObjectStore>,
    local_root: Option<PathBuf>,
    options: &StoreOptions,
) -> StoreLocation {
    let counters = Arc::new(StoreCounters::default());
    // The breaker's line names the store: without the credentials a URL may carry.
    let health = StoreHealth::new(rsagg_model::redact(url).into_owned(), options.max_failures);
    StoreLocation {
        url: url.to_owned(),
        objects: Arc::new(CountedStore::with_health(
            objects,
            counters.clone(),
            health.clone(),
        )),
        local_root,
        recent: RecentBlobs::with_capacity(options.recent_blob_bytes),
        spool: Spool::none(),
        counters,
        health,
    }
}

/// The directory `dir`, which does not exist, read through the nearest directory above it
/// that does (and the relative path below that one): reads find nothing until something
/// creates it, and nothing is created to read it.
fn missing_dir(dir: &std::path::Path) -> Result<(Arc<dyn ObjectStore>, String), String> {
    let mut rest: Vec<String> = Vec::new();
    let mut at = dir;
    while !at.is_dir() {
        let name = at
            .file_name()
            .ok_or_else(|| format!("no existing directory above {}", dir.display()))?;
        rest.push(name.to_string_lossy().into_owned());
        at = at
            .parent()
            .ok_or_else(|| format!("no existing directory above {}", dir.display()))?;
    }
    rest.reverse();
    let rest = rest.join("/");
    let root = LocalFileSystem::new_with_prefix(at).map_err(|e| e.to_string())?;
    Ok((Arc::new(PrefixStore::new(root, rest.as_str())), rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_unknown_schemes_and_relative_paths() {
        let e = open_object_store("ftp://x/y").unwrap_err().to_string();
        assert!(e.contains("ftp"), "{e}");
        assert!(open_object_store("not a url").is_err());
        assert!(open_object_store("s3:///prefix").is_err());
    }

    #[tokio::test]
    async fn read_only_opens_create_nothing_and_see_what_is_written_later() {
        use object_store::ObjectStoreExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b");
        let url = url::Url::from_directory_path(&target).unwrap();
        let loc = open_store_read_only(url.as_str(), &StoreOptions::READER).unwrap();
        assert!(!dir.path().join("a").exists(), "nothing created");
        let path = object_store::path::Path::from("stats/last-run.json");
        assert!(matches!(
            loc.objects.get(&path).await,
            Err(object_store::Error::NotFound { .. })
        ));
        let list: Vec<_> = futures::TryStreamExt::try_collect(loc.objects.list(None))
            .await
            .unwrap();
        assert!(list.is_empty());
        assert!(!dir.path().join("a").exists(), "reading created nothing");
        // A writer creates it later: the reader opened before sees its objects.
        let writer = open_object_store(url.as_str()).unwrap();
        writer.objects.put(&path, "{}".into()).await.unwrap();
        let got = loc.objects.get(&path).await.unwrap().bytes().await.unwrap();
        assert_eq!(&got[..], b"{}");
    }

    #[test]
    fn file_urls_create_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("a/b");
        let url = url::Url::from_directory_path(&target).unwrap();
        let loc = open_object_store(url.as_str()).unwrap();
        assert!(target.is_dir());
        assert!(open_object_store("memory://").unwrap().local_root.is_none());
        // The root the store resolved is where its objects are files.
        let root = loc.local_root.unwrap();
        assert_eq!(root.canonicalize().unwrap(), target.canonicalize().unwrap());
    }
}
