//! Which revision of the federation protocol each side speaks, and which peers it serves.
//!
//! A revision names what a hub and a spoke must agree on: the messages of
//! `federation.proto` and what their fields mean, and the objects a spoke writes in its
//! cluster (which a hub of another version assigns, and a spoke of another version adopts).
//! It changes when one of those changes meaning; additions that an older peer may ignore do
//! not need one.
//!
//! Every call of the `Spoke` service carries the caller's revision in [`REVISION_HEADER`],
//! and the hub answers with its own in the same header, so each side knows the other's
//! before it reads a message. A side of revision N works with peers of N-1, N and N+1
//! ([`check_peer`]); anything else is refused with a reason that says which side to
//! upgrade. A peer that sends no header is of [`UNDECLARED`]: release 0.1.0, which had no
//! header (nor any check).

use tonic::metadata::{AsciiMetadataValue, MetadataMap};

/// The revision this build speaks.
///
/// 1: release 0.1.0. 2: the revision is declared and checked (this header).
pub const REVISION: u32 = 2;

/// The revision of a peer that declares none: release 0.1.0.
pub const UNDECLARED: u32 = 1;

/// Metadata header carrying a side's revision, in decimal: on every request of a spoke,
/// and on the hub's response headers.
pub const REVISION_HEADER: &str = "flux-protocol-revision";

/// The header's value for [`REVISION`].
pub fn revision_value() -> AsciiMetadataValue {
    AsciiMetadataValue::from(REVISION)
}

/// A peer's revision, read from its metadata: [`UNDECLARED`] without the header.
pub fn peer_revision(metadata: &MetadataMap) -> Result<u32, SkewError> {
    let Some(value) = metadata.get(REVISION_HEADER) else {
        return Ok(UNDECLARED);
    };
    value
        .to_str()
        .ok()
        .filter(|s| s.len() <= 10 && !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|r| *r > 0)
        .ok_or_else(|| {
            SkewError::Unreadable(
                String::from_utf8_lossy(value.as_bytes())
                    .chars()
                    .take(16)
                    .collect(),
            )
        })
}

/// Why a peer's revision is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SkewError {
    /// The header is not a positive decimal number.
    #[error(
        "{REVISION_HEADER} header {0:?} is not a protocol revision (a positive decimal number)"
    )]
    Unreadable(String),
    /// The peer is more than one revision behind this side.
    #[error(
        "it speaks protocol revision {peer}, more than one behind this side's {ours} (revisions {low} to {high} are served): upgrade it"
    )]
    TooOld {
        /// The peer's revision.
        peer: u32,
        /// This side's.
        ours: u32,
        /// The oldest served.
        low: u32,
        /// The newest served.
        high: u32,
    },
    /// The peer is more than one revision ahead of this side.
    #[error(
        "it speaks protocol revision {peer}, more than one ahead of this side's {ours} (revisions {low} to {high} are served): upgrade this side"
    )]
    TooNew {
        /// The peer's revision.
        peer: u32,
        /// This side's.
        ours: u32,
        /// The oldest served.
        low: u32,
        /// The newest served.
        high: u32,
    },
}

impl SkewError {
    /// A short, fixed word for the refusal (a metric label).
    pub fn reason(&self) -> &'static str {
        match self {
            SkewError::Unreadable(_) => "protocol-unreadable",
            SkewError::TooOld { .. } => "protocol-too-old",
            SkewError::TooNew { .. } => "protocol-too-new",
        }
    }

    /// The refusal as the side that makes it says it: `peer` names the other side (`spoke
    /// east`, `the hub`), `this` this side (`hub`, `spoke`); it ends with which to upgrade.
    pub fn explain(&self, peer: &str, this: &str) -> String {
        match self {
            SkewError::Unreadable(text) => {
                format!("{peer} sent {REVISION_HEADER} {text:?}, which is not a protocol revision")
            }
            SkewError::TooOld {
                peer: p,
                ours,
                low,
                high,
            } => format!(
                "{peer} speaks protocol revision {p}; this {this} speaks {ours} and serves {low} to {high}: upgrade {peer}"
            ),
            SkewError::TooNew {
                peer: p,
                ours,
                low,
                high,
            } => format!(
                "{peer} speaks protocol revision {p}; this {this} speaks {ours} and serves {low} to {high}: upgrade this {this}"
            ),
        }
    }
}

/// Whether a side of revision `ours` serves a peer of revision `peer`: within one either
/// way.
pub fn check(ours: u32, peer: u32) -> Result<(), SkewError> {
    let (low, high) = (ours.saturating_sub(1).max(1), ours.saturating_add(1));
    if peer < low {
        Err(SkewError::TooOld {
            peer,
            ours,
            low,
            high,
        })
    } else if peer > high {
        Err(SkewError::TooNew {
            peer,
            ours,
            low,
            high,
        })
    } else {
        Ok(())
    }
}

/// [`check`] for this build: the peer's revision from `metadata`, if served.
pub fn check_peer(metadata: &MetadataMap) -> Result<u32, SkewError> {
    let peer = peer_revision(metadata)?;
    check(REVISION, peer).map(|()| peer)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(value: Option<&str>) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Some(v) = value {
            m.insert(REVISION_HEADER, v.parse().unwrap());
        }
        m
    }

    #[test]
    fn a_peer_without_the_header_is_the_first_release() {
        assert_eq!(peer_revision(&with(None)), Ok(UNDECLARED));
        assert_eq!(check_peer(&with(None)), Ok(1));
    }

    #[test]
    fn one_revision_either_way_is_served() {
        assert_eq!(check(2, 1), Ok(()));
        assert_eq!(check(2, 2), Ok(()));
        assert_eq!(check(2, 3), Ok(()));
        assert!(matches!(
            check(2, 4),
            Err(SkewError::TooNew {
                peer: 4,
                ours: 2,
                low: 1,
                high: 3
            })
        ));
        assert!(matches!(
            check(4, 2),
            Err(SkewError::TooOld {
                peer: 2,
                ours: 4,
                low: 3,
                high: 5
            })
        ));
        // Revision 1 has no revision 0 below it.
        assert_eq!(check(1, 1), Ok(()));
        assert!(check(1, 3).is_err());
    }

    #[test]
    fn the_message_says_which_side_to_upgrade() {
        let old = check(4, 2).unwrap_err().to_string();
        assert!(
            old.contains("revision 2") && old.contains("upgrade it"),
            "{old}"
        );
        let new = check(2, 4).unwrap_err().to_string();
        assert!(
            new.contains("upgrade this side") && new.contains("1 to 3"),
            "{new}"
        );
        assert_eq!(check(2, 4).unwrap_err().reason(), "protocol-too-new");
    }

    #[test]
    fn only_a_positive_decimal_is_a_revision() {
        assert_eq!(peer_revision(&with(Some("3"))), Ok(3));
        for bad in ["", "0", "-1", "2.0", "x", "99999999999", "+2"] {
            let err = peer_revision(&with(Some(bad))).unwrap_err();
            assert_eq!(err.reason(), "protocol-unreadable", "{bad:?}");
        }
        let long = "9".repeat(300);
        let err = peer_revision(&with(Some(&long))).unwrap_err().to_string();
        assert!(err.len() < 200, "the peer's text is cut: {err}");
    }

    #[test]
    fn this_build_declares_its_revision() {
        assert_eq!(
            peer_revision(&{
                let mut m = MetadataMap::new();
                m.insert(REVISION_HEADER, revision_value());
                m
            }),
            Ok(REVISION)
        );
    }
}
