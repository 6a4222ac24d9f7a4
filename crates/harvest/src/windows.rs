//! The date windows of an OAI-PMH pass (`[[upstream]] window`): a long or first harvest cut
//! into selective harvests by `from`/`until` (OAI-PMH 2.0 section 3.4), each listed,
//! committed and resumed on its own, so that a lost `resumptionToken` (expired, single-use
//! after a restart, section 3.5) re-lists one window rather than the whole set, and a run
//! goes on from the first window not done.
//!
//! Bounds are inclusive at both ends (section 3.3.1) and written in the repository's
//! granularity: a window ends one unit before the next begins. The first window of a whole
//! list asks no `from`, so that nothing older than the first boundary is missed whatever
//! `earliestDatestamp` claims (placeholders such as `0001-01-01` or `1970-01-01` are common);
//! the last ends at the provider's clock (its `responseDate`), never past it.

use std::time::Duration;

use rsagg_oai::{Datestamp, Granularity};
use rsagg_store::{OaiPass, OaiWindow, WindowStatus};

/// Boundaries start no earlier than this (2000-01-01T00:00:00Z): OAI-PMH dates from 2001,
/// and an `earliestDatestamp` before it is a placeholder. Older datestamps fall in the first
/// window, which asks no `from`.
const FLOOR: i64 = 946_684_800;

/// At most this many windows in a pass: a longer span gets longer windows, so that the pass
/// (committed with every page) stays small.
pub(crate) const MAX_WINDOWS: i64 = 1_000;

/// The windows of a new pass up to `until` (the provider's clock): from `from`, or the
/// whole list when `from` is `None` (starting at `earliest`, floored at [`FLOOR`]); cut
/// every `size`, or one window when `size` is `None`.
pub(crate) fn plan(
    from: Option<Datestamp>,
    until: Datestamp,
    earliest: Option<Datestamp>,
    size: Option<Duration>,
    g: Granularity,
) -> Vec<OaiWindow> {
    let start = match from {
        Some(f) => f,
        None => Datestamp::from_unix(earliest.map_or(FLOOR, |e| e.unix().max(FLOOR))).floor(g),
    };
    let mut windows = Vec::new();
    let Some(size) = size else {
        windows.push(window(from, until));
        return windows;
    };
    let unit = g.unit_secs();
    let span = until.unix() - start.unix();
    let mut step = i64::try_from(size.as_secs()).unwrap_or(i64::MAX).max(unit);
    if span / step >= MAX_WINDOWS {
        step = span / MAX_WINDOWS + 1;
    }
    // Whole units, so that every bound is exact in the repository's granularity.
    step = (step + unit - 1) / unit * unit;
    let mut lo = from;
    let mut next = start.unix().saturating_add(step);
    while next <= until.unix() {
        let hi = Datestamp::from_unix(next - unit);
        windows.push(window(lo, hi));
        lo = Some(Datestamp::from_unix(next));
        next = next.saturating_add(step);
    }
    windows.push(window(lo, until));
    windows
}

/// A pass begun by another process, extended to `now`: the records changed since its
/// `until` are asked by windows appended after its own (from its `until` minus one unit:
/// datestamps are not unique), and `now` becomes its `until`.
pub(crate) fn extend(pass: &mut OaiPass, now: Datestamp, size: Option<Duration>, g: Granularity) {
    let Some(until) = pass.until.as_ref().map(datestamp_of) else {
        return;
    };
    if now <= until {
        return;
    }
    pass.windows
        .extend(plan(Some(until.minus_unit(g)), now, None, size, g));
    pass.until = Some(now.to_w3c());
}

fn window(from: Option<Datestamp>, until: Datestamp) -> OaiWindow {
    OaiWindow {
        from: from.map(Datestamp::to_w3c),
        until: Some(until.to_w3c()),
        status: WindowStatus::Pending,
        ..OaiWindow::default()
    }
}

/// A window's bounds as datestamps.
pub(crate) fn bounds(w: &OaiWindow) -> (Option<Datestamp>, Option<Datestamp>) {
    (
        w.from.as_ref().map(datestamp_of),
        w.until.as_ref().map(datestamp_of),
    )
}

pub(crate) fn datestamp_of(t: &rsagg_model::W3cDateTime) -> Datestamp {
    Datestamp::from_unix(t.instant().0)
}

