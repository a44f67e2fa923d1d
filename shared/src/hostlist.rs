//! Flux hostlists: the compact `prefix[idlist]suffix` host list format of
//! [Flux RFC 29](https://flux-framework.readthedocs.io/projects/flux-rfc/en/latest/spec_29.html),
//! as read and written by flux-core's libhostlist and `flux hostlist`.
//!
//! A hostlist is an **ordered** list of host names that **keeps duplicates**:
//! `foo[1,1,2,1]` is `foo1,foo1,foo2,foo1`.
//!
//! # Grammar accepted by [`expand`]
//!
//! ```text
//! hostlist   = *( sep ) [ expression *( 1*sep expression ) ] *( sep )
//! sep        = "," | " " | TAB
//! expression = name-chars                                  ; a plain host
//!            | [ name-chars ] "[" idlist "]" [ name-chars ] ; prefix[idlist]suffix
//! idlist     = element *( "," element )
//! element    = id | id "-" id                              ; ascending: a <= b
//! id         = 1*DIGIT                                     ; fits in a u64
//! name-chars = 1*( printable, non-whitespace ASCII except "[", "]" and "," )
//! ```
//!
//! * An empty hostlist, and empty expressions (`a,,b`, a leading or trailing
//!   `,`), are empty lists, as RFC 29 says (`""` = `""`) and libhostlist does.
//! * Space and tab separate expressions like a comma, as in libhostlist
//!   (`hostlist_decode` splits on `"\t, "`); RFC 29 forbids whitespace inside
//!   a host name, so this adds no ambiguity. Any other whitespace or control
//!   character, and any non-ASCII character, is rejected.
//! * **Width.** When the first id of an idlist has leading zeros, its width is
//!   preserved across every id of that idlist (RFC 29): `[005,4,11-13]` is
//!   `005,004,011,012,013` and `[00-2]` is `00,01,02`. When the first id has
//!   no leading zeros, ids are written without padding: `foo[12,4,1-2]` is
//!   `foo12,foo4,foo1,foo2`, which is what libhostlist's own encoder writes for
//!   that list.
//!
//! # What is rejected, and why
//!
//! Every error names the offending expression and the byte offset in the
//! hostlist where the problem is ([`HostlistError`]).
//!
//! * A second bracket group in one expression (`node[1-2]-[3-4]`): RFC 29
//!   allows one `prefix[idlist]suffix` per expression; libhostlist would
//!   produce host names containing brackets.
//! * Unbalanced or nested brackets, empty idlists (`[]`), empty ids
//!   (`[1,,2]`, `[1-]`, `[-1]`), more than one `-` per element, and any
//!   character other than digits, `-` and `,` inside brackets (including
//!   spaces and signs, which libhostlist's `strtoul` would silently accept).
//! * Reversed ranges (`[5-3]`), as in libhostlist.
//! * Ids that do not fit in a `u64`.
//! * A non-first id with leading zeros whose width differs from the width set
//!   by the first id (`[1,05]`, `[005,04]`, `[0-01]`): RFC 29 says only that
//!   the first id's zeros propagate, libhostlist and python-hostlist would
//!   keep the zeros of each id, so such an id has no single meaning.
//! * Host names longer than [`MAX_HOST_LEN`] bytes, and hostlists of more than
//!   [`MAX_HOSTS`] hosts (libhostlist limits one range to the same number).
//!   These bound the memory [`expand`] can be made to allocate.
//!
//! # Writing hostlists
//!
//! [`compress`] is the inverse of [`expand`]: for every list of valid host
//! names (see [`is_valid_host`]) of at most [`MAX_HOSTS`] hosts,
//! `expand(&compress(hosts)) == hosts`, order and duplicates included.
//!
//! # Other implementations
//!
//! * flux-core's libhostlist pads each idlist element to its own written
//!   width, so it reads `[005,4,11-13]` as `005,4,11,12,13`, not as RFC 29's
//!   example says; its encoder may also put ids of different widths in one
//!   bracket (`[0-12,12-20,45,015]` after a sort), which RFC 29 reads
//!   differently. `compress` only writes hostlists that libhostlist and
//!   python-hostlist read as the same hosts too, within their size limits
//!   (libhostlist: 10240 elements per idlist, which `compress` respects;
//!   python-hostlist: 100000 hosts per expression).
//! * LLNL's python-hostlist pads like libhostlist, expands several bracket
//!   groups in one expression as a cartesian product, and does not treat
//!   whitespace as a separator.
//! * The `hostlist-parser` crate is not RFC 29 either: it de-duplicates hosts (Flux keeps
//!   duplicates and their order), expands several bracket groups, pads each element on
//!   its own and accepts descending ranges. It is this module's differential oracle
//!   (`tests/hostlist_parser_agrees.rs`) on the hostlists where it gives RFC 29's answer,
//!   not its implementation.
//!
//! Size: one format in one file (the grammar above, its parser, the encoder that
//! compresses ranges as libhostlist does, and the list operations Flux uses) so the grammar
//! and its implementation read together; about 600 of its lines are the tests.

use std::fmt;

/// The largest number of hosts a hostlist may expand to.
///
/// libhostlist rejects a single range of more hosts than this; here the limit
/// applies to the whole hostlist so that [`expand`] allocates a bounded
/// amount of memory whatever its input.
pub const MAX_HOSTS: usize = 1 << 20;

/// The longest host name, in bytes, that a hostlist may contain or produce.
///
/// This is POSIX's `_POSIX_HOST_NAME_MAX` (255); libhostlist formats host
/// names into a buffer of that size plus a few bytes.
pub const MAX_HOST_LEN: usize = 255;

/// The most elements `compress` writes in one idlist: libhostlist rejects
/// an idlist of more (its `MAX_RANGES`).
const MAX_IDLIST_ELEMENTS: usize = 10240;

/// How much of an offending expression an error message quotes.
const MAX_QUOTED_LEN: usize = 128;

