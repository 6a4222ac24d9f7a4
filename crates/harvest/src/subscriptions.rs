//! The push subscriptions of one pipeline (Change Notification 1.0.1 section 4 as a
//! Destination, WebSub 5.1): which channel of which upstream rsagg subscribes to, renewing
//! and retrying them, and their persistence in `push/{upstream}.json`.
//!
//! [`Subscriptions`] owns what `run --follow --listen` keeps about each upstream's channels
//! besides the [`Inbox`] (which answers the callbacks): the subscription records (secrets,
//! leases) and the `until` of the last payload applied on each channel (CN 1.0.1 3: the
//! continuity the next payload is judged by). The follower (`rsagg-pipeline`) only decides
//! when to call it; it exists only with push intake, so none of its methods has to ask
//! whether there is one.
//!
//! Why the records are persisted: a hub keeps delivering, signed with the secret rsagg
//! gave, after the follower restarts; the restarted follower reads the secrets back
//! ([`Subscriptions::restore`]) and keeps verifying those deliveries. A secret is saved
//! before the request carrying it goes out, so a hub never holds a secret rsagg forgot.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use object_store::ObjectStore;
use rsagg_config::{Pipeline, UpstreamConfig};
use rsagg_fetch::CapabilitySet;
use rsagg_layout::paths::callback_url;
use rsagg_model::W3cDateTime;
use rsagg_store::documents::{get_json, put_json};
use rsagg_websub::subscriber::{SubscriptionRecord, unix_millis};
use serde::{Deserialize, Serialize};
use url::Url;

use crate::push::Inbox;

/// What the follower keeps per upstream in the store (`push/{upstream}.json`), so a
/// restarted follower still verifies deliveries signed with the secrets it gave and keeps
/// the continuity of each channel.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PushRecord {
    /// The subscriptions (with their secrets).
    #[serde(default)]
    pub subscriptions: Vec<SubscriptionRecord>,
    /// The `until` of the last payload applied, per topic.
    #[serde(default)]
    pub until: BTreeMap<String, W3cDateTime>,
}

/// The object holding [`PushRecord`] of `upstream`.
pub fn record_path(upstream: &str) -> String {
    format!("push/{upstream}.json")
}

/// The push subscriptions of one pipeline and their persistence (see the module docs).
/// Upstreams are addressed by their index in the pipeline's `[[upstream]]` list.
#[derive(Debug)]
pub struct Subscriptions {
    inbox: Arc<Inbox>,
    objects: Arc<dyn ObjectStore>,
    /// `collection.base_url`: the callbacks are `{base_url}websub/{upstream}`.
    base_url: Url,
    upstreams: Vec<Arc<UpstreamConfig>>,
    /// Per upstream: `until` of the last payload applied, per topic (CN 1.0.1 3).
    until: Vec<BTreeMap<String, W3cDateTime>>,
}

impl Subscriptions {
    /// The subscriptions of `p`'s upstreams behind `inbox`, persisted in `objects` (the
    /// collection's store). Empty until [`Subscriptions::restore`].
    pub fn new(p: &Pipeline, inbox: Arc<Inbox>, objects: Arc<dyn ObjectStore>) -> Subscriptions {
        let upstreams: Vec<Arc<UpstreamConfig>> = p
            .config
            .upstreams
            .iter()
            .map(|u| Arc::new(u.clone()))
            .collect();
        Subscriptions {
            inbox,
            objects,
            base_url: p.base_url.clone(),
            until: vec![BTreeMap::new(); upstreams.len()],
            upstreams,
        }
    }

    /// The push intake these subscriptions feed.
    pub fn inbox(&self) -> &Arc<Inbox> {
        &self.inbox
    }

    /// `until` of the last payload applied on `topic` of upstream `i`.
    pub fn until(&self, i: usize, topic: &str) -> Option<W3cDateTime> {
        self.until.get(i)?.get(topic).copied()
    }

