//! Chrome-trace export of what the EP does: `ORTMLX_TRACE=<path>`.
//!
//! Every `GetCapability`, every compiled fused node and every run (`Compute`) becomes a
//! complete event (`"ph": "X"`) with a start timestamp and a duration in microseconds, the
//! process and OS thread id, and arguments naming the graph or fused node and its ONNX nodes.
//! The file is a JSON object with a `traceEvents` array, as Perfetto (ui.perfetto.dev) and
//! `chrome://tracing` read it.
//!
//! Events are kept in memory and the whole file is rewritten (through a temporary file and a
//! rename, so a reader never sees half a file) when an EP instance or the factory is released
//! and at process exit. `%p` in the path is replaced by the process id, for tracing several
//! processes at once. When the variable is unset nothing is recorded and a span costs one
//! atomic load.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use crate::logging::json_string;

/// The environment variable naming the trace file.
pub const TRACE_VAR: &str = "ORTMLX_TRACE";

/// At most this many events are kept; later ones are counted, not stored.
const MAX_EVENTS: usize = 1_000_000;

/// One argument value of an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A list of strings.
    List(Vec<String>),
}

impl From<&str> for Arg {
    fn from(v: &str) -> Self {
        Arg::Str(v.to_string())
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Self {
        Arg::Str(v)
    }
}

impl From<usize> for Arg {
    fn from(v: usize) -> Self {
        Arg::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}

impl From<Vec<String>> for Arg {
    fn from(v: Vec<String>) -> Self {
        Arg::List(v)
    }
}

/// A finished span.
#[derive(Debug, Clone)]
struct Event {
    cat: &'static str,
    name: String,
    /// Microseconds since the tracer started.
    ts_us: f64,
    dur_us: f64,
    tid: u64,
    args: Vec<(&'static str, Arg)>,
}

/// The process-wide recorder.
struct Tracer {
    path: PathBuf,
    start: Instant,
    pid: u32,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    events: Vec<Event>,
    /// Thread ids seen, for the thread-name metadata events.
    threads: Vec<u64>,
    dropped: usize,
    /// Events were added since the last write.
    dirty: bool,
    /// A write failed once (warned about; not repeated).
    failed: bool,
}

static TRACER: OnceLock<Option<Tracer>> = OnceLock::new();
static ENABLED: AtomicBool = AtomicBool::new(false);

unsafe extern "C" {
    /// libc's `atexit`; in a shared library glibc runs the handler at `dlclose` or exit.
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

extern "C" fn flush_at_exit() {
    // No panic may unwind into libc.
    let _ = std::panic::catch_unwind(flush);
}

/// The trace path `value` names, with `%p` replaced by `pid`; `None` when unset or empty.
pub fn trace_path(value: Option<&str>, pid: u32) -> Option<PathBuf> {
    let value = value?.trim();
    if value.is_empty() {
        return None;
    }
    Some(PathBuf::from(value.replace("%p", &pid.to_string())))
}

/// Reads `ORTMLX_TRACE` once per process and, when it names a file, starts recording.
pub fn init() {
    TRACER.get_or_init(|| {
        let pid = std::process::id();
        let path = trace_path(crate::config::Config::get().trace.as_deref(), pid)?;
        log::info!("tracing to {} ({TRACE_VAR})", path.display());
        // SAFETY: registers a plain function; libc calls it once at exit or unload.
        if unsafe { atexit(flush_at_exit) } != 0 {
            log::warn!("{TRACE_VAR}: could not register the exit handler; the trace is written when the EP is released");
        }
        ENABLED.store(true, Ordering::Release);
        Some(Tracer {
            path,
            start: Instant::now(),
            pid,
            state: Mutex::new(State::default()),
        })
    });
}

/// True when a trace is being recorded.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Acquire)
}

fn tracer() -> Option<&'static Tracer> {
    TRACER.get().and_then(Option::as_ref)
}

/// The OS id of the calling thread (Linux: from `/proc/thread-self`), else a small counter.
pub fn thread_id() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static TID: u64 = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|p| p.file_name()?.to_str()?.parse().ok())
            .unwrap_or_else(|| NEXT.fetch_add(1, Ordering::Relaxed));
    }
    TID.with(|t| *t)
}

/// A span being timed; recorded when dropped. Made by [`span`].
pub struct Span {
    cat: &'static str,
    name: String,
    start: Instant,
    args: Vec<(&'static str, Arg)>,
}

impl Span {
    /// Renames the span (for names known only after it started).
    pub fn rename(&mut self, name: String) {
        self.name = name;
    }

