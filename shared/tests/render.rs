//! Rendering: the objects of each role, field by field, and determinism.

use flux_shared::api::MiniCluster;
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::{Object, labels, render};

const CERT: &str = "#  ZeroMQ CURVE **Secret** Certificate\n#  DO NOT DISTRIBUTE\n\nmetadata\n    name = \"test\"\ncurve\n    public-key = \"x\"\n    secret-key = \"y\"\n";

fn plan(yaml: &str) -> Plan {
    let mut mc: MiniCluster = serde_yaml_ng::from_str(yaml).expect("yaml");
    mc.metadata.uid = Some("1234-5678".into());
    Plan::new(&mc).expect("valid")
}

fn objects(plan: &Plan, role: &Role) -> Vec<serde_json::Value> {
    render(plan, role, CERT)
        .expect("role exists")
        .iter()
        .map(|o| serde_json::to_value(o).expect("json"))
        .collect()
}

fn find<'a>(objects: &'a [serde_json::Value], kind: &str, name: &str) -> &'a serde_json::Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind}/{name} not rendered"))
}

const SPEC: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: flux-sample, namespace: hpc}
spec:
  size: 4
  maxSize: 6
  deadlineSeconds: 600
  jobLabels: {team: hpc}
  pod:
    labels: {tier: compute}
    annotations: {note: yes}
    nodeSelector: {pool: hpc}
    nodeAffinity: {zone: [a, b]}
    tolerations: [{key: hpc, operator: Exists, effect: NoSchedule}]
  containers:
    - image: rockylinux:9
      command: hostname
      environment: {B: "2", A: "1"}
      secrets: {TOKEN: {name: creds, key: token}}
      volumes:
        data: {path: /data, claimName: data, readOnly: true}
        shm: {emptyDir: true, emptyDirMedium: memory}
      lifeCycle: {preStopExec: "echo bye"}
"#;

#[test]
fn root_job_is_an_indexed_job_of_size_pods() {
    let plan = plan(SPEC);
    let objects = objects(&plan, &Role::Root);
    let kinds: Vec<String> = objects
        .iter()
        .map(|o| {
            format!(
                "{}/{}",
                o["kind"].as_str().unwrap_or(""),
                o["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "ConfigMap/flux-sample-flux-config",
            "Secret/flux-sample-curve",
            "Service/flux-sample",
            "Job/flux-sample"
        ]
    );
    let job = find(&objects, "Job", "flux-sample");
    assert_eq!(job["apiVersion"], "batch/v1");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    assert_eq!(spec["completions"], 4);
    assert_eq!(spec["parallelism"], 4);
    assert_eq!(spec["backoffLimit"], 100);
    assert_eq!(spec["activeDeadlineSeconds"], 600);
    assert_eq!(job["metadata"]["labels"]["team"], "hpc");
    assert_eq!(job["metadata"]["ownerReferences"][0]["uid"], "1234-5678");
    assert_eq!(job["metadata"]["ownerReferences"][0]["controller"], true);
    let template = &spec["template"];
    assert_eq!(template["metadata"]["labels"]["tier"], "compute");
    assert_eq!(
        template["metadata"]["labels"]["flux-framework.org/job"],
        "flux-sample"
    );
    assert_eq!(template["metadata"]["annotations"]["note"], "yes");
    assert!(
        template["metadata"]["labels"].get("team").is_none(),
        "jobLabels stay on the Job"
    );
    let pod = &template["spec"];
    assert_eq!(pod["subdomain"], "flux-sample");
    assert_eq!(pod["restartPolicy"], "OnFailure");
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["nodeSelector"]["pool"], "hpc");
    assert_eq!(pod["tolerations"][0]["key"], "hpc");
    assert_eq!(
        pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
            [0]["matchExpressions"][0]["values"],
        serde_json::json!(["a", "b"])
    );
    // The view container first, no init container (the kubelet starts every container
    // in one pass); the kubelet restarts a killed broker, so no shared process namespace.
    assert!(pod.get("initContainers").is_none());
    assert!(pod.get("shareProcessNamespace").is_none());
    let view = &pod["containers"][0];
    assert_eq!(view["name"], "flux-view");
    assert_eq!(
        view["image"],
        "ghcr.io/converged-computing/flux-view-ubuntu:tag-noble"
    );
    assert_eq!(
        view["command"],
        serde_json::json!(["/bin/bash", "/flux_operator/flux-view-container.sh"])
    );
    let c = &pod["containers"][1];
    assert_eq!(
        template["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"],
        "flux-sample",
        "kubectl logs and exec default to the broker"
    );
    assert_eq!(c["name"], "flux-sample");
    assert_eq!(
        c["command"],
        serde_json::json!(["/bin/bash", "/flux_operator/broker-0.sh"])
    );
    let env: Vec<&str> = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| e["name"].as_str().expect("name"))
        .collect();
    assert_eq!(env, ["A", "B", "TOKEN"]);
    assert_eq!(c["env"][2]["valueFrom"]["secretKeyRef"]["name"], "creds");
    // A leaving broker drains first (the ConfigMap's drain script), then the container's
    // own preStopExec runs; the pod gets the drain timeout plus 30 s to stop.
    assert_eq!(
        c["lifecycle"]["preStop"]["exec"]["command"],
        serde_json::json!([
            "/bin/sh",
            "-c",
            "f=/flux_operator/flux-drain.sh; [ ! -f \"$f\" ] || /bin/bash \"$f\" leave\necho bye"
        ])
    );
    assert_eq!(pod["terminationGracePeriodSeconds"], 330);
    let mounts: Vec<String> = c["volumeMounts"]
        .as_array()
        .expect("mounts")
        .iter()
        .map(|m| {
            format!(
                "{}:{}",
                m["name"].as_str().unwrap_or(""),
                m["mountPath"].as_str().unwrap_or("")
            )
        })
        .collect();
    for expected in [
        "flux-view:/mnt/flux",
        "flux-config:/flux_operator",
        "flux-curve:/flux_operator_curve",
        "data:/data",
        "shm:/dev/shm",
    ] {
        assert!(
            mounts.contains(&expected.to_string()),
            "{expected} not in {mounts:?}"
        );
    }
    let volumes = pod["volumes"].as_array().expect("volumes");
    let shm = volumes.iter().find(|v| v["name"] == "shm").expect("shm");
    assert_eq!(shm["emptyDir"]["medium"], "Memory");
    let data = volumes.iter().find(|v| v["name"] == "data").expect("data");
    assert_eq!(data["persistentVolumeClaim"]["claimName"], "data");
    let curve = volumes
        .iter()
        .find(|v| v["name"] == "flux-curve")
        .expect("curve");
    assert_eq!(curve["secret"]["secretName"], "flux-sample-curve");
}

