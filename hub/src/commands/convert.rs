//! `flux-hub convert`: v1alpha1 MiniCluster manifests to v1alpha2.
//!
//! Every document of the file goes through [`flux_shared::convert::convert_document`], in
//! order. In YAML, documents that pass through unchanged (v1alpha2 MiniClusters and
//! anything that is not a MiniCluster) are copied verbatim, comments included; a converted
//! document is preceded by comments listing its notes and losses, and printed in the
//! v1alpha2 field order (with the `size` default spelled out). In JSON a single document
//! is printed as itself and several as a `v1` `List`.
//!
//! Exit status: [`EXIT_LOSSLESS`] when nothing was lost, [`EXIT_LOSSY`] when the
//! conversion succeeded but something had no v1alpha2 equivalent (each reported on stderr
//! as `FILE: spec.field: no v1alpha2 equivalent: what to do instead`), [`EXIT_INVALID`]
//! when the input is invalid (every problem on stderr as `FILE: field: rule`, nothing on
//! stdout).

use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use flux_shared::api::MiniCluster;
use flux_shared::convert::{Conversion, convert_document};
use serde::{Deserialize, Serialize};

/// Nothing was lost.
pub const EXIT_LOSSLESS: u8 = 0;
/// Invalid input: nothing printed on stdout.
pub const EXIT_INVALID: u8 = 1;
/// Converted, but something had no v1alpha2 equivalent (reported on stderr).
pub const EXIT_LOSSY: u8 = 3;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Multi-document YAML (`---` between documents), in input order.
    Yaml,
    /// One JSON document: the object itself, or a `v1` `List` of several.
    Json,
}

/// What the command prints and its exit status.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    /// Standard output (empty when the input is invalid).
    pub stdout: String,
    /// Standard error lines: losses, or the problems of invalid input.
    pub stderr: Vec<String>,
    /// Exit status.
    pub code: u8,
}

impl Outcome {
    fn invalid(stderr: Vec<String>) -> Self {
        Outcome {
            stdout: String::new(),
            stderr,
            code: EXIT_INVALID,
        }
    }
}

/// One document of the input: its verbatim text when known, and its value.
struct Document {
    text: Option<String>,
    value: serde_yaml_ng::Value,
}

/// Whether `line` is a YAML document start (`---` at column 0, then nothing or a blank).
fn starts_document(line: &str) -> bool {
    line.strip_prefix("---")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t', '\r', '\n']))
}

/// Split `text` at its document-start lines (a `---` at column 0 is a document marker
/// anywhere in YAML). `None` when a piece does not hold exactly one document (directives,
/// `...` followed by a bare document): the caller then parses the whole text instead.
fn split_verbatim(text: &str) -> Option<Vec<Document>> {
    let mut pieces: Vec<String> = vec![String::new()];
    for line in text.split_inclusive('\n') {
        if starts_document(line) {
            pieces.push(String::new());
        }
        if let Some(last) = pieces.last_mut() {
            last.push_str(line);
        }
    }
    let mut docs = Vec::new();
    // Text before a document that holds none (comments, a lone `---`) stays with it.
    let mut pending = String::new();
    for piece in pieces {
        let mut values = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(&piece) {
            values.push(serde_yaml_ng::Value::deserialize(doc).ok()?);
        }
        match values.as_slice() {
            [] | [serde_yaml_ng::Value::Null] => pending.push_str(&piece),
            [value] => docs.push(Document {
                text: Some(std::mem::take(&mut pending) + &piece),
                value: value.clone(),
            }),
            _ => return None,
        }
    }
    Some(docs)
}

/// The comment lines a document's text starts with (after its `---` line).
fn leading_comments(text: &str) -> String {
    text.split_inclusive('\n')
        .filter(|l| !starts_document(l))
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        .filter(|l| !l.trim().is_empty())
        .collect()
}

/// Every document of `text`; errors are `FILE: document N: message`.
fn documents(file: &str, text: &str) -> Result<Vec<Document>, Vec<String>> {
    if let Some(docs) = split_verbatim(text) {
        return Ok(docs);
    }
    let mut docs = Vec::new();
    let mut errors = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        match serde_yaml_ng::Value::deserialize(doc) {
            Ok(value) => docs.push(Document { text: None, value }),
            Err(e) => {
                // The parser cannot resynchronise after a syntax error (it would repeat
                // the error forever): report the first one.
                errors.push(format!("{file}: document {}: {e}", i + 1));
                break;
            }
        }
    }
    if errors.is_empty() {
        Ok(docs)
    } else {
        Err(errors)
    }
}

/// A comment line (never more than one line, whatever the text holds).
fn comment(out: &mut String, text: &str) {
    out.push_str("# ");
    out.push_str(&text.replace(['\n', '\r'], " "));
    out.push('\n');
}

