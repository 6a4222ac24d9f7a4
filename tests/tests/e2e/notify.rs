//! Change Notification interop (CN 1.0.1 over WebSub) of the pieces that exist: a
//! [`NotifyingSource`] publishes to `rsagg hub` or to the stock flask-websub hub, and a
//! [`TestSubscriber`] checks what arrives (body, `Content-Type`, `Link` rels, signature,
//! order, retries, leases).
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e notify:: -- --test-threads=2`.

use crate::common;

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use rsagg_e2e::{
    Delivery, FlaskHub, FlaskMode, HubUnderTest, NotifyingSource, Payload, PublishForm, RsaggHub,
    SignatureCheck, TestSubscriber,
};
use rsagg_model::{Capability, Mode, W3cDateTime};
use rsagg_sitemap::{ReadOptions, read_document};
use rsagg_websub::signature::Algorithm;

/// Longest wait for anything a hub should do.
const T: Duration = Duration::from_secs(15);

/// `from` and `until` of a delivered payload, read strictly.
fn interval(body: &[u8]) -> Result<(W3cDateTime, W3cDateTime)> {
    let r = common::read_body(body)?;
    Ok((r.from, r.until))
}

/// A delivery of `payload` on `topic` through `hub`: the body byte-identical, `Content-Type:
/// application/xml`, `Link` rel `self` = topic and rel `hub` = hub (CN 1.0.1 4.3), and the
/// signature valid with the method `alg` (WebSub 7.1).
fn assert_delivery(d: &Delivery, payload: &Payload, topic: &str, hub: &str, alg: Algorithm) {
    assert_eq!(
        d.body, payload.body,
        "payload {} not relayed byte-identical",
        payload.seq
    );
    let ct = d.header("content-type").unwrap_or("");
    assert_eq!(
        ct.split(';').next().map(str::trim),
        Some("application/xml"),
        "Content-Type"
    );
    assert_eq!(d.link("self").as_deref(), Some(topic), "Link rel=self");
    assert_eq!(d.link("hub").as_deref(), Some(hub), "Link rel=hub");
    assert_eq!(d.signature, SignatureCheck::Valid(alg), "X-Hub-Signature");
}

/// Payloads whose intervals follow each other: payload i+1's `from` is payload i's `until`.
fn assert_consecutive(deliveries: &[Delivery]) -> Result<()> {
    let intervals = deliveries
        .iter()
        .map(|d| interval(&d.body))
        .collect::<Result<Vec<_>>>()?;
    for w in intervals.windows(2) {
        ensure!(
            w[1].0.cmp_instant(&w[0].1).is_eq(),
            "from {} of a payload is not the until {} of the one before",
            w[1].0,
            w[0].1
        );
    }
    Ok(())
}

/// The Source's documents, read by rsagg's strict reader, are valid; payloads chain and
/// their changes are in strictly increasing order (the harness must not be what fails).
#[test]
fn notifying_source_documents_are_valid() -> Result<()> {
    let src = NotifyingSource::start("http://127.0.0.1:9/hub/")?;
    let p0 = src.change(&[("a.txt", Some(b"one")), ("b.txt", Some(b"two"))])?;
    let p1 = src.change(&[("a.txt", Some(b"one, again"))])?;
    let p2 = src.change(&[("b.txt", None), ("c.txt", Some(b""))])?;
    assert!(
        src.change(&[("nope.txt", None)]).is_err(),
        "deleting a missing resource"
    );

    for path in src.document_paths() {
        let file = src.server().file_path(if path == "/change/" {
            "/change/index.html"
        } else {
            path
        })?;
        let bytes = std::fs::read(&file)?;
        let doc = read_document(&bytes, ReadOptions::new(Mode::Strict, path))?;
        let errors: Vec<_> = doc.errors().collect();
        assert!(errors.is_empty(), "{path}: {errors:?}");
    }

    let cl = std::fs::read(src.server().file_path("/capabilitylist.xml")?)?;
    let cl = read_document(&cl, ReadOptions::new(Mode::Strict, "capabilitylist"))?;
    let channel = cl
        .entries
        .iter()
        .find(|e| e.loc == src.topic())
        .context("no channel entry")?;
    assert_eq!(
        channel.md.as_ref().and_then(|m| m.capability.as_ref()),
        Some(&Capability::ChangeNotification)
    );
    assert_eq!(
        channel.link("hub").map(|l| l.href.as_str()),
        Some("http://127.0.0.1:9/hub/")
    );

    let payloads = src.payloads();
    assert_eq!(payloads.len(), 3);
    for (p, built) in payloads.iter().zip([&p0, &p1, &p2]) {
        assert_eq!(p.body, built.body);
        let (from, until) = interval(&p.body)?;
        assert!(from.cmp_instant(&p.from).is_eq() && until.cmp_instant(&p.until).is_eq());
        let mut last = from;
        for e in &p.entries {
            let at = *e.change_instant().context("entry without datetime")?;
            assert!(at.cmp_instant(&last).is_gt(), "changes strictly after from");
            assert!(at.cmp_instant(&until).is_le(), "changes up to until");
            last = at;
        }
    }
    assert!(p1.from.cmp_instant(&p0.until).is_eq());
    assert!(p2.from.cmp_instant(&p1.until).is_eq());

    let changes = std::fs::read(src.server().file_path("/changelist.xml")?)?;
    let changes = read_document(&changes, ReadOptions::new(Mode::Strict, "changelist"))?;
    assert_eq!(changes.entries.len(), 5);
    let kinds: Vec<_> = changes
        .entries
        .iter()
        .map(|e| e.md.as_ref().and_then(|m| m.change.clone()))
        .map(|c| c.map(|c| c.as_str().to_owned()).unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        ["created", "created", "updated", "deleted", "created"]
    );
    Ok(())
}

