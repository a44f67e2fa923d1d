//! The view container, run: its script and the broker's entrypoint side by side in a
//! sandbox, as two containers of one pod (processes of this machine). The view image is
//! a directory of the sandbox: the scripts' image paths (`/opt/views/._view`, the view
//! container's `/opt/software`) and the pod's software volume are rewritten to sandbox
//! paths before they run, and nothing else.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use flux_shared::api::MiniCluster;
use flux_shared::plan::{Plan, Role};
use flux_shared::scripts;

mod sandbox;
use sandbox::Sandbox;

/// The view image's files as its container sees them: the views under its view root,
/// and the install tree a view's symlinks point into.
fn image(sb: &Sandbox, views: &[&str]) {
    let root = sb.path("image");
    for view in views {
        let bin = root.join("opt/views/._view").join(view).join("bin");
        fs::create_dir_all(&bin).expect("view");
        fs::write(bin.join("flux-version"), "0.70\n").expect("view file");
    }
    let tree = root.join("opt/software/flux-core-0.70/bin");
    fs::create_dir_all(&tree).expect("software");
    fs::write(tree.join("broker"), "broker\n").expect("software file");
    // The pod's software volume, there before any container starts.
    fs::create_dir_all(pod_software(sb)).expect("software volume");
}

/// The pod's software volume (`/opt/software` in the brokers' containers).
fn pod_software(sb: &Sandbox) -> PathBuf {
    sb.path("pod-software")
}

/// A plan whose lead runs `command` as its initial program (`launcher`: the command's
/// words, which the fake `flux start` runs with FAKE_FLUX_RUN=1).
fn plan(sb: &Sandbox, extra_spec: &str, command: &str) -> Plan {
    let yaml = format!(
        "metadata: {{name: flux-sample, namespace: default}}\n\
         spec:\n\
         \x20 size: 2\n\
         \x20 launcher: true\n\
         \x20 flux: {{container: {{mountPath: {mount}}}}}\n\
         \x20 containers: [{{image: rockylinux:9, command: {command}}}]\n\
         {extra_spec}",
        mount = sb.mount(),
    );
    let mc: MiniCluster = serde_yaml_ng::from_str(&yaml).expect("test YAML parses");
    Plan::new(&mc).expect("test MiniCluster is valid")
}

/// `text` with `from` replaced, which must occur in it.
fn rewrite(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "the script no longer has {from:?}");
    text.replace(from, to)
}

fn view_script(sb: &Sandbox, plan: &Plan) -> String {
    let image = sb.path("image").display().to_string();
    let script = scripts::view_container_script(plan, &plan.target(&Role::Root).expect("root"));
    let script = rewrite(
        &script,
        "/opt/views/._view",
        &format!("{image}/opt/views/._view"),
    );
    let script = rewrite(&script, "/opt/software", &format!("{image}/opt/software"));
    // The pod's software volume, which the view container mounts under the view mount.
    rewrite(
        &script,
        &format!("software={}/software", sb.mount()),
        &format!("software={}", pod_software(sb).display()),
    )
}

fn broker_script(plan: &Plan) -> String {
    scripts::broker_script(plan, &plan.target(&Role::Root).expect("root"))
}

/// The view container, started in the background.
fn start_view(sb: &Sandbox, script: &str) -> Running {
    let file = sb.path("view.sh");
    fs::write(&file, script).expect("write the view script");
    Running(
        sb.bash(&file)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the view container"),
    )
}

/// A child the test may leave running (it fails, or checks it keeps running): ended on
/// drop.
struct Running(Child);

impl Running {
    /// Its exit status if it ends within `within`.
    fn ends_within(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if let Some(status) = self.0.try_wait().expect("wait") {
                return Some(status);
            }
            thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exchange(sb: &Sandbox) -> PathBuf {
    Path::new(&sb.mount()).join(".view-container")
}

const LEAD: &[(&str, &str)] = &[("FAKE_HOSTNAME", "flux-sample-0")];

#[test]
fn the_view_container_copies_the_view_while_the_broker_waits_and_ends_with_it() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    // The instance reads the view and the install tree once it runs.
    let plan = plan(
        &sb,
        "",
        &format!(
            "cat {}/view/bin/flux-version {}/flux-core-0.70/bin/broker",
            sb.mount(),
            pod_software(&sb).display()
        ),
    );
    let broker = rewrite(
        &broker_script(&plan),
        "/opt/software",
        &pod_software(&sb).display().to_string(),
    );
    // The broker starts first here: it waits for the copy.
    let broker_file = sb.path("broker.sh");
    fs::write(&broker_file, &broker).unwrap();
    let mut lead = Running(
        sb.bash(&broker_file)
            .envs(LEAD.iter().copied())
            .env("FAKE_FLUX_RUN", "1")
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", sb.path("bin").display()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert!(
        lead.ends_within(Duration::from_millis(500)).is_none(),
        "it waits"
    );
    let mut view = start_view(&sb, &view_script(&sb, &plan));
    let status = lead
        .ends_within(Duration::from_secs(10))
        .expect("the broker ends");
    let mut out = String::new();
    std::io::Read::read_to_string(&mut lead.0.stdout.take().unwrap(), &mut out).unwrap();
    assert!(status.success(), "{out}");
    assert!(out.contains("0.70\nbroker\n"), "{out}");
    assert!(
        fs::symlink_metadata(Path::new(&sb.mount()).join("view"))
            .unwrap()
            .is_dir()
    );
    assert!(
        pod_software(&sb)
            .join("flux-core-0.70/bin/broker")
            .is_file(),
        "the tree copied once, into the pod's software volume"
    );
    assert!(!Path::new(&sb.mount()).join("software").exists());
    let status = view
        .ends_within(Duration::from_secs(5))
        .expect("the view ends");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_failed_broker_the_kubelet_starts_again_keeps_its_view_container() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "", "hostname");
    let mut view = start_view(&sb, &view_script(&sb, &plan));
    let failed = [LEAD[0], ("FAKE_FLUX_CODES", "3")];
    assert_eq!(sb.run(&broker_script(&plan), &failed).0, 3);
    // Past the view container's one-second look at the broker's process.
    assert!(view.ends_within(Duration::from_millis(2500)).is_none());
    // The kubelet starts the broker container again (restartPolicy OnFailure): the view
    // is there, copied once.
    let (code, out, _) = sb.run(&broker_script(&plan), LEAD);
    assert_eq!(code, 0);
    assert!(!out.contains("copying"), "{out}");
    let status = view
        .ends_within(Duration::from_secs(5))
        .expect("the view ends");
    assert!(status.success());
}

