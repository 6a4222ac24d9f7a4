//! Fleet benchmark (issue 29): K upstream Sources, each on its own loopback address
//! (127.0.x.y, one port), each of M small resources with a Resource List and an (empty)
//! Change List, harvested (a) as one pipeline of K upstreams and (b) as K pipelines, one per
//! upstream, in a fleet run spread over N worker processes (`rsagg run DIR --once --shards N`
//! with `JOB_COMPLETION_INDEX`, as the pods of a Kubernetes Indexed Job), then (c) the same K
//! pipelines' no-change pass in one worker. Per run: wall seconds and each worker's peak RSS
//! (GNU time). Then `rsagg serve` of the K pipelines: its RSS, `/status` and `/metrics` bytes
//! and latency, and the store requests a scrape makes (`rsagg_serve_store_requests_total`,
//! when the server exports it).
//!
//! The upstream is a server in this process (its own tokio runtime, two threads), bound to K
//! addresses; which Source a request is for is read from its `Host`. Documents and bodies
//! are generated per request (nothing held per Source), bodies from the Source's and the
//! resource's number.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail, ensure};
use md5::{Digest, Md5};
use rsagg_e2e::encode_document;
use rsagg_model::{
    Capability, HashAlgorithm, HashValue, Hashes, Header, Link, Md, Root, UrlEntry, W3cDateTime,
};

use crate::docs::machine;
use crate::harvest::{body, md_cap, rsagg_binary_at, tail};

/// Upstream datetimes start here.
const T0: i64 = 1_357_171_200; // 2013-01-03T00:00:00Z

/// Arguments of `fleet`.
#[derive(Debug, clap::Args)]
pub struct FleetArgs {
    /// Upstream Sources (each on its own loopback address), one pipeline each in (b).
    #[arg(long, default_value_t = 1000)]
    k: usize,
    /// Resources per Source.
    #[arg(long, default_value_t = 100)]
    m: u64,
    /// Size of each resource, in bytes.
    #[arg(long, default_value_t = 100)]
    size: usize,
    /// Worker processes of (b) (`--shards N`).
    #[arg(long, default_value_t = 4)]
    shards: u32,
    /// `--max-pipelines` of every worker.
    #[arg(long, default_value_t = 4)]
    max_pipelines: u32,
    /// Also the no-change pass of one worker with each of these `--max-pipelines` (peak RSS
    /// follows the setting, not K).
    #[arg(long, value_delimiter = ',', default_value = "1,16")]
    rss_settings: Vec<u32>,
    /// Skip (a), the one pipeline of K upstreams.
    #[arg(long)]
    skip_one: bool,
    /// Skip the `serve` measurements.
    #[arg(long)]
    skip_serve: bool,
    /// Working directory (default: a fresh directory under the system temp, removed at the
    /// end unless `--keep`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Keep the working directory.
    #[arg(long)]
    keep: bool,
    /// The `rsagg` binary (default: `rsagg` next to this executable).
    #[arg(long, env = "RSAGG_BIN")]
    rsagg: Option<PathBuf>,
}

/// The loopback address of Source `i` (from 127.0.1.1: 250 per /24, never 127.0.0.x).
fn address(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, (1 + i / 250) as u8, (1 + i % 250) as u8)
}

/// Source `i` of a `Host` header (`127.0.x.y:port`).
fn source_of(host: &str) -> Option<usize> {
    let ip: Ipv4Addr = host
        .rsplit_once(':')
        .map_or(host, |(h, _)| h)
        .parse()
        .ok()?;
    let [a, b, c, d] = ip.octets();
    (a == 127 && b == 0 && c >= 1 && d >= 1).then(|| (c as usize - 1) * 250 + d as usize - 1)
}

/// The generated Sources.
struct Sources {
    m: u64,
    size: usize,
}

impl Sources {
    fn body(&self, source: usize, i: u64) -> Vec<u8> {
        body(source as u64 * 1_000_000_007 + i, self.size)
    }

