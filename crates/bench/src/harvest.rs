//! Harvest benchmark: a baseline harvest of N small resources from a static upstream on
//! loopback, resources per second, side by side with the peers:
//!
//! - (a) `rsagg run --once` into a `file://` store against the stateless floor measured in the
//!   same run (GET + MD5/SHA-256 + write to a file, `harvest-get --write-dir`), target: rsagg's
//!   default configuration, whose run also publishes (a Resource Dump of every copy included),
//!   ≤ 2× the floor's seconds. `resync-sync --baseline` into a directory is measured beside it
//!   and its ratio printed, no longer a target (on 2 cores the floor itself is only ~12×
//!   resync-sync); a second rsagg row with `publish.resource_dump = false` is shown too. Each
//!   round runs the floor, then each tool once, and every ratio is the median of the rounds'
//!   ratios, so a machine whose load drifts compares figures taken seconds apart;
//! - (b) `rsagg run --once` into SeaweedFS (`weed mini`) against a plain concurrent S3 PUT of
//!   the same bodies to the same server, the ceiling on this machine (target: ≥ 50% of it).
//!
//! The upstream is nginx when it is installed, else `rsagg-bench static-server` (axum, every
//! file read into memory at start); its own ceiling (concurrent GETs of every resource) is
//! printed too, so a reader sees the upstream is not the bottleneck. Every measured operation
//! is its own process, timed from spawn to exit, its peak RSS read from `/proc/PID/status`
//! (VmHWM) while it runs.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use futures::StreamExt;
use md5::{Digest, Md5};
use rsagg_e2e::encode_document;
use rsagg_model::{
    Capability, HashAlgorithm, HashValue, Hashes, Header, Link, Md, Root, UrlEntry, W3cDateTime,
};

use crate::docs::{default_python, machine};
use crate::procs::{self, Measured};

/// Which static server serves the upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServerChoice {
    /// nginx when `nginx` is on the PATH, else the built-in server.
    Auto,
    /// nginx (fails when it is not installed).
    Nginx,
    /// `rsagg-bench static-server` (axum, files in memory).
    Builtin,
}

impl ServerChoice {
    /// Whether nginx serves: asked for, or `Auto` and `nginx -v` runs.
    pub(crate) fn nginx(self) -> bool {
        match self {
            ServerChoice::Nginx => true,
            ServerChoice::Builtin => false,
            ServerChoice::Auto => Command::new(nginx_bin())
                .arg("-v")
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success()),
        }
    }
}

/// Arguments of `harvest`.
#[derive(Debug, clap::Args)]
pub struct HarvestArgs {
    /// Resources in the upstream's Resource List.
    #[arg(long, default_value_t = 10_000)]
    resources: u64,
    /// Size of each resource, in bytes.
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Runs per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Working directory (default: a fresh directory under the system temp, removed at the
    /// end).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The `rsagg` binary (default: `rsagg` next to this executable, i.e.
    /// `$CARGO_TARGET_DIR/release/rsagg`; build it with `cargo build --release -p rsagg-cli`).
    #[arg(long, env = "RSAGG_BIN")]
    rsagg: Option<PathBuf>,
    /// The upstream's static server.
    #[arg(long, value_enum, default_value = "auto")]
    server: ServerChoice,
    /// Concurrent requests of the upstream-ceiling GET client.
    #[arg(long, default_value_t = 64)]
    get_concurrency: usize,
    /// Concurrent PUTs of the S3 ceiling; with several values each is measured and the
    /// fastest is the ceiling.
    #[arg(long, value_delimiter = ',', default_value = "64")]
    put_concurrency: Vec<usize>,
    /// TOML appended to rsagg's pipeline file (e.g. `[fetch]` limits); default: none, i.e.
    /// rsagg's defaults.
    #[arg(long)]
    pipeline_extra: Option<String>,
    /// TOML lines added to the pipeline's `[store]` (e.g. `spool_bytes = 0`).
    #[arg(long)]
    store_extra: Option<String>,
    /// `RSAGG_LOG` for rsagg (its stderr is kept in the working directory with `--keep`).
    #[arg(long)]
    rsagg_log: Option<String>,
    /// Skip (a)'s resync-sync side.
    #[arg(long)]
    skip_resync: bool,
    /// Skip (b) (SeaweedFS).
    #[arg(long)]
    skip_s3: bool,
    /// Keep the working directory (stores, logs, pipeline files).
    #[arg(long)]
    keep: bool,
}

/// Arguments of `static-server`.
#[derive(Debug, clap::Args)]
pub struct StaticServerArgs {
    /// Directory served at `/`.
    #[arg(long)]
    root: PathBuf,
    /// Port on 127.0.0.1 (0: any).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Read each file from disk at every request (a changing upstream), instead of once at
    /// start.
    #[arg(long)]
    live: bool,
}

/// Arguments of `harvest-get` (the upstream's ceiling).
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Upstream base URL, `http://127.0.0.1:PORT`.
    #[arg(long)]
    base: String,
    /// Resources `res/0 … res/N-1`.
    #[arg(long)]
    resources: u64,
    /// Expected size of each.
    #[arg(long)]
    size: usize,
    /// Concurrent requests.
    #[arg(long)]
    concurrency: usize,
    /// Also hash each body (MD5 and SHA-256, as every verified copy needs) and write it to
    /// `DIR/{i}`: the least a verifying harvester into a directory does, without state.
    #[arg(long, value_name = "DIR")]
    write_dir: Option<PathBuf>,
}

