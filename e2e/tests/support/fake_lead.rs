//! A stand-in for a bursting MiniCluster's lead broker reporter, for the tests whose nodes
//! run no Flux (hollow nodes): it answers the hub's `GET /v1/queue` with every host of the
//! instance online, so a burst whose pods are ready shows Running as with real brokers.
//! The hub reads it at the address the `flux-framework.org/queue-reporter` annotation
//! names (honoured with `--allow-queue-reporter-annotation`, which federated tests pass).
//! Tests with real Flux point the annotation at the real reporter instead.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// The annotation naming where the hub reads a MiniCluster's reporter.
pub const REPORTER_ANNOTATION: &str = "flux-framework.org/queue-reporter";

/// One fake reporter; stops when dropped.
pub struct FakeLead {
    /// `host:port` it serves.
    pub address: String,
    hosts: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeLead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeLead {
    /// Serves `hosts` (the instance's, in rank order) all online, on a free loopback port.
    pub async fn start(hosts: Vec<String>) -> Result<FakeLead> {
        let listener = TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
            .await
            .context("binding a fake lead reporter")?;
        let address = listener.local_addr()?.to_string();
        let hosts = Arc::new(Mutex::new(hosts));
        let served = hosts.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    return;
                };
                let body = document(&served.lock().unwrap_or_else(|e| e.into_inner()));
                tokio::spawn(async move {
                    // One request per connection, as the hub sends it; its head is small.
                    let mut head = vec![0u8; 8192];
                    let _ = tokio::time::timeout(
                        std::time::Duration::from_secs(5),
                        stream.read(&mut head),
                    )
                    .await;
                    let body = body.to_string();
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(answer.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        Ok(FakeLead {
            address,
            hosts,
            task,
        })
    }

    /// Serves `hosts` from now on (the MiniCluster was applied again).
    pub fn set_hosts(&self, hosts: Vec<String>) {
        *self.hosts.lock().unwrap_or_else(|e| e.into_inner()) = hosts;
    }
}

/// The reporter's document with every one of `hosts` online and nothing pending.
fn document(hosts: &[String]) -> Value {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    json!({
        "version": 1,
        "now": now,
        "hosts": hosts.iter().enumerate().map(|(rank, host)| json!({
            "host": host, "rank": rank, "online": true, "drained": false, "allocated": false,
        })).collect::<Vec<_>>(),
        "pending": [],
    })
}

/// The hosts of MiniCluster `doc` (in rank order), when it is a root that declares bursts
/// and names no reporter of its own; `None` otherwise.
pub fn bursting_hosts(doc: &Value) -> Option<Vec<String>> {
    if doc["metadata"]["annotations"]
        .get(REPORTER_ANNOTATION)
        .is_some()
    {
        return None;
    }
    let mc: flux_shared::api::MiniCluster = serde_json::from_value(doc.clone()).ok()?;
    if !mc.spec.is_bursting_root() {
        return None;
    }
    Some(flux_shared::plan::Plan::new(&mc).ok()?.hosts)
}
