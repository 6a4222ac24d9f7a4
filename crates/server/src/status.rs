//! `/status` and `/status/{collection}`: server-rendered HTML pages (no script; a little
//! inline CSS).
//!
//! `/status` is the overview, one row per collection (state, last run, last success, lag,
//! resources, quarantined, failed upstreams), failing collections first, filterable without
//! script by query parameters (`q`: a substring of the name; `state`: `failing`, `norun`,
//! `ok`; `page`), at most [`OVERVIEW_ROWS`] rows a page, so the page stays small whatever
//! the fleet (at 4,000 collections with names of the longest 64 bytes a page is under
//! 1 MB; see `tests/fleet.rs`).
//!
//! `/status/{collection}` shows what the collection's last run did: upstreams with their
//! counts, verdict, route, re-syncs, errors and warnings, each upstream's last success and
//! lag, the quarantined resources, the Change List, Change Dump, Resource Dump and
//! garbage-collection figures, and two inline SVG charts of the recorded runs (harvest
//! rate, lag per upstream). Laid out to fit 1280 px without a horizontal scrollbar (checked
//! in headless Chromium).
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
/// Rows of the overview per page: a row is ~245 bytes plus three times the collection's
/// name (at most 64 bytes: 877 KB a page, `tests/fleet.rs`), so a page stays under 1 MB.
pub(crate) const OVERVIEW_ROWS: usize = 2000;

/// `Content-Type` of the page.
pub(crate) const CONTENT_TYPE: &str = "text/html; charset=utf-8";

// The overview's cells do not wrap, except the name: a long one wraps rather than widen the
// page past 1280 px.
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
.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:-.1em}\
form.filter{margin:.6em 0}table.overview td{white-space:nowrap}\
table.overview td:first-child{white-space:normal;word-break:break-all}";

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

/// Unix seconds of `now`.
fn unix(now: SystemTime) -> f64 {
    now.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The page's head and title, and the line saying when it was made.
fn head(h: &mut String, title: &str, now: f64) {
    let now_text = W3cDateTime::from_unix(now as i64, 0).to_string();
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>{title}</h1>\n<p class=\"muted\">Page made at <time>{}</time>. \
         <a href=\"/status\">All collections</a> &middot; Metrics: <a href=\"/metrics\">/metrics</a>.</p>\n",
        esc(&now_text)
    );
}

/// `/status/{collection}`: the collection's page at `now`.
pub(crate) fn render_detail(c: &CollectionStatus<'_>, now: SystemTime) -> String {
    let now = unix(now);
    let mut h = String::with_capacity(16 * 1024);
    head(&mut h, &format!("rsagg status: {}", esc(c.name)), now);
    collection(&mut h, c, now);
    h.push_str("</body>\n</html>\n");
    h
}

/// A collection's state on the overview, in the order shown (failing first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Health {
    /// Its store could not be read, an upstream failed in the last run, or the last
    /// publish had errors.
    Failing,
    /// No run has left its stats yet.
    NoRun,
    /// The last run went well.
    Ok,
}

impl Health {
    /// What `?state=` calls it.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Health::Failing => "failing",
            Health::NoRun => "norun",
            Health::Ok => "ok",
        }
    }

    /// `?state=` value → state.
    pub(crate) fn from_key(key: &str) -> Option<Health> {
        [Health::Failing, Health::NoRun, Health::Ok]
            .into_iter()
            .find(|h| h.key() == key)
    }

    fn text(self) -> &'static str {
        match self {
            Health::Failing => "failing",
            Health::NoRun => "no run yet",
            Health::Ok => "ok",
        }
    }

    fn class(self) -> &'static str {
        match self {
            Health::Failing => "failed",
            Health::NoRun => "muted",
            Health::Ok => "ok",
        }
    }

    /// The state of a collection that left `o`.
    pub(crate) fn of(o: &Observed) -> Health {
        match &o.stats {
            _ if !o.store_ok() => Health::Failing,
            Ok(Some(s))
                if s.report.upstreams.iter().any(|u| !u.ok())
                    || s.report
                        .publish
                        .as_ref()
                        .is_some_and(|p| !p.errors.is_empty()) =>
            {
                Health::Failing
            }
            Ok(Some(_)) => Health::Ok,
            _ => Health::NoRun,
        }
    }
}

/// What the overview shows: the collections whose name contains `q` (ignoring case) and,
/// with `state`, in that state; page `page` (from 1) of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Filter {
    pub q: String,
    pub state: Option<Health>,
    pub page: usize,
}

