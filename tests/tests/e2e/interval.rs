//! The Resource List on an interval (issue 46): `[publish] resourcelist = "interval"`
//! publishes a snapshot (spec 10.1: the resources "at a particular point in time", its
//! `md:at`) and, until it is `resourcelist_every` old, Change Lists only. The reference
//! Destination `resync-sync` baselines from that snapshot, older than the changes since,
//! applies the Change List from its `at` on, and is then in sync with the collection.
//!
//! The day itself is injected in-process (`rsagg-publish`'s `interval_tests.rs`, on the
//! state's manual clock: a day of hourly runs, Change List retention kept from the
//! snapshot's `at`); here the real binaries and the real client.
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e interval:: -- --test-threads=2`.

use crate::common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use rsagg_e2e::{RsaggServer, resync_sync};
use rsagg_model::W3cDateTime;

/// The snapshot on an interval of a day: no run of this test makes it due.
const DAILY: &str = "[publish]\nresourcelist = \"interval\"\nresourcelist_every = \"1d\"\n";

/// A Source with a Resource List and an (empty) Change List: a, b, c.
fn source() -> Result<Site> {
    let site = Site::new()?;
    let v1: Vec<(&str, &[u8])> = vec![
        ("/res/a.txt", b"alpha"),
        ("/res/b.txt", b"bravo"),
        ("/res/c.txt", b"charlie"),
    ];
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &v1,
    )?;
    site.changes("/changelist.xml", "changelist", "2025-12-31T00:00:00Z", &[])?;
    Ok(site)
}

/// Upstream changes: b updated, c deleted, d created, in its Change List.
fn change(site: &Site) -> Result<()> {
    site.write("/res/b.txt", "bravo-2")?;
    site.write("/res/d.txt", "delta")?;
    site.fx.remove("/res/c.txt")?;
    site.changes(
        "/changelist.xml",
        "changelist",
        "2025-12-31T00:00:00Z",
        &[
            change_item(
                &site.url("/res/b.txt"),
                "updated",
                "2026-01-02T00:00:00Z",
                Some(b"bravo-2"),
            ),
            change_item(
                &site.url("/res/c.txt"),
                "deleted",
                "2026-01-02T00:01:00Z",
                None,
            ),
            change_item(
                &site.url("/res/d.txt"),
                "created",
                "2026-01-02T00:02:00Z",
                Some(b"delta"),
            ),
        ],
    )?;
    Ok(())
}

#[test]
fn resync_sync_baselines_from_an_interval_snapshot_and_the_change_list_brings_it_in_sync()
-> Result<()> {
    let site = source()?;
    let (case, port) = Case::on_loopback("agg", &site, "", DAILY)?;
    let base = case.base_url.clone();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    let dir = store_dir(&case)?;
    let snapshot = std::fs::read(dir.join("resourcelist.xml"))?;
    let at = header_at(&dir.join("resourcelist.xml"))?;

    // Upstream changes: b updated, c deleted, d created. The run publishes them in the
    // Change List; the snapshot stays as it was.
    change(&site)?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    assert_eq!(
        std::fs::read(dir.join("resourcelist.xml"))?,
        snapshot,
        "the snapshot is not due: left as published"
    );
    let report = run.report.as_ref().context("a run report")?;
    assert_eq!(report["publish"]["resource_list_parts"], 0, "{run:#?}");

    let server = RsaggServer::start(port, &[&case.toml], &case.store.env()?)?;
    let work = tempfile::tempdir()?;
    let dst = work.path().join("dst");
    let dst_s = dst.to_str().context("utf-8")?.to_owned();
    let source_url = format!("{}/agg", server.origin());
    // The baseline from the snapshot: a, b and c as listed at its `at`. c was deleted
    // since, and its copy answers 404 (rsagg serves what was published last, and the
    // Change List says it is gone): a Destination on an interval list meets such
    // resources, which the Change Lists since the `at` account for.
    let out = resync_sync(
        [
            "--baseline",
            "--delete",
            "--ignore-failures",
            &source_url,
            &dst_s,
        ],
        work.path(),
    )?;
    ensure!(
        out.status_is("SYNCED") && out.status().unwrap_or("").contains("created=2"),
        "{}",
        out.combined()
    );
    let combined = out.combined();
    ensure!(
        combined.contains("c.txt") && !combined.contains("a.txt --"),
        "the one failure is c's 404: {combined}"
    );
    let local = |path: &str| -> PathBuf {
        let rest = site.url(path).replacen("://", "/", 1);
        dst.join(format!("r/{UP}/{rest}"))
    };
    assert_eq!(std::fs::read(local("/res/a.txt"))?, b"alpha");
    // Served as the Change List describes it, not as the snapshot's entry did.
    assert_eq!(std::fs::read(local("/res/b.txt"))?, b"bravo-2");

    // The Change List from the snapshot's `at` on (resync-sync cannot read a Change List
    // Index: the open list's alias).
    let open = format!("{base}changelist-open.xml");
    let out = resync_sync(
        [
            "--incremental",
            "--delete",
            "--changelist-uri",
            &open,
            "--from",
            &at,
            &source_url,
            &dst_s,
        ],
        work.path(),
    )?;
    assert!(!out.failed(), "{}", out.combined());
    assert_eq!(std::fs::read(local("/res/b.txt"))?, b"bravo-2");
    assert_eq!(std::fs::read(local("/res/d.txt"))?, b"delta");
    assert!(!local("/res/c.txt").exists());

    // A snapshot taken now lists exactly what the Destination holds: the interval made
    // one second, once the snapshot is that old (its `at` is the state's clock, the
    // system one here).
    let tail = DAILY.replace("\"1d\"", "\"1s\"");
    let toml = std::fs::read_to_string(&case.toml)?.replace(DAILY, &tail);
    std::fs::write(&case.toml, toml)?;
    let at_time = W3cDateTime::parse(&at)?.value;
    let deadline = Instant::now() + Duration::from_secs(10);
    while W3cDateTime::now().unix_nanos() - at_time.unix_nanos() <= 1_000_000_000 {
        ensure!(Instant::now() < deadline, "the clock did not move");
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    ensure!(
        std::fs::read(dir.join("resourcelist.xml"))? != snapshot,
        "rebuilt once due"
    );
    let out = resync_sync(
        ["--audit", "--hash", "md5", &source_url, &dst_s],
        work.path(),
    )?;
    assert!(
        out.status_is("IN SYNC"),
        "{:?}\n{}\nserver log:\n{}",
        out.status(),
        out.combined(),
        server.log_tail(20)
    );
    Ok(())
}

/// A run of the second aggregator (its upstream is named `first`): created, updated and
/// deleted, after checking it succeeded.
fn second(b: &Case) -> Result<(u64, u64, u64)> {
    let run = b.run()?;
    let up = &run.report.as_ref().context("a run report")?["upstreams"][0];
    ensure!(run.code == 0 && up["verdict"] == "ok", "{run:#?}");
    let n = |k: &str| up[k].as_u64().unwrap_or(u64::MAX);
    Ok((n("created"), n("updated"), n("deleted")))
}

/// rsagg harvesting an rsagg on the interval: its baseline comes from the snapshot, its
/// next run from the Change List since the snapshot's `at` (spec 12.1), and `audit` and
/// `--dry-run`, which read the upstream's state as its Resource List plus the changes after
/// the list's `at`, find it in sync and plan nothing, as for a patched list.
#[test]
fn an_aggregator_of_an_interval_list_audits_in_sync_and_plans_nothing() -> Result<()> {
    let site = source()?;
    let (a, port) = Case::on_loopback("first", &site, "", DAILY)?;
    a.run()?.assert_ok();
    let _served = RsaggServer::start(port, &[&a.toml], &a.store.env()?)?;
    let b = Case::published_at(
        Store::file("interval-b")?,
        &[upstream(
            "first",
            &format!("http://127.0.0.1:{port}/.well-known/resourcesync"),
            "",
        )],
        "http://agg2.example.org/second/",
        "",
    )?;
    assert_eq!(second(&b)?, (3, 0, 0));

    let snapshot = std::fs::read(store_dir(&a)?.join("resourcelist.xml"))?;
    change(&site)?;
    let run = a.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    assert_eq!(
        std::fs::read(store_dir(&a)?.join("resourcelist.xml"))?,
        snapshot,
        "the first one's snapshot is not due"
    );
    assert_eq!(second(&b)?, (1, 1, 1), "from the Change List");

    let toml = b.toml.to_string_lossy().into_owned();
    let (code, out, err) = rsagg(&["audit", &toml, "--json"])?;
    let report: serde_json::Value =
        serde_json::from_str(out.trim()).with_context(|| format!("{out}{err}"))?;
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["in_sync"], true, "{report:#}");
    let (code, out, err) = rsagg(&["run", &toml, "--dry-run", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: serde_json::Value = serde_json::from_str(out.trim())?;
    let up = &plan["upstreams"][0];
    assert_eq!(
        (&up["create"], &up["update"], &up["delete"]),
        (&0.into(), &0.into(), &0.into()),
        "{plan:#}"
    );
    Ok(())
}

/// The crash suite's way (a kill at a point read from the store the run writes, no hook in
/// rsagg), on a snapshot rebuild: `rsagg run` killed with SIGKILL once the rebuild has
/// written some of its parts leaves the previous snapshot published, its index and every
/// part it names there and valid (`rsagg validate --strict`), its copies served; the next
/// run rebuilds it whole.
#[test]
fn a_rebuild_killed_mid_way_leaves_the_previous_snapshot_published_and_valid() -> Result<()> {
    let site = Site::new()?;
    let names: Vec<String> = (0..4000).map(|i| format!("/res/{i}.txt")).collect();
    let res: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), n.as_bytes())).collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &res)?;
    // 4,096 parts of about one entry: a rebuild writes thousands of objects, time enough
    // to be cut in the middle.
    let tail = "[publish]\nresourcelist = \"interval\"\nresourcelist_every = \"1s\"\nresourcelist_part_entries = 2\n";
    let (case, port) = Case::on_loopback("killed", &site, "", tail)?;
    let run = case.run()?;
    run.assert_ok();
    let dir = store_dir(&case)?;
    let parts = dir.join("resourcelist");
    let generation = |g: u64| -> Result<usize> {
        let suffix = format!("-g{g}.xml");
        Ok(std::fs::read_dir(&parts)?
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(&suffix))
            .count())
    };
    let mut cut = false;
    for attempt in 2..6u64 {
        let index = std::fs::read(dir.join("resourcelist.xml"))?;
        let at = W3cDateTime::parse(&header_at(&dir.join("resourcelist.xml"))?)?.value;
        wait_until(Duration::from_secs(10), || {
            Ok(W3cDateTime::now().unix_nanos() - at.unix_nanos() > 1_000_000_000)
        })?;
        // The snapshot is due: the next run rebuilds it, as generation `attempt`.
        let running = case.spawn_run(&[] as &[(&str, String)])?;
        let start = Instant::now();
        while generation(attempt)? < 16 && start.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(running);
        if std::fs::read(dir.join("resourcelist.xml"))? == index {
            assert!(generation(attempt)? >= 16, "the rebuild had begun");
            cut = true;
            break;
        }
        // The rebuild ended before the kill: the next one is tried.
    }
    ensure!(cut, "no rebuild was cut in four attempts");
    let top = dir.join("resourcelist.xml");
    let (code, out, err) = rsagg(&[
        "validate",
        "--strict",
        "--json",
        top.to_str().context("utf-8")?,
    ])?;
    assert_eq!(code, 0, "{out}{err}");
    let index = std::fs::read_to_string(&top)?;
    let named: Vec<&str> = index
        .split("<loc>")
        .skip(1)
        .filter_map(|l| l.split("</loc>").next())
        .collect();
    assert_eq!(named.len(), 4096, "the previous index, whole");
    for loc in named.iter().step_by(97) {
        let rel = loc
            .strip_prefix(&case.base_url)
            .context("part under the base")?;
        let (code, out, err) = rsagg(&[
            "validate",
            "--strict",
            "--json",
            dir.join(rel).to_str().context("utf-8")?,
        ])?;
        assert_eq!(code, 0, "{rel}: {out}{err}");
    }
    // Its copies are served.
    let server = RsaggServer::start(port, &[&case.toml], &case.store.env()?)?;
    let copy = format!(
        "{}/killed/r/{UP}/{}",
        server.origin(),
        site.url("/res/17.txt").replacen("://", "/", 1)
    );
    let (status, body) = http_get(&copy)?;
    assert_eq!((status, &body[..]), (200, &b"/res/17.txt"[..]));

    // The store is consistent: the next run completes the rebuild.
    let run = case.run()?;
    run.assert_ok();
    ensure!(std::fs::read_to_string(&top)? != index, "rebuilt");
    let (code, out, err) = rsagg(&[
        "validate",
        "--strict",
        "--json",
        top.to_str().context("utf-8")?,
    ])?;
    assert_eq!(code, 0, "{out}{err}");
    Ok(())
}
