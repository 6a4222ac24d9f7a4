//! The store's conformance suite, written once and run on every backend (memory and local
//! files in this crate's tests, SeaweedFS in the end-to-end tests), as object_store's own
//! `integration.rs` does. It panics on the first failed expectation.

use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::ObjectStore;
use rsagg_model::{Change, W3cDateTime};

use crate::{
    Applied, BlobInfo, Blobs, Checkpoint, Commit, QuarantineRecord, ResourceRecord, ResourceStatus,
    SeenKey, State, UpstreamMeta,
};

fn record(uri: &str, copy: Option<BlobInfo>, status: ResourceStatus) -> ResourceRecord {
    ResourceRecord {
        upstream: "up".into(),
        uri: uri.into(),
        status,
        copy,
        mime_type: Some("text/plain".into()),
        set: "http://x/capabilitylist.xml".into(),
        lastmod: W3cDateTime::from_unix(0, 0),
        seq: 0,
        upstream_meta: UpstreamMeta::default(),
    }
}

/// Runs every check against `objects` (which should be empty).
pub async fn suite(objects: Arc<dyn ObjectStore>) {
    suite_with(objects.clone(), Blobs::new(objects)).await;
}

/// Runs every check against `objects` (which should be empty), storing bodies through
/// `blobs` (the blob area of the same objects, e.g. [`Blobs::for_location`], which writes a
/// `file://` store's small bodies itself): what it writes must be what `objects` reads.
pub async fn suite_with(objects: Arc<dyn ObjectStore>, blobs: Blobs) {
    self::blobs(objects.clone(), blobs).await;
    state(objects).await;
}

async fn blobs(objects: Arc<dyn ObjectStore>, blobs: Blobs) {
    let body = |parts: Vec<&'static [u8]>| {
        futures::stream::iter(
            parts
                .into_iter()
                .map(|p| Ok::<_, std::io::Error>(Bytes::from_static(p))),
        )
    };
    let a = blobs
        .put_stream("a", body(vec![b"hello ", b"world"]), true)
        .await
        .unwrap();
    assert_eq!(a.length, 11);
    assert_eq!(a.md5, "5eb63bbbe01eeed093cb22bb8f5acdc3");
    assert_eq!(
        a.sha256,
        "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"
    );
    assert_eq!(
        a.sha1.as_deref(),
        Some("2aae6c35c94fcfb415dbe95f408b9ce91ee846ed")
    );
    // The same bitstream again (another upstream): stored once, same answer.
    let b = blobs
        .put_stream("b", body(vec![b"hello world"]), false)
        .await
        .unwrap();
    assert_eq!(
        (b.sha256.as_str(), b.sha1.as_ref()),
        (a.sha256.as_str(), None)
    );
    assert!(blobs.exists(&a.sha256).await.unwrap());
    let got: Vec<Bytes> =
        futures::StreamExt::collect::<Vec<_>>(blobs.get(&a.sha256).await.unwrap())
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
    assert_eq!(got.concat(), b"hello world");
    // Listed as one object at its address, and nothing else (no staging file).
    let sha = object_store::path::Path::from("blobs/sha256");
    let listed: Vec<String> = futures::StreamExt::collect::<Vec<_>>(objects.list(Some(&sha)))
        .await
        .into_iter()
        .map(|m| m.unwrap().location.to_string())
        .collect();
    assert_eq!(listed, vec![Blobs::path(&a.sha256).to_string()]);

    // A body larger than the in-memory threshold goes through a multipart upload.
    let chunk = Bytes::from(vec![7u8; 1 << 20]);
    let n = crate::blobs::SMALL_BODY / (1 << 20) + 3;
    let big = futures::stream::iter((0..n).map(|_| Ok::<_, std::io::Error>(chunk.clone())));
    let info = blobs.put_stream("big", big, false).await.unwrap();
    assert_eq!(info.length, (n as u64) << 20);
    let stored =
        futures::StreamExt::collect::<Vec<_>>(blobs.get(&info.sha256).await.unwrap()).await;
    let total: usize = stored.into_iter().map(|c| c.unwrap().len()).sum();
    assert_eq!(total as u64, info.length);
    // Nothing is left under the temporary prefix.
    let tmp = object_store::path::Path::from("blobs/tmp");
    let left: Vec<_> = futures::StreamExt::collect(objects.list(Some(&tmp))).await;
    assert!(left.is_empty(), "temporary uploads left: {left:?}");

    // A failing body stores nothing and says whose body it was.
    let failing = futures::stream::iter(vec![
        Ok(Bytes::from_static(b"partial")),
        Err(std::io::Error::other("connection reset")),
    ]);
    let e = blobs
        .put_stream("http://x/failing", failing, false)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("http://x/failing"), "{e}");
}

