//! How a burst's brokers reach the lead broker, decided for each placement of a burst whose
//! spec leaves `relay` unset: directly (the lead's NodePort) where its spoke's brokers
//! reach the root's nodes, relayed (through the spoke's own connection to the hub) where
//! they do not. Pure: the reconcile gathers what it knows ([`Ask`]) and writes the answer
//! into the plan ([`flux_shared::plan::Plan::route`]) and the status.
//!
//! A path, once chosen, stays with the placement: the brokers run with it. The one change
//! is direct to relayed, when the spoke reports it cannot reach the lead broker and the
//! lead broker, read by this hub, sees none of the burst's brokers online: nothing of the
//! burst is in the instance, so restarting its brokers on the relay loses nothing and
//! never runs a rank twice.

use std::time::SystemTime;

use flux_shared::api::burst_path_reason as reason;

/// What a spoke said of how its brokers reach the root cluster's nodes (its last report
/// to this hub).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reach {
    /// What its owner declared: `Some(true)` relayed, `Some(false)` direct.
    pub declared: Option<bool>,
    /// What it last measured.
    pub measured: Option<Measured>,
}

/// A spoke's last measurement of the path to the root's nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measured {
    /// `true`: its connects failed (relay); `false`: one connected (direct).
    pub relay: bool,
    /// The `host:port` it connected to.
    pub target: String,
    /// Why it failed (empty when it connected).
    pub error: String,
    /// When.
    pub at: SystemTime,
}

/// The path a burst runs with now, as its status shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kept<'a> {
    /// Relayed.
    pub relay: bool,
    /// Its `pathReason`, if the status has one (a hub before path choice wrote none).
    pub reason: Option<&'a str>,
    /// Its `pathMessage`.
    pub message: Option<&'a str>,
}

/// What the choice of one burst's path is made from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ask<'a> {
    /// The spoke it is placed on.
    pub spoke: &'a str,
    /// `relay` as its spec sets it.
    pub spec: Option<bool>,
    /// Whether it may be relayed at all (its name leaves room for a relay Service).
    pub can_relay: bool,
    /// The path it runs with, when this placement already had one (same spoke, not scaled
    /// up from 0 since).
    pub kept: Option<Kept<'a>>,
    /// What its spoke said of its reach in its reports to this hub; `None` before the
    /// spoke's first report since this hub started.
    pub reach: Option<&'a Reach>,
    /// Its spoke's latest report says its brokers cannot reach the lead broker: why.
    pub lead_unreachable: Option<&'a str>,
    /// The lead broker, as this hub read it, sees none of its brokers online.
    pub none_joined: bool,
}

/// The path chosen, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Path {
    /// Relayed.
    pub relay: bool,
    /// `status.bursts[].pathReason`.
    pub reason: String,
    /// `status.bursts[].pathMessage`.
    pub message: String,
}

/// What is decided for one burst.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Its path.
    Chosen(Path),
    /// Not yet (nothing is sent to its spoke), with why.
    Undecided(String),
}

fn name(relay: bool) -> &'static str {
    if relay { "the relay" } else { "direct" }
}

