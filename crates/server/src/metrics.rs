//! `/metrics`: the Prometheus text exposition format, version 0.0.4.
//!
//! Three sources: what the last run of each collection left in its store (`stats.rs`;
//! gauges, since they describe that run and restart with the next one); the collection's
//! run history in the store (totals since its first run: counters and histograms that keep
//! growing across the job's processes, since `run --once` is a process per run, and each
//! upstream's last success, from which the lag is measured); and this process's own
//! counters: the requests it answered ([`HttpCounters`], atomics in the router's state;
//! reset when the process restarts, as Prometheus expects) and, under `run --follow
//! --listen`, the push intake's counters as they are now.
//!
//! Written by hand rather than through a metrics registry crate: every scrape re-reads
//! objects another process wrote, so a registry would only be a copy step, and the few
//! rules of the text format (escaping, one block per family, cumulative `le` buckets) are
//! tested here.
//!
//! Every family is written with its `# HELP` and `# TYPE` lines, even without samples, and
//! all samples of a family together; label values are escaped as the format says
//! (`\\`, `\"`, `\n`).

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rsagg_layout::history::Histogram;
use rsagg_layout::report::PushStats;
use rsagg_model::W3cDateTime;

use crate::stats::Observed;

/// `Content-Type` of the text format 0.0.4.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// What a request was for, as the `kind` label says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A published document (lists, indexes, packages, the Source Description, robots.txt).
    Document,
    /// A resource copy (`{base}r/…`).
    Copy,
    /// Anything else: the server's own pages, probes, 404s, refused methods.
    Other,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Document, Kind::Copy, Kind::Other];

    fn label(self) -> &'static str {
        match self {
            Kind::Document => "document",
            Kind::Copy => "copy",
            Kind::Other => "other",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Status codes counted one by one (100–599); anything else is counted as 599.
const STATUSES: usize = 500;

/// Requests answered and response body bytes sent, by kind and status, of one collection
/// (or of the server itself). Lock-free: a request costs two atomic additions.
#[derive(Debug)]
pub(crate) struct HttpCounters {
    by_kind: [KindCounters; 3],
}

#[derive(Debug)]
struct KindCounters {
    /// Index: status − 100.
    statuses: Box<[AtomicU64]>,
    /// Shared with the bodies still streaming.
    bytes: Arc<AtomicU64>,
}

impl Default for HttpCounters {
    fn default() -> Self {
        let kind = || KindCounters {
            statuses: (0..STATUSES).map(|_| AtomicU64::new(0)).collect(),
            bytes: Arc::new(AtomicU64::new(0)),
        };
        HttpCounters {
            by_kind: [kind(), kind(), kind()],
        }
    }
}

impl HttpCounters {
    /// Counts one response.
    pub fn request(&self, kind: Kind, status: u16) {
        let i = usize::from(status)
            .checked_sub(100)
            .filter(|i| *i < STATUSES)
            .unwrap_or(STATUSES - 1);
        self.by_kind[kind.index()].statuses[i].fetch_add(1, Ordering::Relaxed);
    }

    /// The counter of body bytes sent for `kind` (added to as the body streams out).
    pub fn bytes(&self, kind: Kind) -> &Arc<AtomicU64> {
        &self.by_kind[kind.index()].bytes
    }

    /// Requests answered with `status` for `kind` so far.
    #[cfg(test)]
    pub fn count(&self, kind: Kind, status: u16) -> u64 {
        self.by_kind[kind.index()].statuses[usize::from(status) - 100].load(Ordering::Relaxed)
    }
}

/// A sample value.
#[derive(Debug, Clone, Copy)]
enum Value {
    Int(u64),
    Float(f64),
}

impl From<u64> for Value {
    fn from(v: u64) -> Self {
        Value::Int(v)
    }
}

impl From<f64> for Value {
    fn from(v: f64) -> Self {
        Value::Float(v)
    }
}

impl From<bool> for Value {
    fn from(v: bool) -> Self {
        Value::Int(u64::from(v))
    }
}

/// One metric family being written.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    samples: String,
}

