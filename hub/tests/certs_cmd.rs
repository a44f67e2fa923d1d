//! `flux-hub certs`, run as the real binary.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use flux_shared::federation::pki::Ca;
use flux_shared::federation::tls::{ClientSecurity, ServerSecurity, TlsPem, TransportSettings};
use flux_shared::federation::{Identity, identity_from_pem};
use x509_parser::extensions::GeneralName;
use x509_parser::pem::parse_x509_pem;

fn flux_hub(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_flux-hub"))
        .args(args)
        .output()
        .expect("run flux-hub")
}

/// A fresh directory under the target dir, removed at the start of each run.
fn scratch(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("certs-{name}"));
    let _ = fs::remove_dir_all(&dir);
    dir
}

fn mode(path: &Path) -> u32 {
    fs::metadata(path).unwrap().permissions().mode() & 0o777
}

fn read(dir: &Path, name: &str) -> String {
    fs::read_to_string(dir.join(name)).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Every `.crt` / `.key` in `dir` with its contents.
fn snapshot(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .map(|name| (name.clone(), read(dir, &name)))
        .collect();
    files.sort();
    files
}

/// Checks `cert` was signed by the CA in `dir`.
fn assert_signed_by_ca(dir: &Path, cert: &str) {
    let ca_pem = read(dir, "ca.crt");
    let (_, ca) = parse_x509_pem(ca_pem.as_bytes()).unwrap();
    let ca = ca.parse_x509().unwrap();
    let leaf_pem = read(dir, cert);
    let (_, leaf) = parse_x509_pem(leaf_pem.as_bytes()).unwrap();
    let leaf = leaf.parse_x509().unwrap();
    assert_eq!(leaf.issuer(), ca.subject(), "{cert}");
    leaf.verify_signature(Some(ca.public_key()))
        .unwrap_or_else(|e| panic!("{cert} is not signed by ca.crt: {e}"));
}

#[test]
fn writes_the_ca_hub_spoke_and_admin_certificates_with_private_keys() {
    let dir = scratch("full");
    let out = flux_hub(&[
        "certs",
        "--out",
        dir.to_str().unwrap(),
        "--hub-dns",
        "hub.example.org",
        "--hub-dns",
        "flux-hub.flux-system.svc",
        "--hub-ip",
        "192.0.2.10",
        "--spoke",
        "gke-1,kind-2",
        "--admin",
        "ops",
        "--days",
        "30",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let summary = String::from_utf8(out.stdout).unwrap();
    assert!(
        summary.contains("spiffe://flux-framework.org/spoke/gke-1"),
        "{summary}"
    );

    assert_eq!(mode(&dir), 0o700);
    let names: Vec<String> = snapshot(&dir).into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "admin-ops.crt",
            "admin-ops.key",
            "ca.crt",
            "ca.key",
            "hub.crt",
            "hub.key",
            "spoke-gke-1.crt",
            "spoke-gke-1.key",
            "spoke-kind-2.crt",
            "spoke-kind-2.key",
        ]
    );
    for name in &names {
        let expected = if name.ends_with(".key") { 0o600 } else { 0o644 };
        assert_eq!(mode(&dir.join(name)), expected, "{name}");
    }

    // Identities round-trip through the certificates.
    for (file, identity) in [
        ("spoke-gke-1.crt", Identity::spoke("gke-1").unwrap()),
        ("spoke-kind-2.crt", Identity::spoke("kind-2").unwrap()),
        ("admin-ops.crt", Identity::admin("ops").unwrap()),
    ] {
        assert_eq!(identity_from_pem(&read(&dir, file)), Ok(identity));
        assert_signed_by_ca(&dir, file);
    }
    assert!(identity_from_pem(&read(&dir, "hub.crt")).is_err());
    assert_signed_by_ca(&dir, "hub.crt");

    // The hub's SANs are the flags.
    let hub_pem = read(&dir, "hub.crt");
    let (_, hub) = parse_x509_pem(hub_pem.as_bytes()).unwrap();
    let hub = hub.parse_x509().unwrap();
    let sans: Vec<String> = hub
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names
        .iter()
        .map(|n| match n {
            GeneralName::DNSName(d) => d.to_string(),
            GeneralName::IPAddress(ip) => format!("{ip:?}"),
            other => format!("{other}"),
        })
        .collect();
    assert_eq!(
        sans,
        [
            "hub.example.org",
            "flux-hub.flux-system.svc",
            "[192, 0, 2, 10]"
        ]
    );
    let lifetime = hub.validity().not_after.timestamp() - hub.validity().not_before.timestamp();
    assert_eq!(lifetime, 30 * 86_400 + 300, "30 days, backdated 5 minutes");

    // The CA and key files load back.
    Ca::from_pem(&read(&dir, "ca.crt"), &read(&dir, "ca.key")).unwrap();

    // The files are what the hub's server and the clients load.
    let settings = TransportSettings::default();
    let hub =
        TlsPem::from_files(dir.join("ca.crt"), dir.join("hub.crt"), dir.join("hub.key")).unwrap();
    settings.server(&ServerSecurity::Mtls(hub)).unwrap();
    for stem in ["spoke-gke-1", "spoke-kind-2", "admin-ops"] {
        let tls = TlsPem::from_files(
            dir.join("ca.crt"),
            dir.join(format!("{stem}.crt")),
            dir.join(format!("{stem}.key")),
        )
        .unwrap();
        let client = ClientSecurity::Mtls {
            tls,
            domain: "hub.example.org".to_string(),
        };
        settings
            .endpoint("https://hub.example.org:8443", &client)
            .unwrap();
    }
    // A certificate is not a key.
    assert!(
        TlsPem::from_files(dir.join("ca.crt"), dir.join("hub.crt"), dir.join("hub.crt")).is_err()
    );
}

#[test]
fn refuses_to_overwrite_without_force_and_keeps_the_ca_with_force() {
    let dir = scratch("overwrite");
    let d = dir.to_str().unwrap();
    let args = ["certs", "--out", d, "--hub-dns", "hub.test", "--spoke", "a"];
    assert!(flux_hub(&args).status.success());
    let before = snapshot(&dir);

    let again = flux_hub(&args);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("refusing to overwrite"),
        "{}",
        stderr(&again)
    );
    assert!(stderr(&again).contains("hub.crt"), "{}", stderr(&again));
    assert_eq!(snapshot(&dir), before, "a refused run changed files");

    let mut forced = args.to_vec();
    forced.push("--force");
    let out = flux_hub(&forced);
    assert!(out.status.success(), "{}", stderr(&out));
    let after = snapshot(&dir);
    let changed = |name: &str| {
        let get = |files: &[(String, String)]| {
            files
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, c)| c.clone())
        };
        get(&before) != get(&after)
    };
    assert!(
        !changed("ca.crt") && !changed("ca.key"),
        "the CA was replaced"
    );
    assert!(changed("hub.key") && changed("spoke-a.crt"));
    assert_signed_by_ca(&dir, "spoke-a.crt");
    assert_eq!(mode(&dir.join("spoke-a.key")), 0o600);
}

