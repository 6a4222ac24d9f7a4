//! Helpers shared by the server's integration tests.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, Method, Request, StatusCode};
use tower::ServiceExt;

/// Serves the files `files(origin)` returns (path → body; 404 elsewhere) on a loopback port,
/// as a static upstream Source; returns its origin (`http://127.0.0.1:PORT`). The documents
/// name their own origin, hence the closure.
// Not every test binary serves files.
#[allow(dead_code)]
pub async fn serve_files(files: impl FnOnce(&str) -> HashMap<String, Vec<u8>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let files = Arc::new(files(&origin));
    let app = Router::new().fallback(move |req: Request<Body>| {
        let files = files.clone();
        async move {
            match files.get(req.uri().path()) {
                Some(b) => (StatusCode::OK, b.clone()),
                None => (StatusCode::NOT_FOUND, b"no".to_vec()),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    origin
}

/// What a router answered: status, headers, and the body (as text by default, the bytes
/// with [`request_with`]).
pub struct Answer<B = String> {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: B,
}

impl<B> Answer<B> {
    /// The value of header `name`, which must be there.
    // Each test binary compiles this module; not every one reads the headers.
    #[allow(dead_code)]
    pub fn header(&self, name: HeaderName) -> &str {
        self.headers
            .get(&name)
            .unwrap_or_else(|| panic!("no {name} in {:?}", self.headers))
            .to_str()
            .unwrap()
    }
}

/// `method path` with `headers` through `app` (`oneshot`), body read whole, as bytes.
pub async fn request_with(
    app: &Router,
    method: Method,
    path: &str,
    headers: &[(HeaderName, &str)],
) -> Answer<Vec<u8>> {
    let mut b = Request::builder().method(method).uri(path);
    for (k, v) in headers {
        b = b.header(k, *v);
    }
    let r = app
        .clone()
        .oneshot(b.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = r.status();
    let headers = r.headers().clone();
    let body = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    Answer {
        status,
        headers,
        body,
    }
}

/// `method path` through `app`, the body as text.
// As above: not every test binary sends requests of its own.
#[allow(dead_code)]
pub async fn request(app: &Router, method: Method, path: &str) -> Answer {
    let a = request_with(app, method, path, &[]).await;
    Answer {
        status: a.status,
        headers: a.headers,
        body: String::from_utf8(a.body).unwrap(),
    }
}

/// `GET path` through `app`, the body as text.
#[allow(dead_code)]
pub async fn get(app: &Router, path: &str) -> Answer {
    request(app, Method::GET, path).await
}