/// An error found while reading a hostlist: each variant names the offending
/// host expression (`expr`, quoted up to 128 bytes) and the byte offset
/// (`pos`) in the whole hostlist where the problem is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    /// A character that may not appear where it does.
    #[error(
        "invalid hostlist expression {expr:?}: character {ch:?} at byte {pos} is not allowed {context}"
    )]
    InvalidChar {
        /// The offending host expression.
        expr: String,
        /// Byte offset of the character in the hostlist.
        pos: usize,
        /// The offending character.
        ch: char,
        /// Where the character appeared and what is allowed there.
        context: &'static str,
    },
    /// A `[` with no matching `]`.
    #[error("invalid hostlist expression {expr:?}: '[' at byte {pos} is never closed by ']'")]
    UnclosedBracket {
        /// The offending host expression.
        expr: String,
        /// Byte offset of the `[` in the hostlist.
        pos: usize,
    },
    /// A `]` with no matching `[`.
    #[error("invalid hostlist expression {expr:?}: ']' at byte {pos} has no matching '['")]
    UnmatchedBracket {
        /// The offending host expression.
        expr: String,
        /// Byte offset of the `]` in the hostlist.
        pos: usize,
    },
    /// A second `[idlist]` group in one host expression.
    #[error(
        "invalid hostlist expression {expr:?}: second bracket group at byte {pos}; \
         RFC 29 allows a single prefix[idlist]suffix group per host expression"
    )]
    MultipleBracketGroups {
        /// The offending host expression.
        expr: String,
        /// Byte offset of the second `[` in the hostlist.
        pos: usize,
    },
    /// An idlist element with a missing id (`[]`, `[1,,2]`, `[1-]`, `[-1]`).
    #[error(
        "invalid hostlist expression {expr:?}: missing id at byte {pos}; idlist elements \
         are N or A-B with non-negative decimal ids"
    )]
    EmptyId {
        /// The offending host expression.
        expr: String,
        /// Byte offset in the hostlist where an id was expected.
        pos: usize,
    },
    /// A range `a-b` with `a > b`.
    #[error(
        "invalid hostlist expression {expr:?}: reversed range {lo}-{hi} at byte {pos}; \
         ranges must be ascending (a-b with a <= b)"
    )]
    ReversedRange {
        /// The offending host expression.
        expr: String,
        /// Byte offset of the range in the hostlist.
        pos: usize,
        /// The range's first id, as written.
        lo: String,
        /// The range's last id, as written.
        hi: String,
    },
    /// An id larger than `u64::MAX`.
    #[error(
        "invalid hostlist expression {expr:?}: id {id} at byte {pos} is larger than {}",
        u64::MAX
    )]
    IdTooLarge {
        /// The offending host expression.
        expr: String,
        /// Byte offset of the id in the hostlist.
        pos: usize,
        /// The id, as written.
        id: String,
    },
    /// A non-first id whose leading zeros contradict the idlist's width.
    #[error(
        "invalid hostlist expression {expr:?}: id {id:?} at byte {pos} has leading zeros but \
         {} digits, while the first id of its idlist sets the width to {width}; RFC 29 only \
         propagates the first id's zeros, so such an id is ambiguous",
        id.len()
    )]
    AmbiguousPadding {
        /// The offending host expression.
        expr: String,
        /// Byte offset of the id in the hostlist.
        pos: usize,
        /// The id, as written.
        id: String,
        /// The width set by the idlist's first id (1 when it has no leading zeros).
        width: usize,
    },
    /// A host name longer than [`MAX_HOST_LEN`].
    #[error(
        "invalid hostlist expression {expr:?}: the host name at byte {pos} is {len} bytes \
         long, more than the limit of {MAX_HOST_LEN}"
    )]
    HostTooLong {
        /// The offending host expression.
        expr: String,
        /// Byte offset in the hostlist of the expression or range.
        pos: usize,
        /// Length in bytes of the longest host name it would produce.
        len: usize,
    },
    /// The hostlist expands to more than [`MAX_HOSTS`] hosts.
    #[error(
        "hostlist expression {expr:?} at byte {pos} takes the hostlist past the limit of \
         {MAX_HOSTS} hosts"
    )]
    TooManyHosts {
        /// The offending host expression.
        expr: String,
        /// Byte offset in the hostlist of the expression or range.
        pos: usize,
    },
}

/// Expands a hostlist into its host names, in order and with duplicates.
///
/// `expand("foo[1-3],bar,foo1")` is `["foo1", "foo2", "foo3", "bar", "foo1"]`;
/// `expand("")` is empty. See the [module documentation](self) for the
/// grammar and for what is rejected.
pub fn expand(hostlist: &str) -> Result<Vec<String>, HostlistError> {
    let mut hosts = Vec::new();
    parse(hostlist, |item| match item {
        Item::Host(host) => hosts.push(host.to_owned()),
        Item::Range {
            prefix,
            suffix,
            width,
            lo,
            hi,
        } => {
            let len = prefix.len() + width.max(digit_count(hi)) + suffix.len();
            // `parse` has checked that the range fits within `MAX_HOSTS`.
            hosts.reserve(usize::try_from(hi - lo).map_or(0, |span| span.saturating_add(1)));
            for id in lo..=hi {
                let mut host = String::with_capacity(len);
                host.push_str(prefix);
                push_padded(&mut host, id, width);
                host.push_str(suffix);
                hosts.push(host);
            }
        }
    })?;
    Ok(hosts)
}

/// Counts the hosts of a hostlist without building their names.
///
/// Returns exactly `expand(hostlist).map(|h| h.len())`: the same errors for
/// the same inputs, in a single pass with no allocation on success.
pub fn count(hostlist: &str) -> Result<usize, HostlistError> {
    parse(hostlist, |_| {})
}

/// Returns whether `host` is a host name that a hostlist can hold.
///
/// A host name is 1 to [`MAX_HOST_LEN`] bytes of printable, non-whitespace
/// ASCII (`!` to `~`) other than `[`, `]` and `,`: the characters RFC 29
/// allows in a prefix or suffix. Digits anywhere are fine (`123`, `n1-eth0`).
pub fn is_valid_host(host: &str) -> bool {
    !host.is_empty() && host.len() <= MAX_HOST_LEN && host.bytes().all(is_name_byte)
}

