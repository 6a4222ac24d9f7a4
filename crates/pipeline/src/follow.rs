//! `rsagg run --follow`: one long-lived follower that polls each upstream at its
//! `poll_interval`, takes push notifications (with `--listen`), publishes after every pass
//! that changed something, and renews its subscriptions.
//!
//! Why one long-lived process state rather than a `run --once` per pass: opening the state
//! database (slatedb on object storage) and building the HTTP client per pass costs more than
//! the whole sub-second budget of a push; the follower opens them once and keeps them.
//!
//! The loop waits for whichever comes first:
//!
//! - an upstream's poll time: a poll pass (discovery, baseline or Change List incremental,
//!   exactly as `run --once`) of the upstreams due, then publish, then (with `--listen`)
//!   subscriptions to the channels their Capability Lists advertise;
//! - a delivery in the push queue: everything queued is drained and applied in arrival
//!   order through the same path as Change List entries (checkpoint, dedupe, verify, store,
//!   commit); a payload that does not follow the previous one on its channel (gap,
//!   reordering, or none to compare with) first makes the follower read the upstream's
//!   Change List from the checkpoint; then publish the lists (the dumps and garbage
//!   collection wait for the next poll pass: `PublishOptions::lists_only`) and prepare
//!   rsagg's own notifications, which a background task sends to the hub;
//! - a subscription renewal (80% of the granted lease) or retry;
//! - the stop signal: the pass in flight may finish within the shutdown grace (what it
//!   committed stays either way), then the state is closed.
//!
//! The push subscriptions themselves (subscribe, renew, unsubscribe, their records in
//! `push/{upstream}.json` and each channel's `until`) are `rsagg_harvest::Subscriptions`';
//! this file only decides when to call them.
//!
//! Polling never stops: push shortens latency and polling is the fallback when a hub is
//! silent, slow or gone. Deliveries answered 202 but still queued when the follower stops
//! are not lost either: the channel's `until` did not move past them, so the next payload
//! after a restart is a gap and the Change List brings them. Subscriptions are not cancelled at shutdown: their leases expire,
//! and a restarted follower (which finds its secrets in `push/{upstream}.json`) keeps
//! receiving and verifying deliveries in between.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rsagg_fetch::CapabilitySet;
use rsagg_model::W3cDateTime;
use rsagg_store::{State, StoreLocation};
use rsagg_websub::subscriber::unix_millis;
use tokio::sync::{mpsc, watch};
use url::Url;

use rsagg_config::{Pipeline, UpstreamConfig};
use rsagg_harvest::push::{
    Continuity, Counters, Inbox, Pushed, QUEUE, continuity, read_payload, set_for,
};
use rsagg_harvest::{Ctx, Harvest, PushApplied, Subscriptions, harvest_upstream};
use rsagg_layout::history::RunTimes;
use rsagg_layout::report::{
    DeliveryReport, NotifyReport, PublishReport, RunReport, UpstreamReport, Verdict,
};
use rsagg_notify::{Notifier, prepare_published};
use rsagg_publish::{PublishOptions, publish};
use rsagg_store::StoreFailure as _;

use crate::Error;
use crate::runner::{RunOptions, fetch_stats, record_history, write_stats};

/// How often the stats object is rewritten after push passes, at most (poll passes always
/// write it).
const STATS_EVERY: Duration = Duration::from_secs(5);

/// Options of [`follow`].
#[derive(Debug, Clone)]
pub struct FollowOptions {
    /// Options of each pass (as `run --once`).
    pub run: RunOptions,
    /// How long a pass may still run once `stop` is set.
    pub shutdown_grace: Duration,
    /// The push intake, when callbacks are served (`--listen`): subscriptions are made
    /// only then, since a hub must be able to reach the callback.
    pub inbox: Option<Arc<Inbox>>,
}

struct Up {
    cfg: Arc<UpstreamConfig>,
    next_poll: Instant,
    sets: Vec<CapabilitySet>,
    harvest: Option<Harvest>,
    /// The last poll's report (what the stats object shows).
    report: Option<UpstreamReport>,
}

/// Entries of consecutive payloads of one set, applied together.
struct Gathered {
    up: usize,
    harvest: Harvest,
    set: CapabilitySet,
    /// The topic of the first payload (for logs).
    source: Url,
    entries: Vec<rsagg_model::UrlEntry>,
    /// The latest `until` per topic among the payloads.
    until: BTreeMap<String, W3cDateTime>,
    payloads: u64,
}

