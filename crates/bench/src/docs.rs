//! Document benchmark: rsagg-sitemap against resync (Python) on the same documents.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use md5::{Digest, Md5};
use rsagg_model::{
    Capability, Change, HashAlgorithm, HashValue, Hashes, Header, Link, Md, Mode, Root, UrlEntry,
    W3cDateTime,
};
use rsagg_sitemap::{
    DocumentReader, DocumentWriter, FsPartSink, ReadOptions, SplitOptions, SplitWriter,
};
use serde::{Deserialize, Serialize};

/// The two document shapes measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// One Change List with all entries (not split, as resync writes it).
    Changelist,
    /// A Resource List Index over parts of 50,000 entries.
    ResourcelistIndex,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Changelist => "changelist",
            Kind::ResourcelistIndex => "resourcelist-index",
        }
    }
}

/// Arguments of `docs`.
#[derive(Debug, clap::Args)]
pub struct DocsArgs {
    /// Entry counts.
    #[arg(long, value_delimiter = ',', default_value = "50000,1000000")]
    sizes: Vec<u64>,
    /// Runs per measurement (the median is reported).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Working directory for the documents (default: a fresh directory under the system temp).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Python interpreter with `resync` installed (default: the one `scripts/peers.sh install`
    /// sets up).
    #[arg(long, env = "RSAGG_BENCH_PYTHON")]
    python: Option<PathBuf>,
    /// Measure rsagg only.
    #[arg(long)]
    skip_resync: bool,
}

/// Arguments of one measured operation.
#[derive(Debug, clap::Args)]
pub struct OneArgs {
    /// Document shape.
    #[arg(long, value_enum)]
    kind: Kind,
    /// Entries.
    #[arg(long)]
    entries: u64,
    /// Document path (the index for `resourcelist-index`).
    #[arg(long)]
    path: PathBuf,
}

/// One measurement, as printed by each single-operation process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sample {
    tool: String,
    op: String,
    kind: String,
    entries: u64,
    seconds: f64,
    bytes: u64,
    peak_rss_kib: u64,
}

const T0: i64 = 1_357_171_200; // 2013-01-03T00:00:00Z

/// Entry `i`, identical to what the resync side builds (see crates/bench/py/resync_docbench.py).
fn entry(i: u64, kind: Kind) -> UrlEntry {
    let t = W3cDateTime::from_unix(T0 + i as i64, 0);
    let digest = Md5::digest(format!("res{i}").as_bytes());
    let mut md = Md {
        hash: Some(Hashes(vec![HashValue::from_bytes(
            HashAlgorithm::Md5,
            &digest,
        )])),
        length: Some(1000 + i % 1000),
        mime_type: Some("text/html".into()),
        ..Md::default()
    };
    if kind == Kind::Changelist {
        md.change = Some(match i % 3 {
            0 => Change::Created,
            1 => Change::Updated,
            _ => Change::Deleted,
        });
        md.datetime = Some(t);
    }
    UrlEntry {
        loc: format!("http://example.com/res/{i}"),
        lastmod: Some(t),
        md: Some(md),
        ..UrlEntry::default()
    }
}

fn header(kind: Kind) -> Header {
    let t0 = W3cDateTime::from_unix(T0, 0);
    let (cap, md) = match kind {
        Kind::Changelist => (
            Capability::ChangeList,
            Md {
                from: Some(t0),
                ..Md::default()
            },
        ),
        Kind::ResourcelistIndex => (
            Capability::ResourceList,
            Md {
                at: Some(t0),
                ..Md::default()
            },
        ),
    };
    Header {
        root: Root::Urlset,
        md: Some(Md {
            capability: Some(cap),
            ..md
        }),
        links: vec![Link::new("up", "http://example.com/capabilitylist.xml")],
    }
}

/// Peak resident set size of this process (VmHWM), in KiB.
fn peak_rss_kib() -> u64 {
    crate::procs::vm_hwm_kib(std::process::id())
}

fn file_url(path: &Path) -> String {
    format!("file://{}", path.display())
}

/// A stopwatch that only runs while writing: entry generation (md5, formatting) is excluded,
/// as it is on the resync side, where building the Resource objects is not timed.
struct Timer {
    total: Duration,
    since: Option<Instant>,
}

impl Timer {
    fn resume(&mut self) {
        self.since = Some(Instant::now());
    }
    fn pause(&mut self) {
        if let Some(s) = self.since.take() {
            self.total += s.elapsed();
        }
    }
}

const BATCH: u64 = 10_000;

/// Entries `first..first + BATCH` (capped at `n`): generated in batches while the timer is
/// paused, so memory stays bounded however many entries are written.
fn batch(first: u64, n: u64, kind: Kind) -> Vec<UrlEntry> {
    (first..(first + BATCH).min(n))
        .map(|i| entry(i, kind))
        .collect()
}

