//! Notification latency benchmark (issue 5 item 6): the time from an upstream Source's change
//! notification to the arrival, at a downstream subscriber, of rsagg's own notification of
//! the same change, at a steady rate on loopback, p50/p90/p99/max. Target: p99 < 250 ms at
//! 200 changes/s; the figure is printed, never asserted.
//!
//! ```text
//! upstream Source ──POST payload (CN 1.0.1 4.1)──▶ hub ──deliver──▶ rsagg run --follow --listen
//!  (in-process, axum)                                              (push intake: fetch, verify,
//!        ▲                                                          store, publish, notify)
//!        └──────────── GET res/N (rsagg verifies the copy) ◀────────────────┘
//!                                                                    │ POST payload
//!  downstream subscriber (in-process) ◀──deliver── hub ◀─────────────┘
//! ```
//!
//! Each side is what a deployment has: `rsagg hub` and `rsagg run` are processes (their peak
//! RSS is read from `/proc/PID/status`, VmHWM, before they are stopped); the upstream Source
//! and the subscriber live in this process, all in memory, so the benchmark's own work is a
//! few microseconds per change. One hub serves both topics by default (the upstream's and
//! rsagg's), as a small deployment would run it; `--two-hubs` gives each its own.
//!
//! Two rows are measured, each with fresh processes and stores: **hub alone** (the subscriber
//! subscribes to the upstream's topic directly: upstream → hub → subscriber, the floor under
//! any aggregator) and **through rsagg** (upstream → hub → rsagg → hub → subscriber).
//! `--direct` measures only the first (it needs no push intake or publisher),
//! `--skip-direct` only the second.
//!
//! How a change is recognised downstream: every upstream change gives its resource a new,
//! unique body, so the body's md5 names the change. rsagg's entry carries the md5 either as
//! its copy's `hash` (the copy has the upstream's bytes) or on its `via` link (spec 14.8: the
//! upstream's `hash`); either is matched. The latency of a change is the arrival of the first
//! delivery naming it minus the instant right before the upstream's POST to the hub.
//!
//! A change whose resource changed again before rsagg fetched it can only be republished with
//! the newer body (rsagg verifies the bytes it gets against the hash it was told, and the
//! Source now serves the newer ones); such a change counts as **superseded** when a later
//! change of the same resource arrived, as **lost** otherwise. With the defaults a resource
//! changes every 0.5 s (100 resources at 200/s), so superseded changes appear only when the
//! latency nears 0.5 s.
//!
//! Missing features fail fast with a message, not a hang: rsagg must subscribe at the
//! upstream's hub within `--subscribe-timeout` (push intake) and the warm-up changes must
//! reach the subscriber within `--warmup-timeout` (publisher).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, Request, State};
use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use md5::{Digest, Md5};
use rsagg_e2e::{Watched, capability_entry, encode_document, tick_after};
use rsagg_model::{
    Capability, Change, HashAlgorithm, HashValue, Hashes, Header, Link, Md, Mode, Root, UrlEntry,
    W3cDateTime,
};
use rsagg_sitemap::ReadOptions;
use tokio::time::MissedTickBehavior;

use crate::docs::machine;
use crate::harvest::{fs_type, rsagg_binary_at};
use crate::procs::vm_hwm_kib;

/// Arguments of `notify`.
#[derive(Debug, clap::Args)]
pub struct NotifyArgs {
    /// Upstream changes per second during the measurement.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Length of the measurement, in seconds.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Resources of the upstream; changes go round-robin over them.
    #[arg(long, default_value_t = 100)]
    resources: u64,
    /// Changes per upstream notification payload (1: one payload per change).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Warm-up changes before the measurement, one payload each, each awaited downstream
    /// (connections are open and caches warm when the clock starts).
    #[arg(long, default_value_t = 5)]
    warmup: usize,
    /// Give the upstream's topic and rsagg's topic a hub each (default: one hub for both).
    #[arg(long)]
    two_hubs: bool,
    /// Only the "hub alone" baseline (upstream → hub → subscriber); needs no rsagg features
    /// beyond `rsagg hub`.
    #[arg(long, conflicts_with = "skip_direct")]
    direct: bool,
    /// Only the "through rsagg" row.
    #[arg(long)]
    skip_direct: bool,
    /// Seconds after the last change within which every change must have arrived; the rest
    /// are lost.
    #[arg(long, default_value_t = 10)]
    drain: u64,
    /// Seconds rsagg has, from its `listening` line, to subscribe at the upstream's hub
    /// (push intake).
    #[arg(long, default_value_t = 10)]
    subscribe_timeout: u64,
    /// Seconds each warm-up change has to arrive at the subscriber.
    #[arg(long, default_value_t = 30)]
    warmup_timeout: u64,
    /// Working directory: hub and rsagg stores, logs, the pipeline file (default: a fresh
    /// directory under the system temp, removed at the end unless `--keep`).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The `rsagg` binary (default: `rsagg` next to this executable; build it with
    /// `cargo build --release -p rsagg-cli`).
    #[arg(long, env = "RSAGG_BIN")]
    rsagg: Option<PathBuf>,
    /// TOML appended to rsagg's pipeline file (e.g. a `[publish]` section).
    #[arg(long)]
    pipeline_extra: Option<String>,
    /// `RSAGG_LOG` for `rsagg run` (its log is `rsagg.log` in the working directory).
    #[arg(long)]
    rsagg_log: Option<String>,
    /// Keep the working directory.
    #[arg(long)]
    keep: bool,
    /// Print one JSON object on stdout (the human-readable lines go to stderr).
    #[arg(long)]
    json: bool,
}

/// The pacing of the load generator: `Burst` so that a late tick (a slow POST, a busy core)
/// is made up at once and the offered rate stays the one asked for; each change's clock
/// starts right before its own POST, so catching up never hides in the latency.
const PACING: MissedTickBehavior = MissedTickBehavior::Burst;
const PACING_NAME: &str = "tokio interval, MissedTickBehavior::Burst (late ticks are made up)";

/// Name of the upstream in rsagg's pipeline (its WebSub callback is `{base}websub/up`).
const UPSTREAM_NAME: &str = "up";

/// Size of every resource body, in bytes: small, as notifications are about small changes.
const BODY_BYTES: usize = 256;

// ---------------------------------------------------------------------------------------------
// processes
// ---------------------------------------------------------------------------------------------

/// Starts a server process of the benchmark under the end-to-end tests' watchdog
/// ([`Watched`]): stdout and stderr in `DIR/NAME.log`; stopped (SIGTERM, then SIGKILL after
/// 5 s) when dropped or when the benchmark ends in any way, errors and panics included.
fn spawn(name: &str, cmd: &Command, dir: &Path) -> anyhow::Result<Watched> {
    let log = dir.join(format!("{name}.log"));
    Watched::spawn(name, cmd, &log, &[], Duration::from_secs(5))
        .with_context(|| format!("spawning {name}: {cmd:?}"))
}