struct Follower<'a> {
    p: &'a Pipeline,
    opts: &'a FollowOptions,
    store: StoreLocation,
    state: Arc<State>,
    ctx: Arc<Ctx>,
    ups: Vec<Up>,
    code: i32,
    stats_written: Option<Instant>,
    /// The HTTP client's counts at the last poll pass (each pass records the difference).
    fetch_seen: rsagg_fetch::FetchCounts,
    /// rsagg's own channel (`[notify]`): payloads are prepared after every publish and sent
    /// by a background task, so a pass never waits for the hub.
    notify: Option<Notify>,
    /// The push subscriptions and their records (with `--listen` only: a hub must be able
    /// to reach the callback).
    subs: Option<Subscriptions>,
}

/// The notification side of the follower: the notifier, the wake-up of its background
/// sender, and what that sender last reported (for the run report and the stats object).
struct Notify {
    notifier: Arc<Notifier>,
    wake: Arc<tokio::sync::Notify>,
    last: Arc<std::sync::Mutex<DeliveryReport>>,
    sender: tokio::task::JoinHandle<()>,
}

/// How often the background sender looks at the outbox without being woken (a delivery that
/// stopped on a store error is retried this way).
const SENDER_TICK: Duration = Duration::from_secs(30);

impl Notify {
    fn start(notifier: Notifier) -> Notify {
        let notifier = Arc::new(notifier);
        let wake = Arc::new(tokio::sync::Notify::new());
        let last = Arc::new(std::sync::Mutex::new(DeliveryReport::default()));
        let sender = {
            let (notifier, wake, last) = (notifier.clone(), wake.clone(), last.clone());
            tokio::spawn(async move {
                loop {
                    // Payloads a previous process left in the outbox go out first.
                    let report = notifier.deliver(None).await;
                    *last.lock().unwrap_or_else(|e| e.into_inner()) = report;
                    tokio::select! {
                        () = wake.notified() => {}
                        () = tokio::time::sleep(SENDER_TICK) => {}
                    }
                }
            })
        };
        Notify {
            notifier,
            wake,
            last,
            sender,
        }
    }

    /// Stops the background sender and gives the outbox one last, bounded delivery: what
    /// the hub does not take in time stays in the outbox for the next process.
    async fn stop(self, grace: Duration) -> DeliveryReport {
        self.sender.abort();
        let _ = self.sender.await;
        let bound = grace.min(self.notifier.config().deliver_timeout);
        self.notifier.deliver(Some(bound)).await
    }
}

/// Follows `p` until `stop` is set (see the module docs); `on_pass` sees the report of every
/// poll pass. Returns the exit status of the last poll pass (0 or 1; 1 too when a pass had
/// to be abandoned at shutdown); `Err` when the state cannot be opened or another writer
/// fenced this one out (exit 3).
pub async fn follow(
    p: &Pipeline,
    opts: &FollowOptions,
    mut stop: watch::Receiver<bool>,
    mut on_pass: impl FnMut(&RunReport),
) -> Result<i32, Error> {
    let cfg = &p.config;
    let opened = Instant::now();
    let (loc, state, ctx) = crate::runner::open(p, &opts.run, None).await?;
    tracing::info!(
        ms = opened.elapsed().as_millis() as u64,
        "follow: state and HTTP client opened (once for the whole follow)"
    );
    let now = Instant::now();
    let mut f = Follower {
        p,
        opts,
        store: loc.clone(),
        state,
        ctx,
        ups: cfg
            .upstreams
            .iter()
            .map(|u| Up {
                cfg: Arc::new(u.clone()),
                next_poll: now,
                sets: Vec::new(),
                harvest: None,
                report: None,
            })
            .collect(),
        code: 0,
        stats_written: None,
        fetch_seen: rsagg_fetch::FetchCounts::default(),
        notify: Notifier::new(loc.objects.clone(), p)?.map(Notify::start),
        subs: opts
            .inbox
            .clone()
            .map(|inbox| Subscriptions::new(p, inbox, loc.objects.clone())),
    };
    if let Some(subs) = &mut f.subs {
        subs.restore().await;
    }
    let mut queue = opts.inbox.as_ref().and_then(|i| i.take_queue());
    // A store that refuses access or stays unreachable ends the follower at once: its
    // passes would only fail, each resource on its own.
    let outcome =
        match crate::runner::unless_tripped(&loc, f.run(&mut stop, &mut queue, &mut on_pass)).await
        {
            Ok(r) => r,
            Err(e) => return Err(e),
        };
    match &outcome {
        Err(e) if e.is_fenced() => {}
        _ => {
            // The last counters, for `/metrics` and `/status` after the follower is gone.
            if let Some(inbox) = &opts.inbox {
                let report = RunReport {
                    collection: cfg.collection.name.clone(),
                    upstreams: f.ups.iter().filter_map(|u| u.report.clone()).collect(),
                    publish: None,
                    notify: None,
                    seconds: 0.0,
                    push: Some(inbox.stats()),
                    store: Some(f.store.counters.snapshot()),
                };
                write_stats(&f.store.objects, &f.state, &report).await;
            }
            f.save_changed().await;
        }
    }
    let Follower {
        state,
        ctx,
        code,
        notify,
        ..
    } = f;
    if let Some(n) = notify {
        let last = n.stop(opts.shutdown_grace).await;
        if last.pending > 0 {
            tracing::warn!(
                pending = last.pending,
                "change notifications left in the outbox for the next run"
            );
        }
    }
    drop(ctx);
    match outcome {
        Err(e) if e.is_fenced() => return Err(e),
        Err(e) => tracing::error!(error = %rsagg_model::ErrorChain(&e), "follow stopped"),
        Ok(()) => {}
    }
    if let Ok(state) = Arc::try_unwrap(state) {
        state.close().await?;
    }
    Ok(code)
}

