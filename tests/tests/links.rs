//! Every link rsagg publishes is true of its target (issue 45 points 1, 4 and 5; spec 7: a
//! link's `hash`, `length`, `encoding` and `type` pertain to the linked resource), tested in
//! process: a collection like the demo's (a ResourceSync Source and an OAI-PMH repository,
//! both fixtures served by axum on 127.0.0.1:0) is harvested by the runner into a `file://`
//! store and served by `rsagg-server`'s router on 127.0.0.1:0; then, as a fixity-checking
//! Destination would, every `via`, `describedby` and `alternate` href of the published
//! Resource List and Change List is fetched (bytes as sent, never decoded) and each stated
//! `hash`, `length`, `encoding` and `type` compared with the response, and so is every entry's
//! own `<loc>`; every `collection` href answers 2xx; every published document passes strict
//! validation.
//!
//! Run: `cargo test -p rsagg-e2e --test links`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{Context, Result, bail, ensure};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use md5::Md5;
use rsagg_model::{HashAlgorithm, Link, Mode, Root, UrlEntry};
use rsagg_pipeline::{Pipeline, RunOptions, RunReport, run_once};
use rsagg_sitemap::{ReadOptions, read_document};
use sha2::{Digest as _, Sha256};

/// One resource of the fixture Source: its body as served, `Content-Type`, whether it is
/// served `Content-Encoding: gzip` (then `body` is the gzip'd bytes), and its entry's
/// `rs:ln`s (rel, path of the target).
struct Res {
    body: Vec<u8>,
    mime: &'static str,
    gzip: bool,
    /// The entry's `hash` (md5 and sha-256 of `body` unless set).
    hash: Option<String>,
    links: Vec<(&'static str, &'static str)>,
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    enc.write_all(bytes).unwrap();
    enc.finish().unwrap()
}

/// Lowercase hex of `digest`.
fn hex(digest: &[u8]) -> String {
    rsagg_model::HashValue::from_bytes(HashAlgorithm::Sha256, digest).digest
}

fn md_of(body: &[u8]) -> String {
    format!(
        "md5:{} sha-256:{}",
        hex(&Md5::digest(body)),
        hex(&Sha256::digest(body))
    )
}

/// The fixture Source: path → resource. `/res/a.txt` has a `describedby`, an `alternate`
/// (both to resources of the list, which rsagg rewrites to its copies) and a `collection`
/// (the upstream's collection page); `/res/enc.txt` is served gzip'd and described by the
/// gzip'd bytes with `encoding="gzip"`; `/res/enc-bad.txt` likewise but with a hash of other
/// bytes.
fn source(with_encoded: bool) -> BTreeMap<&'static str, Res> {
    let mut s = BTreeMap::new();
    let plain = |body: &[u8], mime| Res {
        body: body.to_vec(),
        mime,
        gzip: false,
        hash: None,
        links: Vec::new(),
    };
    s.insert(
        "/res/a.txt",
        Res {
            links: vec![
                ("describedby", "/res/a.json"),
                ("alternate", "/res/a.html"),
                ("collection", "/collections/maps"),
            ],
            ..plain(b"resource a, as text\n", "text/plain")
        },
    );
    s.insert(
        "/res/a.json",
        plain(b"{\"about\": \"/res/a.txt\"}\n", "application/json"),
    );
    s.insert(
        "/res/a.html",
        plain(b"<p>resource a, as HTML</p>\n", "text/html"),
    );
    if with_encoded {
        let text = b"a resource the Source serves gzip'd, and describes so\n".repeat(20);
        s.insert(
            "/res/enc.txt",
            Res {
                gzip: true,
                ..plain(&gzip(&text), "text/plain")
            },
        );
        s.insert(
            "/res/enc-bad.txt",
            Res {
                gzip: true,
                hash: Some(md_of(b"other bytes")),
                ..plain(&gzip(b"served gzip'd, announced wrongly\n"), "text/plain")
            },
        );
    }
    s
}

const HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
"#;

/// OAI-PMH records: identifier → (datestamp, setSpecs).
const RECORDS: &[(&str, &str, &[&str])] = &[
    ("oai:fixture:1", "2025-01-02T00:00:00Z", &["com_1", "col_1"]),
    ("oai:fixture:2", "2025-01-03T00:00:00Z", &["col_1"]),
];

struct Upstream {
    base: String,
    resources: BTreeMap<&'static str, Res>,
    /// OAI-PMH responses sent: each envelope's `responseDate` is a second later, as a live
    /// provider's clock, so no two answers to `GetRecord` are the same bytes.
    answers: AtomicU64,
}

type Shared = Arc<Upstream>;

fn resourcelist(u: &Upstream) -> String {
    let mut body =
        format!("{HEAD}<rs:md capability=\"resourcelist\" at=\"2025-01-01T00:00:00Z\"/>\n");
    for (path, r) in &u.resources {
        let hash = r.hash.clone().unwrap_or_else(|| md_of(&r.body));
        let encoding = if r.gzip { " encoding=\"gzip\"" } else { "" };
        let links: String = r
            .links
            .iter()
            .map(|(rel, target)| match u.resources.get(target) {
                Some(t) => format!(
                    "<rs:ln rel=\"{rel}\" href=\"{}{target}\" hash=\"{}\" length=\"{}\" type=\"{}\"/>",
                    u.base,
                    md_of(&t.body),
                    t.body.len(),
                    t.mime
                ),
                None => format!("<rs:ln rel=\"{rel}\" href=\"{}{target}\"/>", u.base),
            })
            .collect();
        body.push_str(&format!(
            "<url><loc>{}{path}</loc><lastmod>2024-12-01T00:00:00Z</lastmod><rs:md hash=\"{hash}\" length=\"{}\" type=\"{}\"{encoding}/>{links}</url>\n",
            u.base,
            r.body.len(),
            r.mime
        ));
    }
    body.push_str("</urlset>\n");
    body
}

fn record_xml(id: &str, datestamp: &str, sets: &[&str]) -> String {
    let sets: String = sets
        .iter()
        .map(|s| format!("<setSpec>{s}</setSpec>"))
        .collect();
    format!(
        "<record><header><identifier>{id}</identifier><datestamp>{datestamp}</datestamp>{sets}</header><metadata><oai_dc:dc xmlns:oai_dc=\"http://www.openarchives.org/OAI/2.0/oai_dc/\" xmlns:dc=\"http://purl.org/dc/elements/1.1/\"><dc:title>Record {id}</dc:title></oai_dc:dc></metadata></record>"
    )
}

fn oai(u: &Upstream, q: &HashMap<String, String>) -> Response {
    let n = u.answers.fetch_add(1, Ordering::Relaxed);
    let now = rsagg_model::W3cDateTime::from_unix(1_767_225_600 + n as i64, 0).to_string();
    let body = match q.get("verb").map(String::as_str) {
        Some("Identify") => format!(
            "<Identify><repositoryName>Fixture</repositoryName><baseURL>{}/oai</baseURL><protocolVersion>2.0</protocolVersion><adminEmail>a@example.org</adminEmail><earliestDatestamp>2000-01-01T00:00:00Z</earliestDatestamp><deletedRecord>persistent</deletedRecord><granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify>",
            u.base
        ),
        Some("ListMetadataFormats") => "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix><schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema><metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace></metadataFormat></ListMetadataFormats>".to_owned(),
        Some("ListRecords") => {
            let set = q.get("set");
            let records: String = RECORDS
                .iter()
                .filter(|(_, _, sets)| set.is_none_or(|s| sets.contains(&s.as_str())))
                .map(|(id, ds, sets)| record_xml(id, ds, sets))
                .collect();
            if records.is_empty() {
                "<error code=\"noRecordsMatch\">none</error>".to_owned()
            } else {
                format!("<ListRecords>{records}</ListRecords>")
            }
        }
        Some("GetRecord") => match RECORDS
            .iter()
            .find(|(id, _, _)| Some(*id) == q.get("identifier").map(String::as_str))
        {
            Some((id, ds, sets)) => format!("<GetRecord>{}</GetRecord>", record_xml(id, ds, sets)),
            None => "<error code=\"idDoesNotExist\">no</error>".to_owned(),
        },
        _ => "<error code=\"badVerb\">no</error>".to_owned(),
    };
    let xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\"><responseDate>{now}</responseDate><request>{}/oai</request>{body}</OAI-PMH>",
        u.base
    );
    ([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], xml).into_response()
}

