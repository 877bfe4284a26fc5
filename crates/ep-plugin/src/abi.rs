//! The plugin-EP ABI structs of ONNX Runtime 1.23 (`onnxruntime_ep_c_api.h`).
//!
//! `ort-sys` declares these types opaque, so they are defined here, member for member in the
//! order of ORT 1.23's header (each member's `\since` comment there says 1.22 or 1.23), except
//! `OrtEp`, which has the members up to 1.25 (`IsConcurrentRunSupported` of 1.24, `Sync` and
//! `CreateProfiler` of 1.25, as ORT 1.27.1's header orders them) and declares the host's
//! version up to 1.25 ([`ep_version_for_host`]), and the profiler struct of 1.25
//! ([`OrtEpProfilerImpl`]). ORT reads only the members that existed at the version an
//! implementation declares in `ort_version_supported`, so each struct must end exactly where
//! that version's does: declaring a higher version than the shape makes ORT read past the end
//! (measured: segfault on 1.31).
//!
//! Function pointers that ORT treats as optional (it checks them for null before calling) are
//! `Option`s; the rest are plain function pointers so they can't be left null by mistake.
//! Layouts are pinned by the tests at the bottom of this file.

#![allow(non_snake_case)]

use std::ffi::{c_char, c_int, c_void};

use ort_sys::{
    OrtAllocator, OrtDeviceMemoryType, OrtEpDevice, OrtGraph, OrtHardwareDevice, OrtKernelContext,
    OrtKeyValuePairs, OrtLogger, OrtMemoryInfo, OrtMemoryInfoDeviceType, OrtNode, OrtRunOptions,
    OrtSessionOptions, OrtStatus, OrtSyncStream, OrtValue,
};

/// The ORT API version whose struct shapes this crate implements; every struct declares it in
/// `ort_version_supported`, and it is the version of `OrtApi` requested from the host.
pub const ORT_ABI_VERSION: u32 = 23;

const _: () = assert!(ort_sys::ORT_API_VERSION == ORT_ABI_VERSION);

/// A status pointer as ORT's C API returns it (null means success).
pub type StatusPtr = *mut OrtStatus;

/// `OrtCompiledModelCompatibility` (an `int`-sized C enum).
pub type OrtCompiledModelCompatibility = c_int;

/// `OrtEpDataLayout` (an `int`-sized C enum): 0 = NCHW, 1 = NHWC.
pub type OrtEpDataLayout = c_int;

macro_rules! opaque {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
        }
    )*};
}

opaque! {
    /// Opaque (1.25): a profiling event, made by `OrtEpApi::CreateProfilingEvent`.
    OrtProfilingEvent;
    /// Opaque (1.25): where `OrtEpProfilerImpl::EndProfiling` adds the EP's events.
    OrtProfilingEventsContainer;
    /// Opaque: the set of nodes an EP claims in `GetCapability`.
    OrtEpGraphSupportInfo;
    /// Opaque: wraps `onnxruntime::OrtDevice`.
    OrtMemoryDevice;
    /// Opaque: context handed to `OrtNodeComputeInfo::CreateState`.
    OrtNodeComputeContext;
}

/// `OrtDataTransferImpl` (since 1.23): device copies an EP provides.
#[repr(C)]
pub struct OrtDataTransferImpl {
    /// ORT API version the implementation was built for.
    pub ort_version_supported: u32,
    /// Releases the instance.
    pub Release: unsafe extern "system" fn(this_ptr: *mut OrtDataTransferImpl),
    /// Whether this implementation copies between the two devices.
    pub CanCopy: unsafe extern "system" fn(
        this_ptr: *const OrtDataTransferImpl,
        src_memory_device: *const OrtMemoryDevice,
        dst_memory_device: *const OrtMemoryDevice,
    ) -> bool,
    /// Copies `num_tensors` tensors.
    pub CopyTensors: unsafe extern "system" fn(
        this_ptr: *mut OrtDataTransferImpl,
        src_tensors: *const *const OrtValue,
        dst_tensors: *mut *mut OrtValue,
        streams: *mut *mut OrtSyncStream,
        num_tensors: usize,
    ) -> StatusPtr,
}