/// Resolves once the stop flag is set.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    // An error means the sender is gone: then nobody can stop this follower but the end
    // of the process, so wait forever.
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The next delivery, or never when there is no push intake.
async fn next_push(queue: &mut Option<mpsc::Receiver<Pushed>>) -> Option<Pushed> {
    match queue {
        Some(q) => q.recv().await,
        None => std::future::pending().await,
    }
}

/// Resolves when a verification changed a subscription (never without push intake).
async fn changed(inbox: Option<&Inbox>) {
    match inbox {
        Some(i) => i.changed.notified().await,
        None => std::future::pending().await,
    }
}

/// Runs `pass`; once `stop` is set it gets `grace` more, then it is abandoned (`None`).
async fn guarded<T>(
    pass: impl Future<Output = T>,
    stop: &mut watch::Receiver<bool>,
    grace: Duration,
) -> Option<T> {
    tokio::pin!(pass);
    tokio::select! {
        r = &mut pass => Some(r),
        () = stopped(stop) => {
            tracing::warn!(grace = ?grace, "stopping: the pass in flight may finish within the grace period");
            tokio::time::timeout(grace, pass).await.ok()
        }
    }
}

fn deadline(unix_ms: i64) -> Instant {
    let wait = unix_ms.saturating_sub(unix_millis()).max(0);
    Instant::now() + Duration::from_millis(u64::try_from(wait).unwrap_or(0))
}

