//! Deadlines and a failing store end a run promptly, with what could be published published
//! and nothing lost (issue 16, points 1 and 2): an endless Resource List stops at the pass
//! deadline while a healthy upstream of the same pipeline is published (exit 1) and a rerun
//! goes on; a store answering 403 to everything ends the run with one line naming it; a
//! SeaweedFS stopped in the middle of a baseline ends the run (exit 1) and, restarted, the
//! rerun completes with every resource stored once.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Result;
use axum::Router;
use axum::body::Body;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use common::*;
use rsagg_e2e::Seaweed;

/// Serves `app` on 127.0.0.1:0 from a thread of its own (the tests drive the rsagg binary
/// synchronously), for as long as the test process lives.
fn serve(app: Router) -> Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let l = tokio::net::TcpListener::from_std(listener).expect("listener");
            axum::serve(l, app).await.expect("serve");
        });
    });
    Ok(addr)
}

/// An upstream whose Resource List never ends: 20 more entries every 2 ms, each a real
/// resource (`/r/N`) answered after 100 ms, so that what bounds the harvest is fetching the
/// resources, as with a very long list. Every request of the list starts again at entry 0.
fn endless_upstream() -> Result<SocketAddr> {
    let addr_slot: Arc<std::sync::OnceLock<SocketAddr>> = Arc::new(std::sync::OnceLock::new());
    let a1 = addr_slot.clone();
    let a2 = addr_slot.clone();
    let app = Router::new()
        .route(
            "/capabilitylist.xml",
            get(move || {
                let base = format!("http://{}", a1.get().expect("address"));
                async move {
                    doc(
                        "urlset",
                        r#"capability="capabilitylist""#,
                        &[],
                        &[url_item(
                            &format!("{base}/resourcelist.xml"),
                            None,
                            r#"capability="resourcelist""#,
                            "",
                        )],
                    )
                }
            }),
        )
        .route(
            "/resourcelist.xml",
            get(move || {
                let base = format!("http://{}", a2.get().expect("address"));
                async move {
                    let head = format!(
                        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {NS}>\n<rs:ln rel=\"up\" href=\"{base}/capabilitylist.xml\"/>\n<rs:md capability=\"resourcelist\" at=\"{T0}\"/>\n"
                    );
                    let entries = futures::stream::unfold(0u64, move |first| {
                        let base = base.clone();
                        async move {
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            let items: String = (first..first + 20)
                                .map(|i| {
                                    let body = resource_body(i);
                                    url_item(
                                        &format!("{base}/r/{i}"),
                                        Some(LASTMOD),
                                        &md_of(body.as_bytes()),
                                        "",
                                    )
                                })
                                .collect();
                            Some((Ok::<_, std::io::Error>(items.into_bytes()), first + 20))
                        }
                    });
                    let stream = futures::StreamExt::chain(
                        futures::stream::once(async move {
                            Ok::<_, std::io::Error>(head.into_bytes())
                        }),
                        entries,
                    );
                    ([(header::CONTENT_TYPE, "application/xml")], Body::from_stream(stream))
                }
            }),
        )
        .route(
            "/r/{i}",
            get(|Path(i): Path<u64>| async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                resource_body(i)
            }),
        );
    let addr = serve(app)?;
    addr_slot.set(addr).expect("set once");
    Ok(addr)
}

fn resource_body(i: u64) -> String {
    format!("endless resource {i}\n")
}

