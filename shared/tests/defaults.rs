//! The documented defaults, as the planner and renderer see them.

use flux_shared::api::MiniCluster;
use flux_shared::plan::{Plan, Role};

fn plan(spec: &str) -> Plan {
    let mc: MiniCluster = serde_yaml_ng::from_str(&format!(
        "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {{name: flux-sample}}\nspec:\n{spec}"
    ))
    .expect("yaml");
    Plan::new(&mc).expect("valid")
}

#[test]
fn documented_defaults() {
    let p = plan("  containers: [{image: rockylinux:9}]\n");
    let s = &p.spec;
    assert_eq!(p.namespace, "default");
    assert_eq!(s.size, 1);
    assert_eq!(s.max_size(), 1);
    assert_eq!(s.tasks(), 1);
    assert_eq!(s.backoff_limit(), 100);
    assert_eq!(s.deadline_seconds(), 31_500_000);
    assert!(!s.interactive());
    assert_eq!(
        s.headless_name(&p.name),
        "flux-sample",
        "not the documented flux-service"
    );
    assert_eq!(s.flux().connect_timeout(), Some("5s"));
    assert_eq!(s.flux().log_level(), 6);
    assert_eq!(s.flux().queue_policy(), "fcfs");
    assert_eq!(s.flux().submit_command(), "flux submit");
    assert_eq!(s.flux().view().name(), "flux-view");
    assert_eq!(s.flux().view().mount_path(), "/mnt/flux");
    assert_eq!(
        s.flux().view_image(),
        "ghcr.io/converged-computing/flux-view-ubuntu:tag-noble"
    );
    assert!(
        s.logging().strict(),
        "strict logging is on by default, as documented"
    );
    assert!(!s.logging().quiet());
    let c = &s.containers[p.runner];
    assert_eq!(p.runner, 0, "a single container runs Flux");
    assert_eq!(c.cores(), 1);
    assert_eq!(c.logs(), "/tmp/fluxout");
    assert_eq!(c.flux_user(), ("flux", 1000));
    assert_eq!(c.pull_policy(), "IfNotPresent");
    assert_eq!(p.hosts, ["flux-sample-0"]);
    assert_eq!(p.hostlist, "flux-sample-0");
    assert_eq!(p.quorum(), None, "all declared ranks");
    assert_eq!(p.local_role(), Role::Root);
}

#[test]
fn overrides_and_derived_values() {
    let p = plan(
        "  size: 2\n  maxSize: 5\n  flux: {arch: arm, connectTimeout: '', scheduler: {queuePolicy: easy}}\n  containers: [{image: a, pullAlways: true, imagePullPolicy: Never}]\n",
    );
    assert_eq!(
        p.spec.flux().view_image(),
        "ghcr.io/converged-computing/flux-view-ubuntu:arm-jammy"
    );
    assert_eq!(
        p.spec.flux().connect_timeout(),
        None,
        "empty string omits the attribute"
    );
    assert_eq!(p.spec.flux().queue_policy(), "easy");
    assert_eq!(
        p.spec.containers[0].pull_policy(),
        "Always",
        "pullAlways wins"
    );
    assert_eq!(p.hostlist, "flux-sample-[0-4]");
    assert_eq!(p.quorum(), Some(2), "elastic: start with size brokers");
    let p = plan("  size: 3\n  minSize: 2\n  containers: [{image: a}]\n");
    assert_eq!(p.quorum(), Some(2));
}

#[test]
fn burst_defaults_name_and_size() {
    let p = plan(
        "  size: 3\n  containers: [{image: a}]\n  flux: {bursting: {clusters: [{}, {size: 1, name: gpu}]}}\n",
    );
    let names: Vec<(&str, i32, &str)> = p
        .bursts
        .iter()
        .map(|b| (b.name.as_str(), b.size, b.cluster.as_str()))
        .collect();
    assert_eq!(names, [("burst-0", 3, "burst-0"), ("gpu", 1, "gpu")]);
    assert_eq!(p.hostlist, "flux-sample-[0-2],burst-0-[0-2],gpu-0");
    assert_eq!(p.quorum(), Some(3));
    assert!(p.is_federated());
}
