//! The MiniCluster controller (`flux-hub run`).

pub mod permissions;

use std::net::SocketAddr;

use anyhow::Context as _;
use flux_shared::federation::tls::ServerSecurity;
use flux_shared::federation::tls_flags::{TLS_FLAG_IDS, TlsFlags};

/// Flags of `flux-hub run`.
#[derive(Clone, Debug, clap::Args)]
pub struct RunOptions {
    /// Watch MiniClusters in this namespace only (default: every namespace).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Take a coordination.k8s.io Lease before reconciling, so several replicas can run.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the leader election Lease (the hub's own namespace).
    #[arg(long, env = "POD_NAMESPACE", default_value = "flux-operator-system")]
    pub lease_namespace: String,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "flux-hub")]
    pub lease_name: String,
    /// Identity of this replica in the Lease (default: the pod name or host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Log JSON lines instead of human-readable text.
    #[arg(long)]
    pub log_json: bool,
    /// How many MiniClusters are reconciled at once. A reconcile mostly waits on the API
    /// server, and one that waits for a free turn waits for a whole reconcile of another
    /// (its creates, Event and status write): at 16, the last 4 of 20 MiniClusters created
    /// together got their Jobs 190 ms after the others. Large specs also take a share of a
    /// byte budget (`spec_budget`), so the hub's memory does not grow with this number.
    #[arg(long, default_value_t = 64)]
    pub concurrency: u16,
    /// Address of the federation gRPC server (spokes and `flux-hub status`); without it
    /// no spoke can connect and bursts stay Unreachable.
    #[arg(long, env = "FLUX_GRPC_ADDR")]
    pub grpc_addr: Option<SocketAddr>,
    /// The hub's server certificate, and the CA that issued spoke and admin certificates.
    #[command(flatten)]
    pub tls: TlsFlags,
    /// LOCAL DEVELOPMENT ONLY: serve gRPC in plaintext; callers name themselves, so anyone
    /// who can reach the port can act as any spoke and read every curve certificate.
    #[arg(long, conflicts_with_all = TLS_FLAG_IDS)]
    pub insecure: bool,
    /// Address burst brokers reach the lead broker's NodePort at, for MiniClusters that do
    /// not set spec.flux.bursting.leadAddress (default: the lead pod's node address).
    #[arg(long, env = "FLUX_LEAD_BROKER_ADDRESS")]
    pub lead_broker_address: Option<String>,
    /// How long a deleted MiniCluster with bursts waits for every spoke to confirm its
    /// burst deleted before the finalizer is released anyway (with a Warning Event).
    #[arg(long, default_value_t = 300)]
    pub burst_deletion_timeout_seconds: u64,
    /// A burst that names candidates moves to the next one when none of its brokers is
    /// ready this long after it was placed (its pods may wait for an image, or for a node
    /// a cluster autoscaler adds).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub placement_timeout_seconds: u64,
    /// A burst that names candidates is placed again, with the same ranks, when its spoke
    /// has not been connected for this long and the lead broker has seen none of its
    /// brokers online for half as long (its cluster is lost); a spoke away while its
    /// brokers serve is not.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(10..=86_400))]
    pub lost_cluster_grace_seconds: u64,
    /// Relayed bytes each spoke may move a second, both ways and all its bursts together,
    /// in MiB (a quarter of a second's at once): the hub decrypts and encrypts each again on
    /// the thread its controller and admin API share (docs/limits.md, "Relayed
    /// connections"). More waits; nothing is refused.
    #[arg(long, default_value_t = crate::server::relay::MIB_PER_SECOND, value_name = "MIB", value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::server::relay::MAX_MIB_PER_SECOND)))]
    pub relay_mib_per_second: u32,
    /// Name each MiniCluster in the relay's metric series (`flux_hub_relay_connections`,
    /// `flux_hub_relay_bytes_total`): a series per MiniCluster that relays, where by
    /// default there is one per spoke.
    #[arg(long)]
    pub metrics_minicluster_labels: bool,
    /// Honour the `flux-framework.org/queue-reporter` annotation: read a bursting
    /// MiniCluster's lead reporter (its queue, and which brokers joined) at the `host:port`
    /// it names (e.g. a `kubectl port-forward`, for a
    /// hub outside the cluster) instead of at its lead broker pod. Off by default: the hub
    /// sends the reporter's bearer token there, wherever the MiniCluster's author points it.
    #[arg(long)]
    pub allow_queue_reporter_annotation: bool,
    /// The ConfigMap holding the spoke certificates `flux-hub join` pins (`NAME` in the
    /// hub's namespace, --lease-namespace, or `NAMESPACE/NAME`). Once it exists, a spoke
    /// is served only with its pinned certificate.
    #[arg(long, default_value = flux_shared::federation::pins::PINS_CONFIGMAP, value_name = "CONFIGMAP")]
    pub spoke_pins: String,
    /// Serve spokes while the `--spoke-pins` ConfigMap does not exist (an install whose
    /// spokes were set up before `flux-hub join` pinned certificates). Without it, a hub
    /// with no pins refuses every spoke; with it, until pins appear (from then on a
    /// missing ConfigMap refuses every spoke again).
    #[arg(long)]
    pub allow_unpinned_spokes: bool,
    /// The ConfigMap of the labels the root's owner granted each spoke (`flux-hub join
    /// --label`; `NAME` in the hub's namespace, --lease-namespace, or `NAMESPACE/NAME`).
    /// Bursts' `candidates` select spokes by these; labels a spoke announces beyond them
    /// are ignored.
    #[arg(long, default_value = flux_shared::federation::spoke_labels::GRANTED_LABELS_CONFIGMAP, value_name = "CONFIGMAP")]
    pub spoke_labels: String,
    /// The ConfigMap listing revoked admin certificates (`flux-hub revoke-admin`; `NAME` in
    /// the hub's namespace, --lease-namespace, or `NAMESPACE/NAME`). A listed certificate is
    /// refused in the handshake and on every call, and its open streams end.
    #[arg(long, default_value = flux_shared::federation::pins::REVOKED_ADMINS_CONFIGMAP, value_name = "CONFIGMAP")]
    pub revoked_admins: String,
    /// Run even though the MiniCluster CRD is not flux-hub's: another controller of
    /// MiniClusters (the reference Go operator) installed it, and may still run.
    #[arg(long)]
    pub take_over: bool,
}

