//! End-to-end tests of the push intake (issue 5 part 4, issue 6): a fixture upstream whose
//! Capability List advertises a change-notification channel relayed by a real `rsagg hub`
//! process; `rsagg run P --follow --listen` subscribes at that hub (verification of intent
//! at its callback, signed deliveries), and the test POSTs CN 1.0.1 payloads to the hub as
//! the upstream's publisher would. `poll_interval` is an hour, so whatever shows within
//! seconds came by push.
//!
//! Run: `cargo build -p rsagg-cli; cargo test -p rsagg-e2e --test e2e push::`.

use crate::common;

use std::time::Duration;

use anyhow::{Result, ensure};
use common::*;
use rsagg_e2e::{HubUnderTest, RsaggHub};

/// A CN 1.0.1 payload: (path, change, datetime, body) entries, `up` to the Capability List.
fn payload(site: &Site, from: &str, until: &str, items: &[(&str, &str, &str, &[u8])]) -> String {
    let items: Vec<String> = items
        .iter()
        .map(|(p, change, dt, body)| change_item(&site.url(p), change, dt, Some(body)))
        .collect();
    doc(
        "urlset",
        &format!(r#"capability="change-notification" from="{from}" until="{until}""#),
        &[("up", &site.url("/capabilitylist.xml"))],
        &items,
    )
}

/// POSTs `body` to the hub for `topic` (CN 1.0.1 4.1); the hub answers 200.
fn publish(hub: &str, topic: &str, body: String) -> Result<()> {
    let (hub, topic) = (hub.to_owned(), topic.to_owned());
    block_on(async move {
        let r = reqwest::Client::new()
            .post(&hub)
            .header("Content-Type", "application/xml")
            .header(
                "Link",
                format!("<{topic}>; rel=\"self\", <{hub}>; rel=\"hub\""),
            )
            .body(body)
            .send()
            .await?;
        let status = r.status().as_u16();
        let text = r.text().await?;
        ensure!(status == 200, "hub answered {status}: {text}");
        Ok(())
    })
}

/// A fixture upstream (a.txt, b.txt; an empty Change List from T0) whose Capability List
/// advertises the channel `/change/` at `hub`, and a pipeline following it (published on a
/// loopback port, polled hourly, `push_lease` as given). Returns (site, topic, case, port).
fn upstream_with_channel(hub: &str, name: &str, lease: &str) -> Result<(Site, String, Case, u16)> {
    let site = Site::new()?;
    let t0_res: &[(&str, &[u8])] = &[("/res/a.txt", b"alpha"), ("/res/b.txt", b"bravo")];
    site.resources(t0_res)?;
    site.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
    let topic = site.url("/change/");
    let caps = [
        url_item(
            &site.url("/resourcelist.xml"),
            None,
            r#"capability="resourcelist""#,
            "",
        ),
        url_item(
            &site.url("/changelist.xml"),
            None,
            r#"capability="changelist""#,
            "",
        ),
        url_item(
            &topic,
            None,
            r#"capability="change-notification""#,
            &format!("    <rs:ln rel=\"hub\" href=\"{hub}\"/>\n"),
        ),
    ];
    site.write(
        "/capabilitylist.xml",
        doc(
            "urlset",
            r#"capability="capabilitylist""#,
            &[("up", &site.url("/.well-known/resourcesync"))],
            &caps,
        ),
    )?;
    site.resource_list("/resourcelist.xml", "/capabilitylist.xml", T0, t0_res)?;
    site.changes("/changelist.xml", "changelist", T0, &[])?;
    let (case, port) = Case::on_loopback(
        name,
        &site,
        &format!("poll_interval = \"1h\"\npush_lease = \"{lease}\""),
        "",
    )?;
    Ok((site, topic, case, port))
}

#[test]
fn push_notifications_are_applied_at_once_gaps_recovered_replays_dropped() -> Result<()> {
    let hub_process = RsaggHub::start(&["--store", "memory://", "--lease-min", "1"])?;
    let hub = hub_process.url().to_owned();
    let (site, topic, case, port) = upstream_with_channel(&hub, "push", "3s")?;
    let base = case.base_url.clone();
    let copy = |path: &str| format!("{base}r/{UP}/{}", site.url(path).replacen("://", "/", 1));
    let served = |path: &str, body: &[u8]| -> Result<bool> {
        let (code, got) = http_get(&copy(path))?;
        Ok(code == 200 && got == body)
    };
    let f = Follower::start(&case, port)?;

    // The first poll publishes the baseline, then rsagg subscribes and the hub verifies.
    wait_for("baseline served", Duration::from_secs(30), &f, || {
        served("/res/a.txt", b"alpha")
    })?;
    wait_for("subscription verified", Duration::from_secs(20), &f, || {
        verified(&case)
    })?;

    // A pushed change shows within a couple of seconds (the next poll is an hour away).
    site.write("/res/c.txt", "charlie")?;
    let p1 = payload(
        &site,
        T0,
        "2026-01-02T00:00:10Z",
        &[("/res/c.txt", "created", "2026-01-02T00:00:00Z", b"charlie")],
    );
    publish(&hub, &topic, p1.clone())?;
    let took = wait_for("pushed change served", Duration::from_secs(5), &f, || {
        served("/res/c.txt", b"charlie")
    })?;
    eprintln!("[push] upstream notification → copy served: {took:?}");
    let open = || -> Result<String> {
        let (code, body) = http_get(&format!("{base}changelist-open.xml"))?;
        ensure!(code == 200, "changelist-open.xml: {code}");
        Ok(String::from_utf8(body)?)
    };
    ensure!(open()?.contains("/res/c.txt</loc>"), "{}", open()?);

    // A gap: d.txt changed upstream (only in its Change List, never notified), then a
    // payload for e.txt whose `from` is after the last `until`: rsagg reads the Change List.
    site.write("/res/d.txt", "delta")?;
    site.write("/res/e.txt", "echo")?;
    site.changes(
        "/changelist.xml",
        "changelist",
        T0,
        &[
            change_item(
                &site.url("/res/c.txt"),
                "created",
                "2026-01-02T00:00:00Z",
                Some(b"charlie"),
            ),
            change_item(
                &site.url("/res/d.txt"),
                "created",
                "2026-01-02T00:00:20Z",
                Some(b"delta"),
            ),
            change_item(
                &site.url("/res/e.txt"),
                "created",
                "2026-01-02T00:00:40Z",
                Some(b"echo"),
            ),
        ],
    )?;
    let p2 = payload(
        &site,
        "2026-01-02T00:00:30Z",
        "2026-01-02T00:00:50Z",
        &[("/res/e.txt", "created", "2026-01-02T00:00:40Z", b"echo")],
    );
    publish(&hub, &topic, p2)?;
    wait_for(
        "gap recovered from the Change List",
        Duration::from_secs(10),
        &f,
        || Ok(served("/res/d.txt", b"delta")? && served("/res/e.txt", b"echo")?),
    )?;

    // A replay of the first payload, then one that follows the second: once the latter is
    // served, the replay was processed before it (the hub delivers in order) — and dropped.
    site.write("/res/f.txt", "foxtrot")?;
    publish(&hub, &topic, p1)?;
    let p3 = payload(
        &site,
        "2026-01-02T00:00:50Z",
        "2026-01-02T00:01:10Z",
        &[("/res/f.txt", "created", "2026-01-02T00:01:00Z", b"foxtrot")],
    );
    publish(&hub, &topic, p3)?;
    wait_for(
        "payload after the replay served",
        Duration::from_secs(10),
        &f,
        || served("/res/f.txt", b"foxtrot"),
    )?;
    let list = open()?;
    for r in ["c", "d", "e", "f"] {
        let n = list.matches(&format!("/res/{r}.txt</loc>")).count();
        ensure!(
            n == 1,
            "{r}.txt is in rsagg's Change List {n} times:\n{list}"
        );
    }
    // The subscription was renewed meanwhile (3 s lease requested, granted as asked) and
    // still verifies; renewals keep the secret, so deliveries keep verifying.
    wait_for("lease renewed", Duration::from_secs(10), &f, || {
        Ok(std::fs::read_to_string(&f.log)?
            .matches("subscription requested")
            .count()
            >= 2)
    })?;
    ensure!(
        std::fs::read_to_string(&f.log)?.contains("push pass"),
        "no push pass logged:\n{}",
        f.log_tail()
    );
    ensure!(
        !f.log_tail().contains("delivery dropped"),
        "a signed delivery was dropped:\n{}",
        f.log_tail()
    );

    // SIGTERM: the follower stops (state closed, server drained) and exits 0.
    let mut f = f;
    let status = f.terminate(Duration::from_secs(40))?;
    ensure!(
        status.code() == Some(0),
        "{status:?}; log:\n{}",
        f.log_tail()
    );
    // The last counters are in the stats object for /metrics.
    let stats: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        store_dir(&case)?.join("stats/last-run.json"),
    )?)?;
    let push = &stats["report"]["push"];
    ensure!(push["received"].as_u64() >= Some(4), "{push}");
    ensure!(push["applied"].as_u64() >= Some(4), "{push}");
    ensure!(push["gaps_recovered"].as_u64() >= Some(1), "{push}");
    ensure!(push["dropped_signature"].as_u64() == Some(0), "{push}");

    // A restarted follower keeps the secret (the hub still signs with it) and the channel's
    // continuity: a payload following the last one is applied without reading the Change
    // List, and its signature verifies.
    drop(f);
    let f = Follower::start(&case, port)?;
    wait_for(
        "polled after the restart",
        Duration::from_secs(30),
        &f,
        || Ok(std::fs::read_to_string(&f.log)?.contains("changes after the checkpoint")),
    )?;
    site.write("/res/g.txt", "golf")?;
    let p4 = payload(
        &site,
        "2026-01-02T00:01:10Z",
        "2026-01-02T00:01:30Z",
        &[("/res/g.txt", "created", "2026-01-02T00:01:20Z", b"golf")],
    );
    publish(&hub, &topic, p4)?;
    wait_for(
        "pushed change served after the restart",
        Duration::from_secs(10),
        &f,
        || served("/res/g.txt", b"golf"),
    )?;
    let log = std::fs::read_to_string(&f.log)?;
    ensure!(
        !log.contains("does not follow") && !log.contains("delivery dropped"),
        "{}",
        f.log_tail()
    );
    Ok(())
}
