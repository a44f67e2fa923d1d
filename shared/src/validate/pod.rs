//! Pod settings: restart and DNS policies, overhead resources, labels, node affinity.

use crate::api::MiniClusterSpec;

use super::Validator;
use crate::quantity::is_quantity;

/// The prefix of the labels and annotations the hub and the spokes write.
const RESERVED_PREFIX: &str = "flux-framework.org/";

impl Validator {
    pub(super) fn pod(&mut self, spec: &MiniClusterSpec) {
        let pod = spec.pod();
        if let Some(policy) = pod.restart_policy.as_deref().filter(|p| !p.is_empty()) {
            check!(
                self,
                matches!(policy, "OnFailure" | "Never"),
                "spec.pod.restartPolicy",
                format!("{policy:?} must be OnFailure or Never (Jobs do not allow Always)"),
            );
        }
        if let Some(dns) = pod.dns_policy.as_deref().filter(|p| !p.is_empty()) {
            check!(
                self,
                matches!(
                    dns,
                    "ClusterFirst" | "ClusterFirstWithHostNet" | "Default" | "None"
                ),
                "spec.pod.dnsPolicy",
                format!(
                    "{dns:?} must be one of ClusterFirst, ClusterFirstWithHostNet, Default, None"
                ),
            );
        }
        if !pod.resources.is_empty() {
            check!(
                self,
                pod.runtime_class_name
                    .as_deref()
                    .is_some_and(|r| !r.is_empty()),
                "spec.pod.resources",
                "becomes the pod overhead, which Kubernetes only accepts together with spec.pod.runtimeClassName naming a RuntimeClass that defines the same overhead",
            );
        }
        for (k, q) in &pod.resources {
            check!(
                self,
                is_quantity(&q.0),
                format!("spec.pod.resources[{k:?}]"),
                format!("{:?} is not a quantity", q.0),
            );
        }
        for key in pod.labels.keys() {
            self.label_key(key, format!("spec.pod.labels[{key:?}]"));
        }
        // Which objects are the hub's or a spoke's, and of which burst, is told by these
        // keys: a tenant's pod that carried them would pass for a spoke's own (and be
        // counted, kept or deleted as another burst's).
        let tenant_keys = [
            ("spec.pod.labels", &pod.labels),
            ("spec.pod.annotations", &pod.annotations),
            ("spec.jobLabels", &spec.job_labels),
        ];
        for (field, map) in tenant_keys {
            for key in map.keys() {
                check!(
                    self,
                    !key.starts_with(RESERVED_PREFIX),
                    format!("{field}[{key:?}]"),
                    format!(
                        "the prefix {RESERVED_PREFIX} is reserved for what flux-hub and flux-spoke write (whose object it is, and of which burst)"
                    ),
                );
            }
        }
        for (key, values) in &pod.node_affinity {
            check!(
                self,
                !values.is_empty(),
                format!("spec.pod.nodeAffinity[{key:?}]"),
                "needs at least one value",
            );
        }
    }
}
