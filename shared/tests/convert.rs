//! `flux_shared::convert`: a table of v1alpha1 MiniClusters (every field the v1alpha1
//! documentation describes, and the later v1alpha1 additions) with the expected v1alpha2
//! document, losses and notes; errors; pass-through; and every converted document plans
//! and renders.

use flux_shared::api::MiniCluster;
use flux_shared::convert::{Conversion, ConvertError, convert_document};
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::render::render;
use serde_json::Value;

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).expect("test yaml parses")
}

/// The note every converted v1alpha1 document carries: Flux from the application image.
const VIEW_NOTE: &str = "spec.flux.container.disable";
/// Note of a MiniCluster without a headless Service name.
const NETWORK: &str = "spec.network.headlessName";
/// Note of a first-container flux runner without runFluxAsRoot.
const AS_ROOT: &str = "spec.containers[0].commands.runFluxAsRoot";

struct Case {
    name: &'static str,
    input: &'static str,
    /// The whole expected v1alpha2 document.
    output: &'static str,
    /// Fields of the expected losses, in order.
    lost: &'static [&'static str],
    /// Fields of the expected notes besides [`VIEW_NOTE`] (order-insensitive).
    notes: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        name: "hello world",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: flux-sample
  namespace: flux-operator
spec:
  size: 4
  containers:
    - image: ghcr.io/flux-framework/flux-restful-api:latest
      command: echo hello world
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: flux-sample
  namespace: flux-operator
spec:
  size: 4
  containers:
    - image: ghcr.io/flux-framework/flux-restful-api:latest
      command: echo hello world
  flux:
    container:
      disable: true
