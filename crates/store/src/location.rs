//! Store URLs → object stores.

use std::path::PathBuf;
use std::sync::Arc;

use std::time::Duration;

use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
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
    /// Default of [`StoreOptions::state_block_cache_bytes`]: 24 MiB. This default and the
    /// three below are their shares of the pipeline's default `[store] memory_bytes`
    /// (160 MiB, `rsagg_config::StoreConfig::MEMORY_SHARES`). 64 MiB before, with 32 MiB of
    /// meta cache, 64 MiB unflushed and tables of 32 MiB: ~400 MiB in all, and a
    /// 10^6-record OAI-PMH run peaked at 494 MiB (349–361 MiB now).
    pub const DEFAULT_STATE_BLOCK_CACHE: u64 = 24 << 20;
    /// Default of [`StoreOptions::state_meta_cache_bytes`]: 16 MiB.
    pub const DEFAULT_STATE_META_CACHE: u64 = 16 << 20;
    /// Default of [`StoreOptions::state_max_unflushed_bytes`]: 64 MiB (slatedb's own
    /// default, 512 MiB, alone is twice the memory budget of a run; with 32 MiB the writes
    /// of a harvest waited for the state's flushes, 26 s for 10^5 records instead of 16 s).
    pub const DEFAULT_STATE_MAX_UNFLUSHED: u64 = 64 << 20;
    /// Default of [`StoreOptions::state_compaction_sst_bytes`]: 4 MiB (slatedb's own,
    /// 256 MiB, times its four concurrent compactions, took a 10^6-resource baseline to
    /// 1.8 GiB).
    pub const DEFAULT_STATE_COMPACTION_SST: u64 = 4 << 20;
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
/// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`…; where the credentials may come
/// from, and why opening fails without any, is `S3Credentials` below) or `memory://` (tests
/// only: gone with the process).
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
    open_with(url, options, create, &S3Env::from_process, &read_host_file)
}

