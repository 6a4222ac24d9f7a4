//! The run history of a collection ([`crate::paths::STATS_HISTORY`]): the last runs (the
//! pipeline's `collection.history_runs`, default [`RUNS_KEPT`]) as points for `/status`'s
//! charts, and running totals since the
//! collection's first recorded run, which `rsagg serve` exports as Prometheus counters and
//! histograms.
//!
//! Why totals in the store: `run --once` is a process per run (a CronJob), so counters kept
//! in its memory would start from zero every time and a scraper of `serve` would never see
//! them. The job adds each run to the totals it reads back from the store, so the figures
//! `serve` exports only grow (until the object is deleted, which Prometheus sees as a counter
//! reset). The object stays small: the points are capped, the totals are keyed by upstream
//! and outcome, and histograms have fixed buckets; it is rewritten whole after every run
//! (`run --once`) or poll pass (`run --follow`).
//!
//! Lag: an upstream's `last_success` is when the last pass that ended `ok` for it started.
//! Such a pass read the upstream's lists and processed everything they announced, so the
//! copy is at least as fresh as the upstream was at that instant; "how stale is my copy" is
//! then `now − last_success`, and it stays small for a quiet Source that is polled and
//! answers, and grows while passes fail or do not run.

use std::collections::BTreeMap;

use rsagg_model::W3cDateTime;
use serde::{Deserialize, Serialize};

use crate::report::RunReport;

/// Runs kept as points by default (the totals cover every run).
pub const RUNS_KEPT: usize = 200;

/// Upper bounds (seconds) of the buckets of run and publish durations.
pub const RUN_SECONDS_BOUNDS: [f64; 10] =
    [0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];

/// A histogram with fixed bucket bounds: `counts[i]` observations `≤ bounds[i]` and above
/// the bound before (not cumulative), the last count above every bound.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Histogram {
    /// Upper bounds, increasing.
    pub bounds: Vec<f64>,
    /// One more than the bounds.
    pub counts: Vec<u64>,
    /// Sum of the observations.
    pub sum: f64,
}

impl Histogram {
    /// An empty histogram with `bounds`.
    pub fn new(bounds: &[f64]) -> Histogram {
        Histogram {
            bounds: bounds.to_vec(),
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    /// Observations in all.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Adds one observation.
    pub fn observe(&mut self, v: f64) {
        self.fit(None);
        let i = self
            .bounds
            .iter()
            .position(|b| v <= *b)
            .unwrap_or(self.bounds.len());
        self.counts[i] += 1;
        self.sum += v;
    }

    /// Adds `other`'s observations (same bounds; with other bounds, `other` is counted in the
    /// buckets of its own bounds' upper edges).
    pub fn add(&mut self, other: &Histogram) {
        self.fit(Some(&other.bounds));
        for (i, n) in other.counts.iter().enumerate() {
            let edge = other.bounds.get(i).copied().unwrap_or(f64::INFINITY);
            let j = self
                .bounds
                .iter()
                .position(|b| edge <= *b)
                .unwrap_or(self.bounds.len());
            self.counts[j] += n;
        }
        self.sum += other.sum;
    }

    /// An object read from the store may have no bounds (a default) or a damaged count
    /// list: take `bounds` when empty and size the counts to the bounds.
    fn fit(&mut self, bounds: Option<&[f64]>) {
        if self.bounds.is_empty()
            && let Some(b) = bounds
        {
            self.bounds = b.to_vec();
        }
        self.counts.resize(self.bounds.len() + 1, 0);
    }

    /// `(upper bound, cumulative count)` per bucket, the last bound `+Inf` (the Prometheus
    /// form).
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        let mut out = Vec::with_capacity(self.counts.len());
        for (i, n) in self.counts.iter().enumerate() {
            total += n;
            out.push((self.bounds.get(i).copied().unwrap_or(f64::INFINITY), total));
        }
        if out.is_empty() {
            out.push((f64::INFINITY, 0));
        }
        out
    }
}

/// What the HTTP client of a run (or a pass) sent and received.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct FetchStats {
    /// Attempts by outcome (`ok`, `not_modified`, `redirect`, `client_error`,
    /// `server_error`, `transport_error`); retries included.
    pub requests: BTreeMap<String, u64>,
    /// Attempts that were retries.
    pub retries: u64,
    /// Response body bytes read.
    pub bytes: u64,
    /// Time of each attempt to the response head, in seconds.
    pub duration: Histogram,
}

