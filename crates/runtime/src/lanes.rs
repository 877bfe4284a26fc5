//! The MLX streams runs execute on: a few process-wide *lanes*, each a thread-unsafe CPU
//! stream (and GPU stream, when there is a GPU) behind a lock.
//!
//! MLX 0.32's ordinary streams are thread-affine: a stream made on one thread can't be
//! evaluated on from another ("There is no Stream(cpu, 0) in current thread"), and every
//! thread that asks for its default stream gets a new one, with a CPU worker thread that stays
//! after the thread exits. ORT, though, calls `Run` from whatever thread its caller uses
//! (thread pools, a thread per request). So runs don't use thread streams: an executable is
//! given a lane when it is made, and each run takes the lane's lock, makes the lane's streams
//! the calling thread's defaults (so MLX code that asks for "the default stream", compiled
//! closures included, gets them) and runs on them. Streams made with
//! `mlx_stream_new_thread_unsafe` work from any thread; the lock provides the one-thread-at-a-
//! time use MLX leaves to the caller. The number of lanes bounds MLX's worker threads and the
//! number of runs that execute at once.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};

use mlx::{Device, Stream};
use parking_lot::{Mutex, MutexGuard};

use crate::{DeviceKind, RuntimeError, gpu_available};

/// One lane: its streams and the lock that serialises their use.
pub(crate) struct Lane {
    cpu: Stream,
    gpu: Option<Stream>,
    lock: Mutex<()>,
}

// SAFETY: the streams are thread-unsafe MLX streams (usable from any thread); every use goes
// through `Lane::enter`, whose lock keeps it to one thread at a time.
unsafe impl Sync for Lane {}

/// The lane's streams, held for one run (the lock is released on drop).
pub(crate) struct LaneGuard<'a> {
    lane: &'a Lane,
    _lock: MutexGuard<'a, ()>,
}

impl LaneGuard<'_> {
    /// The stream of `device` (the CPU one when there is no GPU).
    pub(crate) fn stream(&self, device: DeviceKind) -> &Stream {
        match (device, &self.lane.gpu) {
            (DeviceKind::Gpu, Some(gpu)) => gpu,
            _ => &self.lane.cpu,
        }
    }
}

impl Lane {
    fn new() -> Lane {
        Lane {
            cpu: Stream::new_thread_unsafe(&Device::cpu()),
            gpu: gpu_available().then(|| Stream::new_thread_unsafe(&Device::gpu())),
            lock: Mutex::new(()),
        }
    }

    /// Takes the lane for a run on the calling thread and makes its streams this thread's
    /// defaults.
    pub(crate) fn enter(&self) -> Result<LaneGuard<'_>, RuntimeError> {
        let lock = self.lock.lock();
        self.cpu.set_as_thread_default()?;
        if let Some(gpu) = &self.gpu {
            gpu.set_as_thread_default()?;
        }
        Ok(LaneGuard {
            lane: self,
            _lock: lock,
        })
    }
}

/// The number of lanes: the machine's parallelism, at most 8 (`ORTMLX_LANES` overrides).
fn lane_count() -> usize {
    std::env::var("ORTMLX_LANES")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
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
    LANES.get_or_init(|| (0..lane_count()).map(|_| Lane::new()).collect())
}

/// The lane for a new executable (round robin).
pub(crate) fn assign() -> &'static Lane {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let all = lanes();
    &all[NEXT.fetch_add(1, Ordering::Relaxed) % all.len()]
}
