//! The EP's events in ONNX Runtime's own profile (`SessionOptions.enable_profiling`, or
//! profiling one run through its run options): `OrtEp::CreateProfiler` of ORT 1.25.
//!
//! Each EP instance (session) owns a [`ProfileHub`]. ORT asks the EP for a profiler
//! ([`create_profiler`]) and calls `StartProfiling` on it; from then until `EndProfiling` the
//! hub hands every event the EP records (one per fused-node run, one per lowering at session
//! creation) to that profiler, which gives them to ORT in `EndProfiling`. ORT writes them into
//! its profile file next to its own node events.
//!
//! Run profiling: ORT makes one profiler per profiled run and brackets each of its own events
//! with `StartEvent`/`StopEvent` on the thread that runs it, so a profiler that has seen a
//! `StartEvent` takes only events recorded on a thread inside one of its brackets; concurrent
//! runs of other profilers (or of none) stay out of its file.
//!
//! ORT writes event names and argument values into its JSON without escaping them, and an
//! argument value that starts with `[` or `{` verbatim, so both are made safe ([`json_safe`]).
//! On ORT 1.23 and 1.24 no profiler is asked for; `ORTMLX_TRACE` (see `trace`) records the same
//! events in a file of the EP's own.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::abi::{
    CreateProfilingEventFn, ORT_EP_VERSION, OrtEpProfilerImpl, OrtProfilingEvent,
    OrtProfilingEventCategory, OrtProfilingEventsContainer, ProfilingEventsContainerAddEventsFn,
    ReleaseProfilingEventFn, StatusPtr, ep_api_index,
};
use crate::api::Api;
use crate::error::{EpError, guard, guard_value};

/// At most this many events are kept per profiler; later ones are counted and dropped.
const MAX_EVENTS: usize = 1_000_000;

/// One event the EP records.
#[derive(Debug, Clone)]
pub struct EpEvent {
    /// ORT's category (`abi::PROFILING_CATEGORY_*`).
    pub category: OrtProfilingEventCategory,
    /// The event name.
    pub name: String,
    /// When it started.
    pub start: Instant,
    /// How long it took.
    pub duration: Duration,
    /// Arguments shown with the event.
    pub args: Vec<(&'static str, String)>,
}

/// An event as a profiler keeps it: timed on ORT's profiling clock.
#[derive(Debug, Clone, PartialEq)]
struct Timed {
    category: OrtProfilingEventCategory,
    name: String,
    ts_us: i64,
    dur_us: i64,
    tid: i32,
    args: Vec<(&'static str, String)>,
}

/// The events of one started profiler.
struct Sink {
    id: u64,
    /// The EP's clock at `StartProfiling`.
    start: Instant,
    /// ORT's profiling clock at `StartProfiling`, in nanoseconds.
    offset_ns: i64,
    /// Whether ORT brackets its events for this profiler (`StartEvent` was called).
    correlated: AtomicBool,
    events: Mutex<Vec<Timed>>,
    dropped: AtomicUsize,
}

impl Sink {
    /// `event` on ORT's clock, or `None` when it started before profiling did.
    fn time(&self, event: &EpEvent) -> Option<Timed> {
        let since = event.start.checked_duration_since(self.start)?;
        let ns = i64::try_from(since.as_nanos()).unwrap_or(i64::MAX);
        Some(Timed {
            category: event.category,
            name: json_safe(&event.name),
            ts_us: self.offset_ns.saturating_add(ns) / 1000,
            dur_us: i64::try_from(event.duration.as_micros()).unwrap_or(i64::MAX),
            tid: crate::trace::thread_id() as i32,
            args: event.args.iter().map(|(k, v)| (*k, json_safe(v))).collect(),
        })
    }
}

thread_local! {
    /// ORT events open on this thread: (profiler id, correlation id), innermost last.
    static OPEN: RefCell<Vec<(u64, u64)>> = const { RefCell::new(Vec::new()) };
}

fn open_on_this_thread(id: u64) -> bool {
    OPEN.with(|o| o.borrow().iter().any(|(p, _)| *p == id))
}

/// The profilers of one EP instance that are recording now.
#[derive(Default)]
pub struct ProfileHub {
    sinks: Mutex<Vec<Arc<Sink>>>,
    active: AtomicUsize,
}

static NEXT_PROFILER: AtomicU64 = AtomicU64::new(1);

impl ProfileHub {
    /// True while some profiler records: build events only then.
    pub fn enabled(&self) -> bool {
        self.active.load(Ordering::Acquire) > 0
    }