impl FetchStats {
    /// Adds `other`.
    pub fn add(&mut self, other: &FetchStats) {
        for (k, v) in &other.requests {
            *self.requests.entry(k.clone()).or_default() += v;
        }
        self.retries += other.retries;
        self.bytes += other.bytes;
        self.duration.add(&other.duration);
    }
}

/// One upstream in one run, as the charts draw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamPoint {
    /// Upstream name.
    pub name: String,
    /// The pass ended ok.
    pub ok: bool,
    /// Lag at the end of the run: its end minus the upstream's `last_success` (`None`
    /// before the first success).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<f64>,
}

/// One run (or poll pass), as the charts draw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunPoint {
    /// When it started.
    pub started: Option<W3cDateTime>,
    /// When it ended.
    pub finished: Option<W3cDateTime>,
    /// Wall time of the harvest (without publishing), in seconds.
    pub harvest_seconds: f64,
    /// Wall time in all.
    pub seconds: f64,
    /// Resources processed (every outcome).
    pub resources: u64,
    /// Of those, created, updated or deleted.
    pub changed: u64,
    /// Response body bytes read from upstreams.
    pub bytes: u64,
    /// The upstreams the run harvested.
    pub upstreams: Vec<UpstreamPoint>,
}

impl RunPoint {
    /// Resources processed per second of harvest (0 for a run that took no time).
    pub fn rate(&self) -> f64 {
        let secs = if self.harvest_seconds > 0.0 {
            self.harvest_seconds
        } else {
            self.seconds
        };
        if secs > 0.0 {
            self.resources as f64 / secs
        } else {
            0.0
        }
    }
}

/// One upstream since the first recorded run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct UpstreamTotals {
    /// Passes that ended ok.
    pub passes_ok: u64,
    /// Passes that failed.
    pub passes_failed: u64,
    /// Resources by outcome (the names of [`crate::report::UpstreamReport::outcomes`]).
    pub resources: BTreeMap<String, u64>,
    /// When the last pass that ended ok started (see the module docs).
    pub last_success: Option<W3cDateTime>,
}

/// Totals since the first recorded run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Totals {
    /// Runs (and poll passes) recorded.
    pub runs: u64,
    /// Per upstream.
    pub upstreams: BTreeMap<String, UpstreamTotals>,
    /// The HTTP client's requests.
    pub fetch: FetchStats,
    /// Wall time of each run.
    pub run_seconds: Histogram,
    /// Wall time of each publish stage.
    pub publish_seconds: Histogram,
}

/// The history object.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunHistory {
    /// The last runs, oldest first, at most [`RUNS_KEPT`] (or the `kept` given to
    /// [`RunHistory::record`]).
    pub runs: Vec<RunPoint>,
    /// Since the first recorded run.
    pub totals: Totals,
}

/// When and how long a run took, beside its report.
#[derive(Debug, Clone)]
pub struct RunTimes {
    /// When it started.
    pub started: W3cDateTime,
    /// When it ended.
    pub finished: W3cDateTime,
    /// Wall time of the harvest stage (before publishing).
    pub harvest_seconds: f64,
}

fn seconds(t: &W3cDateTime) -> f64 {
    let (secs, nanos) = t.instant();
    secs as f64 + f64::from(nanos) / 1e9
}

