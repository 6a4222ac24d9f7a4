//! The hub: subscription requests and their verification of intent (WebSub 5), both
//! publication forms (CN 1.0.1 4.1 and WebSub `hub.mode=publish`), and the persisted state
//! that survives a restart.
//!
//! Every request is answered at once (202 or 200) and the slow parts (verification GETs,
//! topic fetches, deliveries) run in tasks bounded by semaphores, so a slow subscriber never
//! holds up a publisher.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::ObjectStore;
use object_store::path::Path;
use rsagg_model::{Capability, Mode, Root};
use rsagg_sitemap::{ReadOptions, SyncReader};
use rsagg_store::documents::{get_json, put, put_json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use url::Url;

use crate::config::HubConfig;
use crate::records::{
    PAYLOADS, QUEUE, QueueRecord, SUBSCRIPTIONS, SubscriptionRecord, payload_path, queue_path,
    subscription_id, subscription_path,
};
use crate::shared::{
    Inner, Queued, State, Sub, delete_quietly, release_payload, remove_subscription, unix_now,
};
use crate::{Error, delivery, link};

/// A request at the hub URL, stripped of its HTTP framework: everything the hub reads.
#[derive(Debug, Clone, Default)]
pub struct HubRequest {
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// Every `Link` header value, in order.
    pub links: Vec<String>,
    /// The body (the router caps it at [`HubConfig::max_publish_bytes`]).
    pub body: Bytes,
}

/// The hub's answer: a status and a short `text/plain` message (WebSub 5.1.2 and CN 1.0.1
/// 4.1 leave the body free; a human-readable reason helps whoever debugs a refusal).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubResponse {
    /// HTTP status code.
    pub status: u16,
    /// Body text.
    pub message: String,
}

impl HubResponse {
    fn new(status: u16, message: impl Into<String>) -> HubResponse {
        HubResponse {
            status,
            message: message.into(),
        }
    }
}

/// A live subscription as the hub sees it (the secret is not shown).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionInfo {
    /// [`crate::subscription_id`] of topic and callback.
    pub id: String,
    /// Topic URL.
    pub topic: String,
    /// Callback URL.
    pub callback: String,
    /// Lease granted at the last verification, in seconds.
    pub lease_seconds: u64,
    /// Unix seconds when the lease ends.
    pub expires_at: i64,
    /// Whether deliveries are signed.
    pub signed: bool,
    /// Messages waiting for this subscriber.
    pub queued: usize,
}

/// Counters since the hub was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HubStats {
    /// Messages delivered (callback answered 2xx).
    pub delivered: u64,
    /// Delivery attempts that failed (each is retried).
    pub failed_attempts: u64,
    /// Messages dropped because a subscriber's queue was full, or whose body was lost.
    pub dropped: u64,
    /// Live subscriptions.
    pub subscriptions: usize,
    /// Messages waiting, all subscribers together.
    pub queued: usize,
    /// Requests the address guard refused (see [`HubConfig::allow_private_callbacks`]):
    /// subscription and publish requests naming a refused callback or topic (answered 403),
    /// and verifications, denials, topic fetches and delivery attempts not sent because the
    /// target is, or resolves to, a refused address.
    pub refused: u64,
    /// Subscription and unsubscription requests answered 202 whose outcome is settled: the
    /// intent verified or not (WebSub 5.3), or the subscription denied (5.2). A caller
    /// that made a request can wait for this count instead of for a while.
    pub settled: u64,
}

/// A WebSub hub (see the crate documentation). Cheap to share behind an `Arc`; background
/// tasks run until [`Hub::shutdown`].
pub struct Hub {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Hub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("public_url", &self.inner.config.public_url.as_str())
            .finish_non_exhaustive()
    }
}

fn random_token() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(crate::signature::hex(&bytes))
}

fn message_id() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{nanos:020}-{:016x}", fastrand::u64(..))
}

