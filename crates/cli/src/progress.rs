//! Progress of `rsagg run`: on a terminal one progress line (a `tracing-indicatif` bar, which
//! log lines print above rather than break), off a terminal a heartbeat log event every
//! `--progress-interval` with the same figures as fields, so a long baseline in a pod or CI
//! does not look hung.
//!
//! Both read the harvest's counters ([`rsagg_pipeline::Progress`]); rates are taken over a
//! recent window ([`Meter`]) so they follow the current pace, and the ETA is given only when
//! the total is final (no list is still being read).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytesize::ByteSize;
use rsagg_pipeline::{Progress, Snapshot};

/// The target of heartbeat events (enabled at `info` by the default `RSAGG_LOG`).
pub const TARGET: &str = "rsagg::progress";

/// How often the terminal line is redrawn with new figures.
const BAR_TICK: Duration = Duration::from_millis(250);
/// The window the terminal line's rates are taken over.
const BAR_WINDOW: Duration = Duration::from_secs(10);
/// Samples a [`Meter`] keeps at most (bounded whatever the window and tick).
const MAX_SAMPLES: usize = 64;

/// Rates over a recent window of samples.
#[derive(Debug)]
pub struct Meter {
    window: Duration,
    samples: VecDeque<(Instant, Snapshot)>,
}

/// What is shown: the counters, the rates and the ETA.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// The counters.
    pub at: Snapshot,
    /// Resources per second over the window.
    pub per_second: f64,
    /// Bytes per second over the window.
    pub bytes_per_second: f64,
    /// Time left at the current pace; only when the total is final and the pace not zero.
    pub eta: Option<Duration>,
}

impl Meter {
    /// A meter whose rates span at most `window` (at least the last two samples).
    pub fn new(window: Duration, start: Instant, first: Snapshot) -> Self {
        let mut samples = VecDeque::new();
        samples.push_back((start, first));
        Meter { window, samples }
    }

    /// Adds a sample and returns the figures at it.
    pub fn sample(&mut self, now: Instant, at: Snapshot) -> Figures {
        // Keep the newest sample that is at least `window` old as the base of the rates.
        while self.samples.len() > 1
            && (self.samples.len() >= MAX_SAMPLES
                || self
                    .samples
                    .get(1)
                    .is_some_and(|(t, _)| now.duration_since(*t) >= self.window))
        {
            self.samples.pop_front();
        }
        let (t0, s0) = self.samples.front().copied().unwrap_or((now, at));
        self.samples.push_back((now, at));
        let secs = now.duration_since(t0).as_secs_f64();
        let rate = |a: u64, b: u64| {
            if secs > 0.0 {
                a.saturating_sub(b) as f64 / secs
            } else {
                0.0
            }
        };
        let per_second = rate(at.done, s0.done);
        let left = at.total.saturating_sub(at.done);
        let eta = (at.total_final && per_second > 0.0)
            .then(|| Duration::from_secs((left as f64 / per_second).ceil() as u64));
        Figures {
            at,
            per_second,
            bytes_per_second: rate(at.bytes, s0.bytes),
            eta,
        }
    }
}

impl Figures {
    /// `412 of 20000 resources (2%), 3.1 MiB, 41.2/s, 320.0 KiB/s, ETA 7m 55s`; while a list
    /// is still being read the total is a lower bound and no ETA is given.
    pub fn line(&self) -> String {
        let s = &self.at;
        let mut line = if s.total_final {
            match (s.done * 100).checked_div(s.total) {
                Some(pct) => format!("{} of {} resources ({pct}%)", s.done, s.total),
                // Nothing listed yet (discovery, or an upstream with nothing new).
                None => format!("{} of {} resources", s.done, s.total),
            }
        } else {
            format!(
                "{} of at least {} resources (list still being read)",
                s.done, s.total
            )
        };
        line.push_str(&format!(
            ", {}, {:.1}/s, {}/s",
            ByteSize(s.bytes),
            self.per_second,
            ByteSize(self.bytes_per_second as u64)
        ));
        if let Some(eta) = self.eta {
            line.push_str(&format!(", ETA {}", humantime::format_duration(eta)));
        }
        line
    }