impl Follower<'_> {
    async fn run(
        &mut self,
        stop: &mut watch::Receiver<bool>,
        queue: &mut Option<mpsc::Receiver<Pushed>>,
        on_pass: &mut impl FnMut(&RunReport),
    ) -> Result<(), Error> {
        let grace = self.opts.shutdown_grace;
        loop {
            if *stop.borrow() {
                return Ok(());
            }
            let now = Instant::now();
            let due: Vec<usize> = (0..self.ups.len())
                .filter(|&i| self.ups[i].next_poll <= now)
                .collect();
            if !due.is_empty() {
                match guarded(self.poll(&due, on_pass), stop, grace).await {
                    Some(r) => r?,
                    None => return self.abandoned(),
                }
                self.save_changed().await;
                continue;
            }
            // Checked here too, not only by the timer below: under a steady stream of
            // deliveries the push branch is always ready and would starve the timer.
            let next_due = self.subs.as_ref().and_then(Subscriptions::next_due);
            let renewal_due = next_due.is_some_and(|t| t <= unix_millis());
            if renewal_due {
                match guarded(self.renew(), stop, grace).await {
                    Some(()) => {}
                    None => return self.abandoned(),
                }
                self.save_changed().await;
                continue;
            }
            let next_poll = self
                .ups
                .iter()
                .map(|u| u.next_poll)
                .min()
                .unwrap_or_else(|| now + Duration::from_secs(300));
            let renew_at = next_due.map_or(next_poll, deadline);
            tokio::select! {
                biased;
                () = stopped(stop) => return Ok(()),
                Some(first) = next_push(queue) => {
                    let mut batch = vec![first];
                    if let Some(q) = queue.as_mut() {
                        while batch.len() < QUEUE {
                            match q.try_recv() {
                                Ok(m) => batch.push(m),
                                Err(_) => break,
                            }
                        }
                    }
                    match guarded(self.push_pass(batch), stop, grace).await {
                        Some(r) => r?,
                        None => return self.abandoned(),
                    }
                }
                () = changed(self.opts.inbox.as_deref()) => {}
                () = tokio::time::sleep_until(next_poll.into()) => {}
                // Renewals are made at the top of the loop.
                () = tokio::time::sleep_until(renew_at.into()) => {}
            }
            self.save_changed().await;
        }
    }

    /// After a publish: rsagg's own notifications of what it made fetchable (changes up to
    /// `published_seq`, committed before the publish began; never before the documents and
    /// copies they announce are published), handed to the background sender.
    async fn after_publish(
        &self,
        published_seq: u64,
        published: &PublishReport,
    ) -> Option<NotifyReport> {
        if !published.errors.is_empty() {
            tracing::warn!(errors = published.errors.len(), "publish had errors");
        }
        let n = self.notify.as_ref()?;
        let mut report =
            prepare_published(&n.notifier, &self.state, published_seq, published).await;
        n.wake.notify_one();
        report.delivery = n.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Some(report)
    }

    fn abandoned(&mut self) -> Result<(), Error> {
        tracing::error!(
            "pass abandoned at shutdown; what it committed is kept, the rest is fetched again by the next run"
        );
        self.code = 1;
        Ok(())
    }

    /// Renews (or retries) the push subscriptions that are due.
    async fn renew(&self) {
        if let Some(subs) = &self.subs {
            let sets: Vec<&[CapabilitySet]> = self.ups.iter().map(|u| u.sets.as_slice()).collect();
            subs.renew(&sets).await;
        }
    }

    /// Saves the push records when a subscription changed (e.g. verified by the hub).
    async fn save_changed(&self) {
        if let Some(subs) = &self.subs {
            subs.save_changed().await;
        }
    }

    /// A poll pass of the upstreams `due` (as `run --once` does for all of them), then
    /// publish, stats, and subscriptions to the channels found.
    async fn poll(
        &mut self,
        due: &[usize],
        on_pass: &mut impl FnMut(&RunReport),
    ) -> Result<(), Error> {
        let started = Instant::now();
        let started_at = rsagg_model::W3cDateTime::now();
        let results = futures::future::join_all(
            due.iter()
                .map(|&i| harvest_upstream(self.ctx.clone(), self.ups[i].cfg.clone())),
        )
        .await;
        let harvest_seconds = started.elapsed().as_secs_f64();
        let mut reports = Vec::new();
        let mut fenced = false;
        for (&i, (report, polled)) in due.iter().zip(results) {
            let up = &mut self.ups[i];
            up.next_poll = Instant::now() + up.cfg.poll_every();
            fenced |= report.fenced;
            if polled.harvest.is_some() {
                up.sets = polled.sets;
                up.harvest = polled.harvest;
            }
            up.report = Some(report.clone());
            reports.push(report);
        }
        if fenced {
            return Err(Error::Store(rsagg_store::Error::Fenced {
                path: self.p.config.store.url.to_string(),
            }));
        }
        // Still the writer? A follower fenced out while it harvested publishes nothing.
        self.state.hold().await?;
        let (published, notify) = if crate::runner::may_publish(&self.store, &reports).await {
            let published_seq = self.state.last_seq().await;
            let published = publish(&self.state, &self.store, self.p, self.opts.run.publish).await;
            let notify = self.after_publish(published_seq, &published).await;
            (Some(published), notify)
        } else {
            (None, None)
        };
        let mut report = RunReport {
            collection: self.p.config.collection.name.clone(),
            upstreams: reports,
            publish: published,
            notify,
            seconds: started.elapsed().as_secs_f64(),
            push: self.opts.inbox.as_ref().map(|i| i.stats()),
            store: Some(self.store.counters.snapshot()),
        };
        self.code = report.exit_code(self.opts.run.fail_on_quarantine);
        on_pass(&report);
        // The history records the upstreams this pass harvested.
        let counts = self.ctx.fetcher.counts();
        let times = RunTimes {
            started: started_at,
            finished: rsagg_model::W3cDateTime::now(),
            harvest_seconds,
        };
        let fetch = fetch_stats(&counts.since(&self.fetch_seen));
        self.fetch_seen = counts;
        let kept = self.p.config.collection.history_runs;
        record_history(&self.store.objects, &report, &times, &fetch, kept).await;
        // The stats object shows every upstream's last poll, not only this pass's.
        report.upstreams = self.ups.iter().filter_map(|u| u.report.clone()).collect();
        write_stats(&self.store.objects, &self.state, &report).await;
        self.stats_written = Some(Instant::now());
        if let Some(subs) = &self.subs {
            for &i in due {
                let up = &self.ups[i];
                subs.subscribe(i, &up.sets, up.harvest.is_some()).await;
            }
        }
        Ok(())
    }

    /// Applies a batch of deliveries, then publishes when something changed.
    ///
    /// Consecutive payloads of one set are applied together (one ordered batch, one durable
    /// commit, the resource fetches concurrent): at hundreds of notifications per second a
    /// commit per payload would not keep up. A payload that does not follow the previous
    /// one first flushes what was gathered for its set, then the Change List is read.
    async fn push_pass(&mut self, batch: Vec<Pushed>) -> Result<(), Error> {
        let Some(inbox) = self.opts.inbox.clone() else {
            return Ok(());
        };
        let c = &inbox.counters;
        let oldest = batch.iter().map(|m| m.received).min();
        let mut reports: HashMap<usize, UpstreamReport> = HashMap::new();
        let mut open: HashMap<(usize, String), Gathered> = HashMap::new();
        // `until` per (upstream, topic) as if every payload gathered so far were applied.
        let mut prospective: HashMap<(usize, String), W3cDateTime> = HashMap::new();
        let mut checkpoints: HashMap<(usize, String), Option<W3cDateTime>> = HashMap::new();
        let n = batch.len();
        for m in batch {
            let Some(i) = self.ups.iter().position(|u| u.cfg.name == m.upstream) else {
                Counters::add(&c.dropped_unknown);
                continue;
            };
            let payload = match read_payload(&m.body, &m.topic) {
                Ok(p) => p,
                Err(why) => {
                    Counters::add(&c.dropped_invalid);
                    tracing::warn!(upstream = %m.upstream, topic = %m.topic, "invalid change notification dropped: {why}");
                    continue;
                }
            };
            let up = &self.ups[i];
            let (Some(h), Some(set)) = (
                up.harvest.clone(),
                set_for(&up.sets, payload.up.as_ref(), &m.topic).cloned(),
            ) else {
                Counters::add(&c.dropped_unknown);
                tracing::warn!(upstream = %m.upstream, topic = %m.topic, "change notification for no known set of resources dropped (polling covers it)");
                continue;
            };
            let key = (i, set.url.to_string());
            let tkey = (i, m.topic.clone());
            let previous = prospective
                .get(&tkey)
                .copied()
                .or_else(|| self.subs.as_ref().and_then(|s| s.until(i, &m.topic)));
            let checkpoint = match checkpoints.get(&key) {
                Some(cp) => *cp,
                None => {
                    let cp = h.checkpoint_instant(&set).await?;
                    checkpoints.insert(key.clone(), cp);
                    cp
                }
            };
            let relation = continuity(
                payload.from.as_ref(),
                previous.as_ref(),
                checkpoint.as_ref(),
            );
            if relation != Continuity::Follows {
                Counters::add(&c.gaps_recovered);
                tracing::info!(
                    upstream = %m.upstream, topic = %m.topic, ?relation,
                    from = ?payload.from.map(|t| t.to_string()),
                    previous = ?previous.map(|t| t.to_string()),
                    "notification does not follow the previous one: reading the Change List"
                );
                if let Some(g) = open.remove(&key) {
                    self.apply_gathered(g, &mut reports, c).await?;
                }
                checkpoints.remove(&key);
                let report = reports
                    .entry(i)
                    .or_insert_with(|| UpstreamReport::new(&m.upstream));
                let before = report.verdict;
                if let Err(e) = h.catch_up(&set, report).await {
                    if e.is_fenced() {
                        return Err(e.into());
                    }
                    report.fail(format!("set {}: {e}", set.url));
                }
                if report.verdict == Verdict::Failed && before == Verdict::Ok {
                    // Applying the payload now would move the checkpoint past what is
                    // missing; the next poll fetches both.
                    report.warn(format!(
                        "{}: notification not applied: the Change List could not be read",
                        m.topic
                    ));
                    continue;
                }
            }
            if let Some(until) = payload.until
                && previous.is_none_or(|p| until.cmp_instant(&p).is_gt())
            {
                prospective.insert(tkey, until);
            }
            let g = open.entry(key).or_insert_with(|| Gathered {
                up: i,
                harvest: h,
                source: Url::parse(&m.topic).unwrap_or_else(|_| set.url.clone()),
                set,
                entries: Vec::new(),
                until: BTreeMap::new(),
                payloads: 0,
            });
            g.entries.extend(payload.entries);
            g.payloads += 1;
            if let Some(until) = payload.until {
                let later = g
                    .until
                    .get(&m.topic)
                    .is_none_or(|p: &W3cDateTime| until.cmp_instant(p).is_gt());
                if later {
                    g.until.insert(m.topic.clone(), until);
                }
            }
        }
        for (_, g) in open.drain() {
            self.apply_gathered(g, &mut reports, c).await?;
        }
        let applied_after = oldest.map_or(0, |t| t.elapsed().as_millis() as u64);
        let changed = reports
            .values()
            .any(|r| r.created + r.updated + r.deleted > 0);
        let mut published = None;
        let mut notify = None;
        let publishing = Instant::now();
        if changed {
            let published_seq = self.state.last_seq().await;
            // Lists only: the dumps and garbage collection wait for the next poll pass.
            let opts = PublishOptions {
                lists_only: true,
                ..self.opts.run.publish
            };
            let r = publish(&self.state, &self.store, self.p, opts).await;
            notify = self.after_publish(published_seq, &r).await;
            published = Some(r);
        }
        let publish_ms = publishing.elapsed().as_millis() as u64;
        let latency = oldest.map_or(0, |t| t.elapsed().as_millis() as u64);
        c.latency(latency);
        tracing::info!(
            payloads = n,
            created = reports.values().map(|r| r.created).sum::<u64>(),
            updated = reports.values().map(|r| r.updated).sum::<u64>(),
            deleted = reports.values().map(|r| r.deleted).sum::<u64>(),
            replayed = reports.values().map(|r| r.replayed).sum::<u64>(),
            published = changed,
            applied_after_ms = applied_after,
            publish_ms,
            latency_ms = latency,
            "push pass"
        );
        if let Some(subs) = &self.subs {
            for i in reports.keys() {
                subs.save(*i).await;
            }
        }
        if self
            .stats_written
            .is_none_or(|t| t.elapsed() >= STATS_EVERY)
        {
            let report = RunReport {
                collection: self.p.config.collection.name.clone(),
                upstreams: self.ups.iter().filter_map(|u| u.report.clone()).collect(),
                publish: published,
                notify,
                seconds: 0.0,
                push: Some(inbox.stats()),
                store: Some(self.store.counters.snapshot()),
            };
            write_stats(&self.store.objects, &self.state, &report).await;
            self.stats_written = Some(Instant::now());
        }
        Ok(())
    }

    /// Applies the entries gathered from consecutive payloads of one set; on success their
    /// channels' `until` moves on.
    async fn apply_gathered(
        &mut self,
        g: Gathered,
        reports: &mut HashMap<usize, UpstreamReport>,
        c: &Counters,
    ) -> Result<(), Error> {
        let report = reports
            .entry(g.up)
            .or_insert_with(|| UpstreamReport::new(&self.ups[g.up].cfg.name));
        match g
            .harvest
            .apply_notification(&g.set, &g.source, g.entries, report)
            .await
        {
            Ok(PushApplied::Done(true)) => {
                c.applied
                    .fetch_add(g.payloads, std::sync::atomic::Ordering::Relaxed);
                if let Some(subs) = &mut self.subs {
                    for (topic, t) in g.until {
                        subs.advance(g.up, topic, t);
                    }
                }
            }
            // Stopped at a failed change: `until` stays, so the next payload is seen as a
            // gap and the Change List brings the failed change again.
            Ok(PushApplied::Done(false)) => {}
            Ok(PushApplied::NoBaseline) => tracing::info!(
                upstream = %self.ups[g.up].cfg.name, set = %g.set.url,
                "notification before the baseline: left to polling"
            ),
            Err(e) if e.is_fenced() => return Err(e.into()),
            Err(e) => report.fail(format!("{}: {e}", g.source)),
        }
        Ok(())
    }
}
