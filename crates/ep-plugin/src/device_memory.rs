//! The EP's memory as ORT sees it: the memory info registered on each EP device, the allocator
//! ORT creates from it (`OrtEpFactory::CreateAllocator`), and the data transfer
//! (`OrtEpFactory::CreateDataTransfer`) that copies between it and host memory.
//!
//! The blocks are MLX buffers ([`runtime::device_memory`]). The memory is declared as a
//! CPU-type device with the EP's own vendor id ([`MLX_VENDOR_ID`]): MLX's arrays are host
//! memory on its CPU backend and CUDA managed memory (valid on the host) on its CUDA backend,
//! so ORT's CPU kernels may read and write them in place and ORT inserts no copy nodes between
//! them and this EP's nodes, while the distinct vendor makes ORT allocate this EP's outputs,
//! and the values a caller binds to this device, from this allocator.
//!
//! The price of a CPU-type device: ORT counts the EP as CPU-based and skips its device-copy
//! bookkeeping for control-flow subgraphs, so an `If` branch output that this EP allocated (an
//! output whose shape ORT can't size ahead) would never be copied into the `If`'s own output.
//! `GetCapability` therefore leaves the nodes that produce the outputs of an `If`/`Loop`/`Scan`
//! body that ORT's CPU EP runs to ORT (`ep::hold_back_output_producers`).

use std::ffi::{CStr, c_void};
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};

use ort_sys::{
    OrtAllocator, OrtAllocatorType, OrtDeviceMemoryType, OrtMemoryInfo, OrtMemoryInfoDeviceType,
    OrtSyncStream, OrtValue,
};

use crate::abi::{ORT_ABI_VERSION, OrtDataTransferImpl, OrtMemoryDevice, StatusPtr};
use crate::api::Api;
use crate::error::{EpError, guard, guard_value};

/// The vendor id of the EP's memory device (ASCII "ML"); callers bind values to the device
/// `(CPU, default memory, MLX_VENDOR_ID, 0)`.
pub const MLX_VENDOR_ID: u32 = 0x4D4C;

/// The name of the EP's memory info.
pub const MEMORY_NAME: &CStr = c"MLX";

/// Environment switch: the EP declares its device memory (allocator, data transfer, zero-copy
/// inputs and outputs) unless `ORTMLX_DEVICE_MEMORY=0`; without it every value lives in ORT's
/// CPU memory and each run copies its inputs and outputs.
pub const DEVICE_MEMORY_VAR: &str = "ORTMLX_DEVICE_MEMORY";

/// Whether the EP declares its device memory (see [`DEVICE_MEMORY_VAR`]).
pub fn enabled() -> bool {
    crate::config::Config::get().device_memory
}

/// Creates the EP's memory info (released by the caller with `ReleaseMemoryInfo`).
pub fn create_memory_info(api: &Api) -> Result<*mut OrtMemoryInfo, EpError> {
    let mut info: *mut OrtMemoryInfo = ptr::null_mut();
    api.check(
        // SAFETY: ORT copies the name; `info` receives a new instance.
        unsafe {
            (api.ort.CreateMemoryInfo_V2)(
                MEMORY_NAME.as_ptr(),
                OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_CPU,
                MLX_VENDOR_ID,
                0,
                OrtDeviceMemoryType::OrtDeviceMemoryType_DEFAULT,
                0,
                OrtAllocatorType::OrtDeviceAllocator,
                &mut info,
            )
        },
        "CreateMemoryInfo_V2",
    )?;
    if info.is_null() {
        return Err(EpError::new("CreateMemoryInfo_V2 returned no memory info"));
    }
    Ok(info)
}

/// Bytes the data transfer copied since the process started.
static TRANSFERRED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Bytes the data transfer copied since the process started.
pub fn transferred_bytes() -> u64 {
    TRANSFERRED_BYTES.load(Ordering::Relaxed)
}

/// What a memory device is, as far as copies go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// This EP's memory.
    Mlx,
    /// Plain host memory (ORT's CPU allocator, pinned memory of another EP).
    Host,
    /// Memory this EP can't reach.
    Other,
}