    /// Adds an argument shown with the event.
    pub fn arg(&mut self, key: &'static str, value: impl Into<Arg>) {
        self.args.push((key, value.into()));
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        let Some(tracer) = tracer() else { return };
        let end = Instant::now();
        let event = Event {
            cat: self.cat,
            name: std::mem::take(&mut self.name),
            ts_us: self.start.duration_since(tracer.start).as_secs_f64() * 1e6,
            dur_us: end.duration_since(self.start).as_secs_f64() * 1e6,
            tid: thread_id(),
            args: std::mem::take(&mut self.args),
        };
        let Ok(mut state) = tracer.state.lock() else {
            return;
        };
        if state.events.len() >= MAX_EVENTS {
            state.dropped += 1;
            return;
        }
        if !state.threads.contains(&event.tid) {
            state.threads.push(event.tid);
        }
        state.events.push(event);
        state.dirty = true;
    }
}

/// Starts a span of category `cat` (`capability`, `compile`, `compute`), or `None` when no
/// trace is recorded. `name` is only evaluated when tracing.
pub fn span(cat: &'static str, name: impl FnOnce() -> String) -> Option<Span> {
    if !enabled() {
        return None;
    }
    Some(Span {
        cat,
        name: name(),
        start: Instant::now(),
        args: Vec::new(),
    })
}

/// Writes the trace file now (when tracing and something changed since the last write).
pub fn flush() {
    let Some(tracer) = tracer() else { return };
    let Ok(mut state) = tracer.state.lock() else {
        return;
    };
    if !state.dirty {
        return;
    }
    let json = render(tracer.pid, &state);
    match write_atomically(&tracer.path, &json) {
        Ok(()) => state.dirty = false,
        Err(err) if !state.failed => {
            state.failed = true;
            log::warn!(
                "{TRACE_VAR}: writing {} failed: {err}",
                tracer.path.display()
            );
        }
        Err(_) => {}
    }
}

fn write_atomically(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn json_arg(out: &mut String, arg: &Arg) {
    match arg {
        Arg::Str(s) => json_string(out, s),
        Arg::Int(v) => {
            let _ = write!(out, "{v}");
        }
        Arg::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                json_string(out, item);
            }
            out.push(']');
        }
    }
}

/// The whole trace file.
fn render(pid: u32, state: &State) -> String {
    let mut out = String::with_capacity(256 + state.events.len() * 160);
    out.push_str(
        "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"ep\":\"MLXExecutionProvider\",\"version\":",
    );
    json_string(&mut out, env!("CARGO_PKG_VERSION"));
    let _ = write!(out, ",\"dropped_events\":{}}},", state.dropped);
    out.push_str("\"traceEvents\":[\n");
    let _ = write!(
        out,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":0,\"args\":{{\"name\":\"MLXExecutionProvider (pid {pid})\"}}}}"
    );
    for tid in &state.threads {
        let _ = write!(
            out,
            ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{tid},\"args\":{{\"name\":\"thread {tid}\"}}}}"
        );
    }
    for e in &state.events {
        out.push_str(",\n{\"ph\":\"X\",\"cat\":");
        json_string(&mut out, e.cat);
        out.push_str(",\"name\":");
        json_string(&mut out, &e.name);
        let _ = write!(
            out,
            ",\"ts\":{:.3},\"dur\":{:.3},\"pid\":{pid},\"tid\":{},\"args\":{{",
            e.ts_us, e.dur_us, e.tid
        );
        for (i, (k, v)) in e.args.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            json_string(&mut out, k);
            out.push(':');
            json_arg(&mut out, v);
        }
        out.push_str("}}");
    }
    out.push_str("\n]}\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_substitute_the_pid() {
        assert_eq!(trace_path(None, 7), None);
        assert_eq!(trace_path(Some("  "), 7), None);
        assert_eq!(
            trace_path(Some("/tmp/t-%p.json"), 42),
            Some(PathBuf::from("/tmp/t-42.json"))
        );
    }

    #[test]
    fn renders_complete_events_as_json() {
        let state = State {
            events: vec![Event {
                cat: "compute",
                name: "MLX_\"fused\"_0".into(),
                ts_us: 1.5,
                dur_us: 20.25,
                tid: 99,
                args: vec![
                    ("nodes", Arg::List(vec!["a\\b".into(), "c\n".into()])),
                    ("count", Arg::Int(2)),
                ],
            }],
            threads: vec![99],
            ..State::default()
        };
        let text = render(5, &state);
        assert!(
            text.starts_with('{') && text.trim_end().ends_with('}'),
            "{text}"
        );
        assert!(text.contains("\"traceEvents\":["), "{text}");
        assert!(
            text.contains(r#"{"ph":"X","cat":"compute","name":"MLX_\"fused\"_0","ts":1.500,"dur":20.250,"pid":5,"tid":99,"args":{"nodes":["a\\b","c\n"],"count":2}}"#),
            "{text}"
        );
        assert!(
            text.contains(r#""name":"thread_name","pid":5,"tid":99"#),
            "{text}"
        );
    }

    #[test]
    fn spans_are_free_when_not_tracing() {
        if !enabled() {
            assert!(span("compute", || unreachable!("name built while not tracing")).is_none());
        }
    }
}
