//! End-to-end tests of harvesting (issue "Harvest" §8): `rsagg run --once --json` against
//! static fixture Sources (FixtureServer) and resync-simulator, into SeaweedFS (one shared
//! server, a prefix per test) or a `file://` store; every assertion reads back real effects:
//! state records, blob bytes, change-log entries, quarantine records, hit counts.
//!
//! Run: `eval "$(bash scripts/peers.sh env)"; cargo build -p rsagg-cli;
//! cargo test -p rsagg-e2e --test e2e harvest:: -- --test-threads=2`.

use crate::common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use common::*;
use rsagg_e2e::{Failure, Gzip, SimOptions, Simulator, rsagg_bin};
use rsagg_model::{
    Capability, Change, Hashes, Header, Link, Md, Mode, Root, UrlEntry, W3cDateTime,
};
use rsagg_sitemap::{ReadOptions, SyncReader};
use rsagg_store::{ResourceStatus, State};

/// (path, body) pairs from string literals.
fn res<'a>(v: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a [u8])> {
    v.iter().map(|(p, b)| (*p, b.as_bytes())).collect()
}

/// (full URL, bytes) of resources on a site, for [`Case::assert_state`].
fn expect(site: &Site, v: &[(&str, &[u8])]) -> Vec<(String, Vec<u8>)> {
    v.iter().map(|(p, b)| (site.url(p), b.to_vec())).collect()
}

fn urls(site: &Site, paths: &[&str]) -> Vec<String> {
    paths.iter().map(|p| site.url(p)).collect()
}

// ---------------------------------------------------------------------------------------
// 1. Resource List Index baseline

fn resource_list_index_baseline(store: Store) -> Result<()> {
    let site = Site::new()?;
    let all = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
        ("/res/d.txt", "delta"),
        ("/res/e.txt", "echo"),
    ]);
    site.resources(&all)?;
    site.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
    site.capability_list(
        "/capabilitylist.xml",
        Some("/.well-known/resourcesync"),
        &[("resourcelist", "/resourcelist-index.xml")],
    )?;
    let cap = site.url("/capabilitylist.xml");
    let index = site.url("/resourcelist-index.xml");
    for (part, slice) in [
        ("/resourcelist-1.xml", &all[..3]),
        ("/resourcelist-2.xml", &all[3..]),
    ] {
        let items: Vec<String> = slice
            .iter()
            .map(|(p, b)| url_item(&site.url(p), Some(LASTMOD), &md_of(b), ""))
            .collect();
        site.write(
            part,
            doc(
                "urlset",
                &format!(r#"capability="resourcelist" at="{T0}""#),
                &[("up", &cap), ("index", &index)],
                &items,
            ),
        )?;
    }
    site.write(
        "/resourcelist-index.xml",
        doc(
            "sitemapindex",
            &format!(r#"capability="resourcelist" at="{T0}""#),
            &[("up", &cap)],
            &[
                sitemap_item(&site.url("/resourcelist-1.xml"), &format!(r#"at="{T0}""#)),
                sitemap_item(&site.url("/resourcelist-2.xml"), &format!(r#"at="{T0}""#)),
            ],
        ),
    )?;

    let case = Case::new(store, &site.url("/.well-known/resourcesync"), "")?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (5, 0, 0), "{run:#?}");
    assert_eq!(run.up()["route"], "SourceDescription");
    assert_eq!(run.n("sets"), 1);
    assert!(site.fx.hits("/resourcelist-1.xml") >= 1 && site.fx.hits("/resourcelist-2.xml") >= 1);
    let snap = case.assert_state(UP, &expect(&site, &all), &[])?;
    assert_eq!(snap.log.len(), 5);
    assert!(snap.log.iter().all(|e| e.change == Change::Created));
    snap.assert_log_sane();
    assert!(
        snap.records.values().all(|r| r.set == cap),
        "set of each record"
    );

    // Nothing changed upstream: the re-sync (no Change List) fetches nothing and logs nothing.
    site.fx.reset_counters();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(run.n("unchanged"), 5);
    assert!(!run.resyncs().is_empty(), "{run:#?}");
    for (p, _) in &all {
        assert_eq!(
            site.fx.hits(p),
            0,
            "{p} refetched although listed unchanged"
        );
    }
    let snap = case.assert_state(UP, &expect(&site, &all), &[])?;
    assert_eq!(snap.log.len(), 5);
    Ok(())
}

#[test]
fn resource_list_index_baseline_s3() -> Result<()> {
    resource_list_index_baseline(Store::s3("rl-index")?)
}

#[test]
fn resource_list_index_baseline_file_store() -> Result<()> {
    resource_list_index_baseline(Store::file("rl-index")?)
}

// ---------------------------------------------------------------------------------------
// 2. Change List Index: closed + open lists, incremental, replays, deletions

#[test]
fn change_list_index_incremental() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
    ]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist-index.xml"),
        ],
        &v1,
    )?;
    let cap = site.url("/capabilitylist.xml");
    let index = site.url("/changelist-index.xml");
    let write_index = || -> Result<()> {
        site.write(
            "/changelist-index.xml",
            doc(
                "sitemapindex",
                r#"capability="changelist" from="2025-12-30T00:00:00Z""#,
                &[("up", &cap)],
                &[
                    sitemap_item(
                        &site.url("/changelist-1.xml"),
                        r#"from="2025-12-30T00:00:00Z" until="2025-12-31T00:00:00Z""#,
                    ),
                    sitemap_item(
                        &site.url("/changelist-2.xml"),
                        r#"from="2025-12-31T00:00:00Z""#,
                    ),
                ],
            ),
        )
    };
    write_index()?;
    // The closed list: changes long before the baseline.
    site.write(
        "/changelist-1.xml",
        doc(
            "urlset",
            r#"capability="changelist" from="2025-12-30T00:00:00Z" until="2025-12-31T00:00:00Z""#,
            &[("up", &cap), ("index", &index)],
            &[change_item(
                &site.url("/res/a.txt"),
                "created",
                "2025-12-30T12:00:00Z",
                Some(b"alpha"),
            )],
        ),
    )?;
    let open = |items: &[String]| -> Result<()> {
        site.write(
            "/changelist-2.xml",
            doc(
                "urlset",
                r#"capability="changelist" from="2025-12-31T00:00:00Z""#,
                &[("up", &cap), ("index", &index)],
                items,
            ),
        )
    };
    let mut changes = vec![change_item(
        &site.url("/res/b.txt"),
        "updated",
        "2025-12-31T12:00:00Z",
        Some(b"bravo"),
    )];
    open(&changes)?;

    let case = Case::new(
        Store::s3("cl-index")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    assert_eq!(
        run.n("replayed"),
        1,
        "the open list's change before the baseline: {run:#?}"
    );
    assert_eq!(
        site.fx.hits("/changelist-1.xml"),
        0,
        "a closed list that ends before the checkpoint is not read"
    );
    let snap = case.assert_state(UP, &expect(&site, &v1), &[])?;
    assert_eq!(snap.log.len(), 3);

    // Upstream changes: b updated, d created, c deleted; announced in the open list.
    site.write("/res/b.txt", "bravo-2")?;
    site.write("/res/d.txt", "delta")?;
    site.fx.remove("/res/c.txt")?;
    changes.push(change_item(
        &site.url("/res/b.txt"),
        "updated",
        "2026-01-02T00:00:00Z",
        Some(b"bravo-2"),
    ));
    changes.push(change_item(
        &site.url("/res/d.txt"),
        "created",
        "2026-01-02T01:00:00Z",
        Some(b"delta"),
    ));
    changes.push(change_item(
        &site.url("/res/c.txt"),
        "deleted",
        "2026-01-02T02:00:00Z",
        None,
    ));
    open(&changes)?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    assert_eq!(run.n("replayed"), 1, "{run:#?}");
    let v2 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo-2"),
        ("/res/d.txt", "delta"),
    ]);
    let snap = case.assert_state(UP, &expect(&site, &v2), &urls(&site, &["/res/c.txt"]))?;
    assert_eq!(snap.log.len(), 6, "{:#?}", snap.log);
    snap.assert_log_sane();
    assert_eq!(snap.log_of(&site.url("/res/b.txt")), ["created", "updated"]);
    assert_eq!(snap.log_of(&site.url("/res/c.txt")), ["created", "deleted"]);
    assert_eq!(snap.log_of(&site.url("/res/d.txt")), ["created"]);

    // Nothing new: every change is a replay, the log does not grow.
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(run.n("replayed"), 4, "{run:#?}");
    assert_eq!(case.snapshot(UP)?.log.len(), 6);

    // One more change in the open list: only it is processed.
    site.write("/res/a.txt", "alpha-2")?;
    changes.push(change_item(
        &site.url("/res/a.txt"),
        "updated",
        "2026-01-03T00:00:00Z",
        Some(b"alpha-2"),
    ));
    open(&changes)?;
    site.fx.reset_counters();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 1, 0), "{run:#?}");
    assert_eq!(run.n("replayed"), 4, "{run:#?}");
    for p in ["/res/b.txt", "/res/c.txt", "/res/d.txt"] {
        assert_eq!(
            site.fx.hits(p),
            0,
            "{p} fetched again for a replayed change"
        );
    }
    let v3 = res(&[
        ("/res/a.txt", "alpha-2"),
        ("/res/b.txt", "bravo-2"),
        ("/res/d.txt", "delta"),
    ]);
    let snap = case.assert_state(UP, &expect(&site, &v3), &urls(&site, &["/res/c.txt"]))?;
    assert_eq!(snap.log.len(), 7, "{:#?}", snap.log);
    snap.assert_log_sane();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 3. Resource Dump baseline, and the fallback to the list

/// One item of a package: path on the site, body (none for a deletion), and (change,
/// datetime) for Change Dump packages.
type PackageItem<'a> = (&'a str, Option<&'a [u8]>, Option<(&'a str, &'a str)>);

/// Resources of a fixture: (path, body).
type Resources = Vec<(&'static str, &'static [u8])>;

/// Builds a ZIP package of `items` with a manifest whose root `<rs:md>` is `manifest_md`
/// (a resourcedump-manifest or changedump-manifest); returns the zip bytes and the
/// manifest's XML (for the copy a dump links with rel="contents").
fn package(site: &Site, manifest_md: Md, items: &[PackageItem]) -> Result<(Vec<u8>, String)> {
    package_with(site, manifest_md, items, None)
}

