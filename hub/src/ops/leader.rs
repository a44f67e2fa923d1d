//! Leader election through a `coordination.k8s.io/v1` Lease, so that several replicas
//! of the hub can run and exactly one reconciles.
//!
//! Kept by hand rather than taken from `kube-lease-manager` or kubert's lease: a leader
//! that cannot renew stops itself at two thirds of the lease (neither gives that), every
//! write is a resourceVersion-conditional update (the hub's RBAC grants get, create and
//! update on its Lease, no patch), and kubert pins an older kube (a second copy of it).
//!
//! The protocol is the usual one for Lease locks, with optimistic concurrency doing the
//! arbitration: every write of the Lease other than its creation is a PUT carrying the
//! `resourceVersion` that was read, so of two replicas racing for an expired Lease one
//! wins and the other gets 409 Conflict.
//!
//! Use:
//!
//! 1. [`LeaderElection::acquire`] until this replica holds the Lease;
//! 2. reconcile while [`LeaderElection::hold`] runs; when it returns, leadership is lost
//!    (or may be): stop reconciling at once and exit the process, never carry on without
//!    the Lease;
//! 3. on graceful shutdown, stop reconciling then [`LeaderElection::release`], so that
//!    another replica takes over without waiting for the Lease to expire.
//!
//! Only the `get`, `create` and `update` verbs are used on leases. The leader also labels
//! its own pod so the federation Service reaches it: see [`super::leader_pod`].
//!
//! Expiry is judged from the holder's `renewTime` and `leaseDurationSeconds` against this
//! replica's clock, so clocks must be roughly in sync (as NTP keeps them on nodes).

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Api;
use kube::api::PostParams;
use tokio::time::Instant;

/// Default [`LeaderElection::lease_duration`].
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default [`LeaderElection::renew_every`].
pub const DEFAULT_RENEW_EVERY: Duration = Duration::from_secs(5);

/// Why [`LeaderElection::hold`] gave up leadership.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The Lease names another holder, no holder, or is gone.
    #[error("leadership lost: the Lease is now held by {}", holder.as_deref().unwrap_or("nobody"))]
    Lost {
        /// The new holder, if any.
        holder: Option<String>,
    },
    /// Someone else wrote the Lease between our read and our renewal (409 Conflict).
    #[error("leadership lost: the Lease changed while being renewed (409 Conflict)")]
    Conflict,
    /// The Lease could not be renewed for a whole lease duration, so another replica may
    /// have taken it.
    #[error("leadership lost: the Lease was not renewed for {elapsed:?}")]
    RenewTimeout {
        /// Time since the last successful renewal.
        elapsed: Duration,
        /// The last error renewing, if a request failed (rather than hung).
        #[source]
        last_error: Option<kube::Error>,
    },
}

/// Leader election of this replica through one Lease.
#[derive(Debug)]
pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    lease_duration: Duration,
    renew_every: Duration,
    /// When the request of the last successful acquisition or renewal started.
    renewed: Mutex<Option<Instant>>,
}

/// Outcome of one acquisition attempt.
enum Attempt {
    Acquired { transitions: i32 },
    HeldBy(String),
    LostRace,
}

/// Why one renewal failed.
enum RenewError {
    Lost(Option<String>),
    Conflict,
    Api(kube::Error),
}

impl From<kube::Error> for RenewError {
    fn from(error: kube::Error) -> RenewError {
        RenewError::Api(error)
    }
}

impl LeaderElection {
    /// Election for the Lease `name` of `api` (whose namespace is the hub's own), as
    /// `identity` (unique per replica: see [`default_identity`]), with the default
    /// durations.
    pub fn new(api: Api<Lease>, name: impl Into<String>, identity: impl Into<String>) -> Self {
        LeaderElection {
            api,
            name: name.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_every: DEFAULT_RENEW_EVERY,
            renewed: Mutex::new(None),
        }
    }

    /// Sets how long the Lease stays ours without renewal (whole seconds, at least 1).
    /// It should be a few times [`renew_every`](Self::renew_every).
    pub fn with_lease_duration(mut self, lease_duration: Duration) -> Self {
        self.lease_duration = lease_duration.max(Duration::from_secs(1));
        self
    }

    /// Sets how often the Lease is renewed, and how often a waiting replica retries.
    pub fn with_renew_every(mut self, renew_every: Duration) -> Self {
        self.renew_every = renew_every;
        self
    }

