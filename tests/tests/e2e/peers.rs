//! Smoke tests of the end-to-end harness: every peer starts, does what the real tests rely on,
//! and goes away again.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use md5::{Digest, Md5};
use object_store::aws::{AmazonS3Builder, AmazonS3ConfigKey};
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion};
use reqwest::StatusCode;
use rsagg_e2e::{
    Failure, FixtureServer, Gzip, Seaweed, SimOptions, Simulator, resync_sync, rsagg_bin,
    unique_prefix,
};

const NS: &str = r#"xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/""#;

fn md5_hex(data: &[u8]) -> String {
    Md5::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn get_text(url: &str) -> Result<(StatusCode, String, String)> {
    let r = reqwest::get(url).await?;
    let status = r.status();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok((status, ct, r.text().await?))
}

#[tokio::test(flavor = "multi_thread")]
async fn seaweed_put_get_list_delete_and_conditional_writes() -> Result<()> {
    let sw = Seaweed::shared()?;
    let prefix = unique_prefix("smoke");
    let store = sw.object_store(&prefix);

    let a = ObjectPath::from("docs/a.xml");
    let b = ObjectPath::from("docs/sub/b.xml");
    let put = store.put(&a, PutPayload::from_static(b"<a/>")).await?;
    store.put(&b, PutPayload::from_static(b"<b/>")).await?;
    let got = store.get(&a).await?.bytes().await?;
    assert_eq!(got.as_ref(), b"<a/>");

    let mut listed: Vec<String> = Vec::new();
    let mut stream = store.list(Some(&ObjectPath::from("docs")));
    use futures::StreamExt;
    while let Some(meta) = stream.next().await {
        listed.push(meta?.location.to_string());
    }
    listed.sort();
    assert_eq!(listed, ["docs/a.xml", "docs/sub/b.xml"]);

    // If-None-Match: * on an existing key fails
    let err = store
        .put_opts(
            &a,
            PutPayload::from_static(b"<a2/>"),
            PutOptions::from(PutMode::Create),
        )
        .await
        .expect_err("PutMode::Create over an existing object must fail");
    assert!(
        matches!(
            err,
            object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }
        ),
        "unexpected error: {err:?}"
    );
    // If-Match with a stale / the current ETag
    let stale = UpdateVersion {
        e_tag: Some("\"0123456789abcdef0123456789abcdef\"".into()),
        version: None,
    };
    let err = store
        .put_opts(
            &a,
            PutPayload::from_static(b"<a3/>"),
            PutMode::Update(stale).into(),
        )
        .await
        .expect_err("PutMode::Update with a wrong ETag must fail");
    assert!(
        matches!(err, object_store::Error::Precondition { .. }),
        "unexpected error: {err:?}"
    );
    let current = UpdateVersion {
        e_tag: put.e_tag.clone(),
        version: None,
    };
    store
        .put_opts(
            &a,
            PutPayload::from_static(b"<a4/>"),
            PutMode::Update(current).into(),
        )
        .await?;
    assert_eq!(store.get(&a).await?.bytes().await?.as_ref(), b"<a4/>");

    store.delete(&a).await?;
    store.delete(&b).await?;
    assert!(matches!(
        store.get(&a).await,
        Err(object_store::Error::NotFound { .. })
    ));

    // env() + store_url() are enough for a from-env style client (what an rsagg child gets)
    let mut builder = AmazonS3Builder::new();
    for (k, v) in sw.env() {
        if let Ok(key) = k.to_ascii_lowercase().parse::<AmazonS3ConfigKey>() {
            builder = builder.with_config(key, v);
        }
    }
    let from_env = builder.with_url(sw.store_url(&prefix)).build()?;
    let key = ObjectPath::from(format!("{prefix}/via-env.txt"));
    from_env.put(&key, PutPayload::from_static(b"env")).await?;
    assert_eq!(
        store
            .get(&"via-env.txt".into())
            .await?
            .bytes()
            .await?
            .as_ref(),
        b"env"
    );
    from_env.delete(&key).await?;

    // unsigned requests are refused
    let anon = reqwest::get(format!("{}/{}/", sw.endpoint(), sw.bucket())).await?;
    assert_eq!(anon.status(), StatusCode::FORBIDDEN);
    Ok(())
}