/// Arguments of `harvest-put` (the S3 ceiling; endpoint and credentials from `AWS_*`).
#[derive(Debug, clap::Args)]
pub struct PutArgs {
    /// The upstream tree; `res/N` are the bodies.
    #[arg(long)]
    tree: PathBuf,
    /// Resources.
    #[arg(long)]
    resources: u64,
    /// Bucket.
    #[arg(long)]
    bucket: String,
    /// Key prefix.
    #[arg(long)]
    prefix: String,
    /// Concurrent PUTs.
    #[arg(long)]
    concurrency: usize,
}

const T0: i64 = 1_357_171_200; // 2013-01-03T00:00:00Z

/// Body of resource `i`: distinct, printable, exactly `size` bytes.
pub(crate) fn body(i: u64, size: usize) -> Vec<u8> {
    let mut v = format!("resource {i}\n").into_bytes();
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while v.len() < size {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(b'a' + (x % 26) as u8);
    }
    v.truncate(size);
    v
}

pub(crate) fn md_cap(capability: Capability) -> Option<Md> {
    Some(Md {
        capability: Some(capability),
        ..Md::default()
    })
}

/// The Capability List of a generated upstream at `base` (`scale` and `fleet`): its Resource
/// List and Change List, up to its Source Description.
pub(crate) fn capability_list_of(base: &str) -> bytes::Bytes {
    rsagg_e2e::encode_document(
        &Header {
            root: Root::Urlset,
            md: md_cap(Capability::CapabilityList),
            links: vec![Link::new("up", format!("{base}/.well-known/resourcesync"))],
        },
        &[
            UrlEntry {
                loc: format!("{base}/resourcelist.xml"),
                md: md_cap(Capability::ResourceList),
                ..UrlEntry::default()
            },
            UrlEntry {
                loc: format!("{base}/changelist.xml"),
                md: md_cap(Capability::ChangeList),
                ..UrlEntry::default()
            },
        ],
    )
}

