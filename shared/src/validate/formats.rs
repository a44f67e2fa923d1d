//! Formats of single values (DNS labels, host addresses, durations, quantities), shared
//! by the rules and by callers outside validation.

/// Whether `s` is a DNS-1123 label: at most 63 lowercase alphanumerics or `-`, starting
/// and ending with an alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Whether `s` is a DNS-1123 subdomain (the name of most Kubernetes objects): at most 253
/// characters of dot-separated DNS labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// Whether `s` is a Kubernetes label key: an optional DNS subdomain prefix and `/`, then a
/// name of at most 63 alphanumerics, `-`, `_` or `.`, starting and ending with an
/// alphanumeric.
pub fn is_label_key(s: &str) -> bool {
    let (prefix, name) = match s.rsplit_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, s),
    };
    prefix.is_none_or(is_dns_subdomain) && !name.is_empty() && is_label_value(name)
}

/// Whether `s` is a Kubernetes label value: empty, or at most 63 alphanumerics, `-`, `_`
/// or `.`, starting and ending with an alphanumeric.
pub fn is_label_value(s: &str) -> bool {
    let b = s.as_bytes();
    b.is_empty()
        || (b.len() <= 63
            && b.iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
            && b[0].is_ascii_alphanumeric()
            && b[b.len() - 1].is_ascii_alphanumeric())
}

/// Whether `s` is an IP address or a DNS name (DNS-1123 subdomain, upper case allowed).
pub fn is_host_address(s: &str) -> bool {
    if s.parse::<std::net::IpAddr>().is_ok() {
        return true;
    }
    let lower = s.to_ascii_lowercase();
    lower.len() <= 253 && lower.split('.').all(is_dns_label)
}

/// Whether `s` is a Flux Standard Duration: a non-negative number with an optional unit
/// `ms`, `s`, `m`, `h` or `d`.
pub fn is_fsd(s: &str) -> bool {
    let number = ["ms", "s", "m", "h", "d"]
        .iter()
        .find_map(|unit| s.strip_suffix(unit))
        .unwrap_or(s);
    let mut parts = number.splitn(2, '.');
    let int = parts.next().unwrap_or("");
    let frac = parts.next();
    !int.is_empty()
        && int.bytes().all(|c| c.is_ascii_digit())
        && frac.is_none_or(|f| !f.is_empty() && f.bytes().all(|c| c.is_ascii_digit()))
}

/// A ConfigMap named on a command line as `NAME` (in `default_namespace`) or
/// `NAMESPACE/NAME`, as (namespace, name); `None` when either part is not a valid name.
pub fn configmap_location(value: &str, default_namespace: &str) -> Option<(String, String)> {
    let (namespace, name) = value.split_once('/').unwrap_or((default_namespace, value));
    (is_dns_label(namespace) && is_dns_subdomain(name))
        .then(|| (namespace.to_string(), name.to_string()))
}
