//! Push intake (Change Notification 1.0.1 as a Destination): the [`Inbox`] behind the
//! WebSub callbacks `{base_url}websub/{upstream}` of `run --follow --listen`, and the pure
//! parts of applying a notification (reading the payload, finding its set of resources,
//! telling whether it follows the previous one).
//!
//! The callback side must answer quickly and never block on the harvest: the HTTP handler
//! authenticates a delivery ([`Inbox::deliver`]: signature checked against the secret rsagg
//! gave, WebSub 7.1) and puts it into a bounded queue; the follower ([`crate::follow`])
//! drains the queue, applies the payloads through the same path as Change List entries and
//! publishes. A full queue answers 503, so the hub retries later rather than rsagg losing a
//! notification; a forged or unknown delivery is answered 2xx and dropped (WebSub 7.1), and
//! counted.
//!
//! Push only shortens latency: polling goes on at `poll_interval` whatever the hub does, and
//! a payload whose `from` is not the previous payload's `until` (a lost or reordered
//! notification, CN 1.0.1 3) makes the follower read the upstream's Change List from the
//! checkpoint before applying it.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use rsagg_fetch::CapabilitySet;
use rsagg_model::{Capability, Mode, Root, UrlEntry, W3cDateTime};
use rsagg_sitemap::ReadOptions;
use rsagg_websub::subscriber::{Answer, Delivery, Dropped, Subscriber, SubscriptionRecord};
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use url::Url;

use crate::Pipeline;

/// Deliveries waiting for the follower, at most (then callbacks answer 503).
pub const QUEUE: usize = 1024;
/// Largest payload accepted at a callback, in bytes (a change notification is a Change
/// List fragment: 50,000 entries fit well under it).
pub const MAX_PAYLOAD_BYTES: usize = 10 << 20;
/// The path segment of the callbacks under `collection.base_url`.
pub const CALLBACK_SEGMENT: &str = "websub/";

/// The callback URL of `upstream` (DESIGN.md URL map: `{base}websub/{upstream name}`).
pub fn callback_url(base_url: &Url, upstream: &str) -> Option<Url> {
    base_url.join(&format!("{CALLBACK_SEGMENT}{upstream}")).ok()
}

/// A delivery accepted at a callback, waiting to be applied.
#[derive(Debug)]
pub(crate) struct Pushed {
    pub upstream: String,
    pub topic: String,
    pub body: Bytes,
    /// When it arrived (push→publish latency is measured from here).
    pub received: Instant,
}

/// What the callback answers a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Intake {
    /// Queued for the follower (2xx).
    Queued,
    /// Dropped (2xx all the same, WebSub 7.1): why.
    Dropped(String),
    /// The queue is full (503: the hub retries).
    Busy,
    /// No such callback (404).
    NoCallback,
}

/// Counters of the push intake since the follower started (in the run report and
/// `/metrics`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PushStats {
    /// Deliveries received at a callback.
    pub received: u64,
    /// Payloads applied (their changes committed or recognised as replays).
    pub applied: u64,
    /// Dropped: signature missing or wrong.
    pub dropped_signature: u64,
    /// Dropped: no subscription of that callback for that topic, or no set to apply to.
    pub dropped_unknown: u64,
    /// Dropped: not a valid change notification (CN 1.0.1 3).
    pub dropped_invalid: u64,
    /// Answered 503 because the queue was full.
    pub busy: u64,
    /// Payloads that did not follow the previous one (gap or reordering) and made the
    /// follower read the Change List.
    pub gaps_recovered: u64,
    /// Verified subscriptions whose lease runs.
    pub subscriptions: u64,
    /// Push→publish latency of the last push pass, in milliseconds (oldest payload).
    pub last_latency_ms: u64,
    /// The largest such latency.
    pub max_latency_ms: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub received: AtomicU64,
    pub applied: AtomicU64,
    pub dropped_signature: AtomicU64,
    pub dropped_unknown: AtomicU64,
    pub dropped_invalid: AtomicU64,
    pub busy: AtomicU64,
    pub gaps_recovered: AtomicU64,
    pub last_latency_ms: AtomicU64,
    pub max_latency_ms: AtomicU64,
}

impl Counters {
    pub fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn latency(&self, ms: u64) {
        self.last_latency_ms.store(ms, Ordering::Relaxed);
        self.max_latency_ms.fetch_max(ms, Ordering::Relaxed);
    }
}

