//! Fleet runs (issue 29): `rsagg run DIR --once` runs many pipelines in one process, and
//! `--shards N` with `JOB_COMPLETION_INDEX` spreads them over workers, as the pods of a
//! Kubernetes Indexed Job run it. Real fixture upstreams on loopback, `file://` stores.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::{Site, Store};
use rsagg_e2e::rsagg_bin;
use serde_json::Value;

/// A directory of pipeline files, each over its own `file://` store, and the fixture
/// Sources they harvest.
struct Fleet {
    dir: tempfile::TempDir,
    stores: BTreeMap<String, Store>,
    _sites: Vec<Site>,
}

/// Three small resources on a fresh fixture Source.
fn site(i: usize) -> Result<Site> {
    let site = Site::new()?;
    let bodies: Vec<(String, Vec<u8>)> = (0..3)
        .map(|k| {
            (
                format!("/r/{k}.txt"),
                format!("source {i} resource {k}\n").into_bytes(),
            )
        })
        .collect();
    let res: Vec<(&str, &[u8])> = bodies
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &res)?;
    Ok(site)
}

/// A pipeline file `NAME.toml` harvesting `url` into its own store.
fn pipeline(dir: &Path, name: &str, store: &Store, url: &str) -> Result<()> {
    pipeline_with(dir, name, store, url, "")
}

/// [`pipeline`] with `extra` lines in its `[[upstream]]`.
fn pipeline_with(dir: &Path, name: &str, store: &Store, url: &str, extra: &str) -> Result<()> {
    std::fs::write(
        dir.join(format!("{name}.toml")),
        format!(
            "[collection]\nname = \"{name}\"\nbase_url = \"http://agg.example.org/{name}/\"\n\n\
             [store]\nurl = \"{}\"\n\n[fetch]\nretries = 0\nconnect_timeout = \"5s\"\n\n\
             [[upstream]]\nname = \"up\"\nurl = \"{url}\"\nallow_private = true\n{extra}\n",
            store.url
        ),
    )?;
    Ok(())
}

impl Fleet {
    /// `n` pipelines `p-00`… over `sites` Sources (pipeline `i` harvests Source `i % sites`).
    fn new(n: usize, sites: usize) -> Result<Fleet> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-e2e-fleet-")
            .tempdir()?;
        let all: Vec<Site> = (0..sites).map(site).collect::<Result<_>>()?;
        let mut stores = BTreeMap::new();
        for i in 0..n {
            let name = format!("p-{i:02}");
            let store = Store::file(&name)?;
            pipeline(
                dir.path(),
                &name,
                &store,
                &all[i % sites].url("/.well-known/resourcesync"),
            )?;
            stores.insert(name, store);
        }
        Ok(Fleet {
            dir,
            stores,
            _sites: all,
        })
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_owned()
    }

    /// How many runs the store of `name` recorded in `stats/history.json` (0: none).
    fn runs(&self, name: &str) -> Result<usize> {
        let url = &self.stores[name].url;
        let dir = url::Url::parse(url)?
            .to_file_path()
            .map_err(|()| anyhow::anyhow!("{url} is not a file URL"))?;
        let path = dir.join("stats/history.json");
        if !path.exists() {
            return Ok(0);
        }
        let h: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        Ok(h["runs"].as_array().map_or(0, Vec::len))
    }
}

/// What one fleet process printed with `--json`: its per-pipeline lines and the closing one.
#[derive(Debug)]
struct FleetOut {
    code: i32,
    pipelines: Vec<Value>,
    fleet: Value,
    /// Read through `Debug`, in the assertions' messages.
    #[allow(dead_code)]
    stderr: String,
}

fn parse(out: std::process::Output) -> Result<FleetOut> {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut pipelines = Vec::new();
    let mut fleet = Value::Null;
    for line in stdout.lines().filter(|l| l.starts_with('{')) {
        let v: Value =
            serde_json::from_str(line).with_context(|| format!("a --json line: {line}"))?;
        if v.get("fleet").is_some() {
            fleet = v["fleet"].clone();
        } else {
            pipelines.push(v);
        }
    }
    ensure!(
        !fleet.is_null(),
        "no closing fleet line; stdout: {stdout}\nstderr: {}",
        common::tail(&stderr, 30)
    );
    Ok(FleetOut {
        code: out.status.code().unwrap_or(-1),
        pipelines,
        fleet,
        stderr: common::tail(&stderr, 30),
    })
}

