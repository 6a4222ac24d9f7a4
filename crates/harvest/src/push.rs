//! Push intake (Change Notification 1.0.1 as a Destination): the [`Inbox`] behind the
//! WebSub callbacks `{base_url}websub/{upstream}` of `run --follow --listen`, and the pure
//! parts of applying a notification (reading the payload, finding its set of resources,
//! telling whether it follows the previous one).
//!
//! The callback side must answer quickly and never block on the harvest: the HTTP handler
//! authenticates a delivery ([`Inbox::deliver`]: signature checked against the secret rsagg
//! gave, WebSub 7.1) and puts it into a bounded queue; the follower (`rsagg-pipeline`'s follower)
//! drains the queue, applies the payloads through the same path as Change List entries and
//! publishes. A full queue answers 503, so the hub retries later rather than rsagg losing a
//! notification; a forged or unknown delivery is answered 2xx and dropped (WebSub 7.1), and
//! counted.
//!
//! Push only shortens latency: polling goes on at `poll_interval` whatever the hub does, and
//! a payload whose `from` is not the previous payload's `until` (a lost or reordered
//! notification, CN 1.0.1 3) makes the follower read the upstream's Change List from the
//! checkpoint before applying it.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::Bytes;
use rsagg_fetch::CapabilitySet;
use rsagg_layout::report::PushStats;
use rsagg_model::{Capability, Mode, Root, UrlEntry, W3cDateTime};
use rsagg_sitemap::ReadOptions;
use rsagg_websub::intake::{Intake, MAX_PAYLOAD_BYTES, PushIntake};
use rsagg_websub::subscriber::{Answer, Delivery, Dropped, Subscriber};
use tokio::sync::mpsc;
use url::Url;

use rsagg_config::Pipeline;
use rsagg_layout::report::UpstreamReport;

use crate::Error;
use crate::compare::in_order;
use crate::context::Harvest;

/// Deliveries waiting for the follower, at most (then callbacks answer 503).
pub const QUEUE: usize = 1024;
/// A delivery accepted at a callback, waiting to be applied.
#[derive(Debug)]
pub struct Pushed {
    /// The upstream whose callback took it.
    pub upstream: String,
    /// The topic it was published for (WebSub `Link: rel=self`).
    pub topic: String,
    /// The payload.
    pub body: Bytes,
    /// When it arrived (push→publish latency is measured from here).
    pub received: Instant,
}

