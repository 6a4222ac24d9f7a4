//! The conformance suite on the backends available without servers; SeaweedFS runs it in the
//! end-to-end tests.

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_memory() {
    rsagg_store::conformance::suite(Arc::new(InMemory::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_files() {
    let dir = tempfile::tempdir().unwrap();
    let fs = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    rsagg_store::conformance::suite(Arc::new(fs)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_urls() {
    let dir = tempfile::tempdir().unwrap();
    let url = url::Url::from_directory_path(dir.path().join("c")).unwrap();
    let loc = rsagg_store::open_object_store(url.as_str()).unwrap();
    assert!(loc.local_root.is_some());
    // Blobs as a run stores them: small bodies through the local writer threads.
    let blobs = rsagg_store::Blobs::for_location(&loc);
    rsagg_store::conformance::suite_with(loc.objects, blobs).await;
}
