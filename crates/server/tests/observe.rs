//! The observability routes against what a real run left: an in-process upstream Source on
//! loopback (a Resource List with two good resources, one whose bytes never match the
//! listed MD5 and one that is gone, both with hostile characters in their URIs), a real
//! `rsagg run --once` pass (`run_once`) into a `file://` store, then `/healthz`, `/readyz`,
//! `/metrics` and `/status` through the axum router.

mod common;

use common::{get, request};

use std::collections::{BTreeMap, HashMap};
use std::path::Path as FsPath;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::http::{Method, StatusCode, header};
use md5::{Digest, Md5};
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_model::W3cDateTime;
use rsagg_pipeline::{Pipeline, RunOptions, run_once};
use rsagg_server::{Collection, Options, StatsRefresh, router, router_with_options};

/// The router of `collections`, asking the stores at every request (these tests change the
/// stores between requests; the refresh bound has tests of its own in `fleet.rs`).
fn fresh_router(collections: Vec<Collection>) -> axum::Router {
    let mut options = Options::default();
    options.stats_refresh = StatsRefresh::Every(std::time::Duration::ZERO);
    router_with_options(collections, None, options)
}

const BASE: &str = "https://agg.example.org/maps/";
/// The listed resource whose bytes never match (quarantined), with markup in its URI.
const BAD: &str = "/res/bad.txt?x=<script>alert(1)</script>&y=\"q\"";
/// A listed resource the upstream no longer has (404: "gone", with a warning naming it).
const GONE: &str = "/res/gone.txt?z=<script>alert(2)</script>";
/// How far behind now the upstream's Resource List `at` is (the checkpoint after the run).
const LAG: u64 = 3600;

fn md5_hex(b: &[u8]) -> String {
    Md5::digest(b).iter().map(|b| format!("{b:02x}")).collect()
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// An upstream Source on 127.0.0.1 (paths → bodies; queries ignored), and its origin.
async fn upstream() -> String {
    common::serve_files(|origin| {
        let at = W3cDateTime::from_unix(
            i64::try_from(
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs()
                    - LAG,
            )
            .unwrap(),
            0,
        );
        let ns = r#"xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/""#;
        let item = |path: &str, listed: &[u8]| {
            format!(
                "<url><loc>{}</loc><lastmod>2025-12-01T00:00:00Z</lastmod>\
                 <rs:md hash=\"md5:{}\" length=\"{}\"/></url>\n",
                xml_escape(&format!("{origin}{path}")),
                md5_hex(listed),
                listed.len()
            )
        };
        let mut files: HashMap<String, Vec<u8>> = HashMap::new();
        files.insert("/res/a.txt".into(), b"alpha".to_vec());
        files.insert("/res/b.txt".into(), b"bravo".to_vec());
        files.insert("/res/bad.txt".into(), b"not what the list says".to_vec());
        let list = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {ns}>\n\
             <rs:ln rel=\"up\" href=\"{origin}/capabilitylist.xml\"/>\n\
             <rs:md capability=\"resourcelist\" at=\"{at}\"/>\n{}{}{}{}</urlset>\n",
            item("/res/a.txt", b"alpha"),
            item("/res/b.txt", b"bravo"),
            item(BAD, b"the listed bytes"),
            item(GONE, b"whatever"),
        );
        files.insert("/resourcelist.xml".into(), list.into_bytes());
        files.insert(
            "/capabilitylist.xml".into(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {ns}>\n\
                 <rs:ln rel=\"up\" href=\"{origin}/.well-known/resourcesync\"/>\n\
                 <rs:md capability=\"capabilitylist\"/>\n\
                 <url><loc>{origin}/resourcelist.xml</loc><rs:md capability=\"resourcelist\"/></url>\n\
                 </urlset>\n"
            )
            .into_bytes(),
        );
        files.insert(
            "/.well-known/resourcesync".into(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {ns}>\n\
                 <rs:md capability=\"description\"/>\n\
                 <url><loc>{origin}/capabilitylist.xml</loc><rs:md capability=\"capabilitylist\"/></url>\n\
                 </urlset>\n"
            )
            .into_bytes(),
        );
        files
    })
    .await
}