    /// The document or body at `path` of Source `s` (based at `base`), or `None`.
    fn answer(&self, s: usize, base: &str, path: &str) -> Option<(Vec<u8>, &'static str)> {
        let xml =
            |h: Header, e: &[UrlEntry]| Some((encode_document(&h, e).to_vec(), "application/xml"));
        let caplist = format!("{base}/capabilitylist.xml");
        match path {
            "/.well-known/resourcesync" => xml(
                Header {
                    root: Root::Urlset,
                    md: md_cap(Capability::Description),
                    links: vec![],
                },
                &[UrlEntry {
                    loc: caplist,
                    md: md_cap(Capability::CapabilityList),
                    ..UrlEntry::default()
                }],
            ),
            "/capabilitylist.xml" => Some((
                crate::harvest::capability_list_of(base).to_vec(),
                "application/xml",
            )),
            "/resourcelist.xml" => {
                let entries: Vec<UrlEntry> = (0..self.m)
                    .map(|i| {
                        let b = self.body(s, i);
                        UrlEntry {
                            loc: format!("{base}/r/{i}"),
                            lastmod: Some(W3cDateTime::from_unix(T0 + i as i64, 0)),
                            md: Some(Md {
                                hash: Some(Hashes(vec![HashValue::from_bytes(
                                    HashAlgorithm::Md5,
                                    &Md5::digest(&b),
                                )])),
                                length: Some(b.len() as u64),
                                ..Md::default()
                            }),
                            ..UrlEntry::default()
                        }
                    })
                    .collect();
                xml(
                    Header {
                        root: Root::Urlset,
                        md: Some(Md {
                            capability: Some(Capability::ResourceList),
                            at: Some(W3cDateTime::from_unix(T0 + self.m as i64, 0)),
                            ..Md::default()
                        }),
                        links: vec![Link::new("up", caplist)],
                    },
                    &entries,
                )
            }
            // No change since the list: a no-change pass reads only this.
            "/changelist.xml" => xml(
                Header {
                    root: Root::Urlset,
                    md: Some(Md {
                        capability: Some(Capability::ChangeList),
                        from: Some(W3cDateTime::from_unix(T0, 0)),
                        ..Md::default()
                    }),
                    links: vec![Link::new("up", caplist)],
                },
                &[],
            ),
            p => {
                let i: u64 = p.strip_prefix("/r/")?.parse().ok()?;
                (i < self.m).then(|| (self.body(s, i), "application/octet-stream"))
            }
        }
    }
}

/// Starts the K Sources on `port` of their addresses, in a thread of its own; they stop
/// with this process.
fn start_sources(k: usize, m: u64, size: usize, port: u16) -> anyhow::Result<()> {
    let sources = Arc::new(Sources { m, size });
    let (tx, rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    std::thread::spawn(move || {
        let rt = match tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => {
                let _ = tx.send(Err(e.into()));
                return;
            }
        };
        rt.block_on(async move {
            let app = axum::Router::new().fallback(
                move |headers: axum::http::HeaderMap, uri: axum::http::Uri| {
                    let sources = sources.clone();
                    async move {
                        use axum::response::IntoResponse;
                        let host = headers
                            .get(axum::http::header::HOST)
                            .and_then(|h| h.to_str().ok())
                            .unwrap_or("");
                        let answer = source_of(host).and_then(|s| {
                            sources.answer(s, &format!("http://{host}"), uri.path())
                        });
                        match answer {
                            Some((b, ct)) => {
                                ([(axum::http::header::CONTENT_TYPE, ct)], b).into_response()
                            }
                            None => axum::http::StatusCode::NOT_FOUND.into_response(),
                        }
                    }
                },
            );
            for i in 0..k {
                match tokio::net::TcpListener::bind(SocketAddr::from((address(i), port))).await {
                    Ok(l) => {
                        let app = app.clone();
                        tokio::spawn(async move {
                            let _ = axum::serve(l, app).await;
                        });
                    }
                    Err(e) => {
                        let _ = tx.send(Err(anyhow::anyhow!(
                            "binding {}:{port}: {e} (loopback addresses beyond 127.0.0.1 must be usable)",
                            address(i)
                        )));
                        return;
                    }
                }
            }
            let _ = tx.send(Ok(()));
            std::future::pending::<()>().await;
        });
    });
    rx.recv().context("the Sources' thread ended")?
}

/// A pipeline file's text: collection `name` over `store`, harvesting `urls`.
fn pipeline_text(name: &str, store: &Path, urls: &[String]) -> String {
    let mut t = format!(
        "[collection]\nname = \"{name}\"\nbase_url = \"http://agg.example.org/{name}/\"\n\n\
         [store]\nurl = \"file://{}\"\n",
        store.display()
    );
    for (i, u) in urls.iter().enumerate() {
        t.push_str(&format!(
            "\n[[upstream]]\nname = \"u{i}\"\nurl = \"{u}\"\nallow_private = true\n"
        ));
    }
    t
}

