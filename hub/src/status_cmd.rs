//! `flux-hub status`: the admin client. Shows every MiniCluster the hub manages, each of
//! its bursts with the spoke that runs it, and every spoke, from the hub's `Admin` gRPC
//! service.
//!
//! ```text
//! flux-hub status --hub https://hub.example.org:8443 \
//!     --ca ca.crt --cert admin-ops.crt --key admin-ops.key [-n NS] [--watch] [-o table|json]
//! ```
//!
//! The connection is mutual TLS with an admin client certificate (`flux-hub certs --admin
//! NAME`); the hub's certificate must name `--hub-domain` (default: the URL's host).
//! `--insecure` talks plaintext to a hub started with `--insecure` (development only),
//! naming the admin (`--admin-name`) in a request header.
//!
//! # Table output
//!
//! One row per MiniCluster (BURST `-`: the root instance, with its own phase and
//! brokers), followed by one row per burst:
//!
//! ```text
//! NAMESPACE  MINICLUSTER  BURST      SPOKE  CONNECTED  PHASE    BROKERS  LEAD             VERSION  LAST SEEN  AGE  MESSAGE
//! hpc        bursty       -          -      -          Running  2/2      192.0.2.1:30093  -        -          3h
//! hpc        bursty       burst-gke  gke    yes        Running  4/4      192.0.2.1:30093  3/3      12s        3h
//! ```
//!
//! BROKERS is ready/size, LEAD where burst brokers reach the lead broker (`-` until
//! known), VERSION the spoke's observed / the hub's assigned snapshot version, LAST SEEN
//! the time since the spoke last reported on the burst (`never` before its first report),
//! AGE the time since the MiniCluster was created.
//! A second table lists the spokes: NAME, CONNECTED, LAST SEEN, VERSION
//! (acknowledged/current), ASSIGNMENTS, SPOKE VERSION, CLUSTER (`ok`, or since when and why
//! the spoke cannot reach its own cluster's API server).
//!
//! # JSON output
//!
//! A [`StatusView`]: a stable structure of this command (camelCase field names, documented
//! on the types below), not the wire messages, so that scripts do not break when the
//! protocol grows. `schemaVersion` changes only on incompatible changes; new fields may
//! appear at any time. Timestamps are Unix milliseconds, `null` when never. Without
//! `--watch` the document is pretty-printed; with `--watch` every snapshot is one compact
//! document on its own line (JSON Lines).
//!
//! # Watching
//!
//! `--watch` opens `WatchMiniClusters` and prints again after every change (the hub's
//! heartbeats, which resend the same version, print nothing). In table mode a terminal is
//! cleared and redrawn; otherwise each snapshot follows a separator line with the time,
//! the hub epoch and the version. When the stream breaks (hub restart, network), the
//! command reconnects with backoff; refusals (certificate, permissions) end it.
//!
//! # Exit status
//!
//! 0 on success, 1 on any error, with a message saying what to do: the hub cannot be
//! reached, the certificate was refused (an admin certificate is needed), a PEM file is
//! missing or invalid (naming the file).

use std::fmt::Write as _;
use std::io::{IsTerminal as _, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flux_shared::federation::auth::IdentityInterceptor;
use flux_shared::federation::proto::admin_client::AdminClient;
use flux_shared::federation::proto::{
    self, BurstPhase, ListMiniClustersRequest, ListSpokesRequest, ListSpokesResponse,
    MiniClusterSnapshot, WatchMiniClustersRequest,
};
use flux_shared::federation::tls::{ClientSecurity, TlsError, TlsPem, TransportSettings};
use flux_shared::federation::{Identity, identity_from_pem};
use serde::Serialize;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// Options of `flux-hub status`.
#[derive(clap::Args, Debug, Clone)]
pub struct StatusOptions {
    /// The hub's federation gRPC endpoint: `https://HOST:PORT` (mTLS), or `http://HOST:PORT`
    /// with --insecure. A bare `HOST:PORT` gets the scheme of the security mode.
    #[arg(long, env = "FLUX_HUB", value_name = "URL")]
    pub hub: String,
    /// CA certificate (PEM) that issued the hub's certificate (`ca.crt` of `flux-hub certs`).
    #[arg(long, env = "FLUX_CA", value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// Admin client certificate (PEM), from `flux-hub certs --admin NAME`.
    #[arg(long, env = "FLUX_CERT", value_name = "FILE")]
    pub cert: Option<PathBuf>,
    /// Private key of the admin client certificate (PEM).
    #[arg(long, env = "FLUX_KEY", value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// The DNS name (or IP address) the hub's certificate must carry (default: the host of
    /// --hub).
    #[arg(long, value_name = "DNS")]
    pub hub_domain: Option<String>,
    /// LOCAL DEVELOPMENT ONLY: plaintext, for a hub started with --insecure; the admin
    /// names itself in a request header (--admin-name).
    #[arg(long, conflicts_with_all = ["ca", "cert", "key", "hub_domain"])]
    pub insecure: bool,
    /// With --insecure: the admin name to send (default `admin`).
    #[arg(long, value_name = "NAME", requires = "insecure")]
    pub admin_name: Option<String>,
    /// Only MiniClusters in this namespace (default: every namespace).
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Keep running and print again after every change.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Format,
}

/// Output format of `flux-hub status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned tables: MiniClusters and bursts, then spokes.
    Table,
    /// JSON: MiniClusters with their bursts, and spokes (`schemaVersion` 1); one compact
    /// document per line with --watch.
    Json,
}

/// Admin name sent with --insecure when --admin-name is not given.
pub const DEFAULT_ADMIN_NAME: &str = "admin";

// ---------------------------------------------------------------------------------------
// The JSON structure
// ---------------------------------------------------------------------------------------

/// Version of the [`StatusView`] structure (`schemaVersion`).
pub const SCHEMA_VERSION: u32 = 1;

