//! What `flux-hub init` and `flux-hub join` install: the manifests of `deploy/` (the hub)
//! and `deploy/spoke/` (a spoke), compiled in from those very files (one source: a test
//! fails if a kustomization lists a file this module does not apply), plus the TLS Secret,
//! with the image and the spoke's settings filled in. Pure: objects in, objects out; the
//! commands apply them.

use std::collections::{BTreeMap, BTreeSet};

use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

/// Field manager of everything the installer applies.
pub const FIELD_MANAGER: &str = "flux-hub-install";

/// Namespace of the hub's install.
pub const HUB_NAMESPACE: &str = "flux-operator-system";
/// Namespace of a spoke's install.
pub const SPOKE_NAMESPACE: &str = "flux-spoke-system";
/// The hub's TLS Secret (`ca.crt`, `tls.crt`, `tls.key`).
pub const HUB_TLS_SECRET: &str = "flux-hub-tls";
/// A spoke's TLS Secret.
pub const SPOKE_TLS_SECRET: &str = "flux-spoke-tls";
/// The hub's federation Service (gRPC, port 8443).
pub const FEDERATION_SERVICE: &str = "flux-hub-federation";
/// The port spokes dial.
pub const FEDERATION_PORT: u16 = 8443;

/// The hub's manifests, in `deploy/kustomization.yaml` order (the CRD from `crds/`).
pub const HUB_MANIFESTS: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../../deploy/namespace.yaml"),
    ),
    (
        "../crds",
        include_str!("../../../crds/miniclusters.flux-framework.org.yaml"),
    ),
    ("rbac.yaml", include_str!("../../../deploy/rbac.yaml")),
    (
        "deployment.yaml",
        include_str!("../../../deploy/deployment.yaml"),
    ),
    ("pdb.yaml", include_str!("../../../deploy/pdb.yaml")),
    ("service.yaml", include_str!("../../../deploy/service.yaml")),
    (
        "federation-service.yaml",
        include_str!("../../../deploy/federation-service.yaml"),
    ),
];

/// A spoke's manifests, in `deploy/spoke/kustomization.yaml` order.
pub const SPOKE_MANIFESTS: &[(&str, &str)] = &[
    (
        "namespace.yaml",
        include_str!("../../../deploy/spoke/namespace.yaml"),
    ),
    ("rbac.yaml", include_str!("../../../deploy/spoke/rbac.yaml")),
    (
        "config.yaml",
        include_str!("../../../deploy/spoke/config.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../../../deploy/spoke/deployment.yaml"),
    ),
];

/// Why the manifests could not be made into objects (a broken build, not user input).
#[derive(Debug, thiserror::Error)]
#[error("manifest {file}: {reason}")]
pub struct ManifestError {
    /// The file.
    pub file: String,
    /// What is wrong.
    pub reason: String,
}

/// Every document of `manifests`, in order.
pub fn documents(manifests: &[(&str, &str)]) -> Result<Vec<Value>, ManifestError> {
    let mut out = Vec::new();
    for (file, text) in manifests {
        for doc in serde_yaml_ng::Deserializer::from_str(text) {
            let value: Value = serde::Deserialize::deserialize(doc).map_err(|e| ManifestError {
                file: file.to_string(),
                reason: e.to_string(),
            })?;
            if value.is_object() {
                out.push(value);
            }
        }
    }
    Ok(out)
}

/// The hub's objects: the `deploy/` manifests with `image` (when given) and, for a hub
/// that federates (`tls`), the TLS Secret holding the CA and the hub's certificate and key.
/// Without it the hub runs MiniClusters in its own cluster only.
pub fn hub_objects(image: Option<&str>, tls: Option<&HubTls>) -> Result<Vec<Value>, ManifestError> {
    let mut objects = documents(HUB_MANIFESTS)?;
    if let Some(image) = image {
        set_image(&mut objects, "flux-hub", image);
    }
    if let Some(tls) = tls {
        stamp_certificate(&mut objects, "flux-hub", &tls.cert_pem);
        objects.push(tls_secret(
            HUB_TLS_SECRET,
            HUB_NAMESPACE,
            "flux-hub",
            &tls.ca_pem,
            &tls.cert_pem,
            &tls.key_pem,
        ));
    }
    Ok(objects)
}

/// The hub's TLS material: the federation CA and the hub's certificate and key (PEM).
#[derive(Clone, Debug)]
pub struct HubTls {
    /// The CA certificate.
    pub ca_pem: String,
    /// The hub's certificate.
    pub cert_pem: String,
    /// The hub's key.
    pub key_pem: String,
}