async fn upstream_route(
    State(u): State<Shared>,
    uri: Uri,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let path = uri.path();
    let xml = |body: String| ([(header::CONTENT_TYPE, "application/xml")], body).into_response();
    match path {
        "/oai" => oai(&u, &q),
        "/capabilitylist.xml" => xml(format!(
            "{HEAD}<rs:md capability=\"capabilitylist\"/>\n<url><loc>{}/resourcelist.xml</loc><rs:md capability=\"resourcelist\"/></url>\n</urlset>\n",
            u.base
        )),
        "/resourcelist.xml" => xml(resourcelist(&u)),
        "/collections/maps" => (
            [(header::CONTENT_TYPE, "text/html")],
            "<p>the maps collection</p>",
        )
            .into_response(),
        _ => match u.resources.get(path) {
            Some(r) => {
                let mut h = HeaderMap::new();
                h.insert(header::CONTENT_TYPE, HeaderValue::from_static(r.mime));
                if r.gzip {
                    h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
                }
                (h, r.body.clone()).into_response()
            }
            None => StatusCode::NOT_FOUND.into_response(),
        },
    }
}

/// Serves the fixture upstreams on 127.0.0.1:0; the base URL (no final `/`).
async fn upstream(with_encoded: bool) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let u = Arc::new(Upstream {
        base: base.clone(),
        resources: source(with_encoded),
        answers: AtomicU64::new(0),
    });
    let app = axum::Router::new().fallback(upstream_route).with_state(u);
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn pipeline(up: &str, base_url: &str, store: &Path, links: &str) -> Pipeline {
    let text = format!(
        r#"
[collection]
name = "links"
base_url = "{base_url}"

[store]
url = "file://{}"

[[upstream]]
name = "source"
url = "{up}/capabilitylist.xml"
allow_private = true

[[upstream]]
name = "repo"
url = "{up}/oai"
kind = "oai-pmh"
allow_private = true

{links}
"#,
        store.display()
    );
    Pipeline::parse(Path::new("links.toml"), &text).unwrap()
}

/// Upstream `name`'s (created, quarantined, failed) in `r`, with its report for messages.
fn counts(r: &RunReport, name: &str) -> ((u64, u64, u64), String) {
    let u = r.upstreams.iter().find(|u| u.name == name).unwrap();
    ((u.created, u.quarantined, u.failed), format!("{u:?}"))
}

/// A client that hands bodies over as sent (no `Content-Encoding` decoded): a fixity check
/// is of the bytes the URI serves.
fn raw_client() -> reqwest::Client {
    reqwest::Client::builder().no_gzip().build().unwrap()
}

/// GET `url`: status, `Content-Type` (its media type), `Content-Encoding`, body as sent.
async fn fetch(
    c: &reqwest::Client,
    url: &str,
) -> Result<(u16, Option<String>, Option<String>, Vec<u8>)> {
    let resp = c.get(url).send().await.with_context(|| url.to_owned())?;
    let text = |n: header::HeaderName| {
        resp.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or("").trim().to_owned())
    };
    let (ty, enc) = (text(header::CONTENT_TYPE), text(header::CONTENT_ENCODING));
    let status = resp.status().as_u16();
    Ok((status, ty, enc, resp.bytes().await?.to_vec()))
}