/// Writes the upstream: Source Description, Capability List, Resource List and `res/N`.
fn generate_tree(root: &Path, base: &str, n: u64, size: usize) -> anyhow::Result<()> {
    std::fs::create_dir_all(root.join(".well-known"))?;
    std::fs::create_dir_all(root.join("res"))?;
    let description = format!("{base}/.well-known/resourcesync");
    let caplist = format!("{base}/capabilitylist.xml");
    let reslist = format!("{base}/resourcelist.xml");
    let sd = encode_document(
        &Header {
            root: Root::Urlset,
            md: md_cap(Capability::Description),
            links: vec![],
        },
        &[UrlEntry {
            loc: caplist.clone(),
            md: md_cap(Capability::CapabilityList),
            ..UrlEntry::default()
        }],
    );
    std::fs::write(root.join(".well-known/resourcesync"), sd)?;
    let cl = encode_document(
        &Header {
            root: Root::Urlset,
            md: md_cap(Capability::CapabilityList),
            links: vec![Link::new("up", description)],
        },
        &[UrlEntry {
            loc: reslist,
            md: md_cap(Capability::ResourceList),
            ..UrlEntry::default()
        }],
    );
    std::fs::write(root.join("capabilitylist.xml"), cl)?;
    let mut entries = Vec::with_capacity(n as usize);
    for i in 0..n {
        let b = body(i, size);
        std::fs::write(root.join(format!("res/{i}")), &b)?;
        entries.push(UrlEntry {
            loc: format!("{base}/res/{i}"),
            lastmod: Some(W3cDateTime::from_unix(T0 + i as i64, 0)),
            md: Some(Md {
                hash: Some(Hashes(vec![HashValue::from_bytes(
                    HashAlgorithm::Md5,
                    &Md5::digest(&b),
                )])),
                length: Some(size as u64),
                ..Md::default()
            }),
            ..UrlEntry::default()
        });
    }
    let rl = encode_document(
        &Header {
            root: Root::Urlset,
            md: Some(Md {
                capability: Some(Capability::ResourceList),
                at: Some(W3cDateTime::from_unix(T0 + n as i64, 0)),
                ..Md::default()
            }),
            links: vec![Link::new("up", caplist)],
        },
        &entries,
    );
    std::fs::write(root.join("resourcelist.xml"), rl)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// measuring child processes
// ---------------------------------------------------------------------------------------------

/// The upstream server's process (0: none yet), whose CPU each measured run reads beside its
/// own: on 2 cores the upstream competes with the measured tool for the same cores.
static UPSTREAM_PID: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Runs `cmd` to its end ([`procs::measure`]), beside the upstream server.
fn measure(cmd: &mut Command) -> anyhow::Result<Measured> {
    procs::measure(cmd, UPSTREAM_PID.load(std::sync::atomic::Ordering::Relaxed))
}

/// What one measured run took.
#[derive(Debug, Clone, Copy)]
struct Figure {
    /// Wall seconds, spawn to exit.
    secs: f64,
    /// Peak RSS.
    peak_kib: u64,
    /// CPU seconds of the run (user + system).
    cpu: f64,
    /// CPU seconds of the upstream server meanwhile.
    upstream_cpu: f64,
}

impl From<&Measured> for Figure {
    fn from(m: &Measured) -> Self {
        Figure {
            secs: m.seconds,
            peak_kib: m.peak_kib,
            cpu: m.cpu,
            upstream_cpu: m.beside_cpu,
        }
    }
}

/// The median run (by wall time), with the peak RSS the maximum over all runs.
fn median(mut v: Vec<Figure>) -> Figure {
    v.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    let peak_kib = v.iter().map(|s| s.peak_kib).max().unwrap_or(0);
    Figure {
        peak_kib,
        ..v[v.len() / 2]
    }
}

pub(crate) fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// the upstream server
// ---------------------------------------------------------------------------------------------

pub(crate) struct Upstream {
    pub(crate) name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    nginx: bool,
}

impl Upstream {
    fn stop(&mut self) {
        // already stopped (and reaped): its PID may belong to another process by now
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if self.nginx {
            // SIGTERM to the master (it stops its workers); SIGKILL would orphan them.
            let _ = Command::new("kill")
                .args(["-TERM", &self.child.id().to_string()])
                .status();
        }
        drop(self.stdin.take()); // the built-in server exits at end of file on stdin
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.stop();
    }
}

fn wait_port(port: u16) -> anyhow::Result<()> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(10) {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("nothing listens on 127.0.0.1:{port} after 10 s")
}

pub(crate) fn start_nginx(root: &Path, work: &Path, port: u16) -> anyhow::Result<Upstream> {
    start_nginx_with(root, work, port, false)
}

/// nginx serving `root`; `changing`: files are rewritten while it runs, so it keeps no open
/// file cache (which would serve a rewritten file with its old length for up to a minute).
pub(crate) fn start_nginx_with(
    root: &Path,
    work: &Path,
    port: u16,
    changing: bool,
) -> anyhow::Result<Upstream> {
    let file_cache = if changing {
        "open_file_cache off;"
    } else {
        "open_file_cache max=100000 inactive=60s;"
    };
    let prefix = work.join("nginx");
    std::fs::create_dir_all(prefix.join("logs"))?;
    let conf = prefix.join("nginx.conf");
    let p = prefix.display();
    std::fs::write(
        &conf,
        format!(
            "worker_processes auto;\n\
             pid {p}/nginx.pid;\n\
             error_log {p}/logs/error.log warn;\n\
             events {{ worker_connections 4096; }}\n\
             http {{\n\
               access_log off;\n\
               sendfile on;\n\
               tcp_nopush on;\n\
               tcp_nodelay on;\n\
               keepalive_requests 1000000;\n\
               {file_cache}\n\
               client_body_temp_path {p}/body;\n\
               proxy_temp_path {p}/proxy;\n\
               fastcgi_temp_path {p}/fastcgi;\n\
               uwsgi_temp_path {p}/uwsgi;\n\
               scgi_temp_path {p}/scgi;\n\
               types {{ application/xml xml; }}\n\
               default_type application/octet-stream;\n\
               server {{\n\
                 listen 127.0.0.1:{port};\n\
                 root {root};\n\
                 location = /.well-known/resourcesync {{ types {{ }} default_type application/xml; }}\n\
               }}\n\
             }}\n",
            root = root.display(),
            file_cache = file_cache
        ),
    )?;
    let child = Command::new(nginx_bin())
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&conf)
        .args(["-g", "daemon off;"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawning nginx")?;
    let mut up = Upstream {
        name: String::new(),
        child,
        stdin: None,
        nginx: true,
    };
    wait_port(port)?;
    let version = Command::new(nginx_bin())
        .arg("-v")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_owned())
        .unwrap_or_default();
    up.name = format!("nginx ({version}, worker_processes auto, sendfile)");
    Ok(up)
}

pub(crate) fn start_builtin(root: &Path, port: u16) -> anyhow::Result<Upstream> {
    start_builtin_with(root, port, false)
}

/// The built-in server; `live` reads every file at each request (a changing upstream).
pub(crate) fn start_builtin_with(root: &Path, port: u16, live: bool) -> anyhow::Result<Upstream> {
    let me = std::env::current_exe()?;
    let mut child = Command::new(me)
        .args(["static-server", "--port", &port.to_string(), "--root"])
        .arg(root)
        .args(live.then_some("--live"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawning rsagg-bench static-server")?;
    let stdin = child.stdin.take();
    let mut line = String::new();
    BufReader::new(child.stdout.take().context("no stdout")?).read_line(&mut line)?;
    let mut up = Upstream {
        name: "rsagg-bench static-server (axum, files in memory, multi-threaded tokio)".into(),
        child,
        stdin,
        nginx: false,
    };
    if !line.starts_with("listening ") {
        up.stop();
        bail!("static-server did not start: {line:?}");
    }
    Ok(up)
}

/// `rsagg-bench static-server`: serves a directory from memory until stdin closes.
pub fn static_server(a: StaticServerArgs) -> anyhow::Result<()> {
    let mut files: HashMap<String, (Bytes, &'static str)> = HashMap::new();
    let mut stack = if a.live {
        Vec::new()
    } else {
        vec![a.root.clone()]
    };
    let root = a.root.clone();
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).with_context(|| dir.display().to_string())? {
            let e = e?;
            let path = e.path();
            if e.file_type()?.is_dir() {
                stack.push(path);
                continue;
            }
            let rel = path.strip_prefix(&a.root)?.to_string_lossy().into_owned();
            let ct = if rel.ends_with(".xml") || rel == ".well-known/resourcesync" {
                "application/xml"
            } else {
                "application/octet-stream"
            };
            files.insert(format!("/{rel}"), (Bytes::from(std::fs::read(&path)?), ct));
        }
    }
    let files = Arc::new(files);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        use axum::serve::ListenerExt;
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", a.port)).await?;
        println!("listening http://{}", listener.local_addr()?);
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        std::io::stdout().flush()?;
        // the parent holds our stdin: its end (or the parent's) stops the server
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            std::process::exit(0);
        });
        let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
            let files = files.clone();
            let root = root.clone();
            async move {
                use axum::response::IntoResponse;
                if a.live {
                    let rel = uri.path().trim_start_matches('/');
                    if rel.split('/').any(|s| s == ".." || s.is_empty()) {
                        return axum::http::StatusCode::NOT_FOUND.into_response();
                    }
                    let ct = if rel.ends_with(".xml") || rel == ".well-known/resourcesync" {
                        "application/xml"
                    } else {
                        "application/octet-stream"
                    };
                    return match tokio::fs::read(root.join(rel)).await {
                        Ok(b) => ([(axum::http::header::CONTENT_TYPE, ct)], b).into_response(),
                        Err(_) => axum::http::StatusCode::NOT_FOUND.into_response(),
                    };
                }
                match files.get(uri.path()) {
                    Some((b, ct)) => {
                        ([(axum::http::header::CONTENT_TYPE, *ct)], b.clone()).into_response()
                    }
                    None => axum::http::StatusCode::NOT_FOUND.into_response(),
                }
            }
        });
        axum::serve(listener, app).await?;
        anyhow::Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// the ceilings (child processes)