fn rsagg_run(args: &[&str]) -> Result<Command> {
    let mut cmd = Command::new(rsagg_bin()?);
    cmd.arg("run")
        .args(args)
        .env_remove(rsagg_pipeline::fleet::COMPLETION_INDEX_ENV)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Ok(cmd)
}

/// Four workers, as the four pods of an Indexed Job (`JOB_COMPLETION_INDEX` 0 to 3, the
/// same directory and `--shards 4`), run 24 pipelines at once: every pipeline runs in
/// exactly one of them, once (its store's history has one run), the one rendezvous
/// hashing of its file name gives.
#[test]
fn four_shards_run_every_pipeline_exactly_once() -> Result<()> {
    let fleet = Fleet::new(24, 6)?;
    let dir = fleet.path();
    let dir = dir.to_str().context("path")?;
    let workers: Vec<_> = (0..4)
        .map(|i| {
            rsagg_run(&[
                dir,
                "--once",
                "--json",
                "--shards",
                "4",
                "--max-pipelines",
                "3",
            ])?
            .env(rsagg_pipeline::fleet::COMPLETION_INDEX_ENV, i.to_string())
            .spawn()
            .context("spawning a worker")
        })
        .collect::<Result<_>>()?;
    let outs: Vec<FleetOut> = workers
        .into_iter()
        .map(|w| parse(w.wait_with_output()?))
        .collect::<Result<_>>()?;
    let mut ran: BTreeMap<String, usize> = BTreeMap::new();
    for (i, out) in outs.iter().enumerate() {
        assert_eq!(out.code, 0, "worker {i}: {out:#?}");
        assert_eq!(out.fleet["shard"], format!("{i}/4"), "{out:#?}");
        assert_eq!(out.fleet["exit"], 0);
        let n = out.pipelines.len();
        assert_eq!(out.fleet["pipelines"], n as u64, "{out:#?}");
        assert_eq!(out.fleet["ok"], n as u64, "{out:#?}");
        assert_eq!(out.fleet["other_shards"], (24 - n) as u64, "{out:#?}");
        for p in &out.pipelines {
            assert_eq!(p["verdict"], "ok", "worker {i}: {p}");
            assert_eq!(p["resources"]["created"], 3, "worker {i}: {p}");
            let name = p["collection"].as_str().context("collection")?.to_owned();
            assert_eq!(
                rsagg_pipeline::fleet::shard_of(&name, 4),
                i as u32,
                "{name} ran on the shard its name hashes to"
            );
            *ran.entry(name).or_default() += 1;
        }
    }
    let names: Vec<&String> = fleet.stores.keys().collect();
    assert_eq!(ran.keys().collect::<Vec<_>>(), names, "every pipeline ran");
    assert!(ran.values().all(|&n| n == 1), "each exactly once: {ran:?}");
    for name in fleet.stores.keys() {
        assert_eq!(fleet.runs(name)?, 1, "{name}'s store recorded one run");
    }
    // Every shard had work (24 pipelines over 4 shards).
    assert!(outs.iter().all(|o| !o.pipelines.is_empty()), "{outs:#?}");

    // Again, one shard alone: only its own pipelines run a second time.
    let out = parse(
        rsagg_run(&[dir, "--once", "--json", "--shard", "2/4"])?
            .spawn()?
            .wait_with_output()?,
    )?;
    assert_eq!(out.code, 0, "{out:#?}");
    for name in fleet.stores.keys() {
        let expected = if rsagg_pipeline::fleet::shard_of(name, 4) == 2 {
            2
        } else {
            1
        };
        assert_eq!(fleet.runs(name)?, expected, "{name}");
    }
    // Without the index, `--shards` alone is a usage error and runs nothing.
    let out = rsagg_run(&[dir, "--once", "--shards", "4"])?.output()?;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("JOB_COMPLETION_INDEX"),
        "{out:?}"
    );
    Ok(())
}

