//! How a spoke's brokers reach the root cluster's nodes, as the spoke's owner declares it
//! (`flux-spoke run --root-reach`, which `flux-hub join --root-reach` sets): the words of
//! the flag and of the spoke's settings for the protocol's [`RootPath`].

use super::proto::RootPath;

/// The brokers reach the root's nodes: they connect to the lead broker's NodePort.
pub const DIRECT: &str = "direct";
/// They do not: they are relayed through their spoke and the hub.
pub const RELAY: &str = "relay";

/// Parses the flag's value, [`DIRECT`] or [`RELAY`]; empty (a setting left blank) is
/// [`RootPath::Unspecified`], nothing declared.
pub fn parse_flag(value: &str) -> Result<RootPath, String> {
    match value.trim() {
        DIRECT => Ok(RootPath::Direct),
        RELAY => Ok(RootPath::Relay),
        "" => Ok(RootPath::Unspecified),
        other => Err(format!("{other:?}: expected {DIRECT} or {RELAY}")),
    }
}

/// The flag's value for `path`; `None` for [`RootPath::Unspecified`] (nothing declared).
pub fn flag_value(path: RootPath) -> Option<&'static str> {
    match path {
        RootPath::Direct => Some(DIRECT),
        RootPath::Relay => Some(RELAY),
        RootPath::Unspecified => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_names_each_path_and_nothing_else() {
        for path in [RootPath::Direct, RootPath::Relay] {
            let word = flag_value(path).expect("a word");
            assert_eq!(parse_flag(word), Ok(path));
        }
        assert_eq!(flag_value(RootPath::Unspecified), None);
        assert_eq!(parse_flag(""), Ok(RootPath::Unspecified), "left blank");
        for bad in ["Direct", "nodeport", "unspecified"] {
            let e = parse_flag(bad).expect_err(bad);
            assert!(e.contains("expected direct or relay"), "{e}");
        }
    }
}
