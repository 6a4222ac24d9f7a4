//! OAI-PMH harvest benchmark: rsagg's harvest of an OAI-PMH repository beside Sickle's (the
//! common Python OAI-PMH harvester, PyPI `Sickle`), on the same provider, in one run.
//!
//! The repository is a JSON file of N Dublin Core records (about 1 KB of metadata each, second
//! granularity, deletions declared persistent) served by pyoai's data provider
//! (`scripts/peers/oai_provider.py`, started through [`rsagg_e2e::OaiProvider`]) on a free
//! loopback port: the same provider and the same pages for both harvesters, so the figures
//! differ only by the harvester. One provider serves every run, started once; its start
//! answers `Identify`, which loads the JSON, so no run pays for that.
//!
//! Each round runs rsagg, then Sickle, each a fresh process timed from spawn to exit with its
//! peak RSS and CPU (`procs.rs`), as the other benches do:
//! - rsagg: the release binary's `run --once --json` on a pipeline of that one upstream
//!   (`kind = "oai-pmh"`) into a fresh `file://` store; its report must say N created and
//!   nothing failed. Its run also publishes (Resource List, Change List, Resource Dump): that
//!   is what `run --once` does, and its report's `publish.seconds.total` is printed beside;
//! - Sickle: `py/sickle_harvest.py` from the peers' venv, which iterates `ListRecords` and
//!   writes each record's metadata to a file, as a typical Python harvester does; it must
//!   write N files.
//!
//! The provider is Python too, one process and one core under the GIL: its CPU during each
//! run is read from `/proc` and printed, and a run whose provider was busy most of the wall
//! time is called provider-bound, since its records/s then measure the provider more than the
//! harvester. Before the runs the provider's own time for a first and a few resumed pages is
//! measured: pages times a page is about what a harvest asking one page after the other needs
//! of it, printed before the runs so that a run the provider makes impractical is seen before
//! it starts (a provider that selected and sorted the whole repository for every page took
//! 2 s a page at 100,000 records, 30 to 45 minutes a harvest).
//! The requests the provider counted per verb (`GET /counts`) are printed for each side.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use rsagg_e2e::{OaiOptions, OaiProvider};
use rsagg_model::W3cDateTime;
use serde::{Deserialize, Serialize};

use crate::docs::{default_python, machine};
use crate::harvest::{fs_type, rsagg_binary_at, tail};
use crate::oai_records::{DC_CLOSE, DC_OPEN, GIVEN, METADATA_BYTES, Rng, SURNAMES, T0, WORDS};
use crate::procs::{self, Measured};

/// pyoai's own page size (`resumption_batch_size`), taken with `--page-size 0`.
const PYOAI_DEFAULT_PAGE: usize = 10;

/// A run whose provider was busy at least this share of its wall time is provider-bound.
const PROVIDER_BOUND: f64 = 0.8;

/// Arguments of `oai`.
#[derive(Debug, clap::Args)]
pub struct OaiArgs {
    /// Records in the repository (all present; deletions are declared persistent).
    #[arg(long, default_value_t = 10_000)]
    records: u64,
    /// Records per `ListRecords` page (the provider's resumption batch): 100, a realistic
    /// provider's page, by default; 0 takes pyoai's default (10).
    #[arg(long, default_value_t = 100)]
    page_size: usize,
    /// Rounds, each rsagg then Sickle (the median of each is reported).
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
    /// Python interpreter with Sickle installed (default: the peers' venv of
    /// `scripts/peers.sh install`).
    #[arg(long, env = "RSAGG_BENCH_PYTHON")]
    python: Option<PathBuf>,
    /// Measure the provider alone (a first and a resumed `ListRecords` page) and stop: what
    /// any harvest of N records needs at least, before committing to the runs.
    #[arg(long)]
    provider_only: bool,
    /// Keep the working directory (repository, stores, harvested files, logs, reports).
    #[arg(long)]
    keep: bool,
    /// The provider: `generated` (records computed from their position, `rsagg-bench
    /// oai-provider` in a process of its own; cheap enough for 10^6 records) or `pyoai`
    /// (pyoai 2.5.0 over a JSON repository, `scripts/peers/oai_provider.py`).
    #[arg(long, value_enum, default_value_t = ProviderKind::Generated)]
    provider: ProviderKind,
    /// Leave Sickle out (rsagg's figures alone, e.g. for profiling).
    #[arg(long)]
    no_sickle: bool,
    /// Leave out the kill-and-resume round (generated provider only): a harvest into a fresh
    /// store SIGKILLed once the provider has served half the records, then run again; the
    /// provider counts the pages and records it serves a second time.
    #[arg(long)]
    no_kill: bool,
    /// Leave out the incremental round (generated provider only): after a complete harvest,
    /// `--change` records get a new version and the datestamp now, and rsagg runs again.
    #[arg(long)]
    no_incremental: bool,
    /// Records changed before the incremental round.
    #[arg(long, default_value_t = 100)]
    change: u64,
}

/// Which provider `oai` harvests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProviderKind {
    Generated,
    Pyoai,
}

// ---------------------------------------------------------------------------------------------
// the repository
// ---------------------------------------------------------------------------------------------

/// One record of the JSON repository, in the format of `scripts/peers/oai_provider.py`.
#[derive(Debug, Serialize, Deserialize)]
struct RepoRecord {
    identifier: String,
    datestamp: String,
    sets: Vec<String>,
    deleted: bool,
    /// Dublin Core elements, each a list of values (pyoai's metadata map).
    dc: BTreeMap<String, Vec<String>>,
}

/// `YYYY-MM-DDThh:mm:ssZ` of record `i`: one second apart, so every datestamp is distinct
/// at the repository's granularity.
fn datestamp(i: u64) -> String {
    W3cDateTime::from_unix(T0 + i as i64, 0).to_string()
}