/// Checks that what `url` answers is what `what` (an entry's `rs:md`, or a link) states.
async fn check_fixity(
    c: &reqwest::Client,
    what: &str,
    url: &str,
    hash: Option<&rsagg_model::Hashes>,
    length: Option<u64>,
    encoding: Option<&str>,
    mime: Option<&str>,
) -> Result<()> {
    let (status, ty, enc, body) = fetch(c, url).await?;
    ensure!(status == 200, "{what}: {url} answered {status}");
    if let Some(len) = length {
        ensure!(
            len == body.len() as u64,
            "{what}: {url}: length {len} stated, {} served",
            body.len()
        );
    }
    for h in hash.map(|h| h.0.as_slice()).unwrap_or_default() {
        let got = match h.algorithm {
            HashAlgorithm::Md5 => hex(&Md5::digest(&body)),
            HashAlgorithm::Sha256 => hex(&Sha256::digest(&body)),
            ref other => bail!("{what}: {url}: hash algorithm {other:?} not checked here"),
        };
        ensure!(
            got.eq_ignore_ascii_case(&h.digest),
            "{what}: {url}: hash {} stated, {got} served",
            h.digest
        );
    }
    ensure!(
        encoding.map(str::to_ascii_lowercase) == enc.as_deref().map(str::to_ascii_lowercase),
        "{what}: {url}: encoding {encoding:?} stated, Content-Encoding {enc:?} served"
    );
    if let Some(m) = mime {
        ensure!(
            ty.as_deref() == Some(m),
            "{what}: {url}: type {m} stated, Content-Type {ty:?} served"
        );
    }
    Ok(())
}

/// The entries of the published document at `url`, the parts of an index included.
async fn entries(c: &reqwest::Client, url: &str) -> Result<Vec<UrlEntry>> {
    let (status, _, _, body) = fetch(c, url).await?;
    ensure!(status == 200, "{url}: {status}");
    let doc = read_document(&body, ReadOptions::new(Mode::Strict, url.to_owned()))?;
    if doc.header.root == Root::Sitemapindex {
        let mut all = Vec::new();
        for part in &doc.entries {
            all.extend(Box::pin(entries(c, &part.loc)).await?);
        }
        return Ok(all);
    }
    Ok(doc.entries)
}

/// Every XML document published into the store at `store` passes strict validation.
fn every_document_is_strictly_valid(store: &Path) -> Result<usize> {
    let mut checked = 0;
    let mut stack = vec![store.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)?.flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !matches!(
                    name.as_str(),
                    "blobs" | "state" | "published" | "stats" | "notify"
                ) {
                    stack.push(p);
                }
            } else if name.ends_with(".xml") {
                let doc = read_document(
                    &std::fs::read(&p)?,
                    ReadOptions::new(Mode::Strict, p.display().to_string()),
                )?;
                let errors: Vec<_> = doc.errors().collect();
                ensure!(errors.is_empty(), "{}: {errors:?}", p.display());
                checked += 1;
            }
        }
    }
    Ok(checked)
}

/// `rel` links of `e`.
fn links<'a>(e: &'a UrlEntry, rel: &'a str) -> impl Iterator<Item = &'a Link> + 'a {
    e.links.iter().filter(move |l| l.has_rel(rel))
}

/// The published Resource List entries of the store at `store`, read from its files.
fn stored_entries(store: &Path) -> Result<Vec<UrlEntry>> {
    let mut out = Vec::new();
    let mut stack = vec![store.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir)?.flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            if p.is_dir() {
                if !matches!(name.as_str(), "blobs" | "state") {
                    stack.push(p);
                }
            } else if name.starts_with("resourcelist") && name.ends_with(".xml") {
                let doc = read_document(&std::fs::read(&p)?, ReadOptions::new(Mode::Strict, name))?;
                if doc.header.root == Root::Urlset {
                    out.extend(doc.entries);
                }
            }
        }
    }
    Ok(out)
}

