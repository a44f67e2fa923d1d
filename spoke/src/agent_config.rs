//! How a spoke agent reaches the hub and how often it reports: [`AgentConfig`], built by
//! `flux-spoke run` from its flags and by tests directly.

use std::time::Duration;

use flux_shared::federation::ownership::{SpokeIdentity, SpokeIdentityError};
use flux_shared::federation::proto::RootPath;
use flux_shared::federation::tls::{ClientSecurity, TlsFiles, TransportSettings};

/// How the agent reaches the hub and how often it reports.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    /// The hub's federation address: `https://host:port` for mTLS, `http://` with
    /// [`ClientSecurity::InsecureDevelopment`].
    pub hub_uri: String,
    /// mTLS material (or the insecure development identity).
    pub security: ClientSecurity,
    /// Who this spoke is (from `security`): stamped on every object it makes, required of
    /// every object it changes or deletes.
    pub identity: SpokeIdentity,
    /// Keepalives, timeouts, message size limits and the unary deadline.
    pub settings: TransportSettings,
    /// Every assignment's status is reported at least this often while connected (and
    /// a partly applied snapshot retried).
    pub report_interval: Duration,
    /// This spoke's software version, sent with every Watch.
    pub spoke_version: String,
    /// First reconnect delay (before jitter).
    pub min_reconnect_delay: Duration,
    /// Largest reconnect delay (before jitter) while the hub cannot be reached: short, so
    /// that a hub replaced by a rollout is found again within seconds (relayed brokers wait
    /// for it).
    pub max_reconnect_delay: Duration,
    /// Delay (before jitter) before retrying a hub that refused this spoke (its certificate,
    /// its protocol revision): what only an operator fixes is not hammered.
    pub refused_retry_delay: Duration,
    /// After a Job change, how long to wait for more before reporting.
    pub report_debounce: Duration,
    /// Where the mTLS material in `security` was read from: re-read at every connection,
    /// and watched while connected, so that a rotated certificate (a renewed Secret
    /// volume) is used without a restart. `None`: `security` as given, always.
    pub tls_files: Option<TlsFiles>,
    /// How often `tls_files` are checked for a change while connected.
    pub tls_check_interval: Duration,
    /// The namespace the spoke runs in: no burst may be created there
    /// ([`flux_shared::validate::unsafe_burst`]). Default
    /// [`flux_shared::validate::DEFAULT_SPOKE_NAMESPACE`].
    pub namespace: String,
    /// The address at which pods of this cluster reach the spoke (its pod IP): where a
    /// relayed burst's Service points (`flux-spoke run --relay-address`, which the
    /// Deployment sets from the pod's `status.podIP`). `None`: relayed bursts fail to
    /// apply, saying so. Default: none.
    pub relay_address: Option<std::net::IpAddr>,
    /// A burst's lead broker is reported unreachable once every attempt to reach it failed
    /// for this long (a lead still starting refuses at first). Default
    /// [`AgentConfig::DEFAULT_LEAD_UNREACHABLE_AFTER`].
    pub lead_unreachable_after: Duration,
    /// A direct burst's Job is deleted by the spoke once nothing was heard from the hub
    /// and nothing of the burst's lead broker reached for this long (`flux-spoke run
    /// --fence-after-seconds`): it must stay below half the hub's
    /// `--lost-cluster-grace-seconds`, after which the burst's ranks may run elsewhere. While connected, the spoke reports
    /// at least every third of it. Default [`AgentConfig::DEFAULT_FENCE_AFTER`].
    pub fence_after: Duration,
    /// The spoke's labels, announced to the hub (`flux-spoke run --label`): bursts'
    /// `candidates` select spokes by those of them the root granted. Default: none.
    pub labels: std::collections::BTreeMap<String, String>,
    /// How often the spoke measures its cluster's room for the hub's placement (it reports
    /// it when it changes). Default [`AgentConfig::DEFAULT_ROOM_INTERVAL`].
    pub room_interval: Duration,
    /// How the spoke's brokers reach the root cluster's nodes, as its owner declares it
    /// (`flux-spoke run --root-reach`), reported with what the spoke measures: the hub
    /// chooses the path of the bursts it places here from both. Default
    /// [`RootPath::Unspecified`]: nothing declared.
    pub root_reach: RootPath,
}

impl AgentConfig {
    /// Default [`AgentConfig::report_interval`].
    pub const DEFAULT_REPORT_INTERVAL: Duration = Duration::from_secs(30);
    /// Default [`AgentConfig::min_reconnect_delay`].
    pub const DEFAULT_MIN_RECONNECT_DELAY: Duration = Duration::from_millis(200);
    /// Default [`AgentConfig::max_reconnect_delay`].
    pub const DEFAULT_MAX_RECONNECT_DELAY: Duration = Duration::from_secs(4);
    /// Default [`AgentConfig::refused_retry_delay`].
    pub const DEFAULT_REFUSED_RETRY_DELAY: Duration = Duration::from_secs(30);
    /// Default [`AgentConfig::lead_unreachable_after`]: as long as a worker broker waits
    /// for its lead before it starts anyway.
    pub const DEFAULT_LEAD_UNREACHABLE_AFTER: Duration = Duration::from_secs(60);
    /// Default [`AgentConfig::fence_after`]: well below the hub's default grace (300 s)
    /// before it places a lost cluster's bursts elsewhere.
    pub const DEFAULT_FENCE_AFTER: Duration = Duration::from_secs(120);
    /// Default [`AgentConfig::room_interval`].
    pub const DEFAULT_ROOM_INTERVAL: Duration = Duration::from_secs(10);
    /// Default [`AgentConfig::report_debounce`].
    pub const DEFAULT_REPORT_DEBOUNCE: Duration = Duration::from_millis(250);

    /// A configuration for `hub_uri` with `security` and every default: recommended
    /// transport settings, reports every 30 s, reconnects after 200 ms up to 4 s (30 s after
    /// a refusal), this
    /// crate's version. Fails when `security` does not name a spoke (an admin identity or
    /// certificate) or its CA is unreadable.
    pub fn new(
        hub_uri: impl Into<String>,
        security: ClientSecurity,
    ) -> Result<AgentConfig, SpokeIdentityError> {
        let identity = SpokeIdentity::of_client(&security)?;
        Ok(AgentConfig {
            hub_uri: hub_uri.into(),
            security,
            identity,
            settings: TransportSettings::default(),
            report_interval: Self::DEFAULT_REPORT_INTERVAL,
            spoke_version: env!("CARGO_PKG_VERSION").to_string(),
            min_reconnect_delay: Self::DEFAULT_MIN_RECONNECT_DELAY,
            max_reconnect_delay: Self::DEFAULT_MAX_RECONNECT_DELAY,
            refused_retry_delay: Self::DEFAULT_REFUSED_RETRY_DELAY,
            report_debounce: Self::DEFAULT_REPORT_DEBOUNCE,
            namespace: flux_shared::validate::DEFAULT_SPOKE_NAMESPACE.to_string(),
            tls_files: None,
            tls_check_interval: TLS_FILES_CHECK,
            relay_address: None,
            lead_unreachable_after: Self::DEFAULT_LEAD_UNREACHABLE_AFTER,
            fence_after: Self::DEFAULT_FENCE_AFTER,
            labels: std::collections::BTreeMap::new(),
            room_interval: Self::DEFAULT_ROOM_INTERVAL,
            root_reach: RootPath::Unspecified,
        })
    }
}

/// Default [`AgentConfig::tls_check_interval`].
pub const TLS_FILES_CHECK: Duration = Duration::from_secs(10);
