//! Bad input gets an error, never a panic, a hang, or a silently accepted half document:
//! every fixture truncated at every few bytes, and with bytes overwritten by markup
//! characters and invalid UTF-8.

use std::path::Path;

use rsagg_model::Mode;
use rsagg_sitemap::{Error, ReadOptions, SyncReader};

fn fixtures() -> Vec<(String, Vec<u8>)> {
    let root = Path::new(&std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"))
        .join("../../tests/fixtures");
    let mut out = Vec::new();
    for dir in ["spec-1.1", "notification-1.0.1"] {
        for e in std::fs::read_dir(root.join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "xml") {
                out.push((
                    p.file_name().unwrap().to_string_lossy().into_owned(),
                    std::fs::read(&p).unwrap(),
                ));
            }
        }
    }
    out
}

/// Reads the whole document; Ok(number of errors found) or the fatal error.
fn read(bytes: &[u8]) -> Result<u64, Error> {
    let mut r = SyncReader::open(bytes, ReadOptions::new(Mode::Lenient, "t"))?;
    while r.next_entry()?.is_some() {}
    Ok(r.validator().errors())
}

#[test]
fn truncated_documents_are_errors() {
    for (name, bytes) in fixtures() {
        let root_end = bytes.windows(2).rposition(|w| w == b"</").unwrap();
        for len in (0..root_end).step_by(3) {
            let result = read(&bytes[..len]);
            assert!(
                result.is_err(),
                "{name} cut at {len} bytes was accepted: {result:?}"
            );
        }
        assert_eq!(read(&bytes).unwrap(), 0, "{name}");
    }
}

#[test]
fn corrupted_documents_never_panic() {
    for (name, bytes) in fixtures() {
        for (i, garbage) in [b'<', b'&', b'"', b'>', 0xff, b'/', 0]
            .into_iter()
            .enumerate()
        {
            for at in (i..bytes.len()).step_by(11) {
                let mut b = bytes.clone();
                b[at] = garbage;
                // Any outcome but a panic is fine, except that invalid UTF-8 must make the
                // document fail: a fatal error, or errors counted.
                let result = read(&b);
                if garbage == 0xff {
                    assert!(
                        !matches!(result, Ok(0)),
                        "{name}: invalid UTF-8 at byte {at} accepted"
                    );
                }
            }
        }
    }
}
