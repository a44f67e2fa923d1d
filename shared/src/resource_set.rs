//! The resource set R (RFC 20, version 1) that declares an instance's ranks and cores to
//! Flux, in the order of [`rank_order`](crate::rank_order).

/// The resource set R (version 1) for `ranks` hosts named by `hostlist` (in rank order:
/// rank `i` is the `i`-th host), each with `cores` cores. The planner computes it once
/// per instance (`Plan::resources`); it is written by hand (fixed key order, no
/// intermediate JSON tree) because it is on the planner's hot path.
pub fn render(ranks: usize, cores: i32, hostlist: &str) -> String {
    let cores = usize::try_from(cores.max(1)).unwrap_or(1);
    let mut out = String::with_capacity(hostlist.len() + 128);
    out.push_str("{\"version\":1,\"execution\":{\"R_lite\":[{\"rank\":\"");
    out.push_str(&idset(ranks));
    out.push_str("\",\"children\":{\"core\":\"");
    out.push_str(&idset(cores));
    out.push_str("\"}}],\"nodelist\":[");
    // A hostlist is plain printable ASCII without quotes, but encode it properly anyway.
    out.push_str(&serde_json::Value::from(hostlist).to_string());
    out.push_str("],\"starttime\":0.0,\"expiration\":0.0}}");
    out
}

/// The idset `0-(n-1)` (`0` for one element).
fn idset(n: usize) -> String {
    match n {
        0 | 1 => "0".to_string(),
        n => format!("0-{}", n - 1),
    }
}
