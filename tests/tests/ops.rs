//! End-to-end tests of the operator commands (`docs/contract.md`): `rsagg audit`,
//! `rsagg run --dry-run`, `rsagg run --baseline`, `rsagg quarantine list|retry`,
//! `rsagg gc --force`, against static fixture Sources (FixtureServer) and real stores
//! (`file://`, and SeaweedFS for the audit). Every assertion reads back real effects: exit
//! codes, the `--json` reports, state records, blobs, the store's files.
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test ops -- --test-threads=2`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};
use common::*;
use rsagg_e2e::rsagg_bin;
use serde_json::Value;

/// `rsagg ARGS…` with the case's store environment: (exit code, stdout, stderr).
fn cmd(case: &Case, args: &[&str]) -> Result<(i32, String, String)> {
    let out = Command::new(rsagg_bin()?)
        .args(args)
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .envs(case.store.env()?)
        .output()
        .context("running rsagg")?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// `rsagg audit PIPELINE --json` plus `args`: (exit code, report).
fn audit(case: &Case, args: &[&str]) -> Result<(i32, Value)> {
    let toml = case.toml.to_string_lossy().into_owned();
    let mut all = vec!["audit", toml.as_str(), "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = cmd(case, &all)?;
    let report: Value = serde_json::from_str(out.trim())
        .with_context(|| format!("audit output is not JSON: {out}\n{}", tail(&err, 20)))?;
    Ok((code, report))
}

/// The discrepancies of an audit report as sorted `kind path` strings (paths relative to
/// the site).
fn items(site: &Site, report: &Value) -> Vec<String> {
    let base = site.url("");
    let mut v: Vec<String> = report["items"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| {
                    let uri = i["uri"].as_str().unwrap_or("");
                    format!(
                        "{} {}",
                        i["kind"].as_str().unwrap_or("?"),
                        uri.strip_prefix(base.trim_end_matches('/')).unwrap_or(uri)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Every file under `dir` with its bytes (a store's complete content).
fn listing(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            if e.file_type()?.is_dir() {
                todo.push(e.path());
            } else {
                let rel = e.path().strip_prefix(dir)?.to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(e.path())?);
            }
        }
    }
    Ok(out)
}

/// The file of a blob in a `file://` store.
fn blob_file(case: &Case, sha256: &str) -> Result<std::path::PathBuf> {
    Ok(store_dir(case)?
        .join("blobs/sha256")
        .join(&sha256[..2])
        .join(sha256))
}

/// The stored copy's SHA-256 of the resource at `path`.
fn copy_of(case: &Case, site: &Site, path: &str) -> Result<String> {
    let snap = case.snapshot(UP)?;
    let r = snap
        .records
        .get(&site.url(path))
        .with_context(|| format!("no record of {path}"))?;
    Ok(r.copy.as_ref().context("no copy")?.sha256.clone())
}

/// A Source with a Resource List and an empty Change List (so a run after the baseline is
/// incremental and fetches nothing), serving `res`.
fn with_changelist(res: &[(&str, &[u8])]) -> Result<Site> {
    let site = Site::new()?;
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        res,
    )?;
    site.changes("/changelist.xml", "changelist", T0, &[])?;
    Ok(site)
}

const A: (&str, &[u8]) = ("/res/a.txt", b"alpha");
const B: (&str, &[u8]) = ("/res/b.txt", b"bravo");
const C: (&str, &[u8]) = ("/res/c.txt", b"charlie");

