//! The router against real published content: a real state database on a real store
//! (a `file://` directory), records committed with blobs written first, the Resource List
//! published in several parts with an index, then HTTP requests through the axum router.

mod common;

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::Router;
use axum::http::{Method, StatusCode, header};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_model::{Capability, Change, Mode, Root, UrlEntry, W3cDateTime};
use rsagg_publish::links::LinkPolicy;
use rsagg_publish::resourcelist::publish_with;
use rsagg_server::{Collection, router};
use rsagg_store::{Applied, BlobInfo, Blobs, Commit, ResourceRecord, ResourceStatus, State};

use common::Answer;

const BASE: &str = "https://agg.example.org/maps/";
const SET: &str = "http://up.example.org/capabilitylist.xml";
/// The default `publish.grace`: parts a new index no longer names stay fetchable.
const GRACE: Duration = Duration::from_secs(3600);

/// The upstream URIs of the fixture; the last has an empty path, which rsagg's URI for the
/// copy spells with a `/`.
fn uris() -> Vec<String> {
    let mut u: Vec<String> = (0..7)
        .map(|i| format!("http://up.example.org/res/{i}.txt"))
        .collect();
    u.push("http://bare.example.org".into());
    u
}

fn body_of(uri: &str) -> Vec<u8> {
    format!("the bytes of {uri}\n").into_bytes()
}

struct Fixture {
    _dir: tempfile::TempDir,
    objects: Arc<dyn ObjectStore>,
    state: State,
    /// Per URI: the stored blob and rsagg's lastmod for it.
    copies: Vec<(String, BlobInfo, W3cDateTime)>,
}

fn record(uri: &str, copy: &BlobInfo, status: ResourceStatus) -> ResourceRecord {
    ResourceRecord {
        upstream: "up".into(),
        uri: uri.into(),
        status,
        copy: Some(copy.clone()),
        mime_type: Some("text/plain".into()),
        set: SET.into(),
        lastmod: W3cDateTime::now(),
        seq: 0,
        upstream_meta: Default::default(),
    }
}

async fn commit(state: &State, changes: Vec<(Change, ResourceRecord)>) -> Vec<W3cDateTime> {
    state
        .commit(Commit {
            upstream: "up".into(),
            set: SET.into(),
            changes: changes
                .into_iter()
                .map(|(change, record)| Applied { change, record })
                .collect(),
            ..Commit::default()
        })
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.at)
        .collect()
}

async fn publish(f: &Fixture) {
    // Two entries a part: several parts and an index.
    publish_with(&f.state, &f.objects, BASE, &LinkPolicy::default(), 2, GRACE)
        .await
        .unwrap();
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = url::Url::from_directory_path(dir.path())
        .unwrap()
        .to_string();
    let objects = rsagg_store::open_object_store(&url).unwrap().objects;
    let state = State::open(objects.clone(), &url).await.unwrap();
    let blobs = Blobs::new(objects.clone());
    let mut infos = Vec::new();
    let mut changes = Vec::new();
    for uri in uris() {
        let body = futures::stream::iter([Ok::<_, std::io::Error>(Bytes::from(body_of(&uri)))]);
        let info = blobs.put_stream(&uri, body, false).await.unwrap();
        changes.push((
            Change::Created,
            record(&uri, &info, ResourceStatus::Present),
        ));
        infos.push((uri, info));
    }
    let ats = commit(&state, changes).await;
    let copies = infos
        .into_iter()
        .zip(ats)
        .map(|((uri, info), at)| (uri, info, at))
        .collect();
    let f = Fixture {
        _dir: dir,
        objects,
        state,
        copies,
    };
    publish(&f).await;
    f
}

fn app(f: &Fixture) -> Router {
    router(vec![
        Collection::new("maps", BASE, f.objects.clone()).unwrap(),
    ])
}

async fn request(
    app: &Router,
    method: Method,
    path: &str,
    headers: &[(header::HeaderName, &str)],
) -> Answer<Vec<u8>> {
    common::request_with(app, method, path, headers).await
}

async fn get(app: &Router, path: &str) -> Answer<Vec<u8>> {
    request(app, Method::GET, path, &[]).await
}

