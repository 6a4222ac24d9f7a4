//! WebSub test harness: two hubs as processes ([`FlaskHub`], [`RsaggHub`]), a subscriber that
//! records what it is sent ([`TestSubscriber`]) and an upstream Source that publishes Change
//! Notifications ([`NotifyingSource`]).
//!
//! Every server binds `127.0.0.1:0`; processes run under the watchdog of `proc.rs` (stopped by
//! PID on drop, and when the test process ends in any way); in-process servers run on a
//! thread of their own ([`crate::fixture::ServerThread`]), so a hub's verification GET is
//! answered while the test is still waiting for the hub's answer to the subscribe request.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, anyhow, bail, ensure};
use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, Response, StatusCode};
use rsagg_model::{
    Capability, Change, HashAlgorithm, HashValue, Hashes, Header, Link, Md, Precision, Root,
    UrlEntry, W3cDateTime,
};
use rsagg_websub::link::LinkValue;
use rsagg_websub::signature::{self, Algorithm};
use sha2::Digest;

use crate::fixture::ServerThread;
use crate::proc::{Watched, log_tail};
use crate::{FixtureServer, rsagg_bin, venv_bin};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

// ---------------------------------------------------------------------------------------
// Hubs as processes

/// What [`TestSubscriber::subscribe`] needs of a hub: its URL, and a way to know that the hub
/// has stored a verified subscription (the hub stores it only after the callback answered
/// the verification GET, so publishing right after that answer would race it).
pub trait HubUnderTest {
    /// The hub URL (`http://127.0.0.1:PORT/`), where every request is POSTed.
    fn url(&self) -> &str;
    /// Whether the hub has reported (in its log) that the subscription of `callback` is
    /// stored; an error when the hub process is gone.
    fn subscribed(&self, callback: &str) -> Result<bool>;
    /// The last `n` lines of the hub's log, for failure messages.
    fn log_tail(&self, n: usize) -> String;
}

/// A hub process: the watchdog, its log, its `listening` URL, its data directory.
#[derive(Debug)]
struct HubProcess {
    watched: Mutex<Watched>,
    url: String,
    log: PathBuf,
    // Dropped after `watched` (field order): the process is stopped before its data goes.
    _dir: tempfile::TempDir,
}

impl HubProcess {
    /// Starts `cmd` (output to `dir/NAME.log`) and waits for its `listening http://…` line.
    fn start(
        name: &'static str,
        cmd: &Command,
        dir: tempfile::TempDir,
        timeout: Duration,
    ) -> Result<HubProcess> {
        let log = dir.path().join(format!("{name}.log"));
        let watched = Watched::spawn(name, cmd, &log, &[], Duration::from_secs(2))?;
        let mut hub = HubProcess {
            watched: Mutex::new(watched),
            url: String::new(),
            log,
            _dir: dir,
        };
        hub.url = hub.wait_listening(timeout)?;
        Ok(hub)
    }

    /// The hub URL: the `listening` line's, with a trailing `/`.
    fn wait_listening(&self, timeout: Duration) -> Result<String> {
        lock(&self.watched).wait_listening(timeout)
    }

    /// Whether a line of the log satisfies `found`; an error when the process is gone.
    fn log_has(&self, found: impl Fn(&str) -> bool) -> Result<bool> {
        lock(&self.watched).log_has(found)
    }

    fn log_tail(&self, n: usize) -> String {
        log_tail(&self.log, n)
    }

    fn pid(&self) -> u32 {
        lock(&self.watched).pid()
    }
}

/// How the stock hub runs flask-websub's Celery tasks (see `scripts/peers/websub_hub.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlaskMode {
    /// `task_always_eager`: verification inside the subscribe request, every delivery (and
    /// retry) inside the publish request, before the 202.
    Eager,
    /// A real Celery worker (in-process thread, memory transport): requests are answered 202
    /// first, verification and delivery follow.
    Delayed,
}

impl FlaskMode {
    fn arg(self) -> &'static str {
        match self {
            FlaskMode::Eager => "eager",
            FlaskMode::Delayed => "delayed",
        }
    }
}

/// flask-websub 0.4.1, the stock WebSub hub, started from the peers venv through
/// `scripts/peers/websub_hub.py` (`$RSAGG_WEBSUB_HUB` overrides the path). It knows only the
/// WebSub forms: subscribe/unsubscribe, and `hub.mode=publish` with **`hub.topic`** (it
/// answers 400 to a publish with only `hub.url`), after which it GETs the topic and relays
/// that response's body and headers. Leases from 1 s are granted (the launcher lowers
/// flask-websub's 60 s minimum); deliveries to a subscriber with a secret are signed
/// `X-Hub-Signature: sha512=…`.
#[derive(Debug)]
pub struct FlaskHub {
    process: HubProcess,
    mode: FlaskMode,
}