/// The media type of a `Content-Type` value, lower-cased, without parameters.
fn media_type(ct: &str) -> String {
    ct.split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

fn http_url(name: &str, value: Option<&String>) -> Result<String, HubResponse> {
    let value = value
        .map(|v| v.trim())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| HubResponse::new(400, format!("missing {name}")))?;
    let url = Url::parse(value)
        .map_err(|e| HubResponse::new(400, format!("{name} `{value}` is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none_or(str::is_empty) {
        return Err(HubResponse::new(
            400,
            format!("{name} `{value}` is not an absolute http(s) URL"),
        ));
    }
    Ok(value.to_owned())
}

/// CN 1.0.1 3: a change notification is a `<urlset>` whose `<rs:md>` has
/// `capability="change-notification"`. Read leniently (upstream quirks pass), to the end, so
/// malformed XML is refused rather than relayed.
fn check_change_notification(body: &[u8], max_bytes: u64) -> Result<(), String> {
    let mut opts = ReadOptions::new(Mode::Lenient, "published payload");
    opts.max_bytes = max_bytes;
    let mut reader = SyncReader::open(body, opts).map_err(|e| e.to_string())?;
    if reader.header().root != Root::Urlset {
        return Err("the root element is not <urlset> (CN 1.0.1 3)".into());
    }
    if reader.header().capability() != Some(&Capability::ChangeNotification) {
        return Err("<rs:md> lacks capability=\"change-notification\" (CN 1.0.1 3)".to_owned());
    }
    while reader.next_entry().map_err(|e| e.to_string())?.is_some() {}
    Ok(())
}

enum Intent {
    Subscribe,
    Unsubscribe,
}

impl Hub {
    /// Opens the hub on `objects`: loads the subscriptions still live and their undelivered
    /// messages (deleting expired subscriptions and orphaned objects), and resumes delivery
    /// in order. Must run inside a Tokio runtime (it spawns the workers).
    pub async fn open(objects: Arc<dyn ObjectStore>, config: HubConfig) -> Result<Hub, Error> {
        config.validate()?;
        // Through the address guard of rsagg-fetch (unless private targets are allowed):
        // every address a name resolves to is judged at connect time, no proxy connects on
        // the guard's behalf, and no redirect is followed — a callback or topic answering a
        // redirect is an answer, not a hop (verification must reach the callback given,
        // WebSub 5.3; a delivery is accepted only with a 2xx, WebSub 7), so a redirect
        // cannot lead the hub to an address the guard did not judge. IP literals skip DNS
        // and are checked before each request (`crate::check_target`).
        let client = rsagg_fetch::guard::client_builder(config.allow_private_callbacks)
            .timeout(config.request_timeout)
            .user_agent(concat!("rsagg-hub/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(Error::Client)?;
        let inner = Arc::new(Inner {
            objects,
            outbound: Semaphore::new(config.max_concurrency),
            pending: Arc::new(Semaphore::new(config.max_pending)),
            config,
            client,
            state: Mutex::new(State::default()),
            publish_lock: tokio::sync::Mutex::new(()),
            cancel: CancellationToken::new(),
            delivered: AtomicU64::new(0),
            failed_attempts: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            settled: AtomicU64::new(0),
        });
        restore(&inner).await?;
        tokio::spawn(delivery::sweeper(inner.clone()));
        Ok(Hub { inner })
    }

    /// The configuration the hub runs with.
    pub fn config(&self) -> &HubConfig {
        &self.inner.config
    }

    /// Answers one request at the hub URL (all WebSub and CN 1.0.1 requests are POSTs there):
    ///
    /// - form `hub.mode=subscribe|unsubscribe` → 202, then verification of intent (WebSub
    ///   5.1, 5.3); a topic outside the allowlist gets a denial (WebSub 5.2);
    /// - form `hub.mode=publish` with `hub.url` (or `hub.topic`) → 202, then the topic is
    ///   fetched and its body distributed (the de-facto WebSub publish form, WebSub 6);
    /// - `application/xml` with `Link` rel `self` and `hub` → 200 once the payload is
    ///   queued for every live subscriber of the topic (CN 1.0.1 4.1);
    /// - 400 for malformed requests, 403 for topics outside the allowlist, 413 for bodies
    ///   over the caps, 415 for other content types, 503 when too much is pending.
    pub async fn handle(&self, request: HubRequest) -> HubResponse {
        let ct = request.content_type.as_deref().map(media_type);
        match ct.as_deref() {
            Some("application/x-www-form-urlencoded") => self.handle_form(&request.body),
            Some("application/xml") => self.publish_payload(request).await,
            _ if !request.links.is_empty() => HubResponse::new(
                415,
                "a change notification must be sent as Content-Type: application/xml \
                 (CN 1.0.1 4.1)",
            ),
            _ => HubResponse::new(
                415,
                "expected an application/x-www-form-urlencoded WebSub request or an \
                 application/xml change notification",
            ),
        }
    }

    fn handle_form(&self, body: &[u8]) -> HubResponse {
        if body.len() > self.inner.config.max_form_bytes {
            return HubResponse::new(413, "form body too large");
        }
        let mut params: HashMap<String, String> = HashMap::new();
        for (k, v) in url::form_urlencoded::parse(body) {
            params
                .entry(k.into_owned())
                .or_insert_with(|| v.into_owned());
        }
        match params.get("hub.mode").map(String::as_str) {
            Some("subscribe") => self.subscription_request(&params, Intent::Subscribe),
            Some("unsubscribe") => self.subscription_request(&params, Intent::Unsubscribe),
            Some("publish") => self.publish_form(&params),
            Some(other) => HubResponse::new(400, format!("unknown hub.mode `{other}`")),
            None => HubResponse::new(400, "missing hub.mode"),
        }
    }

    /// WebSub 5.1: validate the request, answer 202, verify asynchronously.
    ///
    /// `hub.secret` is accepted over any scheme: the hub cannot tell whether a proxy in front
    /// of it terminated TLS. WebSub 5.1.1 says subscribers should send it only over HTTPS;
    /// deploy the hub behind HTTPS when secrets are used.
    ///
    /// A callback the address guard refuses (see [`Hub::refuse_private`]) gets 403 at once,
    /// for unsubscribing too: its verification would go to the same address.
    fn subscription_request(
        &self,
        params: &HashMap<String, String>,
        intent: Intent,
    ) -> HubResponse {
        let callback = match http_url("hub.callback", params.get("hub.callback")) {
            Ok(u) => u,
            Err(r) => return r,
        };
        if let Err(r) = self.refuse_private("hub.callback", &callback) {
            return r;
        }
        let topic = match http_url("hub.topic", params.get("hub.topic")) {
            Ok(u) => u,
            Err(r) => return r,
        };
        let lease = match params.get("hub.lease_seconds").map(|s| s.trim()) {
            None | Some("") => None,
            Some(s) => match s.parse::<u64>() {
                Ok(n) => Some(n),
                Err(_) => {
                    return HubResponse::new(400, "hub.lease_seconds is not a whole number");
                }
            },
        };
        let secret = params.get("hub.secret").filter(|s| !s.is_empty()).cloned();
        // WebSub 5.1.1: "This parameter MUST be less than 200 bytes in length."
        if secret.as_ref().is_some_and(|s| s.len() >= 200) {
            return HubResponse::new(400, "hub.secret must be less than 200 bytes (WebSub 5.1.1)");
        }
        let inner = self.inner.clone();
        let allowed = inner.config.allows(&topic);
        let work = async move {
            match intent {
                Intent::Subscribe if !allowed => deny(&inner, &topic, &callback).await,
                Intent::Subscribe => {
                    let lease = inner.config.grant_lease(lease);
                    verify_intent(&inner, "subscribe", &topic, &callback, Some(lease), secret)
                        .await;
                }
                Intent::Unsubscribe => {
                    verify_intent(&inner, "unsubscribe", &topic, &callback, None, None).await;
                }
            }
            inner.settled.fetch_add(1, Ordering::Relaxed);
        };
        match self.spawn_pending(work) {
            Ok(()) => HubResponse::new(202, "accepted; verification of intent follows"),
            Err(r) => r,
        }
    }

    /// The WebSub publish form (`hub.mode=publish`, `hub.url` or `hub.topic`): 202, then the
    /// topic is fetched and its body and `Content-Type` distributed.
    fn publish_form(&self, params: &HashMap<String, String>) -> HubResponse {
        let given = params.get("hub.url").or_else(|| params.get("hub.topic"));
        let topic = match http_url("hub.url", given) {
            Ok(u) => u,
            Err(r) => return r,
        };
        if !self.inner.config.allows(&topic) {
            return forbidden(&topic);
        }
        if let Err(r) = self.refuse_private("hub.url", &topic) {
            return r;
        }
        let inner = self.inner.clone();
        match self.spawn_pending(async move { fetch_and_distribute(&inner, &topic).await }) {
            Ok(()) => HubResponse::new(202, "accepted; the topic will be fetched"),
            Err(r) => r,
        }
    }

    /// CN 1.0.1 4.1: the payload with `Link` rel `self` (topic) and `hub`; 200 once queued.
    async fn publish_payload(&self, request: HubRequest) -> HubResponse {
        let config = &self.inner.config;
        let links = link::parse(&request.links, &config.public_url);
        let (Some(topic), Some(hub)) = (link::find(&links, "self"), link::find(&links, "hub"))
        else {
            return HubResponse::new(
                400,
                "the Link header must carry rel=\"self\" (the topic) and rel=\"hub\" \
                 (CN 1.0.1 4.1)",
            );
        };
        let topic = match http_url("the rel=\"self\" link", Some(&topic.to_owned())) {
            Ok(t) => t,
            Err(r) => return r,
        };
        let hub_ok = Url::parse(hub).is_ok_and(|h| h == config.public_url);
        if config.check_hub_link && !hub_ok {
            return HubResponse::new(
                400,
                format!(
                    "rel=\"hub\" is `{hub}`, but this hub is `{}` (CN 1.0.1 4.1)",
                    config.public_url
                ),
            );
        }
        if !config.allows(&topic) {
            return forbidden(&topic);
        }
        if request.body.is_empty() {
            return HubResponse::new(400, "empty payload");
        }
        if request.body.len() > config.max_publish_bytes {
            return HubResponse::new(413, "payload too large");
        }
        if config.check_payload {
            let body = request.body.clone();
            let max = u64::try_from(config.max_publish_bytes).unwrap_or(u64::MAX);
            let checked =
                tokio::task::spawn_blocking(move || check_change_notification(&body, max)).await;
            match checked {
                Ok(Ok(())) => {}
                Ok(Err(why)) => {
                    return HubResponse::new(400, format!("not a change notification: {why}"));
                }
                Err(e) => return HubResponse::new(500, format!("payload check failed: {e}")),
            }
        }
        match enqueue(&self.inner, &topic, "application/xml", request.body).await {
            Ok(n) => HubResponse::new(200, format!("accepted for {n} subscriber(s)")),
            Err(e) => {
                tracing::error!(topic = %topic, error = %e, "could not queue a publication");
                HubResponse::new(500, format!("could not queue the payload: {e}"))
            }
        }
    }

    /// The first half of the address guard, when a request comes in: a URL the hub would
    /// call (a callback, or a topic to fetch) whose host is an IP literal that is not public
    /// or a `localhost` name is refused with 403 and the reason (WebSub 5.1.2: "an
    /// appropriate HTTP error response code (4xx or 5xx) … a description of the error in the
    /// response body as plain text"). Host names are judged by the second half, the
    /// resolver, when the request is made. Unless [`HubConfig::allow_private_callbacks`].
    fn refuse_private(&self, name: &str, value: &str) -> Result<(), HubResponse> {
        if self.inner.config.allow_private_callbacks {
            return Ok(());
        }
        let Ok(url) = Url::parse(value) else {
            // `http_url` parsed it already.
            return Ok(());
        };
        match crate::check_target(&url, false) {
            Ok(()) => Ok(()),
            Err(Error::Refused { reason, .. }) => {
                self.inner.refused.fetch_add(1, Ordering::Relaxed);
                Err(HubResponse::new(
                    403,
                    format!(
                        "{name} `{value}` refused: {reason}; this hub sends nothing to private, \
                     loopback, link-local or unspecified addresses (WebSub 5.1.2; \
                     `rsagg hub --allow-private-callbacks` allows them)"
                    ),
                ))
            }
            Err(e) => Err(HubResponse::new(400, format!("{name} `{value}`: {e}"))),
        }
    }

    fn spawn_pending<F>(&self, work: F) -> Result<(), HubResponse>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let permit = self
            .inner
            .pending
            .clone()
            .try_acquire_owned()
            .map_err(|_| HubResponse::new(503, "too many requests pending; retry later"))?;
        let cancel = self.inner.cancel.clone();
        tokio::spawn(async move {
            let _permit = permit;
            tokio::select! {
                () = cancel.cancelled() => {}
                () = work => {}
            }
        });
        Ok(())
    }

    /// Whether the store answers (for `/readyz`).
    pub async fn ready(&self) -> Result<(), Error> {
        let prefix = Path::from(SUBSCRIPTIONS.trim_end_matches('/'));
        match self.inner.objects.list(Some(&prefix)).next().await {
            None | Some(Ok(_)) => Ok(()),
            Some(Err(e)) => Err(Error::object_store(prefix, e)),
        }
    }

    /// The live subscriptions, sorted by topic and callback.
    pub fn subscriptions(&self) -> Vec<SubscriptionInfo> {
        let now = unix_now();
        let st = self.inner.lock();
        let mut out: Vec<SubscriptionInfo> = st
            .subs
            .iter()
            .filter(|(_, s)| s.record.expires_at > now)
            .map(|(id, s)| SubscriptionInfo {
                id: id.clone(),
                topic: s.record.topic.clone(),
                callback: s.record.callback.clone(),
                lease_seconds: s.record.lease_seconds,
                expires_at: s.record.expires_at,
                signed: s.record.secret.is_some(),
                queued: s.queue.len(),
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, &a.callback).cmp(&(&b.topic, &b.callback)));
        out
    }

    /// Counters and sizes.
    pub fn stats(&self) -> HubStats {
        let st = self.inner.lock();
        HubStats {
            delivered: self.inner.delivered.load(Ordering::Relaxed),
            failed_attempts: self.inner.failed_attempts.load(Ordering::Relaxed),
            dropped: self.inner.dropped.load(Ordering::Relaxed),
            refused: self.inner.refused.load(Ordering::Relaxed),
            settled: self.inner.settled.load(Ordering::Relaxed),
            subscriptions: st.subs.len(),
            queued: st.subs.values().map(|s| s.queue.len()).sum(),
        }
    }

    /// Stops verifications, fetches, deliveries and the sweeper. Undelivered messages stay in
    /// the store for the next start (a message being sent may be sent again: delivery is at
    /// least once).
    pub fn shutdown(&self) {
        self.inner.cancel.cancel();
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.inner.cancel.cancel();
    }
}

fn forbidden(topic: &str) -> HubResponse {
    HubResponse::new(
        403,
        format!("topic `{topic}` is not among the publishers this hub relays for"),
    )
}

/// GET of `url` with at most `limit` body bytes read, under the outbound bound, through
/// the address guard ([`Error::Refused`] when it refuses; nothing is sent then).
pub(crate) async fn get_bounded(
    inner: &Inner,
    url: Url,
    limit: usize,
) -> Result<(reqwest::StatusCode, reqwest::header::HeaderMap, Bytes), Error> {
    crate::check_target(&url, inner.config.allow_private_callbacks)
        .map_err(|e| inner.count_refused(e))?;
    let failed = |message: String| Error::Outgoing {
        url: url.to_string(),
        message,
    };
    let _permit = inner
        .outbound
        .acquire()
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut response = inner
        .client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| inner.count_refused(crate::request_error(url.as_str(), &e)))?;
    let status = response.status();
    let headers = response.headers().clone();
    let limit64 = u64::try_from(limit).unwrap_or(u64::MAX);
    if response.content_length().is_some_and(|n| n > limit64) {
        return Err(failed(format!("body larger than {limit} bytes")));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| failed(e.to_string()))? {
        if body.len() + chunk.len() > limit {
            return Err(failed(format!("body larger than {limit} bytes")));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, headers, Bytes::from(body)))
}

/// WebSub 5.3: GET the callback with `hub.mode`, `hub.topic`, `hub.challenge` and (for a
/// subscription) `hub.lease_seconds`; only a 2xx answer whose body is exactly the challenge
/// confirms (5.3.1). Then the subscription is stored (or renewed) or removed.
///
/// A callback whose name resolves to an address the guard refuses is not asked: the intent
/// is not confirmed, so no subscription is stored and nothing will be delivered there (nor
/// is a denial sent: it would go to the same address).
async fn verify_intent(
    inner: &Arc<Inner>,
    mode: &str,
    topic: &str,
    callback: &str,
    lease: Option<u64>,
    secret: Option<String>,
) {
    let Some(challenge) = random_token() else {
        tracing::error!("no randomness for a challenge; verification of intent skipped");
        return;
    };
    let Ok(mut url) = Url::parse(callback) else {
        return;
    };
    {
        let mut q = url.query_pairs_mut();
        q.append_pair("hub.mode", mode)
            .append_pair("hub.topic", topic)
            .append_pair("hub.challenge", &challenge);
        if let Some(lease) = lease {
            q.append_pair("hub.lease_seconds", &lease.to_string());
        }
    }
    let confirmed = match get_bounded(inner, url, inner.config.max_challenge_bytes).await {
        Ok((status, _, body)) => status.is_success() && body == challenge.as_bytes(),
        Err(e @ Error::Refused { .. }) => {
            tracing::warn!(%callback, %topic, mode, error = %e, "verification of intent refused: callback not allowed");
            false
        }
        Err(e) => {
            tracing::info!(%callback, error = %e, "verification of intent failed");
            false
        }
    };
    if !confirmed {
        tracing::info!(%callback, %topic, mode, "intent not confirmed");
        return;
    }
    let id = subscription_id(topic, callback);
    match lease {
        Some(lease) => {
            let now = unix_now();
            let record = SubscriptionRecord {
                topic: topic.to_owned(),
                callback: callback.to_owned(),
                secret,
                lease_seconds: lease,
                expires_at: now.saturating_add(i64::try_from(lease).unwrap_or(i64::MAX)),
                verified_at: now,
            };
            if let Err(e) = put_json(&*inner.objects, &subscription_path(&id), &record).await {
                tracing::error!(%callback, error = %e, "could not store a subscription");
                return;
            }
            tracing::info!(%callback, %topic, lease, "subscribed");
            let mut st = inner.lock();
            match st.subs.get_mut(&id) {
                Some(sub) => sub.record = record,
                None => {
                    st.subs.insert(id, Sub::new(record));
                }
            }
        }
        None => {
            tracing::info!(%callback, %topic, "unsubscribed");
            remove_subscription(inner, &id, "unsubscribed").await;
        }
    }
}

/// WebSub 5.2: tell the callback its subscription is refused (`hub.mode=denied`).
async fn deny(inner: &Arc<Inner>, topic: &str, callback: &str) {
    let Ok(mut url) = Url::parse(callback) else {
        return;
    };
    url.query_pairs_mut()
        .append_pair("hub.mode", "denied")
        .append_pair("hub.topic", topic)
        .append_pair("hub.reason", "topic not relayed by this hub");
    if let Err(e) = get_bounded(inner, url, inner.config.max_challenge_bytes).await {
        tracing::info!(%callback, error = %e, "denial not received");
    }
}

/// WebSub publish form: GET the topic and distribute its body with its `Content-Type`.
async fn fetch_and_distribute(inner: &Arc<Inner>, topic: &str) {
    let Ok(url) = Url::parse(topic) else {
        return;
    };
    let (status, headers, body) =
        match get_bounded(inner, url, inner.config.max_publish_bytes).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(%topic, error = %e, "topic fetch failed; nothing distributed");
                return;
            }
        };
    if !status.is_success() {
        tracing::warn!(%topic, %status, "topic fetch answered an error; nothing distributed");
        return;
    }
    let content_type = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    let links: Vec<String> = headers
        .get_all(reqwest::header::LINK)
        .iter()
        .filter_map(|v| v.to_str().ok().map(str::to_owned))
        .collect();
    let links = match Url::parse(topic) {
        Ok(base) => link::parse(&links, &base),
        Err(_) => Vec::new(),
    };
    if link::find(&links, "self").is_none() || link::find(&links, "hub").is_none() {
        // CN 1.0.1 4.1 requires both on the topic URI; relay anyway, but say so.
        tracing::warn!(%topic, "topic answered without Link rel=\"self\" and rel=\"hub\"");
    }
    if let Err(e) = enqueue(inner, topic, &content_type, body).await {
        tracing::error!(%topic, error = %e, "could not queue a publication");
    }
}