    /// Moves `until` of `topic` of upstream `i` on to `t` (never back: a payload applied
    /// late does not undo a later one's).
    pub fn advance(&mut self, i: usize, topic: String, t: W3cDateTime) {
        let Some(until) = self.until.get_mut(i) else {
            return;
        };
        if until.get(&topic).is_none_or(|p| t.cmp_instant(p).is_gt()) {
            until.insert(topic, t);
        }
    }

    /// When a subscription is next due for a renewal or retry (Unix milliseconds).
    pub fn next_due(&self) -> Option<i64> {
        self.inbox.subscriber().next_due()
    }

    /// Subscribes upstream `i` to the channels its `sets` advertise that it is not (being)
    /// subscribed to, and, when its discovery succeeded this time (`discovered`), drops the
    /// subscriptions of channels no longer advertised (a failed discovery keeps what is
    /// held).
    pub async fn subscribe(&self, i: usize, sets: &[CapabilitySet], discovered: bool) {
        let Some(cfg) = self.upstreams.get(i) else {
            return;
        };
        if !cfg.push {
            return;
        }
        let name = &cfg.name;
        let subscriber = self.inbox.subscriber();
        let channels: Vec<_> = sets.iter().filter_map(|s| s.notification()).collect();
        let now = unix_millis();
        for ch in &channels {
            let held = subscriber.record(name, ch.topic.as_str()).is_some_and(|r| {
                r.hub == ch.hub.as_str() && !r.unsubscribing && (r.pending || r.active(now))
            });
            if !held {
                self.request(i, &ch.topic, &ch.hub).await;
            }
        }
        if !discovered {
            return;
        }
        let advertised: HashSet<String> = channels.iter().map(|c| c.topic.to_string()).collect();
        for r in subscriber.records(name) {
            if !r.unsubscribing && !advertised.contains(&r.topic) {
                tracing::info!(upstream = %name, topic = %r.topic, "channel no longer advertised: unsubscribing");
                if let Err(e) = subscriber.unsubscribe(name, &r.topic).await {
                    tracing::warn!(upstream = %name, error = %rsagg_model::ErrorChain(&e), "unsubscribe failed (the lease expires anyway)");
                }
            }
        }
    }