/// One measured process: wall seconds and peak RSS (GNU time), and its stdout.
#[derive(Debug, Clone, Default)]
struct Measured {
    wall: f64,
    peak_mib: f64,
    stdout: String,
}

/// The file a [`spawn_timed`] process's stdout goes to: beside its stderr.
fn stdout_of(stderr: &Path) -> std::path::PathBuf {
    stderr.with_extension("stdout")
}

/// Starts `rsagg ARGS` under GNU time (its figures to `times`). Its stdout goes to a file,
/// not a pipe: workers started together and waited for one after the other would otherwise
/// block on a full pipe (a fleet's `--json` line per pipeline) until their turn to be read,
/// which made the shards' walls a staircase (17.6, 25.8, 33.5, 39.9 s for equal shards).
fn spawn_timed(
    bin: &Path,
    args: &[String],
    env: &[(&str, String)],
    times: &Path,
    stderr: &Path,
) -> anyhow::Result<Child> {
    Command::new("/usr/bin/time")
        .args(["-f", "%e %M", "-o"])
        .arg(times)
        .arg(bin)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(stdout_of(stderr))?)
        .stderr(std::fs::File::create(stderr)?)
        .spawn()
        .context("running rsagg under /usr/bin/time (Debian package `time`)")
}

/// Waits for a [`spawn_timed`] process; fails unless it exited 0.
fn finish(child: Child, times: &Path, stderr: &Path, what: &str) -> anyhow::Result<Measured> {
    let status = child.wait_with_output()?.status;
    let stdout = std::fs::read_to_string(stdout_of(stderr))?;
    if !status.success() {
        bail!(
            "{what} failed: {}\nstdout (tail): {}\nstderr (tail):\n{}",
            status,
            tail(&stdout, 5),
            tail(&std::fs::read_to_string(stderr).unwrap_or_default(), 30)
        );
    }
    let t = std::fs::read_to_string(times)?;
    let f: Vec<f64> = t
        .lines()
        .last()
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|v| v.parse().ok())
        .collect();
    ensure!(f.len() == 2, "unexpected /usr/bin/time output {t:?}");
    Ok(Measured {
        wall: f[0],
        peak_mib: f[1] / 1024.0,
        stdout,
    })
}

/// Runs `rsagg ARGS` measured.
fn run_timed(bin: &Path, args: &[String], work: &Path, label: &str) -> anyhow::Result<Measured> {
    let times = work.join(format!("{label}.time"));
    let err = work.join(format!("{label}.stderr"));
    let child = spawn_timed(bin, args, &[], &times, &err)?;
    finish(child, &times, &err, label)
}

/// `n` workers, shard I of N each, over `dir`, at once: the wall of the slowest (spawn of
/// the first to exit of the last) and each worker's figures.
fn run_shards(
    bin: &Path,
    dir: &Path,
    n: u32,
    max_pipelines: u32,
    work: &Path,
    label: &str,
) -> anyhow::Result<(f64, Vec<Measured>)> {
    let args: Vec<String> = vec![
        "run".into(),
        dir.display().to_string(),
        "--once".into(),
        "--json".into(),
        "--shards".into(),
        n.to_string(),
        "--max-pipelines".into(),
        max_pipelines.to_string(),
    ];
    let t0 = Instant::now();
    let mut children = Vec::new();
    for i in 0..n {
        let times = work.join(format!("{label}-{i}.time"));
        let err = work.join(format!("{label}-{i}.stderr"));
        let child = spawn_timed(
            bin,
            &args,
            &[("JOB_COMPLETION_INDEX", i.to_string())],
            &times,
            &err,
        )?;
        children.push((child, times, err));
    }
    let mut out = Vec::new();
    for (i, (child, times, err)) in children.into_iter().enumerate() {
        out.push(finish(child, &times, &err, &format!("{label} worker {i}"))?);
    }
    let wall = t0.elapsed().as_secs_f64();
    // Every pipeline ran, and ended well, in exactly one worker.
    let mut ran = 0u64;
    for m in &out {
        let last = m.stdout.lines().rev().find(|l| l.starts_with('{'));
        let v: serde_json::Value = serde_json::from_str(last.context("no fleet line")?)?;
        ensure!(
            v["fleet"]["exit"] == 0,
            "{label}: a worker did not end well: {v}"
        );
        ran += v["fleet"]["ok"].as_u64().unwrap_or(0);
    }
    let total = std::fs::read_dir(dir)?.count() as u64;
    ensure!(ran == total, "{label}: {ran} pipelines ran ok of {total}");
    Ok((wall, out))
}