#[test]
fn adds_spokes_later_from_the_existing_ca() {
    let dir = scratch("later");
    let d = dir.to_str().unwrap();
    assert!(
        flux_hub(&["certs", "--out", d, "--hub-ip", "127.0.0.1"])
            .status
            .success()
    );
    let ca = read(&dir, "ca.crt");

    let out = flux_hub(&["certs", "--out", d, "--spoke", "new-cluster"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("existing CA reused"));
    assert_eq!(read(&dir, "ca.crt"), ca);
    assert_signed_by_ca(&dir, "spoke-new-cluster.crt");
    assert_eq!(
        identity_from_pem(&read(&dir, "spoke-new-cluster.crt")),
        Ok(Identity::spoke("new-cluster").unwrap())
    );

    // Nothing to do is an error, not a silent success.
    assert!(!flux_hub(&["certs", "--out", d]).status.success());
}

#[test]
fn invalid_requests_write_nothing() {
    for (name, args) in [
        ("bad-spoke", vec!["--spoke", "Not_A_Label"]),
        ("bad-admin", vec!["--admin", "a.b"]),
        ("twice", vec!["--spoke", "a", "--spoke", "a"]),
        ("bad-dns", vec!["--hub-dns", "Hub_Host"]),
        ("bad-days", vec!["--spoke", "a", "--days", "0"]),
    ] {
        let dir = scratch(name);
        let mut full = vec!["certs", "--out", dir.to_str().unwrap()];
        full.extend(args);
        let out = flux_hub(&full);
        assert!(!out.status.success(), "{name} succeeded");
        assert!(!dir.exists(), "{name} left {}", dir.display());
    }

    // Half a CA is refused.
    let dir = scratch("half-ca");
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("ca.key"), "x").unwrap();
    let out = flux_hub(&["certs", "--out", dir.to_str().unwrap(), "--spoke", "a"]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("ca.crt"), "{}", stderr(&out));
}

