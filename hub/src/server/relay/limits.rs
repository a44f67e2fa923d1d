//! The rates a spoke's relayed connections are held to, all its bursts together: new
//! `Relay` calls a second and relayed bytes a second, each a token bucket per spoke.
//!
//! A token bucket holds at most `burst` tokens and gains `rate` a second. A call takes one
//! token or is refused (`RESOURCE_EXHAUSTED`: the spoke closes the broker's connection and
//! its ZeroMQ connects again). Bytes are never refused, they wait: a chunk takes its length
//! in tokens, going into debt when there are not enough, and the connection carries it
//! once the debt is paid at `rate`. This is the whole of it, decided on plain numbers so
//! that it is tested without clocks.
//!
//! Kept by hand rather than taken from `governor` (which the report limit uses): its GCRA
//! never lends. `check_n` / `until_n_ready` take `n` cells only once they are all there,
//! so a chunk waits before it takes rather than taking and owing, and later small chunks
//! can pass a waiting large one (here each taker queues behind the debt before it); a
//! chunk above the burst (1 MiB) fails with `InsufficientCapacity`, to be split by hand;
//! and a quota gives back one cell per whole number of nanoseconds, so bytes as cells run
//! 0.2% fast at 4 MiB/s (238 ns for 238.4), 86% fast at 512 MiB/s (1 ns for 1.86) and
//! unbounded past ~954 MiB/s (`Quota::per_second` rounds to 0 ns), within
//! `--relay-mib-per-second`'s 1024. Calls share the bucket with the bytes, so they stay on
//! it too.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// New `Relay` calls of one spoke a second, sustained: a broker's ZeroMQ connects again
/// every 100 ms while it is refused, so a thousand brokers of a burst whose lead does not
/// answer would otherwise make the hub dial the lead ten thousand times a second.
pub const CALLS_PER_SECOND: f64 = 200.0;

/// New `Relay` calls of one spoke at once: above the most relayed connections a spoke
/// carries (13 x 150 = 1,950), so that all of a spoke's brokers starting together connect
/// at once.
pub const CALL_BURST: f64 = 2_000.0;

/// Relayed bytes of one spoke a second, both directions together, sustained (4 MiB/s): a
/// bound on how much of the hub's one thread (every byte is decrypted and encrypted again,
/// and a Flux overlay's messages are small, so the cost is per message) one spoke takes,
/// shared with the controller and the admin API. Measured on 2 cores
/// (`cargo bench -p flux-e2e --bench relay_load`, docs/limits.md "Relayed connections"):
/// Flux-like frames of 100-300 bytes on 1,000 connections took 27% of the hub's thread at
/// 4 MiB/s with the controller's and the admin's p99 unchanged, 43% at 8 MiB/s; at
/// 64 MiB/s the thread was saturated at 42 MiB/s and the p99s rose 14- and 94-fold.
pub const BYTES_PER_SECOND: f64 = MIB_PER_SECOND as f64 * 1024.0 * 1024.0;

/// [`BYTES_PER_SECOND`] in MiB, `--relay-mib-per-second`'s default.
pub const MIB_PER_SECOND: u32 = 4;

/// Relayed bytes of one spoke at once, before the rate holds (1 MiB, a quarter of a
/// second's): a spoke that saves its bytes up and sends each second's at once makes the hub
/// carry them back to back; measured, 1 MiB at once left the controller's and the admin's
/// p99 at 3.1 and 2.5 ms, 4 MiB at once raised them to 5.0 and 6.8 ms.
pub const BYTE_BURST: f64 = BYTES_PER_SECOND / BURST_SECONDS_OF_BYTES;

/// The byte burst is this fraction of a second's bytes (1 / 4 s).
const BURST_SECONDS_OF_BYTES: f64 = 4.0;

/// The most `--relay-mib-per-second` takes: a spoke's relayed bytes cost the hub's thread
/// about 8% of a core per MiB/s in small frames, so more than this is no bound at all.
pub const MAX_MIB_PER_SECOND: u32 = 1024;

/// The rates of each spoke's relayed connections.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rates {
    /// New `Relay` calls a second ([`CALLS_PER_SECOND`]).
    pub calls_per_second: f64,
    /// New `Relay` calls at once ([`CALL_BURST`]).
    pub call_burst: f64,
    /// Relayed bytes a second, both ways ([`BYTES_PER_SECOND`]).
    pub bytes_per_second: f64,
    /// Relayed bytes at once ([`BYTE_BURST`]).
    pub byte_burst: f64,
}

impl Rates {
    /// These rates with `mib` MiB of relayed bytes a second (`--relay-mib-per-second`), and
    /// a quarter of a second's at once.
    pub fn with_mib_per_second(self, mib: u32) -> Rates {
        let bytes_per_second = f64::from(mib) * 1024.0 * 1024.0;
        Rates {
            bytes_per_second,
            byte_burst: bytes_per_second / BURST_SECONDS_OF_BYTES,
            ..self
        }
    }
}