impl FlaskHub {
    /// Starts the hub (blocking, about 0.5 s; 1 s in delayed mode, which starts a worker).
    pub fn start(mode: FlaskMode) -> Result<FlaskHub> {
        let python = venv_bin("python")?;
        let launcher = crate::peer_script("RSAGG_WEBSUB_HUB", "websub_hub.py", "hub launcher")?;
        let dir = tempfile::Builder::new()
            .prefix("rsagg-flask-hub-")
            .tempdir()?;
        let mut cmd = Command::new(python);
        cmd.arg(&launcher)
            .args(["--mode", mode.arg(), "--port", "0", "--data-dir"])
            .arg(dir.path())
            .env("PYTHONUNBUFFERED", "1")
            .current_dir(dir.path());
        let process = HubProcess::start("flask-websub", &cmd, dir, Duration::from_secs(30))?;
        Ok(FlaskHub { process, mode })
    }

    /// The mode it runs in.
    pub fn mode(&self) -> FlaskMode {
        self.mode
    }

    /// PID of the Python process.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

impl HubUnderTest for FlaskHub {
    fn url(&self) -> &str {
        &self.process.url
    }

    /// The launcher's storage logs `stored subscription callback=URL topic=…`.
    fn subscribed(&self, callback: &str) -> Result<bool> {
        let needle = format!("stored subscription callback={callback} topic=");
        self.process.log_has(|l| l.contains(&needle))
    }

    fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }
}

/// `rsagg hub` as a process: `rsagg hub --listen 127.0.0.1:0 --store file://TMP/
/// --allow-private-callbacks ARGS…` (`--listen` and `--store` only when `args` does not give
/// them; the flag always, since every subscriber and topic of the tests is on loopback),
/// logging JSON lines at `info` so the harness can see subscriptions being stored.
#[derive(Debug)]
pub struct RsaggHub {
    process: HubProcess,
}

impl RsaggHub {
    /// Starts the hub with extra arguments, e.g. `["--lease-min", "1"]` or
    /// `["--allow-publisher", "http://127.0.0.1:PORT/"]`. Blocking, well under a second.
    pub fn start(args: &[&str]) -> Result<RsaggHub> {
        let dir = tempfile::Builder::new()
            .prefix("rsagg-e2e-hub-")
            .tempdir()?;
        let mut cmd = Command::new(rsagg_bin()?);
        cmd.arg("hub");
        if !args.contains(&"--listen") {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        if !args.contains(&"--store") {
            cmd.arg("--store")
                .arg(format!("file://{}/", dir.path().join("store").display()));
        }
        if !args.contains(&"--allow-private-callbacks") {
            cmd.arg("--allow-private-callbacks");
        }
        cmd.args(args)
            .env("RSAGG_LOG", "info")
            .env("RSAGG_LOG_FORMAT", "json")
            .current_dir(dir.path());
        let process = HubProcess::start("rsagg-hub", &cmd, dir, Duration::from_secs(30))?;
        Ok(RsaggHub { process })
    }

    /// Whether the hub has logged the removal of `callback`'s subscription for `why`
    /// (`"unsubscribed"`, `"lease expired"`); an error when the hub process is gone.
    pub fn removed(&self, callback: &str, why: &str) -> Result<bool> {
        self.process.log_has(|l| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
                v["message"] == "subscription removed"
                    && v["callback"].as_str() == Some(callback)
                    && v["why"].as_str() == Some(why)
            })
        })
    }

    /// PID of the `rsagg` process.
    pub fn pid(&self) -> u32 {
        self.process.pid()
    }
}

impl HubUnderTest for RsaggHub {
    fn url(&self) -> &str {
        &self.process.url
    }

    /// The hub logs `{"message":"subscribed","callback":…}` once the record is stored.
    fn subscribed(&self, callback: &str) -> Result<bool> {
        self.process.log_has(|l| {
            serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
                v["message"] == "subscribed" && v["callback"].as_str() == Some(callback)
            })
        })
    }

    fn log_tail(&self, n: usize) -> String {
        self.process.log_tail(n)
    }
}

// ---------------------------------------------------------------------------------------
// Subscriber

/// A verification request (WebSub 5.3) or denial (5.2) the subscriber received.
#[derive(Debug, Clone)]
pub struct Verification {
    /// The callback path it came to (`/cb/N`).
    pub path: String,
    /// `hub.mode`: `subscribe`, `unsubscribe` or `denied`.
    pub mode: String,
    /// `hub.topic`.
    pub topic: String,
    /// `hub.challenge` (absent on a denial).
    pub challenge: Option<String>,
    /// `hub.lease_seconds`, as sent (a hub must send it on `subscribe`).
    pub lease_seconds: Option<String>,
    /// `hub.reason` of a denial.
    pub reason: Option<String>,
    /// Whether the challenge was echoed (the subscriber asked for this topic on this callback).
    pub confirmed: bool,
}

impl Verification {
    /// `hub.lease_seconds` as a number.
    pub fn lease(&self) -> Option<u64> {
        self.lease_seconds.as_deref().and_then(|s| s.parse().ok())
    }
}