/// The OAI-PMH record `id`'s published entry (its `via` names its `GetRecord` URL).
fn record<'a>(entries: &'a [UrlEntry], id: &str) -> &'a UrlEntry {
    let id = url::form_urlencoded::byte_serialize(id.as_bytes()).collect::<String>();
    entries
        .iter()
        .find(|e| links(e, "via").any(|l| l.href.contains(&format!("identifier={id}&"))))
        .unwrap_or_else(|| panic!("no entry for {id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_via_describedby_and_alternate_href_answers_what_the_link_states() -> Result<()> {
    let up = upstream(true).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base_url = format!("http://{}/c/", listener.local_addr()?);
    let dir = tempfile::tempdir()?;
    let p = pipeline(&up, &base_url, dir.path(), "");
    let report = run_once(&p, &RunOptions::default()).await?;
    let (source, why) = counts(&report, "source");
    assert_eq!(
        source,
        (4, 1, 0),
        "the gzip'd resource described by its encoded bytes is harvested, the one with a wrong hash quarantined: {why}"
    );
    let (repo, why) = counts(&report, "repo");
    assert_eq!(repo, (2, 0, 0), "{why}");

    let objects =
        rsagg_store::open_object_store(&format!("file://{}", dir.path().display()))?.objects;
    let collection = rsagg_server::Collection::new("links", base_url.as_str(), objects)?;
    let app = rsagg_server::router(vec![collection]);
    let server = tokio::spawn(async move { axum::serve(listener, app).await });

    let c = raw_client();
    let listed = entries(&c, &format!("{base_url}resourcelist.xml")).await?;
    let changes = entries(&c, &format!("{base_url}changelist.xml")).await?;
    ensure!(listed.len() == 6, "{listed:#?}");
    let mut checked: BTreeMap<&str, usize> = BTreeMap::new();
    for e in listed.iter().chain(&changes) {
        let md = e.md.as_ref().context("an entry without rs:md")?;
        if md.change != Some(rsagg_model::Change::Deleted) {
            check_fixity(
                &c,
                "entry",
                &e.loc,
                md.hash.as_ref(),
                md.length,
                md.encoding.as_deref(),
                md.mime_type.as_deref(),
            )
            .await?;
            *checked.entry("loc").or_default() += 1;
        }
        for rel in ["via", "describedby", "alternate"] {
            for l in links(e, rel) {
                let what = format!("{rel} of {}", e.loc);
                check_fixity(
                    &c,
                    &what,
                    &l.href,
                    l.hash.as_ref(),
                    l.length,
                    l.encoding.as_deref(),
                    l.mime_type.as_deref(),
                )
                .await?;
                *checked.entry(rel).or_default() += 1;
            }
        }
        for l in links(e, "collection") {
            let (status, _, _, _) = fetch(&c, &l.href).await?;
            ensure!(
                status == 200,
                "collection of {}: {} answered {status}",
                e.loc,
                l.href
            );
            *checked.entry("collection").or_default() += 1;
        }
    }
    assert!(checked["via"] >= 6, "{checked:?}");
    assert!(
        checked["describedby"] >= 1 && checked["alternate"] >= 1,
        "{checked:?}"
    );

    // The copies of what `describedby` and `alternate` name are rsagg's own.
    let a = listed
        .iter()
        .find(|e| e.loc.ends_with("/res/a.txt"))
        .context("a.txt")?;
    for rel in ["describedby", "alternate"] {
        let l = links(a, rel).next().context(rel)?;
        assert!(l.href.starts_with(&base_url), "{rel}: {l:?}");
    }
    // The upstream's collection link is kept (the default policy), to its collection.
    let coll: Vec<&str> = links(a, "collection").map(|l| l.href.as_str()).collect();
    assert_eq!(coll, [format!("{up}/collections/maps")]);

    // An OAI-PMH record's via states no fixity (its URL answers a fresh envelope each time)
    // and each of its sets is a collection link to the set's ListRecords URL, which lists it.
    let one = record(&listed, "oai:fixture:1");
    let via = links(one, "via").next().context("via")?;
    assert_eq!(
        (&via.hash, via.length, &via.mime_type),
        (&None, None, &None),
        "{via:?}"
    );
    assert_eq!(
        via.modified.map(|m| m.to_string()).as_deref(),
        Some("2025-01-02T00:00:00Z")
    );
    let sets: BTreeSet<&str> = links(one, "collection").map(|l| l.href.as_str()).collect();
    assert_eq!(
        sets,
        BTreeSet::from([
            format!("{up}/oai?verb=ListRecords&metadataPrefix=oai_dc&set=com_1").as_str(),
            format!("{up}/oai?verb=ListRecords&metadataPrefix=oai_dc&set=col_1").as_str(),
        ])
    );
    for href in &sets {
        let (_, _, _, body) = fetch(&c, href).await?;
        assert!(
            String::from_utf8_lossy(&body).contains("oai:fixture:1"),
            "{href}"
        );
    }
    assert_eq!(
        links(record(&listed, "oai:fixture:2"), "collection").count(),
        1
    );

    // The gzip'd resource: rsagg's copy is the encoded bytes, described and served so.
    let enc = listed
        .iter()
        .find(|e| e.loc.ends_with("/res/enc.txt"))
        .context("enc.txt")?;
    assert_eq!(
        enc.md.as_ref().and_then(|m| m.encoding.as_deref()),
        Some("gzip")
    );
    assert!(!listed.iter().any(|e| e.loc.ends_with("/res/enc-bad.txt")));
    // `audit --fetch` compares it as served, undecoded: not changed.
    let audited = rsagg_pipeline::audit(
        &p,
        rsagg_pipeline::AuditOptions {
            read_data: true,
            fetch: true,
            max_items: 100,
        },
    )
    .await?;
    ensure!(
        !audited
            .items
            .iter()
            .any(|i| i.uri.ends_with("/res/enc.txt")),
        "{:#?}",
        audited.items
    );

    server.abort();
    let docs = every_document_is_strictly_valid(dir.path())?;
    assert!(docs >= 3, "{docs} documents");
    Ok(())
}

/// The link policy decides on an upstream's `collection` links, `[publish.links] oai_sets`
/// on the sets of OAI-PMH records; the published documents stay strictly valid either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_decides_on_upstream_collection_links_and_oai_sets_on_set_links() -> Result<()> {
    let up = upstream(false).await;
    let base_url = "https://agg.example.org/c/";
    let upstream_collection = format!("{up}/collections/maps");
    for (links_cfg, upstream_kept, sets) in [
        ("", true, 2),
        ("[publish.links]\ndrop = [\"collection\"]\n", false, 2),
        ("[publish.links]\noai_sets = false\n", true, 0),
        (
            "[publish.links]\noai_sets = false\ndrop = [\"Collection\"]\n",
            false,
            0,
        ),
    ] {
        let dir = tempfile::tempdir()?;
        let p = pipeline(&up, base_url, dir.path(), links_cfg);
        let report = run_once(&p, &RunOptions::default()).await?;
        assert_eq!(report.exit_code(false), 0, "{links_cfg}: {report:?}");
        let listed = stored_entries(dir.path())?;
        let a = listed
            .iter()
            .find(|e| e.loc.ends_with("/res/a.txt"))
            .context("a.txt")?;
        assert_eq!(
            links(a, "collection").any(|l| l.href == upstream_collection),
            upstream_kept,
            "{links_cfg}: {a:?}"
        );
        assert_eq!(
            links(record(&listed, "oai:fixture:1"), "collection").count(),
            sets,
            "{links_cfg}"
        );
        every_document_is_strictly_valid(dir.path())?;
    }
    Ok(())
}
