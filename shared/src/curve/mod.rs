//! ZeroMQ CURVE certificates for the Flux overlay network.
//!
//! Flux brokers secure their TCP overlay with the ZeroMQ CURVE mechanism and
//! share one long-term certificate, normally made by `flux keygen`. This
//! module makes and checks such certificates in pure Rust (no libzmq or
//! czmq): a Curve25519 key pair stored in czmq's `zcert` text format, which
//! is ZPL (ZeroMQ RFC 4) with the keys armoured in Z85 (ZeroMQ RFC 32).
//!
//! The text this module writes is laid out exactly like the secret
//! certificate that `flux keygen` writes:
//!
//! ```text
//! #  ZeroMQ CURVE **Secret** Certificate
//! #  DO NOT DISTRIBUTE
//!
//! metadata
//!     name = "my-cluster"
//! curve
//!     public-key = "<40 Z85 characters>"
//!     secret-key = "<40 Z85 characters>"
//! ```
//!
//! [`CurveCert::parse`] reads that format, accepting the syntax that czmq's
//! ZPL reader and Flux's own certificate reader accept (quoted or unquoted
//! values, comments, any indentation of entries), and rejects a certificate
//! for the reasons Flux would: no `name` in `metadata`, a missing key, a key
//! that is not 40 valid Z85 characters, a public key that is not the X25519
//! public key of the secret key, and metadata that Flux's reader refuses.
//!
//! Only the format is shared with czmq and Flux; the code is our own.
//!
//! Where each part lives: this file holds the certificate (key generation from a secret,
//! the writer with its byte-exact layout, and Flux's checks on what is read); `zpl.rs` the
//! ZPL reader; `z85.rs` the Z85 codec (kept by hand: the `z85` crate pads, which RFC 32
//! and libzmq do not, see there); `error.rs` what a certificate is refused for; `tests.rs`
//! the tests, which compare with `flux keygen`'s and libzmq's output.

use std::fmt;
use std::str::FromStr;

use rand::RngCore;
use x25519_dalek::{PublicKey, StaticSecret};

/// Length in bytes of a CURVE public or secret key.
pub const KEY_LEN: usize = 32;

/// Length in characters of a Z85-encoded CURVE key.
pub const Z85_KEY_LEN: usize = 40;

/// Longest certificate line Flux reads, newline excluded.
///
/// Flux reads its certificate with a 256-byte line buffer, so a longer line
/// is split in two and the certificate is refused.
pub const MAX_LINE_LEN: usize = 255;

/// Characters besides ASCII letters and digits that Flux accepts in a
/// metadata value.
const META_VALUE_EXTRA: &str = ".-:+=^!/*?&<>()[]{}@%$# \t";

/// The two comment lines and the blank line `flux keygen` starts a
/// certificate with.
const HEADER: &str = "#  ZeroMQ CURVE **Secret** Certificate\n#  DO NOT DISTRIBUTE\n\n";

mod error;
#[cfg(test)]
mod tests;
pub mod z85;
mod zpl;

pub use error::{CurveCertError, KeyKind};
use zpl::RawCert;

/// A Flux CURVE certificate: a Curve25519 key pair plus metadata.
///
/// The public key is always the X25519 public key of the secret key: every
/// constructor derives it or checks it. The metadata is the certificate
/// `name` followed by any further entries (such as `keygen.hostname`) in
/// the order they were added or read.
///
/// `Debug` shows the public key and metadata but never the secret key.
#[derive(Clone, PartialEq, Eq)]
pub struct CurveCert {
    public: [u8; KEY_LEN],
    secret: [u8; KEY_LEN],
    name: String,
    extra: Vec<(String, String)>,
}

impl CurveCert {
    /// Builds the certificate of `secret`, deriving the public key by X25519
    /// base-point multiplication (the scalar is clamped for the
    /// multiplication, as libzmq does; the stored secret is `secret` as
    /// given).
    ///
    /// `name` becomes the `metadata.name` entry, normalised to what Flux
    /// accepts so that [`to_zcert`](Self::to_zcert) always writes a
    /// certificate Flux and [`parse`](Self::parse) accept: every character
    /// outside ASCII letters, digits, space, tab and `.-:+=^!/*?&<>()[]{}@%$#`
    /// becomes `-`, and a name too long for Flux's line buffer is truncated.
    /// Deterministic: the same arguments give the same certificate.
    #[must_use]
    pub fn from_secret(secret: [u8; KEY_LEN], name: &str) -> CurveCert {
        let public = PublicKey::from(&StaticSecret::from(secret)).to_bytes();
        CurveCert {
            public,
            secret,
            name: normalise_name(name),
            extra: Vec::new(),
        }
    }

