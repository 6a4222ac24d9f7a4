//! The store's conformance suite (content-addressed blobs incl. multipart uploads, state
//! commits, reopen, fencing of a second writer) on SeaweedFS, the real S3 server; the same
//! suite runs on memory and local files in `crates/store/tests/backends.rs`.

use rsagg_e2e::{Seaweed, unique_prefix};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite_on_seaweedfs() {
    let s3 = Seaweed::shared().expect("SeaweedFS");
    let objects = s3.object_store(&unique_prefix("store-suite"));
    rsagg_store::conformance::suite(objects).await;
}
