//! What hub and spoke name MiniClusters and their bursts by: [`McKey`] (namespace and
//! name) and [`BurstKey`] (`<namespace>/<name>/<burst>` on the wire). Typed, so that a
//! key is parsed once, where it arrives, rather than split by each reader.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

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

/// One burst of one MiniCluster: the stable key of its assignment,
/// `<namespace>/<name>/<burst>` on the wire (`Assignment.key`, relay metadata, reports).
/// Ordered as its wire form is, so maps keyed by it list bursts as they always have.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct BurstKey {
    /// The MiniCluster's namespace.
    pub namespace: String,
    /// The MiniCluster's name.
    pub name: String,
    /// The burst's name (`spec.bursting.clusters[].name`).
    pub burst: String,
}

/// Why a string is not a burst key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("burst key {key:?}: {rule}")]
pub struct BurstKeyError {
    /// The string read.
    pub key: String,
    /// The rule it breaks.
    pub rule: &'static str,
}

impl BurstKey {
    /// Burst `burst` of MiniCluster `name` in `namespace`.
    pub fn new(
        namespace: impl Into<String>,
        name: impl Into<String>,
        burst: impl Into<String>,
    ) -> Self {
        BurstKey {
            namespace: namespace.into(),
            name: name.into(),
            burst: burst.into(),
        }
    }

    /// The MiniCluster the burst is of.
    pub fn minicluster(&self) -> McKey {
        McKey::new(&self.namespace, &self.name)
    }

    /// Whether the burst is of MiniCluster `mc`.
    pub fn is_of(&self, mc: &McKey) -> bool {
        self.namespace == mc.namespace && self.name == mc.name
    }

    /// The bytes of the wire form, without building it.
    fn wire_bytes(&self) -> impl Iterator<Item = u8> + '_ {
        self.namespace
            .bytes()
            .chain(*b"/")
            .chain(self.name.bytes())
            .chain(*b"/")
            .chain(self.burst.bytes())
    }
}

/// `<namespace>/<name>/<burst>`.
impl fmt::Display for BurstKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}/{}", self.namespace, self.name, self.burst)
    }
}

impl Ord for BurstKey {
    fn cmp(&self, other: &Self) -> Ordering {
        self.wire_bytes().cmp(other.wire_bytes())
    }
}

impl PartialOrd for BurstKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// A key as the hub makes it: three parts, each a name Kubernetes allows (lowercase
/// letters, digits, `-` and `.`, starting and ending with a letter or digit).
impl FromStr for BurstKey {
    type Err = BurstKeyError;

    fn from_str(key: &str) -> Result<Self, Self::Err> {
        let refuse = |rule| BurstKeyError {
            key: key.to_string(),
            rule,
        };
        let parts: Vec<&str> = key.split('/').collect();
        let [namespace, name, burst] = parts[..] else {
            return Err(refuse("not three parts <namespace>/<name>/<burst>"));
        };
        if [namespace, name, burst].iter().any(|p| p.is_empty()) {
            return Err(refuse("a part is empty"));
        }
        if ![namespace, name, burst].iter().all(|p| k8s_name(p)) {
            return Err(refuse(
                "a part is not a Kubernetes name (lowercase letters, digits, '-' and '.')",
            ));
        }
        Ok(BurstKey::new(namespace, name, burst))
    }
}

/// Lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit:
/// what a namespace, a MiniCluster's name and a burst's name all are.
fn k8s_name(part: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    part.starts_with(alnum)
        && part.ends_with(alnum)
        && part.chars().all(|c| alnum(c) || c == '-' || c == '.')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minicluster_shows_as_namespace_slash_name_and_sorts_by_namespace_first() {
        assert_eq!(McKey::new("hpc", "m").to_string(), "hpc/m");
        assert!(McKey::new("a", "z") < McKey::new("b", "a"));
    }

    #[test]
    fn a_burst_key_reads_back_as_written_and_sorts_as_its_wire_form() {
        let key: BurstKey = "hpc/m-1/gke.east".parse().unwrap();
        assert_eq!(key, BurstKey::new("hpc", "m-1", "gke.east"));
        assert_eq!(key.to_string(), "hpc/m-1/gke.east");
        assert_eq!(key.minicluster(), McKey::new("hpc", "m-1"));
        assert!(key.is_of(&McKey::new("hpc", "m-1")));
        // As strings "a-b/…" sorts before "a/…" ('-' < '/'): the key sorts the same.
        let (dash, plain) = (BurstKey::new("a-b", "m", "x"), BurstKey::new("a", "m", "x"));
        assert_eq!(dash.cmp(&plain), dash.to_string().cmp(&plain.to_string()));
    }

    #[test]
    fn a_burst_key_is_three_kubernetes_names() {
        for bad in [
            "", "a/b", "a/b/c/d", "a//c", "/b/c", "a/b/", "A/b/c", "a/b/-c", "a b/c/d",
        ] {
            assert!(bad.parse::<BurstKey>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "a/b".parse::<BurstKey>().unwrap_err().to_string(),
            "burst key \"a/b\": not three parts <namespace>/<name>/<burst>"
        );
    }
}