#[test]
fn without_restarts_the_view_container_ends_with_a_failed_broker() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "  pod: {restartPolicy: Never}\n", "hostname");
    let mut view = start_view(&sb, &view_script(&sb, &plan));
    let failed = [LEAD[0], ("FAKE_FLUX_CODES", "3")];
    assert_eq!(sb.run(&broker_script(&plan), &failed).0, 3);
    let status = view
        .ends_within(Duration::from_secs(5))
        .expect("the view ends");
    assert!(
        status.success(),
        "the pod fails by the broker's status, not the view's"
    );
}

#[test]
fn without_restarts_the_view_container_ends_when_its_broker_is_killed() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "  pod: {restartPolicy: Never}\n", "hostname");
    let mut view = start_view(&sb, &view_script(&sb, &plan));
    // A broker killed before its last word (OOM): only its process is gone.
    let mut broker = Running(Command::new("/bin/sleep").arg("1").spawn().unwrap());
    let namespace = fs::read_link("/proc/self/ns/pid").expect("this process namespace");
    fs::create_dir_all(exchange(&sb)).unwrap();
    fs::write(
        exchange(&sb).join("broker"),
        format!("{} {}\n", broker.0.id(), namespace.display()),
    )
    .unwrap();
    assert!(view.ends_within(Duration::from_millis(700)).is_none());
    broker.0.wait().unwrap();
    let status = view
        .ends_within(Duration::from_secs(3))
        .expect("then it goes");
    assert!(status.success());
}

#[test]
fn a_deleted_pod_loses_its_view_container_at_once() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "", "hostname");
    let mut view = start_view(&sb, &view_script(&sb, &plan));
    let copied = exchange(&sb).join("copied");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !copied.exists() {
        assert!(Instant::now() < deadline, "never copied");
        thread::sleep(Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-TERM", &view.0.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = view
        .ends_within(Duration::from_millis(1500))
        .expect("it goes");
    assert!(status.success());
}

#[test]
fn a_view_image_without_exactly_one_view_stops_the_broker_with_the_reason() {
    let sb = Sandbox::new();
    image(&sb, &["abc123", "def456"]);
    let plan = plan(&sb, "", "hostname");
    let mut view = start_view(&sb, &view_script(&sb, &plan));
    let status = view
        .ends_within(Duration::from_secs(5))
        .expect("the view fails");
    assert_eq!(status.code(), Some(1));
    let (code, _, err) = sb.run(&broker_script(&plan), LEAD);
    assert_eq!(code, 1);
    assert!(
        err.contains("the view container flux-view: expected exactly one directory under")
            && err.contains("found 2"),
        "{err}"
    );
}

#[test]
fn a_sidecar_waits_for_the_view_container_s_copy() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let yaml = format!(
        "metadata: {{name: flux-sample, namespace: default}}\n\
         spec:\n\
         \x20 size: 2\n\
         \x20 flux: {{noWaitSocket: true, container: {{mountPath: {mount}}}}}\n\
         \x20 containers:\n\
         \x20 - {{image: rockylinux:9, command: hostname}}\n\
         \x20 - {{name: side, image: rockylinux:9, runFlux: false, command: 'cat {mount}/view/bin/flux-version'}}\n",
        mount = sb.mount(),
    );
    let mc: MiniCluster = serde_yaml_ng::from_str(&yaml).expect("test YAML parses");
    let plan = Plan::new(&mc).expect("valid");
    let script = scripts::sidecar_script(&plan, &plan.target(&Role::Root).unwrap(), 1);
    let file = sb.path("sidecar.sh");
    fs::write(&file, &script).unwrap();
    let mut sidecar = Running(
        sb.bash(&file)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        sidecar.ends_within(Duration::from_millis(700)).is_none(),
        "it waits for the copy"
    );
    let _view = start_view(&sb, &view_script(&sb, &plan));
    let status = sidecar
        .ends_within(Duration::from_secs(5))
        .expect("then runs");
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(&mut sidecar.0.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("0.70"), "{out}");
}

#[test]
fn a_lost_wake_up_still_ends_the_view_container() {
    // What the view container goes by is the broker's exit file; the FIFO only wakes it.
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "", "hostname");
    let mut view = start_view(&sb, &view_script(&sb, &plan));
    let copied = exchange(&sb).join("copied");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !copied.exists() {
        assert!(Instant::now() < deadline, "never copied");
        thread::sleep(Duration::from_millis(20));
    }
    fs::write(exchange(&sb).join("exit"), "0\n").unwrap();
    let status = view.ends_within(Duration::from_secs(3)).expect("it goes");
    assert!(status.success());
}