    /// Requests (or renews) the subscription of upstream `i` to `topic` at `hub`; the
    /// record (with its secret) is saved before the request goes out.
    async fn request(&self, i: usize, topic: &Url, hub: &Url) {
        let cfg = &self.upstreams[i];
        if let Err(why) = hub_allowed(hub, cfg.allow_private).await {
            tracing::warn!(upstream = %cfg.name, %hub, "not subscribing: {why}");
            return;
        }
        let Some(callback) = callback_url(&self.base_url, &cfg.name) else {
            return;
        };
        let subscriber = self.inbox.subscriber();
        let record = match subscriber.prepare(
            &cfg.name,
            topic,
            hub,
            &callback,
            cfg.push_lease(),
            unix_millis(),
        ) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(upstream = %cfg.name, error = %rsagg_model::ErrorChain(&e), "cannot prepare a subscription");
                return;
            }
        };
        self.save(i).await;
        match subscriber.request(&record).await {
            Ok(()) => {
                tracing::info!(upstream = %cfg.name, %topic, %hub, %callback, "subscription requested");
            }
            Err(e) => {
                tracing::warn!(upstream = %cfg.name, %topic, error = %rsagg_model::ErrorChain(&e), "subscription request failed; retried later")
            }
        }
    }

    /// Renews (or retries) the subscriptions that are due; `sets[i]`: what upstream `i`
    /// advertised at its last successful discovery (the hub named there now is asked, else
    /// the one subscribed at).
    pub async fn renew(&self, sets: &[&[CapabilitySet]]) {
        let subscriber = self.inbox.subscriber();
        let now = unix_millis();
        for (key, topic) in subscriber.due(now) {
            // Deferred first: whatever happens below (a refused hub, an upstream gone from
            // the config), this record is not due again before its backoff.
            subscriber.defer(&key, &topic, now);
            let Some(i) = self.upstreams.iter().position(|u| u.name == key) else {
                continue;
            };
            let Ok(topic_url) = Url::parse(&topic) else {
                continue;
            };
            let hub = sets
                .get(i)
                .into_iter()
                .flat_map(|s| s.iter())
                .filter_map(|s| s.notification())
                .find(|c| c.topic == topic_url)
                .map(|c| c.hub)
                .or_else(|| {
                    subscriber
                        .record(&key, &topic)
                        .and_then(|r| Url::parse(&r.hub).ok())
                });
            if let Some(hub) = hub {
                self.request(i, &topic_url, &hub).await;
            }
        }
    }

    /// Reads back what earlier followers left in `push/{upstream}.json`: every upstream's
    /// `until`, and the subscriptions of those with `push = true`.
    pub async fn restore(&mut self) {
        for (i, cfg) in self.upstreams.iter().enumerate() {
            let path = record_path(&cfg.name);
            match get_json::<PushRecord>(&*self.objects, &path).await {
                Ok(Some(r)) => {
                    if cfg.push {
                        self.inbox.subscriber().restore(r.subscriptions);
                    }
                    self.until[i] = r.until;
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%path, error = %rsagg_model::ErrorChain(&e), "cannot read the push record; starting afresh")
                }
            }
        }
        // What was read back is what the store holds: nothing to save.
        self.inbox.subscriber().take_changed();
    }

    /// Saves `push/{upstream}.json` of upstream `i`.
    pub async fn save(&self, i: usize) {
        let Some(cfg) = self.upstreams.get(i) else {
            return;
        };
        let record = PushRecord {
            subscriptions: self.inbox.subscriber().records(&cfg.name),
            until: self.until[i].clone(),
        };
        let path = record_path(&cfg.name);
        if let Err(e) = put_json(&*self.objects, &path, &record).await {
            tracing::warn!(%path, error = %rsagg_model::ErrorChain(&e), "cannot save the push record");
        }
    }

    /// Saves every push record when a subscription changed (e.g. verified by the hub).
    pub async fn save_changed(&self) {
        if self.inbox.subscriber().take_changed() {
            for i in 0..self.upstreams.len() {
                self.save(i).await;
            }
        }
    }
}

