//! `serve` in front of a fleet (issue 29, points 3 and 4): thousands of collections, each
//! with the objects its runs leave (`stats/last-run.json`, `stats/history.json`,
//! `published/resourcelist.json`) written with the pipeline's own types into a store of its
//! own, served by one router.
//!
//! - `/status` is an overview, one row per collection, failing first, filterable by query
//!   parameters, small at 4,000 collections; `/status/{collection}` has the detail.
//! - The Source Description names every collection and is strictly valid.
//! - `/metrics` asks a store about a collection only after the refresh bound (paused
//!   time), counts what it asked in `rsagg_serve_store_requests_total`, and leaves out the
//!   per-upstream series when told.
//!
//! Times are printed, never asserted (the machine is shared); sizes and request counts are.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::http::StatusCode;
use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_layout::history::{FetchStats, RunHistory, RunTimes};
use rsagg_layout::meta::ResourceListMeta;
use rsagg_layout::paths::{RESOURCE_LIST_META, STATS_HISTORY, STATS_OBJECT};
use rsagg_layout::report::{RunReport, RunStats, UpstreamReport, Verdict};
use rsagg_model::{Capability, Mode, Root, W3cDateTime};
use rsagg_server::{Collection, Options, StatsRefresh, router_with_options};

use common::get;

const FLEET: usize = 4000;
/// Resources per collection, as the fleet (M = 100).
const RESOURCES: u64 = 100;
/// Upstreams per collection.
const UPSTREAMS: usize = 2;
const MB: usize = 1_000_000;

/// Collection `i` has had no run yet (its store is empty).
fn never_ran(i: usize) -> bool {
    i % 101 == 7
}

/// Collection `i` failed its last run (its second upstream did).
fn failing(i: usize) -> bool {
    i % 97 == 5 && !never_ran(i)
}

/// Where collection `i` comes on the overview: failing, without a run, ok.
fn rank(i: usize) -> u8 {
    if failing(i) {
        0
    } else if never_ran(i) {
        1
    } else {
        2
    }
}

fn name(i: usize, long: bool) -> String {
    if long {
        // The longest name a pipeline may have (64 bytes, [a-z0-9-]).
        format!("{}-{i:04}", "x".repeat(59))
    } else {
        format!("c-{i:04}")
    }
}