/// `OrtSyncNotificationImpl` (since 1.23).
#[repr(C)]
pub struct OrtSyncNotificationImpl {
    /// ORT API version the implementation was built for.
    pub ort_version_supported: u32,
    /// Releases the instance.
    pub Release: unsafe extern "system" fn(this_ptr: *mut OrtSyncNotificationImpl),
    /// Activates the notification.
    pub Activate: unsafe extern "system" fn(this_ptr: *mut OrtSyncNotificationImpl) -> StatusPtr,
    /// Device-side wait.
    pub WaitOnDevice: unsafe extern "system" fn(
        this_ptr: *mut OrtSyncNotificationImpl,
        consumer_stream: *mut OrtSyncStream,
    ) -> StatusPtr,
    /// Host-side wait.
    pub WaitOnHost: unsafe extern "system" fn(this_ptr: *mut OrtSyncNotificationImpl) -> StatusPtr,
}

/// `OrtSyncStreamImpl` (since 1.23).
#[repr(C)]
pub struct OrtSyncStreamImpl {
    /// ORT API version the implementation was built for.
    pub ort_version_supported: u32,
    /// Releases the instance.
    pub Release: unsafe extern "system" fn(this_ptr: *mut OrtSyncStreamImpl),
    /// The native stream handle.
    pub GetHandle: unsafe extern "system" fn(this_ptr: *mut OrtSyncStreamImpl) -> *mut c_void,
    /// Creates a notification on the stream.
    pub CreateNotification: unsafe extern "system" fn(
        this_ptr: *mut OrtSyncStreamImpl,
        notification: *mut *mut OrtSyncNotificationImpl,
    ) -> StatusPtr,
    /// Flushes the stream.
    pub Flush: unsafe extern "system" fn(this_ptr: *mut OrtSyncStreamImpl) -> StatusPtr,
    /// Called at the end of a session run.
    pub OnSessionRunEnd: unsafe extern "system" fn(this_ptr: *mut OrtSyncStreamImpl) -> StatusPtr,
}

/// `OrtProfilingEventCategory` (an `int`-sized C enum, since 1.25): 0 session, 1 node, 2
/// kernel, 3 API.
pub type OrtProfilingEventCategory = c_int;

/// `OrtProfilingEventCategory_SESSION`.
pub const PROFILING_CATEGORY_SESSION: OrtProfilingEventCategory = 0;
/// `OrtProfilingEventCategory_KERNEL`.
pub const PROFILING_CATEGORY_KERNEL: OrtProfilingEventCategory = 2;

/// `OrtEpProfilerImpl` (since 1.25): an EP's part in ORT's profiler, made by
/// `OrtEp::CreateProfiler`. ORT calls `StartProfiling` once, `StartEvent`/`StopEvent` around
/// its own events (on the thread that runs them), `EndProfiling` to collect the EP's events,
/// then `Release`.
#[repr(C)]
pub struct OrtEpProfilerImpl {
    /// ORT API version the implementation was built for.
    pub ort_version_supported: u32,
    /// Releases the instance.
    pub Release: unsafe extern "system" fn(this_ptr: *mut OrtEpProfilerImpl),
    /// Profiling starts; the offset is ORT's clock since its own profiling start.
    pub StartProfiling: unsafe extern "system" fn(
        this_ptr: *mut OrtEpProfilerImpl,
        ep_profiling_start_offset_ns: i64,
    ) -> StatusPtr,
    /// An ORT event starts on the calling thread; optional.
    pub StartEvent: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpProfilerImpl,
            ort_event_correlation_id: u64,
        ) -> StatusPtr,
    >,
    /// The ORT event ends; optional.
    pub StopEvent: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpProfilerImpl,
            ort_event_correlation_id: u64,
            ort_event: *const OrtProfilingEvent,
        ) -> StatusPtr,
    >,
    /// Profiling ends: the EP adds its events since `StartProfiling` to the container.
    pub EndProfiling: unsafe extern "system" fn(
        this_ptr: *mut OrtEpProfilerImpl,
        events_container: *mut OrtProfilingEventsContainer,
    ) -> StatusPtr,
}

/// `OrtEpApi::CreateProfilingEvent` (1.25).
pub type CreateProfilingEventFn = unsafe extern "system" fn(
    category: OrtProfilingEventCategory,
    process_id: i32,
    thread_id: i32,
    event_name: *const c_char,
    timestamp_us: i64,
    duration_us: i64,
    arg_keys: *const *const c_char,
    arg_values: *const *const c_char,
    num_args: usize,
    out: *mut *mut OrtProfilingEvent,
) -> StatusPtr;