/// The push intake of one pipeline: the WebSub subscriber state and the bounded queue
/// between the callbacks and the follower. Shared by the server (callbacks) and
/// [`crate::follow::follow`].
#[derive(Debug)]
pub struct Inbox {
    pub(crate) subscriber: Subscriber,
    tx: mpsc::Sender<Pushed>,
    rx: std::sync::Mutex<Option<mpsc::Receiver<Pushed>>>,
    /// Upstreams with `push = true`: the callbacks that exist.
    upstreams: HashSet<String>,
    pub(crate) counters: Counters,
    /// Woken when a verification changed a subscription: the follower saves the records
    /// and recomputes when to renew.
    pub(crate) changed: tokio::sync::Notify,
}

impl Inbox {
    /// The intake of `p` (callbacks for its upstreams with `push = true`).
    pub fn new(p: &Pipeline) -> Result<Arc<Inbox>, crate::Error> {
        let client = reqwest::Client::builder()
            .timeout(p.config.fetch.read_timeout)
            .connect_timeout(p.config.fetch.connect_timeout)
            // A hub answering a redirect is an answer (WebSub 5.1: 202 is expected).
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("rsagg/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| crate::Error::Push {
                upstream: String::new(),
                message: format!("HTTP client: {e}"),
            })?;
        let (tx, rx) = mpsc::channel(QUEUE);
        Ok(Arc::new(Inbox {
            subscriber: Subscriber::new(client),
            tx,
            rx: std::sync::Mutex::new(Some(rx)),
            upstreams: p
                .config
                .upstreams
                .iter()
                .filter(|u| u.push)
                .map(|u| u.name.clone())
                .collect(),
            counters: Counters::default(),
            changed: tokio::sync::Notify::new(),
        }))
    }

    /// The WebSub subscriber state (subscriptions, secrets, leases).
    pub fn subscriber(&self) -> &Subscriber {
        &self.subscriber
    }

    /// Whether `upstream` has a callback.
    pub fn has_callback(&self, upstream: &str) -> bool {
        self.upstreams.contains(upstream)
    }

    /// Answers a verification of intent at the callback of `upstream` (`query`: the raw
    /// query string). `None`: no such callback or not a WebSub request (404).
    pub fn verify(&self, upstream: &str, query: &str) -> Option<Answer> {
        if !self.has_callback(upstream) {
            return None;
        }
        let v = rsagg_websub::subscriber::Verification::from_query(query)?;
        let answer = self
            .subscriber
            .verify(upstream, &v, rsagg_websub::subscriber::unix_millis());
        tracing::info!(upstream, topic = %v.topic, mode = %v.mode, ?answer, "verification of intent");
        if answer != Answer::Refuse {
            self.changed.notify_one();
        }
        Some(answer)
    }

    /// Takes a delivery at the callback of `upstream`: authenticated, then queued.
    pub fn deliver(&self, upstream: &str, d: Delivery) -> Intake {
        if !self.has_callback(upstream) {
            return Intake::NoCallback;
        }
        Counters::add(&self.counters.received);
        let topic = match self.subscriber.accept(upstream, &d) {
            Ok(t) => t,
            Err(why) => {
                match why {
                    Dropped::Unsigned | Dropped::BadSignature(_) => {
                        Counters::add(&self.counters.dropped_signature);
                    }
                    _ => Counters::add(&self.counters.dropped_unknown),
                }
                tracing::warn!(upstream, reason = %why, "delivery dropped");
                return Intake::Dropped(why.to_string());
            }
        };
        let pushed = Pushed {
            upstream: upstream.to_owned(),
            topic,
            body: d.body,
            received: Instant::now(),
        };
        match self.tx.try_send(pushed) {
            Ok(()) => Intake::Queued,
            Err(_) => {
                Counters::add(&self.counters.busy);
                Intake::Busy
            }
        }
    }

    /// The queue's receiving end (taken once, by the follower).
    pub(crate) fn take_queue(&self) -> Option<mpsc::Receiver<Pushed>> {
        self.rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// The counters now.
    pub fn stats(&self) -> PushStats {
        let c = &self.counters;
        let now = rsagg_websub::subscriber::unix_millis();
        let subscriptions = self
            .upstreams
            .iter()
            .flat_map(|u| self.subscriber.records(u))
            .filter(|r| r.active(now))
            .count();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PushStats {
            received: get(&c.received),
            applied: get(&c.applied),
            dropped_signature: get(&c.dropped_signature),
            dropped_unknown: get(&c.dropped_unknown),
            dropped_invalid: get(&c.dropped_invalid),
            busy: get(&c.busy),
            gaps_recovered: get(&c.gaps_recovered),
            subscriptions: subscriptions as u64,
            last_latency_ms: get(&c.last_latency_ms),
            max_latency_ms: get(&c.max_latency_ms),
        }
    }
}

