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

/// A provider of generated records in pages of `batch` (pages and tokens computed from their
/// position), that holds the `hold`-th request carrying a token until `released`, so that a
/// test can kill rsagg at a known point of a list. Every request is logged.
mod held {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use axum::extract::{Query, State};
    use axum::http::header;
    use axum::response::{IntoResponse, Response};

    /// `from`, `until` and `resumptionToken` of a `ListRecords` request.
    pub type Asked = (Option<String>, Option<String>, Option<String>);

    pub struct Provider {
        /// Record i's datestamp (seconds since the epoch), for i in 0..len.
        pub stamps: Vec<i64>,
        pub batch: usize,
        pub hold: usize,
        pub earliest: String,
        pub tokens: AtomicUsize,
        pub held: AtomicBool,
        pub released: AtomicBool,
        /// Every `ListRecords` request.
        pub log: Mutex<Vec<Asked>>,
    }

    fn ds(secs: i64) -> String {
        rsagg_oai::Datestamp::from_unix(secs).format(rsagg_oai::Granularity::Second)
    }

    fn parse(s: &str) -> i64 {
        rsagg_oai::Datestamp::parse(s).expect("a datestamp").unix()
    }

    fn envelope(body: &str) -> Response {
        let now = ds(std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs() as i64);
        (
            [(header::CONTENT_TYPE, "text/xml; charset=utf-8")],
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\"><responseDate>{now}</responseDate><request>http://127.0.0.1/oai</request>{body}</OAI-PMH>"
            ),
        )
            .into_response()
    }

    async fn oai(
        State(p): State<Arc<Provider>>,
        Query(q): Query<HashMap<String, String>>,
    ) -> Response {
        match q.get("verb").map(String::as_str) {
            Some("Identify") => envelope(&format!(
                "<Identify><repositoryName>Held</repositoryName><baseURL>http://127.0.0.1/oai</baseURL><protocolVersion>2.0</protocolVersion><adminEmail>a@example.org</adminEmail><earliestDatestamp>{}</earliestDatestamp><deletedRecord>persistent</deletedRecord><granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify>",
                p.earliest
            )),
            Some("ListMetadataFormats") => envelope(
                "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix><schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema><metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace></metadataFormat></ListMetadataFormats>",
            ),
            Some("ListRecords") => {
                let token = q.get("resumptionToken").cloned();
                let (offset, from, until) = match &token {
                    Some(t) => {
                        let mut parts = t.split('|');
                        let offset: usize = parts.next().unwrap_or("0").parse().unwrap_or(0);
                        let from = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
                        let until = parts.next().filter(|s| !s.is_empty()).map(str::to_owned);
                        (offset, from, until)
                    }
                    None => (0, q.get("from").cloned(), q.get("until").cloned()),
                };
                p.log
                    .lock()
                    .expect("log")
                    .push((from.clone(), until.clone(), token.clone()));
                if token.is_some() && p.tokens.fetch_add(1, Ordering::SeqCst) + 1 == p.hold {
                    p.held.store(true, Ordering::SeqCst);
                    while !p.released.load(Ordering::SeqCst) {
                        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    }
                }
                let lo = from.as_deref().map_or(i64::MIN, parse);
                let hi = until.as_deref().map_or(i64::MAX, parse);
                let matching: Vec<usize> = (0..p.stamps.len())
                    .filter(|&i| (lo..=hi).contains(&p.stamps[i]))
                    .collect();
                if matching.is_empty() {
                    return envelope("<error code=\"noRecordsMatch\">none</error>");
                }
                let mut body = String::from("<ListRecords>");
                for &i in matching.iter().skip(offset).take(p.batch) {
                    body.push_str(&format!(
                        "<record><header><identifier>oai:held:{i}</identifier><datestamp>{}</datestamp></header><metadata><oai_dc:dc xmlns:oai_dc=\"http://www.openarchives.org/OAI/2.0/oai_dc/\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\"><dc:title>Held {i}</dc:title></oai_dc:dc></metadata></record>",
                        ds(p.stamps[i])
                    ));
                }
                let next = offset + p.batch;
                if next < matching.len() {
                    body.push_str(&format!(
                        "<resumptionToken completeListSize=\"{}\" cursor=\"{offset}\">{next}|{}|{}</resumptionToken>",
                        matching.len(),
                        from.unwrap_or_default(),
                        until.unwrap_or_default()
                    ));
                } else if offset > 0 {
                    body.push_str(&format!(
                        "<resumptionToken completeListSize=\"{}\" cursor=\"{offset}\"/>",
                        matching.len()
                    ));
                }
                body.push_str("</ListRecords>");
                envelope(&body)
            }
            _ => envelope("<error code=\"badVerb\">no such verb</error>"),
        }
    }

    /// Serves `p` on 127.0.0.1:0 from a thread of its own (stopped when the returned server
    /// is dropped); returns it with the base URL.
    pub fn serve(p: Arc<Provider>) -> anyhow::Result<(rsagg_e2e::ServerThread, String)> {
        let app = axum::Router::new()
            .route("/oai", axum::routing::get(oai))
            .with_state(p);
        let server = rsagg_e2e::ServerThread::start("held-oai", app)?;
        let url = format!("http://{}/oai", server.addr());
        Ok((server, url))
    }
}