fn place(api: &Api, device: *const OrtMemoryDevice) -> Place {
    if device.is_null() {
        return Place::Other;
    }
    // SAFETY: a live memory device from ORT; the getters read plain fields. The enums are read
    // as the ints they are.
    let (kind, mem, vendor) = unsafe {
        let kind: unsafe extern "system" fn(*const OrtMemoryDevice) -> i32 =
            std::mem::transmute(api.ep.MemoryDevice_GetDeviceType);
        let mem: unsafe extern "system" fn(*const OrtMemoryDevice) -> i32 =
            std::mem::transmute(api.ep.MemoryDevice_GetMemoryType);
        (
            kind(device),
            mem(device),
            (api.ep.MemoryDevice_GetVendorId)(device),
        )
    };
    log::trace!("memory device: type {kind}, memory {mem}, vendor {vendor:#x}");
    const CPU: i32 = OrtMemoryInfoDeviceType::OrtMemoryInfoDeviceType_CPU as i32;
    const HOST_ACCESSIBLE: i32 = OrtDeviceMemoryType::OrtDeviceMemoryType_HOST_ACCESSIBLE as i32;
    if kind == CPU && vendor == MLX_VENDOR_ID {
        Place::Mlx
    } else if kind == CPU || mem == HOST_ACCESSIBLE {
        Place::Host
    } else {
        Place::Other
    }
}

/// True when `info` describes this EP's memory.
///
/// # Safety
/// `info` must be null or a live memory info.
pub unsafe fn is_mlx_memory(api: &Api, info: *const OrtMemoryInfo) -> bool {
    // SAFETY: a live memory info from ORT (the caller's contract).
    !info.is_null()
        && place(api, unsafe { (api.ep.MemoryInfo_GetMemoryDevice)(info) }) == Place::Mlx
}

/// An allocator over MLX buffers; the vtable is its first field.
#[repr(C)]
pub struct MlxAllocator {
    base: OrtAllocator,
    api: Api,
    /// This allocator's own memory info (it may outlive the factory's).
    info: *mut OrtMemoryInfo,
}

impl MlxAllocator {
    /// A new allocator, owned by the caller until [`MlxAllocator::release`].
    pub fn create(api: Api) -> Result<*mut OrtAllocator, EpError> {
        let info = create_memory_info(&api)?;
        let allocator = Box::new(MlxAllocator {
            base: OrtAllocator {
                version: ORT_ABI_VERSION,
                Alloc: Some(alloc),
                Free: Some(free),
                Info: Some(info_of),
                Reserve: Some(reserve),
                GetStats: None,
                AllocOnStream: None,
            },
            api,
            info,
        });
        Ok(Box::into_raw(allocator) as *mut OrtAllocator)
    }

    /// Releases an allocator made by [`MlxAllocator::create`]. Blocks still lent stay valid
    /// (they belong to the process-wide registry) until ORT frees them.
    ///
    /// # Safety
    /// `p` must come from [`MlxAllocator::create`] and be released once.
    pub unsafe fn release(p: *mut OrtAllocator) {
        // SAFETY: `base` is the first field of the #[repr(C)] struct made by `create`.
        let a = unsafe { Box::from_raw(p as *mut MlxAllocator) };
        // SAFETY: we created the memory info.
        unsafe { (a.api.ort.ReleaseMemoryInfo)(a.info) };
    }
}

unsafe extern "system" fn alloc(_this: *mut OrtAllocator, size: usize) -> *mut c_void {
    guard_value(
        "OrtAllocator::Alloc",
        ptr::null_mut(),
        || match runtime::device_memory::alloc(size) {
            Ok(p) => p as *mut c_void,
            Err(e) => {
                log::error!("device memory: allocating {size} bytes failed: {e}");
                ptr::null_mut()
            }
        },
    )
}

unsafe extern "system" fn reserve(this: *const OrtAllocator, size: usize) -> *mut c_void {
    // SAFETY: same allocator; `alloc` does not write through `this`.
    unsafe { alloc(this as *mut OrtAllocator, size) }
}

unsafe extern "system" fn free(_this: *mut OrtAllocator, p: *mut c_void) {
    guard_value("OrtAllocator::Free", (), || {
        if !p.is_null() && !runtime::device_memory::free(p as *mut u8) {
            log::error!("device memory: free of {p:?}, which is not a live block");
        }
    })
}

unsafe extern "system" fn info_of(this: *const OrtAllocator) -> *const OrtMemoryInfo {
    // SAFETY: `this` is an MlxAllocator (vtable first).
    unsafe { (*(this as *const MlxAllocator)).info }
}