// ---------------------------------------------------------------------------------------------

fn multi_thread() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// `rsagg-bench harvest-get`: GETs every resource concurrently, checks its size.
pub fn get_all(a: GetArgs) -> anyhow::Result<()> {
    multi_thread()?.block_on(async {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(a.concurrency)
            .build()?;
        let start = Instant::now();
        let mut s = futures::stream::iter(0..a.resources)
            .map(|i| {
                let client = client.clone();
                let url = format!("{}/res/{i}", a.base);
                let file = a.write_dir.as_ref().map(|d| d.join(i.to_string()));
                async move {
                    let r = client.get(&url).send().await?.error_for_status()?;
                    let b = r.bytes().await?;
                    anyhow::ensure!(b.len() == a.size, "{url}: {} bytes", b.len());
                    if let Some(file) = file {
                        use md5::Digest;
                        let digests = (md5::Md5::digest(&b), sha2::Sha256::digest(&b));
                        std::hint::black_box(digests);
                        // Written on the worker itself: the cheapest way there is.
                        std::fs::write(&file, &b)?;
                    }
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(a.concurrency.max(1));
        while let Some(r) = s.next().await {
            r?;
        }
        println!(
            "{}",
            serde_json::json!({"seconds": start.elapsed().as_secs_f64()})
        );
        anyhow::Ok(())
    })
}

/// `rsagg-bench harvest-put`: PUTs every body concurrently (plain, unconditional PUTs).
pub fn put_all(a: PutArgs) -> anyhow::Result<()> {
    use object_store::aws::AmazonS3Builder;
    use object_store::{ClientOptions, ObjectStoreExt, PutPayload, path::Path as ObjectPath};
    let bodies: Vec<Bytes> = (0..a.resources)
        .map(|i| std::fs::read(a.tree.join(format!("res/{i}"))).map(Bytes::from))
        .collect::<Result<_, _>>()?;
    multi_thread()?.block_on(async {
        let s3 = Arc::new(
            AmazonS3Builder::from_env()
                .with_bucket_name(&a.bucket)
                .with_client_options(
                    ClientOptions::new()
                        .with_allow_http(true)
                        .with_pool_max_idle_per_host(a.concurrency),
                )
                .build()?,
        );
        let start = Instant::now();
        let mut s = futures::stream::iter(bodies.into_iter().enumerate())
            .map(|(i, b)| {
                let s3 = s3.clone();
                let key = ObjectPath::from(format!("{}/res/{i}", a.prefix));
                async move { s3.put(&key, PutPayload::from_bytes(b)).await }
            })
            .buffer_unordered(a.concurrency.max(1));
        while let Some(r) = s.next().await {
            r?;
        }
        println!(
            "{}",
            serde_json::json!({"seconds": start.elapsed().as_secs_f64()})
        );
        anyhow::Ok(())
    })
}

// ---------------------------------------------------------------------------------------------
// the driver
// ---------------------------------------------------------------------------------------------

fn rsagg_binary(a: &HarvestArgs) -> anyhow::Result<PathBuf> {
    rsagg_binary_at(a.rsagg.as_deref())
}

/// The `rsagg` binary: `given`, else `rsagg` next to this executable; an error saying how to
/// build it when it is missing.
pub(crate) fn rsagg_binary_at(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    let p = match given {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()?
            .parent()
            .context("executable has no directory")?
            .join("rsagg"),
    };
    if !p.is_file() {
        bail!(
            "{} not found: run `cargo build --release -p rsagg-cli` (same CARGO_TARGET_DIR) or pass --rsagg",
            p.display()
        );
    }
    Ok(p)
}

/// `(created, failed)` summed over the upstreams of rsagg's `--json` report.
fn rsagg_counts(stdout: &str) -> anyhow::Result<(u64, u64, Vec<String>)> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON report on stdout")?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let ups = v["upstreams"].as_array().context("no upstreams")?;
    let sum = |k: &str| ups.iter().map(|u| u[k].as_u64().unwrap_or(0)).sum::<u64>();
    let errors = ups
        .iter()
        .filter_map(|u| u["error"].as_str().map(str::to_owned))
        .collect();
    Ok((sum("created"), sum("failed"), errors))
}

struct RsaggRun<'a> {
    bin: &'a Path,
    work: &'a Path,
    base: &'a str,
    extra: Option<&'a str>,
    store_extra: Option<&'a str>,
    log: Option<&'a str>,
    n: u64,
}

/// What (a)'s second rsagg row appends to the pipeline: no Resource Dump, the one publish
/// step that is O(collection) on a first run and has no counterpart in resync-sync.
const NO_DUMP: &str = "[publish]\nresource_dump = false\n";

impl RsaggRun<'_> {
    /// One `rsagg run --once --json` into `store`; checks created = N, failed = 0.
    fn run(&self, label: &str, store: &str, env: &[(String, String)]) -> anyhow::Result<Figure> {
        let pipeline = self.work.join(format!("pipeline-{label}.toml"));
        std::fs::write(
            &pipeline,
            crate::single_upstream_pipeline(
                "bench",
                store,
                self.base,
                self.store_extra,
                self.extra,
            ),
        )?;
        let mut cmd = Command::new(self.bin);
        cmd.arg("run")
            .arg(&pipeline)
            .args(["--once", "--json"])
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE");
        if let Some(l) = self.log {
            cmd.env("RSAGG_LOG", l);
        }
        let m = measure(&mut cmd)?;
        std::fs::write(self.work.join(format!("rsagg-{label}.stderr")), &m.stderr)?;
        // The report, with the seconds of each publish step (`publish.seconds`).
        std::fs::write(self.work.join(format!("rsagg-{label}.json")), &m.stdout)?;
        let counts = rsagg_counts(&m.stdout);
        match counts {
            Ok((created, 0, _)) if m.success && created == self.n => Ok(Figure::from(&m)),
            other => bail!(
                "rsagg run ({label}, store {store}) did not harvest {} resources: exit {}, \
                 report {other:?}\nstdout: {}\nstderr (tail):\n{}",
                self.n,
                if m.success { "0" } else { "non-zero" },
                tail(&m.stdout, 5),
                tail(&m.stderr, 30)
            ),
        }
    }
}

