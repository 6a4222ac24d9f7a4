//! rsagg's own change notifications (ResourceSync Change Notification 1.0.1): one channel per
//! republished collection, its payloads built from the change log, kept in a persisted
//! outbox and published to the pipeline's hub.
//!
//! # Channel and payloads (CN 2, 3)
//!
//! The channel's topic URI is `{collection.base_url}change/` ([`topic_url`]), advertised in
//! the Capability List with `rs:ln rel="hub"` (CN 5) and served by `rsagg serve` with the
//! most recent payload. A payload is a `<urlset>` with `rs:md capability="change-notification"
//! from until`, an `rs:ln rel="up"` to the Capability List and, in forward chronological
//! order, exactly the entries rsagg's Change Lists give the same changes
//! ([`crate::publish::change_entry`]: rsagg's `<loc>`, `rs:md change datetime hash length
//! type`, the `via` provenance link and the inherited links).
//!
//! # Intervals
//!
//! A payload covers the changes with `from <= datetime < until`; the next payload's `from` is
//! the previous `until`, so consecutive payloads of a channel cover consecutive,
//! non-overlapping intervals (CN 3), across runs and restarts (the position is persisted).
//! The change log gives strictly increasing datetimes (`State::commit`), so a split between
//! two payloads never falls inside a run of equal instants:
//!
//! - a batch split because a payload is full (`notify.max_entries`, `notify.max_bytes`): the
//!   `until` of the full payload is the datetime of the first change of the next one;
//! - the last payload of a batch: `until` is the first microsecond after its last change
//!   ([`next_instant_after`]). `State::commit` gives a later change either the clock
//!   (`W3cDateTime::now`, truncated to microseconds) when it is after the previous change, or
//!   the previous datetime + 1 µs; both are at or after the first microsecond after the
//!   previous change, whether or not that change's datetime is itself a whole microsecond. So
//!   no change the log assigns later can fall before that `until`.
//!
//! The first payload of a channel starts (`from`) at the datetime of the first change it
//! announces: a channel configured on an existing collection announces the whole change log
//! once (in payloads of `max_entries`), the same history the Change Lists give, rather than
//! leave its first subscribers without the changes before it was created.
//!
//! # Outbox (at-least-once, byte-identical)
//!
//! ```text
//! notify/channel.json        {"next": n, "seq": s, "until": u}: the next payload number, the
//!                            last change-log sequence number announced, the next `from`
//! notify/outbox/{n:020}.xml  payload n, until the hub took it
//! notify/latest.xml          the payload the hub was last asked to take (the topic's body)
//! notify/fetched.json        {"until": u}: written by the topic route when it served the
//!                            payload with that `until` (the websub form waits for it)
//! ```
//!
//! [`Notifier::prepare`] reads the change log from the channel's position on (O(new
//! changes)), after making it durable ([`State::flush`]: a change is never announced that a
//! crash could take back), writes the payloads into the outbox (`PutMode::Create`) and then
//! the channel record. [`Notifier::deliver`] sends only payloads numbered below the record's
//! `next`: a payload written by a `prepare` that crashed before its record is a draft no hub
//! has seen, rebuilt by the next `prepare` from the same position (identical bytes when the
//! records it reads did not change; otherwise the draft is replaced, which is safe for the
//! same reason). A payload is removed from the outbox only after the hub answered 2xx, so a
//! crash or a hub outage resends it, byte for byte, and a receiver can drop the duplicate by
//! its `from`/`until`.
//!
//! # Delivery (CN 4.1)
//!
//! In outbox order, one at a time (the next only after the hub took the previous one), with
//! jittered exponential backoff capped at 30 s between attempts, until the hub answers 2xx.
//! A refusal (3xx, 4xx) is retried too, slower, and logged as an error: a stuck outbox an
//! operator sees beats a lost notification. Before each payload, `notify/latest.xml` is set
//! to it, so the topic URI shows it when the hub verifies the topic (CN 4.1).
//!
//! - `form = "resourcesync"`: the payload is POSTed with `Content-Type: application/xml` and
//!   `Link: <topic>; rel="self", <hub>; rel="hub"` (CN 4.1, Example 2).
//! - `form = "websub"`: `hub.mode=publish&hub.url=<topic>&hub.topic=<topic>` is POSTed
//!   (hubs read one name or the other: flask-websub reads `hub.topic`); the hub then GETs the
//!   topic, which shows only the latest payload, so the topic moves on to the next payload
//!   only once `notify/fetched.json` says it was fetched, or after `notify.fetch_wait`: then
//!   the payload counts as unfetched, and a receiver recovers the gap from the Change List
//!   (the intervals tell it there is one).

//!
//! # Layout
//!
//! - `lib.rs`: [`Notifier`] (payloads from the change log into the outbox, delivery in
//!   order), [`after_publish`] and [`prepare_published`] (what a run calls after its publish
//!   stage), and [`Error`]. Object names and the channel record are `rsagg-layout`'s; the
//!   request to the hub is `rsagg-websub`'s [`rsagg_websub::Publisher`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutPayload};
use rsagg_model::{Capability, Header, Precision, Root, W3cDateTime};
use rsagg_store::State;
use rsagg_store::documents::{get_json, put, put_json};
use rsagg_websub::{Attempt, PublishForm, Publisher};

use rsagg_config::{NotifyConfig, NotifyForm, Pipeline};
use rsagg_layout::capability::up_link;
use rsagg_layout::meta::{ChannelRecord, Fetched, payload_until};
use rsagg_layout::paths::{CHANNEL, FETCHED, LATEST, OUTBOX, outbox_path, topic_url};
use rsagg_layout::report::{DeliveryReport, NotifyReport, Prepared, PublishReport};
use rsagg_publish::entry::{MAX_DOCUMENT_ENTRIES, change_entry};
use rsagg_publish::links::LinkPolicy;
use rsagg_sitemap::writer::end_tag;