"#,
        lost: &[],
        notes: &[NETWORK, AS_ROOT],
    },
    Case {
        name: "documented spec-level fields (seed)",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: flux-sample
spec:
  size: 4
  tasks: 4
  interactive: true
  launcher: true
  jobLabels:
    job-attribute-a: dinosaur-a
    job-attribute-b: dinosaur-b
  deadlineSeconds: 100
  cleanup: false
  logging:
    quiet: true
    strict: false
    timed: true
    debug: true
  archive:
    path: /state/archive.tar.gz
  pod:
    labels:
      pod-attribute-a: dinosaur-a
    annotations:
      pod-annotation-a: dinosaur-a
    serviceAccountName: my-service-account
    nodeSelector:
      iam.gke.io/gke-metadata-server-enabled: "true"
  containers:
    - image: ghcr.io/rse-ops/snakemake:app-latest
      command: snakemake --cores 1
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: flux-sample
spec:
  size: 4
  tasks: 4
  interactive: true
  launcher: true
  jobLabels:
    job-attribute-a: dinosaur-a
    job-attribute-b: dinosaur-b
  deadlineSeconds: 100
  cleanup: false
  logging:
    quiet: true
    strict: false
    timed: true
    debug: true
  archive:
    path: /state/archive.tar.gz
  pod:
    labels:
      pod-attribute-a: dinosaur-a
    annotations:
      pod-annotation-a: dinosaur-a
    serviceAccountName: my-service-account
    nodeSelector:
      iam.gke.io/gke-metadata-server-enabled: "true"
  containers:
    - image: ghcr.io/rse-ops/snakemake:app-latest
      command: snakemake --cores 1
  flux:
    container:
      disable: true
"#,
        lost: &[],
        notes: &[NETWORK, AS_ROOT],
    },
    Case {
        name: "documented container fields (seed)",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: lammps
spec:
  size: 2
  containers:
    - name: rabbit
      image: rabbitmq:3.8-management
      runFlux: false
      ports: [15672, 5671, 5672]
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      runFlux: true
      cores: 4
      command: lmp -v x 2 -v y 2 -v z 2 -in in.reaxc.hns -nocite
      workingDir: /home/flux/examples/reaxff/HNS
      imagePullSecret: flux-image-secret
      pullAlways: false
      diagnostics: false
      environment:
        PYTHONPATH: /usr/lib/python3
      resources:
        limits:
          memory: 500M
          cpu: 4
        requests:
          gpu-vendor.example/example-gpu: 1
      fluxOptionFlags: "-ompi=openmpi@5"
      fluxLogLevel: 7
      preCommand: |
        source /etc/profile.d/modules.sh
      commands:
        init: export LD_LIBRARY_PATH=/opt/conda/lib
        pre: |
          echo "I am running the pre-command"
          ls /workdir
        post: echo "Finishing up..."
        prefix: fusion
        runFluxAsRoot: true
      fluxUser:
        uid: 1002
        name: flux
      lifeCycle:
        postStartExec: echo started
        preStopExec: echo stopping
      existingVolumes:
        data:
          path: /workflow
          claimName: data
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: lammps
spec:
  size: 2
  containers:
    - name: rabbit
      image: rabbitmq:3.8-management
      runFlux: false
      ports: [15672, 5671, 5672]
      noWrapEntrypoint: true
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      runFlux: true
      cores: 4
      command: lmp -v x 2 -v y 2 -v z 2 -in in.reaxc.hns -nocite
      workingDir: /home/flux/examples/reaxff/HNS
      imagePullSecret: flux-image-secret
      pullAlways: false
      diagnostics: false
      environment:
        PYTHONPATH: /usr/lib/python3
      resources:
        limits:
          memory: 500M
          cpu: "4"
        requests:
          gpu-vendor.example/example-gpu: "1"
      commands:
        init: export LD_LIBRARY_PATH=/opt/conda/lib
        pre: |
          source /etc/profile.d/modules.sh
          echo "I am running the pre-command"
          ls /workdir
        post: echo "Finishing up..."
        prefix: fusion
      fluxUser:
        uid: 1002
        name: flux
      lifeCycle:
        postStartExec: echo started
        preStopExec: echo stopping
      volumes:
        data:
          path: /workflow
          claimName: data
  flux:
    container:
      disable: true
    optionFlags: "-ompi=openmpi@5"
    logLevel: 7
"#,
        lost: &[],
        notes: &[
            NETWORK,
            "spec.containers[0].noWrapEntrypoint",
            "spec.containers[1].preCommand",
            "spec.containers[1].commands.runFluxAsRoot",
        ],
    },
    Case {
        name: "operator-managed volumes (seed)",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: volumes
spec:
  size: 2
  volumes:
    myvolume:
      path: /full/path/to/volume
      storageClass: hostpath
      labels:
        type: local
      delete: false
    bucket:
      path: /full/path/to/bucket
      storageClass: csi-gcs
      volumeName: manualbucket/path
      capacity: 25Gi
      secret: csi-gcs-secret
      secretNamespace: default
      attributes:
        mounter: geesefs
      annotations:
        provider.svc/attribute: value
      claimAnnotations:
        gcs.csi.ofek.dev/location: us-central1
  containers:
    - image: ghcr.io/rse-ops/atacseq:app-latest
      command: ls /data /bucket
      volumes:
        myvolume:
          path: /data
        bucket:
          path: /bucket
          readOnly: true
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: volumes
spec:
  size: 2
  containers:
    - image: ghcr.io/rse-ops/atacseq:app-latest
      command: ls /data /bucket
      volumes:
        myvolume:
          path: /data
          hostPath: /full/path/to/volume
        bucket:
          path: /bucket
          readOnly: true
          claimName: bucket
  flux:
    container:
      disable: true
"#,
        lost: &[r#"spec.volumes["bucket"]"#, r#"spec.volumes["myvolume"]"#],
        notes: &[NETWORK, AS_ROOT],
    },
    Case {
        name: "RESTful API server, users and passwords",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: restful
spec:
  size: 2
  users:
    - name: peenut
      password: butter
    - name: squidward
  fluxRestful:
    branch: feature-branch
    port: 5000
    secretKey: notsosecrethoo
  containers:
    - image: ghcr.io/flux-framework/flux-restful-api:latest
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: restful
spec:
  size: 2
  containers:
    - image: ghcr.io/flux-framework/flux-restful-api:latest
  flux:
    container:
      disable: true
"#,
        lost: &["spec.users", "spec.fluxRestful"],
        notes: &[NETWORK, AS_ROOT],
    },
    Case {
        name: "no command and interactive: no RESTful server, settings dropped",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: interactive
spec:
  interactive: true
  fluxRestful:
    port: 5001
  containers:
    - image: ghcr.io/flux-framework/flux-restful-api:latest
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: interactive
spec:
  interactive: true
  containers:
    - image: ghcr.io/flux-framework/flux-restful-api:latest
  flux:
    container:
      disable: true
"#,
        lost: &[],
        notes: &[NETWORK, AS_ROOT, "spec.fluxRestful"],
    },
    Case {
        name: "pod resources, runFluxAsRoot false, asFlux override",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: changed
spec:
  pod:
    resources:
      memory: 500M
      cpu: 4
  containers:
    - image: ghcr.io/rse-ops/efa:latest
      command: hostname
      preCommand: |
        asFlux="sudo -u flux -E PYTHONPATH=$PYTHONPATH -E PATH=$PATH -E FI_EFA_USE_DEVICE_RDMA=1"
      commands:
        runFluxAsRoot: false
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: changed
spec:
  containers:
    - image: ghcr.io/rse-ops/efa:latest
      command: hostname
      commands:
        pre: |
          asFlux="sudo -u flux -E PYTHONPATH=$PYTHONPATH -E PATH=$PATH -E FI_EFA_USE_DEVICE_RDMA=1"
  flux:
    container:
      disable: true
"#,
        lost: &[
            "spec.containers[0].preCommand",
            "spec.containers[0].commands.runFluxAsRoot",
            "spec.pod.resources",
        ],
        notes: &[NETWORK, "spec.containers[0].preCommand"],
    },
    Case {
        name: "early names and Go zero values",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: zeros
spec:
  size: 1
  maxSize: 0
  logging:
    test: true
  containers:
    - image: fluxrm/flux-sched:focal
      name: ""
      command: hostname
      cores: 0
      workingDir: ""
      runFlux: false
      fluxOptionFlags: ""
      fluxLogLevel: 0
      ports: []
      environment: {}
      fluxUser:
        name: ""
        uid: 0
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: zeros
spec:
  size: 1
  logging:
    quiet: true
  containers:
    - image: fluxrm/flux-sched:focal
      command: hostname
  flux:
    container:
      disable: true
"#,
        lost: &[],
        notes: &[
            NETWORK,
            AS_ROOT,
            "spec.logging.test",
            "spec.containers[0].cores",
            "spec.containers[0].runFlux",
            "spec.containers[0].fluxLogLevel",
            "spec.containers[0].fluxUser.uid",
        ],
    },
    Case {
        name: "later v1alpha1 fields",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: later
  namespace: default
  uid: 5c8c8a4e-0000-0000-0000-000000000000
  resourceVersion: "1234"
  generation: 2
  creationTimestamp: "2023-10-01T00:00:00Z"
spec:
  size: 2
  maxSize: 4
  shareProcessNamespace: true
  network:
    headlessName: flux-service
  flux:
    installRoot: /usr
    wrap: strace,-e,network,-tt
    connectTimeout: ""
    optionFlags: "-ompi=openmpi@5"
    minimalService: true
    logLevel: 7
    scheduler:
      queuePolicy: easy
    curveCertSecret: curve-secret
    mungeSecret: munge-key
  logging:
    zeromq: true
  containers:
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      runFlux: true
      command: |
        lmp -in in.one
        lmp -in in.two
      batch: true
      batchRaw: false
      logs: /tmp/out
      launcher: false
      secrets:
        TOKEN:
          name: my-secret
          key: token
      securityContext:
        privileged: true
        addCapabilities: [SYS_ADMIN]
      commands:
        brokerPre: echo lead
        workerPre: sleep 10
      existingVolumes:
        config:
          path: /etc/app
          configMapName: config
          items:
            app.conf: app.conf
        certs:
          path: /etc/certs
          secretName: certs
          readOnly: true
    - name: monitor
      image: rockylinux:9
      command: watch flux jobs
      commands:
        init: dnf install -y procps
        pre: echo pre
        brokerPre: echo broker
        post: echo done
        runFluxAsRoot: true
      preCommand: echo ignored
      fluxOptionFlags: -ignored
  services:
    - name: nginx
      image: nginx:latest
      ports: [80]
status:
  jobid: ""
  size: 2
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: later
  namespace: default
spec:
  size: 2
  maxSize: 4
  shareProcessNamespace: true
  network:
    headlessName: flux-service
  flux:
    container:
      disable: true
    wrap: strace,-e,network,-tt
    connectTimeout: ""
    optionFlags: "-ompi=openmpi@5"
    minimalService: true
    logLevel: 7
    scheduler:
      queuePolicy: easy
  logging:
    zeromq: true
  containers:
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      runFlux: true
      command: |
        lmp -in in.one
        lmp -in in.two
      batch: true
      batchRaw: false
      logs: /tmp/out
      launcher: false
      secrets:
        TOKEN:
          name: my-secret
          key: token
      securityContext:
        privileged: true
        capabilities:
          add: [SYS_ADMIN]
      commands:
        brokerPre: echo lead
        workerPre: sleep 10
      volumes:
        config:
          path: /etc/app
          configMapName: config
          items:
            app.conf: app.conf
        certs:
          path: /etc/certs
          secretName: certs
          readOnly: true
    - name: monitor
      image: rockylinux:9
      command: watch flux jobs
      commands:
        init: dnf install -y procps
        servicePre: |-
          echo broker
          echo pre
        post: echo done
  services:
    - name: nginx
      image: nginx:latest
      ports: [80]
"#,
        lost: &["spec.flux.curveCertSecret", "spec.flux.mungeSecret"],
        notes: &[
            AS_ROOT,
            "metadata",
            "status",
            "spec.flux.installRoot",
            "spec.containers[1].commands",
            "spec.containers[1].commands.runFluxAsRoot",
            "spec.containers[1].preCommand",
            "spec.containers[1].fluxOptionFlags",
        ],
    },
    Case {
        name: "bursting",
        input: r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata:
  name: lead
spec:
  size: 2
  flux:
    bursting:
      leadBroker:
        address: ""
        name: ""
        size: 0
      clusters:
        - name: burst-0
          size: 2
        - name: burst-1
          size: 0
  containers:
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      command: hostname
"#,
        output: r#"
apiVersion: flux-framework.org/v1alpha2
kind: MiniCluster
metadata:
  name: lead
spec:
  size: 2
  flux:
    container:
      disable: true
    bursting:
      clusters:
        - name: burst-0
          size: 2
        - name: burst-1
  containers:
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      command: hostname
"#,
        lost: &[],
        notes: &[NETWORK, AS_ROOT, "spec.flux.bursting.clusters"],
    },
];

