//! Oracle test: LLNL's python-hostlist reads every hostlist that
//! `flux_shared::hostlist::compress` writes as the same hosts, in the same
//! order, duplicates included; and `flux_shared::hostlist::expand` reads the
//! hostlists python-hostlist's `collect_hostlist` writes.
//! See `tests/oracle/hostlist_oracle.py`.
//!
//! # Where python-hostlist and RFC 29 agree
//!
//! python-hostlist pads each id of an idlist on its own (a range to the width
//! of its first id, a lone id as written), while RFC 29 pads every id to the
//! width of the idlist's first id when that one has leading zeros; it also
//! allows several bracket groups per expression (`a[1-2]b[1-2]`), which RFC 29
//! and `expand` do not. The cases are generated so that both define the
//! answer, and define it identically:
//!
//! * Reading our output: `compress` writes one bracket group per expression
//!   and every id exactly as it appears in the host names (a range's first id
//!   has the group's width or is unpadded), so python-hostlist's per-id
//!   padding gives the same hosts. This holds for any valid host names, so
//!   these cases mix prefixes and suffixes with digits, several paddings of
//!   the same prefix (`n1`, `n01`), duplicates and descending runs.
//! * Reading its output: `collect_hostlist` sorts, drops duplicates and
//!   brackets the rightmost number of each host, then again the rightmost
//!   number left of that bracket, and so on. For it to write what RFC 29
//!   reads the same way, cases marked `collect` use prefixes and suffixes
//!   without digits (one number per host, so one bracket group per
//!   expression) and a single zero-padding per prefix/suffix pair (so that
//!   `n[1,01]` cannot appear, which python-hostlist reads as `n1,n01` and
//!   RFC 29 as `n1,n1`).

mod common;

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::Command;

use flux_shared::hostlist::{compress, expand};

/// How many host lists to generate.
const CASES: usize = 1500;

/// A tiny deterministic PRNG (SplitMix64), so every run checks the same cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    /// An id: mostly small, sometimes next to a power of ten (where the
    /// number of digits changes) or at the top of the u64 range.
    fn id(&mut self) -> u64 {
        match self.below(10) {
            0..=5 => self.below(40) as u64,
            6 => 95 + self.below(10) as u64,
            7 => 995 + self.below(10) as u64,
            8 => 99_995 + self.below(10) as u64,
            _ => u64::MAX - self.below(8) as u64,
        }
    }
}

/// Prefixes and suffixes without digits (safe for `collect_hostlist`).
/// Some carry characters that JSON must escape.
const PLAIN_PREFIXES: &[&str] = &[
    "", "n", "node-", "gpu.", "c_", "rack-a-", "x!y", "q\"", "b\\", "A~", "-",
];
const PLAIN_SUFFIXES: &[&str] = &["", "", "", "-eth", ".local", "p", "_ib", "-"];
/// Prefixes and suffixes with digits, only for the `compress` direction.
const DIGIT_PREFIXES: &[&str] = &["r1n", "x9-", "0", "n01-", "a2b3c"];
const DIGIT_SUFFIXES: &[&str] = &["-eth0", "1", "p2q"];
/// Host names with no number, and with numbers.
const PLAIN_NAMES: &[&str] = &["login", "mgmt", "head", "x", "_", "a-b.c"];
const DIGIT_NAMES: &[&str] = &["login1", "head-01", "v6", "007"];
/// Zero-padding widths: 0 and 1 mean none.
const WIDTHS: &[usize] = &[0, 0, 1, 2, 3, 4];

/// One generated host list; `collect` says whether python-hostlist's
/// `collect_hostlist` is defined identically for it (see the module docs).
struct Case {
    hosts: Vec<String>,
    collect: bool,
}

