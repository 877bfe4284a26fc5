//! Per-run counters: which path served each run of an executable, and how often the run
//! waited for MLX (a host synchronisation).
//!
//! A *host synchronisation* is any point inside a run where the calling thread blocks until
//! MLX has computed something: the final evaluation of the outputs, a contiguous copy of an
//! output evaluated after it, and every *host read*, i.e. a step reading a computed tensor's
//! values back to the host (a `Reshape` whose shape is computed on the device, the
//! `seqlens_k` of a GroupQueryAttention, ...; each such read evaluates what it depends on). Values
//! the plan's host program computed from input shapes are on the host already and are not
//! counted. A run with no host read has exactly one synchronisation (plus one per
//! non-contiguous output); on a GPU every extra one stalls the launch pipeline.
//!
//! The counts are kept per thread (a run executes on one thread: the caller's on the CPU, a
//! lane worker's on the GPU), read as differences around the run, so nesting is harmless.

use std::cell::Cell;

use crate::compiled::CompileSlot;

/// The path that served one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunPath {
    /// The shapeless compiled decode closure (sequence length 1).
    DecodeCompiled,
    /// A compiled prefill closure (sequence length > 1, keyed by input shapes).
    PrefillCompiled,
    /// A compiled closure of the general slot (keyed by input shapes).
    GeneralCompiled,
    /// Eager interpretation of the steps (compile off, a plan that reads values back to the
    /// host, a decode-shaped run of a shape-keyed plan, or an empty GPU run kept on the CPU).
    Eager,
}

impl RunPath {
    /// A short stable name (`decode`, `prefill`, `general`, `eager`) for logs and traces.
    pub fn name(self) -> &'static str {
        match self {
            RunPath::DecodeCompiled => "decode",
            RunPath::PrefillCompiled => "prefill",
            RunPath::GeneralCompiled => "general",
            RunPath::Eager => "eager",
        }
    }
}

impl From<CompileSlot> for RunPath {
    fn from(slot: CompileSlot) -> Self {
        match slot {
            CompileSlot::Decode => RunPath::DecodeCompiled,
            CompileSlot::Prefill => RunPath::PrefillCompiled,
            CompileSlot::General => RunPath::GeneralCompiled,
        }
    }
}

/// Where one run's wall time went, in microseconds, phase by phase.
///
/// `handoff` is the wait for the lane's thread (the hand-off to a GPU lane's worker, or the
/// lock of a busy lane); `bind` wraps the inputs as MLX arrays and evaluates the plan's host
/// program; `dispatch` builds (eager) or calls (compiled) the MLX graph, which only records
/// work; `eval` waits for MLX to compute the outputs; `finish` makes them row-contiguous and
/// hands them over. On a GPU, `dispatch` + the host side of `eval` is the EP's launch cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunPhases {
    /// Waiting for the lane's thread.
    pub handoff_us: u32,
    /// Binding inputs and the host program.
    pub bind_us: u32,
    /// Building or calling the MLX graph.
    pub dispatch_us: u32,
    /// Waiting for MLX to evaluate the outputs.
    pub eval_us: u32,
    /// Contiguous outputs and hand-over.
    pub finish_us: u32,
}

impl RunPhases {
    /// The phases as `(name, microseconds)` pairs, in order, for traces and logs.
    pub fn named(&self) -> [(&'static str, u32); 5] {
        [
            ("handoff_us", self.handoff_us),
            ("bind_us", self.bind_us),
            ("dispatch_us", self.dispatch_us),
            ("eval_us", self.eval_us),
            ("finish_us", self.finish_us),
        ]
    }
}

/// Microseconds since `since`, saturating.
pub(crate) fn micros_since(since: std::time::Instant) -> u32 {
    u32::try_from(since.elapsed().as_micros()).unwrap_or(u32::MAX)
}

/// What one run did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunRecord {
    /// The path that served it.
    pub path: RunPath,
    /// Host synchronisations inside the run, the final evaluation included.
    pub host_syncs: u32,
    /// Reads of computed tensor values back to the host (each is also a synchronisation).
    pub host_reads: u32,
    /// Where its time went.
    pub phases: RunPhases,
}

/// Counters over all runs of an executable (see [`crate::Executable::run_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Successful runs.
    pub runs: u64,
    /// Runs served by the compiled decode closure.
    pub decode_compiled: u64,
    /// Runs served by a compiled prefill closure.
    pub prefill_compiled: u64,
    /// Runs served by a compiled general closure.
    pub general_compiled: u64,
    /// Runs interpreted eagerly.
    pub eager: u64,
    /// Host synchronisations over all runs.
    pub host_syncs: u64,
    /// Host reads over all runs.
    pub host_reads: u64,
    /// The most host synchronisations one run took.
    pub max_host_syncs: u32,
    /// The latest run.
    pub last: Option<RunRecord>,
}

