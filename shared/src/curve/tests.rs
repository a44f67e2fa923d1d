//! Tests of certificates: RFC 7748 and libzmq vectors, the exact layout `flux keygen`
//! writes, and what Flux refuses.

use super::*;
use proptest::prelude::*;

/// RFC 7748 section 6.1: Alice's private key.
const ALICE_SECRET: &str = "77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a";
/// RFC 7748 section 6.1: Alice's public key.
const ALICE_PUBLIC: &str = "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a";
/// RFC 7748 section 6.1: Bob's private key.
const BOB_SECRET: &str = "5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb";
/// RFC 7748 section 6.1: Bob's public key.
const BOB_PUBLIC: &str = "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f";

/// Key pairs made by libzmq 4.3.5 (`zmq_curve_keypair`, through pyzmq),
/// as (public, secret) Z85 text.
const LIBZMQ_PAIRS: [(&str, &str); 2] = [
    (
        "8QH?^zLwAMh=&W$RO5D7@wg4-5XhUW3aeabA{nM>",
        "tU1u}Na{/&Wx+GsmJi@vPiU3tR)djv/OKgnPt(L^",
    ),
    (
        "bhue>Uw9I4!uxXCD6LVeK*^Qg<aR*6HDltA&ksj#",
        "FMlfV-ZO64X/4dL^r.Y}N}y%3jrHx/+Z*&=-6SR2",
    ),
];

fn hex32(hex: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("test hex");
    }
    out
}

fn alice() -> CurveCert {
    CurveCert::from_secret(hex32(ALICE_SECRET), "alice")
}

fn cert_text(metadata: &str, curve: &str) -> String {
    format!("{HEADER}metadata\n{metadata}curve\n{curve}")
}

fn alice_curve() -> String {
    let cert = alice();
    format!(
        "    public-key = \"{}\"\n    secret-key = \"{}\"\n",
        cert.public_key_z85(),
        cert.secret_key_z85()
    )
}

#[test]
fn rfc7748_vectors_through_from_secret() {
    assert_eq!(alice().public_key(), &hex32(ALICE_PUBLIC));
    assert_eq!(alice().secret_key(), &hex32(ALICE_SECRET));
    let bob = CurveCert::from_secret(hex32(BOB_SECRET), "bob");
    assert_eq!(bob.public_key(), &hex32(BOB_PUBLIC));
}

#[test]
fn libzmq_key_pairs_agree() {
    for (public, secret) in LIBZMQ_PAIRS {
        let secret_bytes = decode_key(KeyKind::Secret, secret).unwrap();
        let cert = CurveCert::from_secret(secret_bytes, "libzmq");
        assert_eq!(cert.public_key_z85(), public);
        assert_eq!(cert.secret_key_z85(), secret);
        let text = cert_text(
            "    name = \"libzmq\"\n",
            &format!("    public-key = \"{public}\"\n    secret-key = \"{secret}\"\n"),
        );
        assert_eq!(CurveCert::parse(&text).unwrap(), cert);
    }
}

#[test]
fn from_secret_is_deterministic() {
    assert_eq!(alice(), alice());
    assert_eq!(alice().to_zcert(), alice().to_zcert());
}

#[test]
fn zcert_layout_is_exact() {
    let cert = alice().with_metadata("keygen.hostname", "node-0").unwrap();
    let expected = format!(
        "#  ZeroMQ CURVE **Secret** Certificate\n\
         #  DO NOT DISTRIBUTE\n\
         \n\
         metadata\n\
         \x20   name = \"alice\"\n\
         \x20   keygen.hostname = \"node-0\"\n\
         curve\n\
         \x20   public-key = \"{}\"\n\
         \x20   secret-key = \"{}\"\n",
        cert.public_key_z85(),
        cert.secret_key_z85()
    );
    assert_eq!(cert.to_zcert(), expected);
    assert_eq!(cert.public_key_z85().len(), Z85_KEY_LEN);
    assert_eq!(
        z85::decode(&cert.public_key_z85()).unwrap(),
        hex32(ALICE_PUBLIC)
    );
}

#[test]
fn round_trip_keeps_metadata_in_order() {
    let cert = alice()
        .with_metadata("keygen.hostname", "host-1")
        .unwrap()
        .with_metadata("keygen.time", "2024-10-28T13:30:32")
        .unwrap()
        .with_metadata("keygen.zmq-version", "4.3.5")
        .unwrap();
    let parsed = CurveCert::parse(&cert.to_zcert()).unwrap();
    assert_eq!(parsed, cert);
    let keys: Vec<_> = parsed.metadata().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "name",
            "keygen.hostname",
            "keygen.time",
            "keygen.zmq-version"
        ]
    );
}

