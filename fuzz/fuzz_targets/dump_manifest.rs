//! The dump manifest, fuzzed as XML inside a well-formed ZIP: the input is `manifest.xml`
//! of a package that also holds the bitstreams the spec's dump examples name
//! (`resources/res1`, `resources/res2`, `changes/res7.html`, …), stored or deflated as the
//! input's length says (so the spec examples are seeds as they are). So the fuzzer spends its time on the manifest and its cross-checks with
//! the ZIP (`path`, `length`, deletions, links into the package) instead of on CRCs.
//! Seeds: the spec examples (`tests/fixtures/spec-1.1`). Invariants: see
//! `rsagg_fuzz::dump::check_package`.
#![no_main]

use std::io::{Cursor, Write};

use libfuzzer_sys::fuzz_target;
use zip::CompressionMethod;
use zip::write::{SimpleFileOptions, ZipWriter};

const FILES: &[(&str, &[u8])] = &[
    ("resources/res1", b"hello"),
    (
        "resources/res2",
        b"a second resource, a little longer than the first",
    ),
    ("changes/res7.html", b"<html>res7</html>"),
    ("changes/res7-v2.html", b"<html>res7 v2</html>"),
    ("changes/res9.pdf", b"%PDF-1.4 res9"),
];

fuzz_target!(|data: &[u8]| {
    let manifest = data;
    let flags = data.len() % 4;
    let method = if flags & 1 == 0 {
        CompressionMethod::Stored
    } else {
        CompressionMethod::Deflated
    };
    let opts = SimpleFileOptions::default().compression_method(method);
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    zip.start_file("manifest.xml", opts).unwrap();
    zip.write_all(manifest).unwrap();
    // The second bit of the length leaves the bitstreams out, so that every path names nothing.
    if flags & 2 == 0 {
        for (name, body) in FILES {
            zip.start_file(*name, opts).unwrap();
            zip.write_all(body).unwrap();
        }
    }
    let bytes = zip.finish().unwrap().into_inner();
    rsagg_fuzz::dump::check_package(&bytes);
});
