//! The Resource List on an interval (`publish.resourcelist = "interval"`), with the state's
//! clock injected: a snapshot that stays as published between its rebuilds while pending
//! parts follow the changes, Change Lists kept from the oldest published snapshot's `at`
//! on so that a Destination baselining from a day-old snapshot ends in sync, and a rebuild
//! cut by a store failure that leaves the previous snapshot served and valid.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use object_store::ObjectStore;
use object_store::path::Path;
use rsagg_config::{ChangeListRetain, PublishConfig, ResourceListPolicy};
use rsagg_layout::meta::{ChangeListsMeta, ResourceListMeta};
use rsagg_layout::paths::*;
use rsagg_model::{Change, Clock, HashAlgorithm, Root, UrlEntry, W3cDateTime};
use rsagg_store::State;

use crate::links::LinkPolicy;
use crate::package::testing::{BASE, change, get, store, strict};
use crate::resourcelist::{ListOptions, publish_list};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// Parts of at most 10 entries, a snapshot a day, replaced parts kept an hour.
fn interval() -> ListOptions {
    ListOptions {
        part_max: 10,
        grace: HOUR,
        policy: ResourceListPolicy::Interval,
        every: DAY,
        force: false,
    }
}

/// A state on an in-memory store whose clock is manual, from 2026-01-01.
async fn fixture() -> (Arc<dyn ObjectStore>, State, Clock) {
    let (objects, mut state) = store().await;
    let clock = Clock::manual(W3cDateTime::from_unix(1_767_225_600, 0));
    state.set_clock(clock.clone());
    (objects, state, clock)
}

fn sha256(e: &UrlEntry) -> Option<String> {
    let md = e.md.as_ref()?;
    if md.change == Some(Change::Deleted) {
        return None;
    }
    md.hash
        .as_ref()?
        .get(&HashAlgorithm::Sha256)
        .map(|h| h.digest.clone())
}

/// The entries of a Resource List document and its parts, strictly valid: `<loc>` → SHA-256,
/// with the list's `at`.
async fn listed(objects: &Arc<dyn ObjectStore>) -> (W3cDateTime, BTreeMap<String, String>) {
    let (header, entries) = strict(&get(objects, RESOURCE_LIST).await);
    let at = header.md.as_ref().and_then(|m| m.at).expect("at");
    let mut out = BTreeMap::new();
    let mut add = |entries: Vec<UrlEntry>| {
        for e in entries {
            let h = sha256(&e).expect("a listed copy has a SHA-256");
            assert!(out.insert(e.loc, h).is_none(), "listed once");
        }
    };
    if header.root == Root::Sitemapindex {
        for part in entries {
            let (h, entries) = strict(&get(objects, part.loc.strip_prefix(BASE).unwrap()).await);
            assert_eq!(h.root, Root::Urlset);
            add(entries);
        }
    } else {
        add(entries);
    }
    (at, out)
}

/// The present resources of the state as the list renders them: `<loc>` → SHA-256.
async fn present(state: &State) -> BTreeMap<String, String> {
    use futures::TryStreamExt;
    let records = state.present_records(0..=u16::MAX, 8).await.unwrap();
    let records: Vec<_> = records.try_collect().await.unwrap();
    records
        .into_iter()
        .map(|(up, r)| {
            let loc = rsagg_layout::uris::own_uri(BASE, &up, &r.uri).unwrap();
            (loc, r.copy.unwrap().sha256)
        })
        .collect()
}

async fn meta(objects: &Arc<dyn ObjectStore>) -> ResourceListMeta {
    serde_json::from_slice(&get(objects, RESOURCE_LIST_META).await).unwrap()
}

