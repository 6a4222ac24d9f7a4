//! End-to-end test of OAI-PMH upstreams (issue "OAI-PMH upstreams"): an OAI-PMH 2.0
//! provider built on pyoai's server (`scripts/peers/oai_provider.py`) and a ResourceSync
//! Source feed one collection; rsagg harvests both, republishes them as one ResourceSync
//! Source, and the reference Destination `resync-sync` synchronises from it (baseline,
//! then the provider's updates, creations and deletions incrementally, then an audit),
//! while `rsagg audit` finds the store in sync with both upstreams.
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e oai::`.

use crate::common;

use std::path::Path;

use anyhow::{Context, Result};
use common::*;
use rsagg_e2e::{OaiOptions, OaiProvider, RsaggServer, resync_sync};
use rsagg_oai::{Datestamp, Granularity};
use serde_json::{Value, json};

/// A record of the provider's JSON repository (format: `scripts/peers/oai_provider.py`).
fn record(i: u32, datestamp: &str, title: &str, deleted: bool) -> Value {
    json!({
        "identifier": format!("oai:e2e:{i}"),
        "datestamp": datestamp,
        "sets": ["all"],
        "deleted": deleted,
        "dc": {"title": [title], "identifier": [format!("oai:e2e:{i}")]},
    })
}

fn write_repo(path: &Path, records: &[Value]) -> Result<()> {
    let doc = json!({"deletedRecord": "persistent", "records": records});
    // Written whole, then renamed: the provider re-reads the file when it changes.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, serde_json::to_vec(&doc)?)?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

/// Now on the provider's clock (UTC, whole seconds), as a datestamp.
fn now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    Datestamp::from_unix(i64::try_from(secs).expect("seconds fit")).format(Granularity::Second)
}

/// Every file under `dir` whose text contains `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if std::fs::read_to_string(&p).is_ok_and(|t| t.contains(needle)) {
                found.push(p);
            }
        }
    }
    found
}

#[test]
fn an_oai_pmh_provider_and_a_resourcesync_source_feed_one_collection_that_resync_sync_follows()
-> Result<()> {
    // The OAI-PMH provider: 9 records, pages of 4 (two resumptionTokens), one deletion
    // already kept (persistent).
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("repo.json");
    let mut records: Vec<Value> = (1..=9)
        .map(|i| {
            record(
                i,
                &format!("2024-01-0{i}T00:00:00Z"),
                &format!("Record {i}"),
                i == 9,
            )
        })
        .collect();
    write_repo(&data, &records)?;
    let provider = OaiProvider::start(
        &data,
        &OaiOptions {
            batch: 4,
            ..OaiOptions::default()
        },
    )?;

    // The ResourceSync Source beside it.
    let site = Site::new()?;
    let bodies: Vec<(&str, &[u8])> = vec![("/res/a.txt", b"alpha"), ("/res/b.txt", b"bravo")];
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &bodies,
    )?;
    site.changes("/changelist.xml", "changelist", "2025-12-31T00:00:00Z", &[])?;

    let port = RsaggServer::pick_port()?;
    let case = Case::published_at(
        Store::file("oai-mixed")?,
        &[
            upstream(UP, &provider.base_url(), "kind = \"oai-pmh\""),
            upstream("site", &site.url("/.well-known/resourcesync"), ""),
        ],
        &format!("http://127.0.0.1:{port}/mixed/"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (8, 0, 0), "{run:#?}");
    assert_eq!(run.up()["route"], "OaiPmh", "{run:#?}");
    assert_eq!(run.up_named("site")["created"], 2, "{run:#?}");

    let server = RsaggServer::start(port, &[&case.toml], &case.store.env()?)?;
    let work = tempfile::tempdir()?;
    let dst = work.path().join("dst");
    let dst_s = dst.to_str().context("utf-8")?.to_owned();
    let source_url = format!("{}/mixed", server.origin());
    let out = resync_sync(["--baseline", "--delete", &source_url, &dst_s], work.path())?;
    assert!(
        out.status_is("SYNCED") && out.status().unwrap_or("").contains("created=10"),
        "{:?}\n{}\nserver log:\n{}",
        out.status(),
        out.combined(),
        server.log_tail(20)
    );
    // A record's copy is its metadata (Dublin Core), not the OAI-PMH envelope.
    let copies = files_containing(&dst, "Record 3</dc:title>");
    assert_eq!(copies.len(), 1, "{copies:?}");
    let copy = std::fs::read_to_string(&copies[0])?;
    assert!(
        copy.contains("oai_dc:dc") && !copy.contains("<OAI-PMH"),
        "{copy}"
    );
    let at = header_at(&store_dir(&case)?.join("resourcelist.xml"))?;

    // The provider changes: record 2 updated, record 4 deleted, record 10 created, each
    // stamped with the provider's clock now (after the first harvest's `until`).
    let stamp = now();
    records[1] = record(2, &stamp, "Record 2, revised", false);
    records[3] = record(4, &stamp, "Record 4", true);
    records.push(record(10, &stamp, "Record 10", false));
    write_repo(&data, &records)?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    assert_eq!(run.up_named("site")["created"], 0, "{run:#?}");

    // resync-sync follows rsagg's Change List (its open list's alias: it cannot read a
    // Change List Index) from the Resource List's `at`.
    let open = format!("{}changelist-open.xml", case.base_url);
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
    assert!(
        out.status_lines
            .iter()
            .any(|l| l.starts_with("CHANGES APPLIED (created=1, updated=1, deleted=1)")),
        "{}",
        out.combined()
    );
    assert_eq!(
        files_containing(&dst, "Record 2, revised</dc:title>").len(),
        1
    );
    assert_eq!(files_containing(&dst, "Record 10</dc:title>").len(), 1);
    assert!(
        files_containing(&dst, "Record 4</dc:title>").is_empty(),
        "the deletion was applied"
    );
    let out = resync_sync(
        ["--audit", "--hash", "md5", &source_url, &dst_s],
        work.path(),
    )?;
    assert!(
        out.status_is("IN SYNC"),
        "{:?}\n{}",
        out.status(),
        out.combined()
    );

    // rsagg's own audit: the store holds exactly both upstreams' current state.
    let toml = case.toml.to_str().context("utf-8")?;
    let (code, stdout, stderr) = rsagg(&["audit", toml, "--json"])?;
    assert_eq!(code, 0, "{stdout}{stderr}");
    let v: Value = serde_json::from_str(stdout.trim())?;
    assert_eq!(v["in_sync"], true, "{stdout}");
    Ok(())
}