#[test]
fn without_draining_the_container_keeps_its_own_hooks_and_the_default_grace() {
    let plan = plan(&SPEC.replace(
        "  deadlineSeconds: 600\n",
        "  deadlineSeconds: 600\n  flux: {drainTimeoutSeconds: 0}\n",
    ));
    let objects = objects(&plan, &Role::Root);
    let job = find(&objects, "Job", "flux-sample");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(
        pod["containers"][1]["lifecycle"]["preStop"]["exec"]["command"],
        serde_json::json!(["/bin/sh", "-c", "echo bye"])
    );
    assert!(pod.get("terminationGracePeriodSeconds").is_none());
    let cm = find(&objects, "ConfigMap", "flux-sample-flux-config");
    assert!(cm["data"].get("flux-drain.sh").is_none());
    let items = pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "flux-config"))
        .map(|v| v["configMap"]["items"].to_string())
        .unwrap_or_default();
    assert!(!items.contains("flux-drain.sh"), "{items}");
    assert!(
        !cm["data"]["broker-0.sh"]
            .as_str()
            .unwrap_or_default()
            .contains("rejoin"),
        "no drain to take back"
    );
}

#[test]
fn headless_service_publishes_pods_before_they_are_ready() {
    let plan = plan(SPEC);
    let objects = objects(&plan, &Role::Root);
    let svc = find(&objects, "Service", "flux-sample");
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["publishNotReadyAddresses"], true);
    let job = find(&objects, "Job", "flux-sample");
    for (k, v) in svc["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(
            &job["spec"]["template"]["metadata"]["labels"][k], v,
            "selector {k} matches the pods"
        );
    }
}

#[test]
fn config_map_carries_flux_config_and_scripts() {
    let plan = plan(SPEC);
    let objects = objects(&plan, &Role::Root);
    let cm = find(&objects, "ConfigMap", "flux-sample-flux-config");
    let keys: Vec<&String> = cm["data"].as_object().expect("data").keys().collect();
    assert_eq!(
        keys,
        [
            "R",
            "broker-0.sh",
            "broker.toml",
            "flux-drain.sh",
            "flux-view-container.sh"
        ]
    );
    assert!(
        cm["data"]["broker.toml"]
            .as_str()
            .expect("toml")
            .contains("flux-sample-[0-5]")
    );
    let secret = find(&objects, "Secret", "flux-sample-curve");
    assert!(secret["data"]["curve.cert"].is_string());
}