/// Convert every document of `text` (named `file` in messages).
pub fn convert_text(file: &str, text: &str, format: Format) -> Outcome {
    let docs = match documents(file, text) {
        Ok(docs) => docs,
        Err(errors) => return Outcome::invalid(errors),
    };
    // An empty document (a lone `---`) is no document.
    let docs: Vec<Document> = docs.into_iter().filter(|d| !d.value.is_null()).collect();
    if docs.is_empty() {
        return Outcome::invalid(vec![format!("{file}: holds no document")]);
    }
    let mut errors = Vec::new();
    let mut converted: Vec<(Document, Conversion)> = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let json = match serde_json::to_value(&doc.value) {
            Ok(json) => json,
            Err(e) => {
                errors.push(format!("{file}: document {}: {e}", i + 1));
                continue;
            }
        };
        match convert_document(&json) {
            Ok(c) => converted.push((doc, c)),
            Err(e) => errors.extend(
                e.problems()
                    .iter()
                    .map(|p| format!("{file}: {}: {}", p.field, p.rule)),
            ),
        }
    }
    if !errors.is_empty() {
        return Outcome::invalid(errors);
    }

    let stderr: Vec<String> = converted
        .iter()
        .flat_map(|(_, c)| c.lost.iter().map(|l| format!("{file}: {l}")))
        .collect();
    let stdout = match format {
        Format::Yaml => yaml_output(&converted).map_err(|e| e.to_string()),
        Format::Json => json_output(&converted).map_err(|e| e.to_string()),
    };
    match stdout {
        Ok(stdout) => Outcome {
            code: if stderr.is_empty() {
                EXIT_LOSSLESS
            } else {
                EXIT_LOSSY
            },
            stdout,
            stderr,
        },
        Err(e) => Outcome::invalid(vec![format!("{file}: {e}")]),
    }
}

fn yaml_output(docs: &[(Document, Conversion)]) -> Result<String, serde_yaml_ng::Error> {
    let mut out = String::new();
    for (doc, c) in docs {
        match (&doc.text, c.passed_through) {
            (Some(text), true) => {
                if !text.split_inclusive('\n').any(starts_document) {
                    out.push_str("---\n");
                }
                out.push_str(text);
                if !text.ends_with('\n') {
                    out.push('\n');
                }
            }
            (None, true) => {
                out.push_str("---\n");
                out.push_str(&serde_yaml_ng::to_string(&doc.value)?);
            }
            (text, false) => {
                out.push_str("---\n");
                if let Some(text) = text {
                    out.push_str(&leading_comments(text));
                }
                comment(
                    &mut out,
                    "Converted from flux-framework.org/v1alpha1 by flux-hub convert.",
                );
                for note in &c.notes {
                    comment(&mut out, &format!("note: {note}"));
                }
                for loss in &c.lost {
                    comment(&mut out, &format!("lost: {loss}"));
                }
                out.push_str(&serde_yaml_ng::to_string(&Printed::of(c))?);
            }
        }
    }
    Ok(out)
}

/// A document to print: a converted MiniCluster in the v1alpha2 field order, anything
/// else as it is.
#[derive(Serialize)]
#[serde(untagged)]
enum Printed<'a> {
    MiniCluster(Box<MiniCluster>),
    Value(&'a serde_json::Value),
}

impl<'a> Printed<'a> {
    fn of(c: &'a Conversion) -> Self {
        if !c.passed_through
            && let Ok(mc) = serde_json::from_value::<MiniCluster>(c.output.clone())
        {
            return Printed::MiniCluster(Box::new(mc));
        }
        Printed::Value(&c.output)
    }
}

/// Several documents in one JSON document.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct List<'a> {
    api_version: &'static str,
    kind: &'static str,
    items: Vec<Printed<'a>>,
}

fn json_output(docs: &[(Document, Conversion)]) -> Result<String, serde_json::Error> {
    let text = match docs {
        [(_, c)] => serde_json::to_string_pretty(&Printed::of(c))?,
        _ => serde_json::to_string_pretty(&List {
            api_version: "v1",
            kind: "List",
            items: docs.iter().map(|(_, c)| Printed::of(c)).collect(),
        })?,
    };
    Ok(text + "\n")
}

/// The `convert` command: print the converted documents and report losses.
pub fn run(file: &Path, format: Format) -> ExitCode {
    let name = file.display().to_string();
    let outcome = match std::fs::read_to_string(file) {
        Ok(text) => convert_text(&name, &text, format),
        Err(e) => Outcome::invalid(vec![format!("{name}: cannot read: {e}")]),
    };
    {
        let mut stderr = std::io::stderr().lock();
        for line in &outcome.stderr {
            let _ = writeln!(stderr, "{line}");
        }
    }
    if std::io::stdout()
        .lock()
        .write_all(outcome.stdout.as_bytes())
        .is_err()
    {
        return ExitCode::from(EXIT_INVALID);
    }
    ExitCode::from(outcome.code)
}
