//! Unit tests of the script generators (the scripts' whole text is checked by the
//! golden tests, and run by shellcheck and bash in `tests/`).

use crate::api::MiniCluster;
use crate::plan::{Endpoint, Plan, Role};

use super::program::{script_invocation, write_script_file};
use super::shell::{Sh, dq_text, fill, is_identifier, one_line, parent, split_words, sq, word};
use super::steps::Ctx;
use super::*;

fn plan(yaml: &str) -> Plan {
    let mc: MiniCluster = serde_yaml_ng::from_str(yaml).expect("test YAML parses");
    Plan::new(&mc).expect("test MiniCluster is valid")
}

fn with(spec: &str) -> Plan {
    plan(&format!(
        "metadata: {{name: mc, namespace: ns}}\nspec:\n{spec}"
    ))
}

const ONE: &str = "  containers:\n    - image: rockylinux:9\n      command: hostname\n";

fn attrs(p: &Plan) -> Vec<String> {
    let target = p.target(&Role::Root).expect("root target");
    broker_attributes(p, &target)
}

#[test]
fn default_attributes() {
    let p = with(&format!("  size: 2\n{ONE}"));
    assert_eq!(
        attrs(&p),
        [
            "-Scron.directory=/mnt/flux/config/etc/flux/system/cron.d",
            "-Srundir=/mnt/flux/config/run/flux",
            "-Sstatedir=/mnt/flux/config/var/lib/flux",
            "-Slocal-uri=local:///mnt/flux/config/run/flux/local",
            "-Slog-stderr-mode=local",
            "-Slog-stderr-level=6",
            "-Stbon.connect_timeout=5s",
        ]
    );
}

#[test]
fn attributes_follow_the_spec() {
    let p = with(&format!(
        "  size: 2\n  maxSize: 4\n  interactive: true\n  logging: {{quiet: true, zeromq: true}}\n  flux:\n    disableSocket: true\n    connectTimeout: \"\"\n    topology: binomial\n    container: {{mountPath: /m/}}\n{ONE}"
    ));
    assert_eq!(
        attrs(&p),
        [
            "-Scron.directory=/m/config/etc/flux/system/cron.d",
            "-Srundir=/m/config/run/flux",
            "-Sstatedir=/m/config/var/lib/flux",
            "-Slog-stderr-mode=local",
            "-Slog-stderr-level=0",
            "-Stbon.topo=binomial",
            "-Sbroker.quorum=2",
            "-Sbroker.rc2_none",
            "-Stbon.zmqdebug=1",
        ]
    );
}

#[test]
fn no_command_means_rc2_none_and_never_fanout() {
    let p = with("  containers:\n    - image: rockylinux:9\n");
    let a = attrs(&p);
    assert!(a.contains(&"-Sbroker.rc2_none".to_string()));
    assert!(a.iter().all(|x| !x.contains("fanout")));
    // diagnostics keeps rc2 (its program ends in sleep infinity)
    let p = with("  containers:\n    - image: rockylinux:9\n      diagnostics: true\n");
    assert!(!attrs(&p).contains(&"-Sbroker.rc2_none".to_string()));
}

#[test]
fn federated_plans_get_a_flat_tree() {
    let bursts = "  flux:\n    bursting:\n      clusters:\n        - {name: b, size: 3}\n";
    let p = with(&format!("  size: 2\n{bursts}{ONE}"));
    let a = attrs(&p);
    assert!(a.contains(&"-Stbon.topo=kary:4".to_string()), "{a:?}");
    assert!(a.contains(&"-Sbroker.quorum=2".to_string()));
    let burst = p
        .target(&Role::Burst {
            index: 0,
            lead: Endpoint {
                address: "10.0.0.1".into(),
                port: 30050,
            },
        })
        .expect("burst target");
    assert_eq!(
        broker_attributes(&p, &burst),
        a,
        "same attributes everywhere"
    );

    // (validation refuses flux.topology together with bursting)

    // a single-host federation still gets a valid k
    let p = with(
        "  size: 1\n  flux:\n    bursting:\n      hostlist: \"mc-0\"\n  containers:\n    - image: x\n",
    );
    assert!(attrs(&p).contains(&"-Stbon.topo=kary:1".to_string()));
}

#[test]
fn submit_flags_follow_the_documented_task_rules() {
    let flags = |spec: &str| {
        let p = with(&format!("{spec}{ONE}"));
        Ctx::new(&p).flags(false).join(" ")
    };
    assert_eq!(flags("  size: 4\n"), "-n 1");
    assert_eq!(flags("  size: 4\n  tasks: 4\n"), "-N 4 -n 4");
    assert_eq!(flags("  size: 4\n  tasks: 8\n"), "-N 4 -n 8");
    assert_eq!(flags("  size: 4\n  tasks: 2\n"), "-n 2");
    assert_eq!(flags("  size: 4\n  tasks: 0\n"), "-N 4");
    assert_eq!(
        flags("  size: 2\n  tasks: 0\n  flux: {optionFlags: \"-ompi=openmpi@5  -o 'x'\"}\n"),
        "-N 2 -ompi=openmpi@5 -o ''\\''x'\\'''"
    );
    let p = with(&format!("  size: 3\n  logging: {{debug: true}}\n{ONE}"));
    assert_eq!(Ctx::new(&p).flags(true).join(" "), "-n 1 -vvv");
}