const BURSTING: &str = r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata: {name: lead, namespace: hpc}
spec:
  size: 2
  containers: [{image: ubuntu:noble}]
  flux:
    bursting:
      clusters: [{name: burst-a, size: 3, cluster: spoke-1}]
"#;

#[test]
fn root_of_a_bursting_minicluster_exposes_the_lead_broker() {
    let plan = plan(BURSTING);
    let objects = objects(&plan, &Role::Root);
    let lead = find(&objects, "Service", "lead-lead");
    assert_eq!(lead["spec"]["type"], "NodePort");
    assert_eq!(lead["spec"]["ports"][0]["port"], 8050);
    assert_eq!(
        lead["spec"]["selector"]["batch.kubernetes.io/job-completion-index"],
        "0"
    );
    assert_eq!(lead["spec"]["selector"]["flux-framework.org/job"], "lead");
}

/// The first burst, its brokers dialling the lead at 198.51.100.4:31000.
fn first_burst() -> Role {
    Role::Burst {
        index: 0,
        lead: Endpoint {
            address: "198.51.100.4".into(),
            port: 31000,
        },
    }
}

#[test]
fn burst_role_renders_the_burst_job_without_owner_references() {
    let plan = plan(BURSTING);
    let role = first_burst();
    let objects = objects(&plan, &role);
    let job = find(&objects, "Job", "burst-a");
    assert_eq!(job["spec"]["parallelism"], 3);
    assert_eq!(job["spec"]["template"]["spec"]["subdomain"], "burst-a");
    assert!(
        job["metadata"].get("ownerReferences").is_none(),
        "other cluster: no owner"
    );
    assert_eq!(
        job["metadata"]["labels"]["flux-framework.org/role"],
        "burst"
    );
    assert_eq!(
        job["metadata"]["labels"]["flux-framework.org/burst"],
        "burst-a"
    );
    assert!(
        objects.iter().all(|o| o["metadata"]["name"] != "lead-lead"),
        "no NodePort in a burst"
    );
    let cm = find(&objects, "ConfigMap", "burst-a-flux-config");
    let toml = cm["data"]["broker.toml"].as_str().expect("toml");
    assert!(
        toml.contains("{ host = \"lead-0\", connect = \"tcp://198.51.100.4:31000\" }"),
        "{toml}"
    );
    assert!(
        render(
            &plan,
            &Role::Burst {
                index: 5,
                lead: Endpoint {
                    address: "x".into(),
                    port: 1
                }
            },
            CERT
        )
        .is_none()
    );
}

#[test]
fn a_burst_scaled_to_zero_keeps_its_objects_and_a_suspended_job() {
    let plan = plan(&BURSTING.replace(
        "{name: burst-a, size: 3, cluster: spoke-1}",
        "{name: burst-a, size: 0, maxSize: 3, cluster: spoke-1}",
    ));
    let role = first_burst();
    let burst = objects(&plan, &role);
    let job = find(&burst, "Job", "burst-a");
    assert_eq!(job["spec"]["suspend"], true, "no pod runs");
    assert_eq!(
        (&job["spec"]["completions"], &job["spec"]["parallelism"]),
        (&1.into(), &1.into()),
        "never 0 completions: that Job would complete for good"
    );
    find(&burst, "ConfigMap", "burst-a-flux-config");
    find(&burst, "Service", "burst-a");
    // Every rank keeps its host: the root's hostlist declares the burst's maxSize.
    assert_eq!(
        plan.hosts,
        ["lead-0", "lead-1", "burst-a-0", "burst-a-1", "burst-a-2"]
    );
    let root = objects(&plan, &Role::Root);
    assert!(
        find(&root, "Job", "lead")["spec"].get("suspend").is_none(),
        "the root Job's suspend is its queue manager's (or spec.suspend's), never the burst's"
    );
    let suspended = self::plan(&BURSTING.replace("spec:\n", "spec:\n  suspend: true\n"));
    let root = objects(&suspended, &Role::Root);
    let job = find(&root, "Job", "lead");
    assert_eq!(job["spec"]["suspend"], true, "created suspended");
    assert_eq!(job["metadata"]["annotations"][labels::SUSPEND], "true");
    let burst = objects(&suspended, &first_burst());
    assert_eq!(
        find(&burst, "Job", "burst-a")["spec"]["suspend"],
        false,
        "a burst follows its own size"
    );
}

