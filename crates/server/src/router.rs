//! The router: dispatch by path to the collections served, and the listening server.
//!
//! Collections live under base paths that come from configuration, so instead of a fixed
//! route table one handler takes every request: the two server-wide documents first, then
//! the collection with the longest base path that prefixes the request path, then within
//! it the copies (`r/…`) or the allowlisted documents. Everything else is 404.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode};
use axum::response::Response;
use rsagg_pipeline::capability::capability_list_url;
use tokio::net::TcpListener;

use crate::Error;
use crate::collection::{Collection, check_collections};
use crate::copies::{Copies, serve_copy};
use crate::documents::{
    Generated, Refused, method_not_allowed, object_for, percent_decode, robots, serve_object,
    source_description,
};
use crate::http::{not_found, store_failed, text};

/// Where `rsagg serve` listens unless told otherwise: loopback only, since exposing the
/// server is a deployment decision (a proxy, or an explicit `--listen 0.0.0.0:8080`).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";

struct Served {
    collection: Collection,
    copies: Copies,
    /// `Link: <{base_url}capabilitylist.xml>; rel="resourcesync"` of the copies.
    link: HeaderValue,
}

struct App {
    /// Longest base path first, so the most specific collection answers.
    served: Vec<Served>,
    description: Generated,
    robots: Generated,
}

impl App {
    fn collection_for<'a>(&'a self, path: &'a str) -> Option<(&'a Served, &'a str)> {
        self.served.iter().find_map(move |s| {
            path.strip_prefix(s.collection.base_path())
                .map(|rest| (s, rest))
        })
    }
}

/// The router serving `collections`: `/.well-known/resourcesync`, `/robots.txt` and, under
/// each collection's base path, its published documents and copies. GET and HEAD only.
///
/// Call [`check_collections`] first (as [`Server::bind`] does): of collections sharing a
/// base path, only the first given answers.
pub fn router(collections: Vec<Collection>) -> Router {
    let description = source_description(&collections);
    let robots = robots(&collections);
    let mut served: Vec<Served> = collections
        .into_iter()
        .map(|collection| {
            let link = format!(
                "<{}>; rel=\"resourcesync\"",
                capability_list_url(collection.base_url())
            );
            Served {
                copies: Copies::new(&collection),
                // A base URL that parsed as a URL has no characters a header refuses.
                link: HeaderValue::from_str(&link).unwrap_or_else(|_| HeaderValue::from_static("")),
                collection,
            }
        })
        .collect();
    // Stable: of equal base paths the first given stays first.
    served.sort_by_key(|s| std::cmp::Reverse(s.collection.base_path().len()));
    let app = Arc::new(App {
        served,
        description,
        robots,
    });
    Router::new().fallback(handle).with_state(app)
}

async fn handle(State(app): State<Arc<App>>, request: Request) -> Response {
    let method = request.method();
    let head = if method == Method::GET {
        false
    } else if method == Method::HEAD {
        true
    } else {
        return method_not_allowed();
    };
    let headers = request.headers();
    let path = request.uri().path();
    // Paths are compared as sent, but one that cannot be decoded is malformed everywhere.
    if percent_decode(path).is_none() {
        return text(
            StatusCode::BAD_REQUEST,
            "malformed percent-encoding in the path\n",
        );
    }
    match path {
        "/.well-known/resourcesync" => return app.description.respond(head, headers),
        "/robots.txt" => return app.robots.respond(head, headers),
        _ => {}
    }
    let Some((served, rest)) = app.collection_for(path) else {
        return not_found();
    };
    let objects = served.collection.objects();
    if rest.starts_with("r/") {
        return match served.copies.lookup(rest).await {
            Ok(Some(info)) => serve_copy(objects, &info, &served.link, head, headers).await,
            Ok(None) => not_found(),
            Err(e) => store_failed("looking up a copy", &e),
        };
    }
    match object_for(rest) {
        Ok(object) => serve_object(objects, &object, head, headers).await,
        Err(Refused::BadEncoding) => text(
            StatusCode::BAD_REQUEST,
            "malformed percent-encoding in the path\n",
        ),
        Err(Refused::NotListed) => not_found(),
    }
}

/// A bound listener with the router of the collections it serves.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    router: Router,
}

impl Server {
    /// Checks that `collections` can be served together, then binds `listen`
    /// (`HOST:PORT`; port 0 picks a free one, see [`Server::local_addr`]).
    pub async fn bind(listen: &str, collections: Vec<Collection>) -> Result<Server, Error> {
        check_collections(&collections)?;
        let listener = TcpListener::bind(listen)
            .await
            .map_err(|source| Error::Bind {
                addr: listen.to_owned(),
                source,
            })?;
        Ok(Server {
            listener,
            router: router(collections),
        })
    }

    /// The address actually bound (what `listening http://HOST:PORT` reports).
    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.listener.local_addr().map_err(Error::Serve)
    }

    /// Serves until `shutdown` resolves, then stops accepting and lets requests in flight
    /// finish (graceful shutdown, so a restart does not cut a Destination's download).
    pub async fn run<F>(self, shutdown: F) -> Result<(), Error>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        axum::serve(self.listener, self.router)
            .with_graceful_shutdown(shutdown)
            .await
            .map_err(Error::Serve)
    }
}