#[test]
fn admin_certificates_carry_their_scope_and_bad_scopes_write_nothing() {
    use flux_shared::federation::scope::{AdminScope, Permission, admin_scope_from_der};
    let dir = scratch("scopes");
    let d = dir.to_str().unwrap();
    let out = flux_hub(&["certs", "--out", d, "--admin", "default-ops"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = flux_hub(&[
        "certs",
        "--out",
        d,
        "--admin",
        "team",
        "--admin-permission",
        "read",
        "--admin-namespace",
        "hpc,lab",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let scope_of = |name: &str| {
        let pem = read(&dir, name);
        let (_, der) = parse_x509_pem(pem.as_bytes()).unwrap();
        admin_scope_from_der(&der.contents).unwrap()
    };
    assert_eq!(scope_of("admin-default-ops.crt"), AdminScope::unscoped());
    assert_eq!(
        scope_of("admin-team.crt"),
        AdminScope::new([Permission::Read], &["hpc".into(), "lab".into()]).unwrap()
    );
    for (args, needle) in [
        (
            vec!["--admin-permission", "root"],
            "--admin-permission \"root\"",
        ),
        (
            vec!["--admin-permission", "spokes", "--admin-namespace", "hpc"],
            "cannot be limited to namespaces",
        ),
        (
            vec!["--admin-namespace", "Not_A_Name"],
            "is not a namespace name",
        ),
    ] {
        let before = snapshot(&dir);
        let mut all = vec!["certs", "--out", d, "--admin", "bad"];
        all.extend(args);
        let out = flux_hub(&all);
        assert!(
            !out.status.success() && stderr(&out).contains(needle),
            "{}",
            stderr(&out)
        );
        assert_eq!(snapshot(&dir), before, "nothing written");
    }
}

#[test]
fn renewing_the_ca_issues_everything_again_and_dropping_the_previous_one_ends_it() {
    use flux_shared::federation::ownership::federation_id;
    use flux_shared::federation::pki::{certificate_blocks, issuer_key_id_of_pem, key_ids_of_pem};
    use flux_shared::federation::scope::admin_scope_from_der;
    let dir = scratch("renew");
    let d = dir.to_str().unwrap();
    let out = flux_hub(&[
        "certs",
        "--out",
        d,
        "--hub-dns",
        "hub.example.org",
        "--hub-ip",
        "192.0.2.7",
        "--spoke",
        "gke",
        "--admin",
        "ops",
        "--admin-permission",
        "read",
        "--admin-namespace",
        "hpc",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let before = snapshot(&dir);
    let old_ca = read(&dir, "ca.crt");
    let federation = federation_id(&old_ca).unwrap();
    let der = |pem: &str| parse_x509_pem(pem.as_bytes()).unwrap().1.contents;
    let old_scope = admin_scope_from_der(&der(&read(&dir, "admin-ops.crt"))).unwrap();

    // Not under way: nothing to drop.
    let out = flux_hub(&["certs", "--out", d, "--drop-previous-ca"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no renewal of the CA is under way"),
        "{}",
        stderr(&out)
    );
    assert_eq!(snapshot(&dir), before);
    // Renewing names nothing else.
    assert!(
        !flux_hub(&["certs", "--out", d, "--renew-ca", "--spoke", "x"])
            .status
            .success()
    );

    let out = flux_hub(&["certs", "--out", d, "--renew-ca"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let trusted = read(&dir, "ca.crt");
    let blocks = certificate_blocks(&trusted);
    assert_eq!(
        blocks.len(),
        2,
        "the previous CA and the new one: {trusted}"
    );
    assert_eq!(blocks[0], old_ca, "the previous CA first, byte for byte");
    assert_eq!(
        federation_id(&trusted).unwrap(),
        federation,
        "the same federation"
    );
    let new_id = key_ids_of_pem(blocks[1])[0].clone();
    let new_key = read(&dir, "ca.key");
    Ca::from_pem(&trusted, &new_key).expect("ca.key is the new CA's");
    assert_eq!(mode(&dir.join("ca.key")), 0o600);
    for (stem, identity) in [
        ("hub", None),
        ("spoke-gke", Some(Identity::spoke("gke").unwrap())),
        ("admin-ops", Some(Identity::admin("ops").unwrap())),
    ] {
        let cert = read(&dir, &format!("{stem}.crt"));
        assert_eq!(
            certificate_blocks(&cert).len(),
            2,
            "{stem}: with the cross-signed copy"
        );
        assert_eq!(issuer_key_id_of_pem(&cert), Some(new_id.clone()), "{stem}");
        let old_key = &before
            .iter()
            .find(|(n, _)| *n == format!("{stem}.key"))
            .unwrap()
            .1;
        assert_ne!(
            &read(&dir, &format!("{stem}.key")),
            old_key,
            "{stem}: a new key"
        );
        assert_eq!(mode(&dir.join(format!("{stem}.key"))), 0o600);
        if let Some(identity) = identity {
            assert_eq!(identity_from_pem(&cert), Ok(identity));
        }
    }
    let hub = der(&read(&dir, "hub.crt"));
    let (_, hub) = x509_parser::parse_x509_certificate(&hub).unwrap();
    let sans = &hub
        .subject_alternative_name()
        .unwrap()
        .unwrap()
        .value
        .general_names;
    assert!(
        sans.contains(&GeneralName::DNSName("hub.example.org")),
        "{sans:?}"
    );
    assert_eq!(sans.len(), 2, "{sans:?}");
    assert_eq!(
        admin_scope_from_der(&der(&read(&dir, "admin-ops.crt"))).unwrap(),
        old_scope
    );
    // A certificate issued while the renewal is under way carries the copy too.
    let out = flux_hub(&["certs", "--out", d, "--spoke", "later"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(certificate_blocks(&read(&dir, "spoke-later.crt")).len(), 2);
    // One renewal at a time.
    let out = flux_hub(&["certs", "--out", d, "--renew-ca"]);
    assert!(stderr(&out).contains("under way"), "{}", stderr(&out));

    let out = flux_hub(&["certs", "--out", d, "--drop-previous-ca"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read(&dir, "ca.crt"), blocks[1], "the new CA alone");
    assert!(!dir.join("ca-cross.crt").exists());
    assert_eq!(federation_id(&read(&dir, "ca.crt")).unwrap(), federation);
    for stem in ["hub", "spoke-gke", "admin-ops", "spoke-later"] {
        let cert = read(&dir, &format!("{stem}.crt"));
        assert_eq!(
            certificate_blocks(&cert).len(),
            1,
            "{stem}: the copy dropped"
        );
        assert_signed_by_ca(&dir, &format!("{stem}.crt"));
    }
}
