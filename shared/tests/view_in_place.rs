//! The view read in place, run: the view container's script and the broker's entrypoint
//! side by side in a sandbox, as two processes of one pod's process namespace (this
//! machine's). The view image is a directory of the sandbox: the scripts' image paths
//! (`/opt/views/._view`, the view container's `/opt/software`) and the pod's
//! `/opt/software` are rewritten to sandbox paths before they run, and nothing else.

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

/// The view image's files as its container sees them: one view, and the install tree
/// its symlinks point into.
fn image(sb: &Sandbox, views: &[&str]) -> PathBuf {
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
    root
}

fn plan(sb: &Sandbox, extra_spec: &str) -> Plan {
    plan_running(sb, extra_spec, "hostname")
}

/// A plan whose lead runs `command` as its initial program (`launcher`: the command's
/// words, which the fake `flux start` runs with FAKE_FLUX_RUN=1).
fn plan_running(sb: &Sandbox, extra_spec: &str, command: &str) -> Plan {
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

/// The pod's `/opt/software` (an emptyDir in a real pod).
fn pod_software(sb: &Sandbox) -> PathBuf {
    sb.path("pod-software")
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

fn broker_script(sb: &Sandbox, plan: &Plan) -> String {
    let image = sb.path("image").display().to_string();
    let pod = pod_software(sb).display().to_string();
    let script = scripts::broker_script(plan, &plan.target(&Role::Root).expect("root"));
    // The view container's tree is under its root; the pod's own is the emptyDir.
    let script = rewrite(
        &script,
        "\"$view_root\"/opt/software",
        "\"$view_root\"@IMAGE@",
    );
    let script = rewrite(&script, "/opt/software", &pod);
    rewrite(&script, "@IMAGE@", &format!("{image}/opt/software"))
}

/// The view container, started in the background.
fn start_view(sb: &Sandbox, script: &str) -> Child {
    let file = sb.path("view.sh");
    fs::write(&file, script).expect("write the view script");
    sb.bash(&file)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the view container")
}

/// Its exit status if it ends within `within`.
fn ends_within(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Ends a child the test left running (it fails, or checks it keeps running).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn exchange(sb: &Sandbox) -> PathBuf {
    Path::new(&sb.mount()).join(".view-container")
}

fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        thread::sleep(Duration::from_millis(20));
    }
}

fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

const LEAD: &[(&str, &str)] = &[("FAKE_HOSTNAME", "flux-sample-0")];

#[test]
fn a_broker_links_the_view_in_place_and_its_view_container_ends_with_it() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    // The instance reads the view and the install tree through the links while it runs.
    let plan = plan_running(
        &sb,
        "",
        &format!(
            "cat {}/view/bin/flux-version {}/flux-core-0.70/bin/broker",
            sb.mount(),
            pod_software(&sb).display()
        ),
    );
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    let run = [LEAD[0], ("FAKE_FLUX_RUN", "1")];
    let (code, out, err) = sb.run(&broker_script(&sb, &plan), &run);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("0.70\nbroker\n"), "{out}");

    let link = fs::read_link(Path::new(&sb.mount()).join("view")).expect("the view is a link");
    assert!(link.starts_with("/proc/"), "{}", link.display());
    let tree = pod_software(&sb).join("flux-core-0.70");
    assert!(
        fs::symlink_metadata(&tree)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(exchange(&sb).join("ready").exists(), "sidecars are told");
    assert!(
        !Path::new(&sb.mount()).join("software").exists(),
        "nothing was copied"
    );

    let status = ends_within(&mut view.0, Duration::from_secs(5)).expect("the view ends");
    assert!(status.success(), "{status:?}");
}

