//! The hub: the MiniCluster controller (`controller`, with the autoscaler's policy in
//! `autoscale` and the spokes' gRPC service in `federation`), its operations plumbing
//! (`ops`), and the one-shot commands of `flux-hub` (`commands`).

pub mod autoscale;
pub mod commands;
pub mod controller;
pub mod federation;
pub mod ops;
