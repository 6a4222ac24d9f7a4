//! The subscriber side of WebSub (W3C WebSub 5 and 7; Change Notification 1.0.1 4.2–4.4):
//! what rsagg does as a Destination of an upstream's change-notification channel.
//!
//! - [`Subscriber::prepare`] then [`Subscriber::request`] POST `hub.mode=subscribe` with
//!   the callback, topic, requested lease and (when the hub is reached privately, see
//!   [`secret_allowed`]) a fresh secret; the hub answers 202 and verifies later.
//! - [`Subscriber::verify`] answers the hub's verification of intent (WebSub 5.3): the
//!   challenge is echoed only for a subscription this subscriber asked for and is waiting
//!   to be verified (same callback key, mode and topic), so nobody can subscribe rsagg to
//!   anything, or unsubscribe it, in its name. The granted `hub.lease_seconds` is recorded.
//! - [`Subscriber::due`] tells which subscriptions must be requested again: at 80% of the
//!   granted lease (WebSub 5.1: "a subscriber MUST renew before the lease expires"), or when
//!   a request failed or was never verified (with a capped backoff).
//! - [`Subscriber::accept`] authenticates a delivery (WebSub 7.1): when a secret was given,
//!   `X-Hub-Signature` must be present and match (sha1, sha256, sha384 or sha512, compared
//!   in constant time); otherwise the message is dropped — and still answered 2xx by the
//!   caller, as WebSub 7.1 says, so the hub does not retry a forgery.
//!
//! - [`Subscriber::guarded`] sends those requests through the address guard of
//!   `rsagg-fetch`: the hub is named by an upstream's document, so it must not lead rsagg
//!   to private, loopback or link-local addresses unless that upstream allows them.
//!
//! Like the hub, nothing here depends on an HTTP framework; the state is a set of
//! serialisable [`SubscriptionRecord`]s the caller persists (the secret must survive a
//! restart, or deliveries signed with it could no longer be checked).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use url::Url;

use crate::{Error, SignatureFailure, link, signature};

/// How long a requested subscription may stay unverified before it is requested again.
pub const VERIFY_WAIT: Duration = Duration::from_secs(60);
/// Longest wait between two failed subscription requests.
pub const RETRY_MAX: Duration = Duration::from_secs(300);
/// Shortest wait between two requests for the same subscription (a hub granting 1-second
/// leases must not make the subscriber hammer it).
pub const RENEW_MIN: Duration = Duration::from_millis(500);

/// Milliseconds since the Unix epoch.
pub fn unix_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One subscription as the subscriber keeps (and persists) it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscriptionRecord {
    /// The callback key (rsagg: the upstream name, last segment of the callback URL).
    pub key: String,
    /// The topic URL.
    pub topic: String,
    /// The hub URL.
    pub hub: String,
    /// The callback URL given to the hub.
    pub callback: String,
    /// `hub.secret` given with the last request, if any (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// `hub.lease_seconds` requested.
    pub lease_requested: u64,
    /// The lease the hub granted at the last verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_granted: Option<u64>,
    /// When the granted lease ends (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<i64>,
    /// A subscribe request was sent and not verified yet.
    #[serde(default)]
    pub pending: bool,
    /// An unsubscribe request was sent: its verification is confirmed, deliveries dropped.
    #[serde(default)]
    pub unsubscribing: bool,
    /// When to request the subscription again (Unix milliseconds).
    pub next_attempt: i64,
    /// Failed requests in a row (for the backoff).
    #[serde(default)]
    pub failures: u32,
}

impl SubscriptionRecord {
    /// Whether the hub verified the subscription and its lease still runs at `now`.
    pub fn active(&self, now: i64) -> bool {
        self.expires_at.is_some_and(|e| e > now) && !self.unsubscribing
    }
}

/// A verification of intent (WebSub 5.3) or a denial (WebSub 5.2), from the callback's query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verification {
    /// `hub.mode`: `subscribe`, `unsubscribe` or `denied`.
    pub mode: String,
    /// `hub.topic`.
    pub topic: String,
    /// `hub.challenge` (absent for a denial).
    pub challenge: Option<String>,
    /// `hub.lease_seconds` (subscribe only).
    pub lease_seconds: Option<u64>,
    /// `hub.reason` (denial only).
    pub reason: Option<String>,
}

