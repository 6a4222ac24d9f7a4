//! SeaweedFS `weed mini` as the S3 store of a test.

use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};

use crate::proc::Watched;
use crate::{free_port_pairs, venv_bin};

const ACCESS_KEY: &str = "rsaggtestkey";
const SECRET_KEY: &str = "rsaggtestsecret";
const REGION: &str = "us-east-1";
const BUCKET: &str = "rsagg-test";
const GRPC_OFFSET: u16 = 10000;
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A SeaweedFS server (`weed mini`: master, volume, filer and S3 gateway in one process) on
/// free loopback ports, with a fresh data directory, one bucket ([`Seaweed::bucket`]) and static
/// credentials (unsigned requests get 403). Telemetry and the admin UI are off; every port,
/// gRPC ones included, is chosen free and given explicitly, and all bind 127.0.0.1.
///
/// [`Seaweed::start`] blocks until an S3 write to the bucket succeeds (about 1 s; 60 s at most).
/// Dropping it stops the server (SIGTERM, SIGKILL after 2 s) and removes its data directory.
/// [`Seaweed::shared`] gives one server per test binary; give each test its own key prefix.
#[derive(Debug)]
pub struct Seaweed {
    watched: Mutex<Watched>,
    s3_port: u16,
    filer_port: u16,
    data_dir: PathBuf,
    /// Every port given to `weed mini` (a restart takes the same).
    ports: Vec<u16>,
}

impl Seaweed {
    /// Start a server of its own. Blocking (it runs on a thread of its own, so it may be
    /// called from async code too, where it blocks that worker for about a second; or use
    /// [`Seaweed::start_async`]).
    pub fn start() -> Result<Seaweed> {
        std::thread::spawn(|| start_blocking(true))
            .join()
            .map_err(|_| anyhow!("Seaweed start thread panicked"))?
    }

    /// [`Seaweed::start`], for a test that stops and restarts the server: its data directory
    /// is removed when it is dropped, not when the process stops.
    pub fn start_restartable() -> Result<Seaweed> {
        std::thread::spawn(|| start_blocking(false))
            .join()
            .map_err(|_| anyhow!("Seaweed start thread panicked"))?
    }

    /// Stops the server (SIGTERM, SIGKILL after 2 s), keeping its data and ports for
    /// [`Seaweed::restart`]: a store that goes away in the middle of a run. Blocking.
    pub fn stop(&self) {
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .stop();
    }

    /// Starts the server again after [`Seaweed::stop`], on the same ports with the same data;
    /// blocks until an S3 write succeeds, as [`Seaweed::start`].
    pub fn restart(&self) -> Result<()> {
        let ports = self.ports.clone();
        let dir = self.data_dir.clone();
        let watched = std::thread::spawn(move || launch(&dir, &ports, false))
            .join()
            .map_err(|_| anyhow!("Seaweed restart thread panicked"))??;
        *self.watched.lock().unwrap_or_else(|e| e.into_inner()) = watched;
        Ok(())
    }

    /// [`Seaweed::start`] on tokio's blocking pool.
    pub async fn start_async() -> Result<Seaweed> {
        tokio::task::spawn_blocking(Seaweed::start).await?
    }

