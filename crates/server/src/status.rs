//! `/status`: a server-rendered HTML page (no script; a little inline CSS) showing, per
//! collection, what its last run did: upstreams with their counts, verdict, route,
//! re-syncs, errors and warnings, each upstream's last success and lag, the quarantined
//! resources, the Change List, Change Dump, Resource Dump and garbage-collection figures,
//! and two inline SVG charts of the recorded runs (harvest rate, lag per upstream).
//! Laid out to fit 1280 px without a horizontal scrollbar (checked in headless Chromium).
//!
//! Everything that comes from upstreams or the store (URIs, messages, names) is HTML-escaped
//! where it is written: [`esc`] is the only way text enters the page.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use rsagg_layout::history::RunHistory;
use rsagg_layout::meta::GcMeta;
use rsagg_model::W3cDateTime;

use crate::chart::{Series, line_chart};
use crate::html::esc;
use crate::stats::{Observed, Stats, Upstream};

/// Quarantined resources listed per collection; the rest are counted in a "N more" line.
pub(crate) const QUARANTINE_SHOWN: usize = 50;
/// Warnings listed per upstream.
const WARNINGS_SHOWN: usize = 10;

/// `Content-Type` of the page.
pub(crate) const CONTENT_TYPE: &str = "text/html; charset=utf-8";

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}\
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}\
h3{font-size:1em;margin:1em 0 .3em}\
table{border-collapse:collapse;margin:.3em 0}th,td{border:1px solid #ddd;padding:2px 6px;\
text-align:left;vertical-align:top}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.ok{color:#070}.failed,.error{color:#b00}.muted{color:#777}code{font-size:.95em;word-break:break-all}\
ul{margin:.2em 0}\
table.upstreams,table.outcomes{max-width:100%}td.route{word-break:break-word}\
.charts{display:flex;flex-wrap:wrap;gap:1em;align-items:flex-start}\
figure.chart{margin:0;flex:1 1 420px;max-width:640px;min-width:0}figure.chart svg{width:100%;height:auto;display:block}\
figcaption{font-weight:600;margin:.2em 0}ul.legend{list-style:none;padding:0;margin:.2em 0;font-size:.9em}\
ul.legend li{display:inline-block;margin-right:1em}\
.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}";

/// One served collection as the page shows it.
pub(crate) struct CollectionStatus<'a> {
    pub name: &'a str,
    pub base_url: &'a str,
    pub base_path: &'a str,
    pub observed: &'a Observed,
}

/// A duration in seconds for people: `3d 4h`, `2h 5m`, `4m 10s`, `12s`, `0.4s`.
pub(crate) fn human_duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "?".into();
    }
    if secs < 10.0 {
        return format!("{secs:.1}s");
    }
    let s = secs.round() as u64;
    let (d, h, m, s) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h}h")
    } else if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

fn seconds(t: &W3cDateTime) -> f64 {
    let (secs, nanos) = t.instant();
    secs as f64 + f64::from(nanos) / 1e9
}

/// The whole page at `now`.
pub(crate) fn render(collections: &[CollectionStatus<'_>], now: SystemTime) -> String {
    let now = now
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0);
    let now_text = W3cDateTime::from_unix(now as i64, 0).to_string();
    let mut h = String::with_capacity(16 * 1024);
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>rsagg status</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>rsagg status</h1>\n<p class=\"muted\">{} collection(s) served; page made at \
         <time>{}</time>. Metrics: <a href=\"/metrics\">/metrics</a>.</p>\n",
        collections.len(),
        esc(&now_text)
    );
    if collections.len() > 1 {
        h.push_str("<ul class=\"toc\">\n");
        for c in collections {
            let _ = writeln!(h, "<li><a href=\"#c-{0}\">{0}</a></li>", esc(c.name));
        }
        h.push_str("</ul>\n");
    }
    for c in collections {
        collection(&mut h, c, now);
    }
    h.push_str("</body>\n</html>\n");
    h
}