/// The data transfer between this EP's memory and host memory; the vtable is its first field.
#[repr(C)]
pub struct MlxDataTransfer {
    base: OrtDataTransferImpl,
    api: Api,
}

impl MlxDataTransfer {
    /// A new instance; ORT releases it through its `Release`.
    pub fn create(api: Api) -> *mut OrtDataTransferImpl {
        Box::into_raw(Box::new(MlxDataTransfer {
            base: OrtDataTransferImpl {
                ort_version_supported: ORT_ABI_VERSION,
                Release: release_transfer,
                CanCopy: can_copy,
                CopyTensors: copy_tensors,
            },
            api,
        })) as *mut OrtDataTransferImpl
    }
}

unsafe extern "system" fn release_transfer(this: *mut OrtDataTransferImpl) {
    guard_value("OrtDataTransferImpl::Release", (), || {
        if !this.is_null() {
            // SAFETY: made by `MlxDataTransfer::create`, released once by ORT.
            drop(unsafe { Box::from_raw(this as *mut MlxDataTransfer) });
        }
    })
}

/// Whether a copy between the two places is this transfer's: one side is MLX memory and the
/// other is MLX or host memory.
fn copies(src: Place, dst: Place) -> bool {
    matches!(
        (src, dst),
        (Place::Mlx, Place::Mlx | Place::Host) | (Place::Host, Place::Mlx)
    )
}

unsafe extern "system" fn can_copy(
    this: *const OrtDataTransferImpl,
    src: *const OrtMemoryDevice,
    dst: *const OrtMemoryDevice,
) -> bool {
    guard_value("OrtDataTransferImpl::CanCopy", false, || {
        // SAFETY: `this` is ours.
        let api = unsafe { &(*(this as *const MlxDataTransfer)).api };
        let (from, to) = (place(api, src), place(api, dst));
        log::trace!("data transfer: CanCopy({from:?} -> {to:?})");
        copies(from, to)
    })
}

/// Element type and byte size of a tensor value.
///
/// # Safety
/// `v` must be a live value.
unsafe fn tensor_bytes(api: &Api, v: *const OrtValue, what: &str) -> Result<usize, EpError> {
    let mut is_tensor = 0i32;
    // SAFETY: live value.
    api.check(unsafe { (api.ort.IsTensor)(v, &mut is_tensor) }, "IsTensor")?;
    if is_tensor == 0 {
        return Err(EpError::invalid_argument(format!(
            "{what} is not a tensor; only tensors live in MLX memory"
        )));
    }
    // SAFETY: live tensor value.
    let (dtype, _) = unsafe { crate::compute::value_type(api, v) }
        .map_err(|e| e.context(format!("{what} (MLX memory holds no strings)")))?;
    if dtype == onnx_ir::DataType::String {
        return Err(EpError::invalid_argument(format!(
            "{what} is a string tensor; MLX memory holds no strings"
        )));
    }
    // SAFETY: live tensor value.
    let size = api.out("GetTensorSizeInBytes", 0usize, |out| unsafe {
        (api.ort.GetTensorSizeInBytes)(v, out)
    })?;
    Ok(size)
}

/// Copies string tensor `src` into `dst` element by element (ORT's string API; the elements
/// are `std::string`s in host-addressable memory on both sides), returning the bytes copied;
/// `None` when `src` is not a string tensor.
///
/// # Safety
/// `src` and `dst` must be live values.
unsafe fn copy_strings(
    api: &Api,
    src: *const OrtValue,
    dst: *mut OrtValue,
    i: usize,
) -> Result<Option<usize>, EpError> {
    let mut is_tensor = 0i32;
    // SAFETY: live value.
    api.check(
        unsafe { (api.ort.IsTensor)(src, &mut is_tensor) },
        "IsTensor",
    )?;
    if is_tensor == 0 {
        return Ok(None);
    }
    // SAFETY: live tensor value.
    let (dtype, dims) = unsafe { crate::compute::value_type(api, src) }?;
    if dtype != onnx_ir::DataType::String {
        return Ok(None);
    }
    // SAFETY: live value.
    let (to_dtype, to_dims) = unsafe { crate::compute::value_type(api, dst) }?;
    if to_dtype != dtype || to_dims != dims {
        return Err(EpError::invalid_argument(format!(
            "copy #{i}: a string tensor {dims:?} into a {to_dtype} tensor {to_dims:?}"
        )));
    }
    // SAFETY: live string tensor of these dims.
    let t = unsafe { crate::strings::read_strings(api, src, &dims) }?;
    let elements = t.strings().unwrap_or_default();
    // SAFETY: a live string tensor of the same element count.
    unsafe { crate::strings::write_strings(api, dst, &elements) }?;
    Ok(Some(elements.iter().map(|e| e.len()).sum()))
}

