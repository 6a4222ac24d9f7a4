//! Inline SVG line charts for `/status`: no script, no external file, readable at 1280 px
//! (the SVG scales to its box, the text stays a legible size at the page's widths).
//!
//! A chart is a title, a y axis from zero to the largest value (three labelled grid lines),
//! the first and last time on the x axis, one polyline per series with a dot per point
//! (a series of one point is still visible), and a legend in HTML below. Series names come
//! from configuration and are escaped like everything else on the page.

use std::fmt::Write as _;

use rsagg_model::W3cDateTime;

use crate::html::esc;

/// One line: its name and `(unix seconds, value)` points, oldest first.
pub(crate) struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Line colours, in order (distinct for the usual few upstreams, then repeated).
const PALETTE: [&str; 6] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf",
];

const W: f64 = 640.0;
const H: f64 = 220.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 12.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 28.0;

/// `MM-DD HH:MM` (UTC) of unix seconds `t`, with `:SS` when `seconds` (a chart spanning
/// less than an hour, whose two ends would otherwise often read the same).
fn short_time(t: f64, seconds: bool) -> String {
    let s = W3cDateTime::from_unix(t as i64, 0).to_string();
    let end = if seconds { 19 } else { 16 };
    s.get(5..end).map(|s| s.replace('T', " ")).unwrap_or(s)
}

/// The chart as a `<figure>` holding the SVG and its legend. `kind` names it for
/// stylesheets and tests (`data-chart`); `format` writes a y value for people.
pub(crate) fn line_chart(
    kind: &str,
    title: &str,
    series: &[Series],
    format: impl Fn(f64) -> String,
) -> String {
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y1) = (f64::INFINITY, f64::NEG_INFINITY, 0.0f64);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        if y.is_finite() {
            y1 = y1.max(y);
        }
    }
    let mut h = String::with_capacity(4096);
    let _ = write!(
        h,
        "<figure class=\"chart\" data-chart=\"{kind}\">\n<figcaption>{}</figcaption>\n",
        esc(title)
    );
    if !x0.is_finite() {
        h.push_str("<p class=\"muted\">no runs recorded yet</p>\n</figure>\n");
        return h;
    }
    if x1 <= x0 {
        // One instant: centre it in a minute-wide window.
        x0 -= 30.0;
        x1 += 30.0;
    }
    if y1 <= 0.0 {
        y1 = 1.0;
    }
    let y1 = y1 * 1.05;
    let (pw, ph) = (W - LEFT - RIGHT, H - TOP - BOTTOM);
    let px = |x: f64| LEFT + (x - x0) / (x1 - x0) * pw;
    let py = |y: f64| TOP + ph - (y.clamp(0.0, y1) / y1) * ph;
    let _ = write!(
        h,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {W} {H}\" role=\"img\" \
         aria-label=\"{}\" preserveAspectRatio=\"xMidYMid meet\">\n<title>{}</title>\n",
        esc(title),
        esc(title)
    );
    // Grid and y labels: 0, half, top.
    for frac in [0.0, 0.5, 1.0] {
        let v = y1 / 1.05 * frac;
        let y = py(v);
        let _ = writeln!(
            h,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\" fill=\"#555\">{}</text>",
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            esc(&format(v))
        );
    }
    // X axis: first and last time.
    let base = TOP + ph;
    let short = x1 - x0 < 3600.0;
    let _ = writeln!(
        h,
        "<line x1=\"{LEFT}\" y1=\"{base:.1}\" x2=\"{:.1}\" y2=\"{base:.1}\" stroke=\"#888\"/>\
         <text x=\"{LEFT}\" y=\"{:.1}\" font-size=\"11\" fill=\"#555\">{}</text>\
         <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\" font-size=\"11\" fill=\"#555\">{} UTC</text>",
        W - RIGHT,
        H - 8.0,
        short_time(x0, short),
        W - RIGHT,
        H - 8.0,
        short_time(x1, short)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let coords: Vec<String> = s
            .points
            .iter()
            .filter(|(_, y)| y.is_finite())
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        let _ = writeln!(
            h,
            "<g data-series=\"{}\"><polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"/>",
            esc(&s.name),
            coords.join(" ")
        );
        for c in &coords {
            let (x, y) = c.split_once(',').unwrap_or(("0", "0"));
            let _ = write!(
                h,
                "<circle cx=\"{x}\" cy=\"{y}\" r=\"2\" fill=\"{colour}\"/>"
            );
        }
        h.push_str("</g>\n");
    }
    h.push_str("</svg>\n<ul class=\"legend\">");
    for (i, s) in series.iter().enumerate() {
        let last = s
            .points
            .last()
            .map(|&(_, y)| format!(" (last {})", format(y)))
            .unwrap_or_default();
        let _ = write!(
            h,
            "<li><span class=\"swatch\" style=\"background:{}\"></span>{}{}</li>",
            PALETTE[i % PALETTE.len()],
            esc(&s.name),
            esc(&last)
        );
    }
    h.push_str("</ul>\n</figure>\n");
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_scaled_into_the_plot_and_names_escaped() {
        let s = vec![
            Series {
                name: "<up>".into(),
                points: vec![(1000.0, 0.0), (1060.0, 10.0)],
            },
            Series {
                name: "one".into(),
                points: vec![(1030.0, 5.0)],
            },
        ];
        let svg = line_chart("rate", "Rate", &s, |v| format!("{v:.0}/s"));
        assert!(svg.contains("data-chart=\"rate\""), "{svg}");
        assert!(svg.contains("data-series=\"&lt;up&gt;\""), "{svg}");
        assert!(!svg.contains("<up>"), "{svg}");
        // First point at the left edge and the bottom; the top value on the top grid line.
        assert!(
            svg.contains(&format!(
                "points=\"{LEFT:.1},{:.1} ",
                TOP + H - TOP - BOTTOM
            )),
            "{svg}"
        );
        assert!(svg.contains(">10/s</text>"), "{svg}");
        assert_eq!(svg.matches("<circle").count(), 3, "{svg}");
        assert!(svg.contains("(last 5/s)"), "{svg}");
        // A span under an hour shows seconds: 1000 s and 1060 s after the epoch.
        assert!(svg.contains(">01-01 00:16:40</text>"), "{svg}");
        assert!(svg.contains(">01-01 00:17:40 UTC</text>"), "{svg}");
        let empty = line_chart("lag", "Lag", &[], |v| v.to_string());
        assert!(
            empty.contains("no runs recorded yet") && !empty.contains("<svg"),
            "{empty}"
        );
    }
}