fn file_url(dir: &FsPath) -> String {
    url::Url::from_directory_path(dir).unwrap().to_string()
}

/// A store the real pipeline harvested into; the run's report as JSON.
async fn harvested(dir: &FsPath) -> (Arc<dyn ObjectStore>, serde_json::Value, Pipeline) {
    let origin = upstream().await;
    let store = file_url(&dir.join("store"));
    let toml = format!(
        "[collection]\nname = \"maps\"\nbase_url = \"{BASE}\"\n\n[store]\nurl = \"{store}\"\n\n\
         [fetch]\nretries = 0\n\n[[upstream]]\nname = \"up\"\nurl = \"{origin}/.well-known/resourcesync\"\n\
         allow_private = true\n"
    );
    let path = dir.join("maps.toml");
    std::fs::write(&path, &toml).unwrap();
    let p = Pipeline::parse(&path, &toml).unwrap();
    let report = run_once(&p, &RunOptions::default()).await.unwrap();
    let report = serde_json::to_value(&report).unwrap();
    let objects = rsagg_store::open_object_store(&store).unwrap().objects;
    (objects, report, p)
}

/// A sample of the exposition: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// Parses the text format 0.0.4 strictly enough to catch what Prometheus would refuse:
/// every sample belongs to a family announced by `# HELP` and `# TYPE` before it, families
/// are not interleaved, label values are quoted and escaped, values are floats.
fn parse_exposition(text: &str) -> Vec<Sample> {
    assert!(text.ends_with('\n'), "ends with a line feed");
    let mut helped: Vec<String> = Vec::new();
    let mut typed: HashMap<String, String> = HashMap::new();
    let mut current: Option<String> = None;
    let mut finished: Vec<String> = Vec::new();
    let mut samples = Vec::new();
    let valid_name = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, _) = rest.split_once(' ').expect("HELP name text");
            assert!(valid_name(name), "{line}");
            assert!(!helped.contains(&name.to_owned()), "HELP twice: {line}");
            helped.push(name.to_owned());
            if let Some(c) = current.replace(name.to_owned()) {
                finished.push(c);
            }
            assert!(!finished.contains(&name.to_owned()), "family split: {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect("TYPE name type");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{line}"
            );
            assert_eq!(
                current.as_deref(),
                Some(name),
                "TYPE after its HELP: {line}"
            );
            assert!(
                typed.insert(name.to_owned(), kind.to_owned()).is_none(),
                "{line}"
            );
            continue;
        }
        assert!(
            !line.starts_with('#') && !line.is_empty(),
            "unexpected line {line:?}"
        );
        // name{labels} value
        let name_end = line.find(['{', ' ']).expect("name");
        let name = &line[..name_end];
        assert!(valid_name(name), "{line}");
        // A histogram's samples are its name plus `_bucket` (with `le`), `_sum`, `_count`.
        let family = current.as_deref().expect("a family");
        let of_family = name == family
            || (typed.get(family).map(String::as_str) == Some("histogram")
                && ["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|suffix| name.strip_suffix(suffix) == Some(family)));
        assert!(of_family, "sample outside its family {family}: {line}");
        assert!(typed.contains_key(family), "no TYPE for {line}");
        let mut labels = BTreeMap::new();
        let mut rest = &line[name_end..];
        if let Some(r) = rest.strip_prefix('{') {
            let mut chars = r.char_indices().peekable();
            let end = loop {
                let (i, c) = chars.next().expect("unterminated labels");
                if c == '}' {
                    break i;
                }
                if c == ',' {
                    continue;
                }
                // label name up to '='
                let start = i;
                let mut eq = None;
                for (j, c) in chars.by_ref() {
                    if c == '=' {
                        eq = Some(j);
                        break;
                    }
                }
                let eq = eq.expect("label =");
                let lname = &r[start..eq];
                assert!(valid_name(lname) && !lname.contains(':'), "{line}");
                assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line}");
                let mut value = String::new();
                loop {
                    let (_, c) = chars.next().expect("unterminated value");
                    match c {
                        '"' => break,
                        '\\' => match chars.next().map(|(_, c)| c) {
                            Some('\\') => value.push('\\'),
                            Some('"') => value.push('"'),
                            Some('n') => value.push('\n'),
                            other => panic!("bad escape {other:?} in {line}"),
                        },
                        '\n' => panic!("raw line feed in {line}"),
                        c => value.push(c),
                    }
                }
                assert!(labels.insert(lname.to_owned(), value).is_none(), "{line}");
            };
            rest = &r[end + 1..];
        }
        let value = rest.strip_prefix(' ').expect("space before the value");
        assert!(!value.contains(' '), "no timestamps expected: {line}");
        let v: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            "NaN" => f64::NAN,
            v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
        };
        samples.push((name.to_owned(), labels, v));
    }
    for name in typed.keys() {
        assert!(helped.contains(name), "HELP of {name}");
    }
    // Every bucket list is cumulative and ends with `le="+Inf"` equal to `_count`.
    for (name, _) in typed.iter().filter(|(_, k)| *k == "histogram") {
        let bucket = format!("{name}_bucket");
        let count = format!("{name}_count");
        for (_, labels, n) in samples.iter().filter(|(n, _, _)| *n == count) {
            let les: Vec<(f64, f64)> = samples
                .iter()
                .filter(|(n, l, _)| {
                    *n == bucket && l.iter().filter(|(k, _)| *k != "le").eq(labels.iter())
                })
                .map(|(_, l, v)| (l["le"].parse::<f64>().unwrap_or(f64::INFINITY), *v))
                .collect();
            assert!(
                les.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{name}{labels:?}: {les:?}"
            );
            assert_eq!(les.last(), Some(&(f64::INFINITY, *n)), "{name}{labels:?}");
        }
    }
    samples
}

