//! The reconciler against kube's mock service: every request it makes is recorded and
//! answered like an API server would; the tests assert on the exact writes.
//!
//! One binary, a module per concern: the harness ([`mock_api`]) and fixtures several use,
//! then the scenarios.

#[path = "reconcile_mock/api_refusals.rs"]
mod api_refusals;
#[path = "reconcile_mock/autoscaling.rs"]
mod autoscaling;
#[path = "reconcile_mock/burst_assignment.rs"]
mod burst_assignment;
#[path = "reconcile_mock/burst_deletion.rs"]
mod burst_deletion;
#[path = "reconcile_mock/burst_paths.rs"]
mod burst_paths;
#[path = "reconcile_mock/candidate_bursts.rs"]
mod candidate_bursts;
#[path = "reconcile_mock/first_apply.rs"]
mod first_apply;
#[path = "reconcile_mock/fixtures.rs"]
mod fixtures;
#[path = "reconcile_mock/foreign_objects.rs"]
mod foreign_objects;
#[path = "reconcile_mock/hub_pod_label.rs"]
mod hub_pod_label;
#[path = "reconcile_mock/installer.rs"]
mod installer;
#[path = "reconcile_mock/lost_clusters.rs"]
mod lost_clusters;
#[path = "reconcile_mock/mock_api.rs"]
mod mock_api;
#[path = "reconcile_mock/owned_objects.rs"]
mod owned_objects;
#[path = "reconcile_mock/unsafe_bursts.rs"]
mod unsafe_bursts;