#[test]
fn a_failed_broker_the_kubelet_starts_again_keeps_its_view_container() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "");
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    let broker = broker_script(&sb, &plan);
    let failed = [LEAD[0], ("FAKE_FLUX_CODES", "3")];
    assert_eq!(sb.run(&broker, &failed).0, 3);
    // Past the view container's one-second look at the broker's process.
    assert!(ends_within(&mut view.0, Duration::from_millis(2500)).is_none());

    // The kubelet starts the broker container again (restartPolicy OnFailure).
    assert_eq!(sb.run(&broker, LEAD).0, 0);
    let status = ends_within(&mut view.0, Duration::from_secs(5)).expect("the view ends");
    assert!(status.success());
}

#[test]
fn without_restarts_the_view_container_ends_with_a_failed_broker() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "  pod: {restartPolicy: Never}\n");
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    let failed = [LEAD[0], ("FAKE_FLUX_CODES", "3")];
    assert_eq!(sb.run(&broker_script(&sb, &plan), &failed).0, 3);
    let status = ends_within(&mut view.0, Duration::from_secs(5)).expect("the view ends");
    assert!(
        status.success(),
        "the pod fails by the broker's status, not the view's"
    );
}

#[test]
fn a_deleted_pod_keeps_the_view_until_its_broker_is_gone() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "");
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    wait_for(&exchange(&sb).join("view"));
    // A broker still stopping (rc3, the drain hook) for 2 s.
    let mut broker = Running(
        Command::new("/bin/sleep")
            .arg("2")
            .spawn()
            .expect("a stopping broker"),
    );
    let namespace = fs::read_link("/proc/self/ns/pid").expect("this process namespace");
    fs::write(
        exchange(&sb).join("broker"),
        format!("{} {}\n", broker.0.id(), namespace.display()),
    )
    .unwrap();
    sigterm(&view.0);
    assert!(
        ends_within(&mut view.0, Duration::from_millis(1500)).is_none(),
        "the view stays while the broker stops"
    );
    broker.0.wait().expect("the broker stops");
    let status = ends_within(&mut view.0, Duration::from_secs(3)).expect("then it goes");
    assert!(status.success());
}

#[test]
fn a_deleted_pod_whose_broker_never_started_loses_its_view_container_at_once() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "");
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    wait_for(&exchange(&sb).join("view"));
    sigterm(&view.0);
    let status = ends_within(&mut view.0, Duration::from_millis(1500)).expect("it goes");
    assert!(status.success());
}

#[test]
fn a_broker_refused_the_view_containers_root_has_it_copied() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "");
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    // What the kernel answers a reader of another user (or with fewer capabilities).
    let broker = rewrite(
        &broker_script(&sb, &plan),
        "if [ \"$view_namespace\" = \"$namespace\" ] && [ \"$namespace\" != unknown ] && [ -d \"$view_root$view_source/bin\" ]; then",
        "if false; then",
    );
    let (code, out, err) = sb.run(&broker, LEAD);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("it copies the view"), "{out}");

    let mount = Path::new(&sb.mount()).to_path_buf();
    let view_dir = fs::symlink_metadata(mount.join("view")).expect("the view");
    assert!(view_dir.is_dir(), "a copy, not a link");
    assert_eq!(
        fs::read_to_string(mount.join("view/bin/flux-version")).unwrap(),
        "0.70\n"
    );
    let tree = pod_software(&sb).join("flux-core-0.70/bin/broker");
    assert!(
        fs::symlink_metadata(&tree).is_ok_and(|m| m.is_file()),
        "a copy, once: {out}\n{err}"
    );
    assert!(!mount.join("software").exists(), "nothing copied twice");
    assert_eq!(
        fs::read_to_string(exchange(&sb).join("copied")).unwrap(),
        "ok\n"
    );
    let status = ends_within(&mut view.0, Duration::from_secs(5)).expect("the view ends");
    assert!(status.success());
}