/// `rsagg-bench write`: writes the entries; only the writing is timed (see [`Timer`]).
pub async fn write_one(a: OneArgs) -> anyhow::Result<()> {
    let mut timer = Timer {
        total: Duration::ZERO,
        since: Some(Instant::now()),
    };
    let bytes = match a.kind {
        Kind::Changelist => {
            let f = tokio::fs::File::create(&a.path)
                .await
                .with_context(|| a.path.display().to_string())?;
            let mut w = DocumentWriter::start(f, &header(a.kind)).await?;
            for first in (0..a.entries).step_by(BATCH as usize) {
                timer.pause();
                let batch = batch(first, a.entries, a.kind);
                timer.resume();
                for e in &batch {
                    w.write_entry(e).await?;
                }
            }
            let (mut out, bytes) = w.finish().await?;
            tokio::io::AsyncWriteExt::shutdown(&mut out).await?;
            bytes
        }
        Kind::ResourcelistIndex => {
            let dir = a.path.parent().context("index path has no directory")?;
            let index_name = a
                .path
                .file_name()
                .context("index path has no file name")?
                .to_string_lossy()
                .into_owned();
            let stem = index_name.trim_end_matches(".xml").to_owned();
            let opts = SplitOptions::new(format!("{}/", file_url(dir)), index_name, stem);
            let mut w = SplitWriter::new(FsPartSink::new(dir), opts, header(a.kind))?;
            for first in (0..a.entries).step_by(BATCH as usize) {
                timer.pause();
                let batch = batch(first, a.entries, a.kind);
                timer.resume();
                for e in &batch {
                    w.write_entry(e).await?;
                }
            }
            let out = w.finish().await?;
            out.index_bytes + out.parts.iter().map(|p| p.bytes).sum::<u64>()
        }
    };
    timer.pause();
    print_sample("write", &a, timer.total.as_secs_f64(), bytes)
}

fn print_sample(op: &str, a: &OneArgs, seconds: f64, bytes: u64) -> anyhow::Result<()> {
    let s = Sample {
        tool: "rsagg".into(),
        op: op.into(),
        kind: a.kind.as_str().into(),
        entries: a.entries,
        seconds,
        bytes,
        peak_rss_kib: peak_rss_kib(),
    };
    println!("{}", serde_json::to_string(&s)?);
    Ok(())
}

/// Parses one document into typed entries with lenient validation; returns (entries, bytes).
async fn parse_file(
    path: &Path,
    mut on_entry: impl FnMut(&UrlEntry),
) -> anyhow::Result<(u64, u64)> {
    let f = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    let mut r = DocumentReader::open_blocking(
        f,
        ReadOptions::new(Mode::Lenient, path.display().to_string()),
    )
    .await?;
    let mut n = 0;
    // Matched by reference: the entry is used where the reader put it, not moved again.
    loop {
        match &r.next_entry().await {
            Ok(Some(e)) => on_entry(e),
            Ok(None) => break,
            Err(e) => bail!("{}: {e}", path.display()),
        }
        n += 1;
    }
    let t = r.tally();
    if t.errors > 0 {
        bail!(
            "{}: {} errors: {:?}",
            path.display(),
            t.errors,
            r.problems().first()
        );
    }
    Ok((n, t.bytes))
}

/// `rsagg-bench parse`: reads the document (and, for an index, every part it lists).
pub async fn parse_one(a: OneArgs) -> anyhow::Result<()> {
    let start = Instant::now();
    let (entries, bytes) = match a.kind {
        Kind::Changelist => parse_file(&a.path, |_| {}).await?,
        Kind::ResourcelistIndex => {
            let mut parts = Vec::new();
            let (_, mut bytes) = parse_file(&a.path, |e| parts.push(e.loc.clone())).await?;
            let mut total = 0;
            for loc in parts {
                let p = loc
                    .strip_prefix("file://")
                    .with_context(|| format!("part {loc} is not a file URL"))?;
                let (n, b) = parse_file(Path::new(p), |_| {}).await?;
                total += n;
                bytes += b;
            }
            (total, bytes)
        }
    };
    let seconds = start.elapsed().as_secs_f64();
    if entries != a.entries {
        bail!("parsed {entries} entries, expected {}", a.entries);
    }
    print_sample("parse", &a, seconds, bytes)
}

fn run_sample(cmd: &mut Command) -> anyhow::Result<Sample> {
    let out = cmd.output().with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = String::from_utf8_lossy(&out.stdout);
    let line = line.lines().last().unwrap_or_default();
    serde_json::from_str(line).with_context(|| format!("bad sample from {cmd:?}: {line}"))
}

fn median(mut v: Vec<Sample>) -> Sample {
    v.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let peak = v.iter().map(|s| s.peak_rss_kib).max().unwrap_or(0);
    let mut m = v[v.len() / 2].clone();
    m.peak_rss_kib = peak;
    m
}

pub(crate) fn default_python() -> PathBuf {
    if let Ok(v) = std::env::var("RSAGG_PEERS_VENV") {
        return Path::new(&v).join("bin/python");
    }
    let cache = std::env::var("RSAGG_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            Path::new(&std::env::var("HOME").unwrap_or_else(|_| "/root".into()))
                .join(".cache/rsagg")
        });
    cache.join("peers/venv/bin/python")
}