/// Errors of the notification channel.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] rsagg_store::Error),
    /// Change notifications cannot be sent (the publishing client could not be built).
    #[error("change notifications to hub {hub}: {message} (Change Notification 1.0.1 section 4.1)")]
    Notify {
        /// The hub URL.
        hub: String,
        /// What is wrong.
        message: String,
    },
}

impl rsagg_store::StoreFailure for Error {
    fn store_error(&self) -> Option<&rsagg_store::Error> {
        match self {
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

/// Smallest delay between two attempts.
const RETRY_MIN: Duration = Duration::from_millis(500);
/// Largest delay between two attempts (jittered backoff cap).
const RETRY_MAX: Duration = Duration::from_secs(30);
/// Largest `Retry-After` honoured.
const RETRY_AFTER_MAX: Duration = Duration::from_secs(600);
/// Timeout of one publish request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the websub form looks at [`FETCHED`] while it waits.
const FETCH_POLL: Duration = Duration::from_millis(50);

/// The first whole microsecond strictly after `at`: the `until` of the last payload of a
/// batch (see the module documentation for why no later change can come before it).
pub fn next_instant_after(at: &W3cDateTime) -> W3cDateTime {
    let micros = at.unix_nanos().div_euclid(1_000) + 1;
    let nanos = micros * 1_000;
    W3cDateTime::from_unix_with_precision(
        nanos.div_euclid(1_000_000_000) as i64,
        nanos.rem_euclid(1_000_000_000) as u32,
        Precision::Fraction(6),
    )
}

/// How one payload's delivery ended.
enum Step {
    /// The hub took it (and, in the websub form, fetched it or the wait ran out).
    Done,
    /// The deadline came first: it stays in the outbox.
    OutOfTime,
    /// It was no longer in the outbox.
    Gone,
}

/// The change-notification channel of one collection: builds payloads from the change log
/// into the outbox and delivers the outbox to the hub. `prepare` and `deliver` may be called
/// from different tasks (a long-running loop delivering in the background): each is
/// serialised with itself, and `deliver` only sends what a finished `prepare` recorded.
pub struct Notifier {
    objects: Arc<dyn ObjectStore>,
    base_url: String,
    topic: String,
    cfg: NotifyConfig,
    policy: LinkPolicy,
    publisher: Publisher,
    prepare_lock: tokio::sync::Mutex<()>,
    deliver_lock: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("topic", &self.topic)
            .field("hub", &self.cfg.hub)
            .field("form", &self.cfg.form)
            .finish()
    }
}

impl Notifier {
    /// The notifier of pipeline `p` publishing into `objects` (its store), or `None` when the
    /// pipeline has no `[notify]` section.
    pub fn new(objects: Arc<dyn ObjectStore>, p: &Pipeline) -> Result<Option<Notifier>, Error> {
        let Some(cfg) = &p.config.notify else {
            return Ok(None);
        };
        Notifier::with_config(
            objects,
            p.base_url.as_str(),
            LinkPolicy::new(&p.config.publish.links),
            cfg.clone(),
        )
        .map(Some)
    }

    /// The notifier of the collection at `base_url` (ends with `/`), entries built with
    /// `policy`, configured by `cfg`.
    pub fn with_config(
        objects: Arc<dyn ObjectStore>,
        base_url: &str,
        policy: LinkPolicy,
        cfg: NotifyConfig,
    ) -> Result<Notifier, Error> {
        let publisher = Publisher::new(REQUEST_TIMEOUT).map_err(|e| Error::Notify {
            hub: cfg.hub.to_string(),
            message: e.to_string(),
        })?;
        Ok(Notifier {
            objects,
            base_url: base_url.to_owned(),
            topic: topic_url(base_url),
            cfg,
            policy,
            publisher,
            prepare_lock: tokio::sync::Mutex::new(()),
            deliver_lock: tokio::sync::Mutex::new(()),
        })
    }

    /// The topic URI.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The hub URL.
    pub fn hub(&self) -> &str {
        self.cfg.hub.as_str()
    }

    /// The configuration.
    pub fn config(&self) -> &NotifyConfig {
        &self.cfg
    }

    fn form(&self) -> PublishForm {
        match self.cfg.form {
            NotifyForm::Resourcesync => PublishForm::ResourceSync,
            NotifyForm::Websub => PublishForm::WebSub,
        }
    }

    /// Turns every change logged since the channel's position into payloads in the outbox,
    /// then moves the channel on. Call it only once the documents and copies those changes
    /// concern are published; where changes may be committed while a publish runs (a
    /// long-running loop taking pushes), use [`Notifier::prepare_upto`] with the last
    /// sequence number committed before that publish began.
    pub async fn prepare(&self, state: &State) -> Result<Prepared, Error> {
        let last = state.last_seq().await;
        self.prepare_upto(state, last).await
    }

    /// Like [`Notifier::prepare`], for the changes up to sequence number `last` only: those
    /// a publish made fetchable (never announce what a Destination cannot fetch yet). Reads
    /// the new part of the log only.
    pub async fn prepare_upto(&self, state: &State, last: u64) -> Result<Prepared, Error> {
        let _serial = self.prepare_lock.lock().await;
        let store = self.objects.as_ref();
        let mut channel: ChannelRecord = get_json(store, CHANNEL).await?.unwrap_or_default();
        let mut report = Prepared {
            seq: channel.seq,
            ..Prepared::default()
        };
        let last = last.min(state.last_seq().await);
        if last <= channel.seq {
            return Ok(report);
        }
        // Every change up to `last` is applied; made durable before it is announced.
        state.flush().await?;
        let max_entries = self.cfg.max_entries.clamp(1, MAX_DOCUMENT_ENTRIES);
        let max_bytes = usize::try_from(self.cfg.max_bytes).unwrap_or(usize::MAX);
        let mut from = channel.until;
        let mut body: Vec<u8> = Vec::new();
        let mut entries = 0u64;
        let mut last_at = None;
        let mut entry = Vec::new();
        let mut log = state.log(channel.seq + 1).await?;
        while let Some(e) = log.next().await? {
            if e.seq > last {
                break;
            }
            channel.seq = e.seq;
            last_at = Some(e.at);
            // Entries logged by an older rsagg need the record (see `change_entry`).
            let current = match e.upstream_meta {
                Some(_) => None,
                None => state.resource(&e.upstream, &e.uri).await?,
            };
            let links = rsagg_publish::entry::change_links(&e, current.as_ref());
            let held = rsagg_publish::entry::held_targets(
                state,
                &self.base_url,
                &e.upstream,
                links,
                &self.policy,
            )
            .await?;
            let Some(url) = change_entry(&self.base_url, &e, current.as_ref(), &self.policy, &held)
            else {
                tracing::warn!(uri = %e.uri, "change of a URI rsagg has no URI of its own for: not notified");
                continue;
            };
            entry.clear();
            rsagg_sitemap::writer::encode_entry(Root::Urlset, &url, &mut entry);
            if let Some(start) = from
                && entries > 0
                && (entries >= max_entries || body.len() + entry.len() > max_bytes)
            {
                self.write_payload(channel.next, start, e.at, &body).await?;
                channel.next += 1;
                report.payloads += 1;
                report.entries += entries;
                from = Some(e.at);
                body.clear();
                entries = 0;
            }
            let start = *from.get_or_insert(e.at);
            if e.at.cmp_instant(&start).is_lt() {
                // Cannot happen with `State::commit`'s datetimes; said loudly if it ever
                // does, since the payload then fails strict validation.
                tracing::error!(seq = e.seq, at = %e.at, from = %start, "change before its notification's from");
            }
            body.extend_from_slice(&entry);
            entries += 1;
        }
        if let (Some(start), Some(at)) = (from, last_at)
            && entries > 0
        {
            let until = next_instant_after(&at);
            self.write_payload(channel.next, start, until, &body)
                .await?;
            channel.next += 1;
            report.payloads += 1;
            report.entries += entries;
            from = Some(until);
        }
        channel.until = from;
        put_json(store, CHANNEL, &channel).await?;
        report.seq = channel.seq;
        if report.payloads > 0 {
            tracing::info!(
                topic = %self.topic,
                payloads = report.payloads,
                changes = report.entries,
                "change notifications prepared"
            );
        }
        Ok(report)
    }

    /// Writes payload `n` into the outbox (see the module documentation on drafts).
    async fn write_payload(
        &self,
        n: u64,
        from: W3cDateTime,
        until: W3cDateTime,
        entries: &[u8],
    ) -> Result<(), Error> {
        let bytes = Bytes::from(payload(&self.base_url, from, until, entries));
        let name = outbox_path(n);
        let path = Path::from(name.as_str());
        let store = self.objects.as_ref();
        let created = store
            .put_opts(
                &path,
                PutPayload::from(bytes.clone()),
                PutMode::Create.into(),
            )
            .await;
        match created {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                let existing = store
                    .get(&path)
                    .await
                    .map_err(|e| rsagg_store::Error::object_store(&name, e))?
                    .bytes()
                    .await
                    .map_err(|e| rsagg_store::Error::object_store(&name, e))?;
                if existing != bytes {
                    // Numbered at or past the channel record's `next`: never sent.
                    tracing::info!(object = %name, "replacing a payload draft an interrupted prepare left");
                    put(store, &name, bytes).await?;
                }
                Ok(())
            }
            Err(e) => Err(rsagg_store::Error::object_store(&name, e).into()),
        }
    }

    /// Numbers of the payloads in the outbox a finished `prepare` recorded, in order, and the
    /// channel's next number.
    async fn outbox(&self) -> Result<(Vec<u64>, u64), Error> {
        let channel: ChannelRecord = get_json(self.objects.as_ref(), CHANNEL)
            .await?
            .unwrap_or_default();
        let mut numbers = Vec::new();
        let mut listing = self.objects.list(Some(&Path::from(OUTBOX)));
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|e| rsagg_store::Error::object_store(OUTBOX, e))?;
            let n = meta
                .location
                .filename()
                .and_then(|f| f.strip_suffix(".xml"))
                .and_then(|f| f.parse::<u64>().ok());
            match n {
                Some(n) if n < channel.next => numbers.push(n),
                Some(_) => {}
                None => tracing::warn!(object = %meta.location, "not an outbox payload; ignored"),
            }
        }
        numbers.sort_unstable();
        Ok((numbers, channel.next))
    }

    /// Payloads waiting in the outbox.
    pub async fn pending(&self) -> Result<u64, Error> {
        Ok(self.outbox().await?.0.len() as u64)
    }

    /// Sends the outbox to the hub in order, one payload at a time, retrying each until the
    /// hub takes it, for at most `deadline` (`None`: until the outbox is empty; dropping the
    /// future stops it, and what was not taken stays in the outbox). Callable repeatedly and
    /// from a background task; concurrent calls take turns.
    pub async fn deliver(&self, deadline: Option<Duration>) -> DeliveryReport {
        let _serial = self.deliver_lock.lock().await;
        let until = deadline.map(|d| Instant::now() + d);
        let mut report = DeliveryReport::default();
        'passes: loop {
            let numbers = match self.outbox().await {
                Ok((numbers, _)) => numbers,
                Err(e) => {
                    report.last_error = Some(e.to_string());
                    break;
                }
            };
            if numbers.is_empty() {
                break;
            }
            for n in numbers {
                match self.deliver_one(n, until, &mut report).await {
                    Ok(Step::Done) => report.delivered += 1,
                    Ok(Step::Gone) => {}
                    Ok(Step::OutOfTime) => break 'passes,
                    Err(e) => {
                        tracing::error!(topic = %self.topic, error = %rsagg_model::ErrorChain(&e), "delivering change notifications");
                        report.last_error = Some(e.to_string());
                        break 'passes;
                    }
                }
            }
        }
        match self.outbox().await {
            Ok((numbers, next)) => {
                report.pending = numbers.len() as u64;
                report.sent_total = (next - 1).saturating_sub(report.pending);
            }
            Err(e) => report.last_error = Some(e.to_string()),
        }
        if report.delivered > 0 || report.pending > 0 {
            tracing::info!(
                topic = %self.topic,
                hub = %self.cfg.hub,
                delivered = report.delivered,
                pending = report.pending,
                "change notifications delivered"
            );
        }
        report
    }

    /// Delivers payload `n`: sets it as the topic's body, publishes until the hub takes it
    /// (and, in the websub form, waits for the hub to fetch it), removes it from the outbox.
    async fn deliver_one(
        &self,
        n: u64,
        until: Option<Instant>,
        report: &mut DeliveryReport,
    ) -> Result<Step, Error> {
        let name = outbox_path(n);
        let store = self.objects.as_ref();
        let body = match store.get(&Path::from(name.as_str())).await {
            Ok(r) => r
                .bytes()
                .await
                .map_err(|e| rsagg_store::Error::object_store(&name, e))?,
            // Removed since the outbox was listed: another process's delivery finished it
            // (an object is removed only after the hub took it).
            Err(object_store::Error::NotFound { .. }) => return Ok(Step::Gone),
            Err(e) => return Err(rsagg_store::Error::object_store(&name, e).into()),
        };
        // CN 4.1: the hub may verify that the topic answers (with the links); the websub
        // form's hub fetches the payload from it.
        put(store, LATEST, body.clone()).await?;
        let left =
            |until: Option<Instant>| until.map(|u| u.saturating_duration_since(Instant::now()));
        let mut failures = 0u32;
        loop {
            if left(until).is_some_and(|l| l.is_zero()) {
                return Ok(Step::OutOfTime);
            }
            report.attempts += 1;
            let send = self.publisher.publish(
                self.cfg.hub.as_str(),
                &self.topic,
                self.form(),
                body.clone(),
            );
            let attempt = match left(until) {
                Some(l) => match tokio::time::timeout(l, send).await {
                    Ok(a) => a,
                    Err(_) => {
                        report.failures += 1;
                        report.last_error = Some(format!(
                            "hub {}: no answer before the delivery deadline",
                            self.cfg.hub
                        ));
                        return Ok(Step::OutOfTime);
                    }
                },
                None => send.await,
            };
            let delay = match attempt {
                Attempt::Accepted { .. } => break,
                Attempt::Retry {
                    retry_after,
                    message,
                    ..
                } => {
                    failures = failures.saturating_add(1);
                    let delay = retry_after.map_or_else(
                        || rsagg_websub::backoff(failures, RETRY_MIN, RETRY_MAX),
                        |r| r.min(RETRY_AFTER_MAX),
                    );
                    tracing::warn!(uri = %self.cfg.hub, payload = n, failures, error = %message, retry_in = ?delay, "change notification not taken");
                    report.last_error = Some(message);
                    delay
                }
                Attempt::Refused { message, .. } => {
                    // Retried all the same, at the slow end of the backoff.
                    failures = failures.saturating_add(1);
                    let delay = rsagg_websub::backoff(failures + 4, RETRY_MIN, RETRY_MAX);
                    tracing::error!(uri = %self.cfg.hub, payload = n, failures, error = %message, retry_in = ?delay, "change notification refused by the hub");
                    report.last_error = Some(message);
                    delay
                }
            };
            report.failures += 1;
            match left(until) {
                Some(l) if l <= delay => {
                    tokio::time::sleep(l).await;
                    return Ok(Step::OutOfTime);
                }
                _ => tokio::time::sleep(delay).await,
            }
        }
        if self.cfg.form == NotifyForm::Websub {
            let wanted = payload_until(&body);
            let wait = self.cfg.fetch_wait;
            let cut = left(until).is_some_and(|l| l < wait);
            let stop = Instant::now() + left(until).map_or(wait, |l| l.min(wait));
            let fetched = loop {
                let seen: Option<Fetched> = get_json(store, FETCHED).await?;
                if seen.map(|f| f.until) == wanted {
                    break true;
                }
                if Instant::now() >= stop {
                    break false;
                }
                tokio::time::sleep(FETCH_POLL).await;
            };
            if !fetched {
                if cut {
                    // Published again by the next delivery, which waits the whole time.
                    return Ok(Step::OutOfTime);
                }
                report.unfetched += 1;
                tracing::warn!(
                    payload = n,
                    topic = %self.topic,
                    hub = %self.cfg.hub,
                    wait = ?wait,
                    "the hub did not fetch the topic in time; the topic moves on (receivers recover the gap from the Change List)"
                );
            }
        }
        match store.delete(&Path::from(name.as_str())).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(Step::Done),
            Err(e) => Err(rsagg_store::Error::object_store(&name, e).into()),
        }
    }
}