/// `OrtEpApi::ReleaseProfilingEvent` (1.25).
pub type ReleaseProfilingEventFn = unsafe extern "system" fn(event: *mut OrtProfilingEvent);

/// `OrtEpApi::ProfilingEventsContainer_AddEvents` (1.25).
pub type ProfilingEventsContainerAddEventsFn = unsafe extern "system" fn(
    events_container: *mut OrtProfilingEventsContainer,
    events: *const *const OrtProfilingEvent,
    num_events: usize,
) -> StatusPtr;

/// Member indices in the host's `OrtEpApi` of the 1.25 profiling functions (ORT 1.27.1's
/// header: 16 members of 1.22/1.23, 34 of 1.24, then 1.25's op-schema functions before these).
pub mod ep_api_index {
    /// `CreateProfilingEvent`.
    pub const CREATE_PROFILING_EVENT: usize = 65;
    /// `ReleaseProfilingEvent`.
    pub const RELEASE_PROFILING_EVENT: usize = 66;
    /// `ProfilingEventsContainer_AddEvents`.
    pub const PROFILING_EVENTS_CONTAINER_ADD_EVENTS: usize = 72;
}

/// `OrtNodeFusionOptions` (since 1.23), passed to `EpGraphSupportInfo_AddNodesToFuse`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct OrtNodeFusionOptions {
    /// ORT API version the caller was built for.
    pub ort_version_supported: u32,
    /// When true, ORT does not pass constant initializers to the fused node as inputs (the EP
    /// keeps its own copy, read in `Compile`).
    pub drop_constant_initializers: bool,
}

/// `OrtNodeComputeInfo` (since 1.23): the compute functions of one compiled fused node.
#[repr(C)]
pub struct OrtNodeComputeInfo {
    /// ORT API version the implementation was built for.
    pub ort_version_supported: u32,
    /// Creates the per-node state passed to `Compute`.
    pub CreateState: unsafe extern "system" fn(
        this_ptr: *mut OrtNodeComputeInfo,
        compute_context: *mut OrtNodeComputeContext,
        compute_state: *mut *mut c_void,
    ) -> StatusPtr,
    /// Runs the fused node.
    pub Compute: unsafe extern "system" fn(
        this_ptr: *mut OrtNodeComputeInfo,
        compute_state: *mut c_void,
        kernel_context: *mut OrtKernelContext,
    ) -> StatusPtr,
    /// Releases the state from `CreateState`.
    pub ReleaseState:
        unsafe extern "system" fn(this_ptr: *mut OrtNodeComputeInfo, compute_state: *mut c_void),
}