impl RunStats {
    /// Adds one run.
    pub(crate) fn record(&mut self, r: RunRecord) {
        self.runs += 1;
        match r.path {
            RunPath::DecodeCompiled => self.decode_compiled += 1,
            RunPath::PrefillCompiled => self.prefill_compiled += 1,
            RunPath::GeneralCompiled => self.general_compiled += 1,
            RunPath::Eager => self.eager += 1,
        }
        self.host_syncs += u64::from(r.host_syncs);
        self.host_reads += u64::from(r.host_reads);
        self.max_host_syncs = self.max_host_syncs.max(r.host_syncs);
        self.last = Some(r);
    }

    /// Mean host synchronisations per run (0 before the first run).
    pub fn syncs_per_run(&self) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            self.host_syncs as f64 / self.runs as f64
        }
    }

    /// Mean host reads per run (0 before the first run).
    pub fn reads_per_run(&self) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            self.host_reads as f64 / self.runs as f64
        }
    }

    /// One line for logs: `runs 12 (decode 0, prefill 1, general 0, eager 11); host syncs
    /// 3.00/run (max 3), host reads 2.00/run`.
    pub fn summary(&self) -> String {
        format!(
            "runs {} (decode {}, prefill {}, general {}, eager {}); host syncs {:.2}/run (max {}), host reads {:.2}/run",
            self.runs,
            self.decode_compiled,
            self.prefill_compiled,
            self.general_compiled,
            self.eager,
            self.syncs_per_run(),
            self.max_host_syncs,
            self.reads_per_run()
        )
    }
}

thread_local! {
    /// `(host syncs, host reads)` on this thread since it started; only ever increases.
    static COUNTS: Cell<(u32, u32)> = const { Cell::new((0, 0)) };
}

/// Notes a read of a computed tensor's values back to the host (a synchronisation too).
pub(crate) fn note_host_read() {
    COUNTS.with(|c| {
        let (s, r) = c.get();
        c.set((s.wrapping_add(1), r.wrapping_add(1)));
    });
}

/// Notes a synchronisation that is not a host read (the final evaluation of a run).
pub(crate) fn note_sync() {
    COUNTS.with(|c| {
        let (s, r) = c.get();
        c.set((s.wrapping_add(1), r));
    });
}

/// Counts the synchronisations of one run on this thread: made at its start, read at its end.
pub(crate) struct RunCounter {
    start: (u32, u32),
}

impl RunCounter {
    /// Starts counting.
    pub(crate) fn start() -> RunCounter {
        RunCounter {
            start: COUNTS.with(Cell::get),
        }
    }

    /// The run's record, for a run served by `path` that spent `phases`.
    pub(crate) fn finish(&self, path: RunPath, phases: RunPhases) -> RunRecord {
        let (s, r) = COUNTS.with(Cell::get);
        RunRecord {
            path,
            host_syncs: s.wrapping_sub(self.start.0),
            host_reads: r.wrapping_sub(self.start.1),
            phases,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_differences_and_nest() {
        let outer = RunCounter::start();
        note_host_read();
        let inner = RunCounter::start();
        note_sync();
        assert_eq!(
            inner.finish(RunPath::Eager, RunPhases::default()),
            RunRecord {
                path: RunPath::Eager,
                host_syncs: 1,
                host_reads: 0,
                phases: RunPhases::default(),
            }
        );
        let r = outer.finish(RunPath::GeneralCompiled, RunPhases::default());
        assert_eq!((r.host_syncs, r.host_reads), (2, 1));
    }

    #[test]
    fn stats_add_runs_by_path() {
        let mut s = RunStats::default();
        assert_eq!(s.syncs_per_run(), 0.0);
        for (path, syncs, reads) in [
            (RunPath::Eager, 3, 2),
            (RunPath::DecodeCompiled, 1, 0),
            (RunPath::Eager, 5, 4),
        ] {
            s.record(RunRecord {
                path,
                host_syncs: syncs,
                host_reads: reads,
                phases: RunPhases::default(),
            });
        }
        assert_eq!((s.runs, s.eager, s.decode_compiled), (3, 2, 1));
        assert_eq!((s.host_syncs, s.host_reads, s.max_host_syncs), (9, 6, 5));
        assert_eq!(s.last.map(|l| l.host_syncs), Some(5));
        assert_eq!(
            s.summary(),
            "runs 3 (decode 1, prefill 0, general 0, eager 2); host syncs 3.00/run (max 5), host reads 2.00/run"
        );
    }
}
