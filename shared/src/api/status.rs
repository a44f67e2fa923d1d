//! Observed state of a MiniCluster, written by the hub controller.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state of a MiniCluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MiniClusterStatus {
    /// Current size (the Job's parallelism); read by the scale subresource.
    #[serde(default)]
    pub size: i32,

    /// Largest size the MiniCluster can scale to (its hostlist is declared up to it).
    #[serde(default)]
    pub maximum_size: i32,

    /// Label selector of the broker pods, for the scale subresource and autoscalers.
    #[serde(default)]
    pub selector: String,

    /// Lifecycle phase: Pending, Running, Succeeded, Failed or Invalid.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,

    /// Brokers ready / total, as shown by `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brokers: Option<String>,

    /// Broker pods that are ready.
    #[serde(default)]
    pub brokers_ready: i32,

    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Standard conditions: Ready, Progressing, Degraded, Failed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}