/// Writes a list of host names as a compact hostlist, like libhostlist's
/// `hostlist_encode`: order and duplicates are kept, and consecutive hosts
/// that differ only in one numeric field, with the same prefix, suffix and
/// zero padding, share one `prefix[idlist]suffix` expression in which runs of
/// consecutive ids become ascending ranges `a-b`.
///
/// `["n1", "n2", "n3", "n5", "x", "n01"]` gives `n[1-3,5],x,n01`. A host
/// alone stays plain (`node-3`, never `node-[3]`), descending or repeated ids
/// are listed one by one (`n[3,2,1]`, `n[1,1]`), and ids are written exactly
/// as they appear in the host names, so padding is never invented or lost:
/// `n09,n10` gives `n[09-10]`, while `n9,n010` stays `n9,n010`. The numeric
/// field need not end the name (`foo[1,3]-bar`, `a[1-3]b1`); numeric fields
/// that do not fit in a `u64` are kept as plain text.
///
/// For every list of at most [`MAX_HOSTS`] valid host names
/// ([`is_valid_host`]), `expand(&compress(hosts))` returns `hosts`. Invalid
/// entries are copied verbatim as their own comma-separated element, so
/// what they turn into when expanded is not guaranteed (an empty string
/// vanishes, a name with a comma splits in two).
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    let mut out = String::new();
    let mut runs: Vec<Run<'_>> = Vec::new();
    let mut i = 0;
    while let Some(first) = hosts.get(i) {
        let host = first.as_ref();
        if i > 0 {
            out.push(',');
        }
        let next = hosts.get(i + 1).map(AsRef::as_ref);
        let group = if is_valid_host(host) {
            choose_field(host, next)
        } else {
            None
        };
        let Some(group) = group else {
            out.push_str(host);
            i += 1;
            continue;
        };
        runs.clear();
        runs.push(Run {
            lo: group.digits,
            hi: group.digits,
            hi_id: group.id,
        });
        let mut end = i + 1;
        while let Some(field) = hosts
            .get(end)
            .and_then(|h| field_in_group(h.as_ref(), &group))
        {
            let full = runs.len() == MAX_IDLIST_ELEMENTS;
            match runs.last_mut() {
                Some(run) if run.hi_id.checked_add(1) == Some(field.id) => {
                    run.hi = field.digits;
                    run.hi_id = field.id;
                }
                _ if full => break,
                _ => runs.push(Run {
                    lo: field.digits,
                    hi: field.digits,
                    hi_id: field.id,
                }),
            }
            end += 1;
        }
        if end == i + 1 {
            // choose_field only returns a group when the next host joins it,
            // so this is unreachable; writing the host plain is still right.
            out.push_str(host);
        } else {
            out.push_str(group.prefix);
            out.push('[');
            for (n, run) in runs.iter().enumerate() {
                if n > 0 {
                    out.push(',');
                }
                out.push_str(run.lo);
                if run.hi != run.lo {
                    out.push('-');
                    out.push_str(run.hi);
                }
            }
            out.push(']');
            out.push_str(group.suffix);
        }
        i = end;
    }
    out
}

/// A run of consecutive ids in a group being compressed; `lo` and `hi` are
/// the digits exactly as they appear in the host names.
struct Run<'a> {
    lo: &'a str,
    hi: &'a str,
    hi_id: u64,
}

/// How a group of hosts is split around its numeric field.
struct Group<'a> {
    prefix: &'a str,
    suffix: &'a str,
    /// The digits of the group's first host.
    digits: &'a str,
    id: u64,
    /// The width every id of the group is padded to (see [`idlist_width`]).
    width: usize,
}

/// The numeric field of a host that joins a group.
struct Field<'a> {
    digits: &'a str,
    id: u64,
}

/// Picks the numeric field of `host` (a valid host) around which to group it
/// with the hosts after it: the last maximal run of digits with which `next`
/// can share an expression, if any. Returns `None` when `next` cannot join,
/// in which case `host` is written plain.
fn choose_field<'a>(host: &'a str, next: Option<&str>) -> Option<Group<'a>> {
    let next = next?;
    let bytes = host.as_bytes();
    // Only fields whose prefix `next` starts with and whose suffix it ends
    // with can work: bound them by the common prefix and suffix lengths.
    let common_prefix = bytes
        .iter()
        .zip(next.as_bytes())
        .take_while(|(a, b)| a == b)
        .count();
    let common_suffix = bytes
        .iter()
        .rev()
        .zip(next.as_bytes().iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut end = bytes.len();
    while end > 0 {
        // The last maximal run of digits before `end`.
        let stop = bytes[..end].iter().rposition(u8::is_ascii_digit)? + 1;
        let start = bytes[..stop]
            .iter()
            .rposition(|b| !b.is_ascii_digit())
            .map_or(0, |p| p + 1);
        end = start;
        if start > common_prefix || bytes.len() - stop > common_suffix {
            continue;
        }
        let digits = &host[start..stop];
        let Some(id) = parse_id(digits) else {
            continue;
        };
        let group = Group {
            prefix: &host[..start],
            suffix: &host[stop..],
            digits,
            id,
            width: idlist_width(digits),
        };
        if field_in_group(next, &group).is_some() {
            return Some(group);
        }
    }
    None
}

/// Returns the numeric field of `host` if it is `prefix + digits + suffix`
/// of `group`, with digits that are exactly what the group's width makes of
/// their value, and a valid length.
fn field_in_group<'a>(host: &'a str, group: &Group<'_>) -> Option<Field<'a>> {
    if host.len() > MAX_HOST_LEN {
        return None;
    }
    let digits = host
        .strip_prefix(group.prefix)?
        .strip_suffix(group.suffix)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // Padding `id` to `width` gives back `digits` exactly when the digits are
    // `width` long, or longer and without leading zeros.
    let exact =
        digits.len() == group.width || (digits.len() > group.width && !digits.starts_with('0'));
    if !exact {
        return None;
    }
    Some(Field {
        digits,
        id: parse_id(digits)?,
    })
}

/// The width every id of an idlist is padded to, from its first id as
/// written: that id's length if it has leading zeros, otherwise 1 (no
/// padding).
fn idlist_width(first: &str) -> usize {
    if first.len() > 1 && first.starts_with('0') {
        first.len()
    } else {
        1
    }
}

/// Parses a non-empty string of ASCII digits; `None` if it exceeds `u64`.
fn parse_id(digits: &str) -> Option<u64> {
    digits.bytes().try_fold(0u64, |acc, b| {
        acc.checked_mul(10)?
            .checked_add(u64::from(b.wrapping_sub(b'0')))
    })
}

/// Number of decimal digits of `n`.
fn digit_count(mut n: u64) -> usize {
    let mut count = 1;
    while n >= 10 {
        n /= 10;
        count += 1;
    }
    count
}

/// Appends `n` in decimal, zero-padded on the left to `width` digits.
fn push_padded(out: &mut String, n: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut rest = n;
    let mut start = buf.len();
    for slot in buf.iter_mut().rev() {
        // u64::MAX has 20 digits, so the buffer never runs out.
        *slot = b'0' + (rest % 10) as u8;
        rest /= 10;
        start -= 1;
        if rest == 0 {
            break;
        }
    }
    for _ in buf.len() - start..width {
        out.push('0');
    }
    out.extend(buf[start..].iter().map(|&b| char::from(b)));
}

