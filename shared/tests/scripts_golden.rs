//! Golden tests of the entrypoint scripts (`flux_shared::scripts`), plus syntax
//! (`bash -n`) and lint (`shellcheck`) checks of every generated script and of the shell
//! sources kept as plain files (`src/scripts/drain.sh`).
//!
//! Goldens live in `tests/golden/scripts/`; run with `UPDATE_GOLDEN=1` to rewrite them
//! (plain files, byte for byte, for the reason given in `render_golden.rs`).
//! The lint test needs `shellcheck` (`apt-get install -y shellcheck`).

use std::fs;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use flux_shared::api::{MiniCluster, ViewMode};
use flux_shared::plan::{Endpoint, Plan, Role};
use flux_shared::scripts;

/// One representative MiniCluster and the role to render it for.
struct Case {
    name: &'static str,
    yaml: &'static str,
    burst: bool,
}

/// Shellcheck notes that only concern literal user data: in `hostile-input`, values
/// full of `$`, backticks and quotes are single-quoted on purpose, and shellcheck's
/// info-level hints SC2016 ("expressions don't expand in single quotes") and SC1003
/// ("want to escape a single quote?") fire on that data. No other case excludes
/// anything: the generated scripts carry their own precise `disable` directives.
const DATA_ONLY_NOTES: &str = "SC2016,SC1003";

const CASES: &[Case] = &[
    Case {
        name: "on-demand",
        yaml: r#"
metadata: {name: on-demand, namespace: default}
spec:
  size: 2
  interactive: true
  flux:
    bursting:
      autoscale: {scaleUpAfterSeconds: 30}
      clusters: [{name: gke, size: 0, maxSize: 8}]
  containers:
    - image: rockylinux:9
"#,
        burst: false,
    },
    Case {
        name: "hello-world",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 4
  containers:
    - image: rockylinux:9
      command: echo hello world
"#,
        burst: false,
    },
    Case {
        name: "init-container",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 4
  flux: {container: {initContainer: true}}
  containers:
    - image: rockylinux:9
      command: echo hello world
"#,
        burst: false,
    },
    Case {
        name: "image-volume",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 4
  flux: {container: {imageVolume: true}}
  containers:
    - image: rockylinux:9
      name: broker
      runFlux: true
      command: echo hello world
    - image: rockylinux:9
      name: monitor
      command: sleep infinity
"#,
        burst: false,
    },
    Case {
        name: "size4-tasks4",
        yaml: r#"
metadata: {name: lammps, namespace: hpc}
spec:
  size: 4
  tasks: 4
  containers:
    - image: ghcr.io/converged-computing/metric-lammps:latest
      workingDir: /opt/lammps/examples/reaxff/HNS
      command: lmp -v x 2 -v y 2 -v z 2 -in in.reaxff.hns -nocite
  flux:
    optionFlags: "-ompi=openmpi@5 -o cpu-affinity=per-task"
"#,
        burst: false,
    },
    Case {
        name: "tasks0",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  tasks: 0
  containers:
    - image: rockylinux:9
      command: hostname
"#,
        burst: false,
    },
    Case {
        name: "batch",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  containers:
    - image: rockylinux:9
      batch: true
      logs: /tmp/out
      command: |
        echo hello world 1

        echo hello world 2
"#,
        burst: false,
    },
    Case {
        name: "batch-raw",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  logging: {debug: true}
  containers:
    - image: rockylinux:9
      batch: true
      batchRaw: true
      command: |
        flux filemap map -C /data mpi.sif
        flux exec -x 0 -r all flux filemap get -C /data
        flux submit singularity exec /data/mpi.sif /opt/mpitest
        flux queue idle
"#,
        burst: false,
    },
    Case {
        name: "launcher",
        yaml: r#"
metadata: {name: snakemake, namespace: default}
spec:
  size: 2
  containers:
    - image: ghcr.io/rse-ops/atacseq:app-latest
      launcher: true
      command: snakemake --cores 1 --executor flux
      commands:
        prefix: fusion
"#,
        burst: false,
    },
    Case {
        name: "interactive",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  interactive: true
  containers:
    - image: rockylinux:9
"#,
        burst: false,
    },
    Case {
        name: "diagnostics",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  containers:
    - image: rockylinux:9
      diagnostics: true
      command: hostname
"#,
        burst: false,
    },
    Case {
        name: "timed-quiet",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  logging: {timed: true, quiet: true, strict: false}
  containers:
    - image: rockylinux:9
      command: echo hello world
      commands:
        init: echo init
        post: echo post
"#,
        burst: false,
    },
    Case {
        name: "archive",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  archive: {path: /state/archive.tar.gz}
  containers:
    - image: rockylinux:9
      command: echo hello world
"#,
        burst: false,
    },
    Case {
        name: "custom-script",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  flux:
    wrap: strace,-e,network,-tt
    completeWorkers: true
    environment:
      OMPI_MCA_btl: self,tcp
  containers:
    - image: rockylinux:9
      commands:
        pre: echo "I am running the pre-command"
        brokerPre: echo lead
        workerPre: echo worker
        script: |
          #!/bin/bash
          echo "This is rank ${FLUX_TASK_RANK}"
          echo 'single quotes' `date` $HOME
"#,
        burst: false,
    },
    Case {
        name: "sidecar",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  containers:
    - image: rockylinux:9
      runFlux: true
      command: sleep 10
    - image: rabbitmq:3
      name: rabbit
      command: rabbitmq-server
      commands:
        servicePre: echo waiting for flux
        post: echo finished
    - image: nginx
      name: web
      noWrapEntrypoint: true
"#,
        burst: false,
    },
    Case {
        name: "burst",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  minSize: 2
  containers:
    - image: rockylinux:9
      command: hostname
  flux:
    bursting:
      clusters:
        - {name: burst-0, size: 2}
"#,
        burst: true,
    },
    Case {
        name: "view-disabled",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  flux:
    container:
      image: ubuntu:focal
      disable: true
    disableSocket: true
    connectTimeout: ""
    topology: kary:2
    logLevel: 7
  logging: {zeromq: true}
  containers:
    - image: ghcr.io/rse-ops/lammps:flux-sched-focal
      command: lmp -in in.lj
"#,
        burst: false,
    },
    Case {
        name: "custom-mount",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 3
  maxSize: 5
  flux:
    submitCommand: flux mini submit
    container:
      mountPath: /opt/my flux/
      pythonPath: /opt/my flux/view/lib/python3.11/site-packages
  containers:
    - image: rockylinux:9
      command: echo hello
"#,
        burst: false,
    },
    Case {
        name: "hostile-input",
        yaml: r#"
metadata: {name: flux-sample, namespace: default}
spec:
  size: 2
  archive: {path: "/state/it's $(touch /tmp/pwned).tar"}
  flux:
    wrap: "a'b,$(id)"
    optionFlags: "-o 'x y' `id`"
    submitCommand: "flux submit --setattr=x=$HOME"
    environment:
      QUOTED: "it's \"$HOME\" `id`\nnext line"
      "not a name": dropped
    container:
      mountPath: "/mnt/it's $x"
      pythonPath: "/p'$(id)"
  containers:
    - image: rockylinux:9
      logs: "/tmp/o'$(id)"
      batch: true
      command: |
        echo "$HOME" 'x' `id` ; true
        FLUX_OPERATOR_SCRIPT_EOF
"#,
        burst: false,
    },
];

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/scripts")
}