/// [`open`] with the environment an `s3://` store is opened with, and the reader of the host's
/// files that tell an EC2 host ([`ec2_evident`]), given: tests open stores without touching
/// the process's environment (they run on parallel threads) or the host's files. Both are
/// asked only for an `s3://` URL.
fn open_with(
    url: &str,
    options: &StoreOptions,
    create: bool,
    env: &dyn Fn() -> S3Env,
    host: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreLocation, Error> {
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
            let env = env();
            let builder = env.builder();
            // Decided before building: without credentials object_store falls through to
            // the instance metadata service (a PUT to 169.254.169.254 that times out or
            // answers 403 off EC2, reported as a refusal of the store). Opening fails here
            // instead, saying what was looked for; no request is made.
            S3Credentials::of(&builder, &env, host).map_err(err)?;
            let s3 = builder
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

/// rsagg's own switch of the instance metadata service for an `s3://` store's credentials:
/// `1` asks it when nothing else provides them, `0` never does (not even on EC2); unset, it is
/// asked when `AWS_METADATA_ENDPOINT` is set or the host says it is EC2 ([`ec2_evident`]).
const INSTANCE_METADATA_VAR: &str = "RSAGG_S3_INSTANCE_METADATA";
/// The AWS SDKs' switch-off of the instance metadata service, honoured too (unless
/// [`INSTANCE_METADATA_VAR`] says otherwise).
const METADATA_DISABLED_VAR: &str = "AWS_EC2_METADATA_DISABLED";

/// The environment an `s3://` store is opened with: the `AWS_*` variables, read as
/// `AmazonS3Builder::from_env` reads them, and [`INSTANCE_METADATA_VAR`]. A variable set to
/// the empty string counts as unset (a template's `AWS_SESSION_TOKEN=${AWS_SESSION_TOKEN}`
/// would otherwise send an empty token beside good keys, and be refused).
#[derive(Debug, Clone, Default)]
struct S3Env {
    /// (name, value), in the process environment's order.
    vars: Vec<(String, String)>,
}

impl S3Env {
    /// The process's environment (variables that are not UTF-8 skipped, as object_store does).
    fn from_process() -> S3Env {
        S3Env::from_vars(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    /// These variables (tests give theirs here instead of setting the process's).
    fn from_vars<K: Into<String>, V: Into<String>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> S3Env {
        let vars = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(k, v): &(String, String)| {
                !v.is_empty() && (k.starts_with("AWS_") || k == INSTANCE_METADATA_VAR)
            })
            .collect();
        S3Env { vars }
    }

    /// The value of `name` (the last one given).
    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The builder `AmazonS3Builder::from_env` makes of these variables: every `AWS_*` name,
    /// lowercased, that is one of its configuration keys.
    fn builder(&self) -> AmazonS3Builder {
        self.vars
            .iter()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .fold(AmazonS3Builder::new(), |builder, (k, v)| {
                match k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
                    Ok(key) => builder.with_config(key, v),
                    Err(_) => builder,
                }
            })
    }
}

/// A boolean as object_store parses one (`1`, `true`, `on`, `yes`, `y`; `0`, `false`, `off`,
/// `no`, `n`; any case); `None` for anything else.
fn parse_bool(value: &str) -> Option<bool> {
    match value.to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" | "y" => Some(true),
        "0" | "false" | "off" | "no" | "n" => Some(false),
        _ => None,
    }
}

/// Where an `s3://` store's requests get their credentials, decided before the store is
/// built, in the order `AmazonS3Builder::build` (object_store 0.14) picks its provider. Its
/// last resort, the instance metadata service, is asked only when configured or on EC2:
/// elsewhere opening fails, naming what was looked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum S3Credentials {
    /// `AWS_SKIP_SIGNATURE=true`: requests are not signed, no credentials are fetched (a
    /// public bucket).
    Anonymous,
    /// `AWS_ACCESS_KEY_ID` with `AWS_SECRET_ACCESS_KEY` (and `AWS_SESSION_TOKEN` if set).
    Static,
    /// `AWS_WEB_IDENTITY_TOKEN_FILE` with `AWS_ROLE_ARN`: a role assumed through STS (EKS
    /// service accounts).
    WebIdentity,
    /// `AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`: an ECS task's role.
    Container,
    /// `AWS_CONTAINER_CREDENTIALS_FULL_URI` with `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`: EKS
    /// Pod Identity.
    PodIdentity,
    /// The instance metadata service (IMDSv2, at `AWS_METADATA_ENDPOINT` or
    /// 169.254.169.254): an EC2 instance's role.
    InstanceMetadata,
}

/// What [`S3Credentials::of`] looks for, in its order, as the error without any says it.
const LOOKED_FOR: &str = "AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY, \
    AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN, AWS_CONTAINER_CREDENTIALS_RELATIVE_URI, \
    AWS_CONTAINER_CREDENTIALS_FULL_URI with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE, \
    AWS_SKIP_SIGNATURE=true";

