//! The `OrtEpFactory` implementation: names, devices, EP creation.

use std::ffi::{CStr, c_char};
use std::ptr;

use ort_sys::{
    OrtAllocator, OrtEpDevice, OrtHardwareDevice, OrtHardwareDeviceType, OrtKeyValuePairs,
    OrtLogger, OrtMemoryInfo, OrtSessionOptions,
};
use runtime::DeviceKind;

use crate::abi::{ORT_ABI_VERSION, OrtDataTransferImpl, OrtEp, OrtEpFactory, StatusPtr};
use crate::api::{Api, cstr_lossy, to_cstring};
use crate::device_memory::{self, MlxAllocator, MlxDataTransfer};
use crate::ep::Ep;
use crate::error::{EpError, guard, guard_value};
use crate::options::{EP_NAME, EpOptions};

const NAME: &CStr = c"MLXExecutionProvider";
const VENDOR: &CStr = c"onnxruntime-mlx-ep";
const VERSION: &CStr = {
    match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
        Ok(s) => s,
        Err(_) => c"0.0.0",
    }
};

/// The factory ORT gets from `CreateEpFactories`; the vtable is its first field.
#[repr(C)]
pub struct Factory {
    base: OrtEpFactory,
    api: Api,
    registered_name: String,
    /// The memory info registered on each EP device (null when device memory is off); it must
    /// outlive the devices, so it is released with the factory.
    memory_info: *mut OrtMemoryInfo,
}

impl Drop for Factory {
    fn drop(&mut self) {
        if !self.memory_info.is_null() {
            // SAFETY: created in `Factory::new`, released once.
            unsafe { (self.api.ort.ReleaseMemoryInfo)(self.memory_info) };
        }
    }
}

impl Factory {
    /// A factory bound to the negotiated API.
    pub fn new(api: Api, registered_name: String) -> Box<Self> {
        let memory_info = if device_memory::enabled() {
            device_memory::create_memory_info(&api).unwrap_or_else(|e| {
                log::warn!("no device memory: {e}");
                ptr::null_mut()
            })
        } else {
            log::info!("device memory off ({})", device_memory::DEVICE_MEMORY_VAR);
            ptr::null_mut()
        };
        let has_memory = !memory_info.is_null();
        Box::new(Factory {
            base: OrtEpFactory {
                ort_version_supported: ORT_ABI_VERSION,
                GetName: get_name,
                GetVendor: get_vendor,
                GetSupportedDevices: get_supported_devices,
                CreateEp: create_ep,
                ReleaseEp: release_ep,
                GetVendorId: get_vendor_id,
                GetVersion: get_version,
                ValidateCompiledModelCompatibilityInfo: Some(validate_compiled_model),
                CreateAllocator: has_memory.then_some(create_allocator),
                ReleaseAllocator: has_memory.then_some(release_allocator),
                CreateDataTransfer: create_data_transfer,
                IsStreamAware: Some(is_stream_aware),
                CreateSyncStreamForDevice: None,
            },
            api,
            registered_name,
            memory_info,
        })
    }
}

crate::abi::vtable_object!(Factory, OrtEpFactory);

unsafe extern "system" fn get_name(_this: *const OrtEpFactory) -> *const c_char {
    NAME.as_ptr()
}

unsafe extern "system" fn get_vendor(_this: *const OrtEpFactory) -> *const c_char {
    VENDOR.as_ptr()
}

unsafe extern "system" fn get_version(_this: *const OrtEpFactory) -> *const c_char {
    VERSION.as_ptr()
}

unsafe extern "system" fn get_vendor_id(_this: *const OrtEpFactory) -> u32 {
    0
}

unsafe extern "system" fn is_stream_aware(_this: *const OrtEpFactory) -> bool {
    false
}

unsafe extern "system" fn create_data_transfer(
    this: *mut OrtEpFactory,
    data_transfer: *mut *mut OrtDataTransferImpl,
) -> StatusPtr {
    guard("CreateDataTransfer", || {
        if data_transfer.is_null() {
            return Err(EpError::invalid_argument("null data transfer out-pointer"));
        }
        // SAFETY: `this` is our factory.
        let factory = unsafe { Factory::from_ptr(this) };
        log::debug!(
            "CreateDataTransfer (device memory {})",
            !factory.memory_info.is_null()
        );
        // Without device memory every value is in ORT's CPU memory: nothing to copy.
        let transfer = if factory.memory_info.is_null() {
            ptr::null_mut()
        } else {
            MlxDataTransfer::create(factory.api)
        };
        // SAFETY: ORT's out-pointer; ORT releases the instance through its Release.
        unsafe { *data_transfer = transfer };
        Ok(())
    })
}

