//! The change-notification topic URI of a collection, `{base_url}change/` (Change
//! Notification 1.0.1 section 4.1).
//!
//! HEAD and GET answer `200 OK` with `Content-Type: application/xml` (the payloads' type) and
//! one `Link` header `<{base_url}change/>; rel="self", <hub>; rel="hub"`; the body is the
//! most recent payload the publisher asked the hub to take (`notify/latest.xml`), or nothing
//! with `Content-Length: 0` before the first (both as section 4.1 allows). Every answer is
//! `200`, never `304`: a hub verifying the topic or fetching it for a WebSub publish is told
//! what the spec says it is told. Collections without `[notify]` have no topic (404).
//!
//! A GET that serves a payload records that payload's `until` in `notify/fetched.json`
//! ([`note_fetched`]), so a publisher in the websub form (a stock hub
//! GETs the topic after `hub.mode=publish`) knows its hub fetched the payload before the topic
//! moves on, even when that publisher is another process (`rsagg run` beside `rsagg serve`).
//! It is written only when the payload served differs from the one this process last
//! recorded, so repeated GETs do not write. This is the one object the server writes: a plain
//! object beside the published ones, never the state database, so it cannot fence the job.
//! The outbox and the channel record under `notify/` are never served.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_layout::meta::{Fetched, payload_until};
use rsagg_layout::paths::{FETCHED, LATEST, topic_url};
use rsagg_model::W3cDateTime;
use rsagg_store::documents::put_json;

use crate::http::store_failed;

/// The topic of one collection.
#[derive(Debug)]
pub(crate) struct Topic {
    objects: Arc<dyn ObjectStore>,
    /// `<topic>; rel="self", <hub>; rel="hub"`.
    link: HeaderValue,
    /// The `until` of the payload this process last recorded as fetched.
    recorded: tokio::sync::Mutex<Option<W3cDateTime>>,
}

impl Topic {
    /// The topic of the collection at `base_url` publishing to `hub` from `objects`.
    pub fn new(objects: Arc<dyn ObjectStore>, base_url: &str, hub: &str) -> Topic {
        let link = rsagg_websub::link::format(&topic_url(base_url), hub);
        Topic {
            objects,
            // A base URL and hub that parsed as URLs have no characters a header refuses.
            link: HeaderValue::from_str(&link).unwrap_or_else(|_| HeaderValue::from_static("")),
            recorded: tokio::sync::Mutex::new(None),
        }
    }

    /// Answers GET or HEAD (`head`).
    pub async fn respond(&self, head: bool) -> Response {
        let path = Path::from(LATEST);
        let failed = |source| {
            store_failed(
                "reading the topic's latest payload",
                &crate::Error::ObjectStore {
                    path: LATEST.to_owned(),
                    source,
                },
            )
        };
        if head {
            return match self.objects.head(&path).await {
                Ok(meta) => self.answer(meta.size, Body::empty()),
                Err(object_store::Error::NotFound { .. }) => self.answer(0, Body::empty()),
                Err(e) => failed(e),
            };
        }
        let body = match self.objects.get(&path).await {
            Ok(r) => match r.bytes().await {
                Ok(b) => b,
                Err(e) => return failed(e),
            },
            Err(object_store::Error::NotFound { .. }) => return self.answer(0, Body::empty()),
            Err(e) => return failed(e),
        };
        self.record(&body).await;
        self.answer(body.len() as u64, Body::from(body))
    }

    /// Records `payload` as fetched unless it is the one last recorded.
    async fn record(&self, payload: &[u8]) {
        let mut recorded = self.recorded.lock().await;
        let until = payload_until(payload);
        if until.is_none() || until == *recorded {
            return;
        }
        match note_fetched(self.objects.as_ref(), payload).await {
            Ok(noted) => *recorded = noted,
            Err(e) => tracing::warn!(error = %e, "recording that the topic was fetched"),
        }
    }

    fn answer(&self, len: u64, body: Body) -> Response {
        let mut r = Response::new(body);
        *r.status_mut() = StatusCode::OK;
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/xml"),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        h.insert(header::LINK, self.link.clone());
        // The body changes with every notification.
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        r
    }
}

/// What the topic route calls when it served `payload` by GET: records its `until` in
/// [`FETCHED`], for a publisher in the websub form waiting for its hub to fetch the topic.
/// Returns what was recorded (`None` for a body that is not a payload: nothing written).
///
/// This is the one object `rsagg serve` writes. It cannot fence `rsagg run`: it is a plain
/// object beside the published documents, not the state database, and `run` only reads it.
async fn note_fetched(
    objects: &dyn ObjectStore,
    payload: &[u8],
) -> Result<Option<rsagg_model::W3cDateTime>, rsagg_store::Error> {
    let Some(until) = payload_until(payload) else {
        return Ok(None);
    };
    put_json(objects, FETCHED, &Fetched { until }).await?;
    Ok(Some(until))
}

#[cfg(test)]
mod tests {
    use axum::http::{Method, Request};
    use object_store::memory::InMemory;
    use tower::ServiceExt;

    use super::*;
    use crate::{Collection, router};