/// [`package`], with the bytes of item `damaged` (a path) replaced in the ZIP (the manifest
/// still lists the right hash and length).
fn package_with(
    site: &Site,
    manifest_md: Md,
    items: &[PackageItem],
    damaged: Option<&str>,
) -> Result<(Vec<u8>, String)> {
    let mut header = Header::new(
        Root::Urlset,
        manifest_md.capability.clone().context("capability")?,
    );
    header.md = Some(manifest_md);
    header
        .links
        .push(Link::new("up", site.url("/capabilitylist.xml")));
    let mut writer = rsagg_dump::PackageWriter::new(tempfile::tempfile()?);
    let mut entries = Vec::new();
    let mut xml_items = Vec::new();
    for (path, body, change) in items {
        let zip_path = format!("/resources{path}");
        let mut md = Md::default();
        if let Some(b) = body {
            let in_zip: &[u8] = if damaged == Some(*path) {
                b"damaged in the package"
            } else {
                b
            };
            writer.add(&zip_path, &mut &in_zip[..])?;
            md.hash = Some(Hashes::parse(&format!("md5:{}", md5_hex(b)), |_| {}));
            md.length = Some(b.len() as u64);
            md.path = Some(zip_path.clone());
            md.mime_type = Some("text/plain".into());
        }
        if let Some((c, dt)) = change {
            md.change = Some(Change::parse(c));
            md.datetime = Some(W3cDateTime::parse(dt)?.value);
        }
        let mut xml_md = String::new();
        if let Some(b) = body {
            xml_md = format!(r#"{} path="{zip_path}" type="text/plain""#, md_of(b));
        }
        if let Some((c, dt)) = change {
            xml_md = format!(r#"change="{c}" datetime="{dt}" {xml_md}"#);
        }
        let lastmod = change.is_none().then_some(LASTMOD);
        if lastmod.is_some() {
            xml_items.push(url_item(&site.url(path), lastmod, xml_md.trim(), ""));
        } else {
            xml_items.push(url_item(&site.url(path), None, xml_md.trim(), ""));
        }
        entries.push(UrlEntry {
            loc: site.url(path),
            lastmod: lastmod
                .map(|l| W3cDateTime::parse(l).map(|p| p.value))
                .transpose()?,
            md: Some(md),
            ..UrlEntry::default()
        });
    }
    let mut file = writer.finish(&header, &mut entries.clone().into_iter())?;
    use std::io::{Read, Seek};
    file.rewind()?;
    let mut zip = Vec::new();
    file.read_to_end(&mut zip)?;
    // The manifest copy linked with rel="contents" (same content as manifest.xml).
    let md = header.md.as_ref().context("md")?;
    let mut attrs = format!(r#"capability="{}""#, md.capability.as_ref().context("cap")?);
    for (name, t) in [("at", md.at), ("from", md.from), ("until", md.until)] {
        if let Some(t) = t {
            attrs.push_str(&format!(r#" {name}="{t}""#));
        }
    }
    let manifest = doc(
        "urlset",
        &attrs,
        &[("up", &site.url("/capabilitylist.xml"))],
        &xml_items,
    );
    Ok((zip, manifest))
}

/// A dump document entry for a package at `pkg` (with its manifest at `manifest`).
fn package_item(site: &Site, pkg: &str, zip: &[u8], manifest: &str, extra_md: &str) -> String {
    url_item(
        &site.url(pkg),
        None,
        format!(r#"type="application/zip" {} {extra_md}"#, md_of(zip)).trim(),
        &format!(
            "    <rs:ln rel=\"contents\" href=\"{}\" type=\"application/xml\"/>\n",
            site.url(manifest)
        ),
    )
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum DumpFault {
    None,
    /// The dump announces a wrong hash for package 1.
    PackageHash,
    /// Item c's bytes in package 2 differ from its manifest entry.
    ItemBytes,
}

/// A Source with a Resource List and a Resource Dump of two packages (a, b | c).
fn dump_site(fault: DumpFault) -> Result<(Site, Resources)> {
    let site = Site::new()?;
    let all: Resources = vec![
        ("/res/a.txt", b"alpha"),
        ("/res/b.txt", b"bravo"),
        ("/res/c.txt", b"charlie"),
    ];
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("resourcedump", "/resourcedump.xml"),
        ],
        &all,
    )?;
    let md = Md {
        capability: Some(Capability::ResourceDumpManifest),
        at: Some(W3cDateTime::parse(T0)?.value),
        ..Md::default()
    };
    let mut items = Vec::new();
    for (n, part) in [(1, &all[..2]), (2, &all[2..])] {
        let damaged = (fault == DumpFault::ItemBytes && n == 2).then_some("/res/c.txt");
        let (zip, manifest) = package_with(
            &site,
            md.clone(),
            &part
                .iter()
                .map(|(p, b)| (*p, Some(*b), None))
                .collect::<Vec<_>>(),
            damaged,
        )?;
        let (zp, mp) = (
            format!("/dump/part{n}.zip"),
            format!("/dump/manifest{n}.xml"),
        );
        site.write(&zp, &zip)?;
        site.write(&mp, &manifest)?;
        let mut item = package_item(&site, &zp, &zip, &mp, "");
        if fault == DumpFault::PackageHash && n == 1 {
            item = item.replace(&md5_hex(&zip), &md5_hex(b"something else"));
        }
        items.push(item);
    }
    site.write(
        "/resourcedump.xml",
        doc(
            "urlset",
            &format!(r#"capability="resourcedump" at="{T0}""#),
            &[("up", &site.url("/capabilitylist.xml"))],
            &items,
        ),
    )?;
    Ok((site, all))
}

#[test]
fn resource_dump_baseline() -> Result<()> {
    let (site, all) = dump_site(DumpFault::None)?;
    let case = Case::new(
        Store::s3("rdump")?,
        &site.url("/.well-known/resourcesync"),
        r#"baseline = "dump""#,
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    assert_eq!(site.fx.hits("/dump/part1.zip"), 1);
    assert_eq!(site.fx.hits("/dump/part2.zip"), 1);
    for (p, _) in &all {
        assert_eq!(
            site.fx.hits(p),
            0,
            "{p} fetched one by one despite the dump"
        );
    }
    let snap = case.assert_state(UP, &expect(&site, &all), &[])?;
    assert_eq!(snap.log.len(), 3);
    snap.assert_log_sane();
    Ok(())
}

#[test]
fn broken_resource_dump_falls_back_to_the_list() -> Result<()> {
    let (site, all) = dump_site(DumpFault::PackageHash)?;
    let case = Case::new(
        Store::s3("rdump-broken")?,
        &site.url("/.well-known/resourcesync"),
        r#"baseline = "dump""#,
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    assert!(
        run.warnings()
            .iter()
            .any(|w| w.contains("Resource Dump unusable")),
        "{run:#?}"
    );
    assert_eq!(site.fx.hits("/resourcelist.xml"), 1);
    for (p, _) in &all {
        assert_eq!(site.fx.hits(p), 1, "{p} fetched from the list");
    }
    case.assert_state(UP, &expect(&site, &all), &[])?;
    Ok(())
}

/// An item whose bytes in the package differ from its manifest entry is fetched by HTTP
/// instead (and verified there); the rest comes from the packages.
#[test]
fn resource_dump_item_that_does_not_match_is_fetched() -> Result<()> {
    let (site, all) = dump_site(DumpFault::ItemBytes)?;
    let case = Case::new(
        Store::s3("rdump-item")?,
        &site.url("/.well-known/resourcesync"),
        r#"baseline = "dump""#,
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    assert_eq!(run.n("quarantined"), 0, "{run:#?}");
    assert_eq!(site.fx.hits("/res/c.txt"), 1, "c fetched by HTTP");
    assert_eq!(site.fx.hits("/res/a.txt") + site.fx.hits("/res/b.txt"), 0);
    case.assert_state(UP, &expect(&site, &all), &[])?;
    Ok(())
}

/// Spec 11.1: a Resource Dump Index (`<sitemapindex>`, `capability="resourcedump"`) of two
/// Resource Dumps. A baseline from it stores every resource from the packages, and reads
/// the parts one after the other: the second part is fetched only once the packages of the
/// first are stored (not every part's entries first, then the packages).
#[test]
fn resource_dump_index_baseline_reads_its_parts_one_after_the_other() -> Result<()> {
    let site = Site::new()?;
    let all: Resources = vec![
        ("/res/a.txt", b"alpha"),
        ("/res/b.txt", b"bravo"),
        ("/res/c.txt", b"charlie"),
        ("/res/d.txt", b"delta"),
    ];
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("resourcedump", "/resourcedump-index.xml"),
        ],
        &all,
    )?;
    let md = Md {
        capability: Some(Capability::ResourceDumpManifest),
        at: Some(W3cDateTime::parse(T0)?.value),
        ..Md::default()
    };
    let cap = site.url("/capabilitylist.xml");
    let index = site.url("/resourcedump-index.xml");
    // Part 1: one package (a, b); part 2: two packages (c | d).
    let mut n = 0;
    for (part, packages) in [
        ("/dump/rd1.xml", vec![&all[..2]]),
        ("/dump/rd2.xml", vec![&all[2..3], &all[3..]]),
    ] {
        let mut items = Vec::new();
        for resources in packages {
            n += 1;
            let (zip, manifest) = package(
                &site,
                md.clone(),
                &resources
                    .iter()
                    .map(|(p, b)| (*p, Some(*b), None))
                    .collect::<Vec<_>>(),
            )?;
            let (zp, mp) = (
                format!("/dump/part{n}.zip"),
                format!("/dump/manifest{n}.xml"),
            );
            site.write(&zp, &zip)?;
            site.write(&mp, &manifest)?;
            items.push(package_item(
                &site,
                &zp,
                &zip,
                &mp,
                &format!(r#"at="{T0}""#),
            ));
        }
        site.write(
            part,
            doc(
                "urlset",
                &format!(r#"capability="resourcedump" at="{T0}""#),
                &[("up", &cap), ("index", &index)],
                &items,
            ),
        )?;
    }
    site.write(
        "/resourcedump-index.xml",
        doc(
            "sitemapindex",
            &format!(r#"capability="resourcedump" at="{T0}""#),
            &[("up", &cap)],
            &[
                sitemap_item(&site.url("/dump/rd1.xml"), &format!(r#"at="{T0}""#)),
                sitemap_item(&site.url("/dump/rd2.xml"), &format!(r#"at="{T0}""#)),
            ],
        ),
    )?;
    let case = Case::new(
        Store::file("rdump-index")?,
        &site.url("/.well-known/resourcesync"),
        r#"baseline = "dump""#,
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (4, 0, 0), "{run:#?}");
    assert!(run.warnings().is_empty(), "{run:#?}");
    for p in [
        "/resourcedump-index.xml",
        "/dump/rd1.xml",
        "/dump/rd2.xml",
        "/dump/part1.zip",
        "/dump/part2.zip",
        "/dump/part3.zip",
    ] {
        assert_eq!(site.fx.hits(p), 1, "{p}");
    }
    for (p, _) in &all {
        assert_eq!(
            site.fx.hits(p),
            0,
            "{p} fetched one by one despite the dump"
        );
    }
    assert_eq!(
        site.fx.hits("/resourcelist.xml"),
        0,
        "no fallback to the list"
    );
    let order: Vec<String> = site
        .fx
        .requests()
        .into_iter()
        .map(|r| r.path)
        .filter(|p| p.starts_with("/dump/") || p == "/resourcedump-index.xml")
        .collect();
    assert_eq!(
        order,
        [
            "/resourcedump-index.xml",
            "/dump/rd1.xml",
            "/dump/part1.zip",
            "/dump/rd2.xml",
            "/dump/part2.zip",
            "/dump/part3.zip",
        ],
        "one part after the other"
    );
    let snap = case.assert_state(UP, &expect(&site, &all), &[])?;
    snap.assert_log_sane();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 4. Change Dump incremental (no Change List)

/// The first Change Dump package of the change-dump tests (b updated, d created, c deleted,
/// 2026-01-02T00:00–03:00), written to the site as `/cd/1.zip` with its manifest
/// `/cd/1.xml`; returns its entry for a Change Dump.
fn first_change_package(site: &Site) -> Result<String> {
    let (zip1, man1) = package(
        site,
        Md {
            capability: Some(Capability::ChangeDumpManifest),
            from: Some(W3cDateTime::parse("2026-01-02T00:00:00Z")?.value),
            until: Some(W3cDateTime::parse("2026-01-02T03:00:00Z")?.value),
            ..Md::default()
        },
        &[
            (
                "/res/b.txt",
                Some(b"bravo-2"),
                Some(("updated", "2026-01-02T00:30:00Z")),
            ),
            (
                "/res/d.txt",
                Some(b"delta"),
                Some(("created", "2026-01-02T01:00:00Z")),
            ),
            (
                "/res/c.txt",
                None,
                Some(("deleted", "2026-01-02T02:00:00Z")),
            ),
        ],
    )?;
    site.write("/cd/1.zip", &zip1)?;
    site.write("/cd/1.xml", &man1)?;
    Ok(package_item(
        site,
        "/cd/1.zip",
        &zip1,
        "/cd/1.xml",
        r#"from="2026-01-02T00:00:00Z" until="2026-01-02T03:00:00Z""#,
    ))
}

/// Spec 13.1: a Change Dump Index (`<sitemapindex>`, `capability="changedump"`) of Change
/// Dumps, the last one open. Incremental runs take the packages of each part in order, and
/// a part that ends before the checkpoint is not fetched at all.
#[test]
fn change_dump_index_parts_before_the_checkpoint_are_not_fetched() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
    ]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changedump", "/changedump-index.xml"),
        ],
        &v1,
    )?;
    let cap = site.url("/capabilitylist.xml");
    let index_url = site.url("/changedump-index.xml");
    // A part at `path` from `from` (open without `until`) listing `items`.
    let part = |path: &str, from: &str, until: Option<&str>, items: &[String]| {
        let until = until
            .map(|u| format!(r#" until="{u}""#))
            .unwrap_or_default();
        site.write(
            path,
            doc(
                "urlset",
                &format!(r#"capability="changedump" from="{from}"{until}"#),
                &[("up", &cap), ("index", &index_url)],
                items,
            ),
        )
    };
    // The index naming `parts` ((path, from, until)).
    let index = |parts: &[(&str, &str, Option<&str>)]| {
        let items: Vec<String> = parts
            .iter()
            .map(|(p, from, until)| {
                let until = until
                    .map(|u| format!(r#" until="{u}""#))
                    .unwrap_or_default();
                sitemap_item(&site.url(p), &format!(r#"from="{from}"{until}"#))
            })
            .collect();
        site.write(
            "/changedump-index.xml",
            doc(
                "sitemapindex",
                r#"capability="changedump" from="2026-01-02T00:00:00Z""#,
                &[("up", &cap)],
                &items,
            ),
        )
    };
    let md = |from: &str, until: &str| -> Result<Md> {
        Ok(Md {
            capability: Some(Capability::ChangeDumpManifest),
            from: Some(W3cDateTime::parse(from)?.value),
            until: Some(W3cDateTime::parse(until)?.value),
            ..Md::default()
        })
    };
    // Run 1: the baseline from the list; the index's one part has no package yet.
    part("/cd/part1.xml", "2026-01-02T00:00:00Z", None, &[])?;
    index(&[("/cd/part1.xml", "2026-01-02T00:00:00Z", None)])?;
    let case = Case::new(
        Store::file("cdump-index")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");

    // Run 2: part 1 gets a package (b updated, d created, c deleted).
    site.write("/res/b.txt", "bravo-2")?;
    site.write("/res/d.txt", "delta")?;
    site.fx.remove("/res/c.txt")?;
    let item1 = first_change_package(&site)?;
    part(
        "/cd/part1.xml",
        "2026-01-02T00:00:00Z",
        None,
        std::slice::from_ref(&item1),
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");

    // Run 3: part 1 is closed, part 2 holds the next package (a updated).
    site.write("/res/a.txt", "alpha-2")?;
    let (zip2, man2) = package(
        &site,
        md("2026-01-03T00:00:00Z", "2026-01-03T01:00:00Z")?,
        &[(
            "/res/a.txt",
            Some(b"alpha-2"),
            Some(("updated", "2026-01-03T00:30:00Z")),
        )],
    )?;
    site.write("/cd/2.zip", &zip2)?;
    site.write("/cd/2.xml", &man2)?;
    let item2 = package_item(
        &site,
        "/cd/2.zip",
        &zip2,
        "/cd/2.xml",
        r#"from="2026-01-03T00:00:00Z" until="2026-01-03T01:00:00Z""#,
    );
    part(
        "/cd/part1.xml",
        "2026-01-02T00:00:00Z",
        Some("2026-01-02T03:00:00Z"),
        std::slice::from_ref(&item1),
    )?;
    part("/cd/part2.xml", "2026-01-02T03:00:00Z", None, &[item2])?;
    index(&[
        (
            "/cd/part1.xml",
            "2026-01-02T00:00:00Z",
            Some("2026-01-02T03:00:00Z"),
        ),
        ("/cd/part2.xml", "2026-01-02T03:00:00Z", None),
    ])?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 1, 0), "{run:#?}");

    // Run 4: the checkpoint (2026-01-03T00:30) is past part 1's `until`: part 1 is not
    // fetched, part 2 is.
    site.fx.reset_counters();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(
        site.fx.hits("/cd/part1.xml"),
        0,
        "part 1 ends before the checkpoint"
    );
    assert_eq!(site.fx.hits("/cd/1.zip"), 0);
    assert_eq!(site.fx.hits("/cd/part2.xml"), 1);
    let v3 = res(&[
        ("/res/a.txt", "alpha-2"),
        ("/res/b.txt", "bravo-2"),
        ("/res/d.txt", "delta"),
    ]);
    let snap = case.assert_state(UP, &expect(&site, &v3), &urls(&site, &["/res/c.txt"]))?;
    assert_eq!(snap.log.len(), 7, "{:#?}", snap.log);
    snap.assert_log_sane();
    Ok(())
}

#[test]
fn change_dump_incremental() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
    ]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changedump", "/changedump.xml"),
        ],
        &v1,
    )?;
    let changedump = |items: &[String]| {
        site.changes(
            "/changedump.xml",
            "changedump",
            "2025-12-31T00:00:00Z",
            items,
        )
    };
    changedump(&[])?;
    let case = Case::new(
        Store::s3("cdump")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");

    // Package 1: b updated, d created, c deleted.
    site.write("/res/b.txt", "bravo-2")?;
    site.write("/res/d.txt", "delta")?;
    site.fx.remove("/res/c.txt")?;
    let md = |from: &str, until: &str| -> Result<Md> {
        Ok(Md {
            capability: Some(Capability::ChangeDumpManifest),
            from: Some(W3cDateTime::parse(from)?.value),
            until: Some(W3cDateTime::parse(until)?.value),
            ..Md::default()
        })
    };
    let item1 = first_change_package(&site)?;
    changedump(std::slice::from_ref(&item1))?;
    site.fx.reset_counters();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    assert_eq!(site.fx.hits("/cd/1.zip"), 1);
    assert_eq!(
        site.fx.hits("/res/b.txt") + site.fx.hits("/res/d.txt"),
        0,
        "taken from the package"
    );
    let v2 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo-2"),
        ("/res/d.txt", "delta"),
    ]);
    let snap = case.assert_state(UP, &expect(&site, &v2), &urls(&site, &["/res/c.txt"]))?;
    assert_eq!(snap.log.len(), 6, "{:#?}", snap.log);
    snap.assert_log_sane();

    // Package 2: a updated; package 1's changes are not applied again.
    site.write("/res/a.txt", "alpha-2")?;
    let (zip2, man2) = package(
        &site,
        md("2026-01-03T00:00:00Z", "2026-01-03T01:00:00Z")?,
        &[(
            "/res/a.txt",
            Some(b"alpha-2"),
            Some(("updated", "2026-01-03T00:30:00Z")),
        )],
    )?;
    site.write("/cd/2.zip", &zip2)?;
    site.write("/cd/2.xml", &man2)?;
    let item2 = package_item(
        &site,
        "/cd/2.zip",
        &zip2,
        "/cd/2.xml",
        r#"from="2026-01-03T00:00:00Z" until="2026-01-03T01:00:00Z""#,
    );
    changedump(&[item1, item2])?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 1, 0), "{run:#?}");
    let v3 = res(&[
        ("/res/a.txt", "alpha-2"),
        ("/res/b.txt", "bravo-2"),
        ("/res/d.txt", "delta"),
    ]);
    let snap = case.assert_state(UP, &expect(&site, &v3), &urls(&site, &["/res/c.txt"]))?;
    assert_eq!(snap.log.len(), 7, "{:#?}", snap.log);
    snap.assert_log_sane();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 5. Two sets of resources

#[test]
fn two_sets_all_by_default_or_the_selected_one() -> Result<()> {
    let site = Site::new()?;
    let a = res(&[("/a/1.txt", "a-one"), ("/a/2.txt", "a-two")]);
    let b = res(&[("/b/1.txt", "b-one")]);
    site.resources(&a)?;
    site.resources(&b)?;
    site.source_description(
        "/.well-known/resourcesync",
        &["/a/capabilitylist.xml", "/b/capabilitylist.xml"],
    )?;
    for (set, list) in [("a", &a), ("b", &b)] {
        let cap = format!("/{set}/capabilitylist.xml");
        let rl = format!("/{set}/resourcelist.xml");
        site.capability_list(
            &cap,
            Some("/.well-known/resourcesync"),
            &[("resourcelist", &rl)],
        )?;
        site.resource_list(&rl, &cap, T0, list)?;
    }
    let sd = site.url("/.well-known/resourcesync");
    let case = Case::new(Store::s3("two-sets")?, &sd, "")?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.n("sets"), 2);
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    let both: Vec<_> = a.iter().chain(b.iter()).copied().collect();
    let snap = case.assert_state(UP, &expect(&site, &both), &[])?;
    for (p, _) in &a {
        assert_eq!(
            snap.records[&site.url(p)].set,
            site.url("/a/capabilitylist.xml")
        );
    }
    assert_eq!(
        snap.records[&site.url("/b/1.txt")].set,
        site.url("/b/capabilitylist.xml")
    );

    site.fx.reset_counters();
    let only_a = format!(
        "capability_lists = [\"{}\"]",
        site.url("/a/capabilitylist.xml")
    );
    let case = Case::new(Store::s3("one-set")?, &sd, &only_a)?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.n("sets"), 1);
    assert_eq!(run.cud(), (2, 0, 0), "{run:#?}");
    assert_eq!(
        site.fx.hits("/b/resourcelist.xml") + site.fx.hits("/b/1.txt"),
        0
    );
    case.assert_state(UP, &expect(&site, &a), &[])?;

    // A selection that matches no Capability List of the Source is an upstream failure.
    let none = format!(
        "capability_lists = [\"{}\"]",
        site.url("/c/capabilitylist.xml")
    );
    let case = Case::new(Store::s3("no-set")?, &sd, &none)?;
    let run = case.run()?;
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.verdict(), "failed", "{run:#?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 6. Discovery routes

fn discovery_case(site: &Site, entry: &str, route: &str, all: &[(&str, &[u8])]) -> Result<()> {
    let case = Case::new(Store::s3("discovery")?, &site.url(entry), "")?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.up()["route"], route, "{run:#?}");
    assert_eq!(run.cud(), (all.len() as u64, 0, 0), "{run:#?}");
    case.assert_state(UP, &expect(site, all), &[])?;
    Ok(())
}

fn two_resources() -> Vec<(&'static str, &'static [u8])> {
    vec![("/res/x.txt", b"x-ray"), ("/res/y.txt", b"yankee")]
}

#[test]
fn discovery_well_known() -> Result<()> {
    let site = Site::new()?;
    let all = two_resources();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &all)?;
    // The site root is a 404; the well-known URI of its host leads on.
    discovery_case(&site, "/", "WellKnown", &all)
}

/// The resources, a Capability List without an `up` link and a Resource List under `/rs/`:
/// a set that only the route under test can lead to.
fn rs_set_without_description(site: &Site, all: &[(&str, &[u8])]) -> Result<()> {
    site.resources(all)?;
    site.capability_list(
        "/rs/capabilitylist.xml",
        None,
        &[("resourcelist", "/rs/resourcelist.xml")],
    )?;
    site.resource_list("/rs/resourcelist.xml", "/rs/capabilitylist.xml", T0, all)
}

#[test]
fn discovery_robots_txt() -> Result<()> {
    let site = Site::new()?;
    let all = two_resources();
    rs_set_without_description(&site, &all)?;
    site.write(
        "/robots.txt",
        format!(
            "User-agent: *\nDisallow: /private/\nSitemap: {}\n",
            site.url("/rs/resourcelist.xml")
        ),
    )?;
    discovery_case(&site, "/", "RobotsTxt", &all)
}

#[test]
fn discovery_html_link() -> Result<()> {
    let site = Site::new()?;
    let all = two_resources();
    rs_set_without_description(&site, &all)?;
    site.write(
        "/page/index.html",
        format!(
            "<!DOCTYPE html>\n<html><head><title>t</title>\n<link rel=\"resourcesync\" href=\"{}\">\n</head><body>hi</body></html>\n",
            site.url("/rs/capabilitylist.xml")
        ),
    )?;
    discovery_case(&site, "/page/", "HtmlLink", &all)
}

#[test]
fn discovery_link_header() -> Result<()> {
    let site = Site::new()?;
    let all = two_resources();
    site.resources(&all)?;
    site.source_description("/rs/description.xml", &["/rs/capabilitylist.xml"])?;
    site.capability_list(
        "/rs/capabilitylist.xml",
        Some("/rs/description.xml"),
        &[("resourcelist", "/rs/resourcelist.xml")],
    )?;
    site.resource_list("/rs/resourcelist.xml", "/rs/capabilitylist.xml", T0, &all)?;
    site.write("/landing.txt", "a landing page\n")?;
    site.fx.set_header(
        "/landing.txt",
        "Link",
        &format!(
            "<{}>; rel=\"resourcesync\"",
            site.url("/rs/description.xml")
        ),
    );
    discovery_case(&site, "/landing.txt", "LinkHeader", &all)
}

// ---------------------------------------------------------------------------------------
// 7. Only a Resource List: every run after the baseline re-syncs

#[test]
fn resource_list_only_resyncs_file_store() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
    ]);
    site.standard(&[("resourcelist", "/resourcelist.xml")], &v1)?;
    let case = Case::new(
        Store::file("rl-only")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    assert!(
        run.resyncs().is_empty(),
        "a baseline is not a re-sync: {run:#?}"
    );
    case.assert_state(UP, &expect(&site, &v1), &[])?;

    // a modified, d added, c removed.
    let v2 = res(&[
        ("/res/a.txt", "alpha-2"),
        ("/res/b.txt", "bravo"),
        ("/res/d.txt", "delta"),
    ]);
    site.resources(&v2)?;
    site.fx.remove("/res/c.txt")?;
    site.resource_list(
        "/resourcelist.xml",
        "/capabilitylist.xml",
        "2026-01-02T00:00:00Z",
        &v2,
    )?;
    site.fx.reset_counters();
    let run = case.run()?;
    run.assert_ok();
    assert!(!run.resyncs().is_empty(), "{run:#?}");
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    assert_eq!(run.n("unchanged"), 1);
    assert_eq!(site.fx.hits("/res/b.txt"), 0, "unchanged b is not fetched");
    let snap = case.assert_state(UP, &expect(&site, &v2), &urls(&site, &["/res/c.txt"]))?;
    assert_eq!(snap.log.len(), 6, "{:#?}", snap.log);
    snap.assert_log_sane();
    assert_eq!(snap.log_of(&site.url("/res/a.txt")), ["created", "updated"]);
    assert_eq!(snap.log_of(&site.url("/res/c.txt")), ["created", "deleted"]);
    Ok(())
}

/// A Resource List larger than `[store] listed_memory_bytes` holds (1,024 URIs at the
/// least): the URIs seen go to sorted runs on local disk (issue 24), and still a URI listed
/// twice, far apart (the first time long written out to disk), is stored once, and a
/// re-sync deletes exactly what the list no longer names.
#[test]
fn a_list_larger_than_the_listed_memory_dedupes_and_deletes_exactly() -> Result<()> {
    let site = Site::new()?;
    let n = 3000;
    let bodies: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| (format!("/res/{i}.txt"), format!("body {i}").into_bytes()))
        .collect();
    let v1: Vec<(&str, &[u8])> = bodies
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &v1)?;
    // The first and a middle resource listed again at the end.
    let mut twice = v1.clone();
    twice.extend([v1[0], v1[1500]]);
    site.resource_list("/resourcelist.xml", "/capabilitylist.xml", T0, &twice)?;
    let case = Case::new(
        Store::file("listed-on-disk")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let toml = std::fs::read_to_string(&case.toml)?;
    std::fs::write(
        &case.toml,
        toml.replacen(
            "[store]\n",
            "[store]\nlisted_memory_bytes = 0\nlisted_filter_bytes = 64\n",
            1,
        ),
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (n, 0, 0), "{run:#?}");
    assert_eq!(site.fx.hits("/res/0.txt"), 1, "listed twice, fetched once");
    assert_eq!(
        site.fx.hits("/res/1500.txt"),
        1,
        "listed twice, fetched once"
    );

    // Five resources no longer listed (spread over the runs on disk and the buffer), one
    // listed twice: a re-sync (no Change List) deletes the five, nothing else.
    let gone = [7usize, 1024, 1500, 2000, 2999];
    let v2: Vec<(&str, &[u8])> = v1
        .iter()
        .enumerate()
        .filter(|(i, _)| !gone.contains(i))
        .map(|(_, r)| *r)
        .collect();
    let mut twice = v2.clone();
    twice.push(v2[3]);
    site.resource_list(
        "/resourcelist.xml",
        "/capabilitylist.xml",
        "2026-01-02T00:00:00Z",
        &twice,
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert!(!run.resyncs().is_empty(), "{run:#?}");
    assert_eq!(run.cud(), (0, 0, gone.len() as u64), "{run:#?}");
    assert_eq!(run.n("unchanged"), n - gone.len() as u64);
    let gone_paths: Vec<String> = gone.iter().map(|i| format!("/res/{i}.txt")).collect();
    let gone_paths: Vec<&str> = gone_paths.iter().map(String::as_str).collect();
    let snap = case.assert_state(UP, &expect(&site, &v2), &urls(&site, &gone_paths))?;
    snap.assert_log_sane();
    assert_eq!(
        snap.log.len(),
        n as usize + gone.len(),
        "one created each, five deleted"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 8. Changes fell out of the upstream's window: re-sync

/// Baseline at T0, then the upstream's Change List is replaced by one starting after T0
/// (c's deletion fell out of the window) and its Resource List moves to 2026-01-05.
/// Returns after the second (re-syncing) run.
fn gap_scenario(name: &str) -> Result<(Site, Case, Run)> {
    let site = Site::new()?;
    let v1 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
    ]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &v1,
    )?;
    let cap = site.url("/capabilitylist.xml");
    site.write(
        "/changelist.xml",
        doc(
            "urlset",
            r#"capability="changelist" from="2025-12-31T00:00:00Z""#,
            &[("up", &cap)],
            &[change_item(
                &site.url("/res/b.txt"),
                "updated",
                "2025-12-31T12:00:00Z",
                Some(b"bravo"),
            )],
        ),
    )?;
    let case = Case::new(Store::s3(name)?, &site.url("/.well-known/resourcesync"), "")?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (3, 0, 0), "{run:#?}");
    assert!(run.resyncs().is_empty(), "{run:#?}");

    // The upstream moved on: a updated, c deleted, d created; its Change List now starts
    // after rsagg's checkpoint (T0), so c's deletion is no longer announced anywhere.
    let v2 = res(&[
        ("/res/a.txt", "alpha-2"),
        ("/res/b.txt", "bravo"),
        ("/res/d.txt", "delta"),
    ]);
    site.resources(&v2)?;
    site.fx.remove("/res/c.txt")?;
    site.resource_list(
        "/resourcelist.xml",
        "/capabilitylist.xml",
        "2026-01-05T00:00:00Z",
        &v2,
    )?;
    site.write(
        "/changelist.xml",
        doc(
            "urlset",
            r#"capability="changelist" from="2026-01-03T00:00:00Z""#,
            &[("up", &cap)],
            &[
                change_item(
                    &site.url("/res/a.txt"),
                    "updated",
                    "2026-01-04T00:00:00Z",
                    Some(b"alpha-2"),
                ),
                change_item(
                    &site.url("/res/d.txt"),
                    "created",
                    "2026-01-04T01:00:00Z",
                    Some(b"delta"),
                ),
            ],
        ),
    )?;
    let run = case.run()?;
    Ok((site, case, run))
}

#[test]
fn change_list_gap_resyncs_from_the_resource_list() -> Result<()> {
    let (site, case, run) = gap_scenario("gap")?;
    let cap = site.url("/capabilitylist.xml");
    let v2 = res(&[
        ("/res/a.txt", "alpha-2"),
        ("/res/b.txt", "bravo"),
        ("/res/d.txt", "delta"),
    ]);
    run.assert_ok();
    assert_eq!(run.resyncs().len(), 1, "{run:#?}");
    assert!(run.resyncs()[0].contains("re-synced"), "{run:#?}");
    assert_eq!(run.cud(), (1, 1, 1), "{run:#?}");
    let snap = case.assert_state(UP, &expect(&site, &v2), &urls(&site, &["/res/c.txt"]))?;
    assert_eq!(snap.log.len(), 6, "{:#?}", snap.log);
    snap.assert_log_sane();
    let cp = checkpoint(&case, UP, &cap)?.context("checkpoint")?;
    assert_eq!(
        cp.baseline_at.map(|t| t.to_string()).as_deref(),
        Some("2026-01-05T00:00:00Z"),
        "{cp:?}"
    );

    // The next run is incremental again.
    let run = case.run()?;
    run.assert_ok();
    assert!(run.resyncs().is_empty(), "{run:#?}");
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(run.n("replayed"), 2, "{run:#?}");
    Ok(())
}

/// `Checkpoint::resyncs` counts the re-syncs forced by a gap (records.rs); after one it must
/// say 1, whether or not a later change was applied in the same run.
#[test]
fn gap_resync_is_counted_in_the_checkpoint() -> Result<()> {
    let (site, case, run) = gap_scenario("gap-count")?;
    run.assert_ok();
    assert_eq!(run.resyncs().len(), 1, "{run:#?}");
    let cp = checkpoint(&case, UP, &site.url("/capabilitylist.xml"))?.context("checkpoint")?;
    assert_eq!(cp.resyncs, 1, "persisted re-sync count: {cp:?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 9. Verification: quarantine, retries, redirects, gzip

#[test]
fn mismatching_bytes_are_refetched_once_then_quarantined() -> Result<()> {
    let site = Site::new()?;
    let good = ("/res/good.txt", &b"good bytes"[..]);
    site.standard(&[("resourcelist", "/resourcelist.xml")], &[good])?;
    site.write("/res/bad.txt", "tampered bytes")?;
    let cap = site.url("/capabilitylist.xml");
    // No lastmod on the bad entry: a served Last-Modified later than the listed time would
    // explain the mismatch (a newer version) and be accepted.
    let rl = |bad_listed: &[u8]| -> Result<()> {
        site.write(
            "/resourcelist.xml",
            doc(
                "urlset",
                &format!(r#"capability="resourcelist" at="{T0}""#),
                &[("up", &cap)],
                &[
                    url_item(&site.url(good.0), Some(LASTMOD), &md_of(good.1), ""),
                    url_item(&site.url("/res/bad.txt"), None, &md_of(bad_listed), ""),
                ],
            ),
        )
    };
    rl(b"expected bytes")?;
    let case = Case::new(
        Store::s3("quarantine")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    assert_eq!(run.code, 0, "{run:#?}");
    assert_eq!(run.verdict(), "ok", "{run:#?}");
    assert_eq!(run.n("quarantined"), 1, "{run:#?}");
    assert_eq!(run.n("created"), 1, "{run:#?}");
    assert_eq!(
        site.fx.hits("/res/bad.txt"),
        2,
        "fetched, then refetched once"
    );
    let bad = site.url("/res/bad.txt");
    let snap = case.assert_state(UP, &expect(&site, &[good]), &[])?;
    assert!(
        !snap.records.contains_key(&bad),
        "no record for a quarantined resource"
    );
    assert_eq!(snap.quarantine.len(), 1, "{:#?}", snap.quarantine);
    assert_eq!(snap.quarantine[0].uri, bad);
    // The run leaves its report and the quarantine (URI, expected, got) where `serve`'s
    // status page reads them.
    let stats = case.stats()?;
    let q = &stats["quarantine"][0];
    assert_eq!(q["uri"], bad.as_str(), "{stats:#}");
    assert_eq!(
        q["expected"],
        format!("md5:{}", md5_hex(b"expected bytes")),
        "{stats:#}"
    );
    assert_eq!(
        q["got"],
        format!("md5:{}", md5_hex(b"tampered bytes")),
        "{stats:#}"
    );
    assert_eq!(
        stats["report"]["upstreams"][0]["quarantined"], 1,
        "{stats:#}"
    );
    assert!(
        snap.quarantine[0]
            .expected
            .contains(&md5_hex(b"expected bytes"))
    );
    assert!(snap.quarantine[0].got.contains(&md5_hex(b"tampered bytes")));

    let run = case.run_with(&["--fail-on-quarantine"])?;
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.n("quarantined"), 1, "{run:#?}");

    // Fixed upstream: stored, quarantine lifted.
    rl(b"tampered bytes")?;
    let run = case.run_with(&["--fail-on-quarantine"])?;
    run.assert_ok();
    assert_eq!(run.n("quarantined"), 0);
    assert_eq!(run.n("created"), 1, "{run:#?}");
    let both = vec![
        (site.url(good.0), good.1.to_vec()),
        (bad.clone(), b"tampered bytes".to_vec()),
    ];
    let snap = case.assert_state(UP, &both, &[])?;
    assert!(snap.quarantine.is_empty(), "{:#?}", snap.quarantine);
    Ok(())
}

#[test]
fn retries_redirects_and_gzip() -> Result<()> {
    let site = Site::new()?;
    let all = res(&[
        ("/res/flaky.txt", "flaky but there"),
        ("/res/moved.txt", "the moved resource's bytes"),
        ("/res/zipped.txt", "inflated bytes are what counts"),
        ("/res/plain.txt", "plain"),
    ]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml.gz"),
        ],
        &all,
    )?;
    // A Change List stored gzip-compressed (application/gzip, no Content-Encoding): one
    // change after the baseline, a resource that answers 429 once.
    site.write("/res/late.txt", "late arrival")?;
    let cl = doc(
        "urlset",
        r#"capability="changelist" from="2025-12-31T00:00:00Z""#,
        &[("up", &site.url("/capabilitylist.xml"))],
        &[change_item(
            &site.url("/res/late.txt"),
            "created",
            "2026-01-02T00:00:00Z",
            Some(b"late arrival"),
        )],
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    std::io::Write::write_all(&mut gz, cl.as_bytes())?;
    site.write("/changelist.xml.gz", gz.finish()?)?;
    site.fx
        .fail_next("/res/late.txt", 1, Failure::too_many_requests(1));
    // flaky: 503 once, then 200.
    site.fx
        .fail_next("/res/flaky.txt", 1, Failure::unavailable(0));
    // moved: a permanent redirect to where the bytes are.
    site.write("/elsewhere/moved.txt", "the moved resource's bytes")?;
    site.fx.fail_always(
        "/res/moved.txt",
        Failure::redirect(301, &site.url("/elsewhere/moved.txt")),
    );
    site.fx.remove("/res/moved.txt")?;
    // zipped: Content-Encoding gzip whatever the request says; the Resource List too.
    site.fx.set_gzip("/res/zipped.txt", Gzip::Always);
    site.fx.set_gzip("/resourcelist.xml", Gzip::Always);
    site.fx.set_gzip("/capabilitylist.xml", Gzip::IfAccepted);

    let case = Case::new(
        Store::s3("verify")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (5, 0, 0), "{run:#?}");
    assert_eq!(site.fx.hits("/res/late.txt"), 2, "429 then retried");
    assert_eq!(run.n("quarantined"), 0, "{run:#?}");
    assert_eq!(site.fx.hits("/res/flaky.txt"), 2, "503 then retried");
    assert_eq!(site.fx.hits("/elsewhere/moved.txt"), 1);
    let mut with_late = all.clone();
    with_late.push(("/res/late.txt", b"late arrival"));
    let snap = case.assert_state(UP, &expect(&site, &with_late), &[])?;
    assert_eq!(snap.log.len(), 5);
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 10. A failed resource, then a rerun

#[test]
fn failed_resource_then_rerun_completes_without_duplicates() -> Result<()> {
    let site = Site::new()?;
    let all = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
    ]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &all,
    )?;
    let cap = site.url("/capabilitylist.xml");
    let cl = |items: &[String]| {
        site.changes(
            "/changelist.xml",
            "changelist",
            "2025-12-31T00:00:00Z",
            items,
        )
    };
    cl(&[])?;
    // c: listed, but the server fails every time (a listed resource that answers 404 is
    // "gone", not a failure, in a baseline).
    site.fx.fail_always("/res/c.txt", Failure::status(500));
    let case = Case::new(
        Store::s3("rerun")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.verdict(), "failed");
    assert_eq!(run.n("failed"), 1, "{run:#?}");
    assert_eq!(run.n("created"), 2, "{run:#?}");
    assert!(
        run.up()["error"].as_str().unwrap_or("").contains("c.txt"),
        "{run:#?}"
    );
    case.assert_state(UP, &expect(&site, &all[..2]), &[])?;
    assert!(
        checkpoint(&case, UP, &cap)?.is_none(),
        "no checkpoint for an unfinished baseline"
    );

    site.fx.clear("/res/c.txt");
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 0, 0), "{run:#?}");
    let snap = case.assert_state(UP, &expect(&site, &all), &[])?;
    assert_eq!(snap.log.len(), 3, "{:#?}", snap.log);
    snap.assert_log_sane();

    // Incremental: d's change fails (404), e's comes after it and waits.
    site.write("/res/e.txt", "echo")?;
    cl(&[
        change_item(
            &site.url("/res/d.txt"),
            "created",
            "2026-01-02T00:00:00Z",
            Some(b"delta"),
        ),
        change_item(
            &site.url("/res/e.txt"),
            "created",
            "2026-01-02T01:00:00Z",
            Some(b"echo"),
        ),
    ])?;
    let run = case.run()?;
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.n("failed"), 1, "{run:#?}");
    assert_eq!(
        run.n("created"),
        0,
        "nothing after the failed change is committed: {run:#?}"
    );
    let snap = case.snapshot(UP)?;
    assert_eq!(snap.log.len(), 3);

    site.write("/res/d.txt", "delta")?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (2, 0, 0), "{run:#?}");
    assert_eq!(run.n("replayed"), 0, "{run:#?}");
    let v = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
        ("/res/d.txt", "delta"),
        ("/res/e.txt", "echo"),
    ]);
    let snap = case.assert_state(UP, &expect(&site, &v), &[])?;
    assert_eq!(snap.log.len(), 5, "{:#?}", snap.log);
    snap.assert_log_sane();
    for (p, _) in &v {
        assert_eq!(snap.log_of(&site.url(p)), ["created"], "{p}");
    }
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(run.n("replayed"), 2, "{run:#?}");
    Ok(())
}

// ---------------------------------------------------------------------------------------
// 11. Exit codes: invalid pipeline (2), fenced (3)

#[test]
fn invalid_pipeline_exits_2() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store = url::Url::from_directory_path(dir.path().join("store"))
        .map_err(|()| anyhow::anyhow!("path"))?;
    let cases = [
        // name not [a-z0-9-]+
        format!(
            "[collection]\nname = \"Bad Name\"\nbase_url = \"http://a.example/x/\"\n[store]\nurl = \"{store}\"\n\
             [[upstream]]\nname = \"u\"\nurl = \"http://127.0.0.1:9/\"\n"
        ),
        // misspelt key
        format!(
            "[collection]\nname = \"ok\"\nbase_url = \"http://a.example/x/\"\n[store]\nurl = \"{store}\"\n\
             [[upstream]]\nname = \"u\"\nurl = \"http://127.0.0.1:9/\"\nallow_privat = true\n"
        ),
        // no upstream
        format!(
            "[collection]\nname = \"ok\"\nbase_url = \"http://a.example/x/\"\n[store]\nurl = \"{store}\"\n"
        ),
    ];
    for (i, text) in cases.iter().enumerate() {
        let p = dir.path().join(format!("bad{i}.toml"));
        std::fs::write(&p, text)?;
        let p = p.to_str().context("utf-8 path")?;
        let (code, _, err) = rsagg(&["check", p])?;
        assert_eq!(code, 2, "rsagg check on case {i}: {err}");
        assert!(
            err.contains(&format!("bad{i}.toml")),
            "the error names the file: {err}"
        );
        let (code, _, err) = rsagg(&["run", p, "--once", "--json"])?;
        assert_eq!(code, 2, "rsagg run on case {i}: {err}");
    }
    assert!(
        !dir.path().join("store").exists(),
        "an invalid pipeline touches no store"
    );
    let good = dir.path().join("good.toml");
    std::fs::write(
        &good,
        format!(
            "[collection]\nname = \"ok\"\nbase_url = \"http://a.example/x/\"\n[store]\nurl = \"{store}\"\n\
             [[upstream]]\nname = \"u\"\nurl = \"http://upstream.example.org/\"\n"
        ),
    )?;
    let (code, out, err) = rsagg(&["check", good.to_str().context("utf-8")?])?;
    assert_eq!(code, 0, "{out}{err}");
    Ok(())
}

#[test]
fn a_second_writer_fences_the_run_exit_3() -> Result<()> {
    let site = Site::new()?;
    let all = res(&[("/res/a.txt", "alpha"), ("/res/slow.txt", "slow bytes")]);
    site.standard(&[("resourcelist", "/resourcelist.xml")], &all)?;
    site.fx.set_delay("/res/slow.txt", Duration::from_secs(4));
    let case = Case::new(
        Store::s3("fence")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;

    let mut child = std::process::Command::new(rsagg_bin()?)
        .arg("run")
        .arg(&case.toml)
        .args(["--once", "--json"])
        .envs(case.store.env()?)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    // Once rsagg waits for the slow resource it has opened the state: open it too.
    let t0 = Instant::now();
    while site.fx.hits("/res/slow.txt") == 0 {
        if t0.elapsed() > Duration::from_secs(60) || child.try_wait()?.is_some() {
            let out = child.wait_with_output()?;
            panic!(
                "rsagg never asked for the slow resource: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let objects = case.store.objects()?;
    block_on(async move {
        let st = State::open(objects, "e2e").await?;
        st.close().await?;
        Ok(())
    })?;
    let out = child.wait_with_output()?;
    assert_eq!(
        out.status.code(),
        Some(3),
        "a fenced run exits 3; stderr:\n{}",
        tail(&String::from_utf8_lossy(&out.stderr), 30)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("fenced"));

    // The next run (no other writer) completes.
    site.fx.clear("/res/slow.txt");
    let run = case.run()?;
    run.assert_ok();
    let snap = case.assert_state(UP, &expect(&site, &all), &[])?;
    snap.assert_log_sane();
    Ok(())
}

// ---------------------------------------------------------------------------------------
// resync-simulator: a live, changing Source

/// Reads a ResourceSync document from bytes (lenient).
fn parse_entries(bytes: &[u8], name: &str) -> Result<(Header, Vec<UrlEntry>)> {
    let mut r = SyncReader::open(bytes, ReadOptions::new(Mode::Lenient, name))?;
    let header = r.header().clone();
    let mut v = Vec::new();
    while let Some(e) = r.next_entry()? {
        v.push(e);
    }
    Ok((header, v))
}

fn change_time(e: &UrlEntry) -> Option<W3cDateTime> {
    e.md.as_ref().and_then(|m| m.datetime).or(e.lastmod)
}

/// Compares rsagg's copies with the simulator now: every resource of its Resource List is
/// present with the bytes a fresh GET returns, nothing else is present, and every other
/// resource rsagg knows is deleted. With `since`, a resource that differs is excused when the
/// simulator's Change List (read after the difference was seen) has a change of it at or
/// after `since` (the start of the run): it changed while or after rsagg ran, and is the next
/// run's business. Without `since` (the simulator has stopped) the comparison is exact.
/// Returns the number of resources that matched.
fn compare_with_simulator(
    case: &Case,
    sim: &Simulator,
    since: Option<SystemTime>,
) -> Result<usize> {
    let (status, body) = http_get(&sim.url("/resourcelist.xml"))?;
    assert_eq!(status, 200);
    let (_, listed) = parse_entries(&body, "resourcelist.xml")?;
    let listed: Vec<String> = listed
        .into_iter()
        .map(|e| e.loc.trim().to_owned())
        .collect();
    let snap = case.snapshot(UP)?;
    let excused = |uri: &str, why: String| -> Result<()> {
        match since {
            Some(t) if changed_since(sim, t)?.iter().any(|u| u == uri) => Ok(()),
            _ => panic!("{why}"),
        }
    };
    let mut compared = 0;
    for uri in &listed {
        let Some(r) = snap.records.get(uri) else {
            excused(
                uri,
                format!("{uri} listed upstream but not in rsagg's state"),
            )?;
            continue;
        };
        let (st, fresh) = http_get(uri)?;
        let copy = r.copy.as_ref().expect("copy");
        if r.status != ResourceStatus::Present
            || st != 200
            || copy.md5 != md5_hex(&fresh)
            || copy.length != fresh.len() as u64
        {
            excused(
                uri,
                format!(
                    "{uri}: rsagg holds {r:?}; the Source answers {st} with {} bytes, md5 {}",
                    fresh.len(),
                    md5_hex(&fresh)
                ),
            )?;
            continue;
        }
        assert_eq!(case.blob(&copy.sha256)?, fresh, "bytes of {uri}");
        compared += 1;
    }
    for (uri, r) in &snap.records {
        if !listed.contains(uri) && r.status != ResourceStatus::Deleted {
            excused(
                uri,
                format!("{uri} is gone upstream but present in rsagg's state"),
            )?;
        }
    }
    snap.assert_log_sane();
    Ok(compared)
}

/// URIs of the simulator's Change List with a change at or after `since`.
fn changed_since(sim: &Simulator, since: SystemTime) -> Result<Vec<String>> {
    let (status, body) = http_get(&sim.url("/changelist.xml"))?;
    assert_eq!(status, 200);
    let (_, entries) = parse_entries(&body, "changelist.xml")?;
    let since = since.duration_since(UNIX_EPOCH)?.as_nanos() as i128;
    Ok(entries
        .iter()
        .filter(|e| change_time(e).is_none_or(|t| t.unix_nanos() >= since))
        .map(|e| e.loc.trim().to_owned())
        .collect())
}

fn changelist_len(sim: &Simulator) -> Result<usize> {
    let (_, body) = http_get(&sim.url("/changelist.xml"))?;
    Ok(parse_entries(&body, "changelist.xml")?.1.len())
}

/// Baseline while the simulator changes, incremental runs while it still changes and once
/// it has stopped. A run's copies are compared with the Source right after the run; the
/// resources the Source changed since the run started are skipped then (their newer state is
/// rsagg's next run's business). Once the simulator has made its last event (`max_events`,
/// seen as that many entries in its Change List) the comparison is exact.
#[test]
fn simulator_baseline_and_incremental() -> Result<()> {
    const EVENTS: usize = 30;
    let sim = Simulator::start(SimOptions {
        resources: 15,
        change_delay: 0.25,
        max_events: EVENTS as i64,
        average_payload: 300,
        seed: Some(11),
        wait_for_changelist: true,
        ..SimOptions::default()
    })?;
    let case = Case::new(Store::s3("simulator")?, &sim.source_description_url(), "")?;

    let started = SystemTime::now() - Duration::from_secs(1);
    let run = case.run()?;
    run.assert_ok();
    assert!(run.n("created") >= 10, "{run:#?}");
    compare_with_simulator(&case, &sim, Some(started))?;

    let started = SystemTime::now() - Duration::from_secs(1);
    let run = case.run()?;
    run.assert_ok();
    compare_with_simulator(&case, &sim, Some(started))?;

    // Wait for the simulator's last event.
    let t0 = Instant::now();
    while changelist_len(&sim)? < EVENTS {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "simulator did not reach {EVENTS} changes; log:\n{}",
            sim.log_tail(20)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    std::thread::sleep(Duration::from_millis(500));
    let run = case.run()?;
    run.assert_ok();
    assert!(
        run.resyncs().is_empty(),
        "the Change List reaches back: {run:#?}"
    );
    let n = compare_with_simulator(&case, &sim, None)?;
    assert!(n >= 5, "compared {n} resources");

    // Quiet Source: nothing to do, nothing logged.
    let before = case.snapshot(UP)?.log.len();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(case.snapshot(UP)?.log.len(), before);
    compare_with_simulator(&case, &sim, None)?;
    Ok(())
}

// ---------------------------------------------------------------------------------------
// More incremental cases: pending deletions, equal instants, conditional GET, two upstreams,
// a killed run

/// A resource that answers 404 is not a failure when the same Change List deletes it later
/// (spec 12.1: the Destination processes the changes in order; only the last state counts).
#[test]
fn a_404_with_a_later_deletion_pending_is_not_a_failure() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[("/res/a.txt", "alpha"), ("/res/b.txt", "bravo")]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &v1,
    )?;
    let cl = |items: &[String]| {
        site.changes(
            "/changelist.xml",
            "changelist",
            "2025-12-31T00:00:00Z",
            items,
        )
    };
    cl(&[])?;
    let case = Case::new(
        Store::s3("pending-del")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();

    // b updated then deleted; x created then deleted: both are gone by now.
    site.fx.remove("/res/b.txt")?;
    cl(&[
        change_item(
            &site.url("/res/b.txt"),
            "updated",
            "2026-01-02T00:00:00Z",
            Some(b"bravo-2"),
        ),
        change_item(
            &site.url("/res/x.txt"),
            "created",
            "2026-01-02T00:30:00Z",
            Some(b"x"),
        ),
        change_item(
            &site.url("/res/b.txt"),
            "deleted",
            "2026-01-02T01:00:00Z",
            None,
        ),
        change_item(
            &site.url("/res/x.txt"),
            "deleted",
            "2026-01-02T01:30:00Z",
            None,
        ),
    ])?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.n("failed"), 0, "{run:#?}");
    assert_eq!(run.cud(), (0, 0, 1), "{run:#?}");
    let snap = case.assert_state(UP, &expect(&site, &v1[..1]), &urls(&site, &["/res/b.txt"]))?;
    assert!(
        !snap.records.contains_key(&site.url("/res/x.txt")),
        "{:#?}",
        snap.records
    );
    assert_eq!(snap.log.len(), 3, "{:#?}", snap.log);
    snap.assert_log_sane();
    Ok(())
}

/// Two changes at the same instant, the second failing: the rerun applies only the second
/// (the checkpoint remembers which changes at that instant were done).
#[test]
fn changes_at_the_same_instant_resume_exactly() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[("/res/a.txt", "alpha"), ("/res/b.txt", "bravo")]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &v1,
    )?;
    let cap = site.url("/capabilitylist.xml");
    let t = "2026-01-02T00:00:00Z";
    let write_cl = || -> Result<()> {
        site.write(
            "/changelist.xml",
            doc(
                "urlset",
                r#"capability="changelist" from="2025-12-31T00:00:00Z""#,
                &[("up", &cap)],
                &[
                    change_item(&site.url("/res/a.txt"), "updated", t, Some(b"alpha-2")),
                    change_item(&site.url("/res/c.txt"), "created", t, Some(b"charlie")),
                    change_item(&site.url("/res/b.txt"), "updated", t, Some(b"bravo-2")),
                ],
            ),
        )
    };
    site.write(
        "/changelist.xml",
        doc(
            "urlset",
            r#"capability="changelist" from="2025-12-31T00:00:00Z""#,
            &[("up", &cap)],
            &[],
        ),
    )?;
    let case = Case::new(
        Store::s3("same-instant")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();

    site.write("/res/a.txt", "alpha-2")?;
    site.write("/res/b.txt", "bravo-2")?;
    write_cl()?; // c is not there yet: 404
    let run = case.run()?;
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.cud(), (0, 1, 0), "a applied, stopped at c: {run:#?}");

    site.write("/res/c.txt", "charlie")?;
    site.fx.reset_counters();
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 0), "c and b, not a again: {run:#?}");
    assert_eq!(run.n("replayed"), 1, "{run:#?}");
    assert_eq!(site.fx.hits("/res/a.txt"), 0, "a is not fetched again");
    let v = res(&[
        ("/res/a.txt", "alpha-2"),
        ("/res/b.txt", "bravo-2"),
        ("/res/c.txt", "charlie"),
    ]);
    let snap = case.assert_state(UP, &expect(&site, &v), &[])?;
    assert_eq!(snap.log.len(), 5, "{:#?}", snap.log);
    snap.assert_log_sane();

    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(run.n("replayed"), 3, "{run:#?}");
    Ok(())
}

