//! The router of `rsagg hub`: a thin adapter from HTTP to [`rsagg_websub::Hub`].
//!
//! ```text
//! POST /      every WebSub and CN 1.0.1 request (subscribe, unsubscribe, both publish
//!             forms); other methods 405 (WebSub 5.1 and CN 1.0.1 4.1 use POST only)
//! GET /healthz   liveness: 200 `ok` while the process answers
//! GET /readyz    readiness: 200 when the hub's store answers, else 503
//! ```
//!
//! Bodies are capped at [`rsagg_websub::HubConfig::max_publish_bytes`] (413 beyond; a
//! form is further capped at `max_form_bytes` by the hub). The connection loop and its
//! limits are `listen.rs`'s, as for `serve`, and so is the bound on the request bytes held
//! at once by all connections together (`budget.rs`; 503 with `Retry-After` beyond it).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rsagg_websub::{Hub, HubRequest};

use crate::Error;
use crate::listen::{Limits, Listeners};

/// The hub's router: `POST /`, `GET /healthz`, `GET /readyz`.
pub fn hub_router(hub: Arc<Hub>) -> Router {
    let limit = hub.config().max_publish_bytes;
    Router::new()
        .route("/", post(handle))
        .route(crate::HEALTHZ, get(|| async { "ok\n" }))
        .route(crate::READYZ, get(ready))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(hub)
}

fn text(status: StatusCode, body: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

async fn handle(State(hub): State<Arc<Hub>>, headers: HeaderMap, body: Bytes) -> Response {
    let request = HubRequest {
        content_type: headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        links: headers
            .get_all(header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect(),
        body,
    };
    let answer = hub.handle(request).await;
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    text(status, format!("{}\n", answer.message))
}

async fn ready(State(hub): State<Arc<Hub>>) -> Response {
    match hub.ready().await {
        Ok(()) => text(StatusCode::OK, "ready\n".into()),
        Err(e) => text(StatusCode::SERVICE_UNAVAILABLE, format!("store: {e}\n")),
    }
}

/// A bound listener for the hub (bound before the hub opens, so `--listen …:0` can give the
/// hub its public URL).
#[derive(Debug)]
pub struct HubServer {
    listeners: Listeners,
}

impl HubServer {
    /// Binds `listen` (`HOST:PORT`; port 0 picks a free one, see [`HubServer::local_addr`]).
    pub async fn bind(listen: &str) -> Result<HubServer, Error> {
        Ok(HubServer {
            listeners: Listeners::bind(listen).await?,
        })
    }

    /// Serves within `limits` (header read timeout, concurrent connections) instead of
    /// [`Limits::default`].
    pub fn with_limits(mut self, limits: Limits) -> HubServer {
        self.listeners.set_limits(limits);
        self
    }

    /// The address actually bound.
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listeners.local_addr()
    }

    /// Also binds `listen` (`HOST:PORT`) for `/healthz` and `/readyz` only, with a
    /// connection pool of their own (see `listen.rs`).
    pub async fn bind_probes(mut self, listen: &str) -> Result<HubServer, Error> {
        self.listeners.bind_probes(listen).await?;
        Ok(self)
    }

    /// The address the probe listener bound, if any.
    pub fn probe_addr(&self) -> Result<Option<SocketAddr>, Error> {
        self.listeners.probe_addr()
    }

    /// Serves `hub` within its [`Limits`] until `shutdown` resolves, lets requests in flight
    /// finish, then stops the hub's background work (its persisted queue stays for the next
    /// start).
    pub async fn run<F>(self, hub: Arc<Hub>, shutdown: F) -> Result<(), Error>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.listeners
            .serve(hub_router(hub.clone()), shutdown)
            .await;
        hub.shutdown();
        Ok(())
    }
}
