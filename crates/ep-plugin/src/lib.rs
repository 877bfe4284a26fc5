//! `MLXExecutionProvider`: an ONNX Runtime plugin execution provider that runs ONNX subgraphs
//! on MLX.
//!
//! Built as `libonnxruntime_mlx_ep.so` (`.dylib` on macOS), loaded into a stock ONNX Runtime
//! 1.23 or newer:
//!
//! ```python
//! import onnxruntime as ort
//! ort.register_execution_provider_library("MLXExecutionProvider", "libonnxruntime_mlx_ep.so")
//! sess = ort.InferenceSession("model.onnx",
//!                             providers=["MLXExecutionProvider", "CPUExecutionProvider"])
//! ```
//!
//! This crate is the thin shell between ORT and the rest of the workspace: the plugin-EP ABI
//! ([`abi`]), the exported `CreateEpFactories`/`ReleaseEpFactory`, the factory and EP vtables,
//! reading `OrtGraph`s into [`onnx_ir`] ([`graph_reader`]), and kernel-context I/O. What to
//! claim and how to run it is `plan`'s and `runtime`'s business.
//!
//! Version negotiation: the library asks the host for `OrtApi` version 23 and declares 23 in
//! every struct it hands over, whatever newer version the host is (ORT reads only the members
//! that existed at the declared version), except `OrtEp`, which declares the host's version up
//! to 1.25 (`abi::ep_version_for_host`) for `IsConcurrentRunSupported` and `CreateProfiler`
//! (the EP's events in ORT's profile, see `profiler`). Hosts older than 1.23 get a clear error.
//!
//! Environment switches: [`env_vars::ENV_VARS`] lists every one (the EP's, the build's and the
//! tools'), and `docs/usage.md` shows that list; among them `ORTMLX_LOG=error|warn|info|debug|trace`
//! (stderr logging), `ORTMLX_LOG_CLAIMS=1` (each node's claim or decline with its reason),
//! `ORTMLX_TRACE=<path>` (a Chrome-trace JSON of capability, compile and compute; see [`trace`]).
//!
//! Compiled models: with `ep.context_enable=1` each fused group becomes an `EPContext` node
//! carrying its lowered plan, which a later session loads without lowering (see [`context`]).
//!
//! When fewer than all of a session's nodes run on MLX, the EP logs one warning through the
//! session's ORT logger at its first run: `MLXExecutionProvider: N of M nodes on MLX; top
//! reasons: ...`.
//!
//! Device memory ([`device_memory`]): each EP device registers the `MLX` memory info, whose
//! allocator lends ORT MLX buffers; a fused node reads inputs in that memory in place and its
//! outputs become ORT's allocations there, so a KV cache bound with IOBinding is never copied.
//!
//! EP options (session config entries `ep.mlxexecutionprovider.<key>`, see [`options`]):
//! `device` = `cpu`|`gpu`, `compile` = `on`|`off`|`auto`, `share_initializers` = `on`|`off`.

pub mod abi;
pub mod api;
mod compute;
pub mod config;
pub mod context;
pub mod device_memory;
/// Every environment variable of the project, with who reads it and what it does: the one
/// list `cargo xtask docs` turns into the table of `docs/usage.md`.
pub mod env_vars;
mod ep;
pub mod error;
mod factory;
pub mod graph_reader;
mod logging;
#[cfg(test)]
mod mock_ort;
pub mod options;
mod profiler;
mod strings;
mod summary;
pub mod trace;

use std::ffi::c_char;

use ort_sys::{OrtApiBase, OrtErrorCode, OrtLogger};

use crate::abi::{OrtEpFactory, StatusPtr};
use crate::api::{cstr_lossy, make_status};
use crate::error::{EpError, guard};
use crate::factory::Factory;

/// Entry point ORT calls after loading the library: creates this library's one factory.
///
/// # Safety
/// Called by ORT with valid pointers: `factories` has `max_factories` slots.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn CreateEpFactories(
    registered_name: *const c_char,
    ort_api_base: *const OrtApiBase,
    _default_logger: *const OrtLogger,
    factories: *mut *mut OrtEpFactory,
    max_factories: usize,
    num_factories: *mut usize,
) -> StatusPtr {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        // The environment is read here, once, before anything acts on it.
        config::Config::get();
        logging::init();
        trace::init();
        if !num_factories.is_null() {
            // SAFETY: ORT's out-pointer.
            unsafe { *num_factories = 0 };
        }
        // SAFETY: ORT's API base.
        let api = match unsafe { api::negotiate(ort_api_base) } {
            Ok(api) => api,
            Err((err, fallback)) => {
                log::error!("{err}");
                return match fallback {
                    Some(ort) => make_status(ort, OrtErrorCode::ORT_NOT_IMPLEMENTED, &err.message),
                    None => std::ptr::null_mut(),
                };
            }
        };
        guard("CreateEpFactories", || {
            if factories.is_null() || num_factories.is_null() || max_factories < 1 {
                return Err(EpError::invalid_argument("no room for a factory"));
            }
            runtime::init().map_err(|e| EpError::new(format!("MLX runtime init failed: {e}")))?;
            // SAFETY: NUL-terminated from ORT, or null.
            let name = unsafe { cstr_lossy(registered_name) };
            log::info!(
                "CreateEpFactories: registered as '{name}', gpu backend available: {}",
                runtime::gpu_available()
            );
            // SAFETY: ORT's array and count, checked above.
            unsafe {
                *factories = Factory::new(api, name).into_raw();
                *num_factories = 1;
            }
            Ok(())
        })
    }))
    .unwrap_or(std::ptr::null_mut())
}

/// Plans this library lowered from ONNX nodes so far in the process (`plan::build_plan`);
/// stays unchanged while sessions load EPContext models. For tests and tools (`ctypes`).
#[unsafe(no_mangle)]
pub extern "C" fn OrtMlxEp_LoweringCount() -> u64 {
    context::counters::lowerings()
}

/// Plans this library loaded from EPContext caches so far in the process.
#[unsafe(no_mangle)]
pub extern "C" fn OrtMlxEp_ContextLoadCount() -> u64 {
    context::counters::context_loads()
}

/// Releases a factory made by [`CreateEpFactories`].
///
/// # Safety
/// `factory` must come from [`CreateEpFactories`] and be released once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ReleaseEpFactory(factory: *mut OrtEpFactory) -> StatusPtr {
    guard("ReleaseEpFactory", || {
        if !factory.is_null() {
            // SAFETY: made by CreateEpFactories.
            drop(unsafe { Factory::from_raw(factory) });
        }
        trace::flush();
        Ok(())
    })
}
