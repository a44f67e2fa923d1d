//! `flux-hub join` installing a spoke in the burst cluster that connects, and `flux-hub
//! unjoin` taking it out.
//!
//! Size: one scenario, a single sequence of steps on one spoke installed by `flux-hub
//! join` (about 570 lines); its parts run once each, in order, and read best together.

use std::collections::BTreeMap;

use anyhow::{Context as _, Result, ensure};
use flux_shared::api::MiniCluster;
use flux_shared::federation::pins::{self, PINS_CONFIGMAP};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams, ListParams};
use serde_json::{Value, json};

use crate::support;
use crate::support::{Federation, Probe, TestEnv};

use super::burst_fixture::*;

/// `flux-hub join` against the burst cluster: the spoke's install (what `deploy/spoke/`
/// holds, its settings and its TLS Secret) is accepted; a `flux-spoke run` started with
/// exactly what the Secret and the ConfigMap hold (hollow nodes run no container) connects
/// to the hub, and join's wait sees it connected; running join again changes nothing.
/// `flux-hub unjoin` refuses while a MiniCluster bursts into the spoke, naming it; once it
/// is gone, unjoin leaves nothing of the install and the hub forgets the spoke.
#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh)"]
async fn flux_hub_join_installs_a_spoke_that_connects_and_unjoin_takes_it_out() {
    support::run_federated_alone("join", "e2e-spoke", join).await;
}

