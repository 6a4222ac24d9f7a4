//! Discovery (spec section 6.3) through every route, against fixture Sources served by axum
//! on 127.0.0.1:0.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request as AxRequest, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rsagg_fetch::{Access, Error, FetchConfig, Fetcher, Route, discover};
use rsagg_model::Capability;
use url::Url;

const SD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="describedby" href="{base}/info.xml"/>
  <rs:md capability="description"/>
  <url><loc>{base}/set1/capabilitylist.xml</loc><rs:md capability="capabilitylist"/></url>
  <url><loc>{base}/set2/capabilitylist.xml</loc><rs:md capability="capabilitylist"/></url>
</urlset>"#;

const CL1: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/.well-known/resourcesync"/>
  <rs:md capability="capabilitylist"/>
  <url><loc>{base}/set1/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
  <url><loc>{base}/set1/changelist.xml.gz</loc><rs:md capability="changelist"/></url>
  <url><loc>{base}/set1/change/</loc><rs:md capability="change-notification"/><rs:ln rel="hub" href="http://hub.example.org/websub/"/></url>
</urlset>"#;

const CL2: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/.well-known/resourcesync"/>
  <rs:ln rel="hub" href="http://hub2.example.org/"/>
  <rs:md capability="capabilitylist"/>
  <url><loc>{base}/set2/resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
  <url><loc>{base}/set2/resourcedump.xml</loc><rs:md capability="resourcedump"/></url>
</urlset>"#;

const RL1: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/set1/capabilitylist.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
  <url><loc>{base}/res1</loc></url>
  <url><loc>{base}/res2</loc></url>
</urlset>"#;

const CHL1: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/set1/capabilitylist.xml"/>
  <rs:md capability="changelist" from="2013-01-03T00:00:00Z"/>
  <url><loc>{base}/res1</loc><rs:md change="updated" datetime="2013-01-03T11:00:00Z"/></url>
</urlset>"#;

const SDI: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="description"/>
  <sitemap><loc>{base}/sd-part1.xml</loc></sitemap>
  <sitemap><loc>{base}/sd-part2.xml</loc></sitemap>
</sitemapindex>"#;

const SD_PART1: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/sdi.xml"/>
  <rs:md capability="description"/>
  <url><loc>{base}/set1/capabilitylist.xml</loc></url>
</urlset>"#;

const SD_PART2: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/sdi.xml"/>
  <rs:md capability="description"/>
  <url><loc>{base}/set2/capabilitylist.xml</loc></url>
</urlset>"#;

const PLAIN_SITEMAP: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">
  <url><loc>{base}/about.html</loc></url>
</urlset>"#;

const LOOP_A: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/loop-b.xml"/>
  <rs:md capability="resourcelist" at="2013-01-03T09:00:00Z"/>
</urlset>"#;

const LOOP_B: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:ln rel="up" href="{base}/loop-a.xml"/>
  <rs:md capability="changelist" from="2013-01-03T00:00:00Z"/>
</urlset>"#;

/// One served file: content type, body, extra `Link` header.
#[derive(Clone)]
struct File {
    ct: &'static str,
    body: Vec<u8>,
    link: Option<String>,
}

type Site = Arc<HashMap<String, File>>;