/// Whether `b` may appear in a host name (RFC 29 prefix and suffix).
fn is_name_byte(b: u8) -> bool {
    matches!(b, b'!'..=b'~') && !matches!(b, b'[' | b']' | b',')
}

/// Whether `b` separates host expressions (libhostlist's `"\t, "`).
fn is_separator(b: u8) -> bool {
    matches!(b, b',' | b' ' | b'\t')
}

/// One piece of an expanded hostlist.
enum Item<'a> {
    /// A plain host name.
    Host(&'a str),
    /// `prefix + pad(id, width) + suffix` for each id in `lo..=hi`.
    Range {
        prefix: &'a str,
        suffix: &'a str,
        width: usize,
        lo: u64,
        hi: u64,
    },
}

/// Validates `input` completely (so `count` and `expand` reject the same
/// inputs), handing each piece to `sink` in order; returns the host count.
fn parse<'a>(input: &'a str, mut sink: impl FnMut(Item<'a>)) -> Result<usize, HostlistError> {
    let mut parser = Parser {
        input,
        bytes: input.as_bytes(),
        total: 0,
    };
    let mut pos = 0;
    while let Some(&b) = parser.bytes.get(pos) {
        if is_separator(b) {
            pos += 1;
        } else {
            pos = parser.expression(pos, &mut sink)?;
        }
    }
    Ok(parser.total)
}

struct Parser<'a> {
    input: &'a str,
    bytes: &'a [u8],
    /// Hosts seen so far; never more than `MAX_HOSTS`.
    total: usize,
}

/// Where a character was found, for [`HostlistError::InvalidChar`].
const IN_NAME: &str = "in a host name (RFC 29 allows printable, non-whitespace ASCII other \
                       than '[', ']' and ','; space, tab and ',' separate hosts)";
const IN_IDLIST: &str =
    "inside an idlist (only digits, '-' and ',' are allowed between '[' and ']')";
const NESTED: &str = "inside an idlist: brackets cannot be nested";
const EXTRA_DASH: &str = "here: an idlist element is N or A-B, with a single '-'";

