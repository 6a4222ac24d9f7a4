//! Pages written by a real provider (pyoai 2.5.0's server; see `fixtures/README.md`).

use rsagg_oai::{DeletedRecord, Granularity, Request, Response, parse};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!(
        "{}/tests/fixtures/{name}",
        std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo")
    ))
    .unwrap()
}

#[test]
fn a_list_across_two_pages_and_its_ends() {
    let Response::Identify(id) = parse("identify", &fixture("pyoai-identify.xml"))
        .unwrap()
        .response
    else {
        panic!()
    };
    assert_eq!(
        (id.granularity, id.deleted, id.protocol_version.as_str()),
        (Granularity::Second, DeletedRecord::Persistent, "2.0")
    );

    let first = parse("p1", &fixture("pyoai-listrecords-1.xml")).unwrap();
    assert!(first.response_date.is_some());
    let Response::Records {
        records,
        problems,
        token,
    } = first.response
    else {
        panic!()
    };
    assert!(problems.is_empty());
    let ids: Vec<_> = records
        .iter()
        .map(|r| r.header.identifier.as_str())
        .collect();
    assert_eq!(ids, ["oai:t:1", "oai:t:2"]);
    let body = String::from_utf8(records[0].metadata.clone().unwrap()).unwrap();
    assert!(body.starts_with("<oai_dc:dc "), "{body}");
    assert!(
        body.contains("xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\""),
        "{body}"
    );
    assert!(
        body.contains("<dc:title>One &amp; only</dc:title>"),
        "{body}"
    );
    let token = token.unwrap();
    assert!(!token.value.is_empty());
    // The next request carries the token alone.
    let next = Request::Resume {
        verb: "ListRecords",
        token: token.value.clone(),
    };
    let url = next.url(&url::Url::parse("http://127.0.0.1/oai").unwrap());
    assert_eq!(url.query_pairs().count(), 2);

    let Response::Records { records, token, .. } = parse("p2", &fixture("pyoai-listrecords-2.xml"))
        .unwrap()
        .response
    else {
        panic!()
    };
    assert_eq!(records.len(), 1);
    assert!(records[0].header.deleted && records[0].metadata.is_none());
    assert_eq!(token, None, "pyoai ends a list without a token");

    let none = parse("none", &fixture("pyoai-norecords.xml")).unwrap();
    assert!(none.response.is_no_records());
    let bad = parse("bad", &fixture("pyoai-badtoken.xml")).unwrap();
    assert!(bad.response.is_bad_token());
}