/// What the pending parts say: `<loc>` → SHA-256, `None` for a deletion.
async fn pending(objects: &Arc<dyn ObjectStore>) -> BTreeMap<String, Option<String>> {
    let mut out = BTreeMap::new();
    for (name, count) in meta(objects).await.pending {
        if name.is_empty() {
            continue;
        }
        // Not a published document (a Resource List has no `change`): read leniently.
        let xml = get(objects, &pending_path(&name)).await;
        let opts = rsagg_sitemap::ReadOptions::new(rsagg_model::Mode::Lenient, name.clone());
        let entries = rsagg_sitemap::read_document(&xml, opts).unwrap().entries;
        assert_eq!(entries.len() as u64, count, "{name}");
        for e in entries {
            out.insert(e.loc.clone(), sha256(&e));
        }
    }
    out
}

/// Commits `name` as `change` to `body`.
async fn set(objects: &Arc<dyn ObjectStore>, state: &State, name: &str, c: Change, body: &str) {
    change(objects, state, name, c, body.as_bytes()).await;
}

/// Spec 10.1: the snapshot lists the state as of its `at` and is left as published by the
/// runs before it is due, which write only pending parts (what `rsagg serve` reads first);
/// once `every` old it is rebuilt whole, with the `at` of that run, and the list it
/// replaced is remembered for Change List retention.
#[tokio::test]
async fn an_interval_list_is_a_snapshot_until_due_then_rebuilt_whole() {
    let (objects, state, clock) = fixture().await;
    for i in 0..40 {
        set(
            &objects,
            &state,
            &format!("r{i}"),
            Change::Created,
            &format!("v1 {i}"),
        )
        .await;
    }
    let policy = LinkPolicy::default();
    let t0 = clock.now();
    let written = publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    assert_eq!(
        written.len(),
        8,
        "40 entries in parts of at most 10: {written:?}"
    );
    let top0 = get(&objects, RESOURCE_LIST).await;
    let (at0, snapshot) = listed(&objects).await;
    assert_eq!(at0, t0, "`at`: the instant of the log position it lists");
    assert_eq!(snapshot, present(&state).await);
    let m = meta(&objects).await;
    assert_eq!(m.snapshot_seq, Some(state.last_seq().await));
    assert_eq!(m.listed_at, Some(t0));

    // An hour later, updates, deletions and creations: the snapshot stays as it was.
    clock.advance(HOUR);
    for i in 0..3 {
        set(&objects, &state, &format!("r{i}"), Change::Updated, "v2").await;
    }
    set(&objects, &state, "r10", Change::Deleted, "").await;
    set(&objects, &state, "r11", Change::Deleted, "").await;
    set(&objects, &state, "n1", Change::Created, "new 1").await;
    set(&objects, &state, "n2", Change::Created, "new 2").await;
    let written = publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    assert!(
        written.is_empty(),
        "no part of the snapshot rewritten: {written:?}"
    );
    assert_eq!(
        get(&objects, RESOURCE_LIST).await,
        top0,
        "the snapshot as published"
    );
    assert_eq!(listed(&objects).await, (t0, snapshot.clone()));
    let now = present(&state).await;
    let p = pending(&objects).await;
    assert_eq!(
        p.len(),
        7,
        "every resource changed since the snapshot: {p:?}"
    );
    for (loc, h) in &p {
        assert_eq!(h.as_ref(), now.get(loc), "{loc}: as it is now");
    }
    // The snapshot overlaid with the pending entries is the collection now.
    let mut overlaid = snapshot.clone();
    for (loc, h) in p {
        match h {
            Some(h) => overlaid.insert(loc, h),
            None => overlaid.remove(&loc),
        };
    }
    assert_eq!(overlaid, now);
    // A run with nothing new writes nothing.
    let before = get(&objects, RESOURCE_LIST_META).await;
    publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    assert_eq!(get(&objects, RESOURCE_LIST_META).await, before);

    // A day after the snapshot: rebuilt from the state, at that run's `at`.
    clock.advance(DAY - HOUR);
    let t1 = clock.now();
    let written = publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    assert!(!written.is_empty());
    let (at1, rebuilt) = listed(&objects).await;
    assert_eq!(at1, t1);
    assert_eq!(rebuilt, now);
    let m = meta(&objects).await;
    assert!(m.pending.is_empty(), "the rebuild holds every change");
    // The pending parts the rebuild replaced stay a minute (`rsagg serve` may have read
    // the metadata naming them), then go with the next publish.
    let retired: Vec<&String> = m
        .retired
        .iter()
        .map(|(name, _)| name)
        .filter(|n| n.starts_with("pending-"))
        .collect();
    assert!(!retired.is_empty(), "{:?}", m.retired);
    for name in &retired {
        get(&objects, &pending_path(name)).await;
    }
    assert_eq!(m.replaced.map(|r| r.0), Some(t0));
    assert_eq!(m.oldest_listed_at(t1.instant().0, 3600), Some(t0));
    assert_eq!(
        m.oldest_listed_at(t1.instant().0 + 3600, 3600),
        Some(t1),
        "the replaced list counts until its grace ends"
    );
    state.close().await.unwrap();
}