#[test]
fn an_endless_list_stops_at_the_pass_deadline_and_the_healthy_upstream_is_published() -> Result<()>
{
    let slow = endless_upstream()?;
    let site = Site::new()?;
    let res: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| (format!("/h/{i}.txt"), format!("healthy {i}").into_bytes()))
        .collect();
    let refs: Vec<(&str, &[u8])> = res.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &refs)?;
    let case = Case::published_at(
        Store::file("deadline-pass")?,
        &[
            upstream("slow", &format!("http://{slow}/capabilitylist.xml"), ""),
            upstream(UP, &site.url("/.well-known/resourcesync"), ""),
        ],
        "http://agg.example.org/deadline-pass/",
        "[deadlines]\npass = \"3s\"\nmin_rate = 0\n",
    )?;
    // Four resources at a time: the list outruns the harvest.
    let toml = std::fs::read_to_string(&case.toml)?
        .replace("[fetch]\n", "[fetch]\nconcurrency = 4\nper_host = 4\n");
    std::fs::write(&case.toml, toml)?;

    let first = case.run()?;
    assert_eq!(first.code, 1, "{first:#?}");
    assert_eq!(first.verdict(), "ok", "{first:#?}");
    assert_eq!(first.n("created"), 3, "{first:#?}");
    let s = first.up_named("slow");
    assert_eq!(s["verdict"], "failed", "{first:#?}");
    let error = s["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("deadline") && error.contains("[deadlines] pass"),
        "{error}"
    );
    let created_first = s["created"].as_u64().unwrap_or(0);
    assert!(
        created_first > 0,
        "committed before the deadline; {first:#?}"
    );
    assert!(
        first.report.as_ref().unwrap()["publish"].is_object(),
        "{first:#?}"
    );

    // Published: the healthy upstream's resources and what the slow one committed.
    let objects = case.store.objects()?;
    let list = block_on(async move {
        let p = object_store::path::Path::from("resourcelist.xml");
        let b = object_store::ObjectStoreExt::get(objects.as_ref(), &p)
            .await?
            .bytes()
            .await?;
        Ok(String::from_utf8(b.to_vec())?)
    })?;
    for (p, _) in &res {
        assert!(list.contains(&site.url(p)), "{p} not published:\n{list}");
    }
    assert!(list.contains(&format!("http://{slow}/r/0")), "{list}");
    let snap = case.snapshot("slow")?;
    assert_eq!(snap.records.len() as u64, created_first);

    // The rerun goes on: what is stored is not fetched again, more is added.
    let second = case.run()?;
    assert_eq!(second.code, 1, "{second:#?}");
    let s2 = second.up_named("slow");
    assert!(s2["unchanged"].as_u64().unwrap_or(0) > 0, "{second:#?}");
    assert!(s2["created"].as_u64().unwrap_or(0) > 0, "{second:#?}");
    let snap = case.snapshot("slow")?;
    assert_eq!(
        snap.records.len() as u64,
        created_first + s2["created"].as_u64().unwrap_or(0)
    );
    // Each resource created once, none deleted (the list was never read to its end).
    snap.assert_log_sane();
    assert!(
        snap.log
            .iter()
            .all(|e| e.change != rsagg_model::Change::Deleted)
    );
    for uri in snap.records.keys() {
        assert_eq!(snap.log_of(uri), vec!["created".to_string()], "{uri}");
    }
    Ok(())
}

/// Just enough S3 to refuse everything: 403 with S3's `AccessDenied` error document.
fn denying_store() -> Result<(SocketAddr, Arc<AtomicUsize>)> {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new().fallback(move || {
        h.fetch_add(1, Ordering::SeqCst);
        async {
            (
                StatusCode::FORBIDDEN,
                [(header::CONTENT_TYPE, "application/xml")],
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message><RequestId>rsagg-e2e</RequestId></Error>",
            )
                .into_response()
        }
    });
    Ok((serve(app)?, hits))
}

#[test]
fn a_store_answering_403_ends_the_run_with_one_line() -> Result<()> {
    let (store, hits) = denying_store()?;
    let site = Site::new()?;
    site.standard(
        &[("resourcelist", "/resourcelist.xml")],
        &[("/a.txt", b"a")],
    )?;
    let case = Case::published_at(
        Store::at("s3://denied/prefix"),
        &[upstream(UP, &site.url("/.well-known/resourcesync"), "")],
        "http://agg.example.org/denied/",
        "",
    )?;
    let env = [
        ("AWS_ENDPOINT", format!("http://{store}")),
        ("AWS_ACCESS_KEY_ID", "wrong".into()),
        ("AWS_SECRET_ACCESS_KEY", "wrong".into()),
        ("AWS_REGION", "us-east-1".into()),
        ("AWS_ALLOW_HTTP", "true".into()),
        ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".into()),
        ("AWS_EC2_METADATA_DISABLED", "true".into()),
    ];
    let run = case.run_env(&[], &env)?;
    assert_eq!(run.code, 1, "{run:#?}");
    let lines: Vec<&str> = run
        .stderr
        .lines()
        .filter(|l| l.starts_with("rsagg run:"))
        .collect();
    assert_eq!(lines.len(), 1, "{run:#?}");
    assert!(
        lines[0].contains("s3://denied/prefix")
            && lines[0].contains("refused access")
            && (lines[0].contains("AccessDenied") || lines[0].contains("403")),
        "{}",
        lines[0]
    );
    // Opening the state is logged at info, with what it waits for.
    assert!(run.stderr.contains("opening the state"), "{run:#?}");
    // No retry storm: the state's first requests, refused, end it.
    let n = hits.load(Ordering::SeqCst);
    assert!(n <= 10, "{n} requests to a store that refused the first");
    // Nothing was fetched from the upstream.
    assert_eq!(site.fx.hits("/a.txt"), 0);
    Ok(())
}