    /// The server shared by all tests of this process: started by the first call (the others
    /// wait for it), never dropped; its watchdog stops it and removes its data when the test
    /// process exits. Blocking like [`Seaweed::start`]. A failed start is reported to every
    /// caller and not retried.
    pub fn shared() -> Result<&'static Seaweed> {
        static SHARED: OnceLock<std::result::Result<Seaweed, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Seaweed::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow!("shared SeaweedFS failed to start: {e}"))
    }

    /// The S3 endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    /// The bucket created at start (`rsagg-test`).
    pub fn bucket(&self) -> &str {
        BUCKET
    }

    /// The filer's HTTP address (SeaweedFS's own API; buckets are directories under
    /// `/buckets/`), for debugging.
    pub fn filer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.filer_port)
    }

    /// Access key id of the static identity.
    pub fn access_key(&self) -> &str {
        ACCESS_KEY
    }

    /// Secret key of the static identity.
    pub fn secret_key(&self) -> &str {
        SECRET_KEY
    }

    /// PID of the `weed` process.
    pub fn pid(&self) -> u32 {
        self.watched.lock().unwrap_or_else(|e| e.into_inner()).pid()
    }

    /// Whether `weed` is still running.
    pub fn is_running(&self) -> bool {
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_running()
    }

    /// The environment object_store's `AmazonS3Builder::from_env` (and so an `rsagg` child
    /// process) reads to reach this server: `AWS_ENDPOINT`, `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_DEFAULT_REGION`, `AWS_ALLOW_HTTP=true`,
    /// `AWS_VIRTUAL_HOSTED_STYLE_REQUEST=false`, `AWS_ENDPOINT_URL` (AWS SDKs) and
    /// `AWS_EC2_METADATA_DISABLED=true`. Apply it with `Command::envs`; consider
    /// `env_remove("AWS_SESSION_TOKEN")` and friends if the test environment may have them.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_DEFAULT_REGION", REGION.to_string()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".to_string()),
            ("AWS_EC2_METADATA_DISABLED", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// `s3://BUCKET/PREFIX` (no trailing slash added; an empty prefix gives `s3://BUCKET`).
    pub fn store_url(&self, prefix: &str) -> String {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            format!("s3://{BUCKET}")
        } else {
            format!("s3://{BUCKET}/{prefix}")
        }
    }

    /// A new object_store client for the bucket, rooted at `prefix` (a `PrefixStore`; empty =
    /// the whole bucket). Conditional puts (`PutMode::Create`/`Update`) work (SeaweedFS answers
    /// 412). Make one per test or runtime: its connection pool belongs to the runtime that
    /// first uses it.
    pub fn object_store(&self, prefix: &str) -> Arc<dyn ObjectStore> {
        let s3 = self.s3_builder().build().expect("valid S3 configuration");
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(PrefixStore::new(s3, prefix))
        }
    }

    /// The `AmazonS3Builder` behind [`Seaweed::object_store`], to adjust before `build()`.
    pub fn s3_builder(&self) -> AmazonS3Builder {
        s3_builder(self.s3_port)
    }

    /// The last lines of weed's log.
    pub fn log_tail(&self, n: usize) -> String {
        self.watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .log_tail(n)
    }
}

impl Drop for Seaweed {
    fn drop(&mut self) {
        self.watched
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .stop();
        let _ = std::fs::remove_dir_all(&self.data_dir);
    }
}

fn s3_builder(port: u16) -> AmazonS3Builder {
    AmazonS3Builder::new()
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_virtual_hosted_style_request(false)
        .with_region(REGION)
        .with_bucket_name(BUCKET)
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
}

fn weed_binary() -> Result<PathBuf> {
    if let Some(w) = std::env::var_os("RSAGG_WEED").filter(|v| !v.is_empty()) {
        let w = PathBuf::from(w);
        if !w.is_file() {
            bail!(
                "RSAGG_WEED={} does not exist: run `bash scripts/peers.sh install`",
                w.display()
            );
        }
        return Ok(w);
    }
    venv_bin("weed")
}

fn start_blocking(remove_data_on_exit: bool) -> Result<Seaweed> {
    // master, volume, filer, s3, admin: http ports whose gRPC port (+10000, weed's default
    // offset, which its embedded worker assumes for the admin server) is free as well
    let base = free_port_pairs(5, GRPC_OFFSET)?;
    let p: Vec<u16> = base.iter().flat_map(|&b| [b, b + GRPC_OFFSET]).collect();
    let data_dir = tempfile::Builder::new()
        .prefix("rsagg-weed-")
        .tempdir()
        .context("create SeaweedFS data dir")?
        .keep();
    let watched = match launch(&data_dir, &p, remove_data_on_exit) {
        Ok(w) => w,
        Err(e) => {
            let _ = std::fs::remove_dir_all(&data_dir);
            return Err(e);
        }
    };
    Ok(Seaweed {
        watched: Mutex::new(watched),
        s3_port: p[6],
        filer_port: p[4],
        data_dir,
        ports: p,
    })
}