/// The federation gRPC server as configured ([`RunOptions::grpc_security`]).
#[derive(Clone, Debug)]
pub enum GrpcSetup {
    /// Serve now, with this security.
    Serve(ServerSecurity),
    /// Serve with mTLS once these files exist; MiniClusters run in this cluster meanwhile.
    AwaitFiles(flux_shared::federation::tls::TlsFiles),
}

impl RunOptions {
    /// The gRPC server's setup, when the server is enabled; errors name the flag. With
    /// mTLS and certificate files that do not exist yet (a single-cluster install, whose
    /// Secret comes with `flux-hub init --hub-dns/--hub-ip`), the server waits for them;
    /// files that exist must load.
    pub fn grpc_security(&self) -> anyhow::Result<Option<GrpcSetup>> {
        if self.grpc_addr.is_none() {
            if self.insecure || !self.tls.given().is_empty() {
                anyhow::bail!(
                    "--ca, --cert, --key and --insecure configure the gRPC server: set --grpc-addr too"
                );
            }
            return Ok(None);
        }
        if self.insecure {
            return Ok(Some(GrpcSetup::Serve(ServerSecurity::InsecureDevelopment)));
        }
        match self.tls.files() {
            Ok(files) => {
                if [&files.ca, &files.cert, &files.key]
                    .iter()
                    .all(|p| !p.exists())
                {
                    return Ok(Some(GrpcSetup::AwaitFiles(files)));
                }
                let pem = files
                    .read()
                    .context("loading the gRPC server's TLS files")?;
                Ok(Some(GrpcSetup::Serve(ServerSecurity::Mtls(pem))))
            }
            Err(_) => anyhow::bail!(
                "--grpc-addr needs --ca, --cert and --key (from `flux-hub certs`), or --insecure for local development"
            ),
        }
    }

    /// `--spoke-pins` as (namespace, name), checked.
    pub fn spoke_pins(&self) -> anyhow::Result<(String, String)> {
        self.configmap_flag("--spoke-pins", &self.spoke_pins)
    }

    /// `--spoke-labels` as (namespace, name), checked.
    pub fn spoke_labels(&self) -> anyhow::Result<(String, String)> {
        self.configmap_flag("--spoke-labels", &self.spoke_labels)
    }

    /// `--revoked-admins` as (namespace, name), checked.
    pub fn revoked_admins(&self) -> anyhow::Result<(String, String)> {
        self.configmap_flag("--revoked-admins", &self.revoked_admins)
    }

    /// A `NAME` (in --lease-namespace) or `NAMESPACE/NAME` of a ConfigMap, checked.
    fn configmap_flag(&self, flag: &str, value: &str) -> anyhow::Result<(String, String)> {
        flux_shared::validate::configmap_location(value, &self.lease_namespace).with_context(|| {
            format!("{flag} {value:?}: must be a ConfigMap name, or NAMESPACE/NAME")
        })
    }

    /// `--lead-broker-address`, checked.
    pub fn lead_address(&self) -> anyhow::Result<Option<String>> {
        match &self.lead_broker_address {
            Some(a) if !flux_shared::validate::is_host_address(a) => {
                anyhow::bail!("--lead-broker-address {a:?}: must be an IP address or a DNS name")
            }
            other => Ok(other.clone()),
        }
    }
}

pub mod apply;
pub mod autoscaler;
pub mod blockers;
pub mod coexist;
pub mod context;
pub mod desired;
pub mod federate;
mod memory;
pub mod reconcile;
pub mod run;
pub mod spec_budget;
pub mod status;
pub mod watch;