#[test]
fn a_store_stopped_mid_run_ends_it_and_the_rerun_loses_nothing() -> Result<()> {
    let sw = Seaweed::start_restartable()?;
    let site = Site::new()?;
    let res: Vec<(String, Vec<u8>)> = (0..400)
        .map(|i| (format!("/s/{i}.txt"), format!("stored {i}").into_bytes()))
        .collect();
    let refs: Vec<(&str, &[u8])> = res.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &refs)?;
    // Each resource is slowed down, so that the store goes away in the middle of the run.
    for (p, _) in &res {
        site.fx.set_delay(p, Duration::from_millis(200));
    }
    let prefix = rsagg_e2e::unique_prefix("stopped");
    let case = Case::published_at(
        Store::at(&sw.store_url(&prefix)),
        &[upstream(UP, &site.url("/.well-known/resourcesync"), "")],
        "http://agg.example.org/stopped/",
        "",
    )?;
    // Short store retries and a short wait for the state, so the test takes seconds.
    // Four resources at a time, so that the run lasts.
    let toml = std::fs::read_to_string(&case.toml)?
        .replace(
            "[store]\n",
            "[store]\nretries = 1\nretry_timeout = \"2s\"\nopen_timeout = \"20s\"\n",
        )
        .replace("[fetch]\n", "[fetch]\nconcurrency = 4\nper_host = 4\n");
    std::fs::write(&case.toml, toml)?;
    let env = sw.env();
    let child = case.spawn_run(&env)?;
    // Stop the store once the run has stored something (its progress, not a timer).
    let fetched = || -> usize { res.iter().map(|(p, _)| site.fx.hits(p)).sum() };
    wait_until(Duration::from_secs(60), || Ok(fetched() >= 40))?;
    sw.stop();
    let run = child.finish(Duration::from_secs(120))?;
    assert_eq!(run.code, 1, "{run:#?}");
    let line = run
        .stderr
        .lines()
        .find(|l| l.starts_with("rsagg run:"))
        .unwrap_or_default()
        .to_owned();
    assert!(
        line.contains(&sw.store_url(&prefix)) && line.contains("unreachable"),
        "{run:#?}"
    );
    // It stopped there: not every resource was fetched (no run through the whole list
    // failing each PUT on its own).
    let n = fetched();
    assert!(
        n < res.len(),
        "{n} resources fetched after the store stopped"
    );

    sw.restart()?;
    let rerun = case.run_env(&[], &env)?;
    rerun.assert_ok();
    let objects = sw.object_store(&prefix);
    let snap = block_on(async move { Snapshot::read(objects, UP).await })?;
    assert_eq!(snap.records.len(), res.len());
    snap.assert_log_sane();
    for (p, _) in &res {
        assert_eq!(
            snap.log_of(&site.url(p)),
            vec!["created".to_string()],
            "{p}"
        );
    }
    Ok(())
}

