//! A hub installed with `flux-hub init` and spokes joined with `flux-hub join`, as the
//! real-node tests drive them: the CLI with a test's own admin context, the hub's view of
//! the spokes, a MiniCluster's lead broker pod.

use std::path::Path;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use serde_json::Value;

use super::{Probe, TestEnv, secs};

/// Runs `flux-hub ARGS` with this test's admin context file, and no KUBECONFIG (every
/// command names its cluster); its stdout, or an error with both streams.
pub async fn flux_hub(hub: &Path, config: &Path, args: &[&str]) -> Result<String> {
    let out = tokio::time::timeout(
        secs(300),
        tokio::process::Command::new(hub)
            .args(args)
            .env("FLUX_HUB_CONFIG", config)
            .env_remove("KUBECONFIG")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .with_context(|| format!("timed out: flux-hub {args:?}"))??;
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    ensure!(
        out.status.success(),
        "flux-hub {args:?} failed ({}):\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(stdout)
}

/// The lead broker pod of `name`.
pub async fn lead_pod(env: &TestEnv, name: &str) -> Result<String> {
    env.eventually(
        &format!("{name}'s lead broker pod"),
        secs(120),
        async || {
            let pods = env
                .api::<Pod>()
                .list(&ListParams::default().labels(&format!(
                    "job-name={name},batch.kubernetes.io/job-completion-index=0"
                )))
                .await?;
            Ok(match pods.items.into_iter().find_map(|p| p.metadata.name) {
                Some(p) => Probe::Done(p),
                None => Probe::Waiting("no pod yet".into()),
            })
        },
    )
    .await
}

/// The hub's view of the spokes (`flux-hub status -o json`).
pub async fn spokes(hub: &Path, config: &Path) -> Result<Vec<Value>> {
    let out = flux_hub(hub, config, &["status", "-o", "json"]).await?;
    let status: Value = serde_json::from_str(&out).context("status JSON")?;
    Ok(status["spokes"].as_array().cloned().unwrap_or_default())
}

pub fn now_millis() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis()),
    )
    .unwrap_or(i64::MAX)
}

pub fn path_str(p: &Path) -> Result<&str> {
    p.to_str().context("a UTF-8 path")
}