    const BASE: &str = "https://agg.example.org/maps/";
    const HUB: &str = "https://hub.example.org/websub/";
    const PAYLOAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
<rs:ln rel="up" href="https://agg.example.org/maps/capabilitylist.xml"/>
<rs:md capability="change-notification" from="2026-01-03T00:00:00Z" until="2026-01-03T00:10:00.000001Z"/>
<url><loc>https://agg.example.org/maps/r/up/http/up.example.org/1</loc><rs:md change="created" datetime="2026-01-03T00:07:22Z"/></url>
</urlset>
"#;

    async fn request(app: &axum::Router, method: Method, path: &str) -> (Response, Vec<u8>) {
        let r = app
            .clone()
            .oneshot(
                Request::builder()
                    .method(method)
                    .uri(path)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let (parts, body) = r.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
        (Response::from_parts(parts, Body::empty()), bytes.to_vec())
    }

    fn assert_topic_headers(r: &Response, len: usize) {
        assert_eq!(r.status(), StatusCode::OK);
        let h = r.headers();
        assert_eq!(h[header::CONTENT_TYPE], "application/xml");
        assert_eq!(h[header::CONTENT_LENGTH], len.to_string().as_str());
        assert_eq!(
            h[header::LINK],
            format!("<{BASE}change/>; rel=\"self\", <{HUB}>; rel=\"hub\"").as_str()
        );
        // Read back as a hub reads it (CN 1.0.1 4.1: both links on the topic URI).
        let base = url::Url::parse(BASE).unwrap();
        let links =
            rsagg_websub::link::parse(&[h[header::LINK].to_str().unwrap().to_owned()], &base);
        assert_eq!(
            rsagg_websub::link::find(&links, "self"),
            Some(format!("{BASE}change/").as_str())
        );
        assert_eq!(rsagg_websub::link::find(&links, "hub"), Some(HUB));
    }

    async fn fetched(objects: &Arc<dyn ObjectStore>) -> Option<Fetched> {
        rsagg_store::documents::get_json(objects.as_ref(), FETCHED)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_topic_answers_with_both_links_and_the_latest_payload() {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let c = Collection::new("maps", BASE, objects.clone())
            .unwrap()
            .with_hub(HUB);
        let app = router(vec![c]);

        // Before the first payload: 200 with an empty body.
        for method in [Method::HEAD, Method::GET] {
            let (r, body) = request(&app, method, "/maps/change/").await;
            assert_topic_headers(&r, 0);
            assert!(body.is_empty());
        }
        assert_eq!(fetched(&objects).await, None);

        objects
            .put(&Path::from(LATEST), PAYLOAD.as_bytes().to_vec().into())
            .await
            .unwrap();
        let (r, body) = request(&app, Method::HEAD, "/maps/change/").await;
        assert_topic_headers(&r, PAYLOAD.len());
        assert!(body.is_empty());
        assert_eq!(fetched(&objects).await, None, "a HEAD fetches nothing");

        let (r, body) = request(&app, Method::GET, "/maps/change/").await;
        assert_topic_headers(&r, PAYLOAD.len());
        assert_eq!(body, PAYLOAD.as_bytes());
        let until = W3cDateTime::parse("2026-01-03T00:10:00.000001Z")
            .unwrap()
            .value;
        assert_eq!(fetched(&objects).await, Some(Fetched { until }));

        // The same payload again: not written again.
        objects.delete(&Path::from(FETCHED)).await.unwrap();
        request(&app, Method::GET, "/maps/change/").await;
        assert_eq!(fetched(&objects).await, None, "repeated GETs do not write");
        // The next payload is recorded.
        let next = PAYLOAD.replace("00:10:00.000001Z", "00:11:00Z");
        objects
            .put(&Path::from(LATEST), next.into_bytes().into())
            .await
            .unwrap();
        request(&app, Method::GET, "/maps/change/").await;
        let until = W3cDateTime::parse("2026-01-03T00:11:00Z").unwrap().value;
        assert_eq!(fetched(&objects).await, Some(Fetched { until }));
    }

    #[tokio::test]
    async fn no_topic_without_a_hub_and_the_outbox_is_never_served() {
        let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        for name in [
            LATEST,
            "notify/channel.json",
            "notify/outbox/00000000000000000001.xml",
        ] {
            objects
                .put(&Path::from(name), PAYLOAD.as_bytes().to_vec().into())
                .await
                .unwrap();
        }
        let with = Collection::new("maps", BASE, objects.clone())
            .unwrap()
            .with_hub(HUB);
        let without = Collection::new("books", "https://agg.example.org/books/", objects).unwrap();
        let app = router(vec![with, without]);
        let (r, _) = request(&app, Method::GET, "/books/change/").await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND);
        for path in [
            "/maps/notify/latest.xml",
            "/maps/notify/channel.json",
            "/maps/notify/outbox/00000000000000000001.xml",
            "/maps/change",
            "/maps/change/x",
        ] {
            let (r, _) = request(&app, Method::GET, path).await;
            assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        }
        let (r, _) = request(&app, Method::POST, "/maps/change/").await;
        assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    }
}