/// CN 1.0.1 form at `rsagg hub` (200): three consecutive payloads reach a subscriber
/// byte-identical, in order, with both Link rels and a valid sha256 signature; a subscriber
/// that fails its first two deliveries gets all three too, in the same order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsagg_hub_relays_payloads_in_order_and_retries() -> Result<()> {
    let hub = RsaggHub::start(&[])?;
    let src = NotifyingSource::start(hub.url())?;
    let topic = src.topic();
    let ok = TestSubscriber::start()?;
    let flaky = TestSubscriber::start()?;
    flaky.fail_next(2);
    ok.subscribe(&hub, &topic, Some("secret-ok"), Some(600))
        .await?;
    flaky
        .subscribe(&hub, &topic, Some("secret-flaky"), Some(600))
        .await?;

    for i in 0..3 {
        let name = format!("r{i}.txt");
        src.change(&[(name.as_str(), Some(format!("body {i}").as_bytes()))])?;
        let r = src.notify(PublishForm::ResourceSync).await?;
        assert!(
            r.body.contains("accepted for 2 subscriber(s)"),
            "{}; hub log:\n{}",
            r.body,
            hub.log_tail(20)
        );
    }
    let payloads = src.payloads();

    let got = ok.wait_for(3, T).await?;
    assert_eq!(got.len(), 3);
    for (d, p) in got.iter().zip(&payloads) {
        assert_delivery(d, p, &topic, hub.url(), Algorithm::Sha256);
    }
    assert_consecutive(&got)?;

    let got = flaky
        .wait_for(3, T)
        .await
        .with_context(|| hub.log_tail(30))?;
    for (d, p) in got.iter().zip(&payloads) {
        assert_delivery(d, p, &topic, hub.url(), Algorithm::Sha256);
    }
    let attempts = flaky.attempts();
    assert_eq!(attempts.len(), 5, "two failures, then three deliveries");
    assert!(
        attempts[..3].iter().all(|a| a.body == payloads[0].body),
        "the first payload is retried before the next one is sent"
    );
    assert_eq!(
        attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        [500, 500, 200, 200, 200]
    );
    assert!(
        attempts[..2]
            .iter()
            .all(|a| a.signature == SignatureCheck::Valid(Algorithm::Sha256)),
        "retries are signed too"
    );
    Ok(())
}