/// A rebuild that takes longer than the minute a replaced pending part stays (one at 10^7
/// took 89 s) must not delete the pending parts the metadata `rsagg serve` still reads
/// names: they are retired when the rebuild ends, not when it began.
#[tokio::test]
async fn a_long_rebuild_keeps_the_pending_parts_until_its_metadata_is_written() {
    let (inner, state, clock) = fixture().await;
    // Every write takes ten seconds of the state's clock: the rebuild's 8 parts and index
    // take over a minute.
    let objects: Arc<dyn ObjectStore> = Arc::new(crate::package::testing::Ticking {
        inner: inner.clone(),
        clock: clock.clone(),
        step: Duration::from_secs(10),
    });
    for i in 0..40 {
        set(&inner, &state, &format!("r{i}"), Change::Created, "v1").await;
    }
    let policy = LinkPolicy::default();
    publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    clock.advance(HOUR);
    set(&inner, &state, "r1", Change::Updated, "v2").await;
    publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    let pending: Vec<String> = meta(&inner)
        .await
        .pending
        .into_iter()
        .map(|(n, _)| n)
        .filter(|n| !n.is_empty())
        .collect();
    assert_eq!(pending.len(), 1);
    clock.advance(DAY);
    let started = clock.now();
    publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    assert!(
        clock.now().instant().0 - started.instant().0 > 60,
        "a long rebuild"
    );
    for name in &pending {
        get(&inner, &pending_path(name)).await;
    }
    state.close().await.unwrap();
}

/// The closed Change Lists and the open one, oldest first, as published: every change entry.
async fn change_entries(objects: &Arc<dyn ObjectStore>) -> Vec<UrlEntry> {
    let m: ChangeListsMeta =
        serde_json::from_slice(&get(objects, CHANGE_LISTS_META).await).unwrap();
    let mut names: Vec<String> = m.closed.iter().map(|c| c.name.clone()).collect();
    names.extend(m.open.iter().map(|o| o.name.clone()));
    let mut out = Vec::new();
    for name in names {
        let (_, entries) = strict(&get(objects, &format!("{CHANGE_LIST_DIR}/{name}")).await);
        out.extend(entries);
    }
    out
}

