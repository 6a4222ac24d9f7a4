//! The reader's fast tokenizer path (entries of the common shape scanned straight from the
//! input buffer, `tokenize.rs`) against its XML-reader path: the same bytes read from one
//! buffer holding them all (fast path wherever it applies) and through a `BufReader` too
//! small to hold an entry (XML reader only) must give the same header, entries, problems
//! (with line:column), error and counters. The differential form of
//! `crates/sitemap/tests/fastpath.rs`, on arbitrary input.
//!
//! The input's length chooses the small buffer's capacity (1 to 64 bytes), so that the
//! spec examples are seeds as they are.
#![no_main]

use std::fmt::Write as _;
use std::io::BufRead;

use libfuzzer_sys::fuzz_target;
use rsagg_model::Mode;
use rsagg_sitemap::{ReadOptions, SyncReader};

fn outcome(input: impl BufRead) -> String {
    let mut out = String::new();
    let mut opts = ReadOptions::new(Mode::Lenient, "t");
    opts.max_bytes = 1 << 20;
    opts.max_entries = 100_000;
    opts.max_problems = 200;
    let mut r = match SyncReader::open(input, opts) {
        Ok(r) => r,
        Err(e) => return format!("open failed: {e}"),
    };
    let _ = writeln!(out, "{:?}\n{:?}", r.header(), r.header_spans());
    loop {
        match r.next_entry() {
            Ok(Some(e)) => {
                let _ = writeln!(out, "{e:?}");
            }
            Ok(None) => break,
            Err(e) => {
                let _ = writeln!(out, "error: {e}");
                break;
            }
        }
    }
    for p in r.take_problems() {
        let _ = writeln!(out, "{p:?}");
    }
    let v = r.validator();
    let _ = writeln!(
        out,
        "errors {} warnings {} entries {} bytes {}",
        v.errors(),
        v.warnings(),
        r.entries_read(),
        r.bytes_read()
    );
    out
}

fuzz_target!(|data: &[u8]| {
    let doc = data;
    let cap = 1 + doc.len() % 64;
    let whole = outcome(doc);
    let small = outcome(std::io::BufReader::with_capacity(cap, doc));
    assert_eq!(whole, small, "whole buffer vs buffers of {cap} bytes");
});