/// Issue 44 point 1: a harvest killed (SIGKILL) in the middle of a list resumes at the page
/// it was storing: the windows done are not asked again, the window in progress goes on by
/// the token the state kept, at most two pages are asked twice, and every record is stored
/// exactly once (one `created` in the change log each).
#[test]
fn a_harvest_killed_mid_list_resumes_within_one_page_and_loses_and_doubles_nothing() -> Result<()> {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    // 200 records, 50 in each of 2021..2024, pages of 10: yearly windows of 5 pages each.
    let year = |y: i64| (y - 1970) * 31_556_952;
    let stamps: Vec<i64> = (0..200)
        .map(|i| year(2021 + i / 50) + 86_400 * 10 + (i % 50) * 3_600)
        .collect();
    let provider = Arc::new(held::Provider {
        stamps,
        batch: 10,
        // The 10th page asked by token: the second page of the third window, about half way.
        hold: 10,
        earliest: "2021-01-01T00:00:00Z".into(),
        tokens: Default::default(),
        held: Default::default(),
        released: Default::default(),
        log: Default::default(),
    });
    let (_server, url) = held::serve(provider.clone())?;
    let case = Case::new(Store::file("oai-killed")?, &url, "kind = \"oai-pmh\"")?;

    let running = case.spawn_run(&[] as &[(&str, String)])?;
    wait_until(Duration::from_secs(60), || {
        Ok(provider.held.load(Ordering::SeqCst))
    })?;
    // Killed while the provider holds the page: the pages before it may be stored or not.
    drop(running);
    provider.released.store(true, Ordering::SeqCst);
    let asked_before = provider.log.lock().expect("log").len();

    let run = case.run()?;
    run.assert_ok();
    let snap = case.snapshot(UP)?;
    snap.assert_log_sane();
    assert_eq!(snap.records.len(), 200);
    assert_eq!(
        snap.log.len(),
        200,
        "one change per record, none twice: {:?}",
        snap.log
            .iter()
            .map(|e| (&e.uri, e.change.as_str()))
            .collect::<Vec<_>>()
    );

    let log = provider.log.lock().expect("log").clone();
    // No window's first request is asked twice: the run went on from where the first
    // stopped, not from the start of the list or of the window.
    let mut firsts: Vec<_> = log
        .iter()
        .filter(|(_, _, t)| t.is_none())
        .map(|(f, u, _)| (f.clone(), u.clone()))
        .collect();
    let windows = firsts.len();
    firsts.sort();
    firsts.dedup();
    assert_eq!(
        firsts.len(),
        windows,
        "a window was started again: {log:#?}"
    );
    // Pages asked twice: those asked before the kill and again after it.
    let (before, after) = log.split_at(asked_before);
    let again = after
        .iter()
        .filter(|a| before.iter().any(|b| b == *a))
        .count();
    eprintln!(
        "killed at request {asked_before} of {}; the resumed run asked {} requests, {again} of them asked before the kill",
        log.len(),
        after.len()
    );
    assert!(again <= 2, "{again} pages asked twice: {log:#?}");
    assert!(
        after.len() < log.len() / 2 + 3,
        "the resumed run asked {} of {} requests",
        after.len(),
        log.len()
    );

    // The checkpoint moved to the pass's end, every window done.
    let cp = checkpoint(
        &case,
        UP,
        &format!("{url}?verb=ListRecords&metadataPrefix=oai_dc"),
    )?
    .context("a checkpoint")?;
    let pass = cp.oai.context("the pass is kept")?;
    assert!(pass.complete && pass.resumed, "{pass:?}");
    assert!(
        pass.windows
            .iter()
            .all(|w| w.status == rsagg_store::WindowStatus::Done),
        "{pass:?}"
    );
    Ok(())
}