/// The length of a record's `<oai_dc:dc>` element as a harvester takes it out of a pyoai
/// page: the start tag with its namespace declarations, one `<dc:NAME>value</dc:NAME>` per
/// value, the end tag.
fn metadata_len(dc: &BTreeMap<String, Vec<String>>) -> usize {
    DC_OPEN.len()
        + DC_CLOSE.len()
        + dc.iter()
            .map(|(name, values)| {
                values
                    .iter()
                    .map(|v| 2 * ("dc:".len() + name.len()) + 5 + v.len())
                    .sum::<usize>()
            })
            .sum::<usize>()
}

/// Record `i`: a title, two creators, three subjects, a publisher, a date, a type, a format,
/// an identifier, a language, rights, and a description grown word by word until the
/// metadata reaches [`METADATA_BYTES`].
fn record(i: u64) -> RepoRecord {
    let mut rng = Rng::new(i);
    let date = datestamp(i);
    let mut dc: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut put = |k: &str, v: Vec<String>| dc.insert(k.to_owned(), v);
    let title = rng.words(6);
    put("title", vec![format!("{title} ({i})")]);
    let creators = (0..2)
        .map(|_| format!("{}, {}", rng.pick(&SURNAMES), rng.pick(&GIVEN)))
        .collect();
    put("creator", creators);
    let subjects = (0..3).map(|_| rng.words(2)).collect();
    put("subject", subjects);
    put("publisher", vec!["rsagg bench repository".into()]);
    put("date", vec![date[..10].to_owned()]);
    put("type", vec!["Text".into()]);
    put("format", vec!["application/pdf".into()]);
    put(
        "identifier",
        vec![format!("http://repository.example.org/item/{i}")],
    );
    put("language", vec!["en".into()]);
    put("rights", vec!["CC BY 4.0".into()]);
    let mut description = rng.words(1);
    dc.insert("description".into(), vec![description.clone()]);
    while metadata_len(&dc) < METADATA_BYTES {
        description.push(' ');
        description.push_str(rng.pick(&WORDS));
        dc.insert("description".into(), vec![description.clone()]);
    }
    RepoRecord {
        identifier: format!("oai:bench.example.org:{i}"),
        datestamp: date,
        sets: vec![format!("collection:{}", i % 10)],
        deleted: false,
        dc,
    }
}

