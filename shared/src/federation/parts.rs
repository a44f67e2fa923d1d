//! Snapshots in parts: a spoke's snapshot carries every assignment it runs, and an
//! assignment carries its MiniCluster's whole spec (scripts included), so one large tenant
//! could push a spoke's whole snapshot past the gRPC message limit (4 MiB by default) and
//! stop every other tenant's updates on that spoke. The hub sends a snapshot as parts of
//! at most [`PART_BUDGET`] bytes ([`split`]); the spoke acts on it only once it has every
//! part ([`Assembler`]). An assignment is never split: one larger than
//! [`MAX_ASSIGNMENT_BYTES`] is refused on its own MiniCluster by the hub, so no single
//! tenant can make a part unsendable.

use std::collections::{HashMap, HashSet};

use prost::Message;
use prost::bytes::Bytes;

use super::proto::{Assignment, Snapshot};

/// The encoded size parts are packed to (a quarter of gRPC's default message limit). An
/// assignment larger than this travels alone in its part.
pub const PART_BUDGET: usize = 1 << 20;

/// The largest encoded assignment the hub sends: under gRPC's default 4 MiB message
/// limit with room for the part's envelope. A MiniCluster whose spec is this large cannot
/// burst (its spec alone is near etcd's 1.5 MiB object limit long before).
pub const MAX_ASSIGNMENT_BYTES: usize = 3 << 20;

/// The most one MiniCluster's assignments may hold together, counting a buffer its bursts
/// share (the spec, R) once: what the hub keeps for one tenant, and sends each spoke of
/// it. A spec at etcd's limit with 64 bursts fits.
pub const MAX_MINICLUSTER_BYTES: usize = 4 << 20;

/// What `assignments` hold together, a buffer they share counted once.
pub fn held_bytes<'a>(assignments: impl IntoIterator<Item = &'a Assignment>) -> usize {
    let mut seen: HashSet<*const u8> = HashSet::new();
    let mut total = 0;
    for a in assignments {
        let mut shared = 0;
        for field in [&a.minicluster_spec_json, &a.resource_set] {
            if !seen.insert(field.as_ptr()) || field.is_empty() {
                shared += field.len();
            }
        }
        total += a.encoded_len().saturating_sub(shared);
    }
    total
}

/// The most parts a spoke accepts for one snapshot (bounds what it holds while
/// assembling: [`MAX_ASSIGNMENT_BYTES`] per part at most).
pub const MAX_PARTS: u32 = 4096;

/// Whether `assignment` is too large to send ([`MAX_ASSIGNMENT_BYTES`]): its encoded size
/// when it is.
pub fn too_large(assignment: &Assignment) -> Option<usize> {
    let size = assignment.encoded_len();
    (size > MAX_ASSIGNMENT_BYTES).then_some(size)
}

/// `snapshot` as parts of at most `budget` encoded bytes each (an assignment larger than
/// `budget` alone in its part), numbered 1..=n, in the snapshot's order: assignments first,
/// then retained keys. A snapshot that fits is one part (`1 of 1`); an empty one too.
pub fn split(snapshot: Snapshot, budget: usize) -> Vec<Snapshot> {
    let empty = || Snapshot {
        hub_epoch: snapshot.hub_epoch.clone(),
        version: snapshot.version,
        ..Snapshot::default()
    };
    let envelope = empty().encoded_len() + 16;
    let mut parts = vec![empty()];
    let mut used = envelope;
    for a in snapshot.assignments {
        let size = a.encoded_len() + 8;
        if used + size > budget && used > envelope {
            parts.push(empty());
            used = envelope;
        }
        used += size;
        if let Some(last) = parts.last_mut() {
            last.assignments.push(a);
        }
    }
    for key in snapshot.retained_keys {
        let size = key.len() + 8;
        if used + size > budget && used > envelope {
            parts.push(empty());
            used = envelope;
        }
        used += size;
        if let Some(last) = parts.last_mut() {
            last.retained_keys.push(key);
        }
    }
    let n = u32::try_from(parts.len()).unwrap_or(u32::MAX);
    for (i, part) in parts.iter_mut().enumerate() {
        part.part = u32::try_from(i + 1).unwrap_or(u32::MAX);
        part.parts = n;
    }
    parts
}