/// Every script of a case, keyed by golden file name.
fn render(case: &Case) -> Vec<(String, String)> {
    let mc: MiniCluster = serde_yaml_ng::from_str(case.yaml)
        .unwrap_or_else(|e| panic!("{}: bad YAML: {e}", case.name));
    let plan = Plan::new(&mc).unwrap_or_else(|e| panic!("{}: invalid: {e}", case.name));
    let role = if case.burst {
        Role::Burst {
            index: 0,
            lead: Endpoint {
                address: "203.0.113.7".into(),
                port: 30050,
            },
        }
    } else {
        Role::Root
    };
    let target = plan
        .target(&role)
        .unwrap_or_else(|| panic!("{}: no target", case.name));
    // The script of the pod's view container, or of its copying init container.
    let mut out = match plan.spec.view_mode() {
        ViewMode::Alongside => vec![(
            format!("{}.view.sh", case.name),
            scripts::view_container_script(&plan, &target),
        )],
        ViewMode::InitContainer => vec![(
            format!("{}.init.sh", case.name),
            scripts::init_script(&plan, &target),
        )],
        ViewMode::Image | ViewMode::ImageVolume => Vec::new(),
    };
    out.push((
        format!("{}.broker.sh", case.name),
        scripts::broker_script(&plan, &target),
    ));
    if let Some(drain) = scripts::drain_script(&plan, &target) {
        out.push((format!("{}.drain.sh", case.name), drain));
    }
    if let Some(reporter) = scripts::reporter_script(&plan, &target) {
        out.push((format!("{}.reporter.py", case.name), reporter));
    }
    for (i, c) in plan.spec.containers.iter().enumerate() {
        if i != plan.runner && !c.no_wrap_entrypoint.unwrap_or(false) {
            out.push((
                format!("{}.sidecar-{i}.sh", case.name),
                scripts::sidecar_script(&plan, &target, i),
            ));
        }
    }
    out
}