pub(crate) fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines().next().and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<u64>().ok())
            })
        })
        .map(|kib| format!("{:.0} GiB", kib as f64 / 1024.0 / 1024.0))
        .unwrap_or_default();
    format!("{cpu}, {cores} cores, {mem}")
}

/// `rsagg-bench docs`.
pub fn run(a: DocsArgs) -> anyhow::Result<()> {
    let me = std::env::current_exe()?;
    let script = crate::py_script("resync_docbench.py");
    let python = a.python.clone().unwrap_or_else(default_python);
    if !a.skip_resync && !python.exists() {
        bail!(
            "{} not found: run `bash scripts/peers.sh install` first, or pass --python / --skip-resync",
            python.display()
        );
    }
    let tmp = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("rsagg-bench-docs-{}", std::process::id())),
    };
    std::fs::create_dir_all(&tmp)?;
    println!(
        "machine: {}; runs per figure: {} (median; peak RSS is the maximum)",
        machine(),
        a.runs
    );
    println!(
        "{:<19} {:>9} {:<6} {:<7} {:>9} {:>9} {:>12} {:>10}",
        "document", "entries", "op", "tool", "seconds", "MB/s", "entries/s", "peak MiB"
    );
    let mut ratios = Vec::new();
    for &n in &a.sizes {
        for kind in [Kind::Changelist, Kind::ResourcelistIndex] {
            let case = tmp.join(format!("{}-{n}", kind.as_str()));
            let (ours, theirs_dir) = (case.join("rsagg"), case.join("resync"));
            let path = ours.join(format!("{}.xml", kind.as_str()));
            let theirs_path = theirs_dir.join(format!("{}.xml", kind.as_str()));
            let args = |op: &str, flag: &str| -> Vec<String> {
                [
                    op,
                    "--kind",
                    kind.as_str(),
                    "--entries",
                    &n.to_string(),
                    flag,
                ]
                .map(String::from)
                .to_vec()
            };
            for op in ["write", "parse"] {
                // A write starts from an empty directory (cleared untimed, for both tools), so
                // neither pays for the kernel freeing the previous run's file.
                let clear = |dir: &Path| -> anyhow::Result<()> {
                    if op == "write" {
                        let _ = std::fs::remove_dir_all(dir);
                    }
                    std::fs::create_dir_all(dir)?;
                    Ok(())
                };
                let mine = median(
                    (0..a.runs)
                        .map(|_| {
                            clear(&ours)?;
                            run_sample(Command::new(&me).args(args(op, "--path")).arg(&path))
                        })
                        .collect::<anyhow::Result<_>>()?,
                );
                print_row(&mine);
                if a.skip_resync {
                    continue;
                }
                // resync parses the very files rsagg wrote, and writes its own elsewhere.
                let (flag, target) = if op == "write" {
                    ("--out", &theirs_path)
                } else {
                    ("--path", &path)
                };
                let theirs = median(
                    (0..a.runs)
                        .map(|_| {
                            clear(&theirs_dir)?;
                            run_sample(
                                Command::new(&python)
                                    .arg(&script)
                                    .args(args(op, flag))
                                    .arg(target),
                            )
                        })
                        .collect::<anyhow::Result<_>>()?,
                );
                print_row(&theirs);
                let ratio = theirs.seconds / mine.seconds;
                println!(
                    "{:<19} {:>9} {:<6} ratio   rsagg is {ratio:.0}x faster",
                    kind.as_str(),
                    n,
                    op
                );
                ratios.push((kind, n, op, ratio, mine.peak_rss_kib));
            }
        }
    }
    if !a.skip_resync {
        println!(
            "\nsummary (targets: parse >= 100x resync, write >= 50x resync, peak memory for 1M entries < 64 MiB)"
        );
        for (kind, n, op, ratio, peak) in ratios {
            let target = if op == "parse" { 100.0 } else { 50.0 };
            let mem = if n >= 1_000_000 {
                format!(
                    ", rsagg peak {:.1} MiB {}",
                    peak as f64 / 1024.0,
                    if peak < 64 * 1024 {
                        "(< 64 MiB)"
                    } else {
                        "(OVER 64 MiB)"
                    }
                )
            } else {
                String::new()
            };
            println!(
                "  {:<19} {:>9} {:<6} {:>6.0}x {}{mem}",
                kind.as_str(),
                n,
                op,
                ratio,
                if ratio >= target {
                    "meets target"
                } else {
                    "BELOW target"
                }
            );
        }
    }
    if a.dir.is_none() {
        std::fs::remove_dir_all(&tmp)?;
    }
    Ok(())
}

fn print_row(s: &Sample) {
    let mb = s.bytes as f64 / 1e6;
    println!(
        "{:<19} {:>9} {:<6} {:<7} {:>9.3} {:>9.1} {:>12.0} {:>10.1}",
        s.kind,
        s.entries,
        s.op,
        s.tool,
        s.seconds,
        mb / s.seconds,
        s.entries as f64 / s.seconds,
        s.peak_rss_kib as f64 / 1024.0
    );
}