/// Every field the v1alpha1 documentation (the seed) describes; the table must use each.
const SEED_FIELDS: &[&str] = &[
    "spec.size",
    "spec.tasks",
    "spec.interactive",
    "spec.launcher",
    "spec.jobLabels",
    "spec.deadlineSeconds",
    "spec.volumes.*.path",
    "spec.volumes.*.storageClass",
    "spec.volumes.*.labels",
    "spec.volumes.*.delete",
    "spec.volumes.*.volumeName",
    "spec.volumes.*.attributes",
    "spec.volumes.*.capacity",
    "spec.volumes.*.secret",
    "spec.volumes.*.secretNamespace",
    "spec.volumes.*.annotations",
    "spec.volumes.*.claimAnnotations",
    "spec.cleanup",
    "spec.logging.quiet",
    "spec.logging.strict",
    "spec.logging.timed",
    "spec.logging.debug",
    "spec.logging.test",
    "spec.archive.path",
    "spec.users.name",
    "spec.users.password",
    "spec.pod.labels",
    "spec.pod.annotations",
    "spec.pod.resources",
    "spec.pod.serviceAccountName",
    "spec.pod.nodeSelector",
    "spec.containers.name",
    "spec.containers.image",
    "spec.containers.cores",
    "spec.containers.command",
    "spec.containers.resources.limits",
    "spec.containers.resources.requests",
    "spec.containers.imagePullSecret",
    "spec.containers.workingDir",
    "spec.containers.pullAlways",
    "spec.containers.runFlux",
    "spec.containers.environment",
    "spec.containers.ports",
    "spec.containers.fluxOptionFlags",
    "spec.containers.fluxLogLevel",
    "spec.containers.preCommand",
    "spec.containers.commands.init",
    "spec.containers.commands.pre",
    "spec.containers.commands.post",
    "spec.containers.commands.runFluxAsRoot",
    "spec.containers.commands.prefix",
    "spec.containers.fluxUser.uid",
    "spec.containers.fluxUser.name",
    "spec.containers.diagnostics",
    "spec.containers.lifeCycle.postStartExec",
    "spec.containers.lifeCycle.preStopExec",
    "spec.containers.volumes.*.path",
    "spec.containers.volumes.*.readOnly",
    "spec.containers.existingVolumes.*.path",
    "spec.containers.existingVolumes.*.claimName",
    "spec.fluxRestful.branch",
    "spec.fluxRestful.port",
    "spec.fluxRestful.secretKey",
];