/// `OrtCompiledModelCompatibility_EP_SUPPORTED_OPTIMAL`.
const COMPILED_MODEL_OPTIMAL: i32 = 1;
/// `OrtCompiledModelCompatibility_EP_UNSUPPORTED`.
const COMPILED_MODEL_UNSUPPORTED: i32 = 3;

/// `OrtEpFactory::ValidateCompiledModelCompatibilityInfo`: a model compiled by this EP (its
/// compatibility string, see `context`) runs only on the same EP, MLX and plan format.
unsafe extern "system" fn validate_compiled_model(
    _this: *mut OrtEpFactory,
    _devices: *const *const OrtHardwareDevice,
    _num_devices: usize,
    info: *const c_char,
    out: *mut crate::abi::OrtCompiledModelCompatibility,
) -> StatusPtr {
    guard("ValidateCompiledModelCompatibilityInfo", || {
        if out.is_null() {
            return Err(EpError::new("null compatibility out-pointer"));
        }
        // SAFETY: NUL-terminated from ORT, or null.
        let info = unsafe { cstr_lossy(info) };
        let verdict = match crate::context::check_compatibility(&info) {
            Ok(()) => COMPILED_MODEL_OPTIMAL,
            Err(why) => {
                log::warn!(
                    "{EP_NAME}: the compiled model does not fit this build ({why}); compile it again from the original ONNX model"
                );
                COMPILED_MODEL_UNSUPPORTED
            }
        };
        // SAFETY: ORT's out-pointer, checked above.
        unsafe { *out = verdict };
        Ok(())
    })
}

unsafe extern "system" fn create_allocator(
    this: *mut OrtEpFactory,
    memory_info: *const OrtMemoryInfo,
    _allocator_options: *const OrtKeyValuePairs,
    allocator: *mut *mut OrtAllocator,
) -> StatusPtr {
    guard("CreateAllocator", || {
        if allocator.is_null() {
            return Err(EpError::invalid_argument("null allocator out-pointer"));
        }
        // SAFETY: ORT's out-pointer.
        unsafe { *allocator = ptr::null_mut() };
        // SAFETY: `this` is our factory.
        let factory = unsafe { Factory::from_ptr(this) };
        // SAFETY: ORT's memory info, live during the call (or null).
        if !unsafe { device_memory::is_mlx_memory(&factory.api, memory_info) } {
            return Err(EpError::invalid_argument(
                "MLXExecutionProvider allocates only its own memory (the MLX memory info)",
            ));
        }
        let a = MlxAllocator::create(factory.api)?;
        // SAFETY: ORT's out-pointer; ORT hands the allocator back through ReleaseAllocator.
        unsafe { *allocator = a };
        Ok(())
    })
}

unsafe extern "system" fn release_allocator(
    _this: *mut OrtEpFactory,
    allocator: *mut OrtAllocator,
) {
    guard_value("ReleaseAllocator", (), || {
        if !allocator.is_null() {
            // SAFETY: made by create_allocator, released once by ORT.
            unsafe { MlxAllocator::release(allocator) };
        }
    })
}

/// `HardwareDevice_Type` read as a plain integer (no trust in unknown enum values).
fn device_type(api: &Api, device: *const OrtHardwareDevice) -> i32 {
    // SAFETY: the function returns a C enum (int); reading it as i32 is the same ABI.
    let f: unsafe extern "system" fn(*const OrtHardwareDevice) -> i32 =
        unsafe { std::mem::transmute(api.ort.HardwareDevice_Type) };
    // SAFETY: live device handle from ORT.
    unsafe { f(device) }
}

const CPU: i32 = OrtHardwareDeviceType::OrtHardwareDeviceType_CPU as i32;
const GPU: i32 = OrtHardwareDeviceType::OrtHardwareDeviceType_GPU as i32;

/// Which of the offered hardware devices this EP takes: the first GPU when MLX has a GPU
/// backend and ORT lists one, otherwise the CPU device(s).
pub fn choose_devices(types: &[i32], gpu_available: bool) -> (Vec<usize>, DeviceKind) {
    if gpu_available && let Some(i) = types.iter().position(|&t| t == GPU) {
        return (vec![i], DeviceKind::Gpu);
    }
    let cpus = types
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == CPU)
        .map(|(i, _)| i)
        .collect();
    (cpus, DeviceKind::Cpu)
}

