//! The publishing side of WebSub for a ResourceSync Source: one request to a hub saying that
//! a topic has new content, in either form a hub may understand, and what its answer means
//! for the caller's retry loop.
//!
//! - [`PublishForm::ResourceSync`]: Change Notification 1.0.1 section 4.1. The payload is
//!   the body of a POST to the hub URI with `Content-Type: application/xml` and one `Link`
//!   header `<topic>; rel="self", <hub>; rel="hub"` (Example 2). The hub answers 200 when it
//!   took the notification, 3xx/4xx/5xx when not.
//! - [`PublishForm::WebSub`]: the de-facto WebSub publish request (WebSub leaves publishing
//!   to the hub): an `application/x-www-form-urlencoded` POST of `hub.mode=publish` naming
//!   the topic twice, as `hub.url` (the PubSubHubbub 0.3 name most hubs read) and as
//!   `hub.topic` (the name flask-websub 0.4 reads: without it, it answers 400 "Missing form
//!   argument: hub.topic"); the hub answers 202, then GETs the topic. The payload is not
//!   sent: the hub fetches it from the topic URI.
//!
//! One call is one attempt: the caller (rsagg's notification outbox) owns ordering,
//! persistence and backoff. Redirects are not followed: spec 4.1 counts a 3xx as "not
//! successful", and a publish is not something to replay at another address unasked.

use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, LINK, RETRY_AFTER};

use crate::{Error, link};

/// Which publish request the hub understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishForm {
    /// Change Notification 1.0.1 section 4.1: POST the payload with `Link` rel `self`/`hub`.
    ResourceSync,
    /// WebSub `hub.mode=publish` with `hub.url` and `hub.topic` (form-encoded); the hub GETs
    /// the topic.
    WebSub,
}

/// What one attempt came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    /// The hub answered 2xx: it has taken the notification (200 for spec 4.1, 202 for a
    /// WebSub publish).
    Accepted {
        /// The status it answered.
        status: u16,
    },
    /// Worth retrying as is: the hub could not be reached, timed out, answered 5xx, 429 or
    /// 408. `retry_after` is the hub's `Retry-After` (delta-seconds) when it gave one.
    Retry {
        /// The status, when there was an answer.
        status: Option<u16>,
        /// The hub's `Retry-After`, when given in seconds.
        retry_after: Option<Duration>,
        /// What happened, naming the hub.
        message: String,
    },
    /// The hub refused the request itself (3xx, other 4xx): sending the same request again
    /// will most likely fail the same way (wrong hub URL, topic not allowed, payload refused).
    /// The caller still retries (slowly), since dropping a notification is worse than a
    /// stuck outbox an operator can see, but says so loudly.
    Refused {
        /// The status.
        status: u16,
        /// What happened, naming the hub, with the start of the hub's answer.
        message: String,
    },
}

impl Attempt {
    /// True for [`Attempt::Accepted`].
    pub fn accepted(&self) -> bool {
        matches!(self, Attempt::Accepted { .. })
    }
}

/// Most bytes of a refusal's body quoted in [`Attempt::Refused`]'s message.
const QUOTED: usize = 200;

/// An HTTP client publishing to hubs.
#[derive(Debug, Clone)]
pub struct Publisher {
    client: reqwest::Client,
}

