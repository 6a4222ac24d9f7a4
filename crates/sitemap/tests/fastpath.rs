//! The tokenizer reads entries of the common shape straight from its input buffer and
//! everything else through the XML reader. Both ways must give the same entries, problems
//! (with line:column) and errors: each document here is read once from one buffer holding it
//! all (fast path wherever it applies) and once through buffers too small to hold an entry
//! (XML reader only), and the outcomes are compared.

use std::io::BufReader;
use std::path::Path;

use rsagg_model::Mode;
use rsagg_sitemap::{ReadOptions, SyncReader};

/// Everything a read yields, as text: header, entries, problems, the fatal error.
fn outcome(input: impl std::io::BufRead) -> String {
    let mut out = String::new();
    let mut r = match SyncReader::open(input, ReadOptions::new(Mode::Lenient, "t")) {
        Ok(r) => r,
        Err(e) => return format!("open failed: {e}"),
    };
    out += &format!("{:?}\n{:?}\n", r.header(), r.header_spans());
    loop {
        match r.next_entry() {
            Ok(Some(e)) => out += &format!("{e:?}\n"),
            Ok(None) => break,
            Err(e) => {
                out += &format!("error: {e}\n");
                break;
            }
        }
    }
    for p in r.take_problems() {
        out += &format!("{p:?}\n");
    }
    let v = r.validator();
    out += &format!(
        "errors {} warnings {} entries {} bytes {}\n",
        v.errors(),
        v.warnings(),
        r.entries_read(),
        r.bytes_read()
    );
    out
}

fn check(name: &str, doc: &[u8]) {
    let whole = outcome(doc);
    for cap in [1, 7, 64, 200] {
        let small = outcome(BufReader::with_capacity(cap, doc));
        assert_eq!(whole, small, "{name}: buffer of {cap} bytes");
    }
}

const HEAD: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" xmlns:rs="http://www.openarchives.org/rs/terms/">
  <rs:md capability="changelist" from="2013-01-03T00:00:00Z"/>
  <rs:ln rel="up" href="http://example.com/capabilitylist.xml"/>
"#;

fn doc(entries: &[&str]) -> Vec<u8> {
    let mut s = HEAD.to_owned();
    // The first entry is read while reading the header; repeat each case after it.
    s += "<url><loc>http://e.com/first</loc><rs:md change=\"created\"/></url>\n";
    for e in entries {
        s += e;
        s += "\n";
    }
    s += "</urlset>\n";
    s.into_bytes()
}