/// An upstream with one resource whose body drips: `len` bytes, `chunk` bytes at a time, one
/// chunk a second (10 B/s for the issue's 5,000 bytes: 500 s to read it whole). Its Resource
/// List announces the right length and hashes, so only time is wrong with it.
fn dripping_upstream(len: usize, chunk: usize) -> Result<SocketAddr> {
    let body: Arc<Vec<u8>> = Arc::new((0..len).map(|i| b'a' + (i % 26) as u8).collect());
    let addr_slot: Arc<std::sync::OnceLock<SocketAddr>> = Arc::new(std::sync::OnceLock::new());
    let (a1, a2) = (addr_slot.clone(), addr_slot.clone());
    let md = md_of(&body);
    let app = Router::new()
        .route(
            "/capabilitylist.xml",
            get(move || {
                let base = format!("http://{}", a1.get().expect("address"));
                async move {
                    doc(
                        "urlset",
                        r#"capability="capabilitylist""#,
                        &[],
                        &[url_item(
                            &format!("{base}/resourcelist.xml"),
                            None,
                            r#"capability="resourcelist""#,
                            "",
                        )],
                    )
                }
            }),
        )
        .route(
            "/resourcelist.xml",
            get(move || {
                let base = format!("http://{}", a2.get().expect("address"));
                let md = md.clone();
                async move {
                    doc(
                        "urlset",
                        &format!(r#"capability="resourcelist" at="{T0}""#),
                        &[("up", &format!("{base}/capabilitylist.xml"))],
                        &[url_item(&format!("{base}/drip"), Some(LASTMOD), &md, "")],
                    )
                }
            }),
        )
        .route(
            "/drip",
            get(move || {
                let body = body.clone();
                async move {
                    let chunks = futures::stream::unfold(0usize, move |at| {
                        let body = body.clone();
                        async move {
                            if at >= body.len() {
                                return None;
                            }
                            if at > 0 {
                                tokio::time::sleep(Duration::from_secs(1)).await;
                            }
                            let end = (at + chunk).min(body.len());
                            let part = bytes::Bytes::copy_from_slice(&body[at..end]);
                            Some((Ok::<_, std::io::Error>(part), end))
                        }
                    });
                    (
                        [(header::CONTENT_TYPE, "text/plain")],
                        Body::from_stream(chunks),
                    )
                }
            }),
        );
    let addr = serve(app)?;
    addr_slot.set(addr).expect("set once");
    Ok(addr)
}

/// A body still downloading at the deadline is cut (issue 26, point 3): with one upstream
/// dripping 5,000 bytes at 10 B/s and `min_rate = 0`, the run ends at `deadline` (plus a
/// publish), not after the 500 s the body takes; the healthy upstream is published, the
/// dripping one reported failed by the deadline, and the rerun fetches it again.
fn a_dripping_body_is_cut_at_the_deadline(deadline: &str, what: &str) -> Result<()> {
    let slow = dripping_upstream(5_000, 10)?;
    let site = Site::new()?;
    let res: Vec<(String, Vec<u8>)> = (0..3)
        .map(|i| (format!("/h/{i}.txt"), format!("healthy {i}").into_bytes()))
        .collect();
    let refs: Vec<(&str, &[u8])> = res.iter().map(|(p, b)| (p.as_str(), &b[..])).collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &refs)?;
    let case = Case::published_at(
        Store::file(&format!("drip-{what}"))?,
        &[
            upstream("slow", &format!("http://{slow}/capabilitylist.xml"), ""),
            upstream(UP, &site.url("/.well-known/resourcesync"), ""),
        ],
        &format!("http://agg.example.org/drip-{what}/"),
        &format!("[deadlines]\n{deadline}\nmin_rate = 0\n"),
    )?;
    let started = std::time::Instant::now();
    // Bounded wait: before, the run took the body's 500 s; now the deadline (a few
    // seconds) plus the publish. 30 s beyond the deadline is a generous bound on a busy
    // machine that still fails the old behaviour.
    let run = case.spawn_run(&Vec::<(String, String)>::new())?;
    let run = run.finish(Duration::from_secs(35))?;
    let took = started.elapsed();
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.verdict(), "ok", "{run:#?}");
    assert_eq!(run.n("created"), 3, "{run:#?}");
    let s = run.up_named("slow");
    assert_eq!(s["verdict"], "failed", "{run:#?}");
    assert_eq!(s["failed"], 1, "{run:#?}");
    assert_eq!(s["created"], 0, "{run:#?}");
    let error = s["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("deadline") && error.contains(&format!("[deadlines] {what}")),
        "{error}"
    );
    assert!(
        run.report.as_ref().unwrap()["publish"]["errors"]
            .as_array()
            .is_some_and(Vec::is_empty),
        "{run:#?}"
    );
    // The healthy upstream is published.
    let objects = case.store.objects()?;
    let list = block_on(async move {
        let p = object_store::path::Path::from("resourcelist.xml");
        let b = object_store::ObjectStoreExt::get(objects.as_ref(), &p)
            .await?
            .bytes()
            .await?;
        Ok(String::from_utf8(b.to_vec())?)
    })?;
    for (p, _) in &res {
        assert!(list.contains(&site.url(p)), "{p} not published:\n{list}");
    }
    assert!(!list.contains(&format!("http://{slow}/drip")), "{list}");
    // Nothing half-downloaded was recorded.
    let snap = case.snapshot("slow")?;
    assert!(snap.records.is_empty(), "{:?}", snap.records.keys());
    eprintln!("{what} deadline: run ended after {took:?}");
    Ok(())
}

#[test]
fn a_body_dripping_past_the_pass_deadline_is_cut_and_the_healthy_upstream_published() -> Result<()>
{
    a_dripping_body_is_cut_at_the_deadline("pass = \"3s\"", "pass")
}

#[test]
fn a_body_dripping_past_the_run_deadline_is_cut_and_the_healthy_upstream_published() -> Result<()> {
    a_dripping_body_is_cut_at_the_deadline("run = \"3s\"", "run")
}