impl Publisher {
    /// A publisher whose every request gives up after `timeout` (connect included).
    pub fn new(timeout: Duration) -> Result<Publisher, Error> {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .user_agent(concat!("rsagg/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(Error::Client)?;
        Ok(Publisher { client })
    }

    /// One publish request to `hub` for `topic` in `form`. `payload` is the body of a
    /// [`PublishForm::ResourceSync`] request (ignored for [`PublishForm::WebSub`], whose hub
    /// fetches the topic instead).
    pub async fn publish(
        &self,
        hub: &str,
        topic: &str,
        form: PublishForm,
        payload: Bytes,
    ) -> Attempt {
        let request = match form {
            PublishForm::ResourceSync => self
                .client
                .post(hub)
                .header(CONTENT_TYPE, "application/xml")
                .header(LINK, link::format(topic, hub))
                .body(payload),
            PublishForm::WebSub => {
                let body = url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("hub.mode", "publish")
                    .append_pair("hub.url", topic)
                    .append_pair("hub.topic", topic)
                    .finish();
                self.client
                    .post(hub)
                    .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
                    .body(body)
            }
        };
        let response = match request.send().await {
            Ok(r) => r,
            Err(e) => {
                return Attempt::Retry {
                    status: None,
                    retry_after: None,
                    message: format!("hub {hub}: {}", error_chain(&e)),
                };
            }
        };
        let status = response.status();
        if status.is_success() {
            return Attempt::Accepted {
                status: status.as_u16(),
            };
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        let body = response.bytes().await.unwrap_or_default();
        let quoted = String::from_utf8_lossy(&body[..body.len().min(QUOTED)])
            .trim()
            .to_owned();
        let message = if quoted.is_empty() {
            format!("hub {hub} answered {status}")
        } else {
            format!("hub {hub} answered {status}: {quoted}")
        };
        if status.is_server_error()
            || status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::REQUEST_TIMEOUT
        {
            Attempt::Retry {
                status: Some(status.as_u16()),
                retry_after,
                message,
            }
        } else {
            Attempt::Refused {
                status: status.as_u16(),
                message: format!(
                    "{message} (Change Notification 1.0.1 section 4.1: the hub did not take the notification)"
                ),
            }
        }
    }
}

/// The delay before retry number `failures` (1 = after the first failure): `min · 2^(n−1)`,
/// capped at `max`, times a random factor in [0.5, 1] (so publishers that failed together
/// do not retry together), never below `min`. The hub's delivery workers use the same.
pub fn backoff(failures: u32, min: Duration, max: Duration) -> Duration {
    crate::delivery::backoff(failures, min, max)
}

/// `e` with its sources (reqwest's own message hides the cause: "error sending request").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::body::Bytes as Body;
    use axum::http::{HeaderMap, StatusCode as S};
    use axum::routing::post;

    use super::*;

    type Seen = Arc<Mutex<Vec<(HeaderMap, Body)>>>;

    /// A hub on loopback answering the statuses of `answers` in turn (the last one
    /// forever), recording every request.
    async fn hub(answers: Vec<(u16, Option<&'static str>)>) -> (String, Seen) {
        let seen: Seen = Arc::default();
        let count = Arc::new(Mutex::new(0usize));
        let record = seen.clone();
        let app = Router::new().route(
            "/hub",
            post(move |headers: HeaderMap, body: Body| {
                let record = record.clone();
                let count = count.clone();
                let answers = answers.clone();
                async move {
                    record.lock().unwrap().push((headers, body));
                    let mut n = count.lock().unwrap();
                    let (status, retry_after) = answers[(*n).min(answers.len() - 1)];
                    *n += 1;
                    let mut h = HeaderMap::new();
                    if let Some(r) = retry_after {
                        h.insert("retry-after", r.parse().unwrap());
                    }
                    (S::from_u16(status).unwrap(), h, "hub says so")
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}/hub"), seen)
    }

    #[tokio::test]
    async fn the_resourcesync_form_posts_the_payload_with_both_links() {
        let (url, seen) = hub(vec![
            (503, Some("7")),
            (429, None),
            (404, None),
            (200, None),
        ])
        .await;
        let p = Publisher::new(Duration::from_secs(5)).unwrap();
        let topic = "https://agg.example.org/maps/change/";
        let payload = Bytes::from_static(b"<urlset/>");
        let send = || p.publish(&url, topic, PublishForm::ResourceSync, payload.clone());
        assert_eq!(
            send().await,
            Attempt::Retry {
                status: Some(503),
                retry_after: Some(Duration::from_secs(7)),
                message: format!("hub {url} answered 503 Service Unavailable: hub says so"),
            }
        );
        assert!(matches!(
            send().await,
            Attempt::Retry {
                status: Some(429),
                retry_after: None,
                ..
            }
        ));
        let refused = send().await;
        assert!(
            matches!(&refused, Attempt::Refused { status: 404, message } if message.contains("section 4.1")),
            "{refused:?}"
        );
        assert_eq!(send().await, Attempt::Accepted { status: 200 });
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 4);
        let (headers, body) = &seen[3];
        assert_eq!(headers["content-type"], "application/xml");
        assert_eq!(
            headers["link"],
            format!("<{topic}>; rel=\"self\", <{url}>; rel=\"hub\"").as_str()
        );
        assert_eq!(headers.get_all("link").iter().count(), 1, "one Link header");
        assert_eq!(&body[..], b"<urlset/>");
    }

    #[tokio::test]
    async fn the_websub_form_names_the_topic_and_sends_no_payload() {
        let (url, seen) = hub(vec![(202, None)]).await;
        let p = Publisher::new(Duration::from_secs(5)).unwrap();
        let topic = "https://agg.example.org/maps/change/";
        let a = p
            .publish(
                &url,
                topic,
                PublishForm::WebSub,
                Bytes::from_static(b"<urlset/>"),
            )
            .await;
        assert_eq!(a, Attempt::Accepted { status: 202 });
        let seen = seen.lock().unwrap();
        let (headers, body) = &seen[0];
        assert_eq!(headers["content-type"], "application/x-www-form-urlencoded");
        assert_eq!(
            std::str::from_utf8(body).unwrap(),
            "hub.mode=publish&hub.url=https%3A%2F%2Fagg.example.org%2Fmaps%2Fchange%2F\
             &hub.topic=https%3A%2F%2Fagg.example.org%2Fmaps%2Fchange%2F"
        );
    }

    #[tokio::test]
    async fn an_unreachable_hub_is_worth_a_retry() {
        // A port nobody listens on: bind one, note it, close it.
        let addr = {
            let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        let p = Publisher::new(Duration::from_secs(2)).unwrap();
        let hub = format!("http://{addr}/");
        let a = p
            .publish(&hub, "http://t/", PublishForm::ResourceSync, Bytes::new())
            .await;
        match a {
            Attempt::Retry {
                status: None,
                message,
                ..
            } => assert!(message.contains(&hub), "{message}"),
            other => panic!("{other:?}"),
        }
    }
}
