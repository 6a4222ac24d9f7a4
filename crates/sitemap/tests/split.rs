//! The splitting writer: parts within the limits, `index` links, the index over them, change
//! document intervals chained part to part, and every output valid in strict mode.

use std::path::Path;

use rsagg_model::{Capability, Change, Header, Link, Md, Mode, Root, UrlEntry, W3cDateTime};
use rsagg_sitemap::{FsPartSink, ReadOptions, SplitOptions, SplitWriter, SyncReader};

const BASE: &str = "http://agg.example.org/maps/";

fn header(cap: Capability, md: Md) -> Header {
    Header {
        root: Root::Urlset,
        md: Some(Md {
            capability: Some(cap),
            ..md
        }),
        links: vec![Link::new("up", format!("{BASE}capabilitylist.xml"))],
    }
}

fn read_strict(path: &Path) -> (Header, Vec<UrlEntry>, u64) {
    let bytes = std::fs::read(path).unwrap();
    let name = path.display().to_string();
    let mut r = SyncReader::open(bytes.as_slice(), ReadOptions::new(Mode::Strict, &name)).unwrap();
    let mut entries = Vec::new();
    while let Some(e) = r.next_entry().unwrap() {
        entries.push(e);
    }
    let problems: Vec<_> = r
        .validator()
        .problems()
        .iter()
        .filter(|p| p.severity == rsagg_model::Severity::Error)
        .collect();
    assert!(problems.is_empty(), "{name}: {problems:#?}");
    (r.header().clone(), entries, bytes.len() as u64)
}

fn t(secs: i64) -> W3cDateTime {
    W3cDateTime::from_unix(1_357_171_200 + secs, 0)
}

#[tokio::test]
async fn resource_list_splits_at_50000_entries() {
    let dir = tempfile::tempdir().unwrap();
    let at = t(0);
    let h = header(
        Capability::ResourceList,
        Md {
            at: Some(at),
            completed: Some(t(60)),
            ..Md::default()
        },
    );
    let mut w = SplitWriter::new(
        FsPartSink::new(dir.path()),
        SplitOptions::new(BASE, "resourcelist.xml", "resourcelist"),
        h,
    )
    .unwrap();
    for i in 0..120_001 {
        w.write_entry(&UrlEntry {
            loc: format!("http://museum.example.org/r/{i}"),
            ..UrlEntry::default()
        })
        .await
        .unwrap();
    }
    let out = w.finish().await.unwrap();
    assert_eq!(out.entries, 120_001);
    assert_eq!(
        out.parts.iter().map(|p| p.entries).collect::<Vec<_>>(),
        vec![50_000, 50_000, 20_001]
    );
    let (ih, ie, _) = read_strict(&dir.path().join("resourcelist.xml"));
    assert_eq!(ih.root, Root::Sitemapindex);
    assert_eq!(ih.link("index"), None);
    assert_eq!(ih.md.as_ref().unwrap().at, Some(at));
    assert_eq!(ie.len(), 3);
    let mut seen = 0;
    for (i, (entry, part)) in ie.iter().zip(&out.parts).enumerate() {
        assert_eq!(entry.loc, format!("{BASE}resourcelist-{:05}.xml", i + 1));
        assert_eq!(entry.loc, part.url);
        assert_eq!(entry.md.as_ref().unwrap().at, Some(at));
        let (ph, pe, bytes) = read_strict(&dir.path().join(&part.name));
        assert_eq!(bytes, part.bytes);
        assert_eq!(
            ph.link("index").unwrap().href,
            format!("{BASE}resourcelist.xml")
        );
        assert_eq!(
            ph.link("up").unwrap().href,
            format!("{BASE}capabilitylist.xml")
        );
        assert_eq!(
            pe.first().unwrap().loc,
            format!("http://museum.example.org/r/{seen}")
        );
        seen += pe.len();
    }
    assert_eq!(seen, 120_001);
}