impl Filter {
    /// The filter a query string asks for; `Err` names a parameter value it cannot use.
    pub(crate) fn parse(query: Option<&str>) -> Result<Filter, String> {
        let mut f = Filter {
            page: 1,
            ..Filter::default()
        };
        for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            match &*k {
                "q" => f.q = v.trim().to_owned(),
                "state" if v.is_empty() => f.state = None,
                "state" => {
                    f.state = Some(Health::from_key(&v).ok_or_else(|| {
                        format!(
                            "state `{}`: one of failing, norun, ok",
                            rsagg_model::excerpt(&v, 40)
                        )
                    })?)
                }
                "page" => {
                    f.page = v.parse::<usize>().ok().filter(|p| *p >= 1).ok_or_else(|| {
                        format!("page `{}`: a number from 1", rsagg_model::excerpt(&v, 40))
                    })?
                }
                _ => {}
            }
        }
        Ok(f)
    }

    /// The query string of this filter at page `page`.
    fn query(&self, page: usize) -> String {
        let mut q = url::form_urlencoded::Serializer::new(String::new());
        if !self.q.is_empty() {
            q.append_pair("q", &self.q);
        }
        if let Some(s) = self.state {
            q.append_pair("state", s.key());
        }
        if page > 1 {
            q.append_pair("page", &page.to_string());
        }
        let q = q.finish();
        if q.is_empty() { q } else { format!("?{q}") }
    }
}