/// The live counters behind [`PushStats`] (same names and meanings).
#[derive(Debug, Default)]
#[allow(missing_docs)]
pub struct Counters {
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
    /// Counts one event in `c`.
    pub fn add(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Records the push→publish latency of a pass.
    pub fn latency(&self, ms: u64) {
        self.last_latency_ms.store(ms, Ordering::Relaxed);
        self.max_latency_ms.fetch_max(ms, Ordering::Relaxed);
    }
}

/// The push intake of one pipeline: the WebSub subscriber state and the bounded queue
/// between the callbacks and the follower. Shared by the server (callbacks) and
/// `rsagg-pipeline`'s follower.
#[derive(Debug)]
pub struct Inbox {
    pub(crate) subscriber: Subscriber,
    tx: mpsc::Sender<Pushed>,
    rx: std::sync::Mutex<Option<mpsc::Receiver<Pushed>>>,
    /// Upstreams with `push = true`: the callbacks that exist.
    upstreams: HashSet<String>,
    /// The counters (the follower counts applied payloads and latencies).
    pub counters: Counters,
    /// Woken when a verification changed a subscription: the follower saves the records
    /// and recomputes when to renew.
    pub changed: tokio::sync::Notify,
}

impl Inbox {
    /// The intake of `p` (callbacks for its upstreams with `push = true`).
    pub fn new(p: &Pipeline) -> Result<Arc<Inbox>, crate::Error> {
        // Requests to an upstream's hub go through the address guard unless that upstream
        // has `allow_private` (the hub is named by the upstream's Capability List), and
        // follow no redirect (a hub answering a redirect is an answer; WebSub 5.1: 202 is
        // expected).
        // The hub hears from the same harvester as the Source, with the same contact.
        let (timeout, connect_timeout) =
            (p.config.fetch.read_timeout, p.config.fetch.connect_timeout);
        let user_agent = p.config.fetch.user_agent();
        let subscriber = Subscriber::guarded(
            |b| {
                b.timeout(timeout)
                    .connect_timeout(connect_timeout)
                    .user_agent(user_agent.clone())
            },
            p.config
                .upstreams
                .iter()
                .filter(|u| u.allow_private)
                .map(|u| u.name.clone()),
        )
        .map_err(|e| crate::Error::Push {
            upstream: String::new(),
            message: format!("HTTP client: {e}"),
        })?;
        let (tx, rx) = mpsc::channel(QUEUE);
        Ok(Arc::new(Inbox {
            subscriber,
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
    pub fn take_queue(&self) -> Option<mpsc::Receiver<Pushed>> {
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

/// A change notification read and checked (CN 1.0.1 3).
#[derive(Debug)]
pub struct Payload {
    /// Its `rs:md from`.
    pub from: Option<W3cDateTime>,
    /// Its `rs:md until`.
    pub until: Option<W3cDateTime>,
    /// The `rs:ln rel="up"` (the set's Capability List), resolved against the topic.
    pub up: Option<Url>,
    /// The changes it announces.
    pub entries: Vec<UrlEntry>,
}

/// Reads a payload leniently (upstream quirks pass, as in Change Lists), and refuses what
/// is not a change notification: another root, another capability, unreadable XML.
pub fn read_payload(body: &[u8], topic: &str) -> Result<Payload, String> {
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
pub fn set_for<'a>(
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
pub enum Continuity {
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
pub fn continuity(
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
        let path = format!(
            "{}/../../tests/fixtures/notification-1.0.1/cn_ex_1.xml",
            std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")
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
            rsagg_layout::paths::callback_url(&base, "museum")
                .unwrap()
                .as_str(),
            "https://agg.example.org/maps/websub/museum"
        );
    }
}

/// What became of a change notification's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushApplied {
    /// Applied (possibly all replays); false when it stopped at a failed change.
    Done(bool),
    /// The set has no baseline yet: polling makes it, and its Change List then brings
    /// what this payload announced.
    NoBaseline,
}

impl Harvest {
    /// Applies the entries of a change notification for `set` (CN 1.0.1 3) exactly like
    /// Change List entries ([`Harvest::apply_changes`]), from the committed checkpoint;
    /// the Change List the next poll follows is left as it is.
    pub async fn apply_notification(
        &self,
        set: &CapabilitySet,
        source: &Url,
        entries: Vec<UrlEntry>,
        report: &mut UpstreamReport,
    ) -> Result<PushApplied, Error> {
        let cp = self
            .ctx
            .state
            .checkpoint(&self.up.name, set.url.as_str())
            .await?;
        let Some(mut cp) = cp.filter(|c| c.baseline_at.is_some()) else {
            return Ok(PushApplied::NoBaseline);
        };
        let done = self
            .apply_changes(set, source, None, in_order(entries), &mut cp, report)
            .await?;
        Ok(PushApplied::Done(done))
    }

    /// Brings `set` up to date from its Change List (or Resource List) exactly as a poll
    /// does: what a missing or reordered notification would have brought.
    pub async fn catch_up(
        &self,
        set: &CapabilitySet,
        report: &mut UpstreamReport,
    ) -> Result<(), Error> {
        self.harvest_set(set, report).await
    }

    /// The committed checkpoint instant of `set`.
    pub async fn checkpoint_instant(
        &self,
        set: &CapabilitySet,
    ) -> Result<Option<W3cDateTime>, Error> {
        Ok(self
            .ctx
            .state
            .checkpoint(&self.up.name, set.url.as_str())
            .await?
            .and_then(|c| c.instant))
    }
}

impl PushIntake for Inbox {
    fn has_callback(&self, upstream: &str) -> bool {
        Inbox::has_callback(self, upstream)
    }

    fn verify(&self, upstream: &str, query: &str) -> Option<Answer> {
        Inbox::verify(self, upstream, query)
    }

    fn deliver(&self, upstream: &str, delivery: Delivery) -> Intake {
        Inbox::deliver(self, upstream, delivery)
    }
}