impl RunHistory {
    /// Adds a run: `report.upstreams` are the upstreams it harvested, `fetch` what its HTTP
    /// client did. Keeps the last `kept` points (at least one).
    pub fn record(
        &mut self,
        report: &RunReport,
        times: &RunTimes,
        fetch: &FetchStats,
        kept: usize,
    ) {
        let t = &mut self.totals;
        t.runs += 1;
        t.fetch.add(fetch);
        if t.run_seconds.bounds.is_empty() {
            t.run_seconds = Histogram::new(&RUN_SECONDS_BOUNDS);
        }
        t.run_seconds.observe(report.seconds);
        if let Some(p) = &report.publish {
            if t.publish_seconds.bounds.is_empty() {
                t.publish_seconds = Histogram::new(&RUN_SECONDS_BOUNDS);
            }
            t.publish_seconds.observe(p.seconds.total);
        }
        let finished = seconds(&times.finished);
        let mut point = RunPoint {
            started: Some(times.started),
            finished: Some(times.finished),
            harvest_seconds: times.harvest_seconds,
            seconds: report.seconds,
            bytes: fetch.bytes,
            ..RunPoint::default()
        };
        for u in &report.upstreams {
            let ut = t.upstreams.entry(u.name.clone()).or_default();
            for (outcome, n) in u.outcomes() {
                *ut.resources.entry(outcome.to_owned()).or_default() += n;
                point.resources += n;
            }
            point.changed += u.created + u.updated + u.deleted;
            if u.ok() {
                ut.passes_ok += 1;
                ut.last_success = Some(times.started);
            } else {
                ut.passes_failed += 1;
            }
            point.upstreams.push(UpstreamPoint {
                name: u.name.clone(),
                ok: u.ok(),
                lag_seconds: ut
                    .last_success
                    .as_ref()
                    .map(|s| (finished - seconds(s)).max(0.0)),
            });
        }
        self.runs.push(point);
        let kept = kept.max(1);
        if self.runs.len() > kept {
            let extra = self.runs.len() - kept;
            self.runs.drain(..extra);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{UpstreamReport, Verdict};

    fn at(s: &str) -> W3cDateTime {
        W3cDateTime::parse(s).unwrap().value
    }

    fn report(ok: bool, created: u64) -> RunReport {
        let mut u = UpstreamReport::new("up");
        u.created = created;
        u.unchanged = 2;
        if !ok {
            u.verdict = Verdict::Failed;
        }
        RunReport {
            collection: "c".into(),
            upstreams: vec![u],
            seconds: 4.0,
            ..RunReport::default()
        }
    }

    #[test]
    fn totals_grow_points_are_capped_and_lag_counts_from_the_last_success() {
        let mut h = RunHistory::default();
        let fetch = FetchStats {
            requests: [("ok".to_owned(), 3)].into(),
            bytes: 100,
            ..FetchStats::default()
        };
        let times = |start: &str, end: &str| RunTimes {
            started: at(start),
            finished: at(end),
            harvest_seconds: 2.0,
        };
        h.record(
            &report(true, 6),
            &times("2026-01-01T00:00:00Z", "2026-01-01T00:00:04Z"),
            &fetch,
            2,
        );
        h.record(
            &report(false, 1),
            &times("2026-01-01T01:00:00Z", "2026-01-01T01:00:04Z"),
            &fetch,
            2,
        );
        h.record(
            &report(false, 0),
            &times("2026-01-01T02:00:00Z", "2026-01-01T02:00:04Z"),
            &fetch,
            2,
        );
        assert_eq!(h.runs.len(), 2, "capped");
        let t = &h.totals;
        assert_eq!(t.runs, 3);
        let up = &t.upstreams["up"];
        assert_eq!((up.passes_ok, up.passes_failed), (1, 2));
        assert_eq!(up.resources["created"], 7);
        assert_eq!(up.resources["unchanged"], 6);
        assert_eq!(up.last_success, Some(at("2026-01-01T00:00:00Z")));
        assert_eq!(t.fetch.requests["ok"], 9);
        assert_eq!(t.fetch.bytes, 300);
        assert_eq!(t.run_seconds.count(), 3);
        // The failed runs' lag counts from the start of the last successful one.
        let last = h.runs.last().unwrap();
        assert_eq!(last.upstreams[0].lag_seconds, Some(2.0 * 3600.0 + 4.0));
        assert_eq!(last.resources, 2);
        assert_eq!(h.runs[0].rate(), 3.0 / 2.0);
        // A success brings the lag back to the run's own length.
        h.record(
            &report(true, 0),
            &times("2026-01-01T03:00:00Z", "2026-01-01T03:00:04Z"),
            &fetch,
            2,
        );
        assert_eq!(h.runs.last().unwrap().upstreams[0].lag_seconds, Some(4.0));
        // The object reads back as written, and an older object without totals still reads.
        let json = serde_json::to_string(&h).unwrap();
        assert_eq!(serde_json::from_str::<RunHistory>(&json).unwrap(), h);
        let old: RunHistory = serde_json::from_str(r#"{"runs":[{"seconds":1}]}"#).unwrap();
        assert_eq!(old.totals.runs, 0);
    }

    #[test]
    fn histograms_are_cumulative_with_inf_and_merge() {
        let mut a = Histogram::new(&[1.0, 5.0]);
        a.observe(0.5);
        a.observe(1.0);
        a.observe(7.0);
        assert_eq!(a.cumulative(), vec![(1.0, 2), (5.0, 2), (f64::INFINITY, 3)]);
        let mut b = Histogram::default();
        b.add(&a);
        b.add(&a);
        assert_eq!(b.count(), 6);
        assert_eq!(b.sum, 17.0);
        assert_eq!(b.cumulative().last(), Some(&(f64::INFINITY, 6)));
    }
}
