//! Two-cluster end-to-end tests: `flux-hub run` (with its federation gRPC server, mTLS)
//! against the root cluster named by `KUBECONFIG`, and `flux-spoke run` against the burst
//! cluster named by `SPOKE_KUBECONFIG`, both as child processes of the test.
//!
//! A bursting MiniCluster applied in the root cluster must end up as a burst Job in the
//! burst cluster, configured to join the root's lead broker through its NodePort; the
//! MiniCluster's status and `flux-hub status` must show it; deleting the MiniCluster must
//! delete the burst (the hub's finalizer waits for the spoke). Restarting the spoke, or
//! losing the hub for a while, must never delete or re-create the burst.
//!
//! The tests assert on what the control planes produce, and that brokers really connect
//! across the clusters: on kind and GKE in the broker pods themselves (`kubectl exec`), on
//! the testbed's hollow nodes (which run no process) with real Flux booted from the objects
//! both controllers wrote (`support/dataplane.rs`). They are ignored unless asked for and
//! fail without both clusters. See README.md.
//!
//! One binary; a module per scenario family in `bursting/`, beside the fixture, steps,
//! checks and reads of the burst cluster they share.

mod support;

#[path = "bursting/admission_refusals.rs"]
mod admission_refusals;
#[path = "bursting/alerting.rs"]
mod alerting;
#[path = "bursting/autoscaled.rs"]
mod autoscaled;
#[path = "bursting/brokers_joined.rs"]
mod brokers_joined;
#[path = "bursting/burst_checks.rs"]
mod burst_checks;
#[path = "bursting/burst_fixture.rs"]
mod burst_fixture;
#[path = "bursting/burst_steps.rs"]
mod burst_steps;
#[path = "bursting/flux_instance.rs"]
mod flux_instance;
#[path = "bursting/join_unjoin.rs"]
mod join_unjoin;
#[path = "bursting/lifecycle.rs"]
mod lifecycle;
#[path = "bursting/name_clashes.rs"]
mod name_clashes;
#[path = "bursting/outages.rs"]
mod outages;
#[path = "bursting/placed_restart.rs"]
mod placed_restart;
#[path = "bursting/resized.rs"]
mod resized;
#[path = "bursting/spoke_links.rs"]
mod spoke_links;
#[path = "bursting/spoke_objects.rs"]
mod spoke_objects;
#[path = "bursting/spoke_policies.rs"]
mod spoke_policies;
