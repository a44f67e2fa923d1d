//! The shipped alerting rules in a real Prometheus: it scrapes the hub and the spoke of a
//! running federation, and `FluxSpokeGone` fires for the spoke once it is stopped, and not
//! before. The rules are `deploy/prometheus/flux-rules.yaml` with every `for:` cut to a few
//! seconds (the expressions as shipped); Prometheus is Debian's, which `scripts/test.sh`
//! unpacks into `.venv` for promtool (`PROMETHEUS` names another binary).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use serde_json::Value;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support;
use crate::support::{Federation, Probe, TestEnv, secs};

/// How long each alert's condition must hold here (the shipped rules wait minutes).
const FOR: &str = "3s";

#[tokio::test]
#[ignore = "needs two clusters: KUBECONFIG and SPOKE_KUBECONFIG (scripts/e2e.sh), and Prometheus"]
async fn a_real_prometheus_raises_flux_spoke_gone_when_the_spoke_stops() {
    support::run_federated("burst-alert", "e2e-spoke", alerting).await;
}

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Prometheus server binary.
fn prometheus() -> Result<PathBuf> {
    let binary = std::env::var_os("PROMETHEUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repository().join(".venv/prometheus/root/usr/bin/prometheus"));
    ensure!(
        binary.is_file(),
        "no Prometheus at {}: scripts/test.sh unpacks Debian's prometheus package into .venv (or set PROMETHEUS)",
        binary.display()
    );
    Ok(binary)
}

/// The shipped rules, each `for:` cut to [`FOR`].
fn rules() -> Result<String> {
    let path = repository().join("deploy/prometheus/flux-rules.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(text
        .lines()
        .map(|line| match line.trim_start().strip_prefix("for: ") {
            Some(_) => format!(
                "{}for: {FOR}",
                &line[..line.len() - line.trim_start().len()]
            ),
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The body of `GET path` from Prometheus's HTTP API (HTTP/1.0: no chunks to undo).
async fn get(addr: SocketAddr, path: &str) -> Result<Value> {
    let mut tcp = tokio::time::timeout(secs(5), tokio::net::TcpStream::connect(addr)).await??;
    tcp.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .await?;
    let mut response = Vec::new();
    tokio::time::timeout(secs(10), tcp.read_to_end(&mut response)).await??;
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").context("an HTTP response")?;
    ensure!(
        head.starts_with("HTTP/1.0 200") || head.starts_with("HTTP/1.1 200"),
        "{head}"
    );
    Ok(serde_json::from_str(body)?)
}

/// The alerts named `name` firing now, as their label sets.
async fn firing(addr: SocketAddr, name: &str) -> Result<Vec<Value>> {
    let alerts = get(addr, "/api/v1/alerts").await?;
    Ok(alerts["data"]["alerts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["labels"]["alertname"] == name && a["state"] == "firing")
        .map(|a| a["labels"].clone())
        .collect())
}

async fn alerting(env: &TestEnv, fed: &Federation) -> Result<()> {
    let binary = prometheus()?;
    let spoke = fed.spoke();
    let hub = env
        .hub_metrics_addr()
        .context("the hub's metrics address")?;
    let spoke_metrics = env
        .spoke_metrics_addr_of(spoke)?
        .context("the spoke's metrics address")?;
    let dir = support::log_file(&format!("{}-prometheus", env.ns))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let rules_file = dir.join("rules.yaml");
    std::fs::write(&rules_file, rules()?)?;
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: ['{}']\nscrape_configs:\n- job_name: flux-hub\n  static_configs: [{{targets: ['{hub}']}}]\n- job_name: flux-spoke\n  static_configs: [{{targets: ['{spoke_metrics}']}}]\n",
            rules_file.display()
        ),
    )?;
    let addr = SocketAddr::from(([127, 0, 0, 1], support::free_port()?));
    let log = std::fs::File::create(dir.join("prometheus.log"))?;
    let _server = tokio::process::Command::new(&binary)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;

    // Both scraped, the spoke connected, and no spoke gone.
    let connected =
        format!("/api/v1/query?query=flux_hub_spoke_connected%7Bspoke%3D%22{spoke}%22%7D");
    env.eventually(
        "Prometheus to scrape the hub and the spoke",
        secs(60),
        async || {
            let up = get(addr, "/api/v1/query?query=up").await;
            let seen = get(addr, &connected).await;
            Ok(match (up, seen) {
                (Ok(up), Ok(seen)) => {
                    let targets = up["data"]["result"].as_array().cloned().unwrap_or_default();
                    let all_up = targets.len() == 2 && targets.iter().all(|t| t["value"][1] == "1");
                    let value = seen["data"]["result"][0]["value"][1].clone();
                    if all_up && value == "1" {
                        Probe::Done(())
                    } else {
                        Probe::Waiting(format!("up: {targets:?}; connected: {value}"))
                    }
                }
                (up, seen) => Probe::Waiting(format!("{up:?} {seen:?}")),
            })
        },
    )
    .await?;
    // Longer than the cut `for:` and a few evaluations: a healthy spoke raises nothing.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let early = firing(addr, "FluxSpokeGone").await?;
    ensure!(
        early.is_empty(),
        "FluxSpokeGone while the spoke runs: {early:?}"
    );

    env.stop_spoke();
    let stopped = std::time::Instant::now();
    let alert = env
        .eventually(
            "FluxSpokeGone to fire for the stopped spoke",
            secs(60),
            async || {
                let now = firing(addr, "FluxSpokeGone").await?;
                Ok(match now.iter().find(|l| l["spoke"] == spoke) {
                    Some(labels) => Probe::Done(labels.clone()),
                    None => Probe::Waiting(format!("firing: {now:?}")),
                })
            },
        )
        .await?;
    ensure!(alert["severity"] == "warning", "{alert}");
    eprintln!(
        "{}: FluxSpokeGone fired {:.1} s after the spoke stopped (its `for:` cut to {FOR})",
        env.ns,
        stopped.elapsed().as_secs_f64()
    );
    Ok(())
}