/// Where a spoke dials its hub, and under which name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpokeSettings {
    /// The spoke's name (its certificate's identity, the bursts' `cluster`).
    pub name: String,
    /// The hub's URL (`https://HOST:PORT`).
    pub hub_url: String,
    /// The name (or IP) in the hub's certificate.
    pub hub_domain: String,
}

/// Where a spoke's RBAC lets it act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpokeRbac {
    /// Every namespace: the ClusterRole of `deploy/spoke/rbac.yaml`
    /// ([`flux_shared::federation::spoke_rbac::REQUIRED`]); the spoke creates the namespaces it needs.
    ClusterWide,
    /// These namespaces only: a Role in each ([`flux_shared::federation::spoke_rbac::NAMESPACED_REQUIRED`]),
    /// and a ClusterRole that reads just these namespaces by name
    /// ([`flux_shared::federation::spoke_rbac::NAMESPACE_READ`]); the spoke runs with `--namespaces`.
    Namespaces(BTreeSet<String>),
}

/// Name of every RBAC object of the spoke's permissions (ClusterRole, ClusterRoleBinding,
/// and the per-namespace Roles and RoleBindings).
pub const SPOKE_RBAC_NAME: &str = "flux-spoke";

/// Label of the Roles and RoleBindings `join` makes in burst namespaces (so that a later
/// `join` or `unjoin` finds them, and nothing else, to delete).
pub const SPOKE_ROLE_LABEL: &str = "flux-framework.org/spoke-rbac";

fn rbac_rules(permissions: &[flux_shared::federation::spoke_rbac::Permission]) -> Value {
    permissions
        .iter()
        .map(|(group, resource, verbs)| {
            json!({"apiGroups": [group], "resources": [resource], "verbs": verbs})
        })
        .collect()
}

fn spoke_labels(extra: Option<(&str, &str)>) -> Value {
    let mut labels = json!({
        "app.kubernetes.io/name": "flux-spoke",
        "app.kubernetes.io/part-of": "flux-operator",
    });
    if let Some((k, v)) = extra {
        labels[k] = json!(v);
    }
    labels
}

/// The Role and RoleBinding that let the spoke act in `namespace`.
pub fn spoke_namespace_rbac(namespace: &str) -> [Value; 2] {
    let labels = spoke_labels(Some((SPOKE_ROLE_LABEL, "namespace")));
    [
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": SPOKE_RBAC_NAME, "namespace": namespace, "labels": labels},
            "rules": rbac_rules(flux_shared::federation::spoke_rbac::NAMESPACED_REQUIRED),
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": SPOKE_RBAC_NAME, "namespace": namespace, "labels": labels},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SPOKE_RBAC_NAME},
            "subjects": [{"kind": "ServiceAccount", "name": "flux-spoke", "namespace": SPOKE_NAMESPACE}],
        }),
    ]
}

/// Narrows the spoke's manifests to `namespaces`: the ClusterRole reads those namespaces
/// by name and nothing else, a Role and RoleBinding follow the ClusterRoleBinding for each,
/// and the spoke runs with `--namespaces`.
fn narrow_to(objects: &mut Vec<Value>, namespaces: &BTreeSet<String>) {
    let (group, resource, verbs) = flux_shared::federation::spoke_rbac::NAMESPACE_READ;
    // An empty resourceNames would grant every namespace: no namespace, no rule.
    let rules: Vec<Value> = if namespaces.is_empty() {
        vec![]
    } else {
        vec![
            json!({"apiGroups": [group], "resources": [resource], "verbs": verbs,
                    "resourceNames": namespaces}),
        ]
    };
    let mut at = objects.len();
    for (i, o) in objects.iter_mut().enumerate() {
        let name = o["metadata"]["name"].as_str() == Some(SPOKE_RBAC_NAME);
        if name && o["kind"] == "ClusterRole" {
            o["rules"] = json!(rules);
        }
        if name && o["kind"] == "ClusterRoleBinding" {
            at = i + 1;
        }
        if o["kind"] == "Deployment" && o["metadata"]["name"] == "flux-spoke" {
            let list = namespaces.iter().cloned().collect::<Vec<_>>().join(",");
            if let Some(containers) = o["spec"]["template"]["spec"]["containers"].as_array_mut() {
                for c in containers {
                    if let Some(args) = c["args"].as_array_mut() {
                        args.push(json!(format!("--namespaces={list}")));
                    }
                }
            }
        }
    }
    let roles: Vec<Value> = namespaces
        .iter()
        .flat_map(|ns| spoke_namespace_rbac(ns))
        .collect();
    objects.splice(at..at, roles);
}

