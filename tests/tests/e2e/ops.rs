//! End-to-end tests of the operator commands (`docs/contract.md`): `rsagg audit`,
//! `rsagg run --dry-run`, `rsagg run --baseline`, `rsagg quarantine list|retry`,
//! `rsagg gc --force`, against static fixture Sources (FixtureServer) and real stores
//! (`file://`, and SeaweedFS for the audit). Every assertion reads back real effects: exit
//! codes, the `--json` reports, state records, blobs, the store's files.
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e ops:: -- --test-threads=2`.

use crate::common;

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

/// The items of a `run --dry-run --json` plan as `action uri` strings, in its order.
fn planned(plan: &Value) -> Result<Vec<String>> {
    Ok(plan["items"]
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
        .collect())
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
    let mut actions: Vec<String> = planned(&plan)?;
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
    // `--dry-run --baseline`: everything would be fetched again, and found unchanged (as
    // `run --baseline` then counts it), not updated.
    let (code, out, _) = cmd(&case, &["run", &toml, "--dry-run", "--baseline", "--json"])?;
    assert_eq!(code, 0);
    let plan: Value = serde_json::from_str(out.trim())?;
    let up = &plan["upstreams"][0];
    assert_eq!(up["sets"][0]["reason"], "run --baseline", "{plan:#}");
    assert_eq!(
        (&up["fetch"], &up["update"], &up["unchanged"]),
        (&3.into(), &0.into(), &3.into()),
        "{plan:#}"
    );
    assert_eq!(plan["items"], serde_json::json!([]), "{plan:#}");
    let run = case.run_with(&["--baseline"])?;
    run.assert_ok();
    assert_eq!((run.cud(), run.n("unchanged")), ((0, 0, 0), 3), "{run:#?}");
    Ok(())
}

/// `(action, upstream, uri)` of each plan item, sorted.
fn plan_items(plan: &Value) -> Result<Vec<(String, String, String)>> {
    let mut v: Vec<_> = plan["items"]
        .as_array()
        .context("items")?
        .iter()
        .map(|i| {
            let s = |k: &str| i[k].as_str().unwrap_or("?").to_owned();
            (s("action"), s("upstream"), s("uri"))
        })
        .collect();
    v.sort();
    Ok(v)
}

#[test]
fn dry_run_baseline_of_two_upstreams_plans_exactly_what_run_baseline_does() -> Result<()> {
    // Two upstreams feeding one collection, as the demo's: one upstream's re-sync must
    // never plan to delete the other's resources, and unchanged copies are not updates.
    let one = with_changelist(&[A, B, C])?;
    let (x, y) = (
        ("/res/x.txt", b"x-ray" as &[u8]),
        ("/res/y.txt", b"yankee" as &[u8]),
    );
    let two = with_changelist(&[x, y])?;
    let case = Case::with_upstreams(
        Store::file("dry-run-two")?,
        &[
            upstream("one", &one.url("/.well-known/resourcesync"), ""),
            upstream("two", &two.url("/.well-known/resourcesync"), ""),
        ],
    )?;
    let run = case.run()?;
    assert_eq!(run.code, 0, "{run:#?}");
    let toml = case.toml.to_string_lossy().into_owned();

    // Nothing changed upstream: a re-sync of both fetches everything and changes nothing.
    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run", "--baseline", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: Value = serde_json::from_str(out.trim())?;
    assert_eq!(plan_items(&plan)?, vec![], "{plan:#}");
    for (name, n) in [("one", 3), ("two", 2)] {
        let u = plan["upstreams"]
            .as_array()
            .and_then(|a| a.iter().find(|u| u["name"] == name))
            .context("upstream")?;
        assert_eq!(
            (
                &u["fetch"],
                &u["create"],
                &u["update"],
                &u["delete"],
                &u["unchanged"]
            ),
            (&n.into(), &0.into(), &0.into(), &0.into(), &n.into()),
            "{name}: {plan:#}"
        );
    }
    let (_, text, _) = cmd(&case, &["run", &toml, "--dry-run", "--baseline"])?;
    assert!(
        text.contains("one: would fetch 3, create 0, update 0, delete 0; 3 unchanged"),
        "{text}"
    );

    // Upstream two changes y and stops listing x; one stays as it was.
    two.write(y.0, "yankee 2")?;
    two.resource_list(
        "/resourcelist.xml",
        "/capabilitylist.xml",
        T0,
        &[(y.0, b"yankee 2")],
    )?;
    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run", "--baseline", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: Value = serde_json::from_str(out.trim())?;
    let planned = plan_items(&plan)?;
    assert_eq!(
        planned,
        vec![
            ("delete".to_owned(), "two".to_owned(), two.url(x.0)),
            ("update".to_owned(), "two".to_owned(), two.url(y.0)),
        ],
        "{plan:#}"
    );

    // The run does exactly that, item by item: its change-log entries are the plan's items.
    let logged = case.snapshot("one")?.log.len();
    let run = case.run_with(&["--baseline"])?;
    assert_eq!(run.code, 0, "{run:#?}");
    let snap = case.snapshot("one")?;
    let mut done: Vec<(String, String, String)> = snap.log[logged..]
        .iter()
        .map(|e| {
            let action = match e.change.as_str() {
                "created" => "create",
                "updated" => "update",
                "deleted" => "delete",
                other => other,
            };
            (action.to_owned(), e.upstream.clone(), e.uri.clone())
        })
        .collect();
    done.sort();
    assert_eq!(done, planned, "the plan against the run's change log");
    for (name, counts) in [("one", (0, 0, 0, 3)), ("two", (0, 1, 1, 0))] {
        let u = run.up_named(name);
        let n = |k: &str| u[k].as_u64().unwrap_or(u64::MAX);
        assert_eq!(
            (n("created"), n("updated"), n("deleted"), n("unchanged")),
            counts,
            "{name}: {run:#?}"
        );
        let planned = plan["upstreams"]
            .as_array()
            .and_then(|a| a.iter().find(|u| u["name"] == name))
            .context("upstream")?;
        let p = |k: &str| planned[k].as_u64().unwrap_or(u64::MAX);
        assert_eq!(
            (p("create"), p("update"), p("delete"), p("unchanged")),
            counts,
            "{name}: the plan's counts are the run's: {plan:#}"
        );
    }
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
    let last_run = case.stats()?;
    let (code, out, _) = cmd(&case, &["quarantine", "retry", &toml, "--json"])?;
    assert_eq!(code, 1, "{out}");
    let r: Value = serde_json::from_str(out.trim())?;
    assert_eq!(r["upstreams"][0]["quarantined"], 1, "{r:#}");
    assert_eq!(case.snapshot(UP)?.quarantine.len(), 1);
    // An operator command is not a run: the last run's report stays what `/status` and
    // `/metrics` show.
    let stats = case.stats()?;
    assert_eq!(
        stats["report"], last_run["report"],
        "the last run's report is kept"
    );
    assert_eq!(stats["finished"], last_run["finished"]);
    assert_eq!(
        stats["quarantine"].as_array().map(Vec::len),
        Some(1),
        "{stats:#}"
    );

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
    // The stats object shows the quarantine as it is now, beside the last run's report.
    let stats = case.stats()?;
    assert_eq!(stats["report"], last_run["report"], "{stats:#}");
    assert_eq!(stats["quarantine"], serde_json::json!([]), "{stats:#}");

    // With nothing quarantined, a retry retries, publishes and writes nothing.
    let stats_file = store_dir(&case)?.join("stats/last-run.json");
    let before = listing(&store_dir(&case)?)?;
    let (code, out, err) = cmd(&case, &["quarantine", "retry", &toml, "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let r: Value = serde_json::from_str(out.trim())?;
    assert!(r["publish"].is_null(), "nothing to publish: {r:#}");
    assert_eq!(
        listing(&store_dir(&case)?)?
            .into_iter()
            .filter(|(k, _)| !k.starts_with("state/"))
            .collect::<BTreeMap<_, _>>(),
        before
            .into_iter()
            .filter(|(k, _)| !k.starts_with("state/"))
            .collect::<BTreeMap<_, _>>(),
        "a retry of nothing leaves every published object and {} as they were",
        stats_file.display()
    );
    Ok(())
}

#[test]
fn operator_commands_on_a_store_never_run_say_so_and_exit_2() -> Result<()> {
    let site = with_changelist(&[A])?;
    let case = Case::new(
        Store::file("never-run")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let toml = case.toml.to_string_lossy().into_owned();
    let dir = store_dir(&case)?;
    for args in [
        vec!["audit", toml.as_str()],
        vec!["audit", toml.as_str(), "--json"],
        vec!["quarantine", "list", toml.as_str()],
        vec!["quarantine", "list", toml.as_str(), "--json"],
        vec!["quarantine", "retry", toml.as_str()],
        vec!["gc", toml.as_str(), "--force"],
    ] {
        let (code, out, err) = cmd(&case, &args)?;
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            err.contains("store holds no rsagg collection (never run?)"),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: no report: {out}");
        assert!(
            !dir.join("state").exists(),
            "{args:?} wrote a state to a store that had none"
        );
    }
    // A dry run plans the first run, and says it is one.
    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run"])?;
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.starts_with("store holds no rsagg collection (never run?)"),
        "{out}"
    );
    let (code, out, _) = cmd(&case, &["run", &toml, "--dry-run", "--json"])?;
    assert_eq!(code, 0);
    let plan: Value = serde_json::from_str(out.trim())?;
    assert_eq!(plan["never_run"], true, "{plan:#}");
    assert_eq!(plan["upstreams"][0]["create"], 1, "{plan:#}");
    // Once run, the same commands answer as usual.
    case.run()?.assert_ok();
    let (code, out, err) = cmd(&case, &["audit", &toml])?;
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, _) = cmd(&case, &["run", &toml, "--dry-run", "--json"])?;
    assert_eq!(code, 0);
    let plan: Value = serde_json::from_str(out.trim())?;
    assert_eq!(plan["never_run"], false, "{plan:#}");
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

// ---------------------------------------------------------------------------------------
// An upstream whose Change List runs past its Resource List (issue 25, points 1 and 2)

/// When each change of [`past_list`] happened: after the Resource List's `at` ([`T0`]).
fn after_t0(i: usize) -> String {
    format!("2026-01-02T00:00:{i:02}Z")
}

/// Resources as URI and bytes.
type Resources = Vec<(String, Vec<u8>)>;

/// An upstream as most real Sources are: a Resource List made at [`T0`] naming `r0`..`r19`,
/// then a Change List with changes after it: `n0`..`n4` created, `r0`..`r4` updated (the
/// list still announces their old bytes, and has no `lastmod` that could explain the
/// difference), `r5`..`r9` deleted (gone from the site). Returns the site, its current
/// state (URI → bytes: `r0`..`r4` new, `r10`..`r19`, `n0`..`n4`) and the Change List's items.
fn past_list() -> Result<(Site, Resources, Vec<String>)> {
    let site = Site::new()?;
    site.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
    site.capability_list(
        "/capabilitylist.xml",
        Some("/.well-known/resourcesync"),
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
    )?;
    let old = |i: usize| format!("resource {i} as listed").into_bytes();
    let new = |i: usize| format!("resource {i}, updated after the list").into_bytes();
    let created = |i: usize| format!("new resource {i}").into_bytes();
    let r = |i: usize| format!("/res/r{i}.txt");
    let n = |i: usize| format!("/res/n{i}.txt");
    let listed: Vec<String> = (0..20)
        .map(|i| url_item(&site.url(&r(i)), None, &md_of(&old(i)), ""))
        .collect();
    site.write(
        "/resourcelist.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &site.url("/capabilitylist.xml"))],
            &listed,
        ),
    )?;
    let mut changes = Vec::new();
    let mut state = Vec::new();
    for i in 0..5 {
        site.write(&r(i), new(i))?;
        changes.push(change_item(
            &site.url(&r(i)),
            "updated",
            &after_t0(i),
            Some(&new(i)),
        ));
        state.push((site.url(&r(i)), new(i)));
    }
    for i in 5..10 {
        changes.push(change_item(&site.url(&r(i)), "deleted", &after_t0(i), None));
    }
    for i in 10..20 {
        site.write(&r(i), old(i))?;
        state.push((site.url(&r(i)), old(i)));
    }
    for i in 0..5 {
        site.write(&n(i), created(i))?;
        changes.push(change_item(
            &site.url(&n(i)),
            "created",
            &after_t0(10 + i),
            Some(&created(i)),
        ));
        state.push((site.url(&n(i)), created(i)));
    }
    site.changes("/changelist.xml", "changelist", T0, &changes)?;
    state.sort();
    Ok((site, state, changes))
}

#[test]
fn audit_is_in_sync_after_a_run_when_the_change_list_runs_past_the_resource_list() -> Result<()> {
    let (site, state, _) = past_list()?;
    let case = Case::new(
        Store::file("past-list-audit")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let toml = case.toml.to_string_lossy().into_owned();

    // Before any run, the plan is the upstream's state: the resources it has now, not
    // those its list had at T0.
    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: Value = serde_json::from_str(out.trim())?;
    let mut planned: Vec<String> = planned(&plan)?;
    planned.sort();
    let creates: Vec<String> = state.iter().map(|(u, _)| format!("create {u}")).collect();
    assert_eq!(planned, creates, "{plan:#}");

    let run = case.run()?;
    run.assert_ok();
    // Nothing fetched against a stale entry: no quarantine, no resource listed but gone.
    assert_eq!((run.n("quarantined"), run.n("gone")), (0, 0), "{run:#?}");
    let snap = case.assert_state(UP, &state, &[])?;
    assert!(snap.quarantine.is_empty(), "{:#?}", snap.quarantine);
    snap.assert_log_sane();

    // The audit judges against the same state: in sync.
    let (code, r) = audit(&case, &[])?;
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["in_sync"], true, "{r:#}");
    let up = &r["upstreams"][0];
    assert_eq!(up["listed"], 20, "{r:#}");
    assert_eq!(up["extra_checked"], true, "{r:#}");
    let (code, r) = audit(&case, &["--read-data"])?;
    assert_eq!(code, 0, "{r:#}");

    // And it still sees what differs from that state: a resource deleted in the store.
    let (_, text, _) = cmd(&case, &["audit", &toml])?;
    assert!(text.ends_with("IN SYNC\n"), "{text}");
    let blob = copy_of(&case, &site, "/res/n0.txt")?;
    std::fs::remove_file(blob_file(&case, &blob)?)?;
    let (code, r) = audit(&case, &[])?;
    assert_eq!(code, 1, "{r:#}");
    assert_eq!(items(&site, &r), ["missing /res/n0.txt"], "{r:#}");
    Ok(())
}

#[test]
fn dry_run_plans_the_changes_after_the_checkpoint_the_last_of_a_uri_winning() -> Result<()> {
    let (site, _, mut changes) = past_list()?;
    let case = Case::new(
        Store::file("incremental-plan")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let toml = case.toml.to_string_lossy().into_owned();
    case.run()?.assert_ok();

    // After the checkpoint (the changes before it are covered): r10 updated then deleted,
    // r11 updated, n9 created, r12 announced with the bytes it already has.
    let r11 = b"resource 11, changed after the run".to_vec();
    let n9 = b"new resource 9".to_vec();
    let r12 = b"resource 12 as listed".to_vec();
    site.write("/res/r11.txt", &r11)?;
    site.write("/res/n9.txt", &n9)?;
    let item = |p: &str, change: &str, i: usize, body: Option<&[u8]>| {
        change_item(&site.url(p), change, &after_t0(i), body)
    };
    changes.extend([
        item("/res/r10.txt", "updated", 30, Some(b"resource 10, briefly")),
        item("/res/r11.txt", "updated", 31, Some(&r11)),
        item("/res/n9.txt", "created", 32, Some(&n9)),
        item("/res/r10.txt", "deleted", 33, None),
        item("/res/r12.txt", "updated", 34, Some(&r12)),
    ]);
    site.changes("/changelist.xml", "changelist", T0, &changes)?;

    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: Value = serde_json::from_str(out.trim())?;
    let up = &plan["upstreams"][0];
    assert_eq!(up["sets"][0]["mode"], "incremental", "{plan:#}");
    assert_eq!(
        up["sets"][0]["reason"], "4 change(s) after the checkpoint",
        "{plan:#}"
    );
    assert_eq!(
        (&up["fetch"], &up["create"], &up["update"], &up["delete"]),
        (&2.into(), &1.into(), &1.into(), &1.into()),
        "{plan:#}"
    );
    let actions: Vec<String> = planned(&plan)?;
    assert_eq!(
        actions,
        [
            format!("update {}", site.url("/res/r11.txt")),
            format!("create {}", site.url("/res/n9.txt")),
            format!("delete {}", site.url("/res/r10.txt")),
        ],
        "in the order of each resource's last change: {plan:#}"
    );

    // The run does what was said.
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    Ok(())
}

#[test]
fn run_baseline_logs_no_event_when_the_change_list_runs_past_the_resource_list() -> Result<()> {
    let (site, state, _) = past_list()?;
    let case = Case::new(
        Store::file("past-list-baseline")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();
    let before = case.snapshot(UP)?;

    // A dry run of the re-sync plans no deletion and no creation of what is there.
    let toml = case.toml.to_string_lossy().into_owned();
    let (code, out, err) = cmd(&case, &["run", &toml, "--dry-run", "--baseline", "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let plan: Value = serde_json::from_str(out.trim())?;
    let up = &plan["upstreams"][0];
    assert_eq!(
        (&up["create"], &up["delete"], &up["update"], &up["fetch"]),
        (&0.into(), &0.into(), &0.into(), &20.into()),
        "every resource fetched again, none created, updated or deleted: {plan:#}"
    );

    let run = case.run_with(&["--baseline"])?;
    run.assert_ok();
    assert!(
        run.resyncs().iter().any(|r| r.contains("run --baseline")),
        "{run:#?}"
    );
    assert_eq!(
        run.cud(),
        (0, 0, 0),
        "no event for an unchanged state: {run:#?}"
    );
    assert_eq!(run.n("quarantined"), 0, "{run:#?}");
    let after = case.assert_state(UP, &state, &[])?;
    assert_eq!(
        after.log.len(),
        before.log.len(),
        "no change-log entry: {:#?}",
        &after.log[before.log.len().min(after.log.len())..]
    );
    assert!(after.quarantine.is_empty(), "{:#?}", after.quarantine);
    // The published Change List holds no more entries than before.
    let (code, r) = audit(&case, &[])?;
    assert_eq!(code, 0, "{r:#}");
    Ok(())
}

#[test]
fn quarantine_retry_judges_by_the_changes_after_the_resource_list() -> Result<()> {
    let site = with_changelist(&[A])?;
    let u = "/res/u.txt";
    // The list announces bytes the upstream no longer serves (no lastmod to explain it).
    site.write(u, "u as it is now")?;
    let cap = site.url("/capabilitylist.xml");
    site.write(
        "/resourcelist.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &cap)],
            &[
                url_item(&site.url(A.0), Some(LASTMOD), &md_of(A.1), ""),
                url_item(&site.url(u), None, &md_of(b"u as it was"), ""),
            ],
        ),
    )?;
    let case = Case::new(
        Store::file("quarantine-later")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    assert_eq!(run.n("quarantined"), 1, "{run:#?}");
    // The upstream's Change List announces the update after the list's `at`: what it
    // serves is right, the list is stale. A retry judges by the change and releases it.
    site.changes(
        "/changelist.xml",
        "changelist",
        T0,
        &[change_item(
            &site.url(u),
            "updated",
            &after_t0(1),
            Some(b"u as it is now"),
        )],
    )?;
    let toml = case.toml.to_string_lossy().into_owned();
    let (code, out, err) = cmd(&case, &["quarantine", "retry", &toml, "--json"])?;
    assert_eq!(code, 0, "{out}{err}");
    let r: Value = serde_json::from_str(out.trim())?;
    assert_eq!(r["upstreams"][0]["created"], 1, "{r:#}");
    assert_eq!(r["upstreams"][0]["quarantined"], 0, "{r:#}");
    let snap = case.assert_state(
        UP,
        &[
            (site.url(A.0), A.1.to_vec()),
            (site.url(u), b"u as it is now".to_vec()),
        ],
        &[],
    )?;
    assert!(snap.quarantine.is_empty(), "{:#?}", snap.quarantine);
    // The next run applies the change: the copy is what it announces, nothing new.
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(audit(&case, &[])?.0, 0);
    Ok(())
}

#[test]
fn a_run_releases_a_quarantine_when_a_later_change_stores_the_announced_bytes() -> Result<()> {
    // A quarantine left by an earlier run (the list announced other bytes): the change
    // after the list that announces what is served stores it, and the quarantine goes.
    let site = with_changelist(&[A])?;
    let u = "/res/u.txt";
    site.write(u, "u as it is now")?;
    let cap = site.url("/capabilitylist.xml");
    site.write(
        "/resourcelist.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &cap)],
            &[
                url_item(&site.url(A.0), Some(LASTMOD), &md_of(A.1), ""),
                url_item(&site.url(u), None, &md_of(b"u as it was"), ""),
            ],
        ),
    )?;
    let case = Case::new(
        Store::file("quarantine-released")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    assert_eq!(case.run()?.n("quarantined"), 1);
    site.changes(
        "/changelist.xml",
        "changelist",
        T0,
        &[change_item(
            &site.url(u),
            "updated",
            &after_t0(1),
            Some(b"u as it is now"),
        )],
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 0, 0), "{run:#?}");
    let snap = case.snapshot(UP)?;
    assert!(snap.quarantine.is_empty(), "{:#?}", snap.quarantine);
    // `run --baseline` then: the list is still stale, the change still after it: the
    // resource is left to the change, not quarantined again.
    let run = case.run_with(&["--baseline"])?;
    run.assert_ok();
    assert_eq!(
        (run.cud(), run.n("quarantined")),
        ((0, 0, 0), 0),
        "{run:#?}"
    );
    assert!(case.snapshot(UP)?.quarantine.is_empty());
    Ok(())
}

#[test]
fn audit_exits_2_on_a_store_error_not_missing_or_corrupt() -> Result<()> {
    let site = with_changelist(&[A, B])?;
    let case = Case::new(
        Store::file("audit-store-error")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();
    // b's blob replaced by a symbolic link to itself: looking it up fails (not "not
    // found"), as a store that errs does.
    let path = blob_file(&case, &copy_of(&case, &site, B.0)?)?;
    std::fs::remove_file(&path)?;
    std::os::unix::fs::symlink(&path, &path)?;
    let toml = case.toml.to_string_lossy().into_owned();
    for args in [vec![], vec!["--read-data"]] {
        let mut all = vec!["audit", toml.as_str(), "--json"];
        all.extend(args.iter().copied());
        let (code, out, err) = cmd(&case, &all)?;
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(
            out.trim().is_empty(),
            "no verdict on a failing store: {out}"
        );
        let line = err
            .lines()
            .find(|l| l.starts_with("rsagg audit:"))
            .unwrap_or_default();
        assert!(line.contains("blobs/sha256"), "{args:?}: {err}");
    }
    Ok(())
}

/// A proxy to `upstream` (SeaweedFS) that answers every HEAD itself with a 500 and a body
/// (which a HEAD answer must not have), as a faulty S3 endpoint did; the other requests are
/// forwarded as they are (the signature covers the `Host` it keeps), one per connection.
fn head_500_proxy(upstream: std::net::SocketAddr) -> Result<std::net::SocketAddr> {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for client in listener.incoming().flatten() {
            std::thread::spawn(move || -> std::io::Result<()> {
                let mut reader = BufReader::new(client.try_clone()?);
                let mut client = client;
                loop {
                    let mut head = Vec::new();
                    loop {
                        let mut line = Vec::new();
                        if reader.read_until(b'\n', &mut line)? == 0 {
                            return Ok(());
                        }
                        let end = line == b"\r\n";
                        head.extend_from_slice(&line);
                        if end {
                            break;
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    if text.starts_with("HEAD ") {
                        let body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>InternalError</Code><Message>We encountered an internal error. Please try again.</Message></Error>";
                        write!(
                            client,
                            "HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        )?;
                        client.flush()?;
                        continue;
                    }
                    let length: usize = text
                        .lines()
                        .find_map(|l| {
                            let (k, v) = l.split_once(':')?;
                            k.eq_ignore_ascii_case("content-length")
                                .then(|| v.trim().parse().ok())?
                        })
                        .unwrap_or(0);
                    let mut body = vec![0; length];
                    reader.read_exact(&mut body)?;
                    let head: String = text
                        .split("\r\n")
                        .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
                        .collect::<Vec<_>>()
                        .join("\r\n");
                    let head = head.trim_end_matches("\r\n").to_owned();
                    let mut up = std::net::TcpStream::connect(upstream)?;
                    write!(up, "{head}\r\nConnection: close\r\n\r\n")?;
                    up.write_all(&body)?;
                    let mut answer = Vec::new();
                    up.read_to_end(&mut answer)?;
                    client.write_all(&answer)?;
                    return Ok(());
                }
            });
        }
    });
    Ok(addr)
}

#[test]
fn audit_exits_2_promptly_when_s3_answers_head_with_a_500_and_a_body() -> Result<()> {
    let site = with_changelist(&[A, B, C])?;
    let store = Store::s3("audit-head-500")?;
    let store_url = store.url.clone();
    let case = Case::new(store, &site.url("/.well-known/resourcesync"), "")?;
    case.run()?.assert_ok();
    let sw = rsagg_e2e::Seaweed::shared()?;
    let endpoint: std::net::SocketAddr = sw
        .endpoint()
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .parse()?;
    let proxy = head_500_proxy(endpoint)?;
    // Short store retries, so that the test takes seconds.
    let toml = std::fs::read_to_string(&case.toml)?.replace(
        "[store]\n",
        "[store]\nretries = 1\nretry_timeout = \"2s\"\n",
    );
    std::fs::write(&case.toml, toml)?;
    let env: Vec<(String, String)> = sw
        .env()
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "AWS_ENDPOINT" | "AWS_ENDPOINT_URL" => (k, format!("http://{proxy}")),
            _ => (k, v),
        })
        .collect();
    let started = std::time::Instant::now();
    let mut child = Command::new(rsagg_bin()?)
        .args(["audit", &case.toml.to_string_lossy(), "--json"])
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_PROFILE")
        .envs(env)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let limit = std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if started.elapsed() > limit {
            child.kill()?;
            let out = child.wait_with_output()?;
            anyhow::bail!(
                "audit still running after {limit:?} against a store failing HEAD: {}",
                tail(&String::from_utf8_lossy(&out.stderr), 30)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let out = child.wait_with_output()?;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(status.code(), Some(2), "{stdout}{stderr}");
    assert!(stdout.trim().is_empty(), "no verdict: {stdout}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("rsagg audit:"))
        .unwrap_or_default();
    assert!(
        line.contains(&store_url) || line.contains("blobs/sha256"),
        "{stderr}"
    );
    assert!(line.contains("500"), "{stderr}");
    Ok(())
}
