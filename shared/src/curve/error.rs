//! What a certificate can be refused for ([`CurveCertError`]) and which key an error is
//! about ([`KeyKind`]).

use std::fmt;

use super::{Z85_KEY_LEN, z85};

/// Which of the two keys of a certificate an error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// The `curve.public-key` entry.
    Public,
    /// The `curve.secret-key` entry.
    Secret,
}

impl KeyKind {
    /// The certificate entry holding this key: `public-key` or `secret-key`.
    pub fn entry(self) -> &'static str {
        match self {
            KeyKind::Public => "public-key",
            KeyKind::Secret => "secret-key",
        }
    }
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.entry())
    }
}

/// Why a CURVE certificate was refused.
///
/// The messages are meant for users and name the offending part of the
/// certificate; they never contain key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CurveCertError {
    /// A line is not valid ZPL.
    #[error("line {line}: {message}")]
    Syntax {
        /// Line number, counted from 1.
        line: usize,
        /// What is wrong with the line.
        message: String,
    },
    /// There is no `metadata` section.
    #[error("no 'metadata' section: Flux requires a certificate 'name' in 'metadata'")]
    MissingMetadataSection,
    /// The `metadata` section has no `name` entry.
    #[error("'metadata' section has no 'name' entry: Flux requires a certificate name")]
    MissingName,
    /// A metadata entry has a name Flux does not accept.
    #[error(
        "invalid metadata entry name {key:?}: Flux accepts only ASCII letters, digits, '-' and '.'"
    )]
    InvalidMetadataKey {
        /// The offending entry name.
        key: String,
    },
    /// A metadata value holds a character Flux does not accept.
    #[error(
        "metadata '{key}' contains {ch:?}, which Flux does not accept \
         (allowed: ASCII letters, digits, space, tab and .-:+=^!/*?&<>()[]{{}}@%$#)"
    )]
    InvalidMetadataValue {
        /// The entry whose value is refused.
        key: String,
        /// The first character Flux does not accept.
        ch: char,
    },
    /// A metadata entry is too long for the line buffer Flux reads with.
    #[error(
        "metadata '{key}' is too long: its certificate line would be {len} characters, \
         Flux reads at most {max}"
    )]
    MetadataTooLong {
        /// The entry that is too long.
        key: String,
        /// Length its line would have, newline excluded.
        len: usize,
        /// The longest line Flux reads ([`super::MAX_LINE_LEN`]).
        max: usize,
    },
    /// A metadata entry appears more than once.
    #[error("metadata '{key}' appears more than once")]
    DuplicateMetadata {
        /// The repeated entry name.
        key: String,
    },
    /// There is no `curve` section.
    #[error("no 'curve' section: the certificate has no keys")]
    MissingCurveSection,
    /// The `curve` section has an entry other than the two keys.
    #[error("unknown entry '{key}' in 'curve' section: expected 'public-key' or 'secret-key'")]
    UnknownCurveEntry {
        /// The unknown entry name.
        key: String,
    },
    /// A key appears more than once in the `curve` section.
    #[error("'curve.{kind}' appears more than once")]
    DuplicateKey {
        /// The repeated key.
        kind: KeyKind,
    },
    /// The `curve` section has no `public-key`.
    #[error("'curve' section has no 'public-key'")]
    MissingPublicKey,
    /// The `curve` section has no `secret-key`, as in a public certificate.
    #[error(
        "'curve' section has no 'secret-key': this is a public certificate, \
         Flux needs the secret certificate"
    )]
    MissingSecretKey,
    /// A key does not have the length of a Z85-encoded 32-byte key.
    #[error(
        "'curve.{kind}' must be {expected} Z85 characters (a 32-byte key), found {found}",
        expected = Z85_KEY_LEN
    )]
    KeyLength {
        /// The key with the wrong length.
        kind: KeyKind,
        /// Its length, in characters.
        found: usize,
    },
    /// A key is not valid Z85.
    #[error("'curve.{kind}' is not a valid Z85 key: {source}")]
    InvalidKey {
        /// The key that failed to decode.
        kind: KeyKind,
        /// Why it failed to decode.
        #[source]
        source: z85::Z85Error,
    },
    /// The public key is not the public key of the secret key.
    #[error(
        "'curve.public-key' does not match 'curve.secret-key': \
         the public key must be the X25519 public key of the secret key"
    )]
    KeyMismatch,
}