impl Default for Rates {
    fn default() -> Self {
        Rates {
            calls_per_second: CALLS_PER_SECOND,
            call_burst: CALL_BURST,
            bytes_per_second: BYTES_PER_SECOND,
            byte_burst: BYTE_BURST,
        }
    }
}

/// A token bucket: at most `burst` tokens, `rate` more a second; full when made.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenBucket {
    tokens: f64,
    last: Instant,
    rate: f64,
    burst: f64,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens gaining `rate` a second, as of `now`.
    pub fn new(rate: f64, burst: f64, now: Instant) -> TokenBucket {
        TokenBucket {
            tokens: burst,
            last: now,
            rate,
            burst,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.last = self.last.max(now);
    }

    /// Takes one token if there is one at `now`.
    pub fn try_take(&mut self, now: Instant) -> bool {
        self.refill(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Takes `n` tokens at `now`, going into debt when there are fewer: how long until the
    /// debt is paid (zero when there was none). Whoever takes next waits for it too.
    pub fn take_owing(&mut self, n: f64, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= n;
        if self.tokens >= 0.0 || self.rate <= 0.0 {
            return Duration::ZERO;
        }
        Duration::from_secs_f64(-self.tokens / self.rate)
    }
}

/// One spoke's byte bucket, shared by its relayed connections.
pub type ByteBudget = Arc<Mutex<TokenBucket>>;

/// Takes `n` bytes from `budget` and waits until they may move.
pub async fn spend(budget: &ByteBudget, n: usize) {
    let wait = budget
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .take_owing(n as f64, Instant::now());
    if !wait.is_zero() {
        tokio::time::sleep(wait).await;
    }
}

/// The buckets of every spoke that relayed.
#[derive(Debug, Default)]
pub struct SpokeRates {
    calls: Mutex<HashMap<String, TokenBucket>>,
    bytes: Mutex<HashMap<String, ByteBudget>>,
}

impl SpokeRates {
    /// Whether `spoke` may make one more `Relay` call at `now` (taking a token if so).
    pub fn allow_call(&self, spoke: &str, rates: &Rates, now: Instant) -> bool {
        let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls
            .entry(spoke.to_string())
            .or_insert_with(|| TokenBucket::new(rates.calls_per_second, rates.call_burst, now))
            .try_take(now)
    }

    /// The byte bucket `spoke`'s relayed connections share.
    pub fn bytes(&self, spoke: &str, rates: &Rates) -> ByteBudget {
        let mut bytes = self.bytes.lock().unwrap_or_else(PoisonError::into_inner);
        bytes
            .entry(spoke.to_string())
            .or_insert_with(|| {
                Arc::new(Mutex::new(TokenBucket::new(
                    rates.bytes_per_second,
                    rates.byte_burst,
                    Instant::now(),
                )))
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_beyond_the_burst_wait_for_the_rate_and_spokes_are_apart() {
        let rates = Rates {
            calls_per_second: 2.0,
            call_burst: 3.0,
            ..Rates::default()
        };
        let limits = SpokeRates::default();
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limits.allow_call("a", &rates, t0));
        }
        assert!(!limits.allow_call("a", &rates, t0), "the burst is spent");
        assert!(limits.allow_call("b", &rates, t0), "another spoke's calls");
        assert!(!limits.allow_call("a", &rates, t0 + Duration::from_millis(400)));
        assert!(limits.allow_call("a", &rates, t0 + Duration::from_millis(500)));
        // A long pause fills the bucket to its burst, not beyond.
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(limits.allow_call("a", &rates, later));
        }
        assert!(!limits.allow_call("a", &rates, later));
    }

    #[test]
    fn the_byte_rate_is_set_in_mib_with_a_quarter_second_burst() {
        let defaults = Rates::default();
        assert_eq!(defaults.with_mib_per_second(4), defaults);
        let raised = defaults.with_mib_per_second(16);
        assert_eq!(raised.bytes_per_second, 16.0 * 1024.0 * 1024.0);
        assert_eq!(raised.byte_burst, 4.0 * 1024.0 * 1024.0);
        assert_eq!(raised.call_burst, defaults.call_burst);
    }

    #[test]
    fn bytes_beyond_the_burst_owe_time_at_the_rate() {
        let t0 = Instant::now();
        let mut bucket = TokenBucket::new(1000.0, 500.0, t0);
        assert_eq!(bucket.take_owing(500.0, t0), Duration::ZERO);
        // 250 more: 0.25 s of debt; the next 250 wait for both.
        assert_eq!(bucket.take_owing(250.0, t0), Duration::from_millis(250));
        assert_eq!(bucket.take_owing(250.0, t0), Duration::from_millis(500));
        // Half a second later the debt is paid.
        assert_eq!(
            bucket.take_owing(0.0, t0 + Duration::from_millis(500)),
            Duration::ZERO
        );
        // A clock that goes back changes nothing.
        let mut bucket = TokenBucket::new(1000.0, 500.0, t0 + Duration::from_secs(1));
        assert_eq!(bucket.take_owing(500.0, t0), Duration::ZERO);
        assert!(!bucket.try_take(t0));
    }
}
