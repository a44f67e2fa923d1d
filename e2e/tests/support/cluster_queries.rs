//! Questions asked of the clusters: what a service account may do, Flux run in a pod, a
//! spoke's report to the hub, and checks of objects (selectors, owners, conditions).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result, bail};
use flux_shared::api::MiniCluster;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta};
use kube::api::Api;
use kube::{Client, ResourceExt as _};
use serde_json::json;

use super::*;

/// Whether an equality-based label selector (`a=b,c==d,e!=f,g,!h`, as in
/// `status.selector`) matches `labels`.
pub fn selector_matches(selector: &str, labels: &BTreeMap<String, String>) -> Result<bool> {
    for term in selector.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let ok = if let Some((k, v)) = term.split_once("!=") {
            labels.get(k.trim()).map(String::as_str) != Some(v.trim())
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.get(k.trim()).map(String::as_str) == Some(v.trim())
        } else if term.contains(' ') || term.contains('(') {
            bail!("set-based selector term {term:?} is not supported here");
        } else if let Some(k) = term.strip_prefix('!') {
            !labels.contains_key(k.trim())
        } else {
            labels.contains_key(term)
        };
        if !ok {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Checks that `meta` names `mc` as its controlling owner.
pub fn ensure_controlled_by(what: &str, meta: &ObjectMeta, mc: &MiniCluster) -> Result<()> {
    let uid = mc
        .metadata
        .uid
        .as_deref()
        .context("the MiniCluster has no uid")?;
    let refs = meta.owner_references.as_deref().unwrap_or_default();
    let owned = refs.iter().any(|r| {
        r.api_version == "flux-framework.org/v1alpha2"
            && r.kind == "MiniCluster"
            && r.name == mc.name_any()
            && r.uid == uid
            && r.controller == Some(true)
    });
    if !owned {
        bail!(
            "{what} is not controlled by MiniCluster {} (uid {uid}); ownerReferences: {}",
            mc.name_any(),
            yaml(&refs)
        );
    }
    Ok(())
}

/// The conditions of a MiniCluster's status.
pub fn mc_conditions(mc: &MiniCluster) -> &[Condition] {
    mc.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
}

/// Whether a text talks about a maximum (`maxSize`, "maximum size", ...).
pub fn mentions_max(text: &str) -> bool {
    text.to_lowercase().contains("max")
}

/// Whether service account `namespace/name` may `verb` `group`/`resource` (with an optional
/// `/subresource`) in namespace `ns`, as the API server's authorizer answers a
/// SubjectAccessReview (what `kubectl auth can-i --as=system:serviceaccount:...` asks).
pub async fn service_account_can(
    client: &Client,
    account: (&str, &str),
    group: &str,
    resource: &str,
    verb: &str,
    ns: &str,
) -> Result<bool> {
    service_account_can_on(client, account, group, resource, verb, ns, "").await
}

/// Writes to `out` a kubeconfig for the cluster of `kubeconfig` that authenticates as
/// service account `namespace/name` (a one-hour token from `kubectl create token`): what a
/// pod of that account may do, and nothing more.
pub async fn service_account_kubeconfig(
    kubeconfig: &str,
    account: (&str, &str),
    out: &std::path::Path,
) -> Result<()> {
    let token = tokio::process::Command::new("kubectl")
        .args(["--kubeconfig", kubeconfig, "-n", account.0])
        .args(["create", "token", account.1, "--duration", "1h"])
        .output()
        .await?;
    anyhow::ensure!(
        token.status.success(),
        "kubectl create token {}/{}: {}",
        account.0,
        account.1,
        String::from_utf8_lossy(&token.stderr)
    );
    let token = String::from_utf8(token.stdout)?.trim().to_string();
    let mut config = kube::config::Kubeconfig::read_from(kubeconfig)?;
    let user = format!("{}-{}", account.0, account.1);
    config.auth_infos = vec![kube::config::NamedAuthInfo {
        name: user.clone(),
        auth_info: Some(kube::config::AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        }),
        other: Default::default(),
    }];
    for context in &mut config.contexts {
        if let Some(c) = context.context.as_mut() {
            c.user = Some(user.clone());
        }
    }
    std::fs::write(out, serde_yaml_ng::to_string(&config)?)?;
    Ok(())
}

/// [`service_account_can`] on the object `name` (for grants limited by resourceNames).
pub async fn service_account_can_on(
    client: &Client,
    account: (&str, &str),
    group: &str,
    resource: &str,
    verb: &str,
    ns: &str,
    name: &str,
) -> Result<bool> {
    use k8s_openapi::api::authorization::v1::SubjectAccessReview;
    let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
    let review: SubjectAccessReview = serde_json::from_value(json!({
        "spec": {
            "user": format!("system:serviceaccount:{}:{}", account.0, account.1),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", account.0), "system:authenticated"],
            "resourceAttributes": {"group": group, "resource": resource, "subresource": subresource, "verb": verb, "namespace": ns, "name": name},
        }
    }))?;
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Runs `script` in the Flux environment of `pod`'s container `container` (kubectl exec),
/// retrying until it succeeds and `done` accepts its standard output (kubectl's own
/// warnings go to standard error and are not part of it).
pub async fn flux_in(
    env: &TestEnv,
    pod: &str,
    container: &str,
    script: &str,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> Result<String> {
    let script = dataplane::in_flux_env(script);
    env.eventually(what, secs(120), async || {
        let mut cmd = tokio::process::Command::new("kubectl");
        cmd.args(["--namespace", &env.ns, "exec", pod, "-c", container, "--"])
            .args(["bash", "-c", &script]);
        let out = match tokio::time::timeout(secs(30), cmd.output()).await {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => return Ok(Probe::Waiting(format!("kubectl exec {pod}: {e}"))),
            Err(_) => return Ok(Probe::Waiting(format!("kubectl exec {pod} timed out"))),
        };
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        Ok(if out.status.success() && done(&stdout) {
            Probe::Done(stdout)
        } else {
            Probe::Waiting(format!(
                "{} ({}): {stdout}{}",
                pod,
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ))
        })
    })
    .await
}

/// One `Spoke.Report` (empty) to the hub at `hub_url` with the spoke certificate in `dir`
/// (`ca.crt`, `tls.crt`, `tls.key`, as the spoke's TLS Secret holds them): what the hub
/// answers a spoke presenting that certificate.
pub async fn spoke_report_with(hub_url: &str, dir: &Path) -> Result<(), tonic::Status> {
    use flux_shared::federation::proto::ReportRequest;
    use flux_shared::federation::proto::spoke_client::SpokeClient;
    use flux_shared::federation::tls::{ClientSecurity, TlsPem, TransportSettings};
    let failed = |e: String| tonic::Status::unknown(e);
    let tls = TlsPem::from_files(dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"))
        .map_err(|e| failed(e.to_string()))?;
    let security = ClientSecurity::Mtls {
        tls,
        domain: "localhost".into(),
    };
    let settings = TransportSettings::default();
    let channel = settings
        .endpoint(hub_url, &security)
        .map_err(|e| failed(e.to_string()))?
        .connect()
        .await
        .map_err(|e| failed(flux_shared::federation::diagnostics::error_chain(&e)))?;
    let mut client = SpokeClient::with_interceptor(channel, security.interceptor());
    client
        .report(settings.unary_request(ReportRequest::default()))
        .await
        .map(|_| ())
        .map_err(|status| {
            // A refusal in the TLS handshake is a transport error: keep its cause.
            match std::error::Error::source(&status) {
                Some(cause) => tonic::Status::new(
                    status.code(),
                    format!(
                        "{}: {}",
                        status.message(),
                        flux_shared::federation::diagnostics::error_chain(cause)
                    ),
                ),
                None => status,
            }
        })
}