async fn join(env: &TestEnv, fed: &Federation) -> Result<()> {
    use k8s_openapi::api::core::v1::Namespace;
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
    let suffix = env.ns.rsplit('-').next().unwrap_or("x");
    let name = format!("joined-{suffix}");
    let kubeconfig = std::env::var("SPOKE_KUBECONFIG").context("SPOKE_KUBECONFIG")?;
    let hub = tokio::task::spawn_blocking(support::hub_binary).await??;
    // The documented default: the test's namespace only, every other rule at its
    // default (join creates the namespace, at the Pod Security level a plain burst meets).
    let join = |wait: bool| {
        let mut cmd = tokio::process::Command::new(&hub);
        cmd.args(["join", &name, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args([
                "--hub",
                &fed.hub_url(),
                "--hub-domain",
                "localhost",
                "-o",
                "json",
            ])
            .args(["--timeout-seconds", "60", &format!("--wait={wait}")])
            .args(["--allow-namespace", &env.ns])
            .kill_on_drop(true);
        cmd
    };
    let client = env.spoke_client();
    // Whether join will create the burst namespace (not when the burst cluster is the root's).
    let join_creates = Api::<Namespace>::all(client.clone())
        .get_opt(&env.ns)
        .await?
        .is_none();
    let cleanup = async || {
        let dp = DeleteParams::background();
        let _ = Api::<Namespace>::all(client.clone())
            .delete("flux-spoke-system", &dp)
            .await;
        let _ = Api::<ClusterRole>::all(client.clone())
            .delete("flux-spoke", &dp)
            .await;
        let _ = Api::<ClusterRoleBinding>::all(client.clone())
            .delete("flux-spoke", &dp)
            .await;
        let _ = Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), &env.ns)
            .delete("flux-spoke", &dp)
            .await;
        let _ = Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &env.ns)
            .delete("flux-spoke", &dp)
            .await;
    };
    let outcome = async {
        let first = join(false).output().await?;
        ensure!(
            first.status.success(),
            "flux-hub join --wait=false failed: {}",
            String::from_utf8_lossy(&first.stderr)
        );
        // The cluster runs spoke `name` now: a join under another name (the wrong
        // --context, say) and an unjoin of another name are refused, naming what is
        // installed, and change nothing.
        let other = format!("{name}-other");
        let renaming = tokio::process::Command::new(&hub)
            .args(["join", &other, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args(["--hub", &fed.hub_url(), "--hub-domain", "localhost"])
            .args(["--timeout-seconds", "60", "--wait=false"])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&renaming.stderr).to_string();
        ensure!(
            !renaming.status.success()
                && said.contains(&format!(
                    "its spoke name is {name:?}, join would make it {other:?}"
                )),
            "join under another name must be refused, naming both: {said}"
        );
        let wrong = tokio::process::Command::new(&hub)
            .args(["unjoin", &other, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args([
                "--hub",
                &fed.hub_url(),
                "--hub-domain",
                "localhost",
                "--force",
            ])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&wrong.stderr).to_string();
        ensure!(
            !wrong.status.success() && said.contains(&format!("refusing to unjoin spoke {other}")),
            "unjoin of another spoke must be refused, even with --force: {said}"
        );
        // The spoke's service account has every permission the spoke uses in the one
        // namespace the policy names (a Role there), reads that namespace by name, and
        // nothing else: no other namespace, no namespace creation; but for what measuring
        // its room reads, cluster-wide (ROOM_PERMISSIONS: list and watch nodes and pods).
        let account = ("flux-spoke-system", "flux-spoke");
        let room = flux_shared::federation::spoke_rbac::ROOM_PERMISSIONS;
        let for_room = |group: &str, resource: &str, verb: &str| {
            room.iter().any(|(g, r, v)| *g == group && *r == resource && v.contains(&verb))
        };
        let mut missing = Vec::new();
        let mut beyond = Vec::new();
        for (group, resource, verbs) in flux_shared::federation::spoke_rbac::NAMESPACED_REQUIRED {
            for verb in *verbs {
                if !support::service_account_can(&client, account, group, resource, verb, &env.ns)
                    .await?
                {
                    missing.push(format!("{verb} {group}/{resource} in {}", env.ns));
                }
                if !for_room(group, resource, verb)
                    && support::service_account_can(&client, account, group, resource, verb, "some-team")
                        .await?
                {
                    beyond.push(format!("{verb} {group}/{resource} in some-team"));
                }
            }
        }
        for (group, resource, verbs) in room {
            for verb in *verbs {
                if !support::service_account_can(&client, account, group, resource, verb, "").await? {
                    missing.push(format!("{verb} {group}/{resource} everywhere (room)"));
                }
            }
        }
        for (verb, name) in [("get", "some-team"), ("create", env.ns.as_str()), ("list", "")] {
            if support::service_account_can_on(&client, account, "", "namespaces", verb, "", name)
                .await?
            {
                beyond.push(format!("{verb} namespaces {name}"));
            }
        }
        if !support::service_account_can_on(&client, account, "", "namespaces", "get", "", &env.ns)
            .await?
        {
            missing.push(format!("get namespace {}", env.ns));
        }
        ensure!(
            missing.is_empty() && beyond.is_empty(),
            "the spoke's RBAC from join's policy for {}: lacks {missing:?}; grants too much: {beyond:?}",
            env.ns
        );
        ensure!(
            !support::service_account_can(&client, account, "", "pods/exec", "create", &env.ns)
                .await?,
            "the spoke must not exec into pods"
        );
        // It reads its policy in its own namespace, and nowhere else.
        for verb in ["get", "list", "watch"] {
            ensure!(
                support::service_account_can(
                    &client,
                    ("flux-spoke-system", "flux-spoke"),
                    "",
                    "configmaps",
                    verb,
                    "flux-spoke-system",
                )
                .await?,
                "the spoke must {verb} its policy ConfigMap"
            );
        }
        ensure!(
            !support::service_account_can(
                &client,
                ("flux-spoke-system", "flux-spoke"),
                "",
                "configmaps",
                "watch",
                "some-team"
            )
            .await?,
            "the spoke watches ConfigMaps in its own namespace only"
        );
        // What the installed spoke would run with, read back from the burst cluster.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "flux-spoke-system");
        let config: Api<ConfigMap> = Api::namespaced(client.clone(), "flux-spoke-system");
        let policy = config
            .get(flux_shared::federation::policy::POLICY_CONFIGMAP)
            .await?
            .data
            .unwrap_or_default();
        let policy = flux_shared::federation::policy::SpokePolicy::parse(
            policy
                .get(flux_shared::federation::policy::POLICY_KEY)
                .map_or("", String::as_str),
        )?;
        ensure!(
            policy.namespace_rule(&env.ns).is_some() && policy.namespace_rule("other").is_none(),
            "join --allow-namespace {} wrote {policy:?}",
            env.ns
        );
        let secret = secrets.get("flux-spoke-tls").await?;
        let settings = config
            .get("flux-spoke-config")
            .await?
            .data
            .unwrap_or_default();
        ensure!(
            settings.get("spoke-name") == Some(&name)
                && settings.get("hub-url") == Some(&fed.hub_url()),
            "the spoke's settings: {settings:?}"
        );
        let dir = support::log_file(&format!("{}-joined-tls", env.ns))?;
        std::fs::create_dir_all(&dir)?;
        for key in ["ca.crt", "tls.crt", "tls.key"] {
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .with_context(|| format!("flux-spoke-tls has no {key}"))?;
            std::fs::write(dir.join(key), &bytes.0)?;
        }
        // The spoke acts where the Deployment join wrote says: in the policy's namespace.
        let deployment = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(
            client.clone(),
            "flux-spoke-system",
        )
        .get("flux-spoke")
        .await?;
        let scope = deployment
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.args)
            .unwrap_or_default()
            .into_iter()
            .find(|a| a.starts_with("--namespaces="))
            .context("join's Deployment runs the spoke without --namespaces")?;
        ensure!(
            scope == format!("--namespaces={}", env.ns),
            "the spoke acts in the policy's namespace only: {scope}"
        );
        // And it runs as the account join made, with nothing but join's RBAC.
        let as_spoke = support::log_file(&format!("{}-joined-spoke.kubeconfig", env.ns))?;
        support::service_account_kubeconfig(&kubeconfig, ("flux-spoke-system", "flux-spoke"), &as_spoke)
            .await?;
        let spoke_bin = tokio::task::spawn_blocking(support::spoke_binary).await??;
        let log =
            std::fs::File::create(support::log_file(&format!("{}-joined-spoke.log", env.ns))?)?;
        let mut spoke = tokio::process::Command::new(spoke_bin)
            .env("KUBECONFIG", &as_spoke)
            .args([
                "run",
                "--hub",
                &settings["hub-url"],
                "--hub-domain",
                &settings["hub-domain"],
            ])
            .args([
                "--name",
                &settings["spoke-name"],
                "--metrics-addr",
                "127.0.0.1:0",
            ])
            .arg(&scope)
            .arg("--ca")
            .arg(dir.join("ca.crt"))
            .arg("--cert")
            .arg(dir.join("tls.crt"))
            .arg("--key")
            .arg(dir.join("tls.key"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()?;
        let again = join(true).output().await?;
        ensure!(
            again.status.success(),
            "flux-hub join (waiting) failed: {}",
            String::from_utf8_lossy(&again.stderr)
        );
        let result: Value = serde_json::from_slice(&again.stdout)?;
        let changed: Vec<&Value> = result["applied"]
            .as_array()
            .map(|a| a.iter().filter(|o| o["outcome"] != "unchanged").collect())
            .unwrap_or_default();
        ensure!(
            result["connected"] == true && changed.is_empty(),
            "join again: connected and nothing changed: {result}"
        );
        eprintln!("{}: spoke {name} joined and connected", env.ns);

        // A burst runs there under join's per-namespace RBAC alone: its objects are made,
        // and deleted with the MiniCluster.
        env.apply_minicluster(&minicluster(
            &burst_name(&env.ns),
            &name,
            lead_address_override().as_deref(),
        ))
        .await?;
        let burst_jobs: Api<Job> = Api::namespaced(client.clone(), &env.ns);
        let spoke_made = ListParams::default().labels("app.kubernetes.io/managed-by=flux-spoke");
        env.eventually(
            "the joined spoke, as its service account, to create the burst's Job",
            objects_deadline(),
            async || {
                let jobs = burst_jobs.list_metadata(&spoke_made).await?;
                Ok(if jobs.items.is_empty() {
                    Probe::Waiting("no Job yet".into())
                } else {
                    Probe::Done(())
                })
            },
        )
        .await?;
        // The namespace join made enforces Pod Security, and the burst's pods pass it.
        let created = Api::<Namespace>::all(client.clone()).get(&env.ns).await?;
        let enforce = created
            .labels()
            .get(flux_shared::federation::policy::POD_SECURITY_ENFORCE)
            .cloned();
        ensure!(
            !join_creates || enforce.as_deref() == Some("baseline"),
            "join created {} enforcing {enforce:?}",
            env.ns
        );
        let burst_pods: Api<Pod> = Api::namespaced(client.clone(), &env.ns);
        env.eventually(
            "the burst's pods, admitted by Pod Security",
            objects_deadline(),
            async || {
                let pods = burst_pods.list_metadata(&ListParams::default()).await?;
                Ok(if pods.items.is_empty() {
                    Probe::Waiting("no pod yet".into())
                } else {
                    Probe::Done(())
                })
            },
        )
        .await?;
        env.api::<MiniCluster>()
            .delete(NAME, &DeleteParams::background())
            .await?;
        env.eventually(
            "the MiniCluster and its burst's Job gone",
            objects_deadline(),
            async || {
                let mc = env.api::<MiniCluster>().get_opt(NAME).await?;
                let jobs = burst_jobs.list_metadata(&spoke_made).await?;
                Ok(if mc.is_none() && jobs.items.is_empty() {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "MiniCluster there: {}, Jobs: {}",
                        mc.is_some(),
                        jobs.items.len()
                    ))
                })
            },
        )
        .await?;
        eprintln!(
            "{}: a burst ran and was deleted under join's per-namespace RBAC",
            env.ns
        );

        // join pinned the spoke's certificate; --rotate pins a new one, and the old one is
        // refused from then on (its open stream ends too).
        let pin_maps: Api<ConfigMap> = env.api();
        let pinned = |data: Option<BTreeMap<String, String>>| {
            data.unwrap_or_default()
                .get(&name)
                .cloned()
                .unwrap_or_default()
        };
        let first_pin = pinned(pin_maps.get(PINS_CONFIGMAP).await?.data);
        ensure!(
            first_pin
                == pins::fingerprint_of_pem(&std::fs::read_to_string(dir.join("tls.crt"))?)
                    .map_err(anyhow::Error::msg)?,
            "join pinned the installed certificate: {first_pin}"
        );
        let rotate = tokio::process::Command::new(&hub)
            .args(["join", &name, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args(["--hub", &fed.hub_url(), "--hub-domain", "localhost"])
            .args(["--rotate", "--wait=false", "--allow-namespace", &env.ns])
            .output()
            .await?;
        ensure!(
            rotate.status.success(),
            "join --rotate failed: {}",
            String::from_utf8_lossy(&rotate.stderr)
        );
        let second_pin = pinned(pin_maps.get(PINS_CONFIGMAP).await?.data);
        ensure!(
            second_pin != first_pin && pins::is_fingerprint(&second_pin),
            "join --rotate pinned a new certificate: {second_pin}"
        );
        let old = support::spoke_report_with(&fed.hub_url(), &dir).await;
        // Refused in the handshake: the hub's verifier says so. The client reads the
        // access_denied alert, or (TLS 1.3 ends the client's handshake first) the
        // connection closed under its first call.
        ensure!(
            matches!(&old, Err(s) if ["AccessDenied", "broken pipe", "connection reset", "connection closed"]
                .iter()
                .any(|m| s.message().contains(m))),
            "the rotated-out certificate must be refused in the TLS handshake: {old:?}"
        );
        let hub_log =
            std::fs::read_to_string(support::log_file(&format!("{}-hub-0.log", env.ns))?)?;
        ensure!(
            hub_log.lines().any(|l| l.contains("client certificate refused in the TLS handshake")
                && l.contains(&format!("spoke {name}: this certificate"))),
            "the hub logs the refusal in its TLS handshake"
        );
        env.eventually(
            "the old certificate's stream ended",
            objects_deadline(),
            async || {
                let status = fed.hub_status(&env.ns).await?;
                let connected = status["spokes"]
                    .as_array()
                    .and_then(|a| a.iter().find(|s| s["name"] == name.as_str()))
                    .map(|s| s["connected"].clone());
                Ok(if connected == Some(json!(false)) {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!("{connected:?}"))
                })
            },
        )
        .await?;
        eprintln!(
            "{}: the rotated-out certificate is refused and its stream ended",
            env.ns
        );

        // unjoin: refused while a MiniCluster bursts into the spoke, then it removes the
        // install and the hub forgets the spoke.
        let _ = spoke.kill().await;
        let unjoin = || {
            let mut cmd = tokio::process::Command::new(&hub);
            cmd.args(["unjoin", &name, "--kubeconfig", &kubeconfig, "--certs"])
                .arg(&fed.certs)
                .args(["--hub", &fed.hub_url(), "--hub-domain", "localhost"])
                .args(["--timeout-seconds", "60"])
                .kill_on_drop(true);
            cmd
        };
        env.apply_minicluster(&minicluster(
            &burst_name(&env.ns),
            &name,
            lead_address_override().as_deref(),
        ))
        .await?;
        env.eventually(
            "the hub to list the burst into the joined spoke",
            objects_deadline(),
            async || {
                let status = fed.hub_status(&env.ns).await?;
                Ok(
                    if status
                        .to_string()
                        .contains(&format!("\"spoke\":\"{name}\""))
                    {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(status.to_string())
                    },
                )
            },
        )
        .await?;
        let refused = unjoin().output().await?;
        let said = String::from_utf8_lossy(&refused.stderr).to_string();
        ensure!(
            !refused.status.success()
                && said.contains(&format!(
                    "MiniClusters still burst into spoke {name}: {}/{NAME}",
                    env.ns
                )),
            "unjoin must refuse, naming the MiniCluster: {said}"
        );
        env.api::<MiniCluster>()
            .delete(NAME, &DeleteParams::background())
            .await?;
        env.eventually("the MiniCluster gone", objects_deadline(), async || {
            Ok(match env.api::<MiniCluster>().get_opt(NAME).await? {
                None => Probe::Done(()),
                Some(_) => Probe::Waiting("still there".into()),
            })
        })
        .await?;
        let done = unjoin().output().await?;
        ensure!(
            done.status.success(),
            "unjoin failed: {}",
            String::from_utf8_lossy(&done.stderr)
        );
        ensure!(
            Api::<Namespace>::all(client.clone())
                .get_opt("flux-spoke-system")
                .await?
                .is_none()
                && Api::<ClusterRole>::all(client.clone())
                    .get_opt("flux-spoke")
                    .await?
                    .is_none()
                && Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), &env.ns)
                    .get_opt("flux-spoke")
                    .await?
                    .is_none(),
            "unjoin leaves nothing of the install, the Role in the burst namespace included"
        );
        ensure!(
            Api::<Namespace>::all(client.clone())
                .get_opt(&env.ns)
                .await?
                .is_some(),
            "unjoin leaves the burst namespace join created (it may hold more than bursts)"
        );
        let status = fed.hub_status(&env.ns).await?;
        let spokes: Vec<&str> = status["spokes"]
            .as_array()
            .map(|a| a.iter().filter_map(|s| s["name"].as_str()).collect())
            .unwrap_or_default();
        ensure!(
            !spokes.contains(&name.as_str()),
            "the hub forgot {name}: {spokes:?}"
        );
        // unjoin unpinned it: the current certificate is refused as well.
        ensure!(
            pinned(pin_maps.get(PINS_CONFIGMAP).await?.data).is_empty(),
            "unjoin removed the pin"
        );
        eprintln!(
            "{}: spoke {name} unjoined: install gone, forgotten by the hub",
            env.ns
        );

        // Installed again, then the hub is gone (its cluster deleted, say): unjoin
        // --force still removes the install, and says the hub was not told.
        let again = join(false).output().await?;
        ensure!(
            again.status.success(),
            "join again: {}",
            String::from_utf8_lossy(&again.stderr)
        );
        let gone_hub = format!("https://127.0.0.1:{}", support::free_port()?);
        let orphaned = tokio::process::Command::new(&hub)
            .args(["unjoin", &name, "--kubeconfig", &kubeconfig, "--certs"])
            .arg(&fed.certs)
            .args(["--hub", &gone_hub, "--hub-domain", "localhost", "--force"])
            .args(["--timeout-seconds", "60"])
            .output()
            .await?;
        let said = String::from_utf8_lossy(&orphaned.stdout).to_string();
        ensure!(
            orphaned.status.success() && said.contains("WITHOUT telling the hub"),
            "unjoin --force without a hub: {said}{}",
            String::from_utf8_lossy(&orphaned.stderr)
        );
        ensure!(
            Api::<Namespace>::all(client.clone())
                .get_opt("flux-spoke-system")
                .await?
                .is_none_or(|n| n.metadata.deletion_timestamp.is_some()),
            "unjoin --force leaves no install"
        );
        eprintln!(
            "{}: unjoin --force removed spoke {name} with the hub gone",
            env.ns
        );
        Ok(())
    }
    .await;
    cleanup().await;
    outcome
}