async fn state(objects: Arc<dyn ObjectStore>) {
    let copy = BlobInfo {
        sha256: "00".repeat(32),
        md5: "11".repeat(16),
        sha1: None,
        length: 5,
    };
    let s = State::open(objects.clone(), "test").await.unwrap();
    assert_eq!(s.last_seq().await, 0);
    assert!(s.resource("up", "http://x/1").await.unwrap().is_none());
    let mut cp = Checkpoint::default();
    let t = W3cDateTime::parse("2024-01-01T00:00:00Z").unwrap().value;
    cp.advance(
        Some(&t),
        SeenKey {
            uri: "http://x/1".into(),
            change: Change::Created,
            tag: String::new(),
        },
    );
    let written = s
        .commit(Commit {
            upstream: "up".into(),
            changes: vec![
                Applied {
                    change: Change::Created,
                    record: record("http://x/1", Some(copy.clone()), ResourceStatus::Present),
                },
                Applied {
                    change: Change::Created,
                    record: record("http://x/2", Some(copy.clone()), ResourceStatus::Present),
                },
            ],
            set: "http://x/capabilitylist.xml".into(),
            checkpoint: Some(cp.clone()),
            quarantine: vec![QuarantineRecord {
                upstream: "up".into(),
                uri: "http://x/bad".into(),
                reason: "hash mismatch".into(),
                expected: "md5:aa".into(),
                got: "md5:bb".into(),
                at: t,
                blob: None,
            }],
            ..Commit::default()
        })
        .await
        .unwrap();
    assert_eq!(written.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    assert!(
        written[0].at.cmp_instant(&written[1].at).is_lt(),
        "strictly increasing datetimes"
    );
    let deleted = s
        .commit(Commit {
            upstream: "up".into(),
            changes: vec![Applied {
                change: Change::Deleted,
                record: record("http://x/1", Some(copy.clone()), ResourceStatus::Deleted),
            }],
            release: vec!["http://x/bad".into()],
            ..Commit::default()
        })
        .await
        .unwrap();
    assert_eq!(deleted[0].seq, 3);
    assert!(written[1].at.cmp_instant(&deleted[0].at).is_lt());
    s.close().await.unwrap();

    // Everything is durable across a reopen.
    let s = State::open(objects.clone(), "test").await.unwrap();
    assert_eq!(s.last_seq().await, 3);
    let r1 = s.resource("up", "http://x/1").await.unwrap().unwrap();
    assert_eq!(r1.status, ResourceStatus::Deleted);
    assert_eq!(r1.seq, 3);
    assert_eq!(r1.copy.as_ref(), Some(&copy), "history kept after deletion");
    assert_eq!(
        s.checkpoint("up", "http://x/capabilitylist.xml")
            .await
            .unwrap(),
        Some(cp)
    );
    assert!(s.quarantined("up", "http://x/bad").await.unwrap().is_none());
    let mut log = s.log(2).await.unwrap();
    let mut seqs = Vec::new();
    while let Some(e) = log.next().await.unwrap() {
        seqs.push((e.seq, e.change));
    }
    assert_eq!(seqs, [(2, Change::Created), (3, Change::Deleted)]);
    let mut all = s.resources("up").await.unwrap();
    let mut uris = Vec::new();
    while let Some(r) = all.next().await.unwrap() {
        uris.push(r.uri);
    }
    assert_eq!(uris, ["http://x/1", "http://x/2"]);

    // The slot index holds exactly the present resources.
    let mut members = Vec::new();
    let mut m = s.present_in_slots(0..=u16::MAX).await.unwrap();
    while let Some((slot, up, uri)) = m.next().await.unwrap() {
        assert_eq!(slot, crate::slot_of(&up, &uri));
        members.push(uri);
    }
    assert_eq!(members, ["http://x/2"], "x/1 was deleted");
    // ... each with its current record, as a lookup by upstream and URI finds it.
    let held: Vec<_> = s
        .present_records(0..=u16::MAX, 4)
        .await
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    let r2 = s.resource("up", "http://x/2").await.unwrap().unwrap();
    assert_eq!(held, [("up".to_owned(), r2)]);
    let slot = crate::slot_of("up", "http://x/2");
    let mut one = s.present_in_slots(slot..=slot).await.unwrap();
    assert!(one.next().await.unwrap().is_some());
    assert!(one.next().await.unwrap().is_none());
    if slot > 0 {
        let mut below = s.present_in_slots(0..=slot - 1).await.unwrap();
        assert!(below.next().await.unwrap().is_none());
    }

    // A second writer fences the first: its next commit fails and says so.
    let second = State::open(objects.clone(), "test").await.unwrap();
    let e = s
        .commit(Commit {
            upstream: "up".into(),
            changes: vec![Applied {
                change: Change::Updated,
                record: record("http://x/2", Some(copy), ResourceStatus::Present),
            }],
            ..Commit::default()
        })
        .await
        .unwrap_err();
    assert!(e.is_fenced(), "expected fencing, got {e}");
    assert_eq!(second.last_seq().await, 3);
    second.close().await.unwrap();
}
