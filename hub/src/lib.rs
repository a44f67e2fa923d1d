//! The hub: MiniCluster controller, operations plumbing and command implementations.

pub mod controller;
pub mod ops;
pub mod render_cmd;