    /// Generates a certificate with a fresh secret key from the thread-local
    /// CSPRNG, which the operating system seeds. See
    /// [`from_secret`](Self::from_secret) for how `name` is used.
    #[must_use]
    pub fn generate(name: &str) -> CurveCert {
        let mut secret = [0u8; KEY_LEN];
        rand::rng().fill_bytes(&mut secret);
        CurveCert::from_secret(secret, name)
    }

    /// Returns this certificate with one more metadata entry, written after
    /// the ones it already has (for instance `keygen.hostname`).
    ///
    /// # Errors
    ///
    /// [`CurveCertError::InvalidMetadataKey`],
    /// [`CurveCertError::InvalidMetadataValue`] or
    /// [`CurveCertError::MetadataTooLong`] when Flux would refuse the entry,
    /// and [`CurveCertError::DuplicateMetadata`] when `key` is `name` or
    /// already present.
    pub fn with_metadata(mut self, key: &str, value: &str) -> Result<CurveCert, CurveCertError> {
        check_metadata_entry(key, value)?;
        if key == "name" || self.extra.iter().any(|(k, _)| k == key) {
            return Err(CurveCertError::DuplicateMetadata {
                key: key.to_owned(),
            });
        }
        self.extra.push((key.to_owned(), value.to_owned()));
        Ok(self)
    }

    /// Parses and validates a certificate in zcert (ZPL) text form.
    ///
    /// Accepts what czmq's ZPL reader and Flux's certificate reader accept
    /// for a certificate: `#` comments (whole-line or after a value), blank
    /// lines, CRLF line ends, entries indented by spaces or tabs under the
    /// `metadata` and `curve` sections, values in double quotes, single
    /// quotes or unquoted (an unquoted value ends at `#`, as in ZPL), and
    /// other top-level sections, which are ignored.
    ///
    /// # Errors
    ///
    /// - [`CurveCertError::Syntax`] for a line that is not ZPL, with its
    ///   line number;
    /// - [`CurveCertError::MissingMetadataSection`] or
    ///   [`CurveCertError::MissingName`] when there is no `metadata.name`;
    /// - [`CurveCertError::InvalidMetadataKey`],
    ///   [`CurveCertError::InvalidMetadataValue`],
    ///   [`CurveCertError::MetadataTooLong`] or
    ///   [`CurveCertError::DuplicateMetadata`] for metadata Flux refuses;
    /// - [`CurveCertError::MissingCurveSection`],
    ///   [`CurveCertError::MissingPublicKey`],
    ///   [`CurveCertError::MissingSecretKey`],
    ///   [`CurveCertError::DuplicateKey`] or
    ///   [`CurveCertError::UnknownCurveEntry`] for a `curve` section
    ///   without exactly the two keys;
    /// - [`CurveCertError::KeyLength`] or [`CurveCertError::InvalidKey`]
    ///   for a key that is not 40 Z85 characters encoding 32 bytes;
    /// - [`CurveCertError::KeyMismatch`] when the public key is not the
    ///   X25519 public key of the secret key.
    pub fn parse(text: &str) -> Result<CurveCert, CurveCertError> {
        let raw = RawCert::read(text)?;

        if !raw.has_metadata {
            return Err(CurveCertError::MissingMetadataSection);
        }
        let mut name = None;
        let mut extra = Vec::new();
        for (key, value) in raw.metadata {
            check_metadata_entry(&key, &value)?;
            if key == "name" {
                name = Some(value);
            } else {
                extra.push((key, value));
            }
        }
        let name = name.ok_or(CurveCertError::MissingName)?;

        if !raw.has_curve {
            return Err(CurveCertError::MissingCurveSection);
        }
        let public_txt = raw.public.ok_or(CurveCertError::MissingPublicKey)?;
        let secret_txt = raw.secret.ok_or(CurveCertError::MissingSecretKey)?;
        let public = decode_key(KeyKind::Public, &public_txt)?;
        let secret = decode_key(KeyKind::Secret, &secret_txt)?;
        let derived = PublicKey::from(&StaticSecret::from(secret)).to_bytes();
        if derived != public {
            return Err(CurveCertError::KeyMismatch);
        }
        Ok(CurveCert {
            public,
            secret,
            name,
            extra,
        })
    }

    /// The certificate in zcert text form, as `flux keygen` writes a secret
    /// certificate: two comment lines, a blank line, the `metadata` section
    /// (`name` first, then the other entries in order) and the `curve`
    /// section with both keys, entries indented by 4 spaces and values in
    /// double quotes. Deterministic for a given certificate.
    #[must_use]
    pub fn to_zcert(&self) -> String {
        let mut out = String::with_capacity(256);
        out.push_str(HEADER);
        out.push_str("metadata\n");
        for (key, value) in self.metadata() {
            push_entry(&mut out, key, value);
        }
        out.push_str("curve\n");
        push_entry(&mut out, KeyKind::Public.entry(), &self.public_key_z85());
        push_entry(&mut out, KeyKind::Secret.entry(), &self.secret_key_z85());
        out
    }

