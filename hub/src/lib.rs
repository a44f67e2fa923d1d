//! The hub, laid out by what each part is (`docs/design.md` maps every concern to its
//! file):
//!
//! - `controller`: `flux-hub run`, a reconcile as named stages, each in its folder:
//!   `desired` (validate, plan, render), `apply` (writes, pod labels, orphans),
//!   `federate` (assignments, lead endpoint, finalizer), `status` (status and Events), over
//!   the caches of `watch`; its errors, one variant per stage, in `context`;
//! - `federation`: the gRPC services spokes and admins call (`service`) over what they
//!   serve (`served`, implemented by the `registry`), and who may call (TLS, pins,
//!   revocations, connection limits);
//! - `autoscale`: bursting on demand, decided purely (`decide`) from the queue (`queue`);
//! - `commands`: every one-shot command of `flux-hub`;
//! - `ops`: leader election, metrics, the probe and scrape routes.
//!
//! Data flows one way: a MiniCluster spec to a plan (`flux_shared`), to objects, applied,
//! federated, and to status.

pub mod autoscale;
pub mod commands;
pub mod controller;
pub mod federation;
pub mod ops;
pub mod resize;
pub mod server;
