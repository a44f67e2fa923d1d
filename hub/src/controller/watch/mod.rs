//! What the controller knows of the cluster between reconciles: the watches, the caches
//! they feed (decoding only what a reconcile reads), which events wake a reconcile, the
//! echoes of the hub's own writes, and what the last pass left verified.

pub mod broker_pods;
pub mod cache;
pub mod echoes;
pub mod partial_decode;
pub mod stores;
pub mod triggers;
pub(in crate::controller) mod verified;
pub(in crate::controller) mod watches;