fn collection(h: &mut String, c: &CollectionStatus<'_>, now: f64) {
    let name = esc(c.name);
    let base = esc(c.base_path);
    let _ = write!(
        h,
        "<section class=\"collection\" id=\"c-{name}\" data-collection=\"{name}\">\n\
         <h2>{name}</h2>\n<p>Base URL <code>{}</code> &middot; \
         <a href=\"{base}capabilitylist.xml\">Capability List</a> &middot; \
         <a href=\"{base}resourcelist.xml\">Resource List</a> &middot; \
         <a href=\"{base}changelist.xml\">Change List</a></p>\n",
        esc(c.base_url)
    );
    match &c.observed.stats {
        Err(e) => {
            let _ = writeln!(
                h,
                "<p class=\"error\">The last run's stats could not be read: {}</p>",
                esc(e)
            );
        }
        Ok(None) => h.push_str("<p class=\"norun\">no run yet</p>\n"),
        Ok(Some(s)) => run(h, s, history_of(c.observed), now),
    }
    history(h, c.observed);
    gc(h, c.observed);
    h.push_str("</section>\n");
}

/// The run history, when it could be read.
fn history_of(o: &Observed) -> Option<&RunHistory> {
    match &o.history {
        Ok(Some(h)) => Some(h),
        _ => None,
    }
}

fn run(h: &mut String, s: &Stats, history: Option<&RunHistory>, now: f64) {
    let finished = match &s.finished {
        Some(t) => format!(
            "<time>{}</time> ({} ago)",
            esc(&t.to_string()),
            human_duration((now - seconds(t)).max(0.0))
        ),
        None => "at an unknown time".into(),
    };
    let _ = writeln!(
        h,
        "<p class=\"lastrun\">Last run finished {finished}, took {}.</p>",
        human_duration(s.report.seconds)
    );
    upstreams(h, &s.report.upstreams, history, now);
    quarantine(h, s);
    publish(h, s);
    notify(h, s);
}

fn notify(h: &mut String, s: &Stats) {
    let Some(n) = &s.report.notify else {
        return;
    };
    let d = &n.delivery;
    let prepared = n
        .prepared
        .as_ref()
        .map(|p| {
            format!(
                "{} payload(s) prepared ({} change(s)), ",
                p.payloads, p.entries
            )
        })
        .unwrap_or_default();
    let _ = writeln!(
        h,
        "<h3>Change notifications</h3>\n<p class=\"notify\">Topic <code>{}</code>, hub <code>{}</code> ({}): \
         {prepared}<span data-figure=\"notifications-delivered\">{}</span> delivered, \
         <span data-figure=\"notifications-pending\">{}</span> pending, {} failed attempt(s), \
         {} sent in all{}.</p>",
        esc(&n.topic),
        esc(n.hub.as_str()),
        esc(&n.form),
        d.delivered,
        d.pending,
        d.failures,
        d.sent_total,
        if d.unfetched > 0 {
            format!(
                ", {} not fetched by the hub (receivers recover them from the Change List)",
                d.unfetched
            )
        } else {
            String::new()
        }
    );
    let errors = n
        .errors
        .iter()
        .chain(d.last_error.iter().filter(|_| d.pending > 0));
    for e in errors {
        let _ = writeln!(h, "<p class=\"error\">notifications: {}</p>", esc(e));
    }
}