/// The path of one burst.
pub fn choose(ask: &Ask<'_>) -> Choice {
    let chosen = |relay: bool, why: &str, message: String| {
        Choice::Chosen(Path {
            relay,
            reason: why.to_string(),
            message,
        })
    };
    if let Some(relay) = ask.spec {
        return chosen(relay, reason::SPEC, format!("relay: {relay} in the spec"));
    }
    if !ask.can_relay {
        return chosen(
            false,
            reason::CANNOT_RELAY,
            "its name leaves no room for a relay Service (<name>-relay, at most 63 characters, starting with a letter): it connects directly".to_string(),
        );
    }
    if let Some(kept) = &ask.kept {
        if !kept.relay
            && ask.none_joined
            && let Some(why) = ask.lead_unreachable
        {
            return chosen(
                true,
                reason::LEAD_UNREACHABLE,
                format!(
                    "switched to the relay: spoke {} could not reach the lead broker directly ({why}), and the lead broker saw none of its brokers online",
                    ask.spoke
                ),
            );
        }
        return chosen(
            kept.relay,
            kept.reason.unwrap_or(reason::NOT_MEASURED),
            kept.message.map_or_else(
                || format!("{} since it was placed", name(kept.relay)),
                str::to_string,
            ),
        );
    }
    let Some(reach) = ask.reach else {
        return Choice::Undecided(format!(
            "waiting for spoke {} to report how its brokers reach this cluster's nodes (its first report since the hub started)",
            ask.spoke
        ));
    };
    if let Some(relay) = reach.declared {
        return chosen(
            relay,
            reason::SPOKE_DECLARED,
            format!(
                "spoke {}'s owner declared that its brokers {} this cluster's nodes (--root-reach {})",
                ask.spoke,
                if relay { "do not reach" } else { "reach" },
                if relay { "relay" } else { "direct" }
            ),
        );
    }
    if let Some(m) = &reach.measured {
        let how = if m.relay {
            format!("could not connect to {} ({})", m.target, m.error)
        } else {
            format!("connected to {}", m.target)
        };
        return chosen(
            m.relay,
            reason::SPOKE_MEASURED,
            format!("spoke {} {how} from its pod", ask.spoke),
        );
    }
    chosen(
        false,
        reason::NOT_MEASURED,
        format!(
            "spoke {} has not measured whether its brokers reach this cluster's nodes: direct first, the relay if they cannot reach the lead broker",
            ask.spoke
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ask() -> Ask<'static> {
        Ask {
            spoke: "gke",
            can_relay: true,
            ..Ask::default()
        }
    }

    fn path(choice: Choice) -> (bool, String) {
        match choice {
            Choice::Chosen(p) => (p.relay, p.reason),
            Choice::Undecided(why) => panic!("undecided: {why}"),
        }
    }

    const UNKNOWN: Reach = Reach {
        declared: None,
        measured: None,
    };

    #[test]
    fn the_spec_wins_then_what_the_owner_declared_then_what_the_spoke_measured() {
        let declared = Reach {
            declared: Some(true),
            measured: Some(Measured {
                relay: false,
                target: "192.0.2.1:30050".into(),
                error: String::new(),
                at: SystemTime::UNIX_EPOCH,
            }),
        };
        let measured = Reach {
            declared: None,
            ..declared.clone()
        };
        let cases = [
            (Some(false), Some(&declared), (false, reason::SPEC)),
            (Some(true), Some(&UNKNOWN), (true, reason::SPEC)),
            (None, Some(&declared), (true, reason::SPOKE_DECLARED)),
            (None, Some(&measured), (false, reason::SPOKE_MEASURED)),
            (None, Some(&UNKNOWN), (false, reason::NOT_MEASURED)),
        ];
        for (spec, reach, want) in cases {
            let got = path(choose(&Ask {
                spec,
                reach,
                ..ask()
            }));
            assert_eq!(got, (want.0, want.1.to_string()), "{spec:?} {reach:?}");
        }
        // A spoke that measured its connects fail is relayed, and says where it tried.
        let failed = Reach {
            declared: None,
            measured: Some(Measured {
                relay: true,
                target: "192.0.2.1:30050".into(),
                error: "no answer in 3s".into(),
                at: SystemTime::UNIX_EPOCH,
            }),
        };
        let Choice::Chosen(p) = choose(&Ask {
            reach: Some(&failed),
            ..ask()
        }) else {
            panic!("chosen")
        };
        assert!(p.relay);
        assert!(
            p.message.contains("192.0.2.1:30050") && p.message.contains("no answer"),
            "{}",
            p.message
        );
    }

    #[test]
    fn nothing_is_chosen_before_the_spoke_reported_to_this_hub() {
        assert!(matches!(choose(&ask()), Choice::Undecided(m) if m.contains("spoke gke")));
        // Unless the spec says, or the name leaves no other way.
        assert_eq!(
            path(choose(&Ask {
                spec: Some(true),
                ..ask()
            })),
            (true, reason::SPEC.to_string())
        );
        assert_eq!(
            path(choose(&Ask {
                can_relay: false,
                ..ask()
            })),
            (false, reason::CANNOT_RELAY.to_string())
        );
    }

    #[test]
    fn a_kept_path_stays_whatever_the_spoke_now_says() {
        let relay_now = Reach {
            declared: Some(true),
            measured: None,
        };
        for relay in [false, true] {
            let got = choose(&Ask {
                kept: Some(Kept {
                    relay,
                    reason: Some(reason::SPOKE_MEASURED),
                    message: Some("as measured"),
                }),
                reach: Some(&relay_now),
                ..ask()
            });
            assert_eq!(
                got,
                Choice::Chosen(Path {
                    relay,
                    reason: reason::SPOKE_MEASURED.into(),
                    message: "as measured".into()
                })
            );
        }
        // A status from before path choice has no reason: the path stays, said so.
        assert_eq!(
            path(choose(&Ask {
                kept: Some(Kept {
                    relay: false,
                    reason: None,
                    message: None
                }),
                ..ask()
            })),
            (false, reason::NOT_MEASURED.to_string())
        );
    }

    #[test]
    fn a_direct_burst_goes_to_the_relay_only_when_unreachable_and_none_of_it_joined() {
        let direct = Kept {
            relay: false,
            reason: Some(reason::NOT_MEASURED),
            message: None,
        };
        let unreachable = Some("connecting to 192.0.2.1:30050: no answer in 3s");
        let switched = path(choose(&Ask {
            kept: Some(direct.clone()),
            lead_unreachable: unreachable,
            none_joined: true,
            ..ask()
        }));
        assert_eq!(switched, (true, reason::LEAD_UNREACHABLE.to_string()));
        // Some of it joined (or the lead's view was not read): it stays.
        assert_eq!(
            path(choose(&Ask {
                kept: Some(direct.clone()),
                lead_unreachable: unreachable,
                none_joined: false,
                ..ask()
            })),
            (false, reason::NOT_MEASURED.to_string())
        );
        // Reachable: it stays.
        assert_eq!(
            path(choose(&Ask {
                kept: Some(direct),
                none_joined: true,
                ..ask()
            })),
            (false, reason::NOT_MEASURED.to_string())
        );
        // The spec's direct is the author's word: never switched.
        assert_eq!(
            path(choose(&Ask {
                spec: Some(false),
                kept: Some(Kept {
                    relay: false,
                    reason: Some(reason::SPEC),
                    message: None
                }),
                lead_unreachable: unreachable,
                none_joined: true,
                ..ask()
            })),
            (false, reason::SPEC.to_string())
        );
        // A relayed burst is never switched back.
        assert_eq!(
            path(choose(&Ask {
                kept: Some(Kept {
                    relay: true,
                    reason: Some(reason::LEAD_UNREACHABLE),
                    message: None
                }),
                lead_unreachable: unreachable,
                none_joined: true,
                ..ask()
            })),
            (true, reason::LEAD_UNREACHABLE.to_string())
        );
    }
}
