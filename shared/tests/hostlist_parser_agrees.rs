//! Differential test: `flux_shared::hostlist::expand` and the independent
//! `hostlist-parser` crate expand the same hostlists to the same hosts.
//!
//! hostlist-parser is not an RFC 29 implementation, so the comparison is
//! limited to the hostlists on which it is documented (or, from its source,
//! known) to give the RFC 29 answer:
//!
//! * it returns the hosts de-duplicated, so no generated hostlist names a
//!   host twice (each expression's prefix starts with its own letter, and an
//!   idlist never repeats an id);
//! * it accepts several bracket groups per expression (`a[1-2]b[3-4]`, a
//!   cartesian product) where RFC 29 allows one, so only one is generated;
//! * it pads each idlist element on its own where RFC 29 propagates the
//!   width of the first id, so every id of an idlist is written with the
//!   same number of digits (and, when the first id has no leading zeros, no
//!   id has any, which is the only way RFC 29 accepts equal-width ids then);
//! * it pads a range from the count of leading zeros of its two ends, which
//!   gets ranges such as `010-100` wrong (`10`, not `010`), so a range never
//!   spans two different numbers of significant digits;
//! * it accepts descending ranges, which RFC 29 rejects, so ranges ascend;
//! * its host names are letters, digits, `-` and `.` only.
//!
//! It also cannot write hostlists, so `compress` is checked elsewhere (the
//! unit tests, and the python-hostlist oracle in `oracle_hostlist.rs`).

use std::collections::BTreeSet;

use flux_shared::hostlist::{compress, count, expand};
use proptest::prelude::*;

/// The digits of `id` padded to `width`.
fn pad(id: u64, width: usize) -> String {
    format!("{id:0width$}")
}

/// Number of significant digits of `id`.
fn digits(id: u64) -> usize {
    id.to_string().len()
}

/// An idlist (without brackets) whose ids are `ids` (distinct), all written
/// `width` digits wide, in the order given, with runs of consecutive ids
/// that have the same number of significant digits written as ranges when
/// `ranges` says so.
fn idlist(ids: &[u64], width: usize, ranges: &[bool]) -> String {
    let mut elements: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let lo = ids[i];
        let mut j = i + 1;
        while j < ids.len()
            && ids[j] == ids[j - 1] + 1
            && digits(ids[j]) == digits(lo)
            && ranges.get(i).copied().unwrap_or(false)
        {
            j += 1;
        }
        if j - i > 1 {
            elements.push(format!("{}-{}", pad(lo, width), pad(ids[j - 1], width)));
        } else {
            elements.push(pad(lo, width));
        }
        i = j;
    }
    elements.join(",")
}

/// One host expression; `index` (< 26) makes its hosts distinct from those
/// of the other expressions of the hostlist.
fn expression(index: usize) -> impl Strategy<Value = String> {
    let marker = char::from(b'a' + index as u8);
    let name = "[a-z0-9.-]{0,5}";
    let bracketed = (
        // The first expression may have no prefix at all (`[1-3]`).
        prop_oneof![
            3 => name.prop_map(move |p| format!("{marker}{p}")),
            1 => Just(if index == 0 { String::new() } else { marker.to_string() }),
        ],
        "[a-z0-9.-]{0,4}",
        1usize..=4,
        any::<bool>(),
        // Runs of consecutive ids, often next to a power of ten.
        prop::collection::vec(
            (
                prop_oneof![0u64..20, 5u64..15, 95u64..105, 995u64..1005, 0u64..10_000],
                1u64..6,
            ),
            1..4,
        ),
        prop::collection::vec(prop::bool::weighted(0.7), 16),
        any::<prop::sample::Index>(),
    )
        .prop_filter_map(
            "ids must fit the width",
            |(prefix, suffix, width, padded, ids, ranges, rotate)| {
                // With leading zeros on the first id every id of `width`
                // digits is fine; without, every id must have exactly
                // `width` significant digits.
                let limit = 10u64.pow(width as u32);
                let ids: BTreeSet<u64> = ids
                    .into_iter()
                    .flat_map(|(start, len)| start..start + len)
                    .map(|id| id % limit)
                    .collect();
                let mut ids: Vec<u64> = ids.into_iter().collect();
                if !padded || width == 1 {
                    let low = if width == 1 { 0 } else { limit / 10 };
                    ids.retain(|&id| id >= low);
                } else if ids.first().is_none_or(|&id| digits(id) == width) {
                    return None;
                }
                if ids.is_empty() {
                    return None;
                }
                // Sorted ids give ranges; rotate them so the list is not
                // always ascending (the first id, which sets the padding,
                // stays a padded one: it is the smallest).
                let rest = ids.len() - 1;
                ids[1..].rotate_left(rotate.index(rest + 1).min(rest));
                Some(format!(
                    "{prefix}[{}]{suffix}",
                    idlist(&ids, width, &ranges)
                ))
            },
        );
    let plain = name.prop_map(move |p| format!("{marker}{p}"));
    prop_oneof![4 => bracketed, 1 => plain]
}

/// A hostlist of one to six expressions, separated by `,` or `, `
/// (hostlist-parser rejects an empty hostlist, which RFC 29 allows).
fn hostlist() -> impl Strategy<Value = String> {
    (1usize..=6)
        .prop_flat_map(|n| {
            (
                (0..n).map(expression).collect::<Vec<_>>(),
                prop::collection::vec(any::<bool>(), n),
            )
        })
        .prop_map(|(exprs, spaced)| {
            let mut out = String::new();
            for (i, expr) in exprs.iter().enumerate() {
                if i > 0 {
                    out.push_str(if spaced[i] { ", " } else { "," });
                }
                out.push_str(expr);
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn expansions_agree(s in hostlist()) {
        let ours = expand(&s);
        prop_assert!(ours.is_ok(), "expand({:?}) failed: {:?}", s, ours);
        let ours = ours.unwrap_or_default();
        let theirs = hostlist_parser::parse(&s);
        prop_assert!(theirs.is_ok(), "hostlist_parser::parse({:?}) failed: {:?}", s, theirs);
        let theirs = theirs.unwrap_or_default();
        prop_assert_eq!(&ours, &theirs, "hostlist {:?}", s);
        let unique: BTreeSet<&String> = ours.iter().collect();
        prop_assert_eq!(unique.len(), ours.len(), "generated a duplicate host: {:?}", s);
        prop_assert_eq!(count(&s), Ok(ours.len()));
        prop_assert_eq!(expand(&compress(&ours)), Ok(ours));
    }
}

#[test]
fn examples_agree() {
    for s in [
        "n[1-3]",
        "[1-3,5-6]",
        "foo[0-4]-eth2",
        "n[001-003,007]",
        "n[007,001-003]",
        "n[010-019,005]",
        "oss[1,2].local",
        "hostname[10,11-12,13].iml.com",
        "a1,b2, c[3-4]",
    ] {
        let theirs = hostlist_parser::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(expand(s), Ok(theirs), "{s}");
    }
}