/// Stores `body` once and queues it for every live subscriber of `topic`; returns how many.
/// The queue records are written before the messages enter the in-memory queues, so what a
/// worker sends is always in the store (and survives a restart).
pub(crate) async fn enqueue(
    inner: &Arc<Inner>,
    topic: &str,
    content_type: &str,
    body: Bytes,
) -> Result<usize, Error> {
    let _serial = inner.publish_lock.lock().await;
    let now = unix_now();
    // Subscriptions keep the topic as the subscriber wrote it (it is echoed in verification
    // requests); a publisher's topic comes resolved from its Link header. Compared as URLs.
    let topic_url = Url::parse(topic).ok();
    let same_topic = |t: &str| match (&topic_url, Url::parse(t)) {
        (Some(a), Ok(b)) => *a == b,
        _ => t == topic,
    };
    let targets: Vec<(String, u64)> = {
        let mut st = inner.lock();
        st.subs
            .iter_mut()
            .filter(|(_, s)| same_topic(&s.record.topic) && s.record.expires_at > now)
            .map(|(id, s)| {
                let seq = s.next_seq;
                s.next_seq += 1;
                (id.clone(), seq)
            })
            .collect()
    };
    if targets.is_empty() {
        return Ok(0);
    }
    let message = message_id();
    put(&*inner.objects, &payload_path(&message), body).await?;
    let record = |seq| QueueRecord {
        seq,
        topic: topic.to_owned(),
        content_type: content_type.to_owned(),
        payload: message.clone(),
        queued_at: now,
    };
    let written: Vec<(String, u64, Result<(), rsagg_store::Error>)> =
        futures::stream::iter(targets)
            .map(|(id, seq)| {
                let rec = record(seq);
                async move {
                    let r = put_json(&*inner.objects, &queue_path(&id, seq), &rec).await;
                    (id, seq, r)
                }
            })
            .buffered(16)
            .collect()
            .await;
    let mut first_error = None;
    let mut queued = 0;
    let mut dropped = Vec::new();
    let mut orphans = Vec::new();
    {
        let mut st = inner.lock();
        for (id, seq, result) in written {
            if let Err(e) = result {
                first_error.get_or_insert(e);
                continue;
            }
            let State { subs, refs } = &mut *st;
            let Some(sub) = subs.get_mut(&id) else {
                orphans.push(queue_path(&id, seq));
                continue;
            };
            sub.queue.push_back(Queued {
                seq,
                topic: topic.to_owned(),
                content_type: content_type.to_owned(),
                payload: message.clone(),
            });
            *refs.entry(message.clone()).or_insert(0) += 1;
            queued += 1;
            while sub.queue.len() > inner.config.max_queue {
                let Some(pos) = sub.queue.iter().position(|q| Some(q.seq) != sub.in_flight) else {
                    break;
                };
                if let Some(old) = sub.queue.remove(pos) {
                    dropped.push((id.clone(), old));
                }
            }
            delivery::ensure_worker(inner, &mut st, &id);
        }
    }
    for path in orphans {
        delete_quietly(inner, &path).await;
    }
    for (id, old) in dropped {
        let n = inner.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            subscriber = %id, seq = old.seq, dropped_total = n,
            "subscriber queue full: dropped its oldest undelivered message"
        );
        delete_quietly(inner, &queue_path(&id, old.seq)).await;
        release_payload(inner, &old.payload).await;
    }
    if queued == 0 {
        delete_quietly(inner, &payload_path(&message)).await;
    }
    match first_error {
        Some(e) => Err(e.into()),
        None => Ok(queued),
    }
}

