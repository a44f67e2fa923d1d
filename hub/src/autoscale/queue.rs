//! Reading the queue reporter of a MiniCluster's lead broker: where it listens, the
//! bearer token it expects, and one `GET /v1/queue` over plain HTTP/1.1 (the document is
//! small, read-only and answered once per poll; no client library needed).

use std::time::Duration;

use flux_shared::api::defaults::REPORTER_PORT;
use flux_shared::plan::Plan;
use flux_shared::scripts::REPORTER_TOKEN_CONTEXT;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::decide::Queue;

/// Annotation on a MiniCluster naming the `host:port` its queue reporter is read at,
/// instead of the lead broker pod's cluster DNS name: for a hub that cannot reach the pod
/// network (running outside the cluster, with `kubectl port-forward pod/<name>-0-... 8051`).
pub const REPORTER_ANNOTATION: &str = "flux-framework.org/queue-reporter";

/// The most a reporter's answer may hold (hundreds of hosts and pending jobs fit).
const MAX_ANSWER: usize = 4 << 20;

/// Why the queue could not be read.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    /// Connecting, sending or reading failed, or took too long.
    #[error("cannot reach the queue reporter at {address}: {reason}")]
    Unreachable {
        /// `host:port`.
        address: String,
        /// What failed.
        reason: String,
    },
    /// The reporter answered with an error status.
    #[error("the queue reporter at {address} answered {status}: {body}")]
    Status {
        /// `host:port`.
        address: String,
        /// HTTP status code.
        status: u16,
        /// Its body, shortened.
        body: String,
    },
    /// The answer is not a queue document.
    #[error("the queue reporter at {address} answered something else than a queue: {reason}")]
    Malformed {
        /// `host:port`.
        address: String,
        /// What is wrong.
        reason: String,
    },
}

/// The bearer token of the reporter of the instance holding `curve_cert` (the CURVE
/// certificate's text, as stored in its Secret).
pub fn token(curve_cert: &str) -> String {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(REPORTER_TOKEN_CONTEXT);
    ctx.update(curve_cert.as_bytes());
    ctx.finish()
        .as_ref()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `host:port` of the reporter of `plan`'s lead broker: its pod's DNS name under the
/// headless Service (the hub runs in the cluster, as on kind and GKE).
pub fn address(plan: &Plan) -> String {
    let lead = plan.hosts.first().map_or("", String::as_str);
    format!(
        "{lead}.{}.{}.svc.cluster.local:{REPORTER_PORT}",
        plan.spec.headless_name(&plan.name),
        plan.namespace
    )
}

/// Where the reporter listens on a lead pod at `ip` (`host:port`; an IPv6 address in
/// brackets).
pub fn address_at(ip: &str) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{REPORTER_PORT}")
    } else {
        format!("{ip}:{REPORTER_PORT}")
    }
}

/// `GET /v1/queue` at `address` with `token`, within `timeout`.
pub async fn fetch(address: &str, token: &str, timeout: Duration) -> Result<Queue, QueueError> {
    let unreachable = |reason: String| QueueError::Unreachable {
        address: address.to_string(),
        reason,
    };
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        let host = address.rsplit_once(':').map_or(address, |(h, _)| h);
        let request = format!(
            "GET /v1/queue HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MAX_ANSWER as u64 + 1)
            .read_to_end(&mut answer)
            .await?;
        Ok::<_, std::io::Error>(answer)
    };
    let answer = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| unreachable(format!("no answer within {timeout:?}")))?
        .map_err(|e| unreachable(e.to_string()))?;
    parse(address, &answer)
}

/// The queue in an HTTP/1.x answer (`Connection: close`, so the body runs to the end).
pub fn parse(address: &str, answer: &[u8]) -> Result<Queue, QueueError> {
    let malformed = |reason: String| QueueError::Malformed {
        address: address.to_string(),
        reason,
    };
    if answer.len() > MAX_ANSWER {
        return Err(malformed(format!("more than {MAX_ANSWER} bytes")));
    }
    let split = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| malformed("no end of the HTTP header".into()))?;
    let head = String::from_utf8_lossy(&answer[..split]);
    let body = &answer[split + 4..];
    let status: u16 = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| malformed("no HTTP status line".into()))?;
    if status != 200 {
        let text = String::from_utf8_lossy(body);
        return Err(QueueError::Status {
            address: address.to_string(),
            status,
            body: text.chars().take(200).collect(),
        });
    }
    let queue: Queue = serde_json::from_slice(body).map_err(|e| malformed(e.to_string()))?;
    if queue.version != 1 {
        return Err(malformed(format!(
            "document version {} (this hub reads 1)",
            queue.version
        )));
    }
    Ok(queue)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pod_address_takes_the_reporter_port() {
        assert_eq!(super::address_at("10.1.2.3"), "10.1.2.3:8051");
        assert_eq!(super::address_at("fd00::3"), "[fd00::3]:8051");
    }

    use super::*;

    #[test]
    fn the_token_is_the_hash_the_reporter_computes() {
        // python3: hashlib.sha256(b"flux-operator reporter\0" + b"cert").hexdigest()
        assert_eq!(
            token("cert"),
            "d2536e4fd7b9dc0e6f33af9f8351897a3022ec6bd731e853977d1d927d319438"
        );
        assert_eq!(token("cert").len(), 64);
        assert_ne!(token("cert"), token("cert2"));
    }

    #[test]
    fn answers_parse_or_say_why_not() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"version\": 1, \"now\": 5.0, \"hosts\": [{\"host\": \"m-0\", \"rank\": 0, \"online\": true, \"drained\": false, \"allocated\": true}], \"pending\": [{\"id\": 7, \"nodes\": 3, \"submitted\": 1.5}]}";
        let q = parse("a:1", ok).expect("parses");
        assert_eq!((q.hosts.len(), q.pending[0].nodes), (1, 3));
        let denied = b"HTTP/1.0 401 Unauthorized\r\n\r\n{\"error\": \"a bearer token is needed\"}";
        assert!(matches!(
            parse("a:1", denied),
            Err(QueueError::Status { status: 401, .. })
        ));
        for bad in [
            &b"garbage"[..],
            b"HTTP/1.0 200 OK\r\n\r\nnot json",
            b"HTTP/1.0 200 OK\r\n\r\n{\"version\": 2, \"now\": 1, \"hosts\": [], \"pending\": []}",
        ] {
            assert!(
                matches!(parse("a:1", bad), Err(QueueError::Malformed { .. })),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