#[test]
fn generate_makes_distinct_valid_certs() {
    let a = CurveCert::generate("gen");
    let b = CurveCert::generate("gen");
    assert_ne!(a.secret_key(), b.secret_key());
    assert_eq!(CurveCert::parse(&a.to_zcert()).unwrap(), a);
    assert_eq!(a.name(), "gen");
}

#[test]
fn debug_redacts_secret() {
    let cert = alice();
    let shown = format!("{cert:?}");
    assert!(shown.contains("<redacted>"), "{shown}");
    assert!(shown.contains(&cert.public_key_z85()), "{shown}");
    assert!(!shown.contains(&cert.secret_key_z85()), "{shown}");
    assert!(!shown.contains(ALICE_SECRET), "{shown}");
}

#[test]
fn name_is_normalised_for_flux() {
    let cert = CurveCert::from_secret([7; 32], "evil\"\n    secret-key = \"x_y\u{e9}");
    assert_eq!(cert.name(), "evil--    secret-key = -x-y-");
    assert_eq!(CurveCert::parse(&cert.to_zcert()).unwrap(), cert);
    let long = CurveCert::from_secret([7; 32], &"n".repeat(1000));
    assert_eq!(entry_line_len("name", long.name()), MAX_LINE_LEN);
    assert_eq!(CurveCert::parse(&long.to_zcert()).unwrap(), long);
    let empty = CurveCert::from_secret([7; 32], "");
    assert_eq!(CurveCert::parse(&empty.to_zcert()).unwrap(), empty);
}

#[test]
fn with_metadata_rejects_what_flux_rejects() {
    assert!(matches!(
        alice().with_metadata("name", "again"),
        Err(CurveCertError::DuplicateMetadata { .. })
    ));
    assert!(matches!(
        alice().with_metadata("bad_key", "v"),
        Err(CurveCertError::InvalidMetadataKey { .. })
    ));
    assert!(matches!(
        alice().with_metadata("", "v"),
        Err(CurveCertError::InvalidMetadataKey { .. })
    ));
    assert_eq!(
        alice().with_metadata("k", "a\"b"),
        Err(CurveCertError::InvalidMetadataValue {
            key: "k".into(),
            ch: '"'
        })
    );
    assert!(matches!(
        alice().with_metadata("k", &"v".repeat(250)),
        Err(CurveCertError::MetadataTooLong { .. })
    ));
    let twice = alice().with_metadata("k", "1").unwrap();
    assert!(matches!(
        twice.with_metadata("k", "2"),
        Err(CurveCertError::DuplicateMetadata { .. })
    ));
}

#[test]
fn parses_tolerated_syntax() {
    let cert = alice();
    let text = format!(
        "# comment\r\n\
         \r\n\
         metadata   # trailing comment\r\n\
         \tname = alice    # unquoted, tab indent\r\n\
         \x20 keygen.hostname='h1'   \r\n\
         other\n\
         \x20   ignored = \"whatever_is here\"\n\
         \x20   child_without_value\n\
         curve\n\
         \x20       public-key=\"{}\"  # comment\n\
         \x20   secret-key = '{}'\n",
        cert.public_key_z85(),
        cert.secret_key_z85()
    );
    let parsed = CurveCert::parse(&text).unwrap();
    assert_eq!(parsed.name(), "alice");
    assert_eq!(
        parsed.extra_metadata(),
        [("keygen.hostname".to_owned(), "h1".to_owned())]
    );
    assert_eq!(parsed.public_key(), cert.public_key());
    assert_eq!(parsed.secret_key(), cert.secret_key());
    assert_eq!(
        "\n".parse::<CurveCert>(),
        Err(CurveCertError::MissingMetadataSection)
    );
}

#[test]
fn name_need_not_come_first() {
    let text = cert_text(
        "    keygen.userid = \"0\"\n    name = \"alice\"\n",
        &alice_curve(),
    );
    let parsed = parse(&text).unwrap();
    assert_eq!(parsed.name(), "alice");
    assert_eq!(CurveCert::parse(&parsed.to_zcert()).unwrap(), parsed);
}

#[test]
fn rejects_missing_name() {
    let text = cert_text("    keygen.hostname = \"h\"\n", &alice_curve());
    assert_eq!(CurveCert::parse(&text), Err(CurveCertError::MissingName));
    let text = format!("curve\n{}", alice_curve());
    assert_eq!(
        CurveCert::parse(&text),
        Err(CurveCertError::MissingMetadataSection)
    );
}

