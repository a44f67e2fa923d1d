//! The phases the hub writes in a MiniCluster's status (`status.phase` and
//! `status.bursts[].phase`), one enum per meaning. The status fields stay strings (the
//! CRD's schema is theirs); the hub sets and compares them through these enums.

use std::fmt;
use std::str::FromStr;

/// A phase string that names none of an enum's phases.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {value:?} is not one of {allowed}")]
pub struct UnknownPhase {
    /// The status field the phase is read from.
    pub field: &'static str,
    /// The string read.
    pub value: String,
    /// The phases the field allows, comma separated.
    pub allowed: &'static str,
}

/// One enum of phases, each written as its CamelCase name; `as_str`, `Display`, `FromStr`
/// and comparison with the status field's `String` come from the one list of variants.
macro_rules! phases {
    (
        $(#[$meta:meta])*
        $name:ident, $field:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
        }

        impl $name {
            /// Every phase, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant),+];

            /// The phase as written in the status.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownPhase;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $text => Ok($name::$variant), )+
                    _ => Err(UnknownPhase {
                        field: $field,
                        value: s.to_string(),
                        allowed: concat!($($text, ", "),+).trim_end_matches(", "),
                    }),
                }
            }
        }

        impl From<$name> for String {
            fn from(phase: $name) -> String {
                phase.as_str().to_string()
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }

        impl PartialEq<$name> for &str {
            fn eq(&self, other: &$name) -> bool {
                *self == other.as_str()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                self == other.as_str()
            }
        }
    };
}

phases! {
    /// The phase of one burst in `status.bursts[].phase`, as the hub sees it. Not the
    /// spoke's report (`proto::BurstPhase`): the hub derives this from the report, the
    /// assignment and the spoke's connection.
    BurstStatusPhase, "status.bursts[].phase" {
        /// Waiting for the lead broker's endpoint (nothing sent yet).
        Pending = "Pending",
        /// Sent to a connected spoke; not applied yet, or brokers starting.
        Dispatched = "Dispatched",
        /// Its brokers are ready in their cluster, but the lead broker sees none of them
        /// online yet (or the hub cannot read what it sees; the message says which).
        Joining = "Joining",
        /// Its brokers have joined the instance: the lead broker sees them online.
        Running = "Running",
        /// The burst's Job completed.
        Succeeded = "Succeeded",
        /// The burst's Job failed.
        Failed = "Failed",
        /// The spoke does not run the burst: its owner's policy does not admit it, or the
        /// spoke's own checks refuse it; `reason` and the message say why.
        Refused = "Refused",
        /// The spoke does not hold a connection to the hub.
        Unreachable = "Unreachable",
        /// The MiniCluster is being deleted; waiting for the spoke to confirm.
        Deleting = "Deleting",
        /// The spoke is connected but cannot reach its own cluster's API server: what the
        /// burst is doing is not known.
        Unknown = "Unknown",
        /// The hub does not assign the burst: it asks for what a burst may not have in
        /// another cluster (`validate::unsafe_burst`); the message says what.
        Invalid = "Invalid",
    }
}

phases! {
    /// The phase of a MiniCluster in `status.phase`, shown by `kubectl get miniclusters`.
    MiniClusterPhase, "status.phase" {
        /// Brokers are being created or are starting.
        Pending = "Pending",
        /// Every broker pod of the Job is ready.
        Running = "Running",
        /// The Job completed: the main command finished.
        Succeeded = "Succeeded",
        /// The Job failed.
        Failed = "Failed",
        /// The spec cannot be applied; see the Degraded condition.
        Invalid = "Invalid",
        /// The Job is suspended (`spec.suspend`, or a queue manager such as Kueue that has
        /// not admitted it or preempted it): no broker runs until it is resumed.
        Suspended = "Suspended",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_phase_reads_back_as_written() {
        for p in BurstStatusPhase::ALL {
            assert_eq!(p.as_str().parse::<BurstStatusPhase>(), Ok(*p));
            assert_eq!(p.to_string(), p.as_str());
        }
        for p in MiniClusterPhase::ALL {
            assert_eq!(p.as_str().parse::<MiniClusterPhase>(), Ok(*p));
        }
    }

    #[test]
    fn an_unknown_phase_names_the_field_and_the_phases_allowed() {
        let e = "Suspended".parse::<BurstStatusPhase>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "status.bursts[].phase: \"Suspended\" is not one of Pending, Dispatched, Joining, \
             Running, Succeeded, Failed, Refused, Unreachable, Deleting, Unknown, Invalid"
        );
        assert!("Dispatched".parse::<MiniClusterPhase>().is_err());
    }

    #[test]
    fn a_status_string_compares_with_its_phase() {
        let written = String::from("Running");
        assert!(written == BurstStatusPhase::Running);
        assert!("Pending" != BurstStatusPhase::Dispatched);
    }
}
