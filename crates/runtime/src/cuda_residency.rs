//! Where MLX's CUDA managed memory lives: handing pages the host touched back to the GPU.
//!
//! MLX's CUDA backend keeps every array the host has seen (one made from host bytes, many
//! kernel outputs, and any array whose data pointer was read) in CUDA managed memory. Pages the
//! host wrote or read last sit in host memory, and the first GPU kernel to touch them stalls on
//! a page fault while the driver migrates them (tens to hundreds of microseconds, in series).
//! That hits a run's inputs, and, worse, every buffer MLX recycles from its cache: an output
//! the host copied out, freed after the run, becomes some later kernel's output, and that kernel
//! then waits for the pages. So on GPU runs the EP asks the driver to migrate what the host
//! touched back to the GPU (an asynchronous prefetch): a run's inputs before its kernels, and
//! an output's bytes right after the host copied them out.
//!
//! The driver is reached through `libcuda.so.1`, which MLX's CUDA backend has loaded; without it
//! (MLX's CPU and Metal backends) every call is a no-op, as it is until a GPU run has bound its
//! inputs (so CPU-device sessions keep their pages). A failed prefetch (memory that is not
//! managed) is ignored: it is only a hint, and the driver API keeps no error state that MLX's
//! own CUDA checks would see.

use std::ffi::c_void;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// `CUmemLocation` of the CUDA driver API: a location type and an ordinal.
#[repr(C)]
#[derive(Clone, Copy)]
struct MemLocation {
    kind: i32,
    id: i32,
}

/// `CU_MEM_LOCATION_TYPE_DEVICE`.
const LOCATION_DEVICE: i32 = 1;

/// `cuMemPrefetchAsync_v2(ptr, bytes, location, flags, stream)`.
type PrefetchFn = unsafe extern "C" fn(u64, usize, MemLocation, u32, *mut c_void) -> i32;
/// `cuCtxGetCurrent(&ctx)` / `cuCtxSetCurrent(ctx)`.
type GetCurrentFn = unsafe extern "C" fn(*mut *mut c_void) -> i32;
type SetCurrentFn = unsafe extern "C" fn(*mut c_void) -> i32;
/// `cuDevicePrimaryCtxRetain(&ctx, device)`.
type RetainFn = unsafe extern "C" fn(*mut *mut c_void, i32) -> i32;

/// The driver entry points this module uses, and GPU 0's primary context (MLX's).
struct Driver {
    prefetch: PrefetchFn,
    get_current: GetCurrentFn,
    set_current: SetCurrentFn,
    primary: usize,
}

static DRIVER: OnceLock<Option<Driver>> = OnceLock::new();

/// Set by the first GPU run: from then on host-touched managed memory goes back to the GPU.
static GPU_RUNS: AtomicBool = AtomicBool::new(false);

/// Prefetches issued and those the driver refused, since the process started.
static ISSUED: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);

/// A symbol of a live library handle, as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the symbol's C signature.
unsafe fn symbol<F: Copy>(handle: *mut c_void, name: &std::ffi::CStr) -> Option<F> {
    // SAFETY: a lookup in a live handle; a null result is checked.
    let sym = unsafe { libc::dlsym(handle, name.as_ptr()) };
    // SAFETY: per the caller, `F` is a function pointer type of the symbol's signature.
    (!sym.is_null()).then(|| unsafe { std::mem::transmute_copy::<*mut c_void, F>(&sym) })
}

/// The CUDA driver when the process has it loaded already (MLX's CUDA backend), else `None`.
fn driver() -> Option<&'static Driver> {
    DRIVER
        .get_or_init(|| {
            // SAFETY: `dlopen` with RTLD_NOLOAD only returns a handle to a library the process
            // has loaded already; it never runs a library's initialisers. The handle is kept
            // for the life of the process.
            let handle = unsafe {
                libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD)
            };
            if handle.is_null() {
                return None;
            }
            // SAFETY: the C signatures of these driver entry points (CUDA 12.2 and newer).
            let (prefetch, get_current, set_current, retain) = unsafe {
                (
                    symbol::<PrefetchFn>(handle, c"cuMemPrefetchAsync_v2")?,
                    symbol::<GetCurrentFn>(handle, c"cuCtxGetCurrent")?,
                    symbol::<SetCurrentFn>(handle, c"cuCtxSetCurrent")?,
                    symbol::<RetainFn>(handle, c"cuDevicePrimaryCtxRetain")?,
                )
            };
            let mut primary = std::ptr::null_mut();
            // SAFETY: an out-pointer; retaining the primary context MLX already uses keeps it
            // alive (never released: the process owns it until exit).
            if unsafe { retain(&mut primary, 0) } != 0 || primary.is_null() {
                return None;
            }
            Some(Driver {
                prefetch,
                get_current,
                set_current,
                primary: primary as usize,
            })
        })
        .as_ref()
}

/// Notes that this process runs on the GPU (see [`GPU_RUNS`]).
pub(crate) fn note_gpu_run() {
    if !GPU_RUNS.load(Ordering::Relaxed) {
        GPU_RUNS.store(true, Ordering::Relaxed);
    }
}

/// Asks the driver to migrate `bytes` (MLX's managed memory) to GPU 0, on the default stream,
/// without waiting. A no-op without the CUDA driver, before the first GPU run, with
/// `ORTMLX_DISABLE_CUDA_PREFETCH=1`, for empty ranges, and for memory that is not managed.
/// Any thread may call it (the thread gets MLX's context when it has none).
pub fn to_gpu(bytes: &[u8]) {
    if bytes.is_empty() || !GPU_RUNS.load(Ordering::Relaxed) || !crate::config().cuda_prefetch() {
        return;
    }
    let Some(driver) = driver() else {
        return;
    };
    let mut current = std::ptr::null_mut();
    // SAFETY: an out-pointer; setting the primary context on a thread without one is what
    // the CUDA runtime does itself on a thread's first call.
    unsafe {
        if (driver.get_current)(&mut current) != 0 || current.is_null() {
            (driver.set_current)(driver.primary as *mut c_void);
        }
    }
    let location = MemLocation {
        kind: LOCATION_DEVICE,
        id: 0,
    };
    // SAFETY: the range is live memory the caller holds for the duration of the call; a
    // prefetch only moves pages between host and device, never changes their contents, and
    // the driver validates the range (memory that isn't managed is refused with an error
    // code, nothing else).
    let status = unsafe {
        (driver.prefetch)(
            bytes.as_ptr() as u64,
            bytes.len(),
            location,
            0,
            std::ptr::null_mut(),
        )
    };
    ISSUED.fetch_add(1, Ordering::Relaxed);
    if status != 0 {
        REFUSED.fetch_add(1, Ordering::Relaxed);
    }
}

/// Prefetches issued so far and how many of them the driver refused.
pub fn prefetch_counts() -> (u64, u64) {
    (
        ISSUED.load(Ordering::Relaxed),
        REFUSED.load(Ordering::Relaxed),
    )
}

/// Prefetches the bytes of `array` to the GPU (see [`to_gpu`]) when it is available
/// (evaluated and complete) and row-contiguous; passes over any other array. Only for arrays
/// already in managed memory (made from host bytes, or read by the host before): reading the
/// data pointer of an array in MLX's device-only memory would move it into managed memory.
pub(crate) fn managed_array_to_gpu(array: &mlx::Array) {
    if !GPU_RUNS.load(Ordering::Relaxed) || driver().is_none() {
        return;
    }
    if array.is_available().unwrap_or(false)
        && let Ok(bytes) = array.as_bytes()
    {
        to_gpu(bytes);
    }
}
