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
//! Size: one certificate format in one file (key generation, Z85, the ZPL reader and
//! writer with its byte-exact layout, and the checks on both); about 580 lines are the
//! tests, which compare with `flux keygen`'s output.

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

/// Z85, the ZeroMQ Base-85 encoding (ZeroMQ RFC 32), used to armour CURVE
/// keys as text.
///
/// Every 4 bytes, read as a big-endian 32-bit number, become 5 characters
/// from an 85-character alphabet, most significant digit first. The binary
/// length must be a multiple of 4 and the text length a multiple of 5.
pub mod z85 {
    /// The 85 characters of the Z85 alphabet, in digit order.
    pub const ALPHABET: &[u8; 85] =
        b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";

    /// Marks a byte that is not in [`ALPHABET`] in the decoding table.
    const NOT_Z85: u8 = 0xff;

    /// Digit value of every byte, or [`NOT_Z85`].
    const DECODE: [u8; 256] = {
        let mut table = [NOT_Z85; 256];
        let mut digit = 0;
        while digit < ALPHABET.len() {
            table[ALPHABET[digit] as usize] = digit as u8;
            digit += 1;
        }
        table
    };

    /// Why a Z85 encoding or decoding failed.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    pub enum Z85Error {
        /// The binary input to [`encode`] is not a whole number of 4-byte
        /// groups.
        #[error("{len} bytes cannot be Z85-encoded: the length must be a multiple of 4")]
        BinaryLength {
            /// Length of the input, in bytes.
            len: usize,
        },
        /// The text input to [`decode`] is not a whole number of
        /// 5-character groups.
        #[error("{len} characters are not valid Z85: the length must be a multiple of 5")]
        TextLength {
            /// Length of the input, in characters.
            len: usize,
        },
        /// The text contains a character outside the Z85 alphabet.
        #[error("character {ch:?} at position {pos} is not a Z85 character")]
        InvalidChar {
            /// The offending character.
            ch: char,
            /// Its position, counted in characters from 0.
            pos: usize,
        },
        /// A 5-character group encodes a number that does not fit in
        /// 32 bits.
        #[error("characters {pos} to {} encode a number larger than 32 bits", pos + 4)]
        Overflow {
            /// Position of the group's first character, counted from 0.
            pos: usize,
        },
    }

    /// Encodes `data` as Z85 text.
    ///
    /// # Errors
    ///
    /// [`Z85Error::BinaryLength`] when `data.len()` is not a multiple of 4.
    pub fn encode(data: &[u8]) -> Result<String, Z85Error> {
        if !data.len().is_multiple_of(4) {
            return Err(Z85Error::BinaryLength { len: data.len() });
        }
        Ok(encode_groups(data))
    }

    /// Encodes every whole 4-byte group of `data`; callers make sure there
    /// is no partial group.
    pub(super) fn encode_groups(data: &[u8]) -> String {
        let mut out = String::with_capacity(data.len() / 4 * 5);
        for group in data.chunks_exact(4) {
            let mut value = u32::from_be_bytes([group[0], group[1], group[2], group[3]]);
            let mut digits = [0u8; 5];
            for slot in digits.iter_mut().rev() {
                *slot = ALPHABET[(value % 85) as usize];
                value /= 85;
            }
            out.extend(digits.iter().map(|&b| char::from(b)));
        }
        out
    }

    /// Decodes Z85 `text` into bytes.
    ///
    /// # Errors
    ///
    /// [`Z85Error::InvalidChar`] for a character outside the alphabet,
    /// [`Z85Error::TextLength`] when the length is not a multiple of 5 and
    /// [`Z85Error::Overflow`] for a group above `u32::MAX`.
    pub fn decode(text: &str) -> Result<Vec<u8>, Z85Error> {
        let mut digits = Vec::with_capacity(text.len());
        for (pos, ch) in text.chars().enumerate() {
            let digit = u8::try_from(ch)
                .ok()
                .map(|b| DECODE[usize::from(b)])
                .filter(|&d| d != NOT_Z85)
                .ok_or(Z85Error::InvalidChar { ch, pos })?;
            digits.push(digit);
        }
        if !digits.len().is_multiple_of(5) {
            return Err(Z85Error::TextLength { len: digits.len() });
        }
        let mut out = Vec::with_capacity(digits.len() / 5 * 4);
        for (index, group) in digits.chunks_exact(5).enumerate() {
            let value = group
                .iter()
                .fold(0u64, |acc, &digit| acc * 85 + u64::from(digit));
            let value = u32::try_from(value).map_err(|_| Z85Error::Overflow { pos: index * 5 })?;
            out.extend_from_slice(&value.to_be_bytes());
        }
        Ok(out)
    }
}

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
        /// The longest line Flux reads ([`MAX_LINE_LEN`]).
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

