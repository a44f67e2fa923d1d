//! The federation endpoint label on the hub's own pod: merge-patched with retries, a missing
//! pod skipped, a refusal failed.

use std::sync::{Arc, Mutex};

use flux_hub::controller::permissions;
use http::StatusCode;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::fixtures::*;
use super::mock_api::*;

#[tokio::test]
async fn federation_endpoint_label_is_merge_patched_onto_the_hubs_own_pod_with_retries() {
    use flux_hub::ops::leader_pod;
    let attempts = Arc::new(Mutex::new(0u32));
    let seen = attempts.clone();
    let (client, api) = ApiServer::start(Arc::new(move |call: &Call| {
        let mut n = seen.lock().expect("attempts");
        *n += 1;
        if *n == 1 {
            // A transient failure (the API server restarting) is retried.
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                status_error(503, "ServiceUnavailable"),
            );
        }
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "flux-hub-0", "namespace": "flux-operator-system"}});
        pod["metadata"]["labels"] = call.body["metadata"]["labels"].clone();
        (StatusCode::OK, pod)
    }));
    let pods = kube::Api::<Pod>::namespaced(client, "flux-operator-system");
    leader_pod::mark(&pods, "flux-hub-0", true)
        .await
        .expect("marked after one retry");
    let calls = api.calls();
    assert_eq!(calls.len(), 2, "{calls:?}");
    for call in &calls {
        assert_eq!(
            call.short(),
            "PATCH /api/v1/namespaces/flux-operator-system/pods/flux-hub-0"
        );
        assert_eq!(
            call.body,
            json!({"metadata": {"labels": {leader_pod::LABEL: "true"}}}),
            "only the label changes"
        );
    }
    assert!(
        permissions::allows("", "pods", "patch"),
        "the hub may patch its own pod"
    );
}

#[tokio::test]
async fn federation_endpoint_label_skips_a_missing_pod_and_fails_on_a_refusal() {
    use flux_hub::ops::leader_pod;
    let (client, api) = ApiServer::start(Arc::new(|call: &Call| {
        if call.path.ends_with("/elsewhere") {
            (StatusCode::NOT_FOUND, status_error(404, "NotFound"))
        } else {
            (StatusCode::FORBIDDEN, status_error(403, "Forbidden"))
        }
    }));
    let pods = kube::Api::<Pod>::namespaced(client, "flux-operator-system");
    // Run outside a cluster, the identity names no pod: nothing to label.
    leader_pod::mark(&pods, "elsewhere", false)
        .await
        .expect("a missing pod is not an error");
    // A refusal is not transient: reported at once, not retried.
    let error = leader_pod::mark(&pods, "flux-hub-0", true)
        .await
        .expect_err("forbidden");
    assert!(error.to_string().contains("Forbidden"), "{error}");
    assert_eq!(api.calls().len(), 2, "no retry of a 404 or a 403");
}