    /// Name of the Lease.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Identity of this replica in the Lease's `holderIdentity`.
    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// How long the Lease stays ours without renewal (default 15 s).
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// How often the Lease is renewed (default 5 s).
    pub fn renew_every(&self) -> Duration {
        self.renew_every
    }

    /// Returns once this replica holds the Lease, retrying every
    /// [`renew_every`](Self::renew_every) while another replica holds it: creates the
    /// Lease if it is absent, and takes it over (a conditional PUT) once it is free,
    /// expired, or already ours. Transient errors (conflicts, throttling, server and
    /// connection errors) are retried; others (such as 403 Forbidden) are returned.
    pub async fn acquire(&self) -> Result<(), kube::Error> {
        tracing::info!(lease = %self.name, identity = %self.identity, "acquiring leadership");
        let mut seen_holder: Option<String> = None;
        loop {
            match self.try_acquire().await {
                Ok(Attempt::Acquired { transitions }) => {
                    tracing::info!(
                        lease = %self.name,
                        identity = %self.identity,
                        transitions,
                        "acquired leadership"
                    );
                    return Ok(());
                }
                Ok(Attempt::HeldBy(holder)) => {
                    if seen_holder.as_deref() != Some(holder.as_str()) {
                        tracing::info!(
                            lease = %self.name,
                            %holder,
                            "the Lease is held by another replica; waiting"
                        );
                    } else {
                        tracing::debug!(lease = %self.name, %holder, "the Lease is still held");
                    }
                    seen_holder = Some(holder);
                }
                Ok(Attempt::LostRace) => {
                    tracing::info!(lease = %self.name, "another replica took the Lease first");
                }
                Err(error) if is_transient(&error) => {
                    tracing::warn!(lease = %self.name, %error, "acquiring the Lease failed; retrying");
                }
                Err(error) => {
                    tracing::error!(lease = %self.name, %error, "cannot acquire the Lease");
                    return Err(error);
                }
            }
            tokio::time::sleep(self.renew_every).await;
        }
    }

    /// Renews the Lease every [`renew_every`](Self::renew_every) (a GET then a
    /// conditional PUT) while this replica holds it, and returns as soon as leadership
    /// is lost: another holder (or none) in the Lease, a 409 Conflict on renewal, or no
    /// successful renewal for two thirds of [`lease_duration`](Self::lease_duration) (the
    /// remaining third is the margin before another replica may take the Lease, as in
    /// client-go's renew deadline). It never returns
    /// `Ok`. Call it after [`acquire`](Self::acquire), and exit when it returns.
    pub async fn hold(&self) -> Result<(), LeaderError> {
        let mut last_renewed = self.last_renewed().unwrap_or_else(Instant::now);
        let mut last_attempt = last_renewed;
        let mut last_error: Option<kube::Error> = None;
        loop {
            let deadline = last_renewed + self.renew_deadline();
            tokio::time::sleep_until((last_attempt + self.renew_every).min(deadline)).await;
            let started = Instant::now();
            if started >= deadline {
                return Err(self.renew_timeout(last_renewed, last_error));
            }
            last_attempt = started;
            match tokio::time::timeout_at(deadline, self.renew()).await {
                Err(_elapsed) => return Err(self.renew_timeout(last_renewed, last_error)),
                Ok(Ok(())) => {
                    tracing::debug!(lease = %self.name, "renewed the Lease");
                    last_renewed = started;
                    last_error = None;
                    self.set_renewed(Some(started));
                }
                Ok(Err(RenewError::Lost(holder))) => {
                    self.set_renewed(None);
                    tracing::error!(
                        lease = %self.name,
                        identity = %self.identity,
                        holder = holder.as_deref().unwrap_or(""),
                        "leadership lost to another holder"
                    );
                    return Err(LeaderError::Lost { holder });
                }
                Ok(Err(RenewError::Conflict)) => {
                    self.set_renewed(None);
                    tracing::error!(
                        lease = %self.name,
                        identity = %self.identity,
                        "leadership lost: the Lease changed while being renewed"
                    );
                    return Err(LeaderError::Conflict);
                }
                Ok(Err(RenewError::Api(error))) => {
                    tracing::warn!(
                        lease = %self.name,
                        %error,
                        since_renewed = ?started.duration_since(last_renewed),
                        "renewing the Lease failed; retrying"
                    );
                    last_error = Some(error);
                }
            }
        }
    }

