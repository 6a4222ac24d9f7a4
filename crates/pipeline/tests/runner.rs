//! The runner in process (`run --once`), against a fixture upstream served by axum on
//! 127.0.0.1:0 and a `file://` store in a temporary directory: a baseline, an incremental
//! Change List step and a deletion, so a logic bug in harvest or the runner fails here in
//! seconds, without the Python peers of the end-to-end tests.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Path as AxPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rsagg_layout::report::Verdict;
use rsagg_pipeline::{Pipeline, RunOptions, RunReport, run_once};

/// What the fixture Source offers: its resources (path → body) and its Change List
/// entries (path, change, datetime), in order. The Resource List is taken `at`
/// [`LIST_AT`]; the Change List reaches back to it.
#[derive(Default)]
struct Source {
    resources: BTreeMap<String, Vec<u8>>,
    changes: Vec<(String, &'static str, String)>,
    /// The `hash` the Resource List gives a resource (none unless set).
    hashes: BTreeMap<String, String>,
}

const LIST_AT: &str = "2025-01-01T00:00:00Z";

type Shared = (String, Arc<Mutex<Source>>);

fn xml(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

const HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
"#;

async fn capabilitylist(State((base, _)): State<Shared>) -> Response {
    xml(format!(
        r#"{HEAD}<rs:md capability="capabilitylist"/>
<url><loc>{base}resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
<url><loc>{base}changelist.xml</loc><rs:md capability="changelist"/></url>
</urlset>"#
    ))
}

async fn resourcelist(State((base, src)): State<Shared>) -> Response {
    let src = src.lock().unwrap();
    let mut body = format!("{HEAD}<rs:md capability=\"resourcelist\" at=\"{LIST_AT}\"/>\n");
    for (path, bytes) in &src.resources {
        let hash = src
            .hashes
            .get(path)
            .map(|h| format!(" hash=\"{h}\""))
            .unwrap_or_default();
        body.push_str(&format!(
            "<url><loc>{base}res/{path}</loc><rs:md length=\"{}\"{hash}/></url>\n",
            bytes.len()
        ));
    }
    body.push_str("</urlset>");
    xml(body)
}

async fn changelist(State((base, src)): State<Shared>) -> Response {
    let src = src.lock().unwrap();
    let mut body = format!("{HEAD}<rs:md capability=\"changelist\" from=\"{LIST_AT}\"/>\n");
    for (path, change, at) in &src.changes {
        body.push_str(&format!(
            "<url><loc>{base}res/{path}</loc><rs:md change=\"{change}\" datetime=\"{at}\"/></url>\n"
        ));
    }
    body.push_str("</urlset>");
    xml(body)
}

async fn resource(State((_, src)): State<Shared>, AxPath(path): AxPath<String>) -> Response {
    match src.lock().unwrap().resources.get(&path) {
        Some(b) => ([(header::CONTENT_TYPE, "text/plain")], b.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Serves `src` on 127.0.0.1:0; returns its base URL.
async fn serve(src: Arc<Mutex<Source>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/capabilitylist.xml", axum::routing::get(capabilitylist))
        .route("/resourcelist.xml", axum::routing::get(resourcelist))
        .route("/changelist.xml", axum::routing::get(changelist))
        .route("/res/{path}", axum::routing::get(resource))
        .with_state((base.clone(), src));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn pipeline(base: &str, store: &Path) -> Pipeline {
    let text = format!(
        r#"
[collection]
name = "fixture"
base_url = "https://agg.example.org/fixture/"

[store]
url = "file://{}"

[[upstream]]
name = "source"
url = "{base}capabilitylist.xml"
allow_private = true
"#,
        store.display()
    );
    Pipeline::parse(Path::new("fixture.toml"), &text).unwrap()
}

/// The counts of the only upstream: (created, updated, deleted, unchanged).
fn counts(r: &RunReport) -> (u64, u64, u64, u64) {
    let u = &r.upstreams[0];
    assert_eq!(u.verdict, Verdict::Ok, "{r:?}");
    (u.created, u.updated, u.deleted, u.unchanged)
}

/// The published Resource List (every part under the store's `resourcelist` paths),
/// flattened to the `<loc>`s it names.
fn published_locs(store: &Path) -> Vec<String> {
    let mut locs: Vec<String> = common::resource_lists(store)
        .iter()
        .flat_map(|text| {
            text.split("<loc>")
                .skip(1)
                .map(|part| part.split("</loc>").next().unwrap().to_owned())
        })
        .collect();
    locs.sort();
    locs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baseline_then_changes_then_a_deletion_through_the_runner() {
    let src = Arc::new(Mutex::new(Source::default()));
    {
        let mut s = src.lock().unwrap();
        s.resources.insert("a.txt".into(), b"alpha".to_vec());
        s.resources.insert("b.txt".into(), b"bravo".to_vec());
    }
    let base = serve(src.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path());
    let opts = RunOptions::default();

    // Baseline from the Resource List.
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (2, 0, 0, 0));
    assert_eq!(r.exit_code(false), 0);
    let copies = published_locs(dir.path());
    assert_eq!(copies.len(), 2, "{copies:?}");
    assert!(
        copies.iter().any(|l| l.ends_with("/res/a.txt")),
        "{copies:?}"
    );

    // Nothing changed: nothing fetched again as a change.
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r).0 + counts(&r).1 + counts(&r).2, 0, "{r:?}");

    // An incremental step: b.txt updated, c.txt created, from the Change List.
    {
        let mut s = src.lock().unwrap();
        s.resources.insert("b.txt".into(), b"bravo 2".to_vec());
        s.resources.insert("c.txt".into(), b"charlie".to_vec());
        s.changes
            .push(("b.txt".into(), "updated", "2025-01-01T01:00:00Z".into()));
        s.changes
            .push(("c.txt".into(), "created", "2025-01-01T02:00:00Z".into()));
    }
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (1, 1, 0, 0), "{r:?}");
    assert_eq!(published_locs(dir.path()).len(), 3);

    // A deletion: a.txt gone from the Source and its Change List says so.
    {
        let mut s = src.lock().unwrap();
        s.resources.remove("a.txt");
        s.changes
            .push(("a.txt".into(), "deleted", "2025-01-01T03:00:00Z".into()));
    }
    let r = run_once(&p, &opts).await.unwrap();
    assert_eq!(counts(&r), (0, 0, 1, 0), "{r:?}");
    let copies = published_locs(dir.path());
    assert_eq!(copies.len(), 2, "{copies:?}");
    assert!(
        copies.iter().any(|l| l.ends_with("/res/c.txt")),
        "{copies:?}"
    );
    assert!(
        copies.iter().all(|l| !l.ends_with("/res/a.txt")),
        "a.txt still listed: {copies:?}"
    );
}

/// Spec 12.1 (verification): a body whose digest is not the one its Resource List entry
/// gives is fetched once more, then quarantined, not stored as a copy; a good one beside it
/// is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_does_not_match_its_listed_hash_is_quarantined() {
    let src = Arc::new(Mutex::new(Source::default()));
    {
        let mut s = src.lock().unwrap();
        s.resources.insert("good.txt".into(), b"good".to_vec());
        s.resources.insert("bad.txt".into(), b"tampered".to_vec());
        // md5 of "original", not of the body served.
        s.hashes.insert(
            "bad.txt".into(),
            "md5:919c8b643b7133116b02fc0d9bb7df3f".into(),
        );
    }
    let base = serve(src.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let p = pipeline(&base, dir.path());
    let r = run_once(&p, &RunOptions::default()).await.unwrap();
    let u = &r.upstreams[0];
    assert_eq!((u.created, u.quarantined), (1, 1), "{r:?}");
    assert_eq!(r.exit_code(true), 1, "--fail-on-quarantine counts it");
    let copies = published_locs(dir.path());
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert!(copies[0].ends_with("/res/good.txt"), "{copies:?}");
}