    /// Logs the figures as one event: the line as message, every figure as a field.
    pub fn log(&self) {
        let s = &self.at;
        tracing::info!(
            target: TARGET,
            done = s.done,
            total = s.total,
            total_final = s.total_final,
            bytes = s.bytes,
            per_second = round1(self.per_second),
            bytes_per_second = self.bytes_per_second.round() as u64,
            eta_seconds = self.eta.map(|d| d.as_secs()),
            "progress: {}",
            self.line()
        );
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Whether a heartbeat is due: always in `run --once` (a steady beat is the sign of life);
/// in `run --follow` only while something moves (a list being read, counters changed since
/// the last beat), so an idle follower stays quiet.
pub fn beat_due(follow: bool, last: Option<Snapshot>, now: Snapshot) -> bool {
    !follow || !now.total_final || last != Some(now)
}

/// A running progress display; [`Display::finish`] removes it.
pub struct Display {
    task: tokio::task::JoinHandle<()>,
}

impl Display {
    /// The terminal line when `terminal`, else the heartbeat every `interval` (none when the
    /// interval is zero).
    pub fn start(
        progress: Arc<Progress>,
        terminal: bool,
        interval: Duration,
        follow: bool,
    ) -> Option<Display> {
        let task = if terminal {
            tokio::spawn(bar(progress))
        } else if !interval.is_zero() {
            tokio::spawn(heartbeat(progress, interval, follow))
        } else {
            return None;
        };
        Some(Display { task })
    }

    /// Stops the display (the terminal line is cleared).
    pub async fn finish(self) {
        self.task.abort();
        let _ = self.task.await;
    }
}

async fn heartbeat(progress: Arc<Progress>, interval: Duration, follow: bool) {
    let first = progress.snapshot();
    // The window is one interval: each beat shows the pace since the previous one.
    let mut meter = Meter::new(interval, Instant::now(), first);
    let mut last = None;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = progress.snapshot();
        let figures = meter.sample(Instant::now(), now);
        if beat_due(follow, last, now) {
            figures.log();
        }
        last = Some(now);
    }
}

async fn bar(progress: Arc<Progress>) {
    use tracing_indicatif::span_ext::IndicatifSpanExt;
    // The bar belongs to this span (`indicatif.pb_show` selects it for the indicatif layer);
    // it is removed when the span closes, that is when this task is aborted.
    let span =
        tracing::info_span!(target: TARGET, "progress", indicatif.pb_show = tracing::field::Empty);
    if let Ok(style) = tracing_indicatif::style::ProgressStyle::with_template(
        "{spinner} {elapsed_precise} {wide_msg}",
    ) {
        span.pb_set_style(&style);
    }
    span.pb_start();
    let mut meter = Meter::new(BAR_WINDOW, Instant::now(), progress.snapshot());
    loop {
        let figures = meter.sample(Instant::now(), progress.snapshot());
        span.pb_set_message(&figures.line());
        tokio::time::sleep(BAR_TICK).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(done: u64, total: u64, total_final: bool, bytes: u64) -> Snapshot {
        Snapshot {
            done,
            total,
            total_final,
            bytes,
        }
    }

    #[test]
    fn rates_and_eta_over_the_window() {
        let t0 = Instant::now();
        let mut m = Meter::new(Duration::from_secs(10), t0, snap(0, 0, false, 0));
        let f = m.sample(t0 + Duration::from_secs(5), snap(50, 200, false, 5 * 1024));
        assert_eq!(f.per_second, 10.0);
        assert_eq!(f.bytes_per_second, 1024.0);
        assert_eq!(f.eta, None, "no ETA while the list is being read");
        let f = m.sample(
            t0 + Duration::from_secs(10),
            snap(100, 400, true, 10 * 1024),
        );
        assert_eq!(f.per_second, 10.0);
        assert_eq!(f.eta, Some(Duration::from_secs(30)));
        // Past the window the oldest samples no longer count: the pace is the recent one.
        let f = m.sample(
            t0 + Duration::from_secs(20),
            snap(300, 400, true, 10 * 1024),
        );
        assert_eq!(f.per_second, 20.0);
        assert_eq!(f.bytes_per_second, 0.0);
        assert_eq!(f.eta, Some(Duration::from_secs(5)));
        let f = m.sample(
            t0 + Duration::from_secs(30),
            snap(300, 400, true, 10 * 1024),
        );
        assert_eq!(f.eta, None, "no ETA at a standstill");
    }

    #[test]
    fn samples_are_bounded() {
        let t0 = Instant::now();
        let mut m = Meter::new(Duration::from_secs(3600), t0, Snapshot::default());
        for i in 1..1000u64 {
            m.sample(t0 + Duration::from_millis(i), snap(i, i, true, 0));
        }
        assert!(m.samples.len() <= MAX_SAMPLES);
    }

    #[test]
    fn the_line_says_what_is_known() {
        let f = Figures {
            at: snap(0, 0, true, 0),
            per_second: 0.0,
            bytes_per_second: 0.0,
            eta: None,
        };
        assert_eq!(f.line(), "0 of 0 resources, 0 B, 0.0/s, 0 B/s");
        let f = Figures {
            at: snap(412, 20000, true, 3 * 1024 * 1024 + 100 * 1024),
            per_second: 41.23,
            bytes_per_second: 320.0 * 1024.0,
            eta: Some(Duration::from_secs(475)),
        };
        assert_eq!(
            f.line(),
            "412 of 20000 resources (2%), 3.1 MiB, 41.2/s, 320.0 KiB/s, ETA 7m 55s"
        );
        let f = Figures {
            at: snap(10, 1034, false, 0),
            per_second: 0.0,
            bytes_per_second: 0.0,
            eta: None,
        };
        assert_eq!(
            f.line(),
            "10 of at least 1034 resources (list still being read), 0 B, 0.0/s, 0 B/s"
        );
    }

    #[test]
    fn an_idle_follower_does_not_beat() {
        let idle = snap(5, 5, true, 9);
        assert!(beat_due(false, Some(idle), idle), "run --once always beats");
        assert!(!beat_due(true, Some(idle), idle));
        assert!(beat_due(true, Some(idle), snap(6, 7, true, 9)));
        assert!(
            beat_due(true, Some(idle), snap(5, 6, false, 9)),
            "a list is being read"
        );
        assert!(beat_due(true, None, idle));
    }
}
