//! End-to-end tests of republishing (issue "Republish"): rsagg harvests static fixture
//! Sources, publishes its own documents into a `file://` store, `rsagg serve` serves them,
//! and the reference Destination `resync-sync` synchronises from rsagg (baseline,
//! incremental, audit); a second rsagg harvesting the first keeps the original `via`.
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e republish:: -- --test-threads=2`.

use crate::common;

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use common::*;
use rsagg_e2e::{ResyncOutput, RsaggServer, resync_sync};
use rsagg_model::{Link, Mode, UrlEntry};
use rsagg_sitemap::ReadOptions;

/// (path, body) pairs from string literals.
fn res<'a>(v: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a [u8])> {
    v.iter().map(|(p, b)| (*p, b.as_bytes())).collect()
}

/// Every XML document rsagg published (everything but its state, blobs and metadata).
fn published_documents(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let p = e?.path();
            let rel = p.strip_prefix(dir)?.to_string_lossy().into_owned();
            if ["state", "blobs", "published", "stats"]
                .iter()
                .any(|x| rel == *x || rel.starts_with(&format!("{x}/")))
            {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "xml") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// `rsagg validate --strict --json` on every published document: all valid, no errors.
fn assert_all_valid(case: &Case) -> Result<Vec<PathBuf>> {
    let docs = published_documents(&store_dir(case)?)?;
    for d in &docs {
        let (code, stdout, stderr) = rsagg(&[
            "validate",
            "--strict",
            "--json",
            d.to_str().context("utf-8")?,
        ])?;
        let v: serde_json::Value = serde_json::from_str(stdout.trim())
            .with_context(|| format!("{}: {stdout}{stderr}", d.display()))?;
        assert_eq!(code, 0, "{}: {stdout}", d.display());
        assert_eq!(v["valid"], true, "{}: {stdout}", d.display());
        let errors: Vec<_> = v["problems"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| p["severity"] == "error")
            .collect();
        assert!(errors.is_empty(), "{}: {errors:?}", d.display());
    }
    Ok(docs)
}

/// The entries of a published document (file in the store).
fn entries(path: &Path) -> Result<Vec<UrlEntry>> {
    let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
    let opts = ReadOptions::new(Mode::Strict, path.display().to_string());
    Ok(rsagg_sitemap::read_document(&bytes, opts)?.entries)
}

/// Every entry of the Resource List, following the index when there is one.
fn resource_list(case: &Case) -> Result<Vec<UrlEntry>> {
    let dir = store_dir(case)?;
    let top = entries(&dir.join("resourcelist.xml"))?;
    if top.iter().all(|e| !e.loc.ends_with(".xml")) {
        return Ok(top);
    }
    let mut all = Vec::new();
    for part in top {
        let rel = part
            .loc
            .strip_prefix(&case.base_url)
            .context("part outside the base")?;
        all.extend(entries(&dir.join(rel))?);
    }
    Ok(all)
}

fn via(e: &UrlEntry) -> Vec<&Link> {
    e.links.iter().filter(|l| l.rel == "via").collect()
}

fn status_has(out: &ResyncOutput, word: &str, counts: &str) {
    assert!(
        out.status_is(word) && out.status().unwrap_or("").contains(counts),
        "expected {word} ({counts}), got {:?}\n{}",
        out.status(),
        out.combined()
    );
}

/// A Source with a Resource List and an (empty) Change List, three resources.
fn source() -> Result<Site> {
    let site = Site::new()?;
    let v1 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
    ]);
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

#[test]
fn resync_sync_baseline_incremental_and_audit_against_rsaggs_output() -> Result<()> {
    let site = source()?;
    let (case, port) = Case::on_loopback("agg", &site, "", "")?;
    let base = case.base_url.clone();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    let docs = assert_all_valid(&case)?;
    let names: Vec<String> = docs
        .iter()
        .map(|d| d.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for must in [
        "capabilitylist.xml",
        "resourcelist.xml",
        "changelist.xml",
        "changelist-open.xml",
        "sourcedescription.xml",
    ] {
        assert!(names.iter().any(|n| n == must), "{must} in {names:?}");
    }
    let server = RsaggServer::start(port, &[&case.toml], &case.store.env()?)?;

    let work = tempfile::tempdir()?;
    let dst = work.path().join("dst");
    let dst_s = dst.to_str().context("utf-8")?.to_owned();
    let source_url = format!("{}/agg", server.origin());
    let out = resync_sync(["--baseline", "--delete", &source_url, &dst_s], work.path())?;
    status_has(&out, "SYNCED", "created=3");
    // rsagg's URI of a copy → the file resync-sync wrote for it.
    let local = |path: &str| -> PathBuf {
        let upstream = site.url(path);
        let rest = upstream.replacen("://", "/", 1);
        dst.join(format!("r/{UP}/{rest}"))
    };
    assert_eq!(std::fs::read(local("/res/a.txt"))?, b"alpha");
    assert_eq!(std::fs::read(local("/res/c.txt"))?, b"charlie");
    // The Resource List's `at`: changes from then on are what the incremental sync needs
    // (spec 12.1). resync-sync would start from the largest `lastmod` it saw instead, which
    // is the datetime of the last baseline change itself; with that one a later deletion of
    // the same resource is pruned as "created then deleted" (resource_container.py
    // prune_dupes) and the deletion never applied.
    let at = header_at(&store_dir(&case)?.join("resourcelist.xml"))?;

    // Upstream changes: b updated, c deleted, d created.
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
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    assert_all_valid(&case)?;

    // resync-sync cannot read a Change List Index: it is given the open list's alias.
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
    // resync-sync logs what it will apply (`CHANGES APPLIED (…)`), then what it applied,
    // under a `NO CHANGES` label whatever happened (client.py's final log_status call).
    assert!(
        out.status_lines
            .iter()
            .any(|l| l.starts_with("CHANGES APPLIED (created=1, updated=1, deleted=1)")),
        "{}",
        out.combined()
    );
    assert!(
        out.status()
            .is_some_and(|s| s.ends_with("(created=1, updated=1, deleted=1)")),
        "{}",
        out.combined()
    );
    assert_eq!(std::fs::read(local("/res/b.txt"))?, b"bravo-2");
    assert_eq!(std::fs::read(local("/res/d.txt"))?, b"delta");
    assert!(!local("/res/c.txt").exists(), "the deletion was applied");

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

#[test]
fn entries_carry_via_provenance_and_a_chain_keeps_the_original_via() -> Result<()> {
    let site = source()?;
    let (a, port) = Case::on_loopback("first", &site, "", "")?;
    let base_a = a.base_url.clone();
    a.run()?.assert_ok();
    let list_a = resource_list(&a)?;
    assert_eq!(list_a.len(), 3);
    for e in &list_a {
        assert!(e.loc.starts_with(&base_a), "{}", e.loc);
        let v = via(e);
        assert_eq!(v.len(), 1, "{e:?}");
        assert!(v[0].href.starts_with(&site.url("/res/")), "{:?}", v[0]);
        assert_eq!(
            v[0].modified.map(|m| m.to_string()).as_deref(),
            Some(LASTMOD),
            "via@modified is the upstream's lastmod"
        );
        assert!(v[0].hash.is_some() && v[0].length.is_some(), "{:?}", v[0]);
        // rsagg's own lastmod, not the upstream's.
        assert_ne!(e.lastmod.map(|m| m.to_string()).as_deref(), Some(LASTMOD));
    }
    let _served = RsaggServer::start(port, &[&a.toml], &a.store.env()?)?;

    // A second aggregator harvests the first through its served Source Description.
    let b = Case::published_at(
        Store::file("chain-b")?,
        &[upstream(
            "first",
            &format!("http://127.0.0.1:{port}/.well-known/resourcesync"),
            "",
        )],
        "http://agg2.example.org/second/",
        "",
    )?;
    let run = b.run()?;
    assert_eq!(run.code, 0, "{run:#?}");
    assert_all_valid(&b)?;
    let list_b = resource_list(&b)?;
    assert_eq!(list_b.len(), 3);
    for e in &list_b {
        assert!(e.loc.starts_with("http://agg2.example.org/second/r/first/"));
        let v = via(e);
        assert_eq!(v.len(), 1, "exactly one via: {e:?}");
        let original = list_a
            .iter()
            .flat_map(|a| via(a))
            .find(|l| l.href == v[0].href)
            .with_context(|| format!("{:?} is not an original via", v[0]))?;
        assert_eq!(v[0], original, "the upstream's via is kept unchanged");
    }
    Ok(())
}

#[test]
fn several_upstreams_feed_one_collection_and_serve_lists_every_pipeline() -> Result<()> {
    let s1 = source()?;
    let s2 = source()?;
    let port = RsaggServer::pick_port()?;
    let base_one = format!("http://127.0.0.1:{port}/one/");
    let one = Case::published_at(
        Store::file("multi-one")?,
        &[
            upstream("east", &s1.url("/.well-known/resourcesync"), ""),
            upstream("west", &s2.url("/.well-known/resourcesync"), ""),
        ],
        &base_one,
        "",
    )?;
    let run = one.run()?;
    assert_eq!(run.code, 0, "{run:#?}");
    let list = resource_list(&one)?;
    assert_eq!(list.len(), 6, "both upstreams' resources");
    let mut locs: Vec<&str> = list.iter().map(|e| e.loc.as_str()).collect();
    locs.sort();
    locs.dedup();
    assert_eq!(locs.len(), 6, "collision-free URIs");
    for up in ["east", "west"] {
        let prefix = format!("{base_one}r/{up}/");
        assert_eq!(locs.iter().filter(|l| l.starts_with(&prefix)).count(), 3);
    }

    let base_two = format!("http://127.0.0.1:{port}/two/");
    let two = Case::published_at(
        Store::file("multi-two")?,
        &[upstream(UP, &s1.url("/.well-known/resourcesync"), "")],
        &base_two,
        "",
    )?;
    assert_eq!(two.run()?.code, 0);
    let server = RsaggServer::start(port, &[&one.toml, &two.toml], &[])?;
    let (code, body) = http_get(&format!("{}/.well-known/resourcesync", server.origin()))?;
    assert_eq!(code, 200);
    let body = String::from_utf8(body)?;
    for b in [&base_one, &base_two] {
        assert!(
            body.contains(&format!("<loc>{b}capabilitylist.xml</loc>")),
            "{body}"
        );
    }
    let (code, robots) = http_get(&format!("{}/robots.txt", server.origin()))?;
    assert_eq!(code, 200);
    let robots = String::from_utf8(robots)?;
    for b in [&base_one, &base_two] {
        assert!(
            robots.contains(&format!("Sitemap: {b}resourcelist.xml")),
            "{robots}"
        );
    }
    // A copy, served with its Link to the Capability List (spec 6.3.3).
    let copy = list
        .iter()
        .find(|e| e.loc.ends_with("/res/a.txt"))
        .context("a.txt")?;
    let (code, bytes) = http_get(&copy.loc)?;
    ensure!(code == 200, "GET {} → {code}", copy.loc);
    assert_eq!(bytes, b"alpha");
    Ok(())
}

#[test]
fn closed_change_lists_an_index_and_change_dumps_are_published_valid_and_served() -> Result<()> {
    let site = source()?;
    let (case, port) = Case::on_loopback(
        "small",
        &site,
        "",
        "[publish]\nchangelist_max_entries = 2\n",
    )?;
    let base = case.base_url.clone();
    case.run()?.assert_ok();
    site.write("/res/a.txt", "alpha-2")?;
    site.write("/res/b.txt", "bravo-2")?;
    site.changes(
        "/changelist.xml",
        "changelist",
        "2025-12-31T00:00:00Z",
        &[
            change_item(
                &site.url("/res/a.txt"),
                "updated",
                "2026-01-02T00:00:00Z",
                Some(b"alpha-2"),
            ),
            change_item(
                &site.url("/res/b.txt"),
                "updated",
                "2026-01-03T00:00:00Z",
                Some(b"bravo-2"),
            ),
        ],
    )?;
    case.run()?.assert_ok();
    assert_all_valid(&case)?;
    let dir = store_dir(&case)?;

    // Five changes, at most two per list: two closed lists and the open one, in an index in
    // forward chronological order whose closed parts' `until` is the next part's `from`.
    let index = std::fs::read_to_string(dir.join("changelist.xml"))?;
    assert!(index.contains("<sitemapindex"), "{index}");
    let parts = entries(&dir.join("changelist.xml"))?;
    assert_eq!(parts.len(), 3, "{index}");
    for w in parts.windows(2) {
        let (a, b) = (w[0].md.as_ref().unwrap(), w[1].md.as_ref().unwrap());
        assert_eq!(a.until, b.from, "{index}");
    }
    assert!(parts[0].md.as_ref().unwrap().until.is_some(), "closed");
    assert!(
        parts[2].md.as_ref().unwrap().until.is_none(),
        "the open one"
    );
    let open = std::fs::read(dir.join("changelist-open.xml"))?;
    let open_part = parts[2].loc.strip_prefix(&base).context("open part")?;
    assert_eq!(open, std::fs::read(dir.join(open_part))?, "the alias");

    // A Change Dump package per closed list, with its manifest, but for the first: its
    // changes (the baseline's creations) are in the Resource Dump the first run built, where
    // a Destination starting from scratch gets them.
    let dumps = entries(&dir.join("changedump.xml"))?;
    assert_eq!(dumps.len(), 1, "one per closed list after the baseline");
    let dump_md = dumps[0].md.as_ref().context("rs:md")?;
    assert_eq!(
        dump_md.from,
        parts[1].md.as_ref().unwrap().from,
        "the second list's"
    );
    let caps = std::fs::read_to_string(dir.join("capabilitylist.xml"))?;
    for doc in [
        "resourcelist.xml",
        "changelist.xml",
        "resourcedump.xml",
        "changedump.xml",
    ] {
        assert!(caps.contains(&format!("{base}{doc}")), "{caps}");
    }

    // Everything the Capability List leads to is served.
    let server = RsaggServer::start(port, &[&case.toml], &case.store.env()?)?;
    let mut urls: Vec<String> = parts.iter().map(|p| p.loc.clone()).collect();
    for d in &dumps {
        urls.push(d.loc.clone());
        urls.extend(
            d.links
                .iter()
                .filter(|l| l.rel == "contents")
                .map(|l| l.href.clone()),
        );
    }
    for u in &urls {
        let (code, _) = http_get(u)?;
        assert_eq!(code, 200, "{u}\n{}", server.log_tail(10));
    }
    Ok(())
}

/// Kills the child (by PID) if the test ends before it exits.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn run_follow_listen_serves_what_it_publishes_and_stops_on_sigterm() -> Result<()> {
    let site = source()?;
    let (case, port) = Case::on_loopback("live", &site, "poll_interval = \"1s\"", "")?;
    let base = case.base_url.clone();
    let child = std::process::Command::new(rsagg_e2e::rsagg_bin()?)
        .arg("run")
        .arg(&case.toml)
        .args(["--follow", "--listen", &format!("127.0.0.1:{port}")])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut child = KillOnDrop(child);
    let mut stdout = std::io::BufReader::new(child.0.stdout.take().context("stdout")?);
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line)?;
    assert_eq!(line.trim(), format!("listening http://127.0.0.1:{port}"));

    // The first pass publishes; the copies are then served by the same process.
    let copy = format!(
        "{base}r/{UP}/{}",
        site.url("/res/a.txt").replacen("://", "/", 1)
    );
    let t0 = std::time::Instant::now();
    loop {
        let (code, body) = http_get(&copy)?;
        if code == 200 {
            assert_eq!(body, b"alpha");
            break;
        }
        ensure!(t0.elapsed().as_secs() < 30, "{copy} never served ({code})");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // A change upstream shows at the next poll.
    site.write("/res/b.txt", "bravo-2")?;
    site.changes(
        "/changelist.xml",
        "changelist",
        "2025-12-31T00:00:00Z",
        &[change_item(
            &site.url("/res/b.txt"),
            "updated",
            "2026-01-02T00:00:00Z",
            Some(b"bravo-2"),
        )],
    )?;
    let copy_b = copy.replace("/res/a.txt", "/res/b.txt");
    let t0 = std::time::Instant::now();
    loop {
        let (_, body) = http_get(&copy_b)?;
        if body == b"bravo-2" {
            break;
        }
        ensure!(t0.elapsed().as_secs() < 30, "the update never showed");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    // SIGTERM: the process stops within its bound, exit 0 (the last pass went well).
    let pid = child.0.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()?;
    ensure!(killed.success());
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.0.try_wait()? {
            break s;
        }
        ensure!(t0.elapsed().as_secs() < 40, "still running after SIGTERM");
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert_eq!(status.code(), Some(0), "{status:?}");
    Ok(())
}
