//! The checks shared by the two package targets (`dump_zip`, `dump_manifest`).

use std::io::Read;

use rsagg_dump::{Limits, Package};

/// Small limits, so that the caps themselves are exercised by small inputs.
pub fn limits() -> Limits {
    Limits {
        max_entries: 64,
        max_entry_bytes: 64 * 1024,
        max_total_bytes: 256 * 1024,
        max_ratio: 20,
        max_manifest_bytes: 64 * 1024,
    }
}

/// Opens `zip` as a package and reads every item, asserting the reader's promises:
/// - no more entries than the limit, and every problem names an entry that exists;
/// - an item that reads to its end (`Ok(0)`) yields no more than the per-entry limit, and
///   exactly its manifest `length` when the package reported no length mismatch for it;
/// - the bytes counted against the package total never pass it;
/// - a failed read stays failed.
pub fn check_package(zip: &[u8]) {
    let limits = limits();
    let file = crate::scratch_file(zip);
    let Ok(mut package) = Package::open(file, "fuzz.zip", limits.clone()) else {
        return;
    };
    let count = package.entries().len();
    assert!(count <= limits.max_entries, "{count} manifest entries");
    for p in package.problems() {
        if let Some(e) = p.entry {
            assert!((e as usize) < count, "problem names entry {e} of {count}");
        }
    }
    let mismatched: Vec<usize> = package
        .problems()
        .iter()
        .filter(|p| p.code == "zip-length-mismatch")
        .filter_map(|p| p.entry.map(|e| e as usize))
        .collect();
    assert!(package.inflated_bytes() <= limits.max_total_bytes);
    let mut buf = vec![0u8; 8 * 1024];
    for i in 0..count {
        let item = package.entries()[i].clone();
        let Ok(mut reader) = package.open_item(i) else {
            assert!(
                item.is_deletion() || item.zip_index.is_none(),
                "item {i} with a bitstream could not be opened"
            );
            continue;
        };
        let mut got = 0u64;
        let complete = loop {
            match reader.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => {
                    got += n as u64;
                    assert!(
                        got <= limits.max_entry_bytes,
                        "item {i}: {got} bytes handed out, over the entry limit"
                    );
                }
                Err(_) => {
                    // After an error the reader only returns errors.
                    assert!(
                        reader.read(&mut buf).is_err(),
                        "item {i}: read after an error"
                    );
                    break false;
                }
            }
        };
        drop(reader);
        if complete
            && let Some(length) = item.entry.md.as_ref().and_then(|m| m.length)
            && !mismatched.contains(&i)
        {
            assert_eq!(
                got, length,
                "item {i}: length {length} but {got} bytes read"
            );
        }
        assert!(
            package.inflated_bytes() <= limits.max_total_bytes,
            "{} bytes inflated, over the package limit",
            package.inflated_bytes()
        );
    }
}
