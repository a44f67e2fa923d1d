//! Checks of what the spoke wrote (the burst Job, its broker config, its CURVE Secret), and,
//! without a cluster, that they accept exactly what the hub's assignment renders.

use anyhow::{Context as _, Result, bail, ensure};
use flux_shared::api::MiniCluster;
use flux_shared::curve::CurveCert;
use flux_shared::federation::assignment;
use flux_shared::layout::{BROKER_TOML_KEY, CURVE_KEY};
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::{self, Object};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt as _;
use serde_json::json;

use crate::support::yaml;

use super::burst_fixture::*;
use super::spoke_objects::*;

/// Without a cluster: the checks these tests make accept exactly what the hub's
/// assignment and the spoke's rendering of it produce (and reject wrong objects), so a
/// failure points at the clusters or the binaries, never at a test expecting something
/// the code does not make.
#[test]
fn checks_agree_with_the_assignment() -> Result<()> {
    const NS: &str = "flux-e2e-offline";
    let burst = "burst-abcde";
    let mut doc = minicluster(burst, "e2e-spoke", None);
    doc["metadata"]["namespace"] = json!(NS);
    doc["metadata"]["uid"] = json!("8d5e9c1a-0000-4000-8000-000000000002");
    let mc: MiniCluster = serde_json::from_value(doc)?;
    let plan = Plan::new(&mc).map_err(|e| anyhow::anyhow!("{e}"))?;
    let cert = CurveCert::generate(NAME).to_zcert();
    let root = render::render(&plan, &Role::Root, &cert).context("no root objects")?;
    let root_config = config_map(&root, &format!("{NAME}-flux-config"))?;
    let lead = Endpoint {
        address: "192.0.2.9".into(),
        port: 30123,
    };
    let assignments = assignment::build(&plan, &cert, Some(&lead))?;
    ensure!(assignments.len() == 1, "one assignment: {assignments:?}");
    ensure!(assignments[0].spoke == "e2e-spoke");
    let me = flux_shared::federation::ownership::SpokeIdentity {
        name: "e2e-spoke".into(),
        federation: flux_shared::federation::ownership::INSECURE_FEDERATION.into(),
    };
    let realized = assignment::realize(&assignments[0].assignment, &me)?;
    ensure!(realized.namespace == NS && realized.job == burst);
    let job = realized
        .objects
        .iter()
        .find_map(|o| match o {
            Object::Job(j) if j.name_any() == burst => Some(j.clone()),
            _ => None,
        })
        .context("no burst Job")?;
    check_burst_job(&job, NS, burst)?;
    let burst_config = config_map(&realized.objects, &format!("{burst}-flux-config"))?;
    check_burst_config(&burst_config, &root_config, &lead.address, lead.port)?;
    ensure!(
        check_burst_config(&burst_config, &root_config, &lead.address, lead.port + 1).is_err(),
        "a wrong lead port must be caught"
    );
    ensure!(
        check_burst_config(&root_config, &root_config, &lead.address, lead.port).is_err(),
        "a config without the lead's connect override must be caught"
    );
    let root_job = root
        .iter()
        .find_map(|o| match o {
            Object::Job(j) => Some(j.clone()),
            _ => None,
        })
        .context("no root Job")?;
    ensure!(
        check_burst_job(&root_job, NS, burst).is_err(),
        "a Job not made by the spoke must be caught"
    );
    // The curve certificate is the root's, byte for byte.
    let secret = realized
        .objects
        .iter()
        .find_map(|o| match o {
            Object::Secret(s) if s.name_any() == format!("{burst}-curve") => Some(s.clone()),
            _ => None,
        })
        .context("no burst curve Secret")?;
    ensure!(secret_cert(&secret)? == cert);
    ensure!(
        realized
            .objects
            .iter()
            .any(|o| matches!(o, Object::Service(s) if s.name_any() == burst)),
        "no burst Service {burst}"
    );
    Ok(())
}