/// A spoke's objects: the `deploy/spoke/` manifests with its settings, its `rbac` and
/// `image` (when given), and the TLS Secret holding the CA and the spoke's certificate and
/// key. The namespaces of [`SpokeRbac::Namespaces`] must exist before these are applied.
pub fn spoke_objects(
    settings: &SpokeSettings,
    image: Option<&str>,
    rbac: &SpokeRbac,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<Vec<Value>, ManifestError> {
    let mut objects = documents(SPOKE_MANIFESTS)?;
    if let SpokeRbac::Namespaces(namespaces) = rbac {
        narrow_to(&mut objects, namespaces);
    }
    for o in &mut objects {
        if o["kind"] == "ConfigMap" && o["metadata"]["name"] == "flux-spoke-config" {
            o["data"] = json!({
                "hub-url": settings.hub_url,
                "hub-domain": settings.hub_domain,
                "spoke-name": settings.name,
            });
        }
    }
    if let Some(image) = image {
        set_image(&mut objects, "flux-spoke", image);
    }
    stamp_certificate(&mut objects, "flux-spoke", cert_pem);
    objects.push(tls_secret(
        SPOKE_TLS_SECRET,
        SPOKE_NAMESPACE,
        "flux-spoke",
        ca_pem,
        cert_pem,
        key_pem,
    ));
    Ok(objects)
}

/// The ConfigMap holding the spoke's `policy` ([`flux_shared::federation::policy`]), in the
/// spoke's namespace, as `join --policy` / `--allow-namespace` writes it.
pub fn spoke_policy_object(policy: &flux_shared::federation::policy::SpokePolicy) -> Value {
    use flux_shared::federation::policy::{POLICY_CONFIGMAP, POLICY_KEY};
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": POLICY_CONFIGMAP,
            "namespace": SPOKE_NAMESPACE,
            "labels": {
                "app.kubernetes.io/name": "flux-spoke",
                "app.kubernetes.io/part-of": "flux-operator",
            },
        },
        "data": {POLICY_KEY: policy.to_yaml()},
    })
}

/// The spoke's settings ConfigMap (hub URL, hub domain, spoke name).
pub const SPOKE_CONFIG: &str = "flux-spoke-config";

/// What a burst cluster's spoke install says it is: the settings in its
/// [`SPOKE_CONFIG`] ConfigMap (what the running spoke was started with).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InstalledSpoke {
    /// Its spoke name, when set.
    pub name: Option<String>,
    /// Its hub URL, when set.
    pub hub_url: Option<String>,
}

impl InstalledSpoke {
    /// The install described by the data of its settings ConfigMap.
    pub fn from_config(data: &BTreeMap<String, String>) -> InstalledSpoke {
        let get = |key: &str| data.get(key).filter(|v| !v.is_empty()).cloned();
        InstalledSpoke {
            name: get("spoke-name"),
            hub_url: get("hub-url"),
        }
    }
}

/// What `join` with `wanted` would change of the spoke installed as `installed`, one line
/// per setting (its name, its hub), naming the installed and the new value. Empty: the
/// same spoke of the same hub, which `join` may re-apply. Changing either renames a
/// running spoke or moves it to another hub, which a `join` aimed at the wrong cluster
/// must not do silently.
pub fn join_changes(installed: &InstalledSpoke, wanted: &SpokeSettings) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(name) = &installed.name
        && *name != wanted.name
    {
        out.push(format!(
            "its spoke name is {name:?}, join would make it {:?}",
            wanted.name
        ));
    }
    if let Some(url) = &installed.hub_url
        && *url != wanted.hub_url
    {
        out.push(format!(
            "its hub is {url}, join would make it {}",
            wanted.hub_url
        ));
    }
    out
}

/// Why `unjoin NAME` must not remove the install described by `installed` (`None`: no
/// settings ConfigMap): it is not spoke `name`'s. `None` when it may.
pub fn unjoin_mismatch(installed: Option<&InstalledSpoke>, name: &str) -> Option<String> {
    match installed.map(|i| i.name.as_deref()) {
        Some(Some(installed)) if installed != name => Some(format!(
            "this cluster runs spoke {installed:?}, not {name:?}"
        )),
        Some(None) => Some(format!(
            "this cluster's spoke install ({SPOKE_NAMESPACE}/{SPOKE_CONFIG}) names no spoke, so it cannot be told to be {name:?}'s"
        )),
        _ => None,
    }
}