/// The value of the one sample of `name` with exactly `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    let want: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let found: Vec<f64> = samples
        .iter()
        .filter(|(n, l, _)| n == name && *l == want)
        .map(|(_, _, v)| *v)
        .collect();
    assert_eq!(found.len(), 1, "{name}{want:?} in {samples:#?}");
    found[0]
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_metrics_and_status_show_the_last_run() {
    let dir = tempfile::tempdir().unwrap();
    let (objects, report, pipeline) = harvested(dir.path()).await;
    let up = &report["upstreams"][0];
    assert_eq!(
        (
            &up["created"],
            &up["quarantined"],
            &up["gone"],
            &up["verdict"]
        ),
        (&2.into(), &1.into(), &1.into(), &"ok".into()),
        "{report:#}"
    );
    // A second collection that never ran, on its own (empty) store.
    let empty = Collection::new(
        "texts",
        "https://agg.example.org/texts/",
        Arc::new(object_store::memory::InMemory::new()),
    )
    .unwrap();
    let app = fresh_router(vec![
        Collection::new("maps", BASE, objects.clone()).unwrap(),
        empty,
    ]);

    let h = get(&app, "/healthz").await;
    assert_eq!((h.status, h.body.as_str()), (StatusCode::OK, "ok\n"));
    // Not ready while a collection has not been published (the Source Description
    // advertises its Capability List, which is not there), with the reason; the collection
    // the run published is ready.
    let r = get(&app, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert!(
        r.body.contains("collection `texts`: not published yet"),
        "{}",
        r.body
    );
    assert!(!r.body.contains("`maps`"), "{}", r.body);
    assert_eq!(
        request(&app, Method::HEAD, "/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let published = router(vec![
        Collection::new("maps", BASE, objects.clone()).unwrap(),
    ]);
    let r = get(&published, "/readyz").await;
    assert_eq!((r.status, r.body.as_str()), (StatusCode::OK, "ready\n"));

    // Traffic the counters see: a document, a copy that is not listed, a 404 elsewhere.
    let caps = get(&app, "/maps/capabilitylist.xml").await;
    assert_eq!(caps.status, StatusCode::OK);
    assert_eq!(
        get(&app, "/maps/r/up/http/nowhere/x").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&app, "/nothing-here").await.status,
        StatusCode::NOT_FOUND
    );

    let m = get(&app, "/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    let ct = m.headers[header::CONTENT_TYPE].to_str().unwrap();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let s = parse_exposition(&m.body);
    let maps_up = [("collection", "maps"), ("upstream", "up")];
    // The run's own object-store requests, counted by the store it opened: a baseline of
    // a file:// store writes blobs, state, documents; the report and /metrics agree on
    // what the stats object saw.
    let store = &report["store"];
    assert!(store["put"].as_u64().unwrap() > 0, "{report:#}");
    assert!(store["bytes_written"].as_u64().unwrap() > 0, "{report:#}");
    let metric_puts = value(
        &s,
        "rsagg_store_requests",
        &[("collection", "maps"), ("kind", "put")],
    );
    assert!(metric_puts > 0.0 && metric_puts <= store["put"].as_f64().unwrap());
    let outcome = |o: &'static str| {
        value(
            &s,
            "rsagg_last_run_resources",
            &[("collection", "maps"), ("upstream", "up"), ("outcome", o)],
        )
    };
    assert_eq!(outcome("created"), 2.0);
    assert_eq!(outcome("quarantined"), 1.0);
    assert_eq!(outcome("gone"), 1.0);
    assert_eq!(outcome("failed"), 0.0);
    assert_eq!(value(&s, "rsagg_upstream_up", &maps_up), 1.0);
    assert_eq!(value(&s, "rsagg_upstream_sets", &maps_up), 1.0);
    assert_eq!(
        value(&s, "rsagg_upstream_warnings", &maps_up),
        report["upstreams"][0]["warnings"].as_array().unwrap().len() as f64
    );
    assert_eq!(
        value(&s, "rsagg_quarantined", &[("collection", "maps")]),
        1.0
    );
    assert_eq!(
        value(&s, "rsagg_quarantine_truncated", &[("collection", "maps")]),
        0.0
    );
    assert_eq!(
        value(&s, "rsagg_collection_store_up", &[("collection", "maps")]),
        1.0
    );
    assert_eq!(
        value(&s, "rsagg_collection_store_up", &[("collection", "texts")]),
        1.0
    );
    let finished = value(
        &s,
        "rsagg_last_run_timestamp_seconds",
        &[("collection", "maps")],
    );
    assert!((now_secs() - finished).abs() < 120.0, "finished {finished}");
    let duration = value(
        &s,
        "rsagg_last_run_duration_seconds",
        &[("collection", "maps")],
    );
    assert!(duration > 0.0 && (duration - report["seconds"].as_f64().unwrap()).abs() < 1e-6);
    // The checkpoint is the Resource List's `at`, LAG seconds ago: the upstream is quiet.
    let cp = value(&s, "rsagg_upstream_checkpoint_timestamp_seconds", &maps_up);
    assert!(
        (now_secs() - LAG as f64 - cp).abs() < 120.0,
        "checkpoint {cp}"
    );
    // The lag is how stale the copy is, not how quiet the upstream: counted from the start
    // of the pass that just succeeded, far less than the upstream's LAG.
    let lag = value(&s, "rsagg_upstream_lag_seconds", &maps_up);
    let success = value(
        &s,
        "rsagg_upstream_last_success_timestamp_seconds",
        &maps_up,
    );
    assert!(lag >= 0.0 && lag < (LAG / 2) as f64, "lag {lag}");
    assert!(
        success <= finished && finished - success <= duration + 1.0,
        "last success {success}, finished {finished}, took {duration}"
    );
    // Build info, and the history's counters and histograms.
    assert!(
        s.iter().any(|(n, l, v)| n == "rsagg_build_info"
            && l.get("version").map(String::as_str) == Some(env!("CARGO_PKG_VERSION"))
            && *v == 1.0),
        "{}",
        m.body
    );
    let maps = [("collection", "maps")];
    assert_eq!(value(&s, "rsagg_runs_total", &maps), 1.0);
    let total = |s: &[Sample], o: &'static str| {
        value(
            s,
            "rsagg_resources_total",
            &[("collection", "maps"), ("upstream", "up"), ("outcome", o)],
        )
    };
    assert_eq!(total(&s, "created"), 2.0);
    assert_eq!(total(&s, "quarantined"), 1.0);
    let passes = |s: &[Sample], v: &'static str| {
        value(
            s,
            "rsagg_upstream_passes_total",
            &[("collection", "maps"), ("upstream", "up"), ("verdict", v)],
        )
    };
    assert_eq!((passes(&s, "ok"), passes(&s, "failed")), (1.0, 0.0));
    let fetched_ok = value(
        &s,
        "rsagg_fetch_requests_total",
        &[("collection", "maps"), ("outcome", "ok")],
    );
    assert!(
        fetched_ok >= 4.0,
        "discovery, lists and resources: {fetched_ok}"
    );
    assert!(value(&s, "rsagg_fetch_response_bytes_total", &maps) > 0.0);
    assert_eq!(
        value(&s, "rsagg_fetch_retries_total", &maps),
        0.0,
        "retries = 0"
    );
    // A histogram: cumulative buckets ending with +Inf equal to _count, and a _sum.
    let requests: f64 = s
        .iter()
        .filter(|(n, l, _)| n == "rsagg_fetch_requests_total" && l["collection"] == "maps")
        .map(|(_, _, v)| v)
        .sum();
    let buckets: Vec<(f64, f64)> = s
        .iter()
        .filter(|(n, l, _)| n == "rsagg_fetch_duration_seconds_bucket" && l["collection"] == "maps")
        .map(|(_, l, v)| (l["le"].parse::<f64>().unwrap_or(f64::INFINITY), *v))
        .collect();
    assert!(buckets.len() > 2, "{buckets:?}");
    assert!(
        buckets
            .windows(2)
            .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
        "{buckets:?}"
    );
    assert_eq!(buckets.last().unwrap(), &(f64::INFINITY, requests));
    assert_eq!(
        value(&s, "rsagg_fetch_duration_seconds_count", &maps),
        requests
    );
    assert!(value(&s, "rsagg_fetch_duration_seconds_sum", &maps) > 0.0);
    assert_eq!(value(&s, "rsagg_run_duration_seconds_count", &maps), 1.0);
    assert_eq!(
        value(&s, "rsagg_publish_duration_seconds_count", &maps),
        1.0
    );
    assert!(
        m.body
            .contains("# TYPE rsagg_fetch_duration_seconds histogram\n")
    );
    assert!(m.body.contains("# TYPE rsagg_resources_total counter\n"));
    assert_eq!(
        value(
            &s,
            "rsagg_changelist_open_entries",
            &[("collection", "maps")]
        ),
        report["publish"]["change_lists"]["open_entries"]
            .as_f64()
            .unwrap()
    );
    assert!(
        value(
            &s,
            "rsagg_changelist_open_entries",
            &[("collection", "maps")]
        ) >= 2.0
    );
    assert_eq!(
        value(&s, "rsagg_publish_errors", &[("collection", "maps")]),
        0.0
    );
    // The never-run collection has no run figures.
    assert!(
        !s.iter()
            .any(|(n, l, _)| n == "rsagg_last_run_timestamp_seconds"
                && l.get("collection").map(String::as_str) == Some("texts"))
    );
    // GC: present when a run collected (a first run only schedules the first collection,
    // one gc_interval later), as published/gc.json says.
    if let Some(gc) = rsagg_publish::gc::last_report(&objects).await.unwrap() {
        assert_eq!(
            value(
                &s,
                "rsagg_gc_last_deleted_objects",
                &[("collection", "maps")]
            ),
            gc.deleted as f64
        );
        assert_eq!(
            value(&s, "rsagg_gc_last_freed_bytes", &[("collection", "maps")]),
            gc.bytes_freed as f64
        );
    }
    // The server's own counters, with the bytes of the document it sent.
    let req = |c: &str, kind: &str, status: &str| {
        value(
            &s,
            "rsagg_http_requests_total",
            &[("collection", c), ("kind", kind), ("status", status)],
        )
    };
    assert_eq!(req("maps", "document", "200"), 1.0);
    assert_eq!(req("maps", "copy", "404"), 1.0);
    assert_eq!(req("", "other", "404"), 1.0);
    assert_eq!(req("", "other", "200"), 1.0, "healthz");
    assert_eq!(
        req("", "other", "503"),
        2.0,
        "readyz twice, `texts` not published"
    );
    assert_eq!(
        value(
            &s,
            "rsagg_http_response_bytes_total",
            &[("collection", "maps"), ("kind", "document")]
        ),
        caps.body.len() as f64
    );
    assert!(
        m.body
            .contains("# TYPE rsagg_http_requests_total counter\n")
    );
    assert!(m.body.contains("# TYPE rsagg_upstream_lag_seconds gauge\n"));
    assert!(m.body.contains("# HELP rsagg_last_run_resources "));

    // The overview: a row per collection, linking to its page.
    let overview = get(&app, "/status").await;
    assert_eq!(overview.status, StatusCode::OK);
    assert_eq!(
        overview.headers[header::CONTENT_TYPE].to_str().unwrap(),
        "text/html; charset=utf-8"
    );
    for must in [
        "<tr data-collection=\"maps\"><td><a href=\"/status/maps\">maps</a></td><td class=\"ok\">ok</td>",
        "<tr data-collection=\"texts\"><td><a href=\"/status/texts\">texts</a></td><td class=\"muted\">no run yet</td>",
        "<td class=\"n\">0 of 1 failed</td>",
    ] {
        assert!(
            overview.body.contains(must),
            "{must:?} in\n{}",
            overview.body
        );
    }
    let texts = get(&app, "/status/texts").await;
    assert!(texts.body.contains("<h2>texts</h2>"), "{}", texts.body);
    assert!(texts.body.contains("no run yet"), "{}", texts.body);
    let page = get(&app, "/status/maps").await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(
        page.headers[header::CONTENT_TYPE].to_str().unwrap(),
        "text/html; charset=utf-8"
    );
    let html = &page.body;
    assert!(html.starts_with("<!DOCTYPE html>"), "{html}");
    for must in [
        "<h2>maps</h2>",
        "<code>https://agg.example.org/maps/</code>",
        "href=\"/maps/capabilitylist.xml\"",
        "href=\"/maps/resourcelist.xml\"",
        "href=\"/maps/changelist.xml\"",
        "<tr data-upstream=\"up\"><td>up</td><td class=\"ok\">ok</td>",
        "data-outcome=\"created\">2</td>",
        "data-outcome=\"quarantined\">1</td>",
        "data-outcome=\"gone\">1</td>",
        "Quarantine (1)",
        "Last run finished",
        "Change Lists",
    ] {
        assert!(html.contains(must), "{must:?} in\n{html}");
    }
    // The hostile URIs appear escaped, as text: in the quarantine table and in the warning.
    let html_escaped = |p: &str| {
        p.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    assert!(html.contains(&html_escaped(BAD)), "{html}");
    assert!(html.contains(&html_escaped(GONE)), "{html}");
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("alert(1)</"), "{html}");
    // The history's charts, one point so far.
    for must in [
        "<figure class=\"chart\" data-chart=\"rate\">",
        "<figure class=\"chart\" data-chart=\"lag\">",
        "<g data-series=\"up\"><polyline",
        "<table class=\"outcomes\">",
        "The last 1 of 1 recorded run(s)",
    ] {
        assert!(html.contains(must), "{must:?} in\n{html}");
    }
    assert_eq!(html.matches("<svg ").count(), 2, "{html}");
    // HEAD: headers, no body.
    for path in ["/status", "/status/maps"] {
        let head = request(&app, Method::HEAD, path).await;
        assert_eq!((head.status, head.body.as_str()), (StatusCode::OK, ""));
    }

    // A second run: the counters grow (the totals are kept in the store, not in the
    // process that ran), the gauges describe that run only.
    run_once(&pipeline, &RunOptions::default()).await.unwrap();
    let m = get(&app, "/metrics").await;
    let s2 = parse_exposition(&m.body);
    assert_eq!(value(&s2, "rsagg_runs_total", &maps), 2.0);
    assert_eq!(total(&s2, "created"), 2.0);
    assert!(total(&s2, "unchanged") >= 1.0 + total(&s, "unchanged"));
    assert_eq!(passes(&s2, "ok"), 2.0);
    assert!(
        value(
            &s2,
            "rsagg_fetch_requests_total",
            &[("collection", "maps"), ("outcome", "ok")]
        ) > fetched_ok
    );
    assert_eq!(
        value(
            &s2,
            "rsagg_last_run_resources",
            &[
                ("collection", "maps"),
                ("upstream", "up"),
                ("outcome", "created")
            ]
        ),
        0.0
    );
    assert!(
        value(
            &s2,
            "rsagg_upstream_last_success_timestamp_seconds",
            &maps_up
        ) > success
    );
    let html = get(&app, "/status/maps").await.body;
    assert!(html.contains("The last 2 of 2 recorded run(s)"), "{html}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_the_collection_whose_store_fails() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&good).unwrap();
    std::fs::create_dir_all(&broken).unwrap();
    // Both published (ready is: published, and the store answers).
    for d in [&good, &broken] {
        std::fs::write(d.join("capabilitylist.xml"), b"<urlset/>").unwrap();
    }
    let open = |p: &FsPath| {
        rsagg_store::open_object_store(&file_url(p))
            .unwrap()
            .objects
    };
    let app = fresh_router(vec![
        Collection::new("good", "https://agg.example.org/good/", open(&good)).unwrap(),
        Collection::new("broken", "https://agg.example.org/broken/", open(&broken)).unwrap(),
    ]);
    let r = get(&app, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    // The store's directory becomes a regular file: every request to it fails (ENOTDIR),
    // which is not "not found".
    std::fs::remove_dir_all(&broken).unwrap();
    std::fs::write(&broken, b"not a directory").unwrap();
    let r = get(&app, "/readyz").await;
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE, "{}", r.body);
    assert!(r.body.contains("collection `broken`"), "{}", r.body);
    assert!(!r.body.contains("`good`"), "{}", r.body);
    // Liveness does not depend on the stores.
    assert_eq!(get(&app, "/healthz").await.status, StatusCode::OK);
    // /metrics and /status still answer, saying what failed.
    let m = get(&app, "/metrics").await;
    assert_eq!(m.status, StatusCode::OK);
    let s = parse_exposition(&m.body);
    assert_eq!(
        value(&s, "rsagg_collection_store_up", &[("collection", "broken")]),
        0.0
    );
    assert_eq!(
        value(&s, "rsagg_collection_store_up", &[("collection", "good")]),
        1.0
    );
    let page = get(&app, "/status").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(
        page.body.contains("<tr data-collection=\"broken\"><td><a href=\"/status/broken\">broken</a></td><td class=\"failed\">failing</td>"),
        "{}",
        page.body
    );
    assert!(page.body.contains("store unreadable"), "{}", page.body);
    let page = get(&app, "/status/broken").await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains("could not be read"), "{}", page.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_strings_in_the_stats_object_are_escaped() {
    // A stats object as the pipeline writes it, with markup wherever upstream data goes.
    let objects: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let evil = "<script>alert('x')</script>";
    let report = rsagg_layout::report::RunReport {
        collection: "maps".into(),
        upstreams: vec![],
        publish: Some(rsagg_layout::report::PublishReport {
            errors: vec![format!("change lists: {evil}")],
            ..Default::default()
        }),
        notify: Some(rsagg_layout::report::NotifyReport {
            topic: format!("{BASE}change/"),
            hub: format!("http://hub.example/{evil}"),
            form: "resourcesync".into(),
            prepared: None,
            delivery: rsagg_layout::report::DeliveryReport {
                pending: 1,
                last_error: Some(format!("hub answered {evil}")),
                ..Default::default()
            },
            errors: vec![format!("preparing: {evil}")],
        }),
        seconds: 0.5,
        push: None,
        store: None,
    };
    let mut report = serde_json::to_value(&report).unwrap();
    report["upstreams"] = serde_json::json!([{
        "name": "up", "verdict": "failed", "route": evil, "sets": 1,
        "created": 0, "updated": 0, "deleted": 0, "unchanged": 0, "replayed": 0,
        "quarantined": 1, "gone": 0, "superseded": 0, "failed": 1,
        "resyncs": [format!("re-sync {evil}")], "warnings": [format!("warn {evil}")],
        "error": format!("http://up.example/{evil}: 500"),
    }]);
    let q = rsagg_store::QuarantineRecord {
        upstream: "up".into(),
        uri: format!("http://up.example/a?{evil}"),
        reason: format!("reason {evil}"),
        expected: format!("md5:{evil}"),
        got: format!("md5:\"{evil}\""),
        at: W3cDateTime::now(),
        blob: None,
    };
    let stats = serde_json::json!({
        "finished": W3cDateTime::now(),
        "report": report,
        "quarantine": [q],
        "quarantine_truncated": true,
    });
    objects
        .put(
            &object_store::path::Path::from(rsagg_layout::paths::STATS_OBJECT),
            serde_json::to_vec(&stats).unwrap().into(),
        )
        .await
        .unwrap();
    let app = router(vec![Collection::new("maps", BASE, objects).unwrap()]);
    let html = get(&app, "/status/maps").await.body;
    let overview = get(&app, "/status").await.body;
    assert!(!overview.contains("<script"), "{overview}");
    assert!(!html.contains("<script"), "{html}");
    let escaped = "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;";
    for must in [
        format!("<td class=\"route\">{escaped}</td>"),
        format!("error: http://up.example/{escaped}: 500"),
        format!("re-synced: re-sync {escaped}"),
        format!("warning: warn {escaped}"),
        format!("<code>http://up.example/a?{escaped}</code>"),
        format!("reason {escaped}"),
        format!("<code>md5:&quot;{escaped}&quot;</code>"),
        format!("publish error: change lists: {escaped}"),
        format!("hub <code>http://hub.example/{escaped}</code>"),
        format!("notifications: preparing: {escaped}"),
        format!("notifications: hub answered {escaped}"),
        "Quarantine (1+)".to_owned(),
        "<td class=\"failed\">failed</td>".to_owned(),
    ] {
        assert!(html.contains(&must), "{must:?} in\n{html}");
    }
    let m = get(&app, "/metrics").await.body;
    let s = parse_exposition(&m);
    assert_eq!(
        value(
            &s,
            "rsagg_upstream_up",
            &[("collection", "maps"), ("upstream", "up")]
        ),
        0.0
    );
    assert_eq!(
        value(&s, "rsagg_quarantine_truncated", &[("collection", "maps")]),
        1.0
    );
}