/// Writes the JSON repository of `n` records (streamed: 100,000 records are ~62 MiB).
fn write_repository(path: &Path, n: u64) -> anyhow::Result<()> {
    let mut w = BufWriter::new(
        std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?,
    );
    write!(
        w,
        "{{\"name\": \"rsagg-bench OAI-PMH repository\", \
         \"granularity\": \"YYYY-MM-DDThh:mm:ssZ\", \"deletedRecord\": \"persistent\", \
         \"earliestDatestamp\": \"{}\", \"records\": [",
        datestamp(0)
    )?;
    for i in 0..n {
        if i > 0 {
            w.write_all(b",\n")?;
        }
        serde_json::to_writer(&mut w, &record(i))?;
    }
    w.write_all(b"]}\n")?;
    w.flush()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// the provider
// ---------------------------------------------------------------------------------------------

/// The provider's Python process (not its watchdog shell, whose command line names the same
/// script and port): its CPU is read around each run. `OaiProvider` does not say its PID, so
/// it is found by its command line, unique by its port.
fn provider_pid(port: u16) -> Option<u32> {
    let port_arg = format!("--port={port}");
    procfs::process::all_processes()
        .ok()?
        .filter_map(Result::ok)
        .find(|p| {
            p.cmdline().is_ok_and(|c| {
                c.get(1).is_some_and(|s| s.ends_with("oai_provider.py")) && c.contains(&port_arg)
            })
        })
        .map(|p| p.pid as u32)
}

/// The `resumptionToken` of a `ListRecords` page, `None` at the end of the list (no token or
/// an empty one, section 3.5).
fn resumption_token(page: &str) -> Option<String> {
    let rest = &page[page.find("<resumptionToken")?..];
    let open = rest.find('>')?;
    if rest[..open].ends_with('/') {
        return None;
    }
    let body = &rest[open + 1..];
    let token = body[..body.find("</resumptionToken>")?]
        .trim()
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&");
    (!token.is_empty()).then_some(token)
}

/// Resumed pages the provider-alone probe times (their median is taken): one page's time
/// varies by a fifth from one request to the next on a shared machine.
const PROBE_PAGES: usize = 3;

/// The provider alone: seconds of a first `ListRecords` page and of resumed ones.
#[derive(Debug, Clone, Copy)]
struct Probe {
    first: f64,
    /// The median of up to [`PROBE_PAGES`] resumed pages; `None`: the whole list fit the
    /// first page.
    resumed: Option<f64>,
}

impl Probe {
    /// About what any harvest of `pages` pages needs from this provider, asked one page
    /// after the other.
    fn estimate(&self, pages: u64) -> f64 {
        self.first + pages.saturating_sub(1) as f64 * self.resumed.unwrap_or(0.0)
    }
}

async fn get_text(client: &reqwest::Client, url: &str) -> anyhow::Result<(String, f64)> {
    let t0 = Instant::now();
    let r = client.get(url).send().await?.error_for_status()?;
    let text = r.text().await?;
    Ok((text, t0.elapsed().as_secs_f64()))
}

async fn probe(client: &reqwest::Client, base: &str) -> anyhow::Result<Probe> {
    let first_url = format!("{base}?verb=ListRecords&metadataPrefix=oai_dc");
    let (mut page, first) = get_text(client, &first_url).await?;
    ensure!(
        page.contains("<ListRecords"),
        "the provider's first ListRecords page holds no records: {}",
        tail(&page, 5)
    );
    let mut resumed = Vec::new();
    while resumed.len() < PROBE_PAGES {
        let Some(token) = resumption_token(&page) else {
            break;
        };
        let url = url::Url::parse_with_params(
            base,
            [("verb", "ListRecords"), ("resumptionToken", token.as_str())],
        )?;
        let (next, secs) = get_text(client, url.as_str()).await?;
        resumed.push(secs);
        page = next;
    }
    resumed.sort_by(f64::total_cmp);
    Ok(Probe {
        first,
        resumed: resumed.get(resumed.len() / 2).copied(),
    })
}

/// Requests the provider answered so far, per verb (`GET /counts`).
async fn counts(client: &reqwest::Client, url: &str) -> anyhow::Result<BTreeMap<String, u64>> {
    let (text, _) = get_text(client, url).await?;
    serde_json::from_str(&text).with_context(|| format!("{url} answered {text:?}"))
}

/// The requests of one run: the counts after it less those before.
fn count_diff(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(verb, n)| {
            (
                verb.clone(),
                n - before.get(verb).copied().unwrap_or(0).min(*n),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

fn format_counts(c: &BTreeMap<String, u64>) -> String {
    if c.is_empty() {
        return "none".into();
    }
    let mut s = String::new();
    for (verb, n) in c {
        if !s.is_empty() {
            s.push_str(", ");
        }
        let _ = write!(s, "{verb} {n}");
    }
    s
}

// ---------------------------------------------------------------------------------------------
// measured runs
// ---------------------------------------------------------------------------------------------

/// What one measured run took.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Figure {
    /// Wall seconds, spawn to exit.
    secs: f64,
    /// Peak RSS.
    peak_kib: u64,
    /// CPU seconds of the run (user + system).
    cpu: f64,
    /// CPU seconds of the provider meanwhile.
    provider_cpu: f64,
}

impl From<&Measured> for Figure {
    fn from(m: &Measured) -> Self {
        Figure {
            secs: m.seconds,
            peak_kib: m.peak_kib,
            cpu: m.cpu,
            provider_cpu: m.beside_cpu,
        }
    }
}

/// What a measured run needs besides its command.
struct Ctx<'a> {
    work: &'a Path,
    base: &'a str,
    /// The provider's `GET /counts`.
    counts: String,
    n: u64,
    provider: u32,
    /// Keep what the runs wrote (else each harvest's output is removed once checked: 10^6
    /// records are gigabytes on tmpfs).
    keep: bool,
}

/// The pipeline of one upstream, the provider, into the `file://` store `store-{store}`
/// (created); returns the pipeline file.
fn rsagg_pipeline(cx: &Ctx, store: &str) -> anyhow::Result<PathBuf> {
    let dir = cx.work.join(format!("store-{store}"));
    std::fs::create_dir_all(&dir)?;
    let pipeline = cx.work.join(format!("pipeline-{store}.toml"));
    std::fs::write(
        &pipeline,
        format!(
            "[collection]\nname = \"oai-bench\"\nbase_url = \"http://127.0.0.1:9/oai-bench/\"\n\n\
             [store]\nurl = \"file://{}\"\n\n\
             [[upstream]]\nname = \"repo\"\nurl = \"{}\"\nkind = \"oai-pmh\"\nallow_private = true\n",
            dir.display(),
            cx.base
        ),
    )?;
    Ok(pipeline)
}

fn rsagg_command(bin: &Path, pipeline: &Path) -> Command {
    let mut c = Command::new(bin);
    c.arg("run").arg(pipeline).args(["--once", "--json"]);
    c
}

/// One measured `rsagg run --once --json` of `pipeline` (its output kept under `label`):
/// the figure and the report, whatever the report says.
fn rsagg_measured(
    bin: &Path,
    cx: &Ctx,
    pipeline: &Path,
    label: &str,
) -> anyhow::Result<(Figure, anyhow::Result<RsaggReport>, Measured)> {
    let m = procs::measure(&mut rsagg_command(bin, pipeline), cx.provider)?;
    std::fs::write(cx.work.join(format!("rsagg-{label}.stderr")), &m.stderr)?;
    std::fs::write(cx.work.join(format!("rsagg-{label}.json")), &m.stdout)?;
    let report = rsagg_report(&m.stdout);
    Ok((Figure::from(&m), report, m))
}

/// One `rsagg run --once --json` into a fresh `file://` store; checks its report says N
/// created, nothing failed. Returns the figure and the report's publish seconds.
fn rsagg_run(bin: &Path, cx: &Ctx, label: &str) -> anyhow::Result<(Figure, f64)> {
    let pipeline = rsagg_pipeline(cx, label)?;
    let (f, report, m) = rsagg_measured(bin, cx, &pipeline, label)?;
    match report {
        Ok(r) if m.success && r.created == cx.n && r.failed == 0 && r.verdict == "ok" => {
            Ok((f, r.publish_secs))
        }
        other => bail!(
            "rsagg run ({label}) did not harvest {} records: exit {}, report {other:?}\n\
             stdout: {}\nstderr (tail):\n{}",
            cx.n,
            if m.success { "0" } else { "non-zero" },
            tail(&m.stdout, 5),
            tail(&m.stderr, 30)
        ),
    }
}

/// What the bench checks in rsagg's `--json` report.
#[derive(Debug, PartialEq)]
struct RsaggReport {
    verdict: String,
    created: u64,
    updated: u64,
    unchanged: u64,
    failed: u64,
    publish_secs: f64,
}

/// The one upstream's counts and the publish seconds of rsagg's `--json` report (its last
/// JSON line).
fn rsagg_report(stdout: &str) -> anyhow::Result<RsaggReport> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON report on stdout")?;
    let v: serde_json::Value = serde_json::from_str(line)?;
    let up = v["upstreams"]
        .as_array()
        .and_then(|u| u.first())
        .context("no upstream in the report")?;
    Ok(RsaggReport {
        verdict: up["verdict"].as_str().unwrap_or("").to_owned(),
        created: up["created"].as_u64().unwrap_or(0),
        updated: up["updated"].as_u64().unwrap_or(0),
        unchanged: up["unchanged"].as_u64().unwrap_or(0),
        failed: up["failed"].as_u64().unwrap_or(0),
        publish_secs: v["publish"]["seconds"]["total"].as_f64().unwrap_or(0.0),
    })
}

/// What `py/sickle_harvest.py` prints.
#[derive(Debug, Deserialize)]
struct SickleOut {
    records: u64,
    files: u64,
    bytes: u64,
}

/// One Sickle harvest into a fresh directory; checks it wrote N files.
fn sickle_run(
    python: &Path,
    script: &Path,
    cx: &Ctx,
    label: &str,
) -> anyhow::Result<(Figure, SickleOut)> {
    let out = cx.work.join(format!("sickle-{label}"));
    std::fs::create_dir_all(&out)?;
    let m = procs::measure(
        Command::new(python)
            .arg(script)
            .args(["--url", cx.base, "--out"])
            .arg(&out),
        cx.provider,
    )?;
    std::fs::write(cx.work.join(format!("sickle-{label}.stderr")), &m.stderr)?;
    let printed: anyhow::Result<SickleOut> = m
        .stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("no JSON line on stdout")
        .and_then(|l| Ok(serde_json::from_str(l)?));
    let files = std::fs::read_dir(&out)?.filter_map(Result::ok).count() as u64;
    if !cx.keep {
        std::fs::remove_dir_all(&out).ok();
    }
    match printed {
        Ok(s) if m.success && s.records == cx.n && s.files == cx.n && files == cx.n => {
            Ok((Figure::from(&m), s))
        }
        other => bail!(
            "Sickle ({label}) did not harvest {} records ({files} files in {}): exit {}, \
             printed {other:?}\nstderr (tail):\n{}",
            cx.n,
            out.display(),
            if m.success { "0" } else { "non-zero" },
            tail(&m.stderr, 30)
        ),
    }
}

// ---------------------------------------------------------------------------------------------
// the table
// ---------------------------------------------------------------------------------------------

/// The median run (by wall time), with the peak RSS the maximum over all runs.
fn median(v: &[Figure]) -> Figure {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.secs.total_cmp(&b.secs));
    let peak_kib = v.iter().map(|s| s.peak_kib).max().unwrap_or(0);
    Figure {
        peak_kib,
        ..v[v.len() / 2]
    }
}