/// `from … until` of a window, in the repository's granularity, for messages.
pub(crate) fn describe(w: &OaiWindow, g: Granularity) -> String {
    let (from, until) = bounds(w);
    format!(
        "{} … {}",
        from.map_or_else(|| "(the start)".to_owned(), |f| f.format(g)),
        until.map_or_else(String::new, |u| u.format(g))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ds(s: &str) -> Datestamp {
        Datestamp::parse(s).unwrap()
    }

    fn shown(ws: &[OaiWindow], g: Granularity) -> Vec<String> {
        ws.iter().map(|w| describe(w, g)).collect()
    }

    const YEAR: Duration = Duration::from_secs(365 * 86_400);

    #[test]
    fn a_whole_list_is_cut_from_the_earliest_datestamp_and_its_first_window_asks_no_from() {
        let ws = plan(
            None,
            ds("2003-06-01T12:00:00Z"),
            Some(ds("2001-01-01T00:00:00Z")),
            Some(YEAR),
            Granularity::Second,
        );
        assert_eq!(
            shown(&ws, Granularity::Second),
            [
                "(the start) … 2001-12-31T23:59:59Z",
                "2002-01-01T00:00:00Z … 2002-12-31T23:59:59Z",
                "2003-01-01T00:00:00Z … 2003-06-01T12:00:00Z",
            ]
        );
    }

    #[test]
    fn windows_meet_without_gap_or_overlap_in_days_and_end_at_the_providers_clock() {
        let g = Granularity::Day;
        let ws = plan(
            Some(ds("2024-01-01")),
            ds("2024-03-15T10:00:00Z"),
            None,
            Some(Duration::from_secs(30 * 86_400)),
            g,
        );
        assert_eq!(
            shown(&ws, g),
            [
                "2024-01-01 … 2024-01-30",
                "2024-01-31 … 2024-02-29",
                "2024-03-01 … 2024-03-15",
            ]
        );
        for pair in ws.windows(2) {
            let (_, until) = bounds(&pair[0]);
            let (from, _) = bounds(&pair[1]);
            assert_eq!(until.unwrap().unix() + 86_400, from.unwrap().unix());
        }
    }

    #[test]
    fn placeholder_earliest_datestamps_and_no_windows() {
        let now = ds("2001-06-01T00:00:00Z");
        // `0001-01-01`: boundaries start at 2000, older records are in the first window.
        let ws = plan(
            None,
            now,
            Some(ds("0001-01-01")),
            Some(YEAR),
            Granularity::Second,
        );
        assert_eq!(ws.len(), 2);
        assert_eq!(ws[0].from, None);
        let one = plan(None, now, None, None, Granularity::Second);
        assert_eq!(
            shown(&one, Granularity::Second),
            ["(the start) … 2001-06-01T00:00:00Z"]
        );
        let from = plan(
            Some(ds("2001-05-01T00:00:00Z")),
            now,
            None,
            None,
            Granularity::Second,
        );
        assert_eq!(from.len(), 1);
        assert!(from[0].from.is_some());
    }

    #[test]
    fn a_long_span_of_short_windows_is_held_to_max_windows() {
        let ws = plan(
            None,
            ds("2026-01-01T00:00:00Z"),
            None,
            Some(Duration::from_secs(86_400)),
            Granularity::Day,
        );
        assert!(ws.len() as i64 <= MAX_WINDOWS, "{}", ws.len());
        assert!(ws.len() > 900);
    }

    #[test]
    fn a_resumed_pass_is_extended_to_now_overlapping_one_unit() {
        let g = Granularity::Second;
        let mut pass = OaiPass {
            until: Some(ds("2024-01-10T00:00:00Z").to_w3c()),
            windows: plan(None, ds("2024-01-10T00:00:00Z"), None, None, g),
            ..OaiPass::default()
        };
        extend(&mut pass, ds("2024-01-12T00:00:00Z"), Some(YEAR), g);
        assert_eq!(
            shown(&pass.windows, g),
            [
                "(the start) … 2024-01-10T00:00:00Z",
                "2024-01-09T23:59:59Z … 2024-01-12T00:00:00Z",
            ]
        );
        assert_eq!(pass.until, Some(ds("2024-01-12T00:00:00Z").to_w3c()));
        // A clock that did not move adds nothing.
        extend(&mut pass, ds("2024-01-11T00:00:00Z"), Some(YEAR), g);
        assert_eq!(pass.windows.len(), 2);
    }
}