#[test]
fn seaweed_own_instance_goes_away_on_drop() -> Result<()> {
    let sw = Seaweed::start()?;
    let pid = sw.pid();
    assert!(sw.is_running());
    assert!(Path::new(&format!("/proc/{pid}")).exists());
    drop(sw);
    // the watchdog reaps weed before it exits: no /proc entry, not even a zombie
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists(),
        "weed (pid {pid}) still there after drop"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn simulator_serves_description_resource_list_and_change_list() -> Result<()> {
    let sim = Simulator::start_async(SimOptions {
        resources: 5,
        change_delay: 0.2,
        seed: Some(7),
        wait_for_changelist: true,
        ..SimOptions::default()
    })
    .await?;
    let (st, ct, sd) = get_text(&sim.source_description_url()).await?;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(ct, "application/xml");
    assert!(sd.contains(r#"capability="description""#), "{sd}");
    assert!(sd.contains(&sim.url("/capabilitylist.xml")), "{sd}");

    let (st, _, cl) = get_text(&sim.url("/capabilitylist.xml")).await?;
    assert_eq!(st, StatusCode::OK);
    assert!(cl.contains(r#"capability="capabilitylist""#), "{cl}");

    let (st, _, rl) = get_text(&sim.url("/resourcelist.xml")).await?;
    assert_eq!(st, StatusCode::OK);
    assert!(rl.contains(r#"capability="resourcelist""#), "{rl}");
    assert!(rl.contains(&sim.url("/resources/")), "{rl}");

    let (st, _, ch) = get_text(&sim.url("/changelist.xml")).await?;
    assert_eq!(st, StatusCode::OK);
    assert!(ch.contains(r#"capability="changelist""#), "{ch}");
    assert!(ch.contains("change=\""), "{ch}");

    // the simulator binds loopback only
    let ss = std::process::Command::new("ss").args(["-ltnH"]).output();
    if let Ok(out) = ss {
        let listing = String::from_utf8_lossy(&out.stdout);
        let port = format!(":{} ", sim.port());
        for line in listing.lines().filter(|l| l.contains(&port)) {
            assert!(line.contains("127.0.0.1:"), "not loopback only: {line}");
        }
    }

    let pid = sim.pid();
    drop(sim);
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn simulator_keeps_serving_after_max_events() -> Result<()> {
    let sim = Simulator::start_async(SimOptions {
        resources: 3,
        change_delay: 0.05,
        max_events: 4,
        event_types: vec!["update".into(), "delete".into()],
        wait_for_changelist: true,
        ..SimOptions::default()
    })
    .await?;
    // Wait (bounded) for the simulator to have made its 4 changes, then it still serves.
    let t0 = std::time::Instant::now();
    while !sim.log_tail(200).contains("Finished change simulation") {
        ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "no end of the change simulation: {}",
            sim.log_tail(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (st, _, ch) = get_text(&sim.url("/changelist.xml")).await?;
    assert_eq!(st, StatusCode::OK, "{}", sim.log_tail(20));
    // updates and deletes went through (Python >= 3.11 random.sample fix)
    assert!(
        ch.contains(r#"change="updated""#) || ch.contains(r#"change="deleted""#),
        "{ch}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn fixture_server_validators_headers_failures_gzip_hits() -> Result<()> {
    let fx = FixtureServer::start()?;
    fx.write("/docs/a.xml", "<urlset/>\n")?;
    fx.write("/.well-known/resourcesync", "<urlset/>\n")?;
    fx.write("/index.html", "<html></html>\n")?;
    fx.write("/notes.txt", "hello\n")?;
    let client = reqwest::Client::builder().no_gzip().build()?;

    // content types, validators, conditional GET
    let r = client.get(fx.url("docs/a.xml")).send().await?;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-type"], "application/xml");
    let etag = r.headers()["etag"].to_str()?.to_string();
    let lm = r.headers()["last-modified"].to_str()?.to_string();
    assert_eq!(r.text().await?, "<urlset/>\n");
    for (url, ct) in [
        ("/.well-known/resourcesync", "application/xml"),
        ("/", "text/html; charset=utf-8"),
        ("/notes.txt", "text/plain; charset=utf-8"),
    ] {
        let r = client.get(fx.url(url)).send().await?;
        assert_eq!(r.status(), StatusCode::OK, "{url}");
        assert_eq!(r.headers()["content-type"], ct, "{url}");
    }
    let r = client
        .get(fx.url("docs/a.xml"))
        .header("If-None-Match", &etag)
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    let r = client
        .get(fx.url("docs/a.xml"))
        .header("If-Modified-Since", &lm)
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    fx.write("/docs/a.xml", "<urlset><url/></urlset>\n")?;
    let r = client
        .get(fx.url("docs/a.xml"))
        .header("If-None-Match", &etag)
        .send()
        .await?;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "a rewritten file has a new ETag"
    );
    assert_eq!(fx.hits("/docs/a.xml"), 4);
    let inm: Vec<_> = fx
        .requests()
        .into_iter()
        .filter_map(|r| r.header("if-none-match").map(str::to_string))
        .collect();
    assert_eq!(inm, [etag.clone(), etag]);

    // HEAD, 404, 405, no escaping the root
    let r = client.head(fx.url("notes.txt")).send().await?;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["content-length"], "6");
    assert_eq!(
        client.get(fx.url("missing.xml")).send().await?.status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        client.post(fx.url("notes.txt")).send().await?.status(),
        StatusCode::METHOD_NOT_ALLOWED
    );
    assert_eq!(
        client
            .get(fx.url("/docs/%2e%2e/%2e%2e/etc/passwd"))
            .send()
            .await?
            .status(),
        StatusCode::NOT_FOUND
    );

    // extra headers, also on 304
    let link = format!(
        r#"<{}>; rel="resourcesync""#,
        fx.url("/.well-known/resourcesync")
    );
    fx.set_header("/", "Link", &link);
    let r = client.get(fx.url("/")).send().await?;
    assert_eq!(r.headers()["link"], link.as_str());

    // scripted failures: twice 500, then normal; 429 with Retry-After
    fx.fail_next("/notes.txt", 2, Failure::status(500));
    fx.fail_next("/notes.txt", 1, Failure::too_many_requests(7));
    let before = fx.hits("/notes.txt");
    let mut seen = Vec::new();
    for _ in 0..4 {
        let r = client.get(fx.url("notes.txt")).send().await?;
        seen.push((
            r.status().as_u16(),
            r.headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap_or("").to_string()),
        ));
    }
    assert_eq!(
        seen,
        [
            (500, None),
            (500, None),
            (429, Some("7".into())),
            (200, None)
        ]
    );
    assert_eq!(fx.hits("/notes.txt") - before, 4);
    fx.fail_always("/gone.xml", Failure::status(410));
    assert_eq!(
        client.get(fx.url("gone.xml")).send().await?.status(),
        StatusCode::GONE
    );

    // gzip on the wire
    fx.set_gzip("/docs/a.xml", Gzip::Always);
    let r = client.get(fx.url("docs/a.xml")).send().await?;
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let raw = r.bytes().await?;
    let mut plain = String::new();
    flate2::read::GzDecoder::new(raw.as_ref()).read_to_string(&mut plain)?;
    assert_eq!(plain, "<urlset><url/></urlset>\n");
    fx.set_gzip("/docs/a.xml", Gzip::IfAccepted);
    let r = client.get(fx.url("docs/a.xml")).send().await?;
    assert!(r.headers().get("content-encoding").is_none());
    Ok(())
}

/// A minimal static Source: Source Description → Capability List → Resource List → 2 resources.
fn write_static_source(fx: &FixtureServer) -> Result<Vec<(String, Vec<u8>)>> {
    let base = fx.base_url();
    let resources = vec![
        ("res/one.txt".to_string(), b"resource one\n".to_vec()),
        (
            "res/two.txt".to_string(),
            b"resource two, a little longer\n".to_vec(),
        ),
    ];
    fx.write(
        "/.well-known/resourcesync",
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}><rs:md capability="description"/>
<url><loc>{base}/capabilitylist.xml</loc><rs:md capability="capabilitylist"/></url></urlset>
"#
        ),
    )?;
    fx.write(
        "/capabilitylist.xml",
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}><rs:ln rel="up" href="{base}/.well-known/resourcesync"/><rs:md capability="capabilitylist"/>
<url><loc>{base}/resourcelist.xml</loc><rs:md capability="resourcelist"/></url></urlset>
"#
        ),
    )?;
    let mut urls = String::new();
    for (path, body) in &resources {
        fx.write(path, body)?;
        urls.push_str(&format!(
            "<url><loc>{base}/{path}</loc><lastmod>2026-01-01T00:00:10Z</lastmod>\
             <rs:md hash=\"md5:{}\" length=\"{}\" type=\"text/plain\"/></url>\n",
            md5_hex(body),
            body.len()
        ));
    }
    fx.write(
        "/resourcelist.xml",
        format!(
            r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset {NS}><rs:ln rel="up" href="{base}/capabilitylist.xml"/>
<rs:md capability="resourcelist" at="2026-01-01T00:01:00Z" completed="2026-01-01T00:01:00Z"/>
{urls}</urlset>
"#
        ),
    )?;
    Ok(resources)
}

#[test]
fn resync_sync_baselines_and_audits_a_static_source() -> Result<()> {
    let fx = FixtureServer::start()?;
    let resources = write_static_source(&fx)?;
    let work = tempfile::tempdir()?;
    let dst = work.path().join("dst");
    let dst_s = dst.to_str().context("utf-8 path")?;

    let out = resync_sync(
        ["--baseline", "--delete", &fx.base_url(), dst_s],
        work.path(),
    )?;
    assert!(!out.failed(), "{}", out.combined());
    assert_synced(&out, 2);
    for (path, body) in &resources {
        assert_eq!(&std::fs::read(dst.join(path))?, body, "{path}");
    }
    assert_eq!(fx.hits("/.well-known/resourcesync"), 1);
    assert_eq!(fx.hits("/resourcelist.xml"), 1);

    let out = resync_sync(
        ["--audit", "--hash", "md5", &fx.base_url(), dst_s],
        work.path(),
    )?;
    assert!(
        out.status_is("IN SYNC"),
        "{:?}\n{}",
        out.status(),
        out.combined()
    );

    // an unreachable Source: exit code 0 all the same, but failed()
    let out = resync_sync(
        ["--baseline", "http://127.0.0.1:9/none", dst_s],
        work.path(),
    )?;
    assert!(out.exit.success());
    assert!(out.failed(), "{}", out.combined());
    Ok(())
}

#[tokio::test(flavor = "multi_thread")]
async fn resync_sync_baselines_the_simulator() -> Result<()> {
    let sim = Simulator::start_async(SimOptions {
        resources: 8,
        change_delay: 60.0,
        ..SimOptions::default()
    })
    .await?;
    let work = tempfile::tempdir()?;
    let dst = work.path().join("dst");
    let base = sim.base_url();
    let wd = work.path().to_path_buf();
    let dst_s = dst.to_str().context("utf-8 path")?.to_string();
    let out = tokio::task::spawn_blocking(move || {
        resync_sync(["--baseline", "--delete", &base, &dst_s], &wd)
    })
    .await??;
    assert_synced(&out, 8);
    let n = std::fs::read_dir(dst.join("resources"))?.count();
    ensure!(n == 8, "expected 8 resources, found {n}");
    Ok(())
}

#[test]
fn rsagg_binary_is_found_and_validates_a_fixture() -> Result<()> {
    let bin = rsagg_bin()?;
    let fx = FixtureServer::start()?;
    write_static_source(&fx)?;
    let out = std::process::Command::new(&bin)
        .args(["validate", &fx.url("/resourcelist.xml")])
        .output()?;
    assert!(
        out.status.success(),
        "{} validate: {}\n{}",
        bin.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `resync-sync` reported a successful baseline that created `created` resources.
fn assert_synced(out: &rsagg_e2e::ResyncOutput, created: usize) {
    assert!(
        out.status_is("SYNCED"),
        "{:?}\n{}",
        out.status(),
        out.combined()
    );
    assert!(
        out.status()
            .unwrap_or("")
            .contains(&format!("created={created}")),
        "{:?}",
        out.status()
    );
}

/// The OAI-PMH provider (pyoai's server) answers the verbs a harvester uses, pages a list with
/// `resumptionToken`s, follows edits of its repository file, and plays the quirks on demand.
#[tokio::test(flavor = "multi_thread")]
async fn oai_provider_pages_a_list_and_follows_its_repository() -> Result<()> {
    use rsagg_oai::{Datestamp, Granularity, Request, Response, parse};
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("repo.json");
    let record = |i: u32, day: u32, deleted: bool| {
        serde_json::json!({
            "identifier": format!("oai:test:{i}"),
            "datestamp": format!("2024-01-{day:02}T00:00:00Z"),
            "sets": if i.is_multiple_of(2) { vec!["even"] } else { vec![] },
            "deleted": deleted,
            "dc": {"title": [format!("Record {i} & more")]},
        })
    };
    let write = |records: Vec<serde_json::Value>| -> Result<()> {
        let doc = serde_json::json!({"deletedRecord": "persistent", "records": records});
        std::fs::write(&data, serde_json::to_vec(&doc)?)?;
        Ok(())
    };
    write((1..=5).map(|i| record(i, i, i == 5)).collect())?;
    let opts = rsagg_e2e::OaiOptions {
        batch: 2,
        busy: 1,
        ..Default::default()
    };
    let data2 = data.clone();
    let p =
        tokio::task::spawn_blocking(move || rsagg_e2e::OaiProvider::start(&data2, &opts)).await??;
    let base = url::Url::parse(&p.base_url())?;
    let client = reqwest::Client::new();
    // The first request is answered 503 with Retry-After (the `busy` quirk).
    let r = client.get(Request::Identify.url(&base)).send().await?;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");

    // Walks a list to its end; returns (identifier, deleted) and the pages.
    let list = |from: Option<Datestamp>| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            let mut req = Request::ListRecords {
                identifiers: false,
                prefix: "oai_dc".into(),
                from,
                until: None,
                set: None,
                granularity: Granularity::Second,
            };
            let (mut got, mut pages) = (Vec::new(), 0);
            loop {
                let url = req.url(&base);
                let body = client.get(url.clone()).send().await?.bytes().await?;
                pages += 1;
                match parse(url.as_str(), &body)?.response {
                    Response::Records {
                        records,
                        problems,
                        token,
                    } => {
                        ensure!(problems.is_empty(), "{problems:?}");
                        for r in records {
                            if let Some(m) = &r.metadata {
                                let m = std::str::from_utf8(m)?;
                                ensure!(m.contains("&amp; more"), "{m}");
                            }
                            got.push((r.header.identifier, r.header.deleted));
                        }
                        match token.filter(|t| !t.value.is_empty()) {
                            Some(t) => {
                                req = Request::Resume {
                                    verb: "ListRecords",
                                    token: t.value,
                                }
                            }
                            None => return Ok::<_, anyhow::Error>((got, pages)),
                        }
                    }
                    other if other.is_no_records() => return Ok((got, pages)),
                    other => anyhow::bail!("{other:?}"),
                }
            }
        }
    };
    let (all, pages) = list(None).await?;
    assert_eq!(pages, 3);
    assert_eq!(all.len(), 5);
    assert_eq!(all[4], ("oai:test:5".to_owned(), true));

    // An update and a creation: a harvest from the last datestamp sees them (and, datestamps
    // not being unique, the record of that second again).
    let mut records: Vec<_> = (1..=5).map(|i| record(i, i, i == 5)).collect();
    records[1] = record(2, 20, false);
    records.push(record(6, 21, false));
    write(records)?;
    let (changed, _) = list(Datestamp::parse("2024-01-05T00:00:00Z")).await?;
    let ids: Vec<_> = changed.iter().map(|(i, _)| i.as_str()).collect();
    assert_eq!(ids, ["oai:test:5", "oai:test:2", "oai:test:6"]);
    let (none, _) = list(Datestamp::parse("2030-01-01T00:00:00Z")).await?;
    assert!(none.is_empty());
    Ok(())
}
