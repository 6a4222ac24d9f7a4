//! [`HostRate`]: at most `per_host_rate` requests per second to each upstream host.
//!
//! Sources ask harvesters for a bounded request rate; the per-host concurrency alone does not
//! give one (fast answers let a few connections send hundreds of requests a second). So each
//! host gets its next free send slot, spaced `1 / rate` apart: a request takes the later of now
//! and that slot, moves the slot one interval on, and sleeps until its own slot. No burst is
//! allowed beyond one request, which is what a Source's "N requests per second" means.
//!
//! Slots are reserved under a lock and never given back: a request that is cancelled while it
//! waits still leaves its gap, which errs on the polite side.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Hosts kept before those whose next slot has passed are dropped. Such an entry says nothing
/// a missing one would not (the next request may go at once), so pruning never lets a host be
/// asked faster; the map then holds only hosts requested within the last interval.
const HOST_MAP_PRUNE: usize = 1024;

/// The longest spacing used, whatever the rate (a tiny rate would otherwise overflow
/// `Instant` arithmetic).
const MAX_INTERVAL: Duration = Duration::from_secs(86_400);

/// Per-host send slots.
#[derive(Debug)]
pub(crate) struct HostRate {
    interval: Duration,
    next: Mutex<HashMap<String, Instant>>,
}

impl HostRate {
    /// A limiter for `rate` requests per second per host; `None` when there is no limit
    /// (`None`, or a rate that is not a positive finite number).
    pub(crate) fn new(rate: Option<f64>) -> Option<HostRate> {
        let rate = rate.filter(|r| r.is_finite() && *r > 0.0)?;
        let interval = Duration::try_from_secs_f64(1.0 / rate)
            .unwrap_or(MAX_INTERVAL)
            .min(MAX_INTERVAL);
        Some(HostRate {
            interval,
            next: Mutex::new(HashMap::new()),
        })
    }

    /// A limiter that spaces requests by the interval each caller gives
    /// ([`HostRate::wait_for`]): the shared schedule of a fleet, where every pipeline spaces
    /// its own requests by its own rate on the same per-host slots.
    pub(crate) fn shared() -> HostRate {
        HostRate {
            interval: Duration::ZERO,
            next: Mutex::new(HashMap::new()),
        }
    }

    /// The spacing of `rate` requests per second (`None` when it is no limit).
    pub(crate) fn interval_of(rate: Option<f64>) -> Option<Duration> {
        HostRate::new(rate).map(|r| r.interval)
    }

    /// The spacing of this limiter's requests.
    pub(crate) fn interval(&self) -> Duration {
        self.interval
    }

    /// Waits until `host` may be sent the next request, and reserves that slot.
    pub(crate) async fn wait(&self, host: &str) {
        self.wait_for(host, self.interval).await;
    }

    /// Waits until `host` may be sent the next request, and reserves that slot, the host's
    /// next slot `interval` later.
    pub(crate) async fn wait_for(&self, host: &str, interval: Duration) {
        let slot = self.reserve_for(host, Instant::now(), interval);
        tokio::time::sleep_until(slot).await;
    }

    /// The slot for a request to `host` asked for at `now`; the host's next slot moves on.
    #[cfg(test)]
    fn reserve(&self, host: &str, now: Instant) -> Instant {
        self.reserve_for(host, now, self.interval)
    }

    /// [`HostRate::reserve`] with the interval given.
    fn reserve_for(&self, host: &str, now: Instant, interval: Duration) -> Instant {
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        if next.len() >= HOST_MAP_PRUNE {
            next.retain(|_, t| *t > now);
        }
        let t = next.entry(host.to_owned()).or_insert(now);
        let slot = (*t).max(now);
        *t = slot + interval;
        slot
    }

    #[cfg(test)]
    fn hosts(&self) -> usize {
        self.next.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_limit_unless_a_positive_finite_rate() {
        for r in [
            None,
            Some(0.0),
            Some(-1.0),
            Some(f64::NAN),
            Some(f64::INFINITY),
        ] {
            assert!(HostRate::new(r).is_none(), "{r:?}");
        }
        assert_eq!(
            HostRate::new(Some(1e-12)).unwrap().interval,
            MAX_INTERVAL,
            "a tiny rate is capped, not an overflow"
        );
    }

    #[test]
    fn slots_are_spaced_per_host_and_hosts_are_independent() {
        let r = HostRate::new(Some(10.0)).unwrap();
        let t0 = Instant::now();
        let ms = |t: Instant| t.duration_since(t0).as_millis();
        let a: Vec<_> = (0..3).map(|_| ms(r.reserve("a", t0))).collect();
        assert_eq!(a, [0, 100, 200]);
        assert_eq!(ms(r.reserve("b", t0)), 0, "another host is not held back");
        // After a pause, the next request goes at once: no credit is saved up for a burst.
        let later = t0 + Duration::from_secs(5);
        assert_eq!(ms(r.reserve("a", later)), 5_000);
        assert_eq!(ms(r.reserve("a", later)), 5_100);
    }

    #[test]
    fn a_shared_schedule_spaces_each_caller_by_its_own_interval() {
        let r = HostRate::shared();
        let t0 = Instant::now();
        let ms = |t: Instant| t.duration_since(t0).as_millis();
        let i = Duration::from_millis(100);
        // Two callers (two pipelines) at the same rate share the host's slots: 10/s in all.
        assert_eq!(ms(r.reserve_for("a", t0, i)), 0);
        assert_eq!(ms(r.reserve_for("a", t0, i)), 100);
        assert_eq!(ms(r.reserve_for("a", t0, i)), 200);
        // A caller without a rate (interval 0) still waits for the slot others reserved.
        assert_eq!(ms(r.reserve_for("a", t0, Duration::ZERO)), 300);
        assert_eq!(ms(r.reserve_for("b", t0, i)), 0, "hosts are independent");
    }

    #[test]
    fn the_map_drops_only_hosts_whose_slot_passed() {
        let r = HostRate::new(Some(1.0)).unwrap();
        let t0 = Instant::now();
        for i in 0..HOST_MAP_PRUNE {
            r.reserve(&format!("h{i}"), t0);
        }
        assert_eq!(r.hosts(), HOST_MAP_PRUNE);
        // Within the interval every host is still waited for: nothing is dropped.
        r.reserve("busy", t0 + Duration::from_millis(500));
        assert_eq!(r.hosts(), HOST_MAP_PRUNE + 1);
        // Past it, the stale entries go; the busy host keeps its next slot.
        let t1 = t0 + Duration::from_millis(1_200);
        r.reserve("new", t1);
        assert_eq!(r.hosts(), 2);
        assert_eq!(
            r.reserve("busy", t1).duration_since(t0),
            Duration::from_millis(1_500)
        );
    }
}