#[test]
fn quoting() {
    assert_eq!(sq("a b"), "'a b'");
    assert_eq!(sq("it's"), "'it'\\''s'");
    assert_eq!(sq("a\0b"), "'ab'");
    assert_eq!(word("/mnt/flux-1/x=y,z@v%+:"), "/mnt/flux-1/x=y,z@v%+:");
    assert_eq!(word(""), "''");
    for special in [
        "a b", "$x", "`x`", "a*", "~", "a;b", "a\nb", "{a,b}", "a'b", "!",
    ] {
        assert!(
            word(special).starts_with('\''),
            "{special:?} must be quoted"
        );
    }
    assert_eq!(dq_text("a\"$`\\b"), "a\\\"\\$\\`\\\\b");
    assert_eq!(one_line("a\nb\tc"), "a b c");
}

#[test]
fn words_split_like_bash_default_ifs() {
    let words: Vec<&str> = split_words("  lmp\t-in  in.lj\n-x\r ").collect();
    assert_eq!(words, ["lmp", "-in", "in.lj", "-x\r"]);
    assert_eq!(split_words(" \n\t").count(), 0);
}

#[test]
fn helpers() {
    assert_eq!(parent("/a/b/c"), "/a/b");
    assert_eq!(parent("/c"), "/");
    assert!(is_identifier("_A1"));
    for bad in ["", "1A", "A-B", "A B", "A=B"] {
        assert!(!is_identifier(bad), "{bad:?}");
    }
    assert_eq!(
        script_invocation("#!/usr/bin/env python3\n", "/tmp/s"),
        ["/tmp/s"]
    );
    assert_eq!(
        script_invocation("echo hi\n", "/tmp/s"),
        ["/bin/bash", "/tmp/s"]
    );
}

#[test]
fn heredoc_delimiter_never_occurs_in_the_script() {
    let text = "echo $HOME\nFLUX_OPERATOR_SCRIPT_EOF\nFLUX_OPERATOR_SCRIPT_EOF_1\n";
    let mut sh = Sh::new();
    write_script_file(&mut sh, text, "/tmp/s");
    let out = sh.finish();
    assert!(out.contains("<<'FLUX_OPERATOR_SCRIPT_EOF_2'\n"), "{out}");
    assert!(
        out.contains(&format!("\n{text}FLUX_OPERATOR_SCRIPT_EOF_2\n")),
        "{out}"
    );
}

#[test]
fn lead_branch_only_in_the_root_cluster() {
    let p = with(&format!(
        "  size: 2\n  flux:\n    bursting:\n      clusters:\n        - {{name: b}}\n{ONE}"
    ));
    let root = p.target(&Role::Root).expect("root");
    let script = broker_script(&p, &root);
    assert!(script.contains("if [ \"$host\" = mc-0 ]; then"));
    assert!(script.contains("getent hosts mc-0.mc.ns.svc.cluster.local"));
    let burst = p
        .target(&Role::Burst {
            index: 0,
            lead: Endpoint {
                address: "lead.example.org".into(),
                port: 31000,
            },
        })
        .expect("burst");
    let script = broker_script(&p, &burst);
    assert!(!script.contains("$host"));
    assert!(!script.contains("flux submit"));
    assert!(script.contains("lead-probe lead.example.org 31000"));
}

#[test]
fn wrap_applies_to_every_broker() {
    let p = with(&format!(
        "  size: 2\n  flux: {{wrap: \"strace,-tt\"}}\n{ONE}"
    ));
    let root = p.target(&Role::Root).expect("root");
    let script = broker_script(&p, &root);
    // in the shared argument array, used by the lead and the worker loop alike
    assert!(script.contains("broker_args=(\n  --wrap=strace,-tt\n"));
    assert_eq!(
        script.matches("flux start \"${broker_args[@]}\"").count(),
        2
    );
}

#[test]
fn strict_mode_is_on_by_default_and_can_be_turned_off() {
    let p = with(ONE);
    let root = p.target(&Role::Root).expect("root");
    assert!(broker_script(&p, &root).contains("\nset -eEu -o pipefail\n"));
    let p = with(&format!("  logging: {{strict: false}}\n{ONE}"));
    assert!(!broker_script(&p, &root).contains("set -e"));
}

#[test]
fn sidecar_command_word_is_never_an_assignment_or_keyword() {
    let p = with(
        "  containers:\n    - image: a\n      runFlux: true\n    - image: b\n      name: s\n      command: A=1 time x\n    - image: c\n      name: t\n      command: time x\n",
    );
    let root = p.target(&Role::Root).expect("root");
    assert!(sidecar_script(&p, &root, 1).contains("\n'A=1' time x || command_status=$?\n"));
    assert!(sidecar_script(&p, &root, 2).contains("\n'time' x || command_status=$?\n"));
}

#[test]
fn bad_sidecar_index_gives_a_failing_script() {
    let p = with(ONE);
    let root = p.target(&Role::Root).expect("root");
    let script = sidecar_script(&p, &root, 7);
    assert!(script.contains("exit 1"));
}

#[test]
fn fill_is_one_pass() {
    let values = [("__A__", "__B__"), ("__B__", "b")];
    assert_eq!(fill("x __A__ __B__ __C__ _", &values), "x __B__ b __C__ _");
    assert_eq!(fill("___A__", &values), "___B__");
    assert_eq!(fill("", &values), "");
}

#[test]
fn drain_script_fills_every_placeholder() {
    let p = with(&format!(
        "  size: 2\n  flux: {{drainTimeoutSeconds: 42}}\n{ONE}"
    ));
    let target = p.target(&Role::Root).expect("root target");
    let script = drain_script(&p, &target).expect("a drain script");
    assert!(!script.contains("__"), "{script}");
    assert!(script.contains("\ndrain_timeout=42\n"));
    assert!(script.contains("MiniCluster ns/mc (Job mc)."));

    let off = with(&format!("  flux: {{drainTimeoutSeconds: 0}}\n{ONE}"));
    let target = off.target(&Role::Root).expect("root target");
    assert_eq!(drain_script(&off, &target), None);
}