/// `rsagg hub --listen 127.0.0.1:0 --lease-min 1 --allow-private-callbacks --store
/// file://DIR/NAME` (every callback and topic of the bench is on loopback), logging JSON at
/// `info` (the harness reads its `subscribed` events). Returns the process and the hub URL.
fn start_hub(bin: &Path, dir: &Path, name: &str) -> anyhow::Result<(Watched, String)> {
    let store = dir.join(name);
    std::fs::create_dir_all(&store)?;
    let mut cmd = Command::new(bin);
    cmd.args([
        "hub",
        "--listen",
        "127.0.0.1:0",
        "--lease-min",
        "1",
        "--allow-private-callbacks",
        "--store",
    ])
    .arg(format!("file://{}/", store.display()))
    .env("RSAGG_LOG", "info")
    .env("RSAGG_LOG_FORMAT", "json");
    let mut p = spawn(name, &cmd, dir)?;
    let url = p.wait_listening(Duration::from_secs(30))?;
    Ok((p, url))
}

/// Whether the hub has logged (`{"message":"subscribed",…}`, once the record is stored) a
/// subscription to `topic` whose callback satisfies `callback`.
fn hub_stored(
    hub: &mut Watched,
    topic: &str,
    callback: impl Fn(&str) -> bool,
) -> anyhow::Result<bool> {
    hub.log_has(|l| {
        serde_json::from_str::<serde_json::Value>(l).is_ok_and(|v| {
            v["message"] == "subscribed"
                && v["topic"].as_str() == Some(topic)
                && v["callback"].as_str().is_some_and(&callback)
        })
    })
}

// ---------------------------------------------------------------------------------------------
// the upstream Source
// ---------------------------------------------------------------------------------------------

/// Body of resource `i` at `version`: unique per (i, version), so its md5 names one change.
fn body(i: u64, version: u64) -> Bytes {
    let mut s = format!("resource {i} version {version}\n");
    while s.len() < BODY_BYTES {
        s.push_str("lorem ipsum dolor sit amet ");
    }
    s.truncate(BODY_BYTES);
    Bytes::from(s)
}

fn md5_hex(b: &[u8]) -> String {
    HashValue::from_bytes(HashAlgorithm::Md5, &Md5::digest(b)).digest
}

fn md5_hashes(hex: &str) -> Hashes {
    Hashes(vec![HashValue {
        algorithm: HashAlgorithm::Md5,
        digest: hex.to_owned(),
    }])
}

struct Resource {
    body: Bytes,
    md5: String,
    version: u64,
    lastmod: W3cDateTime,
}

struct SourceState {
    hub: String,
    /// `from` of the Change List: the Source's start.
    started: W3cDateTime,
    /// The last datetime handed out; every change and every `at` gets a later one.
    clock: W3cDateTime,
    resources: Vec<Resource>,
    /// The Change List, forward chronological. Every change is kept (200/s for 30 s is 6,000
    /// entries, about 2 MB): rsagg may read the list at any time and must find every change
    /// it has not applied yet.
    changes: Vec<UrlEntry>,
    /// Changes made so far (the round-robin counter).
    made: u64,
    /// `until` of the latest payload: the next payload's `from` (CN 1.0.1 3).
    until: W3cDateTime,
    /// The topic's content: the latest payload (CN 1.0.1 4.1).
    latest: Bytes,
}

/// One change of a payload: which resource, which version, the md5 of its new body.
#[derive(Debug, Clone)]
pub(crate) struct Changed {
    resource: u64,
    version: u64,
    md5: String,
}

/// A payload the Source built.
#[derive(Debug, Clone)]
pub(crate) struct Built {
    body: Bytes,
    changes: Vec<Changed>,
    from: W3cDateTime,
    until: W3cDateTime,
}

