//! Publishing the Resource List from state: strictly valid documents, an index once the
//! collection outgrows one part, and incremental runs that rewrite only the parts that
//! changed.

use std::sync::Arc;
use std::time::Duration;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};
use rsagg_model::{Change, Mode, Root, UrlEntry, W3cDateTime};
use rsagg_publish::links::LinkPolicy;
use rsagg_publish::resourcelist::publish_with;
use rsagg_store::{Applied, BlobInfo, Commit, ResourceRecord, ResourceStatus, State};

const BASE: &str = "https://agg.example.org/c/";
/// Long enough that a part a new index no longer names is still there in the test.
const GRACE: Duration = Duration::from_secs(3600);

fn record(i: usize, status: ResourceStatus) -> ResourceRecord {
    ResourceRecord {
        upstream: "up".into(),
        uri: format!("http://up.example.org/res/{i}"),
        status,
        copy: Some(BlobInfo {
            sha256: format!("{i:064x}"),
            md5: format!("{i:032x}"),
            sha1: None,
            length: i as u64,
        }),
        mime_type: Some("text/plain".into()),
        set: "http://up.example.org/capabilitylist.xml".into(),
        lastmod: W3cDateTime::now(),
        seq: 0,
        upstream_meta: Default::default(),
    }
}

async fn commit(state: &State, changes: Vec<(Change, ResourceRecord)>) {
    state
        .commit(Commit {
            upstream: "up".into(),
            set: "http://up.example.org/capabilitylist.xml".into(),
            changes: changes
                .into_iter()
                .map(|(change, record)| Applied { change, record })
                .collect(),
            ..Commit::default()
        })
        .await
        .unwrap();
}

/// Commits the creation of resources `range`.
async fn create(state: &State, range: std::ops::Range<usize>) {
    commit(
        state,
        range
            .map(|i| (Change::Created, record(i, ResourceStatus::Present)))
            .collect(),
    )
    .await;
}

async fn get(objects: &Arc<dyn ObjectStore>, path: &str) -> Vec<u8> {
    objects
        .get(&Path::from(path))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec()
}