impl Verification {
    /// Reads the query string of a verification request (`None` without `hub.mode` or
    /// `hub.topic`: not a WebSub request).
    pub fn from_query(query: &str) -> Option<Verification> {
        let mut v = Verification::default();
        for (k, val) in url::form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "hub.mode" if v.mode.is_empty() => v.mode = val.into_owned(),
                "hub.topic" if v.topic.is_empty() => v.topic = val.into_owned(),
                "hub.challenge" if v.challenge.is_none() => v.challenge = Some(val.into_owned()),
                "hub.lease_seconds" if v.lease_seconds.is_none() => {
                    v.lease_seconds = val.trim().parse().ok();
                }
                "hub.reason" if v.reason.is_none() => v.reason = Some(val.into_owned()),
                _ => {}
            }
        }
        (!v.mode.is_empty() && !v.topic.is_empty()).then_some(v)
    }
}

/// The subscriber's answer to a verification request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 200 with the challenge as the body: the subscriber asked for this.
    Confirm(String),
    /// 200, empty: a denial was taken note of.
    Acknowledge,
    /// 404: not asked for (WebSub 5.3.1: any answer but the challenge refuses).
    Refuse,
}

/// A delivery at a callback (WebSub 7, CN 1.0.1 4.3), stripped of its HTTP framework.
#[derive(Debug, Clone, Default)]
pub struct Delivery {
    /// Every `Link` header value (rel `self` names the topic).
    pub links: Vec<String>,
    /// `X-Hub-Signature`, if any.
    pub signature: Option<String>,
    /// The body (the caller bounds its size).
    pub body: bytes::Bytes,
}

/// Why a delivery was dropped (it is answered 2xx all the same, WebSub 7.1).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Dropped {
    /// No subscription of this callback for the delivery's topic.
    Unknown,
    /// A secret was given but the delivery has no `X-Hub-Signature`.
    Unsigned,
    /// `X-Hub-Signature` does not verify.
    BadSignature(SignatureFailure),
    /// The subscription is being cancelled.
    Unsubscribing,
}

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Dropped::Unknown => f.write_str("no subscription for this topic at this callback"),
            Dropped::Unsigned => f.write_str("a secret was given but X-Hub-Signature is missing"),
            Dropped::BadSignature(why) => write!(f, "X-Hub-Signature: {why}"),
            Dropped::Unsubscribing => f.write_str("the subscription is being cancelled"),
        }
    }
}

/// Whether `hub.secret` may be sent to `hub`: WebSub 5.1 says a secret should only be given
/// over HTTPS; a loopback hub is reached without a network in between, so it gets one too.
pub fn secret_allowed(hub: &Url) -> bool {
    match hub.host() {
        _ if hub.scheme() == "https" => true,
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// A fresh secret: 32 random bytes, hex (64 characters, under WebSub's 200-byte limit).
pub fn new_secret() -> Result<String, Error> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| Error::Config(format!("no randomness: {e}")))?;
    Ok(signature::hex(&bytes))
}

