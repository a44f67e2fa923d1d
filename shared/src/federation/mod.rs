//! Hub ↔ spoke federation: the gRPC protocol, certificates and mutual TLS.
//!
//! * [`proto`]: code generated from `proto/flux/federation/v1/federation.proto` (the
//!   `Spoke` and `Admin` services, their clients and servers, every message).
//! * [`pki`]: a small certificate authority (CA, hub server certificate, spoke and admin
//!   client certificates) and the identity scheme carried in client certificates.
//! * [`tls`]: tonic TLS configuration from PEM, and the keepalive, timeout and size limits
//!   every server and client of the federation uses.
//! * [`diagnostics`]: what clients tell people when dialing the hub fails: error chains,
//!   gRPC status text, TLS failure classification, hub URL normalisation.
//! * [`parts`]: a spoke's snapshot sent as messages of bounded size, and put together
//!   again.
//! * [`ownership`]: who made an object in a burst cluster (spoke name, federation
//!   identity) and whether a spoke may touch it.
//! * [`spoke_labels`] and [`room`]: what a spoke says of its cluster for the hub's placement of
//!   bursts that name candidates: its labels, and the room its nodes and policy have.
//! * [`root_reach`]: how a spoke's brokers reach the root's nodes, as its owner declares it
//!   (the hub chooses each burst's path from it and from what the spoke measures).
//! * [`McKey`] and [`BurstKey`]: what a MiniCluster and a burst are named by.
//! * [`protocol`]: which protocol revision each side speaks, declared on every call, and
//!   which peers it serves (one revision either way).
//! * [`auth`]: who is calling — the verified client certificate mapped to an
//!   [`Identity`] — and the per-call checks `require_spoke` / `require_admin`.
//!
//! The server and client runtimes (hub and spoke) live in their binaries; this module holds
//! only what both sides must agree on.

// Every public item here is documented, including the generated code: the .proto comments
// become its docs, and CI (clippy -D warnings) turns a missing one into an error.
#![warn(missing_docs)]

pub mod assignment;
pub mod auth;
pub mod diagnostics;
mod keys;
pub mod ownership;
pub mod parts;
pub mod pins;
pub mod pki;
pub mod policy;
pub mod protocol;
pub mod room;
pub mod root_reach;
pub mod scope;
pub mod spoke_labels;
pub mod spoke_rbac;
pub mod tls;
#[cfg(feature = "cli")]
pub mod tls_flags;

pub use auth::{Authenticator, require_admin, require_spoke};
pub use keys::{BurstKey, BurstKeyError, McKey};
pub use pki::{Identity, IdentityError, identity_from_der, identity_from_pem};

/// Code generated from `proto/flux/federation/v1/federation.proto` (package
/// `flux.federation.v1`): messages, `spoke_client` / `spoke_server`, `admin_client` /
/// `admin_server`.
pub mod proto {
    tonic::include_proto!("flux.federation.v1");

    /// The encoded `FileDescriptorSet` of the protocol, for gRPC server reflection
    /// (`tonic-reflection`'s `register_encoded_file_descriptor_set`).
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("federation_descriptor");
}

/// The metadata key of a `Spoke.Relay` call that names the burst (its assignment key).
pub const RELAY_KEY: &str = "flux-relay-key";

/// The most bytes in one `RelayFrame`, either way.
pub const RELAY_MAX_FRAME: usize = 64 * 1024;

/// Relayed connections a burst may hold beyond one per declared host: a broker that
/// reconnects while its old connection is not seen closed yet.
pub const RELAY_SLACK: usize = 2;

/// The type of the condition a spoke reports on each running burst: whether its brokers'
/// lead broker answers from the burst's cluster (`True`; `False` with reason
/// `LeadUnreachable` and what was tried).
pub const LEAD_REACHABLE: &str = "LeadReachable";

/// The reason of a [`LEAD_REACHABLE`] condition that is false, and of a burst's status then.
pub const LEAD_UNREACHABLE: &str = "LeadUnreachable";

/// The stable key of one burst of one MiniCluster as sent on the wire
/// (`Assignment.key`): [`BurstKey`]'s `<namespace>/<name>/<burst>`.
pub fn assignment_key(namespace: &str, name: &str, burst: &str) -> String {
    BurstKey::new(namespace, name, burst).to_string()
}

impl From<&crate::plan::Endpoint> for proto::Endpoint {
    fn from(e: &crate::plan::Endpoint) -> Self {
        proto::Endpoint {
            address: e.address.clone(),
            port: e.port,
        }
    }
}

impl From<&proto::Endpoint> for crate::plan::Endpoint {
    fn from(e: &proto::Endpoint) -> Self {
        crate::plan::Endpoint {
            address: e.address.clone(),
            port: e.port,
        }
    }
}