async fn list(inner: &Inner, prefix: &str) -> Result<Vec<Path>, Error> {
    let p = Path::from(prefix.trim_end_matches('/'));
    inner
        .objects
        .list(Some(&p))
        .map_ok(|m| m.location)
        .try_collect()
        .await
        .map_err(|e| Error::object_store(prefix, e))
}

/// Loads the persisted state: live subscriptions, their queues in sequence order, and the
/// payload reference counts; deletes expired subscriptions, queues without a subscription
/// and payloads no queue entry names. Then starts a worker per non-empty queue.
async fn restore(inner: &Arc<Inner>) -> Result<(), Error> {
    let now = unix_now();
    let mut subs: HashMap<String, Sub> = HashMap::new();
    for path in list(inner, SUBSCRIPTIONS).await? {
        let Some(id) = path
            .filename()
            .and_then(|f| f.strip_suffix(".json"))
            .map(str::to_owned)
        else {
            continue;
        };
        let record: Option<SubscriptionRecord> =
            match get_json(&*inner.objects, path.as_ref()).await {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(object = %path, error = %e, "unreadable subscription skipped");
                    continue;
                }
            };
        match record {
            Some(r) if r.expires_at > now => {
                subs.insert(id, Sub::new(r));
            }
            Some(_) => delete_quietly(inner, path.as_ref()).await,
            None => {}
        }
    }
    let mut entries: Vec<(String, u64, Path)> = Vec::new();
    for path in list(inner, QUEUE).await? {
        let parts: Vec<_> = path.parts().collect();
        let parsed = match parts.as_slice() {
            [_, _, id, file] => file
                .as_ref()
                .strip_suffix(".json")
                .and_then(|s| s.parse::<u64>().ok())
                .map(|seq| (id.as_ref().to_owned(), seq)),
            _ => None,
        };
        match parsed {
            Some((id, seq)) if subs.contains_key(&id) => entries.push((id, seq, path)),
            _ => delete_quietly(inner, path.as_ref()).await,
        }
    }
    entries.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut refs: HashMap<String, usize> = HashMap::new();
    for (id, seq, path) in entries {
        let record: Option<QueueRecord> = match get_json(&*inner.objects, path.as_ref()).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(object = %path, error = %e, "unreadable queue entry dropped");
                delete_quietly(inner, path.as_ref()).await;
                continue;
            }
        };
        let (Some(record), Some(sub)) = (record, subs.get_mut(&id)) else {
            continue;
        };
        *refs.entry(record.payload.clone()).or_insert(0) += 1;
        sub.next_seq = sub.next_seq.max(seq + 1);
        sub.queue.push_back(Queued {
            seq,
            topic: record.topic,
            content_type: record.content_type,
            payload: record.payload,
        });
    }
    for path in list(inner, PAYLOADS).await? {
        if path.filename().is_none_or(|f| !refs.contains_key(f)) {
            delete_quietly(inner, path.as_ref()).await;
        }
    }
    let queued: usize = subs.values().map(|s| s.queue.len()).sum();
    tracing::info!(subscriptions = subs.len(), queued, "hub state restored");
    let ids: Vec<String> = subs.keys().cloned().collect();
    let mut st = inner.lock();
    st.subs = subs;
    st.refs = refs;
    for id in ids {
        delivery::ensure_worker(inner, &mut st, &id);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A listener on 127.0.0.1 that counts the connections made to it and answers each
    /// with an empty 200.
    async fn tripwire() -> (u16, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                h.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let _ = conn
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            }
        });
        (port, hits)
    }

    async fn hub(allow_private_callbacks: bool) -> Hub {
        let mut config = HubConfig::new(Url::parse("http://hub.test/").unwrap());
        config.allow_private_callbacks = allow_private_callbacks;
        Hub::open(Arc::new(object_store::memory::InMemory::new()), config)
            .await
            .unwrap()
    }

    /// The resolver half of the guard in the hub's own client: a name that resolves to a
    /// loopback address is refused when the connection would be made, so a public-looking
    /// name pointing there fares the same. `localhost` stands in for such a name here:
    /// `get_bounded` refuses it before resolving (RFC 6761), so the client is called
    /// directly.
    #[tokio::test]
    async fn the_hubs_client_refuses_names_resolving_to_loopback() {
        let (port, hits) = tripwire().await;
        let guarded = hub(false).await;
        let by_name = format!("http://localhost:{port}/cb");
        let err = guarded.inner.client.get(&by_name).send().await.unwrap_err();
        match crate::request_error(&by_name, &err) {
            Error::Refused { reason, .. } => {
                assert!(reason.contains("localhost resolves to"), "{reason}");
            }
            other => panic!("not a refusal: {other}"),
        }
        // Through `get_bounded` (what verification, denial and topic fetch use): IP literals
        // and `localhost` are refused before anything is resolved, and counted.
        for u in [by_name.clone(), format!("http://127.0.0.1:{port}/cb")] {
            let e = get_bounded(&guarded.inner, Url::parse(&u).unwrap(), 64)
                .await
                .unwrap_err();
            assert!(matches!(e, Error::Refused { .. }), "{u}: {e}");
        }
        assert_eq!(guarded.stats().refused, 2);
        assert_eq!(
            hits.load(Ordering::SeqCst),
            0,
            "nothing reached the listener"
        );

        // With private callbacks allowed, the same target is reached.
        let open = hub(true).await;
        let url = Url::parse(&format!("http://127.0.0.1:{port}/cb")).unwrap();
        let (status, _, _) = get_bounded(&open.inner, url, 64).await.unwrap();
        assert!(status.is_success());
        assert_eq!(hits.load(Ordering::SeqCst), 1);
        assert_eq!(open.stats().refused, 0);
    }

    #[test]
    fn the_guard_is_on_by_default() {
        let c = HubConfig::new(Url::parse("http://hub.test/").unwrap());
        assert!(!c.allow_private_callbacks);
    }
}