/// A hub of an upstream that does not allow private targets must be a public address (the
/// guard of `rsagg-fetch`): an upstream document must not make rsagg POST into the internal
/// network. This is the early check, on every address the name resolves to now, so no
/// record or secret is prepared for a refused hub; the enforcement is at connect time, in
/// the inbox's guarded subscriber (`Subscriber::guarded`), since a name may resolve
/// elsewhere by the time the request is sent (and unsubscribe requests pass only there).
pub async fn hub_allowed(hub: &Url, allow_private: bool) -> Result<(), String> {
    if !matches!(hub.scheme(), "http" | "https") {
        return Err(format!("{hub}: not an http(s) URL"));
    }
    if allow_private {
        return Ok(());
    }
    let port = hub.port_or_known_default().unwrap_or(80);
    let addrs: Vec<std::net::IpAddr> = match hub.host() {
        Some(url::Host::Ipv4(ip)) => vec![ip.into()],
        Some(url::Host::Ipv6(ip)) => vec![ip.into()],
        Some(url::Host::Domain(d)) => tokio::net::lookup_host((d, port))
            .await
            .map_err(|e| format!("{hub}: {e}"))?
            .map(|a| a.ip())
            .collect(),
        None => return Err(format!("{hub}: no host")),
    };
    match addrs.iter().find(|ip| !rsagg_fetch::guard::is_public(**ip)) {
        Some(ip) => Err(format!(
            "{hub} resolves to the non-public address {ip} (allow_private = false)"
        )),
        None if addrs.is_empty() => Err(format!("{hub}: no address")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use axum::extract::State as AxState;
    use axum::http::StatusCode;
    use object_store::ObjectStoreExt;
    use rsagg_websub::subscriber::{Answer, Verification};

    use super::*;

    /// A request the fixture hub took, and the push record the store held when it came.
    #[derive(Debug, Clone)]
    struct Heard {
        form: BTreeMap<String, String>,
        stored: Option<PushRecord>,
    }

    type HubState = (Arc<dyn ObjectStore>, Arc<Mutex<Vec<Heard>>>);

    /// A WebSub hub on 127.0.0.1:0 answering 202 to every request and keeping what it
    /// heard, with the store's push record of `museum` at that moment.
    struct Hub {
        url: Url,
        heard: Arc<Mutex<Vec<Heard>>>,
    }

    impl Hub {
        async fn start(objects: Arc<dyn ObjectStore>) -> Hub {
            let heard = Arc::new(Mutex::new(Vec::new()));
            let app = axum::Router::new()
                .route(
                    "/hub",
                    axum::routing::post(
                        |AxState((objects, heard)): AxState<HubState>, body: String| async move {
                            let form = url::form_urlencoded::parse(body.as_bytes())
                                .into_owned()
                                .collect();
                            let stored = get_json::<PushRecord>(&*objects, &record_path("museum"))
                                .await
                                .unwrap();
                            heard.lock().unwrap().push(Heard { form, stored });
                            StatusCode::ACCEPTED
                        },
                    ),
                )
                .with_state((objects, heard.clone()));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let url =
                Url::parse(&format!("http://{}/hub", listener.local_addr().unwrap())).unwrap();
            tokio::spawn(async move { axum::serve(listener, app).await });
            Hub { url, heard }
        }

        fn heard(&self) -> Vec<Heard> {
            self.heard.lock().unwrap().clone()
        }
    }

    const TOPIC: &str = "http://museum.example/change/";

    fn pipeline(allow_private: bool, push: bool) -> Pipeline {
        let text = format!(
            r#"
[collection]
name = "maps"
base_url = "https://agg.example.org/maps/"

[store]
url = "memory:///"

[[upstream]]
name = "museum"
url = "http://museum.example/.well-known/resourcesync"
allow_private = {allow_private}
push = {push}
"#
        );
        Pipeline::parse(std::path::Path::new("p.toml"), &text).unwrap()
    }

    fn memory() -> Arc<dyn ObjectStore> {
        rsagg_store::open_object_store("memory:///")
            .unwrap()
            .objects
    }

    fn subscriptions(p: &Pipeline, objects: &Arc<dyn ObjectStore>) -> Subscriptions {
        Subscriptions::new(p, Inbox::new(p).unwrap(), objects.clone())
    }

    /// A set of resources advertising `TOPIC` at `hub`.
    fn set(hub: &Url) -> CapabilitySet {
        CapabilitySet {
            url: Url::parse("http://museum.example/capabilitylist.xml").unwrap(),
            entries: Vec::new(),
            hub: Some(hub.clone()),
            topic: Some(Url::parse(TOPIC).unwrap()),
        }
    }

    async fn stored(objects: &Arc<dyn ObjectStore>) -> Option<PushRecord> {
        get_json::<PushRecord>(&**objects, &record_path("museum"))
            .await
            .unwrap()
    }

    fn t(s: &str) -> W3cDateTime {
        W3cDateTime::parse(s).unwrap().value
    }

    #[tokio::test]
    async fn private_hubs_need_allow_private() {
        let local = Url::parse("http://127.0.0.1:8080/").unwrap();
        assert!(hub_allowed(&local, false).await.is_err());
        assert!(hub_allowed(&local, true).await.is_ok());
        let v6 = Url::parse("http://[::1]/").unwrap();
        assert!(hub_allowed(&v6, false).await.is_err());
        let public = Url::parse("http://93.184.215.14/").unwrap();
        assert!(hub_allowed(&public, false).await.is_ok());
        let ftp = Url::parse("ftp://93.184.215.14/").unwrap();
        assert!(hub_allowed(&ftp, true).await.is_err());
    }

    /// WebSub 5.1: the request carries the callback `{base_url}websub/{upstream}`, the
    /// topic, the lease and a secret, and the secret is in the store before the hub hears
    /// it (a restarted follower must verify what the hub signs with it).
    #[tokio::test]
    async fn a_subscription_is_saved_with_its_secret_before_the_hub_hears_of_it() {
        let objects = memory();
        let hub = Hub::start(objects.clone()).await;
        let p = pipeline(true, true);
        let subs = subscriptions(&p, &objects);
        subs.subscribe(0, &[set(&hub.url)], true).await;
        let heard = hub.heard();
        assert_eq!(heard.len(), 1, "{heard:?}");
        let form = &heard[0].form;
        assert_eq!(form["hub.mode"], "subscribe");
        assert_eq!(form["hub.topic"], TOPIC);
        assert_eq!(
            form["hub.callback"],
            "https://agg.example.org/maps/websub/museum"
        );
        assert_eq!(form["hub.lease_seconds"], "86400");
        let secret = form
            .get("hub.secret")
            .expect("a loopback hub gets a secret");
        let at_request = heard[0].stored.as_ref().expect("saved before the request");
        assert_eq!(at_request.subscriptions.len(), 1);
        assert_eq!(at_request.subscriptions[0].secret.as_ref(), Some(secret));
        assert!(at_request.subscriptions[0].pending);
        // Held (pending): a second pass asks nothing more.
        subs.subscribe(0, &[set(&hub.url)], true).await;
        assert_eq!(hub.heard().len(), 1);
    }

    /// An upstream without `allow_private` does not make rsagg POST to a private hub, nor
    /// keep a record or secret for it; one with `push = false` never subscribes.
    #[tokio::test]
    async fn refused_hubs_and_push_off_get_no_request_and_no_record() {
        let objects = memory();
        let hub = Hub::start(objects.clone()).await;
        for p in [pipeline(false, true), pipeline(true, false)] {
            let subs = subscriptions(&p, &objects);
            subs.subscribe(0, &[set(&hub.url)], true).await;
            assert!(subs.inbox().subscriber().records("museum").is_empty());
            subs.save_changed().await;
        }
        assert!(hub.heard().is_empty());
        assert!(stored(&objects).await.is_none());
    }

    /// A restarted follower gets the secrets and each channel's `until` back; an upstream
    /// switched to `push = false` keeps its `until` but not its subscriptions.
    #[tokio::test]
    async fn records_and_until_survive_a_restart() {
        let objects = memory();
        let hub = Hub::start(objects.clone()).await;
        let p = pipeline(true, true);
        let mut subs = subscriptions(&p, &objects);
        subs.subscribe(0, &[set(&hub.url)], true).await;
        let (t1, t2) = (t("2026-01-01T00:10:00Z"), t("2026-01-01T00:20:00Z"));
        subs.advance(0, TOPIC.into(), t2);
        // Never back.
        subs.advance(0, TOPIC.into(), t1);
        assert_eq!(subs.until(0, TOPIC), Some(t2));
        subs.save(0).await;
        let secret = subs.inbox().subscriber().records("museum")[0]
            .secret
            .clone();
        assert!(secret.is_some());

        let mut again = subscriptions(&p, &objects);
        assert_eq!(again.until(0, TOPIC), None);
        again.restore().await;
        assert_eq!(again.until(0, TOPIC), Some(t2));
        let records = again.inbox().subscriber().records("museum");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].secret, secret);
        // What was read back is not saved again.
        objects
            .delete(&object_store::path::Path::from(record_path("museum")))
            .await
            .unwrap();
        again.save_changed().await;
        assert!(stored(&objects).await.is_none());
        again.save(0).await;

        let mut off = subscriptions(&pipeline(true, false), &objects);
        off.restore().await;
        assert_eq!(off.until(0, TOPIC), Some(t2));
        assert!(off.inbox().subscriber().records("museum").is_empty());
    }

    /// A verification by the hub changes the record (lease, renewal time): `save_changed`
    /// then writes it; without a change it writes nothing.
    #[tokio::test]
    async fn save_changed_saves_what_a_verification_changed() {
        let objects = memory();
        let hub = Hub::start(objects.clone()).await;
        let p = pipeline(true, true);
        let subs = subscriptions(&p, &objects);
        subs.subscribe(0, &[set(&hub.url)], true).await;
        subs.save_changed().await;
        assert!(stored(&objects).await.unwrap().subscriptions[0].pending);
        objects
            .delete(&object_store::path::Path::from(record_path("museum")))
            .await
            .unwrap();
        subs.save_changed().await;
        assert!(stored(&objects).await.is_none());

        let query = format!(
            "hub.mode=subscribe&hub.topic={}&hub.challenge=abc&hub.lease_seconds=600",
            url::form_urlencoded::byte_serialize(TOPIC.as_bytes()).collect::<String>()
        );
        assert!(Verification::from_query(&query).is_some());
        assert_eq!(
            subs.inbox().verify("museum", &query),
            Some(Answer::Confirm("abc".into()))
        );
        subs.save_changed().await;
        let r = &stored(&objects).await.unwrap().subscriptions[0];
        assert!(!r.pending);
        assert_eq!(r.lease_granted, Some(600));
        // Renewed at 80% of the lease.
        let due = subs.next_due().unwrap();
        let left = due - unix_millis();
        assert!((470_000..=480_000).contains(&left), "{left}");
    }

    /// A due subscription is requested again at the hub its Capability List names now; a
    /// record of an upstream gone from the config is deferred, not asked for.
    #[tokio::test]
    async fn renewals_go_to_the_hub_advertised_now() {
        let objects = memory();
        let (old, new) = (
            Hub::start(objects.clone()).await,
            Hub::start(objects.clone()).await,
        );
        let p = pipeline(true, true);
        let subs = subscriptions(&p, &objects);
        let record = |key: &str| SubscriptionRecord {
            key: key.into(),
            topic: TOPIC.into(),
            hub: old.url.to_string(),
            callback: "https://agg.example.org/maps/websub/museum".into(),
            secret: Some("00".repeat(32)),
            lease_requested: 86400,
            lease_granted: Some(86400),
            expires_at: Some(unix_millis() + 1000),
            pending: false,
            unsubscribing: false,
            next_attempt: unix_millis() - 1,
            failures: 0,
        };
        subs.inbox()
            .subscriber()
            .restore([record("museum"), record("gone")]);
        let sets = [set(&new.url)];
        subs.renew(&[&sets]).await;
        assert!(old.heard().is_empty());
        let heard = new.heard();
        assert_eq!(heard.len(), 1);
        assert_eq!(heard[0].form["hub.mode"], "subscribe");
        // The secret is kept only at the same hub: a new hub gets a new one.
        assert_ne!(heard[0].form["hub.secret"], "00".repeat(32));
        let now = unix_millis();
        assert!(subs.inbox().subscriber().due(now).is_empty());
        // Without a current Capability List, the hub subscribed at.
        let subs = subscriptions(&p, &objects);
        subs.inbox().subscriber().restore([record("museum")]);
        subs.renew(&[]).await;
        assert_eq!(old.heard().len(), 1);
    }

    /// A channel the Capability List no longer advertises is unsubscribed, but only after a
    /// discovery that succeeded (a failed one keeps what is held).
    #[tokio::test]
    async fn channels_no_longer_advertised_are_unsubscribed() {
        let objects = memory();
        let hub = Hub::start(objects.clone()).await;
        let p = pipeline(true, true);
        let subs = subscriptions(&p, &objects);
        subs.subscribe(0, &[set(&hub.url)], true).await;
        subs.subscribe(0, &[], false).await;
        assert_eq!(hub.heard().len(), 1);
        subs.subscribe(0, &[], true).await;
        let heard = hub.heard();
        assert_eq!(heard.len(), 2);
        assert_eq!(heard[1].form["hub.mode"], "unsubscribe");
        assert_eq!(heard[1].form["hub.topic"], TOPIC);
        assert!(subs.inbox().subscriber().records("museum")[0].unsubscribing);
    }
}
