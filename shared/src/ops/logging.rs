//! Logging: `tracing` events to standard error, filtered like `RUST_LOG`.

use std::io::IsTerminal;

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

/// Filter used when `RUST_LOG` is unset or invalid.
pub const DEFAULT_FILTER: &str = "info,kube=warn";

/// Installs the global `tracing` subscriber: events filtered by `RUST_LOG` (default
/// [`DEFAULT_FILTER`]), written to standard error as JSON lines (one object per event,
/// with the event's fields at the top level and the current span) when `json`, else as
/// compact text (colored only on a terminal). Records of the `log` crate are forwarded.
///
/// Safe to call more than once (tests, several entry points): when a global subscriber
/// is already installed, it is kept and this call does nothing.
pub fn init(json: bool) {
    let (filter, invalid) = match std::env::var(EnvFilter::DEFAULT_ENV) {
        Ok(spec) if !spec.trim().is_empty() => match EnvFilter::try_new(&spec) {
            Ok(filter) => (filter, None),
            Err(error) => (EnvFilter::new(DEFAULT_FILTER), Some((spec, error))),
        },
        _ => (EnvFilter::new(DEFAULT_FILTER), None),
    };
    let ansi = !json && std::io::stderr().is_terminal();
    let installed = subscriber(json, ansi, filter, std::io::stderr).try_init();
    if installed.is_ok()
        && let Some((spec, error)) = invalid
    {
        tracing::warn!(
            rust_log = %spec,
            %error,
            default = DEFAULT_FILTER,
            "invalid RUST_LOG, using the default filter"
        );
    }
}

/// The subscriber [`init`] installs, writing to `writer`.
fn subscriber<W>(
    json: bool,
    ansi: bool,
    filter: EnvFilter,
    writer: W,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(writer);
    if json {
        Box::new(
            builder
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        )
    } else {
        Box::new(builder.compact().finish())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer into a shared buffer.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Write for Buffer {
        fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("buffer").clone()).expect("utf-8")
        }
    }

    fn log_with(json: bool) -> String {
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let sub = subscriber(json, false, EnvFilter::new(DEFAULT_FILTER), move || {
            writer.clone()
        });
        tracing::subscriber::with_default(sub, || {
            let span = tracing::info_span!("reconcile", minicluster = "ns/a");
            let _entered = span.enter();
            tracing::info!(objects = 3, "applied");
            tracing::debug!("hidden at info");
            tracing::info!(target: "kube::runtime", "hidden below warn for kube");
            tracing::warn!(target: "kube::runtime", "kube warning");
        });
        buffer.text()
    }

    #[test]
    fn json_lines_with_top_level_fields() {
        let text = log_with(true);
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
            .collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert_eq!(lines[0]["level"], "INFO");
        assert_eq!(lines[0]["message"], "applied");
        assert_eq!(lines[0]["objects"], 3);
        assert_eq!(lines[0]["span"]["name"], "reconcile");
        assert_eq!(lines[0]["span"]["minicluster"], "ns/a");
        assert!(lines[0]["timestamp"].is_string());
        assert_eq!(lines[1]["level"], "WARN");
        assert_eq!(lines[1]["target"], "kube::runtime");
    }

    #[test]
    fn compact_text_without_colors() {
        let text = log_with(false);
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.contains("applied"), "{text}");
        assert!(text.contains("objects=3"), "{text}");
        assert!(text.contains("kube warning"), "{text}");
        assert!(!text.contains('\u{1b}'), "no ANSI escapes: {text:?}");
    }

    #[test]
    fn default_filter_parses() {
        assert!(EnvFilter::try_new(DEFAULT_FILTER).is_ok());
    }
}