impl Family {
    fn gauge(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind: "gauge",
            help,
            samples: String::new(),
        }
    }

    fn counter(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind: "counter",
            help,
            samples: String::new(),
        }
    }

    fn histogram(name: &'static str, help: &'static str) -> Family {
        Family {
            name,
            kind: "histogram",
            help,
            samples: String::new(),
        }
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: impl Into<Value>) {
        self.sample_as("", labels, value);
    }

    /// The `_bucket` (cumulative, `le` last, ending with `+Inf`), `_sum` and `_count`
    /// samples of a histogram.
    fn histogram_samples(&mut self, labels: &[(&str, &str)], h: &Histogram) {
        let cumulative = h.cumulative();
        for (le, n) in &cumulative {
            let mut le_text = String::new();
            write_float(*le, &mut le_text);
            let mut with_le: Vec<(&str, &str)> = labels.to_vec();
            with_le.push(("le", &le_text));
            self.sample_as("_bucket", &with_le, *n);
        }
        self.sample_as("_sum", labels, h.sum);
        let count = cumulative.last().map_or(0, |(_, n)| *n);
        self.sample_as("_count", labels, count);
    }

    /// A sample of the family's `name` plus `suffix`.
    fn sample_as(&mut self, suffix: &str, labels: &[(&str, &str)], value: impl Into<Value>) {
        let s = &mut self.samples;
        s.push_str(self.name);
        s.push_str(suffix);
        if !labels.is_empty() {
            s.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(k);
                s.push_str("=\"");
                escape_label_value(v, s);
                s.push('"');
            }
            s.push('}');
        }
        s.push(' ');
        match value.into() {
            Value::Int(v) => {
                let _ = write!(s, "{v}");
            }
            Value::Float(v) => write_float(v, s),
        }
        s.push('\n');
    }

    fn write(&self, out: &mut String) {
        let _ = writeln!(out, "# HELP {} {}", self.name, escape_help(self.help));
        let _ = writeln!(out, "# TYPE {} {}", self.name, self.kind);
        out.push_str(&self.samples);
    }
}