/// A plain Sitemap (no `rs:md`: no hash, no length) as Resource List: the re-sync asks with
/// the stored ETag and a 304 leaves the copy alone.
#[test]
fn plain_sitemap_is_resynced_with_conditional_get() -> Result<()> {
    let site = Site::new()?;
    let all = res(&[("/res/a.txt", "alpha"), ("/res/b.txt", "bravo")]);
    site.resources(&all)?;
    site.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
    site.capability_list(
        "/capabilitylist.xml",
        Some("/.well-known/resourcesync"),
        &[("resourcelist", "/resourcelist.xml")],
    )?;
    let write_rl = |at: &str| -> Result<()> {
        let items: Vec<String> = all
            .iter()
            .map(|(p, _)| url_item(&site.url(p), None, "", ""))
            .collect();
        site.write(
            "/resourcelist.xml",
            doc(
                "urlset",
                &format!(r#"capability="resourcelist" at="{at}""#),
                &[("up", &site.url("/capabilitylist.xml"))],
                &items,
            ),
        )
    };
    write_rl(T0)?;
    let case = Case::new(
        Store::s3("plain")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (2, 0, 0), "{run:#?}");

    site.fx.reset_counters();
    write_rl("2026-01-02T00:00:00Z")?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    assert_eq!(run.n("unchanged"), 2);
    for r in site
        .fx
        .requests()
        .iter()
        .filter(|r| r.path.starts_with("/res/"))
    {
        assert!(
            r.header("if-none-match").is_some(),
            "conditional GET: {r:?}"
        );
        assert_eq!(r.status, 304, "{r:?}");
    }
    let snap = case.assert_state(UP, &expect(&site, &all), &[])?;
    assert_eq!(snap.log.len(), 2);
    Ok(())
}

/// Two upstreams in one pipeline: one cannot be discovered (exit 1), the other is harvested
/// and committed all the same.
#[test]
fn one_failing_upstream_does_not_stop_the_other() -> Result<()> {
    let good = Site::new()?;
    let all = two_resources();
    good.standard(&[("resourcelist", "/resourcelist.xml")], &all)?;
    let bad = Site::new()?; // empty: nothing to discover
    let case = Case::with_upstreams(
        Store::s3("two-upstreams")?,
        &[
            upstream("good", &good.url("/.well-known/resourcesync"), ""),
            upstream("bad", &bad.url("/"), ""),
        ],
    )?;
    let run = case.run()?;
    assert_eq!(run.code, 1, "{run:#?}");
    assert_eq!(run.up_named("good")["verdict"], "ok", "{run:#?}");
    assert_eq!(run.up_named("good")["created"], 2, "{run:#?}");
    assert_eq!(run.up_named("bad")["verdict"], "failed", "{run:#?}");
    assert!(
        run.up_named("bad")["error"]
            .as_str()
            .is_some_and(|e| !e.is_empty())
    );
    case.assert_state("good", &expect(&good, &all), &[])?;
    Ok(())
}

// A run killed with SIGKILL and resumed: see the crash suite, `tests/crash.rs` (kill points read
// from the run's progress, many rounds, `run --once` and `run --follow`).

/// Several changes of one resource in one Change List (resync-simulator does this all the
/// time): rsagg can only fetch the resource's current bytes, so they make one change of its
/// copy, logged once.
#[test]
fn several_changes_of_one_resource_in_one_list_are_logged_once() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[("/res/a.txt", "alpha")]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &v1,
    )?;
    let cap = site.url("/capabilitylist.xml");
    site.write(
        "/changelist.xml",
        doc(
            "urlset",
            r#"capability="changelist" from="2025-12-31T00:00:00Z""#,
            &[("up", &cap)],
            &[],
        ),
    )?;
    let case = Case::new(
        Store::s3("repeated")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();

    site.write("/res/a.txt", "alpha-3")?;
    site.write("/res/x.txt", "x-ray-2")?;
    site.write(
        "/changelist.xml",
        doc(
            "urlset",
            r#"capability="changelist" from="2025-12-31T00:00:00Z""#,
            &[("up", &cap)],
            &[
                change_item(
                    &site.url("/res/a.txt"),
                    "updated",
                    "2026-01-02T00:00:00Z",
                    Some(b"alpha-2"),
                ),
                change_item(
                    &site.url("/res/x.txt"),
                    "created",
                    "2026-01-02T00:10:00Z",
                    Some(b"x-ray"),
                ),
                change_item(
                    &site.url("/res/a.txt"),
                    "updated",
                    "2026-01-02T00:20:00Z",
                    Some(b"alpha-3"),
                ),
                change_item(
                    &site.url("/res/x.txt"),
                    "updated",
                    "2026-01-02T00:30:00Z",
                    Some(b"x-ray-2"),
                ),
            ],
        ),
    )?;
    let run = case.run()?;
    run.assert_ok();
    let v = res(&[("/res/a.txt", "alpha-3"), ("/res/x.txt", "x-ray-2")]);
    let snap = case.assert_state(UP, &expect(&site, &v), &[])?;
    snap.assert_log_sane();
    assert_eq!(
        snap.log_of(&site.url("/res/a.txt")),
        ["created", "updated"],
        "{:#?}",
        snap.log
    );
    assert_eq!(
        snap.log_of(&site.url("/res/x.txt")).len(),
        1,
        "{:#?}",
        snap.log
    );
    Ok(())
}