/// An upstream ResourceSync Source with a change-notification channel, all in memory; every
/// document is rendered when requested (writing 6,000-entry Change Lists at every change
/// would cost more than the change):
///
/// ```text
/// /.well-known/resourcesync   Source Description → capabilitylist.xml
/// /capabilitylist.xml         resourcelist.xml, changelist.xml and the channel
///                             (<loc>TOPIC</loc> + <rs:ln rel="hub">, CN 1.0.1 5)
/// /resourcelist.xml           the resources now (md5, length, lastmod; at/completed)
/// /changelist.xml             every change so far (from = start)
/// /change/                    the topic URI (GET/HEAD): Link rel=self, rel=hub; the latest
///                             payload
/// /res/N                      the resources (256 bytes each)
/// ```
pub(crate) struct Source {
    base: String,
    state: Mutex<SourceState>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Source {
    /// A Source at `base` (`http://127.0.0.1:PORT`, no trailing slash) with `n` resources,
    /// advertising `hub`.
    pub(crate) fn new(base: &str, hub: &str, n: u64) -> Source {
        let started = W3cDateTime::now();
        let resources = (0..n)
            .map(|i| {
                let body = body(i, 0);
                Resource {
                    md5: md5_hex(&body),
                    body,
                    version: 0,
                    lastmod: started,
                }
            })
            .collect();
        Source {
            base: base.trim_end_matches('/').to_owned(),
            state: Mutex::new(SourceState {
                hub: hub.to_owned(),
                started,
                clock: started,
                resources,
                changes: Vec::new(),
                made: 0,
                until: started,
                latest: Bytes::new(),
            }),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The topic URI.
    pub(crate) fn topic(&self) -> String {
        self.url("/change/")
    }

    fn capability_list_url(&self) -> String {
        self.url("/capabilitylist.xml")
    }

    fn hub(&self) -> String {
        lock(&self.state).hub.clone()
    }

    /// Makes `k` changes (round-robin over the resources, each a new unique body with a
    /// strictly later datetime), appends them to the Change List and builds their payload:
    /// `from` = the previous payload's `until`, `until` = the last change's datetime, so
    /// consecutive payloads neither overlap nor leave gaps (CN 1.0.1 3). The payload becomes
    /// the topic's content.
    pub(crate) fn change(&self, k: usize) -> Built {
        let mut st = lock(&self.state);
        let n = st.resources.len() as u64;
        let mut entries = Vec::with_capacity(k);
        let mut changes = Vec::with_capacity(k);
        for _ in 0..k {
            let i = st.made % n;
            st.made += 1;
            let at = tick_after(&st.clock);
            st.clock = at;
            let r = &mut st.resources[i as usize];
            r.version += 1;
            r.body = body(i, r.version);
            r.md5 = md5_hex(&r.body);
            r.lastmod = at;
            changes.push(Changed {
                resource: i,
                version: r.version,
                md5: r.md5.clone(),
            });
            entries.push(UrlEntry {
                loc: format!("{}/res/{i}", self.base),
                lastmod: Some(at),
                md: Some(Md {
                    change: Some(Change::Updated),
                    datetime: Some(at),
                    hash: Some(md5_hashes(&r.md5)),
                    length: Some(r.body.len() as u64),
                    ..Md::default()
                }),
                ..UrlEntry::default()
            });
        }
        let from = st.until;
        let until = st.clock;
        st.until = until;
        let mut header = Header::new(Root::Urlset, Capability::ChangeNotification);
        if let Some(md) = header.md.as_mut() {
            md.from = Some(from);
            md.until = Some(until);
        }
        header
            .links
            .push(Link::new("up", self.capability_list_url()));
        let payload = encode_document(&header, &entries);
        st.latest = payload.clone();
        st.changes.extend(entries);
        Built {
            body: payload,
            changes,
            from,
            until,
        }
    }

    fn source_description(&self) -> Bytes {
        let mut h = Header::new(Root::Urlset, Capability::Description);
        h.links
            .push(Link::new("describedby", self.url("/about.html")));
        encode_document(
            &h,
            &[capability_entry(
                self.capability_list_url(),
                Capability::CapabilityList,
                Vec::new(),
            )],
        )
    }

    fn capability_list(&self) -> Bytes {
        let mut h = Header::new(Root::Urlset, Capability::CapabilityList);
        h.links
            .push(Link::new("up", self.url("/.well-known/resourcesync")));
        encode_document(
            &h,
            &[
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
                    self.topic(),
                    Capability::ChangeNotification,
                    vec![Link::new("hub", self.hub())],
                ),
            ],
        )
    }

    fn resource_list(&self) -> Bytes {
        let mut st = lock(&self.state);
        // A snapshot as of a fresh datetime: every later change lies strictly after `at`.
        let at = tick_after(&st.clock);
        st.clock = at;
        let mut h = Header::new(Root::Urlset, Capability::ResourceList);
        h.links.push(Link::new("up", self.capability_list_url()));
        if let Some(md) = h.md.as_mut() {
            md.at = Some(at);
            md.completed = Some(at);
        }
        let entries: Vec<UrlEntry> = st
            .resources
            .iter()
            .enumerate()
            .map(|(i, r)| UrlEntry {
                loc: format!("{}/res/{i}", self.base),
                lastmod: Some(r.lastmod),
                md: Some(Md {
                    hash: Some(md5_hashes(&r.md5)),
                    length: Some(r.body.len() as u64),
                    ..Md::default()
                }),
                ..UrlEntry::default()
            })
            .collect();
        encode_document(&h, &entries)
    }

    fn change_list(&self) -> Bytes {
        let st = lock(&self.state);
        let mut h = Header::new(Root::Urlset, Capability::ChangeList);
        h.links.push(Link::new("up", self.capability_list_url()));
        if let Some(md) = h.md.as_mut() {
            md.from = Some(st.started);
        }
        encode_document(&h, &st.changes)
    }

    fn resource(&self, i: &str) -> Option<Bytes> {
        let i: usize = i.parse().ok()?;
        lock(&self.state).resources.get(i).map(|r| r.body.clone())
    }

    fn topic_content(&self) -> Bytes {
        lock(&self.state).latest.clone()
    }

    /// The Source's router (GET routes answer HEAD too).
    pub(crate) fn router(self: Arc<Source>) -> Router {
        fn xml(b: Bytes) -> Response {
            ([(header::CONTENT_TYPE, "application/xml")], b).into_response()
        }
        Router::new()
            .route(
                "/.well-known/resourcesync",
                get(|State(s): State<Arc<Source>>| async move { xml(s.source_description()) }),
            )
            .route(
                "/capabilitylist.xml",
                get(|State(s): State<Arc<Source>>| async move { xml(s.capability_list()) }),
            )
            .route(
                "/resourcelist.xml",
                get(|State(s): State<Arc<Source>>| async move { xml(s.resource_list()) }),
            )
            .route(
                "/changelist.xml",
                get(|State(s): State<Arc<Source>>| async move { xml(s.change_list()) }),
            )
            .route(
                "/about.html",
                get(|| async {
                    (
                        [(header::CONTENT_TYPE, "text/html")],
                        "<!doctype html><title>rsagg-bench notify</title>\
                         <p>The upstream Source of the notification latency benchmark.\n",
                    )
                }),
            )
            .route(
                "/change/",
                get(|State(s): State<Arc<Source>>| async move {
                    // CN 1.0.1 4.1 / WebSub 4: the topic names itself and its hub.
                    let link = rsagg_websub::link::format(&s.topic(), &s.hub());
                    (
                        [
                            (header::CONTENT_TYPE, "application/xml".to_owned()),
                            (header::LINK, link),
                        ],
                        s.topic_content(),
                    )
                        .into_response()
                }),
            )
            .route(
                "/res/{i}",
                get(
                    |State(s): State<Arc<Source>>, UrlPath(i): UrlPath<String>| async move {
                        match s.resource(&i) {
                            Some(b) => ([(header::CONTENT_TYPE, "text/plain")], b).into_response(),
                            None => StatusCode::NOT_FOUND.into_response(),
                        }
                    },
                ),
            )
            .with_state(self)
    }
}

/// Publishes `payload` in the CN 1.0.1 4.1 form: POST to the hub, `Content-Type:
/// application/xml`, `Link: <topic>; rel="self", <hub>; rel="hub"`; the hub answers 200 once
/// it has queued the payload for every subscriber.
async fn publish(
    client: &reqwest::Client,
    hub: &str,
    topic: &str,
    payload: Bytes,
) -> anyhow::Result<()> {
    let r = client
        .post(hub)
        .header(header::CONTENT_TYPE, "application/xml")
        .header(header::LINK, rsagg_websub::link::format(topic, hub))
        .body(payload)
        .send()
        .await
        .with_context(|| format!("publishing to {hub}"))?;
    let status = r.status();
    if status != StatusCode::OK {
        let text = r.text().await.unwrap_or_default();
        bail!("the hub {hub} answered {status} to a CN 1.0.1 publication (want 200): {text}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// the downstream subscriber
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default)]
struct SubState {
    /// Callback path → topic it was given out for.
    wanted: HashMap<String, String>,
    /// Callback paths whose `subscribe` verification was confirmed.
    confirmed: Vec<String>,
    /// Denials (WebSub 5.2): callback path and reason.
    denied: Vec<(String, String)>,
    /// md5 (hex) of a body named by a delivered entry → when it first arrived.
    arrivals: HashMap<String, Instant>,
    /// Deliveries received (payloads).
    payloads: u64,
    /// Entries in them.
    entries: u64,
    /// Deliveries that were not a readable ResourceSync document.
    unreadable: u64,
}

/// The WebSub subscriber (Destination) of the benchmark, on `127.0.0.1:PORT`, callbacks
/// `/cb/N`. A delivery's arrival instant is taken first thing in its handler; the payload is
/// read there too (a few microseconds for a small document), and each md5 it names is kept
/// with its first arrival.
#[derive(Clone)]
pub(crate) struct Subscriber {
    state: Arc<Mutex<SubState>>,
}

/// WebSub 5.3 and 5.3.1: echo `hub.challenge` (200, `text/plain`) only when `path` is a
/// callback given out for `hub.topic` and the hub asks to `subscribe`; anything else gets
/// 404, which tells the hub the subscriber does not want it.
fn verification_answer(
    wanted: &HashMap<String, String>,
    path: &str,
    params: &HashMap<String, String>,
) -> (StatusCode, String) {
    let mode = params.get("hub.mode").map(String::as_str);
    let topic = params.get("hub.topic");
    match (wanted.get(path), mode, topic, params.get("hub.challenge")) {
        (Some(want), Some("subscribe"), Some(topic), Some(challenge)) if want == topic => {
            (StatusCode::OK, challenge.clone())
        }
        _ => (
            StatusCode::NOT_FOUND,
            "no such subscription wanted\n".into(),
        ),
    }
}

/// The md5 digests an entry names: its own `hash` (rsagg's copy has the upstream's bytes)
/// and its `via` link's (spec 14.8: the upstream representation's hash).
fn entry_md5s(e: &UrlEntry) -> Vec<String> {
    let own = e.md.as_ref().and_then(|m| m.hash.as_ref());
    let via = e
        .links
        .iter()
        .filter(|l| l.rel == "via")
        .filter_map(|l| l.hash.as_ref());
    let mut v: Vec<String> = own
        .into_iter()
        .chain(via)
        .filter_map(|h| h.get(&HashAlgorithm::Md5))
        .map(|h| h.digest.to_ascii_lowercase())
        .collect();
    v.dedup();
    v
}

impl Subscriber {
    pub(crate) fn new() -> Subscriber {
        Subscriber {
            state: Arc::new(Mutex::new(SubState::default())),
        }
    }

    pub(crate) fn router(&self) -> Router {
        Router::new()
            .fallback(subscriber_handle)
            .with_state(self.state.clone())
    }

    /// Gives out callback `path` for `topic`.
    fn want(&self, path: &str, topic: &str) {
        lock(&self.state)
            .wanted
            .insert(path.to_owned(), topic.to_owned());
    }

    fn confirmed(&self, path: &str) -> bool {
        lock(&self.state).confirmed.iter().any(|p| p == path)
    }

    fn denial(&self, path: &str) -> Option<String> {
        lock(&self.state)
            .denied
            .iter()
            .find(|(p, _)| p == path)
            .map(|(_, r)| r.clone())
    }

    /// When the body with this md5 first arrived.
    fn arrival(&self, md5: &str) -> Option<Instant> {
        lock(&self.state).arrivals.get(md5).copied()
    }

    fn counts(&self) -> (u64, u64, u64) {
        let s = lock(&self.state);
        (s.payloads, s.entries, s.unreadable)
    }

    /// Subscribes `base + path` to `topic` at `hub` (WebSub 5.1: form POST, 202) and waits
    /// for the hub's verification GET to have been confirmed.
    async fn subscribe(
        &self,
        client: &reqwest::Client,
        hub: &str,
        topic: &str,
        base: &str,
        path: &str,
    ) -> anyhow::Result<String> {
        self.want(path, topic);
        let callback = format!("{}{path}", base.trim_end_matches('/'));
        let form = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("hub.mode", "subscribe")
            .append_pair("hub.topic", topic)
            .append_pair("hub.callback", &callback)
            .append_pair("hub.lease_seconds", "3600")
            .finish();
        let r = client
            .post(hub)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(form)
            .send()
            .await
            .with_context(|| format!("subscribing at {hub}"))?;
        let status = r.status();
        ensure!(
            status == StatusCode::ACCEPTED,
            "subscribe at {hub}: HTTP {status} (WebSub 5.1.2 wants 202): {}",
            r.text().await.unwrap_or_default()
        );
        let t0 = Instant::now();
        while !self.confirmed(path) {
            if let Some(reason) = self.denial(path) {
                bail!("the hub {hub} denied the subscription to {topic}: {reason}");
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(10),
                "the hub {hub} sent no verification of intent to {callback} within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(callback)
    }
}

async fn subscriber_handle(State(st): State<Arc<Mutex<SubState>>>, req: Request) -> Response {
    let arrived = Instant::now();
    let path = req.uri().path().to_owned();
    if req.method() == Method::GET {
        let params: HashMap<String, String> =
            url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
                .into_owned()
                .collect();
        let mut s = lock(&st);
        if params.get("hub.mode").map(String::as_str) == Some("denied") {
            let reason = params.get("hub.reason").cloned().unwrap_or_default();
            s.denied.push((path, reason));
            return (StatusCode::OK, "").into_response();
        }
        let (status, body) = verification_answer(&s.wanted, &path, &params);
        if status == StatusCode::OK {
            s.confirmed.push(path);
        }
        return (status, [(header::CONTENT_TYPE, "text/plain")], body).into_response();
    }
    if req.method() != Method::POST {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    let Ok(body) = axum::body::to_bytes(req.into_body(), 64 << 20).await else {
        return StatusCode::BAD_REQUEST.into_response();
    };
    let doc = rsagg_sitemap::read_document(&body, ReadOptions::new(Mode::Lenient, "delivery"));
    let mut s = lock(&st);
    s.payloads += 1;
    match doc {
        Ok(doc) => {
            s.entries += doc.entries.len() as u64;
            for e in &doc.entries {
                for md5 in entry_md5s(e) {
                    s.arrivals.entry(md5).or_insert(arrived);
                }
            }
        }
        Err(_) => s.unreadable += 1,
    }
    StatusCode::OK.into_response()
}

// ---------------------------------------------------------------------------------------------
// statistics
// ---------------------------------------------------------------------------------------------

/// The `p`-th percentile (0 < p ≤ 100) of `sorted` (ascending) by the nearest-rank method:
/// the smallest value with at least p% of the values at or below it, always a measured value.
fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let n = sorted.len();
    // The epsilon keeps a rank that is whole in decimal whole in binary too (99.9% of 1,000
    // is 999.0000000000001 in f64, which would round up to the maximum).
    let rank = ((p / 100.0) * n as f64 - 1e-9).ceil() as usize;
    Some(sorted[rank.clamp(1, n) - 1])
}

/// What one row measured.
#[derive(Debug, Clone, serde::Serialize)]
struct Row {
    case: &'static str,
    /// Changes sent during the measurement.
    sent: usize,
    delivered: usize,
    superseded: usize,
    lost: usize,
    /// Deliveries (payloads) the subscriber received, warm-up and rsagg's baseline included.
    payloads: u64,
    entries: u64,
    unreadable: u64,
    /// Changes per second actually offered.
    rate: f64,
    p50_ms: Option<f64>,
    p90_ms: Option<f64>,
    p99_ms: Option<f64>,
    max_ms: Option<f64>,
    /// Upstream POST to the hub's 200 (the hub has queued the payload).
    publish_p50_ms: Option<f64>,
    publish_p99_ms: Option<f64>,
    hub_peak_mib: f64,
    rsagg_peak_mib: Option<f64>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn fmt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |v| format!("{v:.1}"))
}

// ---------------------------------------------------------------------------------------------
// one row
// ---------------------------------------------------------------------------------------------

/// What a phase shares with the driver.
struct Ctx<'a> {
    a: &'a NotifyArgs,
    bin: &'a Path,
    say: &'a dyn Fn(&str),
}

/// A change sent during the measurement and when its POST started.
struct Sent {
    change: Changed,
    at: Instant,
}

/// Binds `127.0.0.1:0` and serves `app` on the current runtime; returns `http://ADDR`.
async fn serve(app: Router) -> anyhow::Result<String> {
    use axum::serve::ListenerExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}"))
}

/// Polls `done` every 20 ms until it holds or `timeout` passes (then one last look).
fn wait_blocking(
    timeout: Duration,
    mut done: impl FnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<bool> {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if done()? {
            return Ok(true);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

/// One row, with processes and stores of its own under `dir`.
fn phase(ctx: &Ctx<'_>, through_rsagg: bool, dir: &Path) -> anyhow::Result<Row> {
    let a = ctx.a;
    let say = ctx.say;
    std::fs::create_dir_all(dir)?;
    // Two worker threads: the machine has two cores, and the Source, the subscriber and the
    // load generator must not wait for each other's turn on one thread.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?;

    let (mut hub_up, hub_up_url) = start_hub(ctx.bin, dir, "hub")?;
    let mut hub_down = if through_rsagg && a.two_hubs {
        Some(start_hub(ctx.bin, dir, "hub-rsagg")?)
    } else {
        None
    };
    let hub_down_url = hub_down
        .as_ref()
        .map_or_else(|| hub_up_url.clone(), |(_, u)| u.clone());

    // The Source's port is known only once it is bound, and its documents name it: bind
    // first, build the Source, then serve.
    let (source, sub, sub_base) = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let source = Arc::new(Source::new(&base, &hub_up_url, a.resources));
        let app = source.clone().router();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let sub = Subscriber::new();
        let sub_base = serve(sub.router()).await?;
        anyhow::Ok((source, sub, sub_base))
    })?;
    let upstream_topic = source.topic();

    let mut rsagg: Option<Watched> = None;
    if through_rsagg {
        let port = rsagg_e2e::free_ports(1)?[0];
        let base = format!("http://127.0.0.1:{port}/bench/");
        let rsagg_topic = format!("{base}change/");
        let store = dir.join("store");
        std::fs::create_dir_all(&store)?;
        say(&format!(
            "  rsagg store file://{} ({}); topic {rsagg_topic}",
            store.display(),
            fs_type(&store)
        ));
        // The subscriber subscribes to rsagg's topic before rsagg starts: the hub verifies
        // with the subscriber only, and no notification of rsagg's is missed.
        let cb =
            rt.block_on(sub.subscribe(&client, &hub_down_url, &rsagg_topic, &sub_base, "/cb/1"))?;
        let down: &mut Watched = match hub_down.as_mut() {
            Some((p, _)) => p,
            None => &mut hub_up,
        };
        ensure!(
            wait_blocking(Duration::from_secs(10), || hub_stored(
                down,
                &rsagg_topic,
                |c| c == cb
            ))?,
            "the hub did not store the subscriber's subscription to {rsagg_topic} within 10 s"
        );
        let pipeline = dir.join("pipeline.toml");
        std::fs::write(
            &pipeline,
            format!(
                "# rsagg-bench notify: only push brings changes (the Change List is polled \
                 hourly)\n\
                 [collection]\nname = \"bench\"\nbase_url = \"{base}\"\n\n\
                 [store]\nurl = \"file://{}\"\n\n\
                 [[upstream]]\nname = \"{UPSTREAM_NAME}\"\nurl = \"{}/.well-known/resourcesync\"\n\
                 allow_private = true\npoll_interval = \"1h\"\n\n\
                 [notify]\nhub = \"{hub_down_url}\"\n\n{}\n",
                store.display(),
                source.base,
                a.pipeline_extra.as_deref().unwrap_or("")
            ),
        )?;
        let mut cmd = Command::new(ctx.bin);
        cmd.arg("run")
            .arg(&pipeline)
            .args(["--follow", "--listen", &format!("127.0.0.1:{port}")]);
        if let Some(l) = &a.rsagg_log {
            cmd.env("RSAGG_LOG", l);
        }
        let mut p = spawn("rsagg", &cmd, dir)?;
        p.wait_listening(Duration::from_secs(30))?;
        let t0 = Instant::now();
        say(&format!(
            "  rsagg run --follow --listen 127.0.0.1:{port} (pid {}) listening; waiting for its \
             subscription at {hub_up_url}",
            p.pid()
        ));
        let callback_prefix = format!("{base}websub/");
        let subscribed = wait_blocking(Duration::from_secs(a.subscribe_timeout), || {
            p.ensure_running()?;
            hub_stored(&mut hub_up, &upstream_topic, |c| {
                c.starts_with(&callback_prefix)
            })
        })?;
        if !subscribed {
            bail!(
                "rsagg did not subscribe to the upstream's topic {upstream_topic} at the hub \
                 {hub_up_url} within {} s of listening (expected callback \
                 {callback_prefix}{UPSTREAM_NAME}): push intake (`run --follow --listen` \
                 subscribing at the hub of the Capability List's change-notification entry) \
                 is missing or failed.\nrsagg log (tail):\n{}\nhub log (tail):\n{}",
                a.subscribe_timeout,
                p.log_tail(20),
                hub_up.log_tail(10)
            );
        }
        say(&format!(
            "  rsagg subscribed {:.1} s after listening",
            t0.elapsed().as_secs_f64()
        ));
        rsagg = Some(p);
    } else {
        let cb =
            rt.block_on(sub.subscribe(&client, &hub_up_url, &upstream_topic, &sub_base, "/cb/1"))?;
        ensure!(
            wait_blocking(Duration::from_secs(10), || hub_stored(
                &mut hub_up,
                &upstream_topic,
                |c| c == cb
            ))?,
            "the hub did not store the subscription to {upstream_topic} within 10 s"
        );
    }

    // Warm-up: one change at a time, each awaited downstream.
    let warm_timeout = Duration::from_secs(a.warmup_timeout);
    for w in 0..a.warmup {
        let built = source.change(1);
        rt.block_on(publish(
            &client,
            &hub_up_url,
            &upstream_topic,
            built.body.clone(),
        ))?;
        let md5 = &built.changes[0].md5;
        let t0 = Instant::now();
        while sub.arrival(md5).is_none() {
            if let Some(p) = rsagg.as_mut() {
                p.ensure_running()?;
            }
            if t0.elapsed() > warm_timeout {
                let (payloads, entries, _) = sub.counts();
                let why = if through_rsagg {
                    format!(
                        "rsagg is subscribed at the upstream's hub, but no notification of \
                         rsagg's names warm-up change {w} (md5 {md5}) within {warm_timeout:?} \
                         ({payloads} deliveries, {entries} entries so far): the publisher \
                         ([notify] hub) or the application of pushed payloads is missing or \
                         failed.\nrsagg log (tail):\n{}",
                        rsagg.as_ref().map(|p| p.log_tail(30)).unwrap_or_default()
                    )
                } else {
                    format!(
                        "warm-up change {w} did not reach the subscriber through the hub \
                         within {warm_timeout:?}"
                    )
                };
                bail!("{why}\nhub log (tail):\n{}", hub_up.log_tail(10));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    // The measurement.
    let period = Duration::from_secs_f64(a.batch as f64 / a.rate);
    let payloads = ((a.rate * a.seconds) / a.batch as f64).ceil().max(1.0) as usize;
    let (sent, answers, offered) = rt.block_on(async {
        let mut sent: Vec<Sent> = Vec::with_capacity(payloads * a.batch);
        let mut answers: Vec<f64> = Vec::with_capacity(payloads);
        let mut interval = tokio::time::interval(period);
        interval.set_missed_tick_behavior(PACING);
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        let mut previous: Option<W3cDateTime> = None;
        for _ in 0..payloads {
            interval.tick().await;
            let built = source.change(a.batch);
            // CN 1.0.1 3: consecutive payloads, `from` = the previous `until` (a gap would
            // be the Source's bug, and rsagg would rightly treat it as one).
            ensure!(
                previous.is_none_or(|u| u == built.from)
                    && built.from.unix_nanos() < built.until.unix_nanos(),
                "the Source built a payload that does not follow the previous one"
            );
            previous = Some(built.until);
            let at = Instant::now();
            first.get_or_insert(at);
            last = at;
            publish(&client, &hub_up_url, &upstream_topic, built.body).await?;
            answers.push(ms(at.elapsed()));
            sent.extend(built.changes.into_iter().map(|change| Sent { change, at }));
        }
        // Changes per second offered: payloads - 1 intervals between the first and the last
        // POST.
        let span = last.duration_since(first.unwrap_or(last)).as_secs_f64();
        let offered = if payloads > 1 && span > 0.0 {
            ((payloads - 1) * a.batch) as f64 / span
        } else {
            f64::NAN
        };
        anyhow::Ok((sent, answers, offered))
    })?;
    let last_sent = sent.last().map_or_else(Instant::now, |s| s.at);

    // Drain: wait until every change arrived, or `--drain` seconds after the last one.
    let deadline = last_sent + Duration::from_secs(a.drain);
    loop {
        let missing = sent.iter().any(|s| sub.arrival(&s.change.md5).is_none());
        if !missing || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // Peaks before stopping anything.
    let hub_peak =
        vm_hwm_kib(hub_up.pid()) + hub_down.as_ref().map_or(0, |(p, _)| vm_hwm_kib(p.pid()));
    let rsagg_peak = rsagg.as_ref().map(|p| vm_hwm_kib(p.pid()));
    if let Some(p) = rsagg.as_mut() {
        p.stop();
    }
    drop(rsagg);
    drop(hub_down);
    hub_up.stop();
    rt.shutdown_timeout(Duration::from_secs(2));

    // The latest arrival of each resource's versions, to tell superseded from lost.
    let mut newest_arrived: HashMap<u64, u64> = HashMap::new();
    for s in &sent {
        if sub.arrival(&s.change.md5).is_some() {
            let v = newest_arrived.entry(s.change.resource).or_default();
            *v = (*v).max(s.change.version);
        }
    }
    let mut lat = Vec::with_capacity(sent.len());
    let (mut superseded, mut lost) = (0, 0);
    for s in &sent {
        match sub.arrival(&s.change.md5) {
            Some(t) => lat.push(ms(t.saturating_duration_since(s.at))),
            None if newest_arrived
                .get(&s.change.resource)
                .is_some_and(|&v| v > s.change.version) =>
            {
                superseded += 1
            }
            None => lost += 1,
        }
    }
    lat.sort_by(f64::total_cmp);
    let mut answers = answers;
    answers.sort_by(f64::total_cmp);
    let (payloads_in, entries, unreadable) = sub.counts();
    Ok(Row {
        case: if through_rsagg {
            "through rsagg"
        } else {
            "hub alone"
        },
        sent: sent.len(),
        delivered: lat.len(),
        superseded,
        lost,
        payloads: payloads_in,
        entries,
        unreadable,
        rate: offered,
        p50_ms: percentile(&lat, 50.0),
        p90_ms: percentile(&lat, 90.0),
        p99_ms: percentile(&lat, 99.0),
        max_ms: lat.last().copied(),
        publish_p50_ms: percentile(&answers, 50.0),
        publish_p99_ms: percentile(&answers, 99.0),
        hub_peak_mib: hub_peak as f64 / 1024.0,
        rsagg_peak_mib: rsagg_peak.map(|k| k as f64 / 1024.0),
    })
}

/// Load average of the last minute, for the header (the machine is shared).
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}

/// `rsagg-bench notify`.
pub fn run(a: NotifyArgs) -> anyhow::Result<()> {
    ensure!(
        a.rate > 0.0 && a.seconds > 0.0 && a.resources > 0 && a.batch > 0,
        "--rate, --seconds, --resources and --batch must be > 0"
    );
    let bin = rsagg_binary_at(a.rsagg.as_deref())?;
    let work = match &a.dir {
        Some(d) => d.clone(),
        None => std::env::temp_dir().join(format!("rsagg-bench-notify-{}", std::process::id())),
    };
    std::fs::create_dir_all(&work)?;
    let json = a.json;
    let say = move |s: &str| {
        if json {
            eprintln!("{s}");
        } else {
            println!("{s}");
        }
    };
    let flush = rsagg_store::WAL_FLUSH_INTERVAL;
    say(&format!(
        "machine: {}; load average {} at start",
        machine(),
        loadavg()
    ));
    say(&format!(
        "notify: {} changes/s for {} s over {} resources of {BODY_BYTES} bytes, {} change(s) \
         per upstream payload (CN 1.0.1 4.1 POST), {} warm-up change(s); pacing: {PACING_NAME}",
        a.rate, a.seconds, a.resources, a.batch, a.warmup
    ));
    say(&format!(
        "hubs: {}; `rsagg hub --lease-min 1`, file:// store, fresh per row",
        if a.two_hubs {
            "two (the upstream's topic on one, rsagg's on the other)"
        } else {
            "one `rsagg hub` serves both the upstream's topic and rsagg's topic"
        }
    ));
    say(&format!(
        "rsagg: state engine slatedb, WAL flush interval {} ms (rsagg_store::WAL_FLUSH_INTERVAL); \
         file:// store under {} ({}); upstream poll_interval 1h (only push brings changes)",
        flush.as_millis(),
        work.display(),
        fs_type(&work)
    ));
    say(
        "latency = arrival at the subscriber of the first notification naming the change − start of the upstream's POST to the hub",
    );

    let ctx = Ctx {
        a: &a,
        bin: &bin,
        say: &say,
    };
    let mut rows = Vec::new();
    let result = (|| -> anyhow::Result<()> {
        if !a.skip_direct {
            say("hub alone: upstream → hub → subscriber");
            rows.push(phase(&ctx, false, &work.join("direct"))?);
        }
        if !a.direct {
            say("through rsagg: upstream → hub → rsagg → hub → subscriber");
            rows.push(phase(&ctx, true, &work.join("rsagg"))?);
        }
        Ok(())
    })();

    if !rows.is_empty() {
        say(&format!(
            "{:<14} {:>6} {:>9} {:>5} {:>5} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>13} {:>8} {:>9}",
            "case",
            "sent",
            "delivered",
            "super",
            "lost",
            "rate/s",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "max ms",
            "payloads",
            "hub 200 p50/99",
            "hub MiB",
            "rsagg MiB"
        ));
        for r in &rows {
            say(&format!(
                "{:<14} {:>6} {:>9} {:>5} {:>5} {:>8.1} {:>8} {:>8} {:>8} {:>8} {:>8} {:>13} {:>8.1} {:>9}",
                r.case,
                r.sent,
                r.delivered,
                r.superseded,
                r.lost,
                r.rate,
                fmt_ms(r.p50_ms),
                fmt_ms(r.p90_ms),
                fmt_ms(r.p99_ms),
                fmt_ms(r.max_ms),
                r.payloads,
                format!("{}/{}", fmt_ms(r.publish_p50_ms), fmt_ms(r.publish_p99_ms)),
                r.hub_peak_mib,
                r.rsagg_peak_mib
                    .map_or_else(|| "-".into(), |m| format!("{m:.1}"))
            ));
        }
    }
    let verdict = rows.iter().find(|r| r.case == "through rsagg").map(|r| {
        let p99 = r.p99_ms.unwrap_or(f64::INFINITY);
        format!(
            "p99 = {} ms (target < 250 ms): {}",
            fmt_ms(r.p99_ms),
            if p99 < 250.0 && r.lost == 0 {
                "meets"
            } else {
                "BELOW target"
            }
        )
    });
    if let Some(v) = &verdict {
        say(v);
    }
    if rows.iter().any(|r| r.lost > 0) {
        say("some changes were lost (never delivered within the drain period): see the table");
    }
    if json {
        println!(
            "{}",
            serde_json::json!({
                "machine": machine(),
                "loadavg_start": loadavg(),
                "rate": a.rate,
                "seconds": a.seconds,
                "resources": a.resources,
                "batch": a.batch,
                "hubs": if a.two_hubs { 2 } else { 1 },
                "pacing": PACING_NAME,
                "wal_flush_interval_ms": flush.as_millis() as u64,
                "store_fs": fs_type(&work),
                "rows": rows,
                "verdict": verdict,
                "error": result.as_ref().err().map(|e| format!("{e:#}")),
            })
        );
    }
    let keep = a.dir.is_some() || a.keep;
    if result.is_ok() && !keep {
        std::fs::remove_dir_all(&work)?;
    } else {
        say(&format!("working directory kept: {}", work.display()));
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use rsagg_model::DocumentKind;
    use tower::ServiceExt;

    async fn get(
        app: &Router,
        method: Method,
        path: &str,
    ) -> (StatusCode, Vec<(String, String)>, Bytes) {
        let r = app
            .clone()
            .oneshot(
                axum::http::Request::builder()
                    .method(method)
                    .uri(path)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = r.status();
        let headers = r
            .headers()
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
            .collect();
        let body = axum::body::to_bytes(r.into_body(), 1 << 26).await.unwrap();
        (status, headers, body)
    }

    /// Reads `xml` strictly (as `rsagg validate --strict` does) and fails on any error.
    fn strict(xml: &[u8], what: &str) -> rsagg_sitemap::Document {
        let doc = rsagg_sitemap::read_document(xml, ReadOptions::new(Mode::Strict, what))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let errors: Vec<_> = doc.errors().collect();
        assert!(
            errors.is_empty(),
            "{what}: {errors:#?}\n{}",
            String::from_utf8_lossy(xml)
        );
        doc
    }

    #[tokio::test]
    async fn the_sources_documents_validate_strictly() {
        let src = Arc::new(Source::new("http://127.0.0.1:1", "http://127.0.0.1:2/", 5));
        let mut built = vec![src.change(1), src.change(3), src.change(1)];
        built.extend((0..20).map(|_| src.change(2)));
        let app = src.clone().router();

        let (s, _, sd) = get(&app, Method::GET, "/.well-known/resourcesync").await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            strict(&sd, "sd").header.kind(),
            DocumentKind::SourceDescription
        );

        let (_, _, cl) = get(&app, Method::GET, "/capabilitylist.xml").await;
        let cl = strict(&cl, "capability list");
        let channel = cl
            .entries
            .iter()
            .find(|e| {
                e.md.as_ref().and_then(|m| m.capability.as_ref())
                    == Some(&Capability::ChangeNotification)
            })
            .expect("a change-notification entry");
        assert_eq!(channel.loc, "http://127.0.0.1:1/change/");
        assert_eq!(
            channel.link("hub").map(|l| l.href.as_str()),
            Some("http://127.0.0.1:2/")
        );

        let (_, _, rl) = get(&app, Method::GET, "/resourcelist.xml").await;
        let rl = strict(&rl, "resource list");
        assert_eq!(rl.entries.len(), 5);
        for (i, e) in rl.entries.iter().enumerate() {
            let (s, _, b) = get(&app, Method::GET, &format!("/res/{i}")).await;
            assert_eq!(s, StatusCode::OK);
            let md = e.md.as_ref().unwrap();
            assert_eq!(md.length, Some(b.len() as u64));
            assert_eq!(
                md.hash
                    .as_ref()
                    .unwrap()
                    .get(&HashAlgorithm::Md5)
                    .unwrap()
                    .digest,
                md5_hex(&b)
            );
        }
        let at = rl.header.md.as_ref().unwrap().at.unwrap();

        let (_, _, chl) = get(&app, Method::GET, "/changelist.xml").await;
        let chl = strict(&chl, "change list");
        assert_eq!(chl.entries.len(), 1 + 3 + 1 + 40);
        for w in chl.entries.windows(2) {
            assert!(
                w[0].change_instant().unwrap().unix_nanos()
                    < w[1].change_instant().unwrap().unix_nanos()
            );
        }
        // every change lies strictly before the Resource List's `at` (rendered after them)
        assert!(
            chl.entries
                .last()
                .unwrap()
                .change_instant()
                .unwrap()
                .unix_nanos()
                < at.unix_nanos()
        );
        // the change after the Resource List lies strictly after its `at`
        let after = src.change(1);
        assert!(
            after.from.unix_nanos() < at.unix_nanos() && at.unix_nanos() < after.until.unix_nanos()
        );

        // payloads: valid, consecutive from/until, entries within (from, until]
        built.push(after);
        for (k, b) in built.iter().enumerate() {
            let doc = strict(&b.body, "payload");
            assert_eq!(
                doc.header.capability(),
                Some(&Capability::ChangeNotification)
            );
            let md = doc.header.md.as_ref().unwrap();
            assert_eq!(md.from, Some(b.from));
            assert_eq!(md.until, Some(b.until));
            assert_eq!(doc.entries.len(), b.changes.len());
            for e in &doc.entries {
                let t = e.change_instant().unwrap().unix_nanos();
                assert!(b.from.unix_nanos() < t && t <= b.until.unix_nanos());
            }
            if k > 0 {
                assert_eq!(
                    built[k - 1].until,
                    b.from,
                    "payload {k}: from = previous until"
                );
            }
            let md5s: Vec<String> = doc.entries.iter().flat_map(entry_md5s).collect();
            let want: Vec<String> = b.changes.iter().map(|c| c.md5.clone()).collect();
            assert_eq!(md5s, want);
        }

        // the topic: Link rel=self and rel=hub (quoted), the latest payload, HEAD too
        for method in [Method::GET, Method::HEAD] {
            let (s, h, body) = get(&app, method.clone(), "/change/").await;
            assert_eq!(s, StatusCode::OK);
            let link = h
                .iter()
                .find(|(k, _)| k == "link")
                .map(|(_, v)| v.clone())
                .unwrap();
            assert_eq!(
                link,
                "<http://127.0.0.1:1/change/>; rel=\"self\", <http://127.0.0.1:2/>; rel=\"hub\""
            );
            if method == Method::GET {
                assert_eq!(body, built.last().unwrap().body);
            } else {
                assert!(body.is_empty());
            }
        }
        assert_eq!(
            get(&app, Method::GET, "/res/99").await.0,
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn bodies_are_unique_per_change() {
        let src = Source::new("http://127.0.0.1:1", "http://127.0.0.1:2/", 3);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..30 {
            for c in src.change(1).changes {
                assert!(seen.insert(c.md5), "md5 repeated");
            }
        }
        assert_eq!(body(7, 3).len(), BODY_BYTES);
    }

    fn params(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn verification_echoes_the_challenge_only_for_a_wanted_subscription() {
        let wanted: HashMap<String, String> =
            [("/cb/1".to_owned(), "http://t.example/change/".to_owned())].into();
        let ok = params(&[
            ("hub.mode", "subscribe"),
            ("hub.topic", "http://t.example/change/"),
            ("hub.challenge", "abc123"),
            ("hub.lease_seconds", "3600"),
        ]);
        assert_eq!(
            verification_answer(&wanted, "/cb/1", &ok),
            (StatusCode::OK, "abc123".into())
        );
        assert_eq!(
            verification_answer(&wanted, "/cb/2", &ok).0,
            StatusCode::NOT_FOUND
        );
        let mut other_topic = ok.clone();
        other_topic.insert("hub.topic".into(), "http://t.example/other/".into());
        assert_eq!(
            verification_answer(&wanted, "/cb/1", &other_topic).0,
            StatusCode::NOT_FOUND
        );
        let mut unsub = ok.clone();
        unsub.insert("hub.mode".into(), "unsubscribe".into());
        assert_eq!(
            verification_answer(&wanted, "/cb/1", &unsub).0,
            StatusCode::NOT_FOUND
        );
        let mut no_challenge = ok;
        no_challenge.remove("hub.challenge");
        assert_eq!(
            verification_answer(&wanted, "/cb/1", &no_challenge).0,
            StatusCode::NOT_FOUND
        );
    }

    #[tokio::test]
    async fn the_subscriber_answers_verification_and_records_deliveries() {
        let sub = Subscriber::new();
        sub.want("/cb/1", "http://u.example/change/");
        let app = sub.router();
        let (s, _, b) = get(
            &app,
            Method::GET,
            "/cb/1?hub.mode=subscribe&hub.topic=http%3A%2F%2Fu.example%2Fchange%2F&hub.challenge=xyz&hub.lease_seconds=3600",
        )
        .await;
        assert_eq!((s, b.as_ref()), (StatusCode::OK, b"xyz".as_slice()));
        assert!(sub.confirmed("/cb/1"));

        // an rsagg-like entry: the copy's own sha-256 hash, the md5 on its `via` link
        let mut header = Header::new(Root::Urlset, Capability::ChangeNotification);
        if let Some(md) = header.md.as_mut() {
            md.from = Some(W3cDateTime::from_unix(1, 0));
            md.until = Some(W3cDateTime::from_unix(2, 0));
        }
        let upstream = md5_hex(b"upstream body");
        let entry = UrlEntry {
            loc: "http://agg.example/bench/copy/1".into(),
            md: Some(Md {
                change: Some(Change::Updated),
                datetime: Some(W3cDateTime::from_unix(2, 0)),
                hash: Some(Hashes(vec![HashValue::from_bytes(
                    HashAlgorithm::Sha256,
                    &[7; 32],
                )])),
                ..Md::default()
            }),
            links: vec![Link {
                hash: Some(md5_hashes(&upstream)),
                ..Link::new("via", "http://u.example/res/1")
            }],
            ..UrlEntry::default()
        };
        let payload = encode_document(&header, &[entry]);
        let before = Instant::now();
        let r = app
            .clone()
            .oneshot(
                axum::http::Request::builder()
                    .method(Method::POST)
                    .uri("/cb/1")
                    .header("content-type", "application/xml")
                    .body(Body::from(payload))
                    .unwrap(),
            )
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert!(sub.arrival(&upstream).is_some_and(|t| t >= before));
        assert_eq!(sub.counts(), (1, 1, 0));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 90.0), Some(90.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&v, 100.0), Some(100.0));
        let w: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(percentile(&w, 99.0), Some(990.0));
        assert_eq!(percentile(&w, 99.9), Some(999.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[1.0, 2.0], 50.0), Some(1.0));
        assert_eq!(percentile(&[1.0, 2.0], 51.0), Some(2.0));
        assert_eq!(percentile(&[], 50.0), None);
    }
}
