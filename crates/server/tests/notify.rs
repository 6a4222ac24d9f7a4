//! Change notifications end to end: an in-process upstream Source on loopback, the server's
//! router serving the collection on loopback (the topic URI among the rest), a hub on
//! loopback that checks what a hub checks (CN 1.0.1 4.1: the publish request's links, then
//! a GET of the topic), and real `run --once` passes (`run_once`) in both publish forms.

mod common;

use common::get;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use object_store::ObjectStore;
use rsagg_model::{Capability, Change, Mode};
use rsagg_pipeline::{Pipeline, RunOptions, run_once};
use rsagg_server::{Collection, router};

/// An upstream Source with two resources, and its origin.
async fn upstream() -> String {
    common::serve_files(|origin| {
        let ns = r#"xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/""#;
        let mut files: HashMap<String, Vec<u8>> = HashMap::new();
        files.insert("/res/a.txt".into(), b"alpha".to_vec());
        files.insert("/res/b.txt".into(), b"bravo".to_vec());
        files.insert(
            "/resourcelist.xml".into(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {ns}>\n\
                 <rs:ln rel=\"up\" href=\"{origin}/capabilitylist.xml\"/>\n\
                 <rs:md capability=\"resourcelist\" at=\"2026-01-01T00:00:00Z\"/>\n\
                 <url><loc>{origin}/res/a.txt</loc><rs:md length=\"5\"/></url>\n\
                 <url><loc>{origin}/res/b.txt</loc><rs:md length=\"5\"/></url>\n</urlset>\n"
            )
            .into_bytes(),
        );
        files.insert(
            "/capabilitylist.xml".into(),
            format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<urlset {ns}>\n\
                 <rs:md capability=\"capabilitylist\"/>\n\
                 <url><loc>{origin}/resourcelist.xml</loc><rs:md capability=\"resourcelist\"/></url>\n\
                 </urlset>\n"
            )
            .into_bytes(),
        );
        files
    })
    .await
}

/// What the hub saw of one publish request: its headers and body, and what the topic URI
/// answered right after (status, `Link`, body).
#[derive(Debug, Clone)]
struct Seen {
    headers: HeaderMap,
    body: Bytes,
    topic: (u16, String, Bytes),
}

/// A hub on loopback. A CN 1.0.1 4.1 publish (`application/xml`) is answered 200 after the
/// topic named by its `rel="self"` link was fetched; a WebSub publish (`hub.mode=publish`) is
/// answered 202 after `hub.url` was fetched (flask-websub's eager mode).
async fn hub() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let record = seen.clone();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hub", listener.local_addr().unwrap());
    let app = Router::new().route(
        "/hub",
        post(move |headers: HeaderMap, body: Bytes| {
            let record = record.clone();
            async move {
                let form = headers["content-type"] == "application/x-www-form-urlencoded";
                let topic = if form {
                    url::form_urlencoded::parse(&body)
                        .find(|(k, _)| k == "hub.url")
                        .map(|(_, v)| v.into_owned())
                } else {
                    let base = url::Url::parse("http://unused/").unwrap();
                    let links = rsagg_websub::link::parse(
                        &[headers["link"].to_str().unwrap().to_owned()],
                        &base,
                    );
                    rsagg_websub::link::find(&links, "self").map(str::to_owned)
                };
                let Some(topic) = topic else {
                    return StatusCode::BAD_REQUEST;
                };
                let r = reqwest::get(&topic).await.unwrap();
                let status = r.status().as_u16();
                let link = r.headers()["link"].to_str().unwrap().to_owned();
                let fetched = r.bytes().await.unwrap();
                record.lock().unwrap().push(Seen {
                    headers,
                    body,
                    topic: (status, link, fetched),
                });
                if form {
                    StatusCode::ACCEPTED
                } else {
                    StatusCode::OK
                }
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, seen)
}

/// A pipeline of the upstream into a `file://` store, notifying `hub` in `form`, served on
/// loopback (the base URL is the served address): the pipeline, the store, the router.
async fn setup(
    dir: &std::path::Path,
    origin: &str,
    hub: &str,
    form: &str,
) -> (Pipeline, Arc<dyn ObjectStore>, Router) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}/maps/", listener.local_addr().unwrap());
    let store = url::Url::from_directory_path(dir.join("store"))
        .unwrap()
        .to_string();
    let toml = format!(
        "[collection]\nname = \"maps\"\nbase_url = \"{base}\"\n\n[store]\nurl = \"{store}\"\n\n\
         [fetch]\nretries = 0\n\n[[upstream]]\nname = \"up\"\nurl = \"{origin}/capabilitylist.xml\"\n\
         allow_private = true\n\n[notify]\nhub = \"{hub}\"\nform = \"{form}\"\nmax_entries = 1\n\
         fetch_wait = \"5s\"\n"
    );
    let path = dir.join("maps.toml");
    std::fs::write(&path, &toml).unwrap();
    let p = Pipeline::parse(&path, &toml).unwrap();
    let collection = Collection::from_pipeline(&p).unwrap();
    let objects = collection.objects().clone();
    let app = router(vec![collection]);
    let served = app.clone();
    tokio::spawn(async move { axum::serve(listener, served).await.unwrap() });
    (p, objects, app)
}