fn range(v: impl Iterator<Item = f64> + Clone) -> String {
    let lo = v.clone().fold(f64::INFINITY, f64::min);
    let hi = v.fold(0.0, f64::max);
    if (hi - lo).abs() < 0.05 * hi.max(1e-9) {
        format!("{hi:.1}")
    } else {
        format!("{lo:.1}–{hi:.1}")
    }
}

fn print_shards(what: &str, wall: f64, w: &[Measured]) {
    println!(
        "  {what:<34} wall {wall:>7.1} s   worker wall {:>11} s   peak RSS per worker {:>11} MiB",
        range(w.iter().map(|m| m.wall)),
        range(w.iter().map(|m| m.peak_mib))
    );
}

/// Resident and peak resident memory of `pid`, in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let s = procfs::process::Process::new(pid as i32).and_then(|p| p.status());
    match s {
        Ok(s) => (
            s.vmrss.unwrap_or(0) as f64 / 1024.0,
            s.vmhwm.unwrap_or(0) as f64 / 1024.0,
        ),
        Err(_) => (0.0, 0.0),
    }
}

/// The value of the sample `name` (no labels, or summed over its label sets) in Prometheus
/// text, if any line has it.
fn metric(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with(' ') || rest.starts_with('{')) {
            continue;
        }
        let v: f64 = rest.rsplit(' ').next()?.parse().ok()?;
        *found.get_or_insert(0.0) += v;
    }
    found
}

