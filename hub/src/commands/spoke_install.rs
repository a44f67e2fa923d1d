//! What an install left in a burst cluster (`join`, `unjoin`): the installed spoke's
//! settings and policy, and the per-namespace RBAC an earlier `join` granted.

use anyhow::Context as _;
use flux_shared::federation::policy::{POLICY_CONFIGMAP, SpokePolicy};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::commands::install::{self, InstalledSpoke, SPOKE_CONFIG, SPOKE_NAMESPACE};

/// The spoke installed in the burst cluster `client` talks to, if any (its settings
/// ConfigMap).
pub async fn installed_spoke(client: &kube::Client) -> anyhow::Result<Option<InstalledSpoke>> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), SPOKE_NAMESPACE);
    let found = config_maps
        .get_opt(SPOKE_CONFIG)
        .await
        .with_context(|| format!("reading ConfigMap {SPOKE_NAMESPACE}/{SPOKE_CONFIG}"))?;
    Ok(found.map(|cm| InstalledSpoke::from_config(&cm.data.unwrap_or_default())))
}

/// The policy installed in the burst cluster, if any; an installed policy that does not
/// check is an error (join would derive the spoke's RBAC from it).
pub async fn installed_policy(client: &kube::Client) -> anyhow::Result<Option<SpokePolicy>> {
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), SPOKE_NAMESPACE);
    let Some(cm) = config_maps
        .get_opt(POLICY_CONFIGMAP)
        .await
        .with_context(|| format!("reading ConfigMap {SPOKE_NAMESPACE}/{POLICY_CONFIGMAP}"))?
    else {
        return Ok(None);
    };
    let text = cm
        .data
        .and_then(|mut d| d.remove(flux_shared::federation::policy::POLICY_KEY))
        .unwrap_or_default();
    SpokePolicy::parse(&text).map(Some).map_err(|e| {
        anyhow::anyhow!(
            "the installed policy (ConfigMap {SPOKE_NAMESPACE}/{POLICY_CONFIGMAP}) is not valid: {e}; fix it, or write a new one with --policy FILE or --allow-namespace"
        )
    })
}

/// Deletes the spoke's per-namespace Roles and RoleBindings outside `keep` (all of them
/// when `keep` is `None`): what an earlier `join` granted and the policy no longer names.
pub async fn delete_namespace_rbac(
    client: &kube::Client,
    keep: Option<&std::collections::BTreeSet<String>>,
) -> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use kube::api::{DeleteParams, ListParams};
    let selector = format!("{}=namespace", install::SPOKE_ROLE_LABEL);
    let roles = Api::<Role>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&selector))
        .await
        .context("listing the spoke's Roles")?;
    for role in roles.items {
        let (Some(ns), Some(name)) = (role.metadata.namespace, role.metadata.name) else {
            continue;
        };
        if name != install::SPOKE_RBAC_NAME || keep.is_some_and(|k| k.contains(&ns)) {
            continue;
        }
        for (kind, result) in [
            (
                "RoleBinding",
                Api::<RoleBinding>::namespaced(client.clone(), &ns)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(drop),
            ),
            (
                "Role",
                Api::<Role>::namespaced(client.clone(), &ns)
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(drop),
            ),
        ] {
            match result {
                Ok(()) => eprintln!("{kind} {ns}/{name}: deleted (no longer granted)"),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("deleting {kind} {ns}/{name}")),
            }
        }
    }
    Ok(())
}
