//! The MLX streams runs execute on: a few process-wide *lanes*, each with a CPU stream behind a
//! lock and, when there is a GPU, a worker thread that owns the lane's GPU stream.
//!
//! MLX 0.32's ordinary streams are thread-affine: a stream made on one thread can't be
//! evaluated on from another ("There is no Stream(cpu, 0) in current thread"), and every
//! thread that asks for its default stream gets a new one, with a CPU worker thread that stays
//! after the thread exits. ORT, though, calls `Run` from whatever thread its caller uses
//! (thread pools, a thread per request). So runs don't use the calling thread's streams: an
//! executable is given a lane when it is made, and each run takes the lane:
//!
//! - **CPU runs** take the lane's lock, make the lane's CPU stream the calling thread's default
//!   (so MLX code that asks for "the default stream", compiled closures included, gets it) and
//!   run there. The stream is made with `mlx_stream_new_thread_unsafe`, usable from any
//!   thread; the lock provides the one-thread-at-a-time use MLX leaves to the caller.
//! - **GPU runs** are handed to the lane's worker thread, which made its GPU and CPU streams
//!   itself and runs every job on them, while the calling thread waits. On MLX's CUDA backend
//!   a thread-unsafe GPU stream keeps its command encoder in a static map that is destroyed
//!   after the CUDA driver has shut down at process exit (the process then aborts, see
//!   docs/usage.md); a stream made by a thread keeps its encoder in that thread's storage. The
//!   workers never exit, so their CUDA objects are never torn down behind the driver's back,
//!   and every CUDA object the EP uses lives on one thread, as the backend expects.
//!
//! The number of lanes bounds MLX's worker threads and the number of runs that execute at once.
//! `ORTMLX_LANE_WORKERS=1` gives the lanes worker threads without a GPU too (CPU runs then take
//! the worker path; for tests and measurements of the hand-over).

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use mlx::{Device, Stream};
use parking_lot::Mutex;

use crate::{DeviceKind, RuntimeError, gpu_available};

/// The streams a job runs on; both are the running thread's defaults while it runs.
pub(crate) struct LaneStreams {
    cpu: Stream,
    gpu: Option<Stream>,
}

impl LaneStreams {
    /// The stream of `device` (the CPU one when there is no GPU).
    pub(crate) fn stream(&self, device: DeviceKind) -> &Stream {
        match (device, &self.gpu) {
            (DeviceKind::Gpu, Some(gpu)) => gpu,
            _ => &self.cpu,
        }
    }

    fn make_thread_defaults(&self) -> Result<(), RuntimeError> {
        self.cpu.set_as_thread_default()?;
        if let Some(gpu) = &self.gpu {
            gpu.set_as_thread_default()?;
        }
        Ok(())
    }
}

/// A job for a lane's worker, its borrows erased (see [`LaneWorker::run`]).
type Job = Box<dyn FnOnce(&LaneStreams) + Send + 'static>;

/// The channels to a lane's worker thread.
struct LaneWorker {
    jobs: mpsc::Sender<Job>,
    /// One message per finished (or dropped) job.
    done: mpsc::Receiver<()>,
}

impl LaneWorker {
    /// Starts the worker thread; it makes its streams (a GPU one when `gpu`) before taking
    /// jobs.
    fn start(index: usize, gpu: bool) -> Result<LaneWorker, RuntimeError> {
        let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), RuntimeError>>();
        std::thread::Builder::new()
            .name(format!("ortmlx-lane-{index}"))
            .spawn(move || {
                // `done` is declared before `jobs`, so queued jobs are dropped before a waiting
                // caller can see the channel close.
                let done = done_tx;
                let jobs = jobs_rx;
                let streams = LaneStreams {
                    cpu: Stream::new(&Device::cpu()),
                    gpu: gpu.then(|| Stream::new(&Device::gpu())),
                };
                let ready = streams.make_thread_defaults();
                let failed = ready.is_err();
                let _ = ready_tx.send(ready);
                if failed {
                    return;
                }
                while let Ok(job) = jobs.recv() {
                    job(&streams);
                    if done.send(()).is_err() {
                        break;
                    }
                }
                // The streams (and MLX's per-thread state) are deliberately never released:
                // the lanes live as long as the process (see the module doc).
                std::mem::forget(streams);
            })
            .map_err(|e| RuntimeError(format!("cannot start a lane worker thread: {e}")))?;
        ready_rx
            .recv()
            .map_err(|_| RuntimeError("the lane worker thread stopped while starting".into()))??;
        Ok(LaneWorker {
            jobs: jobs_tx,
            done: done_rx,
        })
    }

    /// Runs `f` on the worker thread and waits for it; a panic in `f` is resumed here.
    fn run<R: Send>(&self, f: impl FnOnce(&LaneStreams) -> R + Send) -> Result<R, RuntimeError> {
        let mut result: Option<std::thread::Result<R>> = None;
        let slot = &mut result;
        let job: Box<dyn FnOnce(&LaneStreams) + Send + '_> = Box::new(move |streams| {
            *slot = Some(catch_unwind(AssertUnwindSafe(|| f(streams))));
        });
        // SAFETY: the job borrows this stack frame (`result`, and whatever `f` borrows). It is
        // either returned by a failed `send` (and dropped here) or run or dropped by the worker
        // before the worker answers on `done` or drops `done`'s sender (which it does only after
        // dropping its queue of jobs); this function returns only after one of those, so the
        // borrows outlive every use. The caller holds the lane's lock, so no other job is
        // queued or answered in between.
        let job: Job = unsafe { std::mem::transmute(job) };
        if self.jobs.send(job).is_err() {
            return Err(RuntimeError("the lane's worker thread has stopped".into()));
        }
        if self.done.recv().is_err() {
            return Err(RuntimeError("the lane's worker thread has stopped".into()));
        }
        match result {
            Some(Ok(value)) => Ok(value),
            Some(Err(panic)) => resume_unwind(panic),
            None => Err(RuntimeError(
                "the lane's worker thread dropped a run".into(),
            )),
        }
    }
}