/// Spec 10.1 and 12: a Destination that baselines from a day-old snapshot and applies every
/// Change List entry from its `at` on holds the collection, because no Change List ending
/// after the `at` of a list still published is dropped, whatever `changelist_retain` says
/// (here a duration of one hour, hourly runs, a list closed per change). Once the snapshot
/// is rebuilt and its predecessor's grace has passed, the lists before it go.
#[tokio::test]
async fn a_destination_baselining_from_a_day_old_snapshot_finds_every_change_after_it() {
    let (objects, state, clock) = fixture().await;
    let cfg = PublishConfig {
        changelist_max_entries: 1,
        changelist_retain: Some(ChangeListRetain::Age(HOUR)),
        resourcelist: ResourceListPolicy::Interval,
        resourcelist_every: DAY,
        grace: HOUR,
        ..PublishConfig::default()
    };
    let opts = ListOptions {
        part_max: 10,
        ..ListOptions::of(&cfg, false)
    };
    let policy = LinkPolicy::default();
    let publish = async |state: &State| {
        publish_list(state, &objects, BASE, &policy, opts)
            .await
            .unwrap();
        crate::changelist::publish(state, &objects, BASE, &policy, &cfg)
            .await
            .unwrap()
    };
    for i in 0..30 {
        set(&objects, &state, &format!("r{i}"), Change::Created, "v1").await;
    }
    publish(&state).await;
    let (t0, snapshot) = listed(&objects).await;
    // A day of hourly runs, each with changes.
    for h in 0..23 {
        clock.advance(HOUR);
        set(
            &objects,
            &state,
            &format!("r{}", h % 30),
            Change::Updated,
            &format!("h{h}"),
        )
        .await;
        set(&objects, &state, &format!("new{h}"), Change::Created, "new").await;
        if h % 5 == 4 {
            set(
                &objects,
                &state,
                &format!("new{}", h - 2),
                Change::Deleted,
                "",
            )
            .await;
        }
        let report = publish(&state).await;
        assert_eq!(
            report.dropped, 0,
            "hour {h}: a list after the snapshot's at dropped"
        );
        assert_eq!(
            listed(&objects).await.0,
            t0,
            "hour {h}: still the snapshot of t0"
        );
    }
    // The Destination: the snapshot of a day ago, then every change from its `at` on, in
    // order (spec 12.1: a Change List lists the changes since its `from`).
    let mut dst = snapshot;
    for e in change_entries(&objects).await {
        let md = e.md.as_ref().unwrap();
        if md.datetime.unwrap().cmp_instant(&t0).is_lt() {
            continue;
        }
        match md.change {
            Some(Change::Deleted) => dst.remove(&e.loc),
            _ => dst.insert(e.loc.clone(), sha256(&e).unwrap()),
        };
    }
    assert_eq!(dst, present(&state).await, "in sync");

    // The day is over: a new snapshot; its predecessor counts for an hour more, then the
    // lists before the new `at` (older than an hour) go.
    clock.advance(HOUR);
    set(&objects, &state, "r1", Change::Updated, "day 2").await;
    let report = publish(&state).await;
    let (t1, _) = listed(&objects).await;
    assert!(t1.cmp_instant(&t0).is_gt(), "rebuilt");
    assert_eq!(
        report.dropped, 0,
        "the replaced snapshot is still within its grace"
    );
    clock.advance(2 * HOUR);
    set(&objects, &state, "r2", Change::Updated, "day 2").await;
    let report = publish(&state).await;
    assert!(
        report.dropped > 20,
        "the lists before the new snapshot go: {report:?}"
    );
    state.close().await.unwrap();
}

/// A store that fails every PUT of a Resource List part after the first `ok` of them, as a
/// store outage (or the process's end) would cut a rebuild mid-way.
#[derive(Debug)]
struct FailingParts {
    inner: Arc<dyn ObjectStore>,
    ok: usize,
    seen: AtomicUsize,
}

impl std::fmt::Display for FailingParts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FailingParts({})", self.inner)
    }
}

impl FailingParts {
    fn fails(&self, location: &Path) -> bool {
        location.as_ref().starts_with("resourcelist/part-")
            && self.seen.fetch_add(1, Ordering::SeqCst) >= self.ok
    }
}