    /// The public key, Z85-encoded (40 characters).
    #[must_use]
    pub fn public_key_z85(&self) -> String {
        z85::encode_groups(&self.public)
    }

    /// The secret key, Z85-encoded (40 characters). Handle with care.
    #[must_use]
    pub fn secret_key_z85(&self) -> String {
        z85::encode_groups(&self.secret)
    }

    /// The 32-byte public key.
    pub fn public_key(&self) -> &[u8; KEY_LEN] {
        &self.public
    }

    /// The 32-byte secret key. Handle with care.
    pub fn secret_key(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }

    /// The certificate name (`metadata.name`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The metadata entries other than `name`, in order.
    pub fn extra_metadata(&self) -> &[(String, String)] {
        &self.extra
    }

    /// All metadata entries in the order [`to_zcert`](Self::to_zcert)
    /// writes them: `name` first, then the others.
    pub fn metadata(&self) -> impl Iterator<Item = (&str, &str)> {
        std::iter::once(("name", self.name.as_str()))
            .chain(self.extra.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }
}

impl fmt::Debug for CurveCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CurveCert")
            .field("name", &self.name)
            .field("extra_metadata", &self.extra)
            .field("public_key", &self.public_key_z85())
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

impl FromStr for CurveCert {
    type Err = CurveCertError;

    /// Same as [`CurveCert::parse`].
    fn from_str(text: &str) -> Result<CurveCert, CurveCertError> {
        CurveCert::parse(text)
    }
}

/// Parses and validates a certificate in zcert text form; the same as
/// [`CurveCert::parse`].
///
/// # Errors
///
/// As [`CurveCert::parse`].
pub fn parse(text: &str) -> Result<CurveCert, CurveCertError> {
    CurveCert::parse(text)
}

/// Appends one `    key = "value"` line.
fn push_entry(out: &mut String, key: &str, value: &str) {
    out.push_str("    ");
    out.push_str(key);
    out.push_str(" = \"");
    out.push_str(value);
    out.push_str("\"\n");
}

/// Length of the line [`push_entry`] writes for `key` and `value`, newline
/// excluded.
fn entry_line_len(key: &str, value: &str) -> usize {
    "    ".len() + key.len() + " = \"".len() + value.len() + "\"".len()
}

/// Whether Flux accepts `ch` in a metadata value.
fn is_meta_value_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || META_VALUE_EXTRA.contains(ch)
}

/// Whether Flux accepts `ch` in a metadata entry name.
fn is_meta_key_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || ch == '-' || ch == '.'
}

/// Checks one metadata entry against the rules of Flux's certificate
/// reader.
fn check_metadata_entry(key: &str, value: &str) -> Result<(), CurveCertError> {
    if key.is_empty() || !key.chars().all(is_meta_key_char) {
        return Err(CurveCertError::InvalidMetadataKey {
            key: key.to_owned(),
        });
    }
    if let Some(ch) = value.chars().find(|&ch| !is_meta_value_char(ch)) {
        return Err(CurveCertError::InvalidMetadataValue {
            key: key.to_owned(),
            ch,
        });
    }
    let len = entry_line_len(key, value);
    if len > MAX_LINE_LEN {
        return Err(CurveCertError::MetadataTooLong {
            key: key.to_owned(),
            len,
            max: MAX_LINE_LEN,
        });
    }
    Ok(())
}

/// Makes `name` a value Flux accepts for `metadata.name`: characters it
/// refuses become `-` and the result is cut to fit one certificate line.
fn normalise_name(name: &str) -> String {
    let max = MAX_LINE_LEN - entry_line_len("name", "");
    name.chars()
        .map(|ch| if is_meta_value_char(ch) { ch } else { '-' })
        .take(max)
        .collect()
}

/// Decodes one Z85 key entry into 32 bytes.
fn decode_key(kind: KeyKind, text: &str) -> Result<[u8; KEY_LEN], CurveCertError> {
    let found = text.chars().count();
    if found != Z85_KEY_LEN {
        return Err(CurveCertError::KeyLength { kind, found });
    }
    let bytes = z85::decode(text).map_err(|source| CurveCertError::InvalidKey { kind, source })?;
    <[u8; KEY_LEN]>::try_from(bytes.as_slice())
        .map_err(|_| CurveCertError::KeyLength { kind, found })
}