/// One lane: a CPU stream for runs on the calling thread and, with a GPU, a worker thread.
pub(crate) struct Lane {
    cpu: Mutex<LaneStreams>,
    worker: Option<Mutex<LaneWorker>>,
}

impl Lane {
    fn new(index: usize) -> Lane {
        let gpu = gpu_available();
        let worker = if gpu || workers_without_gpu() {
            match LaneWorker::start(index, gpu) {
                Ok(worker) => Some(Mutex::new(worker)),
                Err(e) => {
                    log::warn!("lane {index}: {e}; its runs use the CPU stream");
                    None
                }
            }
        } else {
            None
        };
        Lane {
            cpu: Mutex::new(LaneStreams {
                cpu: Stream::new_thread_unsafe(&Device::cpu()),
                gpu: None,
            }),
            worker,
        }
    }

    /// Runs `f` on the lane's streams for `device`: GPU runs on the lane's worker thread,
    /// CPU runs (and GPU runs when no worker could start) on the calling thread.
    pub(crate) fn run<R: Send>(
        &self,
        device: DeviceKind,
        f: impl FnOnce(&LaneStreams) -> R + Send,
    ) -> Result<R, RuntimeError> {
        if (device == DeviceKind::Gpu || workers_without_gpu())
            && let Some(worker) = &self.worker
        {
            return worker.lock().run(f);
        }
        let streams = self.cpu.lock();
        streams.make_thread_defaults()?;
        Ok(f(&streams))
    }
}

/// `ORTMLX_LANE_WORKERS=1`: worker threads for the lanes without a GPU too.
fn workers_without_gpu() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| crate::config().lane_workers)
}

/// The number of lanes: the machine's parallelism, at most 8 (`ORTMLX_LANES` overrides).
fn lane_count() -> usize {
    crate::config()
        .lanes
        .filter(|&n| n > 0)
        .unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1)
                .min(8)
        })
        .min(64)
}

fn lanes() -> &'static [Lane] {
    static LANES: OnceLock<Vec<Lane>> = OnceLock::new();
    LANES.get_or_init(|| (0..lane_count()).map(Lane::new).collect())
}

/// The lane for a new executable (round robin).
pub(crate) fn assign() -> &'static Lane {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let all = lanes();
    &all[NEXT.fetch_add(1, Ordering::Relaxed) % all.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_runs_borrowing_jobs_on_its_own_thread_and_survives_a_panic() {
        let worker = LaneWorker::start(99, false).unwrap();
        let caller = std::thread::current().id();
        let data = vec![1.0f32, 2.0, 3.0];
        let (sum, thread) = worker
            .run(|streams| {
                let a = mlx::Array::from_slice(&data, &[3]).unwrap();
                let s = mlx::ops::add(&a, &a, streams.stream(DeviceKind::Cpu)).unwrap();
                s.eval().unwrap();
                (s.to_vec::<f32>().unwrap(), std::thread::current().id())
            })
            .unwrap();
        assert_eq!(sum, [2.0, 4.0, 6.0]);
        assert_ne!(thread, caller);
        let panicked = catch_unwind(AssertUnwindSafe(|| {
            worker.run(|_| -> () { panic!("job failed") })
        }));
        assert!(panicked.is_err());
        assert_eq!(worker.run(|_| data.len()).unwrap(), 3);
    }
}
