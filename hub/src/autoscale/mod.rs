//! Bursting on demand (`spec.flux.bursting.autoscale`): the lead broker's queue reporter
//! is read ([`queue`]), a pure policy decides the bursts' sizes ([`decide`]), and the
//! controller's autoscaler patches the MiniCluster's spec with them.

pub mod decide;
pub mod queue;
