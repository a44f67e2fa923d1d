//! The shell-emitting layer every script is written with: [`Sh`] (lines, blocks,
//! indentation) and the quoting helpers. The safety argument of the scripts rests here:
//! every user value that is data goes through [`sq`] or [`word`] (one single-quoted or
//! plainly safe shell word), or [`dq_text`] inside double quotes; comments go through
//! [`one_line`]. Scripts kept as plain files (`drain.sh`) get such values through [`fill`].
//!
//! Kept by hand rather than taken from `shlex`: [`split_words`] must split exactly as bash
//! splits an unquoted expansion on its default `IFS` (the documented meaning of a
//! container's `command`), which is not POSIX shell-word parsing with quotes; and the
//! scripts' bytes are compared with the reference operator's CI jobs, so the quoting style
//! is fixed.

/// Words of `text` as bash splits an unquoted expansion with the default `IFS`.
pub(super) fn split_words(text: &str) -> impl Iterator<Item = &str> {
    text.split([' ', '\t', '\n']).filter(|w| !w.is_empty())
}

/// `s` as one single-quoted shell word. NUL bytes, which a shell cannot hold, are dropped.
pub(super) fn sq(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('\'');
    for c in s.chars() {
        match c {
            '\'' => out.push_str("'\\''"),
            '\0' => {}
            c => out.push(c),
        }
    }
    out.push('\'');
    out
}

/// `s` as one shell word: bare when every character is never special to the shell in
/// an argument position, else single-quoted.
pub(super) fn word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-./:=@%+,".contains(&b));
    if plain { s.to_string() } else { sq(s) }
}

/// `s` escaped for use inside double quotes.
pub(super) fn dq_text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '"' | '$' | '`' => {
                out.push('\\');
                out.push(c);
            }
            '\0' => {}
            c => out.push(c),
        }
    }
    out
}

/// `s` on one line, for comments.
pub(super) fn one_line(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// `template` with each placeholder (`__NAME__`-style) replaced by its value, in one pass:
/// the values are never searched, so a value that holds a placeholder's text stays as it
/// is. The values must already be quoted for where they stand ([`word`], [`sq`],
/// [`one_line`]).
pub(super) fn fill(template: &str, values: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(at) = rest.find("__") {
        match values.iter().find(|(key, _)| rest[at..].starts_with(key)) {
            Some((key, value)) => {
                out.push_str(&rest[..at]);
                out.push_str(value);
                rest = &rest[at + key.len()..];
            }
            None => {
                out.push_str(&rest[..at + 1]);
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The directory part of an absolute path (`/` for a top-level file).
pub(super) fn parent(path: &str) -> &str {
    match path.rsplit_once('/') {
        Some(("", _)) | None => "/",
        Some((dir, _)) => dir,
    }
}

/// Whether `s` is a valid shell variable name.
pub(super) fn is_identifier(s: &str) -> bool {
    let mut bytes = s.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A script under construction, two-space indented by block depth. Verbatim text
/// (hooks, heredoc bodies) is never indented.
#[derive(Default)]
pub(super) struct Sh {
    pub(super) out: String,
    pub(super) depth: usize,
}

impl Sh {
    pub(super) fn new() -> Sh {
        Sh {
            out: String::with_capacity(8 * 1024),
            depth: 0,
        }
    }

    /// A formatted, non-empty line (formats straight into the script, no temporary).
    pub(super) fn linef(&mut self, args: std::fmt::Arguments<'_>) {
        use std::fmt::Write as _;
        for _ in 0..self.depth {
            self.out.push_str("  ");
        }
        // Writing to a String cannot fail.
        let _ = self.out.write_fmt(args);
        self.out.push('\n');
    }

    pub(super) fn line(&mut self, text: &str) {
        if !text.is_empty() {
            for _ in 0..self.depth {
                self.out.push_str("  ");
            }
            self.out.push_str(text);
        }
        self.out.push('\n');
    }

    pub(super) fn raw(&mut self, text: &str) {
        self.out.push_str(text);
        if !text.ends_with('\n') {
            self.out.push('\n');
        }
    }

    pub(super) fn open(&mut self, text: &str) {
        self.line(text);
        self.depth += 1;
    }

    /// A line between two blocks at the same depth (`else`, `elif`).
    pub(super) fn mid(&mut self, text: &str) {
        self.close(text);
        self.depth += 1;
    }

    pub(super) fn close(&mut self, text: &str) {
        self.depth = self.depth.saturating_sub(1);
        self.line(text);
    }

    pub(super) fn finish(self) -> String {
        self.out
    }
}