/// Every field path of `v`: list items without index, map keys under `*` for the maps
/// whose keys are names (volumes).
fn paths(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                out.push(p.clone());
                let named = p.ends_with("volumes") || p.ends_with("existingVolumes");
                if named && let Value::Object(entries) = child {
                    for entry in entries.values() {
                        paths(entry, &format!("{p}.*"), out);
                    }
                } else {
                    paths(child, &p, out);
                }
            }
        }
        Value::Array(items) => {
            for item in items {
                paths(item, path, out);
            }
        }
        _ => {}
    }
}

fn renders(c: &Conversion, what: &str) {
    let mc: MiniCluster = serde_json::from_value(c.output.clone()).expect("typed MiniCluster");
    let plan = Plan::new(&mc).unwrap_or_else(|e| panic!("{what}: plan: {e}"));
    let lead = Endpoint {
        address: "192.0.2.1".into(),
        port: 30050,
    };
    let roles = match plan.local_role() {
        Role::Root => plan.roles(&lead),
        local => vec![local],
    };
    for role in roles {
        let objects = render(&plan, &role, "cert").expect("role exists");
        assert!(!objects.is_empty(), "{what}: nothing rendered");
    }
}

#[test]
fn table_converts_as_expected() {
    for case in CASES {
        let input = yaml(case.input);
        let c = convert_document(&input)
            .unwrap_or_else(|e| panic!("{}: {e}\n{:#?}", case.name, e.problems()));
        assert!(!c.passed_through, "{}", case.name);
        let expected = yaml(case.output);
        assert_eq!(
            c.output,
            expected,
            "{}: output\n{}",
            case.name,
            serde_yaml_ng::to_string(&c.output).unwrap_or_default()
        );
        let lost: Vec<&str> = c.lost.iter().map(|l| l.field.as_str()).collect();
        assert_eq!(lost, case.lost, "{}: losses {:#?}", case.name, c.lost);
        assert_eq!(c.is_lossless(), case.lost.is_empty());
        let mut notes: Vec<&str> = c.notes.iter().map(|n| n.field.as_str()).collect();
        notes.sort();
        notes.dedup();
        let mut want: Vec<&str> = case.notes.to_vec();
        want.push(VIEW_NOTE);
        want.sort();
        want.dedup();
        assert_eq!(notes, want, "{}: notes {:#?}", case.name, c.notes);
        renders(&c, case.name);
    }
}