/// rsagg's change log describes rsagg's copies (it is what its own Change Lists republish):
/// the first copy of a resource is a creation, whatever the upstream's change said (here an
/// `updated` of a resource created before the baseline but missing from its Resource List,
/// and a `created` superseded by an `updated` in the same list).
#[test]
fn a_first_copy_is_logged_as_created() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[("/res/a.txt", "alpha")]);
    site.standard(
        &[
            ("resourcelist", "/resourcelist.xml"),
            ("changelist", "/changelist.xml"),
        ],
        &v1,
    )?;
    let cl = |items: &[String]| {
        site.changes(
            "/changelist.xml",
            "changelist",
            "2025-12-31T00:00:00Z",
            items,
        )
    };
    cl(&[])?;
    let case = Case::new(
        Store::s3("first-copy")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();

    site.write("/res/m.txt", "mike-2")?;
    site.write("/res/x.txt", "x-ray-2")?;
    cl(&[
        change_item(
            &site.url("/res/m.txt"),
            "updated",
            "2026-01-02T00:00:00Z",
            Some(b"mike-2"),
        ),
        change_item(
            &site.url("/res/x.txt"),
            "created",
            "2026-01-02T00:10:00Z",
            Some(b"x-ray"),
        ),
        change_item(
            &site.url("/res/x.txt"),
            "updated",
            "2026-01-02T00:30:00Z",
            Some(b"x-ray-2"),
        ),
    ])?;
    let run = case.run()?;
    run.assert_ok();
    let snap = case.snapshot(UP)?;
    snap.assert_log_sane();
    assert_eq!(
        snap.log_of(&site.url("/res/m.txt")),
        ["created"],
        "{:#?}",
        snap.log
    );
    assert_eq!(
        snap.log_of(&site.url("/res/x.txt")),
        ["created"],
        "{:#?}",
        snap.log
    );
    assert_eq!(run.cud(), (2, 0, 0), "{run:#?}");
    Ok(())
}