/// Pod template annotation holding the SHA-256 of the certificate the pods run with: a new
/// certificate (`join --rotate`) rolls the Deployment, the same one changes nothing.
pub const CERTIFICATE_ANNOTATION: &str = "flux-framework.org/certificate-sha256";

/// Stamps Deployment `name`'s pod template with the digest of `cert_pem`.
fn stamp_certificate(objects: &mut [Value], name: &str, cert_pem: &str) {
    let digest: String = ring::digest::digest(&ring::digest::SHA256, cert_pem.as_bytes())
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    for o in objects.iter_mut() {
        if o["kind"] == "Deployment" && o["metadata"]["name"] == name {
            o["spec"]["template"]["metadata"]["annotations"][CERTIFICATE_ANNOTATION] =
                json!(digest);
        }
    }
}

/// Sets the image of every container of Deployment `name`.
fn set_image(objects: &mut [Value], name: &str, image: &str) {
    for o in objects.iter_mut() {
        if o["kind"] == "Deployment"
            && o["metadata"]["name"] == name
            && let Some(containers) = o["spec"]["template"]["spec"]["containers"].as_array_mut()
        {
            for c in containers {
                c["image"] = json!(image);
            }
        }
    }
}

fn tls_secret(
    name: &str,
    namespace: &str,
    app: &str,
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/part-of": "flux-operator"},
        },
        "type": "Opaque",
        "stringData": {"ca.crt": ca_pem, "tls.crt": cert_pem, "tls.key": key_pem},
    })
}

/// The API resource of an object of the installer's kinds, and whether it is namespaced.
/// `None` for a kind the installer does not know (a manifest added without teaching it).
pub fn resource_of(object: &Value) -> Option<(ApiResource, bool)> {
    let api_version = object["apiVersion"].as_str()?;
    let kind = object["kind"].as_str()?;
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let known: BTreeMap<&str, (&str, bool)> = BTreeMap::from([
        ("Namespace", ("namespaces", false)),
        (
            "CustomResourceDefinition",
            ("customresourcedefinitions", false),
        ),
        ("ClusterRole", ("clusterroles", false)),
        ("ClusterRoleBinding", ("clusterrolebindings", false)),
        ("ServiceAccount", ("serviceaccounts", true)),
        ("Role", ("roles", true)),
        ("RoleBinding", ("rolebindings", true)),
        ("Deployment", ("deployments", true)),
        ("PodDisruptionBudget", ("poddisruptionbudgets", true)),
        ("Service", ("services", true)),
        ("ConfigMap", ("configmaps", true)),
        ("Secret", ("secrets", true)),
    ]);
    let (plural, namespaced) = known.get(kind)?;
    let gvk = GroupVersionKind::gvk(group, version, kind);
    Some((ApiResource::from_gvk_with_plural(&gvk, plural), *namespaced))
}

/// `object` as a dynamic object to apply.
pub fn dynamic(object: &Value) -> Result<DynamicObject, serde_json::Error> {
    serde_json::from_value(object.clone())
}

