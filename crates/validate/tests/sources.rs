//! Sources served on 127.0.0.1:0 by axum and walked whole: the specification's examples
//! arranged as one Source (copies under `tests/fixtures/spec-1.1/`, `http://example.com`
//! rewritten to the server's origin), whose inconsistencies the walk must find, and a
//! broken Source with one fault of each kind, each reported with its code.

use std::collections::HashMap;
use std::io::Write;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use rsagg_model::{Mode, Severity};
use rsagg_validate::{Options, Report, validate_source};

/// Serves `files(origin)` (path → body; 404 elsewhere); returns the origin.
async fn serve(files: impl FnOnce(&str) -> HashMap<String, Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let files = Arc::new(files(&origin));
    let app = axum::Router::new().fallback(move |req: Request<Body>| {
        let files = files.clone();
        async move {
            match files.get(req.uri().path()) {
                Some(b) => (StatusCode::OK, b.clone()),
                None => (StatusCode::NOT_FOUND, b"not found".to_vec()),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    origin
}

fn example(n: u32, origin: &str) -> Vec<u8> {
    let path = format!(
        "{}/../../tests/fixtures/spec-1.1/resourcesync_ex_{n}.xml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .unwrap()
        .replace("http://example.com", origin)
        .into_bytes()
}

fn opts(mode: Mode) -> Options {
    Options {
        mode,
        allow_private: true,
        ..Options::default()
    }
}

/// (code, URL path, severity) of every problem.
fn found(r: &Report, origin: &str) -> Vec<(&'static str, String, Severity)> {
    r.problems
        .iter()
        .map(|p| (p.code, p.url.replace(origin, ""), p.severity))
        .collect()
}

fn has(found: &[(&'static str, String, Severity)], code: &str, path: &str) -> bool {
    found.iter().any(|(c, p, _)| *c == code && p == path)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_examples_as_one_source() {
    let origin = serve(|o| {
        [
            ("/resourcesync_description.xml", 7),
            ("/dataset1/capabilitylist.xml", 13),
            ("/dataset1/resourcelist.xml", 15),
            // Example 16 is "the Resource List identified by …/resourcelist1.xml" (10.2).
            ("/resourcelist1.xml", 16),
            ("/resourcelist2.xml", 14),
            ("/dataset1/changelist.xml", 20),
            // Example 21 is the closed 20130102 list; the open one "could be" Example 19
            // (12.2).
            ("/20130102-changelist.xml", 21),
            ("/20130103-changelist.xml", 19),
            ("/dataset1/resourcedump.xml", 17),
            ("/dataset1/changedump.xml", 22),
        ]
        .into_iter()
        .map(|(p, n)| (p.to_owned(), example(n, o)))
        .collect()
    })
    .await;
    let start = format!("{origin}/resourcesync_description.xml");
    let lenient = validate_source(&start, &opts(Mode::Lenient)).await.unwrap();
    let f = found(&lenient, &origin);
    // Parts and packages the examples name but never show.
    for missing in [
        "/resourcelist3.xml",
        "/20130101-changelist.xml",
        "/resourcedump-part1.zip",
        "/resourcedump-part2.zip",
        "/resourcedump-part3.zip",
        "/20130101-changedump.zip",
        "/20130102-changedump.zip",
        "/20130103-changedump.zip",
    ] {
        assert!(has(&f, "document-missing", missing), "{missing}: {f:#?}");
    }
    // Example 16 points to an index at another URL than Example 15's (10.2).
    assert!(
        has(&f, "index-link-mismatch", "/resourcelist1.xml"),
        "{f:#?}"
    );
    // Example 14's `at` is not the one Example 15 gives resourcelist2.xml.
    assert!(
        has(&f, "part-interval-mismatch", "/resourcelist2.xml"),
        "{f:#?}"
    );
    // The rest holds together: the `up` links, the capabilities, the 01-02/01-03 chain.
    for code in [
        "up-link-mismatch",
        "capability-mismatch",
        "interval-gap",
        "interval-overlap",
    ] {
        assert!(!f.iter().any(|(c, _, _)| *c == code), "{code}: {f:#?}");
    }
    assert!(!lenient.valid);
    assert_eq!(lenient.summary.documents["Change List"], 2);
    assert_eq!(lenient.summary.documents["Resource List"], 2);

    let strict = validate_source(&start, &opts(Mode::Strict)).await.unwrap();
    let f = found(&strict, &origin);
    // The recommended `index` links (12.1) that Examples 14 and 19 do not have.
    assert!(
        has(&f, "index-link-missing", "/resourcelist2.xml"),
        "{f:#?}"
    );
    assert!(
        has(&f, "index-link-missing", "/20130103-changelist.xml"),
        "{f:#?}"
    );
    assert!(f.iter().any(|(c, p, s)| *c == "index-link-mismatch"
        && p == "/resourcelist1.xml"
        && *s == Severity::Error));
}

const NS: &str = r#"xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/""#;

fn urlset(md: &str, links: &str, entries: &str) -> Vec<u8> {
    format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {NS}>\n{links}\n<rs:md {md}/>\n{entries}</urlset>\n").into_bytes()
}

/// A ZIP whose manifest disagrees with its files: a wrong hash and a path naming no file.
fn package(o: &str) -> Vec<u8> {
    let manifest = urlset(
        r#"capability="resourcedump-manifest" at="2025-01-01T00:00:00Z""#,
        &format!(r#"<rs:ln rel="up" href="{o}/cl.xml"/>"#),
        &format!(
            r#"<url><loc>{o}/res/a</loc><rs:md hash="md5:00000000000000000000000000000000" length="5" path="/a"/></url>
<url><loc>{o}/res/b</loc><rs:md length="3" path="/b"/></url>
"#
        ),
    );
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let o2 = zip::write::SimpleFileOptions::default();
    zip.start_file("manifest.xml", o2).unwrap();
    zip.write_all(&manifest).unwrap();
    zip.start_file("a", o2).unwrap();
    zip.write_all(b"hello").unwrap();
    zip.finish().unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_source_reports_each_fault_with_its_code() {
    let origin = serve(|o| {
        let up = format!(r#"<rs:ln rel="up" href="{o}/cl.xml"/>"#);
        let zip = package(o);
        let zip_len = zip.len();
        let mut m = HashMap::new();
        m.insert("/sd.xml".into(), urlset(r#"capability="description""#, "", &format!(
            "<url><loc>{o}/cl.xml</loc><rs:md capability=\"capabilitylist\"/></url>\n")));
        m.insert("/cl.xml".into(), urlset(r#"capability="capabilitylist""#,
            &format!(r#"<rs:ln rel="up" href="{o}/sd.xml"/>"#), &format!(
            "<url><loc>{o}/rl.xml</loc><rs:md capability=\"resourcelist\"/></url>\n\
             <url><loc>{o}/cli.xml</loc><rs:md capability=\"changelist\"/></url>\n\
             <url><loc>{o}/rd.xml</loc><rs:md capability=\"resourcedump\"/></url>\n")));
        // A Resource List whose `up` is wrong, naming a resource whose bytes are not its hash.
        m.insert("/rl.xml".into(), urlset(r#"capability="resourcelist" at="2025-01-01T00:00:00Z""#,
            &format!(r#"<rs:ln rel="up" href="{o}/wrong.xml"/>"#), &format!(
            "<url><loc>{o}/res/a</loc><rs:md hash=\"md5:00000000000000000000000000000000\" length=\"5\"/></url>\n")));
        m.insert("/res/a".into(), b"hello".to_vec());
        // A Change List Index whose parts leave a gap.
        m.insert("/cli.xml".into(), format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<sitemapindex {NS}>{up}<rs:md capability=\"changelist\" from=\"2025-01-01T00:00:00Z\"/>\n\
             <sitemap><loc>{o}/c1.xml</loc><rs:md from=\"2025-01-01T00:00:00Z\" until=\"2025-01-02T00:00:00Z\"/></sitemap>\n\
             <sitemap><loc>{o}/c2.xml</loc><rs:md from=\"2025-01-03T00:00:00Z\"/></sitemap>\n</sitemapindex>\n").into_bytes());
        let index = format!(r#"{up}<rs:ln rel="index" href="{o}/cli.xml"/>"#);
        m.insert("/c1.xml".into(), urlset(r#"capability="changelist" from="2025-01-01T00:00:00Z" until="2025-01-02T00:00:00Z""#, &index,
            &format!("<url><loc>{o}/res/a</loc><rs:md change=\"created\" datetime=\"2025-01-01T10:00:00Z\"/></url>\n")));
        m.insert("/c2.xml".into(), urlset(r#"capability="changelist" from="2025-01-03T00:00:00Z""#, &index,
            &format!("<url><loc>{o}/res/a</loc><rs:md change=\"updated\" datetime=\"2025-01-03T10:00:00Z\"/></url>\n")));
        // A Resource Dump whose package's manifest disagrees with its files.
        m.insert("/rd.xml".into(), urlset(r#"capability="resourcedump" at="2025-01-01T00:00:00Z""#, &up, &format!(
            "<url><loc>{o}/p.zip</loc><rs:md length=\"{zip_len}\"/></url>\n")));
        m.insert("/p.zip".into(), zip);
        m
    })
    .await;
    let report = validate_source(
        &format!("{origin}/sd.xml"),
        &Options {
            sample: 1,
            ..opts(Mode::Strict)
        },
    )
    .await
    .unwrap();
    let f = found(&report, &origin);
    assert!(has(&f, "up-link-mismatch", "/rl.xml"), "{f:#?}");
    assert!(has(&f, "interval-gap", "/c2.xml"), "{f:#?}");
    assert!(
        has(&f, "zip-hash-mismatch", "/p.zip!/manifest.xml"),
        "{f:#?}"
    );
    assert!(has(&f, "zip-file-missing", "/p.zip"), "{f:#?}");
    assert!(has(&f, "resource-hash-mismatch", "/res/a"), "{f:#?}");
    assert!(!report.valid);
    assert_eq!(report.summary.packages, 1);
    assert_eq!(report.summary.resources_sampled, 1);
    // Nothing else is wrong with it.
    let others: Vec<_> = f
        .iter()
        .filter(|(c, _, s)| {
            *s == Severity::Error
                && !matches!(
                    *c,
                    "up-link-mismatch"
                        | "interval-gap"
                        | "zip-hash-mismatch"
                        | "zip-file-missing"
                        | "resource-hash-mismatch"
                )
        })
        .collect();
    assert!(others.is_empty(), "{others:#?}");
}
