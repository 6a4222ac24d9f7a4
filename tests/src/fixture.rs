//! An in-process HTTP upstream over a directory, with scripted behaviour.

use std::collections::{HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, Response, StatusCode, header};
use tokio::sync::oneshot;

/// A scripted response that replaces the normal one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: Vec<(String, String)>,
    /// Response body.
    pub body: String,
}

impl Failure {
    /// A bare status (body: the status line).
    pub fn status(status: u16) -> Failure {
        Failure {
            status,
            headers: Vec::new(),
            body: format!("scripted {status}\n"),
        }
    }

    /// `429 Too Many Requests` with `Retry-After: SECS`.
    pub fn too_many_requests(retry_after_secs: u64) -> Failure {
        Failure::status(429).with_header("Retry-After", &retry_after_secs.to_string())
    }

    /// `503 Service Unavailable` with `Retry-After: SECS`.
    pub fn unavailable(retry_after_secs: u64) -> Failure {
        Failure::status(503).with_header("Retry-After", &retry_after_secs.to_string())
    }

    /// A redirect (`status` 301, 302, 303, 307 or 308) to `location`.
    pub fn redirect(status: u16, location: &str) -> Failure {
        Failure::status(status).with_header("Location", location)
    }

    /// Add a response header.
    pub fn with_header(mut self, name: &str, value: &str) -> Failure {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Replace the body.
    pub fn with_body(mut self, body: &str) -> Failure {
        self.body = body.to_string();
        self
    }
}

/// When a path is sent with `Content-Encoding: gzip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Gzip {
    /// Never (the default).
    #[default]
    Off,
    /// When the request's `Accept-Encoding` names gzip.
    IfAccepted,
    /// Always, whatever the request says (a misbehaving server).
    Always,
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct RequestRecord {
    /// `GET`, `HEAD`, …
    pub method: String,
    /// The URL path (not decoded).
    pub path: String,
    /// The query string, if any.
    pub query: Option<String>,
    /// Request headers, names in lower case.
    pub headers: Vec<(String, String)>,
    /// The status answered.
    pub status: u16,
    /// When the request arrived.
    pub received: std::time::Instant,
    /// When its answer was ready (after any delay of its path).
    pub answered: std::time::Instant,
}

impl RequestRecord {
    /// The first value of request header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default, Clone)]
struct Rule {
    headers: Vec<(String, String)>,
    once: VecDeque<Failure>,
    always: Option<Failure>,
    gzip: Gzip,
    content_type: Option<String>,
    delay: Option<Duration>,
}

#[derive(Debug)]
struct Shared {
    root: PathBuf,
    rules: Mutex<HashMap<String, Rule>>,
    hits: Mutex<HashMap<String, usize>>,
    requests: Mutex<Vec<RequestRecord>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An HTTP server on `127.0.0.1:PORT` (a free port) serving the files of a directory, for
/// upstream Sources with exactly the documents and the misbehaviour a test needs.
///
/// - Runs on **its own thread and tokio runtime** (started by [`FixtureServer::start`], which is
///   not async and works from sync and async tests alike); Drop stops it and joins the thread.
/// - GET and HEAD of `/a/b.xml` serve `ROOT/a/b.xml` (`..` is refused; a directory serves its
///   `index.html`); other methods get 405. Files are read per request, so a test may rewrite
///   the tree between runs.
/// - `Content-Type` by extension: `.xml` and the extension-less `/.well-known/resourcesync` →
///   `application/xml`, `.html`/`.htm` → `text/html; charset=utf-8`, `.txt` →
///   `text/plain; charset=utf-8`, `.json`, `.zip`, `.gz`; else `application/octet-stream`
///   ([`FixtureServer::set_content_type`] overrides).
/// - Validators: a strong `ETag` from the content and `Last-Modified` from the file's mtime;
///   `If-None-Match` (checked first) and `If-Modified-Since` answer 304.
/// - Per path (keys are URL paths; a missing leading `/` is added): extra response headers
///   (e.g. `Link: <…>; rel="resourcesync"`), failures for the next N requests or for all,
///   gzip, a delay. Every request counts a hit for its path and is recorded, failures and 304s
///   included.
#[derive(Debug)]
pub struct FixtureServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    _thread: ServerThread,
    _dir: Option<tempfile::TempDir>,
}

/// An axum router served on `127.0.0.1:PORT` (a free port) by a thread of its own with its own
/// current-thread tokio runtime, so it can be started and stopped from sync and async code
/// alike and keeps answering while the caller blocks (a hub's verification GET arrives while
/// the test is still waiting for the subscribe answer). Drop stops it and joins the thread.
#[derive(Debug)]
pub struct ServerThread {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl ServerThread {
    /// Binds 127.0.0.1:0 and serves `app` until dropped.
    pub fn start(name: &str, app: Router) -> Result<ServerThread> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind 127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<()>>();
        let thread = std::thread::Builder::new()
            .name(format!("{name}-{}", addr.port()))
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.into()));
                        return;
                    }
                };
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => {
                            let _ = ready_tx.send(Err(e.into()));
                            return;
                        }
                    };
                    let _ = ready_tx.send(Ok(()));
                    tokio::select! {
                        _ = axum::serve(listener, app) => {}
                        _ = rx => {}
                    }
                });
                rt.shutdown_timeout(Duration::from_millis(500));
            })?;
        ready_rx
            .recv()
            .context("server thread ended before it was ready")??;
        Ok(ServerThread {
            addr,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The socket address (127.0.0.1:PORT).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ServerThread {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn key(path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        format!("/{path}")
    }
}

impl FixtureServer {
    /// Serve a new empty temporary directory (removed on drop); fill it with
    /// [`FixtureServer::write`] or through [`FixtureServer::root`].
    pub fn start() -> Result<FixtureServer> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-fixture-")
            .tempdir()?;
        let mut s = FixtureServer::serve(dir.path())?;
        s._dir = Some(dir);
        Ok(s)
    }

    /// Serve an existing directory (left in place on drop).
    pub fn serve(root: impl Into<PathBuf>) -> Result<FixtureServer> {
        let root = root.into();
        let shared = Arc::new(Shared {
            root,
            rules: Mutex::new(HashMap::new()),
            hits: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
        });
        let app = Router::new().fallback(handle).with_state(shared.clone());
        let thread = ServerThread::start("fixture", app)?;
        Ok(FixtureServer {
            addr: thread.addr(),
            shared,
            _thread: thread,
            _dir: None,
        })
    }

    /// The directory served.
    pub fn root(&self) -> &Path {
        &self.shared.root
    }

    /// The socket address (127.0.0.1:PORT).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The URL of `path` (`base_url()` + `path`, a `/` added when missing).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url(), key(path))
    }

    /// [`FixtureServer::url`] parsed.
    pub fn parsed_url(&self, path: &str) -> url::Url {
        url::Url::parse(&self.url(path)).expect("valid URL")
    }

    /// Write a file under the root (parent directories created).
    pub fn write(&self, path: &str, contents: impl AsRef<[u8]>) -> Result<()> {
        let p = self.file_path(path)?;
        if let Some(parent) = p.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&p, contents).with_context(|| format!("write {}", p.display()))
    }

    /// Remove a file under the root (no error if absent).
    pub fn remove(&self, path: &str) -> Result<()> {
        let p = self.file_path(path)?;
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
            _ => Ok(()),
        }
    }

    /// The file a URL path maps to.
    pub fn file_path(&self, path: &str) -> Result<PathBuf> {
        map_path(&self.shared.root, &key(path)).context("path escapes the root")
    }

    fn rule(&self, path: &str, f: impl FnOnce(&mut Rule)) {
        f(lock(&self.shared.rules).entry(key(path)).or_default());
    }

    /// Add a response header for `path` (on 200 and 304; repeated names are all sent).
    pub fn set_header(&self, path: &str, name: &str, value: &str) {
        self.rule(path, |r| {
            r.headers.push((name.to_string(), value.to_string()))
        });
    }

    /// Override the `Content-Type` of `path`.
    pub fn set_content_type(&self, path: &str, content_type: &str) {
        self.rule(path, |r| r.content_type = Some(content_type.to_string()));
    }

    /// Answer the next `n` requests for `path` with `failure`, then serve normally (queued
    /// after failures already scheduled).
    pub fn fail_next(&self, path: &str, n: usize, failure: Failure) {
        self.rule(path, |r| {
            r.once.extend(std::iter::repeat_n(failure, n));
        });
    }

    /// Answer every request for `path` with `response` (after the `fail_next` ones), until
    /// [`FixtureServer::clear`].
    pub fn fail_always(&self, path: &str, response: Failure) {
        self.rule(path, |r| r.always = Some(response));
    }

    /// Send `path` gzip-encoded (see [`Gzip`]).
    pub fn set_gzip(&self, path: &str, gzip: Gzip) {
        self.rule(path, |r| r.gzip = gzip);
    }

    /// Wait this long before answering `path`.
    pub fn set_delay(&self, path: &str, delay: Duration) {
        self.rule(path, |r| r.delay = Some(delay));
    }

    /// Forget every rule of `path` (headers, failures, gzip, delay, content type).
    pub fn clear(&self, path: &str) {
        lock(&self.shared.rules).remove(&key(path));
    }

    /// Requests received for `path`, whatever the answer.
    pub fn hits(&self, path: &str) -> usize {
        lock(&self.shared.hits)
            .get(&key(path))
            .copied()
            .unwrap_or(0)
    }

    /// Requests received in all.
    pub fn total_hits(&self) -> usize {
        lock(&self.shared.hits).values().sum()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RequestRecord> {
        lock(&self.shared.requests).clone()
    }

    /// Forget hits and recorded requests.
    pub fn reset_counters(&self) {
        lock(&self.shared.hits).clear();
        lock(&self.shared.requests).clear();
    }
}

