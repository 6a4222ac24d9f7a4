//! The Resource Dump / Change Dump package reader (`rsagg_dump::Package`: ZIP structure
//! checks, manifest, item streaming with limits and CRC-32) on arbitrary bytes as the ZIP.
//! Seeds are small packages (`fuzz/seeds/dump_zip`, made by `fuzz/make_seeds.py` from the
//! spec's manifests). Invariants: see `rsagg_fuzz::dump::check_package`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    rsagg_fuzz::dump::check_package(data);
});