#[test]
fn minimal_service_selects_only_the_lead() {
    let plan = plan(&SPEC.replace("  size: 4\n", "  size: 4\n  flux: {minimalService: true}\n"));
    let objects = objects(&plan, &Role::Root);
    let svc = find(&objects, "Service", "flux-sample");
    assert!(svc["spec"].get("clusterIP").is_none());
    assert_eq!(svc["spec"]["ports"][0]["port"], 8050);
    assert_eq!(
        svc["spec"]["selector"]["batch.kubernetes.io/job-completion-index"],
        "0"
    );
}

#[test]
fn custom_curve_cert_wins() {
    let cert = flux_shared::curve::CurveCert::from_secret([7; 32], "mine").to_zcert();
    let indented: String = cert.lines().map(|l| format!("      {l}\n")).collect();
    let plan = plan(&SPEC.replace(
        "  size: 4\n",
        &format!("  size: 4\n  flux:\n    curveCert: |\n{indented}"),
    ));
    let objects = objects(&plan, &Role::Root);
    let secret = find(&objects, "Secret", "flux-sample-curve");
    let stored = secret["data"]["curve.cert"].as_str().expect("base64");
    let decoded: k8s_openapi::ByteString =
        serde_json::from_value(serde_json::Value::String(stored.into())).expect("b64");
    assert_eq!(String::from_utf8(decoded.0).expect("utf8"), cert);
}

#[test]
fn rendering_is_deterministic() {
    let plan = plan(SPEC);
    let a = serde_json::to_string(&render(&plan, &Role::Root, CERT)).expect("json");
    let b = serde_json::to_string(&render(&plan, &Role::Root, CERT)).expect("json");
    assert_eq!(a, b);
    assert!(matches!(
        render(&plan, &Role::Root, CERT).expect("root").last(),
        Some(Object::Job(_))
    ));
}

/// The broker pod of `yaml`'s root.
fn root_pod(yaml: &str) -> serde_json::Value {
    let objects = objects(&plan(yaml), &Role::Root);
    find(&objects, "Job", "flux-sample")["spec"]["template"]["spec"].clone()
}

fn container_names(list: &serde_json::Value) -> Vec<&str> {
    list.as_array()
        .into_iter()
        .flatten()
        .map(|c| c["name"].as_str().unwrap_or(""))
        .collect()
}

fn mounted_keys(pod: &serde_json::Value) -> String {
    pod["volumes"]
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "flux-config"))
        .map(|v| v["configMap"]["items"].to_string())
        .unwrap_or_default()
}

#[test]
fn the_view_container_runs_as_the_broker_unless_told_otherwise() {
    let restricted = SPEC.replace(
        "      lifeCycle: {preStopExec: \"echo bye\"}\n",
        "      lifeCycle: {preStopExec: \"echo bye\"}\n      securityContext: {runAsUser: 1000, runAsNonRoot: true, capabilities: {drop: [ALL]}}\n",
    );
    let pod = root_pod(&restricted);
    assert_eq!(
        pod["containers"][0]["securityContext"],
        pod["containers"][1]["securityContext"]
    );
    assert_eq!(pod["containers"][0]["securityContext"]["runAsUser"], 1000);
    let own = restricted.replace(
        "  deadlineSeconds: 600\n",
        "  deadlineSeconds: 600\n  flux: {container: {securityContext: {runAsUser: 2000}}}\n",
    );
    let pod = root_pod(&own);
    assert_eq!(pod["containers"][0]["securityContext"]["runAsUser"], 2000);
}