/// `OrtEpApi` as of 1.23: functions ORT offers to EP implementations (`OrtApi::GetEpApi`).
///
/// Only the 1.22/1.23 prefix is declared; newer ORTs append members after it.
#[repr(C)]
pub struct OrtEpApi {
    /// Creates an `OrtEpDevice` for a factory and a hardware device (1.22).
    pub CreateEpDevice: unsafe extern "system" fn(
        ep_factory: *mut OrtEpFactory,
        hardware_device: *const OrtHardwareDevice,
        ep_metadata: *const OrtKeyValuePairs,
        ep_options: *const OrtKeyValuePairs,
        ep_device: *mut *mut OrtEpDevice,
    ) -> StatusPtr,
    /// Releases an `OrtEpDevice` (1.22).
    pub ReleaseEpDevice: unsafe extern "system" fn(input: *mut OrtEpDevice),
    /// Claims a group of nodes to be fused into one compiled node (1.23).
    pub EpGraphSupportInfo_AddNodesToFuse: unsafe extern "system" fn(
        graph_support_info: *mut OrtEpGraphSupportInfo,
        nodes: *const *const OrtNode,
        num_nodes: usize,
        node_fusion_options: *const OrtNodeFusionOptions,
    ) -> StatusPtr,
    /// Claims one node to run with a registered kernel (1.23).
    pub EpGraphSupportInfo_AddSingleNode: unsafe extern "system" fn(
        graph_support_info: *mut OrtEpGraphSupportInfo,
        node: *const OrtNode,
    ) -> StatusPtr,
    /// The fused node's name, valid during `CreateState` (1.23).
    pub NodeComputeContext_NodeName:
        unsafe extern "system" fn(context: *const OrtNodeComputeContext) -> *const c_char,
    /// Registers allocator memory info with an `OrtEpDevice` (1.23).
    pub EpDevice_AddAllocatorInfo: unsafe extern "system" fn(
        ep_device: *mut OrtEpDevice,
        allocator_memory_info: *const OrtMemoryInfo,
    ) -> StatusPtr,
    /// The memory device of a memory info (1.23).
    pub MemoryInfo_GetMemoryDevice:
        unsafe extern "system" fn(memory_info: *const OrtMemoryInfo) -> *const OrtMemoryDevice,
    /// The memory device of a tensor value (1.23).
    pub Value_GetMemoryDevice:
        unsafe extern "system" fn(value: *const OrtValue) -> *const OrtMemoryDevice,
    /// Memory-device equality (1.23).
    pub MemoryDevice_AreEqual:
        unsafe extern "system" fn(a: *const OrtMemoryDevice, b: *const OrtMemoryDevice) -> bool,
    /// Memory-device type (1.23).
    pub MemoryDevice_GetDeviceType:
        unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> OrtMemoryInfoDeviceType,
    /// Memory type (1.23).
    pub MemoryDevice_GetMemoryType:
        unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> OrtDeviceMemoryType,
    /// Vendor id (1.23).
    pub MemoryDevice_GetVendorId:
        unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> u32,
    /// Device id (1.23).
    pub MemoryDevice_GetDeviceId:
        unsafe extern "system" fn(memory_device: *const OrtMemoryDevice) -> u32,
    /// The `OrtSyncStreamImpl` behind a stream (1.23).
    pub SyncStream_GetImpl:
        unsafe extern "system" fn(stream: *const OrtSyncStream) -> *const OrtSyncStreamImpl,
    /// Current sync id of a stream (1.23).
    pub SyncStream_GetSyncId: unsafe extern "system" fn(stream: *const OrtSyncStream) -> u64,
    /// Sync id of the last wait between two streams (1.23).
    pub GetSyncIdForLastWaitOnSyncStream: unsafe extern "system" fn(
        producer_stream: *const OrtSyncStream,
        consumer_stream: *const OrtSyncStream,
    ) -> u64,
}