/// A label value as the text format writes it: backslash, double quote and line feed
/// escaped.
fn escape_label_value(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// A `# HELP` docstring: backslash and line feed escaped.
fn escape_help(v: &str) -> String {
    v.replace('\\', "\\\\").replace('\n', "\\n")
}

/// A float as the format writes it (Go's `ParseFloat` syntax): `NaN`, `+Inf`, `-Inf`, else
/// Rust's shortest round-tripping decimal.
fn write_float(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

fn seconds(t: &W3cDateTime) -> f64 {
    let (secs, nanos) = t.instant();
    secs as f64 + f64::from(nanos) / 1e9
}

fn now_seconds(now: SystemTime) -> f64 {
    match now.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

/// The largest lag (`now` minus the last success, in seconds) among the upstreams of the
/// collection's last run that have succeeded once (all of the history's before there is a
/// last run); `None` when none has.
pub(crate) fn collection_lag_seconds(o: &Observed, now: f64) -> Option<f64> {
    let Ok(Some(h)) = &o.history else {
        return None;
    };
    let current: Option<Vec<&str>> = match &o.stats {
        Ok(Some(s)) => Some(s.report.upstreams.iter().map(|u| u.name.as_str()).collect()),
        _ => None,
    };
    h.totals
        .upstreams
        .iter()
        .filter(|(name, _)| current.as_ref().is_none_or(|c| c.contains(&name.as_str())))
        .filter_map(|(_, u)| u.last_success.as_ref())
        .map(|t| (now - seconds(t)).max(0.0))
        .reduce(f64::max)
}

/// One served collection as `/metrics` sees it.
pub(crate) struct CollectionMetrics<'a> {
    pub name: &'a str,
    pub observed: &'a Observed,
    pub http: &'a HttpCounters,
    /// The push intake's counters now (`run --follow --listen`), shown instead of those
    /// the stats object kept at the last pass.
    pub live_push: Option<PushStats>,
}

/// What the exposition holds beyond the collections' figures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Exposition {
    /// The series per upstream (label `upstream`) are written; off, only the collections'
    /// (`serve --metrics-upstreams=false`: a fleet of 4,000 collections with 300 upstreams
    /// each would be millions of series).
    pub upstreams: bool,
    /// Requests this server made to the stores since it started
    /// (`rsagg_serve_store_requests_total`).
    pub store_requests: u64,
}

impl Default for Exposition {
    fn default() -> Self {
        Exposition {
            upstreams: true,
            store_requests: 0,
        }
    }
}

/// The whole exposition: every collection's last run and the request counters (`server`:
/// requests outside every collection, labelled `collection=""`). Lag is measured at `now`.
pub(crate) fn render(
    collections: &[CollectionMetrics<'_>],
    server: &HttpCounters,
    now: SystemTime,
    exposition: Exposition,
) -> String {
    let now = now_seconds(now);
    let per_upstream = exposition.upstreams;
    let mut store_up = Family::gauge(
        "rsagg_collection_store_up",
        "1 when the collection's store answered reading the last run's stats (an absent object counts as an answer), else 0.",
    );
    let mut last_run = Family::gauge(
        "rsagg_last_run_timestamp_seconds",
        "When the collection's last run finished (Unix time). Absent before the first run.",
    );
    let mut duration = Family::gauge(
        "rsagg_last_run_duration_seconds",
        "Wall time of the collection's last run.",
    );
    let mut resources = Family::gauge(
        "rsagg_last_run_resources",
        "Resources processed by the last run, per upstream and outcome (created, updated, deleted, unchanged, replayed, superseded, quarantined, gone, failed).",
    );
    let mut up = Family::gauge(
        "rsagg_upstream_up",
        "1 when the upstream's verdict in the last run was ok, 0 when it failed.",
    );
    let mut sets = Family::gauge(
        "rsagg_upstream_sets",
        "Sets of resources (Capability Lists) of the upstream harvested by the last run.",
    );
    let mut resyncs = Family::gauge(
        "rsagg_upstream_resyncs",
        "Re-syncs from the Resource List in the last run (the Change List no longer reached the checkpoint, or there is none).",
    );
    let mut incomplete = Family::gauge(
        "rsagg_upstream_incomplete_lists",
        "OAI-PMH lists (date windows) of the last run that ended with fewer records than the provider's completeListSize announced (OAI-PMH 2.0 section 3.5): records may be missing. OAI-PMH upstreams only.",
    );
    let mut parked = Family::gauge(
        "rsagg_upstream_parked_until_timestamp_seconds",
        "When the upstream may be asked again (Unix time): its provider answered Retry-After beyond [fetch] retry_after_max in the last run. Absent unless parked.",
    );
    let mut warnings = Family::gauge(
        "rsagg_upstream_warnings",
        "Warnings about the upstream in the last run (kept up to 100).",
    );
    let mut errors = Family::gauge(
        "rsagg_upstream_errors",
        "1 when the last run recorded an error for the upstream, else 0.",
    );
    let mut checkpoint = Family::gauge(
        "rsagg_upstream_checkpoint_timestamp_seconds",
        "The last upstream instant processed (Unix time; the oldest among the upstream's sets), after the last run.",
    );
    let mut lag = Family::gauge(
        "rsagg_upstream_lag_seconds",
        "How stale the copy may be: now minus the start of the last pass that ended ok for the upstream (it read the upstream's lists and processed all they announced). Small for a quiet upstream that is polled; grows while passes fail or do not run. Absent before the first success.",
    );
    let mut last_success = Family::gauge(
        "rsagg_upstream_last_success_timestamp_seconds",
        "When the last pass that ended ok for the upstream started (Unix time).",
    );
    let mut collection_failed = Family::gauge(
        "rsagg_collection_upstreams_failed",
        "Upstreams whose verdict in the collection's last run was failed (written with or without the per-upstream series).",
    );
    let mut collection_lag = Family::gauge(
        "rsagg_collection_lag_seconds",
        "The largest rsagg_upstream_lag_seconds among the upstreams of the collection's last run (those that succeeded once; written with or without the per-upstream series).",
    );
    let mut collection_resources = Family::gauge(
        "rsagg_collection_resources",
        "Resources the collection's published Resource List names.",
    );
    let mut serve_store_requests = Family::counter(
        "rsagg_serve_store_requests_total",
        "Requests this server made to the collections' stores since it started (reading what the runs left, probes, documents and copies); see serve --stats-refresh.",
    );
    let mut build_info = Family::gauge(
        "rsagg_build_info",
        "Always 1; the labels say which rsagg answers (version).",
    );
    let mut runs = Family::counter(
        "rsagg_runs_total",
        "Runs (run --once) and poll passes (run --follow) recorded in the collection's history since it began.",
    );
    let mut resources_total = Family::counter(
        "rsagg_resources_total",
        "Resources processed by the recorded runs and poll passes, per upstream and outcome (created, updated, deleted, unchanged, replayed, superseded, quarantined, gone, failed).",
    );
    let mut passes = Family::counter(
        "rsagg_upstream_passes_total",
        "Passes over the upstream recorded, by verdict (ok, failed).",
    );
    let mut fetch_requests = Family::counter(
        "rsagg_fetch_requests_total",
        "Requests to upstreams by outcome (ok, not_modified, redirect, client_error, server_error, transport_error); every attempt counts, retries included.",
    );
    let mut fetch_retries = Family::counter(
        "rsagg_fetch_retries_total",
        "Requests to upstreams that were retries of a failed attempt.",
    );
    let mut fetch_bytes = Family::counter(
        "rsagg_fetch_response_bytes_total",
        "Response body bytes read from upstreams (after inflation).",
    );
    let mut fetch_duration = Family::histogram(
        "rsagg_fetch_duration_seconds",
        "Time of each request to an upstream until its response head arrived.",
    );
    let mut run_duration = Family::histogram(
        "rsagg_run_duration_seconds",
        "Wall time of each recorded run or poll pass.",
    );
    let mut publish_duration = Family::histogram(
        "rsagg_publish_duration_seconds",
        "Wall time of the publish stage of each recorded run or poll pass.",
    );
    let mut quarantined = Family::gauge(
        "rsagg_quarantined",
        "Resources in quarantine after the last run (as listed in the stats object; see rsagg_quarantine_truncated).",
    );
    let mut truncated = Family::gauge(
        "rsagg_quarantine_truncated",
        "1 when more resources are in quarantine than the stats object lists (rsagg_quarantined is then a lower bound).",
    );
    let mut publish_errors = Family::gauge(
        "rsagg_publish_errors",
        "Publish steps that failed in the last run.",
    );
    let mut parts = Family::gauge(
        "rsagg_resourcelist_parts_rewritten",
        "Parts of the Resource List rewritten by the last run.",
    );
    let mut open_entries = Family::gauge(
        "rsagg_changelist_open_entries",
        "Changes in the open Change List after the last run.",
    );
    let mut closed = Family::gauge(
        "rsagg_changelist_closed",
        "Closed Change Lists retained (named by the index) after the last run.",
    );
    let mut dump_packages = Family::gauge(
        "rsagg_changedump_packages",
        "Packages the Change Dump names after the last run.",
    );
    let mut gc_at = Family::gauge(
        "rsagg_gc_last_timestamp_seconds",
        "When the last blob garbage collection started (Unix time).",
    );
    let mut gc_scanned = Family::gauge(
        "rsagg_gc_last_scanned_objects",
        "Objects the last blob garbage collection listed.",
    );
    let mut gc_deleted = Family::gauge(
        "rsagg_gc_last_deleted_objects",
        "Objects the last blob garbage collection deleted.",
    );
    let mut gc_bytes = Family::gauge(
        "rsagg_gc_last_freed_bytes",
        "Bytes the objects deleted by the last blob garbage collection held.",
    );
    let mut sent = Family::counter(
        "rsagg_notifications_sent_total",
        "Change-notification payloads the hub has taken since the collection's channel began, by collection and hub (as of the last run).",
    );
    let mut pending = Family::gauge(
        "rsagg_notifications_pending",
        "Change-notification payloads waiting in the outbox after the last run (the hub has not taken them yet).",
    );
    let mut delivered = Family::gauge(
        "rsagg_notifications_delivered",
        "Change-notification payloads the hub took during the last run.",
    );
    let mut delivery_failures = Family::gauge(
        "rsagg_notification_delivery_failures",
        "Publish requests to the hub that failed (no 2xx) during the last run.",
    );
    let mut unfetched = Family::gauge(
        "rsagg_notifications_unfetched",
        "form = websub: payloads the hub took but did not fetch from the topic within fetch_wait during the last run (receivers recover them from the Change List).",
    );
    let mut notify_errors = Family::gauge(
        "rsagg_notification_errors",
        "Errors of the last run's notification step: failures to prepare payloads, plus 1 when payloads are pending after a failed delivery.",
    );
    let mut push = Family::counter(
        "rsagg_push_notifications_total",
        "Change notifications received at the WebSub callbacks since the follower started, by outcome (received, applied, dropped_signature, dropped_unknown, dropped_invalid, busy, gaps_recovered); run --follow --listen only.",
    );
    let mut push_subscriptions = Family::gauge(
        "rsagg_push_subscriptions",
        "Verified subscriptions to upstream change-notification channels whose lease runs.",
    );
    let mut push_latency = Family::gauge(
        "rsagg_push_latency_seconds",
        "From a notification's arrival to rsagg's published change: the last push pass (stat=last) and the largest so far (stat=max).",
    );
    let mut store_requests = Family::gauge(
        "rsagg_store_requests",
        "Object-store requests of the last run, by kind (get, put, list, delete, head, copy); LIST counted per page of 1,000 entries, a multipart upload per part.",
    );
    let mut store_bytes = Family::gauge(
        "rsagg_store_bytes",
        "Bytes the last run moved to and from its object store, by direction (read, written).",
    );
    let mut requests = Family::counter(
        "rsagg_http_requests_total",
        "Requests answered by this server since it started, by collection (empty: none), kind (document, copy, other) and status.",
    );
    let mut bytes = Family::counter(
        "rsagg_http_response_bytes_total",
        "Response body bytes sent by this server since it started, by collection and kind.",
    );

    build_info.sample(&[("version", env!("CARGO_PKG_VERSION"))], 1u64);
    serve_store_requests.sample(&[], exposition.store_requests);
    for c in collections {
        let coll = [("collection", c.name)];
        store_up.sample(&coll, c.observed.store_ok());
        if let Ok(Some(n)) = &c.observed.resources {
            collection_resources.sample(&coll, *n);
        }
        if let Ok(Some(s)) = &c.observed.stats {
            let failed = s.report.upstreams.iter().filter(|u| !u.ok()).count();
            collection_failed.sample(&coll, failed as u64);
            if let Some(lag) = collection_lag_seconds(c.observed, now) {
                collection_lag.sample(&coll, lag);
            }
        }
        if let Ok(Some(s)) = &c.observed.stats {
            if let Some(t) = &s.finished {
                last_run.sample(&coll, seconds(t));
            }
            duration.sample(&coll, s.report.seconds);
            for u in s.report.upstreams.iter().filter(|_| per_upstream) {
                let labels = [("collection", c.name), ("upstream", u.name.as_str())];
                for (outcome, n) in u.outcomes() {
                    resources.sample(
                        &[
                            ("collection", c.name),
                            ("upstream", &u.name),
                            ("outcome", outcome),
                        ],
                        n,
                    );
                }
                up.sample(&labels, u.ok());
                sets.sample(&labels, u.sets as u64);
                resyncs.sample(&labels, u.resyncs.len() as u64);
                // OAI-PMH upstreams only (those with a pass to report on).
                if u.listing.is_some() || u.incomplete_lists > 0 {
                    incomplete.sample(&labels, u.incomplete_lists);
                }
                if let Some(t) = &u.parked_until {
                    parked.sample(&labels, seconds(t));
                }
                warnings.sample(&labels, u.warnings.len() as u64);
                errors.sample(&labels, u.error.is_some());
                if let Some(t) = &u.checkpoint {
                    checkpoint.sample(&labels, seconds(t));
                }
            }
            quarantined.sample(&coll, s.quarantine.len() as u64);
            truncated.sample(&coll, s.quarantine_truncated);
            if let Some(p) = &s.report.publish {
                publish_errors.sample(&coll, p.errors.len() as u64);
                if let Some(n) = p.resource_list_parts {
                    parts.sample(&coll, n as u64);
                }
                if let Some(cl) = &p.change_lists {
                    open_entries.sample(&coll, cl.open_entries);
                    closed.sample(&coll, cl.closed_total);
                }
                if let Some(cd) = &p.change_dumps {
                    dump_packages.sample(&coll, cd.packages_total);
                }
            }
            if let Some(n) = &s.report.notify {
                let labels = [("collection", c.name), ("hub", n.hub.as_str())];
                let d = &n.delivery;
                sent.sample(&labels, d.sent_total);
                pending.sample(&labels, d.pending);
                delivered.sample(&labels, d.delivered);
                delivery_failures.sample(&labels, d.failures);
                unfetched.sample(&labels, d.unfetched);
                let stuck = d.pending > 0 && d.last_error.is_some();
                notify_errors.sample(&labels, n.errors.len() as u64 + u64::from(stuck));
            }
        }
        let stored_push = match &c.observed.stats {
            Ok(Some(s)) => s.report.push.as_ref(),
            _ => None,
        };
        if let Some(p) = c.live_push.as_ref().or(stored_push) {
            for (outcome, n) in [
                ("received", p.received),
                ("applied", p.applied),
                ("dropped_signature", p.dropped_signature),
                ("dropped_unknown", p.dropped_unknown),
                ("dropped_invalid", p.dropped_invalid),
                ("busy", p.busy),
                ("gaps_recovered", p.gaps_recovered),
            ] {
                push.sample(&[("collection", c.name), ("outcome", outcome)], n);
            }
            push_subscriptions.sample(&coll, p.subscriptions);
            for (stat, ms) in [("last", p.last_latency_ms), ("max", p.max_latency_ms)] {
                push_latency.sample(
                    &[("collection", c.name), ("stat", stat)],
                    ms as f64 / 1000.0,
                );
            }
        }
        if let Ok(Some(s)) = &c.observed.stats
            && let Some(r) = &s.report.store
        {
            for (kind, n) in [
                ("get", r.get),
                ("put", r.put),
                ("list", r.list),
                ("delete", r.delete),
                ("head", r.head),
                ("copy", r.copy),
            ] {
                store_requests.sample(&[("collection", c.name), ("kind", kind)], n);
            }
            for (direction, n) in [("read", r.bytes_read), ("written", r.bytes_written)] {
                store_bytes.sample(&[("collection", c.name), ("direction", direction)], n);
            }
        }
        if let Ok(Some(h)) = &c.observed.history {
            let t = &h.totals;
            runs.sample(&coll, t.runs);
            // Upstreams of the last run only (one removed from the pipeline stops being
            // shown), all of them before there is one.
            let current: Option<Vec<&str>> = match &c.observed.stats {
                Ok(Some(s)) => Some(s.report.upstreams.iter().map(|u| u.name.as_str()).collect()),
                _ => None,
            };
            for (name, u) in t.upstreams.iter().filter(|_| per_upstream) {
                for (outcome, n) in &u.resources {
                    resources_total.sample(
                        &[
                            ("collection", c.name),
                            ("upstream", name),
                            ("outcome", outcome),
                        ],
                        *n,
                    );
                }
                let labels = [("collection", c.name), ("upstream", name.as_str())];
                for (verdict, n) in [("ok", u.passes_ok), ("failed", u.passes_failed)] {
                    passes.sample(
                        &[
                            ("collection", c.name),
                            ("upstream", name),
                            ("verdict", verdict),
                        ],
                        n,
                    );
                }
                if current
                    .as_ref()
                    .is_some_and(|c| !c.contains(&name.as_str()))
                {
                    continue;
                }
                if let Some(ok) = &u.last_success {
                    let ok = seconds(ok);
                    last_success.sample(&labels, ok);
                    lag.sample(&labels, (now - ok).max(0.0));
                }
            }
            for (outcome, n) in &t.fetch.requests {
                fetch_requests.sample(&[("collection", c.name), ("outcome", outcome)], *n);
            }
            fetch_retries.sample(&coll, t.fetch.retries);
            fetch_bytes.sample(&coll, t.fetch.bytes);
            fetch_duration.histogram_samples(&coll, &t.fetch.duration);
            run_duration.histogram_samples(&coll, &t.run_seconds);
            publish_duration.histogram_samples(&coll, &t.publish_seconds);
        }
        if let Ok(Some(meta)) = &c.observed.gc
            && let Some(g) = &meta.last
        {
            gc_at.sample(&coll, seconds(&g.at));
            gc_scanned.sample(&coll, g.scanned);
            gc_deleted.sample(&coll, g.deleted);
            gc_bytes.sample(&coll, g.bytes_freed);
        }
    }
    let with_server = collections
        .iter()
        .map(|c| (c.name, c.http))
        .chain(std::iter::once(("", server)));
    for (name, http) in with_server {
        for kind in Kind::ALL {
            let k = &http.by_kind[kind.index()];
            for (i, n) in k.statuses.iter().enumerate() {
                let n = n.load(Ordering::Relaxed);
                if n > 0 {
                    let status = (i + 100).to_string();
                    requests.sample(
                        &[
                            ("collection", name),
                            ("kind", kind.label()),
                            ("status", &status),
                        ],
                        n,
                    );
                }
            }
            let b = k.bytes.load(Ordering::Relaxed);
            if b > 0 {
                bytes.sample(&[("collection", name), ("kind", kind.label())], b);
            }
        }
    }

    let mut out = String::with_capacity(8 * 1024);
    for f in [
        build_info,
        serve_store_requests,
        store_up,
        store_requests,
        store_bytes,
        last_run,
        duration,
        resources,
        up,
        sets,
        resyncs,
        incomplete,
        parked,
        warnings,
        errors,
        checkpoint,
        last_success,
        lag,
        collection_failed,
        collection_lag,
        collection_resources,
        runs,
        resources_total,
        passes,
        fetch_requests,
        fetch_retries,
        fetch_bytes,
        fetch_duration,
        run_duration,
        publish_duration,
        quarantined,
        truncated,
        publish_errors,
        parts,
        open_entries,
        closed,
        dump_packages,
        sent,
        pending,
        delivered,
        delivery_failures,
        unfetched,
        notify_errors,
        gc_at,
        gc_scanned,
        gc_deleted,
        gc_bytes,
        push,
        push_subscriptions,
        push_latency,
        requests,
        bytes,
    ] {
        f.write(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_and_help_are_escaped() {
        let mut f = Family::gauge("x", "a \\ b\nc");
        f.sample(&[("l", "q\"uote\\back\nline")], 1u64);
        f.sample(&[], f64::NAN);
        f.sample(&[("a", ""), ("b", "é")], f64::INFINITY);
        f.sample(&[], 0.25);
        let mut out = String::new();
        f.write(&mut out);
        assert_eq!(
            out,
            "# HELP x a \\\\ b\\nc\n# TYPE x gauge\nx{l=\"q\\\"uote\\\\back\\nline\"} 1\nx NaN\n\
             x{a=\"\",b=\"é\"} +Inf\nx 0.25\n"
        );
    }

    #[test]
    fn push_counters_come_from_the_stats_object() {
        let stats: crate::stats::Stats = serde_json::from_str(
            r#"{"report": {"upstreams": [], "push": {"received": 7, "applied": 5,
                "dropped_signature": 1, "dropped_unknown": 0, "dropped_invalid": 1, "busy": 0,
                "gaps_recovered": 2, "subscriptions": 1, "last_latency_ms": 40,
                "max_latency_ms": 250},
                "store": {"get": 12, "put": 30, "list": 2, "bytes_read": 4096}}}"#,
        )
        .unwrap();
        let observed = crate::stats::Observed {
            stats: Ok(Some(std::sync::Arc::new(stats))),
            gc: Ok(None),
            history: Ok(None),
            resources: Ok(None),
            snapshot_at: None,
            store: Ok(()),
        };
        let http = HttpCounters::default();
        let c = CollectionMetrics {
            name: "maps",
            observed: &observed,
            http: &http,
            live_push: None,
        };
        let text = render(
            &[c],
            &HttpCounters::default(),
            SystemTime::now(),
            Exposition::default(),
        );
        for line in [
            "rsagg_push_notifications_total{collection=\"maps\",outcome=\"received\"} 7\n",
            "rsagg_push_notifications_total{collection=\"maps\",outcome=\"dropped_signature\"} 1\n",
            "rsagg_push_notifications_total{collection=\"maps\",outcome=\"gaps_recovered\"} 2\n",
            "rsagg_push_subscriptions{collection=\"maps\"} 1\n",
            "rsagg_push_latency_seconds{collection=\"maps\",stat=\"max\"} 0.25\n",
            "rsagg_store_requests{collection=\"maps\",kind=\"get\"} 12\n",
            "rsagg_store_requests{collection=\"maps\",kind=\"put\"} 30\n",
            "rsagg_store_requests{collection=\"maps\",kind=\"delete\"} 0\n",
            "rsagg_store_bytes{collection=\"maps\",direction=\"read\"} 4096\n",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        // Without push intake (run --once, or a follower without --listen): no samples.
        let observed = crate::stats::Observed {
            stats: Ok(Some(std::sync::Arc::new(crate::stats::Stats::default()))),
            gc: Ok(None),
            history: Ok(None),
            resources: Ok(None),
            snapshot_at: None,
            store: Ok(()),
        };
        let c = CollectionMetrics {
            name: "maps",
            observed: &observed,
            http: &http,
            live_push: None,
        };
        let text = render(
            &[c],
            &HttpCounters::default(),
            SystemTime::now(),
            Exposition::default(),
        );
        assert!(!text.contains("rsagg_push_notifications_total{"), "{text}");
        assert!(!text.contains("rsagg_store_requests{"), "{text}");
    }

    #[test]
    fn history_totals_are_counters_and_histograms_and_lag_counts_from_the_last_success() {
        use rsagg_layout::history::{RunHistory, UpstreamTotals};
        let mut history = RunHistory::default();
        history.totals.runs = 3;
        let mut quiet = UpstreamTotals {
            passes_ok: 3,
            // A pass that started 100 s before `now`; the upstream itself may be quiet for
            // months (its checkpoint says so), the copy is 100 s stale.
            last_success: Some(W3cDateTime::from_unix(1_000_000 - 100, 0)),
            ..UpstreamTotals::default()
        };
        quiet.resources.insert("created".into(), 5);
        history.totals.upstreams.insert("quiet".into(), quiet);
        history
            .totals
            .upstreams
            .insert("gone".into(), UpstreamTotals::default());
        history.totals.run_seconds = Histogram::new(&[1.0, 10.0]);
        history.totals.run_seconds.observe(0.5);
        history.totals.run_seconds.observe(4.0);
        let stats: crate::stats::Stats = serde_json::from_str(
            r#"{"report": {"upstreams": [{"name": "quiet", "checkpoint": "2025-01-01T00:00:00Z"}]}}"#,
        )
        .unwrap();
        let observed = crate::stats::Observed {
            stats: Ok(Some(std::sync::Arc::new(stats))),
            gc: Ok(None),
            history: Ok(Some(std::sync::Arc::new(history))),
            resources: Ok(Some(7)),
            snapshot_at: None,
            store: Ok(()),
        };
        let http = HttpCounters::default();
        let c = CollectionMetrics {
            name: "maps",
            observed: &observed,
            http: &http,
            live_push: None,
        };
        let now = UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let text = render(&[c], &HttpCounters::default(), now, Exposition::default());
        for line in [
            "# TYPE rsagg_runs_total counter\n",
            "rsagg_runs_total{collection=\"maps\"} 3\n",
            "rsagg_resources_total{collection=\"maps\",upstream=\"quiet\",outcome=\"created\"} 5\n",
            "rsagg_upstream_passes_total{collection=\"maps\",upstream=\"quiet\",verdict=\"ok\"} 3\n",
            "rsagg_upstream_lag_seconds{collection=\"maps\",upstream=\"quiet\"} 100\n",
            "rsagg_upstream_last_success_timestamp_seconds{collection=\"maps\",upstream=\"quiet\"} 999900\n",
            "# TYPE rsagg_run_duration_seconds histogram\n",
            "rsagg_run_duration_seconds_bucket{collection=\"maps\",le=\"1\"} 1\n",
            "rsagg_run_duration_seconds_bucket{collection=\"maps\",le=\"10\"} 2\n",
            "rsagg_run_duration_seconds_bucket{collection=\"maps\",le=\"+Inf\"} 2\n",
            "rsagg_run_duration_seconds_sum{collection=\"maps\"} 4.5\n",
            "rsagg_run_duration_seconds_count{collection=\"maps\"} 2\n",
            "rsagg_publish_duration_seconds_count{collection=\"maps\"} 0\n",
        ] {
            assert!(text.contains(line), "{line}\n{text}");
        }
        assert!(
            text.contains(&format!(
                "rsagg_build_info{{version=\"{}\"}} 1\n",
                env!("CARGO_PKG_VERSION")
            )),
            "{text}"
        );
        // An upstream no longer in the pipeline keeps its counters but has no lag.
        assert!(
            text.contains("upstream=\"gone\",verdict=\"ok\"} 0\n"),
            "{text}"
        );
        assert!(
            !text.contains("rsagg_upstream_lag_seconds{collection=\"maps\",upstream=\"gone\"}"),
            "{text}"
        );
    }

    #[test]
    fn counters_count_by_kind_and_status() {
        let c = HttpCounters::default();
        c.request(Kind::Copy, 200);
        c.request(Kind::Copy, 200);
        c.request(Kind::Other, 404);
        c.request(Kind::Other, 42);
        c.bytes(Kind::Copy).fetch_add(10, Ordering::Relaxed);
        assert_eq!(c.count(Kind::Copy, 200), 2);
        assert_eq!(c.count(Kind::Other, 599), 1, "out of range");
        let text = render(&[], &c, SystemTime::now(), Exposition::default());
        assert!(
            text.contains(
                "rsagg_http_requests_total{collection=\"\",kind=\"copy\",status=\"200\"} 2\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("rsagg_http_response_bytes_total{collection=\"\",kind=\"copy\"} 10\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE rsagg_http_requests_total counter\n"));
        assert!(text.contains("# TYPE rsagg_upstream_lag_seconds gauge\n"));
    }
}