/// The request path of a URI under the base URL's host.
fn path_of(loc: &str) -> &str {
    loc.strip_prefix("https://agg.example.org").unwrap()
}

/// Parses `xml` strictly: its root, capability and entries; no errors allowed.
fn parse_strict(xml: &[u8]) -> (Root, Option<Capability>, Vec<UrlEntry>) {
    let opts = rsagg_sitemap::ReadOptions::new(Mode::Strict, "served");
    let d = rsagg_sitemap::read_document(xml, opts).unwrap();
    let errors: Vec<_> = d.errors().collect();
    assert!(
        errors.is_empty(),
        "{errors:#?}\n{}",
        String::from_utf8_lossy(xml)
    );
    let capability = d.header.capability().cloned();
    (d.header.root, capability, d.entries)
}

fn own_path(uri: &str) -> String {
    let own = rsagg_layout::uris::own_uri(BASE, "up", uri).unwrap();
    path_of(&own).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_documents_are_served_with_validators() {
    let f = fixture().await;
    let app = app(&f);

    let top = get(&app, "/maps/resourcelist.xml").await;
    assert_eq!(top.status, StatusCode::OK);
    assert_eq!(top.header(header::CONTENT_TYPE), "application/xml");
    let stored = f
        .objects
        .get(&Path::from("resourcelist.xml"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(top.body, stored.to_vec(), "the published bytes, as stored");
    assert_eq!(top.header(header::CONTENT_LENGTH), stored.len().to_string());
    let etag = top.header(header::ETAG).to_owned();
    assert!(etag.starts_with('"') && etag.ends_with('"'), "{etag}");
    let last_modified = top.header(header::LAST_MODIFIED).to_owned();
    httpdate::parse_http_date(&last_modified).unwrap();

    // An index over several parts, each served under the base and strictly valid.
    let (root, _, parts) = parse_strict(&top.body);
    assert_eq!(root, Root::Sitemapindex);
    assert!(parts.len() >= 2, "{} parts", parts.len());
    let mut listed = 0;
    for p in &parts {
        assert!(
            p.loc.starts_with(&format!("{BASE}resourcelist/part-")),
            "{}",
            p.loc
        );
        let part = get(&app, path_of(&p.loc)).await;
        assert_eq!(part.status, StatusCode::OK, "{}", p.loc);
        assert_eq!(part.header(header::CONTENT_TYPE), "application/xml");
        let (root, capability, entries) = parse_strict(&part.body);
        assert_eq!(
            (root, capability),
            (Root::Urlset, Some(Capability::ResourceList))
        );
        listed += entries.len();
    }
    assert_eq!(listed, uris().len());

    // HEAD: the same headers, no body.
    let head = request(&app, Method::HEAD, "/maps/resourcelist.xml", &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(
        head.header(header::CONTENT_LENGTH),
        stored.len().to_string()
    );
    assert_eq!(head.header(header::ETAG), etag);

    // Conditional GETs.
    let inm = request(
        &app,
        Method::GET,
        "/maps/resourcelist.xml",
        &[(header::IF_NONE_MATCH, &etag)],
    )
    .await;
    assert_eq!(inm.status, StatusCode::NOT_MODIFIED);
    assert!(inm.body.is_empty());
    assert_eq!(inm.header(header::ETAG), etag);
    let other = request(
        &app,
        Method::GET,
        "/maps/resourcelist.xml",
        &[(header::IF_NONE_MATCH, "\"something-else\"")],
    )
    .await;
    assert_eq!(other.status, StatusCode::OK);
    assert_eq!(other.body, stored.to_vec());
    let ims = request(
        &app,
        Method::GET,
        "/maps/resourcelist.xml",
        &[(header::IF_MODIFIED_SINCE, &last_modified)],
    )
    .await;
    assert_eq!(ims.status, StatusCode::NOT_MODIFIED);
    let old = request(
        &app,
        Method::GET,
        "/maps/resourcelist.xml",
        &[(header::IF_MODIFIED_SINCE, "Thu, 01 Jan 2015 00:00:00 GMT")],
    )
    .await;
    assert_eq!(old.status, StatusCode::OK);

    // A rewrite of the document changes its validators.
    f.objects
        .put(
            &Path::from("resourcelist.xml"),
            b"<changed/>".to_vec().into(),
        )
        .await
        .unwrap();
    let again = request(
        &app,
        Method::GET,
        "/maps/resourcelist.xml",
        &[(header::IF_NONE_MATCH, &etag)],
    )
    .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body, b"<changed/>");
    f.state.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_allowlisted_paths_are_served() {
    let f = fixture().await;
    let app = app(&f);

    // Objects that exist in the store but are nobody's business over HTTP.
    let state_object = f
        .objects
        .list(Some(&Path::from("state")))
        .try_next()
        .await
        .unwrap()
        .expect("the state database wrote objects")
        .location;
    let blob = Blobs::path(&f.copies[0].1.sha256);
    f.objects.head(&blob).await.unwrap();
    f.objects
        .head(&Path::from("published/resourcelist.json"))
        .await
        .unwrap();
    for path in [
        format!("/maps/{state_object}"),
        format!("/maps/{blob}"),
        "/maps/published/resourcelist.json".to_owned(),
        "/maps/resourcelist/../published/resourcelist.json".to_owned(),
        "/maps/resourcelist/%2E%2E/published/resourcelist.json".to_owned(),
        "/maps/resourcelist/..%2Fpublished%2Fresourcelist.json".to_owned(),
        "/maps/nothing.xml".to_owned(),
        "/maps//".to_owned(),
        "/mapsx".to_owned(),
        // Allowlisted but never published.
        "/maps/changelist.xml".to_owned(),
        "/maps/resourcelist/part-99999-g1.xml".to_owned(),
        // Another collection's path, and rsagg's own paths outside any base.
        "/texts/resourcelist.xml".to_owned(),
        "/resourcelist.xml".to_owned(),
        "/state/".to_owned(),
    ] {
        let a = get(&app, &path).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}");
        assert!(
            !a.body.starts_with(b"<?xml") && !a.body.starts_with(b"{"),
            "{path}: {}",
            String::from_utf8_lossy(&a.body)
        );
    }
    let bad = get(&app, "/maps/resourcelist/%zz.xml").await;
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
    assert!(!bad.body.is_empty());

    for method in [Method::POST, Method::PUT, Method::DELETE] {
        let a = request(&app, method.clone(), "/maps/resourcelist.xml", &[]).await;
        assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{method}");
        assert_eq!(a.header(header::ALLOW), "GET, HEAD");
    }
    // The store is unchanged by them.
    assert!(
        f.objects
            .head(&Path::from("resourcelist.xml"))
            .await
            .is_ok()
    );
    f.state.close().await.unwrap();
}

/// The collection's base URL, with or without its final `/`, is a page for whoever was given
/// only the collection's address: links to its Capability List, the Source Description and
/// its status page, and `Link: <{base}capabilitylist.xml>; rel="resourcesync"` (spec 6.3.3).
/// `200` once the collection is published, `404` with the same pointers before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_collections_base_url_points_to_its_capability_list() {
    let f = fixture().await;
    // Nothing published in these two stores; one collection sits at the server's root, so
    // `/maps` (no `/`) must still be the page of `maps`, not a name under the root.
    let texts: Arc<dyn ObjectStore> = rsagg_store::open_object_store("memory://").unwrap().objects;
    let root: Arc<dyn ObjectStore> = rsagg_store::open_object_store("memory://").unwrap().objects;
    let app = router(vec![
        Collection::new("root", "https://agg.example.org/", root.clone()).unwrap(),
        Collection::new("maps", BASE, f.objects.clone()).unwrap(),
        Collection::new("texts", "https://agg.example.org/texts/", texts).unwrap(),
    ]);
    let html = "text/html; charset=utf-8";
    let pointers = |name: &str, base: &str| {
        [
            format!("{base}capabilitylist.xml"),
            "https://agg.example.org/.well-known/resourcesync".to_owned(),
            format!("https://agg.example.org/status/{name}"),
        ]
    };
    let check = |a: &Answer<Vec<u8>>, path: &str, name: &str, base: &str| {
        assert_eq!(a.header(header::CONTENT_TYPE), html, "{path}");
        assert_eq!(
            a.header(header::LINK),
            format!("<{base}capabilitylist.xml>; rel=\"resourcesync\""),
            "{path}"
        );
        assert_eq!(a.header(header::CACHE_CONTROL), "no-store", "{path}");
        let body = std::str::from_utf8(&a.body).unwrap();
        assert!(body.starts_with("<!DOCTYPE html>"), "{path}: {body}");
        assert!(
            body.contains(&format!(
                "<link rel=\"resourcesync\" href=\"{base}capabilitylist.xml\">"
            )),
            "{path}: {body}"
        );
        for href in pointers(name, base) {
            assert!(
                body.contains(&format!("<a href=\"{href}\">")),
                "{path}: no link to {href} in {body}"
            );
        }
    };

    let unpublished = |a: &Answer<Vec<u8>>| {
        std::str::from_utf8(&a.body)
            .unwrap()
            .contains("not published yet")
    };

    // The fixture's store has a Resource List but no Capability List, the document a
    // publish writes last: not published yet.
    let a = get(&app, "/maps/").await;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    check(&a, "/maps/", "maps", BASE);
    assert!(unpublished(&a));
    // Once it is there, the same page answers 200.
    f.objects
        .put(
            &Path::from("capabilitylist.xml"),
            b"<urlset/>".to_vec().into(),
        )
        .await
        .unwrap();
    for path in ["/maps/", "/maps"] {
        let a = get(&app, path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        check(&a, path, "maps", BASE);
        assert!(!unpublished(&a), "{path}");
        // HEAD: the same head, no body.
        let h = request(&app, Method::HEAD, path, &[]).await;
        assert_eq!(h.status, StatusCode::OK, "{path}");
        assert!(h.body.is_empty(), "{path}");
        assert_eq!(h.header(header::LINK), a.header(header::LINK));
        assert_eq!(
            h.header(header::CONTENT_LENGTH),
            a.body.len().to_string(),
            "{path}"
        );
    }
    // What the page points to answers.
    for href in pointers("maps", BASE) {
        let a = get(&app, path_of(&href)).await;
        assert_eq!(a.status, StatusCode::OK, "{href}");
    }

    // Not published yet: 404, with the same pointers and a word on why.
    for (path, name, base) in [
        ("/texts/", "texts", "https://agg.example.org/texts/"),
        ("/texts", "texts", "https://agg.example.org/texts/"),
        ("/", "root", "https://agg.example.org/"),
    ] {
        let a = get(&app, path).await;
        assert_eq!(a.status, StatusCode::NOT_FOUND, "{path}");
        check(&a, path, name, base);
        assert!(unpublished(&a), "{path}");
        let h = request(&app, Method::HEAD, path, &[]).await;
        assert_eq!(h.status, StatusCode::NOT_FOUND, "{path}");
        assert!(h.body.is_empty(), "{path}");
    }
    // Other methods are refused as everywhere.
    let a = request(&app, Method::POST, "/maps/", &[]).await;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    f.state.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_are_served_as_the_published_list_describes_them() {
    let f = fixture().await;
    let app = app(&f);
    let link = format!("<{BASE}capabilitylist.xml>; rel=\"resourcesync\"");

    for (uri, info, at) in &f.copies {
        let path = own_path(uri);
        let a = get(&app, &path).await;
        assert_eq!(a.status, StatusCode::OK, "{path}");
        assert_eq!(a.body, body_of(uri), "{path}");
        assert_eq!(a.header(header::CONTENT_TYPE), "text/plain");
        assert_eq!(a.header(header::CONTENT_LENGTH), info.length.to_string());
        assert_eq!(a.header(header::ETAG), format!("\"{}\"", info.sha256));
        assert_eq!(a.header(header::LINK), link);
        let (secs, _) = at.instant();
        let lastmod = UNIX_EPOCH + Duration::from_secs(secs as u64);
        assert_eq!(
            a.header(header::LAST_MODIFIED),
            httpdate::fmt_http_date(lastmod),
            "{path}"
        );
    }

    let (uri, info, _) = &f.copies[0];
    let path = own_path(uri);
    let head = request(&app, Method::HEAD, &path, &[]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert!(head.body.is_empty());
    assert_eq!(head.header(header::CONTENT_LENGTH), info.length.to_string());
    assert_eq!(head.header(header::ETAG), format!("\"{}\"", info.sha256));
    assert_eq!(head.header(header::LINK), link);

    let etag = format!("\"{}\"", info.sha256);
    let inm = request(&app, Method::GET, &path, &[(header::IF_NONE_MATCH, &etag)]).await;
    assert_eq!(inm.status, StatusCode::NOT_MODIFIED);
    assert!(inm.body.is_empty());
    assert_eq!(inm.header(header::ETAG), etag);
    assert_eq!(inm.header(header::LINK), link);
    let lm = get(&app, &path)
        .await
        .header(header::LAST_MODIFIED)
        .to_owned();
    let ims = request(
        &app,
        Method::GET,
        &path,
        &[(header::IF_MODIFIED_SINCE, &lm)],
    )
    .await;
    assert_eq!(ims.status, StatusCode::NOT_MODIFIED);
    let older = request(
        &app,
        Method::GET,
        &path,
        &[(header::IF_MODIFIED_SINCE, "Thu, 01 Jan 2015 00:00:00 GMT")],
    )
    .await;
    assert_eq!(older.status, StatusCode::OK);
    assert_eq!(older.body, body_of(uri));

    // Not listed, or not a copy path at all.
    for missing in [
        own_path("http://up.example.org/res/never.txt"),
        own_path("https://up.example.org/res/0.txt"),
        "/maps/r/other/http/up.example.org/res/0.txt".to_owned(),
        "/maps/r/up".to_owned(),
        "/maps/r/up/http/up.example.org/res/%41.txt".to_owned(),
    ] {
        assert_eq!(
            get(&app, &missing).await.status,
            StatusCode::NOT_FOUND,
            "{missing}"
        );
    }
    assert_eq!(
        get(&app, "/maps/r/up/http/up.example.org/res/%g0.txt")
            .await
            .status,
        StatusCode::BAD_REQUEST
    );
    f.state.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_resource_is_gone_once_published() {
    let f = fixture().await;
    let app = app(&f);
    let (uri, info, _) = &f.copies[1];
    let path = own_path(uri);
    assert_eq!(get(&app, &path).await.status, StatusCode::OK);

    commit(
        &f.state,
        vec![(Change::Deleted, record(uri, info, ResourceStatus::Deleted))],
    )
    .await;
    publish(&f).await;
    // At once: the server checks the metadata's version on every lookup.

    let gone = get(&app, &path).await;
    assert_eq!(gone.status, StatusCode::NOT_FOUND);
    assert!(!gone.body.windows(9).any(|w| w == b"the bytes"));
    // The bytes are still in the store (history, grace period): 404 comes from the list.
    assert!(
        Blobs::new(f.objects.clone())
            .exists(&info.sha256)
            .await
            .unwrap()
    );
    // The others are still there.
    let (uri0, _, _) = &f.copies[0];
    let still = get(&app, &own_path(uri0)).await;
    assert_eq!(still.status, StatusCode::OK);
    assert_eq!(still.body, body_of(uri0));
    f.state.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_well_known_uri_and_robots_txt_name_every_collection() {
    let f = fixture().await;
    let texts: Arc<dyn ObjectStore> = rsagg_store::open_object_store("memory://").unwrap().objects;
    // A collection at the root of the server: the more specific base path still wins.
    let root: Arc<dyn ObjectStore> = rsagg_store::open_object_store("memory://").unwrap().objects;
    root.put(
        &Path::from("resourcelist.xml"),
        b"root list".to_vec().into(),
    )
    .await
    .unwrap();
    let app = router(vec![
        Collection::new("root", "https://agg.example.org/", root).unwrap(),
        Collection::new("maps", BASE, f.objects.clone()).unwrap(),
        Collection::new("texts", "https://agg.example.org/texts/", texts).unwrap(),
    ]);

    let sd = get(&app, "/.well-known/resourcesync").await;
    assert_eq!(sd.status, StatusCode::OK);
    assert_eq!(sd.header(header::CONTENT_TYPE), "application/xml");
    let (root_el, capability, entries) = parse_strict(&sd.body);
    assert_eq!(
        (root_el, capability),
        (Root::Urlset, Some(Capability::Description))
    );
    let locs: Vec<&str> = entries.iter().map(|e| e.loc.as_str()).collect();
    assert_eq!(
        locs,
        [
            "https://agg.example.org/capabilitylist.xml",
            "https://agg.example.org/maps/capabilitylist.xml",
            "https://agg.example.org/texts/capabilitylist.xml",
        ]
    );
    assert!(entries.iter().all(|e| {
        e.md.as_ref().and_then(|m| m.capability.as_ref()) == Some(&Capability::CapabilityList)
    }));
    let etag = sd.header(header::ETAG).to_owned();
    let again = request(
        &app,
        Method::GET,
        "/.well-known/resourcesync",
        &[(header::IF_NONE_MATCH, &etag)],
    )
    .await;
    assert_eq!(again.status, StatusCode::NOT_MODIFIED);
    let head = request(&app, Method::HEAD, "/.well-known/resourcesync", &[]).await;
    assert!(head.body.is_empty());
    assert_eq!(
        head.header(header::CONTENT_LENGTH),
        sd.body.len().to_string()
    );

    let robots = get(&app, "/robots.txt").await;
    assert_eq!(robots.status, StatusCode::OK);
    assert!(
        robots
            .header(header::CONTENT_TYPE)
            .starts_with("text/plain")
    );
    let text = String::from_utf8(robots.body).unwrap();
    let sitemaps: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("Sitemap: "))
        .collect();
    assert_eq!(
        sitemaps,
        [
            "https://agg.example.org/resourcelist.xml",
            "https://agg.example.org/maps/resourcelist.xml",
            "https://agg.example.org/texts/resourcelist.xml",
        ],
        "{text}"
    );

    // Each path goes to its own collection.
    assert_eq!(get(&app, "/resourcelist.xml").await.body, b"root list");
    let maps = get(&app, "/maps/resourcelist.xml").await;
    assert_eq!(maps.status, StatusCode::OK);
    assert!(maps.body.starts_with(b"<?xml"));
    assert_eq!(
        get(&app, "/texts/resourcelist.xml").await.status,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        get(&app, &own_path(&f.copies[0].0)).await.status,
        StatusCode::OK
    );
    assert_eq!(
        get(&app, "/texts/r/up/http/up.example.org/res/0.txt")
            .await
            .status,
        StatusCode::NOT_FOUND,
        "nothing published there"
    );
    f.state.close().await.unwrap();
}

/// `n` bytes that differ from offset to offset (a range read at the wrong place shows).
fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_ranges_are_answered_from_ranged_reads() {
    let f = fixture().await;
    let app = app(&f);
    let package = pattern(10_000);
    f.objects
        .put(
            &Path::from("resourcedump/g1/part-1.zip"),
            package.clone().into(),
        )
        .await
        .unwrap();
    let path = "/maps/resourcedump/g1/part-1.zip";
    let full = get(&app, path).await;
    assert_eq!(full.status, StatusCode::OK);
    assert_eq!(full.header(header::ACCEPT_RANGES), "bytes");
    let etag = full.header(header::ETAG).to_owned();
    let range = |r: &'static str, extra: Vec<(header::HeaderName, String)>| {
        let app = app.clone();
        async move {
            let mut h: Vec<(header::HeaderName, String)> = vec![(header::RANGE, r.to_owned())];
            h.extend(extra);
            let h: Vec<(header::HeaderName, &str)> =
                h.iter().map(|(k, v)| (k.clone(), v.as_str())).collect();
            request(&app, Method::GET, path, &h).await
        }
    };

    for (r, from, to) in [
        ("bytes=0-99", 0, 100),
        ("bytes=9990-", 9990, 10_000),
        ("bytes=-5", 9995, 10_000),
        ("bytes=5000-5000", 5000, 5001),
        ("bytes=9000-20000", 9000, 10_000),
    ] {
        let a = range(r, vec![]).await;
        assert_eq!(a.status, StatusCode::PARTIAL_CONTENT, "{r}");
        assert_eq!(a.body, package[from..to], "{r}");
        assert_eq!(
            a.header(header::CONTENT_RANGE),
            format!("bytes {from}-{}/10000", to - 1),
            "{r}"
        );
        assert_eq!(a.header(header::CONTENT_LENGTH), (to - from).to_string());
        assert_eq!(a.header(header::ETAG), etag, "the validators of the whole");
        assert_eq!(a.header(header::CONTENT_TYPE), "application/zip");
    }

    // Outside the object: 416 with the size.
    let past = range("bytes=10000-", vec![]).await;
    assert_eq!(past.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(past.header(header::CONTENT_RANGE), "bytes */10000");

    // Several ranges, or a malformed one: the whole object.
    for r in ["bytes=0-1,5-6", "bytes=x-y", "lines=1-2"] {
        let a = range(r, vec![]).await;
        assert_eq!(a.status, StatusCode::OK, "{r}");
        assert_eq!(a.body, package, "{r}");
    }

    // If-Range: the current strong tag or the exact date gives the range, anything else all.
    let lm = full.header(header::LAST_MODIFIED).to_owned();
    for (if_range, status) in [
        (etag.clone(), StatusCode::PARTIAL_CONTENT),
        (lm.clone(), StatusCode::PARTIAL_CONTENT),
        ("\"other\"".to_owned(), StatusCode::OK),
        (format!("W/{etag}"), StatusCode::OK),
        ("Thu, 01 Jan 2015 00:00:00 GMT".to_owned(), StatusCode::OK),
    ] {
        let a = range("bytes=0-9", vec![(header::IF_RANGE, if_range.clone())]).await;
        assert_eq!(a.status, status, "If-Range {if_range}");
        let want = if status == StatusCode::OK {
            &package[..]
        } else {
            &package[..10]
        };
        assert_eq!(a.body, want, "If-Range {if_range}");
    }

    // Conditions first: a client holding the current bytes gets 304 whatever it asks.
    let held = range("bytes=0-9", vec![(header::IF_NONE_MATCH, etag.clone())]).await;
    assert_eq!(held.status, StatusCode::NOT_MODIFIED);
    assert!(held.body.is_empty());
    // HEAD ignores Range.
    let head = request(&app, Method::HEAD, path, &[(header::RANGE, "bytes=0-9")]).await;
    assert_eq!(head.status, StatusCode::OK);
    assert_eq!(head.header(header::CONTENT_LENGTH), "10000");
    assert!(head.body.is_empty());

    // An XML document asked for a range and compression: the range, not compressed.
    let list = get(&app, "/maps/resourcelist.xml").await.body;
    let a = request(
        &app,
        Method::GET,
        "/maps/resourcelist.xml",
        &[
            (header::RANGE, "bytes=10-19"),
            (header::ACCEPT_ENCODING, "gzip, br"),
        ],
    )
    .await;
    assert_eq!(a.status, StatusCode::PARTIAL_CONTENT);
    assert!(!a.headers.contains_key(header::CONTENT_ENCODING));
    assert_eq!(a.body, list[10..20]);

    // Copies too, with their own validators.
    let (uri, info, _) = &f.copies[0];
    let copy = own_path(uri);
    let a = request(&app, Method::GET, &copy, &[(header::RANGE, "bytes=4-8")]).await;
    assert_eq!(a.status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(a.body, body_of(uri)[4..9]);
    assert_eq!(
        a.header(header::CONTENT_RANGE),
        format!("bytes 4-8/{}", info.length)
    );
    assert_eq!(a.header(header::ETAG), format!("\"{}\"", info.sha256));
    assert_eq!(a.header(header::CONTENT_TYPE), "text/plain");
    let a = request(&app, Method::GET, &copy, &[(header::RANGE, "bytes=999-")]).await;
    assert_eq!(a.status, StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(
        a.header(header::CONTENT_RANGE),
        format!("bytes */{}", info.length)
    );
    f.state.close().await.unwrap();
}

/// `body` inflated from `encoding` (`gzip` or `br`).
async fn decode(encoding: &str, body: &[u8]) -> Vec<u8> {
    use async_compression::tokio::bufread::{BrotliDecoder, GzipDecoder};
    use tokio::io::AsyncReadExt;
    let mut out = Vec::new();
    match encoding {
        "gzip" => GzipDecoder::new(body).read_to_end(&mut out).await.unwrap(),
        "br" => BrotliDecoder::new(body)
            .read_to_end(&mut out)
            .await
            .unwrap(),
        other => panic!("unexpected encoding {other}"),
    };
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_documents_are_compressed_when_asked() {
    let f = fixture().await;
    let app = app(&f);
    // A large part, as the publisher writes them (XML repeats itself: it compresses well).
    let mut xml = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset>".to_vec();
    for i in 0..500 {
        xml.extend_from_slice(format!("<url><loc>http://e.org/{i}</loc></url>\n").as_bytes());
    }
    xml.extend_from_slice(b"</urlset>\n");
    let path = "/maps/resourcelist/part-big.xml";
    f.objects
        .put(&Path::from("resourcelist/part-big.xml"), xml.clone().into())
        .await
        .unwrap();
    let plain = get(&app, path).await;
    assert_eq!(plain.body, xml);
    assert!(!plain.headers.contains_key(header::CONTENT_ENCODING));
    let etag = plain.header(header::ETAG).to_owned();
    assert!(!etag.starts_with("W/"));

    for (accept, encoding) in [
        ("gzip", "gzip"),
        ("br", "br"),
        ("gzip;q=0.5, br", "br"),
        ("br;q=0.1, gzip", "gzip"),
    ] {
        let a = request(
            &app,
            Method::GET,
            path,
            &[(header::ACCEPT_ENCODING, accept)],
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{accept}");
        assert_eq!(a.header(header::CONTENT_ENCODING), encoding, "{accept}");
        assert!(
            a.header(header::VARY)
                .to_ascii_lowercase()
                .contains("accept-encoding")
        );
        assert!(!a.headers.contains_key(header::CONTENT_LENGTH));
        assert!(!a.headers.contains_key(header::ACCEPT_RANGES));
        assert!(
            a.body.len() < xml.len() / 4,
            "{accept}: {} bytes",
            a.body.len()
        );
        assert_eq!(decode(encoding, &a.body).await, xml, "{accept}");
        // Weak: other bytes than the identity representation, same validator for 304s.
        assert_eq!(a.header(header::ETAG), format!("W/{etag}"));
        let again = request(
            &app,
            Method::GET,
            path,
            &[
                (header::ACCEPT_ENCODING, accept),
                (header::IF_NONE_MATCH, a.header(header::ETAG)),
            ],
        )
        .await;
        assert_eq!(again.status, StatusCode::NOT_MODIFIED, "{accept}");
    }

    // Not compressed: ZIP packages, copies, small documents, and without Accept-Encoding.
    f.objects
        .put(&Path::from("changedump/p-1.zip"), xml.clone().into())
        .await
        .unwrap();
    let (uri, _, _) = &f.copies[0];
    for p in [
        "/maps/changedump/p-1.zip".to_owned(),
        own_path(uri),
        "/.well-known/resourcesync".to_owned(),
    ] {
        let a = request(
            &app,
            Method::GET,
            &p,
            &[(header::ACCEPT_ENCODING, "gzip, br")],
        )
        .await;
        assert_eq!(a.status, StatusCode::OK, "{p}");
        assert!(!a.headers.contains_key(header::CONTENT_ENCODING), "{p}");
    }
    let a = request(
        &app,
        Method::GET,
        path,
        &[(header::ACCEPT_ENCODING, "identity")],
    )
    .await;
    assert!(!a.headers.contains_key(header::CONTENT_ENCODING));
    assert_eq!(a.body, xml);

    // The byte counter counts what was sent: compressed bytes, not the document's size.
    let before = response_bytes(&app).await;
    let a = request(
        &app,
        Method::GET,
        path,
        &[(header::ACCEPT_ENCODING, "gzip")],
    )
    .await;
    let sent = a.body.len() as u64;
    let after = response_bytes(&app).await;
    assert_eq!(after - before, sent);
    f.state.close().await.unwrap();
}

/// `rsagg_http_response_bytes_total` of the collection's documents, from `/metrics`.
async fn response_bytes(app: &Router) -> u64 {
    let m = String::from_utf8(get(app, "/metrics").await.body).unwrap();
    m.lines()
        .filter(|l| {
            l.starts_with("rsagg_http_response_bytes_total{")
                && l.contains("collection=\"maps\"")
                && l.contains("kind=\"document\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum()
}