/// The burst Job as the spoke must create it: labelled as the spoke's, annotated with its
/// assignment key, an Indexed Job of `BURST_SIZE` brokers.
pub(crate) fn check_burst_job(job: &Job, ns: &str, burst: &str) -> Result<()> {
    let labels = job.labels();
    ensure!(
        labels.get(MANAGED_BY).map(String::as_str) == Some(SPOKE_MANAGER),
        "Job {burst} must carry {MANAGED_BY}={SPOKE_MANAGER}; labels {labels:?}"
    );
    let key = format!("{ns}/{NAME}/{burst}");
    let annotations = job.annotations();
    ensure!(
        annotations.get(ASSIGNMENT_ANNOTATION) == Some(&key),
        "Job {burst} must carry the annotation {ASSIGNMENT_ANNOTATION}={key}; annotations {annotations:?}"
    );
    let spec = job.spec.as_ref().context("Job without spec")?;
    ensure!(
        spec.parallelism == Some(BURST_SIZE) && spec.completions == Some(BURST_SIZE),
        "Job {burst} must run {BURST_SIZE} brokers (parallelism = completions = {BURST_SIZE}):\n{}",
        yaml(job)
    );
    ensure!(
        spec.completion_mode.as_deref() == Some("Indexed"),
        "Job {burst} must be an Indexed Job:\n{}",
        yaml(job)
    );
    Ok(())
}

/// Every host of broker.toml's `[bootstrap] hosts`, in rank order, with its `connect`
/// override.
pub(crate) fn bootstrap_hosts(config_map: &ConfigMap) -> Result<Vec<(String, Option<String>)>> {
    let name = config_map.name_any();
    let text = config_map
        .data
        .as_ref()
        .and_then(|d| d.get(BROKER_TOML_KEY))
        .with_context(|| format!("ConfigMap {name} has no {BROKER_TOML_KEY}"))?;
    let doc: toml::Table = text
        .parse()
        .with_context(|| format!("{BROKER_TOML_KEY} of ConfigMap {name} is not TOML:\n{text}"))?;
    let entries = doc
        .get("bootstrap")
        .and_then(|b| b.get("hosts"))
        .and_then(|h| h.as_array())
        .with_context(|| {
            format!("{BROKER_TOML_KEY} of ConfigMap {name} has no [bootstrap] hosts:\n{text}")
        })?;
    let mut hosts = Vec::new();
    for entry in entries {
        let hostlist = entry
            .get("host")
            .and_then(|h| h.as_str())
            .with_context(|| format!("a hosts entry without host in ConfigMap {name}: {entry}"))?;
        let connect = entry
            .get("connect")
            .and_then(|c| c.as_str())
            .map(str::to_string);
        let expanded = flux_shared::hostlist::expand(hostlist)
            .map_err(|e| anyhow::anyhow!("hostlist {hostlist:?} in ConfigMap {name}: {e}"))?;
        ensure!(
            connect.is_none() || expanded.len() == 1,
            "ConfigMap {name}: a connect override for several hosts ({hostlist})"
        );
        hosts.extend(expanded.into_iter().map(|h| (h, connect.clone())));
    }
    Ok(hosts)
}

/// The burst's broker.toml: the same hosts in the same order as the root's (ranks must
/// agree), the rank-0 host connecting to the lead broker's `address:port`, no other
/// override.
pub(crate) fn check_burst_config(
    burst: &ConfigMap,
    root: &ConfigMap,
    lead_address: &str,
    lead_port: i32,
) -> Result<()> {
    let burst_hosts = bootstrap_hosts(burst)?;
    let root_hosts = bootstrap_hosts(root)?;
    let names =
        |h: &[(String, Option<String>)]| h.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    ensure!(
        names(&burst_hosts) == names(&root_hosts),
        "the burst's broker.toml must list the root's hosts in the same order (ranks must agree):\nburst {:?}\nroot  {:?}",
        names(&burst_hosts),
        names(&root_hosts)
    );
    let expected = [
        format!("tcp://{lead_address}:{lead_port}"),
        format!("tcp://[{lead_address}]:{lead_port}"),
    ];
    let (rank0, connect) = burst_hosts.first().context("no hosts")?;
    ensure!(
        rank0 == &format!("{NAME}-0") && connect.as_ref().is_some_and(|c| expected.contains(c)),
        "the burst's rank-0 host must be {NAME}-0 with connect = {}, has {rank0} with connect {connect:?}:\n{}",
        expected[0],
        burst
            .data
            .as_ref()
            .and_then(|d| d.get(BROKER_TOML_KEY))
            .map_or("", String::as_str)
    );
    if let Some((host, connect)) = burst_hosts[1..].iter().find(|(_, c)| c.is_some()) {
        bail!("only rank 0 may have a connect override; {host} has {connect:?}");
    }
    Ok(())
}

/// The CURVE certificate in a curve Secret.
pub(crate) fn secret_cert(secret: &Secret) -> Result<String> {
    let name = secret.name_any();
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(CURVE_KEY))
        .with_context(|| format!("Secret {name} has no {CURVE_KEY}"))?;
    String::from_utf8(bytes.0.clone())
        .with_context(|| format!("{CURVE_KEY} in Secret {name} is not UTF-8"))
}
