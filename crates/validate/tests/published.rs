//! A collection rsagg published (in process: a fixture upstream on 127.0.0.1:0, `run --once`
//! three times into a `file://` store, then the server's router on 127.0.0.1:0) walked
//! whole in strict mode: every document kind rsagg emits — Source Description, Capability
//! List with its change-notification channel, Resource List Index and parts, Change List
//! Index and closed and open lists, Resource Dump Index and parts, Change Dump Index and
//! parts, every ZIP package and manifest with its published copy — holds every rule, within
//! and between documents, with no error and no warning.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::{Path as AxPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use rsagg_model::Mode;
use rsagg_pipeline::{Pipeline, PublishOptions, RunOptions, run_once};
use rsagg_validate::{Options, validate_source};

const LIST_AT: &str = "2025-01-01T00:00:00Z";

/// The upstream: resources (name → body) and its Change List (name, change, datetime).
#[derive(Default)]
struct Source {
    resources: BTreeMap<String, Vec<u8>>,
    changes: Vec<(String, &'static str, String)>,
}

type Shared = (String, Arc<Mutex<Source>>);

const HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
"#;

fn xml(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

async fn capabilitylist(State((base, _)): State<Shared>) -> Response {
    xml(format!(
        r#"{HEAD}<rs:md capability="capabilitylist"/>
<url><loc>{base}resourcelist.xml</loc><rs:md capability="resourcelist"/></url>
<url><loc>{base}changelist.xml</loc><rs:md capability="changelist"/></url>
</urlset>"#
    ))
}

async fn resourcelist(State((base, src)): State<Shared>) -> Response {
    let src = src.lock().unwrap();
    let mut body = format!("{HEAD}<rs:md capability=\"resourcelist\" at=\"{LIST_AT}\"/>\n");
    for (name, bytes) in &src.resources {
        body.push_str(&format!(
            "<url><loc>{base}res/{name}</loc><rs:md length=\"{}\" type=\"text/plain\"/></url>\n",
            bytes.len()
        ));
    }
    body.push_str("</urlset>");
    xml(body)
}

async fn changelist(State((base, src)): State<Shared>) -> Response {
    let src = src.lock().unwrap();
    let mut body = format!("{HEAD}<rs:md capability=\"changelist\" from=\"{LIST_AT}\"/>\n");
    for (name, change, at) in &src.changes {
        body.push_str(&format!(
            "<url><loc>{base}res/{name}</loc><rs:md change=\"{change}\" datetime=\"{at}\"/></url>\n"
        ));
    }
    body.push_str("</urlset>");
    xml(body)
}

async fn resource(State((_, src)): State<Shared>, AxPath(name): AxPath<String>) -> Response {
    match src.lock().unwrap().resources.get(&name) {
        Some(b) => ([(header::CONTENT_TYPE, "text/plain")], b.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn upstream(src: Arc<Mutex<Source>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/", listener.local_addr().unwrap());
    let app = axum::Router::new()
        .route("/capabilitylist.xml", axum::routing::get(capabilitylist))
        .route("/resourcelist.xml", axum::routing::get(resourcelist))
        .route("/changelist.xml", axum::routing::get(changelist))
        .route("/res/{name}", axum::routing::get(resource))
        // A hub that takes every publication (CN 1.0.1 4.1).
        .route("/hub", axum::routing::post(|| async { StatusCode::OK }))
        .with_state((base.clone(), src));
    tokio::spawn(async move { axum::serve(listener, app).await });
    base
}

fn pipeline(upstream: &str, base_url: &str, store: &Path) -> Pipeline {
    let text = format!(
        r#"
[collection]
name = "coll"
base_url = "{base_url}"
describedby = "https://agg.example.org/about/coll.html"

[store]
url = "file://{}"

[publish]
resourcelist_part_entries = 4
changelist_max_entries = 3
dump_package_entries = 2
change_dump_baseline = true

# The change-notification channel is advertised (and checked; nothing subscribes).
[notify]
hub = "{upstream}hub"
deliver_timeout = "5s"

[[upstream]]
name = "source"
url = "{upstream}capabilitylist.xml"
allow_private = true
"#,
        store.display()
    );
    Pipeline::parse(Path::new("coll.toml"), &text).unwrap()
}

/// Builds and serves the published collection; returns the server's origin.
async fn published(store: &Path) -> String {
    let src = Arc::new(Mutex::new(Source::default()));
    {
        let mut s = src.lock().unwrap();
        for i in 0..14 {
            s.resources.insert(
                format!("r{i:02}.txt"),
                format!("resource {i}\n").into_bytes(),
            );
        }
    }
    let up = upstream(src.clone()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let base_url = format!("{origin}/coll/");
    let p = pipeline(&up, &base_url, store);
    let opts = RunOptions {
        publish: PublishOptions {
            // A Resource Dump Index and a Change Dump Index with a handful of packages.
            document_entries: 2,
            force: true,
            ..PublishOptions::default()
        },
        ..RunOptions::default()
    };
    let report = run_once(&p, &opts).await.unwrap();
    assert_eq!(report.upstreams[0].created, 14, "{report:?}");
    // Two more passes of changes: closed Change Lists, Change Dumps of several packages.
    for round in 0..2 {
        {
            let mut s = src.lock().unwrap();
            for k in 0..4 {
                let name = format!("r{:02}.txt", round * 4 + k);
                let at = format!("2025-01-0{}T00:00:{k:02}Z", round + 2);
                s.resources.insert(
                    name.clone(),
                    format!("resource {name}, version {round}\n").into_bytes(),
                );
                s.changes.push((name, "updated", at));
            }
            let gone = format!("r{:02}.txt", 13 - round);
            s.resources.remove(&gone);
            s.changes
                .push((gone, "deleted", format!("2025-01-0{}T00:01:00Z", round + 2)));
        }
        let report = run_once(&p, &opts).await.unwrap();
        assert_eq!(report.upstreams[0].updated, 4, "{report:?}");
    }
    let objects = rsagg_store::open_object_store(&format!("file://{}", store.display()))
        .unwrap()
        .objects;
    let app = rsagg_server::router(vec![
        rsagg_server::Collection::new("coll", &base_url, objects)
            .unwrap()
            .with_describedby("https://agg.example.org/about/coll.html"),
    ]);
    tokio::spawn(async move { axum::serve(listener, app).await });
    origin
}

fn strict() -> Options {
    Options {
        mode: Mode::Strict,
        allow_private: true,
        sample: 6,
        seed: 3,
        ..Options::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_rsagg_published_collection_is_valid_as_a_whole() {
    let dir = tempfile::tempdir().unwrap();
    let origin = published(dir.path()).await;
    let report = validate_source(&format!("{origin}/.well-known/resourcesync"), &strict())
        .await
        .unwrap();
    let s = &report.summary;
    assert!(
        s.errors == 0 && s.warnings == 0,
        "{:#?}\n{s:#?}",
        report.problems
    );
    assert!(report.valid);
    for kind in [
        "Source Description",
        "Capability List",
        "Resource List Index",
        "Resource List",
        "Change List Index",
        "Change List",
        "Resource Dump Index",
        "Resource Dump",
        "Resource Dump Manifest",
        "Change Dump Index",
        "Change Dump",
        "Change Dump Manifest",
    ] {
        assert!(s.documents.contains_key(kind), "no {kind} walked: {s:#?}");
    }
    assert!(s.documents["Resource List"] >= 3, "{s:#?}");
    assert!(s.packages >= 4, "{s:#?}");
    assert_eq!(s.resources_sampled, 6, "{s:#?}");
    assert_eq!(s.truncated, None);

    // Started at the Capability List, the walk goes up to the Source Description and
    // finds it listed there.
    let from_cl = validate_source(&format!("{origin}/coll/capabilitylist.xml"), &strict())
        .await
        .unwrap();
    assert!(
        from_cl.valid && from_cl.summary.warnings == 0,
        "{:#?}",
        from_cl.problems
    );
    assert_eq!(from_cl.summary.documents["Source Description"], 1);

    // The bounds end the walk cleanly, with one warning.
    let bounded = validate_source(
        &format!("{origin}/.well-known/resourcesync"),
        &Options {
            max_documents: 5,
            ..strict()
        },
    )
    .await
    .unwrap();
    assert_eq!(bounded.summary.truncated, Some("max-documents"));
    assert_eq!(bounded.summary.errors, 0, "{:#?}", bounded.problems);
    assert_eq!(
        bounded
            .problems
            .iter()
            .filter(|p| p.code == "bound-reached")
            .count(),
        1
    );
    let documents: u64 = bounded.summary.documents.values().sum();
    assert!(documents <= 5, "{:#?}", bounded.summary);
    let bytes = validate_source(
        &format!("{origin}/.well-known/resourcesync"),
        &Options {
            max_bytes: 6000,
            ..strict()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        bytes.summary.truncated,
        Some("max-bytes"),
        "{:#?} {:#?}",
        bytes.summary,
        bytes.problems
    );
    assert!(bytes.summary.bytes <= 6000, "{:#?}", bytes.summary);

    // Without --allow-private the loopback Source is refused before anything is read.
    let refused = validate_source(
        &format!("{origin}/.well-known/resourcesync"),
        &Options {
            allow_private: false,
            ..strict()
        },
    )
    .await;
    assert!(
        matches!(refused, Err(rsagg_validate::Error::StartFetch { .. })),
        "{refused:?}"
    );
}