/// `OrtEp` as of 1.25: one execution-provider instance (one per session).
#[repr(C)]
pub struct OrtEp {
    /// ORT API version the implementation was built for (1.22).
    pub ort_version_supported: u32,
    /// The EP name; must equal the factory's name (1.22).
    pub GetName: unsafe extern "system" fn(this_ptr: *const OrtEp) -> *const c_char,
    /// Claims nodes of a graph (1.23).
    pub GetCapability: unsafe extern "system" fn(
        this_ptr: *mut OrtEp,
        graph: *const OrtGraph,
        graph_support_info: *mut OrtEpGraphSupportInfo,
    ) -> StatusPtr,
    /// Compiles the claimed groups (1.23).
    pub Compile: unsafe extern "system" fn(
        this_ptr: *mut OrtEp,
        graphs: *mut *const OrtGraph,
        fused_nodes: *mut *const OrtNode,
        count: usize,
        node_compute_infos: *mut *mut OrtNodeComputeInfo,
        ep_context_nodes: *mut *mut OrtNode,
    ) -> StatusPtr,
    /// Releases compute infos made by `Compile` (1.23).
    pub ReleaseNodeComputeInfos: unsafe extern "system" fn(
        this_ptr: *mut OrtEp,
        node_compute_infos: *mut *mut OrtNodeComputeInfo,
        num_node_compute_infos: usize,
    ),
    /// Preferred data layout; optional (1.23).
    pub GetPreferredDataLayout: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            preferred_data_layout: *mut OrtEpDataLayout,
        ) -> StatusPtr,
    >,
    /// Per-op layout conversion preference; optional (1.23).
    pub ShouldConvertDataLayoutForOp: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            domain: *const c_char,
            op_type: *const c_char,
            target_data_layout: OrtEpDataLayout,
            should_convert: *mut c_int,
        ) -> StatusPtr,
    >,
    /// Dynamic options; optional (1.23).
    pub SetDynamicOptions: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            option_keys: *const *const c_char,
            option_values: *const *const c_char,
            num_options: usize,
        ) -> StatusPtr,
    >,
    /// Run start notification; optional (1.23).
    pub OnRunStart: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            run_options: *const OrtRunOptions,
        ) -> StatusPtr,
    >,
    /// Run end notification; optional (1.23).
    pub OnRunEnd: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            run_options: *const OrtRunOptions,
            sync_stream: bool,
        ) -> StatusPtr,
    >,
    /// Per-session allocator; optional (1.23).
    pub CreateAllocator: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            memory_info: *const OrtMemoryInfo,
            allocator: *mut *mut OrtAllocator,
        ) -> StatusPtr,
    >,
    /// Per-session sync stream; optional (1.23).
    pub CreateSyncStreamForDevice: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            memory_device: *const OrtMemoryDevice,
            stream: *mut *mut OrtSyncStreamImpl,
        ) -> StatusPtr,
    >,
    /// Compatibility string for compiled (EPContext) models; optional (1.23).
    pub GetCompiledModelCompatibilityInfo: Option<
        unsafe extern "system" fn(this_ptr: *mut OrtEp, graph: *const OrtGraph) -> *const c_char,
    >,
    /// Kernel registry of a kernel-based EP; optional, null for a compiling EP (1.24).
    pub GetKernelRegistry: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            kernel_registry: *mut *const c_void,
        ) -> StatusPtr,
    >,
    /// Whether ORT may call `Run` on a session concurrently; optional, null means yes (1.24).
    pub IsConcurrentRunSupported: Option<
        unsafe extern "system" fn(this_ptr: *mut OrtEp, is_supported: *mut bool) -> StatusPtr,
    >,
    /// Blocks until the device finished what was asked of it; optional (1.25).
    pub Sync: Option<unsafe extern "system" fn(this_ptr: *mut OrtEp) -> StatusPtr>,
    /// A new profiler for ORT's profiling; optional, null means none (1.25).
    pub CreateProfiler: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEp,
            profiler: *mut *mut OrtEpProfilerImpl,
        ) -> StatusPtr,
    >,
}

/// The newest version whose `OrtEp` shape this crate implements (1.25: 1.24's members plus
/// `Sync` and `CreateProfiler`).
pub const ORT_EP_VERSION: u32 = 25;

/// The version `OrtEp` declares to a host of minor version `host_minor`: the host's own
/// version, but never above the implemented shape ([`ORT_EP_VERSION`]) nor below 1.24, which
/// ORT 1.23 accepts (measured; it reads only its own members). A host reads only the members
/// of the declared version, so a 1.24 host never looks for `CreateProfiler`.
pub const fn ep_version_for_host(host_minor: u32) -> u32 {
    if host_minor < 24 {
        24
    } else if host_minor > ORT_EP_VERSION {
        ORT_EP_VERSION
    } else {
        host_minor
    }
}