fn at(secs: i64) -> W3cDateTime {
    W3cDateTime::from_unix(secs, 0)
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn put_json(objects: &Arc<dyn ObjectStore>, path: &str, v: &impl serde::Serialize) {
    objects
        .put(&Path::from(path), serde_json::to_vec(v).unwrap().into())
        .await
        .unwrap();
}

/// The last run of a collection: `created` resources by its first upstream, its second
/// upstream failed or not.
fn report(name: &str, created: u64, failed: bool) -> RunReport {
    let upstreams = (0..UPSTREAMS)
        .map(|u| {
            let mut r = UpstreamReport::new(&format!("up{u}"));
            r.sets = 1;
            if u == 0 {
                r.created = created;
            } else if failed {
                r.verdict = Verdict::Failed;
                r.error = Some("http://up.example/: 503".into());
            }
            r
        })
        .collect();
    RunReport {
        collection: name.to_owned(),
        upstreams,
        seconds: 2.0,
        ..RunReport::default()
    }
}

/// Writes what three hourly runs of collection `i` leave, the last `created` resources.
async fn write_runs(objects: &Arc<dyn ObjectStore>, name: &str, failed: bool, created: u64) {
    let now = now_secs();
    let mut history = RunHistory::default();
    for k in (0..3).rev() {
        let started = now - 3600 * k - 60;
        let r = report(name, created, failed && k == 0);
        let times = RunTimes {
            started: at(started),
            finished: at(started + 2),
            harvest_seconds: 1.5,
        };
        history.record(&r, &times, &FetchStats::default(), 200);
    }
    let stats = RunStats {
        finished: Some(at(now - 58)),
        report: report(name, created, failed),
        quarantine: vec![],
        quarantine_truncated: false,
    };
    put_json(objects, STATS_HISTORY, &history).await;
    put_json(objects, STATS_OBJECT, &stats).await;
    let meta = ResourceListMeta {
        seq: 1,
        generation: 1,
        parts: vec![("part-00000-g1.xml".into(), RESOURCES)],
        retired: vec![],
        rendered_with: String::new(),
        part_times: vec![],
        ..ResourceListMeta::default()
    };
    put_json(objects, RESOURCE_LIST_META, &meta).await;
}

/// `n` collections, each on a store of its own, with their runs' objects (none for those
/// that never ran); the stores are returned too, to write later runs into.
async fn fleet(n: usize, long: bool) -> (Vec<Collection>, Vec<Arc<dyn ObjectStore>>) {
    let mut collections = Vec::with_capacity(n);
    let mut stores = Vec::with_capacity(n);
    for i in 0..n {
        let name = name(i, long);
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        if !never_ran(i) {
            write_runs(&objects, &name, failing(i), RESOURCES).await;
        }
        let base = format!("https://agg.example.org/{name}/");
        collections.push(Collection::new(name, &base, objects.clone()).unwrap());
        stores.push(objects);
    }
    (collections, stores)
}

fn options(refresh: StatsRefresh, upstreams: bool) -> Options {
    let mut o = Options::default();
    o.stats_refresh = refresh;
    o.metrics_upstreams = upstreams;
    o
}

/// The overview's rows: (collection, state) in page order.
fn rows(html: &str) -> Vec<(String, String)> {
    html.split("<tr data-collection=\"")
        .skip(1)
        .map(|row| {
            let name = row.split('"').next().unwrap().to_owned();
            // The second cell: `<td class="…">STATE</td>`.
            let state = row
                .split("</td><td class=\"")
                .nth(1)
                .and_then(|c| c.split_once('>'))
                .map(|(_, rest)| rest.split('<').next().unwrap().to_owned())
                .unwrap();
            (name, state)
        })
        .collect()
}

/// The value of the unlabelled sample `name` in an exposition.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in the exposition"))
        .parse()
        .unwrap()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_of_4000_collections_is_small_failing_first_and_filterable() {
    let (collections, _stores) = fleet(FLEET, false).await;
    let app = router_with_options(collections, None, Options::default());
    let failing_names: Vec<String> = (0..FLEET)
        .filter(|&i| failing(i))
        .map(|i| name(i, false))
        .collect();
    let never: HashSet<String> = (0..FLEET)
        .filter(|&i| never_ran(i))
        .map(|i| name(i, false))
        .collect();

    let started = std::time::Instant::now();
    let first = get(&app, "/status").await;
    let cold = started.elapsed();
    let started = std::time::Instant::now();
    let page = get(&app, "/status").await;
    let warm = started.elapsed();
    eprintln!(
        "/status at {FLEET} collections: {} bytes; {:.1} ms with the stores read, {:.1} ms after",
        page.body.len(),
        ms(cold),
        ms(warm)
    );
    assert_eq!(rows(&first.body), rows(&page.body));
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.len() < MB, "{} bytes", page.body.len());
    assert!(!page.body.contains("<script"));
    assert!(
        page.body.contains(&format!(
            "data-figure=\"failing\">{} failing</a>",
            failing_names.len()
        )),
        "the summary counts the failing collections"
    );

    // Every collection once over the pages, failing first (in the order served), then those
    // without a run, then the rest.
    let mut all = rows(&page.body);
    assert_eq!(all.len(), 2000, "a page holds 2,000 rows");
    assert!(page.body.contains("page 1 of 2"));
    assert!(page.body.contains("href=\"/status?page=2\""));
    let second = get(&app, "/status?page=2").await;
    all.extend(rows(&second.body));
    assert_eq!(all.len(), FLEET);
    let names: HashSet<&str> = all.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.len(), FLEET, "each collection once");
    let head: Vec<&str> = all[..failing_names.len()]
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(head, failing_names, "failing first");
    assert!(
        all[..failing_names.len()]
            .iter()
            .all(|(_, s)| s == "failing")
    );
    let next = &all[failing_names.len()..failing_names.len() + never.len()];
    assert!(
        next.iter()
            .all(|(n, s)| never.contains(n) && s == "no run yet")
    );
    assert!(
        all[failing_names.len() + never.len()..]
            .iter()
            .all(|(_, s)| s == "ok")
    );
    // A row: its link, the lag from the older last success, the resources, the upstreams.
    let row = page
        .body
        .split("<tr data-collection=\"c-0005\">")
        .nth(1)
        .unwrap()
        .split("</tr>")
        .next()
        .unwrap();
    for must in [
        "<a href=\"/status/c-0005\">c-0005</a>",
        "<td class=\"n\">100</td>",
        "1 of 2 failed",
        "class=\"n lag\"",
    ] {
        assert!(row.contains(must), "{must} in {row}");
    }

    // Filters: a substring of the name, a state, both; a state it does not know is 400.
    let by_name = rows(&get(&app, "/status?q=c-01").await.body);
    let expected: Vec<String> = {
        let mut v: Vec<usize> = (100..200).collect();
        v.sort_by_key(|&i| rank(i));
        v.into_iter().map(|i| name(i, false)).collect()
    };
    assert_eq!(
        by_name.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        expected
    );
    let failing_only = rows(&get(&app, "/status?state=failing").await.body);
    assert_eq!(
        failing_only
            .iter()
            .map(|(n, _)| n.clone())
            .collect::<Vec<_>>(),
        failing_names
    );
    let both = rows(&get(&app, "/status?q=C-02&state=failing").await.body);
    let expected: Vec<String> = (200..300)
        .filter(|&i| failing(i))
        .map(|i| name(i, false))
        .collect();
    assert!(!expected.is_empty());
    assert_eq!(
        both.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(),
        expected,
        "case ignored"
    );
    let form = get(&app, "/status?q=c-02&state=failing").await.body;
    assert!(
        form.contains("name=\"q\" value=\"c-02\""),
        "the form keeps the filter"
    );
    assert!(form.contains("<option value=\"failing\" selected>"));
    assert_eq!(
        get(&app, "/status?state=bogus").await.status,
        StatusCode::BAD_REQUEST
    );

    // The detail of one collection: its upstreams, the error, the charts.
    let detail = get(&app, "/status/c-0005").await;
    assert_eq!(detail.status, StatusCode::OK);
    for must in [
        "<h2>c-0005</h2>",
        "<tr data-upstream=\"up1\"><td>up1</td><td class=\"failed\">failed</td>",
        "error: http://up.example/: 503",
        "data-chart=\"rate\"",
        "data-chart=\"lag\"",
        "href=\"/status\"",
    ] {
        assert!(detail.body.contains(must), "{must}");
    }
    assert!(detail.body.len() < 64 * 1024, "{}", detail.body.len());
    assert_eq!(
        get(&app, "/status/no-such-collection").await.status,
        StatusCode::NOT_FOUND
    );

    // The Source Description names all 4,000 Capability Lists and is strictly valid.
    let sd = get(&app, "/.well-known/resourcesync").await;
    assert_eq!(sd.status, StatusCode::OK);
    eprintln!(
        "Source Description at {FLEET} collections: {} bytes",
        sd.body.len()
    );
    let d = rsagg_sitemap::read_document(
        sd.body.as_bytes(),
        rsagg_sitemap::ReadOptions::new(Mode::Strict, "well-known"),
    )
    .unwrap();
    let problems: Vec<_> = d.errors().collect();
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(d.header.root, Root::Urlset);
    assert_eq!(d.header.capability(), Some(&Capability::Description));
    assert_eq!(d.entries.len(), FLEET);
    let locs: HashSet<&str> = d.entries.iter().map(|e| e.loc.as_str()).collect();
    assert_eq!(locs.len(), FLEET);
    assert!(locs.contains("https://agg.example.org/c-3999/capabilitylist.xml"));
}