unsafe extern "system" fn copy_tensors(
    this: *mut OrtDataTransferImpl,
    src_tensors: *const *const OrtValue,
    dst_tensors: *mut *mut OrtValue,
    _streams: *mut *mut OrtSyncStream,
    num_tensors: usize,
) -> StatusPtr {
    guard("OrtDataTransferImpl::CopyTensors", || {
        // SAFETY: `this` is ours.
        let api = unsafe { &(*(this as *const MlxDataTransfer)).api };
        if num_tensors == 0 {
            return Ok(());
        }
        if src_tensors.is_null() || dst_tensors.is_null() {
            return Err(EpError::invalid_argument("null tensor arrays"));
        }
        let mut span = crate::trace::span("data_transfer", || "CopyTensors".to_string());
        let mut total = 0usize;
        for i in 0..num_tensors {
            // SAFETY: ORT passes `num_tensors` values in each array.
            let (src, dst) = unsafe { (*src_tensors.add(i), *dst_tensors.add(i)) };
            if src.is_null() || dst.is_null() {
                return Err(EpError::invalid_argument(format!(
                    "tensor pair #{i} is null"
                )));
            }
            // SAFETY: live values.
            if let Some(n) = unsafe { copy_strings(api, src, dst, i) }? {
                total += n;
                continue;
            }
            // SAFETY: live values.
            let n = unsafe { tensor_bytes(api, src, "the copy's source") }?;
            // SAFETY: live values.
            let m = unsafe { tensor_bytes(api, dst, "the copy's destination") }?;
            if n != m {
                return Err(EpError::invalid_argument(format!(
                    "copy #{i}: the source has {n} bytes, the destination {m}"
                )));
            }
            if n == 0 {
                continue;
            }
            let mut from: *const c_void = ptr::null();
            let mut to: *mut c_void = ptr::null_mut();
            // SAFETY: live tensor values.
            api.check(
                unsafe { (api.ort.GetTensorData)(src, &mut from) },
                "GetTensorData",
            )?;
            api.check(
                // SAFETY: as above.
                unsafe { (api.ort.GetTensorMutableData)(dst, &mut to) },
                "GetTensorMutableData",
            )?;
            if from.is_null() || to.is_null() {
                return Err(EpError::new(format!("copy #{i}: a tensor has no data")));
            }
            // Both sides are host-addressable (MLX memory is host or CUDA managed memory, and
            // every MLX computation is evaluated before its run returns). `copy` allows overlap.
            // SAFETY: `n` bytes at each address, checked above.
            unsafe { ptr::copy(from as *const u8, to as *mut u8, n) };
            total += n;
        }
        TRANSFERRED_BYTES.fetch_add(total as u64, Ordering::Relaxed);
        if let Some(span) = span.as_mut() {
            span.arg("tensors", num_tensors);
            span.arg("bytes", total);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_mlx_memory_copies_are_taken() {
        assert!(copies(Place::Host, Place::Mlx));
        assert!(copies(Place::Mlx, Place::Host));
        assert!(copies(Place::Mlx, Place::Mlx));
        assert!(!copies(Place::Host, Place::Host));
        assert!(!copies(Place::Other, Place::Mlx));
        assert!(!copies(Place::Mlx, Place::Other));
    }

    #[test]
    fn allocator_layout_is_api_23() {
        use std::mem::{offset_of, size_of};
        const P: usize = size_of::<*const ()>();
        crate::abi::assert_slots!(OrtAllocator, from P, [
            Alloc,
            Free,
            Info,
            Reserve,
            GetStats,
            AllocOnStream,
        ]);
        assert_eq!(offset_of!(MlxAllocator, base), 0);
        assert_eq!(offset_of!(MlxDataTransfer, base), 0);
    }
}