/// WebSub form at `rsagg hub` (202): the hub GETs the topic and relays its content. After an
/// unsubscription (verified with the subscriber) replays of the payload reach no one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsagg_hub_fetches_the_topic_on_websub_publish() -> Result<()> {
    let hub = RsaggHub::start(&[])?;
    let src = NotifyingSource::start(hub.url())?;
    let topic = src.topic();
    let sub = TestSubscriber::start()?;
    let s = sub.subscribe(&hub, &topic, Some("s"), Some(600)).await?;
    // A second subscription that stays: what reaches it marks how far the hub has got.
    let stays = sub.subscribe(&hub, &topic, None, Some(600)).await?;

    let payload = src.change(&[("w.txt", Some(b"websub form"))])?;
    let r = src.notify(PublishForm::WebSub).await?;
    assert_eq!(r.status, 202);
    let got = sub
        .wait_for_on(&s.callback, 1, T)
        .await
        .with_context(|| hub.log_tail(30))?;
    assert_delivery(&got[0], &payload, &topic, hub.url(), Algorithm::Sha256);
    assert!(
        src.server()
            .requests()
            .iter()
            .any(|q| q.method == "GET" && q.path == "/change/"),
        "the hub fetched the topic"
    );

    let v = sub.unsubscribe(hub.url(), &s).await?;
    assert!(v.confirmed && v.lease_seconds.is_none(), "{v:?}");
    // The hub drops the subscription just after the verification answer: replay until it
    // says only the other one is subscribed (bounded). Then a last payload, published after
    // that, reaches the other subscription while the unsubscribed one gets nothing more.
    let t0 = Instant::now();
    loop {
        let r = src.publish(&payload, PublishForm::ResourceSync).await?;
        if r.body.contains("accepted for 1 subscriber(s)") {
            break;
        }
        ensure!(t0.elapsed() < T, "still subscribed: {}", r.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = sub.deliveries_to(&s.callback).len();
    let last = src.change(&[("w.txt", Some(b"after unsubscribing"))])?;
    let r = src.publish(&last, PublishForm::ResourceSync).await?;
    assert!(
        r.body.contains("accepted for 1 subscriber(s)"),
        "{}",
        r.body
    );
    let t0 = Instant::now();
    while !sub
        .deliveries_to(&stays.callback)
        .iter()
        .any(|d| d.body == last.body)
    {
        ensure!(
            t0.elapsed() < T,
            "the last payload did not reach the other subscription"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        sub.deliveries_to(&s.callback).len(),
        before,
        "delivered after unsubscribing"
    );
    Ok(())
}

/// A POST to a hub with a form body, for the requests the Source's API does not make.
async fn post(hub: &str, content_type: &str, link: Option<&str>, body: String) -> (u16, String) {
    let client = reqwest::Client::new();
    let mut rq = client
        .post(hub)
        .header("Content-Type", content_type)
        .body(body);
    if let Some(l) = link {
        rq = rq.header("Link", l);
    }
    let r = rq.send().await.expect("hub answers");
    (r.status().as_u16(), r.text().await.unwrap_or_default())
}

/// flask-websub in eager mode: a `hub.mode=publish` makes it GET the topic and deliver, all
/// before it answers 202; the delivery is the topic's content with its Link rels, signed
/// sha512. It grants the lease asked for, and (stock) refuses what it does not know: the CN
/// 1.0.1 POST of a payload, and a publish naming the topic only in `hub.url`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flask_hub_eager_relays_the_topic_signed_sha512() -> Result<()> {
    let hub = FlaskHub::start(FlaskMode::Eager)?;
    let src = NotifyingSource::start(hub.url())?;
    let topic = src.topic();
    let sub = TestSubscriber::start()?;
    let s = sub
        .subscribe(&hub, &topic, Some("flask-secret"), Some(120))
        .await?;
    assert_eq!(s.verification.lease(), Some(120), "{:?}", s.verification);

    let payload = src.change(&[("f.txt", Some(b"flask eager"))])?;
    // Eager: the topic fetch (slowed down here) happens inside the publish request.
    src.server()
        .set_delay("/change/", Duration::from_millis(300));
    let r = src.notify(PublishForm::WebSub).await?;
    let got = sub.wait_for(1, T).await.with_context(|| hub.log_tail(30))?;
    assert_delivery(&got[0], &payload, &topic, hub.url(), Algorithm::Sha512);
    assert!(
        got[0].received < r.returned,
        "eager mode delivers before answering the publish"
    );

    let (status, body) = post(
        hub.url(),
        "application/xml",
        Some(&rsagg_websub::link::format(&topic, hub.url())),
        String::from_utf8_lossy(&payload.body).into_owned(),
    )
    .await;
    assert_eq!(
        (status, body.trim()),
        (400, "Missing form argument: hub.mode")
    );
    let form = format!(
        "hub.mode=publish&hub.url={}",
        url::form_urlencoded::byte_serialize(topic.as_bytes()).collect::<String>()
    );
    let (status, body) = post(hub.url(), "application/x-www-form-urlencoded", None, form).await;
    assert_eq!(
        (status, body.trim()),
        (400, "Missing form argument: hub.topic")
    );
    assert_eq!(sub.attempts().len(), 1, "nothing more was delivered");
    Ok(())
}

/// flask-websub with a real Celery worker: the publish is answered 202 before anything is
/// delivered (the topic fetch is slowed down, so a delivery made inside the request would
/// arrive first), the delivery follows within the timeout, and failed deliveries are
/// retried until accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flask_hub_delayed_answers_before_delivering() -> Result<()> {
    let hub = FlaskHub::start(FlaskMode::Delayed)?;
    let src = NotifyingSource::start(hub.url())?;
    let topic = src.topic();
    let sub = TestSubscriber::start()?;
    sub.subscribe(&hub, &topic, Some("delayed"), Some(300))
        .await?;
    src.server()
        .set_delay("/change/", Duration::from_millis(500));
    sub.fail_next(2);

    let payload = src.change(&[("d.txt", Some(b"flask delayed"))])?;
    let r = src.notify(PublishForm::WebSub).await?;
    let got = sub.wait_for(1, T).await.with_context(|| hub.log_tail(40))?;
    assert_delivery(&got[0], &payload, &topic, hub.url(), Algorithm::Sha512);
    let attempts = sub.attempts();
    assert_eq!(
        attempts.iter().map(|a| a.status).collect::<Vec<_>>(),
        [500, 500, 200],
        "retried until accepted"
    );
    assert!(
        attempts.iter().all(|a| a.received > r.returned),
        "every attempt came after the publish was answered ({:?} for the request)",
        r.returned - r.sent
    );
    Ok(())
}

