//! The spoke controller: runs the bursts a Flux hub assigns to this cluster.
//!
//! `flux-spoke run` dials the hub's federation endpoint (mutual TLS with a spoke client
//! certificate from `flux-hub certs`; plaintext only with `--insecure`), opens the
//! `Spoke.Watch` stream and, for every snapshot it receives (the full list of this
//! spoke's assignments, level-triggered like xDS "state of the world"):
//!
//! 1. re-plans and renders each assignment's burst role with the shared renderer
//!    (`flux_shared::federation::assignment::realize`), refusing it as
//!    `BURST_PHASE_REFUSED` when it does not render or renders a broker.toml or R other
//!    than the hub's (the same content is not examined again until it changes);
//! 2. creates the target namespace when missing and server-side applies the objects
//!    (field manager `flux-spoke`, forced), skipping content it already applied while
//!    its objects exist;
//! 3. deletes every object it owns (`app.kubernetes.io/managed-by=flux-spoke` plus the
//!    assignment annotation) whose key the snapshot lists neither as an assignment nor
//!    as retained, and reports those keys `BURST_PHASE_DELETED`;
//! 4. sends `Spoke.Report` acknowledging the snapshot (`applied_version`) with the status
//!    of every assignment.
//!
//! A relayed burst (`relay: true`) also gets a listener of the spoke's, which its relay
//! Service points at (an EndpointSlice): each broker connection accepted there is carried
//! to the hub over the spoke's own connection (`Spoke.Relay`), and on to the lead broker.
//!
//! It also watches its Jobs and reports phase (pending, running, succeeded, failed),
//! brokers ready, size and Job conditions whenever they change and every report interval.
//! It reconnects forever with exponential backoff and jitter; a hub outage never deletes
//! anything. Nothing is stored locally: after a restart the spoke finds its objects by
//! their labels and reconciles them to the first snapshot.
//!
//! Operations: `/metrics` (see [`metrics`]), `/healthz`, `/readyz` (ready once the first
//! snapshot is applied) on `--metrics-addr`; JSON (`--log-json`) or text logs on standard
//! error, filtered by `RUST_LOG`; SIGTERM stops it gracefully.
//!
//! ```text
//! flux-spoke run --hub https://hub.example.org:8443 --name gke \
//!     --ca ca.crt --cert spoke-gke.crt --key spoke-gke.key
//! ```
//!
//! Modules, in the order a burst goes through them: [`agent`] (the connect/watch/report
//! loop, configured by [`agent_config`]), [`admit`] (pure decisions: each assignment
//! checked, planned and admitted by the owner's policy, then rendered), [`apply`] (the
//! `Applier`: the snapshot applied as named steps, each failing with an `ApplyError` of
//! its name), [`burst_status`] (each burst's phase and conditions, pure) and [`report`]
//! (the `Reporter`: what the hub is told), `relay_listeners` (a relayed burst's listener,
//! whose connections go to the hub over the spoke's own connection), `lead_reach`
//! (whether each burst's lead broker answers from this cluster, and how the spoke reaches
//! the root as its probes measure it), `fence` (a direct burst's Job deleted by the spoke
//! when neither the hub nor its lead broker was heard for too long), [`cluster`] (the Kubernetes reads and
//! writes behind a trait, and their real implementation) and [`metrics`]. Tests and benches also get `testing` (an in-memory
//! cluster and sample assignments), which only exists with the cargo feature `testing`:
//! the spoke's own tests enable it through a dev-dependency on this crate, so the binary
//! never contains it.

#![warn(missing_docs)]

pub mod admit;
pub mod agent;
pub mod agent_config;
mod apply;
pub mod burst_status;
pub mod cluster;
mod fence;
mod lead_reach;
pub mod metrics;
mod relay_listeners;
mod report;
mod state;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

pub use agent::Agent;
pub use agent_config::AgentConfig;
pub use cluster::{Cluster, ClusterError, KubeCluster, OwnedObject};
pub use metrics::Metrics;
pub use state::AppliedSnapshot;