/// Parses `xml` strictly; returns its root and entries.
fn parse(xml: &[u8]) -> (Root, Vec<UrlEntry>) {
    let opts = rsagg_sitemap::ReadOptions::new(Mode::Strict, "published");
    let d = rsagg_sitemap::read_document(xml, opts).unwrap();
    let errors: Vec<_> = d.errors().collect();
    assert!(
        errors.is_empty(),
        "{errors:#?}\n{}",
        String::from_utf8_lossy(xml)
    );
    (d.header.root, d.entries)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_then_indexes_and_rewrites_only_changed_parts() {
    let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let state = State::open(objects.clone(), "memory").await.unwrap();
    let policy = LinkPolicy::default();

    // Small collection: one part, published as a plain list.
    create(&state, 0..5).await;
    publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    let (root, entries) = parse(&get(&objects, "resourcelist.xml").await);
    assert_eq!((root, entries.len()), (Root::Urlset, 5));
    assert!(
        entries
            .iter()
            .all(|e| e.loc.starts_with(BASE) && e.link("via").is_some())
    );

    // Past the part size: an index of several parts, every resource listed once.
    create(&state, 5..60).await;
    publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    let (root, parts) = parse(&get(&objects, "resourcelist.xml").await);
    assert_eq!(root, Root::Sitemapindex);
    assert!(parts.len() >= 8, "{} parts", parts.len());
    let mut listed = Vec::new();
    for p in &parts {
        let name = p.loc.strip_prefix(BASE).unwrap();
        let (root, entries) = parse(&get(&objects, name).await);
        assert_eq!(root, Root::Urlset);
        assert!(entries.len() <= 10);
        listed.extend(entries.into_iter().map(|e| e.loc));
    }
    listed.sort();
    listed.dedup();
    assert_eq!(listed.len(), 60);

    // One deletion: only its part is rewritten, and the resource is gone from it.
    commit(
        &state,
        vec![(Change::Deleted, record(7, ResourceStatus::Deleted))],
    )
    .await;
    let rewritten = publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    assert_eq!(rewritten.len(), 1, "{rewritten:?}");
    let (_, parts_after) = parse(&get(&objects, "resourcelist.xml").await);
    assert_eq!(parts_after.len(), parts.len());
    let changed: Vec<_> = parts_after
        .iter()
        .zip(&parts)
        .filter(|(a, b)| a.loc != b.loc)
        .collect();
    assert_eq!(changed.len(), 1, "only one part has a new name");
    // The old part stays fetchable for readers of the previous index (grace period).
    let old_name = changed[0].1.loc.strip_prefix(BASE).unwrap();
    assert!(!get(&objects, old_name).await.is_empty());
    let (_, entries) = parse(&get(&objects, changed[0].0.loc.strip_prefix(BASE).unwrap()).await);
    assert!(entries.iter().all(|e| !e.loc.ends_with("/res/7")));

    // Nothing changed: nothing rewritten.
    assert!(
        publish_with(&state, &objects, BASE, &policy, 10, GRACE)
            .await
            .unwrap()
            .is_empty()
    );
    state.close().await.unwrap();
}

/// Every entry of the published Resource List (all parts), sorted by `<loc>`.
async fn listed(objects: &Arc<dyn ObjectStore>) -> Vec<UrlEntry> {
    let (root, top) = parse(&get(objects, "resourcelist.xml").await);
    let mut all = Vec::new();
    if root == Root::Urlset {
        all = top;
    } else {
        for p in &top {
            let (_, entries) = parse(&get(objects, p.loc.strip_prefix(BASE).unwrap()).await);
            all.extend(entries);
        }
    }
    all.sort_by(|a, b| a.loc.cmp(&b.loc));
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patched_parts_list_what_a_rebuild_lists() {
    let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let state = State::open(objects.clone(), "memory").await.unwrap();
    let policy = LinkPolicy::default();
    create(&state, 0..300).await;
    let first = publish_with(&state, &objects, BASE, &policy, 20, GRACE)
        .await
        .unwrap();
    // 300 entries, at most 20 a part, half that after a cut: 32 parts.
    assert_eq!(first.len(), 32);
    // Updates, deletions and creations scattered over the parts, in several publishes.
    for round in 0..3usize {
        let mut changes = Vec::new();
        for i in (round..300).step_by(37) {
            let mut r = record(i, ResourceStatus::Present);
            r.copy.as_mut().unwrap().length = 1000 + round as u64;
            changes.push((Change::Updated, r));
        }
        for i in (round * 50 + 5..round * 50 + 300).step_by(61) {
            changes.push((Change::Deleted, record(i, ResourceStatus::Deleted)));
        }
        for i in 300 + round * 4..304 + round * 4 {
            changes.push((Change::Created, record(i, ResourceStatus::Present)));
        }
        commit(&state, changes).await;
        let rewritten = publish_with(&state, &objects, BASE, &policy, 20, GRACE)
            .await
            .unwrap();
        assert!(
            !rewritten.is_empty() && rewritten.len() < 32,
            "patched, not rebuilt: {rewritten:?}"
        );
        // The same state published from scratch into an empty store.
        let fresh: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        publish_with(&state, &fresh, BASE, &policy, 20, GRACE)
            .await
            .unwrap();
        let (patched, rebuilt) = (listed(&objects).await, listed(&fresh).await);
        assert_eq!(patched.len(), rebuilt.len());
        for (p, r) in patched.iter().zip(&rebuilt) {
            assert_eq!(
                (&p.loc, &p.lastmod, &p.md, &p.links),
                (&r.loc, &r.lastmod, &r.md, &r.links)
            );
        }
        let bytes: Vec<u64> = patched
            .iter()
            .filter_map(|e| e.md.as_ref()?.length)
            .collect();
        assert!(bytes.contains(&(1000 + round as u64)));
    }
    state.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grown_part_recuts_the_list_and_a_new_policy_rebuilds_it() {
    let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let state = State::open(objects.clone(), "memory").await.unwrap();
    let policy = LinkPolicy::default();
    create(&state, 0..40).await;
    assert_eq!(
        publish_with(&state, &objects, BASE, &policy, 10, GRACE)
            .await
            .unwrap()
            .len(),
        8
    );
    // Five times the collection: parts would outgrow 10 entries, so it is cut anew.
    create(&state, 40..200).await;
    let rewritten = publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    assert_eq!(rewritten.len(), 64);
    let (_, parts) = parse(&get(&objects, "resourcelist.xml").await);
    assert_eq!(parts.len(), 64);
    assert_eq!(listed(&objects).await.len(), 200);
    // Another link policy: every entry is rendered anew, though nothing changed.
    let other = LinkPolicy::new(&rsagg_config::LinkPolicyConfig {
        drop: vec!["describedby".into()],
        ..Default::default()
    });
    let rewritten = publish_with(&state, &objects, BASE, &other, 10, GRACE)
        .await
        .unwrap();
    assert_eq!(rewritten.len(), 64);
    // The same again: nothing to do.
    assert!(
        publish_with(&state, &objects, BASE, &other, 10, GRACE)
            .await
            .unwrap()
            .is_empty()
    );
    state.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_part_no_document_named_goes_after_a_minute() {
    use rsagg_layout::meta::ResourceListMeta;
    use rsagg_layout::paths::RESOURCE_LIST_META;
    let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let state = State::open(objects.clone(), "memory").await.unwrap();
    let policy = LinkPolicy::default();
    let retired = |objects: Arc<dyn ObjectStore>| async move {
        let meta: ResourceListMeta =
            serde_json::from_slice(&get(&objects, RESOURCE_LIST_META).await).unwrap();
        meta.retired
    };
    // One part: `resourcelist.xml` is the list itself and names no part, so the part it
    // replaces is due a minute after, not after the grace period.
    create(&state, 0..5).await;
    publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    create(&state, 5..6).await;
    publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    let now = W3cDateTime::now().instant().0;
    let r = retired(objects.clone()).await;
    assert_eq!(r.len(), 1, "{r:?}");
    let due = r[0].1 + GRACE.as_secs() as i64;
    assert!((now + 55..=now + 61).contains(&due), "due {due}, now {now}");
    // Past the part size: the index names the parts, and a part it named is kept for the
    // whole grace period.
    create(&state, 6..60).await;
    publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    commit(
        &state,
        vec![(Change::Deleted, record(7, ResourceStatus::Deleted))],
    )
    .await;
    publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    let now = W3cDateTime::now().instant().0;
    let r = retired(objects.clone()).await;
    let named = r.last().unwrap();
    assert!(
        named.1 + GRACE.as_secs() as i64 >= now + GRACE.as_secs() as i64 - 5,
        "{r:?}"
    );
    state.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_with_nothing_new_writes_nothing() {
    use rsagg_layout::paths::RESOURCE_LIST_META;
    let objects: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let state = State::open(objects.clone(), "memory").await.unwrap();
    let policy = LinkPolicy::default();
    let tag = |objects: Arc<dyn ObjectStore>, path: &'static str| async move {
        objects.head(&Path::from(path)).await.unwrap().e_tag
    };
    create(&state, 0..50).await;
    let first = publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    assert!(first.len() > 1, "{first:?}");
    let meta = tag(objects.clone(), RESOURCE_LIST_META).await;
    let index = tag(objects.clone(), "resourcelist.xml").await;
    // Nothing changed: no part, no index and no metadata written again.
    let again = publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    assert!(again.is_empty(), "{again:?}");
    assert_eq!(tag(objects.clone(), RESOURCE_LIST_META).await, meta);
    assert_eq!(tag(objects.clone(), "resourcelist.xml").await, index);
    // A change: its part, the index and the metadata are written, under a generation no
    // earlier part has.
    create(&state, 50..51).await;
    let changed = publish_with(&state, &objects, BASE, &policy, 10, GRACE)
        .await
        .unwrap();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_ne!(tag(objects.clone(), RESOURCE_LIST_META).await, meta);
    let (_, entries) = parse(&get(&objects, "resourcelist.xml").await);
    let names: std::collections::HashSet<_> = entries.iter().map(|e| e.loc.clone()).collect();
    assert_eq!(
        names.len(),
        entries.len(),
        "part names are unique: {names:?}"
    );
    assert!(
        names.iter().any(|n| n.ends_with("-g2.xml")),
        "the changed part is of generation 2: {names:?}"
    );
    state.close().await.unwrap();
}