impl S3Credentials {
    /// Where the store `builder` (made of `env`) gets its credentials; `host` reads the host's
    /// files that tell an EC2 host, only when nothing else provides them. An error names
    /// what is missing: the other half of a pair, or everything looked for.
    fn of(
        builder: &AmazonS3Builder,
        env: &S3Env,
        host: &dyn Fn(&str) -> Option<String>,
    ) -> Result<S3Credentials, String> {
        use AmazonS3ConfigKey as K;
        let set = |key: K| builder.get_config_value(&key).is_some();
        let asked = match env.var(INSTANCE_METADATA_VAR) {
            None => None,
            Some(v) => Some(parse_bool(v).ok_or_else(|| {
                format!("{INSTANCE_METADATA_VAR}=`{v}`: expected 1 (ask the instance metadata service for S3 credentials) or 0")
            })?),
        };
        // Pairs, in object_store's order; the first complete one is used. Keys alone fail
        // object_store's build; the other halves alone are passed over by it (down to the
        // instance metadata service): both are said here.
        let pairs = [
            (
                K::AccessKeyId,
                "AWS_ACCESS_KEY_ID",
                K::SecretAccessKey,
                "AWS_SECRET_ACCESS_KEY",
            ),
            (
                K::WebIdentityTokenFile,
                "AWS_WEB_IDENTITY_TOKEN_FILE",
                K::RoleArn,
                "AWS_ROLE_ARN",
            ),
            (
                K::ContainerCredentialsFullUri,
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                K::ContainerAuthorizationTokenFile,
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            ),
        ];
        let halves: Vec<String> = pairs
            .into_iter()
            .filter_map(|(a, a_name, b, b_name)| match (set(a), set(b)) {
                (true, false) => Some(format!("{a_name} is set but {b_name} is not")),
                (false, true) => Some(format!("{b_name} is set but {a_name} is not")),
                _ => None,
            })
            .collect();
        let keys = set(K::AccessKeyId) || set(K::SecretAccessKey);
        let incomplete = || format!("incomplete S3 credentials: {}", halves.join("; "));
        if keys && !(set(K::AccessKeyId) && set(K::SecretAccessKey)) {
            return Err(incomplete());
        }
        let unsigned = builder
            .get_config_value(&K::SkipSignature)
            .is_some_and(|v| parse_bool(&v) == Some(true));
        if unsigned {
            return Ok(S3Credentials::Anonymous);
        }
        if keys {
            return Ok(S3Credentials::Static);
        }
        if set(K::WebIdentityTokenFile) && set(K::RoleArn) {
            return Ok(S3Credentials::WebIdentity);
        }
        if set(K::ContainerCredentialsRelativeUri) {
            return Ok(S3Credentials::Container);
        }
        if set(K::ContainerCredentialsFullUri) && set(K::ContainerAuthorizationTokenFile) {
            return Ok(S3Credentials::PodIdentity);
        }
        if !halves.is_empty() {
            return Err(incomplete());
        }
        let disabled = env
            .var(METADATA_DISABLED_VAR)
            .is_some_and(|v| parse_bool(v) == Some(true));
        let not_asked = match asked {
            Some(true) => return Ok(S3Credentials::InstanceMetadata),
            Some(false) => format!("{INSTANCE_METADATA_VAR}=0"),
            None if disabled => format!("{METADATA_DISABLED_VAR}=true"),
            None if set(K::MetadataEndpoint) || ec2_evident(host) => {
                return Ok(S3Credentials::InstanceMetadata);
            }
            None => {
                "nothing in /sys/class/dmi/id or /sys/hypervisor says this is an EC2 host".into()
            }
        };
        let mut notes = String::new();
        if set(K::Token) {
            notes.push_str(" (AWS_SESSION_TOKEN is set, but only goes with the two keys)");
        }
        if env.var("AWS_PROFILE").is_some() {
            notes.push_str(" (AWS_PROFILE is set, but profiles and ~/.aws files are not read)");
        }
        Err(format!(
            "no S3 credentials: looked for {LOOKED_FOR}{notes}; {not_asked}, so the instance \
             metadata service was not asked (set {INSTANCE_METADATA_VAR}=1 to ask it)"
        ))
    }
}

/// The host's files that say it is an EC2 instance: the DMI vendor strings of a Nitro
/// instance (`Amazon EC2`), a Xen instance's BIOS version (`4.11.amazon`) and hypervisor UUID
/// (`ec2…`). Readable without privileges on Linux; absent elsewhere (then nothing says so).
const EC2_FILES: [&str; 5] = [
    "/sys/class/dmi/id/sys_vendor",
    "/sys/class/dmi/id/board_vendor",
    "/sys/class/dmi/id/bios_vendor",
    "/sys/class/dmi/id/bios_version",
    "/sys/hypervisor/uuid",
];