/// The section a line belongs to while reading.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Section {
    /// Before the first section line.
    None,
    /// Inside `metadata`.
    Metadata,
    /// Inside `curve`.
    Curve,
    /// Inside a section a certificate does not use; its entries are
    /// ignored.
    Other,
}

/// What the reader collected, before validation.
#[derive(Default)]
struct RawCert {
    has_metadata: bool,
    has_curve: bool,
    metadata: Vec<(String, String)>,
    public: Option<String>,
    secret: Option<String>,
}

/// One meaningful ZPL line: a name, whether it was indented, and its value
/// if it had `=`.
struct Line<'a> {
    indented: bool,
    name: &'a str,
    value: Option<&'a str>,
}

impl RawCert {
    /// Reads the sections and entries of `text`, checking ZPL syntax and the
    /// shape of the `curve` section.
    fn read(text: &str) -> Result<RawCert, CurveCertError> {
        let mut raw = RawCert::default();
        let mut section = Section::None;
        for (index, line) in text.split('\n').enumerate() {
            let lineno = index + 1;
            let syntax = |message: String| CurveCertError::Syntax {
                line: lineno,
                message,
            };
            let Some(line) = read_line(line).map_err(syntax)? else {
                continue;
            };
            if !line.indented {
                if line.value.is_some() && matches!(line.name, "metadata" | "curve") {
                    return Err(syntax(format!(
                        "section '{}' must not have a value",
                        line.name
                    )));
                }
                section = match line.name {
                    "metadata" => {
                        raw.has_metadata = true;
                        Section::Metadata
                    }
                    "curve" => {
                        raw.has_curve = true;
                        Section::Curve
                    }
                    _ => Section::Other,
                };
                continue;
            }
            let value = match (section, line.value) {
                (Section::None, _) => {
                    return Err(syntax(format!(
                        "entry '{}' is indented but no section starts before it",
                        line.name
                    )));
                }
                (Section::Other, _) => continue,
                (_, None) => {
                    return Err(syntax(format!(
                        "entry '{}' has no value: expected {} = \"value\"",
                        line.name, line.name
                    )));
                }
                (_, Some(value)) => value,
            };
            if section == Section::Metadata {
                if raw.metadata.iter().any(|(k, _)| k == line.name) {
                    return Err(CurveCertError::DuplicateMetadata {
                        key: line.name.to_owned(),
                    });
                }
                raw.metadata.push((line.name.to_owned(), value.to_owned()));
                continue;
            }
            let (kind, slot) = match line.name {
                "public-key" => (KeyKind::Public, &mut raw.public),
                "secret-key" => (KeyKind::Secret, &mut raw.secret),
                other => {
                    return Err(CurveCertError::UnknownCurveEntry {
                        key: other.to_owned(),
                    });
                }
            };
            if slot.is_some() {
                return Err(CurveCertError::DuplicateKey { kind });
            }
            *slot = Some(value.to_owned());
        }
        Ok(raw)
    }
}

/// Whether `ch` may appear in a ZPL name (the set czmq accepts).
fn is_zpl_name_char(ch: char) -> bool {
    ch.is_ascii_alphanumeric() || "$-_@.&+/".contains(ch)
}

/// Checks that only blanks or a comment follow a value or name.
fn check_line_end(rest: &str) -> Result<(), String> {
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
    if rest.is_empty() || rest.starts_with('#') {
        Ok(())
    } else {
        Err(format!("unexpected text {:?}", shorten(rest)))
    }
}

/// Cuts `text` to a length fit for an error message.
fn shorten(text: &str) -> String {
    const MAX: usize = 32;
    if text.chars().count() <= MAX {
        text.to_owned()
    } else {
        let mut short: String = text.chars().take(MAX).collect();
        short.push('…');
        short
    }
}