/// A whole payload: the header (`from`, `until`, `up`), the encoded entries, the end tag.
fn payload(base_url: &str, from: W3cDateTime, until: W3cDateTime, entries: &[u8]) -> Vec<u8> {
    let mut header = Header::new(Root::Urlset, Capability::ChangeNotification);
    if let Some(md) = header.md.as_mut() {
        md.from = Some(from);
        md.until = Some(until);
    }
    header.links.push(up_link(base_url));
    let mut xml = Vec::with_capacity(entries.len() + 512);
    rsagg_sitemap::writer::encode_header(&header, &mut xml);
    xml.extend_from_slice(entries);
    xml.extend_from_slice(end_tag(Root::Urlset));
    xml
}

/// The notification step of `run --once`: [`prepare_published`], then the outbox delivered
/// for at most `notify.deliver_timeout` (what was prepared before is delivered even when this
/// publish failed).
pub async fn after_publish(
    notifier: &Notifier,
    state: &State,
    published_seq: u64,
    published: &PublishReport,
) -> NotifyReport {
    let mut report = prepare_published(notifier, state, published_seq, published).await;
    report.delivery = notifier.deliver(Some(notifier.cfg.deliver_timeout)).await;
    report
}

/// Prepares the payloads of the changes up to `published_seq` (the last sequence number
/// committed before the publish began) when the publish made them fetchable (the Resource
/// List, through which copies are found, and the Change Lists were published: never announce
/// what cannot be fetched). Delivery is left to the caller: `run --once` waits for it with a
/// bound ([`after_publish`]), `run --follow` hands it to a background sender so the next pass
/// does not wait for the hub.
pub async fn prepare_published(
    notifier: &Notifier,
    state: &State,
    published_seq: u64,
    published: &PublishReport,
) -> NotifyReport {
    let mut report = NotifyReport {
        topic: notifier.topic.clone(),
        hub: notifier.cfg.hub.to_string(),
        form: match notifier.cfg.form {
            NotifyForm::Resourcesync => "resourcesync",
            NotifyForm::Websub => "websub",
        }
        .to_owned(),
        ..NotifyReport::default()
    };
    if published.resource_list_parts.is_some() && published.change_lists.is_some() {
        match notifier.prepare_upto(state, published_seq).await {
            Ok(p) => report.prepared = Some(p),
            Err(e) => {
                tracing::error!(topic = %notifier.topic, error = %rsagg_model::ErrorChain(&e), "preparing change notifications");
                report.errors.push(format!("preparing: {e}"));
            }
        }
    } else {
        report
            .errors
            .push("not prepared: the Resource List or the Change Lists were not published".into());
    }
    report
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::Router;
    use axum::http::{HeaderMap, StatusCode};
    use axum::routing::post;
    use rsagg_model::{Change, UrlEntry};

    use super::*;
    use rsagg_layout::testing::strict;
    use rsagg_publish::changelist::tests::{BASE, Fixture, file_fixture, fixture};

    fn notifier(f: &Fixture, cfg: NotifyConfig) -> Notifier {
        Notifier::with_config(f.objects.clone(), BASE, LinkPolicy::default(), cfg).unwrap()
    }

    fn cfg(max_entries: u64) -> NotifyConfig {
        NotifyConfig {
            max_entries,
            ..NotifyConfig::new(
                url::Url::parse("http://127.0.0.1:9/hub").unwrap(),
                NotifyForm::Resourcesync,
            )
        }
    }

    async fn object(f: &Fixture, name: &str) -> Option<Bytes> {
        match f.objects.get(&Path::from(name)).await {
            Ok(r) => Some(r.bytes().await.unwrap()),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => panic!("{e}"),
        }
    }

    /// The outbox payloads, in order, each read back strictly: (from, until, entries).
    async fn outbox(f: &Fixture) -> Vec<(W3cDateTime, W3cDateTime, Vec<UrlEntry>)> {
        let mut names: Vec<String> = f
            .objects
            .list(Some(&Path::from(OUTBOX)))
            .map(|m| m.unwrap().location.to_string())
            .collect()
            .await;
        names.sort();
        let mut out = Vec::new();
        for name in names {
            let xml = object(f, &name).await.unwrap();
            let (header, entries) = strict(&xml);
            let md = header.md.unwrap();
            assert_eq!(md.capability, Some(Capability::ChangeNotification));
            assert_eq!(
                header.links[0].href,
                format!("{BASE}capabilitylist.xml"),
                "rs:ln rel=up to the Capability List (CN 3)"
            );
            out.push((md.from.unwrap(), md.until.unwrap(), entries));
        }
        out
    }

    /// Every payload's changes lie in `[from, until)`, in forward order, and each payload
    /// starts where the previous one ended.
    fn assert_consecutive(payloads: &[(W3cDateTime, W3cDateTime, Vec<UrlEntry>)]) {
        let mut prev_until: Option<W3cDateTime> = None;
        for (from, until, entries) in payloads {
            if let Some(u) = prev_until {
                assert_eq!(
                    u.cmp_instant(from),
                    std::cmp::Ordering::Equal,
                    "consecutive"
                );
                assert_eq!(u.to_string(), from.to_string());
            }
            let mut prev = *from;
            for e in entries {
                let at = e.md.as_ref().unwrap().datetime.unwrap();
                assert!(
                    at.cmp_instant(&prev).is_ge(),
                    "forward order, from <= datetime"
                );
                assert!(at.cmp_instant(until).is_lt(), "datetime < until");
                prev = at;
            }
            prev_until = Some(*until);
        }
    }

    #[test]
    fn until_is_the_first_microsecond_after_the_last_change() {
        let t = W3cDateTime::parse("2026-01-01T00:00:00.000001Z")
            .unwrap()
            .value;
        assert_eq!(
            next_instant_after(&t).to_string(),
            "2026-01-01T00:00:00.000002Z"
        );
        let t = W3cDateTime::parse("2026-01-01T23:59:59.999999999Z")
            .unwrap()
            .value;
        assert_eq!(
            next_instant_after(&t).to_string(),
            "2026-01-02T00:00:00.000000Z"
        );
        let t = W3cDateTime::parse("2026-01-01T00:00:00.0000015Z")
            .unwrap()
            .value;
        assert_eq!(
            next_instant_after(&t).to_string(),
            "2026-01-01T00:00:00.000002Z"
        );
        // What the argument in the module documentation rests on: the log's clock is
        // truncated to microseconds.
        for _ in 0..100 {
            assert_eq!(W3cDateTime::now().instant().1 % 1_000, 0);
        }
    }

    #[tokio::test]
    async fn a_payload_is_a_strict_change_notification_with_the_change_list_entries() {
        let f = fixture().await;
        let n = notifier(&f, cfg(1_000));
        assert_eq!(n.prepare(&f.state).await.unwrap(), Prepared::default());
        let logged = f.create(&["a", "b", "c"]).await;
        f.commit(&[("b", Change::Updated), ("a", Change::Deleted)])
            .await;
        let p = n.prepare(&f.state).await.unwrap();
        assert_eq!(
            p,
            Prepared {
                payloads: 1,
                entries: 5,
                seq: 5
            }
        );
        let payloads = outbox(&f).await;
        assert_eq!(payloads.len(), 1);
        let (from, until, entries) = &payloads[0];
        assert_eq!(
            *from, logged[0].at,
            "the first payload starts at its first change"
        );
        let changes: Vec<_> = entries
            .iter()
            .map(|e| e.md.as_ref().unwrap().change.clone().unwrap())
            .collect();
        assert_eq!(
            changes,
            [
                Change::Created,
                Change::Created,
                Change::Created,
                Change::Updated,
                Change::Deleted
            ]
        );
        assert_consecutive(&payloads);
        // The same entries as the Change List gives these changes.
        let mut log = f.state.log(1).await.unwrap();
        let mut expected = Vec::new();
        while let Some(e) = log.next().await.unwrap() {
            let current = f.state.resource(&e.upstream, &e.uri).await.unwrap();
            expected.push(
                change_entry(
                    BASE,
                    &e,
                    current.as_ref(),
                    &LinkPolicy::default(),
                    &Default::default(),
                )
                .unwrap(),
            );
        }
        assert_eq!(*entries, expected);
        assert_eq!(entries[3].links[0].rel, "via");
        // The upstream wrote its lastmod without a zone (as real producers do); the
        // notification, read back strictly above, carries it in UTC with its microseconds.
        assert_eq!(
            entries[3].links[0]
                .modified
                .map(|m| m.to_string())
                .as_deref(),
            Some("2018-11-06T17:41:16.901455Z")
        );
        assert_eq!(entries[3].links[1].rel, "describedby");
        let last_at = expected[4].md.as_ref().unwrap().datetime.unwrap();
        assert_eq!(*until, next_instant_after(&last_at));
        // Nothing new: nothing prepared, the channel stays.
        assert_eq!(n.prepare(&f.state).await.unwrap().payloads, 0);
        let channel: ChannelRecord = get_json(f.objects.as_ref(), CHANNEL)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            channel,
            ChannelRecord {
                next: 2,
                seq: 5,
                until: Some(*until)
            }
        );
    }

    #[tokio::test]
    async fn changes_after_the_published_ones_wait_for_the_next_prepare() {
        let f = fixture().await;
        f.create(&["a", "b"]).await;
        let published = f.state.last_seq().await;
        // Committed while the publish ran: not in the documents it wrote.
        f.create(&["c"]).await;
        let n = notifier(&f, cfg(1_000));
        let p = n.prepare_upto(&f.state, published).await.unwrap();
        assert_eq!((p.payloads, p.entries, p.seq), (1, 2, 2));
        let p = n.prepare(&f.state).await.unwrap();
        assert_eq!((p.payloads, p.entries, p.seq), (1, 1, 3));
        let payloads = outbox(&f).await;
        assert_eq!(
            payloads.iter().map(|p| p.2.len()).collect::<Vec<_>>(),
            [2, 1]
        );
        assert_consecutive(&payloads);
    }

    #[tokio::test]
    async fn large_batches_are_split_into_consecutive_intervals() {
        let f = fixture().await;
        let names: Vec<String> = (0..7).map(|i| format!("r{i}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        f.create(&names).await;
        let n = notifier(&f, cfg(3));
        let p = n.prepare(&f.state).await.unwrap();
        assert_eq!((p.payloads, p.entries), (3, 7));
        let payloads = outbox(&f).await;
        let sizes: Vec<usize> = payloads.iter().map(|p| p.2.len()).collect();
        assert_eq!(sizes, [3, 3, 1]);
        assert_consecutive(&payloads);
        // A full payload ends where the next change begins.
        let first_of_second = payloads[1].2[0].md.as_ref().unwrap().datetime.unwrap();
        assert_eq!(payloads[0].1, first_of_second);

        // By bytes: a bound below one entry still puts one change in each payload.
        let g = fixture().await;
        g.create(&["x", "y"]).await;
        let n = notifier(
            &g,
            NotifyConfig {
                max_bytes: 1,
                ..cfg(1_000)
            },
        );
        assert_eq!(n.prepare(&g.state).await.unwrap().payloads, 2);
        let payloads = outbox(&g).await;
        assert_eq!(
            payloads.iter().map(|p| p.2.len()).collect::<Vec<_>>(),
            [1, 1]
        );
        assert_consecutive(&payloads);
    }

    #[tokio::test]
    async fn a_restarted_notifier_continues_where_the_channel_ended() {
        let f = file_fixture().await;
        f.create(&["a", "b"]).await;
        notifier(&f, cfg(1_000)).prepare(&f.state).await.unwrap();
        f.create(&["c"]).await;
        f.commit(&[("a", Change::Updated)]).await;
        // A new notifier on the same store (another process, a later run).
        let p = notifier(&f, cfg(1_000)).prepare(&f.state).await.unwrap();
        assert_eq!((p.payloads, p.entries, p.seq), (1, 2, 4));
        let payloads = outbox(&f).await;
        assert_eq!(payloads.len(), 2);
        assert_consecutive(&payloads);
        assert!(object(&f, &outbox_path(2)).await.is_some(), "numbered on");
    }

    #[tokio::test]
    async fn a_crash_before_the_channel_record_rebuilds_the_same_payloads() {
        let f = file_fixture().await;
        f.create(&["a", "b", "c"]).await;
        let n = notifier(&f, cfg(2));
        n.prepare(&f.state).await.unwrap();
        let first = (
            object(&f, &outbox_path(1)).await.unwrap(),
            object(&f, &outbox_path(2)).await.unwrap(),
        );
        // The crash: payloads written, the channel record not.
        f.objects.delete(&Path::from(CHANNEL)).await.unwrap();
        assert_eq!(n.pending().await.unwrap(), 0, "drafts are not sent");
        let p = n.prepare(&f.state).await.unwrap();
        assert_eq!(p.payloads, 2);
        let again = (
            object(&f, &outbox_path(1)).await.unwrap(),
            object(&f, &outbox_path(2)).await.unwrap(),
        );
        assert_eq!(first, again, "byte-identical");
        assert!(object(&f, &outbox_path(3)).await.is_none());
        assert_eq!(n.pending().await.unwrap(), 2);
        // A draft that differs (the records it read changed) is replaced: it was never sent.
        f.objects.delete(&Path::from(CHANNEL)).await.unwrap();
        put(
            f.objects.as_ref(),
            &outbox_path(2),
            Bytes::from_static(b"stale"),
        )
        .await
        .unwrap();
        n.prepare(&f.state).await.unwrap();
        assert_eq!(object(&f, &outbox_path(2)).await.unwrap(), first.1);
    }

    /// A hub on loopback: answers 503 to the first `fail` requests, then `ok`; records
    /// every request's headers and body; with `fetch`, "GETs the topic" before answering, as
    /// flask-websub's eager mode does (reads [`LATEST`] and notes it as the topic route
    /// does).
    struct MockHub {
        url: String,
        seen: Requests,
    }

    /// Each request's headers and body, and the topic's body when the hub fetched it.
    type Requests = Arc<Mutex<Vec<(HeaderMap, Bytes, Option<Bytes>)>>>;

    async fn mock_hub(fail: usize, ok: u16, fetch: Option<Arc<dyn ObjectStore>>) -> MockHub {
        let seen: Requests = Arc::default();
        let record = seen.clone();
        let app = Router::new().route(
            "/hub",
            post(move |headers: HeaderMap, body: Bytes| {
                let record = record.clone();
                let fetch = fetch.clone();
                async move {
                    let count = record.lock().unwrap().len();
                    let topic = match &fetch {
                        Some(objects) if count >= fail => {
                            let latest = objects
                                .get(&Path::from(LATEST))
                                .await
                                .unwrap()
                                .bytes()
                                .await
                                .unwrap();
                            let until = payload_until(&latest).unwrap();
                            put_json(objects.as_ref(), FETCHED, &Fetched { until })
                                .await
                                .unwrap();
                            Some(latest)
                        }
                        _ => None,
                    };
                    record.lock().unwrap().push((headers, body, topic));
                    if count < fail {
                        StatusCode::SERVICE_UNAVAILABLE
                    } else {
                        StatusCode::from_u16(ok).unwrap()
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        MockHub {
            url: format!("http://{addr}/hub"),
            seen,
        }
    }

    #[tokio::test]
    async fn the_outbox_goes_to_the_hub_in_order_through_failures() {
        let f = fixture().await;
        f.create(&["a", "b", "c"]).await;
        let hub = mock_hub(2, 200, None).await;
        let n = notifier(
            &f,
            NotifyConfig {
                max_entries: 2,
                ..NotifyConfig::new(url::Url::parse(&hub.url).unwrap(), NotifyForm::Resourcesync)
            },
        );
        n.prepare(&f.state).await.unwrap();
        let payloads = [
            object(&f, &outbox_path(1)).await.unwrap(),
            object(&f, &outbox_path(2)).await.unwrap(),
        ];
        let r = n.deliver(Some(Duration::from_secs(20))).await;
        assert_eq!(
            (r.delivered, r.pending, r.attempts, r.failures, r.sent_total),
            (2, 0, 4, 2, 2),
            "{r:?}"
        );
        assert!(r.last_error.unwrap().contains(&hub.url));
        let seen = hub.seen.lock().unwrap().clone();
        let bodies: Vec<&Bytes> = seen.iter().map(|(_, b, _)| b).collect();
        assert_eq!(
            bodies,
            [&payloads[0], &payloads[0], &payloads[0], &payloads[1]],
            "resent byte-identical, in order"
        );
        for (headers, _, _) in seen.iter() {
            assert_eq!(headers["content-type"], "application/xml");
            assert_eq!(
                headers["link"],
                format!("<{BASE}change/>; rel=\"self\", <{}>; rel=\"hub\"", hub.url).as_str()
            );
        }
        assert_eq!(
            object(&f, LATEST).await.unwrap(),
            payloads[1],
            "the topic's body"
        );
        assert_eq!(n.pending().await.unwrap(), 0);
        assert!(
            object(&f, &outbox_path(1)).await.is_none(),
            "delivered: removed"
        );
    }

    #[tokio::test]
    async fn a_hub_outage_keeps_the_outbox_for_the_next_delivery() {
        let f = fixture().await;
        f.create(&["a"]).await;
        let down = mock_hub(usize::MAX, 200, None).await;
        let n = notifier(
            &f,
            NotifyConfig::new(
                url::Url::parse(&down.url).unwrap(),
                NotifyForm::Resourcesync,
            ),
        );
        n.prepare(&f.state).await.unwrap();
        let payload = object(&f, &outbox_path(1)).await.unwrap();
        let r = n.deliver(Some(Duration::from_millis(300))).await;
        assert_eq!((r.delivered, r.pending, r.sent_total), (0, 1, 0), "{r:?}");
        assert!(r.attempts >= 1 && r.last_error.is_some());
        // Later (another run, another notifier), with the hub back.
        let up = mock_hub(0, 200, None).await;
        let n = notifier(
            &f,
            NotifyConfig::new(url::Url::parse(&up.url).unwrap(), NotifyForm::Resourcesync),
        );
        let r = n.deliver(Some(Duration::from_secs(10))).await;
        assert_eq!((r.delivered, r.pending, r.sent_total), (1, 0, 1), "{r:?}");
        assert_eq!(up.seen.lock().unwrap()[0].1, payload);
    }

    #[tokio::test]
    async fn the_websub_form_moves_the_topic_on_once_the_hub_fetched_it() {
        let f = fixture().await;
        f.create(&["a", "b", "c"]).await;
        let hub = mock_hub(1, 202, Some(f.objects.clone())).await;
        let n = notifier(
            &f,
            NotifyConfig {
                max_entries: 2,
                fetch_wait: Duration::from_secs(10),
                ..NotifyConfig::new(url::Url::parse(&hub.url).unwrap(), NotifyForm::Websub)
            },
        );
        n.prepare(&f.state).await.unwrap();
        let payloads = [
            object(&f, &outbox_path(1)).await.unwrap(),
            object(&f, &outbox_path(2)).await.unwrap(),
        ];
        let started = Instant::now();
        let r = n.deliver(Some(Duration::from_secs(20))).await;
        assert_eq!(
            (r.delivered, r.pending, r.attempts, r.unfetched),
            (2, 0, 3, 0),
            "{r:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "did not wait out fetch_wait"
        );
        let seen = hub.seen.lock().unwrap().clone();
        for (headers, body, _) in seen.iter() {
            assert_eq!(headers["content-type"], "application/x-www-form-urlencoded");
            let topic: String =
                url::form_urlencoded::byte_serialize(format!("{BASE}change/").as_bytes()).collect();
            assert_eq!(
                std::str::from_utf8(body).unwrap(),
                format!("hub.mode=publish&hub.url={topic}&hub.topic={topic}")
            );
        }
        // Each accepted publish found its own payload at the topic.
        let fetched: Vec<&Bytes> = seen.iter().filter_map(|(_, _, t)| t.as_ref()).collect();
        assert_eq!(fetched, [&payloads[0], &payloads[1]]);
        let marker: Fetched = get_json(f.objects.as_ref(), FETCHED)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(Some(marker.until), payload_until(&payloads[1]));
    }

    #[tokio::test]
    async fn the_websub_form_moves_on_after_fetch_wait_when_nobody_fetches() {
        let f = fixture().await;
        f.create(&["a"]).await;
        let hub = mock_hub(0, 202, None).await;
        let n = notifier(
            &f,
            NotifyConfig {
                fetch_wait: Duration::from_millis(200),
                ..NotifyConfig::new(url::Url::parse(&hub.url).unwrap(), NotifyForm::Websub)
            },
        );
        n.prepare(&f.state).await.unwrap();
        let r = n.deliver(Some(Duration::from_secs(10))).await;
        assert_eq!((r.delivered, r.pending, r.unfetched), (1, 0, 1), "{r:?}");
        assert!(
            !NotifyReport {
                delivery: r,
                ..NotifyReport::default()
            }
            .failed()
        );
    }

    #[test]
    fn payload_until_reads_only_payloads() {
        let from = W3cDateTime::parse("2026-01-01T00:00:00Z").unwrap().value;
        let until = W3cDateTime::parse("2026-01-01T00:00:01.5Z").unwrap().value;
        let xml = payload(BASE, from, until, b"");
        assert_eq!(payload_until(&xml), Some(until));
        strict(&xml);
        assert_eq!(payload_until(b"<urlset/>"), None);
        assert_eq!(payload_until(b""), None);
        let list = rsagg_layout::capability::capability_list(
            BASE,
            &rsagg_layout::capability::Advertised::default(),
        );
        assert_eq!(payload_until(&list), None);
    }
}