#[test]
fn init_container_keeps_the_reference_pod_and_so_does_an_unwatched_pod_that_restarts_nothing() {
    let never = SPEC.replace(
        "    nodeSelector: {pool: hpc}\n",
        "    nodeSelector: {pool: hpc}\n    restartPolicy: Never\n",
    );
    for (spec, extra) in [
        (SPEC, "  flux: {container: {initContainer: true}}\n"),
        (never.as_str(), "  shareProcessNamespace: false\n"),
    ] {
        let pod = root_pod(&spec.replace(
            "  deadlineSeconds: 600\n",
            &format!("  deadlineSeconds: 600\n{extra}"),
        ));
        assert_eq!(
            container_names(&pod["initContainers"]),
            ["flux-view"],
            "{extra}"
        );
        assert_eq!(
            container_names(&pod["containers"]),
            ["flux-sample"],
            "{extra}"
        );
        assert_eq!(
            pod["initContainers"][0]["command"],
            serde_json::json!(["/bin/bash", "/flux_operator/flux-init.sh"])
        );
        let items = mounted_keys(&pod);
        assert!(items.contains("flux-init.sh"), "{items}");
        assert!(!items.contains("flux-view-container.sh"), "{items}");
    }
    let pod = root_pod(&SPEC.replace(
        "  deadlineSeconds: 600\n",
        "  deadlineSeconds: 600\n  flux: {container: {initContainer: true}}\n",
    ));
    assert!(pod.get("shareProcessNamespace").is_none());
}

#[test]
fn flux_from_the_application_image_needs_no_view_container_at_all() {
    let pod = root_pod(&SPEC.replace(
        "  deadlineSeconds: 600\n",
        "  deadlineSeconds: 600\n  flux: {container: {disable: true}}\n",
    ));
    assert!(pod.get("initContainers").is_none());
    assert!(pod.get("shareProcessNamespace").is_none());
    assert_eq!(container_names(&pod["containers"]), ["flux-sample"]);
    let items = mounted_keys(&pod);
    assert!(!items.contains("flux-init.sh") && !items.contains("flux-view-container.sh"));
}

/// The view image as an image volume: no view container, no init container, no shared
/// process namespace (nothing watches the broker), the volume mounted read-only in every
/// container that uses the view, with the view's pull policy; the Job says so.
#[test]
fn an_image_volume_view_has_no_view_container_and_mounts_the_view_image() {
    let never = SPEC.replace(
        "    nodeSelector: {pool: hpc}\n",
        "    nodeSelector: {pool: hpc}\n    restartPolicy: Never\n",
    );
    for spec in [SPEC, never.as_str()] {
        let yaml = spec.replace(
            "  deadlineSeconds: 600\n",
            "  deadlineSeconds: 600\n  flux: {container: {imageVolume: true, pullAlways: true}}\n",
        );
        let objects = objects(&plan(&yaml), &Role::Root);
        let job = find(&objects, "Job", "flux-sample");
        assert_eq!(
            job["metadata"]["annotations"]["flux-framework.org/view"],
            "image-volume"
        );
        let pod = &job["spec"]["template"]["spec"];
        assert!(pod.get("initContainers").is_none());
        assert!(pod.get("shareProcessNamespace").is_none());
        assert_eq!(container_names(&pod["containers"]), ["flux-sample"]);
        let volume = pod["volumes"]
            .as_array()
            .and_then(|v| v.iter().find(|v| v["name"] == "flux-view-image"))
            .expect("the view image volume");
        assert_eq!(
            volume["image"],
            serde_json::json!({
                "reference": "ghcr.io/converged-computing/flux-view-ubuntu:tag-noble",
                "pullPolicy": "Always"
            })
        );
        let mount = pod["containers"][0]["volumeMounts"]
            .as_array()
            .and_then(|m| m.iter().find(|m| m["name"] == "flux-view-image"))
            .expect("mounted");
        assert_eq!(mount["mountPath"], "/flux_operator_view");
        assert_eq!(mount["readOnly"], true);
        let items = mounted_keys(pod);
        assert!(!items.contains("flux-init.sh") && !items.contains("flux-view-container.sh"));
        // kubectl needs no default container: there is one.
        assert!(
            job["spec"]["template"]["metadata"]["annotations"]
                .get("kubectl.kubernetes.io/default-container")
                .is_none()
        );
    }
}