/// With the longest names a pipeline may have, a page of the overview is still under 1 MB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_overview_stays_under_a_megabyte_with_the_longest_names() {
    let (collections, _stores) = fleet(FLEET, true).await;
    let app = router_with_options(collections, None, Options::default());
    let page = get(&app, "/status").await;
    eprintln!(
        "/status at {FLEET} collections named with 64 bytes: {} bytes",
        page.body.len()
    );
    assert_eq!(rows(&page.body).len(), 2000);
    assert!(page.body.len() < MB, "{} bytes", page.body.len());
}

/// A scrape within the refresh bound asks no store anything; a collection whose run left
/// new stats is read again once the bound has passed for it, and shows them; then one HEAD
/// per collection and bound. (The first check of collection `i` of `N` counts as made
/// `bound × i/N` early, so the fleet's checks are spread over the bound.)
#[tokio::test(start_paused = true)]
async fn a_scrape_within_the_bound_asks_the_stores_nothing() {
    const N: usize = 50;
    let bound = Duration::from_secs(60);
    let (collections, stores) = fleet(N, false).await;
    let app = router_with_options(collections, None, options(StatsRefresh::Every(bound), true));
    let requests = |text: &str| sample(text, "rsagg_serve_store_requests_total");
    let created = |text: &str| {
        let line =
            "rsagg_last_run_resources{collection=\"c-0003\",upstream=\"up0\",outcome=\"created\"} ";
        text.lines()
            .find_map(|l| l.strip_prefix(line))
            .unwrap()
            .to_owned()
    };
    let t0 = tokio::time::Instant::now();
    let at = |d: Duration| tokio::time::sleep_until(t0 + d);

    let m = get(&app, "/metrics").await.body;
    let first = requests(&m);
    // Per collection a HEAD of each of the four objects, a GET of each present.
    let ran = (0..N).filter(|&i| !never_ran(i)).count() as f64;
    assert_eq!(first, 4.0 * N as f64 + 3.0 * ran);
    assert_eq!(created(&m), "100");
    at(Duration::from_secs(1)).await;
    let m = get(&app, "/metrics").await.body;
    assert_eq!(requests(&m), first, "within the bound: no store request");
    assert_eq!(get(&app, "/status").await.status, StatusCode::OK);
    assert_eq!(get(&app, "/status/c-0003").await.status, StatusCode::OK);
    let m = get(&app, "/metrics").await.body;
    assert_eq!(requests(&m), first, "nor for /status");

    // Collection 3 runs again: 7 resources created. Its first check counts as made
    // 3/50 of the bound early: it comes due 56.4 s after it.
    write_runs(&stores[3], "c-0003", false, 7).await;
    at(Duration::from_millis(55_400)).await;
    let m = get(&app, "/metrics").await.body;
    assert_eq!(created(&m), "100", "not asked yet");
    let before = requests(&m);
    at(Duration::from_millis(56_400)).await;
    let m = get(&app, "/metrics").await.body;
    assert_eq!(created(&m), "7", "seen once the bound passed");
    // Only collection 3 came due: a HEAD of its sentinel, which changed, so the other
    // three HEADs and a GET of each of its three objects.
    assert_eq!(requests(&m) - before, 7.0);
    let detail = get(&app, "/status/c-0003").await.body;
    assert!(
        detail.contains("data-outcome=\"created\">7</td>"),
        "{detail}"
    );
    // One bound later every collection has come due once more: a HEAD each, and three more
    // for collection 3 (the check after a change checks everything).
    at(2 * bound).await;
    let before = requests(&m);
    let m = get(&app, "/metrics").await.body;
    assert_eq!(requests(&m) - before, N as f64 + 3.0);

    // `/readyz` too: its first probe asks each store (a HEAD of the Capability List, not
    // there, then a LIST to tell an empty store from a missing one), the next ones within
    // the bound nothing.
    let before = requests(&m);
    assert_eq!(
        get(&app, "/readyz").await.status,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let m = get(&app, "/metrics").await.body;
    assert_eq!(requests(&m) - before, 2.0 * N as f64);
    at(2 * bound + Duration::from_secs(1)).await;
    let ready = get(&app, "/readyz").await;
    assert!(
        ready
            .body
            .contains("collection `c-0049`: not published yet"),
        "{}",
        ready.body
    );
    let m2 = get(&app, "/metrics").await.body;
    assert_eq!(
        requests(&m2),
        requests(&m),
        "a probe within the bound asks nothing"
    );
}

/// Once a collection's Capability List was found, a probe asks nothing of its own: it
/// judges by the check the scrapes make (shared, within the bound), so a scraped server
/// probed every few seconds asks its stores no more than one only scraped.
#[tokio::test(start_paused = true)]
async fn probes_of_a_scraped_fleet_ask_the_stores_nothing_more() {
    const N: usize = 20;
    let bound = Duration::from_secs(60);
    let mut apps = Vec::new();
    for _ in 0..2 {
        let (collections, stores) = fleet(N, false).await;
        for objects in &stores {
            objects
                .put(
                    &Path::from("capabilitylist.xml"),
                    b"<urlset/>".to_vec().into(),
                )
                .await
                .unwrap();
        }
        apps.push(router_with_options(
            collections,
            None,
            options(StatsRefresh::Every(bound), true),
        ));
    }
    let (probed, scraped) = (&apps[0], &apps[1]);
    let requests = |app: &Router| {
        let app = app.clone();
        async move {
            let m = get(&app, "/metrics").await.body;
            sample(&m, "rsagg_serve_store_requests_total")
        }
    };
    let t0 = tokio::time::Instant::now();
    let at = |d: Duration| tokio::time::sleep_until(t0 + d);

    // The first probe: a HEAD of each Capability List, and the first check of what the
    // runs left, which the scrape then reuses.
    let r = get(probed, "/readyz").await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let first = requests(probed).await;
    let ran = (0..N).filter(|&i| !never_ran(i)).count() as f64;
    assert_eq!(first, N as f64 + 4.0 * N as f64 + 3.0 * ran);
    assert_eq!(requests(scraped).await, first - N as f64);
    // A scrape every 15 s, a probe every 5 s, over four bounds.
    for k in 1..=16u64 {
        at(Duration::from_secs(15 * k - 10)).await;
        assert_eq!(get(probed, "/readyz").await.status, StatusCode::OK);
        at(Duration::from_secs(15 * k - 5)).await;
        assert_eq!(get(probed, "/readyz").await.status, StatusCode::OK);
        at(Duration::from_secs(15 * k)).await;
        assert_eq!(get(probed, "/readyz").await.status, StatusCode::OK);
        requests(probed).await;
        requests(scraped).await;
    }
    let (p, s) = (requests(probed).await, requests(scraped).await);
    assert_eq!(p - N as f64, s, "the probes asked nothing more");
    // Four bounds: each collection checked about four times, a HEAD each (and three more
    // at a full check).
    assert!(s - (first - N as f64) <= 7.0 * N as f64, "{s}");
}

/// `--metrics-upstreams=false` leaves out every series labelled by upstream and keeps the
/// collections' own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_upstream_series_can_be_left_out() {
    let (collections, _) = fleet(20, false).await;
    let with = router_with_options(collections, None, Options::default());
    let (collections, _) = fleet(20, false).await;
    let without = router_with_options(collections, None, options(StatsRefresh::Auto, false));
    let with = get(&with, "/metrics").await.body;
    let without = get(&without, "/metrics").await.body;
    let per_upstream = |t: &str| t.lines().filter(|l| l.contains("upstream=\"")).count();
    // Per upstream: 9 outcomes of the last run and in all, 2 verdicts, up, sets, re-syncs,
    // warnings, errors, last success and lag (no checkpoint in these runs).
    let ran = (0..20).filter(|&i| !never_ran(i)).count();
    assert_eq!(per_upstream(&with), ran * UPSTREAMS * (9 + 9 + 2 + 7));
    assert_eq!(per_upstream(&without), 0, "{without}");
    for t in [&with, &without] {
        assert!(t.contains("rsagg_collection_upstreams_failed{collection=\"c-0005\"} 1\n"));
        assert!(t.contains("rsagg_collection_upstreams_failed{collection=\"c-0004\"} 0\n"));
        assert!(t.contains("rsagg_collection_resources{collection=\"c-0004\"} 100\n"));
        assert!(t.contains("rsagg_collection_lag_seconds{collection=\"c-0004\"} "));
        // The families are still declared.
        assert!(t.contains("# TYPE rsagg_upstream_lag_seconds gauge\n"));
    }
    eprintln!(
        "/metrics of 20 collections of {UPSTREAMS} upstreams: {} bytes, {} lines; without the per-upstream series {} bytes, {} lines",
        with.len(),
        with.lines().count(),
        without.len(),
        without.lines().count()
    );
}