#[tokio::test]
async fn parts_respect_the_byte_limit() {
    let dir = tempfile::tempdir().unwrap();
    let h = header(
        Capability::ResourceList,
        Md {
            at: Some(t(0)),
            ..Md::default()
        },
    );
    let mut opts = SplitOptions::new(BASE, "rl.xml", "rl");
    opts.max_bytes = 20_000;
    let mut w = SplitWriter::new(FsPartSink::new(dir.path()), opts, h).unwrap();
    for i in 0..1000 {
        w.write_entry(&UrlEntry {
            loc: format!("http://museum.example.org/{}/{i}", "x".repeat(i % 50)),
            ..UrlEntry::default()
        })
        .await
        .unwrap();
    }
    let out = w.finish().await.unwrap();
    assert!(out.parts.len() > 3);
    for p in &out.parts {
        assert!(p.bytes <= 20_000, "{} has {} bytes", p.name, p.bytes);
        assert_eq!(
            std::fs::metadata(dir.path().join(&p.name)).unwrap().len(),
            p.bytes
        );
    }
    assert_eq!(out.parts.iter().map(|p| p.entries).sum::<u64>(), 1000);
    // An entry that cannot fit in any part is refused, not written over the limit.
    let mut opts = SplitOptions::new(BASE, "rl2.xml", "rl2");
    opts.max_bytes = 600;
    let mut w = SplitWriter::new(
        FsPartSink::new(dir.path()),
        opts,
        header(
            Capability::ResourceList,
            Md {
                at: Some(t(0)),
                ..Md::default()
            },
        ),
    )
    .unwrap();
    let e = w
        .write_entry(&UrlEntry {
            loc: format!("http://e.org/{}", "y".repeat(600)),
            ..UrlEntry::default()
        })
        .await
        .unwrap_err();
    assert!(e.to_string().contains("exceeds the part size limit"), "{e}");
    // Parts above the protocol limits are refused.
    let mut opts = SplitOptions::new(BASE, "x.xml", "x");
    opts.max_entries = 50_001;
    assert!(
        SplitWriter::new(
            FsPartSink::new(dir.path()),
            opts,
            header(Capability::ResourceList, Md::default())
        )
        .is_err()
    );
}

#[tokio::test]
async fn change_list_parts_cover_consecutive_intervals() {
    let dir = tempfile::tempdir().unwrap();
    let from = t(0);
    let h = header(
        Capability::ChangeList,
        Md {
            from: Some(from),
            ..Md::default()
        },
    );
    let mut opts = SplitOptions::new(BASE, "changelist.xml", "changelist");
    opts.max_entries = 100;
    let mut w = SplitWriter::new(FsPartSink::new(dir.path()), opts, h).unwrap();
    for i in 0..250 {
        let md = Md {
            change: Some(Change::Updated),
            datetime: Some(t(10 + i)),
            ..Md::default()
        };
        w.write_entry(&UrlEntry {
            loc: format!("http://museum.example.org/r/{i}"),
            md: Some(md),
            ..UrlEntry::default()
        })
        .await
        .unwrap();
    }
    let out = w.finish().await.unwrap();
    assert_eq!(out.parts.len(), 3);
    // Closed parts carry until = next part's from = the first change of the next part.
    assert_eq!(out.parts[0].from, Some(from));
    assert_eq!(out.parts[0].until, Some(t(110)));
    assert_eq!(out.parts[1].from, Some(t(110)));
    assert_eq!(out.parts[1].until, Some(t(210)));
    assert_eq!(out.parts[2].from, Some(t(210)));
    assert_eq!(out.parts[2].until, None, "the last part stays open");
    let (ih, ie, _) = read_strict(&dir.path().join("changelist.xml"));
    assert_eq!(ih.root, Root::Sitemapindex);
    assert_eq!(ih.md.as_ref().unwrap().from, Some(from));
    for (entry, part) in ie.iter().zip(&out.parts) {
        let md = entry.md.as_ref().unwrap();
        assert_eq!((md.from, md.until), (part.from, part.until));
        let (ph, pe, _) = read_strict(&dir.path().join(&part.name));
        let pmd = ph.md.as_ref().unwrap();
        assert_eq!((pmd.from, pmd.until), (part.from, part.until));
        for e in &pe {
            let dt = e.md.as_ref().unwrap().datetime.unwrap();
            assert!(dt.cmp_instant(&pmd.from.unwrap()).is_ge());
            if let Some(u) = pmd.until {
                assert!(dt.cmp_instant(&u).is_le());
            }
        }
    }
}