#[test]
fn the_table_covers_every_documented_v1alpha1_field() {
    let mut used = Vec::new();
    for case in CASES {
        paths(&yaml(case.input), "", &mut used);
    }
    let missing: Vec<&&str> = SEED_FIELDS
        .iter()
        .filter(|f| !used.iter().any(|u| u == **f))
        .collect();
    assert!(
        missing.is_empty(),
        "not exercised by the table: {missing:?}"
    );
}

fn loss<'a>(c: &'a Conversion, field: &str) -> &'a str {
    c.lost
        .iter()
        .find(|l| l.field == field)
        .map(|l| l.advice.as_str())
        .unwrap_or_else(|| panic!("no loss for {field}: {:#?}", c.lost))
}

#[test]
fn losses_say_what_to_do_instead() {
    let volumes = convert_document(&yaml(CASES[3].input)).expect("converts");
    let bucket = loss(&volumes, r#"spec.volumes["bucket"]"#);
    for needle in [
        "PersistentVolumeClaim named \"bucket\"",
        "\"csi-gcs\"",
        "\"25Gi\"",
        "claimName",
        "csi-gcs-secret",
    ] {
        assert!(bucket.contains(needle), "{needle:?} in {bucket}");
    }
    let host = loss(&volumes, r#"spec.volumes["myvolume"]"#);
    assert!(host.contains("hostPath"), "{host}");
    assert!(host.contains("/full/path/to/volume"), "{host}");

    let restful = convert_document(&yaml(CASES[4].input)).expect("converts");
    let advice = loss(&restful, "spec.fluxRestful");
    assert!(advice.contains("sidecar"), "{advice}");
    assert!(loss(&restful, "spec.users").contains("RBAC"));
    // Secrets in the input are never echoed.
    let all: String = restful.lost.iter().map(|l| l.to_string()).collect();
    for secret in ["butter", "notsosecrethoo"] {
        assert!(!all.contains(secret), "{secret} leaked: {all}");
    }
    assert_eq!(
        restful.lost[0].to_string(),
        format!(
            "spec.users: no v1alpha2 equivalent: {}",
            restful.lost[0].advice
        )
    );
}

#[test]
fn a_command_means_no_restful_server() {
    let with_command = r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata: {name: job}
spec:
  containers:
    - image: rockylinux:9
      command: hostname
"#;
    let c = convert_document(&yaml(with_command)).expect("converts");
    assert!(c.is_lossless(), "{:#?}", c.lost);
    let diagnostics = with_command.replace("command: hostname", "diagnostics: true");
    let c = convert_document(&yaml(&diagnostics)).expect("converts");
    assert!(c.is_lossless(), "{:#?}", c.lost);
}

fn input_error(text: &str) -> Vec<(String, String)> {
    match convert_document(&yaml(text)) {
        Err(ConvertError::Input(e)) => e.0.into_iter().map(|f| (f.field, f.rule)).collect(),
        other => panic!("expected an input error, got {other:#?}"),
    }
}

#[test]
fn unknown_fields_and_wrong_types_are_errors_naming_the_field() {
    let errors = input_error(
        r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata: {name: bad}
spec:
  sise: 3
  tasks: "4"
  logging: {quiet: yes-please}
  flux: {container: {disable: true}}
  containers:
    - image: rockylinux:9
      imagePullPolicy: Always
      environment: {A: 1}
      volumes:
        data: {path: /data}
"#,
    );
    let fields: Vec<&str> = errors.iter().map(|(f, _)| f.as_str()).collect();
    for want in [
        "spec.sise",
        "spec.tasks",
        "spec.logging.quiet",
        "spec.flux.container",
        "spec.containers[0].imagePullPolicy",
        r#"spec.containers[0].environment["A"]"#,
        r#"spec.containers[0].volumes["data"]"#,
    ] {
        assert!(fields.contains(&want), "{want} not in {errors:#?}");
    }
    let unknown = errors
        .iter()
        .find(|(f, _)| f == "spec.sise")
        .map(|(_, r)| r.as_str());
    assert_eq!(
        unknown,
        Some("unknown v1alpha1 field (not part of the v1alpha1 MiniCluster API)")
    );
}

#[test]
fn broken_v1alpha1_rules_are_errors() {
    let two_runners = input_error(
        r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata: {name: two}
spec:
  containers:
    - {image: a, runFlux: true, command: x}
    - {image: b, runFlux: true, name: b}
"#,
    );
    assert_eq!(two_runners[0].0, "spec.containers");

    let no_image = input_error(
        "apiVersion: flux-framework.org/v1alpha1\nkind: MiniCluster\nmetadata: {name: x}\nspec:\n  containers:\n    - command: hostname\n",
    );
    assert_eq!(no_image[0].0, "spec.containers[0].image");

    let no_spec = input_error(
        "apiVersion: flux-framework.org/v1alpha1\nkind: MiniCluster\nmetadata: {name: x}\n",
    );
    assert_eq!(no_spec[0].0, "spec.containers");

    let conflicting = input_error(
        r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata: {name: x}
spec:
  flux: {optionFlags: "-ompi=openmpi@5"}
  containers:
    - {image: a, command: x, fluxOptionFlags: "-ompi=openmpi@4"}
"#,
    );
    assert_eq!(conflicting[0].0, "spec.containers[0].fluxOptionFlags");

    let test_and_quiet = input_error(
        "apiVersion: flux-framework.org/v1alpha1\nkind: MiniCluster\nmetadata: {name: x}\nspec:\n  logging: {test: true, quiet: false}\n  containers: [{image: a, command: x}]\n",
    );
    assert_eq!(test_and_quiet[0].0, "spec.logging.test");

    let clash = input_error(
        r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata: {name: x}
spec:
  volumes: {data: {path: /d}}
  containers:
    - image: a
      command: x
      volumes: {data: {path: /data}}
      existingVolumes: {data: {path: /data, claimName: data}}
"#,
    );
    assert_eq!(clash[0].0, r#"spec.containers[0].existingVolumes["data"]"#);
}

#[test]
fn a_conversion_that_is_not_valid_v1alpha2_reports_v1alpha2_paths() {
    let doc = yaml(
        r#"
apiVersion: flux-framework.org/v1alpha1
kind: MiniCluster
metadata: {name: ports}
spec:
  containers:
    - image: rockylinux:9
      command: hostname
      ports: [8050]
"#,
    );
    match convert_document(&doc) {
        Err(ConvertError::Output(e)) => {
            assert_eq!(e.0[0].field, "spec.containers[0].ports[0]", "{e}");
        }
        other => panic!("expected a v1alpha2 validation error, got {other:#?}"),
    }
}

#[test]
fn other_documents_pass_through_unchanged() {
    let v1alpha2 = yaml(include_str!("../../examples/hello-world.yaml"));
    for doc in [
        v1alpha2,
        yaml("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\ndata: {a: b}\n"),
        yaml(
            "apiVersion: example.com/v1\nkind: MiniCluster\nmetadata: {name: other}\nspec: {anything: 1}\n",
        ),
        yaml("just a string"),
        yaml("[1, 2, 3]"),
    ] {
        let c = convert_document(&doc).expect("passes through");
        assert!(c.passed_through);
        assert!(c.is_lossless() && c.notes.is_empty());
        assert_eq!(c.output, doc);
    }
}

#[test]
fn invalid_v1alpha2_input_and_unknown_versions_are_errors() {
    let bad = yaml(
        "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: x}\nspec:\n  containers: [{image: a, ports: [\"http\"]}]\n",
    );
    match convert_document(&bad) {
        Err(ConvertError::Output(e)) => assert_eq!(e.0[0].field, "spec.containers[0].ports"),
        other => panic!("expected an output error, got {other:#?}"),
    }
    let invalid = yaml(
        "apiVersion: flux-framework.org/v1alpha2\nkind: MiniCluster\nmetadata: {name: x}\nspec:\n  size: 0\n  containers: [{image: a}]\n",
    );
    match convert_document(&invalid) {
        Err(ConvertError::Output(e)) => assert_eq!(e.0[0].field, "spec.size"),
        other => panic!("expected an output error, got {other:#?}"),
    }
    let future = yaml(
        "apiVersion: flux-framework.org/v1beta1\nkind: MiniCluster\nmetadata: {name: x}\nspec: {}\n",
    );
    match convert_document(&future) {
        Err(ConvertError::Input(e)) => assert_eq!(e.0[0].field, "apiVersion"),
        other => panic!("expected an input error, got {other:#?}"),
    }
}

#[test]
fn lists_convert_their_items() {
    let list = yaml(&format!(
        "apiVersion: v1\nkind: List\nitems:\n{}",
        ["hello", "restful"]
            .iter()
            .map(|name| format!(
                "  - apiVersion: flux-framework.org/v1alpha1\n    kind: MiniCluster\n    metadata: {{name: {name}}}\n    spec:\n      containers: [{{image: rockylinux:9{}}}]\n",
                if *name == "hello" { ", command: hostname" } else { "" }
            ))
            .collect::<String>()
    ));
    let c = convert_document(&list).expect("converts");
    assert!(!c.passed_through);
    assert_eq!(c.output["kind"], "List");
    assert_eq!(
        c.output["items"][0]["apiVersion"],
        "flux-framework.org/v1alpha2"
    );
    assert_eq!(
        c.output["items"][1]["apiVersion"],
        "flux-framework.org/v1alpha2"
    );
    let lost: Vec<&str> = c.lost.iter().map(|l| l.field.as_str()).collect();
    assert_eq!(lost, ["items[1].spec.fluxRestful"]);
}