// The trait's methods as `async_trait` declares them (this crate does not depend on it).
impl ObjectStore for FailingParts {
    fn put_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        payload: object_store::PutPayload,
        opts: object_store::PutOptions,
    ) -> BoxFuture<'async_trait, object_store::Result<object_store::PutResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        Box::pin(async move {
            if self.fails(location) {
                return Err(object_store::Error::Generic {
                    store: "FailingParts",
                    source: "injected: the store is gone".into(),
                });
            }
            self.inner.put_opts(location, payload, opts).await
        })
    }

    fn put_multipart_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        opts: object_store::PutMultipartOptions,
    ) -> BoxFuture<'async_trait, object_store::Result<Box<dyn object_store::MultipartUpload>>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.put_multipart_opts(location, opts)
    }

    fn get_opts<'life0, 'life1, 'async_trait>(
        &'life0 self,
        location: &'life1 Path,
        options: object_store::GetOptions,
    ) -> BoxFuture<'async_trait, object_store::Result<object_store::GetResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.get_opts(location, options)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(
        &self,
        prefix: Option<&Path>,
    ) -> BoxStream<'static, object_store::Result<object_store::ObjectMeta>> {
        self.inner.list(prefix)
    }

    fn list_with_delimiter<'life0, 'life1, 'async_trait>(
        &'life0 self,
        prefix: Option<&'life1 Path>,
    ) -> BoxFuture<'async_trait, object_store::Result<object_store::ListResult>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.list_with_delimiter(prefix)
    }

    fn copy_opts<'life0, 'life1, 'life2, 'async_trait>(
        &'life0 self,
        from: &'life1 Path,
        to: &'life2 Path,
        options: object_store::CopyOptions,
    ) -> BoxFuture<'async_trait, object_store::Result<()>>
    where
        'life0: 'async_trait,
        'life1: 'async_trait,
        'life2: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.copy_opts(from, to, options)
    }
}

/// A rebuild cut mid-way (the store fails after three of its parts were written) leaves
/// the previous snapshot published: `resourcelist.xml`, every part it names and the
/// metadata `rsagg serve` finds copies through are as they were, strictly valid, and the
/// pending parts still name the changes since; the next run rebuilds it whole.
#[tokio::test]
async fn a_rebuild_cut_by_a_store_failure_leaves_the_previous_snapshot_served_and_valid() {
    let (objects, state, clock) = fixture().await;
    for i in 0..40 {
        set(&objects, &state, &format!("r{i}"), Change::Created, "v1").await;
    }
    let policy = LinkPolicy::default();
    publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    clock.advance(HOUR);
    set(&objects, &state, "r3", Change::Updated, "v2").await;
    set(&objects, &state, "r4", Change::Deleted, "").await;
    publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    let top = get(&objects, RESOURCE_LIST).await;
    let meta_before = get(&objects, RESOURCE_LIST_META).await;
    let (at, snapshot) = listed(&objects).await;
    let pending_before = pending(&objects).await;
    assert_eq!(pending_before.len(), 2);

    clock.advance(DAY);
    set(&objects, &state, "r5", Change::Updated, "v3").await;
    let failing: Arc<dyn ObjectStore> = Arc::new(FailingParts {
        inner: objects.clone(),
        ok: 3,
        seen: AtomicUsize::new(0),
    });
    let cut = publish_list(&state, &failing, BASE, &policy, interval()).await;
    let e = cut.expect_err("the store failed mid-rebuild");
    assert!(e.to_string().contains("resourcelist/part-"), "{e}");
    assert_eq!(
        get(&objects, RESOURCE_LIST).await,
        top,
        "the old index served"
    );
    assert_eq!(get(&objects, RESOURCE_LIST_META).await, meta_before);
    assert_eq!(
        listed(&objects).await,
        (at, snapshot),
        "its parts all there, valid"
    );
    assert_eq!(pending(&objects).await, pending_before);

    // The store is back: the next run rebuilds.
    let written = publish_list(&state, &objects, BASE, &policy, interval())
        .await
        .unwrap();
    assert!(!written.is_empty());
    let (at2, rebuilt) = listed(&objects).await;
    assert!(at2.cmp_instant(&at).is_gt());
    assert_eq!(rebuilt, present(&state).await);
    state.close().await.unwrap();
}
