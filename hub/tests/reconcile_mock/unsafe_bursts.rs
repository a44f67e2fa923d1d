//! Burst admission: an unsafe burst is never assigned and its status says why; the
//! exceptions a spoke announced admit it; before its spoke connects it waits.

use std::sync::Arc;

use flux_hub::federation::served::Served;
use serde_json::Value;

use super::fixtures::*;
use super::mock_api::*;

/// A burst that asks for privileges, host access and credentials in another cluster is
/// never assigned, even once the lead endpoint is known: its status entry says Invalid and
/// why, the BurstsReady condition and one Event name UnsafeBurst.
#[tokio::test]
async fn an_unsafe_burst_is_not_assigned_and_its_status_says_why() {
    let unsafe_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}, volumes: {root: {hostPath: /, path: /host}}}]
  pod: {serviceAccountName: flux-spoke, automountServiceAccountToken: true}"#,
    );
    assert_ne!(unsafe_spec, BURSTING);
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    let mc = minicluster(&unsafe_spec);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let calls = server.calls();
    let status = observe(&calls, &mut writers).expect("status");
    let burst = &status["bursts"][0];
    assert_eq!(burst["name"], "burst-gke");
    assert_eq!(burst["phase"], "Invalid");
    let message = burst["message"].as_str().expect("message");
    assert!(message.starts_with("UnsafeBurst: "), "{message}");
    for field in [
        "spec.pod.serviceAccountName",
        "spec.pod.automountServiceAccountToken",
        "spec.containers[0].securityContext.privileged",
        "spec.containers[0].volumes[\"root\"].hostPath",
    ] {
        assert!(message.contains(field), "{field} not in {message}");
    }
    let events: Vec<&Call> = calls
        .iter()
        .filter(|c| c.method == "POST" && c.path.contains("/events"))
        .filter(|c| c.body["reason"] == "UnsafeBurst")
        .collect();
    assert_eq!(events.len(), 1, "one Event");
    assert_eq!(events[0].body["type"], "Warning");

    // The lead endpoint becomes known: still nothing is sent to the spoke.
    lead_known(&calls, &mut writers);
    let mut next = mc;
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.status = Some(serde_json::from_value(status).expect("status"));
    let before = server.calls().len();
    run(&ctx, next).await.expect("reconcile");
    let calls = server.calls()[before..].to_vec();
    assert!(
        ctx.registry
            .spokes(&|_| true)
            .spokes
            .iter()
            .all(|s| s.assignments == 0),
        "an unsafe burst must not be assigned"
    );
    assert!(ctx.registry.snapshot("gke").assignments.is_empty());
    assert!(
        !calls
            .iter()
            .any(|c| c.path.contains("/events") && c.body["reason"] == "UnsafeBurst"),
        "no second Event"
    );
    // The lead endpoint is new in the status; the bursts stay refused.
    let status = &calls
        .iter()
        .find(|c| c.path.ends_with("/status"))
        .expect("status")
        .body["status"];
    assert_eq!(status["leadBroker"]["port"], 30093);
    assert_eq!(status["bursts"][0]["phase"], "Invalid");
    let ready = status["conditions"]
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == "BurstsReady")
        .expect("BurstsReady");
    assert_eq!(ready["reason"], "UnsafeBurst");
}

/// The same kind of burst, sent to a spoke whose policy lists what it asks for (announced
/// when it connected): assigned once the lead endpoint is known. What the spoke does not
/// list still refuses it, naming the spoke and the field.
#[tokio::test]
async fn a_burst_the_spokes_announced_exceptions_admit_is_assigned() {
    use flux_shared::federation::policy::Announced;
    use flux_shared::federation::proto::NamespaceExceptions;
    let privileged_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}, volumes: {data: {hostPath: /data/x, path: /data}}}]
  pod: {serviceAccountName: runner}"#,
    );
    assert_ne!(privileged_spec, BURSTING);
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    ctx.registry.set_primed();
    let announced = |service_accounts: Vec<String>| {
        Announced::from_proto(&[NamespaceExceptions {
            namespace: "hpc".into(),
            privileged: true,
            host_paths: vec!["/data".into()],
            service_accounts,
            ..Default::default()
        }])
        .expect("well formed")
    };
    // Without the service account: refused, naming the spoke and the field left.
    let spoke = ctx
        .registry
        .clone()
        .subscribe("gke", "test", announced(vec![]), Default::default())
        .expect("primed");
    let mc = minicluster(&privileged_spec);
    run(&ctx, mc.clone()).await.expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    let message = status["bursts"][0]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("UnsafeBurst: ")
            && message.contains("spoke gke: spec.pod.serviceAccountName")
            && !message.contains("privileged")
            && !message.contains("hostPath"),
        "{message}"
    );
    drop(spoke);

    // The spoke reconnects listing it too: assigned once the lead endpoint is known.
    let _spoke = ctx
        .registry
        .clone()
        .subscribe(
            "gke",
            "test",
            announced(vec!["runner".into()]),
            Default::default(),
        )
        .expect("primed");
    spoke_reports_reach(&ctx, "gke", None);
    let calls = server.calls();
    lead_known(&calls, &mut writers);
    let mut next = mc;
    next.metadata.finalizers = Some(vec!["flux-framework.org/bursts".into()]);
    next.status = Some(serde_json::from_value(status).expect("status"));
    run(&ctx, next).await.expect("reconcile");
    assert_eq!(
        ctx.registry.snapshot("gke").assignments.len(),
        1,
        "assigned to the spoke that lists its exceptions"
    );
}

/// Before the spoke has connected to this hub (after a restart, say), a burst that needs
/// what only its policy could allow is held as it is, not refused: no Event, nothing sent,
/// its spokes keep what they run. What no policy lifts is refused at once.
#[tokio::test]
async fn a_burst_needing_exceptions_waits_for_its_spoke_to_say_them() {
    let privileged_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}}]"#,
    );
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    ctx.registry.set_primed();
    run(&ctx, minicluster(&privileged_spec))
        .await
        .expect("reconcile");
    let calls = server.calls();
    let status = observe(&calls, &mut writers).expect("status");
    let burst = &status["bursts"][0];
    assert_eq!(burst["phase"], "Pending", "{burst}");
    let message = burst["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("waiting for the spoke to connect")
            && message.contains("spec.containers[0].securityContext.privileged"),
        "{message}"
    );
    let warnings: Vec<&Value> = calls
        .iter()
        .filter(|c| c.path.contains("/events") && c.body["type"] == "Warning")
        .map(|c| &c.body["reason"])
        .collect();
    assert!(
        warnings.is_empty(),
        "no Warning while it waits: {warnings:?}"
    );
    assert!(ctx.registry.snapshot("gke").assignments.is_empty());

    // A token no policy lifts: refused, whether or not the spoke has spoken.
    let token_spec = BURSTING.replace(
        r#"containers: [{image: "rockylinux:9", command: hostname}]"#,
        r#"containers: [{image: "rockylinux:9", command: hostname, securityContext: {privileged: true}}]
  pod: {automountServiceAccountToken: true}"#,
    );
    let (client, server) = ApiServer::start(Arc::new(with_node));
    let (ctx, mut writers) = context(client);
    ctx.registry.set_primed();
    run(&ctx, minicluster(&token_spec))
        .await
        .expect("reconcile");
    let status = observe(&server.calls(), &mut writers).expect("status");
    assert_eq!(status["bursts"][0]["phase"], "Invalid");
}