/// Reads a payload strictly: (from, until, changes).
fn payload(xml: &[u8]) -> (String, String, Vec<Change>) {
    let opts = rsagg_sitemap::ReadOptions::new(Mode::Strict, "payload");
    let d = rsagg_sitemap::read_document(xml, opts).unwrap();
    let errors: Vec<_> = d.errors().collect();
    assert!(errors.is_empty(), "{errors:#?}");
    let md = d.header.md.unwrap();
    assert_eq!(md.capability, Some(Capability::ChangeNotification));
    let changes = d
        .entries
        .iter()
        .map(|e| e.md.as_ref().unwrap().change.clone().unwrap())
        .collect();
    (
        md.from.unwrap().to_string(),
        md.until.unwrap().to_string(),
        changes,
    )
}

async fn run_and_check(form: &str) {
    let dir = tempfile::tempdir().unwrap();
    let origin = upstream().await;
    let (hub, seen) = hub().await;
    let (p, _objects, app) = setup(dir.path(), &origin, &hub, form).await;
    let base = p.base_url.to_string();
    let topic = format!("{base}change/");

    let report = run_once(&p, &RunOptions::default()).await.unwrap();
    assert_eq!(report.exit_code(false), 0, "{}", report.summary());
    let n = report.notify.as_ref().unwrap();
    let prepared = n.prepared.as_ref().unwrap();
    assert_eq!(
        (prepared.payloads, prepared.entries),
        (2, 2),
        "max_entries = 1"
    );
    let d = &n.delivery;
    assert_eq!(
        (d.delivered, d.pending, d.sent_total, d.unfetched),
        (2, 0, 2, 0),
        "{}",
        report.summary()
    );

    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    let mut until_before: Option<String> = None;
    for s in &seen {
        // The topic answered as CN 1.0.1 4.1 says, with the payload being published.
        let (status, link, fetched) = &s.topic;
        assert_eq!(*status, 200);
        assert_eq!(
            *link,
            format!("<{topic}>; rel=\"self\", <{hub}>; rel=\"hub\"")
        );
        let (from, until, changes) = payload(fetched);
        assert_eq!(changes, [Change::Created]);
        if let Some(u) = &until_before {
            assert_eq!(*u, from, "consecutive intervals");
        }
        until_before = Some(until);
        if form == "resourcesync" {
            assert_eq!(s.headers["content-type"], "application/xml");
            assert_eq!(
                s.headers["link"],
                format!("<{topic}>; rel=\"self\", <{hub}>; rel=\"hub\"").as_str()
            );
            assert_eq!(s.body, *fetched, "the payload POSTed is the topic's body");
        }
    }

    // The Capability List advertises the channel (CN 5), strictly valid.
    let caps = get(&app, "/maps/capabilitylist.xml").await;
    assert_eq!(caps.status, StatusCode::OK);
    let caps = caps.body;
    let d = rsagg_sitemap::read_document(
        caps.as_bytes(),
        rsagg_sitemap::ReadOptions::new(Mode::Strict, "capabilitylist"),
    )
    .unwrap();
    assert_eq!(d.errors().count(), 0);
    let channel = d
        .entries
        .iter()
        .find(|e| e.md.as_ref().unwrap().capability == Some(Capability::ChangeNotification))
        .unwrap();
    assert_eq!(channel.loc, topic);
    assert_eq!(channel.link("hub").unwrap().href, hub);

    // The run's figures on /metrics and /status.
    let metrics = get(&app, "/metrics").await.body;
    let labels = format!("{{collection=\"maps\",hub=\"{hub}\"}}");
    for line in [
        format!("rsagg_notifications_sent_total{labels} 2\n"),
        format!("rsagg_notifications_pending{labels} 0\n"),
        format!("rsagg_notification_delivery_failures{labels} 0\n"),
    ] {
        assert!(metrics.contains(&line), "{line}\n{metrics}");
    }
    let status = get(&app, "/status/maps").await.body;
    assert!(status.contains("Change notifications"), "{status}");
    assert!(
        status.contains("data-figure=\"notifications-delivered\">2<"),
        "{status}"
    );

    // Nothing new: nothing prepared or sent again.
    let report = run_once(&p, &RunOptions::default()).await.unwrap();
    let n = report.notify.as_ref().unwrap();
    assert_eq!(n.prepared.as_ref().unwrap().payloads, 0);
    assert_eq!((n.delivery.delivered, n.delivery.sent_total), (0, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_notifies_the_hub_in_the_resourcesync_form() {
    run_and_check("resourcesync").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_notifies_a_stock_hub_in_the_websub_form() {
    run_and_check("websub").await;
}

/// rsagg's own hub (`rsagg hub`'s router) relays a run's notifications to a subscriber of
/// the topic advertised in the Capability List: the whole chain of CN 1.0.1 4.1 to 4.3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rsaggs_own_hub_relays_a_runs_notifications_to_a_subscriber() {
    use axum::extract::Query;
    use axum::routing::get as get_route;
    use rsagg_websub::{Hub, HubConfig, Url};

    // The hub.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hub_url = format!("http://{}/", listener.local_addr().unwrap());
    // The subscriber is on 127.0.0.1: private callbacks allowed.
    let mut config = HubConfig::new(Url::parse(&hub_url).unwrap());
    config.allow_private_callbacks = true;
    let hub = Arc::new(
        Hub::open(Arc::new(object_store::memory::InMemory::new()), config)
            .await
            .unwrap(),
    );
    let relay = rsagg_server::hub::hub_router(hub.clone());
    tokio::spawn(async move { axum::serve(listener, relay).await.unwrap() });

    // The collection, served; its run comes after the subscription.
    let dir = tempfile::tempdir().unwrap();
    let origin = upstream().await;
    let (p, _objects, _app) = setup(dir.path(), &origin, &hub_url, "resourcesync").await;
    let topic = format!("{}change/", p.base_url);

    // A subscriber: answers the challenge, records deliveries.
    let (tx, mut deliveries) = tokio::sync::mpsc::unbounded_channel::<(HeaderMap, Bytes)>();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let callback = format!("http://{}/cb", listener.local_addr().unwrap());
    let subscriber = Router::new().route(
        "/cb",
        get_route(|Query(q): Query<HashMap<String, String>>| async move {
            q.get("hub.challenge").cloned().unwrap_or_default()
        })
        .post(move |headers: HeaderMap, body: Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((headers, body));
                StatusCode::OK
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, subscriber).await.unwrap() });
    let form = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("hub.mode", "subscribe")
        .append_pair("hub.topic", &topic)
        .append_pair("hub.callback", &callback)
        .finish();
    let r = reqwest::Client::new()
        .post(&hub_url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 202);
    let wait = std::time::Duration::from_secs(20);
    tokio::time::timeout(wait, async {
        while hub.subscriptions().is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("subscription verified");

    let report = run_once(&p, &RunOptions::default()).await.unwrap();
    assert_eq!(report.exit_code(false), 0, "{}", report.summary());
    let mut intervals = Vec::new();
    for _ in 0..2 {
        let (headers, body) = tokio::time::timeout(wait, deliveries.recv())
            .await
            .expect("a delivery")
            .unwrap();
        assert_eq!(headers["content-type"], "application/xml");
        let base = url::Url::parse(&hub_url).unwrap();
        let links =
            rsagg_websub::link::parse(&[headers["link"].to_str().unwrap().to_owned()], &base);
        assert_eq!(
            rsagg_websub::link::find(&links, "self"),
            Some(topic.as_str())
        );
        let (from, until, changes) = payload(&body);
        assert_eq!(changes, [Change::Created]);
        intervals.push((from, until));
    }
    assert_eq!(
        intervals[0].1, intervals[1].0,
        "delivered in order, consecutive"
    );
    hub.shutdown();
}
