//! End-to-end chain tests (issue 5 item 5): an upstream Source that sends change
//! notifications ([`NotifyingSource`]) → a hub → `rsagg run P --follow --listen` (push
//! intake) → rsagg's own change notifications → a hub → a [`TestSubscriber`].
//!
//! - `chain_through_rsagg_hub`: one `rsagg hub` relays both topics; every payload rsagg
//!   sends is checked strictly (document, `Content-Type`, `Link` rels, signature, chained
//!   intervals, entries: `<loc>`, change, hashes, `via`), then a gap (a payload never
//!   published) must be recovered from the upstream's Change List and a replayed payload
//!   must not be announced again.
//! - `stock_hub_delivers_upstream_notifications_to_rsagg_{eager,delayed}`: the upstream's
//!   hub is flask-websub (`hub.mode=publish`, it GETs the topic and signs with sha512 the
//!   deliveries to rsagg's callback, which subscribed with a secret); the pushed changes
//!   are served by rsagg and announced through its own hub within seconds (the poll
//!   interval is an hour), and rsagg's push counters (stats object, `/metrics`) show them
//!   applied, none dropped for their signature.
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e chain::`.

use crate::common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::*;
use rsagg_e2e::{
    Delivery, FlaskHub, FlaskMode, HubUnderTest, NotifyingSource, PublishForm, RsaggHub,
    RsaggServer, TestSubscriber,
};
use rsagg_model::{Change, HashAlgorithm, Hashes, UrlEntry};
use rsagg_websub::signature::Algorithm;

/// Longest wait for anything.
const T: Duration = Duration::from_secs(20);

/// Runs a blocking helper (they start runtimes of their own) from an async test.
fn blocking<R>(f: impl FnOnce() -> R) -> R {
    tokio::task::block_in_place(f)
}

/// A pipeline over `src`'s Source Description, polled hourly (so whatever shows within
/// seconds came by push), published at `http://127.0.0.1:PORT/{name}/`, notifying `hub`
/// in the CN 1.0.1 form. Returns the case and the port.
fn pipeline(name: &str, src: &NotifyingSource, hub: &str) -> Result<(Case, u16)> {
    let port = RsaggServer::pick_port()?;
    let case = Case::published_at(
        Store::file(name)?,
        &[upstream(
            UP,
            &src.source_description_url(),
            "poll_interval = \"1h\"",
        )],
        &format!("http://127.0.0.1:{port}/{name}/"),
        &format!("[notify]\nhub = \"{hub}\"\nform = \"resourcesync\"\n"),
    )?;
    Ok((case, port))
}

/// rsagg's URI of its copy of `upstream_uri`.
fn copy_uri(case: &Case, upstream_uri: &str) -> String {
    format!(
        "{}r/{UP}/{}",
        case.base_url,
        upstream_uri.replacen("://", "/", 1)
    )
}

/// The digest of `alg` in `hashes`.
fn digest(hashes: Option<&Hashes>, alg: HashAlgorithm) -> Option<&str> {
    hashes?
        .0
        .iter()
        .find(|h| h.algorithm == alg)
        .map(|h| h.digest.as_str())
}

/// One change as the test expects it in rsagg's notifications: the upstream URI, the
/// change, and the bytes (none for a deletion).
#[derive(Debug, Clone)]
struct Expect {
    uri: String,
    change: Change,
    body: Option<&'static [u8]>,
}

fn expect(
    src: &NotifyingSource,
    path: &str,
    change: Change,
    body: Option<&'static [u8]>,
) -> Expect {
    Expect {
        uri: src.url(&format!("/res/{path}")),
        change,
        body,
    }
}