/// One process, six pipelines: one whose upstream does not answer, one whose file is
/// invalid. The others run and commit; each pipeline's verdict is reported; the fleet exits
/// 2 (the invalid file comes first: a retry cannot mend it), and 1 once the file is fixed
/// and only the failing upstream remains.
#[test]
fn a_failing_or_invalid_pipeline_never_stops_the_others() -> Result<()> {
    let fleet = Fleet::new(4, 2)?;
    let dir = fleet.path();
    // An upstream on a port nothing listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let down = Store::file("down")?;
    pipeline(
        &dir,
        "down",
        &down,
        &format!("http://{closed}/.well-known/resourcesync"),
    )?;
    std::fs::write(dir.join("broken.toml"), "[collection]\nname = \"broken\"\n")?;
    let d = dir.to_str().context("path")?;
    let out = parse(
        rsagg_run(&[d, "--once", "--json", "--max-pipelines", "2"])?
            .spawn()?
            .wait_with_output()?,
    )?;
    assert_eq!(out.code, 2, "{out:#?}");
    let verdicts: BTreeMap<String, String> = out
        .pipelines
        .iter()
        .map(|p| {
            let file = PathBuf::from(p["file"].as_str().unwrap_or(""));
            (
                rsagg_pipeline::fleet::identity(&file),
                p["verdict"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    let expected: BTreeMap<String, String> = [
        ("broken", "invalid"),
        ("down", "failed"),
        ("p-00", "ok"),
        ("p-01", "ok"),
        ("p-02", "ok"),
        ("p-03", "ok"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(verdicts, expected, "{out:#?}");
    let f = &out.fleet;
    assert_eq!(
        (
            f["pipelines"].as_u64(),
            f["ok"].as_u64(),
            f["failed"].as_u64()
        ),
        (Some(6), Some(4), Some(1)),
        "{out:#?}"
    );
    assert_eq!(f["invalid"], 1);
    for name in ["p-00", "p-01", "p-02", "p-03"] {
        assert_eq!(fleet.runs(name)?, 1, "{name}");
    }
    // The failing one's error names its upstream.
    let failed = out
        .pipelines
        .iter()
        .find(|p| p["verdict"] == "failed")
        .context("failed")?;
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or("")
            .contains("upstream up"),
        "{failed}"
    );

    std::fs::remove_file(dir.join("broken.toml"))?;
    let out = parse(
        rsagg_run(&[d, "--once", "--json"])?
            .spawn()?
            .wait_with_output()?,
    )?;
    assert_eq!(out.code, 1, "{out:#?}");
    assert_eq!(out.fleet["ok"], 4);

    // The human summary says the same, and names the one that failed.
    let human = rsagg_run(&[d, "--once"])?.output()?;
    assert_eq!(human.status.code(), Some(1));
    let text = String::from_utf8_lossy(&human.stdout);
    assert!(
        text.contains("fleet: 5 pipeline(s)") && text.contains("4 ok, 1 failed"),
        "{text}"
    );
    assert!(
        text.contains("failed: ") && text.contains("down.toml"),
        "{text}"
    );
    Ok(())
}

/// Politeness is per host for the whole process: six pipelines harvesting the same Source
/// with `--per-host-rate 10` send it 10 requests a second in all (36 requests: 35 gaps of
/// 100 ms), not 10 each.
#[test]
fn the_request_rate_to_a_host_is_shared_by_the_pipelines() -> Result<()> {
    let fleet = Fleet::new(6, 1)?;
    let dir = fleet.path();
    let d = dir.to_str().context("path")?;
    let t0 = Instant::now();
    let out = parse(
        rsagg_run(&[
            d,
            "--once",
            "--json",
            "--max-pipelines",
            "6",
            "--per-host-rate",
            "10",
        ])?
        .spawn()?
        .wait_with_output()?,
    )?;
    let took = t0.elapsed();
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(out.fleet["ok"], 6);
    // Per pipeline: the Source Description, the Capability List, the Resource List and
    // three resources.
    assert_eq!(fleet._sites[0].fx.total_hits(), 36, "{out:#?}");
    assert!(
        took >= Duration::from_millis(3_400),
        "36 requests to one host at 10/s in all take 3.5 s at least: {took:?}"
    );
    Ok(())
}

/// `--follow` of a fleet: each pipeline is run again at its `poll_interval` (here 1 s), every
/// pass its own run (its store's history grows by one per pass); on SIGTERM the fleet stops
/// and exits 0, its summary counting each pipeline's last pass.
#[test]
fn a_following_fleet_runs_each_pipeline_at_its_poll_interval() -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("rsagg-e2e-fleet-follow-")
        .tempdir()?;
    let src = site(0)?;
    let stores: Vec<(String, Store)> = (0..3)
        .map(|i| Ok((format!("f-{i}"), Store::file(&format!("f-{i}"))?)))
        .collect::<Result<_>>()?;
    for (name, store) in &stores {
        pipeline_with(
            dir.path(),
            name,
            store,
            &src.url("/.well-known/resourcesync"),
            "poll_interval = \"1s\"",
        )?;
    }
    let d = dir.path().to_str().context("path")?;
    let mut child = rsagg_run(&[d, "--follow", "--json", "--max-pipelines", "2"])?.spawn()?;
    let runs = |store: &Store| -> Result<usize> {
        let path = url::Url::parse(&store.url)?
            .to_file_path()
            .map_err(|()| anyhow::anyhow!("not a file URL"))?
            .join("stats/history.json");
        if !path.exists() {
            return Ok(0);
        }
        let h: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        Ok(h["runs"].as_array().map_or(0, Vec::len))
    };
    let t0 = Instant::now();
    loop {
        let counts: Vec<usize> = stores.iter().map(|(_, s)| runs(s)).collect::<Result<_>>()?;
        if counts.iter().all(|&n| n >= 3) {
            break;
        }
        if t0.elapsed() > Duration::from_secs(120) || child.try_wait()?.is_some() {
            let _ = child.kill();
            let out = child.wait_with_output()?;
            anyhow::bail!(
                "passes per pipeline {counts:?} after {:?}; stderr: {}",
                t0.elapsed(),
                common::tail(&String::from_utf8_lossy(&out.stderr), 30)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    ensure!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()?
            .success()
    );
    let out = parse(child.wait_with_output()?)?;
    assert_eq!(out.code, 0, "{out:#?}");
    assert_eq!(out.fleet["pipelines"], 3);
    assert_eq!(out.fleet["ok"], 3, "{out:#?}");
    assert!(out.fleet["passes"].as_u64().unwrap_or(0) >= 9, "{out:#?}");
    // The first pass of each created its resources (printed); the idle ones printed nothing.
    assert_eq!(out.pipelines.len(), 3, "{out:#?}");
    assert!(out.pipelines.iter().all(|p| p["resources"]["created"] == 3));
    Ok(())
}

/// One pipeline of many upstreams (`rsagg run P.toml --once`) harvests at most
/// `--max-upstreams` of them at once, as a fleet does: each upstream's harvest holds its
/// parsers, buffers and connections, and a pipeline of 1,000 upstreams harvesting them all at
/// once peaked at 688 MiB. Six Sources answer their Resource List after 300 ms; with
/// `--max-upstreams 2` no more than two of those requests are ever answered at once (an
/// upstream holds its slot until its harvest ends, after its list's answer), where all six
/// overlapped before.
#[test]
fn one_pipeline_harvests_at_most_max_upstreams_at_once() -> Result<()> {
    let sites: Vec<Site> = (0..6).map(site).collect::<Result<_>>()?;
    for s in &sites {
        s.fx.set_delay("/resourcelist.xml", Duration::from_millis(300));
    }
    let dir = tempfile::Builder::new()
        .prefix("rsagg-e2e-fleet-")
        .tempdir()?;
    let store = Store::file("many-upstreams")?;
    let mut text = format!(
        "[collection]\nname = \"many\"\nbase_url = \"http://agg.example.org/many/\"\n\n\
         [store]\nurl = \"{}\"\n\n[fetch]\nretries = 0\n",
        store.url
    );
    for (i, s) in sites.iter().enumerate() {
        text.push_str(&format!(
            "\n[[upstream]]\nname = \"up-{i}\"\nurl = \"{}\"\nallow_private = true\n",
            s.url("/.well-known/resourcesync")
        ));
    }
    let file = dir.path().join("many.toml");
    std::fs::write(&file, text)?;
    let out = rsagg_run(&[
        file.to_str().context("path")?,
        "--once",
        "--json",
        "--max-upstreams",
        "2",
    ])?
    .output()?;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        common::tail(&String::from_utf8_lossy(&out.stderr), 30)
    );
    let lists: Vec<(Instant, Instant)> = sites
        .iter()
        .flat_map(|s| s.fx.requests())
        .filter(|r| r.path == "/resourcelist.xml")
        .map(|r| (r.received, r.answered))
        .collect();
    assert_eq!(lists.len(), 6, "each Source's Resource List read once");
    // The most lists in flight at once: at each arrival, those arrived and not yet answered.
    let most = lists
        .iter()
        .map(|(t, _)| lists.iter().filter(|(r, a)| r <= t && a > t).count())
        .max()
        .unwrap_or(0);
    assert!(
        most <= 2,
        "{most} upstreams' Resource Lists were read at once with --max-upstreams 2"
    );
    Ok(())
}
