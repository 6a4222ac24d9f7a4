//! The Sitemap/ResourceSync reader (`rsagg_sitemap::SyncReader`, the code every upstream
//! document goes through) on arbitrary bytes.
//!
//! Invariants beyond "no panic":
//! - the caps hold: a read limited to one byte less than the input never completes, and a
//!   read limited to one entry less than a complete read found never completes either;
//! - the kept problems stay within `max_problems`, the counters agree with what was returned,
//!   and no more bytes are counted than the input has;
//! - a document read to its end writes back (`writer::document`) to XML that reads again to
//!   the same header and entries, and writing is deterministic. The writers write every
//!   datetime in UTC with `Z` (`W3cDateTime::to_utc`, same instant and precision) and
//!   declare a prefix of their own for the namespace of each extension attribute (`ext1`…),
//!   so the comparison is of datetimes in UTC and of attribute names by namespace and local
//!   name (prefixes mean nothing in XML Namespaces).
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsagg_model::{ExtAttr, Header, Link, Md, Mode, UrlEntry, W3cDateTime};
use rsagg_sitemap::{Error, ReadOptions, SyncReader, writer};

const MAX_PROBLEMS: usize = 50;

struct Read {
    header: Option<Header>,
    entries: Vec<UrlEntry>,
    end: Result<(), Error>,
}

fn read(data: &[u8], max_bytes: u64, max_entries: u64) -> Read {
    let opts = ReadOptions {
        mode: Mode::Lenient,
        max_bytes,
        max_entries,
        max_problems: MAX_PROBLEMS,
        source: "fuzz".into(),
        ..ReadOptions::default()
    };
    let mut r = match SyncReader::open(data, opts) {
        Ok(r) => r,
        Err(e) => {
            return Read {
                header: None,
                entries: Vec::new(),
                end: Err(e),
            };
        }
    };
    let header = r.header().clone();
    let mut entries = Vec::new();
    let end = loop {
        match r.next_entry() {
            Ok(Some(e)) => entries.push(e),
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
        assert!(entries.len() as u64 <= max_entries, "entry cap exceeded");
    };
    assert!(
        r.bytes_read() <= data.len() as u64,
        "more bytes counted than given"
    );
    assert_eq!(r.entries_read(), entries.len() as u64, "entry count");
    let problems = r.take_problems();
    assert!(
        problems.len() <= MAX_PROBLEMS,
        "{} problems kept",
        problems.len()
    );
    let v = r.validator();
    assert!(
        v.errors() + v.warnings() >= problems.len() as u64,
        "fewer problems counted than kept"
    );
    Read {
        header: Some(header),
        entries,
        end,
    }
}

fn utc(d: &mut Option<W3cDateTime>) {
    if let Some(v) = d {
        *v = v.to_utc();
    }
}

/// Extension attributes by namespace and local name only, without those the writers leave
/// out (names that are not XML names, `writer::writable_ext`).
fn unprefixed(ext: &mut Vec<ExtAttr>) {
    ext.retain(writer::writable_ext);
    for a in ext {
        if !a.namespace.is_empty() {
            a.prefix.clear();
        }
    }
}

fn utc_md(md: &mut Option<Md>) {
    if let Some(m) = md {
        unprefixed(&mut m.ext);
        for d in [
            &mut m.at,
            &mut m.completed,
            &mut m.from,
            &mut m.until,
            &mut m.datetime,
        ] {
            utc(d);
        }
    }
}

fn utc_links(links: &mut [Link]) {
    for l in links {
        utc(&mut l.modified);
        unprefixed(&mut l.ext);
    }
}

/// What the writers make of a header and entries: every datetime in UTC.
fn as_written(header: &Header, entries: &[UrlEntry]) -> (Header, Vec<UrlEntry>) {
    let mut header = header.clone();
    utc_md(&mut header.md);
    utc_links(&mut header.links);
    let mut entries = entries.to_vec();
    for e in &mut entries {
        utc(&mut e.lastmod);
        utc_md(&mut e.md);
        utc_links(&mut e.links);
    }
    (header, entries)
}

fuzz_target!(|data: &[u8]| {
    let full = read(data, 1 << 20, 100_000);
    if !data.is_empty() {
        let capped = read(data, data.len() as u64 - 1, 100_000);
        assert!(
            capped.end.is_err(),
            "a read capped below the input's size completed"
        );
    }
    let (Some(header), Ok(())) = (&full.header, &full.end) else {
        return;
    };
    if !full.entries.is_empty() {
        let capped = read(data, 1 << 20, full.entries.len() as u64 - 1);
        assert!(
            capped.end.is_err(),
            "a read capped below the entry count completed"
        );
    }
    // Round trip through the writer.
    let written = writer::document(header, full.entries.iter().cloned());
    let again = read(&written, 1 << 24, 100_000);
    if let Err(e) = &again.end {
        panic!(
            "the written document does not read back: {e}\n{}",
            String::from_utf8_lossy(&written)
        );
    }
    let (header, entries) = as_written(header, &full.entries);
    let (again_header, again_entries) = as_written(again.header.as_ref().unwrap(), &again.entries);
    assert_eq!(
        again_header,
        header,
        "header differs after a round trip\n{}",
        String::from_utf8_lossy(&written)
    );
    assert_eq!(
        again_entries,
        entries,
        "entries differ after a round trip\n{}",
        String::from_utf8_lossy(&written)
    );
    let twice = writer::document(again.header.as_ref().unwrap(), again.entries);
    assert_eq!(written, twice, "writing is not deterministic");
});