/// What `flux-hub status -o json` prints: one snapshot of the hub.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StatusView {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Identifies the hub incarnation; changes whenever the hub restarts.
    pub hub_epoch: String,
    /// Version of the MiniCluster snapshot; increases with every change within an epoch.
    pub version: u64,
    /// Every selected MiniCluster, ordered by namespace then name.
    pub mini_clusters: Vec<MiniClusterView>,
    /// Every spoke the hub knows, ordered by name.
    pub spokes: Vec<SpokeView>,
}

/// One MiniCluster.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct MiniClusterView {
    /// Namespace in the hub's cluster.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`.
    pub uid: String,
    /// `metadata.generation` the hub last worked from.
    pub generation: i64,
    /// `status.phase` (Pending, Running, Succeeded, Failed, Invalid), or Deleting.
    pub phase: String,
    /// Brokers of the root (local) Job.
    pub size: i32,
    /// Root brokers that are ready.
    pub brokers_ready: i32,
    /// Where burst brokers reach the lead broker; `null` until known (or without bursts).
    pub lead_endpoint: Option<EndpointView>,
    /// `metadata.creationTimestamp`, Unix milliseconds; `null` if unknown.
    pub created_unix_millis: Option<i64>,
    /// One entry per burst, in spec order.
    pub bursts: Vec<BurstView>,
}

/// A network endpoint.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EndpointView {
    /// IP address or DNS name.
    pub address: String,
    /// TCP port.
    pub port: i32,
}

/// One burst of a MiniCluster, as the hub sees it.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct BurstView {
    /// `<namespace>/<minicluster>/<burst>`.
    pub key: String,
    /// Burst name (Job name and host prefix in the spoke's cluster).
    pub name: String,
    /// The spoke that runs it.
    pub spoke: String,
    /// Whether that spoke holds a Watch stream open.
    pub spoke_connected: bool,
    /// What the spoke last reported: Pending, Running, Succeeded, Failed, Invalid,
    /// Deleting, Deleted; `Unreported` before its first report.
    pub phase: String,
    /// Brokers the burst should run.
    pub size: i32,
    /// Brokers the spoke last reported ready.
    pub brokers_ready: i32,
    /// Snapshot version in which the hub last changed this assignment.
    pub assigned_version: u64,
    /// Version the spoke last reported applying (behind `assignedVersion` while it
    /// catches up).
    pub observed_version: u64,
    /// When the spoke last reported on it, Unix milliseconds; `null` if never.
    pub last_report_unix_millis: Option<i64>,
    /// The spoke's message (empty when none).
    pub message: String,
    /// Conditions the spoke reported (the burst Job's and the spoke's own).
    pub conditions: Vec<ConditionView>,
}

/// A Kubernetes-style condition reported by a spoke.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionView {
    /// Condition type, e.g. `Complete`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// When it last changed status, Unix milliseconds; `null` if unknown.
    pub last_transition_unix_millis: Option<i64>,
}

/// One spoke.
#[derive(Serialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpokeView {
    /// Spoke name (from its client certificate).
    pub name: String,
    /// Whether it holds a Watch stream open.
    pub connected: bool,
    /// When the hub last heard from it, Unix milliseconds; `null` if never since the hub
    /// started.
    pub last_seen_unix_millis: Option<i64>,
    /// Version of the latest snapshot the hub sent it.
    pub current_version: u64,
    /// Version it last acknowledged applying (equal to `currentVersion` when up to date).
    pub acknowledged_version: u64,
    /// Number of assignments it has.
    pub assignments: u32,
    /// Its software version (empty if it did not say).
    pub spoke_version: String,
    /// Since when it reports failing to reach its own cluster's API server, Unix
    /// milliseconds; `null` while it reaches it.
    pub cluster_unreachable_since_unix_millis: Option<i64>,
    /// The error it reported with that (empty while it reaches its cluster).
    pub cluster_error: String,
}

fn millis(value: i64) -> Option<i64> {
    (value > 0).then_some(value)
}

/// The name shown for a burst phase (`Unreported` for UNSPECIFIED).
pub fn burst_phase_name(phase: i32) -> String {
    match BurstPhase::try_from(phase) {
        Ok(BurstPhase::Unspecified) => "Unreported".into(),
        Ok(BurstPhase::Pending) => "Pending".into(),
        Ok(BurstPhase::Running) => "Running".into(),
        Ok(BurstPhase::Succeeded) => "Succeeded".into(),
        Ok(BurstPhase::Failed) => "Failed".into(),
        Ok(BurstPhase::Invalid) => "Invalid".into(),
        Ok(BurstPhase::Deleting) => "Deleting".into(),
        Ok(BurstPhase::Deleted) => "Deleted".into(),
        Err(_) => format!("Unknown({phase})"),
    }
}

/// The JSON structure of one snapshot and spoke list.
pub fn view(snapshot: &MiniClusterSnapshot, spokes: &ListSpokesResponse) -> StatusView {
    StatusView {
        schema_version: SCHEMA_VERSION,
        hub_epoch: snapshot.hub_epoch.clone(),
        version: snapshot.version,
        mini_clusters: snapshot.miniclusters.iter().map(minicluster_view).collect(),
        spokes: spokes
            .spokes
            .iter()
            .map(|s| SpokeView {
                name: s.name.clone(),
                connected: s.connected,
                last_seen_unix_millis: millis(s.last_seen_unix_millis),
                current_version: s.current_version,
                acknowledged_version: s.acknowledged_version,
                assignments: s.assignments,
                spoke_version: s.spoke_version.clone(),
                cluster_unreachable_since_unix_millis: millis(
                    s.cluster_unreachable_since_unix_millis,
                ),
                cluster_error: s.cluster_error.clone(),
            })
            .collect(),
    }
}