/// Builds an `OrtKeyValuePairs` (released by the caller).
fn key_values(api: &Api, pairs: &[(&str, &str)]) -> *mut OrtKeyValuePairs {
    let mut kv: *mut OrtKeyValuePairs = ptr::null_mut();
    // SAFETY: ORT allocates the instance.
    unsafe { (api.ort.CreateKeyValuePairs)(&mut kv) };
    for (k, v) in pairs {
        let (k, v) = (to_cstring(k), to_cstring(v));
        // SAFETY: ORT copies both strings.
        unsafe { (api.ort.AddKeyValuePair)(kv, k.as_ptr(), v.as_ptr()) };
    }
    kv
}

unsafe extern "system" fn get_supported_devices(
    this: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    num_devices: usize,
    ep_devices: *mut *mut OrtEpDevice,
    max_ep_devices: usize,
    num_ep_devices: *mut usize,
) -> StatusPtr {
    guard("GetSupportedDevices", || {
        if num_ep_devices.is_null() {
            return Err(EpError::new("null num_ep_devices"));
        }
        // SAFETY: ORT's out-pointer.
        unsafe { *num_ep_devices = 0 };
        // SAFETY: `this` is our factory.
        let factory = unsafe { Factory::from_ptr(this) };
        let api = &factory.api;
        let devices: &[*const OrtHardwareDevice] = if devices.is_null() || num_devices == 0 {
            &[]
        } else {
            // SAFETY: ORT passes `num_devices` handles.
            unsafe { std::slice::from_raw_parts(devices, num_devices) }
        };
        let types: Vec<i32> = devices.iter().map(|&d| device_type(api, d)).collect();
        let (chosen, kind) = choose_devices(&types, runtime::gpu_available());
        let kind_name = match kind {
            DeviceKind::Cpu => "cpu",
            DeviceKind::Gpu => "gpu",
        };
        // ORT adds the EP version (from GetVersion) itself and refuses metadata that has one.
        // The registration name lets a caller that finds the devices (the Python package)
        // unregister the library even when someone else registered it.
        let metadata = key_values(
            api,
            &[
                ("mlx_device", kind_name),
                ("registration_name", factory.registered_name.as_str()),
            ],
        );
        let mut n = 0usize;
        let mut result = Ok(());
        for &i in chosen.iter().take(max_ep_devices) {
            let mut out: *mut OrtEpDevice = ptr::null_mut();
            // SAFETY: live handles; ORT copies the metadata.
            let st = unsafe {
                (api.ep.CreateEpDevice)(this, devices[i], metadata, ptr::null(), &mut out)
            };
            if let Err(e) = api.check(ort_sys::OrtStatusPtr(st), "CreateEpDevice") {
                result = Err(e);
                break;
            }
            if !factory.memory_info.is_null() {
                // SAFETY: the device was just made; the memory info outlives it (factory-owned).
                let st = unsafe { (api.ep.EpDevice_AddAllocatorInfo)(out, factory.memory_info) };
                if let Err(e) = api.check(ort_sys::OrtStatusPtr(st), "EpDevice_AddAllocatorInfo") {
                    // SAFETY: ours, not handed to ORT yet.
                    unsafe { (api.ep.ReleaseEpDevice)(out) };
                    result = Err(e);
                    break;
                }
            }
            // SAFETY: ORT's array has `max_ep_devices` slots; ORT owns what we put there.
            unsafe { *ep_devices.add(n) = out };
            n += 1;
        }
        // SAFETY: we created it above.
        unsafe { (api.ort.ReleaseKeyValuePairs)(metadata) };
        // SAFETY: ORT's out-pointer.
        unsafe { *num_ep_devices = n };
        log::info!(
            "{}: offering {n} {kind_name} device(s) of {} listed",
            factory.registered_name,
            devices.len()
        );
        result
    })
}

