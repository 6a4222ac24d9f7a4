//! Logging: tracing events on stderr, as text for people or as JSON lines for log
//! collectors.
//!
//! - `RSAGG_LOG`: the filter (`tracing_subscriber::EnvFilter` syntax, e.g.
//!   `info,rsagg_fetch=debug`); default `warn,rsagg_pipeline=info,rsagg_harvest=info,rsagg_publish=info,rsagg_notify=info,rsagg_layout=info,rsagg::progress=info`.
//! - `--log-format text|json` (global) or `RSAGG_LOG_FORMAT`: `text` (the default) writes
//!   human-readable lines, coloured only when stderr is a terminal; `json` writes one JSON
//!   object per line (`timestamp`, `level`, `target`, `message` and the event's fields at top
//!   level, plus the current span), which Kubernetes log pipelines read without parsing text.
//!   Lines about one upstream, resource or document carry `upstream`, `uri` and `error` (the
//!   error with its causes, `rsagg_model::ErrorChain`) as fields.
//! - On a terminal, `rsagg run`'s progress line (`progress.rs`) is drawn by a
//!   `tracing-indicatif` layer, and log lines are written through its writer so that they
//!   appear above the line instead of breaking it.
//! - Every line is redacted on its way out ([`Redacting`], `rsagg_model::redact`): whatever
//!   an event quotes — a configured URL with `user:password@`, an error from reqwest or the
//!   object store that embeds one, a signed URL — its credentials are not written.

use std::io::IsTerminal;

use tracing_indicatif::IndicatifLayer;
use tracing_indicatif::filter::IndicatifFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer, Registry};

/// The filter variable.
pub const FILTER_ENV: &str = "RSAGG_LOG";
/// The format variable (the `--log-format` flag wins over it).
pub const FORMAT_ENV: &str = "RSAGG_LOG_FORMAT";
/// The filter when `RSAGG_LOG` is unset or invalid.
const DEFAULT_FILTER: &str = "warn,rsagg_pipeline=info,rsagg_harvest=info,rsagg_publish=info,rsagg_notify=info,rsagg_layout=info,rsagg::progress=info";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter of `RSAGG_LOG`, or the default (with a note on stderr when the variable is
/// set but invalid, so a typo does not silently change what is logged).
fn filter() -> EnvFilter {
    match EnvFilter::try_from_env(FILTER_ENV) {
        Ok(f) => f,
        Err(e) => {
            if std::env::var_os(FILTER_ENV).is_some_and(|v| !v.is_empty()) {
                eprintln!("rsagg: ignoring {FILTER_ENV} ({e}); using `{DEFAULT_FILTER}`");
            }
            EnvFilter::new(DEFAULT_FILTER)
        }
    }
}

/// A writer that redacts ([`rsagg_model::redact()`]) what it is given before passing it on.
/// The fmt layer writes each formatted event with one `write_all`, which this writer takes in
/// one `write` (it always reports the whole buffer written), so a URL is never split between
/// two calls.
#[derive(Clone)]
struct Redacting<M>(M);

impl<'a, M: MakeWriter<'a>> MakeWriter<'a> for Redacting<M> {
    type Writer = Redacting<M::Writer>;

    fn make_writer(&'a self) -> Self::Writer {
        Redacting(self.0.make_writer())
    }
}

impl<W: std::io::Write> std::io::Write for Redacting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => self.0.write_all(rsagg_model::redact(text).as_bytes())?,
            Err(_) => self.0.write_all(buf)?,
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A subscriber writing `format` to `writer`, filtered by `filter`; `ansi` colours text
/// output. With `bar` (stderr is a terminal), the progress line's layer is added and log
/// lines go through its writer, which lifts the line while a log line is written.
fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
    bar: Option<IndicatifLayer<Registry>>,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let writer = match &bar {
        Some(b) => BoxMakeWriter::new(Redacting(b.get_stderr_writer())),
        None => BoxMakeWriter::new(Redacting(writer)),
    };
    // The progress line's span is selected by the indicatif layer's own filter, whatever
    // `RSAGG_LOG` says; `filter` is the log lines'.
    let registry = tracing_subscriber::registry()
        .with(bar.map(|b| b.with_filter(IndicatifFilter::new(false))));
    let layer = tracing_subscriber::fmt::layer().with_writer(writer);
    let fmt = match format {
        LogFormat::Text => layer.with_ansi(ansi).with_filter(filter).boxed(),
        LogFormat::Json => layer
            .json()
            .flatten_event(true)
            .with_span_list(false)
            .with_filter(filter)
            .boxed(),
    };
    Box::new(registry.with(fmt))
}

/// Installs the process's subscriber: `format` on stderr, filtered by `RSAGG_LOG`. Returns
/// true when stderr is a terminal, where `rsagg run` shows its progress line (off a
/// terminal it logs heartbeats instead).
pub fn init(format: LogFormat) -> bool {
    let terminal = std::io::stderr().is_terminal();
    let bar = terminal.then(IndicatifLayer::new);
    let s = subscriber(format, filter(), std::io::stderr, terminal, bar);
    if let Err(e) = tracing::subscriber::set_global_default(s) {
        eprintln!("rsagg: cannot set up logging: {e}");
    }
    terminal
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `log` writes through the `format` subscriber at `info`.
    fn written(format: LogFormat, log: impl FnOnce()) -> String {
        let buf = Buf::default();
        let w = buf.clone();
        let s = subscriber(
            format,
            EnvFilter::new("info"),
            move || w.clone(),
            false,
            None,
        );
        tracing::subscriber::with_default(s, log);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    fn logged(format: LogFormat) -> String {
        written(format, || {
            let span = tracing::info_span!("run", collection = "maps");
            let _g = span.enter();
            tracing::info!(upstream = "up", count = 3, "harvested \"things\"\nok");
            tracing::debug!("filtered out");
        })
    }

    #[test]
    fn json_lines_carry_message_fields_and_span() {
        let out = logged(LogFormat::Json);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["level"], "INFO", "{v}");
        assert_eq!(v["message"], "harvested \"things\"\nok", "{v}");
        assert_eq!(v["upstream"], "up", "{v}");
        assert_eq!(v["count"], 3, "{v}");
        assert_eq!(v["span"]["collection"], "maps", "{v}");
        assert!(v["timestamp"].is_string(), "{v}");
    }

    #[test]
    fn credentials_in_urls_are_not_written() {
        for format in [LogFormat::Text, LogFormat::Json] {
            let out = written(format, || {
                let url = "s3://KEY:S3cr3t@bucket/prefix";
                tracing::info!(store = %url, "opening http://u:pw@h/?token=t0k");
            });
            assert!(out.contains("s3://***@bucket/prefix"), "{out}");
            assert!(out.contains("http://***@h/?token=***"), "{out}");
            for secret in ["S3cr3t", "KEY:", ":pw@", "t0k"] {
                assert!(!out.contains(secret), "{secret} in {out}");
            }
        }
    }

    #[test]
    fn text_is_plain_without_a_terminal() {
        let out = logged(LogFormat::Text);
        assert!(out.contains("INFO"), "{out}");
        assert!(
            out.contains("upstream=\"up\"") || out.contains("upstream=up"),
            "{out}"
        );
        assert!(!out.contains('\u{1b}'), "no colour codes: {out:?}");
        assert!(!out.contains("filtered out"), "{out}");
    }
}