/// `rsagg serve DIR`: ready time, RSS, `/status` and `/metrics` bytes and latency (median of
/// 5), store requests per scrape.
fn serve(bin: &Path, dir: &Path, work: &Path) -> anyhow::Result<()> {
    use std::io::BufRead;
    let t0 = Instant::now();
    let mut child = Command::new(bin)
        .arg("serve")
        .arg(dir)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(work.join("serve.stderr"))?)
        .spawn()
        .context("spawning rsagg serve")?;
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
    let ready = t0.elapsed().as_secs_f64();
    let Some(url) = line.trim().strip_prefix("listening ") else {
        let _ = child.kill();
        bail!("rsagg serve did not start: {line:?}");
    };
    let url = url.to_owned();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = reqwest::Client::new();
    let get = |path: &str| {
        let client = client.clone();
        let u = format!("{url}{path}");
        rt.block_on(async move {
            let t = Instant::now();
            let r = client.get(&u).send().await?.error_for_status()?;
            let b = r.bytes().await?;
            anyhow::Ok((t.elapsed().as_secs_f64() * 1000.0, b))
        })
    };
    let result = (|| {
        let times = |path: &str| -> anyhow::Result<(f64, usize, String)> {
            let mut ms = Vec::new();
            let mut last = (0, String::new());
            for _ in 0..5 {
                let (t, b) = get(path)?;
                ms.push(t);
                last = (b.len(), String::from_utf8_lossy(&b).into_owned());
            }
            ms.sort_by(f64::total_cmp);
            Ok((ms[2], last.0, last.1))
        };
        let (status_ms, status_bytes, _) = times("/status")?;
        let (metrics_ms, metrics_bytes, metrics_text) = times("/metrics")?;
        // Store requests per scrape: the counter in one scrape's output, then in the next.
        const COUNTER: &str = "rsagg_serve_store_requests_total";
        let per_scrape = match metric(&metrics_text, COUNTER) {
            Some(before) => {
                let (_, b) = get("/metrics")?;
                let after = metric(&String::from_utf8_lossy(&b), COUNTER).unwrap_or(before);
                format!("{:.0}", after - before)
            }
            None => format!("n/a ({COUNTER} not exported)"),
        };
        let (rss, hwm) = rss_mib(child.id());
        println!(
            "  serve: ready in {ready:.2} s; RSS {rss:.0} MiB (peak {hwm:.0} MiB); \
             /status {status_bytes} bytes in {status_ms:.0} ms; /metrics {metrics_bytes} bytes \
             ({} lines) in {metrics_ms:.0} ms (median of 5); store requests per scrape: {per_scrape}",
            metrics_text.lines().count()
        );
        anyhow::Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// `rsagg-bench fleet`.
pub fn run(a: FleetArgs) -> anyhow::Result<()> {
    let bin = rsagg_binary_at(a.rsagg.as_deref())?;
    let tmp;
    let work = match &a.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            tmp = std::env::temp_dir().join(format!("rsagg-bench-fleet-{}", std::process::id()));
            std::fs::create_dir_all(&tmp)?;
            tmp.clone()
        }
    };
    let port = std::net::TcpListener::bind((address(0), 0))?
        .local_addr()?
        .port();
    start_sources(a.k, a.m, a.size, port)?;
    let urls: Vec<String> = (0..a.k)
        .map(|i| format!("http://{}:{port}/.well-known/resourcesync", address(i)))
        .collect();
    println!(
        "rsagg-bench fleet: K = {} upstreams (each on its own loopback address) × M = {} resources of {} B; \
         workers --max-pipelines {}; machine: {}",
        a.k,
        a.m,
        a.size,
        a.max_pipelines,
        machine()
    );
    let stores = work.join("stores");
    if !a.skip_one {
        let one = work.join("one.toml");
        std::fs::write(&one, pipeline_text("one", &stores.join("one"), &urls))?;
        let args: Vec<String> = vec![
            "run".into(),
            one.display().to_string(),
            "--once".into(),
            "--json".into(),
        ];
        let base = run_timed(&bin, &args, &work, "one-baseline")?;
        let idle = run_timed(&bin, &args, &work, "one-nochange")?;
        println!("(a) one pipeline of {} upstreams", a.k);
        for (what, m) in [("baseline", &base), ("no-change pass", &idle)] {
            println!(
                "  {what:<34} wall {:>7.1} s   peak RSS {:>7.1} MiB",
                m.wall, m.peak_mib
            );
        }
    }
    let dir = work.join("pipelines");
    std::fs::create_dir_all(&dir)?;
    for (i, u) in urls.iter().enumerate() {
        let name = format!("s-{i:05}");
        std::fs::write(
            dir.join(format!("{name}.toml")),
            pipeline_text(&name, &stores.join(&name), std::slice::from_ref(u)),
        )?;
    }
    println!(
        "(b) {} pipelines of one upstream, over {} workers (--shards {})",
        a.k, a.shards, a.shards
    );
    let (wall, w) = run_shards(
        &bin,
        &dir,
        a.shards,
        a.max_pipelines,
        &work,
        "shards-baseline",
    )?;
    print_shards("baseline", wall, &w);
    let (wall, w) = run_shards(
        &bin,
        &dir,
        a.shards,
        a.max_pipelines,
        &work,
        "shards-nochange",
    )?;
    print_shards("no-change pass", wall, &w);
    println!("(c) the {} pipelines' no-change pass in one worker", a.k);
    let mut settings = vec![a.max_pipelines];
    settings.extend(a.rss_settings.iter().filter(|s| **s != a.max_pipelines));
    for mp in settings {
        let (wall, w) = run_shards(&bin, &dir, 1, mp, &work, &format!("one-worker-{mp}"))?;
        print_shards(&format!("--max-pipelines {mp}"), wall, &w);
    }
    if !a.skip_serve {
        serve(&bin, &dir, &work)?;
    }
    if a.dir.is_none() && !a.keep {
        let _ = std::fs::remove_dir_all(&work);
    } else {
        println!("kept {}", work.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_hosts_round_trip() {
        for i in [0, 1, 249, 250, 3999] {
            let a = address(i);
            assert_ne!(a.octets()[2], 0, "never 127.0.0.x");
            assert_eq!(source_of(&format!("{a}:8080")), Some(i));
        }
        assert_eq!(source_of("127.0.0.1:80"), None);
        assert_eq!(source_of("example.org"), None);
    }

    #[test]
    fn metrics_are_read_from_prometheus_text() {
        let t = "# HELP x_total y\n# TYPE x_total counter\nx_total{kind=\"get\"} 3\nx_total{kind=\"head\"} 4\nx_total_other 9\n";
        assert_eq!(metric(t, "x_total"), Some(7.0));
        assert_eq!(metric(t, "absent"), None);
    }
}