/// Leases at `rsagg hub --lease-min 1 --lease-max 60`: the lease granted is echoed in the
/// verification (1 s as asked; 60 s for a request above the maximum), and once the 1 s lease
/// has run out that subscriber gets nothing while the other one still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsagg_hub_lease_expires() -> Result<()> {
    let hub = RsaggHub::start(&["--lease-min", "1", "--lease-max", "60"])?;
    let src = NotifyingSource::start(hub.url())?;
    let topic = src.topic();
    let sub = TestSubscriber::start()?;
    let short = sub.subscribe(&hub, &topic, None, Some(1)).await?;
    let verified = Instant::now();
    assert_eq!(
        short.verification.lease(),
        Some(1),
        "{:?}",
        short.verification
    );
    let long = sub.subscribe(&hub, &topic, None, Some(100_000)).await?;
    assert_eq!(
        long.verification.lease(),
        Some(60),
        "{:?}",
        long.verification
    );

    // The hub counts leases in whole Unix seconds and sweeps expired ones every lease
    // minimum (1 s here): wait for it to log the short lease's removal (bounded).
    while !hub.removed(&short.callback, "lease expired")? {
        ensure!(
            verified.elapsed() < T,
            "the 1 s lease was not removed; log:\n{}",
            hub.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let payload = src.change(&[("l.txt", Some(b"after expiry"))])?;
    let r = src.notify(PublishForm::ResourceSync).await?;
    assert!(
        r.body.contains("accepted for 1 subscriber(s)"),
        "{}",
        r.body
    );
    let got = sub.wait_for_on(&long.callback, 1, T).await?;
    assert_eq!(got[0].body, payload.body);
    assert_eq!(got[0].signature, SignatureCheck::Unsigned);
    // No wait for a delivery to the short lease: the hub fans a payload out to the
    // subscriptions live when it is published, and it said "1 subscriber(s)" above; the
    // delivery to the long lease came, so the publish was handled.
    assert!(
        sub.deliveries_to(&short.callback).is_empty(),
        "delivered after the lease ended"
    );
    Ok(())
}

/// rsagg re-executes itself once at start so that mimalloc gives freed memory back at once
/// (`crates/cli/src/alloc.rs`): the process its caller started (same PID) runs with
/// `MIMALLOC_PURGE_DELAY=0`, or with the value the caller set.
#[test]
fn rsagg_runs_with_the_allocator_purging_at_free() -> Result<()> {
    let hub = RsaggHub::start(&[])?;
    let environ = std::fs::read(format!("/proc/{}/environ", hub.pid()))?;
    let expected = match std::env::var("MIMALLOC_PURGE_DELAY") {
        Ok(v) => format!("MIMALLOC_PURGE_DELAY={v}"),
        Err(_) => "MIMALLOC_PURGE_DELAY=0".to_owned(),
    };
    ensure!(
        environ.split(|b| *b == 0).any(|v| v == expected.as_bytes()),
        "{expected} not in the environment of rsagg hub (PID {})",
        hub.pid()
    );
    Ok(())
}