/// Reads one line; `None` for a blank or comment line.
fn read_line(line: &str) -> Result<Option<Line<'_>>, String> {
    let line = line.trim_end_matches(|c: char| c.is_ascii_whitespace());
    let body = line.trim_start_matches([' ', '\t']);
    if body.is_empty() || body.starts_with('#') {
        return Ok(None);
    }
    let indented = body.len() != line.len();
    let name_len = body
        .find(|c: char| !is_zpl_name_char(c))
        .unwrap_or(body.len());
    let (name, rest) = body.split_at(name_len);
    if name.is_empty() {
        return Err(format!("expected a name, found {:?}", shorten(body)));
    }
    if name.starts_with('/') || name.ends_with('/') {
        return Err(format!(
            "'/' is not valid at the start or end of name '{name}'"
        ));
    }
    let rest = rest.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let Some(after_eq) = rest.strip_prefix('=') else {
        check_line_end(rest).map_err(|e| format!("{e} after name '{name}': expected '='"))?;
        return Ok(Some(Line {
            indented,
            name,
            value: None,
        }));
    };
    let after_eq = after_eq.trim_start_matches(|c: char| c.is_ascii_whitespace());
    let value = match after_eq.chars().next() {
        Some(quote @ ('"' | '\'')) => {
            let inner = &after_eq[1..];
            let Some(end) = inner.find(quote) else {
                return Err(format!("value of '{name}' has no closing {quote}"));
            };
            check_line_end(&inner[end + 1..])
                .map_err(|e| format!("{e} after the value of '{name}'"))?;
            &inner[..end]
        }
        _ => {
            let end = after_eq.find('#').unwrap_or(after_eq.len());
            after_eq[..end].trim_end_matches(|c: char| c.is_ascii_whitespace())
        }
    };
    Ok(Some(Line {
        indented,
        name,
        value: Some(value),
    }))
}

#[cfg(test)]
mod tests {
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
    fn z85_spec_vector() {
        let bytes = [0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B];
        assert_eq!(z85::encode(&bytes).unwrap(), "HelloWorld");
        assert_eq!(z85::decode("HelloWorld").unwrap(), bytes);
    }

    #[test]
    fn z85_32_byte_vector() {
        // The 32-byte key of the Z85 reference test, checked with pyzmq.
        let bytes = hex32("8e0bdd697628b91d8f245587ee95c5b04d48963f79259877b49cd9063aead3b7");
        let text = "JTKVSB%%)wK0E.X)V>+}o?pNmC{O&4W4b!Ni{Lh6";
        assert_eq!(z85::encode(&bytes).unwrap(), text);
        assert_eq!(z85::decode(text).unwrap(), bytes);
    }

    #[test]
    fn z85_extremes() {
        assert_eq!(z85::encode(&[0; 4]).unwrap(), "00000");
        assert_eq!(z85::encode(&[0xff; 4]).unwrap(), "%nSc0");
        assert_eq!(z85::decode("%nSc0").unwrap(), [0xff; 4]);
        assert_eq!(z85::encode(&[]).unwrap(), "");
        assert_eq!(z85::decode("").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn z85_rejects_bad_input() {
        assert_eq!(
            z85::encode(&[1, 2, 3]),
            Err(z85::Z85Error::BinaryLength { len: 3 })
        );
        assert_eq!(
            z85::decode("Hello1"),
            Err(z85::Z85Error::TextLength { len: 6 })
        );
        assert_eq!(
            z85::decode("Hel\"o"),
            Err(z85::Z85Error::InvalidChar { ch: '"', pos: 3 })
        );
        assert_eq!(
            z85::decode("Helé0"),
            Err(z85::Z85Error::InvalidChar { ch: 'é', pos: 3 })
        );
        assert_eq!(
            z85::decode("00000%nSc1"),
            Err(z85::Z85Error::Overflow { pos: 5 })
        );
        assert_eq!(
            z85::decode("#####"),
            Err(z85::Z85Error::Overflow { pos: 0 })
        );
    }

    #[test]
    fn z85_alphabet_is_85_distinct_characters() {
        let mut seen = std::collections::HashSet::new();
        assert!(z85::ALPHABET.iter().all(|b| seen.insert(*b)));
        assert_eq!(seen.len(), 85);
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
        fn z85_round_trips(words in proptest::collection::vec(any::<[u8; 4]>(), 0..32)) {
            let bytes: Vec<u8> = words.concat();
            let text = z85::encode(&bytes).unwrap();
            prop_assert_eq!(text.len(), bytes.len() / 4 * 5);
            prop_assert_eq!(z85::decode(&text).unwrap(), bytes);
        }

        #[test]
        fn z85_decode_never_panics(text in ".{0,60}") {
            if let Ok(bytes) = z85::decode(&text) {
                prop_assert_eq!(z85::encode(&bytes).unwrap(), text);
            }
        }

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
}