    /// Hands `event` to every recording profiler that takes it.
    pub fn record(&self, event: EpEvent) {
        if !self.enabled() {
            return;
        }
        let Ok(sinks) = self.sinks.lock() else { return };
        for sink in sinks.iter() {
            if sink.correlated.load(Ordering::Acquire) && !open_on_this_thread(sink.id) {
                continue;
            }
            let Some(timed) = sink.time(&event) else {
                continue;
            };
            let Ok(mut events) = sink.events.lock() else {
                continue;
            };
            if events.len() >= MAX_EVENTS {
                sink.dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                events.push(timed);
            }
        }
    }

    fn start(&self, sink: Arc<Sink>) {
        if let Ok(mut sinks) = self.sinks.lock() {
            sinks.retain(|s| s.id != sink.id);
            sinks.push(sink);
            self.active.store(sinks.len(), Ordering::Release);
        }
    }

    /// Stops recording for profiler `id`; returns its sink.
    fn stop(&self, id: u64) -> Option<Arc<Sink>> {
        let mut sinks = self.sinks.lock().ok()?;
        let at = sinks.iter().position(|s| s.id == id)?;
        let sink = sinks.remove(at);
        self.active.store(sinks.len(), Ordering::Release);
        Some(sink)
    }
}

/// Makes `s` safe inside ORT's unescaped JSON strings: quotes become `'`, backslashes `/`,
/// control characters spaces, and a leading `[` or `{` (which ORT writes verbatim) gets a
/// space before it.
pub fn json_safe(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| match c {
            '"' => '\'',
            '\\' => '/',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect();
    if out.starts_with(['[', '{']) {
        out.insert(0, ' ');
    }
    out
}

/// The host's profiling functions (ORT >= 1.25).
#[derive(Clone, Copy)]
struct EventApi {
    create: CreateProfilingEventFn,
    release: ReleaseProfilingEventFn,
    add: ProfilingEventsContainerAddEventsFn,
}

impl EventApi {
    fn of(api: &Api) -> Option<Self> {
        let create = api.ep_member(ep_api_index::CREATE_PROFILING_EVENT, 25);
        let release = api.ep_member(ep_api_index::RELEASE_PROFILING_EVENT, 25);
        let add = api.ep_member(ep_api_index::PROFILING_EVENTS_CONTAINER_ADD_EVENTS, 25);
        if create.is_null() || release.is_null() || add.is_null() {
            return None;
        }
        // SAFETY: non-null members of the host's OrtEpApi at the indices of 1.25's header,
        // which have these signatures.
        unsafe {
            Some(EventApi {
                create: std::mem::transmute::<*const (), CreateProfilingEventFn>(create),
                release: std::mem::transmute::<*const (), ReleaseProfilingEventFn>(release),
                add: std::mem::transmute::<*const (), ProfilingEventsContainerAddEventsFn>(add),
            })
        }
    }
}

/// One profiler handed to ORT; the vtable is its first field.
#[repr(C)]
struct Profiler {
    base: OrtEpProfilerImpl,
    api: Api,
    events: EventApi,
    hub: Arc<ProfileHub>,
    id: u64,
}

/// `OrtEp::CreateProfiler`: a new profiler recording `hub`'s events, or null on an ORT without
/// the profiling functions.
///
/// # Safety
/// `out` must be ORT's out-pointer (or null).
pub unsafe fn create_profiler(
    api: &Api,
    hub: &Arc<ProfileHub>,
    out: *mut *mut OrtEpProfilerImpl,
) -> Result<(), EpError> {
    if out.is_null() {
        return Err(EpError::new("null profiler out-pointer"));
    }
    let Some(events) = EventApi::of(api) else {
        // SAFETY: ORT's out-pointer.
        unsafe { *out = ptr::null_mut() };
        return Ok(());
    };
    let profiler = Box::new(Profiler {
        base: OrtEpProfilerImpl {
            ort_version_supported: ORT_EP_VERSION,
            Release: release,
            StartProfiling: start_profiling,
            StartEvent: Some(start_event),
            StopEvent: Some(stop_event),
            EndProfiling: end_profiling,
        },
        api: *api,
        events,
        hub: Arc::clone(hub),
        id: NEXT_PROFILER.fetch_add(1, Ordering::Relaxed),
    });
    log::debug!("CreateProfiler: profiler {}", profiler.id);
    // SAFETY: ORT's out-pointer; ORT releases the profiler through `Release`.
    unsafe { *out = Box::into_raw(profiler) as *mut OrtEpProfilerImpl };
    Ok(())
}

/// # Safety
/// `p` must be a live profiler from [`create_profiler`].
unsafe fn profiler<'a>(p: *const OrtEpProfilerImpl) -> &'a Profiler {
    // SAFETY: `base` is the first field of the #[repr(C)] Profiler.
    unsafe { &*(p as *const Profiler) }
}

unsafe extern "system" fn release(this: *mut OrtEpProfilerImpl) {
    guard_value("OrtEpProfilerImpl::Release", (), || {
        if this.is_null() {
            return;
        }
        // SAFETY: made by create_profiler, released once by ORT.
        let p = unsafe { Box::from_raw(this as *mut Profiler) };
        p.hub.stop(p.id);
    })
}

unsafe extern "system" fn start_profiling(
    this: *mut OrtEpProfilerImpl,
    offset_ns: i64,
) -> StatusPtr {
    guard("OrtEpProfilerImpl::StartProfiling", || {
        // SAFETY: ORT passes the profiler it got.
        let p = unsafe { profiler(this) };
        p.hub.start(Arc::new(Sink {
            id: p.id,
            start: Instant::now(),
            offset_ns,
            correlated: AtomicBool::new(false),
            events: Mutex::new(Vec::new()),
            dropped: AtomicUsize::new(0),
        }));
        log::debug!("profiler {}: started (ORT offset {offset_ns} ns)", p.id);
        Ok(())
    })
}

unsafe extern "system" fn start_event(this: *mut OrtEpProfilerImpl, correlation: u64) -> StatusPtr {
    guard("OrtEpProfilerImpl::StartEvent", || {
        // SAFETY: ORT passes the profiler it got.
        let p = unsafe { profiler(this) };
        if let Ok(sinks) = p.hub.sinks.lock()
            && let Some(sink) = sinks.iter().find(|s| s.id == p.id)
        {
            sink.correlated.store(true, Ordering::Release);
        }
        OPEN.with(|o| o.borrow_mut().push((p.id, correlation)));
        Ok(())
    })
}

unsafe extern "system" fn stop_event(
    this: *mut OrtEpProfilerImpl,
    correlation: u64,
    _event: *const OrtProfilingEvent,
) -> StatusPtr {
    guard("OrtEpProfilerImpl::StopEvent", || {
        // SAFETY: ORT passes the profiler it got.
        let p = unsafe { profiler(this) };
        OPEN.with(|o| {
            let mut open = o.borrow_mut();
            if let Some(at) = open.iter().rposition(|e| *e == (p.id, correlation)) {
                open.remove(at);
            }
        });
        Ok(())
    })
}

unsafe extern "system" fn end_profiling(
    this: *mut OrtEpProfilerImpl,
    container: *mut OrtProfilingEventsContainer,
) -> StatusPtr {
    guard("OrtEpProfilerImpl::EndProfiling", || {
        // SAFETY: ORT passes the profiler it got.
        let p = unsafe { profiler(this) };
        let Some(sink) = p.hub.stop(p.id) else {
            return Ok(());
        };
        let events =
            std::mem::take(&mut *sink.events.lock().map_err(|_| EpError::new("poisoned"))?);
        let dropped = sink.dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            log::warn!(
                "profiler {}: {dropped} event(s) past {MAX_EVENTS} dropped",
                p.id
            );
        }
        log::debug!("profiler {}: {} event(s) to ORT", p.id, events.len());
        if events.is_empty() || container.is_null() {
            return Ok(());
        }
        // SAFETY: ORT's container, live during this call.
        unsafe { add_events(p, container, &events) }
    })
}

/// Creates ORT events for `events`, adds them to `container` and releases them.
///
/// # Safety
/// `container` must be the container ORT passed to `EndProfiling`.
unsafe fn add_events(
    p: &Profiler,
    container: *mut OrtProfilingEventsContainer,
    events: &[Timed],
) -> Result<(), EpError> {
    let pid = std::process::id() as i32;
    let mut made: Vec<*mut OrtProfilingEvent> = Vec::with_capacity(events.len());
    let mut result = Ok(());
    for e in events {
        let name = CString::new(e.name.as_str()).unwrap_or_default();
        let keys: Vec<CString> = e
            .args
            .iter()
            .map(|(k, _)| CString::new(*k).unwrap_or_default())
            .collect();
        let values: Vec<CString> = e
            .args
            .iter()
            .map(|(_, v)| CString::new(v.as_str()).unwrap_or_default())
            .collect();
        let key_ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
        let value_ptrs: Vec<*const c_char> = values.iter().map(|v| v.as_ptr()).collect();
        let mut event: *mut OrtProfilingEvent = ptr::null_mut();
        // SAFETY: the strings and arrays live across the call; ORT copies them.
        let st = unsafe {
            (p.events.create)(
                e.category,
                pid,
                e.tid,
                name.as_ptr(),
                e.ts_us,
                e.dur_us,
                key_ptrs.as_ptr(),
                value_ptrs.as_ptr(),
                key_ptrs.len(),
                &mut event,
            )
        };
        if let Err(err) = p
            .api
            .check(ort_sys::OrtStatusPtr(st), "CreateProfilingEvent")
        {
            result = Err(err);
            break;
        }
        if !event.is_null() {
            made.push(event);
        }
    }
    if result.is_ok() && !made.is_empty() {
        // SAFETY: live events made above; ORT copies them.
        let st = unsafe {
            (p.events.add)(
                container,
                made.as_ptr() as *const *const OrtProfilingEvent,
                made.len(),
            )
        };
        result = p.api.check(
            ort_sys::OrtStatusPtr(st),
            "ProfilingEventsContainer_AddEvents",
        );
    }
    for event in made {
        // SAFETY: made by CreateProfilingEvent, released once.
        unsafe { (p.events.release)(event) };
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::PROFILING_CATEGORY_KERNEL;

    /// The names of the events `s` has taken, in order.
    fn event_names(s: &Sink) -> Vec<String> {
        s.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.name.clone())
            .collect()
    }

    fn sink(start: Instant) -> Arc<Sink> {
        Arc::new(Sink {
            id: 7,
            start,
            offset_ns: 5_000,
            correlated: AtomicBool::new(false),
            events: Mutex::new(Vec::new()),
            dropped: AtomicUsize::new(0),
        })
    }

    fn event(start: Instant, name: &str) -> EpEvent {
        EpEvent {
            category: PROFILING_CATEGORY_KERNEL,
            name: name.into(),
            start,
            duration: Duration::from_micros(42),
            args: vec![("path", "eager".into()), ("nodes", "[3]".into())],
        }
    }

    #[test]
    fn values_are_safe_in_unescaped_json() {
        assert_eq!(json_safe(r#"a"b\c"#), "a'b/c");
        assert_eq!(json_safe("[1]"), " [1]");
        assert_eq!(json_safe("{x}"), " {x}");
        assert_eq!(json_safe("x\ny"), "x y");
    }

    #[test]
    fn events_are_timed_on_orts_clock() {
        let t0 = Instant::now();
        let s = sink(t0);
        let e = event(t0 + Duration::from_micros(10), "fused");
        let timed = s.time(&e).unwrap();
        assert_eq!(timed.ts_us, 15);
        assert_eq!(timed.dur_us, 42);
        assert_eq!(timed.args[1], ("nodes", " [3]".to_string()));
        // Started before profiling: not this profiler's.
        let early = EpEvent {
            start: t0.checked_sub(Duration::from_millis(1)).unwrap_or(t0),
            ..e
        };
        if early.start < t0 {
            assert!(s.time(&early).is_none());
        }
    }

    #[test]
    fn the_hub_records_only_while_started() {
        let hub = ProfileHub::default();
        let t0 = Instant::now();
        hub.record(event(t0, "before"));
        assert!(!hub.enabled());
        let s = sink(t0);
        hub.start(Arc::clone(&s));
        assert!(hub.enabled());
        hub.record(event(Instant::now(), "during"));
        let stopped = hub.stop(7).unwrap();
        hub.record(event(Instant::now(), "after"));
        let names = event_names(&stopped);
        assert_eq!(names, ["during"]);
        assert!(!hub.enabled());
    }

    #[test]
    fn a_correlated_profiler_takes_only_its_threads_events() {
        let hub = ProfileHub::default();
        let s = sink(Instant::now());
        s.correlated.store(true, Ordering::Release);
        hub.start(Arc::clone(&s));
        hub.record(event(Instant::now(), "outside"));
        OPEN.with(|o| o.borrow_mut().push((7, 1)));
        hub.record(event(Instant::now(), "inside"));
        OPEN.with(|o| o.borrow_mut().clear());
        let names = event_names(&s);
        assert_eq!(names, ["inside"]);
    }
}