/// What the follower keeps per upstream in the store (`push/{upstream}.json`), so a
/// restarted follower still verifies deliveries signed with the secrets it gave and keeps
/// the continuity of each channel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct PushRecord {
    /// The subscriptions (with their secrets).
    #[serde(default)]
    pub subscriptions: Vec<SubscriptionRecord>,
    /// The `until` of the last payload applied, per topic.
    #[serde(default)]
    pub until: BTreeMap<String, W3cDateTime>,
}

/// The object holding [`PushRecord`] of `upstream`.
pub(crate) fn record_path(upstream: &str) -> String {
    format!("push/{upstream}.json")
}

/// A change notification read and checked (CN 1.0.1 3).
#[derive(Debug)]
pub(crate) struct Payload {
    pub from: Option<W3cDateTime>,
    pub until: Option<W3cDateTime>,
    /// The `rs:ln rel="up"` (the set's Capability List), resolved against the topic.
    pub up: Option<Url>,
    pub entries: Vec<UrlEntry>,
}

/// Reads a payload leniently (upstream quirks pass, as in Change Lists), and refuses what
/// is not a change notification: another root, another capability, unreadable XML.
pub(crate) fn read_payload(body: &[u8], topic: &str) -> Result<Payload, String> {
    let mut opts = ReadOptions::new(Mode::Lenient, format!("notification on {topic}"));
    opts.max_bytes = MAX_PAYLOAD_BYTES as u64;
    let doc = rsagg_sitemap::read_document(body, opts).map_err(|e| e.to_string())?;
    if doc.header.root != Root::Urlset {
        return Err("the root element is not <urlset> (CN 1.0.1 3)".into());
    }
    if doc.header.capability() != Some(&Capability::ChangeNotification) {
        return Err("<rs:md> lacks capability=\"change-notification\" (CN 1.0.1 3)".into());
    }
    let md = doc.header.md.as_ref();
    let base = Url::parse(topic).ok();
    let up = doc.header.link("up").and_then(|l| match &base {
        Some(b) => b.join(l.href.trim()).ok(),
        None => Url::parse(l.href.trim()).ok(),
    });
    Ok(Payload {
        from: md.and_then(|m| m.from),
        until: md.and_then(|m| m.until),
        up,
        entries: doc.entries,
    })
}

/// The set of resources a payload on `topic` is about: the Capability List its `up` link
/// names (CN 1.0.1 3), else the set whose channel is `topic` (CN 1.0.1 2: one channel per
/// set).
pub(crate) fn set_for<'a>(
    sets: &'a [CapabilitySet],
    up: Option<&Url>,
    topic: &str,
) -> Option<&'a CapabilitySet> {
    if let Some(up) = up
        && let Some(s) = sets.iter().find(|s| &s.url == up)
    {
        return Some(s);
    }
    let topic = Url::parse(topic).ok()?;
    sets.iter().find(|s| s.topic.as_ref() == Some(&topic))
}

/// How a payload relates to what was applied before on its channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Continuity {
    /// Its `from` is the previous `until` (or the checkpoint already reaches it).
    Follows,
    /// It starts after the previous `until`: notifications were lost.
    Gap,
    /// It starts before the previous `until`: delivered out of order or overlapping.
    Reordered,
    /// No `from`, or nothing to compare with and the checkpoint does not reach it.
    Unknown,
}