fn count_files(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).count() as u64)
        .unwrap_or(0)
}

fn resync_run(
    resync: &Path,
    work: &Path,
    base: &str,
    label: &str,
    n: u64,
) -> anyhow::Result<Figure> {
    let cwd = work.join(format!("resync-cwd-{label}"));
    let dest = work.join(format!("resync-dest-{label}"));
    std::fs::create_dir_all(&cwd)?;
    let m = measure(
        Command::new(resync)
            .args(["--baseline", "--noauth", base])
            .arg(&dest)
            .current_dir(&cwd),
    )?;
    let out = format!("{}\n{}", m.stdout, m.stderr);
    let files = count_files(&dest.join("res"));
    let created = format!("created={n}");
    if !out.contains("Status:") || !out.contains(&created) || files != n {
        bail!(
            "resync-sync ({label}) did not sync {n} resources ({files} files in {}):\n{}",
            dest.display(),
            tail(&out, 20)
        );
    }
    // removed with the working directory at the end, not here: see `fs_type`
    Ok(Figure::from(&m))
}

/// The file system type of `dir` (`stat -f`), for the header: on ext4 without a journal,
/// creating a file costs more the more inodes were deleted nearby in the last minutes (the
/// allocator skips recently deleted inodes), so this benchmark deletes nothing until its end.
pub(crate) fn fs_type(dir: &Path) -> String {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_to_string("/proc/mounts")
        .ok()
        .and_then(|m| {
            m.lines()
                .filter_map(|l| {
                    let mut f = l.split_whitespace();
                    let (_, point, ty) = (f.next()?, f.next()?, f.next()?);
                    dir.starts_with(point)
                        .then(|| (point.len(), format!("{ty} on {point}")))
                })
                .max_by_key(|(len, _)| *len)
                .map(|(_, s)| s)
        })
        .unwrap_or_else(|| "unknown file system".into())
}

