//! A tiny stderr logger behind the `log` facade.
//!
//! `ORTMLX_LOG=error|warn|info|debug|trace` turns it on (off by default); `ORTMLX_LOG_CLAIMS=1`
//! prints every node's claim or decline from `GetCapability`, whatever the level;
//! `ORTMLX_CLAIMS_FILE=<path>` appends the same reports to a file as JSON lines (see
//! [`record_claims`]), for tools such as `cargo xtask conformance`.

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
        let level = level_from(crate::config::Config::get().log.as_deref());
        if level != LevelFilter::Off && log::set_logger(&LOGGER).is_ok() {
            log::set_max_level(level);
        }
    });
}

/// True when `ORTMLX_LOG_CLAIMS=1` asks for per-node claim reports.
pub fn claims_enabled() -> bool {
    crate::config::Config::get().log_claims
}

/// Prints one claim report line to stderr (used when [`claims_enabled`]).
pub fn claim_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[ortmlx claims] {line}");
}

/// Prints one warning line to stderr, for when ORT's logger is not at hand.
pub fn warning_line(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "[ortmlx warn] {line}");
}

/// The file named by `ORTMLX_CLAIMS_FILE`, if set.
pub fn claims_file() -> Option<std::path::PathBuf> {
    crate::config::Config::get().claims_file.clone()
}

/// One node's outcome in a `GetCapability` call, as [`record_claims`] writes it.
#[derive(Debug, Clone, Copy)]
pub struct ClaimRecord<'a> {
    /// The graph's name.
    pub graph: &'a str,
    /// The node's name.
    pub node: &'a str,
    /// Its domain (empty for the ONNX domain).
    pub domain: &'a str,
    /// Its op type.
    pub op_type: &'a str,
    /// `claim` (the node goes to a cluster), `decline` (no registry entry takes it) or `left`
    /// (claimable, but the whole graph was left to ORT).
    pub action: &'a str,
    /// The cluster of a claimed node.
    pub cluster: Option<usize>,
    /// Why a node was declined or left (empty for a claim).
    pub reason: &'a str,
}

impl ClaimRecord<'_> {
    /// The record as one JSON object (no trailing newline).
    pub fn to_json(self) -> String {
        let mut out = String::from("{");
        for (key, value) in [
            ("graph", self.graph),
            ("node", self.node),
            ("domain", self.domain),
            ("op_type", self.op_type),
            ("action", self.action),
        ] {
            out.push_str(&format!("\"{key}\":"));
            json_string(&mut out, value);
            out.push(',');
        }
        if let Some(c) = self.cluster {
            out.push_str(&format!("\"cluster\":{c},"));
        }
        out.push_str("\"reason\":");
        json_string(&mut out, self.reason);
        out.push('}');
        out
    }
}

/// Appends `s` as a JSON string literal.
pub(crate) fn json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `records` to the file `ORTMLX_CLAIMS_FILE` names, one JSON object per line, in
/// one write (processes may share the file). Does nothing when the variable is unset; a
/// failure to write is logged, never an error of the session.
pub fn record_claims(records: &[ClaimRecord<'_>]) {
    let Some(path) = claims_file() else {
        return;
    };
    let mut text = String::new();
    for r in records {
        text.push_str(&r.to_json());
        text.push('\n');
    }
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(text.as_bytes()));
    if let Err(e) = written {
        log::warn!("ORTMLX_CLAIMS_FILE={}: {e}", path.display());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_records_are_json_lines() {
        let r = ClaimRecord {
            graph: "g",
            node: "n\"1\\",
            domain: "",
            op_type: "Pad",
            action: "decline",
            cluster: None,
            reason: "mode 'x'\n\u{1}",
        };
        assert_eq!(
            r.to_json(),
            r#"{"graph":"g","node":"n\"1\\","domain":"","op_type":"Pad","action":"decline","reason":"mode 'x'\n\u0001"}"#
        );
        let r = ClaimRecord {
            action: "claim",
            cluster: Some(2),
            reason: "",
            ..r
        };
        assert!(
            r.to_json()
                .ends_with(r#""action":"claim","cluster":2,"reason":""}"#)
        );
    }

    #[test]
    fn levels_parse() {
        assert_eq!(level_from(None), LevelFilter::Off);
        assert_eq!(level_from(Some("debug")), LevelFilter::Debug);
        assert_eq!(level_from(Some(" INFO ")), LevelFilter::Info);
        assert_eq!(level_from(Some("nonsense")), LevelFilter::Off);
    }
}
