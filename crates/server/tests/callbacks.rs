//! The WebSub callbacks `{base}websub/{upstream}` through the axum router, with the
//! pipeline's real [`Inbox`] injected (as `run --follow --listen` does): verification
//! answered only for subscriptions asked for, deliveries authenticated, queued, dropped or
//! refused with the status WebSub expects.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use rsagg_pipeline::{Inbox, Pipeline};
use rsagg_server::{Collection, Push, router, router_with};
use rsagg_websub::signature::{Algorithm, sign};
use tower::ServiceExt;
use url::Url;

const BASE: &str = "https://agg.example.org/maps/";
const TOPIC: &str = "http://up.example/change/";
const HUB: &str = "http://127.0.0.1:9/";

fn pipeline() -> Pipeline {
    let text = format!(
        "[collection]\nname = \"maps\"\nbase_url = \"{BASE}\"\n\n[store]\nurl = \"memory:///\"\n\n\
         [[upstream]]\nname = \"museum\"\nurl = \"http://up.example/\"\n\n\
         [[upstream]]\nname = \"quiet\"\nurl = \"http://quiet.example/\"\npush = false\n"
    );
    Pipeline::parse(Path::new("maps.toml"), &text).unwrap()
}

fn app(inbox: &Arc<Inbox>) -> Router {
    let objects = Arc::new(object_store::memory::InMemory::new());
    let c = Collection::new("maps", BASE, objects).unwrap();
    router_with(
        vec![c],
        Some(Push {
            collection: "maps".into(),
            intake: inbox.clone(),
            stats: Some({
                let inbox = inbox.clone();
                Arc::new(move || inbox.stats())
            }),
        }),
    )
}

/// A subscription of `museum` to TOPIC, requested (not yet verified); returns its secret.
fn asked(inbox: &Inbox) -> String {
    let r = inbox
        .subscriber()
        .prepare(
            "museum",
            &Url::parse(TOPIC).unwrap(),
            &Url::parse(HUB).unwrap(),
            &Url::parse(&format!("{BASE}websub/museum")).unwrap(),
            Duration::from_secs(3600),
            rsagg_websub::subscriber::unix_millis(),
        )
        .unwrap();
    r.secret.expect("a loopback hub gets a secret")
}