#[test]
fn a_view_image_without_exactly_one_view_stops_the_broker_with_the_reason() {
    let sb = Sandbox::new();
    image(&sb, &["abc123", "def456"]);
    let plan = plan(&sb, "");
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    let status = ends_within(&mut view.0, Duration::from_secs(5)).expect("the view fails");
    assert_eq!(status.code(), Some(1));
    let (code, _, err) = sb.run(&broker_script(&sb, &plan), LEAD);
    assert_eq!(code, 1);
    assert!(
        err.contains("the view container flux-view: expected exactly one directory under")
            && err.contains("found 2"),
        "{err}"
    );
}

#[test]
fn a_broker_in_another_process_namespace_has_the_view_copied() {
    // A pod that cannot share one namespace (a runtime without it): the PID the view
    // container gives names nothing the broker can reach.
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "");
    let view_script = rewrite(
        &view_script(&sb, &plan),
        "namespace=$(readlink \"/proc/$$/ns/pid\" 2>/dev/null) || namespace=unknown",
        "namespace='pid:[1]'",
    );
    let mut view = Running(start_view(&sb, &view_script));
    let (code, out, err) = sb.run(&broker_script(&sb, &plan), LEAD);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("another process namespace"), "{out}");
    assert!(
        fs::symlink_metadata(Path::new(&sb.mount()).join("view"))
            .unwrap()
            .is_dir()
    );
    assert!(
        pod_software(&sb)
            .join("flux-core-0.70/bin/broker")
            .is_file()
    );
    let status = ends_within(&mut view.0, Duration::from_secs(5)).expect("the view ends");
    assert!(status.success());
}

#[test]
fn a_view_only_copied_goes_at_once_when_the_pod_is_deleted() {
    let sb = Sandbox::new();
    image(&sb, &["abc123"]);
    let plan = plan(&sb, "");
    let mut view = Running(start_view(&sb, &view_script(&sb, &plan)));
    wait_for(&exchange(&sb).join("view"));
    // A broker that runs, but in another namespace: it has a copy, not the view's root.
    let mut broker = Running(Command::new("/bin/sleep").arg("30").spawn().unwrap());
    fs::write(
        exchange(&sb).join("broker"),
        format!("{} pid:[1]\n", broker.0.id()),
    )
    .unwrap();
    sigterm(&view.0);
    let status = ends_within(&mut view.0, Duration::from_millis(1500)).expect("it goes");
    assert!(status.success());
    let _ = broker.0.kill();
}

#[test]
fn a_sidecar_waits_for_the_view_its_broker_sets_up() {
    let sb = Sandbox::new();
    let yaml = format!(
        "metadata: {{name: flux-sample, namespace: default}}\n\
         spec:\n\
         \x20 size: 2\n\
         \x20 flux: {{noWaitSocket: true, container: {{mountPath: {mount}}}}}\n\
         \x20 containers:\n\
         \x20 - {{image: rockylinux:9, command: hostname}}\n\
         \x20 - {{name: side, image: rockylinux:9, runFlux: false, command: 'echo side ran'}}\n",
        mount = sb.mount(),
    );
    let mc: MiniCluster = serde_yaml_ng::from_str(&yaml).expect("test YAML parses");
    let plan = Plan::new(&mc).expect("valid");
    let script = scripts::sidecar_script(&plan, &plan.target(&Role::Root).unwrap(), 1);
    let file = sb.path("sidecar.sh");
    fs::write(&file, &script).unwrap();
    let mut sidecar = Running(
        sb.bash(&file)
            .env("PATH", "/usr/bin:/bin")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(
        ends_within(&mut sidecar.0, Duration::from_millis(700)).is_none(),
        "it waits for the broker"
    );
    fs::create_dir_all(exchange(&sb)).unwrap();
    fs::write(exchange(&sb).join("ready"), "").unwrap();
    let status = ends_within(&mut sidecar.0, Duration::from_secs(3)).expect("then runs");
    assert!(status.success());
    let mut out = String::new();
    std::io::Read::read_to_string(&mut sidecar.0.stdout.take().unwrap(), &mut out).unwrap();
    assert!(out.contains("side ran"), "{out}");
}