/// Reads every session config entry as (key, value) strings.
fn session_config(
    api: &Api,
    options: *const OrtSessionOptions,
) -> Result<Vec<(String, String)>, EpError> {
    if options.is_null() {
        return Ok(Vec::new());
    }
    // SAFETY: live session options; we release the copy below.
    let kv: *mut OrtKeyValuePairs = api.out(
        "GetSessionOptionsConfigEntries",
        ptr::null_mut(),
        |out| unsafe { (api.ort.GetSessionOptionsConfigEntries)(options, out) },
    )?;
    if kv.is_null() {
        return Ok(Vec::new());
    }
    let mut keys: *const *const c_char = ptr::null();
    let mut values: *const *const c_char = ptr::null();
    let mut n = 0usize;
    // SAFETY: live instance; arrays are owned by it.
    unsafe { (api.ort.GetKeyValuePairs)(kv, &mut keys, &mut values, &mut n) };
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        // SAFETY: `n` entries in each array, NUL-terminated strings.
        unsafe { out.push((cstr_lossy(*keys.add(i)), cstr_lossy(*values.add(i)))) };
    }
    // SAFETY: we own the instance.
    unsafe { (api.ort.ReleaseKeyValuePairs)(kv) };
    Ok(out)
}

unsafe extern "system" fn create_ep(
    this: *mut OrtEpFactory,
    devices: *const *const OrtHardwareDevice,
    _ep_metadata_pairs: *const *const OrtKeyValuePairs,
    num_devices: usize,
    session_options: *const OrtSessionOptions,
    logger: *const OrtLogger,
    ep: *mut *mut OrtEp,
) -> StatusPtr {
    guard("CreateEp", || {
        if ep.is_null() {
            return Err(EpError::new("null ep out-pointer"));
        }
        // SAFETY: ORT's out-pointer.
        unsafe { *ep = ptr::null_mut() };
        // SAFETY: `this` is our factory.
        let factory = unsafe { Factory::from_ptr(this) };
        let api = factory.api;
        let devices: &[*const OrtHardwareDevice] = if devices.is_null() || num_devices == 0 {
            &[]
        } else {
            // SAFETY: ORT passes `num_devices` handles.
            unsafe { std::slice::from_raw_parts(devices, num_devices) }
        };
        let default_device = if devices.iter().any(|&d| device_type(&api, d) == GPU) {
            DeviceKind::Gpu
        } else {
            DeviceKind::Cpu
        };
        let config = session_config(&api, session_options)?;
        let options = EpOptions::from_config(
            config.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            default_device,
            runtime::gpu_available(),
        )?;
        log::info!("CreateEp: {options:?}");
        apply_process_settings(&options)?;
        log::info!(
            "{EP_NAME} runs fused nodes on the {} ({})",
            match options.device {
                DeviceKind::Gpu => "GPU",
                DeviceKind::Cpu => "CPU",
            },
            if config
                .iter()
                .any(|(k, _)| k == "ep.mlxexecutionprovider.device")
            {
                "the device option"
            } else if default_device == DeviceKind::Gpu {
                "a GPU is present and ORT offered it"
            } else if runtime::gpu_available() {
                "ORT offered no GPU device"
            } else {
                "the linked MLX has no GPU backend or no GPU is present"
            }
        );
        let instance = Ep::new(api, options, logger);
        // SAFETY: ORT's out-pointer; ORT gives it back through ReleaseEp.
        unsafe { *ep = instance.into_raw() };
        Ok(())
    })
}

/// Applies the options MLX holds per process: the kernel cache (fixed by the first EP made)
/// and the allocator's limits.
fn apply_process_settings(options: &EpOptions) -> Result<(), EpError> {
    runtime::kernel_cache::configure(options.kernel_cache_dir.as_deref());
    runtime::set_memory_limits(options.memory_limit, options.cache_limit)
        .map_err(|e| EpError::new(e.to_string()))
}

unsafe extern "system" fn release_ep(_this: *mut OrtEpFactory, ep: *mut OrtEp) {
    guard_value("ReleaseEp", (), || {
        if !ep.is_null() {
            // SAFETY: made by create_ep, released once by ORT.
            drop(unsafe { Ep::from_raw(ep) });
        }
        crate::trace::flush();
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_choice() {
        let (chosen, kind) = choose_devices(&[GPU, CPU], false);
        assert_eq!((chosen, kind), (vec![1], DeviceKind::Cpu));
        let (chosen, kind) = choose_devices(&[CPU, GPU], true);
        assert_eq!((chosen, kind), (vec![1], DeviceKind::Gpu));
        let (chosen, kind) = choose_devices(&[CPU, 2], true);
        assert_eq!((chosen, kind), (vec![0], DeviceKind::Cpu));
        assert!(choose_devices(&[], true).0.is_empty());
    }

    #[test]
    fn names_are_c_strings() {
        assert_eq!(NAME.to_str().unwrap(), crate::options::EP_NAME);
        assert_eq!(VERSION.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    }
}
