//! rsagg's own change notifications (issue "Notify", publisher side) through real hubs:
//! `rsagg run --once` publishes, then notifies `[notify] hub`; `rsagg serve` (a separate
//! process, as in production) serves the topic `{base}change/`; a [`TestSubscriber`]
//! subscribed to that topic checks what arrives: valid change-notification payloads that
//! chain `from`/`until` across runs, the `Link` rels, the signature, and the changes of each
//! run.
//!
//! - the stock hub flask-websub in the WebSub `hub.mode=publish` form, eager and delayed (in
//!   delayed mode the hub fetches the topic after answering 202: rsagg waits for that fetch,
//!   which `serve` records, before it moves the topic on);
//! - `rsagg hub` in the Change Notification 1.0.1 section 4.1 form (payload POSTed).
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e publisher:: -- --test-threads=2`.

use crate::common;

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use common::*;
use rsagg_e2e::{FlaskHub, FlaskMode, HubUnderTest, RsaggHub, RsaggServer, TestSubscriber};
use rsagg_model::Change;
use rsagg_websub::signature::Algorithm;

/// Longest wait for a delivery.
const T: Duration = Duration::from_secs(20);

/// A Source with a Resource List only (each run re-syncs from it), a pipeline notifying
/// `hub` in `form`, `rsagg serve` for the topic, and a subscriber on rsagg's topic.
struct Setup {
    site: Site,
    case: Case,
    _serve: RsaggServer,
    topic: String,
    caplist: String,
}

fn setup(name: &str, hub: &str, form: &str) -> Result<Setup> {
    let site = Site::new()?;
    site.standard(
        &[("resourcelist", "/resourcelist.xml")],
        &[
            ("/a.txt", b"alpha"),
            ("/b.txt", b"beta"),
            ("/c.txt", b"gamma"),
        ],
    )?;
    let tail = format!(
        "[notify]\nhub = \"{hub}\"\nform = \"{form}\"\ndeliver_timeout = \"20s\"\nfetch_wait = \"15s\"\n"
    );
    let (case, port) = Case::on_loopback(name, &site, "", &tail)?;
    let serve = RsaggServer::start(port, &[case.toml.as_path()], &case.store.env()?)?;
    let topic = format!("{}change/", case.base_url);
    let caplist = format!("{}capabilitylist.xml", case.base_url);
    Ok(Setup {
        site,
        case,
        _serve: serve,
        topic,
        caplist,
    })
}

/// Runs once and checks the run's notification report: nothing pending, no error.
fn run_and_notify(case: &Case) -> Result<serde_json::Value> {
    let run = case.run()?;
    ensure!(run.code == 0, "run failed: {}\n{}", run.stdout, run.stderr);
    let report = run.report.context("no report")?;
    let notify = report["notify"].clone();
    ensure!(
        notify["delivery"]["pending"] == 0,
        "payloads left in the outbox: {notify}\n{}",
        run.stderr
    );
    Ok(notify)
}

/// Two runs through `hub`: the first announces the three creations, the second an update,
/// a deletion and a creation; every delivery is checked and the intervals chain across the
/// runs.
async fn two_runs(s: &Setup, hub: &dyn HubUnderTest, alg: Algorithm) -> Result<()> {
    let sub = TestSubscriber::start()?;
    sub.subscribe(hub, &s.topic, Some("publisher-secret"), Some(600))
        .await?;

    run_and_notify(&s.case)?;
    let first = sub.wait_for(1, T).await.with_context(|| hub.log_tail(30))?;
    let got = check_deliveries(&first, &s.topic, hub.url(), &s.caplist, alg)?;
    let mut created: Vec<_> = got
        .iter()
        .filter(|(_, c)| *c == Change::Created)
        .map(|(u, _)| u.clone())
        .collect();
    created.sort();
    assert_eq!(
        created,
        vec![
            s.site.url("/a.txt"),
            s.site.url("/b.txt"),
            s.site.url("/c.txt")
        ],
        "first run announces the three creations: {got:?}"
    );
    let n_first = first.len();

    // Update a, delete b, create d.
    s.site.write("/a.txt", b"alpha 2")?;
    s.site.fx.remove("/b.txt")?;
    s.site.write("/d.txt", b"delta")?;
    s.site.resource_list(
        "/resourcelist.xml",
        "/capabilitylist.xml",
        "2026-01-02T00:00:00Z",
        &[
            ("/a.txt", b"alpha 2"),
            ("/c.txt", b"gamma"),
            ("/d.txt", b"delta"),
        ],
    )?;
    run_and_notify(&s.case)?;
    let all = sub
        .wait_for(n_first + 1, T)
        .await
        .with_context(|| hub.log_tail(30))?;
    let got = check_deliveries(&all, &s.topic, hub.url(), &s.caplist, alg)?;
    let second: Vec<_> = got[3..].to_vec();
    let mut expect = vec![
        (s.site.url("/a.txt"), Change::Updated),
        (s.site.url("/b.txt"), Change::Deleted),
        (s.site.url("/d.txt"), Change::Created),
    ];
    let mut second_sorted = second.clone();
    second_sorted.sort_by(|x, y| x.0.cmp(&y.0));
    expect.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(second_sorted, expect, "second run's changes: {second:?}");
    Ok(())
}

/// The stock hub in its eager mode: `hub.mode=publish`, the hub GETs rsagg's topic (served
/// by `rsagg serve`) and delivers it signed with sha512.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_through_flask_websub_eager() -> Result<()> {
    let hub = FlaskHub::start(FlaskMode::Eager)?;
    let s = setup("pubeager", hub.url(), "websub")?;
    two_runs(&s, &hub, Algorithm::Sha512).await
}

/// The stock hub in delayed mode: it answers 202 before fetching the topic; rsagg waits
/// until `serve` has served each payload before moving the topic on, so none is skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_through_flask_websub_delayed() -> Result<()> {
    let hub = FlaskHub::start(FlaskMode::Delayed)?;
    let s = setup("pubdelayed", hub.url(), "websub")?;
    two_runs(&s, &hub, Algorithm::Sha512).await?;
    // `Case::stats` blocks on a runtime of its own.
    let stats = tokio::task::block_in_place(|| s.case.stats())?;
    ensure!(
        stats["report"]["notify"]["delivery"]["unfetched"] == 0,
        "a payload was moved on before the hub fetched it: {}",
        stats["report"]["notify"]
    );
    Ok(())
}

/// `rsagg hub` in the Change Notification 1.0.1 form: the payload itself is POSTed (the hub
/// answers 200) and relayed byte-identical, signed sha256.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_through_rsagg_hub_resourcesync_form() -> Result<()> {
    let hub = RsaggHub::start(&[])?;
    let s = setup("pubrs", hub.url(), "resourcesync")?;
    two_runs(&s, &hub, Algorithm::Sha256).await?;
    // The topic shows the most recent payload, with both links.
    let r = reqwest::get(&s.topic).await?;
    ensure!(r.status() == 200, "topic answered {}", r.status());
    let links: Vec<String> = r
        .headers()
        .get_all("link")
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let joined = links.join(", ");
    ensure!(
        joined.contains(&format!("<{}>; rel=\"self\"", s.topic))
            && joined.contains(&format!("<{}>; rel=\"hub\"", hub.url())),
        "topic Link: {joined}"
    );
    let body = r.bytes().await?;
    ensure!(!body.is_empty(), "topic body empty after two runs");
    Ok(())
}