async fn handler(State(site): State<Site>, req: AxRequest) -> Response {
    match site.get(req.uri().path()) {
        Some(f) => {
            let mut r = (
                [(header::CONTENT_TYPE, HeaderValue::from_static(f.ct))],
                f.body.clone(),
            )
                .into_response();
            if let Some(l) = &f.link {
                r.headers_mut()
                    .insert(header::LINK, HeaderValue::from_str(l).unwrap());
            }
            r
        }
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Serves `files` (path, content type, text with `{base}` for the server's origin).
async fn site(files: &[(&str, &'static str, &str)], links: &[(&str, &str)]) -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let mut map = HashMap::new();
    for (path, ct, text) in files {
        let body = text.replace("{base}", &base).into_bytes();
        let body = if path.ends_with(".gz") {
            gzip(&body).await
        } else {
            body
        };
        let link = links
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, l)| l.replace("{base}", &base));
        map.insert(path.to_string(), File { ct, body, link });
    }
    let app = Router::new().fallback(handler).with_state(Arc::new(map));
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    base
}

async fn gzip(data: &[u8]) -> Vec<u8> {
    use tokio::io::AsyncWriteExt;
    let mut enc = async_compression::tokio::write::GzipEncoder::new(Vec::new());
    enc.write_all(data).await.unwrap();
    enc.shutdown().await.unwrap();
    enc.into_inner()
}

const XML: &str = "application/xml";

/// The full Source: Source Description at the well-known URI with two Capability Lists.
fn full_source() -> Vec<(&'static str, &'static str, &'static str)> {
    vec![
        ("/.well-known/resourcesync", XML, SD),
        ("/set1/capabilitylist.xml", XML, CL1),
        ("/set2/capabilitylist.xml", XML, CL2),
        ("/set1/resourcelist.xml", XML, RL1),
        ("/set1/changelist.xml.gz", "application/gzip", CHL1),
    ]
}

fn fetcher() -> Fetcher {
    Fetcher::new(FetchConfig {
        retries: 0,
        ..FetchConfig::default()
    })
    .unwrap()
}

fn open() -> Access {
    Access {
        allow_private: true,
        ..Access::default()
    }
}

fn u(s: String) -> Url {
    Url::parse(&s).unwrap()
}

/// Checks the two sets of the full Source.
fn assert_two_sets(d: &rsagg_fetch::Discovery, base: &str) {
    assert_eq!(d.capability_lists.len(), 2, "{d:?}");
    let s1 = &d.capability_lists[0];
    assert_eq!(s1.url, u(format!("{base}/set1/capabilitylist.xml")));
    assert_one_set1(s1, base);
    let s2 = &d.capability_lists[1];
    assert_eq!(s2.url, u(format!("{base}/set2/capabilitylist.xml")));
    assert_eq!(
        s2.get(Capability::ResourceDump),
        Some(&u(format!("{base}/set2/resourcedump.xml")))
    );
    assert_eq!(s2.topic, None);
    assert_eq!(
        s2.hub.as_ref().map(Url::as_str),
        Some("http://hub2.example.org/")
    );
}

fn assert_one_set1(s1: &rsagg_fetch::CapabilitySet, base: &str) {
    assert_eq!(
        s1.get(Capability::ResourceList),
        Some(&u(format!("{base}/set1/resourcelist.xml")))
    );
    assert_eq!(
        s1.get(Capability::ChangeList),
        Some(&u(format!("{base}/set1/changelist.xml.gz")))
    );
    assert_eq!(s1.get(Capability::ChangeDump), None);
    assert_eq!(s1.entries.len(), 3);
    assert_eq!(s1.topic, Some(u(format!("{base}/set1/change/"))));
    assert_eq!(
        s1.hub.as_ref().map(Url::as_str),
        Some("http://hub.example.org/websub/")
    );
}

#[tokio::test]
async fn well_known_from_the_site_root() {
    let base = site(&full_source(), &[]).await;
    let d = discover(&fetcher(), &u(format!("{base}/")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::WellKnown);
    assert_eq!(
        d.source_description,
        Some(u(format!("{base}/.well-known/resourcesync")))
    );
    assert_two_sets(&d, &base);
    assert!(!d.warnings.is_empty(), "the root's 404 is reported");
}

#[tokio::test]
async fn source_description_and_its_index_as_entry() {
    let mut files = full_source();
    files.extend([
        ("/sdi.xml", XML, SDI),
        ("/sd-part1.xml", XML, SD_PART1),
        ("/sd-part2.xml", XML, SD_PART2),
    ]);
    let base = site(&files, &[]).await;
    let f = fetcher();
    let d = discover(&f, &u(format!("{base}/.well-known/resourcesync")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::SourceDescription);
    assert_two_sets(&d, &base);
    assert!(d.warnings.is_empty(), "{:?}", d.warnings);

    let d = discover(&f, &u(format!("{base}/sdi.xml")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::SourceDescription);
    assert_eq!(d.source_description, Some(u(format!("{base}/sdi.xml"))));
    assert_two_sets(&d, &base);
}

#[tokio::test]
async fn capability_list_as_entry() {
    let base = site(&full_source(), &[]).await;
    let d = discover(
        &fetcher(),
        &u(format!("{base}/set1/capabilitylist.xml")),
        &open(),
    )
    .await
    .unwrap();
    assert_eq!(d.route, Route::CapabilityList);
    assert_eq!(d.capability_lists.len(), 1);
    assert_one_set1(&d.capability_lists[0], &base);
    assert_eq!(
        d.source_description,
        Some(u(format!("{base}/.well-known/resourcesync"))),
        "from the Capability List's up link"
    );
}

#[tokio::test]
async fn up_link_from_resource_list_and_gzipped_change_list() {
    let base = site(&full_source(), &[]).await;
    let f = fetcher();
    for entry in ["/set1/resourcelist.xml", "/set1/changelist.xml.gz"] {
        let d = discover(&f, &u(format!("{base}{entry}")), &open())
            .await
            .unwrap();
        assert_eq!(d.route, Route::UpLink, "{entry}");
        assert_eq!(d.capability_lists.len(), 1);
        assert_one_set1(&d.capability_lists[0], &base);
    }
}

#[tokio::test]
async fn link_header_on_any_resource() {
    let mut files = full_source();
    files.push(("/res1", "text/plain", "just a resource"));
    let base = site(
        &files,
        &[(
            "/res1",
            "<{base}/set2/capabilitylist.xml>;  rel=\"resourcesync\", <{base}/x>; rel=describedby",
        )],
    )
    .await;
    let d = discover(&fetcher(), &u(format!("{base}/res1")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::LinkHeader);
    assert_eq!(d.capability_lists.len(), 1);
    assert_eq!(
        d.capability_lists[0].url,
        u(format!("{base}/set2/capabilitylist.xml"))
    );
}

#[tokio::test]
async fn html_link_in_a_page() {
    let mut files = full_source();
    files.push((
        "/dataset1/index.html",
        "text/html; charset=utf-8",
        r#"<!DOCTYPE html><html><head><title>Data</title>
           <link rel="stylesheet" href="/s.css">
           <link rel="resourcesync" href="../set1/capabilitylist.xml"/></head><body>hi</body></html>"#,
    ));
    let base = site(&files, &[]).await;
    let d = discover(
        &fetcher(),
        &u(format!("{base}/dataset1/index.html")),
        &open(),
    )
    .await
    .unwrap();
    assert_eq!(d.route, Route::HtmlLink);
    assert_eq!(d.capability_lists.len(), 1);
    assert_one_set1(&d.capability_lists[0], &base);
}

#[tokio::test]
async fn robots_txt_sitemap_directives() {
    // No well-known Source Description: robots.txt names a plain Sitemap (skipped, with a
    // warning), set1 by its Resource List and its Capability List, set2 by its Capability
    // List.
    let files = vec![
        ("/set1/capabilitylist.xml", XML, CL1),
        ("/set2/capabilitylist.xml", XML, CL2),
        ("/set1/resourcelist.xml", XML, RL1),
        ("/sitemap.xml", XML, PLAIN_SITEMAP),
        (
            "/robots.txt",
            "text/plain",
            "User-agent: *\nDisallow: /cgi-bin/\nSitemap: {base}/sitemap.xml\n\
             Sitemap: {base}/set1/resourcelist.xml\nSitemap: {base}/set1/capabilitylist.xml\n\
             sitemap: {base}/set2/capabilitylist.xml\n",
        ),
    ];
    let base = site(&files, &[]).await;
    let d = discover(&fetcher(), &u(format!("{base}/")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::RobotsTxt);
    assert_two_sets(&d, &base);
    assert!(
        d.warnings
            .iter()
            .any(|w| w.contains("sitemap.xml") && w.contains("up")),
        "{:?}",
        d.warnings
    );
    assert!(
        d.warnings.iter().any(|w| w.contains(".well-known")),
        "{:?}",
        d.warnings
    );
}

#[tokio::test]
async fn nothing_to_discover_and_loops_end() {
    let base = site(
        &[("/loop-a.xml", XML, LOOP_A), ("/loop-b.xml", XML, LOOP_B)],
        &[],
    )
    .await;
    let f = fetcher();
    let err = discover(&f, &u(format!("{base}/")), &open())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::NotDiscovered { .. }), "{msg}");
    assert!(
        msg.contains(".well-known/resourcesync") && msg.contains("robots.txt"),
        "{msg}"
    );
    assert!(msg.contains("6.3"), "{msg}");

    let err = discover(&f, &u(format!("{base}/loop-a.xml")), &open())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("loop"), "{err}");
}

#[tokio::test]
async fn guard_applies_to_discovery() {
    let base = site(&full_source(), &[]).await;
    let err = discover(&fetcher(), &u(format!("{base}/")), &Access::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Refused { .. }), "{err}");
}

/// A real-world fixture (`tests/fixtures/real-world/`), its URIs moved to `{base}`.
fn real_world(name: &str) -> String {
    let p = format!(
        "{}/../../tests/fixtures/real-world/{name}",
        std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")
    );
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .replace("http://upstream.example.org", "{base}")
}

/// A 0.9/1.0-era Source: a ResourceSync 0.9 Description (`resourcesync`) at the well-known
/// URI, a Capability List offering its changes as a `changelist-archive` with `rel="Up"`,
/// a Resource List with `rel="UP"`. Found like a 1.1 Source, with warnings naming the
/// specifications the legacy values come from.
#[tokio::test]
async fn a_legacy_source_is_discovered_as_a_1_1_one() {
    let (sd, cl, rl, archive) = (
        real_world("sourcedescription-0.9.xml"),
        real_world("capabilitylist.xml"),
        real_world("resourcelist.xml"),
        real_world("changelist-archive.xml"),
    );
    let files = [
        ("/.well-known/resourcesync", XML, sd.as_str()),
        ("/capabilitylist.xml", XML, cl.as_str()),
        ("/resourcelist.xml", XML, rl.as_str()),
        ("/changelist-archive.xml", XML, archive.as_str()),
    ];
    let base = site(&files, &[]).await;
    let d = discover(&fetcher(), &u(format!("{base}/")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::WellKnown);
    assert_eq!(d.capability_lists.len(), 1, "{d:?}");
    let set = &d.capability_lists[0];
    assert_eq!(
        set.get(Capability::ChangeList),
        Some(&u(format!("{base}/changelist-archive.xml")))
    );
    assert_eq!(
        set.get(Capability::ResourceList),
        Some(&u(format!("{base}/resourcelist.xml")))
    );
    let warned = |needle: &str| d.warnings.iter().any(|w| w.contains(needle));
    assert!(warned("ResourceSync 0.9"), "{:?}", d.warnings);
    assert!(warned("ResourceSync Archives"), "{:?}", d.warnings);

    // From the Source Description itself: the same warnings.
    let d = discover(
        &fetcher(),
        &u(format!("{base}/.well-known/resourcesync")),
        &open(),
    )
    .await
    .unwrap();
    assert_eq!(d.route, Route::SourceDescription);
    let warned = |needle: &str| d.warnings.iter().any(|w| w.contains(needle));
    assert!(warned("ResourceSync 0.9"), "{:?}", d.warnings);
    assert!(warned("ResourceSync Archives"), "{:?}", d.warnings);

    // From the Resource List: its `rel="UP"` leads to the Capability List, whose `rel="Up"`
    // names the Source Description.
    let d = discover(&fetcher(), &u(format!("{base}/resourcelist.xml")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::UpLink);
    assert_eq!(d.capability_lists.len(), 1);
    assert_eq!(
        d.source_description,
        Some(u(format!("{base}/.well-known/resourcesync")))
    );
}

#[tokio::test]
async fn an_unreachable_host_is_named_as_such_not_as_no_capability_list() {
    // A port nobody listens on: bound, then closed.
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let entry = Url::parse(&format!("http://{closed}/.well-known/resourcesync")).unwrap();
    let e = discover(&fetcher(), &entry, &open()).await.unwrap_err();
    let msg = e.to_string();
    assert_eq!(
        e.cause(),
        Some(rsagg_fetch::Cause::ConnectionRefused),
        "{msg}"
    );
    assert!(msg.contains("connection refused"), "{msg}");
    assert!(!msg.contains("no ResourceSync Capability List"), "{msg}");
    // A name that does not resolve (RFC 6761 6.4): named, and not retried.
    let entry = Url::parse("http://nonexistent.invalid/.well-known/resourcesync").unwrap();
    let retrying = Fetcher::new(FetchConfig {
        retries: 3,
        ..FetchConfig::default()
    })
    .unwrap();
    let e = discover(&retrying, &entry, &open()).await.unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.cause(), Some(rsagg_fetch::Cause::Dns), "{msg}");
    assert!(
        matches!(e, Error::Http { attempts: 1, .. }),
        "a DNS failure is not retried: {msg}"
    );
    assert!(msg.contains("DNS lookup failed"), "{msg}");
}

const BAD_VERB: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" xsi:schemaLocation="http://www.openarchives.org/OAI/2.0/ http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd">
  <responseDate>2026-12-06T12:00:00Z</responseDate>
  <request>{base}/oai</request>
  <error code="badVerb">Illegal OAI verb</error>
</OAI-PMH>"#;

/// An OAI-PMH base URL given as a ResourceSync upstream (no `kind = "oai-pmh"`): discovery
/// goes on to the host's well-known URI as before, but says what the entry is.
#[tokio::test]
async fn an_oai_pmh_base_url_is_named_as_such() {
    let mut files = full_source();
    files.push(("/oai", "text/xml", BAD_VERB));
    let base = site(&files, &[]).await;
    let d = discover(&fetcher(), &u(format!("{base}/oai")), &open())
        .await
        .unwrap();
    assert_eq!(d.route, Route::WellKnown);
    assert!(
        d.warnings[0].contains("is an OAI-PMH base URL")
            && d.warnings[0].contains("kind = \"oai-pmh\""),
        "{:?}",
        d.warnings
    );
    // Without a Source beside it: discovery fails, and the failure says the same first.
    let base = site(&[("/oai", "text/xml", BAD_VERB)], &[]).await;
    let e = discover(&fetcher(), &u(format!("{base}/oai")), &open())
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains("kind = \"oai-pmh\""), "{text}");
    // A ResourceSync entry gets no such warning, and nothing more is asked.
    let base = site(&full_source(), &[]).await;
    let d = discover(&fetcher(), &u(format!("{base}/")), &open())
        .await
        .unwrap();
    assert!(
        d.warnings.iter().all(|w| !w.contains("OAI-PMH")),
        "{:?}",
        d.warnings
    );
}

/// A base URL whose bare GET is an HTML page (or a 404) but whose `?verb=Identify` answers
/// OAI-PMH: the Identify probe finds it.
#[tokio::test]
async fn an_oai_pmh_base_url_is_found_by_identify() {
    use axum::extract::RawQuery;
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", l.local_addr().unwrap());
    let body = BAD_VERB.replace("{base}", &base).replace(
        r#"<error code="badVerb">Illegal OAI verb</error>"#,
        "<Identify><repositoryName>R</repositoryName></Identify>",
    );
    let app = Router::new().route(
        "/request",
        axum::routing::get(move |RawQuery(q): RawQuery| async move {
            match q.as_deref() {
                Some("verb=Identify") => {
                    ([(header::CONTENT_TYPE, "text/xml")], body.clone()).into_response()
                }
                _ => (
                    [(header::CONTENT_TYPE, "text/html")],
                    "<html><body>An OAI-PMH endpoint: ask with a verb</body></html>",
                )
                    .into_response(),
            }
        }),
    );
    tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
    let e = discover(&fetcher(), &u(format!("{base}/request")), &open())
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("answers OAI-PMH Identify") && text.contains("kind = \"oai-pmh\""),
        "{text}"
    );
}