/// Why a part was dropped (the snapshot it belongs to is then waited for again: the hub
/// sends every snapshot whole, in order, on each stream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PartError {
    /// Part numbers out of range, or more parts than [`MAX_PARTS`].
    #[error("part {part} of {parts} is not a valid part number (at most {MAX_PARTS} parts)")]
    Invalid {
        /// The part's number.
        part: u32,
        /// The parts it says the snapshot has.
        parts: u32,
    },
    /// An assignment names, in `shares_with`, a key not seen earlier in its snapshot.
    #[error(
        "assignment {key:?} shares the spec of {shares_with:?}, which no earlier assignment of its snapshot has"
    )]
    UnknownShare {
        /// The assignment.
        key: String,
        /// The key it names.
        shares_with: String,
    },
    /// A part arrived out of order: the one expected next is another.
    #[error("part {got} of snapshot {version} arrived where part {expected} was expected")]
    OutOfOrder {
        /// The snapshot's version.
        version: u64,
        /// The part expected.
        expected: u32,
        /// The part that came.
        got: u32,
    },
}

/// Sends each MiniCluster's spec and R once in `snapshot` (the hub's side of
/// `Assignment.shares_with`): an assignment whose spec and R are the very buffers of an
/// earlier one (the registry shares them between a MiniCluster's bursts) carries that
/// one's key instead. The spoke's [`Assembler`] fills them in again.
pub fn send_shared(snapshot: &mut Snapshot) {
    let mut first: HashMap<(usize, usize, usize, usize), String> = HashMap::new();
    for a in &mut snapshot.assignments {
        if a.minicluster_spec_json.is_empty() || !a.shares_with.is_empty() {
            continue;
        }
        let id = (
            a.minicluster_spec_json.as_ptr() as usize,
            a.minicluster_spec_json.len(),
            a.resource_set.as_ptr() as usize,
            a.resource_set.len(),
        );
        match first.get(&id) {
            Some(key) => {
                a.shares_with = key.clone();
                a.minicluster_spec_json = Bytes::new();
                a.resource_set = Bytes::new();
            }
            None => {
                first.insert(id, a.key.clone());
            }
        }
    }
}

/// Puts the parts of a snapshot together, on the spoke.
#[derive(Debug, Default)]
pub struct Assembler {
    /// The parts so far of the snapshot being assembled, in order.
    pending: Vec<Snapshot>,
    /// The specs and resource sets of the snapshot being assembled, each held once.
    shared: HashSet<Bytes>,
    /// The spec and R of each assignment of the snapshot being assembled, by key (what a
    /// later `shares_with` names).
    by_key: HashMap<String, (Bytes, Bytes)>,
}

/// Makes the assignments' specs and resource sets that are equal share one buffer: every
/// burst of a MiniCluster carries the same spec (up to etcd's 1.5 MiB object limit) on the
/// wire, and a spoke with many of one tenant's bursts must not hold it once per burst.
fn share(
    assignments: &mut [Assignment],
    shared: &mut HashSet<Bytes>,
    by_key: &mut HashMap<String, (Bytes, Bytes)>,
) -> Result<(), PartError> {
    let mut one = |field: &mut Bytes| {
        if field.is_empty() {
            return;
        }
        match shared.get(&*field) {
            Some(kept) => *field = kept.clone(),
            None => {
                // Not a view into a larger received buffer, which it would keep alive.
                let own = Bytes::copy_from_slice(field);
                shared.insert(own.clone());
                *field = own;
            }
        }
    };
    for a in assignments {
        if !a.shares_with.is_empty() {
            let Some((spec, resources)) = by_key.get(&a.shares_with) else {
                return Err(PartError::UnknownShare {
                    key: a.key.clone(),
                    shares_with: a.shares_with.clone(),
                });
            };
            a.minicluster_spec_json = spec.clone();
            a.resource_set = resources.clone();
            a.shares_with.clear();
            continue;
        }
        one(&mut a.minicluster_spec_json);
        one(&mut a.resource_set);
        by_key.insert(
            a.key.clone(),
            (a.minicluster_spec_json.clone(), a.resource_set.clone()),
        );
    }
    Ok(())
}

impl Assembler {
    fn reset(&mut self) {
        self.pending.clear();
        self.shared.clear();
        self.by_key.clear();
    }