fn minicluster_view(mc: &proto::MiniClusterStatus) -> MiniClusterView {
    let reference = mc.minicluster.clone().unwrap_or_default();
    MiniClusterView {
        namespace: reference.namespace,
        name: reference.name,
        uid: reference.uid,
        generation: reference.generation,
        phase: mc.phase.clone(),
        size: mc.size,
        brokers_ready: mc.brokers_ready,
        lead_endpoint: mc.lead_endpoint.as_ref().map(|e| EndpointView {
            address: e.address.clone(),
            port: e.port,
        }),
        created_unix_millis: millis(mc.created_unix_millis),
        bursts: mc
            .bursts
            .iter()
            .map(|b| BurstView {
                key: b.key.clone(),
                name: b.burst_name.clone(),
                spoke: b.spoke.clone(),
                spoke_connected: b.spoke_connected,
                phase: burst_phase_name(b.phase),
                size: b.size,
                brokers_ready: b.brokers_ready,
                assigned_version: b.assigned_version,
                observed_version: b.observed_version,
                last_report_unix_millis: millis(b.last_report_unix_millis),
                message: b.message.clone(),
                conditions: b
                    .conditions
                    .iter()
                    .map(|c| ConditionView {
                        type_: c.r#type.clone(),
                        status: c.status.clone(),
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        last_transition_unix_millis: millis(c.last_transition_unix_millis),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// `-o json`: the [`StatusView`], pretty-printed, or on one line when `compact` (for
/// `--watch`). Ends with a newline.
pub fn json(snapshot: &MiniClusterSnapshot, spokes: &ListSpokesResponse, compact: bool) -> String {
    let view = view(snapshot, spokes);
    let mut text = if compact {
        serde_json::to_string(&view)
    } else {
        serde_json::to_string_pretty(&view)
    }
    .expect("the status view serializes");
    text.push('\n');
    text
}

// ---------------------------------------------------------------------------------------
// The tables
// ---------------------------------------------------------------------------------------

/// How long ago `then_millis` was at `now_millis`: `12s`, `5m`, `3h`, `2d`; `never` for 0
/// (not known); `0s` for a time in the future (clock skew).
pub fn age(then_millis: i64, now_millis: i64) -> String {
    if then_millis <= 0 {
        return "never".into();
    }
    let secs = (now_millis - then_millis).max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 60 * 60 => format!("{}m", s / 60),
        s if s < 48 * 60 * 60 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `address:port`, with brackets around an IPv6 address.
fn endpoint(e: &proto::Endpoint) -> String {
    if e.address.contains(':') {
        format!("[{}]:{}", e.address, e.port)
    } else {
        format!("{}:{}", e.address, e.port)
    }
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// A cell: control characters (newlines in messages) become spaces, empty becomes `-`.
fn cell(text: &str) -> String {
    let clean: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.is_empty() { "-".into() } else { clean }
}

/// Aligns `rows` (the first is the header) in columns two spaces apart; the last column is
/// not padded and no line has trailing spaces.
fn align(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let mut widths = vec![0; columns];
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, c) in row.iter().enumerate() {
            if i + 1 < row.len() {
                let _ = write!(line, "{c:<width$}  ", width = widths[i]);
            } else {
                line.push_str(c);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `-o table`: the MiniClusters table (a root row per MiniCluster, BURST `-`, then a row
/// per burst), a blank line, and the spokes table. `now_millis` is the current time (Unix
/// milliseconds) for the LAST SEEN column.
pub fn table(
    snapshot: &MiniClusterSnapshot,
    spokes: &ListSpokesResponse,
    now_millis: i64,
) -> String {
    let mut out = String::new();
    if snapshot.miniclusters.is_empty() {
        out.push_str("No MiniClusters.\n");
    } else {
        let mut rows = vec![
            [
                "NAMESPACE",
                "MINICLUSTER",
                "BURST",
                "SPOKE",
                "CONNECTED",
                "PHASE",
                "BROKERS",
                "LEAD",
                "VERSION",
                "LAST SEEN",
                "AGE",
                "MESSAGE",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for mc in &snapshot.miniclusters {
            let reference = mc.minicluster.clone().unwrap_or_default();
            let lead = mc.lead_endpoint.as_ref().map_or("-".into(), endpoint);
            // A burst is as old as its MiniCluster, which declares it.
            let created = match mc.created_unix_millis {
                0 => "-".to_string(),
                t => age(t, now_millis),
            };
            rows.push(vec![
                cell(&reference.namespace),
                cell(&reference.name),
                "-".into(),
                "-".into(),
                "-".into(),
                cell(&mc.phase),
                format!("{}/{}", mc.brokers_ready, mc.size),
                lead.clone(),
                "-".into(),
                "-".into(),
                created.clone(),
                String::new(),
            ]);
            for b in &mc.bursts {
                rows.push(vec![
                    cell(&reference.namespace),
                    cell(&reference.name),
                    cell(&b.burst_name),
                    cell(&b.spoke),
                    yes_no(b.spoke_connected),
                    burst_phase_name(b.phase),
                    format!("{}/{}", b.brokers_ready, b.size),
                    lead.clone(),
                    format!("{}/{}", b.observed_version, b.assigned_version),
                    age(b.last_report_unix_millis, now_millis),
                    created.clone(),
                    if b.message.trim().is_empty() {
                        String::new()
                    } else {
                        cell(&b.message)
                    },
                ]);
            }
        }
        out.push_str(&align(&rows));
    }
    out.push('\n');
    if spokes.spokes.is_empty() {
        out.push_str("No spokes.\n");
    } else {
        let mut rows = vec![
            [
                "NAME",
                "CONNECTED",
                "LAST SEEN",
                "VERSION",
                "ASSIGNMENTS",
                "SPOKE VERSION",
                "CLUSTER",
            ]
            .map(String::from)
            .to_vec(),
        ];
        for s in &spokes.spokes {
            let cluster = if s.cluster_unreachable_since_unix_millis > 0 {
                format!(
                    "unreachable for {}: {}",
                    age(s.cluster_unreachable_since_unix_millis, now_millis),
                    s.cluster_error
                )
            } else if s.connected {
                "ok".to_string()
            } else {
                "-".to_string()
            };
            rows.push(vec![
                cell(&s.name),
                yes_no(s.connected),
                age(s.last_seen_unix_millis, now_millis),
                format!("{}/{}", s.acknowledged_version, s.current_version),
                s.assignments.to_string(),
                cell(&s.spoke_version),
                cluster,
            ]);
        }
        out.push_str(&align(&rows));
    }
    out
}

/// UTC time of Unix milliseconds, RFC 3339 to the second (`2025-01-31T12:00:00Z`).
pub fn utc(now_millis: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(now_millis.div_euclid(1000))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// The line before each snapshot in `--watch -o table` when the output is not a terminal.
pub fn watch_separator(snapshot: &MiniClusterSnapshot, now_millis: i64) -> String {
    format!(
        "--- {} hub epoch {} version {} ---\n",
        utc(now_millis),
        cell(&snapshot.hub_epoch),
        snapshot.version
    )
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

// ---------------------------------------------------------------------------------------
// Talking to the hub
// ---------------------------------------------------------------------------------------

/// Why `flux-hub status` failed.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// Bad flags or certificate files; nothing was sent.
    #[error("{0}")]
    Setup(String),
    /// The hub could not be reached (TCP, TLS handshake, or the stream broke).
    #[error("cannot reach the hub at {url}: {cause}")]
    Unreachable {
        /// `--hub`.
        url: String,
        /// What went wrong, with its causes.
        cause: String,
    },
    /// The hub refused the caller (its certificate or its identity).
    #[error("{0}")]
    Refused(String),
    /// The hub answered a call with an error.
    #[error("the hub at {url} failed {call}: {code:?}: {message}")]
    Call {
        /// `--hub`.
        url: String,
        /// The RPC.
        call: &'static str,
        /// gRPC status code.
        code: Code,
        /// The hub's message and causes.
        message: String,
    },
    /// Standard output could not be written.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

impl StatusError {
    /// Whether `--watch` gives up on this error (rather than reconnecting).
    fn is_fatal(&self) -> bool {
        match self {
            StatusError::Setup(_) | StatusError::Refused(_) | StatusError::Output(_) => true,
            StatusError::Unreachable { .. } => false,
            StatusError::Call { code, .. } => !matches!(
                code,
                Code::Unavailable
                    | Code::Unknown
                    | Code::Internal
                    | Code::DeadlineExceeded
                    | Code::Cancelled
                    | Code::Aborted
                    | Code::ResourceExhausted
            ),
        }
    }
}

/// An error and its sources, `: `-separated, without repeating a source its parent
/// already quotes.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// A status's message and the sources of its transport error.
fn status_cause(status: &Status) -> String {
    let mut out = status.message().to_string();
    let mut source = std::error::Error::source(status);
    while let Some(s) = source {
        let text = s.to_string();
        if !text.is_empty() && !out.contains(&text) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

/// TLS alerts a server sends when it refuses the client's certificate.
fn is_certificate_refusal(cause: &str) -> bool {
    [
        "CertificateRequired",
        "UnknownCA",
        "BadCertificate",
        "UnsupportedCertificate",
        "CertificateRevoked",
        "CertificateExpired",
        "CertificateUnknown",
        "AccessDenied",
    ]
    .iter()
    .any(|alert| cause.contains(alert))
        && cause.contains("alert")
}

type Client = AdminClient<InterceptedService<Channel, IdentityInterceptor>>;

/// Everything needed to (re)connect.
struct Target {
    url: String,
    settings: TransportSettings,
    security: ClientSecurity,
    /// Who we are, for messages: the certificate file and its identity, or the admin name.
    caller: String,
    insecure: bool,
    namespace: String,
}

const ADMIN_HINT: &str = "`flux-hub status` needs an admin client certificate issued by the hub's CA: \
     create one with `flux-hub certs --out DIR --admin NAME` and pass it with --ca, --cert and --key";

impl Target {
    fn new(opts: &StatusOptions) -> Result<Target, StatusError> {
        let url = normalize_url(&opts.hub, opts.insecure);
        let namespace = opts.namespace.clone().unwrap_or_default();
        if opts.insecure {
            let name = opts.admin_name.as_deref().unwrap_or(DEFAULT_ADMIN_NAME);
            let identity = Identity::admin(name)
                .map_err(|e| StatusError::Setup(format!("--admin-name {name:?}: {e}")))?;
            return Ok(Target {
                url,
                settings: TransportSettings::default(),
                caller: format!("{identity} (insecure mode)"),
                security: ClientSecurity::InsecureDevelopment(identity),
                insecure: true,
                namespace,
            });
        }
        let (Some(ca), Some(cert), Some(key)) = (&opts.ca, &opts.cert, &opts.key) else {
            let missing: Vec<&str> = [
                ("--ca", opts.ca.is_none()),
                ("--cert", opts.cert.is_none()),
                ("--key", opts.key.is_none()),
            ]
            .into_iter()
            .filter_map(|(flag, missing)| missing.then_some(flag))
            .collect();
            return Err(StatusError::Setup(format!(
                "missing {} (or FLUX_CA, FLUX_CERT, FLUX_KEY): the hub requires mutual TLS. \
                 {ADMIN_HINT}. (--insecure is for a development hub started with --insecure.)",
                missing.join(", ")
            )));
        };
        let tls = TlsPem::from_files(ca, cert, key).map_err(|e| {
            // Name the flag too: the library names only the file.
            let file = match &e {
                TlsError::Read(file, _) | TlsError::Pem(file, _) => file.as_str(),
                _ => "",
            };
            let flag = [
                ("--ca (the CA certificate, PEM)", ca),
                ("--cert (the admin certificate, PEM)", cert),
                ("--key (its private key, PEM)", key),
            ]
            .into_iter()
            .find(|(_, path)| path.display().to_string() == file)
            .map_or(String::new(), |(flag, _)| format!("{flag}: "));
            StatusError::Setup(format!("{flag}{e}"))
        })?;
        let identity = match identity_from_pem(tls.cert_pem()) {
            Ok(identity) => identity.to_string(),
            Err(e) => format!("no federation identity: {e}"),
        };
        let domain = match &opts.hub_domain {
            Some(domain) => domain.clone(),
            None => url_host(&url).ok_or_else(|| {
                StatusError::Setup(format!(
                    "--hub {url}: no host in the URL; name the hub's certificate name with --hub-domain"
                ))
            })?,
        };
        Ok(Target {
            url,
            settings: TransportSettings::default(),
            caller: format!("the certificate {} ({identity})", cert.display()),
            security: ClientSecurity::Mtls { tls, domain },
            insecure: false,
            namespace,
        })
    }

    async fn connect(&self) -> Result<Client, StatusError> {
        let endpoint = self
            .settings
            .endpoint(&self.url, &self.security)
            .map_err(|e| {
                let hint = if self.insecure {
                    "--insecure needs an http:// URL"
                } else {
                    "mTLS needs an https:// URL (--insecure for a plaintext development hub)"
                };
                StatusError::Setup(format!("--hub: {e} ({hint})"))
            })?;
        match endpoint.connect().await {
            Ok(channel) => Ok(
                AdminClient::with_interceptor(channel, self.security.interceptor())
                    .max_decoding_message_size(self.settings.max_decoding_message_size),
            ),
            Err(e) => Err(self.connection_error(chain(&e), false)),
        }
    }

    /// A failure before any answer: a refused client certificate, or unreachable.
    /// `connected`: the TLS handshake had completed (the failure came with a call).
    fn connection_error(&self, cause: String, connected: bool) -> StatusError {
        if is_certificate_refusal(&cause) {
            return StatusError::Refused(format!(
                "the hub at {} refused {} during the TLS handshake ({cause}). {ADMIN_HINT}",
                self.url, self.caller
            ));
        }
        let lower = cause.to_lowercase();
        let hint = match &self.security {
            ClientSecurity::Mtls { domain, .. }
                if lower.contains("notvalidforname") || lower.contains("not valid for name") =>
            {
                format!(
                    " (the hub's certificate does not name {domain:?}: set --hub-domain to a \
                     name it carries)"
                )
            }
            ClientSecurity::Mtls { .. }
                if lower.contains("unknownissuer") || lower.contains("unknown issuer") =>
            {
                " (the hub's certificate is not issued by the CA of --ca)".to_string()
            }
            // With TLS 1.3 the hub checks the client certificate after the client considers
            // the handshake done, and its alert is often lost: the first call just sees the
            // connection close.
            ClientSecurity::Mtls { .. }
                if connected
                    && ["connection closed", "connection reset", "broken pipe"]
                        .iter()
                        .any(|c| lower.contains(c)) =>
            {
                format!(
                    " (the hub closed the connection right after the TLS handshake: it probably \
                     refused {}, which happens when it was not issued by the hub's CA. \
                     {ADMIN_HINT})",
                    self.caller
                )
            }
            _ => String::new(),
        };
        StatusError::Unreachable {
            url: self.url.clone(),
            cause: format!("{cause}{hint}"),
        }
    }

    fn call_error(&self, call: &'static str, status: &Status) -> StatusError {
        let cause = status_cause(status);
        match status.code() {
            Code::Unauthenticated | Code::PermissionDenied => {
                let mode = if self.insecure {
                    " Is the hub running with --insecure? Otherwise use mTLS."
                } else {
                    ""
                };
                StatusError::Refused(format!(
                    "the hub at {} refused {}: {:?}: {}. {ADMIN_HINT}.{mode}",
                    self.url,
                    self.caller,
                    status.code(),
                    status.message()
                ))
            }
            // tonic reports transport failures as Unavailable, Unknown or Cancelled with a
            // source.
            Code::Unavailable | Code::Unknown | Code::Cancelled
                if is_certificate_refusal(&cause)
                    || std::error::Error::source(status).is_some() =>
            {
                self.connection_error(cause, true)
            }
            code => StatusError::Call {
                url: self.url.clone(),
                call,
                code,
                message: cause,
            },
        }
    }

    async fn list(
        &self,
        client: &mut Client,
    ) -> Result<(MiniClusterSnapshot, ListSpokesResponse), StatusError> {
        let snapshot = client
            .list_mini_clusters(self.settings.unary_request(ListMiniClustersRequest {
                namespace: self.namespace.clone(),
            }))
            .await
            .map_err(|s| self.call_error("ListMiniClusters", &s))?
            .into_inner();
        let spokes = self.spokes(client).await?;
        Ok((snapshot, spokes))
    }

    async fn spokes(&self, client: &mut Client) -> Result<ListSpokesResponse, StatusError> {
        Ok(client
            .list_spokes(self.settings.unary_request(ListSpokesRequest {}))
            .await
            .map_err(|s| self.call_error("ListSpokes", &s))?
            .into_inner())
    }
}

/// `--hub` with a scheme: a bare `host:port` gets `https://` (or `http://` when insecure).
fn normalize_url(url: &str, insecure: bool) -> String {
    let url = url.trim();
    if url.contains("://") {
        url.to_string()
    } else if insecure {
        format!("http://{url}")
    } else {
        format!("https://{url}")
    }
}

/// The host of a URL, without IPv6 brackets.
fn url_host(url: &str) -> Option<String> {
    let uri: tonic::transport::Uri = url.parse().ok()?;
    let host = uri.host()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then(|| host.to_string())
}

/// How to print snapshots.
struct Printer {
    format: Format,
    watch: bool,
    terminal: bool,
}

impl Printer {
    fn render(&self, snapshot: &MiniClusterSnapshot, spokes: &ListSpokesResponse) -> String {
        let now = now_millis();
        match (self.format, self.watch) {
            (Format::Json, watch) => json(snapshot, spokes, watch),
            (Format::Table, false) => table(snapshot, spokes, now),
            (Format::Table, true) if self.terminal => format!(
                "\x1b[H\x1b[2J{}{}",
                watch_separator(snapshot, now),
                table(snapshot, spokes, now)
            ),
            (Format::Table, true) => format!(
                "{}{}\n",
                watch_separator(snapshot, now),
                table(snapshot, spokes, now)
            ),
        }
    }
}

/// Runs `flux-hub status`, writing to `out` (standard output; `terminal` when it is one).
pub async fn run(
    opts: &StatusOptions,
    out: &mut dyn Write,
    terminal: bool,
) -> Result<(), StatusError> {
    let target = Target::new(opts)?;
    let printer = Printer {
        format: opts.output,
        watch: opts.watch,
        terminal,
    };
    let mut client = target.connect().await?;
    if !opts.watch {
        let (snapshot, spokes) = target.list(&mut client).await?;
        out.write_all(printer.render(&snapshot, &spokes).as_bytes())?;
        out.flush()?;
        return Ok(());
    }

    const FIRST_RETRY: Duration = Duration::from_secs(1);
    let mut last: Option<(String, u64)> = None;
    let mut printed_any = false;
    let mut backoff = FIRST_RETRY;
    loop {
        let mut printed = false;
        let ended = watch(&target, &mut client, &printer, out, &mut last, &mut printed).await;
        printed_any |= printed;
        let reason = match ended {
            Ok(()) => "the hub ended the stream".to_string(),
            // The first stream must work; after that, keep trying unless refused.
            Err(e) if e.is_fatal() || !printed_any => return Err(e),
            Err(e) => e.to_string(),
        };
        if printed {
            // This stream delivered: start the backoff over.
            backoff = FIRST_RETRY;
        }
        loop {
            eprintln!(
                "flux-hub status: {reason}; reconnecting in {}s",
                backoff.as_secs()
            );
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
            match target.connect().await {
                Ok(c) => {
                    client = c;
                    break;
                }
                Err(e) if e.is_fatal() => return Err(e),
                Err(e) => eprintln!("flux-hub status: {e}"),
            }
        }
    }
}

/// One WatchMiniClusters stream: prints every new snapshot until the stream ends.
async fn watch(
    target: &Target,
    client: &mut Client,
    printer: &Printer,
    out: &mut dyn Write,
    last: &mut Option<(String, u64)>,
    printed: &mut bool,
) -> Result<(), StatusError> {
    let mut stream = client
        .watch_mini_clusters(WatchMiniClustersRequest {
            namespace: target.namespace.clone(),
        })
        .await
        .map_err(|s| target.call_error("WatchMiniClusters", &s))?
        .into_inner();
    loop {
        let snapshot = match stream.message().await {
            Ok(Some(snapshot)) => snapshot,
            Ok(None) => return Ok(()),
            Err(s) => return Err(target.call_error("WatchMiniClusters", &s)),
        };
        let id = (snapshot.hub_epoch.clone(), snapshot.version);
        if last.as_ref() == Some(&id) {
            continue; // a heartbeat
        }
        let spokes = target.spokes(client).await?;
        out.write_all(printer.render(&snapshot, &spokes).as_bytes())?;
        out.flush()?;
        *last = Some(id);
        *printed = true;
    }
}

/// Entry point of `flux-hub status` (from `main`): exit status 0, or 1 after printing the
/// error. A closed standard output (`| head`) ends the command quietly.
pub fn main(opts: &StatusOptions) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("flux-hub status: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let stdout = std::io::stdout();
    let terminal = stdout.is_terminal();
    let mut out = stdout.lock();
    match runtime.block_on(run(opts, &mut out, terminal)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(StatusError::Output(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("flux-hub status: {e}");
            ExitCode::FAILURE
        }
    }
}

// ---------------------------------------------------------------------------------------
// Tests of the pure parts (the command against a fake hub: hub/tests/status_cmd.rs)
// ---------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use flux_shared::federation::proto::{
        BurstStatus, Condition, Endpoint, MiniClusterRef, MiniClusterStatus, SpokeInfo,
    };

    const NOW: i64 = 1_700_000_000_000;

    fn reference(ns: &str, name: &str) -> Option<MiniClusterRef> {
        Some(MiniClusterRef {
            namespace: ns.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            generation: 3,
        })
    }

    fn sample() -> (MiniClusterSnapshot, ListSpokesResponse) {
        let snapshot = MiniClusterSnapshot {
            hub_epoch: "e1".into(),
            version: 7,
            miniclusters: vec![
                MiniClusterStatus {
                    minicluster: reference("hpc", "bursty"),
                    phase: "Running".into(),
                    size: 2,
                    brokers_ready: 2,
                    lead_endpoint: Some(Endpoint {
                        address: "192.0.2.1".into(),
                        port: 30093,
                    }),
                    created_unix_millis: NOW - 3 * 3_600_000,
                    bursts: vec![
                        BurstStatus {
                            key: "hpc/bursty/burst-gke".into(),
                            burst_name: "burst-gke".into(),
                            spoke: "gke".into(),
                            spoke_connected: true,
                            size: 4,
                            brokers_ready: 4,
                            phase: BurstPhase::Running.into(),
                            assigned_version: 3,
                            observed_version: 3,
                            conditions: vec![Condition {
                                r#type: "Complete".into(),
                                status: "False".into(),
                                reason: "".into(),
                                message: "".into(),
                                last_transition_unix_millis: 0,
                            }],
                            message: String::new(),
                            last_report_unix_millis: NOW - 12_000,
                        },
                        BurstStatus {
                            key: "hpc/bursty/burst-kind".into(),
                            burst_name: "burst-kind".into(),
                            spoke: "kind-spoke".into(),
                            spoke_connected: false,
                            size: 2,
                            brokers_ready: 0,
                            phase: 0,
                            assigned_version: 1,
                            observed_version: 0,
                            conditions: vec![],
                            message: "spoke never\nconnected".into(),
                            last_report_unix_millis: 0,
                        },
                    ],
                },
                MiniClusterStatus {
                    minicluster: reference("default", "hello-world"),
                    phase: "Pending".into(),
                    size: 4,
                    brokers_ready: 1,
                    lead_endpoint: None,
                    created_unix_millis: 0,
                    bursts: vec![],
                },
            ],
        };
        let spokes = ListSpokesResponse {
            hub_epoch: "e1".into(),
            spokes: vec![
                SpokeInfo {
                    name: "gke".into(),
                    connected: true,
                    last_seen_unix_millis: NOW - 3_000,
                    current_version: 3,
                    acknowledged_version: 3,
                    assignments: 1,
                    spoke_version: "0.1.0".into(),
                    ..Default::default()
                },
                SpokeInfo {
                    name: "kind-spoke".into(),
                    connected: false,
                    last_seen_unix_millis: 0,
                    current_version: 1,
                    acknowledged_version: 0,
                    assignments: 1,
                    spoke_version: String::new(),
                    ..Default::default()
                },
                SpokeInfo {
                    name: "onprem".into(),
                    connected: true,
                    last_seen_unix_millis: NOW - 1_000,
                    current_version: 2,
                    acknowledged_version: 2,
                    assignments: 0,
                    spoke_version: "0.1.0".into(),
                    cluster_unreachable_since_unix_millis: NOW - 42_000,
                    cluster_error: "connection refused".into(),
                },
            ],
        };
        (snapshot, spokes)
    }

    #[test]
    fn table_has_a_root_row_per_minicluster_and_a_row_per_burst() {
        let (snapshot, spokes) = sample();
        let expected = "\
NAMESPACE  MINICLUSTER  BURST       SPOKE       CONNECTED  PHASE       BROKERS  LEAD             VERSION  LAST SEEN  AGE  MESSAGE
hpc        bursty       -           -           -          Running     2/2      192.0.2.1:30093  -        -          3h
hpc        bursty       burst-gke   gke         yes        Running     4/4      192.0.2.1:30093  3/3      12s        3h
hpc        bursty       burst-kind  kind-spoke  no         Unreported  0/2      192.0.2.1:30093  0/1      never      3h   spoke never connected
default    hello-world  -           -           -          Pending     1/4      -                -        -          -

NAME        CONNECTED  LAST SEEN  VERSION  ASSIGNMENTS  SPOKE VERSION  CLUSTER
gke         yes        3s         3/3      1            0.1.0          ok
kind-spoke  no         never      0/1      1            -              -
onprem      yes        1s         2/2      0            0.1.0          unreachable for 42s: connection refused
";
        assert_eq!(table(&snapshot, &spokes, NOW), expected);
    }

    #[test]
    fn empty_tables_say_so() {
        let out = table(
            &MiniClusterSnapshot::default(),
            &ListSpokesResponse::default(),
            NOW,
        );
        assert_eq!(out, "No MiniClusters.\n\nNo spokes.\n");
    }

    #[test]
    fn columns_align_with_wide_cells() {
        let (mut snapshot, spokes) = sample();
        snapshot.miniclusters.truncate(1);
        snapshot.miniclusters[0].minicluster = reference("a-very-long-namespace", "x");
        snapshot.miniclusters[0].lead_endpoint = Some(Endpoint {
            address: "2001:db8::1".into(),
            port: 30050,
        });
        let out = table(&snapshot, &spokes, NOW);
        let lines: Vec<&str> = out.lines().take(4).collect();
        // Every column starts at the same offset on every line.
        for header in ["MINICLUSTER", "BURST", "LEAD", "VERSION", "MESSAGE"] {
            let at = lines[0].find(header).unwrap();
            // (The root row has no MESSAGE: its line ends before.)
            for line in lines[1..].iter().filter(|l| l.len() > at) {
                assert_eq!(&line[at - 2..at], "  ", "{header} in {line:?}");
                assert_ne!(line.as_bytes()[at], b' ', "{header} in {line:?}");
            }
        }
        assert!(out.contains("[2001:db8::1]:30050"));
        assert!(out.lines().all(|l| l == l.trim_end()), "no trailing spaces");
    }

    #[test]
    fn ages() {
        assert_eq!(age(0, NOW), "never");
        assert_eq!(age(NOW, NOW), "0s");
        assert_eq!(age(NOW + 5_000, NOW), "0s");
        assert_eq!(age(NOW - 59_999, NOW), "59s");
        assert_eq!(age(NOW - 60_000, NOW), "1m");
        assert_eq!(age(NOW - 5 * 60_000 - 30_000, NOW), "5m");
        assert_eq!(age(NOW - 3 * 3_600_000, NOW), "3h");
        assert_eq!(age(NOW - 47 * 3_600_000, NOW), "47h");
        assert_eq!(age(NOW - 3 * 86_400_000, NOW), "3d");
    }

    #[test]
    fn phases_have_names() {
        assert_eq!(burst_phase_name(0), "Unreported");
        assert_eq!(burst_phase_name(BurstPhase::Invalid.into()), "Invalid");
        assert_eq!(burst_phase_name(BurstPhase::Deleted.into()), "Deleted");
        assert_eq!(burst_phase_name(42), "Unknown(42)");
    }

    #[test]
    fn json_is_the_documented_structure() {
        let (snapshot, spokes) = sample();
        let value: serde_json::Value =
            serde_json::from_str(&json(&snapshot, &spokes, false)).unwrap();
        let expected = serde_json::json!({
            "schemaVersion": 1,
            "hubEpoch": "e1",
            "version": 7,
            "miniClusters": [
                {
                    "namespace": "hpc",
                    "name": "bursty",
                    "uid": "uid-bursty",
                    "generation": 3,
                    "phase": "Running",
                    "size": 2,
                    "brokersReady": 2,
                    "leadEndpoint": {"address": "192.0.2.1", "port": 30093},
                    "createdUnixMillis": NOW - 3 * 3_600_000,
                    "bursts": [
                        {
                            "key": "hpc/bursty/burst-gke",
                            "name": "burst-gke",
                            "spoke": "gke",
                            "spokeConnected": true,
                            "phase": "Running",
                            "size": 4,
                            "brokersReady": 4,
                            "assignedVersion": 3,
                            "observedVersion": 3,
                            "lastReportUnixMillis": NOW - 12_000,
                            "message": "",
                            "conditions": [{
                                "type": "Complete",
                                "status": "False",
                                "reason": "",
                                "message": "",
                                "lastTransitionUnixMillis": null
                            }]
                        },
                        {
                            "key": "hpc/bursty/burst-kind",
                            "name": "burst-kind",
                            "spoke": "kind-spoke",
                            "spokeConnected": false,
                            "phase": "Unreported",
                            "size": 2,
                            "brokersReady": 0,
                            "assignedVersion": 1,
                            "observedVersion": 0,
                            "lastReportUnixMillis": null,
                            "message": "spoke never\nconnected",
                            "conditions": []
                        }
                    ]
                },
                {
                    "namespace": "default",
                    "name": "hello-world",
                    "uid": "uid-hello-world",
                    "generation": 3,
                    "phase": "Pending",
                    "size": 4,
                    "brokersReady": 1,
                    "leadEndpoint": null,
                    "createdUnixMillis": null,
                    "bursts": []
                }
            ],
            "spokes": [
                {
                    "name": "gke",
                    "connected": true,
                    "lastSeenUnixMillis": NOW - 3_000,
                    "currentVersion": 3,
                    "acknowledgedVersion": 3,
                    "assignments": 1,
                    "spokeVersion": "0.1.0",
                    "clusterUnreachableSinceUnixMillis": null,
                    "clusterError": ""
                },
                {
                    "name": "kind-spoke",
                    "connected": false,
                    "lastSeenUnixMillis": null,
                    "currentVersion": 1,
                    "acknowledgedVersion": 0,
                    "assignments": 1,
                    "spokeVersion": "",
                    "clusterUnreachableSinceUnixMillis": null,
                    "clusterError": ""
                },
                {
                    "name": "onprem",
                    "connected": true,
                    "lastSeenUnixMillis": NOW - 1_000,
                    "currentVersion": 2,
                    "acknowledgedVersion": 2,
                    "assignments": 0,
                    "spokeVersion": "0.1.0",
                    "clusterUnreachableSinceUnixMillis": NOW - 42_000,
                    "clusterError": "connection refused"
                }
            ]
        });
        assert_eq!(value, expected);
    }

    #[test]
    fn compact_json_is_one_line() {
        let (snapshot, spokes) = sample();
        let text = json(&snapshot, &spokes, true);
        assert_eq!(text.matches('\n').count(), 1);
        assert!(text.ends_with("}\n"));
        assert!(text.starts_with("{\"schemaVersion\":1,\"hubEpoch\":\"e1\",\"version\":7,"));
    }

    #[test]
    fn urls_and_hosts() {
        assert_eq!(normalize_url("hub:8443", false), "https://hub:8443");
        assert_eq!(normalize_url("hub:8443", true), "http://hub:8443");
        assert_eq!(normalize_url(" https://h:1 ", true), "https://h:1");
        assert_eq!(
            url_host("https://hub.example.org:8443").as_deref(),
            Some("hub.example.org")
        );
        assert_eq!(
            url_host("https://127.0.0.1:1").as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(url_host("https://[::1]:8443").as_deref(), Some("::1"));
        assert_eq!(url_host("not a url"), None);
    }

    #[test]
    fn separator_and_time() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(NOW), "2023-11-14T22:13:20Z");
        let (snapshot, _) = sample();
        assert_eq!(
            watch_separator(&snapshot, NOW),
            "--- 2023-11-14T22:13:20Z hub epoch e1 version 7 ---\n"
        );
    }

    #[test]
    fn certificate_refusals_are_recognised() {
        assert!(is_certificate_refusal(
            "transport error: received fatal alert: UnknownCA"
        ));
        assert!(is_certificate_refusal(
            "received fatal alert: CertificateRequired"
        ));
        assert!(!is_certificate_refusal(
            "tcp connect error: Connection refused (os error 111)"
        ));
        assert!(!is_certificate_refusal(
            "invalid peer certificate: UnknownIssuer"
        ));
    }

    #[test]
    fn only_transient_failures_are_retried_by_watch() {
        let unreachable = StatusError::Unreachable {
            url: "u".into(),
            cause: "c".into(),
        };
        assert!(!unreachable.is_fatal());
        assert!(StatusError::Refused("r".into()).is_fatal());
        let call = |code| StatusError::Call {
            url: "u".into(),
            call: "c",
            code,
            message: "m".into(),
        };
        assert!(!call(Code::Unavailable).is_fatal());
        assert!(call(Code::Unimplemented).is_fatal());
        assert!(call(Code::InvalidArgument).is_fatal());
    }
}