fn map_path(root: &Path, url_path: &str) -> Option<PathBuf> {
    let rel = Path::new(url_path.trim_start_matches('/'));
    let mut out = root.to_path_buf();
    for c in rel.components() {
        match c {
            Component::Normal(s) => out.push(s),
            Component::CurDir => {}
            _ => return None,
        }
    }
    Some(out)
}

fn content_type_for(path: &str) -> &'static str {
    if path.ends_with("/.well-known/resourcesync") {
        return "application/xml";
    }
    let ext = Path::new(path)
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("xml") => "application/xml",
        Some("html" | "htm") => "text/html; charset=utf-8",
        Some("txt") => "text/plain; charset=utf-8",
        Some("json") => "application/json",
        Some("zip") => "application/zip",
        Some("gz") => "application/gzip",
        _ => "application/octet-stream",
    }
}

fn respond(status: u16, headers: &[(String, String)], body: Vec<u8>) -> Response<Body> {
    let mut b = Response::builder().status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK));
    for (k, v) in headers {
        b = b.header(k.as_str(), v.as_str());
    }
    b.body(Body::from(body)).unwrap_or_else(|e| {
        let mut r = Response::new(Body::from(format!("bad scripted response: {e}\n")));
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

fn etag_matches(if_none_match: &str, etag: &str) -> bool {
    let bare = |t: &str| t.trim().trim_start_matches("W/").to_string();
    if_none_match
        .split(',')
        .any(|t| t.trim() == "*" || bare(t) == bare(etag))
}

async fn handle(State(st): State<Arc<Shared>>, req: Request) -> Response<Body> {
    let path = req.uri().path().to_string();
    *lock(&st.hits).entry(path.clone()).or_insert(0) += 1;
    let record = RequestRecord {
        method: req.method().to_string(),
        path: path.clone(),
        query: req.uri().query().map(str::to_string),
        headers: req
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        status: 0,
        received: std::time::Instant::now(),
        answered: std::time::Instant::now(),
    };
    let resp = answer(&st, &path, req.method(), req.headers()).await;
    lock(&st.requests).push(RequestRecord {
        status: resp.status().as_u16(),
        answered: std::time::Instant::now(),
        ..record
    });
    resp
}

async fn answer(st: &Shared, path: &str, method: &Method, rh: &HeaderMap) -> Response<Body> {
    let (rule, failure) = {
        let mut rules = lock(&st.rules);
        match rules.get_mut(path) {
            Some(r) => {
                let f = r.once.pop_front().or_else(|| r.always.clone());
                (r.clone(), f)
            }
            None => (Rule::default(), None),
        }
    };
    if let Some(d) = rule.delay {
        tokio::time::sleep(d).await;
    }
    if let Some(f) = failure {
        return respond(f.status, &f.headers, f.body.into_bytes());
    }
    if method != Method::GET && method != Method::HEAD {
        return respond(
            405,
            &[("Allow".into(), "GET, HEAD".into())],
            b"method not allowed\n".to_vec(),
        );
    }
    let Some(mut file) = map_path(&st.root, path) else {
        return respond(404, &[], b"not found\n".to_vec());
    };
    let mut type_path = path.to_string();
    if file.is_dir() {
        file.push("index.html");
        type_path = "index.html".to_string();
    }
    let (body, mtime) = match tokio::fs::read(&file).await {
        Ok(b) => {
            let m = tokio::fs::metadata(&file)
                .await
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH);
            (b, m)
        }
        Err(_) => return respond(404, &[], b"not found\n".to_vec()),
    };

    let gzip = match rule.gzip {
        Gzip::Off => false,
        Gzip::Always => true,
        Gzip::IfAccepted => rh.get_all(header::ACCEPT_ENCODING).iter().any(|v| {
            v.to_str()
                .unwrap_or("")
                .to_ascii_lowercase()
                .contains("gzip")
        }),
    };
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    body.hash(&mut hasher);
    let etag = if gzip {
        format!("\"{:016x}-gz\"", hasher.finish())
    } else {
        format!("\"{:016x}\"", hasher.finish())
    };
    let last_modified = httpdate::fmt_http_date(mtime);

    let mut headers: Vec<(String, String)> = vec![
        ("ETag".into(), etag.clone()),
        ("Last-Modified".into(), last_modified),
    ];
    if rule.gzip != Gzip::Off {
        headers.push(("Vary".into(), "Accept-Encoding".into()));
    }
    headers.extend(rule.headers.iter().cloned());

    let not_modified = if let Some(inm) = rh.get(header::IF_NONE_MATCH) {
        etag_matches(inm.to_str().unwrap_or(""), &etag)
    } else if let Some(ims) = rh
        .get(header::IF_MODIFIED_SINCE)
        .and_then(|v: &HeaderValue| v.to_str().ok())
        .and_then(|v| httpdate::parse_http_date(v).ok())
    {
        let secs = |t: SystemTime| {
            t.duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        };
        secs(mtime) <= secs(ims)
    } else {
        false
    };
    if not_modified {
        return respond(304, &headers, Vec::new());
    }

    let ct = rule
        .content_type
        .clone()
        .unwrap_or_else(|| content_type_for(&type_path).to_string());
    headers.push(("Content-Type".into(), ct));
    let body = if gzip {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        let _ = enc.write_all(&body);
        headers.push(("Content-Encoding".into(), "gzip".into()));
        enc.finish().unwrap_or_default()
    } else {
        body
    };
    respond(200, &headers, body)
}
