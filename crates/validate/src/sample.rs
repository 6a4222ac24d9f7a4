//! The sample of resources (`--sample N`): a reservoir of N entries of the Resource List(s),
//! chosen as they stream past with a seeded generator (the same lists and seed give the same
//! sample; memory: N entries, whatever the lists hold), then fetched one after the other and
//! checked against the `hash`, `length` and `type` their list states (spec 7, 10.1).

use futures::StreamExt;
use rsagg_fetch::Request;

use crate::reservoir::Sampled;
use crate::rules::{Cross, Digests, media_type_matches};
use crate::walk::Walker;

/// Fetches the sample and checks each resource.
pub(crate) async fn check(w: &mut Walker<'_>) {
    let items = std::mem::take(&mut w.sample.items);
    for s in items {
        if w.stopped {
            break;
        }
        if w.remaining_bytes() == 0 {
            w.bound("max-bytes", &s.url);
            break;
        }
        one(w, s).await;
    }
}

async fn one(w: &mut Walker<'_>, s: Sampled) {
    // An entry described encoded (`encoding`, spec 7) states the hash and length of the
    // bytes as served: fetched undecoded, so those are what is checked.
    let encoded = s.md.as_ref().and_then(rsagg_model::Md::content_coding);
    let req = Request {
        max_bytes: w.remaining_bytes(),
        encoded,
        ..Request::default()
    };
    let fetched = match w.fetcher.get(&s.url, &w.access, &req).await {
        Ok(f) => f,
        Err(e) => return unavailable(w, &s, e),
    };
    let content_type = fetched.content_type.clone();
    let mut body = fetched.body;
    let mut d = Digests::default();
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(c) => d.update(&c),
            Err(e) => {
                w.out.summary.bytes += d.finish().length;
                return unavailable(w, &s, e);
            }
        }
    }
    let got = d.finish();
    w.out.summary.bytes += got.length;
    w.out.summary.resources_sampled += 1;
    let md = s.md.as_ref();
    let u = s.url.as_str();
    if let Some(l) = md.and_then(|m| m.length)
        && l != got.length
    {
        w.out
            .cross(
                Cross::ResourceLengthMismatch,
                "7",
                u,
                format!(
                    "{} states `length` {l}, the resource has {} bytes",
                    s.list, got.length
                ),
            )
            .related(&s.list)
            .entry(s.entry);
    }
    for (stated, ours) in got.hash_mismatches(md.and_then(|m| m.hash.as_ref())) {
        w.out
            .cross(
                Cross::ResourceHashMismatch,
                "7",
                u,
                format!("{} states `hash` {stated}, the resource has {ours}", s.list),
            )
            .related(&s.list)
            .entry(s.entry);
    }
    if let Some(t) = md.and_then(|m| m.mime_type.as_deref())
        && !media_type_matches(t, content_type.as_deref())
    {
        w.out
            .cross(
                Cross::ResourceTypeMismatch,
                "7",
                u,
                format!(
                    "{} states `type` {t}, the resource is served as {}",
                    s.list,
                    content_type.as_deref().unwrap_or("")
                ),
            )
            .related(&s.list)
            .entry(s.entry);
    }
}

fn unavailable(w: &mut Walker<'_>, s: &Sampled, e: rsagg_fetch::Error) {
    if crate::walk::too_large(&e) {
        w.bound("max-bytes", &s.url);
        return;
    }
    w.out
        .cross(
            Cross::ResourceUnavailable,
            "10.1",
            s.url.as_str(),
            format!("the resource listed in {} cannot be fetched: {e}", s.list),
        )
        .related(&s.list)
        .entry(s.entry);
}