/// The figures of one harvester over the rounds.
struct Side<'a> {
    tool: &'a str,
    runs: &'a [Figure],
}

/// The table and the lines under it: records, seconds, records/s, peak RSS, CPU and the
/// provider's CPU of each side (medians), the ratio of records/s (of the medians, and per
/// round: a round's two runs follow each other, so a load that drifts over the rounds moves
/// both), what each harvester's CPU costs per record, and which side was provider-bound.
fn table(n: u64, rsagg: &Side, sickle: &Side) -> Vec<String> {
    let mut lines = vec![format!(
        "{:<8} {:>8} {:>9} {:>10} {:>9} {:>7} {:>15} {:>10}",
        "tool",
        "records",
        "seconds",
        "records/s",
        "peak MiB",
        "cpu s",
        "provider cpu s",
        "prov/wall"
    )];
    let (r, s) = (median(rsagg.runs), median(sickle.runs));
    for (tool, f) in [(rsagg.tool, r), (sickle.tool, s)] {
        lines.push(format!(
            "{tool:<8} {n:>8} {:>9.2} {:>10.0} {:>9.1} {:>7.2} {:>15.2} {:>9.0}%",
            f.secs,
            n as f64 / f.secs,
            f.peak_kib as f64 / 1024.0,
            f.cpu,
            f.provider_cpu,
            100.0 * f.provider_cpu / f.secs
        ));
    }
    let per_round: Vec<String> = rsagg
        .runs
        .iter()
        .zip(sickle.runs)
        .map(|(a, b)| format!("{:.2}x", b.secs / a.secs))
        .collect();
    lines.push(format!(
        "ratio {} records/s / {} records/s = {:.2}x (of the medians; per round: {})",
        rsagg.tool,
        sickle.tool,
        s.secs / r.secs,
        per_round.join(" ")
    ));
    let us = |f: Figure| 1e6 * f.cpu / n as f64;
    lines.push(format!(
        "harvester CPU per record: {} {:.0} us, {} {:.0} us ({} uses {:.1}x the CPU of {})",
        rsagg.tool,
        us(r),
        sickle.tool,
        us(s),
        sickle.tool,
        s.cpu / r.cpu,
        rsagg.tool
    ));
    let bound: Vec<&str> = [(rsagg.tool, r), (sickle.tool, s)]
        .into_iter()
        .filter(|(_, f)| f.provider_cpu >= PROVIDER_BOUND * f.secs)
        .map(|(t, _)| t)
        .collect();
    lines.push(match bound.as_slice() {
        [] => format!(
            "provider: busy below {:.0}% of the wall time on both sides, neither side is \
             provider-bound",
            100.0 * PROVIDER_BOUND
        ),
        [one] => format!(
            "PROVIDER-BOUND: {one}'s run kept the provider (one Python process, one core) busy \
             {:.0}% or more of its wall time: {one}'s records/s measure the provider as much as \
             {one}",
            100.0 * PROVIDER_BOUND
        ),
        _ => format!(
            "PROVIDER-BOUND: both runs kept the provider (one Python process, one core) busy \
             {:.0}% or more of their wall time: the ratio measures the provider more than the \
             harvesters; the CPU per record above is what the harvesters themselves cost",
            100.0 * PROVIDER_BOUND
        ),
    });
    lines
}