async fn send(app: &Router, req: Request<Body>) -> (StatusCode, String) {
    let r = app.clone().oneshot(req).await.unwrap();
    let status = r.status();
    let body = axum::body::to_bytes(r.into_body(), 1 << 20).await.unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn verification(path: &str, mode: &str, topic: &str) -> Request<Body> {
    let query = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("hub.mode", mode)
        .append_pair("hub.topic", topic)
        .append_pair("hub.challenge", "chall3nge")
        .append_pair("hub.lease_seconds", "600")
        .finish();
    Request::get(format!("{path}?{query}"))
        .body(Body::empty())
        .unwrap()
}

fn delivery(path: &str, body: &'static [u8], signature: Option<String>) -> Request<Body> {
    let mut b = Request::post(path)
        .header(header::CONTENT_TYPE, "application/xml")
        .header(
            header::LINK,
            format!("<{TOPIC}>; rel=\"self\", <{HUB}>; rel=\"hub\""),
        );
    if let Some(s) = signature {
        b = b.header("X-Hub-Signature", s);
    }
    b.body(Body::from(body)).unwrap()
}

#[tokio::test]
async fn verification_is_echoed_only_for_subscriptions_asked_for() {
    let inbox = Inbox::new(&pipeline()).unwrap();
    let app = app(&inbox);
    let path = "/maps/websub/museum";
    // Not asked yet.
    let (status, _) = send(&app, verification(path, "subscribe", TOPIC)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let metrics = || async {
        let (status, text) =
            send(&app, Request::get("/metrics").body(Body::empty()).unwrap()).await;
        assert_eq!(status, StatusCode::OK);
        text
    };
    let text = metrics().await;
    assert!(
        text.contains("rsagg_push_subscriptions{collection=\"maps\"} 0\n"),
        "{text}"
    );
    asked(&inbox);
    // Another topic, an upstream without push, an unknown upstream: 404.
    for (p, t) in [
        (path, "http://up.example/other/"),
        ("/maps/websub/quiet", TOPIC),
        ("/maps/websub/nobody", TOPIC),
        ("/maps/websub/", TOPIC),
    ] {
        let (status, _) = send(&app, verification(p, "subscribe", t)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{p} {t}");
    }
    // The one asked for: the challenge, as text/plain.
    let r = app
        .clone()
        .oneshot(verification(path, "subscribe", TOPIC))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(
        r.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
    let body = axum::body::to_bytes(r.into_body(), 1024).await.unwrap();
    assert_eq!(&body[..], b"chall3nge");
    let rec = inbox.subscriber().record("museum", TOPIC).unwrap();
    assert_eq!(rec.lease_granted, Some(600));
    // /metrics shows the live lease at once, not after the follower's next pass (no stats
    // object was ever written to this store).
    let text = metrics().await;
    assert!(
        text.contains("rsagg_push_subscriptions{collection=\"maps\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "rsagg_push_notifications_total{collection=\"maps\",outcome=\"received\"} 0\n"
        ),
        "{text}"
    );
    // Someone else asking to unsubscribe rsagg: refused.
    let (status, _) = send(&app, verification(path, "unsubscribe", TOPIC)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn deliveries_are_queued_dropped_or_refused_as_websub_says() {
    let inbox = Inbox::new(&pipeline()).unwrap();
    let app = app(&inbox);
    let path = "/maps/websub/museum";
    let secret = asked(&inbox);
    let body: &'static [u8] = b"<urlset/>";
    // Signed with each algorithm: queued (202).
    for alg in [
        Algorithm::Sha1,
        Algorithm::Sha256,
        Algorithm::Sha384,
        Algorithm::Sha512,
    ] {
        let sig = sign(alg, secret.as_bytes(), body);
        let (status, _) = send(&app, delivery(path, body, Some(sig))).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{alg:?}");
    }
    // Forged or unsigned: 2xx all the same, dropped and counted.
    let forged = sign(Algorithm::Sha256, b"guess", body);
    let (status, text) = send(&app, delivery(path, body, Some(forged))).await;
    assert_eq!((status, text.trim()), (StatusCode::OK, "dropped"));
    let (status, _) = send(&app, delivery(path, body, None)).await;
    assert_eq!(status, StatusCode::OK);
    let stats = inbox.stats();
    assert_eq!(stats.received, 6);
    assert_eq!(stats.dropped_signature, 2);
    // No callback: 404; other methods: 405.
    let (status, _) = send(&app, delivery("/maps/websub/quiet", body, None)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let put = Request::builder()
        .method(Method::PUT)
        .uri(path)
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&app, put).await.0, StatusCode::METHOD_NOT_ALLOWED);
    // Too large: 413.
    let huge: &'static [u8] =
        Box::leak(vec![b' '; rsagg_server::MAX_PAYLOAD_BYTES + 1].into_boxed_slice());
    let (status, _) = send(&app, delivery(path, huge, None)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    // The queue full (nobody drains it here): 503 with Retry-After, so the hub retries.
    let sig = sign(Algorithm::Sha256, secret.as_bytes(), body);
    let mut last = StatusCode::ACCEPTED;
    for _ in 0..rsagg_harvest::push::QUEUE {
        last = send(&app, delivery(path, body, Some(sig.clone()))).await.0;
        if last != StatusCode::ACCEPTED {
            break;
        }
    }
    assert_eq!(last, StatusCode::SERVICE_UNAVAILABLE);
    let r = app
        .clone()
        .oneshot(delivery(path, body, Some(sig)))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(r.headers()[header::RETRY_AFTER], "1");
    assert!(inbox.stats().busy >= 2);
}

#[tokio::test]
async fn serve_has_no_callbacks() {
    let inbox = Inbox::new(&pipeline()).unwrap();
    asked(&inbox);
    let objects = Arc::new(object_store::memory::InMemory::new());
    let app = router(vec![Collection::new("maps", BASE, objects).unwrap()]);
    let (status, _) = send(
        &app,
        verification("/maps/websub/museum", "subscribe", TOPIC),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = send(&app, delivery("/maps/websub/museum", b"<urlset/>", None)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
}
