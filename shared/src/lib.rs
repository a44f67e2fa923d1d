//! Shared core of the Flux MiniCluster control plane, in the order a spec goes through it:
//!
//! - the API: [`api`] (types, defaults), [`crd`], [`convert`] (v1alpha1);
//! - validated: [`validate`] (every rule by field, what a burst may ask), [`quantity`];
//! - planned: [`plan`] (every host in rank order: [`rank_order`]), [`elasticity`] (what a
//!   running instance may change);
//! - rendered: [`render`] (the Kubernetes objects), [`broker_toml`], [`resource_set`] (R),
//!   [`scripts`] (the broker pod's scripts, laid out by [`layout`]), [`curve`] (the CURVE
//!   certificate), [`hostlist`] (RFC 29), [`managed_fields`];
//! - federated: [`federation`] (the wire format, assignments, identities and TLS, the
//!   owner's policy, pins).
//!
//! Everything here is pure and synchronous, except the federation's TLS/gRPC plumbing,
//! `ops` (cargo feature `ops`: health, logging, shutdown, the `/metrics` server and the
//! Kubernetes client over HTTP/2 the binaries share) and the command-line flags (cargo
//! feature `cli`).

pub mod api;
pub mod broker_toml;
pub mod convert;
pub mod crd;
pub mod curve;
pub mod elasticity;
pub mod federation;
pub mod hostlist;
pub mod image_volumes;
pub mod layout;
pub mod managed_fields;
#[cfg(feature = "ops")]
pub mod ops;
pub mod plan;
pub mod quantity;
pub mod rank_order;
pub mod render;
pub mod resource_set;
pub mod scripts;
pub mod validate;

/// The repository of the controller image, which ships both binaries (`flux-hub`,
/// `flux-spoke`).
pub const IMAGE_REPOSITORY: &str = "ghcr.io/flux-framework/flux-hub";

/// The controller image of this release, the one place its name is set:
/// [`IMAGE_REPOSITORY`] tagged with the workspace's version. `flux-hub init` and `join`
/// install it unless told otherwise, and the manifests of `deploy/` name it (tests check
/// them against this).
pub const IMAGE: &str = concat!(
    "ghcr.io/flux-framework/flux-hub:",
    env!("CARGO_PKG_VERSION")
);

#[cfg(test)]
mod tests {
    #[test]
    fn the_image_is_the_repository_at_this_version() {
        assert_eq!(
            super::IMAGE,
            format!("{}:{}", super::IMAGE_REPOSITORY, env!("CARGO_PKG_VERSION"))
        );
    }
}