/// `name` as one path segment: unreserved characters kept, the rest percent-encoded
/// (configured names are `[a-z0-9-]+`, kept as they are).
pub(crate) fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// `/status`: the overview of `collections` (in the order served) at `now`, as `filter`
/// asks.
pub(crate) fn render_overview(
    collections: &[CollectionStatus<'_>],
    filter: &Filter,
    now: SystemTime,
) -> String {
    let now = unix(now);
    let mut rows: Vec<(Health, &CollectionStatus<'_>)> = collections
        .iter()
        .map(|c| (Health::of(c.observed), c))
        .collect();
    let count = |h: Health| rows.iter().filter(|(r, _)| *r == h).count();
    let (failing, norun, ok) = (
        count(Health::Failing),
        count(Health::NoRun),
        count(Health::Ok),
    );
    // Stable: within a state, the order the collections are served in.
    rows.sort_by_key(|(h, _)| *h);
    let q = filter.q.to_lowercase();
    rows.retain(|(h, c)| {
        filter.state.is_none_or(|s| s == *h) && (q.is_empty() || c.name.to_lowercase().contains(&q))
    });
    let pages = rows.len().div_ceil(OVERVIEW_ROWS).max(1);
    let page = filter.page.min(pages);
    let shown =
        &rows[((page - 1) * OVERVIEW_ROWS).min(rows.len())..(page * OVERVIEW_ROWS).min(rows.len())];

    let mut h = String::with_capacity(256 * (shown.len() + 8));
    head(&mut h, "rsagg status", now);
    let _ = writeln!(
        h,
        "<p class=\"summary\">{} collection(s) served: \
         <a href=\"/status?state=failing\" class=\"failed\" data-figure=\"failing\">{failing} failing</a>, \
         <a href=\"/status?state=norun\" data-figure=\"norun\">{norun} without a run yet</a>, \
         <a href=\"/status?state=ok\" class=\"ok\" data-figure=\"ok\">{ok} ok</a>.</p>",
        collections.len()
    );
    let option = |h: Option<Health>, label: &str| {
        format!(
            "<option value=\"{}\"{}>{label}</option>",
            h.map_or("", Health::key),
            if filter.state == h { " selected" } else { "" }
        )
    };
    let _ = writeln!(
        h,
        "<form class=\"filter\" method=\"get\" action=\"/status\">\
         <label>Collection name contains <input type=\"search\" name=\"q\" value=\"{}\"></label> \
         <label>state <select name=\"state\">{}{}{}{}</select></label> \
         <button type=\"submit\">Show</button></form>",
        esc(&filter.q),
        option(None, "any"),
        option(Some(Health::Failing), "failing"),
        option(Some(Health::NoRun), "no run yet"),
        option(Some(Health::Ok), "ok"),
    );
    let _ = writeln!(
        h,
        "<p class=\"shown\">{} collection(s) match{}; failing first.</p>",
        rows.len(),
        if pages > 1 {
            format!(", page {page} of {pages}")
        } else {
            String::new()
        }
    );
    h.push_str(
        "<table class=\"overview\">\n<tr><th>collection</th><th>state</th><th>last run</th>\
         <th>last success</th><th>lag</th><th>resources</th><th>quarantined</th><th>upstreams</th></tr>\n",
    );
    for (health, c) in shown {
        overview_row(&mut h, *health, c, now);
    }
    h.push_str("</table>\n");
    if pages > 1 {
        h.push_str("<p class=\"pages\">");
        if page > 1 {
            let _ = write!(
                h,
                "<a rel=\"prev\" href=\"/status{}\">previous page</a> ",
                esc(&filter.query(page - 1))
            );
        }
        if page < pages {
            let _ = write!(
                h,
                "<a rel=\"next\" href=\"/status{}\">next page</a>",
                esc(&filter.query(page + 1))
            );
        }
        h.push_str("</p>\n");
    }
    h.push_str("</body>\n</html>\n");
    h
}

/// One collection's row of the overview: small (no text from upstreams), since there may
/// be thousands.
fn overview_row(h: &mut String, health: Health, c: &CollectionStatus<'_>, now: f64) {
    let o = c.observed;
    let name = esc(c.name);
    let _ = write!(
        h,
        "<tr data-collection=\"{name}\"><td><a href=\"/status/{}\">{name}</a></td><td class=\"{}\">{}</td>",
        esc(&segment(c.name)),
        health.class(),
        health.text()
    );
    let stats = match &o.stats {
        Ok(Some(s)) => Some(s),
        _ => None,
    };
    match stats.and_then(|s| s.finished.as_ref()) {
        Some(t) => {
            let _ = write!(
                h,
                "<td>{} ago</td>",
                human_duration((now - seconds(t)).max(0.0))
            );
        }
        None => h.push_str("<td class=\"muted\">never</td>"),
    }
    let lag = crate::metrics::collection_lag_seconds(o, now);
    match lag {
        Some(lag) => {
            let at = W3cDateTime::from_unix((now - lag) as i64, 0);
            let _ = write!(
                h,
                "<td><time>{}</time></td><td class=\"n lag\">{}</td>",
                esc(&at.to_string()),
                human_duration(lag)
            );
        }
        None => h.push_str("<td class=\"muted\">never</td><td class=\"n muted\">unknown</td>"),
    }
    match &o.resources {
        Ok(Some(n)) => {
            let _ = write!(h, "<td class=\"n\">{n}</td>");
        }
        _ => h.push_str("<td class=\"n muted\">?</td>"),
    }
    match stats {
        Some(s) => {
            let failed = s.report.upstreams.iter().filter(|u| !u.ok()).count();
            let _ = write!(
                h,
                "<td class=\"n\">{}{}</td><td class=\"n\">{failed} of {} failed</td>",
                s.quarantine.len(),
                if s.quarantine_truncated { "+" } else { "" },
                s.report.upstreams.len()
            );
        }
        None if !o.store_ok() => {
            h.push_str("<td class=\"muted\"></td><td class=\"error\">store unreadable</td>")
        }
        None => h.push_str("<td class=\"muted\"></td><td class=\"muted\"></td>"),
    }
    h.push_str("</tr>\n");
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
        Ok(Some(s)) => run(h, s, history_of(c.observed), c.observed.snapshot_at, now),
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

fn run(
    h: &mut String,
    s: &Stats,
    history: Option<&RunHistory>,
    snapshot_at: Option<W3cDateTime>,
    now: f64,
) {
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
    listings(h, &s.report.upstreams, s.report.seconds);
    quarantine(h, s);
    publish(h, s, snapshot_at, now);
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

/// OAI-PMH passes: records listed of the total the provider's `completeListSize`s
/// announce, date windows done, an ETA at the last run's rate, and when a parked upstream
/// may be asked again. Only upstreams with something to say get a row.
fn listings(h: &mut String, ups: &[Upstream], run_seconds: f64) {
    let rows: Vec<&Upstream> = ups
        .iter()
        .filter(|u| u.listing.is_some() || u.parked_until.is_some())
        .collect();
    if rows.is_empty() {
        return;
    }
    h.push_str(
        "<table class=\"listings\">\n<tr><th>upstream</th><th>records listed</th><th>of</th>\
         <th>date windows done</th><th>ETA</th><th>parked until</th></tr>\n",
    );
    for u in rows {
        let _ = write!(h, "<tr data-upstream=\"{0}\"><td>{0}</td>", esc(&u.name));
        match &u.listing {
            Some(l) => {
                let this_run =
                    u.created + u.updated + u.unchanged + u.deleted + u.quarantined + u.failed;
                let rate = this_run as f64 / run_seconds.max(0.001);
                let eta = match l.total {
                    Some(t) if t > l.done && rate > 0.0 => {
                        human_duration((t - l.done) as f64 / rate)
                    }
                    Some(_) => "done".into(),
                    None => "unknown".into(),
                };
                let _ = write!(
                    h,
                    "<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} of {}</td><td>{}</td>",
                    l.done,
                    l.total
                        .map_or_else(|| "unknown".to_owned(), |t| t.to_string()),
                    l.windows_done,
                    l.windows,
                    esc(&eta)
                );
            }
            None => h.push_str("<td></td><td></td><td></td><td></td>"),
        }
        match &u.parked_until {
            Some(t) => {
                let _ = write!(h, "<td><time>{}</time></td>", esc(&t.to_utc().to_string()));
            }
            None => h.push_str("<td class=\"muted\">no</td>"),
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</table>\n");
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

fn publish(h: &mut String, s: &Stats, snapshot_at: Option<W3cDateTime>, now: f64) {
    h.push_str("<h3>Published</h3>\n");
    let Some(p) = &s.report.publish else {
        h.push_str("<p class=\"muted\">the last run did not publish</p>\n");
        return;
    };
    h.push_str("<table class=\"published\">\n");
    let mut row = |k: &str, v: String| {
        let _ = writeln!(h, "<tr><th>{k}</th><td>{v}</td></tr>");
    };
    match (p.resource_list_parts, snapshot_at) {
        // On the interval: the snapshot, and how old it is (spec 10.1: a snapshot as of
        // its `at`, the Change Lists since carrying the changes).
        (n, Some(at)) => row(
            "Resource List",
            format!(
                "snapshot as of <time>{}</time> ({} ago; the changes since are in the Change Lists), {} part(s) rewritten",
                esc(&at.to_string()),
                human_duration((now - seconds(&at)).max(0.0)),
                n.unwrap_or(0)
            ),
        ),
        (Some(n), None) => row("Resource List", format!("{n} part(s) rewritten")),
        (None, None) => {}
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
    fn filters_come_from_the_query_and_go_back_into_the_links() {
        let f = Filter::parse(Some("q=+Maps+&state=failing&page=2&other=1")).unwrap();
        assert_eq!(
            f,
            Filter {
                q: "Maps".into(),
                state: Some(Health::Failing),
                page: 2
            }
        );
        assert_eq!(f.query(3), "?q=Maps&state=failing&page=3");
        assert_eq!(Filter::parse(None).unwrap().query(1), "");
        assert_eq!(Filter::parse(Some("state=")).unwrap().state, None);
        for bad in ["state=broken", "page=0", "page=x"] {
            assert!(Filter::parse(Some(bad)).is_err(), "{bad}");
        }
        assert_eq!(segment("maps-2"), "maps-2");
        assert_eq!(segment("a/b c"), "a%2Fb%20c");
    }

    #[test]
    fn the_overview_puts_failing_collections_first_and_pages() {
        use rsagg_layout::report::{RunReport, UpstreamReport, Verdict};
        let stats = |failed: bool| {
            let mut u = UpstreamReport::new("up");
            if failed {
                u.verdict = Verdict::Failed;
            }
            Observed {
                stats: Ok(Some(std::sync::Arc::new(Stats {
                    report: RunReport {
                        upstreams: vec![u],
                        ..RunReport::default()
                    },
                    ..Stats::default()
                }))),
                gc: Ok(None),
                history: Ok(None),
                resources: Ok(Some(5)),
                snapshot_at: None,
                store: Ok(()),
            }
        };
        let observed: Vec<(String, Observed)> = (0..OVERVIEW_ROWS + 3)
            .map(|i| (format!("c{i}"), stats(i % 1000 == 999)))
            .collect();
        let collections: Vec<CollectionStatus<'_>> = observed
            .iter()
            .map(|(name, o)| CollectionStatus {
                name,
                base_url: "https://agg.example.org/x/",
                base_path: "/x/",
                observed: o,
            })
            .collect();
        let page = render_overview(
            &collections,
            &Filter::parse(None).unwrap(),
            SystemTime::now(),
        );
        let rows: Vec<&str> = page
            .split("<tr data-collection=\"")
            .skip(1)
            .map(|r| r.split('"').next().unwrap())
            .collect();
        assert_eq!(rows.len(), OVERVIEW_ROWS);
        assert_eq!(&rows[..3], ["c999", "c1999", "c0"]);
        assert!(page.contains("page 1 of 2"), "{page}");
        assert!(page.contains("<a rel=\"next\" href=\"/status?page=2\">"));
        let last = render_overview(
            &collections,
            &Filter::parse(Some("page=9")).unwrap(),
            SystemTime::now(),
        );
        assert_eq!(
            last.matches("<tr data-collection=").count(),
            3,
            "the last page"
        );
        assert!(last.contains("<a rel=\"prev\" href=\"/status\">"));
    }

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
            resources: Ok(None),
            snapshot_at: None,
            store: Ok(()),
        };
        let page = render_detail(
            &CollectionStatus {
                name: "maps",
                base_url: "https://agg.example.org/maps/",
                base_path: "/maps/",
                observed: &o,
            },
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
            resources: Ok(None),
            snapshot_at: None,
            store: Ok(()),
        };
        let now = UNIX_EPOCH
            + std::time::Duration::from_secs(at("2026-11-20T03:00:00Z").instant().0 as u64);
        let page = render_detail(
            &CollectionStatus {
                name: "maps",
                base_url: "https://agg.example.org/maps/",
                base_path: "/maps/",
                observed: &o,
            },
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

    /// On `publish.resourcelist = "interval"` the Published table says which snapshot is
    /// out there and how old it is; a patched list says only the parts rewritten.
    #[test]
    fn an_interval_snapshot_is_shown_with_its_age() {
        let at = |s: &str| W3cDateTime::parse(s).unwrap().value;
        let stats = Stats {
            report: rsagg_layout::report::RunReport {
                publish: Some(rsagg_layout::report::PublishReport {
                    resource_list_parts: Some(0),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Stats::default()
        };
        let now = at("2026-11-20T03:00:00Z").instant().0 as f64;
        let mut interval = String::new();
        super::publish(&mut interval, &stats, Some(at("2026-11-19T03:00:00Z")), now);
        assert!(
            interval.contains(
                "snapshot as of <time>2026-11-19T03:00:00Z</time> (1d 0h ago; the changes since are in the Change Lists), 0 part(s) rewritten"
            ),
            "{interval}"
        );
        let mut patched = String::new();
        super::publish(&mut patched, &stats, None, now);
        assert!(
            patched.contains("<td>0 part(s) rewritten</td>"),
            "{patched}"
        );
        assert!(!patched.contains("snapshot"), "{patched}");
    }

    #[test]
    fn before_the_first_collection_the_page_says_when_it_is_due() {
        let page = |gc: GcMeta| {
            let o = Observed {
                stats: Ok(None),
                gc: Ok(Some(std::sync::Arc::new(gc))),
                history: Ok(None),
                resources: Ok(None),
                snapshot_at: None,
                store: Ok(()),
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

#[cfg(test)]
mod listing_tests {
    use super::*;

    /// Issue 44 point 6: an OAI-PMH pass's progress (records of the announced total,
    /// windows, an ETA at the last run's rate) and a parked upstream are on the page.
    #[test]
    fn oai_listings_show_the_total_an_eta_and_parking() {
        use rsagg_layout::report::{Listing, UpstreamReport};
        let mut a = UpstreamReport::new("arxiv");
        a.created = 1_000;
        a.listing = Some(Listing {
            done: 250_000,
            total: Some(2_500_000),
            windows_done: 3,
            windows: 18,
        });
        let mut b = UpstreamReport::new("zenodo");
        b.parked_until = Some(W3cDateTime::from_unix(1_767_225_600, 0));
        let quiet = UpstreamReport::new("quiet");
        let mut h = String::new();
        listings(&mut h, &[a, b, quiet], 10.0);
        assert!(h.contains("<td class=\"n\">250000</td><td class=\"n\">2500000</td><td class=\"n\">3 of 18</td>"), "{h}");
        // 2,250,000 records left at 100 a second.
        assert!(h.contains(&human_duration(22_500.0)), "{h}");
        assert!(
            h.contains("data-upstream=\"zenodo\"") && h.contains("2026-01-01"),
            "{h}"
        );
        assert!(!h.contains("quiet"), "{h}");
        let mut none = String::new();
        listings(&mut none, &[UpstreamReport::new("x")], 1.0);
        assert!(none.is_empty());
    }
}
