//! What hub and spoke name MiniClusters and their bursts by: [`McKey`] (namespace and
//! name). Typed, so that a MiniCluster is one value rather than a pair of strings whose
//! order each caller must remember.

use std::fmt;

/// A MiniCluster, by namespace and name. Ordered by namespace, then name.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct McKey {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl McKey {
    /// The MiniCluster `name` in `namespace`.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        McKey {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

/// `<namespace>/<name>`.
impl fmt::Display for McKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// As the pair the hub controller's per-MiniCluster maps are still keyed by.
impl From<McKey> for (String, String) {
    fn from(mc: McKey) -> Self {
        (mc.namespace, mc.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minicluster_shows_as_namespace_slash_name_and_sorts_by_namespace_first() {
        assert_eq!(McKey::new("hpc", "m").to_string(), "hpc/m");
        assert!(McKey::new("a", "z") < McKey::new("b", "a"));
    }
}
