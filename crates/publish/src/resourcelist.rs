//! Publishing rsagg's Resource List into the store (spec 10.1, 10.2), incrementally.
//!
//! The collection is cut into `parts` ranges of hash slots (see `rsagg_store::slot_of`), so a
//! resource always lands in the same part and a run that changed ten resources rewrites only
//! the parts holding them. Parts are immutable objects named by generation
//! (`resourcelist/part-00003-g7.xml`), written before the document that points at them:
//! `resourcelist.xml`, the list itself when there is one part, else its index. A reader thus
//! never sees a document pointing at a part not yet written, nor a mix of old and new parts.
//! Parts a new index no longer names are deleted only after a grace period, so a Destination
//! that read the previous index can still fetch them.

use std::sync::Arc;
use std::time::Duration;

use futures::TryStreamExt;
use object_store::ObjectStore;
use rsagg_model::{Capability, Header, Link, Md, Root, UrlEntry, W3cDateTime};
use rsagg_store::documents::{get_json, put, put_json, sweep_retired};
use rsagg_store::{State, slot_of};

use crate::Error;
use crate::entry::resource_entry;
use crate::links::LinkPolicy;
use rsagg_config::PublishConfig;
use rsagg_layout::capability::up_link;
use rsagg_layout::meta::*;
use rsagg_layout::paths::*;
use rsagg_layout::uris::own_uri;
use rsagg_sitemap::writer::{document, end_tag};

/// Entries per part before the collection is cut into twice as many parts (below the
/// spec's 50,000 so a part stays within the limit until the next publish).
pub const PART_TARGET: u64 = 40_000;
/// Records of a part looked up at once while it is rebuilt (bounded: each holds one record).
pub(crate) const LOOKUPS_AHEAD: usize = 32;

/// Publishes the Resource List of the collection at `base_url` from `state` into `objects`,
/// with parts of [`PART_TARGET`] entries and the default `publish.grace` for the parts a new
/// index no longer names. Returns which parts were rewritten.
pub async fn publish(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    policy: &LinkPolicy,
) -> Result<Vec<usize>, Error> {
    let grace = PublishConfig::default().grace;
    publish_with(state, objects, base_url, policy, PART_TARGET, grace).await
}

/// [`publish`] with another part size (tests use small ones) and grace period (the publish
/// stage passes `publish.grace`).
pub async fn publish_with(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    policy: &LinkPolicy,
    part_target: u64,
    grace: Duration,
) -> Result<Vec<usize>, Error> {
    let store = objects.as_ref();
    let mut meta: ResourceListMeta = get_json(store, RESOURCE_LIST_META)
        .await?
        .unwrap_or_default();
    let last = state.last_seq().await;
    let mut dirty: Vec<usize> = if meta.parts.is_empty() {
        vec![0]
    } else {
        let mut d = std::collections::BTreeSet::new();
        let mut log = state.log(meta.seq + 1).await?;
        while let Some(e) = log.next().await? {
            d.insert(part_of(slot_of(&e.upstream, &e.uri), meta.parts.len()));
        }
        d.into_iter().collect()
    };
    if meta.parts.is_empty() {
        meta.parts = vec![(String::new(), 0)];
    }
    meta.generation += 1;
    let now = W3cDateTime::now();
    // The single part's document, which is also `resourcelist.xml` when there is one part.
    let mut single = None;
    loop {
        let n = meta.parts.len();
        let mut too_big = false;
        for &k in &dirty {
            let (name, count, xml) =
                write_part(state, objects, base_url, policy, k, n, meta.generation, now).await?;
            if n == 1 {
                single = Some(xml);
            }
            too_big |= count > part_target;
            let old = std::mem::replace(&mut meta.parts[k], (name, count));
            if !old.0.is_empty() {
                meta.retired.push((old.0, now.instant().0));
            }
        }
        if !too_big {
            break;
        }
        // Twice as many parts; every part is rewritten under the new cut.
        let retired: Vec<String> = meta.parts.iter().map(|p| p.0.clone()).collect();
        meta.retired.extend(
            retired
                .into_iter()
                .filter(|p| !p.is_empty())
                .map(|p| (p, now.instant().0)),
        );
        meta.parts = vec![(String::new(), 0); n * 2];
        dirty = (0..n * 2).collect();
    }
    if !dirty.is_empty() {
        write_top(store, base_url, &meta, now, single).await?;
    }
    meta.seq = last;
    // Retired parts past their grace period go; the others wait for a later publish.
    // `ResourceListMeta` keeps them by name: swept by object path, kept by name again.
    let mut retired: Vec<_> = meta
        .retired
        .drain(..)
        .map(|(name, t)| (part_path(&name), t))
        .collect();
    sweep_retired(store, &mut retired, now.instant().0, grace).await?;
    meta.retired = retired
        .into_iter()
        .map(|(path, t)| (part_name(path), t))
        .collect();
    put_json(store, RESOURCE_LIST_META, &meta).await?;
    Ok(dirty)
}