    /// Takes the next message of the stream: the whole snapshot once its last part is in,
    /// `None` while parts are missing. A message of another snapshot than the one being
    /// assembled starts over with it (a newer snapshot replaces one half received).
    pub fn push(&mut self, part: Snapshot) -> Result<Option<Snapshot>, PartError> {
        let mut part = part;
        if part.parts == 0 {
            // A whole snapshot from a hub that does not send parts.
            self.reset();
            share(
                &mut part.assignments,
                &mut HashSet::new(),
                &mut HashMap::new(),
            )?;
            return Ok(Some(part));
        }
        if part.part == 0 || part.part > part.parts || part.parts > MAX_PARTS {
            self.reset();
            return Err(PartError::Invalid {
                part: part.part,
                parts: part.parts,
            });
        }
        let same = self.pending.first().is_some_and(|first| {
            first.hub_epoch == part.hub_epoch
                && first.version == part.version
                && first.parts == part.parts
        });
        if !same {
            self.reset();
        }
        let expected = u32::try_from(self.pending.len() + 1).unwrap_or(u32::MAX);
        if part.part != expected {
            self.reset();
            return Err(PartError::OutOfOrder {
                version: part.version,
                expected,
                got: part.part,
            });
        }
        let last = part.part == part.parts;
        if let Err(e) = share(&mut part.assignments, &mut self.shared, &mut self.by_key) {
            self.reset();
            return Err(e);
        }
        self.pending.push(part);
        if !last {
            return Ok(None);
        }
        let mut parts = std::mem::take(&mut self.pending).into_iter();
        self.shared.clear();
        self.by_key.clear();
        let Some(mut whole) = parts.next() else {
            return Ok(None);
        };
        for p in parts {
            whole.assignments.extend(p.assignments);
            whole.retained_keys.extend(p.retained_keys);
        }
        whole.part = 1;
        whole.parts = 1;
        Ok(Some(whole))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A MiniCluster's spec and R travel once per snapshot: the hub sends later bursts a
    /// reference, and the spoke assembles exactly what the hub held, in parts or whole.
    #[test]
    fn a_spec_travels_once_per_snapshot_and_is_filled_in_again() {
        let (spec, other) = (Bytes::from("s".repeat(600_000)), Bytes::from("other"));
        let r = Bytes::from("R");
        let a = |key: &str, spec: &Bytes| Assignment {
            key: key.into(),
            minicluster_spec_json: spec.clone(),
            resource_set: r.clone(),
            ..Assignment::default()
        };
        let held = Snapshot {
            hub_epoch: "e".into(),
            version: 1,
            assignments: vec![
                a("ns/m/b0", &spec),
                a("ns/n/b0", &other),
                a("ns/m/b1", &spec),
                a("ns/m/b2", &spec),
            ],
            ..Snapshot::default()
        };
        let mut wire = held.clone();
        send_shared(&mut wire);
        let shares: Vec<&str> = wire
            .assignments
            .iter()
            .map(|a| a.shares_with.as_str())
            .collect();
        assert_eq!(shares, ["", "", "ns/m/b0", "ns/m/b0"]);
        assert!(
            wire.encoded_len() < 700_000,
            "the spec once: {}",
            wire.encoded_len()
        );
        for parts in [split(wire.clone(), 1000), vec![wire.clone()]] {
            let mut assembler = Assembler::default();
            let mut whole = None;
            for p in parts {
                whole = assembler.push(p).expect("in order");
            }
            let whole = whole.expect("assembled");
            assert_eq!(whole.assignments, held.assignments, "as the hub held them");
        }
        // A reference to nothing seen earlier drops the snapshot.
        let mut broken = wire.clone();
        broken.assignments.remove(0);
        let e = Assembler::default().push(broken).unwrap_err();
        assert!(matches!(e, PartError::UnknownShare { .. }), "{e}");
    }

    /// Every burst of a tenant carries the same spec: the assembled snapshot holds it once,
    /// whether it came in one part or several.
    #[test]
    fn equal_specs_and_resource_sets_share_one_buffer() {
        let spec = "s".repeat(1 << 20);
        let snapshot = Snapshot {
            hub_epoch: "e".into(),
            version: 1,
            assignments: (0..6)
                .map(|i| Assignment {
                    key: format!("ns/m/b{i}"),
                    // Separate buffers, as decoding gives.
                    minicluster_spec_json: Bytes::from(spec.clone()),
                    resource_set: Bytes::from("R".to_string()),
                    ..Assignment::default()
                })
                .collect(),
            ..Snapshot::default()
        };
        for parts in [split(snapshot.clone(), PART_BUDGET), vec![snapshot.clone()]] {
            let mut assembler = Assembler::default();
            let mut whole = None;
            for p in parts {
                whole = assembler.push(p).expect("in order");
            }
            let whole = whole.expect("assembled");
            assert_eq!(whole.assignments.len(), 6);
            let first = &whole.assignments[0];
            for a in &whole.assignments {
                assert_eq!(
                    a.minicluster_spec_json,
                    snapshot.assignments[0].minicluster_spec_json
                );
                assert_eq!(
                    a.minicluster_spec_json.as_ptr(),
                    first.minicluster_spec_json.as_ptr(),
                    "one buffer"
                );
                assert_eq!(a.resource_set.as_ptr(), first.resource_set.as_ptr());
            }
        }
    }

    fn assignment(key: &str, spec_bytes: usize) -> Assignment {
        Assignment {
            key: key.into(),
            minicluster_spec_json: "x".repeat(spec_bytes).into(),
            ..Assignment::default()
        }
    }

    fn snapshot(assignments: Vec<Assignment>, retained: &[&str]) -> Snapshot {
        Snapshot {
            hub_epoch: "e1".into(),
            version: 7,
            assignments,
            retained_keys: retained.iter().map(|k| k.to_string()).collect(),
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_small_snapshot_is_one_part_and_comes_back_whole() {
        let s = snapshot(vec![assignment("ns/a/b", 10)], &["ns/c/d"]);
        let parts = split(s.clone(), PART_BUDGET);
        assert_eq!(parts.len(), 1);
        assert_eq!((parts[0].part, parts[0].parts), (1, 1));
        let mut a = Assembler::default();
        let whole = a.push(parts[0].clone()).expect("valid").expect("whole");
        assert_eq!(whole.assignments, s.assignments);
        assert_eq!(whole.retained_keys, s.retained_keys);
        // An empty snapshot (a spoke with nothing to run) is a part too.
        let empty = split(snapshot(vec![], &[]), PART_BUDGET);
        assert_eq!(empty.len(), 1);
        assert!(a.push(empty[0].clone()).expect("valid").is_some());
    }

    #[test]
    fn a_large_tenant_does_not_push_any_part_over_the_budget() {
        // Four bursts of a tenant with 1 MiB of scripts, and a small tenant.
        let mut assignments: Vec<Assignment> = (0..4)
            .map(|i| assignment(&format!("big/mc/b{i}"), 1 << 20))
            .collect();
        assignments.push(assignment("small/mc/b", 2000));
        let s = snapshot(assignments, &["kept/mc/b"]);
        assert!(s.encoded_len() > 4 << 20, "too large for one message");
        let parts = split(s.clone(), PART_BUDGET);
        assert_eq!(
            parts.len(),
            5,
            "each large assignment alone, the small one with the keys"
        );
        for p in &parts {
            assert!(
                p.encoded_len() <= PART_BUDGET || p.assignments.len() == 1,
                "part {} is {} bytes with {} assignments",
                p.part,
                p.encoded_len(),
                p.assignments.len()
            );
            assert!(p.encoded_len() < 4 << 20);
            assert_eq!((p.hub_epoch.as_str(), p.version, p.parts), ("e1", 7, 5));
        }
        let mut a = Assembler::default();
        let mut whole = None;
        for (i, p) in parts.into_iter().enumerate() {
            let out = a.push(p).expect("in order");
            assert_eq!(out.is_some(), i == 4, "whole only at the last part");
            whole = whole.or(out);
        }
        let whole = whole.expect("whole");
        assert_eq!(whole.assignments, s.assignments, "same order");
        assert_eq!(whole.retained_keys, s.retained_keys);
    }

    #[test]
    fn missing_or_foreign_parts_are_never_taken_for_a_whole_snapshot() {
        let s = snapshot(
            (0..3)
                .map(|i| assignment(&format!("t/mc/b{i}"), 600_000))
                .collect(),
            &[],
        );
        let parts = split(s, PART_BUDGET);
        assert_eq!(parts.len(), 3);
        let mut a = Assembler::default();
        assert_eq!(a.push(parts[0].clone()), Ok(None));
        // Part 3 without part 2.
        assert_eq!(
            a.push(parts[2].clone()),
            Err(PartError::OutOfOrder {
                version: 7,
                expected: 2,
                got: 3
            })
        );
        // A newer snapshot starts over: the parts of version 7 are dropped.
        let mut newer = split(snapshot(vec![assignment("t/mc/b0", 10)], &[]), PART_BUDGET);
        newer[0].version = 8;
        assert_eq!(a.push(parts[0].clone()), Ok(None));
        let whole = a.push(newer[0].clone()).expect("valid").expect("whole");
        assert_eq!(whole.version, 8);
        assert_eq!(whole.assignments.len(), 1);
        // Nonsense numbering.
        let mut bad = parts[0].clone();
        bad.part = 4;
        assert!(matches!(a.push(bad), Err(PartError::Invalid { .. })));
        let mut bad = parts[0].clone();
        bad.parts = MAX_PARTS + 1;
        assert!(matches!(a.push(bad), Err(PartError::Invalid { .. })));
        // A whole snapshot of an older hub (no part numbers) is taken as it is.
        let old = snapshot(vec![assignment("t/mc/b0", 10)], &["k"]);
        assert_eq!(a.push(old.clone()), Ok(Some(old)));
    }

    #[test]
    fn only_an_assignment_over_the_limit_is_too_large() {
        assert_eq!(too_large(&assignment("a/b/c", 1 << 20)), None);
        let big = assignment("a/b/c", MAX_ASSIGNMENT_BYTES);
        assert!(too_large(&big).is_some_and(|n| n > MAX_ASSIGNMENT_BYTES));
    }
}