#[test]
fn rejects_missing_keys() {
    let cert = alice();
    let only_public = format!("    public-key = \"{}\"\n", cert.public_key_z85());
    let only_secret = format!("    secret-key = \"{}\"\n", cert.secret_key_z85());
    let name = "    name = \"alice\"\n";
    assert_eq!(
        CurveCert::parse(&cert_text(name, &only_public)),
        Err(CurveCertError::MissingSecretKey)
    );
    assert_eq!(
        CurveCert::parse(&cert_text(name, &only_secret)),
        Err(CurveCertError::MissingPublicKey)
    );
    assert_eq!(
        CurveCert::parse(&format!("metadata\n{name}")),
        Err(CurveCertError::MissingCurveSection)
    );
}

#[test]
fn rejects_mismatched_keys() {
    let a = alice();
    let b = CurveCert::from_secret(hex32(BOB_SECRET), "bob");
    let curve = format!(
        "    public-key = \"{}\"\n    secret-key = \"{}\"\n",
        b.public_key_z85(),
        a.secret_key_z85()
    );
    assert_eq!(
        CurveCert::parse(&cert_text("    name = \"x\"\n", &curve)),
        Err(CurveCertError::KeyMismatch)
    );
}

#[test]
fn rejects_bad_keys() {
    let a = alice();
    let public = a.public_key_z85();
    let secret = a.secret_key_z85();
    let name = "    name = \"x\"\n";
    let with = |p: &str, s: &str| {
        CurveCert::parse(&cert_text(
            name,
            &format!("    public-key = \"{p}\"\n    secret-key = \"{s}\"\n"),
        ))
    };
    assert_eq!(
        with(&public, &secret[..39]),
        Err(CurveCertError::KeyLength {
            kind: KeyKind::Secret,
            found: 39
        })
    );
    assert_eq!(
        with(&format!("{public}0"), &secret),
        Err(CurveCertError::KeyLength {
            kind: KeyKind::Public,
            found: 41
        })
    );
    let bad_char = format!("{}~", &secret[..39]);
    assert_eq!(
        with(&public, &bad_char),
        Err(CurveCertError::InvalidKey {
            kind: KeyKind::Secret,
            source: z85::Z85Error::InvalidChar { ch: '~', pos: 39 }
        })
    );
    let overflow = format!("#####{}", &public[5..]);
    assert_eq!(
        with(&overflow, &secret),
        Err(CurveCertError::InvalidKey {
            kind: KeyKind::Public,
            source: z85::Z85Error::Overflow { pos: 0 }
        })
    );
    // An unquoted key is cut at '#', as in ZPL, and then is too short.
    let text = cert_text(
        name,
        &format!("    public-key = {public}\n    secret-key = {secret}\n"),
    );
    let hash_free = !public.contains('#') && !secret.contains('#');
    assert_eq!(CurveCert::parse(&text).is_ok(), hash_free);
    let cut = cert_text(
        name,
        &format!("    public-key = abc#defghij\n    secret-key = \"{secret}\"\n"),
    );
    assert_eq!(
        CurveCert::parse(&cut),
        Err(CurveCertError::KeyLength {
            kind: KeyKind::Public,
            found: 3
        })
    );
}

#[test]
fn rejects_duplicates_and_unknown_curve_entries() {
    let curve = alice_curve();
    assert_eq!(
        CurveCert::parse(&cert_text("    name = \"a\"\n    name = \"b\"\n", &curve)),
        Err(CurveCertError::DuplicateMetadata { key: "name".into() })
    );
    let doubled = format!("{curve}{}", curve.lines().next().unwrap_or_default());
    assert_eq!(
        CurveCert::parse(&cert_text("    name = \"a\"\n", &doubled)),
        Err(CurveCertError::DuplicateKey {
            kind: KeyKind::Public
        })
    );
    let unknown = format!("{curve}    secret_key = \"x\"\n");
    assert_eq!(
        CurveCert::parse(&cert_text("    name = \"a\"\n", &unknown)),
        Err(CurveCertError::UnknownCurveEntry {
            key: "secret_key".into()
        })
    );
}

#[test]
fn rejects_metadata_flux_refuses() {
    let curve = alice_curve();
    assert_eq!(
        CurveCert::parse(&cert_text("    name = \"my_cluster\"\n", &curve)),
        Err(CurveCertError::InvalidMetadataValue {
            key: "name".into(),
            ch: '_'
        })
    );
    assert_eq!(
        CurveCert::parse(&cert_text("    name = \"a\"\n    my_key = \"v\"\n", &curve)),
        Err(CurveCertError::InvalidMetadataKey {
            key: "my_key".into()
        })
    );
    let long = format!("    name = \"{}\"\n", "n".repeat(243));
    assert!(matches!(
        CurveCert::parse(&cert_text(&long, &curve)),
        Err(CurveCertError::MetadataTooLong { len: 256, .. })
    ));
}

