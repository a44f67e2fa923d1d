//! The installer (`flux-hub init`, `flux-hub join`): the deploy manifests applied in order
//! with its field manager, and a failed install deleting what it created.

use std::sync::Arc;

use http::StatusCode;
use serde_json::json;

use super::fixtures::*;
use super::mock_api::*;

#[tokio::test]
async fn the_installer_applies_the_deploy_manifests_in_order_with_its_field_manager() {
    let (client, api) = ApiServer::start(Arc::new(|call: &Call| {
        if call.method == "GET" {
            return (StatusCode::NOT_FOUND, status_error(404, "NotFound"));
        }
        echo(call)
    }));
    let objects = flux_hub::commands::install::hub_objects(
        Some("registry.example/flux-hub:dev"),
        Some(&test_tls()),
    )
    .expect("objects");
    let applied = flux_hub::commands::install_apply::apply_all(&client, &objects)
        .await
        .expect("applied");
    let order: Vec<&str> = applied.iter().map(|a| a.object.as_str()).collect();
    assert_eq!(
        order,
        [
            "Namespace flux-operator-system",
            "CustomResourceDefinition miniclusters.flux-framework.org",
            "ValidatingAdmissionPolicy flux-hub-minicluster-author",
            "ValidatingAdmissionPolicyBinding flux-hub-minicluster-author",
            "ServiceAccount flux-operator-system/flux-hub",
            "ClusterRole flux-hub",
            "ClusterRoleBinding flux-hub",
            "Role flux-operator-system/flux-hub-leader-election",
            "RoleBinding flux-operator-system/flux-hub-leader-election",
            // Before the pods that mount it.
            "Secret flux-operator-system/flux-hub-tls",
            "Deployment flux-operator-system/flux-hub",
            "PodDisruptionBudget flux-operator-system/flux-hub",
            "Service flux-operator-system/flux-hub-metrics",
            "Service flux-operator-system/flux-hub-federation",
        ]
    );
    let patches: Vec<Call> = api
        .calls()
        .into_iter()
        .filter(|c| c.method == "PATCH")
        .collect();
    assert_eq!(patches.len(), order.len());
    for p in &patches {
        assert!(
            p.query.contains("fieldManager=flux-hub-install") && p.query.contains("force=true"),
            "{} {}",
            p.short(),
            p.query
        );
    }
    assert_eq!(
        patches[0].short(),
        "PATCH /api/v1/namespaces/flux-operator-system"
    );
    let deployment = patches
        .iter()
        .find(|p| p.path.ends_with("/deployments/flux-hub"))
        .expect("deployment");
    assert_eq!(
        deployment.body["spec"]["template"]["spec"]["containers"][0]["image"],
        "registry.example/flux-hub:dev"
    );
}

#[tokio::test]
async fn a_failed_install_deletes_what_it_created_and_names_the_missing_right() {
    let (client, api) = ApiServer::start(Arc::new(|call: &Call| {
        if call.method == "GET" {
            // The namespace exists already; nothing else does.
            if call.path == "/api/v1/namespaces/flux-operator-system" {
                return (
                    StatusCode::OK,
                    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "flux-operator-system", "resourceVersion": "1"}}),
                );
            }
            return (StatusCode::NOT_FOUND, status_error(404, "NotFound"));
        }
        if call.method == "PATCH" && call.path.ends_with("/clusterroles/flux-hub") {
            return (
                StatusCode::FORBIDDEN,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 403, "reason": "Forbidden",
                       "message": "clusterroles.rbac.authorization.k8s.io \"flux-hub\" is forbidden: User \"dev\" cannot patch resource \"clusterroles\""}),
            );
        }
        echo(call)
    }));
    let objects =
        flux_hub::commands::install::hub_objects(None, Some(&test_tls())).expect("objects");
    let error = flux_hub::commands::install_apply::apply_all(&client, &objects)
        .await
        .expect_err("refused");
    let text = format!("{error:#}");
    assert!(
        text.contains("applying ClusterRole flux-hub")
            && text.contains("missing rights")
            && text.contains("cannot patch resource \"clusterroles\""),
        "{text}"
    );
    let deletes: Vec<String> = api
        .calls()
        .iter()
        .filter(|c| c.method == "DELETE")
        .map(Call::short)
        .collect();
    assert_eq!(
        deletes,
        [
            "DELETE /api/v1/namespaces/flux-operator-system/serviceaccounts/flux-hub",
            "DELETE /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/flux-hub-minicluster-author",
            "DELETE /apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies/flux-hub-minicluster-author",
            "DELETE /apis/apiextensions.k8s.io/v1/customresourcedefinitions/miniclusters.flux-framework.org",
        ],
        "what this run created goes again, newest first; the namespace that was there stays"
    );
}
