//! From a MiniCluster's spec to what should exist: the spec planned at its effective size
//! (`validate`), the elasticity rules that fix its hosts (`sizing`), and the rendered
//! objects with their CURVE certificate (`desired`).

pub mod desired;
pub mod sizing;
pub(in crate::controller) mod validate;
