//! Helpers shared by the server's integration tests.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use tower::ServiceExt;

/// Serves the files `files(origin)` returns (path → body; 404 elsewhere) on a loopback port,
/// as a static upstream Source; returns its origin (`http://127.0.0.1:PORT`). The documents
/// name their own origin, hence the closure.
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

/// What a router answered: status, headers, body as text.
pub struct Answer {
    pub status: StatusCode,
    // Each test binary compiles this module; not every one reads the headers.
    #[allow(dead_code)]
    pub headers: HeaderMap,
    pub body: String,
}

/// `method path` through `app` (`oneshot`), body read whole.
pub async fn request(app: &Router, method: Method, path: &str) -> Answer {
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
    let status = r.status();
    let headers = r.headers().clone();
    let body = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

/// `GET path` through `app`.
pub async fn get(app: &Router, path: &str) -> Answer {
    request(app, Method::GET, path).await
}
