//! The sample of resources (`--sample N`): a reservoir of N entries of the Resource List(s),
//! chosen as they stream past with a seeded generator (the same lists and seed give the same
//! sample; memory: N entries, whatever the lists hold), then fetched one after the other and
//! checked against the `hash`, `length` and `type` their list states (spec 7, 10.1).

use futures::StreamExt;
use rsagg_fetch::Request;
use rsagg_model::Md;
use url::Url;

use crate::rules::{Cross, Digests, media_type_matches};
use crate::walk::Walker;

/// One resource chosen.
#[derive(Debug)]
struct Sampled {
    url: Url,
    md: Option<Md>,
    list: String,
    entry: u64,
}

/// Algorithm R over the entries offered.
#[derive(Debug)]
pub(crate) struct Reservoir {
    size: usize,
    seen: u64,
    rng: fastrand::Rng,
    items: Vec<Sampled>,
}

impl Reservoir {
    pub(crate) fn new(size: u64, seed: u64) -> Reservoir {
        Reservoir {
            size: usize::try_from(size).unwrap_or(usize::MAX),
            seen: 0,
            rng: fastrand::Rng::with_seed(seed),
            items: Vec::new(),
        }
    }

    /// Entry `entry` of the Resource List `list`, describing the resource at `url`.
    pub(crate) fn offer(&mut self, url: Url, md: Option<&Md>, list: &Url, entry: u64) {
        if self.size == 0 {
            return;
        }
        self.seen += 1;
        let slot = if self.items.len() < self.size {
            None
        } else {
            let j = self.rng.u64(0..self.seen);
            match usize::try_from(j) {
                Ok(j) if j < self.size => Some(j),
                _ => return,
            }
        };
        let s = Sampled {
            url,
            md: md.cloned(),
            list: list.to_string(),
            entry,
        };
        match slot {
            None => self.items.push(s),
            Some(j) => self.items[j] = s,
        }
    }

    /// The URLs chosen, in the order they will be fetched.
    #[cfg(test)]
    fn urls(&self) -> Vec<String> {
        self.items.iter().map(|s| s.url.to_string()).collect()
    }
}

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
    let encoded =
        s.md.as_ref()
            .and_then(|m| m.encoding.as_deref())
            .map(|c| c.trim().to_ascii_lowercase())
            .filter(|c| !c.is_empty() && c != "identity");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn offer_all(r: &mut Reservoir, n: u64) {
        let list = Url::parse("http://example.com/resourcelist.xml").unwrap();
        for i in 0..n {
            let u = Url::parse(&format!("http://example.com/res{i}")).unwrap();
            r.offer(u, None, &list, i);
        }
    }

    #[test]
    fn the_sample_is_bounded_and_deterministic() {
        let mut a = Reservoir::new(10, 7);
        offer_all(&mut a, 10_000);
        let mut b = Reservoir::new(10, 7);
        offer_all(&mut b, 10_000);
        assert_eq!(a.urls().len(), 10);
        assert_eq!(a.urls(), b.urls(), "same lists and seed, same sample");
        let mut c = Reservoir::new(10, 8);
        offer_all(&mut c, 10_000);
        assert_ne!(a.urls(), c.urls(), "another seed, another sample");
        // Not just the first ten.
        assert!(a.urls().iter().any(|u| {
            u.trim_start_matches("http://example.com/res")
                .parse::<u64>()
                .unwrap()
                >= 10
        }));
    }

    #[test]
    fn a_short_list_is_sampled_whole_and_zero_samples_nothing() {
        let mut a = Reservoir::new(10, 1);
        offer_all(&mut a, 3);
        assert_eq!(a.urls().len(), 3);
        let mut z = Reservoir::new(0, 1);
        offer_all(&mut z, 3);
        assert!(z.urls().is_empty());
    }
}