    /// Gives the Lease up if this replica still holds it (clears `holderIdentity`), so
    /// that another replica takes over at once. Call it on graceful shutdown, after
    /// reconciling stopped. Failures are logged: the Lease then expires on its own. Takes
    /// at most [`lease_duration`](Self::lease_duration).
    pub async fn release(&self) {
        match tokio::time::timeout(self.lease_duration, self.try_release()).await {
            Ok(Ok(true)) => {
                tracing::info!(lease = %self.name, identity = %self.identity, "released leadership");
            }
            Ok(Ok(false)) => {
                tracing::debug!(lease = %self.name, "not the Lease holder; nothing to release");
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.name, %error, "releasing the Lease failed; it will expire");
            }
            Err(_elapsed) => {
                tracing::warn!(lease = %self.name, "releasing the Lease timed out; it will expire");
            }
        }
        self.set_renewed(None);
    }

    /// One acquisition attempt.
    async fn try_acquire(&self) -> Result<Attempt, kube::Error> {
        let started = Instant::now();
        let Some(current) = self.api.get_opt(&self.name).await? else {
            let now = MicroTime(Timestamp::now());
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    acquire_time: Some(now.clone()),
                    renew_time: Some(now),
                    lease_duration_seconds: Some(self.lease_duration_seconds()),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => {
                    self.set_renewed(Some(started));
                    Ok(Attempt::Acquired { transitions: 0 })
                }
                Err(error) if is_conflict(&error) => Ok(Attempt::LostRace),
                Err(error) => Err(error),
            };
        };
        if current.metadata.resource_version.is_none() {
            // Never write the Lease unconditionally: that could steal it from a winner.
            tracing::warn!(lease = %self.name, "the Lease read has no resourceVersion");
            return Ok(Attempt::LostRace);
        }
        let spec = current.spec.clone().unwrap_or_default();
        let now = Timestamp::now();
        let holder = holder_of(&spec);
        let ours = holder == Some(self.identity.as_str());
        if let Some(holder) = holder
            && !ours
            && !expired(&spec, now, self.lease_duration)
        {
            return Ok(Attempt::HeldBy(holder.to_owned()));
        }
        if let Some(holder) = holder
            && !ours
        {
            tracing::info!(lease = %self.name, %holder, "the Lease expired; taking it over");
        }

        let now = MicroTime(now);
        let transitions = if ours {
            spec.lease_transitions.unwrap_or(0)
        } else {
            spec.lease_transitions.unwrap_or(0).saturating_add(1)
        };
        let acquire_time = if ours {
            spec.acquire_time.clone().unwrap_or_else(|| now.clone())
        } else {
            now.clone()
        };
        let mut next = current;
        next.spec = Some(LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            acquire_time: Some(acquire_time),
            renew_time: Some(now),
            lease_duration_seconds: Some(self.lease_duration_seconds()),
            lease_transitions: Some(transitions),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => {
                self.set_renewed(Some(started));
                Ok(Attempt::Acquired { transitions })
            }
            Err(error) if is_conflict(&error) => Ok(Attempt::LostRace),
            Err(error) => Err(error),
        }
    }

    /// One renewal: read the Lease, check it is still ours, write a new `renewTime`.
    async fn renew(&self) -> Result<(), RenewError> {
        let Some(current) = self.api.get_opt(&self.name).await? else {
            return Err(RenewError::Lost(None));
        };
        let spec = current.spec.clone().unwrap_or_default();
        match holder_of(&spec) {
            Some(holder) if holder == self.identity => {}
            holder => return Err(RenewError::Lost(holder.map(str::to_owned))),
        }
        if current.metadata.resource_version.is_none() {
            return Err(RenewError::Conflict);
        }
        let mut next = current;
        next.spec = Some(LeaseSpec {
            renew_time: Some(MicroTime(Timestamp::now())),
            lease_duration_seconds: Some(self.lease_duration_seconds()),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => Ok(()),
            Err(error) if is_conflict(&error) => Err(RenewError::Conflict),
            Err(error) => Err(RenewError::Api(error)),
        }
    }

    /// Clears the holder if it is us; whether it was.
    async fn try_release(&self) -> Result<bool, kube::Error> {
        let Some(current) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let spec = current.spec.clone().unwrap_or_default();
        if holder_of(&spec) != Some(self.identity.as_str())
            || current.metadata.resource_version.is_none()
        {
            return Ok(false);
        }
        let mut next = current;
        next.spec = Some(LeaseSpec {
            holder_identity: None,
            renew_time: Some(MicroTime(Timestamp::now())),
            lease_duration_seconds: Some(1),
            ..spec
        });
        match self
            .api
            .replace(&self.name, &PostParams::default(), &next)
            .await
        {
            Ok(_) => Ok(true),
            // Someone wrote the Lease meanwhile: it is not ours to clear any more.
            Err(error) if is_conflict(&error) => Ok(false),
            Err(error) => Err(error),
        }
    }

    fn renew_timeout(&self, last_renewed: Instant, last_error: Option<kube::Error>) -> LeaderError {
        self.set_renewed(None);
        let elapsed = last_renewed.elapsed();
        tracing::error!(
            lease = %self.name,
            identity = %self.identity,
            ?elapsed,
            error = last_error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
            "leadership lost: the Lease could not be renewed in time"
        );
        LeaderError::RenewTimeout {
            elapsed,
            last_error,
        }
    }

    /// How long renewals may fail before this replica stops leading: two thirds of the
    /// lease, so it stops well before another replica may take over.
    fn renew_deadline(&self) -> Duration {
        (self.lease_duration * 2 / 3).max(self.renew_every)
    }

    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn last_renewed(&self) -> Option<Instant> {
        match self.renewed.lock() {
            Ok(guard) => *guard,
            Err(poisoned) => *poisoned.into_inner(),
        }
    }

    fn set_renewed(&self, at: Option<Instant>) {
        match self.renewed.lock() {
            Ok(mut guard) => *guard = at,
            Err(poisoned) => *poisoned.into_inner() = at,
        }
    }
}

