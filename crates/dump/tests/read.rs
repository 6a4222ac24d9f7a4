//! Checks made while an item is read: packages whose headers lie consistently (so they pass
//! open) are stopped by counting, and corrupt data by the CRC-32 and size checks.

mod common;

use std::io::Read;

use common::*;
use rsagg_dump::{Error, Limits};

/// A package whose `bomb` entry is `len` zero bytes, deflated, declaring `declared` bytes in
/// both headers.
fn lying_bomb(len: usize, declared: u32) -> Vec<u8> {
    let mut zip = package_bytes(&[("bomb", &vec![0u8; len])]);
    set_declared_size(&mut zip, "bomb", declared);
    zip
}

#[test]
fn zip_bomb_by_ratio_counted_while_reading() {
    // 4 MiB of zeros deflate to ~4 KiB; the headers claim 1,000 bytes, so open passes.
    let zip = lying_bomb(4 << 20, 1000);
    let mut p = open(&zip, Limits::default()).unwrap();
    let mut r = p.open_item(0).unwrap();
    // One large read crosses the ratio limit (200 × ~4 KiB + 64 KiB) before anything else.
    let (got, err) = read_all(&mut r, 8 << 20);
    let err = err.expect("bomb read to the end");
    assert!(
        matches!(inner(&err), Error::RatioTooHigh { declared: false, ratio: 200, entry, .. } if entry == "bomb"),
        "{err}"
    );
    assert!(got.is_empty(), "{} bytes handed out", got.len());
    // The reader stays failed.
    assert!(r.read(&mut [0u8; 10]).is_err());
}

#[test]
fn entry_over_max_entry_bytes_counted_while_reading() {
    let zip = lying_bomb(4 << 20, 1000);
    let limits = Limits {
        max_entry_bytes: 1 << 20,
        max_ratio: 100_000,
        ..Limits::default()
    };
    let mut p = open(&zip, limits).unwrap();
    let (got, err) = read_all(&mut p.open_item(0).unwrap(), 8 << 20);
    let err = err.expect("read to the end");
    assert!(
        matches!(inner(&err), Error::EntryTooLarge { declared: false, limit, .. } if *limit == 1 << 20),
        "{err}"
    );
    assert!(got.len() <= 1 << 20);
}

#[test]
fn lying_size_is_caught_at_the_declared_size() {
    // Small reads: the data runs past the declared 1,000 bytes long before any limit.
    let zip = lying_bomb(4 << 20, 1000);
    let mut p = open(&zip, Limits::default()).unwrap();
    let (got, err) = read_all(&mut p.open_item(0).unwrap(), 512);
    let err = err.expect("read to the end");
    assert!(
        matches!(
            inner(&err),
            Error::SizeMismatch {
                declared: 1000,
                overrun: true,
                ..
            }
        ),
        "{err}"
    );
    assert!(got.len() <= 1000, "{} bytes handed out", got.len());
}

#[test]
fn data_shorter_than_declared() {
    let data = noise(5000, 8);
    let mut zip = package_bytes(&[("a", &data)]);
    set_declared_size(&mut zip, "a", 6000);
    let mut p = open(&zip, Limits::default()).unwrap();
    let (_, err) = read_all(&mut p.open_item(0).unwrap(), 4096);
    let err = err.expect("short data accepted");
    assert!(
        matches!(
            inner(&err),
            Error::SizeMismatch {
                declared: 6000,
                actual: 5000,
                overrun: false,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn total_over_max_total_bytes_counted_while_reading() {
    let a = noise(30_000, 1);
    let b = noise(30_000, 2);
    let zip = package_bytes(&[("a", &a), ("b", &b)]);
    // Declared total (manifest + 60,000) fits; reading `a` twice and then `b` does not.
    let limits = Limits {
        max_total_bytes: 85_000,
        ..Limits::default()
    };
    let mut p = open(&zip, limits).unwrap();
    let after_manifest = p.inflated_bytes();
    assert!(after_manifest > 0);
    let (first, err) = read_all(&mut p.open_item(0).unwrap(), 4096);
    assert!(err.is_none());
    assert_eq!(first, a);
    let (_, err) = read_all(&mut p.open_item(0).unwrap(), 4096);
    assert!(err.is_none(), "second read of a: {err:?}");
    let (got, err) = read_all(&mut p.open_item(1).unwrap(), 4096);
    let err = err.expect("total limit not enforced");
    assert!(
        matches!(inner(&err), Error::TotalTooLarge { declared: false, limit: 85_000, entry, .. } if entry == "b"),
        "{err}"
    );
    assert!(after_manifest + 60_000 + got.len() as u64 <= 85_000);
    assert!(p.inflated_bytes() <= 85_000);
}

#[test]
fn crc_corruption_of_stored_data_is_detected() {
    let data = noise(20_000, 6);
    let manifest = rd_manifest(&[("http://example.com/a", "/a")]);
    let mut zip = zip_bytes(&[
        deflated("manifest.xml", manifest.as_bytes()),
        stored("a", &data),
    ]);
    let at = data_offset(&zip, "a") + 12_345;
    zip[at] ^= 0x55;
    let mut p = open(&zip, Limits::default()).unwrap();
    // Reading exactly the declared size: the last read already carries the verdict.
    let mut r = p.open_item(0).unwrap();
    let mut buf = vec![0u8; data.len()];
    let err = r
        .read_exact(&mut buf)
        .expect_err("corrupt data read completely");
    assert!(
        matches!(inner(&err), Error::Crc { entry, .. } if entry == "a"),
        "{err}"
    );
    drop(r);
    // And reading to the end reports it too.
    let (_, err) = read_all(&mut p.open_item(0).unwrap(), 1000);
    assert!(matches!(inner(&err.expect("no error")), Error::Crc { .. }));
}

#[test]
fn corruption_of_deflated_data_is_detected() {
    let data: Vec<u8> = (0..200_000u32)
        .flat_map(|i| (i % 251).to_le_bytes())
        .collect();
    let zip0 = package_bytes(&[("a", &data)]);
    let start = data_offset(&zip0, "a");
    let c = central_record(&zip0, "a");
    let csize = get_u32(&zip0, c + 20) as usize;
    // Flip bytes at several places; each must fail somehow (bad stream, size, or CRC).
    for frac in [3, 5, 7, 11] {
        let mut zip = zip0.clone();
        zip[start + csize * (frac - 1) / frac] ^= 0xA5;
        let mut p = open(&zip, Limits::default()).unwrap();
        let (got, err) = read_all(&mut p.open_item(0).unwrap(), 64 * 1024);
        let err = err.unwrap_or_else(|| panic!("corruption at {frac} not detected"));
        assert!(
            matches!(
                inner(&err),
                Error::Crc { .. } | Error::Corrupt { .. } | Error::SizeMismatch { .. }
            ),
            "{err}"
        );
        assert!(got.len() <= data.len());
    }
}

#[test]
fn corrupt_manifest_data_fails_open() {
    let manifest = rd_manifest(&[("http://example.com/a", "/a")]);
    let mut zip = zip_bytes(&[
        stored("manifest.xml", manifest.as_bytes()),
        deflated("a", b"body"),
    ]);
    // Change one character of the URL: still well-formed XML, but the CRC-32 differs.
    let at = data_offset(&zip, "manifest.xml") + manifest.find("example").unwrap();
    zip[at] = b'E';
    let e = open(&zip, Limits::default()).unwrap_err();
    assert!(
        matches!(e, Error::Crc { ref entry, .. } if entry == "manifest.xml"),
        "{e}"
    );
}
