//! The MiniCluster CustomResourceDefinition as installed by users (`crds/`).

use kube::CustomResourceExt;

use crate::api::MiniCluster;

/// Label key and value that mark the CRD as flux-hub's: another installation of the same
/// group and kind (the reference Go operator's) lacks them.
pub const CRD_OWNER_LABEL: (&str, &str) = ("app.kubernetes.io/managed-by", "flux-hub");

/// Field manager of everything `flux-hub init` and `join` apply (the CRD among it): an
/// install from before the CRD carried [`CRD_OWNER_LABEL`] is known by it.
pub const INSTALLER_FIELD_MANAGER: &str = "flux-hub-install";

/// The MiniCluster CRD's name.
pub const CRD_NAME: &str = "miniclusters.flux-framework.org";

/// The CRD, labelled as flux-hub's ([`CRD_OWNER_LABEL`]).
pub fn crd()
-> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition {
    let mut crd = MiniCluster::crd();
    crd.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(CRD_OWNER_LABEL.0.to_string(), CRD_OWNER_LABEL.1.to_string());
    crd
}

/// The CRD as YAML, exactly as checked in under `crds/`.
pub fn crd_yaml() -> Result<String, serde_yaml_ng::Error> {
    serde_yaml_ng::to_string(&crd())
}