fn audit_finds_what_differs(store: Store) -> Result<()> {
    let site = with_changelist(&[A, B, C])?;
    let case = Case::new(store, &site.url("/.well-known/resourcesync"), "")?;
    case.run()?.assert_ok();

    // In sync: exit 0, the JSON shape of the contract.
    let (code, r) = audit(&case, &[])?;
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["in_sync"], true, "{r:#}");
    assert_eq!(r["collection"], "e2e");
    assert_eq!(r["checks"], serde_json::json!(["lists"]));
    let up = &r["upstreams"][0];
    assert_eq!(up["name"], UP);
    assert_eq!(up["sets"], 1);
    assert_eq!(up["listed"], 3);
    for k in ["missing", "extra", "changed", "corrupt"] {
        assert_eq!(up[k], 0, "{k}: {r:#}");
    }
    assert_eq!(up["extra_checked"], true);
    assert_eq!(up["errors"], serde_json::json!([]));
    assert_eq!(r["items"], serde_json::json!([]));
    assert_eq!(r["items_truncated"], false);
    let (code, r) = audit(&case, &["--read-data"])?;
    assert_eq!(
        (code, r["in_sync"].clone()),
        (0, Value::Bool(true)),
        "{r:#}"
    );
    assert_eq!(r["checks"], serde_json::json!(["lists", "read-data"]));
    // The text form says so too.
    let toml = case.toml.to_string_lossy().into_owned();
    let (code, out, _) = cmd(&case, &["audit", &toml])?;
    assert_eq!(code, 0);
    assert!(out.ends_with("IN SYNC\n"), "{out}");

    // Upstream changes its list: c changed, d new, a no longer listed.
    site.write("/res/c.txt", "charlie 2")?;
    site.write("/res/d.txt", "delta")?;
    let listed: [(&str, &[u8]); 3] = [B, ("/res/c.txt", b"charlie 2"), ("/res/d.txt", b"delta")];
    site.resource_list("/resourcelist.xml", "/capabilitylist.xml", T0, &listed)?;
    let (code, r) = audit(&case, &[])?;
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(r["in_sync"], false);
    assert_eq!(
        items(&site, &r),
        [
            "changed /res/c.txt",
            "extra /res/a.txt",
            "missing /res/d.txt"
        ],
        "{r:#}"
    );
    let up = &r["upstreams"][0];
    assert_eq!(
        (&up["missing"], &up["extra"], &up["changed"], &up["corrupt"]),
        (&1.into(), &1.into(), &1.into(), &0.into()),
        "{r:#}"
    );
    let changed = r["items"]
        .as_array()
        .and_then(|a| a.iter().find(|i| i["kind"] == "changed"))
        .context("a changed item")?;
    assert_eq!(changed["upstream"], UP);
    assert!(
        changed["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&md5_hex(b"charlie 2"))),
        "{changed:#}"
    );
    // The text form lists them, one per line.
    let (code, out, _) = cmd(&case, &["audit", &toml])?;
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!("missing  {UP} {}", site.url("/res/d.txt"))),
        "{out}"
    );
    assert!(out.ends_with("NOT IN SYNC\n"), "{out}");
    Ok(())
}

#[test]
fn audit_finds_what_differs_file_store() -> Result<()> {
    audit_finds_what_differs(Store::file("audit")?)
}

#[test]
fn audit_finds_what_differs_s3_store() -> Result<()> {
    audit_finds_what_differs(Store::s3("audit")?)
}

