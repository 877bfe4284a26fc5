//! A tiny stderr logger behind the `log` facade.
//!
//! `ORTMLX_LOG=error|warn|info|debug|trace` turns it on (off by default); `ORTMLX_LOG_CLAIMS=1`
//! prints every node's claim or decline from `GetCapability`, whatever the level.

use std::io::Write;
use std::sync::Once;

use log::{LevelFilter, Log, Metadata, Record};

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level()
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            let _ = writeln!(
                std::io::stderr().lock(),
                "[ortmlx {} {}] {}",
                record.level(),
                record.target(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

static LOGGER: StderrLogger = StderrLogger;
static INIT: Once = Once::new();

/// The level named by `value` (`ORTMLX_LOG`), `Off` when unset or unknown.
pub fn level_from(value: Option<&str>) -> LevelFilter {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("error") => LevelFilter::Error,
        Some("warn") | Some("warning") => LevelFilter::Warn,
        Some("info") | Some("1") => LevelFilter::Info,
        Some("debug") => LevelFilter::Debug,
        Some("trace") => LevelFilter::Trace,
        _ => LevelFilter::Off,
    }
}

/// Installs the logger once, at the level `ORTMLX_LOG` names. Keeps any logger the host
/// process already installed.
pub fn init() {
    INIT.call_once(|| {
        let level = level_from(std::env::var("ORTMLX_LOG").ok().as_deref());
        if level != LevelFilter::Off && log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(level);
        }
    });
}

/// True when `ORTMLX_LOG_CLAIMS=1` asks for per-node claim reports.
pub fn claims_enabled() -> bool {
    matches!(
        std::env::var("ORTMLX_LOG_CLAIMS").ok().as_deref(),
        Some("1") | Some("true") | Some("yes")
    )
}

/// Prints one claim report line to stderr (used when [`claims_enabled`]).
pub fn claim_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[ortmlx claims] {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse() {
        assert_eq!(level_from(None), LevelFilter::Off);
        assert_eq!(level_from(Some("debug")), LevelFilter::Debug);
        assert_eq!(level_from(Some(" INFO ")), LevelFilter::Info);
        assert_eq!(level_from(Some("nonsense")), LevelFilter::Off);
    }
}