fn ceiling_run(cmd: &mut Command, what: &str) -> anyhow::Result<Figure> {
    let m = measure(cmd)?;
    if !m.success {
        bail!(
            "{what} failed:\n{}\n{}",
            tail(&m.stdout, 5),
            tail(&m.stderr, 20)
        );
    }
    Ok(Figure::from(&m))
}

/// (a)'s target: rsagg's default run at most this many times the floor's seconds.
const FLOOR_TARGET: f64 = 2.0;

/// The seconds of (a)'s rounds: round `r` of each is measured one after the other, the floor
/// first.
struct Rounds {
    floor: Vec<f64>,
    default: Vec<f64>,
    no_dump: Option<Vec<f64>>,
    resync: Option<Vec<f64>>,
}

/// The median over the rounds of `num[r] / den[r]`.
fn median_ratio(num: &[f64], den: &[f64]) -> f64 {
    let mut r: Vec<f64> = num.iter().zip(den).map(|(n, d)| n / d).collect();
    r.sort_by(f64::total_cmp);
    r.get(r.len() / 2).copied().unwrap_or(f64::NAN)
}

/// (a)'s verdict lines: rsagg (default) / floor against [`FLOOR_TARGET`], with resync-sync's
/// ratios beside it (for reference, no target), then the row without the Resource Dump for
/// reference. Each ratio is the median of the ratios of the rounds, each taken within
/// seconds, rather than a ratio of medians taken minutes apart: on a shared machine the load
/// drifts between the first and the last run of a figure.
fn floor_verdict(r: &Rounds) -> Vec<String> {
    let ratio = median_ratio(&r.default, &r.floor);
    let beside = r
        .resync
        .as_ref()
        .map(|t| {
            format!(
                "; resync-sync/floor = {:.1}x, rsagg is {:.1}x faster than resync-sync \
                 (for reference, no target)",
                median_ratio(t, &r.floor),
                median_ratio(t, &r.default)
            )
        })
        .unwrap_or_default();
    let mut lines = vec![format!(
        "(a) rsagg (default)/floor = {ratio:.2}x (target <={FLOOR_TARGET}x): {}{beside}",
        if ratio <= FLOOR_TARGET {
            "meets target"
        } else {
            "ABOVE target"
        }
    )];
    if let Some(m) = &r.no_dump {
        lines.push(format!(
            "(a) rsagg (resource_dump = false)/floor = {:.2}x (for reference; the target is \
             judged on the default row)",
            median_ratio(m, &r.floor)
        ));
    }
    lines
}

fn row(case: &str, tool: &str, n: u64, f: Figure) {
    println!(
        "{case:<20} {tool:<30} {:>9.3} {:>12.0} {:>10.1} {:>7.2} {:>9.2}",
        f.secs,
        n as f64 / f.secs,
        f.peak_kib as f64 / 1024.0,
        f.cpu,
        f.upstream_cpu
    );
}

/// What bounds a row's wall time on this machine: the CPU it and the upstream used, spread
/// over every core. A run that needs more CPU than the floor cannot be as fast as the floor
/// once the cores are saturated, whatever it overlaps.
fn cpu_bound(tool: &str, f: &Figure, cores: usize) -> String {
    let total = f.cpu + f.upstream_cpu;
    format!(
        "{tool}: {:.2} s CPU + upstream {:.2} s = {total:.2} s on {cores} cores: wall >= {:.2} s \
         (measured {:.2} s)",
        f.cpu,
        f.upstream_cpu,
        total / cores as f64,
        f.secs
    )
}