/// CN 1.0.1 3: "consecutive change notifications … cover consecutive and non-overlapping
/// `from`/`until` intervals", which lets a Destination see a missing one. `previous`: the
/// `until` of the last payload applied on the channel; `checkpoint`: the set's committed
/// checkpoint (everything up to it is done, whatever brought it).
pub(crate) fn continuity(
    from: Option<&W3cDateTime>,
    previous: Option<&W3cDateTime>,
    checkpoint: Option<&W3cDateTime>,
) -> Continuity {
    let Some(from) = from else {
        return Continuity::Unknown;
    };
    if let Some(prev) = previous {
        match from.cmp_instant(prev) {
            std::cmp::Ordering::Equal => return Continuity::Follows,
            std::cmp::Ordering::Less => return Continuity::Reordered,
            std::cmp::Ordering::Greater => {}
        }
    }
    if checkpoint.is_some_and(|c| from.cmp_instant(c).is_le()) {
        return Continuity::Follows;
    }
    if previous.is_some() {
        Continuity::Gap
    } else {
        Continuity::Unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> W3cDateTime {
        W3cDateTime::parse(s).unwrap().value
    }

    #[test]
    fn continuity_sees_gaps_and_reordering() {
        let (a, b, c) = (
            t("2026-01-01T00:00:00Z"),
            t("2026-01-01T00:10:00Z"),
            t("2026-01-01T00:20:00Z"),
        );
        // Consecutive (the instant compared, not the text).
        let b2 = t("2026-01-01T01:10:00+01:00");
        assert_eq!(continuity(Some(&b2), Some(&b), None), Continuity::Follows);
        // A payload lost in between.
        assert_eq!(continuity(Some(&c), Some(&b), None), Continuity::Gap);
        assert_eq!(continuity(Some(&c), Some(&b), Some(&a)), Continuity::Gap);
        // ... unless polling already went past its start.
        assert_eq!(
            continuity(Some(&b), Some(&a), Some(&c)),
            Continuity::Follows
        );
        // An earlier payload after a later one.
        assert_eq!(
            continuity(Some(&a), Some(&b), Some(&c)),
            Continuity::Reordered
        );
        // The first payload: the checkpoint decides.
        assert_eq!(continuity(Some(&b), None, Some(&b)), Continuity::Follows);
        assert_eq!(continuity(Some(&b), None, Some(&a)), Continuity::Unknown);
        assert_eq!(continuity(None, Some(&a), Some(&c)), Continuity::Unknown);
    }

    fn set(url: &str, topic: Option<&str>) -> CapabilitySet {
        CapabilitySet {
            url: Url::parse(url).unwrap(),
            entries: Vec::new(),
            hub: None,
            topic: topic.map(|t| Url::parse(t).unwrap()),
        }
    }

    #[test]
    fn payloads_map_to_their_set() {
        let sets = [
            set(
                "http://u.example/1/capabilitylist.xml",
                Some("http://u.example/1/change/"),
            ),
            set(
                "http://u.example/2/capabilitylist.xml",
                Some("http://u.example/2/change/"),
            ),
        ];
        let up2 = Url::parse("http://u.example/2/capabilitylist.xml").unwrap();
        // By the up link, whatever the topic.
        let s = set_for(&sets, Some(&up2), "http://u.example/1/change/").unwrap();
        assert_eq!(s.url, up2);
        // Else by the channel's topic.
        let s = set_for(&sets, None, "http://u.example/1/change/").unwrap();
        assert_eq!(s.url.as_str(), "http://u.example/1/capabilitylist.xml");
        let other = Url::parse("http://elsewhere.example/capabilitylist.xml").unwrap();
        let s = set_for(&sets, Some(&other), "http://u.example/2/change/").unwrap();
        assert_eq!(s.url, up2);
        assert!(set_for(&sets, None, "http://u.example/3/change/").is_none());
    }

    #[test]
    fn reads_cn_example_1_and_refuses_other_documents() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/notification-1.0.1/cn_ex_1.xml"
        );
        let body = std::fs::read(path).unwrap();
        let p = read_payload(&body, "http://example.com/dataset1/change/").unwrap();
        assert_eq!(p.entries.len(), 2);
        assert_eq!(
            p.up.as_ref().map(Url::as_str),
            Some("http://example.com/dataset1/capabilitylist.xml")
        );
        assert!(
            p.from
                .unwrap()
                .cmp_instant(&t("2013-01-03T00:00:00Z"))
                .is_eq()
        );
        assert!(
            p.until
                .unwrap()
                .cmp_instant(&t("2013-01-03T00:10:00Z"))
                .is_eq()
        );
        let changelist = String::from_utf8(body)
            .unwrap()
            .replace("change-notification", "changelist");
        let e = read_payload(changelist.as_bytes(), "http://t/").unwrap_err();
        assert!(e.contains("CN 1.0.1 3"), "{e}");
        assert!(read_payload(b"<urlset", "http://t/").is_err());
        assert!(read_payload(b"not xml at all", "http://t/").is_err());
    }

    #[test]
    fn callbacks_live_under_the_base_url() {
        let base = Url::parse("https://agg.example.org/maps/").unwrap();
        assert_eq!(
            callback_url(&base, "museum").unwrap().as_str(),
            "https://agg.example.org/maps/websub/museum"
        );
    }
}
