//! The hub: MiniCluster controller, operations plumbing and command implementations.

pub mod admin_client;
pub mod admin_context;
pub mod autoscale;
pub mod burst_cmd;
pub mod certs_cmd;
pub mod cli;
pub mod coexist;
pub mod controller;
pub mod convert_cmd;
pub mod federation;
pub mod init_cmd;
pub mod install;
pub mod join_cmd;
pub mod ops;
pub mod render_cmd;
pub mod status_cmd;
pub mod unjoin_cmd;