#[test]
fn rejects_bad_syntax_with_line_numbers() {
    let curve = alice_curve();
    let cases = [
        ("    name = \"open\n", 5),
        ("    name = \"a\" junk\n", 5),
        ("    name junk\n", 5),
        ("    name\n", 5),
        ("    = \"x\"\n", 5),
        ("    /name = \"x\"\n", 5),
    ];
    for (metadata, line) in cases {
        let result = CurveCert::parse(&cert_text(metadata, &curve));
        assert!(
            matches!(&result, Err(CurveCertError::Syntax { line: l, .. }) if *l == line),
            "{metadata:?}: {result:?}"
        );
    }
    let result = CurveCert::parse("    name = \"x\"\nmetadata\n");
    assert!(
        matches!(result, Err(CurveCertError::Syntax { line: 1, .. })),
        "{result:?}"
    );
    let result = CurveCert::parse("metadata = \"x\"\n");
    assert!(
        matches!(result, Err(CurveCertError::Syntax { line: 1, .. })),
        "{result:?}"
    );
}

#[test]
fn messages_name_the_problem() {
    let cases: [(CurveCertError, &str); 6] = [
        (CurveCertError::MissingName, "no 'name'"),
        (CurveCertError::MissingSecretKey, "no 'secret-key'"),
        (CurveCertError::KeyMismatch, "does not match"),
        (
            CurveCertError::KeyLength {
                kind: KeyKind::Public,
                found: 3,
            },
            "'curve.public-key' must be 40 Z85 characters (a 32-byte key), found 3",
        ),
        (
            CurveCertError::InvalidKey {
                kind: KeyKind::Secret,
                source: z85::Z85Error::InvalidChar { ch: '~', pos: 2 },
            },
            "'curve.secret-key' is not a valid Z85 key: character '~' at position 2",
        ),
        (
            CurveCertError::Syntax {
                line: 4,
                message: "oops".into(),
            },
            "line 4: oops",
        ),
    ];
    for (error, expected) in cases {
        let shown = error.to_string();
        assert!(shown.contains(expected), "{shown:?} lacks {expected:?}");
    }
}

/// A metadata value Flux accepts.
fn meta_value() -> impl Strategy<Value = String> {
    proptest::string::string_regex("[A-Za-z0-9 \t.:+=^!/*?&<>()\\[\\]{}@%$#-]{0,40}")
        .expect("valid regex")
}

/// A metadata key Flux accepts, other than `name`.
fn meta_key() -> impl Strategy<Value = String> {
    proptest::string::string_regex("keygen\\.[a-z0-9.-]{1,20}").expect("valid regex")
}

proptest! {
    #[test]
    fn cert_round_trips(
        secret in any::<[u8; 32]>(),
        name in ".{0,60}",
        extra in proptest::collection::vec((meta_key(), meta_value()), 0..4),
    ) {
        let mut cert = CurveCert::from_secret(secret, &name);
        for (key, value) in extra {
            if let Ok(next) = cert.clone().with_metadata(&key, &value) {
                cert = next;
            }
        }
        let text = cert.to_zcert();
        let parsed = CurveCert::parse(&text);
        prop_assert_eq!(parsed.as_ref(), Ok(&cert));
        prop_assert_eq!(parsed.map(|c| c.to_zcert()), Ok(text));
    }

    #[test]
    fn parse_never_panics(text in "(([ \t]{0,5}[a-z#=\"' -]{0,12}[^\n]{0,8})?\n){0,12}") {
        let _ = CurveCert::parse(&text);
    }

    #[test]
    fn parse_survives_mutation(
        secret in any::<[u8; 32]>(),
        pos in any::<prop::sample::Index>(),
        replacement in any::<char>(),
    ) {
        let text = CurveCert::from_secret(secret, "m").to_zcert();
        let chars: Vec<char> = text.chars().collect();
        let at = pos.index(chars.len());
        let mutated: String = chars
            .iter()
            .enumerate()
            .map(|(i, &c)| if i == at { replacement } else { c })
            .collect();
        if let Ok(cert) = CurveCert::parse(&mutated) {
            let derived = CurveCert::from_secret(*cert.secret_key(), cert.name());
            prop_assert_eq!(derived.public_key(), cert.public_key());
        }
    }
}
