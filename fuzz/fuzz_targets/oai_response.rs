//! The OAI-PMH response reader (`rsagg_oai::parse`: every page an OAI-PMH upstream sends,
//! OAI-PMH 2.0 sections 3 and 4) on arbitrary bytes.
//!
//! Invariants beyond "no panic":
//! - no more records and record problems together than `record` and `header` substrings
//!   in the input (each comes from one `<record>`, or one `<header>` outside any);
//! - a problem echoes at most a bounded excerpt of the provider's text (its message and
//!   identifier stay under 1 KiB, whatever the record held);
//! - every record has a non-empty identifier, and metadata exactly when it is not deleted;
//! - a record's metadata is a document of its own: put into a `GetRecord` response of its
//!   own (identifier escaped, datestamp written at second granularity), it reads back as one
//!   record with the same identifier, datestamp and metadata bytes;
//! - a datestamp written at second granularity reads back as itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rsagg_oai::{Datestamp, Granularity, Record, Response, parse};

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn alone(r: &Record, metadata: &[u8]) -> Vec<u8> {
    let mut page = format!(
        "<OAI-PMH xmlns=\"http://www.openarchives.org/OAI/2.0/\"><responseDate>2024-01-01T00:00:00Z</responseDate><request>http://repo.example/oai</request><GetRecord><record><header><identifier>{}</identifier><datestamp>{}</datestamp></header><metadata>",
        escape(&r.header.identifier),
        r.header.datestamp.format(Granularity::Second)
    )
    .into_bytes();
    page.extend_from_slice(metadata);
    page.extend_from_slice(b"</metadata></record></GetRecord></OAI-PMH>");
    page
}

fuzz_target!(|data: &[u8]| {
    let Ok(page) = parse("http://repo.example/oai?verb=ListRecords", data) else {
        return;
    };
    let Response::Records {
        records, problems, ..
    } = page.response
    else {
        return;
    };
    let elements = data
        .windows(6)
        .filter(|w| *w == b"record" || *w == b"header")
        .count();
    assert!(
        records.len() + problems.len() <= elements,
        "{} records and {} problems from {elements} `record`s and `header`s",
        records.len(),
        problems.len()
    );
    for p in &problems {
        assert!(p.message.len() < 1024, "a problem of {} bytes", p.message.len());
        assert!(
            p.identifier.as_ref().is_none_or(|i| i.len() < 1024),
            "an identifier of {} bytes in a problem",
            p.identifier.as_ref().map_or(0, String::len)
        );
    }
    for r in &records {
        assert!(!r.header.identifier.is_empty(), "{r:?}");
        assert_eq!(r.header.deleted, r.metadata.is_none(), "{r:?}");
        let written = r.header.datestamp.format(Granularity::Second);
        assert_eq!(Datestamp::parse(&written), Some(r.header.datestamp), "{written}");
        let Some(metadata) = &r.metadata else {
            continue;
        };
        let again = parse("http://repo.example/oai?verb=GetRecord", &alone(r, metadata))
            .unwrap_or_else(|e| panic!("the record alone does not read: {e}; {r:?}"));
        let Response::Records {
            records: back,
            problems,
            ..
        } = again.response
        else {
            panic!("the record alone is not a record: {:?}", again.response);
        };
        assert!(problems.is_empty(), "{problems:?} for {r:?}");
        assert_eq!(back.len(), 1, "{back:?}");
        assert_eq!(back[0].header.identifier, r.header.identifier);
        assert_eq!(back[0].header.datestamp, r.header.datestamp);
        assert_eq!(
            back[0].metadata.as_deref(),
            Some(metadata.as_slice()),
            "metadata changed when read again alone"
        );
    }
});