/// `OrtEpFactory` as of 1.23: creates EPs for the devices it supports.
#[repr(C)]
pub struct OrtEpFactory {
    /// ORT API version the implementation was built for (1.22).
    pub ort_version_supported: u32,
    /// EP name (1.22).
    pub GetName: unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> *const c_char,
    /// EP vendor (1.22).
    pub GetVendor: unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> *const c_char,
    /// Fills `ep_devices` with the devices this EP can use (1.22).
    pub GetSupportedDevices: unsafe extern "system" fn(
        this_ptr: *mut OrtEpFactory,
        devices: *const *const OrtHardwareDevice,
        num_devices: usize,
        ep_devices: *mut *mut OrtEpDevice,
        max_ep_devices: usize,
        num_ep_devices: *mut usize,
    ) -> StatusPtr,
    /// Creates an EP for a session (1.22).
    pub CreateEp: unsafe extern "system" fn(
        this_ptr: *mut OrtEpFactory,
        devices: *const *const OrtHardwareDevice,
        ep_metadata_pairs: *const *const OrtKeyValuePairs,
        num_devices: usize,
        session_options: *const OrtSessionOptions,
        logger: *const OrtLogger,
        ep: *mut *mut OrtEp,
    ) -> StatusPtr,
    /// Releases an EP from `CreateEp` (1.22).
    pub ReleaseEp: unsafe extern "system" fn(this_ptr: *mut OrtEpFactory, ep: *mut OrtEp),
    /// PCI vendor id of the EP vendor (1.23).
    pub GetVendorId: unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> u32,
    /// EP version, semver (1.23).
    pub GetVersion: unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> *const c_char,
    /// Compiled-model compatibility check; optional (1.23).
    pub ValidateCompiledModelCompatibilityInfo: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            devices: *const *const OrtHardwareDevice,
            num_devices: usize,
            compatibility_info: *const c_char,
            model_compatibility: *mut OrtCompiledModelCompatibility,
        ) -> StatusPtr,
    >,
    /// Shared allocator for a registered memory info (1.23).
    pub CreateAllocator: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            memory_info: *const OrtMemoryInfo,
            allocator_options: *const OrtKeyValuePairs,
            allocator: *mut *mut OrtAllocator,
        ) -> StatusPtr,
    >,
    /// Releases an allocator from `CreateAllocator` (1.23).
    pub ReleaseAllocator: Option<
        unsafe extern "system" fn(this_ptr: *mut OrtEpFactory, allocator: *mut OrtAllocator),
    >,
    /// Creates the data-transfer implementation; may set its out pointer to null (1.23).
    pub CreateDataTransfer: unsafe extern "system" fn(
        this_ptr: *mut OrtEpFactory,
        data_transfer: *mut *mut OrtDataTransferImpl,
    ) -> StatusPtr,
    /// Whether the EPs are stream aware; optional (1.23).
    pub IsStreamAware: Option<unsafe extern "system" fn(this_ptr: *const OrtEpFactory) -> bool>,
    /// Sync stream outside a session; optional (1.23).
    pub CreateSyncStreamForDevice: Option<
        unsafe extern "system" fn(
            this_ptr: *mut OrtEpFactory,
            memory_device: *const OrtMemoryDevice,
            stream_options: *const OrtKeyValuePairs,
            stream: *mut *mut OrtSyncStreamImpl,
        ) -> StatusPtr,
    >,
}

/// `into_raw`, `from_raw` and `from_ptr` for a `#[repr(C)]` type `$ty` whose first field is the
/// ORT vtable `$base`: ORT holds the object as a pointer to its vtable.
macro_rules! vtable_object {
    ($ty:ident, $base:ty) => {
        impl $ty {
            /// The vtable pointer handed to ORT.
            pub fn into_raw(self: Box<Self>) -> *mut $base {
                Box::into_raw(self) as *mut $base
            }

            /// Takes back a pointer from `into_raw`.
            ///
            /// # Safety
            /// `p` must come from `into_raw` and not have been freed.
            pub unsafe fn from_raw(p: *mut $base) -> Box<Self> {
                // SAFETY: the vtable is the first field of a #[repr(C)] struct.
                unsafe { Box::from_raw(p as *mut $ty) }
            }

            /// The object behind a pointer ORT hands back.
            ///
            /// # Safety
            /// `p` must be a live pointer from `into_raw`.
            pub(crate) unsafe fn from_ptr<'a>(p: *const $base) -> &'a $ty {
                // SAFETY: as above.
                unsafe { &*(p as *const $ty) }
            }
        }
    };
}
pub(crate) use vtable_object;