fn upstreams(h: &mut String, ups: &[Upstream], history: Option<&RunHistory>, now: f64) {
    let _ = writeln!(h, "<h3>Upstreams ({})</h3>", ups.len());
    if ups.is_empty() {
        return;
    }
    // Two tables, so that neither is wider than the page at 1280 px: the upstream's state,
    // then the last run's counts by outcome.
    h.push_str(
        "<table class=\"upstreams\">\n<tr><th>upstream</th><th>verdict</th><th>route</th><th>sets</th>\
         <th>re-syncs</th><th>upstream checkpoint</th><th>last success</th><th>lag</th></tr>\n",
    );
    for u in ups {
        let verdict = if u.ok() { "ok" } else { "failed" };
        let _ = write!(
            h,
            "<tr data-upstream=\"{0}\"><td>{0}</td><td class=\"{verdict}\">{1}</td><td class=\"route\">{2}</td>\
             <td class=\"n\">{3}</td><td class=\"n\">{4}</td>",
            esc(&u.name),
            esc(verdict),
            esc(u.route.as_deref().unwrap_or("")),
            u.sets,
            u.resyncs.len()
        );
        match &u.checkpoint {
            Some(t) => {
                let _ = write!(h, "<td><time>{}</time></td>", esc(&t.to_string()));
            }
            None => h.push_str("<td class=\"muted\">none</td>"),
        }
        let success = history
            .and_then(|hi| hi.totals.upstreams.get(&u.name))
            .and_then(|t| t.last_success.as_ref());
        match success {
            Some(t) => {
                let _ = write!(
                    h,
                    "<td><time>{}</time></td><td class=\"lag\">{}</td>",
                    esc(&t.to_string()),
                    human_duration((now - seconds(t)).max(0.0))
                );
            }
            None => {
                h.push_str("<td class=\"muted\">never</td><td class=\"lag muted\">unknown</td>")
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n<table class=\"outcomes\">\n<tr><th>upstream</th>");
    for (outcome, _) in Upstream::default().outcomes() {
        let _ = write!(h, "<th>{outcome}</th>");
    }
    h.push_str("</tr>\n");
    for u in ups {
        let _ = write!(h, "<tr data-upstream=\"{0}\"><td>{0}</td>", esc(&u.name));
        for (outcome, n) in u.outcomes() {
            let _ = write!(h, "<td class=\"n\" data-outcome=\"{outcome}\">{n}</td>");
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
    for u in ups {
        if u.error.is_none() && u.resyncs.is_empty() && u.warnings.is_empty() {
            continue;
        }
        let _ = writeln!(
            h,
            "<div class=\"messages\" data-upstream=\"{0}\"><strong>{0}</strong>: errors, re-syncs and warnings of the last run",
            esc(&u.name)
        );
        h.push_str("<ul>\n");
        if let Some(e) = &u.error {
            let _ = writeln!(h, "<li class=\"error\">error: {}</li>", esc(e));
        }
        for r in &u.resyncs {
            let _ = writeln!(h, "<li class=\"resync\">re-synced: {}</li>", esc(r));
        }
        for w in u.warnings.iter().take(WARNINGS_SHOWN) {
            let _ = writeln!(h, "<li class=\"warning\">warning: {}</li>", esc(w));
        }
        if u.warnings.len() > WARNINGS_SHOWN {
            let _ = writeln!(
                h,
                "<li class=\"muted\">{} more warning(s)</li>",
                u.warnings.len() - WARNINGS_SHOWN
            );
        }
        h.push_str("</ul>\n</div>\n");
    }
}

/// The charts of the recorded runs: harvest rate and lag per upstream over time.
fn history(h: &mut String, o: &Observed) {
    let hi = match &o.history {
        Ok(Some(hi)) => hi,
        Ok(None) => return,
        Err(e) => {
            let _ = writeln!(
                h,
                "<p class=\"error\">The run history could not be read: {}</p>",
                esc(e)
            );
            return;
        }
    };
    let _ = writeln!(
        h,
        "<h3>History</h3>\n<p class=\"muted history\">The last {} of {} recorded run(s) and poll pass(es).</p>\n<div class=\"charts\">",
        hi.runs.len(),
        hi.totals.runs
    );
    let at = |p: &rsagg_layout::history::RunPoint| p.finished.as_ref().map(seconds);
    let rate = Series {
        name: "resources/s".into(),
        points: hi
            .runs
            .iter()
            .filter_map(|p| Some((at(p)?, p.rate())))
            .collect(),
    };
    h.push_str(&line_chart(
        "rate",
        "Harvest rate (resources processed per second of harvest)",
        &[rate],
        |v| format!("{v:.1}/s"),
    ));
    let mut lags: Vec<Series> = Vec::new();
    for p in &hi.runs {
        let Some(t) = at(p) else { continue };
        for u in &p.upstreams {
            let Some(lag) = u.lag_seconds else { continue };
            match lags.iter_mut().find(|s| s.name == u.name) {
                Some(s) => s.points.push((t, lag)),
                None => lags.push(Series {
                    name: u.name.clone(),
                    points: vec![(t, lag)],
                }),
            }
        }
    }
    h.push_str(&line_chart(
        "lag",
        "Lag per upstream at the end of each run (since its last successful pass)",
        &lags,
        human_duration,
    ));
    h.push_str("</div>\n");
}

fn quarantine(h: &mut String, s: &Stats) {
    let n = s.quarantine.len();
    let _ = writeln!(
        h,
        "<h3>Quarantine ({n}{})</h3>",
        if s.quarantine_truncated { "+" } else { "" }
    );
    if n == 0 {
        h.push_str("<p class=\"muted\">nothing in quarantine</p>\n");
        return;
    }
    h.push_str(
        "<table class=\"quarantine\">\n<tr><th>upstream</th><th>upstream URI</th><th>reason</th>\
         <th>expected</th><th>got</th><th>since</th></tr>\n",
    );
    for q in s.quarantine.iter().take(QUARANTINE_SHOWN) {
        let _ = writeln!(
            h,
            "<tr><td>{}</td><td class=\"uri\"><code>{}</code></td><td>{}</td><td><code>{}</code></td>\
             <td><code>{}</code></td><td><time>{}</time></td></tr>",
            esc(&q.upstream),
            esc(&q.uri),
            esc(&q.reason),
            esc(&q.expected),
            esc(&q.got),
            esc(&q.at.to_string())
        );
    }
    h.push_str("</table>\n");
    if n > QUARANTINE_SHOWN || s.quarantine_truncated {
        let _ = writeln!(
            h,
            "<p class=\"more\">{}{} more</p>",
            n.saturating_sub(QUARANTINE_SHOWN),
            if s.quarantine_truncated {
                " (and more not listed in the stats object)"
            } else {
                ""
            }
        );
    }
}

fn publish(h: &mut String, s: &Stats) {
    h.push_str("<h3>Published</h3>\n");
    let Some(p) = &s.report.publish else {
        h.push_str("<p class=\"muted\">the last run did not publish</p>\n");
        return;
    };
    h.push_str("<table class=\"published\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(h, "<tr><th>{k}</th><td>{v}</td></tr>");
    };
    if let Some(n) = p.resource_list_parts {
        row("Resource List", format!("{n} part(s) rewritten"));
    }
    if let Some(c) = &p.change_lists {
        row(
            "Change Lists",
            format!(
                "<span data-figure=\"open-entries\">{}</span> entries in the open list, {} closed now, {} closed kept, {} dropped",
                c.open_entries, c.closed_now, c.closed_total, c.dropped
            ),
        );
    }
    if let Some(c) = &p.change_dumps {
        row(
            "Change Dumps",
            format!(
                "{} new package(s), {} named, {} dropped, {} change(s) skipped",
                c.packages_now, c.packages_total, c.dropped, c.skipped
            ),
        );
    }
    if let Some(d) = &p.resource_dump {
        row(
            "Resource Dump",
            format!(
                "rebuilt: {} package(s), {} resource(s), {} bytes, {} skipped",
                d.packages, d.resources, d.bytes, d.skipped
            ),
        );
    }
    h.push_str("</table>\n");
    if !p.errors.is_empty() {
        h.push_str("<ul class=\"publish-errors\">\n");
        for e in &p.errors {
            let _ = writeln!(h, "<li class=\"error\">publish error: {}</li>", esc(e));
        }
        h.push_str("</ul>\n");
    }
}

fn gc(h: &mut String, o: &Observed) {
    let meta = match &o.gc {
        Ok(Some(meta)) => Ok(Some(meta.as_ref())),
        Ok(None) => Ok(None),
        Err(e) => Err(e),
    };
    match meta {
        Ok(Some(GcMeta { last: Some(g), .. })) => {
            let _ = writeln!(
                h,
                "<p class=\"gc\">Last blob garbage collection <time>{}</time>: {} object(s) scanned, \
                 {} kept, {} deleted, {} bytes freed.</p>",
                esc(&g.at.to_string()),
                g.scanned,
                g.kept,
                g.deleted,
                g.bytes_freed
            );
        }
        Ok(Some(GcMeta {
            last: None,
            first_due: Some(due),
        })) => {
            let _ = writeln!(
                h,
                "<p class=\"gc muted\">no blob garbage collection yet; the first is due \
                 <time>{}</time></p>",
                esc(&due.to_string())
            );
        }
        Ok(_) => h.push_str("<p class=\"gc muted\">no blob garbage collection yet</p>\n"),
        Err(e) => {
            let _ = writeln!(
                h,
                "<p class=\"gc error\">The garbage collection report could not be read: {}</p>",
                esc(e)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_duration(0.42), "0.4s");
        assert_eq!(human_duration(42.0), "42s");
        assert_eq!(human_duration(125.0), "2m 5s");
        assert_eq!(human_duration(2.0 * 3600.0 + 300.0), "2h 5m");
        assert_eq!(human_duration(3.0 * 86_400.0 + 4.0 * 3600.0), "3d 4h");
    }

    #[test]
    fn a_collection_without_a_run_says_so() {
        let o = Observed {
            stats: Ok(None),
            gc: Ok(None),
            history: Ok(None),
        };
        let page = render(
            &[CollectionStatus {
                name: "maps",
                base_url: "https://agg.example.org/maps/",
                base_path: "/maps/",
                observed: &o,
            }],
            SystemTime::now(),
        );
        assert!(page.contains("no run yet"), "{page}");
        assert!(page.contains("href=\"/maps/capabilitylist.xml\""), "{page}");
        assert!(!page.contains("<script"), "{page}");
    }

    #[test]
    fn the_history_is_drawn_and_the_lag_comes_from_the_last_success() {
        use rsagg_layout::history::{RunHistory, RunTimes};
        use rsagg_layout::report::{RunReport, UpstreamReport, Verdict};
        let at = |s: &str| W3cDateTime::parse(s).unwrap().value;
        let mut history = RunHistory::default();
        for (i, ok) in [true, true, false].into_iter().enumerate() {
            let mut u = UpstreamReport::new("museum");
            u.created = 10 * i as u64;
            if !ok {
                u.verdict = Verdict::Failed;
            }
            let report = RunReport {
                upstreams: vec![u],
                seconds: 2.0,
                ..RunReport::default()
            };
            let times = RunTimes {
                started: at(&format!("2026-11-20T0{i}:00:00Z")),
                finished: at(&format!("2026-11-20T0{i}:00:02Z")),
                harvest_seconds: 1.0,
            };
            history.record(&report, &times, &Default::default(), 200);
        }
        let mut u = UpstreamReport::new("museum");
        u.verdict = Verdict::Failed;
        u.checkpoint = Some(at("2025-01-01T00:00:00Z"));
        let stats = Stats {
            report: RunReport {
                upstreams: vec![u],
                ..RunReport::default()
            },
            ..Stats::default()
        };
        let o = Observed {
            stats: Ok(Some(std::sync::Arc::new(stats))),
            gc: Ok(None),
            history: Ok(Some(std::sync::Arc::new(history))),
        };
        let now = UNIX_EPOCH
            + std::time::Duration::from_secs(at("2026-11-20T03:00:00Z").instant().0 as u64);
        let page = render(
            &[CollectionStatus {
                name: "maps",
                base_url: "https://agg.example.org/maps/",
                base_path: "/maps/",
                observed: &o,
            }],
            now,
        );
        // The last success started at 01:00, two hours before `now`; the upstream's own
        // checkpoint (almost two years old) does not make the lag.
        assert!(
            page.contains("<time>2026-11-20T01:00:00Z</time></td><td class=\"lag\">2h 0m</td>"),
            "{page}"
        );
        assert!(page.contains("<table class=\"outcomes\">"), "{page}");
        assert!(page.contains("The last 3 of 3 recorded run(s)"), "{page}");
        assert_eq!(page.matches("<svg ").count(), 2, "{page}");
        assert!(page.contains("data-chart=\"rate\""), "{page}");
        assert!(page.contains("<g data-series=\"museum\">"), "{page}");
        // Rates 0, 10 and 20 resources per second of harvest.
        assert!(page.contains("(last 20.0/s)"), "{page}");
        assert!(!page.contains("<script"), "{page}");
    }

    #[test]
    fn before_the_first_collection_the_page_says_when_it_is_due() {
        let page = |gc: GcMeta| {
            let o = Observed {
                stats: Ok(None),
                gc: Ok(Some(std::sync::Arc::new(gc))),
                history: Ok(None),
            };
            let mut h = String::new();
            super::gc(&mut h, &o);
            h
        };
        let due = W3cDateTime::parse("2026-11-22T10:00:00Z").unwrap().value;
        let scheduled = page(GcMeta {
            last: None,
            first_due: Some(due),
        });
        assert!(
            scheduled.contains("no blob garbage collection yet; the first is due")
                && scheduled.contains("2026-11-22T10:00:00Z"),
            "{scheduled}"
        );
        let ran = page(GcMeta {
            last: Some(rsagg_layout::report::GcReport {
                scanned: 7,
                kept: 5,
                deleted: 2,
                bytes_freed: 9,
                at: due,
            }),
            first_due: None,
        });
        assert!(ran.contains("Last blob garbage collection"), "{ran}");
        assert!(ran.contains("7 object(s) scanned"), "{ran}");
    }
}