fn slot_range(k: usize, parts: usize) -> std::ops::RangeInclusive<u16> {
    let lo = (k << 16) / parts;
    let hi = ((k + 1) << 16) / parts - 1;
    (lo as u16)..=(hi as u16)
}

#[allow(clippy::too_many_arguments)]
async fn write_part(
    state: &State,
    objects: &Arc<dyn ObjectStore>,
    base_url: &str,
    policy: &LinkPolicy,
    k: usize,
    parts: usize,
    generation: u64,
    now: W3cDateTime,
) -> Result<(String, u64, bytes::Bytes), Error> {
    let mut header = Header::new(Root::Urlset, Capability::ResourceList);
    if let Some(md) = header.md.as_mut() {
        md.at = Some(now);
        md.completed = Some(now);
    }
    header.links.push(up_link(base_url));
    if parts > 1 {
        header
            .links
            .push(Link::new("index", format!("{base_url}resourcelist.xml")));
    }
    let mut xml = Vec::new();
    rsagg_sitemap::writer::encode_header(&header, &mut xml);
    // Looked up LOOKUPS_AHEAD at a time, in slot order.
    let mut records = std::pin::pin!(
        state
            .present_records(slot_range(k, parts), LOOKUPS_AHEAD)
            .await?
    );
    let mut count = 0u64;
    while let Some((upstream, record)) = records.try_next().await? {
        let held = |u: &str| own_uri(base_url, &upstream, u);
        if let Some(entry) = resource_entry(base_url, &record, policy, held) {
            rsagg_sitemap::writer::encode_entry(Root::Urlset, &entry, &mut xml);
            count += 1;
        }
    }
    xml.extend_from_slice(end_tag(Root::Urlset));
    let name = format!("part-{k:05}-g{generation}.xml");
    let xml = bytes::Bytes::from(xml);
    put(objects.as_ref(), &part_path(&name), xml.clone()).await?;
    Ok((name, count, xml))
}

/// `resourcelist.xml`: the single part's document (`single`, just written) when there is
/// one part, else the index.
async fn write_top(
    store: &dyn ObjectStore,
    base_url: &str,
    meta: &ResourceListMeta,
    now: W3cDateTime,
    single: Option<bytes::Bytes>,
) -> Result<(), Error> {
    let body = if let (1, Some(xml)) = (meta.parts.len(), single) {
        xml
    } else {
        let mut header = Header::new(Root::Sitemapindex, Capability::ResourceList);
        if let Some(md) = header.md.as_mut() {
            md.at = Some(now);
            md.completed = Some(now);
        }
        header.links.push(up_link(base_url));
        let entries = meta.parts.iter().map(|(name, _)| UrlEntry {
            loc: format!("{base_url}{}", part_path(name)),
            md: Some(Md {
                at: Some(now),
                ..Md::default()
            }),
            ..UrlEntry::default()
        });
        bytes::Bytes::from(document(&header, entries))
    };
    put(store, "resourcelist.xml", body).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_ranges_cover_every_slot_once() {
        for parts in [1usize, 2, 4, 8, 64] {
            let mut next = 0u32;
            for k in 0..parts {
                let r = slot_range(k, parts);
                assert_eq!(u32::from(*r.start()), next);
                next = u32::from(*r.end()) + 1;
                assert_eq!(part_of(*r.start(), parts), k);
                assert_eq!(part_of(*r.end(), parts), k);
            }
            assert_eq!(next, 65536);
        }
    }
}