/// The upstream closes its Change List A (`until`) and starts B (the Capability List now
/// points at B). Nothing is lost or logged twice, and (spec 12.1) rsagg goes from A, the list
/// it was following, to its successor B instead of re-syncing from the Resource List.
#[test]
fn change_list_rollover_loses_nothing() -> Result<()> {
    let site = Site::new()?;
    let v1 = res(&[("/res/a.txt", "alpha"), ("/res/b.txt", "bravo")]);
    site.resources(&v1)?;
    site.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
    let caplist = |cl: &str| {
        site.capability_list(
            "/capabilitylist.xml",
            Some("/.well-known/resourcesync"),
            &[("resourcelist", "/resourcelist.xml"), ("changelist", cl)],
        )
    };
    caplist("/cl/a.xml")?;
    site.resource_list("/resourcelist.xml", "/capabilitylist.xml", T0, &v1)?;
    let cap = site.url("/capabilitylist.xml");
    let list_a = |until: Option<&str>, items: &[String]| -> Result<()> {
        let md = match until {
            Some(u) => {
                format!(r#"capability="changelist" from="2025-12-31T00:00:00Z" until="{u}""#)
            }
            None => r#"capability="changelist" from="2025-12-31T00:00:00Z""#.to_string(),
        };
        site.write("/cl/a.xml", doc("urlset", &md, &[("up", &cap)], items))
    };
    list_a(None, &[])?;
    let case = Case::new(
        Store::s3("rollover")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    case.run()?.assert_ok();

    // b updated in list A, which is then closed; list B (from A's until) creates d.
    site.write("/res/b.txt", "bravo-2")?;
    site.write("/res/d.txt", "delta")?;
    list_a(
        Some("2026-01-03T00:00:00Z"),
        &[change_item(
            &site.url("/res/b.txt"),
            "updated",
            "2026-01-02T00:00:00Z",
            Some(b"bravo-2"),
        )],
    )?;
    site.write(
        "/cl/b.xml",
        doc(
            "urlset",
            r#"capability="changelist" from="2026-01-03T00:00:00Z""#,
            &[("up", &cap)],
            &[change_item(
                &site.url("/res/d.txt"),
                "created",
                "2026-01-04T00:00:00Z",
                Some(b"delta"),
            )],
        ),
    )?;
    caplist("/cl/b.xml")?;
    let v2 = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo-2"),
        ("/res/d.txt", "delta"),
    ]);
    site.resource_list(
        "/resourcelist.xml",
        "/capabilitylist.xml",
        "2026-01-05T00:00:00Z",
        &v2,
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 1, 0), "{run:#?}");
    let snap = case.assert_state(UP, &expect(&site, &v2), &[])?;
    assert_eq!(snap.log.len(), 4, "{:#?}", snap.log);
    snap.assert_log_sane();
    // Spec 12.1: the Destination keeps polling the list it follows (the checkpoint's, A)
    // and, once A is closed and processed, finds its successor through `up`: A still
    // covers everything since the checkpoint, so no re-sync from the Resource List is due.
    assert!(
        run.resyncs().is_empty(),
        "closed list A still reaches back to the checkpoint; expected A then B, not a re-sync: {:?}",
        run.resyncs()
    );

    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (0, 0, 0), "{run:#?}");
    Ok(())
}

