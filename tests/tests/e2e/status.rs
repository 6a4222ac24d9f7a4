//! End-to-end test of the status page (issue 6, observability): rsagg harvests a fixture
//! Source (one resource whose bytes never match the listed MD5, so it is quarantined, and
//! upstream URIs with markup in them), `rsagg serve` serves the collection, and headless
//! Chromium (Debian's `chromium`) loads `/status/{collection}` (`/status` is the overview of
//! all collections); the DOM it prints after load must show the collection, the upstream's
//! counts and the quarantined URI as text, and no script from the data may have become an
//! element or run. The probes and `/metrics` of the real binary are checked on the way.
//!
//! Run: `bash scripts/peers.sh install` (installs chromium when missing);
//! `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e status::`.

use crate::common;

use std::time::Duration;

use anyhow::{Context, Result};
use common::*;
use rsagg_e2e::{RsaggServer, chromium_bin, dump_dom, dump_dom_sized};

/// The quarantined resource: served bytes differ from the listed MD5, and its URI (query)
/// carries a script that would retitle the page if it ever ran.
const BAD: &str = "/res/bad.txt?q=<script>document.title='pwned'</script>&x=\"y\"";
/// What the list announces for BAD (its MD5), and what is served: same length, other bytes.
const ANNOUNCED: &[u8] = b"ANNOUNCED-0123456789";
const SERVED: &[u8] = b"served----0123456789";
/// A listed resource the upstream does not have (a warning names its URI).
const GONE: &str = "/res/gone.txt?<b>bold</b>";

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `s` as a text node is serialised by the DOM (`&`, `<`, `>` escaped; quotes kept).
fn dom_text(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A Source: three good resources, BAD (listed with the MD5 of other bytes) and GONE.
fn source() -> Result<Site> {
    let site = Site::new()?;
    let good: [(&str, &[u8]); 3] = [
        ("/res/a.txt", b"alpha"),
        ("/res/b.txt", b"bravo"),
        ("/res/c.txt", b"charlie"),
    ];
    site.resources(&good)?;
    site.write("/res/bad.txt", SERVED)?;
    site.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
    site.capability_list(
        "/capabilitylist.xml",
        Some("/.well-known/resourcesync"),
        &[("resourcelist", "/resourcelist.xml")],
    )?;
    let mut items: Vec<String> = good
        .iter()
        .map(|(p, b)| url_item(&site.url(p), Some(LASTMOD), &md_of(b), ""))
        .collect();
    // No lastmod on BAD: a served Last-Modified later than the listed time would explain
    // the mismatch (a newer version) and the bytes would be accepted.
    items.push(url_item(
        &xml_escape(&site.url(BAD)),
        None,
        &md_of(ANNOUNCED),
        "",
    ));
    items.push(url_item(
        &xml_escape(&site.url(GONE)),
        Some(LASTMOD),
        &md_of(b"never served"),
        "",
    ));
    site.write(
        "/resourcelist.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &site.url("/capabilitylist.xml"))],
            &items,
        ),
    )?;
    Ok(site)
}