fn all_scripts() -> Vec<(String, String)> {
    CASES.iter().flat_map(render).collect()
}

/// The shell scripts kept as plain files in `src/scripts/` (their placeholders are plain
/// words to the shell), checked as they are besides every script rendered from them.
const SHELL_SOURCES: &[&str] = &["drain.sh", "view_container.sh"];

fn shell_sources() -> Vec<(String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src/scripts");
    SHELL_SOURCES
        .iter()
        .map(|name| {
            let text = fs::read_to_string(dir.join(name))
                .unwrap_or_else(|e| panic!("src/scripts/{name}: {e}"));
            (format!("src/scripts/{name}"), text)
        })
        .collect()
}

fn is_hostile(file: &str) -> bool {
    file.starts_with("hostile-input.")
}

#[test]
fn scripts_match_goldens() {
    let dir = golden_dir();
    let update = std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1");
    let mut failures = Vec::new();
    let scripts = all_scripts();
    // A golden no case renders any more is a stale one (a renamed case's, say).
    let rendered: std::collections::BTreeSet<&str> =
        scripts.iter().map(|(file, _)| file.as_str()).collect();
    for entry in fs::read_dir(&dir).expect("golden directory").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !rendered.contains(name.as_str()) {
            failures.push(format!("{name}: no case renders it (remove it)"));
        }
    }
    for (file, script) in scripts {
        let path = dir.join(&file);
        if update {
            fs::create_dir_all(&dir).expect("create golden directory");
            fs::write(&path, &script).expect("write golden");
            continue;
        }
        match fs::read_to_string(&path) {
            Ok(expected) if expected == script => {}
            Ok(_) => failures.push(format!("{file}: differs (UPDATE_GOLDEN=1 to accept)")),
            Err(e) => failures.push(format!("{file}: {e} (UPDATE_GOLDEN=1 to create)")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn scripts_are_deterministic() {
    assert_eq!(all_scripts(), all_scripts());
}

#[test]
fn scripts_pass_bash_syntax_check() {
    for (file, script) in all_scripts()
        .into_iter()
        .filter(|(f, _)| !f.ends_with(".py"))
        .chain(shell_sources())
    {
        let mut child = Command::new("bash")
            .arg("-n")
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run bash");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("write script");
        let out = child.wait_with_output().expect("wait for bash");
        assert!(
            out.status.success(),
            "{file}: bash -n failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The queue reporters parse as Python (the interpreter of `flux python` is Python 3).
#[test]
fn reporters_are_valid_python() {
    let reporters: Vec<_> = all_scripts()
        .into_iter()
        .filter(|(f, _)| f.ends_with(".py"))
        .collect();
    assert!(!reporters.is_empty(), "a case renders a reporter");
    for (file, script) in reporters {
        let mut child = Command::new("python3")
            .args(["-c", "import ast, sys; ast.parse(sys.stdin.read())"])
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run python3");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("write script");
        let out = child.wait_with_output().expect("wait for python3");
        assert!(
            out.status.success(),
            "{file}: not valid Python:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn scripts_pass_shellcheck() {
    let version = Command::new("shellcheck").arg("--version").output();
    assert!(
        version.is_ok_and(|o| o.status.success()),
        "shellcheck is required for this test: install it (apt-get install -y shellcheck)"
    );
    let mut failures = Vec::new();
    for (file, script) in all_scripts()
        .into_iter()
        .filter(|(f, _)| !f.ends_with(".py"))
        .chain(shell_sources())
    {
        let mut cmd = Command::new("shellcheck");
        cmd.args(["--shell=bash", "--severity=style"]);
        if is_hostile(&file) {
            cmd.arg(format!("--exclude={DATA_ONLY_NOTES}"));
        }
        let mut child = cmd
            .arg("-")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run shellcheck");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(script.as_bytes())
            .expect("write script");
        let out = child.wait_with_output().expect("wait for shellcheck");
        if !out.status.success() {
            failures.push(format!("{file}:\n{}", String::from_utf8_lossy(&out.stdout)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