/// `rsagg-bench harvest`.
pub fn run(a: HarvestArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        a.runs > 0 && a.resources > 0,
        "--runs and --resources must be > 0"
    );
    let bin = rsagg_binary(&a)?;
    let me = std::env::current_exe()?;
    let venv_bin = default_python()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let resync = venv_bin.join("resync-sync");
    if !a.skip_resync && !resync.is_file() {
        bail!(
            "{} not found: run `bash scripts/peers.sh install` first, or pass --skip-resync",
            resync.display()
        );
    }
    let work = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("rsagg-bench-harvest-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work)?;
    let n = a.resources;

    // the upstream
    let port = rsagg_e2e::free_ports(1)?[0];
    let base = format!("http://127.0.0.1:{port}");
    let tree = work.join("www");
    generate_tree(&tree, &base, n, a.size)?;
    let use_nginx = a.server.nginx();
    let mut upstream = if use_nginx {
        start_nginx(&tree, &work, port)?
    } else {
        start_builtin(&tree, port)?
    };
    UPSTREAM_PID.store(upstream.child.id(), std::sync::atomic::Ordering::Relaxed);

    println!(
        "machine: {}; runs per figure: {} (median; peak RSS is the maximum)",
        machine(),
        a.runs
    );
    println!(
        "{n} resources of {} bytes; upstream {base}: {}{}",
        a.size,
        upstream.name,
        if use_nginx {
            ""
        } else {
            " (nginx not installed)"
        }
    );
    println!(
        "working directory {} ({}); every figure is one process timed from spawn to exit",
        work.display(),
        fs_type(&work)
    );
    println!(
        "{:<20} {:<30} {:>9} {:>12} {:>10} {:>7} {:>9}",
        "case", "tool", "seconds", "resources/s", "peak MiB", "cpu s", "upstr. s"
    );

    let result = (|| -> anyhow::Result<Vec<String>> {
        let mut summary = Vec::new();
        // `harvest-get` against the upstream: the GET ceiling, and with `--write-dir` the floor.
        let get_cmd = || {
            let mut c = Command::new(&me);
            c.args(["harvest-get", "--base", &base, "--resources"])
                .arg(n.to_string())
                .arg("--size")
                .arg(a.size.to_string())
                .arg("--concurrency")
                .arg(a.get_concurrency.to_string());
            c
        };
        let get = median(
            (0..a.runs)
                .map(|_| ceiling_run(&mut get_cmd(), "upstream GET ceiling"))
                .collect::<anyhow::Result<_>>()?,
        );
        row(
            "upstream ceiling",
            &format!("GET x{} (reqwest)", a.get_concurrency),
            n,
            get,
        );
        // The floor is measured in the rounds of (a), each beside the rsagg runs it is
        // compared with: on a shared machine the load drifts, and a ratio of figures taken
        // minutes apart measures the drift (see `floor_verdict`).
        let floor_cmd = |r: usize| -> anyhow::Result<Figure> {
            let dir = work.join(format!("floor-{r}"));
            std::fs::create_dir_all(&dir)?;
            ceiling_run(
                get_cmd().arg("--write-dir").arg(&dir),
                "GET + hash + write floor",
            )
        };

        let rs = RsaggRun {
            bin: &bin,
            work: &work,
            base: &base,
            extra: a.pipeline_extra.as_deref(),
            store_extra: a.store_extra.as_deref(),
            log: a.rsagg_log.as_deref(),
            n,
        };

        // (a) file:// store vs resync-sync into a directory: rsagg as configured (its run
        // publishes, a first Resource Dump included), and without the Resource Dump (unless
        // `--pipeline-extra` has a `[publish]` table of its own).
        let no_dump_extra = format!("{}\n{NO_DUMP}", a.pipeline_extra.as_deref().unwrap_or(""));
        let no_dump = (!a
            .pipeline_extra
            .as_deref()
            .is_some_and(|e| e.contains("[publish]")))
        .then(|| RsaggRun {
            extra: Some(&no_dump_extra),
            ..rs
        });
        let mut mine = Vec::new();
        let mut mine_no_dump = Vec::new();
        let mut theirs = Vec::new();
        let mut floors = Vec::new();
        for r in 0..a.runs {
            floors.push(floor_cmd(r)?);
            let store = work.join(format!("store-a-{r}"));
            std::fs::create_dir_all(&store)?;
            mine.push(rs.run(
                &format!("a-{r}"),
                &format!("file://{}", store.display()),
                &[],
            )?);
            if let Some(no_dump) = &no_dump {
                let store = work.join(format!("store-a-nodump-{r}"));
                std::fs::create_dir_all(&store)?;
                mine_no_dump.push(no_dump.run(
                    &format!("a-nodump-{r}"),
                    &format!("file://{}", store.display()),
                    &[],
                )?);
            }
            if !a.skip_resync {
                theirs.push(resync_run(&resync, &work, &base, &format!("a-{r}"), n)?);
            }
        }
        let secs = |v: &[Figure]| v.iter().map(|m| m.secs).collect::<Vec<_>>();
        let rounds = Rounds {
            floor: secs(&floors),
            default: secs(&mine),
            no_dump: (!mine_no_dump.is_empty()).then(|| secs(&mine_no_dump)),
            resync: (!theirs.is_empty()).then(|| secs(&theirs)),
        };
        let (floor, default) = (median(floors), median(mine));
        row(
            "floor (no state)",
            &format!("GET x{} + md5/sha256 + file", a.get_concurrency),
            n,
            floor,
        );
        row(
            "(a) file:// store",
            "rsagg run --once (default)",
            n,
            default,
        );
        if !mine_no_dump.is_empty() {
            let m = median(mine_no_dump);
            row("(a) file:// store", "rsagg, resource_dump = false", n, m);
        }
        if !theirs.is_empty() {
            let t = median(theirs);
            row("(a) directory", "resync-sync --baseline", n, t);
        }
        for line in floor_verdict(&rounds) {
            println!("{line}");
            summary.push(line);
        }
        // What bounds (a) on this machine: the CPU of each side, spread over the cores.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for (tool, f) in [("floor", &floor), ("rsagg (default)", &default)] {
            let line = format!("(a) {}", cpu_bound(tool, f, cores));
            println!("{line}");
            summary.push(line);
        }

        // (b) SeaweedFS: rsagg vs plain concurrent PUTs
        if !a.skip_s3 {
            let sw = rsagg_e2e::Seaweed::start().context("starting SeaweedFS")?;
            let weed_pid = sw.pid();
            let env = sw.env();
            let bucket = sw.bucket().to_owned();
            let mut mine = Vec::new();
            let mut puts: Vec<Vec<Figure>> = vec![Vec::new(); a.put_concurrency.len()];
            for r in 0..a.runs {
                let prefix = format!("harvest-{}-{r}", std::process::id());
                mine.push(rs.run(&format!("b-{r}"), &sw.store_url(&prefix), &env)?);
                for (j, &c) in a.put_concurrency.iter().enumerate() {
                    puts[j].push(ceiling_run(
                        Command::new(&me)
                            .arg("harvest-put")
                            .arg("--tree")
                            .arg(&tree)
                            .arg("--resources")
                            .arg(n.to_string())
                            .args(["--bucket", &bucket, "--prefix"])
                            .arg(format!("ceiling-{}-{r}-{c}", std::process::id()))
                            .arg("--concurrency")
                            .arg(c.to_string())
                            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                            .env_remove("AWS_SESSION_TOKEN"),
                        "S3 PUT ceiling",
                    )?);
                }
            }
            drop(sw);
            let mine = median(mine);
            row("(b) SeaweedFS", "rsagg run --once", n, mine);
            let mut best: Option<Figure> = None;
            for (j, &c) in a.put_concurrency.iter().enumerate() {
                let m = median(std::mem::take(&mut puts[j]));
                row(
                    "(b) SeaweedFS",
                    &format!("S3 PUT x{c} (object_store)"),
                    n,
                    m,
                );
                if best.is_none_or(|b| m.secs < b.secs) {
                    best = Some(m);
                }
            }
            let pct = 100.0 * best.map_or(f64::NAN, |b| b.secs) / mine.secs;
            let line = format!(
                "(b) rsagg/S3 PUT = {pct:.0}% (target >=50%): {}",
                if pct >= 50.0 {
                    "meets target"
                } else {
                    "BELOW target"
                }
            );
            println!("{line}");
            summary.push(line);
            let alive = std::path::Path::new(&format!("/proc/{weed_pid}")).exists();
            if alive {
                eprintln!("warning: weed (pid {weed_pid}) still running after stop");
            }
        }
        Ok(summary)
    })();
    upstream.stop();
    let summary = result?;
    if !summary.is_empty() {
        println!("\nsummary");
        for l in summary {
            println!("  {l}");
        }
    }
    if a.dir.is_none() && !a.keep {
        std::fs::remove_dir_all(&work)?;
    } else {
        println!("working directory kept: {}", work.display());
    }
    Ok(())
}