/// Checks one entry of rsagg's notification against `want`: `<loc>` is rsagg's copy,
/// `rs:md` has the change, a datetime and (not for a deletion) md5, sha-256 and length of
/// the bytes; `rs:ln rel="via"` names the upstream URI with the upstream's sha-256.
fn check_entry(case: &Case, e: &UrlEntry, want: &Expect) -> Result<()> {
    ensure!(
        e.loc == copy_uri(case, &want.uri),
        "loc {} is not rsagg's copy of {}",
        e.loc,
        want.uri
    );
    let md = e.md.as_ref().context("entry without rs:md")?;
    ensure!(
        md.change.as_ref() == Some(&want.change),
        "{}: change {:?}, expected {:?}",
        want.uri,
        md.change,
        want.change
    );
    ensure!(md.datetime.is_some(), "{}: no datetime", want.uri);
    let via = e
        .links
        .iter()
        .find(|l| l.rel == "via")
        .with_context(|| format!("{}: no via link", want.uri))?;
    ensure!(via.href == want.uri, "via {} for {}", via.href, want.uri);
    match want.body {
        Some(b) => {
            let sha = sha256_hex(b);
            ensure!(
                digest(md.hash.as_ref(), HashAlgorithm::Sha256) == Some(sha.as_str())
                    && digest(md.hash.as_ref(), HashAlgorithm::Md5) == Some(md5_hex(b).as_str()),
                "{}: hash {:?}, expected md5 and sha-256 of {:?}",
                want.uri,
                md.hash,
                String::from_utf8_lossy(b)
            );
            ensure!(
                md.length == Some(b.len() as u64),
                "{}: length {:?}",
                want.uri,
                md.length
            );
            ensure!(
                digest(via.hash.as_ref(), HashAlgorithm::Sha256) == Some(sha.as_str()),
                "{}: via hash {:?}, expected the upstream's sha256:{sha}",
                want.uri,
                via.hash
            );
        }
        None => ensure!(
            md.hash.is_none() && md.length.is_none(),
            "{}: a deletion with hash or length: {md:?}",
            want.uri
        ),
    }
    Ok(())
}

/// The entries of these deliveries, in order.
fn entries(deliveries: &[Delivery]) -> Result<Vec<UrlEntry>> {
    let mut v = Vec::new();
    for d in deliveries {
        v.extend(read(d)?.entries);
    }
    Ok(v)
}

/// rsagg's channel as the subscriber sees it.
struct Channel<'a> {
    sub: &'a TestSubscriber,
    callback: String,
    case: &'a Case,
    hub: &'a dyn HubUnderTest,
    topic: String,
    caplist: String,
}

