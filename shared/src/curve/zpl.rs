//! The ZPL (ZeroMQ RFC 4) reader of a certificate: sections, entries and their quoting,
//! as czmq and Flux read them, with the shape of the `curve` section checked; what the
//! entries mean is checked by [`super::CurveCert::parse`].

use super::{CurveCertError, KeyKind};

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
pub(super) struct RawCert {
    pub(super) has_metadata: bool,
    pub(super) has_curve: bool,
    pub(super) metadata: Vec<(String, String)>,
    pub(super) public: Option<String>,
    pub(super) secret: Option<String>,
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
    pub(super) fn read(text: &str) -> Result<RawCert, CurveCertError> {
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
