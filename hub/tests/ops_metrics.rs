//! `flux_hub::ops::metrics`: every metric is encoded, in OpenMetrics text, after use.

use std::sync::Arc;
use std::time::Duration;

use flux_hub::ops::metrics::Metrics;

#[test]
fn encode_contains_every_metric_after_use() {
    let metrics = Metrics::new();
    {
        let _timer = metrics.reconcile_timer();
        std::thread::sleep(Duration::from_millis(5));
    }
    metrics.reconcile_failed("apply", "api");
    metrics.set_objects_managed(42);
    metrics.api_write("Job", "create");
    metrics.api_write("Job", "create");
    metrics.api_write("Service", "patch");
    metrics.set_leader(true);

    let text = metrics.encode();
    for line in [
        "# TYPE flux_hub_reconciles counter",
        "flux_hub_reconciles_total 1",
        "# TYPE flux_hub_reconcile_errors counter",
        "flux_hub_reconcile_errors_total{stage=\"apply\",kind=\"api\"} 1",
        "# TYPE flux_hub_reconcile_duration_seconds histogram",
        "# UNIT flux_hub_reconcile_duration_seconds seconds",
        "flux_hub_reconcile_duration_seconds_count 1",
        "flux_hub_reconcile_duration_seconds_bucket{le=\"0.001\"} 0",
        "flux_hub_reconcile_duration_seconds_bucket{le=\"60.0\"} 1",
        "flux_hub_reconcile_duration_seconds_bucket{le=\"+Inf\"} 1",
        "# TYPE flux_hub_objects_managed gauge",
        "flux_hub_objects_managed 42",
        "# TYPE flux_hub_api_writes counter",
        "flux_hub_api_writes_total{kind=\"Job\",verb=\"create\"} 2",
        "flux_hub_api_writes_total{kind=\"Service\",verb=\"patch\"} 1",
        "# TYPE flux_hub_leader gauge",
        "flux_hub_leader 1",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing line {line:?} in:\n{text}"
        );
    }
    assert!(text.ends_with("# EOF\n"), "{text}");

    let sum: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("flux_hub_reconcile_duration_seconds_sum "))
        .and_then(|v| v.parse().ok())
        .expect("histogram sum");
    assert!((0.005..10.0).contains(&sum), "{sum}");

    metrics.set_leader(false);
    assert!(metrics.encode().lines().any(|l| l == "flux_hub_leader 0"));
}

#[test]
fn fresh_metrics_encode_the_unlabelled_metrics_at_zero() {
    let text = Metrics::default().encode();
    for line in [
        "flux_hub_reconciles_total 0",
        "flux_hub_reconcile_duration_seconds_count 0",
        "flux_hub_objects_managed 0",
        "flux_hub_leader 0",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    // Label families appear with their first series (prometheus-client omits empty ones).
    assert!(!text.contains("flux_hub_reconcile_errors"), "{text}");
    assert!(!text.contains("flux_hub_api_writes"), "{text}");
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn shared_across_threads() {
    let metrics = Arc::new(Metrics::new());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let metrics = Arc::clone(&metrics);
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let _timer = metrics.reconcile_timer();
                    metrics.api_write("Pod", "create");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let text = metrics.encode();
    assert!(text.contains("flux_hub_reconciles_total 800\n"), "{text}");
    assert!(
        text.contains("flux_hub_reconcile_duration_seconds_count 800\n"),
        "{text}"
    );
    assert!(
        text.contains("flux_hub_api_writes_total{kind=\"Pod\",verb=\"create\"} 800\n"),
        "{text}"
    );
}

#[tokio::test]
async fn timer_moves_into_a_task() {
    let metrics = Arc::new(Metrics::new());
    let timer = metrics.reconcile_timer();
    tokio::spawn(async move {
        tokio::task::yield_now().await;
        drop(timer);
    })
    .await
    .expect("task");
    assert!(
        metrics
            .encode()
            .contains("flux_hub_reconcile_duration_seconds_count 1\n")
    );
}
