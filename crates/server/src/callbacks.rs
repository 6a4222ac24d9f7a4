//! The WebSub callbacks `{base}websub/{upstream}` of `run --follow --listen` (CN 1.0.1 4.2,
//! 4.3; WebSub 5.3, 7).
//!
//! The server knows nothing of subscriptions or of the harvest: whoever runs the server
//! injects a [`PushIntake`] (the harvest's push inbox implements it) for
//! one collection; `serve` injects none, so these paths answer 404 there.
//!
//! - `GET ?hub.mode=…` (verification of intent): the challenge, `text/plain` 200, only when
//!   the intake asked for that subscription; 404 otherwise (WebSub 5.3.1: anything but the
//!   challenge refuses).
//! - `POST` (delivery): the body is read up to [`MAX_PAYLOAD_BYTES`] (413 beyond), handed to
//!   the intake, and answered at once: 202 when queued, 200 when dropped as forged or
//!   unknown (WebSub 7.1: a bad signature still gets a 2xx, so the hub does not retry a
//!   forgery), 503 with `Retry-After` when the queue is full (the hub retries later rather
//!   than rsagg losing a notification).

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
pub use rsagg_websub::intake::{Intake, MAX_PAYLOAD_BYTES, PushIntake};
use rsagg_websub::subscriber::{Answer, Delivery};

use crate::http::{not_found, text};

/// Callbacks of one collection: its name and the intake behind them.
#[derive(Clone)]
pub struct Push {
    /// `collection.name` of the collection whose base path the callbacks live under.
    pub collection: String,
    /// The intake.
    pub intake: std::sync::Arc<dyn PushIntake>,
    /// The intake's counters as they are now, for `/metrics` (instead of those the stats
    /// object kept at the follower's last pass, which lag behind a lease that just began).
    pub stats: Option<LivePushStats>,
}

/// Reads the push intake's counters (the harvest's inbox, which the server does not know).
pub type LivePushStats = std::sync::Arc<dyn Fn() -> rsagg_layout::report::PushStats + Send + Sync>;

impl std::fmt::Debug for Push {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Push")
            .field("collection", &self.collection)
            .finish_non_exhaustive()
    }
}

/// The path segment under the base path.
pub(crate) const SEGMENT: &str = "websub/";

/// Answers a request at `{base}websub/{upstream}` (`upstream` already cut from the path).
pub(crate) async fn callback(
    intake: &dyn PushIntake,
    upstream: &str,
    request: Request,
) -> Response {
    if upstream.is_empty() || upstream.contains('/') || !intake.has_callback(upstream) {
        return not_found();
    }
    let (parts, body) = request.into_parts();
    if parts.method == Method::GET {
        let query = parts.uri.query().unwrap_or("");
        return match intake.verify(upstream, query) {
            Some(Answer::Confirm(challenge)) => {
                let mut r = text(StatusCode::OK, challenge);
                r.headers_mut()
                    .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                r
            }
            Some(Answer::Acknowledge) => text(StatusCode::OK, ""),
            Some(Answer::Refuse) | None => not_found(),
        };
    }
    if parts.method != Method::POST {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "GET or POST\n");
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, POST"));
        return r;
    }
    let body = match axum::body::to_bytes(Body::new(body), MAX_PAYLOAD_BYTES).await {
        Ok(b) => b,
        Err(_) => {
            return text(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("a notification may have at most {MAX_PAYLOAD_BYTES} bytes\n"),
            );
        }
    };
    let links = parts
        .headers
        .get_all(header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let signature = parts
        .headers
        .get("x-hub-signature")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match intake.deliver(
        upstream,
        Delivery {
            links,
            signature,
            body,
        },
    ) {
        Intake::Queued => text(StatusCode::ACCEPTED, "queued\n"),
        Intake::Dropped(_) => text(StatusCode::OK, "dropped\n"),
        Intake::Busy => {
            let mut r = text(StatusCode::SERVICE_UNAVAILABLE, "busy; retry later\n");
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            r
        }
        _ => not_found(),
    }
}
