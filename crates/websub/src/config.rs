//! What a hub may do: lease range, allowlist, the address guard, and the bounds that keep
//! it finite.

use std::time::Duration;

use url::Url;

use crate::Error;

/// Configuration of a [`crate::Hub`]. [`HubConfig::new`] gives the defaults named on each
/// field.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct HubConfig {
    /// The hub's public URL: the `rel="hub"` target of every delivery (WebSub 7).
    pub public_url: Url,
    /// Refuse a CN 1.0.1 publish whose `rel="hub"` is not [`HubConfig::public_url`]
    /// (set when the URL was configured explicitly; default false, because behind a proxy a
    /// guessed URL would refuse every publisher).
    pub check_hub_link: bool,
    /// Shortest lease granted. Default 300 s, the lower bound WebSub 5.1.1 and CN 1.0.1 4.2
    /// recommend (fewer renewals).
    pub lease_min: Duration,
    /// Longest lease granted. Default 2,678,400 s (31 days), the recommended upper bound (a
    /// forgotten subscription ends in a foreseeable time).
    pub lease_max: Duration,
    /// Lease granted when a subscriber asks for none (clamped to the range). Default 10 days.
    pub lease_default: Duration,
    /// Topic prefixes publishers may publish (and subscribers subscribe) to; empty = all.
    /// CN 1.0.1 4.1's "trust relationship" between a third-party hub and its Sources.
    pub allow_publishers: Vec<String>,
    /// Messages kept per subscriber; beyond it the oldest undelivered one is dropped (and
    /// counted). Default 10,000.
    pub max_queue: usize,
    /// Outgoing requests in flight at once (verifications, topic fetches, deliveries).
    /// Default 64.
    pub max_concurrency: usize,
    /// Verifications and topic fetches waiting or running; beyond it requests get 503.
    /// Default 1,000.
    pub max_pending: usize,
    /// Largest publication (payload or fetched topic body). Default 50 MB, the Sitemap limit
    /// a payload also obeys.
    pub max_publish_bytes: usize,
    /// Largest form body (subscription or WebSub publish request). Default 64 KiB.
    pub max_form_bytes: usize,
    /// Most bytes read of a verification answer (a challenge is 64 characters). Default 4 KiB.
    pub max_challenge_bytes: usize,
    /// First retry delay of a failed delivery; doubled per failure, with jitter. Default 1 s.
    pub retry_min: Duration,
    /// Longest retry delay. Default 10 minutes.
    pub retry_max: Duration,
    /// Timeout of each outgoing request. Default 30 s.
    pub request_timeout: Duration,
    /// Check that a CN 1.0.1 payload is a `<urlset>` with `capability="change-notification"`
    /// (CN 1.0.1 3) before accepting it. Default true. The payload is relayed unchanged
    /// either way.
    pub check_payload: bool,
    /// How often expired subscriptions are swept. Default 60 s (or the lease minimum when
    /// shorter, at least 1 s).
    pub sweep_interval: Duration,
    /// Let the hub's outgoing requests — verifications of intent and denials (WebSub 5.2,
    /// 5.3), deliveries (WebSub 7), topic fetches of `hub.mode=publish` — go to private,
    /// loopback, link-local and unspecified addresses. Default false: anyone may ask a hub
    /// to call a URL, so without this guard the hub would let them probe and POST into the
    /// network it runs in (cloud metadata at 169.254.169.254, services on loopback). With
    /// it, a callback or topic that is such an IP literal or a `localhost` name is refused
    /// at once (403, WebSub 5.1.2), and a name resolving to such an address is refused when
    /// the request is made (the subscription is then not activated; nothing is delivered).
    /// Set it for tests and for hubs whose subscribers are on a private network
    /// (`rsagg hub --allow-private-callbacks`).
    pub allow_private_callbacks: bool,
}