/// nginx from `PATH`, else Debian's `/usr/sbin/nginx` (not on an ordinary user's `PATH`).
pub(crate) fn nginx_bin() -> PathBuf {
    let on_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("nginx").is_file()))
        .unwrap_or(false);
    if !on_path && Path::new("/usr/sbin/nginx").is_file() {
        PathBuf::from("/usr/sbin/nginx")
    } else {
        PathBuf::from("nginx")
    }
}

#[cfg(test)]
mod tests {
    use super::{Rounds, floor_verdict};

    #[test]
    fn verdict_is_the_median_ratio_to_the_floor_with_resync_beside_it() {
        // Round 2 ran under load (both slower): per-round ratios do not see it.
        let r = Rounds {
            floor: vec![0.4, 0.4, 1.0],
            default: vec![0.8, 0.9, 2.0],
            no_dump: Some(vec![0.6, 0.6, 1.5]),
            resync: Some(vec![4.8, 5.2, 12.0]),
        };
        let l = floor_verdict(&r);
        assert_eq!(l.len(), 2);
        assert!(
            l[0].starts_with("(a) rsagg (default)/floor = 2.00x (target <=2x): meets target"),
            "{}",
            l[0]
        );
        assert!(l[0].contains("resync-sync/floor = 12.0x"), "{}", l[0]);
        assert!(l[0].contains("6.0x faster than resync-sync"), "{}", l[0]);
        assert!(l[1].contains("= 1.50x"), "{}", l[1]);
        let r = Rounds {
            floor: vec![0.4],
            default: vec![1.08],
            no_dump: None,
            resync: None,
        };
        assert_eq!(
            floor_verdict(&r),
            ["(a) rsagg (default)/floor = 2.70x (target <=2x): ABOVE target"]
        );
    }
}
