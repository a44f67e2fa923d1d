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

/// Whether `s` is a Kubernetes resource quantity (`64Gi`, `500M`, `1.5`, `100m`, `1e3`).
pub fn is_quantity(s: &str) -> bool {
    let s = s.strip_prefix(['+', '-']).unwrap_or(s);
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(digits_end);
    let valid_number = !number.is_empty() && number != "." && number.matches('.').count() <= 1;
    let valid_suffix = matches!(
        suffix,
        "" | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
            | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
    ) || suffix.strip_prefix(['e', 'E']).is_some_and(|exp| {
        let exp = exp.strip_prefix(['+', '-']).unwrap_or(exp);
        !exp.is_empty() && exp.bytes().all(|c| c.is_ascii_digit())
    });
    valid_number && valid_suffix
}