/// Unset, `imageVolume` follows the cluster; `false` never mounts the view image, `true`
/// always does; `initContainer` and `disable` win over a cluster's image volumes.
#[test]
fn the_view_mode_follows_the_cluster_unless_the_spec_says() {
    use flux_shared::api::ViewMode;
    let mode = |extra: &str, image_volumes: bool| {
        let yaml = SPEC.replace(
            "  deadlineSeconds: 600\n",
            &format!("  deadlineSeconds: 600\n{extra}"),
        );
        plan(&yaml).spec.view_mode_on(image_volumes)
    };
    assert_eq!(mode("", true), ViewMode::ImageVolume);
    assert_eq!(mode("", false), ViewMode::Alongside);
    let off = "  flux: {container: {imageVolume: false}}\n";
    assert_eq!(mode(off, true), ViewMode::Alongside);
    let on = "  flux: {container: {imageVolume: true}}\n";
    assert_eq!(mode(on, false), ViewMode::ImageVolume);
    let init = "  flux: {container: {initContainer: true}}\n";
    assert_eq!(mode(init, true), ViewMode::InitContainer);
    let disabled = "  flux: {container: {disable: true}}\n";
    assert_eq!(mode(disabled, true), ViewMode::Image);
    // Nothing to watch with an image volume: an unwatched pod may have one.
    let unwatched = "  shareProcessNamespace: false\n";
    let never = |extra: &str, image_volumes: bool| {
        let yaml = SPEC
            .replace(
                "    nodeSelector: {pool: hpc}\n",
                "    nodeSelector: {pool: hpc}\n    restartPolicy: Never\n",
            )
            .replace(
                "  deadlineSeconds: 600\n",
                &format!("  deadlineSeconds: 600\n{extra}"),
            );
        plan(&yaml).spec.view_mode_on(image_volumes)
    };
    assert_eq!(never(unwatched, true), ViewMode::ImageVolume);
    assert_eq!(never(unwatched, false), ViewMode::InitContainer);
}

/// `imageVolume: true` cannot go with a view that comes from elsewhere.
#[test]
fn an_image_volume_with_an_init_container_or_no_view_is_refused() {
    for (extra, rule) in [
        ("{imageVolume: true, initContainer: true}", "initContainer"),
        ("{imageVolume: true, disable: true}", "disable"),
    ] {
        let yaml = SPEC.replace(
            "  deadlineSeconds: 600\n",
            &format!("  deadlineSeconds: 600\n  flux: {{container: {extra}}}\n"),
        );
        let mc: MiniCluster = serde_yaml_ng::from_str(&yaml).expect("yaml");
        let error = Plan::new(&mc).expect_err(extra).to_string();
        assert!(
            error.contains("spec.flux.container.imageVolume") && error.contains(rule),
            "{error}"
        );
    }
}

#[test]
fn a_pod_that_restarts_nothing_shares_its_process_namespace_unless_it_has_the_host_s() {
    // The view container then sees a killed broker go.
    let never = SPEC.replace(
        "    nodeSelector: {pool: hpc}\n",
        "    nodeSelector: {pool: hpc}\n    restartPolicy: Never\n",
    );
    let pod = root_pod(&never);
    assert_eq!(
        container_names(&pod["containers"]),
        ["flux-view", "flux-sample"]
    );
    assert_eq!(pod["shareProcessNamespace"], true);
    // hostPID: the node's namespace, which its containers see (and Kubernetes refuses
    // both at once).
    let pod = root_pod(&never.replace(
        "    restartPolicy: Never\n",
        "    restartPolicy: Never\n    hostPID: true\n",
    ));
    assert_eq!(
        container_names(&pod["containers"]),
        ["flux-view", "flux-sample"]
    );
    assert!(pod.get("shareProcessNamespace").is_none());
    assert_eq!(pod["hostPID"], true);
    // Restarted containers: the spec's own choice stands.
    let pod = root_pod(&SPEC.replace(
        "  deadlineSeconds: 600\n",
        "  deadlineSeconds: 600\n  shareProcessNamespace: false\n",
    ));
    assert_eq!(
        container_names(&pod["containers"]),
        ["flux-view", "flux-sample"]
    );
    assert_eq!(pod["shareProcessNamespace"], false);
}

/// A Job tells how its pods got the view, for every mode; a value of a later release is
/// not read as any of them.
#[test]
fn a_job_says_how_its_pods_get_the_view() {
    use flux_shared::api::ViewMode;
    use flux_shared::render::live_view_mode;
    for mode in [
        ViewMode::Alongside,
        ViewMode::InitContainer,
        ViewMode::Image,
        ViewMode::ImageVolume,
    ] {
        let mut plan = plan(SPEC);
        plan.view_mode = mode;
        let Some(Object::Job(job)) = render(&plan, &Role::Root, CERT)
            .expect("root")
            .into_iter()
            .find(|o| matches!(o, Object::Job(_)))
        else {
            panic!("no Job")
        };
        assert_eq!(live_view_mode(&job.metadata), Some(mode), "{mode:?}");
    }
    let later = k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        annotations: Some([(labels::VIEW.to_string(), "teleported".to_string())].into()),
        ..Default::default()
    };
    assert_eq!(live_view_mode(&later), None);
}
