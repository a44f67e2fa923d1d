//! The MiniCluster CustomResourceDefinition as installed by users (`crds/`).

use kube::CustomResourceExt;

use crate::api::MiniCluster;

/// The CRD as YAML, exactly as checked in under `crds/`.
pub fn crd_yaml() -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(&MiniCluster::crd())
}
