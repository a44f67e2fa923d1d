//! Helpers of the end-to-end tests: cluster access, one namespace and one hub process per
//! test, polling with deadlines, and the diagnostics printed when a test fails.
//!
//! Environment:
//! - `KUBECONFIG` (required: cluster tests are `#[ignore]`d by default, and fail when asked
//!   for without a reachable cluster);
//! - `FLUX_HUB_BIN`: the `flux-hub` binary to run (default: built in this workspace with
//!   [`flux_e2e::cargo_build`], a no-op when it is up to date, then
//!   `<target>/<profile>/flux-hub`);
//! - `FLUX_HUB_ARGS`: extra arguments for `flux-hub run`, split on whitespace;
//! - `FLUX_E2E_TIMEOUT_SCALE`: multiplies every deadline (e.g. `3` for a slow cluster);
//! - `FLUX_E2E_KEEP_NAMESPACE=1`: keep the namespace of a failed test for inspection;
//! - `RUST_LOG`: passed to the hub (default `info,kube=warn,flux_hub=debug`) and the spoke
//!   (default `info,kube=warn,flux_spoke=debug`).
//!
//! Two-cluster tests (`bursting.rs`) also need:
//! - `SPOKE_KUBECONFIG`: the burst cluster, where a `flux-spoke run` child process applies
//!   what the hub assigns (required, as `KUBECONFIG`);
//! - `SPOKE2_KUBECONFIG`: a second burst cluster, for the test whose bursts run in two
//!   spoke clusters at once (one `flux-spoke run` each); it must be another cluster than
//!   `SPOKE_KUBECONFIG`'s (on kind: a third kind cluster). Required by that test only;
//! - `FLUX_SPOKE_BIN`: the `flux-spoke` binary (default: `cargo build -p flux-spoke`, as for
//!   the hub); `FLUX_SPOKE_ARGS`: extra arguments for every `flux-spoke run`.

// Each test crate (hub.rs, bursting.rs, flux.rs) uses part of these helpers.
#![allow(dead_code)]

pub mod dataplane;

mod cluster_queries;
mod clusters;
mod failure_reports;
mod fake_lead;
mod federated;
mod installed;
mod processes;
mod real_nodes;
mod spoke_sides;
mod test_env;
mod waiting;

// What the tests use, by its name in `support` (each test crate uses part of it).
#[allow(unused_imports)]
pub use cluster_queries::*;
#[allow(unused_imports)]
pub use clusters::*;
#[allow(unused_imports)]
pub use failure_reports::*;
#[allow(unused_imports)]
pub use federated::*;
#[allow(unused_imports)]
pub use installed::*;
#[allow(unused_imports)]
pub use processes::*;
#[allow(unused_imports)]
pub use real_nodes::*;
#[allow(unused_imports)]
pub use spoke_sides::*;
#[allow(unused_imports)]
pub use test_env::*;
#[allow(unused_imports)]
pub use waiting::*;