/// `Kind namespace/name` (or `Kind name`) of an object, for messages.
pub fn describe(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("?");
    let name = object["metadata"]["name"].as_str().unwrap_or("?");
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(name: &str, hub_url: &str) -> SpokeSettings {
        SpokeSettings {
            name: name.into(),
            hub_url: hub_url.into(),
            hub_domain: "hub.example.org".into(),
        }
    }

    fn installed(name: &str, hub_url: &str) -> InstalledSpoke {
        InstalledSpoke::from_config(&BTreeMap::from([
            ("spoke-name".to_string(), name.to_string()),
            ("hub-url".to_string(), hub_url.to_string()),
            ("hub-domain".to_string(), "hub.example.org".to_string()),
        ]))
    }

    #[test]
    fn join_refuses_to_rename_a_spoke_or_move_it_to_another_hub() {
        let a = "https://hub-a.example.org:8443";
        let b = "https://hub-b.example.org:8443";
        assert!(join_changes(&installed("gke", a), &settings("gke", a)).is_empty());
        assert!(join_changes(&InstalledSpoke::default(), &settings("gke", a)).is_empty());
        assert_eq!(
            join_changes(&installed("gke", a), &settings("edge", a)),
            ["its spoke name is \"gke\", join would make it \"edge\""]
        );
        assert_eq!(
            join_changes(&installed("gke", a), &settings("gke", b)),
            [format!("its hub is {a}, join would make it {b}")]
        );
        assert_eq!(
            join_changes(&installed("gke", a), &settings("edge", b)).len(),
            2
        );
        // Empty values are unset, not a name.
        assert_eq!(installed("", ""), InstalledSpoke::default());
    }

    #[test]
    fn unjoin_removes_only_the_spoke_it_names() {
        let a = "https://hub.example.org:8443";
        assert_eq!(unjoin_mismatch(None, "gke"), None);
        assert_eq!(unjoin_mismatch(Some(&installed("gke", a)), "gke"), None);
        assert_eq!(
            unjoin_mismatch(Some(&installed("edge", a)), "gke").as_deref(),
            Some("this cluster runs spoke \"edge\", not \"gke\"")
        );
        let unnamed = unjoin_mismatch(Some(&InstalledSpoke::default()), "gke").unwrap();
        assert!(unnamed.contains("names no spoke"), "{unnamed}");
    }

    /// The files a kustomization lists, in order.
    fn kustomization(text: &str) -> Vec<String> {
        let k: Value = serde_yaml_ng::from_str(text).expect("kustomization");
        k["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .filter_map(|r| r.as_str().map(str::to_string))
            .collect()
    }

    #[test]
    fn the_installer_applies_what_the_kustomizations_list() {
        let hub: Vec<&str> = HUB_MANIFESTS.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            hub,
            kustomization(include_str!("../../../deploy/kustomization.yaml")),
            "deploy/kustomization.yaml and HUB_MANIFESTS must list the same files"
        );
        let spoke: Vec<&str> = SPOKE_MANIFESTS.iter().map(|(f, _)| *f).collect();
        assert_eq!(
            spoke,
            kustomization(include_str!("../../../deploy/spoke/kustomization.yaml")),
            "deploy/spoke/kustomization.yaml and SPOKE_MANIFESTS must list the same files"
        );
    }

    #[test]
    fn every_object_is_of_a_kind_the_installer_knows() {
        let tls = |cert: &str| HubTls {
            ca_pem: "CA".into(),
            cert_pem: cert.into(),
            key_pem: "KEY".into(),
        };
        let hub = hub_objects(Some("img:1"), Some(&tls("CERT"))).expect("hub");
        let single = hub_objects(None, None).expect("hub");
        assert!(
            single.iter().all(|o| o["kind"] != "Secret"),
            "a single-cluster hub has no TLS Secret"
        );
        let settings = SpokeSettings {
            name: "gke".into(),
            hub_url: "https://hub.example.org:8443".into(),
            hub_domain: "hub.example.org".into(),
        };
        let rbac = SpokeRbac::Namespaces(["team".to_string()].into());
        let spoke =
            spoke_objects(&settings, Some("img:2"), &rbac, "CA", "CERT", "KEY").expect("spoke");
        let wide = spoke_objects(
            &settings,
            None,
            &SpokeRbac::ClusterWide,
            "CA",
            "CERT",
            "KEY",
        )
        .expect("spoke");
        for o in hub.iter().chain(&spoke).chain(&wide) {
            let (_, namespaced) = resource_of(o).unwrap_or_else(|| panic!("{}", describe(o)));
            assert_eq!(
                namespaced,
                o["metadata"]["namespace"].is_string(),
                "{}",
                describe(o)
            );
            dynamic(o).expect("a dynamic object");
        }
        let deployment = hub.iter().find(|o| o["kind"] == "Deployment").expect("hub");
        assert_eq!(
            deployment["spec"]["template"]["spec"]["containers"][0]["image"],
            "img:1"
        );
        let config = spoke
            .iter()
            .find(|o| o["kind"] == "ConfigMap")
            .expect("config");
        assert_eq!(config["data"]["spoke-name"], "gke");
        assert_eq!(config["data"]["hub-url"], "https://hub.example.org:8443");
        let stamped = |objects: &[Value], cert: &str| {
            objects
                .iter()
                .find(|o| o["kind"] == "Deployment")
                .map(|d| {
                    d["spec"]["template"]["metadata"]["annotations"][CERTIFICATE_ANNOTATION].clone()
                })
                .unwrap_or_default()
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| panic!("no digest for {cert}"))
        };
        let other = hub_objects(None, Some(&tls("CERT2"))).expect("hub");
        assert_ne!(
            stamped(&hub, "CERT"),
            stamped(&other, "CERT2"),
            "a new certificate rolls the pods"
        );
        let secret = spoke.last().expect("secret");
        assert_eq!(describe(secret), "Secret flux-spoke-system/flux-spoke-tls");
        assert_eq!(secret["stringData"]["tls.key"], "KEY");
    }
}