/// The requests of a side's runs: one line when every run made the same.
fn counts_line(tool: &str, runs: &[BTreeMap<String, u64>]) -> String {
    let mut distinct: Vec<&BTreeMap<String, u64>> = Vec::new();
    for c in runs {
        if !distinct.contains(&c) {
            distinct.push(c);
        }
    }
    match distinct.as_slice() {
        [one] => format!("{tool}: {} (each run)", format_counts(one)),
        _ => format!(
            "{tool}: {}",
            runs.iter()
                .enumerate()
                .map(|(i, c)| format!("run {}: {}", i + 1, format_counts(c)))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// the driver
// ---------------------------------------------------------------------------------------------

/// The provider the rounds harvest.
enum Provider {
    Pyoai(OaiProvider),
    Generated(Generated),
}

/// `rsagg-bench oai-provider` in a process of its own, killed when dropped.
struct Generated {
    child: std::process::Child,
    base: String,
}

impl Drop for Generated {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

impl Generated {
    fn start(n: u64, page: usize) -> anyhow::Result<Generated> {
        use std::io::BufRead as _;
        let exe = std::env::current_exe()?;
        let mut child = Command::new(exe)
            .args(["oai-provider", "--records", &n.to_string()])
            .args(["--page-size", &page.to_string()])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("starting rsagg-bench oai-provider")?;
        let mut line = String::new();
        let out = child.stdout.take().context("no stdout")?;
        std::io::BufReader::new(out).read_line(&mut line)?;
        let base = line
            .trim()
            .strip_prefix("listening ")
            .map(str::to_owned)
            .with_context(|| format!("the provider printed {line:?}"));
        match base {
            Ok(base) => Ok(Generated { child, base }),
            Err(e) => {
                child.kill().ok();
                child.wait().ok();
                Err(e)
            }
        }
    }

    /// `{origin}/{path}` of the provider's control endpoints.
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base.trim_end_matches("/oai"))
    }
}

impl Provider {
    fn base_url(&self) -> String {
        match self {
            Provider::Pyoai(p) => p.base_url(),
            Provider::Generated(g) => g.base.clone(),
        }
    }

    fn counts_url(&self) -> String {
        match self {
            Provider::Pyoai(p) => p.counts_url(),
            Provider::Generated(g) => g.url("/counts"),
        }
    }

    fn pid(&self) -> anyhow::Result<u32> {
        Ok(match self {
            Provider::Pyoai(p) => {
                let port = url::Url::parse(&p.base_url())?
                    .port()
                    .context("the provider's URL has no port")?;
                provider_pid(port).unwrap_or(0)
            }
            Provider::Generated(g) => g.child.id(),
        })
    }

    fn log_tail(&self) -> String {
        match self {
            Provider::Pyoai(p) => p.log_tail(20),
            Provider::Generated(_) => "(the generated provider logs nothing)".into(),
        }
    }
}

/// The generated provider's counters: `GET /served`, `POST /mark`, `POST /reset`.
async fn served(client: &reqwest::Client, g: &Generated) -> anyhow::Result<crate::oai_gen::Phase> {
    let (text, _) = get_text(client, &g.url("/served")).await?;
    serde_json::from_str(&text).with_context(|| format!("/served answered {text:?}"))
}

async fn post(client: &reqwest::Client, url: &str) -> anyhow::Result<String> {
    Ok(client
        .post(url)
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?)
}

/// The kill-and-resume round: a harvest into a fresh store, SIGKILLed once the provider has
/// served half the records, then run again to its end. Returns the store's label (complete
/// now, for the incremental round).
fn kill_round(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    g: &Generated,
    bin: &Path,
    cx: &Ctx,
) -> anyhow::Result<&'static str> {
    const LABEL: &str = "kill";
    let pipeline = rsagg_pipeline(cx, LABEL)?;
    rt.block_on(post(client, &g.url("/reset")))?;
    let t0 = Instant::now();
    let mut child = rsagg_command(bin, &pipeline)
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(cx.work.join("rsagg-killed.json"))?)
        .stderr(std::fs::File::create(cx.work.join("rsagg-killed.stderr"))?)
        .spawn()?;
    let half = cx.n.div_ceil(2);
    let at_kill = loop {
        if let Some(st) = child.try_wait()? {
            bail!(
                "the harvest to be killed ended first ({st}) after {:.1} s",
                t0.elapsed().as_secs_f64()
            );
        }
        let s = rt.block_on(served(client, g))?;
        if s.distinct >= half {
            // SIGKILL: no chance to commit anything more.
            child.kill()?;
            child.wait()?;
            break s;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let killed_after = t0.elapsed().as_secs_f64();
    rt.block_on(post(client, &g.url("/mark")))?;
    let c0 = rt.block_on(counts(client, &cx.counts))?;
    let (f, report, m) = rsagg_measured(bin, cx, &pipeline, "resumed")?;
    let c1 = rt.block_on(counts(client, &cx.counts))?;
    let again = rt.block_on(served(client, g))?;
    let r = match report {
        Ok(r) if m.success && r.failed == 0 && r.verdict == "ok" => r,
        other => bail!(
            "the restarted harvest failed: exit {}, report {other:?}\nstderr (tail):\n{}",
            if m.success { "0" } else { "non-zero" },
            tail(&m.stderr, 30)
        ),
    };
    println!(
        "kill-and-resume: harvest SIGKILLed after {killed_after:.1} s, once the provider had served \
         {} of {} records ({} pages)",
        at_kill.distinct, cx.n, at_kill.pages
    );
    println!(
        "  restarted: {:.2} s, cpu {:.2} s, peak {:.1} MiB; asked {} ListRecords pages ({}), {} of \
         them holding records served before the kill ({} records again); report: created {}, \
         updated {}, unchanged {}",
        f.secs,
        f.cpu,
        f.peak_kib as f64 / 1024.0,
        again.pages,
        format_counts(&count_diff(&c0, &c1)),
        again.pages_again,
        again.records_again,
        r.created,
        r.updated,
        r.unchanged
    );
    println!(
        "  pages re-asked after the kill: {} (target: at most 2){}",
        again.pages_again,
        if again.pages_again > 2 {
            "; the harvest restarts its list from the beginning (no durable per-page progress)"
        } else {
            ""
        }
    );
    Ok(LABEL)
}

/// The incremental round: `count` records changed (datestamp now, a new version), then
/// rsagg runs again on the complete store `store`.
fn incremental_round(
    rt: &tokio::runtime::Runtime,
    client: &reqwest::Client,
    g: &Generated,
    bin: &Path,
    cx: &Ctx,
    store: &str,
    count: u64,
) -> anyhow::Result<()> {
    let pipeline = cx.work.join(format!("pipeline-{store}.toml"));
    let changed = rt.block_on(post(client, &g.url(&format!("/change?count={count}"))))?;
    rt.block_on(post(client, &g.url("/mark")))?;
    let c0 = rt.block_on(counts(client, &cx.counts))?;
    let (f, report, m) = rsagg_measured(bin, cx, &pipeline, "incremental")?;
    let c1 = rt.block_on(counts(client, &cx.counts))?;
    let s = rt.block_on(served(client, g))?;
    let r = match report {
        Ok(r) if m.success && r.failed == 0 && r.verdict == "ok" => r,
        other => bail!(
            "the incremental run failed: exit {}, report {other:?}\nstderr (tail):\n{}",
            if m.success { "0" } else { "non-zero" },
            tail(&m.stderr, 30)
        ),
    };
    println!(
        "incremental: {count} records changed ({changed}); rsagg {:.2} s (publish {:.2} s), cpu \
         {:.2} s, peak {:.1} MiB; provider cpu {:.2} s; asked {} ({} records in {} ListRecords \
         pages); report: updated {}, created {}, unchanged {}",
        f.secs,
        r.publish_secs,
        f.cpu,
        f.peak_kib as f64 / 1024.0,
        f.provider_cpu,
        format_counts(&count_diff(&c0, &c1)),
        s.records,
        s.pages,
        r.updated,
        r.created,
        r.unchanged
    );
    Ok(())
}

/// `rsagg-bench oai`.
pub fn run(a: OaiArgs) -> anyhow::Result<()> {
    ensure!(
        a.runs > 0 && a.records > 0,
        "--runs and --records must be > 0"
    );
    let bin = rsagg_binary_at(a.rsagg.as_deref())?;
    let python = a.python.clone().unwrap_or_else(default_python);
    if !a.no_sickle && !python.is_file() {
        bail!(
            "{} not found: run `bash scripts/peers.sh install` first, or pass --python",
            python.display()
        );
    }
    let script = crate::py_script("sickle_harvest.py");
    let work = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("rsagg-bench-oai-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work)?;
    let n = a.records;
    let page = if a.page_size == 0 {
        PYOAI_DEFAULT_PAGE
    } else {
        a.page_size
    };
    let pages = n.div_ceil(page as u64);
    println!(
        "machine: {}; load average at start {}; rounds: {} (each rsagg then Sickle; median of \
         each, peak RSS the maximum)",
        machine(),
        loadavg(),
        a.runs
    );
    let provider = match a.provider {
        ProviderKind::Pyoai => {
            let repo = work.join("repository.json");
            let t0 = Instant::now();
            write_repository(&repo, n)?;
            let repo_mib = std::fs::metadata(&repo)?.len() as f64 / 1024.0 / 1024.0;
            println!(
                "repository: {n} Dublin Core records (>= {METADATA_BYTES} bytes of metadata each, \
                 second granularity, deletedRecord persistent), {repo_mib:.1} MiB of JSON written in \
                 {:.1} s",
                t0.elapsed().as_secs_f64()
            );
            Provider::Pyoai(
                OaiProvider::start(
                    &repo,
                    &OaiOptions {
                        batch: page,
                        ..OaiOptions::default()
                    },
                )
                .context("starting the OAI-PMH provider (scripts/peers/oai_provider.py)")?,
            )
        }
        ProviderKind::Generated => Provider::Generated(Generated::start(n, page)?),
    };
    let base = provider.base_url();
    let pid = provider.pid()?;
    let pid_text = if pid == 0 {
        "not found (its CPU reads 0)".to_owned()
    } else {
        pid.to_string()
    };
    match a.provider {
        ProviderKind::Pyoai => println!(
            "provider: pyoai 2.5.0 BatchingServer (scripts/peers/oai_provider.py) at {base}, pid \
             {pid_text}, one process for every run (started once, its JSON loaded before the \
             runs); page size {page} records{} = {pages} ListRecords pages a harvest",
            if a.page_size == 0 {
                " (pyoai's default)".to_owned()
            } else {
                format!(" (set by the bench; pyoai's default is {PYOAI_DEFAULT_PAGE})")
            }
        ),
        ProviderKind::Generated => println!(
            "provider: generated (rsagg-bench oai-provider, records computed from their position, \
             >= {METADATA_BYTES} bytes of Dublin Core each, datestamps over ten years) at {base}, \
             pid {pid_text}, a process of its own for every run; page size {page} records = \
             {pages} ListRecords pages a harvest"
        ),
    }
    println!(
        "working directory {} ({}); every figure is one process timed from spawn to exit",
        work.display(),
        fs_type(&work)
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::new();
    let counts_url = provider.counts_url();
    let result = (|| -> anyhow::Result<()> {
        let p = rt.block_on(probe(&client, &base))?;
        println!(
            "provider alone: first ListRecords page {:.3} s, a resumed page {} (median of {}): \
             a harvest of the {pages} pages asked one after the other needs about {:.1} s of it",
            p.first,
            p.resumed
                .map_or("(none: one page)".to_owned(), |s| format!("{s:.3} s")),
            PROBE_PAGES,
            p.estimate(pages)
        );
        if a.provider_only {
            return Ok(());
        }
        let cx = Ctx {
            work: &work,
            base: &base,
            counts: counts_url.clone(),
            n,
            provider: pid,
            keep: a.keep,
        };
        let (mut mine, mut theirs) = (Vec::new(), Vec::new());
        let (mut mine_counts, mut their_counts) = (Vec::new(), Vec::new());
        let (mut publish, mut meta_bytes) = (Vec::new(), 0u64);
        for r in 0..a.runs {
            let c0 = rt.block_on(counts(&client, &counts_url))?;
            let (f, pubs) = rsagg_run(&bin, &cx, &r.to_string())?;
            let c1 = rt.block_on(counts(&client, &counts_url))?;
            if !a.keep {
                std::fs::remove_dir_all(work.join(format!("store-{r}"))).ok();
            }
            mine.push(f);
            publish.push(pubs);
            mine_counts.push(count_diff(&c0, &c1));
            if a.no_sickle {
                eprintln!("round {}: rsagg {:.2} s", r + 1, f.secs);
                continue;
            }
            let (g, s) = sickle_run(&python, &script, &cx, &r.to_string())?;
            let c2 = rt.block_on(counts(&client, &counts_url))?;
            eprintln!(
                "round {}: rsagg {:.2} s, sickle {:.2} s",
                r + 1,
                f.secs,
                g.secs
            );
            theirs.push(g);
            their_counts.push(count_diff(&c1, &c2));
            meta_bytes = s.bytes / s.files.max(1);
        }
        if a.no_sickle {
            let f = median(&mine);
            println!(
                "rsagg {n} records: {:.2} s, {:.0} records/s, peak {:.1} MiB, cpu {:.2} s ({:.0} us a \
                 record), provider cpu {:.2} s",
                f.secs,
                n as f64 / f.secs,
                f.peak_kib as f64 / 1024.0,
                f.cpu,
                1e6 * f.cpu / n as f64,
                f.provider_cpu
            );
        } else {
            println!("metadata per record as Sickle wrote it: {meta_bytes} bytes on average");
            for line in table(
                n,
                &Side {
                    tool: "rsagg",
                    runs: &mine,
                },
                &Side {
                    tool: "sickle",
                    runs: &theirs,
                },
            ) {
                println!("{line}");
            }
        }
        publish.sort_by(f64::total_cmp);
        println!(
            "rsagg's runs include publishing the collection (Resource List, Change List, \
             Resource Dump): {:.2} s of its run (median, report's publish.seconds.total)",
            publish[publish.len() / 2]
        );
        println!("requests the provider counted, per run:");
        println!("  {}", counts_line("rsagg", &mine_counts));
        if !a.no_sickle {
            println!("  {}", counts_line("sickle", &their_counts));
        }
        if let Provider::Generated(g) = &provider {
            let complete = if a.no_kill {
                None
            } else {
                println!(
                    "load average before the kill-and-resume round {}",
                    loadavg()
                );
                Some(kill_round(&rt, &client, g, &bin, &cx)?)
            };
            if !a.no_incremental {
                let store = match complete {
                    Some(s) => s.to_owned(),
                    None => {
                        let label = "full";
                        rsagg_run(&bin, &cx, label)?;
                        label.to_owned()
                    }
                };
                incremental_round(&rt, &client, g, &bin, &cx, &store, a.change)?;
            }
            if !a.keep {
                std::fs::remove_dir_all(work.join("store-kill")).ok();
                std::fs::remove_dir_all(work.join("store-full")).ok();
            }
        }
        println!("load average at the end {}", loadavg());
        Ok(())
    })();
    if result.is_err() {
        eprintln!("provider log (tail):\n{}", provider.log_tail());
    }
    drop(provider);
    result?;
    if a.dir.is_none() && !a.keep {
        std::fs::remove_dir_all(&work)?;
    } else {
        println!("working directory kept: {}", work.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::{
        Figure, METADATA_BYTES, Probe, RsaggReport, Side, count_diff, counts_line, datestamp,
        metadata_len, record, resumption_token, rsagg_report, table, write_repository,
    };

    #[test]
    fn records_carry_about_a_kilobyte_of_dublin_core_one_second_apart() {
        let longest = super::WORDS.iter().map(|w| w.len()).max().unwrap();
        for i in [0, 1, 9, 10_000, 99_999] {
            let r = record(i);
            assert_eq!(r.identifier, format!("oai:bench.example.org:{i}"));
            assert!(!r.deleted);
            let len = metadata_len(&r.dc);
            assert!(
                (METADATA_BYTES..=METADATA_BYTES + longest + 1).contains(&len),
                "{i}: {len}"
            );
            for k in [
                "title",
                "creator",
                "subject",
                "description",
                "date",
                "identifier",
            ] {
                assert!(r.dc.contains_key(k), "{i}: no {k}");
            }
        }
        assert_eq!(datestamp(0), "2013-01-03T00:00:00Z");
        assert_eq!(datestamp(61), "2013-01-03T00:01:01Z");
        assert_eq!(record(5).datestamp, "2013-01-03T00:00:05Z");
        assert_eq!(record(86_400).dc["date"], ["2013-01-04"]);
        // deterministic: two runs of the bench write the same repository
        assert_eq!(record(7).dc, record(7).dc);
        assert_ne!(record(7).dc["title"], record(8).dc["title"]);
    }

    #[test]
    fn the_repository_is_the_providers_json_format() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("repo.json");
        write_repository(&path, 3).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["granularity"], "YYYY-MM-DDThh:mm:ssZ");
        assert_eq!(v["deletedRecord"], "persistent");
        assert_eq!(v["earliestDatestamp"], "2013-01-03T00:00:00Z");
        let recs = v["records"].as_array().unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(recs[2]["identifier"], "oai:bench.example.org:2");
        assert_eq!(recs[2]["datestamp"], "2013-01-03T00:00:02Z");
        assert_eq!(recs[2]["deleted"], false);
        assert!(recs[2]["dc"]["title"][0].as_str().unwrap().ends_with("(2)"));
    }

    #[test]
    fn a_token_is_read_and_unescaped_and_the_last_page_has_none() {
        let page = r#"<ListRecords><record/><resumptionToken cursor="0">a%3Db&amp;c</resumptionToken></ListRecords>"#;
        assert_eq!(resumption_token(page).as_deref(), Some("a%3Db&c"));
        assert_eq!(
            resumption_token("<ListRecords><resumptionToken completeListSize=\"5\"/>"),
            None
        );
        assert_eq!(
            resumption_token("<ListRecords><resumptionToken> </resumptionToken>"),
            None
        );
        assert_eq!(
            resumption_token("<ListRecords><record/></ListRecords>"),
            None
        );
        let p = Probe {
            first: 0.5,
            resumed: Some(0.25),
        };
        assert_eq!(p.estimate(1), 0.5);
        assert_eq!(p.estimate(101), 25.5);
    }

    #[test]
    fn requests_per_run_are_the_difference_of_the_counts() {
        let m = |v: &[(&str, u64)]| -> BTreeMap<String, u64> {
            v.iter().map(|(k, n)| (k.to_string(), *n)).collect()
        };
        let before = m(&[("Identify", 2), ("ListRecords", 100)]);
        let after = m(&[
            ("Identify", 3),
            ("ListMetadataFormats", 1),
            ("ListRecords", 200),
        ]);
        let d = count_diff(&before, &after);
        assert_eq!(
            d,
            m(&[
                ("Identify", 1),
                ("ListMetadataFormats", 1),
                ("ListRecords", 100)
            ])
        );
        assert_eq!(
            counts_line("rsagg", &[d.clone(), d.clone()]),
            "rsagg: Identify 1, ListMetadataFormats 1, ListRecords 100 (each run)"
        );
        let e = m(&[("ListRecords", 101)]);
        assert_eq!(
            counts_line("sickle", &[e, m(&[])]),
            "sickle: run 1: ListRecords 101; run 2: none"
        );
    }

    #[test]
    fn the_table_gives_medians_the_ratio_and_says_when_the_provider_bounds_a_side() {
        let f = |secs, cpu, provider_cpu| Figure {
            secs,
            peak_kib: 10 * 1024,
            cpu,
            provider_cpu,
        };
        // rsagg's provider idle most of the time, Sickle's busy: only Sickle is bound.
        let mine = [f(2.0, 1.0, 0.5), f(1.0, 1.0, 0.5), f(4.0, 1.0, 0.5)];
        let theirs = [f(10.0, 5.0, 9.0), f(8.0, 5.0, 7.0), f(12.0, 5.0, 11.0)];
        let l = table(
            1000,
            &Side {
                tool: "rsagg",
                runs: &mine,
            },
            &Side {
                tool: "sickle",
                runs: &theirs,
            },
        );
        assert!(l[1].starts_with("rsagg"), "{}", l[1]);
        assert!(l[1].contains("  2.00 "), "median wall: {}", l[1]);
        assert!(l[1].contains(" 500 "), "records/s: {}", l[1]);
        assert!(l[2].contains(" 10.00 ") && l[2].contains("90%"), "{}", l[2]);
        assert!(
            l[3].contains("= 5.00x (of the medians; per round: 5.00x 8.00x 3.00x)"),
            "{}",
            l[3]
        );
        assert!(
            l[4].contains("rsagg 1000 us, sickle 5000 us (sickle uses 5.0x"),
            "{}",
            l[4]
        );
        assert!(l[5].starts_with("PROVIDER-BOUND: sickle's run"), "{}", l[5]);
        let both = table(
            1000,
            &Side {
                tool: "rsagg",
                runs: &theirs,
            },
            &Side {
                tool: "sickle",
                runs: &theirs,
            },
        );
        assert!(both[5].starts_with("PROVIDER-BOUND: both"), "{}", both[5]);
        let neither = table(
            1000,
            &Side {
                tool: "rsagg",
                runs: &mine,
            },
            &Side {
                tool: "sickle",
                runs: &mine,
            },
        );
        assert!(
            neither[5].starts_with("provider: busy below 80%"),
            "{}",
            neither[5]
        );
    }

    #[test]
    fn the_report_gives_the_upstreams_counts_and_the_publish_seconds() {
        let out = "log line\n{\"upstreams\":[{\"verdict\":\"ok\",\"created\":10,\"failed\":0}],\
                   \"publish\":{\"seconds\":{\"total\":0.5}}}\n";
        assert_eq!(
            rsagg_report(out).unwrap(),
            RsaggReport {
                verdict: "ok".into(),
                created: 10,
                updated: 0,
                unchanged: 0,
                failed: 0,
                publish_secs: 0.5
            }
        );
        assert!(rsagg_report("no json").is_err());
    }
}