/// What the subscriber found in `X-Hub-Signature`, judged with the subscription's secret by
/// `rsagg_websub::signature::verify`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureCheck {
    /// No secret given and no header sent.
    Unsigned,
    /// The HMAC verifies with the secret; the method used.
    Valid(Algorithm),
    /// A secret was given but no header came.
    Missing,
    /// A header came for a subscription without a secret.
    Unexpected(String),
    /// The header does not verify (the header and why).
    Invalid(String),
}

/// One POST to a callback: a delivery attempt (answered 2xx unless the subscriber was told to
/// fail it).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// When it arrived (monotonic, comparable with `Instant::now()` in the test).
    pub received: Instant,
    /// When it arrived (wall clock).
    pub received_at: SystemTime,
    /// The callback path (`/cb/N`).
    pub path: String,
    /// The topic this callback subscribed to (`None`: a callback it never gave out).
    pub topic: Option<String>,
    /// Request headers (names in lower case), in order.
    pub headers: Vec<(String, String)>,
    /// The body, as received.
    pub body: Bytes,
    /// The signature check.
    pub signature: SignatureCheck,
    /// The status the subscriber answered.
    pub status: u16,
}

impl Delivery {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Every link of the `Link` headers (rsagg-fetch's RFC 8288 parser, as the hub uses).
    pub fn links(&self) -> Vec<LinkValue> {
        let values: Vec<String> = self
            .headers
            .iter()
            .filter(|(k, _)| k == "link")
            .map(|(_, v)| v.clone())
            .collect();
        let base = url::Url::parse("http://127.0.0.1/").expect("valid base");
        rsagg_websub::link::parse(&values, &base)
    }

    /// The target of the first link with relation `rel`.
    pub fn link(&self, rel: &str) -> Option<String> {
        rsagg_websub::link::find(&self.links(), rel).map(str::to_owned)
    }

    /// Whether the subscriber answered 2xx.
    pub fn accepted(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A subscription this subscriber asked for: one callback URL per subscription, so a delivery
/// tells by its path which subscription (topic, secret) it belongs to.
#[derive(Debug, Clone)]
pub struct Subscription {
    /// The callback URL given to the hub.
    pub callback: String,
    /// The topic.
    pub topic: String,
    /// The verification request the hub made.
    pub verification: Verification,
}

#[derive(Debug, Clone)]
struct Wanted {
    topic: String,
    secret: Option<String>,
    /// Answer an `unsubscribe` verification for this callback.
    unsubscribing: bool,
}

#[derive(Debug, Default)]
struct SubState {
    wanted: BTreeMap<String, Wanted>,
    next: usize,
    fail_next: usize,
    verifications: Vec<Verification>,
    attempts: Vec<Delivery>,
}

/// A WebSub subscriber (Destination) on `127.0.0.1:PORT`: callbacks `/cb/N`, one per
/// subscription.
///
/// - Verification (GET with `hub.mode`, `hub.topic`, `hub.challenge`, `hub.lease_seconds`):
///   the challenge is echoed (200, `text/plain`) only when the callback was given out for
///   that topic (and, for `unsubscribe`, after [`TestSubscriber::unsubscribe`]); anything
///   else gets 404, as WebSub 5.3.1 has a subscriber refuse. Every verification is recorded.
/// - Delivery (POST): recorded with its arrival time, headers and body; `X-Hub-Signature`
///   is checked with the subscription's secret by `rsagg_websub::signature` (sha1, sha256,
///   sha384, sha512); answered 200, or 500 while [`TestSubscriber::fail_next`] has failures
///   left (to make a hub retry).
#[derive(Debug)]
pub struct TestSubscriber {
    state: Arc<Mutex<SubState>>,
    thread: ServerThread,
    client: reqwest::Client,
}

impl TestSubscriber {
    /// Starts the subscriber's server.
    pub fn start() -> Result<TestSubscriber> {
        let state = Arc::new(Mutex::new(SubState::default()));
        let app = Router::new()
            .fallback(subscriber_handle)
            .with_state(state.clone());
        let thread = ServerThread::start("subscriber", app)?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .build()?;
        Ok(TestSubscriber {
            state,
            thread,
            client,
        })
    }

    /// `http://127.0.0.1:PORT` (no trailing slash).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.thread.addr())
    }

    /// Subscribes to `topic` at `hub` (WebSub 5.1: form POST, expects 202), waits for the
    /// verification of intent and then for the hub to have stored the subscription (so a
    /// publication right after this returns reaches it). `lease` is `hub.lease_seconds`
    /// (`None`: not sent), `secret` is `hub.secret`.
    pub async fn subscribe<H: HubUnderTest + ?Sized>(
        &self,
        hub: &H,
        topic: &str,
        secret: Option<&str>,
        lease: Option<u64>,
    ) -> Result<Subscription> {
        let sub = self.subscribe_at(hub.url(), topic, secret, lease).await?;
        let timeout = Duration::from_secs(10);
        let t0 = Instant::now();
        while !hub
            .subscribed(&sub.callback)
            .with_context(|| format!("subscription of {} to {topic}", sub.callback))?
        {
            if t0.elapsed() > timeout {
                bail!(
                    "the hub did not store the subscription of {} within {timeout:?}; log:\n{}",
                    sub.callback,
                    hub.log_tail(40)
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(sub)
    }

    /// Like [`TestSubscriber::subscribe`], for a hub known only by its URL: returns once the
    /// verification was answered, which may be a moment before the hub has stored the
    /// subscription.
    pub async fn subscribe_at(
        &self,
        hub_url: &str,
        topic: &str,
        secret: Option<&str>,
        lease: Option<u64>,
    ) -> Result<Subscription> {
        let callback = {
            let mut st = lock(&self.state);
            st.next += 1;
            let path = format!("/cb/{}", st.next);
            st.wanted.insert(
                path.clone(),
                Wanted {
                    topic: topic.to_owned(),
                    secret: secret.map(str::to_owned),
                    unsubscribing: false,
                },
            );
            format!("{}{path}", self.base_url())
        };
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("hub.mode", "subscribe")
            .append_pair("hub.topic", topic)
            .append_pair("hub.callback", &callback);
        if let Some(s) = secret {
            form.append_pair("hub.secret", s);
        }
        if let Some(l) = lease {
            form.append_pair("hub.lease_seconds", &l.to_string());
        }
        let (status, body) = post_form(&self.client, hub_url, form.finish()).await?;
        ensure!(
            status == 202,
            "subscribe at {hub_url}: HTTP {status} (WebSub 5.1.2 wants 202): {body}"
        );
        let verification = self
            .wait_verification(&callback, "subscribe", Duration::from_secs(10))
            .await?;
        Ok(Subscription {
            callback,
            topic: topic.to_owned(),
            verification,
        })
    }

    /// Unsubscribes `sub` (expects 202) and waits for the `unsubscribe` verification, which
    /// is confirmed.
    pub async fn unsubscribe(&self, hub_url: &str, sub: &Subscription) -> Result<Verification> {
        let path = path_of(&sub.callback);
        {
            let mut st = lock(&self.state);
            if let Some(w) = st.wanted.get_mut(&path) {
                w.unsubscribing = true;
            }
        }
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        form.append_pair("hub.mode", "unsubscribe")
            .append_pair("hub.topic", &sub.topic)
            .append_pair("hub.callback", &sub.callback);
        let (status, body) = post_form(&self.client, hub_url, form.finish()).await?;
        ensure!(
            status == 202,
            "unsubscribe at {hub_url}: HTTP {status}: {body}"
        );
        self.wait_verification(&sub.callback, "unsubscribe", Duration::from_secs(10))
            .await
    }

    async fn wait_verification(
        &self,
        callback: &str,
        mode: &str,
        timeout: Duration,
    ) -> Result<Verification> {
        let path = path_of(callback);
        let t0 = Instant::now();
        loop {
            if let Some(v) = lock(&self.state)
                .verifications
                .iter()
                .find(|v| v.path == path && v.mode == mode)
            {
                return Ok(v.clone());
            }
            if t0.elapsed() > timeout {
                bail!(
                    "no `{mode}` verification at {callback} within {timeout:?} (seen: {:?})",
                    self.verifications()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Answer the next `n` deliveries (to any callback) with 500.
    pub fn fail_next(&self, n: usize) {
        lock(&self.state).fail_next += n;
    }

    /// Every verification and denial received, in order.
    pub fn verifications(&self) -> Vec<Verification> {
        lock(&self.state).verifications.clone()
    }

    /// Every delivery attempt, failed ones included, in order of arrival.
    pub fn attempts(&self) -> Vec<Delivery> {
        lock(&self.state).attempts.clone()
    }

    /// The deliveries answered 2xx, in order of arrival.
    pub fn deliveries(&self) -> Vec<Delivery> {
        lock(&self.state)
            .attempts
            .iter()
            .filter(|d| d.accepted())
            .cloned()
            .collect()
    }

    /// The deliveries answered 2xx at `callback`.
    pub fn deliveries_to(&self, callback: &str) -> Vec<Delivery> {
        let path = path_of(callback);
        self.deliveries()
            .into_iter()
            .filter(|d| d.path == path)
            .collect()
    }

    /// Waits until at least `n` deliveries were accepted (any callback) and returns them all;
    /// an error listing what came when `timeout` passes first.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Result<Vec<Delivery>> {
        self.wait_until(n, timeout, None).await
    }

    /// [`TestSubscriber::wait_for`] counting only deliveries to `callback`.
    pub async fn wait_for_on(
        &self,
        callback: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<Vec<Delivery>> {
        self.wait_until(n, timeout, Some(&path_of(callback))).await
    }

    async fn wait_until(
        &self,
        n: usize,
        timeout: Duration,
        path: Option<&str>,
    ) -> Result<Vec<Delivery>> {
        let t0 = Instant::now();
        loop {
            let got: Vec<Delivery> = self
                .deliveries()
                .into_iter()
                .filter(|d| path.is_none_or(|p| d.path == p))
                .collect();
            if got.len() >= n {
                return Ok(got);
            }
            if t0.elapsed() > timeout {
                let attempts: Vec<String> = self
                    .attempts()
                    .iter()
                    .map(|d| format!("{} {} {} bytes", d.path, d.status, d.body.len()))
                    .collect();
                return Err(anyhow!(
                    "{} of {n} deliveries{} within {timeout:?}; attempts: {attempts:?}",
                    got.len(),
                    path.map(|p| format!(" to {p}")).unwrap_or_default()
                ));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn path_of(callback: &str) -> String {
    url::Url::parse(callback)
        .map(|u| u.path().to_owned())
        .unwrap_or_else(|_| callback.to_owned())
}

async fn post_form(client: &reqwest::Client, url: &str, body: String) -> Result<(u16, String)> {
    let r = client
        .post(url)
        .header("Content-Type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .with_context(|| format!("POST {url}"))?;
    let status = r.status().as_u16();
    Ok((status, r.text().await.unwrap_or_default()))
}

fn same_url(a: &str, b: &str) -> bool {
    match (url::Url::parse(a), url::Url::parse(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

fn text(status: u16, body: impl Into<Body>) -> Response<Body> {
    Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR))
        .header("Content-Type", "text/plain")
        .body(body.into())
        .unwrap_or_else(|_| Response::new(Body::empty()))
}

async fn subscriber_handle(State(st): State<Arc<Mutex<SubState>>>, req: Request) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let method = req.method().clone();
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    if method == Method::GET {
        return verification(&st, path, &query);
    }
    if method != Method::POST {
        return text(405, "GET (verification) or POST (delivery)\n");
    }
    let received = Instant::now();
    let received_at = SystemTime::now();
    let body = match axum::body::to_bytes(req.into_body(), 64 * 1024 * 1024).await {
        Ok(b) => b,
        Err(e) => return text(400, format!("body: {e}\n")),
    };
    let mut s = lock(&st);
    let wanted = s.wanted.get(&path).cloned();
    let header = headers
        .iter()
        .find(|(k, _)| k == "x-hub-signature")
        .map(|(_, v)| v.clone());
    let signature = match (wanted.as_ref().and_then(|w| w.secret.as_deref()), header) {
        (None, None) => SignatureCheck::Unsigned,
        (None, Some(h)) => SignatureCheck::Unexpected(h),
        (Some(_), None) => SignatureCheck::Missing,
        (Some(secret), Some(h)) => match signature::verify(&h, secret.as_bytes(), &body) {
            Ok(()) => {
                let alg = h
                    .split_once('=')
                    .and_then(|(m, _)| Algorithm::parse(m.trim()));
                match alg {
                    Some(a) => SignatureCheck::Valid(a),
                    None => SignatureCheck::Invalid(h),
                }
            }
            Err(e) => SignatureCheck::Invalid(format!("{h}: {e}")),
        },
    };
    let status = if s.fail_next > 0 {
        s.fail_next -= 1;
        500
    } else if wanted.is_some() {
        200
    } else {
        // A callback never given out: WebSub 7 lets a subscriber answer 410 Gone.
        410
    };
    s.attempts.push(Delivery {
        received,
        received_at,
        path,
        topic: wanted.map(|w| w.topic),
        headers,
        body,
        signature,
        status,
    });
    drop(s);
    text(status, "")
}

fn verification(st: &Mutex<SubState>, path: String, query: &str) -> Response<Body> {
    let mut params: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        params.entry(k.into_owned()).or_insert(v.into_owned());
    }
    let mode = params.get("hub.mode").cloned().unwrap_or_default();
    let topic = params.get("hub.topic").cloned().unwrap_or_default();
    let challenge = params.get("hub.challenge").cloned();
    let mut s = lock(st);
    let confirmed = match (s.wanted.get(&path), mode.as_str(), &challenge) {
        (Some(w), "subscribe", Some(_)) => same_url(&w.topic, &topic),
        (Some(w), "unsubscribe", Some(_)) => w.unsubscribing && same_url(&w.topic, &topic),
        _ => false,
    };
    s.verifications.push(Verification {
        path,
        mode: mode.clone(),
        topic,
        challenge: challenge.clone(),
        lease_seconds: params.get("hub.lease_seconds").cloned(),
        reason: params.get("hub.reason").cloned(),
        confirmed,
    });
    drop(s);
    match (confirmed, challenge) {
        (true, Some(c)) => text(200, c),
        _ if mode == "denied" => text(200, ""),
        _ => text(404, "no such subscription wanted\n"),
    }
}

// ---------------------------------------------------------------------------------------
// Notifying Source

/// How a Source hands a notification to its hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PublishForm {
    /// CN 1.0.1 4.1: the payload as the POST body, `Content-Type: application/xml`, `Link`
    /// with rel `self` (topic) and `hub`; a hub answers 200.
    ResourceSync,
    /// WebSub's de-facto publish: form `hub.mode=publish` with `hub.url` and `hub.topic`
    /// (stock hubs differ in which they read; flask-websub requires `hub.topic`); the hub
    /// answers 202 and GETs the topic.
    WebSub,
}

/// One change notification payload the Source built.
#[derive(Debug, Clone)]
pub struct Payload {
    /// 0, 1, 2, … in the order built.
    pub seq: usize,
    /// `from` of its `<rs:md>`: the previous payload's `until` (the Source's start for the
    /// first).
    pub from: W3cDateTime,
    /// `until`: the datetime of its last change.
    pub until: W3cDateTime,
    /// The document.
    pub body: Bytes,
    /// Its entries (one per change, forward chronological).
    pub entries: Vec<UrlEntry>,
}

/// The hub's answer to a publication.
#[derive(Debug, Clone)]
pub struct Published {
    /// HTTP status.
    pub status: u16,
    /// Response body.
    pub body: String,
    /// When the POST was sent.
    pub sent: Instant,
    /// When the answer had been read.
    pub returned: Instant,
}

#[derive(Debug)]
struct SourceState {
    hub: String,
    started: W3cDateTime,
    /// The last datetime handed out (every change gets a later one).
    clock: W3cDateTime,
    resources: BTreeMap<String, Bytes>,
    /// The Change List's entries, forward chronological.
    changes: Vec<UrlEntry>,
    payloads: Vec<Payload>,
}

/// An upstream ResourceSync Source with a change-notification channel, served by a
/// [`FixtureServer`] (so the fixture's failure scripting, headers and request log apply):
///
/// ```text
/// /.well-known/resourcesync   Source Description → capabilitylist.xml
/// /capabilitylist.xml         resourcelist.xml, changelist.xml and the channel
///                             (<loc>TOPIC</loc> + <rs:ln rel="hub">, CN 1.0.1 5, Example 7)
/// /resourcelist.xml           the resources now (hash, length, lastmod)
/// /changelist.xml             every change so far (from = start, strictly increasing datetimes)
/// /change/                    the topic URI: application/xml, Link rel=self and rel=hub,
///                             body = the latest payload (CN 1.0.1 4.1)
/// /res/…                      the resources
/// ```
///
/// [`NotifyingSource::change`] applies changes and builds the next payload (consecutive
/// `from`/`until`, CN 1.0.1 3); [`NotifyingSource::notify`] publishes the latest one and
/// [`NotifyingSource::publish`] any one. A gap: build two payloads and publish only the
/// second. A replay: publish an old payload again. Documents are written with
/// `rsagg-sitemap`'s encoder from `rsagg-model` types.
#[derive(Debug)]
pub struct NotifyingSource {
    server: FixtureServer,
    state: Mutex<SourceState>,
    client: reqwest::Client,
}

/// A datetime strictly after `last`: now, or `last` + 1 µs when the clock has not moved on
/// (microseconds, like most real Sources).
pub fn tick_after(last: &W3cDateTime) -> W3cDateTime {
    let now = W3cDateTime::now();
    if now.unix_nanos() > last.unix_nanos() {
        now
    } else {
        let (secs, nanos) = last.plus_nanos(1_000).instant();
        W3cDateTime::from_unix_with_precision(secs, nanos, Precision::Fraction(6))
    }
}

fn sha256_hash(body: &[u8]) -> Hashes {
    Hashes(vec![HashValue::from_bytes(
        HashAlgorithm::Sha256,
        &sha2::Sha256::digest(body),
    )])
}

/// A whole document from a header and entries, with `rsagg-sitemap`'s encoder.
pub fn encode_document(header: &Header, entries: &[UrlEntry]) -> Bytes {
    let mut out = Vec::new();
    rsagg_sitemap::writer::encode_header(header, &mut out);
    for e in entries {
        rsagg_sitemap::writer::encode_entry(header.root, e, &mut out);
    }
    out.extend_from_slice(match header.root {
        Root::Urlset => b"</urlset>\n".as_slice(),
        Root::Sitemapindex => b"</sitemapindex>\n".as_slice(),
    });
    Bytes::from(out)
}

/// A Source Description or Capability List entry: `loc` with `capability` and `links`.
pub fn capability_entry(loc: String, capability: Capability, links: Vec<Link>) -> UrlEntry {
    UrlEntry {
        loc,
        md: Some(Md {
            capability: Some(capability),
            ..Md::default()
        }),
        links,
        ..UrlEntry::default()
    }
}

impl NotifyingSource {
    /// Starts the Source with no resources yet, advertising `hub_url` as its hub.
    pub fn start(hub_url: &str) -> Result<NotifyingSource> {
        let server = FixtureServer::start()?;
        let started = W3cDateTime::now();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(15))
            .build()?;
        let src = NotifyingSource {
            server,
            state: Mutex::new(SourceState {
                hub: hub_url.to_owned(),
                started,
                clock: started,
                resources: BTreeMap::new(),
                changes: Vec::new(),
                payloads: Vec::new(),
            }),
            client,
        };
        src.set_topic_headers(hub_url);
        src.write_documents(&lock(&src.state))?;
        Ok(src)
    }

    /// The fixture server (request log, failure scripting).
    pub fn server(&self) -> &FixtureServer {
        &self.server
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    /// The topic URI, `…/change/`.
    pub fn topic(&self) -> String {
        self.url("/change/")
    }

    /// `…/capabilitylist.xml`.
    pub fn capability_list_url(&self) -> String {
        self.url("/capabilitylist.xml")
    }

    /// `…/.well-known/resourcesync`.
    pub fn source_description_url(&self) -> String {
        self.url("/.well-known/resourcesync")
    }

    /// The hub advertised (Capability List, topic `Link`) and published to.
    pub fn hub(&self) -> String {
        lock(&self.state).hub.clone()
    }

    /// Advertise and publish to another hub from now on (resets the fixture rules of the
    /// topic path, see [`FixtureServer::clear`]).
    pub fn set_hub(&self, hub_url: &str) -> Result<()> {
        let mut st = lock(&self.state);
        st.hub = hub_url.to_owned();
        self.set_topic_headers(hub_url);
        self.write_documents(&st)
    }

    /// Every payload built so far, oldest first.
    pub fn payloads(&self) -> Vec<Payload> {
        lock(&self.state).payloads.clone()
    }

    /// The documents' paths, for validation: Source Description, Capability List, Resource
    /// List, Change List, and the topic's content when a payload exists.
    pub fn document_paths(&self) -> Vec<&'static str> {
        let mut v = vec![
            "/.well-known/resourcesync",
            "/capabilitylist.xml",
            "/resourcelist.xml",
            "/changelist.xml",
        ];
        if !lock(&self.state).payloads.is_empty() {
            v.push("/change/");
        }
        v
    }

    /// Applies changes — `(path, Some(bytes))` creates or updates the resource at `path`
    /// (under `/res/` when relative), `(path, None)` deletes it — each with its own, strictly
    /// later datetime; appends them to the Change List; rewrites the Resource List; builds the
    /// next payload (`from` = the previous `until`) and makes it the topic's content. Nothing
    /// is published: see [`NotifyingSource::notify`].
    pub fn change(&self, changes: &[(&str, Option<&[u8]>)]) -> Result<Payload> {
        ensure!(
            !changes.is_empty(),
            "a notification needs at least one change"
        );
        let mut st = lock(&self.state);
        let mut entries = Vec::new();
        for (path, body) in changes {
            let path = if path.starts_with('/') {
                (*path).to_owned()
            } else {
                format!("/res/{path}")
            };
            let at = tick_after(&st.clock);
            st.clock = at;
            let loc = self.url(&path);
            let entry = match body {
                Some(b) => {
                    let existed = st.resources.contains_key(&path);
                    self.server.write(&path, b)?;
                    st.resources.insert(path.clone(), Bytes::copy_from_slice(b));
                    UrlEntry {
                        loc,
                        lastmod: Some(at),
                        md: Some(Md {
                            change: Some(if existed {
                                Change::Updated
                            } else {
                                Change::Created
                            }),
                            datetime: Some(at),
                            hash: Some(sha256_hash(b)),
                            length: Some(b.len() as u64),
                            mime_type: Some("application/octet-stream".into()),
                            ..Md::default()
                        }),
                        ..UrlEntry::default()
                    }
                }
                None => {
                    ensure!(
                        st.resources.remove(&path).is_some(),
                        "cannot delete {path}: no such resource"
                    );
                    self.server.remove(&path)?;
                    UrlEntry {
                        loc,
                        md: Some(Md {
                            change: Some(Change::Deleted),
                            datetime: Some(at),
                            ..Md::default()
                        }),
                        ..UrlEntry::default()
                    }
                }
            };
            entries.push(entry);
        }
        st.changes.extend(entries.iter().cloned());
        let from = st.payloads.last().map_or(st.started, |p| p.until);
        let until = st.clock;
        let mut header = Header::new(Root::Urlset, Capability::ChangeNotification);
        if let Some(md) = header.md.as_mut() {
            md.from = Some(from);
            md.until = Some(until);
        }
        header
            .links
            .push(Link::new("up", self.capability_list_url()));
        let payload = Payload {
            seq: st.payloads.len(),
            from,
            until,
            body: encode_document(&header, &entries),
            entries,
        };
        st.payloads.push(payload.clone());
        self.write_documents(&st)?;
        Ok(payload)
    }

    /// Publishes the latest payload (see [`NotifyingSource::publish`]).
    pub async fn notify(&self, form: PublishForm) -> Result<Published> {
        let latest = lock(&self.state)
            .payloads
            .last()
            .cloned()
            .context("no payload yet: call change() first")?;
        self.publish(&latest, form).await
    }

    /// Publishes `payload` (any earlier one: a replay) to the hub: the CN 1.0.1 form POSTs it
    /// and expects 200; the WebSub form first makes it the topic's content (the hub fetches
    /// the topic) and expects 202. An unexpected status is an error naming the answer.
    pub async fn publish(&self, payload: &Payload, form: PublishForm) -> Result<Published> {
        let hub = self.hub();
        let topic = self.topic();
        let request = match form {
            PublishForm::ResourceSync => self
                .client
                .post(&hub)
                .header("Content-Type", "application/xml")
                .header("Link", rsagg_websub::link::format(&topic, &hub))
                .body(payload.body.clone()),
            PublishForm::WebSub => {
                self.server.write("/change/index.html", &payload.body)?;
                let mut f = url::form_urlencoded::Serializer::new(String::new());
                f.append_pair("hub.mode", "publish")
                    .append_pair("hub.url", &topic)
                    .append_pair("hub.topic", &topic);
                self.client
                    .post(&hub)
                    .header("Content-Type", "application/x-www-form-urlencoded")
                    .body(f.finish())
            }
        };
        let sent = Instant::now();
        let r = request
            .send()
            .await
            .with_context(|| format!("publish to {hub}"))?;
        let status = r.status().as_u16();
        let body = r.text().await.unwrap_or_default();
        let returned = Instant::now();
        let expected = match form {
            PublishForm::ResourceSync => status == 200,
            PublishForm::WebSub => status == 202,
        };
        ensure!(
            expected,
            "publish ({form:?}) of payload {} to {hub}: HTTP {status}: {body}",
            payload.seq
        );
        Ok(Published {
            status,
            body,
            sent,
            returned,
        })
    }

    /// Writes every document from the state (and the topic's headers).
    fn write_documents(&self, st: &SourceState) -> Result<()> {
        let topic = self.topic();
        let capability_list = self.capability_list_url();

        let mut sd = Header::new(Root::Urlset, Capability::Description);
        sd.links
            .push(Link::new("describedby", self.url("/about.html")));
        let sd_entries = [capability_entry(
            capability_list.clone(),
            Capability::CapabilityList,
            Vec::new(),
        )];
        self.server.write(
            "/.well-known/resourcesync",
            encode_document(&sd, &sd_entries),
        )?;

        let mut cl = Header::new(Root::Urlset, Capability::CapabilityList);
        cl.links
            .push(Link::new("up", self.source_description_url()));
        let cl_entries = [
            capability_entry(
                self.url("/resourcelist.xml"),
                Capability::ResourceList,
                Vec::new(),
            ),
            capability_entry(
                self.url("/changelist.xml"),
                Capability::ChangeList,
                Vec::new(),
            ),
            capability_entry(
                topic.clone(),
                Capability::ChangeNotification,
                vec![Link::new("hub", st.hub.clone())],
            ),
        ];
        self.server
            .write("/capabilitylist.xml", encode_document(&cl, &cl_entries))?;

        let mut rl = Header::new(Root::Urlset, Capability::ResourceList);
        rl.links.push(Link::new("up", capability_list.clone()));
        if let Some(md) = rl.md.as_mut() {
            md.at = Some(st.clock);
            md.completed = Some(st.clock);
        }
        let last_change: BTreeMap<&str, W3cDateTime> = st
            .changes
            .iter()
            .filter_map(|e| Some((e.loc.as_str(), *e.change_instant()?)))
            .collect();
        let rl_entries: Vec<UrlEntry> = st
            .resources
            .iter()
            .map(|(path, body)| {
                let loc = self.url(path);
                UrlEntry {
                    lastmod: last_change.get(loc.as_str()).copied(),
                    md: Some(Md {
                        hash: Some(sha256_hash(body)),
                        length: Some(body.len() as u64),
                        mime_type: Some("application/octet-stream".into()),
                        ..Md::default()
                    }),
                    loc,
                    ..UrlEntry::default()
                }
            })
            .collect();
        self.server
            .write("/resourcelist.xml", encode_document(&rl, &rl_entries))?;

        let mut chl = Header::new(Root::Urlset, Capability::ChangeList);
        chl.links.push(Link::new("up", capability_list));
        if let Some(md) = chl.md.as_mut() {
            md.from = Some(st.started);
        }
        self.server
            .write("/changelist.xml", encode_document(&chl, &st.changes))?;

        // The topic URI's content (CN 1.0.1 4.1): the latest payload, or nothing before the
        // first one.
        let latest = st
            .payloads
            .last()
            .map(|p| p.body.clone())
            .unwrap_or_default();
        self.server.write("/change/index.html", &latest)?;
        Ok(())
    }

    /// The topic URI's headers (CN 1.0.1 4.1): `application/xml` and `Link` rel `self` and
    /// `hub`. Replaces every fixture rule of `/change/` (a test's delays or failures too).
    fn set_topic_headers(&self, hub: &str) {
        let topic = self.topic();
        self.server.clear("/change/");
        self.server.set_content_type("/change/", "application/xml");
        self.server
            .set_header("/change/", "Link", &rsagg_websub::link::format(&topic, hub));
    }
}