impl Channel<'_> {
    /// Every delivery so far, each checked (document, headers, sha256 signature, intervals
    /// chained across all of them).
    fn checked(&self) -> Result<Vec<Delivery>> {
        let all = self.sub.deliveries_to(&self.callback);
        check_deliveries(
            &all,
            &self.topic,
            self.hub.url(),
            &self.caplist,
            Algorithm::Sha256,
        )?;
        Ok(all)
    }

    /// Waits until the deliveries after the first `skip` carry at least `want.len()` entries,
    /// then checks that they carry exactly `want`, in order. Returns the number of
    /// deliveries.
    async fn expect_after(&self, skip: usize, want: &[Expect]) -> Result<usize> {
        let t0 = Instant::now();
        loop {
            let all = self.sub.deliveries_to(&self.callback);
            let got = entries(&all[skip.min(all.len())..])?;
            if got.len() >= want.len() {
                let all = self.checked()?;
                let got = entries(&all[skip..])?;
                let pairs: Vec<(&str, Option<&Change>)> = got
                    .iter()
                    .map(|e| {
                        (
                            e.loc.as_str(),
                            e.md.as_ref().and_then(|m| m.change.as_ref()),
                        )
                    })
                    .collect();
                ensure!(
                    got.len() == want.len(),
                    "expected {} changes {want:?}, rsagg announced {pairs:?}",
                    want.len()
                );
                for (e, w) in got.iter().zip(want) {
                    check_entry(self.case, e, w)
                        .with_context(|| format!("announced: {pairs:?}"))?;
                }
                return Ok(all.len());
            }
            ensure!(
                t0.elapsed() < T,
                "rsagg announced {} of the changes {want:?} within {T:?}; hub log:\n{}",
                got.len(),
                self.hub.log_tail(20)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The `replayed=N` figures of the follower's `push pass` lines, summed.
fn replayed(f: &Follower) -> u64 {
    f.log_text()
        .lines()
        .filter(|l| l.contains("push pass"))
        .filter_map(|l| {
            let rest = &l[l.find("replayed=")? + "replayed=".len()..];
            let n: String = rest.chars().take_while(char::is_ascii_digit).collect();
            n.parse::<u64>().ok()
        })
        .sum()
}

/// Waits until rsagg's subscription at the upstream's `hub` is verified (with a secret) on
/// rsagg's side and stored by the hub, which stores it only after the verification was
/// answered (flask-websub in delayed mode a moment later): a publication before that would
/// not reach rsagg.
fn wait_subscribed(f: &Follower, case: &Case, hub: &dyn HubUnderTest) -> Result<()> {
    let callback = format!("{}websub/{UP}", case.base_url);
    blocking(|| {
        wait_for(
            &format!("rsagg's subscription ({callback}) verified and stored by the hub"),
            T,
            f,
            || Ok(verified(case)? && hub.subscribed(&callback)?),
        )
    })
    .with_context(|| hub.log_tail(20))?;
    Ok(())
}

/// Whether rsagg serves `body` at its copy of `path` (under `/res/`).
fn served(case: &Case, src: &NotifyingSource, path: &str, body: &[u8]) -> Result<bool> {
    let (code, got) = http_get(&copy_uri(case, &src.url(&format!("/res/{path}"))))?;
    Ok(code == 200 && got == body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_through_rsagg_hub() -> Result<()> {
    let hub = RsaggHub::start(&["--lease-min", "1"])?;
    let src = NotifyingSource::start(hub.url())?;
    // Before rsagg starts: its baseline (never notified, only in the lists).
    src.change(&[("a.txt", Some(b"alpha"))])?;
    let (case, port) = pipeline("chain", &src, hub.url())?;
    let sub = TestSubscriber::start()?;
    let topic = format!("{}change/", case.base_url);
    let s = sub
        .subscribe(&hub, &topic, Some("chain-secret"), Some(600))
        .await?;
    let ch = Channel {
        sub: &sub,
        callback: s.callback.clone(),
        case: &case,
        hub: &hub,
        topic: topic.clone(),
        caplist: format!("{}capabilitylist.xml", case.base_url),
    };
    let mut f = Follower::start(&case, port)?;

    // The baseline is announced; then rsagg's subscription at the upstream's hub is verified.
    let mut n = ch
        .expect_after(0, &[expect(&src, "a.txt", Change::Created, Some(b"alpha"))])
        .await
        .with_context(|| f.log_tail())?;
    wait_subscribed(&f, &case, &hub)?;

    // Three changes, each notified (CN 1.0.1 form) and announced on its own.
    let steps: [(&str, Option<&'static [u8]>, Change); 3] = [
        ("b.txt", Some(b"bravo"), Change::Created),
        ("b.txt", Some(b"bravo 2"), Change::Updated),
        ("a.txt", None, Change::Deleted),
    ];
    for (path, body, change) in steps {
        src.change(&[(path, body)])?;
        let t0 = Instant::now();
        src.notify(PublishForm::ResourceSync).await?;
        n = ch
            .expect_after(n, &[expect(&src, path, change, body)])
            .await
            .with_context(|| f.log_tail())?;
        eprintln!(
            "[chain] upstream notification → rsagg's notification delivered: {:?}",
            t0.elapsed()
        );
        match body {
            Some(b) => ensure!(
                blocking(|| served(&case, &src, path, b))?,
                "{path} not served"
            ),
            None => {
                let (code, _) = blocking(|| http_get(&copy_uri(&case, &src.url("/res/a.txt"))))?;
                ensure!(code == 404 || code == 410, "deleted a.txt answered {code}");
            }
        }
    }

    // A gap: c.txt's payload is never published, d.txt's is; rsagg must read c.txt from
    // the upstream's Change List and announce both, in order.
    let changelist_reads = src.server().hits("/changelist.xml");
    src.change(&[("c.txt", Some(b"charlie"))])?;
    let pd = src.change(&[("d.txt", Some(b"delta"))])?;
    src.publish(&pd, PublishForm::ResourceSync).await?;
    n = ch
        .expect_after(
            n,
            &[
                expect(&src, "c.txt", Change::Created, Some(b"charlie")),
                expect(&src, "d.txt", Change::Created, Some(b"delta")),
            ],
        )
        .await
        .with_context(|| f.log_tail())?;
    ensure!(
        src.server().hits("/changelist.xml") > changelist_reads,
        "the gap was recovered without reading the Change List?"
    );

    // A replay of d.txt's payload: rsagg sees it (a push pass counts it replayed), does not
    // fetch d.txt again and announces nothing.
    let replayed_before = replayed(&f);
    let d_reads = src.server().hits("/res/d.txt");
    src.publish(&pd, PublishForm::ResourceSync).await?;
    blocking(|| {
        wait_for("the replay processed", T, &f, || {
            Ok(replayed(&f) > replayed_before)
        })
    })?;
    // The next payload after the replay is applied and announced alone. It is also the
    // barrier for what the replay might have caused: rsagg announces in the order it
    // applied, through one outbox, and the hub delivers to a subscriber in order, so an
    // announcement of the replay would come before e.txt's and `expect_after` (exactly
    // e.txt after the first `n`) would fail; no fixed wait needed.
    src.change(&[("e.txt", Some(b"echo"))])?;
    src.notify(PublishForm::ResourceSync).await?;
    ch.expect_after(n, &[expect(&src, "e.txt", Change::Created, Some(b"echo"))])
        .await
        .with_context(|| f.log_tail())?;
    ensure!(
        src.server().hits("/res/d.txt") == d_reads,
        "the replay made rsagg fetch d.txt again"
    );

    // The push counters, written at shutdown.
    let push = push_stats_after_sigterm(&mut f, &case)?;
    ensure!(push["received"].as_u64() >= Some(6), "{push}");
    ensure!(push["applied"].as_u64() >= Some(5), "{push}");
    ensure!(push["gaps_recovered"].as_u64() >= Some(1), "{push}");
    ensure!(push["dropped_signature"].as_u64() == Some(0), "{push}");
    Ok(())
}

/// The upstream's hub is flask-websub in `mode`; rsagg's own hub is `rsagg hub`.
async fn stock_hub_to_rsagg(name: &str, mode: FlaskMode) -> Result<()> {
    let flask = FlaskHub::start(mode)?;
    let own = RsaggHub::start(&[])?;
    let src = NotifyingSource::start(flask.url())?;
    src.change(&[("a.txt", Some(b"alpha"))])?;
    let (case, port) = pipeline(name, &src, own.url())?;
    let sub = TestSubscriber::start()?;
    let topic = format!("{}change/", case.base_url);
    let s = sub
        .subscribe(&own, &topic, Some("own-secret"), Some(600))
        .await?;
    let ch = Channel {
        sub: &sub,
        callback: s.callback.clone(),
        case: &case,
        hub: &own,
        topic,
        caplist: format!("{}capabilitylist.xml", case.base_url),
    };
    let mut f = Follower::start(&case, port)?;
    let mut n = ch
        .expect_after(0, &[expect(&src, "a.txt", Change::Created, Some(b"alpha"))])
        .await
        .with_context(|| f.log_tail())?;
    // rsagg's subscription at flask-websub, with a secret (`verified` requires one).
    wait_subscribed(&f, &case, &flask)?;

    // Each change published in the WebSub form (flask-websub GETs the topic), waited for
    // before the next: in delayed mode every delivery is a task of its own, unordered.
    let steps: [(&str, &'static [u8], Change); 2] = [
        ("b.txt", b"bravo", Change::Created),
        ("a.txt", b"alpha 2", Change::Updated),
    ];
    for (path, body, change) in steps {
        src.change(&[(path, Some(body))])?;
        let t0 = Instant::now();
        src.notify(PublishForm::WebSub).await?;
        blocking(|| {
            wait_for(&format!("pushed {path} served"), T, &f, || {
                served(&case, &src, path, body)
            })
        })
        .with_context(|| flask.log_tail(30))?;
        eprintln!(
            "[chain {name}] flask-websub publish → copy served: {:?}",
            t0.elapsed()
        );
        n = ch
            .expect_after(n, &[expect(&src, path, change, Some(body))])
            .await
            .with_context(|| f.log_tail())?;
    }

    let push = push_stats_after_sigterm(&mut f, &case)?;
    ensure!(push["applied"].as_u64() >= Some(2), "{push}");
    ensure!(push["dropped_signature"].as_u64() == Some(0), "{push}");
    // The same counters on `/metrics` of `rsagg serve`.
    let serve = RsaggServer::start(port, &[case.toml.as_path()], &case.store.env()?)?;
    let (code, body) = blocking(|| http_get(&format!("{}/metrics", serve.origin())))?;
    ensure!(code == 200, "/metrics answered {code}");
    let metrics = String::from_utf8(body)?;
    let sample = |outcome: &str| -> Option<u64> {
        let key = format!(
            "rsagg_push_notifications_total{{collection=\"{name}\",outcome=\"{outcome}\"}} "
        );
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&key))
            .and_then(|v| v.trim().parse().ok())
    };
    ensure!(
        sample("applied") >= Some(2) && sample("dropped_signature") == Some(0),
        "push counters on /metrics: applied {:?}, dropped_signature {:?}\n{metrics}",
        sample("applied"),
        sample("dropped_signature")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_hub_delivers_upstream_notifications_to_rsagg_eager() -> Result<()> {
    stock_hub_to_rsagg("stockeager", FlaskMode::Eager).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stock_hub_delivers_upstream_notifications_to_rsagg_delayed() -> Result<()> {
    stock_hub_to_rsagg("stockdelayed", FlaskMode::Delayed).await
}

/// Stops the follower with SIGTERM (it must exit 0) and returns the push counters it wrote
/// to the stats object at shutdown.
fn push_stats_after_sigterm(f: &mut Follower, case: &Case) -> Result<serde_json::Value> {
    let status = blocking(|| f.terminate(T))?;
    ensure!(
        status.code() == Some(0),
        "{status:?}; log:\n{}",
        f.log_tail()
    );
    let stats = blocking(|| case.stats())?;
    Ok(stats["report"]["push"].clone())
}