impl<'a> Parser<'a> {
    /// Parses the expression starting at `start` (not a separator); returns
    /// the offset just past it.
    fn expression(
        &mut self,
        start: usize,
        sink: &mut impl FnMut(Item<'a>),
    ) -> Result<usize, HostlistError> {
        // Prefix, or the whole host when there are no brackets.
        let mut pos = start;
        let open = loop {
            match self.bytes.get(pos) {
                None => break None,
                Some(&b) if is_separator(b) => break None,
                Some(b'[') => break Some(pos),
                Some(b']') => {
                    return Err(HostlistError::UnmatchedBracket {
                        expr: self.expr(start),
                        pos,
                    });
                }
                Some(&b) if is_name_byte(b) => pos += 1,
                Some(_) => return Err(self.invalid_char(start, pos, IN_NAME)),
            }
        };
        // Every byte before `pos` is ASCII, so these slices are on char
        // boundaries.
        let Some(open) = open else {
            let host = &self.input[start..pos];
            if host.len() > MAX_HOST_LEN {
                return Err(HostlistError::HostTooLong {
                    expr: self.expr(start),
                    pos: start,
                    len: host.len(),
                });
            }
            self.add(start, start, 0)?;
            sink(Item::Host(host));
            return Ok(pos);
        };
        // Idlist.
        let mut close = open + 1;
        loop {
            match self.bytes.get(close) {
                None => {
                    return Err(HostlistError::UnclosedBracket {
                        expr: self.expr(start),
                        pos: open,
                    });
                }
                Some(b']') => break,
                Some(b'0'..=b'9' | b'-' | b',') => close += 1,
                Some(b'[') => return Err(self.invalid_char(start, close, NESTED)),
                Some(_) => return Err(self.invalid_char(start, close, IN_IDLIST)),
            }
        }
        // Suffix.
        let mut end = close + 1;
        loop {
            match self.bytes.get(end) {
                None => break,
                Some(&b) if is_separator(b) => break,
                Some(b'[') => {
                    return Err(HostlistError::MultipleBracketGroups {
                        expr: self.expr(start),
                        pos: end,
                    });
                }
                Some(b']') => {
                    return Err(HostlistError::UnmatchedBracket {
                        expr: self.expr(start),
                        pos: end,
                    });
                }
                Some(&b) if is_name_byte(b) => end += 1,
                Some(_) => return Err(self.invalid_char(start, end, IN_NAME)),
            }
        }
        let prefix = &self.input[start..open];
        let suffix = &self.input[close + 1..end];
        self.idlist(start, open + 1, close, prefix, suffix, sink)?;
        Ok(end)
    }

    /// Parses the idlist in `from..to` (digits, `-` and `,` only) of the
    /// expression starting at `start`.
    fn idlist(
        &mut self,
        start: usize,
        from: usize,
        to: usize,
        prefix: &'a str,
        suffix: &'a str,
        sink: &mut impl FnMut(Item<'a>),
    ) -> Result<(), HostlistError> {
        let mut width = None;
        let mut elem = from;
        loop {
            let elem_end = self.bytes[elem..to]
                .iter()
                .position(|&b| b == b',')
                .map_or(to, |p| elem + p);
            let dash = self.bytes[elem..elem_end]
                .iter()
                .position(|&b| b == b'-')
                .map(|p| elem + p);
            let lo_end = dash.unwrap_or(elem_end);
            let lo_text = self.id_text(start, elem, lo_end)?;
            let width = *width.get_or_insert_with(|| idlist_width(lo_text));
            let lo = self.id(start, elem, lo_text, width, elem == from)?;
            let (hi_text, hi) = match dash {
                None => (lo_text, lo),
                Some(dash) => {
                    if let Some(extra) = self.bytes[dash + 1..elem_end]
                        .iter()
                        .position(|&b| b == b'-')
                    {
                        return Err(self.invalid_char(start, dash + 1 + extra, EXTRA_DASH));
                    }
                    let text = self.id_text(start, dash + 1, elem_end)?;
                    (text, self.id(start, dash + 1, text, width, false)?)
                }
            };
            if lo > hi {
                return Err(HostlistError::ReversedRange {
                    expr: self.expr(start),
                    pos: elem,
                    lo: lo_text.to_owned(),
                    hi: hi_text.to_owned(),
                });
            }
            let len = prefix.len() + width.max(digit_count(hi)) + suffix.len();
            if len > MAX_HOST_LEN {
                return Err(HostlistError::HostTooLong {
                    expr: self.expr(start),
                    pos: elem,
                    len,
                });
            }
            self.add(start, elem, hi - lo)?;
            sink(Item::Range {
                prefix,
                suffix,
                width,
                lo,
                hi,
            });
            if elem_end == to {
                return Ok(());
            }
            elem = elem_end + 1;
        }
    }

    /// The id text in `from..to`, which must not be empty.
    fn id_text(&self, start: usize, from: usize, to: usize) -> Result<&'a str, HostlistError> {
        if from == to {
            return Err(HostlistError::EmptyId {
                expr: self.expr(start),
                pos: from,
            });
        }
        Ok(&self.input[from..to])
    }

    /// Checks the padding of the id `text` at `pos` against the idlist's
    /// `width` (unless it is the first id, which sets it) and parses it.
    fn id(
        &self,
        start: usize,
        pos: usize,
        text: &str,
        width: usize,
        first: bool,
    ) -> Result<u64, HostlistError> {
        if !first && text.len() > 1 && text.starts_with('0') && text.len() != width {
            return Err(HostlistError::AmbiguousPadding {
                expr: self.expr(start),
                pos,
                id: text.to_owned(),
                width,
            });
        }
        parse_id(text).ok_or_else(|| HostlistError::IdTooLarge {
            expr: self.expr(start),
            pos,
            id: text.to_owned(),
        })
    }

    /// Counts `span + 1` more hosts, failing past [`MAX_HOSTS`].
    fn add(&mut self, start: usize, pos: usize, span: u64) -> Result<(), HostlistError> {
        let room = MAX_HOSTS - self.total;
        match usize::try_from(span) {
            Ok(span) if span < room => {
                self.total += span + 1;
                Ok(())
            }
            _ => Err(HostlistError::TooManyHosts {
                expr: self.expr(start),
                pos,
            }),
        }
    }

    fn invalid_char(&self, start: usize, pos: usize, context: &'static str) -> HostlistError {
        // Everything before `pos` was ASCII, so `pos` is a char boundary.
        let ch = self
            .input
            .get(pos..)
            .and_then(|rest| rest.chars().next())
            .unwrap_or(char::REPLACEMENT_CHARACTER);
        HostlistError::InvalidChar {
            expr: self.expr(start),
            pos,
            ch,
            context,
        }
    }

    /// The text of the expression starting at `start` (up to the next
    /// separator outside brackets), shortened for error messages.
    fn expr(&self, start: usize) -> String {
        let mut depth = 0usize;
        let mut end = self.bytes.len();
        for (i, &b) in self.bytes.iter().enumerate().skip(start) {
            match b {
                b'[' => depth += 1,
                b']' => depth = depth.saturating_sub(1),
                _ if depth == 0 && is_separator(b) => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        let text = self.input.get(start..end).unwrap_or_default();
        Quoted(text).to_string()
    }
}

/// Displays a string cut to [`MAX_QUOTED_LEN`] bytes (on a char boundary),
/// with `...` when cut.
struct Quoted<'a>(&'a str);

impl fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.len() <= MAX_QUOTED_LEN {
            return f.write_str(self.0);
        }
        let mut cut = MAX_QUOTED_LEN;
        while !self.0.is_char_boundary(cut) {
            cut -= 1;
        }
        write!(f, "{}...", self.0.get(..cut).unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ok(hostlist: &str) -> Vec<String> {
        match expand(hostlist) {
            Ok(hosts) => hosts,
            Err(e) => panic!("expand({hostlist:?}) failed: {e}"),
        }
    }

    fn split(hosts: &str) -> Vec<String> {
        if hosts.is_empty() {
            Vec::new()
        } else {
            hosts.split(',').map(str::to_owned).collect()
        }
    }

    /// Flux RFC 29's test vectors, plus the examples in its text.
    #[test]
    fn rfc29_test_vectors() {
        let vectors = [
            ("", ""),
            ("foox,fooy,fooz", "foox,fooy,fooz"),
            ("[1-3,5-6]", "1,2,3,5,6"),
            ("foo[1-5]", "foo1,foo2,foo3,foo4,foo5"),
            (
                "foo[0-4]-eth2",
                "foo0-eth2,foo1-eth2,foo2-eth2,foo3-eth2,foo4-eth2",
            ),
            ("foo1,foo1,foo1", "foo1,foo1,foo1"),
            ("[00-02]", "00,01,02"),
            ("[00-2]", "00,01,02"),
            ("foo[1,1,2,1]", "foo1,foo1,foo2,foo1"),
            // From the RFC's text.
            ("[5,4,10,11,12,13]", "5,4,10,11,12,13"),
            ("[5,4,11-13]", "5,4,11,12,13"),
            ("[005,4,11-13]", "005,004,011,012,013"),
            ("[2,2,2]", "2,2,2"),
            (
                "host[0-10,12]",
                "host0,host1,host2,host3,host4,host5,host6,host7,host8,host9,host10,host12",
            ),
        ];
        for (hostlist, hosts) in vectors {
            let want = split(hosts);
            assert_eq!(ok(hostlist), want, "expand({hostlist:?})");
            assert_eq!(count(hostlist), Ok(want.len()), "count({hostlist:?})");
            assert_eq!(ok(&compress(&want)), want, "round trip of {hosts:?}");
        }
    }

    /// flux-core libhostlist's encode/decode tests, where its encoder's
    /// output is valid RFC 29 (it writes `foo[1,3]-bar` as two plain hosts;
    /// `compress` groups them).
    #[test]
    fn libhostlist_codec_vectors() {
        let vectors = [
            ("foo-1a-2,foo-1a-3", "foo-1a-[2-3]", 2),
            ("foo1,foo2,foo3,fooi", "foo[1-3],fooi", 4),
            ("foo1,fooi,foo2,foo3", "foo1,fooi,foo[2-3]", 4),
            ("fooi,foo1,foo2,foo3", "fooi,foo[1-3]", 4),
            (
                "fooi,foo1,foo2,foo3,foo5,foo7,foo8",
                "fooi,foo[1-3,5,7-8]",
                7,
            ),
            ("1,2,3,4,5,9", "[1-5,9]", 6),
            (",1,2,3,4,5,9", "[1-5,9]", 6),
            (",1,2,3,4,5,9,", "[1-5,9]", 6),
            ("[1-5]", "[1-5]", 5),
            ("foo[1,3]-bar", "foo[1,3]-bar", 2),
            ("[00-03]p", "[00-03]p", 4),
            ("p[00-3]p", "p[00-03]p", 4),
            ("14636", "14636", 1),
            ("foo12,foo[4,1-2]", "foo[12,4,1-2]", 4),
            ("foo[12,4,1-2],bar[26-30]", "foo[12,4,1-2],bar[26-30]", 9),
            ("foo[1-2,4,5],bar", "foo[1-2,4-5],bar", 5),
            ("f00[7-8]", "f[007-008]", 2),
            ("f0010001[07-08]", "f[001000107-001000108]", 2),
        ];
        for (input, encoded, n) in vectors {
            let hosts = ok(input);
            assert_eq!(hosts.len(), n, "expand({input:?})");
            assert_eq!(count(input), Ok(n), "count({input:?})");
            assert_eq!(compress(&hosts), encoded, "compress(expand({input:?}))");
            assert_eq!(ok(encoded), hosts, "expand({encoded:?})");
        }
        let mcr = "mcr[336-359,488-550,553,556,559,561,567,569-571,573-575,578,581,584,\
                   587-589,592,594,597,600-602,605,608,610,618-622,627,634,636-670,687-696,\
                   699-733,735-742,744-760,762-773]";
        let hosts = ok(mcr);
        assert_eq!(hosts.len(), 237);
        assert_eq!(compress(&hosts), mcr);
    }

    #[test]
    fn expand_examples() {
        assert_eq!(
            ok("foo[1-3],bar,foo1"),
            ["foo1", "foo2", "foo3", "bar", "foo1"]
        );
        assert_eq!(ok("n[9-11]"), ["n9", "n10", "n11"]);
        assert_eq!(ok("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(ok("n[098-100]"), ["n098", "n099", "n100"]);
        assert_eq!(ok("n[05,100]"), ["n05", "n100"]);
        assert_eq!(ok("n[005,004]"), ["n005", "n004"]);
        assert_eq!(ok("n[0,0]"), ["n0", "n0"]);
        assert_eq!(ok("n[3-3]"), ["n3"]);
        assert_eq!(ok("n[0-0]x"), ["n0x"]);
        assert_eq!(ok("[7]"), ["7"]);
        assert_eq!(ok("-[1-2]-"), ["-1-", "-2-"]);
        assert_eq!(ok("a!b~c$[1]"), ["a!b~c$1"]);
        assert_eq!(ok("node1"), ["node1"]);
        assert_eq!(
            ok("n[18446744073709551614-18446744073709551615]"),
            ["n18446744073709551614", "n18446744073709551615"]
        );
        assert_eq!(ok("n[00000000000000000000000000001-2]").len(), 2);
        assert_eq!(
            ok("n[00000000000000000000000000001-2]")[1],
            "n00000000000000000000000000002"
        );
    }

    #[test]
    fn separators_and_empty_elements() {
        assert_eq!(ok(""), Vec::<String>::new());
        assert_eq!(ok(","), Vec::<String>::new());
        assert_eq!(ok(" \t, ,"), Vec::<String>::new());
        assert_eq!(ok("a,,b"), ["a", "b"]);
        assert_eq!(ok(",a,b,"), ["a", "b"]);
        assert_eq!(ok("a b\tc"), ["a", "b", "c"]);
        assert_eq!(ok(" foo[1-2], bar "), ["foo1", "foo2", "bar"]);
        assert_eq!(ok("foo [1-2]"), ["foo", "1", "2"]);
        assert_eq!(count("a,,b"), Ok(2));
    }

    fn err(hostlist: &str) -> HostlistError {
        match expand(hostlist) {
            Ok(hosts) => panic!("expand({hostlist:?}) should fail, gave {hosts:?}"),
            Err(e) => {
                assert_eq!(count(hostlist), Err(e.clone()), "count({hostlist:?})");
                e
            }
        }
    }

    #[test]
    fn rejects_with_position() {
        // libhostlist's invalid decode vectors.
        for input in [
            "[]",
            "foo[]",
            "foo[",
            "foo[1,3",
            "foo[[1,3]",
            "foo]",
            "foo[x-y]",
            "foo[0-1,2--5]",
        ] {
            err(input);
        }
        assert_eq!(
            err("foo[]"),
            HostlistError::EmptyId {
                expr: "foo[]".into(),
                pos: 4
            }
        );
        assert_eq!(
            err("a,foo[1,3"),
            HostlistError::UnclosedBracket {
                expr: "foo[1,3".into(),
                pos: 5
            }
        );
        assert_eq!(
            err("foo]"),
            HostlistError::UnmatchedBracket {
                expr: "foo]".into(),
                pos: 3
            }
        );
        assert_eq!(
            err("foo[1]]"),
            HostlistError::UnmatchedBracket {
                expr: "foo[1]]".into(),
                pos: 6
            }
        );
        assert_eq!(
            err("x,node[01-30]-[1-2,6]"),
            HostlistError::MultipleBracketGroups {
                expr: "node[01-30]-[1-2,6]".into(),
                pos: 14
            }
        );
        assert_eq!(
            err("foo[1,,2]"),
            HostlistError::EmptyId {
                expr: "foo[1,,2]".into(),
                pos: 6
            }
        );
        assert_eq!(
            err("foo[1,]"),
            HostlistError::EmptyId {
                expr: "foo[1,]".into(),
                pos: 6
            }
        );
        assert_eq!(
            err("foo[,1]"),
            HostlistError::EmptyId {
                expr: "foo[,1]".into(),
                pos: 4
            }
        );
        assert_eq!(
            err("foo[-1]"),
            HostlistError::EmptyId {
                expr: "foo[-1]".into(),
                pos: 4
            }
        );
        assert_eq!(
            err("foo[1-]"),
            HostlistError::EmptyId {
                expr: "foo[1-]".into(),
                pos: 6
            }
        );
        assert!(matches!(
            err("foo[0-1,2--5]"),
            HostlistError::InvalidChar {
                ch: '-',
                pos: 10,
                ..
            }
        ));
        assert!(matches!(
            err("foo[1-2-3]"),
            HostlistError::InvalidChar {
                ch: '-',
                pos: 7,
                ..
            }
        ));
        assert_eq!(
            err("foo[5-3]"),
            HostlistError::ReversedRange {
                expr: "foo[5-3]".into(),
                pos: 4,
                lo: "5".into(),
                hi: "3".into()
            }
        );
        assert!(matches!(
            err("foo[10-9]"),
            HostlistError::ReversedRange { .. }
        ));
        assert!(matches!(
            err("foo[x-y]"),
            HostlistError::InvalidChar {
                ch: 'x',
                pos: 4,
                ..
            }
        ));
        assert!(matches!(
            err("foo[1, 2]"),
            HostlistError::InvalidChar {
                ch: ' ',
                pos: 6,
                ..
            }
        ));
        assert!(matches!(
            err("foo[+1]"),
            HostlistError::InvalidChar { ch: '+', .. }
        ));
        assert!(matches!(
            err("foo[[1,3]"),
            HostlistError::InvalidChar {
                ch: '[',
                pos: 4,
                ..
            }
        ));
        assert!(matches!(
            err("a\nb"),
            HostlistError::InvalidChar {
                ch: '\n',
                pos: 1,
                ..
            }
        ));
        assert!(matches!(
            err("foo[1]\r"),
            HostlistError::InvalidChar {
                ch: '\r',
                pos: 6,
                ..
            }
        ));
        assert!(matches!(
            err("nöde"),
            HostlistError::InvalidChar {
                ch: 'ö',
                pos: 1,
                ..
            }
        ));
        assert!(matches!(
            err("n[1]é"),
            HostlistError::InvalidChar {
                ch: 'é',
                pos: 4,
                ..
            }
        ));
        assert!(matches!(
            err("n[1é]"),
            HostlistError::InvalidChar {
                ch: 'é',
                pos: 3,
                ..
            }
        ));
        assert!(matches!(
            err("a\u{0}"),
            HostlistError::InvalidChar { ch: '\u{0}', .. }
        ));
        // Leading zeros that contradict the first id's width.
        assert_eq!(
            err("n[1,05]"),
            HostlistError::AmbiguousPadding {
                expr: "n[1,05]".into(),
                pos: 4,
                id: "05".into(),
                width: 1
            }
        );
        assert!(matches!(
            err("n[005,04]"),
            HostlistError::AmbiguousPadding { width: 3, .. }
        ));
        assert!(matches!(
            err("n[0-01]"),
            HostlistError::AmbiguousPadding { width: 1, .. }
        ));
        assert!(matches!(
            err("n[12,04]"),
            HostlistError::AmbiguousPadding { .. }
        ));
        // Limits.
        assert!(matches!(
            err("n[18446744073709551616]"),
            HostlistError::IdTooLarge { .. }
        ));
        assert!(matches!(
            err("n[1-99999999999999999999]"),
            HostlistError::IdTooLarge { .. }
        ));
        assert!(matches!(
            err("n[0-1048576]"),
            HostlistError::TooManyHosts { .. }
        ));
        assert!(matches!(
            err("n[0-18446744073709551615]"),
            HostlistError::TooManyHosts { .. }
        ));
        assert!(matches!(
            err("n[0-1048575],x"),
            HostlistError::TooManyHosts { pos: 13, .. }
        ));
        assert_eq!(count("n[0-1048575]"), Ok(MAX_HOSTS));
        assert_eq!(count("n[0-524287],m[0-524287]"), Ok(MAX_HOSTS));
        assert!(matches!(
            err("n[0-524287],m[0-524288]"),
            HostlistError::TooManyHosts { .. }
        ));
        let long = "x".repeat(MAX_HOST_LEN + 1);
        assert!(matches!(
            err(&long),
            HostlistError::HostTooLong { len: 256, .. }
        ));
        assert_eq!(count(&long[1..]), Ok(1));
        let long_prefix = format!("{}[1-10]", "x".repeat(MAX_HOST_LEN - 1));
        assert!(matches!(
            err(&long_prefix),
            HostlistError::HostTooLong { len: 256, .. }
        ));
        let wide = format!("n[{}]", "0".repeat(300));
        assert!(matches!(err(&wide), HostlistError::HostTooLong { .. }));
    }

    #[test]
    fn error_messages_name_the_input() {
        let msg = err("good,node[1-2]-[3]").to_string();
        assert!(
            msg.contains("node[1-2]-[3]") && msg.contains("byte 15"),
            "{msg}"
        );
        assert!(msg.contains("second bracket group"), "{msg}");
        let msg = err("foo[5-3]").to_string();
        assert!(msg.contains("5-3") && msg.contains("ascending"), "{msg}");
        let msg = err("a\tb\nc").to_string();
        assert!(msg.contains("'\\n'") && msg.contains("byte 3"), "{msg}");
        let long = format!("{}]", "y".repeat(1000));
        let msg = err(&long).to_string();
        assert!(msg.contains("...") && msg.len() < 300, "{msg}");
    }

    #[test]
    fn compress_examples() {
        let c = |hosts: &[&str]| compress(hosts);
        assert_eq!(c(&[]), "");
        assert_eq!(c(&["node-3"]), "node-3");
        assert_eq!(c(&["n1", "n2", "n3", "n5", "x", "n01"]), "n[1-3,5],x,n01");
        assert_eq!(c(&["n3", "n2", "n1"]), "n[3,2,1]");
        assert_eq!(c(&["n1", "n1"]), "n[1,1]");
        assert_eq!(c(&["n1", "n2", "n2", "n3"]), "n[1-2,2-3]");
        assert_eq!(c(&["n09", "n10"]), "n[09-10]");
        assert_eq!(c(&["n9", "n10"]), "n[9-10]");
        assert_eq!(c(&["n9", "n010"]), "n9,n010");
        assert_eq!(c(&["n1", "n01"]), "n1,n01");
        assert_eq!(c(&["n01", "n1"]), "n01,n1");
        assert_eq!(c(&["n01", "n001", "n0001"]), "n01,n001,n0001");
        assert_eq!(c(&["n099", "n100", "n101", "n1000"]), "n[099-101,1000]");
        assert_eq!(c(&["n0", "n1", "n00"]), "n[0-1],n00");
        assert_eq!(c(&["node1", "node-01"]), "node1,node-01");
        assert_eq!(c(&["a1b1", "a2b1", "a3b1"]), "a[1-3]b1");
        assert_eq!(c(&["a1b1", "a1b2", "a2b1", "a2b2"]), "a1b[1-2],a2b[1-2]");
        assert_eq!(
            c(&["rack1-n01", "rack1-n02", "rack2-n01"]),
            "rack1-n[01-02],rack2-n01"
        );
        assert_eq!(c(&["foo0-eth2", "foo1-eth2", "foo2-eth2"]), "foo[0-2]-eth2");
        assert_eq!(c(&["1", "2", "3"]), "[1-3]");
        assert_eq!(
            c(&[
                "n18446744073709551615",
                "n18446744073709551616",
                "n99999999999999999999999"
            ]),
            "n18446744073709551615,n18446744073709551616,n99999999999999999999999"
        );
        assert_eq!(
            c(&["n18446744073709551614", "n18446744073709551615"]),
            "n[18446744073709551614-18446744073709551615]"
        );
        // Invalid hosts are copied verbatim.
        assert_eq!(c(&["a b", "n1", "n2"]), "a b,n[1-2]");
        assert_eq!(c(&["", "n1"]), ",n1");
        // An idlist never gets more elements than libhostlist accepts.
        let spread: Vec<String> = (0..25_000).map(|i| format!("n{}", i * 2)).collect();
        let s = compress(&spread);
        assert_eq!(s.matches('[').count(), 3, "{}", &s[..40]);
        assert!(
            s.split("],")
                .all(|e| e.matches(',').count() < MAX_IDLIST_ELEMENTS)
        );
        assert_eq!(ok(&s), spread);
        // Works with owned strings too.
        let owned: Vec<String> = vec!["x1".into(), "x2".into()];
        assert_eq!(compress(&owned), "x[1-2]");
    }

    #[test]
    fn valid_hosts() {
        assert!(is_valid_host("node-1.example.com"));
        assert!(is_valid_host("123"));
        assert!(is_valid_host("!~\\^_"));
        assert!(is_valid_host(&"x".repeat(MAX_HOST_LEN)));
        for bad in [
            "",
            "a,b",
            "a[1]",
            "a]",
            "a b",
            "a\tb",
            "a\n",
            "é",
            &"x".repeat(MAX_HOST_LEN + 1),
        ] {
            assert!(!is_valid_host(bad), "{bad:?}");
        }
    }

    #[test]
    fn compress_thousand_hosts_round_trips() {
        // Speed is measured by the benchmark; this checks a large gappy list.
        let hosts: Vec<String> = (0..1000).map(|i| format!("node{:04}", i * 3 / 2)).collect();
        assert_eq!(ok(&compress(&hosts)), hosts);
    }

    /// A character allowed in host names, biased towards digits, letters and
    /// the punctuation real host names use.
    fn name_char() -> impl Strategy<Value = char> {
        prop_oneof![
            4 => prop::sample::select(vec!['0', '1', '9']),
            4 => prop::sample::select(vec!['a', 'n', 'z', 'X']),
            2 => prop::sample::select(vec!['-', '.', '_']),
            1 => (0x21u8..0x7f)
                .prop_filter("not a special character", |&b| is_name_byte(b))
                .prop_map(char::from),
        ]
    }

    fn any_host() -> impl Strategy<Value = String> {
        prop::collection::vec(name_char(), 1..12).prop_map(|cs| cs.into_iter().collect())
    }

    /// A host of a family: prefix, an id with some padding, suffix.
    fn family_host() -> impl Strategy<Value = String> {
        (
            prop::sample::select(vec!["n", "node-", "r1n", "", "a.b", "x9y"]),
            prop::sample::select(vec!["", "-eth0", ".local", "p"]),
            prop::sample::select(vec![0usize, 1, 2, 3, 5]),
            prop_oneof![
                0u64..20,
                95u64..105,
                995u64..1005,
                Just(u64::MAX - 1),
                Just(u64::MAX)
            ],
        )
            .prop_map(|(p, s, w, id)| format!("{p}{id:0w$}{s}"))
    }

    /// Lists of valid hosts with runs of consecutive ids, duplicates, mixed
    /// prefixes and padding.
    fn host_list() -> impl Strategy<Value = Vec<String>> {
        let item = prop_oneof![
            3 => family_host().prop_map(|h| vec![h]),
            2 => (prop::sample::select(vec!["n", "rack-", ""]), 0u64..30, 1usize..6, 0usize..4, prop::sample::select(vec!["", "s"]))
                .prop_map(|(p, lo, len, w, s)| (lo..lo + len as u64).map(|i| format!("{p}{i:0w$}{s}")).collect()),
            1 => any_host().prop_map(|h| vec![h]),
            1 => (family_host(), 2usize..4).prop_map(|(h, n)| vec![h; n]),
        ];
        prop::collection::vec(item, 0..12).prop_map(|v| v.concat())
    }

    /// Checks that every bracket group of a compressed hostlist has ascending
    /// ranges and more than one host.
    fn check_groups(s: &str) -> Result<(), TestCaseError> {
        let mut rest = s;
        while let Some(open) = rest.find('[') {
            let Some(close) = rest[open..].find(']') else {
                return Err(TestCaseError::fail(format!("unclosed '[' in {s:?}")));
            };
            let body = &rest[open + 1..open + close];
            prop_assert!(
                body.contains(',') || body.contains('-'),
                "single-id group in {s:?}"
            );
            for elem in body.split(',') {
                if let Some((a, b)) = elem.split_once('-') {
                    let (a, b) = (parse_id(a), parse_id(b));
                    prop_assert!(
                        a.is_some() && b.is_some() && a < b,
                        "bad range {elem:?} in {s:?}"
                    );
                }
            }
            rest = &rest[open + close + 1..];
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn round_trip(hosts in host_list()) {
            let s = compress(&hosts);
            prop_assert_eq!(expand(&s), Ok(hosts.clone()), "compressed to {:?}", s);
            prop_assert_eq!(count(&s), Ok(hosts.len()));
            check_groups(&s)?;
        }

        #[test]
        fn round_trip_arbitrary_hosts(hosts in prop::collection::vec(any_host(), 0..20)) {
            let s = compress(&hosts);
            prop_assert_eq!(expand(&s), Ok(hosts.clone()), "compressed to {:?}", s);
            check_groups(&s)?;
        }

        #[test]
        fn compress_of_expand_is_stable(
            s in "[a-c0-2,\\[\\]\\- ]{0,24}",
        ) {
            if let Ok(hosts) = expand(&s) {
                let c = compress(&hosts);
                prop_assert_eq!(expand(&c), Ok(hosts.clone()), "{:?} -> {:?}", s, c);
                check_groups(&c)?;
            }
        }

        #[test]
        fn count_agrees_with_expand(s in "[a-c0-9,\\[\\]\\- \t]{0,32}") {
            prop_assert_eq!(count(&s), expand(&s).map(|h| h.len()));
        }

        #[test]
        fn never_panics(s in "(?s).{0,40}") {
            prop_assert_eq!(count(&s), expand(&s).map(|h| h.len()));
        }

        #[test]
        fn expanded_hosts_are_valid(s in "[a-c0-2,\\[\\]\\-]{0,24}") {
            if let Ok(hosts) = expand(&s) {
                for h in &hosts {
                    prop_assert!(is_valid_host(h), "{:?} from {:?}", h, s);
                }
            }
        }
    }
}