#[test]
fn entry_shapes_read_alike() {
    let cases: &[&str] = &[
        // The common shape, and spacing variants.
        r#"<url><loc>http://e.com/a</loc><lastmod>2013-01-03T00:00:01Z</lastmod><rs:md change="updated" hash="md5:ca0a7fa2cfa1f403ee146c519b4f0a46" length="3" type="text/html"/></url>"#,
        "<url>\n\t<loc> http://e.com/b </loc>\r\n  <rs:md change=\"deleted\" />\n</url>",
        r#"<url><loc>http://e.com/c</loc><rs:md change="created"/><rs:ln rel="duplicate" href="http://m.com/c"/><rs:ln rel="alternate" href="http://m.com/c2" pri="2"/></url>"#,
        r#"<url><loc>http://e.com/d</loc><changefreq>daily</changefreq><priority>0.5</priority><rs:md change='created' type='a>b'/></url>"#,
        r#"<url><loc>http://e.com/é→</loc><rs:md change="created" path="/ü"/></url>"#,
        r#"<url><loc></loc><rs:md change="created"/></url>"#,
        r#"<url><rs:md change="created"/></url>"#,
        // Shapes left to the XML reader.
        r#"<url ><loc>http://e.com/e</loc><rs:md change="created"/></url>"#,
        r#"<url a="1"><loc>http://e.com/f</loc><rs:md change="created"/></url>"#,
        r#"<url><loc>http://e.com/g?a=1&amp;b=2</loc><rs:md change="created"/></url>"#,
        r#"<url><loc><![CDATA[http://e.com/h]]></loc><rs:md change="created"/></url>"#,
        r#"<url><!-- c --><loc>http://e.com/i</loc><rs:md change="created"/></url>"#,
        r#"<url><loc>http://e.com/j</loc><loc>http://e.com/j2</loc><rs:md change="created"/></url>"#,
        r#"<url><loc>http://e.com/k</loc><rs:md change="created"/><rs:md change="updated"/></url>"#,
        r#"<url><loc>http://e.com/l</loc><rs:md change="created"></rs:md></url>"#,
        r#"<url><loc>http://e.com/m</loc><x:md xmlns:x="http://www.openarchives.org/rs/terms/" change="created"/></url>"#,
        r#"<url><loc>http://e.com/n</loc><rs:md xmlns:rs="http://www.openarchives.org/rs/terms" change="created"/></url>"#,
        r#"<url><loc>http://e.com/o</loc><rs:md change="created" q:x="1"/></url>"#,
        r#"<url><loc>http://e.com/p</loc><image:image xmlns:image="http://www.google.com/schemas/sitemap-image/1.1"/><rs:md change="created"/></url>"#,
        r#"<url><loc>http://e.com/q</loc>text<rs:md change="created"/></url>"#,
        r#"<url><loc>http://e.com/r</loc ><rs:md change="created"/></url>"#,
        r#"<url><loc x="1">http://e.com/s</loc><rs:md change="created"/></url>"#,
        r#"<url><loc>http://e.com/t</loc><rs:md change="created" bogus="1" hash="md5:zz"/></url>"#,
        r#"<url><loc>relative</loc><lastmod>yesterday</lastmod><rs:md change="made"/></url>"#,
        r#"<sitemap><loc>http://e.com/u</loc><rs:md change="created"/></sitemap>"#,
        r#"<url><loc>http://e.com/v</loc><rs:md change="created"/><rs:ln/><rs:ln/><rs:ln/><rs:ln/><rs:ln/><rs:ln/><rs:ln/><rs:ln/></url>"#,
        r#"<url><loc>http://e.com/w</loc><rs:md change="created"/></url ><!-- after -->"#,
        r#"<url><loc>http://e.com/x</loc><rs:md/x change="created"/></url>"#,
        r#"<url><loc>http://e.com/y</loc><rs:md change="created"/>"#,
        r#"<url/>"#,
        // Attributes: plain ones are split by the tokenizer, the rest read by quick-xml.
        r#"<url><loc>http://e.com/a1</loc><rs:md change="created" change="updated"/></url>"#,
        r#"<url><loc>http://e.com/a2</loc><rs:md change = "created" length ="4"/></url>"#,
        "<url><loc>http://e.com/a3</loc><rs:md change=\"created\" type=\"text/\thtml\"/></url>",
        r#"<url><loc>http://e.com/a4</loc><rs:md change="created" path="/a&amp;b"/></url>"#,
        r#"<url><loc>http://e.com/a5</loc><rs:md change="created"length="5"/></url>"#,
        r#"<url><loc>http://e.com/a6</loc><rs:md change="created" a1="1" a2="2" a3="3" a4="4" a5="5" a6="6" a7="7" a8="8" a9="9" a10="1" a11="1" a12="1" a13="1" a14="1" a15="1" a16="1"/></url>"#,
        r#"<url><loc>http://e.com/a7</loc><rs:md change="created" length="" type=''/></url>"#,
        r#"<url><loc>http://e.com/a8</loc><rs:md rs:change="created"/></url>"#,
        r#"<url><loc>http://e.com/a9</loc><rs:md change="created" length=7/></url>"#,
        r#"<url><loc>http://e.com/b1</loc><rs:md change="created" length="1"/><rs:ln rel="a" href="h" length="1" length="2"/></url>"#,
        r#"<url><loc>http://e.com/b2</loc><rs:md change="created" hash="md5:ca0a7fa2cfa1f403ee146c519b4f0a46 sha-1:abc"/></url>"#,
        r#"<url><loc>http://e.com/b3</loc><rs:md change="created" x="<"/></url>"#,
        "text between entries",
        r#"<rs:md change="created"/>"#,
    ];
    // Each case on its own, and all together.
    for (i, case) in cases.iter().enumerate() {
        check(&format!("case {i}: {case}"), &doc(&[case, case]));
    }
    check("all", &doc(cases));
}

#[test]
fn corrupted_fixtures_read_alike() {
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../../tests/fixtures");
    for dir in ["spec-1.1", "notification-1.0.1"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_none_or(|x| x != "xml") {
                continue;
            }
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let bytes = std::fs::read(&p).unwrap();
            check(&name, &bytes);
            for garbage in [b'<', b'&', b'"', b'>', 0xff, b'/', b' '] {
                for at in (0..bytes.len()).step_by(13) {
                    let mut b = bytes.clone();
                    b[at] = garbage;
                    check(&format!("{name} with {garbage:#x} at {at}"), &b);
                }
            }
        }
    }
}

/// Found by the `sitemap_tokenizer` fuzz target (`fuzz/`): after a UTF-8 byte order mark,
/// positions from the XML reader were three bytes short of those of the fast path (and of
/// the text), and a mark split over the first buffers (one or two bytes) made the document
/// "text before the root element". With a mark, the document reads as without one, at any
/// buffer size, and each position is that of the text after the mark.
#[test]
fn byte_order_mark_changes_nothing() {
    let case = r#"<url><loc>http://e.com/a</loc><rs:md change="bogus"/></url>"#;
    let plain = doc(&[case]);
    let mut marked = b"\xEF\xBB\xBF".to_vec();
    marked.extend_from_slice(&plain);
    check("marked", &marked);
    let text = outcome(plain.as_slice());
    for cap in [1, 2, 3, 4, 64] {
        let got = outcome(BufReader::with_capacity(cap, marked.as_slice()));
        // Only the byte count differs: the mark is read.
        let want = text.replace(
            &format!("bytes {}", plain.len()),
            &format!("bytes {}", marked.len()),
        );
        assert_eq!(got, want, "buffers of {cap}");
    }
    // The problem of the bogus `change` is at the `<rs:md` of the last entry.
    let s = String::from_utf8(plain.clone()).unwrap();
    let at = s.rfind("<rs:md change=\"bogus\"").unwrap();
    let line = s[..at].matches('\n').count() + 1;
    let column = at - s[..at].rfind('\n').map_or(0, |n| n + 1) + 1;
    assert!(
        text.contains(&format!("line: {line}, column: {column}")),
        "no problem at {line}:{column}:\n{text}"
    );
}