#[test]
fn status_page_in_headless_chromium_shows_the_run_and_escapes_upstream_data() -> Result<()> {
    // Fail (not skip) without the browser, saying how to install it.
    chromium_bin()?;
    let site = source()?;
    let (case, port) = Case::on_loopback("obs", &site, "", "")?;
    let base = case.base_url.clone();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(
        (run.n("created"), run.n("quarantined"), run.n("gone")),
        (3, 1, 1),
        "{run:#?}"
    );
    let server = RsaggServer::start(port, &[&case.toml], &case.store.env()?)?;
    let origin = server.origin();

    // The probes the Kubernetes manifests use, on the real binary.
    let (code, body) = http_get(&format!("{origin}/healthz"))?;
    assert_eq!((code, body.as_slice()), (200, b"ok\n".as_slice()));
    let (code, body) = http_get(&format!("{origin}/readyz"))?;
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let (code, metrics) = http_get(&format!("{origin}/metrics"))?;
    assert_eq!(code, 200);
    let metrics = String::from_utf8(metrics)?;
    for line in [
        "rsagg_last_run_resources{collection=\"obs\",upstream=\"up\",outcome=\"created\"} 3\n",
        "rsagg_last_run_resources{collection=\"obs\",upstream=\"up\",outcome=\"quarantined\"} 1\n",
        "rsagg_upstream_up{collection=\"obs\",upstream=\"up\"} 1\n",
        "rsagg_quarantined{collection=\"obs\"} 1\n",
        "rsagg_runs_total{collection=\"obs\"} 1\n",
        "rsagg_resources_total{collection=\"obs\",upstream=\"up\",outcome=\"created\"} 3\n",
        "rsagg_upstream_passes_total{collection=\"obs\",upstream=\"up\",verdict=\"ok\"} 1\n",
        "# TYPE rsagg_fetch_duration_seconds histogram\n",
        "# TYPE rsagg_fetch_requests_total counter\n",
    ] {
        assert!(metrics.contains(line), "{line:?} in\n{metrics}");
    }
    assert!(
        metrics.contains(&format!(
            "rsagg_build_info{{version=\"{}\"}} 1\n",
            env!("CARGO_PKG_VERSION")
        )),
        "{metrics}"
    );
    // The lag counts from the pass that just succeeded: seconds, not the upstream's age.
    let lag: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("rsagg_upstream_lag_seconds{collection=\"obs\",upstream=\"up\"} ")
        })
        .context("lag sample")?
        .parse()?;
    assert!((0.0..600.0).contains(&lag), "lag {lag}");

    // The overview: a row for the collection, linking to its page.
    let (code, overview) = http_get(&format!("{origin}/status"))?;
    assert_eq!(code, 200);
    let overview = String::from_utf8(overview)?;
    assert!(
        overview.contains("<tr data-collection=\"obs\"><td><a href=\"/status/obs\">obs</a></td><td class=\"ok\">ok</td>"),
        "{overview}"
    );
    let dom = dump_dom(&format!("{origin}/status/obs"), Duration::from_secs(90))
        .with_context(|| format!("serve log:\n{}", server.log_tail(20)))?;
    let show = || format!("DOM:\n{dom}\nserve log:\n{}", server.log_tail(10));
    // No script ran: the title is the page's own, and no element came from the data.
    assert!(
        dom.contains("<title>rsagg status: obs</title>"),
        "{}",
        show()
    );
    assert!(!dom.contains("<script"), "{}", show());
    assert!(!dom.contains("<b>"), "{}", show());
    // The collection, with links to its documents.
    assert!(dom.contains("<h2>obs</h2>"), "{}", show());
    assert!(dom.contains(&format!("<code>{base}</code>")), "{}", show());
    assert!(
        dom.contains("href=\"/obs/capabilitylist.xml\""),
        "{}",
        show()
    );
    // The upstream's counts from the last run.
    assert!(
        dom.contains("<tr data-upstream=\"up\"><td>up</td><td class=\"ok\">ok</td>"),
        "{}",
        show()
    );
    for (outcome, n) in [
        ("created", 3),
        ("quarantined", 1),
        ("gone", 1),
        ("failed", 0),
    ] {
        let cell = format!("data-outcome=\"{outcome}\">{n}</td>");
        assert!(dom.contains(&cell), "{cell} in {}", show());
    }
    // The quarantined item: its upstream URI as text, with what was expected and received.
    assert!(dom.contains("Quarantine (1)"), "{}", show());
    let bad_uri = site.url(BAD);
    assert!(
        dom.contains(&format!("<code>{}</code>", dom_text(&bad_uri))),
        "{} in {}",
        dom_text(&bad_uri),
        show()
    );
    for digest in [md5_hex(ANNOUNCED), md5_hex(SERVED)] {
        let cell = format!("<code>md5:{digest}</code>");
        assert!(dom.contains(&cell), "{cell} in {}", show());
    }
    // The warning about the gone resource names its URI, as text.
    assert!(dom.contains(&dom_text(&site.url(GONE))), "{}", show());
    assert!(dom.contains("Last run finished"), "{}", show());
    assert!(dom.contains("data-chart=\"rate\""), "{}", show());
    assert!(dom.contains("data-chart=\"lag\""), "{}", show());

    // Layout at 1280 px: the page as served, plus a script of the test's own (the page
    // has none) that measures what Chromium laid out and writes it into the DOM.
    let (code, page) = http_get(&format!("{origin}/status/obs"))?;
    assert_eq!(code, 200);
    let page = String::from_utf8(page)?;
    let probe = r#"<script>
(function () {
  var out = [], de = document.documentElement;
  out.push('page ' + de.scrollWidth + ' ' + de.clientWidth);
  document.querySelectorAll('table').forEach(function (t) {
    out.push('table.' + t.className + ' ' + Math.ceil(t.getBoundingClientRect().right) + ' ' + de.clientWidth);
  });
  document.querySelectorAll('figure.chart svg').forEach(function (s) {
    var b = s.getBoundingClientRect();
    out.push('svg.' + s.parentNode.getAttribute('data-chart') + ' ' + Math.round(b.width) + ' ' +
      Math.round(b.height) + ' ' + s.querySelectorAll('polyline').length + ' ' + Math.ceil(b.right));
  });
  var pre = document.createElement('pre');
  pre.id = 'layout';
  pre.textContent = out.join('\n');
  document.body.appendChild(pre);
})();
</script>
</body>"#;
    assert!(!page.contains("<script"), "the page itself has no script");
    let probed = page.replacen("</body>", probe, 1);
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("status.html");
    std::fs::write(&file, probed)?;
    let dom = dump_dom_sized(
        &format!("file://{}", file.display()),
        1280,
        900,
        Duration::from_secs(90),
    )?;
    let layout = dom
        .split_once("<pre id=\"layout\">")
        .and_then(|(_, rest)| rest.split_once("</pre>"))
        .map(|(l, _)| l.to_owned())
        .with_context(|| format!("no layout report in\n{dom}"))?;
    eprintln!("layout at 1280 px:\n{layout}");
    let rows: Vec<Vec<&str>> = layout.lines().map(|l| l.split(' ').collect()).collect();
    let num = |s: &str| s.parse::<f64>().unwrap_or(f64::NAN);
    let page_row = rows.iter().find(|r| r[0] == "page").context("page row")?;
    let (scroll, client) = (num(page_row[1]), num(page_row[2]));
    assert!(
        client > 1200.0 && client <= 1280.0,
        "window of 1280 px: {layout}"
    );
    assert!(scroll <= client, "the page scrolls sideways: {layout}");
    for table in ["table.upstreams", "table.outcomes"] {
        let row = rows
            .iter()
            .find(|r| r[0] == table)
            .with_context(|| format!("{table}: {layout}"))?;
        assert!(num(row[1]) <= num(row[2]), "{table} overflows: {layout}");
    }
    for chart in ["svg.rate", "svg.lag"] {
        let row = rows
            .iter()
            .find(|r| r[0] == chart)
            .with_context(|| format!("{chart}: {layout}"))?;
        let (w, h, lines, right) = (num(row[1]), num(row[2]), num(row[3]), num(row[4]));
        assert!(
            w >= 400.0 && h >= 120.0,
            "{chart} drawn too small: {layout}"
        );
        assert!(lines >= 1.0, "{chart} has no line: {layout}");
        assert!(right <= client, "{chart} overflows: {layout}");
    }
    Ok(())
}
