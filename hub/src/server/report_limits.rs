//! Bounds on how a spoke reports: the version it announces, and how often it may report
//! (each report may wake reconciles and status writes: a spoke is a peer, not trusted to
//! keep them rare). What a report may say is bounded where it is kept
//! ([`crate::federation::registry::report_bounds`]). See `docs/limits.md`.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::clock::Clock;
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::keyed::HashMapStateStore;
use governor::{Quota, RateLimiter};

/// Reports a spoke may send at once before it is throttled.
pub const REPORT_BURST: f64 = 40.0;
/// Reports per second a spoke may sustain. A spoke debounces its reports (250 ms by
/// default) and otherwise reports every 30 s, so a healthy one stays below this.
pub const REPORTS_PER_SECOND: f64 = 5.0;

/// Most bytes of the version a spoke announces (`WatchRequest.spoke_version`).
pub const MAX_VERSION: usize = 64;

/// Checks the version a spoke announces, which the hub logs with every line of its stream
/// and shows in `ListSpokes`: at most [`MAX_VERSION`] bytes of letters, digits and
/// `.+-_` (a semantic version with its build metadata), or empty.
pub fn check_spoke_version(version: &str) -> Result<(), String> {
    if version.len() > MAX_VERSION {
        return Err(format!(
            "WatchRequest.spoke_version: {} bytes, at most {MAX_VERSION} allowed",
            version.len()
        ));
    }
    if let Some(c) = version
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-' | '_')))
    {
        return Err(format!(
            "WatchRequest.spoke_version: {c:?} is not allowed (letters, digits and .+-_ only)"
        ));
    }
    Ok(())
}

/// A token bucket per spoke: each report takes a token; tokens come back at
/// [`REPORTS_PER_SECOND`] up to [`REPORT_BURST`]. It is `governor`'s keyed GCRA limiter (the
/// same bucket, kept as one time per spoke), on the times the callers give (see
/// [`CallerClock`]).
#[derive(Debug)]
pub struct ReportLimiter {
    limiter: RateLimiter<String, HashMapStateStore<String>, CallerClock, NoOpMiddleware<Nanos>>,
    clock: CallerClock,
}

impl Default for ReportLimiter {
    fn default() -> Self {
        let burst = NonZeroU32::new(REPORT_BURST as u32).expect("REPORT_BURST is at least 1");
        let quota = Quota::with_period(Duration::from_secs_f64(1.0 / REPORTS_PER_SECOND))
            .expect("REPORTS_PER_SECOND is finite")
            .allow_burst(burst);
        let clock = CallerClock::default();
        ReportLimiter {
            limiter: RateLimiter::hashmap_with_clock(quota, clock.clone()),
            clock,
        }
    }
}

impl ReportLimiter {
    /// Whether `spoke` may report at `now` (taking a token if so).
    pub fn allow(&self, spoke: &str, now: Instant) -> bool {
        self.clock.observe(now);
        self.limiter.check_key(&spoke.to_string()).is_ok()
    }
}

/// The limiter's clock: the latest `Instant` a caller passed to [`ReportLimiter::allow`],
/// as nanoseconds since the limiter was made. Deciding on the callers' times keeps
/// `allow`'s contract (and tests that give their own times); a time older than the latest
/// counts as the latest, as a bucket that never goes back in time. (Were `allow` to read
/// the time itself, governor's `DefaultClock` would do, `FakeRelativeClock` in tests.)
#[derive(Clone, Debug)]
struct CallerClock {
    origin: Instant,
    latest: Arc<AtomicU64>,
}

impl Default for CallerClock {
    fn default() -> Self {
        CallerClock {
            origin: Instant::now(),
            latest: Arc::default(),
        }
    }
}

impl CallerClock {
    fn observe(&self, now: Instant) {
        let since = now.saturating_duration_since(self.origin).as_nanos();
        self.latest
            .fetch_max(u64::try_from(since).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

impl Clock for CallerClock {
    type Instant = Nanos;

    fn now(&self) -> Nanos {
        Nanos::new(self.latest.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {

    use std::time::Duration;

    use super::*;

    #[test]
    fn a_spoke_version_is_short_and_plain() {
        assert!(check_spoke_version("").is_ok());
        assert!(check_spoke_version("0.1.0+g1234abc.dirty_2").is_ok());
        let long = check_spoke_version(&"1".repeat(MAX_VERSION + 1)).unwrap_err();
        assert!(
            long.contains("spoke_version") && long.contains("at most 64"),
            "{long}"
        );
        let odd = check_spoke_version("1.0\nFORGED log line").unwrap_err();
        assert!(odd.contains("'\\n' is not allowed"), "{odd}");
    }

    #[test]
    fn a_flapping_spoke_is_throttled_and_recovers_and_others_are_not() {
        let limiter = ReportLimiter::default();
        let t = Instant::now();
        let burst = REPORT_BURST as usize;
        for i in 0..burst {
            assert!(limiter.allow("flappy", t), "report {i} of the burst");
        }
        assert!(!limiter.allow("flappy", t), "past the burst");
        // Another spoke has its own bucket.
        assert!(limiter.allow("calm", t));
        // One token back after 1 / rate seconds, no more.
        let later = t + Duration::from_secs_f64(1.0 / REPORTS_PER_SECOND);
        assert!(limiter.allow("flappy", later));
        assert!(!limiter.allow("flappy", later));
        // A long pause refills to the burst, not beyond.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..burst {
            assert!(limiter.allow("flappy", much_later));
        }
        assert!(!limiter.allow("flappy", much_later));
    }

    #[test]
    fn a_token_comes_back_no_sooner_and_an_older_time_counts_as_the_latest() {
        let limiter = ReportLimiter::default();
        let t = Instant::now();
        for _ in 0..REPORT_BURST as usize {
            assert!(limiter.allow("a", t));
        }
        let period = Duration::from_secs_f64(1.0 / REPORTS_PER_SECOND);
        assert!(!limiter.allow("a", t + period - Duration::from_millis(1)));
        assert!(limiter.allow("a", t + period));
        // A caller's older time is the latest one: no token is made or lost by it.
        assert!(!limiter.allow("a", t));
        assert!(limiter.allow("a", t + period * 2));
        assert!(!limiter.allow("a", t + period));
    }

    #[test]
    fn a_healthy_spokes_pace_is_never_throttled() {
        // Debounced reports every 250 ms for ten minutes.
        let limiter = ReportLimiter::default();
        let t = Instant::now();
        for i in 0..2400u32 {
            let at = t + Duration::from_millis(250) * i;
            assert!(limiter.allow("gke", at), "report {i}");
        }
    }
}