fn generate(rng: &mut Rng) -> Case {
    let collect = rng.chance(50);
    // The zero-padding of each prefix/suffix pair: one per pair in a
    // `collect` case, one per host otherwise.
    let mut widths: HashMap<(&str, &str), usize> = HashMap::new();
    let mut hosts: Vec<String> = Vec::new();
    for _ in 0..1 + rng.below(6) {
        let (prefix, suffix) = if collect || rng.chance(60) {
            (rng.pick(PLAIN_PREFIXES), rng.pick(PLAIN_SUFFIXES))
        } else {
            let prefixes = [rng.pick(PLAIN_PREFIXES), rng.pick(DIGIT_PREFIXES)];
            let suffixes = [rng.pick(PLAIN_SUFFIXES), rng.pick(DIGIT_SUFFIXES)];
            (rng.pick(&prefixes), rng.pick(&suffixes))
        };
        let fresh_width = WIDTHS[rng.below(WIDTHS.len())];
        let width = if collect {
            *widths.entry((prefix, suffix)).or_insert(fresh_width)
        } else {
            fresh_width
        };
        let host = |id: u64| format!("{prefix}{id:0width$}{suffix}");
        match rng.below(7) {
            // An ascending run, possibly with gaps.
            0 | 1 => {
                let mut id = rng.id();
                for _ in 0..1 + rng.below(8) {
                    hosts.push(host(id));
                    id = id.saturating_add(1 + (rng.chance(20) as u64) * 2);
                }
            }
            // A descending run.
            2 => {
                let mut id = rng.id();
                for _ in 0..1 + rng.below(5) {
                    hosts.push(host(id));
                    id = id.saturating_sub(1);
                }
            }
            // Unrelated ids.
            3 => {
                for _ in 0..1 + rng.below(4) {
                    hosts.push(host(rng.id()));
                }
            }
            // A single host.
            4 => hosts.push(host(rng.id())),
            // Duplicates of a host already in the list.
            5 => {
                if !hosts.is_empty() {
                    let again = hosts[rng.below(hosts.len())].clone();
                    for _ in 0..1 + rng.below(3) {
                        hosts.push(again.clone());
                    }
                }
            }
            // A name without a bracketable number, or with one elsewhere.
            _ => {
                let names = if collect || rng.chance(50) {
                    PLAIN_NAMES
                } else {
                    DIGIT_NAMES
                };
                hosts.push(rng.pick(names).to_owned());
            }
        }
    }
    Case { hosts, collect }
}

#[test]
fn python_hostlist_agrees() {
    let python = common::oracle_python();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracle/hostlist_oracle.py");
    let cases_path = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("hostlist-oracle-{}.jsonl", std::process::id()));

    let mut rng = Rng(0x5eed_f10c_2029);
    let mut cases = Vec::with_capacity(CASES);
    let mut jsonl = String::new();
    for _ in 0..CASES {
        let case = generate(&mut rng);
        let hostlist = compress(&case.hosts);
        let expanded = expand(&hostlist).unwrap_or_else(|e| {
            panic!(
                "expand(compress({:?})) = {hostlist:?} fails: {e}",
                case.hosts
            )
        });
        let line = serde_json::json!({
            "hostlist": hostlist,
            "hosts": case.hosts,
            "expanded": expanded,
            "collect": case.collect,
        });
        jsonl.push_str(&line.to_string());
        jsonl.push('\n');
        cases.push(case);
    }
    fs::write(&cases_path, &jsonl).expect("write the oracle's input file");

    let output = Command::new(&python)
        .arg(&script)
        .arg(&cases_path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} {}: {e}", python.display(), script.display()));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "python-hostlist disagrees with flux_shared::hostlist ({}), cases in {}:\n{stderr}",
        output.status,
        cases_path.display()
    );

    // Read what python-hostlist's collect_hostlist wrote back with `expand`.
    let stdout = String::from_utf8_lossy(&output.stdout);
    let mut checked = 0;
    let mut failures = Vec::new();
    for line in stdout.lines() {
        let reply: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("bad line from the oracle ({e}): {line:?}"));
        let lineno = reply["line"].as_u64().expect("line number") as usize;
        let collected = reply["collected"].as_str().expect("collected hostlist");
        let theirs: Vec<String> =
            serde_json::from_value(reply["expanded"].clone()).expect("expanded hosts");
        let case = &cases[lineno - 1];
        assert!(
            case.collect,
            "the oracle collected line {lineno}, which is not a collect case"
        );
        let mut unique = case.hosts.clone();
        unique.sort();
        unique.dedup();
        match expand(collected) {
            Ok(ours) => {
                let mut sorted = ours.clone();
                sorted.sort();
                if ours != theirs || sorted != unique {
                    failures.push(format!(
                        "line {lineno}: collect_hostlist wrote {collected:?}; python-hostlist reads \
                         {theirs:?}, flux_shared reads {ours:?}; hosts were {:?}",
                        case.hosts
                    ));
                }
            }
            Err(e) => failures.push(format!(
                "line {lineno}: flux_shared rejects collect_hostlist's {collected:?}: {e}"
            )),
        }
        checked += 1;
    }
    let expected = cases.iter().filter(|c| c.collect).count();
    assert!(
        failures.is_empty(),
        "{} of {checked} collect_hostlist outputs read differently:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert_eq!(
        checked, expected,
        "the oracle did not collect every collect case:\n{stderr}"
    );
    assert!(expected >= CASES / 3, "too few collect cases: {expected}");
    eprint!("{stderr}");
    let _ = fs::remove_file(&cases_path);
}
