//! Stage "pod labels": every broker pod gets `job-index=<completion index>`.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use flux_shared::render::labels::JOB_INDEX;

use crate::controller::context::{ApiError, Context, kube_err};
use crate::controller::watch::cache::BrokerPod;
use crate::controller::watch::partial_decode::Partial;

/// Label each broker pod with `job-index=<completion index>`, as the MiniCluster docs
/// promise (a selector for, e.g., a Service of the lead broker). Only this Job's pods are
/// touched, each once.
pub(in crate::controller) async fn label_pods_with_their_index(
    ctx: &Context,
    ns: &str,
    job: &str,
) -> Result<(), ApiError> {
    let now = std::time::Instant::now();
    let pods: Vec<(String, Option<String>, String)> = {
        let Ok(mut labelled) = ctx.labelled.lock() else {
            return Ok(());
        };
        labelled.retain(|_, at| now.duration_since(*at) < LABEL_ECHO_WAIT);
        ctx.stores
            .broker_pods
            .of_job(ns, job)
            .iter()
            .filter(|p| !p.labels().contains_key(JOB_INDEX))
            .filter_map(|p| {
                let uid = p.uid();
                let index = p.annotations().get(COMPLETION_INDEX)?;
                let recent = uid.as_ref().is_some_and(|u| labelled.contains_key(u));
                (!recent).then(|| (p.name_any(), uid, index.clone()))
            })
            .collect()
    };
    // The answer is a whole pod, of which nothing is read.
    let api: Api<Partial<Pod, BrokerPod>> = Api::namespaced(ctx.client.clone(), ns);
    for (pod, uid, index) in pods {
        let patch = serde_json::json!({"metadata": {"labels": {JOB_INDEX: index}}});
        let write = ctx.stores.echoes.begin("Pod", ns, &pod);
        match api
            .patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(patched) => {
                ctx.metrics.api_write("Pod", "patch");
                let rv = patched.into_inner().metadata.resource_version;
                write.done(rv.as_deref());
                if let (Some(uid), Ok(mut labelled)) = (uid, ctx.labelled.lock()) {
                    labelled.insert(uid, now);
                }
            }
            // Gone already (a finished or replaced pod): nothing to label.
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(kube_err(format!("labelling Pod {ns}/{pod}"))(e)),
        }
    }
    Ok(())
}

/// How long a labelled pod is left alone while the pod cache does not show the label yet;
/// after that the patch is sent again (the label was removed, or the echo was lost).
pub(in crate::controller) const LABEL_ECHO_WAIT: Duration = Duration::from_secs(30);

/// Annotation Kubernetes puts on Indexed Job pods.
pub(in crate::controller) const COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";
