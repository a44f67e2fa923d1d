//! Polling with deadlines: [`secs`] (scaled by `FLUX_E2E_TIMEOUT_SCALE`), [`Probe`], and
//! [`TestEnv::poll`], [`TestEnv::eventually`], [`TestEnv::holds_for`].

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};

use super::*;

/// How often conditions are polled.
pub(super) const POLL: Duration = Duration::from_millis(500);

/// `n` seconds, times `FLUX_E2E_TIMEOUT_SCALE` (default 1).
pub fn secs(n: u64) -> Duration {
    static SCALE: OnceLock<f64> = OnceLock::new();
    let scale = *SCALE.get_or_init(|| {
        std::env::var("FLUX_E2E_TIMEOUT_SCALE")
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s > 0.0)
            .unwrap_or(1.0)
    });
    Duration::from_secs_f64(n as f64 * scale)
}

/// The outcome of one probe of [`TestEnv::eventually`].
pub enum Probe<T> {
    /// The condition holds; stop polling.
    Done(T),
    /// Not yet; the text describes what was observed (printed on timeout).
    Waiting(String),
}

impl TestEnv {
    /// Polls `probe` until it is done or `timeout` passes. `Ok(Err(last observation))`
    /// on timeout; `Err` only when the hub process died meanwhile. Probe errors (API
    /// hiccups, objects not there yet) count as "not yet".
    pub async fn poll<T>(
        &self,
        timeout: Duration,
        mut probe: impl AsyncFnMut() -> Result<Probe<T>>,
    ) -> Result<Result<T, String>> {
        let start = Instant::now();
        loop {
            let last = match probe().await {
                Ok(Probe::Done(v)) => return Ok(Ok(v)),
                Ok(Probe::Waiting(state)) => state,
                Err(e) => format!("error: {e:#}"),
            };
            if let Some(exit) = self.exited() {
                bail!("{exit}; last observed:\n{last}");
            }
            if start.elapsed() >= timeout {
                return Ok(Err(last));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// [`TestEnv::poll`], failing with `what` and the last observation on timeout.
    pub async fn eventually<T>(
        &self,
        what: &str,
        timeout: Duration,
        probe: impl AsyncFnMut() -> Result<Probe<T>>,
    ) -> Result<T> {
        match self
            .poll(timeout, probe)
            .await
            .with_context(|| format!("waiting for {what}"))?
        {
            Ok(v) => Ok(v),
            Err(last) => {
                bail!("timed out after {timeout:?} waiting for {what}; last observed:\n{last}")
            }
        }
    }

    /// Checks for `window` that `check` keeps finding nothing wrong: it returns
    /// `Ok(Some(violation))` to fail, `Ok(None)` when fine; its errors are API hiccups and
    /// are ignored.
    pub async fn holds_for(
        &self,
        what: &str,
        window: Duration,
        mut check: impl AsyncFnMut() -> Result<Option<String>>,
    ) -> Result<()> {
        let start = Instant::now();
        loop {
            match check().await {
                Ok(Some(violation)) => {
                    bail!("{what}: violated after {:?}: {violation}", start.elapsed())
                }
                Ok(None) => {}
                Err(e) => eprintln!("{}: {what}: {e:#} (ignored)", self.test),
            }
            if let Some(exit) = self.exited() {
                bail!("{what}: {exit}");
            }
            if start.elapsed() >= window {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}