/// Topics are compared as URLs (`http://H/x` and `http://h:80/x` are one topic).
fn same_topic(a: &str, b: &str) -> bool {
    match (Url::parse(a), Url::parse(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

/// The address guard of a subscriber's requests (see [`Subscriber::guarded`]).
#[derive(Debug)]
struct Guard {
    /// From `rsagg_fetch::guard::client_builder(false)`: names resolve through the guard.
    client: reqwest::Client,
    /// Callback keys whose hubs may be private (rsagg: upstreams with `allow_private`).
    allow_private: HashSet<String>,
}

/// The subscriptions of one process, by callback key and topic (see the module docs).
#[derive(Debug)]
pub struct Subscriber {
    /// Requests outside the guard: all of them without one, else those of the keys in
    /// [`Guard::allow_private`].
    client: reqwest::Client,
    guard: Option<Guard>,
    subs: Mutex<HashMap<(String, String), SubscriptionRecord>>,
    /// Something changed since [`Subscriber::take_changed`] (to persist).
    changed: std::sync::atomic::AtomicBool,
}

impl Subscriber {
    /// A subscriber sending every request with `client`, which decides alone where requests
    /// may go (no address guard here): for hubs the caller trusts, and tests. Hubs named by
    /// documents from elsewhere call for [`Subscriber::guarded`].
    pub fn new(client: reqwest::Client) -> Subscriber {
        Subscriber {
            client,
            guard: None,
            subs: Mutex::new(HashMap::new()),
            changed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// A subscriber whose requests (WebSub 5.1 subscribe and unsubscribe) go through the
    /// address guard of `rsagg-fetch`, except those of the callback keys in
    /// `allow_private`. An upstream's Capability List names the hub, so without the guard
    /// an upstream could make rsagg POST into the network it runs in: a hub URL whose host
    /// is a non-public IP literal or a `localhost` name is refused before anything is sent,
    /// a name is refused when any address it resolves to is not public — judged at connect
    /// time, on the addresses connected to — and no redirect is followed (WebSub 5.1: the
    /// hub answers 202; a 3xx is an answer, a failed one) nor proxy used. A refusal is
    /// [`Error::Refused`].
    ///
    /// `configure` adds the caller's settings (timeouts, user agent) to both clients,
    /// which come from [`rsagg_fetch::guard::client_builder`].
    pub fn guarded(
        configure: impl Fn(reqwest::ClientBuilder) -> reqwest::ClientBuilder,
        allow_private: impl IntoIterator<Item = String>,
    ) -> Result<Subscriber, Error> {
        let build = |allow: bool| {
            configure(rsagg_fetch::guard::client_builder(allow))
                .build()
                .map_err(Error::Client)
        };
        let mut s = Subscriber::new(build(true)?);
        s.guard = Some(Guard {
            client: build(false)?,
            allow_private: allow_private.into_iter().collect(),
        });
        Ok(s)
    }

    /// The client for a request of callback `key` to `hub`, after the guard's check of the
    /// URL itself (IP literals skip the resolver).
    fn client_for(&self, key: &str, hub: &str) -> Result<&reqwest::Client, Error> {
        match &self.guard {
            Some(g) if !g.allow_private.contains(key) => {
                let url = Url::parse(hub).map_err(|e| Error::Request {
                    hub: hub.to_owned(),
                    message: e.to_string(),
                })?;
                crate::check_target(&url, false)?;
                Ok(&g.client)
            }
            _ => Ok(&self.client),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), SubscriptionRecord>> {
        self.subs.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn touch(&self) {
        self.changed
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether anything changed since the last call (the caller then persists
    /// [`Subscriber::records`]).
    pub fn take_changed(&self) -> bool {
        self.changed
            .swap(false, std::sync::atomic::Ordering::Relaxed)
    }

    /// Takes persisted records back (after a restart): deliveries signed with their secrets
    /// verify again, and their renewal times hold.
    pub fn restore(&self, records: impl IntoIterator<Item = SubscriptionRecord>) {
        let mut subs = self.lock();
        for r in records {
            subs.insert((r.key.clone(), r.topic.clone()), r);
        }
    }

    /// Every record of callback `key`, sorted by topic.
    pub fn records(&self, key: &str) -> Vec<SubscriptionRecord> {
        let mut v: Vec<SubscriptionRecord> = self
            .lock()
            .values()
            .filter(|r| r.key == key)
            .cloned()
            .collect();
        v.sort_by(|a, b| a.topic.cmp(&b.topic));
        v
    }

    /// The record of (`key`, `topic`).
    pub fn record(&self, key: &str, topic: &str) -> Option<SubscriptionRecord> {
        self.lock()
            .values()
            .find(|r| r.key == key && same_topic(&r.topic, topic))
            .cloned()
    }

    /// Registers the intent to subscribe `callback` (under `key`) to `topic` at `hub` and
    /// returns the record to persist *before* [`Subscriber::request`] sends it: a secret the
    /// hub holds must never be one the subscriber forgot. A renewal keeps the secret (a
    /// delivery in flight still verifies) unless the hub changed.
    pub fn prepare(
        &self,
        key: &str,
        topic: &Url,
        hub: &Url,
        callback: &Url,
        lease: Duration,
        now: i64,
    ) -> Result<SubscriptionRecord, Error> {
        let mut subs = self.lock();
        let id = (key.to_owned(), topic.to_string());
        let previous = subs.get(&id);
        let secret = match previous {
            Some(p) if p.hub == hub.as_str() && p.secret.is_some() => p.secret.clone(),
            _ if secret_allowed(hub) => Some(new_secret()?),
            _ => None,
        };
        let record = SubscriptionRecord {
            key: key.to_owned(),
            topic: topic.to_string(),
            hub: hub.to_string(),
            callback: callback.to_string(),
            secret,
            lease_requested: lease.as_secs().max(1),
            lease_granted: previous.and_then(|p| p.lease_granted),
            expires_at: previous.and_then(|p| p.expires_at),
            pending: true,
            unsubscribing: false,
            next_attempt: now.saturating_add(millis(VERIFY_WAIT)),
            failures: previous.map_or(0, |p| p.failures),
        };
        subs.insert(id, record.clone());
        drop(subs);
        self.touch();
        Ok(record)
    }

    /// Sends the subscription request of `record` (WebSub 5.1): 2xx means the hub will
    /// verify; anything else is an error and the request is retried after a backoff.
    pub async fn request(&self, record: &SubscriptionRecord) -> Result<(), Error> {
        let mut form = vec![
            ("hub.mode", "subscribe".to_owned()),
            ("hub.topic", record.topic.clone()),
            ("hub.callback", record.callback.clone()),
            ("hub.lease_seconds", record.lease_requested.to_string()),
        ];
        if let Some(s) = &record.secret {
            form.push(("hub.secret", s.clone()));
        }
        let result = self.post(&record.key, &record.hub, &form).await;
        let now = unix_millis();
        let mut subs = self.lock();
        // Only while still pending: a hub may verify before its 202 arrives here, and the
        // renewal time that verification set must stand.
        if let Some(r) = subs
            .get_mut(&(record.key.clone(), record.topic.clone()))
            .filter(|r| r.pending)
        {
            match &result {
                Ok(()) => {
                    r.failures = 0;
                    r.next_attempt = now.saturating_add(millis(VERIFY_WAIT));
                }
                Err(_) => {
                    r.failures = r.failures.saturating_add(1);
                    r.next_attempt = now.saturating_add(millis(retry_delay(r.failures)));
                }
            }
        }
        drop(subs);
        self.touch();
        result
    }

    /// Sends `hub.mode=unsubscribe` for (`key`, `topic`) (WebSub 5.1, CN 1.0.1 4.4); its
    /// verification is confirmed and deliveries are dropped from now on. The record goes
    /// once the hub verifies (or the lease ends).
    pub async fn unsubscribe(&self, key: &str, topic: &str) -> Result<(), Error> {
        let record = {
            let mut subs = self.lock();
            let Some(r) = subs
                .values_mut()
                .find(|r| r.key == key && same_topic(&r.topic, topic))
            else {
                return Ok(());
            };
            r.unsubscribing = true;
            r.pending = false;
            r.clone()
        };
        self.touch();
        let form = [
            ("hub.mode", "unsubscribe".to_owned()),
            ("hub.topic", record.topic.clone()),
            ("hub.callback", record.callback.clone()),
        ];
        self.post(&record.key, &record.hub, &form).await
    }

    async fn post(&self, key: &str, hub: &str, form: &[(&str, String)]) -> Result<(), Error> {
        let client = self.client_for(key, hub)?;
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(form.iter().map(|(k, v)| (*k, v.as_str())))
            .finish();
        let response = client
            .post(hub)
            .header(
                reqwest::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .body(body)
            .send()
            .await
            .map_err(|e| match crate::request_error(hub, &e) {
                refused @ Error::Refused { .. } => refused,
                _ => Error::Request {
                    hub: hub.to_owned(),
                    message: e.to_string(),
                },
            })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            let text = response.text().await.unwrap_or_default();
            Err(Error::Request {
                hub: hub.to_owned(),
                message: format!("{status}: {}", text.chars().take(200).collect::<String>()),
            })
        }
    }

    /// Answers a verification request at callback `key` (WebSub 5.2, 5.3).
    pub fn verify(&self, key: &str, v: &Verification, now: i64) -> Answer {
        let mut subs = self.lock();
        let found = subs
            .iter_mut()
            .find(|((k, t), _)| k == key && same_topic(t, &v.topic));
        let answer = match (v.mode.as_str(), found, &v.challenge) {
            ("subscribe", Some((_, r)), Some(challenge)) if r.pending && !r.unsubscribing => {
                let granted = v.lease_seconds.unwrap_or(r.lease_requested);
                r.pending = false;
                r.failures = 0;
                r.lease_granted = Some(granted);
                r.expires_at = Some(now.saturating_add(millis(Duration::from_secs(granted))));
                r.next_attempt = now.saturating_add(renew_after(granted));
                Answer::Confirm(challenge.clone())
            }
            ("unsubscribe", Some((id, r)), Some(challenge)) if r.unsubscribing => {
                let id = id.clone();
                subs.remove(&id);
                Answer::Confirm(challenge.clone())
            }
            // A subscription this callback does not hold (any more) may go: confirming
            // cannot take anything rsagg wants away.
            ("unsubscribe", None, Some(challenge)) => Answer::Confirm(challenge.clone()),
            ("denied", Some((id, r)), _) if r.pending => {
                tracing::warn!(
                    topic = %v.topic, hub = %r.hub,
                    reason = v.reason.as_deref().unwrap_or(""),
                    "the hub denied the subscription"
                );
                let id = id.clone();
                subs.remove(&id);
                Answer::Acknowledge
            }
            _ => Answer::Refuse,
        };
        drop(subs);
        if answer != Answer::Refuse {
            self.touch();
        }
        answer
    }

    /// Authenticates a delivery at callback `key` (WebSub 7.1): `Ok(topic)` of the
    /// subscription it belongs to, or why it must be dropped. A delivery without `Link`
    /// rel=self belongs to the only subscription of the callback, if there is just one.
    pub fn accept(&self, key: &str, d: &Delivery) -> Result<String, Dropped> {
        let record = {
            let subs = self.lock();
            let topic = Url::parse(&format!("http://callback/{key}"))
                .ok()
                .map(|base| link::parse(&d.links, &base))
                .and_then(|links| link::find(&links, "self").map(str::to_owned));
            let mut mine = subs.values().filter(|r| r.key == key);
            match topic {
                Some(t) => mine.find(|r| same_topic(&r.topic, &t)).cloned(),
                None => match (mine.next(), mine.next()) {
                    (Some(only), None) => Some(only.clone()),
                    _ => None,
                },
            }
        };
        let r = record.ok_or(Dropped::Unknown)?;
        if r.unsubscribing {
            return Err(Dropped::Unsubscribing);
        }
        if let Some(secret) = &r.secret {
            let header = d.signature.as_deref().ok_or(Dropped::Unsigned)?;
            match signature::verify(header, secret.as_bytes(), &d.body) {
                Ok(()) => {}
                Err(Error::Signature(why)) => return Err(Dropped::BadSignature(why)),
                Err(_) => return Err(Dropped::BadSignature(SignatureFailure::Malformed)),
            }
        }
        Ok(r.topic)
    }

    /// The subscriptions to request again at `now` (renewal at 80% of the lease, a request
    /// never verified, a failed one after its backoff), as (key, topic).
    pub fn due(&self, now: i64) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = self
            .lock()
            .values()
            .filter(|r| !r.unsubscribing && r.next_attempt <= now)
            .map(|r| (r.key.clone(), r.topic.clone()))
            .collect();
        v.sort();
        v
    }

    /// Counts a failed attempt at (`key`, `topic`) that never reached the hub (e.g. the hub
    /// is refused) and moves its next attempt on by the backoff, so [`Subscriber::due`]
    /// does not return it again at once.
    pub fn defer(&self, key: &str, topic: &str, now: i64) {
        let mut subs = self.lock();
        if let Some(r) = subs
            .values_mut()
            .find(|r| r.key == key && same_topic(&r.topic, topic))
        {
            r.failures = r.failures.saturating_add(1);
            r.next_attempt = now.saturating_add(millis(retry_delay(r.failures)));
        }
        drop(subs);
        self.touch();
    }

    /// The earliest `next_attempt` of all subscriptions (when [`Subscriber::due`] may next
    /// return something).
    pub fn next_due(&self) -> Option<i64> {
        self.lock()
            .values()
            .filter(|r| !r.unsubscribing)
            .map(|r| r.next_attempt)
            .min()
    }
}

/// When to renew a lease of `granted` seconds after its verification: at 80% of it, never
/// sooner than [`RENEW_MIN`].
pub fn renew_after(granted: u64) -> i64 {
    let lease = millis(Duration::from_secs(granted));
    (lease / 5 * 4).max(millis(RENEW_MIN))
}

/// The wait after `failures` failed requests in a row: 1 s doubling, capped at
/// [`RETRY_MAX`].
pub fn retry_delay(failures: u32) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    Duration::from_secs(1u64 << exp).min(RETRY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signature::{Algorithm, sign};

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    fn subscriber() -> Subscriber {
        Subscriber::new(reqwest::Client::new())
    }

    const TOPIC: &str = "http://up.example/change/";

    fn prepared(s: &Subscriber, now: i64) -> SubscriptionRecord {
        s.prepare(
            "museum",
            &url(TOPIC),
            &url("http://127.0.0.1:9/"),
            &url("http://agg.example/c/websub/museum"),
            Duration::from_secs(86_400),
            now,
        )
        .unwrap()
    }

    fn verification(mode: &str, topic: &str, lease: Option<u64>) -> Verification {
        Verification {
            mode: mode.into(),
            topic: topic.into(),
            challenge: Some("ch4llenge".into()),
            lease_seconds: lease,
            reason: None,
        }
    }

    #[test]
    fn reads_the_verification_query_of_cn_example_4() {
        let v = Verification::from_query(
            "hub.mode=subscribe&hub.topic=http%3A%2F%2Fexample.com%2Fdataset1%2Fchange%2F\
             &hub.challenge=c0cc4630-5116-11e3-8f96-0800200c9a66&hub.lease_seconds=2400",
        )
        .unwrap();
        assert_eq!(v.mode, "subscribe");
        assert_eq!(v.topic, "http://example.com/dataset1/change/");
        assert_eq!(
            v.challenge.as_deref(),
            Some("c0cc4630-5116-11e3-8f96-0800200c9a66")
        );
        assert_eq!(v.lease_seconds, Some(2400));
        assert_eq!(Verification::from_query("a=b"), None);
    }

    #[test]
    fn verification_only_for_subscriptions_asked_for() {
        let s = subscriber();
        let now = 1_000_000;
        // Nothing asked: refused.
        assert_eq!(
            s.verify("museum", &verification("subscribe", TOPIC, Some(10)), now),
            Answer::Refuse
        );
        prepared(&s, now);
        // Another callback key or topic: refused.
        assert_eq!(
            s.verify("other", &verification("subscribe", TOPIC, Some(10)), now),
            Answer::Refuse
        );
        assert_eq!(
            s.verify(
                "museum",
                &verification("subscribe", "http://up.example/else/", Some(10)),
                now
            ),
            Answer::Refuse
        );
        // An unsubscribe of a subscription still wanted: refused.
        assert_eq!(
            s.verify("museum", &verification("unsubscribe", TOPIC, None), now),
            Answer::Refuse
        );
        // The one asked for (topic compared as a URL): confirmed once, lease recorded.
        let same = "HTTP://UP.EXAMPLE:80/change/";
        assert_eq!(
            s.verify("museum", &verification("subscribe", same, Some(10)), now),
            Answer::Confirm("ch4llenge".into())
        );
        let r = s.record("museum", TOPIC).unwrap();
        assert_eq!(r.lease_granted, Some(10));
        assert_eq!(r.expires_at, Some(now + 10_000));
        assert!(r.active(now) && !r.pending);
        // A replayed verification is not confirmed again.
        assert_eq!(
            s.verify("museum", &verification("subscribe", TOPIC, Some(10)), now),
            Answer::Refuse
        );
        // Unsubscribe of a topic never held is harmless and confirmed.
        assert_eq!(
            s.verify(
                "museum",
                &verification("unsubscribe", "http://up.example/gone/", None),
                now
            ),
            Answer::Confirm("ch4llenge".into())
        );
        assert!(s.take_changed());
    }

    #[test]
    fn a_denial_forgets_the_pending_request() {
        let s = subscriber();
        prepared(&s, 0);
        let mut v = verification("denied", TOPIC, None);
        v.challenge = None;
        assert_eq!(s.verify("museum", &v, 0), Answer::Acknowledge);
        assert!(s.record("museum", TOPIC).is_none());
    }

    #[test]
    fn leases_are_renewed_at_four_fifths_and_failures_back_off() {
        let s = subscriber();
        let now = 5_000;
        prepared(&s, now);
        // Unverified: asked again after VERIFY_WAIT.
        assert!(s.due(now).is_empty());
        assert_eq!(
            s.due(now + millis(VERIFY_WAIT)),
            vec![("museum".to_owned(), TOPIC.to_owned())]
        );
        s.verify("museum", &verification("subscribe", TOPIC, Some(100)), now);
        assert!(s.due(now + 79_999).is_empty());
        assert_eq!(s.due(now + 80_000).len(), 1);
        assert_eq!(s.next_due(), Some(now + 80_000));
        // A one-second lease is renewed at 0.8 s; shorter ones never more often than
        // RENEW_MIN.
        assert_eq!(renew_after(1), 800);
        assert_eq!(renew_after(0), millis(RENEW_MIN));
        assert_eq!(retry_delay(1), Duration::from_secs(1));
        assert_eq!(retry_delay(3), Duration::from_secs(4));
        assert_eq!(retry_delay(40), RETRY_MAX);
        // An attempt that could not be made is deferred by the backoff.
        s.defer("museum", TOPIC, now + 80_000);
        assert!(s.due(now + 80_000).is_empty());
        assert_eq!(s.due(now + 81_000).len(), 1);
        // A renewal keeps the secret (deliveries in flight still verify).
        let before = s.record("museum", TOPIC).unwrap().secret;
        let again = prepared(&s, now + 80_000);
        assert_eq!(again.secret, before);
        assert!(again.pending);
        assert!(again.active(now + 80_000), "the old lease still runs");
    }

    #[test]
    fn signatures_are_checked_with_every_algorithm() {
        let s = subscriber();
        let r = prepared(&s, 0);
        let secret = r.secret.clone().expect("a loopback hub gets a secret");
        assert_eq!(secret.len(), 64);
        let body = bytes::Bytes::from_static(b"<urlset/>");
        let links = vec![link::format(TOPIC, "http://127.0.0.1:9/")];
        for alg in [
            Algorithm::Sha1,
            Algorithm::Sha256,
            Algorithm::Sha384,
            Algorithm::Sha512,
        ] {
            let good = Delivery {
                links: links.clone(),
                signature: Some(sign(alg, secret.as_bytes(), &body)),
                body: body.clone(),
            };
            assert_eq!(s.accept("museum", &good), Ok(TOPIC.to_owned()), "{alg:?}");
            let forged = Delivery {
                signature: Some(sign(alg, b"not the secret", &body)),
                ..good.clone()
            };
            assert_eq!(
                s.accept("museum", &forged),
                Err(Dropped::BadSignature(SignatureFailure::Mismatch)),
                "{alg:?}"
            );
            let altered = Delivery {
                body: bytes::Bytes::from_static(b"<urlset />"),
                ..good.clone()
            };
            assert!(s.accept("museum", &altered).is_err(), "{alg:?}");
        }
        let unsigned = Delivery {
            links: links.clone(),
            signature: None,
            body: body.clone(),
        };
        assert_eq!(s.accept("museum", &unsigned), Err(Dropped::Unsigned));
        let unknown = Delivery {
            links: vec![link::format("http://up.example/x/", "http://h/")],
            ..unsigned.clone()
        };
        assert_eq!(s.accept("museum", &unknown), Err(Dropped::Unknown));
        assert_eq!(s.accept("nobody", &unsigned), Err(Dropped::Unknown));
    }

    /// A hub that verifies before it answers the request (WebSub allows either order): the
    /// renewal time set by the verification is not overwritten by the 202.
    #[tokio::test]
    async fn a_verification_before_the_202_keeps_its_renewal_time() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let hub = url(&format!("http://{}/", listener.local_addr().unwrap()));
        let s = std::sync::Arc::new(subscriber());
        let record = s
            .prepare(
                "museum",
                &url(TOPIC),
                &hub,
                &url("http://agg.example/c/websub/museum"),
                Duration::from_secs(100),
                unix_millis(),
            )
            .unwrap();
        let server = {
            let s = s.clone();
            tokio::spawn(async move {
                let (mut conn, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 8192];
                let mut got = Vec::new();
                while !String::from_utf8_lossy(&got).contains("hub.mode=subscribe") {
                    let n = conn.read(&mut buf).await.unwrap();
                    assert!(n > 0, "connection closed early");
                    got.extend_from_slice(&buf[..n]);
                }
                let v = verification("subscribe", TOPIC, Some(100));
                assert!(matches!(
                    s.verify("museum", &v, unix_millis()),
                    Answer::Confirm(_)
                ));
                conn.write_all(
                    b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                )
                .await
                .unwrap();
            })
        };
        s.request(&record).await.unwrap();
        server.await.unwrap();
        let r = s.record("museum", TOPIC).unwrap();
        let renew_in = r.next_attempt - unix_millis();
        assert!(
            (70_000..=80_000).contains(&renew_in),
            "renewal in {renew_in} ms, not at 80% of the lease"
        );
    }

    #[test]
    fn no_secret_over_plain_http_to_a_remote_hub() {
        assert!(secret_allowed(&url("https://hub.example/")));
        assert!(secret_allowed(&url("http://127.0.0.1:8080/")));
        assert!(secret_allowed(&url("http://[::1]/")));
        assert!(!secret_allowed(&url("http://hub.example/")));
        let s = subscriber();
        let r = s
            .prepare(
                "museum",
                &url(TOPIC),
                &url("http://hub.example/"),
                &url("http://agg.example/c/websub/museum"),
                Duration::from_secs(60),
                0,
            )
            .unwrap();
        assert_eq!(r.secret, None);
        // Without a secret, unsigned deliveries are taken (there is nothing to check).
        let d = Delivery {
            links: vec![],
            signature: None,
            body: bytes::Bytes::from_static(b"x"),
        };
        assert_eq!(s.accept("museum", &d), Ok(TOPIC.to_owned()));
    }

    #[test]
    fn records_survive_a_restart() {
        let s = subscriber();
        let r = prepared(&s, 0);
        let json = serde_json::to_string(&s.records("museum")).unwrap();
        let t = subscriber();
        t.restore(serde_json::from_str::<Vec<SubscriptionRecord>>(&json).unwrap());
        assert_eq!(t.record("museum", TOPIC), Some(r.clone()));
        // The restored subscriber still confirms the verification it asked for.
        assert_eq!(
            t.verify("museum", &verification("subscribe", TOPIC, None), 0),
            Answer::Confirm("ch4llenge".into())
        );
        assert_eq!(
            t.record("museum", TOPIC).unwrap().lease_granted,
            Some(86_400)
        );
    }

    /// A hub on a private address is not contacted for an upstream that does not allow
    /// private targets (IP literal, `localhost`, and a name's resolved addresses through the
    /// guarded resolver); the upstream that allows them reaches it.
    #[tokio::test]
    async fn the_guard_keeps_requests_from_private_hubs_unless_allowed() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = std::sync::Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                h.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(
                        b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                    )
                    .await;
            }
        });
        let s = Subscriber::guarded(|b| b, ["trusted".to_owned()]).unwrap();
        let ask = |key: &str, hub: &str| {
            s.prepare(
                key,
                &url(TOPIC),
                &url(hub),
                &url("http://agg.example/c/websub/x"),
                Duration::from_secs(60),
                0,
            )
            .unwrap()
        };
        for hub in [
            format!("http://127.0.0.1:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            format!("http://localhost:{port}/"),
            "http://169.254.169.254/".to_owned(),
        ] {
            let r = ask("museum", &hub);
            let e = s.request(&r).await.unwrap_err();
            assert!(matches!(e, Error::Refused { .. }), "{hub}: {e}");
            assert_eq!(s.record("museum", TOPIC).unwrap().failures, 1, "backs off");
            s.restore([SubscriptionRecord { failures: 0, ..r }]);
        }
        let e = s.unsubscribe("museum", TOPIC).await.unwrap_err();
        assert!(matches!(e, Error::Refused { .. }), "{e}");
        // The resolver half: what `localhost` resolves to is refused at connect time too.
        let err = s
            .guard
            .as_ref()
            .unwrap()
            .client
            .post(format!("http://localhost:{port}/"))
            .send()
            .await
            .unwrap_err();
        assert!(rsagg_fetch::guard::find_refusal(&err).is_some(), "{err}");
        assert_eq!(hits.load(Ordering::SeqCst), 0, "nothing reached the hub");

        let r = ask("trusted", &format!("http://127.0.0.1:{port}/"));
        s.request(&r).await.unwrap();
        assert_eq!(hits.load(Ordering::SeqCst), 1, "allow_private: reached");
    }
}
