//! The MiniCluster controller (`flux-hub run`).

pub mod permissions;

use std::net::SocketAddr;

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
    /// How many MiniClusters are reconciled at once.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u16,
}
