//! Oracle test: a certificate written by `flux_shared::curve` is loaded by
//! pyzmq (`zmq.auth.load_certificate`) and secures a real libzmq CURVE
//! handshake, while a client trusting another server key is kept out.
//! See `tests/oracle/curve_handshake.py`.

mod common;

use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use flux_shared::curve::CurveCert;

/// Longest the python oracle may run before the test kills it and fails.
const ORACLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A private directory removed when the test ends, pass or fail.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let path =
            std::env::temp_dir().join(format!("flux-curve-oracle-{}-{nanos}", std::process::id()));
        fs::create_dir(&path).expect("create temporary directory");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
            .expect("make temporary directory private");
        TempDir(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// Writes `text` to a new file at `path` with mode 0600.
fn write_private(path: &Path, text: &str) {
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .expect("create certificate file");
    file.write_all(text.as_bytes())
        .expect("write certificate file");
    let mode = file
        .metadata()
        .expect("stat certificate")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "certificate file mode is {mode:o}");
}

/// Runs `command` to completion, killing it after `timeout`; returns
/// (success, stdout, stderr).
fn run_with_timeout(mut command: Command, timeout: Duration) -> (bool, String, String) {
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the python oracle");
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the python oracle") {
            break Some(status);
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        thread::sleep(Duration::from_millis(50));
    };
    let out = out_reader.join().unwrap_or_default();
    let mut err = err_reader.join().unwrap_or_default();
    if status.is_none() {
        err.push_str(&format!("\n(killed after {timeout:?})"));
    }
    (status.is_some_and(|s| s.success()), out, err)
}

#[test]
fn generated_cert_secures_a_libzmq_curve_handshake() {
    let python = common::oracle_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/curve_handshake.py");
    assert!(
        script.is_file(),
        "oracle script {} is missing",
        script.display()
    );

    let name = "oracle-test";
    let cert = CurveCert::generate(name)
        .with_metadata("keygen.hostname", "oracle-host")
        .expect("valid metadata");
    let text = cert.to_zcert();
    assert_eq!(
        CurveCert::parse(&text).expect("our own certificate parses"),
        cert
    );

    let dir = TempDir::new();
    let path = dir.0.join("curve.cert");
    write_private(&path, &text);

    let mut command = Command::new(&python);
    command
        .arg(&script)
        .arg(&path)
        .arg(cert.public_key_z85())
        .arg(name);
    let (ok, stdout, stderr) = run_with_timeout(command, ORACLE_TIMEOUT);
    assert!(
        ok && stdout.starts_with("OK"),
        "python oracle {} failed\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        python.display()
    );
    println!("{}", stdout.trim_end());
}