/// A Resource List older than a deletion: the listed resource answers 404 in the baseline;
/// it is skipped as gone (a warning), not a failure, and the baseline completes.
#[test]
fn listed_but_gone_in_a_baseline_is_skipped() -> Result<()> {
    let site = Site::new()?;
    let all = res(&[("/res/a.txt", "alpha"), ("/res/b.txt", "bravo")]);
    site.standard(&[("resourcelist", "/resourcelist.xml")], &all)?;
    site.fx.remove("/res/b.txt")?;
    let case = Case::new(
        Store::s3("gone")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (1, 0, 0), "{run:#?}");
    assert_eq!(run.n("gone"), 1, "{run:#?}");
    assert_eq!(run.n("failed"), 0, "{run:#?}");
    assert!(
        run.warnings().iter().any(|w| w.contains("b.txt")),
        "{run:#?}"
    );
    let snap = case.assert_state(UP, &expect(&site, &all[..1]), &[])?;
    assert!(!snap.records.contains_key(&site.url("/res/b.txt")));
    assert!(
        checkpoint(&case, UP, &site.url("/capabilitylist.xml"))?.is_some(),
        "baseline done"
    );
    Ok(())
}

/// Issue 24 point 4: a baseline into S3 builds its first Resource Dump from the bodies as it
/// harvested them (the spool on local disk, `[store] spool_dir`), not by reading them back:
/// the whole run reads back fewer than 1% of its bodies, and every body in the dump
/// is the one harvested. `recent_blob_bytes = 0` stands for a collection memory does not
/// hold (at 10^6 the default 64 MiB held ~29% of the bodies; before the spool the dump read
/// the rest back, one GET each, so this test saw ~N GETs). The spool's directory is gone
/// when the run ends.
#[test]
fn a_baseline_into_s3_reads_no_body_back_for_its_resource_dump() -> Result<()> {
    use object_store::ObjectStoreExt;
    const N: usize = 8000;
    let site = Site::new()?;
    let bodies: Vec<(String, Vec<u8>)> = (0..N)
        .map(|i| {
            (
                format!("/res/{i}"),
                format!("resource {i}; ").repeat(8).into_bytes(),
            )
        })
        .collect();
    let all: Vec<(&str, &[u8])> = bodies
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &all)?;
    let case = Case::new(
        Store::s3("spooled")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let spool = tempfile::Builder::new()
        .prefix("rsagg-e2e-spool-")
        .tempdir()?;
    let toml = std::fs::read_to_string(&case.toml)?.replace(
        "[store]\n",
        &format!(
            "[store]\nrecent_blob_bytes = 0\nspool_dir = \"{}\"\n",
            spool.path().display()
        ),
    );
    std::fs::write(&case.toml, toml)?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (N as u64, 0, 0), "{run:#?}");
    let report = run.report.as_ref().context("no report")?;
    let dump = &report["publish"]["resource_dump"];
    assert_eq!(dump["resources"], N as u64, "{dump}");
    assert_eq!(dump["skipped"], 0, "{dump}");
    // Bodies read back: fewer than 1% of them, by the bytes every GET of the run read (a
    // body is ~120 bytes; the state's and the publisher's own small reads count too).
    let body_bytes = bodies[0].1.len() as u64;
    let read = report["store"]["bytes_read"]
        .as_u64()
        .context("no bytes_read")?;
    assert!(
        read < (N as u64 / 100) * body_bytes,
        "{read} bytes read for a baseline of {N} resources of {body_bytes} bytes: {}",
        report["store"]
    );
    // And no GET per resource (before the spool, ~N): what remains are the state's and the
    // publisher's reads of objects that do not exist yet, which follow the run's length
    // and the documents written, not N.
    let gets = report["store"]["get"].as_u64().context("no GET count")?;
    assert!(
        gets < (N / 20) as u64,
        "{gets} GETs for a baseline of {N} resources: {}",
        report["store"]
    );
    assert_eq!(
        std::fs::read_dir(spool.path())?.count(),
        0,
        "the spool outlived the run"
    );

    // Every item of every package is the body harvested for its upstream URI.
    let objects = case.store.objects()?;
    let want: std::collections::HashMap<String, &[u8]> =
        all.iter().map(|(p, b)| (site.url(p), *b)).collect();
    let seen = block_on(async {
        let meta = objects
            .get(&"published/resourcedump.json".into())
            .await?
            .bytes()
            .await?;
        let meta: serde_json::Value = serde_json::from_slice(&meta)?;
        let mut seen = 0usize;
        for package in meta["packages"].as_array().context("no packages")? {
            let zip = package["zip"].as_str().context("no zip")?;
            let bytes = objects.get(&zip.into()).await?.bytes().await?;
            let mut file = tempfile::tempfile()?;
            std::io::Write::write_all(&mut file, &bytes)?;
            let mut p = rsagg_dump::Package::open(file, zip, rsagg_dump::Limits::default())?;
            anyhow::ensure!(p.problems().is_empty(), "{zip}: {:?}", p.problems());
            let entries = p.entries().to_vec();
            for (i, item) in entries.iter().enumerate() {
                let via = item
                    .entry
                    .links
                    .iter()
                    .find(|l| l.rel == "via")
                    .context("no via")?;
                let mut body = Vec::new();
                std::io::Read::read_to_end(&mut p.open_item(i)?, &mut body)?;
                anyhow::ensure!(
                    want.get(&via.href).is_some_and(|w| *w == body.as_slice()),
                    "{zip}: the item of {} is not the body harvested",
                    via.href
                );
                seen += 1;
            }
        }
        Ok(seen)
    })?;
    assert_eq!(seen, N);
    Ok(())
}