/// The figures of issue 29 at 4,000 collections, printed: `/status` bytes and time,
/// `/metrics` bytes and time, store requests per scrape every 15 s (paused time) with the
/// automatic refresh bound.
#[tokio::test(start_paused = true)]
async fn fleet_figures_at_4000_collections() {
    let (collections, stores) = fleet(FLEET, false).await;
    let app: Router = router_with_options(collections, None, Options::default());
    let bound = StatsRefresh::Auto.bound(FLEET);
    let scrape = Duration::from_secs(15);

    let t = std::time::Instant::now();
    let m = get(&app, "/metrics").await.body;
    let cold_ms = ms(t.elapsed());
    let cold = sample(&m, "rsagg_serve_store_requests_total");
    let t = std::time::Instant::now();
    let m = get(&app, "/metrics").await.body;
    let warm_ms = ms(t.elapsed());
    assert_eq!(sample(&m, "rsagg_serve_store_requests_total"), cold);
    let t = std::time::Instant::now();
    let status = get(&app, "/status").await.body;
    let status_ms = ms(t.elapsed());

    // Scrapes every 15 s over ten refresh bounds (every kind of check: the sentinel alone,
    // and the full check every tenth). `/status?state=failing` stands in for the scrapes in
    // between (the same check of every collection, through the same cache, with a page of
    // 41 rows instead of 40 MB of text, which a debug build takes long to write); the
    // counter is read by the last scrape.
    let scrapes = (10 * bound.as_secs() / scrape.as_secs()) as usize;
    for _ in 0..scrapes - 1 {
        tokio::time::advance(scrape).await;
        assert_eq!(
            get(&app, "/status?state=failing").await.status,
            StatusCode::OK
        );
    }
    tokio::time::advance(scrape).await;
    let last = sample(
        &get(&app, "/metrics").await.body,
        "rsagg_serve_store_requests_total",
    );
    let per_scrape = (last - cold) / scrapes as f64;
    let per_day = per_scrape * 86_400.0 / scrape.as_secs_f64();
    eprintln!(
        "fleet of {FLEET} collections ({UPSTREAMS} upstreams each), refresh bound {bound:?}:\n\
         /status: {} bytes in {status_ms:.1} ms\n\
         /metrics: {} bytes, {} lines; {cold_ms:.1} ms with the stores read ({cold} store requests), {warm_ms:.1} ms after\n\
         store requests per scrape every 15 s over {scrapes} scrapes: {per_scrape:.1} on average; \
         {per_day:.0} a day, ${:.2} a day at $0.0004 per 1,000",
        status.len(),
        m.len(),
        m.lines().count(),
        per_day * 0.0004 / 1000.0
    );
    // The goal of issue 29: under $1 a day, ~430 requests per scrape.
    assert!(per_scrape <= 430.0, "{per_scrape}");

    // The same fleet without the per-upstream series.
    let collections = stores
        .iter()
        .enumerate()
        .map(|(i, objects)| {
            let name = name(i, false);
            let base = format!("https://agg.example.org/{name}/");
            Collection::new(name, &base, objects.clone()).unwrap()
        })
        .collect();
    let without = router_with_options(collections, None, options(StatsRefresh::Auto, false));
    get(&without, "/metrics").await;
    let t = std::time::Instant::now();
    let m = get(&without, "/metrics").await.body;
    eprintln!(
        "/metrics with --metrics-upstreams=false: {} bytes, {} lines, {:.1} ms",
        m.len(),
        m.lines().count(),
        ms(t.elapsed())
    );
    assert!(!m.contains("upstream=\""));
}
