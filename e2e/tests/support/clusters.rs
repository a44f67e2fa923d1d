//! The clusters: the client of `KUBECONFIG`, the CRD installed, test namespaces created
//! and deleted, the examples of the repository.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use flux_shared::api::MiniCluster;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::config::KubeConfigOptions;
use kube::runtime::wait::{await_condition, conditions};
use kube::{Client, Config, ResourceExt as _};
use serde_json::{Value, json};

use super::*;

/// Field manager of every server-side apply the tests make.
pub const FIELD_MANAGER: &str = "flux-e2e";

/// Label on every test namespace (`kubectl delete ns -l flux-e2e=true` removes leftovers).
pub const NAMESPACE_LABEL: &str = "flux-e2e";

/// The workspace root (`crds/`, `examples/`).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate lives inside the workspace")
        .to_path_buf()
}

/// A client for the cluster named by `KUBECONFIG`. Cluster tests are `#[ignore]`d by
/// default, so `cargo test` lists them as ignored (never as passed) on machines without a
/// cluster; one that runs (`--include-ignored`, as `scripts/e2e.sh` does) without a cluster,
/// or with one that does not answer, fails.
pub async fn client() -> (Client, Config) {
    if std::env::var_os("KUBECONFIG").is_none_or(|v| v.is_empty()) {
        panic!(
            "KUBECONFIG is not set: this test needs a real cluster (scripts/e2e.sh starts local ones)"
        );
    }
    let config = Config::from_kubeconfig(&KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("KUBECONFIG is set but cannot be loaded: {e}"));
    let client = Client::try_from(config.clone())
        .unwrap_or_else(|e| panic!("cannot build a client from KUBECONFIG: {e}"));
    match client.apiserver_version().await {
        Ok(v) => eprintln!(
            "cluster {} (Kubernetes {})",
            config.cluster_url, v.git_version
        ),
        Err(e) => panic!(
            "KUBECONFIG names {} but its API server does not answer: {e}",
            config.cluster_url
        ),
    }
    (client, config)
}

/// Errors worth retrying: unknown resource right after the CRD was installed, throttling,
/// server errors, transport failures.
pub(super) fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => s.code == 404 || s.code == 429 || s.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

/// Server-side applies `crds/miniclusters.flux-framework.org.yaml` and waits until the
/// CRD is Established.
pub(super) async fn install_crd(client: &Client) -> Result<()> {
    let path = workspace_root().join("crds/miniclusters.flux-framework.org.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let crd: Value =
        serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let name = crd["metadata"]["name"]
        .as_str()
        .context("the CRD has no metadata.name")?
        .to_string();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await
    .with_context(|| format!("server-side applying CRD {name}"))?;
    let timeout = secs(30);
    match tokio::time::timeout(
        timeout,
        await_condition(api.clone(), &name, conditions::is_crd_established()),
    )
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e).with_context(|| format!("watching CRD {name}")),
        Err(_) => {
            let status = api.get(&name).await.map(|c| yaml(&c.status));
            bail!("CRD {name} not Established after {timeout:?}; status: {status:?}")
        }
    }
}

pub(super) async fn create_namespace(client: &Client, test: &str) -> Result<String> {
    let ns = Namespace {
        metadata: ObjectMeta {
            generate_name: Some(format!("flux-e2e-{test}-")),
            labels: Some(BTreeMap::from([
                (NAMESPACE_LABEL.to_string(), "true".to_string()),
                ("flux-e2e/test".to_string(), test.to_string()),
            ])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    let created = Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    created
        .metadata
        .name
        .context("created namespace has no name")
}

/// Deletes the namespace (without waiting for it to go), after removing finalizers from
/// any MiniCluster left in it: with the hub gone nothing would ever release them.
pub(super) async fn delete_namespace(client: &Client, ns: &str) -> Result<()> {
    let mcs: Api<MiniCluster> = Api::namespaced(client.clone(), ns);
    if let Ok(list) = mcs.list(&ListParams::default()).await {
        for mc in list {
            if !mc.finalizers().is_empty() {
                let _ = mcs
                    .patch(
                        &mc.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
                    )
                    .await;
            }
        }
    }
    match Api::<Namespace>::all(client.clone())
        .delete(ns, &DeleteParams::background())
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `examples/<file>` as JSON.
pub fn example(file: &str) -> Result<Value> {
    let path = workspace_root().join("examples").join(file);
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml_ng::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}
