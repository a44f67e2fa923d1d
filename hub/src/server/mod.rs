//! The federation's gRPC server: the `Spoke` and `Admin` services over what the registry
//! serves ([`crate::federation::served::Served`]), the TLS it terminates and the bounds on
//! connections, handshakes and reports, the relay that carries relayed bursts' broker
//! connections to their lead, and the root's ConfigMaps it reads (spoke pins, granted
//! labels, revoked admins). It decides nothing about bursts: that is
//! [`crate::federation`]'s, which it depends on and never the other way round.

pub mod connection_limits;
pub mod label_grants;
pub mod pin_store;
pub mod relay;
pub mod report_limits;
pub mod revocations;
pub mod service;
pub mod spoke_events;
pub mod tls_accept;
pub mod watched_data;
