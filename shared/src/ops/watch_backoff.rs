//! How soon a watch tries again after its API server stopped answering.
//!
//! kube's default watch backoff (client-go's) doubles from 0.8 s up to 30 s: after an
//! outage of half a minute the next try could be 20 s or more after the API server came
//! back (measured: a burst Running again 31 s after its cluster's API server returned).
//! Hub and spoke watch a few kinds each, so retrying every few seconds costs an API
//! server nothing, and they must see its return within 5 s: this backoff doubles from
//! 250 ms to [`WatchBackoff::MAX_DELAY`] (2 s), with jitter (so many watchers do not
//! retry in step) that adds up to as much again: every delay is under 4 s.
//! kube's stream backoff resets it on every answer, so a relist after "too old resource
//! version" (an answer, then an error) waits only the first delay.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use kube::runtime::utils::Backoff;

/// A watch backoff that notices an API server's return within 5 s (see the module doc).
pub struct WatchBackoff {
    builder: ExponentialBuilder,
    current: ExponentialBackoff,
}

impl WatchBackoff {
    /// The first delay.
    pub const MIN_DELAY: Duration = Duration::from_millis(250);
    /// The largest delay before jitter (jitter adds less than the delay itself).
    pub const MAX_DELAY: Duration = Duration::from_secs(2);
}

impl Default for WatchBackoff {
    fn default() -> Self {
        let builder = ExponentialBuilder::default()
            .with_min_delay(Self::MIN_DELAY)
            .with_max_delay(Self::MAX_DELAY)
            .with_factor(2.0)
            .with_jitter()
            .without_max_times();
        WatchBackoff {
            current: builder.build(),
            builder,
        }
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.current.next()
    }
}

impl Backoff for WatchBackoff {
    fn reset(&mut self) {
        self.current = self.builder.build();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_stay_under_the_bound_and_start_again_after_a_reset() {
        let bound = WatchBackoff::MAX_DELAY * 2;
        assert!(bound < Duration::from_secs(5));
        let mut b = WatchBackoff::default();
        let delays: Vec<Duration> = (&mut b).take(40).collect();
        assert_eq!(delays.len(), 40, "never gives up");
        assert!(delays.iter().all(|d| *d < bound), "{delays:?}");
        assert!(
            delays[0] < WatchBackoff::MIN_DELAY * 2,
            "the first retry is quick: {:?}",
            delays[0]
        );
        assert!(
            delays[39] >= WatchBackoff::MAX_DELAY,
            "it backs off to the maximum: {:?}",
            delays[39]
        );
        b.reset();
        let first = b.next().expect("a delay");
        assert!(first < WatchBackoff::MIN_DELAY * 2, "{first:?}");
    }
}
