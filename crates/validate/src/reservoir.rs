//! The reservoir of the sample of resources (`--sample N`, see `sample.rs`): N entries of
//! the Resource List(s), chosen as they stream past with a seeded generator (the same lists
//! and seed give the same sample; memory: N entries, whatever the lists hold).

use rsagg_model::Md;
use url::Url;

/// One resource chosen.
#[derive(Debug)]
pub(crate) struct Sampled {
    pub(crate) url: Url,
    pub(crate) md: Option<Md>,
    pub(crate) list: String,
    pub(crate) entry: u64,
}

/// Algorithm R over the entries offered.
#[derive(Debug)]
pub(crate) struct Reservoir {
    size: usize,
    seen: u64,
    rng: fastrand::Rng,
    pub(crate) items: Vec<Sampled>,
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
    pub(crate) fn urls(&self) -> Vec<String> {
        self.items.iter().map(|s| s.url.to_string()).collect()
    }
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
