//! `flux_hub::ops::routes`: /metrics, /healthz, /readyz, 404, and graceful shutdown, over
//! real TCP connections.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use flux_hub::ops::metrics::Metrics;
use flux_hub::ops::routes;
use flux_shared::ops::health::Health;
use flux_shared::ops::server::{OPENMETRICS_CONTENT_TYPE, SHUTDOWN_GRACE, bind};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// A parsed HTTP/1.1 response.
#[derive(Debug)]
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

// tokio's `io-util` feature is off in this crate: read and write with `try_*`.

/// Reads what is available, waiting for something; 0 at end of stream.
async fn read_some(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            other => return other,
        }
    }
}

async fn write_all(stream: &TcpStream, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        stream.writable().await?;
        match stream.try_write(data) {
            Ok(n) => data = &data[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads until the peer closes the connection (or fails it).
async fn read_to_end(stream: &TcpStream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n @ 1..) = read_some(stream, &mut chunk).await {
        out.extend_from_slice(&chunk[..n]);
    }
    out
}

/// Reads one response with a `content-length` body off `stream`.
async fn read_reply(stream: &TcpStream) -> Reply {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let mut chunk = [0u8; 4096];
        let n = read_some(stream, &mut chunk).await.expect("read");
        assert!(n > 0, "connection closed mid-response: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8(buf[..head_end].to_vec()).expect("utf-8 head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().expect("status line");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad status line {status_line:?}"));
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(':').expect("header");
            (n.trim().to_owned(), v.trim().to_owned())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse().expect("length"))
        .expect("content-length");
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < length {
        let mut chunk = [0u8; 4096];
        let n = read_some(stream, &mut chunk).await.expect("read");
        assert!(n > 0, "connection closed mid-body");
        body.extend_from_slice(&chunk[..n]);
    }
    Reply {
        status,
        headers,
        body: String::from_utf8(body).expect("utf-8 body"),
    }
}

/// One request on its own connection.
async fn request(addr: SocketAddr, method: &str, path: &str) -> Reply {
    let stream = TcpStream::connect(addr).await.expect("connect");
    write_all(
        &stream,
        format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .expect("write");
    read_reply(&stream).await
}

async fn get(addr: SocketAddr, path: &str) -> Reply {
    request(addr, "GET", path).await
}

struct Running {
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

async fn start() -> Running {
    let listener = bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::new());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(routes::serve_listener(
        listener,
        Arc::clone(&metrics),
        Arc::clone(&health),
        async move {
            let _ = stopped.await;
        },
    ));
    Running {
        addr,
        metrics,
        health,
        stop,
        task,
    }
}

impl Running {
    /// Triggers shutdown and checks the server stops well before the grace period ends.
    async fn shut_down(self) -> SocketAddr {
        self.stop.send(()).expect("server still running");
        tokio::time::timeout(SHUTDOWN_GRACE / 2, self.task)
            .await
            .expect("server stops promptly")
            .expect("server task")
            .expect("server result");
        self.addr
    }
}

#[tokio::test]
async fn metrics_endpoint_serves_openmetrics() {
    let s = start().await;
    drop(s.metrics.reconcile_timer());
    s.metrics.api_write("Job", "create");
    let reply = get(s.addr, "/metrics").await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some(OPENMETRICS_CONTENT_TYPE));
    assert_eq!(
        OPENMETRICS_CONTENT_TYPE,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(
        reply.body.contains("flux_hub_reconciles_total 1\n"),
        "{}",
        reply.body
    );
    assert!(
        reply
            .body
            .contains("flux_hub_api_writes_total{kind=\"Job\",verb=\"create\"} 1\n"),
        "{}",
        reply.body
    );
    assert!(reply.body.ends_with("# EOF\n"));
    s.shut_down().await;
}

#[tokio::test]
async fn health_and_readiness() {
    let s = start().await;
    let healthz = get(s.addr, "/healthz").await;
    assert_eq!((healthz.status, healthz.body.as_str()), (200, "ok"));

    let readyz = get(s.addr, "/readyz").await;
    assert_eq!((readyz.status, readyz.body.as_str()), (503, "not ready"));
    s.health.set_ready(true);
    let readyz = get(s.addr, "/readyz").await;
    assert_eq!((readyz.status, readyz.body.as_str()), (200, "ok"));
    s.health.set_ready(false);
    assert_eq!(get(s.addr, "/readyz").await.status, 503);

    s.health.set_alive(false);
    let healthz = get(s.addr, "/healthz").await;
    assert_eq!((healthz.status, healthz.body.as_str()), (503, "not alive"));
    s.shut_down().await;
}

#[tokio::test]
async fn unknown_paths_are_404() {
    let s = start().await;
    for path in ["/", "/nope", "/metrics/extra", "/healthz/", "/READYZ"] {
        let reply = get(s.addr, path).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            (404, "not found"),
            "{path}"
        );
    }
    // Known paths answer GET only.
    assert_eq!(request(s.addr, "POST", "/metrics").await.status, 405);
    s.shut_down().await;
}

#[tokio::test]
async fn shutdown_stops_the_server_and_closes_the_port() {
    let s = start().await;
    assert_eq!(get(s.addr, "/healthz").await.status, 200);
    let addr = s.shut_down().await;
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "the listener is closed after shutdown"
    );
}

#[tokio::test]
async fn shutdown_closes_idle_keep_alive_connections() {
    let s = start().await;
    // A keep-alive connection that answered one request and stays open.
    let kept = TcpStream::connect(s.addr).await.expect("connect");
    write_all(&kept, b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(read_reply(&kept).await.status, 200);
    // And a connection that never sends a request.
    let _silent = TcpStream::connect(s.addr).await.expect("connect");
    tokio::task::yield_now().await;

    s.shut_down().await;
    let rest = tokio::time::timeout(Duration::from_secs(1), read_to_end(&kept))
        .await
        .expect("the server closes the kept connection");
    assert!(
        rest.is_empty(),
        "nothing more on the kept connection: {rest:?}"
    );
}

#[tokio::test]
async fn serve_binds_and_reports_bind_errors() {
    // Hold a port so that `serve` cannot bind it.
    let taken = bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
    let addr = taken.local_addr().expect("addr");
    let result = routes::serve(
        addr,
        Arc::new(Metrics::new()),
        Arc::new(Health::new()),
        std::future::pending(),
    )
    .await;
    assert_eq!(
        result.expect_err("address in use").kind(),
        std::io::ErrorKind::AddrInUse
    );
}

#[tokio::test]
async fn serve_runs_until_shutdown() {
    // Find a free port, release it, and let `serve` bind it.
    let addr = {
        let probe = bind(([127, 0, 0, 1], 0).into()).await.expect("bind");
        probe.local_addr().expect("addr")
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(routes::serve(
        addr,
        Arc::new(Metrics::new()),
        Arc::new(Health::new()),
        async move {
            let _ = stopped.await;
        },
    ));
    let mut reply = None;
    for _ in 0..50 {
        if TcpStream::connect(addr).await.is_ok() {
            reply = Some(get(addr, "/healthz").await);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(reply.expect("server up").status, 200);
    stop.send(()).expect("running");
    tokio::time::timeout(Duration::from_secs(2), task)
        .await
        .expect("stops")
        .expect("task")
        .expect("result");
}

#[tokio::test]
async fn shutdown_does_not_wait_forever_for_a_stalled_request() {
    let s = start().await;
    // Half a request, never finished.
    let stalled = TcpStream::connect(s.addr).await.expect("connect");
    write_all(&stalled, b"GET /metrics HTTP/1.1\r\nHost: loc")
        .await
        .expect("write");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let began = std::time::Instant::now();
    s.stop.send(()).expect("running");
    tokio::time::timeout(SHUTDOWN_GRACE * 2, s.task)
        .await
        .expect("server stops within the grace period")
        .expect("task")
        .expect("result");
    // hyper waits for the stalled request; the grace period bounds that wait.
    let waited = began.elapsed();
    assert!(
        (SHUTDOWN_GRACE..SHUTDOWN_GRACE + Duration::from_secs(1)).contains(&waited),
        "{waited:?}"
    );
}