/// The contents of the host's file `path`, if it can be read.
fn read_host_file(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// Whether the contents `read` gives of [`EC2_FILES`] say this is an EC2 host; nothing but
/// what `read` returns is looked at.
fn ec2_evident(read: &dyn Fn(&str) -> Option<String>) -> bool {
    let [
        sys_vendor,
        board_vendor,
        bios_vendor,
        bios_version,
        hypervisor_uuid,
    ] = EC2_FILES;
    let says = |path: &str, test: &dyn Fn(&str) -> bool| read(path).is_some_and(|c| test(c.trim()));
    let amazon = |v: &str| v.eq_ignore_ascii_case("Amazon EC2");
    says(sys_vendor, &amazon)
        || says(board_vendor, &amazon)
        || says(bios_vendor, &amazon)
        || says(bios_version, &|v| {
            v.to_ascii_lowercase().ends_with(".amazon")
        })
        || says(hypervisor_uuid, &|u| {
            u.get(..3).is_some_and(|p| p.eq_ignore_ascii_case("ec2"))
        })
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

    /// `s3://bucket/prefix` opened with only `vars` for an environment and `host` for the
    /// host's files. The endpoint is a loopback port nothing listens on: opening makes no
    /// request, and nothing here could reach past the machine if it did.
    fn open_s3(
        vars: &[(&str, &str)],
        host: &dyn Fn(&str) -> Option<String>,
    ) -> Result<StoreLocation, Error> {
        let mut all = vec![
            ("AWS_ENDPOINT", "http://127.0.0.1:9"),
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_REGION", "us-east-1"),
        ];
        all.extend_from_slice(vars);
        let env = S3Env::from_vars(all);
        open_with(
            "s3://bucket/prefix",
            &StoreOptions::READER,
            false,
            &|| env.clone(),
            host,
        )
    }

    /// Where `vars` say the credentials come from (no host files beyond `host`).
    fn source(
        vars: &[(&str, &str)],
        host: &dyn Fn(&str) -> Option<String>,
    ) -> Result<S3Credentials, String> {
        let env = S3Env::from_vars(vars.iter().copied());
        S3Credentials::of(&env.builder(), &env, host)
    }

    /// A host none of whose files says EC2 (a plain KVM guest).
    fn elsewhere(path: &str) -> Option<String> {
        match path {
            "/sys/class/dmi/id/sys_vendor" => Some("QEMU\n".into()),
            "/sys/class/dmi/id/bios_version" => Some("1.16.3-debian-1.16.3-2\n".into()),
            _ => None,
        }
    }

    /// A Nitro EC2 instance.
    fn nitro(path: &str) -> Option<String> {
        (path == "/sys/class/dmi/id/sys_vendor").then(|| "Amazon EC2\n".into())
    }

    /// A host whose files must not be read: something else provides the credentials.
    fn unread(path: &str) -> Option<String> {
        panic!("{path} read although the environment has credentials")
    }

    fn url_error(r: Result<StoreLocation, Error>) -> String {
        match r {
            Err(Error::Url { url, message }) => {
                assert_eq!(url, "s3://bucket/prefix");
                message
            }
            Err(other) => panic!("not a URL error: {other}"),
            Ok(loc) => panic!("{} opened", loc.url),
        }
    }

    #[test]
    fn without_credentials_opening_fails_naming_what_was_looked_for() {
        let read = std::sync::Mutex::new(Vec::new());
        let host = |path: &str| {
            read.lock().unwrap().push(path.to_owned());
            elsewhere(path)
        };
        let e = open_s3(&[], &host).unwrap_err();
        let message = e.to_string();
        assert!(
            message.starts_with("store URL `s3://bucket/prefix`: no S3 credentials: looked for "),
            "{message}"
        );
        for name in [
            "AWS_ACCESS_KEY_ID with AWS_SECRET_ACCESS_KEY",
            "AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN",
            "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
            "AWS_CONTAINER_CREDENTIALS_FULL_URI with AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            "AWS_SKIP_SIGNATURE=true",
            "says this is an EC2 host, so the instance metadata service was not asked",
            "(set RSAGG_S3_INSTANCE_METADATA=1 to ask it)",
        ] {
            assert!(message.contains(name), "{name} not in: {message}");
        }
        // Not a refusal by the store: no store was made to refuse anything.
        assert!(matches!(e, Error::Url { .. }), "{e:?}");
        assert!(
            !message.contains("refused") && !message.contains("403"),
            "{message}"
        );
        // The host was asked whether it is EC2, through the files given and only those.
        assert_eq!(*read.lock().unwrap(), EC2_FILES.map(String::from));
        // A stray half of another source is said too.
        let e = url_error(open_s3(
            &[("AWS_SESSION_TOKEN", "t"), ("AWS_PROFILE", "work")],
            &elsewhere,
        ));
        assert!(
            e.contains("AWS_SESSION_TOKEN is set") && e.contains("AWS_PROFILE is set"),
            "{e}"
        );
    }

    #[test]
    fn static_keys_and_the_other_sources_open() {
        let keys = [
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ];
        let loc = open_s3(&keys, &unread).unwrap();
        assert_eq!(loc.url, "s3://bucket/prefix");
        assert_eq!(source(&keys, &unread), Ok(S3Credentials::Static));
        // With a session token; an empty one counts as unset (not sent beside the keys).
        let with_token = [keys[0], keys[1], ("AWS_SESSION_TOKEN", "token")];
        assert_eq!(source(&with_token, &unread), Ok(S3Credentials::Static));
        let env = S3Env::from_vars([keys[0], keys[1], ("AWS_SESSION_TOKEN", "")]);
        assert_eq!(
            env.builder().get_config_value(&AmazonS3ConfigKey::Token),
            None
        );
        // object_store's other spellings of its keys count as it reads them.
        let aliased = [
            ("AWS_access_key_id", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ];
        assert_eq!(source(&aliased, &unread), Ok(S3Credentials::Static));
        for (vars, want) in [
            (
                &[
                    ("AWS_WEB_IDENTITY_TOKEN_FILE", "/var/run/token"),
                    ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r"),
                ][..],
                S3Credentials::WebIdentity,
            ),
            (
                &[(
                    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                    "/v2/credentials/x",
                )][..],
                S3Credentials::Container,
            ),
            (
                &[
                    ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c"),
                    ("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "/var/run/t"),
                ][..],
                S3Credentials::PodIdentity,
            ),
            (
                &[("AWS_SKIP_SIGNATURE", "true")][..],
                S3Credentials::Anonymous,
            ),
        ] {
            assert_eq!(source(vars, &unread), Ok(want), "{vars:?}");
            open_s3(vars, &unread).unwrap();
        }
    }

    #[test]
    fn half_a_pair_is_named() {
        for (vars, missing) in [
            (&[("AWS_ACCESS_KEY_ID", "id")][..], "AWS_SECRET_ACCESS_KEY"),
            (&[("AWS_SECRET_ACCESS_KEY", "s")][..], "AWS_ACCESS_KEY_ID"),
            // An empty value is no value.
            (
                &[("AWS_ACCESS_KEY_ID", "id"), ("AWS_SECRET_ACCESS_KEY", "")][..],
                "AWS_SECRET_ACCESS_KEY",
            ),
            (&[("AWS_WEB_IDENTITY_TOKEN_FILE", "/t")][..], "AWS_ROLE_ARN"),
            (
                &[("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://127.0.0.1:1/c")][..],
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            ),
        ] {
            // Even where the instance metadata service would be asked: the half says what
            // was meant.
            for host in [elsewhere as fn(&str) -> Option<String>, nitro] {
                let e = url_error(open_s3(vars, &host));
                assert!(
                    e.starts_with("incomplete S3 credentials: ")
                        && e.contains(&format!("but {missing} is not")),
                    "{vars:?}: {e}"
                );
            }
        }
        // Key ID alone, skipping signatures: object_store's build fails on it; so does this.
        let e = url_error(open_s3(
            &[("AWS_ACCESS_KEY_ID", "id"), ("AWS_SKIP_SIGNATURE", "true")],
            &unread,
        ));
        assert!(e.contains("AWS_SECRET_ACCESS_KEY is not"), "{e}");
    }

    #[test]
    fn the_instance_metadata_service_is_asked_when_configured_or_on_ec2() {
        let want = Ok(S3Credentials::InstanceMetadata);
        // Configured: rsagg's switch, or an endpoint of its own.
        let on = [("RSAGG_S3_INSTANCE_METADATA", "1")];
        assert_eq!(source(&on, &unread), want);
        open_s3(&on, &unread).unwrap();
        let endpoint = [("AWS_METADATA_ENDPOINT", "http://127.0.0.1:1")];
        assert_eq!(source(&endpoint, &unread), want);
        // On EC2.
        assert_eq!(source(&[], &nitro), want);
        open_s3(&[], &nitro).unwrap();
        // Off, even on EC2: rsagg's switch, or the AWS SDKs'.
        let e = url_error(open_s3(&[("RSAGG_S3_INSTANCE_METADATA", "0")], &nitro));
        assert!(
            e.contains("; RSAGG_S3_INSTANCE_METADATA=0, so the instance"),
            "{e}"
        );
        let off = [("AWS_EC2_METADATA_DISABLED", "true")];
        let e = url_error(open_s3(&off, &nitro));
        assert!(
            e.contains("; AWS_EC2_METADATA_DISABLED=true, so the instance"),
            "{e}"
        );
        // rsagg's own switch wins.
        let both = [off[0], on[0]];
        assert_eq!(source(&both, &elsewhere), want);
        // Other sources come first.
        let keys = [
            on[0],
            ("AWS_ACCESS_KEY_ID", "id"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ];
        assert_eq!(source(&keys, &unread), Ok(S3Credentials::Static));
        // A value that is neither.
        let e = url_error(open_s3(&[("RSAGG_S3_INSTANCE_METADATA", "maybe")], &nitro));
        assert!(
            e.starts_with("RSAGG_S3_INSTANCE_METADATA=`maybe`: expected 1"),
            "{e}"
        );
    }

    #[test]
    fn an_ec2_host_is_told_by_its_files_alone() {
        let only = |file: &'static str, contents: &'static str| {
            move |path: &str| (path == file).then(|| contents.to_owned())
        };
        for (file, contents) in [
            ("/sys/class/dmi/id/sys_vendor", "Amazon EC2\n"),
            ("/sys/class/dmi/id/board_vendor", "Amazon EC2\n"),
            ("/sys/class/dmi/id/bios_vendor", "Amazon EC2\n"),
            ("/sys/class/dmi/id/bios_version", "4.11.amazon\n"),
            (
                "/sys/hypervisor/uuid",
                "ec2e1916-9099-7caf-fd21-012345abcdef\n",
            ),
            (
                "/sys/hypervisor/uuid",
                "EC2E1916-9099-7CAF-FD21-012345ABCDEF",
            ),
        ] {
            assert!(ec2_evident(&only(file, contents)), "{file}: {contents:?}");
        }
        for (file, contents) in [
            ("/sys/class/dmi/id/sys_vendor", "QEMU\n"),
            ("/sys/class/dmi/id/sys_vendor", "Amazon EC2 look-alike"),
            ("/sys/class/dmi/id/bios_vendor", "Xen\n"),
            ("/sys/class/dmi/id/bios_version", "4.11.amazon.not\n"),
            ("/sys/hypervisor/uuid", "e2\n"),
            (
                "/sys/hypervisor/uuid",
                "1f2e3d4c-0000-0000-0000-ec2000000000",
            ),
            // Only the files that say so count.
            ("/sys/class/dmi/id/product_name", "Amazon EC2"),
        ] {
            assert!(!ec2_evident(&only(file, contents)), "{file}: {contents:?}");
        }
        assert!(!ec2_evident(&|_| None));
    }

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