/// Without `allow_private`, an upstream on loopback is refused before any request is made
/// (the address guard), and nothing is stored.
#[test]
fn loopback_upstream_is_refused_without_allow_private() -> Result<()> {
    let site = Site::new()?;
    let all = two_resources();
    site.standard(&[("resourcelist", "/resourcelist.xml")], &all)?;
    let case = Case::new(
        Store::file("guard")?,
        &site.url("/.well-known/resourcesync"),
        "allow_private = false",
    )?;
    // An IP-literal loopback upstream is refused by the config check before any I/O (as
    // `rsagg check` refuses it): exit 2, naming the setting; nothing is asked or written.
    let run = case.run()?;
    assert_eq!(run.code, 2, "{run:#?}");
    assert!(run.stderr.contains("allow_private = true"), "{run:#?}");
    assert_eq!(site.fx.total_hits(), 0, "no request reached the upstream");
    assert!(
        !store_dir(&case)?.join("state").exists(),
        "no state written"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Real producers' quirks (tests/fixtures/real-world/)

/// A real-world fixture with its URIs moved to `site`.
fn real_world(site: &Site, name: &str) -> Result<String> {
    let p = rsagg_e2e::fixtures_dir().join("real-world").join(name);
    Ok(std::fs::read_to_string(&p)
        .with_context(|| p.display().to_string())?
        .replace("http://upstream.example.org", &site.fx.base_url()))
}

/// Every document rsagg published in a `file://` store (what `serve` serves under the base
/// URL, not its state, blobs or bookkeeping), as paths.
fn published_documents(case: &Case) -> Result<Vec<std::path::PathBuf>> {
    let root = store_dir(case)?;
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for e in std::fs::read_dir(&dir)? {
            let p = e?.path();
            let rel = p.strip_prefix(&root)?.to_string_lossy().into_owned();
            if [
                "state",
                "blobs",
                "published",
                "notify",
                "stats",
                "push",
                "r",
            ]
            .iter()
            .any(|skip| rel == *skip)
            {
                continue;
            }
            if p.is_dir() {
                dirs.push(p);
            } else if rel.ends_with(".xml") {
                out.push(p);
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A Source shaped like 0.9/1.0-era producers: a ResourceSync 0.9 Description
/// (`resourcesync`), changes offered only as a `changelist-archive`, zone-less microsecond
/// datetimes, `<rs:md …></rs:md>` close tags, attributes over several lines, white space
/// around `<loc>`, `rel="UP"`/`describedBy`. The archive is followed as a Change List Index
/// (no re-sync from the Resource List on the second run), the legacy values are reported
/// with the specifications they come from, and every document rsagg publishes from it
/// passes `rsagg validate --strict` (the upstream's zone-less `lastmod` is republished in
/// UTC as the `via` link's `modified`).
#[test]
fn a_legacy_source_with_real_producers_quirks_is_followed_by_its_changes() -> Result<()> {
    let site = Site::new()?;
    site.resources(&res(&[("/res/a.txt", "a"), ("/res/b.txt", "b")]))?;
    site.write(
        "/.well-known/resourcesync",
        real_world(&site, "sourcedescription-0.9.xml")?,
    )?;
    for doc in ["capabilitylist.xml", "resourcelist.xml"] {
        site.write(&format!("/{doc}"), real_world(&site, doc)?)?;
    }
    // Nothing archived yet.
    let archive = real_world(&site, "changelist-archive.xml")?;
    let start = archive.find("  <url>").context("an archived list")?;
    let end = archive.find("</urlset>").context("the end")?;
    site.write(
        "/changelist-archive.xml",
        format!("{}{}", &archive[..start], &archive[end..]),
    )?;

    let case = Case::new(
        Store::file("real-world")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (2, 0, 0), "{run:#?}");
    let warned = |run: &Run, needle: &str| run.warnings().iter().any(|w| w.contains(needle));
    assert!(warned(&run, "ResourceSync 0.9"), "{run:#?}");
    assert!(warned(&run, "ResourceSync Archives"), "{run:#?}");
    assert!(run.resyncs().is_empty(), "{run:#?}");

    // The Source changes: a updated, c created, in a Change List its archive lists.
    site.resources(&res(&[("/res/a.txt", "A"), ("/res/c.txt", "c")]))?;
    site.write("/changelist.xml", real_world(&site, "changelist.xml")?)?;
    site.write("/changelist-archive.xml", archive)?;
    site.fx.reset_counters();
    let run = case.run()?;
    run.assert_ok();
    assert!(
        run.resyncs().is_empty(),
        "followed by its changes, not re-synced: {run:#?}"
    );
    assert_eq!(run.cud(), (1, 1, 0), "{run:#?}");
    assert_eq!(
        site.fx.hits("/resourcelist.xml"),
        0,
        "the list is not read again"
    );
    assert!(site.fx.hits("/changelist.xml") >= 1);
    assert_eq!(site.fx.hits("/res/b.txt"), 0);
    let snap = case.assert_state(
        UP,
        &expect(
            &site,
            &res(&[
                ("/res/a.txt", "A"),
                ("/res/b.txt", "b"),
                ("/res/c.txt", "c"),
            ]),
        ),
        &[],
    )?;
    snap.assert_log_sane();
    assert_eq!(snap.log_of(&site.url("/res/a.txt")), ["created", "updated"]);

    // rsagg's own documents are strictly valid, whatever the upstream wrote.
    let docs = published_documents(&case)?;
    let names: Vec<String> = docs.iter().map(|p| p.display().to_string()).collect();
    assert!(
        names.iter().any(|n| n.ends_with("changelist-open.xml"))
            && names.iter().any(|n| n.contains("resourcelist")),
        "{names:#?}"
    );
    for p in &docs {
        let path = p.to_string_lossy();
        let (code, out, err) = rsagg(&["validate", "--strict", &path])?;
        assert_eq!(code, 0, "{path}:\n{out}\n{err}");
    }
    // The upstream's zone-less lastmod, republished in UTC with its microseconds, as the
    // `via` link's `modified`; its `describedBy` written as `describedby`.
    let root = store_dir(&case)?;
    let open = std::fs::read_to_string(root.join("changelist-open.xml"))?;
    assert!(
        open.contains(r#"modified="2018-11-07T08:00:00.123456Z""#),
        "{open}"
    );
    assert!(open.contains(r#"rel="describedby""#), "{open}");
    assert!(!open.contains("describedBy"), "{open}");
    Ok(())
}

/// A Capability List offering its Resource List only through a `resourcelist-archive`
/// (ResourceSync Archives): the baseline is the archive's newest snapshot alone, by `at` as
/// an instant; older snapshots (which still name a resource deleted since) are not read.
#[test]
fn a_resource_list_archive_baselines_from_its_newest_snapshot() -> Result<()> {
    let site = Site::new()?;
    site.resources(&res(&[
        ("/res/a.txt", "a"),
        ("/res/b.txt", "b"),
        ("/res/old.txt", "old"),
    ]))?;
    site.source_description("/.well-known/resourcesync", &["/capabilitylist.xml"])?;
    site.capability_list(
        "/capabilitylist.xml",
        Some("/.well-known/resourcesync"),
        &[("resourcelist-archive", "/resourcelist-archive.xml")],
    )?;
    site.write(
        "/resourcelist-archive.xml",
        real_world(&site, "resourcelist-archive.xml")?,
    )?;
    site.write("/resourcelist.xml", real_world(&site, "resourcelist.xml")?)?;
    let old = site.resource_list_doc(
        "/capabilitylist.xml",
        "2018-11-06T17:41:16Z",
        &res(&[("/res/old.txt", "old")]),
    );
    site.write("/resourcelist-2018-11-06.xml", &old)?;
    site.write("/resourcelist-2018-11-05.xml", &old)?;

    let case = Case::new(
        Store::file("rl-archive")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let run = case.run()?;
    run.assert_ok();
    assert_eq!(run.cud(), (2, 0, 0), "{run:#?}");
    assert!(
        run.warnings()
            .iter()
            .any(|w| w.contains("resourcelist-archive") && w.contains("ResourceSync Archives")),
        "{run:#?}"
    );
    assert_eq!(site.fx.hits("/resourcelist-2018-11-06.xml"), 0);
    assert_eq!(site.fx.hits("/resourcelist-2018-11-05.xml"), 0);
    assert_eq!(site.fx.hits("/res/old.txt"), 0);
    case.assert_state(
        UP,
        &expect(&site, &res(&[("/res/a.txt", "a"), ("/res/b.txt", "b")])),
        &[],
    )?;
    // The newest snapshot's zone-less `at` is the checkpoint, reported in UTC.
    assert_eq!(
        run.up()["checkpoint"],
        "2018-11-06T17:41:16.901455Z",
        "{run:#?}"
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Politeness: the Source sees who harvests and how to reach them, at a bounded rate

#[test]
fn the_source_sees_the_contact_and_a_bounded_rate() -> Result<()> {
    let site = Site::new()?;
    let all = res(&[
        ("/res/a.txt", "alpha"),
        ("/res/b.txt", "bravo"),
        ("/res/c.txt", "charlie"),
        ("/res/d.txt", "delta"),
    ]);
    site.standard(&[("resourcelist", "/resourcelist.xml")], &all)?;
    let case = Case::new(
        Store::file("polite")?,
        &site.url("/.well-known/resourcesync"),
        "",
    )?;
    let text = std::fs::read_to_string(&case.toml)?.replacen(
        "[fetch]\n",
        "[fetch]\ncontact = \"mailto:harvest@agg.example.org\"\nper_host_rate = 10\n",
        1,
    );
    std::fs::write(&case.toml, text)?;
    let t0 = Instant::now();
    let run = case.run()?;
    let took = t0.elapsed();
    run.assert_ok();
    assert_eq!(run.cud(), (4, 0, 0), "{run:#?}");
    let requests = site.fx.requests();
    assert!(requests.len() >= 7, "{requests:#?}");
    let agent = format!(
        "rsagg/{} (+mailto:harvest@agg.example.org)",
        env!("CARGO_PKG_VERSION")
    );
    for r in &requests {
        assert_eq!(r.header("user-agent"), Some(agent.as_str()), "{r:?}");
    }
    // A lower bound the limiter guarantees (10 per second: 100 ms between requests), not a
    // benchmark: a slow machine only adds to it.
    let floor = Duration::from_millis(100) * (requests.len() as u32 - 1);
    assert!(took >= floor, "{} requests in {took:?}", requests.len());
    Ok(())
}