#[test]
fn audit_read_data_finds_damaged_blobs_and_run_baseline_repairs_them() -> Result<()> {
    let site = with_changelist(&[A, B, C])?;
    let case = Case::new(
        Store::file("audit-data")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();
    let (a_sha, b_sha) = (copy_of(&case, &site, A.0)?, copy_of(&case, &site, B.0)?);
    let before = listing(&store_dir(&case)?)?;
    let (code, _) = audit(&case, &["--read-data"])?;
    assert_eq!(code, 0);
    assert_eq!(
        listing(&store_dir(&case)?)?,
        before,
        "an audit writes nothing to the store"
    );

    // b's blob deleted: missing, seen without reading data.
    std::fs::remove_file(blob_file(&case, &b_sha)?)?;
    let (code, r) = audit(&case, &[])?;
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(items(&site, &r), ["missing /res/b.txt"], "{r:#}");
    // a's bytes altered in place: only reading them tells.
    std::fs::write(blob_file(&case, &a_sha)?, "alphA")?;
    let (code, r) = audit(&case, &[])?;
    assert_eq!(
        (code, items(&site, &r)),
        (1, vec!["missing /res/b.txt".to_owned()])
    );
    let (code, r) = audit(&case, &["--read-data"])?;
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(
        items(&site, &r),
        ["corrupt /res/a.txt", "missing /res/b.txt"],
        "{r:#}"
    );
    assert_eq!(r["upstreams"][0]["corrupt"], 1);

    // A plain run is incremental (the Change List is empty): it repairs nothing.
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(audit(&case, &["--read-data"])?.0, 1);

    // `run --baseline`: re-synced from the Resource List, everything fetched again.
    site.fx.reset_counters();
    let run = case.run_with(&["--baseline"])?;
    run.assert_ok();
    assert!(
        run.resyncs().iter().any(|r| r.contains("run --baseline")),
        "{run:#?}"
    );
    assert_eq!(run.n("unchanged"), 3, "same bytes: no new change; {run:#?}");
    for (p, _) in [A, B, C] {
        assert_eq!(site.fx.hits(p), 1, "{p} fetched again");
    }
    case.assert_state(UP, &[A, B, C].map(|(p, b)| (site.url(p), b.to_vec())), &[])?;
    let (code, r) = audit(&case, &["--read-data"])?;
    assert_eq!(code, 0, "repaired: {r:#}");
    Ok(())
}

#[test]
fn audit_fetch_sees_bytes_changed_behind_an_unchanged_list() -> Result<()> {
    let site = with_changelist(&[A, B])?;
    let case = Case::new(
        Store::file("audit-fetch")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();
    // The upstream rewrites b but not its lists.
    site.write(B.0, "bravo, silently changed")?;
    let (code, r) = audit(&case, &["--read-data"])?;
    assert_eq!(code, 0, "the lists cannot tell: {r:#}");
    site.fx.reset_counters();
    let (code, r) = audit(&case, &["--fetch"])?;
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(items(&site, &r), ["changed /res/b.txt"], "{r:#}");
    assert_eq!(r["checks"], serde_json::json!(["lists", "fetch"]));
    assert!(
        r["items"][0]["detail"]
            .as_str()
            .is_some_and(|d| d.contains(&sha256_hex(b"bravo, silently changed"))),
        "{r:#}"
    );
    assert_eq!((site.fx.hits(A.0), site.fx.hits(B.0)), (1, 1));
    Ok(())
}

#[test]
fn dry_run_says_what_a_run_would_do_and_changes_nothing() -> Result<()> {
    // Resource List only: every run after the baseline re-syncs from it.
    let site = Site::new()?;
    site.standard(&[("resourcelist", "/resourcelist.xml")], &[A, B, C])?;
    let case = Case::new(
        Store::file("dry-run")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let toml = case.toml.to_string_lossy().into_owned();

    // Before any run: a baseline would create all three (and nothing is written: no store).
    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: Value = serde_json::from_str(out.trim())?;
    assert_eq!(plan["dry_run"], true);
    let up = &plan["upstreams"][0];
    assert_eq!(up["sets"][0]["mode"], "baseline", "{plan:#}");
    assert_eq!(
        (&up["fetch"], &up["create"], &up["update"], &up["delete"]),
        (&3.into(), &3.into(), &0.into(), &0.into()),
        "{plan:#}"
    );
    let state_files = store_dir(&case)?.join("state");
    assert!(!state_files.exists(), "a dry run creates no state");
    assert!(
        site.fx.hits(A.0) + site.fx.hits(B.0) + site.fx.hits(C.0) == 0,
        "nothing but the lists fetched"
    );

    case.run()?.assert_ok();
    // Upstream: c changed, d new, a gone.
    site.write("/res/c.txt", "charlie 2")?;
    site.write("/res/d.txt", "delta")?;
    let listed: [(&str, &[u8]); 3] = [B, ("/res/c.txt", b"charlie 2"), ("/res/d.txt", b"delta")];
    site.resource_list("/resourcelist.xml", "/capabilitylist.xml", T0, &listed)?;
    let before = listing(&store_dir(&case)?)?;
    site.fx.reset_counters();
    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: Value = serde_json::from_str(out.trim())?;
    let up = &plan["upstreams"][0];
    assert_eq!(up["sets"][0]["mode"], "resync", "{plan:#}");
    assert_eq!(
        (
            &up["fetch"],
            &up["create"],
            &up["update"],
            &up["delete"],
            &up["unchanged"]
        ),
        (&2.into(), &1.into(), &1.into(), &1.into(), &1.into()),
        "{plan:#}"
    );
    let mut actions: Vec<String> = plan["items"]
        .as_array()
        .context("items")?
        .iter()
        .map(|i| {
            format!(
                "{} {}",
                i["action"].as_str().unwrap_or("?"),
                i["uri"].as_str().unwrap_or("?")
            )
        })
        .collect();
    actions.sort();
    assert_eq!(
        actions,
        [
            format!("create {}", site.url("/res/d.txt")),
            format!("delete {}", site.url("/res/a.txt")),
            format!("update {}", site.url("/res/c.txt")),
        ]
    );
    assert_eq!(
        listing(&store_dir(&case)?)?,
        before,
        "a dry run changes nothing in the store"
    );
    for p in [A.0, B.0, C.0, "/res/d.txt"] {
        assert_eq!(site.fx.hits(p), 0, "{p} fetched by a dry run");
    }
    // The text form.
    let (code, out, _) = cmd(&case, &["run", &toml, "--dry-run"])?;
    assert_eq!(code, 0);
    assert!(
        out.contains(&format!("delete {UP} {}", site.url("/res/a.txt"))),
        "{out}"
    );
    assert!(
        out.contains("would fetch 2, create 1, update 1, delete 1"),
        "{out}"
    );

    // The run does what was said.
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    // `--dry-run --baseline`: everything would be fetched again.
    let (code, out, _) = cmd(&case, &["run", &toml, "--dry-run", "--baseline", "--json"])?;
    assert_eq!(code, 0);
    let plan: Value = serde_json::from_str(out.trim())?;
    let up = &plan["upstreams"][0];
    assert_eq!(up["sets"][0]["reason"], "run --baseline", "{plan:#}");
    assert_eq!(
        (&up["fetch"], &up["update"]),
        (&3.into(), &3.into()),
        "{plan:#}"
    );
    Ok(())
}

#[test]
fn quarantine_list_and_retry_after_the_upstream_is_fixed() -> Result<()> {
    let site = with_changelist(&[A])?;
    let bad = "/res/bad.txt";
    site.write(bad, "tampered bytes")?;
    // No lastmod on the bad entry (a later Last-Modified would explain the mismatch).
    let cap = site.url("/capabilitylist.xml");
    site.write(
        "/resourcelist.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &cap)],
            &[
                url_item(&site.url(A.0), Some(LASTMOD), &md_of(A.1), ""),
                url_item(&site.url(bad), None, &md_of(b"expected bytes"), ""),
            ],
        ),
    )?;
    let case = Case::new(
        Store::file("quarantine")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    assert_eq!(run.n("quarantined"), 1, "{run:#?}");
    let toml = case.toml.to_string_lossy().into_owned();

    let (code, out, err) = cmd(&case, &["quarantine", "list", &toml])?;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&site.url(bad)), "{out}");
    assert!(out.contains(&md5_hex(b"expected bytes")), "{out}");
    assert!(out.ends_with("1 quarantined\n"), "{out}");
    let (code, out, _) = cmd(&case, &["quarantine", "list", &toml, "--json"])?;
    assert_eq!(code, 0);
    let lines: Vec<Value> = out
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 1, "{out}");
    assert_eq!(lines[0]["upstream"], UP);
    assert_eq!(lines[0]["uri"], site.url(bad));
    assert_eq!(
        lines[0]["expected"],
        format!("md5:{}", md5_hex(b"expected bytes"))
    );
    assert_eq!(
        lines[0]["got"],
        format!("md5:{}", md5_hex(b"tampered bytes"))
    );

    // A run does not retry it (nothing new in the Change List); retrying while the
    // upstream is still wrong quarantines it again (exit 1).
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(site.fx.hits(bad), 2, "fetched twice by the baseline only");
    let (code, out, _) = cmd(&case, &["quarantine", "retry", &toml, "--json"])?;
    assert_eq!(code, 1, "{out}");
    let r: Value = serde_json::from_str(out.trim())?;
    assert_eq!(r["upstreams"][0]["quarantined"], 1, "{r:#}");
    assert_eq!(case.snapshot(UP)?.quarantine.len(), 1);

    // The upstream fixed its bytes: a retry stores and releases it, and publishes.
    site.write(bad, "expected bytes")?;
    let (code, out, err) = cmd(&case, &["quarantine", "retry", &toml, "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let r: Value = serde_json::from_str(out.trim())?;
    assert_eq!(r["upstreams"][0]["created"], 1, "{r:#}");
    assert_eq!(r["upstreams"][0]["quarantined"], 0, "{r:#}");
    assert!(r["publish"].is_object(), "{r:#}");
    let snap = case.assert_state(
        UP,
        &[
            (site.url(A.0), A.1.to_vec()),
            (site.url(bad), b"expected bytes".to_vec()),
        ],
        &[],
    )?;
    assert!(snap.quarantine.is_empty(), "{:#?}", snap.quarantine);
    let (code, out, _) = cmd(&case, &["quarantine", "list", &toml])?;
    assert_eq!((code, out.as_str()), (0, "0 quarantined\n"));
    // The published Resource List names the copy now.
    let rl = std::fs::read_to_string(store_dir(&case)?.join("resourcelist.xml"))?;
    assert!(rl.contains("res/bad.txt"), "{rl}");
    Ok(())
}

#[test]
fn gc_force_collects_at_once() -> Result<()> {
    let site = with_changelist(&[A])?;
    let (case, _) = Case::on_loopback("gc", &site, "", "[publish]\ngrace = \"0s\"\n")?;
    case.run()?.assert_ok();
    let toml = case.toml.to_string_lossy().into_owned();
    // A blob nothing refers to (as a crash between a blob and its commit leaves).
    let orphan = sha256_hex(b"orphan");
    let path = blob_file(&case, &orphan)?;
    std::fs::create_dir_all(path.parent().context("parent")?)?;
    std::fs::write(&path, "orphan")?;

    // Not due yet (the first collection is one gc_interval after the first publish).
    let (code, out, err) = cmd(&case, &["gc", &toml, "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let r: Value = serde_json::from_str(out.trim())?;
    assert_eq!(r["collected"], false, "{r:#}");
    assert!(path.exists());

    let (code, out, err) = cmd(&case, &["gc", &toml, "--force", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let r: Value = serde_json::from_str(out.trim())?;
    assert_eq!(r["collected"], true, "{r:#}");
    assert_eq!(r["gc"]["deleted"], 1, "{r:#}");
    assert_eq!(r["gc"]["bytes_freed"], 6, "{r:#}");
    assert!(!path.exists(), "the orphan blob is collected");
    assert!(
        case.blob_exists(&copy_of(&case, &site, A.0)?)?,
        "a referenced blob is kept"
    );
    let (code, out, _) = cmd(&case, &["gc", &toml, "--force"])?;
    assert_eq!(code, 0);
    assert!(out.starts_with("collected: "), "{out}");
    Ok(())
}

/// A bucket that does not exist, on a real S3 (SeaweedFS): every command that opens the
/// store says so on one line, with the S3 code and message and without the XML document;
/// `serve`'s `/readyz` is 503 with that reason.
#[test]
fn a_missing_bucket_is_said_as_such_on_one_line() -> Result<()> {
    let sw = rsagg_e2e::Seaweed::shared()?;
    let site = with_changelist(&[A])?;
    let bucket = "rsagg-no-such-bucket";
    let port = rsagg_e2e::RsaggServer::pick_port()?;
    let case = Case::published_at(
        Store::at(&format!(
            "s3://{bucket}/{}",
            rsagg_e2e::unique_prefix("nobucket")
        )),
        &[upstream(UP, &site.url("/.well-known/resourcesync"), "")],
        &format!("http://127.0.0.1:{port}/nobucket/"),
        "",
    )?;
    // Few store retries, so that the test takes seconds.
    let toml = std::fs::read_to_string(&case.toml)?.replace(
        "[store]\n",
        "[store]\nretries = 1\nretry_timeout = \"2s\"\nopen_timeout = \"30s\"\n",
    );
    std::fs::write(&case.toml, toml)?;
    let toml = case.toml.to_string_lossy().into_owned();
    let env = sw.env();
    for (args, expected) in [
        (vec!["audit", toml.as_str()], 2),
        (vec!["run", toml.as_str(), "--dry-run"], 2),
        (vec!["quarantine", "list", toml.as_str()], 2),
        (vec!["run", toml.as_str(), "--once"], 1),
    ] {
        let out = Command::new(rsagg_bin()?)
            .args(&args)
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env("RSAGG_LOG", "off")
            .envs(env.iter().cloned())
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{args:?}: one line\n{stderr}");
        let line = lines[0];
        assert!(
            line.contains(&format!("bucket `{bucket}` does not exist"))
                && line.contains("NoSuchBucket")
                && !line.contains('<'),
            "{args:?}: {line}"
        );
        assert!(!line.contains("unreachable"), "{args:?}: {line}");
        assert_eq!(out.status.code(), Some(expected), "{args:?}: {stderr}");
    }
    // Nothing was fetched from the upstream by the run: the store failed first.
    assert_eq!(site.fx.hits("/res/a.txt"), 0);

    let server = rsagg_e2e::RsaggServer::start(port, &[&case.toml], &env)?;
    let (code, body) = http_get(&format!("{}/readyz", server.origin()))?;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("collection `nobucket`")
            && body.contains(&format!("bucket `{bucket}` does not exist"))
            && !body.contains('<'),
        "{body}"
    );
    Ok(())
}