impl HubConfig {
    /// Defaults for a hub reachable at `public_url`.
    pub fn new(public_url: Url) -> HubConfig {
        HubConfig {
            public_url,
            check_hub_link: false,
            lease_min: Duration::from_secs(300),
            lease_max: Duration::from_secs(2_678_400),
            lease_default: Duration::from_secs(864_000),
            allow_publishers: Vec::new(),
            max_queue: 10_000,
            max_concurrency: 64,
            max_pending: 1_000,
            max_publish_bytes: 50 * 1024 * 1024,
            max_form_bytes: 64 * 1024,
            max_challenge_bytes: 4 * 1024,
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(600),
            request_timeout: Duration::from_secs(30),
            check_payload: true,
            sweep_interval: Duration::from_secs(60),
            allow_private_callbacks: false,
        }
    }

    /// Checks that the values can work together.
    pub fn validate(&self) -> Result<(), Error> {
        let err = |m: &str| Err(Error::Config(m.to_owned()));
        if self.lease_min.as_secs() == 0 {
            return err("the lease minimum must be at least 1 s");
        }
        if self.lease_min > self.lease_max {
            return err("the lease minimum is above the lease maximum");
        }
        if self.max_queue == 0 || self.max_concurrency == 0 || self.max_pending == 0 {
            return err("queue, concurrency and pending bounds must be at least 1");
        }
        if self.retry_min.is_zero() || self.retry_min > self.retry_max {
            return err("retry delays must satisfy 0 < min <= max");
        }
        if !matches!(self.public_url.scheme(), "http" | "https") {
            return err("the public URL must be http or https");
        }
        Ok(())
    }

    /// The lease granted for a request of `asked` seconds (none: the default), clamped to
    /// `[lease_min, lease_max]` (WebSub 5.3: the hub decides the lease).
    pub fn grant_lease(&self, asked: Option<u64>) -> u64 {
        asked
            .unwrap_or(self.lease_default.as_secs())
            .clamp(self.lease_min.as_secs(), self.lease_max.as_secs())
    }

    /// True when `topic` may be published to (and subscribed to): the allowlist is empty or
    /// `topic` starts with one of its prefixes *and* has the prefix's origin (scheme, host,
    /// port).
    ///
    /// Both are compared as parsed URLs, not as the strings given: with a plain string
    /// prefix, an entry written without a path (`http://src.test`) admitted
    /// `http://src.test.evil/…` and `http://src.test@evil.example/…` (user info), topics of
    /// other hosts. Parsing also makes `HTTP://SRC.TEST/` and `http://src.test/` the same.
    /// A topic or prefix that does not parse is not allowed by it.
    pub fn allows(&self, topic: &str) -> bool {
        if self.allow_publishers.is_empty() {
            return true;
        }
        let Ok(topic) = Url::parse(topic) else {
            return false;
        };
        self.allow_publishers.iter().any(|p| {
            Url::parse(p).is_ok_and(|prefix| {
                prefix.origin() == topic.origin() && topic.as_str().starts_with(prefix.as_str())
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_clamped_and_the_allowlist_is_by_prefix() {
        let mut c = HubConfig::new(Url::parse("http://hub.test/").unwrap());
        assert_eq!(c.grant_lease(Some(10)), 300);
        assert_eq!(c.grant_lease(Some(3600)), 3600);
        assert_eq!(c.grant_lease(Some(u64::MAX)), 2_678_400);
        assert_eq!(c.grant_lease(None), 864_000);
        c.lease_max = Duration::from_secs(600);
        assert_eq!(c.grant_lease(None), 600);
        c.validate().unwrap();
        c.lease_min = Duration::from_secs(601);
        assert!(c.validate().is_err());

        assert!(c.allows("http://anything/"));
        c.allow_publishers = vec!["https://src.test/maps/".into()];
        assert!(c.allows("https://src.test/maps/change/"));
        assert!(!c.allows("https://src.test/other/change/"));
        assert!(!c.allows("https://src.test.evil/maps/"));
        assert!(c.allows("HTTPS://SRC.TEST/maps/change/"));
        // A prefix without a path admits its own host only.
        c.allow_publishers = vec!["https://src.test".into()];
        assert!(c.allows("https://src.test/maps/change/"));
        assert!(!c.allows("https://src.test.evil/maps/"));
        assert!(!c.allows("https://src.test@evil.example/maps/"));
        assert!(!c.allows("https://src.test:8443/maps/"));
        assert!(!c.allows("not a url"));
    }
}