/// Runs `weed mini` on ports `p` with its data in `data_dir` and waits until it takes an S3
/// write. Its watchdog removes its sockets when it exits, and the data directory too with
/// `remove_data_on_exit` (else the [`Seaweed`] removes it when dropped, so that a stopped
/// server can be restarted).
fn launch(data_dir: &std::path::Path, p: &[u16], remove_data_on_exit: bool) -> Result<Watched> {
    let weed = weed_binary()?;
    let log = data_dir.join("weed.log");
    let store = data_dir.join("data");
    std::fs::create_dir_all(&store)?;

    let mut cmd = Command::new(&weed);
    cmd.arg("mini")
        .arg(format!("-dir={}", store.display()))
        .args([
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            "-master.telemetry=false",
        ])
        .arg(format!("-master.port={}", p[0]))
        .arg(format!("-master.port.grpc={}", p[1]))
        .arg(format!("-volume.port={}", p[2]))
        .arg(format!("-volume.port.grpc={}", p[3]))
        .arg(format!("-filer.port={}", p[4]))
        .arg(format!("-filer.port.grpc={}", p[5]))
        .arg(format!("-s3.port={}", p[6]))
        .arg(format!("-s3.port.grpc={}", p[7]))
        .arg(format!("-admin.port={}", p[8]))
        .arg(format!("-admin.port.grpc={}", p[9]))
        .args([
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
        ])
        .arg(format!("-bucket={BUCKET}"))
        // a static admin identity: requests must be signed with this key
        .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        .env_remove("S3_BUCKET")
        .current_dir(data_dir);

    // weed leaves unix sockets named after its ports in the temp directory
    let mut cleanup = Vec::new();
    if remove_data_on_exit {
        cleanup.push(data_dir.display().to_string());
    }
    let mut tmps = vec![PathBuf::from("/tmp"), std::env::temp_dir()];
    tmps.dedup();
    for t in &tmps {
        for port in p {
            cleanup.push(format!("{}/seaweedfs-*-{port}.sock", t.display()));
        }
    }
    let mut watched = Watched::spawn("weed mini", &cmd, &log, &cleanup, Duration::from_secs(2))?;

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let t0 = Instant::now();
    let mut last_err = String::from("no attempt");
    loop {
        if !watched.is_running() {
            let tail = watched.log_tail(30);
            drop(watched);
            bail!("weed mini exited during start-up; log:\n{tail}");
        }
        if t0.elapsed() > READY_TIMEOUT {
            let tail = watched.log_tail(30);
            drop(watched);
            bail!("SeaweedFS S3 not writable after {READY_TIMEOUT:?} ({last_err}); log:\n{tail}");
        }
        if port_open(p[6]) {
            match rt.block_on(probe(p[6])) {
                Ok(()) => break,
                Err(e) => last_err = format!("{e:#}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(rt);
    Ok(watched)
}

fn port_open(port: u16) -> bool {
    std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_millis(200),
    )
    .is_ok()
}

/// One signed write, read and delete in the bucket.
async fn probe(port: u16) -> Result<()> {
    let s3 = s3_builder(port)
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                .with_timeout(Duration::from_secs(3))
                .with_connect_timeout(Duration::from_secs(1)),
        )
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        .build()?;
    let key = ObjectPath::from(".rsagg-e2e/ready-probe");
    s3.put(&key, PutPayload::from_static(b"ready")).await?;
    let got = s3.get(&key).await?.bytes().await?;
    if got.as_ref() != b"ready" {
        bail!("probe read back {got:?}");
    }
    s3.delete(&key).await?;
    Ok(())
}