/// Asserts that the `fields` of `ty` are consecutive pointer-sized slots from byte `start` and
/// that the struct ends after the last one (the ABI layout tests).
#[cfg(test)]
macro_rules! assert_slots {
    ($ty:ty, from $start:expr, [$($field:ident),+ $(,)?]) => {{
        let mut at = $start;
        $(
            assert_eq!(std::mem::offset_of!($ty, $field), at, stringify!($field));
            at += std::mem::size_of::<*const ()>();
        )+
        assert_eq!(std::mem::size_of::<$ty>(), at, "size of {}", stringify!($ty));
    }};
}
#[cfg(test)]
pub(crate) use assert_slots;

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;

    const P: usize = size_of::<*const ()>();

    /// Offset of the `i`-th function pointer after a leading `u32` (padded to pointer size).
    const fn slot(i: usize) -> usize {
        P + i * P
    }

    #[test]
    fn ep_factory_layout_matches_1_23() {
        assert_eq!(offset_of!(OrtEpFactory, ort_version_supported), 0);
        assert_slots!(OrtEpFactory, from slot(0), [
            GetName,
            GetVendor,
            GetSupportedDevices,
            CreateEp,
            ReleaseEp,
            GetVendorId,
            GetVersion,
            ValidateCompiledModelCompatibilityInfo,
            CreateAllocator,
            ReleaseAllocator,
            CreateDataTransfer,
            IsStreamAware,
            CreateSyncStreamForDevice,
        ]);
    }

    #[test]
    fn ep_versions_follow_the_host() {
        assert_eq!(ep_version_for_host(23), 24);
        assert_eq!(ep_version_for_host(24), 24);
        assert_eq!(ep_version_for_host(25), 25);
        assert_eq!(ep_version_for_host(31), 25);
        assert_eq!(ep_version_for_host(32), 25);
    }

    #[test]
    fn profiler_layout_matches_1_25() {
        assert_slots!(OrtEpProfilerImpl, from slot(0), [
            Release,
            StartProfiling,
            StartEvent,
            StopEvent,
            EndProfiling,
        ]);
    }

    #[test]
    fn ep_layout_matches_1_25() {
        assert_slots!(OrtEp, from slot(0), [
            GetName,
            GetCapability,
            Compile,
            ReleaseNodeComputeInfos,
            GetPreferredDataLayout,
            ShouldConvertDataLayoutForOp,
            SetDynamicOptions,
            OnRunStart,
            OnRunEnd,
            CreateAllocator,
            CreateSyncStreamForDevice,
            GetCompiledModelCompatibilityInfo,
            GetKernelRegistry,
            IsConcurrentRunSupported,
            Sync,
            CreateProfiler,
        ]);
    }

    #[test]
    fn ep_api_layout_matches_1_23() {
        assert_slots!(OrtEpApi, from 0, [
            CreateEpDevice,
            ReleaseEpDevice,
            EpGraphSupportInfo_AddNodesToFuse,
            EpGraphSupportInfo_AddSingleNode,
            NodeComputeContext_NodeName,
            EpDevice_AddAllocatorInfo,
            MemoryInfo_GetMemoryDevice,
            Value_GetMemoryDevice,
            MemoryDevice_AreEqual,
            MemoryDevice_GetDeviceType,
            MemoryDevice_GetMemoryType,
            MemoryDevice_GetVendorId,
            MemoryDevice_GetDeviceId,
            SyncStream_GetImpl,
            SyncStream_GetSyncId,
            GetSyncIdForLastWaitOnSyncStream,
        ]);
    }

    #[test]
    fn small_struct_layouts_match_1_23() {
        assert_eq!(
            offset_of!(OrtNodeFusionOptions, drop_constant_initializers),
            4
        );
        assert_eq!(size_of::<OrtNodeFusionOptions>(), 8);

        assert_slots!(OrtNodeComputeInfo, from slot(0), [CreateState, Compute, ReleaseState]);
        assert_slots!(OrtDataTransferImpl, from slot(0), [Release, CanCopy, CopyTensors]);

        assert_eq!(offset_of!(OrtSyncNotificationImpl, WaitOnHost), slot(3));
        assert_eq!(size_of::<OrtSyncNotificationImpl>(), slot(4));
        assert_eq!(offset_of!(OrtSyncStreamImpl, OnSessionRunEnd), slot(4));
        assert_eq!(size_of::<OrtSyncStreamImpl>(), slot(5));
    }

    #[test]
    fn option_fn_pointers_are_pointer_sized() {
        type F = Option<unsafe extern "system" fn(*const OrtEpFactory) -> bool>;
        assert_eq!(size_of::<F>(), P);
    }

    #[test]
    fn ort_api_matches_1_23() {
        // Numbers from ORT 1.23.2's onnxruntime_c_api.h compiled with gcc (x86_64): OrtApi has
        // 390 members; a few members this crate calls, by index.
        use ort_sys::OrtApi;
        assert_eq!(size_of::<OrtApi>(), 390 * P);
        assert_eq!(offset_of!(OrtApi, KernelContext_GetOutput), 91 * P);
        assert_eq!(offset_of!(OrtApi, ReadOpAttr), 272 * P);
        assert_eq!(offset_of!(OrtApi, GetEpApi), 317 * P);
        assert_eq!(offset_of!(OrtApi, Graph_GetNodes), 345 * P);
        assert_eq!(offset_of!(OrtApi, GetSessionOptionsConfigEntries), 379 * P);
    }
}