/// A unique identity for this replica: `$POD_NAME`, else the host name (the pod name in
/// a pod), else `flux-hub-<pid>`.
pub fn default_identity() -> String {
    let from_env = |var: &str| std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    from_env("POD_NAME")
        .or_else(|| from_env("HOSTNAME"))
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| format!("flux-hub-{}", std::process::id()))
}

/// The holder named in the Lease, if any (an empty name is none).
fn holder_of(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// Whether the holder's lease is over at `now`: `renewTime + leaseDurationSeconds <= now`
/// (the holder's duration, else `default`). A Lease that was never renewed is expired.
fn expired(spec: &LeaseSpec, now: Timestamp, default: Duration) -> bool {
    let Some(MicroTime(renewed)) = spec.renew_time else {
        return true;
    };
    let seconds = spec
        .lease_duration_seconds
        .map(i64::from)
        .unwrap_or_else(|| i64::try_from(default.as_secs()).unwrap_or(i64::MAX));
    match renewed.checked_add(SignedDuration::from_secs(seconds)) {
        Ok(expiry) => expiry <= now,
        // Past the end of time: never expires.
        Err(_) => false,
    }
}

/// 409: Conflict on update, AlreadyExists on create.
fn is_conflict(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 409)
}

/// Errors worth retrying while acquiring: conflicts, throttling, server errors, and
/// failures to reach the API server.
fn is_transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 409 | 429 | 500..=599),
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed: Option<Timestamp>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            renew_time: renewed.map(MicroTime),
            lease_duration_seconds: seconds,
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn expiry_uses_renew_time_and_the_holders_duration() {
        let now = Timestamp::now();
        let ago = |s: i64| now.checked_sub(SignedDuration::from_secs(s)).expect("time");
        let d = Duration::from_secs(15);
        assert!(!expired(&spec(Some("a"), Some(ago(5)), Some(15)), now, d));
        assert!(expired(&spec(Some("a"), Some(ago(20)), Some(15)), now, d));
        assert!(expired(&spec(Some("a"), Some(ago(15)), Some(15)), now, d));
        // The holder's own duration wins over ours.
        assert!(!expired(&spec(Some("a"), Some(ago(20)), Some(60)), now, d));
        // No duration in the Lease: ours.
        assert!(!expired(&spec(Some("a"), Some(ago(10)), None), now, d));
        assert!(expired(&spec(Some("a"), None, Some(15)), now, d));
    }

    #[test]
    fn empty_holder_is_none() {
        assert_eq!(holder_of(&spec(Some(""), None, None)), None);
        assert_eq!(holder_of(&spec(None, None, None)), None);
        assert_eq!(holder_of(&spec(Some("a"), None, None)), Some("a"));
    }

    #[test]
    fn transient_errors() {
        let api = |code: u16| {
            kube::Error::Api(
                kube::core::Status::failure("x", "y")
                    .with_code(code)
                    .boxed(),
            )
        };
        assert!(is_transient(&api(409)));
        assert!(is_transient(&api(503)));
        assert!(is_transient(&api(429)));
        assert!(!is_transient(&api(403)));
        assert!(!is_transient(&api(404)));
        assert!(is_conflict(&api(409)));
        assert!(!is_conflict(&api(500)));
    }
}
